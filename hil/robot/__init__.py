"""Robots: the rig's servos driving a MuJoCo multibody model (docs/robots.md).

`mujoco` is imported first: the engine extension links MuJoCo's shared library, which the wheel's own
modules load.
"""

import mujoco  # noqa: F401  (loads libmujoco before hil.robot.engine)
