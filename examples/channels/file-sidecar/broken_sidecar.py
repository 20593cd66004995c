#!/usr/bin/env python3
"""A deliberately broken sidecar, for `soulacy channel-check` to flag: it never sends hello, prints log
text and a half JSON object on stdout (which must carry nothing but frames), and ignores shutdown.

  soulacy channel-check -- python3 examples/channels/file-sidecar/broken_sidecar.py    # exits 1
"""
import signal
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("starting broken sidecar...", flush=True)      # not a frame
print('{"type": "status", "connected": tr', flush=True)  # not JSON
for line in sys.stdin:
    print("got: " + line.strip()[:20], flush=True)   # echoes garbage instead of answering
# stdin closed (shutdown): linger past the grace instead of exiting
time.sleep(30)
