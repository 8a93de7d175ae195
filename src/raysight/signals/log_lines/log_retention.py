"""Opt-in retention of log lines (`raysight server --log-retention 30d --log-max-size 50GB`; every line is kept
unless told). The oldest lines go, a whole index block (``log_index.py``) at a time and never the block still
being filled, and each file keeps a marker of what it lost (``log_dropped``: how many lines, through which byte
offset and time, and why), which `raysight logs` and `raysight doctor` show. What the store knows of each file
(``log_files``) stays, so that a batch an agent resends later is not stored again. The writer runs it between groups
(the signal's upkeep).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from raysight.settings import Retention, WriterSettings
from raysight.signals.log_lines import log_index
from raysight.store.schema import LAST_LOG_SEQ_SQL
from raysight.store.tx import Tx

if TYPE_CHECKING:
    from raysight.store.store import Store

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


def upkeep(store: Store, settings: WriterSettings) -> str | None:
    """The writer's pass, where the settings keep fewer lines than all: what it dropped, for the log."""
    retention = settings.log_retention
    if retention and (dropped := prune_logs(store, retention)):
        return f"dropped {dropped} ({retention.why('log')})"
    return None


def prune_logs(store: Store, retention: Retention, now_ns: int | None = None) -> int:
    """Drop the log lines ``retention`` no longer keeps, leaving markers (in one transaction, counted); how many."""
    with store.folding(None) as tx:
        dropped = prune(tx, retention, time.time_ns() if now_ns is None else now_ns)
        if dropped:
            tx.count(log_lines_dropped=dropped)
    return dropped


def prune(tx: Tx, retention: Retention, now_ns: int) -> int:
    """Drop the lines ``retention`` no longer keeps (inside ``tx``); how many."""
    if not retention:
        return 0
    run = tx.run
    (last,) = run(LAST_LOG_SEQ_SQL).fetchall()[0]
    never = 2**62
    age_s, max_bytes = retention.age_s, retention.size_bytes
    params = {
        "current": int(last) // log_index.BLOCK_LINES,
        "cutoff_ns": -1 if age_s is None else now_ns - int(age_s * 1e9),
        "max_bytes": never if max_bytes is None else max_bytes,
    }
    (first,) = run(_FIRST_KEPT, params).fetchall()[0]
    (dropped,) = run("SELECT coalesce(sum(lines), 0) FROM log_file_blocks WHERE block < $1", [first]).fetchall()[0]
    if not dropped:
        return 0
    run(_MARK, {"first": first, "why": retention.why("log")}).fetchall()
    run("DELETE FROM log_lines WHERE seq < $1", [first * log_index.BLOCK_LINES]).fetchall()
    run("DELETE FROM serve_requests WHERE seq < $1", [first * log_index.BLOCK_LINES]).fetchall()  # (their lines')
    run("DELETE FROM log_file_blocks WHERE block < $1", [first]).fetchall()
    run("DELETE FROM log_blocks WHERE block < $1", [first]).fetchall()
    return int(dropped)
