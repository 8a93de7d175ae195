"""What a node agent sees of its node's Ray processes: their command lines read as Ray writes them, the processes a
session directory says ran here, and the changes reported — at once for a process seen running, only after a quiet
spell for one never seen."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from raysight.agent import node_watch
from raysight.agent.node_watch import GCS, RAYLET, NodeWatch, Sighting, parse_cmdline

NODE = "172040bcbcb9d9d2ded7d73fe9bd3986b75298578103ebb1707f5109"
OTHER = "9" * 56
SESSION = "session_2026-11-23_07-47-29_173326_928"


def test_command_lines_read_as_ray_writes_them() -> None:
    """As seen in /proc/PID/cmdline of Ray's raylet and GCS (abridged)."""
    raylet = [
        "/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet",
        f"--raylet_socket_name=/tmp/ray/{SESSION}/sockets/raylet",
        f"--node_id={NODE}",
        "--node_ip_address=192.0.2.2",
        f"--session_dir=/tmp/ray/{SESSION}",
    ]
    gcs = ["/venv/.../ray/core/src/ray/gcs/gcs_server", "--gcs_server_port=0", f"--session-dir=/tmp/ray/{SESSION}/"]
    assert parse_cmdline(raylet) == (SESSION, RAYLET, NODE)
    assert parse_cmdline(gcs) == (SESSION, GCS, "")
    assert parse_cmdline([raylet[0], f"--node_id={NODE}"]) is None  # no session: not one to judge
    assert parse_cmdline(["python", "raylet", f"--node_id={NODE}", f"--session_dir=/tmp/ray/{SESSION}"]) is None
    assert parse_cmdline([]) is None


def test_running_finds_a_raylet_by_its_command_line(tmp_path: Path) -> None:
    program = tmp_path / "raylet"  # a process whose command line is a raylet's
    program.symlink_to(sys.executable)
    args = [str(program), "-c", "import time; time.sleep(60)", f"--node_id={NODE}", f"--session_dir=/x/{SESSION}"]
    proc = subprocess.Popen(args)
    try:
        deadline = time.monotonic() + 10
        while node_watch.running().get((SESSION, RAYLET, NODE)) != proc.pid:
            assert proc.poll() is None, f"the stand-in raylet exited with {proc.returncode}"
            assert time.monotonic() < deadline, Path(f"/proc/{proc.pid}/cmdline").read_bytes()
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    assert (SESSION, RAYLET, NODE) not in node_watch.running()


def session_dir(ray_dir: Path, *nodes: str, gcs_of: str | None = None, quiet_s: float = 0) -> Path:
    """A session directory as Ray leaves it on a host: a port file per node (and the GCS's), and logs last written
    ``quiet_s`` ago."""
    directory = ray_dir / SESSION
    (directory / "logs").mkdir(parents=True)
    for node in nodes:
        (directory / f"metrics_agent_port_{node}").write_text("1")
    if gcs_of:
        (directory / f"gcs_server_port_{gcs_of}").write_text("1")
    log = directory / "logs" / "raylet.out"
    log.write_text("…\n")
    then = time.time() - quiet_s
    os.utime(log, (then, then))
    return directory


def test_a_process_seen_running_is_gone_as_soon_as_it_is_not_seen(tmp_path: Path) -> None:
    session_dir(tmp_path, NODE, OTHER, gcs_of=NODE)  # logs just written: quiet rules out nothing seen before
    watch = NodeWatch(tmp_path)
    running = {(SESSION, RAYLET, NODE): 10, (SESSION, GCS, ""): 11, ("session_other", RAYLET, NODE): 12}
    first = watch.look([SESSION], 1_000, running)
    assert first == [
        Sighting(SESSION, GCS, "", 11, True, 1_000, 1_000),
        Sighting(SESSION, RAYLET, NODE, 10, True, 1_000, 1_000),
    ]  # OTHER never seen, its logs not quiet: no word of it; the other session is not followed
    assert watch.look([SESSION], 2_000, running) == []  # nothing new
    del running[(SESSION, RAYLET, NODE)]
    assert watch.look([SESSION], 3_000, running) == [Sighting(SESSION, RAYLET, NODE, 10, False, 3_000, 2_000)]
    assert watch.look([SESSION], 4_000, running) == []  # said once
    running[(SESSION, GCS, "")] = 99  # a new GCS of the same session (Ray's GCS fault tolerance)
    assert watch.look([SESSION], 5_000, running) == [Sighting(SESSION, GCS, "", 99, True, 5_000, 5_000)]


def test_a_process_never_seen_is_gone_only_once_its_sessions_logs_are_quiet(tmp_path: Path) -> None:
    directory = session_dir(tmp_path, NODE, gcs_of=NODE, quiet_s=node_watch.QUIET_S - 5)
    now = time.time_ns()
    assert NodeWatch(tmp_path).look([SESSION], now, {}) == []  # may be starting, or beyond this agent's sight
    later = now + 10 * 10**9
    quiet_since = os.stat(directory / "logs" / "raylet.out").st_mtime_ns
    assert NodeWatch(tmp_path).look([SESSION], later, {}) == [
        Sighting(SESSION, GCS, "", None, False, later, quiet_since),
        Sighting(SESSION, RAYLET, NODE, None, False, later, quiet_since),
    ]
