"""A node agent's batch of log lines (``POST /ingest/agent/logs``): checked, and turned into rows. Pure.

The agent (``agent/node_agent.py``) sends JSON (``wire.AgentLogs``), columns per file::

    {"host": "node-1", "utc_offset_s": 3600,
     "files": [{"session": "session_…", "key": "2049-1234-0", "name": "worker-….out", "path": "old/worker-….out.1",
                "stream": "stdout", "worker_id": "…", "job_id": "01000000", "pid": 6767,
                "end": 4096, "read_ns": 1795288476000000000,
                "offsets": [0, 17], "texts": [":job_id:01000000", "hello"], "raw": [null, null],
                "continued": [false, false], "markers": [true, false],
                "jobs": ["01000000", "01000000"], "tasks": [null, "f"], "actors": [null, null]}],
     "gaps": [{"session": "session_…", "key": "…", "name": "…", "start": 0, "end": 100, "why": "…"}]}

A file's ``key`` names its bytes (device, inode, an ID of the agent's: a truncated file starts anew); ``offsets`` are
where each record starts in them, increasing, and ``end`` is where the next batch starts, so the store keeps each
record once however often a batch is resent. ``raw`` holds a record's bytes (base64) where they are not UTF-8 and
``texts`` shows them with replacement characters. ``continued`` flags the pieces of a line over 64 KiB after its
first; ``markers`` Ray's in-band lines (``:job_id:``, ``:task_name:``, ``:actor_name:``), which give the job, task
and actor in force (``jobs``, ``tasks``, ``actors``). ``read_ns`` is when the agent read the records, or when their
file was last written if earlier: the time of a line that shows none (``LINE_TIME``); ``utc_offset_s`` is the agent's,
for the local time Ray stamps its lines in.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import NoneType, UnionType
from typing import Any, get_args, get_origin, get_type_hints

import pyarrow as pa

from raysight import wire
from raysight.errors import BadIngest
from raysight.ingest.fields import MAX_KEY, agent_batch, int_field, session_field, text_field
from raysight.tables import Column, Table, columns

STREAMS = ("stdout", "stderr", "system")
MAX_LOG_LINES = 200_000  # in one batch
# What a file's key, name, worker ID and host take, repeated on each of its lines: a 16 MiB body of 200k lines must
# not become gigabytes
MAX_REPEATED_BYTES = 64 * 1024 * 1024


def _less_none(hint: Any) -> tuple[Any, bool]:
    """``hint`` less its ``| None``, and whether it had one."""
    if get_origin(hint) is not UnionType or NoneType not in get_args(hint):
        return hint, False
    (rest,) = (arg for arg in get_args(hint) if arg is not NoneType)
    return rest, True


# A file's columns, as wire.LogColumns declares them (``list[str | None] | None``): (element type, nullable)
_COLUMNS = {
    name: _less_none(get_args(_less_none(hint)[0])[0]) for name, hint in get_type_hints(wire.LogColumns).items()
}
# …and the column of LINES_SCHEMA each becomes, where named otherwise
_LINE_COLUMN = {
    "offsets": "byte_offset",
    "texts": "text",
    "markers": "marker",
    "jobs": "job_id",
    "tasks": "task_name",
    "actors": "actor_name",
}

# What a line says of itself is read in SQL over ``text`` and its file's ``name``, in layers (:func:`read_lines`): each
# layer's values computed once from the line and the layers before it, and the fields (:data:`LINE_FIELDS`) made of
# them. (DuckDB evaluates an expression wherever it is written: Serve's fields written out whole read a line's JSON and
# Serve's prefix a dozen times each, 30 µs a line.)
_JSON_KEYS = ["levelname", "level", "asctime", "message", "request_id", "trace_id", "span_id", "route"]
_JSON_KEYS += ["application", "deployment"]


def _json(key: str) -> str:
    """A JSON line's ``key``, where not empty."""
    return f"nullif(_json[{_JSON_KEYS.index(key) + 1}], '')"


# The stamp of Ray's C++ and Python formats
_STAMP = r"^(?:[A-Z]+ )?\[?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})"
# When a line says it was written, given the agent's ``utc_offset_s`` (for the local time Ray writes): its stamp, or
# the ``asctime`` of Ray's and Serve's JSON lines; NULL where the line has none (a task's prints) or the agent sent no
# offset (read_lines' ``also``).
STAMPED_NS = (
    f"epoch_ns(try_strptime(coalesce({_json('asctime')}, nullif(regexp_extract(text, '{_STAMP}', 1), '')), "
    "'%Y-%m-%d %H:%M:%S,%g')) - utc_offset_s::BIGINT * 1000000000"
)
# A line's time: its stamp, unless that is more than a day before it was read or a minute after (not its own, then:
# a date the program printed); else when the agent read it, or its file was last written if earlier (``read_ns``).
LINE_TIME = "CASE WHEN stamped BETWEEN read_ns - 86400000000000 AND read_ns + 60000000000 THEN stamped ELSE read_ns END"

# The line a Ray 2.60 dashboard logs of each request it serves (aiohttp's access log, in Ray's format ``%a %t '%r' %s
# %b bytes %D us '%{Referer}i' '%{User-Agent}i'``) ends with the client's User-Agent: raysight's on its own requests
# (``config.USER_AGENT``), in SQL over ``text``.
OWN_REQUEST = "contains(text, ' ''raysight/') AND regexp_matches(text, ' ''raysight/[^'' ]+''$')"

# Serve's logs (``logs/serve/``; Ray 2.60's ``serve/_private/logging_utils.py``): a file per component,
# ``controller_<pid>.log``, ``proxy_<node ip>.log`` and ``replica_<app>_<deployment>_<replica>.log`` (``<app>_`` left
# out for an application without a name), rotated to NAME.1 … (a file's name is kept less its rotation). A text line is
# ``LEVEL time component component_id [request_id] [extra attributes] -- message``, a replica's component being
# ``<app>_<deployment>``; a JSON line (``LoggingConfig(encoding="JSON")``) says ``request_id``, ``route``,
# ``application`` (within a request), ``deployment`` (``<app>_<deployment>`` again), ``replica``, ``component_name``
# and ``component_id``. Any other line of a Serve file (a replica's print under ``RAY_SERVE_LOG_TO_STDERR=0``, a
# traceback's) is its component's all the same.
SERVE_FILE = r"^(controller|proxy|replica)_(.+)\.log$"
SERVE_REPLICA_FILE = r"^replica_(.+)_([A-Za-z0-9]+)\.log$"
SERVE_TEXT = r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d{4}-\d\d-\d\d [0-9:,]+ (\S+) (\S+) (?:([^\s-]\S*) )?.*?-- "
# An access line's message (``access_log_msg``): the proxy's ``GET / 200 8.9ms``, a replica's ``CALL __call__ OK
# 0.2ms`` (a handle call: the method called) or ``GET / 200 1.1ms`` (an ingress's HTTP request), the client's address
# first under ``RAY_SERVE_LOG_CLIENT_ADDRESS=1``: (client, method, route, status, latency in ms)
ACCESS_LINE = r"^(?:(\S+) )?(\S+) (\S+) ([1-5]\d\d|OK|ERROR|CANCELLED) (\d+(?:\.\d+)?)ms$"
_ACCESS_PARTS = "['client', 'method', 'target', 'status', 'ms']"


@dataclass(frozen=True)
class Access:
    """What a Serve access line says of a request: ``route`` is the method called where ``method`` is ``CALL``."""

    method: str
    route: str
    status: str  # an HTTP code, or OK, ERROR, CANCELLED
    latency_ms: float
    client: str | None = None


def access(message: str) -> Access | None:
    """The request a Serve access line's message (:data:`ACCESS_LINE`) tells of; None for any other message."""
    if m := re.fullmatch(ACCESS_LINE, message):
        return Access(m[2], m[3], m[4], float(m[5]), m[1])
    return None


# The layers: whether the line is JSON and its file Serve's (and which); the line's JSON values, Serve's kind of file
# and the parts of Serve's prefix (``_prefix.component`` empty: none); the line's message and a replica's
# ``<app>_<deployment>`` as its JSON or text line says it (its file's name has Ray's special characters replaced);
# then its access line's parts and its application, as a JSON line of a request says it, else the part before the
# first underscore.
_LINE_LAYERS: list[dict[str, str]] = [
    {
        "_is_json": "left(text, 1) = '{' AND json_valid(text)",
        "_file": f"regexp_extract(name, '{SERVE_FILE}', ['kind', 'id'])",
        "_replica_file": f"regexp_extract(name, '{SERVE_REPLICA_FILE}', ['app_deployment', 'replica'])",
    },
    {
        "_json": f"CASE WHEN _is_json THEN json_extract_string(text, {['$.' + key for key in _JSON_KEYS]}) END",
        "_serve": "nullif(_file.kind, '')",
        "_prefix": f"""CASE WHEN _file.kind <> '' AND NOT _is_json
            THEN regexp_extract(text, '{SERVE_TEXT}((?s:.*))', ['component', 'id', 'request_id', 'message']) END""",
    },
    {
        "_message": f"""CASE WHEN _is_json THEN _json[{_JSON_KEYS.index("message") + 1}]
                             WHEN _prefix.component <> '' THEN _prefix.message ELSE text END""",
        "_app_deployment": f"""coalesce({_json("deployment")}, nullif(_prefix.component, ''),
                                        nullif(_replica_file.app_deployment, ''))""",
    },
    {
        "_access": f"CASE WHEN _serve IS NOT NULL THEN regexp_extract(_message, '{ACCESS_LINE}', {_ACCESS_PARTS}) END",
        "_application": f"""CASE WHEN _serve IS NOT NULL THEN coalesce({_json("application")},
            CASE WHEN _serve = 'replica' AND contains(_app_deployment, '_')
                 THEN split_part(_app_deployment, '_', 1) END) END""",
    },
]

# What Serve's lines say, or their file's name where they do not (null for the lines of other files): component
# (controller, proxy, replica) and component ID (a pid, a node's IP, a replica's ID), route (an HTTP access line's
# where no JSON says it), application and deployment
SERVE_FIELDS = {
    "component": "_serve",
    "component_id": "CASE _serve WHEN 'replica' THEN nullif(_replica_file.replica, '') ELSE nullif(_file.id, '') END",
    "replica": "CASE WHEN _serve = 'replica' THEN nullif(_replica_file.replica, '') END",
    "route": f"""CASE WHEN _serve IS NOT NULL THEN coalesce({_json("route")},
        CASE WHEN nullif(_access.method, '') <> 'CALL' THEN nullif(_access.target, '') END) END""",
    "application": "_application",
    "deployment": """CASE WHEN _serve = 'replica' THEN CASE
            WHEN starts_with(_app_deployment, _application || '_') THEN _app_deployment[strlen(_application) + 2:]
            ELSE _app_deployment END END""",
}

# What a line says of itself: its level (Ray's C++ format ``[2026-11-21 19:14:33,944 I 6603 6603]``, Python's
# ``INFO``/``2026-11-21 19:14:33,944\tINFO`` and Serve's); for a JSON line (Ray's and Serve's JSON logging), its level
# (``levelname``, else ``level``: an empty value is none), trace and span IDs; its request ID (a JSON line's, a Serve
# text line's); what Serve's lines say (:data:`SERVE_FIELDS`); whether it is a dashboard's line of raysight's own
# request.
LINE_FIELDS = {
    "level": f"""CASE
        WHEN _is_json THEN upper(coalesce({_json("levelname")}, {_json("level")}))
        ELSE coalesce(
            CASE regexp_extract(text, '^\\[\\d{{4}}-\\d\\d-\\d\\d [0-9:,.]+ ([DIWEF]) \\d+ \\d+\\]', 1)
                WHEN 'D' THEN 'DEBUG' WHEN 'I' THEN 'INFO' WHEN 'W' THEN 'WARNING' WHEN 'E' THEN 'ERROR'
                WHEN 'F' THEN 'FATAL' END,
            nullif(regexp_extract(text, '^(?:\\S+ \\S+\\t)?(DEBUG|INFO|WARNING|ERROR|CRITICAL)\\b', 1), ''))
        END""",
    "request_id": f"""coalesce({_json("request_id")},
        CASE WHEN _serve IS NOT NULL THEN nullif(_prefix.request_id, '') END)""",
    **{name: _json(name) for name in ("trace_id", "span_id")},
    **SERVE_FIELDS,
    "own": OWN_REQUEST,
}


ACCESS = {"access": "_access"}  # a Serve line's access line, read as its parts (for serve_requests_sql)


def read_lines(source: str, also: Mapping[str, str] | None = None) -> str:
    """A SELECT of ``source``'s rows (SQL with ``text`` and ``name`` columns) with what each line says of itself
    (:data:`LINE_FIELDS`) and ``also`` (more fields, named, of the same layers: :data:`STAMPED_NS`)."""
    query = source
    for layer in _LINE_LAYERS:
        query = f"SELECT *, {', '.join(f'{sql} AS {name}' for name, sql in layer.items())} FROM ({query})"
    fields = ", ".join(f"{sql} AS {name}" for name, sql in {**LINE_FIELDS, **(also or {})}.items())
    layered = ", ".join(name for layer in _LINE_LAYERS for name in layer)
    return f"SELECT * EXCLUDE ({layered}), {fields} FROM ({query})"


# What Serve's lines say (:data:`SERVE_FIELDS`; null for the lines of other files), added in schema 18
SERVE_COLUMNS = [Column(name, "VARCHAR", added=True) for name in SERVE_FIELDS]

# Log lines as the node agents read them (raw input, never folded away): a line, or a piece of one over 64 KiB
# (``continued``), of a file (``file_key``: its device, inode, the agent's ID of its bytes) at ``byte_offset``. ``seq``
# orders the lines as they were stored (what `raysight logs --follow` reads on from). ``raw`` keeps the bytes of a
# line that is not UTF-8 (``text`` shows them with replacement characters). ``own`` flags a Ray dashboard's line of a
# request raysight made (:data:`LINE_FIELDS`; false for the lines stored before schema 17).
LOG_LINES = Table(
    "log_lines",
    columns(
        seq="BIGINT",
        session="VARCHAR",
        host="VARCHAR",
        file_key="VARCHAR",
        name="VARCHAR",
        stream="VARCHAR",
        worker_id="VARCHAR",
        pid="INTEGER",
        job_id="VARCHAR",
        task_name="VARCHAR",
        actor_name="VARCHAR",
        byte_offset="BIGINT",
        ts_ns="BIGINT",
        level="VARCHAR",
        request_id="VARCHAR",
        trace_id="VARCHAR",
        span_id="VARCHAR",
        continued="BOOLEAN",
        marker="BOOLEAN",
        text="VARCHAR",
        raw="BLOB",
    )
    + [Column("own", "BOOLEAN", default="false", added=True)]
    + SERVE_COLUMNS,
)
# Each file's bytes stored so far: a resent batch's lines before ``end_offset`` are already there.
LOG_FILES = Table(
    "log_files",
    columns(
        session="VARCHAR",
        host="VARCHAR",
        file_key="VARCHAR",
        name="VARCHAR",
        path="VARCHAR",
        stream="VARCHAR",
        worker_id="VARCHAR",
        job_id="VARCHAR",
        pid="INTEGER",
        end_offset="BIGINT",
        first_ns="BIGINT",
        last_ns="BIGINT",
    ),
    key=("session", "host", "file_key"),
)
# Bytes an agent could not read (a file deleted before its end was read): shown by `raysight doctor`.
LOG_GAPS = Table(
    "log_gaps",
    columns(
        session="VARCHAR",
        host="VARCHAR",
        file_key="VARCHAR",
        name="VARCHAR",
        start_offset="BIGINT",
        end_offset="BIGINT",
        why="VARCHAR",
        received_at="TIMESTAMPTZ",
    ),
    key=("session", "host", "file_key", "start_offset"),
)
# Which trigrams each block of lines' text holds, and which blocks hold each file's lines (with their byte offsets and
# times): what a query may skip (``log_index.py``).
LOG_BLOCKS = Table("log_blocks", columns(block="BIGINT", grams="BIT"), key=("block",))
LOG_FILE_BLOCKS = Table(
    "log_file_blocks",
    columns(
        session="VARCHAR",
        host="VARCHAR",
        file_key="VARCHAR",
        block="BIGINT",
        lines="BIGINT",
        first_offset="BIGINT",
        last_offset="BIGINT",
        first_ns="BIGINT",
        last_ns="BIGINT",
    )
    + [Column("bytes", "BIGINT", added=True)],  # (schema 10)
    key=("session", "host", "file_key", "block"),
)
# What the server's log retention dropped of each file: its first ``lines``, through this offset and time.
LOG_DROPPED = Table(
    "log_dropped",
    columns(
        session="VARCHAR",
        host="VARCHAR",
        file_key="VARCHAR",
        lines="BIGINT",
        through_offset="BIGINT",
        through_ns="BIGINT",
        why="VARCHAR",
        dropped_at="TIMESTAMPTZ",
    ),
    key=("session", "host", "file_key"),
)
# Serve's requests (schema 19): a row per access line of a proxy or replica (:data:`ACCESS_LINE`), its line's
# ``seq``, stored with it. ``route`` is the request's HTTP route where the line says it (an HTTP access line's, a JSON
# line's); ``method`` the HTTP method, or ``CALL`` for a handle call, whose method called is ``call``; ``status`` an
# HTTP code, or OK, ERROR, CANCELLED; ``client`` the client's address, where Serve logs it.
SERVE_REQUESTS = Table(
    "serve_requests",
    columns(
        session="VARCHAR",
        seq="BIGINT",
        ts_ns="BIGINT",
        host="VARCHAR",
        component="VARCHAR",
        replica="VARCHAR",
        application="VARCHAR",
        deployment="VARCHAR",
        request_id="VARCHAR",
        route="VARCHAR",
        method="VARCHAR",
        call="VARCHAR",
        status="VARCHAR",
        latency_ms="DOUBLE",
        client="VARCHAR",
    ),
    key=("session", "seq"),
)


def serve_requests_sql(read: str) -> str:
    """The rows of :data:`SERVE_REQUESTS` that the lines of ``read`` (:func:`read_lines` of lines with their
    ``seq`` and ``ts_ns``, with :data:`ACCESS` among its fields) hold: the access lines of Serve's proxies and
    replicas (within a request: a print that reads like one is not)."""
    return f"""SELECT session, seq, ts_ns, host, component, replica, application, deployment, request_id, route,
                      access.method, CASE WHEN access.method = 'CALL' THEN access.target END AS call, access.status,
                      access.ms::DOUBLE AS latency_ms, nullif(access.client, '') AS client
               FROM ({read})
               WHERE component IN ('proxy', 'replica') AND request_id IS NOT NULL AND access.method <> ''"""


LOG_TABLES = [LOG_LINES, LOG_FILES, LOG_GAPS, LOG_BLOCKS, LOG_FILE_BLOCKS, LOG_DROPPED, SERVE_REQUESTS]

# What a batch stages of them: a line less what the store reads from it (its time: LINE_TIME; LINE_FIELDS) and numbers
# it by, with when it was read, the agent's UTC offset and its raw bytes as base64; a file's end less the times it was
# read first and last, with when it was this time; a gap less when it came.
READ_NS = Column("read_ns", "BIGINT")
LINES_SCHEMA = LOG_LINES.arrow_schema(
    omit=("seq", "ts_ns", *LINE_FIELDS, "raw"),
    add=[READ_NS, Column("utc_offset_s", "INTEGER"), Column("raw", "VARCHAR")],
)
FILES_SCHEMA = LOG_FILES.arrow_schema(omit=("first_ns", "last_ns"), add=[READ_NS])
GAPS_SCHEMA = LOG_GAPS.arrow_schema(omit=("received_at",))


@dataclass(frozen=True)
class LogBatch:
    """A batch checked, as columns (lists): the ingest route only counts its lines, the store makes tables of them."""

    lines: dict[str, list[Any]]  # LINES_SCHEMA
    files: dict[str, list[Any]]  # FILES_SCHEMA: one row per file of the batch
    gaps: dict[str, list[Any]]  # GAPS_SCHEMA
    appends: list[tuple[int, int, int]] = field(default_factory=list)  # (file row, first line, lines): see placed()

    @property
    def line_count(self) -> int:
        return len(self.lines["text"])

    def tables(self) -> tuple[pa.Table, pa.Table, pa.Table]:
        """(lines, files, gaps) as Arrow tables."""
        return (
            pa.table(self.lines, schema=LINES_SCHEMA),
            pa.table(self.files, schema=FILES_SCHEMA),
            pa.table(self.gaps, schema=GAPS_SCHEMA),
        )


def _base64(text: str) -> bool:
    try:
        binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _column(file: Mapping[str, Any], name: str, count: int, where: str) -> list[Any]:
    kind, nullable = _COLUMNS[name]
    values = file.get(name)
    if values is None and nullable:
        return [None] * count
    if not isinstance(values, list) or len(values) != count:
        raise BadIngest(f"{where}: {name} must be a list as long as offsets")
    for value in values:
        if not (type(value) is kind or (value is None and nullable)):
            raise BadIngest(f"{where}: {name} holds {type(value).__name__}, not {kind.__name__}")
    return values


def parse(body: bytes, max_lines: int) -> LogBatch:
    """The rows of an agent's batch; BadIngest says what is wrong with one that is not well formed."""
    sent, host = agent_batch(body, "files", '{"host", "files": [...], "gaps": [...]}')
    batch = wire.shaped(sent, wire.AgentLogs)
    utc_offset = int_field(batch["utc_offset_s"], "utc_offset_s", optional=True, low=-86400, high=86400)
    lines: dict[str, list[Any]] = {name: [] for name in LINES_SCHEMA.names}
    files: dict[str, list[Any]] = {name: [] for name in FILES_SCHEMA.names}
    appends: list[tuple[int, int, int]] = []
    repeated = 0
    for i, sent_file in enumerate(batch["files"]):
        where = f"files[{i}]"
        if not isinstance(sent_file, dict):
            raise BadIngest(f"{where} must be an object")
        file = wire.shaped(sent_file, wire.LogFile)
        offsets = file["offsets"]
        if not isinstance(offsets, list):
            raise BadIngest(f"{where}: offsets must be a list")
        count = len(offsets)
        if len(lines["text"]) + count > max_lines:
            raise BadIngest(f"over {max_lines} lines in one batch")
        columns = {name: _column(file, name, count, where) for name in _COLUMNS}
        end = int_field(file["end"], f"{where}: end")
        assert end is not None
        if any(b <= a for a, b in zip(offsets, offsets[1:])) or (offsets and (offsets[0] < 0 or offsets[-1] >= end)):
            raise BadIngest(f"{where}: offsets must increase, from 0 and below end")
        stream = file["stream"]
        if stream not in STREAMS:
            raise BadIngest(f"{where}: stream must be one of {', '.join(STREAMS)}")
        meta = {
            "session": session_field(file["session"], f"{where}: session"),
            "host": host,
            "file_key": text_field(file["key"], f"{where}: key", limit=MAX_KEY),
            "name": text_field(file["name"], f"{where}: name", limit=MAX_KEY),
            "stream": stream,
            "worker_id": text_field(file["worker_id"], f"{where}: worker_id", optional=True, limit=MAX_KEY),
            "pid": int_field(file["pid"], f"{where}: pid", optional=True, high=2**31 - 1),
            "read_ns": int_field(file["read_ns"], f"{where}: read_ns"),
        }
        repeated += count * sum(len(value) for value in meta.values() if isinstance(value, str))
        if repeated > MAX_REPEATED_BYTES:
            raise BadIngest(
                f"{where}: its file's fields, stored on each of its lines, take the batch over "
                f"{MAX_REPEATED_BYTES:,} bytes: send fewer lines per batch"
            )
        if bad := next((value for value in columns["raw"] if value is not None and not _base64(value)), None):
            raise BadIngest(f"{where}: raw holds {bad[:40]!r}, not base64")
        for name, value in meta.items():
            lines[name].extend([value] * count)
            files[name].append(value)
        lines["utc_offset_s"].extend([utc_offset] * count)
        files["path"].append(text_field(file["path"], f"{where}: path"))
        files["job_id"].append(text_field(file["job_id"], f"{where}: job_id", optional=True))
        files["end_offset"].append(end)
        if (append := file["append"]) is not None and append is not False:
            if append is not True:
                raise BadIngest(f"{where}: append must be true or false")
            appends.append((len(files["end_offset"]) - 1, len(lines["text"]), count))
        for name, values in columns.items():
            lines[_LINE_COLUMN.get(name, name)].extend(values)
    return LogBatch(lines, files, _gaps(batch["gaps"], host), appends)


def placed(batch: LogBatch, ends: dict[tuple[str, str, str], int]) -> LogBatch:
    """``batch`` with the lines of the files it appends to (``"append": true``: offsets from 0, as the OTLP receiver
    sends) placed after what the store has of them: ``ends`` by (session, host, key), brought up to date."""
    if not batch.appends:
        return batch
    offsets, file_ends = list(batch.lines["byte_offset"]), list(batch.files["end_offset"])
    for row, first, count in batch.appends:
        key = (batch.files["session"][row], batch.files["host"][row], batch.files["file_key"][row])
        base = ends.get(key, 0)
        offsets[first : first + count] = [offset + base for offset in offsets[first : first + count]]
        file_ends[row] += base
        ends[key] = file_ends[row]
    lines, files = {**batch.lines, "byte_offset": offsets}, {**batch.files, "end_offset": file_ends}
    return LogBatch(lines, files, batch.gaps, batch.appends)


def _gaps(gaps: list[wire.LogGap] | None, host: str | None) -> dict[str, list[Any]]:
    rows: dict[str, list[Any]] = {name: [] for name in GAPS_SCHEMA.names}
    if gaps is None:
        gaps = []
    if not isinstance(gaps, list):
        raise BadIngest("gaps must be a list")
    for i, sent_gap in enumerate(gaps):
        where = f"gaps[{i}]"
        if not isinstance(sent_gap, dict):
            raise BadIngest(f"{where} must be an object")
        gap = wire.shaped(sent_gap, wire.LogGap)
        rows["session"].append(session_field(gap["session"], f"{where}: session"))
        rows["host"].append(host)
        rows["file_key"].append(text_field(gap["key"], f"{where}: key"))
        rows["name"].append(text_field(gap["name"], f"{where}: name"))
        rows["start_offset"].append(int_field(gap["start"], f"{where}: start"))
        rows["end_offset"].append(int_field(gap["end"], f"{where}: end", optional=True))
        rows["why"].append(text_field(gap["why"], f"{where}: why"))
    return rows
