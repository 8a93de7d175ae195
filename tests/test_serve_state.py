"""Ray Serve's state as the poller sends it (``ServeInstanceDetails``, once a ServeController lives): kept each time
it changes, shown at any moment by `raysight serve status|config` and by Ray's own `serve status|config -a` against
raysight (read-only), its changes by `raysight serve history`; without a cluster."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
import yaml
from click.testing import CliRunner
from starlette.testclient import TestClient

from raysight import wire
from raysight.agent.state_poll import serve_details
from raysight.cli import main
from raysight.cli.failures import errors_row
from raysight.cli.serve import history_row, stats_queries, stats_rows
from raysight.server.app import create_app
from raysight.settings import Settings
from raysight.signals.polls.serve_query import ending, replica_lives, transitions
from tests.ray_scenarios import ServerProcess, serving
from tests.test_metrics import at, scrape
from tests.test_ray_state_ingest import NODE, SESSION

BASE = 1_795_000_000_000_000_000
S = 1_000_000_000
SECRET = {"SECRET": "hunter2"}


def details(
    app: str,
    deployment: str,
    trigger: str,
    replicas: list[tuple[str, str]],
    message: str = "",
    names: tuple[str, str] = ("greeter", "Greeter"),
) -> Any:
    """Serve's state as the dashboard gives it: one application of one deployment (which Ray's models accept), named
    ``names``."""
    actor = {"node_id": NODE, "node_ip": "10.0.0.1", "worker_id": "e" * 56, "log_file_path": "/serve/x.log"}
    config = {
        "name": names[0],
        "route_prefix": "/greet",
        "import_path": "app:greeter",
        "runtime_env": {"env_vars": SECRET},
    }
    replica_rows = [
        {**actor, "replica_id": r, "state": state, "pid": 42, "actor_id": "a1" * 16, "start_time_s": 1795000001.0}
        for r, state in replicas
    ]
    greeter = {
        "name": names[1],
        "status": deployment,
        "status_trigger": trigger,
        "message": message,
        "deployment_config": {"name": names[1], "ray_actor_options": {"runtime_env": {"env_vars": SECRET}}},
        "target_num_replicas": 1,
        "required_resources": {"CPU": 0},
        "replicas": replica_rows,
    }
    application = {
        "name": names[0],
        "route_prefix": "/greet",
        "docs_path": None,
        "status": app,
        "message": message,
        "last_deployed_time_s": 1795000000.5,
        "deployed_app_config": config,
        "source": "declarative",
        "external_scaler_enabled": False,
        "deployments": {names[1]: greeter},
    }
    return {
        "controller_info": {**actor, "actor_id": "c1" * 16},
        "proxy_location": "EveryNode",
        "http_options": {"host": "127.0.0.1", "port": 8000},
        "proxies": {NODE: {**actor, "actor_id": "b1" * 16, "status": "HEALTHY"}},
        "applications": {names[0]: application},
        "target_capacity": None,
    }


DEPLOYING = details("DEPLOYING", "UPDATING", "CONFIG_UPDATE_STARTED", [("r1", "STARTING")])
RUNNING = details("RUNNING", "HEALTHY", "CONFIG_UPDATE_COMPLETED", [("r1", "RUNNING")])
UNHEALTHY = details(
    "UNHEALTHY", "UNHEALTHY", "HEALTH_CHECK_FAILED", [("r1", "STOPPING"), ("r2", "STARTING")], "r1 failed"
)
POLLS = [(BASE, DEPLOYING), (BASE + 5 * S, DEPLOYING), (BASE + 10 * S, RUNNING), (BASE + 15 * S, UNHEALTHY)]


def send(post: Any, ns: int, serve: Any, session: str = SESSION) -> None:
    body = {"session": session, "polled_ns": ns, "resources": {}, "errors": {}, "serve": serve}
    answer = post(wire.AGENT_RAY_STATE, json=body)
    assert answer.status_code == 200, answer.text


def test_each_change_is_a_transition_with_its_trigger_and_message() -> None:
    changes = [
        (
            t["ts_ms"] - BASE // 1_000_000,
            t["kind"],
            t["replica"] or t["deployment"] or t["application"],
            t["from"],
            t["to"],
        )
        for t in transitions(POLLS)
    ]
    assert changes == [
        (0, "application", "greeter", None, "DEPLOYING"),
        (0, "deployment", "Greeter", None, "UPDATING"),
        (0, "replica", "r1", None, "STARTING"),
        (10_000, "application", "greeter", "DEPLOYING", "RUNNING"),
        (10_000, "deployment", "Greeter", "UPDATING", "HEALTHY"),
        (10_000, "replica", "r1", "STARTING", "RUNNING"),
        (15_000, "application", "greeter", "RUNNING", "UNHEALTHY"),
        (15_000, "deployment", "Greeter", "HEALTHY", "UNHEALTHY"),
        (15_000, "replica", "r1", "RUNNING", "STOPPING"),
        (15_000, "replica", "r2", None, "STARTING"),
    ]
    unhealthy = transitions(POLLS)[7]
    assert unhealthy["trigger"] == "HEALTH_CHECK_FAILED" and unhealthy["message"] == "r1 failed"
    gone = transitions([*POLLS, (BASE + 20 * S, details("RUNNING", "HEALTHY", "X", []))])[-2:]
    assert [(t["replica"], t["to"]) for t in gone] == [("r1", None), ("r2", None)]
    assert transitions(POLLS, app="other") == []


def test_each_autoscaling_decision_is_a_change_once_at_the_time_serve_made_it() -> None:
    """Serve keeps its recent decisions in each sample (``autoscaling_detail``): each is shown once, when it was made,
    however many samples repeat it."""
    decision = {"timestamp_s": (BASE + 12 * S) / 1e9, "reason": "queued requests over target", "prev_num_replicas": 1}
    decision |= {"curr_num_replicas": 3, "policy": "default"}
    detail = {"scaling_status": "UPSCALING", "decisions": [decision], "metrics_health": "HEALTHY", "errors": []}
    scaled = details("RUNNING", "HEALTHY", "AUTOSCALING", [("r1", "RUNNING")])
    scaled["applications"]["greeter"]["deployments"]["Greeter"]["autoscaling_detail"] = detail
    changes = transitions([*POLLS[:3], (BASE + 15 * S, scaled), (BASE + 20 * S, scaled)])
    (scaling,) = [t for t in changes if t["kind"] == "autoscaling"]
    assert scaling == {
        "ts_ms": (BASE + 12 * S) // 1_000_000,
        "kind": "autoscaling",
        "application": "greeter",
        "deployment": "Greeter",
        "replica": None,
        "from": 1,
        "to": 3,
        "trigger": "default",
        "message": "queued requests over target",
    }
    assert [t["ts_ms"] for t in changes] == sorted(t["ts_ms"] for t in changes)  # in time order: before the sample
    row = history_row(scaling)
    assert (row["name"], row["change"], row["trigger"]) == ("greeter/Greeter", "1 → 3 replicas", "default")


def test_each_replica_is_one_life_with_its_states_actor_pid_node_and_log_file() -> None:
    gone = (BASE + 20 * S, details("RUNNING", "HEALTHY", "X", [("r2", "RUNNING")]))
    samples = [(ns, ns + S, d) for ns, d in [*POLLS, gone]]
    r1, r2 = replica_lives(samples)
    assert [(s["state"], s["ts_ms"] - BASE // 1_000_000) for s in r1["states"]] == [
        ("STARTING", 0),
        ("RUNNING", 10_000),
        ("STOPPING", 15_000),
    ]
    assert (r1["application"], r1["deployment"], r1["replica_id"], r1["state"]) == (
        "greeter",
        "Greeter",
        "r1",
        "STOPPING",
    )
    assert (r1["actor_id"], r1["pid"], r1["node_id"], r1["log_file_path"]) == ("a1" * 16, 42, NODE, "/serve/x.log")
    assert r1["start_time_ms"] == 1795000001000 and r1["first_seen_ms"] == BASE // 1_000_000
    assert (r1["last_seen_ms"], r1["gone_ms"]) == ((BASE + 16 * S) // 1_000_000, (BASE + 20 * S) // 1_000_000)
    assert [s["state"] for s in r2["states"]] == ["STARTING", "RUNNING"] and r2["gone_ms"] is None
    assert replica_lives(samples, app="other") == [] and replica_lives(samples, deployment="Other") == []
    assert [r["replica_id"] for r in replica_lives(samples, app="greeter", deployment="Greeter")] == ["r1", "r2"]


@pytest.mark.parametrize(
    ("crashed", "reported_dead", "how"),
    [(True, True, "crashed"), (False, True, "stopped"), (False, False, "with its session")],
)
def test_a_replicas_end_is_its_actors(crashed: bool, reported_dead: bool, how: str) -> None:
    actor = {"end_ms": 5000, "crashed": crashed, "reported_dead": reported_dead, "death_message": "gone"}
    assert ending(actor) == {"how": how, "time_ms": 5000, "message": "gone"}
    assert ending(actor, at_ms=4999) is None and ending({**actor, "end_ms": None}) is None


def test_serves_replicas_are_listed_until_a_moment_and_a_bad_moment_is_a_400(server: TestClient) -> None:
    for ns, serve in POLLS:
        send(server.post, ns, serve)

    def replicas(**params: Any) -> list[dict[str, Any]]:
        answer = server.get(wire.SERVE_REPLICAS, params={"session": SESSION, **params})
        assert answer.status_code == 200, answer.text
        return answer.json()["replicas"]  # type: ignore[no-any-return]

    assert [(r["replica_id"], r["state"], r["ended"]) for r in replicas()] == [
        ("r1", "STOPPING", None),
        ("r2", "STARTING", None),
    ]  # (no actor of theirs recorded: no end known)
    assert [(r["replica_id"], r["state"]) for r in replicas(at=BASE + 12 * S)] == [("r1", "RUNNING")]
    assert replicas(app="greeter", deployment="Other") == []
    assert server.get(wire.SERVE_REPLICAS, params={"at": "yesterday"}).status_code == 400


def test_a_crashed_replicas_group_names_its_replacement() -> None:
    example = {"kind": "replica", "id": "a1" * 16, "error": "The actor is dead", "replica_id": "r1"}
    group = {"example": example, "affected": ["ServeReplica:greeter:Scorer"], "consequences": {"requests": 1}}
    replaced = errors_row({**group, "example": {**example, "replacement": {"replica_id": "r2", "actor_id": "b1"}}})
    assert replaced["example"] == "The actor is dead (replica r1, replaced by replica r2)"
    assert replaced["consequences"] == "1 requests"
    assert errors_row({**group, "example": {**example, "replacement": None}})["example"].endswith("not replaced)")
    actor = {"kind": "actor", "id": "c1" * 16, "error": "killed"}
    assert errors_row({**group, "example": actor})["example"] == "killed"


def test_serve_is_kept_when_it_changes_and_shown_at_any_moment(server: TestClient) -> None:
    for ns, serve in POLLS:
        send(server.post, ns, serve)
    send(server.post, BASE + 2 * S, None)  # (a poll that found no ServeController: nothing kept)

    def sample(**params: Any) -> dict[str, Any]:
        answer = server.get(wire.SERVE, params={"session": SESSION, **params})
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found

    deploying = sample(at=BASE + 9 * S)
    assert deploying["details"] == DEPLOYING and deploying["sampled_ms"] == BASE // 1_000_000
    assert deploying["last_polled_ms"] == (BASE + 5 * S) // 1_000_000  # polled twice so: kept once
    assert sample()["details"] == UNHEALTHY and sample(at=BASE - 1)["details"] is None
    assert server.get(wire.SERVE, params={"at": "yesterday"}).status_code == 400
    polls = {p["resource"]: p for p in server.get(wire.DOCTOR).json()["polls"] if p["session"] == SESSION}
    assert polls["serve"]["last_ok_ms"] == (BASE + 15 * S) // 1_000_000
    history = server.get(wire.SERVE_HISTORY, params={"app": "greeter"}).json()["transitions"]
    assert history == transitions(POLLS)


def test_rays_serve_route_is_the_newest_sample_redacted_for_a_browser_and_read_only(server: TestClient) -> None:
    no_serve = server.get(wire.RAY_SERVE_APPLICATIONS).json()
    assert no_serve == {"controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": None}
    for ns, serve in POLLS:
        send(server.post, ns, serve)
    for prefix in ("", wire.path(wire.IN_SESSION, session=SESSION)):
        assert server.get(prefix + wire.RAY_SERVE_APPLICATIONS).json() == UNHEALTHY
        assert server.get(prefix + wire.RAY_SERVE_VERSION).json()["ray_version"]
    shown = server.get(wire.RAY_SERVE_APPLICATIONS, headers={"User-Agent": "Mozilla/5.0"}).json()["applications"]
    assert shown["greeter"]["deployed_app_config"]["runtime_env"] == {"env_vars": {"SECRET": "<redacted>"}}
    options = shown["greeter"]["deployments"]["Greeter"]["deployment_config"]["ray_actor_options"]
    assert options["runtime_env"] == {"env_vars": {"SECRET": "<redacted>"}}
    ours = server.get(wire.SERVE, headers={"Sec-Fetch-Mode": "cors"}).json()["details"]["applications"]
    assert ours["greeter"]["deployed_app_config"]["runtime_env"]["env_vars"] == {"SECRET": "<redacted>"}
    assert server.get(wire.RAY_SERVE_APPLICATIONS, params={"api_type": "imperative"}).json()["applications"] == {}
    bad = server.get(wire.RAY_SERVE_APPLICATIONS, params={"api_type": "sideways"})
    assert bad.status_code == 400 and "api_type" in bad.text
    for method in ("PUT", "DELETE"):
        refused = server.request(method, wire.RAY_SERVE_APPLICATIONS, json={"applications": []})
        assert refused.status_code == 405 and "never submits, stops or deletes" in refused.text


@pytest.mark.parametrize(
    ("serve", "says"),
    [([], "ServeInstanceDetails"), ({"proxies": {}}, "applications"), ({"applications": []}, "applications")],
)
def test_a_poll_whose_serve_is_not_serves_state_gets_a_400(server: TestClient, serve: Any, says: str) -> None:
    body = {"session": SESSION, "polled_ns": BASE, "resources": {}, "errors": {}, "serve": serve}
    answer = server.post(wire.AGENT_RAY_STATE, json=body)
    assert answer.status_code == 400 and says in answer.json()["error"], answer.text


class Dashboard(BaseHTTPRequestHandler):
    """Ray's dashboard, with or without a live ServeController; it keeps each path asked for."""

    controller: str | None = None  # its state
    asked: list[str] = []

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        Dashboard.asked.append(path)
        if path == wire.RAY_SERVE_APPLICATIONS:
            body = orjson.dumps(RUNNING)
        else:
            rows = [{"class_name": "ServeController", "state": self.controller}] if self.controller else []
            body = orjson.dumps({"result": True, "msg": "", "data": {"result": {"result": rows}}})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_serves_route_is_asked_only_once_a_serve_controller_lives() -> None:
    Dashboard.asked = []
    with serving(Dashboard) as url, httpx.Client() as http:
        for state, expected in ((None, None), ("DEAD", None), ("ALIVE", RUNNING)):
            Dashboard.controller = state
            assert serve_details(http, url) == expected
    assert Dashboard.asked.count(wire.RAY_SERVE_APPLICATIONS) == 1


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A raysight server that keeps the polls of :data:`POLLS`."""
    with ServerProcess(tmp_path_factory.mktemp("serve") / "data") as server, httpx.Client(base_url=server.url) as http:
        for ns, serve in POLLS:
            send(http.post, ns, serve)
        yield server.url


def rays_status(serve: Any) -> str:
    """What Ray's `serve status` prints of Serve's state."""
    from ray.serve.schema import ServeInstanceDetails
    from ray.serve.scripts import ServeDeploySchemaDumper

    status = asdict(ServeInstanceDetails(**serve)._get_status())
    return yaml.dump(status, Dumper=ServeDeploySchemaDumper, default_flow_style=False, sort_keys=False)


def ours(*args: str) -> str:
    shown = CliRunner().invoke(main, ["serve", *args])
    assert shown.exit_code == 0, shown.output
    return shown.stdout


def test_serve_status_and_config_print_rays_yaml_at_any_moment(served: str) -> None:
    from ray.serve.scripts import config, status

    then = datetime.fromtimestamp((BASE + 7 * S) / 1e9, tz=UTC).isoformat()
    assert ours("status", "--at", then, "--server", served) == rays_status(DEPLOYING)
    assert ours("status", "--server", served) == rays_status(UNHEALTHY)
    assert yaml.safe_load(ours("status", "-n", "greeter", "--server", served))["status"] == "UNHEALTHY"
    config_yaml = "name: greeter\n\nroute_prefix: /greet\n\nimport_path: app:greeter\n\nruntime_env:\n  env_vars:\n"
    assert ours("config", "--server", served) == config_yaml + "    SECRET: hunter2\n"
    assert ours("config", "-n", "other", "--server", served).startswith("No config has been deployed for application")
    for command, expected in ((status, rays_status(UNHEALTHY)), (config, config_yaml + "    SECRET: hunter2\n")):
        rays = CliRunner().invoke(command, ["-a", served])  # Ray's own CLI, against raysight
        assert rays.exit_code == 0 and rays.stdout == expected, rays.output
    history = ours("history", "--server", served)
    assert "DEPLOYING → RUNNING" in history and "HEALTH_CHECK_FAILED" in history and "r1 failed" in history


def test_serve_stats_reads_both_generations_of_serves_metric_names(tmp_path: Path) -> None:
    """`serve stats`'s queries, through raysight's PromQL engine, over 13 scrapes 5 s apart of two deployments (and
    two routes at the proxies): one exporting today's ``_total`` counters, one an older release's bare names; a
    replica replaced half-way."""

    def page(i: int) -> str:
        lines = []
        for deployment, total in (("Greeter", "_total"), ("Scorer", "")):
            tags = f'application="greeter",deployment="{deployment}",route="/greet"'
            lines += [
                f"ray_serve_deployment_request_counter{total}{{{tags}}} {10 * i}",
                f"ray_serve_deployment_error_counter{total}{{{tags}}} {i}",
                *(f'ray_serve_deployment_processing_latency_ms_bucket{{{tags},le="{le}"}} {n * i}'
                  for le, n in (("5", 4), ("50", 10), ("+Inf", 10))),
                f'ray_serve_replica_processing_queries{{{tags},replica="r1"}} 2',
                f'ray_serve_deployment_queued_queries{{{tags},handle="h"}} 3',
                f'ray_serve_deployment_replica_healthy{{{tags}}} 1',
            ]  # fmt: skip
            replica = "r1" if i < 9 else "r2"
            lines.append(f'ray_serve_deployment_replica_starts{total}{{{tags},replica="{replica}"}} 1')
        for route, total in (("/greet", "_total"), ("/score", "")):  # the HTTP proxies' families, by route
            tags = f'application="greeter",route="{route}",method="GET"'
            lines += [
                f'ray_serve_num_http_requests{total}{{{tags},status_code="200"}} {9 * i}',
                f'ray_serve_num_http_requests{total}{{{tags},status_code="500"}} {i}',
                f'ray_serve_num_http_error_requests{total}{{{tags},error_code="500"}} {i}',
                *(f'ray_serve_http_request_latency_ms_bucket{{{tags},status_code="200",le="{le}"}} {n * i}'
                  for le, n in (("5", 4), ("50", 10), ("+Inf", 10))),
            ]  # fmt: skip
        return "\n".join(lines) + "\n"

    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0, fold_rest=0))) as server:
        for i in range(13):
            assert scrape(server, i, page(i)).status_code == 200
        answers = {
            column: server.get(wire.PROM_QUERY, params={"query": query, "time": at(12)}).json()["data"]["result"]
            for column, query in stats_queries(30_000, "greeter").items()
        }
        by_route = {
            column: server.get(wire.PROM_QUERY, params={"query": query, "time": at(12)}).json()["data"]["result"]
            for column, query in stats_queries(30_000, "greeter", "route").items()
        }
        assert not any(
            server.get(wire.PROM_QUERY, params={"query": q, "time": at(12)}).json()["data"]["result"]
            for q in stats_queries(30_000, "shop").values()
        )
    rows = stats_rows(answers)
    assert [(r["application"], r["deployment"]) for r in rows] == [("greeter", "Greeter"), ("greeter", "Scorer")]
    for row in rows:
        assert row["requests_per_s"] == pytest.approx(2.0) and row["errors_per_s"] == pytest.approx(0.2), row
        assert row["p50_ms"] == pytest.approx(5 + 45 * (5 - 4) / 6) and 5 < row["p95_ms"] < row["p99_ms"] <= 50, row
        assert (row["ongoing"], row["queued"], row["healthy_replicas"], row["replica_starts"]) == (2, 3, 1, 1), row
    routes = stats_rows(by_route, "route")
    assert [(r["application"], r["route"]) for r in routes] == [("greeter", "/greet"), ("greeter", "/score")]
    for row in routes:  # as the proxies saw them
        assert row["requests_per_s"] == pytest.approx(2.0) and row["errors_per_s"] == pytest.approx(0.2), row
        assert row["p50_ms"] == pytest.approx(5 + 45 * (5 - 4) / 6) and 5 < row["p95_ms"] < row["p99_ms"] <= 50, row
        assert "ongoing" not in row, row
