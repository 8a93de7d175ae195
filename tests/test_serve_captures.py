"""Serve's memray captures (``RAY_SERVE_ENABLE_MEMORY_PROFILING=1``): the agent ships each once it settles, the server
keeps it whole, reads it with memray in a child process, lists it with the profiles of live processes and gives its
file back for memray's reporters; what is wrong with a shipping is said, and nothing is run of it. Real memray
captures of a child process; the app in-process (the agent's client is the app's)."""

from __future__ import annotations

import asyncio
import gzip
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import memray
import pytest
from starlette.testclient import TestClient

from raysight import flame, wire
from raysight.agent import serve_captures
from raysight.agent.serve_captures import ServeCaptures
from raysight.signals.profile_captures.parse import SERVE_CLIENT
from tests.test_server import post

SESSION = "session_2026-11-21_19-46-15_579671_2021"  # the session of tests/fixtures/ray_batches.json
FILE = "replica_shop_Cart_x1y2z3_memray_0.bin"
HOARDER = """import sys

import memray

memray.Tracker(sys.argv[1], native_traces=True).__enter__()  # as Serve starts one in each of its actors


def hoard(kept):
    for _ in range(32):
        kept.append(bytearray(256 * 1024))  # the hoarding line


kept = []
hoard(kept)
"""


def tracked(folder: Path, name: str = FILE) -> tuple[Path, int]:
    """A capture as one of Serve's actors writes it, in ``folder``, and the pid of the process it tracked."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder.parent / "hoarder.py"
    script.write_text(HOARDER)
    process = subprocess.Popen([sys.executable, str(script), str(folder / name)])
    assert process.wait(timeout=60) == 0
    return folder / name, process.pid


@pytest.fixture
def recorded(server: TestClient, ray_batches: list[list[dict[str, Any]]]) -> TestClient:
    """The app on loopback, profiling not allowed (shipping Serve's captures reaches into no process), with a
    session recorded."""
    for batch in ray_batches:
        post(server, batch)
    return server


def shipping(client: TestClient, body: bytes = b"", **params: str) -> Any:
    """POST a Serve capture as an agent would, with ``params`` over those of a good one."""
    given = {"session": SESSION, "file": FILE, "bytes": "4", "modified_ns": "1", **params}
    return client.post(
        wire.AGENT_SERVE_CAPTURES, params=given, content=body, headers={"Content-Type": "application/gzip"}
    )


def test_a_serve_capture_is_shipped_once_settled_kept_read_and_given_back_for_memrays_reporters(
    recorded: TestClient, tmp_path: Path
) -> None:
    ray_dir = tmp_path / "ray"
    path, pid = tracked(ray_dir / SESSION / "logs" / "serve")
    (path.parent / "replica_shop_Cart_x1y2z3.log").write_text("INFO not a capture\n")
    agent = ServeCaptures("http://testserver", None, ray_dir, http=recorded)
    sessions = frozenset({SESSION, "session_without_serve"})
    assert agent.look(sessions) == 0  # first seen: not yet known to have settled
    assert agent.look(sessions) == 1  # the same at the next look: shipped
    assert agent.look(sessions) == 0  # once
    (row,) = recorded.get(wire.CAPTURES).json()["rows"]
    assert (row["kind"], row["status"], row["client"], row["pid"], row["file"], row["error"]) == (
        "memory",
        "done",
        SERVE_CLIENT,
        pid,
        FILE,
        None,
    )
    assert row["file_bytes"] == path.stat().st_size and row["actor_id"] is None  # (no actor ran with that pid)
    whole = recorded.get(wire.path(wire.CAPTURE, capture_id=row["capture_id"])).json()
    line = HOARDER.splitlines().index("        kept.append(bytearray(256 * 1024))  # the hoarding line") + 1
    heaviest = flame.top(whole["stacks"], lines=True)[0]
    assert heaviest["function"] == f"hoard ({ray_dir / SESSION / 'logs' / 'hoarder.py'}:{line})", heaviest
    assert heaviest["own"] >= 32 * 256 * 1024 and whole["unit"] == "bytes"
    assert f"Serve's {FILE}" in flame.capture_title(whole)
    given = recorded.get(wire.path(wire.CAPTURE_FILE, capture_id=row["capture_id"]))
    assert given.content == path.read_bytes() and FILE in given.headers["content-disposition"]
    assert memray.FileReader(str(path)).metadata.pid == pid

    again = ServeCaptures("http://testserver", None, ray_dir, http=recorded)  # an agent started again
    assert again.look(sessions) == 0 and again.look(sessions) == 0  # the server keeps it as it is: not shipped again
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))  # written to since
    assert agent.look(sessions) == 0 and agent.look(sessions) == 0  # settled, but shipped under a minute ago
    assert agent.look(sessions, final=True) == 1  # as the agent stops: whatever changed
    (row,) = recorded.get(wire.CAPTURES).json()["rows"]  # in place of the earlier shipping
    assert row["status"] == "done" and row["pid"] == pid


def test_a_bad_shipping_gets_a_400_naming_what_is_wrong_and_an_unreadable_capture_is_kept_failed(
    recorded: TestClient,
) -> None:
    good = gzip.compress(b"abcd")
    wrong = {
        "file": ("raysight.log", "file must be the name of one of Serve's memray captures"),
        "session": ("", "session must be the name of a Ray session"),
        "bytes": ("-1", "bytes must be a non-negative integer"),
        "modified_ns": ("\u00b2", "modified_ns must be a non-negative integer"),  # (a digit to str.isdigit)
        "node": ("xyz", "node must be a Ray ID"),
    }
    for name, (value, says) in wrong.items():
        refused = shipping(recorded, body=good, **{name: value})
        assert refused.status_code == 400 and says in refused.json()["error"], (name, refused.text)
    plain = shipping(recorded, body=b"abcd")
    assert plain.status_code == 400 and "the body must be the capture gzipped" in plain.json()["error"]
    assert shipping(recorded, body=good, too_large="1").status_code == 400  # (said only: no body)

    unreadable = shipping(recorded, body=good)
    assert unreadable.status_code == 200 and "memray could not read it" in unreadable.json()["error"]
    short = shipping(recorded, body=good, bytes="5", file="proxy_10.0.0.1_memray_0.bin")
    assert "it inflates to 4 bytes, not the 5 its agent gave" in short.json()["error"]
    bomb = shipping(recorded, body=gzip.compress(b"\0" * 10_000_000), file="controller_7_memray_1.bin")
    assert "it inflates past the 4 bytes its agent gave" in bomb.json()["error"]
    large = shipping(recorded, too_large="1", bytes="999999999", file="controller_7_memray_2.bin")
    assert "too large to ship" in large.json()["error"]
    rows = {row["file"]: row for row in recorded.get(wire.CAPTURES).json()["rows"]}
    assert {row["status"] for row in rows.values()} == {"failed"} and len(rows) == 4
    kept = recorded.get(wire.AGENT_SERVE_CAPTURES, params={"session": SESSION}).json()
    assert {c["file"] for c in kept["captures"]} == set(rows) and kept["max_bytes"] == 1024 * 1024
    files = {name: row["file_kept"] for name, row in rows.items()}  # (only what inflates as its agent said is kept)
    assert files == {
        FILE: True,
        "proxy_10.0.0.1_memray_0.bin": False,
        "controller_7_memray_1.bin": False,
        "controller_7_memray_2.bin": False,
    }
    undone = rows["controller_7_memray_1.bin"]["capture_id"]
    missing = recorded.get(wire.path(wire.CAPTURE_FILE, capture_id=undone))
    assert missing.status_code == 404 and "too large to ship was not kept" in missing.json()["error"]
    assert recorded.get(wire.AGENT_SERVE_CAPTURES).status_code == 400  # (name the session)


def test_a_later_shipping_with_nothing_to_show_keeps_the_earlier_and_a_busy_server_says_to_send_again(
    recorded: TestClient, tmp_path: Path
) -> None:
    path, pid = tracked(tmp_path / "ray" / SESSION / "logs" / "serve")
    body, size = gzip.compress(path.read_bytes()), str(path.stat().st_size)
    assert shipping(recorded, body=body, bytes=size).json()["error"] is None
    later = shipping(recorded, too_large="1", bytes="999999999", modified_ns="2")
    assert "too large to ship" in later.json()["error"]
    (row,) = recorded.get(wire.CAPTURES).json()["rows"]
    assert (row["status"], row["pid"], row["file_kept"]) == ("done", pid, True)
    assert row["error"].startswith("a later shipping failed (") and "as shipped before" in row["error"]
    state = recorded.app.state.raysight  # type: ignore[attr-defined]
    reads, state.memray_reads = state.memray_reads, asyncio.Semaphore(0)  # (another capture being read)
    try:
        busy = shipping(recorded, body=body, bytes=size)
    finally:
        state.memray_reads = reads
    assert busy.status_code == 503 and "busy reading another Serve capture" in busy.json()["error"]


def test_a_capture_that_changes_at_every_look_is_shipped_once_it_has_for_a_while(
    recorded: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serve_captures, "RESHIP_S", 0.3)
    ray_dir = tmp_path / "ray"
    path, _ = tracked(ray_dir / SESSION / "logs" / "serve")
    agent = ServeCaptures("http://testserver", None, ray_dir, http=recorded)
    sessions, shipped, deadline = frozenset({SESSION}), 0, time.monotonic() + 30
    while not shipped:
        assert time.monotonic() < deadline, "a capture that kept changing was never shipped"
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # (Serve writing to it between each look)
        shipped = agent.look(sessions)
        time.sleep(0.05)
    (row,) = recorded.get(wire.CAPTURES).json()["rows"]
    assert row["status"] == "done"
