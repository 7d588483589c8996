#!/bin/sh
# serve_vs_llama.sh MODEL.gguf LLAMA_SERVER [N...] — kvbound serve against
# llama.cpp's llama-server on the same GGUF file: for each N (default 1 4 16)
# both servers run with --parallel N and 2 threads, and bench/serve_load.py
# sends the same N concurrent streaming clients (2 requests each, 48-word
# prompts, 32 generated tokens, temperature 0, ignore_eos) to each in turn,
# after one unmeasured warm-up request.
# KVB_SERVE_ARGS adds flags to kvbound serve (e.g. "--step-tokens 128").
# LLAMA_SERVER_ARGS adds flags to llama-server (e.g. "--no-repack", which
# builds whose AMX repacked matmul crashes at warm-up need).
# LLAMA_SERVER "-" runs kvbound serve alone (e.g. to alternate its options).
# Prints one JSON object per server and N (aggregate generated tok/s, p50/p99
# time to first token and inter-token latency).
set -u
M=$1; PEER=$2; shift 2
NS=${*:-1 4 16}
K=${K:-build/kvbound}
HERE=$(dirname "$0")
REQ=${KVB_LOAD_REQUESTS:-2}
T=$(mktemp -d)
trap 'kill $(cat "$T"/*.pid 2>/dev/null) 2>/dev/null; rm -rf "$T"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_up() { for _ in $(seq 1 600); do curl -s "http://127.0.0.1:$1/health" 2>/dev/null | grep -q ok && return 0; sleep 0.5; done; return 1; }
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(date -u +%Y-%m-%d)"
for N in $NS; do
    p=$(free_port)
    "$K" serve -m "$M" --port "$p" --parallel "$N" -t 2 --policy streaming --budget 1024 --pool-mb 2048 --sessions "$T/s" ${KVB_SERVE_ARGS:-} \
        > "$T/k.log" 2>&1 & echo $! > "$T/k.pid"
    wait_up "$p" || { echo "kvbound serve did not start: $(tail -n 2 "$T/k.log")" >&2; exit 1; }
    python3 "$HERE/serve_load.py" "http://127.0.0.1:$p" --clients 1 --requests 1 --max-tokens 2 --extra '{"prompt": "A warm-up request that shares no prefix with the measured ones."}' > /dev/null # warm up (weights paged in)
    python3 "$HERE/serve_load.py" "http://127.0.0.1:$p" --clients "$N" --requests "$REQ" --label "kvbound serve"
    kill "$(cat "$T/k.pid")"; wait "$(cat "$T/k.pid")" 2>/dev/null; rm -f "$T/k.pid"
    [ "$PEER" = - ] && continue
    p=$(free_port)
    "$PEER" -m "$M" --port "$p" --parallel "$N" -t 2 -c $((N * 1024)) --no-webui ${LLAMA_SERVER_ARGS:-} > "$T/l.log" 2>&1 & echo $! > "$T/l.pid"
    wait_up "$p" || { echo "llama-server did not start: $(tail -n 2 "$T/l.log")" >&2; exit 1; }
    python3 "$HERE/serve_load.py" "http://127.0.0.1:$p" --clients 1 --requests 1 --max-tokens 2 --extra '{"prompt": "A warm-up request that shares no prefix with the measured ones."}' > /dev/null
    python3 "$HERE/serve_load.py" "http://127.0.0.1:$p" --clients "$N" --requests "$REQ" --label "llama-server"
    kill "$(cat "$T/l.pid")"; wait "$(cat "$T/l.pid")" 2>/dev/null; rm -f "$T/l.pid"
done
