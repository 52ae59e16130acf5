"""Helpers shared by the kernel tests."""

from hil.kernel import Kernel, default_params

LOCKED = 1e30  # [kg·m²] load inertia that keeps the rotor at rest to far below round-off


def params(**kw) -> dict:
    """A full kernel parameter dict: the neutral defaults with `kw` applied (names are checked)."""
    p = default_params()
    unknown = set(kw) - set(p)
    assert not unknown, f"not kernel parameters: {unknown}"
    p.update(kw)
    return p


def trajectory(p: dict, goals, enable: float = 1.0, dt: float = 1e-3) -> list[dict]:
    """One actuator with parameters `p` stepped once per goal, `dt` [s] a step; the state after each step."""
    k = Kernel(1, dt)
    k.set_params(0, p)
    out = []
    for g in goals:
        k.step([g], [enable], [0.0])
        out.append(dict(k.get_state(0)))
    return out
