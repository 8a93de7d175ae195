"""Run under `raysight run`: what Ray never sends as events, held while raysight's poller looks — a named placement
group with a task in it (then removed), objects in the object store, a task asking for more CPUs than the cluster has
(pending until cancelled), two submitted jobs, one exiting non-zero (the other with a runtime env of its own), and a
driver of `ray.init()` joining the cluster under a `raysight run` of its own, exiting non-zero."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import ray
from ray.job_submission import JobStatus, JobSubmissionClient
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from raysight.cli.run import wait_until_quiet
from raysight.client import Client
from tests.ray_programs import raysight_server, wait_until_raysight, wait_until_raysight_sees

PLACEMENT_GROUP = "pg-held"
JOBS = {"job-ok": 0, "job-fails": 3}  # submission ID → the exit code of its entrypoint
OBJECTS = 3
OBJECT_BYTES = 1 << 20
WIDE_CPUS = 4
JOINED_EXIT = 4  # the exit code of the driver that joins the cluster


@ray.remote(num_cpus=1)
def in_group() -> str:
    return "placed"


@ray.remote(num_cpus=WIDE_CPUS)
def too_wide() -> None:
    """Never runs: the cluster has 2 CPUs. It waits, a pending demand, until cancelled."""


def wait_jobs(client: JobSubmissionClient, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(client.get_job_status(j) in (JobStatus.SUCCEEDED, JobStatus.FAILED) for j in JOBS):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the submitted jobs did not end within {timeout_s} s")
        time.sleep(0.5)


def polled_jobs_and_objects(client: Client) -> bool:
    jobs = {j["submission_id"]: j["status"] for j in client.list("jobs", limit=None)["rows"]}
    ended = all(jobs.get(j) == ("SUCCEEDED" if code == 0 else "FAILED") for j, code in JOBS.items())
    return ended and client.list("objects", limit=0)["total"] >= OBJECTS


def polled_demand(client: Client) -> bool:
    return {"CPU": float(WIDE_CPUS)} in [d["shape"] for d in client.status().get("demands", [])]


def polled_group_removed(client: Client) -> bool:
    return any(
        g["state"] == "REMOVED" for g in client.list("placement_groups", filters=[f"name={PLACEMENT_GROUP}"])["rows"]
    )


NINE = ("actors", "tasks", "nodes", "jobs", "workers", "objects", "placement_groups", "runtime_envs", "cluster_events")


def quiet_since(client: Client, quiet_s: float, timeout_s: float) -> None:
    """Wait until the server has received no batch of Ray's events for ``quiet_s``."""
    deadline = time.monotonic() + timeout_s
    last, since = client.info()["events_received"], time.monotonic()
    while time.monotonic() - since < quiet_s:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Ray's events did not stop for {quiet_s} s within {timeout_s} s")
        time.sleep(0.25)
        if (received := client.info()["events_received"]) != last:
            last, since = received, time.monotonic()


def both_sides(dashboard: str, out: Path) -> None:
    """Write what Ray's state API lists of the nine resources from the live cluster and from raysight, once raysight
    has had no event for 10 s, has folded them all, and has polled since: for the test to compare."""
    from ray.util import state

    server = raysight_server()
    with Client(server) as client:
        quiet_since(client, 10, 90)  # Ray's events (the node agent ships log lines all the while)
        wait_until_quiet(client, quiet_s=0.5)  # and all folded
    settled = time.time_ns() // 1_000_000
    wait_until_raysight(
        lambda c: all(
            p["last_ok_ms"] and p["last_ok_ms"] > settled for p in c.doctor()["polls"] if p["resource"] != "objects"
        ),
        "a poll after the cluster settled",
        60,
    )
    sides = {"ray": dashboard, "raysight": server}
    listed = {
        resource: {
            side: [
                row.dict() if hasattr(row, "dict") else dict(vars(row))
                for row in getattr(state, f"list_{resource}")(
                    address=address, limit=10_000, detail=True, raise_on_missing_output=False
                )
            ]
            for side, address in sides.items()
        }
        for resource in NINE
    }
    out.write_bytes(orjson.dumps(listed, default=str))


def joined_driver(server: str, gcs_address: str) -> None:
    """A driver that joins this cluster under a `raysight run` of its own, and exits ``JOINED_EXIT``: Ray calls its job
    SUCCEEDED; `raysight run` reports its exit."""
    program = f"import ray; ray.init(); raise SystemExit({JOINED_EXIT})"
    command = [sys.executable, "-m", "raysight", "run", "--server", server, "--", sys.executable, "-c", program]
    done = subprocess.run(command, env={**os.environ, "RAY_ADDRESS": gcs_address}, timeout=120, capture_output=True)
    if done.returncode != JOINED_EXIT:
        raise RuntimeError(f"the joined driver exited {done.returncode}: {done.stderr.decode()[-2000:]}")


def main() -> None:
    context = ray.init(num_cpus=2)
    group = placement_group([{"CPU": 1}], strategy="PACK", name=PLACEMENT_GROUP)
    ray.get(group.ready(), timeout=60)
    strategy = PlacementGroupSchedulingStrategy(placement_group=group)
    print(ray.get(in_group.options(scheduling_strategy=strategy).remote()))
    held = [ray.put(bytes(OBJECT_BYTES)) for _ in range(OBJECTS)]
    waiting = too_wide.remote()
    wait_until_raysight(polled_demand, "the pending demand, sampled", 60)
    ray.cancel(waiting)
    client = JobSubmissionClient(f"http://{context.dashboard_url}")
    for submission_id, code in JOBS.items():
        client.submit_job(
            submission_id=submission_id,
            entrypoint=f"{sys.executable} -c \"print('{submission_id}'); raise SystemExit({code})\"",
            runtime_env={"env_vars": {"RAYSIGHT_HELD": submission_id}} if code == 0 else None,
        )
    wait_jobs(client, 120)
    joined_driver(raysight_server(), context.address_info["gcs_address"])
    wait_until_raysight_sees("FINISHED", {"in_group"}, 60)
    wait_until_raysight(polled_jobs_and_objects, "the jobs' ends and the objects held, polled", 60)
    if len(sys.argv) > 1:
        both_sides(f"http://{context.dashboard_url}", Path(sys.argv[1]))
    remove_placement_group(group)
    wait_until_raysight(polled_group_removed, "the placement group removed, polled", 60)
    del held
    ray.shutdown()


if __name__ == "__main__":
    main()
