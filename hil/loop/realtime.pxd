# Real-time setup of the calling thread, for the loop thread (rt.pyx) at C level.
cdef int realtime(int priority) noexcept nogil
