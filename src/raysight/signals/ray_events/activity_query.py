"""A session's task attempts started, finished and failed over time: the overview's activity chart."""

from __future__ import annotations

from typing import Any

import duckdb

from raysight.errors import BadQuery
from raysight.store.statements import Query

# The bins' widths, ms: the narrowest that cuts the span shown into at most TARGET_BINS (a bin's width stays put while
# a live session's span grows, until it passes the next)
S, M, H = 1_000, 60_000, 3_600_000
STEPS_MS = (S, 5 * S, 10 * S, 30 * S, M, 5 * M, 10 * M, 30 * M, H, 3 * H, 6 * H, 12 * H, 24 * H)
TARGET_BINS = 120
MAX_BINS = 10_000


def bin_step(span_ms: int) -> int:
    """The narrowest of :data:`STEPS_MS` that cuts ``span_ms`` into fewer than :data:`TARGET_BINS` (the widest where
    none does): the activity query's choice, for a chart of another signal over a session's span."""
    return next((step for step in STEPS_MS if span_ms // step < TARGET_BINS), STEPS_MS[-1])


ACTIVITY = Query(
    "activity",
    """WITH t AS (SELECT task_start(start_ns, exec_start_ns) // 1000000 AS s, end_ns // 1000000 AS e,
                        task_state(inferred_state, reported_state) AS state
                 FROM tasks WHERE session = $session AND task_type(type, task_id) <> 'DRIVER_TASK'),
       span AS (SELECT coalesce($start, least(s.first_ns // 1000000, (SELECT min(s) FROM t))) AS lo,
                       coalesce($end, greatest(coalesce(e.ended_ns // 1000000, $now),
                                               (SELECT greatest(max(s), max(e)) FROM t))) AS hi,
                       e.ended_ns IS NULL AS live
                FROM sessions s LEFT JOIN session_ends([$session]) e USING (session) WHERE s.session = $session),
       bins AS (SELECT lo, hi, live, coalesce($step, (SELECT coalesce(min(r) FILTER ((hi - lo) // r < $bins), max(r))
                                                      FROM unnest($steps::BIGINT[]) u(r))) AS step FROM span)
       SELECT lo // step * step AS first, hi, step, live, ts // step * step AS at,
              count(ts) FILTER (kind = 's') AS started,
              count(ts) FILTER (kind = 'e' AND state = 'FINISHED') AS finished,
              count(ts) FILTER (kind = 'e' AND state = 'FAILED') AS failed
       FROM bins LEFT JOIN (SELECT 's' AS kind, s AS ts, state FROM t WHERE s IS NOT NULL
                            UNION ALL SELECT 'e', e, state FROM t WHERE e IS NOT NULL) p
                 ON p.ts BETWEEN lo // step * step AND hi
       GROUP BY ALL""",
    about="task attempts started, finished and failed in each $step ms from $start (or the session's), to $end or $now",
)


def activity(
    con: duckdb.DuckDBPyConnection,
    session: str | None,
    now_ms: int,
    step_ms: int | None = None,
    end_ms: int | None = None,
    start_ms: int | None = None,
) -> dict[str, Any]:
    """Task attempts started, finished and failed in each bin of ``step_ms`` (default: from :data:`STEPS_MS` by the
    span) from ``start_ms`` (default: the session's start; a zoomed chart's left edge) to ``end_ms`` (default: its
    end, or ``now_ms`` while it is live), the bins whole multiples of the step (they stay put from one read to the
    next); in one pass over the session's tasks. BadQuery for a span that ends before it starts, or a step that cuts
    it into more than :data:`MAX_BINS`."""
    if start_ms is not None and end_ms is not None and start_ms >= end_ms:
        raise BadQuery(f"start {start_ms} is not before end {end_ms}")
    values = {
        **{"session": session, "now": now_ms, "step": step_ms, "start": start_ms, "end": end_ms},
        **{"steps": STEPS_MS, "bins": TARGET_BINS},
    }
    rows = con.execute(ACTIVITY.sql, values).fetchall()
    if not rows or rows[0][0] is None:
        nothing: dict[str, Any] = {"start_ms": None, "end_ms": None, "step_ms": None, "live": None}
        return {"session": session, **nothing, "started": [], "finished": [], "failed": []}
    first, end, step, live = rows[0][:4]
    n = max(0, end // step * step - first) // step + 1
    if n > MAX_BINS:
        raise BadQuery(f"step {step} ms cuts the session's {end - first} ms into {n} bins, over {MAX_BINS}")
    series: dict[str, list[int]] = {"started": [0] * n, "finished": [0] * n, "failed": [0] * n}
    for *_, at, started, finished, failed in rows:
        if at is not None:
            for name, count in zip(series, (started, finished, failed)):
                series[name][(at - first) // step] += count
    return {"session": session, "start_ms": first, "end_ms": end, "step_ms": step, "live": live, **series}
