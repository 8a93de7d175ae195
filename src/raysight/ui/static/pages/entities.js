// Jobs, actors, nodes and workers: a table of each, and a page for each one with what it ran and its logs.

import { api } from "../api.js";
import { empty, fields, h, idLink, logLines, resourceChips, section, sessionPath, stateBadge, time, usageBars } from "../dom.js";
import { cells, column, filterBy, resourceTable } from "../table.js";
import { taskColumns } from "./tasks.js";

const KINDS = {
  jobs: {
    title: "Jobs",
    one: "Job",
    id: "job_id",
    logParam: "job",
    columns: (s) => [
      column("Job", "job_id", cells.id(s, "jobs", "job_id")),
      column("Status", "status", cells.state("status"), { tabulator: filterBy(["PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED"]) }),
      column("Entrypoint", "entrypoint"),
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
      column("Death", "death_message"),
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
      column("Why", "state_message"),
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

/** The entity's fields, state history and newest lines: what a live page redraws (its tables refresh themselves). */
async function details(box, session, kind, id) {
  const spec = KINDS[kind];
  const [{ rows }, printed, usage] = await Promise.all([
    api(`/api/raysight/${kind}/${encodeURIComponent(id)}`, { session }),
    api("/api/raysight/logs", { session, [spec.logParam]: id, limit: 200, newest: "true" }),
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
  box.replaceChildren(
    entity.state_inferred ? h("p", { class: "inferred-reason" }, `State inferred by raysight: ${entity.inferred_reason}`) : "",
    usage ? nodeResources(entity, usage.nodes[0]) : "",
    fields(rest, show),
    events?.length
      ? section(
          "State history",
          h("table", { class: "plain transitions" }, events.map((e) => h("tr", {}, h("td", {}, time(e.created_ms)), h("td", {}, stateBadge(e.state))))),
        )
      : "",
  );
  return printed;
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
    h(
      "p",
      {},
      h("a", { href: sessionPath(session, "errors", id), class: "to-failure" }, "Its failures, if any →"),
      kind === "jobs" ? [" · ", h("a", { href: `${sessionPath(session, "timeline")}?job=${encodeURIComponent(id)}` }, "its timeline →")] : "",
    ),
    head,
  );
  const tables = spec.related(session, id).map(([title, resource, columns, filters]) => {
    const box = h("div", { class: "related" });
    page.append(section(title, box));
    return resourceTable(box, { resource, session, columns, filters, pageSize: 20 });
  });
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
