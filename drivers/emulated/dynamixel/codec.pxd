# The status-packet encoder and the NamedTuple builder for C callers (drivers/emulated/dynamixel/bus.pyx builds each reply of a
# read and its Transmission with them).
cdef bytes status_packet(int id, int error, object params)
cdef object named_tuple(object cls, tuple values)

# the instructions' parameter decoders (bus.pyx calls them per packet)
cpdef object decode_read(params)
cpdef object decode_write(params)
cpdef object decode_sync_read(params)
cpdef object decode_sync_write(params)
cpdef object decode_bulk_read(params)
cpdef object decode_bulk_write(params)
