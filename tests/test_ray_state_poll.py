"""What Ray never sends as events, recorded while a real cluster lived (tests/ray_programs/held_state.py under
`raysight run`: a named placement group with a task in it, then removed; objects held; two submitted jobs, one
exiting 3; a driver joining under a `raysight run` of its own, exiting 4) and answered after the cluster is gone, by a
restarted server, to Ray's own CLI (in this process, by click's runner, and one command of each family as a user
runs it) and SDK."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import httpx
import pytest
import yaml
from click.testing import CliRunner, Result

from tests.ray_programs.held_state import JOBS, JOINED_EXIT, OBJECT_BYTES, OBJECTS, PLACEMENT_GROUP, WIDE_CPUS
from tests.ray_scenarios import driver_env, raysight_cli, replayed

pytestmark = pytest.mark.ray
SIDES = "held-both-sides.json"
# What tells two rows of a resource apart, and the fields Ray's CLI lists of it (its base columns)
KEYS = {
    "actors": ("actor_id",),
    "tasks": ("task_id", "attempt_number"),
    "nodes": ("node_id",),
    "jobs": ("job_id", "submission_id"),
    "workers": ("worker_id",),
    "objects": ("object_id", "pid", "reference_type"),
    "placement_groups": ("placement_group_id",),
    "runtime_envs": ("node_id", "runtime_env"),
    "cluster_events": ("event_id",),
}
LISTED = {
    "actors": ("class_name", "state", "job_id", "name", "node_id", "pid", "ray_namespace"),
    "tasks": (
        "name",
        "state",
        "job_id",
        "actor_id",
        "type",
        "func_or_class_name",
        "parent_task_id",
        "node_id",
        "worker_id",
        "worker_pid",
        "error_type",
    ),
    "nodes": ("node_ip", "is_head_node", "state", "state_message", "node_name", "resources_total", "labels"),
    "jobs": ("entrypoint", "type", "status", "message", "error_type", "driver_info"),
    "workers": ("is_alive", "worker_type", "exit_type", "node_id", "ip", "pid"),
    "objects": ("object_size", "task_status", "attempt_number", "call_site", "type", "ip"),
    "placement_groups": ("name", "creator_job_id", "state"),
    "runtime_envs": ("success", "creation_time_ms"),
    "cluster_events": ("severity", "time", "source_type", "message"),
}


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a server started after the run, on what the run's server recorded."""
    program = ("-m", "tests.ray_programs.held_state", str(tmp_path_factory.getbasetemp() / SIDES))
    with replayed(tmp_path_factory.mktemp("store"), "held", *program) as server:
        yield server.url


@pytest.fixture(scope="module")
def sides(held: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """What Ray's state API listed of the nine resources, from the live cluster and from raysight, as the workload
    wrote it once raysight had had no event for 10 s and had polled since (tests/ray_programs/held_state.py)."""
    found: dict[str, dict[str, list[dict[str, Any]]]] = json.loads((tmp_path_factory.getbasetemp() / SIDES).read_text())
    return found


def ray_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Ray's own command, as a user runs it in a shell (no Ray of its own there); it must succeed."""
    command = [sys.executable, "-m", "ray.scripts.scripts", *args]
    done = subprocess.run(command, capture_output=True, text=True, env=driver_env(), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def ray_here(*args: str) -> Result:
    """Ray's own CLI in this process (click's runner); it must succeed."""
    from ray.scripts.scripts import cli

    done = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert done.exit_code == 0, done.output[-3000:]
    return done


def listed(held: str, resource: str, *options: str) -> list[dict[str, Any]]:
    """`ray list RESOURCE --format json …` against raysight: its rows."""
    rows: list[dict[str, Any]] = json.loads(
        ray_here("list", resource, "--address", held, "--format", "json", *options).stdout
    )
    return rows


def test_ray_list_of_all_nine_resources_is_the_workloads_truth(held: str) -> None:
    """`ray list` of each resource, long after the cluster is gone, against what the workload did."""
    actors = listed(held, "actors")  # the submitted jobs' supervisors, Ray's own actors
    assert sorted(a["name"] for a in actors) == sorted(f"_ray_internal_job_actor_{j}" for j in JOBS)
    assert {(a["class_name"], a["state"]) for a in actors} == {("JobSupervisor", "DEAD")}
    tasks = {t["name"]: t for t in listed(held, "tasks")}
    assert set(tasks) == {"in_group", "too_wide"} and tasks["in_group"]["state"] == "FINISHED"
    assert (tasks["too_wide"]["state"], tasks["too_wide"]["error_type"]) == ("FAILED", "TASK_CANCELLED")
    (node,) = listed(held, "nodes")
    assert node["is_head_node"] and node["state"] == "DEAD" and node["resources_total"]["CPU"] == 2.0
    jobs = {j["submission_id"] or j["job_id"]: j for j in listed(held, "jobs")}
    joined = next(j for j in jobs.values() if j["driver_exit_code"] == JOINED_EXIT)
    assert (joined["type"], joined["status"]) == ("DRIVER", "FAILED")  # Ray said SUCCEEDED; `raysight run` knew
    assert {k: jobs[k]["status"] for k in JOBS} == {"job-ok": "SUCCEEDED", "job-fails": "FAILED"}
    assert jobs["01000000"]["status"] == "SUCCEEDED" and len(jobs) == 4
    drivers = {w["worker_id"][:8]: w for w in listed(held, "workers", "--filter", "worker_type=DRIVER")}
    assert {"01000000", joined["job_id"]} < set(drivers) and not any(w["is_alive"] for w in drivers.values())
    assert drivers[joined["job_id"]]["pid"] == int(joined["driver_info"]["pid"])
    held_objects = [o for o in listed(held, "objects") if o["object_size"] == "1.000 MiB"]  # (as Ray's CLI prints)
    assert len(held_objects) >= OBJECTS and {o["reference_type"] for o in held_objects} >= {"LOCAL_REFERENCE"}
    (group,) = listed(held, "placement-groups")
    assert (group["name"], group["state"]) == (PLACEMENT_GROUP, "REMOVED")
    envs = listed(held, "runtime-envs")  # only the tracing hook `raysight run` gives each job (env vars alone, none)
    assert [(e["runtime_env"]["worker_process_setup_hook"], e["success"]) for e in envs] == [
        ("raysight.instrument.worker_setup", True)
    ]
    messages = [e["message"] for e in listed(held, "cluster-events")]
    assert "Completed a ray job job-fails with a status FAILED." in messages
    assert any(f"fulfill resource request {{'CPU': {float(WIDE_CPUS)}}}" in m for m in messages), messages


def test_ray_list_filters_detail_and_limit(held: str) -> None:
    assert [t["name"] for t in listed(held, "tasks", "--filter", "state!=FINISHED")] == ["too_wide"]
    (placed,) = listed(held, "tasks", "--filter", "name=in_group", "--detail")
    (group,) = listed(held, "placement-groups", "--detail")
    assert placed["placement_group_id"] == group["placement_group_id"]  # the task in its group, and the group's
    assert group["bundles"][0]["unit_resources"] == {"CPU": 1.0}
    (brief,) = listed(held, "tasks", "--filter", "name=in_group")  # without --detail: Ray's base fields alone
    assert placed["required_resources"] and brief.get("required_resources") is None
    with pytest.warns(UserWarning, match=r"Limit last 1 entries \(Total 2\)"):
        assert "Total: 1" in ray_here("list", "tasks", "--limit", "1", "--address", held).stdout
    own = httpx.get(f"{held}/api/raysight/placement_groups", params={"detail": "true"}).json()["rows"][0]
    assert own["placed"] == {"tasks": [placed["task_id"]], "actors": []}


def test_ray_get_by_id_and_a_missing_id(held: str) -> None:
    """`ray get` for each resource with IDs (YAML, all fields), one as a user runs it; a missing ID is said so."""
    ids = {
        "actors": listed(held, "actors")[0]["actor_id"],
        "placement-groups": listed(held, "placement-groups")[0]["placement_group_id"],
        "nodes": listed(held, "nodes")[0]["node_id"],
        "workers": listed(held, "workers")[0]["worker_id"],
        "tasks": listed(held, "tasks")[0]["task_id"],
        "objects": listed(held, "objects")[0]["object_id"],
    }
    for resource, entity in ids.items():
        got = ray_here("get", resource, entity, "--address", held).stdout
        assert entity in got and "not found" not in got, (resource, got)
    from ray.util import state  # the SDK's get_* too

    assert state.get_actor(ids["actors"], address=held).class_name == "JobSupervisor"
    assert state.get_node(ids["nodes"], address=held).is_head_node
    assert state.get_worker(ids["workers"], address=held).worker_id == ids["workers"]
    assert state.get_objects(ids["objects"], address=held)[0].object_id == ids["objects"]
    assert state.get_actor("0" * 32, address=held) is None
    (group,) = yaml.safe_load(ray_cli("get", "placement-groups", ids["placement-groups"], "--address", held).stdout)
    assert group["name"] == PLACEMENT_GROUP and group["bundles"]
    missing = ray_here("get", "actors", "0" * 32, "--address", held).stdout
    assert missing.strip() == f"Resource with id={'0' * 32} not found in the cluster."


def test_ray_summaries(held: str) -> None:
    tasks = ray_here("summary", "tasks", "--address", held).stdout
    assert "total_tasks: 2" in tasks and re.search(r"in_group +FINISHED: 1 +NORMAL_TASK", tasks), tasks
    actors = ray_here("summary", "actors", "--address", held).stdout
    assert re.search(r"JobSupervisor +DEAD: 2", actors), actors
    assert f"total_objects: {len(listed(held, 'objects'))}" in ray_here("summary", "objects", "--address", held).stdout
    from ray.util.state import summarize_actors, summarize_tasks  # the SDK's too

    by_class = summarize_actors(address=held)["cluster"]["summary"]
    assert by_class["JobSupervisor"]["state_counts"] == {"DEAD": 2}
    by_function = summarize_tasks(address=held)["cluster"]["summary"]
    assert by_function["too_wide"]["state_counts"] == {"FAILED": 1} and set(by_function) == {"in_group", "too_wide"}


def test_the_placement_group_its_bundles_and_its_history(held: str) -> None:
    from ray.util.state import get_placement_group, list_placement_groups

    (group,) = list_placement_groups(address=held, filters=[("name", "=", PLACEMENT_GROUP)], detail=True)
    assert group.state == "REMOVED" and group.creator_job_id == "01000000"
    assert [b["unit_resources"] for b in group.bundles] == [{"CPU": 1.0}]
    assert get_placement_group(group.placement_group_id, address=held).name == PLACEMENT_GROUP
    listed = ray_cli("list", "placement-groups", "--address", held).stdout
    assert PLACEMENT_GROUP in listed and "REMOVED" in listed
    ours = raysight_cli("list", "placement-groups", "--server", held, "--format", "json")
    assert [g["name"] for g in json.loads(ours.stdout)] == [PLACEMENT_GROUP], ours.stderr
    own = httpx.get(f"{held}/api/raysight/placement_groups", params={"detail": "true"}).json()["rows"][0]
    states = [h["state"] for h in own["state_history"]]
    assert states[-1] == "REMOVED" and "CREATED" in states and own["first_seen_ms"] < own["last_seen_ms"]


def test_submitted_jobs_with_their_real_outcome(held: str) -> None:
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(held)
    for submission_id, code in JOBS.items():
        info = client.get_job_info(submission_id)
        assert info.type == "SUBMISSION" and info.driver_exit_code == code, info
        assert info.status == ("SUCCEEDED" if code == 0 else "FAILED") and submission_id in info.entrypoint
    assert "exit code 3" in client.get_job_info("job-fails").message
    assert client.get_job_info("job-ok").runtime_env == {"env_vars": {"RAYSIGHT_HELD": "job-ok"}}
    (joined,) = [j for j in client.list_jobs() if j.driver_exit_code == JOINED_EXIT]
    assert client.get_job_status(joined.job_id) == "FAILED" and len(client.list_jobs()) == 4
    status = ray_here("job", "status", joined.job_id, "--address", held).stdout
    assert f"Job '{joined.job_id}' failed" in status and f"driver exited with code {JOINED_EXIT}" in status
    listed = ray_cli("job", "list", "--address", held).stdout
    assert all(submission_id in listed for submission_id in JOBS)
    assert "Job 'job-fails' failed" in ray_cli("job", "status", "job-fails", "--address", held).stdout
    for write in (
        lambda: client.submit_job(entrypoint="echo hi"),
        lambda: client.stop_job("job-ok"),
        lambda: client.delete_job("job-ok"),
    ):
        with pytest.raises(RuntimeError, match="status code 405: raysight records Ray clusters"):
            write()


def test_objects_held_as_last_sampled(held: str) -> None:
    from ray.util.state import list_objects, summarize_objects

    objects = list_objects(address=held, detail=True)
    big = [o for o in objects if o.object_size >= OBJECT_BYTES]
    assert len(big) >= OBJECTS and {o.type for o in big} == {"DRIVER"}
    assert "Objects are a sample" in ray_cli("list", "objects", "--address", held).stderr
    (by_callsite,) = summarize_objects(address=held)["cluster"]["summary"].values()
    assert by_callsite["total_objects"] == len(objects) and by_callsite["ref_type_counts"]
    assert "total_objects" in ray_cli("summary", "objects", "--address", held).stdout


def test_runtime_envs_cluster_events_and_the_doctor(held: str) -> None:
    from ray.util.state import list_cluster_events, list_runtime_envs

    polls = {p["resource"]: p for p in httpx.get(f"{held}/api/raysight/doctor").json()["polls"]}
    assert set(polls) == {
        "placement_groups",
        "objects",
        "runtime_envs",
        "cluster_events",
        "jobs",
        "drivers",
        "paused_workers",  # (Ray's own debugger's: none here)
        "cluster_status",
        "serve",  # (checked each poll; no ServeController here, so Serve's own route was never asked)
    }
    assert all(p["last_ok_ms"] for p in polls.values()), polls
    # Serve's route makes Ray's dashboard join the cluster as a driver: a session without Serve gains none
    jobs = httpx.get(f"{held}/api/raysight/jobs", params={"detail": "true", "include_driver": "true"}).json()["rows"]
    assert jobs and not [j for j in jobs if "dashboard" in (j["entrypoint"] or "")], jobs
    # what Ray listed at the last poll, whatever it was (its runtime envs: those its agent set up)
    assert len(list_runtime_envs(address=held, detail=True)) == polls["runtime_envs"]["rows"]
    events = list_cluster_events(address=held, detail=True)
    assert len(events) == polls["cluster_events"]["rows"] and all(e.message for e in events)


def test_answers_for_a_session_by_path(held: str) -> None:
    from ray.util.state import list_placement_groups

    (session,) = [s["session"] for s in httpx.get(f"{held}/api/raysight/sessions").json()["sessions"]]
    groups = list_placement_groups(address=f"{held}/sessions/{session}")
    assert [g.name for g in groups] == [PLACEMENT_GROUP]
    assert list_placement_groups(address=f"{held}/sessions/held")[0].name == PLACEMENT_GROUP  # by its label too


def test_status_at_a_moment_names_what_waited(held: str) -> None:
    """`raysight status --at` the moment the task that asked for more CPUs than the cluster had was cancelled: its
    demand pending; the last sample: none left; both with the cluster's CPUs used of total."""
    (wide,) = httpx.get(
        f"{held}/api/raysight/tasks", params={"filter": "func_or_class_name=too_wide", "detail": "true"}
    ).json()["rows"]
    cancelled = datetime.fromtimestamp((wide["end_time_ms"] - 1) / 1000, tz=timezone.utc).isoformat()
    then = raysight_cli("status", "--server", held, "--at", cancelled)
    assert then.returncode == 0, then.stderr
    assert f" {{'CPU': {float(WIDE_CPUS)}}}: 1+ pending tasks/actors" in then.stdout.splitlines(), then.stdout
    assert any(line.endswith("/2 CPU") for line in then.stdout.splitlines()), then.stdout
    last = json.loads(raysight_cli("status", "--server", held, "--format", "json").stdout)
    assert last["demands"] == [] and last["usage"]["CPU"]["total"] == 2.0 and len(last["alive_nodes"]) == 1
    got = raysight_cli("get", "tasks", wide["task_id"], "--server", held, "--format", "json")
    why = json.loads(got.stdout)["waited"]  # why it waited: how long, what the cluster had and what waited then
    assert {"shape": {"CPU": float(WIDE_CPUS)}, "count": 1} in why["demands"] and why["usage"]["CPU"]["total"] == 2.0
    assert why["pending_ms"] == wide["end_time_ms"] - wide["creation_time_ms"] and why["samples"] >= 1
    before = raysight_cli("status", "--server", held, "--at", "2000-01-01T00:00:00")
    assert "No sample of the cluster's resources" in before.stdout, before.stdout


def keyed(resource: str, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {json.dumps([row.get(k) for k in KEYS[resource]], sort_keys=True): row for row in rows}


@pytest.mark.parametrize("resource", list(KEYS))
def test_the_live_cluster_and_raysight_list_the_same_rows(sides: dict[str, Any], resource: str) -> None:
    """Ray's state API against the live cluster's dashboard and against raysight, the same call after 10 s without
    new events: the same rows with the same listed fields, but for the differences Ray's own make."""
    ray_rows, ours = (keyed(resource, sides[resource][side]) for side in ("ray", "raysight"))
    if resource == "objects":  # a sample: what the poller saw last, the held objects among them
        held = {k for k, o in ray_rows.items() if o["object_size"] >= OBJECT_BYTES}
        assert held and held <= set(ours), (sorted(ray_rows), sorted(ours))
        return
    if resource == "workers":  # drivers too (polled: Ray's stream reports no driver's worker), its hidden one too
        assert sum(w["worker_type"] == "DRIVER" for w in ours.values()) >= 2
    assert set(ray_rows) == set(ours), (sorted(set(ray_rows) ^ set(ours)), resource)
    failed_drivers = 0
    for key, theirs in ray_rows.items():
        differ = {f: (theirs.get(f), ours[key].get(f)) for f in LISTED[resource] if theirs.get(f) != ours[key].get(f)}
        if resource == "tasks" and differ.get("state", ("",))[0] == "RUNNING":
            differ.pop("state")  # Ray leaves some finished tasks RUNNING
        if resource == "jobs" and differ.get("status") == ("SUCCEEDED", "FAILED"):
            # Ray reports a failed driver of `ray.init()` as SUCCEEDED: `raysight run` saw it exit non-zero
            assert (ours[key]["type"], ours[key]["driver_exit_code"]) == ("DRIVER", JOINED_EXIT), ours[key]
            assert differ.pop("message") == (None, f"driver exited with code {JOINED_EXIT}")
            assert differ.pop("error_type") == (None, "JOB_ENTRYPOINT_COMMAND_ERROR")
            failed_drivers += differ.pop("status") is not None
        assert not differ, (resource, key, differ)
    assert failed_drivers == (resource == "jobs")


def test_bad_requests_get_the_error_rays_client_prints(held: str) -> None:
    """What Ray's CLI can send wrong (a limit past Ray's, an unknown session, a job that is not there) fails with
    Ray's own error reply, said plainly; what only a hand-made query sends gets Ray's envelope with a 400."""
    from ray.scripts.scripts import cli

    for args, says in (
        (["list", "placement-groups", "--limit", "20000"], "Given limit 20000 exceeds the supported limit 10000"),
        (["list", "cluster-events", "--address", f"{held}/sessions/nope"], "no session named 'nope'"),
    ):
        address = [] if "--address" in args else ["--address", held]
        done = CliRunner().invoke(cli, [*args, *address])
        assert done.exit_code != 0 and says in done.output, done.output
    missing = CliRunner().invoke(cli, ["job", "status", "nope", "--address", held])
    assert "status code 404: Job nope does not exist" in str(missing.exception)
    for query, says in (
        ("nonsense", "unknown resource 'nonsense'"),
        ("objects?limit=abc", "limit must be an integer"),
        ("runtime_envs?filter_keys=a&filter_keys=b&filter_predicates=%3D&filter_values=1", "equal numbers"),
        ("placement_groups?detail=maybe", "detail must be true or false"),
        (
            "cluster_events?filter_keys=colour&filter_predicates=%3D&filter_values=red",
            "filter column colour is not supported",
        ),
        ("placement_groups?filter_keys=name&filter_predicates=%3E&filter_values=a", "predicate"),
    ):
        answer = httpx.get(f"{held}/api/v0/{query}")
        body = answer.json()
        assert answer.status_code == 400 and body["result"] is False and says in body["msg"], (query, body)


def test_what_ray_runs_for_itself_and_ends_normally_is_no_failure(held: str) -> None:
    """Submitting jobs makes Ray's dashboard a driver of its own (job 02000000), which runs until the cluster ends and
    starts a JobSupervisor actor per job, which exits as asked (``exit_actor()``) when its job is over: neither is a
    failure. What failed is what the workload made fail: a task it cancelled and a driver exiting 4."""
    listed = raysight_cli("errors", "--server", held, "--format", "json")
    assert listed.returncode == 0, listed.stderr
    groups = {(g["kind"], g["error_type"]) for g in json.loads(listed.stdout)["groups"]}
    assert groups == {("task", "TASK_CANCELLED"), ("job", "JOB_FAILED")}
    with httpx.Client(base_url=held) as http:
        drivers = http.get(
            "/api/raysight/tasks", params={"detail": "true", "filter": "type=DRIVER_TASK", "include_driver": "true"}
        ).json()["rows"]
    by_job = {t["job_id"]: t for t in drivers}
    dashboards = by_job["02000000"]  # (Ray never sent its end: the cluster ended with it)
    assert (dashboards["state"], dashboards["state_inferred"], dashboards["error_type"]) == ("FINISHED", True, None)
    assert dashboards["inferred_reason"].startswith("a driver's task lasts as long as its driver, which ran until")
