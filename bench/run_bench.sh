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
