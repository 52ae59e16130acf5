# The status-packet encoder for C callers (drivers/dynamixel/bus.pyx builds each reply of a read with it).
cdef bytes status_packet(int id, int error, object params)
