"""Sessions of any size synthesised from the recorded Ray session (tests/fixtures/ray_batches.json).

Per-task event templates are cut from two recorded tasks (`parent`: defined, ran, finished; `fails`: raised), with
the task ID and each event ID replaced; every synthesised task gets fresh IDs, so rounds never overlap, and its
times moved on by a millisecond a task (a cluster running 1,000 tasks/s), so that the store sees time advance as it
does from Ray.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from raysight.signals.ray_events import event_stages
from raysight.signals.ray_events.conversions import RFC3339_UTC, parse_ts_ns
from raysight.store import schema

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "ray_batches.json"
GROUP = 48  # POSTs the server's writer folds at once when they queue up (about 48 MB)
TASK_SPACING_NS = 1_000_000
RFC3339 = re.compile(RFC3339_UTC)


def templates() -> tuple[list[str], list[str], list[str]]:
    """(session-level events, events of one finished `ok` task, of one failed `flaky` task) as JSON text."""
    events = [e for batch in orjson.loads(FIXTURE.read_bytes()) for e in batch]
    by_task: dict[str, list[dict[str, Any]]] = {}
    session: list[str] = []
    for e in events:
        task_id = next((v["taskId"] for v in e.values() if isinstance(v, dict) and "taskId" in v), None)
        if task_id is None:
            session.append(orjson.dumps(e).decode())
        else:
            by_task.setdefault(task_id, []).append(e)

    def template(fixture_name: str, name: str, first_k: int) -> list[str]:
        task_id, task_events = next(
            (t, es)
            for t, es in by_task.items()
            if any(e.get("taskDefinitionEvent", {}).get("taskName") == fixture_name for e in es)
        )
        out = []
        for k, e in enumerate(task_events, first_k):
            if definition := e.get("taskDefinitionEvent"):
                definition["taskName"] = name
                definition["taskFunc"]["pythonFunctionDescriptor"]["functionName"] = name
            text = orjson.dumps(e).decode().replace(task_id, "@TASK@")
            out.append(text.replace(e["eventId"], f"@EVENT{k}@"))
        return out

    ok = template("parent", "ok", 0)
    return session, ok, template("fails", "flaky", len(ok))


def _timestamp(ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 1_000_000_000)) + f".{ns % 1_000_000_000:09d}Z"


def _timed_parts(text: str) -> tuple[list[str], list[int]]:
    """``text`` split around its RFC 3339 times (as Ray writes them): the texts between them, and each time in ns."""
    parts, times, at = [], [], 0
    for m in RFC3339.finditer(text):
        ns = parse_ts_ns(m[0])
        assert ns is not None, m[0]
        parts.append(text[at : m.start()])
        times.append(ns)
        at = m.end()
    return [*parts, text[at:]], times


def _shifted(parts: tuple[list[str], list[int]], shift_ns: int) -> str:
    texts, times = parts
    return "".join(t + _timestamp(ns + shift_ns) for t, ns in zip(texts, times)) + texts[-1]


def synth_batches(n_tasks: int, batch_events: int, first: int = 0) -> Iterator[tuple[int, list[str]]]:
    """(tasks so far, event JSON texts) in batches of about ``batch_events``; task i is `flaky` when i % 10 == 9,
    and its times are the recorded task's plus i ms.

    Tasks are numbered from ``first``: two calls with disjoint ranges give disjoint task and event IDs.
    """
    session, ok, flaky = templates()
    ok_parts, flaky_parts = [_timed_parts(t) for t in ok], [_timed_parts(t) for t in flaky]
    texts = list(session)
    for done, i in enumerate(range(first, first + n_tasks), 1):
        unique = (i * 0x9E3779B97F4A7C15 % 2**64).to_bytes(8, "big")  # a bijection: distinct, unordered IDs
        task = base64.b64encode(unique + bytes.fromhex("ff" * 12 + "01000000")).decode()
        for k, parts in enumerate(flaky_parts if i % 10 == 9 else ok_parts, 0 if i % 10 != 9 else len(ok)):
            event = base64.b64encode(unique + k.to_bytes(2, "big") + bytes(18)).decode()
            texts.append(_shifted(parts, i * TASK_SPACING_NS).replace("@TASK@", task).replace(f"@EVENT{k}@", event))
        if len(texts) >= batch_events or done == n_tasks:
            yield done, texts
            texts = []


def body(texts: list[str]) -> bytes:
    """A POST body as Ray's aggregator sends it: one JSON array."""
    return ("[" + ",".join(texts) + "]").encode()


def parse_only(bodies: list[bytes]) -> float:
    """Seconds to parse ``bodies`` as the store does, on one thread, storing nothing: the bound for ingest.

    In groups of :data:`GROUP` POSTs, the store's staging stages (``raysight.signals.ray_events.event_stages``):
    explode each body into events, parse and validate them, unnest transitions and profile entries, and merge the
    tasks columns every event sets into one row per task attempt; no raw events, no entity tables, no commit.
    """
    con = duckdb.connect()
    con.execute("SET threads = 1")
    for statement in [*schema.MACROS, *(macro.sql for macro in event_stages.MACROS)]:
        con.execute(statement)
    parsing = (event_stages.POSTS, event_stages.EVENTS, event_stages.NONE_SEEN, event_stages.FRESH)
    stages = [*parsing, event_stages.TRANSITIONS, event_stages.PROFILE, event_stages.TASKS]
    started = time.perf_counter()
    for i in range(0, len(bodies), GROUP):
        group = bodies[i : i + GROUP]
        con.register(
            event_stages.POSTED,
            pa.table(
                {
                    "post": pa.array(range(len(group)), pa.int32()),
                    "label": pa.array([None] * len(group), pa.string()),
                    "run_id": pa.array([None] * len(group), pa.string()),
                    "body": pa.array(group, pa.string()),
                }
            ),
        )
        for stage in stages:
            con.execute(stage.sql)
        con.unregister(event_stages.POSTED)
    elapsed = time.perf_counter() - started
    con.close()
    return elapsed
