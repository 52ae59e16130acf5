"""Benchmarks (`servo-hil bench …`, or `python bench/<name>.py`): each prints JSON with medians, p99 and ratios
against a peer measured in the same run."""
