// The JSON API as the console calls it: same origin, the session cookie, and the session's CSRF token on every
// call that changes something. Errors keep the API's own message ({"code", "error"}).

let session = null;
const listeners = new Set();

export class APIError extends Error {
  constructor(status, code, message, body) {
    super(message);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

export function currentSession() { return session; }

/** Whether the signed-in person may act (run, decide, pair, revoke): a viewer's console is read-only. */
export function canAct() { return !!session && session.role !== "viewer"; }
export function isAdmin() { return !!session && session.role === "admin"; }

export function onSessionChange(listener) { listeners.add(listener); }

function setSession(next) {
  session = next;
  for (const listener of listeners) listener(session);
}

export async function call(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && method !== "HEAD" && session) headers["X-CSRF-Token"] = session.csrf_token;
  let response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: "same-origin", cache: "no-store" });
  } catch (error) {
    throw new APIError(0, "network", "The gateway did not answer (is it running?)", null);
  }
  if (response.status === 204) return null;
  const text = await response.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; }
  if (!response.ok) {
    const message = json && typeof json.error === "string" ? json.error : `${response.status} ${response.statusText}`;
    const error = new APIError(response.status, json && json.code, message, json);
    // A session that ended elsewhere (expired, revoked) sends the person back to the sign-in page.
    if (response.status === 401 && session && !path.endsWith("/console/session")) setSession(null);
    throw error;
  }
  return json;
}

export const get = (path) => call("GET", path);
export const post = (path, body) => call("POST", path, body === undefined ? {} : body);
export const del = (path) => call("DELETE", path);

/** Asks for the current session (the cookie); null when there is none. */
export async function loadSession() {
  try {
    setSession(await call("GET", "/api/v1/console/session"));
  } catch (error) {
    if (error.status !== 401) throw error;
    setSession(null);
  }
  return session;
}

export async function signIn(credentials) {
  setSession(await call("POST", "/api/v1/console/session", credentials));
  return session;
}

export async function signOut() {
  try { await call("DELETE", "/api/v1/console/session"); } finally { setSession(null); }
}

// MARK: Live updates

let source = null;
let retryTimer = null;
let retryDelay = 5000;
const handlers = new Map();

/** Subscribes to one kind of server-sent event (delivery, approval, agents, device); returns the unsubscribe. */
export function on(kind, handler) {
  if (!handlers.has(kind)) handlers.set(kind, new Set());
  handlers.get(kind).add(handler);
  return () => handlers.get(kind).delete(handler);
}

/** While the stream is down (a proxy that cuts it, a gateway restarting), every page re-reads now and then. */
const pollEvery = 20000;
let pollTimer = null;

export function startEvents() {
  if (!pollTimer) {
    pollTimer = setInterval(() => {
      if (source && source.readyState === EventSource.OPEN) return;
      for (const set of handlers.values()) for (const handler of set) handler({});
    }, pollEvery);
  }
  if (source || retryTimer || typeof EventSource === "undefined") return;
  source = new EventSource("/api/v1/console/events");
  for (const kind of ["delivery", "approval", "agents", "device"]) {
    source.addEventListener(kind, (event) => {
      let data = {};
      try { data = JSON.parse(event.data); } catch { /* an event without a body still says "re-read" */ }
      for (const handler of handlers.get(kind) || []) handler(data);
    });
  }
  source.addEventListener("open", () => {
    retryDelay = 5000;
    document.body.classList.remove("offline");
  });
  source.addEventListener("error", () => {
    document.body.classList.add("offline");
    // The browser reconnects on its own after a dropped connection; a refused stream (401, 404) is closed for
    // good: the session is checked, and the stream tried again later, more slowly each time.
    if (source && source.readyState === EventSource.CLOSED) {
      source.close();
      source = null;
      retryTimer = setTimeout(async () => {
        retryTimer = null;
        if (await stillSignedIn()) startEvents();
      }, retryDelay);
      retryDelay = Math.min(retryDelay * 2, 60000);
    }
  });
}

/** Whether the session still holds; only a 401 ends it here (a network failure is not a sign-out). */
async function stillSignedIn() {
  if (!session) return false;
  try {
    await call("GET", "/api/v1/console/session");
    return true;
  } catch (error) {
    return error.status !== 401;
  }
}

export function stopEvents() {
  if (source) source.close();
  source = null;
  clearTimeout(retryTimer);
  retryTimer = null;
  clearInterval(pollTimer);
  pollTimer = null;
}

/** Coalesces bursts of events (a burst of deliveries) into one re-read. */
export function debounce(fn, ms = 250) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}
