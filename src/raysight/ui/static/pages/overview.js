// A session at a glance: its nodes, jobs, actors and tasks by state, its failures by cause, and its activity over
// time (task attempts started, finished and failed per interval).

import uPlot from "/ui/vendor/uplot.mjs";
import { api } from "../api.js";
import { duration, empty, h, section, sessionPath, stateBadge, time, usageBars } from "../dom.js";

function counts(title, byState, href) {
  const entries = Object.entries(byState).sort((a, b) => b[1] - a[1]);
  return h(
    "div",
    { class: "card" },
    h("h3", {}, h("a", { href }, title)),
    entries.length ? h("ul", { class: "counts" }, entries.map(([state, n]) => h("li", {}, stateBadge(state), " ", String(n)))) : empty("none"),
  );
}

function tally(rows, key = "state") {
  const out = {};
  for (const row of rows) out[row[key]] = (out[row[key]] ?? 0) + 1;
  return out;
}

const CHART_HEIGHT = 220;

/** The activity chart in `box`: `fetch()` asks the API for the span shown (the whole session, or the part the user
 * zoomed into by dragging across it: bins of that span's width), `draw(data)` draws it in place (its data set, its x
 * axis from the span's start to now or its end); its width follows its container's. */
function activityChart(box, session) {
  const plotBox = h("div");
  const note = h("p", { class: "chart-note" });
  let zoom = null; // [start ms, end ms] the user dragged across, else the whole session
  const fetch = () => api("/api/raysight/activity", zoom ? { session, start: zoom[0], end: zoom[1] } : { session });
  const whole = h("button", { type: "button", class: "chart-whole", hidden: true, onclick: () => zoomTo(null) }, "Whole session");
  box.append(plotBox, h("div", { class: "chart-foot" }, note, whole));
  let plot = null;
  let span = [0, 1];
  new ResizeObserver(() => plot?.setSize({ width: plotBox.clientWidth, height: CHART_HEIGHT })).observe(plotBox);
  const draw = (data) => {
    if (data.start_ms === null) {
      plot?.destroy();
      plot = null;
      plotBox.replaceChildren(empty("No task has started yet."));
      return;
    }
    const perSecond = (counts) => counts.map((n) => n / (data.step_ms / 1000));
    const xs = data.started.map((_, i) => (data.start_ms + i * data.step_ms) / 1000);
    const series = [xs, perSecond(data.started), perSecond(data.finished), perSecond(data.failed)];
    span = [data.start_ms / 1000, data.end_ms / 1000];
    plotBox.dataset.started = data.started.reduce((a, b) => a + b, 0); // (what a test waits on)
    plotBox.dataset.stepMs = data.step_ms;
    const to = zoom ? "the end of the part chosen" : data.live ? "now" : "the session's end";
    note.textContent = `Task attempts per second, in bins of ${duration(data.step_ms)}, to ${to}${zoom ? "" : " (drag across the chart to zoom in)"}.`;
    if (plot) return plot.setData(series);
    plotBox.replaceChildren();
    plot = new uPlot(
      {
        width: plotBox.clientWidth || 800,
        height: CHART_HEIGHT,
        scales: { x: { time: true, range: () => span } },
        cursor: { drag: { x: true, y: false, setScale: false } },
        hooks: { setSelect: [(u) => u.select.width > 2 && zoomTo([u.posToVal(u.select.left, "x"), u.posToVal(u.select.left + u.select.width, "x")], u)] },
        series: [
          {},
          { label: "started", stroke: "#3b82f6", width: 1.5 },
          { label: "finished", stroke: "#16a34a", width: 1.5 },
          { label: "failed", stroke: "#dc2626", width: 1.5 },
        ],
        axes: [{}, { label: "tasks per second" }],
      },
      series,
      plotBox,
    );
  };
  async function zoomTo(seconds, u) {
    u?.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
    zoom = seconds && [Math.floor(seconds[0] * 1000), Math.ceil(seconds[1] * 1000)];
    whole.hidden = !zoom;
    draw(await fetch());
  }
  return { fetch, draw };
}

function load(session, chart) {
  return Promise.all([
    api("/api/raysight/sessions").then((r) => r.sessions.find((s) => s.session === session || s.label === session)),
    api("/api/raysight/summary/tasks", { session }),
    api("/api/raysight/actors", { session, limit: 10000 }),
    api("/api/raysight/nodes", { session, limit: 10000 }),
    api("/api/raysight/jobs", { session, limit: 10000 }),
    api("/api/raysight/errors", { session }),
    chart.fetch(),
    api("/api/raysight/usage", { session }),
  ]);
}

export async function render(page, { session }) {
  const head = h("div");
  const resources = h("div", { id: "resources" });
  const chart = h("div", { class: "chart", id: "activity" });
  const rest = h("div");
  const activityOf = activityChart(chart, session);
  const show = ([info, summary, actors, nodes, jobs, failures, activity, usage]) => {
    if (!info) throw new Error(`no session named ${session}; see the sessions page for those recorded`);
    head.replaceChildren(...overviewHead(session, info, summary, actors, nodes, jobs));
    resources.replaceChildren(
      usage.nodes.length ? usageBars(usage.usage) : empty("No node stats scraped (raysight scrapes Ray's metrics where its agent runs)."),
    );
    rest.replaceChildren(...overviewRest(session, summary, failures));
    activityOf.draw(activity);
  };
  show(await load(session, activityOf));
  page.append(head, section("Resources now", resources), section("Activity", chart), rest);
  return { refresh: async () => show(await load(session, activityOf)) };
}

function overviewHead(session, info, summary, actors, nodes, jobs) {
  const taskStates = {};
  for (const fn of summary.summary) for (const [state, n] of Object.entries(fn.state_counts)) taskStates[state] = (taskStates[state] ?? 0) + n;
  return [
    h("h1", {}, info.label ? `${info.label} · ` : "", info.session),
    h(
      "p",
      { class: "span" },
      `${time(info.start_time_ms)} → `,
      info.end_time_ms === null ? h("span", { class: "live" }, "live") : `${time(info.end_time_ms)} (${info.end_reason ?? "ended"})`,
    ),
    h(
      "div",
      { class: "cards" },
      counts("Nodes", tally(nodes.rows), sessionPath(session, "nodes")),
      counts("Jobs", tally(jobs.rows, "status"), sessionPath(session, "jobs")),
      counts("Actors", tally(actors.rows), sessionPath(session, "actors")),
      counts("Tasks", taskStates, sessionPath(session, "tasks")),
    ),
  ];
}

function overviewRest(session, summary, failures) {
  const groups = failures.groups;
  return [
    section(
      "Failures by cause",
      groups.length
        ? h(
            "ul",
            { class: "groups" },
            groups.slice(0, 10).map((g) =>
              h(
                "li",
                {},
                h("a", { href: sessionPath(session, "errors", g.group_id) }, `${g.count} × ${g.kind} ${g.error_type}`),
                " ",
                h("code", {}, g.error),
              ),
            ),
          )
        : empty("No failures."),
      groups.length > 10 ? h("a", { href: sessionPath(session, "errors") }, `all ${groups.length} causes`) : "",
    ),
    section(
      "Tasks by function",
      h(
        "table",
        { class: "plain" },
        h("tr", {}, ["Function", "Type", "Attempts", "States", "p50", "p95", "max"].map((t) => h("th", {}, t))),
        summary.summary.map((fn) =>
          h(
            "tr",
            {},
            h("td", {}, h("a", { href: `${sessionPath(session, "tasks")}?func_or_class_name=${encodeURIComponent(fn.func_or_class_name)}` }, fn.func_or_class_name)),
            h("td", {}, fn.type),
            h("td", {}, String(fn.attempts)),
            h("td", {}, Object.entries(fn.state_counts).map(([s, n]) => h("span", { class: "pair" }, stateBadge(s), ` ${n} `))),
            [fn.p50_ms, fn.p95_ms, fn.max_ms].map((ms) => h("td", {}, duration(ms))),
          ),
        ),
      ),
    ),
  ];
}
