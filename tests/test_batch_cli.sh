#!/bin/sh
# test_batch_cli.sh BUILD_DIR — `kvbound bench batch` and `bench
# serve-memory` as other tools read them: the JSON fields the issue names,
# with values that add up (pool peak grows with the sequences; bounded
# sessions outnumber full ones in the same pool); a peer that is not
# llama-batched-bench fails with a message naming it; --recall's field;
# bad flags are named.
. "$(dirname "$0")/cli_lib.sh"
G="$D/models/stories260K/stories260K.llamacpp.gguf"
if [ ! -f "$G" ]; then
    skip_case batch_cli "missing $G"
    cli_summary
    exit
fi
field() { # field NAME FILE N: the Nth value of "NAME": in FILE
    grep -o "\"$1\":[0-9.]*" "$2" | sed -n "${3}p" | cut -d: -f2
}
"$K" bench batch -m "$G" --parallel 1,4 --prompt-tokens 20 --gen-tokens 6 --policy h2o --budget 32 -t 2 > "$T/b.json" 2> "$T/b.err"; rc=$?
p1=$(field pool_bytes_peak "$T/b.json" 1); p4=$(field pool_bytes_peak "$T/b.json" 2)
if [ $rc -eq 0 ] && head -n 1 "$T/b.json" | grep -q '^\[$' && tail -n 1 "$T/b.json" | grep -q '^\]$' &&
   [ "$(field parallel "$T/b.json" 2)" = 4 ] && [ -n "$(field prefill_tok_per_s "$T/b.json" 2)" ] &&
   [ -n "$(field decode_tok_per_s "$T/b.json" 2)" ] && [ -n "$(field decode_tok_per_s_per_seq "$T/b.json" 2)" ] &&
   [ -n "$p1" ] && [ "$p1" -gt 0 ] && [ "$p4" -gt "$p1" ]; then ok bench_batch_json_fields
else ko bench_batch_json_fields "rc $rc: $(head -c 300 "$T/b.json") $(tail -n 2 "$T/b.err")"; fi

# --recall: every sequence with its own cold tier; the JSON says so
"$K" bench batch -m "$G" --parallel 2 --prompt-tokens 80 --gen-tokens 20 --policy streaming --budget 32 --recall-pages 2 -t 2 > "$T/r.json" 2> "$T/r.err"; rc=$?
"$K" bench batch -m "$G" --parallel 2 --prompt-tokens 80 --gen-tokens 20 --policy streaming --budget 32 -t 2 > "$T/r0.json" 2> /dev/null
if [ $rc -eq 0 ] && [ "$(field recall_pages "$T/r.json" 1)" = 2 ] && [ -z "$(field recall_pages "$T/r0.json" 1)" ] &&
   [ "$(field pool_bytes_peak "$T/r.json" 1)" -ge "$(field pool_bytes_peak "$T/r0.json" 1)" ]; then ok bench_batch_recall
else ko bench_batch_recall "rc $rc: $(head -c 300 "$T/r.json") $(tail -n 2 "$T/r.err")"; fi

"$K" bench serve-memory -m "$G" --pool-mb 2 --context 1024 --budget 64 --sessions 16 --gen-tokens 4 --json > "$T/s.json" 2> "$T/s.err"; rc=$?
sf=$(field sessions_full "$T/s.json" 1); sb=$(field sessions_bounded "$T/s.json" 1)
if [ $rc -eq 0 ] && [ -n "$sf" ] && [ -n "$sb" ] && [ "$sb" -gt "$sf" ] && [ "$sb" -le 16 ] &&
   [ -n "$(field decode_tok_per_s_full "$T/s.json" 1)" ] && [ -n "$(field decode_tok_per_s_bounded "$T/s.json" 1)" ] &&
   [ -n "$(field throughput_ratio "$T/s.json" 1)" ]; then ok bench_serve_memory_json_fields
else ko bench_serve_memory_json_fields "rc $rc: $(head -c 300 "$T/s.json") $(tail -n 2 "$T/s.err")"; fi

"$K" bench batch -m "$G" --parallel 1 --prompt-tokens 8 --gen-tokens 4 --peer /bin/false > /dev/null 2> "$T/p.err"; rc=$?
if [ $rc -eq 1 ] && grep -q "the peer exited" "$T/p.err" && grep -q "/bin/false" "$T/p.err"; then ok bench_batch_bad_peer_named
else ko bench_batch_bad_peer_named "rc $rc: $(tail -n 2 "$T/p.err")"; fi
"$K" bench batch -m "$G" --parallel 1,x > /dev/null 2> "$T/f.err"; rc=$?
if [ $rc -eq 2 ] && grep -q -- "--parallel" "$T/f.err"; then ok bench_batch_bad_flag_named; else ko bench_batch_bad_flag_named "rc $rc: $(cat "$T/f.err")"; fi
"$K" bench serve-memory -m "$G" --policy full > /dev/null 2> "$T/g.err"; rc=$?
if [ $rc -eq 2 ] && grep -q "bounded policy" "$T/g.err"; then ok serve_memory_refuses_full; else ko serve_memory_refuses_full "rc $rc: $(cat "$T/g.err")"; fi
# bench decode --depth: full holds the whole prompt; streaming holds its budget and evicted on the way
"$K" bench decode -m "$G" -n 4 --depth 100 --chunk 32 -t 1 > "$T/d1.json" 2> "$T/d1.err"; rc1=$?
"$K" bench decode -m "$G" -n 4 --depth 100 --chunk 32 -t 1 --policy streaming --budget 40 --sinks 4 > "$T/d2.json" 2> "$T/d2.err"; rc2=$?
c1=$(field cache_tokens "$T/d1.json" 1); c2=$(field cache_tokens "$T/d2.json" 1)
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$(field depth "$T/d1.json" 1)" = 100 ] && [ "$c1" = 104 ] && [ "$c2" = 40 ] &&
   grep -q '"policy":"streaming","budget":40' "$T/d2.json" && [ -n "$(field tok_per_s "$T/d2.json" 1)" ] &&
   [ "$(field bytes_per_token "$T/d1.json" 1)" -gt "$(field bytes_per_token "$T/d2.json" 1)" ]; then ok bench_decode_depth_fields
else ko bench_decode_depth_fields "rc $rc1/$rc2: $(cat "$T/d1.json" "$T/d2.json") $(tail -n 2 "$T/d1.err" "$T/d2.err")"; fi
"$K" bench decode -m "$G" --depth -3 > /dev/null 2> "$T/e.err"; rc=$?
if [ $rc -eq 2 ] && grep -q -- "--depth" "$T/e.err"; then ok bench_decode_bad_depth_named; else ko bench_decode_bad_depth_named "rc $rc: $(cat "$T/e.err")"; fi
cli_summary
