#!/bin/sh
# test_eval_cli.sh BUILD_DIR — the evaluation commands as users run them:
# `mem` reproduces the published KV sizes (exact bytes); `ppl` prints the
# JSON fields of the protocol; `sweep` and `needle` write their tables and
# well-formed SVGs; bad input is named.
. "$(dirname "$0")/cli_lib.sh"

"$K" mem --preset llama3-8b --dtype bf16 --ctx 8192,128000 --batch 1,16 > "$T/m1.txt" 2>&1
"$K" mem --preset llama3-70b --dtype bf16 --ctx 128000,1000000 --batch 1,16 > "$T/m2.txt" 2>&1
if grep -q '^ *8192 *1 *1073741824 *1.07$' "$T/m1.txt" && grep -q '^ *128000 *1 *16777216000 *16.78$' "$T/m1.txt" &&
   grep -q '^ *128000 *16 *268435456000 *268.44$' "$T/m1.txt" && grep -q '^ *128000 *1 *41943040000 *41.94$' "$T/m2.txt" &&
   grep -q '^ *128000 *16 *671088640000 *671.09$' "$T/m2.txt" && grep -q '^ *1000000 *1 *327680000000 *327.68$' "$T/m2.txt"
then ok mem_published_figures; else ko mem_published_figures "$(cat "$T/m1.txt" "$T/m2.txt")"; fi
"$K" mem --layers 32 --kv-heads 8 --head-dim 128 --dtype q8_0 --ctx 1000 --block-size 16 --policy streaming --budget 100 --json > "$T/m3.json"
# q8_0: 128 dims = 4 blocks x 34 bytes = 136; 1000 tokens -> 1008 (pages); bounded 100 -> 112
if grep -q '"bytes":70189056,' "$T/m3.json" && grep -q '"bounded_bytes":7798784,' "$T/m3.json"; then ok mem_blocks_pages_bounded
else ko mem_blocks_pages_bounded "$(cat "$T/m3.json")"; fi
"$K" mem --preset nope --ctx 1 2> "$T/e.txt"; r=$?
if [ $r -eq 2 ] && grep -q "nope" "$T/e.txt"; then ok mem_bad_preset; else ko mem_bad_preset "$(cat "$T/e.txt")"; fi

if [ ! -f "$D/models/stories260K/stories260K.llamacpp.gguf" ]; then
    skip_case shared_data "missing $D/models/stories260K (the remaining cases need it)"
    cli_summary
    exit
fi
G="$D/models/stories260K/stories260K.llamacpp.gguf"
head -c 20000 "$D/text/tinystories_validation_head.txt" > "$T/t.txt"

"$K" ppl -m "$G" -f "$T/t.txt" --policy streaming,window --budget 48 --max-tokens 300 --json --csv "$T/p.csv" --plot "$T/p.svg" > "$T/p.json" 2> /dev/null
if grep -q '"runs":\[{"policy":"streaming","budget":48,"tokens":299,"nll":' "$T/p.json" && grep -q '"baseline":"full","baseline_ppl":' "$T/p.json" &&
   grep -q '"kl":[0-9.]*,"top1":' "$T/p.json" && grep -q '"kv_bytes_peak":' "$T/p.json" && grep -q '"segments":\[' "$T/p.json" &&
   [ "$(wc -l < "$T/p.csv")" -eq 300 ] && head -n 1 "$T/p.csv" | grep -q 'position,nll_streaming,nll_window,nll_full' &&
   { ! command -v xmllint > /dev/null || xmllint --noout "$T/p.svg"; }
then ok ppl_outputs; else ko ppl_outputs "$(head -c 300 "$T/p.json")"; fi

"$K" ppl -m "$G" -f "$T/t.txt" --policy h2o --budget 4 --chunk 4 --max-tokens 300 2> "$T/e2.txt" > /dev/null; r=$?
if [ $r -ne 0 ] && grep -q budget "$T/e2.txt"; then ok ppl_budget_error; else ko ppl_budget_error "$(cat "$T/e2.txt")"; fi

# a text past 8x the trained length (stories260K: 128) with the full baseline and no --max-tokens is
# refused, naming both ways on; --allow-long-baseline runs it (issue 47, item 14)
"$K" ppl -m "$G" -f "$T/t.txt" --policy streaming --budget 48 > /dev/null 2> "$T/e3.txt"; r=$?
head -c 2400 "$T/t.txt" > "$T/t1k.txt"   # about 1,150 tokens: past 1,024, quick to run whole
"$K" ppl -m "$G" -f "$T/t1k.txt" --policy streaming --budget 48 > /dev/null 2>&1; r1=$?
"$K" ppl -m "$G" -f "$T/t1k.txt" --policy streaming --budget 48 --allow-long-baseline --json > "$T/long.json" 2> /dev/null; r2=$?
if [ $r -eq 2 ] && [ $r1 -eq 2 ] && grep -q 'more than 8x the model.s trained length 128' "$T/e3.txt" && grep -q -- '--max-tokens N' "$T/e3.txt" &&
   grep -q -- '--allow-long-baseline' "$T/e3.txt" && [ $r2 -eq 0 ] && grep -q '"tokens":1[0-9][0-9][0-9],' "$T/long.json"
then ok ppl_long_baseline_refused; else ko ppl_long_baseline_refused "rc $r $r1 $r2: $(cat "$T/e3.txt") $(head -c 200 "$T/long.json")"; fi

# on a terminal, ppl draws its progress with the elapsed time and an ETA on stderr (a pty from python3)
if need_tool ppl_progress_eta python3 KVB_REQUIRE_PYTHON "Debian python3"; then
    python3 "$(dirname "$0")/pty_run.py" "$K" ppl -m "$G" -f "$T/t.txt" --policy streaming --budget 48 --max-tokens 300 > "$T/pty.txt" 2>&1
    if grep -q 'streaming budget 48 \[=*\] 299/299, [0-9]* s, ETA done' "$T/pty.txt" && grep -q 'ETA [0-9?]' "$T/pty.txt"; then ok ppl_progress_eta
    else ko ppl_progress_eta "$(tr '\r' '\n' < "$T/pty.txt" | tail -n 3)"; fi
fi

"$K" sweep -m "$G" -f "$T/t.txt" --policies window,h2o --budgets 32,64 --max-tokens 200 --out "$T/sw" > /dev/null 2>&1
if [ -s "$T/sw/sweep.csv" ] && [ "$(wc -l < "$T/sw/sweep.csv")" -eq 5 ] && grep -q '| h2o | 64 |' "$T/sw/sweep.md" &&
   { ! command -v xmllint > /dev/null || xmllint --noout "$T/sw/sweep.svg"; }
then ok sweep_outputs; else ko sweep_outputs "$(cat "$T/sw/sweep.csv" 2>&1 | head -n 3)"; fi

"$K" needle -m "$G" --lengths 128,256 --depths 0,1 --policy full --out "$T/nd" > /dev/null 2>&1
if grep -q '"accuracy":[0-9.]*,"retained":1.0000}' "$T/nd/needle.json" && ! grep -q '"retained":0' "$T/nd/needle.json" &&
   grep -q '| 256 |' "$T/nd/needle.md" && { ! command -v xmllint > /dev/null || xmllint --noout "$T/nd/needle.svg"; }
then ok needle_outputs_full_retains; else ko needle_outputs_full_retains "$(cat "$T/nd/needle.json" 2>&1 | head -c 300)"; fi
# needle --policy takes a list, as ppl does, one set of files per policy; --out defaults to ./needle (issue 47, item 14)
KA=$(cd "$(dirname "$K")" && pwd)/kvbound; GA=$(cd "$(dirname "$G")" && pwd)/$(basename "$G")
mkdir "$T/cwd"
(cd "$T/cwd" && "$KA" needle -m "$GA" --lengths 128 --depths 0,1 --policy full,streaming --budget 64 > out.txt 2> err.txt); r=$?
if [ $r -eq 0 ] && grep -q '"policy":"full","budget":0,' "$T/cwd/needle/needle-full.json" &&
   grep -q '"policy":"streaming","budget":64,' "$T/cwd/needle/needle-streaming.json" &&
   [ -s "$T/cwd/needle/needle-streaming.md" ] && [ -s "$T/cwd/needle/needle-full.svg" ] && ! [ -e "$T/cwd/needle/needle.json" ] &&
   grep -q 'needle: needle/needle-streaming.json, needle/needle-streaming.md, needle/needle-streaming.svg' "$T/cwd/out.txt"
then ok needle_policy_list_default_out; else ko needle_policy_list_default_out "rc $r: $(cat "$T/cwd/err.txt" "$T/cwd/out.txt" | tail -n 3)"; fi

cli_summary
