"""LeRobot's own arm classes against the emulated arms: the machinery tests/lerobot shares, and `servo-hil bench
lerobot`.

An arm is a daemon of config/rigs/<arm>.toml (a copy on free ports, MQTT off, an EEPROM state file so that a
calibration survives a restart); LeRobot runs in its own venv (`make lerobot`) as bench/peers/lerobot_arm.py, whose
`input()` prompts are answered here after the daemon's `hand` command moved the arm as a person would. The
benchmark calibrates a follower and its leader that way, teleoperates the follower from the leader while the hand
moves the leader, and reports the follower's tracking error, the loops' lateness and the Sync Read round trip
LeRobot sees against its wire time, as JSON (docs/lerobot.md).
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "config"
PEER = Path(__file__).with_name("peers") / "lerobot_arm.py"
VENV_HINT = "needs LeRobot's venv: make lerobot"
JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")   # LeRobot's names
# Joints LeRobot's calibrate flow takes as full turns (0 … 4095) instead of recording their range: koch_follower.py
# and koch_leader.py `full_turn_motors`, so_follower.py and so_leader.py `full_turn_motor` (lerobot 0.4.4).
FULL_TURN = {"koch": ("shoulder_pan", "wrist_roll"), "so101": ("wrist_roll",)}
# The joints whose Drive_Mode LeRobot's leader calibrate sets to inverted (koch_leader.py `calibrate`: the real
# leader's elbow servo is mounted reversed, as config/robots/koch_leader.xml models it).
INVERTED = {"koch": ("elbow_flex",), "so101": ()}
BANNER = re.compile(r"servo-hil: (dynamixel|feetech) bus '([^']+)' at (\S+) \(IDs ([0-9, ]+?), (\d+) bit/s")
# Rigs that hold a follower and its leader in one daemon: two buses on one model of both arms, whose joints carry the
# role as a prefix (config/rigs/<family>_pair.toml).
PAIR_PREFIX = {"follower": "follower_", "leader": "leader_"}
# A firm grip: stiff enough that gravity on an arm's shoulder (≲ 0.5 N·m) bends it by ≲ 0.03 rad, within the
# 2 N·m a hand gives before it slips (docs/commands.md, `hand`).
HAND = {"stiffness": 20.0, "damping": 0.2, "max_torque": 2.0}
# LeRobot keeps the leader's gripper torque on in current-based position mode as a trigger (koch_leader.py
# configure): a finger presses it gently, below the 80 % of stall current held 1 s that trips the XL330's Overload
# Error (config/dynamixel/xl330_m077.toml; stall torque 0.228 N·m at 5 V, e-manual XL330-M077 §Specifications).
TRIGGER_FINGER = {"stiffness": 1.0, "damping": 0.01, "max_torque": 0.15}
RANGE_MARGIN_RAD = 0.12      # the hand stops this short of each joint's MJCF limit, as a person stops at a stop


def lerobot_python() -> Path | None:
    """The LeRobot venv's Python ($SERVO_HIL_LEROBOT_VENV, else .venv-lerobot) if LeRobot is installed there."""
    venv = Path(os.environ.get("SERVO_HIL_LEROBOT_VENV", ROOT / ".venv-lerobot"))
    python = venv / "bin" / "python"
    if python.exists() and any(venv.glob("lib/python3*/site-packages/lerobot/__init__.py")):
        return python
    return None


def _hinges(mjcf: Path, prefix: str = "") -> dict[str, tuple[float, float, tuple[float, ...]]]:
    """Each LeRobot joint's (lower, upper) limit [rad] and hinge axis in its body's frame, in the MJCF `mjcf`
    (its joints named `prefix` + LeRobot's name)."""
    import mujoco

    m = mujoco.MjModel.from_xml_path(str(mjcf))
    out = {}
    for j in JOINTS:
        jid = m.joint(prefix + j).id
        out[j] = (float(m.jnt_range[jid][0]), float(m.jnt_range[jid][1]), tuple(float(a) for a in m.jnt_axis[jid]))
    return out


def joint_ranges(model: str | Path, prefix: str = "") -> dict[str, tuple[float, float]]:
    """Each joint's (lower, upper) limit [rad] in config/robots/<model>.xml (or the MJCF file `model`)."""
    mjcf = Path(model) if str(model).endswith(".xml") else CONFIG / "robots" / f"{model}.xml"
    return {j: (lo, hi) for j, (lo, hi, _) in _hinges(mjcf, prefix).items()}


def axis_signs(leader: Arm, follower: Arm) -> dict[str, float]:
    """Per joint, +1 where the leader's servo turns its hinge the way the follower's turns its own and −1 where it
    is mounted reversed (the two hinge axes of the arms' models point opposite ways), so that the leader's angle
    times the sign is the follower's angle for the same pose."""
    lead, fol = _hinges(leader.mjcf, leader.prefix), _hinges(follower.mjcf, follower.prefix)
    return {j: 1.0 if sum(a * b for a, b in zip(lead[j][2], fol[j][2], strict=True)) > 0 else -1.0 for j in JOINTS}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bus_names(rig_text: str) -> list[str]:
    """The names of a rig file's [[buses]], in order."""
    return re.findall(r'(?m)^\[\[buses\]\]\nname = "([^"]+)"', rig_text)


def bus_ports(name: str, directory: Path, buses: list[str]) -> dict[str, str]:
    """Where each bus of the rig copy `name` makes its pty: tty-<name> for a rig of one bus, else tty-<name>-<bus>."""
    if len(buses) == 1:
        return {buses[0]: str(directory / f"tty-{name}")}
    return {b: str(directory / f"tty-{name}-{b}") for b in buses}


def write_rig(name: str, directory: Path) -> tuple[Path, str, str]:
    """config/rigs/<name>.toml copied into `directory`: free ZeroMQ ports, MQTT off, no mlockall, each bus's EEPROM
    state file beside it (<name>-eeprom.toml; <name>-<bus>-eeprom.toml for a rig of several buses), the MJCF by
    absolute path; (the copy, its first bus's pty path, its command endpoint). Real time and real wire timing:
    LeRobot runs on the wall clock."""
    text = (CONFIG / "rigs" / f"{name}.toml").read_text()
    text = text.replace('mjcf = "../robots/', f'mjcf = "{CONFIG}/robots/')
    text = re.sub(r"\n\[(zmq|mqtt)\]\n(?:[^\[\n][^\n]*\n)*", "\n", text)
    cmd = f"tcp://127.0.0.1:{free_port()}"
    # no subscriber reads the state stream here: a tenth of the ticks keeps the daemon's publisher light
    text = text.replace("rate_hz = 1000", f'rate_hz = 1000\nmlockall = false\n[zmq]\npub = "tcp://127.0.0.1:'
                                          f'{free_port()}"\npublish_every = 10\ncommand = "{cmd}"\n'
                                          f'[mqtt]\nenabled = false\n', 1)
    buses = bus_names(text)
    files = iter([f"{name}-eeprom.toml"] if len(buses) == 1 else [f"{name}-{b}-eeprom.toml" for b in buses])
    # the rig's own files, moved beside the copy (each [[buses]] entry names one: they come in the buses' order)
    text = re.sub(r'(?m)^eeprom = "[^"]*"', lambda _: f'eeprom = "{directory / next(files)}"', text)
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path, bus_ports(name, directory, buses)[buses[0]], cmd


@dataclass
class Arm:
    """A running daemon of an arm rig."""

    name: str
    path: Path
    port: str
    cmd: str
    proc: subprocess.Popen
    out_path: Path
    err_path: Path
    protocol: str = ""
    mjcf: Path | None = None     # the model its joints live in (the rig's [robot] mjcf)
    prefix: str = ""             # its joints' names there: prefix + LeRobot's name

    def ranges(self) -> dict[str, tuple[float, float]]:
        """Each joint's (lower, upper) limit [rad] in the arm's model."""
        return joint_ranges(self.mjcf, self.prefix)

    def rest_pose(self) -> dict[str, float]:
        """Each joint's angle [rad] in the model's "rest" keyframe (the pose the rig powers up in)."""
        import mujoco

        m = mujoco.MjModel.from_xml_path(str(self.mjcf))
        key = m.key(self.prefix + "rest")
        return {j: float(key.qpos[m.joint(self.prefix + j).qposadr[0]]) for j in JOINTS}

    def axis_directions(self) -> dict[str, float]:
        """Per joint, +1 where its hinge axis points along +x, +y or +z of its body's frame (the sum of its
        components is positive), −1 where it points the other way (a servo mounted reversed)."""
        return {j: 1.0 if sum(axis) > 0 else -1.0 for j, (_, _, axis) in _hinges(self.mjcf, self.prefix).items()}

    def command(self, cmd: str, timeout_s: float = 10.0, **args) -> dict:
        from servo_hil.daemon.zmq_io import request

        return request(self.cmd, {"cmd": cmd, **args}, timeout_s)

    def ok(self, cmd: str, **args) -> dict:
        reply = self.command(cmd, **args)
        if reply.get("ok") is not True:
            raise RuntimeError(f"{self.name}: {cmd} {args} refused: {reply}")
        return reply

    def state(self) -> dict[str, dict]:
        return self.ok("state")["state"]

    def arm_state(self) -> dict[str, dict]:
        """This arm's joints' states by LeRobot's names (a pair rig's daemon also holds the other arm)."""
        n = len(self.prefix)
        return {j[n:]: s for j, s in self.state().items() if j.startswith(self.prefix)}

    def positions(self) -> dict[str, float]:
        return {j: s["position"] for j, s in self.arm_state().items()}

    def hand(self, joint: str, grip: dict | None = None, **args) -> None:
        self.ok("hand", actuator=self.prefix + joint, **(grip or HAND), **args)

    def release_all(self) -> None:
        for j in JOINTS:
            self.ok("hand", actuator=self.prefix + j, release=True)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM; the exit status, or None (then killed) if it is still running after `timeout` s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5.0)
            return None


def start_arm(name: str, directory: Path, timeout: float = 30.0, servo_hil: list[str] | None = None) -> Arm:
    """`servo-hil run` of config/rigs/<name>.toml's copy in `directory` (an existing copy and its EEPROM file are
    kept, as a restart keeps them), returned once its bus banner is out."""
    return start_daemon(name, directory, timeout, servo_hil)[0]


def start_pair(family: str, directory: Path, timeout: float = 30.0) -> dict[str, Arm]:
    """One daemon of config/rigs/<family>_pair.toml (the follower's and the leader's bus, one model of both arms):
    an Arm per role, both on that daemon, each on its own bus and the joints of its prefix (PAIR_PREFIX)."""
    arms = {a.prefix: a for a in start_daemon(f"{family}_pair", directory, timeout)}
    if set(arms) != set(PAIR_PREFIX.values()):
        next(iter(arms.values())).stop()
        raise RuntimeError(f"{family}_pair: a pair rig has the buses {', '.join(PAIR_PREFIX)}")
    return {role: arms[prefix] for role, prefix in PAIR_PREFIX.items()}


def start_daemon(name: str, directory: Path, timeout: float = 30.0, servo_hil: list[str] | None = None) -> list[Arm]:
    """`servo-hil run` of config/rigs/<name>.toml's copy in `directory` (an existing copy and its EEPROM files are
    kept), returned once every bus's banner is out: an Arm per bus, in the rig's order. A bus named after a role
    of PAIR_PREFIX drives the joints of that prefix; another drives the rig's joints by their own names."""
    path = directory / f"{name}.toml"
    if path.exists():
        cmd = re.search(r'command = "([^"]+)"', path.read_text()).group(1)
    else:
        path, _, cmd = write_rig(name, directory)
    text = path.read_text()
    buses = bus_names(text)
    ports = bus_ports(name, directory, buses)
    mjcf = Path(re.search(r'(?m)^mjcf = "([^"]+)"', text).group(1))
    exe = Path(sys.executable).parent / "servo-hil"
    argv = [*(servo_hil or ([str(exe)] if exe.exists() else [sys.executable, "-m", "servo_hil.cli.main"])),
            "run", str(path)]
    for bus, port in ports.items():
        argv += ["--port", port if len(ports) == 1 else f"{bus}={port}"]
    n = len(list(directory.glob(f"{name}.*.stdout"))) + 1
    out_path, err_path = directory / f"{name}.{n}.stdout", directory / f"{name}.{n}.stderr"
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=directory,
                                env=os.environ | {"PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"})
    prefixes = {b: PAIR_PREFIX.get(b, "") if len(buses) > 1 else "" for b in buses}
    arms = [Arm(name if len(buses) == 1 else f"{name}.{b}", path, ports[b], cmd, proc, out_path, err_path,
                mjcf=mjcf, prefix=prefixes[b]) for b in buses]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = {m.group(2): m.group(1) for m in BANNER.finditer(out_path.read_text(errors="replace"))}
        if all(b in seen for b in buses):
            for arm, b in zip(arms, buses, strict=True):
                arm.protocol = seen[b]
            return arms
        if proc.poll() is not None:
            raise RuntimeError(f"{name}: the daemon exited with {proc.returncode}:\n{err_path.read_text()[-3000:]}")
        time.sleep(0.05)
    arms[0].stop()
    raise RuntimeError(f"{name}: no bus banner within {timeout} s:\n{err_path.read_text()[-3000:]}")


# LeRobot's calibration loop reads the bus with no pause, taking CPU from the daemons' Python threads on a 2-core
# host; SERVO_HIL_LEROBOT_NICE=10 runs LeRobot below them (the default 0 runs it as a user does).
PEER_NICE = int(os.environ.get("SERVO_HIL_LEROBOT_NICE", "0"))


class LeRobotPeer:
    """bench/peers/lerobot_arm.py in the LeRobot venv: its stdout read as it comes (prompts have no newline), its
    stdin the ENTER key, its `@@ ` JSON reports collected."""

    def __init__(self, python: Path, args: list[str], log_dir: Path, stdin: bool = True):
        self.err_path = log_dir / f"lerobot-{args[0]}-{int(time.monotonic() * 1000)}.stderr"
        with self.err_path.open("w") as err:
            self.proc = subprocess.Popen([str(python), str(PEER), *args], stdin=subprocess.PIPE if stdin else
                                         subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                         env=os.environ | {"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"},
                                         preexec_fn=lambda: os.nice(PEER_NICE))
        # LeRobot's range recording prints a table per Sync Read (hundreds a second): keep a short window for the
        # prompts and the complete `@@ ` lines, never the whole stream (copying it would take a core from the daemons)
        self.window = ""
        self.partial = ""
        self.report_lines: list[str] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        fd = self.proc.stdout.fileno()
        while chunk := os.read(fd, 65536):
            text = chunk.decode(errors="replace")
            lines = (self.partial + text).split("\n")
            rest = lines.pop()
            self.partial = rest if rest.startswith("@@ ") else rest[-65536:]   # a report may be long (teleop rows)
            with self.lock:
                self.report_lines += [ln[3:] for ln in lines if ln.startswith("@@ ")]
                self.window = (self.window + text)[-16384:]

    def expect(self, needle: str, timeout: float = 60.0) -> None:
        """Wait until `needle` appears in stdout past the last one expected."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                i = self.window.find(needle)
                if i >= 0:
                    self.window = self.window[i + len(needle):]
                    return
            if self.proc.poll() is not None and not self.reader.is_alive():
                raise RuntimeError(f"LeRobot exited {self.proc.returncode} before {needle!r}:\n{self.stderr()}")
            time.sleep(0.02)
        raise TimeoutError(f"LeRobot did not print {needle!r} within {timeout} s:\n{self.stderr()}")

    def enter(self) -> None:
        self.proc.stdin.write(b"\n")
        self.proc.stdin.flush()

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")[-4000:]

    def finish(self, timeout: float = 60.0) -> dict[str, dict]:
        """Wait for exit 0; its reports by kind."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise TimeoutError(f"LeRobot still running after {timeout} s:\n{self.stderr()}") from None
        self.reader.join(5.0)
        if rc != 0:
            raise RuntimeError(f"LeRobot exited {rc}:\n{self.stderr()}")
        return self.reports()

    def reports(self) -> dict[str, dict]:
        with self.lock:
            lines = list(self.report_lines)
        return {r["kind"]: r for r in map(json.loads, lines)}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_near(arm: Arm, targets: dict[str, float], tol: float, timeout: float) -> dict[str, float]:
    """Poll the arm until every joint in `targets` is within `tol` [rad]; the positions (even on timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        pos = arm.positions()
        if all(abs(pos[j] - t) <= tol for j, t in targets.items()) or time.monotonic() > deadline:
            return pos
        time.sleep(0.05)


def to_middle(arm: Arm, mids: dict[str, float], speed: float, timeout: float = 10.0) -> dict[str, float]:
    """The whole arm to `mids` [rad] from wherever it lies, as a person lifts an arm off the table: the upper arm
    first leaned back three quarters of the way to its rest pose's angle (the model's "rest" keyframe: folded back
    against its stop), then every other joint to its middle, then the upper arm. All at once, a forearm folded
    onto the table wedges its gripper into it and stays there. The positions reached (even after `timeout` s)."""
    lean = arm.rest_pose()["shoulder_lift"]
    back = lean + 0.25 * (mids["shoulder_lift"] - lean)
    arm.hand("shoulder_lift", target=back, speed=speed)
    wait_near(arm, {"shoulder_lift": back}, 0.05, timeout / 3)
    others = {j: t for j, t in mids.items() if j != "shoulder_lift"}
    for j, t in others.items():
        arm.hand(j, target=t, speed=speed)
    wait_near(arm, others, 0.05, timeout / 3)
    arm.hand("shoulder_lift", target=mids["shoulder_lift"], speed=speed)
    return wait_near(arm, mids, 0.05, timeout / 3)


def calibrate_by_hand(peer: LeRobotPeer, arm: Arm, family: str, speed: float = 3.0) -> dict:
    """Play a person through LeRobot's calibrate prompts on `arm`: the whole arm to the middle of its ranges, ENTER,
    then every joint LeRobot records through its range and back to the middle, ENTER. What the hand did [rad]."""
    ranges = arm.ranges()
    mids = {j: (lo + hi) / 2 for j, (lo, hi) in ranges.items()}
    peer.expect("middle of its range of motion")
    at_middle = to_middle(arm, mids, speed)
    off = {j: round(p - mids[j], 3) for j, p in at_middle.items() if abs(p - mids[j]) > 0.05}
    if off:
        # a person would not press ENTER here: LeRobot would take this pose as the middle (its homing offsets)
        raise RuntimeError(f"{arm.name}: the hand did not bring the arm to the middle of its ranges: {off} rad off")
    peer.enter()
    peer.expect("Press ENTER to stop")
    swept = [j for j in JOINTS if j not in FULL_TURN[family]]
    axes = arm.axis_directions()
    extremes = {}
    longest = 0.0
    for j in swept:
        lo, hi = ranges[j][0] + RANGE_MARGIN_RAD, ranges[j][1] - RANGE_MARGIN_RAD
        extremes[j] = (lo, hi)
        # the same way on every arm, whichever way its servo is mounted: first to the end where the joint turns
        # about the model's −x/−y/−z (a reversed servo's hinge axis is negated, config/robots/koch_leader.xml)
        arm.hand(j, path=[lo, hi, mids[j]] if axes[j] > 0 else [hi, lo, mids[j]], speed=speed)
        longest = max(longest, ((mids[j] - lo) + (hi - lo) + (hi - mids[j])) / speed)
    seen = {j: [at_middle[j], at_middle[j]] for j in swept}
    t_end = time.monotonic() + longest + 0.5
    while time.monotonic() < t_end:
        for j, p in arm.positions().items():
            if j in seen:
                seen[j] = [min(seen[j][0], p), max(seen[j][1], p)]
        time.sleep(0.05)
    wait_near(arm, {j: mids[j] for j in swept}, 0.05, 5.0)
    peer.enter()
    return {"middle": mids, "at_middle": at_middle, "hand_extremes": extremes, "reached": seen}


def teleop_motion(arm: Arm, family: str, seconds: float, amplitude: float = 0.5, swings: int = 6,
                  signs: dict[str, float] | None = None) -> None:
    """The hand moves every leader joint `swings` times back and forth about the middle of its range (`amplitude`
    [rad], within the joint's range) over about `seconds`, then holds it at the middle. Joint k starts towards
    +θ of the follower's angle for even k, −θ for odd (`signs`: axis_signs, where a leader's servo is reversed)."""
    ranges = arm.ranges()
    signs = signs or dict.fromkeys(JOINTS, 1.0)
    for k, j in enumerate(JOINTS):
        lo, hi = ranges[j]
        mid = (lo + hi) / 2
        a = min(amplitude, (hi - lo) / 2 - RANGE_MARGIN_RAD)
        sign = (1 if k % 2 == 0 else -1) * signs[j]
        path = [mid + sign * a * (1 if i % 2 == 0 else -1) for i in range(swings)] + [mid]
        distance = a + 2 * a * (swings - 1) + a
        if j == "gripper" and family == "koch":
            # the trigger: squeezed and let go twice, gently
            arm.hand(j, grip=TRIGGER_FINGER, path=[mid - a, mid, mid - a, mid], speed=4 * a / seconds)
        else:
            arm.hand(j, path=path, speed=distance / seconds)


@dataclass
class Sampler:
    """Both arms' joint angles polled from their daemons while LeRobot teleoperates: (time.monotonic() [s], leader
    θ, follower θ) rows, and the follower's motor currents [A] at the same times."""

    leader: Arm
    follower: Arm
    period: float = 0.05
    rows: list = field(default_factory=list)
    currents: list = field(default_factory=list)
    stop_flag: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop_flag.is_set():
            lp, fs = self.leader.positions(), self.follower.arm_state()
            self.rows.append((time.monotonic(), lp, {j: s["position"] for j, s in fs.items()}))
            self.currents.append({j: s["current"] for j, s in fs.items()})
            time.sleep(self.period)

    def __enter__(self):
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_flag.set()
        self.thread.join(5.0)


def tracking_error(rows: list, signs: dict[str, float], start: float, end: float) -> dict[str, dict]:
    """Per joint: the follower's angle against the leader's (times its axis sign, `axis_signs`: the same pose in
    the follower's angle), over the samples from `start` to `end` (time.monotonic() [s]): median and p95 of
    |error| [deg], and how far each moved [deg]."""
    import math

    rows = [(t - start, lp, f) for t, lp, f in rows if start <= t <= end]
    out = {}
    for j in JOINTS:
        errs = sorted(abs(f[j] - signs[j] * lp[j]) for _, lp, f in rows)
        if not errs:
            continue
        lead = [lp[j] for _, lp, _ in rows]
        fol = [f[j] for _, _, f in rows]
        out[j] = {"median_deg": math.degrees(statistics.median(errs)),
                  "p95_deg": math.degrees(errs[int(0.95 * (len(errs) - 1))]),
                  "leader_swing_deg": math.degrees(max(lead) - min(lead)),
                  "follower_swing_deg": math.degrees(max(fol) - min(fol))}
    return out


def feetech_sync_read_wire_us(n: int, data_bytes: int, baud: int) -> float:
    """Wire time of an STS Sync Read (0x82) of `data_bytes` from `n` servos with Return Delay 0 [µs]: request
    FF FF FE LEN 82 ADDR DLEN ID… CHK = 8 + n bytes, each reply FF FF ID LEN ERR DATA… CHK = 6 + data_bytes
    (Feetech STS memory-table manual, instruction packets; 10 bit times per byte on an 8N1 line)."""
    from drivers.wire.ports import wire_time_s

    return (wire_time_s(8 + n, baud) + n * wire_time_s(6 + data_bytes, baud)) * 1e6


def sync_read_wire_us(protocol: str, baud: int = 1_000_000) -> float:
    """The Sync Read of six servos' Present Position that LeRobot's get_observation sends, on the wire [µs], with
    Return Delay Time 0 as LeRobot's configure sets it."""
    if protocol == "dynamixel":
        from bench.dynamixel import sync_read_bound

        return sync_read_bound(baud, 0.0, {i: 2048 for i in range(1, 7)})["bound_us"]
    return feetech_sync_read_wire_us(6, 2, baud)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def _lateness(t0: dict, t1: dict) -> dict:
    """The daemon loop's lateness over a window, from two `timing` replies (1 µs histogram buckets)."""
    import numpy as np

    from servo_hil.daemon.telemetry import percentile_us

    hist = np.zeros(max(map(int, t1["histogram_us"]), default=0) + 1, dtype=np.int64)
    for b, c in t1["histogram_us"].items():
        hist[int(b)] = c - t0["histogram_us"].get(b, 0)
    wakeups = t1["wakeups"] - t0["wakeups"]
    return {"lateness_p50_us": percentile_us(hist, 0.5), "lateness_p99_us": percentile_us(hist, 0.99),
            "overruns": t1["overruns"] - t0["overruns"], "wakeups": wakeups, "rt_mode": t1.get("rt_mode")}


SETTLE_S = 1.0    # the follower's first second of teleoperation: it moves from its own pose to the leader's
LOST_REPLY = "There is no status packet"     # dynamixel-sdk's / scservo_sdk's COMM_RX_TIMEOUT text
MISSED_PING = "motor check failed"           # LeRobot's connect when a servo's model-number reply did not come
STALE_REPLY = "Incorrect status packet"      # the late reply, read in the next exchange's window


def lost_reply(stderr: str) -> bool:
    """Whether LeRobot ended on a reply that came later than its SDK's packet timeout."""
    return any(text in stderr for text in (LOST_REPLY, MISSED_PING, STALE_REPLY))


def again_after_lost_reply(start: Callable[[], LeRobotPeer], run: Callable[[LeRobotPeer], T], what: str,
                           attempts: int = 3) -> T:
    """`run(start())`, started again (up to `attempts` runs, each said) when a reply later than the SDK's packet
    timeout ended it: LeRobot reads with no retry, so a daemon starved of CPU that long ends its run as a real bus
    would, and a person runs it again. Any other failure, or the last run's, is raised; each peer is killed."""
    for attempt in range(attempts):
        peer = start()
        try:
            return run(peer)
        except RuntimeError:
            if not lost_reply(peer.stderr()) or attempt == attempts - 1:
                raise
            print(f"\n{what}: ended by a lost reply, started again")
        finally:
            peer.kill()
    raise AssertionError("unreachable")


def calibrate_arm(python: Path, family: str, role: str, arm: Arm, cal_dir: Path, log_dir: Path,
                  attempts: int = 6, budget_s: float = 50.0) -> dict:
    """LeRobot's calibrate flow on one arm (`role` follower or leader), played by the hand: the session's reports,
    what the hand did, and how many sessions a lost reply ended (LeRobot reads with no retry, so one reply later
    than the SDK's packet timeout, from a daemon starved of CPU, aborts its calibration as it would on a real bus;
    the flow then starts again, as a person would, while `budget_s` leaves time for one)."""
    deadline = time.monotonic() + budget_s
    for attempt in range(attempts):
        peer = LeRobotPeer(python, ["session", f"{family}_{role}", arm.port, str(cal_dir)], log_dir)
        try:
            hand = calibrate_by_hand(peer, arm, family)
            reports = peer.finish(60.0)
            return {"hand": hand, "reports": reports, "aborted_by_lost_reply": attempt}
        except (RuntimeError, TimeoutError, BrokenPipeError) as e:
            peer.kill()
            if not lost_reply(peer.stderr()) or attempt == attempts - 1 or time.monotonic() > deadline - 12.0:
                raise RuntimeError(f"{family}_{role}: {e}\n{peer.stderr()}") from None
        finally:
            peer.kill()
            arm.release_all()
    raise AssertionError("unreachable")


def calibrate_pair(python: Path, family: str, leader: Arm, follower: Arm, cal_dir: Path, log_dir: Path) -> dict:
    """`calibrate_arm` on the follower, then on the leader."""
    return {role: calibrate_arm(python, family, role, arm, cal_dir, log_dir)
            for role, arm in (("follower", follower), ("leader", leader))}


def teleoperate(python: Path, family: str, leader: Arm, follower: Arm, cal_dir: Path, log_dir: Path,
                seconds: float, hz: float) -> dict:
    """The hand moves the leader while LeRobot teleoperates the follower from it; LeRobot's rows, the daemons'
    samples, the tracking error and each loop's lateness over the run."""
    mids = {j: sum(r) / 2 for j, r in leader.ranges().items()}
    signs = axis_signs(leader, follower)
    to_middle(leader, mids, 1.5)
    # a person sets the follower up beside the leader and lets go once LeRobot holds it (torque on at connect):
    # started from where a torque-off Koch lies, folded on the table, its first goal wedges the gripper into it
    to_middle(follower, {j: sum(r) / 2 for j, r in follower.ranges().items()}, 1.5)
    t_lead, t_fol = leader.ok("timing")["timing"], follower.ok("timing")["timing"]
    from servo_hil.daemon.telemetry import StealMeter

    steal = StealMeter()
    peer = LeRobotPeer(python, ["teleop", family, leader.port, follower.port, str(cal_dir), str(seconds), str(hz)],
                       log_dir, stdin=False)
    try:
        peer.expect('"kind": "connected"', 60.0)
        follower.release_all()
        t_connected = time.monotonic()
        with Sampler(leader, follower) as sampler:
            teleop_motion(leader, family, seconds, signs=signs)
            reports = peer.finish(seconds + 60.0)
    finally:
        peer.kill()
    faults = {arm.name: {j: st["faults"] for j, st in arm.arm_state().items() if st["faults"]}
              for arm in (leader, follower)}
    lateness = {"leader": _lateness(t_lead, leader.ok("timing")["timing"]),
                "follower": _lateness(t_fol, follower.ok("timing")["timing"])}
    leader.release_all()
    tracking = tracking_error(sampler.rows, signs, t_connected + SETTLE_S, t_connected + seconds - 0.2)
    currents = {j: sorted(abs(c[j]) for c in sampler.currents) for j in JOINTS}
    follower_current = {j: {"median_a": statistics.median(c), "p99_a": _pct(c, 0.99), "max_a": c[-1]}
                        for j, c in currents.items() if c}
    return {"reports": reports, "samples": sampler.rows, "tracking": tracking, "follower_current": follower_current,
            "lateness": lateness, "faults": faults, "steal_fraction": steal.fraction()}


def run(family: str = "koch", seconds: float = 10.0, hz: float = 100.0, keep: Path | None = None,
        pair: bool = False) -> dict:
    """`servo-hil bench lerobot`: one family's follower and leader daemons (`pair`: one daemon of both,
    config/rigs/<family>_pair.toml), calibrated by hand through LeRobot, then teleoperated for `seconds` at `hz`;
    JSON-ready figures (docs/lerobot.md, "Benchmark")."""
    import tempfile

    python = lerobot_python()
    if python is None:
        return {"skipped": VENV_HINT}
    with tempfile.TemporaryDirectory(prefix="servo-hil-lerobot-") as tmp:
        work = keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        cal_dir = work / "calibration"
        arms = []
        try:
            if pair:
                arms += start_pair(family, work).values()
                follower, leader = arms
            else:
                follower = start_arm(family, work)
                arms.append(follower)
                leader = start_arm(f"{family}_leader", work)
                arms.append(leader)
            cal = calibrate_pair(python, family, leader, follower, cal_dir, work)
            tel = teleoperate(python, family, leader, follower, cal_dir, work, seconds, hz)
        except (RuntimeError, TimeoutError) as e:
            # LeRobot's own error (its last line) in the JSON, e.g. a calibration a lost reply ended five times
            lines = [ln for ln in str(e).splitlines() if ln.strip()]
            return {"config": {"family": family, "seconds": seconds, "hz": hz, "one_daemon": pair},
                    "error": lines[-1] if lines else ""}
        finally:
            for arm in arms:
                arm.stop()
    rows = tel["reports"]["teleop"]["rows"]
    observe = [r["observe"] * 1e6 for r in rows]
    leader_read = [r["leader_read"] * 1e6 for r in rows]
    late = [r["late"] * 1e3 for r in rows]
    wire = sync_read_wire_us(follower.protocol)
    return {
        "config": {"family": family, "seconds": seconds, "hz": hz, "one_daemon": pair, "servos_per_arm": 6,
                   "baud": 1_000_000,
                   "protocol": follower.protocol},
        "tracking_error": tel["tracking"],
        "calibration_sessions_ended_by_a_lost_reply": {r: c["aborted_by_lost_reply"] for r, c in cal.items()},
        "lerobot_loop": {"steps": len(rows), "expected_steps": round(seconds * hz),
                         "lost_replies": len(tel["reports"]["teleop"]["lost"]),
                         "disconnect_errors": tel["reports"]["teleop"]["disconnect_errors"],
                         "step_late_median_ms": statistics.median(late), "step_late_p99_ms": _pct(late, 0.99)},
        "sync_read_us": {"follower_get_observation_median": statistics.median(observe),
                         "follower_get_observation_p99": _pct(observe, 0.99),
                         "leader_get_action_median": statistics.median(leader_read),
                         "leader_get_action_p99": _pct(leader_read, 0.99),
                         "wire_time": wire,
                         "what": "time LeRobot's get_observation / get_action took (one Sync Read of Present_Position "
                                 "of 6 servos, plus normalization) against that Sync Read's bytes on the wire"},
        "daemon_loops": tel["lateness"],
        "servo_faults": tel["faults"],
        "follower_current": tel["follower_current"],
        "steal_fraction": tel["steal_fraction"],
    }
