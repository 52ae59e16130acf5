"""ZeroErr eRob firmware model: CiA 402 drive behaviour and its CANopen object dictionary."""
