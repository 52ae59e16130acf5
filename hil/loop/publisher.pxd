# The state publisher's side of the loop's sample ring: what a sample holds and where the ring lives.
from libc.stdint cimport int64_t

cdef packed struct Sample:
    int64_t seq                # publish number: gap-free unless the ring overflowed
    int64_t tick
    int64_t deadline_ns        # CLOCK_MONOTONIC deadline of the tick (its wake-up time in lock-step)
    int64_t index
    double t
    double theta
    double theta_meas
    double omega
    double torque
    double current
    double voltage
    double temperature
    double u
    double enable
    double external_torque
    int64_t law
    int64_t fault_flags

cdef struct SampleRing:
    # single producer (the loop) / single consumer (the publisher); valid while the loop object lives
    Sample* samples
    int64_t capacity
    int64_t* head              # samples written, released by the loop after each tick's batch
    int64_t* tail              # samples consumed, released by the publisher
    int64_t* stop              # nonzero once the loop was told to stop
    int notify_fd              # eventfd the loop signals after each batch

cdef object publish_ring(SampleRing* ring, size_t socket, list topics, int64_t[::1] bus_flags,
                         int64_t stamp_offset_ns, bint stamp_sim_time, int64_t[::1] known_flags, double wait_s,
                         int64_t* errors, bint single_frame, size_t tap_socket, int64_t tap_every)
