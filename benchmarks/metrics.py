"""Metrics: samples ingested per second, a day's `query_range` over 1,000 series, and bytes per sample stored, each
beside a real Prometheus (Debian's 2.42, as the tests run it) holding the same samples, in one run.

The data: 1,000 counters, ``bench_requests_total{node="n0"…"n3", route="/r0"…"/r249"}`` (four targets, a node's page
of 250 lines each), rising by 0 to 20 a scrape, scraped every 15 s over the 24 h ending an hour ago: 5,760 scrapes
of each target, 5.76M samples.

- **Ingest.** raysight: a server pinned to core 0, each scrape POSTed as an agent sends it (``/ingest/agent/metrics``;
  this process, on core 1, one connection a target, in time order), from the first POST to the last answer (each
  200: durable). Prometheus: the same samples backfilled (``promtool tsdb create-blocks-from openmetrics``, pinned to
  core 0), its bulk path (scraping cannot load a day in minutes), the text's writing not counted.
- **Bytes per sample.** raysight: the storage blocks of its ``metric_samples`` table (DuckDB's own accounting, after
  the server's closing checkpoint), and its whole store file; Prometheus: its blocks on disk (chunks and index).
- **Query.** ``sum by (node) (rate(bench_requests_total[5m]))`` over the 24 h at a 60 s step (what Grafana asks for a
  day on a panel 1,440 points wide), through each one's HTTP API, each server pinned to core 0, alternating, the
  median of the rounds; the two answers compared first (the same series, values within 1e-9 relative).

Run: .venv/bin/python benchmarks/metrics.py [--rounds 7]
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.cpu import wait_idle
from raysight.cli.run import free_port
from tests.ray_scenarios import ServerProcess

SERVER_CORE, GENERATOR_CORE = 0, 1
NODES, ROUTES, EVERY_S, HOURS = 4, 250, 15, 24
SESSION = "session_2026-11-24_00-00-00_000000_1"
QUERY = "sum by (node) (rate(bench_requests_total[5m]))"
PIN = ["taskset", "-c", str(SERVER_CORE)]


def counters(scrapes: int) -> np.ndarray:
    """Each series' value at each scrape: (scrapes, NODES * ROUTES), rising by 0-20 a scrape."""
    rng = np.random.default_rng(7)
    return np.cumsum(rng.integers(0, 21, size=(scrapes, NODES * ROUTES), dtype=np.int64), axis=0)


def page(values: np.ndarray, node: int) -> str:
    return "".join(
        f'bench_requests_total{{node="n{node}",route="/r{r}"}} {values[node * ROUTES + r]}\n' for r in range(ROUTES)
    )


def ingest_raysight(url: str, times_ms: np.ndarray, values: np.ndarray) -> float:
    """POST every scrape, one connection a target in time order; seconds from the first POST to the last answer."""

    def target(node: int) -> None:
        with httpx.Client(timeout=60) as http:
            for i, scraped_ms in enumerate(times_ms):
                body = {
                    "session": SESSION,
                    "scraped_ms": int(scraped_ms),
                    "target": {"instance": f"10.0.0.{node}:8080", "job": "ray"},
                    "text": page(values[i], node),
                }
                while (status := http.post(f"{url}/ingest/agent/metrics", json=body).status_code) == 503:
                    time.sleep(0.01)
                if status != 200:
                    raise SystemExit(f"ingest answered {status}")

    started = time.perf_counter()
    with ThreadPoolExecutor(NODES) as pool:
        list(pool.map(target, range(NODES)))
    return time.perf_counter() - started


def openmetrics(path: Path, times_ms: np.ndarray, values: np.ndarray) -> None:
    """The same samples as OpenMetrics text, what promtool backfills."""
    labels = [
        f'{{instance="10.0.0.{n}:8080",job="ray",node="n{n}",route="/r{r}"}}'
        for n in range(NODES)
        for r in range(ROUTES)
    ]
    with path.open("w") as out:
        out.write("# TYPE bench_requests counter\n")
        for i, scraped_ms in enumerate(times_ms):
            at = f" {scraped_ms / 1000:.3f}\n"
            out.write("".join(f"bench_requests_total{lab} {v}{at}" for lab, v in zip(labels, values[i])))
        out.write("# EOF\n")


def raysight_bytes(store: Path) -> tuple[float, int]:
    """Bytes of metric_samples' storage blocks, and the store file's size."""
    con = duckdb.connect(str(store), read_only=True)
    try:
        (blocks,) = con.execute(
            "SELECT count(DISTINCT block_id) FROM pragma_storage_info('metric_samples') WHERE block_id >= 0"
        ).fetchone()
        (block_size,) = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()
    finally:
        con.close()
    return float(blocks * block_size), store.stat().st_size


def query(url: str, start: float, end: float) -> tuple[float, dict[str, list[tuple[float, float]]]]:
    params = {"query": QUERY, "start": start, "end": end, "step": 60}
    started = time.perf_counter()
    answer = httpx.get(f"{url}/api/v1/query_range", params=params, timeout=120).json()
    took = time.perf_counter() - started
    assert answer["status"] == "success", answer
    return took, {r["metric"]["node"]: [(t, float(v)) for t, v in r["values"]] for r in answer["data"]["result"]}


def start_prometheus(home: Path) -> tuple[subprocess.Popen[bytes], str]:
    (home / "prometheus.yml").write_text("global: {scrape_interval: 15s}\n")
    url = f"http://127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        [
            *PIN,
            "prometheus",
            f"--config.file={home / 'prometheus.yml'}",
            f"--storage.tsdb.path={home / 'data'}",
            "--storage.tsdb.retention.time=30d",
            f"--web.listen-address={url.removeprefix('http://')}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(home / "prometheus.log").open("wb"),
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit((home / "prometheus.log").read_text()[-2000:])
        time.sleep(0.2)


def same(ours: dict[str, list[tuple[float, float]]], theirs: dict[str, list[tuple[float, float]]]) -> None:
    assert ours.keys() == theirs.keys(), (ours.keys(), theirs.keys())
    for node, points in ours.items():
        assert [t for t, _ in points] == [t for t, _ in theirs[node]], node
        for (_, a), (_, b) in zip(points, theirs[node]):
            assert abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1), (node, a, b)


def main(rounds: int) -> None:
    if not shutil.which("prometheus") or not shutil.which("promtool"):
        raise SystemExit("Prometheus is not installed: ./dev.sh test installs Debian's")
    os.sched_setaffinity(0, {GENERATOR_CORE})
    scrapes = HOURS * 3600 // EVERY_S
    end_ms = (time.time_ns() // 1_000_000 - 3_600_000) // (EVERY_S * 1000) * (EVERY_S * 1000)
    times_ms = end_ms - (scrapes - 1 - np.arange(scrapes)) * EVERY_S * 1000
    values = counters(scrapes)
    samples = values.size
    print(f"{samples:,} samples: {NODES * ROUTES:,} series, {scrapes:,} scrapes {EVERY_S} s apart over {HOURS} h")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        home = Path(tmp)
        server = ServerProcess(home / "raysight", prefix=PIN, start_timeout_s=60).start()
        try:
            took = ingest_raysight(server.url, times_ms, values)
        finally:
            server.stop()
        ingest_rate = samples / took
        print(f"raysight ingest: {ingest_rate:,.0f} samples/s on one core ({took:.1f} s, durable at each answer)")
        blocks, store_size = raysight_bytes(home / "raysight" / "raysight.duckdb")
        print(
            f"raysight bytes/sample: {blocks / samples:.2f} (metric_samples' blocks); whole store {store_size / samples:.2f}"
        )

        text = home / "bench.om"
        openmetrics(text, times_ms, values)
        started = time.perf_counter()
        subprocess.run(
            [
                *PIN,
                "promtool",
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                str(text),
                str(home / "prometheus" / "data"),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        backfill = time.perf_counter() - started
        text.unlink()
        blocks_dir = home / "prometheus" / "data"
        prom_bytes = sum(f.stat().st_size for f in blocks_dir.rglob("*") if f.is_file())
        print(f"Prometheus backfill: {samples / backfill:,.0f} samples/s on one core ({backfill:.1f} s)")
        print(f"Prometheus bytes/sample: {prom_bytes / samples:.2f} (its blocks: chunks, index)")

        server = ServerProcess(home / "raysight", prefix=PIN, start_timeout_s=60).start()
        prometheus, prom_url = start_prometheus(home / "prometheus")
        try:
            wait_idle([server.proc.pid, prometheus.pid], timeout_s=60)  # type: ignore[union-attr]
            start, end = times_ms[0] / 1000, times_ms[-1] / 1000
            _, ours = query(server.url, start, end)
            _, theirs = query(prom_url, start, end)
            same(ours, theirs)
            ours_s, theirs_s = [], []
            for _ in range(rounds):
                ours_s.append(query(server.url, start, end)[0])
                theirs_s.append(query(prom_url, start, end)[0])
            mine, prom = statistics.median(ours_s), statistics.median(theirs_s)
            print(
                f"query_range {QUERY!r}, 24 h at 60 s (1,441 points, {len(ours)} series; answers equal): "
                f"raysight {mine * 1000:.0f} ms (min {min(ours_s) * 1000:.0f}), "
                f"Prometheus {prom * 1000:.0f} ms (min {min(theirs_s) * 1000:.0f}): {mine / prom:.2f}x"
            )
        finally:
            server.stop()
            prometheus.terminate()
            prometheus.wait(60)
        print(
            f"ratios: ingest {ingest_rate / (samples / backfill):.2f}x Prometheus's backfill (aim: >= 200k samples/s "
            f"a core), bytes/sample {blocks / prom_bytes:.2f}x (aim <= 3x), query {mine / prom:.2f}x (aim <= 2x)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    main(parser.parse_args().rounds)
