"""On-demand profiles of live processes: what a user asks for (``wire.CaptureAsked``), what an agent sends back
(``wire.CaptureResult``), each checked; and the table that keeps every request, who made it, and its result. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from raysight import wire
from raysight.errors import BadIngest
from raysight.ingest.fields import hex_id_field, json_dict
from raysight.tables import Table, columns

KINDS = ("stack", "cpu", "memory")  # py-spy dump, py-spy record, memray attach
UNITS = ("samples", "bytes")
DEFAULT_DURATION_S = 10.0
MAX_DURATION_S = 600.0
MAX_RESULT = 16 * 1024 * 1024  # bytes of an agent's answer
MAX_STACKS = 100_000
MAX_STACK = 64 * 1024  # characters of one collapsed stack
MAX_TEXT = 4 * 1024 * 1024  # py-spy dump's text
MAX_ERROR = 8 * 1024
INT64_MAX = 2**63 - 1

# Every on-demand profile asked for: of what (the task or actor named, else a pid), where (node, pid), by whom (the
# client's name for itself, its address), when, how it went (queued, running, done, failed, with the error), and what
# the agent found (stacks with their weights in ``unit``; py-spy dump's text)
PROFILE_CAPTURES = Table(
    "profile_captures",
    columns(
        capture_id="VARCHAR",
        session="VARCHAR",
        kind="VARCHAR",
        task_id="VARCHAR",
        attempt="INTEGER",
        actor_id="VARCHAR",
        node_id="VARCHAR",
        pid="BIGINT",
        duration_s="DOUBLE",
        native="BOOLEAN",
        leaks="BOOLEAN",
        client="VARCHAR",
        address="VARCHAR",
        requested_ns="BIGINT",
        taken_ns="BIGINT",
        finished_ns="BIGINT",
        status="VARCHAR",
        error="VARCHAR",
        unit="VARCHAR",
        stacks="JSON",
        text="VARCHAR",
    ),
    key=("capture_id",),
)


@dataclass(frozen=True)
class Asked:
    """A request, checked: its target as named (one of task, actor, pid with node)."""

    kind: str
    session: str | None
    task_id: str | None
    actor_id: str | None
    pid: int | None
    node_id: str | None
    duration_s: float
    native: bool
    leaks: bool


def _flag(value: Any, name: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadIngest(f"{name} must be true or false")
    return value


def _pid(value: Any) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 0 < value < 2**31:
        raise BadIngest("pid must be a process ID (a positive integer)")
    return value


def _session(value: Any) -> str | None:
    """A session as a request names it: its name or its label (None: the newest)."""
    if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 256):
        raise BadIngest("session must be a session's name or label")
    return value


def parse_asked(body: bytes) -> Asked:
    """A user's request; BadIngest says what is wrong."""
    asked = wire.shaped(json_dict(body, '{"kind", "task_id" | "actor_id" | "pid" and "node_id", …}'), wire.CaptureAsked)
    kind = asked["kind"]
    if kind not in KINDS:
        raise BadIngest(f"kind must be one of {', '.join(KINDS)}")
    named = [name for name in ("task_id", "actor_id", "pid") if asked[name] is not None]  # type: ignore[literal-required]
    if len(named) != 1:
        raise BadIngest("name one process: task_id, actor_id, or pid with node_id")
    pid, node_id = _pid(asked["pid"]), hex_id_field(asked["node_id"], "node_id", optional=True)
    if (pid is None) != (node_id is None):
        raise BadIngest("a pid is a node's: give node_id with it, and only with it")
    duration = asked["duration_s"]
    if duration is None:
        duration = DEFAULT_DURATION_S
    if kind == "stack" and asked["duration_s"] is not None:
        raise BadIngest("a stack is a moment's: no duration_s")
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not 0.1 <= duration <= MAX_DURATION_S:
        raise BadIngest(f"duration_s must be a number of seconds from 0.1 to {MAX_DURATION_S:g}")
    leaks = _flag(asked["leaks"], "leaks")
    if leaks and kind != "memory":
        raise BadIngest("leaks is memory's: what is still allocated when the capture ends")
    session = asked["session"]
    return Asked(
        kind=kind,
        session=_session(session),
        task_id=hex_id_field(asked["task_id"], "task_id", optional=True),
        actor_id=hex_id_field(asked["actor_id"], "actor_id", optional=True),
        pid=pid,
        node_id=node_id,
        duration_s=0.0 if kind == "stack" else float(duration),
        native=_flag(asked["native"], "native"),
        leaks=leaks,
    )


@dataclass(frozen=True)
class Result:
    """What an agent sent back, checked: an error, or stacks (and a dump's text)."""

    error: str | None
    unit: str | None
    stacks: str | None  # JSON: [[collapsed stack, weight], …]
    text: str | None


def _stack(entry: Any) -> tuple[str, int]:
    if not (isinstance(entry, list) and len(entry) == 2):
        raise BadIngest("each of stacks must be [collapsed stack, weight]")
    stack, weight = entry
    if not isinstance(stack, str) or not 0 < len(stack) <= MAX_STACK:
        raise BadIngest(f"a stack must be a string of 1 to {MAX_STACK} characters, frames joined by ;")
    if type(weight) is not int or not 0 < weight <= INT64_MAX:
        raise BadIngest("a stack's weight must be a positive integer")
    return stack, weight


def parse_result(body: bytes) -> Result:
    """An agent's answer; BadIngest says what is wrong."""
    if len(body) > MAX_RESULT:
        raise BadIngest(f"a profile holds at most {MAX_RESULT} bytes")
    sent = wire.shaped(json_dict(body, '{"error"} or {"unit", "stacks", "text"}'), wire.CaptureResult)
    if (error := sent["error"]) is not None:
        if not isinstance(error, str) or not 0 < len(error) <= MAX_ERROR:
            raise BadIngest(f"error must be a string of 1 to {MAX_ERROR} characters")
        return Result(error, None, None, None)
    unit, stacks, text = sent["unit"], sent["stacks"] or [], sent["text"]
    if unit not in UNITS:
        raise BadIngest(f"unit must be one of {', '.join(UNITS)}")
    if not isinstance(stacks, list) or len(stacks) > MAX_STACKS:
        raise BadIngest(f"stacks must be a list of at most {MAX_STACKS}")
    if text is not None and (not isinstance(text, str) or len(text) > MAX_TEXT):
        raise BadIngest(f"text must be a string of at most {MAX_TEXT} characters")
    checked = [_stack(entry) for entry in stacks]
    return Result(None, unit, orjson.dumps(checked).decode(), text)
