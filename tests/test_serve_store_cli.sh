#!/bin/sh
# test_serve_store_cli.sh BUILD_DIR — `kvbound serve` and its session store
# when the store fails or is shared (issue 32):
#   - a turn is acknowledged only once its session is stored: with the
#     SQLite file locked by another process, a turn is 503 and the session
#     stays as of its last stored turn; a new session is not created; once
#     the lock goes, the same turn succeeds and equals an uninterrupted
#     server's; the same with Redis out of memory (maxmemory 1);
#   - the store is not on the step loop: while a write waits on the lock, a
#     request without a session is answered at once; with Redis stopped, a
#     session turn fails fast and /metrics answers;
#   - versions: a replica whose copy of a session is older than the store's
#     gets 409 and keeps nothing; its retry continues from the newer state;
#     two replicas racing on one Redis session never both win;
#   - growth: the session table stays within --max-sessions and --parallel,
#     and the map of a session in the store only is served;
#   - issue 47: while the SQLite file is locked /health is 503 naming the
#     store and a DELETE is 503 store_unavailable (it was 500), both back
#     once the lock goes; a turn sent again with its Idempotency-Key, to
#     another replica on the same file, gets the stored answer and appends
#     nothing; on /completion in llama-server's shape, and asked to stream,
#     as events.
#   - issue 49: with two keys, a session of the first is absent (404) for the
#     second (GET, map, DELETE, from memory and from the store), whose turn
#     with the same id starts its own session; the first key's stay as the
#     one-key server's.
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/serve_lib.sh"
G="$D/models/stories260K/stories260K.llamacpp.gguf"
serve_ready serve_store "$G" "the tests read JSON and lock SQLite with it" || exit $SERVE_RC

# turn URL SESSION TEXT [MAX_TOKENS]: the body to $T/out, the status printed
turn() {
    curl -s -o "$T/out" -w '%{http_code}' -H 'Content-Type: application/json' \
        -d "{\"messages\":[{\"role\":\"user\",\"content\":\"$3\"}],\"max_tokens\":${4:-24},\"temperature\":0,\"session_id\":\"$2\"}" "$1/v1/chat/completions"
}
content() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["choices"][0]["message"]["content"])' "$1"; }
field() { curl -s "$1/v1/sessions/$2" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d.get('$3'))" 2> /dev/null; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }'; } # seconds since $1
below() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x < y) }'; }                  # $1 < $2
metric() { curl -s "$1/metrics" | sed -n "s/^$2 //p"; }

# the reference: two turns on an undisturbed server
start ref -m "$G" --sessions "$T/ref" --budget 64 -t 1
REF=$URL
turn "$REF" L "Once upon a time, a frog" > /dev/null
turn "$REF" L "The frog jumped" > /dev/null
want2=$(content "$T/out")

lock_sqlite() { # lock_sqlite FILE FLAG SECONDS: another process holds FILE's database exclusively, touches FLAG once it does
    python3 -c '
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
c.execute("BEGIN EXCLUSIVE")
open(sys.argv[2], "w").close()
time.sleep(float(sys.argv[3]))
c.execute("COMMIT")
' "$@"
}
# ---- SQLite locked by another process ----
start lk -m "$G" --sessions "$T/lk" --budget 64 -t 1
LK=$URL
c1=$(turn "$LK" L "Once upon a time, a frog")
p1=$(field "$LK" L position)
lock_sqlite "$T/lk/sessions.sqlite" "$T/locked" 12 &
holder=$!
for _ in $(seq 1 50); do [ -f "$T/locked" ] && break; sleep 0.1; done
t0=$(date +%s.%N)
(turn "$LK" L "The frog jumped" > "$T/c2"; cp "$T/out" "$T/out2") &
tl=$!
sleep 0.3
(curl -s -o "$T/outF" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"temperature":0,"session_id":"F"}' "$LK/v1/chat/completions" > "$T/cF") &
tf=$!
sleep 0.5
# a request without a session, while the store worker waits on the lock
tq0=$(date +%s.%N)
cq=$(curl -s -o /dev/null -w '%{http_code}' -d '{"prompt":"Once upon a time","max_tokens":8,"temperature":0}' "$LK/v1/completions")
tq=$(since $tq0)
wait $tl $tf
c2=$(cat "$T/c2"); cF=$(cat "$T/cF")
wait $holder
after=$(field "$LK" L turns)/$(field "$LK" L position)
codeF=$(curl -s -o /dev/null -w '%{http_code}' "$LK/v1/sessions/F")
if [ "$c1" = 200 ] && [ "$c2" = 503 ] && [ "$cF" = 503 ] && [ "$after" = "1/$p1" ] && [ "$codeF" = 404 ] &&
   grep -q store_unavailable "$T/out2" && grep -q 'locked' "$T/out2"; then ok serve_store_locked_turn_not_acknowledged
else ko serve_store_locked_turn_not_acknowledged "turn 1 $c1, turn 2 $c2, new session $cF (then GET $codeF), session after: $after (was 1/$p1): $(cat "$T/out2")"; fi
if [ "$cq" = 200 ] && below $tq 2; then ok serve_store_not_on_step_loop
else ko serve_store_not_on_step_loop "a sessionless completion during the locked write: $cq in $tq s"; fi
c3=$(turn "$LK" L "The frog jumped")
got3=$(content "$T/out")
cF2=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"temperature":0,"session_id":"F"}' "$LK/v1/chat/completions")
if [ "$c3" = 200 ] && [ -n "$got3" ] && [ "$got3" = "$want2" ] && [ "$(field "$LK" L turns)" = 2 ] && [ "$cF2" = 200 ]; then ok serve_store_retry_after_lock_exact
else ko serve_store_retry_after_lock_exact "retry $c3: '$got3' want '$want2'; new session $cF2"; fi

# ---- versions: a replica's stale copy is refused, not written over the newer one ----
start va -m "$G" --sessions "$T/v" --budget 64 -t 1; VA=$URL
start vb -m "$G" --sessions "$T/v" --budget 64 -t 1; VB=$URL
turn "$VA" V "Once upon a time, a frog" > /dev/null    # A keeps V in memory (version 1)
cb=$(turn "$VB" V "The frog jumped")                     # B reads version 1, writes 2
ca=$(turn "$VA" V "A bird sang")                          # A's copy is version 1: refused
cp "$T/out" "$T/va.json"
ver=$(field "$VB" V version)/$(field "$VB" V turns)
cr=$(turn "$VA" V "A bird sang")                          # the retry reads version 2
if [ "$cb" = 200 ] && [ "$ca" = 409 ] && grep -q session_conflict "$T/va.json" && [ "$ver" = 2/2 ] && [ "$cr" = 200 ] &&
   [ "$(field "$VA" V turns)" = 3 ]; then ok serve_store_stale_replica_409
else ko serve_store_stale_replica_409 "B $cb, stale A $ca ($(cat "$T/va.json")), store then $ver, retry $cr, turns $(field "$VA" V turns)"; fi

# ---- Idempotency-Key: a retry to another replica gets the stored answer, no second turn ----
kturn() { curl -s -o "$T/out" -w '%{http_code}' -H 'Content-Type: application/json' -H "Idempotency-Key: $3" \
    -d "{\"messages\":[{\"role\":\"user\",\"content\":\"$2\"}],\"max_tokens\":24,\"temperature\":0,\"session_id\":\"I\"}" "$1/v1/chat/completions"; }
i1=$(kturn "$VA" "Once upon a time, a frog" ik-1); cp "$T/out" "$T/i1.json"
i2=$(kturn "$VB" "Once upon a time, a frog" ik-1); cp "$T/out" "$T/i2.json"
i3=$(kturn "$VB" "The frog jumped" ik-2); got3=$(content "$T/out")
i4=$(kturn "$VB" "The frog jumped" ik-2); cp "$T/out" "$T/i4.json"
bad=$(curl -s -o /dev/null -w '%{http_code}' -H 'Idempotency-Key: two words' -d '{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"session_id":"I"}' "$VA/v1/chat/completions")
if [ "$i1" = 200 ] && [ "$i2" = 200 ] && cmp -s "$T/i1.json" "$T/i2.json" && [ "$i3" = 200 ] && [ "$got3" = "$want2" ] && [ "$i4" = 200 ] &&
   [ "$(content "$T/i4.json")" = "$want2" ] && [ "$(field "$VB" I turns)" = 2 ] && [ "$bad" = 400 ]; then ok serve_store_idempotency_key_retry
else ko serve_store_idempotency_key_retry "turn $i1, retry on B $i2 ($(head -c 120 "$T/i2.json")), turn 2 $i3 '$got3', retry $i4, turns $(field "$VB" I turns) (want 2), bad key $bad"; fi
# issue 47: a retry on llama-server's /completion gets its own route's stored answer (it got the OpenAI shape), as
# JSON or, asked to stream, as its one last event; a streamed retry on /v1/chat/completions or /v1/completions gets
# the stored answer as events: one chunk with the whole answer, the final chunk, the usage chunk, [DONE] (it got JSON)
rturn() { # rturn URL PATH KEY BODY: the status; the body to $T/out
    curl -s -o "$T/out" -w '%{http_code}' -H 'Content-Type: application/json' -H "Idempotency-Key: $3" -d "$4" "$1$2"; }
n1=$(rturn "$VA" /completion nk-1 '{"prompt":"Once upon a time","n_predict":8,"temperature":0,"session_id":"N"}'); cp "$T/out" "$T/n1.json"
n2=$(rturn "$VB" /completion nk-1 '{"prompt":"Once upon a time","n_predict":8,"temperature":0,"session_id":"N"}'); cp "$T/out" "$T/n2.json"
n3=$(rturn "$VB" /completion nk-1 '{"prompt":"Once upon a time","n_predict":8,"temperature":0,"session_id":"N","stream":true}'); cp "$T/out" "$T/n3.sse"
s1=$(rturn "$VB" /v1/chat/completions ik-2 '{"messages":[{"role":"user","content":"The frog jumped"}],"max_tokens":24,"temperature":0,"session_id":"I","stream":true,"stream_options":{"include_usage":true}}'); cp "$T/out" "$T/s1.sse"
c1=$(rturn "$VB" /v1/completions ck-1 '{"prompt":"Once upon a time","max_tokens":8,"temperature":0,"session_id":"C"}'); cp "$T/out" "$T/c1.json"
c2=$(rturn "$VA" /v1/completions ck-1 '{"prompt":"Once upon a time","max_tokens":8,"temperature":0,"session_id":"C","stream":true}'); cp "$T/out" "$T/c2.sse"
if [ "$n1$n2$n3$s1$c1$c2" = 200200200200200200 ] && python3 - "$T" "$(field "$VB" N turns)/$(field "$VB" C turns)" > "$T/replay.out" 2>&1 <<'PY'
import json, sys
t, turns = sys.argv[1], sys.argv[2]
def events(name):
    raw = open(f"{t}/{name}").read()
    assert raw.startswith("data: "), raw[:200]
    ev = [e[6:] for e in raw.split("\n\n") if e.startswith("data: ")]
    return ev
n1, n2 = (json.load(open(f"{t}/{f}")) for f in ("n1.json", "n2.json"))
assert n1 == n2 and "content" in n1 and n1["stop"] is True and "choices" not in n1, (n1, n2)
ev = events("n3.sse")
assert len(ev) == 1 and json.loads(ev[0]) == n1, ev            # llama-server's route: one last event, no [DONE]
stored = json.load(open(f"{t}/i4.json"))
ev = events("s1.sse")
assert ev[-1] == "[DONE]" and len(ev) == 4, ev
a, b, u = (json.loads(e) for e in ev[:3])
assert a["object"] == "chat.completion.chunk" and a["id"] == stored["id"], a
assert a["choices"][0]["delta"]["content"] == stored["choices"][0]["message"]["content"] and a["choices"][0]["finish_reason"] is None, a
assert b["choices"][0]["finish_reason"] == stored["choices"][0]["finish_reason"] and b["choices"][0]["delta"] == {}, b
assert u["choices"] == [] and u["usage"] == stored["usage"], u
c1 = json.load(open(f"{t}/c1.json"))
ev = events("c2.sse")
assert ev[-1] == "[DONE]" and len(ev) == 3, ev
a, b = (json.loads(e) for e in ev[:2])
assert a["object"] == "text_completion" and a["choices"][0]["text"] == c1["choices"][0]["text"] and b["choices"][0]["finish_reason"] == c1["choices"][0]["finish_reason"], (a, b)
assert turns == "1/1", turns
PY
then ok serve_store_idempotency_replay_shapes
else ko serve_store_idempotency_replay_shapes "$n1 $n2 $n3 $s1 $c1 $c2: $(tail -n 3 "$T/replay.out" | tr '\n' ' ')"; fi

# ---- issue 47: a long session's stored header stays bounded (digests of its first 8 and last 256 messages, not their text);
# the history a turn sends is still checked where the session holds it, and a header stored with whole messages still loads ----
start hb -m "$G" --sessions "$T/hb" --budget 64 -t 1 --max-prompt-tokens 40000; HB=$URL
hpost() { curl -s -o "$T/$1.out" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "@$T/$1.req" "$HB/v1/chat/completions"; }
hmeta() { python3 -c 'import sqlite3, struct, sys
b = sqlite3.connect(sys.argv[1]).execute("SELECT image FROM sessions WHERE id = ?", (sys.argv[2],)).fetchone()[0]
print(struct.unpack("<I", b[8:12])[0])' "$T/hb/sessions.sqlite" "$1"; }
python3 - "$T" <<'PY'
import json, sys
T = sys.argv[1]
msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i} " + "the cat sat on the mat and " * 5} for i in range(300)]
msgs.append({"role": "user", "content": "Go on"})
json.dump(msgs, open(f"{T}/h1.msgs", "w"))
open(f"{T}/h1.req", "w").write(json.dumps({"messages": msgs, "max_tokens": 2, "temperature": 0, "session_id": "H"}))
PY
h1=$(hpost h1); m1=$(hmeta H)
python3 - "$T" <<'PY'
import json, sys, copy
T = sys.argv[1]
msgs = json.load(open(f"{T}/h1.msgs")) + [json.load(open(f"{T}/h1.out"))["choices"][0]["message"]] + [{"role": "user", "content": "More"}]
def req(name, m):
    open(f"{T}/{name}.req", "w").write(json.dumps({"messages": m, "max_tokens": 2, "temperature": 0, "session_id": "H"}))
for name, i in (("hhead", 2), ("htail", 290)):
    m = copy.deepcopy(msgs); m[i]["content"] += " (changed)"; req(name, m)
req("hfull", msgs)
PY
hh=$(hpost hhead); ht=$(hpost htail); hf=$(hpost hfull); m2=$(hmeta H)
# a session stored before the digests: its whole messages in "history", read as digests and checked
python3 - "$T" <<'PY'
import json, sqlite3, struct, sys
T = sys.argv[1]
db = sqlite3.connect(f"{T}/hb/sessions.sqlite")
b = db.execute("SELECT image FROM sessions WHERE id = 'H'").fetchone()[0]
n = struct.unpack("<I", b[8:12])[0]
meta = json.loads(b[12:12 + n])
for k in ("msg_count", "msg_head", "msg_tail", "tools_digest"): meta.pop(k, None)
hist = [{"role": "user", "content": "Once upon a time, a frog"}, {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "The frog jumped"}, {"role": "assistant", "content": "It jumped high."}]
meta["history"] = hist; meta["tools"] = None
m = json.dumps(meta, separators=(",", ":")).encode()
db.execute("INSERT INTO sessions(id, image, updated, version) VALUES ('OLD', ?, 0, 1)", (b[:8] + struct.pack("<I", len(m)) + m + b[12 + n:],))
db.commit()
msgs = [{"role": "user", "content": "Once upon a time, a frog"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "The frog jumped"},
        {"role": "assistant", "content": "not what it said"}, {"role": "user", "content": "And"}]
open(f"{T}/hold1.req", "w").write(json.dumps({"messages": msgs, "max_tokens": 2, "temperature": 0, "session_id": "OLD"}))
msgs[3] = dict(hist[3], content=" It jumped high.\n")  # the ends' whitespace is not the message's
open(f"{T}/hold2.req", "w").write(json.dumps({"messages": msgs, "max_tokens": 2, "temperature": 0, "session_id": "OLD"}))
PY
ho1=$(hpost hold1); ho2=$(hpost hold2)
if [ "$h1" = 200 ] && [ "$hh" = 409 ] && grep -q 'messages\[2\] (user) differs' "$T/hhead.out" && [ "$ht" = 409 ] &&
   grep -q 'messages\[290\] (user) differs' "$T/htail.out" && [ "$hf" = 200 ] && [ "$m1" -lt 12000 ] && [ "$m2" -lt 12000 ] &&
   [ "$(field "$HB" H turns)" = 2 ] && [ "$ho1" = 409 ] && grep -q 'messages\[3\] (assistant) differs' "$T/hold1.out" && [ "$ho2" = 200 ]; then
    ok "serve_store_history_header_bounded (header $m1 then $m2 bytes)"
else ko serve_store_history_header_bounded "first turn $h1 (header $m1 bytes, want < 12000), changed head $hh, changed tail $ht ($(head -c 160 "$T/htail.out")), whole $hf (header $m2), turns $(field "$HB" H turns); old-format session: changed $ho1 ($(head -c 160 "$T/hold1.out")), same $ho2 ($(head -c 160 "$T/hold2.out"))"; fi

# ---- /health and DELETE while the SQLite file is locked: 503 naming the store, then back ----
# (/health probes the store once its last use is a second old and answers as of the last probe: up to 4 s to see it)
start hs -m "$G" --sessions "$T/hs" --budget 64 -t 1; HS=$URL
turn "$HS" D "Once upon a time" > /dev/null
h0=$(curl -s -o /dev/null -w '%{http_code}' "$HS/health")
lock_sqlite "$T/hs/sessions.sqlite" "$T/hlocked" 8 &
holder=$!
for _ in $(seq 1 50); do [ -f "$T/hlocked" ] && break; sleep 0.1; done
h1=000
for _ in $(seq 1 40); do h1=$(curl -s -o "$T/h1.json" -w '%{http_code}' "$HS/health"); [ "$h1" = 503 ] && break; sleep 0.1; done
d1=$(curl -s -o "$T/d1.json" -w '%{http_code}' -X DELETE "$HS/v1/sessions/D")
wait $holder
h2=000
for _ in $(seq 1 15); do h2=$(curl -s -o /dev/null -w '%{http_code}' "$HS/health"); [ "$h2" = 200 ] && break; sleep 0.2; done
turnsD=$(field "$HS" D turns)
d2=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$HS/v1/sessions/D")
if [ "$h0" = 200 ] && [ "$h1" = 503 ] && grep -q '"store":"sqlite"' "$T/h1.json" && grep -q 'locked' "$T/h1.json" && [ "$h2" = 200 ]; then ok serve_health_store_unwritable_503
else ko serve_health_store_unwritable_503 "before $h0, locked $h1 ($(cat "$T/h1.json")), after $h2"; fi
if [ "$d1" = 503 ] && grep -q '"type":"store_unavailable"' "$T/d1.json" && grep -q locked "$T/d1.json" && [ "$turnsD" = 1 ] && [ "$d2" = 200 ]; then ok serve_delete_store_failed_503
else ko serve_delete_store_failed_503 "DELETE while locked $d1 ($(cat "$T/d1.json")), the session then has $turnsD turns, DELETE after $d2"; fi

# ---- growth: 30 sessions, --max-sessions 2 and --parallel 2: at most 4 records ----
start gr -m "$G" --sessions "$T/gr" --budget 64 -t 1 --max-sessions 2 --parallel 2; GR=$URL
most=0
for i in $(seq 1 30); do
    turn "$GR" "g$i" "Once upon a time" > /dev/null
    r=$(metric "$GR" kvbound_session_records)
    [ "${r:-99}" -gt "$most" ] && most=${r:-99}
done
persisted=$(metric "$GR" kvbound_sessions_persisted)
for _ in $(seq 1 30); do [ "$persisted" = 30 ] && break; sleep 0.1; persisted=$(metric "$GR" kvbound_sessions_persisted); done
if [ "$most" -le 4 ] && [ "$persisted" = 30 ]; then ok serve_session_table_bounded
else ko serve_session_table_bounded "records at most $most (want <= 4), persisted $persisted (want 30)"; fi
# g1 is in the store only now: its map comes from there
curl -s -o "$T/map.json" -w '%{http_code}' "$GR/v1/sessions/g1/map" > "$T/mapcode"
inmem=$(field "$GR" g1 in_memory)
if [ "$(cat "$T/mapcode")" = 200 ] && [ "$inmem" = False ] &&
   python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["object"]=="session.map" and d["position"]>0 and len(d["layers"])>0 and all(len(h)>0 for l in d["layers"] for h in l)' "$T/map.json"
then ok serve_map_of_stored_session
else ko serve_map_of_stored_session "map $(cat "$T/mapcode"), in_memory $inmem: $(head -c 200 "$T/map.json")"; fi

# ---- issue 49 part 4: sessions per tenant. Two keys in one file; each tenant has its own session ids: the
# other's session is absent for it (GET, /map, DELETE 404; a turn with its id starts a session of its own, which
# continues nothing of the first); the first key's sessions keep their bare ids, so a server with that one key
# (--api-key) on the same store has them ----
kturn() { # kturn URL KEY SESSION TEXT: the body to $T/out, the status printed
    curl -s -o "$T/out" -w '%{http_code}' -H "Authorization: Bearer $2" \
        -d "{\"messages\":[{\"role\":\"user\",\"content\":\"$4\"}],\"max_tokens\":16,\"temperature\":0,\"session_id\":\"$3\"}" "$1/v1/chat/completions"
}
kget() { curl -s -o "$T/kget.json" -w '%{http_code}' -H "Authorization: Bearer $2" -X "${4:-GET}" "$1/v1/sessions/$3"; }
kturns() { kget "$1" "$2" "$3" > /dev/null; python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["id"], d["turns"])' "$T/kget.json" 2> /dev/null; }
printf '# the operator\nk-one\nk-two\n' > "$T/tkeys"
start tn -m "$G" --sessions "$T/tn" --budget 64 -t 1 --api-key-file "$T/tkeys"; TN=$URL
a1=$(kturn "$TN" k-one S "Once upon a time"); ta=$(content "$T/out")
g2="$(kget "$TN" k-two S) $(kget "$TN" k-two S/map) $(kget "$TN" k-two S DELETE)"
b1=$(kturn "$TN" k-two S "Once upon a time"); tb=$(content "$T/out"); n2=$(kturns "$TN" k-two S)
n1=$(kturns "$TN" k-one S)
a2=$(kturn "$TN" k-one S "The end"); n1b=$(kturns "$TN" k-one S); m1=$(kget "$TN" k-one S/map)
d2=$(kget "$TN" k-two S DELETE); g2b=$(kget "$TN" k-two S); n1c=$(kturns "$TN" k-one S)
kill $PID; wait $PID 2> /dev/null
start tn1 -m "$G" --sessions "$T/tn" --budget 64 -t 1 --api-key k-one; TN=$URL
n1d=$(kturns "$TN" k-one S)
kill $PID; wait $PID 2> /dev/null
start tn2 -m "$G" --sessions "$T/tn" --budget 64 -t 1 --api-key-file "$T/tkeys"; TN=$URL
g2c="$(kget "$TN" k-two S) $(kget "$TN" k-two S/map)"; n1e=$(kturns "$TN" k-one S)
kill $PID; wait $PID 2> /dev/null
if [ "$a1 $b1 $a2" = "200 200 200" ] && [ -n "$ta" ] && [ "$ta" = "$tb" ] && [ "$g2" = "404 404 404" ] && [ "$n2" = "S 1" ] && [ "$n1" = "S 1" ] &&
   [ "$n1b" = "S 2" ] && [ "$m1" = 200 ] && [ "$d2" = 200 ] && [ "$g2b" = 404 ] && [ "$n1c" = "S 2" ] && [ "$n1d" = "S 2" ] && [ "$g2c" = "404 404" ] && [ "$n1e" = "S 2" ]
then ok serve_store_sessions_per_tenant_404_to_another_key
else ko serve_store_sessions_per_tenant_404_to_another_key "key one's turns $a1 $a2 ('$ta'), key two's GET/map/DELETE $g2, its own turn $b1 ('$tb'), its session '$n2';
 key one's '$n1' then '$n1b' (map $m1); key two's DELETE $d2, GET after $g2b; key one's '$n1c'; one key's server '$n1d'; restarted: key two $g2c, key one '$n1e'"; fi

# ---- Redis: out of memory, stopped, and two replicas racing ----
RS=""
if start_redis; then RS=$RURL; rport=$RPORT; fi
if [ -z "$RS" ]; then
    if [ "${KVB_REQUIRE_REDIS:-0}" = 1 ]; then ko serve_store_redis "redis-server is not installed"
    else sk serve_store_redis "redis-server is not installed"; fi
    cli_summary
    exit
fi
start ra -m "$G" --sessions "$RS" --budget 64 -t 1; RA=$URL
start rb -m "$G" --sessions "$RS" --budget 64 -t 1; RB=$URL
c1=$(turn "$RA" L "Once upon a time, a frog")
p1=$(field "$RA" L position)
redis-cli -p "$rport" config set maxmemory 1 > /dev/null
c2=$(turn "$RA" L "The frog jumped"); cp "$T/out" "$T/r2.json"
cN=$(turn "$RA" N "Hello")
redis-cli -p "$rport" config set maxmemory 0 > /dev/null
after=$(field "$RA" L turns)/$(field "$RA" L position)
codeN=$(curl -s -o /dev/null -w '%{http_code}' "$RA/v1/sessions/N")
c3=$(turn "$RB" L "The frog jumped"); got3=$(content "$T/out")
if [ "$c1" = 200 ] && [ "$c2" = 503 ] && grep -q OOM "$T/r2.json" && [ "$cN" = 503 ] && [ "$codeN" = 404 ] && [ "$after" = "1/$p1" ] &&
   [ "$c3" = 200 ] && [ "$got3" = "$want2" ]; then ok serve_redis_oom_turn_not_acknowledged
else ko serve_redis_oom_turn_not_acknowledged "turn 1 $c1, OOM turn $c2 ($(head -c 200 "$T/r2.json")), new $cN then $codeN, after $after (was 1/$p1), retry on B $c3 '$got3' want '$want2'"; fi

# two replicas, one session, turns at once: never two acknowledged on the same version
bad=""; seen=""
for round in 1 2 3; do
    turn "$RA" "race$round" "Once upon a time" > /dev/null
    (turn "$RA" "race$round" "The frog jumped and jumped and jumped" 400 > "$T/ra$round") &
    w1=$!
    (turn "$RB" "race$round" "A bird sang and sang and sang" 400 > "$T/rb$round") &
    w2=$!
    wait $w1 $w2
    a=$(cat "$T/ra$round"); b=$(cat "$T/rb$round")
    seen="$seen $a/$b"
    wins=0; [ "$a" = 200 ] && wins=$((wins + 1)); [ "$b" = 200 ] && wins=$((wins + 1))
    turns=$(field "$RA" "race$round" turns)
    case "$a$b" in 200200|200409|409200|200429|429200) ;; *) bad="$bad round$round:$a/$b" ;; esac
    [ "$turns" = $((1 + wins)) ] || bad="$bad round$round:turns=$turns,wins=$wins"
done
if [ -z "$bad" ]; then ok "serve_redis_race_nothing_lost (A/B:$seen)"; else ko serve_redis_race_nothing_lost "$bad"; fi

# Redis stopped: a session turn fails at once (503), requests without sessions and /metrics go on
kill $RPID; wait $RPID 2> /dev/null
t0=$(date +%s.%N)
cs=$(turn "$RA" L "Again")
ts=$(since $t0)
t0=$(date +%s.%N)
cq=$(curl -s -o /dev/null -w '%{http_code}' -d '{"prompt":"Once upon a time","max_tokens":8,"temperature":0}' "$RA/v1/completions")
cm=$(curl -s -o /dev/null -w '%{http_code}' "$RA/metrics")
tq=$(since $t0)
if [ "$cs" = 503 ] && below $ts 6 && [ "$cq" = 200 ] && [ "$cm" = 200 ] && below $tq 2; then ok serve_redis_stopped_fails_fast
else ko serve_redis_stopped_fails_fast "session turn $cs in $ts s; completion $cq and metrics $cm in $tq s"; fi
cli_summary
