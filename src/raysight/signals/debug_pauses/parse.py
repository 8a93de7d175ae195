"""A paused worker's report of its pause (``wire.Pause``, the first message of its ``DEBUG_PAUSED`` socket): checked,
and the rows the store keeps of pauses and of the clients that drove them. Pure."""

from __future__ import annotations

from typing import Any

import orjson

from raysight import wire
from raysight.errors import BadIngest
from raysight.ingest.fields import hex_id_field, json_dict
from raysight.ingest.ids import SESSION_NAME
from raysight.tables import Table, columns

MAX_REPORT = 1024 * 1024  # bytes of a report: a stack of MAX_FRAMES, each of MAX_LOCALS reprs of MAX_REPR
MAX_FRAMES = 64
MAX_LOCALS = 100
MAX_REPR = 1000
MAX_TEXT = 64 * 1024  # an exception's text, a traceback
KINDS = ("breakpoint", "post_mortem")
INT64_MAX = 2**63 - 1

# Every pause a worker reported, and how it ended (null while it lasts): continued, quit, timed out, worker gone
# (its connection lost), server stopped
DEBUG_PAUSES = Table(
    "debug_pauses",
    columns(
        pause_id="VARCHAR",
        session="VARCHAR",
        kind="VARCHAR",
        job_id="VARCHAR",
        task_id="VARCHAR",
        attempt="INTEGER",
        actor_id="VARCHAR",
        worker_id="VARCHAR",
        node_id="VARCHAR",
        host="VARCHAR",
        pid="BIGINT",
        function="VARCHAR",
        file="VARCHAR",
        line="INTEGER",
        stack="JSON",
        exception="VARCHAR",
        traceback="VARCHAR",
        paused_ns="BIGINT",
        ended_ns="BIGINT",
        ended="VARCHAR",
    ),
    key=("pause_id",),
)
# Every client that attached to a pause: who said it was, from where, and for how long (detached_ns null while it
# drives the pause)
DEBUG_ATTACHES = Table(
    "debug_attaches",
    columns(
        pause_id="VARCHAR",
        session="VARCHAR",
        client="VARCHAR",
        address="VARCHAR",
        attached_ns="BIGINT",
        detached_ns="BIGINT",
    ),
    key=("pause_id", "attached_ns"),
)


def _text(value: Any, name: str, most: int, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > most:
        raise BadIngest(f"{name} must be a string of at most {most} characters")
    return value


def _int(value: Any, name: str, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if type(value) is not int or not 0 <= value <= INT64_MAX:
        raise BadIngest(f"{name} must be a non-negative integer")
    return value


def _frame(value: Any) -> wire.PausedFrame:
    if not isinstance(value, dict):
        raise BadIngest("each frame of the stack must be an object {file, line, function, locals}")
    frame = wire.shaped(value, wire.PausedFrame)
    names = frame["locals"] or {}
    if not isinstance(names, dict) or len(names) > MAX_LOCALS:
        raise BadIngest(f"a frame's locals must be an object of at most {MAX_LOCALS} names")
    return {
        "file": _text(frame["file"], "a frame's file", 4096) or "",
        "line": _int(frame["line"], "a frame's line") or 0,
        "function": _text(frame["function"], "a frame's function", 1024) or "",
        "locals": {
            str(_text(name, "a local's name", 256)): _text(text, "a local's repr", MAX_REPR) or ""
            for name, text in names.items()
        },
    }


def parse_pause(body: bytes | str) -> dict[str, Any]:
    """A pause report's row of :data:`DEBUG_PAUSES` (no ID, not ended yet); BadIngest says what is wrong."""
    if len(body) > MAX_REPORT:
        raise BadIngest(f"a pause report holds at most {MAX_REPORT} bytes")
    pause = wire.shaped(json_dict(body, '{"kind", "session", "stack", …} (wire.Pause)'), wire.Pause)
    if pause["kind"] not in KINDS:
        raise BadIngest(f"kind must be one of {', '.join(KINDS)}")
    session = pause["session"]
    if not (isinstance(session, str) and SESSION_NAME.fullmatch(session)):
        raise BadIngest("session must be the name of a Ray session (session_…)")
    stack = pause["stack"]
    if not isinstance(stack, list) or not 0 < len(stack) <= MAX_FRAMES:
        raise BadIngest(f"stack must be a list of 1 to {MAX_FRAMES} frames, innermost first")
    frames = [_frame(frame) for frame in stack]
    return {
        "session": session,
        "kind": pause["kind"],
        "job_id": hex_id_field(pause["job_id"], "job_id", optional=True),
        "task_id": hex_id_field(pause["task_id"], "task_id", optional=True),
        "attempt": _int(pause["attempt"], "attempt", optional=True),
        "actor_id": hex_id_field(pause["actor_id"], "actor_id", optional=True),
        "worker_id": hex_id_field(pause["worker_id"], "worker_id", optional=True),
        "node_id": hex_id_field(pause["node_id"], "node_id", optional=True),
        "host": _text(pause["host"], "host", 256),
        "pid": _int(pause["pid"], "pid"),
        "function": frames[0]["function"],
        "file": frames[0]["file"],
        "line": frames[0]["line"],
        "stack": orjson.dumps(frames).decode(),
        "exception": _text(pause["exception"], "exception", MAX_TEXT, optional=True),
        "traceback": _text(pause["traceback"], "traceback", MAX_TEXT, optional=True),
        "paused_ns": _int(pause["paused_ns"], "paused_ns"),
    }
