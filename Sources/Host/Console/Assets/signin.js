// Sign-in: an API key, or the six-digit one-time code `soulacy console-code` prints (nothing long to type on a phone).
import * as api from "./api.js";
import { h, fill, heading } from "./dom.js";

export function render(main) {
  const problem = h("p", { class: "error", role: "alert", id: "signin-error", hidden: true });
  const show = (error) => {
    problem.hidden = false;
    problem.textContent = error.status === 401 ? "That key or code was not accepted. Check it, or make a new code." : error.message;
  };
  async function submit(event, body, button) {
    event.preventDefault();
    problem.hidden = true;
    button.disabled = true;
    try {
      await api.signIn(body());
    } catch (error) {
      show(error);
      button.disabled = false;
    }
  }

  const code = h("input", { id: "signin-code", name: "code", inputmode: "numeric", pattern: "[0-9]{6}",
    maxlength: "6", required: true, "aria-describedby": "code-help" });
  const codeButton = h("button", { type: "submit", class: "primary" }, "Sign in with code");
  const codeForm = h("form", { class: "card", "aria-labelledby": "code-title", onsubmit: (e) => submit(e, () => ({ code: code.value.trim() }), codeButton) },
    h("h2", { id: "code-title" }, "With a one-time code"),
    h("label", { for: "signin-code" }, "Six-digit code"),
    code,
    h("p", { id: "code-help", class: "help" }, "Run ", h("code", {}, "soulacy console-code"), " on the gateway's machine. A code works once, for ten minutes."),
    codeButton);

  const key = h("input", { id: "signin-key", name: "api_key", type: "password", autocomplete: "current-password", spellcheck: "false", required: true,
    "aria-describedby": "key-help" });
  const keyButton = h("button", { type: "submit" }, "Sign in with key");
  const keyForm = h("form", { class: "card", "aria-labelledby": "key-title", onsubmit: (e) => submit(e, () => ({ api_key: key.value.trim() }), keyButton) },
    h("h2", { id: "key-title" }, "With an API key"),
    h("label", { for: "signin-key" }, "API key"),
    key,
    h("p", { id: "key-help", class: "help" }, "The key stays on the gateway: the browser keeps only a session cookie."),
    keyButton);

  fill(main, heading("Sign in to Soulacy"), problem, h("div", { class: "signin" }, codeForm, keyForm));
  code.focus();
}
