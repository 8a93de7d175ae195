// One task: each attempt with its state transitions and times, what it ran on, its parent and children, its error
// with the whole traceback (leading to the failure's page), the lines it printed, and its profile.

import { api } from "../api.js";
import { duration, empty, fields, h, idLink, logLines, section, sessionPath, stateBadge, time } from "../dom.js";
import { resourceTable } from "../table.js";
import { taskColumns } from "./tasks.js";
import { attachCommands, sessionPauses } from "./pauses.js";
import { flameGraph, onDemand } from "./profile.js";
import { traceLinks } from "./traces.js";

const DRIVER_PARENT = /^f{40}/; // a driver's task: the task was submitted by the job's driver

function attempt(session, t, printed) {
  const links = (kind, id) => idLink(session, kind, id, id);
  return h(
    "article",
    { class: "attempt", id: `attempt-${t.attempt_number}` },
    h("h2", {}, `Attempt ${t.attempt_number} `, stateBadge(t.state, t.state_inferred, t.inferred_reason)),
    t.state_inferred ? h("p", { class: "inferred-reason" }, `Inferred by raysight: ${t.inferred_reason}`) : "",
    fields(
      {
        function: t.func_or_class_name,
        type: t.type,
        job: t.job_id,
        actor: t.actor_id,
        parent: t.parent_task_id,
        node: t.node_id,
        worker: t.worker_id,
        pid: t.worker_pid,
        created: t.creation_time_ms,
        started: t.start_time_ms,
        ended: t.end_time_ms,
        duration: t.duration_ms,
        resources: t.required_resources,
        error_type: t.error_type,
      },
      {
        job: (id) => links("jobs", id),
        actor: (id) => links("actors", id),
        parent: (id) => (id && !DRIVER_PARENT.test(id) ? links("tasks", id) : id ? "the job's driver" : ""),
        node: (id) => links("nodes", id),
        worker: (id) => links("workers", id),
        created: time,
        started: time,
        ended: time,
        duration,
      },
    ),
    t.error_message
      ? h(
          "div",
          { class: "error-box" },
          h("h3", {}, "Error ", h("a", { href: sessionPath(session, "errors", t.task_id), class: "to-failure" }, "(cause, retries, what failed beside it →)")),
          h("pre", { class: "traceback" }, t.error_message),
        )
      : "",
    h(
      "details",
      { open: true },
      h("summary", {}, "State transitions"),
      h(
        "table",
        { class: "plain transitions" },
        (t.events ?? []).map((e) => h("tr", {}, h("td", {}, time(e.created_ms)), h("td", {}, stateBadge(e.state)))),
      ),
    ),
    section("What it printed", printed.rows.length ? logLines(printed.rows, { task: false }) : empty("No lines attributed to this attempt.")),
  );
}

/** The task's attempts, each with what it printed: what a live page redraws. */
async function attempts(box, session, id) {
  const { rows } = await api(`/api/raysight/tasks/${encodeURIComponent(id)}`, { session });
  if (!rows.length) throw new Error(`no task ${id} in this session`);
  const printed = await Promise.all(
    rows.map((t) => api("/api/raysight/logs", { session, task: id, attempt: t.attempt_number, limit: 200 })),
  );
  box.replaceChildren(...rows.map((t, i) => attempt(session, t, printed[i])));
  return rows;
}

/** The task's debugger pauses (none: nothing shown): a live one with the commands that attach to it. */
async function drawPauses(box, session, id) {
  const { live, all } = await sessionPauses(session);
  const mine = all.filter((p) => p.task_id === id);
  const now = live.find((p) => p.task_id === id);
  box.replaceChildren(
    ...(mine.length
      ? [
          section(
            now ? "Paused in a debugger now" : "Debugger pauses",
            now ? h("p", { class: "paused-now" }, `Paused at ${now.file}:${now.line} (${now.function}) since ${time(now.paused_ns / 1e6)}.`) : "",
            now ? attachCommands(now.pause_id) : "",
            h("ul", {}, mine.map((p) => h("li", {}, h("a", { href: sessionPath(session, "pauses", p.pause_id) }, `${p.kind} at ${p.function}:${p.line}`), ` · ${p.ended ?? "live"}`))),
          ),
        ]
      : []),
  );
}

export async function render(page, { session, id }) {
  const box = h("div", { class: "attempts" });
  const rows = await attempts(box, session, id);
  const title = h("p", { class: "id-line" });
  const count = (n) => title.replaceChildren(h("code", {}, id), ` · ${n} attempt${n > 1 ? "s" : ""}`);
  count(rows.length);
  page.append(h("h1", {}, `Task ${rows[0].func_or_class_name ?? rows[0].name ?? ""}`), title, box);
  const pauses = h("div", { id: "task-pauses" });
  await drawPauses(pauses, session, id);
  page.append(pauses);
  page.append(section("Traces", h("div", { id: "task-traces" }, await traceLinks(session, { task: id }))));
  const profile = await flameGraph(session, { task: id }, `raysight profile --task ${id} -o task.svg`);
  page.append(section("Profile (where its time went)", h("div", { id: "task-profile" }, profile)));
  const asked = await onDemand(session, { task: id }).catch(() => null);
  if (asked) page.append(section("On-demand profiles (of its worker, while it ran)", h("div", { id: "task-captures" }, asked)));
  const children = h("div", { id: "children" });
  page.append(section("Children (tasks it submitted)", children));
  const table = resourceTable(children, { resource: "tasks", session, columns: taskColumns(session), filters: [`parent_task_id=${id}`], pageSize: 20 });
  document.getElementById(location.hash.slice(1))?.scrollIntoView();
  return {
    refresh: async () => {
      count((await attempts(box, session, id)).length);
      await drawPauses(pauses, session, id);
      await table.refresh();
    },
  };
}
