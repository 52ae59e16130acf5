# The status-packet encoder and the NamedTuple builder for C callers (drivers/dynamixel/bus.pyx builds each reply of a
# read and its Transmission with them).
cdef bytes status_packet(int id, int error, object params)
cdef object named_tuple(object cls, tuple values)
