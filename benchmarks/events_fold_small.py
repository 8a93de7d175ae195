"""What a small group of Ray events costs to fold, beside a session already folded: a trickle's fixed cost.

Under a steady trickle (a Ray Serve load: about a POST a second of a couple of events, mostly TASK_PROFILE_EVENT), the
server's writer folds each POST alone. A store on a temp dir first folds one session of ``tasks`` synthesised tasks
(benchmarks/recorded.py) but for the profile events of its last ones, held back; then ``groups`` small groups are
folded one at a time, each one POST of two of those profile events, and, as a variant, of two with an
ACTOR_LIFECYCLE_EVENT (the recorded one, a fresh event ID each time). DuckDB runs on one thread (as with the server
pinned to one core). Printed: the median CPU ms a group (``time.process_time``, the SQL log off), then what each
statement costs a group (median ms, from the store's ``raysight.store.sql`` log, a second pass).
Run: .venv/bin/python benchmarks/events_fold_small.py [groups] [tasks]
"""

from __future__ import annotations

import base64
import itertools
import logging
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.ingest_inprocess import StatementCosts
from benchmarks.recorded import GROUP, body, synth_batches, templates
from raysight.signals.ray_events.apply import Post, apply_posts
from raysight.store.store import Store

PROFILE = '"eventType":"TASK_PROFILE_EVENT"'


def actor_events() -> Iterator[str]:
    """The recorded ACTOR_LIFECYCLE_EVENT, each time with a fresh event ID (a new transition of the same actor)."""
    session, _, _ = templates()
    event = orjson.loads(next(t for t in session if '"eventType":"ACTOR_LIFECYCLE_EVENT"' in t))
    for n in range(1, 2**31):
        event["eventId"] = base64.b64encode(n.to_bytes(8, "big") + bytes(20)).decode()
        yield orjson.dumps(event).decode()


def session(tasks: int, held: int) -> tuple[list[bytes], list[str]]:
    """The session's POST bodies (of 1,000 events) but for its last ``held`` profile events, and those."""
    texts = [t for _, batch in synth_batches(tasks, 1000) for t in batch]
    late = set([i for i, t in enumerate(texts) if PROFILE in t][-held:])
    kept = [t for i, t in enumerate(texts) if i not in late]
    return [body(kept[i : i + 1000]) for i in range(0, len(kept), 1000)], [texts[i] for i in sorted(late)]


def fold(store: Store, posts: list[bytes]) -> float:
    """CPU seconds to fold ``posts``, one POST a group."""
    started = time.process_time()
    for b in posts:
        apply_posts(store, [Post(b)])
    return time.process_time() - started


def main(n_groups: int = 50, tasks: int = 10_000) -> None:
    variants = {"2 profile events": 0, "2 profile events + 1 actor lifecycle": 1}
    bodies, profiles = session(tasks, 2 * 2 * n_groups * len(variants))
    pairs = iter([profiles[i : i + 2] for i in range(0, len(profiles), 2)])
    actors = actor_events()
    costs = StatementCosts()
    sql_log = logging.getLogger("raysight.store.sql")
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(tmp)
        store.con.execute("SET threads = 1")
        for i in range(0, len(bodies), GROUP):
            apply_posts(store, [Post(b) for b in bodies[i : i + GROUP]])
        print(f"folded a session of {tasks:,} tasks; {len(profiles)} of its profile events held back", flush=True)
        for name, n_actor in variants.items():
            small = [[body([*next(pairs), *itertools.islice(actors, n_actor)])] for _ in range(2 * n_groups)]
            cpu = [fold(store, posts) * 1000 for posts in small[:n_groups]]
            sql_log.addHandler(costs)
            sql_log.setLevel(logging.DEBUG)
            for posts in small[n_groups:]:
                costs.rounds.append(defaultdict(float))
                fold(store, posts)
            sql_log.removeHandler(costs)
            sql_log.setLevel(logging.NOTSET)
            rounds, costs.rounds = costs.rounds, []
            per_group = {
                sql: statistics.median(r.get(sql, 0.0) for r in rounds) for sql in {sql for r in rounds for sql in r}
            }
            print(
                f"\n{name}: median {statistics.median(cpu):.1f} CPU ms a group (min {min(cpu):.1f}, "
                f"max {max(cpu):.1f}, {n_groups} groups)\n"
                f"ms a group by statement (median of {n_groups} more; {sum(per_group.values()):.1f} in all, "
                f"{len(per_group)} statements):"
            )
            for sql, ms in sorted(per_group.items(), key=lambda item: -item[1])[:25]:
                print(f"{ms:7.2f}  {sql}")
        store.close()


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
