"""A stand-in for three model APIs on one TLS port, written from the providers' documentation:

- OpenAI chat completions: POST /v1/chat/completions (https://platform.openai.com/docs/api-reference/chat/create)
- Ollama chat: POST /api/chat (https://github.com/ollama/ollama/blob/main/docs/api.md#generate-a-chat-completion)
- Anthropic Messages: POST /v1/messages (https://docs.anthropic.com/en/api/messages)

Each request is checked against the documented shape (auth header, model, messages and their roles, tools as JSON
Schema, tool results answering the calls before them, tool names as each provider's pattern allows them); a request
that breaks it gets the provider's 400 error in the provider's shape and is recorded with its violations.

Tool names: OpenAI's `function.name` must match ^[a-zA-Z0-9_-]{1,64}$ ("a-z, A-Z, 0-9, or contain underscores and
dashes, with a maximum length of 64"; the API answers 400 "Invalid 'tools[0].function.name': string does not match
pattern"), in tools, in earlier assistant tool_calls and in tool_choice; Anthropic's tool `name` must match
^[a-zA-Z0-9_-]{1,64}$ (tools, tool_use blocks, tool_choice). Ollama documents no rule and accepts any name.

Replies are scripted per test: {"text"}, {"tool_calls": [{"name", "arguments"}]} (a name "{{tool:<n>}}" is the
request's n-th offered tool name, as the model saw it), {"status", "error"} (with
"retry_after" / "retry_after_ms" sent as the Retry-After / retry-after-ms headers), {"refusal"} (OpenAI's
message.refusal, Anthropic's stop_reason "refusal"), each optionally with "delay_ms", "repeat": n (the same answer
to the next n requests) and "hold": true (no answer until POST /control/release); a streamed reply with
"hold_after": n stops after n frames until POST /control/release. With "stream": true the reply is streamed in the
provider's format (SSE for OpenAI and Anthropic, NDJSON for Ollama). Unscripted requests get {"text": "ok"}. Each
recorded request carries "received_ms", its arrival on a monotonic clock, so a test can measure waits between them.

The API answers on the TLS port (HTTP/2 or HTTP/1.1) and on the control port (plain HTTP/1.1, as Ollama, vLLM and
llama.cpp serve).

Control port (plain HTTP): GET /control/requests, POST /control/script, POST /control/reset, GET /control/health,
POST /control/release
"""
import argparse
import asyncio
import json
import re
import time

import standin_common as common

ROLES_OPENAI = {"system", "user", "assistant", "tool", "developer"}
TOOL_NAME_OPENAI = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
TOOL_NAME_ANTHROPIC = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class LLM:
    def __init__(self, openai_key, anthropic_key):
        self.openai_key = openai_key
        self.anthropic_key = anthropic_key
        self.reset()

    def reset(self):
        self.requests = []
        self.script = []
        self.counter = 0
        self.release = asyncio.Event()

    def next_reply(self, body, kind):
        reply = self.script.pop(0) if self.script else {"text": "ok"}
        if reply.get("repeat", 1) > 1:
            self.script.insert(0, dict(reply, repeat=reply["repeat"] - 1))
        # "{{result:<key>}}" in scripted arguments is replaced by that key of the latest tool result in the request,
        # so a script can read back a command id the gateway minted.
        last = self.last_tool_result(body, kind)
        def fill(value):
            if isinstance(value, str):
                m = re.fullmatch(r"\{\{result:(\w+)\}\}", value)
                return str(last.get(m.group(1), "")) if m and isinstance(last, dict) else value
            if isinstance(value, dict):
                return {k: fill(v) for k, v in value.items()}
            if isinstance(value, list):
                return [fill(v) for v in value]
            return value
        reply = fill(reply)
        # "{{tool:<n>}}" as a call's name is the name the request offered as its n-th tool: a model calls a tool by
        # the name it was given, whatever the gateway calls it.
        offered = self.offered_names(body, kind)
        for call in reply.get("tool_calls") or []:
            m = re.fullmatch(r"\{\{tool:(\d+)\}\}", call.get("name", ""))
            if m and int(m.group(1)) < len(offered):
                call["name"] = offered[int(m.group(1))]
        return reply

    @staticmethod
    def offered_names(body, kind):
        tools = body.get("tools") or []
        if kind == "anthropic":
            return [t.get("name", "") for t in tools]
        return [t.get("function", {}).get("name", "") for t in tools]

    @staticmethod
    def last_tool_result(body, kind):
        text = None
        for m in body.get("messages") or []:
            if kind in ("openai", "ollama") and m.get("role") == "tool":
                text = m.get("content")
            if kind == "anthropic" and isinstance(m.get("content"), list):
                for block in m["content"]:
                    if block.get("type") == "tool_result":
                        text = block.get("content")
        try:
            return json.loads(text) if text else None
        except ValueError:
            return None

    # --- validation, one function per wire format ---

    @staticmethod
    def check_schema(schema, where, problems):
        if not isinstance(schema, dict) or schema.get("type") != "object":
            problems.append(f"{where} must be a JSON Schema object with type object")
        elif "properties" in schema and not isinstance(schema["properties"], dict):
            problems.append(f"{where}.properties must be an object")

    def check_openai(self, headers, body, problems):
        if self.openai_key and headers.get("authorization", [""])[0] != f"Bearer {self.openai_key}":
            return 401
        if not isinstance(body.get("model"), str) or not body["model"]:
            problems.append("model is required")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            problems.append("messages must be a non-empty array")
            return None
        calls_open = set()
        for i, m in enumerate(messages):
            role = m.get("role")
            if role not in ROLES_OPENAI:
                problems.append(f"messages[{i}].role '{role}' is not valid")
            if role == "assistant":
                for j, call in enumerate(m.get("tool_calls") or []):
                    fn = call.get("function", {})
                    if call.get("type") != "function" or not isinstance(call.get("id"), str):
                        problems.append(f"messages[{i}].tool_calls[{j}] needs id and type function")
                    if not isinstance(fn.get("arguments"), str):
                        problems.append(f"messages[{i}].tool_calls[{j}].function.arguments must be a JSON string")
                    self.check_openai_name(fn.get("name"), f"messages[{i}].tool_calls[{j}].function.name", problems)
                    calls_open.add(call.get("id"))
            elif role == "tool":
                if m.get("tool_call_id") not in calls_open:
                    problems.append(f"messages[{i}].tool_call_id does not answer a tool call before it")
                if not isinstance(m.get("content"), str):
                    problems.append(f"messages[{i}].content must be a string")
            elif not isinstance(m.get("content"), str):
                problems.append(f"messages[{i}].content must be a string")
        for i, tool in enumerate(body.get("tools") or []):
            fn = tool.get("function", {}) if isinstance(tool, dict) else {}
            if tool.get("type") != "function" or not isinstance(fn.get("name"), str):
                problems.append(f"tools[{i}] needs type function and a name")
            else:
                self.check_openai_name(fn["name"], f"tools[{i}].function.name", problems)
            self.check_schema(fn.get("parameters"), f"tools[{i}].function.parameters", problems)
        choice = body.get("tool_choice")
        if isinstance(choice, dict):
            self.check_openai_name(choice.get("function", {}).get("name"), "tool_choice.function.name", problems)
        if "temperature" in body and not isinstance(body["temperature"], (int, float)):
            problems.append("temperature must be a number")
        if "max_tokens" in body and not isinstance(body["max_tokens"], int):
            problems.append("max_tokens must be an integer")
        return None

    @staticmethod
    def check_openai_name(name, where, problems):
        if not isinstance(name, str) or not TOOL_NAME_OPENAI.match(name):
            # OpenAI's own words for it (a 400 invalid_request_error naming the parameter).
            problems.append(f"Invalid '{where}': string does not match pattern. Expected a string that matches the pattern "
                            f"'^[a-zA-Z0-9_-]{{1,64}}$'.")

    def check_ollama(self, headers, body, problems):
        if not isinstance(body.get("model"), str) or not body["model"]:
            problems.append("model is required")
        for i, m in enumerate(body.get("messages") or []):
            if m.get("role") not in {"system", "user", "assistant", "tool"}:
                problems.append(f"messages[{i}].role '{m.get('role')}' is not valid")
            for j, call in enumerate(m.get("tool_calls") or []):
                if not isinstance(call.get("function", {}).get("arguments"), dict):
                    problems.append(f"messages[{i}].tool_calls[{j}].function.arguments must be an object")
            if m.get("role") == "tool" and not isinstance(m.get("tool_name"), str):
                problems.append(f"messages[{i}].tool_name is required on a tool result")
        if "options" in body and not isinstance(body["options"], dict):
            problems.append("options must be an object")
        for i, tool in enumerate(body.get("tools") or []):
            self.check_schema(tool.get("function", {}).get("parameters"), f"tools[{i}].function.parameters", problems)
        return None

    def check_anthropic(self, headers, body, problems):
        if self.anthropic_key and headers.get("x-api-key", [""])[0] != self.anthropic_key:
            return 401
        if headers.get("anthropic-version", [""])[0] != "2023-06-01":
            problems.append("anthropic-version header must be 2023-06-01")
        if not isinstance(body.get("model"), str) or not body["model"]:
            problems.append("model is required")
        if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
            problems.append("max_tokens is required and must be a positive integer")
        if "system" in body and not isinstance(body["system"], str):
            problems.append("system must be a string")
        if "temperature" in body and not (0 <= body["temperature"] <= 1):
            problems.append("temperature must be from 0 to 1")
        messages = body.get("messages") or []
        if not messages or messages[0].get("role") != "user":
            problems.append("messages must start with a user turn")
        uses = set()
        for i, m in enumerate(messages):
            if m.get("role") not in {"user", "assistant"}:
                problems.append(f"messages[{i}].role must be user or assistant")
            if i > 0 and m.get("role") == messages[i - 1].get("role"):
                problems.append(f"messages[{i}] has the same role as the turn before it")
            content = m.get("content")
            blocks = content if isinstance(content, list) else []
            for block in blocks:
                if block.get("type") == "tool_use":
                    uses.add(block.get("id"))
                    if not TOOL_NAME_ANTHROPIC.match(block.get("name", "")):
                        problems.append(f"messages[{i}] tool_use name '{block.get('name')}' is not a valid tool name")
                if block.get("type") == "tool_result" and block.get("tool_use_id") not in uses:
                    problems.append(f"messages[{i}] tool_result does not answer a tool_use before it")
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") == "tool" and not TOOL_NAME_ANTHROPIC.match(choice.get("name", "")):
            problems.append(f"tool_choice.tool.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
        for i, tool in enumerate(body.get("tools") or []):
            if not TOOL_NAME_ANTHROPIC.match(tool.get("name", "")):
                problems.append(f"tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
            self.check_schema(tool.get("input_schema"), f"tools[{i}].input_schema", problems)
        return None

    # --- answers ---

    @staticmethod
    def error_body(kind, status, message, problems):
        """Each provider's documented error shape: OpenAI {error: {message, type, param, code}}, Anthropic
        {type: error, error: {type, message}}, Ollama {error: "..."}."""
        if kind == "ollama":
            return {"error": message}
        if kind == "openai":
            param = None
            m = re.match(r"Invalid '([^']+)'", problems[0]) if problems else None
            if m:
                param = m.group(1)
            kinds = {400: ("invalid_request_error", "invalid_value" if param else None), 429: ("requests", "rate_limit_exceeded")}
            error_type, code = kinds.get(status, ("server_error", None))
            return {"error": {"message": message, "type": error_type, "param": param, "code": code}}
        types = {400: "invalid_request_error", 429: "rate_limit_error", 529: "overloaded_error"}
        return {"type": "error", "error": {"type": types.get(status, "api_error"), "message": message}}

    def call_id(self):
        self.counter += 1
        return f"call_{self.counter}"

    def openai_answer(self, reply, model):
        message = {"role": "assistant", "content": reply.get("text", "")}
        finish = "stop"
        if reply.get("refusal"):
            message = {"role": "assistant", "content": None, "refusal": reply["refusal"]}
        if reply.get("tool_calls"):
            message["content"] = reply.get("text") or None
            message["tool_calls"] = [{"id": self.call_id(), "type": "function",
                                      "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))}}
                                     for c in reply["tool_calls"]]
            finish = "tool_calls"
        return {"id": "chatcmpl-standin", "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    def ollama_answer(self, reply, model):
        message = {"role": "assistant", "content": reply.get("text", "")}
        if reply.get("tool_calls"):
            message["tool_calls"] = [{"function": {"name": c["name"], "arguments": c.get("arguments", {})}} for c in reply["tool_calls"]]
        return {"model": model, "created_at": "2026-01-01T00:00:00Z", "message": message, "done": True, "done_reason": "stop"}

    def anthropic_answer(self, reply, model):
        content = []
        if reply.get("text"):
            content.append({"type": "text", "text": reply["text"]})
        for c in reply.get("tool_calls") or []:
            content.append({"type": "tool_use", "id": "toolu_" + self.call_id(), "name": c["name"], "input": c.get("arguments", {})})
        stop = "refusal" if reply.get("refusal") else ("tool_use" if reply.get("tool_calls") else "end_turn")
        return {"id": "msg_standin", "type": "message", "role": "assistant", "model": model, "content": content,
                "stop_reason": stop,
                "usage": {"input_tokens": 1, "output_tokens": 1}}

    async def stream(self, send, kind, reply, model):
        text = reply.get("text", "")
        pieces = [text[i:i + 4] for i in range(0, len(text), 4)] or [""]
        content_type = b"application/x-ndjson" if kind == "ollama" else b"text/event-stream"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]})
        chunks = []
        if kind == "openai":
            for p in pieces:
                chunks.append("data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}) + "\n\n")
            chunks.append("data: " + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}) + "\n\n")
            chunks.append("data: [DONE]\n\n")
        elif kind == "ollama":
            for p in pieces:
                chunks.append(json.dumps({"model": model, "message": {"role": "assistant", "content": p}, "done": False}) + "\n")
            chunks.append(json.dumps({"model": model, "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop"}) + "\n")
        else:
            chunks.append("event: message_start\ndata: " + json.dumps({"type": "message_start", "message": {"id": "msg_standin", "content": []}}) + "\n\n")
            chunks.append("event: content_block_start\ndata: " + json.dumps({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}) + "\n\n")
            for p in pieces:
                chunks.append("event: content_block_delta\ndata: " + json.dumps({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}) + "\n\n")
            chunks.append("event: message_stop\ndata: " + json.dumps({"type": "message_stop"}) + "\n\n")
        hold = reply.get("hold_after")
        sent_pieces = 0
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk.encode(), "more_body": True})
            sent_pieces += 1
            # A test holds the stream here (POST /control/release) to see pieces arrive before the end.
            if hold is not None and sent_pieces == hold:
                await self.release.wait()
            await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b""})

    async def api(self, scope, receive, send):
        path = scope["path"]
        headers = common.header_map(scope)
        raw = await common.read_body(receive)
        kinds = {"/v1/chat/completions": "openai", "/api/chat": "ollama", "/v1/messages": "anthropic"}
        kind = kinds.get(path)
        if scope["method"] != "POST" or kind is None:
            return await common.respond(send, 404, {"error": f"no such route {scope['method']} {path}"})
        problems = []
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
            problems.append("the body is not JSON")
        if headers.get("content-type", [""])[0].split(";")[0] != "application/json":
            problems.append("content-type must be application/json")
        status = getattr(self, "check_" + kind)(headers, body, problems)
        self.requests.append({"api": kind, "path": path, "headers": {k: v[0] for k, v in headers.items()}, "body": body,
                              "violations": problems, "unauthorized": status == 401,
                              "received_ms": time.monotonic() * 1000, "scheme": scope.get("scheme"),
                              "http_version": scope.get("http_version")})
        if status == 401:
            error = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}} if kind == "openai" else \
                {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
            return await common.respond(send, 401, error)
        if problems:
            message = "; ".join(problems)
            return await common.respond(send, 400, self.error_body(kind, 400, message, problems))
        reply = self.next_reply(body, kind)
        if reply.get("delay_ms"):
            await asyncio.sleep(reply["delay_ms"] / 1000)
        if reply.get("hold"):
            await self.release.wait()
        if reply.get("status"):
            message = reply.get("error", "scripted failure")
            extra = []
            if "retry_after" in reply:
                extra.append(("retry-after", str(reply["retry_after"])))
            if "retry_after_ms" in reply:
                extra.append(("retry-after-ms", str(reply["retry_after_ms"])))
            return await common.respond(send, reply["status"], self.error_body(kind, reply["status"], message, []), headers=extra)
        model = body.get("model", "")
        if body.get("stream"):
            return await self.stream(send, kind, reply, model)
        answer = getattr(self, kind + "_answer")(reply, model)
        await common.respond(send, 200, answer)

    async def __call__(self, scope, receive, send):
        if await common.lifespan(scope, receive, send):
            return
        if scope["type"] != "http":
            return
        if scope["path"].startswith("/control/"):
            raw = await common.read_body(receive)
            data = json.loads(raw) if raw else {}
            if scope["path"] == "/control/release":
                self.release.set()
                return await common.respond(send, 200, {"ok": True})
            if not await common.shared_control(self, scope["path"], data, send):
                await common.respond(send, 404, {"error": "no such control route"})
            return
        await self.api(scope, receive, send)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tls-port", type=int, required=True)
    parser.add_argument("--control-port", type=int, required=True)
    parser.add_argument("--cert-dir", required=True)
    parser.add_argument("--openai-key", default="")
    parser.add_argument("--anthropic-key", default="")
    args = parser.parse_args()
    common.serve(LLM(args.openai_key, args.anthropic_key), args.tls_port, args.control_port, args.cert_dir)
