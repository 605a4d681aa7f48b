"""The node agent (`gang-scheduler node-agent`): discovers a node's GPUs with NVML and
publishes them on its Node object (docs/node-agent.md).

- `nvml`: the NVML calls the agent makes (a Protocol) and their pynvml implementation;
- `discovery`: devices, pairwise link levels, health and GFD-style labels from NVML;
- `publisher`: the Node patch, written only when something changed, on an interval.
"""
