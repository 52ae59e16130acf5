"""Emulated devices on their own wire: each folder is a bus server that answers as the real device does."""

# what a rig's bus may speak (its `protocol = "..."`), one line each; servo_hil's wiring opens each of them
PROTOCOLS: dict[str, str] = {
    "dynamixel": "Dynamixel Protocol 2.0 servos on a serial line (dynamixel/)",
    "dynamixel1": "Dynamixel Protocol 1.0 servos: AX, and MX in 1.0 firmware (protocol1/, Dynamixel dialect)",
    "feetech": "Feetech STS/SCS servos (protocol1/, Feetech dialect)",
    "canopen": "CiA 402 drives as CANopen nodes behind a Lawicel SLCAN USB-CAN adapter (slcan/, canopen/)",
    "etherban": "CiA 402 drives behind Rhoban's Etherban ZeroMQ server (etherban/)",
}
