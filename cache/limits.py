"""Bounds on every number the scheduler reads from text a user (or a node) may write.

Pods, their annotations and PodGroups are written by tenants; node labels and
annotations by node agents and operators. Any of them may carry a number of 5,000
digits (Python's int() refuses more than 4,300), 1e999999, a negative request or a GPU
count of a million that would build a million device records on the event loop. Each
number is therefore checked against the bound below before it is converted or used;
beyond it, the object gets a problem message naming the field and the bound, and the
rest of the cluster is scheduled as usual. docs/conventions.md lists these limits.
"""

from __future__ import annotations

# Kubernetes quantities are int64 in their canonical scale: nothing larger is stored.
MAX_QUANTITY = 2**63 - 1
# A quantity written out: int64 in milli with a suffix needs ~25 characters; anything
# far longer is not one a client would send (and is not parsed digit by digit).
MAX_QUANTITY_TEXT = 64

# GPU devices on one node. The largest single machines ship 16 GPUs; device plugins
# that time-slice advertise a multiple (e.g. 16 x 10 replicas). Beyond this a node's
# GPU count is read as a mistake (or an attack): the node offers no GPU until fixed.
MAX_GPUS_PER_NODE = 256
# NVLink links between two GPUs ("NV<n>" in `nvidia-smi topo -m`; 18 on an H100).
MAX_NVLINK_LINKS = 64
# The node agent's topology annotation: the API server allows 256 KiB for all of an
# object's annotations together; the 256-device topology with links takes ~200 KiB.
MAX_TOPOLOGY_TEXT = 256 * 1024
# GPU memory in MiB a label or the topology may state (2 PiB per device).
MAX_GPU_MEMORY_MIB = 2**31 - 1

# PodGroup spec.minMember and spec.scheduleTimeoutSeconds are int32 in the CRD; the
# min-member annotation is held to the same range.
MAX_INT32 = 2**31 - 1
MIN_INT32 = -(2**31)
# The digits an int32 has (leading zeros aside): longer texts are refused unread.
INT32_DIGITS = 10

# How much of a user's value a problem message quotes.
SHOWN_CHARS = 60


def shown(value: object) -> str:
    """A user's value quoted in a message, shortened: never raises, whatever the value
    (repr of an int beyond 4,300 digits raises; a 1 MB string would flood events)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**SHOWN_CHARS:
        return f"an integer of about {value.bit_length() * 3 // 10} digits"
    if isinstance(value, str):
        text = repr(value[: SHOWN_CHARS + 1])
    elif isinstance(value, (bool, int, float)) or value is None:
        text = repr(value)
    elif isinstance(value, (list, tuple, dict)) and len(value) <= SHOWN_CHARS:
        # Small containers read best as written; one nested too deep, or holding an int
        # repr() refuses, is named by its type.
        try:
            text = repr(value)
        except (ValueError, RecursionError):
            text = f"a {type(value).__name__}"
    else:
        text = f"a {type(value).__name__}"
    if len(text) > SHOWN_CHARS + 2:
        text = text[:SHOWN_CHARS] + "..."
    return text


def small_int(text: str, digits: int) -> int | None:
    """The value of `text` when it is ASCII digits, at most `digits` of them once leading
    zeros are dropped (int() counts those too, and refuses 4,300); None otherwise."""
    if not text.isascii() or not text.isdigit():
        return None
    significant = text.lstrip("0")
    if len(significant) > digits:
        return None
    return int(significant or "0")
