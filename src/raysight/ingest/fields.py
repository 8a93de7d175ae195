"""What every ingest route checks of the JSON it is sent: a body that is an object holding a list or an object, the
host a node agent names, a Ray session's name, strings and integers within bounds. Pure; BadIngest says what is
wrong."""

from __future__ import annotations

import re
from typing import Any

import orjson

from raysight.errors import BadIngest
from raysight.ingest.ids import SESSION_NAME

MAX_NAME = 1024
_RAY_ID = re.compile(r"[0-9a-f]{1,64}")
MAX_KEY = 255  # a log file's key, name and worker ID, and the host: each stored on every line of the file


def text_field(value: Any, what: str, optional: bool = False, limit: int = MAX_NAME) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or len(value) > limit:
        raise BadIngest(f"{what} must be a string of 1 to {limit} characters")
    return value


def hex_id_field(value: Any, what: str, optional: bool = False) -> str | None:
    """A Ray ID in hex, as Ray's CLI shows it (a task's, an actor's, a worker's…)."""
    if value is None and optional:
        return None
    if not (isinstance(value, str) and _RAY_ID.fullmatch(value)):
        raise BadIngest(f"{what} must be a Ray ID in hex" + (", or null" if optional else ""))
    return value


def session_field(value: Any, what: str) -> str:
    """A Ray session's name (``session_…``), as every route checks it."""
    if not (isinstance(value, str) and SESSION_NAME.fullmatch(value)):
        raise BadIngest(f"{what} must be the name of a Ray session (session_…)")
    return value


def int_field(value: Any, what: str, optional: bool = False, low: int = 0, high: int = 2**63 - 1) -> int | None:
    if value is None and optional:
        return None
    if type(value) is not int or not low <= value <= high:
        raise BadIngest(f"{what} must be an integer from {low} to {high}")
    return value


def json_dict(body: bytes | str, shape: str) -> dict[str, Any]:
    """A JSON body that must be an object (of ``shape``, as a refusal names it); BadIngest otherwise."""
    try:
        found = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadIngest(f"body is not JSON: {exc}") from None
    if not isinstance(found, dict):
        raise BadIngest(f"body must be a JSON object {shape}")
    return found


def json_object(body: bytes, field: str, kind: type, shape: str) -> dict[str, Any]:
    """An agent's JSON body: an object of ``shape`` whose ``field`` is a ``kind`` (list, dict); BadIngest otherwise."""
    found = json_dict(body, shape)
    if not isinstance(found.get(field), kind):
        raise BadIngest(f"body must be a JSON object {shape}")
    return found


def agent_batch(body: bytes, listed: str, shape: str) -> tuple[dict[str, Any], str]:
    """A node agent's JSON body, an object of ``shape`` whose field ``listed`` is a list, and the host it names;
    BadIngest otherwise."""
    batch = json_object(body, listed, list, shape)
    host = text_field(batch.get("host"), "host", limit=MAX_KEY)
    assert host is not None
    return batch, host
