"""The debugger: pauses reported by paused workers over the server's one port, relayed to one client at a time, each
pause and attach recorded; refused unless the server allows debugging, and attaching without the admin token (on
loopback too). The relay is exercised here with a scripted worker of the protocol; tests marked ``ray`` pause real
tasks and actors of a job `raysight run` traces, and drive them with `raysight debug attach` as a user does."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse

from raysight import wire
from raysight.agent.scrape import ray_temp_dir
from raysight.cli.common import admin_token_for
from raysight.cli.debug import DapFrames, printable
from raysight.cli.run import free_port
from raysight.server.app import create_app
from raysight.server.auth import Secrets
from raysight.server.routing import Reach
from raysight.settings import SECRETS_FILE, Reaches, Settings
from raysight.signals.debug_pauses import apply, pauses_query
from raysight.signals.debug_pauses.parse import parse_pause
from raysight.store.store import Store
from tests.dap_client import DapClient
from tests.ray_scenarios import JSON, ServerProcess, raysight_cli

ADMIN = {"Authorization": "Bearer debug-secret", wire.CLIENT_HEADER: "ada@laptop"}
SESSION = "session_2026-11-27_10-00-00_000000_1"
POST_MORTEM_S = 20  # how long the real job's post-mortem freezes wait for a client
PROGRAM = Path(__file__).parent / "ray_programs" / "breakpoints.py"


def line_of(code: str) -> int:
    """The line of the job's program that holds ``code``."""
    [number] = [n for n, line in enumerate(PROGRAM.read_text().splitlines(), 1) if line.strip().startswith(code)]
    return number


BREAKPOINT, FAILING = line_of("breakpoint()"), line_of("return share / parts")


def pause_report(**changes: Any) -> bytes:
    """A worker's report of a breakpoint in ``doubled`` (called by ``task``), as ``instrument/debugger.py`` sends it."""
    report = {
        "kind": "breakpoint",
        "session": SESSION,
        "job_id": "01000000",
        "task_id": "c8ef45ccd0112571ffffffffffffffffffffffff01000000",
        "attempt": 0,
        "actor_id": None,
        "worker_id": "516e54a8",
        "node_id": "674508c1",
        "host": "10.0.0.7",
        "pid": 4242,
        "paused_ns": 1_795_000_000_000_000_000,
        "stack": [
            {"file": "/app/job.py", "line": 13, "function": "doubled", "locals": {"x": "21", "twice": "42"}},
            {"file": "/app/job.py", "line": 19, "function": "task", "locals": {"y": "20", "x": "21"}},
        ],
        **changes,
    }
    return orjson.dumps(report)


@pytest.fixture
def debugging(tmp_path: Path) -> Iterator[TestClient]:
    """The app on loopback, debugging allowed with the admin token ``debug-secret``."""
    settings = Settings(tmp_path / "data").replace(
        reaches=Reaches(debug=True, reach_token="debug-secret"), fold_linger_s=0, fold_rest=0
    )
    with TestClient(create_app(settings)) as client:
        yield client


def received(socket: Any) -> dict[str, Any]:
    """The next message of a debugger's socket (JSON, in a text frame)."""
    message: dict[str, Any] = orjson.loads(socket.receive_text())
    return message


def say(socket: Any, **message: Any) -> None:
    socket.send_text(orjson.dumps(message).decode())


def test_without_allow_debug_neither_a_worker_nor_a_client_gets_through(tmp_path: Path) -> None:
    """Debugging off (the default): both sides refused at the handshake, whatever they bring."""
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0, fold_rest=0))) as client:
        for path, headers in (
            (wire.DEBUG_PAUSED, {}),
            (wire.path(wire.DEBUG_ATTACH, pause_id="0123abcd"), ADMIN),
        ):
            with pytest.raises(WebSocketDenialResponse) as denied, client.websocket_connect(path, headers=headers):
                pass
            assert denied.value.status_code == 403 and denied.value.json()["error"] == Reach.DEBUG.off


def test_a_pause_is_listed_relayed_to_one_client_at_a_time_and_recorded(debugging: TestClient) -> None:
    with debugging.websocket_connect(wire.DEBUG_PAUSED) as worker:
        worker.send_bytes(pause_report())
        pause_id = received(worker)[wire.PAUSE_ID]
        say(worker, **{wire.OUTPUT: "> /app/job.py(13)doubled()\n(Pdb) "})
        say(worker, **{wire.READY: True})
        [live] = debugging.get(wire.DEBUG_PAUSES).json()
        assert live["pause_id"] == pause_id and live["function"] == "doubled" and live["holder"] is None
        assert (live["task_id"], live["pid"], live["line"], live["ended"]) == (
            orjson.loads(pause_report())["task_id"],
            4242,
            13,
            None,
        )

        attach = wire.path(wire.DEBUG_ATTACH, pause_id=pause_id)
        for headers in ({}, {"Authorization": "Bearer wrong"}):  # on loopback too: the admin token
            with pytest.raises(WebSocketDenialResponse) as denied, debugging.websocket_connect(attach, headers=headers):
                pass
            assert denied.value.status_code == 403 and "admin token" in denied.value.json()["error"]

        with debugging.websocket_connect(attach, headers=ADMIN) as client:
            # what the debugger wrote before the client came, and that it waits for a line
            assert received(client) == {wire.OUTPUT: "> /app/job.py(13)doubled()\n(Pdb) "}
            assert received(client) == {wire.READY: True}
            assert debugging.get(wire.DEBUG_PAUSES).json()[0]["holder"].startswith("ada@laptop from ")
            with debugging.websocket_connect(attach, headers=ADMIN) as second:  # one client at a time
                refused = received(second)[wire.REFUSED]
                assert f"pause {pause_id} is driven by ada@laptop" in refused
            say(client, **{wire.INPUT: "p x\n"})
            assert received(worker) == {wire.INPUT: "p x\n"}
            say(worker, **{wire.OUTPUT: "21\n(Pdb) "})
            assert received(client) == {wire.OUTPUT: "21\n(Pdb) "}
        # the client gone, the pause lasts, for the next one to attach (who sees what was written so far)
        assert debugging.get(wire.DEBUG_PAUSES).json()[0]["holder"] is None
        with debugging.websocket_connect(attach, headers=ADMIN) as client:
            assert received(client)[wire.OUTPUT].endswith("21\n(Pdb) ")
            say(worker, **{wire.ENDED: "continued"})
            assert received(client) == {wire.ENDED: "continued"}

    assert debugging.get(wire.DEBUG_PAUSES).json() == []
    [ended] = debugging.get(wire.DEBUG_PAUSES, params={"all": "true", "session": SESSION}).json()
    assert (ended["pause_id"], ended["ended"], ended["attaches"]) == (pause_id, "continued", 2)
    whole = debugging.get(wire.path(wire.DEBUG_PAUSE, pause_id=pause_id)).json()
    assert whole["stack"][1] == {
        "file": "/app/job.py",
        "line": 19,
        "function": "task",
        "locals": {"y": "20", "x": "21"},
    }
    assert [a["client"] for a in whole["attaches"]] == ["ada@laptop", "ada@laptop"]
    assert all(a["detached_ns"] >= a["attached_ns"] for a in whole["attaches"]) and whole["live"] is False


def test_a_dap_client_s_bytes_are_tunnelled_to_the_worker_and_back(debugging: TestClient) -> None:
    """`raysight debug attach --dap`: the worker is told a DAP client came (and went), and the bytes of both sides
    travel as binary messages, untouched; text messages stay the debugger's."""
    with debugging.websocket_connect(wire.DEBUG_PAUSED) as worker:
        worker.send_bytes(pause_report())
        pause_id = received(worker)[wire.PAUSE_ID]
        attach = wire.path(wire.DEBUG_ATTACH, pause_id=pause_id) + "?dap=true"
        with debugging.websocket_connect(attach, headers=ADMIN) as client:
            assert received(client) == {wire.OUTPUT: ""}
            assert received(worker) == {wire.DAP: wire.DAP_OPEN}
            request = b'Content-Length: 39\r\n\r\n{"seq":1,"type":"request","command":"x"}'
            client.send_bytes(request)
            assert worker.receive_bytes() == request
            worker.send_bytes(b"Content-Length: 2\r\n\r\n{}")
            assert client.receive_bytes() == b"Content-Length: 2\r\n\r\n{}"
        assert received(worker) == {wire.DAP: wire.DAP_CLOSED}  # the client went: debugpy will resume
        with debugging.websocket_connect(wire.path(wire.DEBUG_ATTACH, pause_id=pause_id), headers=ADMIN) as client:
            client.send_bytes(b"not a DAP client's")  # a terminal's bytes go nowhere
            say(client, **{wire.INPUT: "c\n"})
            assert received(client) == {wire.OUTPUT: ""}
            assert received(worker) == {wire.INPUT: "c\n"}


def test_a_pauses_locals_need_the_admin_token_beyond_loopback(tmp_path: Path) -> None:
    """The values of the program's variables may be its secrets: the read token reads where a pause is, not them."""
    secrets = Secrets(token="read-secret", ingest_key="write-secret", admin_token="debug-secret")
    settings = Settings(tmp_path / "data").replace(
        secrets=secrets, reaches=Reaches(debug=True, reach_token="debug-secret"), fold_linger_s=0, fold_rest=0
    )
    with (
        TestClient(create_app(settings)) as client,
        client.websocket_connect(wire.DEBUG_PAUSED + "?key=write-secret") as worker,
    ):
        worker.send_bytes(pause_report())
        pause_id = received(worker)[wire.PAUSE_ID]
        path = wire.path(wire.DEBUG_PAUSE, pause_id=pause_id)
        read = client.get(path, headers={"Authorization": "Bearer read-secret"}).json()
        assert read["locals_hidden"] and [f["locals"] for f in read["stack"]] == [{}, {}]
        assert read["stack"][0]["function"] == "doubled"  # (where it is, for the read token)
        whole = client.get(path, headers=ADMIN).json()
        assert whole["stack"][0]["locals"] == {"x": "21", "twice": "42"} and "locals_hidden" not in whole


def test_the_client_shows_no_terminal_control_and_forwards_no_request_from_the_workers_side() -> None:
    """A pause's worker side is whoever holds the ingest key: its text reaches a terminal without escapes, and a DAP
    reverse request (runInTerminal runs a command where the client is) never reaches the DAP client."""
    assert printable("21\x1b[2J\x07\n\t(Pdb) \r") == "21[2J\n\t(Pdb) "
    messages = [{"type": "response", "seq": 1}, {"type": "request", "command": "runInTerminal"}, {"type": "event"}]
    stream = b"".join(b"Content-Length: %d\r\n\r\n%s" % (len(orjson.dumps(m)), orjson.dumps(m)) for m in messages)
    frames = DapFrames()
    seen = [kind for i in range(0, len(stream), 7) for _, kind in frames.feed(stream[i : i + 7])]  # (in pieces)
    assert seen == ["response", "request", "event"]


def test_the_data_dirs_admin_token_is_sent_to_a_server_on_loopback_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAYSIGHT_ADMIN_TOKEN", raising=False)
    monkeypatch.setenv("RAYSIGHT_DATA", str(tmp_path))
    (tmp_path / SECRETS_FILE).write_bytes(orjson.dumps({"admin_token": "local-admin"}))
    assert admin_token_for("ws://127.0.0.1:8271/api/raysight/debug/pauses/x/attach") == "local-admin"
    assert admin_token_for("ws://head.example:8271/api/raysight/debug/pauses/x/attach") is None
    monkeypatch.setenv("RAYSIGHT_ADMIN_TOKEN", "given")
    assert admin_token_for("wss://head.example:8271/api/raysight/debug/pauses/x/attach") == "given"


def test_a_worker_that_goes_away_ends_its_pause(debugging: TestClient) -> None:
    with debugging.websocket_connect(wire.DEBUG_PAUSED) as worker:
        worker.send_bytes(pause_report())
        pause_id = received(worker)[wire.PAUSE_ID]
    deadline = time.monotonic() + 10
    while (pause := debugging.get(wire.path(wire.DEBUG_PAUSE, pause_id=pause_id)).json())["ended"] is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert pause["ended"] == "worker gone" and debugging.get(wire.DEBUG_PAUSES).json() == []
    with debugging.websocket_connect(wire.path(wire.DEBUG_ATTACH, pause_id=pause_id), headers=ADMIN) as client:
        assert f"no live pause '{pause_id}'" in received(client)[wire.REFUSED]


def test_the_workers_rays_own_debugger_holds_paused_are_listed_while_the_poller_finds_them(
    debugging: TestClient,
) -> None:
    """Ray's debugger (RAY_DEBUG=1) pauses a worker on its node's debugpy port, which Ray's workers list shows
    (``num_paused_threads``, ``debugger_port``): the poller's rows of them are listed beside raysight's pauses, for as
    long as the last poll has them, and not once the session is polled no more."""
    worker = {"worker_id": "ab" * 28, "pid": 4343, "ip": "10.0.0.8", "node_id": "cd" * 28, "debugger_port": 45678,
              "num_paused_threads": 1, "worker_type": "WORKER", "is_alive": True}  # fmt: skip

    def poll(rows: list[dict[str, Any]]) -> int:
        body = {"session": SESSION, "polled_ns": time.time_ns(), "errors": {},
                "resources": {"paused_workers": rows}}  # fmt: skip
        assert debugging.post(wire.AGENT_RAY_STATE, content=orjson.dumps(body), headers=JSON).status_code == 200
        return int(body["polled_ns"])

    poll([worker])
    [paused] = debugging.get(wire.DEBUG_PAUSES).json()
    assert (paused["kind"], paused["pid"], paused["worker_id"]) == ("ray", 4343, worker["worker_id"])
    assert paused["debugger"] == "10.0.0.8:45678" and paused["pause_id"] is None
    poll([])  # resumed: the next poll has it no more
    assert debugging.get(wire.DEBUG_PAUSES).json() == []
    stale = poll([worker]) + pauses_query.RAY_STALE_NS
    cursor = debugging.app.state.raysight.store.reader()
    try:  # the session polled no more (its cluster gone), its last poll's paused workers are not listed
        assert len(pauses_query.ray_paused(cursor, None, stale)) == 1
        assert pauses_query.ray_paused(cursor, None, stale + 1) == []
    finally:
        cursor.close()


def test_the_pauses_a_stopped_server_left_open_are_over_once_the_store_opens_again(tmp_path: Path) -> None:
    store = Store(tmp_path / "data")
    try:
        store.write(lambda tx: apply.paused(tx, "0123abcd", parse_pause(pause_report())))
        store.write(lambda tx: apply.attached(tx, "0123abcd", SESSION, "ada@laptop", "127.0.0.1:1", 5))
    finally:
        store.close()
    store = Store(tmp_path / "data")
    try:
        cursor = store.reader()
        whole = pauses_query.pause(cursor, "0123abcd")
        assert whole["ended"] == "server stopped" and whole["ended_ns"] >= whole["paused_ns"]
        assert whole["attaches"][0]["detached_ns"] == whole["ended_ns"]
        cursor.close()
    finally:
        store.close()


@pytest.mark.parametrize(
    ("report", "why"),
    [
        (b"not json", "not JSON"),
        (pause_report(kind="teleport"), "kind must be one of"),
        (pause_report(session="../etc"), "session must be"),
        (pause_report(stack=[]), "stack must be a list of 1 to 64"),
        (pause_report(task_id="not hex!"), "task_id must be a Ray ID"),
        (pause_report(stack=[{"file": "a", "line": 1, "function": "f", "locals": {"x": "y" * 1001}}]), "a local's"),
    ],
)
def test_a_bad_pause_report_is_refused_saying_why(debugging: TestClient, report: bytes, why: str) -> None:
    with debugging.websocket_connect(wire.DEBUG_PAUSED) as worker:
        worker.send_bytes(report)
        assert why in received(worker)[wire.REFUSED]
    assert debugging.get(wire.DEBUG_PAUSES, params={"all": "true", "session": SESSION}).status_code == 404


def test_env_post_mortem_exports_rays_switch_and_the_freezes_timeout() -> None:
    exports = raysight_cli("env", "--post-mortem", "90s").stdout.splitlines()
    assert {"export RAY_DEBUG_POST_MORTEM='1'", "export RAYSIGHT_POST_MORTEM_TIMEOUT='90'"} <= set(exports)
    assert "export RAYSIGHT_POST_MORTEM_TIMEOUT='600'" in raysight_cli("env", "--post-mortem").stdout.splitlines()
    assert not any("POST_MORTEM" in line for line in raysight_cli("env").stdout.splitlines())
    refused = raysight_cli("env", "--post-mortem", "soon")
    assert refused.returncode == 2 and "'soon' is not a duration" in refused.stderr


# ── real pauses: a job `raysight run` traces, driven as a user drives it ─────────────────────────────────────────────


def listed(server: ServerProcess) -> list[dict[str, Any]]:
    """The live pauses, as `raysight debug --format json` lists them."""
    done = raysight_cli("debug", "--server", server.url, "--format", "json")
    assert done.returncode == 0, done.stderr
    pauses: list[dict[str, Any]] = orjson.loads(done.stdout)
    return pauses


def wait_for_pause(server: ServerProcess, function_line: str, deadline_s: float = 120) -> dict[str, Any]:
    """The one live pause of raysight's, once there is one."""
    deadline = time.monotonic() + deadline_s
    while True:
        if pauses := [p for p in listed(server) if p["kind"] != "ray"]:
            [pause] = pauses
            assert f"{pause['function']}:{pause['line']}" == function_line
            return dict(pause)
        assert time.monotonic() < deadline, "no pause listed"
        time.sleep(0.5)


def attach(server: ServerProcess, pause_id: str, commands: str, token: str | None) -> subprocess.CompletedProcess[str]:
    """`raysight debug attach ID` fed ``commands`` on stdin, as a script would."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYSIGHT_")}
    env |= {"RAYSIGHT_ADMIN_TOKEN": token} if token else {"RAYSIGHT_DATA": "/nonexistent"}
    return subprocess.run(
        [sys.executable, "-m", "raysight", "debug", "attach", pause_id, "--server", server.url],
        input=commands,
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )


def drive_with_dap(server: ServerProcess, pause_id: str, token: str) -> None:
    """`raysight debug attach ID --dap`, and a DAP client on its port doing what VS Code does: initialize, attach,
    configurationDone; then, stopped, threads, stackTrace, scopes, variables, next (stopped again), continue,
    disconnect."""
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAYSIGHT_")}, "RAYSIGHT_ADMIN_TOKEN": token}
    command = ["debug", "attach", pause_id, "--dap", "--port", str(port), "--server", server.url]
    cli = subprocess.Popen([sys.executable, "-m", "raysight", *command], env=env, stderr=subprocess.PIPE, text=True)
    try:
        dap = DapClient(port)
        dap.request("initialize", adapterID="debugpy", clientID="raysight-test", linesStartAt1=True)
        dap.send("attach", justMyCode=False)
        dap.event("initialized")
        dap.request("configurationDone")
        thread = dap.event("stopped")["body"]["threadId"]
        assert thread in [t["id"] for t in dap.request("threads")["threads"]]
        [top, caller, *_] = dap.request("stackTrace", threadId=thread)["stackFrames"]
        assert (top["name"], Path(top["source"]["path"]).name, caller["name"]) == ("doubled", PROGRAM.name, "task")
        scopes = dap.request("scopes", frameId=top["id"])["scopes"]
        reference = next(s["variablesReference"] for s in scopes if s["name"] == "Locals")
        values = {v["name"]: v["value"] for v in dap.request("variables", variablesReference=reference)["variables"]}
        assert (values["x"], values["twice"]) == ("31", "62"), values
        dap.request("next", threadId=thread)  # a step: past the frame's return, into its caller's
        assert dap.event("stopped")["body"]["reason"] == "step"
        [stepped, *_] = dap.request("stackTrace", threadId=thread)["stackFrames"]
        assert (stepped["name"], stepped["line"]) != (top["name"], top["line"]), stepped
        dap.request("continue", threadId=thread)
        dap.request("disconnect")
        dap.close()
        assert cli.wait(timeout=60) == 0  # the DAP client gone, it detached (the pause's end: the history's)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()


def listening_beyond_loopback(pid: int) -> list[tuple[int, int]]:
    """The sockets of ``pid``'s process tree that listen on an address other than loopback: (pid, port) each."""
    found = []
    tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    for process in tree:
        for conn in process.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN and not ip_address(conn.laddr.ip).is_loopback:
                found.append((process.pid, conn.laddr.port))
    return found


def debugpy_listening() -> list[str]:
    """The ports debugpy's processes (its adapters) listen on, on any address."""
    adapters = {p.pid for p in psutil.process_iter(["cmdline"]) if "debugpy" in " ".join(p.info["cmdline"] or [])}
    return [f"{c.pid} {c.laddr}" for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN
            and c.pid in adapters]  # fmt: skip


def core_worker_port(session: str, pid: int) -> int:
    """The port of Ray's own RPC server in worker ``pid`` (every worker has one, on every address), as its log says."""
    [log] = (ray_temp_dir(os.environ) / session / "logs").glob(f"python-core-worker-*_{pid}.log")
    [port] = re.findall(r"worker server started, listening on port (\d+)", log.read_text())
    return int(port)


@pytest.mark.ray
def test_breakpoints_in_a_task_an_actor_and_an_async_actor_are_driven_through_the_server(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "data", options=["--allow-debug"]) as server:
        token = orjson.loads((tmp_path / "data" / SECRETS_FILE).read_bytes())["admin_token"]
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAYSIGHT_SERVER")}
        env["RELEASE"] = str(release := tmp_path / "release")
        job = subprocess.Popen(
            [sys.executable, "-m", "raysight", "run", "--server", server.url, "--cluster", "dbg",
             "--post-mortem", f"{POST_MORTEM_S}s", "--", sys.executable, "-m", "tests.ray_programs.breakpoints"],
            cwd=Path(__file__).parent.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
        try:
            # the task: `p x` in doubled, `where`, `up` to the task's frame, `p y` there, then continue
            pause = wait_for_pause(server, f"doubled:{BREAKPOINT}")
            assert pause["task_id"] and pause["actor_id"] is None and pause["kind"] == "breakpoint"
            # the pause opened no port: beyond loopback, the paused worker's process tree listens on Ray's own alone
            rays_own = (pause["pid"], core_worker_port(pause["session"], pause["pid"]))
            assert listening_beyond_loopback(pause["pid"]) == [rays_own]
            refused = attach(server, pause["pause_id"], "p x\n", token=None)
            assert refused.returncode == 1 and "admin token" in refused.stderr
            table = raysight_cli("debug", "--server", server.url)  # as a user reads it
            assert pause["pause_id"] in table.stdout and f"doubled {PROGRAM.name}:{BREAKPOINT}" in table.stdout
            assert "attach with `raysight debug attach PAUSE_ID`" in table.stderr
            shown = raysight_cli("debug", "show", pause["pause_id"], "--server", server.url)
            assert "    twice = 42" in shown.stdout and "    y = 20" in shown.stdout, shown.stdout
            driven = attach(server, pause["pause_id"], "p x\nwhere\nup\np y\nc\n", token)
            assert driven.returncode == 0, driven.stderr
            lines = driven.stdout.splitlines()
            assert "(Pdb) 21" in lines and "(Pdb) 20" in lines, driven.stdout  # x in doubled, then y in task
            assert any(line.endswith("task()") for line in lines) and "the pause ended (continued)" in driven.stderr

            # the actor's method, then the async actor's: their x is y + 10 and y + 100
            for x, y, actor in ((11, 1, "Counter"), (102, 2, "AsyncCounter")):
                pause = wait_for_pause(server, f"doubled:{BREAKPOINT}")
                assert pause["actor_id"], f"{actor}'s pause names no actor"
                driven = attach(server, pause["pause_id"], "p x\nup\np y\nc\n", token)
                assert f"(Pdb) {x}" in driven.stdout and f"(Pdb) {y}" in driven.stdout, driven.stdout

            # a DAP client (VS Code's side) through `attach --dap`: stopped in the paused frame, its locals, continued
            pause = wait_for_pause(server, f"doubled:{BREAKPOINT}")
            drive_with_dap(server, pause["pause_id"], token)
            assert debugpy_listening() == []  # (its adapter dialled out, to a listener closed once it came)

            # post mortem: frozen on the failing frame, its locals there; quit, then left to time out
            pause = wait_for_pause(server, f"divide:{FAILING}")
            assert pause["kind"] == "post_mortem" and pause["exception"] == "ZeroDivisionError: division by zero"
            driven = attach(server, pause["pause_id"], "p share, parts\nq\n", token)
            assert "(Pdb) (21, 0)" in driven.stdout and "the pause ended (quit)" in driven.stderr, driven.stdout
            timed_out = wait_for_pause(server, f"divide:{FAILING}")

            # Ray's own debugger's pause (debugpy, listening on its node), listed beside raysight's from the poller
            deadline = time.monotonic() + POST_MORTEM_S + 60
            while not (rays := [p for p in listed(server) if p["kind"] == "ray"]):
                assert time.monotonic() < deadline, "Ray's own pause was not listed"
                time.sleep(0.5)
            [rays_pause] = rays
            ip, port = rays_pause["debugger"].rsplit(":", 1)
            assert ip == rays_pause["host"] and rays_pause["pause_id"] is None  # (raysight cannot drive it)
            listening = {c.laddr.port for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
            assert int(port) in listening  # (by debugpy's adapter, a process of its own)
            release.touch()
            out, err = job.communicate(timeout=60)
            assert job.returncode == 0, err[-3000:]
        finally:
            if job.poll() is None:  # Ctrl-C, as a user stops it: the driver shuts its Ray down
                os.killpg(job.pid, signal.SIGINT)
                job.wait(timeout=60)
        # each task returned what it would have without the pause, and each failing one failed with its own error
        failed = "divide failed ZeroDivisionError division by zero"
        results = ["task 42", "actor 22", "async actor 204", "dap task 62"]
        assert out.splitlines() == [*results, failed, failed, "released True"]
        history = orjson.loads(raysight_cli("debug", "history", "--server", server.url, "--format", "json").stdout)
        ends = [("doubled", "continued", 1)] * 4 + [("divide", "quit", 1), ("divide", "timed out", 0)]
        assert [(p["function"], p["ended"], p["attaches"]) for p in history] == ends
        assert history[-1]["pause_id"] == timed_out["pause_id"]
        table = raysight_cli("debug", "history", "--server", server.url).stdout
        assert [line.split()[0] for line in table.splitlines()[1:]] == [p["pause_id"] for p in history]
        assert "timed out" in table.splitlines()[-1] and "ENDED" in table.splitlines()[0]
        assert history[-1]["ended_ns"] - history[-1]["paused_ns"] >= POST_MORTEM_S * 1e9
