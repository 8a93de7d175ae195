"""Aggregations (``sum``, ``avg``, ``topk``, ``quantile``… ``by``/``without`` labels): a vector's series grouped, and
each group reduced step by step."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import promql_parser as pp

from raysight.errors import BadQuery
from raysight.promql.values import NAME, Scalar, Series, Value, Vector, integer, key

if TYPE_CHECKING:
    from raysight.promql.evaluator import Evaluator


def aggregate(ev: Evaluator, node: Any) -> Value:
    """An aggregation's value: its vector's series grouped by their labels, each group reduced at each step."""
    op = str(node.op)
    inner = ev.eval(node.expr)
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
        groups.setdefault(key(labels), (labels, []))[1].append(s)
    param = ev.eval(node.param) if node.param is not None else None
    if op in ("topk", "bottomk"):
        return _top(ev, op, param, groups)
    out = []
    for labels, members in groups.values():
        ev.budget.check()
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
                values = np.ones(len(ev.steps))
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
                values = np.array([quantile(param.values[i], stack[present[:, i], i]) for i in range(len(ev.steps))])
            else:
                raise BadQuery(f"aggregation {op}() is not supported")
        out.append(Series(labels, np.where(count > 0, values, np.nan)))
    return Vector(out)


def _top(ev: Evaluator, op: str, param: Value | None, groups: dict[Any, tuple[dict[str, str], list[Series]]]) -> Value:
    """``topk`` / ``bottomk``: the ``k`` largest / smallest series of each group at each step."""
    if not isinstance(param, Scalar):
        raise BadQuery(f"{op}() takes a scalar parameter")
    kept: dict[int, np.ndarray] = {}
    members_all: list[Series] = []
    for _, members in groups.values():
        base = len(members_all)
        members_all += members
        stack = np.vstack([m.values for m in members])
        for i in range(len(ev.steps)):
            ev.budget.check()
            k = integer(param.values[i])
            column = stack[:, i]
            order = [
                j for j in np.argsort(-column if op == "topk" else column, kind="stable") if not np.isnan(column[j])
            ]
            for j in order[: max(k, 0)]:
                kept.setdefault(base + j, np.zeros(len(ev.steps), dtype=bool))[i] = True
    return Vector(
        [
            Series(members_all[j].labels, np.where(mask, members_all[j].values, np.nan))
            for j, mask in sorted(kept.items())
        ]
    )


# binary operators


def quantile(q: float, values: np.ndarray) -> float:
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
