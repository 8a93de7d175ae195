"""The node agent at rest: what its looks at Ray's directory cost while the files are quiet, beside `tail -F`.

`raysight run`'s agent (and `raysight agent`) looks at the files of the sessions it follows every 0.2 s: a walk of
names and a stat of each. Ray never deletes a session's directory, so a host keeps hundreds of old ones, which each
look passes over. Synthesises a Ray directory of ``--old`` ended sessions (a few log files each, last written two days
ago) and one live session of ``--files`` files, follows it as `raysight run`'s agent does (only the sessions active
since it started), reads every file to its end, then times its looks: the median CPU of one over interleaved rounds,
with and without the old sessions, and the share of a core five a second take. Beside it, `tail -F` of the live
session's files (what a user would run instead; it waits on inotify) for as long, by its CPU.
Run: .venv/bin/python benchmarks/agent_look.py [--old 200] [--files 80] [--rounds 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.cpu import cpu_seconds
from raysight.agent.node_agent import POLL_S
from raysight.agent.tailer import Tailer

LIVE = "session_2026-11-29_12-00-00_000000_9"
LOOKS = 200  # a round


def synthesise(ray_dir: Path, old: int, files: int) -> list[Path]:
    """``old`` ended sessions and a live one of ``files`` files (their paths)."""
    two_days_ago = time.time() - 2 * 86400
    for n in range(old):
        logs = ray_dir / f"session_2026-10-{1 + n % 28:02d}_00-00-{n % 60:02d}_{n:06d}_{n}" / "logs"
        logs.mkdir(parents=True)
        for name in ("raylet.out", "gcs_server.out", f"worker-{'ab' * 28}-01000000-{n}.out", "dashboard.log"):
            (logs / name).write_text("a line\n" * 10)
            os.utime(logs / name, (two_days_ago, two_days_ago))
        os.utime(logs, (two_days_ago, two_days_ago))
    live = ray_dir / LIVE / "logs"
    live.mkdir(parents=True)
    (live / "serve").mkdir()
    paths = []
    for n in range(files):
        name = f"serve/replica_app_Hello_{n:08x}.log" if n % 4 == 0 else f"worker-{n:056x}-01000000-{1000 + n}.out"
        (live / name).write_text(f":task_name:f\nline {n}\n")
        paths.append(live / name)
    return paths


def look_ms(tailer: Tailer) -> float:
    """The CPU of one look, ms: the median of a round's."""
    started = time.thread_time()
    for _ in range(LOOKS):
        tailer.scan()
        tailer.read(1 << 20)
    return (time.thread_time() - started) / LOOKS * 1000


def tail_share(paths: list[Path], seconds: float) -> float:
    """`tail -F` of ``paths`` for ``seconds``: its CPU, as a share of a core."""
    proc = subprocess.Popen(["tail", "-q", "-n", "0", "-F", *map(str, paths)], stdout=subprocess.DEVNULL)
    try:
        time.sleep(seconds)
        return cpu_seconds(proc.pid) / seconds
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=int, default=200)
    parser.add_argument("--files", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="raysight-agent-look-"))
    try:
        tailers, paths = {}, []
        for kept in (0, args.old):
            ray_dir = tmp / f"ray-{kept}"
            paths = synthesise(ray_dir, kept, args.files)
            tailer = Tailer(ray_dir, tmp / f"checkpoint-{kept}.json", since=time.time() - 1)  # as `raysight run`'s
            tailer.scan()
            tailer.commit(tailer.read(1 << 30), [])
            assert tailer.sessions == {LIVE} and len(tailer.files) == args.files
            tailers[kept] = tailer
        times: dict[int, list[float]] = {kept: [] for kept in tailers}
        for _ in range(args.rounds):
            for kept, tailer in tailers.items():
                times[kept].append(look_ms(tailer))
        per_s = 1 / POLL_S
        tail = tail_share(paths, args.rounds * 1.0)
        print(
            f"a look at {args.files} quiet files (the agent takes {per_s:g} a second), median of {args.rounds} rounds:"
        )
        for kept, ms in times.items():
            median = statistics.median(ms)
            share = median * per_s / 10
            print(f"  with {kept:4d} old sessions kept: {median:6.3f} ms  ({share:.2f} % of a core)")
        print(f"  tail -F of the same files: {tail * 100:.2f} % of a core (inotify)")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
