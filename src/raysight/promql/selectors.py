"""Selectors: an instant vector's latest sample at each step (within the lookback, unless stale), a range vector's
samples in each step's window; each shifted by its offset or pinned by its ``@``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import promql_parser as pp

from raysight.errors import BadQuery
from raysight.promql.matchers import selector_matchers
from raysight.promql.parse import field, ms
from raysight.promql.source import Samples
from raysight.promql.values import Matrix, Series, Value, Vector, without_name

if TYPE_CHECKING:
    from raysight.promql.evaluator import Evaluator


def _selected(ev: Evaluator, vs: Any, reach_ms: int, points_each: int) -> tuple[list[Samples], np.ndarray]:
    """The series ``vs`` selects with their samples from ``reach_ms`` before the first step, and the steps
    shifted by its offset or pinned by its ``@``; with room in the budget for ``points_each`` a series."""
    steps = ev.steps
    if (at := vs.at) is not None:
        if at.type == pp.AtModifierType.Start:
            pinned = ev.steps[0]
        elif at.type == pp.AtModifierType.End:
            pinned = ev.steps[-1]
        else:
            pinned = int(field(at, "at").timestamp() * 1000)
        steps = np.full(len(ev.steps), pinned, dtype=np.int64)
    steps = steps - ms(field(vs, "offset"))
    found = ev.source.select(
        selector_matchers(vs), int(steps.min()) - reach_ms, int(steps.max()), ev.budget, points_each
    )
    return found, steps


def vector_selector(ev: Evaluator, node: Any, times: bool = False) -> Value:
    """Each series' latest sample at each step (its time instead, for ``timestamp()``)."""
    lookback = ev.source.lookback_ms(ev.steps)
    found, steps = _selected(ev, node, int(lookback.max()), len(ev.steps))
    out = []
    for s in found:
        i = np.searchsorted(s.ts, steps, side="right") - 1  # the latest sample at or before each step
        ok = i >= 0
        j = np.where(ok, i, 0)
        ok &= (s.ts[j] >= steps - lookback) & (s.stale_from[j] > steps)
        if ok.any():
            picked = s.ts[j] / 1000.0 if times else s.values[j]
            out.append(Series(without_name(s.labels) if times else s.labels, np.where(ok, picked, np.nan)))
    return Vector(out)


def windows(
    ev: Evaluator, node: Any, points_each: int
) -> tuple[list[Samples], np.ndarray, np.ndarray, np.ndarray, int]:
    """A range selector's series, and for each step the index range ``[lo, hi)`` of its samples in range."""
    range_ms = ms(field(node, "range"))
    found, steps = _selected(ev, node.vector_selector, range_ms, points_each)
    los = [np.searchsorted(s.ts, steps - range_ms, side="left") for s in found]
    his = [np.searchsorted(s.ts, steps, side="right") for s in found]
    return found, steps, np.array(los), np.array(his), range_ms


def matrix_selector(ev: Evaluator, node: Any) -> Value:
    """A range selector's samples: the answer of an instant query (anywhere else, a function takes them)."""
    if len(ev.steps) != 1:
        raise BadQuery("a range vector is only an answer to an instant query; apply a function to it")
    found, _, los, his, _ = windows(ev, node, 0)
    return Matrix(
        [
            (s.labels, s.ts[lo[0] : hi[0]], s.values[lo[0] : hi[0]])
            for s, lo, hi in zip(found, los, his)
            if hi[0] > lo[0]
        ]
    )
