"""CPU time of another process, from /proc (Linux); and a benchmark's run in a process of its own (a fresh Ray)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def _cpu(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads) so far."""
    return _cpu(Path(f"/proc/{pid}/stat"))


def cpu_by_thread_name(pid: int) -> dict[str, float]:
    """User + system CPU time so far of the live threads of process ``pid``, summed by thread name."""
    named: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name, cpu = (task / "comm").read_text().strip(), _cpu(task / "stat")
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        named[name] = named.get(name, 0.0) + cpu
    return named


def wait_idle(pids: list[int], window_s: float = 0.25, below: float = 0.02, timeout_s: float = 15.0) -> None:
    """Until processes ``pids`` together use less than ``below`` of a core over ``window_s`` (a server's idle
    checkpoint done, say), or ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = sum(map(cpu_seconds, pids))
        time.sleep(window_s)
        if sum(map(cpu_seconds, pids)) - before < below * window_s:
            return


def child_output(script: str, args: list[str], env: dict[str, str]) -> str:
    """What ``script`` run with ``args`` in a fresh interpreter printed last (a run of its own: a fresh local Ray
    each); RuntimeError with its stderr's tail where it failed."""
    proc = subprocess.run(
        [sys.executable, script, *args], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout.strip().splitlines()[-1]
