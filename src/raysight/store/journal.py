"""The ingest journal: POST bodies made durable (appended and fsynced) before they are acknowledged.

Ray waits for each answer before it sends a node's next batch, so answering only after DuckDB has folded a batch
ties Ray's export rate to the store's, and a local cluster that shuts down right after a burst takes what it had
not yet sent with it. The journal answers as soon as the bytes are on disk; the writer folds journalled batches in
large groups and records, in the same transaction, the last sequence number folded, so a restart replays exactly
what was not folded yet.

Files ``journal/<first seq>.log``; each record is a header (a sync marker, the payload's length, the sequence
number, the payload's CRC-32 and the header's own) and a payload (``[label, run_id, events]`` as JSON, the body's kind
appended when it is not Ray's events, a newline, the body). What can go wrong, and what happens:

- An append fails (disk full, I/O error): nothing is acknowledged, and the segment is cut back to its last whole
  record before anything else is appended. Should even that fail, the segment is closed and the next append opens
  ``{next seq}.log``: a new segment, or, when the failed append was its segment's first, the same one, emptied (a
  segment is named by its first record, so it holds nothing else). What a failed append left at an older segment's
  end is a torn record, cut when the journal opens, or whole records never acknowledged, replayed as the duplicates
  of what Ray resent that they are.
- A record at a segment's end is torn (a crash mid-append, never acknowledged): it is kept aside and cut when the
  journal opens.
- A record is corrupt (a flipped byte): recovery finds the next record by its marker, whose 0xFF byte never occurs
  in a payload (UTF-8 JSON), and replays it and all after; the bad bytes are kept aside, logged and counted.

What is kept aside lies in ``journal/quarantine/<segment>-<offset>.corrupt`` (or ``.torn``) for inspection.
"""

from __future__ import annotations

import logging
import os
import struct
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

log = logging.getLogger("raysight.journal")

# A record's kind names the signal whose body it holds (``signals/registry.py``); a Ray aggregator's says none (the
# journal held nothing else before). No payload holds a 0xFF byte: it is JSON.
RAY_EVENTS = "ray"
MARKER = b"\xff\xfeRJ"
HEADER = struct.Struct("<4sIQII")  # marker, payload length, seq, payload CRC-32, CRC-32 of the fields before it
LEGACY_HEADER = struct.Struct("<IIQ")  # segments of raysight before sync markers: payload length, CRC-32, seq
SEGMENT_BYTES = 64 * 1024 * 1024
QUARANTINE = "quarantine"


@dataclass(frozen=True, slots=True)
class Record:
    seq: int
    label: str | None
    run_id: str | None
    body: bytes
    events: int = 0  # elements of the body's JSON array (Ray's events), or lines (an agent's logs)
    kind: str = RAY_EVENTS  # the signal whose body it is
    at: float = field(default_factory=time.monotonic, compare=False)  # when it was journalled (or replayed)


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes ``[start, end)`` of a segment that hold no whole record: a torn append at its end, or corruption."""

    start: int
    end: int
    torn: bool


Batch = tuple[str | None, str | None, bytes, int, str]  # label, run ID, body, events, kind


def encode(record: Record) -> bytes:
    meta = [record.label, record.run_id, record.events] + ([record.kind] if record.kind != RAY_EVENTS else [])
    payload = orjson.dumps(meta) + b"\n" + record.body
    fields = (MARKER, len(payload), record.seq, zlib.crc32(payload))
    return HEADER.pack(*fields, zlib.crc32(HEADER.pack(*fields, 0)[:-4])) + payload


def _header(data: bytes, offset: int) -> tuple[int, int, int] | None:
    """(payload length, seq, payload CRC) of a well-formed header at ``offset``, else None."""
    if offset + HEADER.size > len(data):
        return None
    marker, length, seq, crc, header_crc = HEADER.unpack_from(data, offset)
    if marker != MARKER or zlib.crc32(data[offset : offset + HEADER.size - 4]) != header_crc:
        return None
    return length, seq, crc


def decode(data: bytes, offset: int) -> tuple[Record, int] | None:
    """The whole, intact record at ``offset`` and the offset after it, else None."""
    header = _header(data, offset)
    if header is None:
        return None
    length, seq, crc = header
    return _record(data, offset + HEADER.size, length, seq, crc)


def _decode_legacy(data: bytes, offset: int) -> tuple[Record, int] | None:
    if offset + LEGACY_HEADER.size > len(data):
        return None
    length, crc, seq = LEGACY_HEADER.unpack_from(data, offset)
    return _record(data, offset + LEGACY_HEADER.size, length, seq, crc)


def _record(data: bytes, start: int, length: int, seq: int, crc: int) -> tuple[Record, int] | None:
    """The record whose payload is ``data[start:start + length]`` if it is whole and intact, and where it ends."""
    end = start + length
    payload = data[start:end]
    if end > len(data) or zlib.crc32(payload) != crc:
        return None
    meta, _, body = payload.partition(b"\n")
    label, run_id, *rest = orjson.loads(meta)  # a legacy record does not say its events, a Ray batch not its kind
    return Record(seq, label, run_id, body, *rest), end


def scan(data: bytes) -> Iterator[Record | Damage]:
    """A segment's records in order, and between them what is damaged: never a record after damage is lost."""
    if not data.startswith(MARKER) and _decode_legacy(data, 0) is not None:
        yield from _scan_legacy(data)
        return
    offset = 0
    while offset < len(data):
        found = decode(data, offset)
        if found is not None:
            yield found[0]
            offset = found[1]
            continue
        resume = _next_record(data, offset + 1)
        yield Damage(offset, resume, torn=resume == len(data) and _incomplete(data, offset))
        offset = resume


def _scan_legacy(data: bytes) -> Iterator[Record | Damage]:
    """A segment written before sync markers (replayed after an upgrade): its records up to the first bad one."""
    offset = 0
    while (found := _decode_legacy(data, offset)) is not None:
        yield found[0]
        offset = found[1]
    if offset < len(data):
        yield Damage(offset, len(data), torn=True)


def _next_record(data: bytes, offset: int) -> int:
    """Where the next whole record starts at or after ``offset`` (the end of ``data`` when none does)."""
    while (offset := data.find(MARKER, offset)) >= 0:
        if decode(data, offset) is not None:
            return offset
        offset += 1
    return len(data)


def _incomplete(data: bytes, offset: int) -> bool:
    """The segment ends inside the record at ``offset``: an append that never finished."""
    header = _header(data, offset)
    if header is None:
        return len(data) - offset < HEADER.size
    return offset + HEADER.size + header[0] > len(data)


class Journal:
    """Append-only segments in ``directory``; one thread appends, another releases what has been folded."""

    def __init__(self, directory: Path, folded: int) -> None:
        self.directory = directory
        self.quarantine = directory / QUARANTINE
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.quarantine.mkdir(mode=0o700, exist_ok=True)
        self.next_seq = folded + 1
        self._fd: int | None = None
        self._size = 0  # bytes of the open segment, up to the end of its last whole record
        for _, path in self._segments():
            self.next_seq = max(self.next_seq, self._recover(path) + 1)

    def _segments(self) -> list[tuple[int, Path]]:
        return sorted((int(p.stem), p) for p in self.directory.glob("*.log"))

    def _recover(self, path: Path) -> int:
        """Keep aside what is damaged in segment ``path`` and cut a torn tail; returns its last sequence number."""
        data, last = path.read_bytes(), 0
        for item in scan(data):
            if isinstance(item, Record):
                last = item.seq
                continue
            kind = "torn" if item.torn else "corrupt"
            kept = self.quarantine / f"{path.stem}-{item.start:012d}.{kind}"
            if not kept.exists():
                _write_new(kept, data[item.start : item.end])
                what = "a torn append, never acknowledged, cut" if item.torn else "corrupt, skipped (not what follows)"
                level, size = (logging.WARNING if item.torn else logging.ERROR), item.end - item.start
                log.log(level, "journal %s: %d bytes at %d %s; kept in %s", path.name, size, item.start, what, kept)
            if item.torn:
                os.truncate(path, item.start)
        return last

    def keep_aside(self, name: str, data: bytes) -> Path:
        """Keep ``data`` durably in the quarantine folder as ``name`` (a batch too big to keep in the store); OSError
        when it cannot."""
        path = self.quarantine / name
        path.unlink(missing_ok=True)  # (left by a try that failed midway)
        _write_durably(path, data)
        return path

    def damage(self) -> dict[str, int]:
        """What recovery has kept aside in :attr:`quarantine`: corrupt stretches skipped, torn appends cut."""
        found = {kind: [p.stat().st_size for p in self.quarantine.glob(f"*.{kind}")] for kind in ("corrupt", "torn")}
        return {"corrupt": len(found["corrupt"]), "corrupt_bytes": sum(found["corrupt"]), "torn": len(found["torn"])}

    def append(self, batches: Sequence[Batch]) -> list[Record]:
        """Write ``(label, run_id, body, events, kind)`` batches as records and fsync once; returns them, numbered.

        Written at the segment's known end, not the file's: what a failed append left past it is never built on."""
        if self._fd is None or self._size > SEGMENT_BYTES:
            self._open_segment()
        assert self._fd is not None
        records = [Record(self.next_seq + i, *batch) for i, batch in enumerate(batches)]
        data = b"".join(encode(r) for r in records)
        try:
            _write_all(self._fd, data, self._size)
            os.fsync(self._fd)
        except OSError:
            self._roll_back()
            raise
        self._size += len(data)
        self.next_seq += len(records)
        return records

    def _open_segment(self) -> None:
        """Open segment ``{next_seq}.log``, emptied: a file of that name holds no whole record (else ``next_seq``
        would be past it), only what a failed append left (or what recovery has already kept aside)."""
        self.close()
        self._fd = os.open(self.directory / f"{self.next_seq:016d}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self._size = 0

    def _roll_back(self) -> None:
        """Cut a failed append off the segment and close it (after an I/O error its pages are not to be trusted)."""
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, self._size)
        except OSError:
            log.exception("could not cut a failed append off the journal; the next append starts past it or over it")
        self.close()

    def replay(self, folded: int) -> Iterator[Record]:
        """Every record after sequence number ``folded``, in order."""
        for _, path in self._segments():
            for item in scan(path.read_bytes()):
                if isinstance(item, Record) and item.seq > folded:
                    yield item

    def release(self, folded: int) -> None:
        """Delete the segments whose records have all been folded (never the one being appended to)."""
        segments = self._segments()
        for (_, path), (next_first, _) in zip(segments, segments[1:]):
            if next_first <= folded + 1:
                path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _write_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _write_new(path: Path, data: bytes) -> None:
    """Keep ``data`` aside in a new file (best effort: the bytes stay in their segment until it is released)."""
    try:
        _write_durably(path, data)
    except OSError:
        log.exception("could not keep damaged journal bytes aside in %s", path)


def _write_durably(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        _write_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
