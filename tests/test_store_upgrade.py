"""A store from before schema 5 (DuckDB's v0.10.2 storage format, raw bodies without zstd) is rewritten into a new
file on open: the same answers, the journal marker kept, smaller; a failure midway leaves the old store usable."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest
from starlette.testclient import TestClient

from raysight.config import USER_AGENT
from raysight.server.app import create_app
from raysight.settings import DB_FILE, Settings
from raysight.signals.log_lines import logs_query, requests_query
from raysight.signals.log_lines.apply import apply_logs
from raysight.signals.ray_events.apply import apply_posts
from raysight.signals.registry import every_table
from raysight.signals.spans import SIGNAL as SPANS_SIGNAL
from raysight.signals.spans.parse import SPANS
from raysight.store import schema, upgrade
from raysight.store.journal import Journal
from raysight.store.sessions_query import latest_session
from raysight.store.store import Store
from raysight.store.upgrade import REWRITE_SUFFIX
from tests.ray_scenarios import wait_folded
from tests.test_store import post, snapshot

COPIES = 200  # of the recorded session, with fresh event IDs: ~15 MB of raw bodies, enough to see compression
JOURNAL_FOLDED = 4242
SESSION = "session_2026-11-26_10-00-00_000000_1"


def copies(batches: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """The recorded events ``COPIES`` times, each copy's event IDs new (so stored), its entities the same."""
    out = []
    for k in range(COPIES):
        events = copy.deepcopy([e for batch in batches for e in batch])
        for i, event in enumerate(events):
            event["eventId"] = base64.b64encode(k.to_bytes(4, "big") + i.to_bytes(4, "big")).decode()
        out.append(events)
    return out


def storage_version(path: Path) -> str:
    """The storage format DuckDB reads the file as (read-only, so that nothing is written)."""
    with duckdb.connect(str(path), read_only=True) as con:
        (tags,) = con.execute("SELECT tags FROM duckdb_databases() WHERE NOT internal").fetchone()
    return str(tags["storage_version"])


def meta(path: Path) -> dict[str, str]:
    with duckdb.connect(str(path), read_only=True) as con:
        return dict(con.execute("SELECT key, value FROM meta").fetchall())


def write_old_format(built: Path, old: Path) -> None:
    """Copy the store at ``built`` into ``old``, a file in DuckDB's v0.10.2 storage format with the raw DDL of
    schema 4 (no zstd, a unique key), as DuckDB before 2.0 wrote it."""
    with duckdb.connect() as con:
        con.execute(f"ATTACH '{built}' AS built (READ_ONLY)")
        con.execute(f"ATTACH '{old}' AS old (STORAGE_VERSION 'v0.10.2')")
        con.execute("USE old")
        for statement in schema.all_ddl(every_table()):
            con.execute(statement.replace(schema.ZSTD, ""))
        con.execute("DROP TABLE raw_events")  # keyed by an md5 of (session, event_id) then
        con.execute(schema.RAW_EVENTS_V4_DDL.replace(schema.ZSTD, ""))
        con.execute("ALTER TABLE raw_events_v4 RENAME TO raw_events")
        con.execute(
            "INSERT INTO raw_events BY NAME SELECT md5_number(session || ' ' || event_id) AS key, * "
            "FROM built.main.raw_events"
        )
        for (name,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'built' AND table_name <> 'raw_events'"
        ).fetchall():
            con.execute(f"INSERT INTO old.main.{name} BY NAME SELECT * FROM built.main.{name}")
        con.execute("UPDATE old.main.meta SET value = '4' WHERE key = 'schema_version'")
        con.execute("INSERT INTO old.main.meta VALUES ('journal_folded', ?)", [str(JOURNAL_FOLDED)])


@pytest.fixture
def old_store(tmp_path: Path, ray_batches: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """A schema-4 store in the v0.10.2 storage format with the old raw DDL; what it answered."""
    store = Store(tmp_path / "built")
    apply_posts(store, [post(events, label="rec", run_id="run-1") for events in copies(ray_batches)])
    answers = {
        "snapshot": snapshot(store),
        "raw": store.con.execute("SELECT count(*), sum(hash(session, event_id, body)) FROM raw_events").fetchone(),
        "counters": dict(store.con.execute("SELECT * FROM counters").fetchall()),
    }
    store.close()
    path = tmp_path / "old" / DB_FILE
    path.parent.mkdir()
    write_old_format(tmp_path / "built" / DB_FILE, path)
    assert storage_version(path) == "v1.0.0+"
    assert meta(path)["schema_version"] == "4"
    return {**answers, "dir": path.parent, "path": path, "bytes": path.stat().st_size}


def assert_upgraded(old: dict[str, Any], ray_batches: list[list[dict[str, Any]]]) -> None:
    store = Store(old["dir"])
    try:
        assert snapshot(store) == old["snapshot"]
        assert (
            store.con.execute("SELECT count(*), sum(hash(session, event_id, body)) FROM raw_events").fetchone()
            == old["raw"]
        )
        assert dict(store.con.execute("SELECT * FROM counters").fetchall()) == old["counters"]
        assert store.journal_folded() == JOURNAL_FOLDED
        compression = store.con.execute(
            "SELECT DISTINCT compression FROM pragma_storage_info('raw_events') WHERE column_name = 'body' "
            "AND segment_type = 'VARCHAR'"
        ).fetchall()
        assert compression == [("ZSTD",)]
        assert apply_posts(store, [post(copies(ray_batches)[0])]).stored == 0  # the copied raw keys still deduplicate
    finally:
        store.close()
    assert storage_version(old["path"]) not in ("v0.10.0+", "v1.0.0+")
    assert meta(old["path"])["schema_version"] == str(schema.SCHEMA_VERSION)
    assert not old["path"].with_name(DB_FILE + REWRITE_SUFFIX).exists()
    assert old["path"].stat().st_size < old["bytes"] * 0.6  # zstd raw bodies (~15 MB of JSON): 15 MB to 7 MB


def test_an_old_format_store_is_rewritten_smaller_with_the_same_answers(old_store, ray_batches) -> None:
    assert_upgraded(old_store, ray_batches)
    Store(old_store["dir"]).close()  # upgraded once: opening again leaves it as it is
    assert meta(old_store["path"])["journal_folded"] == str(JOURNAL_FOLDED)


@pytest.mark.parametrize("step", ["fsync", "replace"])
def test_a_rewrite_that_fails_midway_leaves_the_old_store_usable(
    old_store, ray_batches, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    def fail(*_: object) -> None:
        raise OSError(f"simulated crash at {step}")

    with monkeypatch.context() as patch:
        if step == "replace":
            patch.setattr(upgrade.os, "replace", fail)
        else:
            patch.setattr(upgrade, step, fail)
        with pytest.raises(OSError, match="simulated crash"):
            Store(old_store["dir"])
    assert old_store["path"].with_name(DB_FILE + REWRITE_SUFFIX).exists()  # the copy was written, never swapped in
    assert storage_version(old_store["path"]) == "v1.0.0+"
    assert meta(old_store["path"]) == {"schema_version": "4", "journal_folded": str(JOURNAL_FOLDED)}
    assert_upgraded(old_store, ray_batches)


def test_a_schema_15_store_keeps_each_span_s_resource_once_and_replays_spans_journalled_before(
    tmp_path: Path,
) -> None:
    """Schema 15 copied a span's resource into each of its rows, in the store and in the journal (so a 6 KB export
    of a 300 KB resource became 300 MB): after the upgrade each resource is kept once, named by its spans, and a
    journal record of that shape still folds."""
    data = tmp_path / "data"
    legacy = {column: None for column in SPANS.names if column != "resource_id"}
    stored = {**legacy, "trace_id": "01" * 16, "span_id": "02" * 8, "start_ns": 1, "end_ns": 2, "session": SESSION}
    journalled = {**stored, "span_id": "03" * 8}
    resource = '{"service.name":"old"}'
    Store(data).close()
    with duckdb.connect(str(data / DB_FILE)) as con:  # back to schema 15's spans, with one span stored
        con.execute("DROP TABLE span_resources")
        con.execute("ALTER TABLE spans DROP COLUMN resource_id")
        con.execute("ALTER TABLE spans ADD COLUMN resource JSON")
        con.execute(
            "INSERT INTO spans BY NAME SELECT * FROM (SELECT unnest([$row], recursive := true))",
            {"row": stored | {"resource": resource}},
        )
        con.execute("UPDATE meta SET value = '15' WHERE key = 'schema_version'")
        (folded,) = con.execute(
            "SELECT coalesce(max(value::BIGINT), 0) FROM meta WHERE key = 'journal_folded'"
        ).fetchone()
    journal = Journal(data / "journal", folded)
    journal.append([(None, None, orjson.dumps([journalled | {"resource": resource}]), 1, SPANS_SIGNAL.name)])
    journal.close()
    with TestClient(create_app(Settings(data).replace(fold_linger_s=0, fold_rest=0))) as client:
        wait_folded(client)
        con = client.app.state.raysight.store.reader()
        rows = con.execute(
            "SELECT span_id, r.attributes::VARCHAR FROM spans JOIN span_resources r USING (resource_id) ORDER BY 1"
        ).fetchall()
        assert rows == [("02" * 8, resource), ("03" * 8, resource)]
        assert con.execute("SELECT count(*) FROM span_resources").fetchone() == (1,)
        assert "resource" not in [c[0] for c in con.execute("DESCRIBE spans").fetchall()]


def _dashboard_log(start: int, user_agent: str) -> bytes:
    """A node agent's batch of one dashboard.log line: the request of a client with ``user_agent``, at ``start``."""
    text = f"2026-11-26 12:01:21,555\tINFO web_log.py:229 -- 127.0.0.1 'GET /api/jobs/ HTTP/1.1' 200 '-' '{user_agent}'"
    file = {"session": SESSION, "key": "1-2-0", "name": "dashboard.log", "path": "dashboard.log", "stream": "system"}
    lines = {"offsets": [start], "texts": [text], "continued": [False], "markers": [False]}
    return orjson.dumps({"host": "node-1", "files": [{**file, **lines, "end": start + 100, "read_ns": 1}]})


def test_a_schema_16_store_shows_its_lines_and_flags_raysight_s_own_requests_from_then_on(tmp_path: Path) -> None:
    """Before schema 17 no line was flagged as a dashboard's line of raysight's own request (nor could be: its
    requests said python-httpx): after the upgrade those lines are shown, the lines of its requests stored since
    are not."""
    store = Store(tmp_path)
    apply_logs(store, [_dashboard_log(0, "python-httpx/0.28.1")])
    store.close()
    with duckdb.connect(str(tmp_path / DB_FILE)) as con:  # back to schema 16's log lines
        con.execute("ALTER TABLE log_lines DROP COLUMN own")
        con.execute("UPDATE meta SET value = '16' WHERE key = 'schema_version'")
    store = Store(tmp_path)
    try:
        apply_logs(store, [_dashboard_log(100, USER_AGENT)])

        def agents(**query: Any) -> list[str]:
            rows = orjson.loads(
                logs_query.log_lines(store.con, logs_query.LogQuery(session=latest_session(store.con), **query)).rows
            )
            return [row["text"].rsplit(" ", 1)[1] for row in rows]

        assert agents() == ["'python-httpx/0.28.1'"]
        assert agents(include_own=True) == ["'python-httpx/0.28.1'", f"'{USER_AGENT}'"]
    finally:
        store.close()
    assert meta(tmp_path / DB_FILE)["schema_version"] == str(schema.SCHEMA_VERSION)


def _serve_access_line() -> bytes:
    """A node agent's batch of one access line of a Serve replica's (``shop``'s ``Cart``'s, of request ``req-a``)."""
    text = "INFO 2026-11-26 12:01:21,555 shop_Cart cart0001 req-a -- GET /shop 200 1.1ms"
    file = {"session": SESSION, "key": "1-2-1", "name": "replica_shop_Cart_cart0001.log", "stream": "system"}
    lines = {"offsets": [0], "texts": [text], "continued": [False], "markers": [False]}
    return orjson.dumps(
        {"host": "node-1", "files": [{**file, "path": "serve/" + file["name"], **lines, "end": 100, "read_ns": 1}]}
    )


def test_a_schema_17_store_reads_what_the_serve_lines_it_holds_say(tmp_path: Path) -> None:
    """Before schema 18 a Serve line's component, replica, application and deployment, and a text line's request ID,
    were not read: the upgrade reads them from the lines stored."""
    store = Store(tmp_path)
    apply_logs(store, [_serve_access_line()])
    store.close()
    with duckdb.connect(str(tmp_path / DB_FILE)) as con:  # back to schema 17's log lines
        for column in ("route", "application", "deployment", "replica", "component", "component_id"):
            con.execute(f"ALTER TABLE log_lines DROP COLUMN {column}")
        con.execute("UPDATE log_lines SET request_id = NULL")
        con.execute("UPDATE meta SET value = '17' WHERE key = 'schema_version'")
    store = Store(tmp_path)
    try:
        query = logs_query.LogQuery(session=latest_session(store.con), request_id="req-a", deployment="Cart")
        (row,) = orjson.loads(logs_query.log_lines(store.con, query).rows)
        said = ("component", "component_id", "replica", "application", "deployment", "route", "request_id")
        assert [row[k] for k in said] == ["replica", "cart0001", "cart0001", "shop", "Cart", "/shop", "req-a"]
    finally:
        store.close()
    assert meta(tmp_path / DB_FILE)["schema_version"] == str(schema.SCHEMA_VERSION)


def test_a_schema_18_store_finds_the_serve_requests_of_the_access_lines_it_holds(tmp_path: Path) -> None:
    """Before schema 19 no request was stored of Serve's access lines: the upgrade finds them in the lines stored."""
    store = Store(tmp_path)
    apply_logs(store, [_serve_access_line()])
    store.close()
    with duckdb.connect(str(tmp_path / DB_FILE)) as con:  # back to schema 18: no serve_requests
        con.execute("DROP TABLE serve_requests")
        con.execute("UPDATE meta SET value = '18' WHERE key = 'schema_version'")
    store = Store(tmp_path)
    try:
        query = requests_query.RequestQuery(session=latest_session(store.con))
        (request,) = requests_query.serve_requests(store.con, query)["requests"]
        (cart,) = request["replicas"]
        assert (request["request_id"], request["route"], request["status"], request["latency_ms"]) == (
            "req-a",
            "/shop",
            "200",
            1.1,
        )
        assert (cart["application"], cart["deployment"], cart["replica"], cart["host"]) == (
            "shop",
            "Cart",
            "cart0001",
            "node-1",
        )
    finally:
        store.close()
    assert meta(tmp_path / DB_FILE)["schema_version"] == str(schema.SCHEMA_VERSION)
