"""The process around the cycle: configuration, metrics, the HTTP endpoints, logging,
the queue report, assignment signing, start-up checks and version.

Imports the cycle below it; the adapters (kube/, sim/, agent/) and the command line
import it.
"""
