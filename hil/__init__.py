"""servo-hil: a real-time hardware-in-the-loop servo emulator.

Layers (an import only points down):

1. engine: `hil.kernel` (the nogil step), `hil.loop` (fixed-rate loop, state exchange), `hil.robot` (MuJoCo
   coupling of robot rigs), `hil.joint` (what a firmware model sees of an actuator), `hil.params` (parameter sets
   and their conversions);
2. `firmware_models`: what a servo's firmware does with register and object writes;
3. `drivers`: the wire;
4. application: `hil.rig`, `hil.daemon`, `hil.buses`, `hil.logs`, `hil.record`, `hil.offline`, `hil.cli`, `bench`.
"""
