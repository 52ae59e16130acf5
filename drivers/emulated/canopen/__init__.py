"""Emulated CANopen (CiA 301) slave nodes, their PDOs, and the CAN bus of them behind the SLCAN adapter."""
