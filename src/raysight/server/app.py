"""The HTTP app: ingest, raysight's API, Ray's API and /metrics on one port, thin over the store."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from raysight.config import DEFAULT_MAX_BODY, DEFAULT_MAX_EVENTS, DEFAULT_MEMORY_LIMIT
from raysight.errors import RaysightError
from raysight.server import api, ingest_routes, ray_compat
from raysight.server.auth import Secrets
from raysight.server.state import AppState, Metrics, app_state
from raysight.store.store import Store
from raysight.store.writer import FOLD_INTERVAL_S, FOLD_NICENESS, Writer

log = logging.getLogger("raysight.server")


def _is_ray_path(path: str) -> bool:
    return path.startswith(("/api/v0", "/api/jobs", "/api/version", "/sessions/"))


async def handle_error(request: Request, exc: Exception) -> Response:
    status = exc.status if isinstance(exc, RaysightError) else 500
    message = str(exc) if isinstance(exc, RaysightError) else f"internal error: {type(exc).__name__}: {exc}"
    if status == 500:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    if _is_ray_path(request.url.path):
        return ray_compat.envelope_error(status, message)
    return JSONResponse({"ok": False, "error": message, "status": status}, status_code=status)


class ReadAuth:
    """Every path but ingest (which checks its own write-only key) needs the read token, when there is one.

    Plain ASGI: ingest requests (and their bodies) pass straight through.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/ingest/"):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if app_state(request).secrets.token_ok(request.headers.get("authorization")):
            await self.app(scope, receive, send)
            return
        message = "this raysight server needs its read token: set RAYSIGHT_TOKEN or send Authorization: Bearer"
        if _is_ray_path(scope["path"]):
            denied: Response = Response(message, status_code=401, media_type="text/plain")
        else:
            denied = JSONResponse({"ok": False, "error": message, "status": 401}, status_code=401)
        await denied(scope, receive, send)


async def metrics(request: Request) -> Response:
    return Response(generate_latest(app_state(request).metrics.registry), media_type=CONTENT_TYPE_LATEST)


def create_app(
    data_dir: str | Path,
    *,
    secrets: Secrets | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    max_events: int = DEFAULT_MAX_EVENTS,
    memory_limit: str = DEFAULT_MEMORY_LIMIT,
    fold_interval_s: float = FOLD_INTERVAL_S,
) -> Starlette:
    """The ASGI app over the store in ``data_dir``; the store opens at startup and closes at shutdown."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        store = Store(data_dir, worker_niceness=FOLD_NICENESS, memory_limit=memory_limit)
        metrics_ = Metrics(store)
        writer = Writer(store, on_commit=metrics_.committed, fold_interval_s=fold_interval_s)
        metrics_.watch(writer)
        app.state.raysight = AppState(store, writer, secrets or Secrets(None, None), metrics_, max_body, max_events)
        try:
            yield
        finally:
            writer.close()
            store.close()

    routes = [*ingest_routes.routes, *api.routes, *ray_compat.routes, Route("/metrics", metrics)]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(ReadAuth)],
        exception_handlers={Exception: handle_error, RaysightError: handle_error},
    )
