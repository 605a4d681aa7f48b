"""The scheduler's packages import one way only (docs/architecture.md, "The map"):
entry points above the adapters, the adapters above the process, the process above the
scheduling cycle, and so down to gangs/; cache/ and policies/ never import the scheduler.

Read from the source with ast, so a lazy import inside a function counts as well.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Bottom to top. The three adapters share one level: the node agent reuses the
# Kubernetes adapter's client, and none of them imports the simulator's or the
# agent's internals from below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("cache",),
    ("policies",),
    ("scheduler.gangs",),
    ("scheduler.planner",),
    ("scheduler.sharing",),
    ("scheduler.cycle",),
    ("scheduler.process",),
    ("scheduler.kube", "scheduler.sim", "scheduler.agent"),
    ("scheduler.cli",),
)


def _level(module: str) -> int | None:
    for level, packages in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in packages):
            return level
    return None


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found.extend((node.lineno, f"{node.module}.{a.name}") for a in node.names)
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
    return found


def _modules() -> list[Path]:
    return sorted(
        p for top in ("cache", "policies", "scheduler") for p in (ROOT / top).rglob("*.py")
    )


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_module_has_a_layer() -> None:
    homeless = [
        str(p.relative_to(ROOT))
        for p in _modules()
        if p.name != "__init__.py" and _level(_module_name(p)) is None
    ]
    assert homeless == [], "modules outside every package of the map: " + ", ".join(homeless)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path: Path) -> None:
    me = _level(_module_name(path))
    if me is None:  # scheduler/__init__.py: the package's docstring only
        return
    upward = []
    for line, module in _imports(path):
        level = _level(module)
        if level is not None and level > me:
            upward.append(f"line {line}: {module}")
    assert upward == [], f"{path.relative_to(ROOT)} imports a layer above it: {upward}"
