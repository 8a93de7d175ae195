"""What raysight's poller of what Ray never sends as events costs a live cluster, and how fast Ray's own CLI reads
what it recorded.

1. Cost: one local Ray (`ray.init(num_cpus=2)`, its events exported to a `raysight server`) runs rounds of
   trivial tasks (batches of --tasks: submit all, then `ray.get`) for --round-s seconds each, alternately with the
   poller polling its dashboard every --every seconds (every resource it polls: placement groups, objects, runtime
   envs, cluster events, jobs, drivers, cluster status; `raysight poll` in a process of its own, as `raysight run`
   polls beside the driver) and without; prints each round, the medians and their ratio. Aim: >= 0.97x. A round
   lasts a whole number of intervals: the poller, resumed at its start, polls at once and then every interval, as
   often as it does when never held. Then each resource's own cost: the CPU time all processes spend (Ray's,
   raysight's) on one poll of it, sent to the server, beside one poll of everything.
2. Reads: with a named placement group and a submitted job on that cluster, polled, the wall time of
   `ray list placement-groups` and `ray job list` (Ray's own CLI, a fresh process each) against Ray's dashboard and
   against raysight, interleaved, and of the HTTP request `ray list placement-groups` sends.
Run: .venv/bin/python benchmarks/poller.py [--rounds 9] [--round-s 10] [--tasks 2000] [--every 5] [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import httpx
import ray
from ray.job_submission import JobStatus, JobSubmissionClient
from ray.util.placement_group import placement_group

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.list_latency import url_with  # noqa: E402 (after the sys.path line)
from raysight import wire  # noqa: E402
from raysight.agent.state_poll import (  # noqa: E402
    TIMEOUT_S,
    due,
    poll,
    poll_dashboard,
    ray_auth_headers,
    session_name,
)
from raysight.cli.run import free_port, ray_env  # noqa: E402
from raysight.client import Client  # noqa: E402
from tests.ray_scenarios import ServerProcess, driver_env  # noqa: E402

AIM = 0.97


@ray.remote
def noop() -> None:
    return None


def tasks_per_s(batch: int, seconds: float) -> float:
    """Tasks run a second, in batches of ``batch``, for at least ``seconds``."""
    started, done = time.perf_counter(), 0
    while (elapsed := time.perf_counter() - started) < seconds:
        ray.get([noop.remote() for _ in range(batch)])
        done += batch
    return done / elapsed


class Polling:
    """`raysight poll` in a process of its own, as `raysight run` polls beside the driver: started once (its start is
    no part of a round), then let run (SIGCONT) during a round with the poller and held (SIGSTOP) otherwise."""

    def __init__(self, server: str, dashboard: str, every: float) -> None:
        command = [sys.executable, "-m", "raysight", "poll", "--dashboard", dashboard, "--server", server]
        self.proc = subprocess.Popen([*command, "--every", str(every)], stderr=subprocess.DEVNULL)
        time.sleep(3)  # imported, its first poll done
        self.proc.send_signal(signal.SIGSTOP)

    @contextmanager
    def running(self) -> Iterator[None]:
        self.proc.send_signal(signal.SIGCONT)
        try:
            yield
        finally:
            self.proc.send_signal(signal.SIGSTOP)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        self.proc.wait(timeout=30)


def median_ms(values: list[float]) -> str:
    low, high = min(values) * 1000, max(values) * 1000
    return f"median {statistics.median(values) * 1000:7.1f} ms ({low:.1f}-{high:.1f})"


def cli_wall(args: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ray.scripts.scripts", *args], capture_output=True, text=True, env=driver_env()
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"ray {' '.join(args)} failed: {done.stderr[-2000:]}")
    return elapsed


def cost(server: str, dashboard: str, rounds: int, round_s: float, tasks: int, every: float) -> None:
    print(f"== the poller's cost: rounds of {round_s:g} s, polling every {every:g} s or not, {rounds} rounds each ==")
    tasks_per_s(tasks, 1)  # warm the workers
    poller = Polling(server, dashboard, every)
    runs: dict[str, list[float]] = {"without": [], "with": []}
    try:
        for i in range(rounds):
            for config in ("without", "with") if i % 2 == 0 else ("with", "without"):
                with poller.running() if config == "with" else nullcontext():
                    rate = tasks_per_s(tasks, round_s)
                runs[config].append(rate)
                print(f"  round {i + 1}, {config:<7} poller: {rate:8,.0f} tasks/s")
    finally:
        poller.stop()
    without, with_ = statistics.median(runs["without"]), statistics.median(runs["with"])
    # each round beside its neighbour of the other kind: the machine's drift (±15% here) falls out of the ratio
    paired = statistics.median(w / o for w, o in zip(runs["with"], runs["without"]))
    verdict = "met" if paired >= AIM else "NOT met"
    print(f"  median: {without:,.0f} tasks/s without, {with_:,.0f} with: {with_ / without:.3f}x")
    print(f"  median of the rounds' paired ratios: {paired:.3f}x (aim >= {AIM}: {verdict})")


def cpu_s() -> float:
    """The CPU time of every process on this machine so far (Ray's and raysight's among them)."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def each_resource(server: str, dashboard: str, tries: int = 9) -> None:
    print(f"== each resource's cost: the CPU time of one poll of it, sent to the server (median of {tries}) ==")
    idle = cpu_s()
    time.sleep(3)
    background = (cpu_s() - idle) / 3  # the cluster's own, a second
    headers = ray_auth_headers(os.environ)
    with Client(server) as client, httpx.Client(timeout=TIMEOUT_S, headers=headers) as http:
        session = session_name(http, dashboard)
        for resource in [*due(0), "all"]:
            spent = []
            for _ in range(tries):
                started, wall = cpu_s(), time.perf_counter()
                if resource == "all":
                    poll_dashboard(client, None, dashboard, http, 0, session)
                else:
                    client.ray_state(
                        {"session": session, "polled_ns": time.time_ns(), **poll(http, dashboard, [resource])}, None
                    )
                spent.append(cpu_s() - started - background * (time.perf_counter() - wall))
                time.sleep(0.3)
            print(f"  {resource:<17} {statistics.median(spent) * 1000:6.0f} ms CPU")
    print(f"  (the cluster's own, idle: {background * 1000:.0f} ms CPU a second, taken off each)")


def reads(server: str, dashboard: str, runs: int) -> None:
    print(f"== Ray's CLI against Ray's dashboard and against raysight, {runs} runs each, interleaved ==")
    group = placement_group([{"CPU": 1}], name="bench-pg")
    ray.get(group.ready(), timeout=60)
    jobs = JobSubmissionClient(dashboard)
    job = jobs.submit_job(entrypoint=f"{sys.executable} -c 'print(1)'")
    deadline = time.monotonic() + 120
    while jobs.get_job_status(job) not in (JobStatus.SUCCEEDED, JobStatus.FAILED):
        if time.monotonic() > deadline:
            raise SystemExit("the submitted job did not end within 120 s")
        time.sleep(0.5)
    headers = ray_auth_headers(os.environ)
    with Client(server) as client, httpx.Client(timeout=TIMEOUT_S, headers=headers) as http:
        poll_dashboard(client, None, dashboard, http, 0)
        query = [("limit", "100"), ("timeout", "24"), ("detail", "False"), ("server_timeout_multiplier", "0.8")]
        listed = wire.path(wire.RAY_STATE, resource="placement_groups")
        targets = {"Ray's dashboard": dashboard, "raysight": server}
        times: dict[str, dict[str, list[float]]] = {t: {"http": [], "pgs": [], "jobs": []} for t in targets}
        for _ in range(runs):
            for name, url in targets.items():
                started = time.perf_counter()
                http.get(url_with(url, listed, query)).raise_for_status()
                times[name]["http"].append(time.perf_counter() - started)
                times[name]["pgs"].append(cli_wall(["list", "placement-groups", "--address", url]))
                times[name]["jobs"].append(cli_wall(["job", "list", "--address", url]))
    for what, title in (
        ("http", "GET /api/v0/placement_groups"),
        ("pgs", "ray list placement-groups"),
        ("jobs", "ray job list"),
    ):
        ray_s, ours = statistics.median(times["Ray's dashboard"][what]), statistics.median(times["raysight"][what])
        print(f"  {title}")
        for name in targets:
            print(f"    {name:<16} {median_ms(times[name][what])}")
        print(f"    Ray's dashboard / raysight: {ray_s / ours:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--round-s", type=float, default=10.0)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--every", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="raysight-poller-bench-") as tmp:
        server = ServerProcess(Path(tmp)).start()
        try:
            os.environ.update(ray_env(server.url, cluster="bench-poller"))
            context = ray.init(num_cpus=2, include_dashboard=True, dashboard_port=free_port(), log_to_driver=False)
            try:
                dashboard = f"http://{context.dashboard_url}"
                if args.round_s % args.every:
                    parser.error("--round-s must be a whole number of --every intervals")
                cost(server.url, dashboard, args.rounds, args.round_s, args.tasks, args.every)
                each_resource(server.url, dashboard)
                reads(server.url, dashboard, args.runs)
            finally:
                ray.shutdown()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
