"""Watching the Ray session a driver joined while `raysight run` runs it (:class:`SessionWatcher`: the dashboard's
poller is one), and finding a session's parts on disk: its nodes' metrics ports, its aggregators' lines of a metrics
page. Best effort: a failure is skipped, never raised, so the user's program is never disturbed.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import Self

from raysight import os_thread
from raysight.agent import node_watch
from raysight.client import Client
from raysight.signals.ray_metrics.parse import PREFIX


def ray_temp_dir(env: Mapping[str, str]) -> Path:
    """Where Ray 2.60 keeps its sessions for a process with this environment (unless it passes ``_temp_dir``)."""
    base = env.get("RAY_TMPDIR") or (env.get("TMPDIR") if sys.platform.startswith("linux") else None)
    return Path(base or "/tmp") / "ray"


def find_session(ray_dir: Path, driver_pid: int, since: float) -> Path | None:
    """The session whose ``logs/`` holds the driver's core log, ``python-core-driver-<worker id>_<pid>.log``.

    Only sessions whose logs changed since ``since`` (epoch seconds) are looked into.
    """
    for logs in ray_dir.glob("session_*/logs"):
        with suppress(OSError):
            if logs.stat().st_mtime >= since and any(logs.glob(f"python-core-driver-*_{driver_pid}.log")):
                return logs.parent.resolve()  # not `session_latest`, which moves on
    return None


def metrics_ports(session: Path) -> dict[str, int]:
    """Node ID → the metrics export port of every node that shares the session directory
    (``metrics_export_port_<node>``)."""
    ports = {}
    for what, node, path in node_watch.port_files(session):
        if what == "metrics_export":
            with suppress(OSError):
                text = path.read_text().strip()
                if text.isdigit():
                    ports[node] = int(text)
    return ports


def aggregator_lines(text: str) -> str:
    """The aggregator's lines of a node's metrics page (a few dozen of about two thousand)."""
    return "".join(line + "\n" for line in text.splitlines() if PREFIX in line)


class SessionWatcher:
    """A thread that, every ``every_s``, does its :meth:`tick` on the Ray session ``driver_pid`` joined, once found;
    when stopped it ticks no more (the driver gone, its cluster is going: what it answers then is no longer so), but
    still finds the session of a driver that ended before the first tick. Best effort: a failure is skipped."""

    every_s: float
    name = "raysight-watch"

    def __init__(self, server: str, key: str | None, driver_pid: int, ray_dir: Path) -> None:
        self.key, self.driver_pid, self.ray_dir = key, driver_pid, ray_dir
        self.since = time.time() - 1
        self.session: Path | None = None
        self._client = Client(server, timeout=5)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5) -> None:
        self._stopping.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        os_thread.settle()
        with self._client:
            while True:
                stopping = self._stopping.wait(self.every_s)
                with suppress(Exception):  # never disturb the user's program
                    self.session = self.session or find_session(self.ray_dir, self.driver_pid, self.since)
                    if self.session and not stopping:
                        self.tick(self.session)
                if stopping:
                    return

    def tick(self, session: Path) -> None:
        raise NotImplementedError
