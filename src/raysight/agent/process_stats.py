"""What each of a Ray session's processes on this host uses, which Ray does not export per process: CPU time, resident
and unique memory, threads and open files of every raylet, GCS, worker and driver (Ray's ``ray_component_*`` sum its
workers by title, ``pid=""``), and its share of the host's NVIDIA GPUs (``agent/gpu.py``).

Read every scrape, as a Prometheus page of its own (``raysight_process_*``, target job ``raysight``), each series
labelled ``SessionName``, ``NodeId``, ``pid``, ``Component`` (the process's title, as Ray names components) and, for a
worker or a driver, ``WorkerId``: the key that joins a process's series to its worker, and so to the worker's actor and
tasks. A session's processes are its raylets' (``agent/node_watch.py``) and everything they started (workers, the
dashboard and runtime-env agents), its GCS, and its drivers alive on this host (by their core logs)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import psutil
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from raysight.agent import node_watch
from raysight.agent.gpu import GpuProcess, GpuReader

JOB = "raysight"
_CORE_LOG = re.compile(r"python-core-(?P<kind>worker|driver)-(?P<worker>[0-9a-f]{56})_(?P<pid>\d+)\.log")


@dataclass(frozen=True)
class RayProcess:
    """A process of the session: on node ``node_id`` (None when this host holds several of its nodes and the process
    is none's, a driver say), titled ``component``, running worker ``worker_id`` if it is a worker or a driver."""

    pid: int
    node_id: str | None
    component: str
    worker_id: str | None


@dataclass(frozen=True)
class Usage:
    """What a process used, read now: CPU seconds (user and system), bytes resident and unique to it (None where its
    memory map is not ours to read), its threads and open file descriptors."""

    process: RayProcess
    cpu_seconds: float
    rss_bytes: int
    uss_bytes: int | None
    threads: int
    fds: int | None


def component(cmdline: list[str]) -> str:
    """A process's name as Ray's ``Component`` label gives it: the title a worker sets (``ray::IDLE``,
    ``ray::Actor.method``), else its program (``raylet``, ``gcs_server``), else for Python the script's name
    (``agent``, ``default_worker``)."""
    if not cmdline or not cmdline[0]:
        return "unknown"
    if cmdline[0].startswith("ray::"):
        return cmdline[0].strip()
    program = os.path.basename(cmdline[0].split(" ")[0])
    if program.startswith("python"):
        script = next((arg for arg in cmdline[1:] if arg.endswith(".py")), None)
        return os.path.basename(script)[: -len(".py")] if script else program
    return program


def workers_by_pid(log_names: Iterable[str]) -> dict[int, str]:
    """pid → worker ID, from the names of a session's core logs (``python-core-worker-<worker id>_<pid>.log``, and
    ``python-core-driver-…`` for drivers); of a pid Ray reused, the worker named last in ``log_names``."""
    return {int(m["pid"]): m["worker"] for name in log_names if (m := _CORE_LOG.fullmatch(name))}


def head_node(session_dir: Path) -> str | None:
    """The node whose GCS ran in this session directory, by its ``gcs_server_port_<node id>`` file."""
    return next((node for what, node, _ in node_watch.port_files(session_dir) if what == "gcs_server"), None)


def session_processes(session_dir: Path, running: Mapping[node_watch.Key, int]) -> list[RayProcess]:
    """The session's processes alive on this host, given the raylets and GCSes ``running`` here
    (:func:`agent.node_watch.running`)."""
    session = session_dir.name
    logs = sorted(session_dir.glob("logs/python-core-*.log"), key=_mtime)
    workers = workers_by_pid(path.name for path in logs)
    raylets = {pid: key[2] for key, pid in running.items() if key[0] == session and key[1] == node_watch.RAYLET}
    only_node = next(iter(raylets.values())) if len(raylets) == 1 else None
    found: dict[int, RayProcess] = {}

    def add(proc: psutil.Process, node_id: str | None) -> None:
        with suppress(psutil.Error):
            found[proc.pid] = RayProcess(proc.pid, node_id, component(proc.cmdline()), workers.get(proc.pid))

    for pid, node_id in raylets.items():
        with suppress(psutil.Error):
            raylet = psutil.Process(pid)
            add(raylet, node_id)
            for child in raylet.children(recursive=True):
                add(child, node_id)
    if (gcs := running.get((session, node_watch.GCS, ""))) is not None:
        with suppress(psutil.Error):
            add(psutil.Process(gcs), head_node(session_dir))
    for path in logs:  # drivers: alive, and started before their log last changed (not a process that took the pid)
        core = _CORE_LOG.fullmatch(path.name)
        if core and core["kind"] == "driver" and (pid := int(core["pid"])) not in found:
            with suppress(psutil.Error, OSError):
                driver = psutil.Process(pid)
                if driver.create_time() <= path.stat().st_mtime:
                    add(driver, only_node)
    return list(found.values())


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def usage(process: RayProcess) -> Usage | None:
    """What ``process`` uses now; None once it is gone."""
    try:
        proc = psutil.Process(process.pid)
        with proc.oneshot():
            cpu = proc.cpu_times()
            try:
                memory = proc.memory_full_info()
                uss: int | None = memory.uss
            except psutil.AccessDenied:
                memory, uss = proc.memory_info(), None
            fds = None
            with suppress(psutil.AccessDenied):
                fds = proc.num_fds()
            return Usage(process, cpu.user + cpu.system, memory.rss, uss, proc.num_threads(), fds)
    except psutil.Error:
        return None


def families(session: str, usages: list[Usage], gpus: list[GpuProcess]) -> list[Metric]:
    """The ``raysight_process_*`` families of a session's processes' usage, and of their GPU use."""
    names = ["SessionName", "NodeId", "pid", "Component", "WorkerId"]
    cpu = CounterMetricFamily(
        "raysight_process_cpu_seconds", "CPU time the process used, user and system, in seconds.", labels=names
    )
    gauges = {
        key: GaugeMetricFamily(f"raysight_process_{key}", text, labels=names)
        for key, text in (
            ("resident_memory_bytes", "Memory the process holds resident (RSS), in bytes."),
            ("unique_memory_bytes", "Memory only this process holds (USS): what ending it would free, in bytes."),
            ("threads", "Threads of the process."),
            ("open_fds", "File descriptors the process holds open."),
        )
    }
    gpu_names = [*names, "GpuIndex", "GpuUuid"]
    gpu_memory = GaugeMetricFamily(
        "raysight_process_gpu_memory_bytes", "GPU memory the process holds on the device, in bytes.", labels=gpu_names
    )
    gpu_busy = GaugeMetricFamily(
        "raysight_process_gpu_utilization_percent",
        "Percent of the device's time since the last scrape that the process ran kernels on it.",
        labels=gpu_names,
    )
    by_pid: dict[int, list[str]] = {}
    for use in usages:
        p = use.process
        labels = by_pid[p.pid] = [session, p.node_id or "", str(p.pid), p.component, p.worker_id or ""]
        cpu.add_metric(labels, use.cpu_seconds)
        for key, value in (
            ("resident_memory_bytes", use.rss_bytes),
            ("unique_memory_bytes", use.uss_bytes),
            ("threads", use.threads),
            ("open_fds", use.fds),
        ):
            if value is not None:
                gauges[key].add_metric(labels, value)
    for gpu in gpus:
        if gpu.pid not in by_pid:  # another user's process: not the session's to report
            continue
        on_gpu = [*by_pid[gpu.pid], str(gpu.index), gpu.uuid]
        if gpu.memory_bytes is not None:
            gpu_memory.add_metric(on_gpu, gpu.memory_bytes)
        if gpu.utilization is not None:
            gpu_busy.add_metric(on_gpu, gpu.utilization)
    return [cpu, *gauges.values(), gpu_memory, gpu_busy]


def page(metrics: list[Metric]) -> str:
    """Prometheus's text format of ``metrics``."""

    class Once(Collector):
        def collect(self) -> Iterable[Metric]:
            return metrics

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Once())
    return generate_latest(registry).decode()


class ProcessStats:
    """Reads a session's processes' usage, GPUs included; one per scraper, closed with it."""

    def __init__(self) -> None:
        self._gpus = GpuReader()

    def page(self, session_dir: Path, running: Mapping[node_watch.Key, int]) -> str:
        """The session's ``raysight_process_*`` page now."""
        usages = [u for p in session_processes(session_dir, running) if (u := usage(p)) is not None]
        return page(families(session_dir.name, usages, self._gpus.read()))

    def close(self) -> None:
        self._gpus.close()
