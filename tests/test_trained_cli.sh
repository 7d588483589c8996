#!/bin/sh
# test_trained_cli.sh BUILD_DIR — the models kvbound trained itself
# (models/, issues 38 and 52; tools/train/) against their model card and the
# figures docs/EVALUATION.md publishes from them:
# - each file's sha256 is the one models/README.md lists, and it loads with
#   its trained context;
# - kvb-passkey-1m (issue 52) answers most of 3 passkeys asked after the
#   compression (needle --passkeys 3 --ask-after, full cache) where the
#   vanilla model answers almost none, and two figures of EVALUATION.md's
#   several-passkeys table hold cell by cell;
# - the full cache retrieves needle's passkey in every cell the card shows
#   (lengths <= T), and streaming at a budget below the length does not
#   where the passkey was evicted (the grid is a golden, cell by cell);
# - on the held-out book (Dracula from its first chapter, as
#   tools/train/texts.py cuts it;
#   needs ../shared/data and python3): the share of attention on position 0
#   per layer, the StreamingLLM table past 4 T (but the recompute
#   baseline: tools/train/figures.py), the sinks table and the policy
#   table, each at about its last printed digit.
# A change to the engine, the cache or a policy that moves one fails here,
# and the card and docs/EVALUATION.md change with it. Under KVB_TEST_QUICK
# (make asan) the figures past T (recall over 2,048 tokens, the 4,096-token
# tables) are left to make test.
. "$(dirname "$0")/cli_lib.sh"
HERE=$(cd "$(dirname "$0")/.." && pwd)
MV="$HERE/models/kvb-vanilla-1m.gguf"
MS="$HERE/models/kvb-sink-1m.gguf"
MP="$HERE/models/kvb-passkey-1m.gguf"
full_run() { [ -z "${KVB_TEST_QUICK:-}" ]; }
[ -n "${KVB_TEST_QUICK:-}" ] && echo "quick mode (KVB_TEST_QUICK): the figures past T are checked by make test"
CARD="$HERE/models/README.md"

# The card: | file | ... | sha256 | per model
for m in "$MV" "$MS" "$MP"; do
    name=$(basename "$m" .gguf)
    want=$(grep "^| \`$(basename "$m")\` |" "$CARD" | grep -o '[0-9a-f]\{64\}' | head -n 1)
    if [ ! -f "$m" ]; then ko "trained_card_$name" "$m is missing"; continue; fi
    got=$(sha256sum "$m" | cut -d' ' -f1)
    if [ -n "$want" ] && [ "$got" = "$want" ]; then ok "trained_card_$name"
    else ko "trained_card_$name" "sha256 $got, models/README.md says '${want:-nothing}'"; fi
    if "$K" info -m "$m" > "$T/info.txt" 2>&1 && grep -q "^context *512 (trained)" "$T/info.txt"; then ok "trained_info_$name"
    else ko "trained_info_$name" "$(grep -i context "$T/info.txt" | head -n 1)"; fi
done

# needle_grid NAME MODEL POLICY BUDGET LENGTHS DEPTHS "ACCURACY..." "RETENTION..." [OPTION...]: cell by cell, 2 trials
needle_grid() {
    name=$1 model=$2 policy=$3 budget=$4 lengths=$5 depths=$6 acc=$7 ret=$8
    shift 8
    "$K" needle -m "$model" --lengths "$lengths" --depths "$depths" --policy "$policy" --budget "$budget" --trials 2 --out "$T/nd" "$@" > "$T/nd.txt" 2>&1
    got=$(grep -o '"accuracy":[0-9.]*,"retained":[0-9.]*' "$T/nd/needle.json" 2>/dev/null | sed 's/"accuracy":\([0-9.]*\),"retained":\([0-9.]*\)/\1 \2/')
    bad=0; i=1
    for w in $acc; do
        line=$(echo "$got" | sed -n "${i}p")
        near "$name cell $i accuracy" "${line%% *}" "$w" 0.0001 || bad=1
        near "$name cell $i retention" "${line##* }" "$(echo "$ret" | awk -v i=$i '{print $i}')" 0.0001 || bad=1
        i=$((i + 1))
    done
    if [ $bad -eq 0 ]; then ok "$name"; else ko "$name" "a published figure moved ($(tail -n 1 "$T/nd.txt"))"; fi
}
# Retrieval (the vanilla model): the full cache at every length <= T, streaming at B = 128 (only the passkey at
# the end survives), and issue 14's figure: streaming with recall at hot budget 256, R = 8, past T
needle_grid trained_needle_full "$MV" full 512 128,256,384,512 0,0.5,1 "1 1 1 1 1 1 1 1 1 1 1 1" "1 1 1 1 1 1 1 1 1 1 1 1"
needle_grid trained_needle_full_sink_model "$MS" full 512 128,512 0,0.5,1 "1 1 1 1 1 1" "1 1 1 1 1 1"
needle_grid trained_needle_streaming_b128 "$MV" streaming 128 512 0,0.5,1 "0 0 1" "0 0 1"
# with recall the passkey is answered at every length (without it, never); the attended set holds it in the
# streams whose question queries find its page (retention counts every layer and KV head)
# Several passkeys asked after the compression (issue 52; kvb-passkey-1m, the vanilla model fine-tuned on
# needle --passkeys N --ask-after sessions): the full cache answers most of 3 passkeys, each in a turn of
# its own, where the vanilla model answers almost none; then the evidence table's 50%-removed figures
# (docs/EVALUATION.md: length 384, B 192) for the policies that answer any, and streaming with recall at
# 90% removed (B 38), cell by cell
passkeys_mean() { # MODEL -> the mean accuracy over the cells, and the smallest cell's
    "$K" needle -m "$1" --lengths 256,384 --depths 0,0.25,0.5,0.75 --policy full --passkeys 3 --ask-after --trials 2 --out "$T/pk" > "$T/pk.txt" 2>&1
    grep -o '"accuracy":[0-9.]*' "$T/pk/needle.json" | cut -d: -f2 | awk '{s += $1; if (NR == 1 || $1 < m) m = $1} END {if (NR) printf "%.4f %.4f\n", s / NR, m}'
}
got=$(passkeys_mean "$MP")
if [ -n "$got" ] && awk -v m="${got% *}" -v lo="${got#* }" 'BEGIN {exit !(m >= 0.9 && lo >= 0.6)}'; then ok trained_passkeys_3_ask_after_full_answers_most
else ko trained_passkeys_3_ask_after_full_answers_most "mean and smallest cell accuracy '$got' (want >= 0.9 and >= 0.6): $(tail -n 1 "$T/pk.txt")"; fi
got=$(passkeys_mean "$MV")
if [ -n "$got" ] && awk -v m="${got% *}" 'BEGIN {exit !(m <= 0.2)}'; then ok trained_passkeys_3_ask_after_vanilla_cannot
else ko trained_passkeys_3_ask_after_vanilla_cannot "the vanilla model's mean accuracy '${got% *}' (the card says it answers almost none)"; fi
needle_grid trained_passkeys_table_streaming_50 "$MP" streaming 192 384 0,0.2,0.4,0.6,0.8 "0 0.3333 0.3333 0.6667 0.3333" "0.3333 0.3333 0.6667 0.6667 0.3333" --passkeys 3 --ask-after --trials 4
needle_grid trained_passkeys_table_snapkv_50 "$MP" snapkv 192 384 0,0.2,0.4,0.6,0.8 "0 0 0 0.1667 0" "0.2569 0.2361 0.2014 0.3542 0.3125" --passkeys 3 --ask-after --trials 4
# kvzip at 50% removed: each question, read after the compressed context, is reconstructed before the decode step
# compresses it (without that its tokens score nothing, leave after the first answer token, and every cell is 0)
needle_grid trained_passkeys_table_kvzip_50 "$MP" kvzip 192 384 0,0.2,0.4,0.6,0.8 "0.8333 0.8333 0.9167 0.75 0.8333" "0.3542 0.25 0.2431 0.2083 0.2153" --passkeys 3 --ask-after --trials 4
needle_grid trained_passkeys_table_streaming_recall_90 "$MP" streaming 38 384 0,0.2,0.4,0.6,0.8 "0.9167 1 1 0.9167 1" "0.4028 0.4028 0.3819 0.4236 0.4722" --passkeys 3 --ask-after --trials 4 --recall-pages 8

full_run && needle_grid trained_needle_recall "$MV" streaming 256 512,1024,2048 0,0.5 "1 1 1 1 1 1" "0.7083 0.4583 0.75 0.1667 0.2083 0.4167" --recall-pages 8

if [ ! -f "$D/text/pg345_dracula.txt" ]; then
    skip_case trained_book_figures "missing $D/text/pg345_dracula.txt"
    cli_summary
    exit
fi
if ! need_tool trained_book_figures python3 KVB_REQUIRE_PYTHON "Debian python3; .ci/run installs it"; then
    cli_summary
    exit
fi
python3 "$HERE/tools/train/texts.py" "$D/text/pg345_dracula.txt" > "$T/dracula.txt"

# sinks NAME MODEL "L0 L1 ...": the share of full attention on position 0 per layer (512 tokens)
sink_mass() {
    "$K" ppl -m "$2" -f "$T/dracula.txt" --policy streaming --budget 256 --max-tokens 512 --mass --json > "$T/m.json" 2>/dev/null
    got=$(grep -o '"sink_mass_layer":\[[^]]*\]' "$T/m.json" | sed 's/.*\[//; s/\]//; s/,/ /g')
    if near_list "$1 layer" "$got" "$3" 0.0006; then ok "$1"; else ko "$1" "a published figure moved"; fi
}
sink_mass trained_sink_mass_vanilla "$MV" "0.024342 0.013832 0.017855 0.100553 0.010229 0.019620"
sink_mass trained_sink_mass_sink_token "$MS" "0.062331 0.024450 0.066947 0.278598 0.013711 0.033904"

if full_run; then
    # The StreamingLLM table: 4,096 tokens (8 T), budget 256, and the full cache past T (the sliding window with
    # recompute, 39 s a model, is left to tools/train/figures.py); the sinks table's 0, 1 and 8
    for m in vanilla sink; do
        f=$MV; [ $m = sink ] && f=$MS
        "$K" ppl -m "$f" -f "$T/dracula.txt" --policy window,streaming,lminfinite --budget 256 --max-tokens 4096 --json > "$T/st-$m.json" 2>/dev/null
        for s in 0 1 8; do
            "$K" ppl -m "$f" -f "$T/dracula.txt" --policy streaming --budget 256 --max-tokens 4096 --json --sinks $s --baseline none > "$T/s$s-$m.json" 2>/dev/null
        done
    done
    check_ppl trained_streaming_table_vanilla "$T/st-vanilla.json" "window baseline_ppl 28.3203 0.005" "window ppl 16.0219 0.0006" \
        "streaming ppl 15.8462 0.0006" "lminfinite ppl 15.9633 0.0006"
    check_ppl trained_streaming_table_sink_token "$T/st-sink.json" "window baseline_ppl 38.9761 0.005" "window ppl 36.4664 0.003" \
        "streaming ppl 15.3233 0.0006" "lminfinite ppl 15.3633 0.0006"
    check_ppl trained_sinks_vanilla "$T/s0-vanilla.json" "streaming ppl 16.0219 0.0006"
    check_ppl trained_sinks_vanilla_1 "$T/s1-vanilla.json" "streaming ppl 15.8468 0.0006"
    check_ppl trained_sinks_vanilla_8 "$T/s8-vanilla.json" "streaming ppl 15.7955 0.0006"
    check_ppl trained_sinks_sink_token_0 "$T/s0-sink.json" "streaming ppl 36.4664 0.003"
    check_ppl trained_sinks_sink_token_1 "$T/s1-sink.json" "streaming ppl 15.3238 0.0006"
    check_ppl trained_sinks_sink_token_8 "$T/s8-sink.json" "streaming ppl 15.3046 0.0006"
fi

# The policy table: T tokens, B = T/4; prompt compression by --prompt 3T/4
"$K" ppl -m "$MV" -f "$T/dracula.txt" --policy window,streaming,h2o,tova,scissorhands,snapkv,pyramidkv,adakv,knorm,block-h2o,lminfinite,keydiff,expected-attention \
    --budget 128 --max-tokens 512 --json > "$T/pt.json" 2>/dev/null
check_ppl trained_policy_table "$T/pt.json" "window baseline_ppl 21.6313 0.0006" \
    "window ppl 22.0335 0.001" "window kl 0.0788 0.0006" "window top1 0.834 0.0011" \
    "streaming ppl 21.6147 0.001" "streaming kl 0.0507 0.0006" "streaming top1 0.883 0.0011" \
    "h2o ppl 22.1419 0.001" "h2o kl 0.0494 0.0006" "tova ppl 21.5523 0.001" "tova kl 0.0440 0.0006" \
    "scissorhands ppl 21.9712 0.001" "scissorhands kl 0.0492 0.0006" "knorm ppl 59.3948 0.005" \
    "block-h2o ppl 22.3853 0.001" "block-h2o kl 0.0522 0.0006" "lminfinite ppl 21.7514 0.001" "lminfinite kl 0.0552 0.0006" \
    "keydiff ppl 41.3279 0.005" "keydiff kl 0.6406 0.0006" "keydiff kv_bytes_peak 393216 0" \
    "expected-attention ppl 84.1030 0.01" "expected-attention kl 1.3103 0.0006" "streaming kv_bytes_peak 393216 0"
"$K" ppl -m "$MV" -f "$T/dracula.txt" --policy snapkv,pyramidkv,adakv,window --budget 128 --max-tokens 512 --json --prompt 384 > "$T/pp.json" 2>/dev/null
check_ppl trained_policy_table_prompt "$T/pp.json" "snapkv baseline_ppl 17.4208 0.0006" \
    "snapkv ppl 18.1974 0.001" "snapkv kl 0.0615 0.0006" "pyramidkv ppl 18.6838 0.001" "pyramidkv kl 0.0938 0.0006" \
    "adakv ppl 17.9018 0.001" "adakv kl 0.0379 0.0006" "window ppl 17.7764 0.001" "window kl 0.1194 0.0006"
cli_summary
