"""On-demand profiles of live processes: what a user asks for (``wire.CaptureAsked``), what an agent sends back
(``wire.CaptureResult``), each checked; Serve's memray captures as an agent ships them (``wire.ServeCaptureShipped``);
and the tables that keep every profile, who asked for it (or which of Serve's files it is), its result, and a Serve
capture's file. Pure."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import orjson

from raysight import wire
from raysight.errors import BadIngest
from raysight.ingest.fields import hex_id_field, json_dict, session_field
from raysight.tables import Column, Table, columns

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
MAX_SERVE_CAPTURE = 1024**3  # bytes of a Serve capture the server reads (shipped gzipped, within --max-body)
SERVE_CLIENT = "Serve (RAY_SERVE_ENABLE_MEMORY_PROFILING)"  # who asked for a Serve capture, as a list shows it
# Serve's memray captures in a session's logs/serve/ (``logging_utils.configure_component_memory_profiler``): a
# controller's, a proxy's, a replica's; ``<n>`` counts the actor's restarts
# (Serve replaces what a file name should not hold by _: utils.FILE_NAME_REGEX)
SERVE_CAPTURE = re.compile(r"(?P<component>(controller|proxy|replica)_[ -~]+)_memray_(?P<n>\d+)\.bin")
_UNSAFE = re.compile(r'["/\\<>:|?*]')
_DIGITS = re.compile(r"[0-9]{1,19}")

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
    )
    + [
        Column("file", "VARCHAR", added=True),  # a Serve capture's: its name in logs/serve/
        Column("file_bytes", "BIGINT", added=True),  # …its size as written
        Column("modified_ns", "BIGINT", added=True),  # …when it last changed
    ],
    key=("capture_id",),
)
# A Serve capture's file, gzipped as its agent shipped it: memray's own reporters read it after the cluster is gone
PROFILE_CAPTURE_FILES = Table(
    "profile_capture_files",
    columns(capture_id="VARCHAR", session="VARCHAR", gz="BLOB"),
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


@dataclass(frozen=True)
class ServeShipped:
    """A Serve capture as its agent named it, checked: the session and node it is of, its file's name, size and
    modification time, and the file gzipped (None where it was too large to ship)."""

    session: str
    node_id: str | None
    file: str
    file_bytes: int
    modified_ns: int
    gz: bytes | None

    @property
    def capture_id(self) -> str:
        """The same for each shipping of one file (a later one replaces it): Serve names each of its actors' files
        apart (a replica by its ID, a proxy by its node's address, the controller by its pid)."""
        named = f"{self.session}/{self.file}".encode()
        return "serve-" + hashlib.blake2b(named, digest_size=8).hexdigest()


def _count(value: str | None, name: str) -> int:
    if value is None or not _DIGITS.fullmatch(value) or int(value) > INT64_MAX:
        raise BadIngest(f"{name} must be a non-negative integer")
    return int(value)


def parse_serve_shipped(params: Any, body: bytes) -> ServeShipped:
    """A Serve capture shipped (``POST AGENT_SERVE_CAPTURES``: ``wire.ServeCaptureShipped`` as query parameters, the
    file gzipped as the body, empty where ``too_large``); BadIngest says what is wrong."""
    session, file = session_field(params.get("session"), "session"), params.get("file")
    if not file or not SERVE_CAPTURE.fullmatch(file) or len(file) > 1024 or _UNSAFE.search(file):
        raise BadIngest("file must be the name of one of Serve's memray captures (<component>_memray_<n>.bin)")
    too_large = params.get("too_large") is not None
    if too_large and body:
        raise BadIngest("a capture too large to ship has no body")
    if not too_large and body[:2] != b"\x1f\x8b":
        raise BadIngest("the body must be the capture gzipped")
    file_bytes = _count(params.get("bytes"), "bytes")
    if file_bytes > MAX_SERVE_CAPTURE and not too_large:
        raise BadIngest(f"a Serve capture over {MAX_SERVE_CAPTURE} bytes is too_large: only said")
    return ServeShipped(
        session=session,
        node_id=hex_id_field(params.get("node"), "node", optional=True),
        file=file,
        file_bytes=file_bytes,
        modified_ns=_count(params.get("modified_ns"), "modified_ns"),
        gz=None if too_large else body,
    )
