"""The cluster model: nodes, GPUs, pods and PodGroups as slim records, with no I/O.

`ClusterCache` applies watch events and assumed plans; `Snapshot` is what one
scheduling cycle reads.
"""
