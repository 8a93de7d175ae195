"""A scrape of one Prometheus target, as an agent sends it (``POST /ingest/agent/metrics``): checked here, its text
split into sample lines by :func:`lines`, and the labels of the series new to the store parsed in DuckDB by
:data:`SERIES` (vectorised). Pure.

The body is JSON (``wire.MetricsScrape``)::

    {"session": "session_…", "scraped_ms": 1795288476000,
     "target": {"instance": "10.0.0.5:44217", "job": "ray", "labels": {"NodeId": "…"}},
     "text": "<the page, Prometheus text format 0.0.4>"}

The text is lines of ``name{label="value",…} value [timestamp_ms]`` and ``# HELP`` / ``# TYPE`` comments. As
Prometheus does: a sample takes the scrape's time unless it carries its own; a label with an empty value is no label;
the target's ``instance`` and ``job`` are added, a scraped label of the same name kept as ``exported_<name>``; a
line that is not a sample is skipped. The target's other ``labels`` (optional: what the agent knows of it, such as the
node it is) label the series that lack them.

Bounds, as Prometheus's scrape config sets them (``sample_limit``, ``label_limit``, ``label_name_length_limit``,
``label_value_length_limit``), so that no page costs the store more than its lines are worth: a page of more than
:data:`MAX_LINES` lines is refused (TooMany: 413), counted on the wire before the body is decoded; a sample line of
more than :data:`MAX_LABELS` labels, a name longer than :data:`MAX_NAME_LENGTH` or a label value longer than
:data:`MAX_VALUE_LENGTH` characters (as written), a time the store cannot keep (past int64), or a NUL or ``\x01``
anywhere (the store's separators between a series' labels) is refused (BadIngest: 400, naming the line). Ray's own
lines name at most a dozen labels (11 in its aggregator's page); a head node's page with Serve running is about 2,000
lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from raysight import wire
from raysight.errors import BadIngest, TooMany
from raysight.ingest.fields import int_field, json_object, session_field, text_field
from raysight.ingest.otlp import INT64_MAX
from raysight.tables import Column, Table, columns

MAX_BODY = 64 << 20  # bytes of one scrape's JSON (a node's page is ~250 KB; Serve's with many deployments, more)
# Lines of one page: 25 times the ~2,000 of a Ray head's with Serve running; a first scrape of 50,000 new series
# folds in ~1.4 s on two shared cores, within the ingest deadline (and a scrape of series known in 0.1 s)
MAX_LINES = 50_000
MAX_LABELS = 64  # labels one sample line names (Ray's name at most a dozen)
MAX_NAME_LENGTH = 1024  # characters of a metric's or a label's name (as of a target's instance and job)
MAX_VALUE_LENGTH = 4096  # characters of a label's value, as written
TARGET_LABELS = ("instance", "job")
MAX_TARGET_LABELS = 16
SEPARATORS = ("\x00", "\x01")  # what :data:`SERIES` puts between a series' labels (and its unescaping uses)
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


# The scrapes kept (raw input). Each series once: a small number (``series_no``, what a sample carries: 4 bytes that
# compress), its canonical ID (a digest of session, name and labels: :data:`SERIES`), name and labels. Each scrape of
# a target is kept (a series it no longer exposes is stale from then on, as Prometheus's staleness marker says).
METRIC_SERIES = Table(
    "metric_series",
    columns(series_no="INTEGER")
    + [Column("series_id", "UBIGINT", unique=True)]
    + columns(session="VARCHAR", name="VARCHAR", labels="MAP(VARCHAR, VARCHAR)", instance="VARCHAR", job="VARCHAR"),
    key=("series_no",),
    sequences=("metric_series_no",),
)
METRIC_SAMPLES = Table("metric_samples", columns(series_no="INTEGER", ts_ms="BIGINT", value="DOUBLE"))
METRIC_SCRAPES = Table(
    "metric_scrapes", columns(session="VARCHAR", instance="VARCHAR", job="VARCHAR", ts_ms="BIGINT", samples="INTEGER")
)
METRIC_METADATA = Table(
    "metric_metadata",
    columns(session="VARCHAR", name="VARCHAR", type="VARCHAR", help="VARCHAR"),
    key=("session", "name"),
)
# What the bounds on metrics cost each session (``metric_retention.py``): the series refused past the limit and their
# samples dropped since; the samples the retention dropped, through when, and why.
METRIC_REFUSED = Table(
    "metric_refused", columns(session="VARCHAR", series="BIGINT", samples="BIGINT", last_ms="BIGINT"), key=("session",)
)
METRIC_DROPPED = Table(
    "metric_dropped",
    columns(session="VARCHAR", samples="BIGINT", through_ms="BIGINT", why="VARCHAR", dropped_at="TIMESTAMPTZ"),
    key=("session",),
)
METRIC_TABLES = [METRIC_SERIES, METRIC_SAMPLES, METRIC_SCRAPES, METRIC_METADATA, METRIC_REFUSED, METRIC_DROPPED]


@dataclass(frozen=True)
class Scrape:
    session: str
    scraped_ms: int
    instance: str
    job: str
    text: str
    labels: dict[str, str] = field(default_factory=dict)

    @cached_property
    def page(self) -> Lines:
        """The page's sample lines (:func:`lines`), split once: by :func:`parse`, off the store's thread."""
        return lines(self.text, self.scraped_ms)

    @property
    def target(self) -> dict[str, object]:
        """The parameters that name the target in :data:`SERIES`."""
        return {
            "session": self.session,
            "instance": self.instance,
            "job": self.job,
            "label_names": list(self.labels),
            "label_values": list(self.labels.values()),
        }


def parse(body: bytes) -> Scrape:
    """The scrape a body carries, its lines split and checked against the bounds; BadIngest says what is wrong with
    one that is not well formed, TooMany that its page is over :data:`MAX_LINES` lines (on the wire: the text's
    newlines, JSON's ``\\n``, less the escaped backslashes that might end in ``n``)."""
    _at_most_max_lines(body.count(b"\\n") - body.count(b"\\\\"))
    sent = json_object(body, "target", dict, '{"session", "scraped_ms", "target": {"instance", "job"}, "text"}')
    scrape = wire.shaped(sent, wire.MetricsScrape)
    target = wire.shaped(scrape["target"], wire.ScrapeTarget)
    session = session_field(scrape["session"], "session")
    scraped_ms = int_field(scrape["scraped_ms"], "scraped_ms")
    instance = text_field(target["instance"], "target.instance")
    job = text_field(target["job"], "target.job")
    text: Any = scrape["text"]
    if not isinstance(text, str):
        raise BadIngest("text must be the target's page, a string")
    assert scraped_ms is not None and instance is not None and job is not None
    _at_most_max_lines(text.count("\n"))
    for what, value in (("target.instance", instance), ("target.job", job)):
        _without_separators(value, what)
    for separator in SEPARATORS:
        if (at := text.find(separator)) != -1:
            line = text.count("\n", 0, at) + 1
            raise BadIngest(f"line {line}: a character the store cannot keep ({separator!r})")
    parsed = Scrape(session, scraped_ms, instance, job, text, target_labels(target["labels"]))
    parsed.page  # noqa: B018 (split and checked here, on the caller's thread)
    return parsed


def _at_most_max_lines(lines: int) -> None:
    if lines > MAX_LINES:
        raise TooMany(f"{lines:,} lines in one page, over {MAX_LINES:,} (Prometheus's sample_limit): scrape less")


def _without_separators(value: str, what: str) -> None:
    if any(separator in value for separator in SEPARATORS):
        raise BadIngest(f"{what} holds a character the store cannot keep (\\x00 or \\x01)")


def target_labels(labels: Any) -> dict[str, str]:
    """The target's own labels, checked: names as Prometheus has them (not ``__…``, nor instance and job), string
    values; an empty value is no label."""
    if labels is None:
        return {}
    if not isinstance(labels, dict) or len(labels) > MAX_TARGET_LABELS:
        raise BadIngest(f"target.labels must be an object of at most {MAX_TARGET_LABELS} labels")
    for name, value in labels.items():
        if len(name) > MAX_NAME_LENGTH:
            raise BadIngest(f"target.labels: a name is over {MAX_NAME_LENGTH} characters")
        if not _LABEL_NAME.fullmatch(name) or name.startswith("__") or name in TARGET_LABELS:
            raise BadIngest(f"target.labels: {name!r} is not a label a target may add")
        if not isinstance(value, str) or len(value) > MAX_VALUE_LENGTH:
            raise BadIngest(f"target.labels: the value of {name} must be a string of at most {MAX_VALUE_LENGTH}")
        _without_separators(value, f"target.labels: the value of {name}")
    return {name: value for name, value in sorted(labels.items()) if value}


_NAME = "[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"'
# The labels :data:`SERIES` finds (RE2's matches of _LABEL), found by Python's engine in time linear in the line: a
# match is tried only where a run of name characters begins (its leading digits skipped, as RE2's leftmost match
# would skip them), and a value is taken a run of plain characters at a time
_LABELS = re.compile(r'(?<![a-zA-Z0-9_])[0-9]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"([^"\\]*(?:\\.[^"\\]*)*)"')
_SHORT = min(MAX_NAME_LENGTH, MAX_VALUE_LENGTH)  # labels written in fewer characters hold no name or value too long
_LONGEST = MAX_NAME_LENGTH + MAX_LABELS * (MAX_NAME_LENGTH + MAX_VALUE_LENGTH + 6)  # a line within the bounds, at most
_META_LINE = rf"^#[ \t]+(HELP|TYPE)[ \t]+({_NAME})[ \t]*(.*)$"


def _unescaped(value: str) -> str:
    r"""SQL: a label value or help text with Prometheus's escapes (\\, \", \n) undone."""
    return f"replace(replace(replace(replace({value}, '\\\\', chr(1)), '\\n', chr(10)), '\\\"', '\"'), chr(1), '\\')"


@dataclass
class Lines:
    """A page's samples, in order: each line as the target exposes its series (``heads``: the text up to the value,
    ``name{labels}``, what a target's series is found by without parsing its labels again), ``values`` and times
    (``ts_ms``)."""

    heads: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    ts_ms: list[int] = field(default_factory=list)


def lines(text: str, scraped_ms: int) -> Lines:
    """The sample lines of a page, split as Ray's exporters write them (tokens apart by spaces; a sample without a
    time of its own takes the scrape's); comments, blank lines and lines that are not samples skipped; BadIngest for
    a sample past the bounds (its labels are read only where their length or their ``=`` signs say they might be).
    Plain string operations: a Ray node's page of ~1,000 lines in about half a millisecond."""
    out = Lines()
    heads, values, times = out.heads.append, out.values.append, out.ts_ms.append
    for number, line in enumerate(text.split("\n"), 1):
        if not line or line[0] == "#":
            continue
        if line[0] in " \t" or line[-1] in " \t\r":
            line = line.strip()
            if not line or line[0] == "#":
                continue
        close = line.rfind("}")
        if close != -1:  # name{labels} value [time]
            brace = line.find("{")
            if not 0 < brace < close or line.find(" ", 0, brace) != -1:
                continue
            head, tokens = line[: close + 1], line[close + 1 :].split()
        else:  # name value [time]
            brace = line.find(" ")  # (where the name ends)
            if brace < 1:
                continue
            head, tokens = line[:brace], line[brace + 1 :].split()
        if len(tokens) == 1:
            ts = scraped_ms
        elif len(tokens) == 2:
            try:
                ts = int(tokens[1])
            except ValueError:
                ts = scraped_ms
        else:
            continue
        try:
            value = float(tokens[0])
        except ValueError:
            continue
        if not -INT64_MAX - 1 <= ts <= INT64_MAX:
            raise BadIngest(f"line {number} ({line[:60]!r}): a time past what the store keeps (int64 ms)")
        if brace > MAX_NAME_LENGTH or len(head) - brace > _SHORT or head.count("=", brace) > MAX_LABELS:
            _within_bounds(head, brace, f"line {number} ({line[:60]!r})")
        heads(head)
        values(value)
        times(ts)
    return out


def _within_bounds(head: str, brace: int, line: str) -> None:
    """BadIngest, naming the ``line``, unless the name (``head`` up to ``brace``) and labels of a sample are within
    the bounds. The labels are read up to the length of the longest line within them, so that no one line holds the
    regular expression (and the GIL) for long."""
    if brace > MAX_NAME_LENGTH:
        raise BadIngest(f"{line}: a name over {MAX_NAME_LENGTH} characters")
    for count, label in enumerate(_LABELS.finditer(head, brace + 1, min(len(head) - 1, _LONGEST)), 1):
        if count > MAX_LABELS:
            raise BadIngest(f"{line}: over {MAX_LABELS} labels (Prometheus's label_limit)")
        if label.end(1) - label.start(1) > MAX_NAME_LENGTH:
            raise BadIngest(f"{line}: a label's name over {MAX_NAME_LENGTH} characters")
        if label.end(2) - label.start(2) > MAX_VALUE_LENGTH:
            raise BadIngest(f"{line}: the value of {label[1]} over {MAX_VALUE_LENGTH} characters")
    if len(head) > _LONGEST:
        raise BadIngest(f"{line}: over {_LONGEST:,} characters, more than any line within the bounds")


def name_and_labels(head: str) -> tuple[str, str]:
    """A line's metric name, and the text between its braces."""
    brace = head.find("{")
    return (head, "") if brace == -1 else (head[:brace], head[brace + 1 : -1])


# The series of new lines (``new_lines``: line, name, labels_text; parameters: :attr:`Scrape.target`), their
# labels parsed (the target's added, where the line lacks them; not by map_concat, whose time grows with the square of
# a map's labels) and their canonical ID: a digest of session, name and labels sorted, whatever their order on the
# page. A line that names a label twice is no sample (Prometheus refuses it too).
SERIES = f"""
WITH pairs AS (
    SELECT line, name, list_transform(
               list_filter(list_zip(regexp_extract_all(labels_text, '{_LABEL}', 1),
                                    regexp_extract_all(labels_text, '{_LABEL}', 2)), lambda p: p[2] <> ''),
               lambda p: {{'key': CASE WHEN list_contains({list(TARGET_LABELS)}, p[1]) THEN 'exported_' || p[1]
                                       ELSE p[1] END,
                           'value': {_unescaped("p[2]")}}}) AS scraped
    FROM new_lines
),
keyed AS (
    SELECT line, name, scraped, list_transform(scraped, lambda p: p.key) AS keys
    FROM pairs
),
parsed AS (
    SELECT line, name, map_from_entries(list_concat(
               list_filter(list_transform(list_zip($label_names::VARCHAR[], $label_values::VARCHAR[]),
                                          lambda p: {{'key': p[1], 'value': p[2]}}),
                           lambda e: NOT list_contains(keys, e.key)),
               scraped,
               [{{'key': 'instance', 'value': $instance}}, {{'key': 'job', 'value': $job}}])) AS labels
    FROM keyed
    WHERE len(list_distinct(keys)) = len(keys)
)
SELECT line, name, labels,
       md5_number_lower($session || chr(0) || name || chr(0) || array_to_string(
           list_transform(list_sort(map_entries(labels)), lambda e: e.key || chr(1) || e.value), chr(0))) AS series_id
FROM parsed
"""

# Each metric's type and help (parameters: $text), as its comments say.
METADATA = f"""
SELECT m.name, max(m.rest) FILTER (m.kind = 'TYPE') AS type,
       max({_unescaped("m.rest")}) FILTER (m.kind = 'HELP') AS help
FROM (SELECT regexp_extract(line, '{_META_LINE}', ['kind', 'name', 'rest']) AS m
      FROM (SELECT unnest(string_split($text, chr(10))) AS line) WHERE starts_with(line, '#'))
WHERE m.name <> ''
GROUP BY m.name
"""
