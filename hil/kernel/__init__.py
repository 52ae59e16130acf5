"""The servo physics kernel (Cython, nogil): `Kernel` steps N actuators at a fixed dt.

Parameters, their units and neutral values are in `params.def` (the one table of them); the state in
`core.pxd`; the step order in `step.pxi`. `default_params()` returns every parameter at its neutral value.
"""

from hil.kernel.core import (
    DXL_MODES,
    FAULT_BITS,
    INTEGRATORS,
    LAWS,
    OUTPUTS,
    STS_MODES,
    Kernel,
    default_params,
    friction_budget,
    hand_record,
    peak_spent,
)

__all__ = ["DXL_MODES", "FAULT_BITS", "INTEGRATORS", "LAWS", "OUTPUTS", "STS_MODES", "Kernel", "default_params",
           "friction_budget", "hand_record", "peak_spent"]
