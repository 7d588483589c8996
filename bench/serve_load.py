#!/usr/bin/env python3
"""serve_load.py — N concurrent streaming clients against an OpenAI-compatible
server (kvbound serve or llama.cpp's llama-server), the same requests for both.

  serve_load.py URL --clients N [--requests R] [--prompt-words W] [--max-tokens G]
                [--session] [--extra JSON] [--label NAME]

Each client sends R streamed /v1/completions requests one after another
(temperature 0, ignore_eos, so every request generates exactly G tokens);
prompts differ per client and request (W words of a fixed public-domain
sentence, rotated by 7 words a request, so no prompt repeats another; two may
begin with the same few words, the text's "it was the ..."; past 60
requests, a prompt begins with its round number). With --session, a
client's requests are turns of one
kvbound session (session_id): each sends only its new words, the server keeps
the history. With --resend, a client's requests are turns of a conversation
whose whole history (earlier prompts and answers) is sent again each time,
as clients of a stateless server do.

Prints one JSON object: clients, requests, errors (non-200 or broken
streams), generated_tokens (from usage, else counted chunks),
wall_s, agg_tok_per_s (generated tokens / wall time), ttft_p50_ms,
ttft_p99_ms (request sent -> first text), itl_p50_ms, itl_p90_ms,
itl_p99_ms, itl_max_ms (gaps between text chunks; one token per chunk on both
servers) and itl_count (how many gaps).
"""
import argparse
import http.client
import json
import threading
import time
import urllib.parse

TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness, "
        "it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it was the season of "
        "Darkness, it was the spring of hope, it was the winter of despair").split()


def sse_events(r):
    """The JSON objects of a server-sent event stream as they come, and "[DONE]" for its end marker."""
    buf = b""
    while True:
        data = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not data:
            return
        buf += data
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            for line in ev.split(b"\n"):
                if line.startswith(b"data:"):
                    payload = line[5:].strip()
                    yield "[DONE]" if payload == b"[DONE]" else json.loads(payload)


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


def one_request(host, port, body, out, texts=None):
    t0 = time.perf_counter()
    c = http.client.HTTPConnection(host, port, timeout=3600)
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        r.read()
        out["errors"] += 1
        out["status"].append(r.status)
        return
    first = None
    last = None
    chunks = 0
    usage_tokens = None
    done = False
    for o in sse_events(r):
        if o == "[DONE]":
            done = True
            continue
        if o.get("usage") and o["usage"].get("completion_tokens") is not None:
            usage_tokens = o["usage"]["completion_tokens"]
        if "error" in o:
            out["errors"] += 1
        for ch in o.get("choices", []):
            if ch.get("text") and texts is not None:
                texts.append(ch["text"])
            if ch.get("text"):
                now = time.perf_counter()
                if first is None:
                    first = now
                    out["ttft"].append((now - t0) * 1000)
                else:
                    out["itl"].append((now - last) * 1000)
                last = now
                chunks += 1
    c.close()
    if not done:
        out["errors"] += 1
    out["tokens"] += usage_tokens if usage_tokens is not None else chunks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--prompt-words", type=int, default=48)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--session", action="store_true")
    ap.add_argument("--resend", action="store_true")
    ap.add_argument("--extra", default="{}")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    extra = json.loads(a.extra)
    lock = threading.Lock()
    total = {"errors": 0, "tokens": 0, "ttft": [], "itl": [], "status": []}

    def client(i):
        mine = {"errors": 0, "tokens": 0, "ttft": [], "itl": [], "status": []}
        history = ""
        for r in range(a.requests):
            q = i * a.requests + r  # distinct for every request (the text has 60 words; 7 is prime to 60)
            start = (q * 7) % len(TEXT)
            words = " ".join(TEXT[(start + k) % len(TEXT)] for k in range(a.prompt_words))
            if q >= len(TEXT):
                words = f"{q // len(TEXT)}. {words}"
            prompt = (history + " " + words) if a.resend and history else words
            body = {"prompt": prompt, "max_tokens": a.max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True}}
            if a.session:
                body["session_id"] = f"load-{i}-{int(t_start)}"
            body.update(extra)
            texts = []
            before = mine["errors"]
            try:
                one_request(u.hostname, u.port, body, mine, texts)
            except (OSError, http.client.HTTPException, ValueError):
                mine["errors"] += 1
            if mine["errors"] > before and a.resend:
                mine["first_error_turn"] = min(mine.get("first_error_turn", r), r)
            history = prompt + "".join(texts)
        with lock:
            for k in ("errors", "tokens"):
                total[k] += mine[k]
            for k in ("ttft", "itl", "status"):
                total[k] += mine[k]
            if "first_error_turn" in mine:
                total["first_error_turn"] = min(total.get("first_error_turn", 10**9), mine["first_error_turn"])

    t_start = time.time()
    t0 = time.perf_counter()
    ts = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    r2 = lambda x: None if x is None else round(x, 2)
    print(json.dumps({"label": a.label, "clients": a.clients, "requests": a.clients * a.requests, "errors": total["errors"],
                      "statuses": sorted(set(total["status"])), "generated_tokens": total["tokens"], "wall_s": round(wall, 2),
                      "agg_tok_per_s": round(total["tokens"] / wall, 2) if wall > 0 else None,
                      "ttft_p50_ms": r2(pct(total["ttft"], 50)), "ttft_p99_ms": r2(pct(total["ttft"], 99)),
                      "itl_p50_ms": r2(pct(total["itl"], 50)), "itl_p90_ms": r2(pct(total["itl"], 90)),
                      "itl_p99_ms": r2(pct(total["itl"], 99)), "itl_max_ms": r2(max(total["itl"]) if total["itl"] else None),
                      "itl_count": len(total["itl"]), "first_error_turn": total.get("first_error_turn")}))


if __name__ == "__main__":
    main()
