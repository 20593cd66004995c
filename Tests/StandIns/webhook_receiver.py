#!/usr/bin/env python3
"""A webhook receiver over HTTPS (HTTP/2 or 1.1) that verifies every delivery's signatures and answers as scripted.

Start:  python3 webhook_receiver.py --tls-port P --control-port C --cert-dir DIR --secret whsec_<base64>...
            [--soulacy-secret <secret>] [--accept-unverified]
        --secret is repeatable (rotation: a delivery verifies when any secret matches). --soulacy-secret defaults to
        the first --secret. Deliveries go to any path (POST https://127.0.0.1:P/<anything>).
Ready:  GET /control/health -> {"ok": true, "pid": N}; stdout "READY webhook-receiver tls=P control=C pid=N"

What it checks:
  * Standard Webhooks (https://www.standardwebhooks.com, spec/standard-webhooks.md "Signature scheme"), verified by the
    independent `standardwebhooks` PyPI package (its Webhook.verify), never by code of ours: headers webhook-id,
    webhook-timestamp (unix seconds, within 5 minutes) and webhook-signature, a space-separated list of
    "v1,<base64 HMAC-SHA256 of '<id>.<timestamp>.<body>'>" keyed by the base64-decoded part of the whsec_ secret;
    any listed v1 signature may match (key rotation); unknown versions are ignored.
    A --secret without the whsec_ prefix is handed to the package as its raw UTF-8 bytes (Webhook(secret.encode())),
    as the gateway documents for such secrets (the package would otherwise base64-decode the string).
  * Soulacy's own headers, as the original channel adapter sends them (soulacy-personal internal/channels/webhook,
    sign.go): X-Soulacy-Timestamp: <unix> and X-Soulacy-Signature: sha256=<hex> (bare hex also accepted, as the
    original's verifier does) -- see soulacy_signature() below. (An earlier version of this stand-in assumed the
    event hooks' "t=<unix>,v1=<hex>" header, which belongs to `hooks:`, not to the webhook channel.)
  * A delivery is "verified" when at least one scheme is present and every present one verifies. An unverified
    delivery is answered 401 {"error": "signature verification failed", ...} unless --accept-unverified (then it
    gets the scripted/default answer like any other); it is recorded either way.
  * The spec's receiver side: a repeated webhook-id is recorded with "duplicate": true (the spec asks receivers to
    deduplicate by id); status semantics the sender must honour (2xx success, 410 disable the endpoint, 429/5xx retry,
    Retry-After) are what the script serves.

Control port (plain HTTP), besides the shared routes (health, requests, script, delay, reset):
  GET  /control/deliveries -> {"deliveries": [{"id", "path", "headers", "body", "body_length", "time", "duplicate",
        "standard": {"present", "verified", "error", "signatures": N}, "soulacy": {"present", "verified", "error"},
        "verified", "status"}...]}   (also served as /control/requests)
  POST /control/script   {"responses": [{"status": 200|410|500|503}, {"status": 429, "retry_after": 7},
        {"hang": true}, {"delay_ms": N}, {"status": 200, "path": "/hooks/a"}]}   one step per delivery, in order; a
        step with "path" waits for a delivery to that path
  POST /control/default  {"status": 410, "path": "/hooks/a"?, "retry_after": N?} the answer when no step is queued
        (200 at start; without "path" for every path)
  POST /control/secrets  {"secrets": ["whsec_..."], "soulacy_secret": "..."} replaces the secrets
"""
import argparse
import collections
import hashlib
import hmac
import re
import sys
import time

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

import channel_common as cc

TOLERANCE = 300
MAX_SEEN = 10000


def soulacy_signature(secret, timestamp, body):
    """The original adapter's scheme (soulacy-personal internal/channels/webhook/sign.go):
         headers  X-Soulacy-Timestamp: <unix seconds>   X-Soulacy-Signature: sha256=<hex>
         hex      lowercase hex HMAC-SHA256 over the bytes "<timestamp>.<raw body>"
         key      the secret's raw bytes exactly as configured (UTF-8 of the whole trimmed string, a "whsec_" prefix
                  included, NOT base64-decoded as Standard Webhooks does)
       Returns the expected hex digest."""
    key = secret.strip().encode("utf-8")
    return hmac.new(key, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def soulacy_verify(secret, timestamp, header, body, now=None):
    """(verified, error) for X-Soulacy-Timestamp and X-Soulacy-Signature ("sha256=<hex>" or bare hex), within the
    original verifier's 5-minute tolerance (stale and future timestamps both refused)."""
    if timestamp is None:
        return False, "no X-Soulacy-Timestamp header"
    if not re.fullmatch(r"\d+", timestamp):
        return False, "X-Soulacy-Timestamp is not unix seconds"
    if abs((now or time.time()) - int(timestamp)) > TOLERANCE:
        return False, "timestamp outside the 5-minute tolerance"
    signature = header.strip()
    if signature.startswith("sha256="):
        signature = signature[len("sha256="):]
    if not re.fullmatch(r"[0-9a-fA-F]{64}", signature):
        return False, "X-Soulacy-Signature is not sha256=<64 hex digits>"
    if hmac.compare_digest(soulacy_signature(secret, timestamp, body), signature.lower()):
        return True, None
    return False, "the sha256 signature did not match"


class Receiver(cc.ChannelStandIn):
    name = "webhook-receiver"

    def __init__(self, secrets, soulacy_secret, accept_unverified):
        self.initial = (list(secrets), soulacy_secret)
        self.accept_unverified = accept_unverified
        super().__init__()

    def reset_state(self):
        self.secrets, self.soulacy_secret = list(self.initial[0]), self.initial[1]
        self.defaults = {}
        self.seen = collections.OrderedDict()  # webhook-ids, the last MAX_SEEN

    def verify_standard(self, headers, body):
        names = ("webhook-id", "webhook-timestamp", "webhook-signature")
        present = {n: headers[n][0] for n in names if n in headers}
        if not present:
            return {"present": False, "verified": False, "error": None, "signatures": 0}
        count = len(present.get("webhook-signature", "").split())
        last_error = "no secret configured"
        for secret in self.secrets:
            try:
                Webhook(secret if secret.startswith("whsec_") else secret.encode("utf-8")).verify(body, present, json_parse=False)
                return {"present": True, "verified": True, "error": None, "signatures": count}
            except WebhookVerificationError as problem:
                last_error = str(problem)
            except Exception as problem:  # a malformed header the package does not anticipate (e.g. no comma)
                last_error = f"malformed headers: {problem!r}"
        return {"present": True, "verified": False, "error": last_error, "signatures": count}

    def verify_soulacy(self, headers, body):
        header = headers.get("x-soulacy-signature", [None])[0]
        if header is None:
            return {"present": False, "verified": False, "error": None}
        if not self.soulacy_secret:
            return {"present": True, "verified": False, "error": "no soulacy secret configured"}
        verified, error = soulacy_verify(self.soulacy_secret, headers.get("x-soulacy-timestamp", [None])[0], header, body)
        return {"present": True, "verified": verified, "error": error}

    def take_step(self, path):
        for index, step in enumerate(self.script):
            if step.get("path") in (None, path):
                return self.script.pop(index)
        return None

    async def service(self, scope, headers, body, send):
        path = scope["path"]
        standard = self.verify_standard(headers, body)
        soulacy = self.verify_soulacy(headers, body)
        present = [s for s in (standard, soulacy) if s["present"]]
        verified = bool(present) and all(s["verified"] for s in present)
        delivery_id = headers.get("webhook-id", [None])[0]
        record = self.requests.append(cc.record_for(scope, headers, body, id=delivery_id, standard=standard, soulacy=soulacy,
                                                    verified=verified, duplicate=delivery_id is not None and delivery_id in self.seen))
        if delivery_id is not None:
            self.seen[delivery_id] = True
            self.seen.move_to_end(delivery_id)
            while len(self.seen) > MAX_SEEN:
                self.seen.popitem(last=False)
        if scope["method"] != "POST":
            record["status"] = 405
            return await cc.respond_json(send, 405, {"error": "webhooks are POSTed"})
        if not verified and not self.accept_unverified:
            record["status"] = 401
            return await cc.respond_json(send, 401, {"error": "signature verification failed", "standard": standard, "soulacy": soulacy})
        step = self.take_step(path) or self.defaults.get(path) or self.defaults.get(None) or {"status": 200}
        await self.pause(step)
        status = int(step.get("status", 200))
        extra = [("Retry-After", step["retry_after"])] if "retry_after" in step else []
        record["status"] = status
        answer = {"ok": 200 <= status < 300, "status": status}
        if step.get("echo_url"):
            # As many services word an error: the request's own path and query quoted back.
            query = scope.get("query_string", b"").decode("latin-1")
            answer["error"] = "no hook at " + path + ("?" + query if query else "")
        await cc.respond_json(send, status, answer, extra)

    async def extra_control(self, path, method, data, send):
        if path == "/control/deliveries":
            await cc.respond_json(send, 200, {"deliveries": self.requests.list(), "dropped": self.requests.dropped})
        elif path == "/control/default":
            step = {k: v for k, v in data.items() if k != "path"}
            self.defaults[data.get("path")] = step
            await cc.respond_json(send, 200, {"ok": True})
        elif path == "/control/secrets":
            self.secrets = list(data.get("secrets", self.secrets))
            self.soulacy_secret = data.get("soulacy_secret", self.soulacy_secret)
            await cc.respond_json(send, 200, {"ok": True})
        else:
            return False
        return True


def main():
    parser = argparse.ArgumentParser()
    cc.add_standard_arguments(parser)
    parser.add_argument("--secret", action="append", default=[], help="a Standard Webhooks secret, whsec_<base64>")
    parser.add_argument("--soulacy-secret", default=None)
    parser.add_argument("--accept-unverified", action="store_true")
    args = parser.parse_args()
    soulacy_secret = args.soulacy_secret if args.soulacy_secret is not None else (args.secret[0] if args.secret else None)
    return cc.serve(Receiver(args.secret, soulacy_secret, args.accept_unverified), args.tls_port, args.control_port, args.cert_dir)


if __name__ == "__main__":
    sys.exit(main())
