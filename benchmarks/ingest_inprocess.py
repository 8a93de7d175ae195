"""Ingest throughput in-process: parse-only (the bound) vs parse + durable commit to the store.

Synthesises batches from the recorded Ray session (tests/fixtures) with rewritten task IDs, so each round is
new data. Prints medians and spread over interleaved rounds. (The HTTP, one-core-pinned version is still to do.)
Run: .venv/bin/python benchmarks/ingest_inprocess.py [rounds]
"""

from __future__ import annotations

import base64
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

from raysight.ingest.ray_events import parse_batch
from raysight.store.store import Store

FIXTURE = Path(__file__).parent.parent / "tests" / "fixtures" / "ray_batches.json"
COPIES = 60  # ~5,300 events per round


def synth(events: list[dict], round_no: int) -> list[list[dict]]:
    """COPIES copies of the session with each copy's task and event IDs rewritten, in 1000-event batches."""
    out = []
    for copy in range(COPIES):
        prefix = round_no.to_bytes(2, "big") + copy.to_bytes(2, "big")
        for e in events:
            text = orjson.dumps(e).decode()
            for key in ("taskId", "eventId"):
                payload = next((v for v in _walk(e) if isinstance(v, dict) and key in v), None)
                if payload and payload[key]:
                    raw = base64.b64decode(payload[key])
                    text = text.replace(payload[key], base64.b64encode(prefix + raw[4:]).decode())
            out.append(orjson.loads(text))
    return [out[i : i + 1000] for i in range(0, len(out), 1000)]


def _walk(value: object):
    yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from _walk(v)


def main(rounds: int = 5) -> None:
    events = [e for b in orjson.loads(FIXTURE.read_bytes()) for e in b]
    parse_rates, apply_rates = [], []
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(tmp)
        for r in range(rounds):
            batches = synth(events, r)
            n = sum(map(len, batches))
            bodies = [orjson.dumps(b) for b in batches]
            t0 = time.perf_counter()
            for body in bodies:
                parse_batch(orjson.loads(body))
            parse_rates.append(n / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            for body in bodies:
                store.apply(parse_batch(orjson.loads(body)))
            apply_rates.append(n / (time.perf_counter() - t0))
        store.close()
    for name, rates in (("parse only", parse_rates), ("parse + commit", apply_rates)):
        print(f"{name:>15}: median {statistics.median(rates):9,.0f} events/s  (min {min(rates):,.0f}, "
              f"max {max(rates):,.0f}, {rounds} rounds)")
    print(f"{'ratio':>15}: commit path runs at {statistics.median(apply_rates) / statistics.median(parse_rates):.2f}x "
          "of the parse-only bound")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
