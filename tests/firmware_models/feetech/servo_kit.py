"""An STS3215 firmware model on an offline kernel (the catalog's sts3215 with bam's m1 friction and a pendulum), and
register helpers in the servo's own byte order, for the Feetech firmware tests."""

from __future__ import annotations

from firmware_models.feetech.control_table import decode_sign, encode_sign, load_model
from firmware_models.feetech.servo import FeetechServo
from hil.joint import KernelJoint
from hil.kernel import Kernel
from hil.params.catalog import entry
from servo_hil.rig import EncoderConfig, FaultConfig, LoadConfig, kernel_params

DT = 1e-3


def sts_servo(registers: dict[str, int] | None = None, load: LoadConfig | None = None) -> FeetechServo:
    p = kernel_params(entry("sts3215").actuator("m1"), load or LoadConfig(mass=0.1, length=0.1), EncoderConfig(),
                      FaultConfig(), "bam")
    kernel = Kernel(1, DT)
    kernel.set_params(0, p)
    return FeetechServo(load_model("sts3215"), KernelJoint(kernel), {"ID": 1, **(registers or {})})


def write(servo: FeetechServo, address: int, value: int, size: int, sign_bit: int | None = None) -> int:
    """WRITE of `value` (sign-magnitude at `sign_bit`), little-endian as on STS; the status error byte."""
    error, params = servo.write(address, encode_sign(value, sign_bit).to_bytes(size, "little"))
    assert params == b""
    return error


def read(servo: FeetechServo, address: int, size: int, sign_bit: int | None = None) -> int:
    reply = servo.read(address, size)
    assert reply is not None, f"no reply to READ {address}+{size}"
    return decode_sign(int.from_bytes(reply[1], "little"), sign_bit)


def run(servo: FeetechServo, seconds: float) -> None:
    """Step the offline kernel for `seconds`, the firmware's housekeeping every 10 ms as the bus thread runs it."""
    joint = servo.joint
    for _ in range(round(seconds / 0.01)):
        joint.step(10)
        servo.housekeeping()
