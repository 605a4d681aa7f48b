"""The simulator: cluster traces replayed through the very same scheduling core
(cache, gang assembly, queue, planner, policies) that runs against Kubernetes.

- `scheduler.sim.openb`: the openb trace (Alibaba cluster-trace-gpu-v2023, the FGD
  paper's data): loading, the paper's arrival order with clones, readings.
- `scheduler.sim.replay`: one replay of an arrival order through `SchedulingCore`.
- `scheduler.sim.profiles`: the openb experiment's policies as profiles of the planner.
- `scheduler.sim.workload`, `scheduler.sim.cluster_spec`: learning-task workloads (YAML,
  or generated from published cluster statistics) and cluster files (node pools with
  racks and GPU link matrices, or the openb node CSV).
- `scheduler.sim.timeline`: learning tasks over time on a virtual clock.
- `scheduler.sim.report`: tables, the JSON objects and the plots of both replays.
- `scheduler/sim/data/`: the bundled trace files, example cluster and workload.

docs/simulator.md says how to run it and where each rule of the protocol comes from.
"""
