"""The read models of pauses: those a session had (or those still open, in any session), and one pause whole."""

from __future__ import annotations

from typing import Any

import duckdb
import orjson

from raysight.errors import NotFound
from raysight.signals.debug_pauses.parse import DEBUG_ATTACHES, DEBUG_PAUSES

# A pause's line: where it paused, in which entities, since when, how it ended, and how many clients drove it
_LISTED = f"""
    SELECT p.pause_id, p.session, p.kind, p.job_id, p.task_id, p.attempt, p.actor_id, p.worker_id, p.node_id, p.host,
           p.pid, p.function, p.file, p.line, p.paused_ns, p.ended_ns, p.ended,
           split_part(p.exception, chr(10), 1) AS exception,
           (SELECT count(*) FROM {DEBUG_ATTACHES.name} a WHERE a.pause_id = p.pause_id) AS attaches
    FROM {DEBUG_PAUSES.name} p"""


def _rows(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    names = [d[0] for d in cursor.description or ()]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def open_pauses(con: duckdb.DuckDBPyConnection, session: str | None) -> list[dict[str, Any]]:
    """The pauses not over, of ``session`` (None: of every session), oldest first."""
    return _rows(
        con.execute(
            f"{_LISTED} WHERE p.ended_ns IS NULL AND ($1 IS NULL OR p.session = $1) ORDER BY p.paused_ns",
            [session],
        )
    )


# The workers Ray's own debugger holds paused, as the poller last found them (``paused_workers``, each poll's rows
# alone), in the sessions whose last such poll is recent (a session polled no more is over): each at its debugpy port
RAY_STALE_NS = 15_000_000_000  # three polls
_RAY_PAUSED = """
    SELECT NULL AS pause_id, p.session, 'ray' AS kind, NULL AS job_id, NULL AS task_id, NULL AS attempt,
           NULL AS actor_id, p.id AS worker_id, p.row->>'$.node_id' AS node_id, p.row->>'$.ip' AS host,
           (p.row->>'$.pid')::BIGINT AS pid, NULL AS function, NULL AS file, NULL AS line, p.first_ns AS paused_ns,
           NULL AS ended_ns, NULL AS ended, NULL AS exception, 0 AS attaches,
           (p.row->>'$.ip') || ':' || (p.row->>'$.debugger_port') AS debugger
    FROM polled p JOIN polls s ON s.session = p.session AND s.resource = p.resource
    WHERE p.resource = 'paused_workers' AND s.last_ok_ns >= $2 AND ($1 IS NULL OR p.session = $1)
    ORDER BY p.first_ns"""


def ray_paused(con: duckdb.DuckDBPyConnection, session: str | None, now_ns: int) -> list[dict[str, Any]]:
    """The workers Ray's own debugger holds paused now (of ``session``, else of every session), each with the
    address its debugpy listens on (for Ray's VS Code extension: raysight cannot drive them)."""
    return _rows(con.execute(_RAY_PAUSED, [session, now_ns - RAY_STALE_NS]))


def session_pauses(con: duckdb.DuckDBPyConnection, session: str) -> list[dict[str, Any]]:
    """Every pause of ``session``, oldest first, with how each ended."""
    return _rows(con.execute(f"{_LISTED} WHERE p.session = $1 ORDER BY p.paused_ns", [session]))


def pause(con: duckdb.DuckDBPyConnection, pause_id: str) -> dict[str, Any]:
    """One pause whole: its line, its stack (innermost first) with the locals reported, its exception and traceback
    (a post-mortem's), and each client that attached; NotFound where no pause has the ID."""
    found = _rows(con.execute(f"{_LISTED} WHERE p.pause_id = $1", [pause_id]))
    if not found:
        raise NotFound(f"no pause {pause_id!r}: `raysight debug` lists the live ones, `raysight debug history` all")
    stack, exception, traceback = con.execute(
        f"SELECT stack, exception, traceback FROM {DEBUG_PAUSES.name} WHERE pause_id = $1", [pause_id]
    ).fetchone() or (None, None, None)
    attaches = _rows(
        con.execute(
            f"SELECT client, address, attached_ns, detached_ns FROM {DEBUG_ATTACHES.name} WHERE pause_id = $1 "
            "ORDER BY attached_ns",
            [pause_id],
        )
    )
    return {
        **found[0],
        "exception": exception,
        "traceback": traceback,
        "stack": orjson.loads(stack) if stack else [],
        "attaches": attaches,
    }
