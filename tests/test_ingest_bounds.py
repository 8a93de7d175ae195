"""Hardening, round two, at the ingest routes: each request a probe found stopping, freezing or swelling the server,
sent again. A small export must not turn into a huge one (a resource copied into every span), counts are checked
before decoding, a batch the store cannot fold is set aside instead of stopping all behind it, a gzip body is read
whole, and session names are Ray's."""

from __future__ import annotations

import asyncio
import errno
import gzip
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import httpx
import orjson
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from starlette.testclient import TestClient

from raysight.errors import Unavailable
from raysight.ingest.otlp import key_values
from raysight.server.app import create_app
from raysight.settings import DB_FILE, Settings
from raysight.signals.spans.parse import MAX_SPANS
from tests.faults import FailingDisk
from tests.ray_scenarios import ServerProcess, peak_rss_mb, wait_folded

SESSION = "session_2026-11-26_10-00-00_000000_1"
PROTOBUF = {"Content-Type": "application/x-protobuf"}
GZIP = {**PROTOBUF, "Content-Encoding": "gzip"}
RSS_BOUND_MB = 1024  # docs/operations.md's promise


def spans(n: int, first: int = 1, **attributes: object) -> list[Span]:
    return [
        Span(
            trace_id=(first + i).to_bytes(16, "big"),
            span_id=(first + i).to_bytes(8, "big"),
            name="s",
            start_time_unix_nano=1,
            end_time_unix_nano=2,
            attributes=key_values(attributes),
        )
        for i in range(n)
    ]


def trace_export(items: list[Span], scope: str = "", **resource: object) -> bytes:
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=key_values({"ray.session_name": SESSION, **resource})),
                scope_spans=[ScopeSpans(scope=InstrumentationScope(name=scope), spans=items)],
            )
        ]
    ).SerializeToString()


def logs_export(records: int, scope: str = "", session: str = SESSION) -> bytes:
    return ExportLogsServiceRequest(
        resource_logs=[
            ResourceLogs(
                resource=Resource(attributes=key_values({"ray.session_name": session})),
                scope_logs=[ScopeLogs(scope=InstrumentationScope(name=scope), log_records=[LogRecord()] * records)],
            )
        ]
    ).SerializeToString()


def empty_items(n: int) -> bytes:
    """An export (of spans, or of log records: the same fields) of ``n`` empty items: two bytes each."""
    scope = b"\x12\x00" * n  # ScopeSpans.spans (ScopeLogs.log_records): field 2
    resource = b"\x12" + _varint(len(scope)) + scope  # ResourceSpans.scope_spans: field 2
    return b"\x0a" + _varint(len(resource)) + resource  # ExportTraceServiceRequest.resource_spans: field 1


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def stored_spans(data_dir: Path) -> list[tuple[str, int]]:
    """(resource attributes' size, spans) of each resource, read from a copy of the stopped server's store."""
    with duckdb.connect(str(data_dir / DB_FILE), read_only=True) as con:
        return con.execute(
            """SELECT strlen(r.attributes::VARCHAR), count(*) FROM spans s JOIN span_resources r USING (resource_id)
               GROUP BY ALL ORDER BY 2"""
        ).fetchall()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("bounds") / "data") as server:
        yield server


class PingWatch:
    """Pings the server every 50 ms on a thread while the block runs: the slowest answer (a timeout counts as 1 s)."""

    def __init__(self, url: str) -> None:
        self.url, self.slowest, self._stop = url, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=1) as http:
            while not self._stop.wait(0.05):
                started = time.monotonic()
                try:
                    http.get(f"{self.url}/api/raysight/ping").raise_for_status()
                    took = time.monotonic() - started
                except httpx.HTTPError:
                    took = 1.0
                self.slowest = max(self.slowest, took)

    def __enter__(self) -> PingWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def test_hostile_exports_are_refused_or_kept_small_while_the_server_answers_and_stays_under_its_memory_bound(
    tmp_path: Path,
) -> None:
    """The probe's requests, whole: each answered in bounded time (the count is checked on the wire, before any
    object is built), /api/raysight/ping answering within 1 s throughout, the server's peak RSS under the bound."""
    with ServerProcess(tmp_path / "data") as server, httpx.Client(base_url=server.url, timeout=60) as http:
        assert server.proc is not None
        with PingWatch(server.url) as watch:
            # 6 KB of gzip: a 300 KB resource and 1,000 spans, once a 300 MB journal record that stopped folding
            huge_resource = gzip.compress(trace_export(spans(1000), attr="x" * 300_000))
            assert len(huge_resource) < 10_000
            assert http.post("/v1/traces", content=huge_resource, headers=GZIP).status_code == 200
            # an 8 MiB attribute and 250k spans, 1.3 MB on the wire, killed the server (SIGSEGV under 4 GB); with
            # 1 MiB (the default --max-body holds it all) it is the span count that refuses it
            bomb = gzip.compress(trace_export(spans(250_000), attr="x" * 1024 * 1024))
            refused = http.post("/v1/traces", content=bomb, headers=GZIP)
            assert refused.status_code == 413 and f"over {MAX_SPANS:,} spans in one export" in refused.text
            # 9 KB of gzip: 5M empty log records (52 s and 4.5 GB), and as many empty spans (6 s)
            for path in ("/v1/logs", "/v1/traces"):
                refused = http.post(path, content=gzip.compress(empty_items(5_000_000)), headers=GZIP)
                assert refused.status_code == 413, refused.text
            # 229 bytes of gzip: a log export whose scope name was copied into each record (1.36 GB)
            scope_bomb = gzip.compress(logs_export(150_000, scope="s" * 4 * 1024 * 1024))
            assert len(scope_bomb) < 20_000
            assert http.post("/v1/logs", content=scope_bomb, headers=GZIP).status_code == 200
            wait_folded(server.url, timeout_s=120)
        print(f"slowest ping {watch.slowest:.2f} s; server peak RSS {peak_rss_mb(server.proc.pid):.0f} MB")
        assert watch.slowest < 1.0
        assert peak_rss_mb(server.proc.pid) < RSS_BOUND_MB
        lines = http.get("/api/raysight/logs", params={"session": SESSION, "limit": 1}).json()["rows"]
        assert lines and '"name":"' + "s" * 256 + '"' in lines[0]["text"]  # the scope, bounded
    resource = len('{"attr":"","ray.session_name":""}') + 300_000 + len(SESSION)
    assert stored_spans(tmp_path / "data") == [(resource, 1000)]  # the resource once, named by each span


def test_a_gzip_body_of_several_members_is_read_whole_and_a_truncated_one_refused(live: ServerProcess) -> None:
    """RFC 1952 allows members one after another (readers join them; protobuf merges what follows): the second
    member was acknowledged and dropped."""
    first = trace_export(spans(2, first=100))
    second = trace_export(spans(3, first=200), **{"service.name": "second"})
    with httpx.Client(base_url=live.url, timeout=30) as http:
        reply = http.post("/v1/traces", content=gzip.compress(first) + gzip.compress(second), headers=GZIP)
        assert reply.status_code == 200
        wait_folded(http)
        found = http.get("/api/raysight/traces", params={"session": SESSION, "limit": 100}).json()["traces"]
        assert {t["trace_id"] for t in found} >= {(i).to_bytes(16, "big").hex() for i in (100, 101, 200, 201, 202)}
        for min_duration, kept in (("1", len(found)), ("1us", 0)):  # each span lasts 1 ns; a bare number is ns
            params = {"session": SESSION, "limit": 100, "min_duration": min_duration}
            assert len(http.get("/api/raysight/traces", params=params).json()["traces"]) == kept
        cut = http.post("/v1/traces", content=gzip.compress(first)[:-6], headers=GZIP)
        assert cut.status_code == 400 and "ends within its stream" in cut.json()["error"]


def test_an_otlp_log_resource_must_name_a_ray_session(live: ServerProcess) -> None:
    """A session is named as Ray names them (session_…), as the metrics and run-exit routes check: the probe's
    ``x' OR 1=1 --`` became a listed session."""
    with httpx.Client(base_url=live.url, timeout=30) as http:
        reply = http.post("/v1/logs", content=logs_export(3, session="x' OR 1=1 --"), headers=PROTOBUF)
        assert reply.status_code == 200
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

        answer = ExportLogsServiceResponse.FromString(reply.content).partial_success
        assert answer.rejected_log_records == 3 and "is not a Ray session's name" in answer.error_message
        wait_folded(http)
        assert "x' OR 1=1 --" not in http.get("/api/raysight/sessions").text


def poison(n: int = 6_000) -> bytes:
    """An export of ``n`` spans of 2 KB attributes each: 12 MB to fold, more than a 32 MB store can."""
    return gzip.compress(trace_export(spans(n, first=10_000, attr="y" * 2_000)))


def test_a_batch_the_store_cannot_fold_is_set_aside_and_what_follows_folds_after_a_restart_too(tmp_path: Path) -> None:
    """A batch that runs out of memory was retried for ever: nothing behind it folded, not after a restart either.
    Killed right after both are acknowledged, restarted with both in its journal: the poison batch is quarantined
    (its body kept in a file, named in the reason `raysight doctor` shows) and the export behind it is queryable."""
    data, options = tmp_path / "data", ["--memory-limit", "32MB"]
    server = ServerProcess(data, options=options).start()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            assert http.post("/v1/traces", content=poison(), headers=GZIP).status_code == 200
            good = trace_export(spans(1, first=1), **{"service.name": "behind"})
            assert http.post("/v1/traces", content=good, headers=PROTOBUF).status_code == 200
    finally:
        server.stop(signal.SIGKILL)
    with ServerProcess(data, options=options) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        wait_folded(http, timeout_s=60)
        found = http.get("/api/raysight/traces", params={"session": SESSION}).json()["traces"]
        assert [t["services"] for t in found] == [["behind"]]
        doctor = http.get("/api/raysight/doctor").json()
        (quarantined,) = doctor["quarantine"]
        assert "OutOfMemoryException" in quarantined["reason"] and "out of memory 3 times" in quarantined["reason"]
        kept = Path(quarantined["reason"].rpartition("its body is kept in ")[2])
        assert kept.stat().st_size > 10_000_000 and kept.stat().st_mode & 0o777 == 0o600


def test_an_agent_log_batch_whose_file_fields_would_fill_memory_on_every_line_is_refused(live: ServerProcess) -> None:
    """A file's key, name, worker ID and host are stored on each of its lines: 200k lines of two bytes with 1 KB
    fields (443 KB of gzip) took 2.25 GB. Each is now at most 255 characters, and what they take repeated on every
    line is bounded (here 200k lines with 255-character fields: 4 MB of JSON that would stack up 200 MB)."""
    n, wide = 200_000, "w" * 255
    file = {
        **{"session": SESSION, "key": wide, "name": wide, "path": "w.out", "worker_id": wide, "stream": "stdout"},
        "read_ns": 1,
        **{"offsets": list(range(n)), "end": n, "texts": ["x"] * n, "continued": [False] * n, "markers": [False] * n},
    }
    body = gzip.compress(orjson.dumps({"host": wide, "files": [file]}))
    with httpx.Client(base_url=live.url, timeout=30) as http:
        answer = http.post("/ingest/agent/logs", content=body, headers={**GZIP, "Content-Type": "application/json"})
        assert answer.status_code == 400 and "send fewer lines per batch" in answer.json()["error"], answer.text
        file |= {"key": "k", "name": "worker.out", "worker_id": None}
        body = gzip.compress(orjson.dumps({"host": "node", "files": [file]}))
        kept = http.post("/ingest/agent/logs", content=body, headers={**GZIP, "Content-Type": "application/json"})
        assert kept.json() == {"ok": True, "lines": n}  # the same lines, with fields of their usual size


def answered(get: Callable[[], httpx.Response], timeout_s: float = 30) -> httpx.Response:
    """``get()``'s answer once it is not a 503 (a read the store had no memory for while the writer held it)."""
    deadline = time.monotonic() + timeout_s
    while (response := get()).status_code == 503:
        assert time.monotonic() < deadline, f"still unavailable: {response.text}"
        time.sleep(0.05)
    return response


def test_a_read_the_store_has_no_memory_for_now_is_a_503_to_retry(tmp_path: Path) -> None:
    """A read that finds the store out of memory (the writer holding most of --memory-limit) is answered 503 with
    Retry-After, as any moment the server cannot serve, not 500."""
    app = create_app(Settings(tmp_path / "data").replace(memory_limit="32MB"))
    with TestClient(app) as client:
        state = app.state.raysight
        huge = lambda cursor: cursor.execute("SELECT list(i) FROM range(20000000) t(i)").fetchall()  # noqa: E731
        with pytest.raises(Unavailable, match="no memory for this read now") as refused:
            asyncio.run(state.read(huge))
        assert isinstance(refused.value.__cause__, duckdb.OutOfMemoryException)
        assert refused.value.status == 503 and refused.value.headers == {"Retry-After": "1"}
        assert client.get("/api/raysight/doctor").status_code == 200  # (the store is whole)


def test_a_poison_batch_whose_body_cannot_be_kept_aside_waits_for_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Setting a poison batch aside writes its body to a file first: a disk that refuses it (full) is waited out
    like any environmental failure, the batch staying journalled, never released unkept; once the disk takes writes
    again it is quarantined with its body kept, and folding goes on."""
    monkeypatch.setattr("raysight.store.writer.RETRY_S", 0.02)
    monkeypatch.setattr("raysight.store.writer.MAX_RETRY_S", 0.05)
    disk = FailingDisk(monkeypatch, tmp_path / "data" / "journal" / "quarantine", errno.ENOSPC)
    with TestClient(
        create_app(Settings(tmp_path / "data").replace(fold_linger_s=0, fold_rest=0, memory_limit="32MB"))
    ) as client:
        doctor = lambda: answered(lambda: client.get("/api/raysight/doctor")).json()  # noqa: E731
        disk.armed = True
        assert client.post("/v1/traces", content=poison(), headers=GZIP).status_code == 200
        deadline = time.monotonic() + 60
        while "No space left" not in (doctor()["folding"].get("error") or ""):
            assert time.monotonic() < deadline, "setting the batch aside did not meet the full disk"
            time.sleep(0.05)
        report = doctor()
        assert report["ingest_backlog"]["batches"] == 1 and not report["quarantine"]
        disk.armed = False
        wait_folded(client, timeout_s=60)
        (quarantined,) = doctor()["quarantine"]
        kept = Path(quarantined["reason"].rpartition("its body is kept in ")[2])
        assert kept.stat().st_size > 10_000_000
