"""Helpers shared by the kernel tests."""

from hil.kernel import default_params

LOCKED = 1e30  # [kg·m²] load inertia that keeps the rotor at rest to far below round-off


def params(**kw) -> dict:
    """A full kernel parameter dict: the neutral defaults with `kw` applied (names are checked)."""
    p = default_params()
    unknown = set(kw) - set(p)
    assert not unknown, f"not kernel parameters: {unknown}"
    p.update(kw)
    return p
