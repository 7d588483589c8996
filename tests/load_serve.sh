#!/bin/sh
# load_serve.sh BUILD_DIR [SECONDS] — `kvbound serve` under load, bounded in
# count and time (not part of make test; .ci/run runs it): `hey` drives 1, 8
# and 64 concurrent streaming clients for SECONDS each (default 60) while
# eight Python clients keep taking turns on their own sessions. Passes when:
#   - every answer is 200 or the documented 429/503 (hey's status table);
#   - no session lost a turn: each one's turn count (GET /v1/sessions/ID)
#     equals the turns its client saw succeed;
#   - afterwards the pool is back to idle: with the sessions deleted and
#     the completions' checkpoints past their --checkpoint-ttl (2 s here;
#     the server drops expired ones from memory once a second), no page in
#     use and nothing active or queued; and the server's RSS grew
#     by less than 64 MiB over a warmed-up start (no leak per request).
# Prints "cases: P passed, F failed, S skipped" like the other tests.
. "$(dirname "$0")/cli_lib.sh"
SECS=${2:-60}
G="$D/models/stories260K/stories260K.llamacpp.gguf"
if ! "$K" serve --help > /dev/null 2>&1; then skip_case load_serve "kvbound serve is not built"; cli_summary; exit; fi
if [ ! -f "$G" ]; then skip_case load_serve "missing $G"; cli_summary; exit; fi
if ! command -v hey > /dev/null; then skip_case load_serve "hey is not installed (apt-get install hey)"; cli_summary; exit; fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URL="http://127.0.0.1:$port"
"$K" serve -m "$G" --port "$port" --budget 64 -t 2 --parallel 16 --queue 32 --queue-timeout 5 --pool-mb 64 --sessions "$T/s" --checkpoint-ttl 2 > "$T/serve.log" 2>&1 &
SP=$!
trap 'kill -9 $SP 2>/dev/null; rm -rf "$T"' EXIT
for _ in $(seq 1 100); do curl -s "$URL/health" | grep -q ok && break; sleep 0.1; done
rss() { awk '/^VmRSS/ {print $2}' "/proc/$SP/status"; }
BODY='{"prompt":"Once upon a time","max_tokens":32,"stream":true,"temperature":0.8}'
hey -n 200 -c 8 -m POST -T application/json -d "$BODY" "$URL/v1/completions" > /dev/null 2>&1 # warm up
rss0=$(rss)
# the session clients: turns until told to stop, counting the ones that succeeded
python3 - "$URL" "$T/stop" > "$T/sessions.txt" 2>&1 <<'PY' &
import json, os, sys, threading, time, urllib.request, urllib.error
url, stop = sys.argv[1], sys.argv[2]
done = {}
def client(i):
    sid = f"load-{i}"
    n = 0
    while not os.path.exists(stop):
        body = json.dumps({"messages": [{"role": "user", "content": f"turn {n} of client {i}"}], "max_tokens": 16, "session_id": sid}).encode()
        req = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                json.load(r)
                n += 1
        except urllib.error.HTTPError as e:
            if e.code not in (429, 503):
                print(f"unexpected {e.code} for {sid}")
            time.sleep(0.2)
        except OSError as e:
            print(f"error {e} for {sid}")
    done[sid] = n
ts = [threading.Thread(target=client, args=(i,)) for i in range(8)]
for t in ts: t.start()
for t in ts: t.join()
print(json.dumps(done))
PY
PY_PID=$!
bad=0
for c in 1 8 64; do
    hey -z "${SECS}s" -c "$c" -t 120 -m POST -T application/json -d "$BODY" "$URL/v1/completions" > "$T/hey$c.txt" 2>&1
    codes=$(sed -n '/Status code distribution:/,/^$/p' "$T/hey$c.txt" | grep -o '\[[0-9]*\]' | tr -d '[]' | sort -u | tr '\n' ' ')
    n200=$(sed -n '/Status code distribution:/,/^$/p' "$T/hey$c.txt" | awk '/\[200\]/ {print $2}')
    errs=$(sed -n '/Error distribution:/,$p' "$T/hey$c.txt" | grep -c '\[')
    echo "# hey -c $c for ${SECS}s: statuses $codes; 200s ${n200:-0}; transport errors $errs"
    other=$(echo "$codes" | tr ' ' '\n' | grep -v -E '^(200|429|503|)$' | head -n 1)
    if [ -n "$other" ] || [ "$errs" -gt 0 ] || [ "${n200:-0}" -lt 1 ]; then
        ko "load_hey_c$c" "statuses $codes, transport errors $errs: $(sed -n '/Error distribution:/,$p' "$T/hey$c.txt" | head -n 3)"
        bad=1
    else ok "load_hey_c$c"; fi
done
touch "$T/stop"
wait $PY_PID
counts=$(tail -n 1 "$T/sessions.txt")
lost=$(python3 - "$URL" "$counts" <<'PY'
import json, sys, urllib.request
url, counts = sys.argv[1], json.loads(sys.argv[2])
lost = []
for sid, n in counts.items():
    st = json.load(urllib.request.urlopen(f"{url}/v1/sessions/{sid}"))
    if st["turns"] != n:
        lost.append(f"{sid}: {st['turns']} stored vs {n} answered")
print("; ".join(lost) if lost else "")
PY
)
if [ -z "$lost" ] && ! grep -q -E '^(unexpected|error)' "$T/sessions.txt" && [ "$(echo "$counts" | grep -o ': [1-9]' | wc -l)" = 8 ]; then ok load_no_session_lost
else ko load_no_session_lost "$lost $(head -n 3 "$T/sessions.txt")"; fi
echo "# session turns: $counts"
for i in 0 1 2 3 4 5 6 7; do curl -s -X DELETE "$URL/v1/sessions/load-$i" > /dev/null; done
sleep 4   # the checkpoints' TTL (2 s) and the once-a-second trim
curl -s "$URL/metrics" > "$T/m.txt"
used=$(awk '/^kvbound_pool_pages_used /{print $2}' "$T/m.txt"); act=$(awk '/^kvbound_sessions_active /{print $2}' "$T/m.txt")
q=$(awk '/^kvbound_sessions_queued /{print $2}' "$T/m.txt"); rss1=$(rss)
echo "# after: pool pages used $used, active $act, queued $q; RSS $rss0 kB -> $rss1 kB"
if [ "$used" = 0 ] && [ "$act" = 0 ] && [ "$q" = 0 ]; then ok load_pool_back_to_idle; else ko load_pool_back_to_idle "pages $used, active $act, queued $q"; fi
if [ $((rss1 - rss0)) -lt 65536 ]; then ok load_rss_bounded; else ko load_rss_bounded "RSS grew from $rss0 kB to $rss1 kB"; fi
kill -TERM $SP; wait $SP 2>/dev/null
cli_summary
