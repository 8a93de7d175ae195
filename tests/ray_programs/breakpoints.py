"""A job that pauses three times, in turn: in a task, an actor's method and an async actor's method, each at a
`breakpoint()` one call below the Ray function (so that `up` reaches its frame); prints what each returned once
resumed (tests/test_debugger.py drives the pauses)."""

import asyncio

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


if __name__ == "__main__":
    ray.init(num_cpus=2)
    print("task", ray.get(task.remote(20)), flush=True)
    print("actor", ray.get(Counter.remote().add.remote(1)), flush=True)
    print("async actor", ray.get(AsyncCounter.remote().add.remote(2)), flush=True)
