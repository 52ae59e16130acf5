"""The servo physics kernel (Cython, nogil): `Kernel` steps N actuators at a fixed dt.

Parameter and state fields, their units and the step order are documented in `core.pxd` and
`core.pyx`; `default_params()` returns every parameter with its neutral value.
"""

from hil.kernel.core import (
    DXL_MODES,
    FAULT_BITS,
    INTEGRATORS,
    LAWS,
    OUTPUTS,
    Kernel,
    default_params,
    friction_budget,
)

__all__ = ["DXL_MODES", "FAULT_BITS", "INTEGRATORS", "LAWS", "OUTPUTS", "Kernel", "default_params", "friction_budget"]
