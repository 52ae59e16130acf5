"""servo-hil, the application: the `servo-hil` command, its daemon and web console, rig files, wiring buses to a
rig, recording, mirrors' logs and the offline tools (simulate, replay, identify, report). It composes the layers
below it: the engine (`hil`), the firmware models (`firmware_models`) and the wire (`drivers`)."""
