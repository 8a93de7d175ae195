"""PromQL, evaluated as Prometheus 2.42 does (the release Debian ships), over the samples a :class:`Source` gives.
Pure: parsing is `promql-parser`'s, the storage is the caller's (``store/metrics_query.py``).

Every expression is evaluated at all steps of a query at once (an instant query is a range of one step): a vector is
series of labels with an array of values over the steps (NaN where the series has no value then), a scalar an array.
Prometheus's rules kept: a selector takes each step's latest sample within the 5-minute lookback, unless the series
went stale (its target scraped without it) since; a range selector the samples within ``[t - range, t]``; ``rate``
and ``increase`` extrapolate to the range's ends and correct counter resets; arithmetic drops the metric name.

Every query is bounded: its text (length, nesting) before it is parsed, its regexes by RE2's linear time, and its
evaluation by a :class:`Budget` of samples and seconds (``--query-max-samples``, ``--query-timeout``).
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import promql_parser as pp
import re2

from raysight.errors import BadQuery, QueryFailed, QueryTimeout
from raysight.settings import QueryLimits

LOOKBACK_MS = 300_000
NAME = "__name__"
NEVER = np.iinfo(np.int64).max
MAX_QUERY_CHARS = 256 * 1024  # (a regex of some thousands of alternatives, as a dashboard's variable makes, fits)
# How deep an expression may nest: promql-parser takes memory quadratic in an expression's depth (1,000 `(`: 80 MB;
# 5,000: 1.7 GB; 5,000 chained `+` crash it), and the evaluator recurses into it (two or three frames a level)
MAX_NESTING = 200
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


@dataclass(frozen=True)
class Matcher:
    name: str
    op: str  # = != =~ !~
    value: str

    def matches(self, labels: dict[str, str]) -> bool:
        value = labels.get(self.name, "")
        if self.op in ("=", "!="):
            return (value == self.value) == (self.op == "=")
        return (_regex(self.value).search(value) is not None) == (self.op == "=~")


# Regexes run in RE2, in time linear in the text (Python's `re` backtracks: `.{12}(?:[\w-]+)+X` against a Ray
# session name took hours, holding the GIL), anchored as Prometheus 2.42 anchors them (`^(?:…)$`, where `.` matches
# no newline). Each compiled one holds at most 1 MiB (a larger one, such as 1,000 alternatives of 56-character IDs,
# is refused), and the cache keeps the last 256 (re2 its own 128): ~220 MB at most, 500 such patterns measured.
_RE2 = re2.Options()
_RE2.max_mem = 1 << 20
_RE2.log_errors = False  # (said in the answer instead)


def _regex(pattern: str) -> Any:
    try:
        return _compiled(pattern)
    except re2.error as exc:
        (why,) = exc.args
        why = why.decode(errors="replace") if isinstance(why, bytes) else str(why)
        raise BadQuery(f"invalid regular expression {shortened(pattern)!r}: {why}") from None


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    return re2.compile(f"^(?:{pattern})$", _RE2)


def shortened(text: str, most: int = 200) -> str:
    """``text`` for an error message, cut to ``most`` characters."""
    return text if len(text) <= most else f"{text[:most]}… ({len(text):,} characters)"


@dataclass
class Samples:
    """One series' raw samples in time order, and for each the time from which it no longer stands (its target's
    next scrape, when that scrape lacked the series: Prometheus's staleness marker), else :data:`NEVER`."""

    labels: dict[str, str]
    ts: np.ndarray  # int64 ms
    values: np.ndarray  # float64
    stale_from: np.ndarray  # int64 ms


class Source(Protocol):
    def select(
        self, matchers: list[Matcher], start_ms: int, end_ms: int, budget: Budget, points_each: int
    ) -> list[Samples]:
        """The series every matcher matches, with their samples from ``start_ms`` to ``end_ms`` (inclusive), each
        sample taken from ``budget``; refused before any is loaded when the series found would leave no room in it
        for ``points_each`` points a series (what the caller makes of each)."""
        ...

    def lookback_ms(self, steps: np.ndarray) -> np.ndarray:
        """How far back an instant vector looks for a sample at each step: :data:`LOOKBACK_MS`, or more where the
        samples were thinned (``store/metric_downsample.py``)."""
        ...


@dataclass
class Series:
    labels: dict[str, str]
    values: np.ndarray  # float64 a step, NaN where it has none


@dataclass
class Vector:
    series: list[Series] = field(default_factory=list)


@dataclass
class Scalar:
    values: np.ndarray


@dataclass
class String:
    value: str


@dataclass
class Matrix:
    """A range selector's samples, the answer of an instant query that asks for one."""

    series: list[tuple[dict[str, str], np.ndarray, np.ndarray]]  # labels, ts (ms), values


Value = Vector | Scalar | String | Matrix


def parse(query: str) -> pp.Expr:
    """``query``'s syntax tree; refused first when it is longer than :data:`MAX_QUERY_CHARS` or nests deeper than
    :data:`MAX_NESTING`."""
    if len(query) > MAX_QUERY_CHARS:
        raise BadQuery(f"the query is {len(query):,} characters long, over {MAX_QUERY_CHARS:,}")
    depth = _nesting(query)
    if depth > MAX_NESTING:
        raise BadQuery(
            f"the query nests too deep: its brackets and operators come to {depth:,} levels, over {MAX_NESTING}"
        )
    try:
        return pp.parse(query)
    except (ValueError, RuntimeError) as exc:
        raise BadQuery(f"parse error: {shortened(str(exc), 500)}") from None


_OPERATOR_CHARS = frozenset("+-*/%^=!<>")
_OPERATOR_WORDS = frozenset({"and", "or", "unless", "atan2"})
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:")


def _nesting(query: str) -> int:
    """How deep ``query``'s syntax tree can be, read from its text: the deepest its brackets nest plus how many
    operators it has (outside strings, comments and label matchers), as a node nests within another through one or
    the other. Refuses an ``@`` time before 1970 too (promql-parser panics reading it back)."""
    deepest = depth = operators = braces = 0
    i, n = 0, len(query)
    while i < n:
        c = query[i]
        if c in "\"'`":  # a string: to its closing quote (`…` takes no escapes)
            i += 1
            while i < n and query[i] != c:
                i += 2 if c != "`" and query[i] == "\\" else 1
        elif c == "#":  # a comment: to the line's end
            while i < n and query[i] != "\n":
                i += 1
        elif c in "([{":
            depth += 1
            deepest = max(deepest, depth)
            braces += c == "{"
        elif c in ")]}":
            depth -= 1
            braces -= c == "}" and braces > 0
        elif c in _WORD_CHARS:
            start = i
            while i + 1 < n and query[i + 1] in _WORD_CHARS:
                i += 1
            operators += not braces and query[start : i + 1].lower() in _OPERATOR_WORDS
        elif c in _OPERATOR_CHARS:
            operators += not braces
        elif c == "@":
            after = i + 1
            while after < n and query[after].isspace():
                after += 1
            if after < n and query[after] == "-":
                raise BadQuery("an @ modifier's time before 1970 is not supported")
        i += 1
    return deepest + operators


def evaluate(
    query: str, source: Source, start_ms: int, end_ms: int, step_ms: int, budget: Budget | None = None
) -> Value:
    """``query`` at each step from ``start_ms`` to ``end_ms``, within ``budget`` (None: the default limits')."""
    steps = np.arange(start_ms, end_ms + 1, step_ms, dtype=np.int64)
    return _Evaluator(source, steps, budget or Budget(QueryLimits())).eval(parse(query))


def _field(node: Any, name: str) -> Any:
    """``node.name``: a duration or time promql-parser cannot hand over (past Python's) refused."""
    try:
        return getattr(node, name)
    except (ValueError, OverflowError):
        raise BadQuery(f"the query's {'@ time' if name == 'at' else name} is out of range") from None


def _ms(delta: Any) -> int:
    return int(delta.total_seconds() * 1000) if delta is not None else 0


def _matchers(vs: Any) -> list[Matcher]:
    ops = [(pp.MatchOp.Equal, "="), (pp.MatchOp.NotEqual, "!="), (pp.MatchOp.Re, "=~"), (pp.MatchOp.NotRe, "!~")]
    found = [Matcher(m.name, next(o for k, o in ops if m.op == k), m.value) for m in vs.matchers.matchers]
    if vs.matchers.or_matchers:
        raise BadQuery("the `or` of label matchers is not supported")
    if vs.name:
        found.append(Matcher(NAME, "=", vs.name))
    if all(m.matches({}) for m in found):  # (each would match a series without that label: everything)
        raise BadQuery("vector selector must contain at least one non-empty matcher")
    return found


def _without_name(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k != NAME}


def _key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


class _Evaluator:
    def __init__(self, source: Source, steps: np.ndarray, budget: Budget) -> None:
        self.source, self.steps, self.budget = source, steps, budget

    def eval(self, node: Any) -> Value:
        """``node``'s value, its points (a step's of each series) taken from the budget; the nodes that make
        series from samples (selectors, range functions) see that there is room for them first."""
        self.budget.check()
        kind = type(node).__name__
        handler: Callable[[Any], Value] | None = getattr(self, f"_{kind}", None)
        if handler is None:
            raise BadQuery(f"{kind} is not supported")
        value = handler(node)
        if isinstance(value, Vector):
            self.budget.take(len(value.series) * len(self.steps))
        elif isinstance(value, Scalar):
            self.budget.take(len(self.steps))
        return value

    # literals and selectors

    def _NumberLiteral(self, node: Any) -> Value:
        return Scalar(np.full(len(self.steps), float(node.val)))

    def _StringLiteral(self, node: Any) -> Value:
        return String(node.val)

    def _ParenExpr(self, node: Any) -> Value:
        return self.eval(node.expr)

    def _UnaryExpr(self, node: Any) -> Value:
        value = self.eval(node.expr)
        if isinstance(value, Scalar):
            return Scalar(-value.values)
        if isinstance(value, Vector):
            return Vector([Series(_without_name(s.labels), -s.values) for s in value.series])
        raise BadQuery("unary minus applies to a scalar or a vector")

    def _selected(self, vs: Any, reach_ms: int, points_each: int) -> tuple[list[Samples], np.ndarray]:
        """The series ``vs`` selects with their samples from ``reach_ms`` before the first step, and the steps
        shifted by its offset or pinned by its ``@``; with room in the budget for ``points_each`` a series."""
        steps = self.steps
        if (at := vs.at) is not None:
            if at.type == pp.AtModifierType.Start:
                pinned = self.steps[0]
            elif at.type == pp.AtModifierType.End:
                pinned = self.steps[-1]
            else:
                pinned = int(_field(at, "at").timestamp() * 1000)
            steps = np.full(len(self.steps), pinned, dtype=np.int64)
        steps = steps - _ms(_field(vs, "offset"))
        found = self.source.select(
            _matchers(vs), int(steps.min()) - reach_ms, int(steps.max()), self.budget, points_each
        )
        return found, steps

    def _VectorSelector(self, node: Any, times: bool = False) -> Value:
        """Each series' latest sample at each step (its time instead, for ``timestamp()``)."""
        lookback = self.source.lookback_ms(self.steps)
        found, steps = self._selected(node, int(lookback.max()), len(self.steps))
        out = []
        for s in found:
            i = np.searchsorted(s.ts, steps, side="right") - 1  # the latest sample at or before each step
            ok = i >= 0
            j = np.where(ok, i, 0)
            ok &= (s.ts[j] >= steps - lookback) & (s.stale_from[j] > steps)
            if ok.any():
                picked = s.ts[j] / 1000.0 if times else s.values[j]
                out.append(Series(_without_name(s.labels) if times else s.labels, np.where(ok, picked, np.nan)))
        return Vector(out)

    def _windows(self, node: Any, points_each: int) -> tuple[list[Samples], np.ndarray, np.ndarray, np.ndarray, int]:
        """A range selector's series, and for each step the index range ``[lo, hi)`` of its samples in range."""
        range_ms = _ms(_field(node, "range"))
        found, steps = self._selected(node.vector_selector, range_ms, points_each)
        los = [np.searchsorted(s.ts, steps - range_ms, side="left") for s in found]
        his = [np.searchsorted(s.ts, steps, side="right") for s in found]
        return found, steps, np.array(los), np.array(his), range_ms

    def _MatrixSelector(self, node: Any) -> Value:
        if len(self.steps) != 1:
            raise BadQuery("a range vector is only an answer to an instant query; apply a function to it")
        found, _, los, his, _ = self._windows(node, 0)
        return Matrix(
            [
                (s.labels, s.ts[lo[0] : hi[0]], s.values[lo[0] : hi[0]])
                for s, lo, hi in zip(found, los, his)
                if hi[0] > lo[0]
            ]
        )

    # functions

    def _Call(self, node: Any) -> Value:
        name = node.func.name
        if name in _RANGE_FUNCTIONS:
            return self._range_function(name, node.args)
        if name == "timestamp":  # of each sample a selector picks; else of the step
            (arg,) = node.args
            if type(arg).__name__ == "VectorSelector":
                return self._VectorSelector(arg, times=True)
            value = self.eval(arg)
            if not isinstance(value, Vector):
                raise BadQuery("timestamp() takes an instant vector")
            return Vector(
                [
                    Series(_without_name(s.labels), np.where(np.isnan(s.values), np.nan, self.steps / 1000.0))
                    for s in value.series
                ]
            )
        function = _FUNCTIONS.get(name)
        if function is None:
            raise BadQuery(f"function {name}() is not supported")
        return function(self, [self.eval(a) for a in node.args])

    def _range_function(self, name: str, args: Sequence[Any]) -> Value:
        matrix = args[-1]
        if type(matrix).__name__ != "MatrixSelector":
            raise BadQuery(f"{name}() takes a range vector (subqueries are not supported)")
        param = None
        if len(args) == 2:
            first = self.eval(args[0])
            if not isinstance(first, Scalar):
                raise BadQuery(f"{name}() takes a scalar first")
            param = first.values
        found, steps, los, his, range_ms = self._windows(matrix, len(self.steps))
        out = []
        for s, lo, hi in zip(found, los, his):
            self.budget.check()  # (some reduce each window in Python)
            values = _RANGE_FUNCTIONS[name](s, steps, lo, hi, range_ms, param)
            if not np.isnan(values).all():
                labels = s.labels if name in ("last_over_time",) else _without_name(s.labels)
                out.append(Series(labels, values))
        return Vector(out)

    # aggregation

    def _AggregateExpr(self, node: Any) -> Value:
        op = str(node.op)
        inner = self.eval(node.expr)
        if not isinstance(inner, Vector):
            raise BadQuery(f"{op}() aggregates a vector")
        by = node.modifier is not None and node.modifier.type == pp.AggModifierType.By
        listed = set(node.modifier.labels) if node.modifier is not None else set()

        def grouping(labels: dict[str, str]) -> dict[str, str]:
            if node.modifier is None:  # all into one
                return {}
            if by:
                return {k: v for k, v in labels.items() if k in listed}
            return {k: v for k, v in labels.items() if k not in listed and k != NAME}

        groups: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], list[Series]]] = {}
        for s in inner.series:
            labels = grouping(s.labels)
            groups.setdefault(_key(labels), (labels, []))[1].append(s)
        param = self.eval(node.param) if node.param is not None else None
        if op in ("topk", "bottomk"):
            return self._top(op, param, groups)
        out = []
        for labels, members in groups.values():
            self.budget.check()
            stack = np.vstack([m.values for m in members])
            present = ~np.isnan(stack)
            count = present.sum(axis=0)
            with np.errstate(invalid="ignore", divide="ignore"):
                if op == "sum":
                    values = np.nansum(stack, axis=0)
                elif op == "avg":
                    values = np.nansum(stack, axis=0) / count
                elif op == "count":
                    values = count.astype(np.float64)
                elif op == "group":
                    values = np.ones(len(self.steps))
                elif op in ("min", "max"):
                    filled = np.where(present, stack, np.inf if op == "min" else -np.inf)
                    values = filled.min(axis=0) if op == "min" else filled.max(axis=0)
                elif op in ("stddev", "stdvar"):
                    mean = np.nansum(stack, axis=0) / count
                    var = np.nansum((stack - mean) ** 2, axis=0) / count
                    values = np.sqrt(var) if op == "stddev" else var
                elif op == "quantile":
                    if not isinstance(param, Scalar):
                        raise BadQuery("quantile() takes a scalar parameter")
                    values = np.array(
                        [_quantile(param.values[i], stack[present[:, i], i]) for i in range(len(self.steps))]
                    )
                else:
                    raise BadQuery(f"aggregation {op}() is not supported")
            out.append(Series(labels, np.where(count > 0, values, np.nan)))
        return Vector(out)

    def _top(self, op: str, param: Value | None, groups: dict[Any, tuple[dict[str, str], list[Series]]]) -> Value:
        if not isinstance(param, Scalar):
            raise BadQuery(f"{op}() takes a scalar parameter")
        kept: dict[int, np.ndarray] = {}
        members_all: list[Series] = []
        for _, members in groups.values():
            base = len(members_all)
            members_all += members
            stack = np.vstack([m.values for m in members])
            for i in range(len(self.steps)):
                self.budget.check()
                k = _int(param.values[i])
                column = stack[:, i]
                order = [
                    j for j in np.argsort(-column if op == "topk" else column, kind="stable") if not np.isnan(column[j])
                ]
                for j in order[: max(k, 0)]:
                    kept.setdefault(base + j, np.zeros(len(self.steps), dtype=bool))[i] = True
        return Vector(
            [
                Series(members_all[j].labels, np.where(mask, members_all[j].values, np.nan))
                for j, mask in sorted(kept.items())
            ]
        )

    # binary operators

    def _BinaryExpr(self, node: Any) -> Value:
        op = str(node.op)
        lhs, rhs = self.eval(node.lhs), self.eval(node.rhs)
        modifier = node.modifier
        return_bool = bool(modifier is not None and modifier.return_bool)
        if op in ("and", "or", "unless"):
            if not (isinstance(lhs, Vector) and isinstance(rhs, Vector)):
                raise BadQuery(f"set operator {op} needs vectors on both sides")
            return self._set_op(op, lhs, rhs, modifier)
        if isinstance(lhs, Scalar) and isinstance(rhs, Scalar):
            return Scalar(_apply(op, lhs.values, rhs.values, return_bool=True))
        if isinstance(lhs, Vector) and isinstance(rhs, Scalar):
            return self._vector_scalar(op, lhs, rhs.values, return_bool, scalar_left=False)
        if isinstance(lhs, Scalar) and isinstance(rhs, Vector):
            return self._vector_scalar(op, rhs, lhs.values, return_bool, scalar_left=True)
        if isinstance(lhs, Vector) and isinstance(rhs, Vector):
            return self._vector_vector(op, lhs, rhs, modifier, return_bool)
        raise BadQuery(f"operator {op} does not apply to these operands")

    def _vector_scalar(
        self, op: str, vector: Vector, scalar: np.ndarray, return_bool: bool, scalar_left: bool
    ) -> Value:
        out = []
        comparison = op in _COMPARISONS
        for s in vector.series:
            a, b = (scalar, s.values) if scalar_left else (s.values, scalar)
            values = _apply(op, a, b, return_bool)
            if comparison and not return_bool:
                values = np.where(np.isnan(values), np.nan, s.values)  # a filter: the vector's own values
            labels = s.labels if comparison and not return_bool else _without_name(s.labels)
            if not np.isnan(values).all():
                out.append(Series(labels, values))
        return Vector(out)

    def _signature(self, modifier: Any) -> Callable[[dict[str, str]], tuple[tuple[str, str], ...]]:
        matching = modifier.matching if modifier is not None else None
        if matching is None:
            return lambda labels: _key(_without_name(labels))
        listed = set(matching.labels)
        if matching.type == pp.LabelModifierType.Include:  # on(...)
            return lambda labels: _key({k: v for k, v in labels.items() if k in listed})
        return lambda labels: _key({k: v for k, v in labels.items() if k not in listed and k != NAME})

    def _vector_vector(self, op: str, lhs: Vector, rhs: Vector, modifier: Any, return_bool: bool) -> Value:
        signature = self._signature(modifier)
        card = None if modifier is None else modifier.card
        if card is not None and card == pp.VectorMatchCardinality.OneToMany:  # group_right: the many side is the right
            return self._match(op, rhs, lhs, signature, modifier, return_bool, swap=True, one_to_one=False)
        one_to_one = card is None or card == pp.VectorMatchCardinality.OneToOne
        return self._match(op, lhs, rhs, signature, modifier, return_bool, swap=False, one_to_one=one_to_one)

    def _match(
        self,
        op: str,
        many: Vector,
        one: Vector,
        signature: Any,
        modifier: Any,
        return_bool: bool,
        swap: bool,
        one_to_one: bool,
    ) -> Value:
        by_sig: dict[Any, Series] = {}
        for s in one.series:
            sig = signature(s.labels)
            if sig in by_sig and not (np.isnan(by_sig[sig].values) | np.isnan(s.values)).all():
                raise QueryFailed(
                    f"found duplicate series for the match group on the {'left' if swap else 'right'} hand-side of the "
                    "operation; many-to-many matching not allowed: matching labels must be unique on one side"
                )
            # (series of one signature at different steps are one: Prometheus matches step by step)
            earlier = by_sig.get(sig)
            by_sig[sig] = (
                s if earlier is None else Series(s.labels, np.where(np.isnan(s.values), earlier.values, s.values))
            )
        seen: dict[Any, np.ndarray] = {}
        out = []
        comparison = op in _COMPARISONS
        matching = modifier.matching if modifier is not None else None
        include = [] if modifier is None or not modifier.group_labels else list(modifier.group_labels)
        for s in many.series:
            sig = signature(s.labels)
            other = by_sig.get(sig)
            if other is None:
                continue
            if one_to_one:
                present = ~np.isnan(s.values)
                if (seen.get(sig, np.zeros(len(present), dtype=bool)) & present).any():
                    raise QueryFailed(
                        "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)"
                    )
                seen[sig] = seen.get(sig, np.zeros(len(present), dtype=bool)) | present
            a, b = (other.values, s.values) if swap else (s.values, other.values)
            values = _apply(op, a, b, return_bool)
            if comparison and not return_bool:
                values = np.where(np.isnan(values), np.nan, a)
            if np.isnan(values).all():
                continue
            labels = dict(s.labels)
            if not comparison or return_bool:
                labels.pop(NAME, None)
            if one_to_one and matching is not None:
                listed = set(matching.labels)
                if matching.type == pp.LabelModifierType.Include:
                    labels = {k: v for k, v in labels.items() if k in listed}
                else:
                    labels = {k: v for k, v in labels.items() if k not in listed}
            for name in include:
                if name in other.labels:
                    labels[name] = other.labels[name]
                else:
                    labels.pop(name, None)
            out.append(Series(labels, values))
        return Vector(out)

    def _set_op(self, op: str, lhs: Vector, rhs: Vector, modifier: Any) -> Value:
        signature = self._signature(modifier)
        rhs_present: dict[Any, np.ndarray] = {}
        for s in rhs.series:
            sig = signature(s.labels)
            present = ~np.isnan(s.values)
            rhs_present[sig] = rhs_present.get(sig, np.zeros(len(self.steps), dtype=bool)) | present
        none = np.zeros(len(self.steps), dtype=bool)
        if op == "and":
            kept = [
                Series(s.labels, np.where(rhs_present.get(signature(s.labels), none), s.values, np.nan))
                for s in lhs.series
            ]
            return Vector([s for s in kept if not np.isnan(s.values).all()])
        if op == "unless":
            kept = [
                Series(s.labels, np.where(rhs_present.get(signature(s.labels), none), np.nan, s.values))
                for s in lhs.series
            ]
            return Vector([s for s in kept if not np.isnan(s.values).all()])
        lhs_present: dict[Any, np.ndarray] = {}
        for s in lhs.series:
            sig = signature(s.labels)
            lhs_present[sig] = lhs_present.get(sig, none) | ~np.isnan(s.values)
        merged = {_key(s.labels): Series(s.labels, s.values.copy()) for s in lhs.series}
        for s in rhs.series:
            values = np.where(lhs_present.get(signature(s.labels), none), np.nan, s.values)
            same = merged.get(_key(s.labels))
            if same is not None:  # the same series at the steps the left side lacks it
                same.values = np.where(np.isnan(same.values), values, same.values)
            elif not np.isnan(values).all():
                merged[_key(s.labels)] = Series(s.labels, values)
        return Vector(list(merged.values()))


_COMPARISONS = ("==", "!=", ">", "<", ">=", "<=")


def _apply(op: str, a: np.ndarray, b: np.ndarray, return_bool: bool) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return np.divide(a, b)
        if op == "%":
            return np.fmod(a, b)
        if op == "^":
            return np.power(a, b)
        if op == "atan2":
            return np.arctan2(a, b)
        if op in _COMPARISONS:
            truth = {"==": a == b, "!=": a != b, ">": a > b, "<": a < b, ">=": a >= b, "<=": a <= b}[op]
            both = ~(np.isnan(a) | np.isnan(b))
            if return_bool:
                return np.where(both, truth.astype(np.float64), np.nan)
            return np.where(both & truth, 1.0, np.nan)
    raise BadQuery(f"operator {op} is not supported")


def _int(value: float) -> int:
    """A scalar parameter as Prometheus takes an integer (topk's k): refused where no int64 holds it."""
    if not -(2.0**63) <= value < 2.0**63:  # (NaN too)
        shown = repr(float(value))  # (as Go's %v writes it)
        raise QueryFailed(f"Scalar value {_SPECIAL.get(shown, shown)} overflows int64")
    return int(value)


def number_text(value: float) -> str:
    """``value`` as Prometheus writes one (strconv's 'f', -1): the shortest digits that read back the same, without
    an exponent; NaN, +Inf, -Inf."""
    text = repr(float(value))  # (a numpy float's repr names its type)
    if text.endswith(".0"):
        return text[:-2]
    if "e" in text or text in _SPECIAL:
        return _SPECIAL.get(text) or np.format_float_positional(value, trim="-")
    return text


_SPECIAL = {"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}


def _quantile(q: float, values: np.ndarray) -> float:
    """Prometheus's quantile (φ NaN: NaN, φ < 0: -Inf, φ > 1: +Inf, else linear interpolation between ranks)."""
    if len(values) == 0 or math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    ordered = np.sort(values)
    rank = q * (len(ordered) - 1)
    low = int(math.floor(rank))
    high = min(low + 1, len(ordered) - 1)
    weight = rank - low
    return float(ordered[low] * (1 - weight) + ordered[high] * weight)


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


_RANGE_FUNCTIONS: dict[str, Callable[..., np.ndarray]] = {
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
    "quantile_over_time": _over_time(lambda v, q: _quantile(q, v)),
}


# Instant functions


def _vector_map(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[_Evaluator, list[Value]], Value]:
    def apply(ev: _Evaluator, args: list[Value]) -> Value:
        (vector, *_) = args
        if not isinstance(vector, Vector):
            raise BadQuery("the function takes an instant vector")
        with np.errstate(invalid="ignore", divide="ignore"):
            return Vector([Series(_without_name(s.labels), fn(s.values)) for s in vector.series])

    return apply


def _scalar_arg(args: list[Value], i: int, name: str) -> np.ndarray:
    value = args[i]
    if not isinstance(value, Scalar):
        raise BadQuery(f"{name}() takes a scalar as argument {i + 1}")
    return value.values


def _clamp(ev: _Evaluator, args: list[Value], low: int | None, high: int | None, name: str) -> Value:
    vector = args[0]
    if not isinstance(vector, Vector):
        raise BadQuery(f"{name}() takes an instant vector")
    lo = _scalar_arg(args, low, name) if low is not None else -np.inf
    hi = _scalar_arg(args, high, name) if high is not None else np.inf
    return Vector([Series(_without_name(s.labels), np.clip(s.values, lo, hi)) for s in vector.series])


def _histogram_quantile(ev: _Evaluator, args: list[Value]) -> Value:
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
        groups.setdefault(_key(labels), (labels, []))[1].append((bound, s.values))
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


def _label_replace(ev: _Evaluator, args: list[Value]) -> Value:
    vector, *strings = args
    if not isinstance(vector, Vector) or len(strings) != 4 or not all(isinstance(s, String) for s in strings):
        raise BadQuery("label_replace(v, dst, replacement, src, regex)")
    dst, replacement, src, pattern = (s.value for s in strings if isinstance(s, String))
    regex = _regex(pattern)
    out = []
    for s in vector.series:
        labels = dict(s.labels)
        if (match := regex.search(s.labels.get(src, ""))) is not None:
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


def _vector_fn(ev: _Evaluator, args: list[Value]) -> Value:
    return Vector([Series({}, _scalar_arg(args, 0, "vector"))])


def _scalar_fn(ev: _Evaluator, args: list[Value]) -> Value:
    """The value of a vector's only series at each step, NaN where it has none or several."""
    vector = args[0]
    if not isinstance(vector, Vector):
        raise BadQuery("scalar() takes an instant vector")
    return Scalar(_single(vector) if vector.series else np.full(len(ev.steps), np.nan))


def _single(vector: Vector) -> np.ndarray:
    stack = np.vstack([s.values for s in vector.series])
    return np.where((~np.isnan(stack)).sum(axis=0) == 1, np.nansum(stack, axis=0), np.nan)


def _time_fn(ev: _Evaluator, args: list[Value]) -> Value:
    return Scalar(ev.steps / 1000.0)


def _absent(ev: _Evaluator, args: list[Value]) -> Value:
    vector = args[0]
    if not isinstance(vector, Vector):
        raise BadQuery("absent() takes an instant vector")
    present = np.zeros(len(ev.steps), dtype=bool)
    for s in vector.series:
        present |= ~np.isnan(s.values)
    return Vector([Series({}, np.where(present, np.nan, 1.0))]) if not present.all() else Vector()


def _sort(descending: bool) -> Callable[[_Evaluator, list[Value]], Value]:
    def fn(ev: _Evaluator, args: list[Value]) -> Value:
        vector = args[0]
        if not isinstance(vector, Vector):
            raise BadQuery("sort() takes an instant vector")
        key = [float(np.nan_to_num(s.values[-1], nan=-np.inf)) for s in vector.series]
        order = sorted(range(len(key)), key=lambda i: key[i], reverse=descending)
        return Vector([vector.series[i] for i in order])

    return fn


def _round(ev: _Evaluator, args: list[Value]) -> Value:
    to = _scalar_arg(args, 1, "round") if len(args) > 1 else np.ones(len(ev.steps))
    return _vector_map(lambda v: np.floor(v / to + 0.5) * to)(ev, args[:1])


_FUNCTIONS: dict[str, Callable[[_Evaluator, list[Value]], Value]] = {
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
