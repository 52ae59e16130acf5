"""The generic CAN, CANopen and CiA 402 code names no vendor: it imports nothing of the eRob's (lazy imports and
`importlib` strings included) and mentions no eRob module or product, so that another CiA 402 drive can be composed
from it as the eRob is (python-canopen keeps its profile apart the same way: canopen/profiles/p402.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERIC = ("drivers/emulated/slcan", "drivers/emulated/canopen", "firmware_models/cia402",
           "drivers/hosts/canopen_mirror.py", "drivers/hosts/can_interface.py", "drivers/schedulers/cia402_drives.py")
VENDOR_MODULE = re.compile(r"(^|\.)erob(\.|_|$)")              # firmware_models.erob, drivers.hosts.erob_link
VENDOR_WORD = re.compile(r"erob|zeroerr", re.IGNORECASE)      # a module path, a config/erob file, the product


def _files() -> list[Path]:
    out = []
    for name in GENERIC:
        path = ROOT / name
        out += [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.suffix in (".py", ".pyx", ".pxd"))
    return out


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a Python file, wherever it stands, and every string handed to
    importlib.import_module / __import__."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out += [(node.lineno, f"{node.module or ''}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and getattr(node.func, "attr", getattr(node.func, "id", "")) \
                in ("import_module", "__import__"):
            out.append((node.lineno, node.args[0].value))
    return out


def test_the_generic_folders_exist():
    """A moved folder would make the other tests pass on nothing."""
    assert all((ROOT / name).exists() for name in GENERIC)
    assert len(_files()) >= 12


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_no_vendor_module(path):
    if path.suffix != ".py":
        found = [(n, line) for n, line in enumerate(path.read_text().splitlines(), 1)
                 if re.match(r"\s*(from|c?import)\s", line) and VENDOR_MODULE.search(line.split()[1])]
    else:
        found = [(n, module) for n, module in _imported_modules(path) if VENDOR_MODULE.search(module)]
    assert not found, f"{path.relative_to(ROOT)} imports a vendor module: {found}"


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_mentions_no_vendor(path):
    """Not in code, strings, comments or docstrings: what is the eRob's is passed in by the composer
    (servo_hil/wiring/erob.py) or lives in firmware_models/erob/."""
    found = [f"{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
             if VENDOR_WORD.search(line)]
    assert not found, f"{path.relative_to(ROOT)} names a vendor:\n" + "\n".join(found)


def test_the_check_sees_a_vendor_import(tmp_path):
    """The import check catches the forms the rule is about: a lazy import and an importlib string."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from firmware_models.erob.drive import new_drive\n"
                     "import importlib\nimportlib.import_module('drivers.hosts.erob_link')\n"
                     "from firmware_models import erob\n")
    assert sorted(m for _, m in _imported_modules(probe) if VENDOR_MODULE.search(m)) == [
        "drivers.hosts.erob_link", "firmware_models.erob", "firmware_models.erob.drive.new_drive"]
