"""Tail sampling of the traces stored: once a trace has had no new span for ``wait_s``, it is kept whole if a span of
it failed, if it lasted ``slow_ns`` or longer, or if its trace ID falls in the ``keep`` fraction (a hash of the ID,
so every server and every pass decides a trace alike); otherwise its spans are deleted and counted
(``traces_sampled_out``, ``spans_sampled_out``). A pass decides the traces whose last span ended since the last
pass's horizon; a span that arrives later than ``wait_s`` after it ended, its trace decided, is kept (there is no
trace left to judge it with). Spans the server forwards are sent on before any of this."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from raysight.settings import TailSampling, WriterSettings
from raysight.store.tx import Tx

if TYPE_CHECKING:
    from raysight.store.store import Store

WATERMARK_KEY = "traces_sampled_through_ns"  # in ``meta``: traces whose last span ended by then were decided
HASH_BUCKETS = 1_000_000


def upkeep(store: Store, settings: WriterSettings) -> str | None:
    """The writer's pass, where the settings sample traces: what it dropped, for the log."""
    sampling = settings.trace_sampling
    if sampling.active and (dropped := sample_traces(store, sampling)):
        return f"{dropped} spans of traces neither failed nor slow dropped"
    return None


def sample_traces(store: Store, sampling: TailSampling, now_ns: int | None = None) -> int:
    """Tail-sample the traces complete since the last pass (in one transaction, counted); the spans deleted."""
    with store.folding(None) as tx:
        traces, spans = sample(tx, sampling, time.time_ns() if now_ns is None else now_ns)
        if traces:
            tx.count(traces_sampled_out=traces, spans_sampled_out=spans)
    return spans


def sample(tx: Tx, sampling: TailSampling, now_ns: int) -> tuple[int, int]:
    """Decide the traces whose last span ended after the last pass's watermark and before ``now_ns - wait_s``;
    delete those not kept. Returns (traces, spans) deleted. Runs in the caller's transaction."""
    row = tx.one(f"SELECT value::BIGINT FROM meta WHERE key = '{WATERMARK_KEY}'")
    since, until = (row[0] if row else 0), now_ns - int(sampling.wait_s * 1e9)
    if until <= since:
        return 0, 0
    slow = sampling.slow_ns if sampling.slow_ns is not None else 2**62
    dropped = [
        trace_id
        for (trace_id,) in tx.run(
            f"""SELECT trace_id FROM spans
                WHERE trace_id IN (SELECT DISTINCT trace_id FROM spans WHERE end_ns > $since)
                GROUP BY trace_id
                HAVING max(end_ns) > $since AND max(end_ns) <= $until AND NOT bool_or(status = 'error')
                   AND max(end_ns) - min(start_ns) < $slow AND hash(trace_id) % {HASH_BUCKETS} >= $kept""",
            {"since": since, "until": until, "slow": slow, "kept": int(sampling.keep * HASH_BUCKETS)},
        ).fetchall()
    ]
    spans = 0
    if dropped:
        deleted = tx.one("DELETE FROM spans WHERE trace_id IN (SELECT unnest($ids))", {"ids": dropped})
        spans = deleted[0] if deleted else 0
    tx.run("INSERT OR REPLACE INTO meta VALUES (?, ?)", [WATERMARK_KEY, str(until)])
    return len(dropped), int(spans)
