// A profile, as `raysight profile` draws it: the samples raysight took of a task's attempts (or of every attempt of
// an actor, a function or a job) as a flame graph the server draws, wall clock or on CPU alone.

import { api } from "../api.js";
import { empty, h } from "../dom.js";

const PATH = "/api/raysight/profile";

/** The flame graph of ``params``'s samples (``task``, ``actor``…), with a switch between all samples and those on
 * CPU; nothing (an empty note, which hides its section) where none was sampled. */
export async function flameGraph(session, params, command) {
  const found = await api(PATH, { session, ...params });
  if (!found.samples) return empty("Not sampled.");
  const graph = h("div", { class: "flame" });
  const draw = async (cpuOnly) => {
    const response = await api(PATH, { session, ...params, cpu_only: cpuOnly || undefined, format: "svg" }, { raw: true });
    const svg = new DOMParser().parseFromString(await response.text(), "image/svg+xml").documentElement;
    svg.removeAttribute("height"); // (scaled to the page's width by its viewBox)
    svg.setAttribute("width", "100%");
    graph.replaceChildren(document.importNode(svg, true));
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
