#!/usr/bin/env python3
"""serve_multiturn.py -- the multi-turn shared-context test (in the spirit of
SCBench): one long context, then several questions, each in a later turn of
ONE session of `kvbound serve`, per policy, with and without recall.

    python3 tests/serve_multiturn.py --kvbound build/kvbound -m MODEL
        [--policies full,streaming,...] [--budget B] [--recall-pages 0,R,...]
        [--passkeys N] [--length TOKENS] [--depth D] [--trials T] [--seed S]
        [--filler FILE] [--threads N] [--serve-args "EXTRA FLAGS"] [--out FILE.json]

For each policy and each --recall-pages value (0: no recall) it starts its own
`kvbound serve -m MODEL --port 0 --sessions TMPDIR --policy P --budget B
[--recall-pages R] -t THREADS EXTRA` (EXTRA: --serve-args, split as a shell
does: e.g. "--park-compress kvzip --park-ratio 0.5" for compress-on-park, or
"--kv-dtype q8_0"), then for each trial one session through /v1/completions
with session_id, so each turn is read onto the session's bounded cache and
the session is stored between turns, as a client's conversation is:

  turn 0: the context, BOS + filler sentences with N passkey sentences
          " The pass key number I is K. Remember it." (K five random digits
          a trial; passkey I at depth + (I - 1)/N, mod 1, at the nearest
          sentence start, as `kvbound needle --passkeys N`), 1 token answered;
  turn I: " What is the pass key number I? The pass key number I is", up to 8
          greedy tokens; correct when the answer's first run of digits is K.
          (One passkey: " The pass key is K. Remember it." and " What is the
          pass key? The pass key is", needle's single-passkey words.)

The questions come after the context has been compressed or evicted (and,
with compress-on-park, parked compressed): what a query-agnostic policy is
for. Before each question the session's map (GET /v1/sessions/ID/map) gives
the retention: the share of (layer, KV head) streams whose retained slots
hold every token of that passkey (the hot cache: recalled pages are chosen
while the question is read, so they are not in it).

Prints one line per run and a Markdown table; --out writes the JSON:
{"model", "budget", "passkeys", "length", "depth", "trials", "seed",
 "serve_args", "runs": [{"policy", "recall_pages", "accuracy", "retention",
 "prompt_tokens", "turns": [{"trial", "passkey", "key", "answer", "correct",
 "retention"}]}]}. Exit 0, or 1 (printed) when a server does not start or a
request fails (the server's log tail is shown).
"""
import argparse
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
          "The river runs past the old mill. A dog sleeps by the door. The wind moves the tall trees. "
          "Bread is baked in the morning. The children walk to school. Rain falls on the quiet town. ")


def post(url, path, body, timeout=600):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        raise RuntimeError("%s: HTTP %d %s" % (path, e.code, e.read().decode()[:300]))


def get(url, path, timeout=600):
    with urllib.request.urlopen(url + path, timeout=timeout) as r:
        return json.loads(r.read().decode())


def sentences(text):
    """The filler's sentences, each with its leading space."""
    out = [" " + s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
    if not out:
        raise SystemExit("serve_multiturn: the filler has no sentences")
    return out


def sentence(i, n, key):
    """Passkey i of n as `kvbound needle` words it (one passkey: its own words)."""
    return " The pass key is %s. Remember it." % key if n == 1 else " The pass key number %d is %s. Remember it." % (i, key)


def question(i, n):
    return " What is the pass key? The pass key is" if n == 1 else " What is the pass key number %d? The pass key number %d is" % (i, i)


def context(url, filler, length, n, depth, keys):
    """The context text of at most `length` tokens (BOS counted) with the N
    passkey sentences, and for each passkey the character span of its digits."""
    need = [sentence(i + 1, n, keys[i]) for i in range(n)]
    sample = "".join(filler[:8])
    per = len(post(url, "/tokenize", {"content": sample})["tokens"]) / len(sample)
    body, i = [], 0
    while (sum(len(x) for x in body) + sum(len(x) for x in need)) * per < length - 1:
        body.append(filler[i % len(filler)])
        i += 1

    def build(body):
        at = []
        for k in range(n):
            d = depth + k / n
            at.append(min(len(body), int(round((d - 1 if d > 1 else d) * len(body)))))
        parts = []
        for j in range(len(body) + 1):
            parts.extend(need[k] for k in range(n) if at[k] == j)
            if j < len(body):
                parts.append(body[j])
        return "".join(parts)

    text = build(body)
    while len(body) > 1 and len(post(url, "/tokenize", {"content": text})["tokens"]) + 1 > length:
        body.pop()
        text = build(body)
    spans = []
    for k in range(n):
        at = text.index(need[k]) + len(need[k]) - len(keys[k] + ". Remember it.")
        spans.append((at, at + len(keys[k])))
    return text, spans


def key_positions(url, text, spans, prompt_tokens):
    """Token positions of each passkey's digits in the session (BOS first), or
    None when the pieces do not spell the text."""
    toks = post(url, "/tokenize", {"content": text, "with_pieces": True})["tokens"]
    pieces = [t["piece"] for t in toks]
    joined = "".join(pieces)
    shift = len(joined) - len(text)
    if shift < 0 or joined[shift:] != text:
        return None
    first = prompt_tokens - len(toks)  # the specials the server adds (BOS)
    starts, c = [], 0
    for p in pieces:
        starts.append(c - shift)
        c += len(p)
    out = []
    for a, b in spans:
        out.append([first + j for j, p in enumerate(pieces) if starts[j] < b and starts[j] + len(p) > a])
    return out


def retention(url, sid, pos):
    if pos is None:
        return None
    m = get(url, "/v1/sessions/%s/map" % sid)
    held = streams = 0
    for layer in m["layers"]:
        for kept in layer:
            if kept is None:
                continue
            s = set(kept)
            streams += 1
            held += all(p in s for p in pos)
    return held / streams if streams else None


def start_server(a, policy, recall, tmp):
    sess = tempfile.mkdtemp(prefix="sessions-", dir=tmp)
    cmd = [a.kvbound, "serve", "-m", a.model, "--port", "0", "--sessions", sess, "--policy", policy, "-t", str(a.threads)]
    if policy != "full":
        cmd += ["--budget", str(a.budget)]
    else:  # the context, then every question with its answer
        cmd += ["-c", str(a.length + a.passkeys * 64 + 16)]
    if recall > 0:
        cmd += ["--recall-pages", str(recall)]
    cmd += shlex.split(a.serve_args)
    log = os.path.join(tmp, "serve-%s-%d.log" % (policy, recall))
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    url = None
    for _ in range(300):
        time.sleep(0.1)
        found = re.search(r"http://[0-9.]+:[0-9]+", open(log).read())
        if found:
            url = found.group(0)
            break
        if proc.poll() is not None:
            break
    if not url:
        proc.kill()
        proc.wait()
        raise RuntimeError("kvbound serve did not start (%s): %s" % (" ".join(cmd), open(log).read()[-600:].strip()))
    return proc, url, log


def run_one(a, policy, recall, tmp):
    proc, url, log = start_server(a, policy, recall, tmp)
    try:
        rng = random.Random(a.seed)
        turns, prompt_tokens = [], 0
        for trial in range(a.trials):
            keys = ["%05d" % rng.randrange(100000) for _ in range(a.passkeys)]
            text, spans = context(url, sentences(a.filler_text), a.length, a.passkeys, a.depth, keys)
            sid = "mt-%d" % trial
            r = post(url, "/v1/completions", {"prompt": text, "max_tokens": 1, "temperature": 0, "session_id": sid})
            prompt_tokens = r["usage"]["prompt_tokens"]
            pos = key_positions(url, text, spans, prompt_tokens)
            for k in range(a.passkeys):
                ret = retention(url, sid, pos[k] if pos else None)
                q = question(k + 1, a.passkeys)
                r = post(url, "/v1/completions", {"prompt": q, "max_tokens": 8, "temperature": 0, "session_id": sid})
                ans = r["choices"][0]["text"]
                digits = re.search(r"[0-9]+", ans)
                turns.append({"trial": trial, "passkey": k + 1, "key": keys[k], "answer": ans,
                              "correct": bool(digits and digits.group(0) == keys[k]), "retention": ret})
    except Exception as e:
        raise RuntimeError("%s (policy %s, recall %d); server log: %s" % (e, policy, recall, open(log).read()[-400:].strip()))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    rets = [t["retention"] for t in turns if t["retention"] is not None]
    return {"policy": policy, "recall_pages": recall, "accuracy": sum(t["correct"] for t in turns) / len(turns),
            "retention": sum(rets) / len(rets) if rets else None, "prompt_tokens": prompt_tokens, "turns": turns}


def main():
    ap = argparse.ArgumentParser(description="multi-turn shared-context test through kvbound serve sessions")
    ap.add_argument("--kvbound", default="build/kvbound")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--policies", default="full,streaming,h2o,snapkv,keydiff,expected-attention")
    ap.add_argument("--budget", type=int, default=128)
    ap.add_argument("--recall-pages", default="0", help="comma list; 0 = without recall")
    ap.add_argument("--passkeys", type=int, default=3)
    ap.add_argument("--length", type=int, default=512, help="context tokens, BOS counted (at most)")
    ap.add_argument("--depth", type=float, default=0.5, help="the first passkey's depth, 0..1")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--filler", help="a text file whose sentences fill the context (default: built-in)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--serve-args", default="", help="more kvbound serve flags for every server, e.g. compress-on-park")
    ap.add_argument("--out", help="write the JSON here")
    a = ap.parse_args()
    if not 1 <= a.passkeys <= 64 or not 0 <= a.depth <= 1 or a.trials < 1 or a.length < 16 or a.budget < 2:
        ap.error("--passkeys 1..64, --depth 0..1, --trials >= 1, --length >= 16, --budget >= 2")
    try:
        recalls = [int(x) for x in a.recall_pages.split(",")]
    except ValueError:
        ap.error("--recall-pages: a comma list of integers")
    a.filler_text = open(a.filler).read() if a.filler else FILLER
    tmp = tempfile.mkdtemp(prefix="kvb-multiturn-")
    runs = []
    try:
        for policy in [p for p in a.policies.split(",") if p]:
            for recall in recalls:
                if recall and policy == "full":
                    continue  # full evicts nothing: no recall
                r = run_one(a, policy, recall, tmp)
                runs.append(r)
                print("%s recall %d: accuracy %.3f retention %s (%d tokens)" % (
                    policy, recall, r["accuracy"], "%.3f" % r["retention"] if r["retention"] is not None else "n/a",
                    r["prompt_tokens"]), file=sys.stderr)
    except RuntimeError as e:
        print("serve_multiturn: %s" % e, file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    doc = {"model": os.path.basename(a.model), "budget": a.budget, "passkeys": a.passkeys, "length": a.length, "depth": a.depth,
           "trials": a.trials, "seed": a.seed, "serve_args": a.serve_args, "runs": runs}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
    print("| policy | recall pages | accuracy | retention |\n|---|---|---|---|")
    for r in runs:
        print("| %s | %d | %.3f | %s |" % (r["policy"], r["recall_pages"], r["accuracy"],
                                          "%.3f" % r["retention"] if r["retention"] is not None else "n/a"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
