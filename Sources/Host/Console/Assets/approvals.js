// Approvals: the pending ones, live, with the agent, the tool and its arguments; Approve or Deny goes to the same
// broker as the phone's lock screen, so whichever answers first decides, once.
import * as api from "./api.js";
import { h, fill, heading, time, badge, facts, errorBox, empty, announce } from "./dom.js";

export const title = "Approvals";

export async function render(main) {
  const pending = h("div", { class: "cards", id: "pending" });
  const decided = h("ol", { class: "plain", id: "decided" });
  const answerBox = h("div", { id: "decision-answer", "aria-live": "polite" });
  fill(main, heading("Approvals", h("span", { class: "live" }, "live")), answerBox,
    h("section", { "aria-labelledby": "pending-title" }, h("h2", { id: "pending-title" }, "Waiting for you"), pending),
    h("section", { "aria-labelledby": "decided-title" }, h("h2", { id: "decided-title" }, "Decided"), decided));

  async function load() {
    try {
      const answer = await api.get("/api/v1/approvals?state=all");
      const all = answer.approvals || [];
      const open = all.filter((a) => a.state === "pending");
      const done = all.filter((a) => a.state !== "pending").slice(0, 20);
      fill(pending, open.length ? open.map(card) : empty("Nothing is waiting for a decision."));
      fill(decided, done.length ? done.map(row) : h("li", { class: "empty" }, "No decision yet."));
    } catch (error) {
      fill(pending, errorBox(error));
    }
  }

  function card(approval) {
    const id = approval.call_id;
    const args = approval.arguments ?? approval.args;
    return h("article", { class: "card approval", dataset: { approval: id }, "aria-labelledby": `approval-${id}` },
      h("h3", { id: `approval-${id}` }, approval.agent_name || approval.agent_id, " wants to run ", h("code", {}, approval.tool)),
      facts([["Asked", time(approval.created_at)], ["Expires", time(approval.expires_at)], ["Call id", h("code", {}, id)]]),
      args !== undefined && args !== null ? h("details", { open: true }, h("summary", {}, "Arguments"), h("pre", { class: "arguments" }, JSON.stringify(args, null, 2))) : null,
      api.canAct() ? h("div", { class: "actions" },
        h("button", { type: "button", class: "primary", dataset: { action: "approve" }, onclick: (e) => decide(approval, "approve", e.currentTarget) }, "Approve"),
        h("button", { type: "button", class: "danger", dataset: { action: "deny" }, onclick: (e) => decide(approval, "deny", e.currentTarget) }, "Deny")) : null);
  }

  function row(approval) {
    return h("li", { dataset: { approval: approval.call_id, state: approval.state } },
      badge(approval.state), " ", approval.agent_name || approval.agent_id, " · ", h("code", {}, approval.tool), " · ", time(approval.decided_at || approval.expires_at));
  }

  async function decide(approval, verb, button) {
    for (const other of button.parentElement.querySelectorAll("button")) other.disabled = true;
    try {
      const answer = await api.post(`/api/v1/approvals/${encodeURIComponent(approval.call_id)}/${verb}`);
      const text = answer.already_decided ? `Already ${answer.state}: ${answer.message || "nothing ran twice"}` : `${answer.approved ? "Approved" : "Denied"}: ${approval.tool}`;
      fill(answerBox, h("p", { class: answer.approved ? "notice good" : "notice", id: "decision-text", dataset: { state: answer.state } }, text));
      announce(text);
    } catch (error) {
      fill(answerBox, errorBox(error));
    }
    await load();
    document.getElementById("page-title")?.focus();
  }

  const unsubscribe = api.on("approval", api.debounce(load, 100));
  await load();
  return unsubscribe;
}
