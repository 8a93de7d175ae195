// The task stream, as Dask draws it: a lane per worker, a bar per task attempt coloured by its function (failed
// ones underlined in red), zoomed and panned with the wheel and the mouse (d3-zoom), a bar's task opened by a click.
// Bars are drawn on a canvas from columns of typed arrays; each frame draws only the bars in view (found by binary
// search in each lane) and at most one per pixel column and lane, so 100k attempts cost what the screen can show.

import { api } from "../api.js";
import { duration, empty, h, sessionPath } from "../dom.js";

/** d3's bundle (a classic script, loaded once, by the first timeline shown). */
function loadD3() {
  if (globalThis.d3) return Promise.resolve(globalThis.d3);
  return new Promise((resolve, reject) => {
    const script = Object.assign(document.createElement("script"), { src: "/ui/vendor/d3.js" });
    script.addEventListener("load", () => resolve(globalThis.d3));
    script.addEventListener("error", () => reject(new Error("could not load /ui/vendor/d3.js")));
    document.head.append(script);
  });
}

const d3 = await loadD3();
const GUTTER = 180; // px for the lanes' names
const AXIS = 22; // px for the time axis above the lanes
const FAILED = "#dc2626";
const TERMINAL = new Set(["FINISHED", "FAILED"]);
const COLOURS = [...d3.schemeTableau10, ...d3.schemeSet3, ...d3.schemePastel1];

/** The API's columns as typed arrays, with each lane's range of bars and a running maximum of their ends. */
export function stream(data) {
  const n = data.lane.length;
  const start = new Float64Array(data.start_us);
  let last = 0;
  for (let i = 0; i < n; i++) last = Math.max(last, data.end_us[i] ?? start[i], start[i]);
  const first = n ? start.reduce((a, b) => Math.min(a, b)) : 0;
  const end = Float64Array.from(data.end_us, (e) => e ?? last); // still running: to the last time seen
  const ranges = data.lanes.map(() => ({ from: 0, to: 0 })); // each lane's bars: [from, to)
  const reach = new Float64Array(n); // the furthest end of the lane's bars up to each one
  for (let i = 0; i < n; i++) {
    const lane = ranges[data.lane[i]];
    if (i === 0 || data.lane[i] !== data.lane[i - 1]) {
      lane.from = i;
      reach[i] = end[i];
    } else reach[i] = Math.max(reach[i - 1], end[i]);
    lane.to = i + 1;
  }
  return { ...data, n, start, end, reach, ranges, first, last: Math.max(last, first + 1), fnIndex: Int32Array.from(data.fn), failed: Uint8Array.from(data.state, (s) => s === "FAILED") };
}

function firstReaching(s, lane, t) {
  let lo = lane.from;
  let hi = lane.to;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (s.reach[mid] < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The bar under time `t` in lane `l` (the latest started that has not ended; within `slack` µs), or -1. */
export function barAt(s, l, t, slack) {
  const lane = s.ranges[l];
  if (!lane) return -1;
  for (let i = firstReaching(s, lane, t - slack); i < lane.to && s.start[i] <= t + slack; i++) {
    if (s.end[i] >= t - slack) return i;
  }
  return -1;
}

function laneName(lane) {
  const worker = lane.pid ? `pid ${lane.pid}` : lane.worker_id ? `worker ${lane.worker_id.slice(0, 8)}` : "worker unknown";
  return lane.node_id ? `${worker} · node ${lane.node_id.slice(0, 8)}` : worker;
}

class Stream {
  constructor(box, session) {
    this.session = session;
    this.canvas = h("canvas", { class: "stream", "aria-label": "task stream" });
    this.tip = h("div", { class: "stream-tip", hidden: true });
    this.legend = h("ul", { class: "legend" });
    box.append(this.legend, h("div", { class: "stream-box" }, this.canvas, this.tip));
    this.transform = d3.zoomIdentity;
    this.frames = 0;
    this.zoom = d3.zoom().on("zoom", (event) => {
      this.transform = event.transform;
      this.schedule();
    });
    d3.select(this.canvas).call(this.zoom).on("dblclick.zoom", null);
    this.canvas.addEventListener("mousemove", (event) => this.hover(event));
    this.canvas.addEventListener("mouseleave", () => (this.tip.hidden = true));
    this.canvas.addEventListener("click", (event) => this.open(event));
    this.resize = () => this.layout();
    window.addEventListener("resize", this.resize);
  }

  show(data) {
    this.s = stream(data);
    this.canvas.dataset.bars = this.s.n;
    this.legend.replaceChildren(
      ...data.functions.slice(0, COLOURS.length).map((name, i) => h("li", {}, h("span", { class: "swatch", style: `background:${COLOURS[i]}` }), name || "(unnamed)")),
      h("li", {}, h("span", { class: "swatch failed" }), "failed attempt"),
    );
    this.layout();
  }

  layout() {
    const lanes = this.s.lanes.length;
    this.laneHeight = Math.max(4, Math.min(22, Math.floor(520 / Math.max(lanes, 1))));
    const width = Math.max(480, this.canvas.parentElement.clientWidth);
    const height = AXIS + lanes * this.laneHeight;
    const ratio = window.devicePixelRatio || 1;
    Object.assign(this.canvas, { width: width * ratio, height: height * ratio });
    Object.assign(this.canvas.style, { width: `${width}px`, height: `${height}px` });
    Object.assign(this.canvas.dataset, { laneHeight: this.laneHeight, top: AXIS, gutter: GUTTER, lanes });
    this.width = width;
    this.height = height;
    this.ratio = ratio;
    this.x = d3.scaleLinear().domain([this.s.first, this.s.last]).range([GUTTER, width]);
    const extent = [[GUTTER, 0], [width, height]];
    this.zoom.extent(extent).translateExtent(extent).scaleExtent([1, Math.max(1, (this.s.last - this.s.first) / 10)]);
    this.schedule();
  }

  schedule() {
    if (this.pending) return;
    this.pending = requestAnimationFrame(() => {
      this.pending = null;
      this.draw();
    });
  }

  draw() {
    const began = performance.now();
    const { s, laneHeight, width, height } = this;
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(this.ratio, 0, 0, this.ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const zx = this.transform.rescaleX(this.x);
    const [t0, t1] = zx.domain();
    const scale = (width - GUTTER) / (t1 - t0);
    let drawn = 0;
    ctx.save();
    ctx.beginPath();
    ctx.rect(GUTTER, 0, width - GUTTER, height);
    ctx.clip();
    for (let l = 0; l < s.lanes.length; l++) {
      const lane = s.ranges[l];
      const y = AXIS + l * laneHeight;
      const barHeight = Math.max(2, laneHeight - 2);
      let painted = -Infinity; // the last pixel column this lane has a bar in
      for (let i = firstReaching(s, lane, t0); i < lane.to && s.start[i] <= t1; i++) {
        const left = GUTTER + (s.start[i] - t0) * scale;
        const right = Math.max(left + 1, GUTTER + (s.end[i] - t0) * scale);
        if (right <= painted + 1) continue; // within a column already painted: one bar per pixel
        const from = Math.max(left, painted);
        ctx.fillStyle = COLOURS[s.fnIndex[i] % COLOURS.length];
        ctx.fillRect(from, y, right - from, barHeight);
        if (s.failed[i]) {
          ctx.fillStyle = FAILED;
          ctx.fillRect(from, y + barHeight - 2, right - from, 2);
        }
        painted = right;
        drawn++;
      }
    }
    ctx.restore();
    this.drawAxis(ctx, zx);
    this.drawLanes(ctx);
    this.frames++;
    const view = `${Math.round(t0 - s.first)},${Math.round(t1 - s.first)}`; // µs from the first start, in view
    Object.assign(this.canvas.dataset, { drawn, view, frames: this.frames, drawMs: (performance.now() - began).toFixed(2) });
  }

  drawAxis(ctx, zx) {
    ctx.fillStyle = "#6b7280";
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    for (const t of zx.ticks(Math.max(2, Math.floor((this.width - GUTTER) / 110)))) {
      const px = zx(t);
      ctx.fillRect(px, AXIS - 5, 1, 5);
      ctx.fillText(`+${duration((t - this.s.first) / 1000)}`, px + 3, AXIS / 2);
    }
  }

  drawLanes(ctx) {
    ctx.clearRect(0, AXIS, GUTTER - 4, this.height - AXIS);
    if (this.laneHeight < 9) return; // too thin to name: the tooltip names them
    ctx.fillStyle = "#374151";
    this.s.lanes.forEach((lane, l) => ctx.fillText(laneName(lane), 4, AXIS + l * this.laneHeight + this.laneHeight / 2));
  }

  /** The bar under the mouse, or -1. */
  pick(event) {
    const rect = this.canvas.getBoundingClientRect();
    const px = event.clientX - rect.left;
    const l = Math.floor((event.clientY - rect.top - AXIS) / this.laneHeight);
    if (px < GUTTER || l < 0 || l >= this.s.lanes.length) return { l: -1, i: -1 };
    const zx = this.transform.rescaleX(this.x);
    return { l, i: barAt(this.s, l, zx.invert(px), Math.abs(zx.invert(px + 2) - zx.invert(px))) };
  }

  hover(event) {
    const { l, i } = this.pick(event);
    this.canvas.style.cursor = i >= 0 ? "pointer" : "";
    if (i < 0) {
      this.tip.hidden = true;
      return;
    }
    const s = this.s;
    this.tip.replaceChildren(
      h("strong", {}, s.functions[s.fnIndex[i]] || "(unnamed)"),
      h("div", {}, `${s.state[i]} · attempt ${s.attempt[i]} · ${s.end_us[i] !== null ? duration((s.end[i] - s.start[i]) / 1000) : TERMINAL.has(s.state[i]) ? "its end was not reported" : `${duration((s.end[i] - s.start[i]) / 1000)} so far`}`),
      h("div", { class: "id" }, s.task_id[i]),
      h("div", {}, laneName(s.lanes[l])),
    );
    const rect = this.canvas.getBoundingClientRect();
    Object.assign(this.tip.style, { left: `${event.clientX - rect.left + 12}px`, top: `${event.clientY - rect.top + 12}px` });
    this.tip.hidden = false;
  }

  open(event) {
    const { i } = this.pick(event);
    if (i < 0) return;
    history.pushState({}, "", `${sessionPath(this.session, "tasks", this.s.task_id[i])}#attempt-${this.s.attempt[i]}`);
    dispatchEvent(new PopStateEvent("popstate"));
  }

  stop() {
    window.removeEventListener("resize", this.resize);
    cancelAnimationFrame(this.pending);
  }
}

export async function render(page, { session }) {
  const job = new URLSearchParams(location.search).get("job");
  const load = () => api("/api/raysight/task-stream", { session, job });
  const data = await load();
  page.append(
    h("h1", {}, "Timeline", job ? ` of job ${job}` : ""),
    h("p", { class: "hint" }, "A lane per worker, a bar per task attempt. Wheel to zoom, drag to pan, click a bar to open its task. For Perfetto: ", h("code", {}, `raysight timeline --session ${session}${job ? ` --job ${job}` : ""} -o trace.json`)),
  );
  if (data.truncated) page.append(h("p", { class: "hint" }, `Showing the first ${data.lane.length.toLocaleString()} attempts by start time.`));
  if (!data.lane.length) {
    page.append(empty("No task attempt has started in this session yet."));
    return { refresh: () => rerenderEmpty(page, load) };
  }
  const view = new Stream(page, session);
  view.show(data);
  return { refresh: async () => view.show(await load()), stop: () => view.stop() };
}

async function rerenderEmpty(page, load) {
  if ((await load()).lane.length) dispatchEvent(new PopStateEvent("popstate"));
}
