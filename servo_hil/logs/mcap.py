"""Side-by-side MCAP recorder: real and simulated joint state, plus the bus commands.

JSON channels per joint (`/real/…/state`, `/sim/…/state`, `/bus/…/commands`, `/bus/…/events`), files rotated
into self-contained segments and the open chunk flushed every `flush_s`, so a kill loses at most that much.
Channels, segments and crash safety: docs/recording.md.
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import re
import statistics
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import IO, Any, Literal

from mcap.reader import make_reader
from mcap.records import Channel, Message
from mcap.writer import LIBRARY_IDENTIFIER, CompressionType, Writer

from servo_hil.logs.recover import check_magic, is_complete, recover_file, torn_records

Side = Literal["real", "sim"]
log = logging.getLogger(__name__)

_NULLABLE_NUMBER = ["number", "null"]
STATE_FIELDS: dict[str, Any] = {
    "title": "servo-hil joint state",
    "type": "object",
    "properties": {
        "t": {"type": "number", "description": "time since the log's time base [s]"},
        "position": {"type": "number", "description": "output-shaft angle [rad]"},
        "velocity": {"type": _NULLABLE_NUMBER, "description": "output-shaft speed [rad/s], null if unknown"},
        "current": {"type": _NULLABLE_NUMBER, "description": "motor current [A], null if unknown"},
        "torque": {"type": _NULLABLE_NUMBER, "description": "output torque [N·m], null if unknown"},
        "goal": {"type": _NULLABLE_NUMBER, "description": "goal position [rad], null if unknown"},
        "temperature": {"type": _NULLABLE_NUMBER, "description": "winding/case temperature [°C], null if unknown"},
        "voltage": {"type": _NULLABLE_NUMBER, "description": "supply voltage [V], null if unknown"},
        "enable": {"type": ["boolean", "null"], "description": "torque enabled, null if unknown"},
        "mode": {"type": ["integer", "null"], "description": "operating mode: Dynamixel Operating Mode (11), "
                                                             "CiA 402 modes of operation display (0x6061); absent "
                                                             "or null if unknown"},
    },
    "required": ["t", "position"],   # a mirror sees only the items the controller reads
    "additionalProperties": False,
}
"""The jsonschema of a `/<side>/<joint>/state` message (units in each field's description)."""

COMMAND_SCHEMA: dict[str, Any] = {
    "title": "servo-hil bus command",
    "type": "object",
    "properties": {"t": {"type": "number", "description": "time since the log's time base [s]"}},
    "required": ["t"],
    "additionalProperties": True,  # free-form: instruction, address, data (hex), goal …
}

_STATE_NUMBERS = ("position",)
_STATE_OPTIONAL_NUMBERS = ("velocity", "current", "torque", "goal", "temperature", "voltage")
_STATE_KEYS = frozenset(_STATE_NUMBERS + _STATE_OPTIONAL_NUMBERS + ("enable", "mode"))
_JOINT = re.compile(r"[A-Za-z0-9_.-]+")  # one topic path segment
_RESERVED_METADATA = ("time_base_ns", "file_index")
_METADATA_NAME = "servo-hil"
_FILE_NAME = re.compile(r"-(\d{8}T\d{6}Z)-(\d+)\.mcap$")
_COMPRESSION = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "none": CompressionType.NONE}


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()  # raw bus bytes, as hex so that plots and grep can read them
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _number(field: str, value: Any) -> float:
    x = float(value)
    if not math.isfinite(x):  # JSON has no NaN/inf: Foxglove and PlotJuggler reject the message
        raise ValueError(f"state field {field!r} is {x}: JSON logs need finite numbers")
    return x


class SideBySideRecorder:
    """Writes /real/<joint>/state, /sim/<joint>/state and /bus/<joint>/commands to rotating MCAP files.

    directory: where files go (created if missing); files are named `<prefix>-<UTC>-<n>.mcap`, UTC
    being the file's first log time (YYYYmmddTHHMMSSZ) and n the file's index in this recording.
    rotate_s: a new file (segment) every rotate_s seconds of log time [s]; a kill cuts only the last.
    flush_s: longest time a message waits in memory before its chunk is written to the OS [s] (wall
    clock; a background thread enforces it when messages stop arriving).
    metadata: string key/values stored in every file's "servo-hil" metadata record, beside
    `time_base_ns` (the log's time base, epoch ns) and `file_index`.
    compression: per-chunk compression ("zstd", "lz4" or "none"; mcap ships zstd and lz4).
    chunk_size: a chunk is also closed when it exceeds this many bytes (uncompressed).

    Thread-safe. Use as a context manager or call close(); a file that is never closed is still
    readable up to its last flushed chunk with read_side_by_side. On start, every *.mcap file of
    `directory` that a kill left unfinished (and no running recorder holds) is recovered as a complete
    MCAP (servo_hil.logs.recover), each one logged at WARNING.
    """

    def __init__(self, directory: str | Path, prefix: str = "servo-hil", rotate_s: float = 600.0,
                 flush_s: float = 1.0, metadata: dict[str, str] | None = None, *,
                 compression: Literal["zstd", "lz4", "none"] = "zstd", chunk_size: int = 64 * 1024) -> None:
        if not rotate_s > 0 or not flush_s > 0:
            raise ValueError(f"rotate_s and flush_s must be > 0 (got {rotate_s}, {flush_s})")
        if compression not in _COMPRESSION:
            raise ValueError(f"compression: {compression!r} is not one of {', '.join(_COMPRESSION)}")
        metadata = dict(metadata or {})
        bad = [k for k, v in metadata.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            raise ValueError(f"metadata: keys and values must be strings (bad: {bad})")
        clash = [k for k in _RESERVED_METADATA if k in metadata]
        if clash:
            raise ValueError(f"metadata: {clash} are set by the recorder")
        self._dir = Path(directory)
        self._dir.mkdir(parents=True, exist_ok=True)
        for file in sorted(self._dir.glob("*.mcap")):
            try:
                result = recover_file(file)
            except OSError as exc:  # a file this process may not read or replace: recording goes on
                log.warning("%s: not recovered (%s)", file, exc.strerror or exc)
                continue
            if result.status in ("recovered", "unreadable"):
                log.warning("%s", result)
        self._prefix = prefix
        self._rotate_ns = round(rotate_s * 1e9)
        self._flush_s = flush_s
        self._metadata = metadata
        self._compression = _COMPRESSION[compression]
        self._chunk_size = chunk_size
        self._files: list[Path] = []
        self._writer: Writer | None = None
        self._stream: IO[bytes] | None = None
        self._file_start_ns = 0
        self._schemas: dict[str, int] = {}  # schema name → id, in the current file
        self._channels: dict[str, int] = {}  # topic → channel id, in the current file
        self._sequence: dict[str, int] = defaultdict(int)  # per topic, across files (gaps show drops)
        self._base_ns: int | None = None
        self._chunk_opened: float | None = None  # time.monotonic() of the first unflushed message
        self._error: BaseException | None = None  # raised by the flusher thread, re-raised to callers
        self._closed = False
        self._cond = threading.Condition()
        self._flusher = threading.Thread(target=self._flush_loop, name="mcap-flush", daemon=True)
        self._flusher.start()

    @property
    def files(self) -> list[Path]:
        """Files written so far (the last one is still open until close())."""
        with self._cond:
            return list(self._files)

    @property
    def time_base_ns(self) -> int | None:
        """The log's time base: log time of the first message [epoch ns], None before it."""
        return self._base_ns

    def state(self, side: Side, joint: str, t_ns: int, message: dict) -> None:
        """Record one joint state on /<side>/<joint>/state.

        t_ns: wall-clock time [epoch ns], stored as log and publish time. message: the STATE_FIELDS
        keys except `t` (position required; the others may be missing or None);
        `t` = (t_ns − time base) [s] is added, with one time base for both sides.
        """
        if side not in ("real", "sim"):
            raise ValueError(f"side must be 'real' or 'sim', not {side!r}")
        unknown = message.keys() - _STATE_KEYS
        if unknown:
            raise ValueError(f"state: unknown field(s) {sorted(unknown)} (known: {sorted(_STATE_KEYS)};"
                             " t is set from t_ns)")
        missing = [k for k in _STATE_NUMBERS if message.get(k) is None]
        if missing:
            raise ValueError(f"state: missing field(s) {missing}")
        body: dict[str, Any] = {k: _number(k, message[k]) for k in _STATE_NUMBERS}
        for k in _STATE_OPTIONAL_NUMBERS:
            v = message.get(k)
            body[k] = None if v is None else _number(k, v)
        enable = message.get("enable")
        body["enable"] = None if enable is None else bool(enable)
        if message.get("mode") is not None:   # only mirrors know a mode: other logs keep their fields
            body["mode"] = int(message["mode"])
        self._add(f"/{side}/{joint}/state", joint, "servo_hil.JointState", STATE_FIELDS,
                  {"side": side, "joint": joint}, t_ns, body)

    def command(self, joint: str, t_ns: int, message: dict) -> None:
        """Record one bus command on /bus/<joint>/commands.

        t_ns: wall-clock time [epoch ns]. message: free-form JSON (instruction, address, data, goal
        …); bytes become hex strings; `t` [s since the time base] is added.
        """
        if "t" in message:
            raise ValueError("command: t is set from t_ns")
        self._add(f"/bus/{joint}/commands", joint, "servo_hil.BusCommand", COMMAND_SCHEMA,
                  {"joint": joint}, t_ns, message)

    def event(self, joint: str, t_ns: int, message: dict) -> None:
        """Record one event of the mirror itself on /bus/<joint>/events (e.g. the twin taking the real
        device's state); free-form JSON like a command, `t` added."""
        if "t" in message:
            raise ValueError("event: t is set from t_ns")
        self._add(f"/bus/{joint}/events", joint, "servo_hil.MirrorEvent",
                  COMMAND_SCHEMA | {"title": "servo-hil mirror event"}, {"joint": joint}, t_ns, message)

    def poses(self, t_ns: int, transforms) -> None:
        """Record one foxglove.FrameTransforms message (a foxglove-sdk message: the robot's bodies from `world`,
        as Foxglove's 3D panel draws them) on /sim/poses, protobuf-encoded with its FileDescriptorSet as the
        schema, as Foxglove writes it. The JSON readers here (`read_side_by_side`) leave it out."""
        schema = transforms.get_schema()
        self._add("/sim/poses", "poses", schema.name, schema.data, {"side": "sim"}, t_ns, transforms.encode())

    def flush(self) -> None:
        """Write the open chunk to the OS now (the background thread does it every flush_s)."""
        with self._cond:
            self._flush_locked()

    def close(self) -> None:
        """Finish the current file (last chunk, summary with schemas/channels/statistics, indexes, footer)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            if self._writer is not None:
                self._close_file()
        self._flusher.join()

    def __enter__(self) -> SideBySideRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals (all under self._cond) --

    def _add(self, topic: str, joint: str, schema_name: str, schema: dict | bytes, channel_meta: dict[str, str],
             t_ns: int, body: dict | bytes) -> None:
        """One message: `body` a JSON map (`schema` its JSON schema) or protobuf bytes (`schema` its descriptors)."""
        t_ns = int(t_ns)
        with self._cond:
            if self._closed:
                raise RuntimeError("recorder is closed")
            if self._error is not None:
                raise RuntimeError("the MCAP flusher thread failed") from self._error
            if topic not in self._channels and not _JOINT.fullmatch(joint):
                raise ValueError(f"joint name {joint!r}: use letters, digits, '_', '-', '.'")
            base = t_ns if self._base_ns is None else self._base_ns
            try:
                data = body if isinstance(body, bytes) else json.dumps(
                    {"t": (t_ns - base) / 1e9, **body}, separators=(",", ":"), allow_nan=False,
                    default=_json_default).encode()
            except ValueError as exc:  # NaN/inf in a free-form command
                raise ValueError(f"{topic}: {exc}") from None
            self._base_ns = base
            if self._writer is None:
                self._open_file(t_ns)
            elif t_ns - self._file_start_ns >= self._rotate_ns:
                self._close_file()
                self._open_file(t_ns)
            assert self._writer is not None
            channel = self._channels.get(topic)
            if channel is None:
                channel = self._register(topic, schema_name, schema, channel_meta)
            seq = self._sequence[topic]
            self._sequence[topic] = seq + 1
            self._writer.add_message(channel, log_time=t_ns, data=data, publish_time=t_ns,
                                     sequence=seq & 0xFFFFFFFF)
            now = time.monotonic()
            if self._chunk_opened is None:
                self._chunk_opened = now
                self._cond.notify_all()  # wake the flusher: it now has a deadline
            elif now - self._chunk_opened >= self._flush_s:
                self._flush_locked()

    def _register(self, topic: str, schema_name: str, schema: dict | bytes, channel_meta: dict[str, str]) -> int:
        assert self._writer is not None
        protobuf = isinstance(schema, bytes)
        schema_id = self._schemas.get(schema_name)
        if schema_id is None:
            schema_id = self._writer.register_schema(schema_name, encoding="protobuf" if protobuf else "jsonschema",
                                                     data=schema if protobuf else json.dumps(schema).encode())
            self._schemas[schema_name] = schema_id
        channel = self._writer.register_channel(topic, message_encoding="protobuf" if protobuf else "json",
                                                schema_id=schema_id, metadata=channel_meta)
        self._channels[topic] = channel
        return channel

    def _open_file(self, t_ns: int) -> None:
        stamp = datetime.fromtimestamp(t_ns / 1e9, UTC).strftime("%Y%m%dT%H%M%SZ")
        n = len(self._files)
        while True:  # never overwrite: a previous recording may have used the same second and index
            path = self._dir / f"{self._prefix}-{stamp}-{n}.mcap"
            try:
                stream = open(path, "xb")  # noqa: SIM115 (closed in _close_file)
            except FileExistsError:
                n += 1
                continue
            try:  # held until close (or the kernel drops it at a kill): recover_file leaves the file alone
                fcntl.flock(stream.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:  # a recovery opened the new, empty file first: leave it that one
                stream.close()
                n += 1
        writer = Writer(stream, chunk_size=self._chunk_size, compression=self._compression)
        writer.start(profile="", library=f"servo-hil recorder; {LIBRARY_IDENTIFIER}")
        writer.add_metadata(_METADATA_NAME, {**self._metadata, "time_base_ns": str(self._base_ns),
                                             "file_index": str(len(self._files))})
        stream.flush()  # header and metadata reach the OS even if no chunk ever does
        self._writer, self._stream, self._file_start_ns = writer, stream, t_ns
        self._files.append(path)

    def _close_file(self) -> None:
        assert self._writer is not None and self._stream is not None
        self._writer.finish()
        self._stream.close()
        self._writer = self._stream = None
        self._schemas.clear()
        self._channels.clear()
        self._chunk_opened = None

    def _flush_locked(self) -> None:
        if self._writer is not None and self._stream is not None and self._chunk_opened is not None:
            # the crash-loss bound rests on this: mcap ≥ 1.6's Writer.flush() (foxglove/mcap #1839) closes
            # the open chunk even below chunk_size and flushes the file (no fsync: the OS page cache
            # survives a process kill)
            self._writer.flush()
        self._chunk_opened = None

    def _flush_loop(self) -> None:
        """Close the open chunk flush_s after its first message even if no further message arrives."""
        with self._cond:
            while not self._closed:
                if self._chunk_opened is None:
                    self._cond.wait()
                    continue
                delay = self._chunk_opened + self._flush_s - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                try:
                    self._flush_locked()
                except Exception as exc:  # e.g. disk full: surface it on the next state()/command()
                    self._error = exc
                    return


def recording_files(path: str | Path) -> list[Path]:
    """An MCAP file, or the *.mcap files of a folder in recording order (UTC stamp, then index)."""
    path = Path(path)
    if not path.is_dir():
        return [path]

    def key(p: Path) -> tuple[str, int, str]:
        m = _FILE_NAME.search(p.name)
        return (m[1], int(m[2]), p.name) if m else ("", 0, p.name)

    return sorted(path.glob("*.mcap"), key=key)


def _decode(topic_messages: dict[str, list[dict]], channel: Channel, message: Message) -> None:
    if channel.message_encoding != "json":   # a robot's poses (foxglove.FrameTransforms, protobuf)
        return
    doc = json.loads(message.data)
    doc["log_time_ns"] = message.log_time
    topic_messages[channel.topic].append(doc)


def _read_complete(f: IO[bytes], out: dict[str, list[dict]]) -> None:
    # The summary/index path, as Foxglove and PlotJuggler read a finished file; CRCs checked.
    for _schema, channel, message in make_reader(f, validate_crcs=True).iter_messages(log_time_order=False):
        _decode(out, channel, message)


def read_side_by_side(path: str | Path) -> dict[str, list[dict]]:
    """Messages by topic: {"/real/j/state": [{"t", "position", …, "log_time_ns"}, …], …}.

    path: one MCAP file, or a folder of rotated files (read in recording order and concatenated).
    Complete files are read through their summary and index; files cut short (no footer, e.g. after
    a SIGKILL) by a linear scan that keeps every complete chunk and never raises for the torn tail
    (the file is read as it is, not recovered). A file that is not MCAP, or is damaged before its
    end, raises servo_hil.logs.recover.DamagedMcap (a ValueError) naming it.
    Messages keep file order within a topic; log_time_ns is the message's log time [epoch ns].
    """
    out: dict[str, list[dict]] = defaultdict(list)
    for file in recording_files(path):
        with open(file, "rb") as f:
            check_magic(f, file)
            if is_complete(f):
                _read_complete(f, out)
                continue
            channels: dict[int, Channel] = {}
            for _from_chunk, records in torn_records(f):
                for r in records:
                    if isinstance(r, Channel):
                        channels[r.id] = r
                    elif isinstance(r, Message):
                        _decode(out, channels[r.channel_id], r)
    return dict(out)


_BAM_HEADER_KEYS = frozenset({"mass", "length", "arm_mass", "kp", "vin", "damping", "motor", "trajectory"})
_BAM_REQUIRED = ("mass", "length", "kp")


def export_bam_json(path_or_dir: str | Path, joint: str, out: str | Path, side: Side = "real",
                    header: dict | None = None) -> Path:
    """Export one joint's recorded states as a bam processed log (servo_hil.offline.replay.load_log reads it).

    header: bam's header keys — mass [kg], length [m], kp (raw firmware P gain) required; arm_mass
    [kg], vin [V] or damping, motor, trajectory optional. dt [s] is the median step between recorded
    messages (not resampled: one entry per message, as recorded). Entries: position [rad], speed
    [rad/s], goal_position [rad], torque_enable, timestamp [s since the first entry], plus bam's raw
    temp [°C] and input_volts [V] when recorded. A null goal or enable repeats the previous value
    (before any: the position, and enabled).
    """
    header = dict(header or {})
    unknown = header.keys() - _BAM_HEADER_KEYS
    if unknown:
        extra = " (dt is the median step of the log)" if "dt" in unknown else ""
        raise ValueError(f"bam header: unknown key(s) {sorted(unknown)}{extra}")
    missing = [k for k in _BAM_REQUIRED if k not in header]
    if missing:
        raise ValueError(f"bam header: missing {missing}")
    topic = f"/{side}/{joint}/state"
    messages = read_side_by_side(path_or_dir).get(topic, [])
    if len(messages) < 2:
        raise ValueError(f"{path_or_dir}: {len(messages)} message(s) on {topic}; a bam log needs at least 2")
    times = [m["log_time_ns"] for m in messages]
    dt = statistics.median(b - a for a, b in pairwise(times)) / 1e9
    if not dt > 0:
        raise ValueError(f"{topic}: median step {dt} s; log times must increase")
    entries = []
    goal, enable = messages[0]["position"], True
    for m, t in zip(messages, times, strict=True):
        goal = goal if m.get("goal") is None else m["goal"]
        enable = enable if m.get("enable") is None else m["enable"]
        entry = {"position": m["position"], "speed": m["velocity"], "goal_position": goal,
                 "torque_enable": enable, "timestamp": (t - times[0]) / 1e9}
        if m.get("temperature") is not None:
            entry["temp"] = m["temperature"]
        if m.get("voltage") is not None:
            entry["input_volts"] = m["voltage"]
        entries.append(entry)
    out = Path(out)
    out.write_text(json.dumps({**header, "dt": dt, "entries": entries}))
    return out
