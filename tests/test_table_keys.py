"""Every key a parser or a fold writes is a column of its table (``tables.py``), every field of a struct a field of
its column: pyarrow leaves out without a word what a schema does not name, so a misspelt key would be lost. Each
parser runs over small real inputs — the recorded Ray session, an agent's batch of a worker's log, OTLP spans and log
records, a node's Prometheus page, a poll, node sightings, a run exit — and what it makes is compared with the
declarations; the store refuses a row that names what its table has not; a fresh store holds the declared tables."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_type_hints

import duckdb
import orjson
import pyarrow as pa
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from raysight import wire
from raysight.agent.node_agent import batch_body
from raysight.agent.tailer import Gap, Tailer
from raysight.ingest import otlp
from raysight.signals.log_lines import otlp_logs
from raysight.signals.log_lines import parse as log_lines
from raysight.signals.node_sightings import parse as node_sightings
from raysight.signals.polls import parse as ray_state
from raysight.signals.ray_events import event_stages
from raysight.signals.ray_events import parse as ray_events
from raysight.signals.ray_events.apply import Post, apply_posts
from raysight.signals.ray_events.merge import merge_patches
from raysight.signals.ray_events.parse import TASKS, WORKERS
from raysight.signals.ray_metrics.parse import RAY_REPORTED, RaySample, parse_aggregator_metrics
from raysight.signals.registry import every_table
from raysight.signals.run_exits import parse as run_exits
from raysight.signals.scrapes import parse as prom_text
from raysight.signals.spans import parse as spans
from raysight.store import schema
from raysight.store.store import Store
from raysight.tables import FoldedTable, Table, arrow_rows
from tests.conftest import FIXTURES

SESSION = "session_2026-11-23_01-02-03_000000_9"
NODE = "ab" * 28
TASK = "c2668a65bda616c1ffffffffffffffffffffffff01000000"
AT_NS = 1_795_000_000_000_000_000
# What an agent's batch stages beside a line's and a file's columns, for the store to compute the line's time from
STAGED_ONLY = {"read_ns", "utc_offset_s"}


def unknown(row: Mapping[str, Any], table: Table | FoldedTable) -> set[str]:
    """The keys of ``row`` that are not columns of ``table`` (those a fold writes, of a folded one), and the fields of
    its structs that are not fields of their column (``column.field``)."""
    columns = {c.name: c for c in (table.staged if isinstance(table, FoldedTable) else table.columns)}
    found = set(row) - set(columns)
    for name, value in row.items():
        fields = columns[name].type if name in columns else None
        if isinstance(fields, dict) and value is not None:
            for item in value if isinstance(value, list) else [value]:
                found |= {f"{name}.{key}" for key in set(item) - set(fields)}
    return found


def test_the_ray_event_folds_write_columns_of_their_tables(ray_batches: list[list[dict[str, Any]]]) -> None:
    events = [event for batch in ray_batches for event in batch]
    assert {event["eventType"] for event in events} >= set(ray_events.HANDLERS)  # each Python fold runs
    patches = [
        patch
        for event in events
        if event["eventType"] in ray_events.HANDLERS
        for patch in ray_events.event_patches(event["eventType"], event["sessionName"], event)
    ]
    for name, key, patch in patches:
        table = schema.FOLDED_TABLES[name]
        assert len(key) == len(table.keys), (name, key)
        assert not unknown(patch, table), (name, patch)
    for name, rows in merge_patches(patches).items():
        assert all(not unknown(row, schema.FOLDED_TABLES[name]) for row in rows), name
    # The task folds are SQL: each column a task event sets is a column of tasks
    assert set(event_stages.TASK_COLUMNS) <= set(TASKS.names)


def _log_batch(tmp_path: Path) -> bytes:
    """What a node agent sends of a worker's log: a marker line, a line, bytes that are not UTF-8, and a gap."""
    logs = tmp_path / "ray" / SESSION / "logs"
    logs.mkdir(parents=True)
    (logs / f"worker-{'cd' * 28}-01000000-777.out").write_bytes(b":job_id:01000000\nhello\n\xff\xfe bytes\n")
    tailer = Tailer(tmp_path / "ray", tmp_path / "checkpoint.json")
    tailer.scan()
    chunks = tailer.read(1 << 20)
    return batch_body("node-1", chunks, [Gap(chunks[0].file, 100, 200, "deleted before it was read")])


def _check_log_batch(batch: log_lines.LogBatch) -> None:
    """Each column of an agent's batch is one of its table's (or staged for the store to compute from), and none is
    left out of the Arrow tables the store inserts."""
    for sent, table, arrow in zip((batch.lines, batch.files, batch.gaps), log_lines.LOG_TABLES, batch.tables()):
        assert not unknown(dict.fromkeys(set(sent) - STAGED_ONLY), table), table.name
        assert set(sent) == set(arrow.column_names), table.name


def test_an_agent_s_log_batch_writes_columns_of_the_log_tables(tmp_path: Path) -> None:
    batch = log_lines.parse(_log_batch(tmp_path), 1000)
    assert any(batch.lines["raw"]) and any(batch.lines["marker"]) and all(t.num_rows for t in batch.tables())
    _check_log_batch(batch)


def test_otlp_log_records_write_columns_of_the_log_tables() -> None:
    record = LogRecord(time_unix_nano=AT_NS, body=AnyValue(string_value="hello"), trace_id=b"\x01" * 16)
    resource = Resource(attributes=otlp.key_values({"service.name": "svc", wire.ATTR_SESSION: SESSION}))
    export = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(resource=resource, scope_logs=[ScopeLogs(log_records=[record])])]
    )
    parsed = otlp_logs.parse(export.SerializeToString(), False, None, AT_NS, 10)
    assert parsed.lines == 1
    for sent in parsed.batches:
        batch = log_lines.parse(orjson.dumps(sent), 1000)
        assert batch.appends
        _check_log_batch(log_lines.placed(batch, {}))


def _span_export() -> bytes:
    """A span of a task attempt, as raysight's instrumentation sends it."""
    span = Span(
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
        name="task",
        kind=Span.SPAN_KIND_CONSUMER,
        start_time_unix_nano=AT_NS,
        end_time_unix_nano=AT_NS + 1000,
        attributes=otlp.key_values({wire.ATTR_TASK_ID: TASK, wire.ATTR_ATTEMPT: 0}),
    )
    span.events.add(name="an event", time_unix_nano=AT_NS)
    span.links.add(trace_id=b"\x03" * 16, span_id=b"\x04" * 8)
    resource = Resource(attributes=otlp.key_values({"service.name": "svc", wire.ATTR_SESSION: SESSION}))
    scope = ScopeSpans(spans=[span])
    scope.scope.name = wire.TASK_SCOPE
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[scope])]
    ).SerializeToString()


def test_otlp_spans_write_every_column_of_spans_and_their_attempt_s_end() -> None:
    export = spans.parse(_span_export(), False)
    (row,) = export.spans
    assert set(row) == set(spans.SPANS.names)  # (one not set would be NULL without a word too)
    assert not unknown(dict.fromkeys(spans.SPAN_RESOURCES.names), spans.SPAN_RESOURCES)
    with duckdb.connect() as con:  # the store inserts attempt_ends by position
        con.register("spans", arrow_rows(export.spans, spans.SPANS.arrow_schema()))
        ends = con.execute(spans.attempt_ends_sql("spans"))
        assert [column[0] for column in ends.description] == spans.ATTEMPT_ENDS.names
        assert len(ends.fetchall()) == 1


def test_a_scrape_writes_columns_of_the_metric_tables() -> None:
    text = (FIXTURES / "aggregator_metrics.txt").read_text()
    body = {"session": SESSION, "scraped_ms": AT_NS // 10**6, "target": {"instance": "10.0.0.1:8080", "job": "ray"}}
    scrape = prom_text.parse(orjson.dumps({**body, "text": text}))
    split = [prom_text.name_and_labels(head) for head in scrape.page.heads]
    new_lines = pa.table(
        {"line": range(len(split)), "name": [n for n, _ in split], "labels_text": [t for _, t in split]}
    )
    with duckdb.connect() as con:
        con.register("new_lines", new_lines)
        series = con.execute(prom_text.SERIES, scrape.target)
        assert not unknown(dict.fromkeys(c[0] for c in series.description if c[0] != "line"), prom_text.METRIC_SERIES)
        assert series.fetchall()
        metadata = con.execute(prom_text.METADATA, {"text": text})
        assert not unknown(dict.fromkeys(c[0] for c in metadata.description), prom_text.METRIC_METADATA)
    samples = parse_aggregator_metrics(text)  # what Ray's aggregators report, kept by position but for its time
    assert samples and [f.name for f in dataclasses.fields(RaySample)] == RAY_REPORTED.names[:-1]


def test_a_poll_writes_columns_of_polled_and_its_drivers_of_workers() -> None:
    driver = {
        "worker_id": "01000000" + "f" * 48,
        "worker_type": "DRIVER",
        "is_alive": False,
        "node_id": NODE,
        "pid": 4242,
        "start_time_ms": AT_NS // 10**6,
        "end_time_ms": AT_NS // 10**6 + 1,
        "exit_type": "INTENDED_USER_EXIT",
        "exit_detail": "done",
    }
    group = {"placement_group_id": "0a" * 18, "state": "CREATED"}
    body = {"session": SESSION, "polled_ns": AT_NS, "resources": {"drivers": [driver], "placement_groups": [group]}}
    poll = ray_state.parse(orjson.dumps(body))
    assert poll.rows.num_rows == 2 and not unknown(dict.fromkeys(poll.rows.column_names), ray_state.POLLED)
    ((name, _, patch),) = poll.drivers
    assert name == WORKERS.name and not unknown(patch, WORKERS)


def test_node_sightings_and_a_run_exit_write_columns_of_their_tables() -> None:
    sighting = {"session": SESSION, "process": "raylet", "node_id": NODE, "pid": 1, "alive": False, "ns": AT_NS}
    host, rows = node_sightings.parse(orjson.dumps({"host": "node-1", "sightings": [sighting]}))
    assert rows.num_rows == 1 and not unknown(dict.fromkeys([*rows.column_names, "host"]), node_sightings.NODE_EVIDENCE)
    sent: wire.RunExit = {"run_id": "run-1", "driver_pid": 1, "exit_code": 0, "ended_ns": AT_NS, "session": SESSION}
    assert len(run_exits.parse(orjson.dumps(sent))) == len(run_exits.RUN_EXITS.names)
    assert list(get_type_hints(wire.RunExit)) == run_exits.RUN_EXITS.names  # (the store inserts them by position)


def test_a_row_naming_what_its_table_has_not_is_refused_not_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ray_batches: list[list[dict[str, Any]]]
) -> None:
    with pytest.raises(ValueError, match=r"\['host_name'\]"):
        arrow_rows(
            [{"session": SESSION, "node_id": NODE, "host_name": "h"}], schema.FOLDED_TABLES["nodes"].arrow_schema()
        )
    with pytest.raises(ValueError, match=r"\['history.stat'\]"):
        arrow_rows([{"session": SESSION, "history": [{"ts": 1, "stat": "ALIVE"}]}], WORKERS.arrow_schema())

    payload, fold_node = ray_events.HANDLERS["NODE_DEFINITION_EVENT"]

    def misspelt(session: str, p: dict[str, Any]) -> Any:
        for table, key, patch in fold_node(session, p):
            yield table, key, {**patch, "host_name": patch.pop("hostname")}

    monkeypatch.setitem(ray_events.HANDLERS, "NODE_DEFINITION_EVENT", (payload, misspelt))
    store = Store(tmp_path)
    try:
        with pytest.raises(ValueError, match="host_name"):  # (the writer quarantines the batch, saying why)
            apply_posts(store, [Post(orjson.dumps([e for batch in ray_batches for e in batch]))])
    finally:
        store.close()


def test_a_fresh_store_holds_the_declared_tables_and_no_other(tmp_path: Path) -> None:
    Store(tmp_path).close()
    with duckdb.connect(str(tmp_path / "raysight.duckdb"), read_only=True) as con:
        stored: dict[str, list[str]] = {}
        for table, column in con.execute(
            "SELECT table_name, column_name FROM duckdb_columns() WHERE NOT internal ORDER BY table_name, column_index"
        ).fetchall():
            stored.setdefault(table, []).append(column)
    declared = {
        t.name: t.names + [d.name for d in t.derived] + [c.name for c in t.inferred]
        if isinstance(t, FoldedTable)
        else t.names
        for t in every_table()
    }
    assert stored == declared
