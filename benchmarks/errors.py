"""`raysight errors` over a session of 1M tasks of which 50k failed in 20 causes, beside the list a Ray user reads
instead: the failed tasks, as `ray list tasks --filter state=FAILED` asks for them (here of raysight's
Ray-compatible API: no live Ray holds a million tasks on this machine; benchmarks/list_latency.py measures Ray's own
at the sizes it can hold) — which gives 100 rows of one page, not the causes.

The session is list_latency's synthesised one (1 task in 10 fails, `ValueError: boom`), built once into
benchmarks/.cache/, then copied and rewritten here: half its failures finished instead, the other half raising one
of 20 exceptions whose messages carry numbers, paths, addresses and IDs that differ from task to task.
Run: .venv/bin/python benchmarks/errors.py [--tasks N] [--requests N]      (2-core VM, noisy: compare medians)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

import duckdb
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.list_latency import RAY_QUERY, RAY_TASKS, session_copy, url_with  # noqa: E402 (after the sys.path line)
from raysight import wire  # noqa: E402
from raysight.store.store import DB_FILE  # noqa: E402
from tests.ray_scenarios import ServerProcess  # noqa: E402

CAUSES = 20
# Each cause: an exception and a message whose values vary (the cause's words do not)
MESSAGE = """printf('User exception:\n\x1b[36mray::flaky()\x1b[39m (pid=%d, ip=10.0.%d.%d)
  File "/app/jobs/stage_%d.py", line %d, in flaky
%s: stage %d: shard %d of "/data/part-%d.parquet" failed after %d.%d s (object %s)',
  h % 60000, h % 250, h % 200, c, 10 + c, 'Shard' || chr(65 + c::INTEGER) || 'Error', c, h % 9973, h % 977, h % 30,
  h % 10,
  md5(task_id)[:16])"""


def prepare(n_tasks: int) -> Path:
    """A copy of the synthesised session with its failures rewritten (see the docstring)."""
    target = session_copy(n_tasks, "raysight-errors-bench-")
    with duckdb.connect(str(target / DB_FILE)) as con:
        con.execute(
            """UPDATE tasks SET reported_state = 'FINISHED', error_type = NULL, error_message = NULL,
                   error_detail = NULL, state_key = {'terminal': true, 'ts': state_key.ts, 'state': 'FINISHED'}
               WHERE reported_state = 'FAILED' AND hash(task_id) % 2 = 0"""
        )
        con.execute(
            f"""UPDATE tasks SET error_message = m FROM (
                    SELECT task_id AS id, attempt AS a, {MESSAGE} AS m
                    FROM (SELECT task_id, attempt, hash(task_id) // 2 AS h, hash(task_id) // 2 % {CAUSES} AS c
                          FROM tasks WHERE reported_state = 'FAILED'))
                WHERE task_id = id AND attempt = a"""
        )
        (failed,) = con.execute("SELECT count(*) FROM tasks WHERE reported_state = 'FAILED'").fetchone() or (0,)
        con.execute("CHECKPOINT")
    print(f"{n_tasks:,} tasks, {failed:,} failed in {CAUSES} causes, in {target}")
    return target


def timed(http: httpx.Client, url: str, n: int) -> tuple[list[float], httpx.Response]:
    times, response = [], None
    for _ in range(n):
        started = time.perf_counter()
        response = http.get(url)
        times.append(time.perf_counter() - started)
        response.raise_for_status()
    assert response is not None
    return times, response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=7)
    args = parser.parse_args()
    data_dir = prepare(args.tasks)
    server = ServerProcess(data_dir, start_timeout_s=120).start()
    try:
        with httpx.Client(timeout=120) as http:
            errors_url, list_url = server.url + wire.ERRORS, url_with(server.url, RAY_TASKS, RAY_QUERY)
            timed(http, errors_url, 1)  # warm
            errors, answer = timed(http, errors_url, args.requests)
            listed, _ = timed(http, list_url, args.requests)
        groups = answer.json()["groups"]
        tasks = [g for g in groups if g["kind"] == "task"]
        print(
            f"raysight errors: {len(groups)} groups of {sum(g['count'] for g in groups):,} failures; "
            f"{len(tasks)} of failed tasks, {min(g['count'] for g in tasks):,} to {max(g['count'] for g in tasks):,} "
            f"each, e.g. {tasks[0]['error']!r}"
        )
        if len(tasks) != CAUSES:  # the figure means nothing if the causes are not told apart right
            sys.exit(f"the failed tasks form {len(tasks)} groups, not the {CAUSES} causes they were given")
        e, r = statistics.median(errors), statistics.median(listed)
        print(f"  /api/raysight/errors (every failure read and grouped)  median {e * 1000:7.1f} ms")
        print(
            f"  /api/v0/tasks?state=FAILED (a page of 100 failed tasks, what `ray list tasks` asks)  median "
            f"{r * 1000:7.1f} ms: the grouping of all takes {e / r:.1f}x a page's time"
        )
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
