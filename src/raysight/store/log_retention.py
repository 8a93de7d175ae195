"""Opt-in retention of log lines (`raysight server --log-retention 30d --log-max-size 50GB`; every line is kept
unless told). The oldest lines go, a whole index block (``store/log_index.py``) at a time and never the block still
being filled, and each file keeps a marker of what it lost (``log_dropped``: how many lines, through which byte
offset and time, and why), which `raysight logs` and `raysight doctor` show. What the store knows of each file
(``log_files``) stays, so that a batch an agent resends later is not stored again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import duckdb

from raysight.store import log_index
from raysight.store.schema import LAST_LOG_SEQ_SQL

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds in ``30d``, ``12h``, ``90m``, ``45s``; ValueError otherwise."""
    match = _DURATION.fullmatch(text.strip())
    if not match or float(match[1]) <= 0:
        raise ValueError(f"{text!r} is not a duration such as 30d, 12h, 90m or 45s")
    return float(match[1]) * _SECONDS[match[2]]


def parse_size(text: str) -> int:
    """Bytes in ``50GB``, ``1.5GiB``, ``500MB``; ValueError otherwise."""
    match = _SIZE.fullmatch(text.strip())
    if not match or float(match[1]) <= 0:
        raise ValueError(f"{text!r} is not a size such as 500MB or 50GB")
    unit = match[2].upper()
    power = "BKMGT".index(unit[0])
    return int(float(match[1]) * (1024 if "I" in unit else 1000) ** power)


@dataclass(frozen=True)
class LogRetention:
    """How long, and how much of, the log lines to keep (None: no bound)."""

    max_age: str | None = None  # as given: 30d
    max_size: str | None = None  # as given: 50GB

    def __bool__(self) -> bool:
        return bool(self.max_age or self.max_size)

    def why(self) -> str:
        bounds = [f"older than {self.max_age}"] if self.max_age else []
        bounds += [f"past {self.max_size}"] if self.max_size else []
        return f"dropped by the server's log retention ({' or '.join(bounds)})"


KEEP_ALL = LogRetention()  # the default
Run = Callable[..., duckdb.DuckDBPyConnection]

# The first block to keep: the one after the last block whose lines are all older than $cutoff_ns, or whose bytes
# and all before them exceed what may be kept of $max_bytes; never past the block now being filled ($current).
_FIRST_KEPT = """
WITH blocks AS (
    SELECT block, max(last_ns) AS last_ns, sum(coalesce(bytes, last_offset - first_offset)) AS bytes
    FROM log_file_blocks GROUP BY block
)
SELECT least($current, greatest(
    coalesce((SELECT min(block) FROM blocks WHERE last_ns >= $cutoff_ns), $current),
    coalesce((SELECT min(block) FROM (SELECT block, sum(bytes) OVER (ORDER BY block DESC) AS kept FROM blocks)
              WHERE kept <= $max_bytes), $current)))
"""

_MARK = """
INSERT INTO log_dropped
SELECT session, host, file_key, sum(lines), max(last_offset), max(last_ns), $why, now()
FROM log_file_blocks WHERE block < $first GROUP BY session, host, file_key
ON CONFLICT DO UPDATE SET lines = lines + excluded.lines, through_offset = greatest(through_offset,
    excluded.through_offset), through_ns = greatest(through_ns, excluded.through_ns), why = excluded.why,
    dropped_at = excluded.dropped_at
"""


def prune(run: Run, retention: LogRetention, now_ns: int) -> int:
    """Drop the lines ``retention`` no longer keeps (with ``run``, the store's, inside its transaction); how many."""
    if not retention:
        return 0
    (last,) = run(LAST_LOG_SEQ_SQL).fetchall()[0]
    never = 2**62
    cutoff = now_ns - int(parse_duration(retention.max_age) * 1e9) if retention.max_age else -1
    params = {
        "current": int(last) // log_index.BLOCK_LINES,
        "cutoff_ns": cutoff,
        "max_bytes": parse_size(retention.max_size) if retention.max_size else never,
    }
    (first,) = run(_FIRST_KEPT, params).fetchall()[0]
    (dropped,) = run("SELECT coalesce(sum(lines), 0) FROM log_file_blocks WHERE block < $1", [first]).fetchall()[0]
    if not dropped:
        return 0
    run(_MARK, {"first": first, "why": retention.why()}).fetchall()
    run("DELETE FROM log_lines WHERE seq < $1", [first * log_index.BLOCK_LINES]).fetchall()
    run("DELETE FROM log_file_blocks WHERE block < $1", [first]).fetchall()
    run("DELETE FROM log_blocks WHERE block < $1", [first]).fetchall()
    return int(dropped)
