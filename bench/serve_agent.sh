#!/bin/sh
# serve_agent.sh MODEL.gguf LLAMA_SERVER [TURNS] — one stateless agent of
# TURNS turns (default 40) against kvbound serve, then against llama.cpp's
# llama-server on the same GGUF file and chat template (the file's; make the
# models with bench/serve_agent_models.sh OUTDIR). The agent is
# bench/agent_load.py: it never sends session_id; every turn it sends again
# the same ~300-token system prompt, two tools, the whole history (each
# answer exactly as streamed back) and one new ~90-token message; 32 tokens
# per answer (temperature 0, ignore_eos), the model's control and
# partial-UTF-8 tokens banned (--ban-vocab) so both servers answer plain text.
# Each server: 2 threads, one slot (--parallel 1), one unmeasured warm-up
# request first (it shares only the template's opening with the agent's).
#   kvbound serve: --policy streaming --budget 1024, its own temp sessions dir;
#   llama-server:  --jinja, -c big enough for the whole history, --no-webui.
# Both get tool_choice none: the tools are in the prompt all the same and the
# answer is plain text (no tool-call parser holding text back, which would
# move the first text of the stream; llama-server's answers 500 to most
# random text under auto).
# KVB_SERVE_ARGS adds flags to kvbound serve; LLAMA_SERVER_ARGS to
# llama-server. LLAMA_SERVER_ALT="FLAGS" runs llama-server a second time with
# FLAGS added (label "llama-server FLAGS"), e.g. "--ctx-checkpoints 0" (no
# context checkpoints of a sliding-window cache; llama.cpp PR 15293).
# llama-server re-reads a sliding-window model's whole prompt ("forcing full
# prompt re-processing") only where its window cache (the window plus one
# batch of positions) and its checkpoints no longer reach back to where the
# new prompt leaves the cached one; an agent that only appends does not get
# there (3-turn smoke run, window 8: each turn's new tokens only, with and
# without checkpoints).
# LLAMA_SERVER "-" runs kvbound serve alone.
# Prints the machine line, then per server one JSON object per turn
# (prompt_tokens, read_tokens: the prompt tokens the server read, ttft_s,
# total_s), its summary object, and for llama-server a line counting its
# log's "forcing full prompt re-processing" and "restored context
# checkpoint" messages.
set -u
M=$1; PEER=$2; TURNS=${3:-40}
K=${K:-build/kvbound}
HERE=$(dirname "$0")
T=$(mktemp -d)
trap 'kill $(cat "$T"/*.pid 2>/dev/null) 2>/dev/null; rm -rf "$T"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_up() { for _ in $(seq 1 600); do curl -s "http://127.0.0.1:$1/health" 2>/dev/null | grep -q ok && return 0; sleep 0.5; done; return 1; }
agent() { # agent PORT LABEL TOOL_CHOICE
    python3 "$HERE/agent_load.py" "http://127.0.0.1:$1" --turns "$TURNS" --label "$2" --tool-choice "$3" --ban-vocab "$M" --warmup
}
CTX=$((2048 + TURNS * 256)) # ~190 tokens a turn with this vocabulary and template
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(date -u +%Y-%m-%d)"
echo "# model: $M ($(basename "$M")), $TURNS turns"
p=$(free_port)
"$K" serve -m "$M" --port "$p" --parallel 1 -t 2 --policy streaming --budget 1024 --pool-mb 2048 --sessions "$T/s" ${KVB_SERVE_ARGS:-} \
    > "$T/k.log" 2>&1 & echo $! > "$T/k.pid"
wait_up "$p" || { echo "kvbound serve did not start: $(tail -n 2 "$T/k.log")" >&2; exit 1; }
agent "$p" "kvbound serve" none
kill "$(cat "$T/k.pid")"; wait "$(cat "$T/k.pid")" 2>/dev/null; rm -f "$T/k.pid"
[ "$PEER" = - ] && exit 0
run_llama() { # run_llama LABEL EXTRA_FLAGS
    p=$(free_port)
    "$PEER" -m "$M" --port "$p" --parallel 1 -t 2 -c "$CTX" --jinja --no-webui ${LLAMA_SERVER_ARGS:-} $2 > "$T/l.log" 2>&1 & echo $! > "$T/l.pid"
    wait_up "$p" || { echo "llama-server did not start: $(tail -n 2 "$T/l.log")" >&2; exit 1; }
    agent "$p" "$1" none
    kill "$(cat "$T/l.pid")"; wait "$(cat "$T/l.pid")" 2>/dev/null; rm -f "$T/l.pid"
    printf '{"label": "%s", "log_full_reprocessing": %d, "log_checkpoint_restored": %d}\n' "$1" \
        "$(grep -c 'forcing full prompt re-processing' "$T/l.log")" "$(grep -c 'restored context checkpoint' "$T/l.log")"
}
run_llama "llama-server" ""
[ -n "${LLAMA_SERVER_ALT:-}" ] && run_llama "llama-server $LLAMA_SERVER_ALT" "$LLAMA_SERVER_ALT"
exit 0
