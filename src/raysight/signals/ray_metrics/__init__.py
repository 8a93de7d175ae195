"""The counters and gauges Ray's aggregators report of themselves, as `raysight run` scrapes them (``parse.py``),
written at once, not journalled (``apply.py``, loaded when first used: the agent reads the parser's names)."""

from raysight.signals.ray_metrics.parse import RAY_REPORTED
from raysight.signals.signal import Signal

SIGNAL = Signal("ray_metrics", (RAY_REPORTED,))
