"""The syntax tree of an expression. Each node knows its source offset (for messages)
and its depth, which the parser bounds (limits.MAX_AST_DEPTH) so that walking a tree
never nears Python's recursion limit."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Node:
    pos: int
    depth: int = field(init=False, default=1)


@dataclass(frozen=True, slots=True)
class Literal(Node):
    value: object = None


@dataclass(frozen=True, slots=True)
class Ident(Node):
    name: str = ""


@dataclass(frozen=True, slots=True)
class Select(Node):
    """`operand.field`, or `has(operand.field)` when test_only."""

    operand: Node = None  # type: ignore[assignment]
    field: str = ""
    test_only: bool = False


@dataclass(frozen=True, slots=True)
class Call(Node):
    """A function (`size(x)`), a method (`x.size()`: target is x) or an operator,
    named as cel-go names them (`_+_`, `_==_`, `!_`, `-_`, `_[_]`, `@in`...)."""

    function: str = ""
    target: Node | None = None
    args: tuple[Node, ...] = ()


@dataclass(frozen=True, slots=True)
class ListLiteral(Node):
    elements: tuple[Node, ...] = ()


@dataclass(frozen=True, slots=True)
class MapLiteral(Node):
    entries: tuple[tuple[Node, Node], ...] = ()


@dataclass(frozen=True, slots=True)
class Comprehension(Node):
    """A macro over a list or map: all, exists, exists_one, map, filter and the
    two-variable forms (ext.TwoVarComprehensions); `cel.bind` is kind "bind" (its
    range is the bound value). predicate is the filter of a three-argument map."""

    kind: str = ""
    range: Node = None  # type: ignore[assignment]
    var: str = ""
    var2: str | None = None
    body: Node = None  # type: ignore[assignment]
    predicate: Node | None = None


def children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Select):
        return (node.operand,)
    if isinstance(node, Call):
        return ((node.target,) if node.target is not None else ()) + node.args
    if isinstance(node, ListLiteral):
        return node.elements
    if isinstance(node, MapLiteral):
        return tuple(part for entry in node.entries for part in entry)
    if isinstance(node, Comprehension):
        extra = (node.predicate,) if node.predicate is not None else ()
        return (node.range, node.body, *extra)
    return ()


def with_depth(node: Node) -> Node:
    """Set a new node's depth from its children (called once, by the parser)."""
    below = children(node)
    object.__setattr__(node, "depth", 1 + max((child.depth for child in below), default=0))
    return node
