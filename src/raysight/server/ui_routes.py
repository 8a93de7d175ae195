"""The dashboard's files. `/` leads to `/ui/`; every page under `/ui/` is the one HTML shell (its scripts route in the
browser, so each entity's URL is shareable and reload-safe); the scripts and styles are under `/ui/static/`, the
libraries they use under `/ui/vendor/` (from the npm packages the set-up command installs, shipped in the wheel).

None of these carries data — every figure comes from the API, with the token — so they are served without one: the
page must load to ask for it. Nothing here is built from a request: files are looked up by name in fixed places.
"""

from __future__ import annotations

import html
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.staticfiles import StaticFiles

from raysight import wire
from raysight.errors import NotFound
from raysight.server.answers import raysight_error
from raysight.server.routing import Access, files, route

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
# The libraries the dashboard imports, by the name it asks for: ES modules and their styles
VENDOR = {
    "tabulator.mjs": "tabulator-tables/dist/js/tabulator_esm.min.mjs",
    "tabulator.css": "tabulator-tables/dist/css/tabulator_simple.min.css",
    "uplot.mjs": "uplot/dist/uPlot.esm.js",
    "uplot.css": "uplot/dist/uPlot.min.css",
    "d3.js": "d3/dist/d3.min.js",
}
# The page may run only its own scripts and talk only to this server; no page may frame it
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class _Static(StaticFiles):
    """The dashboard's own scripts and styles, with the same headers as the page."""

    def file_response(self, *args: object, **kwargs: object) -> Response:
        response = super().file_response(*args, **kwargs)  # type: ignore[arg-type]
        response.headers.update({**HEADERS, "Cache-Control": "no-cache"})
        return response


def vendor_missing() -> list[str]:
    """The libraries the dashboard needs that are not installed (`npm ci` in the ui folder installs them)."""
    return [name for name, path in VENDOR.items() if not (UI_DIR / "node_modules" / path).is_file()]


def missing_page(missing: list[str]) -> str:
    """What every page says in place of the dashboard when its libraries are not installed (the server's log says
    where to install them: this page is served without a token, so it names no path of the server's)."""
    names = ", ".join(f"<code>{html.escape(name)}</code>" for name in missing)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>raysight: the dashboard is not installed</title></head>
<body><h1>raysight's dashboard cannot be drawn</h1>
<p>The libraries its pages use are not installed with this raysight: {names}.</p>
<p>Install raysight from a wheel that holds them, or run <code>npm ci</code> in raysight's <code>ui</code> folder (the
server's log at start names it). The API, Ray's CLI and raysight's CLI work without them.</p></body></html>
"""


async def home(request: Request) -> Response:
    return RedirectResponse(wire.UI + "/", status_code=307)


async def shell(request: Request) -> Response:
    """Any page: the HTML shell, whose scripts read the URL; or, without the libraries it needs, a page saying so
    (503: an install to complete, not a page that draws nothing)."""
    headers = {**HEADERS, "Cache-Control": "no-cache"}
    if missing := vendor_missing():
        return HTMLResponse(missing_page(missing), status_code=503, headers=headers)
    return FileResponse(UI_DIR / "index.html", headers=headers)


async def vendor(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in VENDOR:
        raise NotFound(f"no library named {name!r}")
    path = UI_DIR / "node_modules" / VENDOR[name]
    if not path.is_file():
        raise NotFound(f"{name} is not installed: run `npm ci` in {UI_DIR} (the set-up command does)")
    media = "text/javascript" if name.endswith((".js", ".mjs")) else None
    return FileResponse(path, media_type=media, headers={**HEADERS, "Cache-Control": "max-age=3600"})


routes = [
    route(wire.HOME, home, access=Access.OPEN, envelope=raysight_error),
    route(wire.UI_VENDOR, vendor, access=Access.OPEN, envelope=raysight_error),
    files(wire.UI_STATIC, _Static(directory=UI_DIR / "static", check_dir=False), name="ui-static"),
    route(wire.UI, shell, access=Access.OPEN, envelope=raysight_error),
    route(wire.UI_PAGE, shell, access=Access.OPEN, envelope=raysight_error),
]
