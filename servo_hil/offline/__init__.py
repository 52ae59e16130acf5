"""Offline work on the engine: simulate a command file, replay logs, report sim vs real, identify parameters."""
