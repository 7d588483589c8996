#!/usr/bin/env bash
# Generate "realistic" small random-weight GGUFs (norm scales ~1, weights N(0,0.02), GQA 4q/2kv heads, 4 layers,
# n_embd 256, n_ff 384, n_vocab 128, seed 42) for the architectures kvbound is checked on, f32 and f16,
# into archs/gen/, plus phi3 with LongRoPE factors and biases at a context of 128 (phi3-longrope). Optional tensors that real checkpoints of the family do not have are left out.
# Run from a copy in the llama.cpp peer tree (../shared/tools/build-llama-peer.sh), next to gen_random_gguf built there:
#   g++ -O2 -std=c++17 -Iinclude -Iggml/include KVBOUND/bench/peer/gen_random_gguf.cpp -o gen_random_gguf build/src/libllama.a \
#       build/ggml/src/libggml.a build/ggml/src/libggml-cpu.a build/ggml/src/libggml-base.a -fopenmp -lpthread -lm -ldl
set -euo pipefail
set -f   # the flags below hold regexes and u32[] arrays: no file globbing of them
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
# lfm2: short-conv layers 0 and 2 (head_count_kv 0 there), attention on 1 and 3; 3 taps; no ColBERT dense_2 head
gen lfm2     lfm2     $NOBIAS --drop '^dense_2' --rope-base 1000000 --kv @.shortconv.l_cache=u32:3 --kv @.attention.head_count_kv=u32[]:0,2,0,2
# lfm2moe: the same layers, the first dense, then 8 experts of 64 (2 per token, sigmoid gating as LFM2-8B-A1B's converter
# writes it) with their selection bias exp_probs_b.bias (kept: only the attention biases dropped). The router's logits have a
# spread of about 0.3 (N(0, 0.02) weights over 256 normed inputs): the f16 file routes as the f32 one in both engines (raising
# the MoE layers' ffn_norm to ~4 to spread them more made the f16 logits' NMSE worse, 1.3e-5: the experts' inputs grow too)
gen lfm2moe  lfm2moe  --drop 'attn_[a-z]+\.bias$' --drop '^dense_2' --rope-base 1000000 --kv @.shortconv.l_cache=u32:3 --kv @.attention.head_count_kv=u32[]:0,2,0,2 \
    --kv @.leading_dense_block_count=u32:1 --kv @.expert_count=u32:8 --kv @.expert_used_count=u32:2 --kv @.expert_feed_forward_length=u32:64 --kv @.expert_gating_func=u32:2
# glm4moe: GLM-4.5-Air's layout: heads of 64 with 32 rotary dims (NEOX), q/k/v biases, no q/k norms (the Air has none), the
# first layer dense, then 8 experts of 64 (2 per token, sigmoid, the selection bias, renormalized, x2.5) beside one shared
# expert. No MTP layer here: llama.cpp creates a nextn layer's tensors with TENSOR_SKIP, which its loader's path for
# gen_random_gguf's tensors without data asserts on (tiny-glm4moe, written by kvbound, carries one)
gen glm4moe  glm4moe  --head-dim 64 --rope-base 1000000 --drop 'attn_[qk]_norm' --kv @.rope.dimension_count=u32:32 --kv @.leading_dense_block_count=u32:1 \
    --kv @.expert_count=u32:8 --kv @.expert_used_count=u32:2 --kv @.expert_feed_forward_length=u32:64 --kv @.expert_shared_count=u32:1 \
    --kv @.expert_gating_func=u32:2 --kv @.expert_weights_norm=bool:true --kv @.expert_weights_scale=f32:2.5
# the same with every optional tensor llama.cpp's glm4moe loader creates: q/k norms, the .scale multipliers (~1.5: its
# graph applies the q/k/v/o ones, not the FFN's, the experts' or the shared expert's) and .input_scale (~1, unused)
$G glm4moe archs/gen/glm4moe-all-f32.gguf --seed 42 --n-layer 4 --n-head 4 --n-head-kv 2 --n-embd 256 --n-ff 384 --n-vocab 128 --head-dim 64 \
    --rope-base 1000000 --kv @.rope.dimension_count=u32:32 --kv @.leading_dense_block_count=u32:1 --kv @.expert_count=u32:8 \
    --kv @.expert_used_count=u32:2 --kv @.expert_feed_forward_length=u32:64 --kv @.expert_shared_count=u32:1 --kv @.expert_gating_func=u32:2 \
    --kv @.expert_weights_norm=bool:true --kv @.expert_weights_scale=f32:2.5 --mean '\.input_scale$=1' --mean '\.scale$=1.5'
# granitehybrid (Granite 4.0-H dense): Mamba-2 layers 0, 1 and 3 (head_count_kv 0 there), attention on 2 without RoPE (finetuned
# false, as the real files), granite's scales; Mamba-2 of 8 heads of 64 (d_inner 2E), 2 groups, state 64, 4 taps, its biases kept
gen granitehybrid granitehybrid --drop '(attn_[a-z]+|ffn_[a-z]+)\.bias$' --kv @.logit_scale=f32:8 --kv @.residual_scale=f32:0.22 \
    --kv @.embedding_scale=f32:12 --kv @.attention.scale=f32:0.015625 --kv @.rope.scaling.finetuned=bool:false --kv @.attention.head_count_kv=u32[]:0,0,2,0 \
    --kv @.ssm.conv_kernel=u32:4 --kv @.ssm.inner_size=u32:512 --kv @.ssm.state_size=u32:64 --kv @.ssm.time_step_rank=u32:8 --kv @.ssm.group_count=u32:2
# nemotron_h: blocks Mamba-2, FFN, attention (no RoPE), FFN, Mamba-2 (head_count_kv 0 and feed_forward_length 0 mark Mamba-2,
# feed_forward_length > 0 an FFN block: squared ReLU, no gate); Mamba-2 as gen granitehybrid
gen nemotron_h nemotron_h --n-layer 5 --drop '(attn_[a-z]+|ffn_[a-z]+)\.bias$' --kv @.attention.head_count_kv=u32[]:0,2,2,2,0 \
    --kv @.feed_forward_length=u32[]:0,384,0,384,0 --kv @.ssm.conv_kernel=u32:4 --kv @.ssm.inner_size=u32:512 --kv @.ssm.state_size=u32:64 \
    --kv @.ssm.time_step_rank=u32:8 --kv @.ssm.group_count=u32:2
# phi3 as llama.cpp's test-llama-archs -o writes it (2 layers, 2 heads of 128, separate q/k/v with their biases, one pair of
# LongRoPE factors, context 128, a sliding window llama.cpp switches off), with 512 ids, weights N(0, 0.15), norms and factors
# ~1: compare_llama_logits.sh runs it at its trained context too, where llama.cpp (context rounded up to 256) takes the long factors
P="--seed 42 --n-layer 2 --n-head 2 --n-head-kv 2 --n-embd 256 --n-ff 384 --n-vocab 512 --n-ctx-train 128 --swa 16 --std 0.15"
$G phi3 archs/gen/phi3-longrope-f32.gguf $P --drop '\.(scale|input_scale)$'
$G phi3 archs/gen/phi3-longrope-f16.gguf $P --f16 --drop '\.(scale|input_scale)$'
# mixtures of experts (8 experts, 2-3 per token, renormalized or not), read by compare_llama_logits.sh from archs/moe/
mkdir -p archs/moe
M0="--plain --seed 42 --n-layer 3 --n-head 4 --n-head-kv 2 --n-embd 256 --n-ff 192 --n-vocab 128"
M="$M0 $NOBIAS"
X="--kv @.expert_count=u32:8 --kv @.expert_used_count=u32:2"
$G qwen3moe archs/moe/qwen3moe-f32.gguf $M --head-dim 64 --rope-base 1000000 --kv @.expert_count=u32:8 --kv @.expert_used_count=u32:3 --kv @.expert_feed_forward_length=u32:96
$G qwen3moe archs/moe/qwen3moe-f16.gguf $M --f16 --head-dim 64 --rope-base 1000000 --kv @.expert_count=u32:8 --kv @.expert_used_count=u32:3 --kv @.expert_feed_forward_length=u32:96
$G llama archs/moe/mixtral-f32.gguf $M $X
$G granitemoe archs/moe/granitemoe-f32.gguf $M $X --kv @.logit_scale=f32:8 --kv @.residual_scale=f32:0.22 --kv @.embedding_scale=f32:12 --kv @.attention.scale=f32:0.015625
$G mistral3 archs/moe/mistral3moe-f32.gguf $M --head-dim 128 $X
# gpt-oss: biases kept, sinks, windows of 8 on the even layers; plain, and with YaRN x4 from 8
O="--plain --seed 42 --n-layer 4 --n-head 4 --n-head-kv 2 --n-embd 256 --n-ff 192 --n-vocab 128 --head-dim 64 --std 0.05 --swa 8 $X --kv @.expert_feed_forward_length=u32:96"
$G gpt-oss archs/moe/gpt-oss-f32.gguf $O
$G gpt-oss archs/moe/gpt-oss-yarn-f32.gguf $O --rope-base 150000 --kv @.rope.scaling.type=str:yarn --kv @.rope.scaling.factor=f32:4 --kv @.rope.scaling.original_context_length=u32:8
# shared experts and leading dense layers: qwen2moe (gated shared expert 160 wide, q/k/v biases kept, experts not renormalized),
# deepseek (one dense layer first, 2 shared experts of the experts' width, weights x1.5, 3 of 8), granitemoe with a shared expert
$G qwen2moe archs/moe/qwen2moe-f32.gguf $M0 --drop '(attn_output|ffn_[a-z_]+)\.bias$' --rope-base 1000000 $X --kv @.expert_feed_forward_length=u32:96 --kv @.expert_shared_feed_forward_length=u32:160
$G qwen2moe archs/moe/qwen2moe-f16.gguf $M0 --f16 --drop '(attn_output|ffn_[a-z_]+)\.bias$' --rope-base 1000000 $X --kv @.expert_feed_forward_length=u32:96 --kv @.expert_shared_feed_forward_length=u32:160
D="--kv @.expert_count=u32:8 --kv @.expert_used_count=u32:3 --kv @.expert_feed_forward_length=u32:64 --kv @.expert_shared_count=u32:2 --kv @.leading_dense_block_count=u32:1 --kv @.expert_weights_scale=f32:1.5"
$G deepseek archs/moe/deepseek-f32.gguf $M $D
$G deepseek archs/moe/deepseek-f16.gguf $M --f16 $D
$G granitemoe archs/moe/granitemoe-shared-f32.gguf $M $X --kv @.expert_shared_feed_forward_length=u32:128 --kv @.logit_scale=f32:8 --kv @.residual_scale=f32:0.22 --kv @.embedding_scale=f32:12 --kv @.attention.scale=f32:0.015625
# granitehybrid with experts (Granite 4.0-H Tiny/Small's kind): Mamba-2 on layers 0 and 2, NoPE attention on 1, 8 experts of 192,
# 2 per token, a shared expert of 160; the Mamba-2 shape as gen granitehybrid
$G granitehybrid archs/moe/granitehybrid-f32.gguf $M0 --drop '(attn_[a-z]+|ffn_[a-z]+)\.bias$' $X --kv @.expert_shared_feed_forward_length=u32:160 \
    --kv @.logit_scale=f32:8 --kv @.residual_scale=f32:0.22 --kv @.embedding_scale=f32:12 --kv @.attention.scale=f32:0.015625 \
    --kv @.rope.scaling.finetuned=bool:false --kv @.attention.head_count_kv=u32[]:0,2,0 --kv @.ssm.conv_kernel=u32:4 --kv @.ssm.inner_size=u32:512 \
    --kv @.ssm.state_size=u32:64 --kv @.ssm.time_step_rank=u32:8 --kv @.ssm.group_count=u32:2
# nemotron_h_moe (Nemotron 3 Nano's kind): gen nemotron_h's blocks, the 2 FFN blocks 8 squared-ReLU experts of 128 without a gate,
# 2 per token by sigmoid with the selection bias, renormalized and x2.5, beside a shared expert of 192; no latent projections
$G nemotron_h_moe archs/moe/nemotron_h_moe-f32.gguf --plain --seed 42 --n-layer 5 --n-head 4 --n-head-kv 2 --n-embd 256 --n-ff 384 --n-vocab 128 \
    --drop '(attn_[a-z]+|ffn_[a-z]+)\.bias$' --drop '^blk\.[0-9]+\.ffn_latent' --kv @.attention.head_count_kv=u32[]:0,2,2,2,0 \
    --kv @.feed_forward_length=u32[]:0,384,0,384,0 --kv @.ssm.conv_kernel=u32:4 --kv @.ssm.inner_size=u32:512 --kv @.ssm.state_size=u32:64 \
    --kv @.ssm.time_step_rank=u32:8 --kv @.ssm.group_count=u32:2 --kv @.expert_count=u32:8 --kv @.expert_used_count=u32:2 \
    --kv @.expert_feed_forward_length=u32:128 --kv @.expert_shared_feed_forward_length=u32:192 --kv @.expert_weights_norm=bool:true \
    --kv @.expert_weights_scale=f32:2.5
# olmoe: q/k norms over the whole projection (so as many KV heads as query heads: llama.cpp sizes k_norm by n_embd), 2 of 8
$G olmoe archs/moe/olmoe-f32.gguf $M --n-head-kv 4 $X
$G olmoe archs/moe/olmoe-f16.gguf $M --n-head-kv 4 --f16 $X
# qwen35 (issue 50): Gated DeltaNet layers (3 of 4) beside gated attention, written from llama.cpp's own loader's
# tensor list, with one MTP layer (loaded, not run); no q/k/v biases (its graph applies none); sections {3,0,0,0} of 16
# rotary dims; 2 key heads and 4 value heads of 16, conv 4 taps
Q35="--plain --seed 42 --n-layer 5 --n-head 4 --n-head-kv 2 --n-embd 256 --n-ff 384 --n-vocab 128 --head-dim 32 --drop attn_[qkv]\.bias$"
Q35K="--kv @.rope.dimension_count=u32:16 --kv @.rope.dimension_sections=i32:3 --kv @.ssm.conv_kernel=u32:4 --kv @.ssm.inner_size=u32:64 --kv @.ssm.state_size=u32:16 --kv @.ssm.time_step_rank=u32:4 --kv @.ssm.group_count=u32:2 --kv @.nextn_predict_layers=u32:1"
$G qwen35 archs/gen/qwen35-f32.gguf $Q35 $Q35K
$G qwen35 archs/gen/qwen35-f16.gguf $Q35 --f16 $Q35K
# qwen35moe (issue 50): qwen35's layers with 8 experts of 64 (2 per token, fused gate/up) and a sigmoid-gated shared expert of 96
Q35X="--kv @.expert_count=u32:8 --kv @.expert_used_count=u32:2 --kv @.expert_feed_forward_length=u32:64 --kv @.expert_shared_feed_forward_length=u32:96"
$G qwen35moe archs/gen/qwen35moe-f32.gguf $Q35 $Q35K $Q35X
$G qwen35moe archs/gen/qwen35moe-f16.gguf $Q35 --f16 $Q35K $Q35X
# gemma4 (issue 50), as llama.cpp's gemma4 loader reads it: 6 layers, windows of 8 on layers 0,1,3,4 (a bool per layer),
# window heads of 32 and global heads of 64 (rotary over the whole head; the globals' rope_freqs divisors ~1), bases 1e4 / 1e6,
# eps 1e-6, tied output; every optional tensor real checkpoints carry: attn_v, layer_output_scale (~1), the
# router's and experts' scales; none of the generic per-projection .scale / .input_scale. As mkmodel's tiny-gemma4 shapes:
# q/k norms ~D^-1/4 (the scores are unscaled: at 1 attention is one-hot, and llama.cpp's fp16 GELU table's steps
# then move the logits by 1e-4 and more), the router's input scale ~sqrt(E) and the experts' scales ~1 (drawn ~N(0, 0.02)
# as other ".scale" tensors, every router logit is within 1e-3 of the others: routing by near ties).
G4="--seed 42 --n-layer 6 --n-head 4 --n-head-kv 2 --n-embd 256 --n-ff 384 --n-vocab 128 --head-dim 64 --eps 1e-6 --rope-base 1000000 --swa 8"
G4K="--kv @.attention.sliding_window_pattern=bool[]:1,1,0,1,1,0 --kv @.attention.key_length_swa=u32:32 --kv @.attention.value_length_swa=u32:32 --kv @.rope.dimension_count=u32:64 --kv @.rope.dimension_count_swa=u32:32 --kv @.rope.freq_base_swa=f32:10000"
G4V="--mean ^blk\.(2|5)\.attn_[qk]_norm\.weight$=0.3536 --mean attn_[qk]_norm\.weight$=0.4204 --mean ffn_gate_inp\.scale$=16 --mean ffn_down_exps\.scale$=1"
G4D="--drop ^output\.weight$ --drop \.input_scale$ --drop ^blk\.[0-9]+\.(attn_[qkv]|attn_output|ffn_gate|ffn_up|ffn_down)\.scale$"
# dense, E2B-like: the last 3 layers share K/V (layer 3 and 4 read layer 1's, layer 5 layer 2's; their own attn_k and
# attn_k_norm are loaded, unused) with FFNs twice as wide (an array, as E2B's use_double_wide_mlp), per-layer embeddings of 16,
# final softcap 30 by default (key absent)
G4E="--kv @.attention.shared_kv_layers=u32:3 --kv @.embedding_length_per_layer_input=u32:16 --kv @.feed_forward_length=u32[]:384,384,384,768,768,768"
$G gemma4 archs/gen/gemma4-f32.gguf $G4 $G4K $G4V $G4D $G4E
$G gemma4 archs/gen/gemma4-f16.gguf $G4 --f16 $G4K $G4V $G4D $G4E
# MoE, 26B-A4B-like: 8 experts of 64 (2 per token, fused gate/up, per-expert scales) beside a dense FFN of 128 on every
# layer, 2 KV heads on window layers and 1 on global ones (an array), no attn_v on the global layers (V from the raw K),
# no per-layer embeddings, no shared K/V, final softcap 30 written
G4M="--n-ff 128 --kv @.attention.head_count_kv=u32[]:2,2,1,2,2,1 --kv @.embedding_length_per_layer_input=u32:0 --kv @.expert_count=u32:8 --kv @.expert_used_count=u32:2 --kv @.expert_feed_forward_length=u32:64 --kv @.final_logit_softcapping=f32:30"
$G gemma4 archs/gen/gemma4moe-f32.gguf $G4 $G4K $G4V $G4D $G4M --drop '^blk\.(2|5)\.attn_v\.weight$'
# both again with every optional tensor llama.cpp's gemma4 loader creates: output.weight (untied), attn_v on the MoE's global
# layers, and the per-projection .scale multipliers (~1.5, which its graph applies) and .input_scale ones (~1, loaded, unused)
G4A="--mean \.input_scale$=1 --mean \.scale$=1.5"
$G gemma4 archs/gen/gemma4-all-f32.gguf $G4 $G4K $G4V $G4A $G4E
$G gemma4 archs/gen/gemma4moe-all-f32.gguf $G4 $G4K $G4V $G4A $G4M
# deepseek2 (multi-head latent attention): 4 heads, q_lora 96, kv_lora 64, 32 rotary dims (key row 96 = 32 + 64), no-RoPE
# 32 + 32 per head, values 32; one dense layer first, then 8 experts of 64 in 4 groups (2 used), sigmoid with the selection
# bias, renormalized, x2.5, one shared expert; YaRN x4 from 64 with V2-Lite's log multiplier 0.0707. deepseek2-plain: softmax,
# no bias, no groups, no YaRN
DS="--plain --seed 42 --n-layer 3 --n-head 4 --n-head-kv 1 --n-embd 256 --n-ff 192 --n-vocab 128 --head-dim 96 --kv @.attention.value_length=u32:64 \
    --kv @.rope.dimension_count=u32:32 --kv @.attention.key_length_mla=u32:64 --kv @.attention.value_length_mla=u32:32 --kv @.attention.q_lora_rank=u32:96 \
    --kv @.attention.kv_lora_rank=u32:64 --kv @.leading_dense_block_count=u32:1 --kv @.expert_count=u32:8 --kv @.expert_used_count=u32:2 \
    --kv @.expert_shared_count=u32:1 --kv @.expert_feed_forward_length=u32:64"
DSX="--kv @.expert_gating_func=u32:2 --kv @.expert_weights_norm=bool:true --kv @.expert_weights_scale=f32:2.5 --kv @.expert_group_count=u32:4 \
    --kv @.expert_group_used_count=u32:2 --kv @.rope.scaling.type=str:yarn --kv @.rope.scaling.factor=f32:4 \
    --kv @.rope.scaling.original_context_length=u32:64 --kv @.rope.scaling.yarn_log_multiplier=f32:0.0707"
$G deepseek2 archs/moe/deepseek2-f32.gguf $DS $DSX
$G deepseek2 archs/moe/deepseek2-f16.gguf $DS $DSX --f16
$G deepseek2 archs/moe/deepseek2-plain-f32.gguf $DS --drop '\.bias$' --kv @.expert_gating_func=u32:1
