// The console's shell: the session, hash routing (#/inbox?agent=…), the navigation and live updates.
import * as api from "./api.js";
import { fill, errorBox, announce } from "./dom.js";
import * as signin from "./signin.js";
import * as inbox from "./inbox.js";
import * as devices from "./devices.js";
import * as approvals from "./approvals.js";
import * as pairing from "./pairing.js";
import * as agents from "./agents.js";
import * as health from "./health.js";

const pages = { inbox, devices, approvals, pairing, agents, health };
const main = document.getElementById("main");
let cleanup = null;
let shown = null;

/** The page and its query from the location's hash. */
export function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query] = raw.split("?");
  const [name, id] = path.split("/");
  const params = new URLSearchParams(query || "");
  // #/inbox/<delivery id> (a notification's link): that line, opened.
  if (name === "inbox" && id) {
    params.set("q", decodeURIComponent(id));
    params.set("open", decodeURIComponent(id));
  }
  return { name: name || "inbox", params };
}

async function route() {
  const session = api.currentSession();
  const { name, params } = parseHash();
  if (cleanup) { cleanup(); cleanup = null; }
  if (!session) {
    document.title = "Sign in · Soulacy";
    cleanup = signin.render(main, params) || null;
    shown = "signin";
    return;
  }
  const page = pages[name] || inbox;
  const pageName = pages[name] ? name : "inbox";
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.dataset.page === pageName) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.title = `${page.title} · Soulacy`;
  const changedPage = shown !== pageName;
  const focusedID = document.activeElement && document.activeElement.id;
  shown = pageName;
  try {
    cleanup = (await page.render(main, params)) || null;
  } catch (error) {
    fill(main, errorBox(error));
  }
  // Focus the new page's heading (not on a filter change within the page, which keeps focus where it was).
  if (changedPage || !focusedID || !document.getElementById(focusedID)) document.getElementById("page-title")?.focus();
  else document.getElementById(focusedID).focus();
}

function showSession(session) {
  const nav = document.getElementById("nav");
  const who = document.getElementById("who");
  nav.hidden = !session;
  who.hidden = !session;
  document.body.classList.toggle("read-only", !!session && session.role === "viewer");
  if (session) {
    document.getElementById("who-text").textContent = `${session.subject} · ${session.role}${session.role === "viewer" ? " (read-only)" : ""}`;
    api.startEvents();
    refreshPendingCount();
  } else {
    api.stopEvents();
  }
}

/** The number of pending approvals beside the navigation's link. */
async function refreshPendingCount() {
  const badge = document.getElementById("pending-count");
  try {
    const answer = await api.get("/api/v1/approvals");
    const count = (answer.approvals || []).filter((a) => a.state === "pending").length;
    badge.hidden = count === 0;
    badge.textContent = String(count);
    badge.setAttribute("aria-label", `${count} pending`);
  } catch {
    badge.hidden = true;
  }
}

api.onSessionChange((session) => {
  const was = shown;
  showSession(session);
  if (!session && was && was !== "signin") announce("You are signed out.");
  route();
});
api.on("approval", api.debounce(refreshPendingCount));
// A page left behind (navigation, the back-forward cache) lets go of its event stream at once: browsers allow
// only six connections to one host, and a stream kept open by a page nobody sees would starve the next one.
window.addEventListener("pagehide", () => api.stopEvents());
window.addEventListener("pageshow", (event) => { if (event.persisted && api.currentSession()) api.startEvents(); });
window.addEventListener("hashchange", route);

// The skip link moves focus, not the route (its #main would read as a page name).
document.querySelector(".skip").addEventListener("click", (event) => {
  event.preventDefault();
  document.getElementById("main").focus();
});

document.getElementById("sign-out").addEventListener("click", async () => {
  try { await api.signOut(); } catch (error) { announce(error.message); }
  location.hash = "#/inbox";
});

api.loadSession().catch((error) => fill(main, errorBox(error)));
