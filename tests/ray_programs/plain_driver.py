"""A driver that joins a running cluster (`python plain_driver.py ADDRESS`), as one started in another shell would:
a task that raises (saying so first), three that succeed, an actor and its methods. Prints the system config the
cluster gave it."""

from __future__ import annotations

import json
import sys
import time

import ray


@ray.remote(max_retries=0)
def raises() -> None:
    print("raises: about to raise, on purpose")
    raise RuntimeError("boom: raised in a task of a plain driver")


@ray.remote
def add_one(x: int) -> int:
    print(f"add_one({x}) ran on a node of the cluster")
    return x + 1


@ray.remote
class Accumulator:
    def __init__(self) -> None:
        self.total = 0

    def add(self, k: int) -> int:
        self.total += k
        return self.total


def main(address: str) -> None:
    ray.init(address=address)
    print("system config:", json.dumps(ray._private.state.state.get_system_config()))  # what the GCS gives a driver
    try:
        ray.get(raises.remote())
    except ray.exceptions.RayTaskError:
        print("raises: raised as expected")
    assert ray.get([add_one.remote(i) for i in range(3)]) == [1, 2, 3]
    acc = Accumulator.remote()  # type: ignore[attr-defined]
    assert ray.get([acc.add.remote(k) for k in range(3)])[-1] == 3
    # Ray's workers flush their events each second; let the driver's last ones go before it leaves. Nothing in here
    # can see them arrive (started without raysight's variables, it knows no server to ask), so a fixed wait, past
    # one flush interval.
    time.sleep(1.5)


if __name__ == "__main__":
    main(sys.argv[1])
