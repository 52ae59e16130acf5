"""A robot rig (docs/robots.md: the friction paper's 2R arm, config/robots/arm_2r.xml) served by `servo-hil run`
through the planes every rig has: `set_param` of what the coupling copies into the MuJoCo model (against a rig
started with the value), MQTT commands and fault injection through a real broker, the daemon's own MCAP
recording, and the Foxglove WebSocket server's frame transforms of the bodies (read by a client speaking
Foxglove's published WebSocket protocol, compared with the poses on ZeroMQ)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq
from mcap.reader import make_reader

from servo_hil.daemon.foxglove import body_frames
from servo_hil.daemon.zmq_io import stamp_ns
from servo_hil.logs.mcap import read_side_by_side, recording_files

from . import FLAG, MqttClient, Stream, free_port, ok, refused
from .conftest import RigFile, write_rig
from .test_viewers import Collector, decoder, foxglove_session, pause_and_count_skipped, recorded_against_stream

ROOT = Path(__file__).resolve().parents[3]
ARM_2R = ROOT / "config" / "robots" / "arm_2r.xml"
JOINTS = ("shoulder", "elbow")

# the 2R arm of config/rigs/arm_2r.toml: bam's M4 sets of the MX-106 and MX-64 ({elbow} selects the elbow's)
DXL_ARM = """
[[actuators]]
joint = "shoulder"
catalog = "mx106"
model = "m4"
[[actuators]]
joint = "elbow"
catalog = "mx64"
{elbow}
initial = { theta = 0.2 }
"""

# the same arm turned by inline MuJoCo <dcmotor>s with the dcmotor position law (goal in gear·rad)
DCMOTOR_ARM = """
[[actuators]]
joint = "shoulder"
resistance = 1.0
kt = 0.03
gear = {gear}
armature = {armature}
damping = [{b1}]
input = "position"
controller = [2, 0, 0, 0, 0, 12]
[[actuators]]
joint = "elbow"
resistance = 3.0
kt = 0.018
gear = 120
armature = 2e-7
damping = [2e-6]
input = "position"
controller = [2, 0, 0, 0, 0, 12]
initial = { theta = 0.2 }
"""


def robot_rig(directory: Path, name: str, actuators: str, *, lockstep: bool = False, mqtt_port: int | None = None,
              extra: str = "") -> RigFile:
    """A robot rig of `actuators` on config/robots/arm_2r.xml (write_rig's ZeroMQ, MQTT with status every 0.5 s,
    and loop)."""
    rig = write_rig(directory / f"{name}.toml", name, joints=(), mqtt_port=mqtt_port, lockstep=lockstep,
                    status_period_s=0.5, extra=f'\n[robot]\nmjcf = "{ARM_2R}"\npose_every = 10\n{extra}\n{actuators}')
    rig.joints = list(JOINTS)
    return rig


def trajectory(rig: RigFile, ticks: int, goals: dict[str, float]) -> np.ndarray:
    """Lock-step: give the goals, run `ticks` ticks, return every tick's published positions (ticks, joints)."""
    with Stream(rig.pub, f"{rig.name}/") as stream:
        stream.wait_subscribed()
        for joint, goal in goals.items():
            ok(rig.cmd, "set_goal", actuator=joint, value=goal)
        ok(rig.cmd, "step", n=ticks)
        series: dict[str, list[float]] = {j: [] for j in JOINTS}
        deadline = time.monotonic() + 30.0
        while min(map(len, series.values())) < ticks and time.monotonic() < deadline:
            s = stream.recv(1.0)
            if s is not None and s.joint in series:
                series[s.joint].append(s.payload["position"])
    assert all(len(v) == ticks for v in series.values()), {j: len(v) for j, v in series.items()}
    return np.array([series[j] for j in JOINTS]).T


def on_command_socket(rig: RigFile, args: dict) -> None:
    ok(rig.cmd, "set_param", **args)


def compare_set_to_started(make, changes: dict[str, float], goals: dict[str, float], ticks: int = 1500,
                           send=on_command_socket) -> None:
    """make(started: bool) -> a lock-step robot rig whose shoulder starts with the values of `changes` (True) or
    without them (False). The second, given them by `set_param` (send(rig, arguments): on its command socket, or
    MQTT) before its first tick, follows the first to round-off; after `reset` (back to its configured values) it
    leaves it."""
    started, later = make(True), make(False)
    reference = trajectory(started, ticks, goals)
    for name, value in changes.items():
        send(later, {"actuator": "shoulder", "name": name, "value": value})
    followed = trajectory(later, ticks, goals)
    assert np.ptp(reference[:, 0]) > 0.2, "the shoulder does not move"
    err = float(np.max(np.abs(followed - reference)))
    print(f"set_param {changes}: max |Δq| against the rig started with them: {err:.3e} rad")
    assert err <= 1e-12, f"max |Δq| = {err:.3e} rad"
    ok(later.cmd, "reset")
    configured = trajectory(later, ticks, goals)
    assert float(np.max(np.abs(configured - reference))) > 1e-4, "the changed parameters make no difference"


def test_set_param_of_armature_and_viscous_friction_reaches_the_hinge(tmp_path, start_daemon, bam_params):
    """The shoulder's MX-106 with bam's M4 set: its armature is the hinge's dof_armature and its viscous friction
    Kv part of the hinge's dof_damping (bam/mujoco.py)."""
    m4 = json.loads((bam_params / "mx106" / "m4.json").read_text())
    changes = {"armature": 1.5 * m4["armature"], "friction_viscous": 3.0 * m4["friction_viscous"]}
    (tmp_path / "shoulder.json").write_text(json.dumps(m4 | changes))

    def make(started: bool) -> RigFile:
        arm = DXL_ARM.replace('model = "m4"\n', f'params = "{tmp_path / "shoulder.json"}"\n' if started else
                              'model = "m4"\n', 1).replace("{elbow}", 'model = "m4"')
        return start_daemon(robot_rig(tmp_path, f"arm-{started}", arm, lockstep=True)).rig

    compare_set_to_started(make, changes, {"shoulder": 0.9, "elbow": -0.6})


def test_set_param_of_gear_and_motor_damping_reaches_the_hinge_over_mqtt(tmp_path, start_daemon, mqtt_broker):
    """A <dcmotor> shoulder: armature·g² is the hinge's dof_armature and B1·g² its dof_damping; the values come
    over MQTT (`cmd/set_param` through a real broker), each executed (its result event) before the first tick."""
    values = {True: {"gear": 180.0, "armature": 4e-7, "damping_b1": 6e-6},
              False: {"gear": 150.0, "armature": 3e-7, "damping_b1": 2e-6}}

    def make(started: bool) -> RigFile:
        v = values[started]
        arm = DCMOTOR_ARM.replace("{gear}", repr(v["gear"])).replace("{armature}", repr(v["armature"]))
        arm = arm.replace("{b1}", repr(v["damping_b1"]))
        return start_daemon(robot_rig(tmp_path, f"dcmotor-{started}", arm, lockstep=True,
                                      mqtt_port=mqtt_broker.port)).rig

    def over_mqtt(rig: RigFile, args: dict) -> None:
        prefix = f"servo-hil/{rig.name}"
        with MqttClient(mqtt_broker.port, [f"{prefix}/#"]) as mq:
            mq.wait(lambda m: m.topic == f"{prefix}/online" and m.payload == b"online", 10.0, "online")
            mq.publish_json(f"{prefix}/cmd/set_param", args | {"id": args["name"]})
            done = mq.event(lambda e: e.get("id") == args["name"], 5.0, f"set_param {args['name']}'s result")
        assert done["ok"] is True, done

    compare_set_to_started(make, values[True], {"shoulder": 0.8 * 180.0, "elbow": -0.5 * 120.0}, send=over_mqtt)


def test_set_param_of_a_pendulum_load_is_refused_on_a_robot(tmp_path, start_daemon):
    rig = start_daemon(robot_rig(tmp_path, "arm", DXL_ARM.replace("{elbow}", 'model = "m4"'), lockstep=True)).rig
    for key in ("mass", "length", "gravity", "load_inertia"):
        refused(rig.cmd, "set_param", key, "robot", "arm_2r.xml", actuator="elbow", name=key, value=0.1)
    ok(rig.cmd, "set_param", actuator="elbow", name="armature", value=0.02)
    ok(rig.cmd, "set_param", actuator="elbow", name="stiction_time", value=0.5)
    for key in ("backlash", "stiction_rise"):   # the hinge is the output: the engine has neither
        refused(rig.cmd, "set_param", key, "hinge is the output", actuator="elbow", name=key, value=0.01)


def test_mqtt_commands_and_faults_on_a_robot(tmp_path, start_daemon, mqtt_broker):
    """Through a real broker: a goal moves the elbow; an open circuit injected on it lets gravity pull the arm's
    forearm down (MuJoCo's gravity: the servo's torque is gone); cleared, the elbow lifts it again."""
    rig = robot_rig(tmp_path, "mqtt-arm", DXL_ARM.replace("{elbow}", 'model = "m4"'), mqtt_port=mqtt_broker.port)
    start_daemon(rig)
    prefix = f"servo-hil/{rig.name}"
    with Stream(rig.pub) as stream, MqttClient(mqtt_broker.port, [f"{prefix}/#"]) as mq:
        mq.wait(lambda m: m.topic == f"{prefix}/online" and m.payload == b"online", 10.0, "online")
        stream.first()
        start = mq.mark()
        mq.publish_json(f"{prefix}/cmd/set_goal", {"actuator": "elbow", "value": 1.0, "id": "g"})
        assert mq.event(lambda e: e.get("id") == "g", 3.0, "set_goal's result", start)["ok"] is True
        lifted = stream.wait_for("elbow", lambda p: p["position"] > 0.6, 5.0, "the elbow lifting its forearm")
        assert lifted["goal"] == 1.0
        start = mq.mark()
        mq.publish_json(f"{prefix}/cmd/inject_fault",
                        {"actuator": "elbow", "fault": "open_circuit", "args": {"fraction": 1.0}})
        stream.wait_for("elbow", lambda p: p["fault_flags"] & FLAG["open_circuit"], 2.0, "open-circuit bit 1")
        raised = mq.event(lambda e: e.get("type") == "fault_raised", 3.0, "fault_raised", start)
        assert raised["actuator"] == "elbow" and raised["faults"] == ["open_circuit"]
        fallen = stream.wait_for("elbow", lambda p: p["position"] < 0.3, 5.0, "the unpowered forearm falling")
        assert fallen["torque"] == 0.0
        status = mq.wait(lambda m: m.topic == f"{prefix}/status"
                         and m.json()["actuators"]["elbow"]["faults"] == ["open_circuit"], 3.0, "status with it")
        assert status.json()["actuators"]["shoulder"]["faults"] == []
        start = mq.mark()
        mq.publish_json(f"{prefix}/cmd/clear_fault", {"actuator": "elbow", "fault": "open_circuit"})
        stream.wait_for("elbow", lambda p: p["fault_flags"] == 0 and p["position"] > 0.6, 5.0, "lifted again")
        mq.event(lambda e: e.get("type") == "fault_cleared", 3.0, "fault_cleared", start)
        start = mq.mark()
        mq.publish_json(f"{prefix}/cmd/set_param", {"actuator": "elbow", "name": "mass", "value": 1.0, "id": "m"})
        error = mq.event(lambda e: e.get("id") == "m", 3.0, "set_param mass refused", start)
        assert error["type"] == "command_error" and "mass" in error["error"] and "robot" in error["error"]


def test_a_robot_rig_records_its_stream(tmp_path, start_daemon):
    d = start_daemon(robot_rig(tmp_path, "rec-arm", DXL_ARM.replace("{elbow}", 'model = "m4"'),
                               extra='[record]\ndir = "rec"\nrate_hz = 100\n'))
    sub = Collector(d.rig.pub)
    sub.start()
    sub.until(100)
    ok(d.rig.cmd, "set_goal", actuator="elbow", value=1.0)
    time.sleep(1.5)
    skipped = pause_and_count_skipped(d.rig.cmd)
    assert d.terminate() == 0, d.stderr()
    recorded, _ = recorded_against_stream(tmp_path / "rec", sub.stop(), JOINTS, skipped_periods=skipped)
    elbow = [b["position"] for _, b in recorded["/sim/elbow/state"]]
    assert elbow[0] < 0.25 and elbow[-1] > 0.6, (elbow[0], elbow[-1])
    # the bodies' poses too, on /sim/poses as foxglove.FrameTransforms (protobuf, its descriptors as the schema,
    # as Foxglove writes them), which Foxglove's 3D panel draws from the file
    transforms = []
    for file in recording_files(tmp_path / "rec"):
        with open(file, "rb") as f:
            for schema, channel, message in make_reader(f).iter_messages(topics=["/sim/poses"]):
                assert (schema.name, schema.encoding, channel.message_encoding) == (
                    "foxglove.FrameTransforms", "protobuf", "protobuf")
                decode = decoder({"encoding": "protobuf", "schemaEncoding": "protobuf", "schemaName": schema.name,
                                  "schema": base64.b64encode(schema.data)})
                transforms.append((message.log_time, decode(message.data)))
    assert len(transforms) >= 20, len(transforms)
    for log_time, msg in transforms:
        assert [(t.parent_frame_id, t.child_frame_id) for t in msg.transforms] == [("world", "upper_arm"),
                                                                                    ("world", "forearm")]
        assert {t.timestamp.seconds * 10**9 + t.timestamp.nanos for t in msg.transforms} == {log_time}
    first, last = transforms[0][1].transforms[1], transforms[-1][1].transforms[1]
    angle = [2 * np.arctan2(t.rotation.x, t.rotation.w) for t in (first, last)]
    assert angle[1] - angle[0] > 0.3, angle   # the forearm lifted
    assert set(read_side_by_side(tmp_path / "rec")) == {"/sim/shoulder/state", "/sim/elbow/state"}   # JSON only


def test_an_unnamed_body_gets_a_frame_no_other_body_has():
    """Foxglove frame ids: a body's name, `body<i>` for an unnamed body i, made unique against a body so named."""
    import mujoco

    model = mujoco.MjModel.from_xml_string(
        '<mujoco><worldbody><body name="body2"><geom size="0.1"/><body><geom size="0.1"/></body></body>'
        '<body><geom size="0.1"/></body></worldbody></mujoco>')
    assert body_frames(model) == ["world", "body2", "body2_", "body3"]


def test_foxglove_draws_the_robots_bodies(tmp_path, start_daemon):
    """`/<rig>/poses` carries foxglove.FrameTransforms (protobuf): from `world` to each body, the translation and
    rotation of the poses published on ZeroMQ for the same tick (lock-step: the same simulation time)."""
    port = free_port()
    rig = start_daemon(robot_rig(tmp_path, "fox-arm", DXL_ARM.replace("{elbow}", 'model = "m4"'), lockstep=True,
                                 extra=f"[foxglove]\nport = {port}\n")).rig
    zctx = zmq.Context()
    sub = zctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, f"{rig.name}/poses".encode())
    sub.connect(rig.pub)
    topic = f"/{rig.name}/poses"

    def transforms(channels: dict, received: dict) -> list:
        return next((received.get(cid, []) for cid, ch in channels.items() if ch["topic"] == topic), [])

    async def session():
        task = asyncio.create_task(foxglove_session(port, lambda ch, rc: len(transforms(ch, rc)) >= 20, 30.0))
        await asyncio.sleep(1.5)         # connected and subscribed by now: what the steps send reaches it
        await asyncio.to_thread(ok, rig.cmd, "set_goal", actuator="elbow", value=1.2)
        for _ in range(40):
            await asyncio.to_thread(ok, rig.cmd, "step", n=10)
            await asyncio.sleep(0.03)    # the publisher sends each copy (the latest when it looks)
        return await task

    try:
        channels, received, _ = asyncio.run(session())
        zmq_poses = {}
        while sub.poll(500):
            _, payload, stamp = sub.recv_multipart()
            zmq_poses[stamp_ns(stamp)] = msgpack.unpackb(payload)
    finally:
        sub.close(0)
        zctx.term()
    (channel,) = [ch for ch in channels.values() if ch["topic"] == topic]
    assert channel["schemaName"] == "foxglove.FrameTransforms"
    assert channel["encoding"] == "protobuf" and channel["schemaEncoding"] == "protobuf"
    messages = transforms(channels, received)
    assert len(messages) >= 20, f"{len(messages)} FrameTransforms messages"
    matched = 0
    for log_time, msg in messages:
        frames = [(t.parent_frame_id, t.child_frame_id) for t in msg.transforms]
        assert frames == [("world", "upper_arm"), ("world", "forearm")], frames
        assert {t.timestamp.seconds * 10**9 + t.timestamp.nanos for t in msg.transforms} == {log_time}
        poses = zmq_poses.get(log_time)
        if poses is None:
            continue
        matched += 1
        assert poses["bodies"] == ["world", "upper_arm", "forearm"]
        xyz, wxyz = np.reshape(poses["position"], (-1, 3)), np.reshape(poses["quaternion"], (-1, 4))
        for i, t in enumerate(msg.transforms, start=1):
            assert [t.translation.x, t.translation.y, t.translation.z] == xyz[i].tolist()
            assert [t.rotation.w, t.rotation.x, t.rotation.y, t.rotation.z] == wxyz[i].tolist()
    assert matched >= 10, f"{matched} of {len(messages)} transforms matched a ZeroMQ poses message"
    first, last = messages[0][1].transforms[1], messages[-1][1].transforms[1]
    # the forearm swung: its rotation about x (the hinges' axis) follows the elbow's lift
    angle = [2 * np.arctan2(t.rotation.x, t.rotation.w) for t in (first, last)]
    assert angle[1] - angle[0] > 0.3, angle


def test_state_time_of_a_robot_with_two_physics_steps_a_tick(tmp_path, start_daemon):
    """A 0.5 ms MJCF timestep under a 1 kHz loop: two physics steps a tick; `t` in the `step` and `state` replies
    is the simulation time, tick · 1 ms, as on the stream."""
    (tmp_path / "half.xml").write_text(ARM_2R.read_text().replace('timestep="0.001"', 'timestep="0.0005"'))
    rig = robot_rig(tmp_path, "half", DXL_ARM.replace("{elbow}", 'model = "m4"'), lockstep=True)
    rig.path.write_text(rig.path.read_text().replace(str(ARM_2R), str(tmp_path / "half.xml")))
    start_daemon(rig)
    with Stream(rig.pub, f"{rig.name}/elbow") as stream:
        stream.wait_subscribed()
        reply = ok(rig.cmd, "step", n=100)
        last = [s.payload for s in stream.collect(1.0)][-1]
    assert reply["tick"] == 100
    assert reply["state"]["elbow"]["t"] == pytest.approx(0.1, abs=1e-12)
    assert ok(rig.cmd, "state", actuator="elbow")["state"]["elbow"]["t"] == pytest.approx(0.1, abs=1e-12)
    assert last["t"] == pytest.approx(0.1, abs=1e-12)
