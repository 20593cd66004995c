// The inbox: each line, newest first, and for each phone the path its wake-up took (stored → queued → each
// attempt → retry / token rejected → fetched → read). Filters live in the hash, so a filtered view is a link.
import * as api from "./api.js";
import { h, fill, heading, time, badge, errorBox, empty, announce } from "./dom.js";

export const title = "Inbox";
export const states = ["stored", "queued", "sent", "retrying", "token_rejected", "failed", "skipped", "fetched", "read"];

const stepText = {
  stored: "Stored in the inbox",
  queued: "Wake-up queued",
  attempt: "Attempt",
  retry_scheduled: "Retry scheduled",
  token_rejected: "Token rejected and cleared",
  sent: "Sent: the push service accepted it",
  failed: "Failed",
  skipped: "Skipped",
  fetched: "Fetched by the device",
  read: "Read",
};

export async function render(main, params) {
  const filters = { agent: params.get("agent") || "", device: params.get("device") || "", state: params.get("state") || "", q: params.get("q") || "" };
  const expanded = new Set((params.get("open") || "").split(",").filter(Boolean));
  const list = h("ol", { class: "lines", id: "lines", "aria-label": "Inbox lines, newest first" });
  const status = h("div", { class: "muted", id: "inbox-status" });
  const more = h("div", { class: "more" });
  const form = filterForm(filters);
  fill(main, heading("Inbox", h("span", { class: "live", title: "Updates arrive as they happen" }, "live")), form, status, list, more);
  fillFilterChoices(form, filters);

  let lines = [];
  let nextBefore = null;
  const details = new Map();

  async function load({ append = false } = {}) {
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(filters)) if (value) query.set(name, value);
    query.set("limit", "50");
    if (append && nextBefore) query.set("before", nextBefore);
    try {
      const answer = await api.get(`/api/v1/console/deliveries?${query}`);
      lines = append ? lines.concat(answer.deliveries || []) : answer.deliveries || [];
      nextBefore = answer.next_before || null;
      for (const id of expanded) if (lines.some((line) => line.id === id)) await loadDetail(id);
      draw();
    } catch (error) {
      list.replaceChildren();
      fill(status, errorBox(error));
    }
  }

  async function loadDetail(id) {
    try {
      details.set(id, await api.get(`/api/v1/console/deliveries/${encodeURIComponent(id)}`));
    } catch (error) {
      details.set(id, { error });
    }
  }

  function draw() {
    const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.line : null;
    status.textContent = lines.length === 0 ? "" : `${lines.length} line${lines.length === 1 ? "" : "s"}${nextBefore ? " (older ones below)" : ""}`;
    if (lines.length === 0) {
      fill(list, h("li", { class: "empty" }, Object.values(filters).some(Boolean) ? "No line matches these filters." : "No lines yet. When an agent delivers to a phone, it shows here."));
    } else {
      fill(list, lines.map(lineItem));
    }
    fill(more, nextBefore ? h("button", { type: "button", onclick: () => load({ append: true }) }, "Load older lines") : null);
    if (focused) list.querySelector(`button[data-line="${CSS.escape(focused)}"]`)?.focus();
  }

  function lineItem(line) {
    const open = expanded.has(line.id);
    const panelID = `line-${line.id}`;
    const toggle = async () => {
      if (expanded.has(line.id)) expanded.delete(line.id);
      else {
        expanded.add(line.id);
        await loadDetail(line.id);
      }
      draw();
    };
    return h("li", { class: "line", dataset: { id: line.id, state: line.state } },
      h("button", { type: "button", class: "line-head", "aria-expanded": open ? "true" : "false", "aria-controls": panelID, dataset: { line: line.id }, onclick: toggle },
        h("span", { class: "line-title" }, line.title || "(no title)"),
        h("span", { class: "line-meta" }, line.agent_name || line.agent_id || "", " · ", time(line.created_at, { short: true })),
        h("span", { class: "line-state" }, badge(line.state)),
        h("span", { class: "chips" }, (line.devices || []).map((device) =>
          h("span", { class: "chip" }, `${device.device_name || device.device_id}: `, badge(device.state))))),
      h("div", { class: "line-detail", id: panelID, role: "region", "aria-label": `Path of ${line.title || line.id}`, hidden: !open }, open ? detailOf(line, details.get(line.id)) : null));
  }

  const reload = api.debounce(() => load());
  const unsubscribe = [api.on("delivery", () => reload()), api.on("device", () => reload())];
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = new URLSearchParams();
    for (const name of ["agent", "device", "state", "q"]) {
      const value = form.elements[name].value.trim();
      if (value) query.set(name, value);
    }
    location.hash = `#/inbox${query.toString() ? "?" + query : ""}`;
    announce("Filters applied");
  });
  await load();
  return () => unsubscribe.forEach((stop) => stop());
}

function filterForm(filters) {
  const select = (name, label, options) => h("div", { class: "field" },
    h("label", { for: `filter-${name}` }, label),
    h("select", { id: `filter-${name}`, name }, h("option", { value: "" }, "All"), options));
  return h("form", { class: "filters", role: "search", "aria-label": "Filter the inbox" },
    select("agent", "Agent", []),
    select("device", "Device", []),
    select("state", "State", states.map((state) => h("option", { value: state, selected: state === filters.state }, state.replaceAll("_", " ")))),
    h("div", { class: "field" },
      h("label", { for: "filter-q" }, "Delivery id"),
      h("input", { id: "filter-q", name: "q", type: "search", value: filters.q, placeholder: "dlv_…", spellcheck: "false" })),
    h("div", { class: "field actions" },
      h("button", { type: "submit" }, "Filter"),
      h("a", { href: "#/inbox", class: "button quiet" }, "Clear")));
}

/** Agents and devices to filter by, from their own routes (a failure leaves only "All"). */
async function fillFilterChoices(form, filters) {
  const [agents, devices] = await Promise.allSettled([api.get("/api/v1/console/agents"), api.get("/api/v1/console/devices")]);
  if (agents.status === "fulfilled") {
    form.elements.agent.append(...(agents.value.agents || []).map((agent) =>
      h("option", { value: agent.id, selected: agent.id === filters.agent }, agent.name || agent.id)));
  }
  if (devices.status === "fulfilled") {
    form.elements.device.append(...(devices.value.devices || []).map((device) =>
      h("option", { value: device.id, selected: device.id === filters.device }, `${device.name || device.id} (${device.platform})`)));
  }
  // A filter named in the link but not offered (a removed device) stays selectable.
  for (const name of ["agent", "device"]) {
    const value = filters[name];
    if (value && ![...form.elements[name].options].some((option) => option.value === value)) {
      form.elements[name].append(h("option", { value, selected: true }, value));
    }
  }
}

function detailOf(line, detail) {
  if (!detail) return h("p", { class: "muted" }, "Loading…");
  if (detail.error) return errorBox(detail.error);
  const delivery = detail.delivery || {};
  return [
    h("p", { class: "delivery-id" }, "Delivery ", h("code", {}, line.id)),
    delivery.body ? h("p", { class: "body" }, delivery.body) : null,
    (detail.devices || []).length === 0 ? empty("No device was registered for this line.") : null,
    (detail.devices || []).map((device) => h("section", { class: "device-path", "aria-label": `${device.device_name || device.device_id} timeline` },
      h("h3", {}, device.device_name || device.device_id, " ", h("span", { class: "muted" }, device.platform || "")),
      h("ol", { class: "timeline", dataset: { device: device.device_id } }, (device.timeline || []).map(step)))),
  ];
}

function step(entry) {
  const details = [];
  if (entry.transport) details.push(entry.transport);
  if (entry.status !== undefined && entry.status !== null) details.push(`status ${entry.status}`);
  if (entry.reason) details.push(entry.reason);
  if (entry.service_id) details.push(h("span", {}, "service id ", h("code", {}, entry.service_id)));
  if (entry.latency_ms !== undefined && entry.latency_ms !== null) details.push(`${entry.latency_ms} ms`);
  const label = stepText[entry.kind] || entry.kind;
  return h("li", { class: `step ${entry.kind}`, dataset: { kind: entry.kind } },
    h("span", { class: "step-time" }, time(entry.at, { short: true })),
    h("span", { class: "step-what" }, label,
      entry.kind === "retry_scheduled" && entry.next_attempt_at ? [" for ", time(entry.next_attempt_at, { short: true })] : null),
    details.length ? h("span", { class: "step-details" }, details.flatMap((item, index) => index ? [" · ", item] : [item])) : null);
}
