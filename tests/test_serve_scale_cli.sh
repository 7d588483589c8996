#!/bin/sh
# test_serve_scale_cli.sh BUILD_DIR — the scale-out deployment of
# docs/SERVING.md ("Three replicas behind haproxy"), made of existing parts:
# three `kvbound serve` replicas on loopback sharing one Redis, Debian's
# haproxy in front with the page's haproxy.cfg (the block marked
# scale-config, its ports replaced by free ones: leastconn, health checks on
# GET /health, a request whose connection failed retried on another
# replica, nothing retried once sent). 16 session clients
# (tests/serve_scale_load.py) send chat turns for 20 s; 6 s in, one replica
# is killed with SIGKILL and restarted 3 s later on its port. Then: every
# acknowledged turn is in the store, counted once, no turn lost (a turn
# stored whose answer never came is counted apart); every session answers a
# further turn; clients saw only errors the API calls retryable; haproxy's
# health checks took the replica out and back, and the restarted one serves;
# no replica refused a connection (behind a proxy every connection comes
# from one address: --max-connections-per-ip). Prints the load's figures as
# one JSON line, "scale: {...}" (latency over the whole load and over the
# turns that started 5-13 s in, around the kill). Redis: KVB_TEST_REDIS,
# else a redis-server started here; Redis or haproxy missing: skipped (a
# failure under KVB_REQUIRE_REDIS=1, as .ci/run sets).
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/serve_lib.sh"
G="$D/models/stories260K/stories260K.llamacpp.gguf"
serve_ready serve_scale "$G" "the load clients are Python" || exit $SERVE_RC
need_tool serve_scale_haproxy haproxy KVB_REQUIRE_REDIS "the load balancer in front of the replicas; Debian haproxy" || { cli_summary; exit; }
R=${KVB_TEST_REDIS:-}
if [ -z "$R" ] && start_redis; then R=$RURL; fi
if [ -z "$R" ]; then
    if [ "${KVB_REQUIRE_REDIS:-0}" = 1 ]; then ko serve_scale "no Redis (KVB_TEST_REDIS unset, redis-server not installed)"
    else sk serve_scale "no Redis (KVB_TEST_REDIS unset, redis-server not installed)"; fi
    cli_summary
    exit
fi
LOAD="python3 $(dirname "$0")/serve_scale_load.py"
SECONDS_LOAD=${KVB_SCALE_SECONDS:-20}
metric() { curl -s "$1/metrics" | awk -v m="$2" '$1 == m { s += $2 } END { print s + 0 }'; }

# the replicas: one Redis, -t 1 each (two cores here), --max-connections-per-ip
# at --max-connections as a server behind a proxy should run
REP="-m $G --sessions $R --budget 64 -t 1 --parallel 4 --max-connections 256 --max-connections-per-ip 256"
for i in 1 2 3; do
    start r$i $REP
    [ -n "$URL" ] || { ko serve_scale_start "replica $i: $(tail -n 2 "$T/r$i.log" | tr '\n' ' ')"; cli_summary; exit; }
    eval "P$i=\${URL##*:}; PID$i=\$PID"
done
HP=$(free_port)
SP=$(free_port)
# haproxy.cfg: docs/SERVING.md's, its ports replaced by free ones
awk '/scale-config:/ { want = 1; next } want && /^```/ { if (inb) exit; inb = 1; next } inb { print }' "$(dirname "$0")/../docs/SERVING.md" |
    sed -e "s/127\.0\.0\.1:8080\$/127.0.0.1:$HP/" -e "s/127\.0\.0\.1:8081\$/127.0.0.1:$P1/" -e "s/127\.0\.0\.1:8082\$/127.0.0.1:$P2/" \
        -e "s/127\.0\.0\.1:8083\$/127.0.0.1:$P3/" -e "s/127\.0\.0\.1:8404\$/127.0.0.1:$SP/" > "$T/haproxy.cfg"
n=$(grep -c -e ":$HP\$" -e ":$P1\$" -e ":$P2\$" -e ":$P3\$" -e ":$SP\$" "$T/haproxy.cfg")
[ "$n" -eq 5 ] || { ko serve_scale_haproxy_config "docs/SERVING.md's scale-config block: $n of its 5 ports found"; cli_summary; exit; }
if ! haproxy -c -f "$T/haproxy.cfg" > "$T/haproxy-check.log" 2>&1; then
    ko serve_scale_haproxy_config "$(tail -n 3 "$T/haproxy-check.log" | tr '\n' ' ')"; cli_summary; exit
fi
haproxy -db -f "$T/haproxy.cfg" > "$T/haproxy.log" 2>&1 &
PIDS="$PIDS $!"
up=0
for _ in $(seq 1 100); do   # the three replicas UP in haproxy's eyes
    up=$(curl -s "http://127.0.0.1:$SP/stats;csv" | awk -F, '$1 == "kvbound" && $2 ~ /^r[123]$/ && $18 == "UP"' | wc -l)
    [ "$up" -eq 3 ] && break
    sleep 0.1
done
if [ "$up" -ne 3 ]; then ko serve_scale_start "haproxy sees $up replicas up: $(tail -n 3 "$T/haproxy.log" | tr '\n' ' ')"; cli_summary; exit; fi

# the load, with replica 2 killed 6 s in and restarted 3 s later
$LOAD "http://127.0.0.1:$HP" 16 "$SECONDS_LOAD" 4 "scale$$" 5:13 > "$T/load.json" 2> "$T/load.err" &
lp=$!
sleep 6
kill -9 "$PID2"
sleep 3
start r2b $REP --port "$P2"
restarted=$URL
wait $lp; lrc=$?
hs=$(curl -s "http://127.0.0.1:$SP/stats;csv" | awk -F, '$1 == "kvbound" && $2 == "BACKEND" { print "{\"retries\": " $16+0 ", \"redispatches\": " $17+0 "}" }')
echo "scale: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["haproxy"]=json.loads(sys.argv[2] or "{}"); print(json.dumps(d, sort_keys=True))' "$T/load.json" "$hs" 2>/dev/null || cat "$T/load.json" "$T/load.err")"
field() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, d))' "$T/load.json" "$1" 2>/dev/null; }

if [ "$(field 'turns_acknowledged > 0 and turns_lost == 0 and turns_extra == 0')" = True ]; then ok serve_scale_no_turn_lost
else ko serve_scale_no_turn_lost "rc $lrc: $(cat "$T/load.json" "$T/load.err" | tail -n 3)"; fi
if [ "$(field 'failures == 0')" = True ]; then ok serve_scale_only_retryable_errors
else ko serve_scale_only_retryable_errors "$(field 'failures_first')"; fi
if [ "$(field 'sessions_checked == clients and sessions_corrupt == 0')" = True ]; then ok serve_scale_sessions_answer_after
else ko serve_scale_sessions_answer_after "$(field 'sessions_corrupt') of $(field 'sessions_checked') sessions did not take a further turn"; fi
if [ -n "$restarted" ] && [ "$(metric "$restarted" kvbound_requests_total)" -gt 0 ]; then ok serve_scale_restarted_replica_serves
else ko serve_scale_restarted_replica_serves "restarted on $P2: '$restarted', $(tail -n 2 "$T/r2b.log" | tr '\n' ' ')"; fi
refused=0
for u in "http://127.0.0.1:$P1" "http://127.0.0.1:$P3" "$restarted"; do
    [ -n "$u" ] && refused=$((refused + $(metric "$u" kvbound_connections_refused_total)))
done
if [ "$refused" -eq 0 ]; then ok serve_scale_no_connection_refused
else ko serve_scale_no_connection_refused "$refused connections refused by the replicas (--max-connections-per-ip behind one proxy address)"; fi
for i in $(seq 0 15); do curl -s -o /dev/null -X DELETE "http://127.0.0.1:$HP/v1/sessions/scale$$-$i"; done   # a shared Redis keeps nothing of it
# haproxy's health checks took the killed replica out and the restarted one back
if grep -q 'kvbound/r2 is DOWN' "$T/haproxy.log" && grep -q 'kvbound/r2 is UP' "$T/haproxy.log"; then ok serve_scale_health_checks
else ko serve_scale_health_checks "$(grep 'kvbound/r2' "$T/haproxy.log" | tail -n 2 | tr '\n' ' ')"; fi
cli_summary
