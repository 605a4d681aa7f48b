"""What a reclaim may cost (docs/quotas.md, "Reclaim: what a small ask may cost").

Pure. Reclaim takes back borrowed capacity, fewest GPUs first; when the only borrower
whose eviction lets the reclaimer fit is large, a small ask evicts a large run (on the
3-team replay a 2-GPU priority-0 job evicted a 32-GPU gang, twice). Borrowers finish,
and a small ask is placed as soon as a few GPUs free; so while the reclaimer has waited
less than a grace, the GPUs evicted for it may be at most `factor` times the GPUs it
asks. After the grace the guarantee is honoured whatever it costs: the bound delays a
reclaim, it never refuses one for good.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReclaimCost:
    factor: int = 4  # victims' GPUs at most this many times the reclaimer's ask ...
    grace_seconds: float = 900.0  # ... until the reclaimer has waited this long

    def limit(self, asked_gpu_milli: int, waited: float) -> int | None:
        """The most GPU milli a reclaim may evict now, or None for no limit (an ask of
        no GPU, or a reclaimer that has waited out the grace)."""
        if asked_gpu_milli <= 0 or waited >= self.grace_seconds:
            return None
        return self.factor * asked_gpu_milli
