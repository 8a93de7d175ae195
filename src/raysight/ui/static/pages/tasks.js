// Every task attempt of a session in one table, filtered, sorted and paged by the server; the filters, sort and
// page live in the URL, so a view can be shared and survives a reload.

import { api } from "../api.js";
import { h, sessionPath } from "../dom.js";
import { PAUSES } from "./pauses.js";
import { cells, column, filterBy, resourceTable } from "../table.js";

export const TASK_STATES = [
  "NIL", "PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "PENDING_OBJ_STORE_MEM_AVAIL", "PENDING_ARGS_FETCH",
  "SUBMITTED_TO_WORKER", "PENDING_ACTOR_TASK_ARGS_FETCH", "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY", "RUNNING",
  "RUNNING_IN_RAY_GET", "RUNNING_IN_RAY_WAIT", "FINISHED", "FAILED",
];

/** How every table of task attempts is shown: chips by state, the failed first, then the newest (by start). */
export const TASK_VIEW = { countBy: "state", defaultSort: ["-failed", "-start_time_ms", "task_id"] };

// Ray's task states grouped as its job page's progress bar groups them: the rest is pending
const GROUP_OF = { FINISHED: "finished", FAILED: "failed", RUNNING: "running", RUNNING_IN_RAY_GET: "running", RUNNING_IN_RAY_WAIT: "running" };

/** Task attempts by state (the API's `counts`) as finished, failed, running and pending. */
export function stateGroups(counts) {
  const groups = { finished: 0, failed: 0, running: 0, pending: 0 };
  for (const [state, n] of Object.entries(counts)) groups[GROUP_OF[state] ?? "pending"] += n;
  return groups;
}

const attemptKey = (taskId, attempt) => `${taskId}:${attempt}`;

/** The task attempts paused in a debugger now in `session`: "task:attempt" → its pause's ID (what tables mark). */
export async function pausedTasks(session) {
  const live = await api(PAUSES, { session });
  return new Map(live.filter((p) => p.task_id).map((p) => [attemptKey(p.task_id, p.attempt), p.pause_id]));
}

/** The columns of a table of task attempts in `session`; those `paused` holds (``pausedTasks``) marked, linking to
 * their pause. */
export function taskColumns(session, paused = new Map()) {
  const state = cells.state();
  const marked = (t) => {
    const pause = paused.get(attemptKey(t.task_id, t.attempt_number));
    return pause ? h("span", {}, state(t), " ", h("a", { href: sessionPath(session, "pauses", pause), class: "paused" }, "paused")) : state(t);
  };
  return [
    column("Task", "task_id", cells.id(session, "tasks", "task_id")),
    column("Attempt", "attempt_number"),
    column("Function", "func_or_class_name", null, { tabulator: filterBy() }),
    column("State", "state", marked, { tabulator: filterBy(TASK_STATES) }),
    column("Type", "type", null, { tabulator: filterBy(["NORMAL_TASK", "ACTOR_TASK", "ACTOR_CREATION_TASK", "DRIVER_TASK"]) }),
    column("Job", "job_id", cells.id(session, "jobs", "job_id"), { tabulator: filterBy() }),
    column("Started", "start_time_ms", cells.time("start_time_ms")),
    column("Duration", "duration_ms", cells.duration("duration_ms")),
    column("Node", "node_id", cells.id(session, "nodes", "node_id"), { tabulator: filterBy() }),
    column("Worker", "worker_id", cells.id(session, "workers", "worker_id"), { tabulator: filterBy() }),
    column("Error", "error_type", (t) => (t.error_type ? h("a", { href: `/ui/sessions/${encodeURIComponent(session)}/errors/${t.task_id}`, class: "error" }, t.error_type) : ""), { tabulator: filterBy() }),
  ];
}

export async function render(page, { session }) {
  const hint = "Failed attempts first, then the newest; * marks a state raysight inferred (Ray never sent it): hover for why.";
  page.append(h("h1", {}, "Tasks"), h("p", { class: "hint" }, hint));
  const box = h("div", { id: "tasks-table" });
  page.append(box);
  const paused = await pausedTasks(session);
  const table = resourceTable(box, { resource: "tasks", session, columns: taskColumns(session, paused), syncUrl: true, ...TASK_VIEW });
  return {
    refresh: async () => {
      const now = await pausedTasks(session);
      paused.clear();
      now.forEach((pause, task) => paused.set(task, pause));
      await table.refresh();
    },
  };
}
