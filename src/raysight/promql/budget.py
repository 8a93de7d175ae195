"""A query's budget: the samples and the seconds one PromQL query may spend (``--query-max-samples``,
``--query-timeout``), checked as it goes."""

from __future__ import annotations

import time

from raysight.errors import QueryFailed, QueryTimeout
from raysight.settings import QueryLimits

# A series found holds its labels as Python objects (~2 KB with the ten of Ray's task metrics): it counts as this
# many samples (so 5M allow 39k series at once, where 1M series would have held 2 GB)
SERIES_COST = 128
TOO_MANY_SAMPLES = "query processing would load too many samples into memory in query execution"


class Budget:
    """One query's spending against its :class:`QueryLimits`, from when it was asked. Checked as it goes: a query
    over it stops at the next expression, series or chunk of its answer."""

    def __init__(self, limits: QueryLimits) -> None:
        self.limits, self.samples = limits, 0
        self.deadline = time.monotonic() + limits.timeout_s

    def left(self) -> int:
        return self.limits.max_samples - self.samples

    def room(self, samples: int) -> None:
        """Refuse now when ``samples`` more would not fit (before they are made)."""
        if samples > self.left():
            raise QueryFailed(TOO_MANY_SAMPLES)

    def take(self, samples: int) -> None:
        self.room(samples)
        self.samples += samples

    def check(self) -> None:
        """Refuse once the query has run past its time."""
        if time.monotonic() > self.deadline:
            raise QueryTimeout("query timed out in expression evaluation")

    def seconds_left(self) -> float:
        return max(self.deadline - time.monotonic(), 0.0)
