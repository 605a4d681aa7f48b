"""The scheduler, in layers; each imports only those below it (docs/architecture.md):

- `cli/`: entry points (the `gang-scheduler` command line, `simulate`, `demo`);
- `kube/`, `sim/`, `agent/`: adapters to Kubernetes, to the simulator's virtual
  cluster, and the node agent;
- `process/`: configuration, metrics, HTTP endpoints, logs, signing;
- `cycle/`: one scheduling cycle (the core) and event-driven requeue;
- `sharing/`: quotas, borrowing, preemption, reclaim, the starvation guard;
- `planner/`: the whole-gang planner;
- `gangs/`: gangs, their roles and their queue.
"""
