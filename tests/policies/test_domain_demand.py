"""The learnt demand for topology domains (policies/domain_demand.py)."""

from policies.domain_demand import DomainDemand

RACK = "topology.kubernetes.io/rack"


def test_no_history_costs_nothing() -> None:
    assert DomainDemand().lost(RACK, 16_000, 8_000, [16_000]) == 0.0


def test_a_domain_is_costly_when_it_is_the_only_one_holding_a_larger_gang() -> None:
    demand = DomainDemand()
    for i in range(4):
        demand.observe(f"ns/g{i}", RACK, 32_000)
    holders = [16_000, 32_000]
    # An 8-GPU gang in the 32-GPU rack breaks the only rack a 32-GPU gang fits.
    assert demand.lost(RACK, 32_000, 8_000, holders) == 1.0
    assert demand.lost(RACK, 16_000, 8_000, holders) == 0.0
    # Two racks hold 32: losing one costs half as much.
    assert demand.lost(RACK, 32_000, 8_000, [32_000, 32_000]) == 0.5


def test_sizes_up_to_the_gangs_own_are_not_counted() -> None:
    demand = DomainDemand()
    demand.observe("ns/a", RACK, 16_000)
    assert demand.lost(RACK, 16_000, 16_000, [16_000]) == 0.0


def test_each_gang_counts_once_and_the_window_forgets() -> None:
    demand = DomainDemand(window=2)
    for _ in range(5):
        demand.observe("ns/same", RACK, 32_000)
    assert demand.lost(RACK, 32_000, 8_000, [32_000]) == 1.0
    demand.observe("ns/b", RACK, 4_000)
    demand.observe("ns/c", RACK, 4_000)  # "ns/same" left the window
    assert demand.lost(RACK, 32_000, 8_000, [32_000]) == 0.0
