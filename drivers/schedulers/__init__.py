"""Schedulers: threads that run firmware models at their control rate, apart from any bus."""
