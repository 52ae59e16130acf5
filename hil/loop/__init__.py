"""The fixed-rate loop around the kernel (engine): `rt` (RealtimeLoop: the nogil tick, its command ring and state
snapshot), `publisher` (the sample ring drained into a ZeroMQ PUB socket from C) and `realtime` (SCHED_FIFO,
timer slack and mlockall for the loop and every other time-critical thread)."""
