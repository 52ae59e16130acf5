"""The servo grid of a Feetech rig (an STS3215 and an SCS0009) and of a Dynamixel Protocol 1.0 rig (an AX-12A and
an MX-64 with its 1.0 firmware) in headless Chromium against a real daemon: the page lists each servo with its
model, a register written from the page is read back over the bus with the vendor's own client (scservo_sdk;
dynamixel-sdk with PacketHandler(1.0)), the servo moves and the plot follows it. Expected values come from the
e-manuals and memory tables the control-table files cite (config/dynamixel/protocol1/, config/feetech/), never from
the code under test. A screenshot of each grid is kept (conftest)."""

from __future__ import annotations

import pytest

from tests.servo_hil.console.conftest import FAMILIES, serial_rig
from tests.servo_hil.console.test_console_browser import goto, open_servo
from tests.servo_hil.daemon import Stream


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def rig(request, tmp_path_factory):
    """A daemon serving one family's bus and console, and the vendor's client on that bus."""
    with serial_rig(tmp_path_factory, request.param) as rig:
        yield rig


@pytest.fixture(scope="module")
def page(browser, rig):
    page = browser.new_page()
    page.goto(rig.url)
    page.wait_for_selector("#link.link-up", timeout=10_000)
    yield page
    page.close()


def _cell(page, item: str, cls: str = "value") -> str:
    return page.locator(f"#register-table tr[data-name='{item}'] .{cls}").inner_text()


def _row(page, item: str) -> list[str]:
    return page.locator(f"#register-table tr[data-name='{item}'] td").all_inner_texts()


def test_the_grid_lists_each_servo_with_its_model(page, rig, shots):
    family = rig.family
    for servo in family.servos:
        open_servo(page, servo.joint)
        page.wait_for_selector(f"#servo-model:text('{servo.title}, ID {servo.id},')")
        assert page.locator("#servo-model").get_attribute("data-kind") == family.protocol
        model_item = "Model_Number" if family.protocol == "feetech" else "Model Number"
        page.wait_for_function(f"document.querySelector(\"#register-table tr[data-name='{model_item}'] .value\")"
                               f".textContent === '{servo.model_number}'")
    open_servo(page, family.servos[0].joint)
    page.wait_for_selector(f"#servo-model:text('{family.servos[0].title}')")
    page.wait_for_selector(f"#register-table tbody[data-joint='{family.servos[0].joint}'] "
                           f"tr[data-name='{family.ram_item}']")
    eeprom, ram = _row(page, family.eeprom_item), _row(page, family.ram_item)
    assert eeprom[3] == "EEPROM" and ram[3] == "RAM", (eeprom, ram)
    assert page.locator(f"#register-table tr[data-name='{family.goal_item}'] input.write").count() == 1
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=shots / f"servo-{family.protocol}.png")


def test_a_goal_written_from_the_page_reaches_the_servo_and_the_plot(page, rig, shots):
    family, servo = rig.family, rig.family.servos[0]
    open_servo(page, servo.joint)
    page.wait_for_selector(f"#servo-model:text('{servo.title}')")
    if page.locator("#torque-toggle").inner_text() == "Torque on":
        page.click("#torque-toggle")
        page.wait_for_selector("#torque-toggle:text('Torque off')")
    target_steps = family.center + 100
    target = 100 * family.rad_per_step
    with Stream(rig.daemon.rig.pub, f"{rig.daemon.rig.name}/{servo.joint}") as stream:
        stream.first()
        box = page.locator(f"#register-table tr[data-name='{family.goal_item}'] input")
        box.fill(str(target_steps))
        box.press("Enter")
        page.wait_for_selector(f"#servo-message.ok:text('{family.goal_item} = {target_steps} written')")
        assert rig.read_word(servo.id, family.goal_address) == target_steps   # the bus serves what the page wrote
        stream.wait_for(servo.joint, lambda p: abs(p["position"] - target) < 0.05, 10.0, "at the page's goal")
    goto(page, "plot")
    key = f"{servo.joint}.position"
    assert page.locator(f"#plot-choices input[value='{key}']").is_checked()   # the first joint's, by default
    page.wait_for_function(f"Math.abs(window.consolePlotLast('{key}') - {target}) < 0.05", timeout=10_000)
    # a controller's write over the bus: the plot follows the servo back to 0 rad
    comm, _error = rig.packets.write2ByteTxRx(rig.port, servo.id, family.goal_address, family.center)
    assert comm == 0
    page.wait_for_function(f"Math.abs(window.consolePlotLast('{key}')) < 0.05", timeout=10_000)
    page.screenshot(path=shots / f"plot-{family.protocol}.png")


@pytest.mark.parametrize("rig", ["dynamixel1"], indirect=True)
def test_protocol1_errors_show_as_the_servo_reports_them(page, rig, shots):
    """Lock = 1 refuses every EEPROM write until a power cycle (MX e-manual §Lock(47)); the refusal's error bit is
    Range Error (bit 3, Protocol 1.0 §Status Packet). Reboot is a power cycle, which frees EEPROM again."""
    servo = rig.family.servos[1]   # the MX-64
    open_servo(page, servo.joint)
    page.wait_for_selector(f"#servo-model:text('{servo.title}')")
    box = page.locator("#register-table tr[data-name='Lock'] input")
    box.fill("1")
    box.press("Enter")
    page.wait_for_selector("#servo-message.ok:text('Lock = 1 written')")
    box = page.locator("#register-table tr[data-name='CW Angle Limit'] input")
    box.fill("100")
    box.press("Enter")
    page.wait_for_selector("#servo-message.error")
    assert page.locator("#servo-message").inner_text() == "servo error 8: Range Error"
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=shots / "servo-dynamixel1-error.png")
    value, comm, error = rig.packets.read2ByteTxRx(rig.port, servo.id, 6)   # CW Angle Limit
    assert (comm, value, error) == (0, 0, 0)   # left alone; a read is no error
    page.click("#reboot")
    page.wait_for_selector("#servo-message.ok:text('reboot done')")
    page.wait_for_function("document.querySelector(\"#register-table tr[data-name='Lock'] .value\")"
                           ".textContent === '0'")
    lock, comm, _ = rig.packets.read1ByteTxRx(rig.port, servo.id, 47)
    assert (comm, lock) == (0, 0)
    box = page.locator("#register-table tr[data-name='CW Angle Limit'] input")
    box.fill("100")
    box.press("Enter")
    page.wait_for_selector("#servo-message.ok:text('CW Angle Limit = 100 written')")
    assert rig.read_word(servo.id, 6) == 100
