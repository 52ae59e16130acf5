"""The `[foxglove]` live view: a Foxglove WebSocket server (the foxglove-sdk package).

It carries every joint's state, the daemon's events and, on a robot rig, the bodies' poses, for the Foxglove
app. Channels, schemas and which clients connect: docs/configuration.md, Foxglove live view.
"""

from __future__ import annotations

import json
import logging

import foxglove
from foxglove.channels import FrameTransformsChannel
from foxglove.messages import FrameTransform, FrameTransforms, Quaternion, Timestamp, Vector3

from hil.params.config_file import ConfigError
from servo_hil.daemon.live_rig import LiveRig
from servo_hil.rig import FoxgloveConfig

WORLD_FRAME = "world"   # MuJoCo's body 0; every body's transform is given from it

log = logging.getLogger("servo-hil")


def _number(description: str) -> dict:
    return {"type": "number", "description": description}


def _integer(description: str) -> dict:
    return {"type": "integer", "description": description}


JOINT_STATE_SCHEMA: dict = {
    "title": "servo-hil joint state",
    "type": "object",
    "properties": {
        "seq": _integer("publish number, +1 per published tick"),
        "t": _number("simulation time [s]"),
        "position": _number("true output angle [rad]"),
        "position_measured": _number("output angle the encoder reports [rad]"),
        "velocity": _number("output velocity [rad/s]"),
        "torque": _number("actuator torque at the output [N·m]"),
        "current": _number("armature current [A]"),
        "voltage": _number("terminal voltage [V]"),
        "temperature": _number("winding temperature [°C] (absent without a thermal model)"),
        "goal": _number("the firmware law's command, in its unit (rad for position laws)"),
        "enable": _number("torque enable (0/1)"),
        "external_torque": _number("co-simulation torque at the output [N·m]"),
        "mode": _integer("firmware law code (docs/configuration.md)"),
        "fault_flags": _integer("fault bits (docs/configuration.md)"),
    },
    "required": ["seq", "t", "position", "velocity", "torque", "current", "voltage", "goal", "enable", "mode",
                 "fault_flags"],
}
"""The JSON schema of a `/<rig>/<joint>/state` message: the state stream's keys (units in each description)."""

EVENT_SCHEMA: dict = {
    "title": "servo-hil event",
    "type": "object",
    "properties": {
        "type": {"type": "string", "description": "fault_raised, fault_cleared, shutdown, mode, fault_injected, "
                                                  "fault_clear_requested, paused, resumed, reset"},
        "actuator": {"type": "string", "description": "the joint it concerns, if any"},
        "t_wall": _number("wall-clock time it was raised [epoch s]"),
    },
    "required": ["type"],
    "additionalProperties": True,
}
"""The JSON schema of a `/<rig>/events` message (the other keys depend on the type)."""


def body_frames(model) -> list[str]:
    """The Foxglove frame id of each body of a MuJoCo model: its name; `body<i>` for an unnamed body i, with "_"
    added while another body has that name."""
    names = [model.body(i).name for i in range(model.nbody)]
    taken = set(names)
    for i, name in enumerate(names):
        if not name:
            name = f"body{i}"
            while name in taken:
                name += "_"
            names[i] = name
            taken.add(name)
    return names


def frame_transforms(stamp_ns: int, poses: dict, frames: list[str]) -> FrameTransforms:
    """One poses message of the state stream (zmq_io: world positions, quaternions w, x, y, z) stamped `stamp_ns`
    [ns] as foxglove.FrameTransforms from `world` to each body of `frames` (body 0, the world itself, left out)."""
    xyz, wxyz = poses["position"], poses["quaternion"]
    stamp = Timestamp(stamp_ns // 10**9, stamp_ns % 10**9)
    return FrameTransforms(transforms=[
        FrameTransform(timestamp=stamp, parent_frame_id=WORLD_FRAME, child_frame_id=frames[i],
                       translation=Vector3(x=xyz[3 * i], y=xyz[3 * i + 1], z=xyz[3 * i + 2]),
                       rotation=Quaternion(x=wxyz[4 * i + 1], y=wxyz[4 * i + 2], z=wxyz[4 * i + 3], w=wxyz[4 * i]))
        for i in range(1, len(frames))])


class FoxgloveBridge:
    """A foxglove-sdk WebSocket server on `cfg.bind`:`cfg.port` with a channel per joint and one of events.
    `state` is a state-stream sink (zmq_io.StateSubscriber); events arrive through LiveRig's listeners.
    Its own foxglove.Context keeps its channels apart from any other logging in the process."""

    def __init__(self, live: LiveRig, cfg: FoxgloveConfig):
        self.live = live
        self.context = foxglove.Context()
        rig = live.rig.name
        self.channels = {joint: foxglove.Channel(f"/{rig}/{joint}/state", context=self.context,
                                                 schema=foxglove.Schema(name="servo_hil.JointState",
                                                                        encoding="jsonschema",
                                                                        data=json.dumps(JOINT_STATE_SCHEMA).encode()),
                                                 message_encoding="json")
                         for joint in live.names}
        self.events = foxglove.Channel(f"/{rig}/events", context=self.context,
                                       schema=foxglove.Schema(name="servo_hil.Event", encoding="jsonschema",
                                                              data=json.dumps(EVENT_SCHEMA).encode()),
                                       message_encoding="json")
        self.transforms: FrameTransformsChannel | None = None
        if live.robot is not None:
            self.frames = body_frames(live.robot.model)
            self.transforms = FrameTransformsChannel(f"/{rig}/poses", context=self.context)
        try:
            self.server = foxglove.start_server(name=f"servo-hil {rig}", host=cfg.bind, port=cfg.port,
                                                context=self.context)
        except Exception as exc:  # the SDK raises its own error type for a port in use or a bad address
            raise ConfigError(f"foxglove: cannot listen on {cfg.bind}:{cfg.port}: {exc}") from None
        self.port: int = self.server.port
        live.listeners.append(self.event)

    def state(self, joint: str, stamp_ns: int, state: dict) -> None:
        """Send one joint state (a state-stream map) stamped `stamp_ns` [ns]."""
        self.channels[joint].log(json.dumps(state).encode(), log_time=stamp_ns)

    def poses(self, stamp_ns: int, poses: dict) -> None:
        """Send one poses message of the state stream (zmq_io: world positions, quaternions w, x, y, z) stamped
        `stamp_ns` [ns] as the transforms from `world` to each body (body 0, the world itself, left out)."""
        self.transforms.log(frame_transforms(stamp_ns, poses, self.frames), log_time=stamp_ns)

    def event(self, event: dict) -> None:
        """Send one daemon event (a LiveRig listener)."""
        self.events.log(json.dumps(event, default=str).encode(), log_time=round(event["t_wall"] * 1e9))

    def close(self) -> None:
        if self.event in self.live.listeners:
            self.live.listeners.remove(self.event)
        self.server.stop()
