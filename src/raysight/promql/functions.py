"""Function calls: a range function over a range selector (``range_functions.py``), ``timestamp()``, or one of the
instant functions here (``abs``, ``histogram_quantile``, ``label_replace``, ``sort``…), each over evaluated
arguments."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from raysight.errors import BadQuery
from raysight.promql.matchers import regex
from raysight.promql.range_functions import RANGE_FUNCTIONS, range_function
from raysight.promql.selectors import vector_selector
from raysight.promql.values import NAME, Scalar, Series, String, Value, Vector, key, without_name

if TYPE_CHECKING:
    from raysight.promql.evaluator import Evaluator


def call(ev: Evaluator, node: Any) -> Value:
    """A function call's value."""
    name = node.func.name
    if name in RANGE_FUNCTIONS:
        return range_function(ev, name, node.args)
    if name == "timestamp":  # of each sample a selector picks; else of the step
        (arg,) = node.args
        if type(arg).__name__ == "VectorSelector":
            return vector_selector(ev, arg, times=True)
        value = ev.eval(arg)
        if not isinstance(value, Vector):
            raise BadQuery("timestamp() takes an instant vector")
        return Vector(
            [
                Series(without_name(s.labels), np.where(np.isnan(s.values), np.nan, ev.steps / 1000.0))
                for s in value.series
            ]
        )
    function = FUNCTIONS.get(name)
    if function is None:
        raise BadQuery(f"function {name}() is not supported")
    return function(ev, [ev.eval(a) for a in node.args])


def _vector_map(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[Evaluator, list[Value]], Value]:
    def apply(ev: Evaluator, args: list[Value]) -> Value:
        (vector, *_) = args
        if not isinstance(vector, Vector):
            raise BadQuery("the function takes an instant vector")
        with np.errstate(invalid="ignore", divide="ignore"):
            return Vector([Series(without_name(s.labels), fn(s.values)) for s in vector.series])

    return apply


def _scalar_arg(args: list[Value], i: int, name: str) -> np.ndarray:
    value = args[i]
    if not isinstance(value, Scalar):
        raise BadQuery(f"{name}() takes a scalar as argument {i + 1}")
    return value.values


def _clamp(ev: Evaluator, args: list[Value], low: int | None, high: int | None, name: str) -> Value:
    vector = args[0]
    if not isinstance(vector, Vector):
        raise BadQuery(f"{name}() takes an instant vector")
    lo = _scalar_arg(args, low, name) if low is not None else -np.inf
    hi = _scalar_arg(args, high, name) if high is not None else np.inf
    return Vector([Series(without_name(s.labels), np.clip(s.values, lo, hi)) for s in vector.series])


def _histogram_quantile(ev: Evaluator, args: list[Value]) -> Value:
    q, vector = _scalar_arg(args, 0, "histogram_quantile"), args[1]
    if not isinstance(vector, Vector):
        raise BadQuery("histogram_quantile() takes an instant vector of buckets")
    groups: dict[Any, tuple[dict[str, str], list[tuple[float, np.ndarray]]]] = {}
    for s in vector.series:
        try:
            bound = float(s.labels["le"])
        except (KeyError, ValueError):
            continue  # not a bucket
        labels = {k: v for k, v in s.labels.items() if k not in ("le", NAME)}
        groups.setdefault(key(labels), (labels, []))[1].append((bound, s.values))
    out = []
    for labels, buckets in groups.values():
        ev.budget.check()
        buckets.sort(key=lambda b: b[0])
        bounds = np.array([b[0] for b in buckets])
        counts = np.vstack([b[1] for b in buckets])
        values = np.array([_bucket_quantile(q[i], bounds, counts[:, i]) for i in range(len(ev.steps))])
        if not np.isnan(values).all():
            out.append(Series(labels, values))
    return Vector(out)


def _bucket_quantile(q: float, bounds: np.ndarray, counts: np.ndarray) -> float:
    """Prometheus's bucketQuantile: linear interpolation within the bucket the rank falls in."""
    present = ~np.isnan(counts)
    bounds, counts = bounds[present], counts[present]
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if len(counts) < 2 or not math.isinf(bounds[-1]) or bounds[-1] < 0:
        return math.nan
    counts = np.maximum.accumulate(counts)  # monotonic, as Prometheus forces it
    total = counts[-1]
    if total == 0:
        return math.nan
    rank = q * total
    b = int(np.searchsorted(counts, rank, side="left"))
    if b == len(counts) - 1:
        return float(bounds[-2])
    if b == 0 and bounds[0] <= 0:
        return float(bounds[0])
    start, end = (0.0, bounds[0]) if b == 0 else (bounds[b - 1], bounds[b])
    below = 0.0 if b == 0 else counts[b - 1]
    inside = counts[b] - below
    return float(start + (end - start) * ((rank - below) / inside)) if inside else float(end)


def _label_replace(ev: Evaluator, args: list[Value]) -> Value:
    vector, *strings = args
    if not isinstance(vector, Vector) or len(strings) != 4 or not all(isinstance(s, String) for s in strings):
        raise BadQuery("label_replace(v, dst, replacement, src, regex)")
    dst, replacement, src, pattern = (s.value for s in strings if isinstance(s, String))
    compiled = regex(pattern)
    out = []
    for s in vector.series:
        labels = dict(s.labels)
        if (match := compiled.search(s.labels.get(src, ""))) is not None:
            value = _expand(match, replacement)
            if value:
                labels[dst] = value
            else:
                labels.pop(dst, None)
        out.append(Series(labels, s.values))
    return Vector(out)


def _expand(match: Any, template: str) -> str:
    """``template`` with ``$1`` / ``$name`` / ``${name}`` replaced by ``match``'s groups (one it lacks: nothing) and
    ``$$`` by ``$``, as Go's ``Regexp.Expand``."""

    def group(ref: re.Match[str]) -> str:
        name = ref[1] or ref[2]
        if name is None:
            return "$"
        try:
            return match.group(int(name) if name.isdecimal() else name) or ""
        except IndexError:
            return ""

    return _REFERENCE.sub(group, template)


_REFERENCE = re.compile(r"\$(\w+)|\$\{(\w+)\}|\$\$")  # (Python's re: a fixed pattern, which cannot backtrack far)


def _vector_fn(ev: Evaluator, args: list[Value]) -> Value:
    return Vector([Series({}, _scalar_arg(args, 0, "vector"))])


def _scalar_fn(ev: Evaluator, args: list[Value]) -> Value:
    """The value of a vector's only series at each step, NaN where it has none or several."""
    vector = args[0]
    if not isinstance(vector, Vector):
        raise BadQuery("scalar() takes an instant vector")
    return Scalar(_single(vector) if vector.series else np.full(len(ev.steps), np.nan))


def _single(vector: Vector) -> np.ndarray:
    stack = np.vstack([s.values for s in vector.series])
    return np.where((~np.isnan(stack)).sum(axis=0) == 1, np.nansum(stack, axis=0), np.nan)


def _time_fn(ev: Evaluator, args: list[Value]) -> Value:
    return Scalar(ev.steps / 1000.0)


def _absent(ev: Evaluator, args: list[Value]) -> Value:
    vector = args[0]
    if not isinstance(vector, Vector):
        raise BadQuery("absent() takes an instant vector")
    present = np.zeros(len(ev.steps), dtype=bool)
    for s in vector.series:
        present |= ~np.isnan(s.values)
    return Vector([Series({}, np.where(present, np.nan, 1.0))]) if not present.all() else Vector()


def _sort(descending: bool) -> Callable[[Evaluator, list[Value]], Value]:
    def fn(ev: Evaluator, args: list[Value]) -> Value:
        vector = args[0]
        if not isinstance(vector, Vector):
            raise BadQuery("sort() takes an instant vector")
        key = [float(np.nan_to_num(s.values[-1], nan=-np.inf)) for s in vector.series]
        order = sorted(range(len(key)), key=lambda i: key[i], reverse=descending)
        return Vector([vector.series[i] for i in order])

    return fn


def _round(ev: Evaluator, args: list[Value]) -> Value:
    to = _scalar_arg(args, 1, "round") if len(args) > 1 else np.ones(len(ev.steps))
    return _vector_map(lambda v: np.floor(v / to + 0.5) * to)(ev, args[:1])


FUNCTIONS: dict[str, Callable[[Evaluator, list[Value]], Value]] = {
    "abs": _vector_map(np.abs),
    "ceil": _vector_map(np.ceil),
    "floor": _vector_map(np.floor),
    "exp": _vector_map(np.exp),
    "ln": _vector_map(np.log),
    "log2": _vector_map(np.log2),
    "log10": _vector_map(np.log10),
    "sqrt": _vector_map(np.sqrt),
    "round": _round,
    "clamp": lambda ev, a: _clamp(ev, a, 1, 2, "clamp"),
    "clamp_min": lambda ev, a: _clamp(ev, a, 1, None, "clamp_min"),
    "clamp_max": lambda ev, a: _clamp(ev, a, None, 1, "clamp_max"),
    "histogram_quantile": _histogram_quantile,
    "label_replace": _label_replace,
    "vector": _vector_fn,
    "scalar": _scalar_fn,
    "time": _time_fn,
    "absent": _absent,
    "sort": _sort(descending=False),
    "sort_desc": _sort(descending=True),
}
