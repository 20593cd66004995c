#!/usr/bin/env python3
"""A local APNs stand-in: HTTP/2 over TLS, checking what Apple checks and answering with Apple's error reasons.

Push port (TLS, HTTP/2):  POST /3/device/<token>
Control port (plain HTTP): GET /control/requests, POST /control/script, POST /control/unregister,
                           POST /control/delay, POST /control/reset, GET /control/health
"""
import argparse
import json
import re
import sys
import time
import uuid

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

import standin_common as common

MAX_PAYLOAD = 4096
PUSH_TYPES = {"alert", "background", "location", "voip", "complication", "fileprovider", "mdm", "liveactivity", "pushtotalk"}


class APNs:
    def __init__(self, public_key, team_id, key_id, topics):
        self.public_key = public_key
        self.team_id = team_id
        self.key_id = key_id
        self.topics = topics
        self.reset()

    def reset(self):
        self.requests = []
        self.script = []
        self.unregistered = set()
        self.delay = 0.0

    def check_jwt(self, authorization):
        """Returns None when the provider token is good, else the APNs reason."""
        if not authorization or not authorization.lower().startswith("bearer "):
            return "MissingProviderToken", None
        token = authorization[7:].strip()
        try:
            header_b64, claims_b64, sig_b64 = token.split(".")
            header = json.loads(common.b64url_decode(header_b64))
            claims = json.loads(common.b64url_decode(claims_b64))
            raw = common.b64url_decode(sig_b64)
        except Exception:
            return "InvalidProviderToken", None
        if header.get("alg") != "ES256" or header.get("kid") != self.key_id or claims.get("iss") != self.team_id or len(raw) != 64:
            return "InvalidProviderToken", claims
        signature = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
        try:
            self.public_key.verify(signature, f"{header_b64}.{claims_b64}".encode(), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return "InvalidProviderToken", claims
        iat = claims.get("iat")
        if not isinstance(iat, int) or iat > time.time() + 300:
            return "InvalidProviderToken", claims
        if time.time() - iat > 3600:
            return "ExpiredProviderToken", claims
        return None, claims

    def validate(self, scope, headers, token, body):
        """(status, reason) for a request APNs would refuse, else None."""
        if scope.get("http_version") != "2":
            return 400, "BadPath"  # APNs speaks HTTP/2 only
        reason, _ = self.check_jwt(headers.get("authorization", [None])[0])
        if reason:
            return 403, reason
        for name, values in headers.items():
            if name.startswith("apns-") and len(values) > 1:
                return 400, "DuplicateHeaders"
        topic = headers.get("apns-topic", [None])[0]
        if not topic:
            return 400, "MissingTopic"
        push_type = headers.get("apns-push-type", [None])[0]
        if push_type not in PUSH_TYPES:
            return 400, "InvalidPushType"
        if (push_type == "liveactivity") != topic.endswith(".push-type.liveactivity"):
            return 400, "InvalidPushType"
        if topic not in self.topics:
            return 400, "TopicDisallowed"
        priority = headers.get("apns-priority", ["10"])[0]
        if priority not in ("1", "5", "10") or (push_type == "background" and priority != "5"):
            return 400, "BadPriority"
        expiration = headers.get("apns-expiration", ["0"])[0]
        if not re.fullmatch(r"\d+", expiration):
            return 400, "BadExpirationDate"
        collapse = headers.get("apns-collapse-id", [""])[0]
        if len(collapse.encode()) > 64:
            return 400, "BadCollapseId"
        apns_id = headers.get("apns-id", [None])[0]
        if apns_id is not None:
            try:
                uuid.UUID(apns_id)
            except ValueError:
                return 400, "BadMessageId"
        # Device tokens are 32 bytes; ActivityKit's push-to-start and update tokens are longer.
        pattern = r"(?:[0-9a-fA-F]{2}){32,512}" if push_type == "liveactivity" else r"[0-9a-fA-F]{64}"
        if not re.fullmatch(pattern, token or ""):
            return 400, "BadDeviceToken"
        if not body:
            return 400, "PayloadEmpty"
        if len(body) > MAX_PAYLOAD:
            return 413, "PayloadTooLarge"
        try:
            document = json.loads(body)
            if push_type != "liveactivity" and not isinstance(document.get("aps"), dict):
                return 400, "PayloadEmpty"
        except Exception:
            return 400, "PayloadEmpty"
        return None

    async def push(self, scope, receive, send, token):
        headers = common.header_map(scope)
        body = await common.read_body(receive)
        if self.delay:
            import asyncio
            await asyncio.sleep(self.delay)
        _, claims = self.check_jwt(headers.get("authorization", [None])[0])
        record = {
            "token": token,
            "headers": {k: v[0] for k, v in headers.items()},
            "body": body.decode("utf-8", "replace"),
            "http_version": scope.get("http_version"),
            "connection": f"{scope['client'][0]}:{scope['client'][1]}" if scope.get("client") else "",
            "jwt_iat": (claims or {}).get("iat"),
            "time": time.time(),
        }
        refused = self.validate(scope, headers, token, body)
        apns_id = headers.get("apns-id", [str(uuid.uuid4())])[0]
        if refused is None and token in self.unregistered:
            refused = (410, "Unregistered")
        extra = []
        if refused is None and self.script:
            step = self.script.pop(0)
            if step.get("status", 200) != 200:
                refused = (step["status"], step.get("reason", "InternalServerError"))
                if "retry_after" in step:
                    extra.append(("retry-after", str(step["retry_after"])))
        record["status"] = refused[0] if refused else 200
        record["reason"] = refused[1] if refused else None
        self.requests.append(record)
        if refused:
            payload = {"reason": refused[1]}
            if refused[0] == 410:
                payload["timestamp"] = int(time.time() * 1000)
            await common.respond(send, refused[0], payload, [("apns-id", apns_id)] + extra)
        else:
            await common.respond(send, 200, None, [("apns-id", apns_id)])

    async def control(self, scope, receive, send):
        path = scope["path"]
        body = await common.read_body(receive)
        data = json.loads(body) if body else {}
        if await common.shared_control(self, path, data, send):
            return
        if path == "/control/unregister":
            self.unregistered.add(data["token"])
            return await common.respond(send, 200, {"ok": True})
        if path == "/control/delay":
            self.delay = float(data.get("ms", 0)) / 1000
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
        if scope["method"] != "POST":
            await common.read_body(receive)
            return await common.respond(send, 405, {"reason": "MethodNotAllowed"})
        match = re.fullmatch(r"/3/device/([^/]*)", path)
        if not match:
            await common.read_body(receive)
            return await common.respond(send, 404, {"reason": "BadPath"})
        await self.push(scope, receive, send, match.group(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tls-port", type=int, required=True)
    parser.add_argument("--control-port", type=int, required=True)
    parser.add_argument("--cert-dir", required=True)
    parser.add_argument("--public-key", required=True, help="PEM public key of the provider's .p8")
    parser.add_argument("--team-id", required=True)
    parser.add_argument("--key-id", required=True)
    parser.add_argument("--topic", action="append", default=[])
    args = parser.parse_args()
    with open(args.public_key, "rb") as f:
        public_key = serialization.load_pem_public_key(f.read())
    topics = set(args.topic or ["dev.soulacy.ios", "dev.soulacy.ios.push-type.liveactivity"])
    common.serve(APNs(public_key, args.team_id, args.key_id, topics), args.tls_port, args.control_port, args.cert_dir)


if __name__ == "__main__":
    sys.exit(main())
