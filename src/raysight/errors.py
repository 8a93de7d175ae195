"""raysight's exceptions, one tree.

RaysightError
 ├─ BadQuery        a filter, sort, limit or parameter the caller must fix (HTTP 400)
 ├─ NotFound        an unknown session, resource or ID (HTTP 404)
 ├─ Unauthorized    a missing or wrong token (HTTP 401)
 ├─ Forbidden       a token that does not grant this, or a request another site sent (HTTP 403)
 ├─ BodyTooLarge    a request body over its route's limit (HTTP 413)
 │   └─ TooMany     a body of more items (spans, records, lines) than its route takes at once
 ├─ UnsupportedEncoding  a request body in a Content-Encoding the route does not read (HTTP 415)
 ├─ Unavailable     the server cannot take this now (folding behind or stalled): retry (HTTP 503)
 └─ ServerUnreachable   the client could not reach a raysight server
"""

from __future__ import annotations


class RaysightError(Exception):
    status = 500


class BadQuery(RaysightError):
    status = 400


class NotFound(RaysightError):
    status = 404


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


class ServerUnreachable(RaysightError):
    status = 503
