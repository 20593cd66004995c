// Agents: each one's trigger, its next three fires in its own zone, its last runs (status, duration, where each
// output went), Run now, and the problems of files that did not load (file:line:col), updated on hot reload.
import * as api from "./api.js";
import { h, fill, heading, time, badge, facts, errorBox, empty, announce, table } from "./dom.js";

export const title = "Agents";

export async function render(main) {
  const problems = h("div", { id: "problems" });
  const list = h("div", { class: "cards", id: "agent-list" });
  const answerBox = h("div", { id: "run-answer", "aria-live": "polite" });
  fill(main, heading("Agents", h("span", { class: "live" }, "live")), problems, answerBox, list);

  async function load() {
    try {
      const answer = await api.get("/api/v1/console/agents");
      const found = answer.problems || [];
      fill(problems, found.length ? h("section", { class: "card problems", role: "alert", "aria-labelledby": "problems-title" },
        h("h2", { id: "problems-title" }, `${found.length} problem${found.length === 1 ? "" : "s"} in the agents' files`),
        h("ul", { class: "plain" }, found.map((p) => h("li", {}, p.severity && p.severity !== "error" ? [badge(p.severity, "warn"), " "] : null, h("code", {}, `${p.file}:${p.line}:${p.column}`), " ", p.message)))) : null);
      const agents = answer.agents || [];
      fill(list, agents.length ? agents.map(card) : empty("No agent is loaded. Add one to SOUL.yaml; it loads without a restart."));
    } catch (error) {
      fill(list, errorBox(error));
    }
  }

  function card(agent) {
    const trigger = agent.trigger || {};
    const zone = trigger.timezone;
    return h("article", { class: "card agent", dataset: { agent: agent.id }, "aria-labelledby": `agent-${agent.id}` },
      h("h2", { id: `agent-${agent.id}` }, agent.name || agent.id, " ", h("span", { class: "muted" }, agent.id)),
      agent.enabled === false ? h("p", { class: "notice" }, badge("disabled", "neutral"), " ", agent.disabled_reason || "") : null,
      agent.running ? h("p", {}, badge("running")) : null,
      facts([
        ["Trigger", [trigger.kind || "manual", trigger.schedule ? h("span", {}, " ", h("code", {}, trigger.schedule)) : null,
          trigger.at ? h("span", {}, " at ", time(trigger.at, { timeZone: zone })) : null, zone ? ` (${zone})` : null]],
        ["Next fires", (agent.next_fires || []).length ? h("ul", { class: "plain" }, agent.next_fires.slice(0, 3).map((at) => h("li", {}, time(at, { timeZone: zone })))) : "none scheduled"],
      ]),
      h("h3", {}, "Last runs"),
      (agent.last_runs || []).length ? runTable(agent.last_runs) : empty("No run yet."),
      api.canAct() ? h("div", { class: "actions" },
        h("button", { type: "button", dataset: { action: "run", agent: agent.id }, onclick: (e) => runNow(agent, e.currentTarget) }, "Run now")) : null);
  }

  function runTable(runs) {
    return table(["Started", "Status", "Took", "Outputs"], runs.map((run) => [
      h("span", {}, time(run.started_at, { short: true }), run.trigger ? h("span", { class: "muted" }, ` · ${run.trigger}`) : null),
      h("span", {}, badge(run.status), run.error ? h("span", { class: "step-details" }, ` ${run.error}`) : null),
      run.duration_ms !== undefined && run.duration_ms !== null ? `${(run.duration_ms / 1000).toFixed(1)} s` : "—",
      (run.outputs || []).length ? h("ul", { class: "plain" }, run.outputs.map((o) =>
        h("li", {}, o.channel, o.destination ? ` → ${o.destination}` : "", " ", badge(o.state)))) : h("span", { class: "muted" }, "none"),
    ]), (index) => ({ dataset: { run: runs[index].id } }));
  }

  async function runNow(agent, button) {
    button.disabled = true;
    try {
      const answer = await api.post(`/api/v1/agents/${encodeURIComponent(agent.id)}/run`, {});
      const text = `${agent.name || agent.id} started (run ${answer.run_id})`;
      fill(answerBox, h("p", { class: "notice good" }, text));
      announce(text);
    } catch (error) {
      fill(answerBox, errorBox(error));
    } finally {
      button.disabled = false;
    }
  }

  const unsubscribe = api.on("agents", api.debounce(load));
  await load();
  return unsubscribe;
}
