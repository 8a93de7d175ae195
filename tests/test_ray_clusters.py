"""Real Ray beyond one local `ray.init()`: a `ray start` cluster set up as the README says (a node agent beside it),
with a driver started outside it, then killed whole; a two-node cluster that loses a node, hosts a driver without
raysight's variables, and whose own driver fails under `raysight run`; and a `ray start` cluster whose agents run as
Ray actors, joined by a second node. Each workload runs once for this module, one cluster at a time."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raysight.agent.scrape import ray_temp_dir
from raysight.agent.state_poll import dashboard_url
from raysight.cli.run import wait_until_quiet
from raysight.client import Client
from tests.ray_programs.two_nodes import DOOMED_LINES
from tests.ray_scenarios import (
    RayStartHead,
    ServerProcess,
    agent_command,
    assert_nothing_alive_without_a_reason,
    driver_env,
    raysight_cli,
    replayed,
)

pytestmark = pytest.mark.ray
PROGRAMS = Path(__file__).parent / "ray_programs"


def everything(client: Client, session: str) -> dict[str, list[dict[str, Any]]]:
    return {
        r: client.list(r, session=session, limit=None, detail=True)["rows"]
        for r in ("tasks", "actors", "jobs", "nodes", "workers")
    }


def by_name(tasks: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for task in tasks:
        out.setdefault(task["name"], []).append(task)
    return out


def run_plain_driver(address: str) -> None:
    """tests/ray_programs/plain_driver.py against the cluster at ``address``, from a user's shell; it must succeed."""
    driver = subprocess.run(
        [sys.executable, str(PROGRAMS / "plain_driver.py"), address],
        env=driver_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert driver.returncode == 0, driver.stderr[-3000:]


def poll_beside_the_head(server_url: str, ray_dir: Path) -> dict[str, Any]:
    """`raysight poll` at the dashboard the head logged, as the README says to run it beside a head: once, then
    every second until it has polled twice more (each poll's time is the doctor's ``last_ok_ms``), then stopped."""
    deadline = time.monotonic() + 30
    while (dashboard := dashboard_url(ray_dir / "session_latest")) is None:
        assert time.monotonic() < deadline, "the head logged no dashboard address within 30 s"
        time.sleep(0.2)
    once = raysight_cli("poll", "--once", "--dashboard", dashboard, "--server", server_url)
    assert once.returncode == 0, once.stderr
    command = [sys.executable, "-m", "raysight", "poll", "--dashboard", dashboard, "--server", server_url]
    looping = subprocess.Popen([*command, "--every", "1"], stderr=subprocess.DEVNULL)
    seen: set[int] = set()
    try:
        with Client(server_url) as client:
            deadline = time.monotonic() + 60
            while len(seen) < 3:
                assert time.monotonic() < deadline, f"raysight poll --every 1 polled {len(seen) - 1} times in 60 s"
                seen |= {p["last_ok_ms"] for p in client.doctor()["polls"] if p["resource"] == "jobs"}
                time.sleep(0.2)
    finally:
        looping.terminate()
        looping.wait(timeout=30)
    return {"once": once, "polls_seen": len(seen)}


@pytest.fixture(scope="module")
def ray_start(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A `ray start` head with a node agent beside it, as the README says, and a plain driver; what raysight saw while
    it ran, then after the head was killed whole (SIGKILL: Ray's last events are lost)."""
    server = ServerProcess(tmp_path_factory.mktemp("store")).start()
    ray_dir = tmp_path_factory.mktemp("ray")
    agent = subprocess.Popen(
        agent_command(server.url, ray_dir, tmp_path_factory.mktemp("agent")), stderr=subprocess.DEVNULL
    )
    try:
        head = RayStartHead(server.url, "prodlike", ray_dir)
        try:
            address = head.start()
            run_plain_driver(address)
            polled = poll_beside_the_head(server.url, ray_dir)
            with server.client() as client:
                wait_until_quiet(client)
                (session,) = client.sessions()
                running = everything(client, session["session"])
                doctor = client.doctor()
        finally:
            head.stop()
        with server.client() as client:
            deadline = time.monotonic() + 30
            while (ended := client.sessions()[0])["end_reason"] is None:
                assert time.monotonic() < deadline, "the agent's sightings did not end the session within 30 s"
                time.sleep(0.2)
            wait_until_quiet(client)
            killed = everything(client, session["session"])
        yield {"running": running, "doctor": doctor, "killed": killed, "session": ended, "polled": polled}
    finally:
        agent.terminate()
        agent.wait(timeout=60)
        server.stop()


def test_a_driver_outside_a_ray_start_cluster_sends_its_tasks_events(ray_start: dict[str, Any]) -> None:
    tasks = by_name(ray_start["running"]["tasks"])
    (raises,) = tasks["raises"]
    assert (raises["state"], raises["error_type"], raises["state_inferred"]) == (
        "FAILED",
        "TASK_EXECUTION_EXCEPTION",
        False,
    )
    assert "boom: raised in a task of a plain driver" in raises["error_message"]
    adds = tasks["Accumulator.add"]
    assert len(adds) == 3 and {t["type"] for t in adds} == {"ACTOR_TASK"} and all(t["duration_ms"] for t in adds)
    (creation,) = tasks["Accumulator.__init__"]
    assert (creation["type"], creation["state"]) == ("ACTOR_CREATION_TASK", "FINISHED")
    assert {t["state"] for t in tasks["add_one"]} == {"FINISHED"}
    assert ray_start["doctor"]["drivers_without_task_events"] == []


def test_raysight_poll_records_what_a_ray_start_cluster_never_sends(ray_start: dict[str, Any]) -> None:
    session = ray_start["session"]["session"]
    once = ray_start["polled"]["once"].stdout
    assert once.startswith(f"Polled {session}: ") and "1 jobs" in once and ray_start["polled"]["polls_seen"] >= 3
    polls = {p["resource"]: p for p in ray_start["doctor"]["polls"] if p["session"] == session}
    assert polls["jobs"]["rows"] == 1 and all(p["last_ok_ms"] for p in polls.values()), polls
    assert polls.keys() >= {"placement_groups", "objects", "runtime_envs", "cluster_events", "jobs"}


def test_a_ray_start_cluster_killed_whole_ends_as_its_node_agent_saw(ray_start: dict[str, Any]) -> None:
    (node,) = ray_start["running"]["nodes"]
    assert (node["state"], node["state_inferred"]) == ("ALIVE", False)
    session = ray_start["session"]
    # The agent sees the raylet and the GCS go at once: whichever sighting is folded first ends the session
    assert session["end_time_ms"] and (
        session["end_reason"] == "every node of the cluster died"
        or session["end_reason"].startswith("its gcs_server (pid ")
        and session["end_reason"].endswith("as raysight's node agent saw")
    ), session
    (node,) = ray_start["killed"]["nodes"]
    assert (node["state"], node["reported_state"], node["state_inferred"]) == ("DEAD", "ALIVE", True)
    assert node["inferred_reason"].startswith("its raylet (pid ")
    assert_nothing_alive_without_a_reason(ray_start["killed"])


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """What raysight recorded of tests/ray_programs/two_nodes.py, read after the cluster is gone by a server started
    after the run."""
    marker = tmp_path_factory.mktemp("marker") / "running"
    program = ("-m", "tests.ray_programs.two_nodes", str(marker))
    store = tmp_path_factory.mktemp("store")
    with replayed(store, "two-nodes", *program, expect_code=3) as server, server.client() as client:
        (session,) = client.sessions()
        doctor_cli = subprocess.run(
            [sys.executable, "-m", "raysight", "doctor", "--server", server.url],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        yield {
            "data": everything(client, session["session"]),
            "doctor": client.doctor(),
            "doctor_cli": doctor_cli,
            "session": session,
            "url": server.url,
        }


def test_a_node_removed_mid_run_and_the_failing_driver(two_nodes: dict[str, Any]) -> None:
    data = two_nodes["data"]
    nodes = {n["is_head_node"]: n for n in data["nodes"]}
    removed, head = nodes[False], nodes[True]
    assert (removed["state"], removed["state_inferred"]) == ("DEAD", False) and removed["death_reason"]
    assert (head["state"], head["reported_state"], head["state_inferred"]) == ("DEAD", "ALIVE", True)
    (lost,) = by_name(data["tasks"])["on_doomed_node"]
    assert lost["state"] == "FAILED" and lost["node_id"] == removed["node_id"], lost
    jobs = sorted(data["jobs"], key=lambda j: j["job_id"])
    assert (jobs[0]["status"], jobs[0]["driver_exit_code"]) == ("FAILED", 3)
    assert "tests.ray_programs.two_nodes" in jobs[0]["entrypoint"]
    assert two_nodes["session"]["end_reason"] == "the driver that started this local cluster exited"
    assert_nothing_alive_without_a_reason(data)


def test_the_removed_node_is_the_one_root_of_all_that_was_lost_with_it(two_nodes: dict[str, Any]) -> None:
    """A node stopped (SIGTERM: Ray calls it an expected termination) with two tasks and an actor's call running: one
    group, the node's, with the tasks, the actor and the workers under it; the failing driver; and the task that
    raised in a driver raysight's variables never reached (its outcome known from raysight's span of it)."""
    listed = raysight_cli("errors", "--server", two_nodes["url"], "--format", "json")
    assert listed.returncode == 0, listed.stderr
    groups = {g["kind"]: g for g in json.loads(listed.stdout)["groups"]}
    assert set(groups) == {"node", "job", "task"}
    assert (groups["task"]["error"], groups["task"]["affected"]) == (  # the plain driver's, its span says
        "RuntimeError: boom: raised in a task of a plain driver",
        ["raises"],
    )
    removed = next(n for n in two_nodes["data"]["nodes"] if not n["is_head_node"])
    node = groups["node"]
    assert (node["example"]["id"], node["error_type"], node["error"]) == (
        removed["node_id"],
        "EXPECTED_TERMINATION",
        "received SIGTERM",
    )
    assert node["consequences"]["tasks"] == 3 and node["consequences"]["actors"] >= 1, node  # Keeper (by timing,
    # Ray may report its death and raysight infer it as well: two failures of one actor)
    assert node["consequences"]["workers"] >= 1  # the workers Ray never reported the end of, gone with it
    assert {"on_doomed_node", "beside_it", "Keeper", "Keeper.hold"} <= set(node["affected"])
    assert groups["job"]["error"] == "the driver exited with code <n>"
    shown = raysight_cli("errors", "show", removed["node_id"], "--server", two_nodes["url"])
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    gcs = [line for line in lines if line.startswith("  [gcs_server.out]")]
    assert any("death reason = EXPECTED_TERMINATION" in line for line in gcs), lines
    assert any("Node died; reconstructing actors that were running on it" in line for line in gcs), lines
    beside = {line.split()[2] for line in lines if re.match(r"(task|actor) +[0-9a-f]{32,48} ", line)}
    assert beside == {"on_doomed_node", "beside_it", "Keeper", "Keeper.hold"}


def test_the_lines_of_a_task_on_a_removed_node_are_all_there_through_ray_s_rotation(two_nodes: dict[str, Any]) -> None:
    session, data = two_nodes["session"]["session"], two_nodes["data"]
    removed = next(n for n in data["nodes"] if not n["is_head_node"])
    (lost,) = by_name(data["tasks"])["on_doomed_node"]
    logs = ray_temp_dir(os.environ) / session / "logs"
    assert list(logs.glob(f"worker-*{lost['worker_pid']}.out.4")), "Ray did not rotate the task's file"
    with Client(two_nodes["url"]) as client:
        by_task = client.logs(session=session, task=lost["task_id"])
        by_node = client.logs(session=session, node=removed["node_id"], grep="doomed line")
    numbers = [int(r["text"].split()[2]) for r in by_task["rows"] if r["text"].startswith("doomed line")]
    assert numbers == list(range(DOOMED_LINES)), numbers  # each once, in order, across five files
    # Ray gives no byte ranges under rotation: attributed by the task's marker, worker and time
    assert {(r["task_id"], r["attribution"], r["pid"]) for r in by_task["rows"]} == {
        (lost["task_id"], "inferred", lost["worker_pid"])
    }
    assert [r["text"] for r in by_node["rows"]] == [r["text"] for r in by_task["rows"] if "doomed line" in r["text"]]
    printed = subprocess.run(
        [
            sys.executable,
            "-m",
            "raysight",
            "logs",
            "--server",
            two_nodes["url"],
            "--session",
            session,
            "--task",
            lost["task_id"],
            "--grep",
            "doomed line 0299",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    last = "doomed line 0299 of 300, padded to rotate Ray's files sooner .........."
    assert printed == f"(on_doomed_node pid={lost['worker_pid']}) {last}\n"  # (one task's lines: none names it)


def test_a_driver_without_raysights_variables_is_named_and_its_outcomes_are_raysights_spans(
    two_nodes: dict[str, Any],
) -> None:
    (warning,) = two_nodes["doctor"]["drivers_without_task_events"]
    assert warning["label"] == "two-nodes" and warning["tasks"] >= 5
    assert "RAY_enable_core_worker_ray_event_to_aggregator=1" in warning["message"]
    assert f"Warning ({warning['session']}): {warning['message']}" in two_nodes["doctor_cli"].splitlines()
    plain = [t for t in two_nodes["data"]["tasks"] if t["job_id"] == warning["job_id"]]
    tasks = by_name(plain)
    (raises,) = tasks["raises"]  # it raised, yet its executor's end of execution was all Ray sent: its span says how
    assert (raises["state"], raises["state_inferred"], raises["error_type"]) == (
        "FAILED",
        True,
        "TASK_EXECUTION_EXCEPTION",
    )
    assert raises["inferred_reason"].startswith("raysight's span of this attempt (span ")
    assert raises["error_message"].endswith("\nRuntimeError: boom: raised in a task of a plain driver")
    assert {t["state"] for t in tasks["add_one"]} == {"FINISHED"}  # (returned, their spans say)
    assert {t["type"] for t in tasks["Accumulator.add"]} == {"ACTOR_TASK"}


@pytest.fixture(scope="module")
def agents_on_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A `ray start` head whose agents run as Ray actors (`raysight agent --on-ray`), a driver that prints on it, then
    a second node joining; what the commands said and raysight saw."""
    server = ServerProcess(tmp_path_factory.mktemp("store")).start()
    ray_dir, state = tmp_path_factory.mktemp("ray"), tmp_path_factory.mktemp("agent-state")
    head, joining = RayStartHead(server.url, "onray", ray_dir), RayStartHead(server.url, "onray", ray_dir)
    out: dict[str, Any] = {"state": state}
    try:
        address = head.start()
        on_ray = ("agent", "--server", server.url, "--address", address, "--state-dir", str(state))
        out["started"] = raysight_cli(*on_ray, "--on-ray")
        run_plain_driver(address)
        grep = ("logs", "--server", server.url, "--grep", "add_one(2) ran")
        deadline = time.monotonic() + 30
        while not (found := raysight_cli(*grep)).stdout:
            assert time.monotonic() < deadline, (found, out["started"])
            time.sleep(0.5)
        out["logs"] = found
        joining.join(address)
        deadline = time.monotonic() + 90
        while len((listed := raysight_cli(*on_ray, "--on-ray")).stdout.splitlines()) < 2:
            assert time.monotonic() < deadline, listed
            time.sleep(1)
        out["joined"] = listed
        with server.client() as client:  # the joining node's events may fold after its agent answers
            agents = {line.split("  ", 1)[0] for line in listed.stdout.splitlines()}
            while not agents <= {n["node_id"] for n in client.list("nodes", limit=None)["rows"]}:
                assert time.monotonic() < deadline, listed.stdout
                time.sleep(0.5)
            out["nodes"] = client.list("nodes", limit=None)["rows"]
        out["stopped"] = raysight_cli(*on_ray, "--stop-on-ray")
        yield out
    finally:
        joining.stop()
        head.stop()
        server.stop()


def test_agents_on_ray_ship_from_every_node_and_each_joining_node_gets_one(agents_on_ray: dict[str, Any]) -> None:
    started, joined, stopped = (agents_on_ray[step] for step in ("started", "joined", "stopped"))
    assert started.returncode == 0 and "an agent on each of 1 node(s), and on each that joins" in started.stderr
    assert re.fullmatch(r"[0-9a-f]{56}  (starting|shipping)  \(0 lines shipped\)\n", started.stdout), started.stdout
    assert re.fullmatch(
        r"\(add_one pid=\d+, task_id=[0-9a-f]{48}\) add_one\(2\) ran on a node of the cluster\n",
        agents_on_ray["logs"].stdout,
    )
    lines = dict(line.split("  ", 1) for line in joined.stdout.splitlines())
    assert set(lines) == {node["node_id"] for node in agents_on_ray["nodes"]} and len(lines) == 2  # one on each
    shipping = [status for status in lines.values() if status.startswith("shipping")]
    waiting = [status for status in lines.values() if status.startswith("waiting")]
    assert len(shipping) == 1 and int(re.search(r"\((\d+) lines", shipping[0])[1]) > 0  # type: ignore[index]
    lock = f"another raysight agent uses {agents_on_ray['state']}; give this one its own --state-dir"
    assert waiting == [f"waiting: {lock}  (0 lines shipped)"]  # the nodes of one host share its Ray temp dir
    assert stopped.returncode == 0 and "2 agent(s) stopped" in stopped.stderr
    assert [line.split("  ")[1] for line in stopped.stdout.splitlines()] == ["stopped", "stopped"]
