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
from typing import Any

import duckdb
import orjson

from raysight.errors import BadQuery
from raysight.ingest.agent_logs import STREAMS
from raysight.store import log_index
from raysight.store.queries import resolve_session
from raysight.store.schema import INDEXED_FROM_SQL, LAST_LOG_SEQ_SQL

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "FATAL")
MAX_CONTEXT = 100
MAX_CONTEXT_MATCHES = 10_000
INFERRED_SLACK_NS = 1_000_000_000  # lines are timed when the agent read them: up to about this much after written
COLUMNS = (
    "seq",
    "session",
    "host",
    "file_key",
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


def _of_attempt(file: str, offsets: tuple[str, str], times: tuple[str, str], marked: bool) -> str:
    """Whether what spans ``offsets`` and ``times`` (first, last) of the file ``file`` (an alias with its name,
    stream and worker) holds lines of an attempt ``a``: exact within Ray's byte ranges, else the output of its worker
    while it ran (``marked``: and, for a plain task, under its name's marker)."""
    (first_offset, last_offset), (first_ns, last_ns) = offsets, times
    named = "AND (a.type <> 'NORMAL_TASK' OR l.task_name = a.name)" if marked else ""
    return f"""
    (a.stdout_start IS NOT NULL AND {file}.name = {_BASENAME.format("a.stdout_file")}
        AND {last_offset} >= a.stdout_start AND {first_offset} < a.stdout_end)
    OR (a.stderr_start IS NOT NULL AND {file}.name = {_BASENAME.format("a.stderr_file")}
        AND {last_offset} >= a.stderr_start AND {first_offset} < a.stderr_end)
    OR (a.stdout_start IS NULL AND a.stderr_start IS NULL AND {file}.stream <> 'system'
        AND {file}.worker_id = coalesce(a.worker_id, a.exec_worker_id) {named}
        AND {last_ns} >= coalesce(a.exec_start_ns, a.start_ns, a.first_ns)
        AND coalesce({first_ns} - {INFERRED_SLACK_NS} <= coalesce(a.executed_ns, a.end_ns), true))"""


# The lines of a task's attempts (relation ``a``), and the blocks of a file (``b`` of ``f``) that may hold some
_OF_ATTEMPT = _of_attempt("l", ("l.byte_offset",) * 2, ("l.ts_ns",) * 2, marked=True)  # Ray marks a task's output
_BLOCK_OF_ATTEMPT = _of_attempt("f", ("b.first_offset", "b.last_offset"), ("b.first_ns", "b.last_ns"), marked=False)


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
    context: int = 0  # lines of the same file before and after each match (flagged ``context``), as grep -C


@dataclass(frozen=True)
class LogResult:
    session: str | None
    total: int | None  # every match (None when not counted)
    rows: str  # the lines, a JSON array of objects (made by DuckDB: a page of lines is never a Python object each)
    last_seq: int  # where to follow on from: the last line given, else the last line stored
    dropped: dict[str, Any] | None = None  # what the log retention dropped of the session: lines, through_ms, why


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
    if not 0 <= query.context <= MAX_CONTEXT:
        raise BadQuery(f"context must be 0 to {MAX_CONTEXT} lines")
    if query.context and query.limit > MAX_CONTEXT_MATCHES:
        raise BadQuery(f"with context, limit must be at most {MAX_CONTEXT_MATCHES}: page with after= instead")


def _file_conditions(query: LogQuery, t: str) -> tuple[list[str], dict[str, object]]:
    """Conditions on what a line's file says (worker, pid, name, stream), over the alias ``t`` (a line or a file)."""
    tests: dict[str, tuple[str, object]] = {
        "worker_id": ("{t}.worker_id = $worker_id", query.worker_id),
        "pid": ("{t}.pid = $pid", query.pid),
        "stream": ("{t}.stream = $stream", query.stream),
        "file": ("contains({t}.name, $file)", query.file),
        "actor": (
            """{t}.worker_id IN (SELECT worker_id FROM actors WHERE session = $session AND actor_id = $actor
                                 UNION SELECT coalesce(worker_id, exec_worker_id) FROM tasks
                                 WHERE session = $session AND actor_id = $actor)""",
            query.actor_id,
        ),
        "node": (
            "{t}.worker_id IN (SELECT worker_id FROM workers WHERE session = $session AND node_id = $node)",
            query.node_id,
        ),
    }
    where = [condition.format(t=t) for condition, value in tests.values() if value is not None]
    if query.actor_id is not None and query.stream is None:  # its output, as `ray logs actor`: not Ray's own log
        where.append(f"{t}.stream <> 'system'")
    return where, {name: value for name, (_, value) in tests.items() if value is not None}


def _conditions(query: LogQuery, session: str) -> tuple[list[str], dict[str, object], str]:
    """WHERE conditions over ``l`` (log_lines), their named parameters, and the attempts of a task query (SQL)."""
    where, params = _file_conditions(query, "l")
    where.insert(0, "l.session = $session")
    params["session"] = session
    tests = {
        "job_id": ("l.job_id = $job_id", query.job_id),
        "level": ("l.level = $level", query.level.upper() if query.level else None),
        "grep": ("contains(l.text, $grep)", query.grep),
        "regex": ("regexp_matches(l.text, $regex)", query.regex),
        "since": ("l.ts_ns >= $since", query.since_ns),
        "until": ("l.ts_ns < $until", query.until_ns),
        "after": ("l.seq > $after", query.after_seq),
    }
    for name, (condition, value) in tests.items():
        if value is not None:
            where.append(condition)
            params[name] = value
    if not query.markers:
        where.append("NOT l.marker")
    attempts = ""
    if query.task_id is not None:
        attempts = "SELECT * FROM tasks WHERE session = $session AND task_id = $task"
        params["task"] = query.task_id
        if query.attempt is not None:
            attempts += " AND attempt = $attempt"
            params["attempt"] = query.attempt
    return where, params, attempts


def _blocks(
    con: duckdb.DuckDBPyConnection, query: LogQuery, params: dict[str, object], attempts: str
) -> list[int] | None:
    """The blocks of lines (``store/log_index.py``) that may hold what ``query`` asks for, ascending; None: any.
    A block may hold the text searched for when it has every trigram of it, and lines of a file when it was stored
    with some: of the files the query's worker, pid, name, stream, actor, node or task attempts point to."""
    found: set[int] | None = None
    grams = log_index.needle_grams(
        ([query.grep] if query.grep else []) + log_index.required_literals(query.regex or "")
    )
    if grams:
        has_all = " AND ".join(f"get_bit(grams, {int(bit)}) = 1" for bit in grams)
        found = {b for (b,) in con.execute(f"SELECT block FROM log_blocks WHERE {has_all}").fetchall()}
    files, _ = _file_conditions(query, "f")
    if attempts:
        files.append(f"EXISTS (SELECT 1 FROM ({attempts}) a WHERE {_BLOCK_OF_ATTEMPT})")
    if files:
        sql = f"""SELECT DISTINCT b.block FROM log_file_blocks b JOIN log_files f USING (session, host, file_key)
                  WHERE b.session = $session AND {" AND ".join(files)}"""
        used = set(re.findall(r"\$(\w+)", sql))  # DuckDB refuses parameters a statement does not name
        by_file = {b for (b,) in con.execute(sql, {k: v for k, v in params.items() if k in used}).fetchall()}
        found = by_file if found is None else found & by_file
    return None if found is None else sorted(found)


def _source(ranges: list[tuple[int, int]], attempts: str = "", alias: str = "l") -> str:
    """The lines within ``ranges`` as ``alias`` (each range scanned on its own: DuckDB skips the row groups outside
    it), joined to a task query's attempts as ``a``."""
    scans = " UNION ALL ".join(f"SELECT * FROM log_lines WHERE seq BETWEEN {lo} AND {hi}" for lo, hi in ranges)
    lines = f"({scans or 'SELECT * FROM log_lines WHERE false'}) {alias}"
    return f"{lines} JOIN ({attempts}) a ON {_OF_ATTEMPT}" if attempts else lines


def log_lines(con: duckdb.DuckDBPyConnection, query: LogQuery, count: bool = True) -> LogResult:
    """The lines ``query`` asks for, and how many match in all (when ``count``). Only the blocks that may hold them
    are read, in windows from the first (or, ``newest``, the last) until ``limit`` are found."""
    _check(query)
    session = resolve_session(con, query.session)  # (sessions known by their logs alone too: Store.apply_logs)
    if session is None:
        return LogResult(None, 0, "[]", query.after_seq or 0)
    # The lines looked at are those stored when this began: what a follower reads on from, whatever comes meanwhile
    stored = int(con.execute(LAST_LOG_SEQ_SQL).fetchall()[0][0])
    where, params, attempts = _conditions(query, session)
    ranges = [(0, stored)]
    if (blocks := _blocks(con, query, params, attempts)) is not None:
        (indexed_from,) = con.execute(INDEXED_FROM_SQL).fetchall()[0]
        ranges = log_index.seq_ranges(blocks, stored, int(indexed_from))
    if query.after_seq is not None:
        ranges = log_index.clip(ranges, query.after_seq + 1, stored)
    columns = ", ".join(f"l.{c}" for c in COLUMNS)
    if attempts:
        attribution = "CASE WHEN a.stdout_start IS NULL AND a.stderr_start IS NULL THEN 'inferred' ELSE 'exact' END"
        columns += f", a.task_id, a.attempt, {attribution} AS attribution"
    condition = " AND ".join(where)
    order = "DESC" if query.newest else "ASC"
    pages: list[str] = []
    found, last = 0, None
    try:
        for window in log_index.windows(ranges, query.newest) if query.limit else ():
            page, rows, top = con.execute(
                f"""SELECT string_agg(to_json(r)::VARCHAR, ',' ORDER BY r.seq), count(*), max(r.seq)
                    FROM (SELECT {columns} FROM {_source(window, attempts)} WHERE {condition}
                          ORDER BY l.seq {order} LIMIT {int(query.limit) - found}) r""",
                params,
            ).fetchall()[0]
            if rows:
                pages.append(page)
                found += rows
            if found >= query.limit:
                last = None if query.newest else top  # the newest were found: nothing after them matches
                break
        total = None
        if count:
            (total,) = con.execute(
                f"SELECT count(*) FROM {_source(ranges, attempts)} WHERE {condition}", params
            ).fetchall()[0]
    except duckdb.InvalidInputException as exc:  # a regex RE2 refuses that Python's re took
        raise BadQuery(f"bad query: {exc}") from None
    rows_json = "[" + ",".join(reversed(pages) if query.newest else pages) + "]"
    if query.context and found:
        rows_json = _with_context(con, rows_json, query, stored)
    return LogResult(session, total, rows_json, stored if last is None else last, _dropped(con, session))


def _dropped(con: duckdb.DuckDBPyConnection, session: str) -> dict[str, Any] | None:
    """The marker of what the log retention dropped of ``session`` (``store/log_retention.py``), if anything."""
    row = con.execute(
        """SELECT sum(lines), max(through_ns) // 1000000, max(why) FROM log_dropped WHERE session = ?""", [session]
    ).fetchall()[0]
    return None if row[0] is None else {"lines": int(row[0]), "through_ms": row[1], "why": row[2]}


def _with_context(con: duckdb.DuckDBPyConnection, rows_json: str, query: LogQuery, stored: int) -> str:
    """The matches ``rows_json`` with the ``query.context`` lines before and after each in its file (flagged
    ``context``). Only the blocks that may hold them are read: the file's own around the match's, back and on until
    they hold enough of its lines (``log_file_blocks``)."""
    matches = orjson.loads(rows_json)
    files = [
        {"session": s, "host": h, "file_key": k}
        for s, h, k in {(m["session"], m["host"], m["file_key"]) for m in matches}
    ]
    blocks: dict[tuple[str, str, str], list[tuple[int, int]]] = {}
    for session, host, key, block, lines in con.execute(
        """SELECT b.session, b.host, b.file_key, b.block, b.lines
           FROM log_file_blocks b JOIN (SELECT unnest($files, recursive := true)) f USING (session, host, file_key)
           ORDER BY b.block""",
        {"files": files},
    ).fetchall():
        blocks.setdefault((session, host, key), []).append((block, lines))
    around, read = [], set()
    for m in matches:
        own = log_index.around(blocks[(m["session"], m["host"], m["file_key"])], m["seq"], query.context)
        read.update(own)
        lo, hi = own[0] * log_index.BLOCK_LINES, (own[-1] + 1) * log_index.BLOCK_LINES - 1
        around.append({"seq": m["seq"], **{k: m[k] for k in ("session", "host", "file_key")}, "lo": lo, "hi": hi})
    markers = "" if query.markers else "AND NOT c.marker"
    (context,) = con.execute(
        f"""WITH m AS (SELECT unnest($around, recursive := true)),
            near AS (SELECT {", ".join(f"c.{c}" for c in COLUMNS)}, true AS context
                     FROM {_source(log_index.seq_ranges(sorted(read), stored), alias="c")} JOIN m
                       ON c.session = m.session AND c.host = m.host AND c.file_key = m.file_key
                          AND c.seq BETWEEN m.lo AND m.hi AND c.seq <> m.seq {markers}
                     QUALIFY row_number() OVER (PARTITION BY m.seq, c.seq < m.seq ORDER BY abs(c.seq - m.seq))
                             <= {int(query.context)})
            SELECT coalesce('[' || string_agg(to_json(r)::VARCHAR, ',') || ']', '[]')
            FROM (SELECT DISTINCT ON (seq) * FROM near WHERE seq NOT IN (SELECT seq FROM m)) r""",
        {"around": around},
    ).fetchall()[0]
    return orjson.dumps(sorted([*matches, *orjson.loads(context)], key=lambda row: row["seq"])).decode()
