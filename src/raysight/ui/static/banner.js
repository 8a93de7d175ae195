// The error banner: what an API call or a page could not do, shown (never swallowed) until the next page; a session
// that is not there leads back to the sessions recorded.

import { h } from "./dom.js";

const NO_SESSION = /^no session named /;

export function showError(error) {
  const banner = document.getElementById("banner");
  const message = error?.message ?? String(error);
  banner.replaceChildren(
    h("strong", {}, "Error: "),
    message,
    ...(NO_SESSION.test(message) ? [" ", h("a", { href: "/ui/", class: "to-sessions" }, "See the sessions recorded →")] : []),
  );
  banner.hidden = false;
}

export function clearError() {
  document.getElementById("banner").hidden = true;
}
