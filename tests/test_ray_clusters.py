"""Real Ray beyond one local `ray.init()`: a `ray start` head started by `raysight start` (its agent and poller beside
it), with a driver started outside it, then stopped by `raysight stop` beside a Ray it did not start; a two-node
cluster that loses a node, hosts a driver without raysight's variables, and whose own driver fails under `raysight
run`; and a `ray start` cluster whose agents run as Ray actors, joined by a second node. Each workload runs once for
this module, one cluster at a time."""

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

import httpx
import pytest

from raysight.agent.scrape import ray_temp_dir
from raysight.cli.detach import command_line
from raysight.cli.node import default_node_dir, unix_session
from raysight.cli.run import RAY_SYSTEM_CONFIG, free_port, wait_until_quiet
from raysight.client import Client
from tests.ray_programs.two_nodes import DOOMED_LINES
from tests.ray_scenarios import (
    RayStartHead,
    ServerProcess,
    assert_nothing_alive_without_a_reason,
    driver_env,
    raysight_cli,
    replayed,
    session_pids,
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


def run_plain_driver(address: str) -> str:
    """tests/ray_programs/plain_driver.py against the cluster at ``address``, from a user's shell; it must succeed.
    What it printed."""
    driver = subprocess.run(
        [sys.executable, str(PROGRAMS / "plain_driver.py"), address],
        env=driver_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert driver.returncode == 0, driver.stderr[-3000:]
    return driver.stdout


def poll_beside_the_head(server_url: str, dashboard: str) -> dict[str, Any]:
    """`raysight poll --once` at the dashboard `raysight start` recorded, then the poller it started seen polling on
    (each poll's time is the doctor's ``last_ok_ms``: one later than the poll --once made)."""
    once = raysight_cli("poll", "--once", "--dashboard", dashboard, "--server", server_url)
    assert once.returncode == 0, once.stderr
    seen: set[int] = set()
    with Client(server_url) as client:
        deadline = time.monotonic() + 30
        while len(seen) < 2:
            assert time.monotonic() < deadline, "the poller `raysight start` started did not poll within 30 s"
            seen |= {p["last_ok_ms"] for p in client.doctor()["polls"] if p["resource"] == "jobs"}
            time.sleep(0.2)
    return {"once": once, "polls_seen": len(seen)}


DEPLOYED = "raysight-deployed"  # the X-Request-ID of the request sent to the application `serve deploy` started


def serve_deploy(dashboard: str, config_dir: Path) -> dict[str, Any]:
    """`serve deploy` tests/ray_programs/deployed_app.py through the head's dashboard, as a user of a `ray start`
    cluster does, then send it one request with its own ``X-Request-ID``; the answer."""
    port = free_port()
    config = {
        "http_options": {"host": "127.0.0.1", "port": port},
        "applications": [
            {
                "name": "deployed",
                "route_prefix": "/deployed",
                "import_path": "deployed_app:app",
                "runtime_env": {"working_dir": f"local://{PROGRAMS}"},  # (on this one node)
            }
        ],
    }
    (path := config_dir / "serve.yaml").write_text(json.dumps(config))  # (JSON is YAML)
    serve = str(Path(sys.executable).with_name("serve"))
    deploy = subprocess.run(
        [serve, "deploy", str(path), "-a", dashboard], env=driver_env(), capture_output=True, text=True, timeout=120
    )
    assert deploy.returncode == 0, deploy.stderr[-3000:]
    deadline = time.monotonic() + 120
    while True:
        try:
            answer = httpx.get(f"http://127.0.0.1:{port}/deployed", headers={"X-Request-ID": DEPLOYED}, timeout=10)
            if answer.status_code == 200:
                return {"answer": answer.text}
        except httpx.HTTPError:
            pass  # (Serve's proxy not up yet)
        assert time.monotonic() < deadline, "the application `serve deploy` started did not answer within 120 s"
        time.sleep(0.5)


def traced_request(server_url: str, request_id: str) -> list[dict[str, Any]]:
    """The spans of the one trace `raysight serve request ID` finds, once it has come (spans are sent within a second
    or so of their end)."""
    deadline = time.monotonic() + 60
    while True:
        found = raysight_cli("serve", "request", request_id, "--server", server_url, "--format", "json")
        if found.returncode == 0 and (traces := json.loads(found.stdout)["traces"]):
            (trace,) = traces
            shown = raysight_cli("traces", "show", trace["trace_id"], "--server", server_url, "--format", "json")
            return json.loads(shown.stdout)["spans"]  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, found.stdout[-2000:] + found.stderr[-2000:]
        time.sleep(0.5)


def running(pid: int, command: list[str]) -> bool:
    return command_line(pid) == command


USER_CONFIG = {"worker_register_timeout_seconds": 90}  # a system config of the user's own (Ray's default: 60)


@pytest.fixture(scope="module")
def ray_start(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A head started by `raysight start --head` (given a system config of the user's own, and its state dir the
    suite's default: conftest's), a second start refused, a plain driver; what raysight saw while it ran; then
    `raysight stop`, with another Ray running beside it that raysight did not start, and what raysight saw after."""
    server = ServerProcess(tmp_path_factory.mktemp("store")).start()
    ray_dir, state_file = tmp_path_factory.mktemp("ray"), default_node_dir() / "node.json"
    start = ("start", "--head", "--server", server.url, "--cluster", "prodlike", "--port=0", f"--temp-dir={ray_dir}")
    start += ("--num-cpus=1", "--disable-usage-stats", f"--system-config={json.dumps(USER_CONFIG)}")
    bystander = RayStartHead(None, "", tmp_path_factory.mktemp("other-ray"))
    out: dict[str, Any] = {"state_file": state_file}
    try:
        try:
            out["started"] = raysight_cli(*start)
            assert out["started"].returncode == 0, out["started"].stderr
            out["state"] = state = json.loads(state_file.read_text())
            out["again"] = raysight_cli(*start)
            out["driver"] = run_plain_driver(state["ray"]["gcs_address"])
            bystander.launch()  # (up while the poller is watched)
            out["polled"] = poll_beside_the_head(server.url, state["ray"]["dashboard"])
            with server.client() as client:
                wait_until_quiet(client)
                (session,) = client.sessions()
                out["running"] = everything(client, session["session"])
                out["doctor"] = client.doctor()
            out["deployed"] = serve_deploy(state["ray"]["dashboard"], tmp_path_factory.mktemp("serve"))
            out["deployed_spans"] = traced_request(server.url, DEPLOYED)
            bystander.address()
            assert bystander.proc is not None
            others = unix_session(bystander.proc.pid)
            out["others"] = {os.path.basename(args[0]) for args in others.values()}
            out["stopped"] = raysight_cli("stop")
            pieces = [p["pid"] for p in (state["agent"], state["poller"]) if running(p["pid"], p["command"])]
            out["left"] = session_pids(state["ray"]["sid"]) + pieces
            out["others_gone"] = set(others) - set(session_pids(bystander.proc.pid))
            out["stop_again"] = raysight_cli("stop")
        finally:
            if state_file.exists():  # (the test failed before its `raysight stop`)
                raysight_cli("stop")
            bystander.stop()
        with server.client() as client:
            deadline = time.monotonic() + 30
            while (ended := client.sessions()[0])["end_reason"] is None:
                assert time.monotonic() < deadline, "the agent's sightings did not end the session within 30 s"
                time.sleep(0.2)
            wait_until_quiet(client)
            out["ended"], out["session"] = everything(client, session["session"]), ended
        (raises,) = by_name(out["running"]["tasks"])["raises"]
        out["raises_logs"] = raysight_cli("logs", "--server", server.url, "--task", raises["task_id"])
        yield out
    finally:
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
    logs = ray_start["raises_logs"]
    assert logs.returncode == 0 and "raises: about to raise, on purpose" in logs.stdout, logs  # the failure's line
    adds = tasks["Accumulator.add"]
    assert len(adds) == 3 and {t["type"] for t in adds} == {"ACTOR_TASK"} and all(t["duration_ms"] for t in adds)
    (creation,) = tasks["Accumulator.__init__"]
    assert (creation["type"], creation["state"]) == ("ACTOR_CREATION_TASK", "FINISHED")
    assert {t["state"] for t in tasks["add_one"]} == {"FINISHED"}
    assert ray_start["doctor"]["drivers_without_task_events"] == []


def test_an_application_serve_deploy_started_is_traced_request_by_request(ray_start: dict[str, Any]) -> None:
    """Ray's dashboard started the application (no runtime-env hook of raysight's in its proxy or replica): Serve's
    exporter variable, which `raysight start` set for the node, traced its request anyway, found by its ID, the
    replica's span a descendant of the proxy's."""
    assert ray_start["deployed"]["answer"] == "deployed"
    spans, proxy = ray_start["deployed_spans"], "proxy_http_request Deployed GET "  # (as Serve names it)
    names = {s["name"] for s in spans if s["request_id"] == DEPLOYED}
    assert {proxy, "replica_handle_request Deployed __call__"} <= names, spans
    by_id, ups = {s["span_id"]: s for s in spans}, []
    span = next(s for s in spans if s["name"] == "replica_handle_request Deployed __call__")
    while (span := by_id.get(span["parent_span_id"])) is not None:
        ups.append(span["name"])
    assert ups and ups[-1] == proxy, ups


def test_raysight_start_starts_a_ray_start_head_with_the_users_system_config_and_raysights_and_refuses_another(
    ray_start: dict[str, Any],
) -> None:
    """What the GCS gave the driver holds the user's key and raysight's both; `raysight start` said what it started,
    as its state file records it; a second start while the first runs is refused in one line."""
    (line,) = [line for line in ray_start["driver"].splitlines() if line.startswith("system config: ")]
    config = json.loads(line.removeprefix("system config: "))
    assert config.items() >= {**USER_CONFIG, **RAY_SYSTEM_CONFIG}.items(), config
    state, said = ray_start["state"], ray_start["started"].stdout
    ray, agent, poller = state["ray"], state["agent"], state["poller"]
    assert (state["head"], state["cluster"], ray["dashboard"].startswith("http://")) == (True, "prodlike", True)
    assert Path(ray["session_dir"]).name == ray_start["session"]["session"] and ray["sid"] == int(
        ray["session_dir"].rsplit("_", 1)[1]
    )  # (Ray names a head's session after its `ray start`'s pid)
    assert agent["command"][3:] == ["agent", "--server", state["server"], "--ray-dir", ray["temp_dir"]]
    assert poller["command"][3:] == ["poll", "--dashboard", ray["dashboard"], "--server", state["server"]]
    for shown in (ray["node_id"], ray["gcs_address"], ray["dashboard"], f"pid {agent['pid']}", f"pid {poller['pid']}"):
        assert shown in said, said
    assert agent["log"] in said and poller["log"] in said and "`raysight stop`" in said
    again = ray_start["again"]
    assert again.returncode == 1 and len(again.stderr.splitlines()) == 1, again.stderr
    assert (
        again.stderr.startswith("Error: a node `raysight start` started runs (Ray's ")
        and str(ray_start["state_file"]) in again.stderr
    )


def test_raysight_poll_records_what_a_ray_start_cluster_never_sends(ray_start: dict[str, Any]) -> None:
    session = ray_start["session"]["session"]
    once = ray_start["polled"]["once"].stdout
    assert once.startswith(f"Polled {session}: ") and "1 jobs" in once and ray_start["polled"]["polls_seen"] >= 2
    polls = {p["resource"]: p for p in ray_start["doctor"]["polls"] if p["session"] == session}
    assert polls["jobs"]["rows"] == 1 and all(p["last_ok_ms"] for p in polls.values()), polls
    assert polls.keys() >= {"placement_groups", "objects", "runtime_envs", "cluster_events", "jobs"}


def test_the_agent_raysight_start_started_reports_what_rays_aggregator_counted(ray_start: dict[str, Any]) -> None:
    """Ray's aggregator counts (the doctor's) come from the node agent's scrapes, not only from `raysight run`."""
    (reported,) = [r for r in ray_start["doctor"]["ray_reported"] if r["session"] == ray_start["session"]["session"]]
    assert reported["agents"] == 1 and reported["published"] > 0 and reported["publish_failures"] == 0, reported


def test_raysight_stop_stops_its_ray_start_node_alone_which_ends_dead(ray_start: dict[str, Any]) -> None:
    """`raysight stop` stops Ray's processes of its node, its agent and its poller, and leaves the Ray beside it
    running; the node ends dead (as Ray said, or as the agent saw), and so does the session."""
    stopped, state = ray_start["stopped"], ray_start["state"]
    assert stopped.returncode == 0, stopped.stderr
    assert re.fullmatch(
        rf"Stopped Ray on node {state['ray']['node_id']} \(\d+ processes\); its agent \(pid {state['agent']['pid']}\) "
        rf"stopped; its poller \(pid {state['poller']['pid']}\) stopped\.\n",
        stopped.stdout,
    ), stopped.stdout
    assert ray_start["left"] == [] and not ray_start["state_file"].exists()
    assert (
        ray_start["others"] >= {"raylet", "gcs_server"} and ray_start["others_gone"] == set()
    )  # another Ray, untouched
    again = ray_start["stop_again"]
    assert (again.returncode, again.stderr.count("\n")) == (1, 1) and "nothing to stop" in again.stderr
    (node,) = ray_start["running"]["nodes"]
    assert (node["state"], node["state_inferred"]) == ("ALIVE", False)
    session = ray_start["session"]
    # The agent sees the raylet and the GCS go: whichever sighting is folded first ends the session
    assert session["end_time_ms"] and (
        session["end_reason"] == "every node of the cluster died"
        or session["end_reason"].startswith("its gcs_server (pid ")
        and session["end_reason"].endswith("as raysight's node agent saw")
    ), session
    (node,) = ray_start["ended"]["nodes"]
    assert node["state"] == "DEAD" and (
        node["reported_state"] == "DEAD" or node["inferred_reason"].startswith("its raylet (pid ")
    ), node
    assert_nothing_alive_without_a_reason(ray_start["ended"])


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
