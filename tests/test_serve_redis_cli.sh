#!/bin/sh
# test_serve_redis_cli.sh BUILD_DIR — two `kvbound serve` replicas sharing a
# Redis session store: turn 1 on replica A, turn 2 on replica B gives the
# same text as both turns on one replica (with SQLite), and the session's
# bytes in Redis are what GET /v1/sessions reports. Redis: KVB_TEST_REDIS
# (redis://HOST:PORT, started by .ci/run), else a redis-server started here
# on a free loopback port, else skipped (a failure under KVB_REQUIRE_REDIS=1).
# Through a proxy that loses the reply to one session write and then
# refuses connections for 3 s (issue 47): that turn is 504
# store_outcome_unknown (it was 503 "retry the turn", and the retry stored
# it twice), /health is 503 and a DELETE 503 store_unavailable while Redis is
# out of reach, and the retry with the same Idempotency-Key gets the stored
# answer, twice over, with the session holding exactly the turns answered.
# A record written before versions (a plain string) is read and then
# replaced by a versioned hash: two turns after it are 200, not 409 (issue 48
# survivor 14).
# Through a proxy that loses one write's reply but lets the write be sent
# again at once, the write finds its own token: 200 and one stored turn, not
# 409 (issue 48 survivor 15).
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/serve_lib.sh"
G="$D/models/stories260K/stories260K.llamacpp.gguf"
if ! "$K" serve --help > /dev/null 2>&1; then skip_case serve_built "kvbound serve is not built (install libmicrohttpd-dev libcjson-dev libsqlite3-dev)"; cli_summary; exit; fi
if [ ! -f "$G" ]; then skip_case serve_redis "missing $G"; cli_summary; exit; fi
need_tool serve_redis_python python3 KVB_REQUIRE_PYTHON "the checks read JSON with Python; Debian python3" || { cli_summary; exit; }
R=${KVB_TEST_REDIS:-}
if [ -z "$R" ] && start_redis; then R=$RURL; fi
if [ -z "$R" ]; then
    if [ "${KVB_REQUIRE_REDIS:-0}" = 1 ]; then ko serve_redis "no Redis (KVB_TEST_REDIS unset, redis-server not installed)"
    else sk serve_redis "no Redis (KVB_TEST_REDIS unset, redis-server not installed)"; fi
    cli_summary
    exit
fi
turn() { curl -s -H 'Content-Type: application/json' -d "{\"messages\":[{\"role\":\"user\",\"content\":\"$2\"}],\"max_tokens\":30,\"temperature\":0,\"session_id\":\"$3\"}" "$1/v1/chat/completions"; }
content() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["choices"][0]["message"]["content"], d["kvbound"]["position"])'; }
sid="r$$"
start a -m "$G" --sessions "$R" --budget 64 -t 1; A=$URL
start b -m "$G" --sessions "$R" --budget 64 -t 1; B=$URL
start one -m "$G" --sessions "$T/one" --budget 64 -t 1; ONE=$URL
if [ -z "$A" ] || [ -z "$B" ] || [ -z "$ONE" ]; then ko serve_redis_start "$(tail -n 2 "$T/a.log")"; cli_summary; exit; fi
turn "$A" "Once upon a time, a frog" "$sid" > /dev/null
two=$(turn "$B" "The frog jumped" "$sid" | content)
turn "$ONE" "Once upon a time, a frog" "$sid" > /dev/null
want=$(turn "$ONE" "The frog jumped" "$sid" | content)
if [ -n "$two" ] && [ "$two" = "$want" ] && grep -q "(redis)" "$T/b.log"; then ok serve_redis_replicas_share_sessions
else ko serve_redis_replicas_share_sessions "A then B: '$two'; one replica: '$want'"; fi
curl -s "$A/v1/sessions/$sid" > "$T/s.json"
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["store"]=="redis" and d["turns"]==2 and d["stored_bytes"]>0' "$T/s.json"; then ok serve_redis_session_state
else ko serve_redis_session_state "$(cat "$T/s.json")"; fi
# issue 48 survivor 14: a record from before versions (kvbound before 63d7cf0 SET the image as a plain string)
# reads as version 0 and is replaced by a versioned hash at its next write: two turns after it are 200 (a slip
# that read it at another version than the write script expects made every turn 409 session_conflict)
resp() { # resp HOST:PORT ARG...: one Redis command over a raw socket (binary safe); its reply printed (a simple one)
    python3 - "$@" <<'EOF'
import socket, sys
h, p = sys.argv[1].rsplit(":", 1)
args = [a.encode() for a in sys.argv[2:]]
s = socket.create_connection((h, int(p)), 5)
s.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
f = s.makefile("rb")
line = f.readline().decode().strip()
print(f.read(int(line[1:])).decode() if line[0] == "$" and int(line[1:]) >= 0 else line)
EOF
}
rhp=${R#redis://}
old="old$$"
turn "$A" "Once upon a time, a frog" "$old" > /dev/null
conv=$(resp "$rhp" EVAL "local img = redis.call('HGET', KEYS[1], 'image') redis.call('DEL', KEYS[1]) redis.call('SREM', KEYS[2], ARGV[1]) redis.call('SET', KEYS[1], img) return redis.call('TYPE', KEYS[1]).ok" 2 "kvbound:session:$old" kvbound:sessions "$old")
o1=$(curl -s -o "$T/o1.json" -w '%{http_code}' -H 'Content-Type: application/json' -d "{\"messages\":[{\"role\":\"user\",\"content\":\"The frog jumped\"}],\"max_tokens\":30,\"temperature\":0,\"session_id\":\"$old\"}" "$B/v1/chat/completions")
o2=$(curl -s -o "$T/o2.json" -w '%{http_code}' -H 'Content-Type: application/json' -d "{\"messages\":[{\"role\":\"user\",\"content\":\"and swam\"}],\"max_tokens\":30,\"temperature\":0,\"session_id\":\"$old\"}" "$A/v1/chat/completions")
oturns=$(curl -s "$A/v1/sessions/$old" | python3 -c 'import json,sys; print(json.load(sys.stdin)["turns"])' 2> /dev/null)
otype=$(resp "$rhp" TYPE "kvbound:session:$old"); over=$(resp "$rhp" HGET "kvbound:session:$old" v; resp "$rhp" SISMEMBER kvbound:sessions "$old")
ogot=$(content < "$T/o1.json" 2> /dev/null)
if [ "$conv" = string ] && [ "$o1" = 200 ] && [ "$o2" = 200 ] && [ "$ogot" = "$want" ] && [ "$oturns" = 3 ] && [ "$otype" = "+hash" ] &&
   [ "$(echo $over)" = "2 :1" ]; then ok serve_redis_record_before_versions_updated # issue 48 survivor 14
else ko serve_redis_record_before_versions_updated "record made a string: $conv; turns after it $o1 $o2 ($(head -c 200 "$T/o1.json"); '$ogot', want '$want'), turns $oturns (want 3), then $otype, version/indexed $(echo $over)"; fi
curl -s -X DELETE "$B/v1/sessions/$sid" > /dev/null
code=$(curl -s -o /dev/null -w '%{http_code}' "$A/v1/sessions/$sid")
if [ "$code" = 404 ]; then ok serve_redis_delete_everywhere; else ko serve_redis_delete_everywhere "GET on A after DELETE on B: $code"; fi
# a write whose reply was lost: its outcome is unknown, and a keyed retry never stores the turn twice
kturn() { curl -s -D "$T/k.hdr" -o "$T/k.json" -w '%{http_code}' -H 'Content-Type: application/json' -H "Idempotency-Key: $3" \
    -d "{\"messages\":[{\"role\":\"user\",\"content\":\"$2\"}],\"max_tokens\":30,\"temperature\":0,\"session_id\":\"lost$$\"}" "$1/v1/chat/completions"; }
rhp=${R#redis://}
PP=$(free_port)
python3 "$(dirname "$0")/serve_faults.py" "${rhp%:*}" "${rhp##*:}" redisproxy "$PP" "$T/arm" 3 > "$T/proxy.log" 2>&1 &
PIDS="$PIDS $!"
for _ in $(seq 1 50); do python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$PP" 2> /dev/null && break; sleep 0.1; done
start p -m "$G" --sessions "redis://127.0.0.1:$PP" --budget 64 -t 1; P=$URL
k1=$(kturn "$P" "Once upon a time, a frog" key-1)
touch "$T/arm"
k2=$(kturn "$P" "The frog jumped" key-2); cp "$T/k.json" "$T/k2.json"; tr -d '\r' < "$T/k.hdr" > "$T/k2.hdr"
h1=$(curl -s -o "$T/h1.json" -w '%{http_code}' "$P/health")
d1=$(curl -s -o "$T/d1.json" -w '%{http_code}' -X DELETE "$P/v1/sessions/nobody$$")
r1=000
for _ in $(seq 1 40); do r1=$(kturn "$P" "The frog jumped" key-2); [ "$r1" = 200 ] && break; sleep 0.2; done
cp "$T/k.json" "$T/r1.json"
r2=$(kturn "$P" "The frog jumped" key-2); cp "$T/k.json" "$T/r2.json"
got=$(content < "$T/r1.json")
turns=$(curl -s "$P/v1/sessions/lost$$" | python3 -c 'import json,sys; print(json.load(sys.stdin)["turns"])')
if [ "$k1" = 200 ] && [ "$k2" = 504 ] && grep -q store_outcome_unknown "$T/k2.json" && grep -qi '^x-should-retry: false$' "$T/k2.hdr" && grep -q "GET /v1/sessions/lost$$" "$T/k2.json" &&
   [ "$r1" = 200 ] && [ "$r2" = 200 ] && cmp -s "$T/r1.json" "$T/r2.json" && [ "$got" = "$want" ] && [ "$turns" = 2 ]; then ok serve_redis_lost_reply_not_stored_twice
else ko serve_redis_lost_reply_not_stored_twice "turn 1 $k1, lost turn $k2 ($(head -c 300 "$T/k2.json")), keyed retries $r1/$r2 ('$got', want '$want'), turns $turns (want 2)"; fi
h2=$(curl -s -o /dev/null -w '%{http_code}' "$P/health")
for _ in $(seq 1 20); do [ "$h2" = 200 ] && break; sleep 0.2; h2=$(curl -s -o /dev/null -w '%{http_code}' "$P/health"); done
if [ "$h1" = 503 ] && grep -q '"store":"redis"' "$T/h1.json" && grep -q '"store_error":"redis' "$T/h1.json" && [ "$h2" = 200 ]; then ok serve_redis_health_names_store
else ko serve_redis_health_names_store "health while Redis was out of reach $h1 ($(cat "$T/h1.json")), then $h2"; fi
if [ "$d1" = 503 ] && grep -q '"type":"store_unavailable"' "$T/d1.json"; then ok serve_redis_delete_store_unavailable_503
else ko serve_redis_delete_store_unavailable_503 "DELETE while Redis was out of reach: $d1 $(cat "$T/d1.json")"; fi
# issue 48 survivor 15: a write whose reply was lost, sent again at once (Redis still reachable), finds the
# session at the version it made itself, with its own write token: that is the write made, a 200 and one
# stored turn, not 409 session_conflict (nor a second turn)
PQ=$(free_port)
python3 "$(dirname "$0")/serve_faults.py" "${rhp%:*}" "${rhp##*:}" redisproxy "$PQ" "$T/armq" 0 > "$T/proxyq.log" 2>&1 &
PIDS="$PIDS $!"
for _ in $(seq 1 50); do python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$PQ" 2> /dev/null && break; sleep 0.1; done
start q -m "$G" --sessions "redis://127.0.0.1:$PQ" --budget 64 -t 1; Q=$URL
q1=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time, a frog\"}],\"max_tokens\":30,\"temperature\":0,\"session_id\":\"resent$$\"}" "$Q/v1/chat/completions")
touch "$T/armq"
q2=$(curl -s -o "$T/q2.json" -w '%{http_code}' -H 'Content-Type: application/json' -d "{\"messages\":[{\"role\":\"user\",\"content\":\"The frog jumped\"}],\"max_tokens\":30,\"temperature\":0,\"session_id\":\"resent$$\"}" "$Q/v1/chat/completions")
qgot=$(content < "$T/q2.json" 2> /dev/null)
qturns=$(curl -s "$Q/v1/sessions/resent$$" | python3 -c 'import json,sys; print(json.load(sys.stdin)["turns"])' 2> /dev/null)
qv=$(resp "$rhp" HGET "kvbound:session:resent$$" v)
if [ "$q1" = 200 ] && grep -q "dropped the reply" "$T/proxyq.log" && [ "$q2" = 200 ] && [ "$qgot" = "$want" ] && [ "$qturns" = 2 ] && [ "$qv" = 2 ]; then
    ok serve_redis_resent_write_finds_own_token # issue 48 survivor 15
else ko serve_redis_resent_write_finds_own_token "turn 1 $q1; the turn whose write's reply was lost ($(cat "$T/proxyq.log")) $q2: $(head -c 300 "$T/q2.json") ('$qgot', want '$want'); turns $qturns, version $qv (want 2 and 2)"; fi
"$K" serve -m "$G" --port 0 --sessions redis://127.0.0.1:1 > /dev/null 2> "$T/bad.log"; rc=$?
if [ $rc -eq 1 ] && grep -q "redis://127.0.0.1:1" "$T/bad.log"; then ok serve_redis_unreachable_named; else ko serve_redis_unreachable_named "rc $rc: $(cat "$T/bad.log")"; fi
cli_summary
