#!/usr/bin/env python3
"""A local Telegram Bot API stand-in over HTTPS (HTTP/2 or 1.1): sendMessage, getUpdates (long polling), getMe.

Start:  python3 telegram_standin.py --tls-port P --control-port C --cert-dir DIR --token 123456:ABC... [--chat ID]...
        (--chat: a chat the bot may write to: an integer id, optionally id:type:title, or @username for a channel;
        without any --chat: 424242 (private), -1001234567890 (supergroup) and @soulacy_test (channel))
Ready:  GET /control/health on the control port -> {"ok": true, "pid": N}; stdout "READY telegram tls=P control=C pid=N"

Rules enforced, from the Bot API reference, https://core.telegram.org/bots/api :
  * "Making requests": requests are https://api.telegram.org/bot<token>/METHOD_NAME, GET or POST, parameters in the
    query string, application/x-www-form-urlencoded or application/json (multipart/form-data is not parsed here);
    method names are case-insensitive; every answer is a JSON object with "ok"; a failure has "description" and
    "error_code", and may have "parameters" (ResponseParameters: "retry_after", "migrate_to_chat_id").
    An unknown token answers 401 {"ok":false,"error_code":401,"description":"Unauthorized"}; an unknown method
    404 "Not Found".
  * "sendMessage": chat_id (Integer or @channelusername) and text are required; text is "1-4096 characters after
    entities parsing" (counted here in UTF-16 code units, as the API's entity offsets are; surrounding whitespace is
    trimmed): empty -> 400 "Bad Request: message text is empty", longer -> 400 "Bad Request: message is too long";
    an unknown chat -> 400 "Bad Request: chat not found"; missing chat_id -> 400 "Bad Request: chat_id is empty";
    disable_web_page_preview / link_preview_options, disable_notification, reply_markup... are accepted and recorded.
    The answer is the sent Message (message_id, from, chat, date, text, entities).
  * "Formatting options": parse_mode MarkdownV2, HTML or Markdown (legacy); another value -> 400 "Bad Request:
    unsupported parse_mode". MarkdownV2: the characters _ * [ ] ( ) ~ ` > # + - = | { } . ! must be escaped with a
    preceding '\\' outside entities; inside pre/code only ` and \\ need escaping; inside a link's (...) only ) and \\.
    HTML: only the tags b/strong, i/em, u/ins, s/strike/del, span class="tg-spoiler", tg-spoiler, a href, tg-emoji,
    code, pre, blockquote; named entities &lt; &gt; &amp; &quot; and numeric ones. An unclosed entity or tag, an
    unescaped reserved character or an unsupported tag -> 400 "Bad Request: can't parse entities: <detail>".
  * "getUpdates": offset ("an update is considered confirmed as soon as getUpdates is called with an offset higher
    than its update_id"; a negative offset keeps only the last -offset updates and forgets the rest), limit 1-100
    (default 100), timeout (long polling: the request is held up to timeout seconds while nothing is pending),
    allowed_updates (a JSON list; an empty list means all; when not given the previous setting stays).
    A second getUpdates while one is held ends the first with 409 "Conflict: terminated by other getUpdates request;
    make sure that only one bot instance is running"; getUpdates while a webhook is set -> 409 "Conflict: can't use
    getUpdates method while webhook is active; use deleteWebhook to delete the webhook first".
  * "getMe": the bot's User (id is the token's numeric part, is_bot true).
  * Rate limits ("My bot is hitting limits, how do I avoid this?", https://core.telegram.org/bots/faq): 429
    {"ok":false,"error_code":429,"description":"Too Many Requests: retry after N","parameters":{"retry_after":N}},
    given here on demand by a scripted step.

Control port (plain HTTP), besides the shared routes of channel_common (health, requests, script, delay, reset):
  POST /control/updates  {"updates": [update...]} -> {"queued": N, "update_ids": [...]}
        an update is a Bot API Update without update_id (assigned here), e.g. {"message": {...}}, or the shortcut
        {"text": "hi", "chat_id": 424242, "from_id": 424242} which becomes a private-chat "message" update.
  GET  /control/pending  -> {"updates": [...]}   not yet confirmed
  GET  /control/messages -> {"messages": [Message...]}   what sendMessage accepted, in order
  POST /control/chats    {"chats": [{"id": 5, "type": "group", "title": "x"} | {"username": "@c", "type": "channel"}]}
  POST /control/block    {"chat_id": 424242} -> later sends there answer 403 "Forbidden: bot was blocked by the user"
  POST /control/webhook  {"url": "https://..."} sets (or with "" clears) the webhook that makes getUpdates conflict
  Script steps: {"status": 429, "retry_after": N}, {"status": 500}, {"error": "blocked"|"chat_not_found"|
  "kicked"|"migrated", "migrate_to_chat_id": -100...}, {"hang": true}, {"delay_ms": N}.
"""
import argparse
import asyncio
import collections
import json
import re
import sys
import time
import urllib.parse

import channel_common as cc

MAX_TEXT = 4096
MAX_PENDING = 1000
UPDATE_TYPES = {"message", "edited_message", "channel_post", "edited_channel_post", "business_connection", "business_message",
                "edited_business_message", "deleted_business_messages", "message_reaction", "message_reaction_count",
                "inline_query", "chosen_inline_result", "callback_query", "shipping_query", "pre_checkout_query",
                "purchased_paid_media", "poll", "poll_answer", "my_chat_member", "chat_member", "chat_join_request",
                "chat_boost", "removed_chat_boost"}
# By default getUpdates delivers every type except these (the reference's allowed_updates).
DEFAULT_EXCLUDED = {"chat_member", "message_reaction", "message_reaction_count"}


class EntityError(Exception):
    pass


def utf16_len(text):
    return len(text.encode("utf-16-le")) // 2


def _byte_offset(text, index):
    return len(text[:index].encode("utf-8"))


MDV2_RESERVED = set("_*[]()~`>#+-=|{}.!")


def parse_markdown_v2(text):
    """Returns (plain text, entities) or raises EntityError with Telegram's detail."""
    out = []
    entities = []
    stack = []  # (name, plain offset, source index)
    i = 0
    n = len(text)

    def plain_len():
        return utf16_len("".join(out))

    def toggle(name, width):
        nonlocal i
        if stack and stack[-1][0] == name:
            _, start, _ = stack.pop()
            entities.append({"type": name.lower(), "offset": start, "length": plain_len() - start})
        elif any(e[0] == name for e in stack):
            raise EntityError(f"Can't find end of {stack[-1][0]} entity at byte offset {_byte_offset(text, stack[-1][2])}")
        else:
            stack.append((name, plain_len(), i))
        i += width

    line_start = True
    while i < n:
        c = text[i]
        if c == "\\":
            if i + 1 < n and 0 < ord(text[i + 1]) <= 126:
                out.append(text[i + 1])
                i += 2
            else:
                out.append("\\")
                i += 1
            line_start = False
            continue
        if c == "`":
            block = text.startswith("```", i)
            start_index = i
            i += 3 if block else 1
            content = []
            closed = False
            while i < n:
                if text[i] == "\\" and i + 1 < n and text[i + 1] in "`\\":
                    content.append(text[i + 1])
                    i += 2
                    continue
                if block and text.startswith("```", i):
                    i += 3
                    closed = True
                    break
                if not block and text[i] == "`":
                    i += 1
                    closed = True
                    break
                content.append(text[i])
                i += 1
            if not closed:
                name = "Pre" if block else "Code"
                raise EntityError(f"Can't find end of {name} entity at byte offset {_byte_offset(text, start_index)}")
            body = "".join(content)
            if block and "\n" in body:
                first, rest = body.split("\n", 1)
                if re.fullmatch(r"[\w+#.-]*", first):
                    body = rest
            start = plain_len()
            out.append(body)
            entities.append({"type": "pre" if block else "code", "offset": start, "length": utf16_len(body)})
            line_start = body.endswith("\n")
            continue
        if c == "*":
            toggle("Bold", 1)
        elif c == "_":
            if text.startswith("__", i):
                toggle("Underline", 2)
            else:
                toggle("Italic", 1)
        elif c == "~":
            toggle("Strikethrough", 1)
        elif c == "|" and text.startswith("||", i):
            toggle("Spoiler", 2)
        elif c == "[" or (c == "!" and text.startswith("![", i)):
            emoji = c == "!"
            stack.append(("CustomEmoji" if emoji else "TextUrl", plain_len(), i))
            i += 2 if emoji else 1
        elif c == "]" and stack and stack[-1][0] in ("TextUrl", "CustomEmoji"):
            name, start, source = stack.pop()
            if not text.startswith("(", i + 1):
                raise EntityError(f"Can't find end of {name} entity at byte offset {_byte_offset(text, source)}")
            j = i + 2
            url = []
            while j < n and text[j] != ")":
                if text[j] == "\\" and j + 1 < n and text[j + 1] in ")\\":
                    url.append(text[j + 1])
                    j += 2
                    continue
                url.append(text[j])
                j += 1
            if j >= n:
                raise EntityError(f"Can't find end of a url at byte offset {_byte_offset(text, i + 1)}")
            entity = {"type": "custom_emoji" if name == "CustomEmoji" else "text_link", "offset": start, "length": plain_len() - start}
            target = "".join(url)
            if name == "CustomEmoji":
                found = re.fullmatch(r"tg://emoji\?id=(\d+)", target)
                if not found:
                    raise EntityError(f"Custom emoji URL must have scheme tg at byte offset {_byte_offset(text, i + 2)}")
                entity["custom_emoji_id"] = found.group(1)
            else:
                entity["url"] = target
            entities.append(entity)
            i = j + 1
        elif c == ">" and line_start:
            i += 1  # a blockquote line
        elif c == "*" or c in MDV2_RESERVED:
            raise EntityError(f"Character '{c}' is reserved and must be escaped with the preceding '\\'")
        else:
            out.append(c)
            i += 1
        line_start = c == "\n"
    if stack:
        name, _, source = stack[-1]
        raise EntityError(f"Can't find end of {name} entity at byte offset {_byte_offset(text, source)}")
    return "".join(out), entities


HTML_TAGS = {"b": "bold", "strong": "bold", "i": "italic", "em": "italic", "u": "underline", "ins": "underline",
             "s": "strikethrough", "strike": "strikethrough", "del": "strikethrough", "tg-spoiler": "spoiler", "span": "spoiler",
             "a": "text_link", "tg-emoji": "custom_emoji", "code": "code", "pre": "pre", "blockquote": "blockquote"}
TAG_RE = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)((?:\s+[a-zA-Z-]+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s>\"']+))?)*)\s*>")
ATTR_RE = re.compile(r"([a-zA-Z-]+)(?:\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s>\"']+)))?")
HTML_ENTITY_RE = re.compile(r"&(lt|gt|amp|quot|#[0-9]+|#x[0-9a-fA-F]+);")


def parse_html(text):
    out = []
    entities = []
    stack = []  # (tag, type, plain offset, attrs)
    i = 0
    n = len(text)

    def plain_len():
        return utf16_len("".join(out))

    while i < n:
        c = text[i]
        if c == "<":
            match = TAG_RE.match(text, i)
            if not match:
                raise EntityError(f"Unexpected end of name token at byte offset {_byte_offset(text, i)}")
            closing, tag, attrs = match.group(1), match.group(2).lower(), match.group(3)
            if not closing:
                if tag not in HTML_TAGS:
                    raise EntityError(f'Unsupported start tag "{tag}" at byte offset {_byte_offset(text, i)}')
                values = {m.group(1).lower(): next((g for g in m.groups()[1:] if g is not None), "") for m in ATTR_RE.finditer(attrs)}
                if tag == "span" and values.get("class") != "tg-spoiler":
                    raise EntityError(f'Tag "span" must have class "tg-spoiler" at byte offset {_byte_offset(text, i)}')
                if tag == "a" and "href" not in values:
                    values["href"] = ""
                stack.append((tag, HTML_TAGS[tag], plain_len(), values))
            else:
                if not stack:
                    raise EntityError(f'Unexpected end tag at byte offset {_byte_offset(text, i)}')
                if stack[-1][0] != tag:
                    raise EntityError(f'Unmatched end tag at byte offset {_byte_offset(text, i)}, expected "</{stack[-1][0]}>", found "</{tag}>"')
                open_tag, kind, start, values = stack.pop()
                entity = {"type": kind, "offset": start, "length": plain_len() - start}
                if kind == "text_link":
                    entity["url"] = values.get("href", "")
                if kind == "custom_emoji":
                    entity["custom_emoji_id"] = values.get("emoji-id", "")
                if kind == "blockquote" and "expandable" in values:
                    entity["type"] = "expandable_blockquote"
                if entity["length"] > 0:
                    entities.append(entity)
            i = match.end()
            continue
        if c == "&":
            match = HTML_ENTITY_RE.match(text, i)
            if match:
                name = match.group(1)
                if name.startswith("#x"):
                    out.append(chr(int(name[2:], 16)))
                elif name.startswith("#"):
                    out.append(chr(int(name[1:])))
                else:
                    out.append({"lt": "<", "gt": ">", "amp": "&", "quot": '"'}[name])
                i = match.end()
                continue
        out.append(c)
        i += 1
    if stack:
        raise EntityError(f'Can\'t find end tag corresponding to start tag "{stack[-1][0]}"')
    return "".join(out), entities


def parse_markdown_legacy(text):
    out = []
    entities = []
    i = 0
    n = len(text)
    marks = {"*": "bold", "_": "italic"}
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] in "_*`[":
            out.append(text[i + 1])
            i += 2
            continue
        if c in marks or c == "`" or c == "[":
            start_index = i
            if c == "`" and text.startswith("```", i):
                end = text.find("```", i + 3)
                width = 3
                kind = "pre"
            elif c == "[":
                close = text.find("](", i + 1)
                end_url = text.find(")", close + 2) if close >= 0 else -1
                if close < 0 or end_url < 0:
                    raise EntityError(f"Can't find end of the entity starting at byte offset {_byte_offset(text, start_index)}")
                label = text[i + 1:close]
                entities.append({"type": "text_link", "offset": utf16_len("".join(out)), "length": utf16_len(label), "url": text[close + 2:end_url]})
                out.append(label)
                i = end_url + 1
                continue
            else:
                end = text.find(c, i + 1)
                width = 1
                kind = marks.get(c, "code")
            if end < 0:
                raise EntityError(f"Can't find end of the entity starting at byte offset {_byte_offset(text, start_index)}")
            body = text[i + width:end]
            entities.append({"type": kind, "offset": utf16_len("".join(out)), "length": utf16_len(body)})
            out.append(body)
            i = end + width
            continue
        out.append(c)
        i += 1
    return "".join(out), entities


PARSERS = {"markdownv2": parse_markdown_v2, "html": parse_html, "markdown": parse_markdown_legacy}


def failure(code, description, parameters=None):
    payload = {"ok": False, "error_code": code, "description": description}
    if parameters:
        payload["parameters"] = parameters
    return code, payload


class Telegram(cc.ChannelStandIn):
    name = "telegram"

    def __init__(self, tokens, chats):
        self.tokens = set(tokens)
        self.initial_chats = chats
        super().__init__()

    def reset_state(self):
        self.chats = {}
        for chat in self.initial_chats:
            self.add_chat(chat)
        self.blocked = set()
        self.pending = collections.deque(maxlen=MAX_PENDING)
        self.next_update_id = 100000001
        self.allowed_updates = None
        self.update_arrived = asyncio.Event() if self._loop_running() else None
        self.poller = None
        self.webhook_url = ""
        self.sent = cc.Records()
        self.next_message_id = {}

    @staticmethod
    def _loop_running():
        try:
            asyncio.get_running_loop()
            return True
        except RuntimeError:
            return False

    def event(self):
        if self.update_arrived is None:
            self.update_arrived = asyncio.Event()
        return self.update_arrived

    def add_chat(self, chat):
        key = str(chat.get("id") if chat.get("id") is not None else chat["username"]).lower()
        chat = dict(chat)
        if "id" not in chat:
            chat["id"] = -1000000000000 - len(self.chats) - 1
        self.chats[key] = chat
        if chat.get("username"):
            self.chats[chat["username"].lower()] = chat

    def find_chat(self, chat_id):
        key = str(chat_id).strip().lower()
        if re.fullmatch(r"-?\d+", key):
            key = str(int(key))
        return self.chats.get(key)

    @staticmethod
    def parameters(scope, headers, body):
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(scope.get("query_string", b"").decode(), keep_blank_values=True).items()}
        content_type = headers.get("content-type", [""])[0].split(";")[0].strip().lower()
        if body and content_type == "application/json":
            try:
                document = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise ValueError("Bad Request: can't parse JSON object")
            if not isinstance(document, dict):
                raise ValueError("Bad Request: can't parse JSON object")
            params.update(document)
        elif body and content_type == "application/x-www-form-urlencoded":
            params.update({k: v[-1] for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()})
        return params

    async def service(self, scope, headers, body, send):
        match = re.fullmatch(r"/bot([^/]*)/([A-Za-z]+)", scope["path"])
        record = self.requests.append(cc.record_for(scope, headers, body))
        if not match:
            status, payload = failure(404, "Not Found")
        elif match.group(1) not in self.tokens:
            status, payload = failure(401, "Unauthorized")
        else:
            record["method_name"] = match.group(2)
            try:
                params = self.parameters(scope, headers, body)
                record["params"] = params
                status, payload = await self.method(match.group(1), match.group(2).lower(), params)
            except ValueError as problem:
                status, payload = failure(400, str(problem))
        record["status"] = status
        record["response"] = payload
        if status is None:
            return  # a superseded long poll already answered
        await cc.respond_json(send, status, payload)

    async def method(self, token, name, params):
        if name == "getme":
            return 200, {"ok": True, "result": self.bot_user(token, full=True)}
        if name == "sendmessage":
            return await self.send_message(token, params)
        if name == "getupdates":
            return await self.get_updates(params)
        if name == "deletewebhook":
            self.webhook_url = ""
            return 200, {"ok": True, "result": True, "description": "Webhook was deleted"}
        if name == "getwebhookinfo":
            return 200, {"ok": True, "result": {"url": self.webhook_url, "has_custom_certificate": False, "pending_update_count": len(self.pending)}}
        return failure(404, "Not Found")

    @staticmethod
    def bot_user(token, full=False):
        user = {"id": int(token.split(":")[0]) if token.split(":")[0].isdigit() else 1, "is_bot": True,
                "first_name": "Soulacy Test Bot", "username": "soulacy_test_bot"}
        if full:
            user.update({"can_join_groups": True, "can_read_all_group_messages": False, "supports_inline_queries": False,
                         "can_connect_to_business": False, "has_main_web_app": False})
        return user

    async def scripted(self, chat=None):
        step = self.next_step()
        await self.pause(step)
        if not step:
            return None
        status = step.get("status")
        error = step.get("error")
        if status == 429 or error == "too_many_requests":
            after = int(step.get("retry_after", 5))
            return failure(429, f"Too Many Requests: retry after {after}", {"retry_after": after})
        if error == "blocked":
            return failure(403, "Forbidden: bot was blocked by the user")
        if error == "kicked":
            return failure(403, "Forbidden: bot was kicked from the group chat")
        if error == "chat_not_found":
            return failure(400, "Bad Request: chat not found")
        if error == "migrated":
            target = int(step.get("migrate_to_chat_id", -1001234567890))
            return failure(400, "Bad Request: group chat was upgraded to a supergroup chat", {"migrate_to_chat_id": target})
        if status and status >= 500:
            return failure(status, "Internal Server Error" if status == 500 else "Bad Gateway")
        if status and status >= 400:
            return failure(status, step.get("description", "Bad Request"))
        return None

    async def send_message(self, token, params):
        chat_id = params.get("chat_id")
        if chat_id is None or str(chat_id).strip() == "":
            return failure(400, "Bad Request: chat_id is empty")
        text = params.get("text")
        if text is None:
            return failure(400, "Bad Request: message text is empty")
        text = str(text)
        parse_mode = params.get("parse_mode")
        entities = []
        plain = text
        if parse_mode not in (None, ""):
            parser = PARSERS.get(str(parse_mode).lower())
            if not parser:
                return failure(400, "Bad Request: unsupported parse_mode")
            try:
                plain, entities = parser(text)
            except EntityError as problem:
                return failure(400, f"Bad Request: can't parse entities: {problem}")
        chat = self.find_chat(chat_id)
        if chat is None:
            return failure(400, "Bad Request: chat not found")
        stripped = plain.strip()
        if not stripped:
            return failure(400, "Bad Request: message text is empty")
        if utf16_len(stripped) > MAX_TEXT:
            return failure(400, "Bad Request: message is too long")
        if str(chat["id"]) in self.blocked:
            return failure(403, "Forbidden: bot was blocked by the user")
        scripted = await self.scripted(chat)
        if scripted:
            return scripted
        message_id = self.next_message_id.get(chat["id"], 1)
        self.next_message_id[chat["id"]] = message_id + 1
        lead = utf16_len(plain) - utf16_len(plain.lstrip())
        message = {"message_id": message_id, "from": self.bot_user(token), "chat": self.public_chat(chat), "date": int(time.time()), "text": stripped}
        kept = [dict(e, offset=e["offset"] - lead) for e in entities if e["offset"] - lead >= 0]
        if kept:
            message["entities"] = kept
        if params.get("disable_web_page_preview") in (True, "true", "True", "1") or params.get("link_preview_options"):
            message["link_preview_options"] = {"is_disabled": True} if params.get("disable_web_page_preview") not in (None, False, "false") else params["link_preview_options"]
        self.sent.append({"message": message, "params": params, "parse_mode": parse_mode})
        return 200, {"ok": True, "result": message}

    @staticmethod
    def public_chat(chat):
        kind = chat.get("type", "private")
        result = {"id": chat["id"], "type": kind}
        if kind == "private":
            result["first_name"] = chat.get("first_name", chat.get("title", "Test User"))
        else:
            result["title"] = chat.get("title", "Test Chat")
        if chat.get("username"):
            result["username"] = chat["username"].lstrip("@")
        return result

    @staticmethod
    def _int(params, name, default):
        value = params.get(name, default)
        if value in (None, ""):
            return default
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ValueError(f"Bad Request: invalid {name} specified")

    def visible(self):
        allowed = self.allowed_updates
        for update in self.pending:
            kind = next((k for k in update if k != "update_id"), None)
            if allowed:
                if kind in allowed:
                    yield update
            elif kind not in DEFAULT_EXCLUDED:
                yield update

    async def get_updates(self, params):
        if self.webhook_url:
            return failure(409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first")
        offset = self._int(params, "offset", 0)
        limit = max(1, min(100, self._int(params, "limit", 100)))
        timeout = max(0, self._int(params, "timeout", 0))
        allowed = params.get("allowed_updates")
        if allowed is not None:
            if isinstance(allowed, str):
                try:
                    allowed = json.loads(allowed) if allowed.strip() else []
                except json.JSONDecodeError:
                    raise ValueError("Bad Request: can't parse allowed updates")
            if not isinstance(allowed, list):
                raise ValueError("Bad Request: can't parse allowed updates")
            self.allowed_updates = [a for a in allowed if a in UPDATE_TYPES]
        if offset < 0:
            keep = list(self.pending)[offset:]
            self.pending.clear()
            self.pending.extend(keep)
        elif offset > 0:
            while self.pending and self.pending[0]["update_id"] < offset:
                self.pending.popleft()
        # One long poll at a time: a newer request ends the one being held with 409.
        if self.poller and not self.poller.done():
            self.poller.set_result(failure(409, "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"))
        deadline = time.monotonic() + timeout
        me = asyncio.get_running_loop().create_future()
        self.poller = me
        try:
            while True:
                found = list(self.visible())[:limit]
                if found:
                    scripted = await self.scripted()
                    return scripted or (200, {"ok": True, "result": found})
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    scripted = await self.scripted()
                    return scripted or (200, {"ok": True, "result": []})
                event = self.event()
                waiter = asyncio.ensure_future(event.wait())
                done, _ = await asyncio.wait([waiter, me], timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                if me.done():
                    return me.result()
                if event.is_set():
                    self.update_arrived = asyncio.Event()
        finally:
            if self.poller is me:
                self.poller = None

    def inject(self, updates):
        ids = []
        for update in updates:
            update = dict(update)
            if "text" in update and not any(k in UPDATE_TYPES for k in update):
                chat_id = update.get("chat_id", 424242)
                sender = update.get("from_id", chat_id)
                chat = self.find_chat(chat_id) or {"id": chat_id, "type": "private"}
                update = {"message": {"message_id": update.get("message_id", self.next_update_id % 100000),
                                      "from": {"id": sender, "is_bot": False, "first_name": update.get("first_name", "Test"),
                                               **({"username": update["username"]} if update.get("username") else {})},
                                      "chat": self.public_chat(chat), "date": int(time.time()), "text": update["text"]}}
            update["update_id"] = self.next_update_id
            self.next_update_id += 1
            self.pending.append(update)
            ids.append(update["update_id"])
        self.event().set()
        return ids

    async def extra_control(self, path, method, data, send):
        if path == "/control/updates":
            ids = self.inject(data.get("updates", []))
            await cc.respond_json(send, 200, {"queued": len(ids), "update_ids": ids})
        elif path == "/control/pending":
            await cc.respond_json(send, 200, {"updates": list(self.pending)})
        elif path == "/control/messages":
            await cc.respond_json(send, 200, {"messages": [m["message"] for m in self.sent.list()]})
        elif path == "/control/chats":
            for chat in data.get("chats", []):
                self.add_chat(chat)
            await cc.respond_json(send, 200, {"ok": True})
        elif path == "/control/block":
            chat = self.find_chat(data["chat_id"])
            self.blocked.add(str(chat["id"] if chat else data["chat_id"]))
            await cc.respond_json(send, 200, {"ok": True})
        elif path == "/control/webhook":
            self.webhook_url = data.get("url", "")
            await cc.respond_json(send, 200, {"ok": True})
        else:
            return False
        return True


def parse_chat(spec):
    if spec.startswith("@"):
        return {"username": spec, "type": "channel", "title": spec[1:]}
    parts = spec.split(":", 2)
    chat = {"id": int(parts[0]), "type": parts[1] if len(parts) > 1 else ("private" if int(parts[0]) > 0 else "supergroup")}
    if len(parts) > 2:
        chat["title"] = parts[2]
    return chat


def main():
    parser = argparse.ArgumentParser()
    cc.add_standard_arguments(parser)
    parser.add_argument("--token", action="append", required=True, help="a bot token the API accepts (repeatable)")
    parser.add_argument("--chat", action="append", default=[])
    args = parser.parse_args()
    chats = [parse_chat(c) for c in args.chat] or [
        {"id": 424242, "type": "private", "first_name": "Test User"},
        {"id": -1001234567890, "type": "supergroup", "title": "Soulacy Test Group"},
        {"username": "@soulacy_test", "type": "channel", "title": "Soulacy Test Channel", "id": -1009876543210},
    ]
    return cc.serve(Telegram(args.token, chats), args.tls_port, args.control_port, args.cert_dir)


if __name__ == "__main__":
    sys.exit(main())
