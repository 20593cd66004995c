#!/usr/bin/env python3
"""A sidecar (External Channel Protocol v1) whose behaviour a test chooses, for the supervisor's tests.

It records every frame it receives, one JSON line each, in SIDECAR_RECORD (and its pid first, as
{"type": "_pid", "pid": N}), so a test can read what the gateway sent it.

SIDECAR_MODE is a comma-separated list of:
  protocol=N       the protocol version in hello (default 1)
  acks             declare the ack capability and ack every send
  nack             declare acks, answer every send with nack {retry_after: 7, reason: "platform says slow down"}
  silent           declare acks, never answer
  no-hello         never send hello
  bad-hello        hello with protocol 0
  unknown          send frames of unknown types (before and after the handshake)
  message          after hello_ack, send one message frame (chat c1, text "hi there", sender Ann, a group)
  big-line         after hello_ack, write a 2 MiB line, then a status frame
  garbage          after hello_ack, write lines that are not frames, then a status frame
  flood            after hello_ack, write 20000 lines that are not frames, then a status frame
  deep             after hello_ack, write a message frame whose text is an object nested 10,000 levels, then a status frame
  stderr           write lines on stderr ("scripted sidecar: got a send for <to>")
  ignore-shutdown  ignore SIGTERM, shutdown and the end of stdin
  exit-on-send     exit with status 3 on the first send
"""
import json
import os
import signal
import sys
import time

MODES = [m.strip() for m in os.environ.get("SIDECAR_MODE", "").split(",") if m.strip()]
RECORD = os.environ.get("SIDECAR_RECORD")


def mode(name):
    return name in MODES


def option(name, default):
    for m in MODES:
        if m.startswith(name + "="):
            return m.split("=", 1)[1]
    return default


def record(frame):
    if RECORD:
        with open(RECORD, "a") as f:
            f.write(json.dumps(frame) + "\n")


def emit(frame):
    sys.stdout.write(json.dumps(frame) + "\n")
    sys.stdout.flush()


def raw(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


record({"type": "_pid", "pid": os.getpid()})
if mode("ignore-shutdown"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
acks = mode("acks") or mode("nack") or mode("silent")
if mode("unknown"):
    emit({"type": "x-telemetry", "cpu": 3})
if not mode("no-hello"):
    version = 0 if mode("bad-hello") else int(option("protocol", "1"))
    emit({"type": "hello", "protocol": version, "name": "scripted", "capabilities": ["send", "ack"] if acks else ["send"]})

for line in sys.stdin:
    frame = json.loads(line)
    record(frame)
    kind = frame.get("type")
    if kind == "hello_ack":
        if mode("unknown"):
            emit({"type": "x-typing", "chat_id": "c1"})
        if mode("message"):
            emit({"type": "message", "id": "m1", "chat_id": "c1", "sender_id": "u7", "sender_name": "Ann",
                  "text": "hi there", "timestamp": 1700000000, "is_group": True})
        if mode("big-line"):
            raw('{"type":"status","detail":"' + "x" * (2 * 1024 * 1024) + '"}')
        if mode("garbage"):
            raw("this is not json")
            raw('{"type": "status", "connected": tr')
            raw("[1, 2, 3]")
            raw('{"no_type": true}')
        if mode("deep"):
            raw('{"type":"message","id":"m-deep","chat_id":"c1","text":' + '{"a":' * 10000 + '1' + '}' * 10000 + '}')
        if mode("flood"):
            chunk = "\n".join("garbage line %d" % i for i in range(1000))
            for _ in range(20):
                raw(chunk)
        emit({"type": "status", "connected": True, "detail": "scripted sidecar ready"})
    elif kind == "send":
        if mode("stderr"):
            sys.stderr.write("scripted sidecar: got a send for %s\n" % frame.get("to"))
            sys.stderr.flush()
        if mode("exit-on-send"):
            sys.exit(3)
        if mode("nack"):
            emit({"type": "nack", "id": frame.get("id"), "retry_after": 7, "reason": "platform says slow down"})
        elif mode("acks"):
            emit({"type": "ack", "id": frame.get("id"), "remote_id": "r-" + str(frame.get("id"))})
    elif kind == "shutdown" and not mode("ignore-shutdown"):
        sys.exit(0)

if mode("ignore-shutdown"):
    while True:
        time.sleep(60)
