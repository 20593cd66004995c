#!/usr/bin/env python3
"""The benchmark's sidecar (Soulacy's External Channel Protocol v1): it says hello with the `ack` capability and
answers every `send` with `ack {id}` at once, reading stdin in large chunks and writing the acks of a chunk in one
write, so it costs the gateway (or the plain writer beside it) as little as a sidecar can. Python stdlib only."""
import json
import os
import sys

out = sys.stdout.buffer
out.write(b'{"type":"hello","protocol":1,"name":"bench","capabilities":["ack"]}\n')
out.flush()
pending = b""
while True:
    chunk = os.read(0, 1 << 20)
    if not chunk:
        break
    pending += chunk
    lines = pending.split(b"\n")
    pending = lines.pop()
    acks = []
    for line in lines:
        if not line:
            continue
        try:
            frame = json.loads(line)
        except ValueError:
            continue
        kind = frame.get("type")
        if kind == "send":
            acks.append(b'{"type":"ack","id":' + json.dumps(frame.get("id")).encode() + b"}\n")
        elif kind == "shutdown":
            sys.exit(0)
    if acks:
        out.write(b"".join(acks))
        out.flush()
