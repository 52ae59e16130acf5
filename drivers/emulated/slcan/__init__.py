"""An emulated SLCAN (Lawicel) USB-CAN adapter served on a pty, and its frame-line codec in C."""
