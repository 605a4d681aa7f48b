"""Regular expressions with RE2's syntax and its linear-time guarantee.

CEL's `matches` (and Kubernetes' `find`, `findAll`) use RE2 (Go's regexp). Python's
`re` backtracks: `(a|a)*b` against 40 "a"s would stall the scheduler for hours. The
google-re2 binding runs the same engine as Kubernetes, refuses what RE2 refuses
(backreferences, lookaround), and matches in time linear in the input.
"""

from __future__ import annotations

import functools
from typing import Any

import re2

from policies.dra.cel.errors import CelEvaluationError

# RE2 refuses programs beyond its memory budget; patterns longer than the longest
# expression can only come from concatenation at run time.
MAX_PATTERN_LENGTH = 10 * 1024


def check_pattern(pattern: str) -> str | None:
    """Why RE2 refuses this pattern, or None if it compiles."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        return f"pattern longer than {MAX_PATTERN_LENGTH} characters"
    try:
        _compiled(pattern)
    except CelEvaluationError as error:
        return error.message
    return None


_OPTIONS = re2.Options()
# A tenant's bad pattern is answered in the selector's error, not logged by RE2 itself.
_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except Exception as error:  # re2.error, and anything the binding raises on bad input
        reason = error.args[0] if error.args else error
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise CelEvaluationError(f"invalid regular expression {pattern[:60]!r}: {reason}") from None


def compiled(pattern: str) -> Any:
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise CelEvaluationError(f"regular expression longer than {MAX_PATTERN_LENGTH} characters")
    return _compiled(pattern)
