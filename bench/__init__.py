"""Benchmarks behind `servo-hil bench …`: each prints JSON with medians, p99 and ratios against a peer measured in
the same run. kernel_ab.py and kernel_bits.py, which compare this build's kernel with another build's, run as
scripts (`python bench/kernel_ab.py --base TREE`)."""
