// The error banner: what an API call or a page could not do, shown (never swallowed) until the next page.

import { h } from "./dom.js";

export function showError(error) {
  const banner = document.getElementById("banner");
  banner.replaceChildren(h("strong", {}, "Error: "), error?.message ?? String(error));
  banner.hidden = false;
}

export function clearError() {
  document.getElementById("banner").hidden = true;
}
