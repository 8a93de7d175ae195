// The API, as the pages call it: JSON over fetch, with the read token when the server asks for one. The token is
// kept for the tab (sessionStorage), sent in a header, never put in a URL.

const TOKEN = "raysight.token";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

let asking = null; // one prompt at a time, however many requests were refused

function askToken() {
  asking ??= new Promise((resolve) => {
    const dialog = document.getElementById("token-dialog");
    const input = document.getElementById("token-input");
    input.value = "";
    dialog.addEventListener(
      "close",
      () => {
        sessionStorage.setItem(TOKEN, input.value.trim());
        asking = null;
        resolve();
      },
      { once: true },
    );
    dialog.showModal();
  });
  return asking;
}

export function url(path, params = {}) {
  const target = new URL(path, location.origin);
  for (const [key, value] of Object.entries(params)) {
    for (const one of Array.isArray(value) ? value : [value]) {
      if (one !== undefined && one !== null && one !== "") target.searchParams.append(key, one);
    }
  }
  return target;
}

/** GET a path of the API; its JSON, or an ApiError with the server's message. */
export async function api(path, params = {}, { raw = false } = {}) {
  for (let tries = 0; ; tries++) {
    const token = sessionStorage.getItem(TOKEN);
    const response = await fetch(url(path, params), { headers: token ? { Authorization: `Bearer ${token}` } : {} });
    if (response.status === 401 && tries < 3) {
      await askToken();
      continue;
    }
    if (!response.ok) {
      const body = await response.json().catch(() => null);
      throw new ApiError(response.status, body?.error ?? `${response.status} ${response.statusText}`);
    }
    return raw ? response : response.json();
  }
}
