"""The HTTP app: ingest, raysight's API, Ray's API and /metrics on one port, thin over the store."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from raysight.errors import RaysightError
from raysight.server import api, ingest_routes, prometheus_api, ray_compat, ui_routes
from raysight.server.auth import Secrets
from raysight.server.forward import Forwarder
from raysight.server.guard import refusal
from raysight.server.ingest_routes import RAY_METRICS_MAX_BODY
from raysight.server.state import AppState, BodyBudget, Metrics, app_state
from raysight.settings import Settings
from raysight.store.store import Store
from raysight.store.writer import FOLD_NICENESS, Writer

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


def create_app(settings: Settings) -> Starlette:
    """The ASGI app over the store in the settings' data dir; the store opens at startup and closes at shutdown.

    Their ``secrets`` are those asked (None: no credentials, as on loopback); their ``allowed_hosts`` None: any
    ``Host`` served; ``forwarding``: where the receiver's spans go besides (or instead of) the store.
    """
    secrets = Secrets.of(settings.secrets)
    limits = settings.http

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        store = Store(settings.data_dir, settings.store, worker_niceness=FOLD_NICENESS)
        metrics_ = Metrics(store)
        writer = Writer(store, metrics_.committed, settings.writer)
        metrics_.watch(writer)
        bodies = BodyBudget(BODIES_HELD * max(limits.max_body, RAY_METRICS_MAX_BODY))
        forwarder = Forwarder(settings.forwarding) if settings.forwarding.url else None
        app.state.raysight = AppState(
            store,
            writer,
            secrets,
            metrics_,
            limits.max_body,
            limits.max_events,
            bodies,
            settings.forwarding,
            forwarder,
            query_limits=settings.queries,
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
        middleware=[Middleware(Guard, secrets=secrets, allowed_hosts=settings.allowed_hosts)],
        exception_handlers={Exception: handle_error, RaysightError: handle_error, ClientDisconnect: client_gone},
    )
