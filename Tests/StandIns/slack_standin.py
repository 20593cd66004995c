#!/usr/bin/env python3
"""A local Slack Web API stand-in over HTTPS (HTTP/2 or 1.1): chat.postMessage (and auth.test).

Start:  python3 slack_standin.py --tls-port P --control-port C --cert-dir DIR --token xoxb-... [--channel C0123:general]...
        (without --channel: C0SOULACY1 "general" and C0SOULACY2 "alerts", the bot a member of both)
Ready:  GET /control/health -> {"ok": true, "pid": N}; stdout "READY slack tls=P control=C pid=N"

Rules enforced, from Slack's docs:
  * "Web API basics" / "Using the Slack Web API" (https://api.slack.com/web): methods are POST /api/<method>; the
    body is application/x-www-form-urlencoded (token may be a `token` parameter) or application/json, which needs
    the token in an `Authorization: Bearer` header; JSON sent without "; charset=utf-8" still works but the answer
    carries "warning": "missing_charset" and response_metadata.warnings. Every answer is HTTP 200 with "ok"; a
    failure has "error". No token -> "not_authed"; an unknown token -> "invalid_auth"; a revoked one
    -> "token_revoked"; a body that is not JSON -> "invalid_json".
  * "chat.postMessage" (https://api.slack.com/methods/chat.postMessage): channel (an ID, or a name with or
    without '#') is required: unknown -> "channel_not_found"; the bot not in it -> "not_in_channel"; an archived
    one -> "is_archived". One of text, blocks or attachments is required -> "no_text". "Truncating content": the
    docs advise at most 4,000 characters and say text over 40,000 characters is truncated; the method's error list
    has "msg_too_long" (Message text is too long), which is what this stand-in answers above 40,000 characters.
    blocks: a JSON array (a JSON string in form bodies) of at most 50 objects each with a "type"
    ("Block Kit", https://api.slack.com/block-kit) -> otherwise "invalid_blocks" / "invalid_blocks_format".
    Success: {"ok": true, "channel": "C...", "ts": "1700000000.000100", "message": {...}}.
  * "Rate limits" (https://api.slack.com/apis/rate-limits): HTTP 429 with a Retry-After header (seconds) and
    {"ok": false, "error": "ratelimited"}, given on demand by a scripted step.

Control port (plain HTTP), besides the shared routes (health, requests, script, delay, reset):
  GET  /control/messages -> {"messages": [{"channel", "ts", "text", "blocks", "params"}...]}
  POST /control/channels {"channels": [{"id": "C1", "name": "x", "member": true, "archived": false}]}
  POST /control/revoke   {"token": "xoxb-..."} -> that token now answers "token_revoked"
  Script steps: {"status": 429, "retry_after": N}, {"error": "<any Slack error string>"} (HTTP 200 ok:false),
  {"status": 500|503} (an HTTP error with a text body, as Slack's edge gives), {"hang": true}, {"delay_ms": N}.
"""
import argparse
import json
import re
import sys
import time
import urllib.parse

import channel_common as cc

MAX_TEXT = 40000
MAX_BLOCKS = 50


class Slack(cc.ChannelStandIn):
    name = "slack"

    def __init__(self, tokens, channels):
        self.tokens = set(tokens)
        self.initial_channels = channels
        super().__init__()

    def reset_state(self):
        self.channels = {}
        for channel in self.initial_channels:
            self.add_channel(channel)
        self.revoked = set()
        self.sent = cc.Records()
        self.ts_counter = 0

    def add_channel(self, channel):
        channel = dict({"member": True, "archived": False}, **channel)
        self.channels[channel["id"]] = channel

    def find_channel(self, value):
        value = str(value).strip()
        if value in self.channels:
            return self.channels[value]
        name = value.lstrip("#").lower()
        return next((c for c in self.channels.values() if c.get("name", "").lower() == name), None)

    @staticmethod
    def error(name, extra=None):
        payload = {"ok": False, "error": name}
        if extra:
            payload.update(extra)
        return 200, payload, []

    async def service(self, scope, headers, body, send):
        record = self.requests.append(cc.record_for(scope, headers, body))
        status, payload, extra_headers = await self.handle(scope, headers, body, record)
        record["status"] = status
        record["response"] = payload
        if isinstance(payload, str):
            return await cc.respond_text(send, status, payload, headers=extra_headers)
        await cc.respond_json(send, status, payload, extra_headers)

    async def handle(self, scope, headers, body, record):
        match = re.fullmatch(r"/api/([A-Za-z.]+)", scope["path"])
        if not match:
            return 404, "Not Found", []
        method = match.group(1)
        content_type = headers.get("content-type", [""])[0]
        media = content_type.split(";")[0].strip().lower()
        warnings = []
        params = dict(urllib.parse.parse_qsl(scope.get("query_string", b"").decode(), keep_blank_values=True))
        token = None
        if media == "application/json":
            if "charset" not in content_type.lower():
                warnings.append("missing_charset")
            try:
                document = json.loads(body) if body else {}
                if not isinstance(document, dict):
                    raise ValueError
            except (ValueError, UnicodeDecodeError):
                return self.error("invalid_json")
            params.update(document)
            params.pop("token", None)  # a JSON body cannot carry the token
        elif body:
            params.update(dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)))
            token = params.pop("token", None)
        record["params"] = params
        authorization = headers.get("authorization", [""])[0]
        if authorization.lower().startswith("bearer "):
            token = authorization[7:].strip()
        if not token:
            return self.error("not_authed")
        if token in self.revoked:
            return self.error("token_revoked")
        if token not in self.tokens:
            return self.error("invalid_auth")
        if method == "auth.test":
            return 200, {"ok": True, "url": "https://soulacy-test.slack.com/", "team": "Soulacy Test", "user": "soulacy_bot",
                         "team_id": "T0SOULACY", "user_id": "U0SOULACY", "bot_id": "B0SOULACY"}, []
        if method != "chat.postMessage":
            return self.error("unknown_method")
        status, payload, extra = await self.post_message(params)
        if warnings and isinstance(payload, dict):
            payload["warning"] = ",".join(warnings)
            payload.setdefault("response_metadata", {})["warnings"] = warnings
        return status, payload, extra

    async def post_message(self, params):
        channel_value = params.get("channel")
        if not channel_value:
            return self.error("channel_not_found")
        channel = self.find_channel(channel_value)
        if channel is None:
            return self.error("channel_not_found")
        text = params.get("text")
        blocks = params.get("blocks")
        attachments = params.get("attachments")
        if isinstance(blocks, str):
            try:
                blocks = json.loads(blocks) if blocks.strip() else None
            except json.JSONDecodeError:
                return self.error("invalid_blocks_format")
        if isinstance(attachments, str):
            try:
                attachments = json.loads(attachments) if attachments.strip() else None
            except json.JSONDecodeError:
                return self.error("invalid_attachments")
        if blocks is not None:
            if not isinstance(blocks, list):
                return self.error("invalid_blocks_format")
            if len(blocks) > MAX_BLOCKS or not all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in blocks):
                return self.error("invalid_blocks")
        if not (text not in (None, "") or blocks or attachments):
            return self.error("no_text")
        if text is not None and len(str(text)) > MAX_TEXT:
            return self.error("msg_too_long")
        if channel.get("archived"):
            return self.error("is_archived")
        if not channel.get("member"):
            return self.error("not_in_channel")
        step = self.next_step()
        await self.pause(step)
        if step:
            if step.get("status") == 429:
                return 429, {"ok": False, "error": "ratelimited"}, [("Retry-After", int(step.get("retry_after", 30)))]
            if step.get("status", 200) >= 500:
                return step["status"], "upstream connect error or disconnect/reset before headers", []
            if step.get("error"):
                return self.error(step["error"])
        self.ts_counter += 1
        ts = f"{int(time.time())}.{self.ts_counter:06d}"
        message = {"type": "message", "subtype": "bot_message", "text": str(text or ""), "user": "U0SOULACY",
                   "bot_id": "B0SOULACY", "app_id": "A0SOULACY", "team": "T0SOULACY", "ts": ts}
        if blocks:
            message["blocks"] = blocks
        if attachments:
            message["attachments"] = attachments
        if params.get("thread_ts"):
            message["thread_ts"] = params["thread_ts"]
        self.sent.append({"channel": channel["id"], "ts": ts, "text": text, "blocks": blocks, "params": params})
        return 200, {"ok": True, "channel": channel["id"], "ts": ts, "message": message}, []

    async def extra_control(self, path, method, data, send):
        if path == "/control/messages":
            await cc.respond_json(send, 200, {"messages": self.sent.list()})
        elif path == "/control/channels":
            for channel in data.get("channels", []):
                self.add_channel(channel)
            await cc.respond_json(send, 200, {"ok": True})
        elif path == "/control/revoke":
            self.revoked.add(data["token"])
            await cc.respond_json(send, 200, {"ok": True})
        else:
            return False
        return True


def parse_channel(spec):
    channel_id, _, name = spec.partition(":")
    return {"id": channel_id, "name": name or channel_id.lower()}


def main():
    parser = argparse.ArgumentParser()
    cc.add_standard_arguments(parser)
    parser.add_argument("--token", action="append", required=True, help="a bot token (xoxb-...) the API accepts")
    parser.add_argument("--channel", action="append", default=[], help="ID[:name] of a channel the bot is in")
    args = parser.parse_args()
    channels = [parse_channel(c) for c in args.channel] or [{"id": "C0SOULACY1", "name": "general"}, {"id": "C0SOULACY2", "name": "alerts"}]
    return cc.serve(Slack(args.token, channels), args.tls_port, args.control_port, args.cert_dir)


if __name__ == "__main__":
    sys.exit(main())
