"""Polling a live cluster's dashboard for what Ray never sends as events — placement groups, objects, runtime envs,
cluster events, submitted jobs, drivers, the cluster's usage and pending demand — and sending each poll to the server
(``POST /ingest/agent/ray-state``), which keeps every change as history. One request per resource a poll (every
5 s; objects, which every worker must be asked for, every 30 s), each within Ray's own list limit, so the cluster
pays little. Inside `raysight run` it polls the session the
driver joined, at the address its head logged; `raysight poll --dashboard URL` polls a `ray start` cluster.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from raysight.agent.scrape import SessionWatcher
from raysight.client import Client

POLL_EVERY_S = 5.0
# Listing objects asks every worker, the driver too, for its references: sampled less often than the rest
SAMPLE_OBJECTS_EVERY = 6  # polls
TIMEOUT_S = 10.0
RAY_LIST_LIMIT = 10_000  # the most Ray's state API lists at once
STATE_RESOURCES = ("placement_groups", "objects", "runtime_envs", "cluster_events")
_DASHBOARD_LINE = re.compile(rb"Dashboard head http address: (\S+)")


def dashboard_url(session: Path) -> str | None:
    """The session's dashboard, as its head logged it in ``logs/dashboard.log`` (None until it has)."""
    try:
        found = _DASHBOARD_LINE.findall((session / "logs" / "dashboard.log").read_bytes())
    except OSError:
        return None
    return f"http://{found[-1].decode()}" if found else None


def ray_auth_headers(env: Mapping[str, str]) -> dict[str, str]:
    """What Ray's own processes send a cluster with token auth: the token (``RAY_AUTH_TOKEN``, else the file at
    ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``, which makes Ray 2.60 turn token auth on), unless
    ``RAY_AUTH_MODE=disabled``. A dashboard without token auth ignores it."""
    if env.get("RAY_AUTH_MODE") == "disabled":
        return {}
    token = env.get("RAY_AUTH_TOKEN")
    path = Path(env.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    if not token and path.is_file():
        token = path.read_text().strip()
    return {"authorization": f"Bearer {token}"} if token else {}


# Ray's event stream reports no driver's worker: the drivers' rows of Ray's workers, asked for by that filter
DRIVERS = {"filter_keys": "worker_type", "filter_predicates": "=", "filter_values": "DRIVER"}


def _state_rows(http: httpx.Client, dashboard: str, resource: str, filters: Mapping[str, str] = {}) -> list[Any]:
    params: dict[str, str | int] = {"limit": RAY_LIST_LIMIT, "detail": "True", "timeout": int(TIMEOUT_S), **filters}
    body = http.get(f"{dashboard}/api/v0/{resource}", params=params).json()
    if not (isinstance(body, dict) and body.get("result") is True):
        raise ValueError(str(body.get("msg") if isinstance(body, dict) else body)[:500])
    rows: list[Any] = body["data"]["result"]["result"]
    return rows


def due(count: int) -> list[str]:
    """What poll number ``count`` (from 0) asks for: everything, objects every :data:`SAMPLE_OBJECTS_EVERY` polls."""
    sampled = count % SAMPLE_OBJECTS_EVERY == 0
    return [r for r in (*STATE_RESOURCES, "jobs", "drivers", "cluster_status") if r != "objects" or sampled]


def poll(http: httpx.Client, dashboard: str, resources_due: list[str]) -> dict[str, Any]:
    """One poll of the dashboard for ``resources_due``: ``resources`` (each one's rows as Ray lists them, detail
    included), its ``cluster_status`` (usage and pending demand, once the cluster's monitor has reported) and
    ``errors`` (why one could not be had: that resource is left out, the others stand)."""
    resources: dict[str, Any] = {}
    errors: dict[str, str] = {}
    status = None
    for resource in resources_due:
        try:
            if resource == "jobs":
                resources[resource] = http.get(f"{dashboard}/api/jobs/").raise_for_status().json()
            elif resource == "cluster_status":  # (None until the cluster's monitor has reported)
                status = http.get(f"{dashboard}/api/cluster_status", params={"format": 0}).json()["data"][
                    "clusterStatus"
                ]
            elif resource == "drivers":
                resources[resource] = _state_rows(http, dashboard, "workers", DRIVERS)
            else:
                resources[resource] = _state_rows(http, dashboard, resource)
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            errors[resource] = f"{type(exc).__name__}: {exc}"
    return {"resources": resources, "errors": errors, **({"cluster_status": status} if status else {})}


def session_name(http: httpx.Client, dashboard: str) -> str:
    """The name of the session the dashboard serves (its ``/api/version``, as Ray's job client reads it)."""
    name = http.get(f"{dashboard}/api/version").raise_for_status().json().get("session_name")
    if not isinstance(name, str) or not name.startswith("session_"):
        raise ValueError(f"{dashboard} names no Ray session in /api/version")
    return name


def poll_dashboard(
    client: Client, key: str | None, dashboard: str, http: httpx.Client, count: int, session: str | None = None
) -> dict[str, Any]:
    """Poll a dashboard (poll number ``count``) and send what it found to the server, for ``session`` (default: the
    one the dashboard serves then); returns the poll. A poll that found nothing is not sent: the cluster is gone or
    going. A dashboard that cannot be reached, or a server that refuses, raises (httpx's or raysight's)."""
    found = poll(http, dashboard, due(count))
    polled = {"session": session or session_name(http, dashboard), "polled_ns": time.time_ns(), **found}
    if found["resources"]:
        client.ray_state(polled, key)
    return polled


class StatePoller(SessionWatcher):
    """Polls the dashboard of the session `raysight run`'s driver joined, once its head has logged where it is."""

    every_s = POLL_EVERY_S
    name = "raysight-poll"
    tick_when_stopped = False  # the driver gone, its cluster is going: what it answers then is no longer so

    def __init__(self, server: str, key: str | None, driver_pid: int, ray_dir: Path) -> None:
        super().__init__(server, key, driver_pid, ray_dir)
        self._http = httpx.Client(timeout=TIMEOUT_S, trust_env=False, headers=ray_auth_headers(os.environ))
        self._polls = 0

    def tick(self, session: Path) -> None:
        dashboard = dashboard_url(session)
        if dashboard is None:
            return
        count, self._polls = self._polls, self._polls + 1
        poll_dashboard(self._client, self.key, dashboard, self._http, count, session.name)

    def stop(self, timeout: float = 5) -> None:
        super().stop(timeout)
        self._http.close()
