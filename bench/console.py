"""`servo-hil bench console`: the loop's lateness with three browsers on the web console against none, one run.

Method: docs/benchmarks.md; figures: docs/performance.md.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.host import STEAL_LIMIT, free_port, loadavg, machine, stop_process
from hil.params.config_file import ConfigError
from servo_hil.daemon.telemetry import StealMeter, percentile_us
from servo_hil.daemon.zmq_io import request

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
BROWSERS = 3
P99_TOLERANCE = 0.10        # the bound: p99 with browsers within 10 % of none
P99_FLOOR_US = 10.0         # … or within this many µs, below which a 1 µs-bin p99 is noise


def _rig(directory: Path, actuators: int) -> tuple[Path, str, int]:
    cmd, port = f"tcp://127.0.0.1:{free_port()}", free_port()
    text = [f'name = "bench-console"\n[loop]\nrate_hz = 1000\n[zmq]\npub = "tcp://127.0.0.1:{free_port()}"\n'
            f'command = "{cmd}"\n[mqtt]\nenabled = false\n[console]\nport = {port}\n'
            f'[[buses]]\nname = "dxl"\nprotocol = "dynamixel"\nport = "{directory / "dxl"}"\nbaud = 1000000\n'
            'fast = true\n']
    for k in range(actuators):
        text.append(f'[[actuators]]\njoint = "j{k}"\ncatalog = "mx64"\nmodel = "m6"\n'
                    f'load = {{ mass = 0.5, length = 0.1 }}\nbus = "dxl"\nid = {k + 1}\n')
    path = directory / "rig.toml"
    path.write_text("".join(text))
    return path, cmd, port


def _histogram(cmd: str) -> np.ndarray:
    hist = request(cmd, {"cmd": "timing"})["timing"]["histogram_us"]
    out = np.zeros(max((int(b) for b in hist), default=0) + 1, dtype=np.int64)
    for b, n in hist.items():
        out[int(b)] = n
    return out


def _window(cmd: str, seconds: float) -> tuple[np.ndarray, float]:
    """The lateness histogram of the next `seconds` [s] and the steal fraction meanwhile."""
    before, steal = _histogram(cmd), StealMeter()
    time.sleep(seconds)
    after = _histogram(cmd)
    before = np.pad(before, (0, len(after) - len(before)))
    return after - before, steal.fraction()


def _summary(hist: np.ndarray, steals: list[float]) -> dict:
    return {"ticks": int(hist.sum()), "lateness_p50_us": percentile_us(hist, 0.5),
            "lateness_p99_us": percentile_us(hist, 0.99), "lateness_p999_us": percentile_us(hist, 0.999),
            "steal_fraction": float(np.mean(steals))}


def _add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n = max(len(a), len(b))
    return np.pad(a, (0, n - len(a))) + np.pad(b, (0, n - len(b)))


def run(seconds: float = 5.0, rounds: int = 3, actuators: int = 4) -> dict:
    """Alternate `rounds` windows of `seconds` [s] without and with three browsers; the JSON result."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise ConfigError("bench console: playwright is not installed: run `make browser`") from None
    if not Path(CHROMIUM).exists():
        raise ConfigError("bench console: no Chromium at /usr/bin/chromium: run `make browser`")
    with tempfile.TemporaryDirectory(prefix="servo-hil-bench-console-") as tmp:
        directory = Path(tmp)
        rig, cmd, port = _rig(directory, actuators)
        proc = subprocess.Popen([sys.executable, "-m", "servo_hil.cli.main", "run", str(rig), "--no-mqtt",
                                 "--log-level", "WARNING"], stdout=subprocess.DEVNULL,
                                stderr=(directory / "daemon.log").open("w"))
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    request(cmd, {"cmd": "status"}, timeout_s=0.5)
                    break
                except TimeoutError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError(f"the daemon did not start: {(directory / 'daemon.log').read_text()}") \
                            from None
            time.sleep(1.0)   # start-up transients out of the first window
            hists = {"none": np.zeros(1, np.int64), "browsers": np.zeros(1, np.int64)}
            steals: dict[str, list[float]] = {"none": [], "browsers": []}
            pushed_frames = []
            with sync_playwright() as pw:
                for _ in range(rounds):
                    h, s = _window(cmd, seconds)
                    hists["none"] = _add(hists["none"], h)
                    steals["none"].append(s)
                    contexts, pages = [], []
                    for k in range(BROWSERS):
                        ctx = pw.chromium.launch_persistent_context(
                            str(directory / f"profile{k}-{time.monotonic_ns()}"), executable_path=CHROMIUM,
                            headless=True, args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 800})
                        page = ctx.new_page()
                        page.goto(f"http://127.0.0.1:{port}/")
                        page.wait_for_selector("#link.link-up")
                        page.click("nav button[data-page=plot]")
                        for j in range(actuators):
                            box = page.locator(f"#plot-choices input[value='j{j}.position']")
                            if not box.is_checked():
                                box.check()
                        contexts.append(ctx)
                        pages.append(page)
                    frames0 = [p.evaluate("window.consoleFrames()") for p in pages]
                    h, s = _window(cmd, seconds)
                    hists["browsers"] = _add(hists["browsers"], h)
                    steals["browsers"].append(s)
                    pushed_frames += [(p.evaluate("window.consoleFrames()") - f0) / seconds
                                      for p, f0 in zip(pages, frames0, strict=True)]
                    for ctx in contexts:
                        ctx.close()
        finally:
            stop_process(proc, 5.0)
    none, browsers = _summary(hists["none"], steals["none"]), _summary(hists["browsers"], steals["browsers"])
    p0, p1 = none["lateness_p99_us"], browsers["lateness_p99_us"]
    within = p0 is not None and p1 is not None and (p1 <= p0 * (1 + P99_TOLERANCE) or p1 - p0 <= P99_FLOOR_US)
    disturbed = max(none["steal_fraction"], browsers["steal_fraction"]) >= STEAL_LIMIT
    return {"benchmark": "console", "machine": machine(), "loadavg": loadavg(), "rate_hz": 1000,
            "actuators": actuators, "browsers": BROWSERS,
            "window_s": seconds, "rounds": rounds, "no_browser": none, "three_browsers": browsers,
            "plot_frames_per_s": {"min": min(pushed_frames), "median": float(np.median(pushed_frames))},
            "p99_ratio": (p1 / p0) if p0 else None, "p99_within_10_percent": bool(within),
            "disturbed_by_steal": bool(disturbed)}
