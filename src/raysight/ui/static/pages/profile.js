// A profile, as `raysight profile` draws it: the samples raysight took of a task's attempts (or of every attempt of
// an actor, a function or a job) as a flame graph the server draws, wall clock or on CPU alone; and the on-demand
// profiles asked of a live task or actor (`raysight profile stack|cpu|memory`).

import { api } from "../api.js";
import { empty, h, time } from "../dom.js";

const PATH = "/api/raysight/profile";
const CAPTURES = "/api/raysight/profiles";

/** ``svg``'s text as an element scaled to the page's width (by its viewBox). */
function scaled(text) {
  const svg = new DOMParser().parseFromString(text, "image/svg+xml").documentElement;
  svg.removeAttribute("height");
  svg.setAttribute("width", "100%");
  return document.importNode(svg, true);
}

/** The profiles of ``params``'s task or actor, newest first (those asked on demand, and Serve's memray captures of an
 * actor), each shown when chosen: its flame graph (the server draws it), py-spy's dump of its threads, or why it
 * failed; a Serve capture's memray file to download, for memray's reporters; null where there is none. */
export async function onDemand(session, params) {
  const found = await api(CAPTURES, { session, ...params });
  if (!found.rows.length) return null;
  const shown = h("div", { class: "flame capture" });
  const show = async (row) => {
    if (row.status !== "done") {
      shown.replaceChildren(h("p", {}, row.error || `${row.status}…`));
    } else if (row.kind === "stack") {
      const whole = await api(`${CAPTURES}/${row.capture_id}`);
      shown.replaceChildren(h("pre", { class: "stack" }, whole.text));
    } else {
      const response = await api(`${CAPTURES}/${row.capture_id}`, { format: "svg" }, { raw: true });
      shown.replaceChildren(scaled(await response.text()));
    }
  };
  const lasting = (row) => (row.duration_s ? ` ${row.duration_s}s` : "");
  const rows = found.rows.map((row) =>
    h(
      "tr",
      {},
      h("td", {}, h("button", { type: "button", class: "capture-show", onclick: () => show(row) }, `${row.kind}${lasting(row)}`)),
      h("td", {}, time(row.requested_ns / 1e6)),
      h("td", {}, row.client),
      h("td", {}, `pid ${row.pid}`),
      h("td", {}, row.status),
      h("td", {}, row.file_kept ? memrayFile(row, shown) : ""),
    ),
  );
  await show(found.rows[0]);
  return h(
    "div",
    { class: "captures" },
    h("table", {}, h("thead", {}, h("tr", {}, ...["profile", "asked", "by", "process", "status", ""].map((c) => h("th", {}, c)))), h("tbody", {}, ...rows)),
    shown,
  );
}

/** A button that downloads a Serve capture's memray file (fetched with the dashboard's token, then saved); why
 * not, in ``said``, where it cannot. */
function memrayFile(row, said) {
  const save = async () => {
    try {
      const response = await api(`${CAPTURES}/${row.capture_id}/file`, {}, { raw: true });
      const link = h("a", { href: URL.createObjectURL(await response.blob()), download: row.file });
      link.click();
      setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
    } catch (error) {
      said.replaceChildren(h("p", {}, error.message));
    }
  };
  return h("button", { type: "button", class: "capture-file", title: `memray flamegraph ${row.file}`, onclick: save }, "memray file");
}

/** The flame graph of ``params``'s samples (``task``, ``actor``…), with a switch between all samples and those on
 * CPU; nothing (an empty note, which hides its section) where none was sampled. */
export async function flameGraph(session, params, command) {
  const found = await api(PATH, { session, ...params });
  if (!found.samples) return empty("Not sampled.");
  const graph = h("div", { class: "flame" });
  const draw = async (cpuOnly) => {
    const response = await api(PATH, { session, ...params, cpu_only: cpuOnly || undefined, format: "svg" }, { raw: true });
    graph.replaceChildren(scaled(await response.text()));
  };
  const choice = (label, cpuOnly) =>
    h("label", {}, h("input", { type: "radio", name: "flame-samples", checked: !cpuOnly, onchange: () => draw(cpuOnly) }), ` ${label}`);
  await draw(false);
  return h(
    "div",
    { class: "profile" },
    h("p", {}, `${found.samples.toLocaleString()} samples (${found.wall_s.toFixed(2)} s, ${found.cpu_s.toFixed(2)} s on CPU) of ${found.attempts} attempt${found.attempts === 1 ? "" : "s"}. `, choice("all samples", false), " ", choice("on CPU", true)),
    graph,
    h("p", { class: "hint" }, "In a terminal: ", h("code", {}, command)),
  );
}
