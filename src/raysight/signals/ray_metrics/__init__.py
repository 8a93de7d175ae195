"""The counters and gauges Ray's aggregators report of themselves, as `raysight run` scrapes them (``parse.py``),
written at once, not journalled (``apply.py``, loaded when first used: the agent reads the parser's names)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raysight import wire
from raysight.signals.ray_metrics import parse
from raysight.signals.signal import Signal, WrittenIntake

if TYPE_CHECKING:
    from raysight.store.store import Store


def recorded(store: Store, samples: list[parse.RaySample]) -> int:
    from raysight.signals.ray_metrics.apply import record

    return store.write(lambda tx: record(tx, samples))


SIGNAL = Signal(
    "ray_metrics",
    (parse.RAY_REPORTED,),
    intake=WrittenIntake(
        wire.AGENT_RAY_METRICS, parse.MAX_BODY, parse.parse, recorded, "Ray metrics", "Ray's metrics", answer="samples"
    ),
)
