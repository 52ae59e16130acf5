"""Fixtures: a real daemon with `[console]` (an `arm` and an MX-64 on a Dynamixel bus) and headless Chromium.

Browser tests need Debian's Chromium and Playwright for Python (`make browser` installs both); without them they
skip with that hint. Screenshots go to $SERVO_HIL_SCREENSHOTS, else a folder under pytest's tmp dir.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.servo_hil.daemon import free_port
from tests.servo_hil.daemon.conftest import Launcher, write_rig

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
MX_ON_BUS = 'bus = "dxl"\nid = 1\n'


def console_rig(path: Path, name: str, console: str = "", joints=("arm", "mx"), port: int | None = None) -> tuple:
    """A rig with the MX-64 on a fast Dynamixel bus and `[console]` on `port` (default: a free one), more
    `[console]` keys in `console`; (RigFile, console URL)."""
    port = port or free_port()
    extra = (f'[console]\nport = {port}\n{console}\n'
             f'[[buses]]\nname = "dxl"\nprotocol = "dynamixel"\nport = "{path.parent / (name + "-dxl")}"\n'
             'baud = 1000000\nfast = true\n')
    rig = write_rig(path, name, joints=joints, extra=extra, actuator_extra={"mx": MX_ON_BUS})
    return rig, f"http://127.0.0.1:{port}/"


@pytest.fixture(scope="module")
def console_daemon(tmp_path_factory, request):
    """(DaemonProcess, console URL) of one daemon for the module."""
    launcher = Launcher(tmp_path_factory.mktemp("console"))
    name = "console-" + request.module.__name__.rsplit("_", 1)[-1]
    rig, url = console_rig(launcher.dir / "rig.toml", name)
    yield launcher.start(rig), url
    launcher.finish()


@pytest.fixture(scope="session")
def shots(tmp_path_factory) -> Path:
    """Where screenshots are kept: $SERVO_HIL_SCREENSHOTS, else `screenshots` under pytest's tmp dir."""
    path = Path(os.environ.get("SERVO_HIL_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless Debian Chromium driven by Playwright (a fresh, empty profile)."""
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        pytest.skip("no Chromium at /usr/bin/chromium: run `make browser` (apt chromium + playwright)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed: run `make browser` (apt chromium + playwright)")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 800}, accept_downloads=True)
        yield context
        context.close()
