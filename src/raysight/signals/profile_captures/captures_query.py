"""The read models of profiles of live processes: the process a request names (a running task's worker, a live
actor's, a pid), the profiles of a session (or of a task, an actor), one whole, with what came back, and a Serve
capture's file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb
import orjson

from raysight.errors import Conflict, NotFound
from raysight.signals.profile_captures.parse import PROFILE_CAPTURE_FILES, PROFILE_CAPTURES, Asked
from raysight.signals.ray_events import entities, state_query
from raysight.store import sessions_query

_LISTED = (
    "capture_id, session, kind, task_id, attempt, actor_id, node_id, pid, duration_s, native, leaks, client, "
    "address, requested_ns, taken_ns, finished_ns, status, error, unit, json_array_length(stacks) AS stacks, file, "
    f"file_bytes, capture_id IN (SELECT capture_id FROM {PROFILE_CAPTURE_FILES.name}) AS file_kept"
)


@dataclass(frozen=True)
class Target:
    """The live process a request is of, and the task or actor it was named by."""

    session: str
    node_id: str
    pid: int
    task_id: str | None = None
    attempt: int | None = None
    actor_id: str | None = None


def target(con: duckdb.DuckDBPyConnection, asked: Asked) -> Target:
    """Where ``asked``'s process runs, in its session (the newest, unless named): NotFound for a task or actor not
    recorded, Conflict for one not running now (on-demand profiles are of live processes)."""
    session = sessions_query.recorded_session(con, asked.session)
    if asked.pid is not None and asked.node_id is not None:
        return Target(session, asked.node_id, asked.pid)
    if asked.task_id is not None:
        rows = state_query.get_rows(con, entities.resource("tasks"), asked.task_id, session=session).rows
        task = max(rows, key=lambda row: row["attempt_number"])
        if task["state"] != "RUNNING" or not task["worker_pid"] or not task["node_id"]:
            raise Conflict(
                f"task {asked.task_id} is {task['state']} in {session}: an on-demand profile is of a running task's "
                f"worker (what it did when it ran: `raysight profile --task {asked.task_id}`)"
            )
        return Target(session, task["node_id"], task["worker_pid"], asked.task_id, task["attempt_number"])
    assert asked.actor_id is not None
    (actor,) = state_query.get_rows(con, entities.resource("actors"), asked.actor_id, session=session).rows
    if actor["state"] != "ALIVE" or not actor["pid"] or not actor["node_id"]:
        raise Conflict(
            f"actor {asked.actor_id} is {actor['state']} in {session}: on-demand profiles are of live actors"
        )
    return Target(session, actor["node_id"], actor["pid"], actor_id=asked.actor_id)


def _rows(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    names = [d[0] for d in cursor.description or ()]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def captures(
    con: duckdb.DuckDBPyConnection, session: str | None, task_id: str | None = None, actor_id: str | None = None
) -> dict[str, Any]:
    """The requests of ``session`` (the newest, unless named), of one task or actor where given, newest first: each
    without what came back but how many stacks."""
    named = sessions_query.recorded_session(con, session)
    rows = _rows(
        con.execute(
            f"SELECT {_LISTED} FROM {PROFILE_CAPTURES.name} WHERE session = $1 "
            "AND ($2 IS NULL OR task_id = $2) AND ($3 IS NULL OR actor_id = $3) ORDER BY requested_ns DESC",
            [named, task_id, actor_id],
        )
    )
    return {"session": named, "rows": rows}


def capture(con: duckdb.DuckDBPyConnection, capture_id: str) -> dict[str, Any]:
    """One request whole: its stacks as ``[[stack, weight], …]`` and py-spy dump's text; NotFound if none."""
    found = _rows(
        con.execute(
            f"SELECT * REPLACE (coalesce(stacks, '[]') AS stacks) FROM {PROFILE_CAPTURES.name} WHERE capture_id = ?",
            [capture_id],
        )
    )
    if not found:
        raise NotFound(f"no on-demand profile {capture_id!r}: `raysight profiles` lists them")
    row = found[0]
    return {**row, "stacks": orjson.loads(row["stacks"])}


def serve_kept(con: duckdb.DuckDBPyConnection, session: str) -> list[dict[str, Any]]:
    """The Serve captures of ``session`` kept, each as last shipped: its file's name, size and modification time."""
    rows = con.execute(
        f"SELECT file, file_bytes, modified_ns FROM {PROFILE_CAPTURES.name} WHERE session = ? AND file IS NOT NULL",
        [session],
    ).fetchall()
    return [{"file": file, "bytes": size, "modified_ns": ns} for file, size, ns in rows]


def capture_file(con: duckdb.DuckDBPyConnection, capture_id: str) -> tuple[str, bytes]:
    """A Serve capture's file name and its bytes gzipped; NotFound for a profile that has none."""
    found = con.execute(
        f"SELECT c.file, f.gz FROM {PROFILE_CAPTURES.name} c JOIN {PROFILE_CAPTURE_FILES.name} f USING (capture_id) "
        "WHERE capture_id = ?",
        [capture_id],
    ).fetchone()
    if found is None:
        raise NotFound(
            f"no capture file of profile {capture_id!r}: only Serve's memray captures have one, and one too large to "
            "ship was not kept (`raysight profiles` lists them)"
        )
    return found[0], bytes(found[1])
