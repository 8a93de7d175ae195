"""A query evaluated: its syntax tree walked, each node handed to the module of its kind (selectors, functions,
aggregations, binary operators), every node's value taken from the query's :class:`Budget`. Literals, brackets and
unary minus are evaluated here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from raysight.errors import BadQuery
from raysight.promql import aggregate, binary, functions, selectors
from raysight.promql.budget import Budget
from raysight.promql.parse import parse
from raysight.promql.source import Source
from raysight.promql.values import Scalar, Series, String, Value, Vector, without_name
from raysight.settings import QueryLimits


def evaluate(
    query: str, source: Source, start_ms: int, end_ms: int, step_ms: int, budget: Budget | None = None
) -> Value:
    """``query`` at each step from ``start_ms`` to ``end_ms``, within ``budget`` (None: the default limits')."""
    steps = np.arange(start_ms, end_ms + 1, step_ms, dtype=np.int64)
    return Evaluator(source, steps, budget or Budget(QueryLimits())).eval(parse(query))


class Evaluator:
    """One query's evaluation: what it reads from, its steps and its budget."""

    def __init__(self, source: Source, steps: np.ndarray, budget: Budget) -> None:
        self.source, self.steps, self.budget = source, steps, budget

    def eval(self, node: Any) -> Value:
        """``node``'s value, its points (a step's of each series) taken from the budget; the nodes that make
        series from samples (selectors, range functions) see that there is room for them first."""
        self.budget.check()
        kind = type(node).__name__
        handler = _NODES.get(kind)
        if handler is None:
            raise BadQuery(f"{kind} is not supported")
        value = handler(self, node)
        if isinstance(value, Vector):
            self.budget.take(len(value.series) * len(self.steps))
        elif isinstance(value, Scalar):
            self.budget.take(len(self.steps))
        return value


def _number(ev: Evaluator, node: Any) -> Value:
    return Scalar(np.full(len(ev.steps), float(node.val)))


def _string(ev: Evaluator, node: Any) -> Value:
    return String(node.val)


def _paren(ev: Evaluator, node: Any) -> Value:
    return ev.eval(node.expr)


def _unary(ev: Evaluator, node: Any) -> Value:
    value = ev.eval(node.expr)
    if isinstance(value, Scalar):
        return Scalar(-value.values)
    if isinstance(value, Vector):
        return Vector([Series(without_name(s.labels), -s.values) for s in value.series])
    raise BadQuery("unary minus applies to a scalar or a vector")


# promql-parser's node kinds, by their class's name → their value
_NODES: dict[str, Callable[[Evaluator, Any], Value]] = {
    "NumberLiteral": _number,
    "StringLiteral": _string,
    "ParenExpr": _paren,
    "UnaryExpr": _unary,
    "VectorSelector": selectors.vector_selector,
    "MatrixSelector": selectors.matrix_selector,
    "Call": functions.call,
    "AggregateExpr": aggregate.aggregate,
    "BinaryExpr": binary.binary,
}
