#!/bin/sh
# test_serve_park_cli.sh BUILD_DIR — `kvbound serve --park-compress kvzip
# --park-ratio R` (issue 52, compress-on-park): when a session's turn ends
# and it is stored, its cache is compressed without a question to 1 - R of
# its tokens, and the next turn starts from that:
#   - the turn's answer is the plain server's (parking happens after it);
#     its kvbound.cache_tokens is (1 - R) of what the plain server's session
#     holds (policy full, one token per stream lost to rounding at most),
#     its position the same;
#   - the stored image (the SQLite store's blob) is smaller than the plain
#     server's, and Redis holds the same smaller session;
#   - the next turn continues from it, from memory and from the store after a
#     restart: 200, the position counts every token since the first turn;
#   - bad values refused by name: keydiff (not implemented), a ratio outside
#     (0, 1), one flag without the other.
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/serve_lib.sh"
G="$D/models/stories260K/stories260K.llamacpp.gguf"
serve_ready serve_park "$G" "the tests read JSON and the SQLite store with it" || exit $SERVE_RC

# turn URL SESSION TEXT: the body to $T/out, the status printed
turn() {
    curl -s -o "$T/out" -w '%{http_code}' -H 'Content-Type: application/json' \
        -d "{\"messages\":[{\"role\":\"user\",\"content\":\"$3\"}],\"max_tokens\":16,\"temperature\":0,\"session_id\":\"$2\"}" "$1/v1/chat/completions"
}
get() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$T/out" "$1"; }
blob() { python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select length(image) from sessions where id=?", (sys.argv[2],)).fetchone()[0])' "$1/sessions.sqlite" "$2" 2> /dev/null; }
STORY="Once upon a time there was a little girl named Lily. She loved to play outside in the park with her dog. One day she found a big red ball under a tree and she was very happy."

start plain -m "$G" --sessions "$T/a" --policy full -c 512 -t 1
A=$URL
start park -m "$G" --sessions "$T/b" --policy full -c 512 -t 1 --park-compress kvzip --park-ratio 0.5
B=$URL
sa=$(turn "$A" S "$STORY"); ca=$(get 'd["choices"][0]["message"]["content"]'); pa=$(get 'd["kvbound"]["position"]'); ta=$(get 'd["kvbound"]["cache_tokens"]')
sb=$(turn "$B" S "$STORY"); cb=$(get 'd["choices"][0]["message"]["content"]'); pb=$(get 'd["kvbound"]["position"]'); tb=$(get 'd["kvbound"]["cache_tokens"]')
ia=$(blob "$T/a" S); ib=$(blob "$T/b" S)
# full keeps every token; kvzip 0.5 keeps floor(0.5 x all) over the streams: per stream at most half, at least half less one
if [ "$sa" = 200 ] && [ "$sb" = 200 ] && [ "$ca" = "$cb" ] && [ "$pa" = "$pb" ] && [ "$ta" = "$pa" ] &&
   awk -v a="$ta" -v b="$tb" 'BEGIN { exit !(b <= a / 2 && b >= a / 2 - 1) }' && [ -n "$ia" ] && [ -n "$ib" ] &&
   awk -v a="$ia" -v b="$ib" 'BEGIN { exit !(b < a * 0.7) }'
then ok park_compress_kvzip_stores_half_the_tokens
else ko park_compress_kvzip_stores_half_the_tokens "status $sa $sb; position $pa $pb; cache_tokens $ta $tb; blobs $ia $ib; $(tail -n 2 "$T/park.log")"; fi

# the next turn goes on from the parked session: from memory, then from the store after a restart
s2=$(turn "$B" S "The ball was"); p2=$(get 'd["kvbound"]["position"]'); t2=$(get 'd["kvbound"]["cache_tokens"]')
kill $PID; wait $PID 2> /dev/null
start park2 -m "$G" --sessions "$T/b" --policy full -c 512 -t 1 --park-compress kvzip --park-ratio 0.5
s3=$(turn "$URL" S "Then she"); p3=$(get 'd["kvbound"]["position"]' 2> /dev/null); t3=$(get 'd["kvbound"]["cache_tokens"]' 2> /dev/null)
if [ "$s2" = 200 ] && [ "$s3" = 200 ] && [ "$p2" -gt "$pb" ] && [ "$p3" -gt "$p2" ] && [ "$t2" -lt "$p2" ] && [ "$t3" -lt "$p3" ] &&
   awk -v t="$t3" -v p="$p3" 'BEGIN { exit !(t <= p / 2) }'
then ok park_compress_next_turn_continues_from_memory_and_store
else ko park_compress_next_turn_continues_from_memory_and_store "status $s2 $s3; position $pb $p2 $p3; cache_tokens $t2 $t3; $(head -c 300 "$T/out"; tail -n 2 "$T/park2.log")"; fi

# Redis: the same smaller session
if start_redis; then
    start parkr -m "$G" --sessions "$RURL" --policy full -c 512 -t 1 --park-compress kvzip --park-ratio 0.5
    sr=$(turn "$URL" R "$STORY"); tr=$(get 'd["kvbound"]["cache_tokens"]')
    if [ "$sr" = 200 ] && [ "$tr" = "$tb" ]; then ok park_compress_redis_store
    else ko park_compress_redis_store "status $sr; cache_tokens $tr, SQLite server's $tb; $(tail -n 2 "$T/parkr.log")"; fi
else
    skip_case park_compress_redis_store "redis-server is not installed"
fi

# refusals by name
"$K" serve -m "$G" --park-compress keydiff --park-ratio 0.5 > /dev/null 2> "$T/e1.txt"; r1=$?
"$K" serve -m "$G" --park-compress kvzip --park-ratio 1 > /dev/null 2> "$T/e2.txt"; r2=$?
"$K" serve -m "$G" --park-ratio 0.5 > /dev/null 2> "$T/e3.txt"; r3=$?
"$K" serve -m "$G" --park-compress nope --park-ratio 0.5 > /dev/null 2> "$T/e4.txt"; r4=$?
if [ $r1 -eq 2 ] && grep -q -- '--park-compress keydiff: not implemented' "$T/e1.txt" && [ $r2 -eq 2 ] && grep -q -- "--park-ratio: '1'" "$T/e2.txt" &&
   [ $r3 -eq 2 ] && grep -q -- '--park-compress and --park-ratio go together' "$T/e3.txt" && [ $r4 -eq 2 ] && grep -q "unknown policy 'nope'" "$T/e4.txt"
then ok park_compress_refused_by_name
else ko park_compress_refused_by_name "rc $r1 $r2 $r3 $r4: $(cat "$T/e1.txt" "$T/e2.txt" "$T/e3.txt" "$T/e4.txt")"; fi

cli_summary
