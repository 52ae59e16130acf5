"""Dynamixel Protocol 2.0 control tables, the engine: one servo's bytes and the checks of its reads and writes.

`ControlTable` raises `ControlTableError` with the Protocol 2.0 error number a real servo would answer, and
leaves what the firmware does because of a write to the firmware model. The rules where the e-manual is
silent (precedence, all-or-nothing packets, gaps, indirect items): docs/dynamixel.md.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from operator import itemgetter

from firmware_models.dynamixel.errors import ControlTableError, ErrorCode
from firmware_models.dynamixel.model_spec import (
    EEPROM_END,
    Access,
    IndirectBlock,
    Item,
    ModelSpec,
    _span,
    load_model,
    model_names,
    sdk_map,
)
from firmware_models.dynamixel.write_checks import WriteChecks

__all__ = [
    "Access",
    "ControlTable",
    "ControlTableError",
    "ErrorCode",
    "IndirectBlock",
    "Item",
    "ModelSpec",
    "load_model",
    "model_names",
    "sdk_map",
]


class ControlTable:
    """One servo's control table: bytes plus every check the firmware makes on a read or a write.

    `data` is the raw table (little-endian, two's complement), `len(data) == spec.size`. Reads and writes
    follow the rules in the module docstring; `get`/`set` are the firmware's own accessors (no checks). The write
    checks themselves are C (`write_checks.WriteChecks`, shared by every table of the model).
    """

    __slots__ = ("_a_torque", "_addr_ranges", "_checks", "_data_ranges", "_default",
                 "_fast_end", "_gather", "_ind_addr_items", "_is_slot", "_map", "_owner", "_set_info", "_size", "_zero",
                 "data", "spec")

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        size = self._size = spec.size
        self._owner: tuple[Item | None, ...] = spec._at
        default = bytearray(size)
        for it in spec.items:
            default[it.address:it.address + it.size] = it.encode(it.default)
        self._default = bytes(default)
        self.data = bytearray(default)
        self._checks = _write_checks(spec)
        self._a_torque = self._checks.a_torque
        self._set_info = {it.name: (it.address, it.size, (1 << (8 * it.size)) - 1, *_span(it.size, it.signed))
                          for it in spec.items}
        # indirect slots: _is_slot flags Indirect Data bytes, _map holds each one's target address
        self._data_ranges = tuple((b.data, b.data + b.count) for b in spec.indirect)
        self._addr_ranges = tuple((b.address, b.address + 2 * b.count) for b in spec.indirect)
        self._ind_addr_items = frozenset(it.address for it in spec.items
                                         if self._overlaps(self._addr_ranges, it.address, it.address + it.size))
        self._is_slot = bytearray(size)
        self._map = [-1] * size
        self._gather: dict[tuple[int, int], Callable[[bytearray], tuple[int, ...]]] = {}
        # a reserved byte below the RAM area: nothing ever writes it, so it always reads 0
        self._zero = next(a for a in range(EEPROM_END) if self._owner[a] is None)
        for lo, hi in self._data_ranges:
            self._is_slot[lo:hi] = b"\x01" * (hi - lo)
        # reads and writes ending at or before this address touch no Indirect Data byte
        self._fast_end = min((lo for lo, _ in self._data_ranges), default=size)
        self._refresh_map()

    # -- reading ---------------------------------------------------------------------------------

    def read(self, address: int, length: int) -> bytes:
        """`length` bytes from `address` (may span items; gaps read 0; Indirect Data n reads its target byte).

        Raises ControlTableError(ACCESS) if the read starts outside the table or runs past its end.
        """
        end = address + length
        if address < 0 or length < 0 or end > self._size or address >= self._size:
            raise ControlTableError(ErrorCode.ACCESS,
                                    f"read {address}+{length} outside the control table (0..{self._size - 1})")
        if end <= self._fast_end:
            return bytes(self.data[address:end])
        gather = self._gather.get((address, end))
        if gather is None:
            gather = self._gatherer(address, end)
        return bytes(gather(self.data))

    def _gatherer(self, address: int, end: int) -> Callable[[bytearray], tuple[int, ...]]:
        """A C-speed gather of the bytes a read of address..end returns (Indirect Data through its slot).

        Cached per (address, end) until an Indirect Address changes. A slot whose target is outside the
        table or another slot reads the zero byte of a reserved gap.
        """
        mp, is_slot, size = self._map, self._is_slot, self._size
        idx = list(range(address, end))
        for lo, hi in self._data_ranges:
            for a in range(max(lo, address), min(hi, end)):
                t = mp[a]
                idx[a - address] = t if t < size and not is_slot[t] else self._zero
        idx.append(self._zero)  # >= 2 indices, so itemgetter always returns a tuple; the extra byte is cut off
        get = itemgetter(*idx)

        def gather(data: bytearray) -> tuple[int, ...]:
            return get(data)[:-1]

        if len(self._gather) >= 64:
            self._gather.clear()
        self._gather[(address, end)] = gather
        return gather

    def get(self, name: str) -> int:
        """Value of item `name` in register units (signed where the item is)."""
        it = self.spec.item(name)
        if self._is_slot[it.address]:
            return self.read(it.address, 1)[0]
        return int.from_bytes(self.data[it.address:it.address + it.size], "little", signed=it.signed)

    def value_si(self, name: str) -> float | None:
        """Value of item `name` in SI units, or None if it has no SI unit."""
        return self.spec.item(name).to_si(self.get(name))

    # -- firmware-side updates -----------------------------------------------------------------------

    def set(self, name: str, value: int) -> None:
        """Firmware-internal write of item `name`: no access, lock, range or limit checks.

        For Present items, Hardware Error Status, Realtime Tick, Registered Instruction, Bus Watchdog = -1 ...
        `value` must fit the item's width (signed or unsigned); ValueError otherwise.
        """
        try:
            addr, size, mask, lo, hi = self._set_info[name]
        except KeyError:
            raise KeyError(f"{self.spec.title} has no control-table item {name!r}") from None
        if not (lo <= value <= hi or 0 <= value <= mask):
            raise ValueError(f"{name}: {value} does not fit {size} bytes")
        if self._is_slot[addr]:  # through the slot, as a read of it would go
            t = self._map[addr]
            if t < self._size and not self._is_slot[t]:
                self.data[t] = value & 0xFF
            return
        self.data[addr:addr + size] = (value & mask).to_bytes(size, "little")
        if addr in self._ind_addr_items:
            self._refresh_map()

    def reset_ram(self) -> None:
        """Reboot: RAM items (address 64 and up) back to their defaults, EEPROM kept."""
        self.data[EEPROM_END:] = self._default[EEPROM_END:]
        self._refresh_map()

    def factory_reset(self, option: int) -> None:
        """Factory Reset (0x06): 0xFF resets everything, 0x01 all but ID, 0x02 all but ID and Baud Rate.

        The servo reboots afterwards, so RAM is reset too. Any other option: ControlTableError(DATA_RANGE).
        """
        keep: tuple[str, ...]
        if option == 0xFF:
            keep = ()
        elif option == 0x01:
            keep = ("ID",)
        elif option == 0x02:
            keep = ("ID", "Baud Rate")
        else:
            raise ControlTableError(ErrorCode.DATA_RANGE, f"Factory Reset option {option:#04x} is not 0xFF, 0x01, 0x02")
        kept = [(it.address, self.data[it.address:it.address + it.size]) for it in map(self.spec.item, keep)]
        self.data[:] = self._default
        for addr, raw in kept:
            self.data[addr:addr + len(raw)] = raw
        self._refresh_map()

    def mode_defaults(self, mode: int) -> dict[str, int]:
        """Items a switch to Operating Mode `mode` resets, and their new values, in address order.

        Gains and profile (per-mode defaults from the TOML over the item defaults), then Goal PWM / Goal
        Current = PWM Limit / Current Limit (the new PWM Limit if the mode resets it; e-manual
        §Operating Mode(11) note).
        """
        spec = self.spec
        if mode not in spec.operating_modes:
            raise ValueError(f"{spec.title} has no Operating Mode {mode}")
        out = {n: spec.item(n).default for n in spec.mode_reset}
        out.update(spec.mode_overrides.get(mode, {}))
        for target, limit in spec.mode_reset_to_limit.items():
            out[target] = out[limit] if limit in out else self.get(limit)
        return dict(sorted(out.items(), key=lambda kv: spec.item(kv[0]).address))

    # -- writing -------------------------------------------------------------------------------------

    def write(self, address: int, data: bytes | bytearray | memoryview) -> list[str]:
        """Write `data` at `address` as a Write instruction would: check, then apply all or nothing.

        Returns the names of the items whose value changed, in address order (for writes through Indirect
        Data, the target items). Raises ControlTableError with the Protocol 2.0 error number:
        ACCESS (7) read-only item, undefined address, EEPROM while Torque Enable = 1, outside the table;
        DATA_LENGTH (5) the write covers part of an item; DATA_RANGE (4) outside the item's range, choices
        or bit mask, or a Goal item while the Bus Watchdog has tripped; DATA_LIMIT (6) outside the limit
        item's value. Precedence: Access > Length > Range > Limit.
        """
        if not isinstance(data, bytes):
            data = bytes(data)
        changed = self._checks.write_direct(self.data, address, data)   # the common case, all in C
        return changed if changed is not None else self.write_indirect(address, data)

    def write_indirect(self, address: int, data: bytes) -> list[str]:
        """The rest of `write` for a write `WriteChecks.write_direct` left to the table (it returned None: inside
        the table, some data, touching Indirect Data or an Indirect Address)."""
        if self._overlaps(self._data_ranges, address, address + len(data)):
            return self._write_staged(address, data)
        changed = self._checks.write(self.data, address, data)
        if changed:
            self._refresh_map()   # an Indirect Address changed: re-read the slots
        return changed

    @property
    def checks(self) -> WriteChecks:
        """The model's write checks in C (`write_checks.pyx`): the servo's C core writes through them."""
        return self._checks

    def _write_staged(self, address: int, data: bytes) -> list[str]:
        """Write path for packets touching Indirect Data: stage into a copy of the table, check, apply."""
        owner, is_slot, mp, checks = self._owner, self._is_slot, self._map, self._checks
        tmin, tmax = self.spec.indirect_target
        locked = self.data[self._a_torque] != 0
        end = address + len(data)
        new = bytearray(self.data)
        covered: set[int] = set()
        touched: dict[int, Item] = {}
        access: str | None = None
        length: str | None = None
        a = address
        while a < end:
            if is_slot[a]:
                t = mp[a]
                tgt = owner[t] if tmin <= t <= tmax and t < self._size else None
                if tgt is None or checks.access_problem(tgt.address, False) or is_slot[t]:
                    access = access or f"{owner[a].name} -> address {t}: not a writable item"  # type: ignore[union-attr]
                else:
                    new[t] = data[a - address]
                    covered.add(t)
                    touched[tgt.address] = tgt
                a += 1
                continue
            it = owner[a]
            if it is None:
                access = access or f"address {a} is not defined"
                a += 1
                continue
            access = access or checks.access_problem(it.address, locked)
            ia, ie = it.address, it.address + it.size
            lo, hi = max(ia, address), min(ie, end)
            if lo != ia or hi != ie:
                length = length or f"write {address}+{len(data)} covers part of {it.name} ({ia}+{it.size})"
            new[lo:hi] = data[lo - address:hi - address]
            covered.update(range(lo, hi))
            touched[ia] = it
            a = ie
        if access:
            raise ControlTableError(ErrorCode.ACCESS, access)
        for it in touched.values():
            if not covered.issuperset(range(it.address, it.address + it.size)):
                length = length or f"{it.name} ({it.size} bytes) is only partly written through Indirect Data"
        if length:
            raise ControlTableError(ErrorCode.DATA_LENGTH, length)
        old = self.data
        limit_err: str | None = None
        changed: list[str] = []
        for ia in sorted(touched):
            it = touched[ia]
            raw = new[ia:ia + it.size]
            err = checks.check(old, ia, int.from_bytes(raw, "little", signed=it.signed))  # raises Data Range errors
            if err is not None and limit_err is None:
                limit_err = err
            if raw != old[ia:ia + it.size]:
                changed.append(it.name)
        if limit_err is not None:
            raise ControlTableError(ErrorCode.DATA_LIMIT, limit_err)
        old[:] = new
        if any(self._overlaps(self._addr_ranges, ia, ia + touched[ia].size) for ia in touched):
            self._refresh_map()
        return changed

    # -- helpers ---------------------------------------------------------------------------------

    @staticmethod
    def _overlaps(ranges: tuple[tuple[int, int], ...], lo: int, hi: int) -> bool:
        return any(lo < r_hi and hi > r_lo for r_lo, r_hi in ranges)

    def _refresh_map(self) -> None:
        """Re-read every Indirect Address into the slot -> target table."""
        self._gather.clear()
        data, mp = self.data, self._map
        for b in self.spec.indirect:
            for k in range(b.count):
                src = b.address + 2 * k
                mp[b.data + k] = data[src] | (data[src + 1] << 8)

    def indirect_target(self, slot: int) -> int:
        """Address Indirect Data `slot` (1-based) currently points at."""
        for b in self.spec.indirect:
            if b.first <= slot < b.first + b.count:
                return self._map[b.data + slot - b.first]
        raise KeyError(f"{self.spec.title} has no indirect slot {slot}")

    def __repr__(self) -> str:
        return f"ControlTable({self.spec.name}, ID {self.data[self.spec.item('ID').address]})"


@cache
def _write_checks(spec: ModelSpec) -> WriteChecks:
    """One set of C write rules per model (a ModelSpec is immutable and compared by identity)."""
    return WriteChecks(spec)
