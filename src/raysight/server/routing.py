"""The route table's declarations: each route says who may call it (:class:`Access`), the envelope its errors are
answered in, the bodies a POST to it may carry and the query parameters it takes. The guard (``guard.py``) finds a
request's route before any body is read and enforces all but the envelope, in which the app's error handler renders
what a handler raises.

A route is made by :func:`route` (a folder of files by :func:`files`), which takes all three: none is made without
them. A request that no declared route matches (an unknown path, or a route appended undeclared) needs the read token
and is answered in raysight's envelope.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount, Route, WebSocketRoute
from starlette.types import ASGIApp, Scope

from raysight.errors import RaysightError
from raysight.server.answers import raysight_error

POST_TYPES = ("application/json", "application/x-protobuf")  # Ray's aggregator and raysight's own posts; OTLP
FORM_TYPES = ("application/x-www-form-urlencoded",)  # Prometheus's query API's (Grafana POSTs its queries so)

Envelope = Callable[[RaysightError], Response]  # an error as a route's callers read errors


class Access(enum.Enum):
    """Who may call a route, beyond loopback (on loopback no credential is asked)."""

    OPEN = "open"  # anyone: the dashboard's files, which hold no data (the page must load to ask for the token)
    INGEST = "ingest"  # the ingest key, which grants writes only: Ray's aggregator logs its URL in clear
    READ = "read"  # the read token (or the admin token)
    ADMIN = "admin"  # the admin token: what destroys data
    REACH = "reach"  # the admin token on loopback too: what reaches into Ray's processes (see :class:`Reach`)


class Reach(enum.Enum):
    """What reaches into Ray's live processes: driving a paused worker runs code in it; an on-demand profile reads
    another process's memory. Each is refused unless the server allows it, and then needs ``Access.REACH``."""

    DEBUG = ("debugging", "--allow-debug")
    PROFILE = ("on-demand profiling", "--allow-profiling")

    @property
    def off(self) -> str:
        """Why a route of it is refused while the server does not allow it."""
        what, flag = self.value
        return f"{what} is off on this raysight server: start it with {flag}"


@dataclass(frozen=True)
class Declaration:
    access: Access
    envelope: Envelope
    bodies: tuple[str, ...] | None = POST_TYPES  # the content types a POST may carry; None: any (it reads none)
    reach: Reach | None = None  # refused unless the server allows it (``--allow-debug``, ``--allow-profiling``)
    # The query parameters it takes: any other is refused (a misspelt filter would answer as if none were given).
    # None: not checked (the routes of Ray's, Prometheus's and OTLP's callers, ingest, the dashboard's pages).
    params: frozenset[str] | None = None


UNDECLARED = Declaration(Access.READ, raysight_error)
_SCOPE_KEY = "raysight.declaration"  # where the guard leaves a request's declaration for the error handler


class DeclaredRoute(Route):
    def __init__(self, path: str, endpoint: Callable[..., Any], declaration: Declaration, methods: list[str] | None):
        super().__init__(path, endpoint, methods=methods)
        self.declaration = declaration


class DeclaredFiles(Mount):
    def __init__(self, path: str, app: ASGIApp, name: str) -> None:
        super().__init__(path, app, name=name)
        self.declaration = Declaration(Access.OPEN, raysight_error)


def route(
    path: str,
    endpoint: Callable[..., Any],
    *,
    access: Access,
    envelope: Envelope,
    methods: list[str] | None = None,
    bodies: tuple[str, ...] | None = POST_TYPES,
    reach: Reach | None = None,
    params: Iterable[str] | None = None,
) -> Route:
    """A route at ``path`` (a template of ``raysight.wire``) with what it declares."""
    taken = None if params is None else frozenset(params)
    return DeclaredRoute(path, endpoint, Declaration(access, envelope, bodies, reach, taken), methods)


class DeclaredSocket(WebSocketRoute):
    def __init__(self, path: str, endpoint: Callable[..., Any], declaration: Declaration):
        super().__init__(path, endpoint)
        self.declaration = declaration


def socket(path: str, endpoint: Callable[..., Any], *, access: Access, reach: Reach | None = None) -> WebSocketRoute:
    """A WebSocket route at ``path``, its handshake refused as an HTTP request would be (in raysight's envelope)."""
    return DeclaredSocket(path, endpoint, Declaration(access, raysight_error, None, reach))


def files(path: str, app: ASGIApp, *, name: str) -> Mount:
    """A folder of the dashboard's files at ``path``, served by ``app``: open, as the dashboard's pages are."""
    return DeclaredFiles(path, app, name)


def declaration_of(item: BaseRoute) -> Declaration | None:
    """What a route declares; None for a route not made by :func:`route`, :func:`socket` or :func:`files`."""
    return item.declaration if isinstance(item, (DeclaredRoute, DeclaredFiles, DeclaredSocket)) else None


def find(routes: Sequence[BaseRoute], scope: Scope) -> tuple[Declaration, dict[str, Any]]:
    """The declaration of the route Starlette's router hands ``scope`` to, and its path parameters: the first that
    matches it whole, within a mount of routes too, else the first that matches all but its method (which answers
    405); :data:`UNDECLARED` where none matches or the route declares nothing."""
    partial: tuple[BaseRoute, Scope] | None = None
    for item in routes:
        match, child = item.matches(scope)
        if match is Match.FULL:
            if isinstance(item, Mount) and not isinstance(item, DeclaredFiles):
                return find(item.routes, {**scope, **child})
            return declaration_of(item) or UNDECLARED, child.get("path_params", {})
        if match is Match.PARTIAL and partial is None:
            partial = (item, child)
    if partial is None:
        return UNDECLARED, {}
    return declaration_of(partial[0]) or UNDECLARED, partial[1].get("path_params", {})


def remember(scope: Scope, declaration: Declaration) -> None:
    """Keep ``declaration`` in the request's scope, for :func:`envelope_of`."""
    scope[_SCOPE_KEY] = declaration


def envelope_of(scope: Scope) -> Envelope:
    """The envelope of the request's route (raysight's where the guard did not see it)."""
    declaration: Declaration = scope.get(_SCOPE_KEY, UNDECLARED)
    return declaration.envelope
