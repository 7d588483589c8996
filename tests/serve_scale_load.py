#!/usr/bin/env python3
"""serve_scale_load.py — session clients against `kvbound serve` replicas
behind a load balancer (used by tests/test_serve_scale_cli.sh). Python 3
standard library only.

  serve_scale_load.py URL CLIENTS SECONDS [MAX_TOKENS [PREFIX [FROM:TO]]]

CLIENTS threads, each owning the session PREFIX-<i>, send chat turns (one
new user message each, `max_tokens` MAX_TOKENS, default 4) to URL for
SECONDS, one at a time. For every turn a client records whether it was
acknowledged (200 with a chat.completion body) and its latency, from the
first try to the answer, retries included. Errors the API documents as
retryable are retried, the same turn again:

  503 with Retry-After (queue full, a turn cut by shutdown, store_unavailable),
  429 (the session is running a turn), 409 session_conflict: nothing of the
      turn was kept; retried after Retry-After (at most 2 s here, to keep the
      test short), else 0.2 s;
  502 / 504 from the proxy, or a connection reset or closed before an answer
      ("reset"): the request may have reached a replica that died after it
      stored the turn and before it answered. The client asks the session's
      state (GET /v1/sessions/{id}): if it holds one turn more than this
      client has seen stored, the turn was stored but unacknowledged (allowed;
      counted apart, and the client goes on to its next turn); otherwise
      nothing of it was kept and the same turn is sent again.

Anything else (another status, a 200 without a chat.completion, a client
timeout) is a failure. After SECONDS every client checks its session through
URL: `turns` must equal acknowledged + stored-unacknowledged turns (a retried
turn counted once: "lost" counts the difference), and one more turn must be
answered and raise `turns` by one (no session corrupt).

Prints one JSON line: clients, turns_acknowledged, turns_stored_unacknowledged,
turns_lost, turns_extra, failures (with the first few), the retryable errors
met by kind ("errors") and of them those whose turn was sent again ("retries"),
latency_ms p50/p99/max over the acknowledged turns (and latency_window_ms over
those that started FROM..TO seconds into the load: around a kill), sessions_checked,
sessions_corrupt. Exits 0 when lost, extra, failures and corrupt are all 0.
"""
import http.client
import json
import sys
import threading
import time
import urllib.parse

TIMEOUT = 30.0          # one request; a turn here takes milliseconds
RETRY_CAP = 2.0         # Retry-After honoured up to this many seconds


class Client:
    def __init__(self, host, port, sid, max_tokens):
        self.host, self.port, self.sid, self.max_tokens = host, port, sid, max_tokens
        self.conn = None
        self.acked = 0            # turns answered 200
        self.unacked = 0          # turns stored whose answer never came
        self.latencies = []       # (start, milliseconds) of each acknowledged turn
        self.errors = {}          # errors met, by kind
        self.retries = {}         # of them, the ones whose turn was sent again
        self.failures = []
        self.resets = []          # the first few connection errors, as seen

    def request(self, method, path, body=None):
        """(status, headers, body bytes) or raises OSError / HTTPException."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT)
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        try:
            self.conn.request(method, path, body=body, headers=hdrs)
            r = self.conn.getresponse()
            data = r.read()
            if r.getheader("Connection", "").lower() == "close":
                self.conn.close()
                self.conn = None
            return r.status, r, data
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise

    def met(self, kind):
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def retried(self, kind):
        self.retries[kind] = self.retries.get(kind, 0) + 1

    def stored_turns(self):
        """The session's `turns` in the store (0 when it has none), retrying
        what a turn would retry; None when it cannot be read."""
        for _ in range(20):
            try:
                st, _, data = self.request("GET", f"/v1/sessions/{self.sid}")
            except (OSError, http.client.HTTPException):
                time.sleep(0.2)
                continue
            if st == 200:
                return json.loads(data)["turns"]
            if st == 404:
                return 0
            time.sleep(0.2)
        return None

    def turn(self, n):
        """One turn, retried until acknowledged or found stored: 'ack',
        'stored' or 'fail'."""
        body = json.dumps({"messages": [{"role": "user", "content": f"Turn {n}: once upon a time"}],
                           "max_tokens": self.max_tokens, "temperature": 0.8, "seed": n,
                           "session_id": self.sid}).encode()
        t0 = time.monotonic()
        while True:
            if time.monotonic() - t0 > 60:
                self.failures.append(f"{self.sid} turn {n}: not acknowledged within 60 s")
                return "fail"
            try:
                st, resp, data = self.request("POST", "/v1/chat/completions", body)
            except (OSError, http.client.HTTPException) as e:
                st, resp, data = None, None, repr(e).encode()
                if len(self.resets) < 3:
                    self.resets.append(f"{self.sid} turn {n}: {e!r}")
            if st == 200:
                try:
                    ok = json.loads(data).get("object") == "chat.completion"
                except ValueError:
                    ok = False
                if not ok:
                    self.failures.append(f"{self.sid} turn {n}: 200 without a chat.completion: {data[:200]!r}")
                    return "fail"
                self.acked += 1
                self.latencies.append((t0, (time.monotonic() - t0) * 1000.0))
                return "ack"
            if st in (503, 429, 409):
                if st == 503 and resp.getheader("Retry-After") is None:
                    # the proxy's own 503: no replica could take it
                    self.failures.append(f"{self.sid} turn {n}: 503 without Retry-After: {data[:200]!r}")
                    return "fail"
                self.met(str(st))
                self.retried(str(st))
                ra = resp.getheader("Retry-After")
                time.sleep(min(float(ra), RETRY_CAP) if ra else 0.2)
                continue
            if st is None or st in (502, 504):
                kind = "reset" if st is None else str(st)
                self.met(kind)
                stored = self.stored_turns()
                if stored is None:
                    self.failures.append(f"{self.sid} turn {n}: the session's state could not be read after {st}")
                    return "fail"
                if stored == self.acked + self.unacked + 1:
                    self.unacked += 1
                    return "stored"
                if stored != self.acked + self.unacked:
                    self.failures.append(f"{self.sid} turn {n}: after {st} the store holds {stored} turns, "
                                         f"the client {self.acked} acknowledged + {self.unacked} unacknowledged")
                    return "fail"
                self.retried(kind)
                time.sleep(0.1)
                continue
            self.failures.append(f"{self.sid} turn {n}: {st}: {data[:200]!r}")
            return "fail"

    def run(self, end):
        n = 0
        while time.monotonic() < end:
            n += 1
            if self.turn(n) == "fail":
                return

    def check(self):
        """(lost, extra, corrupt): the store against what this client saw,
        then one more turn."""
        stored = self.stored_turns()
        if stored is None:
            self.failures.append(f"{self.sid}: the session's state could not be read at the end")
            return 0, 0, 1
        want = self.acked + self.unacked
        lost, extra = max(0, want - stored), max(0, stored - want)
        before = (self.acked, self.unacked)
        r = self.turn(10_000)
        corrupt = 0
        after = self.stored_turns()
        if r != "ack" or after != stored + 1:
            corrupt = 1
            self.failures.append(f"{self.sid}: a further turn gave {r}, turns {stored} then {after}")
        self.acked, self.unacked = before  # the check's turn is not part of the load
        self.latencies = self.latencies[:self.acked]
        return lost, extra, corrupt


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))], 1)


def main():
    url, nclients, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    max_tokens = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    prefix = sys.argv[5] if len(sys.argv) > 5 else "scale"
    win = [float(x) for x in sys.argv[6].split(":")] if len(sys.argv) > 6 else None
    u = urllib.parse.urlparse(url)
    clients = [Client(u.hostname, u.port, f"{prefix}-{i}", max_tokens) for i in range(nclients)]
    start = time.monotonic()
    end = start + seconds
    ts = [threading.Thread(target=c.run, args=(end,)) for c in clients]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    lost = extra = corrupt = 0
    for c in clients:
        c.conn = None
        lo, ex, co = c.check()
        lost, extra, corrupt = lost + lo, extra + ex, corrupt + co
    retries, errors = {}, {}
    for c in clients:
        for k, v in c.retries.items():
            retries[k] = retries.get(k, 0) + v
        for k, v in c.errors.items():
            errors[k] = errors.get(k, 0) + v
    lat = [ms for c in clients for _, ms in c.latencies]
    lw = [ms for c in clients for t, ms in c.latencies if win and win[0] <= t - start < win[1]]
    failures = [f for c in clients for f in c.failures]
    out = {
        "clients": nclients, "seconds": seconds, "max_tokens": max_tokens,
        "turns_acknowledged": sum(c.acked for c in clients),
        "turns_stored_unacknowledged": sum(c.unacked for c in clients),
        "turns_lost": lost, "turns_extra": extra,
        "errors": errors, "retries": retries, "resets_first": [r for c in clients for r in c.resets][:3], "failures": len(failures), "failures_first": failures[:5],
        "latency_ms": {"p50": pct(lat, 50), "p99": pct(lat, 99), "max": round(max(lat), 1) if lat else None},
        "latency_window_ms": {"from_s": win[0], "to_s": win[1], "turns": len(lw), "p50": pct(lw, 50), "p99": pct(lw, 99),
                              "max": round(max(lw), 1) if lw else None} if win else None,
        "sessions_checked": nclients, "sessions_corrupt": corrupt,
    }
    print(json.dumps(out, sort_keys=True))
    return 0 if lost == 0 and extra == 0 and not failures and corrupt == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
