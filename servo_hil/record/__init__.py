"""Identification runs on real hardware (`servo-hil record`): bam's excitation trajectories played on a real servo,
logged in bam's format."""
