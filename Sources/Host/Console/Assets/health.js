// Health: which push services and channels are configured and how their last try went, the outbox's depth and
// oldest pending age, and the relay carriage.
import * as api from "./api.js";
import { h, fill, heading, time, badge, facts, errorBox, empty, duration, table } from "./dom.js";

export const title = "Health";

export async function render(main) {
  const body = h("div", { id: "health" });
  fill(main, heading("Health", h("button", { type: "button", class: "quiet", id: "health-refresh", onclick: () => load() }, "Refresh")), body);

  async function load() {
    try {
      const answer = await api.get("/api/v1/console/health");
      const outbox = answer.outbox || {};
      const relay = answer.relay;
      fill(body,
        h("section", { class: "card", "aria-labelledby": "outbox-title" }, h("h2", { id: "outbox-title" }, "Outbox"),
          facts([["Pending", String(outbox.pending ?? 0)],
            ["Oldest pending", outbox.oldest_pending_age_seconds ? duration(outbox.oldest_pending_age_seconds) : "nothing waits"]])),
        services("Push services", "push", answer.push || [], "transport"),
        services("Channels", "channels", answer.channels || [], "name"),
        h("section", { class: "card", "aria-labelledby": "relay-title" }, h("h2", { id: "relay-title" }, "Relay carriage"),
          relay ? facts(Object.entries(relay).map(([key, value]) => [key.replaceAll("_", " "), key === "state" ? badge(String(value)) : String(value)]))
            : empty("No relay is configured.")));
    } catch (error) {
      fill(body, errorBox(error));
    }
  }

  await load();
  const timer = setInterval(load, 15000);
  return () => clearInterval(timer);
}

function services(title, id, items, nameKey) {
  return h("section", { class: "card", "aria-labelledby": `${id}-title` }, h("h2", { id: `${id}-title` }, title),
    items.length ? table(["Name", "Configured", "Last outcome", "When"], items.map((item) => [
      item[nameKey],
      item.configured ? badge("configured", "good") : badge("not configured", "neutral"),
      item.last_outcome ? badge(item.last_outcome) : h("span", { class: "muted" }, "none yet"),
      time(item.last_at),
    ])) : empty("None."));
}
