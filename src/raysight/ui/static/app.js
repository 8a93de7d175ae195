// The dashboard: a router over /ui/… URLs (each entity's page its own URL, the browser's history kept), the
// session switcher, the error banner, and the refresh of a live session's page.

import { api } from "./api.js";
import { clearError, showError } from "./banner.js";
import { h, sessionPath } from "./dom.js";

// Each page's module (and the libraries it needs) is fetched when a page of its kind is first shown
const entities = () => import("./pages/entities.js");
const errors = () => import("./pages/errors.js");
const logs = () => import("./pages/logs.js");
const overview = () => import("./pages/overview.js");
const pauses = () => import("./pages/pauses.js");
const serve = () => import("./pages/serve.js");
const sessions = () => import("./pages/sessions.js");
const task = () => import("./pages/task.js");
const tasks = () => import("./pages/tasks.js");
const timeline = () => import("./pages/timeline.js");
const traces = () => import("./pages/traces.js");

const LIVE_EVERY_MS = 3000;
const SECTIONS = [
  ["", "Overview"],
  ["jobs", "Jobs"],
  ["tasks", "Tasks"],
  ["timeline", "Timeline"],
  ["actors", "Actors"],
  ["nodes", "Nodes"],
  ["workers", "Workers"],
  ["serve", "Serve"], // (only in a session where Serve ran)
  ["pauses", "Pauses"], // (only in a session that had debugger pauses)
  ["traces", "Traces"],
  ["logs", "Logs"],
  ["errors", "Errors"],
];
const ID = "([^/]+)";
// [pattern over the path after /ui, the page's module, what the captures name]
const ROUTES = [
  [/^\/?$/, sessions, []],
  [new RegExp(`^/sessions/${ID}/?$`), overview, ["session"]],
  [new RegExp(`^/sessions/${ID}/tasks/?$`), tasks, ["session"]],
  [new RegExp(`^/sessions/${ID}/tasks/${ID}$`), task, ["session", "id"]],
  [new RegExp(`^/sessions/${ID}/(jobs|actors|nodes|workers)/?$`), entities, ["session", "kind"]],
  [new RegExp(`^/sessions/${ID}/(jobs|actors|nodes|workers)/${ID}$`), entities, ["session", "kind", "id"]],
  [new RegExp(`^/sessions/${ID}/errors/?$`), errors, ["session"]],
  [new RegExp(`^/sessions/${ID}/errors/${ID}$`), errors, ["session", "id"]],
  [new RegExp(`^/sessions/${ID}/logs/?$`), logs, ["session"]],
  [new RegExp(`^/sessions/${ID}/timeline/?$`), timeline, ["session"]],
  [new RegExp(`^/sessions/${ID}/traces/?$`), traces, ["session"]],
  [new RegExp(`^/sessions/${ID}/traces/${ID}$`), traces, ["session", "id"]],
  [new RegExp(`^/sessions/${ID}/serve/?$`), serve, ["session"]],
  [new RegExp(`^/sessions/${ID}/pauses/?$`), pauses, ["session"]],
  [new RegExp(`^/sessions/${ID}/pauses/${ID}$`), pauses, ["session", "id"]],
  [new RegExp(`^/sessions/${ID}/serve/requests/${ID}$`), serve, ["session", "id"]],
];

let current = null; // the page shown: {refresh?, stop?}
let liveTimer = null;
let knownSessions = [];
let paused = false; // the user's pause of live updates (kept from page to page)
let updated = null; // when the page shown was last rendered or refreshed (ms)
let rendering = 0; // the number of the latest render: one the user has moved on from while it loads draws nowhere

export function navigate(path) {
  history.pushState({}, "", path);
  render();
}

function route() {
  const path = location.pathname.replace(/^\/ui/, "");
  for (const [pattern, page, names] of ROUTES) {
    const match = path.match(pattern); // each part as encoded (an ID's / is %2F), then decoded
    if (match) return { load: page, params: Object.fromEntries(names.map((name, i) => [name, decodeURIComponent(match[i + 1])])) };
  }
  return null;
}

/** The session's row of those known (by name or label). */
function sessionRow(session) {
  return knownSessions.find((s) => s.session === session || s.label === session);
}

// The sections shown only where the session has them (or on their page): the flag of its row that says so
const CONDITIONAL = { serve: "serve", pauses: "pauses" };

/** The sections of a session's pages (Serve's where it ran, its pauses where it had some, or on their page). */
function renderNav(session, params) {
  const nav = document.getElementById("nav");
  const has = (part) => !(part in CONDITIONAL) || sessionRow(session)?.[CONDITIONAL[part]] || params.section === part;
  const shown = SECTIONS.filter(([part]) => has(part));
  nav.replaceChildren(
    h("a", { href: "/ui/", class: session ? "" : "active" }, "Sessions"),
    ...(session
      ? shown.map(([part, title]) => {
          const href = part ? sessionPath(session, part) : sessionPath(session);
          return h("a", { href, class: params.section === part ? "active" : "" }, title);
        })
      : []),
  );
}

async function renderSwitcher(session, mine) {
  const select = document.getElementById("session-switcher");
  try {
    knownSessions = (await api("/api/raysight/sessions")).sessions;
  } catch (error) {
    showError(error);
  }
  if (mine !== rendering) return sessionRow(session); // (a newer page's switcher is drawn by its own render)
  select.replaceChildren(
    h("option", { value: "" }, knownSessions.length ? "— pick a session —" : "no sessions yet"),
    ...knownSessions.map((s) =>
      h("option", { value: s.session, selected: s.session === session || s.label === session }, s.label ? `${s.label} · ${s.session}` : s.session),
    ),
  );
  const live = sessionRow(session);
  select.value = live?.session ?? "";
  document.getElementById("live").hidden = !(live && live.end_time_ms === null);
  return live;
}

/** Show the page the URL names; `data-loading` is on #page until it is rendered (or failed). */
async function render() {
  const page = document.getElementById("page");
  const mine = ++rendering;
  page.dataset.loading = "";
  try {
    await show(page, mine);
  } finally {
    if (mine === rendering) delete page.dataset.loading;
  }
}

/** Render the page the URL names into a view of its own: a render overtaken by a newer one (the user moved on while
 * its module or data loaded) draws into its view, which the newer one has taken off the page, and starts nothing. */
async function show(page, mine) {
  current?.stop?.();
  clearInterval(liveTimer);
  clearError();
  const found = route();
  if (!found) {
    page.replaceChildren(h("h1", {}, "Not found"), h("p", {}, "No page here. ", h("a", { href: "/ui/" }, "See the sessions")));
    return;
  }
  const { session } = found.params;
  found.params.section = location.pathname.split("/")[4] ?? "";
  renderNav(session, found.params);
  // beside the page's own requests, not before them; the sessions it reads say whether Serve ran in this one
  const switcher = renderSwitcher(session, mine).then((live) => (mine === rendering && renderNav(session, found.params), live));
  const view = h("div", { class: "view" });
  page.replaceChildren(view);
  try {
    const module = await found.load();
    if (mine !== rendering) return;
    const shown = (await module.render(view, found.params)) ?? null;
    if (mine !== rendering) {
      shown?.stop?.();
      return;
    }
    current = shown;
  } catch (error) {
    if (mine === rendering) showError(error);
    return;
  }
  updated = Date.now();
  const known = await switcher;
  if (mine !== rendering) return;
  if (known && known.end_time_ms === null && current?.refresh) {
    const shown = current;
    let busy = false; // a slow refresh is not stacked under the next
    liveTimer = setInterval(async () => {
      if (paused || busy) return;
      busy = true;
      try {
        await shown.refresh();
        if (shown === current) updated = Date.now();
      } catch (error) {
        showError(error);
      } finally {
        busy = false;
      }
    }, LIVE_EVERY_MS);
  }
  showUpdated();
}

/** "updated N s ago" beside the live marker (or "paused"), as of now. */
function showUpdated() {
  const label = document.getElementById("updated");
  if (paused) label.textContent = "paused";
  else label.textContent = updated === null ? "" : `updated ${Math.max(0, Math.round((Date.now() - updated) / 1000))} s ago`;
}

document.getElementById("pause").addEventListener("click", (event) => {
  paused = !paused;
  event.target.textContent = paused ? "Resume" : "Pause";
  event.target.setAttribute("aria-pressed", String(paused));
  showUpdated();
});
setInterval(showUpdated, 1000);

document.addEventListener("click", (event) => {
  const link = event.target.closest("a[href]");
  if (!link || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
  const href = link.getAttribute("href");
  if (!href.startsWith("/ui/") || link.target) return;
  event.preventDefault();
  if (href !== location.pathname + location.search) navigate(href);
});

document.getElementById("session-switcher").addEventListener("change", (event) => {
  const chosen = event.target.value;
  if (!chosen) return;
  const rest = location.pathname.split("/").slice(4, 5).join("/"); // keep the section, not an entity of another session
  navigate(rest ? sessionPath(chosen, rest) : sessionPath(chosen));
});

window.addEventListener("popstate", render);
render();
