"""Tracing's cost and capacity: Ray's task throughput untraced, traced by raysight, and traced by Ray's own hook; spans
a second through the receiver; bytes a span stored.

1. Throughput: each round runs one fresh local Ray (`ray.init(num_cpus=2)`) per configuration in its own subprocess,
   interleaved, each round begun by the next configuration (a round's first run tends to be the slowest): warm up,
   then time N trivial tasks submitted inside one driver span (submit all, then `ray.get`), and the CPU each kind of
   process (driver, Ray's workers, Ray's other processes, the raysight server) spent a task meanwhile, until 2 s after
   (the spans sent and stored): the rate moves ±5 % between runs, the CPU far less, and it says where a cost is.
   ``off``: no tracing. ``raysight``: `raysight run`'s variables (its runtime-env hook), spans to a real raysight
   server. ``ray-hook``: Ray's own tracing with its local hook (``ray.util.tracing.setup_local_tmp_tracing``), which
   writes JSON span files under /tmp/spans. Aim: raysight costs < 10 % of the untraced rate, and at least 4× less
   than Ray's hook. Tasks of no argument (the default) also run ``off+arg``: untraced, given one argument more of a
   carrier's size, the least a context carried to such a task costs in Ray itself.
2. The receiver: OTLP/HTTP protobuf exports of 512 Ray-shaped spans (made once by the SDK's encoder), posted by 4
   connections to a server pinned to one core, each acknowledged once durable: spans a second acknowledged, then
   stored. Beside it, the same bodies posted to a sink in this process that reads and discards them.
3. Bytes a span: the spans table's storage blocks over its rows, against the bytes Ray's hook wrote a span.
4. Encoding: the µs a traced process's export thread spends writing one of those spans as OTLP protobuf, by hand
   (raysight's span queue) and by the OTLP exporter's encoder (the median of 21 batches).

Run: .venv/bin/python benchmarks/tracing.py [--rounds 5] [--tasks 3000] [--spans 204800] [--with-arg]
(``--spans 0`` skips the receiver; ``--with-arg``: tasks taking one argument, which carries the context for free)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.cpu import child_output
from raysight import wire
from raysight.cli.run import free_port, ray_env, tracing_env, wait_until_quiet
from raysight.settings import DB_FILE
from tests.ray_scenarios import ServerProcess

WARMUP = 200
CONFIGS = ("off", "raysight", "ray-hook")
FLOOR = "off+arg"  # untraced, each task given one argument more: what carrying a context costs Ray, whoever carries it
CARRIER_SIZE = 26  # bytes: W3C trace context in binary (``instrument/ray_tracing.carrier``)
RAY_HOOK = "ray.util.tracing.setup_local_tmp_tracing:setup_tracing"
RAY_SPANS = Path("/tmp/spans")  # where Ray's local hook writes
BATCH = 512
AIM_COST, AIM_VS_RAY = 0.10, 4.0


def child(tasks: int, ray_hook: bool, with_arg: bool, floor: bool) -> None:
    """Time ``tasks`` no-op tasks (taking one argument, ``with_arg``; one more, of a carrier's size, ``floor``) on a
    fresh local Ray, inside one driver span;
    print on stdout, as JSON, tasks/s and the CPU each kind of process spent a task meanwhile (until the spans had
    left and been stored): far steadier than the rate, for telling where a cost is."""
    import ray
    from opentelemetry import trace

    @ray.remote
    def noop(*_: int) -> None:
        return None

    args = ((1,) if with_arg else ()) + ((b"\x00" * CARRIER_SIZE,) if floor else ())

    options = {"_tracing_startup_hook": RAY_HOOK} if ray_hook else {}
    ray.init(address="local", num_cpus=2, include_dashboard=False, **options)
    try:
        tracer = trace.get_tracer("bench")
        with tracer.start_as_current_span("warm-up"):
            ray.get([noop.remote(*args) for _ in range(WARMUP)])
        time.sleep(SETTLE_S)
        before = cpu_seconds()
        with tracer.start_as_current_span("bench"):
            t0 = time.perf_counter()
            ray.get([noop.remote(*args) for _ in range(tasks)])
            rate = tasks / (time.perf_counter() - t0)
        time.sleep(SETTLE_S)  # the last spans leave, and are stored, before the cluster goes
        after = cpu_seconds()
        cpu_us = {kind: round((after[kind] - before.get(kind, 0.0)) / tasks * 1e6, 1) for kind in after}
        print(json.dumps({"rate": rate, "cpu_us": cpu_us}))
    finally:
        ray.shutdown()


SETTLE_S = 2.0  # past the server's spans linger
SERVER_PID_ENV = "RAYSIGHT_BENCH_SERVER_PID"


def cpu_seconds() -> dict[str, float]:
    """CPU seconds spent so far by this driver, Ray's workers, Ray's other processes and the raysight server."""
    import psutil

    me = psutil.Process()
    spent = {"driver": 0.0, "workers": 0.0, "ray": 0.0, "server": 0.0}
    server = int(os.environ.get(SERVER_PID_ENV, "0"))
    for proc in [me, *me.children(recursive=True), *([psutil.Process(server)] if server else [])]:
        try:
            times, command = proc.cpu_times(), " ".join(proc.cmdline())
        except psutil.Error:  # gone meanwhile
            continue
        if proc.pid == me.pid:
            kind = "driver"
        elif proc.pid == server:
            kind = "server"
        else:
            kind = "workers" if "default_worker.py" in command or proc.name().startswith("ray::") else "ray"
        spent[kind] += times.user + times.system
    return spent


def measure(tasks: int, config: str, server: ServerProcess, with_arg: bool) -> dict:
    drop = {"RAY_ADDRESS", *ray_env("http://unused"), *tracing_env("http://unused")}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env[SERVER_PID_ENV] = str(server.proc.pid if server.proc else 0)
    if config == "raysight":
        env.update(tracing_env(server.url))
    options = [
        *(["--ray-hook"] if config == "ray-hook" else []),
        *(["--with-arg"] if with_arg else []),
        *(["--floor"] if config == FLOOR else []),
    ]
    return json.loads(child_output(__file__, ["--child", str(tasks), *options], env))


def throughput(rounds: int, tasks: int, server: ServerProcess, with_arg: bool) -> tuple[float, float]:
    """Interleaved rounds; returns (raysight's cost, Ray hook's cost) as fractions of the untraced rate, and prints
    the CPU a task each configuration spent and the bytes a span Ray's hook wrote. Tasks of no argument are also run
    untraced with one argument more (:data:`FLOOR`): a context reaches a task's worker in its arguments, the only
    thing Ray hands the worker of each task that its users do not see, so that is the least any tracer pays there."""
    configs = CONFIGS if with_arg else (CONFIGS[0], FLOOR, *CONFIGS[1:])
    rates: dict[str, list[float]] = {c: [] for c in configs}
    cpu: dict[str, list[dict[str, float]]] = {c: [] for c in configs}
    hook_bytes, hook_spans = 0, 0
    for r in range(1, rounds + 1):
        turn = r % len(configs)
        for config in configs[turn:] + configs[:turn]:  # each first in turn: a round's first run is slower
            if config == "ray-hook":
                shutil.rmtree(RAY_SPANS, ignore_errors=True)
            run = measure(tasks, config, server, with_arg)
            rates[config].append(run["rate"])
            cpu[config].append(run["cpu_us"])
            if config == "ray-hook":
                files = list(RAY_SPANS.glob("*.txt"))
                hook_bytes += sum(f.stat().st_size for f in files)
                hook_spans += sum(f.read_bytes().count(b"\n") for f in files)
        print(f"round {r}: " + "  ".join(f"{c} {rates[c][-1]:,.0f}" for c in configs) + " tasks/s", flush=True)
    for c in configs:
        print(
            f"{c:>9}: median {statistics.median(rates[c]):7,.0f} tasks/s  "
            f"(min {min(rates[c]):,.0f}, max {max(rates[c]):,.0f}, {rounds} rounds)"
        )
    for c in configs:
        medians = {k: statistics.median(run[k] for run in cpu[c]) for k in cpu[c][0]}
        spent = "  ".join(f"{k} {v:,.0f}" for k, v in medians.items())
        print(f"{c:>9}: CPU a task (µs, median of rounds): {spent}  (all {sum(medians.values()):,.0f})")

    def cost(config: str, base: str = "off") -> float:  # the median of each round's ratio
        return 1 - statistics.median(x / o for x, o in zip(rates[config], rates[base]))

    print(
        f"cost of tracing (median of each round's ratio to its untraced run): raysight {cost('raysight'):.1%}, "
        f"Ray's hook {cost('ray-hook'):.1%}; Ray's hook wrote {hook_bytes / max(hook_spans, 1):,.0f} bytes a span "
        f"({hook_spans:,} spans)"
    )
    if not with_arg:
        print(
            f"one argument more, untraced ({FLOOR}): {cost(FLOOR):.1%} (Ray's, the floor of any carrier); "
            f"raysight beyond it: {cost('raysight', FLOOR):.1%}"
        )
    return cost("raysight"), cost("ray-hook")


def ray_shaped_spans() -> list[Any]:
    """BATCH SDK spans shaped as raysight's instrumentation sends a task's (its IDs and attributes each)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.trace import SpanKind

    made: list = []

    class Keep(SpanExporter):
        def export(self, batch):  # type: ignore[no-untyped-def]
            made.extend(batch)
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Keep()))
    tracer = provider.get_tracer("raysight.ray")
    ids = {
        "ray.session_name": "session_2026-11-24_12-00-00_000000_1",
        "ray.job_id": "01000000",
        "ray.node_id": "4eb79d48bb12cadfabcfe9e63e73a90516d1b1a680f227ab2f0b09c0",
        "ray.worker_id": "25430148045db4b9588359ce9224abcd368995c2c40ac1654b4a60da",
        "process.pid": 12345,
        "ray.function": "__main__.noop",
        "ray.task.kind": "task",
    }
    with tracer.start_as_current_span("bench"):
        for i in range(BATCH):
            with tracer.start_as_current_span(  # (a task's: consumer, so the store keeps how its attempt ended)
                "noop", kind=SpanKind.CONSUMER, attributes={**ids, "ray.task_id": f"{i:048x}", "ray.task.attempt": 0}
            ):
                pass
    return made[:BATCH]


def ray_shaped_bodies(spans: int) -> list[bytes]:
    """OTLP protobuf exports of BATCH spans each, shaped as raysight's instrumentation sends a task's."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    template = ray_shaped_spans()
    first = [span.context for span in template]
    bodies = []
    for b in range(spans // BATCH):
        for span, context in zip(template, first):  # each body its own traces: distinct spans, as a real run's
            span._context = context.__class__(context.trace_id ^ (b + 1), context.span_id, False, context.trace_flags)
        bodies.append(encode_spans(template).SerializeToString())
    return bodies


def encoding(repeat: int = 21) -> None:
    """What a traced process's export thread spends writing an SDK span as OTLP protobuf: by hand
    (``otlp_proto.sdk_request``, what raysight's span queue does) beside the OTLP exporter's encoder."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from raysight.instrument.otlp_proto import sdk_request

    spans = ray_shaped_spans()

    def per_span(encode: Any) -> float:
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            encode(spans)
            times.append(time.perf_counter() - started)
        return statistics.median(times) / len(spans) * 1e6

    ours, sdk = per_span(sdk_request), per_span(lambda s: encode_spans(s).SerializeToString())
    print(
        f"encoding an SDK span: {ours:.1f} µs by hand, {sdk:.1f} µs by the OTLP exporter's encoder ({sdk / ours:.1f}x)"
    )


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def post_all(url: str, bodies: list[bytes]) -> float:
    """Post every body over 4 connections; seconds taken."""
    headers = {"Content-Type": "application/x-protobuf"}

    def send(chunk: list[bytes]) -> None:
        with httpx.Client(timeout=60) as client:
            for body in chunk:
                reply = client.post(url, content=body, headers=headers)
                assert reply.status_code == 200, reply.text

    chunks = [bodies[i::4] for i in range(4)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(send, chunks))
    return time.perf_counter() - t0


def receiver(spans: int) -> None:
    bodies = ray_shaped_bodies(spans)
    sent = len(bodies) * BATCH
    sink = ThreadingHTTPServer(("127.0.0.1", free_port()), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    sink_s = post_all(f"http://127.0.0.1:{sink.server_address[1]}{wire.OTLP_TRACES}", bodies)
    sink.shutdown()
    sink.server_close()
    with tempfile.TemporaryDirectory(prefix="raysight-bench-") as data_dir:
        server = ServerProcess(Path(data_dir), prefix=["taskset", "-c", "0"]).start()
        try:
            acked_s = post_all(server.url + wire.OTLP_TRACES, bodies)
            t0 = time.perf_counter()
            with server.client() as client:
                wait_until_quiet(client, quiet_s=0.5, timeout_s=600)
                stored_s = acked_s + time.perf_counter() - t0
                stored = client.doctor()["counters"]["spans"]
        finally:
            server.stop()
        import duckdb

        con = duckdb.connect(str(Path(data_dir) / DB_FILE), read_only=True)
        (blocks,) = con.execute(
            "SELECT count(DISTINCT block_id) FROM pragma_storage_info('spans') WHERE block_id >= 0"
        ).fetchone()
        (block_size,) = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()
        blocks *= block_size
        con.close()
    assert stored == sent, f"{stored} of {sent} spans stored"
    print(
        f"receiver (pinned to one core, 4 connections, {BATCH} spans a body): {sent / acked_s:,.0f} spans/s "
        f"acknowledged (durable), {sent / stored_s:,.0f} spans/s stored; a sink that discards: "
        f"{sent / sink_s:,.0f} spans/s ({acked_s / sink_s:.1f}x its time)"
    )
    print(f"stored: {blocks / sent:,.0f} bytes a span (the spans table's blocks, {sent:,} spans)")


def main(rounds: int, tasks: int, spans: int, with_arg: bool) -> None:
    encoding()
    if spans:
        receiver(spans)
    with tempfile.TemporaryDirectory(prefix="raysight-bench-") as data_dir:
        server = ServerProcess(Path(data_dir)).start()
        try:
            ours, rays = throughput(rounds, tasks, server, with_arg)
        finally:
            server.stop()
    print(
        f"aim < {AIM_COST:.0%} of the untraced rate: {'met' if ours < AIM_COST else 'not met'}; "
        f"at least {AIM_VS_RAY:.0f}x less than Ray's hook: {rays / max(ours, 1e-9):.1f}x "
        f"({'met' if rays >= AIM_VS_RAY * ours else 'not met'})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--spans", type=int, default=204_800)
    parser.add_argument("--child", type=int, metavar="TASKS", help=argparse.SUPPRESS)
    parser.add_argument("--with-arg", action="store_true", help="Tasks that take one argument (default: none).")
    parser.add_argument("--ray-hook", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.ray_hook, args.with_arg, args.floor)
    else:
        main(args.rounds, args.tasks, args.spans, args.with_arg)
