"""How many items an OTLP export holds, counted before it is decoded. Pure.

Decoding builds an object per span or log record, and an empty one is two bytes of protobuf: a 16 MiB body is 8M
objects, gigabytes and seconds. So the receiver first walks the export's three levels (resources, their scopes, their
items) on the wire — protobuf's tags and lengths, or simdjson's tape for OTLP/JSON, with no Python object per item —
and stops as soon as the count passes the limit. Every group counts as an item too: a million empty resources cost as
much to decode as a million spans.
"""

from __future__ import annotations

from typing import Any

import simdjson

from raysight.errors import TooMany

# The field number of each level's repeated field, the same for traces and logs: ExportTraceServiceRequest
# .resource_spans = 1 → ResourceSpans.scope_spans = 2 → ScopeSpans.spans = 2 (resource_logs, scope_logs, log_records)
LEVELS = (1, 2, 2)
VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5


class Malformed(ValueError):
    """Not protobuf (or not JSON): the decoder would refuse it too."""


def count(body: bytes, json: bool, signal: str, items: str, limit: int, what: str) -> int:
    """The resources, scopes and ``items`` of an export of ``resource{signal}`` (OTLP/JSON's names; protobuf's field
    numbers are :data:`LEVELS`); TooMany as soon as they pass ``limit`` (``what``: the items' name for the
    message), Malformed where the body is not what it says it is."""
    counter = _Counter(limit, what)
    if json:
        counter.json(body, (f"resource{signal}", f"scope{signal}", items))
    else:
        counter.protobuf(body, 0, len(body), 0)
    return counter.n


class _Counter:
    def __init__(self, limit: int, what: str) -> None:
        self.n, self.limit, self.what = 0, limit, what

    def add(self, n: int) -> None:
        self.n += n
        if self.n > self.limit:
            raise TooMany(
                f"over {self.limit:,} {self.what} in one export (each resource and scope counts as one): "
                "send smaller batches"
            )

    def protobuf(self, body: bytes, start: int, end: int, level: int) -> None:
        """Count the fields of ``LEVELS[level]`` in ``body[start:end]``, descending into each but the last."""
        wanted, pos = LEVELS[level], start
        while pos < end:
            key, pos = _varint(body, pos, end)
            wire = key & 7
            if wire == LENGTH:
                length, pos = _varint(body, pos, end)
                if pos + length > end:
                    raise Malformed(f"a field's length runs past its message at byte {pos}")
                if key >> 3 == wanted:
                    self.add(1)
                    if level + 1 < len(LEVELS):
                        self.protobuf(body, pos, pos + length, level + 1)
                pos += length
            elif wire == VARINT:
                _, pos = _varint(body, pos, end)
            elif wire in (FIXED64, FIXED32):
                pos += 8 if wire == FIXED64 else 4
            else:
                raise Malformed(f"wire type {wire} at byte {pos}")
        if pos > end:
            raise Malformed("a field runs past its message")

    def json(self, body: bytes, names: tuple[str, ...]) -> None:
        parser = simdjson.Parser()  # (held while its document is read)
        try:
            document = parser.parse(body)
        except (ValueError, RuntimeError) as exc:
            raise Malformed(f"not JSON: {exc}") from None
        groups = [document]
        for depth, name in enumerate(names, 1):
            inner: list[Any] = []
            for group in groups:
                found = group.get(name) if isinstance(group, simdjson.Object) else None
                if isinstance(found, simdjson.Array):
                    self.add(len(found))
                    if depth < len(names):
                        inner.extend(found)
            groups = inner


def _varint(body: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end:
        byte = body[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            break
    raise Malformed(f"a broken varint before byte {pos}")
