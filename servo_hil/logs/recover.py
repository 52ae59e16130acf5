"""Recovery of MCAP files cut short by a kill: each one rewritten as a complete, indexed MCAP.

Every complete record up to the cut is written again through mcap's `Writer` into a temporary file beside
the original, checked with mcap's indexed reader and renamed over it, so the path always holds the torn file
or the complete one (docs/recording.md, Recovering a cut segment).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from mcap.exceptions import EndOfFile
from mcap.reader import make_reader
from mcap.records import Attachment, Channel, Chunk, DataEnd, Footer, Header, McapRecord, Message, Metadata, Schema
from mcap.stream_reader import StreamReader, breakup_chunk
from mcap.writer import LIBRARY_IDENTIFIER, CompressionType, Writer

MAGIC = b"\x89MCAP0\r\n"  # the MCAP specification's "Magic", at the start and at the end of a file
_COMPRESSION = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "": CompressionType.NONE}


class DamagedMcap(ValueError):
    """An MCAP file that is damaged before its end (not only cut short), or that is not MCAP at all."""


@dataclass(frozen=True)
class Recovery:
    """What `recover` did to one file.

    status: "intact" (complete already, unchanged), "recovered" (rewritten as a complete MCAP),
    "in use" (a running recorder holds it: left alone) or "unreadable" (not MCAP, or damaged before
    its cut: left alone; `reason` says why).
    messages: messages in the file now (None when unknown: in use, unreadable, or no statistics).
    dropped_bytes: size of the torn tail that held no complete record [bytes].
    """

    path: Path
    status: Literal["intact", "recovered", "in use", "unreadable"]
    messages: int | None = None
    dropped_bytes: int = 0
    reason: str = ""

    def __str__(self) -> str:
        if self.status == "recovered":
            cut = f" (dropped the {self.dropped_bytes} bytes of the record the kill cut)" if self.dropped_bytes else ""
            return f"{self.path}: recovered {self.messages} messages into a complete MCAP{cut}"
        if self.status == "intact":
            count = "" if self.messages is None else f", {self.messages} messages"
            return f"{self.path}: intact{count}; unchanged"
        if self.status == "in use":
            return f"{self.path}: a running recorder is writing it; left alone"
        return f"{self.path}: {self.reason}; left alone"


class _WholeReads:
    """A file whose read(n) raises EndOfFile instead of returning fewer than n bytes.

    mcap's stream reader returns a record cut by the end of the file with its data short; through
    this, such a record fails where it is cut instead.
    """

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f

    def read(self, n: int) -> bytes:
        data = self._f.read(n)
        if len(data) < n:
            raise EndOfFile()
        return data


def is_complete(f: IO[bytes]) -> bool:
    """Whether `f` (an MCAP file, any position) ends with the magic after a footer mcap can read.

    False for a file cut short by a kill, and for one whose footer or summary is unreadable (both
    are read linearly by `torn_records`). `f` is left at its start.
    """
    size = f.seek(0, os.SEEK_END)
    complete = False
    if size >= 2 * len(MAGIC):
        f.seek(size - len(MAGIC))
        if f.read(len(MAGIC)) == MAGIC:
            f.seek(0)
            try:
                make_reader(f).get_summary()
                complete = True
            except Exception:  # a footer or summary mcap cannot parse: not complete
                complete = False
    f.seek(0)
    return complete


def check_magic(f: IO[bytes], name: str | Path) -> None:
    """Raise DamagedMcap unless `f` starts with the MCAP magic or with a prefix of it (a file killed in
    its first bytes). `f` is left at its start."""
    f.seek(0)
    head = f.read(len(MAGIC))
    f.seek(0)
    if head != MAGIC and not MAGIC.startswith(head):
        raise DamagedMcap(f"{name}: not an MCAP file (it does not start with the MCAP magic)")


def torn_records(f: IO[bytes]) -> Iterator[tuple[bool, list[McapRecord]]]:
    """The data-section records of an MCAP file without a usable footer, in file order, up to its cut.

    f: an MCAP file opened for reading, at its start. Yields (from_chunk, records): a chunk's records
    (schemas, channels, messages) at once, decompressed and CRC-checked whole, so that a cut chunk
    gives nothing rather than a part of it; any other record alone. Stops at the data section's end
    (the summary after it is rebuilt, not copied) or at the cut. An error with bytes of the file still
    after the read position is damage, raised as DamagedMcap; an error at the end of the file is the
    cut. After each yield, f.tell() is the end of the records yielded so far.
    """
    size = os.fstat(f.fileno()).st_size
    try:
        for record in StreamReader(_WholeReads(f), emit_chunks=True).records:
            if isinstance(record, Chunk):
                yield True, breakup_chunk(record, validate_crc=True)
            elif isinstance(record, DataEnd | Footer):
                return
            else:
                yield False, [record]
    except Exception as exc:  # the cut may fail in struct, the decompressor, a CRC or UTF-8 decoding
        if f.tell() < size:
            raise DamagedMcap(f"{getattr(f, 'name', 'MCAP file')}: damaged before byte {f.tell()} of {size} "
                              f"({type(exc).__name__}: {exc})") from None


def _first_compression(f: IO[bytes]) -> CompressionType:
    """The compression of the file's first chunk (zstd when it has none), `f` left at its start."""
    compression = CompressionType.ZSTD
    try:
        for record in StreamReader(_WholeReads(f), emit_chunks=True).records:
            if isinstance(record, Chunk):
                compression = _COMPRESSION.get(record.compression, CompressionType.ZSTD)
                break
    except Exception:  # a file cut before its first chunk
        pass
    f.seek(0)
    return compression


def _copy(f: IO[bytes], out: IO[bytes]) -> tuple[int, int]:
    """Write the complete records of torn file `f` to `out` as a complete MCAP: (messages, bytes kept).

    Chunks end where the original's did (the recorder closes one every flush_s), so the rewritten file
    is chunked as the finished file would have been. Schema and channel ids are renumbered by the writer
    in order of appearance, which is the recorder's own numbering.
    """
    writer = Writer(out, compression=_first_compression(f))
    started = False
    schemas: dict[int, int] = {}  # id in f → id in out
    channels: dict[int, int] = {}
    messages, kept = 0, 0
    name = getattr(f, "name", "MCAP file")
    for from_chunk, records in torn_records(f):
        for r in records:
            if not started:
                header = r if isinstance(r, Header) else Header(profile="", library="")
                writer.start(header.profile, f"{header.library}; recovered with {LIBRARY_IDENTIFIER}".lstrip("; "))
                started = True
            if isinstance(r, Schema) and r.id not in schemas:
                schemas[r.id] = writer.register_schema(r.name, r.encoding, r.data)
            elif isinstance(r, Channel) and r.id not in channels:
                if r.schema_id and r.schema_id not in schemas:
                    raise DamagedMcap(f"{name}: channel {r.topic!r} refers to schema {r.schema_id}, never defined")
                channels[r.id] = writer.register_channel(r.topic, r.message_encoding, schemas.get(r.schema_id, 0),
                                                         r.metadata)
            elif isinstance(r, Message):
                if r.channel_id not in channels:
                    raise DamagedMcap(f"{name}: a message on channel {r.channel_id}, never defined")
                writer.add_message(channels[r.channel_id], r.log_time, r.data, r.publish_time, r.sequence)
                messages += 1
            elif isinstance(r, Metadata):
                writer.add_metadata(r.name, r.metadata)
            elif isinstance(r, Attachment):
                writer.add_attachment(r.create_time, r.log_time, r.name, r.media_type, r.data)
            # message indexes, repeated schemas/channels: rebuilt by the writer
        if from_chunk:
            writer.flush()
        kept = f.tell()
    if not started:  # cut inside the magic or the header: an empty recording
        writer.start("", f"recovered with {LIBRARY_IDENTIFIER}")
    writer.finish()
    return messages, kept


def _rewrite(path: Path, f: IO[bytes]) -> Recovery:
    size = os.fstat(f.fileno()).st_size
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            messages, kept = _copy(f, out)
            out.flush()
            os.fsync(out.fileno())  # on disk before it replaces the original
        with open(tmp, "rb") as check:  # the index-based reader viewers use must find every message
            summary = make_reader(check).get_summary()
        counted = summary.statistics.message_count if summary and summary.statistics else None
        if counted != messages:
            raise DamagedMcap(f"{path}: the rewritten file holds {counted} messages, not {messages}")
        shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself reaches the disk
    finally:
        os.close(directory)
    return Recovery(path, "recovered", messages, size - kept)


def recover_file(path: str | Path) -> Recovery:
    """Make one MCAP file openable by index-based readers; see the module docstring.

    A complete file is left unchanged ("intact"); a file a running recorder holds (its exclusive
    flock) is left alone ("in use"); a file that is not MCAP or is damaged before its cut is left
    alone ("unreadable"). While it works, the file is flocked, so two recoveries never interleave.
    """
    path = Path(path)
    with open(path, "rb") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return Recovery(path, "in use")
        if not os.path.samestat(os.fstat(f.fileno()), os.stat(path)):  # another recovery replaced it meanwhile
            return recover_file(path)
        try:
            check_magic(f, path)
            if is_complete(f):
                summary = make_reader(f).get_summary()
                count = summary.statistics.message_count if summary and summary.statistics else None
                return Recovery(path, "intact", count)
            return _rewrite(path, f)
        except DamagedMcap as exc:
            return Recovery(path, "unreadable", reason=str(exc).removeprefix(f"{path}: "))


def recover(path: str | Path) -> list[Recovery]:
    """Recover an MCAP file, or every *.mcap file of a folder (see recover_file); one Recovery each."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(2, "no such file or folder", str(path))
    files = sorted(path.glob("*.mcap")) if path.is_dir() else [path]
    return [recover_file(file) for file in files]
