// Traces: a session's, newest first (each leading to its waterfall), and one trace as a waterfall: a row a span,
// indented under its parent, its bar placed by its start and length within the trace, the critical path (what the
// trace's end waited on) marked; a task's span leads to the task's page and attempt.

import { api } from "../api.js";
import { duration, empty, h, sessionPath, time } from "../dom.js";
import { column, filterBy, readParams, resourceTable } from "../table.js";

const ms = (ns) => ns / 1e6;

/** The traces of a task (or any of the API's filters), as links to their pages; what a task's page shows. */
export async function traceLinks(session, filters) {
  const { traces } = await api("/api/raysight/traces", { session, ...filters, limit: 20 });
  if (!traces.length) return empty("No trace holds this task (tracing off, or not sampled).");
  return h(
    "ul",
    { class: "traces" },
    traces.map((t) =>
      h(
        "li",
        {},
        h("a", { href: sessionPath(session, "traces", t.trace_id), class: "trace-link" }, t.root),
        ` · ${duration(ms(t.duration_ns))} · ${t.spans} spans`,
        t.errors ? h("span", { class: "error" }, ` · ${t.errors} failed`) : "",
      ),
    ),
  );
}

// The header filters of the traces table, as the API's parameters: a span's name, a job, a Serve request, a shortest
// duration, failed only
const readTraces = readParams("/api/raysight/traces", { root: "name", jobs: "job", requests: "request", duration_ns: "min_duration", errors: "error" }, "traces");

function list(page, session) {
  const box = h("div", { id: "traces-table", class: "traces-table" });
  page.append(h("h1", {}, "Traces"), h("p", { class: "hint" }, "Newest first; filter by a span's name, a job, a Serve request's ID, a shortest duration (250ms, 2s) or failed only."), box);
  const unsorted = (options = {}) => ({ sort: false, ...options });
  const table = resourceTable(box, {
    resource: "traces",
    session,
    syncUrl: true,
    read: readTraces,
    columns: [
      column("Root", "root", (t) => h("a", { href: sessionPath(session, "traces", t.trace_id), class: t.errors ? "trace-link failed" : "trace-link" }, t.root), unsorted({ tabulator: filterBy() })),
      column("Started", "start_ns", (t) => time(ms(t.start_ns)), unsorted()),
      column("Duration", "duration_ns", (t) => duration(ms(t.duration_ns)), unsorted({ tabulator: { ...filterBy(), headerFilterPlaceholder: "at least…" } })),
      column("Spans", "spans", null, unsorted()),
      column("Failed", "errors", (t) => (t.errors ? h("span", { class: "state state-failed" }, `${t.errors} failed`) : ""), unsorted({ tabulator: { headerFilter: "list", headerFilterParams: { values: { "": "any", true: "failed only" } } } })),
      column("Jobs", "jobs", (t) => t.jobs.join(", "), unsorted({ tabulator: filterBy() })),
      column("Serve requests", "requests", (t) => t.requests.join(", "), unsorted({ text: true, tabulator: filterBy() })),
    ],
  });
  return { refresh: table.refresh };
}

function where(session, span) {
  if (!span.task_id) return span.pid ? `pid ${span.pid}` : "";
  const attempt = span.attempt ?? 0;
  return h(
    "a",
    { href: `${sessionPath(session, "tasks", span.task_id)}#attempt-${attempt}`, class: "to-task", title: span.task_id },
    `task ${span.task_id.slice(0, 12)}…${attempt ? ` attempt ${attempt}` : ""}`,
  );
}

function waterfall(page, session, trace) {
  const total = Math.max(trace.duration_ns, 1);
  page.append(
    h("h1", {}, `Trace ${trace.spans.find((s) => s.depth === 0)?.name ?? ""}`),
    h("p", { class: "id-line" }, h("code", {}, trace.trace_id), ` · ${duration(ms(trace.duration_ns))} · ${trace.spans.length} span${trace.spans.length === 1 ? "" : "s"} · started ${time(ms(trace.start_ns))}`),
    h("p", { class: "hint" }, "Bars on the critical path (what the trace's end waited on) are dark."),
    h(
      "div",
      { class: "waterfall" },
      trace.spans.map((span) => {
        const left = ((span.start_ns - trace.start_ns) / total) * 100;
        const width = Math.max(((span.end_ns - span.start_ns) / total) * 100, 0.2);
        const failed = span.status === "error";
        return h(
          "div",
          { class: `span-row${span.critical ? " critical" : ""}${failed ? " failed" : ""}`, "data-span": span.span_id },
          h(
            "div",
            { class: "span-name", style: `padding-left: ${span.depth * 1.2}rem`, title: span.status_message ?? "" },
            span.name,
            " ",
            h("span", { class: "span-where" }, where(session, span)),
          ),
          h(
            "div",
            { class: "span-track" },
            h("div", { class: "span-bar", style: `left: ${left}%; width: ${width}%`, title: `${span.name}: ${duration(ms(span.end_ns - span.start_ns))}` }),
          ),
          h("div", { class: "span-duration" }, duration(ms(span.end_ns - span.start_ns)), failed ? h("span", { class: "error" }, " failed") : ""),
        );
      }),
    ),
  );
}

export async function render(page, { session, id }) {
  if (id) return waterfall(page, session, await api(`/api/raysight/traces/${encodeURIComponent(id)}`));
  return list(page, session);
}
