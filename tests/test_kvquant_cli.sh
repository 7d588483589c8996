#!/bin/sh
# test_kvquant_cli.sh BUILD_DIR — quantized KV rows (--kv-dtype, --kv-dtype-k,
# --kv-dtype-v) as users meet them: run, ppl, bench decode, needle and mem on
# a random `tiny` model (head dim 64: whole blocks of 32). ppl's full
# baseline stays f32, so --policy full --kv-dtype q8_0 gives the bits' own
# KL (small, not zero) and f32 gives exactly zero; peak KV bytes are the
# rows' exact sizes; mem predicts the bytes a cache holds; a model whose
# head dim is not a multiple of 32 is refused with the head dim named; bad
# values are named.
. "$(dirname "$0")/cli_lib.sh"
M="$T/tiny.gguf"
"$K" mkmodel --shape tiny --type q8_0 -o "$M" > /dev/null 2>&1 || { ko mkmodel "kvbound mkmodel failed"; cli_summary; exit; }
field() { grep -o "\"$1\":[0-9.e-]*" "$2" | sed -n "${3:-1}p" | cut -d: -f2; }
i=0
while [ $i -lt 40 ]; do echo "The cat sat on the mat. The dog ran in the park. A bird sang in the tree."; i=$((i + 1)); done > "$T/text.txt"

# run: every type, and K and V apart; the stats line's KV shrinks with the bits
for kv in f16 bf16 q8_0 q4_0; do
    "$K" run -m "$M" -p "hello world" -n 200 --temp 0 --ignore-eos --kv-dtype $kv > "$T/run_$kv.txt" 2> "$T/run_$kv.err" || echo "rc" >> "$T/run_$kv.err"
done
"$K" run -m "$M" -p "hello world" -n 200 --temp 0 --ignore-eos --kv-dtype-k q8_0 --kv-dtype-v q4_0 > "$T/run_mix.txt" 2> "$T/run_mix.err" || echo "rc" >> "$T/run_mix.err"
mb() { sed -n 's/.*KV \([0-9.]*\) MB.*/\1/p' "$1"; }
if ! grep -q "^rc" "$T"/run_*.err && grep -q "^hello world" "$T/run_q4_0.txt" && grep -q "^hello world" "$T/run_mix.txt" &&
   awk -v a="$(mb "$T/run_f16.err")" -v b="$(mb "$T/run_q8_0.err")" -v c="$(mb "$T/run_mix.err")" -v d="$(mb "$T/run_q4_0.err")" \
       -v e="$(mb "$T/run_bf16.err")" 'BEGIN { exit !(a > b && b > c && c > d && a == e) }'; then ok run_kv_dtypes
else ko run_kv_dtypes "$(tail -n 1 "$T"/run_*.err)"; fi

# ppl: the baseline is f32 — the bits' own KL; exact peak bytes (2 layers x 2 KV heads x (K + V row) x 304 slots)
"$K" ppl -m "$M" -f "$T/text.txt" --policy full --max-tokens 300 --json > "$T/p32.json" 2> "$T/p32.err"; r1=$?
"$K" ppl -m "$M" -f "$T/text.txt" --policy full --kv-dtype q8_0 --max-tokens 300 --json > "$T/p8.json" 2> "$T/p8.err"; r2=$?
"$K" ppl -m "$M" -f "$T/text.txt" --policy full --kv-dtype-k q8_0 --kv-dtype-v q4_0 --max-tokens 300 --json > "$T/pm.json" 2> "$T/pm.err"; r3=$?
k32=$(field kl "$T/p32.json"); k8=$(field kl "$T/p8.json"); km=$(field kl "$T/pm.json")
if [ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ $r3 -eq 0 ] && grep -q '"kv_dtype":"q8_0","kv_dtype_v":"q8_0"' "$T/p8.json" &&
   grep -q '"kv_dtype":"q8_0","kv_dtype_v":"q4_0"' "$T/pm.json" &&
   awk -v a="$k32" -v b="$k8" -v c="$km" 'BEGIN { exit !(a == 0 && b > 0 && b < 1e-3 && c > b) }' &&
   [ "$(field kv_bytes_peak "$T/p32.json")" = 622592 ] && [ "$(field kv_bytes_peak "$T/p8.json")" = 165376 ] &&
   [ "$(field kv_bytes_peak "$T/pm.json")" = 126464 ]; then ok ppl_kv_dtype_against_f32_baseline
else ko ppl_kv_dtype_against_f32_baseline "rc $r1/$r2/$r3 kl $k32 $k8 $km: $(cat "$T/p8.json" "$T/pm.json" | head -c 600) $(tail -n 2 "$T/p8.err")"; fi

# mem predicts a cache's bytes: 2 layers x 2 KV heads x 64 dims, 100 tokens in pages of 16 -> 112 slots x (68 + 36)
"$K" mem --layers 2 --kv-heads 2 --head-dim 64 --ctx 100 --dtype-k q8_0 --dtype-v q4_0 --block-size 16 --json > "$T/mem.json" 2> "$T/mem.err"; rc=$?
if [ $rc -eq 0 ] && [ "$(field bytes "$T/mem.json")" = 46592 ] && grep -q '"dtype_k":"q8_0","dtype_v":"q4_0"' "$T/mem.json"; then ok mem_mixed_kv_bytes
else ko mem_mixed_kv_bytes "rc $rc: $(cat "$T/mem.json" "$T/mem.err")"; fi

# bench decode: the KV rows each step attends, in their own sizes
"$K" bench decode -m "$M" -n 4 --depth 60 --chunk 32 -t 1 --kv-dtype q4_0 > "$T/bd4.json" 2> "$T/bd4.err"; r1=$?
"$K" bench decode -m "$M" -n 4 --depth 60 --chunk 32 -t 1 > "$T/bd16.json" 2> "$T/bd16.err"; r2=$?
if [ $r1 -eq 0 ] && [ $r2 -eq 0 ] && grep -q '"kv_dtype":"q4_0","kv_dtype_v":"q4_0"' "$T/bd4.json" &&
   [ "$(field bytes_per_token "$T/bd4.json")" -lt "$(field bytes_per_token "$T/bd16.json")" ]; then ok bench_decode_kv_dtype
else ko bench_decode_kv_dtype "rc $r1/$r2: $(cat "$T/bd4.json" "$T/bd16.json") $(tail -n 2 "$T/bd4.err")"; fi

# needle records the types it ran with
"$K" needle -m "$M" --lengths 64 --depths 0.5 --policy streaming --budget 32 --kv-dtype q8_0 --out "$T/nd" > /dev/null 2> "$T/nd.err"; rc=$?
if [ $rc -eq 0 ] && grep -q '"kv_dtype":"q8_0"' "$T/nd/needle.json"; then ok needle_kv_dtype
else ko needle_kv_dtype "rc $rc: $(tail -n 2 "$T/nd.err")"; fi

# errors: a bad type is named with the choices; a head dim that is not whole blocks of 32 is named
"$K" run -m "$M" -p hi --kv-dtype q5_1 > /dev/null 2> "$T/e1.err"; rc=$?
if [ $rc -eq 2 ] && grep -q -- "--kv-dtype" "$T/e1.err" && grep -q "q4_0" "$T/e1.err"; then ok bad_kv_dtype_named
else ko bad_kv_dtype_named "rc $rc: $(cat "$T/e1.err")"; fi
G="$D/models/stories260K/stories260K.llamacpp.gguf"
if [ -f "$G" ]; then
    "$K" run -m "$G" -p "Once" -n 4 --kv-dtype q8_0 > /dev/null 2> "$T/e2.err"; rc=$?
    if [ $rc -eq 1 ] && grep -q "head_dim 8" "$T/e2.err" && grep -q "blocks of 32" "$T/e2.err"; then ok quantized_kv_needs_whole_blocks
    else ko quantized_kv_needs_whole_blocks "rc $rc: $(cat "$T/e2.err")"; fi
else
    skip_case quantized_kv_needs_whole_blocks "missing $G"
fi
# bench cache over q8_0 pages: the page it reports is the q8_0 rows' exact
# size (16 K rows and 16 V rows of 128 dims in 34-byte blocks: 4352 bytes),
# and both fractions are its read rate over the machine's two readings
"$K" bench cache --layers 2 --kv-heads 2 --head-dim 128 --budget 64 --steps 4 -t 1 --kv-dtype q8_0 > "$T/bc.json" 2> "$T/bc.err"; rc=$?
pb=$(field page_bytes "$T/bc.json"); ar=$(field attn_read_gbs "$T/bc.json"); mr=$(field machine_read_gbs "$T/bc.json")
pr=$(field machine_page_read_gbs "$T/bc.json"); bf=$(field bw_fraction "$T/bc.json"); pf=$(field page_bw_fraction "$T/bc.json")
if [ $rc -eq 0 ] && [ "$pb" = 4352 ] && awk -v a="$ar" -v m="$mr" -v p="$pr" -v b="$bf" -v f="$pf" 'BEGIN {
        d1 = a / m - b; d2 = a / p - f; if (d1 < 0) d1 = -d1; if (d2 < 0) d2 = -d2
        exit !(p > 0 && m > 0 && d1 < 0.01 + 0.01 * b && d2 < 0.01 + 0.01 * f) }'; then ok bench_cache_page_read
else ko bench_cache_page_read "rc $rc, page_bytes '$pb' (want 4352), attn $ar machine $mr page $pr fractions $bf $pf: $(tail -n 2 "$T/bc.err")"; fi
cli_summary
