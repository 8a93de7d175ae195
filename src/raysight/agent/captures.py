"""The agent's side of on-demand profiles: it long-polls the server for what is asked of the processes of its host's
Ray nodes, runs each on a thread of its own, and sends back what it found or why it could not.

- ``stack``: ``py-spy dump --json``, every thread's stack now, as py-spy prints them and as stacks (one a thread).
- ``cpu``: ``py-spy record --format raw --nonblocking`` for the duration, at 100 Hz: the stacks of the threads on
  CPU (py-spy leaves out idle ones), each with its samples.
- ``memory``: ``memray attach --duration`` (which injects itself through gdb, and stops by itself); the capture the
  process writes then read with memray's own reader: the stacks that held the most memory at its peak (or,
  ``leaks``, still at its end), each with its bytes.

Each reads another process's memory through ptrace: an agent refused it (another user's process, a container without
``CAP_SYS_PTRACE``, Yama's ``ptrace_scope``) says so, and how to allow it. Pure but for :class:`CaptureRunner` and
the ``run_*`` functions, which run the tools."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import httpx
import orjson

from raysight import wire
from raysight.agent import node_watch
from raysight.config import OWN_HEADERS
from raysight.signals.profile_captures.memray_read import bounded, frame_name, memray_stacks

log = logging.getLogger("raysight.agent")

POLL_WAIT_S = 20.0  # the server holds a poll this long when nothing is asked
OFF_RETRY_S = 15.0  # between polls of a server that does not allow profiling (it holds a request 30 s for its agent)
NO_NODE_S = 2.0  # between looks for a raylet on this host, while there is none
CPU_RATE_HZ = 100
TOOL_GRACE_S = 30.0
CAPTURE_LOOK_S = 0.2
ATTACH_TRIES = 3
SIGNALLED = "received a signal in another thread while"  # gdb, of a call it abandoned

PTRACE_HELP = (
    "ptrace of pid {pid} was refused ({tool}: {why}). py-spy and memray read another process's memory: run "
    "`raysight agent` as the user that runs Ray's workers, or as root; in a container grant it CAP_SYS_PTRACE "
    "(docker run --cap-add SYS_PTRACE; Kubernetes: securityContext.capabilities.add: [SYS_PTRACE]); where Yama's "
    "kernel.yama.ptrace_scope is 1 or more, only root or CAP_SYS_PTRACE may (sysctl kernel.yama.ptrace_scope=0 "
    "lets the same user)"
)
_REFUSED = ("Permission Denied", "Permission denied", "Operation not permitted", "ptrace: Operation not permitted")


class CaptureFailed(Exception):
    """Why a capture could not be made, as its requester reads it."""


def dump_stacks(threads: list[dict[str, Any]]) -> tuple[str, list[tuple[str, int]]]:
    """``py-spy dump --json``'s threads as py-spy prints them, and as collapsed stacks (root first, one a thread)."""
    lines, stacks = [], []
    for thread in threads:
        state = "active" if thread.get("active") else "idle"
        gil = "+gil" if thread.get("owns_gil") else ""
        name = f' "{thread["thread_name"]}"' if thread.get("thread_name") else ""
        lines.append(f"Thread {thread.get('os_thread_id') or thread.get('thread_id')} ({state}{gil}):{name}")
        frames = [frame_name(f["name"], f.get("short_filename") or f["filename"], f["line"]) for f in thread["frames"]]
        lines.extend(f"    {frame}" for frame in frames)
        lines.append("")
        if frames:
            stacks.append((";".join(reversed(frames)), 1))
    return "\n".join(lines), stacks


def raw_stacks(text: str) -> list[tuple[str, int]]:
    """py-spy's raw output (flamegraph.pl's folded lines: ``frame;frame count``) as stacks."""
    stacks = []
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit() and int(count) > 0:
            stacks.append((stack, int(count)))
    return stacks


def raylet_of(pid: int, raylets: Collection[int], proc: Path = Path("/proc")) -> int | None:
    """The one of ``raylets`` that ``pid`` descends from (the processes Ray starts for its tasks and actors do), or
    None: the agent profiles no other process of its host."""
    seen = 0
    while pid > 1 and seen < 64:
        if pid in raylets:
            return pid
        try:
            stat = (proc / str(pid) / "stat").read_text()
        except OSError:
            return None
        pid, seen = int(stat.rsplit(")", 1)[1].split()[1]), seen + 1  # (the field after the name's closing paren)
    return None


def _refusal(pid: int, tool: str, output: str) -> str:
    """What a tool's failure says to its requester: how to allow ptrace where it was refused, else its own words."""
    if any(marker in output for marker in _REFUSED):
        why = next(line.strip() for line in output.splitlines() if any(m in line for m in _REFUSED))
        return PTRACE_HELP.format(pid=pid, tool=tool, why=why)
    if not Path(f"/proc/{pid}").exists():
        return f"no process {pid} on this node any more: it ended before {tool} reached it"
    return f"{tool} failed: {output.strip()[-2000:] or 'no output'}"


def _tool(name: str) -> str:
    """A tool's path: beside this Python (the agent's environment), else on PATH."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise CaptureFailed(f"{name} is not installed where the agent runs: pip install {name}")
    return found


def _run(args: list[str], pid: int, timeout: float) -> str:
    """A tool's stdout; CaptureFailed with what its failure means."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CaptureFailed(f"{os.path.basename(args[0])} did not finish within {timeout:g} s") from None
    if done.returncode != 0:
        raise CaptureFailed(_refusal(pid, os.path.basename(args[0]), done.stderr + done.stdout))
    return done.stdout


def run_stack(pid: int, native: bool) -> wire.CaptureResult:
    threads = orjson.loads(
        _run([_tool("py-spy"), "dump", "--json", "--pid", str(pid), *(["--native"] if native else [])], pid, 60)
    )
    text, stacks = dump_stacks(threads)
    return {"unit": "samples", "stacks": stacks, "text": text}


def run_cpu(pid: int, duration_s: float, native: bool) -> wire.CaptureResult:
    with tempfile.TemporaryDirectory(prefix="raysight-cpu-") as folder:
        out = Path(folder) / "raw.txt"
        args = [_tool("py-spy"), "record", "--pid", str(pid), "--duration", str(max(1, round(duration_s)))]
        args += ["--rate", str(CPU_RATE_HZ), "--format", "raw", "--nonblocking", "-o", str(out)]
        _run([*args, *(["--native"] if native else [])], pid, duration_s + TOOL_GRACE_S)
        return {"unit": "samples", "stacks": raw_stacks(out.read_text() if out.exists() else "")}


def run_memory(pid: int, duration_s: float, native: bool, leaks: bool, stop: threading.Event) -> wire.CaptureResult:
    if shutil.which("gdb") is None:
        raise CaptureFailed("memray attach needs gdb on the node, which is not installed: apt-get install gdb")
    memray = _tool("memray")
    folder = tempfile.mkdtemp(prefix="raysight-memory-")
    try:
        if os.geteuid() == 0:  # the capture is written by the process itself: its folder must be its user's
            os.chown(folder, os.stat(f"/proc/{pid}").st_uid, -1)
        out = Path(folder) / "capture.bin"
        seconds = max(1, round(duration_s))  # (memray stops tracking by itself, and writes the capture, then)
        args = [memray, "attach", "-v", str(pid), "-o", str(out), "--aggregate", "--duration", str(seconds)]
        _attach([*args, *(["--native"] if native else [])], pid)
        reader = _written_capture(out, time.monotonic() + seconds + TOOL_GRACE_S, stop)
        records = (
            reader.get_leaked_allocation_records(merge_threads=True)
            if leaks
            else reader.get_high_watermark_allocation_records(merge_threads=True)
        )
        return {"unit": "bytes", "stacks": memray_stacks(records, native)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _attach(args: list[str], pid: int) -> None:
    """memray attach, once more where gdb abandoned its call into the process because another thread of it received
    a signal meanwhile (a Ray worker's sockets raise SIGPIPE, which gdb stops on): nothing was injected then."""
    for attempt in range(ATTACH_TRIES):
        try:
            _run(args, pid, TOOL_GRACE_S)
            return
        except CaptureFailed as exc:
            if SIGNALLED not in str(exc) or attempt == ATTACH_TRIES - 1:
                raise
            time.sleep(0.2)


def _written_capture(path: Path, deadline: float, stop: threading.Event) -> Any:
    """memray's reader of the capture the process writes once it stops tracking: read once its size has held for a
    look (memray reads none before it is whole); CaptureFailed past ``deadline``."""
    from memray import FileReader

    size = -1
    while not stop.wait(CAPTURE_LOOK_S):
        now = path.stat().st_size if path.exists() else 0
        if now and now == size:
            try:
                return FileReader(str(path))
            except OSError:  # (not whole yet)
                pass
        size = now
        if time.monotonic() > deadline:
            raise CaptureFailed("memray attached, but the process wrote no capture: its log may say why")
    raise CaptureFailed("the agent stopped before the capture was written")


class CaptureRunner:
    """Long-polls ``server`` for what is asked of this host's Ray nodes, runs each on a thread of its own, and sends
    back what it found (or why it could not), until ``stop``."""

    def __init__(self, server: str, key: str | None) -> None:
        self.server, self.key = server.rstrip("/"), key
        self._http = httpx.Client(timeout=POLL_WAIT_S + 30, headers=OWN_HEADERS)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            raylets = {
                pid: node for (_, process, node), pid in node_watch.running().items() if process == node_watch.RAYLET
            }
            if not raylets:
                stop.wait(NO_NODE_S)
                continue
            try:
                orders = self._poll(sorted(set(raylets.values())))
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code != 403:  # (403: profiling not allowed; the server may be restarted so)
                    log.warning("asking %s for on-demand profiles failed: %s", self.server, exc.response.text[:300])
                stop.wait(OFF_RETRY_S)
                continue
            except Exception as exc:  # noqa: BLE001 (unreachable, or an answer not as expected: asked again)
                log.debug("asking %s for on-demand profiles failed (%s); retrying", self.server, exc)
                stop.wait(NO_NODE_S)
                continue
            for order in orders:
                args = (order, set(raylets), stop)
                threading.Thread(target=self.capture, args=args, name="raysight-capture", daemon=True).start()

    def _poll(self, nodes: list[str]) -> list[wire.CaptureOrder]:
        params = {"node": nodes, "wait": str(POLL_WAIT_S), **wire.key_params(self.key)}
        response = self._http.get(f"{self.server}{wire.AGENT_CAPTURES}", params=params)
        response.raise_for_status()
        orders: list[wire.CaptureOrder] = response.json()["captures"]
        return orders

    def capture(self, order: wire.CaptureOrder, raylets: set[int], stop: threading.Event) -> None:
        """Run ``order`` (of a process one of ``raylets`` started) and send back what it found, or why it could
        not."""
        pid, kind = order["pid"], order["kind"]
        try:
            if raylet_of(pid, raylets) is None:
                raise CaptureFailed(f"pid {pid} is not a process Ray started on this node: raysight profiles no other")
            if kind == "stack":
                result = run_stack(pid, order["native"])
            elif kind == "cpu":
                result = run_cpu(pid, order["duration_s"], order["native"])
            else:
                result = run_memory(pid, order["duration_s"], order["native"], order["leaks"], stop)
        except CaptureFailed as exc:
            result = {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 (a tool's output not as expected: said, not fatal to the agent)
            log.exception("the %s profile of pid %s failed", kind, pid)
            result = {"error": f"the agent failed to make it ({type(exc).__name__}: {exc}); its log says more"}
        if result.get("stacks"):
            result["stacks"] = bounded(result["stacks"] or [])
        route = wire.path(wire.AGENT_CAPTURE, capture_id=order["capture_id"])
        for attempt in (result, {"error": "the agent's answer was refused by the server: its log says why"}):
            try:
                response = self._http.post(
                    f"{self.server}{route}",
                    content=orjson.dumps(attempt),
                    params=wire.key_params(self.key),
                    headers={"Content-Type": "application/json"},
                )
                if response.status_code in (400, 413):  # (then why, that its requester is not left waiting)
                    log.error("the server refused the %s profile of pid %s: %s", kind, pid, response.text[:300])
                    continue
                response.raise_for_status()
            except (httpx.HTTPError, RuntimeError) as exc:  # (RuntimeError: the agent closed meanwhile)
                log.warning("could not send the %s profile of pid %s to %s (%s)", kind, pid, self.server, exc)
            return

    def close(self) -> None:
        self._http.close()
