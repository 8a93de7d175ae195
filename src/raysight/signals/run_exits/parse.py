"""What `raysight run` saw of its driver's end (``POST /ingest/agent/run-exit``, ``wire.RunExit``): checked, and the
row it keeps. Pure."""

from __future__ import annotations

from typing import Any

from raysight import wire
from raysight.errors import BadIngest
from raysight.ingest.fields import json_dict
from raysight.ingest.ids import SESSION_NAME
from raysight.tables import Table, columns

MAX_BODY = 64 * 1024
RUN_ID_MAX = 128
INT64_MAX = 2**63 - 1
# What `raysight run` saw of a driver it started: its exit code, when it ended, and the session it joined, when it
# joined one it did not start. Raw input, never folded away.
RUN_EXITS = Table(
    "run_exits",
    columns(run_id="VARCHAR", driver_pid="BIGINT", exit_code="INTEGER", ended_ns="BIGINT", session="VARCHAR"),
    key=("run_id",),
)
RunExit = tuple[str, int | None, int, int, str | None]  # a row of RUN_EXITS


def _int_field(value: Any, name: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:  # `true` is no exit code
        raise BadIngest(f"{name} must be an integer from {low} to {high}, not {str(value)[:40]}")
    return value


def parse(body: bytes) -> RunExit:
    """A run exit's run_id, driver_pid, exit_code, ended_ns (in the ranges the store keeps: INTEGER, BIGINT) and the
    session its driver joined (optional: one `raysight run` did not start); BadIngest says what is wrong."""
    fields = json_dict(body, '{"run_id", "driver_pid", "exit_code", "ended_ns"}')
    exit_ = wire.shaped(fields, wire.RunExit)
    run_id = exit_["run_id"]
    if not (isinstance(run_id, str) and 0 < len(run_id) <= RUN_ID_MAX):
        raise BadIngest(f"run_id must be a string of 1 to {RUN_ID_MAX} characters")
    pid = None if exit_["driver_pid"] is None else _int_field(exit_["driver_pid"], "driver_pid", 0, INT64_MAX)
    code = _int_field(exit_["exit_code"], "exit_code", -(2**31), 2**31 - 1)
    session = exit_["session"]
    if session is not None and not (isinstance(session, str) and SESSION_NAME.fullmatch(session)):
        raise BadIngest("session must be the name of a Ray session (session_…), or null")
    return run_id, pid, code, _int_field(exit_["ended_ns"], "ended_ns", 0, INT64_MAX), session
