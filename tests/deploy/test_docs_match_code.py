"""The docs' reference tables are what the code has, so that they cannot drift again:
every CLI flag of the argparse parser, every configuration key, every metric of the
registry, every annotation constant, every object `kubectl apply -k deploy/` installs;
`kubectl` commands name PodGroups by their full resource name; one minimum Kubernetes
version. Each failure names the missing or extra entry and where it should be."""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterator
from pathlib import Path

import yaml

from scheduler.cli.main import build_parser
from scheduler.process.config import option_paths
from scheduler.process.metrics import SchedulerMetrics
from tests.deploy.render import rendered

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# Where each command's flags are documented (a table row "| `--flag` ...", a bullet
# "- `--flag`: ..." or the usage block "gang-scheduler <command> [...]").
FLAG_DOCS = {
    "run": ("kubernetes.md",),
    "node-agent": ("node-agent.md", "device-plugin.md"),
    "simulate": ("simulator.md",),
    "demo": (),
}
# The minimum Kubernetes version of the install: ValidatingAdmissionPolicy v1 (GA in
# 1.30) and the node name in service-account tokens (on by default from 1.30).
MINIMUM_KUBERNETES = (1, 30)


def doc(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def differences(what: str, where: str, code: set[str], docs: set[str]) -> list[str]:
    missing = [f"{what} {name!r} is in the code but not in {where}" for name in sorted(code - docs)]
    extra = [f"{what} {name!r} is in {where} but not in the code" for name in sorted(docs - code)]
    return missing + extra


# --- CLI flags ------------------------------------------------------------------------------
def parser_flags() -> dict[str, set[str]]:
    flags: dict[str, set[str]] = {}
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                flags[name] = {
                    option
                    for each in sub._actions
                    for option in each.option_strings
                    if option.startswith("--") and option != "--help"
                }
    return flags


def documented_flags(command: str, text: str) -> set[str]:
    """The flags a doc lists for `command`: table rows, bullets and its usage block."""
    found = set(re.findall(r"^\| `(--[a-z][a-z0-9-]*)", text, re.MULTILINE))
    found |= set(re.findall(r"^- `(--[a-z][a-z0-9-]*)`", text, re.MULTILINE))
    for block in re.findall(rf"^gang-scheduler {command} (\[.*?)\n```", text, re.S | re.M):
        found |= set(re.findall(r"(--[a-z][a-z0-9-]*)", block))
    return found


def test_every_command_line_flag_is_documented_and_nothing_else() -> None:
    problems: list[str] = []
    commands = parser_flags()
    assert set(commands) == set(FLAG_DOCS), f"commands to document: {sorted(commands)}"
    for command, files in FLAG_DOCS.items():
        text = "".join(doc(name) for name in files)
        mentioned = set(re.findall(r"`(--[a-z][a-z0-9-]*)", text))
        where = " or ".join(f"docs/{name}" for name in files) or "docs/"
        code = commands[command]
        problems += [
            f"flag {flag!r} of `gang-scheduler {command}` is not documented in {where}"
            for flag in sorted(code - mentioned)
        ]
        problems += [
            f"flag {flag!r} documented for `gang-scheduler {command}` in {where} does not exist"
            for flag in sorted(documented_flags(command, text) - code)
        ]
    assert not problems, "\n".join(problems)


# --- configuration keys ---------------------------------------------------------------------
def test_every_configuration_key_is_in_the_table_and_nothing_else() -> None:
    rows = set(re.findall(r"^\| `([A-Za-z.]+)` \|", doc("configuration.md"), re.MULTILINE))
    problems = differences("configuration key", "docs/configuration.md", set(option_paths()), rows)
    assert not problems, "\n".join(problems)


# --- metrics --------------------------------------------------------------------------------
def registry_metrics() -> set[str]:
    metrics = SchedulerMetrics(namespace_labels=True)
    return {family.name for family in metrics.registry.collect() if family.name.startswith("gang_")}


def test_every_metric_is_in_the_table_and_nothing_else() -> None:
    rows = set(re.findall(r"^\| `(gang_scheduler_[a-z_]+)`", doc("metrics.md"), re.MULTILINE))
    # A counter is documented by its sample name (`..._total`), as Prometheus shows it.
    documented = {row.removesuffix("_total") for row in rows}
    problems = differences("metric", "docs/metrics.md", registry_metrics(), documented)
    assert not problems, "\n".join(problems)


# --- annotations ----------------------------------------------------------------------------
def annotation_constants() -> dict[str, str]:
    """Every module-level `*_ANNOTATION = "key"` of cache/ and scheduler/: key -> where."""
    found: dict[str, str] = {}
    for package in ("cache", "scheduler", "policies"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                targets = _assigned(node)
                value = getattr(node, "value", None)
                if not isinstance(value, ast.Constant) or not isinstance(value.value, str):
                    continue
                for name in targets:
                    if name.endswith("_ANNOTATION"):
                        found[value.value] = f"{path.relative_to(ROOT)}: {name}"
    return found


def _assigned(node: ast.stmt) -> Iterator[str]:
    if isinstance(node, ast.Assign):
        yield from (t.id for t in node.targets if isinstance(t, ast.Name))
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        yield node.target.id


def test_every_annotation_constant_is_in_the_conventions_and_nothing_else() -> None:
    text = doc("conventions.md")
    # Keys with a prefix, and unprefixed ones (KAI-Scheduler's `gpu-fraction`).
    keys = set(re.findall(r"`((?:[a-z0-9.-]+/)?[A-Za-z0-9._-]+)(?::[^`]*)?`", text))
    constants = annotation_constants()
    problems = [
        f"annotation {key!r} ({where}) is not in docs/conventions.md"
        for key, where in sorted(constants.items())
        if key not in keys
    ]
    # The conventions' table of labels and annotations: each annotation row is one the
    # code reads or writes.
    rows = re.findall(r"^\| `((?:[a-z0-9.-]+/)?[A-Za-z0-9._-]+)[^`]*` \| annotation \|", text, re.M)
    problems += [
        f"annotation {key!r} is in docs/conventions.md but no *_ANNOTATION constant has it"
        for key in rows
        if key not in constants
    ]
    assert not problems, "\n".join(problems)


# --- what `kubectl apply -k deploy/` installs -------------------------------------------------
def install_table() -> list[tuple[set[str], set[str]]]:
    text = doc("operator-guide.md")
    section = text.split("## What `kubectl apply -k deploy/` installs", 1)[1].split("\n## ", 1)[0]
    rows: list[tuple[set[str], set[str]]] = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("object", "---"):
            continue
        kinds = {kind.strip() for kind in cells[0].split(",")}
        names = {name.split("/")[-1] for name in re.findall(r"`([^`]+)`", cells[1])}
        rows.append((kinds, names))
    return rows


def shown_name(obj: dict[str, object]) -> str:
    """An object's name as the table writes it: the ConfigMap's kustomize hash as
    `<hash>`."""
    meta = obj["metadata"]
    assert isinstance(meta, dict)
    name = str(meta["name"])
    return re.sub(r"-[a-z0-9]{10}$", "-<hash>", name) if obj["kind"] == "ConfigMap" else name


def test_the_install_table_lists_every_object_deploy_renders_and_nothing_else() -> None:
    rows = install_table()
    objects = {(obj["kind"], shown_name(obj)) for obj in rendered()}
    problems = [
        f"{kind} {name!r} is rendered by deploy/ but not in the install table of "
        "docs/operator-guide.md"
        for kind, name in sorted(objects)
        if not any(kind in kinds and name in names for kinds, names in rows)
    ]
    for kinds, names in rows:
        for kind in sorted(kinds):
            for name in sorted(names):
                if (kind, name) not in objects and not any(
                    (other, name) in objects for other in kinds
                ):
                    problems.append(
                        f"the install table lists {kind} {name!r}, which deploy/ does not render"
                    )
    assert not problems, "\n".join(problems)


# --- kubectl names PodGroups unambiguously ---------------------------------------------------
AMBIGUOUS = re.compile(
    r"kubectl[^\n|]*?\b(?:get|describe|edit|delete|patch|label|annotate)\s+"
    r"(podgroups?|pgs?|elasticquotas?|eq)(?=[\s`'\"]|$)",
)


def test_kubectl_commands_name_podgroups_by_their_full_resource_name() -> None:
    """Once Volcano's or Kubernetes' own PodGroups exist, `kubectl get podgroup` picks
    one of three kinds; the docs write `podgroups.scheduling.x-k8s.io` (or the other
    group) every time."""
    problems = []
    for path in sorted([*DOCS.glob("*.md"), *(ROOT / "deploy" / "examples").rglob("*.yaml")]):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in AMBIGUOUS.finditer(line):
                problems.append(
                    f"{path.relative_to(ROOT)}:{number}: `{match[1]}` is ambiguous; write "
                    "its full resource name (e.g. podgroups.scheduling.x-k8s.io)"
                )
    assert not problems, "\n".join(problems)


# --- one minimum Kubernetes version ------------------------------------------------------------
def test_the_minimum_kubernetes_version_is_the_same_everywhere() -> None:
    minimum = ".".join(map(str, MINIMUM_KUBERNETES))
    # What sets it: the admission policies' API version in what deploy/ renders.
    versions = {o["apiVersion"] for o in rendered() if o["kind"] == "ValidatingAdmissionPolicy"}
    assert versions == {"admissionregistration.k8s.io/v1"}, versions
    assert f"Kubernetes {minimum} or later" in doc("operator-guide.md")
    # The chart refuses an older cluster (Helm checks kubeVersion before rendering).
    chart = yaml.safe_load((ROOT / "deploy/helm/gang-scheduler/Chart.yaml").read_text())
    assert chart["kubeVersion"] == f">={minimum}.0-0"
    problems = []
    for path in [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        # "1.NN or later", "1.NN and later", "Kubernetes 1.NN+": a minimum, which is
        # the one minimum (a feature's own version is written "from 1.NN", "in 1.NN").
        pattern = r"\b1\.(\d{2}) (?:and|or) later\b|\bKubernetes 1\.(\d{2})\+"
        for match in re.finditer(pattern, text):
            if (1, int(match[1] or match[2])) != MINIMUM_KUBERNETES:
                line = text.count("\n", 0, match.start()) + 1
                problems.append(
                    f"{path.relative_to(ROOT)}:{line}: '{match[0]}' is not the minimum, {minimum}"
                )
    assert not problems, "\n".join(problems)
