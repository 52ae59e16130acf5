"""The wire (layer 3), by role: `emulated/` devices that answer on their own wire as the real ones do, `hosts/`
clients and mirrors that talk to real hardware through the vendors' libraries, `schedulers/` that run firmware
models at their control rate, and `wire/`, what every bus server shares. Protocols: docs/protocols/."""
