"""raysight's exceptions, one tree. Each is answered with its status, in the envelope of the route that raised it
(``server/routing.py``), with the headers it carries (``Retry-After`` on a 503 its sender resends after).

RaysightError
 ├─ BadQuery        a filter, sort, limit or parameter the caller must fix (HTTP 400; Prometheus's "bad_data")
 │   └─ BadIngest   a body its ingest route cannot read: not JSON, not an array of Ray events, not an OTLP export,
 │                  not what the agent sends (a ValueError too, as the parsers' own errors were)
 ├─ QueryFailed     a query that failed as it ran: too many samples, a value past int64 (HTTP 422; "execution")
 ├─ NotFound        an unknown session, resource or ID (HTTP 404)
 ├─ Conflict        what cannot be done in its present state: profiling a task no longer running (HTTP 409)
 ├─ Unauthorized    a missing or wrong token (HTTP 401)
 ├─ Forbidden       a token that does not grant this, or a request another site sent (HTTP 403)
 ├─ BodyTooLarge    a request body over its route's limit (HTTP 413)
 │   └─ TooMany     a body of more items (spans, records, lines) than its route takes at once
 ├─ UnsupportedEncoding  a request body of a type or Content-Encoding the route does not read (HTTP 415)
 ├─ Unavailable     the server cannot take this now (folding behind or stalled): retry (HTTP 503; "unavailable")
 │   ├─ QueryTimeout     a query past its time budget (Prometheus's "timeout")
 │   └─ QueueFull        the writer's backlog is full: the store is too far behind to journal more now
 └─ ServerUnreachable   the client could not reach a raysight server
"""

from __future__ import annotations

from collections.abc import Mapping


class RaysightError(Exception):
    status = 500

    def __init__(self, *args: object, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(*args)
        self.headers = dict(headers or {})


class BadQuery(RaysightError):
    status = 400


class BadIngest(BadQuery, ValueError):
    pass


class QueryFailed(RaysightError):
    status = 422


class NotFound(RaysightError):
    status = 404


class Conflict(RaysightError):
    """What is asked of cannot be done in its present state (an on-demand profile of a task no longer running)."""

    status = 409


class Unauthorized(RaysightError):
    status = 401


class Forbidden(RaysightError):
    status = 403


class BodyTooLarge(RaysightError):
    status = 413


class TooMany(BodyTooLarge):
    pass


class UnsupportedEncoding(RaysightError):
    status = 415


class Unavailable(RaysightError):
    status = 503


class QueryTimeout(Unavailable):
    pass


class QueueFull(Unavailable):
    pass


class ServerUnreachable(RaysightError):
    status = 503
