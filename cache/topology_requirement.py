"""A gang's topology requirement, one model whatever source states it.

Kubernetes' native PodGroup (`spec.schedulingConstraints.topology`), this project's
PodGroup CRD, Kueue's TAS pod-set annotations, KAI-Scheduler's topology constraint and
Volcano's `networkTopology` all say the same few things about where a gang may run; each
source's reader turns its fields into a `TopologyRequirement` (or problems, for a value
it cannot accept) and the planner reads only this model. The mapping, field by field, is
in docs/conventions.md.

Levels are node label keys (`topology.kubernetes.io/zone`, a rack label,
`nvidia.com/gpu.clique`, `kubernetes.io/hostname`): a domain of a level is one value of
that label, and a node without the label is in no domain of that level.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cache.limits import shown

# A label key: an optional DNS-subdomain prefix and "/", then a name of at most 63
# characters, alphanumeric at both ends (apimachinery's IsQualifiedName).
_KEY_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_KEY_PREFIX = re.compile(
    r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


def label_key_problem(key: object, field: str) -> str | None:
    """Why `key` (read from `field`) is not a label key a node could carry, or None."""
    if not isinstance(key, str) or not key:
        return f"{field} must be a node label key, got {shown(key)}"
    prefix, slash, name = key.rpartition("/")
    if slash and not _KEY_PREFIX.match(prefix):
        return f"{field} {shown(key)} has an invalid prefix (a DNS subdomain before '/')"
    if not _KEY_NAME.match(name):
        return (
            f"{field} {shown(key)} is not a label key (at most 63 characters of "
            "[-A-Za-z0-9_.], alphanumeric at both ends)"
        )
    return None


@dataclass(frozen=True, slots=True)
class TopologyFields:
    """The names, in the source's own words, of the fields that stated each part of a
    requirement: what a refusal names (cache/topology_checks.py), so that the same
    contradiction is told in the same words whatever stated it."""

    required: str = "the required level"
    preferred: str = "the preferred levels"
    slice_size: str = "the slice size"
    slice_key: str = "the slice level"


GENERIC_FIELDS = TopologyFields()


@dataclass(frozen=True, slots=True)
class TopologyRequirement:
    """Where a gang's members may be placed, by node label levels.

    - `required_key`: the whole gang inside one domain of this level, or it waits.
      Members already bound fix the domain.
    - `preferred_keys`: levels the gang would rather stay inside, narrowest first: the
      fewest domains at the narrowest level that fits (a score, never a wait).
    - `slice_size` and `slice_key`: every `slice_size` consecutive members (in the
      gang's member order) inside one domain of `slice_key`, a level narrower than
      `required_key` (for example each 4 pods of 8 GPUs in one NVLink clique within one
      rack). Both set, or neither.
    - `source`: what stated it, for messages ("PodGroup ns/x
      spec.schedulingConstraints.topology", "Kueue annotation ...").
    - `fields`: the source's names for the fields above, for refusals. Not part of
      what the requirement means: two requirements alike but for it are equal.
    """

    required_key: str | None = None
    preferred_keys: tuple[str, ...] = ()
    slice_size: int | None = None
    slice_key: str | None = None
    source: str = ""
    fields: TopologyFields = field(default=GENERIC_FIELDS, compare=False)

    @property
    def constrains(self) -> bool:
        """Whether any member may be refused a node for topology (not only scored)."""
        return self.required_key is not None or self.slice_key is not None
