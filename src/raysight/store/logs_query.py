"""Log lines out of the store: filtered by entity, file, stream, level, time and text, in the order stored.

A task attempt's lines are exact where Ray gave the byte range it printed (``taskLogInfo``: the tasks' ``stdout_*``
and ``stderr_*`` columns): the lines of that file within the range. Where it gave none (actor tasks unless
``RAY_ENABLE_RECORD_ACTOR_TASK_LOGGING=1``, a task whose worker died, everything under Ray's log rotation) they are
the output of the attempt's worker while it ran (under its ``:task_name:`` marker, for a plain task), flagged
``attribution: inferred``. An actor's lines are its workers' output, between calls too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import duckdb

from raysight.errors import BadQuery, NotFound
from raysight.ingest.agent_logs import STREAMS
from raysight.store import log_index
from raysight.store.queries import resolve_session
from raysight.store.schema import LAST_LOG_SEQ_SQL

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "FATAL")
INFERRED_SLACK_NS = 1_000_000_000  # lines are timed when the agent read them: up to about this much after written
COLUMNS = (
    "seq",
    "session",
    "host",
    "name",
    "stream",
    "worker_id",
    "pid",
    "job_id",
    "task_name",
    "actor_name",
    "byte_offset",
    "ts_ns",
    "level",
    "request_id",
    "trace_id",
    "span_id",
    "continued",
    "text",
)
_BASENAME = "regexp_extract({}, '[^/]*$')"
# The lines of a task's attempts (relation ``attempts``): exact within Ray's byte ranges, else inferred.
_OF_ATTEMPT = f"""
    (a.stdout_start IS NOT NULL AND l.name = {_BASENAME.format("a.stdout_file")}
        AND l.byte_offset >= a.stdout_start AND l.byte_offset < a.stdout_end)
    OR (a.stderr_start IS NOT NULL AND l.name = {_BASENAME.format("a.stderr_file")}
        AND l.byte_offset >= a.stderr_start AND l.byte_offset < a.stderr_end)
    OR (a.stdout_start IS NULL AND a.stderr_start IS NULL AND l.stream <> 'system'
        AND l.worker_id = coalesce(a.worker_id, a.exec_worker_id)
        AND (a.type <> 'NORMAL_TASK' OR l.task_name = a.name)  -- Ray marks each task's output with its name
        AND l.ts_ns >= coalesce(a.exec_start_ns, a.start_ns, a.first_ns)
        AND coalesce(l.ts_ns - {INFERRED_SLACK_NS} <= coalesce(a.executed_ns, a.end_ns), true))"""


@dataclass(frozen=True)
class LogQuery:
    session: str | None = None  # name or label; None: the latest
    task_id: str | None = None
    attempt: int | None = None
    actor_id: str | None = None
    job_id: str | None = None
    worker_id: str | None = None
    pid: int | None = None
    node_id: str | None = None
    file: str | None = None  # a substring of the file's name
    stream: str | None = None
    level: str | None = None
    grep: str | None = None
    regex: str | None = None
    since_ns: int | None = None
    until_ns: int | None = None
    after_seq: int | None = None  # only lines stored after this one (following)
    limit: int = 1000
    newest: bool = False  # the last ``limit`` matches (still printed oldest first), else the first
    markers: bool = False  # Ray's in-band marker lines too


@dataclass(frozen=True)
class LogResult:
    session: str | None
    total: int | None  # every match (None when not counted)
    rows: str  # the lines, a JSON array of objects (made by DuckDB: a page of lines is never a Python object each)
    last_seq: int  # where to follow on from: the last line given, else the last line stored


def resolve(con: duckdb.DuckDBPyConnection, session: str | None) -> str | None:
    """The session named (by name or label, as the other queries take it), else the latest; a session whose logs came
    but none of Ray's events is found by its name, and is the latest when none of Ray's came at all."""
    try:
        resolved = resolve_session(con, session)
    except NotFound:
        if con.execute("SELECT 1 FROM log_files WHERE session = ? LIMIT 1", [session]).fetchone() is None:
            raise
        return session
    if resolved is None:
        row = con.execute("SELECT session FROM log_files ORDER BY last_ns DESC LIMIT 1").fetchone()
        resolved = row[0] if row else None
    return resolved


def _check(query: LogQuery) -> None:
    if query.stream is not None and query.stream not in STREAMS:
        raise BadQuery(f"stream must be one of {', '.join(STREAMS)}, not {query.stream!r}")
    if query.level is not None and query.level.upper() not in LEVELS:
        raise BadQuery(f"level must be one of {', '.join(LEVELS)}, not {query.level!r}")
    if query.regex is not None:
        try:
            re.compile(query.regex)
        except re.error as exc:
            raise BadQuery(f"bad regex {query.regex!r}: {exc}") from None
    if query.limit < 0:
        raise BadQuery("limit must not be negative")


def _conditions(query: LogQuery, session: str) -> tuple[list[str], dict[str, object], str]:
    """WHERE conditions over ``l`` (log_lines), their named parameters, and the attempts of a task query (SQL)."""
    params: dict[str, object] = {"session": session}
    where = ["l.session = $session"]
    equal = {
        "job_id": query.job_id,
        "worker_id": query.worker_id,
        "pid": query.pid,
        "stream": query.stream,
        "level": query.level.upper() if query.level else None,
    }
    for column, value in equal.items():
        if value is not None:
            where.append(f"l.{column} = ${column}")
            params[column] = value
    tests = {
        "file": ("contains(l.name, $file)", query.file),
        "grep": ("contains(l.text, $grep)", query.grep),
        "regex": ("regexp_matches(l.text, $regex)", query.regex),
        "since": ("l.ts_ns >= $since", query.since_ns),
        "until": ("l.ts_ns < $until", query.until_ns),
        "after": ("l.seq > $after", query.after_seq),
        "actor": (
            """l.worker_id IN (SELECT worker_id FROM actors WHERE session = $session AND actor_id = $actor
                               UNION SELECT coalesce(worker_id, exec_worker_id) FROM tasks
                               WHERE session = $session AND actor_id = $actor)""",
            query.actor_id,
        ),
        "node": (
            "l.worker_id IN (SELECT worker_id FROM workers WHERE session = $session AND node_id = $node)",
            query.node_id,
        ),
    }
    for name, (condition, value) in tests.items():
        if value is not None:
            where.append(condition)
            params[name] = value
    if not query.markers:
        where.append("NOT l.marker")
    if query.actor_id is not None and query.stream is None:  # its output, as `ray logs actor`: not Ray's own log
        where.append("l.stream <> 'system'")
    attempts = ""
    if query.task_id is not None:
        attempts = "SELECT * FROM tasks WHERE session = $session AND task_id = $task"
        params["task"] = query.task_id
        if query.attempt is not None:
            attempts += " AND attempt = $attempt"
            params["attempt"] = query.attempt
    return where, params, attempts


def _text_ranges(con: duckdb.DuckDBPyConnection, query: LogQuery, stored: int) -> list[str]:
    """The condition on ``l.seq`` that skips the blocks of lines (up to ``stored``) that cannot hold the text searched
    for, if any. A block's trigrams are stored with its lines: those it had when ``stored`` was read are there."""
    literals = [query.grep] if query.grep else []
    if query.regex:
        literals += log_index.required_literals(query.regex)
    grams = log_index.needle_grams(literals)
    if not grams:
        return []
    lacking = " OR ".join(f"get_bit(grams, {int(bit)}) = 0" for bit in grams)
    excluded = con.execute(f"SELECT block FROM log_blocks WHERE {lacking} ORDER BY block").fetchall()
    ranges = log_index.seq_ranges([b for (b,) in excluded], stored)
    if ranges is None:
        return []
    return ["(" + (" OR ".join(f"l.seq BETWEEN {lo} AND {hi}" for lo, hi in ranges) or "false") + ")"]


def log_lines(con: duckdb.DuckDBPyConnection, query: LogQuery, count: bool = True) -> LogResult:
    """The lines ``query`` asks for, and how many match in all (when ``count``)."""
    _check(query)
    session = resolve(con, query.session)
    if session is None:
        return LogResult(None, 0, "[]", query.after_seq or 0)
    # The lines looked at are those stored when this began: what a follower reads on from, whatever comes meanwhile
    (stored,) = con.execute(LAST_LOG_SEQ_SQL).fetchall()[0]
    where, params, attempts = _conditions(query, session)
    where += [f"l.seq <= {int(stored)}", *_text_ranges(con, query, int(stored))]
    columns = ", ".join(f"l.{c}" for c in COLUMNS)
    if attempts:
        attribution = "CASE WHEN a.stdout_start IS NULL AND a.stderr_start IS NULL THEN 'inferred' ELSE 'exact' END"
        source = f"log_lines l JOIN ({attempts}) a ON {_OF_ATTEMPT}"
        columns += f", a.task_id, a.attempt, {attribution} AS attribution"
    else:
        source = "log_lines l"
    condition = " AND ".join(where)
    order = "DESC" if query.newest else "ASC"
    lines = f"SELECT {columns} FROM {source} WHERE {condition} ORDER BY l.seq {order} LIMIT {int(query.limit)}"
    try:
        rows, last = con.execute(
            f"SELECT coalesce('[' || string_agg(to_json(r)::VARCHAR, ',' ORDER BY r.seq) || ']', '[]'), max(r.seq) "
            f"FROM ({lines}) r",
            params,
        ).fetchall()[0]
        total = None
        if count:
            (total,) = con.execute(f"SELECT count(*) FROM {source} WHERE {condition}", params).fetchall()[0]
    except duckdb.InvalidInputException as exc:  # a regex RE2 refuses that Python's re took
        raise BadQuery(f"bad query: {exc}") from None
    return LogResult(session, total, rows, stored if last is None else last)
