#!/usr/bin/env python3
"""The reference for wake-ups per second: aioapns sending the same pushes to the same local stand-in."""
import asyncio
import json
import ssl
import sys
import time

import aioapns
from aioapns import APNs, NotificationRequest
from aioapns.connection import APNsProductionClientProtocol
from h2.events import ResponseReceived

# APNs echoes apns-id in each response and aioapns matches responses by it; the fast stand-in (nghttpd) does not
# echo headers, so responses get the id of the request on their stream, as APNs would send it.
_receive = APNsProductionClientProtocol.data_received


def _data_received(self, data):
    original = self.conn.receive_data

    def receive(chunk):
        events = original(chunk)
        for event in events:
            if isinstance(event, ResponseReceived) and not any(k == b"apns-id" for k, _ in event.headers):
                notification_id = self.request_streams.get(event.stream_id)
                if notification_id:
                    event.headers = list(event.headers) + [(b"apns-id", notification_id.encode())]
        return events

    self.conn.receive_data = receive
    try:
        _receive(self, data)
    finally:
        self.conn.receive_data = original


APNsProductionClientProtocol.data_received = _data_received


async def main(host, port, ca, key_file, count, concurrency):
    APNsProductionClientProtocol.APNS_SERVER = host
    APNsProductionClientProtocol.APNS_PORT = port
    context = ssl.create_default_context(cafile=ca)
    context.set_alpn_protocols(["h2"])  # as aioapns does for its own context; HTTP/2 servers require it
    client = APNs(key=open(key_file).read(), key_id="KEY1234567", team_id="TEAM123456", topic="dev.soulacy.ios",
                  use_sandbox=False, max_connections=1, ssl_context=context)
    token = "ab" * 32
    payload = {"aps": {"alert": {"title": "Soulacy", "body": "An agent result is ready to review."}, "category": "SOULACY_DELIVERY"}}
    await client.send_notification(NotificationRequest(device_token=token, message=payload))  # warm up
    sent = 0
    ok = 0
    start = time.perf_counter()

    async def worker():
        nonlocal sent, ok
        while sent < count:
            sent += 1
            result = await client.send_notification(NotificationRequest(device_token=token, message=payload))
            ok += result.is_successful

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    print(json.dumps({"bench": "aioapns", "sent": count, "delivered": ok, "per_second": count / elapsed}))


if __name__ == "__main__":
    host, port, ca, key, count, concurrency = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
    asyncio.run(main(host, port, ca, key, count, concurrency))
