#!/usr/bin/env python3
"""A local stand-in for a trusted APNs relay: POST /v1/push and POST /v1/live over HTTPS with a bearer token.

Control port: GET /control/requests, POST /control/script, POST /control/reset, GET /control/health
"""
import argparse
import json
import re
import sys
import time

import standin_common as common

PUSH_FIELDS = {"device_token", "environment", "bundle_id", "title", "body", "deep_link"}
LIVE_FIELDS = {"token", "environment", "bundle_id", "event", "priority", "payload"}


class Relay:
    def __init__(self, token):
        self.token = token
        self.reset()

    def reset(self):
        self.requests = []
        self.script = []

    def check(self, path, headers, document):
        if headers.get("authorization", [""])[0] != f"Bearer {self.token}":
            return 401, "Unauthorized"
        if not isinstance(document, dict):
            return 400, "BadRequest"
        required = PUSH_FIELDS if path == "/v1/push" else LIVE_FIELDS
        missing = sorted(required - document.keys())
        if missing:
            return 400, "missing " + ",".join(missing)
        if document.get("environment") not in ("production", "development"):
            return 400, "BadEnvironment"
        token = document.get("device_token") if path == "/v1/push" else document.get("token")
        if not re.fullmatch(r"[0-9a-fA-F]{16,}", token or ""):
            return 400, "BadDeviceToken"
        if path == "/v1/live":
            payload = document.get("payload")
            if not isinstance(payload, dict) or not isinstance(payload.get("aps"), dict) or document.get("priority") not in (5, 10):
                return 400, "BadPayload"
        return None

    async def __call__(self, scope, receive, send):
        if await common.lifespan(scope, receive, send):
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        body = await common.read_body(receive)
        if path.startswith("/control/") and scope.get("scheme") != "https":
            data = json.loads(body) if body else {}
            if await common.shared_control(self, path, data, send):
                return
            return await common.respond(send, 404, {"reason": "BadPath"})
        if scope["method"] != "POST" or path not in ("/v1/push", "/v1/live"):
            return await common.respond(send, 404, {"reason": "BadPath"})
        headers = common.header_map(scope)
        try:
            document = json.loads(body)
        except json.JSONDecodeError:
            document = None
        record = {"path": path, "body": body.decode("utf-8", "replace"), "headers": {k: v[0] for k, v in headers.items()}, "time": time.time()}
        self.requests.append(record)
        refused = self.check(path, headers, document)
        if refused is None and self.script:
            step = self.script.pop(0)
            if step.get("status", 202) not in (200, 202):
                refused = (step["status"], step.get("reason", "InternalServerError"))
        record["status"] = refused[0] if refused else 202
        if refused:
            return await common.respond(send, refused[0], {"reason": refused[1]})
        await common.respond(send, 202, {"sent": True})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tls-port", type=int, required=True)
    parser.add_argument("--control-port", type=int, required=True)
    parser.add_argument("--cert-dir", required=True)
    parser.add_argument("--token", required=True)
    args = parser.parse_args()
    common.serve(Relay(args.token), args.tls_port, args.control_port, args.cert_dir)


if __name__ == "__main__":
    sys.exit(main())
