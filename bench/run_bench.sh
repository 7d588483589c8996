#!/bin/sh
# `make bench`: the cache benchmark of issue "kvbound core" at its reference
# shape (32 layers, 8 KV heads, 128 dims, budget 2048, F16), all decode-time
# policies interleaved in one run so their ratios share the machine's noise,
# then GQA-free (one query head per KV head) to isolate memory streaming.
# Prints one JSON array per configuration.
BUILD_DIR=${1:-build}
K="$BUILD_DIR/kvbound"
STEPS=${KVB_BENCH_STEPS:-64}
echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(date -u +%Y-%m-%d)"
echo "# kvbound bench cache --policy streaming,h2o,tova,scissorhands --layers 32 --kv-heads 8 --head-dim 128 --budget 2048 --steps $STEPS --dtype f16 -t 2"
"$K" bench cache --policy streaming,h2o,tova,scissorhands --layers 32 --kv-heads 8 --head-dim 128 --budget 2048 --steps "$STEPS" --dtype f16 -t 2 --json
echo "# same, one query head per KV head (--heads 8): attention bound by memory, not FMA"
"$K" bench cache --policy streaming,h2o --layers 32 --kv-heads 8 --heads 8 --head-dim 128 --budget 2048 --steps "$STEPS" --dtype f16 -t 2 --json
# tokenizers (issue 6): War and Peace through each shared vocabulary; anchors
# for llama.cpp's llama-tokenize on this machine kind: llama3 1.9 s, qwen2.5 2.7 s, llama2 4.8 s
TOK=${KVB_SHARED_DATA:-../shared/data}/tokenizers
WP=${KVB_SHARED_DATA:-../shared/data}/text/pg2600_war_and_peace.txt
if [ -f "$WP" ]; then
    echo "# kvbound bench tokenize -m <6 shared vocabularies> -f $WP --reps 5"
    "$K" bench tokenize -m "$TOK/llama3/llama3-8b-instruct.vocab.gguf" -m "$TOK/qwen2.5/qwen2.5-0.5b-instruct.vocab.gguf" \
        -m "$TOK/llama2/ggml-vocab-llama-spm.gguf" -m "$TOK/mistral-v0.3/mistral-7b-instruct-v0.3.vocab.gguf" \
        -m "$TOK/gpt2/ggml-vocab-gpt-2.gguf" -m "$TOK/smollm2/smollm2-135m-instruct.vocab.gguf" -f "$WP" --reps 5
    echo "# whole process: kvbound tokenize -m VOCAB -f $WP --ids > /dev/null (user+sys seconds)"
    [ -x /usr/bin/time ] || { echo "# (no /usr/bin/time: apt-get install time)"; exit 0; }
    for v in llama3/llama3-8b-instruct.vocab.gguf qwen2.5/qwen2.5-0.5b-instruct.vocab.gguf llama2/ggml-vocab-llama-spm.gguf; do
        s=$( { /usr/bin/time -f '%U %S' "$K" tokenize -m "$TOK/$v" -f "$WP" --ids > /dev/null; } 2>&1 | tail -n 1)
        echo "{\"bench\": \"tokenize_process\", \"vocab\": \"$v\", \"cpu_s\": $(echo "$s" | awk '{print $1 + $2}')}"
    done
fi
