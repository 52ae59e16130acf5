"""CAN at the byte level: the SLCAN (Lawicel) adapter served on a pty, its frame codec, and real CAN buses named the
way python-can names them."""
