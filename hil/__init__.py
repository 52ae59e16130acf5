"""servo-hil's engine: the nogil kernel (`hil.kernel`), the fixed-rate loop and its state exchange (`hil.loop`),
MuJoCo coupling of robot rigs (`hil.robot`), what a firmware model sees of an actuator (`hil.joint`) and parameter
sets with their conversions (`hil.params`). It imports nothing of the layers above it."""
