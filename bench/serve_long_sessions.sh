#!/bin/sh
# serve_long_sessions.sh MODEL.gguf LLAMA_SERVER [TURNS] [POOL_MB] — sixteen
# long sessions at once, each past 8K tokens of history (TURNS turns of 500
# words and 32 generated tokens each; 14 turns pass 8K tokens with the
# Llama 2 vocabulary; `kvbound mkmodel --shape tiny-32k` is trained to 32K
# so that llama-server does not cap its slots): kvbound serve keeps every session on the server
# (session_id) with a streaming budget of 1024 tokens in a pool of POOL_MB
# (default 640); llama-server, whose clients resend each conversation's
# whole history every turn as clients of a stateless server must, runs
# twice: with a context of 16 x 1024 tokens (the same KV tokens as
# kvbound's budgets), and with 16 x 12288 (enough for the whole history).
# Prints the load JSON of each run, kvbound's pool and one session's state,
# and llama-server's KV buffer size and first error.
set -u
M=$1; PEER=$2; TURNS=${3:-14}; POOL=${4:-640}
K=${K:-build/kvbound}
HERE=$(dirname "$0")
T=$(mktemp -d)
trap 'kill $(cat "$T"/*.pid 2>/dev/null) 2>/dev/null; rm -rf "$T"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_up() { for _ in $(seq 1 600); do curl -s "http://127.0.0.1:$1/health" 2>/dev/null | grep -q ok && return 0; sleep 0.5; done; return 1; }
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(date -u +%Y-%m-%d)"
p=$(free_port)
"$K" serve -m "$M" --port "$p" --parallel 16 -t 2 --policy streaming --budget 1024 --pool-mb "$POOL" --max-tokens 64 \
    --sessions "$T/s" > "$T/k.log" 2>&1 & echo $! > "$T/k.pid"
wait_up "$p" || { echo "kvbound serve did not start: $(tail -n 2 "$T/k.log")" >&2; exit 1; }
python3 "$HERE/serve_load.py" "http://127.0.0.1:$p" --clients 16 --requests "$TURNS" --prompt-words 500 --max-tokens 32 --session \
    --label "kvbound serve, sessions"
curl -s "http://127.0.0.1:$p/metrics" | grep -E '^kvbound_(pool_bytes_used|pool_bytes_free|sessions_persisted|sessions_in_memory) '
sid=$(curl -s "http://127.0.0.1:$p/metrics" > /dev/null; python3 - "$T/s/sessions.sqlite" <<'PY'
import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute("select id from sessions order by id limit 1").fetchone()[0])
PY
)
curl -s "http://127.0.0.1:$p/v1/sessions/$sid"
kill "$(cat "$T/k.pid")"; wait "$(cat "$T/k.pid")" 2>/dev/null; rm -f "$T/k.pid"
for ctx in 16384 196608; do
    p=$(free_port)
    "$PEER" -m "$M" --port "$p" --parallel 16 -t 2 -c "$ctx" --no-webui > "$T/l.log" 2>&1 & echo $! > "$T/l.pid"
    wait_up "$p" || { echo "llama-server did not start: $(tail -n 2 "$T/l.log")" >&2; exit 1; }
    python3 "$HERE/serve_load.py" "http://127.0.0.1:$p" --clients 16 --requests "$TURNS" --prompt-words 500 --max-tokens 32 --resend \
        --label "llama-server, history resent, -c $ctx"
    grep -m 2 -iE 'KV buffer size|KV self size' "$T/l.log" | sed 's/^/# llama-server log: /'
    grep -m 1 -iE 'exceeds the available context' "$T/l.log" | sed 's/^/# llama-server log: /'
    kill "$(cat "$T/l.pid")"; wait "$(cat "$T/l.pid")" 2>/dev/null; rm -f "$T/l.pid"
done
