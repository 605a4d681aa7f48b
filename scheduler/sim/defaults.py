"""The simulator's names and defaults that `gang-scheduler --help` shows: the bundled
trace files, the arrived load, the seed. Only the standard library here, so that building
the CLI's parser, which every command does, does not import the simulator (issue 13:
`gang-scheduler run` reaches its first bind within 1 s of start-up)."""

from __future__ import annotations

from collections.abc import Mapping

NODE_FILE = "openb_node_list_gpu_node.csv"
# Trace name -> bundled pod file.
TRACES: Mapping[str, str] = {
    "default": "openb_pod_list_default.csv",
    "gpushare40": "openb_pod_list_gpushare40.csv",
    "multigpu50": "openb_pod_list_multigpu50.csv",
    "gpuspec33": "openb_pod_list_gpuspec33.csv",
}
# The FGD paper's arrived GPU load, x the cluster's GPUs.
DEFAULT_LOAD = 1.3
DEFAULT_SEED = 42
# The offered GPU load of a generated workload (--generate), x the cluster's GPUs.
DEFAULT_TIMELINE_LOAD = 0.9
