"""The HTTP app: ingest, raysight's API, Ray's API and /metrics on one port, thin over the store."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from raysight.config import DEFAULT_MAX_BODY, DEFAULT_MAX_EVENTS, DEFAULT_MEMORY_LIMIT, QueryLimits
from raysight.errors import RaysightError
from raysight.server import api, ingest_routes, prometheus_api, ray_compat, ui_routes
from raysight.server.auth import Secrets
from raysight.server.forward import Forwarder, Forwarding
from raysight.server.guard import refusal
from raysight.server.ingest_routes import RAY_METRICS_MAX_BODY
from raysight.server.state import AppState, BodyBudget, Metrics, app_state
from raysight.store.metric_retention import MetricsBounds
from raysight.store.retention import KEEP_ALL, Retention
from raysight.store.store import Store
from raysight.store.trace_sampling import TailSampling
from raysight.store.writer import FOLD_LINGER_S, FOLD_NICENESS, FOLD_REST, SPANS_LINGER_S, Writer

log = logging.getLogger("raysight.server")
# Bodies of the largest size the server may hold at once (256 MiB at the default --max-body): Ray sends a batch per
# node at a time, each far smaller, so only a flood reaches it.
BODIES_HELD = 16


def _is_ray_path(path: str) -> bool:
    return path.startswith(("/api/v0", "/api/jobs", "/api/version", "/sessions/"))


def error_response(path: str, status: int, message: str) -> Response:
    """The one error shape: ``{"ok": false, "error", "status"}``, or Ray's envelope on Ray's paths."""
    if "/api/v1/" in path:
        return JSONResponse({"status": "error", "errorType": "bad_data", "error": message}, status_code=status)
    if _is_ray_path(path):
        return ray_compat.envelope_error(status, message)
    return JSONResponse({"ok": False, "error": message, "status": status}, status_code=status)


async def handle_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, RaysightError) and exc.status != 500:  # the caller's error, or 503: try again
        return error_response(request.url.path, exc.status, str(exc))
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    # never the exception's text: it may quote SQL or paths; the log has it
    return error_response(request.url.path, 500, f"internal error ({type(exc).__name__}); the server's log says more")


async def client_gone(request: Request, exc: Exception) -> Response:
    """The client hung up (or was cut off as too slow) mid-body: nobody to answer, nothing to log."""
    return Response(status_code=499)


class Guard:
    """Refuses what :func:`guard.refusal` refuses, before any route (plain ASGI: bodies pass straight through)."""

    def __init__(self, app: ASGIApp, secrets: Secrets, allowed_hosts: frozenset[str] | None) -> None:
        self.app, self.secrets, self.allowed_hosts = app, secrets, allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = refusal(scope, self.secrets, self.allowed_hosts) if scope["type"] in ("http", "websocket") else None
        if refused is None:
            await self.app(scope, receive, send)
        else:  # a WebSocket handshake gets the same HTTP answer (ASGI's denial response)
            await error_response(scope["path"], *refused)(scope, receive, send)


async def metrics(request: Request) -> Response:
    return Response(generate_latest(app_state(request).metrics.registry), media_type=CONTENT_TYPE_LATEST)


def create_app(
    data_dir: str | Path,
    *,
    secrets: Secrets | None = None,
    allowed_hosts: frozenset[str] | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    max_events: int = DEFAULT_MAX_EVENTS,
    memory_limit: str = DEFAULT_MEMORY_LIMIT,
    fold_linger_s: float = FOLD_LINGER_S,
    fold_rest: float = FOLD_REST,
    spans_linger_s: float = SPANS_LINGER_S,
    log_retention: Retention = KEEP_ALL,
    metrics_bounds: MetricsBounds | None = None,
    forwarding: Forwarding | None = None,
    trace_sampling: TailSampling | None = None,
    query_limits: QueryLimits | None = None,
) -> Starlette:
    """The ASGI app over the store in ``data_dir``; the store opens at startup and closes at shutdown.

    ``secrets`` None: no credentials asked (loopback); ``allowed_hosts`` None: any ``Host`` served; ``forwarding``:
    where the receiver's spans go besides (or instead of) the store; ``query_limits``: what each PromQL query may
    spend (None: the defaults).
    """
    secrets = secrets or Secrets.loopback()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        bounds = metrics_bounds or MetricsBounds()
        store = Store(
            data_dir, worker_niceness=FOLD_NICENESS, memory_limit=memory_limit, metrics_max_series=bounds.max_series
        )
        metrics_ = Metrics(store)
        writer = Writer(
            store,
            metrics_.committed,
            fold_linger_s=fold_linger_s,
            fold_rest=fold_rest,
            spans_linger_s=spans_linger_s,
            log_retention=log_retention,
            metrics=bounds,
            trace_sampling=trace_sampling,
        )
        metrics_.watch(writer)
        bodies = BodyBudget(BODIES_HELD * max(max_body, RAY_METRICS_MAX_BODY))
        forwarder = Forwarder(forwarding) if forwarding and forwarding.url else None
        app.state.raysight = AppState(
            store,
            writer,
            secrets,
            metrics_,
            max_body,
            max_events,
            bodies,
            forwarding or Forwarding(),
            forwarder,
            query_limits=query_limits or QueryLimits(),
        )
        try:
            yield
        finally:
            if forwarder is not None:
                forwarder.close()
            writer.close()
            store.close()

    per_session = [*ray_compat.routes, *prometheus_api.routes]  # the newest session's, and any one's by its name
    routes = [
        *ingest_routes.routes,
        *api.routes,
        *per_session,
        Mount("/sessions/{session}", routes=per_session),
        Route("/metrics", metrics),
        *ui_routes.routes,
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(Guard, secrets=secrets, allowed_hosts=allowed_hosts)],
        exception_handlers={Exception: handle_error, RaysightError: handle_error, ClientDisconnect: client_gone},
    )
