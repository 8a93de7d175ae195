"""The counters and gauges Ray's aggregators report of themselves, as `raysight run` scrapes them
(``ingest/ray_metrics.py``). Written at once, not journalled."""

from raysight.ingest.ray_metrics import RAY_REPORTED
from raysight.signals.signal import Signal

SIGNAL = Signal("ray_metrics", (RAY_REPORTED,))
