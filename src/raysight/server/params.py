"""Query-string parsing shared by the own API and the Ray-compatible API."""

from __future__ import annotations

from starlette.datastructures import QueryParams

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


def bool_param(params: QueryParams, name: str, default: bool = False) -> bool:
    value = params.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise BadQuery(f"{name} must be true or false, not {value!r}")
