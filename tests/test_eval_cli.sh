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
# a hybrid (Qwen3.6-35B-A3B: 40 layers, every 4th attention with 2 KV heads of 256; 30 Gated DeltaNet layers of 16 key and
# 32 value heads of 128, 4 taps): K/V 131072 x 10 x 2 x 1024 bytes; the state 30 x 4 x (32 x 128 x 128 + 3 x 8192) bytes
# a sequence at any length and under any policy; streaming 4096 keeps 4096 x 10 x 2 x 1024; the saving compares the totals
"$K" mem --preset qwen3.6-35b-a3b --ctx 131072 --policy streaming --budget 4096 --json > "$T/h1.json" 2>&1
"$K" mem --preset qwen3.6-35b-a3b --ctx 131072 --policy streaming --budget 4096 > "$T/h1.txt" 2>&1
if grep -q '"layers":40,"kv_heads":2,"head_dim":256,' "$T/h1.json" && grep -q '"recurrent_layers":30,"state_bytes_per_sequence":65863680,' "$T/h1.json" &&
   grep -q '"bytes":2684354560,"size":2.68,"state_bytes":65863680,"total_bytes":2750218240,' "$T/h1.json" &&
   grep -q '"bounded_bytes":83886080,"bounded_size":0.08,"bounded_total_bytes":149749760,"bounded_total_size":0.15,"saving":0.9455}' "$T/h1.json" &&
   grep -q '^ *131072 *1 *2684354560 *2.68 *0.07 *2.75 *0.08 *0.15 *94.6%$' "$T/h1.txt" && grep -q '^30 Gated DeltaNet layers' "$T/h1.txt"
then ok mem_hybrid_preset_qwen36_state_counted; else ko mem_hybrid_preset_qwen36_state_counted "$(cat "$T/h1.json" "$T/h1.txt")"; fi
# latent attention (DeepSeek-V3: 61 layers of one 576-dim row a token for 128 heads of K 192 and V 128; f16): the cache's K
# rows only (a token's value is its latent, read off the row) 61 x 576 x 2 = 70272 bytes a token against the per-head 61 x 128 x (192 + 128) x 2 = 4997120; 131072 tokens;
# streaming 4096 keeps 4096 rows a layer. Kimi-K2: 64 heads, so half the per-head figure
"$K" mem --preset deepseek-v3 --ctx 131072 --policy streaming --budget 4096 --json > "$T/d1.json" 2>&1
"$K" mem --preset deepseek-v3 --ctx 131072 --policy streaming --budget 4096 > "$T/d1.txt" 2>&1
"$K" mem --preset kimi-k2 --ctx 1000 --json > "$T/d2.json" 2>&1
if grep -q '"layers":61,"kv_heads":1,"head_dim":576,.*"latent":{"row_dims":576,"bytes_per_token":70272,"heads":128,"head_k":192,"head_v":128,"per_head_kv_bytes_per_token":4997120},' "$T/d1.json" &&
   grep -q '"tokens":131072,"batch":1,"bytes":9210691584,.*"bounded_bytes":287834112,' "$T/d1.json" &&
   grep -q '^latent attention: .* 70272 bytes a token against 4997120 for the per-head K/V it replaces (71.1x)$' "$T/d1.txt" &&
   grep -q '"heads":64,"head_k":192,"head_v":128,"per_head_kv_bytes_per_token":2498560}' "$T/d2.json"
then ok mem_latent_presets_deepseek_v3_kimi_k2_per_head_kv_replaced; else ko mem_latent_presets_deepseek_v3_kimi_k2_per_head_kv_replaced "$(cat "$T/d1.json" "$T/d1.txt" "$T/d2.json")"; fi
# Qwen3.5-27B: 16 attention layers of 4 KV heads of 256, 48 Gated DeltaNet layers of 16/48 heads of 128 (C = 10240), batch 2
"$K" mem --preset qwen3.5-27b --ctx 1000 --batch 2 --json > "$T/h2.json" 2>&1
if grep -q '"recurrent_layers":48,"state_bytes_per_sequence":156893184,' "$T/h2.json" &&
   grep -q '"tokens":1000,"batch":2,"bytes":131072000,"size":0.13,"state_bytes":313786368,"total_bytes":444858368,' "$T/h2.json"
then ok mem_hybrid_preset_qwen35_27b_batch; else ko mem_hybrid_preset_qwen35_27b_batch "$(cat "$T/h2.json")"; fi
# Granite 4.0-H (Mamba-2 hybrids) at 128K: Tiny's 4 attention layers of 4 KV heads of 128 (131072 x 4 x 4 x 512 bytes), 36
# Mamba-2 layers of d_inner 3072, state 128, 1 group, 4 taps: 36 x 4 x (3072 x 128 + 3 x 3328) bytes; Small's 8 KV heads and
# d_inner 8192: 36 x 4 x (8192 x 128 + 3 x 8448); streaming 4096 keeps 4096 tokens of the attention layers. -m
# tiny-granitehybrid with --block-size 16: pages of 1024 bytes hold 16 rows of 16 floats, a layer's 128 + 36 rows take 11,
# so 3 x 11 pages = 33792 bytes a sequence (the cache's packing); 100 tokens -> 7 pages of K/V for each of 2 heads
"$K" mem --preset granite-4.0-h-tiny --ctx 131072 --policy streaming --budget 4096 --json > "$T/g1.json" 2>&1
"$K" mem --preset granite-4.0-h-small --ctx 131072 --policy streaming --budget 4096 > "$T/g2.txt" 2>&1
"$K" mkmodel --shape tiny-granitehybrid -o "$T/gh.gguf" > /dev/null 2>&1
"$K" mem -m "$T/gh.gguf" --ctx 100 --block-size 16 --json > "$T/g3.json" 2>&1
if grep -q '"recurrent_layers":36,"state_bytes_per_sequence":58060800,' "$T/g1.json" &&
   grep -q '"bytes":1073741824,"size":1.07,"state_bytes":58060800,"total_bytes":1131802624,.*"bounded_bytes":33554432,.*"saving":0.9191}' "$T/g1.json" &&
   grep -q '^36 Mamba-2 layers hold no K/V but a recurrent state of 154644480 bytes' "$T/g2.txt" &&
   grep -q '^ *131072 *1 *2147483648 *2.15 *0.15 *2.30 *0.07 *0.22 *90.4%$' "$T/g2.txt" &&
   grep -q '"recurrent_layers":3,"state_bytes_per_sequence":33792,.*"bytes":14336,"size":0.00,"state_bytes":33792,' "$T/g3.json"
then ok mem_mamba2_presets_granite_4_0_h_and_model_pages; else ko mem_mamba2_presets_granite_4_0_h_and_model_pages "$(cat "$T/g1.json" "$T/g2.txt" "$T/g3.json")"; fi
# -m tiny-qwen35 (1 attention layer of 2 KV heads of 32, f16: 256 bytes a token; 3 Gated DeltaNet layers of 2/4 heads of 16,
# 4 taps: 4 x (4 x 16 x 16 + 3 x 128) = 5632 bytes each = info's 16896); with --block-size 16 the cache's pages: 2048 bytes
# hold 32 rows of 16 floats, a layer's 64 + 24 rows take 3, so 9 pages = 18432 a sequence; 100 tokens -> 112 slots
"$K" mkmodel --shape tiny-qwen35 -o "$T/q35.gguf" > /dev/null 2>&1
"$K" mem -m "$T/q35.gguf" --ctx 100 --json > "$T/h3.json" 2>&1
"$K" mem -m "$T/q35.gguf" --ctx 100 --batch 2 --block-size 16 --policy streaming --budget 16 --json > "$T/h4.json" 2>&1
"$K" mem -m "$T/q35.gguf" --ctx 100 --policy streaming --budget 16 --recall-pages 4 2> "$T/h5.txt" > /dev/null; r=$?
if grep -q '"layers":4,"kv_heads":2,"head_dim":32,.*"recurrent_layers":3,"state_bytes_per_sequence":16896,' "$T/h3.json" &&
   grep -q '"bytes":25600,"size":0.00,"state_bytes":16896,"total_bytes":42496,' "$T/h3.json" &&
   grep -q '"bytes":57344,"size":0.00,"state_bytes":36864,"total_bytes":94208,.*"bounded_bytes":8192,.*"bounded_total_bytes":45056,' "$T/h4.json" &&
   [ $r -eq 2 ] && grep -q "recall on a hybrid model is not implemented" "$T/h5.txt"
then ok mem_hybrid_model_attention_layers_and_state_pages; else ko mem_hybrid_model_attention_layers_and_state_pages "$(cat "$T/h3.json" "$T/h4.json" "$T/h5.txt")"; fi

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

# needle --passkeys N --ask-after (issue 52): needle.json gains "passkeys" and "ask_after" (absent for one passkey asked
# inside the prompt, whose output is unchanged); full holds every passkey, streaming 32 over the haystack alone none of
# them, and answers no better than full; bad values refused by name
"$K" needle -m "$G" --lengths 256 --depths 0 --passkeys 3 --ask-after --policy full,streaming --budget 32 --out "$T/pk" > /dev/null 2> "$T/pk.err"; r=$?
acc_full=$(grep -o '"accuracy":[0-9.]*' "$T/pk/needle-full.json" 2> /dev/null | cut -d: -f2)
acc_st=$(grep -o '"accuracy":[0-9.]*' "$T/pk/needle-streaming.json" 2> /dev/null | cut -d: -f2)
if [ $r -eq 0 ] && grep -q '"seed":1,"passkeys":3,"ask_after":true,"recall":false,' "$T/pk/needle-full.json" &&
   grep -q '"retained":1.0000}' "$T/pk/needle-full.json" && grep -q '"retained":0.0000}' "$T/pk/needle-streaming.json" &&
   awk -v f="$acc_full" -v s="$acc_st" 'BEGIN { exit !(f != "" && s != "" && f + 0 >= s + 0) }' &&
   ! grep -q '"passkeys"' "$T/nd/needle.json"
then ok needle_passkeys_ask_after_json; else ko needle_passkeys_ask_after_json "rc $r: $(cat "$T/pk/needle-full.json" "$T/pk.err" 2>&1 | head -c 400)"; fi
"$K" needle -m "$G" --lengths 256 --depths 0 --passkeys 0 --out "$T/pk0" > /dev/null 2> "$T/pk0.err"; r0=$?
"$K" needle -m "$G" --lengths 64 --depths 0 --passkeys 20 --out "$T/pk1" > /dev/null 2> "$T/pk1.err"; r1=$?
if [ $r0 -eq 2 ] && grep -q -- '--passkeys' "$T/pk0.err" && [ $r1 -ne 0 ] && grep -q 'passkeys 20 do not fit in length 64' "$T/pk1.err"
then ok needle_passkeys_refused_by_name; else ko needle_passkeys_refused_by_name "rc $r0 $r1: $(cat "$T/pk0.err" "$T/pk1.err")"; fi

# kvbound ruler (issue 52): RULER's tasks on the shared model. The JSON in kvpress's terms (ratio = the fraction removed),
# the table, every input within the length less the answer's tokens (niah 128, fwe 50), the average the tasks' mean;
# --ratio sets the budget to the rest of the compressed prompt, which --ask-after makes the context alone; bad input named
if [ -f /usr/share/dict/american-english ]; then
    "$K" ruler -m "$G" --tasks niah_single_1,niah_single_2,fwe --length 700 --samples 2 --out "$T/ru" > /dev/null 2> "$T/ru.err"; r=$?
    avg_ok=$(awk '{ n = 0; s = 0; t = $0; while (match(t, /"score":[0-9.]+/)) { s += substr(t, RSTART + 8, RLENGTH - 8); n++; t = substr(t, RSTART + RLENGTH) }
                    match($0, /"average":[0-9.]+/); a = substr($0, RSTART + 10, RLENGTH - 10); d = s / n - a; print (n == 3 && d < 0.006 && d > -0.006) ? 1 : 0 }' "$T/ru/ruler.json" 2> /dev/null)
    fits=$(awk '/^kvbound ruler: / { n++; t = $0; sub(/^kvbound ruler: /, "", t); split(t, w, " "); p = $0; sub(/.*\(/, "", p); p += 0
                lim = (w[1] == "fwe") ? 650 : 572; if (p > lim || p < lim - 40) bad++ } END { print (n == 6 && !bad) ? 1 : 0 }' "$T/ru.err")
    if [ $r -eq 0 ] && grep -Eq '^\{"model":"[^"]*stories260K.llamacpp.gguf","length":700,"policy":"full","ratio":0,"ask_after":false,"seed":42,"chat_template":"none","recall":false,"tasks":\{"niah_single_1":\{"score":[0-9.]+,"samples":2\},"niah_single_2":\{"score":[0-9.]+,"samples":2\},"fwe":\{"score":[0-9.]+,"samples":2\}\},"average":[0-9.]+\}$' "$T/ru/ruler.json" &&
       [ "$avg_ok" = 1 ] && [ "$fits" = 1 ] && grep -q '^| task | score | samples |$' "$T/ru/ruler.md" &&
       [ "$(grep -Ec '^\| (niah_single_1|niah_single_2|fwe) \| [0-9.]+ \| 2 \|$' "$T/ru/ruler.md")" -eq 3 ] && grep -Eq '^\| average \| [0-9.]+ \| \|$' "$T/ru/ruler.md"
    then ok ruler_json_md_shape; else ko ruler_json_md_shape "rc $r: $(cat "$T/ru/ruler.json" "$T/ru.err" 2>&1 | head -c 600)"; fi
    "$K" ruler -m "$G" --tasks niah_multikey_2 --length 700 --samples 1 --policy streaming --ratio 0.75 --ask-after --out "$T/rr" > /dev/null 2> "$T/rr.err"; r=$?
    "$K" ruler -m "$G" --tasks niah_multikey_2 --length 700 --samples 1 --policy streaming --budget 64 --recall --out "$T/rb" > /dev/null 2> "$T/rb.err"; rb=$?
    bud=$(sed -n 's/.*(\([0-9]*\) prompt tokens, \([0-9]*\) compressed, budget \([0-9]*\);.*/\1 \2 \3/p' "$T/rr.err")
    if [ $r -eq 0 ] && [ $rb -eq 0 ] && grep -q '"policy":"streaming","ratio":0.75,"ask_after":true,' "$T/rr/ruler.json" &&
       echo "$bud" | awk '{ exit !(NF == 3 && $2 < $1 - 20 && $3 == int($2 * 0.25 + 0.5)) }' &&
       grep -q '"policy":"streaming","ratio":null,"budget":64,"ask_after":false,' "$T/rb/ruler.json" && grep -q 'compressed, budget 64;' "$T/rb.err" &&
       grep -q '"recall":true,"recall_pages":[0-9]*,"recall_every":[0-9]*,"tasks":' "$T/rb/ruler.json" && grep -q '"recall":false,' "$T/rr/ruler.json"
    then ok ruler_ratio_budget_ask_after; else ko ruler_ratio_budget_ask_after "rc $r $rb: $bud $(cat "$T/rr/ruler.json" "$T/rr.err" "$T/rb.err" 2>&1 | head -c 600)"; fi
    # lists, as sweep's: every (policy, ratio) on the same sample, full once at ratio 0, a file each and the table
    "$K" ruler -m "$G" --tasks niah_single_1 --length 700 --samples 1 --policy full,streaming --ratio 0.5,0.75 --out "$T/rl" > "$T/rl.out" 2> "$T/rl.err"; r=$?
    lines=$(sed -n 's/^kvbound ruler: niah_single_1 1\/1, \(.*\): .*(\([0-9]*\) prompt tokens, \([0-9]*\) compressed, budget \([0-9]*\);.*/\1|\2 \3 \4/p' "$T/rl.err")
    if [ $r -eq 0 ] && [ "$(echo "$lines" | wc -l)" -eq 3 ] && echo "$lines" | awk -F'|' '
           { split($2, v, " ") } NR == 1 { p = v[1]; ok = $1 == "full (compression ratio 0)" && v[3] == 0 }
           NR == 2 { ok = ok && $1 == "streaming at compression ratio 0.5" && v[1] == p && v[3] == int(v[2] * 0.5 + 0.5) }
           NR == 3 { ok = ok && $1 == "streaming at compression ratio 0.75" && v[1] == p && v[3] == int(v[2] * 0.25 + 0.5) } END { exit !ok }' &&
       grep -q '"policy":"full","ratio":0,' "$T/rl/ruler-full.json" && grep -q '"policy":"streaming","ratio":0.5,' "$T/rl/ruler-streaming-r0.5.json" &&
       grep -q '"policy":"streaming","ratio":0.75,' "$T/rl/ruler-streaming-r0.75.json" && [ ! -f "$T/rl/ruler.json" ] &&
       grep -q '^| policy | ratio | niah_single_1 | average |$' "$T/rl/ruler-table.md" &&
       [ "$(grep -Ec '^\| (full \| 0|streaming \| 0\.5|streaming \| 0\.75) \| [0-9.]+ \| [0-9.]+ \|$' "$T/rl/ruler-table.md")" -eq 3 ]
    then ok ruler_policy_ratio_lists; else ko ruler_policy_ratio_lists "rc $r: $lines $(cat "$T/rl.err" "$T/rl/ruler-table.md" 2>&1 | head -c 600)"; fi
else
    skip_case ruler_json_md_shape "no /usr/share/dict/american-english (Debian package wamerican)"
fi
"$K" ruler -m "$G" --tasks niah_single_1,nope --out "$T/rx" > /dev/null 2> "$T/rx1.err"; r1=$?
"$K" ruler -m "$G" --tasks qa_1 --out "$T/rx" > /dev/null 2> "$T/rx2.err"; r2=$?
"$K" ruler -m "$G" --policy snapkv --ratio 1.5 --out "$T/rx" > /dev/null 2> "$T/rx3.err"; r3=$?
"$K" ruler -m "$G" --policy snapkv --ratio 0.5 --budget 64 --out "$T/rx" > /dev/null 2> "$T/rx4.err"; r4=$?
"$K" ruler -m "$G" --ratio 0.5 --out "$T/rx" > /dev/null 2> "$T/rx5.err"; r5=$?
"$K" ruler -m "$G" --words "$T/no-such-words" --out "$T/rx" > /dev/null 2> "$T/rx6.err"; r6=$?
if [ $r1 -eq 2 ] && grep -q "unknown task 'nope'" "$T/rx1.err" && [ $r2 -eq 2 ] && grep -q 'task qa_1 is absent' "$T/rx2.err" &&
   [ $r3 -eq 2 ] && grep -q -- '--ratio must be in (0, 1)' "$T/rx3.err" && [ $r4 -eq 2 ] && grep -q -- '--budget and --ratio exclude each other' "$T/rx4.err" &&
   [ $r5 -eq 2 ] && grep -q -- '--ratio needs --policy P' "$T/rx5.err" && [ $r6 -eq 1 ] && grep -q 'no-such-words' "$T/rx6.err"
then ok ruler_refused_by_name; else ko ruler_refused_by_name "rc $r1 $r2 $r3 $r4 $r5 $r6: $(cat "$T"/rx*.err)"; fi
# kvzip (issue 52): its reconstruction's extra prefill in needle.json and ppl's JSON: every context token read again once
# plus a repeat prompt (pass tokens > context tokens, by at most 64 a pass: needle's 3 questions after the context are
# each a pass of their own, so 4 there); the ratio is their quotient; other
# policies' files carry none of it
"$K" needle -m "$G" --lengths 256 --depths 0 --passkeys 3 --ask-after --policy kvzip,snapkv --budget 64 --out "$T/kz" > /dev/null 2> "$T/kz.err"; r=$?
"$K" ppl -m "$G" -f "$T/t.txt" --max-tokens 384 --prompt 256 --policy kvzip --budget 64 --json > "$T/kz.json" 2> "$T/kzp.err"; r2=$?
kz_fields() { grep -o '"kvzip_pass_tokens":[0-9]*,"kvzip_context_tokens":[0-9]*,"kvzip_prefill_ratio":[0-9.]*' "$1" | tr ':,' '  ' | awk '{ print $2, $4, $6 }'; }
kz_ok() { awk -v want="$2" -v passes="$3" '{ ok = $2 > 0 && (want == "" || $2 == want) && $1 > $2 && $1 <= $2 + 64 * passes && ($3 - $1 / $2) ^ 2 < 1e-6 } END { exit !(NR == 1 && ok) }' "$1"; }
kz_fields "$T/kz/needle-kvzip.json" > "$T/kz1.txt"; kz_fields "$T/kz.json" > "$T/kz2.txt"
if [ $r -eq 0 ] && [ $r2 -eq 0 ] && kz_ok "$T/kz1.txt" "" 4 && kz_ok "$T/kz2.txt" 256 1 && ! grep -q kvzip_ "$T/kz/needle-snapkv.json"
then ok kvzip_prefill_ratio_in_needle_and_ppl_json; else ko kvzip_prefill_ratio_in_needle_and_ppl_json "rc $r $r2: $(cat "$T/kz1.txt" "$T/kz2.txt" "$T/kz.err" "$T/kzp.err" 2>&1 | head -c 400)"; fi
# a context of 2200 tokens is two chunks of kvzip's reconstruction (2048 each): both repeated, each after its repeat
# prompt (the second's ends with the first chunk's last 8 tokens), so the passes read more than the context; a chunk
# left out would read less
"$K" ppl -m "$G" -f "$T/t.txt" --max-tokens 2300 --prompt 2200 --baseline none --policy kvzip --budget 64 --json > "$T/kz3.json" 2> "$T/kz3.err"; r=$?
kz_fields "$T/kz3.json" > "$T/kz3.txt"
if [ $r -eq 0 ] && awk '{ exit !($2 == 2200 && $1 > 2200 + 16 && $1 <= 2200 + 128) }' "$T/kz3.txt"
then ok kvzip_reconstruction_repeats_every_chunk; else ko kvzip_reconstruction_repeats_every_chunk "rc $r: $(cat "$T/kz3.txt" "$T/kz3.err" 2>&1 | head -c 300)"; fi

cli_summary
