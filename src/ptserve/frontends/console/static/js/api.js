// Calls to the server's HTTP API, relative to where the console is served, so that the console
// works the same behind a proxy that serves the server under a path prefix.

const HEADER_KEY = "ptserve-console-header";

/** The API's base: the folder above /console/ (e.g. https://host/prefix/). */
export const base = new URL("../", document.baseURI);

export class ApiError extends Error {
  constructor(call, status, message, hint = null) {
    super(message);
    this.name = "ApiError";
    this.call = call;
    this.status = status;
    this.hint = hint;
  }
}

/**
 * The header that --http-restricted-api asks for, when the person set one: kept in this tab's
 * sessionStorage only (never sent anywhere but to this server).
 */
export function restrictedHeader() {
  try {
    const stored = JSON.parse(sessionStorage.getItem(HEADER_KEY) || "null");
    return stored && stored.name ? stored : null;
  } catch {
    return null;
  }
}

export function setRestrictedHeader(name, value) {
  if (name) sessionStorage.setItem(HEADER_KEY, JSON.stringify({ name, value }));
  else sessionStorage.removeItem(HEADER_KEY);
}

/** A path with each model name escaped: path`v2/models/${name}/config`. */
export function path(strings, ...names) {
  return strings.reduce(
    (out, part, index) => out + part + (index < names.length ? encodeURIComponent(names[index]) : ""),
    "",
  );
}

/**
 * Call the API. Resolves to the parsed JSON (or text, or null for an empty body); rejects with
 * an ApiError that names the call, the HTTP status and the server's error message.
 * ``options.raw``: resolve to the Response itself (after checking its status).
 */
export async function api(target, options = {}) {
  const method = options.method || (options.body !== undefined ? "POST" : "GET");
  const headers = new Headers(options.headers || {});
  const extra = restrictedHeader();
  if (extra) headers.set(extra.name, extra.value);
  let body = options.body;
  if (body !== undefined && !(body instanceof Blob) && typeof body !== "string" && !(body instanceof Uint8Array)) {
    body = JSON.stringify(body);
    headers.set("Content-Type", "application/json");
  }
  const call = `${method} /${target}`;
  let response;
  try {
    response = await fetch(new URL(target, base), {
      method,
      headers,
      body,
      cache: "no-store",
      signal: options.signal,
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(call, 0, `the server did not answer (${error.message})`);
  }
  if (!response.ok) {
    const text = await response.text();
    let message = text || response.statusText;
    try {
      const parsed = JSON.parse(text);
      if (parsed && typeof parsed.error === "string") message = parsed.error;
    } catch {
      // not JSON: keep the text
    }
    let hint = null;
    if (response.status === 403) {
      hint = "This API group is restricted (--http-restricted-api). Set the header it expects under Connection.";
    }
    throw new ApiError(call, response.status, message, hint);
  }
  if (options.raw) return response;
  const type = response.headers.get("Content-Type") || "";
  const text = await response.text();
  if (!text) return null;
  return type.startsWith("application/json") ? JSON.parse(text) : text;
}

/** A status-only call (health): resolves to the HTTP status, rejects only when unreachable
 * or refused (403). */
export async function status(target, signal) {
  const headers = new Headers();
  const extra = restrictedHeader();
  if (extra) headers.set(extra.name, extra.value);
  let response;
  try {
    response = await fetch(new URL(target, base), { headers, cache: "no-store", signal });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(`GET /${target}`, 0, `the server did not answer (${error.message})`);
  }
  if (response.status === 403) {
    const parsed = await response.json().catch(() => ({}));
    throw new ApiError(`GET /${target}`, 403, parsed.error || "forbidden",
      "This API group is restricted (--http-restricted-api). Set the header it expects under Connection.");
  }
  await response.arrayBuffer();
  return response.status;
}
