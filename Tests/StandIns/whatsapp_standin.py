#!/usr/bin/env python3
"""A local WhatsApp Business Cloud API stand-in over HTTPS (HTTP/2 or 1.1): POST /v{version}/{phone_number_id}/messages.

Start:  python3 whatsapp_standin.py --tls-port P --control-port C --cert-dir DIR --token <access token>
        [--phone-number-id 106540352242922]... [--allowed-recipient 15551234567]...
        (--allowed-recipient given: the business number is a test number that may only message those recipients)
Ready:  GET /control/health -> {"ok": true, "pid": N}; stdout "READY whatsapp tls=P control=C pid=N"

Rules enforced, from Meta's docs (https://developers.facebook.com/docs/whatsapp/cloud-api):
  * "Send messages" / "Text messages" (cloud-api/messages/text-messages, cloud-api/reference/messages): POST
    https://graph.facebook.com/v{version}/{phone_number_id}/messages with `Authorization: Bearer <token>` and a JSON
    body: messaging_product "whatsapp" (required), recipient_type "individual" (optional), to (required), type
    (default "text"), text.body (required, at most 4096 characters), text.preview_url (bool). Success 200:
    {"messaging_product": "whatsapp", "contacts": [{"input": <to>, "wa_id": <digits>}], "messages": [{"id": "wamid..."}]}.
  * "Error codes" (cloud-api/support/error-codes) and Graph's "Handling errors" (graph-api/guides/error-handling):
    errors are {"error": {"message": "(#CODE) Title", "type": "OAuthException", "code": N, "error_data":
    {"messaging_product": "whatsapp", "details": "..."}, "fbtrace_id": "..."}}; error_subcode is only sent to API
    versions before v16.0 (the docs call it deprecated), except on Graph's generic 190 token and 100/33 errors. Served here:
      190    invalid/expired access token, HTTP 401 (subcode 463 expired when scripted "expired_token")
      2500   no token ("An active access token must be used..."), HTTP 400
      100    invalid parameter (missing messaging_product/to/text.body, wrong type, body over 4096), HTTP 400
      100/33 unknown phone_number_id ("Unsupported post request. Object with ID ... does not exist"), HTTP 400
      131030 recipient not in the allowed list (test numbers), HTTP 400
      131047 re-engagement message (outside the 24-hour window), HTTP 400  -- scripted or /control/window.
             The docs report this one asynchronously through the status webhook; a synchronous answer here is a
             stand-in convenience, noted so tests do not rely on it being synchronous.
      130429 Cloud API throughput reached, 80007 WABA rate limit, 4 app call limit: HTTP 429 -- scripted.
      131026 message undeliverable, 131000 something went wrong (HTTP 500), 2/1 service unavailable -- scripted.
    The brief that ordered this stand-in named 131047 for an over-long body; Meta's table gives 131047 as the
    re-engagement (24-hour window) error, so an over-long body answers 100 "Invalid parameter" here.

Control port (plain HTTP), besides the shared routes (health, requests, script, delay, reset):
  GET  /control/messages -> {"messages": [{"id", "phone_number_id", "to", "body", "preview_url", "json"}...]}
  POST /control/window   {"to": "15551234567", "open": false} -> later texts to it answer 131047
  POST /control/expire   {} -> the access token now answers 190 "Session has expired" (subcode 463)
  Script steps: {"status": 429} (130429), {"error": 130429|80007|4|131047|131026|131000|131030|190|"expired_token"},
  {"status": 500|503}, {"hang": true}, {"delay_ms": N}.
"""
import argparse
import base64
import json
import re
import secrets
import sys

import channel_common as cc

MAX_BODY = 4096

CATALOG = {
    # code: (http status, title, details)
    4: (429, "Application request limit reached", "The app has reached its API call rate limit."),
    80007: (429, "Rate limit issues", "The WhatsApp Business Account has reached its rate limit."),
    130429: (429, "Rate limit hit", "Cloud API message throughput has been reached."),
    131030: (400, "Recipient phone number not in allowed list", "Recipient phone number not in allowed list: Add recipient phone number to recipient list and try again."),
    131047: (400, "Re-engagement message", "Message failed to send because more than 24 hours have passed since the customer last replied to this number."),
    131026: (400, "Message undeliverable", "Unable to deliver message."),
    131000: (500, "Something went wrong", "Message failed to send due to an unknown error."),
    1: (500, "An unknown error occurred", "Invalid request or possible server error."),
    2: (503, "Service temporarily unavailable", "Temporary due to downtime or due to being overloaded."),
}


def trace_id():
    return base64.urlsafe_b64encode(secrets.token_bytes(9)).decode().rstrip("=")


class WhatsApp(cc.ChannelStandIn):
    name = "whatsapp"

    def __init__(self, tokens, phone_number_ids, allowed):
        self.tokens = set(tokens)
        self.phone_number_ids = set(phone_number_ids)
        self.allowed = {re.sub(r"\D", "", a) for a in allowed}
        super().__init__()

    def reset_state(self):
        self.sent = cc.Records()
        self.closed_windows = set()
        self.expired = False

    def error(self, code, version, message=None, details=None, status=None, subcode=None, error_type="OAuthException", graph=False):
        known = CATALOG.get(code)
        http = status or (known[0] if known else 400)
        title = message or (f"(#{code}) {known[1]}" if known else f"(#{code}) Invalid parameter")
        error = {"message": title, "type": error_type, "code": code}
        detail = details or (known[2] if known else None)
        if detail and code not in (190, 2500):
            error["error_data"] = {"messaging_product": "whatsapp", "details": detail}
        # WhatsApp's own errors drop error_subcode from v16.0 on; Graph's generic ones (190 tokens, 100/33) keep it.
        if subcode is not None and (version < 16 or code == 190 or graph):
            error["error_subcode"] = subcode
        error["fbtrace_id"] = trace_id()
        return http, {"error": error}

    def invalid(self, version, details):
        return self.error(100, version, "(#100) Invalid parameter", details)

    async def service(self, scope, headers, body, send):
        record = self.requests.append(cc.record_for(scope, headers, body))
        status, payload = await self.handle(scope, headers, body, record)
        record["status"] = status
        record["response"] = payload
        extra = [("www-authenticate", 'OAuth "Facebook Platform" "invalid_token"')] if status == 401 else []
        await cc.respond_json(send, status, payload, extra)

    async def handle(self, scope, headers, body, record):
        match = re.fullmatch(r"/v(\d+)\.(\d+)/([^/]+)/messages", scope["path"])
        if not match:
            return 400, {"error": {"message": "Unknown path components: " + scope["path"], "type": "OAuthException", "code": 2500, "fbtrace_id": trace_id()}}
        version = int(match.group(1))
        phone_number_id = match.group(3)
        authorization = headers.get("authorization", [""])[0]
        token = authorization[7:].strip() if authorization.lower().startswith("bearer ") else ""
        if not token:
            return self.error(2500, version, "An active access token must be used to query information about the current user.")
        if token not in self.tokens:
            return self.error(190, version, "Invalid OAuth access token - Cannot parse access token", status=401)
        if self.expired:
            return self.error(190, version, "Error validating access token: Session has expired.", status=401, subcode=463)
        if scope["method"] != "POST":
            return self.error(100, version, "(#100) Unsupported get request.")
        if phone_number_id not in self.phone_number_ids:
            return self.error(100, version, f"Unsupported post request. Object with ID '{phone_number_id}' does not exist, cannot be loaded due to missing permissions, or does not support this operation. Please read the Graph API documentation at https://developers.facebook.com/docs/graph-api",
                              subcode=33, error_type="GraphMethodException", graph=True)
        try:
            document = json.loads(body) if body else None
            if not isinstance(document, dict):
                raise ValueError
        except (ValueError, UnicodeDecodeError):
            return self.invalid(version, "The request body is not valid JSON.")
        record["json"] = document
        if document.get("messaging_product") != "whatsapp":
            return self.invalid(version, "The parameter messaging_product is required.")
        if document.get("recipient_type", "individual") not in ("individual", "group"):
            return self.invalid(version, "Param recipient_type must be one of {INDIVIDUAL, GROUP}.")
        to = document.get("to")
        if not isinstance(to, str) or not to.strip():
            return self.invalid(version, "The parameter to is required.")
        kind = document.get("type", "text")
        if kind != "text":
            return self.invalid(version, f"This stand-in serves text messages; type {kind!r} is not checked here.")
        text = document.get("text")
        if not isinstance(text, dict) or not isinstance(text.get("body"), str) or not text["body"]:
            return self.invalid(version, "The parameter text['body'] is required.")
        if len(text["body"]) > MAX_BODY:
            return self.invalid(version, f"Param text['body'] must be at most {MAX_BODY} characters long.")
        if "preview_url" in text and not isinstance(text["preview_url"], bool):
            return self.invalid(version, "Param text['preview_url'] must be a boolean.")
        digits = re.sub(r"\D", "", to)
        if self.allowed and digits not in self.allowed:
            return self.error(131030, version)
        if digits in self.closed_windows:
            return self.error(131047, version)
        step = self.next_step()
        await self.pause(step)
        if step:
            if step.get("status") == 429 and "error" not in step:
                return self.error(130429, version)
            code = step.get("error")
            if code == "expired_token":
                return self.error(190, version, "Error validating access token: Session has expired.", status=401, subcode=463)
            if code == 190:
                return self.error(190, version, "Invalid OAuth access token - Cannot parse access token", status=401)
            if isinstance(code, int):
                return self.error(code, version)
            if step.get("status", 200) >= 500:
                return self.error(131000 if step["status"] == 500 else 2, version, status=step["status"])
        message_id = "wamid." + base64.b64encode(b"\x15\x02\x00\x11\x18\x12" + secrets.token_bytes(18)).decode()
        self.sent.append({"id": message_id, "phone_number_id": phone_number_id, "to": to, "body": text["body"],
                          "preview_url": text.get("preview_url", False), "json": document})
        return 200, {"messaging_product": "whatsapp", "contacts": [{"input": to, "wa_id": digits}], "messages": [{"id": message_id}]}

    async def extra_control(self, path, method, data, send):
        if path == "/control/messages":
            await cc.respond_json(send, 200, {"messages": self.sent.list()})
        elif path == "/control/window":
            digits = re.sub(r"\D", "", data["to"])
            if data.get("open", False):
                self.closed_windows.discard(digits)
            else:
                self.closed_windows.add(digits)
            await cc.respond_json(send, 200, {"ok": True})
        elif path == "/control/expire":
            self.expired = True
            await cc.respond_json(send, 200, {"ok": True})
        else:
            return False
        return True


def main():
    parser = argparse.ArgumentParser()
    cc.add_standard_arguments(parser)
    parser.add_argument("--token", action="append", required=True)
    parser.add_argument("--phone-number-id", action="append", default=[])
    parser.add_argument("--allowed-recipient", action="append", default=[])
    args = parser.parse_args()
    standin = WhatsApp(args.token, args.phone_number_id or ["106540352242922"], args.allowed_recipient)
    return cc.serve(standin, args.tls_port, args.control_port, args.cert_dir)


if __name__ == "__main__":
    sys.exit(main())
