"""A session's task attempts started, finished and failed over time: the overview's activity chart."""

from __future__ import annotations

from typing import Any

import duckdb

from raysight.store.statements import Query

ACTIVITY_BUCKETS = 120
ACTIVITY = Query(
    "activity",
    """WITH t AS (SELECT task_start(start_ns, exec_start_ns) // 1000000 AS s, end_ns // 1000000 AS e,
                        task_state(inferred_state, reported_state) AS state
                 FROM tasks WHERE session = $session AND task_type(type, task_id) <> 'DRIVER_TASK'),
       step AS (SELECT lo, (greatest(hi, lo) - lo) // $n + 1 AS width
                FROM (SELECT min(s) AS lo, greatest(max(e), max(s)) AS hi FROM t))
       SELECT lo, width, least((ts - lo) // width, $n - 1) AS bucket,
              count(*) FILTER (kind = 's') AS started,
              count(*) FILTER (kind = 'e' AND state = 'FINISHED') AS finished,
              count(*) FILTER (kind = 'e' AND state = 'FAILED') AS failed
       FROM (SELECT 's' AS kind, s AS ts, state FROM t WHERE s IS NOT NULL
             UNION ALL SELECT 'e', e, state FROM t WHERE e IS NOT NULL), step
       WHERE ts >= lo GROUP BY ALL""",
    about="task attempts started, finished and failed in each of $n intervals of the session",
)


def activity(con: duckdb.DuckDBPyConnection, session: str | None, buckets: int = ACTIVITY_BUCKETS) -> dict[str, Any]:
    """Task attempts started, finished and failed per interval of the session: ``buckets`` equal intervals (of whole
    milliseconds) from its first start to its last end, in one pass over the session's tasks."""
    resolved = session
    rows = con.execute(ACTIVITY.sql, {"session": resolved, "n": buckets}).fetchall()
    series: dict[str, list[int]] = {"started": [0] * buckets, "finished": [0] * buckets, "failed": [0] * buckets}
    for _, _, bucket, *counts in rows:
        for name, n in zip(series, counts):
            series[name][bucket] += n
    start_ms, step_ms = rows[0][:2] if rows else (None, None)
    return {"session": resolved, "start_ms": start_ms, "step_ms": step_ms, **series}
