"""The console's Robot page: a robot rig's bodies drawn in 3D from the poses stream, moving as the arm moves."""

from __future__ import annotations

import time
from pathlib import Path

from tests.servo_hil.daemon import free_port, ok
from tests.servo_hil.daemon.conftest import Launcher, RigFile

ARM_2R = Path(__file__).resolve().parents[3] / "config" / "robots" / "arm_2r.xml"


def test_robot_page_draws_the_bodies_where_the_poses_put_them(tmp_path, browser, shots):
    launcher = Launcher(tmp_path)
    port, pub, cmd = free_port(), f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    path = tmp_path / "arm.toml"
    path.write_text(f'name = "console-robot"\n[loop]\nrate_hz = 1000\nmlockall = false\n[robot]\nmjcf = "{ARM_2R}"\n'
                    f'[zmq]\npub = "{pub}"\ncommand = "{cmd}"\n[mqtt]\nenabled = false\n[console]\nport = {port}\n'
                    '[[actuators]]\njoint = "shoulder"\ncatalog = "mx106"\nmodel = "m4"\n'
                    '[[actuators]]\njoint = "elbow"\ncatalog = "mx64"\nmodel = "m4"\n')
    launcher.start(RigFile(path, "console-robot", pub, cmd, None, ["shoulder", "elbow"]))
    page = browser.new_page()
    try:
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector("#link.link-up")
        page.click("#robot-tab")
        page.wait_for_selector("#robot-info:text('arm_2r.xml: 2 bodies')")
        page.wait_for_function("window.consoleRobot.position('forearm') !== null && "
                               "window.consoleRobot.position('forearm')[2] !== 0")
        x, y, z = page.evaluate("window.consoleRobot.position('forearm')")
        assert abs(x) < 1e-6 and abs(y) < 0.02 and abs(z - 0.3) < 0.02   # hanging: 0.5 m − 0.2 m below the shoulder
        ok(cmd, "set_goal", actuator="shoulder", value=1.5707963)   # swing the upper arm a quarter turn about x
        page.wait_for_function("Math.abs(window.consoleRobot.position('forearm')[2] - 0.5) < 0.03", timeout=10_000)
        frames = page.evaluate("window.consoleRobot.frames()")
        page.wait_for_function(f"window.consoleRobot.frames() > {frames + 10}")   # drawn continuously
        page.screenshot(path=shots / "robot.png")
        hand = page.locator("#robot-hand")   # drag the torque-off elbow by hand from the Robot page
        ok(cmd, "set_enable", actuator="elbow", value=False)
        hand.locator(".hand-joint").select_option("elbow")
        hand.locator(".hand-target").fill("60")   # degrees
        hand.locator(".hand-speed").fill("2")
        hand.locator(".hand-drag").click()
        page.wait_for_selector("#robot-message.ok:text('hand dragging elbow')")
        page.wait_for_selector("#robot-hand[data-held='1'] .hand-state:text('hand on elbow')")
        assert abs(ok(cmd, "state", actuator="elbow")["state"]["elbow"]["hand"]["path"][-1] - 1.0472) < 1e-3
        deadline = time.monotonic() + 10.0   # the forearm's frame is at the elbow: the angle shows the drag
        while ok(cmd, "state", actuator="elbow")["state"]["elbow"]["position"] < 0.5:
            assert time.monotonic() < deadline, "the hand did not drag the elbow past 0.5 rad"
            time.sleep(0.05)
        hand.locator(".hand-release").click()
        page.wait_for_selector("#robot-hand[data-held='0'] .hand-state:text('no hand on elbow')")
    finally:
        page.close()
        launcher.finish()
