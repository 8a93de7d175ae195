// Jobs, actors, nodes and workers: a table of each, and a page for each one with what it ran and its logs.

import { api } from "../api.js";
import { duration, empty, fields, h, idLink, logLines, resourceChips, section, sessionPath, stateBadge, time, usageBars } from "../dom.js";
import { cells, column, filterBy, resourceTable } from "../table.js";
import { stateGroups, TASK_VIEW, taskColumns } from "./tasks.js";
import { flameGraph, onDemand } from "./profile.js";

const KINDS = {
  jobs: {
    title: "Jobs",
    one: "Job",
    id: "job_id",
    logParam: "job",
    columns: (s) => [
      column("Job", "job_id", cells.id(s, "jobs", "job_id")),
      column("Status", "status", cells.state("status"), { tabulator: filterBy(["PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED"]) }),
      column("Entrypoint", "entrypoint", null, { text: true }),
      column("Type", "type"),
      column("Exit code", "driver_exit_code"),
      column("Started", "start_time", cells.time("start_time")),
      column("Ended", "end_time", cells.time("end_time")),
    ],
    related: (s, id) => [
      ["Tasks", "tasks", taskColumns(s), [`job_id=${id}`]],
      ["Actors", "actors", KINDS.actors.columns(s), [`job_id=${id}`]],
    ],
  },
  actors: {
    title: "Actors",
    one: "Actor",
    id: "actor_id",
    logParam: "actor",
    columns: (s) => [
      column("Actor", "actor_id", cells.id(s, "actors", "actor_id")),
      column("Class", "class_name", null, { tabulator: filterBy() }),
      column("State", "state", cells.state(), { tabulator: filterBy(["DEPENDENCIES_UNREADY", "PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD"]) }),
      column("Name", "name"),
      column("Restarts", "num_restarts"),
      column("Job", "job_id", cells.id(s, "jobs", "job_id"), { tabulator: filterBy() }),
      column("Node", "node_id", cells.id(s, "nodes", "node_id")),
      column("PID", "pid"),
      column("Death", "death_message", null, { text: true }),
    ],
    related: (s, id) => [["Method calls", "tasks", taskColumns(s), [`actor_id=${id}`]]],
  },
  nodes: {
    title: "Nodes",
    one: "Node",
    id: "node_id",
    logParam: "node",
    usage: true,
    columns: (s, usage) => [
      column("Node", "node_id", cells.id(s, "nodes", "node_id")),
      column("IP", "node_ip"),
      column("Head", "is_head_node", (n) => (n.is_head_node ? "head" : "")),
      column("State", "state", cells.state(), { tabulator: filterBy(["ALIVE", "DEAD"]) }),
      column("Resources", "resources_total", (n) => resourceChips(n.resources_total), { sort: false, tabulator: { width: 200 } }),
      column("Use now", "usage", (n) => usageBars(usage.get(n.node_id)), { sort: false, tabulator: { width: 300 } }),
      column("Started", "start_time_ms", cells.time("start_time_ms")),
      column("Ended", "end_time_ms", cells.time("end_time_ms")),
      column("Why", "state_message", null, { text: true }),
    ],
    related: (s, id) => [
      ["Workers", "workers", KINDS.workers.columns(s), [`node_id=${id}`]],
      ["Actors", "actors", KINDS.actors.columns(s), [`node_id=${id}`]],
    ],
  },
  workers: {
    title: "Workers",
    one: "Worker",
    id: "worker_id",
    logParam: "worker",
    columns: (s) => [
      column("Worker", "worker_id", cells.id(s, "workers", "worker_id")),
      column("Process", "process_name", null, { sort: false }),
      column("Actor", "actor_id", cells.id(s, "actors", "actor_id"), { sort: false }),
      column("Type", "worker_type", null, { tabulator: filterBy(["WORKER", "DRIVER", "SPILL_WORKER", "RESTORE_WORKER"]) }),
      column("Alive", "is_alive", (w) => stateBadge(w.is_alive ? "ALIVE" : "DEAD", w.state_inferred, w.inferred_reason)),
      column("Exit", "exit_type", null, { tabulator: filterBy() }),
      column("Node", "node_id", cells.id(s, "nodes", "node_id")),
      column("PID", "pid"),
      column("Started", "start_time_ms", cells.time("start_time_ms")),
      column("Ended", "end_time_ms", cells.time("end_time_ms")),
    ],
    related: (s, id) => [["Tasks it ran", "tasks", taskColumns(s), [`worker_id=${id}`]]],
  },
};

const PROFILED = { actors: "actor", jobs: "job" }; // what a profile merges every task attempt of (its query's name)
const LINKED = { job_id: "jobs", actor_id: "actors", node_id: "nodes", worker_id: "workers", driver_node_id: "nodes" };
const TIMES = /(_time|_time_ms)$/;

/** Each node's newest use of what it has (``/api/raysight/usage``), by node ID, into `into`. */
async function nodeUsage(session, into = new Map()) {
  const { nodes } = await api("/api/raysight/usage", { session });
  into.clear();
  for (const node of nodes) into.set(node.node_id, node.usage);
  return into;
}

async function list(page, session, kind) {
  const spec = KINDS[kind];
  const box = h("div", { id: `${kind}-table` });
  const usage = spec.usage ? await nodeUsage(session) : null;
  page.append(h("h1", {}, spec.title), box);
  const table = resourceTable(box, { resource: kind, session, columns: spec.columns(session, usage), syncUrl: true });
  return {
    refresh: async () => {
      if (usage) await nodeUsage(session, usage);
      await table.refresh();
    },
  };
}

/** The entity's fields, state history and newest lines: what a live page redraws (its tables refresh themselves); a
 * job's opens on where it stands, its fields folded away. */
async function details(box, session, kind, id) {
  const spec = KINDS[kind];
  const [{ rows }, printed, tasks, usage] = await Promise.all([
    api(`/api/raysight/${kind}/${encodeURIComponent(id)}`, { session }),
    api("/api/raysight/logs", { session, [spec.logParam]: id, limit: 200, newest: "true" }),
    kind === "jobs" ? api("/api/raysight/tasks", { session, filter: `job_id=${id}`, count_by: "state", limit: 0 }) : null,
    spec.usage ? api("/api/raysight/usage", { session, node: id }) : null,
  ]);
  if (!rows.length) throw new Error(`no ${spec.one.toLowerCase()} ${id} in this session`);
  const [entity] = rows;
  const show = {};
  for (const key of Object.keys(entity)) {
    if (LINKED[key] && key !== spec.id) show[key] = (v) => idLink(session, LINKED[key], v, v);
    else if (TIMES.test(key)) show[key] = (v) => time(v);
  }
  const { events, ...rest } = entity;
  const folded = box.querySelector("details.all-fields")?.open ?? false; // as the user left it
  box.replaceChildren(
    tasks ? jobStatus(session, entity, tasks.counts) : "",
    entity.state_inferred ? h("p", { class: "inferred-reason" }, `State inferred by raysight: ${entity.inferred_reason}`) : "",
    usage ? nodeResources(entity, usage.nodes[0]) : "",
    tasks ? jobFields(rest, show, folded) : fields(rest, show),
    events?.length
      ? section(
          "State history",
          h("table", { class: "plain transitions" }, events.map((e) => h("tr", {}, h("td", {}, time(e.created_ms)), h("td", {}, stateBadge(e.state))))),
        )
      : "",
  );
  return printed;
}

/** Where a job stands: its status, entrypoint, duration (so far, while it runs), exit code and failed attempts, and
 * its task attempts by state as a bar (finished, failed, running, pending). */
function jobStatus(session, job, counts) {
  const groups = stateGroups(counts);
  const total = Object.values(groups).reduce((a, b) => a + b, 0);
  const failedTasks = `${sessionPath(session, "tasks")}?job_id=${encodeURIComponent(job.job_id)}&state=FAILED`;
  const fact = (label, ...value) => h("li", {}, h("span", { class: "label" }, label), " ", ...value);
  return h(
    "div",
    { class: "job-status" },
    h("p", { class: "job-head" }, stateBadge(job.status, job.state_inferred), " ", job.entrypoint ? h("code", { class: "entrypoint" }, job.entrypoint) : ""),
    job.message ? h("p", { class: "hint" }, job.message) : "",
    h(
      "ul",
      { class: "facts" },
      job.start_time ? fact("Duration", duration((job.end_time ?? Date.now()) - job.start_time), job.end_time ? "" : " so far") : "",
      job.driver_exit_code === null || job.driver_exit_code === undefined ? "" : fact("Exit code", String(job.driver_exit_code)),
      fact("Failed attempts", groups.failed ? h("a", { href: failedTasks, class: "failed-tasks" }, `${groups.failed} →`) : "0"),
      job.status === "FAILED" ? h("li", {}, h("a", { href: sessionPath(session, "errors", job.job_id), class: "to-failure" }, "why it failed →")) : "",
      h("li", {}, h("a", { href: `${sessionPath(session, "timeline")}?job=${encodeURIComponent(job.job_id)}` }, "its timeline →")),
    ),
    h(
      "div",
      { class: "progress", role: "img", "aria-label": `${total} task attempts by state` },
      Object.entries(groups).map(([group, n]) => (n ? h("span", { class: `bar ${group}`, style: `flex-grow: ${n}`, title: `${group} ${n}` }) : "")),
    ),
    h(
      "ul",
      { class: "progress-legend" },
      Object.entries(groups).map(([group, n]) => h("li", { "data-group": group, "data-count": n }, h("span", { class: `swatch ${group}` }), `${group} ${n}`)),
    ),
  );
}

/** A job's fields folded away (the empty ones left out, as everywhere), raysight's own hooks out of its runtime env (said so). */
function jobFields(job, show, open) {
  const { runtime_env: env, ...rest } = job;
  const own = ownHooks(env);
  return h(
    "details",
    { class: "all-fields", open },
    h("summary", {}, "All fields"),
    own.hidden ? h("p", { class: "hint" }, "raysight's own hooks (its RAYSIGHT_* variables and worker setup hook) are hidden from runtime_env.") : "",
    fields({ ...rest, runtime_env: own.rest }, show),
  );
}

const OWN_HOOK = /^raysight\./; // a worker setup hook of raysight's (raysight.instrument.worker_setup)

/** A runtime env without raysight's RAYSIGHT_* variables and worker setup hook; `hidden`: whether it had any. */
function ownHooks(env) {
  if (!env || typeof env !== "object") return { rest: env, hidden: false };
  const ours = (key, value) => key.startsWith("RAYSIGHT_") || (key === "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR" && OWN_HOOK.test(value));
  const { env_vars: vars = {}, worker_process_setup_hook: hook, ...rest } = env;
  const kept = Object.fromEntries(Object.entries(vars).filter(([k, v]) => !ours(k, String(v))));
  if (Object.keys(kept).length) rest.env_vars = kept;
  if (hook !== undefined && !OWN_HOOK.test(String(hook))) rest.worker_process_setup_hook = hook;
  const hidden = Object.keys(kept).length < Object.keys(vars).length || (hook !== undefined && !("worker_process_setup_hook" in rest));
  return { rest, hidden };
}


/** A node's resources: what it has (Ray's), and its newest use of them (Ray's node stats, as scraped). */
function nodeResources(node, used) {
  return h(
    "section",
    { class: "node-resources" },
    h("h2", {}, "Resources"),
    resourceChips(node.resources_total),
    used ? [h("p", { class: "hint" }, `Use at ${time(used.sampled_ms)}:`), usageBars(used.usage)] : empty("No node stats scraped for this node."),
  );
}

async function one(page, session, kind, id) {
  const spec = KINDS[kind];
  const head = h("div", { class: "details" });
  const logs = h("div", { class: "entity-logs" });
  const showLogs = (printed) => logs.replaceChildren(printed.rows.length ? logLines(printed.rows) : empty("No lines."));
  showLogs(await details(head, session, kind, id));
  page.append(
    h("h1", {}, `${spec.one} `, h("code", {}, id)),
    kind === "jobs" ? "" : h("p", {}, h("a", { href: sessionPath(session, "errors", id), class: "to-failure" }, "Its failures, if any →")),
    head,
  );
  const tables = spec.related(session, id).map(([title, resource, columns, filters]) => {
    const box = h("div", { class: "related" });
    page.append(section(title, box));
    return resourceTable(box, { resource, session, columns, filters, pageSize: 20, ...(resource === "tasks" ? TASK_VIEW : {}) });
  });
  if (PROFILED[kind]) {
    const param = PROFILED[kind];
    const graph = await flameGraph(session, { [param]: id }, `raysight profile --${param} ${id} -o ${param}.svg`);
    page.append(section("Profile (where its tasks' time went)", h("div", { id: `${kind}-profile` }, graph)));
  }
  const asked = kind === "actors" ? await onDemand(session, { actor: id }).catch(() => null) : null;
  if (asked) page.append(section("On-demand profiles (of its worker)", h("div", { id: "actors-captures" }, asked)));
  page.append(section("Logs (newest 200)", logs));
  return {
    refresh: async () => {
      showLogs(await details(head, session, kind, id));
      await Promise.all(tables.map((table) => table.refresh()));
    },
  };
}

export function render(page, { session, kind, id }) {
  return id ? one(page, session, kind, id) : list(page, session, kind);
}
