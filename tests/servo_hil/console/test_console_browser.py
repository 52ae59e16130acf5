"""Every console page clicked through in headless Chromium against a real daemon; effects checked on the ZeroMQ
state stream, the events log and the files the daemon writes. A screenshot of each page is kept (conftest)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from urllib.parse import parse_qs, urlsplit

import pytest
from mcap.reader import make_reader

from tests.servo_hil.console.conftest import console_rig
from tests.servo_hil.daemon import FLAG, Stream, free_port, ok
from tests.servo_hil.daemon.conftest import Launcher


@pytest.fixture(scope="module")
def page(browser, console_daemon):
    """The console's page, loaded and live (its WebSocket connected)."""
    _, url = console_daemon
    page = browser.new_page()
    page.goto(url)
    page.wait_for_selector("#link.link-up", timeout=10_000)
    yield page
    page.close()


def post(url: str, body: dict) -> dict:
    """The JSON answer to a POST of `body` (an error status's body too)."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read())


def goto(page, name: str) -> None:
    page.click(f"nav button[data-page={name}]")
    page.wait_for_selector(f"#page-{name}.active")


def open_servo(page, joint: str) -> None:
    """The servo page, showing `joint`."""
    goto(page, "servo")
    page.select_option("#servo-select", joint)


def test_overview_lists_the_actuators_live(page, console_daemon, shots):
    d, _ = console_daemon
    goto(page, "overview")
    page.wait_for_function("document.querySelector('#act-mx td[data-key=position]').textContent !== ''")
    rows = page.locator("#actuator-table tbody tr")
    assert [rows.nth(k).get_attribute("data-joint") for k in range(rows.count())] == d.rig.joints
    assert "dxl" in page.locator("#bus-table").inner_text() and "1000000" in page.locator("#bus-table").inner_text()
    tick = int(page.locator("#loop-table tr:nth-child(3) td").inner_text())
    page.wait_for_function(f"Number(document.querySelector('#loop-table tr:nth-child(3) td').textContent) > {tick}")
    page.screenshot(path=shots / "overview.png")


def test_goal_position_edit_moves_the_servo(page, console_daemon, shots):
    d, _ = console_daemon
    open_servo(page, "mx")
    page.wait_for_selector("#register-table tr[data-name='Goal Position']")
    torque = page.locator("#torque-toggle")
    if torque.inner_text() == "Torque on":
        torque.click()
        page.wait_for_selector("#torque-toggle:text('Torque off')")
    with Stream(d.rig.pub, d.rig.name + "/mx") as stream:
        stream.first()
        box = page.locator("#register-table tr[data-name='Goal Position'] input")
        box.fill("3072")   # 3072 pulses = 1.5π rad from 0 (4096 pulses per turn, MX-64 e-manual)
        box.press("Enter")
        page.wait_for_selector("#servo-message.ok")
        target = (3072 - 2048) * 2 * 3.141592653589793 / 4096   # output angle 0 rad is 2048 pulses
        moved = stream.wait_for("mx", lambda p: abs(p["position"] - target) < 0.05, 10.0, "mx near its new goal")
    assert abs(moved["position"] - target) < 0.05
    page.wait_for_function("Number(document.querySelector(\"#register-table tr[data-name='Present Position'] "
                           ".value\").textContent) > 3000")
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=shots / "servo.png")


def test_eeprom_write_with_torque_on_shows_the_servos_error(page, console_daemon):
    open_servo(page, "mx")
    page.wait_for_selector("#torque-toggle:text('Torque off')")   # torque is on (previous test)
    box = page.locator("#register-table tr[data-name='Max Position Limit'] input")
    box.fill("3000")
    box.press("Enter")
    page.wait_for_selector("#servo-message.error")
    assert "Access Error" in page.locator("#servo-message").inner_text()   # Protocol 2.0 error 7: EEPROM locked
    assert page.locator("#register-table tr[data-name='Max Position Limit'] .value").inner_text() == "4095"


def test_an_actuator_on_no_bus_has_torque_and_goal_controls(page, console_daemon):
    d, _ = console_daemon
    open_servo(page, "arm")
    page.wait_for_selector("#servo-model:text('no control table')")
    page.wait_for_function("document.querySelector('#goal-label').textContent.startsWith('goal')")  # drawn after
    assert page.locator("#goal-label").inner_text() == "goal [gear·rad]"   # the dcmotor position law's unit
    with Stream(d.rig.pub, d.rig.name + "/arm") as stream:
        stream.first()
        page.fill("#goal-input", "5")
        page.click("#goal-send")
        stream.wait_for("arm", lambda p: p["goal"] == 5.0, 5.0, "arm's goal 5 gear·rad")
        page.click("#torque-toggle")   # on → off
        stream.wait_for("arm", lambda p: p["enable"] == 0, 5.0, "arm's torque off")
    ok(d.rig.cmd, "set_enable", actuator="arm", value=True)
    ok(d.rig.cmd, "set_goal", actuator="arm", value=0.0)


def test_reboot_from_the_page_powers_the_servo_up_again(page, console_daemon):
    d, _ = console_daemon
    open_servo(page, "mx")
    page.wait_for_selector("#torque-toggle:text('Torque off')")   # torque on since the goal test
    with Stream(d.rig.pub, d.rig.name + "/mx") as stream:
        stream.first()
        page.click("#reboot")
        page.wait_for_selector("#servo-message:text('reboot done')")
        stream.wait_for("mx", lambda p: p["enable"] == 0, 5.0, "mx's torque off after the reboot")
    page.wait_for_selector("#torque-toggle:text('Torque on')")
    page.click("#torque-toggle")   # torque on again for the tests that follow
    page.wait_for_selector("#torque-toggle:text('Torque off')")


def test_plot_values_change_as_the_servo_moves(page, console_daemon, shots):
    d, _ = console_daemon
    goto(page, "plot")
    page.click("#plot-choices input[value='mx.position']")
    page.wait_for_function("window.uPlot && document.querySelector('#plot canvas')")
    ok(d.rig.cmd, "set_goal", actuator="mx", value=-1.0)
    # the plot's newest mx.position value follows the servo down to -1 rad
    first = page.evaluate("window.consolePlotLast('mx.position')")
    page.wait_for_function("window.consolePlotLast('mx.position') < -0.9", timeout=10_000)
    assert first is not None and first > -0.9
    page.wait_for_function("window.consolePlotSpan() > 9.5", timeout=15_000)
    assert page.evaluate("window.consolePlotSpan()") <= 10.0 + 0.1   # a 10 s window, older samples dropped
    frames = page.evaluate("window.consoleFrames()")
    time.sleep(1.0)
    rate = page.evaluate("window.consoleFrames()") - frames
    assert rate >= 30, f"{rate} plot frames in 1 s"
    page.click("#plot-pause")
    frozen = page.evaluate("window.consolePlotLast('mx.position')")
    ok(d.rig.cmd, "set_goal", actuator="mx", value=0.5)
    time.sleep(1.0)
    assert page.evaluate("window.consolePlotLast('mx.position')") == frozen   # paused
    page.screenshot(path=shots / "plot.png")
    with page.expect_download() as dl:
        page.click("#plot-csv")
    text = dl.value.path().read_text().splitlines()
    assert text[0].startswith("t,") and len(text) > 100
    with page.expect_download() as dl:
        page.click("#plot-png")
    assert dl.value.path().read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page.click("#plot-pause")


def test_fault_control_raises_the_fault_in_stream_and_log(page, console_daemon, shots):
    d, _ = console_daemon
    goto(page, "faults")
    page.select_option("#fault-actuator", "arm")
    row = page.locator("#fault-table tr[data-fault='encoder_noise']")
    row.locator("input[data-arg='std_rad']").fill("0.01")
    with Stream(d.rig.pub, d.rig.name + "/arm") as stream:
        stream.first()
        row.locator("button.inject").click()
        stream.wait_for("arm", lambda p: p["fault_flags"] & 4, 5.0, "encoder_noise bit in the stream")
    page.wait_for_selector("#fault-message.ok:text('inject_fault encoder_noise sent')")
    page.wait_for_selector("#event-log li[data-type='fault_injected']")
    assert "encoder_noise" in page.locator("#event-log").inner_text()
    page.screenshot(path=shots / "faults.png")


def test_clear_all_faults_clears_each_injected_fault(page, console_daemon):
    """The daemon's clear_fault names one fault: Clear all sends one per fault injected into the actuator, and the
    daemon's own listing and events show each one received."""
    d, _ = console_daemon
    goto(page, "faults")
    page.select_option("#fault-actuator", "arm")
    ok(d.rig.cmd, "inject_fault", actuator="arm", fault="encoder_noise", args={"std_rad": 0.01})
    ok(d.rig.cmd, "inject_fault", actuator="arm", fault="supply_sag", args={"voltage_v": 6.0})
    assert set(ok(d.rig.cmd, "faults")["faults"]["arm"]) == {"encoder_noise", "supply_sag"}
    events = "#event-log li[data-type='fault_clear_requested']"
    before = page.locator(events).count()
    with Stream(d.rig.pub, d.rig.name + "/arm") as stream:
        stream.first()
        page.click("#fault-clear-all")
        page.wait_for_selector("#fault-message.ok:text('cleared on arm: ')")
        cleared = stream.wait_for("arm", lambda p: not p["fault_flags"] & (FLAG["encoder_noise"] | FLAG["supply_sag"]),
                                  5.0, "encoder_noise and supply_sag bits off")
    assert not cleared["fault_flags"] & (FLAG["encoder_noise"] | FLAG["supply_sag"])
    assert sorted(page.locator("#fault-message").inner_text().split(": ", 1)[1].split(", ")) == [
        "encoder_noise", "supply_sag"]
    assert ok(d.rig.cmd, "faults")["faults"]["arm"] == {}
    page.wait_for_function(f"document.querySelectorAll(\"{events}\").length >= {before + 2}")
    requested = page.locator(events).all_inner_texts()   # newest first
    assert sorted(t.split("fault=")[1].strip() for t in requested[:2]) == ['"encoder_noise"', '"supply_sag"']
    page.click("#fault-clear-all")   # nothing left: said so, and no command sent
    page.wait_for_selector("#fault-message.ok:text('no fault injected into arm')")
    time.sleep(0.3)   # an event would reach the page within a push period (1/30 s)
    assert page.locator(events).count() == len(requested)


def test_set_param_from_the_page(page, shots):
    goto(page, "params")
    page.select_option("#param-actuator", "arm")
    row = page.locator("#param-table tr[data-param='resistance']")
    row.locator("input").fill("2.5")
    row.locator("button.set").click()
    page.wait_for_selector("#param-message.ok")
    page.wait_for_function("document.querySelector(\"#param-table tr[data-param='resistance'] td.num\")"
                           ".textContent === '2.500000'")
    row = page.locator("#param-table tr[data-param='resistance']")
    row.locator("input").fill("-1e12")
    row.locator("button.set").click()
    page.wait_for_selector("#param-message.error")
    assert "resistance" in page.locator("#param-message").inner_text()   # out of range: the error names it
    page.screenshot(path=shots / "parameters.png")
    page.locator("#param-table tr[data-param='resistance'] button.reset").click()
    page.wait_for_function("document.querySelector(\"#param-table tr[data-param='resistance'] td.num\")"
                           ".textContent === '2'")   # the rig's resistance = 2.0


def test_recording_started_from_the_page_is_a_readable_mcap(page, shots):
    goto(page, "record")
    page.click("#record-start")
    page.wait_for_selector("#record-state:text('recording to')")
    time.sleep(1.0)
    page.click("#record-stop")
    page.wait_for_selector("#record-state:text('not recording')")
    link = page.locator("#record-table a").first
    with page.expect_download() as dl:
        link.click()
    with dl.value.path().open("rb") as f:
        topics = {channel.topic for _, channel, _ in make_reader(f).iter_messages()}
    assert {"/sim/arm/state", "/sim/mx/state"} <= topics
    foxglove = urlsplit(page.locator("#record-table a.foxglove").first.get_attribute("href"))
    assert (foxglove.netloc, parse_qs(foxglove.query)["ds"]) == ("app.foxglove.dev", ["remote-file"])
    assert parse_qs(foxglove.query)["ds.url"] == [link.evaluate("a => a.href")]   # the console's own file URL
    page.screenshot(path=shots / "recording.png")


def test_bus_monitor_counts_and_decodes_a_controllers_packets(page, console_daemon, shots):
    from dynamixel_sdk import PacketHandler, PortHandler

    d, _ = console_daemon
    goto(page, "bus")
    page.wait_for_selector("#busmon-table tbody tr[data-bus='dxl']")
    port = PortHandler(str(d.rig.path.parent / f"{d.rig.name}-dxl"))   # the controller's side, as a script opens it
    assert port.openPort() and port.setBaudRate(1000000)
    try:
        packets = PacketHandler(2.0)
        for _ in range(20):
            model, result, _err = packets.ping(port, 1)
            assert result == 0 and model == 311   # MX-64(2.0)
        position, result, _err = packets.read4ByteTxRx(port, 1, 132)   # Present Position
        assert result == 0 and 0 < position < 4096   # within one turn around 2048 (0 rad)
    finally:
        port.closePort()
    page.wait_for_function("Number(document.querySelector(\"#busmon-table tr[data-bus='dxl'] .packets\")"
                           ".textContent) >= 21", timeout=5_000)
    page.wait_for_selector("#busmon-last table[data-bus='dxl'] td:text('READ')")
    first = page.locator("#busmon-last table[data-bus='dxl'] tr").nth(1).inner_text()
    assert "READ" in first and "84 00 04 00" in first   # address 132, length 4, little-endian
    page.screenshot(path=shots / "bus.png")


def test_hand_drags_a_torque_off_servo_and_lets_go(page, console_daemon, shots):
    d, _ = console_daemon
    open_servo(page, "mx")
    page.wait_for_selector("#register-table tr[data-name='Goal Position']")
    if page.locator("#torque-toggle").inner_text() == "Torque off":
        page.click("#torque-toggle")   # on → off: the hand moves it freely
        page.wait_for_selector("#torque-toggle:text('Torque on')")
    hand = page.locator("#servo-hand")
    with Stream(d.rig.pub, d.rig.name + "/mx") as stream:
        start = stream.latest("mx")["position"]
        hand.locator(".hand-unit").select_option("rad")
        hand.locator(".hand-target").fill(f"{start + 3.0:.3f}")
        hand.locator(".hand-speed").fill("0.5")   # rad/s: the setpoint takes 6 s to reach the target
        hand.locator(".hand-drag").click()
        page.wait_for_selector("#servo-message.ok:text('hand dragging mx')")
        moved = stream.wait_for("mx", lambda p: p["position"] > start + 0.4, 5.0, "mx dragged 0.4 rad")
        assert moved["enable"] == 0
        page.wait_for_selector("#servo-hand[data-held='1'] .hand-state:text('hand on mx')")
        page.screenshot(path=shots / "servo-hand.png")
        hand.locator(".hand-release").click()
        page.wait_for_selector("#servo-message.ok:text('hand released mx')")
        assert ok(d.rig.cmd, "state", actuator="mx")["state"]["mx"]["hand"] is None
        let_go = stream.latest("mx")["position"]
        time.sleep(1.5)   # held, the setpoint would lead it 0.75 rad further on
        after = stream.latest("mx")["position"]
    assert after < let_go + 0.1   # let go: it stops or falls back under its load, no longer dragged on
    page.wait_for_selector("#servo-hand[data-held='0'] .hand-state:text('no hand on mx')")


def test_bus_monitor_decodes_canopen_frames_and_etherban_requests(browser, tmp_path, shots):
    """A python-canopen controller on the SLCAN bus and a REQ client on the Etherban server, seen on the page; the
    Etherban drive's object dictionary in the grid."""
    import canopen
    import zmq

    from drivers.emulated.etherban import etherban_pb2 as pb

    launcher = Launcher(tmp_path)
    rig, url = console_rig(tmp_path / "buses.toml", "console-buses", joints=("erob",))
    bind = f"tcp://127.0.0.1:{free_port()}"
    text = rig.path.read_text().replace('catalog = "erob80_100"', 'catalog = "erob80_100"\nbus = "can"\nid = 2')
    text = text.replace(f'[[buses]]\nname = "dxl"\nprotocol = "dynamixel"\nport = "{tmp_path / "console-buses-dxl"}"\n'
                        'baud = 1000000\nfast = true\n', "")
    rig.path.write_text(text + f'\n[[buses]]\nname = "can"\nprotocol = "canopen"\nport = "{tmp_path / "can"}"\n'
                        'baud = 1000000\n'
                        f'\n[[buses]]\nname = "ethercat"\nprotocol = "etherban"\nbind = "{bind}"\njoints = ["eb"]\n'
                        '\n[[actuators]]\njoint = "eb"\ncatalog = "erob80_50"\nmodel = "m6"\n')
    launcher.start(rig)
    page = browser.new_page()
    net = canopen.Network()
    sock = zmq.Context.instance().socket(zmq.REQ)
    try:
        page.goto(url)
        page.wait_for_selector("#link.link-up")
        goto(page, "bus")
        page.wait_for_selector("#busmon-table tbody tr[data-bus='ethercat']")
        net.connect(interface="slcan", channel=str(tmp_path / "can"), bitrate=1000000, sleep_after_open=0)
        node = canopen.RemoteNode(2, canopen.ObjectDictionary())
        net.add_node(node)
        assert int.from_bytes(node.sdo.upload(0x1000, 0), "little") & 0xFFFF == 402   # device type: CiA 402
        net.sync.transmit()
        sock.setsockopt(zmq.RCVTIMEO, 5000)
        sock.connect(bind)
        for _ in range(5):
            request = pb.Request()
            request.orders.add(device=0, operation_mode=pb.POSITION, target=0.0)
            sock.send(request.SerializeToString())
            assert len(pb.Response.FromString(sock.recv()).statuses) == 1
        can = "#busmon-last table[data-bus='can']"
        page.wait_for_selector(f"{can} td.service:text('SDO (client)')", timeout=5_000)
        page.wait_for_selector(f"{can} td.service:text('SDO (server)')")
        page.wait_for_selector(f"{can} td.service:text('SYNC')")
        request_row = page.locator(f"{can} tr", has=page.locator("td.service:text('SDO (client)')")).first
        assert request_row.locator("td.cob_id").inner_text() == "0x602"   # 0x600 + node 2
        assert request_row.locator("td.data").inner_text().startswith("40 00 10 00")   # upload 0x1000:00
        page.wait_for_function("Number(document.querySelector(\"#busmon-table tr[data-bus='ethercat'] .packets\")"
                               ".textContent) >= 5")
        page.wait_for_selector("#busmon-last table[data-bus='ethercat'] td.orders:text('0: POSITION 0')")
        page.screenshot(path=shots / "bus-canopen.png")
        # the Etherban drive's object dictionary in the grid: the mode its orders set, writes as SDO downloads
        table = json.loads(urllib.request.urlopen(f"{url}api/servo/eb", timeout=10).read())
        rows = {r["address"]: r for r in table["rows"]}
        assert table["kind"] == "erob" and rows["0x6061:00"]["value"] == 8   # POSITION orders: CSP
        reply = post(f"{url}api/servo/eb/write", {"name": rows["0x6041:00"]["name"], "value": 0})
        assert reply["error"] == 0x06010002   # Attempt to write a read only object
        reply = post(f"{url}api/servo/eb/reboot", {})
        assert not reply["ok"] and "no NMT" in reply["error"] and "\n" not in reply["error"]
    finally:
        sock.close(0)
        net.disconnect()
        page.close()
        launcher.finish()
