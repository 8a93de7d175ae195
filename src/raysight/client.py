"""``raysight.Client``: the Python SDK over the server's HTTP API; the CLI is built on it.

>>> from raysight import Client
>>> Client("http://127.0.0.1:8271").list("actors", filters=["state=DEAD"])
"""

from __future__ import annotations

import builtins
import os
import time
from typing import Any

import httpx
import orjson

from raysight import wire
from raysight.config import OWN_HEADERS
from raysight.errors import (
    BadQuery,
    BodyTooLarge,
    Conflict,
    Forbidden,
    NotFound,
    RaysightError,
    ServerUnreachable,
    Unauthorized,
    Unavailable,
    UnsupportedEncoding,
)
from raysight.settings import ENV_ADMIN_TOKEN, ENV_SERVER, ENV_TOKEN, default_server

# What list / get / summary take (the server's ``signals/ray_events/entities.py`` RESOURCES; kept here so the CLI
# need not load DuckDB).
RESOURCES = (
    *("actors", "jobs", "nodes", "tasks", "workers"),
    *("placement_groups", "objects", "runtime_envs", "cluster_events"),  # (polled from a live cluster's dashboard)
)

_BY_STATUS: dict[int, type[RaysightError]] = {
    400: BadQuery,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: BodyTooLarge,
    415: UnsupportedEncoding,
    503: Unavailable,
}
# How long `raysight run` keeps reporting its driver's exit while the server is unreachable or answers 503 (a restart,
# folding behind): a short stall must not lose the report.
RUN_EXIT_DEADLINE_S = 30.0


def _parse(response: httpx.Response) -> Any:
    """A JSON answer: orjson's parse (several times the stdlib's, which a page of log lines feels), or the stdlib's
    for what orjson refuses (an integer past 64 bits)."""
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return response.json()


class Client:
    def __init__(
        self,
        server: str | None = None,
        *,
        token: str | None = None,
        admin_token: str | None = None,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """``token`` reads (default ``$RAYSIGHT_TOKEN``); ``admin_token`` also deletes sessions and reindexes
        (default ``$RAYSIGHT_ADMIN_TOKEN``). Neither is needed on loopback."""
        self.server = (server or default_server()).rstrip("/")
        token = token or os.environ.get(ENV_TOKEN)
        admin_token = admin_token or os.environ.get(ENV_ADMIN_TOKEN)
        headers = dict(OWN_HEADERS)
        if token or admin_token:
            headers["Authorization"] = f"Bearer {token or admin_token}"
        self._admin_headers = {"Authorization": f"Bearer {admin_token}"} if admin_token else {}
        self._http = httpx.Client(base_url=self.server, headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, raw: bool = False, **kwargs: Any) -> Any:
        """The JSON an API path answers (its bytes when ``raw``); its error as one of raysight's exceptions."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServerUnreachable(
                f"no raysight server answers at {self.server} ({type(exc).__name__}); start one with "
                f"`raysight server`, or point --server / {ENV_SERVER} at yours"
            ) from None
        if raw and response.status_code < 400:
            return response.content
        try:
            body = _parse(response)
        except ValueError:
            raise RaysightError(f"{self.server}{path} answered {response.status_code}: {response.text[:200]}") from None
        if response.status_code >= 400:
            message = body.get("error") if isinstance(body, dict) else None
            raise _BY_STATUS.get(response.status_code, RaysightError)(message or response.text[:500])
        return body

    def ping(self) -> bool:
        try:
            self._http.get(wire.PING, timeout=2)
        except httpx.TransportError:
            return False
        return True

    def list(
        self,
        resource: str,
        *,
        filters: list[str] | None = None,
        sort: list[str] | None = None,
        limit: int | None = 100,
        offset: int = 0,
        detail: bool = False,
        session: str | None = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"filter": filters or [], "sort": sort or [], "offset": offset, "detail": detail}
        if limit is not None:
            params["limit"] = limit
        if session:
            params["session"] = session
        return self._request("GET", wire.path(wire.RESOURCE, resource=resource), params=params)  # type: ignore[no-any-return]

    def get(self, resource: str, entity_id: str, *, session: str | None = None) -> dict[str, Any]:
        params = {"session": session} if session else {}
        return self._request("GET", wire.path(wire.ENTITY, resource=resource, entity_id=entity_id), params=params)  # type: ignore[no-any-return]

    def summary(self, resource: str, *, session: str | None = None) -> dict[str, Any]:
        params = {"session": session} if session else {}
        return self._request("GET", wire.path(wire.SUMMARY, resource=resource), params=params)  # type: ignore[no-any-return]

    def logs(self, **params: Any) -> dict[str, Any]:
        """Log lines: ``GET /api/raysight/logs`` with these parameters (``task``, ``actor``, ``grep``, ``after``, …;
        None leaves one out). Returns ``session``, ``total``, ``rows``, ``last_seq`` (to follow on from) and
        ``dropped`` (what the server's log retention dropped of the session, or None)."""
        given = {k: v for k, v in params.items() if v is not None}
        return self._request("GET", wire.LOGS, params=given)  # type: ignore[no-any-return]

    def errors(self, **params: Any) -> dict[str, Any]:
        """A session's failures grouped by cause: ``GET /api/raysight/errors`` with ``session``, ``job``, ``since``,
        ``until`` (epoch ns) and ``type`` (None leaves one out). Returns ``session`` and ``groups``."""
        given = {k: v for k, v in params.items() if v is not None}
        return self._request("GET", wire.ERRORS, params=given)  # type: ignore[no-any-return]

    def error(self, failure_id: str, session: str | None = None, colours: bool = False) -> dict[str, Any]:
        """One failure whole, or a group's failures: ``GET /api/raysight/errors/{id}``; ``colours``: each message
        with Ray's colour codes (for a terminal)."""
        params = {"session": session} if session else {}
        if colours:
            params["colours"] = "true"
        return self._request("GET", wire.path(wire.ERROR, failure_id=failure_id), params=params)  # type: ignore[no-any-return]

    def traces(self, **params: Any) -> dict[str, Any]:
        """Traces with a span that matches: ``GET /api/raysight/traces`` with ``session``, ``job``, ``task``,
        ``actor``, ``request``, ``name``, ``min_duration`` (ns), ``error``, ``since``, ``until`` (epoch ns) and
        ``limit`` (None leaves one out). Returns ``session`` and ``traces``, newest first."""
        given = {k: v for k, v in params.items() if v is not None}
        return self._request("GET", wire.TRACES, params=given)  # type: ignore[no-any-return]

    def profile(self, **params: Any) -> dict[str, Any]:
        """The profile of a task's attempts, or of every attempt of a function, an actor or a job: ``GET
        /api/raysight/profile`` with ``session``, ``task``, ``attempt``, ``function``, ``actor``, ``job`` and
        ``cpu_only`` (None leaves one out). Returns its ``stacks``, hottest first, and what they add up to."""
        given = {k: v for k, v in params.items() if v is not None}
        return self._request("GET", wire.PROFILE, params=given)  # type: ignore[no-any-return]

    def ask_capture(self, asked: wire.CaptureAsked, client: str) -> dict[str, Any]:
        """Ask for an on-demand profile of a live process (``POST /api/raysight/profiles``, the admin token's):
        recorded under ``client`` (who asks: user@host) and queued for its node's agent. Returns it, with its ID."""
        headers = {**self._admin_headers, wire.CLIENT_HEADER: client}
        return self._request("POST", wire.CAPTURES, json=asked, headers=headers)  # type: ignore[no-any-return]

    def capture(self, capture_id: str) -> dict[str, Any]:
        """One on-demand profile: how it went, and what its agent found (``GET /api/raysight/profiles/{id}``)."""
        return self._request("GET", wire.path(wire.CAPTURE, capture_id=capture_id))  # type: ignore[no-any-return]

    def capture_file(self, capture_id: str) -> bytes:
        """A Serve capture's memray file, as Serve wrote it (``GET /api/raysight/profiles/{id}/file``)."""
        return self._request("GET", wire.path(wire.CAPTURE_FILE, capture_id=capture_id), raw=True)  # type: ignore[no-any-return]

    def captures(self, session: str | None = None, task: str | None = None, actor: str | None = None) -> dict[str, Any]:
        """The on-demand profiles asked of a session, newest first (``GET /api/raysight/profiles``)."""
        given = {k: v for k, v in {"session": session, "task": task, "actor": actor}.items() if v is not None}
        return self._request("GET", wire.CAPTURES, params=given)  # type: ignore[no-any-return]

    def trace(self, trace_id: str) -> dict[str, Any]:
        """One trace's spans in tree order: ``GET /api/raysight/traces/{id}``."""
        return self._request("GET", wire.path(wire.TRACE, trace_id=trace_id))  # type: ignore[no-any-return]

    def status(self, session: str | None = None, at: int | None = None) -> dict[str, Any]:
        """What the cluster had and what waited for it at ``at`` (epoch ns; default its last sample):
        ``GET /api/raysight/status``."""
        given = {k: v for k, v in {"session": session, "at": at}.items() if v is not None}
        return self._request("GET", wire.STATUS, params=given)  # type: ignore[no-any-return]

    def serve(self, session: str | None = None, at: int | None = None) -> dict[str, Any]:
        """Ray Serve's state at ``at`` (epoch ns; default its last sample): ``GET /api/raysight/serve``."""
        given = {k: v for k, v in {"session": session, "at": at}.items() if v is not None}
        return self._request("GET", wire.SERVE, params=given)  # type: ignore[no-any-return]

    def serve_history(self, session: str | None = None, app: str | None = None) -> dict[str, Any]:
        """Each change of Serve's applications, deployments and replicas: ``GET /api/raysight/serve/history``."""
        given = {k: v for k, v in {"session": session, "app": app}.items() if v is not None}
        return self._request("GET", wire.SERVE_HISTORY, params=given)  # type: ignore[no-any-return]

    def serve_replicas(
        self, session: str | None = None, app: str | None = None, deployment: str | None = None, at: int | None = None
    ) -> dict[str, Any]:
        """Every replica of Serve's until ``at`` (epoch ns; default its last sample), with its actor, worker, pid,
        node, log file and end: ``GET /api/raysight/serve/replicas``."""
        asked = {"session": session, "app": app, "deployment": deployment, "at": at}
        return self._request("GET", wire.SERVE_REPLICAS, params={k: v for k, v in asked.items() if v is not None})  # type: ignore[no-any-return]

    def serve_requests(self, **params: Any) -> dict[str, Any]:
        """Serve's requests: ``GET /api/raysight/serve/requests`` with ``session``, ``app``, ``deployment``,
        ``route``, ``status``, ``min_latency`` (ns), ``since``, ``until`` (epoch ns), ``limit``, ``offset`` and
        ``by`` (None leaves one out). Returns ``session``, ``total`` and ``requests``, newest first; with ``by``,
        ``latencies``."""
        given = {k: v for k, v in params.items() if v is not None}
        return self._request("GET", wire.SERVE_REQUESTS, params=given)  # type: ignore[no-any-return]

    def serve_request(self, request_id: str, session: str | None = None) -> dict[str, Any]:
        """One Serve request whole: ``GET /api/raysight/serve/requests/{id}``."""
        params = {"session": session} if session else {}
        return self._request("GET", wire.path(wire.SERVE_REQUEST, request_id=request_id), params=params)  # type: ignore[no-any-return]

    def pauses(self, session: str | None = None, every: bool = False) -> builtins.list[dict[str, Any]]:
        """The live debugger pauses (of ``session``, else of every session); ``every``: each pause of the session
        (default the newest), with how it ended."""
        asked = {"session": session, "all": "true" if every else None}
        return self._request("GET", wire.DEBUG_PAUSES, params={k: v for k, v in asked.items() if v is not None})  # type: ignore[no-any-return]

    def pause(self, pause_id: str) -> dict[str, Any]:
        """One pause whole: its stack with the locals reported, its exception and traceback, its attaches."""
        return self._request("GET", wire.path(wire.DEBUG_PAUSE, pause_id=pause_id))  # type: ignore[no-any-return]

    def prometheus(self, path: str, params: dict[str, Any], session: str | None = None) -> Any:
        """Prometheus's query API (``/api/v1/<path>``: ``query``, ``query_range``, ``series``, ``labels``,
        ``label/<name>/values``, ``metadata``) over the newest session's metrics, or ``session``'s: its ``data``."""
        return self._request("GET", wire.in_session(f"{wire.PROM_API}/{path}", session), params=params)["data"]

    def metrics_top(self, session: str | None = None, at_ms: int | None = None, limit: int = 10) -> dict[str, Any]:
        """The busiest nodes, workers and actors at ``at_ms`` (default: now, or an ended session's end)."""
        given = {k: v for k, v in {"session": session, "at": at_ms, "limit": limit}.items() if v is not None}
        return self._request("GET", wire.METRICS_TOP, params=given)  # type: ignore[no-any-return]

    def timeline(self, session: str | None = None, job: str | None = None) -> bytes:
        """A session's task attempts as Chrome trace JSON (`ray timeline`'s format): ``GET /api/raysight/timeline``."""
        given = {k: v for k, v in {"session": session, "job": job}.items() if v is not None}
        return self._request("GET", wire.TIMELINE, raw=True, params=given)  # type: ignore[no-any-return]

    def sessions(self) -> builtins.list[dict[str, Any]]:
        return self._request("GET", wire.SESSIONS)["sessions"]  # type: ignore[no-any-return]

    def delete_session(self, name: str) -> str:
        body = self._request("DELETE", wire.path(wire.SESSION, session=name), headers=self._admin_headers)
        return body["deleted"]  # type: ignore[no-any-return]

    def info(self) -> dict[str, Any]:
        """The server's liveness answer: its version, pid and ingest backlog; raises when it does not answer."""
        return self._request("GET", wire.PING)  # type: ignore[no-any-return]

    def ingest_backlog(self) -> dict[str, int]:
        """Batches (and bytes) the server has acknowledged but not yet folded into its store; cheap to poll."""
        return self.info()["ingest_backlog"]  # type: ignore[no-any-return]

    def doctor(self) -> dict[str, Any]:
        return self._request("GET", wire.DOCTOR)  # type: ignore[no-any-return]

    def reindex(self) -> int:
        body = self._request("POST", wire.REINDEX, json={}, headers=self._admin_headers)  # POSTs are JSON
        return body["events"]  # type: ignore[no-any-return]

    def run_exit(
        self,
        run_id: str,
        driver_pid: int | None,
        exit_code: int,
        ended_ns: int,
        key: str | None,
        deadline_s: float = RUN_EXIT_DEADLINE_S,
        session: str | None = None,
    ) -> None:
        """Report how a driver ended (in ``session``, the one it joined, when known), retried with back-off while the
        server is unreachable or answers 503, for up to ``deadline_s`` (recording the same exit twice, after a
        timed-out try that went through, is harmless)."""
        body: wire.RunExit = {
            "run_id": run_id,
            "driver_pid": driver_pid,
            "exit_code": exit_code,
            "ended_ns": ended_ns,
            "session": session,
        }
        deadline, delay = time.monotonic() + deadline_s, 0.5
        while True:
            try:
                self._request("POST", wire.AGENT_RUN_EXIT, json=body, params=wire.key_params(key))
                return
            except (ServerUnreachable, Unavailable):
                if time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def export_spans(self, body: bytes, key: str | None) -> int:
        """Send one OTLP protobuf trace export to the receiver, as an exporter would; returns the spans it refused."""
        from raysight.signals.spans.parse import rejected_spans

        headers = {"Content-Type": "application/x-protobuf"}
        answer = self._request(
            "POST", wire.OTLP_TRACES, raw=True, content=body, params=wire.key_params(key), headers=headers
        )
        return rejected_spans(answer)

    def ray_state(self, poll: wire.RayState, key: str | None) -> int:
        """Send what a poll of a live cluster's dashboard found (``signals/polls/parse.py``); returns the rows kept."""
        return self._request("POST", wire.AGENT_RAY_STATE, json=poll, params=wire.key_params(key))["rows"]  # type: ignore[no-any-return]
