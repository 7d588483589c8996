#!/usr/bin/env python3
"""serve_faults.py — raw-socket probes of the faults a probe found in
`kvbound serve` (used by tests/test_serve_faults_cli.sh). Each prints one
line, "ok ..." or "FAIL ...", and exits 0 or 1.

  serve_faults.py HOST PORT keepalive SECONDS   6 keep-alive clients asking for
                                                sessions (GET, DELETE, map) until
                                                the server goes; prints how many
                                                answers came (always ok)
  serve_faults.py HOST PORT slowloris N TIMEOUT N connections that send half a
                                                header and stop: a request from
                                                another address is answered at once,
                                                and after TIMEOUT one from theirs too
  serve_faults.py HOST PORT halfclose           a request, then shutdown(SHUT_WR)
  serve_faults.py HOST PORT closed              a long non-streamed request sent and
                                                closed after 0.5 s (--parallel 1): its
                                                slot comes back, a bystander is served
  serve_faults.py HOST PORT framing MAXBODY     two Content-Length, Content-Length
                                                with chunked, Expect: 100-continue
                                                over MAXBODY
  serve_faults.py HOST PORT conncap N per-ip|all  N keep-alive connections (from 127.0.0.1,
                                                or from .1 and .2 under "all") are
                                                answered; one more (from .1, or .3)
                                                is closed unanswered; per-ip: another
                                                address is answered and
                                                kvbound_connections_refused_total is
                                                1; once one of the N closes, a new one
                                                is answered
  serve_faults.py HOST PORT keepdeadline TIMEOUT  a keep-alive connection asking every
                                                0.6 x TIMEOUT (one answer a completion
                                                of about TIMEOUT) is answered 5
                                                times, then idle is closed after TIMEOUT
  serve_faults.py HOST PORT redisproxy LISTEN ARM SECONDS
                                                a TCP proxy on 127.0.0.1:LISTEN to the
                                                Redis at HOST:PORT; once the file ARM
                                                exists, the reply to the first session
                                                write (EVAL of the script that HSETs)
                                                is dropped: both ends closed, and new
                                                connections refused for SECONDS (0: a
                                                new connection is taken at once, so the
                                                write sent again reaches Redis); prints
                                                a line when it drops
"""
import json
import socket
import sys
import threading
import time


def read_all(s, limit=30):
    s.settimeout(limit)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    s.close()
    return data


def status_of(data):
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.") else 0


def final_status(data):
    """The status of the final answer: interim 1xx answers skipped, as a client must (RFC 9110 15.2)."""
    while 100 <= status_of(data) < 200 and b"\r\n\r\n" in data:
        data = data.split(b"\r\n\r\n", 1)[1]
    return status_of(data)


def raw(host, port, head, body=b"", src=None, timeout=30):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    if src:
        s.bind((src, 0))
    s.connect((host, port))
    s.sendall(head + body)
    return read_all(s, timeout)


def health(host, port, src=None, timeout=10):
    t0 = time.time()
    try:
        data = raw(host, port, f"GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode(), src=src, timeout=timeout)
    except OSError:
        data = b""
    return status_of(data), time.time() - t0


def keepalive(host, port, seconds):
    import http.client
    count = [0]
    lock = threading.Lock()
    end = time.time() + seconds

    def client(i):
        while time.time() < end:
            try:
                c = http.client.HTTPConnection(host, port, timeout=5)
                while time.time() < end:
                    for method, path in (("GET", f"/v1/sessions/k{i}"), ("GET", f"/v1/sessions/k{i}/map"), ("DELETE", f"/v1/sessions/k{i}")):
                        c.request(method, path)
                        c.getresponse().read()
                        with lock:
                            count[0] += 1
            except (OSError, http.client.HTTPException):
                time.sleep(0.01)

    ts = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(f"ok keepalive: {count[0]} answers")
    return 0


def slowloris(host, port, n, timeout):
    socks = []
    for _ in range(n):
        try:
            s = socket.create_connection((host, port), timeout=5)
            s.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\nX-Slow: ".encode())
            socks.append(s)
        except OSError:
            break
    time.sleep(0.3)
    st_other, dt_other = health(host, port, src="127.0.0.2")
    time.sleep(timeout + 1.5)
    st_same, dt_same = health(host, port)
    cut = 0
    for s in socks:  # the server closed them: reading gives EOF (or a reset)
        s.settimeout(0.5)
        try:
            if s.recv(1) == b"":
                cut += 1
        except OSError:
            cut += 1
        s.close()
    ok = st_other == 200 and dt_other < 2 and st_same == 200 and dt_same < 2 and cut == len(socks)
    print(("ok" if ok else "FAIL") + f" slowloris: {len(socks)} half-headers; another address answered {st_other} in {dt_other:.2f} s; "
          f"after {timeout} s the same address {st_same} in {dt_same:.2f} s; {cut} cut by the deadline")
    return 0 if ok else 1


def post_half_closed(host, port, body):
    """POST /v1/completions with body, then shutdown(SHUT_WR); the answer."""
    s = socket.create_connection((host, port), timeout=30)
    s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    s.shutdown(socket.SHUT_WR)
    return read_all(s)


def halfclose(host, port):
    # a FIN before the answer is probed with an interim 100 (Continue), which a half-closed client reads past
    data = post_half_closed(host, port, b'{"prompt":"Once upon a time","max_tokens":4,"temperature":0}')
    ok = final_status(data) == 200 and b'"text"' in data
    # and a stream, half-closed the same way
    sdata = post_half_closed(host, port, b'{"prompt":"Once upon a time","max_tokens":4,"temperature":0,"stream":true}')
    sok = final_status(sdata) == 200 and b"data: [DONE]" in sdata
    print(("ok" if ok and sok else "FAIL") + f" halfclose: answer {final_status(data)} ({len(data)} bytes), stream {final_status(sdata)} "
          f"({'with' if b'[DONE]' in sdata else 'without'} [DONE])")
    return 0 if ok and sok else 1


def closed(host, port):
    body = b'{"prompt":"Once upon a time","max_tokens":1000000,"ignore_eos":true,"temperature":0}'
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    time.sleep(0.5)
    s.close()
    t0 = time.time()
    small = b'{"prompt":"Once","max_tokens":4}'
    by = raw(host, port, f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {len(small)}\r\n"
             f"Connection: close\r\n\r\n".encode(), small)
    dt = time.time() - t0
    ok = status_of(by) == 200 and dt < 2
    print(("ok" if ok else "FAIL") + f" closed: a bystander behind a closed request got {status_of(by)} in {dt:.2f} s: {by[-200:]!r}")
    return 0 if ok else 1


def framing(host, port, maxbody):
    body = b'{"prompt":"Once","max_tokens":1}'
    two = raw(host, port, f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\nContent-Length: {len(body)}\r\n\r\n".encode(), body)
    te = raw(host, port, f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\nTransfer-Encoding: chunked\r\n\r\n".encode(),
             f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
    # Expect: 100-continue over --max-body: 413 at once, never 100, and no body sent
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Length: {maxbody + 1}\r\nExpect: 100-continue\r\n\r\n".encode())
    s.settimeout(5)
    first, dt = timed_recv(s, 4096)
    s.close()
    ok = status_of(two) == 400 and status_of(te) == 400 and status_of(first) == 413 and dt < 2
    print(("ok" if ok else "FAIL") + f" framing: two Content-Length {status_of(two)}, Content-Length + chunked {status_of(te)}, "
          f"100-continue over --max-body {status_of(first)} in {dt:.2f} s")
    return 0 if ok else 1


def timed_recv(s, n):
    """One recv of at most n bytes (b"" on a reset or timeout) and the seconds it took."""
    t0 = time.time()
    try:
        got = s.recv(n)
    except OSError:
        got = b""
    return got, time.time() - t0


def ka_open(host, port, src):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    s.bind((src, 0))
    s.connect((host, port))
    return s


def ka_get(s, host, path, body=None):
    """GET path (POST body, when given) on the keep-alive connection s: the status, or 0 when the connection
    ended without an answer."""
    try:
        if body is None:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        else:
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                return 0
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        length = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
        while len(body) < length:
            chunk = s.recv(65536)
            if not chunk:
                return 0
            body += chunk
        return status_of(head)
    except OSError:
        return 0


def conncap(host, port, n, per_ip):
    """With a limit of n connections (per_ip: from one address, else in all), n keep-alive connections are
    each answered, the one past them is closed unanswered, and once one of the n closes a new one is answered."""
    srcs = ["127.0.0.1"] * n if per_ip else ["127.0.0.1", "127.0.0.2"] * n
    held = [ka_open(host, port, src) for src in srcs[:n]]
    answered = [ka_get(s, host, "/health") for s in held]
    past_src = "127.0.0.1" if per_ip else "127.0.0.3"
    past = ka_open(host, port, past_src)
    past_status = ka_get(past, host, "/health")
    past.close()
    other, refused = -1, -1
    if per_ip:  # another address is still let in, and the refusal is counted once
        o = ka_open(host, port, "127.0.0.2")
        other = ka_get(o, host, "/health")
        o.close()
        m = raw(host, port, f"GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode(), src="127.0.0.2")
        for line in m.decode(errors="replace").splitlines():
            if line.startswith("kvbound_connections_refused_total "):
                refused = int(float(line.split()[1]))
    held[0].close()
    after = 0
    for _ in range(30):  # the server sees the close a moment later
        time.sleep(0.1)
        a = ka_open(host, port, past_src)
        after = ka_get(a, host, "/health")
        a.close()
        if after == 200:
            break
    for s in held[1:]:
        s.close()
    ok = answered == [200] * n and past_status == 0 and after == 200 and (not per_ip or (other == 200 and refused == 1))
    print(("ok" if ok else "FAIL") + f" conncap: limit {n} {'per address' if per_ip else 'in all'}: the {n} answered {answered}; "
          f"the one past them {past_status or 'closed unanswered'}; another address {other}; refused_total {refused}; "
          f"after one closed, a new one {after}")
    return 0 if ok else 1


def keepdeadline(host, port, timeout):
    """A keep-alive connection busy with an answer of about timeout, then asking every 0.6 x timeout,
    is answered throughout (each answer's end restarts its deadline, not its start), and once idle it is
    closed after timeout, not before."""
    s = ka_open(host, port, "127.0.0.1")
    s.settimeout(timeout + 60)

    def complete(n):
        t0 = time.time()
        st = ka_get(s, host, "/v1/completions", json.dumps({"prompt": "Once", "max_tokens": n, "ignore_eos": True, "temperature": 0}).encode())
        return st, time.time() - t0
    st, dt = complete(2000)  # how fast this machine generates, for an answer of the length wanted
    got = [st]
    n = max(2000, int(2000 * timeout / max(dt, 1e-3)))
    time.sleep(0.6 * timeout)
    st, busy = complete(n)
    got.append(st)
    for i in range(3):
        time.sleep(0.6 * timeout)
        got.append(ka_get(s, host, "/health"))
    end, idle = timed_recv(s, 1)
    s.close()
    ok = got == [200] * 5 and busy > 0.5 * timeout and end == b"" and timeout - 0.5 < idle < timeout + 1.5
    print(("ok" if ok else "FAIL") + f" keepdeadline: --request-timeout {timeout}: asked every {0.6 * timeout:.1f} s, one answer taking "
          f"{busy:.2f} s ({n} tokens): {got}; then idle, closed after {idle:.2f} s")
    return 0 if ok else 1


def redisproxy(host, port, listen_port, arm, refuse_s):
    import os
    import select
    state = {"listener": None, "dropped": False}
    lock = threading.Lock()

    def listen():
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", listen_port))
        sock.listen(16)
        sock.settimeout(0.1)
        return sock

    def pump(c, u):
        drop_next_reply = False
        try:
            while True:
                ready, _, _ = select.select([c, u], [], [], 1)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    if s is c:
                        with lock:
                            if not state["dropped"] and os.path.exists(arm) and data.startswith(b"*") and b"EVAL" in data[:40] and b"HSET" in data:
                                drop_next_reply = True
                        u.sendall(data)
                    elif drop_next_reply:  # the write ran; its reply is lost, and Redis goes out of reach for a while
                        with lock:
                            state["dropped"] = True
                            if refuse_s > 0:
                                state["listener"].close()
                                state["listener"] = None
                        print("dropped the reply to a session write", flush=True)
                        if refuse_s > 0:
                            threading.Timer(refuse_s, lambda: state.__setitem__("listener", listen())).start()
                        return
                    else:
                        c.sendall(data)
        except OSError:
            pass
        finally:
            c.close()
            u.close()

    state["listener"] = listen()
    while True:
        lst = state["listener"]
        if lst is None:
            time.sleep(0.05)
            continue
        try:
            c, _ = lst.accept()
        except (socket.timeout, OSError):
            continue
        c.settimeout(None)
        try:
            u = socket.create_connection((host, port), timeout=5)
        except OSError:
            c.close()
            continue
        threading.Thread(target=pump, args=(c, u), daemon=True).start()


def main():
    host, port, what = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if what == "keepalive":
        return keepalive(host, port, float(sys.argv[4]))
    if what == "slowloris":
        return slowloris(host, port, int(sys.argv[4]), float(sys.argv[5]))
    if what == "halfclose":
        return halfclose(host, port)
    if what == "closed":
        return closed(host, port)
    if what == "framing":
        return framing(host, port, int(sys.argv[4]))
    if what == "conncap":
        return conncap(host, port, int(sys.argv[4]), sys.argv[5] == "per-ip")
    if what == "keepdeadline":
        return keepdeadline(host, port, float(sys.argv[4]))
    if what == "redisproxy":
        return redisproxy(host, port, int(sys.argv[4]), sys.argv[5], float(sys.argv[6]))
    print(f"FAIL unknown probe {what}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
