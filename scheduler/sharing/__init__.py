"""Sharing the cluster: quotas and borrowing, priority preemption and reclaim, the victim
search, and the starvation guard.

Built on the planner (a what-if plan decides whether victims would make room); the
scheduling cycle (scheduler.cycle) calls into it.
"""
