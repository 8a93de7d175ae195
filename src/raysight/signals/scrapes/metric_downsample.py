"""Downsampling of old metric samples, as Prometheus's long-term stores do it: raw samples older than a week become
one a minute, and those older than 90 days one each 10 minutes (`raysight server --metrics-downsample 7d,90d`, or
``off``). Checked every minute by the writer, beside the retention (``signals/scrapes/metric_retention.py``).

Each series keeps the last sample of each interval, which is what an instant query and a gauge read; a counter
(by its type, or a name ending ``_total``, ``_count``, ``_sum``, ``_bucket``) also keeps each sample before a reset,
so that ``rate`` and ``increase`` count across the reset as they did over the raw samples, and a histogram's buckets
(counters, scraped together) stay in step for ``histogram_quantile``. The scrapes are thinned alike (a target's last
of each interval), so staleness reads as before. Queries widen the lookback where the samples are sparser (twice the
interval: 20 minutes in the 10-minute part); a range narrower than the interval (``rate(x[1m])`` over 10-minute
samples) finds one sample or none, as in Thanos.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import duckdb
import numpy as np

from raysight import units
from raysight.settings import Downsampling, WriterSettings

if TYPE_CHECKING:
    from raysight.store.store import Store

Run = Callable[..., duckdb.DuckDBPyConnection]
MINUTE_MS, TEN_MINUTES_MS = 60_000, 600_000
MAX_SPAN_MS = 86_400_000  # thinned in one go, at most: a store that waited long catches up a day a minute


def upkeep(store: Store, settings: WriterSettings) -> str | None:
    """The writer's pass, where the settings downsample: what it thinned, for the log."""
    if settings.metrics_downsampling and (thinned := downsample_metrics(store, settings.metrics_downsampling)):
        return f"{thinned} samples thinned away"
    return None


def downsample_metrics(store: Store, downsampling: Downsampling, now_ms: int | None = None) -> int:
    """Thin old samples (:func:`downsample`, in one transaction); the samples dropped."""
    with store.folding(None) as tx:
        return downsample(tx.run, downsampling, time.time_ns() // 1_000_000 if now_ms is None else now_ms)


def tiers(downsampling: Downsampling) -> list[tuple[int, float]]:
    """(the interval in ms, after how many seconds), coarser last; none when off."""
    if downsampling.raw_for is None or downsampling.minutes_for is None:
        return []
    return [
        (MINUTE_MS, units.duration_s(downsampling.raw_for)),
        (TEN_MINUTES_MS, units.duration_s(downsampling.minutes_for)),
    ]


def _key(interval_ms: int) -> str:
    return f"metrics_downsampled_{interval_ms}"


# The samples to keep of those from $from_ms to $to_ms: each series' last of each interval, and a counter's last
# before each reset. (A counter: by its metadata, or by its name as Prometheus names counters and histograms.)
_KEPT = """
CREATE OR REPLACE TEMP TABLE kept_samples AS
WITH kinds AS (
    SELECT s.series_no, coalesce(m.type = 'counter', false) OR regexp_matches(s.name, '_(total|count|sum|bucket)$')
           AS counter
    FROM metric_series s LEFT JOIN metric_metadata m ON m.session = s.session AND m.name = s.name
),
marked AS (
    SELECT x.series_no, x.ts_ms, x.value,
           row_number() OVER (PARTITION BY x.series_no, x.ts_ms // $interval ORDER BY x.ts_ms DESC) = 1 AS last,
           k.counter AND x.value > lead(x.value) OVER (PARTITION BY x.series_no ORDER BY x.ts_ms) AS before_reset
    FROM metric_samples x JOIN kinds k USING (series_no)
    WHERE x.ts_ms >= $from_ms AND x.ts_ms < $to_ms
)
SELECT series_no, ts_ms, value FROM marked WHERE last OR before_reset ORDER BY ts_ms, series_no
"""

_KEPT_SCRAPES = """
CREATE OR REPLACE TEMP TABLE kept_scrapes AS
SELECT session, instance, job, max(ts_ms) AS ts_ms, arg_max(samples, ts_ms) AS samples
FROM metric_scrapes WHERE ts_ms >= $from_ms AND ts_ms < $to_ms
GROUP BY session, instance, job, ts_ms // $interval
"""


def downsample(run: Run, downsampling: Downsampling, now_ms: int) -> int:
    """Thin what each tier now covers and was not thinned yet (with ``run``, the store's, inside its transaction);
    the samples dropped."""
    dropped = 0
    for interval, after_s in tiers(downsampling):
        to_ms = (now_ms - int(after_s * 1000)) // interval * interval  # (whole intervals only)
        (done,) = run("SELECT coalesce(max(value::BIGINT), 0) FROM meta WHERE key = ?", [_key(interval)]).fetchall()[0]
        if to_ms <= done:
            continue
        (first,) = run(
            "SELECT min(ts_ms) FROM metric_samples WHERE ts_ms >= ? AND ts_ms < ?", [done, to_ms]
        ).fetchall()[0]
        if first is not None:
            to_ms = min(to_ms, first // interval * interval + MAX_SPAN_MS)
            span = {"from_ms": first // interval * interval, "to_ms": to_ms, "interval": interval}
            run(_KEPT, span)
            run(_KEPT_SCRAPES, span)
            (before,) = run(
                "SELECT count(*) FROM metric_samples WHERE ts_ms >= $from_ms AND ts_ms < $to_ms",
                {k: span[k] for k in ("from_ms", "to_ms")},
            ).fetchall()[0]
            (after,) = run("SELECT count(*) FROM kept_samples").fetchall()[0]
            for table, kept in (("metric_samples", "kept_samples"), ("metric_scrapes", "kept_scrapes")):
                run(f"DELETE FROM {table} WHERE ts_ms >= ? AND ts_ms < ?", [span["from_ms"], to_ms])
                run(f"INSERT INTO {table} SELECT * FROM {kept}")
                run(f"DROP TABLE {kept}")
            dropped += int(before - after)
        run("INSERT OR REPLACE INTO meta VALUES (?, ?)", [_key(interval), str(to_ms)])
    return dropped


def intervals(con: duckdb.DuckDBPyConnection) -> list[tuple[int, int]]:
    """(through when, the interval of the samples before then), finest first: the parts downsampled so far."""
    rows = con.execute(
        "SELECT key, value::BIGINT FROM meta WHERE key IN (?, ?)", [_key(MINUTE_MS), _key(TEN_MINUTES_MS)]
    ).fetchall()
    through = {key: value for key, value in rows}
    return [(through[_key(i)], i) for i in (MINUTE_MS, TEN_MINUTES_MS) if _key(i) in through]


def lookback(steps: np.ndarray, parts: list[tuple[int, int]], base_ms: int) -> np.ndarray:
    """The lookback at each step: ``base_ms``, or twice the interval of the downsampled part it falls in."""
    out = np.full(len(steps), base_ms, dtype=np.int64)
    for through, interval in parts:
        out = np.where(steps < through + 2 * interval, np.maximum(out, 2 * interval), out)
    return out
