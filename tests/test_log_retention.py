"""Opt-in log retention: by age and by size, whole index blocks at a time, never the block being filled; a marker
of what each file lost, shown by the API, `raysight logs` and `raysight doctor`; a batch resent after its lines were
dropped is not stored again."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from raysight import units
from raysight.agent.node_agent import batch_body
from raysight.agent.tailer import Tailer
from raysight.client import Client
from raysight.settings import Retention, age, amount
from raysight.signals.log_lines import log_index
from raysight.signals.log_lines.apply import apply_logs
from raysight.signals.log_lines.log_retention import prune_logs
from raysight.signals.log_lines.logs_query import LogQuery, log_lines
from raysight.store.sessions_query import latest_session
from raysight.store.store import Store
from tests.ray_scenarios import ServerProcess, agent_command
from tests.test_log_index import _store_lines
from tests.test_logs_ingest import Writer, _session


def test_durations_and_sizes_read_as_written_and_nothing_else() -> None:
    ages = [units.duration_s(age(t)) for t in ("30d", "12h", "90m", "45s", "1.5h")]
    assert ages == [2592000, 43200, 5400, 45, 5400]
    sizes = [units.size_bytes(amount(t)) for t in ("500MB", "50GB", "1.5GiB", "10B")]
    assert sizes == [500 * 10**6, 50 * 10**9, 3 * 2**29, 10]
    for bad in ("30", "d", "-1d", "0s", "1w", "tomorrow"):
        with pytest.raises(ValueError, match="is not a duration such as 30d"):
            age(bad)
    for bad in ("50", "GB", "0MB", "1PB"):
        with pytest.raises(ValueError, match="is not a size such as 500MB"):
            amount(bad)


def _texts(store: Store) -> list[str]:
    con = store.reader()
    return [
        row["text"] for row in orjson.loads(log_lines(con, LogQuery(session=latest_session(con), limit=10_000)).rows)
    ]


def test_lines_older_than_the_retention_go_whole_blocks_at_a_time_with_a_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_index, "BLOCK_LINES", 16)
    store = Store(tmp_path / "data")
    try:
        old = [f"old {i}" for i in range(40)]  # seq 1-40: blocks 0 and 1 old alone, block 2 shared with the new
        _store_lines(tmp_path, store, [old])
        between = time.time_ns()
        time.sleep(0.01)
        new = [f"new {i}" for i in range(5)]
        _store_lines(tmp_path, store, [new])
        stored = _texts(store)  # in the order stored (a batch's lines file by file)
        assert sorted(stored[:40]) == sorted(old)
        assert prune_logs(store, Retention(max_age="1h"), now_ns=between + 3600 * 10**9) == 31
        assert _texts(store) == stored[31:]
        dropped = log_lines(con := store.reader(), LogQuery(session=latest_session(con))).dropped
        assert dropped == {"lines": 31, "through_ms": dropped["through_ms"], "why": dropped["why"]}  # type: ignore[index]
        assert dropped["why"] == "dropped by the server's log retention (older than 1h)"  # type: ignore[index]
        assert dropped["through_ms"] <= between // 10**6  # type: ignore[index]
        files = store.reader().execute("SELECT sum(lines), count(*) FROM log_dropped").fetchall()
        assert files == [(31, 2)]  # a marker on each of the two files that lost lines
        assert prune_logs(store, Retention(max_age="1h"), now_ns=between + 3600 * 10**9) == 0  # done already
        assert prune_logs(store, Retention(max_age="1s"), now_ns=time.time_ns() + 10**10) == 0  # (seq 32-45:
        _store_lines(tmp_path, store, [[f"later {i}" for i in range(20)]])  # the block being filled; now 64-65 are)
        stored = _texts(store)
        assert prune_logs(store, Retention(max_age="1s"), now_ns=time.time_ns() + 10**10) == 32
        assert _texts(store) == stored[-2:]
        counters = store.reader().execute("SELECT value FROM counters WHERE name = 'log_lines_dropped'").fetchall()
        assert counters == [(31 + 32,)]
    finally:
        store.close()


def test_the_oldest_lines_past_the_size_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_index, "BLOCK_LINES", 16)
    store = Store(tmp_path / "data")
    try:
        lines = [f"{i:099d}" for i in range(100)]  # 100 bytes each: 1,600 a block
        _store_lines(tmp_path, store, [lines[:50], lines[50:]])
        stored = _texts(store)
        assert prune_logs(store, Retention(max_size="5000B")) == 63  # blocks 0-3 go (seq 1-63); 4-6 stay
        assert _texts(store) == stored[63:]  # 37 lines: 3,700 bytes, and one more block would be 5,300
        assert prune_logs(store, Retention(max_size="1kB")) == 32  # all but the block being filled
        assert prune_logs(store, Retention(max_age="30d")) == 0  # nothing that old
    finally:
        store.close()


DROPPED = 2 * 8192 - 1  # seq 1-16,383: the first two blocks (seq starts at 1)


def test_a_server_with_a_retention_drops_old_lines_and_says_so_to_logs_and_doctor(tmp_path: Path) -> None:
    logs = _session(tmp_path)
    Writer(logs).write(20_000)  # two full blocks of 8,192 lines, and some
    data = tmp_path / "data"
    server = ServerProcess(data).start()
    try:
        ship = agent_command(server.url, tmp_path / "ray", tmp_path / "state", "--once")
        assert subprocess.run(ship, capture_output=True, timeout=120).returncode == 0
        with Client(server.url) as client:
            deadline = time.monotonic() + 30
            while client.ingest_backlog()["batches"]:  # acknowledged: folding
                assert time.monotonic() < deadline, "the lines were not folded"
                time.sleep(0.05)
            assert client.logs(limit=1)["total"] == 20_000
    finally:
        server.stop()
    time.sleep(1.1)  # older than the retention below
    server = ServerProcess(data, options=["--log-retention", "1s"]).start()  # applied at start, then each minute
    try:
        with Client(server.url) as client:
            deadline = time.monotonic() + 30
            while (answer := client.logs(limit=1))["total"] == 20_000:
                assert time.monotonic() < deadline, "the retention was not applied"
                time.sleep(0.1)
            assert answer["total"] == 20_000 - DROPPED and answer["rows"][0]["text"] == "line 16383"
            assert answer["dropped"]["lines"] == DROPPED
        cli = [sys.executable, "-m", "raysight"]
        printed = subprocess.run(
            [*cli, "logs", "--server", server.url, "--tail", "1"], capture_output=True, text=True, timeout=60
        )
        assert printed.stdout.endswith("line 19999\n")
        assert printed.stderr.startswith(
            "[16,383 earlier lines of this session were dropped by the server's log retention (older than 1s); "
        )
        doctor = subprocess.run([*cli, "doctor", "--server", server.url], capture_output=True, text=True, timeout=60)
        assert doctor.returncode == 0 and "Log lines the server's log retention dropped" in doctor.stdout
        assert "16383" in doctor.stdout
        checkpoint = tmp_path / "state" / "checkpoint.json"  # as if no batch had been acknowledged: all resent
        saved = orjson.loads(checkpoint.read_bytes())
        checkpoint.write_bytes(orjson.dumps({"files": [{**f, "offset": 0, "context": {}} for f in saved["files"]]}))
        again = agent_command(server.url, tmp_path / "ray", tmp_path / "state", "--once")
        assert subprocess.run(again, capture_output=True, timeout=120).returncode == 0
        with Client(server.url) as client:
            deadline = time.monotonic() + 30
            while client.ingest_backlog()["batches"]:
                assert time.monotonic() < deadline, "the lines were not folded"
                time.sleep(0.05)
            assert client.logs(limit=1)["total"] == 20_000 - DROPPED  # known stored, so not stored again
    finally:
        server.stop()


def test_a_bad_retention_is_refused_at_start(tmp_path: Path) -> None:
    for option, value, says in [
        ("--log-retention", "30", "is not a duration such as 30d"),
        ("--log-max-size", "lots", "is not a size such as 500MB"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "raysight", "server", "--data-dir", str(tmp_path), option, value],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and says in done.stderr, done.stderr


def test_the_serve_requests_of_the_lines_dropped_go_with_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Serve's requests are read from its access lines (``serve_requests``): those the retention drops take their
    requests with them, and the requests of the lines kept stay."""
    monkeypatch.setattr(log_index, "BLOCK_LINES", 16)
    store = Store(tmp_path / "data")
    serve = tmp_path / "ray" / "session_2026-11-23_01-02-03_000000_9" / "logs" / "serve"
    serve.mkdir(parents=True)
    tailer = Tailer(serve.parent.parent.parent, tmp_path / "checkpoint.json")
    try:
        for batch in range(3):
            with (serve / "proxy_10.0.0.1.log").open("a") as out:
                for n in range(batch * 20, batch * 20 + 20):
                    out.write(f"INFO 2026-11-23 01:02:03,242 proxy 10.0.0.1 req-{n} -- GET /shop 200 1.0ms\n")
            tailer.scan()
            chunks = tailer.read(1 << 24)
            apply_logs(store, [batch_body("node-1", chunks, [])])
            tailer.commit(chunks, [])

        def requests() -> list[str]:
            rows = store.reader().execute("SELECT request_id FROM serve_requests ORDER BY seq").fetchall()
            return [request_id for (request_id,) in rows]

        assert requests() == [f"req-{n}" for n in range(60)]
        assert prune_logs(store, Retention(max_size="1B")) == 47  # seq 1-47: all but the block being filled (48-63)
        assert requests() == [f"req-{n}" for n in range(47, 60)]
    finally:
        tailer.close()
        store.close()
