/*
 * model.c — loading llama-family models.
 *
 * GGUF: the families of family.c (their keys, tensors and RoPE as data);
 * every tensor of the file is bound or the file is refused.
 *
 * llama2.c (.bin): 7 x int32 header (dim, hidden_dim, n_layers, n_heads,
 * n_kv_heads, vocab_size (negative: unshared classifier), seq_len), then fp32
 * arrays in a fixed order (see ../shared/data/README.md); the legacy
 * freq_cis tables are skipped. The file size must match the header exactly.
 */
#define _DEFAULT_SOURCE
#include "model.h"
#include "../gguf/gguf.h"
#include "../tokenizer/tokenizer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>

struct kvb_model_params kvb_model_default_params(void) {
    struct kvb_model_params p = {NULL, false};
    return p;
}

static size_t mat_bytes(const struct kvb_mat *w) { return (size_t)w->n_out * w->row_bytes; }

/* ---- GGUF ---- */

kvb_status kvb_model_load_gguf(const char *path, bool in_memory, struct kvb_model *m) {
    kvb_status st = kvb_gguf_open_ex(path, in_memory, &m->gguf);
    if (st != KVB_OK) return st;
    return kvb_family_load(m->gguf, m);
}

/* ---- llama2.c ---- */

kvb_status kvb_model_load_llama2c(const char *path, const char *tok_path, bool in_memory, struct kvb_model *m) {
    if (!tok_path) return kvb_fail(KVB_ERR_INVALID, "%s: a llama2.c checkpoint needs its tokenizer.bin (-z)", path);
    void *map;
    size_t size;
    kvb_status st0 = (in_memory ? kvb_read_file : kvb_map_file)(path, 28, "a llama2.c checkpoint", &map, &size);
    if (st0 != KVB_OK) return st0;
    m->map = map;
    m->map_size = size;
    int32_t h[7];
    memcpy(h, map, 28);
    const char *names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
    for (int i = 0; i < 7; i++)
        if ((i == 5 ? (h[i] == 0 || h[i] < -(1 << 24) || h[i] > (1 << 24)) : (h[i] <= 0 || h[i] > (1 << 20))))
            return kvb_fail(KVB_ERR_CORRUPT, "%s: header field %s = %d is out of range", path, names[i], h[i]);
    struct kvb_model_info *in = &m->info;
    kvb_model_neutral(m);
    snprintf(in->arch, sizeof in->arch, "llama");
    snprintf(in->source, sizeof in->source, "llama2.c");
    in->n_embd = h[0]; in->n_ff = h[1]; in->n_layer = h[2]; in->n_head = h[3]; in->n_head_kv = h[4];
    const bool shared = h[5] > 0;
    in->n_vocab = shared ? h[5] : -h[5];
    in->n_ctx_train = h[6];
    if (in->n_layer > 4096 || in->n_head > 1024 || in->n_embd % in->n_head || in->n_head_kv > in->n_head || in->n_head % in->n_head_kv)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: inconsistent heads (dim %d, n_heads %d, n_kv_heads %d, n_layers %d)", path, in->n_embd, in->n_head, in->n_head_kv, in->n_layer);
    in->head_dim = in->n_embd / in->n_head;
    in->rms_eps = 1e-5f;
    in->rope_base = 10000.0f;
    in->rope_freq_scale = 1.0f;
    in->rope_dims = in->head_dim & ~1;
    in->rope_type = KVB_ROPE_INTERLEAVED;
    in->tied_output = shared;
    const uint64_t E = (uint64_t)in->n_embd, L = (uint64_t)in->n_layer, F = (uint64_t)in->n_ff, V = (uint64_t)in->n_vocab;
    const uint64_t KV = (uint64_t)in->n_head_kv * (uint64_t)in->head_dim;
    const uint64_t S = (uint64_t)in->n_ctx_train, HS = (uint64_t)in->head_dim;
    uint64_t floats = V * E + L * E + L * E * E + 2 * L * KV * E + L * E * E + L * E + 3 * L * F * E + E + S * HS + (shared ? 0 : V * E);
    if (28 + floats * 4 != size)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: header implies %llu bytes, file has %zu", path, (unsigned long long)(28 + floats * 4), size);
    const float *p = (const float *)((const uint8_t *)map + 28);
    /* 28 is not a multiple of 64 but is of 4: fp32 loads are fine */
    struct kvb_mat mat = {0, 0, 0, 0, NULL};
#define MAT(dst, nin, nout) (mat.type = 0, mat.n_in = (int64_t)(nin), mat.n_out = (int64_t)(nout), mat.row_bytes = (size_t)(nin) * 4, mat.data = (const uint8_t *)p, p += (nin) * (nout), (dst) = mat)
    m->layers = kvb_calloc((size_t)L, sizeof *m->layers);
    if (!m->layers) return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", path);
    kvb_layers_neutral(m->layers, (int32_t)L);
    MAT(m->tok_embd, E, V);
    for (uint64_t l = 0; l < L; l++) m->layers[l].attn_norm = p + l * E;
    p += L * E;
    for (uint64_t l = 0; l < L; l++) MAT(m->layers[l].wq, E, E);
    for (uint64_t l = 0; l < L; l++) MAT(m->layers[l].wk, E, KV);
    for (uint64_t l = 0; l < L; l++) MAT(m->layers[l].wv, E, KV);
    for (uint64_t l = 0; l < L; l++) MAT(m->layers[l].wo, E, E);
    for (uint64_t l = 0; l < L; l++) m->layers[l].ffn_norm = p + l * E;
    p += L * E;
    for (uint64_t l = 0; l < L; l++) MAT(m->layers[l].w_gate, E, F);
    for (uint64_t l = 0; l < L; l++) MAT(m->layers[l].w_down, F, E);
    for (uint64_t l = 0; l < L; l++) MAT(m->layers[l].w_up, E, F);
    m->output_norm = p;
    p += E;
    p += S * HS; /* freq_cis_real and freq_cis_imag: S x HS/2 each */
    if (shared) m->output = m->tok_embd;
    else MAT(m->output, E, V);
#undef MAT
    FILE *tf = fopen(tok_path, "rb");
    if (!tf) return kvb_fail(KVB_ERR_IO, "cannot open tokenizer '%s': %s", tok_path, strerror(errno));
    fseek(tf, 0, SEEK_END);
    long tsz = ftell(tf);
    rewind(tf);
    if (tsz < 0 || tsz > (64l << 20)) {
        fclose(tf);
        return kvb_fail(KVB_ERR_CORRUPT, "%s: tokenizer size %ld is out of range", tok_path, tsz);
    }
    char *tb = kvb_malloc((size_t)tsz + 1);
    if (!tb) {
        fclose(tf);
        return kvb_fail(KVB_ERR_NOMEM, "out of memory reading '%s'", tok_path);
    }
    size_t got = fread(tb, 1, (size_t)tsz, tf);
    fclose(tf);
    kvb_status st = got == (size_t)tsz ? kvb_vocab_from_llama2c(tb, got, in->n_vocab, tok_path, &m->vocab)
                                       : kvb_fail(KVB_ERR_IO, "short read on '%s'", tok_path);
    kvb_free(tb);
    return st;
}

/* ---- common ---- */

kvb_status kvb_model_load(const char *path, const struct kvb_model_params *params, struct kvb_model **out) {
    if (!path || !out) return kvb_fail(KVB_ERR_INVALID, "model_load: path and out must not be NULL");
    struct kvb_model *m = kvb_calloc(1, sizeof *m);
    if (!m) return kvb_fail(KVB_ERR_NOMEM, "model_load: out of memory");
    snprintf(m->path, sizeof m->path, "%s", path);
    char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) {
        kvb_free(m);
        return kvb_fail(KVB_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    }
    size_t got = fread(magic, 1, 4, f);
    const bool unreadable = ferror(f);
    const int err = errno;
    fclose(f);
    if (unreadable) { /* a directory, for one */
        kvb_free(m);
        return kvb_fail(KVB_ERR_IO, "cannot read '%s': %s", path, strerror(err));
    }
    if (!(got == 4 && memcmp(magic, "GGUF", 4) == 0) && !(params && params->tokenizer_path)) {
        kvb_free(m);
        return kvb_fail(KVB_ERR_INVALID, "'%s' is not a GGUF file (it does not start with \"GGUF\"); if it is a llama2.c checkpoint, "
                                         "give its tokenizer.bin with -z", path);
    }
    kvb_status st = got == 4 && memcmp(magic, "GGUF", 4) == 0
                        ? kvb_model_load_gguf(path, params && params->no_mmap, m)
                        : kvb_model_load_llama2c(path, params ? params->tokenizer_path : NULL, params && params->no_mmap, m);
    if (st != KVB_OK) {
        kvb_model_free(m);
        return st;
    }
    struct kvb_model_info *in = &m->info;
    in->weight_type = m->layers[0].wq.data ? m->layers[0].wq.type : m->layers[0].wkv_a.data ? m->layers[0].wkv_a.type
                                                                      : m->layers[0].ssm_qkv.type; /* a Gated DeltaNet layer's: its qkv */
    size_t bytes = mat_bytes(&m->tok_embd) + (in->tied_output ? 0 : mat_bytes(&m->output)) + (size_t)in->n_embd * 4;
    for (int l = 0; l < in->n_layer + in->n_nextn_layers; l++) { /* the MTP layers too: they are in memory */
        const struct kvb_layer *L = &m->layers[l];
        bytes += mat_bytes(&L->wq) + mat_bytes(&L->wk) + mat_bytes(&L->wv) + mat_bytes(&L->wo) + mat_bytes(&L->w_gate) +
                 mat_bytes(&L->w_up) + mat_bytes(&L->w_down) + 2 * (size_t)in->n_embd * 4;
        bytes += mat_bytes(&L->ssm_qkv) + mat_bytes(&L->ssm_z) + mat_bytes(&L->ssm_beta) + mat_bytes(&L->ssm_alpha) + mat_bytes(&L->ssm_out) +
                 mat_bytes(&L->nextn_eh_proj) + mat_bytes(&L->nextn_embed) + mat_bytes(&L->nextn_head) + mat_bytes(&L->ple_gate) +
                 mat_bytes(&L->ple_proj) + mat_bytes(&L->wq_a) + mat_bytes(&L->wq_b) + mat_bytes(&L->wkv_a) + mat_bytes(&L->wk_b) +
                 mat_bytes(&L->wv_b);
        if (!L->router.data) continue;
        const size_t experts = mat_bytes(&L->gate_exps) + mat_bytes(&L->up_exps) + mat_bytes(&L->gate_up_exps) + mat_bytes(&L->down_exps);
        bytes += mat_bytes(&L->router) + experts + mat_bytes(&L->gate_shexp) + mat_bytes(&L->up_shexp) + mat_bytes(&L->down_shexp);
        if (l < in->n_layer) in->expert_bytes_per_token += experts / (size_t)in->n_expert * (size_t)in->n_expert_used;
    }
    bytes += mat_bytes(&m->ple_embd) + mat_bytes(&m->ple_model_proj); /* gemma4's per-layer embeddings */
    in->weight_bytes = bytes;
    /* each layer that holds K/V, its own KV heads (gemma4's per layer); recurrent and KV-shared layers hold none */
    size_t heads = 0;
    for (int32_t l = 0; l < in->n_layer; l++)
        if (kvb_layer_holds_kv(m, l)) heads += (size_t)kvb_layer_n_kv(m, l);
    in->kv_bytes_per_token_f16 = (size_t)(in->kv_lora_rank ? 1 : 2) * heads * in->head_dim * 2; /* latent rows: no V rows */
    kvb_family_describe(m, in->features, sizeof in->features);
    *out = m;
    return KVB_OK;
}

void kvb_model_free(struct kvb_model *m) {
    if (!m) return;
    kvb_vocab_free(m->vocab);
    kvb_gguf_close(m->gguf);
    kvb_unmap_file(m->map, m->map_size);
    kvb_free(m->layers);
    kvb_free(m->owned);
    kvb_free(m->no_rope);
    kvb_free(m->recurrent);
    kvb_free(m->file_layer);
    kvb_free(m->swa_layers);
    kvb_free(m->sinks);
    kvb_free(m->swa_mask);
    kvb_free(m->kv_source);
    kvb_free(m->n_ff_layer);
    kvb_free(m->n_kv_layer);
    kvb_free(m);
}

void kvb_model_get_info(const struct kvb_model *m, struct kvb_model_info *out) { *out = m->info; }

const struct kvb_vocab *kvb_model_vocab(const struct kvb_model *m) { return m->vocab; }

size_t kvb_model_token_embd_bytes(const struct kvb_model *m) {
    return m ? (size_t)m->tok_embd.n_out * m->tok_embd.row_bytes : 0;
}
