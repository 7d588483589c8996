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
    char *chat_template;         /* tokenizer.chat_template, or NULL */
    char path[512];
};

kvb_status kvb_model_load_gguf(const char *path, struct kvb_model *m);

/* export.c: kvb_model_write_gguf, kvb_model_make (declared in kvbound.h). */
kvb_status kvb_model_load_llama2c(const char *path, const char *tokenizer_path, struct kvb_model *m);

#endif
