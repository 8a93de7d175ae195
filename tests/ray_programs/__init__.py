"""Ray programs the integration tests run under `raysight run`, and what they share."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from raysight import wire
from raysight.client import Client


def raysight_server() -> str:
    """The server `raysight run` pointed Ray at."""
    return os.environ["RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR"].split(wire.RAY_EVENTS)[0]


def wait_until_raysight(holds: Callable[[Client], bool], what: str, timeout_s: float) -> None:
    """Poll the server `raysight run` pointed Ray at until ``holds`` of it (bounded by ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    with Client(raysight_server()) as client:
        while not holds(client):
            if time.monotonic() > deadline:
                raise TimeoutError(f"raysight did not show {what} within {timeout_s} s")
            time.sleep(0.2)


def wait_until_raysight_sees(state: str, tasks: set[str], timeout_s: float) -> None:
    """Wait until each of the tasks named ``tasks`` reads ``state`` in raysight: their workers' events (sent each
    second) have left the cluster, which may go before it sends them otherwise."""

    def seen(client: Client) -> bool:
        return {t["name"] for t in client.list("tasks", filters=[f"state={state}"])["rows"]} >= tasks

    wait_until_raysight(seen, f"{tasks} {state}", timeout_s)
