// Tables of the API's resources (Tabulator): paged, sorted and filtered by the server, so a table of a million
// tasks costs the browser one page. Cells are built as DOM nodes, never as markup from data.

import { TabulatorFull as Tabulator } from "/ui/vendor/tabulator.mjs";
import { api } from "./api.js";
import { showError } from "./banner.js";
import { clamped, duration, h, idLink, stateBadge, time } from "./dom.js";

export const PAGE_SIZE = 50;

const TEXT_WIDTH = 420; // px: a long text column's most, its text wrapped to two lines within it

/**
 * A column whose cells are made by `make(row)` (a node or text). `text`: a long text (a message, an entrypoint), shown
 * in two lines at most and whole on hover; `hidden`: rarely needed, shown by the table's "more columns" toggle.
 */
export function column(title, field, make, options = {}) {
  const shown = make ?? ((row) => row[field]);
  const long = options.text ? { maxWidth: TEXT_WIDTH, variableHeight: true, cssClass: "text" } : {};
  return {
    title,
    field,
    headerSort: options.sort ?? true,
    formatter: make || options.text ? (cell) => cellNode(shown(cell.getData()), options.text) : undefined,
    visible: !options.hidden,
    ...long,
    ...options.tabulator,
  };
}

function cellNode(value, long) {
  if (long) return clamped(value);
  return value instanceof Node ? value : document.createTextNode(value ?? "");
}

/** A "more columns" toggle before `element` when its table has hidden columns: it shows or hides them all. */
function moreColumns(element, table, columns) {
  const hidden = columns.filter((c) => c.visible === false);
  if (!hidden.length) return;
  const toggle = h("button", { type: "button", class: "more-columns", "aria-pressed": "false", title: hidden.map((c) => c.title).join(", ") }, "More columns");
  toggle.addEventListener("click", () => {
    const show = toggle.getAttribute("aria-pressed") === "false";
    for (const c of hidden) {
      if (show) table.showColumn(c.field);
      else table.hideColumn(c.field);
    }
    toggle.setAttribute("aria-pressed", String(show));
    toggle.textContent = show ? "Fewer columns" : "More columns";
  });
  element.before(h("div", { class: "table-tools" }, toggle));
}

export const cells = {
  id: (session, kind, field) => (row) => idLink(session, kind, row[field]),
  state: (field = "state") => (row) => stateBadge(row[field], row.state_inferred, row.inferred_reason),
  time: (field) => (row) => time(row[field]),
  duration: (field) => (row) => duration(row[field]),
};

/** A header filter that asks the server for `field=value` (a select of `values`, else free text). */
export function filterBy(values) {
  return values
    ? { headerFilter: "list", headerFilterParams: { values: ["", ...values], clearable: true } }
    : { headerFilter: "input", headerFilterLiveFilter: false };
}

/**
 * A table of `/api/raysight/<resource>` in `session`: `filters` always applied (`key=value`), the header filters
 * and sorts the user picks sent to the server (`defaultSort`, the server's sort keys, when the user picked none),
 * `PAGE_SIZE` rows a page (`read(resource, query)` fetches one, its `total` and `rows`: for a resource of its own
 * shape); with `countBy` (a field with a header filter), a chip for each of its values counted over the other
 * filters, each a filter on it. `refresh()` reloads the page shown (a live session's) in place, with no loading
 * overlay, keeping the user's page, sort, filters and scroll. `data-empty` is on `element` while it has no row and no
 * header filter (a section holding only it is not shown).
 */
export function resourceTable(element, { resource, session, columns, filters = [], initialSort, defaultSort = [], countBy, pageSize = PAGE_SIZE, syncUrl = false, read = readResource }) {
  const fromUrl = syncUrl ? viewOf(location.search, columns) : {};
  const chips = countBy ? h("div", { class: "chips", role: "group", "aria-label": `${countBy} filter` }) : null;
  if (chips) element.before(chips);
  let quiet = false; // a refresh's load is on: no loading overlay
  const table = new Tabulator(element, {
    dataLoader: () => !quiet,
    layout: "fitDataStretch",
    pagination: true,
    paginationMode: "remote",
    paginationSize: fromUrl.size ?? pageSize,
    paginationSizeSelector: [20, 50, 100, 500],
    paginationCounter: "rows",
    sortMode: "remote",
    filterMode: "remote",
    ajaxURL: `/api/raysight/${resource}`,
    ajaxRequestFunc: async (_url, _config, params) => {
      const chosen = (params.filter ?? []).filter((f) => f.value !== "");
      const query = {
        session,
        detail: "true",
        limit: params.size,
        offset: (params.page - 1) * params.size,
        sort: params.sort?.length ? params.sort.map((s) => (s.dir === "desc" ? "-" : "") + s.field) : defaultSort,
        filter: [...filters, ...chosen.map((f) => `${f.field}=${f.value}`)],
        count_by: countBy,
      };
      if (syncUrl) keepInUrl(params);
      try {
        const answer = await read(resource, query);
        element.dataset.total = answer.total;
        element.toggleAttribute("data-empty", answer.total === 0 && (params.filter ?? []).every((f) => f.value === ""));
        if (chips) showChips(chips, table, countBy, answer.counts, chosen.find((f) => f.field === countBy)?.value);
        return { last_page: Math.max(1, Math.ceil(answer.total / params.size)), last_row: answer.total, data: answer.rows };
      } catch (error) {
        showError(error);
        return { last_page: 1, last_row: 0, data: [] };
      }
    },
    columns: columns.map((c) => ({ headerSortStartingDir: "desc", ...c })),
    initialSort: fromUrl.sort ?? initialSort,
    initialHeaderFilter: fromUrl.filters,
    paginationInitialPage: fromUrl.page ?? 1,
    placeholder: "No rows match",
  });
  moreColumns(element, table, columns);
  const built = new Promise((resolve) => table.on("tableBuilt", resolve));
  return {
    table,
    async refresh() {
      await built;
      const holder = element.querySelector(".tabulator-tableholder");
      const [top, left] = [holder.scrollTop, holder.scrollLeft];
      quiet = true; // (read as the load starts, before its request)
      const loaded = table.setPage(table.getPage() || 1);
      quiet = false;
      await loaded;
      [holder.scrollTop, holder.scrollLeft] = [top, left];
    },
  };
}

/** A page of `/api/raysight/<resource>`: its `total` and `rows`. */
function readResource(resource, query) {
  return api(`/api/raysight/${resource}`, query);
}

/** A table's `read` of an API path of its own shape: its header filters (`field=value`) sent as the path's parameters
 * (`params`: a field's parameter), the page's rows under `key` of the answer. */
export function readParams(path, params, key) {
  return async (_resource, { session, limit, offset, filter }) => {
    const given = {};
    for (const f of filter) {
      const at = f.indexOf("=");
      given[params[f.slice(0, at)]] = f.slice(at + 1);
    }
    const answer = await api(path, { session, limit, offset, ...given });
    return { total: answer.total, rows: answer[key] };
  };
}

/** A chip for each value of `field` (`counts`: how many rows each), the one chosen marked; a click filters on its
 * value (on the chosen one, clears the filter), as the column's header filter does. */
function showChips(box, table, field, counts = {}, chosen) {
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  const values = Object.keys(counts).sort();
  if (chosen && !values.some((v) => v.toLowerCase() === chosen.toLowerCase())) values.push(chosen);
  const chip = (value, text) => {
    const current = (value ?? "").toLowerCase() === (chosen ?? "").toLowerCase();
    const pick = () => table.setHeaderFilterValue(field, current ? "" : value ?? "");
    const state = value ? ` state-${value.toLowerCase()}` : "";
    return h("button", { type: "button", class: `chip${state}${current ? " current" : ""}`, "aria-pressed": String(current), "data-value": value ?? "", onclick: pick }, text);
  };
  box.replaceChildren(chip(undefined, `All ${total}`), ...values.map((v) => chip(v, `${v} ${counts[v] ?? 0}`)));
}

/** The filters, sort, page and page size a URL's query gives a table (`?state=FAILED&sort=-duration_ms&page=3`). */
function viewOf(search, columns) {
  const query = new URLSearchParams(search);
  const fields = new Set(columns.map((c) => c.field));
  const sort = query.get("sort");
  return {
    filters: [...query].filter(([key]) => fields.has(key)).map(([field, value]) => ({ field, value })),
    sort: sort ? [{ column: sort.replace(/^-/, ""), dir: sort.startsWith("-") ? "desc" : "asc" }] : undefined,
    page: Number(query.get("page")) || undefined,
    size: Number(query.get("size")) || undefined,
  };
}

/** Put a table's filters, sort and page in the URL (replacing the entry: paging is not a step back). */
function keepInUrl(params) {
  const query = new URLSearchParams();
  for (const f of params.filter ?? []) if (f.value !== "") query.set(f.field, f.value);
  const [sort] = params.sort ?? [];
  if (sort) query.set("sort", (sort.dir === "desc" ? "-" : "") + sort.field);
  if (params.page > 1) query.set("page", params.page);
  if (params.size !== PAGE_SIZE) query.set("size", params.size);
  const search = query.toString() ? `?${query}` : "";
  if (search !== location.search) history.replaceState(history.state, "", location.pathname + search);
}

/** A table of rows already fetched, sorted in the page; `replace(rows)` swaps them keeping the sort and scroll. */
export function localTable(element, rows, columns, placeholder = "None") {
  const table = new Tabulator(element, { layout: "fitDataStretch", data: rows, columns, placeholder });
  moreColumns(element, table, columns);
  const built = new Promise((resolve) => table.on("tableBuilt", resolve));
  return {
    table,
    async replace(fresh) {
      await built;
      await table.replaceData(fresh);
    },
  };
}
