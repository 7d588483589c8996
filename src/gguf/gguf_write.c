/*
 * gguf_write.c — a GGUF v3 writer: metadata and tensor infos are collected
 * in memory (tensor data by pointer, not copied), then written in one pass
 * with 32-byte aligned tensor offsets, to a temporary name renamed into
 * place so a failed write never leaves a half file.
 */
#include "gguf_write.h"

#include <errno.h>
#include <stdio.h>

struct gw_tensor {
    char name[96];
    uint32_t n_dims, type;
    int64_t ne[4];
    const void *data;
    uint64_t nbytes, offset;
};

struct gguf_writer {
    uint8_t *kv;        /* serialised key/value pairs */
    size_t kv_n;
    int64_t kv_cap; /* for kvb_grow */
    uint64_t n_kv;
    struct gw_tensor *t;
    int64_t n_t, t_cap;
    bool oom;
};

kvb_status kvb_gguf_writer_init(struct gguf_writer **out) {
    *out = kvb_calloc(1, sizeof **out);
    return *out ? KVB_OK : kvb_fail(KVB_ERR_NOMEM, "gguf writer: out of memory");
}

void kvb_gguf_writer_free(struct gguf_writer *w) {
    if (!w) return;
    kvb_free(w->kv);
    kvb_free(w->t);
    kvb_free(w);
}

static void put(struct gguf_writer *w, const void *p, size_t n) {
    if (w->oom) return;
    if (kvb_grow((void **)&w->kv, &w->kv_cap, (int64_t)(w->kv_n + n), 1) != KVB_OK) { w->oom = true; return; }
    memcpy(w->kv + w->kv_n, p, n);
    w->kv_n += n;
}

static void put_str(struct gguf_writer *w, const char *s, size_t n) {
    uint64_t len = n;
    put(w, &len, 8);
    put(w, s, n);
}

static void put_key(struct gguf_writer *w, const char *key, uint32_t type) {
    put_str(w, key, strlen(key));
    put(w, &type, 4);
    w->n_kv++;
}

void kvb_gguf_writer_u32(struct gguf_writer *w, const char *key, uint32_t v) { put_key(w, key, GGUF_T_UINT32); put(w, &v, 4); }
void kvb_gguf_writer_f32(struct gguf_writer *w, const char *key, float v) { put_key(w, key, GGUF_T_FLOAT32); put(w, &v, 4); }
void kvb_gguf_writer_bool(struct gguf_writer *w, const char *key, bool v) { uint8_t b = v; put_key(w, key, GGUF_T_BOOL); put(w, &b, 1); }
void kvb_gguf_writer_str(struct gguf_writer *w, const char *key, const char *v) { put_key(w, key, GGUF_T_STRING); put_str(w, v, strlen(v)); }

void kvb_gguf_writer_arr(struct gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n) {
    put_key(w, key, GGUF_T_ARRAY);
    put(w, &elem_type, 4);
    put(w, &n, 8);
    size_t es = elem_type == GGUF_T_FLOAT32 || elem_type == GGUF_T_INT32 || elem_type == GGUF_T_UINT32 ? 4 : 1;
    put(w, data, (size_t)n * es);
}

void kvb_gguf_writer_arr_str(struct gguf_writer *w, const char *key, const char *const *strs, const uint32_t *lens, uint64_t n) {
    put_key(w, key, GGUF_T_ARRAY);
    uint32_t et = GGUF_T_STRING;
    put(w, &et, 4);
    put(w, &n, 8);
    for (uint64_t i = 0; i < n; i++) put_str(w, strs[i], lens ? lens[i] : strlen(strs[i]));
}

kvb_status kvb_gguf_writer_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne, const void *data) {
    if (n_dims < 1 || n_dims > 4 || strlen(name) >= sizeof w->t[0].name) return kvb_fail(KVB_ERR_INVALID, "gguf writer: bad tensor '%s'", name);
    if (kvb_grow((void **)&w->t, &w->t_cap, w->n_t + 1, sizeof *w->t) != KVB_OK) return kvb_fail(KVB_ERR_NOMEM, "gguf writer: out of memory");
    struct gw_tensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->type = type;
    int64_t rows = 1;
    for (int d = 0; d < 4; d++) t->ne[d] = d < (int)n_dims ? ne[d] : 1;
    for (uint32_t d = 1; d < n_dims; d++) rows *= ne[d];
    size_t row = kvb_ggml_row_size(type, ne[0]);
    if (!row) return kvb_fail(KVB_ERR_INVALID, "gguf writer: tensor '%s': %lld is not a whole number of %s blocks", name, (long long)ne[0], kvb_ggml_type_name(type));
    t->nbytes = (uint64_t)rows * row;
    t->data = data;
    uint64_t off = 0;
    if (w->n_t) off = (w->t[w->n_t - 1].offset + w->t[w->n_t - 1].nbytes + 31) / 32 * 32;
    t->offset = off;
    w->n_t++;
    return KVB_OK;
}

kvb_status kvb_gguf_writer_write(struct gguf_writer *w, const char *path) {
    if (w->oom) return kvb_fail(KVB_ERR_NOMEM, "gguf writer: out of memory");
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return kvb_fail(KVB_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    uint32_t version = 3;
    uint64_t nt = (uint64_t)w->n_t;
    bool ok = fwrite("GGUF", 1, 4, f) == 4 && fwrite(&version, 4, 1, f) == 1 && fwrite(&nt, 8, 1, f) == 1 && fwrite(&w->n_kv, 8, 1, f) == 1;
    ok = ok && fwrite(w->kv, 1, w->kv_n, f) == w->kv_n;
    uint64_t at = 24 + w->kv_n;
    for (int64_t i = 0; ok && i < w->n_t; i++) {
        struct gw_tensor *t = &w->t[i];
        uint64_t len = strlen(t->name);
        ok = fwrite(&len, 8, 1, f) == 1 && fwrite(t->name, 1, len, f) == len && fwrite(&t->n_dims, 4, 1, f) == 1;
        for (uint32_t d = 0; ok && d < t->n_dims; d++) {
            uint64_t ne = (uint64_t)t->ne[d];
            ok = fwrite(&ne, 8, 1, f) == 1;
        }
        ok = ok && fwrite(&t->type, 4, 1, f) == 1 && fwrite(&t->offset, 8, 1, f) == 1;
        at += 8 + len + 4 + 8ull * t->n_dims + 4 + 8;
    }
    static const uint8_t zeros[32];
    uint64_t data_start = (at + 31) / 32 * 32;
    ok = ok && fwrite(zeros, 1, (size_t)(data_start - at), f) == data_start - at;
    uint64_t pos = 0;
    for (int64_t i = 0; ok && i < w->n_t; i++) {
        struct gw_tensor *t = &w->t[i];
        ok = fwrite(zeros, 1, (size_t)(t->offset - pos), f) == t->offset - pos;
        ok = ok && fwrite(t->data, 1, (size_t)t->nbytes, f) == t->nbytes;
        pos = t->offset + t->nbytes;
    }
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return kvb_fail(KVB_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    }
    return KVB_OK;
}
