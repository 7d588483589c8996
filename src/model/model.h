/*
 * model.h — the llama-family model: hyperparameters and weight views
 * (mmapped, never copied), from GGUF or a llama2.c checkpoint. Shapes in the
 * comments: every matrix is row-major [n_out][n_in], y = W x.
 *
 * Files call one way (tests/src_layers.py): batch.c -> forward.c (contexts,
 * the layers of a pass) -> recurrent.c (the Gated DeltaNet, short-conv and Mamba-2 layers) -> moe.c
 * (the experts) -> ffn.c (a pass's matmuls, scales, biases, gated
 * activations, the dense FFN), which forward.c and recurrent.c call too; export.c -> model.c (loading) -> family.c (the families as data).
 */
#ifndef KVB_MODEL_H
#define KVB_MODEL_H

#include "../core/core.h"
#include "../ops/matmul.h"

struct gguf_file;
struct kvb_vocab;

/* How the FFN gates: silu(gate) * up (SwiGLU), gelu_tanh(gate) * up (GeGLU),
 * or gpt-oss' clamped SwiGLU: g = min(g, 7), u = clamp(u, -7, 7),
 * g * sigmoid(1.702 g) * (u + 1). */
enum kvb_ffn_act { KVB_FFN_SILU = 0, KVB_FFN_GELU_TANH = 1, KVB_FFN_SWIGLU_OAI = 2 };

/* How a router turns its logits into the chosen experts' weights (llama.cpp's
 * expert_gating_func values): softmax over all experts then the top k;
 * sigmoid of each then the top k; or the top k logits, then a softmax over
 * those k (gpt-oss). */
enum kvb_moe_gating { KVB_MOE_SOFTMAX = 1, KVB_MOE_SIGMOID = 2, KVB_MOE_SOFTMAX_WEIGHT = 3 };

/* One layer: every weight it reads. A step of the forward pass runs when its
 * weights are there (a NULL vector, a matrix with data NULL: absent), so the
 * families differ in data, not in code paths (family.c says which pieces
 * each may or must carry). */
struct kvb_layer {
    const float *attn_norm;        /* pre-attention RMS norm [E], or NULL (olmo2) */
    struct kvb_mat wq;             /* [Hq*D][E] (row ranges of a fused attn_qkv: Q, K, V) */
    struct kvb_mat wk, wv;         /* [Hk*D][E] */
    const float *bq, *bk, *bv;     /* projection biases, or NULL */
    const float *q_norm, *k_norm;  /* RMS norms of q and k before RoPE: per head [D], or over the
                                    * whole projection [Hq*D] / [Hk*D] (kvb_model.qk_norm_whole) */
    struct kvb_mat wo;             /* [E][Hq*D] */
    const float *bo;               /* [E] or NULL */
    const float *post_attn_norm;   /* RMS norm of the attention output before the residual, or NULL */
    const float *ffn_norm;         /* pre-FFN RMS norm [E], or NULL (olmo2) */
    struct kvb_mat w_gate, w_up;   /* [F][E] (phi3: the two halves of one fused ffn_up) */
    struct kvb_mat w_down;         /* [E][F] */
    const float *b_gate, *b_up, *b_down; /* FFN biases, or NULL */
    const float *post_ffn_norm;    /* RMS norm of the FFN output before the residual, or NULL */
    /* per-tensor output scales (<name>.scale, llama.cpp's NVFP4 scales, which it applies to any
     * weight type): q/k/v and wo scaled before their bias, gate/up/down after it; 1: none */
    float s_q, s_k, s_v, s_o, s_gate, s_up, s_down;
    bool input_scales;             /* <name>.input_scale tensors were present: bound, and unused, as
                                    * llama.cpp leaves them (they describe NVFP4 activations) */
    bool scales_unused;            /* .scale tensors this family's llama.cpp graph does not apply (its
                                    * FFN's but for llama and qwen3; olmo2's q/k/v): bound, not applied */
    /* mixture of experts: a layer with a router runs its experts instead of the dense FFN above
     * (whose slots stay empty). The experts are llama.cpp's 3-D ffn_*_exps, ne [n_in, rows,
     * n_expert], seen as 2-D: expert e owns rows [e * Fe, (e + 1) * Fe) of gate_exps and up_exps
     * and [e * E, (e + 1) * E) of down_exps (kvb_moe_expert). */
    struct kvb_mat router;             /* ffn_gate_inp [n_expert][E] */
    const float *b_router;             /* [n_expert] or NULL */
    const float *exp_probs_b;          /* [n_expert] the selection bias (blk.N.exp_probs_b.bias; lfm2moe, glm4moe) or NULL: added to the gated
                                        * probabilities to choose the experts, never to their weights */
    struct kvb_mat gate_exps, up_exps; /* [n_expert * Fe][E] */
    struct kvb_mat down_exps;          /* [n_expert * E][Fe] */
    const float *b_gate_exps, *b_up_exps; /* [n_expert][Fe] or NULL */
    const float *b_down_exps;          /* [n_expert][E] or NULL */
    const float *s_gate_exps, *s_up_exps, *s_down_exps; /* per-expert output scales [n_expert] (after the biases), or NULL */
    /* gemma4's experts: gate and up rows of one fused ffn_gate_up_exps ([n_expert * 2Fe][E]: expert e's gate rows
     * [2e Fe, 2e Fe + Fe), its up rows the next Fe; gate_exps/up_exps then empty), or data NULL */
    struct kvb_mat gate_up_exps;
    /* gemma4's MoE layer (router_scale non-NULL): the dense FFN always runs, N(ffn, post_ffn_norm_1); the router reads
     * rms(x) / sqrt(E) * router_scale; the experts read N(x, pre_ffn_norm_2), their sum N(., post_ffn_norm_2); then
     * post_ffn_norm over both */
    const float *router_scale;           /* ffn_gate_inp.scale [E] */
    const float *pre_ffn_norm_2, *post_ffn_norm_1, *post_ffn_norm_2; /* [E] */
    /* shared experts (ffn_*_shexp): a dense SwiGLU FFN of width info.n_ff_shexp that every token of
     * the layer runs, added to the routed experts' sum; gated (qwen2moe) when gate_inp_shexp is
     * there: its output times sigmoid(gate_inp_shexp . x). data NULL: none */
    struct kvb_mat gate_shexp, up_shexp; /* [Fs][E] */
    struct kvb_mat down_shexp;           /* [E][Fs] */
    const float *gate_inp_shexp;         /* [E] or NULL */
    /* Gated DeltaNet (kvb_model.recurrent[l]; qwen35, qwen35moe): instead of wq..wo. Hk = info.ssm_groups
     * heads of Dk = info.ssm_state, Hv = info.ssm_heads heads of Dv (== Dk), C = 2 Hk Dk + Hv Dv conv
     * channels, K = info.ssm_conv taps; data NULL / NULL on an attention layer.
     * LFM2's short conv (info.shortconv) uses three of them: ssm_qkv = shortconv.in_proj [3E][E] (B, C, x
     * rows), ssm_conv = shortconv.conv [E][K], ssm_out = shortconv.out_proj [E][E].
     * Mamba-2 (info.mamba2; H = ssm_heads heads of P = ssm_inner / H, G = ssm_groups, N = ssm_state,
     * Cx = ssm_inner + 2 G N conv channels): ssm_qkv = ssm_in [2 ssm_inner + 2 G N + H][E] (z, xBC, dt
     * rows), ssm_conv [Cx][K], ssm_conv_b [Cx] or NULL, ssm_dt [H], ssm_a [H], ssm_d [H], ssm_norm
     * [ssm_inner] (G groups of ssm_inner / G) or NULL, ssm_out [E][ssm_inner]; s_ssm_in, s_ssm_out their
     * .scale tensors (1: none) */
    const float *ssm_conv_b, *ssm_d;
    float s_ssm_in, s_ssm_out;
    struct kvb_mat ssm_qkv;              /* attn_qkv.weight [C][E] */
    struct kvb_mat ssm_z;                /* attn_gate.weight [Hv*Dv][E] */
    struct kvb_mat ssm_beta, ssm_alpha;  /* ssm_beta.weight, ssm_alpha.weight [Hv][E] */
    const float *ssm_conv;               /* ssm_conv1d.weight, ggml ne {K, C}: [C][K] row-major (f32) */
    const float *ssm_dt;                 /* ssm_dt.bias [Hv] */
    const float *ssm_a;                  /* ssm_a [Hv] (-exp(A_log); the tensor name has no .weight) */
    const float *ssm_norm;               /* ssm_norm.weight [Dv] */
    struct kvb_mat ssm_out;              /* ssm_out.weight [E][Hv*Dv] */
    /* multi-head latent attention (deepseek2, mla.c): instead of wq..wv; R = info.rope_dims, C = info.kv_lora_rank,
     * Dk = info.head_dim_k_mla (its no-RoPE part Dn = Dk - R), Dv = info.head_dim_v_mla, H = info.n_head */
    struct kvb_mat wq_a;                 /* attn_q_a.weight [q_lora_rank][E], or data NULL (then wq is attn_q [H*Dk][E]) */
    const float *q_a_norm;               /* attn_q_a_norm.weight [q_lora_rank] */
    struct kvb_mat wq_b;                 /* attn_q_b.weight [H*Dk][q_lora_rank] */
    struct kvb_mat wkv_a;                /* attn_kv_a_mqa.weight [C + R][E]: the latent, then the shared rotated key */
    const float *kv_a_norm;              /* attn_kv_a_norm.weight [C] */
    struct kvb_mat wk_b;                 /* attn_k_b.weight, head h's rows [h*C, (h+1)*C) of Dn: q_nope into the latent */
    struct kvb_mat wv_b;                 /* attn_v_b.weight, head h's rows [h*Dv, (h+1)*Dv) of C: the latent to its value */
    /* a multi-token-prediction layer (layers[info.n_layer ..)): bound and kept for export, never run */
    struct kvb_mat nextn_eh_proj;        /* nextn.eh_proj.weight [E][2E] */
    const float *nextn_enorm, *nextn_hnorm; /* nextn.enorm.weight, nextn.hnorm.weight [E] */
    struct kvb_mat nextn_embed;          /* nextn.embed_tokens.weight [n_vocab][E], or data NULL */
    struct kvb_mat nextn_head;           /* nextn.shared_head_head.weight [n_vocab][E], or data NULL */
    const float *nextn_head_norm;        /* nextn.shared_head_norm.weight [E], or NULL */
    /* Gemma 4's per-layer input (PLE, kvb_model.n_ple = P > 0): after the FFN's residual,
     * x += N(proj (gelu(inp_gate x) * ple[l]), ple_norm); data NULL / NULL without */
    struct kvb_mat ple_gate;             /* inp_gate.weight [P][E] */
    struct kvb_mat ple_proj;             /* proj.weight [E][P] */
    const float *ple_norm;               /* post_norm.weight [E] */
    float out_scale;                     /* layer_output_scale: the whole residual stream times it after the layer; 1: none */
    bool has_out_scale;                  /* the file had layer_output_scale (kept for export) */
};

struct kvb_model {
    struct kvb_model_info info;
    struct kvb_mat tok_embd;     /* [n_vocab][n_embd] */
    const float *output_norm;    /* [n_embd] */
    struct kvb_mat output;       /* [n_vocab][n_embd] (tok_embd when tied) */
    const float *output_bias;    /* [n_vocab] (qwen2), or NULL */
    float output_scale;          /* output.scale (llama.cpp's per-tensor scale of the classifier); 1 */
    const float *rope_freqs;     /* [rope_dims / 2] frequency divisors (Llama-3, YaRN, LongRoPE short), or NULL */
    const float *rope_freqs_long;/* LongRoPE: the divisors past rope_orig_ctx (phi3), or NULL */
    struct kvb_layer *layers;    /* [info.n_layer + info.n_nextn_layers]: the MTP layers last, never run */
    uint8_t *recurrent;          /* [n_layer] 1: a recurrent layer (Gated DeltaNet, short conv, Mamba-2: no K/V, its weights in
                                  * ssm_*), or NULL (owned) */
    int32_t *file_layer;         /* nemotron_h: [2 n_layer] the file's blocks each layer runs: its mixer's (Mamba-2 or
                                  * attention) at [2l], the FFN-only block after it at [2l + 1] or -1 (the layer has no
                                  * FFN); the file's blocks are n_file_layers; NULL (owned) for the other families */
    int32_t n_file_layers;
    bool q_gate;                 /* attn_q holds query and gate per head: rows [h*2D, h*2D+D) head h's query,
                                  * [h*2D+D, h*2D+2D) its gate (wq is [Hq*2D][E]); out = attn * sigmoid(gate) */
    int32_t rope_sections[4];    /* rope.dimension_sections (qwen35: IMROPE; text positions give every section the
                                  * same position, so it is NEOX over rope_dims), kept for export; all 0 without */
    int32_t full_attn_interval;  /* full_attention_interval as read (0 without), kept for export */
    uint8_t *no_rope;            /* [n_layer] 1: the layer rotates nothing (SmolLM3's NoPE layers), or NULL */
    /* the family's arithmetic, resolved at load (family.c); the neutral value does nothing */
    enum kvb_ffn_act act;
    bool qk_norm_whole;          /* q_norm/k_norm over the whole projection (olmo2), else per head */
    float embd_scale;            /* embeddings multiplied (gemma: sqrt(E); granite: embedding_scale); 1 */
    float residual_scale;        /* each branch multiplied before its residual add (granite); 1 */
    float q_scale;               /* q multiplied before the cache (which scales scores by 1/sqrt(D)):
                                  * granite's attention.scale * sqrt(D); 1 */
    float rope_mscale;           /* cos/sin magnitude (YaRN, LongRoPE attn_factor): q's and k's
                                  * rotated dims multiplied by it; 1 */
    int32_t rope_orig_ctx;       /* LongRoPE: contexts above it use rope_freqs_long */
    float logit_scale;           /* logits divided (granite); 1 */
    float final_softcap;         /* logits = c * tanh(logits / c); 0: off */
    float attn_softcap;          /* attention scores s = c * tanh(s / c) before the mask (gemma2); 0: off */
    /* sliding-window layers (gemma2/3): swa_layers[info.n_swa_layers], the cache's per-layer
     * windows (policy window, no sinks, budget info.sliding_window), or NULL; their RoPE */
    struct kvb_kv_layer *swa_layers;
    uint32_t swa_period;         /* the pattern they came from: l % period < period - 1 (0: every layer) */
    float rope_base_swa, rope_freq_scale_swa;
    float temp_beta;             /* mistral3: q *= 1 + beta * ln(1 + floor(pos / temp_floor)); 0: off */
    int32_t temp_floor;
    bool cls_head;               /* qwen3: a reranker's classifier is in the file (bound, unused) */
    /* mixture of experts (info.n_expert > 0): how the router weighs the chosen experts */
    enum kvb_moe_gating moe_gating;
    bool moe_norm;               /* the chosen experts' weights divided by their sum */
    float moe_scale;             /* then multiplied by this (expert_weights_scale); 1 */
    int32_t moe_groups, moe_groups_used; /* group-limited top-k (deepseek2's expert_group_count/_used_count); 0: none */
    float mla_q_scale;           /* deepseek2: the absorbed query times this, so the cache's 1/sqrt(head_dim) gives llama.cpp's
                                  * kq_scale (mscale^2 / sqrt(head_dim_k_mla)); 1 */
    float *sinks;                /* [n_layer][n_head] learned attention-sink logits (gpt-oss), owned; or NULL */
    /* YaRN as the file gave it (rope_freqs then holds the divisors made from it), for export */
    float yarn_factor;           /* 0: no YaRN */
    float yarn_beta_fast, yarn_beta_slow, yarn_log_mul; /* log_mul 0: the key was absent */
    float yarn_attn_factor;      /* rope.scaling.attn_factor beside YaRN */
    const float *rope_freqs_file;/* the file's own rope_freqs under YaRN, or NULL */
    /* Gemma 4 (kvb_family_traits: gemma4): window layers (swa_mask) of their own head size and rotary
     * dims, padded with zeros to the global head size info.head_dim in the cache; V an unweighted RMS
     * norm per head of the raw value (or, without attn_v, key) projection; KV-shared trailing layers */
    uint8_t *swa_mask;           /* [n_layer] 1: a sliding-window layer (gemma4's per-layer pattern), or NULL (owned) */
    int32_t head_dim_swa;        /* the window layers' real head size (<= info.head_dim); 0: info.head_dim */
    int32_t rope_dims_swa;       /* their rotary dims (rope.dimension_count_swa) */
    bool v_norm;                 /* V = rms(V) per head, no weight (gemma4) */
    int32_t n_kv_shared;         /* shared_kv_layers: the last ones read an earlier layer's K/V */
    int32_t *kv_source;          /* [n_layer] -1, or the earlier layer whose K/V layer l reads; or NULL (owned) */
    int32_t *n_kv_layer;         /* [n_layer] each layer's KV heads (head_count_kv per layer: the 26B-A4B and 31B's window
                                  * and global counts; info.n_head_kv the largest), or NULL: info.n_head_kv everywhere (owned) */
    int32_t *n_ff_layer;         /* [n_layer] each layer's FFN width (feed_forward_length per layer), or NULL:
                                  * info.n_ff (then the widest) for every layer (owned) */
    /* per-layer token embeddings (PLE): P = n_ple dims per layer, 0: none */
    int32_t n_ple;
    struct kvb_mat ple_embd;     /* per_layer_token_embd [n_vocab][P * n_layer] */
    struct kvb_mat ple_model_proj; /* per_layer_model_proj [P * n_layer][E] */
    const float *ple_proj_norm;  /* per_layer_proj_norm [P] */
    struct kvb_vocab *vocab;
    struct gguf_file *gguf;      /* GGUF source, or NULL */
    void *map;                   /* llama2.c checkpoint mapping */
    size_t map_size;
    void *owned;                 /* arrays the loader computed (YaRN divisors), freed with the model */
    char path[512];
};

/* The neutral arithmetic of a plain llama model (every scale 1, SwiGLU). */
void kvb_model_neutral(struct kvb_model *m);
/* n zeroed layers get their neutral scales (1). */
void kvb_layers_neutral(struct kvb_layer *layers, int32_t n);

/* family.c: the families this engine runs, as data. kvb_family_load reads
 * the hyperparameters of f's architecture (keys as llama.cpp reads them;
 * a key that changes the math and is not implemented is refused by name)
 * and binds every tensor, refusing one the family does not use. */
kvb_status kvb_family_load(const struct gguf_file *f, struct kvb_model *m);
/* YaRN with scale fs (1 / factor) from the original context orig: per-pair
 * divisors over ff (or 1) into rope_freqs, and its magnitude into rope_mscale. */
kvb_status kvb_family_yarn(struct kvb_model *m, const float *ff, float fs, int32_t orig, float beta_fast, float beta_slow, bool has_log_mul,
                           float log_mul);
/* deepseek2: the rotation's magnitude (rope_mscale) and the absorbed query's scale (mla_q_scale) from rope.scaling.attn_factor,
 * YaRN's factor and log multiplier (set first: kvb_family_yarn) and head_dim_k_mla, as llama.cpp's deepseek2 graph and
 * context compute them; the loader and mkmodel both take them from here (load_mla_keys' comment has the formulas). */
void kvb_family_mla(struct kvb_model *m);
/* In words, what m computes beyond a plain llama layer (kvb_model_info.features). */
void kvb_family_describe(const struct kvb_model *m, char *out, size_t cap);
/* Whether a cache's NoPE layers (its params.no_rope) are the model's. */
bool kvb_model_no_rope_matches(const struct kvb_model *m, const uint8_t *no_rope);
/* The traits of m's family (by m->info.arch) that are not in its file: the
 * RoPE layout, q/k norms over the whole projection, NoPE layers (SmolLM3's
 * every fourth), Gemma's GeGLU, embedding scale sqrt(E) and query scale
 * (from the shape: call it once the shape and rope_freq_scale are set), the
 * defaults of Gemma's keys (softcaps, windows and their RoPE), and, in
 * *fused_up (may be NULL), whether ffn_up holds the gate rows too (phi3).
 * The loader and mkmodel both take them from here. */
kvb_status kvb_family_traits(struct kvb_model *m, bool *fused_up);
/* The sliding-window layers of a window of `window` tokens and pattern
 * `period` (layer l is one iff l % period < period - 1; period 0: every
 * layer), as llama.cpp's set_swa_pattern: m->swa_layers, swa_period and the
 * info's sliding_window and n_swa_layers. window 0: none. */
kvb_status kvb_family_windows(struct kvb_model *m, int32_t window, uint32_t period);
/* The Gated DeltaNet layers of m (qwen35): recurrent[l] = (l + 1) %
 * full_attn_interval != 0 over the n_layer layers that run, and the info's
 * n_rec_layers and state_bytes, from its ssm_* shape. The loader and mkmodel
 * both take them from here. */
kvb_status kvb_family_hybrid(struct kvb_model *m);
/* lfm2: m->recurrent (the short-conv layers) set, info.ssm_conv the taps: counts them, info.shortconv, the state's bytes;
 * window > 0: every attention layer a sliding-window layer of that many tokens at the global RoPE */
kvb_status kvb_family_shortconv(struct kvb_model *m, int32_t window);
/* granitehybrid, nemotron_h: m->recurrent (the Mamba-2 layers) set, info.ssm_conv/ssm_inner/ssm_state/ssm_heads/ssm_groups the shape:
 * checks it, counts the layers, info.mamba2, the state's bytes. The loader and mkmodel both take them from here. */
kvb_status kvb_family_mamba2(struct kvb_model *m);
/* Gemma 4's layer kinds from m->swa_mask and m->n_kv_shared: the window
 * layers' policies (window tokens each), kv_source (a shared layer reads
 * layer n_kv - 2 when a window layer, n_kv - 1 when global, n_kv = n_layer -
 * shared, as llama.cpp, which asserts those kinds: refused otherwise), and the
 * info's sliding_window and n_swa_layers. The loader and mkmodel both take
 * them from here. */
kvb_status kvb_family_gemma4(struct kvb_model *m, int32_t window);
/* Layer l's real head size (gemma4's window layers: head_dim_swa) and FFN width. */
int32_t kvb_layer_head_dim(const struct kvb_model *m, int32_t l);
int32_t kvb_layer_n_ff(const struct kvb_model *m, int32_t l);
/* Layer l's KV heads (gemma4's per-layer head_count_kv), else info.n_head_kv. */
int32_t kvb_layer_n_kv(const struct kvb_model *m, int32_t l);
/* Whether layer l holds K/V of its own: not a recurrent layer (Gated DeltaNet, short conv), not a
 * reader of an earlier layer's (gemma4's KV-shared layers). */
bool kvb_layer_holds_kv(const struct kvb_model *m, int32_t l);
/* The families, comma-separated (messages, --help). */
const char *kvb_family_names(void);
/* Writes the model's tensors under their GGUF names (export.c): calls put
 * for each present piece: rows (>= 1) vectors of n floats (f32, 1-D when
 * rows is 1, else ne [n, rows]: the experts' biases), or a matrix, 2-D when
 * n <= 1 and else n matrices of mat->n_out / n rows stacked (llama.cpp's
 * 3-D experts, ne [n_in, n_out / n, n]). */
kvb_status kvb_family_each_tensor(const struct kvb_model *m, kvb_status (*put)(void *u, const char *name, const struct kvb_mat *mat,
                                                                              const float *vec, int64_t n, int64_t rows), void *u);

kvb_status kvb_model_load_gguf(const char *path, bool in_memory, struct kvb_model *m);

/* export.c: kvb_model_write_gguf, kvb_model_make (declared in kvbound.h). */
kvb_status kvb_model_load_llama2c(const char *path, const char *tokenizer_path, bool in_memory, struct kvb_model *m);

/* The cache parameters of a sequence on model m: its geometry and rope,
 * the KV configuration kv (max_distance 0: the trained length) and a
 * private pool of pool_bytes (unused when the cache draws from a shared one);
 * n_ctx, the context it is made for, picks LongRoPE's long divisors when it,
 * rounded up to a multiple of 256, exceeds the original context (as
 * llama.cpp picks them, once, by its padded context). */
struct kvb_cache_params kvb_model_cache_params(const struct kvb_model *m, const struct kvb_kv_params *kv, size_t pool_bytes, int64_t n_ctx);
/* Whether a cache made with p (a loaded image's) is one of m's: geometry,
 * RoPE, NoPE layers, sliding-window layers and their RoPE, softcap. */
bool kvb_model_cache_fits(const struct kvb_model *m, const struct kvb_cache_params *p);

/* ---- the forward pass over rows of many sequences (forward.c) ---- */

/* The rows of a pass as its matmuls see them: decode rows [0, n_dec), each
 * computed as a lone decode; prompt chunks of >= 2 rows (cr0[i], cT[i]),
 * each as if alone; one-row prompts at rows one[0..n_one), each as a chunk
 * of one. So a row's bits never depend on what shares the pass. */
struct kvb_pass_rows {
    int32_t n_rows, n_dec;
    int32_t *cr0, *cT, nc;
    int32_t *one, n_one;
    int32_t int8_below; /* a prompt chunk of fewer rows goes through the integer dot as decode rows do,
                         * where the weights have one (an expert's few rows of a chunk: expanding its
                         * panels costs more than the rows); 0: never. A choice by the chunk's own
                         * size, so its bits still do not depend on what shares the pass */
};

/* The buffers of a mixture-of-experts layer (moe.c), for up to rows rows. */
struct kvb_moe_buf {
    float *logits;             /* [rows][n_expert] the router's */
    int32_t *sel;              /* [rows][n_expert_used] the chosen experts */
    float *wt;                 /* [rows][n_expert_used] their weights */
    int32_t *by_expert, *off;  /* (row * n_expert_used + slot) grouped by expert: by_expert[off[e] .. off[e + 1]) */
    int32_t *group;            /* [rows] a prompt row's chunk (its first row) */
    float *x, *g, *u, *y;      /* [rows][E], [rows][Fe] x 2, [rows][E]: one expert's gathered rows */
    struct kvb_pass_rows pass; /* one expert's rows as a pass (cr0, cT, one: [rows]) */
    int64_t bytes_read;        /* expert weight bytes read since the last reset */
};

/* The buffers of the recurrent (Gated DeltaNet) layers (recurrent.c), for up to rows rows. */
struct kvb_rec_buf {
    float *mix, *y;            /* [rows][C] the projection before and after the conv */
    float *z, *o;              /* [rows][Hv*Dv] the output gate, the heads' outputs */
    float *beta, *g;           /* [rows][Hv] */
    float *hist;               /* [K-1][C] one sequence's conv history */
    float *const **rows;       /* [rows] each segment's state rows */
    float *scratch;            /* [scratch_threads][kvb_gdn_scratch_floats] the chunked form's */
    int32_t scratch_threads;
};

/* Activation buffers for up to `rows` rows. */
struct kvb_fwd {
    int32_t rows;
    int32_t kz_prompt[2][KVB_KVZIP_PROMPT_MAX]; /* kvzip's repeat prompts (later chunks', the first's), tokenized once */
    int32_t kz_n[2];
    bool kz_ready;
    float *x, *xb, *q, *k, *v, *att, *hg, *hu, *tmp; /* [rows][...] */
    float *lg;        /* [lg_rows][n_vocab] last-row logits, grown on demand */
    int32_t lg_rows;
    struct kvb_q8_buf *q8; /* int8 activations of the decode rows */
    struct kvb_pass_rows pass; /* this pass (cr0, cT, one: [rows]) */
    struct kvb_moe_buf moe;    /* allocated for a model with experts */
    struct kvb_rec_buf rec;    /* allocated for a model with recurrent layers */
    float *qg, *gate;          /* [rows][Hq*2D], [rows][Hq*D]: a gated attention's query and gate (info.attn_gated) */
    float *ple;                /* [rows][P * n_layer] the per-layer inputs of gemma4 (kvb_fwd_init_ple), or NULL */
    float *pg, *pu;            /* [rows][P] */
    float *mq, *mkv, *mo;      /* deepseek2: [rows][max(q_lora, H*Dk)] the query, [rows][C + R] the latent and rotated key,
                                * [rows][H*Dv] the heads' values; or NULL */
    float *xr, *m2;            /* [rows][E] gemma4's router input and experts' sum (a model with router_scale), or NULL */
};
/* forward.c: the buffers of a pass (and of its experts: moe.c). */
kvb_status kvb_fwd_init(struct kvb_fwd *f, const struct kvb_model_info *in, int32_t rows);
void kvb_fwd_free(struct kvb_fwd *f);

/* ---- ffn.c: below forward.c and moe.c, calls neither ---- */
/* y = W x over the rows of pass p (each row as described there); q8 holds the
 * decode rows' int8 activations. */
void kvb_fwd_mm(struct kvb_threadpool *tp, struct kvb_q8_buf *q8, const struct kvb_pass_rows *p, const struct kvb_mat *w, const float *x,
                int64_t ldx, float *y, int64_t ldy);
/* kvb_fwd_mm of n (<= 4) matrices on the same input: the decode rows of all of
 * them in one threadpool run; every output the bits kvb_fwd_mm gives. */
void kvb_fwd_mm_group(struct kvb_threadpool *tp, struct kvb_q8_buf *q8, const struct kvb_pass_rows *p, const struct kvb_mat *const *w, int32_t n,
                      const float *x, int64_t ldx, float *const *y, const int64_t *ldy);
/* y[t][i] *= s over rows x n (s 1: nothing); y[t][i] += b[i] (b NULL: nothing). */
void kvb_fwd_scale_rows(float *y, int32_t rows, int64_t n, float s);
void kvb_fwd_add_bias(float *y, int32_t rows, int64_t n, const float *b);
/* g = act(g) * u over n values (elementwise: bits independent of the split). */
void kvb_fwd_glu(struct kvb_threadpool *tp, enum kvb_ffn_act act, float *g, const float *u, size_t n);

/* A dense FFN's weights: the layer's own, or its shared experts' (scales 1 and biases NULL: none). */
struct kvb_ffn_w {
    const struct kvb_mat *gate, *up, *down; /* [F][E], [F][E], [E][F] */
    const float *b_gate, *b_up, *b_down;
    float s_gate, s_up, s_down;
};
/* out = (act(xin Wg^T + bg) * (xin Wu^T + bu)) Wd^T + bd over the rows of pass p, each scale after
 * its bias, F wide (through f->hg and f->hu, which hold max(n_ff, n_ff_shexp) per row). */
void kvb_fwd_ffn(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, const struct kvb_pass_rows *p, const struct kvb_ffn_w *w,
                 int64_t F, const float *xin, float *out);

/* ---- moe.c: below forward.c, calls ffn.c for each expert ---- */
/* Expert e's gate/up (which 0, 1) or down (2) rows of layer L. */
struct kvb_mat kvb_moe_expert(const struct kvb_layer *L, int which, int32_t e);
/* The buffers of m's expert layers for rows rows (none for a dense model). */
kvb_status kvb_moe_buf_init(struct kvb_moe_buf *b, const struct kvb_model_info *in, int32_t rows);
void kvb_moe_buf_free(struct kvb_moe_buf *b);
/* out[r] = the experts of layer l on xin[r], for the rows of pass p: each
 * row routed to its top n_expert_used experts, every expert's rows gathered
 * and multiplied together (a decode row as a lone decode, a prompt chunk's
 * rows as that chunk alone), the weighted outputs summed in expert order. */
void kvb_moe_ffn(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, const struct kvb_pass_rows *p, int32_t l,
                 const float *xin, float *out);
/* The same with the router reading rin (rows of E) instead of xin (gemma4: rms(x) / sqrt(E) * router_scale). */
void kvb_moe_ffn_routed(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, const struct kvb_pass_rows *p, int32_t l,
                        const float *rin, const float *xin, float *out);
/* The router of one row: logits (n_expert) to the chosen experts and their
 * weights (k each), by m's gating, normalization and scale. bias (n_expert,
 * or NULL): added to the gated probabilities for the choice only; the weights
 * are the unbiased probabilities of the chosen (llama.cpp's exp_probs_b). */
void kvb_moe_route(const struct kvb_model *m, const float *logits, const float *bias, int32_t *sel, float *wt);

/* ---- mla.c: below forward.c, calls ffn.c ---- */
struct kvb_fwd_seg;
/* Multi-head latent attention. The cache holds one row per token, k = [k_pe | c_kv] (it rotates the first rope_dims),
 * for every head (n_kv_head 1); each head's query is [q_pe | wk_b q_nope], so the cache's attention is the absorbed
 * form and its output per head the latent, which wv_b turns into the head's value.
 * out[r] = attn_output(the absorbed attention of layer l) for the rows of the pass, xin normed; the segments' caches
 * attend over one latent row per token for all heads (fails only as kvb_cache_decode/prefill do). */
kvb_status kvb_mla_layer(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, const struct kvb_fwd_seg *seg, int32_t n_seg,
                         int32_t l, const float *xin, float *out);

/* ---- recurrent.c: below forward.c, calls ffn.c and the ops' kernels ---- */
struct kvb_fwd_seg;
/* Rows of a recurrent layer's state (Hv*Dk, then the conv history's) and of its conv history, rows of
 * kvb_rec_row_floats floats (Dv; a short conv's: head_dim, its (K - 1) E history packed in them). */
int32_t kvb_rec_state_rows(const struct kvb_model_info *in);
int32_t kvb_rec_row_floats(const struct kvb_model_info *in);
int32_t kvb_rec_conv_rows(const struct kvb_model_info *in);
kvb_status kvb_rec_buf_init(struct kvb_rec_buf *b, const struct kvb_model_info *in, int32_t rows);
void kvb_rec_buf_free(struct kvb_rec_buf *b);
/* out[r] = the Gated DeltaNet layer l on xin[r] (its pre-norm applied) for the
 * rows of the pass; each segment's state taken from and written back to its
 * cache (kvb_cache_state: fails only as that does, KVB_ERR_NOMEM). */
kvb_status kvb_rec_layer(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, const struct kvb_fwd_seg *seg, int32_t n_seg,
                         int32_t l, const float *xin, float *out);

/* ---- forward.c ---- */
/* Room for the last-row logits of n segments (kvb_forward grows it itself;
 * a batch calls it before reserving, so a step fails before any change). */
kvb_status kvb_fwd_reserve_logits(struct kvb_fwd *f, const struct kvb_model_info *in, int32_t n);

/* One sequence's rows [r0, r0 + T) of a pass. A decode segment (T == 1, not
 * a prompt) runs kvb_cache_decode; any other runs kvb_cache_prefill as one
 * chunk. logits: NULL, or n_vocab floats for the last row (all: T x n_vocab
 * for every row). */
struct kvb_fwd_seg {
    struct kvb_cache *cache;
    int32_t r0, T;
    bool decode;
    float *logits;
    bool all_logits;
};

/* Runs tok[0..rows) through the model. Decode segments come first, rows
 * [0, n_dec); their matmuls run as one batch (kvb_matmul_decode: each row
 * bit-identical to a lone decode), each prefill segment's as its own chunk,
 * so a sequence's numbers never depend on what shares the pass. Fails only
 * where kvb_cache_decode/prefill fail (nothing fails after
 * kvb_cache_reserve); then caches of earlier layers have advanced. */
kvb_status kvb_forward(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, const int32_t *tok,
                       const struct kvb_fwd_seg *seg, int32_t n_seg, int32_t n_dec);

/* kvzip's reconstruction (docs/POLICIES.md): the last n tokens the cache
 * read, tok[0..n), are scored chunk by chunk (KVB_KVZIP_CHUNK): each pass
 * is the repeat prompt ("\n\nRepeat the previous context exactly.", later
 * chunks "...the part of the previous context exactly, starting with" and
 * the previous chunk's last 8 tokens) and the chunk, read between
 * kvb_cache_recon_begin and _end in f->rows-row forwards; its rows are
 * dropped. *pass_tokens adds the tokens the passes read. A model without a
 * vocabulary repeats the chunk alone. Errors as kvb_forward (the pass ended,
 * the cache as before it but for scores). */
kvb_status kvb_kvzip_reconstruct(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, struct kvb_cache *cache,
                                 const int32_t *tok, int64_t n, int64_t *pass_tokens);
/* Tokenizes the repeat prompts into f once (KVB_ERR_NOMEM); after it, a
 * pass over a cache reserved for its tokens (kvb_cache_reserve of the
 * chunk and KVB_KVZIP_PROMPT_MAX) cannot fail. */
kvb_status kvb_kvzip_prepare(const struct kvb_model *m, struct kvb_fwd *f);

#endif
