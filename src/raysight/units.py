"""Durations, sizes and times as people write them, one dialect for every option and query parameter of raysight's
own (`raysight server --log-retention 30d --max-body 16MiB`, `raysight logs --since -5m`, `?since=2026-11-21T19:00Z`);
Prometheus's API keeps Prometheus's. Pure: each reader raises ValueError saying what it takes.

- A duration is a number and a unit: ``ns``, ``us``, ``ms``, ``s``, ``m``, ``h``, ``d`` (``500ms``, ``1.5s``, ``30d``);
  a bare number only where a reader is told what it counts (``--query-timeout 30``: seconds).
- A size is a number and a unit: ``B``, ``KB``, ``MB``, ``GB``, ``TB`` (powers of 1000) or ``KiB`` … ``TiB`` (of
  1024), in any case (``500MB``, ``1.5GiB``); a bare number of bytes only where a reader is told so.
- A time is an ISO 8601 time (UTC unless it says), an epoch number (in ms unless a reader says otherwise), or a time
  ago: a duration, with or without its minus (``-5m``, ``2h``); ``+5m`` is ahead.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

NS, US, MS, S = 1, 1_000, 1_000_000, 1_000_000_000
DURATION_UNITS = {"ns": NS, "us": US, "ms": MS, "s": S, "m": 60 * S, "h": 3600 * S, "d": 86400 * S}
_NUMBER = r"\d+(?:\.\d+)?"
_DURATION = re.compile(rf"({_NUMBER})\s*(ns|us|ms|s|m|h|d)")
_BARE = re.compile(_NUMBER)
_SIZE = re.compile(rf"({_NUMBER})\s*([KMGT]i?B|B)", re.IGNORECASE)
_AGO = re.compile(rf"([+-]?)\s*({_NUMBER}\s*[a-z]+)")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_UNIT_NAMES = {NS: "ns", US: "us", MS: "ms", S: "s"}


def duration_ns(text: str, bare: int | None = None) -> int:
    """Nanoseconds in a duration (``250ms``, ``1.5s``, ``2m``, ``30d``); a bare number counts ``bare`` ns each where
    given (``S``: seconds), and is refused otherwise."""
    value = text.strip()
    if match := _DURATION.fullmatch(value):
        return int(Decimal(match[1]) * DURATION_UNITS[match[2]])
    if bare is not None and _BARE.fullmatch(value):
        return int(Decimal(value) * bare)
    also = f", or {_UNIT_NAMES.get(bare, f'{bare} ns')} as a bare number" if bare is not None else ""
    raise ValueError(f"{text!r} is not a duration such as 30d, 12h, 90m, 1.5s or 500ms{also}")


def duration_s(text: str, bare: int | None = None) -> float:
    """Seconds in a duration (as :func:`duration_ns` reads it)."""
    return duration_ns(text, bare) / S


def size_bytes(text: str, bare: bool = False) -> int:
    """Bytes in a size (``500MB``, ``50GB``, ``1.5GiB``, ``10B``); a bare number is bytes where ``bare``."""
    value = text.strip()
    if bare and value.isdigit():
        return int(value)
    if (match := _SIZE.fullmatch(value)) is None:
        raise ValueError(f"{text!r} is not a size such as 500MB, 50GB or 1.5GiB" + (", or bytes" if bare else ""))
    unit = match[2].upper()
    return int(Decimal(match[1]) * (1024 if "I" in unit else 1000) ** "BKMGT".index(unit[0]))


def time_ns(text: str, now_ns: int, epoch: int = MS) -> int:
    """Epoch nanoseconds of a time: ISO 8601 (``2026-11-21T19:46:20Z``; UTC unless it says), a number of ``epoch`` ns
    since 1970 (epoch ms unless said), or a time ago (``-5m``, ``2h``; ``+5m`` ahead of ``now_ns``)."""
    value = text.strip()
    if _BARE.fullmatch(value):
        return int(Decimal(value) * epoch)
    if match := _AGO.fullmatch(value):
        try:
            ago = duration_ns(match[2])
        except ValueError:
            pass
        else:
            return now_ns + ago if match[1] == "+" else now_ns - ago
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a time ago (30s, 10m, 2h, 1d) nor an ISO 8601 time nor epoch "
            f"{_UNIT_NAMES.get(epoch, f'{epoch} ns')}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1) * US
