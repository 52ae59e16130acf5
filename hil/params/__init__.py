"""Parameter sets: `<dcmotor>` attributes, bam identified sets, firmware laws and the actuator catalog."""

from hil.params.actuator import ActuatorSpec
from hil.params.bam import BamParams, load_bam_params
from hil.params.config_file import ConfigError
from hil.params.dcmotor import DCMotor, MotorConstants
from hil.params.mjcf import load_dcmotor

__all__ = ["ActuatorSpec", "BamParams", "ConfigError", "DCMotor", "MotorConstants", "load_bam_params",
           "load_dcmotor"]
