"""The Kubernetes adapter: the only part of the scheduler that talks to the API server.

`client` builds the HTTP client (kubeconfig or in-cluster service account, client-side
rate limit, raw-JSON requests); `informer` keeps the scheduling core current with
list/watch. Nothing here decides placement.
"""
