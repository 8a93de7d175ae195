// Ray Serve in a session: its applications → deployments → replicas as the poller last saw them (each replica leading
// to its logs and its actor), their changes over time, each route's and deployment's latency and failures over the
// session, and its requests (filtered; one by its ID with its lines in every component and its traces). What the
// API gives a browser has the values of runtime envs' variables redacted, as Ray's dashboard does.

import uPlot from "/ui/vendor/uplot.mjs";
import { api } from "../api.js";
import { clamped, duration, empty, h, idLink, logLines, section, sessionPath, stateBadge, time } from "../dom.js";
import { column, filterBy, localTable, readParams, resourceTable } from "../table.js";

const CHART_HEIGHT = 180;
const STATUSES = ["2xx", "3xx", "4xx", "5xx", "OK", "ERROR", "CANCELLED"];
// The request table's header filters, as the API's parameters
const readRequests = readParams(
  "/api/raysight/serve/requests",
  { application: "app", deployment: "deployment", route: "route", status: "status", latency_ms: "min_latency" },
  "requests",
);

/** Show the page of `path` as following a link to it does. */
function go(path) {
  history.pushState({}, "", path);
  dispatchEvent(new PopStateEvent("popstate"));
}

const logsOf = (session, replica) => `${sessionPath(session, "logs")}?replica=${encodeURIComponent(replica)}`;
const tracesOf = (session, request) => `${sessionPath(session, "traces")}?requests=${encodeURIComponent(request)}`;
const requestPath = (session, id) => sessionPath(session, "serve", "requests", id);

/** A replica's links: its logs, and its actor where the poller named it. */
function replicaLinks(session, replicaId, actorId) {
  return h(
    "span",
    { class: "replica-links" },
    h("a", { href: logsOf(session, replicaId), class: "replica-logs" }, "logs"),
    actorId ? [" · ", h("a", { href: sessionPath(session, "actors", actorId), class: "replica-actor", title: actorId }, "actor")] : "",
  );
}

/** Applications → deployments → replicas, each with its status (its trigger and message), as polled. */
function tree(session, details, open) {
  const apps = Object.entries(details.applications ?? {});
  const proxies = Object.entries(details.proxies ?? {});
  return [
    proxies.length
      ? h("p", { class: "serve-proxies" }, "Proxies: ", proxies.map(([node, p]) => h("span", { class: "pair" }, idLink(session, "nodes", node), " ", stateBadge(p.status), " ")))
      : "",
    apps.length
      ? h("ul", { class: "serve-tree" }, apps.map(([name, app]) => application(session, name, app, open.has(name))))
      : empty("No application is deployed."),
  ];
}

/** An application's or deployment's line (its kind, name, status and `more`), and its message under it. */
function head(kind, name, { status, message }, ...more) {
  return [
    h("div", { class: "serve-head" }, h("span", { class: "kind" }, kind), h("strong", {}, name), stateBadge(status), ...more),
    message ? clamped(message) : "",
  ];
}

function application(session, name, app, open) {
  const deployments = Object.entries(app.deployments ?? {});
  return h(
    "li",
    { class: "serve-app", "data-app": name },
    head(
      "application",
      name,
      app,
      app.route_prefix ? h("code", {}, app.route_prefix) : "",
      app.last_deployed_time_s ? h("span", { class: "hint" }, `deployed ${time(app.last_deployed_time_s * 1000)}`) : "",
    ),
    app.deployed_app_config
      ? h("details", { class: "serve-config", open }, h("summary", {}, "Config as deployed"), h("pre", {}, JSON.stringify(app.deployed_app_config, null, 2)))
      : "",
    h("ul", {}, deployments.map(([deploymentName, d]) => deployment(session, deploymentName, d))),
  );
}

function deployment(session, name, d) {
  const replicas = d.replicas ?? [];
  const wanted = d.target_num_replicas === undefined ? "" : ` of ${d.target_num_replicas} wanted`;
  return h(
    "li",
    { class: "serve-deployment", "data-deployment": name },
    head(
      "deployment",
      name,
      d,
      d.status_trigger ? h("span", { class: "trigger" }, d.status_trigger) : "",
      h("span", { class: "hint" }, `${replicas.length} replica${replicas.length === 1 ? "" : "s"}${wanted}`),
    ),
    replicas.length
      ? h(
          "table",
          { class: "plain serve-replicas" },
          h("tr", {}, ["Replica", "State", "PID", "Node", "Started", ""].map((t) => h("th", {}, t))),
          replicas.map((r) =>
            h(
              "tr",
              { "data-replica": r.replica_id },
              h("td", {}, h("code", {}, r.replica_id)),
              h("td", {}, stateBadge(r.state)),
              h("td", {}, r.pid ?? ""),
              h("td", {}, idLink(session, "nodes", r.node_id)),
              h("td", {}, r.start_time_s ? time(r.start_time_s * 1000) : ""),
              h("td", {}, replicaLinks(session, r.replica_id, r.actor_id)),
            ),
          ),
        )
      : "",
  );
}

const HISTORY_COLUMNS = [
  column("Time", "ts_ms", (t) => time(t.ts_ms)),
  column("Kind", "kind"),
  column("Application", "application"),
  column("Deployment", "deployment"),
  column("Replica", "replica"),
  column("Change", "to", (t) => h("span", { class: "change" }, t.from ?? "(new)", " → ", t.to ?? "(gone)"), { sort: false }),
  column("Trigger", "trigger"),
  column("Message", "message", null, { text: true }),
];

/** A chart of `lines` ([label, colour]) over time in `box`; `draw(xs, ys, span)` draws it in place (its x axis the
 * span given, seconds); its width follows its container's. */
function lineChart(box, lines, axis) {
  let plot = null;
  let span = [0, 1];
  new ResizeObserver(() => plot?.setSize({ width: box.clientWidth, height: CHART_HEIGHT })).observe(box);
  return (xs, ys, shown) => {
    span = shown;
    if (plot) return plot.setData([xs, ...ys]);
    plot = new uPlot(
      {
        width: box.clientWidth || 800,
        height: CHART_HEIGHT,
        scales: { x: { time: true, range: () => span } },
        series: [{}, ...lines.map(([label, stroke]) => ({ label, stroke, width: 1.5, points: { show: true, size: 4 } }))],
        axes: [{}, { label: axis }],
      },
      [xs, ...ys],
      box,
    );
  };
}

const label = (by, s) => (by === "route" ? `route ${s.route ?? "(none)"}` : `deployment ${s.application ?? "?"} · ${s.deployment}`);
const percent = (errors, requests) => (requests ? (100 * errors) / requests : null);

/** Each route's and deployment's totals, one of them (picked in the table) charted over the session: its latency
 * p50/p95/p99 and the share of its requests that failed, in each bin. `draw([routes, deployments])` redraws in place. */
function latencyView(box, session) {
  const table = h("table", { class: "plain serve-latency" });
  const title = h("h3", { class: "chart-title" });
  const latencyBox = h("div", { class: "chart", id: "serve-latency-chart" });
  const errorBox = h("div", { class: "chart", id: "serve-error-chart" });
  const note = h("p", { class: "chart-note" });
  box.append(table, title, latencyBox, errorBox, note);
  const latency = lineChart(latencyBox, [["p50", "#16a34a"], ["p95", "#d97706"], ["p99", "#dc2626"]], "latency (ms)");
  const errors = lineChart(errorBox, [["failed", "#dc2626"]], "failed (% of requests)");
  let picked = null; // the label of the series charted
  let last = null;
  const draw = (answers) => {
    last = answers;
    const all = answers.flatMap((a) => a.series.map((s) => ({ by: a.by, s, label: label(a.by, s), bins: a })));
    if (!all.some((one) => one.label === picked)) picked = all[0]?.label ?? null;
    table.replaceChildren(
      h("tr", {}, ["", "Requests", "Failed", "p50", "p95", "p99"].map((t) => h("th", {}, t))),
      ...all.map(({ s, label: name }) =>
        h(
          "tr",
          { class: name === picked ? "current" : "" },
          h("td", {}, h("button", { type: "button", class: "series-pick", "aria-pressed": String(name === picked), onclick: () => ((picked = name), draw(last)) }, name)),
          h("td", {}, String(s.requests)),
          h("td", {}, s.errors ? h("span", { class: "state state-failed" }, `${s.errors} (${percent(s.errors, s.requests).toFixed(1)} %)`) : "0"),
          [s.p50_ms, s.p95_ms, s.p99_ms].map((ms) => h("td", {}, duration(ms))),
        ),
      ),
    );
    const one = all.find((x) => x.label === picked);
    if (!one) return;
    const { start_ms: start, step_ms: step, end_ms: end } = one.bins;
    const bins = one.s.bins;
    const xs = bins.requests.map((_, i) => (start + i * step) / 1000);
    const span = [start / 1000, Math.max(end, start + step) / 1000];
    title.textContent = one.label;
    latency(xs, [bins.p50_ms, bins.p95_ms, bins.p99_ms], span);
    errors(xs, [bins.requests.map((n, i) => percent(bins.errors[i], n))], span);
    latencyBox.dataset.series = errorBox.dataset.series = one.label; // (what a test waits on)
    latencyBox.dataset.points = bins.p50_ms.filter((p) => p !== null).length;
    note.textContent = `In bins of ${duration(step)}, ${one.by === "route" ? "at the proxies" : "at its replicas"}, from the requests' access lines; pick a route or deployment above.`;
  };
  return draw;
}

function requestColumns(session) {
  return [
    column("Request", "request_id", (r) => h("a", { href: requestPath(session, r.request_id), class: "request-link" }, r.request_id), { sort: false }),
    column("Time", "time_ms", (r) => time(r.time_ms), { sort: false }),
    column("Application", "application", null, { sort: false, tabulator: filterBy() }),
    column("Method", "method", null, { sort: false }),
    column("Route", "route", null, { sort: false, tabulator: filterBy() }),
    column("Status", "status", (r) => h("span", { class: r.error ? "state state-failed" : "state" }, r.status ?? ""), { sort: false, tabulator: filterBy(STATUSES) }),
    column("Latency", "latency_ms", (r) => duration(r.latency_ms), { sort: false, tabulator: { ...filterBy(), headerFilterPlaceholder: "at least…" } }),
    column("Deployments", "deployment", (r) => [...new Set(r.replicas.map((x) => x.deployment))].join(", "), { sort: false, tabulator: filterBy() }),
  ];
}

/** Find a request by its ID: its page. */
function findForm(session) {
  const input = h("input", { name: "request", size: 40, placeholder: "X-Request-ID, or one a log line shows", "aria-label": "request ID" });
  const submit = (event) => {
    event.preventDefault();
    const id = input.value.trim();
    if (id) go(requestPath(session, id));
  };
  return h("form", { class: "request-find", id: "request-find", onsubmit: submit }, h("label", {}, "Request ID ", input), " ", h("button", { type: "submit" }, "Find"));
}

function load(session) {
  return Promise.all([
    api("/api/raysight/serve", { session }),
    api("/api/raysight/serve/history", { session }),
    api("/api/raysight/serve/latency", { session, by: "route" }),
    api("/api/raysight/serve/latency", { session, by: "deployment" }),
  ]);
}

const served = ([sample, , routes, deployments]) => Boolean(sample.details || routes.series.length || deployments.series.length);

async function servePage(page, session) {
  const loaded = await load(session);
  page.append(h("h1", {}, "Serve"));
  if (!served(loaded)) {
    const none = empty("No Serve in this session: raysight's poller saw no ServeController, and no Serve proxy or replica logged a request.");
    none.id = "no-serve";
    page.append(none);
    let shown = null; // (a live session's Serve, once it starts)
    return {
      refresh: async () => {
        if (shown) return shown.refresh();
        const fresh = await load(session);
        if (!served(fresh)) return;
        page.replaceChildren();
        shown = await servePage(page, session);
      },
    };
  }
  const polled = h("p", { class: "hint" });
  const apps = h("div", { id: "serve-tree" });
  const latencyBox = h("div", { id: "serve-latency" });
  const requestsBox = h("div", { id: "serve-requests" });
  const historyBox = h("div", { id: "serve-history" });
  const drawLatency = latencyView(latencyBox, session);
  const show = ([sample, changes, routes, deployments]) => {
    polled.textContent = sample.details
      ? `As the poller last saw it: first so at ${time(sample.sampled_ms)}, last polled at ${time(sample.last_polled_ms)}.`
      : "The poller has not seen Serve's state (it polls where `raysight run` or `raysight poll` runs): its requests are read from its logs.";
    const open = new Set([...apps.querySelectorAll("details.serve-config[open]")].map((d) => d.closest("[data-app]").dataset.app));
    apps.replaceChildren(...(sample.details ? tree(session, sample.details, open) : [empty("No state polled.")]));
    drawLatency([routes, deployments]);
    return [...changes.transitions].reverse(); // newest first
  };
  const history = localTable(historyBox, show(loaded), HISTORY_COLUMNS, "No change seen.");
  page.append(
    polled,
    section("Applications", apps),
    section("Latency and failures", latencyBox),
    section("Requests", findForm(session), requestsBox),
    section("History (newest first)", historyBox),
  );
  const requests = resourceTable(requestsBox, { resource: "serve/requests", session, columns: requestColumns(session), read: readRequests, syncUrl: true, pageSize: 20 });
  return {
    refresh: async () => {
      const fresh = await load(session);
      await Promise.all([history.replace(show(fresh)), requests.refresh()]);
    },
  };
}

const WHERE_COLUMNS = (session, actors) => [
  column("Component", "component"),
  column("Application", "application"),
  column("Deployment", "deployment"),
  column("Replica", "replica", (l) => (l.replica ? h("span", {}, h("code", {}, l.replica), " ", replicaLinks(session, l.replica, actors.get(l.replica))) : "")),
  column("Host", "host"),
  column("Said", "method", (l) => [l.method, l.call ?? l.route].filter(Boolean).join(" ")),
  column("Status", "status", (l) => h("span", { class: l.error ? "state state-failed" : "state" }, l.status ?? "")),
  column("Latency", "latency_ms", (l) => duration(l.latency_ms)),
  column("Time", "time_ms", (l) => time(l.time_ms)),
];

/** Each replica's actor by its ID, from Serve's state as last polled, into `into`. */
function replicaActors(details, into) {
  into.clear();
  for (const app of Object.values(details?.applications ?? {}))
    for (const d of Object.values(app.deployments ?? {})) for (const r of d.replicas ?? []) into.set(r.replica_id, r.actor_id);
}

/** One request: where it went (its proxy's and each replica's access line), its lines in every component, its traces. */
async function requestPage(page, session, id) {
  const head = h("div", { class: "serve-request" });
  const where = h("div", { id: "request-where" });
  const lines = h("div", { id: "request-lines" });
  const actors = new Map();
  const load = () => Promise.all([api(`/api/raysight/serve/requests/${encodeURIComponent(id)}`, { session }), api("/api/raysight/serve", { session })]);
  /** Redraw the head; the request's access lines and its lines, for the tables. */
  const show = ([found, sample]) => {
    const r = found.request;
    head.replaceChildren(
      r
        ? h(
            "p",
            { class: "request-head" },
            h("span", { class: r.error ? "state state-failed" : "state" }, r.status ?? ""),
            " ",
            h("code", {}, [r.method, r.route].filter(Boolean).join(" ")),
            ` · ${duration(r.latency_ms)} · ${time(r.time_ms)}${r.application ? ` · application ${r.application}` : ""}${r.error ? " · failed" : ""}`,
          )
        : empty(found.lines.length ? "No access line of this request: its lines alone." : `No Serve request ${id} in this session.`),
      h("p", {}, h("a", { href: tracesOf(session, id), class: "request-traces" }, "its traces →"), " · ", h("a", { href: sessionPath(session, "serve") }, "Serve →")),
    );
    replicaActors(sample.details, actors);
    return [r ? [r.proxy, ...r.replicas].filter(Boolean) : [], found.lines];
  };
  const [access, printed] = show(await load());
  const table = localTable(where, access, WHERE_COLUMNS(session, actors), "No access line.");
  const showLines = (rows) => lines.replaceChildren(rows.length ? logLines(rows) : empty("No lines."));
  showLines(printed);
  page.append(h("h1", {}, "Request ", h("code", {}, id)), head, section("Where it went", where), section("Its lines, in every component", lines));
  return {
    refresh: async () => {
      const [fresh, freshLines] = show(await load());
      showLines(freshLines);
      await table.replace(fresh);
    },
  };
}

export function render(page, { session, id }) {
  return id ? requestPage(page, session, id) : servePage(page, session);
}
