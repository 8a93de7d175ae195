"""Every route of the app says who may call it, and beyond loopback each refuses the credentials that do not grant
that: a route added without its access declared, or with the wrong one, fails here. Walked from the real app's
route table (mounts too), each method of each route asked with no credential, the ingest key, the read token and the
admin token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.testclient import TestClient, WebSocketDenialResponse

from raysight import wire
from raysight.server import routing
from raysight.server.app import create_app
from raysight.server.auth import Secrets
from raysight.server.routing import Access
from raysight.settings import Reaches, Settings

SECRETS = Secrets(token="read-secret", ingest_key="ingest-secret", admin_token="admin-secret")
FILLER = "0123abcd"  # each path parameter's value: an ID, a resource or a name that is none of the store's


def expected(template: str, method: str) -> Access:
    """Who may call ``method`` on the route of ``template`` (its path within a mount): the dashboard's files anyone,
    ingest the holder of the ingest key, deleting a session and reindexing the admin, everything else a reader."""
    if template in (wire.HOME, wire.UI, wire.UI_PAGE, wire.UI_VENDOR, wire.UI_STATIC):
        return Access.OPEN
    if template.startswith(wire.INGEST + "/") or template in (wire.OTLP_TRACES, wire.OTLP_LOGS):
        return Access.INGEST
    if (method, template) in (("DELETE", wire.SESSION), ("POST", wire.REINDEX)):
        return Access.ADMIN
    if template == wire.DEBUG_ATTACH or (method, template) == ("POST", wire.CAPTURES):
        return Access.REACH
    return Access.READ


# Each credential as a caller sends it: the ingest key in every place one may (Ray's aggregator: in the URL's path or
# query; OTLP exporters and the agent: a header), the tokens as ``Authorization: Bearer``
CREDENTIALS = {
    "nothing": ({}, None),
    "the ingest key": ({wire.INGEST_KEY_HEADER: "ingest-secret", "Authorization": "Bearer ingest-secret"}, "key"),
    "the read token": ({"Authorization": "Bearer read-secret"}, None),
    "the admin token": ({"Authorization": "Bearer admin-secret"}, None),
}
GRANTS = {
    Access.OPEN: {"nothing", "the ingest key", "the read token", "the admin token"},
    Access.INGEST: {"the ingest key"},
    Access.READ: {"the read token", "the admin token"},
    Access.ADMIN: {"the admin token"},
    Access.REACH: {"the admin token"},
}


def leaves(routes: list[BaseRoute], prefix: str = "") -> Iterator[tuple[str, str, BaseRoute]]:
    """Each route that answers requests, as (its mount's path, its own path template, the route)."""
    for item in routes:
        if isinstance(item, Mount) and item.routes:
            yield from leaves(item.routes, prefix + item.path)
        else:
            assert isinstance(item, (Route, Mount, WebSocketRoute)), f"{item!r}: teach this test how to call it"
            yield prefix, item.path, item


def url(prefix: str, item: BaseRoute, key: str) -> str:
    """A path the route answers, its parameters filled (the ingest key's with ``key``)."""
    assert isinstance(item, (Route, Mount, WebSocketRoute))
    values = {name: key if name == wire.INGEST_KEY_PARAM else FILLER for name in item.param_convertors}
    prefix_values = {name: FILLER for name in ("session",) if "{session}" in prefix}
    filled = wire.path(prefix, **prefix_values) + wire.path(item.path, **values)
    return filled + ("/" + FILLER if isinstance(item, Mount) else "")  # (a file in a mounted folder)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app as bound beyond loopback: all three secrets required."""
    data_dir = tmp_path_factory.mktemp("access") / "data"
    settings = Settings(data_dir).replace(
        secrets=SECRETS, reaches=Reaches(True, True, "admin-secret"), fold_linger_s=0, fold_rest=0
    )
    app = create_app(settings)
    with TestClient(app) as client:
        yield client


def test_every_route_refuses_the_credentials_that_do_not_grant_its_access(secured: TestClient) -> None:
    asked: dict[Access, int] = dict.fromkeys(Access, 0)
    for prefix, template, item in leaves(secured.app.routes):
        assert routing.declaration_of(item) is not None, f"{prefix}{template} declares no access: make it with route()"
        methods = sorted((item.methods or set()) - {"HEAD"}) if isinstance(item, Route) else ["GET"]  # (a handshake)
        for method in methods:
            access = expected(template, method)
            asked[access] += 1
            for name, (headers, in_url) in CREDENTIALS.items():
                key = "ingest-secret" if in_url else "wrong"
                path = url(prefix, item, key) + (f"?{wire.INGEST_KEY_PARAM}={key}" if in_url else "")
                declared = routing.declaration_of(item)
                content_type = declared.bodies[0] if declared and declared.bodies else "application/json"
                where = f"{method} {path} with {name}, for {access.value}"
                if isinstance(item, WebSocketRoute):
                    status = handshake(secured, path, headers)
                else:
                    answer = secured.request(method, path, headers={**headers, "Content-Type": content_type})
                    status = answer.status_code
                    where += f": {answer.text[:200]}"
                if name in GRANTS[access]:
                    assert status not in (401, 403), f"{where}: refused"
                else:
                    forbidden = access is Access.REACH or (access is Access.ADMIN and name == "the read token")
                    assert status == (403 if forbidden else 401), f"{where}: {status}"
    assert all(asked.values()), asked  # (the walk found routes of every access)


def handshake(client: TestClient, path: str, headers: dict[str, str]) -> int:
    """A WebSocket handshake's status: 101 where the route took it (and was left at once), else its denial's."""
    try:
        with client.websocket_connect(path, headers=headers):
            return 101
    except WebSocketDenialResponse as denied:
        return denied.status_code


def test_a_path_no_route_answers_needs_the_read_token_and_says_nothing_more(secured: TestClient) -> None:
    for path in ("/nope", wire.INGEST + "/nope", wire.PROM_API + "/nope", wire.path(wire.IN_SESSION, session="x")):
        answer = secured.get(path)
        assert answer.status_code == 401 and answer.json()["error"].startswith("this raysight server needs its read")
        assert secured.get(path, headers={"Authorization": "Bearer read-secret"}).status_code == 404


def test_on_loopback_no_route_asks_for_a_credential(tmp_path: Path) -> None:
    """No secrets (bound to loopback): every route is open, ingest's and the admin's too."""
    with TestClient(create_app(Settings(tmp_path / "data").replace(fold_linger_s=0, fold_rest=0))) as client:
        for method, path in (("POST", wire.REINDEX), ("GET", wire.SESSIONS), ("POST", wire.AGENT_RUN_EXIT)):
            assert client.request(method, path, headers={"Content-Type": "application/json"}).status_code < 401
