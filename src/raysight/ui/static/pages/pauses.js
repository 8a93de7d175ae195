// Debugger pauses: a session's pauses (breakpoints, post-mortem freezes) with how each ended, and one pause whole:
// where it paused, its stack and locals as the worker reported them, its exception, who attached, and the commands
// that attach to it while it lasts.

import { api } from "../api.js";
import { empty, fields, h, idLink, section, sessionPath, time } from "../dom.js";
import { column, localTable } from "../table.js";

export const PAUSES = "/api/raysight/debug/pauses";

/** The pauses of `session` now live (raysight's, and those Ray's own debugger holds), and every one it had. */
export async function sessionPauses(session) {
  const [live, all] = await Promise.all([api(PAUSES, { session }), api(PAUSES, { session, all: "true" })]);
  return { live, all };
}

/** The commands that attach to a live pause: a terminal's pdb, and VS Code's (DAP) through a local port. */
export function attachCommands(pauseId) {
  return h(
    "div",
    { class: "attach-commands" },
    h("p", {}, "Attach from a terminal (pdb), or serve it to VS Code's Python debugger on a local port:"),
    h("pre", { class: "command" }, `raysight debug attach ${pauseId}`),
    h("pre", { class: "command" }, `raysight debug attach ${pauseId} --dap --port 5678`),
  );
}

function where(p) {
  return p.file ? `${p.function} ${p.file.split("/").pop()}:${p.line}` : `Ray's debugger at ${p.debugger}`;
}

function pauseColumns(session, live) {
  return [
    column("Pause", "pause_id", (p) => (p.pause_id ? h("a", { href: sessionPath(session, "pauses", p.pause_id), class: "id" }, p.pause_id) : "")),
    column("Kind", "kind"),
    column("Where", "file", where),
    column("Task", "task_id", (p) => idLink(session, "tasks", p.task_id)),
    column("Actor", "actor_id", (p) => idLink(session, "actors", p.actor_id)),
    column("Pid", "pid"),
    column("Paused", "paused_ns", (p) => time(p.paused_ns / 1e6)),
    live ? column("Driven by", "holder") : column("Ended", "ended", (p) => p.ended ?? "live"),
    live ? column("", "pause_id", (p) => (p.pause_id ? `raysight debug attach ${p.pause_id}` : ""), { sort: false }) : column("Attaches", "attaches"),
  ];
}

async function listPage(page, session) {
  page.append(h("h1", {}, "Debugger pauses"));
  page.append(h("p", { class: "hint" }, "Each breakpoint and post-mortem freeze of the session's tasks raysight relayed, and how it ended; those live now first, with the command that attaches to them."));
  const { live, all } = await sessionPauses(session);
  const liveBox = h("div", { id: "live-pauses" });
  const allBox = h("div", { id: "all-pauses" });
  page.append(section("Paused now", live.length ? liveBox : empty("Nothing is paused now.")), section("Every pause", allBox));
  const liveTable = live.length ? localTable(liveBox, live, pauseColumns(session, true)) : null;
  const allTable = localTable(allBox, all, pauseColumns(session, false), "No pause in this session");
  return {
    refresh: async () => {
      const fresh = await sessionPauses(session);
      await liveTable?.replace(fresh.live);
      await allTable.replace(fresh.all);
    },
  };
}

function frame(f, i, hidden) {
  const names = Object.entries(f.locals ?? {});
  const none = hidden ? "The locals need the server's admin token." : "No locals.";
  return h(
    "details",
    { class: "frame", open: i === 0 },
    h("summary", {}, h("code", {}, `${f.function}  ${f.file}:${f.line}`)),
    names.length
      ? h("table", { class: "plain locals" }, names.map(([name, value]) => h("tr", {}, h("th", {}, name), h("td", {}, h("code", {}, value)))))
      : empty(none),
  );
}

async function pausePage(page, session, id) {
  const box = h("div", { class: "pause" });
  const draw = async () => box.replaceChildren(...(await pauseParts(session, id)));
  await draw();
  page.append(box);
  return { refresh: draw };
}

async function pauseParts(session, id) {
  const p = await api(`${PAUSES}/${encodeURIComponent(id)}`);
  const title = p.kind === "post_mortem" ? "Post-mortem freeze" : "Breakpoint";
  return [
    h("h1", {}, `${title} in ${p.function}`),
    h("p", { class: "id-line" }, h("code", {}, p.pause_id), p.live ? h("span", { class: "state state-running" }, " paused now") : ` · ${p.ended}`),
    fields(
      { task: p.task_id, attempt: p.attempt, actor: p.actor_id, job: p.job_id, worker: p.worker_id, node: p.node_id, host: p.host, pid: p.pid, where: `${p.file}:${p.line}`, paused: p.paused_ns / 1e6, ended: p.ended_ns ? p.ended_ns / 1e6 : null },
      {
        task: (v) => idLink(session, "tasks", v, v),
        actor: (v) => idLink(session, "actors", v, v),
        job: (v) => idLink(session, "jobs", v, v),
        worker: (v) => idLink(session, "workers", v, v),
        node: (v) => idLink(session, "nodes", v, v),
        paused: time,
        ended: time,
      },
    ),
    p.live ? attachCommands(p.pause_id) : "",
    p.traceback ? h("div", { class: "error-box" }, h("h3", {}, p.exception), h("pre", { class: "traceback" }, p.traceback)) : "",
    section("Stack, innermost first (locals as they were when it paused)", h("div", { class: "stack" }, p.stack.map((f, i) => frame(f, i, p.locals_hidden)))),
    section(
      "Who attached",
      p.attaches.length
        ? h("table", { class: "plain attaches" }, p.attaches.map((a) => h("tr", {}, h("td", {}, a.client), h("td", {}, a.address), h("td", {}, time(a.attached_ns / 1e6)), h("td", {}, a.detached_ns ? time(a.detached_ns / 1e6) : "attached now"))))
        : empty("No client attached."),
    ),
  ];
}

export async function render(page, { session, id }) {
  if (id) return pausePage(page, session, id);
  return listPage(page, session);
}
