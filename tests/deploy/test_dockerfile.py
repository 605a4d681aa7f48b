"""The Dockerfile (not built in CI: an image build takes minutes; scripts/build-image.sh
builds and runs it by hand, docs/operator-guide.md "Building the image") is checked for
what the image must be: the final stage installs the project's wheel and nothing else
from the build context, with the `agent` extra the node agent needs; it runs as a
numeric non-root user (so the pods' runAsNonRoot can verify it, and it matches their
runAsUser); its entrypoint is the `gang-scheduler` command, whose default is `run`. The
build script is checked to build this Dockerfile as it is."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass, field

from scheduler.cli.main import build_parser
from tests.deploy.render import ROOT, one, rendered


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def stages() -> list[Stage]:
    text = (ROOT / "Dockerfile").read_text()
    logical = re.sub(r"\\\n", " ", text)  # join continuation lines
    found: list[Stage] = []
    for line in logical.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = args.split()
            found.append(Stage(words[0], words[2] if len(words) > 2 else ""))
        elif found:
            found[-1].instructions.append((keyword, args.strip()))
    return found


def test_the_build_stage_copies_only_the_packaging_inputs() -> None:
    build, _ = stages()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = set()
    for args in build.all("COPY"):
        *sources, _ = shlex.split(args)
        copied |= {s.rstrip("/") for s in sources}
    assert copied == {
        "pyproject.toml",
        project["project"]["readme"],
        "LICENSE",  # the wheel's license file (pyproject's license: Apache-2.0)
        "requirements.lock",
        *packages,
    }
    (run,) = build.all("RUN")
    assert "pip wheel" in run and "--no-deps" in run
    assert "cp requirements.lock /wheels/" in run


def test_the_final_stage_installs_the_wheel_only_and_runs_as_non_root() -> None:
    build, final = stages()
    assert final.base == build.base == "${PYTHON_IMAGE}"
    assert final.all("COPY") == [] and final.all("ADD") == []
    (install,) = final.all("RUN")
    assert f"from={build.name}" in install
    assert re.search(
        r'pip install [^"]*"\$\(ls /wheels/gang_scheduler-\*\.whl\)\[agent\]"', install
    )
    # Only pinned packages: nothing resolved at build time, and the set checked.
    assert "--no-deps -r /wheels/requirements.lock" in install
    assert install.rstrip().endswith("&& pip check")
    (user,) = final.all("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) > 0 and gid.isdigit() and int(gid) > 0
    # The scheduler runs as the image's user; the node agent as root, for the kubelet's
    # device-plugin directory (test_manifests.py).
    pod = one(rendered(), "Deployment", "gang-scheduler")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == int(uid)


def test_the_entrypoint_is_the_command_and_the_default_is_run() -> None:
    _, final = stages()
    (entrypoint,) = final.all("ENTRYPOINT")
    (command,) = final.all("CMD")
    assert json.loads(entrypoint) == ["gang-scheduler"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "gang-scheduler" in project["project"]["scripts"]
    assert build_parser().parse_args(json.loads(command)).handler.__name__ == "_run"


def test_the_build_context_is_the_packaging_inputs() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    rules = [line for line in lines if line and not line.startswith("#")]
    assert rules[0] == "*"
    allowed = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    build, _ = stages()
    copied = set()
    for args in build.all("COPY"):
        *sources, _ = shlex.split(args)
        copied |= {s.rstrip("/") for s in sources}
    assert allowed == copied


def test_the_image_labels_name_the_projects_version() -> None:
    _, final = stages()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (default,) = [a for a in final.all("ARG") if a.startswith("VERSION=")]
    assert default == f"VERSION={project['version']}"
    (labels,) = final.all("LABEL")
    assert 'org.opencontainers.image.version="${VERSION}"' in labels
    assert 'org.opencontainers.image.title="gang-scheduler"' in labels


# --- scripts/build-image.sh ----------------------------------------------------------------
SCRIPT = ROOT / "scripts" / "build-image.sh"


def script() -> str:
    """The script's commands: comments dropped, continuation lines joined."""
    lines = [line for line in SCRIPT.read_text().splitlines() if not line.strip().startswith("#")]
    return re.sub(r"\\\n\s*", " ", "\n".join(lines) + "\n")


def test_the_build_script_is_valid_bash_and_builds_this_dockerfile() -> None:
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = script()
    assert "set -euo pipefail" in text
    # The Dockerfile as it is, from the repository root, with only its own ARGs set.
    assert re.search(r"buildah bud [^\n]*\.\s*>/dev/null", text)
    args = {a.split("=")[0] for stage in stages() for a in stage.all("ARG")}
    given = set(re.findall(r'--build-arg "?([A-Z_]+)=', text))
    assert given and given <= args | {"PYTHON_IMAGE"}
    top = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=", top, flags=re.MULTILINE)
    # The version comes from pyproject.toml, as the Dockerfile's VERSION default does.
    assert '["project"]["version"]' in text and '--build-arg "VERSION=$VERSION"' in text


def test_the_debian_base_has_the_dockerfiles_python() -> None:
    top = (ROOT / "Dockerfile").read_text()
    (default,) = re.findall(r"^ARG PYTHON_IMAGE=python:(\d+\.\d+)-slim$", top, flags=re.MULTILINE)
    text = script()
    # bookworm's python3 is 3.11; the base script removes that Python's PEP 668 marker.
    assert "SUITE=bookworm" in text and default == "3.11"
    assert f"/usr/lib/python{default}/EXTERNALLY-MANAGED" in text
    assert f"localhost/python:{default}-" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == f">={default}"


def test_the_script_runs_the_image_as_its_own_user() -> None:
    _, final = stages()
    (user,) = final.all("USER")
    runs = re.findall(r"buildah[^\n]* run [^\n]*", script())
    assert runs and all(f"--user {user}" in run for run in runs)


def test_the_smoke_checks_exist_and_the_docs_name_the_script() -> None:
    text = script()
    for action in re.findall(r"scripts/image_smoke\.py \S+ (\w+)", text):
        assert action in ("seed", "wait")
    assert (ROOT / "scripts" / "image_smoke.py").is_file()
    guide = (ROOT / "docs" / "operator-guide.md").read_text()
    assert "scripts/build-image.sh" in guide and "## Building the image" in guide
