"""hil/kernel/params.def is the one table of the kernel's parameters: the Params struct the build makes
from it holds exactly its fields, in its order, with its neutral values."""

from __future__ import annotations

import math
import re
from pathlib import Path

from hil.kernel import DXL_MODES, FAULT_BITS, INTEGRATORS, LAWS, default_params

TABLE = Path(__file__).resolve().parents[2] / "hil" / "kernel" / "params.def"
ROW = re.compile(r'HIL_(PARAM|PLANNED|COLUMN)\((.*), "(.*)"\)')
NAMES = {"INFINITY": math.inf, "LAW_VOLTAGE": LAWS["voltage"], "INTEGRATOR_EULER": INTEGRATORS["euler"],
         "DXL_POSITION": DXL_MODES["position"],
         "FAULT_OVERHEAT | FAULT_OVERLOAD": FAULT_BITS["overheat"] | FAULT_BITS["overload"]}


def rows() -> list[tuple[str, list[str]]]:
    out = []
    for line in TABLE.read_text().splitlines():
        if line.startswith("HIL_"):
            m = ROW.fullmatch(line)
            assert m, f"malformed row: {line}"
            out.append((m[1], [a.strip() for a in m[2].split(",")]))
    return out


def test_params_are_the_table_in_its_order_with_its_neutral_values():
    fields = [(args[1], args[-1]) for kind, args in rows() if kind != "COLUMN"]
    p = default_params()
    assert list(p) == [name for name, _ in fields]
    for name, neutral in fields:
        if neutral == "NAN":
            assert math.isnan(p[name]), name
        else:
            assert p[name] == NAMES.get(neutral, None if neutral in NAMES else float(neutral)), name


def test_each_field_and_column_is_named_once():
    fields = [args[1] for kind, args in rows() if kind != "COLUMN"]
    columns = [args[2] if kind == "PLANNED" else args[0] for kind, args in rows() if kind != "PARAM"]
    assert len(fields) == len(set(fields))
    assert len(columns) == len(set(columns))
    assert "fw_kp" not in fields and "duty_gain" in fields   # SI: no register value among the fields
