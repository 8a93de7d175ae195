"""Run under `raysight run`: tasks whose profiles the tests read after the cluster is gone. A task burning CPU in
`burn` for 2 s and one sleeping 1 s; an actor running one after the other (one worker) a call that burns and a call
that sleeps; an async actor running two calls at once on its event loop, one computing between its awaits, the
other blocking in `time.sleep`. Writes each one's task ID to the path given, as JSON, once raysight has its samples."""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import time
from pathlib import Path

import ray

from raysight.client import Client
from raysight.instrument.export import LINGER_S
from tests.ray_programs import wait_until_raysight


def burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def task_id() -> str:
    found = ray.get_runtime_context().get_task_id()
    assert found is not None
    return found


@ray.remote
def burning() -> str:
    burn(2.0)
    return task_id()


@ray.remote
def sleeping() -> str:
    time.sleep(1.0)
    return task_id()


@ray.remote
class Worker:
    def hot(self) -> str:
        burn(0.6)
        return task_id()

    def idle(self) -> str:
        time.sleep(0.6)
        return task_id()


def crunch() -> None:
    burn(0.03)


def doze() -> None:
    time.sleep(0.03)


@ray.remote
class Loop:
    async def computing(self) -> str:
        for _ in range(20):
            crunch()
            await asyncio.sleep(0.01)  # the other call runs meanwhile
        return task_id()

    async def blocking(self) -> str:
        for _ in range(20):
            doze()
            await asyncio.sleep(0.01)
        return task_id()


def main(out: str) -> None:
    ray.init(num_cpus=2)
    ids = {"burning": ray.get(burning.remote()), "sleeping": ray.get(sleeping.remote())}
    worker = Worker.remote()  # type: ignore[attr-defined]
    ids["hot"] = ray.get(worker.hot.remote())
    ids["idle"] = ray.get(worker.idle.remote())
    loop = Loop.remote()  # type: ignore[attr-defined]
    ray.get(loop.__ray_ready__.remote())
    ids["computing"], ids["blocking"] = ray.get([loop.computing.remote(), loop.blocking.remote()])

    for name, task in ids.items():
        wait_until_raysight(functools.partial(_sampled, task=task), f"samples of {name} ({task})", 30)
    time.sleep(2 * LINGER_S)  # (the samples of each task's last moments, sent within a second)
    Path(out).write_text(json.dumps(ids))
    ray.shutdown()


def _sampled(client: Client, task: str) -> bool:
    return bool(client.profile(task=task)["samples"])


if __name__ == "__main__":
    main(sys.argv[1])
