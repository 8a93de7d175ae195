// Log search: by text or regex and by entity (a Serve replica or request too), newest first; for a live session,
// follow new lines as they come. A Ray dashboard's lines of raysight's own requests are left out unless asked for.

import { api } from "../api.js";
import { showError } from "../banner.js";
import { empty, h, logLines } from "../dom.js";

const FOLLOW_EVERY_MS = 1000;
const ENTITIES = ["task", "actor", "job", "worker", "node", "replica", "request_id"]; // (the API's parameters)
const SHOWN = 500;
const FLAGS = ["regex", "own", "follow"]; // the checkboxes, kept in the page's address as 1

export async function render(page, { session }) {
  const query = new URLSearchParams(location.search);
  const input = (name, label, attrs = {}) =>
    h("label", {}, `${label} `, h("input", { name, value: query.get(name) ?? "", ...attrs }));
  const form = h(
    "form",
    { class: "log-search", id: "log-search" },
    input("grep", "Text", { placeholder: "text in the line", size: 30 }),
    h("label", {}, h("input", { type: "checkbox", name: "regex", checked: query.get("regex") === "1" }), " regex"),
    ENTITIES.map((e) => input(e, e.replace(/_id$/, ""), { size: 14, placeholder: "ID" })),
    h(
      "label",
      {},
      "stream ",
      h("select", { name: "stream" }, ["", "stdout", "stderr", "system"].map((s) => h("option", { value: s, selected: query.get("stream") === s }, s || "any"))),
    ),
    h("label", { title: "the lines Ray's dashboard logs of raysight's own requests (User-Agent raysight/…)" }, h("input", { type: "checkbox", name: "own", checked: query.get("own") === "1" }), " raysight's requests"),
    h("button", { type: "submit" }, "Search"),
    h("label", {}, h("input", { type: "checkbox", name: "follow", checked: query.get("follow") === "1" }), " follow"),
  );
  const status = h("p", { class: "hint", id: "log-status" });
  const out = h("div", { id: "log-lines" });
  page.append(h("h1", {}, "Logs"), form, status, out);

  const params = () => {
    const data = new FormData(form);
    const text = data.get("grep");
    const p = { session, stream: data.get("stream") || undefined, include_own: data.get("own") ? "true" : undefined };
    if (text) p[data.get("regex") ? "regex" : "grep"] = text;
    for (const e of ENTITIES) if (data.get(e)) p[e] = data.get(e).trim();
    return p;
  };
  let lastSeq = null;
  let timer = null;

  const search = async () => {
    const answer = await api("/api/raysight/logs", { ...params(), limit: SHOWN, newest: "true" });
    lastSeq = answer.last_seq;
    status.textContent = `${answer.total} matching line(s)${answer.total > SHOWN ? `, the newest ${SHOWN} shown` : ""}`;
    out.replaceChildren(answer.rows.length ? logLines([...answer.rows].reverse()) : empty("No lines match."));
  };
  const follow = async () => {
    const answer = await api("/api/raysight/logs", { ...params(), after: lastSeq, limit: SHOWN, count: "false" });
    if (!answer.rows.length) return;
    lastSeq = answer.last_seq;
    const pre = out.querySelector("pre") ?? out.appendChild(h("pre", { class: "log" }));
    out.querySelector(".empty")?.remove();
    pre.prepend(...logLines([...answer.rows].reverse()).childNodes); // newest first
  };
  const setFollow = (on) => {
    clearInterval(timer);
    timer = on ? setInterval(() => follow().catch(showError), FOLLOW_EVERY_MS) : null;
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const next = new URLSearchParams();
    for (const [k, v] of data) if (v && !FLAGS.includes(k)) next.set(k, v);
    for (const flag of FLAGS) if (data.get(flag)) next.set(flag, "1");
    history.replaceState(history.state, "", `${location.pathname}${next.toString() ? `?${next}` : ""}`);
    search().catch(showError);
  });
  form.elements.follow.addEventListener("change", (event) => setFollow(event.target.checked));
  await search();
  setFollow(form.elements.follow.checked);
  return { stop: () => setFollow(false) };
}
