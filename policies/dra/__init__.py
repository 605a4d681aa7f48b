"""Dynamic Resource Allocation (resource.k8s.io/v1): device selection with
kube-scheduler's semantics. Pure: no I/O."""
