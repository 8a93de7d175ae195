"""`raysight server --detach` and `raysight server stop`, run as a user runs them (subprocesses)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from raysight.cli.run import free_port
from raysight.cli.server import server_cmd
from raysight.client import Client
from raysight.settings import SECRETS_FILE, Retention, Settings
from tests.ray_scenarios import JSON, ServerProcess
from tests.test_cli import SESSION, feed, raysight, run_cli

TOKEN, KEY = "read-token-given-to-detach", "ingest-key-given-to-detach"


def pid_in(data_dir: Path) -> int:
    return int((data_dir / "server.pid").read_text().split()[0])


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes() != b""
    except OSError:
        return False


def wait_gone(pid: int, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data dir; a server left detached on it by a failing test is ended (by its pid, once checked to be it)."""
    path = tmp_path / "data"
    yield path
    pidfile = path / "server.pid"
    pid = pid_in(path) if pidfile.exists() else None
    if pid and alive(pid) and str(path).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
        os.kill(pid, signal.SIGTERM)
        wait_gone(pid)


def test_detach_keeps_the_given_secrets_waits_for_its_server_and_stop_ends_it(data_dir: Path) -> None:
    port = free_port()
    args = ["--host", "0.0.0.0", "--port", str(port), "--data-dir", str(data_dir)]
    started = run_cli("server", "--detach", *args, "--token", TOKEN, "--ingest-key", KEY, "--max-body", "100000")
    assert started.returncode == 0, started.stderr
    pid = pid_in(data_dir)
    assert f"raysight server running in the background (pid {pid})" in started.stdout
    command_line = Path(f"/proc/{pid}/cmdline").read_bytes()  # what `ps` shows to every user
    assert TOKEN.encode() not in command_line and KEY.encode() not in command_line

    url = f"http://127.0.0.1:{port}"
    denied = raysight(url, "sessions")
    assert denied.exit_code == 1 and "needs its read token" in denied.stderr
    assert httpx.post(f"{url}/ingest/ray-events?key=wrong", json=[]).status_code == 401
    too_big = httpx.post(f"{url}/ingest/ray-events?key={KEY}", content=b"[" + b" " * 100_000 + b"]", headers=JSON)
    assert too_big.status_code == 413  # --max-body reached the detached server too
    feed(url, f"?cluster=demo&key={KEY}", token=TOKEN)
    assert SESSION in raysight(url, "sessions", token=TOKEN).stdout

    program = [sys.executable, "-c", "import sys; sys.exit(3)"]
    reported = run_cli("run", "--server", url, "--ingest-key", KEY, "--", *program)
    assert reported.returncode == 3 and reported.stderr == ""
    unreported = run_cli("run", "--server", url, "--", *program)  # the program's exit code, whatever raysight says
    assert unreported.returncode == 3 and "could not report the driver's exit code" in unreported.stderr
    assert "needs the server's ingest key" in unreported.stderr

    again = run_cli("server", "--detach", "--port", str(free_port()), "--data-dir", str(data_dir))
    assert again.returncode == 1 and f"a raysight server (pid {pid}) already runs on {data_dir}" in again.stderr
    assert pid_in(data_dir) == pid and alive(pid)

    stopped = run_cli("server", "stop", "--data-dir", str(data_dir))
    assert stopped.returncode == 0 and stopped.stdout == f"stopped raysight server (pid {pid})\n", stopped.stderr
    assert not alive(pid) and not (data_dir / "server.pid").exists()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/api/raysight/ping")
    nothing = run_cli("server", "stop", "--data-dir", str(data_dir))
    assert nothing.returncode == 1 and f"no detached raysight server on {data_dir}" in nothing.stderr


def test_detach_beyond_loopback_without_secrets_waits_with_those_the_server_made(data_dir: Path) -> None:
    port = free_port()
    args = ["--host", "0.0.0.0", "--port", str(port), "--data-dir", str(data_dir)]
    started = run_cli("server", "--detach", *args, "--traces-keep-slow", "1d", "--log-retention", "500ms")
    assert started.returncode == 0, started.stderr
    token = json.loads((data_dir / SECRETS_FILE).read_text())["token"]
    url = f"http://127.0.0.1:{port}"
    assert raysight(url, "sessions", token=token).stdout.startswith("No session yet")
    assert raysight(url, "sessions").exit_code == 1
    assert raysight(url, "doctor", token=token).stdout.startswith("Events: none\nAcknowledged, not yet folded: 0")
    assert run_cli("server", "stop", "--data-dir", str(data_dir)).returncode == 0


def test_the_options_are_the_settings_table_s_each_read_in_the_one_dialect_of_units(tmp_path: Path) -> None:
    def settings(*args: str) -> Settings:
        return Settings.from_options(server_cmd.make_context("server", ["--data-dir", str(tmp_path), *args]).params)

    assert settings() == Settings(tmp_path)  # the table's defaults are the settings' own
    given = settings(
        "--traces-keep-slow", "1d", "--log-retention", "500ms", "--header-timeout", "500ms", "--max-body", "1MiB"
    )
    assert given.writer.trace_sampling.slow_ns == 86_400 * 10**9 and given.writer.log_retention == Retention("500ms")
    assert given.http.header_timeout_s == 0.5 and given.http.max_body == 2**20
    assert settings("--query-timeout", "2m").queries.timeout_s == 120 and settings("--max-body", "9").http.max_body == 9


def test_reindex_then_delete_a_session_then_an_empty_store(data_dir: Path) -> None:
    server = ServerProcess(data_dir).start()  # its own: deleting is for keeps
    try:
        url = server.url
        feed(url, "?cluster=team%2Fdemo")  # a label is any text: a slash must not break the delete's URL
        assert raysight(url, "reindex").stdout == "Refolded 89 events.\n"
        kept = raysight(url, "sessions", "delete", "team/demo", input="n\n")
        assert kept.exit_code == 1 and "Aborted" in kept.stderr and SESSION in raysight(url, "sessions").stdout
        assert raysight(url, "sessions", "delete", "team/demo", "--yes").stdout == f"Deleted {SESSION}.\n"
        assert raysight(url, "sessions").stdout.startswith("No session yet")
        assert raysight(url, "list", "tasks").stdout == "Session: (none yet)\nNo resource in the session.\n"
        assert raysight(url, "summary", "actors").stdout.endswith("No resource in the session.\n")
        unknown = raysight(url, "get", "jobs", "01000000")
        assert unknown.exit_code == 1 and "no job with id 01000000 in any session" in unknown.stderr
        gone = raysight(url, "sessions", "delete", "team/demo", "--yes")
        assert gone.exit_code == 1 and "no session" in gone.stderr
    finally:
        server.stop()


def test_detach_reports_a_server_that_exits_at_start(data_dir: Path) -> None:
    running = ServerProcess(data_dir).start()  # in the foreground: it holds the store, and its port answers
    try:
        failed = run_cli("server", "--detach", "--port", str(running.port), "--data-dir", str(data_dir))
        assert failed.returncode == 1 and "the server exited at start" in failed.stderr, failed.stdout
        assert running.proc and f"a raysight server (pid {running.proc.pid}) already runs on" in failed.stderr
        assert not (data_dir / "server.pid").exists()
        with running.client() as client:
            assert client.ping()
    finally:
        running.stop()


def test_a_server_says_it_listens_once_it_serves_and_a_second_on_its_data_dir_is_refused(data_dir: Path) -> None:
    port = free_port()
    command = [sys.executable, "-m", "raysight", "server", "--port", str(port), "--data-dir", str(data_dir)]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert first.stdout is not None and select.select([first.stdout], [], [], 60)[0], "nothing said in 60 s"
        assert first.stdout.readline() == f"raysight listening on http://127.0.0.1:{port}\n"
        with Client(f"http://127.0.0.1:{port}", timeout=2) as client:
            assert client.ping()  # said once it serves: its store open, its port bound
        second = run_cli("server", "--port", str(free_port()), "--data-dir", str(data_dir))
        assert (second.returncode, second.stdout) == (1, "")  # nothing said of listening
        assert second.stderr == (  # one line, no traceback
            f"Error: a raysight server (pid {first.pid}) already runs on {data_dir}; stop it, or give this one "
            "another --data-dir\n"
        )
    finally:
        first.terminate()
        first.wait(30)


def test_stop_signals_only_this_data_dirs_server(data_dir: Path) -> None:
    data_dir.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (data_dir / "server.pid").write_text(f"{other.pid}\n127.0.0.1\n8271\n")
        refused = run_cli("server", "stop", "--data-dir", str(data_dir))
        assert refused.returncode == 1 and f"pid {other.pid} is not a raysight server of {data_dir}" in refused.stderr
        assert other.poll() is None and not (data_dir / "server.pid").exists()  # not signalled; stale pidfile gone
    finally:
        other.kill()
        other.wait(timeout=10)
    (data_dir / "server.pid").write_text(f"{other.pid}\n127.0.0.1\n8271\n")  # now a pid that has ended
    gone = run_cli("server", "stop", "--data-dir", str(data_dir))
    assert gone.returncode == 1 and f"pid {other.pid} is not a raysight server of {data_dir}" in gone.stderr


def test_two_detached_starts_at_once_leave_one_server_that_stop_ends(data_dir: Path) -> None:
    """The pidfile is the only way `stop` finds a detached server: a second start must not take it over."""
    starts = [
        subprocess.Popen(
            [sys.executable, "-m", "raysight", "server", "--detach", "--port", str(free_port()), "--data-dir"]
            + [str(data_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = sorted((p.wait(timeout=120), p.communicate()[1]) for p in starts)
    assert [code for code, _ in results] == [0, 1], results
    assert "already runs on" in results[1][1]
    pid = pid_in(data_dir)
    assert alive(pid)
    assert run_cli("server", "stop", "--data-dir", str(data_dir)).returncode == 0 and wait_gone(pid)
