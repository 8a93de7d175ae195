"""What PromQL evaluates over: a :class:`Source` of samples, which the caller implements
(``signals/scrapes/metrics_query.py`` over DuckDB), and the samples it gives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from raysight.promql.budget import Budget
from raysight.promql.matchers import Matcher

LOOKBACK_MS = 300_000  # how far back a selector looks for a step's latest sample
NEVER = np.iinfo(np.int64).max  # (the `stale_from` of a sample that does not go stale)


@dataclass
class Samples:
    """One series' raw samples in time order, and for each the time from which it no longer stands (its target's
    next scrape, when that scrape lacked the series: Prometheus's staleness marker), else :data:`NEVER`."""

    labels: dict[str, str]
    ts: np.ndarray  # int64 ms
    values: np.ndarray  # float64
    stale_from: np.ndarray  # int64 ms


class Source(Protocol):
    """The stored samples a query reads: ``signals/scrapes/metrics_query.py``'s ``SessionMetrics`` over DuckDB."""

    def select(
        self, matchers: list[Matcher], start_ms: int, end_ms: int, budget: Budget, points_each: int
    ) -> list[Samples]:
        """The series every matcher matches, with their samples from ``start_ms`` to ``end_ms`` (inclusive), each
        sample taken from ``budget``; refused before any is loaded when the series found would leave no room in it
        for ``points_each`` points a series (what the caller makes of each)."""
        ...

    def lookback_ms(self, steps: np.ndarray) -> np.ndarray:
        """How far back an instant vector looks for a sample at each step: :data:`LOOKBACK_MS`, or more where the
        samples were thinned (``signals/scrapes/metric_downsample.py``)."""
        ...
