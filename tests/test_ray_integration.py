"""Real Ray workloads recorded through `raysight run` by a real server; each scenario runs once per module."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from raysight.cli.run import ray_env
from raysight.client import Client
from raysight.config import USER_AGENT
from tests.ray_scenarios import ServerProcess, assert_nothing_alive_without_a_reason

pytestmark = pytest.mark.ray


def test_demo_shows_what_raysight_saw_and_stops(demo: tuple[Path, int, str]) -> None:
    data_dir, port, out = demo
    lines = out.splitlines()
    heading = next(line for line in lines if line.startswith("Session session_"))
    assert heading.endswith("failed") and "(demo)" in heading
    for title in ("Tasks by function", "Failed attempts", "Actors", "States raysight inferred (Ray never sent them)"):
        assert title in lines
    failed = lines[lines.index("Failed attempts") + 1 : lines.index("Actors")]
    assert any(" fails " in f" {line} " and "TASK_EXECUTION_EXCEPTION" in line for line in failed)
    causes = lines[lines.index("What went wrong, by cause") + 1 : lines.index("What went wrong, by cause") + 8]
    assert any(
        "TASK_EXECUTION_EXCEPTION" in line and "ValueError: boom: this task fails on purpose" in line for line in causes
    )
    assert f"Server: stops with the demo (--exit)   data: {data_dir}" in lines
    try_ = lines.index(
        f"Try:  raysight server --data-dir {data_dir} --port {port}   (serves it again; then, in another shell:)"
    )
    assert lines[try_ + 1 : try_ + 4] == [  # what works once the demo's server is gone
        f"      raysight list tasks --server http://127.0.0.1:{port} --filter state=FAILED",
        f"      ray list actors --address http://127.0.0.1:{port}",
        f"      raysight errors --server http://127.0.0.1:{port}   (then: raysight errors show ID)",
    ]
    assert "Serving until Ctrl-C." not in lines  # --exit: the demo's server is gone
    with Client(f"http://127.0.0.1:{port}", timeout=2) as client:
        assert not client.ping()


def everything(client: Client, session: str) -> dict[str, list[dict[str, Any]]]:
    return {
        r: client.list(r, session=session, limit=None, detail=True)["rows"]
        for r in ("tasks", "actors", "jobs", "nodes", "workers")
    }


def tasks_by_name(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        out[row["name"]].append(row)
    for attempts in out.values():
        attempts.sort(key=lambda r: r["attempt_number"])
    return out


def check_workload(data: dict[str, list[dict[str, Any]]]) -> None:
    tasks = tasks_by_name(data["tasks"])
    fails = tasks["fails"][0]
    assert (fails["state"], fails["error_type"]) == ("FAILED", "TASK_EXECUTION_EXCEPTION")
    assert "boom: this task fails on purpose" in fails["error_message"]
    assert [e["state"] for e in fails["events"]][-1] == "FAILED"
    crash = tasks["crash_once"]
    assert [(t["attempt_number"], t["state"]) for t in crash] == [(0, "FAILED"), (1, "FINISHED")]
    assert crash[0]["error_type"] == "WORKER_DIED"
    parent = tasks["parent"][0]
    assert parent["state"] == "FINISHED" and len(tasks["child"]) == 3
    assert {c["parent_task_id"] for c in tasks["child"]} == {parent["task_id"]}
    for task in data["tasks"]:  # nothing of the finished job is left open without a reason
        assert task["state"] in ("FINISHED", "FAILED"), task
        if task["reported_state"] not in ("FINISHED", "FAILED"):
            assert task["state_inferred"] and task["inferred_reason"], task
    inc = tasks["Counter.inc"]
    assert len(inc) == 3 and all(t["actor_id"] and t["worker_pid"] for t in inc)
    actors = {a["class_name"]: a for a in data["actors"]}
    counter = actors["Counter"]
    assert (counter["name"], counter["state"]) == ("demo_counter", "DEAD")
    assert counter["death_cause"]["actorDiedErrorContext"]["reason"] == "RAY_KILL"
    fragile = actors["Fragile"]
    assert fragile["num_restarts"] == 1
    assert [e["state"] for e in fragile["events"]].count("ALIVE") == 2
    job = data["jobs"][0]
    assert (job["type"], job["status"], job["driver_exit_code"]) == ("DRIVER", "SUCCEEDED", 0)
    assert "demo_workload" in job["entrypoint"]
    node = data["nodes"][0]
    assert node["is_head_node"] and node["resources_total"]["CPU"] == 2.0
    assert_nothing_alive_without_a_reason(data)  # the driver exited and its local cluster with it
    dead = [w for w in data["workers"] if not w["is_alive"]]
    assert "SYSTEM_ERROR" in {w["exit_type"] for w in dead}  # the crashed task's and the crashed actor's workers
    assert "INTENDED_SYSTEM_EXIT" in {w["exit_type"] for w in dead}  # ray.kill


def test_every_entity_field_by_field(recorded: ServerProcess) -> None:
    with recorded.client() as client:
        for session in ("demo", "second"):
            check_workload(everything(client, session))


def test_doctor_shows_what_rays_aggregator_reported_to_raysight_run(recorded: ServerProcess) -> None:
    with recorded.client() as client:
        reported = {r["label"]: r for r in client.doctor()["ray_reported"]}
    for label in ("demo", "second"):
        scraped = reported[label]
        assert scraped["agents"] == 1 and scraped["published"] > 0 and scraped["received"] >= scraped["published"]
        assert scraped["dropped"] == {} and scraped["publish_failures"] == 0


def test_two_sessions_with_the_same_ids_stay_apart(recorded: ServerProcess) -> None:
    with recorded.client() as client:
        sessions = client.sessions()
        assert [s["label"] for s in sessions] == ["second", "demo"]
        first, second = everything(client, "demo"), everything(client, "second")

        def ids(rows: list[dict[str, Any]]) -> set[str]:
            return {r["task_id"] for r in rows}

        assert ids(first["tasks"]) & ids(second["tasks"])  # Ray reuses task IDs across sessions
        assert {t["session"] for t in first["tasks"]} != {t["session"] for t in second["tasks"]}
        assert client.list("tasks", session="*", limit=None)["total"] == len(first["tasks"]) + len(second["tasks"])


def test_rays_own_cli_and_sdk_answer_from_raysight(recorded: ServerProcess) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "list",
            "actors",
            "--address",
            recorded.url,
            "--format",
            "json",
            "--filter",
            "state=DEAD",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    rows = json.loads(out)
    assert {r["class_name"] for r in rows} >= {"Counter"}
    from ray.util.state import get_task, list_tasks, summarize_tasks

    failed = list_tasks(address=recorded.url, filters=[("state", "=", "FAILED")], detail=True)
    assert {t.name for t in failed} >= {"fails", "crash_once"}
    attempts = get_task(failed[0].task_id, address=recorded.url)
    assert attempts is not None
    summary = summarize_tasks(address=recorded.url)
    assert "fails" in summary["cluster"]["summary"]


def test_an_older_session_by_its_path_answers_rays_cli(recorded: ServerProcess) -> None:
    """`ray list tasks --address URL/sessions/demo` (in this process: click's runner): the first session's tasks,
    not the latest's, though Ray gave both the same task IDs (told apart by their start, as Ray's CLI prints it)."""
    from click.testing import CliRunner
    from ray.scripts.scripts import cli

    def ray_listed(address: str) -> set[tuple[str, int, str | None]]:
        args = ["list", "tasks", "--address", address, "--format", "json", "--detail", "--limit", "10000"]
        done = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert done.exit_code == 0, done.output[-3000:]
        return {(t["task_id"], t["attempt_number"], t["start_time_ms"]) for t in json.loads(done.stdout)}

    def as_ray_prints(ms: int | None) -> str | None:
        return None if ms is None else str(datetime.fromtimestamp(ms / 1000))

    with recorded.client() as client:
        own = {
            session: {
                (t["task_id"], t["attempt_number"], as_ray_prints(t["start_time_ms"]))
                for t in everything(client, session)["tasks"]
                if t["type"] != "DRIVER_TASK"  # (Ray's CLI leaves the drivers' out)
            }
            for session in ("demo", "second")
        }
    assert ray_listed(f"{recorded.url}/sessions/demo") == own["demo"] != own["second"]
    assert ray_listed(recorded.url) == own["second"]  # the latest, when no session is named


def test_same_answers_after_restart_and_reindex(recorded: ServerProcess) -> None:
    with recorded.client() as client:
        before, lines = everything(client, "demo"), client.logs(session="demo", limit=100_000, markers=True)
    assert lines["total"] > 0
    recorded.stop()
    recorded.start()
    with recorded.client() as client:
        assert everything(client, "demo") == before
        assert client.logs(session="demo", limit=100_000, markers=True) == lines
        assert client.reindex() > 0
        assert everything(client, "demo") == before
        assert client.logs(session="demo", limit=100_000, markers=True) == lines


def _logs(server: ServerProcess, *args: str) -> list[str]:
    """`raysight logs … --session second` as a user runs it: its lines."""
    done = subprocess.run(
        [sys.executable, "-m", "raysight", "logs", "--server", server.url, "--session", "second", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_what_each_task_attempt_and_actor_call_printed_is_found_by_raysight_logs(recorded: ServerProcess) -> None:
    with recorded.client() as client:
        tasks = client.list("tasks", session="second", limit=None, detail=True)["rows"]
        counter = client.list("actors", session="second", filters=["class_name=Counter"])["rows"][0]
    by_name = defaultdict(list)
    for task in tasks:
        by_name[task["name"]].append(task)
    printed_by = {}
    for child in by_name["child"]:  # nested: submitted by `parent`
        lines = _logs(recorded, "--task", child["task_id"])
        assert len(lines) == 1 and re.fullmatch(r"\(child pid=\d+\) child [012]", lines[0]), lines
        printed_by[lines[0].rsplit(" ", 1)[1]] = child["task_id"]
    assert sorted(printed_by) == ["0", "1", "2"]
    crash = by_name["crash_once"][0]["task_id"]  # each attempt its own lines; the first one's worker died
    assert [line.split(") ", 1)[1] for line in _logs(recorded, "--task", crash, "--attempt", "0")] == [
        "crash_once: first attempt, exiting"
    ]
    assert [line.split(") ", 1)[1] for line in _logs(recorded, "--task", crash, "--attempt", "1")] == [
        "crash_once: retry"
    ]
    calls = sorted(_logs(recorded, "--task", inc["task_id"])[0] for inc in by_name["Counter.inc"])
    assert [line.split(") ", 1)[1] for line in calls] == ["count 1", "count 2", "count 3"]
    assert all(line.startswith("(Counter pid=") for line in calls)
    actor = [line.split(") ", 1)[1] for line in _logs(recorded, "--actor", counter["actor_id"])]
    assert actor == ["count 1", "count 2", "count 3"]
    raylet = _logs(recorded, "--file", "raylet.out", "--stream", "system", "--tail", "3")
    assert len(raylet) == 3 and all(line.startswith("[raylet.out] [20") for line in raylet)  # Ray's own components
    marked = [line.split(") ", 1)[1] for line in _logs(recorded, "--actor", counter["actor_id"], "--markers")]
    assert {":job_id:01000000", ":actor_name:Counter"} <= set(marked)  # in its stdout and its stderr
    assert [line for line in marked if not line.startswith(":")] == actor
    (found,) = _logs(recorded, "--grep", "child 2", "--format", "json")
    line = json.loads(found)
    assert (line["task_name"], line["stream"], line["job_id"]) == ("child", "stdout", by_name["child"][0]["job_id"])
    assert (line["task_id"], line["attempt"]) == (printed_by["2"], 0)  # every line names its task attempt
    fails = by_name["fails"][0]
    (failed,) = [json.loads(x) for x in _logs(recorded, "--task", fails["task_id"], "--format", "json")]
    ranged = fails["task_log_info"] and fails["task_log_info"]["stderr_start"] is not None  # Ray sends it, or not
    assert (failed["text"], failed["stream"]) == ("fails: about to raise", "stderr")
    assert failed["attribution"] == ("exact" if ranged else "inferred")
    assert _logs(recorded, "--stream", "stderr", "--grep", "about to raise", "--tail", "5") == [
        f"(fails pid={failed['pid']}, task_id={failed['task_id']}) fails: about to raise"
    ]
    (retried,) = _logs(recorded, "--grep", "crash_once: retry")
    assert re.fullmatch(rf"\(crash_once pid=\d+, task_id={crash}, attempt=1\) crash_once: retry", retried), retried
    with recorded.client() as client:  # each line names the attempt whose lines it is among, as a task's query finds
        named = {(r["task_id"], r["attempt"]) for r in client.logs(session="second", limit=100_000)["rows"]}
        for task in (t for t in tasks if t["type"] != "DRIVER_TASK"):
            for row in client.logs(session="second", task=task["task_id"], attempt=task["attempt_number"])["rows"]:
                assert (row["task_id"], row["attempt"]) in named, (task["name"], row["text"])
    tail = _logs(recorded, "--regex", "^count [0-9]$", "--tail", "2")
    assert [line.split(") ", 1)[1] for line in tail] == ["count 2", "count 3"]
    incs = {inc["task_id"] for inc in by_name["Counter.inc"]}  # each line names the actor call that printed it
    named = [re.match(r"\(Counter pid=\d+, task_id=([0-9a-f]{48})\) ", line) for line in tail]
    assert all(m and m[1] in incs for m in named), (tail, incs)


def test_the_lines_rays_dashboard_logs_of_raysights_own_requests_are_shown_only_when_asked(
    recorded: ServerProcess,
) -> None:
    own = f"'{USER_AGENT}'"  # the User-Agent of raysight's poller, last on each line of Ray's access log
    assert not [line for line in _logs(recorded, "--file", "dashboard.log") if line.endswith(own)]
    shown = [line for line in _logs(recorded, "--file", "dashboard.log", "--include-own") if line.endswith(own)]
    assert shown and all(" 'GET /api/" in line for line in shown), shown


def test_rays_aggregator_delivers_what_it_buffered_while_the_server_was_down(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "store")
    script = tmp_path / "waits.py"
    go, done = tmp_path / "go", tmp_path / "done"
    ray_temp = Path(tempfile.mkdtemp(prefix="ray-"))  # short: Ray's socket paths live under it
    script.write_text(
        "import os, time, ray\n"
        f"ray.init(num_cpus=2, _temp_dir={str(ray_temp)!r})\n"
        "@ray.remote\n"
        "def square(x):\n    return x * x\n"
        "assert sum(ray.get([square.remote(i) for i in range(20)])) == 2470\n"
        f"open({str(done)!r}, 'w').close()\n"
        "deadline = time.monotonic() + 180\n"
        f"while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:\n    time.sleep(0.2)\n"
        "ray.shutdown()\n"
    )
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, **ray_env(server.url, "late")}
    proc = subprocess.Popen(
        [sys.executable, str(script)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 120
        while not done.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "workload did not run"
            time.sleep(0.2)
        wait_for_log(ray_temp, "dashboard_agent.log", "Failed to send events to external service", proc)
        server.start()
        with server.client() as client:  # what the aggregator buffered arrives while the cluster still runs
            deadline = time.monotonic() + 60
            while (squares := client.list("tasks", session="*", filters=["name=square", "state=FINISHED"]))[
                "total"
            ] < 20:
                assert time.monotonic() < deadline, f"{squares['total']} of 20 squares arrived in 60 s"
                time.sleep(0.5)
        go.touch()
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()
        shutil.rmtree(ray_temp, ignore_errors=True)


def wait_for_log(ray_temp: Path, name: str, text: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    """Wait until a log of the Ray cluster under ``ray_temp`` says ``text`` (while ``proc``, its driver, runs)."""
    deadline = time.monotonic() + timeout_s
    while not any(text in log.read_text(errors="replace") for log in ray_temp.glob(f"session_*/logs/{name}")):
        assert proc.poll() is None and time.monotonic() < deadline, f"{name} never said {text!r}"
        time.sleep(0.2)


def test_errors_of_a_real_run_each_lead_to_their_traceback_and_lines(recorded: ServerProcess) -> None:
    """The demo's failures, as `raysight errors` and `raysight errors show` print them, read after the cluster is gone
    by a server other than the one that recorded them (`raysight demo`'s)."""
    cli = [sys.executable, "-m", "raysight"]
    shown = subprocess.run(
        [*cli, "errors", "--server", recorded.url, "--session", "demo", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    every = json.loads(shown.stdout)["groups"]
    found = {g["kind"] + " " + g["error_type"]: g for g in every}
    raised = found["task TASK_EXECUTION_EXCEPTION"]
    assert (raised["error"], raised["affected"]) == ("ValueError: boom: this task fails on purpose", ["fails"])
    assert found["actor ACTOR_DIED"]["affected"] == ["Counter"]  # ray.kill
    # a normal end is none: Fragile dying with its driver (its worker then stopped by a SIGTERM, which Ray may report
    # as a SYSTEM_ERROR), idle workers reaped, the cluster shut down
    assert [g["affected"] for g in every if g["kind"] == "actor"] == [["Counter"]]  # Fragile's end with its driver
    # is none; a task that failed with its crashed actor may, by Ray's timing, be a cause of its own
    assert {g["kind"] for g in every} <= {"task", "actor", "worker"}
    # crash_once's and Fragile's os._exit(1): one group or two (Ray words a worker's exit as its timing has it)
    crashes = [g for g in every if g["kind"] == "worker"]
    assert sum(g["count"] for g in crashes) == 2 and sum(g["consequences"].get("tasks", 0) for g in crashes) >= 2
    task_id = raised["example"]["id"]
    show = [*cli, "errors", "show", task_id, "--server", recorded.url, "--session", "demo"]
    text = subprocess.run(show, capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert f"Task fails (attempt 0): TASK_EXECUTION_EXCEPTION  [group {raised['group_id']}]" in lines
    assert '      raise ValueError("boom: this task fails on purpose")' in lines  # the remote traceback, whole
    printed = lines[lines.index("Its worker's last lines before it failed") + 1 :]
    assert printed and all(re.match(r"  \(", line) for line in printed[:1])  # its output, not Ray's own log of it
    assert any(re.fullmatch(r"  \(fails pid=\d+\) fails: about to raise", line) for line in lines)
    with recorded.client() as client:
        crash = next(t for t in client.list("tasks", session="demo", limit=None)["rows"] if t["name"] == "crash_once")
        detail = client.error(crash["task_id"], session="demo")
    (first,) = detail["failures"]
    assert (first["attempt"], first["error_type"], first["root_kind"]) == (0, "WORKER_DIED", "worker")
    assert [a["state"] for a in detail["attempts"]] == ["FAILED", "FINISHED"]
    assert [row["text"] for row in first["logs"]["own"]] == ["crash_once: first attempt, exiting"]
    killed = found["actor ACTOR_DIED"]["example"]["id"]
    with recorded.client() as client:
        (counter,) = client.error(killed, session="demo")["failures"]
    said = [(row["name"], row["text"]) for row in counter["logs"]["system"]]
    assert any(name == "raylet.out" and "KillLocalActor" in text and killed in text for name, text in said), said
    with recorded.client() as client:
        fragile = next(a for a in client.list("actors", session="demo")["rows"] if a["class_name"] == "Fragile")
    restarted = subprocess.run([*show[:5], fragile["actor_id"], *show[6:]], capture_output=True, text=True, timeout=60)
    assert restarted.returncode == 0, restarted.stderr
    assert "Actor Fragile: ACTOR_RESTARTED  [group " in restarted.stdout
    assert "  restarting (ACTOR_FAILURE)" in restarted.stdout.splitlines()  # its worker's crash, then a new worker
    assert re.search(r"^  Followed from the failure of worker [0-9a-f]{56}", restarted.stdout, re.MULTILINE)


def trace_events(trace: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """A Chrome trace's complete events in order, each with its lane's name in place of the trace's numbering; its
    times (µs) last."""
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace if e["name"] == "thread_name"}
    nodes = {e["pid"]: e["args"]["name"] for e in trace if e["name"] == "process_name"}
    return sorted(
        (
            nodes[e["pid"]],
            lanes[e["pid"], e["tid"]],
            e["cat"],
            e["name"],
            e["cname"],
            e["args"]["task_id"],
            e["args"]["attempt_number"],
            e["ts"],
            e["dur"],
        )
        for e in trace
        if e["ph"] == "X"
    )


def same_events(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> bool:
    """The same events, their times equal to a microsecond (Ray's pass through float milliseconds)."""
    a, b = trace_events(ours), trace_events(theirs)
    return len(a) == len(b) and all(
        x[:-2] == y[:-2] and abs(x[-2] - y[-2]) < 1 and abs(x[-1] - y[-1]) < 1 for x, y in zip(a, b)
    )


def test_timeline_writes_what_ray_timeline_writes(recorded: ServerProcess, tmp_path: Path) -> None:
    """`raysight timeline` beside Ray's own `ray timeline` code (its chrome_tracing_dump) over the same tasks, as
    Ray's state API reads them from raysight: the same events, in the same lanes."""
    from ray._private.profiling import chrome_tracing_dump
    from ray.util.state.api import StateApiClient
    from ray.util.state.common import ListApiOptions, StateResource

    out = tmp_path / "trace.json"
    cli = [sys.executable, "-m", "raysight", "timeline", "--server", recorded.url, "--session", "second"]
    done = subprocess.run([*cli, "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and f"Trace written to {out}" in done.stderr, done.stderr
    ours = json.loads(out.read_text())
    everything = ListApiOptions(detail=True, limit=10_000, exclude_driver=False)  # the driver's events too
    listed = StateApiClient(address=recorded.url).list(StateResource.TASKS, everything, raise_on_missing_output=True)
    theirs = json.loads(chrome_tracing_dump([t.__dict__ for t in listed]))
    assert same_events(ours, theirs) and len(trace_events(ours)) >= 16
    assert {e["args"]["func_or_class_name"] for e in ours if e["ph"] == "X"} >= {"parent", "child", "Counter.inc"}
    one_job = json.loads(subprocess.run([*cli, "--job", "01000000", "-o", "-"], capture_output=True, timeout=60).stdout)
    assert {e["args"]["job_id"] for e in one_job if e["ph"] == "X"} == {"01000000"}
    bad = subprocess.run([*cli, "--job", "nope"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "is no job ID" in bad.stderr
