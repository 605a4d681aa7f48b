"""The node agent (`gang-scheduler node-agent`): discovers a node's GPUs with NVML and
publishes them on its Node object (docs/node-agent.md), and serves `nvidia.com/vgpu` to
the kubelet as a device plugin (docs/device-plugin.md).

- `nvml`: the NVML calls the agent makes (a Protocol) and their pynvml implementation;
- `discovery`: devices, pairwise link levels, health and GFD-style labels from NVML;
- `publisher`: the Node patch, written only when something changed, on an interval;
  the `node-agent` command, which also starts the device plugin;
- `kubelet_api`: the kubelet's device plugin API (v1beta1) without generated code;
- `allocation`: which pod an Allocate is for and what its container gets (pure);
- `deviceplugin`: the gRPC server, registration, health and restarts.
"""
