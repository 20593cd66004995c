// The console's Web Push assets run against stand-ins of the browser APIs they use (service worker globals,
// PushManager, Notification, fetch). Run by WebPushGatewayTests through node; exits non-zero on the first failure.
import assert from "node:assert/strict";
import fs from "node:fs";
import vm from "node:vm";

const assets = new URL("../../Sources/Host/Console/Assets/", import.meta.url);

// MARK: sw.js
{
  const listeners = {};
  const shown = [];
  const opened = [];
  let windows = [];
  const self = {
    addEventListener: (type, listener) => { listeners[type] = listener; },
    skipWaiting: () => {},
    location: { origin: "https://gateway.example:8443" },
    registration: { showNotification: async (title, options) => { shown.push({ title, options }); } },
    clients: { claim: async () => {}, matchAll: async () => windows, openWindow: async (url) => { opened.push(url); } },
  };
  vm.runInNewContext(fs.readFileSync(new URL("sw.js", assets), "utf8"), { self, URL, encodeURIComponent });
  const event = (fields) => {
    const e = { waits: [], waitUntil(p) { this.waits.push(p); } };
    if (fields) Object.assign(e, fields);
    return e;
  };
  const push = async (text) => {
    const e = event({ data: text === undefined ? null : { json: () => JSON.parse(text) } });
    listeners.push(e);
    await Promise.all(e.waits);
  };

  await push(JSON.stringify({ title: "Soulacy", body: "An agent result is ready to review.", category: "SOULACY_DELIVERY",
    thread_id: "delivery-echo", delivery_id: "dlv_42", collapse_id: "dlv_42", time_sensitive: false, extra: {} }));
  assert.equal(shown.length, 1);
  assert.equal(shown[0].title, "Soulacy");
  assert.equal(shown[0].options.body, "An agent result is ready to review.");
  assert.equal(shown[0].options.tag, "dlv_42");
  assert.equal(shown[0].options.data.page, "/#/inbox/dlv_42");

  // An approval (no delivery id) opens the start page; an unreadable push still shows the generic words.
  await push(JSON.stringify({ title: "Approval needed", body: "Echo wants to use shell", thread_id: "approvals" }));
  assert.equal(shown[1].options.data.page, "/");
  assert.equal(shown[1].options.tag, "approvals");
  await push("not json");
  await push(undefined);
  assert.equal(shown[2].title, "Soulacy");
  assert.equal(shown[3].options.data.page, "/");

  // A click with no console open opens the line; with one open, that window goes there and is focused.
  const click = async (page) => {
    let closed = false;
    const e = event({ notification: { data: { page }, close: () => { closed = true; } } });
    listeners.notificationclick(e);
    await Promise.all(e.waits);
    assert.ok(closed);
  };
  await click("/#/inbox/dlv_42");
  assert.deepEqual(opened, ["https://gateway.example:8443/#/inbox/dlv_42"]);
  const navigated = [];
  let focused = 0;
  windows = [{ url: "https://elsewhere.example/", navigate: async () => assert.fail("another site's window") },
             { url: "https://gateway.example:8443/#/agents", navigate: async (url) => { navigated.push(url); }, focus: () => { focused += 1; } }];
  await click("/#/inbox/dlv_7");
  assert.deepEqual(navigated, ["https://gateway.example:8443/#/inbox/dlv_7"]);
  assert.equal(focused, 1);
  assert.equal(opened.length, 1);
}

// MARK: webpush.js
{
  const publicKey = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8";
  const requests = [];
  const registered = [];
  let subscribedWith = null;
  const subscription = {
    toJSON: () => ({ endpoint: "https://push.example.net/push/abc", expirationTime: null, keys: { p256dh: "BCVx", auth: "BTBZ" } }),
  };
  const registration = { pushManager: {
    getSubscription: async () => null,
    subscribe: async (options) => { subscribedWith = options; return subscription; },
  } };
  Object.defineProperty(globalThis, "navigator", { configurable: true, value: {
    userAgent: "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    serviceWorker: { register: async (url, options) => { registered.push([url, options]); return registration; }, ready: Promise.resolve(registration) },
  } });
  globalThis.window = { PushManager: class {}, Notification: class {} };
  let permission = "granted";
  globalThis.Notification = { requestPermission: async () => permission };
  globalThis.fetch = async (url, init = {}) => {
    requests.push({ url, init });
    if (url === "/api/v1/console/webpush") return new Response(JSON.stringify({ public_key: publicKey }), { status: 200 });
    if (url === "/api/v1/console/webpush/subscriptions") {
      return init.headers["X-CSRF-Token"] === "csrf-1"
        ? new Response(JSON.stringify({ device_id: "web-1" }), { status: 201 })
        : new Response(JSON.stringify({ error: "csrf failed", code: "csrf_failed" }), { status: 403 });
    }
    return new Response("{}", { status: 404 });
  };
  const { subscribe } = await import(new URL("webpush.js", assets));

  assert.equal(await subscribe("csrf-1"), "web-1");
  assert.deepEqual(registered, [["/sw.js", { scope: "/" }]]);
  assert.equal(subscribedWith.userVisibleOnly, true);
  assert.equal(Buffer.from(subscribedWith.applicationServerKey).toString("base64url"), publicKey);
  const post = requests.find((r) => r.url === "/api/v1/console/webpush/subscriptions");
  assert.equal(post.init.method, "POST");
  assert.equal(post.init.headers["X-CSRF-Token"], "csrf-1");
  assert.deepEqual(JSON.parse(post.init.body), { endpoint: "https://push.example.net/push/abc", expirationTime: null,
    keys: { p256dh: "BCVx", auth: "BTBZ" }, name: "Firefox on Linux" });

  // The gateway's refusal and a denied permission reach the caller as errors saying why.
  await assert.rejects(subscribe("wrong"), /csrf failed/);
  permission = "denied";
  const before = requests.length;
  await assert.rejects(subscribe("csrf-1"), /blocked/);
  assert.equal(requests.length, before);
}

console.log("webpush assets: sw.js and webpush.js behaved");
