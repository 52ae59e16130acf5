# cython: language_level=3
"""The state publisher's hot path: a loop's samples, encoded as msgpack maps, sent into a libzmq PUB socket
from C without the GIL (`RealtimeLoop.publish` calls it; the socket's owner thread is the daemon's)."""

from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy
from libc.math cimport isnan
from libc.stdio cimport snprintf
from posix.unistd cimport read as c_read
from posix.dlfcn cimport dlopen, dlsym, RTLD_NOW

from hil.loop.primitives cimport hil_load, hil_now_ns, hil_store, hil_wait_readable

DEF MAX_CHANGES = 64   # fault-flag changes one publish_ring() call reports

# libzmq's zmq_send, looked up in the libzmq pyzmq already loaded (bundled or the system's): the
# publisher sends from C without the GIL instead of three Python send() calls per message.
ctypedef int (*zmq_send_t)(void* s, const void* buf, size_t n, int flags) noexcept nogil
cdef zmq_send_t _zmq_send = NULL
cdef int ZMQ_SNDMORE = 2


def bind_libzmq(str path):
    """Resolve zmq_send in the shared library at `path` (the libzmq the process has loaded)."""
    global _zmq_send
    cdef void* h = dlopen(path.encode(), RTLD_NOW)
    if h == NULL:
        raise OSError(f"cannot load {path}")
    cdef void* f = dlsym(h, "zmq_send")
    if f == NULL:
        raise OSError(f"{path} has no zmq_send")
    _zmq_send = <zmq_send_t> f


cdef inline int _key(char* b, int m, const char* k, int n) noexcept nogil:
    b[m] = <char>(0xa0 | n)          # msgpack fixstr
    memcpy(b + m + 1, k, n)
    return m + 1 + n


cdef inline int _f64(char* b, int m, double x) noexcept nogil:
    cdef uint64_t u
    memcpy(&u, &x, 8)
    b[m] = <char>0xcb                # msgpack float 64, big-endian
    cdef int k
    for k in range(8):
        b[m + 1 + k] = <char>((u >> (56 - 8 * k)) & 0xff)
    return m + 9


cdef inline int _i64(char* b, int m, int64_t x) noexcept nogil:
    cdef uint64_t u = <uint64_t>x
    b[m] = <char>0xd3                # msgpack int 64, big-endian
    cdef int k
    for k in range(8):
        b[m + 1 + k] = <char>((u >> (56 - 8 * k)) & 0xff)
    return m + 9


cdef int _encode_sample(char* b, const Sample* s, int64_t flags) noexcept nogil:
    """The state-stream payload of one sample as a msgpack map (keys: docs/configuration.md, ZeroMQ state stream)."""
    cdef bint has_temp = not isnan(s.temperature)
    cdef int m = 1
    b[0] = <char>(0x80 | (14 if has_temp else 13))   # msgpack fixmap
    m = _i64(b, _key(b, m, "seq", 3), s.seq)
    m = _f64(b, _key(b, m, "t", 1), s.t)
    m = _f64(b, _key(b, m, "position", 8), s.theta)
    m = _f64(b, _key(b, m, "position_measured", 17), s.theta_meas)
    m = _f64(b, _key(b, m, "velocity", 8), s.omega)
    m = _f64(b, _key(b, m, "torque", 6), s.torque)
    m = _f64(b, _key(b, m, "current", 7), s.current)
    m = _f64(b, _key(b, m, "voltage", 7), s.voltage)
    m = _f64(b, _key(b, m, "goal", 4), s.u)
    m = _f64(b, _key(b, m, "enable", 6), s.enable)
    m = _f64(b, _key(b, m, "external_torque", 15), s.external_torque)
    m = _i64(b, _key(b, m, "mode", 4), s.law)
    m = _i64(b, _key(b, m, "fault_flags", 11), flags)
    if has_temp:
        m = _f64(b, _key(b, m, "temperature", 11), s.temperature)
    return m


cdef inline int _send_sample(void* sock, bint single_frame, const char* topic, Py_ssize_t topic_len,
                             const char* buf, int m, const char* ts, int tsl) noexcept nogil:
    """Send one sample's message (one frame, or topic + map + timestamp); zmq_send's result for the first."""
    if single_frame:
        return _zmq_send(sock, buf, m, 0)
    cdef int rc = _zmq_send(sock, topic, topic_len, ZMQ_SNDMORE)
    _zmq_send(sock, buf, m, ZMQ_SNDMORE)
    _zmq_send(sock, ts, tsl, 0)
    return rc


cdef object publish_ring(SampleRing* ring, size_t socket, list topics, int64_t[::1] bus_flags,
                         int64_t stamp_offset_ns, bint stamp_sim_time, int64_t[::1] known_flags, double wait_s,
                         int64_t* errors, bint single_frame, size_t tap_socket, int64_t tap_every):
    """`RealtimeLoop.publish` (its docstring says what it does) on `ring`; zmq_send failures are added to
    `errors`. `single_frame`: each sample is one frame, topics[index] (the msgpack head of a nested map, see
    `single_frame_head`) + the payload map + `"timestamp": <float64 seconds>`. `tap_socket` (0: none) also
    gets the samples whose seq is a multiple of `tap_every`, in the same framing."""
    if _zmq_send == NULL:
        raise RuntimeError("bind_libzmq() was not called")
    cdef Py_ssize_t n = len(topics), j
    if tap_every < 1:
        raise ValueError("tap_every must be >= 1")
    if bus_flags.shape[0] != n or known_flags.shape[0] != n:
        raise ValueError("topics, bus_flags and known_flags need one entry per actuator")
    cdef const char** tp = <const char**> malloc(n * sizeof(char*))
    cdef Py_ssize_t* tl = <Py_ssize_t*> malloc(n * sizeof(Py_ssize_t))
    if not (tp and tl):
        free(tp); free(tl)
        raise MemoryError()
    for j in range(n):
        tp[j] = <const char*> topics[j]
        tl[j] = len(topics[j])
    cdef int64_t chg[2 * MAX_CHANGES]
    cdef double chg_t[2 * MAX_CHANGES]
    cdef int64_t tail, head, flags, nchg = 0, failed = 0, sent = 0, stamp_key = -1, key, ns, left_ns
    cdef int64_t end_ns = hil_now_ns() + <int64_t>(wait_s * 1e9)
    cdef uint64_t drained
    cdef Sample* smp
    cdef char buf[1024]
    cdef char ts[40]
    cdef int m, tsl = 0, off
    cdef double stamp_s = 0.0
    for j in range(n):
        if tl[j] > 512:
            free(tp); free(tl)
            raise ValueError("a topic is longer than 512 bytes")
    cdef void* sock = <void*> socket
    cdef void* tap = <void*> tap_socket
    with nogil:
        while True:
            tail = ring.tail[0]
            head = hil_load(ring.head)
            while tail < head and nchg < MAX_CHANGES:
                smp = &ring.samples[tail % ring.capacity]
                flags = smp.fault_flags | bus_flags[smp.index]
                # every sample of a tick has the same stamp: format it once per tick
                key = smp.tick if stamp_sim_time else smp.deadline_ns
                if key != stamp_key:
                    stamp_key = key
                    if stamp_sim_time:
                        stamp_s = smp.t
                        tsl = snprintf(ts, 40, "%.9f", smp.t)
                    else:
                        ns = smp.deadline_ns + stamp_offset_ns
                        stamp_s = (ns // 1000000000) + (ns % 1000000000) * 1e-9
                        tsl = snprintf(ts, 40, "%lld.%09lld", <long long>(ns // 1000000000),
                                       <long long>(ns % 1000000000))
                if single_frame:
                    off = <int>tl[smp.index]
                    memcpy(buf, tp[smp.index], off)
                    m = _encode_sample(buf + off, smp, flags) + off
                    m = _f64(buf, _key(buf, m, "timestamp", 9), stamp_s)
                else:
                    m = _encode_sample(buf, smp, flags)
                if _send_sample(sock, single_frame, tp[smp.index], tl[smp.index], buf, m, ts, tsl) < 0:
                    failed += 1
                if tap != NULL and smp.seq % tap_every == 0:
                    _send_sample(tap, single_frame, tp[smp.index], tl[smp.index], buf, m, ts, tsl)
                sent += 1
                tail += 1
                if flags != known_flags[smp.index]:
                    known_flags[smp.index] = flags
                    chg[2 * nchg] = smp.index
                    chg[2 * nchg + 1] = flags
                    chg_t[2 * nchg] = smp.t
                    chg_t[2 * nchg + 1] = smp.temperature
                    nchg += 1
            hil_store(ring.tail, tail)
            left_ns = end_ns - hil_now_ns()
            if nchg > 0 or left_ns <= 0 or hil_load(ring.stop):
                break
            if hil_wait_readable(ring.notify_fd, <int>(left_ns // 1000000) + 1) > 0:
                c_read(ring.notify_fd, &drained, 8)
    free(tp); free(tl)
    errors[0] += failed
    return sent, [(chg[2 * k], chg[2 * k + 1], chg_t[2 * k], chg_t[2 * k + 1]) for k in range(nchg)]
