# cython: language_level=3
"""Real-time setup of a process and its time-critical threads (sched(7), prctl(2), mlockall(2)).

A thread asks for SCHED_FIFO (it then runs before every normal process on its CPU), else for 1 ns timer
slack (its sleeps and select/poll timeouts then end on time instead of up to the default slack late, prctl(2)
PR_SET_TIMERSLACK); the process
locks its memory (`mlockall`) so that no page fault stalls a tick.
"""

from hil.loop.primitives cimport hil_timerslack_1ns, hil_try_fifo

RT_MODES = {0: "starting", 1: "SCHED_FIFO", 2: "SCHED_OTHER (timer slack 1 ns)", 3: "SCHED_OTHER"}


cdef int realtime(int priority) noexcept nogil:
    """The calling thread to SCHED_FIFO at `priority` (if > 0 and allowed), else timer slack 1 ns; the
    RT_MODES key of what it got."""
    if priority > 0 and hil_try_fifo(priority) == 0:
        return 1
    if hil_timerslack_1ns() == 0:
        return 2
    return 3


def realtime_thread(int priority):
    """What the loop thread does for itself, for another time-critical thread (a bus server): the calling
    thread to SCHED_FIFO at `priority` (1..99; 0 = do not try), else 1 ns timer slack. Returns the RT_MODES
    name it got."""
    return RT_MODES[realtime(priority)]


def lock_memory():
    """mlockall(MCL_CURRENT | MCL_FUTURE); returns 0 or the errno."""
    import ctypes
    import ctypes.util
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.mlockall(3) != 0:
        return ctypes.get_errno()
    return 0
