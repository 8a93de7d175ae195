"""Log lines out of the store: filtered by entity, file, stream, level, time and text, in the order stored.

A task attempt's lines are exact where Ray gave the byte range it printed (``taskLogInfo``: the tasks' ``stdout_*``
and ``stderr_*`` columns): the lines of that file within the range. Where it gave none (actor tasks unless
``RAY_ENABLE_RECORD_ACTOR_TASK_LOGGING=1``, a task whose worker died, everything under Ray's log rotation) they are
the output of the attempt's worker while it ran (under its ``:task_name:`` marker, for a plain task), flagged
``attribution: inferred``. An actor's lines are its workers' output, between calls too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from raysight.errors import BadQuery
from raysight.signals.log_lines import log_index
from raysight.signals.log_lines.parse import SERVE_FIELDS, STREAMS
from raysight.store.schema import INDEXED_FROM_SQL, LAST_LOG_SEQ_SQL
from raysight.store.statements import Macro, Query

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "FATAL")
MAX_CONTEXT = 100
MAX_CONTEXT_MATCHES = 10_000
# An answer's lines are read, rendered and sent a chunk at a time: at most this many lines, and about this much text
CHUNK_ROWS = 5_000
CHUNK_BYTES = 2 << 20
LINE_BYTES = 400  # what a line's JSON holds besides its text, about
INFERRED_SLACK_NS = 1_000_000_000  # lines are timed when the agent read them: up to about this much after written
# ... and a line timed by its file's mtime (or a stamp to the millisecond) may read up to this much before it was
# written: the kernel stamps a write with its coarse clock, a tick (1-10 ms by its HZ) behind the clock Ray's events
# are timed by. A task that prints as it starts printed "before" its attempt began by as much.
EARLY_SLACK_NS = 10_000_000
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
    *SERVE_FIELDS,
    "continued",
    "text",
)
# The attempts a line may be of: each with the names of the files Ray gave its byte ranges in (``stdout_name``,
# ``stderr_name``), worked out once an attempt, not once a line; when it began, as well as Ray said (``begun_ns``);
# and whether Ray gave its byte ranges (``exact``)
LOG_ATTEMPTS = Macro(
    "log_attempts",
    ("of_session",),
    """SELECT *, regexp_extract(stdout_file, '[^/]*$') AS stdout_name,
              regexp_extract(stderr_file, '[^/]*$') AS stderr_name,
              coalesce(exec_start_ns, start_ns, first_ns) AS begun_ns,
              (stdout_start IS NOT NULL OR stderr_start IS NOT NULL) AS exact
       FROM tasks WHERE session = of_session""",
    table=True,
)
MACROS = (LOG_ATTEMPTS,)


def _of_attempt(file: str, offsets: tuple[str, str], times: tuple[str, str], marked: bool) -> str:
    """Whether what spans ``offsets`` and ``times`` (first, last) of the file ``file`` (an alias with its name,
    stream and worker) holds lines of an attempt ``a``: exact within Ray's byte ranges, else the output of its worker
    while it ran (``marked``: and, for a plain task, under its name's marker)."""
    (first_offset, last_offset), (first_ns, last_ns) = offsets, times
    named = "AND (a.type <> 'NORMAL_TASK' OR l.task_name = a.name)" if marked else ""
    return f"""
    (a.stdout_start IS NOT NULL AND {file}.name = a.stdout_name
        AND {last_offset} >= a.stdout_start AND {first_offset} < a.stdout_end)
    OR (a.stderr_start IS NOT NULL AND {file}.name = a.stderr_name
        AND {last_offset} >= a.stderr_start AND {first_offset} < a.stderr_end)
    OR (NOT a.exact AND {file}.stream <> 'system'
        AND {file}.worker_id = coalesce(a.worker_id, a.exec_worker_id) {named}
        AND {last_ns} >= a.begun_ns - {EARLY_SLACK_NS}
        AND coalesce({first_ns} - {INFERRED_SLACK_NS} <= coalesce(a.executed_ns, a.end_ns), true))"""


# The lines of a task's attempts (relation ``a``), and the blocks of a file (``b`` of ``f``) that may hold some
_OF_ATTEMPT = _of_attempt("l", ("l.byte_offset",) * 2, ("l.ts_ns",) * 2, marked=True)  # Ray marks a task's output
_BLOCK_OF_ATTEMPT = _of_attempt("f", ("b.first_offset", "b.last_offset"), ("b.first_ns", "b.last_ns"), marked=False)


@dataclass(frozen=True)
class LogQuery:
    session: str | None = None  # resolved once per request (store/sessions_query.py): None when none is recorded
    task_id: str | None = None
    attempt: int | None = None
    actor_id: str | None = None
    job_id: str | None = None
    worker_id: str | None = None
    pid: int | None = None
    node_id: str | None = None
    file: str | None = None  # a substring of the file's name
    request_id: str | None = None  # a request's lines (Serve's: its proxy's and replicas')
    application: str | None = None  # a Serve application's lines, and a deployment's, a replica's
    deployment: str | None = None
    replica: str | None = None
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
    include_own: bool = False  # a Ray dashboard's lines of raysight's own requests too (its poller's, say)
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
    if query.request_id is not None and not re.fullmatch(r"[\x21-\x7e]{1,256}", query.request_id):
        raise BadQuery(f"request_id must be up to 256 printable characters without spaces, not {query.request_id!r}")
    if query.replica is not None and not re.fullmatch(r"[A-Za-z0-9]{1,64}", query.replica):
        raise BadQuery(f"replica must be a Serve replica's ID (letters and digits), not {query.replica!r}")
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
        "replica": (
            "starts_with({t}.name, 'replica_') AND ends_with({t}.name, '_' || $replica || '.log')",
            query.replica,
        ),
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


def _hidden(query: LogQuery, t: str) -> list[str]:
    """Conditions over the alias ``t`` (a line) that leave out what ``query`` does not ask for: Ray's in-band marker
    lines, and a dashboard's lines of raysight's own requests."""
    return [
        f"NOT {t}.{column}" for column, shown in (("marker", query.markers), ("own", query.include_own)) if not shown
    ]


def _conditions(query: LogQuery, session: str) -> tuple[list[str], dict[str, object], str]:
    """WHERE conditions over ``l`` (log_lines), their named parameters, and the attempts of a task query (SQL)."""
    where, params = _file_conditions(query, "l")
    where.insert(0, "l.session = $session")
    params["session"] = session
    tests = {
        "job_id": ("l.job_id = $job_id", query.job_id),
        "request_id": ("l.request_id = $request_id", query.request_id),
        "application": ("l.application = $application", query.application),
        "deployment": ("l.deployment = $deployment", query.deployment),
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
    where += _hidden(query, "l")
    attempts = ""
    if query.task_id is not None:
        attempts = "SELECT * FROM log_attempts($session) WHERE task_id = $task"
        params["task"] = query.task_id
        if query.attempt is not None:
            attempts += " AND attempt = $attempt"
            params["attempt"] = query.attempt
    return where, params, attempts


def _verbatim(request_id: str | None) -> str | None:
    """A request ID as its lines hold it (JSON escapes a quote and a backslash: no trigrams of such an ID)."""
    return None if request_id is None or '"' in request_id or "\\" in request_id else request_id


def _blocks(
    con: duckdb.DuckDBPyConnection, query: LogQuery, params: dict[str, object], attempts: str
) -> list[int] | None:
    """The blocks of lines (``log_index.py``) that may hold what ``query`` asks for, ascending; None: any.
    A block may hold the text searched for (or a request's ID, which its lines hold) when it has every trigram of it,
    and lines of a file when it was stored with some: of the files the query's worker, pid, name, stream, Serve
    replica, actor, node or task attempts point to."""
    found: set[int] | None = None
    grams = log_index.needle_grams(
        [text for text in (query.grep, _verbatim(query.request_id)) if text]
        + log_index.required_literals(query.regex or "")
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


@dataclass(frozen=True)
class LogPage:
    """The lines a query found (:func:`log_page`), to be read a chunk at a time (:func:`page_rows`)."""

    query: LogQuery
    session: str | None
    total: int | None  # every match (None when not counted)
    last_seq: int  # where to follow on from: the last line given, else the last line stored
    dropped: dict[str, Any] | None  # what the log retention dropped of the session: lines, through_ms, why
    ranges: list[tuple[int, int]] = field(default_factory=list)  # the seq ranges that may hold its lines
    seq: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # its lines, ascending (one per attempt)
    size: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # the length of each one's text
    stored: int = 0  # the last line stored when the query began


def _columns(attempts: str) -> str:
    """What a line of the answer holds (with its attempt's, for a task's lines)."""
    columns = ", ".join(f"l.{c}" for c in COLUMNS)
    if attempts:
        columns += ", a.task_id, a.attempt, CASE WHEN a.exact THEN 'exact' ELSE 'inferred' END AS attribution"
    return columns


def _of_their_attempts(lines: str) -> str:
    """``lines`` (a query of :data:`COLUMNS` and more) with the task attempt each is of, where raysight knows it
    (``task_id`` and ``attempt``, else null): as a task's lines are found (``_OF_ATTEMPT``), exact before inferred, the
    latest begun where two may claim a line. Only the attempts of the lines' workers are read."""
    return f"""
    WITH l AS MATERIALIZED ({lines})
    SELECT l.*, a.task_id, a.attempt
    FROM l LEFT JOIN (SELECT * FROM log_attempts($session)
                      WHERE coalesce(worker_id, exec_worker_id) IN (SELECT worker_id FROM l)) a
        ON coalesce(a.worker_id, a.exec_worker_id) = l.worker_id AND ({_OF_ATTEMPT})
    QUALIFY row_number() OVER (PARTITION BY l.seq ORDER BY a.exact DESC, a.begun_ns DESC) = 1"""


def log_page(con: duckdb.DuckDBPyConnection, query: LogQuery, count: bool = True) -> LogPage:
    """Which lines ``query`` asks for, and how many match in all (when ``count``). Only the blocks that may hold them
    are read, in windows from the first (or, ``newest``, the last) until ``limit`` are found; of each line only its
    ``seq`` and its text's length are kept here, to cut the page into chunks of about :data:`CHUNK_BYTES`."""
    _check(query)
    session = query.session  # (resolved by the caller: None when none is recorded)
    if session is None:
        return LogPage(query, None, 0, query.after_seq or 0, None)
    # The lines looked at are those stored when this began: what a follower reads on from, whatever comes meanwhile
    stored = int(con.execute(LAST_LOG_SEQ_SQL).fetchall()[0][0])
    where, params, attempts = _conditions(query, session)
    ranges = [(0, stored)]
    if (blocks := _blocks(con, query, params, attempts)) is not None:
        (indexed_from,) = con.execute(INDEXED_FROM_SQL).fetchall()[0]
        ranges = log_index.seq_ranges(blocks, stored, int(indexed_from))
    if query.after_seq is not None:
        ranges = log_index.clip(ranges, query.after_seq + 1, stored)
    condition = " AND ".join(where)
    order = "DESC" if query.newest else "ASC"
    seqs, sizes = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    found, last = 0, None
    try:
        for window in log_index.windows(ranges, query.newest) if query.limit else ():
            lines = con.execute(
                f"""SELECT l.seq, strlen(l.text) AS size FROM {_source(window, attempts)} WHERE {condition}
                    ORDER BY l.seq {order} LIMIT {int(query.limit) - found}""",
                params,
            ).fetchnumpy()
            seqs.append(lines["seq"])
            sizes.append(lines["size"])
            found += len(lines["seq"])
            if found >= query.limit:
                last = None if query.newest else int(lines["seq"][-1])  # the newest found: none after them matches
                break
        total = None
        if count:
            (total,) = con.execute(
                f"SELECT count(*) FROM {_source(ranges, attempts)} WHERE {condition}", params
            ).fetchall()[0]
    except duckdb.InvalidInputException as exc:  # a regex RE2 refuses that Python's re took
        raise BadQuery(f"bad query: {exc}") from None
    seq, size = np.concatenate(seqs), np.concatenate(sizes)
    ascending = np.argsort(seq, kind="stable")
    last_seq = stored if last is None else last
    return LogPage(
        query, session, total, last_seq, _dropped(con, session), ranges, seq[ascending], size[ascending], stored
    )


def _chunks(seq: np.ndarray, size: np.ndarray) -> Iterator[tuple[int, int]]:
    """The lines ``seq`` (ascending, with their texts' sizes) cut into chunks (start, end) of at most
    :data:`CHUNK_ROWS` lines and about :data:`CHUNK_BYTES` (a line longer than that alone); a line's rows (one per
    attempt it is of) in one."""
    spent = np.cumsum(size + LINE_BYTES)
    starts = (np.diff(spent // CHUNK_BYTES, prepend=-1) != 0) | (np.arange(len(seq)) % CHUNK_ROWS == 0)
    starts &= np.diff(seq, prepend=-1) != 0
    first = np.flatnonzero(starts)
    return zip(first.tolist(), [*first[1:].tolist(), len(seq)])


def page_rows(con: duckdb.DuckDBPyConnection, page: LogPage) -> Iterator[str]:
    """The page's lines (with ``context``, and the lines around them in their files, flagged so), a chunk at a time:
    JSON objects joined by commas, made by DuckDB (a line is never a Python object)."""
    if page.session is None or not len(page.seq):
        return
    where, params, attempts = _conditions(page.query, page.session)
    seq, size, near = page.seq, page.size, np.zeros(len(page.seq), np.bool_)
    if page.query.context:
        around, around_size = _context(con, page)
        seq, size = np.concatenate([seq, around]), np.concatenate([size, around_size])
        near = np.concatenate([near, np.ones(len(around), np.bool_)])
        ascending = np.argsort(seq, kind="stable")
        seq, size, near = seq[ascending], size[ascending], near[ascending]
    order = "DESC" if page.query.newest else "ASC"  # the same lines as the page's, where a line is of two attempts
    for start, end in _chunks(seq, size):
        lo, hi = int(seq[start]), int(seq[end - 1])
        found, context = seq[start:end][~near[start:end]], seq[start:end][near[start:end]].tolist()
        parts, named = [], {}
        if len(found):  # read again where they are: the blocks that hold them (a match is in no other)
            blocks = np.unique(found // log_index.BLOCK_LINES).tolist()
            lines = _source(log_index.clip(log_index.seq_ranges(blocks, hi), lo, hi), attempts)
            matches = f"""SELECT {_columns(attempts)} FROM {lines} WHERE {" AND ".join(where)}
                           ORDER BY l.seq {order} LIMIT {len(found)}"""
            rows = matches if attempts else _of_their_attempts(matches)  # (a task's lines say their attempt)
            parts.append(f"SELECT r.seq, to_json(r)::VARCHAR AS line FROM ({rows}) r")
            named.update(params)
        if context:
            nearby = f"""SELECT {", ".join(f"l.{c}" for c in COLUMNS)}, true AS context FROM log_lines l
                         WHERE l.seq BETWEEN {lo} AND {hi} AND l.seq IN (SELECT unnest($context::BIGINT[]))"""
            parts.append(f"SELECT c.seq, to_json(c)::VARCHAR AS line FROM ({_of_their_attempts(nearby)}) c")
            named.update(context=context, session=page.session)
        (piece,) = con.execute(
            f"SELECT string_agg(line, ',' ORDER BY seq) FROM ({' UNION ALL '.join(parts)})", named
        ).fetchall()[0]
        yield piece or ""


def log_lines(con: duckdb.DuckDBPyConnection, query: LogQuery, count: bool = True) -> LogResult:
    """The lines ``query`` asks for (:func:`log_page`) read whole: for answers that a caller reads at once."""
    page = log_page(con, query, count)
    rows = ",".join(piece for piece in page_rows(con, page) if piece)
    return LogResult(page.session, page.total, f"[{rows}]", page.last_seq, page.dropped)


LOGS_DROPPED = Query(
    "logs dropped",
    "SELECT sum(lines), max(through_ns) // 1000000, max(why) FROM log_dropped WHERE session = $session",
    about="what the log retention dropped of the session (signals/log_lines/log_retention.py)",
)


def _dropped(con: duckdb.DuckDBPyConnection, session: str) -> dict[str, Any] | None:
    """The marker of what the log retention dropped of ``session`` (``log_retention.py``), if anything."""
    row = con.execute(LOGS_DROPPED.sql, {"session": session}).fetchall()[0]
    return None if row[0] is None else {"lines": int(row[0]), "through_ms": row[1], "why": row[2]}


def _context(con: duckdb.DuckDBPyConnection, page: LogPage) -> tuple[np.ndarray, np.ndarray]:
    """The lines within ``context`` lines of the page's in their files (not among the page's): their ``seq`` and
    text's length, ascending. Only the blocks that may hold them are read: each file's own around a line's, back and
    on until they hold enough of its lines (``log_file_blocks``); their lines are numbered in each file, and those
    near a line's number kept (integers all along: the lines themselves are read a chunk at a time)."""
    lines = con.execute(
        """SELECT seq, host, file_key FROM log_lines
           WHERE seq BETWEEN $lo AND $hi AND seq IN (SELECT unnest($seqs::BIGINT[]))""",
        {"lo": int(page.seq[0]), "hi": int(page.seq[-1]), "seqs": page.seq.tolist()},
    ).fetchall()
    files = [{"host": h, "file_key": k, "file": i} for i, (h, k) in enumerate({(h, k) for _, h, k in lines})]
    blocks: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for host, key, block, count in con.execute(
        """SELECT b.host, b.file_key, b.block, b.lines
           FROM log_file_blocks b JOIN (SELECT unnest($files, recursive := true)) f USING (host, file_key)
           WHERE b.session = $session ORDER BY b.block""",
        {"files": files, "session": page.session},
    ).fetchall():
        blocks.setdefault((host, key), []).append((block, count))
    read = {block for seq, h, k in lines for block in log_index.around(blocks[(h, k)], seq, page.query.context)}
    hidden = "".join(f" AND {condition}" for condition in _hidden(page.query, "l"))
    context = int(page.query.context)
    near = con.execute(
        f"""WITH m AS (SELECT unnest($lines, recursive := true)),
            f AS (SELECT l.seq, strlen(l.text) AS size, fs.file,
                         row_number() OVER (PARTITION BY fs.file ORDER BY l.seq) AS n
                  FROM {_source(log_index.seq_ranges(sorted(read), page.stored))}
                  JOIN (SELECT unnest($files, recursive := true)) fs USING (host, file_key)
                  WHERE l.session = $session{hidden}),
            around AS (SELECT f.file, unnest(range(f.n - {context}, f.n + {context} + 1)) AS n
                       FROM f SEMI JOIN m USING (seq))
            SELECT DISTINCT f.seq, f.size FROM f JOIN around USING (file, n)
            WHERE f.seq NOT IN (SELECT seq FROM m) ORDER BY f.seq""",
        {"lines": [{"seq": seq} for seq, _, _ in lines], "files": files, "session": page.session},
    ).fetchnumpy()
    return near["seq"], near["size"]
