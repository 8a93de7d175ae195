"""Which session a request means, and every session recorded. A read model takes the session resolved once, by the
server, per request."""

from __future__ import annotations

from typing import Any

import duckdb

from raysight.errors import NotFound
from raysight.signals.debug_pauses.parse import DEBUG_PAUSES
from raysight.signals.log_lines.parse import SERVE_REQUESTS
from raysight.signals.polls.parse import SERVE_DETAILS
from raysight.store.statements import Query, dict_rows


def latest_session(con: duckdb.DuckDBPyConnection) -> str | None:
    row = con.execute("SELECT session FROM sessions ORDER BY first_ns DESC NULLS LAST, session DESC LIMIT 1").fetchone()
    return row[0] if row else None


EVERY_SESSION = "*"  # what a list of every session's rows names


def resolve_session(con: duckdb.DuckDBPyConnection, session: str | None, every: bool = False) -> str | None:
    """The named session (by name or label), or the one that started last when none is named (None: none recorded
    yet); :data:`EVERY_SESSION` as it is, where ``every`` session may be asked for."""
    if every and session == EVERY_SESSION:
        return session
    if not session:
        return latest_session(con)
    row = con.execute(
        "SELECT session FROM sessions WHERE session = ? OR label = ? ORDER BY first_ns DESC NULLS LAST LIMIT 1",
        [session, session],
    ).fetchone()
    if row is None:
        raise NotFound(f"no session named {session!r}; `raysight sessions` lists them")
    return row[0]


def recorded_session(con: duckdb.DuckDBPyConnection, session: str | None) -> str:
    """:func:`resolve_session`, and NotFound when no session is recorded yet."""
    resolved = resolve_session(con, session)
    if resolved is None:
        raise NotFound("no session has been recorded yet")
    return resolved


# The sessions where Serve ran: the poller saw its controller, or a proxy or replica logged a request
_SERVED = f"""SELECT DISTINCT session, true AS serve
    FROM (SELECT session FROM {SERVE_DETAILS.name} UNION ALL SELECT session FROM {SERVE_REQUESTS.name})"""
SESSIONS = Query(
    "sessions",
    f"""SELECT s.session, s.label, s.first_ns // 1000000 AS start_time_ms,
              e.ended_ns // 1000000 AS end_time_ms, e.end_reason,
              s.last_ns // 1000000 AS last_event_ms,
              coalesce(n.nodes, 0) AS nodes, coalesce(j.jobs, 0) AS jobs,
              coalesce(t.tasks, 0) AS tasks, coalesce(t.failures, 0) AS failures,
              coalesce(s.raw_bytes, 0) AS raw_bytes, coalesce(s.events, 0) AS events,
              coalesce(v.serve, false) AS serve, coalesce(d.pauses, 0) AS pauses
       FROM sessions s
       LEFT JOIN all_session_ends() e USING (session)
       LEFT JOIN (SELECT session, count(*) AS nodes FROM nodes GROUP BY 1) n USING (session)
       LEFT JOIN (SELECT session, count(*) AS jobs FROM jobs GROUP BY 1) j USING (session)
       LEFT JOIN (SELECT session, count(*) FILTER (coalesce(type, '') <> 'DRIVER_TASK') AS tasks,
                         count(*) FILTER (coalesce(inferred_state, reported_state) = 'FAILED') AS failures
                  FROM tasks GROUP BY 1) t USING (session)
       LEFT JOIN ({_SERVED}) v USING (session)
       LEFT JOIN (SELECT session, count(*) AS pauses FROM {DEBUG_PAUSES.name} GROUP BY 1) d USING (session)
       ORDER BY s.first_ns DESC NULLS LAST, s.session DESC""",
    about="every session seen, newest first, with its size and outcome, whether Serve ran in it, its debugger pauses",
)


def list_sessions(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every session seen, newest first, with its size and outcome, whether Serve ran in it (``serve``) and how many
    debugger pauses it had (``pauses``)."""
    return dict_rows(con.execute(SESSIONS.sql))
