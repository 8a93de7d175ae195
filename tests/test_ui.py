"""The dashboard in a real headless Chromium (Debian's, driven by Playwright) against a real server: the demo
workload's sessions (recorded by `raysight demo` and `raysight run`, the cluster long gone, read by a server started
after the demo's), a live session fed by a real node agent, and a server that needs its token. Each test fails on any
console error, uncaught exception, failed request or error response it did not expect; each page it visits is
screenshotted into the folder the test run names at its end."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from raysight import wire
from raysight.client import Client
from raysight.config import USER_AGENT
from raysight.ingest.otlp import key_values
from tests.conftest import SCREENSHOTS
from tests.ray_scenarios import ServerProcess, agent_command, wait_folded
from tests.test_debugger import pause_report
from tests.test_serve_logs import SESSION as SERVE_SESSION
from tests.test_serve_logs import send_request_span, serve_logs_server
from tests.test_serve_state import details, send

playwright_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = Path("/usr/bin/chromium")
WAIT_MS = 15_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.fail("Debian's chromium is not installed: `./dev.sh test` installs it")
    shutil.rmtree(SCREENSHOTS, ignore_errors=True)
    SCREENSHOTS.mkdir()
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield chromium
        chromium.close()


# A click on a link to this path, which the dashboard follows itself (no reload)
FOLLOW = """p => {
  const a = Object.assign(document.createElement("a"), { href: p });
  document.body.append(a);
  a.click();
  a.remove();
}"""

HREFS = "as => as.map(a => a.getAttribute('href'))"


class Watched:
    """A page whose every console error, uncaught exception, failed request and error response is kept."""

    def __init__(self, browser: Any, base: str, name: str) -> None:
        self.base, self.name, self.shots = base, name, 0
        self.context = browser.new_context(viewport={"width": 1400, "height": 900})
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.expected: list[str] = []  # patterns of problems a test provokes on purpose
        page = self.page
        page.on("console", lambda m: self.problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.problems.append(f"uncaught: {e}"))
        page.on("requestfailed", lambda r: self.problems.append(f"failed request: {r.url} {r.failure}"))
        page.on("response", lambda r: self.problems.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        self.pending = 0  # requests sent and not yet answered (or failed)
        page.on("request", lambda _: self.count(1))
        page.on("requestfinished", lambda _: self.count(-1))
        page.on("requestfailed", lambda _: self.count(-1))

    def count(self, change: int) -> None:
        self.pending += change

    def open(self, path: str) -> Any:
        self.page.goto(self.base + path)
        self.settle()
        return self.page

    def visit(self, path: str, quiet_ms: int = 100) -> Any:
        """Show a page as following a link to it does (the first loads the dashboard), and wait until it is rendered
        and no request has been pending for ``quiet_ms`` (its tables fetch their rows after it renders); without a
        screenshot: a crawl shows many."""
        if self.page.url.startswith(self.base + "/ui/"):
            self.page.evaluate(FOLLOW, path)
        else:
            self.page.goto(self.base + path)
        self.page.locator("#page:not([data-loading])").wait_for(state="attached", timeout=WAIT_MS)
        self.quiet(path, quiet_ms)
        return self.page

    def quiet(self, what: str, quiet_ms: int = 100) -> None:
        """Wait until no request has been pending for ``quiet_ms``."""
        deadline, quiet = time.monotonic() + WAIT_MS / 1000, 0
        while quiet < quiet_ms:
            assert time.monotonic() < deadline, f"{what}: {self.pending} requests still pending"
            self.page.wait_for_timeout(25)
            quiet = quiet + 25 if self.pending == 0 else 0

    def settle(self) -> None:
        """Wait until the page shown is rendered (its data fetched), then screenshot it."""
        self.page.locator("#page:not([data-loading])").wait_for(state="attached", timeout=WAIT_MS)
        self.page.wait_for_load_state("networkidle")
        self.shot()

    def shot(self) -> None:
        self.shots += 1
        self.page.screenshot(path=str(SCREENSHOTS / f"{self.name}-{self.shots:02d}.png"), full_page=True)

    def unexpected(self) -> list[str]:
        return [p for p in self.problems if not any(re.search(e, p) for e in self.expected)]


@pytest.fixture
def watched(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A factory of watched pages (each test's base URL), all checked for problems when the test ends."""
    made: list[Watched] = []

    def make(base: str) -> Watched:
        made.append(Watched(browser, base, f"{request.node.name}-{len(made)}"))
        return made[-1]

    yield make
    for one in made:
        one.context.close()
    problems = [p for one in made for p in one.unexpected()]
    assert not problems, problems


def rows(page: Any, box: str) -> list[list[str]]:
    """The cells of a table's rows, once it has some."""
    page.locator(f"{box} .tabulator-row").first.wait_for(timeout=WAIT_MS)
    return [r.locator(".tabulator-cell").all_inner_texts() for r in page.locator(f"{box} .tabulator-row").all()]


def column(page: Any, box: str, title: str) -> int:
    titles = page.locator(f"{box} .tabulator-col-title").all_inner_texts()
    return titles.index(title)


def wait_rows(page: Any, box: str, check: Any) -> list[list[str]]:
    """Poll a table until its rows pass ``check`` (a server-side filter or page takes a request)."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        found = rows(page, box)
        if check(found):
            return found
        assert time.monotonic() < deadline, (len(found), found)
        page.wait_for_timeout(100)


@pytest.mark.ray
def test_sessions_page_and_switcher(recorded: ServerProcess, watched: Any) -> None:
    w = watched(recorded.url)
    page = w.open("/")
    assert page.url.endswith("/ui/")
    found = {r[1]: r[0] for r in rows(page, "#sessions")}
    assert set(found) == {"demo", "second"}
    page.get_by_role("link", name=found["demo"]).click()
    page.wait_for_url(f"**/ui/sessions/{found['demo']}")
    w.settle()
    assert page.locator("h1").inner_text() == f"demo · {found['demo']}"
    assert page.locator("#activity canvas").count() >= 1  # the activity chart drew
    page.locator("#nav").get_by_role("link", name="Tasks").click()
    page.wait_for_url("**/tasks")
    page.locator("#session-switcher").select_option(found["second"])  # the same page of the other session
    page.wait_for_url(f"**/ui/sessions/{found['second']}/tasks")
    w.settle()
    wait_rows(page, "#tasks-table", lambda r: len(r) == 16)
    page.go_back()
    page.wait_for_url(f"**/ui/sessions/{found['demo']}/tasks")
    w.settle()
    assert page.locator("#session-switcher").input_value() == found["demo"]


@pytest.mark.ray
def test_a_page_left_while_its_code_loads_draws_nothing_beside_the_next(recorded: ServerProcess, watched: Any) -> None:
    """The user switches session while the tasks page's module is still on its way: both renders waited on the one
    import, and each then drew its table into the page (32 rows: the flake this test was written for). Only the
    page switched to is drawn, its switcher and nav of its session."""
    w = watched(recorded.url)
    page = w.open("/ui/sessions/demo")
    options = rows_when(page, "#session-switcher option")
    second = next(o for o in options if o.startswith("second · ")).split(" · ")[1]
    held: list[Any] = []
    page.route("**/static/pages/tasks.js", lambda route: held.append(route))  # answered when the test says
    page.locator("#nav").get_by_role("link", name="Tasks").click()
    page.wait_for_url("**/demo/tasks")
    page.locator("#session-switcher").select_option(second)
    page.wait_for_url(f"**/ui/sessions/{second}/tasks")
    deadline = time.monotonic() + WAIT_MS / 1000
    while not held:
        assert time.monotonic() < deadline, "the tasks page's module was not asked for"
        page.wait_for_timeout(25)
    held[0].continue_()
    w.settle()
    wait_rows(page, "#tasks-table", lambda r: len(r) == 16)
    page.wait_for_timeout(300)  # (what a stale render would still draw)
    assert page.locator("#tasks-table").count() == 1 and page.locator("h1").count() == 1
    assert page.locator("#session-switcher").input_value() == second
    assert all(second in href for href in page.locator("#nav a[href*='/sessions/']").evaluate_all(HREFS))


def rows_when(page: Any, options: str) -> list[str]:
    """The texts of ``options`` once there are some."""
    page.locator(options).nth(1).wait_for(state="attached", timeout=WAIT_MS)
    return page.locator(options).all_inner_texts()


@pytest.mark.ray
def test_tasks_are_filtered_sorted_and_paged_by_the_server_and_the_view_is_in_the_url(
    recorded: ServerProcess, watched: Any
) -> None:
    w = watched(recorded.url)
    page = w.open("/ui/sessions/demo/tasks?size=5")
    first = rows(page, "#tasks-table")
    assert len(first) == 5 and "Showing 1-5 of 16 rows" in page.locator(".tabulator-page-counter").inner_text()
    page.get_by_role("button", name="Next").click()
    second = wait_rows(page, "#tasks-table", lambda r: r != first)
    assert len(second) == 5 and "page=2" in page.url
    state = column(page, "#tasks-table", "State")
    page.goto(recorded.url + "/ui/sessions/demo/tasks?state=FAILED")
    failed = wait_rows(page, "#tasks-table", lambda r: len(r) == 3)
    assert {r[state] for r in failed} == {"FAILED"}
    page.goto(recorded.url + "/ui/sessions/demo/tasks?sort=-duration_ms")
    slowest = rows(page, "#tasks-table")
    assert slowest[0][column(page, "#tasks-table", "Function")] == "parent"  # it waited for its children
    page.reload()
    w.settle()
    assert rows(page, "#tasks-table")[0] == slowest[0]  # reload-safe
    page.locator(".tabulator-col[tabulator-field='func_or_class_name'] input").fill("child")
    page.keyboard.press("Enter")
    children = wait_rows(page, "#tasks-table", lambda r: len(r) == 3)
    assert {r[column(page, "#tasks-table", "Function")] for r in children} == {"child"} and "=child" in page.url


@pytest.mark.ray
def test_a_failed_task_leads_to_its_traceback_its_lines_and_its_failure(recorded: ServerProcess, watched: Any) -> None:
    w = watched(recorded.url)
    page = w.open("/ui/sessions/demo/tasks?func_or_class_name=fails")
    (row,) = wait_rows(page, "#tasks-table", lambda r: len(r) == 1)
    page.locator("#tasks-table .tabulator-row a.id").first.click()
    page.wait_for_url(re.compile(r".*/ui/sessions/demo/tasks/[0-9a-f]{48}$"))
    w.settle()
    traceback = page.locator("pre.traceback").inner_text()
    assert 'raise ValueError("boom: this task fails on purpose")' in traceback and "\x1b" not in traceback
    assert re.search(r"\(fails pid=\d+\) fails: about to raise", page.locator("pre.log").first.inner_text())
    task_url = page.url
    page.locator("a.to-failure").click()
    page.wait_for_url(re.compile(r".*/errors/[0-9a-f]{48}$"))
    w.settle()
    text = page.locator("main").inner_text()
    assert "task fails (attempt 0): TASK_EXECUTION_EXCEPTION" in text and "What it printed" in text
    page.go_back()
    page.wait_for_url(task_url)
    w.settle()
    assert page.locator("h1").inner_text() == "Task fails"


@pytest.mark.ray
def test_errors_grouped_by_cause_lead_to_each_failure(recorded: ServerProcess, watched: Any) -> None:
    w = watched(recorded.url)
    page = w.open("/ui/sessions/demo/errors")
    groups = rows(page, "#error-groups")
    kind = column(page, "#error-groups", "Kind")
    assert {g[kind] for g in groups} == {"actor", "task", "worker"}
    crash = next(i for i, g in enumerate(groups) if g[kind] == "worker")
    error_type = groups[crash][column(page, "#error-groups", "Error type")]
    page.locator("#error-groups .tabulator-row").nth(crash).locator("a.group").click()
    page.wait_for_url(re.compile(r".*/errors/[0-9a-f]{12}$"))
    failures = rows(page, "#group-failures")
    assert failures and all(f[0] == "worker" for f in failures)
    page.locator("#group-failures a.failure-link").first.click()
    page.wait_for_url(re.compile(r".*/errors/[0-9a-f]{56}$"))
    w.settle()
    assert re.fullmatch(rf"worker worker pid=\d+: {error_type}", page.locator("article.failure > h2").inner_text())
    assert page.locator("pre.traceback").inner_text().strip()  # Ray's words for the crash (they vary by timing)


@pytest.mark.ray
def test_jobs_actors_nodes_and_workers_each_have_a_page(recorded: ServerProcess, watched: Any) -> None:
    w = watched(recorded.url)
    page = w.open("/ui/sessions/demo/actors")
    actors = rows(page, "#actors-table")
    assert sorted(a[column(page, "#actors-table", "Class")] for a in actors) == ["Counter", "Fragile"]
    counter = next(i for i, a in enumerate(actors) if "Counter" in a)
    page.locator("#actors-table .tabulator-row").nth(counter).locator("a.id").first.click()
    page.wait_for_url(re.compile(r".*/actors/[0-9a-f]{32}$"))
    calls = rows(page, ".related")
    assert sorted(c[2] for c in calls) == ["Counter.__init__"] + ["Counter.inc"] * 3  # its creation, its calls
    assert "count 3" in page.locator("pre.log").inner_text()
    w.shot()
    for kind, box in (("jobs", "#jobs-table"), ("nodes", "#nodes-table"), ("workers", "#workers-table")):
        page = w.open(f"/ui/sessions/demo/{kind}")
        assert rows(page, box)
        page.locator(f"{box} .tabulator-row a.id").first.click()
        page.wait_for_url(re.compile(rf".*/{kind}/[0-9a-f]+$"))
        w.settle()
        assert page.locator("dl.fields").count() == 1
    query = {"session": "demo", "filter": "name=fails"}  # (a worker that ran a task: a driver or an idle one did not)
    (fails,) = httpx.get(f"{recorded.url}/api/raysight/tasks", params=query).json()["rows"]
    page = w.open(f"/ui/sessions/demo/workers/{fails['worker_id']}")
    page.locator(".related .tabulator-row").first.wait_for()
    assert "Tasks it ran" in page.locator("main").inner_text()


HEX_ID = re.compile(r"[0-9a-f]{8,}")


def page_kind(href: str) -> str:
    """What kind of page a link opens: its path with each ID as its length (a job's failures, 8 hex digits, are not
    a task's, 48) and the names of its query's parameters (not their values)."""
    path, _, query = href.partition("#")[0].partition("?")
    names = sorted({pair.partition("=")[0] for pair in query.split("&") if pair})
    return HEX_ID.sub(lambda m: f"<{len(m.group())}>", path) + (f"?{'&'.join(names)}" if names else "")


WIDTHS = (1400, 1280)  # px: the widths every page kind must fit (and is screenshotted at)


def fits_each_width(w: Any, path: str) -> None:
    """The page shown, at each of WIDTHS: no horizontal scroll of the page itself (a wide table scrolls in its own
    box), screenshotted."""
    for width in WIDTHS:
        w.page.set_viewport_size({"width": width, "height": 900})
        w.page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
        scroll, viewport = w.page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert scroll <= viewport, f"{path} scrolls sideways at {width} px: {scroll} px wide"
        w.shot()


@pytest.mark.ray
def test_every_page_a_session_links_to_opens_without_an_error_answer(recorded: ServerProcess, watched: Any) -> None:
    """A crawl from the sessions and a session's overview, link by link, opening one page of each kind: every entity
    kind's page (a task's, an actor's, a job's, a node's, a worker's) and the pages it links to, the failures of an
    entity that did not fail among them — none of their requests answered with a 4xx or 5xx (the fixture fails on
    any), no page showing a terminal's colour codes, each fitting 1400 and 1280 px without scrolling sideways."""
    w = watched(recorded.url)
    start = "/ui/sessions/demo"
    queue, kinds = deque(["/ui/", start]), {"/ui/", page_kind(start)}
    texts: dict[str, str] = {}
    while queue:
        path = queue.popleft()
        page = w.visit(path)
        texts[page_kind(path)] = page.locator("#page").inner_text()
        fits_each_width(w, path)
        for href in page.eval_on_selector_all(
            "#nav a[href], #page a[href]", "as => as.map(a => a.getAttribute('href'))"
        ):
            if (href == start or href.startswith(start + "/")) and page_kind(href) not in kinds:
                kinds.add(page_kind(href))
                queue.append(href)
        assert len(kinds) < 60, sorted(kinds)  # bounded: one page of each kind
    entity_pages = {f"{start}/{kind}/<{n}>" for kind, n in (("tasks", 48), ("actors", 32), ("jobs", 8))}
    entity_pages |= {f"{start}/{kind}/<56>" for kind in ("nodes", "workers")}
    entity_pages |= {
        f"{start}/traces/<32>",
        f"{start}/errors/<12>",
        f"{start}/errors/<48>",
    }  # a trace, a cause, a failure
    entity_pages |= {f"{start}/{kind}" for kind in ("tasks", "jobs", "actors", "nodes", "workers", "errors", "logs")}
    assert entity_pages | {f"{start}/timeline", f"{start}/traces"} <= kinds, sorted(kinds)
    assert "Failed attempts" in texts[f"{start}/jobs/<8>"]  # the demo's job says where it stands
    job = page_kind(f"{start}/jobs/01000000")
    assert job in kinds and "did not fail" in w.visit(f"{start}/errors/01000000").locator("#page").inner_text()
    assert not [kind for kind, text in texts.items() if "\x1b" in text]


def visible_us(canvas: Any) -> tuple[int, int]:
    """The time span the timeline shows (µs from its first start), as its last frame drew it."""
    first, last = canvas.get_attribute("data-view").split(",")
    return int(first), int(last)


@pytest.mark.ray
def test_the_timeline_zooms_pans_and_opens_the_task_of_a_bar(recorded: ServerProcess, watched: Any) -> None:
    w = watched(recorded.url)
    page = w.open("/ui/sessions/demo/timeline")
    canvas = page.locator("canvas.stream")
    tasks = httpx.get(
        f"{recorded.url}/api/raysight/tasks", params={"session": "demo", "limit": 100, "detail": "true"}
    ).json()["rows"]
    started = [t for t in tasks if t["start_time_ms"] is not None and t["type"] != "DRIVER_TASK"]
    assert int(canvas.get_attribute("data-bars")) == len(started) >= 10
    assert int(canvas.get_attribute("data-lanes")) == len({t["worker_id"] for t in started})
    assert {"parent", "child", "crash_once", "Counter.inc"} <= set(page.locator(".legend li").all_inner_texts())
    box = canvas.bounding_box()
    gutter, top, lane_height = (float(canvas.get_attribute(f"data-{a}")) for a in ("gutter", "top", "lane-height"))
    middle = (box["x"] + (gutter + box["width"]) / 2, box["y"] + top + lane_height / 2)
    whole = visible_us(canvas)
    page.mouse.move(*middle)
    for _ in range(5):
        page.mouse.wheel(0, -200)  # zoom in about the pointer
    page.locator(f"canvas.stream:not([data-view='{','.join(map(str, whole))}'])").wait_for(timeout=WAIT_MS)
    page.wait_for_timeout(300)
    zoomed = visible_us(canvas)
    assert zoomed[1] - zoomed[0] < (whole[1] - whole[0]) / 2 and whole[0] <= zoomed[0] < zoomed[1] <= whole[1]
    page.mouse.down()
    page.mouse.move(middle[0] + 200, middle[1], steps=5)  # drag right: earlier times come into view
    page.mouse.up()
    page.wait_for_timeout(300)
    panned = visible_us(canvas)
    per_px = (zoomed[1] - zoomed[0]) / (box["width"] - gutter)
    assert abs((zoomed[0] - panned[0]) - 200 * per_px) < 3 * per_px + 1
    page.reload()  # back to the whole session, then find a bar by hovering along each lane, as a user does
    w.settle()
    found = None
    for lane in range(int(canvas.get_attribute("data-lanes"))):
        y = box["y"] + top + lane * lane_height + lane_height / 2
        for x in range(int(box["x"] + gutter) + 2, int(box["x"] + box["width"]), 3):
            page.mouse.move(x, y)
            if page.locator(".stream-tip").is_visible():
                found = (x, y, page.locator(".stream-tip").inner_text().splitlines())
                break
        if found:
            break
    assert found, "no bar under the pointer in any lane"
    x, y, (function, attempt_line, task_id, _lane) = found
    attempt = re.search(r"attempt (\d+)", attempt_line).group(1)
    w.shot()
    page.mouse.click(x, y)
    page.wait_for_url(re.compile(rf".*/ui/sessions/demo/tasks/{task_id}#attempt-{attempt}$"))
    w.settle()
    assert page.locator("h1").inner_text() == f"Task {function}"
    page.go_back()
    page.wait_for_url("**/ui/sessions/demo/timeline")
    w.settle()
    assert canvas.get_attribute("data-bars") == str(len(started))


@pytest.mark.ray
def test_log_search(recorded: ServerProcess, watched: Any) -> None:
    w = watched(recorded.url)
    page = w.open("/ui/sessions/demo/logs")
    page.locator("#log-search input[name=grep]").fill("count")
    page.locator("#log-search select[name=stream]").select_option("stdout")
    page.get_by_role("button", name="Search").click()
    page.locator("#log-status", has_text=re.compile("^3 matching")).wait_for(timeout=WAIT_MS)
    lines = page.locator("#log-lines .line").all_inner_texts()
    assert [re.sub(r"pid=\d+", "pid=N", line) for line in lines] == [
        f"(Counter pid=N) task count {n}" for n in (3, 2, 1)
    ]  # newest first, each with a link to the actor call that printed it
    assert "grep=count" in page.url and "stream=stdout" in page.url
    page.locator("#log-search input[name=regex]").check()
    page.locator("#log-search input[name=grep]").fill("count [12]$")
    page.get_by_role("button", name="Search").click()
    page.locator("#log-status", has_text=re.compile("^2 matching")).wait_for(timeout=WAIT_MS)
    w.shot()
    page.locator("#log-search input[name=regex]").uncheck()  # the lines Ray's dashboard logged of raysight's poller
    page.locator("#log-search select[name=stream]").select_option("")
    page.locator("#log-search input[name=grep]").fill(f"'{USER_AGENT}'")
    page.get_by_role("button", name="Search").click()
    page.locator("#log-status", has_text=re.compile("^0 matching")).wait_for(timeout=WAIT_MS)
    page.locator("#log-search input[name=own]").check()
    page.get_by_role("button", name="Search").click()
    page.locator("#log-status", has_text=re.compile("^[1-9][0-9]* matching")).wait_for(timeout=WAIT_MS)
    shown = page.locator("#log-lines .line").all_inner_texts()
    assert "own=1" in page.url and all(line.endswith(f"'{USER_AGENT}'") for line in shown), shown


def test_a_live_sessions_logs_are_followed_as_they_come(tmp_path: Path, watched: Any) -> None:
    """A session fed by a real node agent tailing a worker's file: the logs page, following, shows each new line
    without a reload; the page marks the session live."""
    logs = tmp_path / "ray" / "session_2026-11-23_10-00-00_000000_1" / "logs"
    logs.mkdir(parents=True)
    worker = logs / ("worker-" + "ab" * 28 + "-01000000-4242.out")
    worker.write_text("first line\n")
    server = ServerProcess(tmp_path / "data").start()
    agent = subprocess.Popen(
        agent_command(server.url, tmp_path / "ray", tmp_path / "state"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with server.client() as client:  # the agent's first batch is in
            deadline = time.monotonic() + WAIT_MS / 1000
            while not client.sessions():
                assert time.monotonic() < deadline, "the agent shipped nothing"
                time.sleep(0.1)
        w = watched(server.url)
        page = w.open("/ui/sessions/session_2026-11-23_10-00-00_000000_1/logs?follow=1")
        page.locator("#log-lines .line").first.wait_for(timeout=WAIT_MS)
        assert not page.locator("#live").is_hidden()
        with worker.open("a") as f:
            f.write("second line, written while the page follows\n")
        page.get_by_text("second line, written while the page follows").wait_for(timeout=WAIT_MS)
        newest = page.locator("#log-lines .line").first.inner_text()
        assert newest.endswith("second line, written while the page follows")
        w.shot()
    finally:
        agent.kill()
        agent.wait(timeout=30)
        server.stop()


def test_a_server_that_needs_its_token_asks_for_it_once(tmp_path: Path, watched: Any) -> None:
    """Bound beyond loopback, reads need the token: the page asks once, keeps it for the tab (not in any URL), and
    every page then loads; with no sessions, the sessions page says what to do."""
    server = ServerProcess(
        tmp_path / "data", options=["--host", "0.0.0.0", "--token", "read-secret", "--ingest-key", "w-key"]
    ).start()
    try:
        w = watched(server.url)
        w.expected = [r"^401 .*/api/raysight/", r"^console error: Failed to load resource: .* 401"]
        page = w.page
        page.goto(server.url + "/")  # the page waits for the token: not settled until it is given
        page.locator("#token-input").fill("read-secret")
        page.locator("#token-dialog button").click()
        page.get_by_text("No sessions yet: run `raysight run -- python app.py`").wait_for(timeout=WAIT_MS)
        refused = len(w.problems)
        page.reload()
        w.settle()
        page.locator("p.empty").wait_for(timeout=WAIT_MS)
        assert len(w.problems) == refused and page.locator("#token-dialog").is_hidden()  # kept for the tab
        assert "read-secret" not in page.url
        assert refused >= 1  # it was asked for, not open
    finally:
        server.stop()


def test_an_unknown_page_or_session_says_so(tmp_path: Path, watched: Any) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        w = watched(server.url)
        w.expected = [r"^404 .*/api/raysight/errors/", r"^console error: Failed to load resource: .* 404"]
        page = w.open("/ui/nowhere")
        assert page.locator("h1").inner_text() == "Not found"
        page = w.open("/ui/sessions/session_nope/errors/" + "ab" * 24)
        assert "no session named 'session_nope'" in page.locator("#banner").inner_text()
        page.locator("#banner a.to-sessions").click()  # a missing session leads back to those recorded
        page.wait_for_url("**/ui/")
        w.quiet("the sessions page")  # its sessions fetched before the server stops
    finally:
        server.stop()


class LiveFeed:
    """A server that Ray's recorded events reach in two halves while the pages are open: the session stays live."""

    def __init__(self, data_dir: Path, ray_batches: list[list[dict[str, Any]]]) -> None:
        self.server = ServerProcess(data_dir).start()
        self.batches, self.half = ray_batches, len(ray_batches) // 2

    def send(self, first_half: bool) -> None:
        batches = self.batches[: self.half] if first_half else self.batches[self.half :]
        with httpx.Client(base_url=self.server.url) as http:
            for batch in batches:
                http.post("/ingest/ray-events?cluster=live", json=batch).raise_for_status()
            deadline = time.monotonic() + WAIT_MS / 1000
            while http.get("/api/raysight/ping").json()["ingest_backlog"]["batches"]:
                assert time.monotonic() < deadline, "the batches were not folded"
                time.sleep(0.05)


@pytest.fixture
def live_feed(tmp_path: Path, ray_batches: list[list[dict[str, Any]]]) -> Iterator[LiveFeed]:
    feed = LiveFeed(tmp_path / "data", ray_batches)
    try:
        feed.send(first_half=True)
        yield feed
    finally:
        feed.server.stop()


def test_a_live_sessions_table_updates_itself_on_the_page_the_user_reads(live_feed: LiveFeed, watched: Any) -> None:
    """Ray's events arriving while the tasks table is open on its second page: the table's count grows by itself,
    and it stays on the page, page size and URL the user chose."""
    w = watched(live_feed.server.url)
    page = w.open("/ui/sessions/live/tasks?size=3&page=2")
    rows(page, "#tasks-table")
    counter = page.locator(".tabulator-page-counter")
    before = int(re.fullmatch(r"Showing 4-6 of (\d+) rows", counter.inner_text()).group(1))
    assert not page.locator("#live").is_hidden()
    live_feed.send(first_half=False)
    deadline = time.monotonic() + WAIT_MS / 1000
    while (after := int(re.fullmatch(r"Showing 4-6 of (\d+) rows", counter.inner_text()).group(1))) == before:
        assert time.monotonic() < deadline, "the table did not update"
        page.wait_for_timeout(200)
    assert after > before and page.url.endswith("/ui/sessions/live/tasks?page=2&size=3")
    w.shot()


RETRIED = "c2668a65bda616c1ffffffffffffffffffffffff01000000"  # crash_once: its retry pending in the first half
COUNTER = "d5debab60e48106f980c782b01000000"  # alive in the first half, killed in the second


def test_a_live_tasks_actors_and_timelines_pages_update_themselves(live_feed: LiveFeed, watched: Any) -> None:
    """A task's page, an actor's, the timeline and the errors, each open in its own tab while the rest of the
    session's events arrive: each shows them without a reload (the retry finished, the actor dead, more bars, more
    failures)."""
    tabs = [watched(live_feed.server.url) for _ in range(4)]
    task = tabs[0].open(f"/ui/sessions/live/tasks/{RETRIED}")
    assert task.locator("#attempt-1 h2 .state").inner_text() == "PENDING_NODE_ASSIGNMENT"
    actor = tabs[1].open(f"/ui/sessions/live/actors/{COUNTER}")
    state = actor.locator("dl.fields dt", has_text=re.compile("^state$")).locator("xpath=following-sibling::dd[1]")
    assert state.inner_text() == "ALIVE"
    timeline = tabs[2].open("/ui/sessions/live/timeline")
    canvas = timeline.locator("canvas.stream")
    bars = int(canvas.get_attribute("data-bars"))
    errors = tabs[3].open("/ui/sessions/live/errors")
    causes = len(rows(errors, "#error-groups"))
    live_feed.send(first_half=False)
    task.locator("#attempt-1 h2 .state", has_text=re.compile("^FINISHED$")).wait_for(timeout=WAIT_MS)
    assert task.url.endswith(RETRIED) and task.locator("article.attempt").count() == 2
    playwright_api.expect(state).to_have_text("DEAD", timeout=WAIT_MS)
    timeline.locator(f"canvas.stream:not([data-bars='{bars}'])").wait_for(timeout=WAIT_MS)
    assert int(canvas.get_attribute("data-bars")) > bars
    deadline = time.monotonic() + WAIT_MS / 1000
    while len(rows(errors, "#error-groups")) == causes:
        assert time.monotonic() < deadline, "the errors page did not update"
        errors.wait_for_timeout(200)
    for tab in tabs:
        tab.shot()


@pytest.mark.ray
def test_a_task_leads_to_its_trace_and_the_trace_back_to_the_task(recorded: ServerProcess, watched: Any) -> None:
    """The demo ran traced (`raysight demo` traces by default): a failed task's page lists its trace; the trace's
    waterfall shows the task's span failed, and its link leads back to the task's attempt."""
    with Client(recorded.url) as client:
        (task,) = client.list("tasks", filters=["func_or_class_name=fails"], session="demo")["rows"]
        (listed,) = client.traces(session="demo", task=task["task_id"])["traces"]
    w = watched(recorded.url)
    page = w.open(f"/ui/sessions/demo/tasks/{task['task_id']}")
    page.locator("#task-traces a.trace-link").click()
    page.wait_for_url(re.compile(rf".*/ui/sessions/demo/traces/{listed['trace_id']}$"))
    w.settle()
    rows = page.locator(".waterfall .span-row")
    assert rows.count() == listed["spans"]
    failed = page.locator(".waterfall .span-row.failed")
    assert failed.count() == 1 and "fails" in failed.locator(".span-name").inner_text()
    assert page.locator(".waterfall .span-row.critical").count() >= 1
    failed.locator("a.to-task").click()
    page.wait_for_url(re.compile(rf".*/ui/sessions/demo/tasks/{task['task_id']}#attempt-0$"))
    w.settle()
    assert page.locator("h1").inner_text() == "Task fails"
    page.goto(f"{recorded.url}/ui/sessions/demo/traces")
    w.settle()
    assert page.locator(f".traces-table a[href$='{listed['trace_id']}']").count() == 1


def follow_the_line_found(w: Any, grep: str, link: str) -> Any:
    """The demo's logs page searching ``grep``, once it found one line, whose link of class ``link`` is clicked."""
    page = w.open(f"/ui/sessions/demo/logs?{urlencode({'grep': grep})}")
    page.locator("#log-status", has_text=re.compile("^1 matching")).wait_for(timeout=WAIT_MS)
    page.locator(f"#log-lines .line a.{link}").click()
    return page


def test_a_log_line_written_in_a_span_links_to_its_trace(recorded: ServerProcess, watched: Any) -> None:
    """A line that says its trace (here a record of an OTLP log exporter's, sent last, into the demo's session)
    links from the logs page to the trace's waterfall."""
    with Client(recorded.url) as client:
        (task,) = client.list("tasks", filters=["func_or_class_name=fails"], session="demo")["rows"]
        (listed,) = client.traces(session="demo", task=task["task_id"])["traces"]
        span = client.trace(listed["trace_id"])["spans"][0]
    export = ExportLogsServiceRequest(
        resource_logs=[
            ResourceLogs(
                resource=Resource(attributes=key_values({"ray.session_name": span["session"]})),
                scope_logs=[ScopeLogs(log_records=[LogRecord(
                    time_unix_nano=time.time_ns(), severity_number=9, body=AnyValue(string_value="paid in its span"),
                    trace_id=bytes.fromhex(span["trace_id"]), span_id=bytes.fromhex(span["span_id"]),
                )])],
            )
        ]
    )  # fmt: skip
    protobuf = {"Content-Type": "application/x-protobuf"}
    reply = httpx.post(f"{recorded.url}/v1/logs", content=export.SerializeToString(), headers=protobuf)
    assert reply.status_code == 200, reply.text
    wait_folded(recorded.url)  # acknowledged once journalled; readable once folded
    w = watched(recorded.url)
    page = follow_the_line_found(w, "paid in its span", "line-trace")
    page.wait_for_url(re.compile(rf".*/ui/sessions/{span['session']}/traces/{listed['trace_id']}$"))
    w.settle()
    assert page.locator(".waterfall .span-row").count() == listed["spans"]


@pytest.mark.ray
def test_a_line_found_by_the_log_search_leads_to_its_task_attempt(recorded: ServerProcess, watched: Any) -> None:
    with recorded.client() as client:
        (line,) = client.logs(session="demo", grep="crash_once: retry")["rows"]
    assert line["attempt"] == 1  # (the retry printed it: attempt 0's worker died)
    w = watched(recorded.url)
    page = follow_the_line_found(w, "crash_once: retry", "line-task")
    page.wait_for_url(re.compile(rf".*/ui/sessions/{line['session']}/tasks/{line['task_id']}#attempt-1$"))
    w.settle()
    assert "crash_once: retry" in page.locator("#attempt-1 pre.log").inner_text()
    assert not page.locator("pre.log a.line-task").count()  # a task's own lines do not link to it again


ROOT = Path(__file__).resolve().parent.parent


def test_a_wheel_built_from_a_fresh_clone_serves_the_dashboard_and_says_what_is_missing_without_its_libraries(
    tmp_path: Path, watched: Any, capfd: pytest.CaptureFixture[str], ray_batches: Any
) -> None:
    """A clone holds no dashboard libraries (npm's, by the lock file): building it as `python -m build` does — an
    sdist through the build backend, then a wheel from the sdist — installs them (the backend runs `npm ci`) and
    both ship them, so a server installed from the wheel draws its pages; removed, every page and the log at start
    say what is missing."""
    clone, dist, venv = tmp_path / "clone", tmp_path / "dist", tmp_path / "venv"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    assert not (clone / "src" / "raysight" / "ui" / "node_modules").exists()
    backend = f"import raysight_build; print(raysight_build.build_sdist({str(dist)!r}))"
    built = subprocess.run(
        [sys.executable, "-c", backend],
        cwd=clone,
        env={**os.environ, "PYTHONPATH": str(clone / "build_support")},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    sdist = dist / built.stdout.split()[-1]
    with tarfile.open(sdist) as tar:  # (the libraries travel in it: a wheel built from it needs no npm)
        assert any("/src/raysight/ui/node_modules/tabulator-tables/" in name for name in tar.getnames())
    pip = [sys.executable, "-m", "pip", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(dist), str(sdist)], check=True, timeout=300)
    (wheel,) = dist.glob("raysight-*.whl")
    # A venv that sees the system's packages, and this one's (raysight's dependencies) after its own
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    own = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    )
    Path(own.stdout.strip(), "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([python, "-m", "pip", "-q", "install", "--no-deps", "--no-index", str(wheel)], check=True)
    where = subprocess.run([python, "-c", "import raysight; print(raysight.__file__)"], capture_output=True, text=True)
    assert where.stdout.startswith(own.stdout.strip()), where
    site = Path(own.stdout.strip())
    with ServerProcess(tmp_path / "data", python=python) as server:
        for batch in ray_batches:  # (a session, for the sessions table to draw)
            assert httpx.post(f"{server.url}/ingest/ray-events", json=batch).status_code == 200
        wait_folded(server.url)
        (row,) = rows(watched(server.url).open("/ui/"), "#sessions")  # the table library loaded and drew
        assert row[0] == ray_batches[0][0]["sessionName"]
        assert httpx.get(f"{server.url}/ui/vendor/d3.js").status_code == 200
    capfd.readouterr()
    shutil.rmtree(site / "raysight" / "ui" / "node_modules")
    with ServerProcess(tmp_path / "data", python=python) as server:
        answer = httpx.get(f"{server.url}/ui/tasks")
        assert answer.status_code == 503 and "<code>tabulator.mjs</code>" in answer.text and "npm ci" in answer.text
    logged = capfd.readouterr().err
    assert "the dashboard's libraries are not installed (tabulator.mjs, tabulator.css, uplot.mjs" in logged


@pytest.mark.ray
def test_traces_are_paged_and_filtered_causes_named_and_long_or_blank_things_kept_out_of_the_way(
    recorded: ServerProcess, watched: Any
) -> None:
    """The Traces list pages and filters by failed only, each failed trace marked; a cause's page is titled by its
    exception and what it hit; a long error is two lines with the whole on hover; Sessions' ending is a badge, its
    rarely needed columns behind a toggle; a task's blank fields and empty sections are not shown."""
    listed = httpx.get(f"{recorded.url}/api/raysight/traces", params={"session": "demo", "limit": 1000}).json()
    failed = [t for t in listed["traces"] if t["errors"]]
    assert listed["total"] > 5 and failed
    w = watched(recorded.url)
    page = w.open("/ui/sessions/demo/traces?size=5")
    first = rows(page, "#traces-table")
    assert len(first) == 5 and f"of {listed['total']} rows" in page.locator(".tabulator-page-counter").inner_text()
    page.get_by_role("button", name="Next").click()
    second = wait_rows(page, "#traces-table", lambda r: r != first)
    assert len(second) == 5 and "page=2" in page.url
    page.goto(f"{recorded.url}/ui/sessions/demo/traces?errors=true")
    shown = wait_rows(page, "#traces-table", lambda r: len(r) == len(failed))
    assert page.locator("#traces-table a.trace-link.failed").count() == len(failed)
    assert {r[column(page, "#traces-table", "Root")] for r in shown} == {t["root"] for t in failed}
    w.shot()
    groups = httpx.get(f"{recorded.url}/api/raysight/errors", params={"session": "demo"}).json()["groups"]
    raised = next(g for g in groups if g["exception_type"])
    page = w.open(f"/ui/sessions/demo/errors/{raised['group_id']}")
    assert page.locator("h1").inner_text() == f"{raised['exception_type']} in {raised['affected'][0]}"
    page = w.open("/ui/sessions/demo/errors")
    longest = max(groups, key=lambda g: len(g["error"]))
    cell = page.locator("#error-groups .clamp", has_text=longest["error"][:30])
    font = float(cell.evaluate("e => parseFloat(getComputedStyle(e.firstChild).fontSize)"))
    assert cell.bounding_box()["height"] < 3 * font < cell.evaluate("e => e.scrollHeight")  # two lines of more
    assert cell.get_attribute("title") == longest["error"]
    page = w.open("/")
    ending = page.locator("#sessions .end-reason").first
    assert ending.inner_text() == "driver exited" and "driver" in ending.get_attribute("title")
    events = page.locator("#sessions .tabulator-col[tabulator-field='events']")
    assert events.is_hidden()
    page.locator("button.more-columns").click()
    assert events.is_visible()
    with Client(recorded.url) as client:
        (task,) = client.list("tasks", filters=["func_or_class_name=fails"], session="demo")["rows"]
    page = w.open(f"/ui/sessions/demo/tasks/{task['task_id']}")
    assert "actor" not in page.locator("dl.fields dt").all_inner_texts()  # a task no actor ran
    assert page.get_by_role("heading", name="Children (tasks it submitted)").is_hidden()  # it submitted none


# Counts each Tabulator loading overlay shown from now on (window.overlays)
COUNT_OVERLAYS = """() => {
  window.overlays = 0;
  new MutationObserver((changes) => {
    for (const change of changes)
      for (const node of change.addedNodes)
        if (node.nodeType === 1 && node.matches(".tabulator-alert, :has(.tabulator-alert)")) window.overlays++;
  }).observe(document.body, { childList: true, subtree: true });
}"""


def test_a_live_table_refreshes_in_place_keeping_its_page_sort_and_filters(live_feed: LiveFeed, watched: Any) -> None:
    """Ray's events arriving while a live tasks table is open on its second page, filtered and sorted: its rows change
    on a refresh with no loading overlay, on the same page, sort and filter; the header says when it was updated, and
    paused, the page asks for nothing."""
    w = watched(live_feed.server.url)
    view = "/ui/sessions/live/tasks?type=NORMAL_TASK&sort=-start_time_ms&page=2&size=2"
    page = w.open(view)
    before = rows(page, "#tasks-table")
    page.evaluate(COUNT_OVERLAYS)
    live_feed.send(first_half=False)
    after = wait_rows(page, "#tasks-table", lambda r: r != before)
    assert page.evaluate("window.overlays") == 0 and page.url.endswith(view)
    assert len(after) == 2 and "Showing 3-4 of" in page.locator(".tabulator-page-counter").inner_text()
    assert {r[column(page, "#tasks-table", "Type")] for r in after} == {"NORMAL_TASK"}
    sorted_by = page.locator("#tasks-table .tabulator-col[tabulator-field='start_time_ms']")
    assert sorted_by.get_attribute("aria-sort") == "descending"
    assert re.fullmatch(r"updated \d+ s ago", page.locator("#updated").inner_text())
    w.shot()
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/raysight/" in r.url else None)
    page.locator("#pause").click()
    assert page.locator("#updated").inner_text() == "paused"
    page.wait_for_timeout(3500)  # longer than a refresh's period
    assert asked == []


@pytest.mark.ray
def test_a_jobs_page_says_where_it_stands(recorded: ServerProcess, watched: Any) -> None:
    """A job's page opens on its status, entrypoint, duration and exit code, and a bar of its task attempts by state
    whose counts are the API's; its fields are folded away without raysight's own hooks; its tasks failed first."""
    (job,) = httpx.get(f"{recorded.url}/api/raysight/jobs", params={"session": "demo"}).json()["rows"]
    query = {"session": "demo", "filter": f"job_id={job['job_id']}", "count_by": "state", "limit": 0}
    counts = httpx.get(f"{recorded.url}/api/raysight/tasks", params=query).json()["counts"]
    running = ("RUNNING", "RUNNING_IN_RAY_GET", "RUNNING_IN_RAY_WAIT")
    groups = {
        "finished": counts.get("FINISHED", 0),
        "failed": counts.get("FAILED", 0),
        "running": sum(counts.get(s, 0) for s in running),
        "pending": sum(n for s, n in counts.items() if s not in ("FINISHED", "FAILED", *running)),
    }
    w = watched(recorded.url)
    page = w.open(f"/ui/sessions/demo/jobs/{job['job_id']}")
    legend = page.locator(".progress-legend li")
    assert {li.get_attribute("data-group"): int(li.get_attribute("data-count")) for li in legend.all()} == groups
    assert groups["failed"] > 0 and page.locator(".progress .bar").count() == sum(1 for n in groups.values() if n)
    head = page.locator(".job-status").inner_text()
    assert job["status"] in head and job["entrypoint"] in head and "Duration" in head and "Exit code 0" in head
    assert page.locator(".job-status a.failed-tasks").inner_text() == f"{groups['failed']} →"
    fields = page.locator("details.all-fields")
    assert fields.get_attribute("open") is None
    page.locator("details.all-fields summary").click()
    shown = fields.inner_text()
    assert "raysight.instrument" not in shown and "RAYSIGHT_" not in shown.replace("RAYSIGHT_*", "")
    assert "raysight's own hooks" in shown and "submission_id" not in shown  # empty fields are left out
    state = column(page, ".related", "State")
    tasks = rows(page, ".related")
    assert [t[state] for t in tasks[: groups["failed"]]] == ["FAILED"] * groups["failed"]


def chart_and_box_widths(page: Any) -> tuple[float, float]:
    """The activity chart's canvas's width and its container's."""
    return page.evaluate(
        """() => [document.querySelector('#activity canvas').getBoundingClientRect().width,
                  document.querySelector('#activity > div').clientWidth]"""
    )


def wait_chart_fits(page: Any) -> None:
    deadline = time.monotonic() + WAIT_MS / 1000
    while (widths := chart_and_box_widths(page))[0] != widths[1]:
        assert time.monotonic() < deadline, f"the chart is {widths[0]} px wide in its {widths[1]} px container"
        page.wait_for_timeout(100)


def test_the_activity_chart_stays_as_wide_as_its_container_across_refreshes_and_resizes(
    live_feed: LiveFeed, watched: Any
) -> None:
    """A live session's overview: the chart, drawn again with the rest of the session's events, keeps the width of its
    container (not a detached element's), runs to now, and follows the window's width; zoomed into by a drag, it
    shows that part in finer bins, until "Whole session"."""
    w = watched(live_feed.server.url)
    page = w.open("/ui/sessions/live")
    plot = page.locator("#activity > div[data-started]")
    started = plot.get_attribute("data-started")
    wait_chart_fits(page)
    live_feed.send(first_half=False)
    page.locator(f"#activity > div:not([data-started='{started}'])").wait_for(timeout=WAIT_MS)
    wait_chart_fits(page)
    assert "to now" in page.locator("#activity .chart-note").inner_text()
    page.set_viewport_size({"width": 1000, "height": 900})
    wait_chart_fits(page)
    assert chart_and_box_widths(page)[0] < 1000
    w.shot()
    # Dragged across, the chart shows that part in bins of its width; "Whole session" shows all of it again
    whole_step = int(plot.get_attribute("data-step-ms") or 0)
    over = page.locator("#activity .u-over").bounding_box()
    assert over is not None
    page.mouse.move(over["x"] + over["width"] * 0.9, over["y"] + over["height"] / 2)
    page.mouse.down()
    page.mouse.move(over["x"] + over["width"] * 0.99, over["y"] + over["height"] / 2, steps=5)
    page.mouse.up()
    page.locator(f"#activity > div[data-started]:not([data-step-ms='{whole_step}'])").wait_for(timeout=WAIT_MS)
    assert int(plot.get_attribute("data-step-ms") or 0) < whole_step
    assert "the part chosen" in page.locator("#activity .chart-note").inner_text()
    page.locator("#activity .chart-whole").click()
    page.locator(f"#activity > div[data-step-ms='{whole_step}']").wait_for(timeout=WAIT_MS)
    assert page.locator("#activity .chart-whole").is_hidden()


@pytest.mark.ray
def test_state_chips_filter_a_task_table_and_land_in_the_url(recorded: ServerProcess, watched: Any) -> None:
    """A task table's chips count each state over its other filters; a chip filters on its state (in the URL) and
    is marked, and clicked again clears the filter."""
    w = watched(recorded.url)
    page = w.open("/ui/sessions/demo/tasks?func_or_class_name=crash_once")
    chips = page.locator(".chips .chip")
    playwright_api.expect(chips).to_have_text(["All 2", "FAILED 1", "FINISHED 1"], timeout=WAIT_MS)
    page.locator(".chips .chip[data-value='FAILED']").click()
    page.wait_for_url(re.compile(r".*\?func_or_class_name=crash_once&state=FAILED$"))
    (failed,) = wait_rows(page, "#tasks-table", lambda r: len(r) == 1)
    assert failed[column(page, "#tasks-table", "State")] == "FAILED"
    playwright_api.expect(chips).to_have_text(["All 2", "FAILED 1", "FINISHED 1"])  # the other states still counted
    assert page.locator(".chips .chip.current").get_attribute("data-value") == "FAILED"
    page.locator(".chips .chip.current").click()
    page.wait_for_url(re.compile(r".*\?func_or_class_name=crash_once$"))
    both = wait_rows(page, "#tasks-table", lambda r: len(r) == 2)
    assert [r[column(page, "#tasks-table", "State")] for r in both] == ["FAILED", "FINISHED"]  # failed first
    w.shot()


def test_a_nodes_resources_and_a_workers_process_are_shown(recorded: ServerProcess, watched: Any) -> None:
    """The demo's node: what it has as chips and its last use as bars (Ray's node stats, scraped), in the nodes table,
    on its page and summed on the overview; its workers' process titles (ray::…) and actors."""
    w = watched(recorded.url)
    page = w.open("/ui/sessions/demo")
    assert "CPU" in page.locator("#resources .bars").inner_text()
    page = w.open("/ui/sessions/demo/nodes")
    (node,) = rows(page, "#nodes-table")
    assert "CPU 2" in node[column(page, "#nodes-table", "Resources")]
    assert " of " in node[column(page, "#nodes-table", "Use now")]
    page.locator("#nodes-table .tabulator-row a.id").first.click()
    page.wait_for_url(re.compile(r".*/nodes/[0-9a-f]{56}$"))
    w.settle()
    box = page.locator(".node-resources")
    assert "CPU 2" in box.locator(".chips").inner_text() and "memory" in box.locator(".chips").inner_text()
    assert re.search(r"CPU\s+[\d.]+ of 2", box.locator(".bars").inner_text())
    workers = rows(page, ".related")
    processes = [r[column(page, ".related", "Process")] for r in workers]
    actors = [r[column(page, ".related", "Actor")] for r in workers]
    assert any(p.startswith("ray::") for p in processes) and any(actors), (processes, actors)


# ── The Serve page (issue 33, point 7), over a session with Serve built without Ray ─────────────────────────────────
NO_SERVE = "session_2000-01-01_00-00-00_000000_1"


@pytest.fixture
def with_serve(tmp_path: Path) -> Iterator[ServerProcess]:
    """A session with Serve, built without Ray: its Serve logs (shop's Cart and Model, quiet's Q; requests req-a to
    req/d, req-b failed) written by Ray's own logger setup and shipped by a real agent; the poller's samples of shop's
    Cart, whose first replica failed its health check (its runtime env holding a secret); a span of req-b's; and a
    session without Serve."""
    names = ("shop", "Cart")
    polls = [
        details("DEPLOYING", "UPDATING", "CONFIG_UPDATE_STARTED", [("cart0001", "STARTING")], names=names),
        details("RUNNING", "HEALTHY", "CONFIG_UPDATE_COMPLETED", [("cart0001", "RUNNING")], names=names),
        details(
            "UNHEALTHY",
            "UNHEALTHY",
            "HEALTH_CHECK_FAILED",
            [("cart0001", "RUNNING"), ("cart0002", "STARTING")],
            "cart0001 failed its health check",
            names=names,
        ),
    ]
    with serve_logs_server(tmp_path) as server, httpx.Client(base_url=server.url) as http:
        now = time.time_ns()
        for i, serve in enumerate(polls):
            send(http.post, now - (len(polls) - i) * 1_000_000_000, serve, session=SERVE_SESSION)
        send(http.post, now, None, session=NO_SERVE)
        send_request_span(server.url, "req-b", now)
        wait_folded(http)
        yield server


def test_the_serve_page_shows_serves_state_history_latency_and_requests(
    with_serve: ServerProcess, watched: Any
) -> None:
    """Applications → deployments → replicas with their status, each replica leading to its logs and actor; each
    change with its trigger; latency and failures charted by route and deployment; the requests filtered by status
    and route, and one found by its ID with its lines in every component and its trace; never an env var's value;
    Serve in the navigation only of a session where it ran."""
    w = watched(with_serve.url)
    answers: list[Any] = []
    w.page.on("response", lambda r: answers.append(r) if "/api/" in r.url else None)
    base = f"/ui/sessions/{SERVE_SESSION}"
    page = w.open(f"{base}/serve")
    assert page.locator("#nav a.active").inner_text() == "Serve"
    # a browser never sees an env var's value: redacted in what it fetched and in the config it shows
    page.locator("details.serve-config summary").click()
    assert '"SECRET": "<redacted>"' in page.locator("details.serve-config pre").inner_text()
    assert "hunter2" not in page.content()
    fetched = [r for r in answers if r.status == 200]  # (read before the page is left: then they are gone)
    assert any("/serve?" in r.url for r in fetched) and not [r.url for r in fetched if "hunter2" in r.text()]
    cart = page.locator("#serve-tree [data-deployment='Cart']")
    head = page.locator("#serve-tree [data-app='shop'] .serve-head").first.inner_text()
    assert "shop" in head and "UNHEALTHY" in head and "/greet" in head
    assert "UNHEALTHY" in cart.inner_text() and "HEALTH_CHECK_FAILED" in cart.inner_text()
    replicas = {r.get_attribute("data-replica"): r.inner_text() for r in cart.locator("tr[data-replica]").all()}
    assert set(replicas) == {"cart0001", "cart0002"} and "RUNNING" in replicas["cart0001"]
    assert "STARTING" in replicas["cart0002"]
    history = rows(page, "#serve-history")
    failed = next(r for r in history if "HEALTH_CHECK_FAILED" in r)
    assert "HEALTHY → UNHEALTHY" in failed and "cart0001 failed its health check" in failed
    # the charts: the first route's, then another's picked in the table
    chart = page.locator("#serve-latency-chart")
    playwright_api.expect(chart).to_have_attribute("data-series", "route /quiet", timeout=WAIT_MS)
    page.get_by_role("button", name="route /slow").click()
    playwright_api.expect(chart).to_have_attribute("data-series", "route /slow")
    assert chart.get_attribute("data-points") == "1" and page.locator("#serve-error-chart canvas").count() == 1
    page.get_by_role("button", name="deployment shop · Model").click()
    playwright_api.expect(page.locator("#serve-error-chart")).to_have_attribute(
        "data-series", "deployment shop · Model"
    )
    assert "1 (33.3 %)" in page.locator("table.serve-latency tr.current").inner_text()
    fits_each_width(w, f"{base}/serve")
    # the replica's links: its logs (the logs page filtered by it) and its actor
    actor = cart.locator("tr[data-replica='cart0001'] a.replica-actor")
    assert actor.get_attribute("href") == f"{base}/actors/{'a1' * 16}"
    cart.locator("tr[data-replica='cart0001'] a.replica-logs").click()
    page.wait_for_url(f"**{base}/logs?replica=cart0001")
    page.get_by_text("added 3 items to the cart").wait_for(timeout=WAIT_MS)
    assert page.locator("#log-search input[name=replica]").input_value() == "cart0001"
    assert page.locator("#nav").get_by_role("link", name="Serve").count() == 1
    # the requests: filtered by status and route (in the URL), and one found by its ID
    page = w.open(f"{base}/serve?status=5xx")
    request = column(page, "#serve-requests", "Request")
    assert [r[request] for r in wait_rows(page, "#serve-requests", lambda r: len(r) == 1)] == ["req-b"]
    page = w.open(f"{base}/serve")
    wait_rows(page, "#serve-requests", lambda r: len(r) == 4)
    page.locator("#serve-requests .tabulator-col[tabulator-field='route'] input").fill("/slow")
    page.keyboard.press("Enter")
    (slow,) = wait_rows(page, "#serve-requests", lambda r: len(r) == 1)
    assert slow[request] == "req/d" and slow[column(page, "#serve-requests", "Latency")] == "813 ms"
    assert "route=%2Fslow" in page.url
    page.locator("#serve-requests a.request-link").click()  # its ID holds a /: one part of the page's path still
    page.wait_for_url(f"**{base}/serve/requests/req%2Fd")
    playwright_api.expect(page.locator(".request-head")).to_contain_text("GET /slow · 813 ms", timeout=WAIT_MS)
    assert page.locator("a.request-traces").get_attribute("href") == f"{base}/traces?requests=req%2Fd"
    page = w.open(f"{base}/serve")
    page.locator("#request-find input").fill("req-b")
    page.get_by_role("button", name="Find").click()
    page.wait_for_url(f"**{base}/serve/requests/req-b")
    w.settle()
    assert "503" in page.locator(".request-head").inner_text()
    where = rows(page, "#request-where")
    assert sorted(r[0] for r in where) == ["proxy", "replica", "replica"]
    assert page.locator("#request-where a.replica-logs").count() == 2  # each replica it crossed, to its logs
    assert page.locator("#request-where a.replica-actor").get_attribute("href") == f"{base}/actors/{'a1' * 16}"
    assert "emptied the cart" in page.locator("#request-lines pre.log").inner_text()
    page.locator("a.request-traces").click()
    page.wait_for_url(f"**{base}/traces?requests=req-b")
    (trace,) = wait_rows(page, "#traces-table", lambda r: len(r) == 1)
    assert trace[0] == "proxy_http_request" and "req-b" in trace
    # a session without Serve: no Serve in its navigation, and its Serve page says so
    page = w.open(f"/ui/sessions/{NO_SERVE}/logs")
    assert page.locator("#nav").get_by_role("link", name="Serve").count() == 0
    page = w.open(f"/ui/sessions/{NO_SERVE}/serve")
    assert page.locator("#no-serve").inner_text().startswith("No Serve in this session")


def test_a_paused_task_is_marked_and_leads_to_its_pause_its_stack_and_the_commands_that_attach(
    tmp_path: Path, ray_batches: list[list[dict[str, Any]]], watched: Any
) -> None:
    """A task paused in a debugger (a worker's pause reported as ``instrument/debugger.py`` reports it, on a server
    that allows debugging): marked in the tasks table, its page says so with the commands that attach, and its
    pause's page shows the stack and locals reported; the session's pauses have a section of their own."""
    from websockets.sync.client import connect

    server = ServerProcess(tmp_path / "data", options=["--allow-debug"]).start()
    try:
        with httpx.Client(base_url=server.url) as http:
            for batch in ray_batches:
                http.post("/ingest/ray-events?cluster=live", json=batch).raise_for_status()
        wait_folded(server.url)
        with Client(server.url) as client:
            [session] = [s["session"] for s in client.sessions() if s["label"] == "live"]
        paused = f"ws://127.0.0.1:{server.port}{wire.DEBUG_PAUSED}"
        with connect(paused, proxy=None) as worker:
            worker.send(pause_report(session=session, task_id=RETRIED).decode())
            pause_id = orjson.loads(worker.recv(timeout=10))[wire.PAUSE_ID]
            w = watched(server.url)
            page = w.open("/ui/sessions/live/tasks?func_or_class_name=crash_once")  # (its attempts)
            [marked] = [r for r in rows(page, "#tasks-table") if "paused" in r[column(page, "#tasks-table", "State")]]
            assert marked[column(page, "#tasks-table", "Attempt")] == "0"  # the paused attempt alone
            page.locator("#tasks-table a.paused").click()
            page.wait_for_url(f"**/ui/sessions/live/pauses/{pause_id}")
            page.locator("details.frame").first.wait_for(timeout=WAIT_MS)
            assert page.locator("h1").inner_text() == "Breakpoint in doubled"
            assert page.locator("table.locals").first.inner_text().split() == ["x", "21", "twice", "42"]
            commands = page.locator(".attach-commands pre.command").all_inner_texts()
            assert commands == [
                f"raysight debug attach {pause_id}",
                f"raysight debug attach {pause_id} --dap --port 5678",
            ]
            w.shot()
            task = w.open(f"/ui/sessions/live/tasks/{RETRIED}")
            assert "Paused at /app/job.py:13 (doubled)" in task.locator("p.paused-now").inner_text()
            assert task.locator("#task-pauses pre.command").first.inner_text() == f"raysight debug attach {pause_id}"
            w.shot()
            listing = w.open("/ui/sessions/live/pauses")
            assert listing.locator("nav a", has_text="Pauses").count() == 1
            assert pause_id in rows(listing, "#live-pauses")[0][0]
            worker.send(orjson.dumps({wire.ENDED: "continued"}).decode())
        deadline = time.monotonic() + WAIT_MS / 1000
        while "continued" not in (ended := rows(w.open("/ui/sessions/live/pauses"), "#all-pauses"))[0]:
            assert time.monotonic() < deadline, f"the pause's end was not shown: {ended}"
        w.shot()
    finally:
        server.stop()
