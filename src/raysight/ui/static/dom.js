// Building the page: elements from data (text is always text: nothing from the API becomes markup), links to each
// entity's page, and the formats times and IDs are shown in.

export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (key === "class") element.className = value;
    else element.setAttribute(key, value === true ? "" : value);
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(element, child);
    else element.append(child instanceof Node ? child : String(child));
  }
}

/** The URL of a page of a session: sessionPath("s", "tasks", id) → /ui/sessions/s/tasks/id */
export function sessionPath(session, ...parts) {
  return ["/ui/sessions", ...[session, ...parts].map(encodeURIComponent)].join("/"); // (an ID's / kept as %2F)
}

const SHORT = 12;

/** A link to an entity's page, its ID shortened (the whole ID in its title). */
export function idLink(session, kind, id, text) {
  if (!id) return "";
  const shown = text ?? (id.length > SHORT ? `${id.slice(0, SHORT)}…` : id);
  return h("a", { href: sessionPath(session, kind, id), title: id, class: "id" }, shown);
}

export function time(ms) {
  if (ms === null || ms === undefined) return "";
  const d = new Date(ms);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "";
  if (ms < 1) return `${(ms * 1000).toFixed(0)} µs`;
  if (ms < 1000) return `${ms.toFixed(ms < 10 ? 2 : 0)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(2)} s`;
  const s = Math.round(ms / 1000);
  return s < 3600 ? `${Math.floor(s / 60)} m ${s % 60} s` : `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} m`;
}

export function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  for (; n >= 1024 && i < units.length - 1; i++) n /= 1024;
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

/** A state, marked when raysight inferred it (Ray never sent it), the reason in its title. */
export function stateBadge(state, inferred, reason) {
  return h(
    "span",
    { class: `state state-${String(state ?? "").toLowerCase()}${inferred ? " inferred" : ""}`, title: reason ?? "" },
    state ?? "",
    inferred ? " *" : "",
  );
}

export function section(title, ...children) {
  return h("section", {}, h("h2", {}, title), ...children);
}

/** Whether a value says nothing: null, undefined, "", [] or {}. */
function blank(value) {
  if (value === null || value === undefined || value === "") return true;
  return typeof value === "object" && Object.keys(value).length === 0;
}

/** A definition list of an object's fields, the values made by `show` (text by default); blank fields left out. */
export function fields(object, show = {}) {
  return h(
    "dl",
    { class: "fields" },
    Object.entries(object)
      .filter(([, value]) => !blank(value))
      .flatMap(([key, value]) => [
        h("dt", {}, key),
        h("dd", {}, show[key] ? show[key](value) : typeof value === "object" ? JSON.stringify(value) : String(value)),
      ]),
  );
}

/** A long text (or a node holding one) shown in two lines at most, the whole text on hover. */
export function clamped(value) {
  const content = value instanceof Node ? value : String(value ?? "");
  const text = value instanceof Node ? value.textContent : content;
  return h("div", { class: "clamp", title: text || false }, content);
}

export function empty(text) {
  return h("p", { class: "empty" }, text);
}

/** Log lines as `raysight logs` prints them: each with its source, text kept as text; a line of a known task attempt
 * links to it (unless ``task`` is false: the lines of one task), and a line written inside a span (its trace ID read
 * from it) to its trace. */
export function logLines(rows, { task = true } = {}) {
  const taskLink = (row) => {
    const href = `${sessionPath(row.session, "tasks", row.task_id)}#attempt-${row.attempt}`;
    return [h("a", { class: "line-task", href, title: `its task ${row.task_id}, attempt ${row.attempt}` }, "task"), " "];
  };
  return h(
    "pre",
    { class: "log" },
    rows.map((row) =>
      h(
        "div",
        { class: row.context ? "line context" : "line" },
        h("span", { class: "src" }, linePrefix(row)),
        " ",
        task && row.task_id ? taskLink(row) : "",
        row.trace_id ? [h("a", { class: "line-trace", href: sessionPath(row.session, "traces", row.trace_id), title: `its trace (span ${row.span_id ?? "?"})` }, "trace"), " "] : "",
        row.text,
      ),
    ),
  );
}

/** Ray's prefix for a line, as `raysight logs` prints it: (task pid=N), (Class pid=N), or [file] for Ray's own. */
export function linePrefix(row) {
  if (row.stream === "system" || row.pid === null) return `[${row.name}]`;
  const who = row.actor_name ? row.actor_name.split("(")[0] : row.task_name || "worker";
  return `(${who} pid=${row.pid})`;
}

// Ray's names of the resources shown, in the order shown, and how an amount of each reads
const RESOURCES = [
  ["CPU", "CPU", (n) => `${+n.toFixed(2)}`],
  ["GPU", "GPU", (n) => `${+n.toFixed(2)}`],
  ["memory", "memory", bytes],
  ["object_store_memory", "object store", bytes],
];

/** What a node has (Ray's resources, `{"CPU": 2, "memory": …}`) as chips: CPU 2 · memory 16.1 GB · … */
export function resourceChips(total) {
  const known = RESOURCES.filter(([name]) => total?.[name]);
  return h("span", { class: "chips" }, known.map(([name, label, show]) => h("span", { class: "chip" }, `${label} ${show(total[name])}`)));
}

/** What was used of what there was (`{"CPU": {"used", "total"}, …}`): a bar of each, "used of total" beside it. */
export function usageBars(usage) {
  const known = RESOURCES.filter(([name]) => usage?.[name]?.total);
  return h(
    "div",
    { class: "bars" },
    known.map(([name, label, show]) => {
      const { used, total } = usage[name];
      const percent = Math.min(100, (100 * used) / total);
      return h(
        "div",
        { class: "bar", title: `${label}: ${percent.toFixed(0)}%` },
        h("span", { class: "bar-label" }, label),
        h("span", { class: "bar-track" }, h("span", { class: "bar-fill", style: `width: ${percent.toFixed(1)}%` })),
        h("span", { class: "bar-text" }, `${show(used)} of ${show(total)}`),
      );
    }),
  );
}
