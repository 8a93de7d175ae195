"""What Ray's aggregators reported into the store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple

from raysight.signals.ray_metrics.parse import RAY_REPORTED, RaySample
from raysight.store.tx import Tx

KEEP = f"""INSERT INTO {RAY_REPORTED.name}
    SELECT unnest($1::VARCHAR[]), unnest($2::VARCHAR[]), unnest($3::VARCHAR[]), unnest($4::VARCHAR[]),
           unnest($5::VARCHAR[]), unnest($6::DOUBLE[]), now()
    ON CONFLICT DO UPDATE SET
        value = CASE WHEN excluded.kind = 'counter' THEN greatest({RAY_REPORTED.name}.value, excluded.value)
                     ELSE excluded.value END,
        kind = excluded.kind, updated_at = excluded.updated_at"""


def record(tx: Tx, samples: Sequence[RaySample]) -> int:
    """Keep what Ray's aggregators reported (one statement); returns the samples written.

    Counters only grow within one agent process (a sample's ``source``), so a counter keeps its greatest value
    and a late or repeated scrape never lowers it; a gauge takes the newest.
    """
    if samples:
        tx.run(KEEP, [list(column) for column in zip(*(astuple(s) for s in samples))])
    return len(samples)
