"""Shared parts of the chat-channel stand-ins (Telegram, Slack, Discord, WhatsApp, Teams/Google Chat, webhooks, SMTP).

They follow the push stand-ins' conventions (standin_common): started as
    python3 <script> --tls-port P --control-port C --cert-dir DIR [service options]
with PYTHONPATH=Tests/StandIns; the service answers on https://127.0.0.1:P with the self-signed certificate that
`ensure_certificate(DIR)` keeps in DIR/standin-cert.pem; the control port is plain HTTP on 127.0.0.1:C. The Swift side
(StandInProcess) waits until GET /control/health answers {"ok": true, "pid": <its child's pid>}; each stand-in also
prints one ready line, `READY <name> tls=<P> control=<C> pid=<pid>`, on stdout once both ports listen, for callers
that prefer to wait on output.

What is kept is bounded: the last MAX_RECORDS requests (oldest dropped, `dropped` counts them), each body kept up to
MAX_KEPT_BODY bytes (`body_length` is the full length), request bodies over MAX_BODY bytes are refused with 413.
SIGTERM and SIGINT stop the server gracefully and the process exits 0.

Shared control routes (every HTTP stand-in here):
    GET  /control/health    -> {"ok": true, "pid": N}
    GET  /control/requests  -> {"requests": [record...], "dropped": N}
    POST /control/script    {"responses": [step...]} -> {"queued": N}
         a step is consumed by the next request that passed the service's own checks (auth, shape); it holds
         {"status": 429, "retry_after": 3}           the service's own rate-limit answer, in its own shape
         {"status": 500}  / {"status": 503}          a server error in the service's shape
         {"error": "<service error name>"}           a named documented error (see each stand-in)
         {"hang": true}                              never answer (until the client gives up / the stand-in stops)
         {"delay_ms": 1500}                          answer normally after a pause
    POST /control/delay     {"ms": N}               every answer waits N ms first
    POST /control/reset     -> {"ok": true}         forget requests, script, delay and injected state
"""
import asyncio
import collections
import json
import os
import signal
import time

import standin_common as common

MAX_RECORDS = 1000
MAX_BODY = 4 * 1024 * 1024
MAX_KEPT_BODY = 256 * 1024


class Records:
    """A bounded log of what arrived."""

    def __init__(self, limit=MAX_RECORDS):
        self.items = collections.deque(maxlen=limit)
        self.dropped = 0

    def append(self, record):
        if len(self.items) == self.items.maxlen:
            self.dropped += 1
        self.items.append(record)
        return record

    def list(self):
        return list(self.items)

    def clear(self):
        self.items.clear()
        self.dropped = 0


def record_for(scope, headers, body, **extra):
    text = body[:MAX_KEPT_BODY].decode("utf-8", "replace")
    record = {
        "time": time.time(),
        "method": scope.get("method"),
        "path": scope.get("path"),
        "query": scope.get("query_string", b"").decode("latin-1"),
        "headers": {k: v[0] for k, v in headers.items()},
        "body": text,
        "body_length": len(body),
        "http_version": scope.get("http_version"),
    }
    record.update(extra)
    return record


class ChannelStandIn:
    """Base for one HTTP stand-in: records, script, delay and the control port. Subclasses define `service`."""

    name = "standin"

    def __init__(self):
        self.requests = Records()
        self.script = []
        self.delay = 0.0
        self.hanging = set()
        self.reset_state()

    def reset_state(self):
        """Subclasses reset their injected state here."""

    def reset(self):
        self.requests.clear()
        self.script = []
        self.delay = 0.0
        self.reset_state()

    def next_step(self):
        return self.script.pop(0) if self.script else None

    async def pause(self, step=None):
        """The configured delay, a step's delay, or a hang (returns only when cancelled)."""
        if self.delay:
            await asyncio.sleep(self.delay)
        if step and step.get("delay_ms"):
            await asyncio.sleep(float(step["delay_ms"]) / 1000)
        if step and step.get("hang"):
            event = asyncio.Event()
            self.hanging.add(event)
            try:
                await event.wait()
            finally:
                self.hanging.discard(event)

    async def control(self, scope, receive, send):
        path = scope["path"]
        body = await common.read_body(receive)
        try:
            data = json.loads(body) if body else {}
        except json.JSONDecodeError:
            return await common.respond(send, 400, {"error": "control bodies are JSON"})
        if path == "/control/health":
            return await common.respond(send, 200, {"ok": True, "pid": os.getpid(), "service": self.name})
        if path == "/control/requests":
            return await common.respond(send, 200, {"requests": self.requests.list(), "dropped": self.requests.dropped})
        if path == "/control/script":
            self.script.extend(data.get("responses", []))
            return await common.respond(send, 200, {"queued": len(self.script)})
        if path == "/control/delay":
            self.delay = float(data.get("ms", 0)) / 1000
            return await common.respond(send, 200, {"ok": True})
        if path == "/control/reset":
            self.reset()
            for event in list(self.hanging):
                event.set()
            return await common.respond(send, 200, {"ok": True})
        handled = await self.extra_control(path, scope.get("method"), data, send)
        if handled is False or handled is None:
            await common.respond(send, 404, {"error": f"no control route {path}"})

    async def extra_control(self, path, method, data, send):
        return False

    async def __call__(self, scope, receive, send):
        if await common.lifespan(scope, receive, send):
            return
        if scope["type"] != "http":
            return
        if scope["path"].startswith("/control/") and scope.get("scheme") != "https":
            return await self.control(scope, receive, send)
        if scope.get("scheme") != "https":
            await common.read_body(receive)
            return await common.respond(send, 404, {"error": "the control port serves /control/ only"})
        headers = common.header_map(scope)
        length = headers.get("content-length", ["0"])[0]
        if length.isdigit() and int(length) > MAX_BODY:
            return await common.respond(send, 413, {"error": "request body too large for the stand-in"})
        body = await common.read_body(receive, limit=MAX_BODY)
        if len(body) > MAX_BODY:
            return await common.respond(send, 413, {"error": "request body too large for the stand-in"})
        await self.service(scope, headers, body, send)

    async def service(self, scope, headers, body, send):
        raise NotImplementedError


async def respond_text(send, status, text, content_type="text/plain; charset=utf-8", headers=()):
    data = text.encode() if isinstance(text, str) else text
    hdrs = [(b"content-type", content_type.encode()), (b"content-length", str(len(data)).encode())]
    hdrs += [(k.encode(), str(v).encode()) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": data})


async def respond_json(send, status, payload, headers=()):
    await common.respond(send, status, payload, [(k, str(v)) for k, v in headers])


def print_ready(name, tls_port, control_port, extra=""):
    print(f"READY {name} tls={tls_port} control={control_port} pid={os.getpid()}{(' ' + extra) if extra else ''}", flush=True)


def hypercorn_config(tls_port, control_port, cert_dir):
    from hypercorn.config import Config

    cert, key = common.ensure_certificate(cert_dir)
    config = Config()
    if tls_port:
        config.bind = [f"127.0.0.1:{tls_port}"]
        config.insecure_bind = [f"127.0.0.1:{control_port}"]
        config.certfile = cert
        config.keyfile = key
    else:  # only the control port (the SMTP and IMAP stand-ins serve their own protocol on the TLS port)
        config.bind = [f"127.0.0.1:{control_port}"]
    config.alpn_protocols = ["h2", "http/1.1"]
    config.accesslog = None
    config.errorlog = "-"
    config.loglevel = "WARNING"
    config.keep_alive_timeout = 300
    config.graceful_timeout = 1
    config.h2_max_concurrent_streams = 1000
    return config


def shutdown_event():
    """An event set by SIGTERM/SIGINT, on the running loop."""
    event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, event.set)
    return event


async def serve_async(app, tls_port, control_port, cert_dir, on_ready=None, stopping=None):
    from hypercorn.asyncio import serve as hypercorn_serve

    config = hypercorn_config(tls_port, control_port, cert_dir)
    stop = stopping or shutdown_event()
    server = asyncio.ensure_future(hypercorn_serve(app, config, shutdown_trigger=stop.wait))
    # hypercorn binds before it serves; the ready line waits until both ports accept a connection.
    for _ in range(200):
        if server.done():
            break
        if await _listening(control_port) and (not tls_port or await _listening(tls_port)):
            if on_ready:
                on_ready()
            break
        await asyncio.sleep(0.05)
    await server


async def _listening(port):
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
        return True
    except OSError:
        return False


def serve(app, tls_port, control_port, cert_dir):
    """Serves `app` until SIGTERM/SIGINT; prints the ready line; exits 0."""
    asyncio.run(serve_async(app, tls_port, control_port, cert_dir, on_ready=lambda: print_ready(app.name, tls_port, control_port)))
    return 0


def add_standard_arguments(parser):
    parser.add_argument("--tls-port", type=int, required=True)
    parser.add_argument("--control-port", type=int, required=True)
    parser.add_argument("--cert-dir", required=True)
