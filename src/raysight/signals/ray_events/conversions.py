"""Ray ID and timestamp conversions for the Python folds: the base64/RFC 3339 forms of Ray's event stream to hex and
nanoseconds (the SQL folds use the macros of :mod:`.event_stages`, tested to agree)."""

from __future__ import annotations

import binascii
import re
from datetime import datetime, timezone
from functools import lru_cache

# An RFC 3339 UTC timestamp as Ray writes it (up to nanosecond digits), the one shape both parsers read
RFC3339_UTC = r"\d{4}-\d\d-\d\dT([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?[Zz]"
_RFC3339_UTC = re.compile(RFC3339_UTC, re.ASCII)


def b64_to_hex(value: object) -> str | None:
    """Ray's standard-base64 ID as the lowercase hex that ``ray list`` shows; None for an absent or nil ID."""
    if not isinstance(value, str) or not value:
        return None
    return _cached_hex(value)


def _hex(value: str) -> str | None:
    try:
        raw = binascii.a2b_base64(value)
    except (binascii.Error, ValueError):
        raise ValueError(f"not a base64 ID: {value[:60]!r}") from None
    if not raw or raw == b"\xff" * len(raw):
        return None
    return raw.hex()


_cached_hex = lru_cache(maxsize=65536)(_hex)  # a batch names the same job, node, worker and task many times


def parse_ts_ns(value: object) -> int | None:
    """An RFC 3339 UTC timestamp with up to nanosecond digits (``2026-11-21T19:46:20.382588593Z``) as epoch ns; None
    for any other shape (the SQL macro ``ray_ts_ns`` reads the same one)."""
    if not isinstance(value, str) or (match := _RFC3339_UTC.fullmatch(value)) is None:
        return None
    head, frac = value[:19], (match.group(2) or ".")[1:]
    try:
        ns = _epoch_seconds(head) * 1_000_000_000 + int((frac + "000000000")[:9])
    except ValueError:  # a day the month does not have
        return None
    return ns if -(1 << 63) <= ns < 1 << 63 else None  # beyond 2262 is not a timestamp Ray sent


@lru_cache(maxsize=4096)
def _epoch_seconds(head: str) -> int:
    """Seconds since the epoch of a UTC ``YYYY-MM-DDTHH:MM:SS``; cached, as a batch shares few distinct seconds."""
    return int(datetime.fromisoformat(head).replace(tzinfo=timezone.utc).timestamp())


def to_int(value: object, bits: int = 64) -> int | None:
    """proto3 JSON int64 (a string) or int32 (a number) as an int; None when absent or not a number.

    Raises ValueError when the number does not fit the store's ``bits``-bit column: such an event is quarantined.
    """
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return None
    if not -(1 << (bits - 1)) <= number < 1 << (bits - 1):
        raise ValueError(f"{value!r} does not fit in {bits} bits")
    return number
