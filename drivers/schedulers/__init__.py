"""Schedulers: the threads and locks that run firmware models at their control rate, apart from any bus (the CiA 402
drives of a rig)."""
