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
      const channelOutbox = answer.channel_outbox;
      fill(body,
        h("section", { class: "card", "aria-labelledby": "gateway-title" }, h("h2", { id: "gateway-title" }, "Gateway"),
          facts([["Status", answer.status ? badge(answer.status) : null], ["Version", answer.version], ["Database", answer.database ? badge(answer.database === "ok" ? "ok" : answer.database, answer.database === "ok" ? "good" : "bad") : null]])),
        h("section", { class: "card", "aria-labelledby": "outbox-title" }, h("h2", { id: "outbox-title" }, "Outbox"),
          facts([["Wake-ups pending", String(outbox.pending ?? 0)],
            ["Oldest wake-up waiting", outbox.oldest_pending_age_seconds ? duration(outbox.oldest_pending_age_seconds) : "nothing waits"],
            ["Channel sends pending", channelOutbox ? String(channelOutbox.pending ?? 0) : null],
            ["Oldest send waiting", channelOutbox ? (channelOutbox.oldest_pending_age_seconds ? duration(channelOutbox.oldest_pending_age_seconds) : "nothing waits") : null]])),
        services("Push services", "push", answer.push || []),
        services("Channels", "channels", answer.channels || []),
        disabledEndpoints(answer.channels || []),
        h("section", { class: "card", "aria-labelledby": "relay-title" }, h("h2", { id: "relay-title" }, "Relay carriage"),
          relay ? facts([["State", badge(String(relay.state))], ["Mailbox", relay.url], ["Phones", relay.phones !== undefined ? String(relay.phones) : null],
            ["Last round", relay.last_round_at ? time(relay.last_round_at) : null], ["Last failure", relay.last_failure ? [relay.last_failure, " ", time(relay.last_failure_at)] : null]])
            : empty("No relay is configured.")));
    } catch (error) {
      fill(body, errorBox(error));
    }
  }

  await load();
  const timer = setInterval(load, 15000);
  return () => clearInterval(timer);
}

function services(title, id, items) {
  return h("section", { class: "card", "aria-labelledby": `${id}-title` }, h("h2", { id: `${id}-title` }, title),
    items.length ? table(["Name", "Configured", "Last outcome", "When"], items.map((item) => [
      item.name || item.transport,
      item.configured ? badge("configured", "good") : badge("not configured", "neutral"),
      item.last_outcome ? h("span", {}, badge(item.last_outcome), item.last_reason ? ` ${item.last_reason}` : "") : h("span", { class: "muted" }, "none yet"),
      time(item.last_at),
    ])) : empty("None."));
}

// Endpoints a channel stopped sending to because their service said they are gone (a webhook's 410 Gone): shown
// only when there are some; changing the endpoint's entry in the gateway config sends to it again.
function disabledEndpoints(channels) {
  const rows = channels.flatMap((channel) => (channel.disabled_endpoints || []).map((item) => [channel.name, item.endpoint, item.reason, time(item.since)]));
  if (!rows.length) return null;
  return h("section", { class: "card", "aria-labelledby": "disabled-title" }, h("h2", { id: "disabled-title" }, "Disabled endpoints"),
    h("p", { class: "muted" }, "Their service said they are gone. Nothing is sent to them until their entry in the gateway config changes."),
    table(["Channel", "Endpoint", "Reason", "Since"], rows));
}
