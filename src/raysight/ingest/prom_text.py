"""A scrape of one Prometheus target, as an agent sends it (``POST /ingest/agent/metrics``): checked here, its text
parsed in DuckDB by the SQL below (vectorised: a Ray node's page of ~2,000 lines in a few milliseconds). Pure.

The body is JSON::

    {"session": "session_…", "scraped_ms": 1795288476000,
     "target": {"instance": "10.0.0.5:44217", "job": "ray", "labels": {"NodeId": "…"}},
     "text": "<the page, Prometheus text format 0.0.4>"}

The text is lines of ``name{label="value",…} value [timestamp_ms]`` and ``# HELP`` / ``# TYPE`` comments. As
Prometheus does: a sample takes the scrape's time unless it carries its own; a label with an empty value is no label;
the target's ``instance`` and ``job`` are added, a scraped label of the same name kept as ``exported_<name>``; a
line that is not a sample is skipped. The target's other ``labels`` (optional: what the agent knows of it, such as the
node it is) label the series that lack them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from raysight.ingest.agent_logs import BadBatch, int_field, json_object, text_field
from raysight.ingest.ids import SESSION_NAME

MAX_BODY = 64 << 20  # bytes of one scrape's JSON (a node's page is ~250 KB; Serve's with many deployments, more)
TARGET_LABELS = ("instance", "job")
MAX_TARGET_LABELS = 16
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass(frozen=True)
class Scrape:
    session: str
    scraped_ms: int
    instance: str
    job: str
    text: str
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def target(self) -> dict[str, object]:
        """The parameters that name the target in :data:`LINES` and :data:`SERIES`."""
        return {
            "session": self.session,
            "instance": self.instance,
            "job": self.job,
            "label_names": list(self.labels),
            "label_values": list(self.labels.values()),
        }


def parse(body: bytes) -> Scrape:
    """The scrape a body carries; BadBatch says what is wrong with one that is not well formed."""
    scrape = json_object(body, "target", dict, '{"session", "scraped_ms", "target": {"instance", "job"}, "text"}')
    session = text_field(scrape.get("session"), "session")
    if session is None or not SESSION_NAME.fullmatch(session):
        raise BadBatch("session must name a Ray session (session_…)")
    scraped_ms = int_field(scrape.get("scraped_ms"), "scraped_ms")
    instance = text_field(scrape["target"].get("instance"), "target.instance")
    job = text_field(scrape["target"].get("job"), "target.job")
    text: Any = scrape.get("text")
    if not isinstance(text, str):
        raise BadBatch("text must be the target's page, a string")
    assert scraped_ms is not None and instance is not None and job is not None
    return Scrape(session, scraped_ms, instance, job, text, target_labels(scrape["target"].get("labels")))


def target_labels(labels: Any) -> dict[str, str]:
    """The target's own labels, checked: names as Prometheus has them (not ``__…``, nor instance and job), string
    values; an empty value is no label."""
    if labels is None:
        return {}
    if not isinstance(labels, dict) or len(labels) > MAX_TARGET_LABELS:
        raise BadBatch(f"target.labels must be an object of at most {MAX_TARGET_LABELS} labels")
    for name, value in labels.items():
        if not _LABEL_NAME.fullmatch(name) or name.startswith("__") or name in TARGET_LABELS:
            raise BadBatch(f"target.labels: {name!r} is not a label a target may add")
        if not isinstance(value, str):
            raise BadBatch(f"target.labels: the value of {name} must be a string")
    return {name: value for name, value in sorted(labels.items()) if value}


_NAME = "[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"'
_META_LINE = rf"^#[ \t]+(HELP|TYPE)[ \t]+({_NAME})[ \t]*(.*)$"


def _unescaped(value: str) -> str:
    r"""SQL: a label value or help text with Prometheus's escapes (\\, \", \n) undone."""
    return f"replace(replace(replace(replace({value}, '\\\\', chr(1)), '\\n', chr(10)), '\\\"', '\"'), chr(1), '\\')"


# Each sample line of ``$text`` (parameters: $text, $scraped_ms and :attr:`Scrape.target`), split with string
# functions, not a regular expression (5x faster; tokens separated by spaces, as Ray's exporters write them):
# ``raw_key`` names its series as exposed (a hash of the target and
# the line up to its value), the key under which a series already seen is found without parsing its labels again.
LINES = """
WITH lines AS MATERIALIZED (SELECT rtrim(unnest(string_split($text, chr(10)))) AS t),
split AS (
    SELECT t, strpos(t, '{') AS brace, strpos(t, ' ') AS space FROM lines
    WHERE t <> '' AND NOT starts_with(ltrim(t), '#')
),
cut AS (
    SELECT t, brace > 0 AND (space = 0 OR brace < space) AS labelled, brace, space,
           length(t) - strpos(reverse(t), '}') + 1 AS close
    FROM split
),
parts AS (
    SELECT CASE WHEN labelled THEN left(t, brace - 1) ELSE left(t, space - 1) END AS name,
           CASE WHEN labelled THEN left(t, close) ELSE left(t, space - 1) END AS head,
           CASE WHEN labelled THEN substr(t, brace + 1, close - brace - 1) ELSE '' END AS labels_text,
           list_filter(string_split(CASE WHEN labelled THEN substr(t, close + 1) ELSE substr(t, space + 1) END, ' '),
                       lambda x: x <> '') AS rest
    FROM cut WHERE labelled OR space > 0
)
SELECT hash($session, $instance, $job, $label_names::VARCHAR[], $label_values::VARCHAR[], head) AS raw_key,
       name, labels_text,
       TRY_CAST(rest[1] AS DOUBLE) AS value, coalesce(TRY_CAST(rest[2] AS BIGINT), $scraped_ms) AS ts_ms
FROM parts WHERE len(rest) BETWEEN 1 AND 2 AND name <> '' AND TRY_CAST(rest[1] AS DOUBLE) IS NOT NULL
"""

# The series of new lines (``new_lines``: raw_key, name, labels_text; parameters: :attr:`Scrape.target`), their
# labels parsed (the target's added) and their canonical ID: a digest of session, name and labels sorted, whatever
# their order on the page. A line that names a label twice is no sample (Prometheus refuses it too).
SERIES = f"""
WITH pairs AS (
    SELECT raw_key, name, list_transform(
               list_filter(list_zip(regexp_extract_all(labels_text, '{_LABEL}', 1),
                                    regexp_extract_all(labels_text, '{_LABEL}', 2)), lambda p: p[2] <> ''),
               lambda p: {{'key': CASE WHEN list_contains({list(TARGET_LABELS)}, p[1]) THEN 'exported_' || p[1]
                                       ELSE p[1] END,
                           'value': {_unescaped("p[2]")}}}) AS scraped
    FROM new_lines
),
parsed AS (
    SELECT raw_key, name, map_concat(MAP($label_names::VARCHAR[], $label_values::VARCHAR[]), map_from_entries(scraped),
                                     MAP {{'instance': $instance, 'job': $job}}) AS labels
    FROM pairs
    WHERE len(list_distinct(list_transform(scraped, lambda p: p.key))) = len(scraped)
)
SELECT raw_key, name, labels,
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
