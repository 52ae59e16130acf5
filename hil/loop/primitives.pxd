# C11 atomics, the monotonic clock and the waits the loop (rt.pyx), its state publisher (publisher.pyx) and real-time
# setup (realtime.pyx) share: static inline C, compiled into each module that cimports it (no call across modules).
from libc.stdint cimport int64_t

cdef extern from *:
    """
    #include <stdint.h>
    #include <time.h>
    #include <pthread.h>
    #include <sched.h>
    #include <sys/prctl.h>
    #include <poll.h>
    static inline int64_t hil_load(int64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline void hil_store(int64_t* p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
    static inline int64_t hil_add(int64_t* p, int64_t v) { return __atomic_add_fetch(p, v, __ATOMIC_ACQ_REL); }
    static inline void hil_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
    static inline int64_t hil_now_ns(void) {
        struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    }
    static inline void hil_sleep_until(int64_t t_ns) {
        struct timespec ts; ts.tv_sec = t_ns / 1000000000LL; ts.tv_nsec = t_ns % 1000000000LL;
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {}
    }
    static inline int hil_try_fifo(int prio) {
        struct sched_param sp; sp.sched_priority = prio;
        return pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
    }
    static inline int hil_timerslack_1ns(void) { return prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); }
    static inline int hil_wait_readable(int fd, int timeout_ms) {
        struct pollfd p; p.fd = fd; p.events = POLLIN; p.revents = 0;
        return poll(&p, 1, timeout_ms);
    }
    """
    int64_t hil_load(int64_t* p) nogil
    void hil_store(int64_t* p, int64_t v) nogil
    int64_t hil_add(int64_t* p, int64_t v) nogil
    void hil_fence() nogil
    int64_t hil_now_ns() nogil
    void hil_sleep_until(int64_t t_ns) nogil
    int hil_wait_readable(int fd, int timeout_ms) nogil
    int hil_try_fifo(int prio) nogil
    int hil_timerslack_1ns() nogil
