"""`raysight doctor`: what raysight knows it is missing (quarantined and unfolded events, inferred states, polls,
scrapes and logs that failed or were dropped, ingest lag) and what Ray reported losing."""

from __future__ import annotations

from typing import Any

import duckdb

from raysight.signals.ray_metrics.reported_query import ray_reported
from raysight.store.schema import driver_task_id_sql, task_job_id_sql
from raysight.store.statements import Query, dict_rows

LAG_WINDOW = "15 MINUTES"  # raw events arrive in time order, so the window reads only the newest row groups

# What the doctor reports beside the counters, each under its key
DOCTOR = (
    Query(
        "polls",
        """SELECT session, resource, last_ok_ns // 1000000 AS last_ok_ms, rows,
                  last_error_ns // 1000000 AS last_error_ms, last_error
           FROM polls ORDER BY greatest(last_ok_ns, last_error_ns) DESC, resource LIMIT 50""",
    ),
    Query(
        "scrapes",
        """SELECT session, instance, job, count(*) AS scrapes, max(ts_ms) AS last_ms,
                  arg_max(samples, ts_ms) AS last_samples
           FROM metric_scrapes GROUP BY ALL ORDER BY last_ms DESC LIMIT 50""",
    ),
    Query(
        "metrics_refused",
        """SELECT r.session, s.series AS series_held, r.series AS series_refused, r.samples AS samples_dropped,
                  r.last_ms FROM metric_refused r
           LEFT JOIN (SELECT session, count(*) AS series FROM metric_series GROUP BY 1) s USING (session)
           ORDER BY r.last_ms DESC LIMIT 20""",
    ),
    Query(
        "metrics_dropped",
        """SELECT session, samples, through_ms, why, epoch_ms(dropped_at) AS dropped_ms FROM metric_dropped
           ORDER BY through_ms DESC LIMIT 20""",
    ),
    Query(
        "log_gaps",
        """SELECT session, host, name, start_offset, end_offset, why, epoch_ms(received_at) AS received_ms
           FROM log_gaps ORDER BY received_at DESC LIMIT 20""",
    ),
    Query(
        "log_dropped",
        """SELECT session, sum(lines) AS lines, max(through_ns) // 1000000 AS through_ms, max(why) AS why
           FROM log_dropped GROUP BY session ORDER BY through_ms DESC LIMIT 20""",
    ),
    Query(
        "unsupported",
        "SELECT event_type, count(*) AS events FROM raw_events WHERE NOT supported GROUP BY 1 ORDER BY 2 DESC",
    ),
    Query(
        "quarantine",
        """SELECT reason, count(*) AS events, epoch_ms(max(received_at)) AS last_received_ms FROM quarantine
           GROUP BY 1 ORDER BY 2 DESC LIMIT 20""",
    ),
    Query(
        "inferred",
        """SELECT session, inferred_state, count(*) AS tasks FROM tasks WHERE inferred_state IS NOT NULL
           GROUP BY ALL ORDER BY session DESC, tasks DESC""",
    ),
    Query(
        "ingest_lag",
        f"""SELECT session, epoch_ms(max(received_at)) AS last_received_ms,
                   quantile_cont(epoch_ms(received_at) - ts_ns / 1e6, 0.5) AS lag_p50_ms,
                   max(epoch_ms(received_at) - ts_ns / 1e6) AS lag_max_ms
            FROM raw_events
            WHERE ts_ns IS NOT NULL
              AND received_at >= (SELECT max(received_at) FROM raw_events) - INTERVAL {LAG_WINDOW}
            GROUP BY 1 ORDER BY last_received_ms DESC LIMIT 5""",
    ),
)
COUNTERS = Query("counters", "SELECT name, value FROM counters")


def doctor(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """What raysight knows it is missing (quarantined and unfolded events, inferred states, ingest lag over the last
    :data:`LAG_WINDOW` of ingest), and what Ray reported losing."""
    return {
        "counters": dict(con.execute(COUNTERS.sql).fetchall()),
        **{query.name: dict_rows(con.execute(query.sql)) for query in DOCTOR},
        "ray_reported": ray_reported(con),
        "drivers_without_task_events": drivers_without_task_events(con),
    }


# The variable a driver needs for its own tasks' events to leave it (Ray hands it to the workers it starts, not to
# drivers started elsewhere); `raysight env` prints the head's `--system-config` that gives it to every process.
OWNER_EVENTS_FLAG = "RAY_enable_core_worker_ray_event_to_aggregator=1"


# Jobs whose tasks only their executors reported: only the owner sends definitions, pending and end states, the
# executor's ID
DRIVERS_UNHEARD = Query(
    "drivers without task events",
    f"""WITH executor_only AS (
           SELECT t.session, coalesce(t.job_id, {task_job_id_sql("t.task_id")}) AS job_id, count(*) AS tasks
           FROM tasks t
           WHERE t.defined IS NULL AND t.worker_id IS NULL AND t.pending_ns IS NULL AND t.end_ns IS NULL
             AND (t.worker_pid IS NOT NULL OR t.exec_worker_id IS NOT NULL OR t.executed_ns IS NOT NULL)
           GROUP BY ALL)
       SELECT e.session, s.label, e.job_id, e.tasks, j.driver_pid, j.entrypoint
       FROM executor_only e JOIN sessions s USING (session)
       LEFT JOIN jobs j ON j.session = e.session AND j.job_id = e.job_id
       WHERE NOT EXISTS (SELECT 1 FROM tasks d WHERE d.session = e.session AND d.defined
                         AND d.task_id = {driver_task_id_sql("e.job_id")})
       ORDER BY s.first_ns DESC NULLS LAST, e.job_id
       LIMIT 20""",
)


def drivers_without_task_events(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Jobs whose driver sent none of its tasks' events while the workers that ran them did: their types, failures
    and durations are unknown to raysight (and to Ray's aggregator). A job whose driver reported itself is left out:
    a crashing owner losing its last second of events is not a misconfigured driver."""
    rows = dict_rows(con.execute(DRIVERS_UNHEARD.sql))
    for row in rows:
        driver = f"driver pid {row['driver_pid']}" if row["driver_pid"] else "its driver"
        row["message"] = (
            f"job {row['job_id']}: {row['tasks']} task attempt(s) were reported only by the workers that ran them; "
            f"{driver} sent no task events, so whether they finished or failed, their types and durations are "
            f"unknown. The driver lacked {OWNER_EVENTS_FLAG}: start the head with the --system-config that "
            "`raysight env` prints, or set the variable in the driver's environment."
        )
    return rows
