"""Binary operators: arithmetic, comparisons (filters, or ``bool``) and ``atan2`` between scalars and vectors, the
vectors matched by their labels (``on``/``ignoring``, ``group_left``/``group_right``); and the set operators ``and``,
``or``, ``unless``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import promql_parser as pp

from raysight.errors import BadQuery, QueryFailed
from raysight.promql.values import NAME, Scalar, Series, Value, Vector, key, without_name

if TYPE_CHECKING:
    from raysight.promql.evaluator import Evaluator


def binary(ev: Evaluator, node: Any) -> Value:
    """A binary operator's value, by the kinds of its two sides."""
    op = str(node.op)
    lhs, rhs = ev.eval(node.lhs), ev.eval(node.rhs)
    modifier = node.modifier
    return_bool = bool(modifier is not None and modifier.return_bool)
    if op in ("and", "or", "unless"):
        if not (isinstance(lhs, Vector) and isinstance(rhs, Vector)):
            raise BadQuery(f"set operator {op} needs vectors on both sides")
        return _set_op(ev, op, lhs, rhs, modifier)
    if isinstance(lhs, Scalar) and isinstance(rhs, Scalar):
        return Scalar(_apply(op, lhs.values, rhs.values, return_bool=True))
    if isinstance(lhs, Vector) and isinstance(rhs, Scalar):
        return _vector_scalar(op, lhs, rhs.values, return_bool, scalar_left=False)
    if isinstance(lhs, Scalar) and isinstance(rhs, Vector):
        return _vector_scalar(op, rhs, lhs.values, return_bool, scalar_left=True)
    if isinstance(lhs, Vector) and isinstance(rhs, Vector):
        return _vector_vector(op, lhs, rhs, modifier, return_bool)
    raise BadQuery(f"operator {op} does not apply to these operands")


def _vector_scalar(op: str, vector: Vector, scalar: np.ndarray, return_bool: bool, scalar_left: bool) -> Value:
    out = []
    comparison = op in _COMPARISONS
    for s in vector.series:
        a, b = (scalar, s.values) if scalar_left else (s.values, scalar)
        values = _apply(op, a, b, return_bool)
        if comparison and not return_bool:
            values = np.where(np.isnan(values), np.nan, s.values)  # a filter: the vector's own values
        labels = s.labels if comparison and not return_bool else without_name(s.labels)
        if not np.isnan(values).all():
            out.append(Series(labels, values))
    return Vector(out)


def _signature(modifier: Any) -> Callable[[dict[str, str]], tuple[tuple[str, str], ...]]:
    matching = modifier.matching if modifier is not None else None
    if matching is None:
        return lambda labels: key(without_name(labels))
    listed = set(matching.labels)
    if matching.type == pp.LabelModifierType.Include:  # on(...)
        return lambda labels: key({k: v for k, v in labels.items() if k in listed})
    return lambda labels: key({k: v for k, v in labels.items() if k not in listed and k != NAME})


def _vector_vector(op: str, lhs: Vector, rhs: Vector, modifier: Any, return_bool: bool) -> Value:
    signature = _signature(modifier)
    card = None if modifier is None else modifier.card
    if card is not None and card == pp.VectorMatchCardinality.OneToMany:  # group_right: the many side is the right
        return _match(op, rhs, lhs, signature, modifier, return_bool, swap=True, one_to_one=False)
    one_to_one = card is None or card == pp.VectorMatchCardinality.OneToOne
    return _match(op, lhs, rhs, signature, modifier, return_bool, swap=False, one_to_one=one_to_one)


def _match(
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
        by_sig[sig] = s if earlier is None else Series(s.labels, np.where(np.isnan(s.values), earlier.values, s.values))
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


def _set_op(ev: Evaluator, op: str, lhs: Vector, rhs: Vector, modifier: Any) -> Value:
    signature = _signature(modifier)
    rhs_present: dict[Any, np.ndarray] = {}
    for s in rhs.series:
        sig = signature(s.labels)
        present = ~np.isnan(s.values)
        rhs_present[sig] = rhs_present.get(sig, np.zeros(len(ev.steps), dtype=bool)) | present
    none = np.zeros(len(ev.steps), dtype=bool)
    if op == "and":
        kept = [
            Series(s.labels, np.where(rhs_present.get(signature(s.labels), none), s.values, np.nan)) for s in lhs.series
        ]
        return Vector([s for s in kept if not np.isnan(s.values).all()])
    if op == "unless":
        kept = [
            Series(s.labels, np.where(rhs_present.get(signature(s.labels), none), np.nan, s.values)) for s in lhs.series
        ]
        return Vector([s for s in kept if not np.isnan(s.values).all()])
    lhs_present: dict[Any, np.ndarray] = {}
    for s in lhs.series:
        sig = signature(s.labels)
        lhs_present[sig] = lhs_present.get(sig, none) | ~np.isnan(s.values)
    merged = {key(s.labels): Series(s.labels, s.values.copy()) for s in lhs.series}
    for s in rhs.series:
        values = np.where(lhs_present.get(signature(s.labels), none), np.nan, s.values)
        same = merged.get(key(s.labels))
        if same is not None:  # the same series at the steps the left side lacks it
            same.values = np.where(np.isnan(same.values), values, same.values)
        elif not np.isnan(values).all():
            merged[key(s.labels)] = Series(s.labels, values)
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
