"""Opens N connections from 127.0.0.2 that send half a request head, checks that a client on 127.0.0.1 is still
served, then that every slow connection was closed by the server after its receive deadline. Run in its own
process so the test process never holds a thousand descriptors. Prints 'served=1 open_after=K'."""
import socket, sys, time
port, count, wait = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
slow = []
for _ in range(count):
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    s.connect(("127.0.0.1", port))
    s.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n")
    slow.append(s)
served = 0
deadline = time.time() + 5
while time.time() < deadline and not served:
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=1)
        c.sendall(b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        served = int(c.recv(64).startswith(b"HTTP/1.1 200"))
        c.close()
    except OSError:
        time.sleep(0.2)
time.sleep(wait)


def open_count():
    still_open = 0
    for s in slow:
        s.setblocking(False)
        try:
            if s.recv(1) != b"":
                still_open += 1
        except BlockingIOError:
            still_open += 1
        except OSError:
            pass
    return still_open


# The server closes them at its deadline; a loaded machine may run its timer late, so look again for a while
# (a server that never closes them still fails).
still_open = open_count()
give_up = time.time() + 30
while still_open and time.time() < give_up:
    time.sleep(0.2)
    still_open = open_count()
print(f"served={served} open_after={still_open}")
