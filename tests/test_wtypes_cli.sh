#!/bin/sh
# test_wtypes_cli.sh — the weight types of other people's files against
# llama.cpp (docs/EVALUATION.md): with KVB_LLAMA_PEER=DIR (llama.cpp built by
# ../shared/tools/build-llama-peer.sh: DIR/build/bin/llama-quantize and the
# static libraries bench/compare_llama_logits.sh links), the tiny llama shape
# in f16 is quantized by llama-quantize (--pure: every matrix in the type) and
# both engines' logits on 24 ids compared, decode (int8 activations on both
# sides: NMSE <= 1e-5 for the types with Q8_K activations, where the two
# agree to ~1e-13; <= 1e-3 for those with Q8_0-form ones, which differ from
# llama.cpp's by ~2e-4 on this shape for q8_0 and q4_0 weights as well) and
# prompt (kvbound's f32 panels, or its int8 tiles for q8_0 and the K-quants
# on the families that take them, against llama.cpp's int8 activations:
# NMSE <= 1e-3, ~2e-4 for q4_K and q6_K too), top-1 >= 0.9; and the
# same shape written by kvbound's own quantizer (mkmodel --type) must load in
# llama.cpp and agree as well. Skipped by name without KVB_LLAMA_PEER.
. "$(dirname "$0")/cli_lib.sh"
HERE=$(cd "$(dirname "$0")/.." && pwd)
# type as llama-quantize names it : kvbound's name ("-": kvbound does not write it) : decode NMSE bound
if [ -n "${KVB_LLAMA_PEER:-}" ]; then
    need_tool wtypes_python python3 KVB_REQUIRE_PYTHON "it compares the logits" || { cli_summary; exit; }
    need_tool wtypes_cxx g++ KVB_REQUIRE_CXX "it builds bench/peer/dump_logits.cpp" || { cli_summary; exit; }
fi
TYPES="Q5_K_M:q5_k:1e-5 Q4_1:q4_1:1e-3 Q5_1:q5_1:1e-3 IQ4_NL:iq4_nl:1e-3 IQ4_XS:iq4_xs:1e-5 MXFP4_MOE:mxfp4:1e-3"
for spec in $TYPES; do
    qt=${spec%%:*}
    rest=${spec#*:}
    kt=${rest%%:*}
    dlim=${rest#*:}
    name=$(echo "$qt" | tr 'A-Z' 'a-z')
    if [ -z "${KVB_LLAMA_PEER:-}" ]; then sk "wtypes_vs_llama_$name" "KVB_LLAMA_PEER=DIR (llama.cpp built with its static libraries) is not set"; continue; fi
    Q="$KVB_LLAMA_PEER/build/bin/llama-quantize"
    [ -f "$T/tiny-f16.gguf" ] || "$K" mkmodel --shape tiny --type f16 -o "$T/tiny-f16.gguf" > /dev/null 2>&1
    files=""
    if "$Q" --allow-requantize --pure "$T/tiny-f16.gguf" "$T/llama-$name.gguf" "$qt" > "$T/q.log" 2>&1; then files="$T/llama-$name.gguf"
    else ko "wtypes_vs_llama_$name" "llama-quantize $qt failed: $(tail -n 1 "$T/q.log")"; continue; fi
    if [ "$kt" != - ]; then
        if "$K" mkmodel --shape tiny --type "$kt" -o "$T/kvb-$kt.gguf" > /dev/null 2>&1; then files="$files $T/kvb-$kt.gguf"
        else ko "wtypes_vs_llama_$name" "kvbound mkmodel --type $kt failed"; continue; fi
    fi
    # shellcheck disable=SC2086
    PEER_ARGS=--no-repack KVB_BIN="$K" bash "$HERE/bench/compare_llama_logits.sh" "$KVB_LLAMA_PEER" $files > "$T/cmp.jsonl" 2>&1
    verdict=$(python3 - "$T/cmp.jsonl" "$dlim" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.startswith('{')]
bad, n = [], 0
for l in lines:
    r = json.loads(l)
    if 'error' in r: bad.append(r['file'].split('/')[-1] + ': ' + r['error']); continue
    n += 1
    lim, top = (float(sys.argv[2]) if r['mode'] == 'decode' else 1e-3), 0.9
    if not (r['nmse'] <= lim and r['top1'] >= top): bad.append('%s %s: NMSE %g top-1 %g' % (r['file'], r['mode'], r['nmse'], r['top1']))
    print('  %s %s NMSE %g top-1 %g' % (r['file'], r['mode'], r['nmse'], r['top1']), file=sys.stderr)
print('; '.join(bad) if bad or n == 0 else 'ok')
PY
2> "$T/nmse.txt")
    cat "$T/nmse.txt"
    if [ "$verdict" = ok ]; then ok "wtypes_vs_llama_$name"; else ko "wtypes_vs_llama_$name" "$verdict"; fi
done
cli_summary
