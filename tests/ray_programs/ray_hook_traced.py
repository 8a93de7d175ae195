"""Run under `raysight run --no-tracing` with Ray's own tracing on, its local hook writing the SDK's JSON lines to
/tmp/spans/<pid>.txt: a task that calls a nested task and an actor. Writes the pids whose files hold its spans to
the path it is given (other runs may leave files there too)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import ray

RAY_LOCAL_HOOK = "ray.util.tracing.setup_local_tmp_tracing:setup_tracing"


@ray.remote
def inner() -> int:
    return os.getpid()


@ray.remote
class Keeper:
    def pid(self) -> int:
        return os.getpid()


@ray.remote
def outer() -> list[int]:
    keeper = Keeper.remote()  # type: ignore[attr-defined]
    return [os.getpid(), ray.get(inner.remote()), ray.get(keeper.pid.remote())]


if __name__ == "__main__":
    ray.init(num_cpus=2, _tracing_startup_hook=RAY_LOCAL_HOOK)
    pids = {os.getpid(), *ray.get(outer.remote())}
    Path(sys.argv[1]).write_text("\n".join(map(str, sorted(pids))))
