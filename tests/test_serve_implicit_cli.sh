#!/bin/sh
# test_serve_implicit_cli.sh BUILD_DIR — implicit sessions in `kvbound serve`
# (issue 49 part 1): a chat request without session_id whose messages begin
# with a conversation the server served resumes its state at a checkpoint
# and reads only the rest. On a random-weight qwen2 with the real Qwen2.5
# vocabulary and the tools template of test_serve_agents_cli.sh (less the
# tool result's id, which a client's calls make differ run to run), through
# tests/serve_implicit.py (the clients; each case prints "ok" or why not):
#   - implicit_equals_session_every_policy_POLICY: for every policy
#     `kvbound policies` lists (full on a server run with --policy full;
#     under make asan three and full, under make tsan streaming alone), a
#     10-turn chat (a system message, one tool, two forced calls and their
#     results, three streamed turns, budget 64, 12 tokens a turn, greedy with
#     frequency_penalty 1, ignore_eos) sent statelessly equals the same chat
#     sent with session_id answer for answer; from turn 2 each stateless turn
#     resumed the previous turn's checkpoint and read (prompt_tokens -
#     cached_tokens) at most the session turn's prompt_tokens + 2;
#   - implicit_reasoning_dropped_and_edit_resume_from_checkpoint: a client
#     that drops the last answer's reasoning_content (and makes one up for an
#     earlier answer) resumes the latest checkpoint; one that edits its last
#     user message resumes the one before it (fewer messages covered), and
#     both answers equal a session_id session sent the same chat;
#   - implicit_prefill_not_resumed: a chat ending with an assistant message
#     after a served history is not resumed, the same without it is;
#   - implicit_tool_argument_key_order_ignored: a call's arguments sent back
#     in another key order (content trimmed) resume the latest checkpoint, and
#     the next answer equals a session_id session's sent the same;
#   - implicit_tenants_never_cross: --api-key-file with two keys; the second
#     tenant, or the first with another cache_salt, sending the first's
#     conversation gets cached_tokens 0 and resumed null; the first with its
#     own salt resumes;
#   - implicit_survives_restart: turns 1-3, kill -9, a restart on the same
#     --sessions, turn 4 resumes turn 3's checkpoint and equals an
#     uninterrupted server's;
#   - implicit_haproxy_two_replicas: two replicas on one Redis behind haproxy
#     (round robin): a 6-turn stateless chat resumes on every turn from 2 on
#     and equals a single replica's (Redis or haproxy missing: skipped, a
#     failure under KVB_REQUIRE_REDIS=1);
#   - implicit_retention_flags_*: --checkpoints 0 never resumes,
#     --checkpoint-max 2 forgets the oldest conversation after three others,
#     --help lists the four flags, bad values are refused naming the flag;
#   - implicit_metrics_move: kvbound_implicit_* and kvbound_checkpoint*;
#   - implicit_completions_continuation_equals_session: a /v1/completions
#     prompt continued statelessly (prompt + returned text + more) resumes and
#     equals the same sent with session_id;
#   - implicit_hybrid_*: the same on tiny-qwen35 (issue 50: Gated DeltaNet layers
#     with a recurrent state): stateless equals session_id under streaming,
#     h2o, snapkv and full; a checkpoint restored after kill -9 carries the
#     state (turn 4 equals an uninterrupted server's); the session's JSON
#     counts it (recurrent_layers, state_bytes within kv_bytes);
#   - implicit_lfm2_*: the same on tiny-lfm2 (issue 51: short-conv layers, whose
#     state is their last inputs), under streaming and h2o;
#   - implicit_granitehybrid_*: the same on tiny-granitehybrid (issue 51: Mamba-2
#     layers, whose state is the scan's and the conv's), under streaming and h2o;
#   - implicit_nemotron_h_*: the same on tiny-nemotron-h under streaming, and on
#     tiny-nemotron-h-moe under h2o;
#   - implicit_openai_client_stateless_agent (tests/serve/stateless_agent.mjs)
#     and implicit_readme_agent_loop_runs_as_written (the README's block
#     marked agent-example).
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/serve_lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
QV="$D/tokenizers/qwen2.5/qwen2.5-0.5b-instruct.vocab.gguf"
TM="$HERE/jinja/templates/chatml_tools.jinja"
serve_ready serve_implicit "$QV" "the clients are Python" || exit $SERVE_RC
"$K" mkmodel --shape tiny-qwen2 --type q8_0 --vocab "$QV" -o "$T/q0.gguf" > /dev/null 2>&1
# the template less the tool result's id: a stateless chat and its session_id twin get calls of other ids
sed 's/ id="{{ m.tool_call_id }}"//' "$TM" > "$T/tools.jinja"
python3 "$HERE/jinja/gguf_set_template.py" "$T/q0.gguf" "$T/tools.jinja" "$T/q.gguf" > /dev/null 2>&1
CL="python3 $HERE/serve_implicit.py"
# client NAME CASE ARGS...: runs a case of serve_implicit.py, NAME ok when it prints "ok", else its lines
client() {
    name=$1; shift
    $CL "$@" > "$T/$name.out" 2>&1
    if [ "$(cat "$T/$name.out")" = ok ]; then ok "$name"; else ko "$name" "$(head -c 1500 "$T/$name.out")"; fi
}
ARGS="-m $T/q.gguf --budget 64 -t 1"

# every bounded policy on one server (kv_policy and kv_budget per request), full on its own
start p $ARGS --sessions "$T/sp"
[ -n "$URL" ] || { ko implicit_server_starts "$(tail -n 3 "$T/p.log")"; cli_summary; exit; }
P=$URL; PP=$PID
# make asan (KVB_TEST_QUICK): three policies of each kind (a window, heavy hitters, prompt compression) and full; make
# tsan (KVB_TEST_TSAN): the streaming case alone, its connection threads, scheduler and store worker (checkpoint reads
# and writes) under ThreadSanitizer, which runs each case ten times slower; make test: all of them
POLS=$("$K" policies | awk '$1 != "full" { print $1 }')
[ -n "${KVB_TEST_QUICK:-}" ] && POLS="streaming h2o snapkv"
[ -n "${KVB_TEST_TSAN:-}" ] && POLS=streaming
for pol in $POLS; do
    client "implicit_equals_session_every_policy_$pol" policies "$P" "$pol"
done
if [ -n "${KVB_TEST_TSAN:-}" ]; then kill $PP 2>/dev/null; cli_summary; exit; fi
start full $ARGS --policy full --sessions "$T/sfull"
client implicit_equals_session_every_policy_full policies "$URL" server
kill $PID 2>/dev/null

client implicit_reasoning_dropped_and_edit_resume_from_checkpoint reasoning_edit "$P"
client implicit_prefill_not_resumed prefill "$P"
client implicit_tool_argument_key_order_ignored key_order "$P"
client implicit_completions_continuation_equals_session completions "$P"
client implicit_metrics_move metrics "$P"

# the official openai client, and the README's agent loop as written (its port replaced)
if command -v node > /dev/null && [ -d "$HERE/serve/node_modules/openai" ]; then
    out=$(timeout 120 node "$HERE/serve/stateless_agent.mjs" "$P" 8 2>&1)
    if [ "$(echo "$out" | tail -n 1)" = ok ]; then ok implicit_openai_client_stateless_agent
    else ko implicit_openai_client_stateless_agent "$(echo "$out" | head -c 1500)"; fi
    mkdir -p "$T/readme"
    ln -s "$HERE/serve/node_modules" "$T/readme/node_modules"
    awk '/agent-example/ { want = 1; next } want && /^```/ { if (inb) exit; inb = 1; next } inb { print }' "$HERE/../README.md" |
        sed "s#http://127\.0\.0\.1:8080#$P#g" > "$T/readme/agent.mjs"
    (cd "$T/readme" && timeout 120 node agent.mjs > "$T/readme.out" 2>&1); rc=$?
    # its lines: "turn N: P prompt tokens, C cached, resumed ID"; from the second on, C > 0 and an ID
    if [ $rc -eq 0 ] && grep -q "$P" "$T/readme/agent.mjs" && awk '/^turn [0-9]+:/ { n++; if (n >= 2 && ($6 + 0 <= 0 || $9 == "null")) bad = 1 } END { exit !(n >= 3 && !bad) }' "$T/readme.out"
    then ok implicit_readme_agent_loop_runs_as_written
    else ko implicit_readme_agent_loop_runs_as_written "exit $rc: $(head -c 800 "$T/readme.out")"; fi
elif [ "${KVB_REQUIRE_NPM:-0}" = 1 ]; then ko implicit_openai_client "node or tests/serve/node_modules missing (KVB_REQUIRE_NPM=1)"
else sk implicit_openai_client "node or tests/serve/node_modules missing (npm install --prefix tests/serve)"; fi
kill $PP

# tenants: two keys
printf 'key-one\nkey-two\n' > "$T/keys"
start ten $ARGS --sessions "$T/sten" --api-key-file "$T/keys"
client implicit_tenants_never_cross tenants "$URL" key-one key-two
kill $PID 2>/dev/null

# restart_case NAME TAG SERVER_ARGS...: kill -9 and a restart on the same store: turn 4 resumes turn 3's checkpoint;
# the reference: an uninterrupted server. The kill comes right after turn 3's answer: a checkpoint is in the store once
# its turn is answered, as a session's turn
restart_case() {
    rc_name=$1 rc_tag=$2; shift 2
    start "${rc_tag}ref" "$@" --sessions "$T/s${rc_tag}ref"
    $CL chat "$URL" 6 "$T/${rc_tag}ref.json" > "$T/${rc_tag}ref.out" 2>&1
    kill $PID 2>/dev/null
    start "${rc_tag}1" "$@" --sessions "$T/s${rc_tag}"
    $CL chat "$URL" 3 "$T/${rc_tag}3.json" > "$T/${rc_tag}3.out" 2>&1
    kill -9 $PID; wait $PID 2>/dev/null
    start "${rc_tag}2" "$@" --sessions "$T/s${rc_tag}"
    $CL chat "$URL" 4 "$T/${rc_tag}4.json" "$T/${rc_tag}3.json" > "$T/${rc_tag}4.out" 2>&1
    if [ "$(cat "$T/${rc_tag}ref.out" "$T/${rc_tag}3.out" "$T/${rc_tag}4.out")" != "$(printf 'ok\nok\nok')" ]; then
        ko "$rc_name" "the chats: $(cat "$T/${rc_tag}ref.out" "$T/${rc_tag}3.out" "$T/${rc_tag}4.out" | head -c 600)"
    else client "$rc_name" compare "$T/${rc_tag}ref.json" "$T/${rc_tag}4.json" 2; fi
    kill $PID 2>/dev/null
}
restart_case implicit_survives_restart r $ARGS   # its reference ($T/rref.json) is also the haproxy case's

# A model with recurrent layers, as the dense one above: hybrid_case PREFIX SHAPE TAG "POLICIES" REC_LAYERS MIN_STATE FULL.
# Stateless equals session_id under each of POLICIES (and full on its own server when FULL is 1); the session's JSON
# counts the state (recurrent_layers REC_LAYERS, state_bytes at least MIN_STATE, within kv_bytes; REC_LAYERS 0: neither field,
# a model without recurrent layers); a checkpoint
# restored after kill -9 carries the state (turn 4 equals an uninterrupted server's).
hybrid_case() {
    hc_p=$1 hc_shape=$2 hc_tag=$3 hc_pols=$4 hc_rec=$5 hc_state=$6 hc_full=$7
    # each case's own files and session stores (a tag used twice would restore another model's sessions)
    case " $HC_TAGS " in *" $hc_tag "*) ko "${hc_p}_own_tag" "tag '$hc_tag' is another case's"; return ;; esac
    HC_TAGS="$HC_TAGS $hc_tag"
    "$K" mkmodel --shape "$hc_shape" --type q8_0 --vocab "$QV" -o "$T/${hc_tag}0.gguf" > /dev/null 2>&1
    python3 "$HERE/jinja/gguf_set_template.py" "$T/${hc_tag}0.gguf" "$T/tools.jinja" "$T/${hc_tag}.gguf" > /dev/null 2>&1
    hc_args="-m $T/${hc_tag}.gguf --budget 64 -t 1"
    start "${hc_tag}s" $hc_args --sessions "$T/s${hc_tag}"
    if [ -z "$URL" ]; then ko "${hc_p}_server_starts" "$(tail -n 3 "$T/${hc_tag}s.log")"; return; fi
    hc_url=$URL hc_pid=$PID
    for pol in $hc_pols; do client "${hc_p}_equals_session_$pol" policies "$hc_url" "$pol"; done
    hc_js=$(curl -s "$hc_url/v1/chat/completions" -H 'Content-Type: application/json' \
                -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"session_id":"hybrid-state"}' > /dev/null;
            curl -s "$hc_url/v1/sessions/hybrid-state")
    if echo "$hc_js" | python3 -c 'import json,sys; d=json.load(sys.stdin); r, m = int(sys.argv[1]), int(sys.argv[2]); sys.exit(not (d.get("recurrent_layers", 0) == r and d.get("state_bytes", 0) >= m and d["kv_bytes"] >= d.get("state_bytes", 0) and d["kv_bytes"] > 0 and (r > 0) == ("recurrent_layers" in d)))' "$hc_rec" "$hc_state"
    then ok "${hc_p}_session_json_counts_state"; else ko "${hc_p}_session_json_counts_state" "$(echo "$hc_js" | head -c 400)"; fi
    kill $hc_pid 2>/dev/null
    if [ "$hc_full" = 1 ]; then
        start "${hc_tag}f" $hc_args --policy full --sessions "$T/s${hc_tag}f"
        client "${hc_p}_equals_session_full" policies "$URL" server
        kill $PID 2>/dev/null
    fi
    restart_case "${hc_p}_checkpoint_restores_the_state" "${hc_tag}r" $hc_args
}
# qwen35 (Gated DeltaNet layers with a recurrent state beside attention, issue 50): a window, heavy hitters, prompt
# compression and full; 3 recurrent layers, state 3 x 4 x (4 x 16 x 16 + 3 x 128) bytes
hybrid_case implicit_hybrid tiny-qwen35 h "streaming h2o snapkv" 3 16896 1
# LFM2 (tiny-lfm2: 4 short-conv layers, their state the last 2 rows of B*x, beside 2 attention layers, issue 51): a
# window and heavy hitters; state 4 x 2 x 64 floats
hybrid_case implicit_lfm2 tiny-lfm2 l "streaming h2o" 4 2048 0
# GLM-4.5 (tiny-glm4moe: attention only, no state; sigmoid experts beside a shared expert, partial RoPE, an MTP layer
# loaded and never run, issue 51): a window and heavy hitters; no recurrent layers
hybrid_case implicit_glm4moe tiny-glm4moe g "streaming h2o" 0 0 0
# deepseek2 (tiny-deepseek2: latent attention, one latent row per token for every head, issue 51): no recurrent state; the
# policies' choices among latent rows resume exactly, and a checkpoint restored after kill -9 continues
hybrid_case implicit_deepseek2 tiny-deepseek2 d "streaming h2o" 0 0 0
# Granite 4.0-H (tiny-granitehybrid: 3 Mamba-2 layers, their state the scan's 128 x 16 floats and the conv's last 3 rows of
# xBC, beside 1 attention layer without RoPE, issue 51): a window and heavy hitters; state 3 x 4 x (128 x 16 + 3 x 192) bytes
hybrid_case implicit_granitehybrid tiny-granitehybrid gh "streaming h2o" 3 31488 0
# Nemotron-H (tiny-nemotron-h: its Mamba-2, attention and FFN blocks as 3 Mamba-2 layers and 1 attention layer, 3 of them
# with an FFN block after): a window; the same state
hybrid_case implicit_nemotron_h tiny-nemotron-h n "streaming" 3 31488 0
# Nemotron-H MoE (tiny-nemotron-h-moe: the same blocks with sigmoid-routed experts on the FFN blocks): heavy hitters
hybrid_case implicit_nemotron_h_moe tiny-nemotron-h-moe e "h2o" 3 31488 0

# two replicas on one Redis behind haproxy, round robin: every turn from 2 on on the other replica than its previous
if need_tool implicit_haproxy_two_replicas haproxy KVB_REQUIRE_REDIS "the load balancer; Debian haproxy"; then
    R=${KVB_TEST_REDIS:-}
    if [ -z "$R" ] && start_redis; then R=$RURL; fi
    if [ -z "$R" ]; then
        if [ "${KVB_REQUIRE_REDIS:-0}" = 1 ]; then ko implicit_haproxy_two_replicas "no Redis (KVB_TEST_REDIS unset, redis-server not installed)"
        else sk implicit_haproxy_two_replicas "no Redis (KVB_TEST_REDIS unset, redis-server not installed)"; fi
    else
        start h1 $ARGS --sessions "$R" --max-connections-per-ip 256; H1=${URL##*:}; U1=$URL
        start h2 $ARGS --sessions "$R" --max-connections-per-ip 256; H2=${URL##*:}; U2=$URL
        HP=$(free_port)
        cat > "$T/haproxy.cfg" <<EOF
global
    maxconn 256
defaults
    mode http
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    option http-server-close
frontend api
    bind 127.0.0.1:$HP
    default_backend kvbound
backend kvbound
    balance roundrobin
    server h1 127.0.0.1:$H1
    server h2 127.0.0.1:$H2
EOF
        haproxy -db -f "$T/haproxy.cfg" > "$T/haproxy.log" 2>&1 &
        PIDS="$PIDS $!"
        for _ in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$HP/health" && break; sleep 0.1; done
        $CL chat "http://127.0.0.1:$HP" 6 "$T/lb.json" > "$T/lb.out" 2>&1
        n1=$(curl -s "$U1/metrics" | awk '$1 == "kvbound_requests_total" { print $2 + 0 }')
        n2=$(curl -s "$U2/metrics" | awk '$1 == "kvbound_requests_total" { print $2 + 0 }')
        if [ "$(cat "$T/lb.out")" != ok ] || [ "${n1:-0}" -lt 3 ] || [ "${n2:-0}" -lt 3 ]; then
            ko implicit_haproxy_two_replicas "the chat: $(head -c 400 "$T/lb.out"); requests per replica $n1 and $n2 (want 3 each)"
        else client implicit_haproxy_two_replicas compare "$T/rref.json" "$T/lb.json" 2; fi
    fi
fi

# retention: --checkpoints 0 turns implicit sessions off; --checkpoint-max 2 keeps two in the store; --checkpoint-ttl 1 frees an idle server's memory
start off $ARGS --sessions "$T/soff" --checkpoints 0
if [ -n "$URL" ]; then client implicit_retention_flags_checkpoints_0_never_resumes checkpoints_off "$URL"; kill $PID 2>/dev/null
else ko implicit_retention_flags_checkpoints_0_never_resumes "the server did not start: $(tail -n 2 "$T/off.log" | tr '\n' ' ')"; fi
start max $ARGS --sessions "$T/smax" --checkpoint-max 2
if [ -n "$URL" ]; then client implicit_retention_flags_checkpoint_max_2_forgets_the_oldest checkpoint_max "$URL"; kill $PID 2>/dev/null
else ko implicit_retention_flags_checkpoint_max_2_forgets_the_oldest "the server did not start: $(tail -n 2 "$T/max.log" | tr '\n' ' ')"; fi
start ttl $ARGS --sessions "$T/sttl" --checkpoint-ttl 1 --prefix-cache 0   # no shared prefix holding pages
if [ -n "$URL" ]; then client implicit_retention_flags_checkpoint_ttl_1_frees_memory checkpoint_ttl "$URL"; kill $PID 2>/dev/null
else ko implicit_retention_flags_checkpoint_ttl_1_frees_memory "the server did not start: $(tail -n 2 "$T/ttl.log" | tr '\n' ' ')"; fi
"$K" serve --help > "$T/help.txt" 2>&1
miss=""
for f in --checkpoints --checkpoint-max --checkpoint-mb --checkpoint-ttl; do grep -q -- "^ *$f " "$T/help.txt" || miss="$miss $f"; done
if [ -z "$miss" ]; then ok implicit_retention_flags_in_help; else ko implicit_retention_flags_in_help "--help lacks$miss"; fi
bad=""
for fv in "--checkpoints -1" "--checkpoints x" "--checkpoint-max -1" "--checkpoint-mb -1" "--checkpoint-ttl -1" "--checkpoint-ttl 1.5x"; do
    set -- $fv
    timeout 20 "$K" serve -m "$T/q.gguf" --port 0 --sessions "$T/sbad" "$1" "$2" > "$T/bad.out" 2>&1; rc=$?
    if [ $rc -eq 0 ] || [ $rc -ge 124 ] || ! grep -q -- "$1" "$T/bad.out"; then bad="$bad [$fv: exit $rc, $(head -c 150 "$T/bad.out" | tr '\n' ' ')]"; fi
done
# and good ones start a server (an unknown flag too is refused naming it)
start good $ARGS --sessions "$T/sgood" --checkpoints 2 --checkpoint-max 10 --checkpoint-mb 16 --checkpoint-ttl 60
[ -n "$URL" ] || bad="$bad [good values refused: $(tail -n 2 "$T/good.log" | tr '\n' ' ')]"
kill $PID 2>/dev/null
if [ -z "$bad" ]; then ok implicit_retention_flags_bad_values_refused_by_name; else ko implicit_retention_flags_bad_values_refused_by_name "$bad"; fi
cli_summary
