"""EEPROM that survives a restart: a bus's state file keeps the EEPROM items of its servos, as a servo's flash
keeps what a client wrote there, and gives them back at the next start. Any family's firmware model uses it; the
format and how to reset it are in docs/configuration.md ("EEPROM state file")."""

from __future__ import annotations

import os
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import tomli_w

FORMAT = 1   # the file's `format`: a file of another format is refused, never guessed at


class EepromFileError(ValueError):
    """A state file that cannot be used as it is: the message is one line naming the file and the mend."""


@dataclass(frozen=True)
class SavedServo:
    """One servo's EEPROM as saved: the model it was written by and its items, by the control table's names."""

    model_number: int
    items: dict[str, int]


class EepromFile:
    """The EEPROM state file of bus `bus` of rig `rig`: servos are keyed by joint name, which an ID change leaves."""

    def __init__(self, path: Path | str, rig: str, bus: str):
        self.path = Path(path)
        self.rig = rig
        self.bus = bus

    def _refuse(self, why: str) -> EepromFileError:
        return EepromFileError(f"EEPROM state file {self.path}: {why}; delete it to start from the rig's values")

    def load(self) -> dict[str, SavedServo]:
        """The servos saved in the file, or none when it does not exist yet."""
        try:
            data = tomllib.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as exc:
            raise self._refuse(f"cannot be read ({exc.__class__.__name__}: {exc})") from None
        except tomllib.TOMLDecodeError as exc:
            raise self._refuse(f"damaged, not TOML ({exc})") from None
        if data.get("format") != FORMAT:
            raise self._refuse(f"format {data.get('format')!r}, this servo-hil reads format {FORMAT}")
        if (data.get("rig"), data.get("bus")) != (self.rig, self.bus):
            raise self._refuse(f"written for rig {data.get('rig')!r} bus {data.get('bus')!r}, "
                               f"not rig {self.rig!r} bus {self.bus!r}")
        servos = data.get("servos", {})
        if not isinstance(servos, dict):
            raise self._refuse("damaged: `servos` is not a table")
        out = {}
        for joint, saved in servos.items():
            number, items = (saved.get("model_number"), saved.get("eeprom")) if isinstance(saved, dict) else (0, 0)
            if not isinstance(number, int) or not isinstance(items, dict) or not all(
                    isinstance(v, int) and not isinstance(v, bool) for v in items.values()):
                raise self._refuse(f"damaged: servos.{joint} needs model_number and an eeprom table of integers")
            out[joint] = SavedServo(number, dict(items))
        return out

    def save(self, servos: Mapping[str, SavedServo]) -> None:
        """Write the file atomically (a temporary file beside it, flushed, then renamed over it): a kill leaves
        the old file or the new one, never half of one."""
        doc = {"format": FORMAT, "rig": self.rig, "bus": self.bus,
               "servos": {joint: {"model_number": s.model_number, "eeprom": dict(s.items)}
                          for joint, s in servos.items()}}
        text = ("# EEPROM of the servos of one servo-hil bus, as clients wrote it: read at start, rewritten after "
                "each EEPROM write.\n# Delete this file to start from the rig's values.\n" + tomli_w.dumps(doc))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def check_servo(self, joint: str, saved: SavedServo, model_number: int, names: set[str]) -> None:
        """Refuse a saved servo that the rig's servo of that joint cannot take: another model, or unknown items."""
        if saved.model_number != model_number:
            raise self._refuse(f"servos.{joint} was written by model {saved.model_number}, the rig's servo is "
                               f"model {model_number}")
        unknown = sorted(set(saved.items) - names)
        if unknown:
            raise self._refuse(f"servos.{joint}: no EEPROM item {unknown[0]!r} in model {model_number}")
