"""Placement policies: pure filters, scores and device choice. A policy never mutates
the cache: it reads a pod and a node record and answers."""
