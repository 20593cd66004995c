#!/usr/bin/env python3
"""Self-check of the channel stand-ins: starts each one as the Swift tests would (free ports, a temporary --cert-dir,
PYTHONPATH=Tests/StandIns), waits for its ready line and /control/health, proves the happy path and each documented
error with a plain client (urllib over TLS, smtplib, imaplib, the standardwebhooks package as a sender), stops it
with SIGTERM and requires exit status 0.

    python3 Tests/StandIns/selfcheck_channels.py [telegram slack discord whatsapp webhooks receiver smtp imap]

Prints one line per check and a closing "N passed, N failed"; exits 0 only when every check passed.
"""
import base64
import datetime
import hashlib
import hmac
import imaplib
import json
import os
import secrets
import shutil
import signal
import smtplib
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
RESULTS = {"passed": 0, "failed": 0}


def check(name, condition, detail=""):
    if condition:
        RESULTS["passed"] += 1
        print(f"  ok    {name}")
    else:
        RESULTS["failed"] += 1
        print(f"  FAIL  {name} {detail}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandIn:
    def __init__(self, script, *arguments):
        self.script = script
        self.arguments = list(arguments)
        self.directory = tempfile.mkdtemp(prefix="channel-selfcheck-")
        self.tls_port = free_port()
        self.control_port = free_port()

    def __enter__(self):
        env = dict(os.environ, PYTHONPATH=HERE, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen([sys.executable, os.path.join(HERE, self.script), "--tls-port", str(self.tls_port),
                                         "--control-port", str(self.control_port), "--cert-dir", self.directory] + self.arguments,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        self.output = []
        ready = threading.Event()

        def pump():
            for line in self.process.stdout:
                text = line.decode("utf-8", "replace")
                self.output.append(text)
                if text.startswith("READY "):
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(25):
            self.process.kill()
            raise RuntimeError(f"{self.script} did not print its ready line:\n{''.join(self.output)}")
        health = self.control("GET", "/control/health")
        if health.get("pid") != self.process.pid:
            raise RuntimeError(f"{self.script}: /control/health answered for pid {health.get('pid')}, not {self.process.pid}")
        self.context = ssl.create_default_context(cafile=os.path.join(self.directory, "standin-cert.pem"))
        return self

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                status = self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                status = "killed after 15 s"
            check(f"{self.script} exits 0 on SIGTERM", status == 0, f"(status {status}):\n{''.join(self.output[-20:])}")
        shutil.rmtree(self.directory, ignore_errors=True)

    def control(self, method, path, data=None):
        request = urllib.request.Request(f"http://127.0.0.1:{self.control_port}{path}", method=method,
                                         data=None if data is None else json.dumps(data).encode())
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())

    def call(self, method, path, body=None, headers=None, timeout=10, raw=False):
        """(status, headers, parsed JSON or text) from the TLS port."""
        data = body if isinstance(body, (bytes, type(None))) else (json.dumps(body).encode() if not isinstance(body, str) else body.encode())
        request = urllib.request.Request(f"https://127.0.0.1:{self.tls_port}{path}", method=method, data=data, headers=headers or {})
        try:
            answer = urllib.request.urlopen(request, timeout=timeout, context=self.context)
        except urllib.error.HTTPError as error:
            answer = error
        payload = answer.read()
        text = payload.decode("utf-8", "replace")
        if raw:
            return answer.status, dict(answer.headers), text
        try:
            return answer.status, dict(answer.headers), json.loads(text)
        except json.JSONDecodeError:
            return answer.status, dict(answer.headers), text


JSON = {"Content-Type": "application/json"}


def telegram():
    token = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1"
    with StandIn("telegram_standin.py", "--token", token) as s:
        base = f"/bot{token}"
        status, _, body = s.call("POST", base + "/getMe", {}, JSON)
        check("telegram getMe", status == 200 and body["ok"] and body["result"]["is_bot"] and body["result"]["id"] == 123456789, body)
        status, _, body = s.call("POST", base + "/sendMessage", {"chat_id": 424242, "text": "hello"}, JSON)
        check("telegram sendMessage JSON", status == 200 and body["result"]["text"] == "hello" and body["result"]["chat"]["id"] == 424242, body)
        form = urllib.parse.urlencode({"chat_id": "@soulacy_test", "text": "*bold* and \\. done", "parse_mode": "MarkdownV2",
                                       "disable_web_page_preview": "true"})
        status, _, body = s.call("POST", base + "/sendMessage", form, {"Content-Type": "application/x-www-form-urlencoded"})
        check("telegram sendMessage form + MarkdownV2 to @channel", status == 200 and body["result"]["text"] == "bold and . done"
              and body["result"]["entities"][0]["type"] == "bold", body)
        status, _, body = s.call("POST", f"/bot123:wrong/sendMessage", {"chat_id": 424242, "text": "x"}, JSON)
        check("telegram bad token 401", status == 401 and body == {"ok": False, "error_code": 401, "description": "Unauthorized"}, body)
        status, _, body = s.call("POST", base + "/sendMessage", {"chat_id": 999, "text": "x"}, JSON)
        check("telegram chat not found 400", status == 400 and body["description"] == "Bad Request: chat not found", body)
        status, _, body = s.call("POST", base + "/sendMessage", {"chat_id": 424242, "text": "  "}, JSON)
        check("telegram empty text 400", status == 400 and body["description"] == "Bad Request: message text is empty", body)
        status, _, body = s.call("POST", base + "/sendMessage", {"chat_id": 424242, "text": "a" * 4097}, JSON)
        check("telegram 4097 chars 400 too long", status == 400 and body["description"] == "Bad Request: message is too long", body)
        status, _, body = s.call("POST", base + "/sendMessage", {"chat_id": 424242, "text": "<b>" + "a" * 4096 + "</b>", "parse_mode": "HTML"}, JSON)
        check("telegram 4096 chars after HTML parsing accepted", status == 200, body)
        status, _, body = s.call("POST", base + "/sendMessage", {"chat_id": 424242, "text": "Version 1.2", "parse_mode": "MarkdownV2"}, JSON)
        check("telegram MarkdownV2 unescaped '.' 400", status == 400 and body["description"].startswith("Bad Request: can't parse entities: Character '.' is reserved"), body)
        status, _, body = s.call("POST", base + "/sendMessage", {"chat_id": 424242, "text": "*open", "parse_mode": "MarkdownV2"}, JSON)
        check("telegram MarkdownV2 unclosed bold 400", status == 400 and "Can't find end of Bold entity" in body["description"], body)
        status, _, body = s.call("POST", base + "/sendMessage", {"chat_id": 424242, "text": "<b>open", "parse_mode": "HTML"}, JSON)
        check("telegram HTML unclosed tag 400", status == 400 and body["description"].startswith("Bad Request: can't parse entities: Can't find end tag"), body)
        status, _, body = s.call("POST", base + "/sendMessage", {"chat_id": 424242, "text": "<div>x</div>", "parse_mode": "HTML"}, JSON)
        check("telegram HTML unsupported tag 400", status == 400 and 'Unsupported start tag "div"' in body["description"], body)
        s.control("POST", "/control/script", {"responses": [{"status": 429, "retry_after": 7}]})
        status, _, body = s.call("POST", base + "/sendMessage", {"chat_id": 424242, "text": "x"}, JSON)
        check("telegram scripted 429", status == 429 and body == {"ok": False, "error_code": 429, "description": "Too Many Requests: retry after 7",
                                                                   "parameters": {"retry_after": 7}}, body)
        # getUpdates: empty long poll held for its timeout
        started = time.monotonic()
        status, _, body = s.call("GET", base + "/getUpdates?timeout=1", None)
        held = time.monotonic() - started
        check("telegram getUpdates holds the long poll while empty", status == 200 and body["result"] == [] and 0.9 <= held < 3, (held, body))
        queued = s.control("POST", "/control/updates", {"updates": [{"text": "first", "chat_id": 424242}, {"text": "second", "chat_id": 424242},
                                                                      {"callback_query": {"id": "1", "data": "x"}}]})
        ids = queued["update_ids"]
        status, _, body = s.call("POST", base + "/getUpdates", {"timeout": 5, "allowed_updates": ["message"]}, JSON)
        check("telegram getUpdates returns injected updates filtered by allowed_updates",
              status == 200 and [u["update_id"] for u in body["result"]] == ids[:2] and body["result"][0]["message"]["text"] == "first", body)
        status, _, body = s.call("POST", base + "/getUpdates", {"offset": ids[0] + 1, "timeout": 0}, JSON)
        check("telegram offset confirms earlier updates", [u["update_id"] for u in body["result"]] == [ids[1]], body)
        pending = s.control("GET", "/control/pending")["updates"]
        check("telegram confirmed updates are dropped", [u["update_id"] for u in pending] == ids[1:], pending)
        # a long poll that an injected update wakes
        result = {}

        def poll(offset):
            result["answer"] = s.call("POST", base + "/getUpdates", {"offset": offset, "timeout": 10}, JSON)

        thread = threading.Thread(target=poll, args=(ids[2] + 1,))
        started = time.monotonic()
        thread.start()
        time.sleep(0.5)
        later = s.control("POST", "/control/updates", {"updates": [{"text": "wake", "chat_id": 424242}]})["update_ids"]
        thread.join(10)
        status, _, body = result["answer"]
        check("telegram held getUpdates answers when an update arrives", status == 200 and [u["update_id"] for u in body["result"]] == later
              and time.monotonic() - started < 5, body)
        # a second poll ends the first with 409
        result.clear()
        thread = threading.Thread(target=poll, args=(later[0] + 1,))
        thread.start()
        time.sleep(0.5)
        status2, _, body2 = s.call("POST", base + "/getUpdates", {"offset": later[0] + 1, "timeout": 0}, JSON)
        thread.join(10)
        status, _, body = result["answer"]
        check("telegram concurrent getUpdates: the first gets 409 Conflict", status == 409 and body["description"].startswith("Conflict: terminated by other getUpdates"), body)
        sent = s.control("GET", "/control/messages")["messages"]
        check("telegram control lists sent messages", [m["text"] for m in sent][:2] == ["hello", "bold and . done"], sent)


def slack():
    token = "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx"
    with StandIn("slack_standin.py", "--token", token) as s:
        auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json; charset=utf-8"}
        status, _, body = s.call("POST", "/api/chat.postMessage", {"channel": "C0SOULACY1", "text": "hello"}, auth)
        check("slack postMessage", status == 200 and body["ok"] and body["channel"] == "C0SOULACY1" and body["message"]["text"] == "hello" and "." in body["ts"], body)
        status, _, body = s.call("POST", "/api/chat.postMessage", {"channel": "#alerts", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "hi"}}]}, auth)
        check("slack postMessage by #name with blocks only", status == 200 and body["ok"] and body["channel"] == "C0SOULACY2", body)
        form = urllib.parse.urlencode({"token": token, "channel": "general", "text": "form"})
        status, _, body = s.call("POST", "/api/chat.postMessage", form, {"Content-Type": "application/x-www-form-urlencoded"})
        check("slack form body with token parameter", status == 200 and body["ok"], body)
        status, _, body = s.call("POST", "/api/chat.postMessage", {"channel": "C0SOULACY1", "text": "x"}, {"Content-Type": "application/json"})
        check("slack no token -> not_authed (HTTP 200)", status == 200 and body == {"ok": False, "error": "not_authed"}, body)
        status, _, body = s.call("POST", "/api/chat.postMessage", {"channel": "C0SOULACY1", "text": "x"}, dict(auth, Authorization="Bearer xoxb-wrong"))
        check("slack wrong token -> invalid_auth", status == 200 and body == {"ok": False, "error": "invalid_auth"}, body)
        status, _, body = s.call("POST", "/api/chat.postMessage", {"channel": "C404", "text": "x"}, auth)
        check("slack channel_not_found", status == 200 and body["error"] == "channel_not_found", body)
        status, _, body = s.call("POST", "/api/chat.postMessage", {"channel": "C0SOULACY1", "text": "a" * 40001}, auth)
        check("slack msg_too_long over 40,000", status == 200 and body["error"] == "msg_too_long", body)
        status, _, body = s.call("POST", "/api/chat.postMessage", {"channel": "C0SOULACY1", "text": "a" * 40000}, auth)
        check("slack 40,000 accepted", status == 200 and body["ok"], body.get("error") if isinstance(body, dict) else body)
        status, _, body = s.call("POST", "/api/chat.postMessage", {"channel": "C0SOULACY1"}, auth)
        check("slack no_text", status == 200 and body["error"] == "no_text", body)
        status, _, body = s.call("POST", "/api/chat.postMessage", {"channel": "C0SOULACY1", "text": "x"}, dict(auth, **{"Content-Type": "application/json"}))
        check("slack JSON without charset warns missing_charset", body.get("ok") and body.get("warning") == "missing_charset", body)
        s.control("POST", "/control/script", {"responses": [{"status": 429, "retry_after": 12}, {"error": "fatal_error"}]})
        status, headers, body = s.call("POST", "/api/chat.postMessage", {"channel": "C0SOULACY1", "text": "x"}, auth)
        check("slack scripted 429 with Retry-After", status == 429 and headers.get("retry-after", headers.get("Retry-After")) == "12" and body["error"] == "ratelimited", (headers, body))
        status, _, body = s.call("POST", "/api/chat.postMessage", {"channel": "C0SOULACY1", "text": "x"}, auth)
        check("slack scripted named error", status == 200 and body == {"ok": False, "error": "fatal_error"}, body)
        check("slack control lists messages", len(s.control("GET", "/control/messages")["messages"]) == 5)


def discord():
    token = "MTEwMDAwMDAwMDAwMDAwMTAw.GsoulA.cy-test-token-0123456789abcdefghij"
    with StandIn("discord_standin.py", "--token", token, "--bucket-limit", "3", "--bucket-window", "2") as s:
        auth = {"Authorization": f"Bot {token}", "Content-Type": "application/json", "User-Agent": "DiscordBot (https://soulacy.dev, 1.0)"}
        path = "/api/v10/channels/1100000000000000001/messages"
        status, headers, body = s.call("POST", path, {"content": "hello"}, auth)
        check("discord create message", status == 200 and body["content"] == "hello" and body["channel_id"] == "1100000000000000001"
              and body["author"]["bot"] and "X-RateLimit-Remaining" in headers, (status, body))
        status, _, body = s.call("POST", path, {"content": "x"}, dict(auth, Authorization="Bot wrong"))
        check("discord bad token 401", status == 401 and body == {"message": "401: Unauthorized", "code": 0}, body)
        status, _, body = s.call("POST", "/api/v10/channels/1999999999999999999/messages", {"content": "x"}, auth)
        check("discord unknown channel 404", status == 404 and body == {"message": "Unknown Channel", "code": 10003}, body)
        status, _, body = s.call("POST", path, {"content": "a" * 2001}, auth)
        check("discord content over 2000 -> 50035", status == 400 and body["code"] == 50035 and
              body["errors"]["content"]["_errors"][0]["code"] == "BASE_TYPE_MAX_LENGTH", body)
        status, _, body = s.call("POST", path, {}, auth)
        check("discord empty message 50006", status == 400 and body["code"] == 50006, body)
        status, headers, body = s.call("POST", path, {"content": "2"}, auth)
        status, headers, body = s.call("POST", path, {"content": "3"}, auth)
        status, headers, body = s.call("POST", path, {"content": "4"}, auth)
        check("discord per-channel bucket 429 with retry_after float and headers", status == 429 and isinstance(body["retry_after"], float)
              and body["global"] is False and headers.get("Retry-After") and headers.get("X-RateLimit-Scope") == "user"
              and headers.get("X-RateLimit-Remaining") == "0" and "X-RateLimit-Reset-After" in headers, (headers, body))
        time.sleep(2.1)
        s.control("POST", "/control/script", {"responses": [{"status": 429, "retry_after": 2.5, "global": True}]})
        status, headers, body = s.call("POST", path, {"content": "x"}, auth)
        check("discord scripted global 429", status == 429 and body["retry_after"] == 2.5 and body["global"] is True
              and headers.get("X-RateLimit-Global") == "true" and headers.get("Retry-After") == "3", (headers, body))
        requests = s.control("GET", "/control/requests")["requests"]
        check("discord records user agent check", requests[0]["user_agent_ok"] is True)
        status, _, body = s.call("GET", "/api/v10/users/@me", None, auth)
        check("discord get current user", status == 200 and body["bot"] is True and body["id"] == "1100000000000000100", body)
        status, _, body = s.call("GET", "/api/v10/users/@me", None, dict(auth, Authorization="Bot wrong"))
        check("discord get current user bad token 401", status == 401 and body == {"message": "401: Unauthorized", "code": 0}, body)


def whatsapp():
    token = "EAAGm0PX4ZCpsBAsoulacytesttoken0123456789"
    with StandIn("whatsapp_standin.py", "--token", token, "--allowed-recipient", "+1 555 123 4567") as s:
        auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        path = "/v21.0/106540352242922/messages"
        message = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": "15551234567", "type": "text",
                   "text": {"body": "hello", "preview_url": False}}
        status, _, body = s.call("POST", path, message, auth)
        check("whatsapp send text", status == 200 and body["messaging_product"] == "whatsapp" and body["contacts"] == [{"input": "15551234567", "wa_id": "15551234567"}]
              and body["messages"][0]["id"].startswith("wamid."), body)
        status, _, body = s.call("POST", path, message, dict(auth, Authorization="Bearer nope"))
        check("whatsapp invalid token 190 / 401", status == 401 and body["error"]["code"] == 190 and body["error"]["type"] == "OAuthException"
              and "fbtrace_id" in body["error"], body)
        status, _, body = s.call("POST", path, dict(message, to="15550000000"), auth)
        check("whatsapp recipient not allowed 131030", status == 400 and body["error"]["code"] == 131030
              and body["error"]["error_data"]["messaging_product"] == "whatsapp", body)
        status, _, body = s.call("POST", path, dict(message, text={"body": "a" * 4097}), auth)
        check("whatsapp body over 4096 -> 100 invalid parameter", status == 400 and body["error"]["code"] == 100 and "4096" in body["error"]["error_data"]["details"], body)
        status, _, body = s.call("POST", path, {k: v for k, v in message.items() if k != "messaging_product"}, auth)
        check("whatsapp messaging_product required", status == 400 and body["error"]["code"] == 100, body)
        status, _, body = s.call("POST", "/v21.0/999/messages", message, auth)
        check("whatsapp unknown phone number id", status == 400 and body["error"]["code"] == 100 and body["error"]["error_subcode"] == 33, body)
        s.control("POST", "/control/script", {"responses": [{"status": 429}, {"error": 80007}, {"error": 131047}]})
        status, _, body = s.call("POST", path, message, auth)
        check("whatsapp scripted 130429", status == 429 and body["error"]["code"] == 130429 and body["error"]["message"] == "(#130429) Rate limit hit", body)
        status, _, body = s.call("POST", path, message, auth)
        check("whatsapp scripted 80007", status == 429 and body["error"]["code"] == 80007, body)
        status, _, body = s.call("POST", path, message, auth)
        check("whatsapp scripted 131047", status == 400 and body["error"]["code"] == 131047, body)
        check("whatsapp no error_subcode for v16+ (non-190)", "error_subcode" not in body["error"], body)
        check("whatsapp control lists messages", [m["body"] for m in s.control("GET", "/control/messages")["messages"]] == ["hello"])


def webhooks():
    from incoming_webhook_standin import TEAMS_DEFAULT, GOOGLE_KEY, GOOGLE_TOKEN
    with StandIn("incoming_webhook_standin.py") as s:
        status, _, body = s.call("POST", TEAMS_DEFAULT, {"@type": "MessageCard", "@context": "https://schema.org/extensions", "summary": "s", "text": "hello"}, JSON, raw=True)
        check("teams MessageCard -> 200 '1'", status == 200 and body == "1", (status, body))
        card = {"type": "message", "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None,
                                                    "content": {"$schema": "http://adaptivecards.io/schemas/adaptive-card.json", "type": "AdaptiveCard",
                                                                "version": "1.4", "body": [{"type": "TextBlock", "text": "hi"}]}}]}
        status, _, body = s.call("POST", TEAMS_DEFAULT, card, JSON, raw=True)
        check("teams Adaptive Card -> 200 '1'", status == 200 and body == "1", (status, body))
        status, _, body = s.call("POST", TEAMS_DEFAULT, b"{not json", JSON, raw=True)
        check("teams bad payload 400", status == 400 and body == "Bad payload received by generic incoming webhook.", (status, body))
        status, _, body = s.call("POST", TEAMS_DEFAULT, {"@type": "MessageCard", "sections": []}, JSON, raw=True)
        check("teams card without text/summary 400", status == 400 and body == "Summary or Text is required.", (status, body))
        time.sleep(1.05)
        s.control("POST", "/control/script", {"responses": [{"status": 429, "service": "teams"}]})
        status, _, body = s.call("POST", TEAMS_DEFAULT, {"text": "x"}, JSON, raw=True)
        check("teams scripted 429", status == 429 and "429" in body, (status, body))
        time.sleep(1.05)
        answers = [s.call("POST", TEAMS_DEFAULT, {"text": f"burst {i}"}, JSON, raw=True)[0] for i in range(5)]
        check("teams more than four per second -> 429", answers[:4] == [200] * 4 and answers[4] == 429, answers)
        status, _, _ = s.call("POST", "/webhookb2/unknown/IncomingWebhook/x/y", {"text": "x"}, JSON, raw=True)
        check("teams unknown webhook 404", status == 404)
        status, _, _ = s.call("POST", TEAMS_DEFAULT, {"text": "a" * (29 * 1024)}, JSON, raw=True)
        check("teams over 28 KB -> 413", status == 413)
        base = f"/v1/spaces/AAAAsoulacy/messages?key={GOOGLE_KEY}&token={GOOGLE_TOKEN}"
        status, _, body = s.call("POST", base + "&threadKey=run-1", {"text": "hello"}, JSON)
        check("google chat message", status == 200 and body["text"] == "hello" and body["name"].startswith("spaces/AAAAsoulacy/messages/")
              and body["sender"]["type"] == "BOT", body)
        thread = body["thread"]["name"]
        status, _, body = s.call("POST", base + "&threadKey=run-1", {"text": "again"}, JSON)
        check("google chat same threadKey -> same thread", body["thread"]["name"] == thread, body)
        status, _, body = s.call("POST", f"/v1/spaces/AAAAsoulacy/messages?key=wrong&token={GOOGLE_TOKEN}", {"text": "x"}, JSON)
        check("google chat bad key 400 INVALID_ARGUMENT", status == 400 and body["error"]["status"] == "INVALID_ARGUMENT" and body["error"]["details"][0]["reason"] == "API_KEY_INVALID", body)
        status, _, body = s.call("POST", f"/v1/spaces/AAAAsoulacy/messages?key={GOOGLE_KEY}&token=wrong", {"text": "x"}, JSON)
        check("google chat bad token 401", status == 401 and body["error"]["status"] == "UNAUTHENTICATED", body)
        status, _, body = s.call("POST", base, {"txt": "typo"}, JSON)
        check("google chat unknown field 400", status == 400 and 'Unknown name "txt"' in body["error"]["message"], body)
        status, _, body = s.call("POST", base, {"text": ""}, JSON)
        check("google chat empty message 400", status == 400 and body["error"]["message"].startswith("Message cannot be empty"), body)
        status, _, body = s.call("POST", base, {"text": "a" * 32001}, JSON)
        check("google chat over 32,000 bytes 400", status == 400 and body["error"]["status"] == "INVALID_ARGUMENT", body)
        s.control("POST", "/control/script", {"responses": [{"status": 429, "service": "google_chat"}]})
        status, _, body = s.call("POST", base, {"text": "x"}, JSON)
        check("google chat scripted 429 RESOURCE_EXHAUSTED", status == 429 and body["error"] == {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED"}, body)
        messages = s.control("GET", "/control/messages")["messages"]
        check("incoming webhooks control lists messages", [m["service"] for m in messages].count("google_chat") == 2 and len(messages) == 8, [m["service"] for m in messages])


def receiver():
    from standardwebhooks.webhooks import Webhook
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    old_secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    with StandIn("webhook_receiver.py", "--secret", secret) as s:
        sender = Webhook(secret)
        old = Webhook(old_secret)

        def deliver(body, sign=True, extra=None, msg_id=None, when=None, soulacy=True, timeout=10):
            msg_id = msg_id or "msg_" + secrets.token_hex(8)
            when = when or datetime.datetime.now(tz=datetime.timezone.utc)
            text = json.dumps(body)
            signature = " ".join(filter(None, [old.sign(msg_id, when, text), sender.sign(msg_id, when, text) if sign else None]))
            headers = {"Content-Type": "application/json", "webhook-id": msg_id, "webhook-timestamp": str(int(when.timestamp())), "webhook-signature": signature}
            if soulacy:
                t = str(int(when.timestamp()))
                headers["X-Soulacy-Timestamp"] = t
                headers["X-Soulacy-Signature"] = "sha256=" + hmac.new(secret.encode(), f"{t}.{text}".encode(), hashlib.sha256).hexdigest()
            headers.update(extra or {})
            return s.call("POST", "/hooks/run-finished", text, headers, timeout=timeout), msg_id

        (status, _, body), first = deliver({"event": "run.finished", "run": 1})
        check("receiver verified delivery (two signatures, one valid) -> 200", status == 200, body)
        (status, _, body), _ = deliver({"event": "x"}, sign=False)
        check("receiver no valid Standard Webhooks signature -> 401", status == 401 and body["standard"]["verified"] is False, body)
        (status, _, body), _ = deliver({"event": "x"}, extra={"X-Soulacy-Signature": "sha256=" + "0" * 64})
        check("receiver bad Soulacy signature -> 401", status == 401 and body["soulacy"]["verified"] is False, body)
        (status, _, body), _ = deliver({"event": "x"}, when=datetime.datetime.now(tz=datetime.timezone.utc) - datetime.timedelta(minutes=10))
        check("receiver stale timestamp -> 401", status == 401 and "too old" in body["standard"]["error"], body)
        s.control("POST", "/control/script", {"responses": [{"status": 410}, {"status": 429, "retry_after": 9}, {"status": 500}, {"hang": True}]})
        (status, _, _), _ = deliver({"event": "a"})
        check("receiver scripted 410", status == 410)
        (status, headers, _), _ = deliver({"event": "b"})
        check("receiver scripted 429 with Retry-After", status == 429 and headers.get("Retry-After") == "9", headers)
        (status, _, _), _ = deliver({"event": "c"})
        check("receiver scripted 500", status == 500)
        started = time.monotonic()
        try:
            deliver({"event": "d"}, timeout=1.5)
            hung = False
        except (TimeoutError, socket.timeout, urllib.error.URLError):
            hung = time.monotonic() - started >= 1.4
        check("receiver scripted hang -> client times out", hung)
        (status, _, _), _ = deliver({"event": "run.finished", "run": 1}, msg_id=first)
        s.control("POST", "/control/default", {"status": 410})
        (status2, _, _), _ = deliver({"event": "e"})
        check("receiver default answer 410", status2 == 410)
        deliveries = s.control("GET", "/control/deliveries")["deliveries"]
        first_record = deliveries[0]
        check("receiver records id, headers, body and which signatures verified",
              first_record["id"] == first and first_record["standard"] == {"present": True, "verified": True, "error": None, "signatures": 2}
              and first_record["soulacy"]["verified"] is True and json.loads(first_record["body"])["run"] == 1, first_record)
        check("receiver marks a repeated webhook-id duplicate", any(d["id"] == first and d["duplicate"] for d in deliveries))


def smtp():
    smtps_port = free_port()
    with StandIn("smtp_standin.py", "--user", "gateway@soulacy.test", "--password", "pw-123", "--smtps-port", str(smtps_port)) as s:
        def connect():
            return smtplib.SMTP("127.0.0.1", s.tls_port, timeout=10)

        client = connect()
        client.ehlo()
        check("smtp advertises STARTTLS, not AUTH, before TLS", client.has_extn("starttls") and not client.has_extn("auth"))
        code, _ = client.docmd("MAIL FROM:<a@b.test>")
        check("smtp MAIL before STARTTLS -> 530", code == 530, code)
        code, _ = client.docmd("AUTH PLAIN", base64.b64encode(b"\0gateway@soulacy.test\0pw-123").decode())
        check("smtp AUTH before STARTTLS refused", code in (530, 538), code)
        client.quit()
        client = connect()
        client.starttls(context=s.context)
        client.ehlo()
        check("smtp advertises AUTH PLAIN LOGIN after STARTTLS", "PLAIN" in client.esmtp_features.get("auth", "") and "LOGIN" in client.esmtp_features.get("auth", ""))
        code, _ = client.docmd("MAIL FROM:<a@b.test>")
        check("smtp MAIL before AUTH -> 530", code == 530, code)
        try:
            client.login("gateway@soulacy.test", "wrong")
            bad = None
        except smtplib.SMTPAuthenticationError as error:
            bad = error.smtp_code
        check("smtp bad password -> 535", bad == 535, bad)
        client.quit()
        client = connect()
        client.starttls(context=s.context)
        client.login("gateway@soulacy.test", "pw-123")
        message = "From: Soulacy <gateway@soulacy.test>\r\nTo: owner@example.test\r\nSubject: Run finished\r\nMessage-ID: <1@soulacy.test>\r\n\r\nThe report is ready.\r\n"
        refused = client.sendmail("gateway@soulacy.test", ["owner@example.test"], message)
        check("smtp accepted after STARTTLS + AUTH", refused == {})
        s.control("POST", "/control/script", {"responses": [{"stage": "rcpt", "code": 450, "message": "4.2.1 Mailbox busy"},
                                                            {"stage": "data", "code": 554, "message": "5.7.1 Rejected"}]})
        client.mail("gateway@soulacy.test")
        code, _ = client.rcpt("busy@example.test")
        check("smtp scripted RCPT 450", code == 450, code)
        client.rset()
        try:
            client.sendmail("gateway@soulacy.test", ["owner@example.test"], message)
            data_code = 250
        except smtplib.SMTPDataError as error:
            data_code = error.smtp_code
        check("smtp scripted DATA 554", data_code == 554, data_code)
        client.quit()
        messages = s.control("GET", "/control/messages")["messages"]
        check("smtp records envelope, headers, body", len(messages) == 1 and messages[0]["mail_from"] == "gateway@soulacy.test"
              and messages[0]["rcpt_tos"] == ["owner@example.test"] and messages[0]["subject"] == "Run finished"
              and messages[0]["body"].strip() == "The report is ready." and messages[0]["tls"] and messages[0]["auth_user"] == "gateway@soulacy.test", messages)
        client = smtplib.SMTP_SSL("127.0.0.1", smtps_port, context=s.context, timeout=10)
        code, _ = client.docmd("EHLO", "client.test")
        code, _ = client.docmd("MAIL FROM:<a@b.test>")
        check("smtps (implicit TLS) MAIL before AUTH -> 530", code == 530, code)
        client.login("gateway@soulacy.test", "pw-123")
        check("smtps accepted after AUTH", client.sendmail("gateway@soulacy.test", ["owner@example.test"], message) == {})
        client.quit()
        messages = s.control("GET", "/control/messages")["messages"]
        check("smtps message recorded as implicit TLS", len(messages) == 2 and messages[1]["implicit_tls"] and messages[1]["tls"], messages[-1:])
        attempts = s.control("GET", "/control/auth")["attempts"][:3]
        # smtplib's login tries each offered mechanism in turn: the wrong password fails PLAIN, then LOGIN.
        check("smtp records auth attempts", [a["success"] for a in attempts] == [False, False, True] and all(a["tls"] for a in attempts), attempts)


def imap():
    if not shutil.which("dovecot") and not os.path.exists("/usr/sbin/dovecot"):
        check("imap: dovecot installed (apt-get install dovecot-imapd)", False)
        return
    starttls_port = free_port()
    with StandIn("imap_standin.py", "--user", "agent@soulacy.test", "--password", "pw-imap", "--starttls-port", str(starttls_port)) as s:
        appended = s.control("POST", "/control/append", {"from": "Boss <boss@example.test>", "subject": "Run the report", "body": "please"})
        check("imap append through Dovecot returns uid", appended["ok"] and appended["uid"] == 1, appended)
        client = imaplib.IMAP4_SSL("127.0.0.1", s.tls_port, ssl_context=s.context, timeout=10)
        try:
            client.login("agent@soulacy.test", "wrong")
            bad = False
        except imaplib.IMAP4.error:
            bad = True
        check("imap bad password refused", bad)
        client = imaplib.IMAP4_SSL("127.0.0.1", s.tls_port, ssl_context=s.context, timeout=10)
        client.login("agent@soulacy.test", "pw-imap")
        typ, data = client.select("INBOX")
        check("imap IMAPS login + SELECT sees the message", typ == "OK" and data[0] == b"1", data)
        typ, data = client.uid("FETCH", "1", "(BODY[HEADER.FIELDS (SUBJECT)])")
        check("imap FETCH subject", b"Run the report" in data[0][1], data)
        client.uid("STORE", "1", "+FLAGS", r"(\Seen)")
        client.logout()
        listing = s.control("GET", "/control/mailbox?name=INBOX")
        check("imap control sees the \\Seen the client set", listing["messages"][0]["flags"].count("\\Seen") == 1, listing)
        client = imaplib.IMAP4("127.0.0.1", starttls_port, timeout=10)
        check("imap STARTTLS port offers STARTTLS", "STARTTLS" in client.capabilities)
        client.starttls(ssl_context=s.context)
        client.login("agent@soulacy.test", "pw-imap")
        client.logout()
        time.sleep(0.3)
        logins = s.control("GET", "/control/logins")["logins"]
        check("imap logins read from Dovecot's log, with TLS", len(logins) >= 2 and all(l["tls"] for l in logins), logins)
        s.control("POST", "/control/reset")
        check("imap reset empties INBOX", s.control("GET", "/control/mailbox")["exists"] == 0)
    # StandInProcess.stop() sends SIGKILL: Dovecot must not outlive its launcher and keep the port.
    killed = StandIn("imap_standin.py")
    killed.__enter__()
    dovecot_pid = killed.control("GET", "/control/health")["dovecot_pid"]
    killed.process.kill()
    killed.process.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{dovecot_pid}/stat") as f:
                gone = f.read().split()[2] == "Z"  # exited (a zombie until init reaps it)
        except FileNotFoundError:
            gone = True
        if gone:
            break
        time.sleep(0.1)
    with socket.socket() as probe:
        port_free = probe.connect_ex(("127.0.0.1", killed.tls_port)) != 0
    check("imap: Dovecot exits and frees its port when the launcher is SIGKILLed", gone and port_free)
    shutil.rmtree(killed.directory, ignore_errors=True)
    from imap_standin import remove_stale_directories
    remove_stale_directories()  # what the next launcher would do with the directory the killed one left


CHECKS = {"telegram": telegram, "slack": slack, "discord": discord, "whatsapp": whatsapp, "webhooks": webhooks,
          "receiver": receiver, "smtp": smtp, "imap": imap}


def main():
    names = sys.argv[1:] or list(CHECKS)
    for name in names:
        print(f"{name}:")
        try:
            CHECKS[name]()
        except Exception as problem:
            import traceback
            traceback.print_exc()
            check(f"{name} ran to the end", False, repr(problem))
    print(f"{RESULTS['passed']} passed, {RESULTS['failed']} failed")
    return 0 if RESULTS["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
