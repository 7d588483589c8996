/*
 * family.c — the model families as data.
 *
 * A family is a row of k_families: its RoPE layout, which tensors a layer
 * must carry, may carry or must not carry (k_slots names them), and the few
 * traits that change the arithmetic (q/k norms over the whole projection,
 * Granite's multipliers, the Mistral 3 query temperature, LongRoPE, partial
 * rotary, Gemma's GeGLU, embedding scale, softcaps and sliding-window layers).
 * Everything else is the one forward pass of forward.c, which runs a step
 * when its weights are present. Adding a family is a row here, its keys in
 * load_family_keys when it has its own, and a shape in export.c.
 *
 * Keys are read as llama.cpp reads them (docs: llama.cpp's load_hparams and
 * the per-architecture loaders): missing or zero means unset, so
 * rope.scaling.factor 0 is no scaling. A key that changes the math and that
 * this engine does not implement (sliding-window layers outside gemma2/3,
 * experts, per-layer head counts, an unknown RoPE scaling type) is refused by
 * name. Experts, shared experts and leading dense layers are data too
 * (enum moe_kind, enum shexp_kind, F_MOE_*). Every
 * tensor of the file must be bound: one the family does not use is refused
 * by name, never ignored (llama.cpp refuses such files too).
 *
 * Sliding-window layers (gemma2, gemma3) are data too: the family row gives
 * the keys' defaults (window, pattern, the window layers' RoPE base and
 * whether they keep the linear scale, the softcaps), load_gemma reads the keys
 * as llama.cpp's loaders do, and the model hands the cache one window policy
 * per such layer (kvb_model_cache_params): the cache makes them exact.
 *
 * Qwen3.5's hybrid layers are data too (F_HYBRID): load_hybrid reads the
 * Gated DeltaNet shape (ssm.*), full_attention_interval (kvb_family_hybrid
 * turns it into recurrent[]) and the RoPE sections; bind_layer binds a
 * Gated DeltaNet layer's ssm_* tensors (bind_ssm) instead of attention, and
 * the nextn_predict_layers MTP blocks after the layers that run (bind_nextn),
 * which are kept for export and never run.
 *
 * LFM2 (F_SHORTCONV) is the other hybrid: shortconv_layers reads its layer
 * kinds off the per-layer head_count_kv (0: a short-conv layer), load_shortconv
 * its taps and optional window, and bind_layer binds a conv layer's three
 * shortconv.* tensors (bind_shortconv) into the Gated DeltaNet slots it shares.
 *
 * GLM-4.5 (glm4moe, F_GLM4MOE) needs no arithmetic of its own: partial NEOX
 * RoPE, biases, optional q/k norms, deepseek's dense lead and shared experts,
 * lfm2moe's selection bias; load_glm4moe_keys reads its routing keys, and its
 * nextn_predict_layers MTP blocks are bound as qwen35's (bind_nextn).
 * Granite 4.0-H (F_MAMBA2: granitehybrid) reads its Mamba-2 layers off the
 * same per-layer head_count_kv (shortconv_layers), their shape off ssm.*
 * (load_mamba2, kvb_family_mamba2), and binds a Mamba-2 layer's ssm_* tensors
 * (bind_mamba2) into the same slots. Nemotron-H (F_NEMOTRON: nemotron_h,
 * nemotron_h_moe) has blocks of one kind each (Mamba-2, attention, FFN):
 * nemotron_layers makes a layer of each Mamba-2 or attention block and the
 * FFN block after it, kvb_model.file_layer keeps the file's block numbers for
 * bind_nemotron and the export.
 *
 * Gemma 4 (F_GEMMA4, load_gemma4) adds a per-layer window pattern, window
 * heads of their own size and rotary dims, KV-shared trailing layers
 * (kv_source, with llama.cpp's assert on their sources' kinds as a refusal),
 * per-layer token embeddings, FFN widths and KV head counts (n_kv_layer: the
 * 26B-A4B and 31B's window and global counts), all bound as data; the 26B-A4B's
 * experts (bind_experts: router_scale, the fused gate_up stack or the split
 * one, the three extra norms) run beside the dense FFN (forward.c).
 *
 * YaRN becomes data: its ramp mixes interpolated and extrapolated angles per
 * rotary pair, theta_i = theta_e,i * (s (1 - mix_i) + mix_i), which is a
 * per-pair frequency divisor, plus a magnitude on cos/sin (rope_mscale).
 */
#include "model.h"
#include "../gguf/gguf.h"
#include "../tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>

/* ---- the slots of a layer ---- */

enum slot {
    S_ATTN_NORM, S_Q, S_K, S_V, S_QKV, S_BQ, S_BK, S_BV, S_BQKV, S_Q_NORM, S_K_NORM, S_O, S_BO, S_POST_ATTN_NORM,
    S_FFN_NORM, S_GATE, S_UP, S_DOWN, S_BGATE, S_BUP, S_BDOWN, S_POST_FFN_NORM, S_COUNT
};
static const char *const k_slots[S_COUNT] = {
    "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_qkv.weight", "attn_q.bias", "attn_k.bias",
    "attn_v.bias", "attn_qkv.bias", "attn_q_norm.weight", "attn_k_norm.weight", "attn_output.weight", "attn_output.bias",
    "post_attention_norm.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", "ffn_gate.bias",
    "ffn_up.bias", "ffn_down.bias", "post_ffw_norm.weight"};

enum need { NO = 0, OPT = 1, REQ = 2 };

/* traits */
#define F_QK_WHOLE 1u      /* q/k norms over the whole projection (olmo2) */
#define F_FUSED_UP 2u      /* ffn_up holds gate then up rows, no ffn_gate (phi3) */
#define F_PARTIAL_ROT 4u   /* rope.dimension_count may be below the head size (phi3) */
#define F_ROPE_FREQS 8u    /* rope_freqs.weight (Llama-3 factors) may be present */
#define F_LONGROPE 16u     /* rope_factors_short/long.weight may be present (phi3 always; llama-likes with longrope) */
#define F_OUTPUT_BIAS 32u  /* output.bias may be present (qwen2) */
#define F_OUTPUT_REQ 64u   /* output.weight required, never tied (olmo2) */
#define F_GRANITE 128u     /* embedding/residual/attention/logit scales, rope.scaling.finetuned */
#define F_TEMP 256u        /* mistral3: query temperature, YaRN betas and log multiplier */
#define F_SWA_IGNORED 512u /* attention.sliding_window is read and then switched off (phi3) */
#define F_CLS_HEAD 1024u   /* cls.output.weight/.bias: a reranker's head, unused by generation (qwen3, as llama.cpp) */
#define F_FFN_SCALES 2048u /* llama.cpp's graph applies the FFN's .scale tensors (llama, qwen3; the others load them unused) */
#define F_NO_QKV_SCALES 4096u /* its graph applies no q/k/v .scale (olmo2) */
#define F_NOPE4 8192u      /* every fourth layer ((l + 1) % 4 == 0) has no RoPE (smollm3; llama.cpp hard-codes the step) */
#define F_TIED_ALWAYS 16384u /* output is token_embd, always: output.weight is refused (gemma2; llama.cpp never looks it up) */
#define F_EXP_BIASES 65536u /* the router and every expert have biases (gpt-oss) */
#define F_FFN_NORM_AS_POST 131072u /* the pre-FFN norm is stored as post_attention_norm.weight (gpt-oss) */
#define F_SINKS 262144u     /* blk.N.attn_sinks.weight [n_head]: learned sink logits in every softmax (gpt-oss) */
#define F_OAI_WINDOWS 524288u /* gpt-oss: attention.sliding_window required, the pattern 2 (even layers), rope.freq_base_swa */
#define F_EXP_SCALES 32768u /* llama.cpp's graph applies the experts' .scale tensors (llama, qwen3moe; the others load them unused) */
#define F_MOE_NO_NORM 1048576u /* the chosen experts' weights are not renormalized (qwen2moe, deepseek) */
#define F_MOE_LEAD 2097152u /* deepseek: expert_feed_forward_length and expert_shared_count required; leading_dense_block_count dense
                             * layers first; expert_weights_scale */
#define F_HYBRID 4194304u  /* qwen35: Gated DeltaNet layers (recurrent[] by full_attention_interval, the ssm.* keys and tensors) beside
                            * gated attention (attn_q: query and gate rows per head), rope.dimension_sections, nextn (MTP) layers
                            * loaded and not run; q/k/v biases and a fused attn_qkv on attention layers refused (its graph reads neither) */
#define F_FF_OPT 8388608u  /* feed_forward_length may be absent (qwen35moe: its experts and shared expert have their own keys) */
#define F_GEMMA4 16777216u /* gemma4: a per-layer window pattern, window layers of their own head size and rotary dims (padded to the
                            * global head size in the cache), attention scale 1, V = rms(raw V or raw K) per head, attn_v optional,
                            * KV-shared trailing layers, per-layer token embeddings (PLE), layer_output_scale, per-layer FFN widths
                            * (load_gemma4, kvb_family_gemma4) */
#define F_GATE_UP_EXPS 33554432u /* the experts' gate and up stacks may be one fused ffn_gate_up_exps (each expert's gate rows, then
                                  * its up rows), as llama.cpp's loader takes it for gemma4 and qwen35moe */
#define F_MOE_SEL_BIAS 134217728u /* lfm2moe: expert_gating_func required (softmax or sigmoid; the others refused), a selection bias
                                  * exp_probs_b.bias on every MoE layer; expert_weights_scale not read by llama.cpp (so refused
                                  * unless 0 or 1), expert_weights_norm not read (its graph renormalizes always; ignored) */
#define F_MLA (1ull << 32)  /* deepseek2: multi-head latent attention (attn_q_a/attn_q_a_norm/attn_q_b or attn_q, attn_kv_a_mqa,
                             * attn_kv_a_norm, attn_k_b, attn_v_b; bind_mla), the cache one latent row per token (mla.c); its keys
                             * (load_mla_keys): the ranks, the MLA head sizes, expert_gating_func, expert_weights_norm, the
                             * expert groups, YaRN's log multiplier as its graph applies it; exp_probs_b.bias optional */
#define F_MAMBA2 (1ull << 28) /* granitehybrid, nemotron_h: Mamba-2 layers (head_count_kv 0 in its per-layer array; the ssm.* keys and
                                * ssm_in/ssm_conv1d/ssm_dt/ssm_a/ssm_d/ssm_norm/ssm_out tensors: load_mamba2, bind_mamba2) */
#define F_NEMOTRON (1ull << 29) /* nemotron_h: every block one of Mamba-2 (head_count_kv and feed_forward_length 0), attention
                                 * (no RoPE) or an FFN-only block (squared-ReLU up/down, no gate), each x += block(rms(x)); an FFN
                                 * block runs as the FFN of the mixer block before it (nemotron_layers, bind_nemotron) */
#define F_SHORTCONV 67108864u /* lfm2: short-conv layers (head_count_kv 0 in its per-layer array; shortconv.l_cache and the shortconv.*
                               * tensors) beside attention layers with per-head q/k norms; the output norm named token_embd_norm */
#define F_GLM4MOE (1ull << 36) /* glm4moe: expert_gating_func optional (absent or 0: sigmoid), expert_weights_norm (default false) and
                                * expert_weights_scale read as llama.cpp's graph runs them, exp_probs_b.bias on every MoE layer,
                                * expert_shared_count may be 0 (no shared expert), nextn (MTP) layers last (loaded, not run), a
                                * non-zero rope.dimension_sections (GLM-4.5V's M-RoPE) refused by name */

/* Experts, as llama.cpp's loader and graph for the family have them: with
 * expert_count > 0 every layer is a mixture of experts (softmax over the
 * router's logits, the top expert_used_count renormalized to sum 1, SwiGLU
 * experts), whose width is feed_forward_length (MOE_OPT) or
 * expert_feed_forward_length, else feed_forward_length / expert_used_count
 * (MOE_ALWAYS: the family always has experts). qwen2moe and deepseek do not
 * renormalize (F_MOE_NO_NORM); deepseek's first leading_dense_block_count
 * layers are dense and it reads expert_weights_scale (F_MOE_LEAD). lfm2moe
 * reads expert_gating_func (F_MOE_SEL_BIAS: sigmoid in its files, and a
 * selection bias that moves the choice, not the weights); glm4moe (F_GLM4MOE)
 * reads it too (absent: sigmoid), with the selection bias, and is the one
 * family that reads expert_weights_norm (absent: not renormalized). */
enum moe_kind { MOE_NONE, MOE_OPT, MOE_ALWAYS,
                MOE_OAI,   /* gpt-oss: always; expert_feed_forward_length required; the top k logits, then a softmax over them (no
                            * renormalization); biases; the clamped SwiGLU */
                MOE_ALWAYS_FF }; /* always, of feed_forward_length (olmoe) */

/* Shared experts (ffn_{gate,up,down}_shexp: a dense SwiGLU FFN every token of an MoE layer runs,
 * added to the routed experts' sum), as the family's llama.cpp loader sizes them: none; when
 * expert_shared_feed_forward_length > 0, of that width (granite); always, of that width or else
 * feed_forward_length, times sigmoid(ffn_gate_inp_shexp . x) (qwen2moe); always, expert_shared_count
 * experts' width (deepseek). */
enum shexp_kind { SH_NONE, SH_KEY, SH_GATED, SH_COUNT };

/* Gemma's arithmetic beyond the slots (GeGLU with tanh GELU, embeddings x sqrt(E) in f32, the
 * query scale) and its sliding-window layers and softcaps, as llama.cpp's loader for the family
 * reads them (load_gemma). */
struct gemma_rule {
    uint32_t window;       /* attention.sliding_window's default; 0: window layers only when the key is > 0 */
    uint32_t period;       /* attention.sliding_window_pattern's default (an array there is ignored, as llama.cpp) */
    float base;            /* rope.freq_base_swa's default; 0: rope.freq_base */
    bool scaled;           /* the window layers keep the file's linear RoPE scale (gemma2); else unscaled (gemma3) */
    float attn_cap;        /* attn_logit_softcapping's default, always applied; 0: none (the key is not read) */
    float final_cap;       /* final_logit_softcapping's default, always applied; 0: only when the key is there and nonzero */
    int32_t wide_q_layers; /* at this layer count the query scale is 1/sqrt(E/Hq) (the 27B), else 1/sqrt(D) */
};
/* gemma2: every other layer a window of 4096 at the global RoPE; softcaps 50 and 30 always on */
static const struct gemma_rule k_gemma2 = {4096, 2, 0, true, 50.0f, 30.0f, 46};
/* gemma3 (text): windows only with the key, five layers of six, at base 10000 unscaled; no attention softcap */
static const struct gemma_rule k_gemma3 = {0, 6, 10000.0f, false, 0, 0, 62};
/* gemma4: GeGLU and sqrt(E) as Gemma; its windows, RoPE and scales are its own (load_gemma4); final softcap 30 unless the key says */
static const struct gemma_rule k_gemma4 = {0, 0, 10000.0f, false, 0, 30.0f, 0};

struct family {
    const char *arch;
    enum kvb_rope_type rope;
    uint64_t traits; /* F_* bits; new ones as (1ull << N) */
    uint8_t need[S_COUNT];
    const struct gemma_rule *gemma; /* Gemma's arithmetic and windows, or NULL */
    enum moe_kind moe;
    enum shexp_kind shexp;
};

/* The output norm's tensor: lfm2 names it token_embd_norm (llama.cpp's LLM_TENSOR_OUTPUT_NORM_LFM2). */
static const char *output_norm_name(const struct family *fam) {
    return fam->traits & F_SHORTCONV ? "token_embd_norm.weight" : "output_norm.weight";
}

/* need[]: the order of enum slot */
#define LLAMA_ATTN REQ, REQ, REQ, REQ, OPT, OPT, OPT, OPT, OPT, NO, NO, REQ
#define PLAIN_FFN REQ, REQ, REQ, REQ
static const struct family k_families[] = {
    {"llama", KVB_ROPE_INTERLEAVED, F_ROPE_FREQS | F_FFN_SCALES | F_EXP_SCALES, {LLAMA_ATTN, OPT, NO, PLAIN_FFN, OPT, OPT, OPT, NO}, NULL, MOE_OPT, SH_NONE},
    {"qwen2", KVB_ROPE_NEOX, F_OUTPUT_BIAS, {LLAMA_ATTN, NO, NO, PLAIN_FFN, NO, NO, NO, NO}, NULL, MOE_NONE, SH_NONE},
    {"qwen3", KVB_ROPE_NEOX, F_CLS_HEAD | F_FFN_SCALES, {REQ, REQ, REQ, REQ, OPT, OPT, OPT, OPT, OPT, REQ, REQ, REQ, NO, NO, PLAIN_FFN, NO, NO, NO, NO}, NULL,
     MOE_NONE, SH_NONE},
    /* qwen3 with experts on every layer and no output bias */
    {"qwen3moe", KVB_ROPE_NEOX, F_EXP_SCALES, {REQ, REQ, REQ, REQ, OPT, OPT, OPT, OPT, OPT, REQ, REQ, REQ, NO, NO, PLAIN_FFN, NO, NO, NO, NO}, NULL,
     MOE_ALWAYS, SH_NONE},
    {"granite", KVB_ROPE_INTERLEAVED, F_ROPE_FREQS | F_GRANITE, {LLAMA_ATTN, OPT, NO, PLAIN_FFN, OPT, OPT, OPT, NO}, NULL, MOE_OPT, SH_KEY},
    {"granitemoe", KVB_ROPE_INTERLEAVED, F_ROPE_FREQS | F_GRANITE, {LLAMA_ATTN, OPT, NO, PLAIN_FFN, OPT, OPT, OPT, NO}, NULL, MOE_OPT, SH_KEY},
    /* experts on every layer, not renormalized, beside a gated shared expert; no output or FFN biases, output untied */
    {"qwen2moe", KVB_ROPE_NEOX, F_OUTPUT_REQ | F_MOE_NO_NORM, {LLAMA_ATTN, NO, NO, PLAIN_FFN, NO, NO, NO, NO}, NULL, MOE_ALWAYS, SH_GATED},
    /* OLMoE: olmo2's q/k norms over the whole projection (no biases: its graph applies none) with pre-norms, experts of
     * feed_forward_length on every layer, not renormalized */
    {"olmoe", KVB_ROPE_NEOX, F_QK_WHOLE | F_OUTPUT_REQ | F_NO_QKV_SCALES | F_MOE_NO_NORM,
     {REQ, REQ, REQ, REQ, NO, NO, NO, NO, NO, REQ, REQ, REQ, NO, NO, PLAIN_FFN, NO, NO, NO, NO}, NULL, MOE_ALWAYS_FF, SH_NONE},
    /* DeepSeek-MoE (plain attention, not deepseek2's MLA): dense layers first, then experts (not renormalized, scaled) beside
     * ungated shared ones */
    {"deepseek", KVB_ROPE_INTERLEAVED, F_ROPE_FREQS | F_MOE_NO_NORM | F_MOE_LEAD, {LLAMA_ATTN, NO, NO, PLAIN_FFN, NO, NO, NO, NO}, NULL, MOE_ALWAYS,
     SH_COUNT},
    {"mistral3", KVB_ROPE_INTERLEAVED, F_ROPE_FREQS | F_TEMP, {LLAMA_ATTN, OPT, NO, PLAIN_FFN, OPT, OPT, OPT, NO}, NULL, MOE_OPT, SH_NONE},
    {"smollm3", KVB_ROPE_INTERLEAVED, F_NOPE4, {LLAMA_ATTN, NO, NO, PLAIN_FFN, NO, NO, NO, NO}, NULL, MOE_NONE, SH_NONE},
    {"olmo2", KVB_ROPE_NEOX, F_QK_WHOLE | F_OUTPUT_REQ | F_NO_QKV_SCALES,
     {NO, REQ, REQ, REQ, NO, NO, NO, NO, NO, REQ, REQ, REQ, NO, REQ, NO, REQ, REQ, REQ, NO, NO, NO, REQ}, NULL, MOE_NONE, SH_NONE},
    {"phi3", KVB_ROPE_NEOX, F_FUSED_UP | F_PARTIAL_ROT | F_LONGROPE | F_SWA_IGNORED,
     {REQ, OPT, OPT, OPT, OPT, OPT, OPT, OPT, OPT, NO, NO, REQ, NO, NO, REQ, NO, REQ, REQ, NO, NO, NO, NO}, NULL, MOE_NONE, SH_NONE},
    /* experts with biases and the clamped SwiGLU, sinks, windows on even layers; the FFN's norm named post_attention_norm */
    {"gpt-oss", KVB_ROPE_NEOX, F_OUTPUT_REQ | F_EXP_BIASES | F_FFN_NORM_AS_POST | F_SINKS | F_OAI_WINDOWS,
     {REQ, OPT, OPT, OPT, OPT, OPT, OPT, OPT, OPT, NO, NO, REQ, REQ, REQ, NO, REQ, REQ, REQ, NO, NO, NO, NO}, NULL, MOE_OAI, SH_NONE},
    /* pre and post norms around both blocks; output always tied */
    {"gemma2", KVB_ROPE_NEOX, F_TIED_ALWAYS, {LLAMA_ATTN, NO, REQ, PLAIN_FFN, NO, NO, NO, REQ}, &k_gemma2, MOE_NONE, SH_NONE},
    /* as gemma2 with q/k norms per head, and output.weight allowed */
    {"gemma3", KVB_ROPE_NEOX, 0, {REQ, REQ, REQ, REQ, OPT, OPT, OPT, OPT, OPT, REQ, REQ, REQ, NO, REQ, PLAIN_FFN, NO, NO, NO, REQ}, &k_gemma3, MOE_NONE, SH_NONE},
    /* Qwen3.5: Gated DeltaNet layers (the ssm_* slots, bind_ssm) and, every full_attention_interval-th, gated attention with
     * per-head q/k norms and partial (multi-section) RoPE; the FFN's norm named post_attention_norm; no biases */
    {"qwen35", KVB_ROPE_NEOX, F_PARTIAL_ROT | F_FFN_NORM_AS_POST | F_HYBRID | F_FFN_SCALES,
     {REQ, REQ, REQ, REQ, NO, NO, NO, NO, NO, REQ, REQ, REQ, NO, REQ, NO, REQ, REQ, REQ, NO, NO, NO, NO}, NULL, MOE_NONE, SH_NONE},
    /* Qwen3.5/3.6 MoE: the same layers with experts on every one (softmax, the top k renormalized: llama.cpp's build_moe_ffn
     * call, which reads neither expert_gating_func nor expert_weights_norm) beside a sigmoid-gated shared expert */
    {"qwen35moe", KVB_ROPE_NEOX, F_PARTIAL_ROT | F_FFN_NORM_AS_POST | F_HYBRID | F_FFN_SCALES | F_EXP_SCALES | F_FF_OPT | F_GATE_UP_EXPS,
     {REQ, REQ, REQ, REQ, NO, NO, NO, NO, NO, REQ, REQ, REQ, NO, REQ, NO, REQ, REQ, REQ, NO, NO, NO, NO}, NULL, MOE_ALWAYS, SH_GATED},
    /* Gemma 4: gemma3's layer with attn_v optional (V from the raw K projection), global layers' proportional RoPE through
     * rope_freqs, and the rest of F_GEMMA4; KV-shared layers' attn_k/attn_k_norm optional and unused (bind_layer) */
    {"gemma4", KVB_ROPE_NEOX, F_GEMMA4 | F_PARTIAL_ROT | F_ROPE_FREQS | F_FFN_SCALES | F_EXP_SCALES | F_GATE_UP_EXPS,
     {REQ, REQ, REQ, OPT, NO, NO, NO, NO, NO, REQ, REQ, REQ, NO, REQ, PLAIN_FFN, NO, NO, NO, REQ}, &k_gemma4, MOE_NONE, SH_NONE},
    /* Granite 4.0-H: granite's scales and attention (biases optional; no RoPE when rope.scaling.finetuned is false), Mamba-2
     * layers where head_count_kv is 0, a dense SwiGLU FFN (biases optional) or granitemoe's experts and shared expert */
    {"granitehybrid", KVB_ROPE_INTERLEAVED, F_ROPE_FREQS | F_GRANITE | F_MAMBA2, {LLAMA_ATTN, OPT, NO, PLAIN_FFN, OPT, OPT, OPT, NO}, NULL, MOE_OPT,
     SH_KEY},
    /* Nemotron-H: Mamba-2, attention (no RoPE, biases optional) and squared-ReLU FFN blocks (bind_nemotron) */
    {"nemotron_h", KVB_ROPE_NONE, F_MAMBA2 | F_NEMOTRON, {REQ, REQ, REQ, REQ, OPT, OPT, OPT, OPT, OPT, NO, NO, REQ, OPT, NO, NO, NO, REQ, REQ, NO, OPT, OPT, NO},
     NULL, MOE_NONE, SH_NONE},
    /* Nemotron-H MoE (Nemotron 3 Nano): nemotron_h's blocks, the FFN blocks experts when expert_count > 0: squared-ReLU experts
     * without a gate, sigmoid routing with the selection bias exp_probs_b, expert_weights_norm and expert_weights_scale as the
     * keys say, an ungated squared-ReLU shared expert; the latent projections (ffn_latent_down/up) not implemented (refused by
     * name as unused) */
    {"nemotron_h_moe", KVB_ROPE_NONE, F_MAMBA2 | F_NEMOTRON | F_EXP_SCALES,
     {REQ, REQ, REQ, REQ, OPT, OPT, OPT, OPT, OPT, NO, NO, REQ, OPT, NO, NO, NO, REQ, REQ, NO, OPT, OPT, NO}, NULL, MOE_OPT, SH_KEY},
    /* LFM2: short-conv layers (bind_shortconv) and attention layers with per-head q/k norms, q/k/v biases or a fused attn_qkv
     * optional (llama.cpp's create_tensor_qkv); q/k/v/o scales applied, the FFN's loaded unused (its graph passes none) */
    {"lfm2", KVB_ROPE_NEOX, F_SHORTCONV, {REQ, REQ, REQ, REQ, OPT, OPT, OPT, OPT, OPT, REQ, REQ, REQ, NO, NO, PLAIN_FFN, NO, NO, NO, NO}, NULL,
     MOE_NONE, SH_NONE},
    /* LFM2-MoE: lfm2's layers, the first leading_dense_block_count FFNs dense, the others experts (expert_gating_func: sigmoid in
     * LFM2-8B-A1B; the top k by probability plus exp_probs_b, weighed by the unbiased probabilities renormalized; no shared
     * experts), the experts' .scale tensors loaded unused (its build_moe_ffn call passes none) */
    {"lfm2moe", KVB_ROPE_NEOX, F_SHORTCONV | F_MOE_LEAD | F_MOE_SEL_BIAS,
     {REQ, REQ, REQ, REQ, OPT, OPT, OPT, OPT, OPT, REQ, REQ, REQ, NO, NO, PLAIN_FFN, NO, NO, NO, NO}, NULL, MOE_ALWAYS, SH_NONE},
    /* GLM-4.5/4.6/4.5-Air: partial NEOX RoPE (rope.dimension_count of the head), q/k/v biases (optional, or a fused attn_qkv),
     * per-head q/k norms when present (the 355B), the FFN's norm named post_attention_norm; the first leading_dense_block_count
     * FFNs dense, then experts (sigmoid, exp_probs_b in the choice, expert_weights_norm/scale) beside expert_shared_count shared
     * experts; the last nextn_predict_layers blocks are MTP layers (loaded, not run). q/k/v/o .scale applied (its build_qkv and
     * build_attn pass them), the FFN's and experts' loaded unused (its build_ffn/build_moe_ffn calls pass none) */
    {"glm4moe", KVB_ROPE_NEOX, F_PARTIAL_ROT | F_FFN_NORM_AS_POST | F_MOE_LEAD | F_GLM4MOE,
     {REQ, REQ, REQ, REQ, OPT, OPT, OPT, OPT, OPT, OPT, OPT, REQ, NO, REQ, NO, REQ, REQ, REQ, NO, NO, NO, NO}, NULL, MOE_ALWAYS, SH_COUNT},
    /* DeepSeek-V2/V3/R1, Kimi-K2: latent attention (bind_mla; the slots' attention weights unused), partial RoPE (rope_dims of
     * the row), the first leading_dense_block_count FFNs dense, then routed experts (softmax or sigmoid, the selection bias,
     * group-limited top-k, expert_weights_norm and _scale as its build_moe_ffn call) beside expert_shared_count shared ones;
     * attention.sliding_window is not read by llama.cpp's deepseek2 (its test files carry one): ignored as there */
    {"deepseek2", KVB_ROPE_INTERLEAVED, F_MLA | F_PARTIAL_ROT | F_MOE_LEAD | F_SWA_IGNORED | F_GATE_UP_EXPS,
     {REQ, NO, NO, NO, NO, NO, NO, NO, NO, NO, NO, NO, NO, NO, PLAIN_FFN, NO, NO, NO, NO}, NULL, MOE_ALWAYS, SH_COUNT},
};
#undef LLAMA_ATTN
#undef PLAIN_FFN

const char *kvb_family_names(void) {
    return "llama, qwen2, qwen3, qwen3moe, granite, granitemoe, mistral3, smollm3, olmo2, phi3, gemma2, gemma3, gpt-oss, qwen2moe, deepseek, olmoe, "
           "qwen35, qwen35moe, gemma4, lfm2, lfm2moe, glm4moe, deepseek2, granitehybrid, nemotron_h, nemotron_h_moe";
}

static const struct family *find_family(struct gguf_str a) {
    for (size_t i = 0; i < sizeof k_families / sizeof k_families[0]; i++)
        if (kvb_gguf_str_eq(a, k_families[i].arch)) return &k_families[i];
    return NULL;
}

static const struct family *family_of(const char *arch) { return find_family((struct gguf_str){arch, strlen(arch)}); }

void kvb_model_neutral(struct kvb_model *m) {
    m->act = KVB_FFN_SILU;
    m->qk_norm_whole = false;
    m->embd_scale = m->residual_scale = m->q_scale = m->rope_mscale = m->logit_scale = m->output_scale = 1.0f;
    m->final_softcap = m->attn_softcap = 0;
    m->rope_base_swa = 0;
    m->rope_freq_scale_swa = 1.0f;
    m->temp_beta = 0;
    m->temp_floor = 0;
    m->moe_gating = KVB_MOE_SOFTMAX;
    m->moe_norm = true;
    m->moe_scale = 1.0f;
    m->moe_groups = m->moe_groups_used = 0;
    m->mla_q_scale = 1.0f;
}

bool kvb_model_no_rope_matches(const struct kvb_model *m, const uint8_t *no_rope) {
    for (int32_t l = 0; l < m->info.n_layer; l++)
        if ((m->no_rope ? m->no_rope[l] : 0) != (no_rope ? no_rope[l] : 0)) return false;
    return true;
}

static kvb_status family_nope4(struct kvb_model *m) {
    uint8_t *no = kvb_calloc((size_t)m->info.n_layer, 1);
    if (!no) return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", m->path);
    for (int32_t l = 0; l < m->info.n_layer; l++) no[l] = (l + 1) % 4 == 0;
    kvb_free(m->no_rope);
    m->no_rope = no;
    return KVB_OK;
}

void kvb_layers_neutral(struct kvb_layer *layers, int32_t n) {
    for (int32_t l = 0; l < n; l++) {
        struct kvb_layer *L = &layers[l];
        L->s_q = L->s_k = L->s_v = L->s_o = L->s_gate = L->s_up = L->s_down = 1.0f;
        L->out_scale = L->s_ssm_in = L->s_ssm_out = 1.0f;
    }
}

kvb_status kvb_family_traits(struct kvb_model *m, bool *fused_up) {
    const struct family *fam = family_of(m->info.arch);
    if (!fam) return kvb_fail(KVB_ERR_UNSUPPORTED, "architecture '%s' is not supported (%s)", m->info.arch, kvb_family_names());
    struct kvb_model_info *in = &m->info;
    in->rope_type = fam->rope;
    m->qk_norm_whole = (fam->traits & F_QK_WHOLE) != 0;
    m->q_gate = (fam->traits & F_HYBRID) != 0;
    m->info.attn_gated = m->q_gate; /* the forward pass sizes its query buffers by it */
    if (fused_up) *fused_up = (fam->traits & F_FUSED_UP) != 0;
    if (fam->gemma) {
        m->act = KVB_FFN_GELU_TANH;
        m->embd_scale = sqrtf((float)in->n_embd);
        /* the query scale (q *= f, scores unscaled): 1/sqrt(E/Hq) for the 27B, by its layer count
         * (E/Hq in integers, as llama.cpp), else 1/sqrt(D); the cache scales by 1/sqrt(D) itself */
        const float f = in->n_layer == fam->gemma->wide_q_layers ? 1.0f / sqrtf((float)(in->n_embd / in->n_head))
                                                                  : 1.0f / sqrtf((float)in->head_dim);
        m->q_scale = f * sqrtf((float)in->head_dim);
        /* the keys' defaults (the loader reads the keys over them, load_gemma) */
        m->attn_softcap = fam->gemma->attn_cap;
        m->final_softcap = fam->gemma->final_cap;
        m->rope_base_swa = fam->gemma->base ? fam->gemma->base : in->rope_base;
        m->rope_freq_scale_swa = fam->gemma->scaled ? in->rope_freq_scale : 1.0f;
        kvb_status st = kvb_family_windows(m, (int32_t)fam->gemma->window, fam->gemma->period);
        if (st != KVB_OK) return st;
    }
    if (fam->traits & F_GEMMA4) { /* attention scale 1: the cache divides by sqrt(D), D the global (padded) head size */
        m->q_scale = sqrtf((float)in->head_dim);
        m->v_norm = true;
    }
    if (fam->moe == MOE_OAI) { /* llama.cpp's build_moe_ffn as openai-moe calls it */
        m->moe_gating = KVB_MOE_SOFTMAX_WEIGHT;
        m->moe_norm = false;
        m->act = KVB_FFN_SWIGLU_OAI;
    }
    if (fam->traits & F_MOE_NO_NORM) m->moe_norm = false;
    if (fam->traits & F_MOE_SEL_BIAS) m->moe_gating = KVB_MOE_SIGMOID; /* LFM2-8B-A1B's; the loader reads the key over it */
    if (fam->traits & F_GLM4MOE) { /* llama.cpp's defaults for glm4moe; the loader reads the keys over them */
        m->moe_gating = KVB_MOE_SIGMOID;
        m->moe_norm = false;
    }
    return fam->traits & F_NOPE4 ? family_nope4(m) : KVB_OK;
}

kvb_status kvb_family_windows(struct kvb_model *m, int32_t window, uint32_t period) {
    struct kvb_model_info *in = &m->info;
    kvb_free(m->swa_layers);
    m->swa_layers = NULL;
    in->sliding_window = in->n_swa_layers = 0;
    m->swa_period = period;
    if (window <= 0) return KVB_OK;
    int32_t n = 0;
    for (int32_t l = 0; l < in->n_layer; l++) n += period == 0 || (uint32_t)l % period < period - 1;
    in->sliding_window = window;
    if (!n) return KVB_OK;
    if (!(m->swa_layers = kvb_calloc((size_t)n, sizeof *m->swa_layers))) return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", m->path);
    for (int32_t l = 0; l < in->n_layer; l++)
        if (period == 0 || (uint32_t)l % period < period - 1) {
            struct kvb_kv_layer *w = &m->swa_layers[in->n_swa_layers++];
            w->layer = l;
            w->policy = kvb_policy_default_params(KVB_POLICY_WINDOW);
            w->policy.n_sink = 0;
            w->policy.budget = window;
        }
    return KVB_OK;
}

int32_t kvb_layer_head_dim(const struct kvb_model *m, int32_t l) {
    return m->swa_mask && l < m->info.n_layer && m->swa_mask[l] && m->head_dim_swa ? m->head_dim_swa : m->info.head_dim;
}

int32_t kvb_layer_n_kv(const struct kvb_model *m, int32_t l) {
    return m->n_kv_layer && l < m->info.n_layer ? m->n_kv_layer[l] : m->info.n_head_kv;
}

bool kvb_layer_holds_kv(const struct kvb_model *m, int32_t l) {
    return !(m->recurrent && m->recurrent[l]) && !(m->kv_source && m->kv_source[l] >= 0);
}

int32_t kvb_layer_n_ff(const struct kvb_model *m, int32_t l) {
    return m->n_ff_layer && l < m->info.n_layer ? m->n_ff_layer[l] : m->info.n_ff;
}

kvb_status kvb_family_gemma4(struct kvb_model *m, int32_t window) {
    struct kvb_model_info *in = &m->info;
    const int32_t L = in->n_layer, shared = m->n_kv_shared, n_kv = L - shared;
    if (!m->swa_mask) return kvb_fail(KVB_ERR_INVALID, "%s: gemma4 needs its window pattern", m->path);
    if (shared < 0 || shared >= L)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: gemma4: shared_kv_layers = %d must be below the %d layers", m->path, (int)shared, (int)L);
    if (shared > 0 && (n_kv < 2 || m->swa_mask[n_kv - 1] || !m->swa_mask[n_kv - 2])) /* llama.cpp asserts both (its KV reuse per kind) */
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: gemma4: shared_kv_layers = %d: the shared layers read layer %d (window) and %d (global), which must be "
                                             "a window layer and a global one (as llama.cpp asserts); here they are %s and %s", m->path, (int)shared,
                        (int)n_kv - 2, (int)n_kv - 1, n_kv >= 2 && m->swa_mask[n_kv - 2] ? "window" : "global",
                        n_kv >= 1 && m->swa_mask[n_kv - 1] ? "window" : "global");
    int32_t n = 0;
    for (int32_t l = 0; l < L; l++) n += m->swa_mask[l] != 0;
    if (n && window <= 0) return kvb_fail(KVB_ERR_CORRUPT, "%s: gemma4: %d window layers with a window of %d tokens", m->path, (int)n, (int)window);
    int32_t *src = shared ? kvb_malloc(sizeof(int32_t) * (size_t)L) : NULL;
    struct kvb_kv_layer *w = n ? kvb_calloc((size_t)n, sizeof *w) : NULL;
    if ((shared && !src) || (n && !w)) {
        kvb_free(src);
        kvb_free(w);
        return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", m->path);
    }
    for (int32_t l = 0; src && l < L; l++) src[l] = l < n_kv ? -1 : m->swa_mask[l] ? n_kv - 2 : n_kv - 1;
    in->n_head_kv_swa = in->n_head_kv_global = 0;
    for (int32_t l = 0; m->n_kv_layer && l < L; l++) { /* per-layer KV heads: a reader has its source's */
        int32_t *h = m->swa_mask[l] ? &in->n_head_kv_swa : &in->n_head_kv_global;
        *h = KVB_MAX(*h, m->n_kv_layer[l]);
        const int32_t s = src ? src[l] : -1;
        if (s >= 0 && m->n_kv_layer[l] != m->n_kv_layer[s]) {
            kvb_free(src);
            kvb_free(w);
            return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: gemma4: head_count_kv of KV-shared layer %d (%d) differs from its source layer %d's (%d)",
                            m->path, (int)l, (int)m->n_kv_layer[l], (int)s, (int)m->n_kv_layer[s]);
        }
    }
    n = 0;
    for (int32_t l = 0; l < L; l++)
        if (m->swa_mask[l]) {
            w[n].layer = l;
            w[n].policy = kvb_policy_default_params(KVB_POLICY_WINDOW);
            w[n].policy.n_sink = 0;
            w[n++].policy.budget = window;
        }
    kvb_free(m->kv_source);
    m->kv_source = src;
    kvb_free(m->swa_layers);
    m->swa_layers = w;
    m->swa_period = 0;
    in->sliding_window = n ? window : 0;
    in->n_swa_layers = n;
    in->n_kv_shared = shared;
    in->n_kv_shared_swa = 0;
    for (int32_t l = n_kv; l < L; l++) in->n_kv_shared_swa += m->swa_mask[l] != 0;
    return KVB_OK;
}

/* ---- keys ---- */

struct keys {
    const struct gguf_file *f;
    const char *arch;
    char key[128];
};

static const char *K(struct keys *k, const char *suffix) {
    snprintf(k->key, sizeof k->key, "%s.%s", k->arch, suffix);
    return k->key;
}

/* An optional u32 in lo..hi: KVB_OK (set), KVB_ERR_INVALID (absent, *v untouched), or an error. */
static kvb_status opt_u32(struct keys *k, const char *suffix, uint32_t *v, uint32_t lo, uint32_t hi) {
    const char *key = K(k, suffix);
    const struct gguf_kv *kv = kvb_gguf_find(k->f, key);
    if (!kv) return KVB_ERR_INVALID;
    if (kv->type == GGUF_T_ARRAY)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' is a per-layer array; kvbound needs one value for every layer", k->f->path, key);
    kvb_status st = kvb_gguf_get_u32(k->f, key, v, true);
    if (st != KVB_OK) return st;
    if (*v < lo || *v > hi) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %u is out of range %u..%u", k->f->path, key, *v, lo, hi);
    return KVB_OK;
}

static kvb_status req_u32(struct keys *k, const char *suffix, uint32_t *v, uint32_t lo, uint32_t hi) {
    kvb_status st = opt_u32(k, suffix, v, lo, hi);
    if (st == KVB_ERR_INVALID) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' is missing", k->f->path, k->key);
    return st;
}

/* An optional finite float; absent: *v untouched. */
static kvb_status opt_f32(struct keys *k, const char *suffix, float *v) {
    const char *key = K(k, suffix);
    kvb_status st = kvb_gguf_get_f32(k->f, key, v, false);
    if (st == KVB_ERR_INVALID) return KVB_OK;
    if (st != KVB_OK) return st;
    if (!isfinite(*v)) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' is not finite", k->f->path, key);
    return KVB_OK;
}

/* A per-layer u32 key (gemma4): an array of n_layer integers (u32, i32 or bool), or a scalar for
 * every layer (as llama.cpp's get_key_or_arr); values in lo..hi into v[n_layer]. KVB_ERR_INVALID: absent. */
static kvb_status layer_u32s(struct keys *k, const char *suffix, int32_t n_layer, uint32_t lo, uint32_t hi, uint32_t *v) {
    const char *key = K(k, suffix);
    const struct gguf_kv *kv = kvb_gguf_find(k->f, key);
    if (!kv) return KVB_ERR_INVALID;
    kvb_status st;
    if (kv->type == GGUF_T_ARRAY) {
        const uint32_t t = kv->v.arr.type;
        if (t != GGUF_T_UINT32 && t != GGUF_T_INT32 && t != GGUF_T_BOOL)
            return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' must be an array of integers or bools", k->f->path, key);
        uint64_t n;
        const uint8_t *d;
        if ((st = kvb_gguf_get_arr(k->f, key, t, &n, &d, true)) != KVB_OK) return st;
        if (n != (uint64_t)n_layer)
            return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' has %llu values for %d layers", k->f->path, key, (unsigned long long)n, (int)n_layer);
        for (int32_t l = 0; l < n_layer; l++) {
            if (t == GGUF_T_BOOL) v[l] = d[l] != 0;
            else memcpy(&v[l], d + 4 * (size_t)l, 4);
        }
    } else if (kv->type == GGUF_T_BOOL) {
        bool b;
        if ((st = kvb_gguf_get_bool(k->f, key, &b, true)) != KVB_OK) return st;
        for (int32_t l = 0; l < n_layer; l++) v[l] = b;
    } else {
        uint32_t x;
        if ((st = kvb_gguf_get_u32(k->f, key, &x, true)) != KVB_OK) return st;
        for (int32_t l = 0; l < n_layer; l++) v[l] = x;
    }
    for (int32_t l = 0; l < n_layer; l++)
        if (v[l] < lo || v[l] > hi)
            return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %u (layer %d) is out of range %u..%u", k->f->path, key, v[l], (int)l, lo, hi);
    return KVB_OK;
}

/* gemma4's head counts: one value for every layer, or an array of n_layer. per_layer NULL: the
 * values must all be one (head_count: a per-layer query head count is not implemented); else
 * *per_layer gets the array where the values differ (NULL where they are one), *out the largest. */
static kvb_status gemma4_heads(struct keys *k, const char *suffix, int32_t n_layer, uint32_t *out, int32_t **per_layer) {
    uint32_t *v = kvb_malloc(sizeof(uint32_t) * (size_t)n_layer);
    if (!v) return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", k->f->path);
    kvb_status st = layer_u32s(k, suffix, n_layer, 1, 1024, v);
    bool same = true;
    uint32_t mx = st == KVB_OK ? v[0] : 0;
    for (int32_t l = 1; st == KVB_OK && l < n_layer; l++) {
        same = same && v[l] == v[0];
        mx = v[l] > mx ? v[l] : mx;
    }
    if (st == KVB_OK && !same && !per_layer)
        st = kvb_fail(KVB_ERR_UNSUPPORTED, "%s: %s: %s per layer (%u on layer 0, differing on others) is not implemented", k->f->path, k->arch, k->key, v[0]);
    if (st == KVB_OK && !same) {
        if (!(*per_layer = kvb_malloc(sizeof(int32_t) * (size_t)n_layer))) st = kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", k->f->path);
        for (int32_t l = 0; st == KVB_OK && l < n_layer; l++) (*per_layer)[l] = (int32_t)v[l];
    }
    if (st == KVB_OK) *out = mx;
    kvb_free(v);
    return st;
}

/* lfm2's layer kinds, as llama.cpp's loader: a layer whose head_count_kv (one value, or an array of
 * n_layer) is 0 is a short-conv layer (m->recurrent), the others attention layers, which must all have
 * one KV head count (per-layer counts among attention layers are not implemented). head_count (one
 * value or an array: llama.cpp's model saver writes one, 0 on the conv layers) must be one value on
 * the attention layers, and that or 0 on the conv layers. */
static kvb_status shortconv_layers(struct keys *k, struct kvb_model *m) {
    struct kvb_model_info *in = &m->info;
    const int32_t L = in->n_layer;
    uint32_t *v = kvb_malloc(sizeof(uint32_t) * (size_t)L), *hq = kvb_malloc(sizeof(uint32_t) * (size_t)L);
    uint8_t *rec = kvb_calloc((size_t)L, 1);
    kvb_status st = v && hq && rec ? layer_u32s(k, "attention.head_count_kv", L, 0, 1024, v) : kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", k->f->path);
    if (st == KVB_ERR_INVALID) st = kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' is missing (%s marks its recurrent layers by 0 there)", k->f->path, k->key, k->arch);
    uint32_t kv = 0;
    for (int32_t l = 0; st == KVB_OK && l < L; l++) {
        rec[l] = v[l] == 0;
        if (v[l] && kv && v[l] != kv)
            st = kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s': attention layers with %u and %u KV heads (layer %d); per-layer KV head counts on %s are "
                                               "not implemented", k->f->path, k->key, kv, v[l], (int)l, k->arch);
        if (v[l]) kv = v[l];
    }
    if (st == KVB_OK && !kv)
        st = kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' is 0 on every layer: a model of recurrent layers only (no attention layer) is not implemented",
                      k->f->path, k->key);
    if (st == KVB_OK && (st = layer_u32s(k, "attention.head_count", L, 0, 1024, hq)) == KVB_ERR_INVALID)
        st = kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' is missing", k->f->path, k->key);
    uint32_t h = 0;
    for (int32_t l = 0; st == KVB_OK && l < L; l++) {
        if (!rec[l] && !hq[l])
            st = kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' is 0 on attention layer %d", k->f->path, k->key, (int)l);
        else if (hq[l] && h && hq[l] != h)
            st = kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s': %u and %u query heads (layer %d); per-layer head counts on %s are not implemented",
                          k->f->path, k->key, h, hq[l], (int)l, k->arch);
        if (hq[l]) h = hq[l];
    }
    kvb_free(v);
    kvb_free(hq);
    if (st == KVB_OK) in->n_head = (int32_t)h;
    if (st != KVB_OK) {
        kvb_free(rec);
        return st;
    }
    in->n_head_kv = (int32_t)kv;
    kvb_free(m->recurrent);
    m->recurrent = rec;
    return KVB_OK;
}

/* nemotron_h's blocks (llama.cpp's rule): feed_forward_length > 0 an FFN-only block, else head_count_kv 0 a Mamba-2 block,
 * else attention (per-layer arrays, or one value). Each Mamba-2 or attention block starts a layer; an FFN block is the FFN of
 * the layer before it (x += ffn(rms(x, its attn_norm)), as a layer's FFN block): an FFN block first or after another FFN
 * block is refused. The attention blocks share one head count and KV head count, the FFN blocks one width. Sets
 * m->file_layer, n_file_layers, recurrent and the info's n_layer (the layers), heads and n_ff. */
static kvb_status nemotron_layers(struct keys *k, struct kvb_model *m) {
    struct kvb_model_info *in = &m->info;
    const int32_t Lf = in->n_layer;
    uint32_t *kv = kvb_malloc(sizeof(uint32_t) * (size_t)Lf), *hq = kvb_malloc(sizeof(uint32_t) * (size_t)Lf), *ff = kvb_malloc(sizeof(uint32_t) * (size_t)Lf);
    int32_t *map = kvb_malloc(sizeof(int32_t) * 2 * (size_t)Lf);
    uint8_t *rec = kvb_calloc((size_t)Lf, 1);
    kvb_status st = kv && hq && ff && map && rec ? KVB_OK : kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", k->f->path);
    const char *keys[3] = {"attention.head_count_kv", "attention.head_count", "feed_forward_length"};
    uint32_t *arr[3] = {kv, hq, ff};
    for (int i = 0; st == KVB_OK && i < 3; i++)
        if ((st = layer_u32s(k, keys[i], Lf, 0, i == 2 ? 1u << 20 : 1024, arr[i])) == KVB_ERR_INVALID)
            st = kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' is missing", k->f->path, k->key);
    int32_t n = 0;
    uint32_t H = 0, HK = 0, F = 0;
    for (int32_t l = 0; st == KVB_OK && l < Lf; l++) {
        if (ff[l] > 0) { /* an FFN block: the FFN of the layer before it */
            if (!n || map[2 * (n - 1) + 1] >= 0)
                st = kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s': block %d is an FFN block %s; kvbound runs an FFN block as the FFN of the Mamba-2 or "
                                                   "attention block before it (not implemented otherwise)", k->f->path, K(k, "feed_forward_length"), (int)l,
                              n ? "after another FFN block" : "first");
            else if (F && ff[l] != F)
                st = kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s': FFN blocks of %u and %u (block %d); per-block FFN widths are not implemented", k->f->path,
                              K(k, "feed_forward_length"), F, ff[l], (int)l);
            else map[2 * (n - 1) + 1] = l, F = ff[l];
            continue;
        }
        map[2 * n] = l;
        map[2 * n + 1] = -1;
        rec[n] = kv[l] == 0;
        if (kv[l]) {
            if (!hq[l] || (HK && (kv[l] != HK || hq[l] != H)))
                st = kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s': attention block %d has %u query and %u KV heads (others %u and %u); per-block head counts "
                                                   "are not implemented", k->f->path, K(k, "attention.head_count_kv"), (int)l, hq[l], kv[l], H, HK);
            H = hq[l], HK = kv[l];
        }
        n++;
    }
    if (st == KVB_OK && !HK)
        st = kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s': no attention block; a model of Mamba-2 blocks only is not implemented", k->f->path,
                      K(k, "attention.head_count_kv"));
    kvb_free(kv); kvb_free(hq); kvb_free(ff);
    if (st != KVB_OK) {
        kvb_free(map); kvb_free(rec);
        return st;
    }
    kvb_free(m->recurrent);
    kvb_free(m->file_layer);
    m->recurrent = rec;
    m->file_layer = map;
    m->n_file_layers = Lf;
    in->n_layer = n;
    in->n_head = (int32_t)H;
    in->n_head_kv = (int32_t)HK;
    in->n_ff = (int32_t)F;
    return KVB_OK;
}

static double mscale_of(double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * log(s) + 1.0; }

/* YaRN's per-pair divisors over ff (or 1) and its magnitude, as ggml's rope
 * with ext_factor 1: corr dims from the original context and the betas. */
kvb_status kvb_family_yarn(struct kvb_model *m, const float *ff, float fs, int32_t orig, float beta_fast, float beta_slow, bool has_log_mul,
                       float log_mul) {
    const struct kvb_model_info *in = &m->info;
    const int32_t R = in->rope_dims, P = R / 2;
    float *div = kvb_malloc(sizeof(float) * (size_t)KVB_MAX(P, 1));
    if (!div) return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory for the YaRN factors", m->path);
    const float base = in->rope_base;
    const float lo_f = (float)R * logf((float)orig / (beta_fast * 2.0f * 3.14159265358979f)) / (2.0f * logf(base));
    const float hi_f = (float)R * logf((float)orig / (beta_slow * 2.0f * 3.14159265358979f)) / (2.0f * logf(base));
    const float lo = fmaxf(0.0f, floorf(lo_f)), hi = fminf((float)(R - 1), ceilf(hi_f));
    for (int32_t i = 0; i < P; i++) {
        const float y = ((float)i - lo) / fmaxf(0.001f, hi - lo);
        const float mix = 1.0f - fminf(1.0f, fmaxf(0.0f, y));
        div[i] = (ff ? ff[i] : 1.0f) / (fs * (1.0f - mix) + mix);
        if (!isfinite(div[i]) || div[i] == 0) {
            kvb_free(div);
            return kvb_fail(KVB_ERR_CORRUPT, "%s: YaRN gives pair %d no finite frequency (factor %g, original context %d)", m->path, (int)i,
                            (double)(1.0f / fs), (int)orig);
        }
    }
    const double f = 1.0 / (double)fs;
    m->yarn_factor = (float)f;
    m->yarn_beta_fast = beta_fast;
    m->yarn_beta_slow = beta_slow;
    m->yarn_log_mul = has_log_mul ? log_mul : 0;
    m->yarn_attn_factor = m->rope_mscale;
    m->rope_freqs_file = ff;
    m->rope_mscale *= (float)(has_log_mul ? mscale_of(f, 1.0) / mscale_of(f, log_mul) : mscale_of(f, 1.0));
    m->rope_freqs = div;
    m->owned = div;
    m->info.rope_freq_scale = 1.0f; /* now in the divisors */
    return KVB_OK;
}

/* The experts' count, how many a token uses, their width (enum moe_kind),
 * the shared experts' width (enum shexp_kind) and the leading dense layers. */
static kvb_status load_experts(struct keys *k, const struct family *fam, struct kvb_model_info *in) {
    uint32_t n = 0, used = 0, ff = 0, shff = 0, lead = 0;
    kvb_status st = opt_u32(k, "expert_count", &n, 0, 512); /* llama.cpp's bound */
    if (st != KVB_OK && st != KVB_ERR_INVALID) return st;
    if (n == 0 && fam->moe >= MOE_ALWAYS)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' is missing or 0: '%s' is a mixture of experts", k->f->path, K(k, "expert_count"), k->arch);
    if (n == 0) return KVB_OK;
    if (fam->traits & F_GEMMA4) { /* the 26B-A4B: every layer's experts beside its dense FFN, of expert_feed_forward_length */
        if ((st = req_u32(k, "expert_used_count", &used, 1, n)) != KVB_OK) return st;
        if ((st = req_u32(k, "expert_feed_forward_length", &ff, 1, 1u << 20)) != KVB_OK) return st;
        in->n_expert = (int32_t)n;
        in->n_expert_used = (int32_t)used;
        in->n_ff_exp = (int32_t)ff;
        in->n_ff_shexp = 0;
        in->n_moe_layers = in->n_layer;
        return KVB_OK;
    }
    if (fam->moe == MOE_NONE)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = %u: '%s' has no experts (as in llama.cpp); the families with experts are llama, "
                                             "qwen3moe, qwen2moe, deepseek, olmoe, granite, granitemoe, mistral3, gpt-oss, qwen35moe, gemma4, lfm2moe, glm4moe and deepseek2", k->f->path, k->key, n, k->arch);
    if ((st = req_u32(k, "expert_used_count", &used, 1, n)) != KVB_OK) return st;
    if ((fam->moe == MOE_OAI || (fam->traits & F_MOE_LEAD)) && (st = req_u32(k, "expert_feed_forward_length", &ff, 1, 1u << 20)) != KVB_OK) return st;
    if (fam->moe == MOE_ALWAYS && (st = opt_u32(k, "expert_feed_forward_length", &ff, 0, 1u << 20)) != KVB_OK && st != KVB_ERR_INVALID) return st;
    if ((fam->traits & F_NEMOTRON) && (st = opt_u32(k, "expert_feed_forward_length", &ff, 0, 1u << 20)) != KVB_OK && st != KVB_ERR_INVALID) return st;
    if (fam->traits & F_NEMOTRON) {
        if (ff == 0) ff = (uint32_t)in->n_ff / used; /* llama.cpp's default */
    } else if (fam->moe == MOE_OPT || fam->moe == MOE_ALWAYS_FF) ff = (uint32_t)in->n_ff;
    else if (ff == 0) ff = (uint32_t)in->n_ff / used;
    if (ff == 0) return kvb_fail(KVB_ERR_CORRUPT, "%s: the experts of '%s' have no width (feed_forward_length %d over %u experts used)", k->f->path,
                                 k->arch, (int)in->n_ff, used);
    if (fam->shexp == SH_KEY || fam->shexp == SH_GATED) {
        if ((st = opt_u32(k, "expert_shared_feed_forward_length", &shff, 0, 1u << 20)) != KVB_OK && st != KVB_ERR_INVALID) return st;
        if (fam->shexp == SH_GATED && shff == 0) shff = (uint32_t)in->n_ff; /* llama.cpp's default there */
        if (fam->shexp == SH_GATED && shff == 0)
            return kvb_fail(KVB_ERR_CORRUPT, "%s: the shared expert of '%s' has no width (neither '%s' nor feed_forward_length)", k->f->path, k->arch,
                            K(k, "expert_shared_feed_forward_length"));
    } else if (fam->shexp == SH_COUNT) {
        uint32_t count;
        /* glm4moe: 0 is no shared expert (llama.cpp creates none then) */
        if ((st = req_u32(k, "expert_shared_count", &count, fam->traits & F_GLM4MOE ? 0 : 1, 64)) != KVB_OK) return st;
        shff = count * ff;
    }
    if (fam->traits & F_MOE_LEAD) {
        if ((st = opt_u32(k, "leading_dense_block_count", &lead, 0, (uint32_t)in->n_layer)) != KVB_OK && st != KVB_ERR_INVALID) return st;
    }
    in->n_expert = (int32_t)n;
    in->n_expert_used = (int32_t)used;
    in->n_ff_exp = (int32_t)ff;
    in->n_ff_shexp = (int32_t)shff;
    in->n_moe_layers = in->n_layer - (int32_t)lead;
    return KVB_OK;
}

/* The head counts and sizes, the context and the norm epsilon. */
static kvb_status load_shape(struct keys *k, const struct family *fam, struct kvb_model *m) {
    struct kvb_model_info *in = &m->info;
    uint32_t v;
    kvb_status st;
    if ((st = req_u32(k, "embedding_length", &v, 1, 1 << 16)) != KVB_OK) return st;
    in->n_embd = (int32_t)v;
    if ((st = req_u32(k, "block_count", &v, 1, 4096)) != KVB_OK) return st;
    in->n_layer = (int32_t)v;
    if (fam->traits & (F_HYBRID | F_GLM4MOE)) { /* the last nextn_predict_layers blocks are MTP layers: loaded, never run (as llama.cpp) */
        uint32_t nextn = 0;
        if ((st = opt_u32(k, "nextn_predict_layers", &nextn, 0, (uint32_t)in->n_layer - 1)) != KVB_OK && st != KVB_ERR_INVALID) return st;
        in->n_nextn_layers = (int32_t)nextn;
        in->n_layer -= (int32_t)nextn;
    }
    in->n_ff = 0;
    if (fam->traits & F_GEMMA4) { /* feed_forward_length per layer (E2B's double-wide shared layers) or one; head counts one */
        uint32_t *ff = kvb_malloc(sizeof(uint32_t) * (size_t)in->n_layer);
        if (!ff || !(m->n_ff_layer = kvb_malloc(sizeof(int32_t) * (size_t)in->n_layer))) {
            kvb_free(ff);
            return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", k->f->path);
        }
        st = layer_u32s(k, "feed_forward_length", in->n_layer, 1, 1 << 20, ff);
        if (st == KVB_ERR_INVALID) st = kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' is missing", k->f->path, k->key);
        for (int32_t l = 0; st == KVB_OK && l < in->n_layer; l++) {
            m->n_ff_layer[l] = (int32_t)ff[l];
            in->n_ff = KVB_MAX(in->n_ff, (int32_t)ff[l]); /* the widest: the buffers' */
        }
        kvb_free(ff);
        if (st != KVB_OK) return st;
        if ((st = gemma4_heads(k, "attention.head_count", in->n_layer, &v, NULL)) != KVB_OK)
            return st == KVB_ERR_INVALID ? kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' is missing", k->f->path, k->key) : st;
        in->n_head = (int32_t)v;
        in->n_head_kv = in->n_head;
        kvb_free(m->n_kv_layer);
        m->n_kv_layer = NULL;
        if ((st = gemma4_heads(k, "attention.head_count_kv", in->n_layer, &v, &m->n_kv_layer)) == KVB_OK) in->n_head_kv = (int32_t)v;
        else if (st != KVB_ERR_INVALID) return st;
        for (int32_t l = 0; m->n_kv_layer && l < in->n_layer; l++)
            if (in->n_head % m->n_kv_layer[l])
                return kvb_fail(KVB_ERR_CORRUPT, "%s: head_count %d is not a multiple of head_count_kv %d (layer %d)", k->f->path, in->n_head,
                                m->n_kv_layer[l], (int)l);
    } else if (fam->traits & F_NEMOTRON) {
        if ((st = nemotron_layers(k, m)) != KVB_OK) return st;
    } else {
    if ((st = (fam->traits & F_FF_OPT ? opt_u32 : req_u32)(k, "feed_forward_length", &v, 1, 1 << 20)) == KVB_OK) in->n_ff = (int32_t)v;
    else if (st != KVB_ERR_INVALID) return st;
    if (fam->traits & (F_SHORTCONV | F_MAMBA2)) { /* lfm2, granitehybrid: head counts per layer, head_count_kv 0 on the recurrent layers (llama.cpp's rule) */
        if ((st = shortconv_layers(k, m)) != KVB_OK) return st;
    } else {
    if ((st = req_u32(k, "attention.head_count", &v, 1, 1024)) != KVB_OK) return st;
    in->n_head = (int32_t)v;
    in->n_head_kv = in->n_head;
    if ((st = opt_u32(k, "attention.head_count_kv", &v, 1, 1024)) == KVB_OK) in->n_head_kv = (int32_t)v;
    else if (st != KVB_ERR_INVALID) return st;
    }
    }
    if (in->n_head % in->n_head_kv)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: head_count %d is not a multiple of head_count_kv %d", k->f->path, in->n_head, in->n_head_kv);
    const bool divides = in->n_embd % in->n_head == 0;
    in->head_dim = divides ? in->n_embd / in->n_head : 0;
    if ((st = opt_u32(k, "attention.key_length", &v, 1, fam->traits & F_MLA ? 1024 : 512)) == KVB_OK) in->head_dim = (int32_t)v;
    else if (st != KVB_ERR_INVALID) return st;
    if (!in->head_dim)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: embedding_length %d is not a multiple of head_count %d and '%s.attention.key_length' is missing",
                        k->f->path, in->n_embd, in->n_head, k->arch);
    if ((st = opt_u32(k, "attention.value_length", &v, 1, 1024)) == KVB_OK) {
        if ((fam->traits & F_MLA) && (int32_t)v != in->head_dim) { /* the latent (load_mla_keys checks it) */
            in->head_dim_v_mla = (int32_t)v;
        } else if ((int32_t)v != in->head_dim)
            return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = %u differs from the key length %d; kvbound needs K and V heads of one size",
                            k->f->path, k->key, v, in->head_dim);
    } else if (st != KVB_ERR_INVALID) return st;
    in->n_ctx_train = 2048;
    if ((st = opt_u32(k, "context_length", &v, 1, 1u << 30)) == KVB_OK) in->n_ctx_train = (int32_t)v;
    else if (st != KVB_ERR_INVALID) return st;
    in->rms_eps = 1e-5f;
    if ((st = opt_f32(k, "attention.layer_norm_rms_epsilon", &in->rms_eps)) != KVB_OK) return st;
    if (!(in->rms_eps > 0 && in->rms_eps < 1)) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %g is out of range", k->f->path, k->key, (double)in->rms_eps);
    /* attention.layer_norm_epsilon is LayerNorm's: these families (RMSNorm) never read it, nor does llama.cpp for them */
    if ((st = load_experts(k, fam, in)) != KVB_OK) return st;
    in->rope_dims = in->head_dim; /* the rotary dims: part of the shape (the RoPE factors' length) */
    if ((st = opt_u32(k, "rope.dimension_count", &v, 2, (uint32_t)in->head_dim)) == KVB_OK) in->rope_dims = (int32_t)v;
    else if (st != KVB_ERR_INVALID) return st;
    if (in->rope_dims % 2) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %d is odd", k->f->path, k->key, in->rope_dims);
    if (in->rope_dims != in->head_dim && !(fam->traits & F_PARTIAL_ROT))
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s.rope.dimension_count' = %d differs from the head size %d, which '%s' does not allow",
                        k->f->path, k->arch, in->rope_dims, in->head_dim, k->arch);
    if (!(fam->traits & (F_SWA_IGNORED | F_OAI_WINDOWS | F_SHORTCONV)) && !fam->gemma && (st = opt_u32(k, "attention.sliding_window", &v, 0, 1u << 30)) == KVB_OK && v > 0)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = %u: sliding-window layers are not supported for '%s' yet", k->f->path, k->key, v, k->arch);
    else if (st != KVB_OK && st != KVB_ERR_INVALID) return st;
    return KVB_OK;
}

/* RoPE: base, the scaling type and its keys (the rotary dims are the shape's). ff: the file's
 * rope_freqs, already bound (or NULL). */
static kvb_status load_rope(struct keys *k, const struct family *fam, struct kvb_model *m, const float *ff) {
    struct kvb_model_info *in = &m->info;
    kvb_status st;
    in->rope_base = 10000.0f;
    if ((st = opt_f32(k, "rope.freq_base", &in->rope_base)) != KVB_OK) return st;
    if (!(in->rope_base > 1)) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %g must be > 1", k->f->path, k->key, (double)in->rope_base);
    char type[16] = "linear";
    struct gguf_str s;
    if ((st = kvb_gguf_get_str(k->f, K(k, "rope.scaling.type"), &s, false)) == KVB_OK) {
        if (s.n >= sizeof type || !(kvb_gguf_str_eq(s, "none") || kvb_gguf_str_eq(s, "linear") || kvb_gguf_str_eq(s, "yarn") || kvb_gguf_str_eq(s, "longrope")))
            return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = '%.*s' is not a RoPE scaling kvbound knows (none, linear, yarn, longrope)", k->f->path,
                            k->key, (int)KVB_MIN(s.n, (uint64_t)32), s.p);
        memcpy(type, s.p, (size_t)s.n);
        type[s.n] = 0;
    } else if (st != KVB_ERR_INVALID) return st;
    float factor = 0;
    if ((st = opt_f32(k, "rope.scale_linear", &factor)) != KVB_OK) return st;
    if ((st = opt_f32(k, "rope.scaling.factor", &factor)) != KVB_OK) return st;
    if (factor < 0) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %g is negative", k->f->path, k->key, (double)factor);
    const float fs = !strcmp(type, "none") || factor == 0 ? 1.0f : 1.0f / factor;
    if (!isfinite(fs) || !(fs > 0)) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s.rope.scaling.factor' = %g gives no usable frequency scale", k->f->path, k->arch, (double)factor);
    in->rope_freq_scale = fs;
    if ((st = opt_f32(k, "rope.scaling.attn_factor", &m->rope_mscale)) != KVB_OK) return st;
    if (!(m->rope_mscale > 0)) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' must be > 0", k->f->path, k->key);
    uint32_t orig = (uint32_t)in->n_ctx_train;
    if ((st = opt_u32(k, "rope.scaling.original_context_length", &orig, 1, 1u << 30)) != KVB_OK && st != KVB_ERR_INVALID) return st;
    m->rope_orig_ctx = (int32_t)orig;
    m->rope_freqs = ff;
    if (fam->traits & F_GRANITE) {
        bool finetuned = true;
        if ((st = kvb_gguf_get_bool(k->f, K(k, "rope.scaling.finetuned"), &finetuned, false)) != KVB_OK && st != KVB_ERR_INVALID) return st;
        if (!finetuned) in->rope_type = KVB_ROPE_NONE;
    }
    if (!strcmp(type, "yarn")) {
        float beta_fast = 32.0f, beta_slow = 1.0f, log_mul = 0;
        bool has_log_mul = false;
        if (fam->traits & (F_TEMP | F_MLA)) {
            if ((st = opt_f32(k, "rope.scaling.yarn_beta_fast", &beta_fast)) != KVB_OK) return st; /* F_TEMP or F_MLA */
            if ((st = opt_f32(k, "rope.scaling.yarn_beta_slow", &beta_slow)) != KVB_OK) return st;
            has_log_mul = kvb_gguf_find(k->f, K(k, "rope.scaling.yarn_log_multiplier")) != NULL;
            if ((st = opt_f32(k, "rope.scaling.yarn_log_multiplier", &log_mul)) != KVB_OK) return st;
        }
        if (!(beta_fast > 0 && beta_slow > 0)) return kvb_fail(KVB_ERR_CORRUPT, "%s: YaRN betas must be > 0", k->f->path);
        return kvb_family_yarn(m, ff, fs, (int32_t)orig, beta_fast, beta_slow, has_log_mul, log_mul);
    }
    return KVB_OK;
}

/* A key of the window layers' own head shape (llama.cpp reads them for every
 * architecture): kvbound's window layers have the global layers' shape. */
static kvb_status same_as(struct keys *k, const char *suffix, int32_t want, const char *what) {
    uint32_t v;
    kvb_status st = opt_u32(k, suffix, &v, 0, 1u << 20);
    if (st == KVB_ERR_INVALID) return KVB_OK;
    if (st != KVB_OK) return st;
    if ((int32_t)v != want)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = %u differs from the %s %d; kvbound needs window layers of the global layers' shape",
                        k->f->path, k->key, v, what, (int)want);
    return KVB_OK;
}

/* Gemma (the family's gemma_rule): the sliding-window layers, their RoPE and
 * the softcaps, as llama.cpp's gemma2/gemma3 loaders read them; GeGLU, the
 * embedding and query scales are the family's traits (kvb_family_traits). */
static kvb_status load_gemma(struct keys *k, const struct family *fam, struct kvb_model *m) {
    const struct gemma_rule *g = fam->gemma;
    struct kvb_model_info *in = &m->info;
    kvb_status st;
    if (m->yarn_factor)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s.rope.scaling.type' = 'yarn' is not supported for '%s' (its window layers rotate at their own scale)",
                        k->f->path, k->arch, k->arch);
    uint32_t window = g->window, period = g->period, v;
    if ((st = opt_u32(k, "attention.sliding_window", &v, 0, 1u << 30)) == KVB_OK) window = v;
    else if (st != KVB_ERR_INVALID) return st;
    if (g->window && !window) /* llama.cpp would mask every key of the window layers */
        return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = 0: '%s' always has sliding-window layers, and a window of 0 tokens sees nothing", k->f->path,
                        k->key, k->arch);
    if (window) {
        const struct gguf_kv *kv = kvb_gguf_find(k->f, K(k, "attention.sliding_window_pattern"));
        if (kv && kv->type == GGUF_T_ARRAY) /* llama.cpp reads the pattern as one u32 and ignores an array */
            kvb_logf(KVB_LOG_WARN, "%s: key '%s' is a per-layer array, which llama.cpp ignores; the default pattern %u is used, as there", k->f->path,
                     k->key, period);
        else if (kv && (st = kvb_gguf_get_u32(k->f, k->key, &period, true)) != KVB_OK) return st;
        if ((st = kvb_family_windows(m, (int32_t)window, period)) != KVB_OK) return st;
        m->rope_base_swa = g->base ? g->base : in->rope_base;
        if ((st = opt_f32(k, "rope.freq_base_swa", &m->rope_base_swa)) != KVB_OK) return st;
        if (!(m->rope_base_swa > 1)) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %g must be > 1", k->f->path, k->key, (double)m->rope_base_swa);
        m->rope_freq_scale_swa = g->scaled ? in->rope_freq_scale : 1.0f;
        struct gguf_str t;
        float factor = 0;
        if (g->scaled && in->n_swa_layers && kvb_gguf_get_str(k->f, K(k, "rope.scaling.type"), &t, false) == KVB_OK && kvb_gguf_str_eq(t, "none") &&
            ((st = opt_f32(k, "rope.scaling.factor", &factor)) != KVB_OK || factor != 0 ||
             (st = opt_f32(k, "rope.scale_linear", &factor)) != KVB_OK || factor != 0)) /* llama.cpp: none unscales the global layers only */
            return st != KVB_OK ? st
                                : kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s.rope.scaling.type' = 'none' beside a scaling factor: llama.cpp would scale "
                                                                "'%s''s window layers by it and not the global ones; refused as ambiguous",
                                           k->f->path, k->arch, k->arch);
        if (in->n_swa_layers && ((st = same_as(k, "attention.key_length_swa", in->head_dim, "key length")) != KVB_OK ||
                                 (st = same_as(k, "attention.value_length_swa", in->head_dim, "value length")) != KVB_OK ||
                                 (st = same_as(k, "rope.dimension_count_swa", in->rope_dims, "rotary dims")) != KVB_OK))
            return st;
    }
    if (g->attn_cap) { /* always on; the key may change it */
        float c = g->attn_cap;
        if ((st = opt_f32(k, "attn_logit_softcapping", &c)) != KVB_OK) return st;
        if (c == 0) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = 0: '%s' always caps attention scores, and a cap of 0 divides by zero", k->f->path, k->key, k->arch);
        m->attn_softcap = fabsf(c); /* c tanh(s / c) is even in c */
    } /* else (gemma3) the key is not read, as llama.cpp, whose converter asserts it is absent */
    float c = g->final_cap;
    if ((st = opt_f32(k, "final_logit_softcapping", &c)) != KVB_OK) return st;
    if (g->final_cap && c == 0)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = 0: '%s' always caps the logits, and a cap of 0 divides by zero", k->f->path, k->key, k->arch);
    m->final_softcap = fabsf(c); /* 0 (gemma3 without the key): off */
    return KVB_OK;
}

/* Gemma 4's keys (F_GEMMA4), as llama.cpp's gemma4 loader reads them: the per-layer window pattern
 * (an array of n_layer bools or integers; a scalar is every layer's, as there), the window, the window
 * layers' head size (key/value_length_swa, required, equal) and rotary dims (default the global ones),
 * their base (default 10000, unscaled), shared_kv_layers (default 0), the per-layer embedding width
 * (required; 0: none) and the final softcap (default 30; 0: off). The global layers' RoPE is the file's
 * (rope_freqs: their proportional RoPE's divisors, required when a global layer exists). */
static kvb_status load_gemma4(struct keys *k, struct kvb_model *m) {
    struct kvb_model_info *in = &m->info;
    const int32_t L = in->n_layer;
    kvb_status st;
    if (m->yarn_factor || m->rope_freqs_long)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s.rope.scaling.type' (yarn, longrope) is not implemented for gemma4", k->f->path, k->arch);
    uint32_t *pat = kvb_malloc(sizeof(uint32_t) * (size_t)L);
    if (!pat || !(m->swa_mask = kvb_calloc((size_t)L, 1))) {
        kvb_free(pat);
        return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", k->f->path);
    }
    st = layer_u32s(k, "attention.sliding_window_pattern", L, 0, UINT32_MAX, pat);
    if (st == KVB_ERR_INVALID) st = kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' is missing", k->f->path, k->key);
    for (int32_t l = 0; st == KVB_OK && l < L; l++) m->swa_mask[l] = pat[l] != 0;
    kvb_free(pat);
    if (st != KVB_OK) return st;
    uint32_t window, shared = 0, P, dk, dv, rot;
    if ((st = req_u32(k, "attention.sliding_window", &window, 0, 1u << 30)) != KVB_OK) return st;
    if ((st = opt_u32(k, "attention.shared_kv_layers", &shared, 0, (uint32_t)L)) != KVB_OK && st != KVB_ERR_INVALID) return st;
    if ((st = req_u32(k, "embedding_length_per_layer_input", &P, 0, 1u << 16)) != KVB_OK) return st;
    if ((st = req_u32(k, "attention.key_length_swa", &dk, 1, 1u << 16)) != KVB_OK) return st;
    if (dk > (uint32_t)in->head_dim)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = %u: window heads wider than the global ones (%d) are not implemented", k->f->path,
                        k->key, dk, (int)in->head_dim);
    if ((st = req_u32(k, "attention.value_length_swa", &dv, 1, 1u << 16)) != KVB_OK) return st;
    if (dk != dv)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = %u differs from the key length %u; kvbound needs K and V heads of one size", k->f->path,
                        k->key, dv, dk);
    rot = (uint32_t)in->rope_dims; /* llama.cpp's default: the global layers' */
    if ((st = opt_u32(k, "rope.dimension_count_swa", &rot, 2, dk)) != KVB_OK && st != KVB_ERR_INVALID) return st;
    if (rot % 2 || rot > dk) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %u must be even and at most the window head size %u", k->f->path,
                                             K(k, "rope.dimension_count_swa"), rot, dk);
    m->rope_base_swa = 10000.0f;
    if ((st = opt_f32(k, "rope.freq_base_swa", &m->rope_base_swa)) != KVB_OK) return st;
    if (!(m->rope_base_swa > 1)) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %g must be > 1", k->f->path, k->key, (double)m->rope_base_swa);
    m->rope_freq_scale_swa = 1.0f; /* llama.cpp never reads a window scale for gemma4 */
    float c = 30.0f;
    if ((st = opt_f32(k, "final_logit_softcapping", &c)) != KVB_OK) return st;
    m->final_softcap = fabsf(c); /* 0: off */
    m->head_dim_swa = (int32_t)dk;
    m->rope_dims_swa = (int32_t)rot;
    m->n_kv_shared = (int32_t)shared;
    m->n_ple = (int32_t)P;
    in->head_dim_swa = (int32_t)dk;
    in->n_embd_per_layer = (int32_t)P;
    bool global = false;
    for (int32_t l = 0; l < L; l++) global = global || !m->swa_mask[l];
    if (global && !m->rope_freqs) /* llama.cpp requires it of the first global layer */
        return kvb_fail(KVB_ERR_CORRUPT, "%s: tensor 'rope_freqs.weight' is missing (gemma4's global layers need it)", k->f->path);
    return kvb_family_gemma4(m, (int32_t)window);
}

/* gpt-oss: a window on every other layer (pattern 2: the even ones), of
 * attention.sliding_window tokens (required), at rope.freq_base_swa
 * (default: the global base) and the global scale, YaRN included: with the
 * global base they are the global rotation (the cache's rope), else their own. */
static kvb_status load_oai_windows(struct keys *k, struct kvb_model *m) {
    struct kvb_model_info *in = &m->info;
    uint32_t window, period = 2;
    kvb_status st = req_u32(k, "attention.sliding_window", &window, 1, 1u << 30);
    if (st != KVB_OK) return st;
    const struct gguf_kv *kv = kvb_gguf_find(k->f, K(k, "attention.sliding_window_pattern"));
    if (kv && kv->type == GGUF_T_ARRAY) /* llama.cpp reads the pattern as one u32 and ignores an array */
        kvb_logf(KVB_LOG_WARN, "%s: key '%s' is a per-layer array, which llama.cpp ignores; the default pattern 2 is used, as there", k->f->path,
                 k->key);
    else if (kv && (st = kvb_gguf_get_u32(k->f, k->key, &period, true)) != KVB_OK) return st;
    if ((st = kvb_family_windows(m, (int32_t)window, period)) != KVB_OK) return st;
    float base = in->rope_base;
    if ((st = opt_f32(k, "rope.freq_base_swa", &base)) != KVB_OK) return st;
    if (!(base > 1)) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %g must be > 1", k->f->path, k->key, (double)base);
    if (base != in->rope_base && m->yarn_factor)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = %g differs from the global base under YaRN, which kvbound does not implement", k->f->path,
                        k->key, (double)base);
    m->rope_base_swa = base == in->rope_base ? 0 : base; /* 0: the window layers turn by the global rope */
    m->rope_freq_scale_swa = in->rope_freq_scale;
    return KVB_OK;
}

kvb_status kvb_family_hybrid(struct kvb_model *m) {
    struct kvb_model_info *in = &m->info;
    const int32_t every = m->full_attn_interval;
    if (every < 1) return kvb_fail(KVB_ERR_CORRUPT, "%s: full_attention_interval %d must be >= 1", m->path, (int)every);
    const int64_t Hk = in->ssm_groups, Dk = in->ssm_state, Hv = in->ssm_heads, K = in->ssm_conv;
    if (Hk < 1 || Dk < 1 || Hv < 1 || K < 1 || Hv % Hk)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: Gated DeltaNet shape: %lld key heads, %lld value heads (a multiple of them), head size %lld, %lld taps",
                        m->path, (long long)Hk, (long long)Hv, (long long)Dk, (long long)K);
    uint8_t *rec = kvb_calloc((size_t)KVB_MAX(in->n_layer, 1), 1);
    if (!rec) return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", m->path);
    int32_t n = 0;
    for (int32_t l = 0; l < in->n_layer; l++) n += rec[l] = (l + 1) % every != 0;
    if (n >= in->n_layer) {
        kvb_free(rec);
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: full_attention_interval %d leaves no attention layer among %d layers (a model of Gated DeltaNet layers only)",
                        m->path, (int)every, (int)in->n_layer);
    }
    kvb_free(m->recurrent);
    m->recurrent = rec;
    in->n_rec_layers = n;
    const int64_t C = 2 * Hk * Dk + Hv * Dk;
    in->state_bytes = (size_t)n * sizeof(float) * (size_t)(Hv * Dk * Dk + (K - 1) * C);
    return KVB_OK;
}

kvb_status kvb_family_shortconv(struct kvb_model *m, int32_t window) {
    struct kvb_model_info *in = &m->info;
    const int64_t K = in->ssm_conv;
    if (!m->recurrent) return kvb_fail(KVB_ERR_INVALID, "%s: lfm2 without its layer kinds", m->path);
    if (K < 2 || K > 64) return kvb_fail(KVB_ERR_CORRUPT, "%s: shortconv.l_cache %lld must be 2..64", m->path, (long long)K);
    int32_t n = 0;
    for (int32_t l = 0; l < in->n_layer; l++) n += m->recurrent[l] != 0;
    if (n >= in->n_layer) return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: no attention layer among %d short-conv layers is not implemented", m->path, (int)n);
    in->shortconv = true;
    in->n_rec_layers = n;
    if (!n) { /* every layer attention: no recurrent state */
        kvb_free(m->recurrent);
        m->recurrent = NULL;
    }
    in->ssm_state = in->ssm_groups = in->ssm_heads = 0;
    in->state_bytes = (size_t)n * sizeof(float) * (size_t)((K - 1) * in->n_embd);
    /* a sliding window: every attention layer a window layer (llama.cpp's LLAMA_SWA_TYPE_STANDARD), at the global RoPE */
    kvb_status st = kvb_family_windows(m, window, 0);
    if (st != KVB_OK) return st;
    int32_t w = 0;
    for (int32_t i = 0; i < in->n_swa_layers; i++)
        if (!m->recurrent || !m->recurrent[m->swa_layers[i].layer]) m->swa_layers[w++] = m->swa_layers[i];
    in->n_swa_layers = w;
    m->rope_base_swa = 0;
    m->rope_freq_scale_swa = in->rope_freq_scale;
    return KVB_OK;
}

kvb_status kvb_family_mamba2(struct kvb_model *m) {
    struct kvb_model_info *in = &m->info;
    const int64_t K = in->ssm_conv, DI = in->ssm_inner, N = in->ssm_state, H = in->ssm_heads, G = in->ssm_groups;
    if (!m->recurrent) return kvb_fail(KVB_ERR_INVALID, "%s: %s without its layer kinds", m->path, in->arch);
    if (K < 2 || K > 64 || DI < 1 || N < 1 || H < 1 || G < 1 || DI % H || DI % G || H % G)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: the Mamba-2 shape of '%s': ssm.conv_kernel %lld (2..64), ssm.inner_size %lld over ssm.time_step_rank %lld "
                                         "heads and ssm.group_count %lld groups (each dividing it, the groups the heads), ssm.state_size %lld", m->path,
                        in->arch, (long long)K, (long long)DI, (long long)H, (long long)G, (long long)N);
    int32_t n = 0;
    for (int32_t l = 0; l < in->n_layer; l++) n += m->recurrent[l] != 0;
    if (n >= in->n_layer) return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: no attention layer among %d Mamba-2 layers is not implemented", m->path, (int)n);
    in->mamba2 = true;
    in->n_rec_layers = n;
    if (!n) {
        kvb_free(m->recurrent);
        m->recurrent = NULL;
    }
    in->state_bytes = (size_t)n * sizeof(float) * (size_t)(DI * N + (K - 1) * (DI + 2 * G * N));
    return KVB_OK;
}

/* Mamba-2's keys (F_MAMBA2), all required as llama.cpp's loader reads them: ssm.conv_kernel, ssm.inner_size (d_inner),
 * ssm.state_size (N), ssm.time_step_rank (the heads), ssm.group_count; the layer kinds came with the shape. */
static kvb_status load_mamba2(struct keys *k, struct kvb_model *m) {
    struct kvb_model_info *in = &m->info;
    uint32_t taps, inner, state, heads, groups;
    kvb_status st;
    if ((st = req_u32(k, "ssm.conv_kernel", &taps, 2, 64)) != KVB_OK || (st = req_u32(k, "ssm.inner_size", &inner, 1, 1u << 20)) != KVB_OK ||
        (st = req_u32(k, "ssm.state_size", &state, 1, 1024)) != KVB_OK || (st = req_u32(k, "ssm.time_step_rank", &heads, 1, 1u << 16)) != KVB_OK ||
        (st = req_u32(k, "ssm.group_count", &groups, 1, 1024)) != KVB_OK)
        return st;
    in->ssm_conv = (int32_t)taps;
    in->ssm_inner = (int32_t)inner;
    in->ssm_state = (int32_t)state;
    in->ssm_heads = (int32_t)heads;
    in->ssm_groups = (int32_t)groups;
    return kvb_family_mamba2(m);
}

/* lfm2's short-conv taps (shortconv.l_cache, required: llama.cpp's get_key) and its optional sliding
 * window (> 0: every attention layer a window layer); the layer kinds came with the shape. */
static kvb_status load_shortconv(struct keys *k, struct kvb_model *m) {
    uint32_t taps, window = 0;
    kvb_status st = req_u32(k, "shortconv.l_cache", &taps, 2, 64);
    if (st != KVB_OK) return st;
    if ((st = opt_u32(k, "attention.sliding_window", &window, 0, 1u << 30)) != KVB_OK && st != KVB_ERR_INVALID) return st;
    m->info.ssm_conv = (int32_t)taps;
    return kvb_family_shortconv(m, (int32_t)window);
}

/* rope.dimension_sections at key (kv, found): 4 integers, or one value for all four (llama.cpp's get_key_or_arr), each
 * in 0..4096, and their sum. */
static kvb_status rope_sections(const struct keys *k, const char *key, const struct gguf_kv *kv, int32_t sec[4], int64_t *sum) {
    kvb_status st;
    if (kv->type == GGUF_T_ARRAY) {
        uint64_t n;
        const uint8_t *d;
        if (kv->v.arr.type != GGUF_T_INT32 && kv->v.arr.type != GGUF_T_UINT32)
            return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' must be an array of 4 integers", k->f->path, key);
        if ((st = kvb_gguf_get_arr(k->f, key, kv->v.arr.type, &n, &d, true)) != KVB_OK) return st;
        if (n != 4) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' has %llu values, expected 4", k->f->path, key, (unsigned long long)n);
        memcpy(sec, d, sizeof(int32_t) * 4);
    } else {
        uint32_t v;
        if ((st = kvb_gguf_get_u32(k->f, key, &v, true)) != KVB_OK) return st;
        sec[0] = sec[1] = sec[2] = sec[3] = (int32_t)v;
    }
    *sum = 0;
    for (int i = 0; i < 4; i++) {
        if (sec[i] < 0 || sec[i] > 4096) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' section %d = %d is out of range", k->f->path, key, i, (int)sec[i]);
        *sum += sec[i];
    }
    return KVB_OK;
}

/* Qwen3.5's keys (F_HYBRID), as llama.cpp's qwen35 loaders read them: the
 * Gated DeltaNet shape (ssm.*, all required), the full-attention interval
 * (default 4) and the RoPE sections (required; text positions only, so every
 * rotated pair must take the text position: a pair left to the 4th, vision,
 * section would turn by position 0, which kvbound does not implement). */
static kvb_status load_hybrid(struct keys *k, struct kvb_model *m) {
    struct kvb_model_info *in = &m->info;
    uint32_t taps, inner, state, rank, groups, every = 4;
    kvb_status st;
    if ((st = req_u32(k, "ssm.conv_kernel", &taps, 1, 64)) != KVB_OK || (st = req_u32(k, "ssm.inner_size", &inner, 1, 1u << 20)) != KVB_OK ||
        (st = req_u32(k, "ssm.state_size", &state, 1, 1024)) != KVB_OK || (st = req_u32(k, "ssm.time_step_rank", &rank, 1, 1024)) != KVB_OK ||
        (st = req_u32(k, "ssm.group_count", &groups, 1, 1024)) != KVB_OK)
        return st;
    if (inner % rank || inner / rank != state)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = %u over %u value heads is not the state size %u; kvbound (as llama.cpp's tensors) needs "
                                             "value heads of the key heads' size", k->f->path, K(k, "ssm.inner_size"), inner, rank, state);
    if (rank % groups)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %u is not a multiple of the %u key heads ('%s.ssm.group_count')", k->f->path,
                        K(k, "ssm.time_step_rank"), rank, groups, k->arch);
    if ((st = opt_u32(k, "full_attention_interval", &every, 1, 4096)) != KVB_OK && st != KVB_ERR_INVALID) return st;
    in->ssm_conv = (int32_t)taps;
    in->ssm_state = (int32_t)state;
    in->ssm_groups = (int32_t)groups;
    in->ssm_heads = (int32_t)rank;
    m->full_attn_interval = (int32_t)every;
    /* rope.dimension_sections: 4 int32s (or one value for all four, as llama.cpp's get_key_or_arr) */
    const char *key = K(k, "rope.dimension_sections");
    const struct gguf_kv *kv = kvb_gguf_find(k->f, key);
    if (!kv) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' is missing", k->f->path, key);
    int32_t sec[4];
    int64_t sum;
    if ((st = rope_sections(k, key, kv, sec, &sum)) != KVB_OK) return st;
    const int32_t pairs = in->rope_dims / 2;
    if (sum == 0 || sum > in->head_dim)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' sums to %lld pairs, which must be 1..%d (the head size)", k->f->path, key, (long long)sum,
                        (int)in->head_dim);
    for (int32_t i = 0; i < pairs; i++) { /* IMROPE: pair i's sector, interleaved t h w, else the 4th section */
        const int64_t sct = i % sum;
        const bool text = (sct % 3 == 0 && sct < 3 * (int64_t)sec[0]) || (sct % 3 == 1 && sct < 3 * (int64_t)sec[1]) ||
                          (sct % 3 == 2 && sct < 3 * (int64_t)sec[2]);
        if (!text)
            return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = [%d, %d, %d, %d] gives rotary pair %d of %d the 4th (vision) position; kvbound "
                                                 "implements text positions only, where every pair takes the token's position",
                            k->f->path, key, (int)sec[0], (int)sec[1], (int)sec[2], (int)sec[3], (int)i, (int)pairs);
    }
    memcpy(m->rope_sections, sec, sizeof sec);
    if (m->yarn_factor || in->rope_freq_scale != 1.0f || m->rope_freqs)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: RoPE scaling ('%s.rope.scaling.*', rope_freqs) on '%s' is not implemented", k->f->path, k->arch, k->arch);
    return kvb_family_hybrid(m);
}

/* lfm2moe's routing keys, as llama.cpp's lfm2moe loader and graph: expert_gating_func required,
 * softmax or sigmoid (none aborts its graph; softmax of the top logits is gpt-oss'). The graph
 * reads no expert_weights_scale, so a scale other than 0 or 1 is refused, not run two ways. It
 * always renormalizes the chosen weights and reads no expert_weights_norm either, which is
 * ignored as there: llama.cpp's own model saver (test-llama-archs -o) writes it false. */
static kvb_status load_sel_bias_keys(struct keys *k, struct kvb_model *m) {
    uint32_t g;
    kvb_status st = req_u32(k, "expert_gating_func", &g, 0, 1u << 30);
    if (st != KVB_OK) return st;
    if (g != KVB_MOE_SOFTMAX && g != KVB_MOE_SIGMOID)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = %u: '%s' routes by softmax (1) or sigmoid (2); %s is not implemented", k->f->path, k->key,
                        g, k->arch, g == 0 ? "none (0: llama.cpp aborts)" : g == 3 ? "softmax of the top logits (3)" : "an unknown gating function");
    m->moe_gating = (enum kvb_moe_gating)g;
    float sc = 0;
    if ((st = opt_f32(k, "expert_weights_scale", &sc)) != KVB_OK) return st;
    if (sc != 0 && sc != 1)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = %g: llama.cpp's %s graph does not read it (its experts' weights are unscaled); "
                                             "a scale is not implemented", k->f->path, k->key, (double)sc, k->arch);
    return KVB_OK;
}

/* expert_weights_norm (default false: not renormalized) and expert_weights_scale (0 or absent: 1), as llama.cpp's
 * glm4moe, deepseek2 and nemotron_h_moe loaders read them. */
static kvb_status load_norm_scale(struct keys *k, struct kvb_model *m) {
    kvb_status st;
    bool norm = false;
    if ((st = kvb_gguf_get_bool(k->f, K(k, "expert_weights_norm"), &norm, false)) != KVB_OK && st != KVB_ERR_INVALID) return st;
    m->moe_norm = norm;
    float sc = 0;
    if ((st = opt_f32(k, "expert_weights_scale", &sc)) != KVB_OK) return st;
    m->moe_scale = sc != 0 ? sc : 1.0f;
    return KVB_OK;
}

/* glm4moe's routing keys, as llama.cpp's glm4moe loader and build_moe_ffn: expert_gating_func
 * absent or 0 is sigmoid (GLM-4.5's), else softmax (1), sigmoid (2) or the softmax of the top
 * logits (3); expert_weights_norm (default false) renormalizes the chosen weights;
 * expert_weights_scale (0 or absent: 1) scales them. rope.dimension_sections with a non-zero
 * section is GLM-4.5V's M-RoPE, which kvbound does not implement (its text files have none). */
static kvb_status load_glm4moe_keys(struct keys *k, struct kvb_model *m) {
    uint32_t g = 0;
    kvb_status st = opt_u32(k, "expert_gating_func", &g, 0, 1u << 30);
    if (st != KVB_OK && st != KVB_ERR_INVALID) return st;
    if (g > KVB_MOE_SOFTMAX_WEIGHT)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = %u: '%s' routes by softmax (1), sigmoid (0 or 2) or the softmax of the top logits (3); "
                                             "an unknown gating function", k->f->path, k->key, g, k->arch);
    m->moe_gating = g == 0 ? KVB_MOE_SIGMOID : (enum kvb_moe_gating)g;
    if ((st = load_norm_scale(k, m)) != KVB_OK) return st;
    /* rope.dimension_sections (4 integers, or one for all four): with the first two non-zero llama.cpp runs M-RoPE
     * (contiguous sections t, h, w, e over the rotary pairs, NEOX pairing); a text token's t, h and w positions are its
     * position and e's is 0, so it is NEOX when every rotary pair falls in t, h or w; else refused */
    const char *key = K(k, "rope.dimension_sections");
    const struct gguf_kv *kv = kvb_gguf_find(k->f, key);
    if (kv) {
        int32_t sec[4];
        int64_t sum;
        if ((st = rope_sections(k, key, kv, sec, &sum)) != KVB_OK) return st;
        if (sec[0] > 0 && sec[1] > 0) { /* llama.cpp's use_mrope() */
            const int64_t text = (int64_t)sec[0] + sec[1] + sec[2];
            for (int32_t i = 0; i < m->info.rope_dims / 2; i++)
                if (i % sum >= text)
                    return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = [%d, %d, %d, %d] gives rotary pair %d of %d the 4th position (M-RoPE, "
                                                         "GLM-4.5V's vision-language files); kvbound implements text positions only, where "
                                                         "every pair takes the token's position", k->f->path, key, (int)sec[0], (int)sec[1],
                                    (int)sec[2], (int)sec[3], (int)i, (int)(m->info.rope_dims / 2));
        }
        memcpy(m->rope_sections, sec, sizeof sec);
    }
    return KVB_OK;
}

/* deepseek2's keys (F_MLA), as llama.cpp's deepseek2 loader reads them: kv_lora_rank (required), q_lora_rank (0 or absent:
 * one attn_q, as V2-Lite), key_length_mla and value_length_mla (the per-head sizes the latent replaces; without them a file
 * holds the older fused attn_kv_b, which is refused by name), key_length = rope_dims + kv_lora_rank and value_length =
 * kv_lora_rank (the latent row); head_count_kv 1. Routing: expert_gating_func (absent: softmax, as llama.cpp's default for
 * these files; softmax or sigmoid), expert_weights_norm (default false), expert_weights_scale, expert_group_count and
 * expert_group_used_count (llama.cpp's asserts as refusals). The attention scale: llama.cpp's kq_scale = mscale^2 /
 * sqrt(key_length_mla), mscale = attn_factor_org (1 + 0.1 log_mul ln f) under YaRN of factor f, where the file's
 * yarn_log_multiplier is 0.1 log_mul; the rotation's magnitude M is rope.scaling.attn_factor A, times (1 + 0.1 ln f) only
 * without a log multiplier (ggml's rope multiplies by it and the context's attn_factor cancels it when the key is there). */
static kvb_status load_mla_keys(struct keys *k, struct kvb_model *m) {
    struct kvb_model_info *in = &m->info;
    uint32_t C, Q = 0, dk = 0, dv = 0, v;
    kvb_status st;
    if ((st = req_u32(k, "attention.kv_lora_rank", &C, 1, 1u << 16)) != KVB_OK) return st;
    if ((st = opt_u32(k, "attention.q_lora_rank", &Q, 0, 1u << 16)) != KVB_OK && st != KVB_ERR_INVALID) return st;
    if ((st = opt_u32(k, "attention.key_length_mla", &dk, 1, 1u << 16)) != KVB_OK && st != KVB_ERR_INVALID) return st;
    if ((st = opt_u32(k, "attention.value_length_mla", &dv, 1, 1u << 16)) != KVB_OK && st != KVB_ERR_INVALID) return st;
    if (!dk || !dv)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' or '%s' is missing: an older deepseek2 file with the fused attn_kv_b (per-head K/V, "
                                             "not the latent attn_k_b/attn_v_b) is not implemented; convert the model again with llama.cpp's "
                                             "current convert_hf_to_gguf.py", k->f->path, K(k, "attention.key_length_mla"), "value_length_mla");
    if ((int64_t)dk <= in->rope_dims)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %u must exceed the rotary dims %d", k->f->path, K(k, "attention.key_length_mla"), dk,
                        (int)in->rope_dims);
    if (in->head_dim != in->rope_dims + (int32_t)C)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %d must be the rotary dims %d plus kv_lora_rank %u (the latent row)", k->f->path,
                        K(k, "attention.key_length"), (int)in->head_dim, (int)in->rope_dims, C);
    if (in->head_dim_v_mla && in->head_dim_v_mla != (int32_t)C)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %d must be kv_lora_rank %u (the latent)", k->f->path, K(k, "attention.value_length"),
                        (int)in->head_dim_v_mla, C);
    if (in->n_head_kv != 1)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = %d: latent attention has one KV row per token (1)", k->f->path,
                        K(k, "attention.head_count_kv"), (int)in->n_head_kv);
    if ((st = opt_u32(k, "nextn_predict_layers", &v, 0, 64)) == KVB_OK && v > 0)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = %u: deepseek2's multi-token-prediction layers are not implemented", k->f->path, k->key, v);
    else if (st != KVB_OK && st != KVB_ERR_INVALID) return st;
    in->kv_lora_rank = (int32_t)C;
    in->q_lora_rank = (int32_t)Q;
    in->head_dim_k_mla = (int32_t)dk;
    in->head_dim_v_mla = (int32_t)dv;
    uint32_t g = KVB_MOE_SOFTMAX;
    if ((st = opt_u32(k, "expert_gating_func", &g, 0, 1u << 30)) != KVB_OK && st != KVB_ERR_INVALID) return st;
    if (g == 0) g = KVB_MOE_SOFTMAX; /* none: llama.cpp's default for deepseek2 files without the key */
    if (g != KVB_MOE_SOFTMAX && g != KVB_MOE_SIGMOID)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s' = %u: deepseek2 routes by softmax (1) or sigmoid (2); %s is not implemented", k->f->path,
                        K(k, "expert_gating_func"), g, g == 3 ? "softmax of the top logits (3)" : "an unknown gating function");
    m->moe_gating = (enum kvb_moe_gating)g;
    if ((st = load_norm_scale(k, m)) != KVB_OK) return st;
    uint32_t ng = 0, nu = 0;
    if ((st = opt_u32(k, "expert_group_count", &ng, 0, 512)) != KVB_OK && st != KVB_ERR_INVALID) return st;
    if ((st = opt_u32(k, "expert_group_used_count", &nu, 0, 512)) != KVB_OK && st != KVB_ERR_INVALID) return st;
    if (ng > 1) { /* llama.cpp's asserts */
        if ((int32_t)ng >= in->n_expert || in->n_expert % (int32_t)ng || nu == 0 || nu >= ng)
            return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %u with expert_group_used_count %u over %d experts: the groups must divide the "
                                             "experts and 0 < used < groups", k->f->path, K(k, "expert_group_count"), ng, nu, (int)in->n_expert);
        m->moe_groups = (int32_t)ng;
        m->moe_groups_used = (int32_t)nu;
        in->n_expert_groups = (int32_t)ng;
        in->n_expert_groups_used = (int32_t)nu;
    }
    kvb_family_mla(m);
    return KVB_OK;
}

void kvb_family_mla(struct kvb_model *m) {
    const struct kvb_model_info *in = &m->info;
    const double A = m->yarn_factor ? m->yarn_attn_factor : m->rope_mscale;
    const double f = m->yarn_factor ? m->yarn_factor : 1.0 / in->rope_freq_scale, L = log(f);
    const double lm = m->yarn_log_mul / 0.1; /* 0: the key absent (or 0: llama.cpp treats it as absent) */
    const double attn_factor = m->yarn_factor ? (lm != 0 ? A / (1.0 + 0.1 * L) : A) : A; /* the context's */
    const double mscale = attn_factor * (1.0 + 0.1 * L) * (1.0 + 0.1 * lm * L);
    m->rope_mscale = (float)(m->yarn_factor ? attn_factor * (1.0 + 0.1 * L) : A);
    const double kq = mscale * mscale / sqrt((double)in->head_dim_k_mla);
    m->mla_q_scale = (float)(kq * sqrt((double)in->head_dim));
}

/* Family keys beyond the shape and RoPE. */
static kvb_status load_family_keys(struct keys *k, const struct family *fam, struct kvb_model *m) {
    kvb_status st;
    if ((fam->traits & F_HYBRID) && (st = load_hybrid(k, m)) != KVB_OK) return st;
    if ((fam->traits & F_MLA) && (st = load_mla_keys(k, m)) != KVB_OK) return st;
    if ((fam->traits & F_SHORTCONV) && (st = load_shortconv(k, m)) != KVB_OK) return st;
    if ((fam->traits & F_MAMBA2) && (st = load_mamba2(k, m)) != KVB_OK) return st;
    if ((fam->traits & F_NEMOTRON) && m->info.n_expert > 0) { /* nemotron_h_moe: sigmoid routing, its norm and scale keys */
        if ((st = load_norm_scale(k, m)) != KVB_OK) return st;
        m->moe_gating = KVB_MOE_SIGMOID;
        int32_t n = 0; /* the layers with an FFN block hold the experts */
        for (int32_t l = 0; l < m->info.n_layer; l++) n += m->file_layer[2 * l + 1] >= 0;
        m->info.n_moe_layers = n;
    }
    if (fam->traits & F_MOE_SEL_BIAS) {
        if ((st = load_sel_bias_keys(k, m)) != KVB_OK) return st;
    } else if (fam->traits & F_GLM4MOE) {
        if ((st = load_glm4moe_keys(k, m)) != KVB_OK) return st;
    } else if ((fam->traits & F_MOE_LEAD) && !(fam->traits & F_MLA) && m->info.n_expert > 0) { /* 0 or absent: unscaled, as llama.cpp's build_moe_ffn */
        float sc = 0;
        if ((st = opt_f32(k, "expert_weights_scale", &sc)) != KVB_OK) return st;
        if (sc != 0) m->moe_scale = sc;
    }
    if ((fam->traits & F_OAI_WINDOWS) && (st = load_oai_windows(k, m)) != KVB_OK) return st;
    if ((fam->traits & F_GEMMA4) && (st = load_gemma4(k, m)) != KVB_OK) return st;
    if (fam->gemma && !(fam->traits & F_GEMMA4) && (st = load_gemma(k, fam, m)) != KVB_OK) return st;
    if (fam->traits & F_GRANITE) {
        float emb = 0, res = 0, att = 0, logit = 0;
        if ((st = opt_f32(k, "embedding_scale", &emb)) != KVB_OK) return st;
        if ((st = opt_f32(k, "residual_scale", &res)) != KVB_OK) return st;
        if ((st = opt_f32(k, "attention.scale", &att)) != KVB_OK) return st;
        /* granite, granitemoe: logit_scale required (llama.cpp's get_key); granitehybrid: optional */
        if (!(fam->traits & F_MAMBA2) && !kvb_gguf_find(k->f, K(k, "logit_scale"))) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' is missing", k->f->path, k->key);
        if ((st = opt_f32(k, "logit_scale", &logit)) != KVB_OK) return st;
        if (emb != 0) m->embd_scale = emb;
        if (res != 0) m->residual_scale = res;
        if (att != 0) m->q_scale = att * sqrtf((float)m->info.head_dim);
        if (logit != 0) m->logit_scale = logit;
    }
    if (fam->traits & F_TEMP) {
        float beta = 0;
        if ((st = opt_f32(k, "attention.temperature_scale", &beta)) != KVB_OK) return st;
        if (beta != 0) {
            if (m->rope_orig_ctx <= 0) return kvb_fail(KVB_ERR_CORRUPT, "%s: a query temperature needs the original context length", k->f->path);
            m->temp_beta = beta;
            m->temp_floor = m->rope_orig_ctx;
        }
    }
    return KVB_OK;
}

/* ---- tensors ---- */

struct binder {
    const struct gguf_file *f;
    const char *arch;
    uint8_t *used; /* [n_tensors] */
};

static const struct gguf_tensor *take(struct binder *b, const char *name) {
    const struct gguf_tensor *t = kvb_gguf_find_tensor(b->f, name);
    if (t) b->used[t - b->f->tensors] = 1;
    return t;
}

static kvb_status absent(struct binder *b, const char *name, enum need need) {
    return need == REQ ? kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s' is missing (architecture '%s' needs it)", b->f->path, name, b->arch) : KVB_OK;
}

/* A weight of n_out rows of n_in, or n_mat such stacked (llama.cpp's 3-D
 * experts, ne [n_in, n_out, n_mat]) seen as one of n_mat * n_out rows
 * (absent and optional: data NULL). */
static kvb_status bind_weights(struct binder *b, const char *name, int64_t n_in, int64_t n_out, int64_t n_mat, enum need need, struct kvb_mat *w) {
    memset(w, 0, sizeof *w);
    const struct gguf_tensor *t = need == NO ? NULL : take(b, name);
    if (!t) return absent(b, name, need);
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_mat || t->ne[3] != 1) {
        if (n_mat == 1)
            return kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]", b->f->path, name,
                            (long long)t->ne[0], (long long)t->ne[1], (long long)n_in, (long long)n_out);
        return kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld, %lld]", b->f->path, name,
                        (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)n_in, (long long)n_out, (long long)n_mat);
    }
    if (!kvb_matmul_supports(t->type))
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which kvbound's matmuls do not support", b->f->path, name,
                        kvb_ggml_type_name(t->type));
    *w = (struct kvb_mat){t->type, n_in, n_out * n_mat, kvb_ggml_row_size(t->type, n_in), t->data};
    return KVB_OK;
}

static kvb_status bind_mat(struct binder *b, const char *name, int64_t n_in, int64_t n_out, enum need need, struct kvb_mat *w) {
    return bind_weights(b, name, n_in, n_out, 1, need, w);
}

/* An f32 vector [n0], or a table of n1 of them (ne [n0, n1]: the experts' biases). */
static kvb_status bind_f32(struct binder *b, const char *name, int64_t n0, int64_t n1, enum need need, const float **out) {
    *out = NULL;
    const struct gguf_tensor *t = need == NO ? NULL : take(b, name);
    if (!t) return absent(b, name, need);
    if (t->type != GGML_TYPE_F32 || t->ne[0] != n0 || t->ne[1] != n1 || t->ne[2] != 1 || t->ne[3] != 1) {
        if (n1 == 1)
            return kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s' must be f32 [%lld], is %s [%lld, %lld]", b->f->path, name, (long long)n0,
                            kvb_ggml_type_name(t->type), (long long)t->ne[0], (long long)t->ne[1]);
        return kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s' must be f32 [%lld, %lld], is %s [%lld, %lld, %lld]", b->f->path, name, (long long)n0,
                        (long long)n1, kvb_ggml_type_name(t->type), (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2]);
    }
    if ((uintptr_t)t->data % 4) return kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s' is misaligned", b->f->path, name);
    *out = (const float *)t->data;
    return KVB_OK;
}

static kvb_status bind_vec(struct binder *b, const char *name, int64_t n, enum need need, const float **out) {
    return bind_f32(b, name, n, 1, need, out);
}

/* A per-tensor scale {1} (f32), optional: *out stays 1 when absent. */
static kvb_status bind_scalar(struct binder *b, const char *name, float *out) {
    const float *v;
    kvb_status st = bind_vec(b, name, 1, OPT, &v);
    if (st == KVB_OK && v) {
        if (!isfinite(*v)) return kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s' is not finite", b->f->path, name);
        *out = *v;
    }
    return st;
}

/* The generic scales llama.cpp loads for every architecture: <w>.scale
 * multiplies w's output; <w>.input_scale is bound and not used (nor is it
 * by llama.cpp's graphs). */
static kvb_status bind_scales(struct binder *b, const struct family *fam, int32_t l, struct kvb_layer *L, bool fused_qkv, bool fused_up, bool attn) {
    static const char *const w[] = {"attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    float s[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    char name[96];
    kvb_status st;
    for (int i = 0; i < 8; i++) {
        /* beside a fused tensor the parts' scales have nothing to scale: left unbound, so refused by name as unused */
        if ((fused_qkv && i < 3) || (!fused_qkv && i == 3) || (fused_up && i == 5)) continue;
        /* a Gated DeltaNet layer has no attention weights: scales of its own (attn_qkv, attn_gate, ssm_*) are not implemented,
         * left unbound and so refused by name */
        if (!attn && i < 5) continue;
        snprintf(name, sizeof name, "blk.%d.%s.scale", (int)l, w[i]);
        if ((st = bind_scalar(b, name, &s[i])) != KVB_OK) return st;
        float unused = 1;
        snprintf(name, sizeof name, "blk.%d.%s.input_scale", (int)l, w[i]);
        const bool had = kvb_gguf_find_tensor(b->f, name) != NULL;
        if ((st = bind_scalar(b, name, &unused)) != KVB_OK) return st;
        L->input_scales = L->input_scales || had;
    }
    L->s_q = fused_qkv ? s[3] : s[0];
    L->s_k = fused_qkv ? s[3] : s[1];
    L->s_v = fused_qkv ? s[3] : s[2];
    L->s_o = s[4];
    L->s_gate = fused_up ? s[6] : s[5];
    L->s_up = s[6];
    L->s_down = s[7];
    /* as llama.cpp's graph for the family: what it does not apply is bound and left at 1, and said */
    if (fam->traits & F_NO_QKV_SCALES) {
        L->scales_unused = L->scales_unused || L->s_q != 1 || L->s_k != 1 || L->s_v != 1;
        L->s_q = L->s_k = L->s_v = 1;
    }
    if (!(fam->traits & F_FFN_SCALES)) {
        L->scales_unused = L->scales_unused || L->s_gate != 1 || L->s_up != 1 || L->s_down != 1;
        L->s_gate = L->s_up = L->s_down = 1;
    }
    return KVB_OK;
}

/* A layer's experts: the router, the three stacks, and what llama.cpp loads
 * beside them: per-expert .scale tensors [n_expert] (applied where the
 * family's graph applies them, else bound and said) and .input_scale ones
 * (bound, unused, as there). */
static kvb_status bind_experts(struct binder *b, const struct family *fam, const struct kvb_model *m, int32_t l, struct kvb_layer *L) {
    const struct kvb_model_info *in = &m->info;
    const int64_t E = in->n_embd, N = in->n_expert, Fe = in->n_ff_exp;
    char name[96];
    kvb_status st;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", (int)l, s), name)
    if ((st = bind_mat(b, NAME("ffn_gate_inp.weight"), E, N, REQ, &L->router)) != KVB_OK) return st;
    const bool g4 = (fam->traits & F_GEMMA4) != 0;
    if (g4) { /* the router's input scale, the three norms around the experts */
        if ((st = bind_vec(b, NAME("ffn_gate_inp.scale"), E, REQ, &L->router_scale)) != KVB_OK) return st;
        if ((st = bind_vec(b, NAME("pre_ffw_norm_2.weight"), E, REQ, &L->pre_ffn_norm_2)) != KVB_OK) return st;
        if ((st = bind_vec(b, NAME("post_ffw_norm_1.weight"), E, REQ, &L->post_ffn_norm_1)) != KVB_OK) return st;
        if ((st = bind_vec(b, NAME("post_ffw_norm_2.weight"), E, REQ, &L->post_ffn_norm_2)) != KVB_OK) return st;
    }
    if ((fam->traits & F_GATE_UP_EXPS) && kvb_gguf_find_tensor(b->f, NAME("ffn_gate_up_exps.weight"))) { /* fused, or split below */
        if ((st = bind_weights(b, name, E, 2 * Fe, N, REQ, &L->gate_up_exps)) != KVB_OK) return st;
    } else if (fam->traits & F_NEMOTRON) { /* nemotron_h_moe: squared-ReLU experts, no gate */
        if ((st = bind_weights(b, NAME("ffn_up_exps.weight"), E, Fe, N, REQ, &L->up_exps)) != KVB_OK) return st;
    } else {
        if (!kvb_gguf_find_tensor(b->f, NAME("ffn_gate_exps.weight")))
            return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: tensor '%s' is missing: experts without a gate (silu(up)) are not supported", b->f->path, name);
        if ((st = bind_weights(b, name, E, Fe, N, REQ, &L->gate_exps)) != KVB_OK) return st;
        if ((st = bind_weights(b, NAME("ffn_up_exps.weight"), E, Fe, N, REQ, &L->up_exps)) != KVB_OK) return st;
    }
    if ((st = bind_weights(b, NAME("ffn_down_exps.weight"), Fe, E, N, REQ, &L->down_exps)) != KVB_OK) return st;
    const enum need nb = fam->traits & F_EXP_BIASES ? REQ : NO;
    if ((st = bind_vec(b, NAME("ffn_gate_inp.bias"), N, nb, &L->b_router)) != KVB_OK) return st;
    const enum need nsel = fam->traits & (F_MOE_SEL_BIAS | F_GLM4MOE | F_NEMOTRON) ? REQ : fam->traits & F_MLA ? OPT : NO;
    if ((st = bind_vec(b, NAME("exp_probs_b.bias"), N, nsel, &L->exp_probs_b)) != KVB_OK) return st;
    if ((st = bind_f32(b, NAME("ffn_gate_exps.bias"), Fe, N, nb, &L->b_gate_exps)) != KVB_OK) return st;
    if ((st = bind_f32(b, NAME("ffn_up_exps.bias"), Fe, N, nb, &L->b_up_exps)) != KVB_OK) return st;
    if ((st = bind_f32(b, NAME("ffn_down_exps.bias"), E, N, nb, &L->b_down_exps)) != KVB_OK) return st;
    static const char *const w[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    const float **sc[3] = {&L->s_gate_exps, &L->s_up_exps, &L->s_down_exps};
    for (int i = 0; i < 3; i++) {
        const float *v, *unused;
        char what[48];
        /* beside a fused gate/up stack llama.cpp creates no gate or up scales (it refuses a file with them): neither do we */
        const enum need ns = L->gate_up_exps.data && i < 2 ? NO : OPT;
        snprintf(what, sizeof what, "%s.scale", w[i]);
        if ((st = bind_vec(b, NAME(what), N, ns, &v)) != KVB_OK) return st;
        for (int64_t e = 0; v && e < N; e++)
            if (!isfinite(v[e])) return kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s' is not finite", b->f->path, name);
        if (fam->traits & F_EXP_SCALES) *sc[i] = v;
        else for (int64_t e = 0; v && e < N; e++) L->scales_unused = L->scales_unused || v[e] != 1.0f;
        snprintf(what, sizeof what, "%s.input_scale", w[i]);
        if ((st = bind_vec(b, NAME(what), N, ns, &unused)) != KVB_OK) return st;
        L->input_scales = L->input_scales || unused;
    }
    if (in->n_ff_shexp > 0) { /* the shared experts, and their .scale tensors (loaded by llama.cpp, which these graphs do not apply) */
        const int64_t Fs = in->n_ff_shexp;
        if ((st = bind_mat(b, NAME("ffn_gate_shexp.weight"), E, Fs, fam->traits & F_NEMOTRON ? NO : REQ, &L->gate_shexp)) != KVB_OK) return st;
        if ((st = bind_mat(b, NAME("ffn_up_shexp.weight"), E, Fs, REQ, &L->up_shexp)) != KVB_OK) return st;
        if ((st = bind_mat(b, NAME("ffn_down_shexp.weight"), Fs, E, REQ, &L->down_shexp)) != KVB_OK) return st;
        if ((st = bind_vec(b, NAME("ffn_gate_inp_shexp.weight"), E, fam->shexp == SH_GATED ? REQ : NO, &L->gate_inp_shexp)) != KVB_OK) return st;
        static const char *const sw[3] = {"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"};
        for (int i = 0; i < 3; i++) {
            char what[48];
            float s = 1, unused = 1;
            snprintf(what, sizeof what, "%s.scale", sw[i]);
            if ((st = bind_scalar(b, NAME(what), &s)) != KVB_OK) return st;
            if ((fam->traits & (F_HYBRID | F_NEMOTRON)) && s != 1.0f) /* its graph applies them; kvbound's shared experts run unscaled */
                return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: tensor '%s' scales the shared expert, which llama.cpp's '%s' applies and kvbound does not "
                                                     "implement", b->f->path, name, b->arch);
            L->scales_unused = L->scales_unused || s != 1.0f;
            snprintf(what, sizeof what, "%s.input_scale", sw[i]);
            const bool had = kvb_gguf_find_tensor(b->f, NAME(what)) != NULL;
            if ((st = bind_scalar(b, name, &unused)) != KVB_OK) return st;
            L->input_scales = L->input_scales || had;
        }
    }
#undef NAME
    return KVB_OK;
}

/* Rows [r0, r0 + n) of w as a matrix of their own. */
static struct kvb_mat rows_of(const struct kvb_mat *w, int64_t r0, int64_t n) {
    return (struct kvb_mat){w->type, w->n_in, n, w->row_bytes, w->data + (size_t)r0 * w->row_bytes};
}

/* A Gated DeltaNet layer's own tensors (the shapes of llama.cpp's qwen35 loaders). */
static kvb_status bind_ssm(struct binder *b, const struct kvb_model *m, int32_t l, struct kvb_layer *L) {
    const struct kvb_model_info *in = &m->info;
    const int64_t E = in->n_embd, Hk = in->ssm_groups, D = in->ssm_state, Hv = in->ssm_heads, K = in->ssm_conv, C = 2 * Hk * D + Hv * D;
    char name[96];
    kvb_status st;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", (int)l, s), name)
    if ((st = bind_mat(b, NAME("attn_qkv.weight"), E, C, REQ, &L->ssm_qkv)) != KVB_OK) return st;
    if ((st = bind_mat(b, NAME("attn_gate.weight"), E, Hv * D, REQ, &L->ssm_z)) != KVB_OK) return st;
    if ((st = bind_f32(b, NAME("ssm_conv1d.weight"), K, C, REQ, &L->ssm_conv)) != KVB_OK) return st;
    if ((st = bind_vec(b, NAME("ssm_dt.bias"), Hv, REQ, &L->ssm_dt)) != KVB_OK) return st;
    if ((st = bind_vec(b, NAME("ssm_a"), Hv, REQ, &L->ssm_a)) != KVB_OK) return st;
    if ((st = bind_mat(b, NAME("ssm_beta.weight"), E, Hv, REQ, &L->ssm_beta)) != KVB_OK) return st;
    if ((st = bind_mat(b, NAME("ssm_alpha.weight"), E, Hv, REQ, &L->ssm_alpha)) != KVB_OK) return st;
    if ((st = bind_vec(b, NAME("ssm_norm.weight"), D, REQ, &L->ssm_norm)) != KVB_OK) return st;
    if ((st = bind_mat(b, NAME("ssm_out.weight"), Hv * D, E, REQ, &L->ssm_out)) != KVB_OK) return st;
#undef NAME
    return KVB_OK;
}

/* A Mamba-2 layer's tensors (llama.cpp's shapes): ssm_in [2 DI + 2 G N + H][E], ssm_conv1d [Cx][K] and its optional bias,
 * ssm_dt.bias, ssm_a, ssm_d [H], ssm_norm [DI] (ne {DI / G, G}), ssm_out [E][DI]; ssm_in/ssm_out .scale applied (its graph
 * does), their .input_scale bound unused. */
static kvb_status bind_mamba2(struct binder *b, const struct kvb_model *m, int32_t l, struct kvb_layer *L) {
    const struct kvb_model_info *in = &m->info;
    const int64_t E = in->n_embd, DI = in->ssm_inner, N = in->ssm_state, H = in->ssm_heads, G = in->ssm_groups, K = in->ssm_conv;
    const int64_t Cx = DI + 2 * G * N;
    char name[96];
    kvb_status st;
    float unused = 1;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", (int)l, s), name)
    if ((st = bind_mat(b, NAME("ssm_in.weight"), E, DI + Cx + H, REQ, &L->ssm_qkv)) != KVB_OK) return st;
    if ((st = bind_f32(b, NAME("ssm_conv1d.weight"), K, Cx, REQ, &L->ssm_conv)) != KVB_OK) return st;
    if ((st = bind_vec(b, NAME("ssm_conv1d.bias"), Cx, OPT, &L->ssm_conv_b)) != KVB_OK) return st;
    if ((st = bind_vec(b, NAME("ssm_dt.bias"), H, REQ, &L->ssm_dt)) != KVB_OK) return st;
    if ((st = bind_f32(b, NAME("ssm_a"), 1, H, REQ, &L->ssm_a)) != KVB_OK) return st; /* ne {1, H} */
    if ((st = bind_f32(b, NAME("ssm_d"), 1, H, REQ, &L->ssm_d)) != KVB_OK) return st;
    if ((st = bind_f32(b, NAME("ssm_norm.weight"), DI / G, G, REQ, &L->ssm_norm)) != KVB_OK) return st;
    if ((st = bind_mat(b, NAME("ssm_out.weight"), DI, E, REQ, &L->ssm_out)) != KVB_OK) return st;
    if ((st = bind_scalar(b, NAME("ssm_in.scale"), &L->s_ssm_in)) != KVB_OK) return st;
    if ((st = bind_scalar(b, NAME("ssm_out.scale"), &L->s_ssm_out)) != KVB_OK) return st;
    if ((st = bind_scalar(b, NAME("ssm_in.input_scale"), &unused)) != KVB_OK) return st;
    if ((st = bind_scalar(b, NAME("ssm_out.input_scale"), &unused)) != KVB_OK) return st;
#undef NAME
    return KVB_OK;
}

/* A nemotron_h layer's tensors, by the file's block numbers (m->file_layer): its mixer block's attn_norm and Mamba-2
 * (bind_mamba2) or attention (q/k/v/o, biases optional, their .scale applied) tensors; the FFN block after it: its
 * attn_norm as the FFN's norm, ffn_up and ffn_down (biases optional, .scale applied, as llama.cpp's graph). */
static kvb_status bind_nemotron(struct binder *b, const struct kvb_model *m, int32_t l, struct kvb_layer *L) {
    const struct kvb_model_info *in = &m->info;
    const int32_t fm = m->file_layer[2 * l], ff = m->file_layer[2 * l + 1];
    const int64_t E = in->n_embd, QD = (int64_t)in->n_head * in->head_dim, KD = (int64_t)in->n_head_kv * in->head_dim, F = in->n_ff;
    char name[96];
    kvb_status st;
    float unused = 1;
#define NAME(i, s) (snprintf(name, sizeof name, "blk.%d.%s", (int)(i), s), name)
    if ((st = bind_vec(b, NAME(fm, "attn_norm.weight"), E, REQ, &L->attn_norm)) != KVB_OK) return st;
    if (m->recurrent[l]) {
        if ((st = bind_mamba2(b, m, fm, L)) != KVB_OK) return st;
    } else {
        const struct { const char *w; struct kvb_mat *mat; int64_t nin, nout; const float **bias; float *s; } a[4] = {
            {"attn_q", &L->wq, E, QD, &L->bq, &L->s_q}, {"attn_k", &L->wk, E, KD, &L->bk, &L->s_k},
            {"attn_v", &L->wv, E, KD, &L->bv, &L->s_v}, {"attn_output", &L->wo, QD, E, &L->bo, &L->s_o}};
        for (int i = 0; i < 4; i++) {
            char w[64];
            snprintf(w, sizeof w, "%s.weight", a[i].w);
            if ((st = bind_mat(b, NAME(fm, w), a[i].nin, a[i].nout, REQ, a[i].mat)) != KVB_OK) return st;
            snprintf(w, sizeof w, "%s.bias", a[i].w);
            if ((st = bind_vec(b, NAME(fm, w), a[i].nout, OPT, a[i].bias)) != KVB_OK) return st;
            snprintf(w, sizeof w, "%s.scale", a[i].w);
            if ((st = bind_scalar(b, NAME(fm, w), a[i].s)) != KVB_OK) return st;
            snprintf(w, sizeof w, "%s.input_scale", a[i].w);
            if ((st = bind_scalar(b, NAME(fm, w), &unused)) != KVB_OK) return st;
        }
    }
    if (ff >= 0 && in->n_expert > 0) { /* nemotron_h_moe: the FFN block's experts and shared expert */
        if ((st = bind_vec(b, NAME(ff, "attn_norm.weight"), E, REQ, &L->ffn_norm)) != KVB_OK) return st;
        if ((st = bind_experts(b, family_of(in->arch), m, ff, L)) != KVB_OK) return st;
    } else if (ff >= 0) {
        if ((st = bind_vec(b, NAME(ff, "attn_norm.weight"), E, REQ, &L->ffn_norm)) != KVB_OK) return st;
        if ((st = bind_mat(b, NAME(ff, "ffn_up.weight"), E, F, REQ, &L->w_up)) != KVB_OK) return st;
        if ((st = bind_mat(b, NAME(ff, "ffn_down.weight"), F, E, REQ, &L->w_down)) != KVB_OK) return st;
        if ((st = bind_vec(b, NAME(ff, "ffn_up.bias"), F, OPT, &L->b_up)) != KVB_OK) return st;
        if ((st = bind_vec(b, NAME(ff, "ffn_down.bias"), E, OPT, &L->b_down)) != KVB_OK) return st;
        if ((st = bind_scalar(b, NAME(ff, "ffn_up.scale"), &L->s_up)) != KVB_OK) return st;
        if ((st = bind_scalar(b, NAME(ff, "ffn_down.scale"), &L->s_down)) != KVB_OK) return st;
        if ((st = bind_scalar(b, NAME(ff, "ffn_up.input_scale"), &unused)) != KVB_OK) return st;
        if ((st = bind_scalar(b, NAME(ff, "ffn_down.input_scale"), &unused)) != KVB_OK) return st;
    }
#undef NAME
    return KVB_OK;
}

/* An lfm2 short-conv layer's tensors (llama.cpp's shapes): in_proj [3E][E] (B, C, x), conv [E][K], out_proj [E][E]. */
static kvb_status bind_shortconv(struct binder *b, const struct kvb_model *m, int32_t l, struct kvb_layer *L) {
    const int64_t E = m->info.n_embd, K = m->info.ssm_conv;
    char name[96];
    kvb_status st;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", (int)l, s), name)
    if ((st = bind_mat(b, NAME("shortconv.in_proj.weight"), E, 3 * E, REQ, &L->ssm_qkv)) != KVB_OK) return st;
    if ((st = bind_f32(b, NAME("shortconv.conv.weight"), K, E, REQ, &L->ssm_conv)) != KVB_OK) return st;
    if ((st = bind_mat(b, NAME("shortconv.out_proj.weight"), E, E, REQ, &L->ssm_out)) != KVB_OK) return st;
#undef NAME
    return KVB_OK;
}

/* A deepseek2 layer's latent attention (the shapes of llama.cpp's deepseek2 loader). */
static kvb_status bind_mla(struct binder *b, const struct kvb_model *m, int32_t l, struct kvb_layer *L) {
    const struct kvb_model_info *in = &m->info;
    const int64_t E = in->n_embd, H = in->n_head, R = in->rope_dims, C = in->kv_lora_rank, Dk = in->head_dim_k_mla, Dv = in->head_dim_v_mla;
    const int64_t QL = in->q_lora_rank;
    char name[96];
    kvb_status st;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", (int)l, s), name)
    if (kvb_gguf_find_tensor(b->f, NAME("attn_kv_b.weight")))
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: tensor '%s' (the older fused per-head K/V) is not implemented: kvbound runs the latent form "
                                             "(attn_k_b, attn_v_b); convert the model again with llama.cpp's current converter", b->f->path, name);
    const enum need nq = QL > 0 ? REQ : NO;
    if ((st = bind_mat(b, NAME("attn_q_a.weight"), E, QL, nq, &L->wq_a)) != KVB_OK) return st;
    if ((st = bind_vec(b, NAME("attn_q_a_norm.weight"), QL, nq, &L->q_a_norm)) != KVB_OK) return st;
    if ((st = bind_mat(b, NAME("attn_q_b.weight"), QL, H * Dk, nq, &L->wq_b)) != KVB_OK) return st;
    if ((st = bind_mat(b, NAME("attn_q.weight"), E, H * Dk, QL > 0 ? NO : REQ, &L->wq)) != KVB_OK) return st;
    if ((st = bind_mat(b, NAME("attn_kv_a_mqa.weight"), E, C + R, REQ, &L->wkv_a)) != KVB_OK) return st;
    if ((st = bind_vec(b, NAME("attn_kv_a_norm.weight"), C, REQ, &L->kv_a_norm)) != KVB_OK) return st;
    if ((st = bind_weights(b, NAME("attn_k_b.weight"), Dk - R, C, H, REQ, &L->wk_b)) != KVB_OK) return st;
    if ((st = bind_weights(b, NAME("attn_v_b.weight"), C, Dv, H, REQ, &L->wv_b)) != KVB_OK) return st;
    if ((st = bind_mat(b, NAME("attn_output.weight"), H * Dv, E, REQ, &L->wo)) != KVB_OK) return st;
#undef NAME
    return KVB_OK;
}

/* A multi-token-prediction layer's own tensors (beside its attention and FFN), as llama.cpp loads them. */
static kvb_status bind_nextn(struct binder *b, const struct kvb_model *m, int32_t l, struct kvb_layer *L) {
    const int64_t E = m->info.n_embd, V = m->info.n_vocab;
    char name[96];
    kvb_status st;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.nextn.%s", (int)l, s), name)
    if ((st = bind_mat(b, NAME("eh_proj.weight"), 2 * E, E, REQ, &L->nextn_eh_proj)) != KVB_OK) return st;
    if ((st = bind_vec(b, NAME("enorm.weight"), E, REQ, &L->nextn_enorm)) != KVB_OK) return st;
    if ((st = bind_vec(b, NAME("hnorm.weight"), E, REQ, &L->nextn_hnorm)) != KVB_OK) return st;
    if ((st = bind_mat(b, NAME("embed_tokens.weight"), E, V, OPT, &L->nextn_embed)) != KVB_OK) return st;
    if ((st = bind_mat(b, NAME("shared_head_head.weight"), E, V, OPT, &L->nextn_head)) != KVB_OK) return st;
    if ((st = bind_vec(b, NAME("shared_head_norm.weight"), E, OPT, &L->nextn_head_norm)) != KVB_OK) return st;
#undef NAME
    return KVB_OK;
}

/* Gemma 4's per-layer input (PLE) and output scale. */
static kvb_status bind_ple(struct binder *b, const struct kvb_model *m, int32_t l, struct kvb_layer *L) {
    const int64_t E = m->info.n_embd, P = m->n_ple;
    char name[96];
    kvb_status st;
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", (int)l, s), name)
    const enum need np = P > 0 ? REQ : NO;
    if ((st = bind_mat(b, NAME("inp_gate.weight"), E, P, np, &L->ple_gate)) != KVB_OK) return st;
    if ((st = bind_mat(b, NAME("proj.weight"), P, E, np, &L->ple_proj)) != KVB_OK) return st;
    if ((st = bind_vec(b, NAME("post_norm.weight"), E, np, &L->ple_norm)) != KVB_OK) return st;
    L->has_out_scale = kvb_gguf_find_tensor(b->f, NAME("layer_output_scale.weight")) != NULL;
    if ((st = bind_scalar(b, name, &L->out_scale)) != KVB_OK) return st;
#undef NAME
    return KVB_OK;
}

/* Gemma 4's per-layer token embeddings, when P > 0. */
static kvb_status bind_ple_globals(struct binder *b, struct kvb_model *m) {
    const int64_t E = m->info.n_embd, P = m->n_ple, PL = P * m->info.n_layer, V = m->info.n_vocab;
    const enum need np = P > 0 ? REQ : NO;
    kvb_status st;
    if ((st = bind_mat(b, "per_layer_token_embd.weight", PL, V, np, &m->ple_embd)) != KVB_OK) return st;
    if ((st = bind_mat(b, "per_layer_model_proj.weight", E, PL, np, &m->ple_model_proj)) != KVB_OK) return st;
    return bind_vec(b, "per_layer_proj_norm.weight", P, np, &m->ple_proj_norm);
}

static kvb_status bind_layer(struct binder *b, const struct family *fam, const struct kvb_model *m, int32_t l, struct kvb_layer *L) {
    const struct kvb_model_info *in = &m->info;
    const int64_t Dl = kvb_layer_head_dim(m, l); /* gemma4's window layers: their own head size */
    const int64_t E = in->n_embd, QD = (int64_t)in->n_head * Dl, KD = (int64_t)kvb_layer_n_kv(m, l) * Dl, F = kvb_layer_n_ff(m, l);
    const int64_t QR = m->q_gate ? 2 * QD : QD; /* attn_q's rows: the query, or query and gate per head */
    const bool rec = m->recurrent && l < in->n_layer && m->recurrent[l]; /* a Gated DeltaNet layer: no attention weights */
    uint8_t need[S_COUNT];
    memcpy(need, fam->need, sizeof need);
    if (rec)
        for (int s = S_Q; s <= S_BO; s++) need[s] = NO;
    const bool reader = m->kv_source && l < in->n_layer && m->kv_source[l] >= 0; /* gemma4's KV-shared layer: its K weights optional, unused */
    if (reader) need[S_K] = need[S_K_NORM] = OPT;
    const bool moe = in->n_expert > 0 && l >= in->n_layer - in->n_moe_layers; /* the leading n_layer - n_moe_layers are dense */
    if (moe && !(fam->traits & F_GEMMA4)) /* experts instead of the dense FFN (gemma4: beside it) */
        need[S_GATE] = need[S_UP] = need[S_DOWN] = need[S_BGATE] = need[S_BUP] = need[S_BDOWN] = NO;
    char name[S_COUNT][96];
    for (int s = 0; s < S_COUNT; s++) snprintf(name[s], sizeof name[s], "blk.%d.%s", (int)l, k_slots[s]);
    kvb_status st;
#define VEC(s, n, dst) if ((st = bind_vec(b, name[s], n, (enum need)need[s], &(dst))) != KVB_OK) return st
#define MAT(s, nin, nout, dst, req) if ((st = bind_mat(b, name[s], nin, nout, req, &(dst))) != KVB_OK) return st
    VEC(S_ATTN_NORM, E, L->attn_norm);
    struct kvb_mat qkv;
    MAT(S_QKV, E, QD + 2 * KD, qkv, (enum need)need[S_QKV]);
    if (qkv.data) { /* fused: Q, K and V rows of one tensor, and one bias */
        L->wq = rows_of(&qkv, 0, QD);
        L->wk = rows_of(&qkv, QD, KD);
        L->wv = rows_of(&qkv, QD + KD, KD);
        const float *bqkv;
        VEC(S_BQKV, QD + 2 * KD, bqkv);
        if (bqkv) { L->bq = bqkv; L->bk = bqkv + QD; L->bv = bqkv + QD + KD; }
    } else {
        const enum need nq = need[S_Q] == OPT ? REQ : (enum need)need[S_Q]; /* optional only beside a fused attn_qkv */
        const bool own = fam->traits & F_GEMMA4; /* each its own need: attn_v optional (V from the raw K), attn_k on shared layers */
        MAT(S_Q, E, QR, L->wq, nq);
        MAT(S_K, E, KD, L->wk, own ? (enum need)need[S_K] : nq);
        MAT(S_V, E, KD, L->wv, own ? (enum need)need[S_V] : nq);
        VEC(S_BQ, QD, L->bq);
        VEC(S_BK, KD, L->bk);
        VEC(S_BV, KD, L->bv);
    }
    VEC(S_Q_NORM, m->qk_norm_whole ? QD : Dl, L->q_norm);
    VEC(S_K_NORM, m->qk_norm_whole ? KD : Dl, L->k_norm);
    MAT(S_O, QD, E, L->wo, (enum need)need[S_O]);
    VEC(S_BO, E, L->bo);
    VEC(S_POST_ATTN_NORM, E, L->post_attn_norm);
    VEC(S_FFN_NORM, E, L->ffn_norm);
    if (fam->traits & F_FUSED_UP) { /* gate rows, then up rows */
        struct kvb_mat gu;
        MAT(S_UP, E, 2 * F, gu, REQ);
        L->w_gate = rows_of(&gu, 0, F);
        L->w_up = rows_of(&gu, F, F);
    } else {
        MAT(S_GATE, E, F, L->w_gate, (enum need)need[S_GATE]);
        MAT(S_UP, E, F, L->w_up, (enum need)need[S_UP]);
    }
    MAT(S_DOWN, F, E, L->w_down, (enum need)need[S_DOWN]);
    VEC(S_BGATE, F, L->b_gate);
    VEC(S_BUP, F, L->b_up);
    VEC(S_BDOWN, E, L->b_down);
    VEC(S_POST_FFN_NORM, E, L->post_ffn_norm);
    if ((st = bind_scales(b, fam, l, L, qkv.data != NULL, (fam->traits & F_FUSED_UP) != 0, !rec)) != KVB_OK) return st;
    if (rec && (st = (in->shortconv ? bind_shortconv : in->mamba2 ? bind_mamba2 : bind_ssm)(b, m, l, L)) != KVB_OK) return st;
    if ((fam->traits & F_MLA) && (st = bind_mla(b, m, l, L)) != KVB_OK) return st;
    if (l >= in->n_layer && (st = bind_nextn(b, m, l, L)) != KVB_OK) return st;
    if (moe && (st = bind_experts(b, fam, m, l, L)) != KVB_OK) return st;
    if ((fam->traits & F_GEMMA4) && (st = bind_ple(b, m, l, L)) != KVB_OK) return st;
    if (fam->traits & F_FFN_NORM_AS_POST) { /* the norm before the FFN, on the residual stream */
        L->ffn_norm = L->post_attn_norm;
        L->post_attn_norm = NULL;
    }
#undef VEC
#undef MAT
    return KVB_OK;
}

/* The global tensors, after the shape and before RoPE (rope_freqs feeds it). */
static kvb_status bind_globals(struct binder *b, const struct family *fam, struct kvb_model *m, const float **ff) {
    struct kvb_model_info *in = &m->info;
    const int64_t E = in->n_embd, V = in->n_vocab;
    kvb_status st;
    if ((st = bind_mat(b, "token_embd.weight", E, V, REQ, &m->tok_embd)) != KVB_OK) return st;
    if ((st = bind_vec(b, output_norm_name(fam), E, REQ, &m->output_norm)) != KVB_OK) return st;
    if ((fam->traits & F_TIED_ALWAYS) && kvb_gguf_find_tensor(b->f, "output.weight"))
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: tensor 'output.weight': '%s' ties its output to token_embd.weight always (llama.cpp never reads "
                                             "output.weight and refuses the file)", b->f->path, b->arch);
    if ((st = bind_mat(b, "output.weight", E, V, fam->traits & F_OUTPUT_REQ ? REQ : fam->traits & F_TIED_ALWAYS ? NO : OPT, &m->output)) != KVB_OK)
        return st;
    in->tied_output = !m->output.data;
    if (in->tied_output) m->output = m->tok_embd;
    if ((st = bind_vec(b, "output.bias", V, fam->traits & F_OUTPUT_BIAS ? OPT : NO, &m->output_bias)) != KVB_OK) return st;
    m->output_scale = 1.0f;
    if ((st = bind_scalar(b, "output.scale", &m->output_scale)) != KVB_OK) return st;
    float unused = 1;
    if ((st = bind_scalar(b, "output.input_scale", &unused)) != KVB_OK) return st;
    if (fam->traits & F_CLS_HEAD) { /* a reranker's classifier: generation does not read it, nor does llama.cpp's */
        const struct gguf_tensor *cw = take(b, "cls.output.weight"), *cb = take(b, "cls.output.bias");
        if ((cw && (cw->ne[0] != E || cw->ne[2] != 1)) || (cb && !cw))
            return kvb_fail(KVB_ERR_CORRUPT, "%s: tensor 'cls.output' has the wrong shape", b->f->path);
        m->cls_head = cw != NULL;
    }
    /* rotary factors: [rope_dims / 2] (load_shape read the dims); gemma4's: [head_dim / 2], as llama.cpp */
    const int64_t R = fam->traits & F_GEMMA4 ? in->head_dim : in->rope_dims;
    struct keys k = {b->f, b->arch, {0}};
    if ((st = bind_vec(b, "rope_freqs.weight", R / 2, fam->traits & F_ROPE_FREQS ? OPT : NO, ff)) != KVB_OK) return st;
    struct gguf_str s;
    const bool longrope = (fam->traits & F_LONGROPE) ||
                          ((fam->traits & F_ROPE_FREQS) && kvb_gguf_get_str(b->f, K(&k, "rope.scaling.type"), &s, false) == KVB_OK &&
                           kvb_gguf_str_eq(s, "longrope"));
    const float *shrt = NULL;
    if ((st = bind_vec(b, "rope_factors_short.weight", R / 2, longrope ? OPT : NO, &shrt)) != KVB_OK) return st;
    if ((st = bind_vec(b, "rope_factors_long.weight", R / 2, longrope ? OPT : NO, &m->rope_freqs_long)) != KVB_OK) return st;
    if (shrt) {
        if (*ff) return kvb_fail(KVB_ERR_CORRUPT, "%s: both rope_freqs.weight and rope_factors_short.weight", b->f->path);
        *ff = shrt;
    }
    return KVB_OK;
}

/* Every layer's sink logits [n_head], into one array the caches copy. */
static kvb_status bind_sinks(struct binder *b, struct kvb_model *m) {
    const struct kvb_model_info *in = &m->info;
    if (!(m->sinks = kvb_malloc(sizeof(float) * (size_t)in->n_layer * (size_t)in->n_head))) return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", b->f->path);
    char name[96];
    for (int32_t l = 0; l < in->n_layer; l++) {
        const float *v;
        snprintf(name, sizeof name, "blk.%d.attn_sinks.weight", (int)l);
        kvb_status st = bind_vec(b, name, in->n_head, REQ, &v);
        if (st != KVB_OK) return st;
        for (int32_t h = 0; h < in->n_head; h++)
            if (!isfinite(v[h])) return kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s' is not finite", b->f->path, name);
        memcpy(m->sinks + (size_t)l * in->n_head, v, sizeof(float) * (size_t)in->n_head);
    }
    return KVB_OK;
}

kvb_status kvb_family_load(const struct gguf_file *f, struct kvb_model *m) {
    struct gguf_str a;
    kvb_status st = kvb_gguf_get_str(f, "general.architecture", &a, true);
    if (st != KVB_OK) return st;
    const struct family *fam = find_family(a);
    if (!fam)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: architecture '%.*s' is not supported (%s)", f->path, (int)KVB_MIN(a.n, (uint64_t)32), a.p,
                        kvb_family_names());
    struct kvb_model_info *in = &m->info;
    snprintf(in->arch, sizeof in->arch, "%s", fam->arch);
    snprintf(in->source, sizeof in->source, "gguf");
    kvb_model_neutral(m);
    struct keys k = {f, fam->arch, {0}};
    if ((st = load_shape(&k, fam, m)) != KVB_OK) return st;
    if ((st = kvb_vocab_from_gguf(f, &m->vocab)) != KVB_OK) return st;
    if ((st = kvb_vocab_read_chat_template(f, m->vocab, f->path)) != KVB_OK) return st;
    in->n_vocab = m->vocab->n;
    if ((st = kvb_family_traits(m, NULL)) != KVB_OK) return st;
    struct binder b = {f, fam->arch, kvb_calloc((size_t)KVB_MAX(f->n_tensors, 1), 1)};
    if (!b.used) return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", f->path);
    const float *ff = NULL;
    st = bind_globals(&b, fam, m, &ff);
    if (st == KVB_OK) st = load_rope(&k, fam, m, ff);
    if (st == KVB_OK) st = load_family_keys(&k, fam, m);
    if (st == KVB_OK && (fam->traits & F_GEMMA4)) st = bind_ple_globals(&b, m);
    const int32_t n_all = in->n_layer + in->n_nextn_layers; /* the MTP layers last */
    if (st == KVB_OK && !(m->layers = kvb_calloc((size_t)n_all, sizeof *m->layers))) st = kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", f->path);
    if (st == KVB_OK) kvb_layers_neutral(m->layers, n_all);
    for (int32_t l = 0; st == KVB_OK && l < n_all; l++)
        st = fam->traits & F_NEMOTRON ? bind_nemotron(&b, m, l, &m->layers[l]) : bind_layer(&b, fam, m, l, &m->layers[l]);
    if (st == KVB_OK && (fam->traits & F_SINKS)) st = bind_sinks(&b, m);
    for (uint64_t i = 0; st == KVB_OK && i < f->n_tensors; i++)
        if (!b.used[i] && fam->gemma && f->tensors[i].name.n > 8 &&
            (!memcmp(f->tensors[i].name.p, "dense_2.", 8) || !memcmp(f->tensors[i].name.p, "dense_3.", 8)))
            st = kvb_fail(KVB_ERR_UNSUPPORTED, "%s: tensor '%.*s' is EmbeddingGemma's sentence-embedding projection (embeddings only, never "
                                               "generation), which kvbound does not implement; llama.cpp's '%s' refuses it too",
                          f->path, (int)KVB_MIN(f->tensors[i].name.n, (uint64_t)96), f->tensors[i].name.p, fam->arch);
        else if (!b.used[i] && (fam->traits & F_SHORTCONV) && f->tensors[i].name.n > 8 && !memcmp(f->tensors[i].name.p, "dense_2.", 8))
            st = kvb_fail(KVB_ERR_UNSUPPORTED, "%s: tensor '%.*s' is LFM2-ColBERT's late-interaction projection (embeddings only, never "
                                               "generation), which kvbound does not implement",
                          f->path, (int)KVB_MIN(f->tensors[i].name.n, (uint64_t)96), f->tensors[i].name.p);
        else if (!b.used[i])
            st = kvb_fail(KVB_ERR_UNSUPPORTED, "%s: tensor '%.*s' is not used by architecture '%s'; kvbound refuses a file it would compute "
                                               "without it (as llama.cpp does)",
                          f->path, (int)KVB_MIN(f->tensors[i].name.n, (uint64_t)96), f->tensors[i].name.p, fam->arch);
    kvb_free(b.used);
    if (st == KVB_OK) in->has_qkv_bias = m->layers[0].bq != NULL;
    bool unused = false;
    for (int32_t l = 0; st == KVB_OK && l < in->n_layer; l++) unused = unused || m->layers[l].scales_unused;
    if (unused)
        kvb_logf(KVB_LOG_WARN, "%s: .scale tensors that llama.cpp's '%s' graph does not apply are not applied here either", f->path, fam->arch);
    return st;
}

/* ---- in words ---- */

void kvb_family_describe(const struct kvb_model *m, char *out, size_t cap) {
    const struct kvb_layer *L = m->info.n_layer > 0 && m->layers ? &m->layers[0] : NULL;
    size_t n = 0;
    out[0] = 0;
#define ADD(...) do { if (n < cap) { int w_ = snprintf(out + n, cap - n, "%s", n ? "; " : ""); if (w_ > 0) n += (size_t)w_; } \
                      if (n < cap) { int w_ = snprintf(out + n, cap - n, __VA_ARGS__); if (w_ > 0) n += (size_t)w_; } } while (0)
    if (m->recurrent && m->info.shortconv) ADD("short conv %d of %d (L_cache %d)", (int)m->info.n_rec_layers, (int)m->info.n_layer, (int)m->info.ssm_conv);
    else if (m->recurrent && m->info.mamba2)
        ADD("mamba2 %d of %d (%d heads, %d groups, state %d)", (int)m->info.n_rec_layers, (int)m->info.n_layer, (int)m->info.ssm_heads,
            (int)m->info.ssm_groups, (int)m->info.ssm_state);
    else if (m->recurrent) ADD("gated deltanet %d of %d", (int)m->info.n_rec_layers, (int)m->info.n_layer);
    if (m->file_layer) {
        int32_t nf = 0;
        for (int32_t l = 0; l < m->info.n_layer; l++) nf += m->file_layer[2 * l + 1] >= 0;
        ADD("%d blocks: %d squared-ReLU FFN blocks each run after the block before it", (int)m->n_file_layers, (int)nf);
    }
    if (m->q_gate) ADD("gated attention");
    if (m->info.kv_lora_rank) /* the latent row per token against the per-head K and V it replaces (f16 bytes per layer) */
        ADD("latent attention (%s): row %d+%d for %d heads' K %d, V %d", m->info.q_lora_rank ? "q_lora" : "attn_q", (int)m->info.rope_dims,
            (int)m->info.kv_lora_rank, (int)m->info.n_head, (int)m->info.head_dim_k_mla, (int)m->info.head_dim_v_mla);
    if (m->moe_groups) ADD("experts in %d groups, %d used", (int)m->moe_groups, (int)m->moe_groups_used);
    if (m->info.n_nextn_layers > 0) ADD("MTP layers %d (not run)", (int)m->info.n_nextn_layers);
    /* gemma4's first: features[] is short */
    if (m->info.n_kv_shared) ADD("%d KV-shared layers", (int)m->info.n_kv_shared);
    if (m->head_dim_swa && m->head_dim_swa != m->info.head_dim) ADD("window heads %d (rotary %d)", (int)m->head_dim_swa, (int)m->rope_dims_swa);
    if (m->v_norm) ADD("V norm");
    if (m->n_ple) ADD("PLE %d", (int)m->n_ple);
    if (m->n_kv_layer) ADD("KV heads %d window, %d global", (int)m->info.n_head_kv_swa, (int)m->info.n_head_kv_global);
    if (m->layers && m->info.n_layer > 0 && m->layers[0].router_scale) ADD("experts beside the dense FFN");
    for (int32_t l = 0; m->layers && l < m->info.n_layer; l++) /* the first attention layer's, for the lines below */
        if (!m->recurrent || !m->recurrent[l]) { L = &m->layers[l]; break; }
    if (m->info.n_expert > 0)
        ADD("%d of %d experts per token (%s%s), expert FFN %d", (int)m->info.n_expert_used, (int)m->info.n_expert,
            m->moe_gating == KVB_MOE_SOFTMAX_WEIGHT ? "softmax of the top logits" : m->moe_gating == KVB_MOE_SIGMOID ? "sigmoid" : "softmax",
            m->moe_norm ? ", renormalized" : "", (int)m->info.n_ff_exp);
    bool sel_bias = false;
    for (int32_t l = 0; m->layers && m->info.n_expert > 0 && l < m->info.n_layer; l++) sel_bias = sel_bias || m->layers[l].exp_probs_b;
    if (sel_bias) ADD("expert selection bias");
    if (m->info.n_expert > 0 && m->moe_scale != 1.0f) ADD("expert weights x%g", (double)m->moe_scale);
    if (m->info.n_ff_shexp > 0)
        ADD("%sshared experts of FFN %d", m->layers && m->layers[m->info.n_layer - 1].gate_inp_shexp ? "gated " : "", (int)m->info.n_ff_shexp);
    if (m->info.n_expert > 0 && m->info.n_moe_layers < m->info.n_layer && !m->file_layer) { /* (nemotron_h_moe: the layers with an FFN block) */
        const int32_t lead = m->info.n_layer - m->info.n_moe_layers;
        ADD("the first %d layer%s dense", (int)lead, lead == 1 ? "" : "s");
    }
    if (m->act == KVB_FFN_SWIGLU_OAI) ADD("clamped SwiGLU");
    if (m->sinks) ADD("attention sinks");
    if (L && (L->bo || L->b_gate || L->b_up || L->b_down)) ADD("output/FFN biases");
    if (L && (L->s_q != 1 || L->s_k != 1 || L->s_v != 1 || L->s_o != 1 || L->s_gate != 1 || L->s_up != 1 || L->s_down != 1))
        ADD("per-tensor output scales");
    if (L && L->input_scales) ADD("input scales (unused, as in llama.cpp)");
    bool any_unused = false;
    for (int32_t l = 0; m->layers && l < m->info.n_layer; l++) any_unused = any_unused || m->layers[l].scales_unused;
    if (any_unused) ADD("%s .scale tensors not applied (as llama.cpp's %s graph)", m->qk_norm_whole ? "q/k/v and FFN" : "FFN", m->info.arch);
    if (m->output_scale != 1.0f) ADD("output scale %g", (double)m->output_scale);
    if (m->cls_head) ADD("a reranker head (unused by generation, as in llama.cpp)");
    if (L && L->q_norm) ADD("q/k norms %s", m->qk_norm_whole ? "over the projection" : "per head");
    if (L && !L->attn_norm) ADD("no pre-norms");
    if (L && (L->post_attn_norm || L->post_ffn_norm)) ADD("post norms");
    if (m->output_bias) ADD("output bias");
    if (m->act == KVB_FFN_GELU_TANH) ADD("GeGLU");
    if (m->embd_scale != 1.0f || m->residual_scale != 1.0f || m->q_scale != 1.0f || m->logit_scale != 1.0f) { /* those not neutral */
        char sc[128];
        size_t k = 0;
        sc[0] = 0;
#define SC(cond, ...) do { if ((cond) && k < sizeof sc) { int w_ = snprintf(sc + k, sizeof sc - k, __VA_ARGS__); if (w_ > 0) k += (size_t)w_; } } while (0)
        SC(m->embd_scale != 1.0f, "%sembedding %g", k ? ", " : "", (double)m->embd_scale);
        SC(m->residual_scale != 1.0f, "%sresidual %g", k ? ", " : "", (double)m->residual_scale);
        SC(m->q_scale != 1.0f, "%sattention %g", k ? ", " : "", (double)(m->q_scale / sqrtf((float)m->info.head_dim)));
        SC(m->logit_scale != 1.0f, "%slogits 1/%g", k ? ", " : "", (double)m->logit_scale);
#undef SC
        ADD("scales: %s", sc);
    }
    if (m->info.rope_type == KVB_ROPE_NONE) ADD("no RoPE");
    int32_t nope = 0;
    for (int32_t l = 0; m->no_rope && l < m->info.n_layer; l++) nope += m->no_rope[l];
    if (nope) ADD("%d of %d layers without RoPE (every fourth)", nope, m->info.n_layer);
    if (m->info.rope_dims < m->info.head_dim) ADD("rotary %d of %d dims", m->info.rope_dims, m->info.head_dim);
    if (m->yarn_factor) ADD("YaRN x%g from %d", (double)m->yarn_factor, m->rope_orig_ctx);
    if (m->rope_freqs_long) ADD("LongRoPE, long factors past %d", m->rope_orig_ctx); /* the context rounded up to 256 (kvb_model_cache_params); features[] is short */
    if (m->rope_mscale != 1.0f) ADD("RoPE magnitude %g", (double)m->rope_mscale);
    if (m->temp_beta != 0) ADD("query temperature %g per %d", (double)m->temp_beta, m->temp_floor);
    if (m->attn_softcap != 0) ADD("attention softcap %g", (double)m->attn_softcap);
    if (m->final_softcap != 0) ADD("final softcap %g", (double)m->final_softcap);
    if (m->info.sliding_window > 0) {
        const bool same = m->rope_base_swa == 0 || (m->rope_base_swa == m->info.rope_base && m->rope_freq_scale_swa == m->info.rope_freq_scale);
        if (same) ADD("window %d on %d of %d layers", (int)m->info.sliding_window, (int)m->info.n_swa_layers, (int)m->info.n_layer);
        else ADD("window %d on %d of %d layers (RoPE base %g, scale %g)", (int)m->info.sliding_window, (int)m->info.n_swa_layers, (int)m->info.n_layer,
                 (double)m->rope_base_swa, (double)m->rope_freq_scale_swa);
    }
#undef ADD
}

/* ---- export ---- */

/* nemotron_h's tensors under the file's block numbers: a layer's "blk.L.x" goes to its mixer block, its FFN's (ffn_*, exp_probs_b) to the
 * FFN block after it, whose attn_norm is the layer's ffn_norm. */
struct block_names {
    const struct kvb_model *m;
    kvb_status (*put)(void *u, const char *name, const struct kvb_mat *mat, const float *vec, int64_t n, int64_t rows);
    void *u;
};
static kvb_status put_by_block(void *u, const char *name, const struct kvb_mat *mat, const float *vec, int64_t n, int64_t rows) {
    const struct block_names *bn = u;
    int l = -1, at = 0;
    if (sscanf(name, "blk.%d.%n", &l, &at) != 1 || at <= 0 || l < 0 || l >= bn->m->info.n_layer) return bn->put(bn->u, name, mat, vec, n, rows);
    const char *rest = name + at;
    const bool ffn = !strncmp(rest, "ffn_", 4) || !strncmp(rest, "exp_probs_b.", 12); /* the FFN's and the experts' */
    const int32_t b = bn->m->file_layer[2 * l + (ffn ? 1 : 0)];
    char out[96];
    snprintf(out, sizeof out, "blk.%d.%s", (int)b, ffn && !strcmp(rest, "ffn_norm.weight") ? "attn_norm.weight" : rest);
    return bn->put(bn->u, out, mat, vec, n, rows);
}

kvb_status kvb_family_each_tensor(const struct kvb_model *m, kvb_status (*put)(void *u, const char *name, const struct kvb_mat *mat,
                                                                              const float *vec, int64_t n, int64_t rows),
                                  void *u) {
    struct block_names bn = {m, put, u};
    if (m->file_layer) { /* nemotron_h */
        put = put_by_block;
        u = &bn;
    }
    const struct kvb_model_info *in = &m->info;
    const struct family *fam = family_of(in->arch);
    if (!fam) return kvb_fail(KVB_ERR_UNSUPPORTED, "export: architecture '%s' has no GGUF layout", in->arch);
    const int64_t Hv = in->ssm_heads, Ds = in->ssm_state, C = (2 * (int64_t)in->ssm_groups + Hv) * Ds;
    const int64_t E = in->n_embd;
    kvb_status st;
    if ((st = put(u, "token_embd.weight", &m->tok_embd, NULL, 0, 1)) != KVB_OK) return st;
    if ((st = put(u, output_norm_name(fam), NULL, m->output_norm, E, 1)) != KVB_OK) return st;
    if (!in->tied_output && (st = put(u, "output.weight", &m->output, NULL, 0, 1)) != KVB_OK) return st;
    if (m->output_bias && (st = put(u, "output.bias", NULL, m->output_bias, in->n_vocab, 1)) != KVB_OK) return st;
    if (m->output_scale != 1.0f && (st = put(u, "output.scale", NULL, &m->output_scale, 1, 1)) != KVB_OK) return st;
    const bool longrope = m->rope_freqs_long != NULL;
    const float *ff = m->yarn_factor ? m->rope_freqs_file : m->rope_freqs; /* YaRN: the file's own factors, not the divisors */
    const int64_t n_ff_factors = (fam->traits & F_GEMMA4 ? in->head_dim : in->rope_dims) / 2;
    if (ff && (st = put(u, longrope ? "rope_factors_short.weight" : "rope_freqs.weight", NULL, ff, n_ff_factors, 1)) != KVB_OK) return st;
    if (m->n_ple > 0) { /* gemma4's per-layer token embeddings */
        if ((st = put(u, "per_layer_token_embd.weight", &m->ple_embd, NULL, 0, 1)) != KVB_OK) return st;
        if ((st = put(u, "per_layer_model_proj.weight", &m->ple_model_proj, NULL, 0, 1)) != KVB_OK) return st;
        if ((st = put(u, "per_layer_proj_norm.weight", NULL, m->ple_proj_norm, m->n_ple, 1)) != KVB_OK) return st;
    }
    if (longrope && (st = put(u, "rope_factors_long.weight", NULL, m->rope_freqs_long, in->rope_dims / 2, 1)) != KVB_OK) return st;
    char name[96];
    for (int32_t l = 0; l < in->n_layer + in->n_nextn_layers; l++) { /* the MTP layers last */
        const struct kvb_layer *L = &m->layers[l];
        const int64_t Dl = kvb_layer_head_dim(m, l), F = kvb_layer_n_ff(m, l);
        const int64_t QD = (int64_t)in->n_head * Dl, KD = (int64_t)kvb_layer_n_kv(m, l) * Dl;
        const struct { int slot; const struct kvb_mat *mat; const float *vec; int64_t n; } t[] = {
            {S_ATTN_NORM, NULL, L->attn_norm, E}, {S_Q, &L->wq, NULL, 0}, {S_K, &L->wk, NULL, 0}, {S_V, &L->wv, NULL, 0},
            {S_BQ, NULL, L->bq, QD}, {S_BK, NULL, L->bk, KD}, {S_BV, NULL, L->bv, KD},
            {S_Q_NORM, NULL, L->q_norm, m->qk_norm_whole ? QD : Dl}, {S_K_NORM, NULL, L->k_norm, m->qk_norm_whole ? KD : Dl},
            {S_O, &L->wo, NULL, 0}, {S_BO, NULL, L->bo, E}, {S_POST_ATTN_NORM, NULL, L->post_attn_norm, E},
            {S_FFN_NORM, NULL, L->ffn_norm, E}, {S_GATE, &L->w_gate, NULL, 0}, {S_UP, &L->w_up, NULL, 0}, {S_DOWN, &L->w_down, NULL, 0},
            {S_BGATE, NULL, L->b_gate, F}, {S_BUP, NULL, L->b_up, F}, {S_BDOWN, NULL, L->b_down, E},
            {S_POST_FFN_NORM, NULL, L->post_ffn_norm, E}};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            if (t[i].mat ? !t[i].mat->data : !t[i].vec) continue;
            const bool as_post = (fam->traits & F_FFN_NORM_AS_POST) && t[i].slot == S_FFN_NORM;
            snprintf(name, sizeof name, "blk.%d.%s", (int)l, k_slots[as_post ? S_POST_ATTN_NORM : t[i].slot]);
            if ((fam->traits & F_FUSED_UP) && t[i].slot == S_GATE) continue;
            struct kvb_mat gu;
            const struct kvb_mat *mat = t[i].mat;
            if ((fam->traits & F_FUSED_UP) && t[i].slot == S_UP) { /* gate and up rows side by side: one tensor */
                if (L->w_gate.data + (size_t)F * L->w_gate.row_bytes != L->w_up.data || L->w_gate.type != L->w_up.type)
                    return kvb_fail(KVB_ERR_INVALID, "export: layer %d's gate and up rows are not one fused tensor", (int)l);
                gu = rows_of(&L->w_gate, 0, 2 * F);
                mat = &gu;
            }
            if ((st = put(u, name, mat, t[i].vec, t[i].n, 1)) != KVB_OK) return st;
        }
        if (L->router.data) { /* experts: the router, the three stacks, their biases and per-expert scales */
            const int64_t N = in->n_expert;
            const struct { const char *name; const struct kvb_mat *mat; int64_t n; } x[] = {
                {"ffn_gate_inp.weight", &L->router, 1}, {"ffn_gate_exps.weight", &L->gate_exps, N}, {"ffn_up_exps.weight", &L->up_exps, N},
                {"ffn_gate_up_exps.weight", &L->gate_up_exps, N}, {"ffn_down_exps.weight", &L->down_exps, N}};
            for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) {
                if (!x[i].mat->data) continue;
                snprintf(name, sizeof name, "blk.%d.%s", (int)l, x[i].name);
                if ((st = put(u, name, x[i].mat, NULL, x[i].n, 1)) != KVB_OK) return st;
            }
            const struct { const char *name; const float *v; int64_t n; } sv[] = {
                {"ffn_gate_exps.scale", L->s_gate_exps, N}, {"ffn_up_exps.scale", L->s_up_exps, N}, {"ffn_down_exps.scale", L->s_down_exps, N},
                {"ffn_gate_inp.scale", L->router_scale, E}, {"pre_ffw_norm_2.weight", L->pre_ffn_norm_2, E},
                {"post_ffw_norm_1.weight", L->post_ffn_norm_1, E}, {"post_ffw_norm_2.weight", L->post_ffn_norm_2, E}};
            for (size_t i = 0; i < sizeof sv / sizeof sv[0]; i++) {
                snprintf(name, sizeof name, "blk.%d.%s", (int)l, sv[i].name);
                if (sv[i].v && (st = put(u, name, NULL, sv[i].v, sv[i].n, 1)) != KVB_OK) return st;
            }
            const int64_t Fe = in->n_ff_exp;
            const struct { const char *name; const float *v; int64_t n, rows; } xb[] = {
                {"ffn_gate_inp.bias", L->b_router, N, 1}, {"exp_probs_b.bias", L->exp_probs_b, N, 1}, {"ffn_gate_exps.bias", L->b_gate_exps, Fe, N},
                {"ffn_up_exps.bias", L->b_up_exps, Fe, N},
                {"ffn_down_exps.bias", L->b_down_exps, E, N}};
            for (size_t i = 0; i < sizeof xb / sizeof xb[0]; i++) {
                snprintf(name, sizeof name, "blk.%d.%s", (int)l, xb[i].name);
                if (xb[i].v && (st = put(u, name, NULL, xb[i].v, xb[i].n, xb[i].rows)) != KVB_OK) return st;
            }
            const struct { const char *name; const struct kvb_mat *mat; } sh[] = {
                {"ffn_gate_shexp.weight", &L->gate_shexp}, {"ffn_up_shexp.weight", &L->up_shexp}, {"ffn_down_shexp.weight", &L->down_shexp}};
            for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
                snprintf(name, sizeof name, "blk.%d.%s", (int)l, sh[i].name);
                if (sh[i].mat->data && (st = put(u, name, sh[i].mat, NULL, 1, 1)) != KVB_OK) return st;
            }
            snprintf(name, sizeof name, "blk.%d.ffn_gate_inp_shexp.weight", (int)l);
            if (L->gate_inp_shexp && (st = put(u, name, NULL, L->gate_inp_shexp, E, 1)) != KVB_OK) return st;
        }
        const struct { const char *name; const struct kvb_mat *mat; const float *vec; int64_t n, rows; } ssm[] = {
            {"attn_qkv.weight", &L->ssm_qkv, NULL, 1, 1}, {"attn_gate.weight", &L->ssm_z, NULL, 1, 1},
            {"ssm_conv1d.weight", NULL, L->ssm_conv, in->ssm_conv, C}, {"ssm_dt.bias", NULL, L->ssm_dt, Hv, 1}, {"ssm_a", NULL, L->ssm_a, Hv, 1},
            {"ssm_beta.weight", &L->ssm_beta, NULL, 1, 1}, {"ssm_alpha.weight", &L->ssm_alpha, NULL, 1, 1},
            {"ssm_norm.weight", NULL, L->ssm_norm, Ds, 1}, {"ssm_out.weight", &L->ssm_out, NULL, 1, 1},
            {"nextn.eh_proj.weight", &L->nextn_eh_proj, NULL, 1, 1}, {"nextn.enorm.weight", NULL, L->nextn_enorm, in->n_embd, 1},
            {"nextn.hnorm.weight", NULL, L->nextn_hnorm, in->n_embd, 1}, {"nextn.embed_tokens.weight", &L->nextn_embed, NULL, 1, 1},
            {"nextn.shared_head_head.weight", &L->nextn_head, NULL, 1, 1}, {"nextn.shared_head_norm.weight", NULL, L->nextn_head_norm, in->n_embd, 1}};
        const bool shortconv = in->shortconv && m->recurrent && l < in->n_layer && m->recurrent[l];
        const struct { const char *name; const struct kvb_mat *mat; const float *vec; int64_t n, rows; } scv[] = {
            {"shortconv.in_proj.weight", &L->ssm_qkv, NULL, 1, 1}, {"shortconv.conv.weight", NULL, L->ssm_conv, in->ssm_conv, E},
            {"shortconv.out_proj.weight", &L->ssm_out, NULL, 1, 1}};
        for (size_t i = 0; shortconv && i < sizeof scv / sizeof scv[0]; i++) { /* lfm2's short conv */
            snprintf(name, sizeof name, "blk.%d.%s", (int)l, scv[i].name);
            if ((st = put(u, name, scv[i].mat, scv[i].vec, scv[i].n, scv[i].rows)) != KVB_OK) return st;
        }
        const bool mamba2 = in->mamba2 && m->recurrent && l < in->n_layer && m->recurrent[l];
        const int64_t DI = in->ssm_inner, Cx = DI + 2 * (int64_t)in->ssm_groups * in->ssm_state, G = KVB_MAX(in->ssm_groups, 1);
        const struct { const char *name; const struct kvb_mat *mat; const float *vec; int64_t n, rows; } m2[] = {
            {"ssm_in.weight", &L->ssm_qkv, NULL, 1, 1}, {"ssm_conv1d.weight", NULL, L->ssm_conv, in->ssm_conv, Cx},
            {"ssm_conv1d.bias", NULL, L->ssm_conv_b, Cx, 1}, {"ssm_dt.bias", NULL, L->ssm_dt, in->ssm_heads, 1},
            {"ssm_a", NULL, L->ssm_a, 1, in->ssm_heads}, {"ssm_d", NULL, L->ssm_d, 1, in->ssm_heads},
            {"ssm_norm.weight", NULL, L->ssm_norm, DI / G, G}, {"ssm_out.weight", &L->ssm_out, NULL, 1, 1},
            {"ssm_in.scale", NULL, L->s_ssm_in != 1.0f ? &L->s_ssm_in : NULL, 1, 1},
            {"ssm_out.scale", NULL, L->s_ssm_out != 1.0f ? &L->s_ssm_out : NULL, 1, 1}};
        for (size_t i = 0; mamba2 && i < sizeof m2 / sizeof m2[0]; i++) { /* Mamba-2, where present */
            if (m2[i].mat ? !m2[i].mat->data : !m2[i].vec) continue;
            snprintf(name, sizeof name, "blk.%d.%s", (int)l, m2[i].name);
            if ((st = put(u, name, m2[i].mat, m2[i].vec, m2[i].n, m2[i].rows)) != KVB_OK) return st;
        }
        for (size_t i = 0; !shortconv && !mamba2 && i < sizeof ssm / sizeof ssm[0]; i++) { /* Gated DeltaNet and MTP pieces, where present */
            if (ssm[i].mat ? !ssm[i].mat->data : !ssm[i].vec) continue;
            snprintf(name, sizeof name, "blk.%d.%s", (int)l, ssm[i].name);
            if ((st = put(u, name, ssm[i].mat, ssm[i].vec, ssm[i].n, ssm[i].rows)) != KVB_OK) return st;
        }
        const struct { const char *name; const struct kvb_mat *mat; const float *vec; int64_t n, rows; } mla[] = {
            {"attn_q_a.weight", &L->wq_a, NULL, 1, 1}, {"attn_q_a_norm.weight", NULL, L->q_a_norm, in->q_lora_rank, 1},
            {"attn_q_b.weight", &L->wq_b, NULL, 1, 1}, {"attn_kv_a_mqa.weight", &L->wkv_a, NULL, 1, 1},
            {"attn_kv_a_norm.weight", NULL, L->kv_a_norm, in->kv_lora_rank, 1}, {"attn_k_b.weight", &L->wk_b, NULL, in->n_head, 1},
            {"attn_v_b.weight", &L->wv_b, NULL, in->n_head, 1}};
        for (size_t i = 0; in->kv_lora_rank && i < sizeof mla / sizeof mla[0]; i++) { /* deepseek2's latent attention (attn_q, attn_output: the slots') */
            if (mla[i].mat ? !mla[i].mat->data : !mla[i].vec) continue;
            snprintf(name, sizeof name, "blk.%d.%s", (int)l, mla[i].name);
            if ((st = put(u, name, mla[i].mat, mla[i].vec, mla[i].n, mla[i].rows)) != KVB_OK) return st;
        }
        const struct { const char *name; const struct kvb_mat *mat; const float *vec; int64_t n; } ple[] = {
            {"inp_gate.weight", &L->ple_gate, NULL, 1}, {"proj.weight", &L->ple_proj, NULL, 1}, {"post_norm.weight", NULL, L->ple_norm, E},
            {"layer_output_scale.weight", NULL, L->has_out_scale ? &L->out_scale : NULL, 1}};
        for (size_t i = 0; i < sizeof ple / sizeof ple[0]; i++) { /* gemma4's per-layer input and output scale, where present */
            if (ple[i].mat ? !ple[i].mat->data : !ple[i].vec) continue;
            snprintf(name, sizeof name, "blk.%d.%s", (int)l, ple[i].name);
            if ((st = put(u, name, ple[i].mat, ple[i].vec, ple[i].n, 1)) != KVB_OK) return st;
        }
        if (m->sinks) {
            snprintf(name, sizeof name, "blk.%d.attn_sinks.weight", (int)l);
            if ((st = put(u, name, NULL, m->sinks + (size_t)l * in->n_head, in->n_head, 1)) != KVB_OK) return st;
        }
        const struct { const char *w; const float *s; } sc[] = {{"attn_q", &L->s_q}, {"attn_k", &L->s_k}, {"attn_v", &L->s_v},
            {"attn_output", &L->s_o}, {"ffn_gate", &L->s_gate}, {"ffn_up", &L->s_up}, {"ffn_down", &L->s_down}};
        for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
            if (*sc[i].s == 1.0f || ((fam->traits & F_FUSED_UP) && i == 4)) continue; /* fused up: one scale, ffn_up's */
            snprintf(name, sizeof name, "blk.%d.%s.scale", (int)l, sc[i].w);
            if ((st = put(u, name, NULL, sc[i].s, 1, 1)) != KVB_OK) return st;
        }
    }
    return KVB_OK;
}
