#!/bin/sh
# test_serve_faults_cli.sh BUILD_DIR — the faults a probe of `kvbound serve`
# found (issue 32), each a case that failed before its fix:
#   - SIGTERM while keep-alive clients ask for sessions exits 0 (it crashed:
#     the scheduler was freed under them); a turn cut by shutdown is 503
#     with Retry-After (it was 499);
#   - HTTP: slowloris connections are cut by --request-timeout and cannot
#     keep other addresses out; a half-closed client is answered; two
#     Content-Length (or one with chunked) are 400; Expect: 100-continue over
#     --max-body is 413 at once; wrong methods are 405 with Allow;
#   - JSON: a body is one valid value, strictly: a raw control byte (NUL
#     cut a string), bytes after the value and a key named twice are 400;
#   - identity: \u0000 in session_id or a message is refused; a foreign Host
#     on loopback without --api-key is 403; a cross-origin write is 403
#     unless --cors allows the origin, and a preflight then answers.
#   - connection limits at their boundary (issue 48 survivors 16-18): with
#     --max-connections-per-ip 3 (or --max-connections 3) three keep-alive
#     connections are answered and a fourth is closed unanswered; a
#     keep-alive connection's --request-timeout restarts when each answer
#     ends (one answer a completion about as long as the timeout).
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/serve_lib.sh"
G="$D/models/stories260K/stories260K.llamacpp.gguf"
serve_ready serve_faults "$G" "the raw-socket probes need it" || exit $SERVE_RC
PROBE="python3 $(dirname "$0")/serve_faults.py"

# 1. SIGTERM under keep-alive session queries: exit 0, four times over
bad=""
for run in 1 2 3 4; do
    start term$run -m "$G" --sessions "$T/st$run" --budget 64 -t 1
    [ -n "$URL" ] || { bad="$bad no-start"; break; }
    $PROBE $HOSTPORT keepalive 3 > "$T/ka$run.txt" 2>&1 &
    kp=$!
    sleep 1
    kill -TERM $PID
    wait $PID; rc=$?
    wait $kp
    [ $rc -eq 0 ] || bad="$bad run$run:rc=$rc"
done
if [ -z "$bad" ]; then ok serve_sigterm_under_keepalive_queries
else ko serve_sigterm_under_keepalive_queries "$bad ($(tail -n 2 "$T/term$run.log" | tr '\n' ' '))"; fi

# a turn still running 5 s after SIGTERM is cut: 503 with Retry-After, not 499
start cut -m "$G" --sessions "$T/scut" --budget 64 -t 1 --max-tokens 1000000
if [ -n "$URL" ]; then
    curl -s -D "$T/cut.hdr" -o "$T/cut.body" -d '{"prompt":"Once upon a time","max_tokens":1000000,"ignore_eos":true,"temperature":0}' "$URL/v1/completions" &
    cp=$!
    sleep 1
    kill -TERM $PID
    wait $cp
    wait $PID; rc=$?
    st=$(head -n 1 "$T/cut.hdr" | tr -d '\r' | cut -d' ' -f2)
    if [ "$st" = 503 ] && grep -qi '^Retry-After: [0-9]' "$T/cut.hdr" && grep -q 'shutting down' "$T/cut.body" && [ $rc -eq 0 ]; then ok serve_shutdown_cut_turn_503
    else ko serve_shutdown_cut_turn_503 "status '$st', exit $rc: $(cat "$T/cut.body")"; fi
else ko serve_shutdown_cut_turn_503 "no start: $(tail -n 2 "$T/cut.log")"; fi

start h -m "$G" --sessions "$T/sh" --budget 64 -t 1 --max-body 4096 --max-connections 64 --max-connections-per-ip 32 --request-timeout 2
if [ -z "$URL" ]; then ko serve_faults_start "$(tail -n 3 "$T/h.log")"; cli_summary; exit; fi

# 2. slowloris: 40 half-headers from 127.0.0.1 against a per-address limit of 32
if out=$($PROBE $HOSTPORT slowloris 40 2); then ok serve_slowloris_cut; else ko serve_slowloris_cut "$out"; fi
if out=$($PROBE $HOSTPORT halfclose); then ok serve_half_close_answered; else ko serve_half_close_answered "$out"; fi
if out=$($PROBE $HOSTPORT framing 4096); then ok serve_framing_refused; else ko serve_framing_refused "$out"; fi

# 405 with Allow on the fixed routes
bad=""
for r in "POST /" "POST /health" "DELETE /metrics" "PUT /v1/models" "GET /v1/chat/completions" "POST /v1/sessions/x/map"; do
    set -- $r
    hdr=$(curl -s -o /dev/null -D - -X "$1" "$URL$2" | tr -d '\r')
    code=$(printf '%s\n' "$hdr" | head -n 1 | cut -d' ' -f2)
    allow=$(printf '%s\n' "$hdr" | sed -n 's/^Allow: //p')
    case "$2" in /v1/chat/completions) want="POST" ;; *) want="GET, HEAD" ;; esac
    [ "$code" = 405 ] && [ "$allow" = "$want" ] || bad="$bad [$r: $code Allow '$allow']"
done
if [ -z "$bad" ]; then ok serve_wrong_method_405_allow; else ko serve_wrong_method_405_allow "$bad"; fi

# 6. identity: \u0000 refused in session_id and in a message
c1=$(curl -s -o "$T/n1" -w '%{http_code}' -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"session_id":"demo\u0000x"}' "$URL/v1/chat/completions")
c2=$(curl -s -o "$T/n2" -w '%{http_code}' -d '{"messages":[{"role":"user","content":"hi\u0000 there"}],"max_tokens":2}' "$URL/v1/chat/completions")
c3=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/sessions/demo")
c4=$(curl -s -o /dev/null -w '%{http_code}' -d '{"messages":[{"role":"user","content":"a \\\\u0000 written out"}],"max_tokens":2}' "$URL/v1/chat/completions")
if [ "$c1" = 400 ] && [ "$c2" = 400 ] && [ "$c3" = 404 ] && [ "$c4" = 200 ] && grep -q 'u0000' "$T/n1"; then ok serve_nul_refused
else ko serve_nul_refused "session_id $c1, content $c2, demo then $c3, an escaped backslash $c4: $(cat "$T/n1")"; fi

# one valid JSON value, strictly (issue 47): a raw NUL or control byte, bytes after the value, a key twice
jpost() { # jpost NAME PATH: the body in $T/NAME.json, the status printed
    curl -s -o "$T/$1.out" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @"$T/$1.json" "$URL$2"
}
printf '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"session_id":"rawnul\000x"}' > "$T/j1.json"
printf '{"prompt":"Once\001","max_tokens":2}' > "$T/j2.json"
printf '{"prompt":"Once",\001"max_tokens":2}' > "$T/j3.json"
j1=$(jpost j1 /v1/chat/completions); j2=$(jpost j2 /v1/completions); j3=$(jpost j3 /v1/completions)
j4=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/sessions/rawnul")
if [ "$j1" = 400 ] && [ "$j2" = 400 ] && [ "$j3" = 400 ] && [ "$j4" = 404 ] && grep -q 'control byte 0x00 at byte 80' "$T/j1.out" &&
   grep -q 'control byte 0x01 at byte 15' "$T/j2.out"; then ok serve_json_raw_control_bytes
else ko serve_json_raw_control_bytes "raw NUL $j1, in a string $j2, between tokens $j3, the session then $j4: $(cat "$T/j1.out" "$T/j2.out")"; fi
printf '{"prompt":"Once","max_tokens":2} {"prompt":"x","max_tokens":9}' > "$T/j5.json"
printf '{"content":"a"}x' > "$T/j6.json"
j5=$(jpost j5 /v1/completions); j6=$(jpost j6 /tokenize)
if [ "$j5" = 400 ] && [ "$j6" = 400 ] && grep -q 'bytes follow it at byte 33' "$T/j5.out" && grep -q 'at byte 15' "$T/j6.out"; then ok serve_json_trailing_bytes
else ko serve_json_trailing_bytes "completion $j5, tokenize $j6: $(cat "$T/j5.out" "$T/j6.out")"; fi
printf '{"prompt":"Once","max_tokens":2,"max_tokens":3}' > "$T/j7.json"
printf '{"messages":[{"role":"user","content":"a","content":"b"}],"max_tokens":2}' > "$T/j8.json"
printf '{"content":"a","content":"b"}' > "$T/j9.json"
printf '{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\\"a\\":1,\\"a\\":2}"}}]},{"role":"tool","tool_call_id":"c","content":"x"}],"max_tokens":2}' > "$T/j10.json"
j7=$(jpost j7 /v1/completions); j8=$(jpost j8 /v1/chat/completions); j9=$(jpost j9 /tokenize); j10=$(jpost j10 /v1/chat/completions)
if [ "$j7" = 400 ] && [ "$j8" = 400 ] && [ "$j9" = 400 ] && [ "$j10" = 400 ] && grep -q "key 'max_tokens' twice" "$T/j7.out" &&
   grep -q "key 'content' twice" "$T/j8.out" && grep -q "key 'content' twice" "$T/j9.out" && grep -q "arguments is not one JSON object" "$T/j10.out"; then
    ok serve_json_duplicate_keys
else ko serve_json_duplicate_keys "top $j7, in a message $j8, tokenize $j9, in arguments $j10: $(cat "$T/j7.out" "$T/j8.out" "$T/j10.out")"; fi

# Host: a foreign name is 403 (DNS rebinding); localhost and the address pass
port=${URL##*:}
h1=$(curl -s -o "$T/h1" -w '%{http_code}' -H 'Host: attacker.example' "$URL/v1/models")
h2=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: localhost:$port" "$URL/v1/models")
h3=$(curl -s -o /dev/null -w '%{http_code}' -H 'Host: attacker.example' -d '{"prompt":"Once","max_tokens":2,"session_id":"rebind"}' "$URL/v1/completions")
h4=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/sessions/rebind")
if [ "$h1" = 403 ] && [ "$h2" = 200 ] && [ "$h3" = 403 ] && [ "$h4" = 404 ] && grep -q attacker.example "$T/h1"; then ok serve_foreign_host_403
else ko serve_foreign_host_403 "foreign $h1, localhost $h2, foreign POST $h3, then the session $h4"; fi
# any loopback address passes, as SERVING.md says (127.0.0.2 was 403); a name that only starts like one does not
h5=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: 127.0.0.2:$port" "$URL/v1/models")
h6=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: [::1]:$port" "$URL/v1/models")
h7=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: 127.0.0.2.attacker.example" "$URL/v1/models")
if [ "$h5" = 200 ] && [ "$h6" = 200 ] && [ "$h7" = 403 ]; then ok serve_any_loopback_host
else ko serve_any_loopback_host "127.0.0.2 $h5, [::1] $h6, 127.0.0.2.attacker.example $h7"; fi

# Origin: a cross-site write is 403 and appends nothing; the server's own page passes
o1=$(curl -s -o /dev/null -w '%{http_code}' -H 'Origin: http://evil.example' -d '{"prompt":"Once","max_tokens":2,"session_id":"csrf"}' "$URL/v1/completions")
o2=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/sessions/csrf")
o3=$(curl -s -o /dev/null -w '%{http_code}' -H "Origin: $URL" -d '{"prompt":"Once","max_tokens":2}' "$URL/v1/completions")
o4=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE -H 'Origin: http://evil.example' "$URL/v1/sessions/csrf")
if [ "$o1" = 403 ] && [ "$o2" = 404 ] && [ "$o3" = 200 ] && [ "$o4" = 403 ]; then ok serve_cross_origin_write_403
else ko serve_cross_origin_write_403 "cross-site POST $o1 (session then $o2), same-origin $o3, cross-site DELETE $o4"; fi

# --cors ORIGIN: that origin may write, and its preflight answers
start cors -m "$G" --sessions "$T/sc" --budget 64 -t 1 --cors http://app.example:3000
p=$(curl -s -o /dev/null -D - -X OPTIONS -H 'Origin: http://app.example:3000' -H 'Access-Control-Request-Method: POST' "$URL/v1/completions" | tr -d '\r')
w=$(curl -s -o /dev/null -D - -H 'Origin: http://app.example:3000' -d '{"prompt":"Once","max_tokens":2}' "$URL/v1/completions" | tr -d '\r')
x=$(curl -s -o /dev/null -w '%{http_code}' -H 'Origin: http://other.example' -d '{"prompt":"Once","max_tokens":2}' "$URL/v1/completions")
if printf '%s\n' "$p" | grep -q '^HTTP/1.1 204' && printf '%s\n' "$p" | grep -q '^Access-Control-Allow-Origin: http://app.example:3000$' &&
   printf '%s\n' "$p" | grep -q '^Access-Control-Allow-Methods: .*POST' && printf '%s\n' "$w" | grep -q '^HTTP/1.1 200' &&
   printf '%s\n' "$w" | grep -q '^Access-Control-Allow-Origin: http://app.example:3000$' && [ "$x" = 403 ]; then ok serve_cors_origin_allowed
else ko serve_cors_origin_allowed "preflight: $(printf '%s' "$p" | head -n 1), write: $(printf '%s' "$w" | head -n 1), another origin $x"; fi
"$K" serve -m "$G" --cors evil.example > /dev/null 2> "$T/cors.err"; rc=$?
if [ $rc -eq 2 ] && grep -q -- '--cors evil.example' "$T/cors.err"; then ok serve_cors_flag_checked; else ko serve_cors_flag_checked "rc $rc: $(cat "$T/cors.err")"; fi
# issue 47 item 2: a non-streamed request sent and closed is cancelled (a FIN
# was read as a half-close and the request ran on, holding its slot); a
# prompt past --max-prompt-tokens is 400 naming it; one past the budget is
# answered with kvbound.warnings and logged; a 503 for full slots names
# --parallel (it said "no room in the page pool")
jget() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
start cx -m "$G" --sessions "$T/scx" --budget 64 -t 1 --parallel 1 --max-tokens 1000000 --queue-timeout 2 --max-prompt-tokens 300
if [ -n "$URL" ]; then
    if out=$($PROBE $HOSTPORT closed); then ok serve_closed_request_cancelled; else ko serve_closed_request_cancelled "$out"; fi
    long=$(python3 -c 'import json; print(json.dumps({"prompt": "Once upon a time there was a little girl. " * 40, "max_tokens": 2}))')
    mid=$(python3 -c 'import json; print(json.dumps({"prompt": "Once upon a time there was a little girl. " * 8, "max_tokens": 2}))')
    c1=$(curl -s -o "$T/mp1" -w '%{http_code}' -d "$long" "$URL/v1/completions")
    c2=$(curl -s -o "$T/mp2" -w '%{http_code}' -d "$mid" "$URL/v1/completions")
    w=$(jget 'd["kvbound"]["warnings"][0]' < "$T/mp2" 2>/dev/null)
    if [ "$c1" = 400 ] && grep -q -- '--max-prompt-tokens 300' "$T/mp1" && [ "$c2" = 200 ] && printf '%s' "$w" | grep -q 'more than the cache budget (64' &&
       grep -q 'warning: cmpl-[0-9]*: the prompt has [0-9]* tokens, more than the cache budget' "$T/cx.log"; then ok serve_prompt_limit_and_warning
    else ko serve_prompt_limit_and_warning "long $c1 $(cat "$T/mp1"); past the budget $c2, warning '$w'"; fi
    curl -s -N -o /dev/null -d '{"prompt":"Once","max_tokens":1000000,"ignore_eos":true,"stream":true}' "$URL/v1/completions" &
    hold=$!
    sleep 0.3
    c3=$(curl -s -o "$T/busy" -w '%{http_code}' -d '{"prompt":"Once","max_tokens":2}' "$URL/v1/completions")
    kill $hold 2>/dev/null; wait $hold 2>/dev/null
    if [ "$c3" = 503 ] && grep -q -- 'slots (--parallel)' "$T/busy" && ! grep -q 'page pool' "$T/busy"; then ok serve_busy_slots_503_named
    else ko serve_busy_slots_503_named "$c3: $(cat "$T/busy")"; fi
else ko serve_closed_request_cancelled "no start: $(tail -n 2 "$T/cx.log")"; fi
# serve -m a llama2.c checkpoint: GGUF only, and how to convert (it suggested -z, which serve lacks)
if [ -f "$D/models/stories260K/stories260K.bin" ]; then
    "$K" serve -m "$D/models/stories260K/stories260K.bin" --port 0 > /dev/null 2> "$T/bin.err"; rc=$?
    if [ $rc -eq 1 ] && grep -q 'GGUF models only' "$T/bin.err" && grep -q 'kvbound convert' "$T/bin.err" && ! grep -q ' with -z' "$T/bin.err"; then ok serve_non_gguf_named
    else ko serve_non_gguf_named "rc $rc: $(cat "$T/bin.err")"; fi
else skip_case serve_non_gguf_named "missing $D/models/stories260K/stories260K.bin"; fi
# the connection limits at their boundary: with a limit of 3, three keep-alive connections are answered and a
# fourth is closed unanswered (refused at accept, as SERVING.md says); a keep-alive connection's deadline
# restarts after each answer
start lim -m "$G" --sessions "$T/slim" --budget 64 -t 1 --max-connections 8 --max-connections-per-ip 3 --request-timeout 2 --max-tokens 1000000
if [ -n "$URL" ]; then
    if out=$($PROBE $HOSTPORT conncap 3 per-ip); then ok serve_max_connections_per_ip_exact # issue 48 survivor 16
    else ko serve_max_connections_per_ip_exact "$out"; fi
    if out=$($PROBE $HOSTPORT keepdeadline 2); then ok serve_keepalive_deadline_restarted_after_answer # issue 48 survivor 17
    else ko serve_keepalive_deadline_restarted_after_answer "$out"; fi
    kill $PID
else ko serve_max_connections_per_ip_exact "no start: $(tail -n 2 "$T/lim.log")"; fi
start tot -m "$G" --sessions "$T/stot" --budget 64 -t 1 --max-connections 3 --max-connections-per-ip 3
if [ -n "$URL" ]; then
    if out=$($PROBE $HOSTPORT conncap 3 all); then ok serve_max_connections_exact # issue 48 survivor 18
    else ko serve_max_connections_exact "$out"; fi
    kill $PID
else ko serve_max_connections_exact "no start: $(tail -n 2 "$T/tot.log")"; fi
cli_summary
