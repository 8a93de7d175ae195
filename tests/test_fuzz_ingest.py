"""Generated bodies against the ingest routes: whatever arrives, the answer is never a 5xx, and afterwards a known
session still folds and queries answer as before. Beside Ray's events, run exits and scrapes: OTLP exports (protobuf
and JSON, attributes repeated, values nested, gzip of one member or two), node sightings and ray-state polls (rows
nested deep), and metrics lines of many labels."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import httpx
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue, KeyValueList
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from starlette.testclient import TestClient

from raysight.server.app import create_app
from raysight.settings import Settings
from tests.conftest import FIXTURES
from tests.ray_scenarios import JSON, wait_folded

BODIES_PER_EXAMPLE, EXAMPLES = 50, 205  # over 10,000 bodies

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
NASTY = [b"", b"[", b"[]", b"[[]]", b"[null]", b'["\\ud800"]', b'[{"eventId": "\\udfff"}]', b"\x00", b"[1e999]"]
NASTY += [b'{"text": "\\ud800"}', b"[" * 10_000, b'[{"sessionName": "' + b"x" * 5000 + b'"}]']
NASTY += [b"[18446744073709551615]", b'{"run_id": "r", "exit_code": 1, "ended_ns": 18446744073709551615}']


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*path, k))] or [path]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))] or [path]
    return [path]


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replace(value[path[0]], path[1:], new)
    return copy


def mutations(template: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``template`` with a few leaves replaced, in a session of its own (so that the known session stays clean)."""
    paths = [p for p in _leaves(template) if p[0] not in ("eventId", "sessionName")]
    changes = st.lists(st.tuples(st.sampled_from(paths), json_values), max_size=3)
    session = st.sampled_from(["fuzz-a", "fuzz-b"]) | st.text(max_size=8).map(lambda s: "fuzz-" + s)

    def apply(parts: tuple[list[tuple[tuple[Any, ...], Any]], str, str]) -> dict[str, Any]:
        edits, event_id, session_name = parts
        event = {**template, "eventId": "fz" + event_id, "sessionName": session_name}
        for path, new in edits:
            event = _replace(event, path, new)
        return event

    return st.tuples(changes, st.text(max_size=12), session).map(apply)


# Sample lines as Prometheus's text format allows and breaks them: labels, escapes, timestamps, odd values
SAMPLE_LINES = [
    'm{a="1",b="x\\"y"} 1.5',
    'm{a="1",a="2"} 1',
    "m 1 1795000000000",
    'm{le="+Inf"} +Inf',
    "m NaN",
    'm{a="1"} nope',
    "m{a=1} 2",
    "m{",
    "# TYPE m counter",
    "# HELP m it \\n says",
]


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()  # big integers, NaN and Infinity included, as orjson would not write them


SESSION = "session_2026-11-24_10-00-00_000000_1"
PROTOBUF = {"Content-Type": "application/x-protobuf"}


def _nested(depth: int, leaf: AnyValue) -> AnyValue:
    for _ in range(depth):
        leaf = AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="k", value=leaf)]))
    return leaf


any_values = st.one_of(
    st.text(max_size=8).map(lambda t: AnyValue(string_value=t)),
    st.integers(-(2**63), 2**63 - 1).map(lambda i: AnyValue(int_value=i)),
    st.binary(max_size=8).map(lambda b: AnyValue(bytes_value=b)),
    st.tuples(st.integers(0, 25), st.just(AnyValue(bool_value=True))).map(lambda t: _nested(*t)),  # (upb: 100 levels)
)
# the same key many times (the last wins), or a few of their own
otlp_attributes = st.one_of(
    st.lists(st.builds(KeyValue, key=st.text(max_size=6), value=any_values), max_size=4),
    st.tuples(st.integers(0, 3000), any_values).map(lambda t: [KeyValue(key="same", value=t[1])] * t[0]),
)
ids = st.binary(min_size=0, max_size=17) | st.sampled_from([b"\x01" * 16, b"\x02" * 8])
otlp_spans = st.builds(
    Span,
    trace_id=ids,
    span_id=ids,
    parent_span_id=ids,
    name=st.text(max_size=10),
    start_time_unix_nano=st.integers(0, 2**64 - 1),
    end_time_unix_nano=st.integers(0, 2**64 - 1),
    attributes=otlp_attributes,
)
otlp_records = st.builds(
    LogRecord,
    time_unix_nano=st.integers(0, 2**64 - 1),
    severity_number=st.integers(0, 24),
    body=any_values,
    trace_id=ids,
    span_id=ids,
    attributes=otlp_attributes,
)
otlp_resources = st.builds(
    Resource,
    attributes=otlp_attributes
    | st.sampled_from([SESSION, "x' OR 1=1 --", ""]).map(
        lambda s: [KeyValue(key="ray.session_name", value=AnyValue(string_value=s))]
    ),
)


def exports(signal: str, request: type, resource: type, scope: type, items: str, item: Any) -> st.SearchStrategy[bytes]:
    """OTLP exports of ``signal`` (spans, logs), serialized: up to two resources of two scopes of three items."""
    scopes = st.lists(st.builds(scope, **{items: st.lists(item, max_size=3)}), max_size=2)
    resources = st.builds(resource, resource=otlp_resources, **{f"scope_{signal}": scopes})
    return st.lists(resources, max_size=2).map(
        lambda groups: request(**{f"resource_{signal}": groups}).SerializeToString()
    )


trace_exports = exports("spans", ExportTraceServiceRequest, ResourceSpans, ScopeSpans, "spans", otlp_spans)
log_exports = exports("logs", ExportLogsServiceRequest, ResourceLogs, ScopeLogs, "log_records", otlp_records)


def _gzipped(parts: list[bytes]) -> bytes:
    """Each part a gzip member of its own (readers join them: protobuf merges the messages that follow)."""
    return b"".join(gzip.compress(part, compresslevel=1) for part in parts)


def otlp_posts(path: str, exports: st.SearchStrategy[bytes]) -> st.SearchStrategy[tuple[str, bytes, dict[str, str]]]:
    """Exports as sent: protobuf, gzip of one member or two (or cut short), or JSON; any bytes too."""
    protobuf = exports.map(lambda body: (body, PROTOBUF))
    zipped = st.lists(exports, min_size=1, max_size=2).map(_gzipped) | exports.map(lambda b: gzip.compress(b)[:-4])
    json_bodies = json_values.map(lambda v: {"resourceSpans": [{"scopeSpans": [{"spans": [v]}]}], "resourceLogs": v})
    return st.one_of(
        protobuf,
        zipped.map(lambda body: (body, {**PROTOBUF, "Content-Encoding": "gzip"})),
        json_bodies.map(lambda v: (_dumps(v), JSON)),
        st.binary(max_size=60).map(lambda body: (body, PROTOBUF)),
    ).map(lambda sent: (path, *sent))


def deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def posts(
    templates: list[dict[str, Any]], metric_lines: list[str]
) -> st.SearchStrategy[tuple[str, bytes, dict[str, str]]]:
    events = st.one_of(*(mutations(t) for t in templates))
    ray_events = st.lists(events | json_values, max_size=4).map(_dumps) | json_values.map(_dumps)
    exit_fields = {name: st.integers() | json_values for name in ("driver_pid", "exit_code", "ended_ns")}
    run_exits = st.fixed_dictionaries({}, optional={"run_id": st.text(max_size=20) | json_values, **exit_fields})
    line = st.sampled_from(metric_lines) | st.text(max_size=40)
    edited_line = st.tuples(st.sampled_from(metric_lines), st.integers(0, 200), st.text(max_size=6)).map(
        lambda t: t[0][: t[1]] + t[2] + t[0][t[1] + len(t[2]) :]
    )
    metrics = st.lists(line | edited_line, max_size=5).map(lambda lines: {"text": "\n".join(lines)})
    anything = st.binary(max_size=40) | st.sampled_from(NASTY)
    many_labels = st.integers(0, 2000).map(lambda n: "m{" + ",".join(f'l{i}="v"' for i in range(n)) + "} 1")
    page = st.lists(line | edited_line | st.sampled_from(SAMPLE_LINES) | many_labels, max_size=6).map("\n".join)
    target = st.fixed_dictionaries({"instance": st.text(max_size=12), "job": st.text(max_size=6)}) | json_values
    session_name = st.just(SESSION) | st.text(max_size=12) | json_values
    scrapes = st.fixed_dictionaries(
        {
            "session": session_name,
            "scraped_ms": st.integers() | json_values,
            "target": target,
            "text": page | json_values,
        }
    )
    row = json_values | st.integers(0, 1100).map(lambda n: {"placement_group_id": "p", "x": deep(n)})
    resources = st.dictionaries(st.sampled_from(["placement_groups", "objects", "jobs", "drivers", "secrets"]),
                                st.lists(row, max_size=3) | json_values, max_size=3)  # fmt: skip
    polls = st.fixed_dictionaries(
        {"session": session_name, "polled_ns": st.integers() | json_values, "resources": resources},
        optional={"errors": json_values, "cluster_status": json_values | st.integers(0, 300).map(deep)},
    )
    sighting = st.fixed_dictionaries(
        {"session": session_name, "process": st.sampled_from(["raylet", "gcs_server"]) | json_values},
        optional={name: json_values | st.integers() for name in ("node_id", "pid", "alive", "ns", "last_alive_ns")},
    )
    sightings = st.fixed_dictionaries(
        {"host": st.text(max_size=8) | json_values, "sightings": st.lists(sighting, max_size=3)}
    )
    json_posts = st.one_of(
        st.tuples(st.just("/ingest/agent/metrics"), scrapes.map(_dumps) | anything),
        st.tuples(st.just("/ingest/ray-events?cluster=fuzz"), ray_events | anything),
        st.tuples(st.just("/ingest/agent/run-exit"), run_exits.map(_dumps) | anything),
        st.tuples(st.just("/ingest/agent/ray-metrics"), (metrics | json_values).map(_dumps) | anything),
        st.tuples(st.just("/ingest/agent/ray-state"), polls.map(_dumps) | anything),
        st.tuples(st.just("/ingest/agent/node-life"), sightings.map(_dumps) | anything),
    ).map(lambda sent: (*sent, JSON))
    return json_posts | otlp_posts("/v1/traces", trace_exports) | otlp_posts("/v1/logs", log_exports)


def test_no_generated_body_gets_a_5xx_and_the_store_lives_on(tmp_path: Path, ray_batches) -> None:
    templates = list({e["eventType"]: e for batch in ray_batches for e in batch}.values())
    metric_lines = (FIXTURES / "aggregator_metrics.txt").read_text().splitlines()
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0.5))) as client:
        sent = 0

        async def post_all(batch: list[tuple[str, bytes, dict[str, str]]]) -> list[httpx.Response]:
            """On the app's own event loop through httpx's ASGI transport: a sixth of TestClient's cost a request."""
            transport = httpx.ASGITransport(app=client.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
                return [await http.post(path, content=body, headers=headers) for path, body, headers in batch]

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(st.lists(posts(templates, metric_lines), min_size=BODIES_PER_EXAMPLE, max_size=BODIES_PER_EXAMPLE))
        def no_5xx(batch: list[tuple[str, bytes, dict[str, str]]]) -> None:
            nonlocal sent
            for (path, body, _), answer in zip(batch, client.portal.call(post_all, batch)):
                if answer.status_code == 503:  # folding behind the bursts (a loaded machine): the sender retries
                    assert answer.headers["retry-after"] == "1" and "busy" in answer.json()["error"], answer.text
                else:
                    assert answer.status_code < 500, (path, body[:300], answer.text)
                if not (path.startswith("/v1/") and answer.status_code == 200):  # (OTLP's own answer)
                    assert answer.json()["ok"] is (answer.status_code == 200)
            sent += len(batch)

        no_5xx()
        assert sent >= 10_000
        wait_folded(client, timeout_s=120)
        session = ray_batches[0][0]["sessionName"]
        for batch in ray_batches:
            answer = client.post("/ingest/ray-events?cluster=known", content=orjson.dumps(batch), headers=JSON)
            assert answer.json()["ok"]
        wait_folded(client, timeout_s=120)
        failed = client.get("/api/raysight/tasks", params={"filter": "state=failed", "session": session}).json()
        assert {r["name"] for r in failed["rows"]} == {"fails", "crash_once", "Fragile.die"}
        actors = client.get("/api/raysight/actors", params={"session": session, "filter": "class_name=Counter"})
        assert actors.json()["total"] == 1
        assert client.get("/api/raysight/sessions").status_code == 200
        assert client.get("/api/raysight/doctor").json()["counters"]["stored"] >= sum(map(len, ray_batches))
