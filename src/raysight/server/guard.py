"""What a request must pass before any route sees it, HTTP and WebSocket handshakes alike: pure checks of its scope.

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
  refused above.
- The read token, on every path but ingest (which checks its own write-only key) and the dashboard's files (which
  hold no data: the page must load to ask for the token).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import Scope

from raysight.server.auth import Secrets

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
POST_TYPES = ("application/json", "application/x-protobuf")  # Ray's aggregator and raysight's own posts; OTLP
FORM_TYPES = ("application/x-www-form-urlencoded",)  # Prometheus's query API's (_PROMETHEUS_API)


def host_name(host: str) -> str:
    """A ``Host`` header without its port: ``[::1]:8271`` → ``[::1]``, ``LocalHost:80`` → ``localhost``."""
    host = host.lower()
    if host.startswith("[") and "]" in host:
        return host[: host.index("]") + 1]
    return host.partition(":")[0]


def url_host(address: str) -> str:
    """An address as a URL's host names it: ``::1`` → ``[::1]``."""
    return f"[{address}]" if ":" in address else address


def from_other_site(headers: Headers, method: str, path: str) -> bool:
    origin = headers.get("origin")
    if origin is not None and urlsplit(origin).netloc.lower() != headers.get("host", "").lower():
        return True  # "null" (a sandboxed or file: page) too
    if headers.get("sec-fetch-site") in ("cross-site", "same-site"):  # same-site: e.g. another port of localhost
        followed_link = method in ("GET", "HEAD") and headers.get("sec-fetch-mode") == "navigate"
        return not (followed_link and headers.get("sec-fetch-dest") == "document" and dashboard_path(path))
    return False


def dashboard_path(path: str) -> bool:
    """The dashboard's pages and files, which a link from anywhere may open."""
    return path in ("/", "/ui") or path.startswith("/ui/")


def open_path(path: str) -> bool:
    """Paths served without the read token: ingest (its own key: OTLP's at its standard paths too) and the
    dashboard's files."""
    return path.startswith(("/ingest/", "/v1/")) or dashboard_path(path)


# Ray's job writes (submit, stop, delete, upload): raysight only refuses them (405), so no body can do harm there
_REFUSED_WRITES = re.compile(r"(/sessions/[^/]+)?/api/(jobs|packages)/.*")
_PROMETHEUS_API = re.compile(r"(/sessions/[^/]+)?/api/v1/.*")


def post_types(path: str) -> tuple[str, ...]:
    """The body types a POST to ``path`` may carry."""
    return FORM_TYPES if _PROMETHEUS_API.fullmatch(path) else POST_TYPES


def media_type(content_type: str | None) -> str:
    """``application/json; charset=utf-8`` → ``application/json``."""
    return (content_type or "").partition(";")[0].strip().lower()


def refusal(scope: Scope, secrets: Secrets, allowed_hosts: frozenset[str] | None) -> tuple[int, str] | None:
    """Why an HTTP request or WebSocket handshake is refused, as (status, message); None when it may pass.

    ``allowed_hosts`` None: any Host (bound beyond loopback).
    """
    headers = Headers(scope=scope)
    method = scope.get("method", "GET")  # a WebSocket handshake is a GET
    host = headers.get("host", "")
    if allowed_hosts is not None and host_name(host) not in allowed_hosts:
        return 400, (
            f"this raysight server is bound to loopback and serves loopback names only, not Host {host!r}; "
            "start it with --allowed-host NAME to serve another name"
        )
    if from_other_site(headers, method, scope["path"]):
        return 403, "refused: another site's page sent this request (its Origin or Sec-Fetch-Site says so)"
    types = post_types(scope["path"])
    if (
        method == "POST"
        and media_type(headers.get("content-type")) not in types
        and not _REFUSED_WRITES.fullmatch(scope["path"])
    ):
        return 415, (
            f"POST bodies must be sent as {' or '.join(types)}, "
            f"not {headers.get('content-type') or 'without a Content-Type'}"
        )
    if not open_path(scope["path"]) and not secrets.token_ok(headers.get("authorization")):
        return 401, "this raysight server needs its read token: set RAYSIGHT_TOKEN or send Authorization: Bearer"
    return None
