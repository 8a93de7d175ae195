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
from starlette.responses import Response
from starlette.routing import Mount

from raysight import wire
from raysight.config import DEFAULT_MAX_BODY, DEFAULT_MAX_EVENTS, DEFAULT_MEMORY_LIMIT, QueryLimits
from raysight.errors import RaysightError
from raysight.server import api, ingest_routes, prometheus_api, ray_compat, ui_routes
from raysight.server.answers import raysight_error
from raysight.server.auth import Secrets
from raysight.server.forward import Forwarder, Forwarding
from raysight.server.guard import Guard
from raysight.server.ingest_routes import RAY_METRICS_MAX_BODY
from raysight.server.routing import Access, envelope_of, route
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
        Mount(wire.IN_SESSION, routes=per_session),
        route(wire.METRICS, metrics, access=Access.READ, envelope=raysight_error),
        *ui_routes.routes,
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(Guard, secrets=secrets, allowed_hosts=allowed_hosts)],
        exception_handlers={Exception: handle_error, RaysightError: handle_error, ClientDisconnect: client_gone},
    )
