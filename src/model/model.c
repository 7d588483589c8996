/*
 * model.c — loading llama-family models.
 *
 * GGUF: hyperparameters from `<arch>.*` keys (llama, qwen2), weights bound by
 * name (token_embd, blk.N.attn_q, ..., output; output absent = tied), each
 * checked for shape and type. RoPE: interleaved pairs for llama, NeoX halves
 * for qwen2; freq_base, dimension_count, linear scaling, Llama-3 factors
 * (rope_freqs.weight).
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

static kvb_status bind(const struct gguf_file *f, const char *name, int64_t n_in, int64_t n_out, bool required, struct kvb_mat *w) {
    const struct gguf_tensor *t = kvb_gguf_find_tensor(f, name);
    if (!t) return required ? kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s' is missing", f->path, name) : KVB_ERR_INVALID;
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != 1 || t->ne[3] != 1)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]", f->path, name,
                        (long long)t->ne[0], (long long)t->ne[1], (long long)n_in, (long long)n_out);
    if (!kvb_matmul_supports(t->type))
        return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, not supported yet (f32, f16)", f->path, name, kvb_ggml_type_name(t->type));
    w->type = t->type;
    w->n_in = n_in;
    w->n_out = n_out;
    w->row_bytes = kvb_ggml_row_size(t->type, n_in);
    w->data = t->data;
    return KVB_OK;
}

static kvb_status bind_vec(const struct gguf_file *f, const char *name, int64_t n, bool required, const float **out) {
    const struct gguf_tensor *t = kvb_gguf_find_tensor(f, name);
    if (!t) {
        *out = NULL;
        return required ? kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s' is missing", f->path, name) : KVB_OK;
    }
    if (t->type != GGML_TYPE_F32 || t->ne[0] != n || t->ne[1] != 1)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s' must be f32 [%lld], is %s [%lld, %lld]", f->path, name, (long long)n,
                        kvb_ggml_type_name(t->type), (long long)t->ne[0], (long long)t->ne[1]);
    if ((uintptr_t)t->data % 4) return kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s' is misaligned", f->path, name);
    *out = (const float *)t->data;
    return KVB_OK;
}

static kvb_status get_hp(const struct gguf_file *f, const char *arch, const char *suffix, uint32_t *v, bool required, uint32_t lo, uint32_t hi) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    kvb_status st = kvb_gguf_get_u32(f, key, v, required);
    if (st != KVB_OK) return st;
    if (*v < lo || *v > hi) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %u is out of range %u..%u", f->path, key, *v, lo, hi);
    return KVB_OK;
}

kvb_status kvb_model_load_gguf(const char *path, bool in_memory, struct kvb_model *m) {
    kvb_status st = kvb_gguf_open_ex(path, in_memory, &m->gguf);
    if (st != KVB_OK) return st;
    const struct gguf_file *f = m->gguf;
    struct gguf_str a;
    if ((st = kvb_gguf_get_str(f, "general.architecture", &a, true)) != KVB_OK) return st;
    struct kvb_model_info *in = &m->info;
    if (kvb_gguf_str_eq(a, "llama")) snprintf(in->arch, sizeof in->arch, "llama");
    else if (kvb_gguf_str_eq(a, "qwen2")) snprintf(in->arch, sizeof in->arch, "qwen2");
    else return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: architecture '%.*s' is not supported (llama, qwen2)", path, (int)KVB_MIN(a.n, (uint64_t)32), a.p);
    snprintf(in->source, sizeof in->source, "gguf");
    const char *arch = in->arch;
    uint32_t v;
    if ((st = get_hp(f, arch, "embedding_length", &v, true, 1, 1 << 16)) != KVB_OK) return st;
    in->n_embd = (int32_t)v;
    if ((st = get_hp(f, arch, "block_count", &v, true, 1, 4096)) != KVB_OK) return st;
    in->n_layer = (int32_t)v;
    if ((st = get_hp(f, arch, "feed_forward_length", &v, true, 1, 1 << 20)) != KVB_OK) return st;
    in->n_ff = (int32_t)v;
    if ((st = get_hp(f, arch, "attention.head_count", &v, true, 1, 1024)) != KVB_OK) return st;
    in->n_head = (int32_t)v;
    in->n_head_kv = in->n_head;
    st = get_hp(f, arch, "attention.head_count_kv", &v, false, 1, 1024);
    if (st == KVB_OK) in->n_head_kv = (int32_t)v;
    else if (st != KVB_ERR_INVALID) return st;
    if (in->n_embd % in->n_head) return kvb_fail(KVB_ERR_CORRUPT, "%s: embedding_length %d is not a multiple of head_count %d", path, in->n_embd, in->n_head);
    if (in->n_head % in->n_head_kv) return kvb_fail(KVB_ERR_CORRUPT, "%s: head_count %d is not a multiple of head_count_kv %d", path, in->n_head, in->n_head_kv);
    in->head_dim = in->n_embd / in->n_head;
    in->n_ctx_train = 2048;
    st = get_hp(f, arch, "context_length", &v, false, 1, 1u << 30);
    if (st == KVB_OK) in->n_ctx_train = (int32_t)v;
    else if (st != KVB_ERR_INVALID) return st;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    in->rms_eps = 1e-5f;
    st = kvb_gguf_get_f32(f, key, &in->rms_eps, false);
    if (st != KVB_OK && st != KVB_ERR_INVALID) return st;
    if (!(in->rms_eps > 0 && in->rms_eps < 1)) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %g is out of range", path, key, (double)in->rms_eps);
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    in->rope_base = 10000.0f;
    st = kvb_gguf_get_f32(f, key, &in->rope_base, false);
    if (st != KVB_OK && st != KVB_ERR_INVALID) return st;
    if (!(in->rope_base > 1)) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %g must be > 1", path, key, (double)in->rope_base);
    in->rope_dims = in->head_dim;
    st = get_hp(f, arch, "rope.dimension_count", &v, false, 2, (uint32_t)in->head_dim);
    if (st == KVB_OK) in->rope_dims = (int32_t)v & ~1;
    else if (st != KVB_ERR_INVALID) return st;
    in->rope_freq_scale = 1.0f;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    struct gguf_str stype;
    if (kvb_gguf_get_str(f, key, &stype, false) == KVB_OK && kvb_gguf_str_eq(stype, "linear")) {
        float factor = 1.0f;
        snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
        if ((st = kvb_gguf_get_f32(f, key, &factor, true)) != KVB_OK) return st;
        if (!(factor >= 1.0f)) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %g must be >= 1", path, key, (double)factor);
        in->rope_freq_scale = 1.0f / factor;
    }
    in->rope_type = !strcmp(arch, "qwen2") ? KVB_ROPE_NEOX : KVB_ROPE_INTERLEAVED;
    if ((st = kvb_vocab_from_gguf(f, &m->vocab)) != KVB_OK) return st;
    if ((st = kvb_vocab_read_chat_template(f, m->vocab, path)) != KVB_OK) return st;
    in->n_vocab = m->vocab->n;
    const int64_t E = in->n_embd, D = in->head_dim, Hq = in->n_head, Hk = in->n_head_kv, F = in->n_ff, V = in->n_vocab;
    if ((st = bind(f, "token_embd.weight", E, V, true, &m->tok_embd)) != KVB_OK) return st;
    if ((st = bind_vec(f, "output_norm.weight", E, true, &m->output_norm)) != KVB_OK) return st;
    st = bind(f, "output.weight", E, V, false, &m->output);
    if (st == KVB_ERR_INVALID) { m->output = m->tok_embd; in->tied_output = true; }
    else if (st != KVB_OK) return st;
    const struct gguf_tensor *rf = kvb_gguf_find_tensor(f, "rope_freqs.weight");
    if (rf && (st = bind_vec(f, "rope_freqs.weight", in->rope_dims / 2, true, &m->rope_freqs)) != KVB_OK) return st;
    m->layers = kvb_calloc((size_t)in->n_layer, sizeof *m->layers);
    if (!m->layers) return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", path);
    char name[96];
#define T(fmt) (snprintf(name, sizeof name, "blk.%d." fmt, l), name)
    for (int l = 0; l < in->n_layer; l++) {
        struct kvb_layer *L = &m->layers[l];
        if ((st = bind_vec(f, T("attn_norm.weight"), E, true, &L->attn_norm)) != KVB_OK) return st;
        if ((st = bind(f, T("attn_q.weight"), E, Hq * D, true, &L->wq)) != KVB_OK) return st;
        if ((st = bind(f, T("attn_k.weight"), E, Hk * D, true, &L->wk)) != KVB_OK) return st;
        if ((st = bind(f, T("attn_v.weight"), E, Hk * D, true, &L->wv)) != KVB_OK) return st;
        if ((st = bind(f, T("attn_output.weight"), Hq * D, E, true, &L->wo)) != KVB_OK) return st;
        if ((st = bind_vec(f, T("ffn_norm.weight"), E, true, &L->ffn_norm)) != KVB_OK) return st;
        if ((st = bind(f, T("ffn_gate.weight"), E, F, true, &L->w_gate)) != KVB_OK) return st;
        if ((st = bind(f, T("ffn_up.weight"), E, F, true, &L->w_up)) != KVB_OK) return st;
        if ((st = bind(f, T("ffn_down.weight"), F, E, true, &L->w_down)) != KVB_OK) return st;
        bool need_bias = !strcmp(arch, "qwen2");
        if ((st = bind_vec(f, T("attn_q.bias"), Hq * D, need_bias, &L->bq)) != KVB_OK) return st;
        if ((st = bind_vec(f, T("attn_k.bias"), Hk * D, need_bias, &L->bk)) != KVB_OK) return st;
        if ((st = bind_vec(f, T("attn_v.bias"), Hk * D, need_bias, &L->bv)) != KVB_OK) return st;
        in->has_qkv_bias = L->bq != NULL;
    }
#undef T
    return KVB_OK;
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
    in->weight_type = m->layers[0].wq.type;
    size_t bytes = mat_bytes(&m->tok_embd) + (in->tied_output ? 0 : mat_bytes(&m->output)) + (size_t)in->n_embd * 4;
    for (int l = 0; l < in->n_layer; l++) {
        const struct kvb_layer *L = &m->layers[l];
        bytes += mat_bytes(&L->wq) + mat_bytes(&L->wk) + mat_bytes(&L->wv) + mat_bytes(&L->wo) + mat_bytes(&L->w_gate) +
                 mat_bytes(&L->w_up) + mat_bytes(&L->w_down) + 2 * (size_t)in->n_embd * 4;
    }
    in->weight_bytes = bytes;
    in->kv_bytes_per_token_f16 = (size_t)2 * in->n_layer * in->n_head_kv * in->head_dim * 2;
    *out = m;
    return KVB_OK;
}

void kvb_model_free(struct kvb_model *m) {
    if (!m) return;
    kvb_vocab_free(m->vocab);
    kvb_gguf_close(m->gguf);
    kvb_unmap_file(m->map, m->map_size);
    kvb_free(m->layers);
    kvb_free(m);
}

void kvb_model_get_info(const struct kvb_model *m, struct kvb_model_info *out) { *out = m->info; }

const struct kvb_vocab *kvb_model_vocab(const struct kvb_model *m) { return m->vocab; }

size_t kvb_model_token_embd_bytes(const struct kvb_model *m) {
    return m ? (size_t)m->tok_embd.n_out * m->tok_embd.row_bytes : 0;
}
