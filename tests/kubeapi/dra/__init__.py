"""resource.k8s.io/v1 (Dynamic Resource Allocation) in the API emulator: ResourceSlice,
DeviceClass, ResourceClaim (with status) and ResourceClaimTemplate, refused where the
Kubernetes 1.36 API server refuses them. strategy.py is the entry point; docs/dra.md
lists what is enforced and what is still a guess."""
