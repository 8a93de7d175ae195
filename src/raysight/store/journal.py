"""The ingest journal: POST bodies made durable (appended and fsynced) before they are acknowledged.

Ray waits for each answer before it sends a node's next batch, so answering only after DuckDB has folded a batch
ties Ray's export rate to the store's, and a local cluster that shuts down right after a burst takes what it had
not yet sent with it. The journal answers as soon as the bytes are on disk; the writer folds journalled batches in
large groups and records, in the same transaction, the last sequence number folded, so a restart replays exactly
what was not folded yet.

Files ``journal/<first seq>.log``; each record is a header (payload length, CRC-32, sequence number) and a payload
(``[label, run_id]`` as JSON, a newline, the body). A torn record at the end (a crash mid-append, never
acknowledged) is cut off when the journal opens.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import orjson

HEADER = struct.Struct("<IIQ")
SEGMENT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Record:
    seq: int
    label: str | None
    run_id: str | None
    body: bytes
    at: float = field(default_factory=time.monotonic, compare=False)  # when it was journalled (or replayed)


def encode(record: Record) -> bytes:
    payload = orjson.dumps([record.label, record.run_id]) + b"\n" + record.body
    return HEADER.pack(len(payload), zlib.crc32(payload), record.seq) + payload


def decode(data: bytes, offset: int) -> tuple[Record, int] | None:
    """The record at ``offset`` and the offset after it; None at the end or at a torn or corrupt record."""
    if offset + HEADER.size > len(data):
        return None
    length, crc, seq = HEADER.unpack_from(data, offset)
    start, end = offset + HEADER.size, offset + HEADER.size + length
    payload = data[start:end]
    if end > len(data) or zlib.crc32(payload) != crc:
        return None
    meta, _, body = payload.partition(b"\n")
    label, run_id = orjson.loads(meta)
    return Record(seq, label, run_id, body), end


class Journal:
    """Append-only segments in ``directory``; one thread appends, another releases what has been folded."""

    def __init__(self, directory: Path, folded: int) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.next_seq = folded + 1
        self._file: BinaryIO | None = None
        segments = self._segments()
        if segments:
            last_seq, size = self._scan(segments[-1][1])
            self.next_seq = max(self.next_seq, last_seq + 1)
            os.truncate(segments[-1][1], size)  # cut a torn tail: it was never acknowledged

    def _segments(self) -> list[tuple[int, Path]]:
        return sorted((int(p.stem), p) for p in self.directory.glob("*.log"))

    @staticmethod
    def _scan(path: Path) -> tuple[int, int]:
        """(last good sequence number or 0, the size up to the end of the last good record)."""
        data, offset, last = path.read_bytes(), 0, 0
        while (found := decode(data, offset)) is not None:
            last, offset = found[0].seq, found[1]
        return last, offset

    def append(self, batches: list[tuple[str | None, str | None, bytes]]) -> list[Record]:
        """Write ``(label, run_id, body)`` batches as records and fsync once; returns them, numbered."""
        if self._file is None or self._file.tell() > SEGMENT_BYTES:
            if self._file is not None:
                self._file.close()
            self._file = open(self.directory / f"{self.next_seq:016d}.log", "ab")  # noqa: SIM115 (kept open)
        records = [Record(self.next_seq + i, label, run_id, body) for i, (label, run_id, body) in enumerate(batches)]
        self._file.write(b"".join(encode(r) for r in records))
        self._file.flush()
        os.fsync(self._file.fileno())
        self.next_seq += len(records)
        return records

    def replay(self, folded: int) -> Iterator[Record]:
        """Every record after sequence number ``folded``, in order."""
        for _, path in self._segments():
            data, offset = path.read_bytes(), 0
            while (found := decode(data, offset)) is not None:
                record, offset = found
                if record.seq > folded:
                    yield record

    def release(self, folded: int) -> None:
        """Delete the segments whose records have all been folded (never the one being appended to)."""
        segments = self._segments()
        for (_, path), (next_first, _) in zip(segments, segments[1:]):
            if next_first <= folded + 1:
                path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
