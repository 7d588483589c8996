#!/bin/sh
# test_figures_cli.sh BUILD_DIR — every figure docs/EVALUATION.md publishes
# from the shared models, recomputed with the command the doc shows and
# checked at a stated tolerance (ppl, KL, top-1 and retention to about the
# last printed digit; sink mass to 1e-4). A change that moves a published
# number fails here, and the doc changes with it. Under KVB_TEST_QUICK=1
# (make asan) only the cheaper figures run: B = 64 inside the trained
# context, prompt compression, one model's sinks and the needle grids.
. "$(dirname "$0")/cli_lib.sh"
S="$D/models/stories260K/stories260K.llamacpp.gguf"
if [ ! -f "$S" ] || [ ! -f "$D/text/tinystories_validation_head.txt" ]; then
    skip_case evaluation_figures "missing $D (models/stories260K, text/tinystories_validation_head.txt)"
    cli_summary
    exit
fi
head -c 60000 "$D/text/tinystories_validation_head.txt" > "$T/ts60k.txt"

P="window streaming h2o tova scissorhands"

full_run() { [ -z "${KVB_TEST_QUICK:-}" ]; }
[ -n "${KVB_TEST_QUICK:-}" ] && echo "quick mode (KVB_TEST_QUICK): the longer figures are checked by make test"
# Inside the trained context: 500 tokens, B = 32, 64, 128 (the sweep table)
BS="32 64 128"; full_run || BS=64
for B in $BS; do
    "$K" ppl -m "$S" -f "$T/ts60k.txt" --policy window,streaming,h2o,tova,scissorhands --budget $B --max-tokens 500 --json > "$T/in$B.json" 2>/dev/null
done
full_run && check_ppl figures_in_context_b32 "$T/in32.json" "window baseline_ppl 3.7659 0.00015" \
    "window ppl 4.5968 0.0006" "window kl 0.1875 0.0006" "window top1 0.836 0.0011" \
    "streaming ppl 4.9531 0.0006" "streaming kl 0.2316 0.0006" "streaming top1 0.806 0.0011" \
    "h2o ppl 4.7824 0.0006" "h2o kl 0.2018 0.0006" "h2o top1 0.830 0.0011" \
    "tova ppl 4.6934 0.0006" "tova kl 0.1820 0.0006" "tova top1 0.846 0.0011" \
    "scissorhands ppl 4.5781 0.0006" "scissorhands kl 0.1391 0.0006" "scissorhands top1 0.856 0.0011"
check_ppl figures_in_context_b64 "$T/in64.json" \
    "window ppl 4.0041 0.0006" "window kl 0.0740 0.0006" "window top1 0.906 0.0011" \
    "streaming ppl 4.3262 0.0006" "streaming kl 0.1101 0.0006" "streaming top1 0.882 0.0011" \
    "h2o ppl 4.5377 0.0006" "h2o kl 0.1415 0.0006" "h2o top1 0.876 0.0011" \
    "tova ppl 4.2892 0.0006" "tova kl 0.0894 0.0006" "tova top1 0.894 0.0011" \
    "scissorhands ppl 3.9144 0.0006" "scissorhands kl 0.0351 0.0006" "scissorhands top1 0.950 0.0011"
full_run && check_ppl figures_in_context_b128 "$T/in128.json" \
    "window ppl 3.8105 0.0006" "window kl 0.0074 0.0006" "window top1 0.960 0.0011" \
    "streaming ppl 3.8147 0.0006" "streaming kl 0.0117 0.0006" "streaming top1 0.974 0.0011" \
    "h2o ppl 3.9235 0.0006" "h2o kl 0.0163 0.0006" "h2o top1 0.968 0.0011" \
    "tova ppl 3.8009 0.0006" "tova kl 0.0085 0.0006" "tova top1 0.972 0.0011" \
    "scissorhands ppl 3.8036 0.0006" "scissorhands kl 0.0087 0.0006" "scissorhands top1 0.976 0.0011"
if full_run; then
# TOVA's per-KV-head variant (the seed's behaviour)
"$K" ppl -m "$S" -f "$T/ts60k.txt" --policy tova --tova-scope head --budget 64 --max-tokens 500 --json > "$T/th.json" 2>/dev/null
check_ppl figures_tova_head_scope "$T/th.json" "tova ppl 4.5692 0.0006" "tova kl 0.1465 0.0006"

# Past the trained length: 2,000 tokens, B = 128
"$K" ppl -m "$S" -f "$T/ts60k.txt" --policy window,streaming,h2o,scissorhands,tova,knorm,snapkv,lminfinite --budget 128 --max-tokens 2000 --json > "$T/past.json" 2>/dev/null
check_ppl figures_past_trained_length "$T/past.json" "window baseline_ppl 5.1464 0.0006" \
    "window ppl 3.7628 0.0006" "streaming ppl 3.7705 0.0006" "h2o ppl 5.3112 0.0006" "h2o kl 0.1205 0.0006" \
    "scissorhands ppl 5.1703 0.0006" "tova ppl 3.7965 0.0006" "knorm ppl 35.5123 0.005" "snapkv ppl 3.7628 0.0006" \
    "lminfinite ppl 3.8152 0.0006"

# LM-Infinite beside streaming, past the trained lengths (llama2.c checkpoints: their true lengths)
M5="$D/models/babyllama-tok105"
"$K" ppl -m "$M5/model5000.bin" -z "$M5/tok105.bin" -f "$T/ts60k.txt" --policy streaming,lminfinite,window --budget 512 --max-tokens 4000 --baseline none --json > "$T/lm5.json" 2>/dev/null
check_ppl figures_lminfinite_model5000 "$T/lm5.json" "streaming ppl 40.5826 0.005" "lminfinite ppl 2.1736 0.0006" "window ppl 40.7324 0.005"
"$K" ppl -m "$M5/model5000.bin" -z "$M5/tok105.bin" -f "$T/ts60k.txt" --policy streaming,lminfinite,window --budget 256 --max-tokens 4000 --baseline none --json > "$T/lm5b.json" 2>/dev/null
check_ppl figures_lminfinite_model5000_at_trained_length "$T/lm5b.json" "streaming ppl 2.1586 0.0006" "lminfinite ppl 2.1603 0.0006" "window ppl 2.1612 0.0006"
S2="$D/models/stories260K"
"$K" ppl -m "$S2/stories260K.bin" -z "$S2/tok512.bin" -f "$T/ts60k.txt" --policy streaming,lminfinite --budget 1024 --max-tokens 4000 --baseline none --json > "$T/lm2.json" 2>/dev/null
check_ppl figures_lminfinite_stories260k "$T/lm2.json" "streaming ppl 4.2703 0.0006" "lminfinite ppl 3.9419 0.0006"
fi

# Prompt compression (--prompt 400, 100 scored continuation tokens, B = 64)
"$K" ppl -m "$S" -f "$T/ts60k.txt" --policy snapkv,pyramidkv,adakv,h2o,tova,streaming,window --budget 64 --prompt 400 --max-tokens 500 --json > "$T/pr.json" 2>/dev/null
check_ppl figures_prompt_compression "$T/pr.json" "snapkv baseline_ppl 3.3356 0.0006" \
    "snapkv ppl 3.4729 0.0006" "snapkv kl 0.0161 0.0006" "snapkv prompt_kept 64.00 0.001" \
    "pyramidkv ppl 3.5043 0.0006" "pyramidkv prompt_kept 63.60 0.001" "pyramidkv prompt_kept_min 33 0" "pyramidkv prompt_kept_max 94 0" \
    "adakv ppl 3.4255 0.0006" "adakv kl 0.0109 0.0006" "adakv top1 0.990 0.0011" "adakv prompt_kept_min 38 0" "adakv prompt_kept_max 99 0" \
    "h2o ppl 4.1734 0.0006" "tova ppl 4.2602 0.0006" "streaming ppl 4.1545 0.0006" "window ppl 3.9774 0.0006"

# Attention sinks: share of full attention on position 0 per layer, and retained mass (streaming, B = 64, 1,000 tokens)
sinks() { # NAME MODEL MASS "L0 L1 ..."
    "$K" ppl -m "$2" -f "$T/ts60k.txt" --policy streaming --budget 64 --max-tokens 1000 --mass --json > "$T/m.json" 2>/dev/null
    got=$(grep -o '"sink_mass_layer":\[[^]]*\]' "$T/m.json" | sed 's/.*\[//; s/\]//; s/,/ /g')
    bad=0
    near_list "$1 sink layer" "$got" "$4" 0.00006 || bad=1
    near "$1 mass" "$(ppl_field "$T/m.json" streaming mass)" "$3" 0.005 || bad=1
    if [ $bad -eq 0 ]; then ok "$1"; else ko "$1" "a published figure moved"; fi
}
sinks figures_sinks_stories260k "$S" 0.86 "0.0052 0.0077 0.0155 0.0043 0.0095"
full_run && sinks figures_sinks_model5000 "$M5/model5000.llamacpp.gguf" 0.42 "0.0144 0.0045 0.0023 0.0025 0.0110"
full_run && sinks figures_sinks_aidreams260k "$D/models/aidreams260K/aidreams260K.llamacpp.gguf" 0.23 "0.0032 0.0070 0.0068 0.0058"

# Needle grids: accuracy (retention) per cell
needle() { # NAME POLICY BUDGET LENGTHS "RETENTION..."
    "$K" needle -m "$S" --lengths "$4" --depths 0,0.5,1 --policy "$2" --budget "$3" --out "$T/nd" > /dev/null 2>&1
    got=$(grep -o '"accuracy":[0-9.]*,"retained":[0-9.]*' "$T/nd/needle.json" | sed 's/"accuracy":\([0-9.]*\),"retained":\([0-9.]*\)/\1 \2/')
    bad=0; i=1
    for w in $5; do
        line=$(echo "$got" | sed -n "${i}p")
        near "$1 cell $i accuracy" "${line%% *}" 0 0 || bad=1
        near "$1 cell $i retention" "${line##* }" "$w" 0.0001 || bad=1
        i=$((i + 1))
    done
    if [ $bad -eq 0 ]; then ok "$1"; else ko "$1" "a published figure moved"; fi
}
needle figures_needle_full full 64 128,256 "1 1 1 1 1 1"
needle figures_needle_streaming streaming 64 256,512 "0 0 1 0 0 1"
needle figures_needle_snapkv snapkv 96 256,512 "0.05 0.10 0.80 0.10 0.05 0.80"

# Reversible eviction ("Reversible eviction" in docs/EVALUATION.md): ppl with and without recall at
# B = 64 over 2,000 tokens on the three models; the needle grid's mean retention on model5000
# rvalue FILE FIELD: FIELD of the run with recall in a `kvbound ppl --recall --json` output
rvalue() {
    awk -v fld="$2" '{
        n = split($0, runs, /\{"policy":/)
        for (i = 2; i <= n; i++) if (index(runs[i], "\"recall\":true")) {
            if (match(runs[i], "\"" fld "\":[-0-9.e]+")) { v = substr(runs[i], RSTART, RLENGTH); sub(/.*:/, "", v); print v; exit }
        }
    }' "$1"
}
recall_ppl() { # NAME MODEL "ppl kl top1 without" "ppl kl top1 with" TOL_PPL
    "$K" ppl -m "$2" -f "$T/ts60k.txt" --policy streaming --budget 64 --recall --max-tokens 2000 -t 1 --json > "$T/rc.json" 2>/dev/null
    set -- "$1" "$2" $3 $4 "$5"
    bad=0
    near "$1 ppl" "$(ppl_field "$T/rc.json" streaming ppl)" "$3" "$9" || bad=1
    near "$1 kl" "$(ppl_field "$T/rc.json" streaming kl)" "$4" 0.0006 || bad=1
    near "$1 top1" "$(ppl_field "$T/rc.json" streaming top1)" "$5" 0.0011 || bad=1
    near "$1 ppl with recall" "$(rvalue "$T/rc.json" ppl)" "$6" "$9" || bad=1
    near "$1 kl with recall" "$(rvalue "$T/rc.json" kl)" "$7" 0.0006 || bad=1
    near "$1 top1 with recall" "$(rvalue "$T/rc.json" top1)" "$8" 0.0011 || bad=1
    if [ $bad -eq 0 ]; then ok "$1"; else ko "$1" "a published figure moved"; fi
}
recall_ppl figures_recall_ppl_stories260k "$S" "4.0934 0.3962 0.748" "4.0834 0.3041 0.791" 0.0006
if full_run; then
recall_ppl figures_recall_ppl_model5000 "$M5/model5000.llamacpp.gguf" "2.3849 3.8242 0.308" "2.3472 3.8308 0.311" 0.0006
recall_ppl figures_recall_ppl_aidreams260k "$D/models/aidreams260K/aidreams260K.llamacpp.gguf" "220.6185 1.9895 0.289" "204.8001 1.9772 0.311" 0.02
"$K" needle -m "$M5/model5000.llamacpp.gguf" --lengths 512,1024,2048 --depths 0,0.25,0.5,0.75 --policy streaming --budget 256 --recall -t 1 \
    --out "$T/ndr" > /dev/null 2>&1
mean=$(grep -o '"retained":[0-9.]*' "$T/ndr/needle.json" | cut -d: -f2 | awk '{ s += $1; n++ } END { if (n == 12) printf "%.4f", s / n }')
mean0=$(grep -o '"retained_no_recall":[0-9.]*' "$T/ndr/needle.json" | cut -d: -f2 | awk '{ s += $1; n++ } END { if (n == 12) printf "%.4f", s / n }')
if near "recall needle retention" "$mean" 0.554 0.001 && near "needle retention without recall" "$mean0" 0.0833 0.001; then ok figures_recall_needle_model5000
else ko figures_recall_needle_model5000 "a published figure moved"; fi
fi
cli_summary
