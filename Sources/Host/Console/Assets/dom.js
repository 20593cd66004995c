// Building the page from data without ever parsing it as HTML: every value goes in as text or as an attribute.

/** h("button", {class: "x", onclick: fn, "aria-label": "…"}, "text", child, [more]) */
export function h(tag, props, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") element.addEventListener(name.slice(2), value);
    else if (name === "class") element.className = value;
    else if (name === "dataset") Object.assign(element.dataset, value);
    else if (value === true) element.setAttribute(name, "");
    else element.setAttribute(name, String(value));
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(element, child);
    else if (child instanceof Node) element.appendChild(child);
    else element.appendChild(document.createTextNode(String(child)));
  }
}

/** Replaces what `element` holds with `children`. */
export function fill(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });
const timeOnly = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });

/** A <time> element for an RFC 3339 string, in the browser's zone, or in `timeZone` when given. */
export function time(iso, { timeZone, short } = {}) {
  if (!iso) return h("span", { class: "muted" }, "—");
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return h("span", {}, iso);
  let text;
  if (timeZone) {
    try {
      text = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short", timeZone, timeZoneName: "short" }).format(date);
    } catch {
      text = dateTime.format(date);
    }
  } else {
    text = (short && isToday(date) ? timeOnly : dateTime).format(date);
  }
  return h("time", { datetime: iso, title: iso }, text);
}

function isToday(date) {
  const now = new Date();
  return date.getFullYear() === now.getFullYear() && date.getMonth() === now.getMonth() && date.getDate() === now.getDate();
}

/** "3 min", "2 h 5 min", "40 s" for a number of seconds. */
export function duration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours} h ${m % 60} min`;
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}

/** A small labelled state badge; `tone` picks its colour (good, warn, bad, neutral). */
export function badge(text, tone) {
  return h("span", { class: `badge ${tone || toneOf(text)}` }, text.replaceAll("_", " "));
}

export function toneOf(state) {
  switch (state) {
    case "read": case "fetched": case "sent": case "delivered": case "approved": case "succeeded": case "ok": case "present": case "configured": case "connected":
      return "good";
    case "queued": case "stored": case "retrying": case "retry": case "pending": case "running": case "warn": case "skipped": case "none":
      return "warn";
    case "token_rejected": case "failed": case "denied": case "expired": case "cleared": case "fail": case "error": case "interrupted":
      return "bad";
    default:
      return "neutral";
  }
}

/** A definition list from [label, value] pairs; null values are left out. */
export function facts(pairs, props) {
  const list = h("dl", { class: "facts", ...props });
  for (const [label, value] of pairs) {
    if (value === null || value === undefined) continue;
    list.append(h("dt", {}, label), h("dd", {}, value));
  }
  return list;
}

/** The page's heading, focused after navigation so a screen reader starts there. */
export function heading(text, ...extra) {
  return h("div", { class: "page-head" }, h("h1", { tabindex: "-1", id: "page-title" }, text), ...extra);
}

/** A polite announcement for assistive technology (a decision taken, a list updated). */
export function announce(text) {
  const region = document.getElementById("announcer");
  if (!region) return;
  region.textContent = "";
  setTimeout(() => { region.textContent = text; }, 30);
}

/** An error box (role=alert) for a failed call, with the API's own message. */
export function errorBox(error) {
  return h("p", { class: "error", role: "alert" }, error && error.message ? error.message : String(error));
}

/** Empty-state text. */
export function empty(text) {
  return h("p", { class: "empty" }, text);
}

/** A table from column names and rows of cells; at a phone's width each row stacks, each cell under its name. */
export function table(columns, rows, rowProps) {
  return h("div", { class: "table-wrap" }, h("table", { class: "stack" },
    h("thead", {}, h("tr", {}, columns.map((name) => h("th", { scope: "col" }, name || h("span", { class: "visually-hidden" }, "Actions"))))),
    h("tbody", {}, rows.map((cells, index) => h("tr", rowProps ? rowProps(index) : {},
      cells.map((cell, column) => h("td", { "data-label": columns[column] || "" }, cell)))))));
}
