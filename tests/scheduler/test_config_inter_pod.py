"""The inter-pod score weights: read from the configuration into the profile."""

from __future__ import annotations

import pytest

from scheduler.process.config import ConfigError, build_profile_from, parse_config


def test_inter_pod_score_weights_default_to_kube_schedulers_two() -> None:
    profile = build_profile_from(parse_config(""))
    assert (profile.pod_affinity_weight, profile.topology_spread_weight) == (2.0, 2.0)


def test_inter_pod_score_weights_are_read() -> None:
    config = parse_config("policy: {podAffinityWeight: 0, topologySpreadWeight: 5}")
    profile = build_profile_from(config)
    assert (profile.pod_affinity_weight, profile.topology_spread_weight) == (0.0, 5.0)


def test_a_negative_weight_is_refused_with_its_path() -> None:
    with pytest.raises(ConfigError, match=r"policy\.podAffinityWeight: must be a number >= 0"):
        parse_config("policy: {podAffinityWeight: -1}")
