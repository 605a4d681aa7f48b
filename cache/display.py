"""User values quoted in problem messages, kept short and safe to format."""

from __future__ import annotations


def shown(value: object, width: int = 40) -> str:
    """`value` for a message: repr() of an int beyond 4,300 digits raises, and a long
    string would flood the object's events, so both are shortened."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**31:
        return "(a number beyond int32)"
    text = repr(value)
    return text if len(text) <= width else text[:width] + "..."
