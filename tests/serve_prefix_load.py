#!/usr/bin/env python3
"""serve_prefix_load.py URL SYSTEM_FILE N TURNS CONCURRENCY [MAX_TOKENS [TAG]] -- sessions
that share a system prompt, against a running `kvbound serve`.

Session i (0..N-1) sends TURNS turns with session_id "<TAG>s<i>": the first with
the system prompt (SYSTEM_FILE's text) and a user message of its own, the
later ones a user message each. Sessions start CONCURRENCY at a time (each
runs its turns in order). Greedy (temperature 0), ignore_eos, MAX_TOKENS
(default 16) a turn, streamed, so the time to the first token is measured.
After every session's first turn (all N idle in memory, their own text
after the system prompt) and again at the end, the server's pool pages are
read from /metrics. Prints one JSON object: "turns" (session, turn,
content, prompt_tokens, cached_tokens, ttft_s per turn, in order),
"pages_after_first_turns", "shared_after_first_turns", "pages_end",
"shared_end" and "errors".
"""
import json
import sys
import threading
import time
import urllib.request


def metric(url, name):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return int(float(line.split()[1]))
    return -1


def turn(url, body):
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    ttft = None
    content = []
    usage = None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            d = json.loads(line[6:])
            if d.get("usage"):
                usage = d["usage"]
            for c in d.get("choices", []):
                piece = c.get("delta", {}).get("content")
                if piece:
                    if ttft is None:
                        ttft = time.monotonic() - t0
                    content.append(piece)
    return "".join(content), usage, ttft


def main():
    url, system_file, n, turns, conc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    max_tokens = int(sys.argv[6]) if len(sys.argv) > 6 else 16
    tag = sys.argv[7] if len(sys.argv) > 7 else ""
    system = open(system_file).read()
    users = ["Tell me what happened next.", "Who was in the garden?", "Why was the cat sad?", "What did the dog find?",
             "Where did they go after lunch?", "How did the story end?", "What was in the box?", "Who helped them?"]
    results = {}
    errors = []
    lock = threading.Lock()
    first_done = threading.Barrier(n + 1)

    sem = threading.Semaphore(conc)

    def session(i):
        for t in range(turns):
            user = users[(i + t) % len(users)] + " (%d)" % i
            msgs = ([{"role": "system", "content": system}] if t == 0 else []) + [{"role": "user", "content": user}]
            body = {"messages": msgs, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                    "session_id": "%ss%d" % (tag, i), "stream": True, "stream_options": {"include_usage": True}}
            if t == 0:
                sem.acquire()
            try:
                content, usage, ttft = turn(url, body)
                with lock:
                    results[(i, t)] = {"session": i, "turn": t, "content": content,
                                       "prompt_tokens": usage["prompt_tokens"] if usage else -1,
                                       "cached_tokens": usage.get("prompt_tokens_details", {}).get("cached_tokens", 0) if usage else -1,
                                       "ttft_s": ttft}
            except Exception as e:  # reported, the test fails on it
                with lock:
                    errors.append("session %d turn %d: %s" % (i, t, e))
            if t == 0:
                sem.release()
                first_done.wait()

    threads = []
    # the first turns CONCURRENCY at a time; the pool is read once every session has had its first turn
    for i in range(n):
        th = threading.Thread(target=session, args=(i,))
        th.start()
        threads.append(th)
    first_done.wait()
    out = {"pages_after_first_turns": metric(url, "kvbound_pool_pages_used"),
           "shared_after_first_turns": metric(url, "kvbound_pool_pages_shared")}
    for th in threads:
        th.join()
    out["pages_end"] = metric(url, "kvbound_pool_pages_used")
    out["shared_end"] = metric(url, "kvbound_pool_pages_shared")
    out["turns"] = [results[k] for k in sorted(results)]
    out["errors"] = errors
    print(json.dumps(out))


if __name__ == "__main__":
    main()
