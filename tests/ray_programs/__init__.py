"""Ray programs the integration tests run under `raysight run`, and what they share."""

from __future__ import annotations

import os
import time

from raysight.client import Client


def wait_until_raysight_sees(state: str, tasks: set[str], timeout_s: float) -> None:
    """Poll the server `raysight run` pointed Ray at until each of the tasks named ``tasks`` reads ``state`` there:
    their workers' events (sent each second) have left the cluster, which may go before it sends them otherwise."""
    server = os.environ["RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR"].split("/ingest/")[0]
    deadline = time.monotonic() + timeout_s
    with Client(server) as client:
        while {t["name"] for t in client.list("tasks", filters=[f"state={state}"])["rows"]} < tasks:
            if time.monotonic() > deadline:
                raise TimeoutError(f"raysight did not see {tasks} {state} within {timeout_s} s")
            time.sleep(0.2)
