"""The dashboard as installed: a server whose page libraries are missing says so on every page and in its log at
start, rather than serving a page that draws nothing."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from raysight.server import ui_routes
from raysight.server.app import create_app
from raysight.settings import Settings


def test_with_its_libraries_installed_every_page_is_the_dashboard_and_the_log_says_nothing_of_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert ui_routes.vendor_missing() == []  # (the set-up command installs them)
    with caplog.at_level(logging.WARNING, "raysight.server"), TestClient(create_app(Settings(tmp_path))) as client:
        for page in ("/ui/", "/ui/tasks"):
            answer = client.get(page)
            assert answer.status_code == 200 and '<script type="module" src="/ui/static/app.js">' in answer.text
    assert "libraries" not in caplog.text


def test_without_its_libraries_every_page_and_the_log_at_start_say_what_is_missing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(ui_routes.VENDOR, "tabulator.mjs", "tabulator-tables/dist/js/removed.mjs")
    with caplog.at_level(logging.WARNING, "raysight.server"), TestClient(create_app(Settings(tmp_path))) as client:
        (started,) = [r.getMessage() for r in caplog.records if "libraries" in r.getMessage()]
        assert "tabulator.mjs" in started and "npm ci" in started and str(ui_routes.UI_DIR) in started
        for page in ("/ui/", "/ui/tasks", "/ui/tasks/0123"):
            answer = client.get(page)
            assert answer.status_code == 503 and answer.headers["content-type"].startswith("text/html")
            assert "<code>tabulator.mjs</code>" in answer.text and "npm ci" in answer.text
            assert "uplot.mjs" not in answer.text  # (only what is missing)
            assert str(ui_routes.UI_DIR) not in answer.text  # served without a token: no path of the server's
            assert answer.headers["Content-Security-Policy"] == ui_routes.HEADERS["Content-Security-Policy"]
        refused = client.get("/ui/vendor/tabulator.mjs")
        assert refused.status_code == 404 and "tabulator.mjs is not installed" in refused.json()["error"]
