"""Label matchers (``=``, ``!=``, ``=~``, ``!~``), their regexes run in RE2, and those of a selector read from its
syntax tree."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import promql_parser as pp
import re2

from raysight.errors import BadQuery
from raysight.promql.parse import shortened
from raysight.promql.values import NAME


@dataclass(frozen=True)
class Matcher:
    name: str
    op: str  # = != =~ !~
    value: str

    def matches(self, labels: dict[str, str]) -> bool:
        value = labels.get(self.name, "")
        if self.op in ("=", "!="):
            return (value == self.value) == (self.op == "=")
        return (regex(self.value).search(value) is not None) == (self.op == "=~")


# Regexes run in RE2, in time linear in the text (Python's `re` backtracks: `.{12}(?:[\w-]+)+X` against a Ray
# session name took hours, holding the GIL), anchored as Prometheus 2.42 anchors them (`^(?:…)$`, where `.` matches
# no newline). Each compiled one holds at most 1 MiB (a larger one, such as 1,000 alternatives of 56-character IDs,
# is refused), and the cache keeps the last 256 (re2 its own 128): ~220 MB at most, 500 such patterns measured.
_RE2 = re2.Options()
_RE2.max_mem = 1 << 20
_RE2.log_errors = False  # (said in the answer instead)


def regex(pattern: str) -> Any:
    """``pattern`` compiled, anchored, in RE2 (cached); refused as a bad query where RE2 cannot hold it."""
    try:
        return _compiled(pattern)
    except re2.error as exc:
        (why,) = exc.args
        why = why.decode(errors="replace") if isinstance(why, bytes) else str(why)
        raise BadQuery(f"invalid regular expression {shortened(pattern)!r}: {why}") from None


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    return re2.compile(f"^(?:{pattern})$", _RE2)


def selector_matchers(vs: Any) -> list[Matcher]:
    """The matchers of the vector selector ``vs`` (its metric name's too); refused where they would match every
    series."""
    ops = [(pp.MatchOp.Equal, "="), (pp.MatchOp.NotEqual, "!="), (pp.MatchOp.Re, "=~"), (pp.MatchOp.NotRe, "!~")]
    found = [Matcher(m.name, next(o for k, o in ops if m.op == k), m.value) for m in vs.matchers.matchers]
    if vs.matchers.or_matchers:
        raise BadQuery("the `or` of label matchers is not supported")
    if vs.name:
        found.append(Matcher(NAME, "=", vs.name))
    if all(m.matches({}) for m in found):  # (each would match a series without that label: everything)
        raise BadQuery("vector selector must contain at least one non-empty matcher")
    return found
