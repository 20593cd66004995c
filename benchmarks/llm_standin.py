#!/usr/bin/env python3
"""A scripted OpenAI-compatible model for the runner-overhead benchmark: POST /v1/chat/completions answers
`REPLY` (streamed as server-sent events when the request asks for a stream, as OpenAI documents it:
https://platform.openai.com/docs/api-reference/chat/create), a few tokens 2 ms apart; the last token, the finish
and [DONE] leave in one write. Just before that write the wall clock is noted: GET /times answers those instants
(unix seconds, one per request, in order), the start of what the benchmark measures.

Usage: llm_standin.py PORT   (plain HTTP/1.1 on 127.0.0.1, as vLLM and llama.cpp serve)"""
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPLY = ["The ", "run ", "is ", "done: ", "three ", "items ", "need ", "your ", "review."]
times = []
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        # As API servers do: without it the last small write waits for the client's delayed ACK (40 ms).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def answer(self, status, body, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/times":
            with lock:
                self.answer(200, json.dumps(times).encode())
        else:
            self.answer(404, b'{"error": "no such route"}')

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/v1/chat/completions":
            return self.answer(404, b'{"error": "no such route"}')
        model = request.get("model", "bench-model")
        if not request.get("stream"):
            body = json.dumps({"id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": model,
                               "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(REPLY)}, "finish_reason": "stop"}],
                               "usage": {"prompt_tokens": 1, "completion_tokens": len(REPLY), "total_tokens": 1 + len(REPLY)}}).encode()
            with lock:
                times.append(time.time())
            return self.answer(200, body)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(payload):
            data = ("data: " + (payload if isinstance(payload, str) else json.dumps(payload)) + "\n\n").encode()
            return b"%x\r\n%s\r\n" % (len(data), data)

        def delta(text):
            return {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": model,
                    "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
        for token in REPLY[:-1]:
            self.wfile.write(event(delta(token)))
            self.wfile.flush()
            time.sleep(0.002)
        last = event(delta(REPLY[-1])) + event({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": model,
                                                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}) + event("[DONE]") + b"0\r\n\r\n"
        with lock:
            times.append(time.time())
        self.wfile.write(last)
        self.wfile.flush()


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    server.serve_forever()
