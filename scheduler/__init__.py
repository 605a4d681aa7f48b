"""The scheduling core: gang assembly, the gang queue and the planner (pure, no I/O),
plus the adapters that wire them to Kubernetes (`scheduler/kube`) and to the simulator
(`scheduler/sim`)."""
