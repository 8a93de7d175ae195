"""The agent's metrics, without Ray: each process's stats (agent/process_stats.py), NVML's answers folded
(agent/gpu.py), the host's targets, families kept or dropped at the source, and one scraper a session per host
(agent/metrics_scrape.py), scraping a real HTTP target and real processes."""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from raysight.agent import node_watch
from raysight.agent.gpu import GpuProcess, memory_by_pid, utilization_by_pid
from raysight.agent.metrics_scrape import Families, HostScraper, host_targets, sd_targets
from raysight.agent.process_stats import (
    RayProcess,
    Usage,
    component,
    families,
    head_node,
    page,
    session_processes,
    usage,
    workers_by_pid,
)
from raysight.cli import main

SESSION = "session_2026-11-24_10-00-00_000000_1"
NODE, OTHER_NODE = "ab" * 28, "cd" * 28
WORKER, DRIVER = "11" * 28, "22" * 28


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        (["ray::IDLE"], "ray::IDLE"),
        (["ray::Shop.sell"], "ray::Shop.sell"),
        (["/venv/lib/ray/core/src/ray/raylet/raylet", "--node_id=ab"], "raylet"),
        (["/venv/bin/python", "-u", "/venv/lib/ray/dashboard/agent.py", "--x=1"], "agent"),
        (["/usr/bin/python3.11", "-c", "print()"], "python3.11"),
        ([], "unknown"),
    ],
)
def test_a_process_is_named_as_rays_component_label_names_it(cmdline: list[str], expected: str) -> None:
    assert component(cmdline) == expected


def test_workers_and_the_head_node_are_read_from_the_session_directorys_names(tmp_path: Path) -> None:
    names = [
        f"python-core-worker-{WORKER}_101.log",
        f"python-core-driver-{DRIVER}_7.log",
        f"worker-{WORKER}-01000000-101.out",
        f"python-core-worker-{'33' * 28}_101.log",  # pid 101 reused, by the worker named last
    ]
    assert workers_by_pid(names) == {101: "33" * 28, 7: DRIVER}
    (tmp_path / "logs").mkdir()
    assert head_node(tmp_path) is None
    for name in (f"gcs_server_port_{NODE}", f"metrics_export_port_{OTHER_NODE}"):
        (tmp_path / name).write_text("1")
    assert head_node(tmp_path) == NODE


def test_nvmls_answers_are_folded_per_process() -> None:
    procs = [SimpleNamespace(pid=1, usedGpuMemory=100), SimpleNamespace(pid=1, usedGpuMemory=50)]  # compute, graphics
    assert memory_by_pid([*procs, SimpleNamespace(pid=2, usedGpuMemory=None)]) == {1: 150, 2: None}
    samples = [
        SimpleNamespace(pid=1, timeStamp=10, smUtil=90),  # read before: not counted again
        SimpleNamespace(pid=1, timeStamp=20, smUtil=40),
        SimpleNamespace(pid=1, timeStamp=30, smUtil=60),
        SimpleNamespace(pid=2, timeStamp=25, smUtil=5),
    ]
    assert utilization_by_pid(samples, 10) == ({1: 50.0, 2: 5.0}, 30)
    assert utilization_by_pid([], 30) == ({}, 30)


def page_samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """A page's samples by name and labels, as Prometheus reads them (the page writes labels sorted by name, and a
    large value as ``1.587544064e+09``)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples
    }


def check_gpu_use_reported(process: RayProcess, seen: GpuProcess) -> None:
    """The page of ``process`` using a GPU as ``seen`` read it, beside another user's process on the same GPU: its
    memory and utilization labelled by the process and the GPU; nothing of the other's. (tests/test_gpu.py checks a
    real read so.)"""
    stranger = GpuProcess(seen.pid + 1, seen.index, seen.uuid, 1 << 20, 5.0)
    samples = page_samples(page(families(SESSION, [Usage(process, 1.0, 1 << 30, 1 << 29, 4, 10)], [seen, stranger])))
    of_process = {"SessionName": SESSION, "NodeId": process.node_id or "", "pid": str(process.pid)}
    of_process |= {"Component": process.component, "WorkerId": process.worker_id or ""}
    on_gpu = frozenset({**of_process, "GpuIndex": str(seen.index), "GpuUuid": seen.uuid}.items())
    assert samples[("raysight_process_gpu_memory_bytes", on_gpu)] == seen.memory_bytes
    assert samples[("raysight_process_gpu_utilization_percent", on_gpu)] == seen.utilization
    assert not any(("pid", str(stranger.pid)) in labels for _, labels in samples)


def test_a_gpu_process_read_as_on_an_h200_is_labelled_by_its_process() -> None:
    """What NVML read on an NVIDIA H200 of a process holding a 768 MiB tensor (written ``1.587544064e+09``)."""
    seen = GpuProcess(4242, 0, "GPU-5c1f3e8a-0d7b-4c39-9f4e-2b6a1d0e7c11", 1_587_544_064, 86.0)
    check_gpu_use_reported(RayProcess(4242, NODE, "ray::Trainer.fit", WORKER), seen)


def test_the_page_labels_each_process_and_reports_only_the_sessions_gpu_use() -> None:
    worker = RayProcess(101, NODE, "ray::Shop", WORKER)
    raylet = RayProcess(100, NODE, "raylet", None)
    usages = [Usage(worker, 2.5, 300 << 20, 200 << 20, 12, 40), Usage(raylet, 1.0, 30 << 20, None, 20, None)]
    gpus = [GpuProcess(101, 0, "GPU-1", 1 << 30, 75.0), GpuProcess(999, 0, "GPU-1", 1 << 20, 10.0)]
    samples = page_samples(page(families(SESSION, usages, gpus)))
    of_worker = {("SessionName", SESSION), ("NodeId", NODE), ("pid", "101"), ("Component", "ray::Shop")}
    of_worker.add(("WorkerId", WORKER))
    on_gpu = frozenset(of_worker | {("GpuIndex", "0"), ("GpuUuid", "GPU-1")})
    of_raylet = frozenset({("SessionName", SESSION), ("NodeId", NODE), ("pid", "100"), ("Component", "raylet")})
    assert samples[("raysight_process_cpu_seconds_total", frozenset(of_worker))] == 2.5
    assert samples[("raysight_process_unique_memory_bytes", frozenset(of_worker))] == 200 << 20
    assert samples[("raysight_process_gpu_memory_bytes", on_gpu)] == 1 << 30
    assert samples[("raysight_process_gpu_utilization_percent", on_gpu)] == 75.0
    # (an empty WorkerId is written, and kept as no label: prometheus_client's parser keeps it empty)
    assert samples[("raysight_process_threads", of_raylet | {("WorkerId", "")})] == 20
    assert not any(("pid", "999") in labels for _, labels in samples)  # another user's GPU process
    assert not any(n == "raysight_process_open_fds" and ("pid", "100") in labels for n, labels in samples)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[tuple[Path, dict[node_watch.Key, int], subprocess.Popen[bytes]]]:
    """A session directory whose "raylet" is a real shell with a child (its "worker"), whose "GCS" is another, and
    whose driver is this test's process; and what :func:`node_watch.running` would say of them."""
    directory = tmp_path / SESSION
    (directory / "logs").mkdir(parents=True)
    raylet = subprocess.Popen(["sh", "-c", "sleep 60 & wait"])
    gcs = subprocess.Popen(["sleep", "60"])
    deadline = time.monotonic() + 10
    while not ((children := _children(raylet.pid)) and _command(children[0]) == "sleep"):  # forked, then exec'd
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (directory / "logs" / f"python-core-worker-{WORKER}_{children[0]}.log").touch()
    (directory / "logs" / f"python-core-driver-{DRIVER}_{os.getpid()}.log").touch()
    (directory / f"gcs_server_port_{OTHER_NODE}").write_text("6379")
    running = {(SESSION, node_watch.RAYLET, NODE): raylet.pid, (SESSION, node_watch.GCS, ""): gcs.pid}
    yield directory, running, raylet
    for proc in (raylet, gcs):
        proc.kill()
        proc.wait()
    for child in children:
        with suppress(ProcessLookupError):
            os.kill(child, 9)


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def test_a_sessions_processes_are_its_raylets_tree_its_gcs_and_its_live_drivers(session: Any) -> None:
    directory, running, raylet = session
    (worker_pid,) = _children(raylet.pid)
    found = {p.pid: p for p in session_processes(directory, running)}
    assert found[raylet.pid] == RayProcess(raylet.pid, NODE, "sh", None)
    assert found[worker_pid] == RayProcess(worker_pid, NODE, "sleep", WORKER)
    gcs_pid = running[(SESSION, node_watch.GCS, "")]
    assert found[gcs_pid] == RayProcess(gcs_pid, OTHER_NODE, "sleep", None)  # on the head node, by its port file
    assert found[os.getpid()].worker_id == DRIVER and found[os.getpid()].node_id == NODE  # the host's only node
    assert len(found) == 4
    mine = usage(found[os.getpid()])
    assert mine is not None and mine.cpu_seconds > 0 and mine.rss_bytes > 10 << 20 and mine.threads >= 1
    assert (
        mine.fds is not None and mine.fds >= 3 and mine.uss_bytes is not None and 0 < mine.uss_bytes <= mine.rss_bytes
    )


def test_a_driver_log_whose_pid_another_process_took_names_no_driver(session: Any) -> None:
    directory, running, _ = session
    log = directory / "logs" / f"python-core-driver-{DRIVER}_{os.getpid()}.log"
    os.utime(log, (0, 0))  # last written long before this process started: its driver is gone
    assert os.getpid() not in {p.pid for p in session_processes(directory, running)}
    assert usage(RayProcess(2**22 + 1, None, "x", None)) is None  # (no such pid: gone)


PAGE = """# HELP ray_node_cpu_count CPUs.
# TYPE ray_node_cpu_count gauge
ray_node_cpu_count{ip="127.0.0.1"} 2.0
# HELP ray_component_rss_mb RSS.
# TYPE ray_component_rss_mb gauge
ray_component_rss_mb{Component="raylet"} 30.0
ray_tasks{State="RUNNING"} 3.0
ray_tasks_total 1
"""


def test_families_are_kept_and_dropped_by_whole_name_with_their_comments() -> None:
    assert Families().page(PAGE) == PAGE
    dropped = Families(drop=re.compile("ray_component_.*")).page(PAGE)
    assert (
        "ray_component" not in dropped and "ray_node_cpu_count{" in dropped and "# TYPE ray_node_cpu_count" in dropped
    )
    kept = Families(keep=re.compile("ray_tasks")).page(PAGE)
    assert kept == 'ray_tasks{State="RUNNING"} 3.0\n'  # (whole names: not ray_tasks_total)
    both = Families(keep=re.compile("ray_.*"), drop=re.compile("ray_node_.*|ray_tasks.*")).page(PAGE)
    assert [line.split("{")[0] for line in both.splitlines() if not line.startswith("#")] == ["ray_component_rss_mb"]


def test_a_hosts_targets_are_its_nodes_labelled_and_the_service_discovery_targets_here(tmp_path: Path) -> None:
    (tmp_path / f"metrics_export_port_{NODE}").write_text("9001\n")
    (tmp_path / f"metrics_export_port_{OTHER_NODE}").write_text("9002\n")  # a node whose raylet is not seen here
    sd = '[{"labels": {"job": "ray"}, "targets": ["10.0.0.5:9001", "10.0.0.5:44217", "10.0.0.9:9003"]}, {"x": 1}]'
    (tmp_path / "prom_metrics_service_discovery.json").write_text(sd)
    assert [t.instance for t in sd_targets(tmp_path)] == ["10.0.0.5:9001", "10.0.0.5:44217", "10.0.0.9:9003"]
    found = host_targets(tmp_path, {NODE: "10.0.0.5"}, {"10.0.0.5", "127.0.0.1"})
    assert [(t.instance, t.job, dict(t.labels)) for t in found] == [
        ("10.0.0.5:9001", "ray", {"NodeId": NODE}),
        ("10.0.0.5:44217", "ray", {}),  # the head's autoscaler, say: here, but no node's
    ]
    assert host_targets(tmp_path / "nope", {}, {"10.0.0.5"}) == []


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_one_scraper_a_session_per_host_sends_its_targets_and_processes_families_filtered(session: Any) -> None:
    directory, running, raylet = session
    target = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    port = target.server_address[1]
    (directory / "prom_metrics_service_discovery.json").write_text(f'[{{"targets": ["127.0.0.1:{port}"]}}]')
    sent: list[dict[str, Any]] = []
    first = HostScraper(sent.append, Families(drop=re.compile("ray_component_.*")))
    second, third, fourth = (HostScraper(sent.append) for _ in range(3))
    try:
        assert first.scrape_session(directory, running) == 2
        by_job = {body["target"]["job"]: body for body in sent}
        assert by_job["ray"]["target"] == {"instance": f"127.0.0.1:{port}", "job": "ray", "labels": {}}
        assert "ray_node_cpu_count{" in by_job["ray"]["text"] and "ray_component" not in by_job["ray"]["text"]
        assert f'pid="{raylet.pid}"' in by_job["raysight"]["text"] and by_job["raysight"]["session"] == SESSION
        assert second.scrape_session(directory, running) == 0  # the first holds the session's scrape lock
        first.close()
        assert second.scrape_session(directory, running) == 2  # and once it is gone, the second takes over
        second.close()
        (directory / "raysight_scrape.lock").unlink()
        (directory / "raysight_scrape.lock").mkdir()  # a lock that cannot be taken (a directory it may not write)
        assert third.scrape_session(directory, running) == 2 and fourth.scrape_session(directory, running) == 2
    finally:
        for scraper in (first, second, third, fourth):
            scraper.close()
        target.shutdown()


def test_the_metrics_options_take_regular_expressions() -> None:
    runner = CliRunner()
    bad = runner.invoke(main, ["agent", "--metrics-drop", "ray_(", "--once"])
    assert bad.exit_code == 2 and "not a regular expression" in bad.output
    on_ray = runner.invoke(main, ["agent", "--on-ray", "--metrics-keep", "ray_.*"])
    assert on_ray.exit_code == 2 and "--metrics-keep/--metrics-drop are for an agent run here" in on_ray.output
    run = runner.invoke(main, ["run", "--metrics-keep", "(", "--", "true"])
    assert run.exit_code == 2 and "not a regular expression" in run.output
