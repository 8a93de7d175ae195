"""Bounds on the metrics the store keeps.

- **Series per session** (`raysight server --metrics-max-series`, the store's setting): a scrape's
  series new to a session that has reached the limit are refused, and their samples dropped, each scrape, counted
  per session (``metric_refused``, which `raysight doctor` shows). A refused series' line is remembered as such in
  memory while its target exposes it (the lines of each target's last scrape, within the store's bound on them:
  ``apply.MAX_KNOWN_LINES``), so a scrape neither parses it again nor counts it twice; a line forgotten (gone from a
  scrape, past that bound, or across a restart) is parsed, refused and counted again when it comes back. A server
  restarted with a higher limit takes them.
- **Retention** (opt-in: ``--metrics-retention 15d``, ``--metrics-max-size 20GB``): the oldest samples go, and each
  session keeps a marker of what it lost (``metric_dropped``: how many samples, through when, and why), which
  `raysight doctor` shows and Prometheus's query API warns of. The size is estimated from the storage blocks the
  samples take (DuckDB's own accounting), so it counts what the samples cost on disk, compressed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import duckdb

from raysight.settings import Retention, WriterSettings

if TYPE_CHECKING:
    from raysight.store.store import Store

UNWRITTEN_BYTES = 20  # a sample's width before DuckDB compresses it into a block: series_no, ts_ms, value
Run = Callable[..., duckdb.DuckDBPyConnection]


COUNT_REFUSED = """
INSERT INTO metric_refused VALUES ($session, $series, $samples, $ts_ms)
ON CONFLICT DO UPDATE SET series = series + excluded.series, samples = samples + excluded.samples,
    last_ms = greatest(last_ms, excluded.last_ms)
"""

# Bytes per sample as stored: the storage blocks metric_samples' rows take (256 KiB each; rows deleted but not yet
# compacted away among them), and 20 bytes for each row not yet written to a block (its width uncompressed)
_BYTES_PER_SAMPLE = f"""
SELECT (count(DISTINCT block_id) FILTER (block_id >= 0) * (SELECT block_size FROM pragma_database_size() LIMIT 1)
        + {UNWRITTEN_BYTES} * coalesce(sum(count) FILTER (block_id IS NULL AND column_name = 'ts_ms'), 0))
       / greatest(sum(count) FILTER (column_name = 'ts_ms'), 1)
FROM pragma_storage_info('metric_samples')
"""

_MARK = """
INSERT INTO metric_dropped
SELECT s.session, count(*), max(m.ts_ms), $why, now()
FROM metric_samples m JOIN metric_series s USING (series_no) WHERE m.ts_ms < $cutoff_ms GROUP BY s.session
ON CONFLICT DO UPDATE SET samples = samples + excluded.samples, through_ms = greatest(through_ms, excluded.through_ms),
    why = excluded.why, dropped_at = excluded.dropped_at
"""


def upkeep(store: Store, settings: WriterSettings) -> str | None:
    """The writer's pass, where the settings keep metrics for a while or to a size: what it dropped, for the log."""
    retention = settings.metrics_retention
    if retention and (dropped := prune_metrics(store, retention)):
        return f"dropped {dropped} ({retention.why('metrics')})"
    return None


def prune_metrics(store: Store, retention: Retention, now_ms: int | None = None) -> int:
    """Drop the samples ``retention`` no longer keeps (:func:`prune`, in one transaction); how many."""
    with store.folding(None) as tx:
        return prune(tx.run, retention, time.time_ns() // 1_000_000 if now_ms is None else now_ms)


def footprint(run: Run) -> tuple[int, float]:
    """The samples stored, and the bytes each takes (estimated)."""
    (samples,) = run("SELECT count(*) FROM metric_samples").fetchall()[0]
    (per_sample,) = run(_BYTES_PER_SAMPLE).fetchall()[0]
    return int(samples), float(per_sample or 0)


def cutoff_ms(run: Run, retention: Retention, now_ms: int) -> int | None:
    """The time before which ``retention`` keeps no sample (None: it keeps them all)."""
    cutoffs = []
    if (age_s := retention.age_s) is not None:
        cutoffs.append(now_ms - int(age_s * 1000))
    if (max_bytes := retention.size_bytes) is not None:
        samples, per_sample = footprint(run)
        if samples and per_sample and samples * per_sample > max_bytes:
            over = 1 - max_bytes / (samples * per_sample)  # the oldest fraction of the samples to drop
            (at,) = run("SELECT quantile_disc(ts_ms, $1) FROM metric_samples", [over]).fetchall()[0]
            cutoffs.append(int(at) + 1)
    return max(cutoffs) if cutoffs else None


def prune(run: Run, retention: Retention, now_ms: int) -> int:
    """Drop the samples ``retention`` no longer keeps, and the scrapes of their times, leaving a marker per session
    (with ``run``, the store's, inside its transaction); how many samples."""
    cutoff = cutoff_ms(run, retention, now_ms)
    if cutoff is None:
        return 0
    (dropped,) = run("SELECT count(*) FROM metric_samples WHERE ts_ms < $1", [cutoff]).fetchall()[0]
    if not dropped:
        return 0
    run(_MARK, {"cutoff_ms": cutoff, "why": retention.why("metrics")}).fetchall()
    run("DELETE FROM metric_samples WHERE ts_ms < $1", [cutoff]).fetchall()
    run("DELETE FROM metric_scrapes WHERE ts_ms < $1", [cutoff]).fetchall()
    return int(dropped)
