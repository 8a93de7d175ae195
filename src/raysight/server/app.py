"""The HTTP app: ingest, raysight's API, Ray's API and /metrics on one port, thin over the store."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Mount

from raysight import wire
from raysight.errors import RaysightError
from raysight.server import (
    api,
    capture_routes,
    debug_routes,
    ingest_routes,
    prometheus_api,
    ray_compat,
    serve_capture_routes,
    ui_routes,
)
from raysight.server.answers import raysight_error
from raysight.server.app_state import AppState, BodyBudget, Metrics, app_state
from raysight.server.auth import Secrets
from raysight.server.forward import Forwarder
from raysight.server.guard import Guard
from raysight.server.routing import Access, envelope_of, route
from raysight.settings import Settings
from raysight.signals.ray_metrics import parse as ray_metrics
from raysight.store.store import Store
from raysight.store.writer import FOLD_NICENESS, Writer

log = logging.getLogger("raysight.server")
# Bodies of the largest size the server may hold at once (256 MiB at the default --max-body): Ray sends a batch per
# node at a time, each far smaller, so only a flood reaches it.
BODIES_HELD = 16


async def handle_error(request: Request, exc: Exception) -> Response:
    """What a handler raised, in its route's envelope (``routing.py``): a :class:`RaysightError` as it says, anything
    else as a 500."""
    if not (isinstance(exc, RaysightError) and exc.status != 500):  # (not the caller's error, nor 503: try again)
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        # never the exception's text: it may quote SQL or paths; the log has it
        exc = RaysightError(f"internal error ({type(exc).__name__}); the server's log says more")
    return envelope_of(request.scope)(exc)


async def client_gone(request: Request, exc: Exception) -> Response:
    """The client hung up (or was cut off as too slow) mid-body: nobody to answer, nothing to log."""
    return Response(status_code=499)


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
        if missing := ui_routes.vendor_missing():
            log.warning(
                "the dashboard's libraries are not installed (%s): its pages say so; run `npm ci` in %s",
                ", ".join(missing),
                ui_routes.UI_DIR,
            )
        store = Store(settings.data_dir, settings.store, worker_niceness=FOLD_NICENESS)
        metrics_ = Metrics(store)
        writer = Writer(store, metrics_.committed, settings.writer)
        metrics_.watch(writer)
        bodies = BodyBudget(BODIES_HELD * max(limits.max_body, ray_metrics.MAX_BODY))
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
        *ingest_routes.routes(),
        *debug_routes.routes,
        *capture_routes.routes,
        *serve_capture_routes.routes,
        *api.routes,
        *per_session,
        Mount(wire.IN_SESSION, routes=per_session),
        route(wire.METRICS, metrics, access=Access.READ, envelope=raysight_error),
        *ui_routes.routes,
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(Guard, secrets=secrets, allowed_hosts=settings.allowed_hosts, reaches=settings.reaches)],
        exception_handlers={Exception: handle_error, RaysightError: handle_error, ClientDisconnect: client_gone},
    )
