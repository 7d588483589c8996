#!/usr/bin/env python3
"""serve_probe.py — raw-socket probes of `kvbound serve` that curl cannot
make (used by tests/test_serve_cli.sh). Each prints one line, "ok ..." or
"FAIL ...", and exits 0 or 1.

  serve_probe.py HOST PORT truncated     body shorter than Content-Length, then close
  serve_probe.py HOST PORT slow          a client that sends one byte per 50 ms, while
                                         another request is answered at once
  serve_probe.py HOST PORT many N        N connections at once, each a request
  serve_probe.py HOST PORT badutf8       a body with invalid UTF-8 -> 400
  serve_probe.py HOST PORT disconnect    a stream dropped after its first event
"""
import json
import socket
import sys
import threading
import time


def request(host, port, method, path, body=b"", headers=None, timeout=30):
    s = socket.create_connection((host, port), timeout=timeout)
    h = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
    for k, v in (headers or {}).items():
        h += f"{k}: {v}\r\n"
    s.sendall(h.encode() + b"\r\n" + body)
    return read_response(s)


def read_response(s):
    """Reads until the server closes; returns (status, raw response)."""
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.") else 0
    return status, data


def health(host, port):
    st, _ = request(host, port, "GET", "/health", timeout=10)
    return st == 200


def main():
    host, port, what = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if what == "truncated":
        s = socket.create_connection((host, port), timeout=10)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 500\r\nContent-Type: application/json\r\n\r\n{\"prompt\": \"Once")
        s.close()
        time.sleep(0.3)
        ok = health(host, port)
        # and a body cut short but complete per its (small) Content-Length: bad JSON -> 400
        st, _ = request(host, port, "POST", "/v1/completions", b'{"prompt": "Once upon')
        print(("ok" if ok and st == 400 else "FAIL") + f" truncated: health after a cut body {ok}, short JSON -> {st}")
        return 0 if ok and st == 400 else 1
    if what == "slow":
        res = {}

        def slow():
            s = socket.create_connection((host, port), timeout=30)
            body = b'{"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0}'
            head = f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            for b in head + body:
                s.sendall(bytes([b]))
                time.sleep(0.05)
            res["slow"], _ = read_response(s)

        t = threading.Thread(target=slow)
        t.start()
        time.sleep(0.5)
        t0 = time.time()
        fast = health(host, port)
        dt = time.time() - t0
        t.join(120)
        ok = fast and dt < 2 and res.get("slow") == 200
        print(("ok" if ok else "FAIL") + f" slow: other request answered in {dt:.2f} s while a slow client trickled; the slow one got {res.get('slow')}")
        return 0 if ok else 1
    if what == "many":
        n = int(sys.argv[4])
        out = []
        lock = threading.Lock()

        def one(i):
            try:
                body = json.dumps({"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}).encode()
                st, _ = request(host, port, "POST", "/v1/completions", body, timeout=120)
            except OSError as e:
                st = f"error {e.__class__.__name__}"
            with lock:
                out.append(st)

        ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(180)
        good = sum(1 for s in out if s == 200)
        busy = sum(1 for s in out if s in (429, 503))
        other = [s for s in out if s not in (200, 429, 503)]
        ok = health(host, port) and not other and good >= 1 and good + busy == n
        print(("ok" if ok else "FAIL") + f" many: {n} at once: {good} answered, {busy} told to retry, other {other[:5]}")
        return 0 if ok else 1
    if what == "badutf8":
        st, data = request(host, port, "POST", "/v1/completions", b'{"prompt": "caf\xc3\x28 \xff"}')
        ok = st == 400 and b"UTF-8" in data
        print(("ok" if ok else "FAIL") + f" badutf8: {st}")
        return 0 if ok else 1
    if what == "disconnect":
        s = socket.create_connection((host, port), timeout=30)
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 16000, "stream": True, "kv_budget": 64}).encode()
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        first = s.recv(4096)
        s.close()
        ok = first.startswith(b"HTTP/1.1 200")
        print(("ok" if ok else "FAIL") + " disconnect: dropped a stream after its first bytes")
        return 0 if ok else 1
    print(f"FAIL unknown probe {what}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
