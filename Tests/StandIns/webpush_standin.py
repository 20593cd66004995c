#!/usr/bin/env python3
"""A local Web Push service stand-in, written from the RFCs: it plays the browser's push service and the browser.

RFC 8030 (delivery): POST /push/<id> with TTL (required), Urgency and Topic checked; 201 Created with a Location.
RFC 8292 (VAPID): `Authorization: vapid t=<JWT>, k=<key>`; the ES256 signature is verified against k, aud must be
this service's origin, exp in the future and at most 24 hours ahead, sub a mailto: or https: contact; k must be the
applicationServerKey the subscription was made with.
RFC 8291 (encryption): Content-Encoding aes128gcm, decrypted with http_ece and the subscription's private key and
auth secret; the plaintext is recorded for the test.

Push port (TLS):            POST /push/<id>
Control port (plain HTTP):  POST /control/subscribe {"application_server_key"?} -> {"id", "endpoint", "p256dh", "auth"}
                            POST /control/unsubscribe {"id"} (the subscription is gone: 410)
                            GET /control/requests, POST /control/script, POST /control/reset, GET /control/health
"""
import argparse
import base64
import json
import re
import secrets
import sys
import time
import uuid

import http_ece
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

import standin_common as common

MAX_BODY = 4096
URGENCIES = {"very-low", "low", "normal", "high"}
TOPIC = re.compile(r"[A-Za-z0-9_-]{1,32}")


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class WebPushService:
    def __init__(self, tls_port):
        self.origin = f"https://127.0.0.1:{tls_port}"
        self.tls_port = tls_port
        self.subscriptions = {}
        self.reset()

    def reset(self):
        self.requests = []
        self.script = []

    def subscribe(self, application_server_key):
        """A browser's subscription: its own P-256 key pair and auth secret, and the endpoint for it."""
        private_key = ec.generate_private_key(ec.SECP256R1())
        public = private_key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        auth = secrets.token_bytes(16)
        sid = uuid.uuid4().hex
        self.subscriptions[sid] = {"private_key": private_key, "auth": auth, "gone": False,
                                   "server_key": application_server_key}
        return {"id": sid, "endpoint": f"{self.origin}/push/{sid}", "p256dh": b64url(public), "auth": b64url(auth)}

    def check_vapid(self, authorization, subscription):
        """(status, reason, claims) for a refused VAPID authorization, else (None, None, claims)."""
        if not authorization:
            return 401, "MissingAuthorization", None
        match = re.fullmatch(r"\s*vapid\s+(.*)", authorization, re.IGNORECASE)
        if not match:
            return 401, "NotVapid", None
        params = {}
        for part in match.group(1).split(","):
            name, _, value = part.strip().partition("=")
            params[name.strip().lower()] = value.strip()
        token, key_text = params.get("t"), params.get("k")
        if not token or not key_text:
            return 401, "VapidParametersMissing", None
        try:
            key_bytes = common.b64url_decode(key_text)
            public_key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), key_bytes)
            header_b64, claims_b64, sig_b64 = token.split(".")
            header = json.loads(common.b64url_decode(header_b64))
            claims = json.loads(common.b64url_decode(claims_b64))
            raw = common.b64url_decode(sig_b64)
        except Exception:
            return 401, "BadJwtToken", None
        if header.get("alg") != "ES256" or header.get("typ", "JWT") != "JWT" or len(raw) != 64 or len(key_bytes) != 65:
            return 401, "BadJwtToken", claims
        signature = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
        try:
            public_key.verify(signature, f"{header_b64}.{claims_b64}".encode(), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return 401, "BadJwtSignature", claims
        if claims.get("aud") != self.origin:
            return 401, "BadAudience", claims
        exp = claims.get("exp")
        now = time.time()
        if not isinstance(exp, int) or exp <= now or exp > now + 24 * 3600 + 60:
            return 401, "BadExpiration", claims
        sub = claims.get("sub")
        if not isinstance(sub, str) or not (sub.startswith("mailto:") or sub.startswith("https:")):
            return 401, "BadSubject", claims
        if subscription.get("server_key") and subscription["server_key"] != key_text:
            return 403, "VapidKeyMismatch", claims
        return None, None, claims

    async def push(self, scope, receive, send, sid):
        headers = common.header_map(scope)
        body = await common.read_body(receive)
        first = lambda name: headers.get(name, [None])[0]
        record = {"id": sid, "headers": {k: v[0] for k, v in headers.items()}, "body_length": len(body),
                  "http_version": scope.get("http_version"), "time": time.time()}
        refused = None
        subscription = self.subscriptions.get(sid)
        claims = None
        if subscription is None:
            refused = (404, "NoSuchSubscription")
        elif subscription["gone"]:
            refused = (410, "SubscriptionGone")
        if refused is None:
            ttl = first("ttl")
            if ttl is None or not re.fullmatch(r"\d+", ttl):
                refused = (400, "TTL header missing or not a number")
            elif first("urgency") is not None and first("urgency") not in URGENCIES:
                refused = (400, "Urgency is not very-low, low, normal or high")
            elif first("topic") is not None and not TOPIC.fullmatch(first("topic")):
                refused = (400, "Topic is not 1-32 base64url characters")
        if refused is None:
            status, reason, claims = self.check_vapid(first("authorization"), subscription)
            record["jwt_claims"] = claims
            if status:
                refused = (status, reason)
        if refused is None:
            if (first("content-encoding") or "").lower() != "aes128gcm":
                refused = (415, "Content-Encoding must be aes128gcm")
            elif len(body) > MAX_BODY:
                refused = (413, "Payload Too Large")
        if refused is None:
            try:
                record["rs"] = int.from_bytes(body[16:20], "big")
                record["keyid_length"] = body[20]
                record["sender_key"] = b64url(body[21:21 + body[20]])
                plaintext = http_ece.decrypt(body, private_key=subscription["private_key"], auth_secret=subscription["auth"], version="aes128gcm")
                record["plaintext"] = plaintext.decode("utf-8")
            except Exception as error:
                refused = (400, f"cannot decrypt: {error}")
        extra = []
        if refused is None and self.script:
            step = self.script.pop(0)
            if step.get("status", 201) not in (200, 201, 202):
                refused = (step["status"], step.get("reason", "Scripted"))
                if "retry_after" in step:
                    extra.append(("retry-after", str(step["retry_after"])))
            if step.get("gone"):
                subscription["gone"] = True
        record["status"] = refused[0] if refused else 201
        record["reason"] = refused[1] if refused else None
        self.requests.append(record)
        if refused:
            await common.respond(send, refused[0], {"code": refused[0], "errno": 999, "error": "refused", "message": refused[1]}, extra)
        else:
            await common.respond(send, 201, None, [("location", f"{self.origin}/message/{uuid.uuid4().hex}")])

    async def control(self, scope, receive, send):
        path = scope["path"]
        body = await common.read_body(receive)
        data = json.loads(body) if body else {}
        if await common.shared_control(self, path, data, send):
            return
        if path == "/control/subscribe":
            return await common.respond(send, 200, self.subscribe(data.get("application_server_key")))
        if path == "/control/unsubscribe":
            self.subscriptions[data["id"]]["gone"] = True
            return await common.respond(send, 200, {"ok": True})
        return await common.respond(send, 404, {"reason": "BadPath"})

    async def __call__(self, scope, receive, send):
        if await common.lifespan(scope, receive, send):
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path.startswith("/control/"):
            if scope.get("scheme") == "https":
                return await common.respond(send, 404, {"reason": "BadPath"})
            return await self.control(scope, receive, send)
        match = re.fullmatch(r"/push/([0-9a-f]+)", path)
        if not match or scope["method"] != "POST":
            await common.read_body(receive)
            return await common.respond(send, 404 if not match else 405, {"reason": "BadPath"})
        await self.push(scope, receive, send, match.group(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tls-port", type=int, required=True)
    parser.add_argument("--control-port", type=int, required=True)
    parser.add_argument("--cert-dir", required=True)
    args = parser.parse_args()
    common.serve(WebPushService(args.tls_port), args.tls_port, args.control_port, args.cert_dir)


if __name__ == "__main__":
    sys.exit(main())
