"""The wire (layer 3): bus protocols, ports and reply pacing, and the adapters that talk to real hardware through
the vendors' libraries. Drivers use the engine and the firmware models; the application composes them."""
