"""Metrics: samples ingested per second, a day's `query_range` over 1,000 series, and bytes per sample stored, each
beside a real Prometheus (Debian's 2.42, as the tests run it) holding the same samples, in one run.

Counters ``bench_requests_total{node=…, route=…}``, a target (node) exposing one page of them, rising by 0 to 20 a
scrape. Two sets:

- **A cluster's pages**: 8 nodes of 1,000 series each (a Ray node's page holds ~1,100 lines), 300 scrapes 5 s apart
  (Ray's cadence): 2.4M samples. What ingest is measured on.
- **A day**: 1,000 series (4 nodes of 250), scraped every 15 s over the 24 h ending an hour ago: 5,760 scrapes of
  each target, 5.76M samples. What the query and the bytes are measured on (its ingest is printed too: smaller pages,
  more fixed cost a sample).

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
from dataclasses import dataclass
from pathlib import Path

import duckdb
import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.cpu import wait_idle
from raysight import wire
from raysight.cli.run import free_port
from raysight.settings import DB_FILE
from tests.ray_scenarios import ServerProcess

SERVER_CORE, GENERATOR_CORE = 0, 1
SESSION = "session_2026-11-24_00-00-00_000000_1"
QUERY = "sum by (node) (rate(bench_requests_total[5m]))"
PIN = ["taskset", "-c", str(SERVER_CORE)]
# The query loads the day's 5.76M samples, over `raysight server`'s default budget (--query-max-samples, 5M): the
# server it asks is given Prometheus's default (50M)
QUERY_OPTIONS = ["--query-max-samples", str(50_000_000)]


@dataclass(frozen=True)
class Load:
    """``nodes`` targets of ``routes`` counters each, scraped ``scrapes`` times ``every_s`` apart up to ``end_ms``."""

    nodes: int
    routes: int
    scrapes: int
    every_s: int
    end_ms: int

    @property
    def times_ms(self) -> np.ndarray:
        return self.end_ms - (self.scrapes - 1 - np.arange(self.scrapes)) * self.every_s * 1000

    @property
    def samples(self) -> int:
        return self.nodes * self.routes * self.scrapes

    def values(self) -> np.ndarray:
        """Each series' value at each scrape: (scrapes, nodes * routes), rising by 0-20 a scrape."""
        rng = np.random.default_rng(7)
        return np.cumsum(rng.integers(0, 21, size=(self.scrapes, self.nodes * self.routes), dtype=np.int64), axis=0)

    def page(self, values: np.ndarray, node: int) -> str:
        return "".join(
            f'bench_requests_total{{node="n{node}",route="/r{r}"}} {values[node * self.routes + r]}\n'
            for r in range(self.routes)
        )


def ingest_raysight(url: str, load: Load, values: np.ndarray) -> float:
    """POST every scrape, one connection a target in time order; seconds from the first POST to the last answer."""

    def target(node: int) -> None:
        with httpx.Client(timeout=60) as http:
            for i, scraped_ms in enumerate(load.times_ms):
                body = {
                    "session": SESSION,
                    "scraped_ms": int(scraped_ms),
                    "target": {"instance": f"10.0.0.{node}:8080", "job": "ray"},
                    "text": load.page(values[i], node),
                }
                while (status := http.post(url + wire.AGENT_METRICS, json=body).status_code) == 503:
                    time.sleep(0.01)
                if status != 200:
                    raise SystemExit(f"ingest answered {status}")

    started = time.perf_counter()
    with ThreadPoolExecutor(load.nodes) as pool:
        list(pool.map(target, range(load.nodes)))
    return time.perf_counter() - started


def backfill(home: Path, load: Load, values: np.ndarray) -> tuple[float, int]:
    """The samples backfilled into a Prometheus data dir (``home/data``) by promtool: the seconds it took (the text's
    writing not counted), and the bytes of its blocks (chunks, index)."""
    home.mkdir(parents=True, exist_ok=True)
    text = home / "bench.om"
    openmetrics(text, load, values)
    started = time.perf_counter()
    command = [*PIN, "promtool", "tsdb", "create-blocks-from", "openmetrics", str(text), str(home / "data")]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    took = time.perf_counter() - started
    text.unlink()
    return took, sum(f.stat().st_size for f in (home / "data").rglob("*") if f.is_file())


def openmetrics(path: Path, load: Load, values: np.ndarray) -> None:
    """The samples as OpenMetrics text, what promtool backfills."""
    labels = [
        f'{{instance="10.0.0.{n}:8080",job="ray",node="n{n}",route="/r{r}"}}'
        for n in range(load.nodes)
        for r in range(load.routes)
    ]
    with path.open("w") as out:
        out.write("# TYPE bench_requests counter\n")
        for i, scraped_ms in enumerate(load.times_ms):
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
    answer = httpx.get(url + wire.PROM_QUERY_RANGE, params=params, timeout=120).json()
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


def ingested(home: Path, load: Load, values: np.ndarray) -> float:
    """raysight's ingest of ``load`` into a fresh server on ``home``, pinned to core 0: samples a second."""
    server = ServerProcess(home, prefix=PIN, start_timeout_s=60).start()
    try:
        return load.samples / ingest_raysight(server.url, load, values)
    finally:
        server.stop()


def main(rounds: int) -> None:
    if not shutil.which("prometheus") or not shutil.which("promtool"):
        raise SystemExit("Prometheus is not installed: ./dev.sh test installs Debian's")
    os.sched_setaffinity(0, {GENERATOR_CORE})
    now_ms = time.time_ns() // 1_000_000
    cluster = Load(nodes=8, routes=1000, scrapes=300, every_s=5, end_ms=now_ms // 5000 * 5000 - 3_600_000)
    day = Load(nodes=4, routes=250, scrapes=24 * 3600 // 15, every_s=15, end_ms=now_ms // 15_000 * 15_000 - 3_600_000)
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        home = Path(tmp)
        values = cluster.values()
        ours = ingested(home / "cluster", cluster, values)
        theirs, _ = backfill(home / "cluster-prometheus", cluster, values)
        theirs = cluster.samples / theirs
        print(
            f"ingest, a cluster's pages ({cluster.samples:,} samples: {cluster.nodes} nodes of {cluster.routes:,} "
            f"series, {cluster.scrapes} scrapes): raysight {ours:,.0f} samples/s on one core (durable at each answer); "
            f"Prometheus's backfill {theirs:,.0f}/s: {ours / theirs:.2f}x"
        )

        values = day.values()
        samples = day.samples
        day_rate = ingested(home / "raysight", day, values)
        print(
            f"a day: {samples:,} samples, {day.nodes * day.routes:,} series ({day.nodes} pages of {day.routes}), "
            f"{day.scrapes:,} scrapes {day.every_s} s apart; raysight ingests them at {day_rate:,.0f} samples/s"
        )
        blocks, store_size = raysight_bytes(home / "raysight" / DB_FILE)
        took, prom_bytes = backfill(home / "prometheus", day, values)
        print(
            f"bytes/sample: raysight {blocks / samples:.2f} (metric_samples' blocks; the whole store "
            f"{store_size / samples:.2f}), Prometheus {prom_bytes / samples:.2f} (its blocks: chunks, index): "
            f"{blocks / prom_bytes:.2f}x; Prometheus's backfill {samples / took:,.0f} samples/s"
        )

        server = ServerProcess(home / "raysight", prefix=PIN, start_timeout_s=60, options=QUERY_OPTIONS).start()
        prometheus, prom_url = start_prometheus(home / "prometheus")
        try:
            wait_idle([server.proc.pid, prometheus.pid], timeout_s=60)  # type: ignore[union-attr]
            start, end = day.times_ms[0] / 1000, day.times_ms[-1] / 1000
            _, answer = query(server.url, start, end)
            _, expected = query(prom_url, start, end)
            same(answer, expected)
            ours_s, theirs_s = [], []
            for _ in range(rounds):
                ours_s.append(query(server.url, start, end)[0])
                theirs_s.append(query(prom_url, start, end)[0])
            mine, prom = statistics.median(ours_s), statistics.median(theirs_s)
            print(
                f"query_range {QUERY!r}, 24 h at 60 s (1,441 points, {len(answer)} series; answers equal): "
                f"raysight {mine * 1000:.0f} ms (min {min(ours_s) * 1000:.0f}), "
                f"Prometheus {prom * 1000:.0f} ms (min {min(theirs_s) * 1000:.0f}): {mine / prom:.2f}x"
            )
        finally:
            server.stop()
            prometheus.terminate()
            prometheus.wait(60)
        print(
            f"aims: >= 200k samples/s ingested a core: {ours:,.0f}; bytes/sample <= 3x Prometheus's: "
            f"{blocks / prom_bytes:.2f}x; query within 2x of Prometheus: {mine / prom:.2f}x"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    main(parser.parse_args().rounds)
