"""One scheduling cycle: the core (pick a gang, plan it, assume the plan, hand it to the
binder; apply cluster events) and which cluster changes wake which waiting gangs.

The top of the pure part: it drives gangs/, planner/ and sharing/ and does no I/O.
"""
