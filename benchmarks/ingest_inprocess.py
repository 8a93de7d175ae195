"""Ingest in-process, no HTTP: parse-only (the bound) vs parse + durable commit to the store, on one thread.

Each round synthesises a new session (benchmarks/recorded.py, fresh IDs) in 1000-event POST bodies and applies
them in groups of ``recorded.GROUP``, as the server's writer folds POSTs that queued up. DuckDB runs on one thread
(as with the server pinned to one core). Interleaved rounds; medians. Then what each statement of a group costs per
event (median over the rounds), from the store's ``raysight.store.sql`` log.
Run: .venv/bin/python benchmarks/ingest_inprocess.py [rounds] [tasks per round]
"""

from __future__ import annotations

import logging
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.recorded import GROUP, body, parse_only, synth_batches
from raysight.signals.ray_events.apply import Post, apply_posts
from raysight.store.store import Store


class StatementCosts(logging.Handler):
    """Milliseconds per statement (by its first words) from the store's SQL log, per round."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.rounds: list[dict[str, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        ms, sql = record.getMessage().split("\t", 1)
        self.rounds[-1][" ".join(sql.split()[:7])[:70]] += float(ms.removesuffix(" ms"))


def main(rounds: int = 5, tasks: int = 20_000) -> None:
    parse_rates, apply_rates, events = [], [], []
    costs = StatementCosts()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(tmp)
        store.con.execute("SET threads = 1")
        sql_log = logging.getLogger("raysight.store.sql")
        sql_log.addHandler(costs)
        sql_log.setLevel(logging.DEBUG)
        for r in range(rounds):
            bodies = [body(texts) for _, texts in synth_batches(tasks, 1000, r * tasks)]
            n = sum(len(orjson.loads(b)) for b in bodies)
            parse_rates.append(n / parse_only(bodies))
            costs.rounds.append(defaultdict(float))
            events.append(n)
            started = time.perf_counter()
            for i in range(0, len(bodies), GROUP):
                apply_posts(store, [Post(b) for b in bodies[i : i + GROUP]])
            apply_rates.append(n / (time.perf_counter() - started))
            print(
                f"round {r + 1}: {n:,} events; parse only {parse_rates[-1]:,.0f}/s; "
                f"parse + commit {apply_rates[-1]:,.0f}/s",
                flush=True,
            )
        store.close()
    for name, rates in (("parse only", parse_rates), ("parse + commit", apply_rates)):
        print(
            f"{name:>15}: median {statistics.median(rates):9,.0f} events/s  (min {min(rates):,.0f}, "
            f"max {max(rates):,.0f}, {rounds} rounds)"
        )
    print(
        f"{'ratio':>15}: commit path runs at {statistics.median(apply_rates) / statistics.median(parse_rates):.2f}x "
        "of the parse-only bound"
    )
    per_event = {
        name: statistics.median(r.get(name, 0.0) * 1000 / n for r, n in zip(costs.rounds, events))
        for name in {name for r in costs.rounds for name in r}
    }
    print(f"\nµs an event, by statement (median of {rounds} rounds; {sum(per_event.values()):.1f} in all):")
    for name, us in sorted(per_event.items(), key=lambda item: -item[1])[:15]:
        print(f"{us:8.2f}  {name}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
