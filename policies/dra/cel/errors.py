"""The only exceptions the CEL package lets out.

Every failure, whatever the expression or the device, is one of these: a tenant's
expression can never make the scheduler see a Python exception of another kind.
"""

from __future__ import annotations


class CelError(Exception):
    """Base of every error of a CEL selector."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CelCompileError(CelError):
    """The expression is refused before it ever runs: syntax, types, length, depth,
    a result that is not bool, or a feature this scheduler does not implement."""


class CelEvaluationError(CelError):
    """A runtime error of one evaluation (kube-scheduler: "CEL runtime error"): a
    missing map key or attribute, an overflow, a division by zero, a bad quantity..."""


class CelCostExceeded(CelError):
    """The evaluation spent more than its cost budget (kube-scheduler: "actual cost
    limit exceeded") and was stopped at that point."""
