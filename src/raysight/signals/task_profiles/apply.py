"""Batches of task profiles into the store: journalled batches applied a group at a time, each batch once, each
stack kept once, each attempt's samples summed by stack."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from raysight.signals.task_profiles.parse import PROFILE_BATCHES, parse

if TYPE_CHECKING:
    from raysight.store.store import Store

_SAMPLES = pa.schema(
    [
        ("batch_id", pa.string()),
        ("task_id", pa.string()),
        ("attempt", pa.int32()),
        ("stack_id", pa.string()),
        ("stack", pa.string()),
        ("samples", pa.int64()),
        ("on_cpu", pa.int64()),
    ]
)


def apply_profiles(store: Store, bodies: Sequence[bytes], journal_seq: int | None = None) -> int:
    """Store workers' batches of task profiles in one transaction (a batch already kept adds nothing); the samples
    stored."""
    batches = list({batch.batch[0]: batch for batch in map(parse, bodies)}.values())  # (a batch resent: once)
    now = time.time_ns()
    kept = pa.Table.from_pylist(
        [dict(zip(PROFILE_BATCHES.names, (*batch.batch, now))) for batch in batches],
        PROFILE_BATCHES.arrow_schema(),
    )
    rows = [(batch.batch[0], *sample) for batch in batches for sample in batch.samples]
    samples = pa.Table.from_pylist([dict(zip(_SAMPLES.names, row)) for row in rows], _SAMPLES)
    with store.folding(journal_seq) as tx, tx.registered("staged_batches", kept), tx.registered("staged", samples):
        new = tx.returning(
            "INSERT INTO profile_batches SELECT * FROM staged_batches ON CONFLICT DO NOTHING RETURNING batch_id, hz",
            ["batch_id", "hz"],  # (those not kept before)
        )
        with tx.registered("new_batches", new):
            tx.run(
                """INSERT INTO profile_stacks SELECT DISTINCT stack_id, stack FROM staged SEMI JOIN new_batches
                   USING (batch_id) ON CONFLICT DO NOTHING"""
            )
            tx.run(
                """INSERT INTO task_samples
                   SELECT b.session, s.task_id, s.attempt, s.stack_id, sum(s.samples), sum(s.on_cpu),
                          sum(s.samples / n.hz), sum(s.on_cpu / n.hz)
                   FROM staged s JOIN new_batches n USING (batch_id) JOIN staged_batches b USING (batch_id)
                   GROUP BY ALL
                   ON CONFLICT DO UPDATE SET samples = samples + excluded.samples, on_cpu = on_cpu + excluded.on_cpu,
                       wall_s = wall_s + excluded.wall_s, cpu_s = cpu_s + excluded.cpu_s"""
            )
        tx.run("INSERT INTO sessions (session) SELECT DISTINCT session FROM staged_batches ON CONFLICT DO NOTHING")
        kept_now = set(new["batch_id"].to_pylist())
        fresh = [batch.batch for batch in batches if batch.batch[0] in kept_now]
        stored, dropped = sum(b[6] for b in fresh), sum(b[7] for b in fresh)
        tx.count(profile_batches=len(fresh), profile_samples=stored, profile_samples_dropped=dropped)
    return stored
