"""`servo-hil identify`: fit an actuator's bam parameters to its own logs (CMA-ES over closed-loop rollouts)."""
