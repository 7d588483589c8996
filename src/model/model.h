/*
 * model.h — the llama-family model: hyperparameters and weight views
 * (mmapped, never copied), from GGUF or a llama2.c checkpoint. Shapes in the
 * comments: every matrix is row-major [n_out][n_in], y = W x.
 */
#ifndef KVB_MODEL_H
#define KVB_MODEL_H

#include "../core/core.h"
#include "../ops/matmul.h"

struct gguf_file;
struct kvb_vocab;

struct kvb_layer {
    const float *attn_norm;      /* [n_embd] */
    struct kvb_mat wq;           /* [n_head * head_dim][n_embd] */
    struct kvb_mat wk, wv;       /* [n_head_kv * head_dim][n_embd] */
    const float *bq, *bk, *bv;   /* qwen2 biases, or NULL */
    struct kvb_mat wo;           /* [n_embd][n_head * head_dim] */
    const float *ffn_norm;       /* [n_embd] */
    struct kvb_mat w_gate, w_up; /* [n_ff][n_embd] */
    struct kvb_mat w_down;       /* [n_embd][n_ff] */
};

struct kvb_model {
    struct kvb_model_info info;
    struct kvb_mat tok_embd;     /* [n_vocab][n_embd] */
    const float *output_norm;    /* [n_embd] */
    struct kvb_mat output;       /* [n_vocab][n_embd] (tok_embd when tied) */
    const float *rope_freqs;     /* [rope_dims / 2] Llama-3 factors, or NULL */
    struct kvb_layer *layers;
    struct kvb_vocab *vocab;
    struct gguf_file *gguf;      /* GGUF source, or NULL */
    void *map;                   /* llama2.c checkpoint mapping */
    size_t map_size;
    char path[512];
};

kvb_status kvb_model_load_gguf(const char *path, bool in_memory, struct kvb_model *m);

/* export.c: kvb_model_write_gguf, kvb_model_make (declared in kvbound.h). */
kvb_status kvb_model_load_llama2c(const char *path, const char *tokenizer_path, bool in_memory, struct kvb_model *m);

/* The cache parameters of a sequence on model m: its geometry and rope,
 * the KV configuration kv (max_distance 0: the trained length) and a
 * private pool of pool_bytes (unused when the cache draws from a shared one). */
struct kvb_cache_params kvb_model_cache_params(const struct kvb_model *m, const struct kvb_kv_params *kv, size_t pool_bytes);

/* ---- the forward pass over rows of many sequences (forward.c) ---- */

/* Activation buffers for up to `rows` rows. */
struct kvb_fwd {
    int32_t rows;
    float *x, *xb, *q, *k, *v, *att, *hg, *hu, *tmp; /* [rows][...] */
    float *lg;        /* [lg_rows][n_vocab] last-row logits, grown on demand */
    int32_t lg_rows;
    struct kvb_q8_buf *q8; /* int8 activations of the decode rows */
    int32_t *cr0, *cT;     /* [rows] this pass's prompt chunks of >= 2 rows */
    int32_t nc;
    int32_t n_rows;        /* rows of this pass */
};
kvb_status kvb_fwd_init(struct kvb_fwd *f, const struct kvb_model_info *in, int32_t rows);
void kvb_fwd_free(struct kvb_fwd *f);
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

#endif
