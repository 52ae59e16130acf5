"""The FF FF frame of Dynamixel Protocol 1.0 and Feetech's SCS/STS protocol: frame codec, the bus, one dialect each."""
