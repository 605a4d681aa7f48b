"""Volcano's HyperNode tiers as node label keys (the scheduler's `topology.volcanoTiers`).

Volcano states a gang's network constraint in tiers (`spec.networkTopology.
highestTierAllowed: 2`) or tier names (`highestTierName: rack`) of its HyperNode tree,
not in node labels. Tier 1 is the narrowest HyperNode: a group of nodes under one
switch. A node itself is no tier: Volcano's label discoverer builds its tree from a
list of node labels, broadest first, whose last entry, `kubernetes.io/hostname`, names
the nodes, the one above it tier 1, the next tier 2 (docs/user-guide/
how_to_use_hypernode_auto_discovery.md in volcano-sh/volcano). This scheduler reads
node labels, so each tier needs a label key: the operator lists them
(`topology.volcanoTiers`), or by default they come from `topology.keys` by that same
rule (docs/conventions.md, "Volcano").
"""

from __future__ import annotations

from dataclasses import dataclass

HOSTNAME_KEY = "kubernetes.io/hostname"


@dataclass(frozen=True)
class VolcanoTiers:
    """`keys[0]` is tier 1's label key, `keys[1]` tier 2's...; `names` maps a
    HyperNode tierName (`highestTierName`) to its tier number."""

    keys: tuple[str, ...] = ()
    names: tuple[tuple[str, int], ...] = ()

    def key_of(self, tier: int) -> str | None:
        return self.keys[tier - 1] if 1 <= tier <= len(self.keys) else None

    def tier_named(self, name: str) -> int | None:
        return next((tier for known, tier in self.names if known == name), None)


def tiers_from_hierarchy(keys: tuple[str, ...]) -> VolcanoTiers:
    """The tiers Volcano's label discoverer would build from `keys` (broadest first):
    the last key dropped when it is the hostname (nodes are no tier), then tier 1 is
    the narrowest key left."""
    levels = keys[:-1] if keys and keys[-1] == HOSTNAME_KEY else keys
    return VolcanoTiers(keys=tuple(reversed(levels)))


DEFAULT_VOLCANO_TIERS = tiers_from_hierarchy(
    ("topology.kubernetes.io/zone", HOSTNAME_KEY)  # policies.profile.DEFAULT_TOPOLOGY_KEYS
)
