"""Run under `raysight run` (tracing on), with ``TRACEPARENT`` set as a caller inside someone else's trace would: a
request that goes driver → task → nested task → actor → async actor method, a user's own span inside a task (and a
log record inside it, in Ray's JSON logging), a task retried after an exception, a streaming generator, a task
submitted outside any span, and each kind of task failing in a worker raysight traces and in one it does not. Then,
in a trace of its own, four tasks whose owner dies right after they returned or raised, before it sends Ray their end
states."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import ray
from opentelemetry import context as otel_context
from opentelemetry import trace
from ray._private.ray_constants import WORKER_PROCESS_SETUP_HOOK_ENV_VAR

import raysight.instrument
from tests.ray_programs import wait_until_raysight


@ray.remote
def leaf(x: int) -> int:
    with trace.get_tracer("user.code").start_as_current_span("user-span", attributes={"user.x": x}):
        print(f"leaf: task_id={ray.get_runtime_context().get_task_id()}", flush=True)
        logging.getLogger("leaf").warning("leaf: logged inside the user's span")
        return x + 1


@ray.remote
class Doubler:
    async def work(self, x: int) -> int:
        await asyncio.sleep(0.05)
        return x * 2


@ray.remote
class Counter:
    def __init__(self) -> None:
        self.doubler = Doubler.remote()  # type: ignore[attr-defined]

    def add(self, x: int) -> int:
        return ray.get(self.doubler.work.remote(x))


@ray.remote
def middle(x: int) -> tuple[int, object]:
    """The sum, and the counter's handle: the driver keeps the actors alive until their spans are in (an actor dies
    with its owner's last handle, and a span that ended a moment before may go with it)."""
    y = ray.get(leaf.remote(x))
    counter = Counter.remote()  # type: ignore[attr-defined]
    return ray.get(counter.add.remote(y)), counter


@ray.remote(max_retries=1, retry_exceptions=True)
def flaky(marker: str) -> str:
    if not Path(marker).exists():
        Path(marker).touch()
        raise RuntimeError("the first attempt fails on purpose")
    return "ok"


@ray.remote(num_returns="streaming")
def count_to(n: int):  # type: ignore[no-untyped-def]
    yield from range(n)


@ray.remote
def lonely() -> int:
    return 7


LOST_LEAVES, RAISES = 4, 3  # the leaves of the owner that dies, and which of them raises


@ray.remote(num_cpus=0)
def lost_leaf(i: int, barrier: str) -> int:
    """Says it started (its task ID, in a file), waits until every leaf has, then returns, or raises (the last)."""
    Path(barrier, f"started-{i}").write_text(ray.get_runtime_context().get_task_id())
    while not Path(barrier, "go").exists():
        time.sleep(0.001)
    if i == RAISES:
        raise ValueError(f"leaf {i} raises on purpose")
    return i


@ray.remote(max_retries=0)
def lost_owner(barrier: str) -> None:
    """Owns four leaves that end together, and dies as soon as they have: the leaves' end states, which an owner
    sends Ray each second, go with it."""
    leaves = [lost_leaf.remote(i, barrier) for i in range(LOST_LEAVES)]
    while len(list(Path(barrier).glob("started-*"))) < LOST_LEAVES:
        time.sleep(0.001)
    Path(barrier, "go").touch()
    ray.wait(leaves, num_returns=LOST_LEAVES, fetch_local=False)
    os._exit(1)


def lose_the_owner(barrier: Path) -> None:
    """Run :func:`lost_owner` in a trace of its own; wait until raysight holds each leaf's span."""
    barrier.mkdir()
    with (
        trace.get_tracer("driver").start_as_current_span("lost-owner", context=otel_context.Context()),
        contextlib.suppress(ray.exceptions.WorkerCrashedError),
    ):
        ray.get(lost_owner.remote(str(barrier)))
    task_ids = [path.read_text() for path in barrier.glob("started-*")]
    wait_until_raysight(
        lambda client: all(client.traces(task=task_id)["traces"] for task_id in task_ids),
        "the spans of the owner's lost leaves",
        60,
    )


# --- tracebacks: each kind of task fails in a worker raysight traces, and in one it does not -----------------------

UNTRACED = {"env_vars": {WORKER_PROCESS_SETUP_HOOK_ENV_VAR: ""}}  # a task's own env: its worker skips the job's hook


@ray.remote
def breaks() -> None:
    raise ValueError("a task broke")


@ray.remote
def breaks_streaming():  # type: ignore[no-untyped-def]
    yield 1
    raise ValueError("a streaming task broke")


@ray.remote
class Breaker:
    def breaks(self) -> None:
        raise ValueError("a method broke")


@ray.remote
class AsyncBreaker:
    async def breaks(self) -> None:
        await asyncio.sleep(0)
        raise ValueError("an async method broke")

    async def breaks_streaming(self):  # type: ignore[no-untyped-def]
        yield 1
        raise ValueError("an async streaming method broke")


def failures(options: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each kind of task, run with ``options``: the task ID of its failure and its text (``str`` of the RayTaskError
    the driver gets)."""
    breaker, async_breaker = Breaker.options(**options).remote(), AsyncBreaker.options(**options).remote()
    calls = {
        "task": breaks.options(**options).remote(),
        "streaming task": breaks_streaming.options(**options).remote(),
        "method": breaker.breaks.remote(),
        "async method": async_breaker.breaks.remote(),
        "async streaming method": async_breaker.breaks_streaming.remote(),
    }
    failed = {}
    for kind, call in calls.items():
        try:
            for ref in call if isinstance(call, ray.ObjectRefGenerator) else [call]:
                ray.get(ref)
        except ray.exceptions.RayTaskError as error:
            failed[kind] = {"task_id": ref.task_id().hex(), "text": str(error)}
        else:
            raise AssertionError(f"the {kind} did not fail")
    return failed


def tracebacks(path: Path) -> None:
    """Each kind of task failed in a worker raysight traces (its spans in a trace of their own) and in one that runs
    without raysight (the same code, Ray and driver), written to ``path``; then the plain task's span is in."""
    with trace.get_tracer("driver").start_as_current_span("tracebacks", context=otel_context.Context()):
        traced = failures({})
    raysight.instrument.uninstrument()  # no trace context in what the driver sends: an untraced worker would keep it
    try:
        untraced = failures({"runtime_env": UNTRACED})
    finally:
        raysight.instrument.instrument()
    path.write_text(json.dumps({"traced": traced, "untraced": untraced}))
    wait_until_raysight(lambda client: bool(client.traces(name="breaks")["traces"]), "the failed task's span", 60)


EXPECTED = {"middle", "leaf", "user-span", "Counter.add", "Doubler.work", "flaky", "count_to", "lonely"}


def main(marker: str) -> None:
    ray.init(num_cpus=2, logging_config=ray.LoggingConfig(encoding="JSON"))  # Ray's JSON lines name their span
    with trace.get_tracer("driver").start_as_current_span("request"):
        total, counter = ray.get(middle.remote(1))
        assert total == 4
        assert ray.get(flaky.remote(marker)) == "ok"
        assert [ray.get(ref) for ref in count_to.remote(3)] == [0, 1, 2]
    assert ray.get(lonely.remote()) == 7  # outside any span: under the caller's incoming context
    tracebacks(Path(marker).with_name("tracebacks.json"))

    missing = set(EXPECTED)

    def stored(client):  # type: ignore[no-untyped-def]
        missing.difference_update({name for name in missing if client.traces(name=name)["traces"]})
        return not missing

    try:
        wait_until_raysight(stored, "the spans of the traced workload", 60)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}: none named {sorted(missing)}") from None
    del counter
    lose_the_owner(Path(marker).parent / "lost-owner")


if __name__ == "__main__":
    main(sys.argv[1])
