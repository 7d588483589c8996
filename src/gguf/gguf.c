/*
 * gguf.c — the GGUF reader (see gguf.h for the format and the guarantees).
 * Parsing runs on a cursor that refuses to move past the end; allocations
 * are sized by counts already proven to fit in the bytes that remain.
 */
#define _DEFAULT_SOURCE
#include "gguf.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- cursor ---- */
struct cur {
    const uint8_t *p;
    size_t n, at;
    const char *file;
};

static bool take(struct cur *c, void *dst, size_t n) {
    if (n > c->n - c->at) return false;
    memcpy(dst, c->p + c->at, n);
    c->at += n;
    return true;
}

static bool take_str(struct cur *c, struct gguf_str *s) {
    uint64_t n;
    if (!take(c, &n, 8) || n > c->n - c->at) return false;
    s->p = (const char *)c->p + c->at;
    s->n = n;
    c->at += (size_t)n;
    return true;
}

static size_t vtype_size(uint32_t t) {
    switch (t) {
    case GGUF_T_UINT8: case GGUF_T_INT8: case GGUF_T_BOOL: return 1;
    case GGUF_T_UINT16: case GGUF_T_INT16: return 2;
    case GGUF_T_UINT32: case GGUF_T_INT32: case GGUF_T_FLOAT32: return 4;
    case GGUF_T_UINT64: case GGUF_T_INT64: case GGUF_T_FLOAT64: return 8;
    default: return 0;
    }
}

static void key_text(struct gguf_str k, char *buf, size_t n) {
    size_t m = k.n < n - 1 ? (size_t)k.n : n - 1;
    for (size_t i = 0; i < m; i++) buf[i] = (k.p[i] >= 32 && k.p[i] < 127) ? k.p[i] : '?';
    buf[m] = 0;
}

static kvb_status read_value(struct cur *c, struct gguf_kv *kv, const char *key) {
    switch (kv->type) {
    case GGUF_T_UINT8: { uint8_t x; if (!take(c, &x, 1)) goto trunc; kv->v.u = x; break; }
    case GGUF_T_INT8: { int8_t x; if (!take(c, &x, 1)) goto trunc; kv->v.i = x; break; }
    case GGUF_T_UINT16: { uint16_t x; if (!take(c, &x, 2)) goto trunc; kv->v.u = x; break; }
    case GGUF_T_INT16: { int16_t x; if (!take(c, &x, 2)) goto trunc; kv->v.i = x; break; }
    case GGUF_T_UINT32: { uint32_t x; if (!take(c, &x, 4)) goto trunc; kv->v.u = x; break; }
    case GGUF_T_INT32: { int32_t x; if (!take(c, &x, 4)) goto trunc; kv->v.i = x; break; }
    case GGUF_T_UINT64: { if (!take(c, &kv->v.u, 8)) goto trunc; break; }
    case GGUF_T_INT64: { if (!take(c, &kv->v.i, 8)) goto trunc; break; }
    case GGUF_T_FLOAT32: { float x; if (!take(c, &x, 4)) goto trunc; kv->v.f = x; break; }
    case GGUF_T_FLOAT64: { if (!take(c, &kv->v.f, 8)) goto trunc; break; }
    case GGUF_T_BOOL: {
        uint8_t x;
        if (!take(c, &x, 1)) goto trunc;
        if (x > 1) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s': bool value %u", c->file, key, x);
        kv->v.b = x;
        break;
    }
    case GGUF_T_STRING:
        if (!take_str(c, &kv->v.s)) goto trunc;
        break;
    case GGUF_T_ARRAY: {
        uint32_t et;
        uint64_t n;
        if (!take(c, &et, 4) || !take(c, &n, 8)) goto trunc;
        if (et == GGUF_T_ARRAY) return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: key '%s': nested arrays are not supported", c->file, key);
        if (et >= GGUF_T_COUNT) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s': unknown array element type %u", c->file, key, et);
        kv->v.arr.type = et;
        kv->v.arr.n = n;
        kv->v.arr.data = c->p + c->at;
        size_t left = c->n - c->at;
        if (et == GGUF_T_STRING) { /* walk: each element is >= 8 bytes, so n is bounded by what is left */
            if (n > left / 8) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s': array of %llu strings does not fit in the file", c->file, key, (unsigned long long)n);
            for (uint64_t i = 0; i < n; i++) {
                struct gguf_str s;
                if (!take_str(c, &s)) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s': string %llu of %llu runs past the end of the file", c->file, key, (unsigned long long)i, (unsigned long long)n);
            }
        } else {
            size_t es = vtype_size(et);
            if (n > left / es) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s': array of %llu elements does not fit in the file", c->file, key, (unsigned long long)n);
            c->at += (size_t)n * es;
        }
        kv->v.arr.nbytes = (uint64_t)(c->p + c->at - kv->v.arr.data);
        break;
    }
    default:
        return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s': unknown value type %u", c->file, key, kv->type);
    }
    return KVB_OK;
trunc:
    return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s': value runs past the end of the file", c->file, key);
}

static int cmp_offset(const void *a, const void *b) {
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a, *y = *(const struct gguf_tensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

kvb_status kvb_gguf_open_buffer(const void *buf, size_t size, const char *name, struct gguf_file **out) {
    if (!buf || !out) return kvb_fail(KVB_ERR_INVALID, "gguf: buffer and out must not be NULL");
    struct gguf_file *f = kvb_calloc(1, sizeof *f);
    if (!f) return kvb_fail(KVB_ERR_NOMEM, "gguf: out of memory");
    snprintf(f->path, sizeof f->path, "%s", name ? name : "(buffer)");
    f->base = buf;
    f->size = size;
    struct cur c = {buf, size, 0, f->path};
    kvb_status st = KVB_OK;
    char magic[4];
    if (!take(&c, magic, 4) || memcmp(magic, "GGUF", 4) != 0) {
        st = kvb_fail(KVB_ERR_CORRUPT, "%s: not a GGUF file (bad magic)", f->path);
        goto fail;
    }
    if (!take(&c, &f->version, 4)) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: truncated in the header (version)", f->path); goto fail; }
    if (f->version == 1) { st = kvb_fail(KVB_ERR_UNSUPPORTED, "%s: GGUF version 1 is not supported (only 2 and 3)", f->path); goto fail; }
    if (f->version != 2 && f->version != 3) { st = kvb_fail(KVB_ERR_UNSUPPORTED, "%s: unknown GGUF version %u", f->path, f->version); goto fail; }
    if (!take(&c, &f->n_tensors, 8) || !take(&c, &f->n_kv, 8)) {
        st = kvb_fail(KVB_ERR_CORRUPT, "%s: truncated in the header (counts)", f->path);
        goto fail;
    }
    /* a kv needs >= 8 + 4 + 1 bytes; a tensor info >= 8 + 4 + 8 + 4 + 8 */
    if (f->n_kv > (size - c.at) / 13) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: header claims %llu metadata keys, more than the file can hold", f->path, (unsigned long long)f->n_kv); goto fail; }
    if (f->n_tensors > (size - c.at) / 32) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: header claims %llu tensors, more than the file can hold", f->path, (unsigned long long)f->n_tensors); goto fail; }
    f->kv = kvb_calloc((size_t)KVB_MAX(f->n_kv, 1), sizeof *f->kv);
    f->tensors = kvb_calloc((size_t)KVB_MAX(f->n_tensors, 1), sizeof *f->tensors);
    if (!f->kv || !f->tensors) { st = kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", f->path); goto fail; }
    char key[160];
    for (uint64_t i = 0; i < f->n_kv; i++) {
        struct gguf_kv *kv = &f->kv[i];
        if (!take_str(&c, &kv->key)) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: metadata key %llu runs past the end of the file", f->path, (unsigned long long)i); goto fail; }
        key_text(kv->key, key, sizeof key);
        if (!take(&c, &kv->type, 4)) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s': truncated before its type", f->path, key); goto fail; }
        if ((st = read_value(&c, kv, key)) != KVB_OK) goto fail;
        for (uint64_t j = 0; j < i; j++)
            if (f->kv[j].key.n == kv->key.n && memcmp(f->kv[j].key.p, kv->key.p, kv->key.n) == 0) {
                st = kvb_fail(KVB_ERR_CORRUPT, "%s: duplicate key '%s'", f->path, key);
                goto fail;
            }
    }
    f->alignment = 32;
    const struct gguf_kv *al = kvb_gguf_find(f, "general.alignment");
    if (al) {
        if (al->type != GGUF_T_UINT32 || al->v.u == 0 || (al->v.u & (al->v.u - 1)) || al->v.u > (1u << 20)) {
            st = kvb_fail(KVB_ERR_CORRUPT, "%s: key 'general.alignment' must be a power-of-two uint32", f->path);
            goto fail;
        }
        f->alignment = (uint32_t)al->v.u;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        if (!take_str(&c, &t->name)) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: tensor %llu: name runs past the end of the file", f->path, (unsigned long long)i); goto fail; }
        key_text(t->name, key, sizeof key);
        if (!take(&c, &t->n_dims, 4)) goto trunc_t;
        if (t->n_dims < 1 || t->n_dims > 4) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s': %u dimensions (1..4 allowed)", f->path, key, t->n_dims); goto fail; }
        for (int d = 0; d < 4; d++) t->ne[d] = 1;
        uint64_t elems = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne;
            if (!take(&c, &ne, 8)) goto trunc_t;
            if (ne == 0 || ne > ((uint64_t)1 << 40) || elems > UINT64_MAX / ne) {
                st = kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s': dimension %u is %llu", f->path, key, d, (unsigned long long)ne);
                goto fail;
            }
            t->ne[d] = (int64_t)ne;
            elems *= ne;
        }
        if (!take(&c, &t->type, 4) || !take(&c, &t->offset, 8)) goto trunc_t;
        if (kvb_ggml_blck_size(t->type) == 0) { st = kvb_fail(KVB_ERR_UNSUPPORTED, "%s: tensor '%s': unknown tensor type %u", f->path, key, t->type); goto fail; }
        size_t row = kvb_ggml_row_size(t->type, t->ne[0]);
        if (!row) {
            st = kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s': row of %lld is not a whole number of %s blocks", f->path, key, (long long)t->ne[0], kvb_ggml_type_name(t->type));
            goto fail;
        }
        uint64_t rows = elems / (uint64_t)t->ne[0];
        if (rows > UINT64_MAX / row) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s': size overflows", f->path, key); goto fail; }
        t->nbytes = rows * row;
        if (t->offset % f->alignment) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s': offset %llu is not %u-aligned", f->path, key, (unsigned long long)t->offset, f->alignment); goto fail; }
        for (uint64_t j = 0; j < i; j++)
            if (f->tensors[j].name.n == t->name.n && memcmp(f->tensors[j].name.p, t->name.p, t->name.n) == 0) {
                st = kvb_fail(KVB_ERR_CORRUPT, "%s: duplicate tensor '%s'", f->path, key);
                goto fail;
            }
    }
    f->data_start = ((uint64_t)c.at + f->alignment - 1) / f->alignment * f->alignment;
    if (f->n_tensors && f->data_start > size) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: file ends before the tensor data", f->path); goto fail; }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        key_text(t->name, key, sizeof key);
        if (t->offset > size - f->data_start || t->nbytes > size - f->data_start - t->offset) {
            st = kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s': data (%llu bytes at %llu) is not within the file", f->path, key,
                          (unsigned long long)t->nbytes, (unsigned long long)(f->data_start + t->offset));
            goto fail;
        }
        t->data = f->base + f->data_start + t->offset;
    }
    if (f->n_tensors > 1) { /* overlap check on offset order */
        const struct gguf_tensor **byoff = kvb_malloc(sizeof *byoff * (size_t)f->n_tensors);
        if (!byoff) { st = kvb_fail(KVB_ERR_NOMEM, "%s: out of memory", f->path); goto fail; }
        for (uint64_t i = 0; i < f->n_tensors; i++) byoff[i] = &f->tensors[i];
        qsort(byoff, (size_t)f->n_tensors, sizeof *byoff, cmp_offset);
        for (uint64_t i = 1; i < f->n_tensors; i++)
            if (byoff[i - 1]->offset + byoff[i - 1]->nbytes > byoff[i]->offset) {
                char k2[160];
                key_text(byoff[i - 1]->name, key, sizeof key);
                key_text(byoff[i]->name, k2, sizeof k2);
                kvb_free(byoff);
                st = kvb_fail(KVB_ERR_CORRUPT, "%s: tensors '%s' and '%s' overlap", f->path, key, k2);
                goto fail;
            }
        kvb_free(byoff);
    }
    *out = f;
    return KVB_OK;
trunc_t:
    st = kvb_fail(KVB_ERR_CORRUPT, "%s: tensor '%s': info runs past the end of the file", f->path, key);
fail:
    f->mapped = false; /* the caller owns the buffer */
    kvb_gguf_close(f);
    return st;
}

kvb_status kvb_gguf_open(const char *path, struct gguf_file **out) { return kvb_gguf_open_ex(path, false, out); }

kvb_status kvb_gguf_open_ex(const char *path, bool in_memory, struct gguf_file **out) {
    if (!path || !out) return kvb_fail(KVB_ERR_INVALID, "gguf: path and out must not be NULL");
    void *map;
    size_t size;
    kvb_status st = (in_memory ? kvb_read_file : kvb_map_file)(path, 24, "a GGUF file", &map, &size);
    if (st != KVB_OK) return st;
    if ((st = kvb_gguf_open_buffer(map, size, path, out)) != KVB_OK) {
        kvb_unmap_file(map, size);
        return st;
    }
    (*out)->mapped = true;
    return KVB_OK;
}

void kvb_gguf_close(struct gguf_file *f) {
    if (!f) return;
    if (f->mapped) kvb_unmap_file((void *)f->base, f->size);
    kvb_free(f->kv);
    kvb_free(f->tensors);
    kvb_free(f);
}

bool kvb_gguf_str_eq(struct gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.n == n && memcmp(s.p, c, n) == 0;
}

const struct gguf_kv *kvb_gguf_find(const struct gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (kvb_gguf_str_eq(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const struct gguf_tensor *kvb_gguf_find_tensor(const struct gguf_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (kvb_gguf_str_eq(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

static kvb_status missing(const struct gguf_file *f, const char *key, bool required) {
    return required ? kvb_fail(KVB_ERR_INVALID, "%s: required key '%s' is missing", f->path, key) : KVB_ERR_INVALID;
}

kvb_status kvb_gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out, bool required) {
    const struct gguf_kv *kv = kvb_gguf_find(f, key);
    if (!kv) return missing(f, key, required);
    switch (kv->type) {
    case GGUF_T_UINT8: case GGUF_T_UINT16: case GGUF_T_UINT32: case GGUF_T_UINT64:
        if (kv->v.u > UINT32_MAX) break;
        *out = (uint32_t)kv->v.u;
        return KVB_OK;
    case GGUF_T_INT8: case GGUF_T_INT16: case GGUF_T_INT32: case GGUF_T_INT64:
        if (kv->v.i < 0 || kv->v.i > (int64_t)UINT32_MAX) break;
        *out = (uint32_t)kv->v.i;
        return KVB_OK;
    default: break;
    }
    return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' must be a non-negative 32-bit integer", f->path, key);
}

kvb_status kvb_gguf_get_f32(const struct gguf_file *f, const char *key, float *out, bool required) {
    const struct gguf_kv *kv = kvb_gguf_find(f, key);
    if (!kv) return missing(f, key, required);
    if (kv->type == GGUF_T_FLOAT32 || kv->type == GGUF_T_FLOAT64) {
        *out = (float)kv->v.f;
        return KVB_OK;
    }
    return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' must be a float", f->path, key);
}

kvb_status kvb_gguf_get_bool(const struct gguf_file *f, const char *key, bool *out, bool required) {
    const struct gguf_kv *kv = kvb_gguf_find(f, key);
    if (!kv) return missing(f, key, required);
    if (kv->type != GGUF_T_BOOL) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' must be a bool", f->path, key);
    *out = kv->v.b;
    return KVB_OK;
}

kvb_status kvb_gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out, bool required) {
    const struct gguf_kv *kv = kvb_gguf_find(f, key);
    if (!kv) return missing(f, key, required);
    if (kv->type != GGUF_T_STRING) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' must be a string", f->path, key);
    *out = kv->v.s;
    return KVB_OK;
}

kvb_status kvb_gguf_get_arr(const struct gguf_file *f, const char *key, uint32_t elem_type, uint64_t *n, const uint8_t **data, bool required) {
    const struct gguf_kv *kv = kvb_gguf_find(f, key);
    if (!kv) return missing(f, key, required);
    if (kv->type != GGUF_T_ARRAY || kv->v.arr.type != elem_type)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' must be an array of type %u", f->path, key, elem_type);
    *n = kv->v.arr.n;
    *data = kv->v.arr.data;
    return KVB_OK;
}

struct gguf_str kvb_gguf_arr_next_str(const uint8_t **cursor) {
    struct gguf_str s;
    uint64_t n;
    memcpy(&n, *cursor, 8);
    s.p = (const char *)*cursor + 8;
    s.n = n;
    *cursor += 8 + n;
    return s;
}

kvb_status kvb_gguf_tensors(const char *path, struct kvb_tensor_info **out, int64_t *n) {
    if (!path || !out || !n) return kvb_fail(KVB_ERR_INVALID, "gguf_tensors: NULL argument");
    struct gguf_file *g;
    kvb_status st = kvb_gguf_open(path, &g);
    if (st != KVB_OK) return st;
    struct kvb_tensor_info *t = kvb_calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *t);
    if (!t) {
        kvb_gguf_close(g);
        return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory for %llu tensor entries", path, (unsigned long long)g->n_tensors);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct gguf_tensor *s = &g->tensors[i];
        snprintf(t[i].name, sizeof t[i].name, "%.*s", (int)(s->name.n < 95 ? s->name.n : 95), s->name.p);
        t[i].type = s->type;
        t[i].n_dims = (int32_t)s->n_dims;
        for (int d = 0; d < 4; d++) t[i].ne[d] = s->ne[d];
        t[i].bytes = s->nbytes;
    }
    *out = t;
    *n = (int64_t)g->n_tensors;
    kvb_gguf_close(g);
    return KVB_OK;
}
