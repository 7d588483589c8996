/*
 * export.c — writing models as GGUF, and making random-weight models of
 * real shapes.
 *
 * kvb_model_write_gguf quantizes every 2-D weight to the requested type (a
 * row whose length is not a whole number of that type's blocks falls back to
 * q8_0, then f16, as llama.cpp does) and keeps norms and biases f32; the
 * vocabulary and hyperparameters go to the usual `<arch>.*` and
 * `tokenizer.ggml.*` keys, so llama.cpp-style readers load the file.
 *
 * kvb_model_make builds a model in memory from a shape table with seeded
 * uniform weights scaled by 1/sqrt(n_in) and a synthetic SentencePiece
 * vocabulary (control tokens, 256 byte tokens, then generated pieces).
 */
#include "model.h"
#include "../gguf/gguf_write.h"
#include "../ops/quant.h"
#include "../tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static uint32_t pick_type(uint32_t want, int64_t n_in) {
    if (kvb_ggml_row_size(want, n_in)) return want;
    if (kvb_ggml_row_size(GGML_TYPE_Q8_0, n_in) && want != GGML_TYPE_F32 && want != GGML_TYPE_F16 && want != GGML_TYPE_BF16) return GGML_TYPE_Q8_0;
    return GGML_TYPE_F16;
}

struct owned {
    void **p;
    int64_t n, cap;
    uint64_t rs; /* the random stream of the model being made */
};

static void *keep(struct owned *o, size_t bytes) {
    if (kvb_grow((void **)&o->p, &o->cap, o->n + 1, sizeof(void *)) != KVB_OK) return NULL;
    void *p = kvb_malloc(bytes ? bytes : 1);
    if (p) o->p[o->n++] = p;
    return p;
}

/* m as `want` (n_mat > 1: n_mat stacked matrices, one 3-D tensor); a matrix already of that type is written as it is */
static kvb_status add_mat(struct gguf_writer *w, struct owned *o, const char *name, const struct kvb_mat *m, int64_t n_mat, uint32_t want) {
    uint32_t type = pick_type(want, m->n_in);
    int64_t ne[3] = {m->n_in, n_mat > 1 ? m->n_out / n_mat : m->n_out, n_mat};
    if (type == m->type) return kvb_gguf_writer_tensor(w, name, type, n_mat > 1 ? 3 : 2, ne, m->data);
    size_t row = kvb_ggml_row_size(type, m->n_in);
    uint8_t *dst = keep(o, row * (size_t)m->n_out);
    float *tmp = kvb_malloc(sizeof(float) * (size_t)m->n_in);
    if (!dst || !tmp) {
        kvb_free(tmp);
        return kvb_fail(KVB_ERR_NOMEM, "export: out of memory for '%s'", name);
    }
    for (int64_t r = 0; r < m->n_out; r++) {
        kvb_dequantize_row(m->type, m->data + (size_t)r * m->row_bytes, tmp, m->n_in);
        kvb_quantize_row(type, tmp, dst + (size_t)r * row, m->n_in);
    }
    kvb_free(tmp);
    return kvb_gguf_writer_tensor(w, name, type, n_mat > 1 ? 3 : 2, ne, dst);
}

static kvb_status add_vec(struct gguf_writer *w, const char *name, const float *v, int64_t n, int64_t rows) {
    const int64_t ne[2] = {n, rows};
    return kvb_gguf_writer_tensor(w, name, GGML_TYPE_F32, rows > 1 ? 2 : 1, ne, v);
}

struct put_ctx {
    struct gguf_writer *w;
    struct owned *o;
    uint32_t type;
    int32_t done, total;
    void (*progress)(int32_t done, int32_t total, void *);
    void *user;
};

static kvb_status put_tensor(void *u, const char *name, const struct kvb_mat *mat, const float *vec, int64_t n, int64_t rows) {
    struct put_ctx *c = u;
    kvb_status st = mat ? add_mat(c->w, c->o, name, mat, n, c->type) : add_vec(c->w, name, vec, n, rows);
    if (st == KVB_OK && c->progress && mat) c->progress(KVB_MIN(++c->done, c->total - 1), c->total, c->user); /* about 7 matrices a layer */
    return st;
}

/* The family's keys beyond the shape (family.c reads them back). */
static void write_family_keys(struct gguf_writer *w, const struct kvb_model *m) {
    const struct kvb_model_info *in = &m->info;
    char key[128];
#define K(s) (snprintf(key, sizeof key, "%s." s, in->arch), key)
    if (in->kv_lora_rank) { /* deepseek2: the latent row (key_length = rotary + latent, value_length = latent), the MLA head sizes */
        kvb_gguf_writer_u32(w, K("attention.key_length"), (uint32_t)in->head_dim);
        kvb_gguf_writer_u32(w, K("attention.value_length"), (uint32_t)in->kv_lora_rank);
        kvb_gguf_writer_u32(w, K("attention.key_length_mla"), (uint32_t)in->head_dim_k_mla);
        kvb_gguf_writer_u32(w, K("attention.value_length_mla"), (uint32_t)in->head_dim_v_mla);
        kvb_gguf_writer_u32(w, K("attention.kv_lora_rank"), (uint32_t)in->kv_lora_rank);
        kvb_gguf_writer_u32(w, K("attention.q_lora_rank"), (uint32_t)in->q_lora_rank); /* 0 too: llama.cpp requires it but of V2-Lite's layer counts */
    } else if ((int64_t)in->head_dim * in->n_head != in->n_embd || m->swa_mask) {
        kvb_gguf_writer_u32(w, K("attention.key_length"), (uint32_t)in->head_dim);
        kvb_gguf_writer_u32(w, K("attention.value_length"), (uint32_t)in->head_dim);
    }
    if (!strncmp(in->arch, "granite", 7)) { /* granite, granitemoe */
        kvb_gguf_writer_f32(w, K("embedding_scale"), m->embd_scale);
        kvb_gguf_writer_f32(w, K("residual_scale"), m->residual_scale);
        kvb_gguf_writer_f32(w, K("attention.scale"), m->q_scale / sqrtf((float)in->head_dim));
        kvb_gguf_writer_f32(w, K("logit_scale"), m->logit_scale);
        if (in->rope_type == KVB_ROPE_NONE) kvb_gguf_writer_bool(w, K("rope.scaling.finetuned"), false);
    }
    if (m->temp_beta != 0) kvb_gguf_writer_f32(w, K("attention.temperature_scale"), m->temp_beta);
    if (in->n_expert > 0) { /* expert_feed_forward_length: read by the families whose experts have their own width */
        kvb_gguf_writer_u32(w, K("expert_count"), (uint32_t)in->n_expert);
        kvb_gguf_writer_u32(w, K("expert_used_count"), (uint32_t)in->n_expert_used);
        kvb_gguf_writer_u32(w, K("expert_feed_forward_length"), (uint32_t)in->n_ff_exp);
        if (!strcmp(in->arch, "deepseek2")) { /* as deepseek, and the routing's keys */
            kvb_gguf_writer_u32(w, K("expert_shared_count"), (uint32_t)(in->n_ff_shexp / in->n_ff_exp));
            kvb_gguf_writer_u32(w, K("leading_dense_block_count"), (uint32_t)(in->n_layer - in->n_moe_layers));
            kvb_gguf_writer_u32(w, K("expert_gating_func"), (uint32_t)m->moe_gating);
            kvb_gguf_writer_bool(w, K("expert_weights_norm"), m->moe_norm);
            if (m->moe_scale != 1.0f) kvb_gguf_writer_f32(w, K("expert_weights_scale"), m->moe_scale);
            if (m->moe_groups) {
                kvb_gguf_writer_u32(w, K("expert_group_count"), (uint32_t)m->moe_groups);
                kvb_gguf_writer_u32(w, K("expert_group_used_count"), (uint32_t)m->moe_groups_used);
            }
        } else if (!strcmp(in->arch, "deepseek")) { /* shared experts as a count of experts' widths; dense layers first */
            kvb_gguf_writer_u32(w, K("expert_shared_count"), (uint32_t)(in->n_ff_shexp / in->n_ff_exp));
            kvb_gguf_writer_u32(w, K("leading_dense_block_count"), (uint32_t)(in->n_layer - in->n_moe_layers));
            if (m->moe_scale != 1.0f) kvb_gguf_writer_f32(w, K("expert_weights_scale"), m->moe_scale);
        } else if (!strcmp(in->arch, "lfm2moe")) { /* dense layers first; the gating (required there) */
            kvb_gguf_writer_u32(w, K("leading_dense_block_count"), (uint32_t)(in->n_layer - in->n_moe_layers));
            kvb_gguf_writer_u32(w, K("expert_gating_func"), (uint32_t)m->moe_gating);
        } else if (!strcmp(in->arch, "glm4moe")) { /* deepseek's shared count and dense lead; the routing as llama.cpp reads it */
            kvb_gguf_writer_u32(w, K("expert_shared_count"), (uint32_t)(in->n_ff_shexp / in->n_ff_exp));
            kvb_gguf_writer_u32(w, K("leading_dense_block_count"), (uint32_t)(in->n_layer - in->n_moe_layers));
            kvb_gguf_writer_u32(w, K("expert_gating_func"), (uint32_t)m->moe_gating);
            kvb_gguf_writer_bool(w, K("expert_weights_norm"), m->moe_norm);
            kvb_gguf_writer_f32(w, K("expert_weights_scale"), m->moe_scale);
            kvb_gguf_writer_u32(w, K("nextn_predict_layers"), (uint32_t)in->n_nextn_layers);
            if (m->rope_sections[0] || m->rope_sections[1] || m->rope_sections[2] || m->rope_sections[3]) /* as read (text: NEOX) */
                kvb_gguf_writer_arr(w, K("rope.dimension_sections"), GGUF_T_INT32, m->rope_sections, 4);
        } else if (in->n_ff_shexp > 0) {
            kvb_gguf_writer_u32(w, K("expert_shared_feed_forward_length"), (uint32_t)in->n_ff_shexp);
        }
        if (!strcmp(in->arch, "nemotron_h_moe")) { /* its routing's keys (sigmoid is the family's) */
            kvb_gguf_writer_bool(w, K("expert_weights_norm"), m->moe_norm);
            if (m->moe_scale != 1.0f) kvb_gguf_writer_f32(w, K("expert_weights_scale"), m->moe_scale);
        }
    }
    if (m->swa_mask) { /* gemma4: the per-layer pattern, the window heads, KV sharing, PLE, the final cap (default 30: always written) */
        bool *pat = kvb_malloc((size_t)in->n_layer);
        for (int32_t l = 0; pat && l < in->n_layer; l++) pat[l] = m->swa_mask[l] != 0;
        if (pat) kvb_gguf_writer_arr(w, K("attention.sliding_window_pattern"), GGUF_T_BOOL, pat, (uint64_t)in->n_layer);
        kvb_free(pat);
        kvb_gguf_writer_u32(w, K("attention.sliding_window"), (uint32_t)in->sliding_window);
        kvb_gguf_writer_u32(w, K("attention.key_length_swa"), (uint32_t)m->head_dim_swa);
        kvb_gguf_writer_u32(w, K("attention.value_length_swa"), (uint32_t)m->head_dim_swa);
        kvb_gguf_writer_u32(w, K("rope.dimension_count_swa"), (uint32_t)m->rope_dims_swa);
        kvb_gguf_writer_f32(w, K("rope.freq_base_swa"), m->rope_base_swa);
        kvb_gguf_writer_u32(w, K("attention.shared_kv_layers"), (uint32_t)in->n_kv_shared);
        kvb_gguf_writer_u32(w, K("embedding_length_per_layer_input"), (uint32_t)m->n_ple);
        kvb_gguf_writer_f32(w, K("final_logit_softcapping"), m->final_softcap);
    } else if (in->shortconv) { /* lfm2: a window on every attention layer, or none */
        if (in->sliding_window > 0) kvb_gguf_writer_u32(w, K("attention.sliding_window"), (uint32_t)in->sliding_window);
    } else if (in->sliding_window > 0) { /* gemma2/3: the windows and their RoPE base (their scale is the family's rule) */
        kvb_gguf_writer_u32(w, K("attention.sliding_window"), (uint32_t)in->sliding_window);
        kvb_gguf_writer_u32(w, K("attention.sliding_window_pattern"), m->swa_period);
        kvb_gguf_writer_f32(w, K("rope.freq_base_swa"), m->rope_base_swa ? m->rope_base_swa : in->rope_base); /* 0: the global base */
    }
    if (in->shortconv) kvb_gguf_writer_u32(w, K("shortconv.l_cache"), (uint32_t)in->ssm_conv); /* lfm2 */
    else if (in->mamba2) { /* granitehybrid: the Mamba-2 shape (its layers: head_count_kv 0) */
        kvb_gguf_writer_u32(w, K("ssm.conv_kernel"), (uint32_t)in->ssm_conv);
        kvb_gguf_writer_u32(w, K("ssm.inner_size"), (uint32_t)in->ssm_inner);
        kvb_gguf_writer_u32(w, K("ssm.state_size"), (uint32_t)in->ssm_state);
        kvb_gguf_writer_u32(w, K("ssm.time_step_rank"), (uint32_t)in->ssm_heads);
        kvb_gguf_writer_u32(w, K("ssm.group_count"), (uint32_t)in->ssm_groups);
    } else if (m->recurrent) { /* qwen35: the Gated DeltaNet shape, its pattern, the RoPE sections, the MTP layers */
        kvb_gguf_writer_u32(w, K("ssm.conv_kernel"), (uint32_t)in->ssm_conv);
        kvb_gguf_writer_u32(w, K("ssm.inner_size"), (uint32_t)(in->ssm_heads * in->ssm_state));
        kvb_gguf_writer_u32(w, K("ssm.state_size"), (uint32_t)in->ssm_state);
        kvb_gguf_writer_u32(w, K("ssm.time_step_rank"), (uint32_t)in->ssm_heads);
        kvb_gguf_writer_u32(w, K("ssm.group_count"), (uint32_t)in->ssm_groups);
        kvb_gguf_writer_u32(w, K("full_attention_interval"), (uint32_t)m->full_attn_interval);
        kvb_gguf_writer_arr(w, K("rope.dimension_sections"), GGUF_T_INT32, m->rope_sections, 4);
        if (in->n_nextn_layers > 0) kvb_gguf_writer_u32(w, K("nextn_predict_layers"), (uint32_t)in->n_nextn_layers);
    }
    if (m->attn_softcap != 0) kvb_gguf_writer_f32(w, K("attn_logit_softcapping"), m->attn_softcap);
    if (m->final_softcap != 0 && !m->swa_mask) kvb_gguf_writer_f32(w, K("final_logit_softcapping"), m->final_softcap);
    if (m->yarn_factor) {
        kvb_gguf_writer_str(w, K("rope.scaling.type"), "yarn");
        kvb_gguf_writer_f32(w, K("rope.scaling.factor"), m->yarn_factor);
        kvb_gguf_writer_u32(w, K("rope.scaling.original_context_length"), (uint32_t)m->rope_orig_ctx);
        kvb_gguf_writer_f32(w, K("rope.scaling.yarn_beta_fast"), m->yarn_beta_fast);
        kvb_gguf_writer_f32(w, K("rope.scaling.yarn_beta_slow"), m->yarn_beta_slow);
        if (m->yarn_log_mul != 0) kvb_gguf_writer_f32(w, K("rope.scaling.yarn_log_multiplier"), m->yarn_log_mul);
        if (m->yarn_attn_factor != 1.0f) kvb_gguf_writer_f32(w, K("rope.scaling.attn_factor"), m->yarn_attn_factor);
    } else {
        if (m->rope_mscale != 1.0f) kvb_gguf_writer_f32(w, K("rope.scaling.attn_factor"), m->rope_mscale);
        if (m->rope_freqs_long || m->temp_beta != 0) kvb_gguf_writer_u32(w, K("rope.scaling.original_context_length"), (uint32_t)m->rope_orig_ctx);
    }
#undef K
}

kvb_status kvb_model_write_gguf(const struct kvb_model *m, const char *path, uint32_t type, void (*progress)(int32_t done, int32_t total, void *), void *user) {
    if (!kvb_matmul_supports(type)) return kvb_fail(KVB_ERR_UNSUPPORTED, "export: weight type %s is not supported", kvb_ggml_type_name(type));
    const struct kvb_model_info *in = &m->info;
    struct gguf_writer *w;
    kvb_status st = kvb_gguf_writer_init(&w);
    if (st != KVB_OK) return st;
    struct owned o = {0};
    const char *a = in->arch;
    char key[128];
#define K(s) (snprintf(key, sizeof key, "%s." s, a), key)
    kvb_gguf_writer_str(w, "general.architecture", a);
    /* a made model goes by a neutral name: llama.cpp keys token attributes off general.name (a "phi3" in it wants phi-3 tokens) */
    kvb_gguf_writer_str(w, "general.name", strcmp(in->source, "mkmodel") ? m->path : "kvbound random weights");
    kvb_gguf_writer_u32(w, "general.alignment", 32);
    kvb_gguf_writer_u32(w, K("context_length"), (uint32_t)in->n_ctx_train);
    kvb_gguf_writer_u32(w, K("embedding_length"), (uint32_t)in->n_embd);
    kvb_gguf_writer_u32(w, K("block_count"), (uint32_t)(m->file_layer ? m->n_file_layers : in->n_layer + in->n_nextn_layers)); /* the MTP layers are blocks too */
    bool ff_same = true; /* gemma4: per layer where they differ (E2B's double-wide shared layers) */
    for (int32_t l = 0; m->n_ff_layer && l < in->n_layer; l++) ff_same = ff_same && m->n_ff_layer[l] == in->n_ff;
    if (m->file_layer) { /* nemotron_h: per block, its kind: FFN blocks their width (0 elsewhere), attention blocks their KV heads */
        uint32_t ff[4096], kv[4096], hq[4096];
        const int32_t nb = KVB_MIN(m->n_file_layers, 4096);
        for (int32_t b = 0; b < nb; b++) ff[b] = 0, kv[b] = 0, hq[b] = (uint32_t)in->n_head;
        for (int32_t l = 0; l < in->n_layer; l++) {
            const int32_t fm = m->file_layer[2 * l], fb = m->file_layer[2 * l + 1];
            if (fm < nb && !m->recurrent[l]) kv[fm] = (uint32_t)in->n_head_kv;
            if (fb >= 0 && fb < nb) ff[fb] = (uint32_t)in->n_ff;
        }
        kvb_gguf_writer_arr(w, K("feed_forward_length"), GGUF_T_UINT32, ff, (uint64_t)nb);
        kvb_gguf_writer_arr(w, K("attention.head_count"), GGUF_T_UINT32, hq, (uint64_t)nb);
        kvb_gguf_writer_arr(w, K("attention.head_count_kv"), GGUF_T_UINT32, kv, (uint64_t)nb);
    } else if (ff_same) kvb_gguf_writer_u32(w, K("feed_forward_length"), (uint32_t)in->n_ff);
    else kvb_gguf_writer_arr(w, K("feed_forward_length"), GGUF_T_UINT32, m->n_ff_layer, (uint64_t)in->n_layer);
    if (!m->file_layer) kvb_gguf_writer_u32(w, K("attention.head_count"), (uint32_t)in->n_head);
    if (m->file_layer) {
    } else if (m->n_kv_layer) kvb_gguf_writer_arr(w, K("attention.head_count_kv"), GGUF_T_UINT32, m->n_kv_layer, (uint64_t)in->n_layer); /* gemma4 */
    else if ((in->shortconv || in->mamba2) && m->recurrent) { /* lfm2, granitehybrid: 0 KV heads marks a recurrent layer */
        uint32_t kv[4096]; /* block_count's bound (family.c) */
        for (int32_t l = 0; l < in->n_layer && l < 4096; l++) kv[l] = m->recurrent[l] ? 0 : (uint32_t)in->n_head_kv;
        kvb_gguf_writer_arr(w, K("attention.head_count_kv"), GGUF_T_UINT32, kv, (uint64_t)KVB_MIN(in->n_layer, 4096));
    } else kvb_gguf_writer_u32(w, K("attention.head_count_kv"), (uint32_t)in->n_head_kv);
    kvb_gguf_writer_f32(w, K("attention.layer_norm_rms_epsilon"), in->rms_eps);
    kvb_gguf_writer_f32(w, K("rope.freq_base"), in->rope_base);
    kvb_gguf_writer_u32(w, K("rope.dimension_count"), (uint32_t)in->rope_dims);
    if (in->rope_freq_scale != 1.0f) {
        kvb_gguf_writer_str(w, K("rope.scaling.type"), "linear");
        kvb_gguf_writer_f32(w, K("rope.scaling.factor"), 1.0f / in->rope_freq_scale);
    }
#undef K
    write_family_keys(w, m);
    const struct kvb_vocab *v = m->vocab;
    const char **strs = kvb_malloc(sizeof(char *) * (size_t)v->n);
    uint32_t *lens = kvb_malloc(sizeof(uint32_t) * (size_t)v->n);
    int32_t *types = kvb_malloc(sizeof(int32_t) * (size_t)v->n);
    if (!strs || !lens || !types) {
        st = kvb_fail(KVB_ERR_NOMEM, "export: out of memory");
        goto done;
    }
    for (int32_t i = 0; i < v->n; i++) {
        strs[i] = kvb_vocab_text(v, i);
        lens[i] = kvb_vocab_len(v, i);
        types[i] = v->type[i];
    }
    if (v->kind == KVB_VOCAB_NONE) { /* ids only, as llama.cpp's test models */
        kvb_gguf_writer_str(w, "tokenizer.ggml.model", "no_vocab");
        snprintf(key, sizeof key, "%s.vocab_size", a);
        kvb_gguf_writer_u32(w, key, (uint32_t)v->n);
        goto tensors;
    }
    kvb_gguf_writer_str(w, "tokenizer.ggml.model", v->kind == KVB_VOCAB_BPE ? "gpt2" : "llama");
    kvb_gguf_writer_arr_str(w, "tokenizer.ggml.tokens", strs, lens, (uint64_t)v->n);
    if (v->kind == KVB_VOCAB_SPM) kvb_gguf_writer_arr(w, "tokenizer.ggml.scores", GGUF_T_FLOAT32, v->score, (uint64_t)v->n);
    kvb_gguf_writer_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, types, (uint64_t)v->n);
    if (v->kind == KVB_VOCAB_BPE) {
        const char **ms = kvb_malloc(sizeof(char *) * (size_t)KVB_MAX(v->n_merges, 1));
        uint32_t *ml = kvb_malloc(sizeof(uint32_t) * (size_t)KVB_MAX(v->n_merges, 1));
        if (!ms || !ml) {
            kvb_free(ms); kvb_free(ml);
            st = kvb_fail(KVB_ERR_NOMEM, "export: out of memory");
            goto done;
        }
        for (int32_t i = 0; i < v->n_merges; i++) {
            ms[i] = v->merge_arena + v->merge_off[i];
            ml[i] = v->merge_off[i + 1] - v->merge_off[i] - 1;
        }
        kvb_gguf_writer_str(w, "tokenizer.ggml.pre", kvb_pre_name(v->pre));
        kvb_gguf_writer_arr_str(w, "tokenizer.ggml.merges", ms, ml, (uint64_t)v->n_merges);
        kvb_free(ms);
        kvb_free(ml);
        if (v->eot >= 0) kvb_gguf_writer_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)v->eot);
        if (v->pad >= 0) kvb_gguf_writer_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->pad);
    }
    if (v->bos >= 0) kvb_gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    if (v->eos >= 0) kvb_gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    if (v->unk >= 0) kvb_gguf_writer_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)v->unk);
    kvb_gguf_writer_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos);
    kvb_gguf_writer_bool(w, "tokenizer.ggml.add_space_prefix", v->add_space_prefix);
tensors : {
        struct put_ctx pc = {w, &o, type, 0, 7 * in->n_layer + 2, progress, user};
        if ((st = kvb_family_each_tensor(m, put_tensor, &pc)) != KVB_OK) goto done;
    }
    const int32_t total = 7 * in->n_layer + 2;
    st = kvb_gguf_writer_write(w, path);
    if (progress) progress(total, total, user);
done:
    kvb_free(strs);
    kvb_free(lens);
    kvb_free(types);
    for (int64_t i = 0; i < o.n; i++) kvb_free(o.p[i]);
    kvb_free(o.p);
    kvb_gguf_writer_free(w);
    return st;
}

/* ---- random models of real shapes ---- */

/* A shape: the sizes of a real model (or a tiny one of its family for
 * tests), and what its family carries. head_dim 0: dim / heads; rot 0: all of it. */
struct shape {
    const char *name, *arch;
    int32_t vocab, dim, layers, heads, kv_heads, ff, ctx, head_dim, rot;
    float rope_base, eps;
    bool tied, bias, llama3_rope;
    bool all_bias;        /* every optional bias (wo, ffn) as well: the llama check */
    bool qk_norm;         /* q/k norms (per head; olmo2: whole) */
    bool post_norms;      /* olmo2: post-attention and post-FFN norms, no pre-norms */
    bool longrope;        /* phi3: short and long factors, attn_factor for ctx / orig_ctx */
    int32_t orig_ctx;     /* longrope, yarn, temperature: the original context */
    float granite[4];     /* embedding, residual, attention, logit scales */
    float yarn_factor, temp_beta;
    float attn_factor;    /* rope.scaling.attn_factor (cos/sin magnitude); 0: none */
    float rope_factor;    /* linear RoPE scaling (rope.scaling.factor); 0: none */
    bool sandwich;        /* gemma: pre and post norms around both blocks */
    bool no_space_prefix; /* the SentencePiece vocabulary adds no space prefix (gemma) */
    /* gemma: window width and pattern, the window layers' RoPE base, the attention and final
     * softcaps; 0: the family's default (gemma2: 4096, 2, its base, 50, 30; gemma3: none, 6, 10000, none, none) */
    int32_t window;
    uint32_t swa_period;
    float swa_base, attn_cap, final_cap;
    int32_t experts, experts_used, ff_exp; /* a mixture of experts on every layer (ff_exp: their width); 0: dense */
    int32_t ff_shexp;     /* shared experts' width (gated when the family gates them: qwen2moe); 0: none */
    int32_t dense_lead;   /* the first layers dense (deepseek's leading_dense_block_count) */
    float moe_scale;      /* expert_weights_scale (deepseek, glm4moe); 0: none */
    bool moe_norm;        /* glm4moe: expert_weights_norm (the family's default is false) */
    bool oai;             /* gpt-oss: sinks, the output bias, the router's and experts' biases */
    /* qwen35: Gated DeltaNet layers ((l + 1) % fa_every != 0) of ssm_heads value heads over ssm_groups key heads of ssm_state,
     * ssm_conv taps; gated attention on the others; RoPE sections; nextn MTP layers after the layers; ssm_heads 0: none */
    int32_t ssm_conv, ssm_state, ssm_groups, ssm_heads, fa_every, nextn;
    int32_t sections[4];
    /* gemma4 (head_dim_swa > 0): window layers (l % swa_period < swa_period - 1) of heads head_dim_swa with rot_swa rotary dims
     * beside global ones of head_dim, whose proportional RoPE rotates a quarter of their pairs (rope_freqs: 1, then 1e30);
     * the last kv_shared layers read layer n_kv - 2 / n_kv - 1's K/V (ff_double: and are twice as wide); ple per-layer
     * embedding dims; no_v_global: the global layers have no attn_v (V from the raw K); keep_shared_k: the shared layers
     * still carry attn_k, attn_k_norm and attn_v (bound, unused) */
    int32_t head_dim_swa, rot_swa, kv_shared, ple;
    bool ff_double, no_v_global, keep_shared_k;
    /* gemma4: the global layers' KV heads where they differ from the window layers' kv_heads (26B-A4B, 31B); 0: the same.
     * With experts, gemma4 runs them beside the dense FFN: a router scale, per-expert down scales, fused gate_up stacks
     * (split_exps: ffn_gate_exps and ffn_up_exps) */
    int32_t kv_heads_global;
    bool split_exps;
    /* lfm2 (sc_taps > 0): short-conv layers of sc_taps taps, attention on the layers whose bit is set in sc_attn */
    int32_t sc_taps;
    uint32_t sc_attn;
    /* deepseek2 (kv_lora > 0): latent attention of kv_lora (the cache row: rot + kv_lora, one KV head), the query through
     * q_lora (0: one attn_q), heads' no-RoPE key part qk_nope and values v_mla; routing: sigmoid (else softmax) with a
     * selection bias, renormalized (norm_w), in groups of experts (groups, groups_used; 0: none); yarn_log_mul as the file's */
    int32_t kv_lora, q_lora, qk_nope, v_mla, groups, groups_used;
    bool sigmoid, norm_w;
    float yarn_log_mul;
    /* granitehybrid (m2[0] > 0): Mamba-2 layers of m2 = {taps, d_inner, d_state, heads, groups}, attention on the layers whose
     * bit is set in m2_attn; nope: no RoPE (rope.scaling.finetuned false, as Granite 4.0-H) */
    int32_t m2[5];
    uint32_t m2_attn;
    bool nope;
    /* nemotron_h (nh): the layers whose nh_ffn bit is set have an FFN block after their mixer block (squared ReLU, no gate) */
    bool nh;
    uint32_t nh_ffn;
};

static const struct shape k_shapes[] = {
    {.name = "tiny", .arch = "llama", 512, 256, 2, 4, 2, 512, 512, .rope_base = 10000.0f, .eps = 1e-5f},
    {.name = "tiny-qwen2", .arch = "qwen2", 512, 256, 2, 4, 2, 512, 512, .rope_base = 1000000.0f, .eps = 1e-6f, .tied = true, .bias = true},
    /* tiny trained to 32K: long sessions in seconds (llama-server caps a slot at the trained length) */
    {.name = "tiny-32k", .arch = "llama", 512, 256, 2, 4, 2, 512, 32768, .rope_base = 10000.0f, .eps = 1e-5f},
    {.name = "tiny-llama-bias", .arch = "llama", 512, 256, 2, 4, 2, 512, 512, .rope_base = 10000.0f, .eps = 1e-5f, .bias = true, .all_bias = true},
    {.name = "tiny-qwen3", .arch = "qwen3", 512, 256, 2, 4, 2, 512, 4096, .head_dim = 96, .rope_base = 1000000.0f, .eps = 1e-6f, .tied = true,
     .qk_norm = true},
    {.name = "tiny-granite", .arch = "granite", 512, 256, 2, 4, 2, 512, 4096, .rope_base = 10000000.0f, .eps = 1e-5f, .tied = true,
     .granite = {12.0f, 0.22f, 0.015625f, 8.0f}},
    {.name = "tiny-olmo2", .arch = "olmo2", 512, 256, 2, 4, 4, 512, 4096, .rope_base = 500000.0f, .eps = 1e-6f, .qk_norm = true, .post_norms = true},
    {.name = "tiny-phi3", .arch = "phi3", 512, 256, 2, 4, 2, 512, 8192, .rot = 48, .rope_base = 10000.0f, .eps = 1e-5f, .tied = true,
     .longrope = true, .orig_ctx = 512},
    {.name = "tiny-smollm3", .arch = "smollm3", 512, 256, 4, 4, 2, 512, 4096, .rope_base = 5000000.0f, .eps = 1e-6f, .tied = true,
     .attn_factor = 1.15f}, /* a RoPE magnitude: NoPE layers, which have no rotation, must not get it */
    {.name = "tiny-mistral3", .arch = "mistral3", 512, 256, 2, 4, 2, 512, 8192, .head_dim = 96, .rope_base = 1000000.0f, .eps = 1e-5f,
     .orig_ctx = 8, .yarn_factor = 4.0f, .temp_beta = 0.1f}, /* an original context of 8: the temperature and the YaRN ramp both act within a test's tokens */
    /* windows of 8 tokens, so they act within a test's prompts; D 96 != E/Hq 64; the window layers at their own base and,
     * as gemma2 has it, the global linear scale too; softcaps small enough to bend scores and logits */
    {.name = "tiny-gemma2", .arch = "gemma2", 512, 256, 4, 4, 2, 512, 4096, .head_dim = 96, .rope_base = 10000.0f, .eps = 1e-6f, .tied = true,
     .sandwich = true, .no_space_prefix = true, .window = 8, .swa_period = 2, .swa_base = 1000.0f, .rope_factor = 2.0f, .attn_cap = 5.0f,
     .final_cap = 10.0f},
    /* windows of 8 on four layers of six (pattern 3) at base 10000 unscaled, the global ones at 1e6 with linear x8; untied; a final softcap */
    {.name = "tiny-gemma3", .arch = "gemma3", 512, 256, 6, 4, 2, 512, 4096, .head_dim = 96, .rope_base = 1000000.0f, .eps = 1e-6f,
     .qk_norm = true, .sandwich = true, .no_space_prefix = true, .window = 8, .swa_period = 3, .rope_factor = 8.0f, .final_cap = 10.0f},
    /* experts: 8, 2 per token (qwen3moe: width 128, set apart from the dense 512); mixtral is llama with experts of the FFN's width */
    {.name = "tiny-qwen3moe", .arch = "qwen3moe", 512, 256, 2, 4, 2, 512, 4096, .head_dim = 64, .rope_base = 1000000.0f, .eps = 1e-6f,
     .qk_norm = true, .experts = 8, .experts_used = 2, .ff_exp = 128},
    {.name = "tiny-mixtral", .arch = "llama", 512, 256, 2, 4, 2, 256, 4096, .rope_base = 1000000.0f, .eps = 1e-5f, .experts = 8, .experts_used = 2,
     .ff_exp = 256},
    {.name = "tiny-granitemoe", .arch = "granitemoe", 512, 256, 2, 4, 2, 256, 4096, .rope_base = 10000.0f, .eps = 1e-6f, .tied = true,
     .granite = {12.0f, 0.22f, 0.015625f, 8.0f}, .experts = 8, .experts_used = 2, .ff_exp = 256},
    /* shared experts: granite's ungated (192 wide); qwen2moe's gated (320), with q/k/v biases and experts not renormalized;
     * deepseek's two of the experts' width (2 x 96), after one dense layer, weights scaled */
    {.name = "tiny-granitemoe-shared", .arch = "granitemoe", 512, 256, 2, 4, 2, 256, 4096, .rope_base = 10000.0f, .eps = 1e-6f, .tied = true,
     .granite = {12.0f, 0.22f, 0.015625f, 8.0f}, .experts = 8, .experts_used = 2, .ff_exp = 256, .ff_shexp = 192},
    {.name = "tiny-qwen2moe", .arch = "qwen2moe", 512, 256, 2, 4, 2, 384, 4096, .rope_base = 1000000.0f, .eps = 1e-6f, .bias = true, .experts = 8,
     .experts_used = 2, .ff_exp = 128, .ff_shexp = 320},
    {.name = "tiny-olmoe", .arch = "olmoe", 512, 256, 2, 4, 4, 128, 4096, .rope_base = 10000.0f, .eps = 1e-5f, .qk_norm = true, .experts = 8,
     .experts_used = 2, .ff_exp = 128},
    {.name = "tiny-deepseek", .arch = "deepseek", 512, 256, 3, 4, 2, 512, 4096, .rope_base = 10000.0f, .eps = 1e-6f, .experts = 8, .experts_used = 3,
     .ff_exp = 96, .ff_shexp = 192, .dense_lead = 1, .moe_scale = 1.5f},
    /* windows of 8 on the even layers, YaRN x4 from 8 (so both act within a test's prompts), sinks */
    {.name = "tiny-gpt-oss", .arch = "gpt-oss", 512, 256, 4, 4, 2, 256, 4096, .head_dim = 64, .rope_base = 150000.0f, .eps = 1e-5f, .bias = true,
     .window = 8, .swa_period = 2, .orig_ctx = 8, .yarn_factor = 4.0f, .experts = 8, .experts_used = 2, .ff_exp = 128, .oai = true},
    /* Qwen3.5: three Gated DeltaNet layers and one gated attention layer; 2 key heads of 16 for 4 value heads, 4 taps; head 32
     * (E 64 != 4 x 32) with 16 rotary dims in sections 3/3/2 (every pair the text position) */
    {.name = "tiny-qwen35", .arch = "qwen35", 512, 64, 4, 4, 2, 128, 4096, .head_dim = 32, .rot = 16, .rope_base = 10000000.0f, .eps = 1e-6f,
     .qk_norm = true, .ssm_conv = 4, .ssm_state = 16, .ssm_groups = 2, .ssm_heads = 4, .sections = {3, 3, 2, 0}},
    /* the same with one multi-token-prediction layer (loaded, never run) */
    {.name = "tiny-qwen35-mtp", .arch = "qwen35", 512, 64, 4, 4, 2, 128, 4096, .head_dim = 32, .rot = 16, .rope_base = 10000000.0f, .eps = 1e-6f,
     .qk_norm = true, .ssm_conv = 4, .ssm_state = 16, .ssm_groups = 2, .ssm_heads = 4, .sections = {3, 3, 2, 0}, .nextn = 1},
    /* with 8 experts, 2 per token, of 32, and a gated shared expert of 48 */
    {.name = "tiny-qwen35moe", .arch = "qwen35moe", 512, 64, 4, 4, 2, 128, 4096, .head_dim = 32, .rot = 16, .rope_base = 10000000.0f,
     .eps = 1e-6f, .qk_norm = true, .experts = 8, .experts_used = 2, .ff_exp = 32, .ff_shexp = 48, .ssm_conv = 4, .ssm_state = 16,
     .ssm_groups = 2, .ssm_heads = 4, .sections = {3, 3, 2, 0}},
    /* Qwen3.6-35B-A3B's width (HF config as convert_hf_to_gguf.py maps it: 256 experts, 8 per token, of 512, a shared expert of 512;
     * gated attention 16:2 heads of 256, 64 rotary dims in sections 11/11/10; Gated DeltaNet 16 key and 32 value heads of 128, 4 taps;
     * its 248320-token vocabulary) with 4 of its 40 layers: 3 Gated DeltaNet, 1 attention */
    {.name = "qwen3.6-35b-a3b-4l", .arch = "qwen35moe", 248320, 2048, 4, 16, 2, 512, 262144, .head_dim = 256, .rot = 64, .rope_base = 10000000.0f,
     .eps = 1e-6f, .qk_norm = true, .experts = 256, .experts_used = 8, .ff_exp = 512, .ff_shexp = 512, .ssm_conv = 4, .ssm_state = 128,
     .ssm_groups = 16, .ssm_heads = 32, .sections = {11, 11, 10, 0}},
    /* Qwen3.5-27B's (dense FFN 17408; attention 24:4 heads of 256; Gated DeltaNet 16 key and 48 value heads of 128) with 4 of its 64 layers */
    {.name = "qwen3.5-27b-4l", .arch = "qwen35", 248320, 5120, 4, 24, 4, 17408, 262144, .head_dim = 256, .rot = 64, .rope_base = 10000000.0f,
     .eps = 1e-6f, .qk_norm = true, .ssm_conv = 4, .ssm_state = 128, .ssm_groups = 16, .ssm_heads = 48, .sections = {11, 11, 10, 0}},
    /* LFM2: conv, conv, attention, conv, conv, attention; 4:2 heads of 16 with per-head q/k norms, 3 taps; tied output */
    {.name = "tiny-lfm2", .arch = "lfm2", 512, 64, 6, 4, 2, 128, 4096, .rope_base = 1000000.0f, .eps = 1e-5f, .tied = true, .qk_norm = true,
     .sc_taps = 3, .sc_attn = 0x24u},
    /* the same with a sliding window of 8 on both attention layers (llama.cpp's optional lfm2 window) */
    {.name = "tiny-lfm2-swa", .arch = "lfm2", 512, 64, 6, 4, 2, 128, 4096, .rope_base = 1000000.0f, .eps = 1e-5f, .tied = true,
     .qk_norm = true, .window = 8, .sc_taps = 3, .sc_attn = 0x24u},
    /* LFM2-1.2B (HF config: 16 layers, attention at 2, 5, 8, 10, 12, 14 (full_attn_idxs), 32:8 heads of 64, conv_L_cache 3, the FFN
     * 12288 auto-adjusted to 8192, rope_theta 1e6, norm_eps 1e-5, 128K context, its 65536-token vocabulary, tied embeddings) */
    {.name = "lfm2-1.2b", .arch = "lfm2", 65536, 2048, 16, 32, 8, 8192, 128000, .rope_base = 1000000.0f, .eps = 1e-5f, .tied = true,
     .qk_norm = true, .sc_taps = 3, .sc_attn = (1u << 2) | (1u << 5) | (1u << 8) | (1u << 10) | (1u << 12) | (1u << 14)},
    /* Granite 4.0-H (dense): Mamba-2, Mamba-2, attention, Mamba-2; 4:2 heads of 16 without RoPE, granite's scales; Mamba-2 of 8
     * heads of 16 (d_inner 2E), 2 groups, state 16, 4 taps; FFN 128 */
    {.name = "tiny-granitehybrid", .arch = "granitehybrid", 512, 64, 4, 4, 2, 128, 4096, .rope_base = 10000.0f, .eps = 1e-5f, .tied = true,
     .granite = {12.0f, 0.22f, 0.015625f, 8.0f}, .m2 = {4, 128, 16, 8, 2}, .m2_attn = 0x4u, .nope = true},
    /* Granite 4.0-H's MoE: tiny-granitehybrid's layers with 8 experts of 64, 2 per token (softmax, renormalized), beside a shared
     * expert of 96 on every layer */
    {.name = "tiny-granitehybrid-moe", .arch = "granitehybrid", 512, 64, 4, 4, 2, 64, 4096, .rope_base = 10000.0f, .eps = 1e-5f, .tied = true,
     .granite = {12.0f, 0.22f, 0.015625f, 8.0f}, .m2 = {4, 128, 16, 8, 2}, .m2_attn = 0x4u, .nope = true, .experts = 8, .experts_used = 2,
     .ff_exp = 64, .ff_shexp = 96},
    /* Granite 4.0-H Tiny (7B-A1B; as recalled from its HF config, llama.cpp's loader confirms E 1536 with expert FFN 512): 12:4
     * heads of 128 without RoPE, 64 experts of 512, 6 per token, a shared expert of 1024; Mamba-2 of 48 heads of 64 (d_inner 3072),
     * 1 group, state 128, 4 taps; scales 12, 0.22, 1/128, logits 6; its 100352-token vocabulary; 4 of its 40 layers, the last
     * (its layer 5's kind) attention */
    {.name = "granite-4.0-h-tiny-4l", .arch = "granitehybrid", 100352, 1536, 4, 12, 4, 512, 131072, .head_dim = 128, .rope_base = 10000.0f,
     .eps = 1e-5f, .tied = true, .granite = {12.0f, 0.22f, 0.0078125f, 6.0f}, .m2 = {4, 3072, 128, 48, 1}, .m2_attn = 0x8u, .nope = true,
     .experts = 64, .experts_used = 6, .ff_exp = 512, .ff_shexp = 1024},
    /* Nemotron-H: blocks Mamba-2, FFN, Mamba-2, attention, FFN, Mamba-2, FFN (layers M+F, M, A+F, M+F); 4:2 heads of 16 without RoPE;
     * Mamba-2 of 8 heads of 16 (d_inner 128), 2 groups, state 16, 4 taps; FFN 128 */
    {.name = "tiny-nemotron-h", .arch = "nemotron_h", 512, 64, 4, 4, 2, 128, 4096, .rope_base = 10000.0f, .eps = 1e-5f, .tied = true,
     .m2 = {4, 128, 16, 8, 2}, .m2_attn = 0x4u, .nh = true, .nh_ffn = 0xdu},
    /* Nemotron-H MoE: tiny-nemotron-h's blocks, the FFN blocks 8 squared-ReLU experts of 48, 2 per token (sigmoid, the selection
     * bias, renormalized, x2.5), beside a shared expert of 64 */
    {.name = "tiny-nemotron-h-moe", .arch = "nemotron_h_moe", 512, 64, 4, 4, 2, 128, 4096, .rope_base = 10000.0f, .eps = 1e-5f, .tied = true,
     .m2 = {4, 128, 16, 8, 2}, .m2_attn = 0x4u, .nh = true, .nh_ffn = 0xdu, .experts = 8, .experts_used = 2, .ff_exp = 48, .ff_shexp = 64},
    /* LFM2-MoE: tiny-lfm2's layers with 8 experts, 2 per token (sigmoid, a selection bias), of 48, after one dense layer */
    {.name = "tiny-lfm2moe", .arch = "lfm2moe", 512, 64, 6, 4, 2, 128, 4096, .rope_base = 1000000.0f, .eps = 1e-5f, .tied = true,
     .qk_norm = true, .sc_taps = 3, .sc_attn = 0x24u, .experts = 8, .experts_used = 2, .ff_exp = 48, .dense_lead = 1},
    /* LFM2-8B-A1B (its HF config as llama.cpp's converter maps it, which writes sigmoid gating and the expert_bias as
     * exp_probs_b: E 2048, 24 layers, 32 experts, 4 per token, of 1792 (moe_intermediate_size), the first 2 dense
     * (num_dense_layers); and, as recalled, not in the peer tree: 32:8 heads of 64, dense FFN 7168, conv_L_cache 3, rope_theta 1e6,
     * norm_eps 1e-5, 128K context, its 65536-token vocabulary, tied embeddings, attention at 2, 6, 10, 14, 18, 21) with 4 of its 24
     * layers: conv, conv, attention, conv */
    {.name = "lfm2-8b-a1b-4l", .arch = "lfm2moe", 65536, 2048, 4, 32, 8, 7168, 128000, .rope_base = 1000000.0f, .eps = 1e-5f, .tied = true,
     .qk_norm = true, .sc_taps = 3, .sc_attn = 1u << 2, .experts = 32, .experts_used = 4, .ff_exp = 1792, .dense_lead = 2},
    /* GLM-4.5: 4:2 heads of 32 (E 64 != 4 x 32), 16 rotary dims (NEOX), q/k/v biases, per-head q/k norms (the 355B's); one dense
     * layer, then 8 experts, 2 per token (sigmoid, a selection bias, renormalized, x2.5) of 32 beside one shared expert; one MTP
     * layer (loaded, never run) */
    {.name = "tiny-glm4moe", .arch = "glm4moe", 512, 64, 3, 4, 2, 128, 4096, .head_dim = 32, .rot = 16, .rope_base = 1000000.0f, .eps = 1e-5f,
     .bias = true, .qk_norm = true, .experts = 8, .experts_used = 2, .ff_exp = 32, .ff_shexp = 32, .dense_lead = 1, .moe_scale = 2.5f,
     .moe_norm = true, .nextn = 1},
    /* GLM-4.5-Air (HF config as llama.cpp's converter maps it: E 4096, 96:8 heads of 128 with partial_rotary_factor 0.5 (64 rotary
     * dims), attention biases and no q/k norms, dense FFN 10944, 128 experts, 8 per token, of 1408 with one shared expert,
     * first_k_dense_replace 1, routed_scaling_factor 1.0, norm_topk_prob, rope_theta 1e6, rms_norm_eps 1e-5, 128K context,
     * its 151552-token vocabulary, untied output, num_nextn_predict_layers 1) with 4 of its 46 layers (1 dense, 3 MoE) and its
     * MTP layer */
    {.name = "glm-4.5-air-4l", .arch = "glm4moe", 151552, 4096, 4, 96, 8, 10944, 131072, .head_dim = 128, .rot = 64, .rope_base = 1000000.0f,
     .eps = 1e-5f, .bias = true, .experts = 128, .experts_used = 8, .ff_exp = 1408, .ff_shexp = 1408, .dense_lead = 1, .moe_scale = 1.0f,
     .moe_norm = true, .nextn = 1},
    /* Gemma 4: six layers, 4:2 heads, windows of 8 on layers 0, 1, 3, 4 (heads of 32, all rotated, base 10000), global 2 and 5
     * (heads of 64, proportional RoPE at 1e6); the last three share K/V (3 and 4 read 1, 5 reads 2) and are twice as wide (FFN 512
     * for 256); per-layer embeddings of 16; no attn_v on the global layers; final softcap 10 */
    {.name = "tiny-gemma4", .arch = "gemma4", 512, 256, 6, 4, 2, 256, 4096, .head_dim = 64, .rope_base = 1000000.0f, .eps = 1e-6f, .tied = true,
     .qk_norm = true, .sandwich = true, .no_space_prefix = true, .window = 8, .swa_period = 3, .swa_base = 10000.0f, .final_cap = 10.0f,
     .head_dim_swa = 32, .rot_swa = 32, .kv_shared = 3, .ple = 16, .ff_double = true, .no_v_global = true},
    /* Gemma 4 E2B (HF text_config as llama.cpp's converter maps it): 35 layers, E 1536, 8 query heads over 1, window heads 256
     * (window 512, 4 of every 5 layers) and global 512 (partial 0.25), FFN 6144 and 12288 on the 20 KV-shared layers, per-layer
     * embeddings of 256, its 262144-token vocabulary (random SentencePiece pieces); every layer keeps k_proj and v_proj */
    {.name = "gemma4-e2b", .arch = "gemma4", 262144, 1536, 35, 8, 1, 6144, 131072, .head_dim = 512, .rope_base = 1000000.0f, .eps = 1e-6f,
     .tied = true, .qk_norm = true, .sandwich = true, .no_space_prefix = true, .window = 512, .swa_period = 5, .swa_base = 10000.0f,
     .head_dim_swa = 256, .rot_swa = 256, .kv_shared = 20, .ple = 256, .ff_double = true, .keep_shared_k = true},
    /* Gemma 4 with experts: six layers, 4 query heads over 4 KV heads on the window layers and 2 on the global ones; 8 experts,
     * 2 per token, of 64, beside a dense FFN of 128; the last three share K/V (3, 4 read 1; 5 reads 2); no PLE; no attn_v on the
     * global layers; final softcap 10 */
    {.name = "tiny-gemma4moe", .arch = "gemma4", 512, 256, 6, 4, 4, 128, 4096, .head_dim = 64, .rope_base = 1000000.0f, .eps = 1e-6f,
     .tied = true, .qk_norm = true, .sandwich = true, .no_space_prefix = true, .window = 8, .swa_period = 3, .swa_base = 10000.0f,
     .final_cap = 10.0f, .head_dim_swa = 32, .rot_swa = 32, .kv_shared = 3, .no_v_global = true, .kv_heads_global = 2, .experts = 8,
     .experts_used = 2, .ff_exp = 64},
    /* the same with the experts' gate and up stacks split (ffn_gate_exps, ffn_up_exps) and 2 KV heads on every layer */
    {.name = "tiny-gemma4moe-split", .arch = "gemma4", 512, 256, 6, 4, 2, 128, 4096, .head_dim = 64, .rope_base = 1000000.0f, .eps = 1e-6f,
     .tied = true, .qk_norm = true, .sandwich = true, .no_space_prefix = true, .window = 8, .swa_period = 3, .swa_base = 10000.0f,
     .final_cap = 10.0f, .head_dim_swa = 32, .rot_swa = 32, .kv_shared = 3, .no_v_global = true, .experts = 8,
     .experts_used = 2, .ff_exp = 64, .split_exps = true},
    /* Gemma 4 26B-A4B (HF text_config as llama.cpp's converter maps it) with 4 of its 30 layers: E 2816, 16 query heads over 8 KV
     * heads on the window layers (256, window 1024) and 2 on the global ones (512, partial 0.25; no v_proj: V from the raw K);
     * 128 experts, 8 per token, of 704 beside a dense FFN of 2112 on every layer; its 262144-token vocabulary; three window
     * layers and one global (the real pattern is five and one) */
    {.name = "gemma4-26b-a4b-4l", .arch = "gemma4", 262144, 2816, 4, 16, 8, 2112, 262144, .head_dim = 512, .rope_base = 1000000.0f,
     .eps = 1e-6f, .tied = true, .qk_norm = true, .sandwich = true, .no_space_prefix = true, .window = 1024, .swa_period = 4,
     .swa_base = 10000.0f, .head_dim_swa = 256, .rot_swa = 256, .no_v_global = true, .kv_heads_global = 2, .experts = 128,
     .experts_used = 8, .ff_exp = 704},
    {.name = "tinyllama-1.1b", .arch = "llama", 32000, 2048, 22, 32, 4, 5632, 2048, .rope_base = 10000.0f, .eps = 1e-5f},
    {.name = "llama-3.2-1b", .arch = "llama", 128256, 2048, 16, 32, 8, 8192, 131072, .rope_base = 500000.0f, .eps = 1e-5f, .tied = true,
     .llama3_rope = true},
    {.name = "smollm2-135m", .arch = "llama", 49152, 576, 30, 9, 3, 1536, 8192, .rope_base = 100000.0f, .eps = 1e-5f, .tied = true},
    {.name = "qwen2.5-0.5b", .arch = "qwen2", 151936, 896, 24, 14, 2, 4864, 32768, .rope_base = 1000000.0f, .eps = 1e-6f, .tied = true, .bias = true},
    {.name = "qwen3-0.6b", .arch = "qwen3", 151936, 1024, 28, 16, 8, 3072, 40960, .head_dim = 128, .rope_base = 1000000.0f, .eps = 1e-6f,
     .tied = true, .qk_norm = true},
    /* deepseek2: 4 heads over one latent row of 32 rotary + 64 latent dims; q_lora 96; heads' no-RoPE key 32, value 32; one dense
     * layer, then 8 experts of 64 in 4 groups (2 used), 2 per token, sigmoid with a selection bias, renormalized, x2.5, one shared
     * expert; YaRN x4 from 32 with the log multiplier 0.0707 (V2-Lite's mscale_all_dim 0.707) */
    {.name = "tiny-deepseek2", .arch = "deepseek2", 512, 256, 3, 4, 1, 512, 4096, .head_dim = 96, .rot = 32, .rope_base = 10000.0f, .eps = 1e-6f,
     .orig_ctx = 32, .yarn_factor = 4.0f, .yarn_log_mul = 0.0707f, .experts = 8, .experts_used = 2, .ff_exp = 64, .ff_shexp = 64, .dense_lead = 1,
     .moe_scale = 2.5f, .kv_lora = 64, .q_lora = 96, .qk_nope = 32, .v_mla = 32, .groups = 4, .groups_used = 2, .sigmoid = true, .norm_w = true},
    /* V2-Lite's kind: attn_q (no q_lora), softmax routing not renormalized, no groups, no YaRN; tied output */
    {.name = "tiny-deepseek2-lite", .arch = "deepseek2", 512, 256, 2, 4, 1, 512, 4096, .head_dim = 96, .rot = 32, .rope_base = 10000.0f,
     .eps = 1e-6f, .tied = true, .experts = 8, .experts_used = 2, .ff_exp = 64, .ff_shexp = 128, .dense_lead = 1, .kv_lora = 64, .qk_nope = 64,
     .v_mla = 48},
    /* DeepSeek-V3 / R1 (HF config: E 7168, 128 heads, q_lora 1536, kv_lora 512, qk_nope 128 + rope 64, v 128, dense FFN 18432, 256
     * experts of 2048, 8 per token in 8 groups (4 used), sigmoid with e_score_correction_bias, renormalized, x2.5, one shared
     * expert, the first 3 layers dense, rope_theta 10000, YaRN x40 from 4096 (mscale_all_dim 1: log multiplier 0.1), eps 1e-6, its
     * 129280-token vocabulary) with 4 of its 61 layers: 3 dense + 1 MoE */
    {.name = "deepseek-v3-4l", .arch = "deepseek2", 129280, 7168, 4, 128, 1, 18432, 163840, .head_dim = 576, .rot = 64, .rope_base = 10000.0f,
     .eps = 1e-6f, .orig_ctx = 4096, .yarn_factor = 40.0f, .yarn_log_mul = 0.1f, .experts = 256, .experts_used = 8, .ff_exp = 2048,
     .ff_shexp = 2048, .dense_lead = 3, .moe_scale = 2.5f, .kv_lora = 512, .q_lora = 1536, .qk_nope = 128, .v_mla = 128, .groups = 8,
     .groups_used = 4, .sigmoid = true, .norm_w = true},
    /* Kimi-K2 (its HF config: V3's layer with 64 heads, 384 experts, 8 per token, one group, x2.827, the first layer dense,
     * rope_theta 50000, YaRN x32 from 4096, its 163840-token vocabulary) with 2 of its 61 layers: 1 dense + 1 MoE */
    {.name = "kimi-k2-2l", .arch = "deepseek2", 163840, 7168, 2, 64, 1, 18432, 131072, .head_dim = 576, .rot = 64, .rope_base = 50000.0f,
     .eps = 1e-6f, .orig_ctx = 4096, .yarn_factor = 32.0f, .yarn_log_mul = 0.1f, .experts = 384, .experts_used = 8, .ff_exp = 2048,
     .ff_shexp = 2048, .dense_lead = 1, .moe_scale = 2.827f, .kv_lora = 512, .q_lora = 1536, .qk_nope = 128, .v_mla = 128, .sigmoid = true,
     .norm_w = true},
    {.name = "granite-3.3-2b", .arch = "granite", 49159, 2048, 40, 32, 8, 8192, 131072, .rope_base = 10000000.0f, .eps = 1e-5f, .tied = true,
     .granite = {12.0f, 0.22f, 0.015625f, 8.0f}},
    {.name = "olmo2-1b", .arch = "olmo2", 100352, 2048, 16, 16, 16, 8192, 4096, .rope_base = 500000.0f, .eps = 1e-6f, .qk_norm = true,
     .post_norms = true},
    {.name = "smollm3-3b", .arch = "smollm3", 128256, 2048, 36, 16, 4, 11008, 65536, .rope_base = 5000000.0f, .eps = 1e-6f, .tied = true},
    {.name = "phi-4-mini", .arch = "phi3", 200064, 3072, 32, 24, 8, 8192, 131072, .rot = 96, .rope_base = 10000.0f, .eps = 1e-5f, .tied = true,
     .longrope = true, .orig_ctx = 4096},
    {.name = "gemma2-2b", .arch = "gemma2", 256000, 2304, 26, 8, 4, 9216, 8192, .head_dim = 256, .rope_base = 10000.0f, .eps = 1e-6f, .tied = true,
     .sandwich = true, .no_space_prefix = true, .window = 4096, .swa_period = 2, .attn_cap = 50.0f, .final_cap = 30.0f},
    {.name = "gemma3-1b", .arch = "gemma3", 262144, 1152, 26, 4, 1, 6912, 32768, .head_dim = 256, .rope_base = 1000000.0f, .eps = 1e-6f,
     .tied = true, .qk_norm = true, .sandwich = true, .no_space_prefix = true, .window = 512, .swa_period = 6, .swa_base = 10000.0f},
    /* Qwen3-30B-A3B's width (128 experts, 8 per token, expert FFN 768, GQA 32:4, head 128) with 8 of its 48 layers */
    {.name = "qwen3-30b-a3b-8l", .arch = "qwen3moe", 151936, 2048, 8, 32, 4, 6144, 40960, .head_dim = 128, .rope_base = 1000000.0f, .eps = 1e-6f,
     .qk_norm = true, .experts = 128, .experts_used = 8, .ff_exp = 768},
    /* gpt-oss-20b's width (32 experts, 4 per token, 64 query heads over 8, head 64, windows of 128 on even layers, YaRN x32 from
     * 4096) with 4 of its 24 layers */
    {.name = "gpt-oss-20b-4l", .arch = "gpt-oss", 201088, 2880, 4, 64, 8, 2880, 131072, .head_dim = 64, .rope_base = 150000.0f, .eps = 1e-5f,
     .bias = true, .window = 128, .swa_period = 2, .orig_ctx = 4096, .yarn_factor = 32.0f, .experts = 32, .experts_used = 4, .ff_exp = 2880,
     .oai = true},
};

const char *kvb_model_shapes(void) {
    return "tiny, tiny-qwen2, tiny-32k, tiny-llama-bias, tiny-qwen3, tiny-granite, tiny-olmo2, tiny-phi3, tiny-smollm3, tiny-mistral3, "
           "tiny-gemma2, tiny-gemma3, tinyllama-1.1b, llama-3.2-1b, smollm2-135m, qwen2.5-0.5b, qwen3-0.6b, granite-3.3-2b, olmo2-1b, smollm3-3b, "
           "phi-4-mini, gemma2-2b, gemma3-1b, tiny-qwen3moe, tiny-mixtral, tiny-granitemoe, tiny-granitemoe-shared, tiny-qwen2moe, tiny-deepseek, tiny-olmoe, tiny-gpt-oss, qwen3-30b-a3b-8l, gpt-oss-20b-4l, "
           "tiny-qwen35, tiny-qwen35-mtp, tiny-qwen35moe, qwen3.6-35b-a3b-4l, qwen3.5-27b-4l, tiny-gemma4, gemma4-e2b, tiny-gemma4moe, tiny-gemma4moe-split, gemma4-26b-a4b-4l, tiny-lfm2, tiny-lfm2-swa, lfm2-1.2b, tiny-lfm2moe, lfm2-8b-a1b-4l, "
           "tiny-glm4moe, glm-4.5-air-4l, tiny-deepseek2, tiny-deepseek2-lite, deepseek-v3-4l, kimi-k2-2l, tiny-granitehybrid, tiny-granitehybrid-moe, granite-4.0-h-tiny-4l, "
           "tiny-nemotron-h, tiny-nemotron-h-moe";
}

static float urand(uint64_t *rs) { return (float)(kvb_rand_unit(rs) * 2.0 - 1.0); }

static kvb_status rand_mat(struct owned *o, struct kvb_mat *m, int64_t n_in, int64_t n_out) {
    float *p = keep(o, sizeof(float) * (size_t)(n_in * n_out));
    if (!p) return kvb_fail(KVB_ERR_NOMEM, "mkmodel: out of memory for a %lld x %lld matrix", (long long)n_out, (long long)n_in);
    const float s = 1.0f / sqrtf((float)n_in);
    for (int64_t i = 0; i < n_in * n_out; i++) p[i] = urand(&o->rs) * s;
    *m = (struct kvb_mat){GGML_TYPE_F32, n_in, n_out, sizeof(float) * (size_t)n_in, (const uint8_t *)p};
    return KVB_OK;
}

/* n_out rows as rand_mat makes them (the same random values), held as q8_0
 * when large: a 30B-A3B's experts (4.8G values in 8 layers) would not fit
 * in f32. Writing to q8_0 then copies them; to another type, requantizes. */
static kvb_status rand_stack(struct owned *o, struct kvb_mat *m, int64_t n_in, int64_t n_out) {
    if (n_in * n_out < ((int64_t)1 << 24) || n_in % 32) return rand_mat(o, m, n_in, n_out);
    const size_t rb = kvb_ggml_row_size(GGML_TYPE_Q8_0, n_in);
    uint8_t *p = keep(o, rb * (size_t)n_out);
    float *row = kvb_malloc(sizeof(float) * (size_t)n_in);
    if (!p || !row) {
        kvb_free(row);
        return kvb_fail(KVB_ERR_NOMEM, "mkmodel: out of memory for %lld expert rows of %lld", (long long)n_out, (long long)n_in);
    }
    const float s = 1.0f / sqrtf((float)n_in);
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++) row[i] = urand(&o->rs) * s;
        kvb_quantize_row(GGML_TYPE_Q8_0, row, p + (size_t)r * rb, n_in);
    }
    kvb_free(row);
    *m = (struct kvb_mat){GGML_TYPE_Q8_0, n_in, n_out, rb, p};
    return KVB_OK;
}

static float *const_vec(struct owned *o, int64_t n, float v, bool noise) {
    float *p = keep(o, sizeof(float) * (size_t)n);
    if (p)
        for (int64_t i = 0; i < n; i++) p[i] = v + (noise ? 0.1f * urand(&o->rs) : 0.0f);
    return p;
}

/* Synthetic SentencePiece vocabulary of n pieces in GGUF conventions. */
static kvb_status make_vocab(int32_t n, struct kvb_vocab **out) {
    /* build a tokenizer.bin image and reuse its loader: pieces use ' ' */
    size_t cap = 64 + (size_t)n * 24;
    uint8_t *img = kvb_malloc(cap);
    if (!img) return kvb_fail(KVB_ERR_NOMEM, "mkmodel: out of memory for the vocabulary");
    uint32_t max_len = 16;
    memcpy(img, &max_len, 4);
    size_t at = 4;
    const char *alpha = "etaoinshrdlucmfwypvbgkqjxzETAOINSHRDLUCMFWYPVBGKQJXZ0123456789.,!?'-:;()\"";
    const size_t na = strlen(alpha);
    for (int32_t i = 0; i < n; i++) {
        char piece[32];
        if (i == 0) snprintf(piece, sizeof piece, "<unk>");
        else if (i == 1) snprintf(piece, sizeof piece, "\n<s>\n");
        else if (i == 2) snprintf(piece, sizeof piece, "\n</s>\n");
        else if (i < 259) snprintf(piece, sizeof piece, "<0x%02X>", i - 3);
        else {
            int32_t k = i - 259; /* " ", then " x", "x", then pairs, then numbered fillers */
            if (k == 0) snprintf(piece, sizeof piece, " ");
            else if (k <= (int32_t)na) snprintf(piece, sizeof piece, " %c", alpha[k - 1]);
            else if (k <= 2 * (int32_t)na) snprintf(piece, sizeof piece, "%c", alpha[k - 1 - na]);
            else if (k <= 2 * (int32_t)na + 26 * 26) { int32_t q = k - 1 - 2 * (int32_t)na; snprintf(piece, sizeof piece, "%c%c", alpha[q / 26], alpha[q % 26]); }
            else snprintf(piece, sizeof piece, " w%d", (int)k);
        }
        int32_t len = (int32_t)strlen(piece);
        float score = i < 259 ? 0.0f : -(float)(i - 259);
        memcpy(img + at, &score, 4);
        memcpy(img + at + 4, &len, 4);
        memcpy(img + at + 8, piece, (size_t)len);
        at += 8 + (size_t)len;
    }
    kvb_status st = kvb_vocab_from_llama2c(img, at, n, "mkmodel vocabulary", out);
    kvb_free(img);
    return st;
}

/* gemma4's layer kinds, widths and keys (the family's rules, kvb_family_gemma4, as the loader). */
static kvb_status make_gemma4(struct kvb_model *m, const struct shape *sh) {
    struct kvb_model_info *in = &m->info;
    const int32_t L = sh->layers;
    if (!(m->swa_mask = kvb_calloc((size_t)L, 1)) || !(m->n_ff_layer = kvb_malloc(sizeof(int32_t) * (size_t)L)))
        return kvb_fail(KVB_ERR_NOMEM, "mkmodel: out of memory");
    for (int32_t l = 0; l < L; l++) {
        m->swa_mask[l] = (uint32_t)l % sh->swa_period < sh->swa_period - 1;
        m->n_ff_layer[l] = sh->ff_double && l >= L - sh->kv_shared ? 2 * sh->ff : sh->ff;
        in->n_ff = KVB_MAX(in->n_ff, m->n_ff_layer[l]);
    }
    if (sh->kv_heads_global) { /* per-layer KV heads: the window layers' kv_heads, the global ones' kv_heads_global */
        if (!(m->n_kv_layer = kvb_malloc(sizeof(int32_t) * (size_t)L))) return kvb_fail(KVB_ERR_NOMEM, "mkmodel: out of memory");
        for (int32_t l = 0; l < L; l++) m->n_kv_layer[l] = m->swa_mask[l] ? sh->kv_heads : sh->kv_heads_global;
        in->n_head_kv = KVB_MAX(sh->kv_heads, sh->kv_heads_global);
    }
    m->head_dim_swa = in->head_dim_swa = sh->head_dim_swa;
    m->rope_dims_swa = sh->rot_swa;
    m->n_kv_shared = sh->kv_shared;
    m->n_ple = in->n_embd_per_layer = sh->ple;
    m->rope_base_swa = sh->swa_base;
    m->rope_freq_scale_swa = 1.0f;
    return kvb_family_gemma4(m, sh->window);
}

kvb_status kvb_model_make(const char *shape, uint64_t seed, const char *vocab_path, struct kvb_model **out, void **owned_out) {
    const struct shape *sh = NULL;
    for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++)
        if (!strcmp(shape, k_shapes[i].name)) sh = &k_shapes[i];
    if (!sh) return kvb_fail(KVB_ERR_INVALID, "mkmodel: unknown shape '%s' (%s)", shape, kvb_model_shapes());
    struct kvb_model *m = kvb_calloc(1, sizeof *m);
    struct owned *o = kvb_calloc(1, sizeof *o);
    if (o) o->rs = seed * 0x2545F4914F6CDD1Dull + 1;
    if (!m || !o) {
        kvb_free(m);
        kvb_free(o);
        return kvb_fail(KVB_ERR_NOMEM, "mkmodel: out of memory");
    }
    struct kvb_model_info *in = &m->info;
    kvb_model_neutral(m);
    snprintf(in->arch, sizeof in->arch, "%s", sh->arch);
    snprintf(in->source, sizeof in->source, "mkmodel");
    snprintf(m->path, sizeof m->path, "kvbound mkmodel %s seed %llu", shape, (unsigned long long)seed);
    in->n_vocab = sh->vocab; in->n_embd = sh->dim; in->n_layer = sh->layers; in->n_head = sh->heads; in->n_head_kv = sh->kv_heads;
    in->head_dim = sh->head_dim ? sh->head_dim : sh->dim / sh->heads; in->n_ff = sh->ff; in->n_ctx_train = sh->ctx; in->rms_eps = sh->eps;
    in->rope_base = sh->rope_base; in->rope_freq_scale = sh->rope_factor ? 1.0f / sh->rope_factor : 1.0f; in->rope_dims = sh->rot ? sh->rot : in->head_dim;
    in->tied_output = sh->tied;
    in->has_qkv_bias = sh->bias;
    if (sh->experts) {
        in->n_expert = sh->experts;
        in->n_expert_used = sh->experts_used;
        in->n_ff_exp = sh->ff_exp;
        in->n_moe_layers = sh->layers - sh->dense_lead;
        in->n_ff_shexp = sh->ff_shexp;
    }
    if (sh->nh && sh->experts) { /* nemotron_h_moe: sigmoid routing, renormalized, scaled (the keys the export writes) */
        m->moe_gating = KVB_MOE_SIGMOID;
        m->moe_norm = true;
        m->moe_scale = 2.5f;
        in->n_moe_layers = 0;
        for (int32_t l = 0; l < sh->layers; l++) in->n_moe_layers += (int32_t)(sh->nh_ffn >> l & 1u);
    }
    if (sh->granite[0] != 0) {
        m->embd_scale = sh->granite[0];
        m->residual_scale = sh->granite[1];
        m->q_scale = sh->granite[2] * sqrtf((float)in->head_dim);
        m->logit_scale = sh->granite[3];
    }
    m->rope_orig_ctx = sh->orig_ctx ? sh->orig_ctx : sh->ctx;
    if (sh->moe_scale != 0) m->moe_scale = sh->moe_scale;
    if (sh->temp_beta != 0) {
        m->temp_beta = sh->temp_beta;
        m->temp_floor = m->rope_orig_ctx;
    }
    bool fused_up = false;
    kvb_status st = kvb_family_traits(m, &fused_up); /* rope layout, q/k norm span, NoPE layers, Gemma's scales and defaults: the family's */
    if (st == KVB_OK && sh->window && !sh->head_dim_swa) st = kvb_family_windows(m, sh->window, sh->swa_period ? sh->swa_period : m->swa_period);
    if (sh->swa_base) m->rope_base_swa = sh->swa_base;
    if (sh->attn_cap) m->attn_softcap = sh->attn_cap;
    if (sh->final_cap) m->final_softcap = sh->final_cap;
    if (st == KVB_OK && sh->ssm_heads) { /* qwen35: the Gated DeltaNet layers and their state (the family's rule, as the loader) */
        in->ssm_conv = sh->ssm_conv;
        in->ssm_state = sh->ssm_state;
        in->ssm_groups = sh->ssm_groups;
        in->ssm_heads = sh->ssm_heads;
        in->n_nextn_layers = sh->nextn;
        m->full_attn_interval = sh->fa_every ? sh->fa_every : 4;
        memcpy(m->rope_sections, sh->sections, sizeof m->rope_sections);
        st = kvb_family_hybrid(m);
    }
    if (st == KVB_OK && sh->sc_taps) { /* lfm2: the short-conv layers (every layer whose sc_attn bit is clear) and their state */
        if (!(m->recurrent = kvb_calloc((size_t)sh->layers, 1))) st = kvb_fail(KVB_ERR_NOMEM, "mkmodel: out of memory");
        for (int32_t l = 0; m->recurrent && l < sh->layers; l++) m->recurrent[l] = !(sh->sc_attn >> l & 1u);
        in->ssm_conv = sh->sc_taps;
        if (st == KVB_OK) st = kvb_family_shortconv(m, sh->window);
    }
    if (st == KVB_OK && !strcmp(sh->arch, "glm4moe")) { /* its routing and MTP layers (the family's defaults are sigmoid, not renormalized) */
        m->moe_norm = sh->moe_norm;
        in->n_nextn_layers = sh->nextn;
    }
    if (st == KVB_OK && sh->m2[0]) { /* granitehybrid: the Mamba-2 layers (every layer whose m2_attn bit is clear) and their state */
        if (!(m->recurrent = kvb_calloc((size_t)sh->layers, 1))) st = kvb_fail(KVB_ERR_NOMEM, "mkmodel: out of memory");
        for (int32_t l = 0; m->recurrent && l < sh->layers; l++) m->recurrent[l] = !(sh->m2_attn >> l & 1u);
        in->ssm_conv = sh->m2[0];
        in->ssm_inner = sh->m2[1];
        in->ssm_state = sh->m2[2];
        in->ssm_heads = sh->m2[3];
        in->ssm_groups = sh->m2[4];
        if (st == KVB_OK) st = kvb_family_mamba2(m);
        if (st == KVB_OK && sh->nh) { /* nemotron_h: the file's blocks, an FFN block after each layer whose nh_ffn bit is set */
            if (!(m->file_layer = kvb_malloc(sizeof(int32_t) * 2 * (size_t)sh->layers))) st = kvb_fail(KVB_ERR_NOMEM, "mkmodel: out of memory");
            int32_t b = 0;
            for (int32_t l = 0; m->file_layer && l < sh->layers; l++) {
                m->file_layer[2 * l] = b++;
                m->file_layer[2 * l + 1] = sh->nh_ffn >> l & 1u ? b++ : -1;
            }
            m->n_file_layers = b;
        }
    }
    if (sh->nope) in->rope_type = KVB_ROPE_NONE;
    if (st == KVB_OK && sh->head_dim_swa) st = make_gemma4(m, sh);
    if (st == KVB_OK) st = vocab_path ? kvb_vocab_load(vocab_path, &m->vocab) : make_vocab(sh->vocab, &m->vocab);
    if (st == KVB_OK && sh->no_space_prefix && !vocab_path) m->vocab->add_space_prefix = false;
    if (st == KVB_OK) in->n_vocab = m->vocab->n; /* a real vocabulary sets the embedding rows */
    const int64_t E = sh->dim, V = in->n_vocab;
    /* the 2026 families' real widths (qwen35's vocabulary at E 5120 would be 5 GB a table in f32, a 5120 x 17408 FFN)
     * held as q8_0 where large (rand_stack), as the experts are; the tiny shapes stay f32 */
    kvb_status (*const mat)(struct owned *, struct kvb_mat *, int64_t, int64_t) =
        sh->ssm_heads || sh->head_dim_swa || sh->sc_taps || sh->kv_lora || sh->m2[0] || !strcmp(sh->arch, "glm4moe") ? rand_stack : rand_mat;
    if (st == KVB_OK) st = mat(o, &m->tok_embd, E, V);
    m->output_norm = const_vec(o, E, 1.0f, true);
    if (st == KVB_OK && !sh->tied) st = mat(o, &m->output, E, V);
    if (sh->tied) m->output = m->tok_embd;
    if (sh->llama3_rope) { /* Llama-3 frequency factors: factor 32, low 1, high 4, original 8192 */
        float *ff = const_vec(o, in->rope_dims / 2, 1.0f, false);
        for (int32_t i = 0; ff && i < in->rope_dims / 2; i++) {
            double freq = pow(sh->rope_base, -2.0 * i / in->rope_dims), wavelen = 2 * 3.14159265358979323846 / freq;
            double low_wl = 8192.0 / 1.0, high_wl = 8192.0 / 4.0;
            if (wavelen < high_wl) ff[i] = 1.0f;
            else if (wavelen > low_wl) ff[i] = 32.0f;
            else {
                double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
                ff[i] = (float)(1.0 / ((1 - smooth) / 32.0 + smooth));
            }
        }
        m->rope_freqs = ff;
    }
    if (sh->longrope) { /* LongRoPE: short factors near 1, long ones growing with the pair, attn_factor as Phi-3's converter writes it */
        float *sf = const_vec(o, in->rope_dims / 2, 1.0f, true), *lf = const_vec(o, in->rope_dims / 2, 1.0f, false);
        for (int32_t i = 0; lf && i < in->rope_dims / 2; i++) lf[i] = 1.0f + 40.0f * (float)i / (float)(in->rope_dims / 2);
        m->rope_freqs = sf;
        m->rope_freqs_long = lf;
        const double scale = (double)sh->ctx / (double)sh->orig_ctx;
        m->rope_mscale = scale > 1 ? (float)sqrt(1.0 + log(scale) / log((double)sh->orig_ctx)) : 1.0f;
    }
    if (sh->attn_factor != 0) m->rope_mscale = sh->attn_factor;
    if (sh->head_dim_swa) { /* gemma4's proportional RoPE on the global heads: a quarter of the pairs turn, the others' divisor 1e30 */
        float *ff = const_vec(o, in->head_dim / 2, 1.0f, false);
        for (int32_t i = in->head_dim / 8; ff && i < in->head_dim / 2; i++) ff[i] = 1e30f;
        m->rope_freqs = ff;
        if (st == KVB_OK) st = rand_stack(o, &m->ple_embd, (int64_t)sh->ple * sh->layers, in->n_vocab);
        if (st == KVB_OK) st = rand_stack(o, &m->ple_model_proj, sh->dim, (int64_t)sh->ple * sh->layers);
        m->ple_proj_norm = const_vec(o, sh->ple, 1.0f, true);
    }
    const bool log_mul = !strcmp(sh->arch, "mistral3") || sh->yarn_log_mul != 0; /* the families that read yarn_log_multiplier */
    if (sh->yarn_factor != 0 && st == KVB_OK)
        st = kvb_family_yarn(m, NULL, 1.0f / sh->yarn_factor, m->rope_orig_ctx, 32.0f, 1.0f, log_mul, sh->yarn_log_mul ? sh->yarn_log_mul : log_mul ? 1.0f : 0);
    if (sh->kv_lora) { /* deepseek2: the latent attention's shape, its routing, its scales (the family's rule, as the loader) */
        in->kv_lora_rank = sh->kv_lora;
        in->q_lora_rank = sh->q_lora;
        in->head_dim_k_mla = sh->qk_nope + in->rope_dims;
        in->head_dim_v_mla = sh->v_mla;
        m->moe_gating = sh->sigmoid ? KVB_MOE_SIGMOID : KVB_MOE_SOFTMAX;
        m->moe_norm = sh->norm_w;
        m->moe_groups = in->n_expert_groups = sh->groups;
        m->moe_groups_used = in->n_expert_groups_used = sh->groups_used;
        kvb_family_mla(m);
    }
    if (sh->oai && st == KVB_OK) { /* sink logits around 1 (a real model's are a few units) */
        if (!(m->sinks = kvb_malloc(sizeof(float) * (size_t)sh->layers * (size_t)sh->heads))) st = kvb_fail(KVB_ERR_NOMEM, "mkmodel: out of memory");
        for (int32_t i = 0; m->sinks && i < sh->layers * sh->heads; i++) m->sinks[i] = 1.0f + 2.0f * urand(&o->rs);
    }
    const int32_t n_all = sh->layers + sh->nextn; /* the MTP layers last */
    m->layers = kvb_calloc((size_t)n_all, sizeof *m->layers);
    if (!m->layers && st == KVB_OK) st = kvb_fail(KVB_ERR_NOMEM, "mkmodel: out of memory");
    if (m->layers) kvb_layers_neutral(m->layers, n_all);
    const int64_t Hv = sh->ssm_heads, Ds = sh->ssm_state, C = (2 * (int64_t)sh->ssm_groups + Hv) * Ds;
    for (int32_t l = 0; st == KVB_OK && l < n_all; l++) {
        struct kvb_layer *L = &m->layers[l];
        /* gemma4: the layer's own head size and FFN width, its K/V weights unless it reads another layer's */
        const int64_t D = kvb_layer_head_dim(m, l), F = kvb_layer_n_ff(m, l), QD = (int64_t)sh->heads * D, KD = (int64_t)kvb_layer_n_kv(m, l) * D;
        const bool reader = m->kv_source && m->kv_source[l] >= 0;
        const bool own_k = !reader || sh->keep_shared_k, own_v = own_k && !(sh->no_v_global && m->swa_mask && !m->swa_mask[l]);
        const bool rec = m->recurrent && l < sh->layers && m->recurrent[l];
        if (sh->post_norms || sh->sandwich) {
            L->post_attn_norm = const_vec(o, E, 1.0f, true);
            L->post_ffn_norm = const_vec(o, E, 1.0f, true);
        }
        if (!sh->post_norms) {
            L->attn_norm = const_vec(o, E, 1.0f, true);
            L->ffn_norm = const_vec(o, E, 1.0f, true);
        }
        if (sh->qk_norm && !rec) {
            L->q_norm = const_vec(o, m->qk_norm_whole ? QD : D, 1.0f, true);
            if (own_k) L->k_norm = const_vec(o, m->qk_norm_whole ? KD : D, 1.0f, true);
        }
        if (sh->head_dim_swa) { /* gemma4 scores q.k unscaled: norms of D^-1/4 give scores the spread of 1/sqrt(D) (its trained norms
                                 * carry that scale; at 1 a random model's attention is one-hot, and chaotic) */
            const float qs = powf((float)D, -0.25f);
            for (int64_t i = 0; i < D; i++) {
                ((float *)L->q_norm)[i] *= qs;
                if (L->k_norm) ((float *)L->k_norm)[i] *= qs;
            }
        }
        if (sh->ple) { /* gemma4's per-layer input, and an output scale near 1 */
            if (st == KVB_OK) st = rand_mat(o, &L->ple_gate, E, sh->ple);
            if (st == KVB_OK) st = rand_mat(o, &L->ple_proj, sh->ple, E);
            L->ple_norm = const_vec(o, E, 1.0f, true);
        }
        if (sh->head_dim_swa) {
            L->has_out_scale = true;
            L->out_scale = 0.9f + 0.1f * urand(&o->rs);
        }
        if (rec && sh->m2[0]) { /* Mamba-2: in_proj (z, xBC, dt), taps around 0.5 and a conv bias, dt bias, A = -exp(u) in [-e, -1/e],
                                 * D around 1, the grouped norm, out_proj */
            const int64_t DI = sh->m2[1], Cx = DI + 2 * (int64_t)sh->m2[4] * sh->m2[2], H = sh->m2[3];
            if (st == KVB_OK) st = mat(o, &L->ssm_qkv, E, DI + Cx + H);
            if (st == KVB_OK) st = mat(o, &L->ssm_out, DI, E);
            float *cw = const_vec(o, Cx * sh->m2[0], 0.0f, false), *cb = const_vec(o, Cx, 0.0f, false);
            for (int64_t i = 0; cw && i < Cx * sh->m2[0]; i++) cw[i] = 0.5f * urand(&o->rs);
            for (int64_t i = 0; cb && i < Cx; i++) cb[i] = 0.1f * urand(&o->rs);
            float *a = const_vec(o, H, 0.0f, false), *d = const_vec(o, H, 0.0f, false), *dt = const_vec(o, H, 0.0f, false);
            for (int64_t h = 0; a && d && dt && h < H; h++) {
                a[h] = -expf(urand(&o->rs));
                d[h] = 1.0f + 0.5f * urand(&o->rs);
                dt[h] = 0.5f * urand(&o->rs);
            }
            float *nw = const_vec(o, DI, 0.0f, false);
            for (int64_t i = 0; nw && i < DI; i++) nw[i] = 1.0f + 0.2f * urand(&o->rs);
            L->ssm_conv = cw;
            L->ssm_conv_b = cb;
            L->ssm_a = a;
            L->ssm_d = d;
            L->ssm_dt = dt;
            L->ssm_norm = nw;
        } else if (rec && sh->sc_taps) { /* lfm2's short conv: in_proj (B, C, x), taps around 0.5, out_proj */
            if (st == KVB_OK) st = mat(o, &L->ssm_qkv, E, 3 * E);
            if (st == KVB_OK) st = mat(o, &L->ssm_out, E, E);
            float *cw = const_vec(o, E * sh->sc_taps, 0.0f, false);
            for (int64_t i = 0; cw && i < E * sh->sc_taps; i++) cw[i] = 0.5f * urand(&o->rs);
            L->ssm_conv = cw;
        } else if (rec) { /* Gated DeltaNet: projections, conv taps, dt bias, A = -exp(A_log) in [-e, -1/e], the output norm */
            if (st == KVB_OK) st = mat(o, &L->ssm_qkv, E, C);
            if (st == KVB_OK) st = mat(o, &L->ssm_z, E, Hv * Ds);
            if (st == KVB_OK) st = mat(o, &L->ssm_beta, E, Hv);
            if (st == KVB_OK) st = mat(o, &L->ssm_alpha, E, Hv);
            if (st == KVB_OK) st = mat(o, &L->ssm_out, Hv * Ds, E);
            float *a = const_vec(o, Hv, 0.0f, false);
            for (int64_t h = 0; a && h < Hv; h++) a[h] = -expf(urand(&o->rs));
            L->ssm_a = a;
            L->ssm_dt = const_vec(o, Hv, 0.0f, true);
            L->ssm_norm = const_vec(o, Ds, 1.0f, true);
            float *cw = const_vec(o, C * sh->ssm_conv, 0.0f, false);
            for (int64_t i = 0; cw && i < C * sh->ssm_conv; i++) cw[i] = 0.5f * urand(&o->rs);
            L->ssm_conv = cw;
        } else if (sh->kv_lora) { /* deepseek2's latent attention */
            const int64_t H = sh->heads, R = in->rope_dims, Cl = sh->kv_lora, Dk = in->head_dim_k_mla, Dv = sh->v_mla;
            if (sh->q_lora) {
                if (st == KVB_OK) st = mat(o, &L->wq_a, E, sh->q_lora);
                L->q_a_norm = const_vec(o, sh->q_lora, 1.0f, true);
                if (st == KVB_OK) st = mat(o, &L->wq_b, sh->q_lora, H * Dk);
            } else if (st == KVB_OK) {
                st = mat(o, &L->wq, E, H * Dk);
            }
            if (st == KVB_OK) st = mat(o, &L->wkv_a, E, Cl + R);
            L->kv_a_norm = const_vec(o, Cl, 1.0f, true);
            if (st == KVB_OK) st = mat(o, &L->wk_b, Dk - R, H * Cl);
            if (st == KVB_OK) st = mat(o, &L->wv_b, Cl, H * Dv);
            if (st == KVB_OK) st = mat(o, &L->wo, H * Dv, E);
        } else {
            if (st == KVB_OK) st = mat(o, &L->wq, E, m->q_gate ? 2 * QD : QD); /* qwen35: query and gate rows per head */
            if (st == KVB_OK && own_k) st = mat(o, &L->wk, E, KD);
            if (st == KVB_OK && own_v) st = mat(o, &L->wv, E, KD);
            if (st == KVB_OK) st = mat(o, &L->wo, QD, E);
        }
        if (l >= sh->layers) { /* MTP: the projection of [embedding; hidden], its norms, and the head's norm */
            if (st == KVB_OK) st = rand_mat(o, &L->nextn_eh_proj, 2 * E, E);
            L->nextn_enorm = const_vec(o, E, 1.0f, true);
            L->nextn_hnorm = const_vec(o, E, 1.0f, true);
            L->nextn_head_norm = const_vec(o, E, 1.0f, true);
        }
        if (st == KVB_OK && fused_up) { /* phi3: gate rows then up rows, one tensor */
            struct kvb_mat gu;
            st = rand_mat(o, &gu, E, 2 * F);
            L->w_gate = (struct kvb_mat){gu.type, E, F, gu.row_bytes, gu.data};
            L->w_up = (struct kvb_mat){gu.type, E, F, gu.row_bytes, gu.data + (size_t)F * gu.row_bytes};
        } else if (sh->experts && sh->head_dim_swa) { /* gemma4: the experts beside the dense FFN, their router scale and norms */
            const int64_t N = sh->experts, Fe = sh->ff_exp;
            if (st == KVB_OK) st = mat(o, &L->w_gate, E, F);
            if (st == KVB_OK) st = mat(o, &L->w_up, E, F);
            if (st == KVB_OK) st = rand_mat(o, &L->router, E, N);
            if (st == KVB_OK && sh->split_exps) st = rand_stack(o, &L->gate_exps, E, N * Fe);
            if (st == KVB_OK && sh->split_exps) st = rand_stack(o, &L->up_exps, E, N * Fe);
            if (st == KVB_OK && !sh->split_exps) st = rand_stack(o, &L->gate_up_exps, E, N * 2 * Fe);
            if (st == KVB_OK) st = rand_stack(o, &L->down_exps, Fe, N * E);
            /* the router's scale around 1 times sqrt(E) (the router reads rms(x) / sqrt(E): so its logits have a spread of about 1) */
            float *rs = const_vec(o, E, 1.0f, true);
            for (int64_t i = 0; rs && i < E; i++) rs[i] *= sqrtf((float)E);
            L->router_scale = rs;
            L->s_down_exps = const_vec(o, N, 1.0f, true);
            L->pre_ffn_norm_2 = const_vec(o, E, 1.0f, true);
            L->post_ffn_norm_1 = const_vec(o, E, 1.0f, true);
            L->post_ffn_norm_2 = const_vec(o, E, 1.0f, true);
        } else if (sh->nh && sh->experts) { /* nemotron_h_moe: on the layers with an FFN block, ungated experts, the selection bias,
                                              * an ungated shared expert */
            if (!(sh->nh_ffn >> l & 1u)) {
                L->ffn_norm = NULL;
                continue;
            }
            const int64_t N = sh->experts, Fe = sh->ff_exp, Fs = sh->ff_shexp;
            if (st == KVB_OK) st = rand_mat(o, &L->router, E, N);
            if (st == KVB_OK) st = rand_stack(o, &L->up_exps, E, N * Fe);
            if (st == KVB_OK) st = rand_stack(o, &L->down_exps, Fe, N * E);
            if (st == KVB_OK && Fs) st = rand_mat(o, &L->up_shexp, E, Fs);
            if (st == KVB_OK && Fs) st = rand_mat(o, &L->down_shexp, Fs, E);
            L->exp_probs_b = const_vec(o, N, 0.0f, true);
        } else if (sh->experts && l >= sh->dense_lead) { /* the router and the experts' stacks, instead of the dense FFN */
            const int64_t N = sh->experts, Fe = sh->ff_exp, Fs = sh->ff_shexp;
            if (st == KVB_OK) st = rand_mat(o, &L->router, E, N);
            if (st == KVB_OK) st = rand_stack(o, &L->gate_exps, E, N * Fe);
            if (st == KVB_OK) st = rand_stack(o, &L->up_exps, E, N * Fe);
            if (st == KVB_OK) st = rand_stack(o, &L->down_exps, Fe, N * E);
            if (st == KVB_OK && Fs) st = rand_mat(o, &L->gate_shexp, E, Fs);
            if (st == KVB_OK && Fs) st = rand_mat(o, &L->up_shexp, E, Fs);
            if (st == KVB_OK && Fs) st = rand_mat(o, &L->down_shexp, Fs, E);
            if (Fs && (!strcmp(sh->arch, "qwen2moe") || !strcmp(sh->arch, "qwen35moe"))) L->gate_inp_shexp = const_vec(o, E, 0.0f, true); /* the family that gates them */
            if (!strcmp(sh->arch, "lfm2moe") || !strcmp(sh->arch, "glm4moe") || (sh->kv_lora && sh->sigmoid))
                L->exp_probs_b = const_vec(o, N, 0.0f, true); /* the selection bias: +-0.1 */
            if (sh->oai) {
                L->b_router = const_vec(o, N, 0.0f, true);
                L->b_gate_exps = const_vec(o, N * Fe, 0.0f, true);
                L->b_up_exps = const_vec(o, N * Fe, 0.0f, true);
                L->b_down_exps = const_vec(o, N * E, 0.0f, true);
                L->bo = const_vec(o, E, 0.0f, true);
            }
        } else if (sh->nh_ffn || sh->nh) { /* nemotron_h: a squared-ReLU FFN (no gate) where its bit is set, with that block's norm */
            if (!(sh->nh_ffn >> l & 1u)) {
                L->ffn_norm = NULL;
                continue;
            }
            if (st == KVB_OK) st = mat(o, &L->w_up, E, F);
        } else {
            if (st == KVB_OK) st = mat(o, &L->w_gate, E, F);
            if (st == KVB_OK) st = mat(o, &L->w_up, E, F);
        }
        if (st == KVB_OK && (!L->router.data || L->router_scale)) st = mat(o, &L->w_down, F, E);
        if (sh->bias) {
            L->bq = const_vec(o, QD, 0.0f, true);
            L->bk = const_vec(o, KD, 0.0f, true);
            L->bv = const_vec(o, KD, 0.0f, true);
        }
        if (sh->all_bias) { /* and llama.cpp's per-tensor output scales, which order against the biases */
            L->s_q = 1.0f + 0.5f * urand(&o->rs); L->s_k = 1.0f + 0.5f * urand(&o->rs); L->s_v = 1.0f + 0.5f * urand(&o->rs);
            L->s_o = 1.0f + 0.5f * urand(&o->rs); L->s_gate = 1.0f + 0.5f * urand(&o->rs); L->s_up = 1.0f + 0.5f * urand(&o->rs);
            L->s_down = 1.0f + 0.5f * urand(&o->rs);
            L->bo = const_vec(o, E, 0.0f, true);
            L->b_gate = const_vec(o, F, 0.0f, true);
            L->b_up = const_vec(o, F, 0.0f, true);
            L->b_down = const_vec(o, E, 0.0f, true);
        }
    }
    if (st != KVB_OK) {
        for (int64_t i = 0; i < o->n; i++) kvb_free(o->p[i]);
        kvb_free(o->p);
        kvb_free(o);
        kvb_model_free(m);
        return st;
    }
    kvb_family_describe(m, in->features, sizeof in->features);
    *out = m;
    *owned_out = o;
    return KVB_OK;
}

void kvb_model_make_free(struct kvb_model *m, void *owned) {
    struct owned *o = owned;
    if (o) {
        for (int64_t i = 0; i < o->n; i++) kvb_free(o->p[i]);
        kvb_free(o->p);
        kvb_free(o);
    }
    kvb_model_free(m);
}
