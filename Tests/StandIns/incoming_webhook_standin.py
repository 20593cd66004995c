#!/usr/bin/env python3
"""Local stand-ins for Microsoft Teams' and Google Chat's incoming webhooks, in one process over HTTPS (HTTP/2 or 1.1).

Start:  python3 incoming_webhook_standin.py --tls-port P --control-port C --cert-dir DIR
            [--teams-webhook /webhookb2/<group>@<tenant>/IncomingWebhook/<id>/<owner>]...
            [--google-space SPACE:KEY:TOKEN]... [--teams-per-second 4] [--google-per-minute 60] [--google-max-bytes 32000]
        defaults: Teams TEAMS_DEFAULT below; Google Chat space AAAAsoulacy with key GOOGLE_KEY and token GOOGLE_TOKEN.
Ready:  GET /control/health -> {"ok": true, "pid": N}; stdout "READY incoming-webhooks tls=P control=C pid=N"

Microsoft Teams (path family /webhookb2/...), from "Create an Incoming Webhook" and "Send messages using Incoming
Webhooks" (https://learn.microsoft.com/microsoftteams/platform/webhooks-and-connectors/how-to/add-incoming-webhook):
  * POST a JSON MessageCard ({"@type": "MessageCard", "text"|"summary", sections...}; a bare {"text": ...} is the
    simplest card) or an Adaptive Card message ({"type": "message", "attachments": [{"contentType":
    "application/vnd.microsoft.card.adaptive", "content": {"type": "AdaptiveCard", "version": ..., "body": [...]}}]}).
  * Success is HTTP 200 with the text body "1" (the Teams team's advice on success; the connector may answer 200 with
    an error text otherwise). An unparseable or shapeless payload -> 400 "Bad payload received by generic incoming
    webhook."; a MessageCard without text and summary -> 400 "Summary or Text is required."; an unknown webhook
    -> 404; "The message size limit is 28 KB" -> 413 above 28 KB; "If more than four requests are made in a second,
    the client connection is throttled" -> 429 with a text body (and on demand by a scripted step).
  * Office 365 connectors answer 200 for failures they consider retryable, with the failure in the text body
    (MicrosoftDocs/msteams-docs#402: a webhook whose channel was removed answers 200 "Webhook message delivery failed
    with error: Microsoft Teams endpoint returned HTTP error 400 with ContextId ..."; #9698, from Teams engineering:
    "The response can be considered successful only if it returns a number in the response, else it is a failure
    even if status is 200"). POST /control/remove-channel gives that answer for a webhook.
Google Chat (path family /v1/spaces/{space}/messages?key=...&token=...), from "Build a Google Chat app as a webhook"
(https://developers.google.com/workspace/chat/quickstart/webhooks), "Method: spaces.messages.create" and "Usage
limits" (https://developers.google.com/workspace/chat/limits):
  * POST a JSON Message: text and/or cardsV2 (cards); threadKey / messageReplyOption query parameters name a thread.
    Unknown top-level fields -> 400 'Invalid JSON payload received. Unknown name "x": Cannot find field.'; no text
    and no cards -> 400 "Message cannot be empty..."; a message over 32,000 bytes ("The maximum message size,
    including text and cards, is 32,000 bytes") -> 400 INVALID_ARGUMENT. (The brief said 4096 bytes; the current
    reference says 32,000, and --google-max-bytes sets another.)
  * Errors are Google's {"error": {"code", "message", "status", "details"?}}: a wrong key -> 400 INVALID_ARGUMENT
    "API key not valid..." (ErrorInfo API_KEY_INVALID); a wrong token -> 401 UNAUTHENTICATED (assumed; not documented);
    an unknown space -> 404 NOT_FOUND; 60 writes per minute per space -> 429 RESOURCE_EXHAUSTED (also scripted).
  * Success 200 with the created Message (name spaces/S/messages/M, sender BOT, text, thread.name, space, createTime).

Control port (plain HTTP), besides the shared routes (health, requests, script, delay, reset):
  GET  /control/messages -> {"messages": [{"service": "teams"|"google_chat", "webhook"|"space", "json", ...}]}
  POST /control/webhooks {"teams": ["/webhookb2/..."], "google": [{"space": "S", "key": "K", "token": "T"}]}
  POST /control/delete   {"teams": "/webhookb2/..."} or {"google": "S"} -> that webhook now answers 404 / NOT_FOUND
  POST /control/remove-channel {"teams": "/webhookb2/..."} -> that webhook exists (added if new) but its channel is
        gone: it answers 200 with "Webhook message delivery failed with error: ... HTTP error 400 ..." and posts nothing
  Script steps (next accepted request of either family): {"status": 429, "retry_after": N}, {"status": 400|500|503},
  {"hang": true}, {"delay_ms": N}; a step may hold "service": "teams"|"google_chat" to wait for that family.
"""
import argparse
import collections
import datetime
import json
import re
import secrets
import sys
import time
import urllib.parse

import channel_common as cc

TEAMS_DEFAULT = ("/webhookb2/6f3d5a1e-0000-4000-8000-00000000a001@72f988bf-0000-4000-8000-00000000b002/IncomingWebhook/"
                 "4b0c1f5e2d6a4c1e9f0a7b3c5d2e1f00/1c2d3e4f-0000-4000-8000-00000000c003")
GOOGLE_KEY = "AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI"
GOOGLE_TOKEN = "soulacy-google-chat-token-0123456789abcdef"
TEAMS_MAX_BYTES = 28 * 1024
ADAPTIVE = "application/vnd.microsoft.card.adaptive"
GOOGLE_FIELDS = {"text", "cardsV2", "cards", "thread", "fallbackText", "accessoryWidgets", "privateMessageViewer",
                 "name", "formattedText", "annotations", "argumentText", "clientAssignedMessageId", "attachment",
                 "actionResponse", "matchedUrl", "emojiReactionSummaries", "deletionMetadata", "quotedMessageMetadata",
                 "attachedGifs", "sender", "createTime", "space", "slashCommand", "threadReply"}


def google_error(code, status, message, details=None):
    error = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = details
    return code, {"error": error}


class IncomingWebhooks(cc.ChannelStandIn):
    name = "incoming-webhooks"

    def __init__(self, teams, google, teams_per_second, google_per_minute, google_max_bytes):
        self.initial_teams = teams
        self.initial_google = google
        self.teams_per_second = teams_per_second
        self.google_per_minute = google_per_minute
        self.google_max_bytes = google_max_bytes
        super().__init__()

    def reset_state(self):
        self.teams = set(self.initial_teams)
        self.channel_removed = set()
        self.google = {g["space"]: dict(g) for g in self.initial_google}
        self.sent = cc.Records()
        self.recent = collections.defaultdict(collections.deque)
        self.threads = {}

    def over_rate(self, key, limit, window):
        if not limit:
            return False
        now = time.monotonic()
        times = self.recent[key]
        while times and now - times[0] >= window:
            times.popleft()
        if len(times) >= limit:
            return True
        times.append(now)
        return False

    def take_step(self, service):
        for index, step in enumerate(self.script):
            if step.get("service") in (None, service):
                return self.script.pop(index)
        return None

    async def service(self, scope, headers, body, send):
        path = scope["path"]
        if path.startswith("/webhookb2/"):
            record = self.requests.append(cc.record_for(scope, headers, body, service="teams"))
            status, text = await self.teams_post(path, headers, body)
            record["status"] = status
            record["response"] = text
            return await cc.respond_text(send, status, text)
        match = re.fullmatch(r"/v1/spaces/([^/]+)/messages", path)
        record = self.requests.append(cc.record_for(scope, headers, body, service="google_chat" if match else "unknown"))
        if not match:
            status, payload = google_error(404, "NOT_FOUND", "Requested entity was not found.")
        else:
            status, payload = await self.google_post(scope, match.group(1), headers, body)
        record["status"] = status
        record["response"] = payload
        await cc.respond_json(send, status, payload)

    async def teams_post(self, path, headers, body):
        if path not in self.teams:
            return 404, "Webhook not found or deleted."
        if len(body) > TEAMS_MAX_BYTES:
            return 413, "Microsoft Teams endpoint returned HTTP error 413: Payload Too Large"
        try:
            document = json.loads(body)
            if not isinstance(document, dict):
                raise ValueError
        except (ValueError, UnicodeDecodeError):
            return 400, "Bad payload received by generic incoming webhook."
        if document.get("type") == "message":
            attachments = document.get("attachments")
            if not isinstance(attachments, list) or not attachments or not all(
                    isinstance(a, dict) and a.get("contentType") == ADAPTIVE and isinstance(a.get("content"), dict)
                    and a["content"].get("type") == "AdaptiveCard" for a in attachments):
                return 400, "Bad payload received by generic incoming webhook."
            kind = "adaptive_card"
        else:
            if document.get("@type", "MessageCard") != "MessageCard":
                return 400, "Bad payload received by generic incoming webhook."
            if not str(document.get("text") or "").strip() and not str(document.get("summary") or "").strip():
                return 400, "Summary or Text is required."
            kind = "message_card"
        if path in self.channel_removed:
            return 200, ("Webhook message delivery failed with error: Microsoft Teams endpoint returned HTTP error 400 with ContextId "
                         "tcid=0,server=standin,cv=" + secrets.token_hex(8))
        if self.over_rate(("teams", path), self.teams_per_second, 1.0):
            return 429, "Microsoft Teams endpoint returned HTTP error 429 with ContextId tcid=0,server=standin,cv=" + secrets.token_hex(8)
        step = self.take_step("teams")
        await self.pause(step)
        if step and step.get("status", 200) != 200:
            status = step["status"]
            if status == 429:
                return 429, "Microsoft Teams endpoint returned HTTP error 429 with ContextId tcid=0,server=standin,cv=" + secrets.token_hex(8)
            if status == 400:
                return 400, "Bad payload received by generic incoming webhook."
            return status, f"Microsoft Teams endpoint returned HTTP error {status}"
        self.sent.append({"service": "teams", "webhook": path, "kind": kind, "json": document})
        return 200, "1"

    async def google_post(self, scope, space, headers, body):
        query = dict(urllib.parse.parse_qsl(scope.get("query_string", b"").decode(), keep_blank_values=True))
        configured = self.google.get(space)
        if query.get("key") != (configured or {}).get("key", GOOGLE_KEY) or not query.get("key"):
            return google_error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.",
                                [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com",
                                  "metadata": {"service": "chat.googleapis.com"}}])
        if configured is None:
            return google_error(404, "NOT_FOUND", "Requested entity was not found.")
        if query.get("token") != configured["token"]:
            return google_error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
        if scope["method"] != "POST":
            return google_error(404, "NOT_FOUND", "Requested entity was not found.")
        try:
            document = json.loads(body)
            if not isinstance(document, dict):
                raise ValueError
        except (ValueError, UnicodeDecodeError):
            return google_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received. Unexpected token.")
        unknown = [k for k in document if k not in GOOGLE_FIELDS]
        if unknown:
            return google_error(400, "INVALID_ARGUMENT", f'Invalid JSON payload received. Unknown name "{unknown[0]}": Cannot find field.')
        if not str(document.get("text") or "").strip() and not document.get("cardsV2") and not document.get("cards"):
            return google_error(400, "INVALID_ARGUMENT", f"Message cannot be empty. Discarding empty create message request in spaces/{space}.")
        if len(body) > self.google_max_bytes:
            return google_error(400, "INVALID_ARGUMENT", f"Message too long: the maximum message size, including text and cards, is {self.google_max_bytes} bytes.")
        if self.over_rate(("google", space), self.google_per_minute, 60.0):
            return google_error(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).")
        step = self.take_step("google_chat")
        await self.pause(step)
        if step and step.get("status", 200) != 200:
            status = step["status"]
            names = {400: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}
            messages = {429: "Resource has been exhausted (e.g. check quota).", 503: "The service is currently unavailable."}
            return google_error(status, names.get(status, "UNKNOWN"), messages.get(status, "Internal error encountered."))
        thread_key = query.get("threadKey") or (document.get("thread") or {}).get("threadKey")
        if thread_key:
            if len(self.threads) >= 10000:
                self.threads.clear()
            thread = self.threads.setdefault((space, thread_key), f"spaces/{space}/threads/{secrets.token_urlsafe(8)}")
        elif (document.get("thread") or {}).get("name"):
            thread = document["thread"]["name"]
        else:
            thread = f"spaces/{space}/threads/{secrets.token_urlsafe(8)}"
        name = f"spaces/{space}/messages/{secrets.token_urlsafe(8)}.{secrets.token_urlsafe(8)}"
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")
        message = {"name": name, "sender": {"name": "users/114022495153014004089", "displayName": "Soulacy", "type": "BOT"},
                   "createTime": now, "text": document.get("text", ""), "thread": {"name": thread},
                   "space": {"name": f"spaces/{space}", "type": "ROOM", "spaceType": "SPACE"}, "argumentText": document.get("text", "")}
        if document.get("cardsV2"):
            message["cardsV2"] = document["cardsV2"]
        self.sent.append({"service": "google_chat", "space": space, "json": document, "thread_key": thread_key, "name": name,
                          "message_reply_option": query.get("messageReplyOption")})
        return 200, message

    async def extra_control(self, path, method, data, send):
        if path == "/control/messages":
            await cc.respond_json(send, 200, {"messages": self.sent.list()})
        elif path == "/control/webhooks":
            self.teams.update(data.get("teams", []))
            for space in data.get("google", []):
                self.google[space["space"]] = dict(space)
            await cc.respond_json(send, 200, {"ok": True})
        elif path == "/control/remove-channel":
            self.teams.add(data["teams"])
            self.channel_removed.add(data["teams"])
            await cc.respond_json(send, 200, {"ok": True})
        elif path == "/control/delete":
            if data.get("teams"):
                self.teams.discard(data["teams"])
            if data.get("google"):
                self.google.pop(data["google"], None)
            await cc.respond_json(send, 200, {"ok": True})
        else:
            return False
        return True


def parse_space(spec):
    space, key, token = spec.split(":", 2)
    return {"space": space, "key": key, "token": token}


def main():
    parser = argparse.ArgumentParser()
    cc.add_standard_arguments(parser)
    parser.add_argument("--teams-webhook", action="append", default=[])
    parser.add_argument("--google-space", action="append", default=[])
    parser.add_argument("--teams-per-second", type=int, default=4)
    parser.add_argument("--google-per-minute", type=int, default=60)
    parser.add_argument("--google-max-bytes", type=int, default=32000)
    args = parser.parse_args()
    google = [parse_space(s) for s in args.google_space] or [{"space": "AAAAsoulacy", "key": GOOGLE_KEY, "token": GOOGLE_TOKEN}]
    standin = IncomingWebhooks(args.teams_webhook or [TEAMS_DEFAULT], google, args.teams_per_second, args.google_per_minute, args.google_max_bytes)
    return cc.serve(standin, args.tls_port, args.control_port, args.cert_dir)


if __name__ == "__main__":
    sys.exit(main())
