#!/usr/bin/env python3
"""A local stand-in for Google's OAuth2 token endpoint and the FCM HTTP v1 API, over HTTPS (HTTP/2 or 1.1).

TLS port:     POST /token                               (RS256 JWT-bearer assertion -> access token)
              POST /v1/projects/<project>/messages:send (Bearer access token; {"validate_only": true} checks the
                                                        request and delivers nothing, as FCM does)
Control port: GET /control/requests, GET /control/tokens, POST /control/script, POST /control/unregister,
              POST /control/lifetime, POST /control/revoke, POST /control/reset, GET /control/health
"""
import argparse
import json
import re
import secrets
import sys
import time
import urllib.parse

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

import standin_common as common

SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
# What an app's registration token looks like (FCM gives ~150-character tokens of these characters); checked only
# for validate_only requests, so the sends of other tests may use any token.
REGISTRATION_TOKEN = re.compile(r"[A-Za-z0-9_:\-]{100,4096}")


def fcm_error(status, state, message, code=None):
    error = {"code": status, "message": message, "status": state}
    if code:
        error["details"] = [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}]
    return {"error": error}


class FCM:
    def __init__(self, public_key, client_email, project, token_url):
        self.public_key = public_key
        self.client_email = client_email
        self.project = project
        self.token_url = token_url
        self.reset()

    def reset(self):
        self.requests = []
        self.token_requests = []
        self.script = []
        self.unregistered = set()
        self.lifetime = 3600
        self.tokens = {}

    def check_assertion(self, assertion):
        try:
            header_b64, claims_b64, sig_b64 = assertion.split(".")
            header = json.loads(common.b64url_decode(header_b64))
            claims = json.loads(common.b64url_decode(claims_b64))
            self.public_key.verify(common.b64url_decode(sig_b64), f"{header_b64}.{claims_b64}".encode(), padding.PKCS1v15(), hashes.SHA256())
        except (ValueError, InvalidSignature, json.JSONDecodeError):
            return "invalid_grant", "Invalid JWT Signature."
        if header.get("alg") != "RS256":
            return "invalid_grant", "alg must be RS256"
        if claims.get("iss") != self.client_email or claims.get("aud") != self.token_url or claims.get("scope") != SCOPE:
            return "invalid_grant", "Invalid claims (iss, aud or scope)."
        iat, exp = claims.get("iat"), claims.get("exp")
        now = time.time()
        if not isinstance(iat, int) or not isinstance(exp, int) or exp - iat > 3600 or iat > now + 300 or exp < now:
            return "invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe."
        return None, claims

    async def token(self, scope, receive, send):
        body = (await common.read_body(receive)).decode()
        form = urllib.parse.parse_qs(body)
        record = {"time": time.time(), "form_keys": sorted(form.keys())}
        self.token_requests.append(record)
        if form.get("grant_type") != ["urn:ietf:params:oauth:grant-type:jwt-bearer"] or "assertion" not in form:
            record["status"] = 400
            return await common.respond(send, 400, {"error": "unsupported_grant_type"})
        error, detail = self.check_assertion(form["assertion"][0])
        if error:
            record["status"] = 400
            return await common.respond(send, 400, {"error": error, "error_description": detail})
        token = "ya29." + secrets.token_urlsafe(24)
        self.tokens[token] = time.time() + self.lifetime
        record["status"] = 200
        await common.respond(send, 200, {"access_token": token, "expires_in": self.lifetime, "token_type": "Bearer"})

    def validate_message(self, document):
        message = document.get("message") if isinstance(document, dict) else None
        if not isinstance(message, dict):
            return "message is required"
        if not isinstance(message.get("token"), str) or not message["token"]:
            return "message.token is required"
        if "notification" in message or "notification" in (message.get("android") or {}):
            return "this stand-in expects data-only messages"
        data = message.get("data")
        if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
            return "Invalid value at 'message.data': the data map holds only strings"
        if (message.get("android") or {}).get("priority") != "high":
            return "message.android.priority must be high for a wake-up"
        return None

    async def send_message(self, scope, receive, send, project):
        headers = common.header_map(scope)
        body = await common.read_body(receive)
        auth = headers.get("authorization", [""])[0]
        record = {"time": time.time(), "body": body.decode("utf-8", "replace"), "headers": {k: v[0] for k, v in headers.items()},
                  "http_version": scope.get("http_version"), "project": project,
                  "connection": f"{scope['client'][0]}:{scope['client'][1]}" if scope.get("client") else ""}
        self.requests.append(record)
        token = auth[7:] if auth.startswith("Bearer ") else ""
        if token not in self.tokens or self.tokens[token] < time.time():
            record["status"] = 401
            return await common.respond(send, 401, fcm_error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials."))
        if project != self.project:
            record["status"] = 403
            return await common.respond(send, 403, fcm_error(403, "PERMISSION_DENIED", "SenderId mismatch", "SENDER_ID_MISMATCH"))
        try:
            document = json.loads(body)
        except json.JSONDecodeError:
            record["status"] = 400
            return await common.respond(send, 400, fcm_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.", "INVALID_ARGUMENT"))
        problem = self.validate_message(document)
        if problem:
            record["status"] = 400
            return await common.respond(send, 400, fcm_error(400, "INVALID_ARGUMENT", problem, "INVALID_ARGUMENT"))
        device_token = document["message"]["token"]
        if document.get("validate_only") is True:
            # "validate_only: Flag for testing the request without actually delivering the message": the request is
            # checked as a send is, nothing is delivered, and a token no device was given is refused as FCM refuses it.
            record["validate_only"] = True
            if not REGISTRATION_TOKEN.fullmatch(device_token):
                record["status"] = 400
                return await common.respond(send, 400, fcm_error(400, "INVALID_ARGUMENT",
                                                                 "The registration token is not a valid FCM registration token", "INVALID_ARGUMENT"))
            record["status"] = 200
            return await common.respond(send, 200, {"name": f"projects/{project}/messages/fake_message_id"})
        if device_token in self.unregistered:
            record["status"] = 404
            return await common.respond(send, 404, fcm_error(404, "NOT_FOUND", "Requested entity was not found.", "UNREGISTERED"))
        if self.script:
            step = self.script.pop(0)
            status = step.get("status", 200)
            if status != 200:
                record["status"] = status
                extra = [("retry-after", str(step["retry_after"]))] if "retry_after" in step else []
                return await common.respond(send, status, fcm_error(status, step.get("state", "UNAVAILABLE"), "scripted", step.get("code")), extra)
        record["status"] = 200
        await common.respond(send, 200, {"name": f"projects/{project}/messages/{secrets.token_hex(8)}"})

    async def control(self, scope, receive, send):
        path = scope["path"]
        body = await common.read_body(receive)
        data = json.loads(body) if body else {}
        if await common.shared_control(self, path, data, send):
            return
        if path == "/control/tokens":
            return await common.respond(send, 200, {"requests": self.token_requests})
        if path == "/control/unregister":
            self.unregistered.add(data["token"])
            return await common.respond(send, 200, {"ok": True})
        if path == "/control/lifetime":
            self.lifetime = int(data["seconds"])
            return await common.respond(send, 200, {"ok": True})
        if path == "/control/revoke":
            self.tokens.clear()
            return await common.respond(send, 200, {"ok": True})
        return await common.respond(send, 404, {"error": "no such control"})

    async def __call__(self, scope, receive, send):
        if await common.lifespan(scope, receive, send):
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path.startswith("/control/") and scope.get("scheme") != "https":
            return await self.control(scope, receive, send)
        if scope["method"] == "POST" and path == "/token":
            return await self.token(scope, receive, send)
        match = re.fullmatch(r"/v1/projects/([^/]+)/messages:send", path)
        if scope["method"] == "POST" and match:
            return await self.send_message(scope, receive, send, match.group(1))
        await common.read_body(receive)
        await common.respond(send, 404, fcm_error(404, "NOT_FOUND", "not found"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tls-port", type=int, required=True)
    parser.add_argument("--control-port", type=int, required=True)
    parser.add_argument("--cert-dir", required=True)
    parser.add_argument("--public-key", required=True)
    parser.add_argument("--client-email", required=True)
    parser.add_argument("--project", required=True)
    args = parser.parse_args()
    with open(args.public_key, "rb") as f:
        public_key = serialization.load_pem_public_key(f.read())
    token_url = f"https://127.0.0.1:{args.tls_port}/token"
    common.serve(FCM(public_key, args.client_email, args.project, token_url), args.tls_port, args.control_port, args.cert_dir)


if __name__ == "__main__":
    sys.exit(main())
