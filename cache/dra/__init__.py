"""Dynamic Resource Allocation (resource.k8s.io/v1) as the scheduler models it.

ResourceSlices (devices a driver publishes, per pool), DeviceClasses and ResourceClaims
as slim records (`slices.py`, `classes.py`, `claims.py`), pools assembled from slices
as kube-scheduler's allocator assembles them (`pools.py`), which devices a node reaches
(`nodes.py`), and `DraCache` (`store.py`): the store fed by watch events, which devices
are allocated, and the claims this scheduler is allocating (assume / confirm / forget).

Pure: no I/O, no clock. Nothing here raises on a user's object: what cannot be read is
a problem on its record. The allocator that uses this model is policies/dra/.
"""
