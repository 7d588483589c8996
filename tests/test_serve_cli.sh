#!/bin/sh
# test_serve_cli.sh BUILD_DIR — `kvbound serve` over real HTTP (curl and
# raw sockets from tests/serve_probe.py), on stories260K and on a
# random-weight qwen2 model with a real ChatML vocabulary:
#   - a completion equals `kvbound run` with the same policy at temperature 0;
#     a streamed chat equals the same chat unstreamed, in OpenAI's chunks;
#   - sessions: a second turn reads only its new text, the cache stays
#     within budget, GET/map/DELETE; after kill -9 and a restart the next
#     turn is exactly what an uninterrupted server gives; with --recall the
#     stored session holds its cold tier and the restarted turn is exact too;
#   - bad input gets its 4xx (bad JSON, wrong types, huge numbers, invalid
#     UTF-8, cut and oversized bodies, wrong key, unknown routes) and the
#     server stays up; slow clients and 64 connections at once; an unknown
#     field of /tokenize or /detokenize, and top_logprobs without logprobs,
#     are 400s naming the field; logit_bias -100 bans a token (no
#     subtraction); --chunk 1, 15, 16 and 17 start and answer;
#   - a full queue is 503 with Retry-After, a busy session 429; a dropped
#     stream returns its pages; a small pool moves idle sessions to the
#     store and brings them back.
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/serve_lib.sh"
G="$D/models/stories260K/stories260K.llamacpp.gguf"
QV="$D/tokenizers/qwen2.5/qwen2.5-0.5b-instruct.vocab.gguf"
if ! "$K" serve --help > /dev/null 2>&1; then
    skip_case serve_built "kvbound serve is not built (install libmicrohttpd-dev libcjson-dev libsqlite3-dev)"
    cli_summary
    exit
fi
if [ ! -f "$G" ] || [ ! -f "$QV" ]; then
    skip_case serve_cli "missing $G or $QV"
    cli_summary
    exit
fi
command -v curl > /dev/null || { skip_case serve_curl "curl is not installed"; cli_summary; exit; }
need_tool serve_python python3 KVB_REQUIRE_PYTHON "the probes are Python; Debian python3" || { cli_summary; exit; }
PROBE="python3 $(dirname "$0")/serve_probe.py"

post() { # post PATH JSON [curl args]: the body; the status in $T/code
    p=$1; b=$2; shift 2
    curl -s -o "$T/body" -w '%{http_code}' -H 'Content-Type: application/json' "$@" -d "$b" "$URL$p" > "$T/code"
    cat "$T/body"
}
jget() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

start a -m "$G" --sessions "$T/sa" --policy streaming --budget 64 -t 1 --max-body 65536 --queue 4
if [ -z "$URL" ]; then ko serve_starts "$(tail -n 3 "$T/a.log")"; cli_summary; exit; fi
ok serve_starts

if curl -s "$URL/health" | grep -q '"ok"' && curl -s "$URL/v1/models" | grep -q '"stories260K.llamacpp.gguf"'; then ok serve_health_models
else ko serve_health_models "$(curl -s "$URL/v1/models")"; fi

# a start that fails (here: the port is taken) leaves no ./kvbound-sessions behind; -v logs one line per
# request: method, path, status, ms, session (issue 47, item 14)
KA=$(cd "$(dirname "$K")" && pwd)/kvbound; GA=$(cd "$(dirname "$G")" && pwd)/$(basename "$G")
mkdir "$T/cwd"
(cd "$T/cwd" && "$KA" serve -m "$GA" -t 1 --port "$(echo "$HOSTPORT" | cut -d' ' -f2)" > start.log 2>&1); r=$?
if [ $r -eq 1 ] && grep -q 'cannot listen' "$T/cwd/start.log" && [ ! -e "$T/cwd/kvbound-sessions" ]; then ok serve_failed_start_leaves_no_sessions_dir
else ko serve_failed_start_leaves_no_sessions_dir "rc $r, $(ls "$T/cwd"): $(tail -n 1 "$T/cwd/start.log")"; fi
URLA=$URL; PIDA=$PID; HOSTPORTA=$HOSTPORT
start v -m "$G" --sessions "$T/sv" --policy streaming --budget 64 -t 1 -v
curl -s "$URL/health" > /dev/null
curl -s -o /dev/null -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"session_id":"vlog"}' "$URL/v1/chat/completions"
curl -s -o /dev/null "$URL/v1/sessions/vlog"
curl -s -o /dev/null "$URL/nope"
for _ in $(seq 1 20); do grep -q ' /nope ' "$T/v.log" && break; sleep 0.1; done
if grep -q '^kvbound serve: GET /health 200 [0-9]* ms session -$' "$T/v.log" &&
   grep -q '^kvbound serve: POST /v1/chat/completions 200 [0-9]* ms session vlog$' "$T/v.log" &&
   grep -q '^kvbound serve: GET /v1/sessions/vlog 200 [0-9]* ms session vlog$' "$T/v.log" &&
   grep -q '^kvbound serve: GET /nope 404 [0-9]* ms session -$' "$T/v.log" && ! grep -q ' /health ' "$T/a.log"; then ok serve_verbose_request_lines
else ko serve_verbose_request_lines "$(tail -n 5 "$T/v.log")"; fi
kill $PID 2>/dev/null
URL=$URLA; PID=$PIDA; HOSTPORT=$HOSTPORTA

# a completion equals kvbound run with the same policy at temperature 0
post /v1/completions '{"prompt":"Once upon a time","max_tokens":24,"temperature":0}' > "$T/c.json"
"$K" run -m "$G" -p "Once upon a time" -n 24 --temp 0 --policy streaming --budget 64 -t 1 > "$T/run.txt" 2> /dev/null
got=$(jget 'd["choices"][0]["text"]' < "$T/c.json")
want=$(sed 's/^Once upon a time//' "$T/run.txt")
if [ "$(cat "$T/code")" = 200 ] && [ -n "$got" ] && [ "$got" = "$want" ] &&
   [ "$(jget 'd["usage"]["completion_tokens"]' < "$T/c.json")" = 24 ] &&
   [ "$(jget 'd["choices"][0]["finish_reason"]' < "$T/c.json")" = length ]; then ok serve_completion_equals_run
else ko serve_completion_equals_run "got '$got' want '$want' ($(cat "$T/code"))"; fi

# stop strings: cut before the stop, finish_reason stop
post /v1/completions '{"prompt":"Once upon a time","max_tokens":24,"temperature":0,"stop":[" Lily","xyz"]}' > "$T/s.json"
sgot=$(jget 'd["choices"][0]["text"]' < "$T/s.json")
case "$want" in *" Lily"*) swant=${want%%" Lily"*} ;; *) swant=$want ;; esac
if [ "$sgot" = "$swant" ] && [ "$(jget 'd["choices"][0]["finish_reason"]' < "$T/s.json")" = stop ]; then ok serve_stop_strings
else ko serve_stop_strings "got '$sgot' want '$swant'"; fi

# a streamed chat equals the same chat unstreamed
CHAT='{"messages":[{"role":"user","content":"Tell me a story about a cat"}],"max_tokens":30,"temperature":0'
post /v1/chat/completions "$CHAT}" > "$T/n.json"
curl -sN -H 'Content-Type: application/json' -d "$CHAT,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" "$URL/v1/chat/completions" > "$T/st.txt"
nonstream=$(jget 'd["choices"][0]["message"]["content"]' < "$T/n.json")
streamed=$(python3 -c '
import json,sys
txt=""; roles=0; fin=None; usage=None
for line in open(sys.argv[1]):
    if not line.startswith("data: ") or line.strip()=="data: [DONE]": continue
    o=json.loads(line[6:])
    assert o["object"]=="chat.completion.chunk"
    if o.get("usage"): usage=o["usage"]
    for c in o["choices"]:
        d=c["delta"]; roles+= d.get("role")=="assistant"; txt+=d.get("content") or ""
        fin=c.get("finish_reason") or fin
print(txt if roles==1 and fin=="length" and usage and usage["completion_tokens"]==30 else "BAD "+txt)' "$T/st.txt")
# the framing: every event one "data: " line ended by a blank line, the last [DONE]
framed=$(python3 -c '
import re,sys
raw=open(sys.argv[1],"rb").read().decode()
print("ok" if re.fullmatch(r"(data: [^\n]+\n\n)+", raw) and raw.endswith("data: [DONE]\n\n") and raw.count("\n\n")==raw.count("data: ") else "BAD")' "$T/st.txt")
if [ -n "$nonstream" ] && [ "$streamed" = "$nonstream" ] && [ "$framed" = ok ]; then ok serve_stream_equals_nonstream
else ko serve_stream_equals_nonstream "stream '$streamed' vs '$nonstream', framing $framed"; fi

# sessions: the second turn reads only its new text; the cache stays within budget
post /v1/chat/completions '{"messages":[{"role":"user","content":"Once upon a time there was a dog"}],"max_tokens":40,"temperature":0,"session_id":"s1"}' > "$T/t1.json"
post /v1/chat/completions '{"messages":[{"role":"user","content":"The dog ran"}],"max_tokens":40,"temperature":0,"session_id":"s1"}' > "$T/t2.json"
p1=$(jget 'd["usage"]["prompt_tokens"]' < "$T/t1.json"); p2=$(jget 'd["usage"]["prompt_tokens"]' < "$T/t2.json")
pos=$(jget 'd["kvbound"]["position"]' < "$T/t2.json"); ct=$(jget 'd["kvbound"]["cache_tokens"]' < "$T/t2.json")
curl -s "$URL/v1/sessions/s1" > "$T/g.json"
if [ "$p2" -lt "$p1" ] && [ "$pos" -gt 64 ] && [ "$ct" -le 64 ] && [ "$(jget 'd["turns"]' < "$T/g.json")" = 2 ] &&
   [ "$(jget 'd["position"]' < "$T/g.json")" = "$pos" ] && [ "$(jget 'd["store"]' < "$T/g.json")" = sqlite ]; then ok serve_session_turns
else ko serve_session_turns "prompts $p1 then $p2, position $pos, cache $ct: $(cat "$T/g.json")"; fi
curl -s "$URL/v1/sessions/s1/map" > "$T/m.json"
if python3 -c '
import json,sys
m=json.load(open(sys.argv[1]))
assert m["n_layer"]==5 and len(m["layers"])==5 and all(len(l)==m["n_head_kv"] for l in m["layers"])
for l in m["layers"]:
    for h in l:
        assert len(h)<=64 and h[:4]==[0,1,2,3] and h[-1]==m["position"]-1 and h==sorted(h)
' "$T/m.json"; then ok serve_session_map
else ko serve_session_map "$(head -c 300 "$T/m.json")"; fi

# bad input: every one a 4xx, the server stays up
bad() { # bad NAME STATUS PATH BODY [curl args]
    n=$1; want=$2; p=$3; b=$4; shift 4
    post "$p" "$b" "$@" > "$T/e.json"
    if [ "$(cat "$T/code")" = "$want" ] && grep -q '"error":{"message":' "$T/e.json"; then ok "$n"
    else ko "$n" "status $(cat "$T/code"): $(head -c 200 "$T/e.json")"; fi
}
bad serve_bad_json 400 /v1/completions '{"prompt": "x",'
bad serve_wrong_type 400 /v1/completions '{"prompt":"x","max_tokens":"ten"}'
bad serve_huge_number 400 /v1/completions '{"prompt":"x","max_tokens":1e300}'
bad serve_not_integer 400 /v1/completions '{"prompt":"x","max_tokens":2.5}'
bad serve_budget_over_limit 400 /v1/completions '{"prompt":"x","kv_budget":100000}'
bad serve_bad_policy 400 /v1/completions '{"prompt":"x","kv_policy":"nonsense"}'
bad serve_full_refused 400 /v1/completions '{"prompt":"x","kv_policy":"full"}'
bad serve_bad_session_id 400 /v1/completions '{"prompt":"x","session_id":"../etc"}'
bad serve_no_messages 400 /v1/chat/completions '{"messages":[]}'
bad serve_bad_role 400 /v1/chat/completions '{"messages":[{"role":"robot","content":"x"}]}'
bad serve_not_object 400 /v1/completions '[1,2,3]'
bad serve_unknown_route 404 /v1/nothing '{}'
named() { # named NAME PATH BODY WORD: a 400 whose message names WORD
    post "$2" "$3" > "$T/e.json"
    if [ "$(cat "$T/code")" = 400 ] && grep -q "$4" "$T/e.json"; then ok "$1"; else ko "$1" "status $(cat "$T/code"): $(head -c 200 "$T/e.json")"; fi
}
# issue 48 survivor 10: top_logprobs without logprobs: true is refused by name (OpenAI's 400), absent or false
named serve_top_logprobs_without_logprobs_refused /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"max_tokens":1,"top_logprobs":2}' "'top_logprobs' needs 'logprobs': true"
named serve_top_logprobs_with_logprobs_false_refused /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"max_tokens":1,"logprobs":false,"top_logprobs":0}' "'top_logprobs' needs 'logprobs': true"
# issue 48 survivor 11: /tokenize and /detokenize refuse an unknown field by name, as the other routes do
named serve_tokenize_unknown_field_refused /tokenize '{"content":"Once","add_bos":true}' "'add_bos' is not implemented"
named serve_detokenize_unknown_field_refused /detokenize '{"tokens":[1,2],"with_pieces":true}' "'with_pieces' is not implemented"
post /tokenize '{"content":"Once","add_special":false,"parse_special":true,"with_pieces":false,"model":"x"}' > "$T/tk.json"; c1=$(cat "$T/code")
post /detokenize '{"tokens":[1,2],"model":"x"}' > "$T/dt.json"; c2=$(cat "$T/code")
if [ "$c1" = 200 ] && grep -q '"tokens":\[[0-9]' "$T/tk.json" && [ "$c2" = 200 ] && grep -q '"content":' "$T/dt.json"; then ok serve_tokenize_known_fields_accepted
else ko serve_tokenize_known_fields_accepted "/tokenize $c1 $(head -c 100 "$T/tk.json"), /detokenize $c2 $(head -c 100 "$T/dt.json")"; fi
# issue 48 survivor 9: logit_bias -100 bans the token (OpenAI), it is no subtraction of 100. The
# greedy token t of a prompt gets -100 and every other token of the vocabulary (512) -99.9: a
# subtraction leaves t the pick (it led the runner-up by more than 0.1 before), a ban never picks it.
post /v1/completions '{"prompt":"Once upon a time","max_tokens":1,"temperature":0,"logprobs":2}' > "$T/lb0.json"
python3 - "$URL" "$T/lb0.json" > "$T/lb.out" 2>&1 <<'EOF2'
import json, re, sys, urllib.error, urllib.request
url, d = sys.argv[1], json.load(open(sys.argv[2]))
def post(path, body):
    rq = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(rq))
lp = d["choices"][0]["logprobs"]
text = d["choices"][0]["text"]
tops = sorted(lp["top_logprobs"][0].values(), reverse=True)
assert tops[0] - tops[1] > 0.1, ("the top two are too close for the test", tops)
p = post("/tokenize", {"content": "Once upon a time"})["tokens"]
q = post("/tokenize", {"content": "Once upon a time" + text})["tokens"]
assert q[:len(p)] == p and len(q) == len(p) + 1, (p, q)
t = q[-1]
# V, the vocabulary's size: from the refusal of an id past it
try: post("/v1/completions", {"prompt": "x", "max_tokens": 1, "logit_bias": {"99999999": 1}}); V = 0
except urllib.error.HTTPError as e: V = int(re.search(r"\(0\.\.(\d+)\)", e.read().decode()).group(1)) + 1
assert 0 < V <= 1024, V
bias = {str(i): -99.9 for i in range(V)}
bias[str(t)] = -100
req = {"prompt": "Once upon a time", "max_tokens": 1, "temperature": 0, "logit_bias": bias}
got = post("/v1/completions", req)["choices"][0]["text"]
assert got != text, ("token %d still picked under -100: %r" % (t, got))
bias[str(t)] = -99.8  # control: the same map without the ban keeps t
assert post("/v1/completions", req)["choices"][0]["text"] == text
print("ok")
EOF2
if [ "$(cat "$T/lb.out")" = ok ]; then ok serve_logit_bias_minus_100_bans; else ko serve_logit_bias_minus_100_bans "$(tail -n 3 "$T/lb.out")"; fi
head -c 70000 /dev/zero | tr '\0' 'a' > "$T/big"
curl -s -o "$T/e.json" -w '%{http_code}' --data-binary @"$T/big" "$URL/v1/completions" > "$T/code"
if [ "$(cat "$T/code")" = 413 ]; then ok serve_body_too_large; else ko serve_body_too_large "status $(cat "$T/code")"; fi
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/completions")
if [ "$code" = 405 ]; then ok serve_wrong_method; else ko serve_wrong_method "GET /v1/completions: $code"; fi
# shellcheck disable=SC2086
for probe in badutf8 truncated slow "many 64"; do
    out=$($PROBE $HOSTPORT $probe 2>&1); rc=$?
    name=serve_probe_$(echo "$probe" | cut -d' ' -f1)
    if [ $rc -eq 0 ]; then ok "$name"; else ko "$name" "$out"; fi
done

# a dropped stream returns its pages (the session-less sequence is removed)
used_before=$(curl -s "$URL/metrics" | awk '/^kvbound_pool_bytes_used /{print $2}')
failed_before=$(curl -s "$URL/metrics" | awk '/^kvbound_requests_failed_total /{print $2}')
# shellcheck disable=SC2086
$PROBE $HOSTPORT disconnect > /dev/null
for _ in $(seq 1 50); do
    [ "$(curl -s "$URL/metrics" | awk '/^kvbound_sessions_active /{print $2}')" = 0 ] && break
    sleep 0.1
done
curl -s "$URL/metrics" > "$T/met.txt"
used_after=$(awk '/^kvbound_pool_bytes_used /{print $2}' "$T/met.txt")
failed_after=$(awk '/^kvbound_requests_failed_total /{print $2}' "$T/met.txt")
if [ "$used_after" = "$used_before" ] && [ "$failed_after" -gt "$failed_before" ] && grep -q '^kvbound_time_to_first_token_seconds_count [1-9]' "$T/met.txt" &&
   grep -q '^kvbound_inter_token_latency_seconds_bucket{le="+Inf"} [1-9]' "$T/met.txt"; then ok serve_disconnect_returns_pages
else ko serve_disconnect_returns_pages "pool bytes $used_before -> $used_after, failed $failed_before -> $failed_after"; fi

# a busy session is 429 with Retry-After
curl -s -o /dev/null -H 'Content-Type: application/json' -d '{"prompt":"Once","max_tokens":16000,"session_id":"busy"}' "$URL/v1/completions" &
cpid=$!
sleep 0.3
curl -s -D "$T/h.txt" -o "$T/e.json" -H 'Content-Type: application/json' -d '{"prompt":"Again","max_tokens":4,"session_id":"busy"}' "$URL/v1/completions" > /dev/null
wait $cpid
if grep -q '^HTTP/1.1 429' "$T/h.txt" && grep -qi '^Retry-After: ' "$T/h.txt"; then ok serve_session_busy_429
else ko serve_session_busy_429 "$(head -n 1 "$T/h.txt")"; fi

# DELETE
code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$URL/v1/sessions/s1"); code2=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/sessions/s1")
if [ "$code" = 200 ] && [ "$code2" = 404 ]; then ok serve_session_delete; else ko serve_session_delete "DELETE $code, then GET $code2"; fi
kill -TERM $PID; wait $PID 2>/dev/null; rc=$?
if [ $rc -eq 0 ] && grep -q "SIGTERM" "$T/a.log"; then ok serve_sigterm_clean; else ko serve_sigterm_clean "exit $rc: $(tail -n 2 "$T/a.log")"; fi

# a full queue is 503 with Retry-After: one generating, then three at once
# for a queue of one: exactly one waits, two are refused. The first streams
# (its 200 is sent at once) and is cut once the two refusals are in, so the
# waiter's turn comes however slow the machine (TSan, a busy CI host): no
# count depends on how fast tokens are generated.
start q -m "$G" --sessions "$T/sq" --budget 64 -t 1 --parallel 1 --queue 1 --queue-timeout 600
curl -s -N -D "$T/q1.h" -o /dev/null -H 'Content-Type: application/json' -d '{"prompt":"Once","max_tokens":16000,"ignore_eos":true,"stream":true}' "$URL/v1/completions" &
q1pid=$!
for _ in $(seq 1 400); do [ "$(curl -s "$URL/metrics" | sed -n 's/^kvbound_sessions_active //p')" = 1 ] && break; sleep 0.05; done
cpids=""
for i in 2 3 4; do
    curl -s -D "$T/q$i.h" -o /dev/null -H 'Content-Type: application/json' -d '{"prompt":"Once","max_tokens":4}' "$URL/v1/completions" &
    cpids="$cpids $!"
done
for _ in $(seq 1 400); do [ "$(cat "$T"/q[234].h 2>/dev/null | grep -c '^HTTP/1.1 503')" -ge 2 ] && break; sleep 0.05; done
kill $q1pid 2>/dev/null; wait $q1pid 2>/dev/null
# shellcheck disable=SC2086
wait $cpids
n503=$(grep -l '^HTTP/1.1 503' "$T"/q*.h | wc -l); n200=$(grep -l '^HTTP/1.1 200' "$T"/q*.h | wc -l)
if [ "$n503" -eq 2 ] && [ "$n200" -eq 2 ] && grep -q '^HTTP/1.1 200' "$T/q1.h" && grep -qi '^Retry-After: ' $(grep -l '^HTTP/1.1 503' "$T"/q*.h | head -n 1); then ok serve_queue_full_503
else ko serve_queue_full_503 "$n200 answered, $n503 refused"; fi
kill -TERM $PID; wait $PID 2>/dev/null

# kill -9 mid-stream, restart, resume: the next turn equals an uninterrupted server's
T1='{"messages":[{"role":"user","content":"Once upon a time, a bird"}],"max_tokens":30,"temperature":0,"session_id":"k"}'
T2='{"messages":[{"role":"user","content":"The bird sang"}],"max_tokens":30,"temperature":0,"session_id":"k"}'
start u -m "$G" --sessions "$T/su" --budget 64 -t 1
post /v1/chat/completions "$T1" > /dev/null; post /v1/chat/completions "$T2" > "$T/u2.json"
kill -TERM $PID; wait $PID 2>/dev/null
start k -m "$G" --sessions "$T/sk" --budget 64 -t 1
post /v1/chat/completions "$T1" > /dev/null
curl -s -o /dev/null -H 'Content-Type: application/json' -d '{"prompt":"Once","max_tokens":16000,"stream":true,"session_id":"k2"}' "$URL/v1/completions" &
sleep 0.3
kill -9 $PID; wait $PID 2>/dev/null
start k2 -m "$G" --sessions "$T/sk" --budget 64 -t 1
post /v1/chat/completions "$T2" > "$T/k2.json"
a=$(jget 'd["choices"][0]["message"]["content"]' < "$T/u2.json"); b=$(jget 'd["choices"][0]["message"]["content"]' < "$T/k2.json")
pa=$(jget 'd["kvbound"]["position"]' < "$T/u2.json"); pb=$(jget 'd["kvbound"]["position"]' < "$T/k2.json")
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$pa" = "$pb" ]; then ok serve_kill9_resume_exact
else ko serve_kill9_resume_exact "uninterrupted '$a' ($pa) vs after kill -9 '$b' ($pb)"; fi
kill -TERM $PID; wait $PID 2>/dev/null

# --recall: a session's cold tier is stored with it; after a restart the
# next turn equals an uninterrupted server's, cold pages and all
R1='{"messages":[{"role":"user","content":"Once upon a time, a bird"}],"max_tokens":60,"temperature":0,"session_id":"r"}'
R2='{"messages":[{"role":"user","content":"The bird sang"}],"max_tokens":60,"temperature":0,"session_id":"r"}'
R3='{"messages":[{"role":"user","content":"Then it flew home"}],"max_tokens":40,"temperature":0,"session_id":"r"}'
start ru -m "$G" --sessions "$T/sru" --budget 32 -t 1 --recall --recall-pages 2
post /v1/chat/completions "$R1" > /dev/null; post /v1/chat/completions "$R2" > /dev/null; post /v1/chat/completions "$R3" > "$T/ru3.json"
kill -TERM $PID; wait $PID 2>/dev/null
start r1 -m "$G" --sessions "$T/sr" --budget 32 -t 1 --recall --recall-pages 2
post /v1/chat/completions "$R1" > /dev/null; post /v1/chat/completions "$R2" > "$T/r2.json"
kill -TERM $PID; wait $PID 2>/dev/null
start r2 -m "$G" --sessions "$T/sr" --budget 32 -t 1 --recall --recall-pages 2
curl -s "$URL/v1/sessions/r" > "$T/rs.json"
post /v1/chat/completions "$R3" > "$T/r3.json"
a=$(jget 'd["choices"][0]["message"]["content"]' < "$T/ru3.json"); b=$(jget 'd["choices"][0]["message"]["content"]' < "$T/r3.json")
ca=$(jget 'd["kvbound"]["cold_pages"]' < "$T/ru3.json"); cb=$(jget 'd["kvbound"]["cold_pages"]' < "$T/r3.json")
c2=$(jget 'd["kvbound"]["cold_pages"]' < "$T/r2.json"); cs=$(jget 'd["cold_pages"]' < "$T/rs.json")
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$ca" = "$cb" ] && [ "$c2" -gt 0 ] && [ "$cs" = "$c2" ] && [ "$cb" -gt "$c2" ] &&
   [ "$(jget 'd["in_memory"]' < "$T/rs.json")" = False ]; then ok serve_recall_session_survives_restart
else ko serve_recall_session_survives_restart "uninterrupted '$a' ($ca cold pages) vs restarted '$b' ($cb; $c2 after turn 2, stored $cs)"; fi
kill -TERM $PID; wait $PID 2>/dev/null

# a small pool: idle sessions go to the store and come back
start p -m "$G" --sessions "$T/sp" --budget 64 -t 1 --pool-mb 1
for i in $(seq 1 30); do post /v1/completions "{\"prompt\":\"Once upon a time\",\"max_tokens\":60,\"temperature\":0,\"session_id\":\"p$i\"}" > /dev/null; done
post /v1/completions '{"prompt":" and then","max_tokens":5,"temperature":0,"session_id":"p1"}' > "$T/p1.json"
curl -s "$URL/metrics" > "$T/pm.txt"
off=$(awk '/^kvbound_sessions_offloaded_total /{print $2}' "$T/pm.txt")
if [ "$(cat "$T/code")" = 200 ] && [ "$off" -gt 0 ] && [ "$(jget 'd["kvbound"]["position"]' < "$T/p1.json")" -gt 65 ]; then ok serve_pool_offloads_idle_sessions
else ko serve_pool_offloads_idle_sessions "offloaded $off, last $(head -c 200 "$T/p1.json")"; fi
kill -TERM $PID; wait $PID 2>/dev/null

# an API key
start key -m "$G" --sessions "$T/skey" --budget 64 -t 1 --api-key sekrit
c1=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/models"); c2=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer wrong' "$URL/v1/models")
c3=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer sekrit' "$URL/v1/models"); c4=$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")
if [ "$c1" = 401 ] && [ "$c2" = 401 ] && [ "$c3" = 200 ] && [ "$c4" = 200 ]; then ok serve_api_key; else ko serve_api_key "$c1 $c2 $c3 $c4"; fi
# the scheme is case-insensitive and may be followed by several spaces; the key is not
c5=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: bearer sekrit' "$URL/v1/models"); c6=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: BEARER   sekrit' "$URL/v1/models")
c7=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer SEKRIT' "$URL/v1/models"); c8=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearersekrit' "$URL/v1/models")
if [ "$c5" = 200 ] && [ "$c6" = 200 ] && [ "$c7" = 401 ] && [ "$c8" = 401 ]; then ok serve_api_key_scheme_any_case; else ko serve_api_key_scheme_any_case "$c5 $c6 $c7 $c8"; fi
kill -TERM $PID; wait $PID 2>/dev/null

# issue 47 item 13: llama-server's habits. Its flags (--api-key-file, --temp,
# --seed, -n, -ctk/-ctv, -fa noted, -c noted under a bounded policy), its
# routes (/completion in its shape, /completions and /chat/completions
# without /v1, /v1/health), X-Api-Key, n_predict, and a final assistant
# message as a prefill; each failed before (unknown option, 404, 401, 400)
printf '  llama-key \n' > "$T/keyfile"
start ll -m "$G" --sessions "$T/sll" --budget 64 -t 1 --api-key-file "$T/keyfile" --temp 0 --seed 7 -n 5 -ctk f32 -ctv f16 -fa on -c 100000
if [ -n "$URL" ]; then
    H='X-Api-Key: llama-key'
    tp=$(curl -s -H "$H" "$URL/props" | jget 'd["default_generation_settings"]["params"]["temperature"], d["default_generation_settings"]["params"]["n_predict"]' 2>/dev/null)
    if [ "$tp" = "0 5" ] && grep -q 'note: -fa on changes nothing' "$T/ll.log" && grep -q 'note: -c 100000 changes nothing under --policy streaming' "$T/ll.log"
    then ok serve_llama_flags; else ko serve_llama_flags "props '$tp': $(cat "$T/ll.log")"; fi
    post /completion '{"prompt":"Once upon a time","n_predict":300,"ignore_eos":true}' -H "$H" > "$T/nat.json"
    n1=$(jget 'd["content"] != "" and d["stop"] and d["stop_type"] == "limit" and d["tokens_predicted"] == 300' < "$T/nat.json" 2>/dev/null)
    curl -s -N -H "$H" -d '{"prompt":"Once upon a time","n_predict":300,"ignore_eos":true,"stream":true}' "$URL/completion" > "$T/nat.sse"
    # streamed (at --temp 0): the pieces make the same text, each said once, the last event stops with the figures
    n2=$(python3 -c '
import json, sys
ev = [json.loads(l[6:]) for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
whole = json.load(open(sys.argv[2]))["content"]
print(len(ev) >= 2 and not ev[0]["stop"] and ev[-1]["stop"] and ev[-1]["tokens_predicted"] == 300 and "".join(e["content"] for e in ev) == whole)' "$T/nat.sse" "$T/nat.json" 2>/dev/null)
    c1=$(curl -s -o /dev/null -w '%{http_code}' -H "$H" -d '{"prompt":"Once","max_tokens":2}' "$URL/completions")
    c2=$(curl -s -o /dev/null -w '%{http_code}' -H "$H" -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2}' "$URL/chat/completions")
    c3=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/health")
    if [ "$n1" = True ] && [ "$n2" = True ] && ! grep -q 'DONE' "$T/nat.sse" && [ "$c1" = 200 ] && [ "$c2" = 200 ] && [ "$c3" = 200 ]; then ok serve_llama_routes
    else ko serve_llama_routes "/completion $n1, stream $n2 ($(head -c 200 "$T/nat.sse")), /completions $c1, /chat/completions $c2, /v1/health $c3"; fi
    k1=$(curl -s -o /dev/null -w '%{http_code}' -H 'X-Api-Key: wrong' "$URL/v1/models"); k2=$(curl -s -o /dev/null -w '%{http_code}' -H "$H" "$URL/v1/models")
    k3=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer llama-key' "$URL/v1/models")
    if [ "$k1" = 401 ] && [ "$k2" = 200 ] && [ "$k3" = 200 ]; then ok serve_x_api_key; else ko serve_x_api_key "wrong $k1, X-Api-Key $k2, Bearer $k3"; fi
    np=$(post /v1/completions '{"prompt":"Once upon a time","n_predict":3}' -H "$H" | jget 'd["usage"]["completion_tokens"]' 2>/dev/null)
    nd=$(post /v1/completions '{"prompt":"Once upon a time"}' -H "$H" | jget 'd["usage"]["completion_tokens"]' 2>/dev/null)
    post /v1/completions '{"prompt":"Once","n_predict":3,"max_tokens":4}' -H "$H" > /dev/null; nb=$(cat "$T/code")
    if [ "$np" = 3 ] && [ "$nd" = 5 ] && [ "$nb" = 400 ]; then ok serve_n_predict; else ko serve_n_predict "n_predict 3 gave $np, none gave $nd (-n 5), both $nb"; fi
    # a prefill: the answer continues the final assistant message (at --temp 0 as the completion of the same text does)
    pa=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Tell a story."},{"role":"assistant","content":"Once upon a time"}],"max_tokens":4}' -H "$H")
    pc=$(cat "$T/code")
    pu=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Tell a story."}],"max_tokens":4}' -H "$H" | jget 'd["usage"]["prompt_tokens"]' 2>/dev/null)
    pt=$(printf '%s' "$pa" | jget 'd["usage"]["prompt_tokens"]' 2>/dev/null); ptxt=$(printf '%s' "$pa" | jget 'd["choices"][0]["message"]["content"]' 2>/dev/null)
    post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Once"}],"max_tokens":2,"session_id":"pre"}' -H "$H" > "$T/ps.json"; ps=$(cat "$T/code")
    if [ "$pc" = 200 ] && [ -n "$pu" ] && [ "$pt" -ge $((pu + 3)) ] && [ -n "$ptxt" ] && ! printf '%s' "$ptxt" | grep -q '^Once upon' && [ "$ps" = 400 ] && grep -q prefill "$T/ps.json"
    then ok serve_assistant_prefill; else ko serve_assistant_prefill "status $pc, prompt $pt vs $pu without, '$ptxt'; with a session $ps"; fi
    kill -TERM $PID; wait $PID 2>/dev/null
else for c in serve_llama_flags serve_llama_routes serve_x_api_key serve_n_predict serve_assistant_prefill; do ko $c "no start: $(tail -n 3 "$T/ll.log")"; done; fi
# -c past the trained length under full, and --jinja with a signature family's name, say what they do; an unknown name is an error
start lc -m "$G" --sessions "$T/slc" --policy full -c 4096 -t 1 --jinja --chat-template chatml
[ -n "$URL" ] && kill -TERM $PID && wait $PID 2>/dev/null
"$K" serve -m "$G" --chat-template qwen2 > /dev/null 2> "$T/qwen2.err"; rc=$?
if grep -q 'note: -c 4096 is past the model.s trained length' "$T/lc.log" && grep -q 'chatml signature family' "$T/lc.log" && [ $rc = 2 ] &&
   grep -q 'qwen2: no such name; the names are chatml, llama3' "$T/qwen2.err"; then ok serve_llama_ctx_and_template_named
else ko serve_llama_ctx_and_template_named "$(cat "$T/lc.log") / rc $rc: $(cat "$T/qwen2.err")"; fi

# issue 48 survivor 13: prompt_min_rows == chunk is allowed: --chunk 16 (prompt_min_rows 16) starts
# and answers a chat whose prompt spans several chunks, as do the values around it (1: both 1; 15; 17)
chunks_ok=""
for c in 1 15 16 17; do
    start "chunk$c" -m "$G" --sessions "$T/sc$c" --budget 64 -t 1 --chunk $c
    if [ -n "$URL" ]; then
        post /v1/chat/completions '{"messages":[{"role":"user","content":"Once upon a time there was a little girl who liked to play in the park with her dog"}],"max_tokens":4,"temperature":0,"ignore_eos":true}' > "$T/ch$c.json"
        [ "$(cat "$T/code")" = 200 ] && [ "$(jget 'd["usage"]["completion_tokens"]' < "$T/ch$c.json")" = 4 ] &&
            [ "$(jget 'd["usage"]["prompt_tokens"]' < "$T/ch$c.json")" -gt 32 ] && chunks_ok="$chunks_ok $c"
        kill -TERM $PID; wait $PID 2>/dev/null
    fi
done
if [ "$chunks_ok" = " 1 15 16 17" ]; then ok serve_chunk_16_prompt_min_rows_equal_chunk_starts
else ko serve_chunk_16_prompt_min_rows_equal_chunk_starts "answered with --chunk$chunks_ok of 1 15 16 17: $(tail -n 2 "$T/chunk16.log")"; fi

# issue 53: --prompt-min-rows and --prompt-step-share (stall-free steps): taken and answered with; refused
# by name past --chunk or outside (0, 1]
start pmr -m "$G" --sessions "$T/spmr" --budget 64 -t 1 --chunk 16 --prompt-min-rows 16 --prompt-step-share 0.5 --step-target-ms 2x
pmr_code=none
if [ -n "$URL" ]; then
    post /v1/chat/completions '{"messages":[{"role":"user","content":"Once upon a time there was a little girl"}],"max_tokens":4,"temperature":0,"ignore_eos":true}' > "$T/pmr.json"
    pmr_code=$(cat "$T/code")
    kill -TERM $PID; wait $PID 2>/dev/null
fi
"$K" serve -m "$G" --chunk 16 --prompt-min-rows 17 > /dev/null 2> "$T/pmr1.err"; r1=$?
"$K" serve -m "$G" --prompt-step-share 1.5 > /dev/null 2> "$T/pmr2.err"; r2=$?
"$K" serve -m "$G" --prompt-min-rows 0 > /dev/null 2> "$T/pmr3.err"; r3=$?
"$K" serve -m "$G" --prompt-step-share 0 > /dev/null 2> "$T/pmr4.err"; r4=$?
if [ "$pmr_code" = 200 ] && [ $r1 -eq 2 ] && grep -q -- '--prompt-min-rows 17 is larger than --chunk 16' "$T/pmr1.err" &&
   [ $r2 -eq 2 ] && grep -q -- '--prompt-step-share' "$T/pmr2.err" && [ $r3 -eq 2 ] && grep -q -- '--prompt-min-rows' "$T/pmr3.err" &&
   [ $r4 -eq 2 ] && grep -q -- '--prompt-step-share must be above 0' "$T/pmr4.err"
then ok serve_prompt_min_rows_and_step_share_taken_or_refused_by_name
else ko serve_prompt_min_rows_and_step_share_taken_or_refused_by_name "status $pmr_code; rc $r1 $r2 $r3 $r4: $(cat "$T/pmr1.err" "$T/pmr2.err" "$T/pmr3.err" "$T/pmr4.err")"; fi

# docs/SERVING.md's example block runs as written (on a free port instead of 8080)
DOCS=$(cd "$(dirname "$0")/.." && pwd)/docs/SERVING.md
port=$(free_port)
DA=$(cd "$D" && pwd); KA=$(cd "$(dirname "$K")" && pwd)/kvbound
awk '/serve-example/ { want = 1; next } want && /^```/ { if (inb) exit; inb = 1; next } inb { print }' "$DOCS" |
    sed -e "s#^kvbound serve #$KA serve --port $port #" -e "s#8080#$port#g" -e "s#\.\./shared/data#$DA#g" > "$T/example.sh"
(cd "$T" && timeout 60 sh "$T/example.sh" > "$T/example.out" 2>&1); rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c '"object":"text_completion"\|"object":"chat.completion"' "$T/example.out")" = 3 ] &&
   grep -q '"object":"session"' "$T/example.out" && grep -q '"turns":2' "$T/example.out"; then ok serve_docs_example
else ko serve_docs_example "exit $rc: $(tail -c 300 "$T/example.out")"; fi

# ChatML: a random-weight qwen2 with the real Qwen2.5 vocabulary; turn 2 reads only its text
"$K" mkmodel --shape tiny-qwen2 --type q8_0 --vocab "$QV" -o "$T/q.gguf" > /dev/null 2>&1
start qw -m "$T/q.gguf" --sessions "$T/sqw" --budget 128 -t 1 --template chatml
post /v1/chat/completions '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there"}],"max_tokens":6,"temperature":0,"session_id":"c"}' > "$T/q1.json"
post /v1/chat/completions '{"messages":[{"role":"user","content":"Again"}],"max_tokens":6,"temperature":0,"session_id":"c"}' > "$T/q2.json"
q1=$(jget 'd["usage"]["prompt_tokens"]' < "$T/q1.json" 2>/dev/null); q2=$(jget 'd["usage"]["prompt_tokens"]' < "$T/q2.json" 2>/dev/null)
# turn 2: the pending token, "<|im_end|>\n" glue (or the closing), "<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n"
if grep -q "template chatml" "$T/qw.log" && [ -n "$q1" ] && [ -n "$q2" ] && [ "$q2" -ge 8 ] && [ "$q2" -le 14 ] && [ "$q1" -gt "$q2" ]; then ok serve_chatml_session_turns
else ko serve_chatml_session_turns "prompts $q1 then $q2: $(tail -n 2 "$T/qw.log")"; fi
kill -TERM $PID; wait $PID 2>/dev/null
cli_summary
