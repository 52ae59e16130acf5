"""Side-by-side MCAP recorder: round trip, time base, rotation, crash safety, bam export."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcap.reader import make_reader
from mcap.writer import LIBRARY_IDENTIFIER

from servo_hil.daemon.telemetry import StealMeter
from servo_hil.logs.mcap import STATE_FIELDS, SideBySideRecorder, export_bam_json, read_side_by_side, recording_files
from servo_hil.logs.recover import Recovery, recover_file
from servo_hil.offline.replay import load_log

REPO = Path(__file__).resolve().parents[3]
T0 = 1_780_000_000_123_456_789  # an epoch time in ns (2026), odd digits so that rounding would show
MS = 1_000_000


def _state(i: int, joint: str, side: str) -> dict:
    """A distinct, exactly representable-as-JSON state per (i, joint, side)."""
    k = (1 if side == "real" else 2) * (1 + int(joint[-1]))
    return {"position": 0.1 * i + k, "velocity": -0.37 * i, "current": 0.013 * i * k, "torque": 0.25 * k,
            "goal": 1.5 + i / 7, "temperature": 31.25, "voltage": 12.1, "enable": i % 3 != 0}


def _mcap_messages(path: Path) -> list[tuple[str, int, dict]]:
    """(topic, log_time, JSON) through mcap's own index-based reader."""
    with open(path, "rb") as f:
        return [(c.topic, m.log_time, json.loads(m.data))
                for _s, c, m in make_reader(f).iter_messages(log_time_order=False)]


def test_round_trip_two_joints_both_sides(tmp_path):
    with SideBySideRecorder(tmp_path) as rec:
        for i in range(20):
            t = T0 + i * 5 * MS + 17 * i  # uneven ns to prove log times are kept to the ns
            for joint in ("j1", "j2"):
                rec.state("real", joint, t, _state(i, joint, "real"))
                rec.state("sim", joint, t + 3, _state(i, joint, "sim") | {"torque": None, "enable": None})
                rec.command(joint, t - 1, {"instruction": "write", "address": 116, "data": bytes([i, 0xAB]),
                                           "goal": 1.5 + i / 7})
    (path,) = rec.files
    logs = read_side_by_side(path)
    assert sorted(logs) == ["/bus/j1/commands", "/bus/j2/commands", "/real/j1/state", "/real/j2/state",
                            "/sim/j1/state", "/sim/j2/state"]
    for joint in ("j1", "j2"):
        real, sim, cmd = logs[f"/real/{joint}/state"], logs[f"/sim/{joint}/state"], logs[f"/bus/{joint}/commands"]
        assert len(real) == len(sim) == len(cmd) == 20
        for i in range(20):
            t = T0 + i * 5 * MS + 17 * i
            assert real[i] == _state(i, joint, "real") | {"t": (t - T0) / 1e9, "log_time_ns": t}
            assert sim[i] == _state(i, joint, "sim") | {"t": (t + 3 - T0) / 1e9, "log_time_ns": t + 3,
                                                          "torque": None, "enable": None}
            assert cmd[i] == {"instruction": "write", "address": 116, "data": bytes([i, 0xAB]).hex(),
                              "goal": 1.5 + i / 7, "t": (t - 1 - T0) / 1e9, "log_time_ns": t - 1}
    # mcap's own reader (summary + chunk index) sees the same messages, JSON with a jsonschema schema.
    ours = sorted((topic, m["log_time_ns"]) for topic, ms in logs.items() for m in ms)
    assert sorted((topic, lt) for topic, lt, _ in _mcap_messages(path)) == ours
    with open(path, "rb") as f:
        summary = make_reader(f).get_summary()
    assert summary is not None and summary.statistics is not None
    assert summary.statistics.message_count == 6 * 20
    for channel in summary.channels.values():
        assert channel.message_encoding == "json"
        schema = summary.schemas[channel.schema_id]
        assert schema.encoding == "jsonschema"
        if channel.topic.endswith("/state"):
            assert json.loads(schema.data) == STATE_FIELDS
            assert channel.metadata["side"] in ("real", "sim")


def test_real_and_sim_share_one_time_base(tmp_path):
    base = T0 + 42
    with SideBySideRecorder(tmp_path) as rec:
        rec.command("j1", base, {"goal": 0.5})  # the first message of any kind sets the base
        rec.state("sim", "j1", base + 2 * MS, _state(0, "j1", "sim"))
        rec.state("real", "j1", base + 7 * MS, _state(0, "j1", "real"))
        rec.state("sim", "j1", base + 12 * MS, _state(1, "j1", "sim"))
    assert rec.time_base_ns == base
    logs = read_side_by_side(tmp_path)
    assert logs["/bus/j1/commands"][0]["t"] == 0.0
    assert [m["t"] for m in logs["/sim/j1/state"]] == [0.002, 0.012]
    assert [m["t"] for m in logs["/real/j1/state"]] == [0.007]
    with open(rec.files[0], "rb") as f:
        (meta,) = list(make_reader(f).iter_metadata())
    assert int(meta.metadata["time_base_ns"]) == base


def test_metadata_record_in_every_file(tmp_path):
    with SideBySideRecorder(tmp_path, rotate_s=0.5, metadata={"rig": "bench-a", "servo": "xm430"}) as rec:
        for i in range(30):
            rec.state("real", "j1", T0 + i * 50 * MS, _state(i, "j1", "real"))
    assert len(rec.files) == 3
    for index, path in enumerate(rec.files):
        with open(path, "rb") as f:
            (meta,) = list(make_reader(f).iter_metadata())
        assert meta.name == "servo-hil"
        assert meta.metadata == {"rig": "bench-a", "servo": "xm430", "time_base_ns": str(T0),
                                 "file_index": str(index)}
    with pytest.raises(ValueError, match="time_base_ns"):
        SideBySideRecorder(tmp_path, metadata={"time_base_ns": "0"})


def test_rotation_gives_self_contained_files(tmp_path):
    n = 350  # 3.5 s of log time at 100 Hz, rotated every second → 4 files
    with SideBySideRecorder(tmp_path, prefix="bench", rotate_s=1.0) as rec:
        for i in range(n):
            t = T0 + i * 10 * MS
            rec.state("real", "j1", t, _state(i, "j1", "real"))
            rec.state("sim", "j1", t, _state(i, "j1", "sim"))
            if i % 10 == 0:
                rec.command("j1", t, {"goal": i / 100})
    assert len(rec.files) == 4
    seen: list[int] = []
    for index, path in enumerate(rec.files):
        assert re.fullmatch(rf"bench-\d{{8}}T\d{{6}}Z-{index}\.mcap", path.name), path.name
        messages = _mcap_messages(path)  # each file alone: its own schemas and channels
        assert {topic for topic, _, _ in messages} == {"/real/j1/state", "/sim/j1/state", "/bus/j1/commands"}
        times = sorted({lt for _, lt, _ in messages})
        assert times[0] == T0 + index * 1_000_000_000
        assert times[-1] - times[0] < 1_000_000_000
        seen += [m["t"] for topic, _, m in messages if topic == "/real/j1/state"]
    assert seen == [i * 10 * MS / 1e9 for i in range(n)]  # t keeps the recording's base across files
    logs = read_side_by_side(tmp_path)  # the folder: files concatenated in recording order
    assert [m["log_time_ns"] for m in logs["/sim/j1/state"]] == [T0 + i * 10 * MS for i in range(n)]
    assert len(logs["/bus/j1/commands"]) == 35


def test_every_truncation_reads_a_prefix_and_recovers_to_it(tmp_path):
    """A file cut at any byte (what a SIGKILL leaves) reads without error, as a prefix of the whole, and
    recovers into a complete MCAP holding that prefix, for mcap's standard reader."""
    with SideBySideRecorder(tmp_path / "rec", chunk_size=512) as rec:
        for i in range(24):
            rec.state("real", "j1", T0 + i * MS, _state(i, "j1", "real"))
            rec.command("j1", T0 + i * MS, {"goal": i})
    data = rec.files[0].read_bytes()
    full = read_side_by_side(rec.files[0])["/real/j1/state"]
    cut = tmp_path / "cut.mcap"
    counts, dropped = [], []
    for size in sorted({*range(0, len(data), 53), *range(1, 10), len(data) - 1}):  # every byte: ~1 min here
        cut.write_bytes(data[:size])
        torn = read_side_by_side(cut)
        got = torn.get("/real/j1/state", [])
        assert got == full[:len(got)], size
        counts.append(len(got))
        result = recover_file(cut)
        assert result.status == "recovered" and result.messages == sum(map(len, torn.values())), (size, result)
        assert sorted((topic, t) for topic, t, _ in _raw(cut)) == _ours_of(torn), size
        dropped.append(result.dropped_bytes)
    assert counts == sorted(counts) and counts[0] == 0 and counts[-1] == len(full)  # footer cut: nothing lost
    assert len(set(counts)) > 5  # several chunks were kept in turn
    assert sum(d > 0 for d in dropped) > len(dropped) // 2  # most cuts fall inside a record, which is dropped


def test_corruption_before_the_tail_raises(tmp_path):
    with SideBySideRecorder(tmp_path, chunk_size=1024) as rec:
        for i in range(40):
            rec.state("real", "j1", T0 + i * MS, _state(i, "j1", "real"))
    path = rec.files[0]
    with open(path, "rb") as f:
        first = make_reader(f).get_summary().chunk_indexes[0]
    data = bytearray(path.read_bytes())
    data[first.chunk_start_offset + first.chunk_length - 3] ^= 0xFF  # inside the first chunk's data
    path.write_bytes(bytes(data[: len(data) // 2 + 1000]))  # and no footer: the linear scan
    with pytest.raises(ValueError, match="damaged before byte"):  # a CRC or decompressor error, not a silent stop
        read_side_by_side(path)
    path.write_bytes(b"not an mcap file")
    with pytest.raises(ValueError, match="not an MCAP file"):
        read_side_by_side(path)


def test_idle_chunk_is_flushed_within_flush_s(tmp_path):
    """The background thread writes the open chunk flush_s after its first message, with no new message."""
    rec = SideBySideRecorder(tmp_path, flush_s=0.4)
    try:
        for i in range(5):
            rec.state("real", "j1", T0 + i * MS, _state(i, "j1", "real"))
        assert read_side_by_side(rec.files[0]) == {}  # still in the open chunk (below chunk_size)
        steal, t0 = StealMeter(), time.monotonic()
        while not (got := read_side_by_side(rec.files[0])) and time.monotonic() - t0 < 10.0:
            time.sleep(0.02)
        waited = time.monotonic() - t0
        assert len(got["/real/j1/state"]) == 5
        # generous: the flush thread may wake late on a loaded host
        assert waited < 0.4 + 1.5, f"flushed after {waited:.2f} s; hypervisor steal {100 * steal.fraction():.1f} %"
    finally:
        rec.close()
    assert len(_mcap_messages(rec.files[0])) == 5


def test_export_bam_json_loads_in_replay(tmp_path):
    steps = [5] * 30 + [7, 4, 5, 5, 6] + [5] * 14  # ms: jitter, median 5
    times = [T0]
    for s in steps:
        times.append(times[-1] + s * MS)
    with SideBySideRecorder(tmp_path / "rec") as rec:
        for i, t in enumerate(times):
            state = _state(i, "j1", "real") | {"goal": None if i in (3, 4) else 0.01 * i,
                                               "enable": None if i == 0 else i < 40}
            rec.state("real", "j1", t, state)
            rec.state("sim", "j1", t, _state(i, "j1", "sim"))  # another side: not exported
    header = {"mass": 0.49, "length": 0.1, "kp": 400, "vin": 7.4, "motor": "xl330", "trajectory": "sin_sin"}
    out = export_bam_json(tmp_path / "rec", "j1", tmp_path / "log.json", header=header)
    log = load_log(out)
    assert len(log.entries) == len(times) == 50
    assert log.dt == 0.005 and log.kp == 400 and log.vin == 7.4 and log.mass == 0.49
    assert [e.position for e in log.entries] == [_state(i, "j1", "real")["position"] for i in range(50)]
    assert [e.goal_position for e in log.entries][2:6] == [0.02, 0.02, 0.02, 0.05]  # null goal: the previous
    assert [e.torque_enable for e in log.entries] == [True] * 40 + [False] * 10
    raw = json.loads(out.read_text())
    assert raw["entries"][-1]["timestamp"] == (times[-1] - T0) / 1e9
    assert raw["entries"][0]["temp"] == 31.25 and raw["entries"][0]["input_volts"] == 12.1
    with pytest.raises(ValueError, match="missing"):
        export_bam_json(tmp_path / "rec", "j1", tmp_path / "x.json", header={"mass": 1.0})
    with pytest.raises(ValueError, match="dt is the median"):
        export_bam_json(tmp_path / "rec", "j1", tmp_path / "x.json", header=header | {"dt": 0.01})


def test_bad_input_is_refused(tmp_path):
    with SideBySideRecorder(tmp_path) as rec:
        good = _state(0, "j1", "real")
        with pytest.raises(ValueError, match="side"):
            rec.state("left", "j1", T0, good)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="unknown field"):
            rec.state("real", "j1", T0, good | {"postion": 1.0})
        with pytest.raises(ValueError, match="missing"):
            rec.state("real", "j1", T0, {"velocity": 0.0, "current": 1.0})   # no position
        with pytest.raises(ValueError, match="finite"):
            rec.state("real", "j1", T0, good | {"velocity": float("nan")})
        with pytest.raises(ValueError, match="joint name"):
            rec.state("real", "a/b", T0, good)
        with pytest.raises(ValueError, match="commands"):
            rec.command("j1", T0, {"goal": float("inf")})
        assert rec.files == []  # nothing refused opened a file or set the time base
        assert rec.time_base_ns is None
    with pytest.raises(RuntimeError, match="closed"):
        rec.state("real", "j1", T0, good)


# -- a recording killed with SIGKILL, and its recovery --

_KILLED_RECORDER = """
import sys, time
from servo_hil.logs.mcap import SideBySideRecorder
# 1 MiB chunks (mcap's default) fill in seconds here: only the flush_s timer closes a chunk
rec = SideBySideRecorder(sys.argv[1], rotate_s=float(sys.argv[2]), flush_s=float(sys.argv[3]), chunk_size=1 << 20)
start = time.monotonic()
i = 0
while time.monotonic() - start < 60:  # the test kills it long before; never an orphan
    t = time.time_ns()
    for joint in ("j1", "j2"):
        state = {"position": i * 1e-3, "velocity": 0.2, "current": 0.1, "goal": i * 1e-3, "enable": True}
        rec.state("real", joint, t, state)
        rec.state("sim", joint, t, state)
        rec.command(joint, t, {"instruction": "write", "address": 116, "data": b"\\x00\\x01"})
    print(i, t, flush=True)  # after the adds: every step printed was handed to the recorder
    i += 1
    time.sleep(0.002)  # a mirror's Sync Read cycle: a few hundred Hz, 6 messages each
"""
ROTATE_S, FLUSH_S = 1.0, 0.25
SERVO_HIL = [sys.executable, "-m", "servo_hil.cli.main"]


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> tuple[Path, list[int]]:
    """A recording killed with SIGKILL after 2.6 s of log time: (its folder, log times of the steps it printed).

    Segments of ROTATE_S: the first two are complete, the last one is cut. Tests copy the folder.
    """
    folder = tmp_path_factory.mktemp("killed") / "rec"
    env = os.environ | {"PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_RECORDER, str(folder), str(ROTATE_S), str(FLUSH_S)],
                            stdout=subprocess.PIPE, text=True, cwd=REPO, env=env)
    printed: list[int] = []
    try:
        assert proc.stdout is not None
        # log time, not a wall-clock wait: under host steal the loop runs slower but the segments still rotate
        while not printed or printed[-1] - printed[0] < 2.6e9:
            line = proc.stdout.readline()
            assert line, "the recorder exited"
            printed.append(int(line.split()[1]))
        os.kill(proc.pid, signal.SIGKILL)
        printed += [int(line.split()[1]) for line in proc.stdout if len(line.split()) == 2 and line.endswith("\n")]
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    return folder, printed


def _copy(killed, tmp_path: Path) -> tuple[Path, list[Path]]:
    """A copy of the killed recording: (folder, its files in recording order)."""
    folder = shutil.copytree(killed[0], tmp_path / "rec")
    return folder, recording_files(folder)


def _raw(path: Path) -> list[tuple[str, int, bytes]]:
    """(topic, log time, data) of every message, through mcap's standard index-based reader, CRCs checked."""
    with open(path, "rb") as f:
        return [(c.topic, m.log_time, m.data)
                for _s, c, m in make_reader(f, validate_crcs=True).iter_messages(log_time_order=False)]


def _ours(path: Path) -> list[tuple[str, int]]:
    """(topic, log time) of every message, through servo-hil's own reader (a linear scan when torn)."""
    return _ours_of(read_side_by_side(path))


def _ours_of(topics: dict[str, list[dict]]) -> list[tuple[str, int]]:
    return sorted((topic, m["log_time_ns"]) for topic, ms in topics.items() for m in ms)


def _recover_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SERVO_HIL, "recover", *args], capture_output=True, text=True, cwd=REPO, timeout=60,
                          env=os.environ | {"PYTHONPATH": str(REPO)})


def test_a_kill_cuts_only_the_last_segment_and_mcap_cannot_open_it(killed, tmp_path):
    _, files = _copy(killed, tmp_path)
    assert len(files) >= 3  # 2.6 s of log time in segments of 1 s
    for complete in files[:-1]:
        assert len(_raw(complete)) > 0
    with pytest.raises(Exception):  # noqa: B017 (no footer, no summary: RecordLengthLimitExceeded or the like)
        _raw(files[-1])
    assert len(_ours(files[-1])) > 0  # what the recovery must give to every reader


def test_recovered_segment_reads_every_message_with_the_standard_reader(killed, tmp_path):
    folder, files = _copy(killed, tmp_path)
    torn = files[-1]
    expected = [(topic, m["log_time_ns"], m) for topic, ms in read_side_by_side(torn).items() for m in ms]
    res = _recover_cli(str(folder))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == len(files) and res.stderr == ""
    assert lines[-1].startswith(f"{torn}: recovered {len(expected)} messages"), lines[-1]
    assert all(": intact, " in line for line in lines[:-1]), lines
    got = _raw(torn)
    assert len(got) == len(expected)
    assert sorted((topic, t, json.loads(data) | {"log_time_ns": t}) for topic, t, data in got) == \
        sorted((topic, t, m) for topic, t, m in expected)
    assert [m for m in files if m.name.startswith(".")] == [] and sorted(folder.iterdir()) == sorted(files)


def test_recovery_keeps_what_the_torn_reader_finds_and_loses_at_most_flush_s(killed, tmp_path):
    folder, files = _copy(killed, tmp_path)
    before = {file: _ours(file) for file in files}
    res = _recover_cli(str(folder))
    assert res.returncode == 0, res.stderr
    for file in files:
        assert sorted((topic, t) for topic, t, _ in _raw(file)) == before[file]  # file by file, message by message
    # against what the process handed to the recorder before it died: the recording is a gapless prefix,
    # and the steps lost were all handed over within flush_s of the last one
    with_recovered = sorted({t for file in files for topic, t, _ in _raw(file) if topic == "/real/j1/state"})
    printed = killed[1]
    assert with_recovered == printed[: len(with_recovered)] or with_recovered[: len(printed)] == printed
    lost = printed[len(with_recovered):]
    # + 0.1 s: the time between a step's wall-clock stamp and the recorder's monotonic check of its chunk's age
    assert not lost or (printed[-1] - lost[0]) / 1e9 <= FLUSH_S + 0.1, ((printed[-1] - lost[0]) / 1e9, len(lost))


def test_recovered_segment_has_a_summary_with_chunk_indexes_and_statistics(killed, tmp_path):
    _, files = _copy(killed, tmp_path)
    torn, complete = files[-1], files[-2]
    topics = read_side_by_side(torn)
    assert _recover_cli(str(torn)).returncode == 0
    with open(torn, "rb") as f:
        reader = make_reader(f)
        summary = reader.get_summary()
        header = reader.get_header()
        (meta,) = list(reader.iter_metadata())
    with open(complete, "rb") as f:
        reference = make_reader(f).get_summary()
    assert summary is not None and summary.statistics is not None
    stats = summary.statistics
    times = [m["log_time_ns"] for ms in topics.values() for m in ms]
    assert stats.message_count == len(times)
    assert (stats.message_start_time, stats.message_end_time) == (min(times), max(times))
    by_topic = {summary.channels[cid].topic: n for cid, n in stats.channel_message_counts.items()}
    assert by_topic == {topic: len(ms) for topic, ms in topics.items()}
    # chunk indexes, each with the message index of every channel in its chunk; as many chunks as flushes
    assert len(summary.chunk_indexes) == stats.chunk_count >= 2
    assert all(ci.message_index_offsets for ci in summary.chunk_indexes)
    assert sum(ci.message_end_time >= ci.message_start_time for ci in summary.chunk_indexes) == stats.chunk_count
    # the same schemas, channels and metadata as a segment the recorder finished itself
    def layout(s):
        return sorted((c.topic, c.message_encoding, c.metadata["joint"], s.schemas[c.schema_id].name,
                       s.schemas[c.schema_id].data) for c in s.channels.values())
    assert layout(summary) == layout(reference)
    assert meta.name == "servo-hil" and meta.metadata["file_index"] == str(len(files) - 1)
    assert header.library == f"servo-hil recorder; {LIBRARY_IDENTIFIER}; recovered with {LIBRARY_IDENTIFIER}"


def test_the_next_recorder_start_in_the_folder_recovers_the_cut_segment(killed, tmp_path, caplog):
    folder, files = _copy(killed, tmp_path)
    torn = files[-1]
    expected = _ours(torn)
    complete = {file: file.read_bytes() for file in files[:-1]}
    with caplog.at_level("WARNING", logger="servo_hil.logs.mcap"), SideBySideRecorder(folder, prefix="next") as rec:
        assert sorted((topic, t) for topic, t, _ in _raw(torn)) == expected  # before the first message
        for i in range(10):
            rec.state("real", "j1", T0 + i * MS, _state(i, "j1", "real"))
    (warning,) = caplog.records
    assert warning.getMessage().startswith(f"{torn}: recovered {len(expected)} messages into a complete MCAP")
    assert {file: file.read_bytes() for file in files[:-1]} == complete  # the finished segments: untouched
    (new,) = set(recording_files(folder)) - set(files)
    assert new.name.startswith("next-") and len(_raw(new)) == 10
    with caplog.at_level("WARNING", logger="servo_hil.logs.mcap"):
        SideBySideRecorder(folder).close()  # a third start: nothing left to recover
    assert len(caplog.records) == 1


def test_recovering_an_intact_file_changes_nothing(tmp_path):
    with SideBySideRecorder(tmp_path / "rec", flush_s=0.05) as rec:
        for i in range(50):
            rec.state("real", "j1", T0 + i * MS, _state(i, "j1", "real"))
        rec.flush()
        (live,) = rec.files
        # a file a running recorder writes: its flock keeps the recovery off it
        assert recover_file(live) == Recovery(live, "in use")
        res = _recover_cli(str(live))
        assert (res.returncode, res.stdout) == (0, f"{live}: a running recorder is writing it; left alone\n")
    before = (live.read_bytes(), live.stat())
    assert recover_file(live) == Recovery(live, "intact", 50)
    res = _recover_cli(str(tmp_path / "rec"))
    assert (res.returncode, res.stdout, res.stderr) == (0, f"{live}: intact, 50 messages; unchanged\n", "")
    after = live.stat()
    assert live.read_bytes() == before[0]
    assert (after.st_ino, after.st_mtime_ns) == (before[1].st_ino, before[1].st_mtime_ns)


def test_recovering_twice_changes_nothing_the_second_time(killed, tmp_path):
    folder, files = _copy(killed, tmp_path)
    assert _recover_cli(str(folder)).returncode == 0
    once = {file: (file.read_bytes(), file.stat().st_mtime_ns) for file in files}
    res = _recover_cli(str(folder))
    assert res.returncode == 0 and all(": intact, " in line for line in res.stdout.splitlines())
    assert {file: (file.read_bytes(), file.stat().st_mtime_ns) for file in files} == once


def _one_error_line(res: subprocess.CompletedProcess, *words: str) -> None:
    lines = res.stderr.splitlines()
    assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("servo-hil: error: "), res.stderr
    assert all(w in lines[0] for w in words), lines[0]


def test_recover_refuses_what_is_not_a_cut_mcap_with_one_line(killed, tmp_path):
    text = tmp_path / "notes.mcap"
    text.write_text("not an mcap file\n")
    res = _recover_cli(str(text))
    _one_error_line(res, str(text), "not an MCAP file")
    assert res.stdout == "" and text.read_text() == "not an mcap file\n"
    _one_error_line(_recover_cli(str(tmp_path / "nope")), str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    _one_error_line(_recover_cli(str(tmp_path / "empty")), "no .mcap files")
    # damaged before its cut (a byte of its first chunk flipped): refused, left as it was
    _, files = _copy(killed, tmp_path)
    torn = files[-1]
    data = bytearray(torn.read_bytes())
    data[200] ^= 0xFF  # past the header and metadata records: inside the first chunk
    torn.write_bytes(bytes(data))
    _one_error_line(_recover_cli(str(torn)), str(torn), "damaged before byte")
    assert torn.read_bytes() == bytes(data)


def test_the_segment_length_is_set_in_the_rig_and_on_the_command_line(tmp_path):
    from servo_hil.daemon.service import Daemon
    from servo_hil.wiring.mirror import open_recorder

    rig = tmp_path / "rig.toml"
    rig.write_text('[mqtt]\nenabled = false\n[[buses]]\nname = "dxl"\nprotocol = "dynamixel"\nreal = "/dev/null"\n'
                   'record = "logs"\nrecord_segment_s = 0.5\n'
                   '[[actuators]]\njoint = "j1"\ncatalog = "mx64"\nmodel = "m1"\nbus = "dxl"\nid = 1\n')
    daemon = Daemon(rig)
    daemon.context.term()
    assert daemon.rig.buses[0].record_segment_s == 0.5
    daemon = Daemon(rig, record=str(tmp_path / "logs"), record_segment_s=0.25)
    daemon.context.term()
    with open_recorder(daemon.rig.buses[0], daemon.live) as rec:
        for i in range(10):  # 0.9 s of log time in segments of 0.25 s
            rec.state("real", "j1", T0 + i * 100 * MS, _state(i, "j1", "real"))
    assert len(rec.files) == 4
    res = subprocess.run([*SERVO_HIL, "mirror", str(rig), "--record-segment-s", "0"], capture_output=True,
                         text=True, cwd=REPO, timeout=60, env=os.environ | {"PYTHONPATH": str(REPO)})
    _one_error_line(res, "--record-segment-s 0", "record_segment_s")


def test_a_killed_mirror_daemon_recovers_its_log_on_the_next_start(tmp_path):
    """`servo-hil mirror --record` killed with SIGKILL under dynamixel-sdk traffic: its cut segment opens in mcap's
    reader after the next start of the mirror on the same folder, with every message the torn scan finds."""
    from dynamixel_sdk import GroupSyncRead, PacketHandler

    from tests.daemon_process import start_cli, stop_cli
    from tests.drivers.dynamixel.conftest import DEFAULT_SLACK_MS, SlackPortHandler, mx64_pendulum_rig

    real_rig, _ = mx64_pendulum_rig(tmp_path, "real", "m1")
    twin_rig, _ = mx64_pendulum_rig(tmp_path, "twin", "m1")
    logs = tmp_path / "logs"
    args = ["mirror", str(twin_rig), "--real", str(tmp_path / "real"), "--port", str(tmp_path / "ctl"),
            "--record", str(logs), "--record-segment-s", "1.5"]
    real = start_cli(["run", str(real_rig), "--port", str(tmp_path / "real")], "at " + str(tmp_path / "real"))
    try:
        mirror = start_cli(args, "mirroring")
        try:
            port = SlackPortHandler(str(tmp_path / "ctl"), DEFAULT_SLACK_MS)
            assert port.openPort() and port.setBaudRate(1_000_000)
            sync = GroupSyncRead(port, PacketHandler(2.0), 132, 4)
            sync.addParam(1)
            replies = 0
            # Sync Reads until a second segment (1.5 s each) has a chunk on disk (flush_s = 1 s), however slow the host
            while replies < 200 or len(files := recording_files(logs)) < 2 or not read_side_by_side(files[-1]):
                for _ in range(20):
                    replies += sync.txRxPacket() == 0
            os.kill(mirror.pid, signal.SIGKILL)
            assert mirror.wait(10) == -signal.SIGKILL
            port.closePort()
        finally:
            mirror.kill()
            mirror.wait()
        files = recording_files(logs)
        with pytest.raises(Exception):  # noqa: B017 (the cut segment: no summary, no footer)
            _raw(files[-1])
        expected = {file: _ours(file) for file in files}
        assert len(expected[files[-1]]) >= 2  # the cut segment holds a real and a sim state at least
        again = start_cli(args, "mirroring")  # the recorder recovers the folder before the bus serves
        stop_cli(again)
        assert f"{files[-1]}: recovered {len(expected[files[-1]])} messages" in again.stderr.read()
    finally:
        stop_cli(real)
    assert recording_files(logs) == files  # no traffic on the second run: no new segment
    for file in files:
        assert sorted((topic, t) for topic, t, _ in _raw(file)) == expected[file]
