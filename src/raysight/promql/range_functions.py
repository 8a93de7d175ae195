"""Range functions (``rate``, ``increase``, the ``*_over_time`` family…): a value a step from each step's window
``[lo, hi)`` of a series' samples, applied to the series a range selector gives."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from raysight.errors import BadQuery
from raysight.promql.aggregate import quantile
from raysight.promql.selectors import windows
from raysight.promql.source import Samples
from raysight.promql.values import Scalar, Series, Value, Vector, without_name

if TYPE_CHECKING:
    from raysight.promql.evaluator import Evaluator


def range_function(ev: Evaluator, name: str, args: Sequence[Any]) -> Value:
    """The range function ``name`` over each series of the range selector that is its last argument (after a scalar
    parameter, for those that take one)."""
    matrix = args[-1]
    if type(matrix).__name__ != "MatrixSelector":
        raise BadQuery(f"{name}() takes a range vector (subqueries are not supported)")
    param = None
    if len(args) == 2:
        first = ev.eval(args[0])
        if not isinstance(first, Scalar):
            raise BadQuery(f"{name}() takes a scalar first")
        param = first.values
    found, steps, los, his, range_ms = windows(ev, matrix, len(ev.steps))
    out = []
    for s, lo, hi in zip(found, los, his):
        ev.budget.check()  # (some reduce each window in Python)
        values = RANGE_FUNCTIONS[name](s, steps, lo, hi, range_ms, param)
        if not np.isnan(values).all():
            labels = s.labels if name in ("last_over_time",) else without_name(s.labels)
            out.append(Series(labels, values))
    return Vector(out)


# Range functions: each step's window [lo, hi) of a series' samples → a value a step (NaN: none)


def _extrapolated(counter: bool, rate: bool) -> Callable[..., np.ndarray]:
    def fn(s: Samples, steps: np.ndarray, lo: np.ndarray, hi: np.ndarray, range_ms: int, _: Any) -> np.ndarray:
        v, t = s.values, s.ts
        if counter:  # the value lost at each reset: what follows it is counted from zero
            drops = np.concatenate([[0.0], np.where(v[1:] < v[:-1], v[:-1], 0.0)]) if len(v) else np.zeros(0)
            corrections = np.cumsum(drops)
        out = np.full(len(steps), np.nan)
        ok = hi - lo >= 2
        if not ok.any():
            return out
        first, last = lo[ok], hi[ok] - 1
        result = v[last] - v[first]
        if counter:
            result = result + corrections[last] - corrections[first]
        start, end = (steps[ok] - range_ms) / 1000.0, steps[ok] / 1000.0
        first_t, last_t = t[first] / 1000.0, t[last] / 1000.0
        to_start, to_end = first_t - start, end - last_t
        sampled = last_t - first_t
        average = sampled / (hi[ok] - lo[ok] - 1)
        if counter:
            with np.errstate(invalid="ignore", divide="ignore"):
                to_zero = np.where((result > 0) & (v[first] >= 0), sampled * (v[first] / result), np.inf)
            to_start = np.minimum(to_start, to_zero)
        threshold = average * 1.1
        interval = sampled + np.where(to_start < threshold, to_start, average / 2)
        interval = interval + np.where(to_end < threshold, to_end, average / 2)
        with np.errstate(invalid="ignore", divide="ignore"):
            result = result * (interval / sampled)
        if rate:
            result = result / (range_ms / 1000.0)
        out[ok] = result
        return out

    return fn


def _instant_rate(rate: bool) -> Callable[..., np.ndarray]:
    def fn(s: Samples, steps: np.ndarray, lo: np.ndarray, hi: np.ndarray, range_ms: int, _: Any) -> np.ndarray:
        out = np.full(len(steps), np.nan)
        ok = hi - lo >= 2
        last, prev = hi[ok] - 1, hi[ok] - 2
        v, t = s.values, s.ts
        if rate:
            change = np.where(v[last] < v[prev], v[last], v[last] - v[prev])
            out[ok] = change / ((t[last] - t[prev]) / 1000.0)
        else:
            out[ok] = v[last] - v[prev]
        return out

    return fn


def _over_time(reduce: Callable[[np.ndarray, Any], float]) -> Callable[..., np.ndarray]:
    def fn(s: Samples, steps: np.ndarray, lo: np.ndarray, hi: np.ndarray, range_ms: int, param: Any) -> np.ndarray:
        return np.array(
            [
                reduce(s.values[a:b], None if param is None else param[i]) if b > a else np.nan
                for i, (a, b) in enumerate(zip(lo, hi))
            ]
        )

    return fn


def _windowed(reduce: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    """A range function computed for every step at once: ``reduce(values, lo, hi)`` over the non-empty windows."""

    def fn(s: Samples, steps: np.ndarray, lo: np.ndarray, hi: np.ndarray, range_ms: int, _: Any) -> np.ndarray:
        out = np.full(len(steps), np.nan)
        ok = hi > lo
        if ok.any():
            out[ok] = reduce(s.values, lo[ok], hi[ok])
        return out

    return fn


def _reduced(ufunc: np.ufunc) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """``ufunc`` over each window ``[lo, hi)`` (overlapping ones too), in one ``reduceat``: its bounds interleaved, a
    window's start then its end, the reductions between one window's end and the next's start discarded."""

    def reduce(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        bounds = np.empty(2 * len(lo), dtype=np.intp)
        bounds[0::2], bounds[1::2] = lo, hi
        return np.asarray(ufunc.reduceat(np.append(values, 0.0), bounds)[0::2])

    return reduce


def _std(values: np.ndarray) -> float:
    return float(np.sqrt(np.mean((values - values.mean()) ** 2)))


RANGE_FUNCTIONS: dict[str, Callable[..., np.ndarray]] = {
    "rate": _extrapolated(counter=True, rate=True),
    "increase": _extrapolated(counter=True, rate=False),
    "delta": _extrapolated(counter=False, rate=False),
    "irate": _instant_rate(rate=True),
    "idelta": _instant_rate(rate=False),
    "avg_over_time": _windowed(lambda v, lo, hi: _reduced(np.add)(v, lo, hi) / (hi - lo)),
    "sum_over_time": _windowed(_reduced(np.add)),
    "min_over_time": _windowed(_reduced(np.fmin)),  # (a NaN sample counts only when all are: as Prometheus)
    "max_over_time": _windowed(_reduced(np.fmax)),
    "count_over_time": _windowed(lambda v, lo, hi: (hi - lo).astype(np.float64)),
    "last_over_time": _windowed(lambda v, lo, hi: v[hi - 1]),
    "present_over_time": _windowed(lambda v, lo, hi: np.ones(len(lo))),
    "stddev_over_time": _over_time(lambda v, _: _std(v)),
    "stdvar_over_time": _over_time(lambda v, _: _std(v) ** 2),
    "quantile_over_time": _over_time(lambda v, q: quantile(q, v)),
}
