// Browser notifications for the console (docs/console-api.md §"Browser notifications"): this browser becomes a
// device of platform web that gets the same generic wake-ups as the phones.

/**
 * Subscribes this browser: asks for permission to notify, registers /sw.js, subscribes with the gateway's VAPID
 * key (GET /api/v1/console/webpush) and posts the subscription (POST /api/v1/console/webpush/subscriptions,
 * with the session's X-CSRF-Token). Call it from a click: browsers ask for permission only from a user's gesture.
 * Resolves to the new device's id; rejects with an Error whose message says why not.
 * @param {string} csrfToken the session's csrf_token
 * @returns {Promise<string>}
 */
export async function subscribe(csrfToken) {
  if (!("serviceWorker" in navigator) || !("PushManager" in window) || !("Notification" in window)) {
    throw new Error("this browser cannot receive Web Push notifications");
  }
  // First, while the click's user activation lasts (Safari asks only then).
  const permission = await Notification.requestPermission();
  if (permission !== "granted") throw new Error("notifications are blocked for this site; allow them in the browser's settings");

  const keyAnswer = await fetch("/api/v1/console/webpush", { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!keyAnswer.ok) throw new Error(await refusal(keyAnswer));
  const { public_key: publicKey } = await keyAnswer.json();
  const applicationServerKey = fromBase64URL(publicKey);

  const registration = await navigator.serviceWorker.register("/sw.js", { scope: "/" });
  await navigator.serviceWorker.ready;
  let subscription = await registration.pushManager.getSubscription();
  // A subscription made with another key (a gateway whose key was replaced) would be refused by the push service.
  if (subscription && !sameBytes(subscription.options && subscription.options.applicationServerKey, applicationServerKey)) {
    await subscription.unsubscribe();
    subscription = null;
  }
  if (!subscription) {
    subscription = await registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey });
  }

  const answer = await fetch("/api/v1/console/webpush/subscriptions", {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRF-Token": csrfToken },
    body: JSON.stringify({ ...subscription.toJSON(), name: browserName() }),
  });
  if (!answer.ok) throw new Error(await refusal(answer));
  return (await answer.json()).device_id;
}

/** The API's error shape `{"error", "code", "field"?}` as one sentence. */
async function refusal(response) {
  try {
    const body = await response.json();
    if (body && typeof body.error === "string") return body.error;
  } catch {
    // not JSON
  }
  return `the gateway answered ${response.status}`;
}

function fromBase64URL(text) {
  const base64 = text.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (text.length % 4)) % 4);
  return Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
}

function sameBytes(buffer, bytes) {
  if (!buffer) return false;
  const other = new Uint8Array(buffer);
  return other.length === bytes.length && other.every((b, i) => b === bytes[i]);
}

/** What the devices list calls this browser, from its user agent ("Firefox on Linux"). */
function browserName() {
  const agent = navigator.userAgent || "";
  const browser = /Edg\//.test(agent) ? "Edge" : /Firefox\//.test(agent) ? "Firefox" : /Chrome\//.test(agent) ? "Chrome"
    : /Safari\//.test(agent) ? "Safari" : "Browser";
  const system = /Android/.test(agent) ? "Android" : /iPhone|iPad/.test(agent) ? "iOS" : /Mac OS X/.test(agent) ? "macOS"
    : /Windows/.test(agent) ? "Windows" : /Linux/.test(agent) ? "Linux" : "";
  return system ? `${browser} on ${system}` : browser;
}
