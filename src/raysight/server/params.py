"""Query-string parsing shared by the own API and the Ray-compatible API."""

from __future__ import annotations

from starlette.datastructures import QueryParams

from raysight.errors import BadQuery


def int_param(params: QueryParams, name: str, default: int | None) -> int | None:
    value = params.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise BadQuery(f"{name} must be an integer, not {value!r}") from None


def bool_param(params: QueryParams, name: str, default: bool = False) -> bool:
    value = params.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise BadQuery(f"{name} must be true or false, not {value!r}")
