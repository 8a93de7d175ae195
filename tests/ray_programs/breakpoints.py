"""A job that pauses four times, in turn: in a task, an actor's method, an async actor's method and a task again
(for a DAP client), each at a `breakpoint()` one call below the Ray function (so that `up` reaches its frame); then
runs two tasks that raise, which `raysight run --post-mortem` freezes on their failing frame; then a task paused by
Ray's own debugger (debugpy waiting for a client on its node), left paused until the file $RELEASE names exists.
Prints what each returned once resumed, and how each failing task failed (tests/test_debugger.py drives the
pauses)."""

import asyncio
import os
import time
from pathlib import Path

import ray


def doubled(x: int) -> int:
    twice = x * 2
    breakpoint()
    return twice


@ray.remote
def task(y: int) -> int:
    x = y + 1
    return doubled(x)


@ray.remote
class Counter:
    def __init__(self) -> None:
        self.total = 10

    def add(self, y: int) -> int:
        x = y + self.total
        return doubled(x)


@ray.remote
class AsyncCounter:
    async def add(self, y: int) -> int:
        await asyncio.sleep(0)
        x = y + 100
        return doubled(x)


@ray.remote(max_retries=0)
def divide(total: int, parts: int) -> float:
    share = total * 3
    return share / parts  # parts == 0: ZeroDivisionError, frozen here post mortem


@ray.remote
class RaysOwn:  # (an actor: a process of its own, where debugpy has not listened yet: it listens once a process)
    def pause(self) -> None:
        from ray.util import debugpy as ray_debugpy

        ray_debugpy.set_trace()  # Ray's own debugger, not raysight's: it waits for a debugpy client


if __name__ == "__main__":
    ray.init(num_cpus=2)
    print("task", ray.get(task.remote(20)), flush=True)
    print("actor", ray.get(Counter.remote().add.remote(1)), flush=True)
    print("async actor", ray.get(AsyncCounter.remote().add.remote(2)), flush=True)
    print("dap task", ray.get(task.remote(30)), flush=True)  # driven by a DAP client
    for total in (7, 8):  # the first quit by its client, the second left to time out
        try:
            ray.get(divide.remote(total, 0))
        except ray.exceptions.RayTaskError as exc:
            print("divide failed", type(exc.cause).__name__, exc.cause, flush=True)
    rays_own = RaysOwn.remote()
    rays_own.pause.remote()
    release, deadline = Path(os.environ["RELEASE"]), time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    print("released", release.exists(), flush=True)
