"""The house's rules, read from the source: imports point down the layers, and no two files or packages import
each other.

Layers (docs/architecture.md), one top-level folder each: the engine `hil` ← `firmware_models` ← `drivers` ← the
application `servo_hil` ← `bench`. Every import counts, lazy ones (inside functions) and `TYPE_CHECKING` ones
included, in Python and Cython files alike.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hil", "firmware_models", "drivers", "servo_hil", "bench")   # the layers, bottom up: one folder each

# a Cython import line: `from a.b cimport x`, `from a.b import x`, `cimport a.b`, `import a.b`
_CYTHON_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import\s+([\w ,()*]+)|c?import\s+([\w., ]+))", re.M)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def _sources() -> dict[str, Path]:
    """Every first-party module: name → file (.py, .pyx; a .pxd counts as its module's imports)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*")):
            hidden = any(part.startswith(".") for part in path.relative_to(ROOT).parts)  # bench/.venv-bam
            if path.suffix in (".py", ".pyx", ".pxd") and not path.name.endswith("_pb2.py") and not hidden:
                found.setdefault(f"{_module_name(path)}{path.suffix if path.suffix == '.pxd' else ''}", path)
    return found


def _raw_imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names imported from it) for every import statement of the file, wherever it stands."""
    text = path.read_text()
    if path.suffix != ".py":
        out = []
        for m in _CYTHON_IMPORT.finditer(text):
            if m.group(1):
                out.append((m.group(1), [n.strip(" ()") for n in m.group(2).split(",")]))
            else:
                out.extend((n.strip().split(" as ")[0], []) for n in m.group(3).split(","))
        return out
    out = []
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.append((base, [a.name for a in node.names]))
    return out


def _first_party_imports(path: Path, modules: set[str]) -> set[str]:
    """The first-party modules a file imports (a `from package import submodule` names the submodule)."""
    found = set()
    for module, names in _raw_imports(path):
        if module.split(".")[0] not in PACKAGES:
            continue
        subs = {f"{module}.{n}" for n in names if f"{module}.{n}" in modules}
        found |= subs or {module}
    return found


def _layer(module: str) -> int:
    return PACKAGES.index(module.split(".")[0]) + 1


def _graph() -> dict[str, set[str]]:
    sources = _sources()
    modules = {m.removesuffix(".pxd") for m in sources}
    graph: dict[str, set[str]] = {}
    for name, path in sources.items():
        module = name.removesuffix(".pxd")
        graph.setdefault(module, set()).update(_first_party_imports(path, modules) - {module})
    return graph


def test_the_walk_sees_lazy_and_cython_imports():
    """The walker itself: a lazy import in a function and a Cython cimport are both found."""
    graph = _graph()
    assert "servo_hil.daemon.service" in graph["servo_hil.cli.main"]          # imported inside the `run` command
    assert "hil.kernel.core" in graph["firmware_models.dynamixel.present"]   # a cimport in present.pxd/.pyx
    assert len(graph) > 60


def test_imports_point_down_the_layers():
    up = sorted(f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
                for m, targets in _graph().items() for t in targets if _layer(t) > _layer(m))
    assert not up, "imports that point up a layer:\n" + "\n".join(up)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_files():
    # a package's __init__ that re-exports its submodules is not a cycle with them unless they import it back
    cycles = _cycles(_graph())
    assert not cycles, "files that import each other (directly or around a circle):\n" + "\n".join(
        " -> ".join(c) for c in cycles)


def _package(module: str) -> str:
    """The package a module belongs to: its folder, counted two names deep (`servo_hil.offline.identify.fit` and
    `servo_hil.offline.replay` are both `servo_hil.offline`; `bench.kernel` is `bench`)."""
    path = _sources().get(module) or _sources().get(module + ".pxd")
    folder = module if path is not None and path.name == "__init__.py" else module.rpartition(".")[0] or module
    return ".".join(folder.split(".")[:2])


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        out.setdefault(_package(module), set()).update(_package(t) for t in targets)
    return {p: ts - {p} for p, ts in out.items()}


def test_no_import_cycle_between_packages():
    # one package's file importing another's, lazily or not, and any file of that one importing back: a cycle
    graph = _graph()
    cycles = list(_cycles(_package_graph(graph)))
    why = [f"{' <-> '.join(c)}: " + ", ".join(sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts
                                                   if _package(m) in c and _package(t) in c
                                                   and _package(m) != _package(t)))
           for c in cycles]
    assert not cycles, "packages that import each other:\n" + "\n".join(why)


def test_the_cli_starts_without_bench():
    """`servo-hil --help` and `servo-hil run` load servo_hil.cli.main alone: no module of bench/ comes with it."""
    code = "import sys, servo_hil.cli.main; print(sorted(m for m in sys.modules if m.partition('.')[0] == 'bench'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("rule", ["up", "cycle"])
def test_the_rules_catch_a_violation(rule):
    """Each rule fails on a graph that breaks it."""
    if rule == "up":
        graph = {"drivers.x": {"servo_hil.daemon.live_rig"}, "servo_hil.daemon.live_rig": set()}
        assert [t for m, ts in graph.items() for t in ts if _layer(t) > _layer(m)]
    else:
        assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]


def test_a_lazy_import_back_is_a_package_cycle():
    """A function-level import from servo_hil/wiring into servo_hil/daemon, which imports servo_hil/wiring, is
    caught."""
    graph = {"servo_hil.daemon.service": {"servo_hil.wiring"},
             "servo_hil.wiring.dynamixel": {"servo_hil.daemon.live_rig"}, "servo_hil.wiring": set(),
             "servo_hil.daemon.live_rig": set()}
    assert sorted(map(sorted, _cycles(_package_graph(graph)))) == [["servo_hil.daemon", "servo_hil.wiring"]]
