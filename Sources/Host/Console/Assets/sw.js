// The console's service worker, served as /sw.js (scope /). A push from the gateway is its generic wake-up,
// RFC 8291-encrypted to this browser and decrypted by the browser before it gets here: the same words a phone
// shows, never an agent's output (the page fetches the line itself). It is shown as a notification; a click
// opens the inbox line it names (/#/inbox/<delivery id>), else the console's start page.
"use strict";

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

/** The wake-up's fields, or {} when the push carried nothing readable. */
function wakeUp(event) {
  if (!event.data) return {};
  try {
    const value = event.data.json();
    return value && typeof value === "object" && !Array.isArray(value) ? value : {};
  } catch {
    return {};
  }
}

function text(value, fallback) {
  return typeof value === "string" && value.length > 0 ? value.slice(0, 300) : fallback;
}

/** Where a click goes: always this origin's console, the delivery's line when the wake-up names one. */
function pageFor(data) {
  const id = typeof data.delivery_id === "string" ? data.delivery_id : "";
  return id ? "/#/inbox/" + encodeURIComponent(id) : "/";
}

self.addEventListener("push", (event) => {
  const data = wakeUp(event);
  // A tag makes a wake-up resent after a crash replace the first instead of showing twice.
  const tag = text(data.collapse_id, text(data.thread_id, undefined));
  const options = {
    body: text(data.body, "Something is ready to review."),
    data: { page: pageFor(data) },
    requireInteraction: data.time_sensitive === true,
  };
  if (tag) options.tag = tag;
  // Every push must show a notification (the subscription is userVisibleOnly).
  event.waitUntil(self.registration.showNotification(text(data.title, "Soulacy"), options));
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const page = (event.notification.data && event.notification.data.page) || "/";
  const url = new URL(page, self.location.origin).href;
  event.waitUntil((async () => {
    const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
    for (const client of windows) {
      if (new URL(client.url).origin !== self.location.origin) continue;
      // An open console goes to the line; one this worker does not control is only focused.
      try {
        if (client.navigate) await client.navigate(url);
      } catch {
        // not controlled by this worker
      }
      return client.focus();
    }
    return self.clients.openWindow(url);
  })());
});
