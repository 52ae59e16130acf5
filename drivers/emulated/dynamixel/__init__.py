"""Dynamixel Protocol 2.0 on the wire: codec, the bus of simulated servos, its server thread and the proxy mirror."""
