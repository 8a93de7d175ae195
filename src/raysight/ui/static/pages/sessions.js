// Every recorded session: its label, span, size and failures.

import { api } from "../api.js";
import { bytes, duration, empty, h, sessionPath, time } from "../dom.js";
import { column, localTable } from "../table.js";

// How a session ended, in a word or two, by the server's reason for it (whole in the badge's title)
const ENDINGS = [
  [/driver .* exited/, "driver exited"],
  [/every node .* died/, "nodes died"],
  [/gcs_server .* gone/, "cluster stopped"],
  [/later session .* began/, "next session began"],
];

function ending(s) {
  if (s.end_time_ms === null) return h("span", { class: "live" }, "live");
  const reason = s.end_reason ?? "";
  const word = ENDINGS.find(([pattern]) => pattern.test(reason))?.[1] ?? "ended";
  return h("span", { class: "end-reason", title: reason || false }, word);
}

export async function render(page) {
  const { sessions } = await api("/api/raysight/sessions");
  page.append(h("h1", {}, "Sessions"));
  if (!sessions.length) {
    page.append(empty("No sessions yet: run `raysight run -- python app.py` (or `raysight demo`) and they appear here."));
    return null;
  }
  const rows = sessions.map((s) => ({ ...s, span_ms: (s.end_time_ms ?? s.last_event_ms) - s.start_time_ms }));
  const box = h("div", { id: "sessions" });
  page.append(box);
  localTable(box, rows, [
    column("Session", "session", (s) => h("a", { href: sessionPath(s.session), class: "session-link" }, s.session)),
    column("Label", "label"),
    column("Started", "start_time_ms", (s) => time(s.start_time_ms)),
    column("Ended", "end_time_ms", (s) => (s.end_time_ms === null ? h("span", { class: "live" }, "live") : time(s.end_time_ms))),
    column("Span", "span_ms", (s) => duration(s.span_ms)),
    column("Nodes", "nodes"),
    column("Jobs", "jobs"),
    column("Tasks", "tasks"),
    column("Failures", "failures", (s) =>
      s.failures ? h("a", { href: sessionPath(s.session, "errors"), class: "failures" }, String(s.failures)) : "0",
    ),
    column("How it ended", "end_reason", ending, { tabulator: { minWidth: 130 } }),
    column("Events", "events", null, { hidden: true }),
    column("Raw size", "raw_bytes", (s) => bytes(s.raw_bytes), { hidden: true }),
  ]);
  return null;
}
