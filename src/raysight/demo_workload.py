"""The sample workload of `raysight demo` (and of the integration tests): run it under `raysight run`."""

from __future__ import annotations

import os
import sys
import tempfile
import time

import ray


@ray.remote
def child(x: int) -> int:
    print(f"child {x}")
    return x * 2


@ray.remote
def parent(n: int) -> int:
    return sum(ray.get([child.remote(i) for i in range(n)]))


@ray.remote(max_retries=0)
def fails() -> None:
    print("fails: about to raise", file=sys.stderr)
    raise ValueError("boom: this task fails on purpose")


@ray.remote(max_retries=2)
def crash_once(marker: str) -> str:
    """Kills its worker on the first attempt; the retry succeeds."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        print("crash_once: first attempt, exiting", flush=True)
        os._exit(1)
    print("crash_once: retry", flush=True)
    return "recovered"


@ray.remote
class Counter:
    def __init__(self) -> None:
        self.n = 0

    def inc(self) -> int:
        self.n += 1
        print(f"count {self.n}")
        return self.n


@ray.remote(max_restarts=1, max_task_retries=0)
class Fragile:
    def ping(self) -> str:
        return "pong"

    def crash(self) -> None:
        os._exit(1)


def main() -> None:
    ray.init(num_cpus=2)
    print("nested:", ray.get(parent.remote(3)))
    time.sleep(1.5)  # the parent's worker flushes its children's events each second; let it before crashes begin
    try:
        ray.get(fails.remote())
    except ray.exceptions.RayTaskError:
        print("fails: failed as expected")
    marker = os.path.join(tempfile.mkdtemp(), "crashed")
    print("crash_once:", ray.get(crash_once.remote(marker)))
    counter = Counter.options(name="demo_counter").remote()  # type: ignore[attr-defined]
    print("counter:", ray.get([counter.inc.remote() for _ in range(3)]))
    fragile = Fragile.remote()  # type: ignore[attr-defined]
    ray.get(fragile.ping.remote())
    try:
        ray.get(fragile.crash.remote())
    except ray.exceptions.RayActorError:
        print("fragile: crashed, restarting")
    time.sleep(1)
    print("fragile after restart:", ray.get(fragile.ping.remote()))
    ray.kill(counter)
    time.sleep(2)  # let Ray flush its last events before the local cluster goes away
    ray.shutdown()


if __name__ == "__main__":
    main()
