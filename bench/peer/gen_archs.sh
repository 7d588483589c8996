#!/usr/bin/env bash
# Generate "realistic" small random-weight GGUFs (norm scales ~1, weights N(0,0.02), GQA 4q/2kv heads, 4 layers,
# n_embd 256, n_ff 384, n_vocab 128, seed 42) for the 10 architectures kvbound is checked on, f32 and f16,
# into archs/gen/. Optional tensors that real checkpoints of the family do not have are left out.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p archs/gen
G=./gen_random_gguf
C="--plain --seed 42 --n-layer 4 --n-head 4 --n-head-kv 2 --n-embd 256 --n-ff 384 --n-vocab 128"
NOBIAS="--drop \.bias$"
gen() { # name arch args...
  local name=$1 arch=$2; shift 2
  $G "$arch" "archs/gen/$name-f32.gguf" $C "$@"
  $G "$arch" "archs/gen/$name-f16.gguf" $C --f16 "$@"
}
gen llama    llama    $NOBIAS --rope-base 500000
gen qwen2    qwen2    --drop '(attn_output|ffn_[a-z]+)\.bias$' --rope-base 1000000
gen qwen3    qwen3    $NOBIAS --rope-base 1000000 --head-dim 128
gen gemma2   gemma2   $NOBIAS --swa 8 --swa-pattern 2 --kv @.attn_logit_softcapping=f32:50 --kv @.final_logit_softcapping=f32:30
gen gemma3   gemma3   $NOBIAS --swa 8 --swa-pattern 2 --rope-base 1000000 --kv @.rope.freq_base_swa=f32:10000
gen phi3     phi3     $NOBIAS
gen smollm3  smollm3  $NOBIAS --rope-base 5000000
gen granite  granite  $NOBIAS --kv @.logit_scale=f32:8 --kv @.residual_scale=f32:0.22 --kv @.embedding_scale=f32:12 --kv @.attention.scale=f32:0.015625
gen mistral3 mistral3 $NOBIAS --rope-base 1000000 --head-dim 128
gen olmo2    olmo2    $NOBIAS --rope-base 500000
gen olmo2-swa olmo2   $NOBIAS --swa 8 --swa-pattern 2
