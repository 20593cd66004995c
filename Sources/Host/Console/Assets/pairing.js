// Pairing and the household: a code (for yourself, or as an admin for a person with a role) shown as a QR code
// with its expiry counting down; the members, their devices and keys (who minted each, when), and revoking.
import * as api from "./api.js";
import { h, fill, heading, time, badge, facts, errorBox, empty, announce, duration, table } from "./dom.js";

export const title = "Pairing";

export async function render(main) {
  const offerBox = h("div", { id: "offer", "aria-live": "polite" });
  const ownKeys = h("div", { id: "own-keys" });
  const household = h("div", { id: "members" });
  let countdown = null;

  const sections = [heading("Pairing and household")];
  if (api.canAct()) sections.push(pairForm(), offerBox);
  else sections.push(h("p", { class: "notice" }, "Your role is viewer: this console is read-only. Ask an admin for a pairing code."));
  sections.push(h("section", { "aria-labelledby": "keys-title" }, h("h2", { id: "keys-title" }, "Your keys"), ownKeys));
  if (api.isAdmin()) sections.push(h("section", { "aria-labelledby": "members-title" }, h("h2", { id: "members-title" }, "Household"), household));
  fill(main, ...sections);

  function pairForm() {
    const forWhom = h("fieldset", { class: "for-whom" }, h("legend", {}, "Who is the device for?"),
      radio("pair-for", "self", "Me", true), api.isAdmin() ? radio("pair-for", "person", "Someone in the household", false) : null);
    const person = h("div", { class: "person", id: "pair-person", hidden: true },
      h("div", { class: "field" }, h("label", { for: "pair-name" }, "Their name"),
        h("input", { id: "pair-name", name: "name", autocomplete: "off", maxlength: "60", "aria-describedby": "pair-name-help" }),
        h("p", { class: "help", id: "pair-name-help" }, "Their inbox, devices and approvals are kept apart from everyone else's.")),
      h("div", { class: "field" }, h("label", { for: "pair-role" }, "Role"),
        h("select", { id: "pair-role", name: "role" },
          h("option", { value: "viewer" }, "viewer: reads their own things"),
          h("option", { value: "operator", selected: true }, "operator: also runs agents and decides"))));
    const form = h("form", { class: "card", id: "pair-form", "aria-labelledby": "pair-title" },
      h("h2", { id: "pair-title" }, "Pair a device"), forWhom, person,
      h("button", { type: "submit", class: "primary" }, "Make a pairing code"));
    form.addEventListener("change", () => { person.hidden = form.elements["pair-for"].value !== "person"; });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const body = {};
      if (form.elements["pair-for"].value === "person") {
        body.name = form.elements.name.value.trim();
        body.role = form.elements.role.value;
      }
      try {
        showOffer(await api.post("/api/v1/console/pairing", body), body.name);
      } catch (error) {
        fill(offerBox, errorBox(error));
      }
    });
    return form;
  }

  function showOffer(offer, subject) {
    if (countdown) clearInterval(countdown);
    const remaining = h("span", { id: "offer-remaining" });
    const timer = h("p", { role: "timer", "aria-live": "off", class: "countdown" }, "Expires in ", remaining, " (", time(offer.expires_at), ")");
    const tick = () => {
      const left = (new Date(offer.expires_at).getTime() - Date.now()) / 1000;
      if (left <= 0) {
        clearInterval(countdown);
        fill(timer, badge("expired"), " This code has run out; make a new one.");
        announce("The pairing code has expired");
        return;
      }
      remaining.textContent = duration(left);
    };
    const label = `QR code for pairing code ${offer.code}${subject ? " for " + subject : ""}`;
    fill(offerBox, h("article", { class: "card offer" },
      h("h2", {}, subject ? `Code for ${offer.display_name || subject}` : "Code for your device"),
      offer.role ? h("p", { class: "muted" }, `The device gets the ${offer.role} role.`) : null,
      // The SVG is shown as an image (never parsed into the page), so nothing in it can run.
      h("img", { class: "qr", id: "offer-qr", alt: label, src: "data:image/svg+xml;charset=utf-8," + encodeURIComponent(offer.qr_svg || "") }),
      h("p", { class: "code", id: "offer-code", "aria-label": `Code ${offer.code.split("").join(" ")}` }, offer.code),
      timer,
      h("p", { class: "help" }, "Scan it with the Soulacy app, or type the code there. It works once."),
      offer.pair_url || offer.link ? facts([["Link", h("code", { class: "wrap", id: "offer-link" }, offer.pair_url || offer.link)]]) : null));
    tick();
    countdown = setInterval(tick, 1000);
    announce(`Pairing code ${offer.code} made`);
  }

  async function loadKeys() {
    try {
      const answer = await api.get("/api/v1/api-keys");
      const keys = answer.keys || [];
      fill(ownKeys, keys.length ? keyTable(keys, (key) => `/api/v1/api-keys/${encodeURIComponent(key.id)}`) : empty("No keys."));
    } catch (error) {
      fill(ownKeys, errorBox(error));
    }
  }

  async function loadMembers() {
    if (!api.isAdmin()) return;
    try {
      const answer = await api.get("/api/v1/pairing/members");
      const members = answer.members || [];
      fill(household, members.length ? members.map(member) : empty("Nobody has paired a device yet."));
    } catch (error) {
      fill(household, errorBox(error));
    }
  }

  function member(person) {
    return h("article", { class: "card member", dataset: { subject: person.subject }, "aria-labelledby": `member-${person.subject}` },
      h("h3", { id: `member-${person.subject}` }, person.name, " ", h("span", { class: "muted" }, `(${person.subject}) · ${person.role}`)),
      h("h4", {}, "Devices"),
      (person.devices || []).length ? h("ul", { class: "plain" }, person.devices.map((d) => h("li", {}, d.name || d.id, " ", h("span", { class: "muted" }, d.platform)))) : empty("No device."),
      h("h4", {}, "Keys"),
      keyTable(person.keys || [], (key) => `/admin/api-keys/${encodeURIComponent(key.id)}`));
  }

  function keyTable(keys, revokePath) {
    return table(["Name", "Role", "Made", "Minted by", "State", ""], keys.map((key) => [
      key.name || key.id,
      key.role,
      time(key.created_at),
      key.minted_by || h("span", { class: "muted" }, "not recorded"),
      key.revoked_at ? h("span", {}, badge("revoked", "bad"), " ", time(key.revoked_at)) : badge("active", "good"),
      api.canAct() && !key.revoked_at
        ? h("button", { type: "button", class: "danger small", dataset: { action: "revoke", key: key.id }, "aria-label": `Revoke ${key.name || key.id}`, onclick: () => revoke(key, revokePath(key)) }, "Revoke")
        : null,
    ]), (index) => ({ dataset: { key: keys[index].id } }));
  }

  async function revoke(key, path) {
    if (!window.confirm(`Revoke ${key.name || key.id}? Its device is unpaired at once.`)) return;
    try {
      await api.del(path);
      announce(`${key.name || key.id} revoked`);
    } catch (error) {
      announce(error.message);
      main.prepend(errorBox(error));
    }
    await Promise.all([loadKeys(), loadMembers()]);
  }

  const unsubscribe = api.on("device", api.debounce(loadMembers));
  await Promise.all([loadKeys(), loadMembers()]);
  return () => { if (countdown) clearInterval(countdown); unsubscribe(); };
}

function radio(name, value, label, checked) {
  const id = `${name}-${value}`;
  return h("div", { class: "radio" }, h("input", { type: "radio", id, name, value, checked }), h("label", { for: id }, label));
}
