"""Runtime cost, in cel-go's units, so that limits.MAX_EVALUATION_COST means what it
means in kube-scheduler (interpreter/runtimecost.go, k8s.io/apiserver/pkg/cel/library
cost.go). Roughly: reading a variable, a field or an index costs 1, a function call
1, a literal 0; a call on a string, a list or a map costs in proportion to its size
(one unit per ten characters or per element: StringTraversalCostFactor 0.1); a
regular expression costs string size x pattern size / 4; a comprehension pays for
every step. The meter is checked wherever the cost depends on data (sizes, loop
steps), so the work done past the limit is bounded by the expression's length.
"""

from __future__ import annotations

import math

from policies.dra.cel.errors import CelCostExceeded

STRING_TRAVERSAL_FACTOR = 0.1
REGEX_LENGTH_FACTOR = 0.25
LIST_CREATE_COST = 10
MAP_CREATE_COST = 30


def traversal(size: int) -> int:
    """Cost of reading a string (or list) of `size` characters once."""
    return math.ceil(size * STRING_TRAVERSAL_FACTOR)


def regex(text_size: int, pattern_size: int) -> int:
    return math.ceil((1 + text_size) * STRING_TRAVERSAL_FACTOR) * math.ceil(
        pattern_size * REGEX_LENGTH_FACTOR
    )


class Meter:
    """The cost spent by one evaluation, and its limit."""

    __slots__ = ("limit", "spent")

    def __init__(self, limit: int) -> None:
        self.spent = 0
        self.limit = limit

    def charge(self, units: int) -> None:
        """Add units, and stop the evaluation once they pass the limit. Called before
        the work they pay for, so that no work past the limit is done."""
        self.spent += units
        if self.spent > self.limit:
            raise CelCostExceeded(f"operation cancelled: actual cost limit exceeded ({self.limit})")
