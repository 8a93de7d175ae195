"""Query-string parsing shared by the own API and the Ray-compatible API."""

from __future__ import annotations

import re
import time

from starlette.datastructures import QueryParams

from raysight import units
from raysight.errors import BadQuery

INT64_MAX = 2**63 - 1


def int_param(params: QueryParams, name: str, default: int | None) -> int | None:
    """A count (limit, offset): 0 to 2^63 - 1, what the store's SQL takes."""
    value = params.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 <= number <= INT64_MAX:
        raise BadQuery(f"{name} must be an integer from 0 to {INT64_MAX}, not {value!r}")
    return number


def time_param(params: QueryParams, name: str, unit: int) -> int | None:
    """A time (``since``, ``until``, ``at``) in epoch ``unit`` ns each, the parameter's own: a number of them, an ISO
    8601 time, or a time ago (``-5m``), as :func:`raysight.units.time_ns` reads them; from 1970 on."""
    value = params.get(name)
    if not value:
        return None
    try:
        at = units.time_ns(value, time.time_ns(), epoch=unit) // unit
    except ValueError as exc:
        raise BadQuery(f"{name}: {exc}") from None
    if not 0 <= at <= INT64_MAX:
        raise BadQuery(f"{name} must be a time from 1970 on, not {value!r}")
    return at


def duration_param(params: QueryParams, name: str) -> int | None:
    """A duration in ns: a number of ns, or a number and its unit (``250ms``, ``2m``; :mod:`raysight.units`)."""
    value = params.get(name)
    if not value:
        return None
    try:
        ns = units.duration_ns(value, bare=units.NS)
    except ValueError as exc:
        raise BadQuery(f"{name}: {exc}") from None
    if ns > INT64_MAX:
        raise BadQuery(f"{name} must be at most {INT64_MAX} ns, not {value!r}")
    return ns


def id_param(params: QueryParams, name: str, digits: int, listed_by: str) -> str | None:
    """``?name=``: an ID of ``digits`` hex digits (in any case; lower-cased), or None; BadQuery naming the command
    that lists them otherwise."""
    value = (params.get(name) or "").lower() or None
    if value is not None and not re.fullmatch(f"[0-9a-f]{{{digits}}}", value):
        raise BadQuery(f"{name} {value!r} is no {name} ID: {digits} hex digits, as `{listed_by}` shows")
    return value


def bool_param(params: QueryParams, name: str, default: bool = False) -> bool:
    value = params.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise BadQuery(f"{name} must be true or false, not {value!r}")
