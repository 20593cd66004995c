// Devices: whether each can be woken (token present, or cleared and why), its last wake-up, a test push that shows
// the push service's own answer, and removal.
import * as api from "./api.js";
import { h, fill, heading, time, badge, facts, errorBox, empty, announce } from "./dom.js";

export const title = "Devices";

export async function render(main) {
  const list = h("div", { class: "cards", id: "device-list" });
  const webPush = h("section", { class: "card", id: "webpush", "aria-labelledby": "webpush-title", hidden: true });
  fill(main, heading("Devices"), list, webPush);
  // A test push's answer outlives the redraw its own wake-up causes (event: device).
  const answers = new Map();

  async function load() {
    try {
      const answer = await api.get("/api/v1/console/devices");
      const devices = answer.devices || [];
      fill(list, devices.length ? devices.map(card) : empty("No device is registered yet. Pair a phone from the Pairing page."));
    } catch (error) {
      fill(list, errorBox(error));
    }
  }

  function card(device) {
    const session = api.currentSession();
    const own = session && device.subject === session.subject;
    const result = h("output", { class: "push-result", id: `push-result-${device.id}`, "aria-live": "polite" }, answers.get(device.id) || null);
    const actions = [];
    if (api.canAct() && own) {
      actions.push(h("button", { type: "button", dataset: { action: "test-push", device: device.id }, onclick: (event) => testPush(device, event.currentTarget, result) }, "Send a test push"));
    }
    if (api.canAct() && own) {
      actions.push(h("button", { type: "button", class: "danger", dataset: { action: "remove", device: device.id }, onclick: () => remove(device) }, "Remove"));
    }
    const wake = device.last_wake;
    return h("article", { class: "card device", dataset: { device: device.id }, "aria-labelledby": `device-${device.id}` },
      h("h2", { id: `device-${device.id}` }, device.name || device.id),
      facts([
        ["Platform", `${device.platform}${device.environment ? " · " + device.environment : ""}`],
        ["Person", api.isAdmin() ? device.subject : null],
        ["Push token", h("span", {}, badge(device.token), device.token === "cleared" && device.token_cleared_reason ? ` (${device.token_cleared_reason})` : "")],
        ["Notifications", device.notifications_enabled ? "on" : "off"],
        ["Last wake-up", wake ? h("span", {}, badge(wake.outcome), " ", wake.transport || "", wake.status ? ` · status ${wake.status}` : "", " · ", time(wake.at)) : "none yet"],
        ["Live Activity tokens", String(device.live_activity_tokens ?? 0)],
        ["Registered", time(device.created_at)],
        ["Id", h("code", {}, device.id)],
      ]),
      actions.length ? h("div", { class: "actions" }, actions) : null,
      result);
  }

  async function testPush(device, button, result) {
    button.disabled = true;
    fill(result, "Sending…");
    try {
      const answer = await api.post(`/api/v1/console/devices/${encodeURIComponent(device.id)}/test-push`);
      const shown = [h("span", {}, "The push service answered: "), badge(answer.outcome), " ",
        facts([["Transport", answer.transport], ["Status", answer.status !== undefined ? String(answer.status) : null], ["Reason", answer.reason],
          ["Service id", answer.service_id ? h("code", {}, answer.service_id) : null], ["Latency", answer.latency_ms !== undefined ? `${answer.latency_ms} ms` : null]])];
      answers.set(device.id, shown);
      // The card may have been drawn anew meanwhile: the answer goes to the one on the page.
      fill(document.getElementById(`push-result-${device.id}`) || result, ...shown);
    } catch (error) {
      fill(result, errorBox(error));
    } finally {
      button.disabled = false;
    }
  }

  async function remove(device) {
    if (!window.confirm(`Remove ${device.name || device.id}? It gets no more wake-ups until it registers again.`)) return;
    try {
      await api.del(`/api/v1/mobile/devices/${encodeURIComponent(device.id)}`);
      announce(`${device.name || device.id} removed`);
      await load();
      document.getElementById("page-title")?.focus();
    } catch (error) {
      list.prepend(errorBox(error));
    }
  }

  const unsubscribe = api.on("device", api.debounce(load));
  await load();
  mountWebPush(webPush, load);
  return unsubscribe;
}

/** Browser notifications, when this build carries the Web Push module (webpush.js) and the browser can take them. */
async function mountWebPush(slot, reload) {
  if (!api.canAct() || !("serviceWorker" in navigator) || !("PushManager" in window)) return;
  let module;
  try {
    module = await import("./webpush.js");
  } catch {
    return;
  }
  if (typeof module.subscribe !== "function") return;
  const result = h("output", { id: "webpush-result", "aria-live": "polite" });
  const button = h("button", { type: "button", dataset: { action: "webpush" } }, "Notify this browser");
  button.addEventListener("click", async () => {
    button.disabled = true;
    fill(result, "Asking…");
    try {
      const device = await module.subscribe(api.currentSession().csrf_token);
      fill(result, "This browser is now a device (", h("code", {}, device), "): it gets the same wake-ups as the phones.");
      await reload();
    } catch (error) {
      fill(result, errorBox(error));
    } finally {
      button.disabled = false;
    }
  });
  fill(slot, h("h2", { id: "webpush-title" }, "Browser notifications"),
    h("p", { class: "help" }, "Wake-ups say only that something arrived, never what: open the console to read it."),
    h("div", { class: "actions" }, button), result);
  slot.hidden = false;
}
