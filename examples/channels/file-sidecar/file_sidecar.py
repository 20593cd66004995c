#!/usr/bin/env python3
"""A Soulacy sidecar (External Channel Protocol v1) whose "platform" is two files. Python stdlib only.

Outbound: each `send` frame is appended to the outbox as one JSON line {"id", "to", "text"} and fsynced; then,
because this sidecar declares the `ack` capability, it answers `ack {id}` (or `nack {id, retry_after, reason}`
when the outbox cannot be written). A send id seen before is acked again without a second line (the gateway
delivers at least once; this keeps the outbox exactly once).

Inbound: every line appended to the inbox becomes a `message` frame. A line is `CHAT_ID<TAB>TEXT`, or just
TEXT for the chat FILE_SIDECAR_CHAT. The inbox is read from its end at start (older lines are not replayed).

Environment:
  FILE_SIDECAR_OUTBOX  the file sends go to (default: outbox.ndjson in the working directory)
  FILE_SIDECAR_INBOX   the file to watch for inbound lines (default: inbox.txt in the working directory)
  FILE_SIDECAR_CHAT    the chat id of inbox lines without a tab (default: inbox)
  FILE_SIDECAR_NAME    the integration name sent in hello (default: file)

Gateway config (channels.sidecars):
  - channel: notes
    command: python3
    args: [examples/channels/file-sidecar/file_sidecar.py]
    env: {FILE_SIDECAR_OUTBOX: /var/lib/soulacy/notes/outbox.ndjson, FILE_SIDECAR_INBOX: /var/lib/soulacy/notes/inbox.txt}
    agent_id: notes-assistant   # inbox lines run this agent; its replies come back as sends to the line's chat

Check it: soulacy channel-check -- python3 examples/channels/file-sidecar/file_sidecar.py
"""
import json
import os
import sys
import threading
import time
import uuid

OUTBOX = os.environ.get("FILE_SIDECAR_OUTBOX", "outbox.ndjson")
INBOX = os.environ.get("FILE_SIDECAR_INBOX", "inbox.txt")
DEFAULT_CHAT = os.environ.get("FILE_SIDECAR_CHAT", "inbox")
NAME = os.environ.get("FILE_SIDECAR_NAME", "file")

_out_lock = threading.Lock()
_stopping = threading.Event()


def emit(frame):
    """Writes one frame as one line on stdout (the only thing stdout ever carries)."""
    line = json.dumps(frame, ensure_ascii=False, separators=(",", ":")) + "\n"
    with _out_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def log(message):
    """Debug lines go to stderr, which the gateway logs; message text never goes there."""
    sys.stderr.write("file-sidecar: " + message + "\n")
    sys.stderr.flush()


def delivered_ids():
    ids = set()
    try:
        with open(OUTBOX, encoding="utf-8") as f:
            for line in f:
                try:
                    ids.add(json.loads(line).get("id"))
                except ValueError:
                    pass
    except FileNotFoundError:
        pass
    return ids


def handle_send(frame, seen):
    send_id = frame.get("id")
    to, text = frame.get("to") or "", frame.get("text") or ""
    if send_id is not None and send_id in seen:
        emit({"type": "ack", "id": send_id})
        return
    try:
        with open(OUTBOX, "a", encoding="utf-8") as f:
            f.write(json.dumps({"id": send_id, "to": to, "text": text}, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as error:
        log("cannot write the outbox: %s" % error.strerror)
        if send_id is not None:
            emit({"type": "nack", "id": send_id, "retry_after": 5, "reason": "cannot write the outbox: %s" % error.strerror})
        return
    if send_id is not None:
        seen.add(send_id)
        emit({"type": "ack", "id": send_id})
    log("delivered a send to %s (%d bytes)" % (to, len(text.encode("utf-8"))))


def watch_inbox():
    """Turns lines appended to the inbox into message frames."""
    position = os.path.getsize(INBOX) if os.path.exists(INBOX) else 0
    pending = b""
    while not _stopping.is_set():
        try:
            size = os.path.getsize(INBOX)
        except OSError:
            size = 0
        if size < position:  # truncated or replaced: start over
            position, pending = 0, b""
        if size > position:
            with open(INBOX, "rb") as f:
                f.seek(position)
                data = f.read(size - position)
            position += len(data)
            pending += data
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace").rstrip("\r")
                if not line.strip():
                    continue
                chat, _, text = line.partition("\t") if "\t" in line else (DEFAULT_CHAT, "", line)
                emit({"type": "message", "id": str(uuid.uuid4()), "chat_id": chat, "sender_id": chat,
                      "text": text, "timestamp": int(time.time()), "is_group": False})
        _stopping.wait(0.2)


def main():
    emit({"type": "hello", "protocol": 1, "name": NAME, "capabilities": ["send", "ack"]})
    seen = delivered_ids()
    watcher = None
    for raw in sys.stdin:
        try:
            frame = json.loads(raw)
        except ValueError:
            log("skipped a line that is not JSON")
            continue
        if not isinstance(frame, dict):
            continue
        kind = frame.get("type")
        if kind == "hello_ack":
            emit({"type": "status", "connected": True, "detail": "writing to %s, reading %s" % (OUTBOX, INBOX)})
            if watcher is None:
                watcher = threading.Thread(target=watch_inbox, daemon=True)
                watcher.start()
        elif kind == "send":
            handle_send(frame, seen)
        elif kind == "shutdown":
            break
        # Any other type is ignored: that is how the protocol grows.
    _stopping.set()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
