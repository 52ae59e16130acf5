# cython: language_level=3
"""`servo-hil bench loop`'s state-stream subscriber in C: receive and stamp without the interpreter.

libzmq's `zmq_recv` without the GIL, every message stamped with CLOCK_REALTIME when its first frame is in, so
that the subscriber's own interpreter time is not charged to the transport (docs/benchmarks.md, Real-time loop).
"""

from libc.stdint cimport int64_t
from libc.stdlib cimport strtod
from libc.string cimport memcpy, memset
from posix.dlfcn cimport dlopen, dlsym, RTLD_NOW

import numpy as np

cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    cdef struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clk_id, timespec* tp)
    int CLOCK_REALTIME
    int CLOCK_MONOTONIC

ctypedef int (*zmq_recv_t)(void* s, void* buf, size_t n, int flags) noexcept nogil
ctypedef int (*zmq_getsockopt_t)(void* s, int option, void* value, size_t* size) noexcept nogil
cdef zmq_recv_t _zmq_recv = NULL
cdef zmq_getsockopt_t _zmq_getsockopt = NULL
cdef int ZMQ_RCVMORE = 13

cdef enum:
    TOPIC_BYTES = 64    # topics longer than this are truncated (the daemon's are "<rig>/<joint>")
    HEAD_BYTES = 32     # payload bytes kept: the msgpack map header and "seq" come first


def bind_libzmq(str path):
    """Resolve zmq_recv and zmq_getsockopt in the shared library at `path` (the libzmq pyzmq loaded)."""
    global _zmq_recv, _zmq_getsockopt
    cdef void* h = dlopen(path.encode(), RTLD_NOW)
    if h == NULL:
        raise OSError(f"cannot load {path}")
    _zmq_recv = <zmq_recv_t> dlsym(h, "zmq_recv")
    _zmq_getsockopt = <zmq_getsockopt_t> dlsym(h, "zmq_getsockopt")
    if _zmq_recv == NULL or _zmq_getsockopt == NULL:
        raise OSError(f"{path} has no zmq_recv / zmq_getsockopt")


cdef inline double _now(int clock) noexcept nogil:
    cdef timespec ts
    clock_gettime(clock, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef inline bint _more(void* sock) noexcept nogil:
    cdef int more = 0
    cdef size_t size = sizeof(int)
    _zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &size)
    return more != 0


def receive(size_t socket, double seconds, int64_t capacity):
    """Receive [topic, payload, timestamp] messages from the SUB socket `socket` (pyzmq's
    `Socket.underlying`, with a receive timeout set so that the window can end) for `seconds` of
    monotonic time or until `capacity` messages are in.

    Returns a dict of numpy arrays, one row per message: `received` (epoch s at the first frame),
    `stamp` (the timestamp frame as a number [s]), `topic` (S64), `head` (the payload's first 32 bytes, a
    uint8 row each, zero-filled), `payload_len`,
    plus `window_s`, the monotonic length of the window. Messages without exactly three frames are
    skipped (counted in `malformed`).
    """
    if _zmq_recv == NULL:
        raise RuntimeError("bind_libzmq() was not called")
    received = np.zeros(capacity, dtype=np.float64)
    stamp = np.zeros(capacity, dtype=np.float64)
    topic = np.zeros(capacity, dtype=f"S{TOPIC_BYTES}")
    head = np.zeros((capacity, HEAD_BYTES), dtype=np.int8)
    payload_len = np.zeros(capacity, dtype=np.int64)
    cdef double[::1] rv = received, sv = stamp
    cdef int64_t[::1] lv = payload_len
    cdef signed char[:, ::1] tv = topic.view(np.int8).reshape(capacity, TOPIC_BYTES)
    cdef signed char[:, ::1] hv = head
    cdef void* sock = <void*> socket
    cdef char buf[512]
    cdef char tsbuf[64]
    cdef int64_t n = 0, malformed = 0
    cdef int rc, m
    cdef double t_recv, t0, end
    with nogil:
        t0 = _now(CLOCK_MONOTONIC)
        end = t0 + seconds
        while n < capacity and _now(CLOCK_MONOTONIC) < end:
            rc = _zmq_recv(sock, buf, sizeof(buf), 0)        # blocks up to the socket's receive timeout
            if rc < 0:
                continue
            t_recv = _now(CLOCK_REALTIME)
            if not _more(sock):
                malformed += 1
                continue
            memset(&tv[n, 0], 0, TOPIC_BYTES)               # the row may hold a skipped message's bytes
            memset(&hv[n, 0], 0, HEAD_BYTES)
            memcpy(&tv[n, 0], buf, min(rc, <int> TOPIC_BYTES))
            rc = _zmq_recv(sock, buf, sizeof(buf), 0)        # the other frames are already here
            memcpy(&hv[n, 0], buf, min(max(rc, 0), <int> HEAD_BYTES))
            lv[n] = rc
            if rc < 0 or not _more(sock):
                malformed += 1
                continue
            m = _zmq_recv(sock, tsbuf, sizeof(tsbuf) - 1, 0)
            if m < 0 or m >= <int> sizeof(tsbuf) or _more(sock):
                malformed += 1
                while _more(sock):                           # drop the rest of an unexpected message
                    _zmq_recv(sock, buf, sizeof(buf), 0)
                continue
            tsbuf[m] = 0
            rv[n] = t_recv
            sv[n] = strtod(tsbuf, NULL)
            n += 1
        t0 = _now(CLOCK_MONOTONIC) - t0
    return {"received": received[:n], "stamp": stamp[:n], "topic": topic[:n], "head": head[:n].view(np.uint8),
            "payload_len": payload_len[:n], "window_s": t0, "malformed": malformed}
