"""A servo model's registers by name (the e-manual's control table names), for tests that drive
`DynamixelServo` without a bus."""

from __future__ import annotations

from firmware_models.dynamixel.servo import DynamixelServo


def write(servo: DynamixelServo, name: str, value: int) -> int:
    """Write `value` to register `name`; the status packet's error byte."""
    item = servo.spec.item(name)
    return servo.write(item.address, value.to_bytes(item.size, "little", signed=item.signed)).error


def write_ok(servo: DynamixelServo, name: str, value: int) -> None:
    """Write `value` to register `name`, which the servo must accept."""
    assert write(servo, name, value) == 0, f"{name} = {value} refused"


def read(servo: DynamixelServo, name: str) -> int:
    """Register `name`'s value (the read must succeed)."""
    item = servo.spec.item(name)
    reply = servo.read(item.address, item.size)
    assert reply.error == 0
    return int.from_bytes(reply.params, "little", signed=item.signed)
