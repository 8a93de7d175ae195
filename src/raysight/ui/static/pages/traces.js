// Traces: a session's, newest first (each leading to its waterfall), and one trace as a waterfall: a row a span,
// indented under its parent, its bar placed by its start and length within the trace, the critical path (what the
// trace's end waited on) marked; a task's span leads to the task's page and attempt.

import { api } from "../api.js";
import { duration, empty, h, sessionPath, time } from "../dom.js";

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

function list(page, session, traces) {
  page.append(
    h("h1", {}, "Traces"),
    traces.length
      ? h(
          "table",
          { class: "plain traces-table" },
          h("tr", {}, ["Root", "Started", "Duration", "Spans", "Failed", "Jobs"].map((t) => h("th", {}, t))),
          traces.map((t) =>
            h(
              "tr",
              {},
              h("td", {}, h("a", { href: sessionPath(session, "traces", t.trace_id) }, t.root)),
              h("td", {}, time(ms(t.start_ns))),
              h("td", {}, duration(ms(t.duration_ns))),
              h("td", {}, t.spans),
              h("td", { class: t.errors ? "error" : "" }, t.errors || ""),
              h("td", {}, t.jobs.join(", ")),
            ),
          ),
        )
      : empty("No traces in this session."),
  );
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
  if (id) waterfall(page, session, await api(`/api/raysight/traces/${encodeURIComponent(id)}`));
  else list(page, session, (await api("/api/raysight/traces", { session, limit: 200 })).traces);
}
