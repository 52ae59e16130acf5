"""Emulated devices on their own wire: each folder is a bus server that answers as the real device does."""
