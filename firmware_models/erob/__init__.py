"""ZeroErr eRob firmware model: its CANopen object dictionary and variants, and its CiA 402 drive built on the
generic one (firmware_models.cia402) with the eRob's units, loop and manufacturer-specific objects."""
