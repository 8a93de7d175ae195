"""The dashboard in a real headless Chromium (Debian's, driven by Playwright), timed as a user waits for it.

1. Tasks page, 1M tasks beside 10k: from the address typed to the first rows shown, then from Enter in the Function
   filter (`flaky`: 1 task in 10) to the filtered rows and their count shown. The sessions are list_latency's
   synthesised ones (built once into benchmarks/.cache/), each served by its own `raysight server`.
2. Timeline, 100k task attempts: the 100k synthesised session with its attempts spread over 32 workers' lanes
   (2 ms each, back to back), from the address to the first frame drawn; then, while the wheel zooms in and out and
   the mouse drags, the time between frames (requestAnimationFrame) and each frame's own draw time.
3. Ray's own dashboard, same run: a local Ray cluster runs 10k tasks (9 in 10 `ok`, 1 in 10 raise) exporting its
   events to a raysight server; Ray's job page (its task table, which lists up to 10k tasks) from the address to
   its first task rows, beside raysight's tasks page of the same job.
Each figure is the median of --repeat fresh page loads (a new browser context each: nothing cached but the
browser's own start). Run: .venv/bin/python benchmarks/dashboard.py [--tasks N] [--small N] [--timeline N]
[--ray-tasks N] [--repeat N] [--skip-ray] [--skip-synth]      (2-core VM, noisy: compare medians)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import httpx
import orjson
import ray
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.list_latency import (  # noqa: E402 (after the sys.path line)
    OWN_TASKS,
    RAY_TASKS,
    run_tasks,
    session_copy,
    url_with,
    wait_for,
)
from raysight.cli.run import free_port, ray_env, wait_until_quiet  # noqa: E402
from raysight.client import Client  # noqa: E402
from raysight.store.store import DB_FILE  # noqa: E402
from tests.ray_scenarios import ServerProcess  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
LABEL = "bench1m"  # list_latency's synthesised sessions carry this label
LANES = 32
WAIT_MS = 60_000
Timings = dict[str, list[float]]


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:7.1f} ms (min {min(values) * 1000:6.1f}, n={len(values)})"


@contextmanager
def serving(data_dir: Path) -> Iterator[str]:
    """A `raysight server` on ``data_dir`` (its URL), the data dir removed once it has stopped."""
    try:
        server = ServerProcess(data_dir, start_timeout_s=180).start()
        try:
            yield server.url
        finally:
            server.stop()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


class Browser:
    """Debian's Chromium, a fresh context per page load."""

    def __init__(self, playwright: Any) -> None:
        self.chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])

    @contextmanager
    def page(self, script: str, strict: bool = True) -> Iterator[Any]:
        """A page that runs ``script`` first (a benchmark's own, hence the CSP bypassed); ``strict``: its errors end the
        run (not for Ray's dashboard, whose own page logs some: no Grafana or Prometheus here)."""
        context = self.chromium.new_context(viewport={"width": 1400, "height": 900}, bypass_csp=True)
        context.add_init_script(script)
        page = context.new_page()
        problems: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("requestfailed", lambda r: problems.append(f"{r.url}: {r.failure}"))
        try:
            yield page
        finally:
            context.close()
        if problems and strict:
            raise SystemExit(f"the page had errors: {problems[:5]}")


def marks_script(checks: dict[str, str]) -> str:
    """A script run in each page before its own: ``window.marks[name]`` is set to the page's clock (ms from the start
    of its navigation) at the first DOM change after which the JS condition ``checks[name]`` holds; ``enter`` and
    ``click`` are the first Enter key and click. What the user sees, timed by the page, not by this process's
    polling of it."""
    tests = ", ".join(f"{orjson.dumps(name).decode()}: () => ({code})" for name, code in checks.items())
    return f"""window.marks = {{}};
const checks = {{{tests}}};
new MutationObserver(() => {{
  for (const [name, holds] of Object.entries(checks)) if (!(name in marks) && holds()) marks[name] = performance.now();
}}).observe(document, {{ subtree: true, childList: true, attributes: true, characterData: true }});
addEventListener("keydown", (e) => {{ if (e.key === "Enter") marks.enter ??= performance.now(); }}, true);
addEventListener("click", () => {{ marks.click ??= performance.now(); }}, true);"""


def marks(page: Any, *names: str) -> dict[str, float]:
    """The marks (seconds), once each of ``names`` is set."""
    page.wait_for_function(f"() => {orjson.dumps(names).decode()}.every((n) => n in window.marks)", timeout=WAIT_MS)
    return {name: value / 1000 for name, value in page.evaluate("() => window.marks").items()}


TABLE_ROWS = "document.querySelector('.tabulator-row') !== null"


def filtered_script(expected_total: int) -> str:
    """The tasks table shows the Function filter's answer: its count, and only `flaky` rows."""
    return marks_script(
        {
            "rows": TABLE_ROWS,
            "filtered": f"""document.querySelector("#tasks-table[data-total='{expected_total}']") !== null &&
                [...document.querySelectorAll("#tasks-table .tabulator-cell[tabulator-field='func_or_class_name']")]
                    .every((c) => c.textContent === 'flaky') &&
                document.querySelector('#tasks-table .tabulator-row') !== null""",
        }
    )


def tasks_page(browser: Browser, url: str, session: str, flaky: int, repeat: int) -> Timings:
    """The tasks page's first rows, then its Function filter (`flaky`, ``flaky`` tasks) answered."""
    out: Timings = {"first rows": [], "filter answered": []}
    for _ in range(repeat):
        with browser.page(filtered_script(flaky)) as page:
            page.goto(f"{url}/ui/sessions/{session}/tasks")
            out["first rows"].append(marks(page, "rows")["rows"])
            page.locator(".tabulator-col[tabulator-field='func_or_class_name'] input").fill("flaky")
            page.keyboard.press("Enter")
            seen = marks(page, "enter", "filtered")
            out["filter answered"].append(seen["filtered"] - seen["enter"])
    return out


def spread_over_lanes(data_dir: Path) -> None:
    """Give the session's attempts to LANES workers, each running its share back to back, 2 ms an attempt."""
    with duckdb.connect(str(data_dir / DB_FILE)) as con:
        con.execute(
            f"""UPDATE tasks SET worker_id = printf('%056x', r.i % {LANES}), worker_pid = 1000 + r.i % {LANES},
                    start_ns = r.base + (r.i // {LANES}) * 2000000, exec_start_ns = NULL,
                    end_ns = r.base + (r.i // {LANES}) * 2000000 + 1500000 + (r.i % 7) * 60000
                FROM (SELECT task_id AS id, attempt AS a, row_number() OVER (ORDER BY task_id) - 1 AS i,
                             min(first_ns) OVER () AS base
                      FROM tasks) r
                WHERE task_id = r.id AND attempt = r.a"""
        )
        con.execute("CHECKPOINT")


def frame_recorder(page: Any) -> None:
    page.evaluate(
        """() => { window.frameTimes = []; const loop = (t) => { frameTimes.push(t); requestAnimationFrame(loop); };
                   requestAnimationFrame(loop); }"""
    )


FIRST_FRAME = "document.querySelector('canvas.stream[data-frames]') !== null"


def timeline(browser: Browser, url: str, session: str, repeat: int) -> Timings:
    """The timeline's first frame, then frame intervals and draw times through zooming and panning."""
    out: Timings = {"first frame": [], "frame interval": [], "draw": []}
    for _ in range(repeat):
        with browser.page(marks_script({"frame": FIRST_FRAME})) as page:
            canvas = page.locator("canvas.stream")

            page.goto(f"{url}/ui/sessions/{session}/timeline")
            out["first frame"].append(marks(page, "frame")["frame"])
            bars = int(canvas.get_attribute("data-bars"))
            box = canvas.bounding_box()
            x, y = box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2
            page.mouse.move(x, y)
            frame_recorder(page)
            for step in [-240] * 12 + [240] * 6:  # zoom in, then halfway out, about the pointer
                page.mouse.wheel(0, step)
                page.wait_for_timeout(30)
                out["draw"].append(float(canvas.get_attribute("data-draw-ms")) / 1000)
            page.mouse.down()
            for dx in range(0, 600, 20):  # drag: pan to earlier times
                page.mouse.move(x + dx, y)
                out["draw"].append(float(canvas.get_attribute("data-draw-ms")) / 1000)
            page.mouse.up()
            times = page.evaluate("() => frameTimes")
            out["frame interval"] += [(b - a) / 1000 for a, b in zip(times, times[1:])]
    print(f"  {bars:,} attempts in {LANES} lanes")
    return out


def show(title: str, timings: Timings) -> None:
    print(f"  {title}")
    for name, values in timings.items():
        extra = ""
        if name == "frame interval":
            p95 = sorted(values)[int(len(values) * 0.95)]
            extra = f", p95 {p95 * 1000:.1f} ms, max {max(values) * 1000:.1f} ms"
        print(f"    {name:<18} {ms(values)}{extra}")


def ray_job_page(browser: Browser, dashboard: str, job: str, repeat: int) -> Timings:
    """Ray's job page: to the first rows of its task table, which opens on a click (then it asks for the job's tasks,
    up to 10,000); and from that click alone."""
    out: Timings = {"first task rows": [], "click to task rows": []}
    script = marks_script({"rows": "document.querySelector('table.MuiTable-root tbody tr') !== null"})
    for _ in range(repeat):
        with browser.page(script, strict=False) as page:
            page.goto(f"{dashboard}/#/jobs/{job}")
            page.get_by_text("Task Table", exact=True).click()
            seen = marks(page, "click", "rows")
            out["first task rows"].append(seen["rows"])
            out["click to task rows"].append(seen["rows"] - seen["click"])
    return out


def own_job_page(browser: Browser, url: str, session: str, job: str, repeat: int) -> Timings:
    """raysight's job page: to the first rows of its tasks table."""
    out: Timings = {"first task rows": []}
    for _ in range(repeat):
        with browser.page(marks_script({"rows": TABLE_ROWS})) as page:
            page.goto(f"{url}/ui/sessions/{session}/jobs/{job}")
            out["first task rows"].append(marks(page, "rows")["rows"])
    return out


def against_ray(browser: Browser, n_tasks: int, repeat: int) -> None:
    print(f"== Ray's dashboard beside raysight's, {n_tasks:,} tasks of one job on a local Ray ==")
    with serving(Path(tempfile.mkdtemp(prefix="raysight-dashboard-bench-"))) as url:
        os.environ.update({**ray_env(url, cluster="bench-ray"), "RAY_AUTH_MODE": "disabled"})
        context = ray.init(num_cpus=2, include_dashboard=True, dashboard_port=free_port(), log_to_driver=False)
        try:
            dashboard = f"http://{context.dashboard_url}"
            job = ray.get_runtime_context().get_job_id()
            run_tasks(n_tasks)
            with httpx.Client(timeout=60) as http:
                ray_total = url_with(dashboard, RAY_TASKS, [("limit", "1"), ("exclude_driver", "True")])
                wait_for("Ray: every task", lambda: http.get(ray_total).json()["data"]["result"]["total"] >= n_tasks)
                own = url_with(url, OWN_TASKS, [("session", "bench-ray"), ("limit", "0")])
                wait_for("raysight: every task", lambda: http.get(own).json()["total"] >= n_tasks)
            with Client(url) as client:
                wait_until_quiet(client)
            theirs = ray_job_page(browser, dashboard, job, repeat)
            ours = own_job_page(browser, url, "bench-ray", job, repeat)
            tasks = tasks_page(browser, url, "bench-ray", n_tasks // 10, repeat)
        finally:
            ray.shutdown()
    show("Ray's job page, its task table", theirs)
    show("raysight's job page, its tasks table", ours)
    show("raysight's tasks page", tasks)
    ratio = statistics.median(theirs["first task rows"]) / statistics.median(ours["first task rows"])
    print(f"  a job's first task rows: Ray's dashboard takes {ratio:.1f}x raysight's")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--timeline", type=int, default=100_000)
    parser.add_argument("--ray-tasks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--skip-synth", action="store_true", help="only Ray's dashboard beside raysight's")
    args = parser.parse_args()
    with sync_playwright() as playwright:
        browser = Browser(playwright)
        results = {}
        for n in () if args.skip_synth else (args.small, args.tasks):
            print(f"== tasks page, {n:,} tasks ==")
            with serving(session_copy(n, "raysight-dashboard-bench-")) as url:
                results[n] = tasks_page(browser, url, LABEL, n // 10, args.repeat)
            show(f"{n:,} tasks", results[n])
        for name in () if args.skip_synth else ("first rows", "filter answered"):
            big, small = statistics.median(results[args.tasks][name]), statistics.median(results[args.small][name])
            verdict = "under 1 s" if big < 1 else "OVER the 1 s aim"
            print(f"  {name}: {args.tasks:,} tasks {big * 1000:.0f} ms ({verdict}), {big / small:.2f}x {args.small:,}")
        if not args.skip_synth:
            print(f"== timeline, {args.timeline:,} attempts ==")
            data_dir = session_copy(args.timeline, "raysight-dashboard-bench-")
            spread_over_lanes(data_dir)
            with serving(data_dir) as url:
                show("timeline", timeline(browser, url, LABEL, args.repeat))
        if not args.skip_ray:
            against_ray(browser, args.ray_tasks, args.repeat)
        browser.chromium.close()


if __name__ == "__main__":
    main()
