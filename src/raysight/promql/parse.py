"""The parse front: a query's text bounded (its length, how deep it nests) before `promql-parser` reads it, the
fields of its syntax tree read back where they may be out of Python's range, and text cut for error messages."""

from __future__ import annotations

from typing import Any

import promql_parser as pp

from raysight.errors import BadQuery

MAX_QUERY_CHARS = 256 * 1024  # (a regex of some thousands of alternatives, as a dashboard's variable makes, fits)
# How deep an expression may nest: promql-parser takes memory quadratic in an expression's depth (1,000 `(`: 80 MB;
# 5,000: 1.7 GB; 5,000 chained `+` crash it), and the evaluator recurses into it (two or three frames a level)
MAX_NESTING = 200


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


def duration_s(text: str) -> float:
    """A duration written as PromQL writes one (``5m``, ``1h30m``), in seconds (ValueError or RuntimeError where
    it is none, OverflowError past Python's)."""
    return float(pp.parse_duration(text).total_seconds())


def shortened(text: str, most: int = 200) -> str:
    """``text`` for an error message, cut to ``most`` characters."""
    return text if len(text) <= most else f"{text[:most]}… ({len(text):,} characters)"


def field(node: Any, name: str) -> Any:
    """``node.name``: a duration or time promql-parser cannot hand over (past Python's) refused."""
    try:
        return getattr(node, name)
    except (ValueError, OverflowError):
        raise BadQuery(f"the query's {'@ time' if name == 'at' else name} is out of range") from None


def ms(delta: Any) -> int:
    """A duration of the syntax tree (None: none) in milliseconds."""
    return int(delta.total_seconds() * 1000) if delta is not None else 0
