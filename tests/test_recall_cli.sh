#!/bin/sh
# test_recall_cli.sh BUILD_DIR — reversible eviction (--recall) as users meet
# it: chat's turns and /stats with recall, /save and /load (a restored chat
# answers as the one that went on); run's stats line and its cold file (spilled, then removed at exit);
# a run killed with SIGKILL leaves a cold file whose committed pages all
# check; truncated and foreign files refused by `kvbound cold`; ppl --recall
# runs each policy with and without recall (KL and ppl with it pinned on the shared
# stories260K); needle --recall JSON (its retention with recall pinned); the lab's needle at budget 64 (every
# policy's hits with recall at least the full cache's minus one); mem's
# recall bytes equal a cache's; bench decode --recall fields; bad values named.
. "$(dirname "$0")/cli_lib.sh"
M="$T/tiny.gguf"
"$K" mkmodel --shape tiny --type q8_0 -o "$M" > /dev/null 2>&1 || { ko mkmodel "kvbound mkmodel failed"; cli_summary; exit; }
field() { grep -o "\"$1\":[0-9.e-]*" "$2" | sed -n "${3:-1}p" | cut -d: -f2; }

# chat: turns through a pipe with recall; /stats shows the cold tier; /save
# keeps it (images hold the cold tier): a chat that /loads the file answers
# the next turn exactly as the one that went on, with the same cold pages
printf 'hello world this is a long turn of text to fill the cache\nand another turn\n/stats\n/save %s\none more turn\n/stats\n/quit\n' "$T/c.kvc" |
    "$K" chat -m "$M" --policy streaming --budget 64 --recall -n 100 --temp 0 > "$T/chat.txt" 2> "$T/chat.err"; rc=$?
printf '/load %s\n/stats\none more turn\n/stats\n/quit\n' "$T/c.kvc" |
    "$K" chat -m "$M" --policy streaming --budget 64 --recall -n 100 --temp 0 > "$T/chat2.txt" 2> "$T/chat2.err"; rc2=$?
recall_line() { grep -a "^\[recall:" "$1" | sed -n "${2}p"; }
if [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && grep -q "^\[recall: [1-9][0-9]* cold pages .*, 0 dropped; recall area [0-9.]* MiB; [1-9][0-9]* pages loaded\]" "$T/chat.txt" &&
   grep -q "^\[saved $T/c.kvc\]" "$T/chat.txt" && grep -q "^\[loaded $T/c.kvc: [1-9][0-9]* tokens seen\]" "$T/chat2.txt" &&
   [ "$(recall_line "$T/chat.txt" 1 | cut -d'(' -f1)" = "$(recall_line "$T/chat2.txt" 1 | cut -d'(' -f1)" ] &&
   [ "$(recall_line "$T/chat.txt" 2)" = "$(recall_line "$T/chat2.txt" 2)" ] &&
   [ "$(sed -n '/^\[saved/,$p' "$T/chat.txt" | grep -av '^\[')" = "$(sed -n '/^\[loaded/,$p' "$T/chat2.txt" | grep -av '^\[')" ] &&
   [ -n "$(sed -n '/^\[saved/,$p' "$T/chat.txt" | grep -av '^\[')" ]; then ok chat_recall_save_load
else ko chat_recall_save_load "rc $rc/$rc2: $(tail -n 4 "$T/chat.txt") | $(tail -n 4 "$T/chat2.txt") $(tail -n 2 "$T/chat2.err")"; fi

# run: the stats line; pages beyond --cold-mb 0 go to a file in --cold-dir, removed at exit
mkdir "$T/cold"
"$K" run -m "$M" -p "hello world" -n 300 --temp 0 --ignore-eos --policy streaming --budget 64 --recall --cold-mb 0 --cold-dir "$T/cold" \
    > "$T/run.txt" 2> "$T/run.err"; rc=$?
if [ $rc -eq 0 ] && grep -q "^hello world" "$T/run.txt" && grep -q "kvbound: recall: [1-9][0-9]* cold pages (0.0 MiB in memory, [0-9.]* MiB in file)" "$T/run.err" &&
   grep -q "0 dropped" "$T/run.err" && [ -z "$(ls "$T/cold")" ]; then ok run_recall_cold_file
else ko run_recall_cold_file "rc $rc: $(tail -n 2 "$T/run.err") files: $(ls "$T/cold")"; fi

# kill -9 mid-run: the cold file stays, every committed page checks
mkdir "$T/k9"
"$K" run -m "$M" -p "hello world" -n 1000000 --temp 0 --ignore-eos --policy streaming --budget 32 --recall --cold-mb 0 --cold-dir "$T/k9" \
    > /dev/null 2>&1 &
pid=$!
n=0
while [ $n -lt 100 ] && [ -z "$(ls "$T/k9")" ]; do sleep 0.05; n=$((n + 1)); done
sleep 0.5
kill -9 $pid 2> /dev/null
wait $pid 2> /dev/null
f=$(ls "$T/k9"/*.kvc 2> /dev/null | head -n 1)
if [ -n "$f" ] && "$K" cold --json "$f" > "$T/k9.json" 2> "$T/k9.err" && grep -q '"ok":true' "$T/k9.json" &&
   [ "$(field pages "$T/k9.json")" -gt 0 ]; then ok cold_file_after_kill_9
else ko cold_file_after_kill_9 "file '$f': $(cat "$T/k9.json" "$T/k9.err" 2> /dev/null)"; fi

# hostile files: cut short of the committed pages, and not a cold file at all
if [ -n "$f" ]; then
    # cut into the committed pages: past the uncommitted tail a kill -9 may leave (tail_bytes), 100 bytes more
    head -c $(( $(wc -c < "$f") - $(field tail_bytes "$T/k9.json") - 100 )) "$f" > "$T/cut.kvc"
    "$K" cold "$T/cut.kvc" > /dev/null 2> "$T/cut.err"; r1=$?
    "$K" cold "$M" > /dev/null 2> "$T/foreign.err"; r2=$?
    if [ $r1 -eq 1 ] && grep -q "cut.kvc: truncated" "$T/cut.err" && [ $r2 -eq 1 ] && grep -q "not a kvbound cold-tier file" "$T/foreign.err"; then ok cold_refuses_hostile_files
    else ko cold_refuses_hostile_files "rc $r1/$r2: $(cat "$T/cut.err" "$T/foreign.err")"; fi
else
    ko cold_refuses_hostile_files "no cold file from the killed run"
fi

# mem: the recall area it predicts is what a cache holds (bench decode reports the cache's)
"$K" bench decode -m "$M" -n 16 --depth 600 --policy streaming --budget 128 --recall --chunk 64 > "$T/bd.json" 2> "$T/bd.err"; rc=$?
"$K" mem -m "$M" --ctx 1000 --policy streaming --budget 128 --recall-pages 8 --json > "$T/mem.json" 2> "$T/mem.err"
if [ $rc -eq 0 ] && grep -q '"recall":true,"recall_pages":8,"recall_every":1,"recall_summary":"bounds"' "$T/bd.json" &&
   [ "$(field recall_bytes "$T/bd.json")" = "$(field recall_bytes "$T/mem.json")" ] && [ "$(field recall_bytes "$T/mem.json")" -gt 0 ] &&
   awk -v r="$(field recall_cost_ratio "$T/bd.json")" -v s="$(field recall_score_ms_per_token "$T/bd.json")" 'BEGIN { exit !(r > 0 && s > 0) }'; then
    ok bench_decode_recall_and_mem_agree
else ko bench_decode_recall_and_mem_agree "rc $rc: $(cat "$T/bd.json" "$T/mem.json" | head -c 900) $(tail -n 2 "$T/bd.err")"; fi

# lab: at hot budget 64 every policy's needle hits with recall reach the full cache's minus one
"$K" lab --scenario needle --budget 64 --recall --json > "$T/lab.json" 2> "$T/lab.err"; rc=$?
# (one result per line; awk, as python3 is not in the README's gcc cmake make)
if [ $rc -eq 0 ] && awk '/"policy":"/ {
        p = $0; sub(/.*"policy":"/, "", p); sub(/".*/, "", p)
        h = $0; sub(/.*"fact_hits":/, "", h); sub(/,.*/, "", h)
        r = $0; sub(/.*"fact_hits_recall":/, "", r); sub(/,.*/, "", r)
        n++; pol[n] = p; hit[n] = h + 0; rec[n] = r + 0; seen[p] = 1
        if (p == "full") full = h + 0 }
    END { if (n < 3 || full != 6 || !seen["streaming"] || !seen["window"]) exit 1
          for (i = 1; i <= n; i++) {
              if (rec[i] < full - 1) exit 1
              if ((pol[i] == "streaming" || pol[i] == "window") && hit[i] != 0) exit 1 } }' "$T/lab.json"
then ok lab_needle_recall
else ko lab_needle_recall "rc $rc: $(head -c 600 "$T/lab.json")"; fi

# bad values are named
"$K" run -m "$M" -p hi -n 1 --recall-pages 0 > /dev/null 2> "$T/e1.err"; r1=$?
"$K" run -m "$M" -p hi -n 1 --cold-dir "$T/nonexistent" > /dev/null 2> "$T/e2.err"; r2=$?
"$K" run -m "$M" -p hi -n 1 --policy streaming --budget 32 --recall --positions contiguous > /dev/null 2> "$T/e3.err"; r3=$?
"$K" run -m "$M" -p hi -n 1 --recall-summary best > /dev/null 2> "$T/e4.err"; r4=$?
if [ $r1 -eq 2 ] && grep -q -- "--recall-pages" "$T/e1.err" && [ $r2 -eq 2 ] && grep -q "nonexistent' is not a writable directory" "$T/e2.err" &&
   [ $r3 -eq 1 ] && grep -q "recall needs original or capped positions" "$T/e3.err" && [ $r4 -eq 2 ] && grep -q "bounds, centroid or exact" "$T/e4.err"; then
    ok recall_bad_values_named
else ko recall_bad_values_named "rc $r1/$r2/$r3/$r4: $(cat "$T"/e?.err)"; fi

# shared models: ppl with and without recall at the same hot budget; needle JSON
S="$D/models/stories260K/stories260K.llamacpp.gguf"
TX="$D/text/tinystories_validation_head.txt"
if [ -f "$S" ] && [ -f "$TX" ]; then
    "$K" ppl -m "$S" -f "$TX" --policy streaming --budget 64 --recall --max-tokens 1500 --json > "$T/ppl.json" 2> "$T/ppl.err"; rc=$?
    kl0=$(field kl "$T/ppl.json" 1); kl1=$(field kl "$T/ppl.json" 2); ppl1=$(field ppl "$T/ppl.json" 2)
    # the figures with recall pinned (measured 0.1798 and 4.1409, without recall
    # 0.2873 and 4.1434); a recall that scores with one query row of a GQA group,
    # keeps the worst pages, never offers the staged page or never chooses again
    # moves KL by 0.005 or more and ppl by 0.03 or more; every evicted token is
    # in one of the 1780 cold pages
    if [ $rc -eq 0 ] && grep -q '"recall":false' "$T/ppl.json" && grep -q '"recall":true,"recall_pages":8' "$T/ppl.json" &&
       [ "$(field cold_pages "$T/ppl.json")" = 1780 ] &&
       awk -v a="$kl0" -v b="$kl1" -v p="$ppl1" 'BEGIN { d = b - 0.1798; e = p - 4.1409; exit !(b < 0.7 * a && d * d <= 4e-6 && e * e <= 4e-6) }'; then
        ok ppl_recall_lowers_kl
    else ko ppl_recall_lowers_kl "rc $rc kl $kl0 -> $kl1 (want 0.1798), ppl $ppl1 (want 4.1409): $(head -c 700 "$T/ppl.json") $(tail -n 2 "$T/ppl.err")"; fi
    # the needle's key is in no stream's hot slots; with recall, 4 of the 20
    # streams hold it (measured; one query row per group gives 5, the worst
    # pages 12, a choice never renewed 8)
    "$K" needle -m "$S" --lengths 400 --depths 0.2 --policy streaming --budget 64 --recall --out "$T/nd" > /dev/null 2> "$T/nd.err"; rc=$?
    if [ $rc -eq 0 ] && grep -q '"recall":true,"recall_pages":8,"recall_every":1' "$T/nd/needle.json" &&
       grep -q '"accuracy":0.0000,"retained":0.2000,"retained_hot":0.0000,"accuracy_no_recall":0.0000,"retained_no_recall":0.0000' "$T/nd/needle.json" &&
       grep -q "with recall / without" "$T/nd/needle.md" && grep -qF '| 400 | 0.00 (0.20) / 0.00 (0.00) |' "$T/nd/needle.md"; then ok needle_recall_json
    else ko needle_recall_json "rc $rc: $(cat "$T/nd/needle.json" 2> /dev/null) $(tail -n 2 "$T/nd.err")"; fi
else
    skip_case ppl_recall_lowers_kl "shared data missing: $S"
    skip_case needle_recall_json "shared data missing: $S"
fi
cli_summary
