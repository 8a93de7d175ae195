"""What a request must pass before any route sees it, HTTP and WebSocket handshakes alike: checks of its scope against
what its route declares (``routing.py``), made by the :class:`Guard` middleware before any body is read.

On loopback the browser is the threat, beyond it the network:

- Host: bound to loopback, only loopback names (and ``--allowed-host``) are served, so a page whose own name was
  pointed at 127.0.0.1 (DNS rebinding) reads nothing. Beyond loopback the secrets decide: a remote node posts to
  whatever name it was given, and a refusal would block its Ray stream for good.
- Another site: a request whose ``Origin`` is not this server, or whose ``Sec-Fetch-Site`` says another site, is
  refused, but for a link to the dashboard followed (a top-level GET navigation), so that shared URLs open. Another
  site's page has no reason to open the JSON, Ray-compatible or Prometheus routes, in a tab or a frame: a query such a
  navigation carries could cost the server dearly.
- Content type: a POST must carry one that a web page cannot send to another site without a CORS preflight (which
  this server never grants), so text and form posts from other sites change nothing. But for Prometheus's query
  API, which takes forms (Grafana POSTs its queries so) and only reads: another site's form carries its ``Origin``,
  refused above; and Ray's job writes, which raysight refuses whatever they carry (405).
- Credentials, as the route declares: none for the dashboard's files (which hold no data: the page must load to ask
  for the token), the write-only ingest key for ingest, the read token (or the admin token) for reads, the admin
  token for what destroys data, and on loopback too for what reaches into Ray's processes (driving a paused worker,
  an on-demand profile: refused outright unless the server allows it).
- Query parameters: a route that declares those it takes refuses any other (400, naming it and them), once the
  credentials pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from raysight import wire
from raysight.errors import BadQuery, Forbidden, RaysightError, Unauthorized, UnsupportedEncoding
from raysight.server import routing
from raysight.server.auth import Secrets, reach_ok
from raysight.server.routing import Access, Declaration, Reach
from raysight.settings import ENV_ADMIN_TOKEN, ENV_TOKEN, SECRETS_FILE, Reaches

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})


def host_name(host: str) -> str:
    """A ``Host`` header without its port: ``[::1]:8271`` → ``[::1]``, ``LocalHost:80`` → ``localhost``."""
    host = host.lower()
    if host.startswith("[") and "]" in host:
        return host[: host.index("]") + 1]
    return host.partition(":")[0]


def url_host(address: str) -> str:
    """An address as a URL's host names it: ``::1`` → ``[::1]``."""
    return f"[{address}]" if ":" in address else address


def from_other_site(headers: Headers, method: str, dashboard: bool) -> bool:
    """Whether another site's page sent the request (``dashboard``: the route is the dashboard's, which a link from
    anywhere may open)."""
    origin = headers.get("origin")
    if origin is not None and urlsplit(origin).netloc.lower() != headers.get("host", "").lower():
        return True  # "null" (a sandboxed or file: page) too
    if headers.get("sec-fetch-site") in ("cross-site", "same-site"):  # same-site: e.g. another port of localhost
        followed_link = method in ("GET", "HEAD") and headers.get("sec-fetch-mode") == "navigate"
        return not (followed_link and headers.get("sec-fetch-dest") == "document" and dashboard)
    return False


# What only a browser sends (Ray's dashboard's own test: ``optional_utils.is_browser_request``)
BROWSER_HEADERS = (
    *("referer", "origin", "sec-fetch-mode", "sec-fetch-dest", "sec-fetch-site", "sec-fetch-user"),
    *("access-control-request-method", "access-control-request-headers"),
)


def from_browser(headers: Headers) -> bool:
    """Whether a browser sent the request, as Ray's dashboard tells (to redact what it shows one): a ``User-Agent``
    that starts ``Mozilla``, or any header only browsers send."""
    return headers.get("user-agent", "").startswith("Mozilla") or any(h in headers for h in BROWSER_HEADERS)


def media_type(content_type: str | None) -> str:
    """``application/json; charset=utf-8`` → ``application/json``."""
    return (content_type or "").partition(";")[0].strip().lower()


READ_TOKEN_NEEDED = f"this raysight server needs its read token: set {ENV_TOKEN} or send Authorization: Bearer"
ADMIN_TOKEN_NEEDED = (
    f"deleting sessions and reindexing need the admin token (`admin_token` in the server's {SECRETS_FILE}): "
    f"set {ENV_ADMIN_TOKEN} or send it as Authorization: Bearer"
)
INGEST_KEY_NEEDED = "this ingest URL needs the server's ingest key (`raysight env` prints the URL)"
REACH_TOKEN_NEEDED = (
    "attaching to a paused task and profiling a live process need the server's admin token, on loopback too "
    f"(`admin_token` in its {SECRETS_FILE}, which the CLI reads on the server's machine): set {ENV_ADMIN_TOKEN} or "
    "send it as Authorization: Bearer"
)


def credential_refusal(
    access: Access,
    connection: HTTPConnection,
    path_params: dict[str, Any],
    secrets: Secrets,
    reach_token: str | None = None,
) -> RaysightError | None:
    """Why the request's credentials do not grant ``access``; None when they do. The ingest key is looked for in
    the URL (``?key=``, or in the path, where Ray's aggregator and OTLP exporters append their own) and in a header;
    the tokens in ``Authorization: Bearer``; ``reach_token``: the admin token what reaches into processes needs (None:
    none allowed)."""
    if access is Access.OPEN:
        return None
    if access is Access.REACH:  # (not allowed: refused before, by the route's declaration)
        token_given = reach_ok(connection.headers.get("authorization"), reach_token)
        return None if token_given else Forbidden(REACH_TOKEN_NEEDED)
    if access is Access.INGEST:
        key = (
            connection.query_params.get(wire.INGEST_KEY_PARAM)
            or path_params.get(wire.INGEST_KEY_PARAM)
            or connection.headers.get(wire.INGEST_KEY_HEADER)
        )
        return None if secrets.ingest_ok(key) else Unauthorized(INGEST_KEY_NEEDED)
    authorization = connection.headers.get("authorization")
    if not secrets.token_ok(authorization):
        return Unauthorized(READ_TOKEN_NEEDED)
    if access is Access.ADMIN and not secrets.admin_ok(authorization):
        return Forbidden(ADMIN_TOKEN_NEEDED)
    return None


NOTHING_REACHED = Reaches()  # neither debugging nor on-demand profiling allowed


def allows(reaches: Reaches, reach: Reach) -> bool:
    """Whether the server allows ``reach`` (and so has the admin token it needs)."""
    return reaches.reach_token is not None and (reaches.debug if reach is Reach.DEBUG else reaches.profiling)


def refusal(
    scope: Scope,
    secrets: Secrets,
    allowed_hosts: frozenset[str] | None,
    declaration: Declaration,
    path_params: dict[str, Any],
    reaches: Reaches = NOTHING_REACHED,
) -> RaysightError | None:
    """Why an HTTP request or WebSocket handshake to a route of ``declaration`` (its path's ``path_params``) is
    refused; None when it may pass.

    ``allowed_hosts`` None: any Host (bound beyond loopback). ``reaches``: what the server allows of :class:`Reach`.
    """
    connection = HTTPConnection(scope)
    headers = connection.headers
    method = scope.get("method", "GET")  # a WebSocket handshake is a GET
    host = headers.get("host", "")
    if allowed_hosts is not None and host_name(host) not in allowed_hosts:
        return BadQuery(
            f"this raysight server is bound to loopback and serves loopback names only, not Host {host!r}; "
            "start it with --allowed-host NAME to serve another name"
        )
    if from_other_site(headers, method, declaration.access is Access.OPEN):
        return Forbidden("refused: another site's page sent this request (its Origin or Sec-Fetch-Site says so)")
    types = declaration.bodies
    if method == "POST" and types is not None and media_type(headers.get("content-type")) not in types:
        return UnsupportedEncoding(
            f"POST bodies must be sent as {' or '.join(types)}, "
            f"not {headers.get('content-type') or 'without a Content-Type'}"
        )
    if declaration.reach is not None and not allows(reaches, declaration.reach):
        return Forbidden(declaration.reach.off)
    refused = credential_refusal(declaration.access, connection, path_params, secrets, reaches.reach_token)
    return refused or unknown_params(connection.url.path, connection.query_params.keys(), declaration.params)


def unknown_params(path: str, given: Iterable[str], taken: frozenset[str] | None) -> BadQuery | None:
    """A query parameter the route does not take (``taken``; None: not checked), named with those it does: ignored,
    a misspelt filter (``?state=FAILED`` for ``?filter=state=FAILED``) would answer as if none were given."""
    if taken is None or not (unknown := sorted(set(given) - taken)):
        return None
    names = ", ".join(repr(name) for name in unknown)
    takes = f"it takes {', '.join(sorted(taken))}" if taken else "it takes none"
    hint = "; a field's filter is filter=FIELD=VALUE" if "filter" in taken else ""
    return BadQuery(f"{path} takes no query parameter {names}: {takes}{hint}")


class Guard:
    """Refuses what :func:`refusal` refuses, before any route, in the envelope of the route the request is for
    (plain ASGI: bodies pass straight through); leaves the route's declaration for the app's error handler."""

    def __init__(
        self, app: ASGIApp, secrets: Secrets, allowed_hosts: frozenset[str] | None, reaches: Reaches = NOTHING_REACHED
    ) -> None:
        self.app, self.secrets, self.allowed_hosts, self.reaches = app, secrets, allowed_hosts, reaches

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        declaration, path_params = routing.find(scope["app"].routes, scope)
        routing.remember(scope, declaration)
        refused = refusal(scope, self.secrets, self.allowed_hosts, declaration, path_params, self.reaches)
        if refused is None:
            await self.app(scope, receive, send)
            return
        if declaration.access is Access.INGEST and isinstance(refused, Unauthorized):
            scope["app"].state.raysight.metrics.rejected.labels("key").inc()
        # a WebSocket handshake gets the same HTTP answer (ASGI's denial response)
        await declaration.envelope(refused)(scope, receive, send)
