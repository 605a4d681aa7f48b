"""requirements.lock pins exactly what the image needs: every package of the closure of
the project's dependencies and its `agent` extra (the Dockerfile installs both, with
--no-deps), each at a version every requirement on it accepts, and nothing else."""

from __future__ import annotations

import tomllib
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.deploy.render import ROOT


def pins() -> dict[str, Version]:
    found: dict[str, Version] = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, version = line.partition("==")
        assert version, f"not pinned: {line}"
        found[canonicalize_name(name)] = Version(version)
    return found


def test_the_lock_pins_the_closure_of_the_images_requirements_and_only_it() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    locked = pins()
    todo = [Requirement(text) for text in project["dependencies"]]
    todo += [Requirement(text) for text in project["optional-dependencies"]["agent"]]
    needed: set[str] = set()
    while todo:
        requirement = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(requirement.name)
        assert key in locked, f"{requirement} is not in requirements.lock (make lock)"
        assert requirement.specifier.contains(locked[key], prereleases=True), (
            f"requirements.lock pins {key}=={locked[key]}, which {requirement} refuses"
        )
        if key in needed:
            continue
        needed.add(key)
        # What the pinned version requires, from its metadata in this environment (the
        # one the lock was made from: a version that differs means the lock is stale).
        assert Version(metadata.version(key)) == locked[key], f"{key}: run make lock"
        for text in metadata.requires(key) or ():
            nested = Requirement(text)
            extras = [{"extra": extra} for extra in requirement.extras] or [{"extra": ""}]
            if nested.marker is None or any(nested.marker.evaluate(env) for env in extras):
                todo.append(nested)
    assert set(locked) == needed, f"not needed: {sorted(set(locked) - needed)}"
