"""The simulator: cluster traces replayed through the very same scheduling core
(cache, gang assembly, queue, planner, policies) that runs against Kubernetes.

- `scheduler.sim.openb`: the openb trace (Alibaba cluster-trace-gpu-v2023, the FGD
  paper's data): loading, the paper's arrival order with clones, readings.
- `scheduler.sim.replay`: one replay of an arrival order through `SchedulingCore`.
- `scheduler.sim.report`: the table, the JSON object and the plot of a set of replays.
- `scheduler/sim/data/openb/`: the bundled trace files (package data).

docs/simulator.md says how to run it and where each rule of the protocol comes from.
"""
