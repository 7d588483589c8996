#!/usr/bin/env bash
# compare_llama_logits.sh PEER_DIR [MODEL.gguf ...] — kvbound's logits
# against llama.cpp's on the same files and token ids (docs/EVALUATION.md,
# "Model families"). PEER_DIR is llama.cpp built by
# ../shared/tools/build-llama-peer.sh (outside this repository); the script
# builds bench/peer/dump_logits.cpp (our program on llama.cpp's public API)
# against it. Without MODELs: every family's tiny mkmodel shape, f32 and f16,
# plus PEER_DIR/archs/*-dense.gguf (test-llama-archs -o archs) and
# PEER_DIR/archs/gen/*.gguf (bench/peer/gen_archs.sh) of the families
# kvbound loads. Both engines run policy full with f32 KV rows, the prompt as
# one batch with every row's logits and the same ids one decode step at a
# time. The 24 ids are three windows of the tiny Gemma shapes and of
# gen/gemma*.gguf (8 tokens), and over one of archs/gemma2-dense.gguf (16).
# Each file runs at a context of 256, and at its trained context too when
# that is shorter (test-llama-archs' 128; gen/phi3-longrope: llama.cpp
# rounds a context up to 256, which picks LongRoPE's long factors there).
# One JSON line per file, context and mode: NMSE (sum of squared differences
# over the llama.cpp logits' sum of squares), top-1 agreement, max |diff|.
# PEER_ARGS: more arguments of dump_logits (--no-repack: llama.cpp without
# its AMX/repacked weights, which crash on quantized prompt batches here).
set -euo pipefail
PEER=${1:?usage: $0 PEER_DIR [MODEL.gguf ...]}; shift
HERE=$(cd "$(dirname "$0")/.." && pwd)
K=${KVB_BIN:-$HERE/build/kvbound}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
g++ -O2 -std=c++17 -I"$PEER/include" -I"$PEER/ggml/include" "$HERE/bench/peer/dump_logits.cpp" -o "$W/dump_logits" \
    "$PEER/build/src/libllama.a" "$PEER/build/ggml/src/libggml.a" "$PEER/build/ggml/src/libggml-cpu.a" \
    "$PEER/build/ggml/src/libggml-base.a" -fopenmp -lpthread -lm -ldl
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
    for s in tiny tiny-llama-bias tiny-qwen2 tiny-qwen3 tiny-granite tiny-olmo2 tiny-phi3 tiny-mistral3 tiny-smollm3 tiny-gemma2 tiny-gemma3 \
             tiny-qwen3moe tiny-mixtral tiny-granitemoe tiny-granitemoe-shared tiny-qwen2moe tiny-deepseek tiny-olmoe tiny-gpt-oss \
             tiny-qwen35 tiny-qwen35-mtp tiny-qwen35moe tiny-gemma4 tiny-gemma4moe tiny-gemma4moe-split \
             tiny-lfm2 tiny-lfm2-swa tiny-lfm2moe tiny-glm4moe tiny-deepseek2 tiny-deepseek2-lite tiny-granitehybrid tiny-granitehybrid-moe \
             tiny-nemotron-h tiny-nemotron-h-moe; do
        for t in f32 f16; do "$K" mkmodel --shape "$s" --type $t -o "$W/$s-$t.gguf" 2>/dev/null; files+=("$W/$s-$t.gguf"); done
    done
    for a in llama qwen2 qwen3 granite mistral3 smollm3 olmo2 phi3 gemma2 gemma3 qwen35 qwen35moe gemma4 gemma4moe gemma4-all gemma4moe-all lfm2 lfm2moe glm4moe glm4moe-all \
             granitehybrid nemotron_h nemotron_h_moe; do
        for f in "$PEER/archs/$a-dense.gguf" "$PEER/archs/gen/$a-f32.gguf" "$PEER/archs/gen/$a-f16.gguf"; do [ -f "$f" ] && files+=("$f"); done
    done
    for f in "$PEER/archs/gen/phi3-longrope-f32.gguf" "$PEER/archs/gen/phi3-longrope-f16.gguf"; do [ -f "$f" ] && files+=("$f"); done
    for a in llama qwen3moe qwen2moe deepseek olmoe granite granitemoe mistral3 gpt-oss lfm2moe glm4moe deepseek2; do [ -f "$PEER/archs/$a-moe.gguf" ] && files+=("$PEER/archs/$a-moe.gguf"); done
    for f in "$PEER"/archs/moe/*.gguf; do [ -f "$f" ] && files+=("$f"); done
fi
IDS="1,5,9,17,33,65,100,127,3,2,64,50,7,8,90,11,120,44,81,26,13,99,70,31"
for f in "${files[@]}"; do
    ctxs=256
    trained=$("$K" info -m "$f" 2>/dev/null | awk '$1 == "context" && !n { print $2; n = 1 }' || true)
    if [ -n "$trained" ] && [ "$trained" -lt 256 ] && [ "$trained" -ge 24 ]; then ctxs="256 $trained"; fi
    for ctx in $ctxs; do
        for mode in prompt decode; do
            "$W/dump_logits" "$f" "$W/l.bin" --tokens "$IDS" --mode $mode --n-ctx $ctx ${PEER_ARGS:-} > "$W/l.json" 2> "$W/l.err" || { echo "{\"file\":\"$f\",\"error\":\"llama.cpp: $(tail -n 1 "$W/l.err")\"}"; continue; }
            "$K" logits -m "$f" --tokens "$IDS" --mode $mode -c $ctx -o "$W/k.bin" > /dev/null 2> "$W/k.err" || { echo "{\"file\":\"$f\",\"error\":\"kvbound: $(tail -n 1 "$W/k.err")\"}"; continue; }
            python3 - "$W/l.bin" "$W/k.bin" "$W/l.json" "$f" "$mode" "$ctx" <<'PY'
import json, struct, sys
a, b = open(sys.argv[1], 'rb').read(), open(sys.argv[2], 'rb').read()
meta = json.load(open(sys.argv[3]))
V, T = meta['n_vocab'], meta['n_tokens']
A, B = struct.unpack('<%df' % (len(a) // 4), a), struct.unpack('<%df' % (len(b) // 4), b)
assert len(A) == len(B) == V * T, (len(A), len(B), V * T)
e = sum((x - y) ** 2 for x, y in zip(A, B)); s = sum(x * x for x in A)
top = sum(max(range(V), key=lambda i: A[t * V + i]) == max(range(V), key=lambda i: B[t * V + i]) for t in range(T))
print(json.dumps({"file": sys.argv[4].split('/')[-1], "arch": meta['arch'], "mode": sys.argv[5], "n_ctx": int(sys.argv[6]), "tokens": T,
                  "nmse": float('%.3g' % (e / s)), "top1": top / T, "max_abs": float('%.3g' % max(abs(x - y) for x, y in zip(A, B)))}))
PY
        done
    done
done
