"""What Ray's aggregators said of themselves (``ray_reported``): received, published, failed to publish and dropped
events, per session, for the doctor's report."""

from __future__ import annotations

from typing import Any

import duckdb

from raysight.signals.ray_metrics.parse import PREFIX
from raysight.store.statements import Query, dict_rows

DOCTOR_SESSIONS = 5
# What the doctor shows of Ray's aggregator counters, summed over a session's agents: field -> metric (no prefix).
RAY_COUNTERS = {
    "received": "events_received",
    "published": "published_events",
    "filtered": "filtered_events",
    "publish_failures": "publish_failures",
    "buffer_add_failures": "events_buffer_add_failures",
}
_SUMS = ", ".join(
    f"coalesce(sum(value) FILTER (metric = '{PREFIX}{metric}'), 0)::BIGINT AS {field}"
    for field, metric in RAY_COUNTERS.items()
)
RAY_REPORTED = Query(
    "ray reported",
    f"""WITH totals AS (
            SELECT session, count(DISTINCT source) AS agents, {_SUMS},
                   coalesce(max(value) FILTER (metric = '{PREFIX}consecutive_failures_since_last_success'), 0)
                       ::BIGINT AS consecutive_publish_failures,
                   epoch_ms(max(updated_at)) AS last_scraped_ms
            FROM ray_reported GROUP BY session ORDER BY last_scraped_ms DESC LIMIT {DOCTOR_SESSIONS}),
        drops AS (
            SELECT session, map_from_entries(list(row(event_type, n))) AS dropped
            FROM (SELECT session, event_type, sum(value)::BIGINT AS n FROM ray_reported
                  WHERE metric = '{PREFIX}queue_dropped_events' AND value > 0 GROUP BY ALL)
            GROUP BY session)
        SELECT t.session, s.label, t.* EXCLUDE (session), d.dropped
        FROM totals t LEFT JOIN sessions s USING (session) LEFT JOIN drops d USING (session)
        ORDER BY t.last_scraped_ms DESC""",
)


def ray_reported(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """What Ray's aggregators said they received, published, failed to publish and dropped (by event type), summed
    over each session's agents, for the sessions scraped last; ``consecutive_publish_failures`` is the most of any."""
    rows = dict_rows(con.execute(RAY_REPORTED.sql))
    for row in rows:
        row["dropped"] = dict(sorted((row["dropped"] or {}).items(), key=lambda kv: (-kv[1], kv[0])))
    return rows
