"""Label and field selectors as the Kubernetes API parses and applies them.

Grammar follows k8s.io/apimachinery `labels.Parse` and `fields.ParseSelector`:
label requirements are comma-joined (commas inside `in (...)` lists do not split), and
`key!=v` / `key notin (...)` also match objects that do not carry the label at all.
Field selectors only know `=`, `==` and `!=`, and only on the fields each resource
declares selectable (anything else is a 400 "field label not supported", as the API
answers).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


class SelectorError(ValueError):
    """A selector the API would refuse with 400 BadRequest."""


_LABEL_OPS = ("in", "notin", "exists", "!", "=", "!=", "gt", "lt")
_KEY_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    op: str  # one of _LABEL_OPS ("exists" for `key`, "!" for `!key`)
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        # gt / lt: both sides must be integers, as in apimachinery.
        if not present:
            return False
        try:
            have = int(labels[self.key])
        except ValueError:
            return False
        bound = int(next(iter(self.values)))
        return have > bound if self.op == "gt" else have < bound


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[LabelRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unable to parse requirement: unbalanced ')' in {text!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise SelectorError(f"unable to parse requirement: unbalanced '(' in {text!r}")
    parts.append("".join(current))
    return parts


def _check_key(key: str, text: str) -> str:
    if not _KEY_RE.match(key):
        raise SelectorError(f"unable to parse requirement: invalid label key {key!r} in {text!r}")
    return key


def _parse_requirement(text: str) -> LabelRequirement:
    term = text.strip()
    if not term:
        raise SelectorError("unable to parse requirement: empty requirement")
    set_match = re.match(r"^(\S+)\s+(in|notin)\s*\((.*)\)$", term)
    if set_match:
        key, op, raw_values = set_match.groups()
        values = frozenset(v.strip() for v in raw_values.split(",") if v.strip())
        if not values:
            raise SelectorError(f"unable to parse requirement: {op} needs values in {term!r}")
        return LabelRequirement(_check_key(key, term), op, values)
    if term.startswith("!"):
        return LabelRequirement(_check_key(term[1:].strip(), term), "!")
    for token, op in (("!=", "!="), ("==", "="), ("=", "="), (">", "gt"), ("<", "lt")):
        if token in term:
            key, _, value = term.partition(token)
            value = value.strip()
            if op in ("gt", "lt"):
                try:
                    int(value)
                except ValueError as err:
                    raise SelectorError(
                        f"unable to parse requirement: {value!r} is not an integer"
                    ) from err
            return LabelRequirement(_check_key(key.strip(), term), op, frozenset({value}))
    return LabelRequirement(_check_key(term, term), "exists")


def parse_label_selector(text: str | None) -> LabelSelector:
    if text is None or not text.strip():
        return LabelSelector()
    return LabelSelector(tuple(_parse_requirement(part) for part in _split_top_level(text)))


@dataclass(frozen=True)
class FieldTerm:
    field: str
    negated: bool
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        equal = fields.get(self.field, "") == self.value
        return not equal if self.negated else equal


@dataclass(frozen=True)
class FieldSelector:
    terms: tuple[FieldTerm, ...] = ()

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all(t.matches(fields) for t in self.terms)

    @property
    def empty(self) -> bool:
        return not self.terms

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(t.field for t in self.terms)


def _split_unescaped(text: str, sep: str) -> list[str]:
    """Split on `sep` not preceded by a backslash (fields.ParseSelector escapes)."""
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            current.append("\\" + char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def parse_field_selector(text: str | None) -> FieldSelector:
    if text is None or not text.strip():
        return FieldSelector()
    terms: list[FieldTerm] = []
    for part in _split_unescaped(text, ","):
        if not part:
            continue
        for token, negated in (("!=", True), ("==", False), ("=", False)):
            index = part.find(token)
            if index > 0:
                key = part[:index].strip()
                terms.append(FieldTerm(key, negated, _unescape(part[index + len(token) :])))
                break
        else:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
    return FieldSelector(tuple(terms))
