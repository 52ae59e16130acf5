"""CANopen (CiA 301) slave nodes, their PDOs, a bus of them behind the SLCAN adapter, and its proxy mirror."""
