#!/usr/bin/env python3
"""agent_load.py — one stateless agent of N turns against an OpenAI-compatible
chat server (kvbound serve or llama.cpp's llama-server), the same requests for
both.

  agent_load.py URL --turns N --label L [--system-words W] [--turn-words W]
                [--max-tokens M] [--tool-choice auto|none] [--ban-vocab MODEL.gguf]
                [--warmup]

The agent is what every OpenAI client is: stateless. It never sends
session_id; each turn it sends the whole history again:
  - a fixed system prompt (W words of deterministic text, about 300 tokens
    with the default 230) and two tools (JSON-schema functions), every turn;
  - every earlier user message, and every earlier answer exactly as the
    server returned it (the assistant message's content, and its tool_calls
    if any, rebuilt from the stream);
  - a new message: a user request, or on even turns a user message that
    carries a command's output (about 80-100 tokens with the default 70
    words; deterministic, different each turn). After an answer with
    tool_calls (only possible with --tool-choice auto) the new message is a
    role "tool" result for each call instead.
Each request: stream true, stream_options.include_usage true, temperature 0,
max_tokens M (default 32), ignore_eos true (so every answer is M tokens),
tool_choice auto by default; bench/serve_agent.sh gives both servers
--tool-choice none: they still render the tools (so the prompt is the same)
and read the answer as plain text, where llama-server's tool-call parser
answers 500 to most random text under auto.
--ban-vocab MODEL.gguf adds a logit_bias of -100 for the model's control
tokens and for the tokens that are not whole UTF-8 characters (read from
the GGUF's vocabulary): llama-server's chat parser answers 500 to an answer
that is not valid UTF-8, which a random-weight model writes within a few
turns. kvbound takes at most 1024 biased tokens: SmolLM2's vocabulary needs
330, Qwen2.5's 1741.

Per turn it measures the time to first token (request sent -> the first
non-empty content, reasoning or tool-call delta of the SSE stream), the total
time, and the prompt tokens the server actually read:
  - llama-server: its final chunk's "timings" {prompt_n: tokens processed,
    cache_n: tokens reused} (tools/server/server-task.cpp, result_timings);
  - otherwise (kvbound serve): usage.prompt_tokens minus
    usage.prompt_tokens_details.cached_tokens.
usage.prompt_tokens is recorded for both.

Prints one JSON object per turn
  {"label","turn","prompt_tokens","read_tokens","cached_tokens","ttft_s","total_s",...}
and then a summary object: label, turns, total read tokens, total and
per-phase ttft (median of the first 5 and of the last 5 turns), the last
turn's ttft, and errors. Exits 1 if any request failed.
--warmup first sends one short unmeasured request (no system prompt, no
tools: it shares only the template's opening with the agent's prompt) so
that the weights are paged in.
Python 3 standard library only.
"""
import argparse
import http.client
import json
import statistics
import struct
import sys
import time
import urllib.parse

from serve_load import sse_events  # bench/serve_load.py: the stream's events

# A fixed word list; texts are drawn from it by a fixed linear congruential
# generator, so every run sends the same bytes.
WORDS = ("the build server reads each file from the queue and writes a short report for the team when a test fails "
         "it checks the cache before it runs any step again so that a change in one module does not rebuild the "
         "whole tree we keep logs for thirty days and rotate them at midnight every request has a deadline and a "
         "retry budget the parser accepts a header a body and an optional trailer with a checksum users open "
         "tickets when a page loads slowly or a number looks wrong in the weekly summary the agent must answer "
         "briefly cite the file and line it used and never invent a path that it has not listed first").split()


class Lcg:
    def __init__(self, seed):
        self.s = seed & 0xFFFFFFFF

    def next(self, n):
        self.s = (1103515245 * self.s + 12345) & 0x7FFFFFFF
        return (self.s >> 8) % n


def words(rng, n):
    out = []
    for i in range(n):
        w = WORDS[rng.next(len(WORDS))]
        out.append(w)
        if i % 13 == 12:
            out[-1] += "."
    return " ".join(out)


def system_prompt(n_words):
    rng = Lcg(49)
    return ("You are a careful software agent working in a repository. Rules: answer in short sentences; use the "
            "tools to read files and run commands; never guess a path. Background: " + words(rng, n_words))


TOOLS = [
    {"type": "function", "function": {
        "name": "read_file",
        "description": "Read a text file of the repository and return its lines.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "Path relative to the repository root."},
            "start_line": {"type": "integer", "description": "First line to return (1-based)."},
            "end_line": {"type": "integer", "description": "Last line to return (inclusive)."}},
            "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "run_command",
        "description": "Run a shell command in the repository and return its exit status and output.",
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string", "description": "The command line."},
            "timeout_s": {"type": "integer", "description": "Seconds before the command is stopped."}},
            "required": ["command"]}}},
]


def user_message(turn, n_words):
    rng = Lcg(1000 + turn)
    if turn % 2 == 1:
        return "Step %d. Please look into this: %s" % (turn, words(rng, n_words))
    return ("Step %d. Output of the command you asked for (exit status 0):\n```\n%s\n```\nWhat next?"
            % (turn, words(rng, n_words)))


def tool_result(turn, call, n_words):
    rng = Lcg(5000 + turn)
    return {"role": "tool", "tool_call_id": call.get("id", ""),
            "content": "exit 0\n" + words(rng, n_words)}


def gguf_vocab(path):
    """(model, tokens as bytes, token types) from a GGUF file's header: only
    the key/value section is read, not the tensors."""
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    with open(path, "rb") as f:
        def rd(n):
            b = f.read(n)
            if len(b) != n:
                raise ValueError("%s: truncated GGUF" % path)
            return b

        def rstr():
            return rd(struct.unpack("<Q", rd(8))[0])

        if rd(4) != b"GGUF":
            raise ValueError("%s: not a GGUF file" % path)
        _, _, nkv = struct.unpack("<IQQ", rd(20))
        out = {}
        for _ in range(nkv):
            key = rstr().decode()
            t = struct.unpack("<I", rd(4))[0]
            if t == 8:
                v = rstr()
            elif t == 9:
                et, n = struct.unpack("<IQ", rd(12))
                if et == 8:
                    v = [rstr() for _ in range(n)]
                elif et in (4, 5) and key == "tokenizer.ggml.token_type":
                    v = list(struct.unpack("<%d%s" % (n, "I" if et == 4 else "i"), rd(4 * n)))
                else:
                    f.seek(sizes[et] * n, 1)
                    v = None
            else:
                rd(sizes[t])
                v = None
            if key.startswith("tokenizer.ggml."):
                out[key] = v
    return (out.get("tokenizer.ggml.model") or b"").decode(), out.get("tokenizer.ggml.tokens") or [], \
        out.get("tokenizer.ggml.token_type")


def banned_tokens(path):
    """Token ids a random-weight model must not pick, so that both servers
    stream the same plain text: control and user-defined tokens (the
    template's markers, end of turn) and tokens that are not whole UTF-8 on
    their own (byte-level BPE pieces of a character, SentencePiece byte
    tokens): llama-server's chat parser answers 500 to text that is not
    valid UTF-8."""
    model, toks, types = gguf_vocab(path)
    if not toks:
        raise ValueError("%s: no tokenizer.ggml.tokens" % path)
    # byte-level BPE: GPT-2's mapping of the 256 bytes to printable characters
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for x in range(256):
        if x not in bs:
            bs.append(x)
            cs.append(256 + n)
            n += 1
    u2b = {chr(c): b for b, c in zip(bs, cs)}
    ban = []
    for i, t in enumerate(toks):
        ty = types[i] if types else 1
        if ty in (2, 3, 4, 5):  # unknown, control, user-defined, unused
            ban.append(i)
            continue
        s = t.decode("utf-8", "replace")
        if model == "gpt2":
            try:
                raw = bytes(u2b[c] for c in s)
            except KeyError:
                ban.append(i)
                continue
        elif ty == 6:  # SentencePiece byte token <0xNN>
            raw = bytes([int(s[3:5], 16)])
        else:
            raw = t
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            ban.append(i)
    return ban


def post_stream(host, port, path, body, timeout):
    """Sends one streamed request; returns a dict with ttft_s, total_s, the
    answer (content, tool_calls), usage, timings, kvbound, error."""
    res = {"content": "", "tool_calls": [], "usage": None, "timings": None, "kvbound": None,
           "error": None, "ttft_s": None}
    t0 = time.perf_counter()
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            res["error"] = "HTTP %d: %s" % (r.status, r.read()[:300].decode("utf-8", "replace"))
            return res
        calls = {}
        for o in sse_events(r):
            if o == "[DONE]":
                continue
            if "error" in o:
                res["error"] = json.dumps(o["error"])[:300]
            if o.get("usage"):
                res["usage"] = o["usage"]
            if o.get("timings"):
                res["timings"] = o["timings"]
            if o.get("kvbound"):
                res["kvbound"] = o["kvbound"]
            for ch in o.get("choices") or []:
                d = ch.get("delta") or {}
                got = False
                if d.get("content"):
                    res["content"] += d["content"]
                    got = True
                if d.get("reasoning_content"):
                    got = True
                for tc in d.get("tool_calls") or []:
                    got = True
                    k = tc.get("index", 0)
                    cur = calls.setdefault(k, {"id": "", "type": "function",
                                               "function": {"name": "", "arguments": ""}})
                    if tc.get("id"):
                        cur["id"] = tc["id"]
                    f = tc.get("function") or {}
                    if f.get("name"):
                        cur["function"]["name"] += f["name"]
                    if f.get("arguments"):
                        cur["function"]["arguments"] += f["arguments"]
                if got and res["ttft_s"] is None:
                    res["ttft_s"] = time.perf_counter() - t0
        res["tool_calls"] = [calls[k] for k in sorted(calls)]
    except (OSError, http.client.HTTPException, ValueError) as e:
        res["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        c.close()
        res["total_s"] = time.perf_counter() - t0
        if res["ttft_s"] is None:
            res["ttft_s"] = res["total_s"]
    return res


def read_counts(res):
    """(prompt_tokens, read_tokens, cached_tokens): llama-server's timings
    when present, else usage."""
    u = res["usage"] or {}
    prompt = u.get("prompt_tokens")
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
    t = res["timings"]
    if t and t.get("prompt_n") is not None and t["prompt_n"] >= 0:
        return prompt, t["prompt_n"], t.get("cache_n", cached)
    if prompt is None:
        return None, None, cached
    return prompt, prompt - (cached or 0), cached or 0


def main():
    ap = argparse.ArgumentParser(description="one stateless agent of N turns (see the file's header)")
    ap.add_argument("url")
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--label", default="server")
    ap.add_argument("--system-words", type=int, default=230)
    ap.add_argument("--turn-words", type=int, default=70)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--tool-choice", default="auto", choices=["none", "auto"])
    ap.add_argument("--model", default=None, help="the request's model field (default: none sent)")
    ap.add_argument("--ban-vocab", metavar="MODEL.gguf", default=None,
                    help="logit_bias -100 on this model's control tokens and partial-UTF-8 tokens, every request")
    ap.add_argument("--warmup", action="store_true", help="one unmeasured short request first")
    ap.add_argument("--timeout", type=float, default=3600.0)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    host, port = u.hostname, u.port or 80
    path = "/v1/chat/completions"

    bias = None
    if a.ban_vocab:
        bias = {str(i): -100 for i in banned_tokens(a.ban_vocab)}

    def body(messages, max_tokens, tools=True):
        b = {"messages": messages, "stream": True, "stream_options": {"include_usage": True},
             "temperature": 0, "max_tokens": max_tokens, "ignore_eos": True}
        if tools:
            b["tools"] = TOOLS
            b["tool_choice"] = a.tool_choice
        if a.model:
            b["model"] = a.model
        if bias:
            b["logit_bias"] = bias
        return b

    if a.warmup:
        w = post_stream(host, port, path, body([{"role": "user", "content":
                        "A warm-up request that shares no prefix with the measured ones."}], 2, tools=False),
                        a.timeout)
        if w["error"]:
            print("warm-up failed: " + w["error"], file=sys.stderr)
            sys.exit(1)

    messages = [{"role": "system", "content": system_prompt(a.system_words)},
                {"role": "user", "content": user_message(1, a.turn_words)}]
    rows = []
    errors = 0
    for turn in range(1, a.turns + 1):
        res = post_stream(host, port, path, body(messages, a.max_tokens), a.timeout)
        prompt, read, cached = read_counts(res)
        row = {"label": a.label, "turn": turn, "prompt_tokens": prompt, "read_tokens": read,
               "cached_tokens": cached, "ttft_s": round(res["ttft_s"], 4), "total_s": round(res["total_s"], 4)}
        if res["usage"] and res["usage"].get("completion_tokens") is not None:
            row["completion_tokens"] = res["usage"]["completion_tokens"]
        if res["kvbound"] and isinstance(res["kvbound"], dict) and "implicit" in res["kvbound"]:
            row["implicit"] = res["kvbound"]["implicit"]
        if res["error"]:
            row["error"] = res["error"]
            errors += 1
        print(json.dumps(row), flush=True)
        rows.append(row)
        if res["error"]:
            break
        answer = {"role": "assistant", "content": res["content"]}
        if res["tool_calls"]:
            answer["tool_calls"] = res["tool_calls"]
        messages.append(answer)
        if res["tool_calls"]:
            for call in res["tool_calls"]:
                messages.append(tool_result(turn + 1, call, a.turn_words))
        else:
            messages.append({"role": "user", "content": user_message(turn + 1, a.turn_words)})

    ttft = [r["ttft_s"] for r in rows]
    k = min(5, len(rows))
    reads = [r["read_tokens"] for r in rows if r["read_tokens"] is not None]
    summary = {"label": a.label, "summary": True, "turns": len(rows),
               "read_tokens_total": sum(reads) if reads else None,
               "prompt_tokens_last": rows[-1]["prompt_tokens"] if rows else None,
               "ttft_total_s": round(sum(ttft), 3),
               "ttft_median_first_s": round(statistics.median(ttft[:k]), 4) if rows else None,
               "ttft_median_last_s": round(statistics.median(ttft[-k:]), 4) if rows else None,
               "ttft_last_s": ttft[-1] if rows else None,
               "total_s": round(sum(r["total_s"] for r in rows), 3),
               "first_turns": "1-%d" % k, "last_turns": "%d-%d" % (len(rows) - k + 1, len(rows)),
               "errors": errors}
    print(json.dumps(summary), flush=True)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
