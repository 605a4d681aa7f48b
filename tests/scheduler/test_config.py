"""The YAML configuration: defaults, a full file, and one clear line for every mistake."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cache.pod import GANG_LABEL, MIN_MEMBER_ANNOTATION, VOLCANO_GANG_ANNOTATION
from policies.scores.fragmentation import OnlineWorkload
from policies.scores.gpu_topology import GpuTopology
from policies.scores.least_allocated import LeastAllocated
from policies.scores.most_allocated import MostAllocated
from policies.scores.network_topology import NetworkTopology
from policies.scores.node_affinity import PreferredNodeAffinity
from policies.scores.taint_toleration import PreferNoScheduleTaints
from scheduler.process.config import (
    DEFAULT_HTTP_PORT,
    ConfigError,
    SchedulerConfig,
    build_core_from,
    build_profile_from,
    load_config,
    option_paths,
    parse_config,
)
from tests.factories import make_pod

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"

FULL = """
schedulerName: gpu-gangs
gang:
  label: scheduling.x-k8s.io/pod-group
  volcanoAnnotation: scheduling.k8s.io/group-name
  minMemberAnnotation: gang-scheduler.io/min-member
policy:
  name: spread
  weights:
    gpu-topology: 2.5
  candidateLimit: 0
topology:
  keys: [topology.kubernetes.io/region, topology.kubernetes.io/zone, rack]
  networkWeight: 3
timeouts:
  assumeTTLSeconds: 45
  bindTimeoutSeconds: 5
  initialBackoffSeconds: 0.5
  maxBackoffSeconds: 30
  maxUnschedulableSeconds: 120
binding:
  onBindFailure: keep
  concurrency: 16
fractionalGPU:
  resourceName: nvidia.com/vgpu
  unitsPerGPU: 1000
client:
  qps: 20.5
  burst: 40
leaderElection:
  enabled: false
  leaseName: gpu-gangs
  leaseNamespace: scheduling
  leaseDurationSeconds: 30
  renewDeadlineSeconds: 20
  retryPeriodSeconds: 4
http:
  address: 127.0.0.1
  port: 9100
events:
  aggregationWindowSeconds: 120
  maxPerGangPerWindow: 3
"""


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("config: ")
    return message


# --- defaults -----------------------------------------------------------------------------------
def test_no_file_empty_file_and_empty_sections_all_give_the_defaults() -> None:
    defaults = load_config(None)
    assert defaults == SchedulerConfig() == parse_config("") == parse_config("timeouts:\n")
    assert defaults.scheduler_name == "gang-scheduler"
    assert (defaults.gang.label, defaults.gang.volcano_annotation) == (
        GANG_LABEL,
        VOLCANO_GANG_ANNOTATION,
    )
    assert defaults.gang.min_member_annotation == MIN_MEMBER_ANNOTATION
    assert defaults.policy.name == "binpack" and defaults.policy.weights is None
    assert defaults.policy.candidate_limit == 128
    assert defaults.topology.keys == ("topology.kubernetes.io/zone", "kubernetes.io/hostname")
    assert defaults.topology.network_weight == 1.0
    t = defaults.timeouts
    assert (t.assume_ttl_seconds, t.bind_timeout_seconds) == (30, 10)
    assert (t.initial_backoff_seconds, t.max_backoff_seconds) == (1, 60)
    assert t.max_unschedulable_seconds == 300
    assert defaults.binding.on_bind_failure == "delete" and defaults.binding.concurrency == 64
    assert defaults.fractional_gpu.resource_name == "nvidia.com/vgpu"
    assert defaults.fractional_gpu.units_per_gpu == 1000
    assert defaults.binding.partial_gang_grace_seconds == 60
    assert (defaults.client.qps, defaults.client.burst) == (1000, 2000)
    le = defaults.leader_election
    assert le.enabled and (le.lease_name, le.lease_namespace) == ("gang-scheduler", "kube-system")
    assert (le.lease_duration_seconds, le.renew_deadline_seconds, le.retry_period_seconds) == (
        15,
        10,
        2,
    )
    assert defaults.http.port == DEFAULT_HTTP_PORT == 10269
    assert defaults.events.aggregation_window_seconds == 60
    assert defaults.events.max_per_gang_per_window == 10
    assert defaults.events.scheduled == "pod"
    assert (defaults.events.qps, defaults.events.burst) == (50, 100)


def test_default_profile_is_binpack_with_network_topology() -> None:
    profile = build_profile_from(SchedulerConfig())
    assert [(type(s), w) for s, w in profile.node_scores] == [
        (MostAllocated, 1.0),
        (GpuTopology, 1.0),
        (PreferredNodeAffinity, 2.0),
        (PreferNoScheduleTaints, 3.0),
    ]
    assert [(type(s), w) for s, w in profile.gang_scores] == [(NetworkTopology, 1.0)]
    assert profile.candidate_limit == 128


# --- a full file --------------------------------------------------------------------------------
def test_full_example_reads_every_option(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(FULL, encoding="utf-8")
    config = load_config(path)
    assert config.scheduler_name == "gpu-gangs"
    assert config.policy.name == "spread" and dict(config.policy.weights or {}) == {
        "gpu-topology": 2.5
    }
    assert config.policy.candidate_limit == 0
    assert config.topology.keys == (
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
        "rack",
    )
    assert config.topology.network_weight == 3.0
    assert config.timeouts.assume_ttl_seconds == 45
    assert config.timeouts.initial_backoff_seconds == 0.5
    assert config.binding.on_bind_failure == "keep" and config.binding.concurrency == 16
    assert (config.client.qps, config.client.burst) == (20.5, 40)
    assert not config.leader_election.enabled
    assert config.leader_election.lease_namespace == "scheduling"
    assert (config.http.address, config.http.port) == ("127.0.0.1", 9100)
    assert config.events.max_per_gang_per_window == 3
    # Explicit weights are laid over the named policy's.
    assert config.policy.effective_weights == {
        "least-allocated": 1.0,
        "gpu-topology": 2.5,
        "node-affinity": 2.0,
        "taint-toleration": 3.0,
    }
    profile = build_profile_from(config)
    assert [(type(s), w) for s, w in profile.node_scores] == [
        (LeastAllocated, 1.0),
        (GpuTopology, 2.5),
        (PreferredNodeAffinity, 2.0),
        (PreferNoScheduleTaints, 3.0),
    ]
    assert profile.gang_scores[0][1] == 3.0
    assert profile.topology_keys == config.topology.keys
    assert profile.candidate_limit == 0


def test_a_zero_weight_turns_a_score_off() -> None:
    config = parse_config("policy: {weights: {most-allocated: 0}}\ntopology: {networkWeight: 0}")
    profile = build_profile_from(config)
    assert [type(s) for s, _ in profile.node_scores] == [
        GpuTopology,
        PreferredNodeAffinity,
        PreferNoScheduleTaints,
    ]
    assert profile.gang_scores == ()


def test_fgd_complete_by_name_and_share_completion_by_weight() -> None:
    named = build_profile_from(parse_config("policy: {name: fgd-complete}"))
    assert [s.name for s, _ in named.node_scores][:3] == [
        "fragmentation-int",
        "share-completion",
        "fill-fragmentation",
    ]
    weighted = build_profile_from(
        parse_config("policy: {name: binpack, weights: {share-completion: 0.5}}")
    )
    assert ("share-completion", 0.5) in [(s.name, w) for s, w in weighted.node_scores]
    # Learnt online: the scores move in steps as the core observes pods, and a planner
    # keeps their answers within a step.
    assert named.memoizable and weighted.memoizable
    before = named.learning_step()
    assert named.workload is not None and isinstance(named.workload, OnlineWorkload)
    named.workload.observe(make_pod("seen", gpus=1))
    assert named.learning_step() != before


def test_core_takes_name_and_backoffs() -> None:
    core = build_core_from(parse_config(FULL))
    assert core.scheduler_name == "gpu-gangs"
    assert core.queue.initial_backoff_seconds == 0.5
    assert core.queue.max_backoff_seconds == 30
    assert core.queue.max_unschedulable_seconds == 120


def test_config_is_frozen() -> None:
    config = SchedulerConfig()
    with pytest.raises(AttributeError):
        config.http.port = 1  # type: ignore[misc]


# --- mistakes, one line each --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "timeouts: {assumeTTLSeconds: -3}",
            "config: timeouts.assumeTTLSeconds: must be a number > 0, got -3",
        ),
        (
            "timeouts: {assumeTtlSeconds: 3}",
            "config: timeouts.assumeTtlSeconds: unknown field; did you mean assumeTTLSeconds?",
        ),
        (
            "policy: {name: packing}",
            'config: policy.name: unknown policy "packing"; '
            "known: binpack, fgd, fgd-complete, fgd-complete-reserve, spread",
        ),
        (
            "client: {burst: many}",
            'config: client.burst: must be a whole number >= 1, got "many"',
        ),
        (
            "http: {port: 70000}",
            "config: http.port: must be a whole number from 1 to 65535, got 70000",
        ),
        (
            "binding: {onBindFailure: orphan}",
            'config: binding.onBindFailure: must be one of delete, keep, got "orphan"',
        ),
        (
            "leaderElection: {renewDeadlineSeconds: 15}",
            "config: leaderElection.renewDeadlineSeconds: must be less than "
            "leaderElection.leaseDurationSeconds (15), got 15",
        ),
        (
            "fractionalGPU: {unitsPerGPU: 300}",
            "config: fractionalGPU.unitsPerGPU: must divide 1000 (a unit is a whole number "
            "of milli of a GPU), got 300",
        ),
        (
            "fractionalGPU: {unitsPerGPU: 2000}",
            "config: fractionalGPU.unitsPerGPU: must be a whole number from 1 to 1000, got 2000",
        ),
        (
            "timeouts: [1, 2]",
            "config: timeouts: must be a mapping, got a list",
        ),
    ],
)
def test_exact_messages(text: str, message: str) -> None:
    assert error_of(text) == message


@pytest.mark.parametrize(
    ("text", "path", "problem"),
    [
        ("nonsense: 1", "nonsense", "unknown field; known: schedulerName, gang, policy"),
        ("leaderElection: {leaseName: x, extra: 1}", "leaderElection.extra", "unknown field"),
        ("schedulerName: ''", "schedulerName", "must be a non-empty string"),
        ("schedulerName: 7", "schedulerName", "must be a non-empty string, got 7"),
        ("policy: {candidateLimit: -1}", "policy.candidateLimit", ">= 0, got -1"),
        ("policy: {candidateLimit: 2.5}", "policy.candidateLimit", "whole number"),
        ("policy: {weights: [1]}", "policy.weights", "must be a mapping"),
        ("policy: {weights: {most: 1}}", "policy.weights.most", "unknown score 'most'"),
        ("policy: {weights: {spread: 1}}", "policy.weights.spread", "known: fill-fragmentation"),
        ("policy: {weights: {most-allocated: -1}}", "policy.weights.most-allocated", ">= 0"),
        ("policy: {weights: {most-allocated: true}}", "policy.weights.most-allocated", "true"),
        ("topology: {keys: zone}", "topology.keys", "must be a list of node label keys"),
        ("topology: {keys: [a, 3]}", "topology.keys[1]", "non-empty string, got 3"),
        ("topology: {keys: [a, b, a]}", "topology.keys[2]", '"a" is listed twice'),
        ("topology: {networkWeight: -0.5}", "topology.networkWeight", ">= 0, got -0.5"),
        ("timeouts: {bindTimeoutSeconds: 0}", "timeouts.bindTimeoutSeconds", "> 0, got 0"),
        ("timeouts: {maxBackoffSeconds: .inf}", "timeouts.maxBackoffSeconds", "got inf"),
        ("timeouts: {maxUnschedulableSeconds: null}", "timeouts.maxUnschedulableSeconds", "null"),
        (
            "timeouts: {initialBackoffSeconds: 90}",
            "timeouts.initialBackoffSeconds",
            "must not exceed timeouts.maxBackoffSeconds (60), got 90",
        ),
        ("binding: {concurrency: 0}", "binding.concurrency", ">= 1, got 0"),
        ("client: {qps: -5}", "client.qps", "> 0, got -5"),
        ("events: {scheduled: always}", "events.scheduled", "one of pod, gang, off"),
        ("events: {qps: 0}", "events.qps", "> 0, got 0"),
        ("binding: {partialGangGraceSeconds: -1}", "binding.partialGangGraceSeconds", "> 0"),
        ("leaderElection: {enabled: maybe}", "leaderElection.enabled", "true or false"),
        (
            "leaderElection: {retryPeriodSeconds: 10}",
            "leaderElection.retryPeriodSeconds",
            "less than leaderElection.renewDeadlineSeconds (10), got 10",
        ),
        ("leaderElection: {leaseDurationSeconds: -15}", "leaderElection.leaseDurationSeconds", ""),
        ("http: {port: 0}", "http.port", "from 1 to 65535, got 0"),
        ("http: {port: true}", "http.port", "got true"),
        # /debug/gangs names every tenant's gangs: loopback only (docs/security.md, "Endpoints")
        ("http: {debugAddress: 0.0.0.0}", "http.debugAddress", "must be a loopback address"),
        ("http: {debugAddress: 10.0.0.7}", "http.debugAddress", "kubectl port-forward"),
        ("http: {debugAddress: '::'}", "http.debugAddress", "loopback"),
        ("http: {debugAddress: example.com}", "http.debugAddress", "loopback"),
        ("http: {debugPort: 70000}", "http.debugPort", "from 0 to 65535"),
        ("http: {port: 9000, debugPort: 9000}", "http.debugPort", "must differ from http.port"),
        ("events: {maxPerGangPerWindow: 0}", "events.maxPerGangPerWindow", ">= 1"),
        ("events: {aggregationWindowSeconds: -1}", "events.aggregationWindowSeconds", "> 0"),
        ("fractionalGPU: {resourceName: aliyun.com/gpu-mem}", "fractionalGPU.resourceName", ""),
        ("gang: {label: ''}", "gang.label", "non-empty string"),
        ("gang: {volcanoAnnotation: 7}", "gang.volcanoAnnotation", "non-empty string"),
        (
            "fractionalGPU: {resourceName: example.com/gpu}",
            "fractionalGPU.resourceName",
            "not supported",
        ),
    ],
)
def test_each_mistake_names_its_field(text: str, path: str, problem: str) -> None:
    message = error_of(text)
    assert message.startswith(f"config: {path}: "), message
    assert problem in message


def test_unsupported_values_say_so_rather_than_being_ignored() -> None:
    message = error_of("fractionalGPU: {resourceName: aliyun.com/gpu-mem}")
    assert message == (
        'config: fractionalGPU.resourceName: values other than "nvidia.com/vgpu" are not '
        'supported yet (the cache counts it by this name), got "aliyun.com/gpu-mem"'
    )


def test_long_values_are_cut_to_keep_one_short_line() -> None:
    message = error_of(f"schedulerName: {'x' * 500}\nhttp: {{port: '{'9' * 500}'}}")
    assert message.startswith("config: http.port: ")
    assert len(message) < 150


def test_top_level_and_yaml_mistakes() -> None:
    assert error_of("- a\n- b") == "config: the top level must be a mapping, got a list"
    assert re.fullmatch(
        r"config: not valid YAML at line 2, column \d+: .+", error_of("a: 1\n b: [")
    )


def test_unreadable_file_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError) as caught:
        load_config(missing)
    assert str(caught.value) == f"config: cannot read {missing}: No such file or directory"
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_config(binary)


def test_config_error_is_a_value_error_carrying_its_path() -> None:
    with pytest.raises(ValueError) as caught:
        parse_config("client: {qps: 0}")
    assert isinstance(caught.value, ConfigError)
    assert caught.value.path == "client.qps"
    assert caught.value.problem == "must be a number > 0, got 0"


# --- the documentation lists every option ---------------------------------------------------------
def test_docs_list_every_option_with_its_default() -> None:
    text = DOCS.read_text(encoding="utf-8")
    rows = {
        match[1]: match[2]
        for match in re.finditer(r"^\| `([A-Za-z.]+)` \| ([^|]+) \|", text, flags=re.MULTILINE)
    }
    assert set(rows) == set(option_paths())
    defaults = SchedulerConfig()
    assert "`10269`" in rows["http.port"]
    assert f"`{defaults.policy.candidate_limit}`" in rows["policy.candidateLimit"]
    assert "`delete`" in rows["binding.onBindFailure"]


def test_the_debug_listener_takes_loopback_addresses_only() -> None:
    for address in ("127.0.0.1", "127.0.0.53", "::1", "localhost"):
        http = parse_config(f"http: {{debugAddress: '{address}', debugPort: 10270}}").http
        assert (http.debug_address, http.debug_port) == (address, 10270)
    assert SchedulerConfig().http.debug_port == 0  # no debug listener unless configured


def test_the_format_is_versioned_and_a_file_without_a_version_is_v1alpha1() -> None:
    from scheduler.process.config import CONFIG_API_VERSION, CONFIG_KIND, config_from_mapping

    assert (CONFIG_API_VERSION, CONFIG_KIND) == (
        "gang-scheduler.io/v1alpha1",
        "SchedulerConfiguration",
    )
    unversioned = config_from_mapping({"schedulerName": "x"})
    versioned = config_from_mapping(
        {"apiVersion": CONFIG_API_VERSION, "kind": CONFIG_KIND, "schedulerName": "x"}
    )
    assert unversioned == versioned
    for data, path in (
        ({"apiVersion": "gang-scheduler.io/v1"}, "apiVersion"),
        ({"apiVersion": "v1"}, "apiVersion"),
        ({"kind": "KubeSchedulerConfiguration"}, "kind"),
    ):
        with pytest.raises(ConfigError) as error:
            config_from_mapping(data)
        assert error.value.args[0].startswith(f"config: {path}: "), error.value.args[0]
        assert "gang-scheduler.io/v1alpha1" in str(error.value) or "SchedulerConfiguration" in str(
            error.value
        )


# --- Volcano's tiers (topology.volcanoTiers) ---------------------------------------------------
def test_volcano_tiers_default_to_the_hierarchy_and_reach_the_cache() -> None:
    derived = parse_config(
        "topology: {keys: [example.com/block, example.com/rack, kubernetes.io/hostname]}"
    )
    assert derived.topology.effective_volcano_tiers.keys == (
        "example.com/rack",
        "example.com/block",
    )
    core = build_core_from(derived)
    assert core.cache.gang_keys.volcano_tiers.keys == ("example.com/rack", "example.com/block")
    listed = parse_config(
        "topology:\n  volcanoTiers:\n  - {nodeLabel: volcano.sh/tor, tierName: rack}\n"
        "  - {nodeLabel: topology.kubernetes.io/zone}\n"
    )
    tiers = listed.topology.effective_volcano_tiers
    assert tiers.keys == ("volcano.sh/tor", "topology.kubernetes.io/zone")
    assert (tiers.tier_named("rack"), tiers.tier_named("zone")) == (1, None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("volcanoTiers: volcano.sh/tor", "topology.volcanoTiers: must be a list of"),
        ("volcanoTiers: [volcano.sh/tor]", "topology.volcanoTiers[0]: must be a mapping"),
        ("volcanoTiers: [{nodeLabel: 'a b'}]", "topology.volcanoTiers[0].nodeLabel: nodeLabel"),
        ("volcanoTiers: [{tierName: rack}]", "topology.volcanoTiers[0].nodeLabel: nodeLabel"),
        ("volcanoTiers: [{nodeLabel: a, tier: 1}]", "topology.volcanoTiers[0].tier: unknown"),
        ("volcanoTiers: [{nodeLabel: a}, {nodeLabel: a}]", '[1].nodeLabel: "a" is listed twice'),
        (
            "volcanoTiers: [{nodeLabel: a, tierName: r}, {nodeLabel: b, tierName: r}]",
            '[1].tierName: "r" is listed twice',
        ),
    ],
)
def test_volcano_tiers_are_checked_at_start(text: str, expected: str) -> None:
    assert expected in error_of(f"topology: {{{text}}}")
