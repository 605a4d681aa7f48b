"""The whole-gang planner: every member of a gang placed against one snapshot, or none.

Imports scheduler.gangs below it, and nothing above it.
"""
