#!/usr/bin/env python3
"""A local Discord REST API stand-in over HTTPS (HTTP/2 or 1.1): Create Message in a channel, Get Current User.

Start:  python3 discord_standin.py --tls-port P --control-port C --cert-dir DIR --token <bot token> [--channel ID]...
        [--bucket-limit 5 --bucket-window 5]   (without --channel: 1100000000000000001 and 1100000000000000002)
Ready:  GET /control/health -> {"ok": true, "pid": N}; stdout "READY discord tls=P control=C pid=N"

Rules enforced, from Discord's developer docs (https://discord.com/developers/docs):
  * "Reference" (API versioning, authentication, user agent): base https://discord.com/api/v{version}; versions 10
    and 9 are served here (another -> 404); `Authorization: Bot <token>`: missing or wrong -> 401
    {"message": "401: Unauthorized", "code": 0}. Clients "must provide a valid User Agent" of the form
    `DiscordBot ($url, $versionNumber)`: recorded per request as user_agent_ok (not refused).
  * "Channel resource" / "Message resource: Create Message" (POST /channels/{channel.id}/messages): JSON body;
    content at most 2000 characters, else 400 {"code": 50035, "message": "Invalid Form Body", "errors": {"content":
    {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]}}}; at least one
    of content, embeds, sticker_ids, components, files, poll -> else 400 {"message": "Cannot send an empty message",
    "code": 50006}; at most 10 embeds, each title <= 256, description <= 4096, all embeds' text <= 6000 ("Embed
    Limits") -> 50035 with the field's path. A body that is not JSON -> 400 {"message": "The request body contains
    invalid JSON.", "code": 50109}. Success 200 with the Message object (id, channel_id, author, content,
    timestamp, embeds, type 0, ...).
  * "User resource: Get Current User" (GET /users/@me): the bot's User object (id, username, bot true); a missing or
    wrong token -> the same 401 (soulacy doctor's dry call).
  * "Opcodes and Status Codes" (JSON error codes): unknown channel -> 404 {"message": "Unknown Channel",
    "code": 10003}; the bot without access -> 403 {"message": "Missing Access", "code": 50001}; without permission
    to send -> 403 {"message": "Missing Permissions", "code": 50013}.
  * "Rate Limits": every answer carries X-RateLimit-Limit, -Remaining, -Reset (epoch seconds, float), -Reset-After
    (seconds, float) and -Bucket; a 429 carries Retry-After (seconds), X-RateLimit-Scope (user|global|shared),
    X-RateLimit-Global when global, and the body {"message": "You are being rate limited.", "retry_after": <float
    seconds>, "global": <bool>}. The per-channel bucket here allows --bucket-limit messages per --bucket-window
    seconds (5 per 5 s by default; 0 turns it off); a scripted step gives a 429 on demand.

Control port (plain HTTP), besides the shared routes (health, requests, script, delay, reset):
  GET  /control/messages -> {"messages": [Message...]}
  POST /control/channels {"channels": [{"id": "123", "access": true, "send": true}]}
  POST /control/bucket/refill -> {"ok": true}   every channel's window ends now, as if its reset time had come
  Script steps: {"status": 429, "retry_after": 1.5, "global": false, "scope": "user"}, {"status": 500|502|503},
  {"error": "missing_access"|"missing_permissions"|"unknown_channel"|"invalid_form_body"}, {"hang": true}, {"delay_ms": N}.
  ("invalid_form_body": the 400 50035 answer with a field error on content, for a client that cannot build an
  over-long body itself.)
"""
import argparse
import json
import math
import re
import sys
import time
import datetime

import channel_common as cc

MAX_CONTENT = 2000
EPOCH_MS = 1420070400000  # Discord's snowflake epoch ("Reference": Snowflakes)


def snowflake(counter):
    return str(((int(time.time() * 1000) - EPOCH_MS) << 22) | (1 << 17) | (counter & 0xFFF))


def form_error(errors):
    return {"message": "Invalid Form Body", "code": 50035, "errors": errors}


def max_length(limit):
    return {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": f"Must be {limit} or fewer in length."}]}


class Discord(cc.ChannelStandIn):
    name = "discord"

    def __init__(self, tokens, channels, bucket_limit, bucket_window):
        self.tokens = set(tokens)
        self.initial_channels = channels
        self.bucket_limit = bucket_limit
        self.bucket_window = bucket_window
        super().__init__()

    def reset_state(self):
        self.channels = {c: {"id": c, "access": True, "send": True} for c in self.initial_channels}
        self.sent = cc.Records()
        self.counter = 0
        self.buckets = {}

    def bucket_headers(self, channel_id, consume):
        """(headers, exceeded, reset_after) for the channel's message bucket."""
        now = time.time()
        start, used = self.buckets.get(channel_id, (now, 0))
        if now - start >= self.bucket_window:
            start, used = now, 0
        exceeded = bool(self.bucket_limit) and used >= self.bucket_limit
        if consume and not exceeded:
            used += 1
        self.buckets[channel_id] = (start, used)
        reset_after = max(0.0, self.bucket_window - (now - start))
        limit = self.bucket_limit or 5
        headers = [("X-RateLimit-Limit", limit), ("X-RateLimit-Remaining", max(0, limit - used)),
                   ("X-RateLimit-Reset", f"{now + reset_after:.3f}"), ("X-RateLimit-Reset-After", f"{reset_after:.3f}"),
                   ("X-RateLimit-Bucket", "a06de2dfd5d9f0d3c7a7e2c0e3f8f3b1")]
        return headers, exceeded, reset_after

    @staticmethod
    def rate_limited(retry_after, is_global=False, scope="user", headers=()):
        extra = [h for h in headers if h[0] != "X-RateLimit-Remaining"] + [("X-RateLimit-Remaining", 0)]
        extra += [("Retry-After", max(1, math.ceil(retry_after))), ("X-RateLimit-Scope", "global" if is_global else scope)]
        if is_global:
            extra.append(("X-RateLimit-Global", "true"))
        return 429, {"message": "You are being rate limited.", "retry_after": round(retry_after, 3), "global": is_global}, extra

    def current_user(self, scope, headers):
        """Get Current User ("User resource"): the bot's own User object; a wrong token -> 401 as everywhere."""
        if scope["method"] != "GET":
            return 405, {"message": "405: Method Not Allowed", "code": 0}, []
        authorization = headers.get("authorization", [""])[0]
        if not authorization.startswith("Bot ") or authorization[4:].strip() not in self.tokens:
            return 401, {"message": "401: Unauthorized", "code": 0}, []
        return 200, {"id": "1100000000000000100", "username": "Soulacy", "discriminator": "0", "global_name": None, "avatar": None,
                     "bot": True, "verified": True, "flags": 0, "mfa_enabled": False}, []

    async def service(self, scope, headers, body, send):
        user_agent = headers.get("user-agent", [""])[0]
        record = self.requests.append(cc.record_for(scope, headers, body, user_agent_ok=bool(re.fullmatch(r"DiscordBot \(\S+, \S+\).*", user_agent))))
        status, payload, extra = await self.handle(scope, headers, body, record)
        record["status"] = status
        record["response"] = payload
        await cc.respond_json(send, status, payload, extra)

    async def handle(self, scope, headers, body, record):
        me = re.fullmatch(r"/api/v(\d+)/users/@me", scope["path"])
        if me and me.group(1) in ("9", "10"):
            return self.current_user(scope, headers)
        match = re.fullmatch(r"/api/v(\d+)/channels/(\d+)/messages", scope["path"])
        if not match or match.group(1) not in ("9", "10"):
            return 404, {"message": "404: Not Found", "code": 0}, []
        if scope["method"] != "POST":
            return 405, {"message": "405: Method Not Allowed", "code": 0}, []
        authorization = headers.get("authorization", [""])[0]
        if not authorization.startswith("Bot ") or authorization[4:].strip() not in self.tokens:
            return 401, {"message": "401: Unauthorized", "code": 0}, []
        channel_id = match.group(2)
        channel = self.channels.get(channel_id)
        if channel is None:
            return 404, {"message": "Unknown Channel", "code": 10003}, []
        if not channel.get("access", True):
            return 403, {"message": "Missing Access", "code": 50001}, []
        if not channel.get("send", True):
            return 403, {"message": "Missing Permissions", "code": 50013}, []
        try:
            document = json.loads(body) if body else {}
            if not isinstance(document, dict):
                raise ValueError
        except (ValueError, UnicodeDecodeError):
            return 400, {"message": "The request body contains invalid JSON.", "code": 50109}, []
        record["json"] = document
        content = document.get("content")
        embeds = document.get("embeds") or []
        errors = {}
        if content is not None and not isinstance(content, str):
            errors["content"] = {"_errors": [{"code": "STRING_TYPE_CONVERT", "message": "Could not interpret value as string."}]}
        elif isinstance(content, str) and len(content) > MAX_CONTENT:
            errors["content"] = max_length(MAX_CONTENT)
        if not isinstance(embeds, list):
            errors["embeds"] = {"_errors": [{"code": "LIST_TYPE_CONVERT", "message": "Only iterables may be used in a ListType"}]}
        elif len(embeds) > 10:
            errors["embeds"] = max_length(10)
        else:
            total = 0
            for index, embed in enumerate(embeds):
                if not isinstance(embed, dict):
                    errors.setdefault("embeds", {})[str(index)] = {"_errors": [{"code": "MODEL_TYPE_CONVERT", "message": "Only dictionaries may be used in a ModelType"}]}
                    continue
                for field, limit in (("title", 256), ("description", 4096)):
                    value = embed.get(field)
                    if isinstance(value, str):
                        total += len(value)
                        if len(value) > limit:
                            errors.setdefault("embeds", {}).setdefault(str(index), {})[field] = max_length(limit)
                for part, key in (("footer", "text"), ("author", "name")):
                    if isinstance(embed.get(part), dict) and isinstance(embed[part].get(key), str):
                        total += len(embed[part][key])
                for field in embed.get("fields") or []:
                    if isinstance(field, dict):
                        total += len(str(field.get("name", ""))) + len(str(field.get("value", "")))
            if total > 6000 and "embeds" not in errors:
                errors["embeds"] = {"_errors": [{"code": "MAX_EMBED_SIZE_EXCEEDED", "message": "Embed size exceeds maximum size of 6000"}]}
        if errors:
            return 400, form_error(errors), []
        if not (content or embeds or document.get("sticker_ids") or document.get("components") or document.get("attachments") or document.get("poll")):
            return 400, {"message": "Cannot send an empty message", "code": 50006}, []
        rate_headers, exceeded, reset_after = self.bucket_headers(channel_id, consume=True)
        if exceeded:
            return self.rate_limited(reset_after or 0.001, headers=rate_headers)
        step = self.next_step()
        await self.pause(step)
        if step:
            if step.get("status") == 429:
                return self.rate_limited(float(step.get("retry_after", 1.0)), bool(step.get("global")), step.get("scope", "user"), rate_headers)
            if step.get("status", 200) >= 500:
                return step["status"], {"message": f"{step['status']}: Internal Server Error", "code": 0}, rate_headers
            error = step.get("error")
            if error == "missing_access":
                return 403, {"message": "Missing Access", "code": 50001}, rate_headers
            if error == "missing_permissions":
                return 403, {"message": "Missing Permissions", "code": 50013}, rate_headers
            if error == "unknown_channel":
                return 404, {"message": "Unknown Channel", "code": 10003}, rate_headers
            if error == "invalid_form_body":
                return 400, form_error({"content": max_length(MAX_CONTENT)}), rate_headers
        self.counter += 1
        message = {"id": snowflake(self.counter), "type": 0, "channel_id": channel_id, "content": content or "",
                   "author": {"id": "1100000000000000100", "username": "Soulacy", "discriminator": "0", "global_name": None,
                              "avatar": None, "bot": True},
                   "attachments": [], "embeds": embeds, "mentions": [], "mention_roles": [], "mention_everyone": False,
                   "pinned": False, "tts": bool(document.get("tts", False)), "flags": int(document.get("flags", 0) or 0),
                   "components": document.get("components") or [],
                   "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds"),
                   "edited_timestamp": None}
        if document.get("nonce") is not None:
            message["nonce"] = document["nonce"]
        self.sent.append(message)
        return 200, message, rate_headers

    async def extra_control(self, path, method, data, send):
        if path == "/control/messages":
            await cc.respond_json(send, 200, {"messages": self.sent.list()})
        elif path == "/control/bucket/refill":
            # Ends every channel's window now, as if its reset time had come (tests need no wall-clock race).
            self.buckets = {}
            await cc.respond_json(send, 200, {"ok": True})
        elif path == "/control/channels":
            for channel in data.get("channels", []):
                # (`**channel` already holds "id": naming it again as a keyword raised TypeError, so this route always failed.)
                self.channels[str(channel["id"])] = {"access": True, "send": True, **channel, "id": str(channel["id"])}
            await cc.respond_json(send, 200, {"ok": True})
        else:
            return False
        return True


def main():
    parser = argparse.ArgumentParser()
    cc.add_standard_arguments(parser)
    parser.add_argument("--token", action="append", required=True)
    parser.add_argument("--channel", action="append", default=[])
    parser.add_argument("--bucket-limit", type=int, default=5)
    parser.add_argument("--bucket-window", type=float, default=5.0)
    args = parser.parse_args()
    channels = args.channel or ["1100000000000000001", "1100000000000000002"]
    return cc.serve(Discord(args.token, channels, args.bucket_limit, args.bucket_window), args.tls_port, args.control_port, args.cert_dir)


if __name__ == "__main__":
    sys.exit(main())
