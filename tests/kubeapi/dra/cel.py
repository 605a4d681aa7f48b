"""CEL device selectors (validateSelector / validateCELSelector): `cel` is required, the
expression at most 10 KiB (resource.CELSelectorExpressionMaxLength) and it must compile.

The real server compiles the expression in the DRA environment (k8s.io/dynamic-resource-
allocation/cel): `device` with `driver`, `attributes`, `capacity` and
`allowMultipleAllocations`, Kubernetes' CEL libraries (semver, quantity, ...), a type
check (the result must be a bool), and a cost estimate (at most 1,000,000).
EMULATOR GUESS (partial): only the syntax is checked here, with cel-python's parser; an
expression that parses but names an unknown variable, does not return a bool or is too
costly is accepted, where the real server refuses it. The detail of a syntax error is
cel-python's, after the real `compilation failed: ` prefix.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import celpy

from tests.kubeapi.dra.fields import Errors, invalid, required, size, too_long

EXPRESSION_MAX = 10 * 1024
SELECTORS_MAX = 32  # resource.DeviceSelectorsMaxSize
_ENV = celpy.Environment()


@functools.lru_cache(maxsize=1024)
def syntax_problem(expression: str) -> str | None:
    try:
        _ENV.compile(expression)
    except celpy.CELParseError as error:
        where = f"<input>:{error.line}:{error.column}" if error.line else "<input>"
        return f"compilation failed: ERROR: {where}: Syntax error: {error.args[0]}".strip()
    except (RecursionError, Exception) as error:  # the parser must never crash the server
        return f"compilation failed: ERROR: <input>: {type(error).__name__}"
    return None


def selector(value: Mapping[str, Any], path: str, *, stored: bool = False) -> Errors:
    """One DeviceSelector. `stored`: an expression already in storage (an unchanged class
    selector on update) is not compiled again, as the real server compiles it in the more
    lenient stored-expressions environment."""
    cel = value.get("cel")
    if cel is None:
        return [required(f"{path}.cel")]
    expression = cel.get("expression", "")
    where = f"{path}.cel.expression"
    if size(expression) > EXPRESSION_MAX:
        return [too_long(where, EXPRESSION_MAX)]
    if stored:
        return []
    problem = syntax_problem(expression)
    return [invalid(where, expression, problem)] if problem else []
