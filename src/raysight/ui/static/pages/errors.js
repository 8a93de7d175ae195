// What went wrong: the session's failures grouped by cause (each root once, what followed from it counted under
// it); a group's failures; and one failure whole — why (the traceback), what it followed from, its attempts, the
// lines before it, and what failed beside it.

import { api } from "../api.js";
import { clamped, empty, h, idLink, logLines, section, sessionPath, time } from "../dom.js";
import { column, localTable } from "../table.js";

const KIND_PAGES = { task: "tasks", actor: "actors", worker: "workers", node: "nodes", job: "jobs" };
const HEX_ID = /^[0-9a-f]{8,56}$/;

function entityLink(session, kind, id) {
  return idLink(session, KIND_PAGES[kind], id);
}

/** A cause's name: its exception's type (else Ray's error type) and what it hit ("ValueError in fails"). */
function causeTitle(failures) {
  const [first] = failures;
  if (!first) return "Cause";
  const hit = [...new Set(failures.map((f) => f.name))];
  return `${first.exception_type ?? first.error_type} in ${hit.length === 1 ? hit[0] : `${hit.length} ${first.kind}s`}`;
}

function tally(groups) {
  const roots = groups.reduce((n, g) => n + g.count, 0);
  return `${roots} root failures in ${groups.length} causes; what followed from each is counted beside it.`;
}

async function groups(page, session) {
  const load = async () => (await api("/api/raysight/errors", { session })).groups;
  const found = await load();
  const hint = h("p", { class: "hint" }, tally(found));
  const box = h("div", { id: "error-groups" });
  page.append(h("h1", {}, "Errors"), hint, box);
  const table = localTable(
    box,
    found,
    [
      column("Cause", "group_id", (g) => h("a", { href: sessionPath(session, "errors", g.group_id), class: "group" }, g.group_id)),
      column("Count", "count"),
      column("Kind", "kind"),
      column("Error type", "error_type"),
      column("Error", "error", (g) => h("code", { title: g.example?.message ?? "" }, g.error), { text: true }),
      column("Affected", "affected", (g) => g.affected.join(", "), { text: true }),
      column("Followed from it", "consequences", (g) => Object.entries(g.consequences).map(([k, n]) => `${n} ${k}`).join(", ")),
      column("First", "first_ms", (g) => time(g.first_ms), { hidden: true }),
      column("Last", "last_ms", (g) => time(g.last_ms)),
    ],
    "No failures in this session.",
  );
  return {
    refresh: async () => {
      const fresh = await load();
      hint.textContent = tally(fresh);
      await table.replace(fresh);
    },
  };
}

function failureView(session, f, attempts) {
  const logs = f.logs ?? {};
  return h(
    "article",
    { class: "failure" },
    h("h2", {}, `${f.kind} ${f.name}${f.attempt === null ? "" : ` (attempt ${f.attempt})`}: ${f.error_type}`),
    h(
      "p",
      { class: "where" },
      time(f.time_ms),
      " · ",
      entityLink(session, f.kind, f.id),
      f.job_id ? [" · job ", idLink(session, "jobs", f.job_id)] : "",
      f.node_id ? [" · node ", idLink(session, "nodes", f.node_id)] : "",
      f.worker_id ? [" · worker ", idLink(session, "workers", f.worker_id)] : "",
      " · cause ",
      h("a", { href: sessionPath(session, "errors", f.group_id) }, f.group_id),
    ),
    f.root_kind
      ? h("p", { class: "root" }, "Followed from the failure of ", f.root_kind, " ", h("a", { href: sessionPath(session, "errors", f.root_id), class: "root-link" }, f.root_id))
      : "",
    section("Why", h("pre", { class: "traceback" }, f.message || f.error || "(Ray gave no message)")),
    attempts
      ? section(
          "Attempts",
          h(
            "table",
            { class: "plain" },
            attempts.map((a) => h("tr", {}, h("td", {}, `#${a.attempt}`), h("td", {}, a.state), h("td", {}, clamped(a.error_type)), h("td", {}, time(a.end_time_ms)))),
          ),
        )
      : "",
    logs.own?.length ? section("What it printed", logLines(logs.own)) : "",
    logs.worker?.length ? section("Its worker's last lines before it failed", logLines(logs.worker)) : "",
    logs.system?.length ? section("What Ray's components said of it", logLines(logs.system)) : "",
    f.beside?.length
      ? section(
          "What failed beside it (same node or worker, within 5 s)",
          h(
            "table",
            { class: "plain" },
            f.beside.map((b) => h("tr", {}, h("td", {}, b.kind), h("td", {}, entityLink(session, b.kind, b.id)), h("td", {}, clamped(b.name)), h("td", {}, time(b.time_ms)), h("td", {}, clamped(b.error_type)))),
          ),
        )
      : "",
  );
}

async function detail(page, session, id) {
  if (!HEX_ID.test(id)) throw new Error(`${id} is no ID: a task, actor, worker, node or job ID, or a cause's`);
  const data = await api(`/api/raysight/errors/${id}`, { session });
  if (data.group_id && data.id === undefined) {
    const [first] = data.failures;
    page.append(
      h("h1", {}, causeTitle(data.failures)),
      h("p", { class: "id-line" }, "Cause ", h("code", {}, id), ` · ${data.failures.length} failure(s): `, h("code", {}, first ? `${first.error_type} ${first.error}` : "")),
    );
    const box = h("div", { id: "group-failures" });
    page.append(box);
    localTable(box, data.failures, [
      column("Kind", "kind"),
      column("Failure", "id", (f) => h("a", { href: sessionPath(session, "errors", f.id), class: "failure-link" }, f.id)),
      column("Attempt", "attempt"),
      column("Name", "name"),
      column("When", "time_ms", (f) => time(f.time_ms)),
      column("Entity", "entity", (f) => entityLink(session, f.kind, f.id)),
    ]);
    return null;
  }
  page.append(
    h("h1", {}, "Failure ", h("code", {}, id)),
    ...(data.failures.length ? data.failures.map((f) => failureView(session, f, data.attempts)) : [empty("It did not fail in this session.")]),
  );
  return null;
}

export function render(page, { session, id }) {
  return id ? detail(page, session, id) : groups(page, session);
}

