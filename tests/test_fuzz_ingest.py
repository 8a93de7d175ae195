"""Generated bodies against the ingest routes: whatever arrives, the answer is never a 5xx, and afterwards a known
session still folds and queries answer as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from raysight.server.app import create_app
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


def posts(templates: list[dict[str, Any]], metric_lines: list[str]) -> st.SearchStrategy[tuple[str, bytes]]:
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
    page = st.lists(line | edited_line | st.sampled_from(SAMPLE_LINES), max_size=6).map("\n".join)
    target = st.fixed_dictionaries({"instance": st.text(max_size=12), "job": st.text(max_size=6)}) | json_values
    session_name = st.just("session_2026-11-24_10-00-00_000000_1") | st.text(max_size=12) | json_values
    scrapes = st.fixed_dictionaries(
        {
            "session": session_name,
            "scraped_ms": st.integers() | json_values,
            "target": target,
            "text": page | json_values,
        }
    )
    return st.one_of(
        st.tuples(st.just("/ingest/agent/metrics"), scrapes.map(_dumps) | anything),
        st.tuples(st.just("/ingest/ray-events?cluster=fuzz"), ray_events | anything),
        st.tuples(st.just("/ingest/agent/run-exit"), run_exits.map(_dumps) | anything),
        st.tuples(st.just("/ingest/agent/ray-metrics"), (metrics | json_values).map(_dumps) | anything),
    )


def test_no_generated_body_gets_a_5xx_and_the_store_lives_on(tmp_path: Path, ray_batches) -> None:
    templates = list({e["eventType"]: e for batch in ray_batches for e in batch}.values())
    metric_lines = (FIXTURES / "aggregator_metrics.txt").read_text().splitlines()
    with TestClient(create_app(tmp_path / "data", fold_linger_s=0.5)) as client:
        sent = 0

        async def post_all(batch: list[tuple[str, bytes]]) -> list[httpx.Response]:
            """On the app's own event loop through httpx's ASGI transport: a sixth of TestClient's cost a request."""
            transport = httpx.ASGITransport(app=client.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
                return [await http.post(path, content=body, headers=JSON) for path, body in batch]

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(st.lists(posts(templates, metric_lines), min_size=BODIES_PER_EXAMPLE, max_size=BODIES_PER_EXAMPLE))
        def no_5xx(batch: list[tuple[str, bytes]]) -> None:
            nonlocal sent
            for (path, body), answer in zip(batch, client.portal.call(post_all, batch)):
                assert answer.status_code < 500, (path, body[:300], answer.text)
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
