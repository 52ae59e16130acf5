"""An emulated Dynamixel Protocol 2.0 bus: the codec, the bus of simulated servos and its server thread."""
