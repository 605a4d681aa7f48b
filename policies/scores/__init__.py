"""Scores: rate placing a pod on a node (and on its devices) from 0 to 100."""
