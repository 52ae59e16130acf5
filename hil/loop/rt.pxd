# The loop's types other extensions read at C speed: a StateView's struct (firmware_models/dynamixel/present.pyx
# computes Present registers from it without a Python lookup per field).
from hil.kernel.core cimport State


cdef class StateView:
    cdef State st
