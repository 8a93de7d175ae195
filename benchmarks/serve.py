"""Serve's requests in the store: `raysight serve requests --min-latency 250ms` (and `--by route`) over N synthesised
requests (a proxy's access line and a replica's each, 1 in 1,000 slow, 1 in 100 a 503, over 20 routes), in a store of
their own (a temporary directory) beside a second session's as many, read as the server's API reads them (the read
model on a reader connection): the median of --repeat, warm. Goal: under 300 ms for 1M requests.
Run: .venv/bin/python benchmarks/serve.py [--requests N] [--repeat N]        (2-core VM, noisy: compare medians)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from raysight.signals.log_lines import requests_query  # noqa: E402 (after the sys.path line)
from raysight.store.store import Store  # noqa: E402

SESSIONS = ("session_2026-12-01_00-00-00_000000_1", "session_2026-12-02_00-00-00_000000_2")


def synthesise(store: Store, requests: int) -> None:
    """``requests`` requests in each session, two access lines each (the proxy's, then its replica's), in the order
    a store holds them: by session, then time."""
    with store.transaction() as tx:
        for s, session in enumerate(SESSIONS):
            tx.run(
                f"""INSERT INTO serve_requests BY NAME
                    SELECT '{session}' AS session, {s * 2 * requests} + i AS seq,
                           1764547200000000000 + i * 1000000 AS ts_ns, 'node-' || (i // 2 % 4) AS host,
                           CASE WHEN i % 2 = 0 THEN 'proxy' ELSE 'replica' END AS component,
                           CASE WHEN i % 2 = 1 THEN 'r' || (i // 2 % 8) END AS replica,
                           CASE WHEN i % 2 = 1 THEN 'shop' END AS application,
                           CASE WHEN i % 2 = 1 THEN 'D' || (i // 2 % 4) END AS deployment,
                           'req-' || (i // 2) AS request_id, '/route' || (i // 2 % 20) AS route, 'GET' AS method,
                           CASE WHEN i // 2 % 100 = 7 THEN '503' ELSE '200' END AS status,
                           CASE WHEN i // 2 % 1000 = 3 THEN 400.0 ELSE (i % 97) * 1.5 END - (i % 2) AS latency_ms
                    FROM range({2 * requests}) t(i)"""
            )


def timed(run: Callable[[], Any], repeat: int) -> float:
    """The median wall time of ``run()`` in ms, after a warm-up."""
    run()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1_000_000, help="requests a session (default 1,000,000)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        store = Store(Path(data))
        try:
            started = time.perf_counter()
            synthesise(store, args.requests)
            print(f"synthesised {args.requests:,} requests a session, 2 sessions: {time.perf_counter() - started:.1f}s")
            con = store.reader()
            query = requests_query.RequestQuery(session=SESSIONS[1], min_latency_ms=250, limit=50)
            found = requests_query.serve_requests(con, query)
            assert found["total"] == args.requests // 1000 and len(found["requests"]) == 50, found["total"]
            every = replace(query, min_latency_ms=None)
            failed = replace(every, status="5xx")
            for name, run in [
                ("serve requests --min-latency 250ms", lambda: requests_query.serve_requests(con, query)),
                ("serve requests --status 5xx", lambda: requests_query.serve_requests(con, failed)),
                ("serve requests (all, newest 50)", lambda: requests_query.serve_requests(con, every)),
                ("serve requests --by route", lambda: requests_query.latencies(con, every, "route")),
            ]:
                print(f"{name}: {timed(run, args.repeat):.1f} ms (median of {args.repeat}, warm)")
        finally:
            store.close()


if __name__ == "__main__":
    main()
