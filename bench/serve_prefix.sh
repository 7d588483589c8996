#!/bin/sh
# serve_prefix.sh MODEL.gguf [SESSIONS [PREFIX_TOKENS [ROUNDS]]] — shared
# prefixes in kvbound serve (docs/BENCHMARKS.md "Shared prefixes"): SESSIONS
# (default 32) sessions whose first turn carries the same system prompt of
# about PREFIX_TOKENS tokens (default 1000; Dracula's text, cut by
# /tokenize) and a user message of their own, 4 at a time, one turn each
# (tests/serve_prefix_load.py: greedy, 16 tokens, streamed), under
# streaming --budget 1024, 2 threads. The server runs with sharing (the
# default --prefix-cache 8) and with --prefix-cache 0, alternated ROUNDS
# times (default 1). Prints one JSON object per run: pool pages in use
# and shared once every session has had its first turn, their ratio to
# one unshared session's pages, the time to first token (median of the turns that read their whole
# prompt, and of those that forked the prefix), and whether every text equals the
# unshared run's of the same round.
set -u
M=$1; N=${2:-32}; PT=${3:-1000}; ROUNDS=${4:-1}
K=${K:-build/kvbound}
HERE=$(cd "$(dirname "$0")" && pwd)
D=${KVB_SHARED_DATA:-$HERE/../../shared/data}
T=$(mktemp -d)
trap 'kill $(cat "$T"/*.pid 2>/dev/null) 2>/dev/null; rm -rf "$T"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
serve() { # serve NAME ARGS...: a server on a free port, URL set
    name=$1; shift
    p=$(free_port)
    "$K" serve -m "$M" --port "$p" -t 2 --policy streaming --budget 1024 --pool-mb 2048 --sessions "$T/s-$name" "$@" > "$T/$name.log" 2>&1 &
    echo $! > "$T/$name.pid"
    URL="http://127.0.0.1:$p"
    for _ in $(seq 1 600); do
        curl -s "$URL/health" 2>/dev/null | grep -q ok && return 0
        kill -0 "$(cat "$T/$name.pid")" 2>/dev/null || break
        sleep 0.5
    done
    echo "kvbound serve did not start: $(tail -n 2 "$T/$name.log")" >&2
    exit 1
}
stop() { kill "$(cat "$T/$1.pid")"; wait "$(cat "$T/$1.pid")" 2>/dev/null; rm -f "$T/$1.pid"; }
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(date -u +%Y-%m-%d)"
# the system prompt: Dracula's words until /tokenize counts PREFIX_TOKENS
serve cut --prefix-cache 0
python3 - "$URL" "$D/text/pg345_dracula.txt" "$PT" > "$T/sys.txt" <<'EOF'
import json, sys, urllib.request
url, path, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
words = open(path, encoding="utf-8").read().split("CHAPTER I", 2)[-1].split()
def count(t):
    r = urllib.request.Request(url + "/tokenize", data=json.dumps({"content": t}).encode(), headers={"Content-Type": "application/json"})
    return len(json.load(urllib.request.urlopen(r))["tokens"])
lo, hi = 1, len(words)
while lo < hi:
    mid = (lo + hi + 1) // 2
    if count(" ".join(words[:mid])) <= want: lo = mid
    else: hi = mid - 1
print(" ".join(words[:lo]))
EOF
stop cut
for r in $(seq 1 "$ROUNDS"); do
    for mode in shared unshared; do
        if [ $mode = shared ]; then serve "$mode$r"; else serve "$mode$r" --prefix-cache 0; fi
        python3 "$HERE/../tests/serve_prefix_load.py" "$URL" "$T/sys.txt" "$N" 1 4 16 > "$T/$mode$r.json" || exit 1
        stop "$mode$r"
    done
    python3 - "$T/shared$r.json" "$T/unshared$r.json" "$N" <<'EOF'
import json, statistics, sys
a, b, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
one = b["pages_after_first_turns"] / n
same = [x["content"] for x in a["turns"]] == [x["content"] for x in b["turns"]]
for label, d in (("shared", a), ("unshared", b)):
    read = [x["ttft_s"] for x in d["turns"] if x["cached_tokens"] == 0]   # turns that read the whole prompt
    skipped = [x["ttft_s"] for x in d["turns"] if x["cached_tokens"] > 0]  # turns that forked the prefix
    print(json.dumps({"run": label, "sessions": n, "prefix_tokens": max(x["cached_tokens"] for x in a["turns"]),
                      "pool_pages": d["pages_after_first_turns"], "pages_shared": d["shared_after_first_turns"],
                      "pages_one_session": round(one, 1), "ratio_to_one_session": round(d["pages_after_first_turns"] / one, 2),
                      "ttft_median_read_s": round(statistics.median(read), 3) if read else None,
                      "ttft_median_forked_s": round(statistics.median(skipped), 3) if skipped else None,
                      "cached_turns": sum(1 for x in d["turns"] if x["cached_tokens"] > 0), "errors": len(d["errors"]),
                      "texts_equal_unshared": same}))
EOF
done
