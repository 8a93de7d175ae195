"""What Ray's per-node aggregator agent reports of itself, from its node's Prometheus text. Pure: no I/O.

The agent counts the events it received, published, filtered out, failed to publish and dropped from its full
buffer (``ray_aggregator_agent_*``, labels ``SessionName``, ``ip``, ``pid`` of the agent, ``event_type`` for drops).
Counters only grow within one agent process, so each sample is keyed by that process (``ip:pid``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import orjson
from prometheus_client.parser import text_string_to_metric_families

from raysight import wire
from raysight.errors import BadIngest
from raysight.tables import Table, columns

MAX_BODY = 1024 * 1024
PREFIX = "ray_aggregator_agent_"
SAMPLE_SUFFIX = {"counter": "_total", "gauge": ""}  # the kinds kept, and how a sample's name extends its family's


# What the aggregators reported, per agent process (``source``): a counter keeps the greatest value seen, a gauge the
# latest (``apply.record``); a sample is a row but for when it was kept
RAY_REPORTED = Table(
    "ray_reported",
    columns(
        session="VARCHAR",
        source="VARCHAR",
        metric="VARCHAR",
        event_type="VARCHAR",
        kind="VARCHAR",
        value="DOUBLE",
        updated_at="TIMESTAMPTZ",
    ),
    key=("session", "source", "metric", "event_type"),
)


@dataclass(frozen=True, slots=True)
class RaySample:
    session: str
    source: str  # the agent process, "ip:pid"
    metric: str  # the family's name: a counter's without "_total"
    event_type: str  # "" unless the series has one
    kind: str  # "counter" or "gauge"
    value: float


def parse_aggregator_metrics(text: str) -> list[RaySample]:
    """The aggregator's counters and gauges in ``text``; series that differ only in other labels are summed.

    Samples of other metrics, without a ``SessionName`` or with a non-finite value are left out; text that is not
    Prometheus exposition raises BadIngest (a ValueError).
    """
    summed: dict[tuple[str, str, str, str, str], float] = {}
    try:
        for family in text_string_to_metric_families(text):
            if not family.name.startswith(PREFIX) or family.type not in SAMPLE_SUFFIX:
                continue
            for sample in family.samples:
                labels = sample.labels
                session = labels.get("SessionName", "")
                own = sample.name == family.name + SAMPLE_SUFFIX[family.type]  # not a counter's "_created"
                if not (own and session and math.isfinite(sample.value)):
                    continue
                source = f"{labels.get('ip', '')}:{labels.get('pid', '')}"
                key = (session, source, family.name, labels.get("event_type", ""), family.type)
                summed[key] = summed.get(key, 0.0) + sample.value
    except ValueError as exc:
        raise BadIngest(f"not Prometheus text: {exc}") from None
    return [RaySample(*key, value) for key, value in summed.items()]


def parse(body: bytes) -> list[RaySample]:
    """The aggregators' samples of a ``{"text": …}`` body (``POST /ingest/agent/ray-metrics``, ``wire.RayMetrics``:
    JSON, a content type no web page may send unasked); BadIngest says what is wrong."""
    try:
        fields = orjson.loads(body)
    except orjson.JSONDecodeError:
        fields = None
    text = wire.shaped(fields, wire.RayMetrics)["text"] if isinstance(fields, dict) else None
    if not isinstance(text, str):
        raise BadIngest('the body must be a JSON object {"text": "<Prometheus text>"}')
    return parse_aggregator_metrics(text)
