"""Reading a user's YAML with one-line errors: where it broke and why, never a traceback."""

from __future__ import annotations

import yaml


class YamlSyntaxError(ValueError):
    """The text is not YAML; the message says where (line, column) and what is wrong."""


def load_yaml(text: str) -> object:
    """The YAML document in `text`; YamlSyntaxError names the line and the problem."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or "syntax error"
        raise YamlSyntaxError(f"not valid YAML{where}: {problem}") from None
