"""Polling a live cluster's dashboard for what Ray never sends as events — placement groups, objects, runtime envs,
cluster events, submitted jobs, drivers, the cluster's usage and pending demand, Serve's state — and sending each
poll to the server (``POST /ingest/agent/ray-state``), which keeps every change as history. One request per resource
a poll (every 5 s; objects, which every worker must be asked for, every 30 s; Serve's state once a ServeController
lives), each within Ray's own list limit, so the cluster pays little. Inside `raysight run` it polls the session the
driver joined, at the address its head logged; `raysight poll --dashboard URL` polls a `ray start` cluster. It sends
Ray's token as Ray's own processes do, read again whenever the dashboard refuses it.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Generator, Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any, Self

import httpx

from raysight import os_thread, wire
from raysight.client import Client
from raysight.config import OWN_HEADERS

POLL_EVERY_S = 5.0
# Listing objects asks every worker, the driver too, for its references: sampled less often than the rest
SAMPLE_OBJECTS_EVERY = 6  # polls
TIMEOUT_S = 10.0
RAY_LIST_LIMIT = 10_000  # the most Ray's state API lists at once
REFUSED = {401: "no token was sent", 403: "the token sent is not the cluster's"}  # Ray's token auth
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


class RayToken(httpx.Auth):
    """Ray's token (:func:`ray_auth_headers`) on each request, read again when the dashboard refuses one (401, 403),
    which is then sent once more if the token changed: Ray writes ``~/.ray/auth_token`` when a machine's first cluster
    starts, after a poller started with it may have read none."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env
        self._headers = ray_auth_headers(env)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers.update(self._headers)
        response = yield request
        if response.status_code in REFUSED and (headers := ray_auth_headers(self._env)) != self._headers:
            self._headers = headers
            request.headers.pop("authorization", None)
            request.headers.update(headers)
            yield request


def dashboard_client(env: Mapping[str, str], trust_env: bool = False) -> httpx.Client:
    """An HTTP client of a cluster's dashboard: raysight's User-Agent, and Ray's token as :class:`RayToken` sends it."""
    return httpx.Client(timeout=TIMEOUT_S, trust_env=trust_env, headers=OWN_HEADERS, auth=RayToken(env))


class TokenRefused(ValueError):
    """The dashboard refused raysight's token (or its lack of one)."""


def _get(http: httpx.Client, url: str, params: Mapping[str, str | int] | None = None) -> httpx.Response:
    """A dashboard's answer; one that refuses raysight's token raises, saying so."""
    response = http.get(url, params=params)
    if response.status_code in REFUSED:
        raise TokenRefused(
            f"{response.status_code} {response.reason_phrase} ({REFUSED[response.status_code]}): the cluster uses "
            "token auth; raysight sends RAY_AUTH_TOKEN, else the token in RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token"
        )
    return response


# Ray's event stream reports no driver's worker: the drivers' rows of Ray's workers, asked for by that filter
DRIVERS = {"filter_keys": "worker_type", "filter_predicates": "=", "filter_values": "DRIVER"}
# The workers Ray's own debugger holds paused (`breakpoint()` under RAY_DEBUG=1, waiting for a debugpy client)
PAUSED = {"filter_keys": "num_paused_threads", "filter_predicates": "!=", "filter_values": "0"}
# Serve's controller, whose life says whether Serve runs in the session
SERVE_CONTROLLER = {"filter_keys": "class_name", "filter_predicates": "=", "filter_values": "ServeController"}


def _state_rows(http: httpx.Client, dashboard: str, resource: str, filters: Mapping[str, str] = {}) -> list[Any]:
    params: dict[str, str | int] = {"limit": RAY_LIST_LIMIT, "detail": "True", "timeout": int(TIMEOUT_S), **filters}
    body = _get(http, dashboard + wire.path(wire.RAY_STATE, resource=resource), params).json()
    if not (isinstance(body, dict) and body.get("result") is True):
        raise ValueError(str(body.get("msg") if isinstance(body, dict) else body)[:500])
    rows: list[Any] = body["data"]["result"]["result"]
    return rows


def due(count: int) -> list[str]:
    """What poll number ``count`` (from 0) asks for: everything, objects every :data:`SAMPLE_OBJECTS_EVERY` polls."""
    sampled = count % SAMPLE_OBJECTS_EVERY == 0
    resources = (*STATE_RESOURCES, "jobs", "drivers", "paused_workers", "cluster_status", "serve")
    return [r for r in resources if r != "objects" or sampled]


def serve_details(http: httpx.Client, dashboard: str) -> dict[str, Any] | None:
    """Serve's state (``ServeInstanceDetails``, as Ray's `serve status` reads it), or None while no ServeController
    lives: the dashboard answers that route by joining the cluster as a driver, which a session without Serve must
    not gain."""
    controllers = _state_rows(http, dashboard, "actors", SERVE_CONTROLLER)
    if not any(isinstance(row, dict) and row.get("state") == "ALIVE" for row in controllers):
        return None
    details: dict[str, Any] = _get(http, dashboard + wire.RAY_SERVE_APPLICATIONS).raise_for_status().json()
    return details


def poll(http: httpx.Client, dashboard: str, resources_due: list[str]) -> wire.RayStateFound:
    """One poll of the dashboard for ``resources_due``: ``resources`` (each one's rows as Ray lists them, detail
    included), its ``cluster_status`` (usage and pending demand, once the cluster's monitor has reported), ``serve``
    (Serve's state; None while it does not run) and ``errors`` (why one could not be had: that resource is left out,
    the others stand). A dashboard that answered none of them raises why (the cluster is gone or going)."""
    resources: dict[str, list[Any]] = {}
    errors: dict[str, str] = {}
    unanswered: list[httpx.TransportError] = []
    status = serve = None
    serve_polled = False
    for resource in resources_due:
        try:
            if resource == "jobs":
                resources[resource] = _get(http, dashboard + wire.RAY_JOBS).raise_for_status().json()
            elif resource == "cluster_status":  # (None until the cluster's monitor has reported)
                status = _get(http, dashboard + wire.RAY_CLUSTER_STATUS, {"format": 0}).json()["data"]["clusterStatus"]
            elif resource == "serve":
                serve, serve_polled = serve_details(http, dashboard), True
            elif resource == "drivers":
                resources[resource] = _state_rows(http, dashboard, "workers", DRIVERS)
            elif resource == "paused_workers":  # (the filter's value is text: checked again here)
                rows = _state_rows(http, dashboard, "workers", PAUSED)
                resources[resource] = [r for r in rows if isinstance(r, dict) and (r.get("num_paused_threads") or 0)]
            else:
                resources[resource] = _state_rows(http, dashboard, resource)
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            errors[resource] = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, httpx.TransportError):
                unanswered.append(exc)
    if unanswered and len(unanswered) == len(resources_due):
        raise unanswered[-1]
    found: wire.RayStateFound = {"resources": resources, "errors": errors}
    if status:
        found["cluster_status"] = status
    if serve_polled:  # (None: no Serve runs)
        found["serve"] = serve
    return found


def session_name(http: httpx.Client, dashboard: str) -> str:
    """The name of the session the dashboard serves (its ``/api/version``, as Ray's job client reads it)."""
    name = _get(http, dashboard + wire.RAY_VERSION).raise_for_status().json().get("session_name")
    if not isinstance(name, str) or not name.startswith("session_"):
        raise ValueError(f"{dashboard} names no Ray session in /api/version")
    return name


def poll_dashboard(
    client: Client, key: str | None, dashboard: str, http: httpx.Client, count: int, session: str | None = None
) -> wire.RayState:
    """Poll a dashboard (poll number ``count``) and send what it found to the server, for ``session`` (default: the
    one the dashboard serves then), every resource it could not have with why (`raysight doctor` shows them); returns
    the poll. A dashboard that cannot be reached, or a server that refuses, raises (httpx's or raysight's)."""
    found = poll(http, dashboard, due(count))
    polled: wire.RayState = {"session": session or session_name(http, dashboard), "polled_ns": time.time_ns(), **found}
    client.ray_state(polled, key)
    return polled


def find_session(ray_dir: Path, driver_pid: int, since: float) -> Path | None:
    """The session whose ``logs/`` holds the driver's core log, ``python-core-driver-<worker id>_<pid>.log``.

    Only sessions whose logs changed since ``since`` (epoch seconds) are looked into.
    """
    for logs in ray_dir.glob("session_*/logs"):
        with suppress(OSError):
            if logs.stat().st_mtime >= since and any(logs.glob(f"python-core-driver-*_{driver_pid}.log")):
                return logs.parent.resolve()  # not `session_latest`, which moves on
    return None


class StatePoller:
    """A thread that polls the dashboard of the session `raysight run`'s driver joined every :data:`POLL_EVERY_S`,
    once its head has logged where it is; when stopped it polls no more (the driver gone, its cluster is going: what
    it answers then is no longer so), but still finds the session of a driver that ended before the first poll. Best
    effort: a failure is skipped, never raised, so the user's program is never disturbed."""

    def __init__(self, server: str, key: str | None, driver_pid: int, ray_dir: Path) -> None:
        self.key, self.driver_pid, self.ray_dir = key, driver_pid, ray_dir
        self.since = time.time() - 1
        self.session: Path | None = None
        self._client = Client(server, timeout=5)
        self._http = dashboard_client(os.environ)
        self._polls = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raysight-poll", daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5) -> None:
        self._stopping.set()
        self._thread.join(timeout)
        self._http.close()

    def _run(self) -> None:
        os_thread.settle()
        with self._client:
            while True:
                stopping = self._stopping.wait(POLL_EVERY_S)
                with suppress(Exception):  # never disturb the user's program
                    self.session = self.session or find_session(self.ray_dir, self.driver_pid, self.since)
                    if self.session and not stopping:
                        self._poll(self.session)
                if stopping:
                    return

    def _poll(self, session: Path) -> None:
        dashboard = dashboard_url(session)
        if dashboard is None:
            return
        count, self._polls = self._polls, self._polls + 1
        poll_dashboard(self._client, self.key, dashboard, self._http, count, session.name)
