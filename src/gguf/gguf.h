/*
 * gguf.h — bounds-checked reader of GGUF v2/v3 files (the llama.cpp model
 * format; spec: ggml/docs/gguf.md). The file is mmapped (or a caller's
 * buffer is used as is) and never copied: keys, strings and tensor data are
 * views into it.
 *
 * Layout: "GGUF" u32 version, u64 n_tensors, u64 n_kv; n_kv x (string key,
 * u32 type, value); n_tensors x (string name, u32 n_dims, u64 ne[n_dims],
 * u32 ggml type, u64 offset); padding to general.alignment (default 32);
 * tensor data, each tensor at data_start + offset. A string is u64 length +
 * bytes (no NUL). ne[0] is the innermost (row) dimension.
 *
 * Every offset, size, count and string length is checked before use; counts
 * are bounded by the bytes left before anything is allocated; tensors must
 * lie inside the file, be aligned and not overlap. Errors name the key or
 * tensor: KVB_ERR_CORRUPT for malformed files, KVB_ERR_UNSUPPORTED for valid
 * features this build lacks (version 1, nested arrays, unknown tensor types).
 */
#ifndef KVB_GGUF_H
#define KVB_GGUF_H

#include "../core/core.h"
#include "../core/ggml_types.h"

enum gguf_vtype {
    GGUF_T_UINT8 = 0, GGUF_T_INT8 = 1, GGUF_T_UINT16 = 2, GGUF_T_INT16 = 3, GGUF_T_UINT32 = 4, GGUF_T_INT32 = 5,
    GGUF_T_FLOAT32 = 6, GGUF_T_BOOL = 7, GGUF_T_STRING = 8, GGUF_T_ARRAY = 9, GGUF_T_UINT64 = 10, GGUF_T_INT64 = 11,
    GGUF_T_FLOAT64 = 12, GGUF_T_COUNT
};

struct gguf_str {
    const char *p; /* not NUL-terminated */
    uint64_t n;
};

struct gguf_kv {
    struct gguf_str key;
    uint32_t type;
    union {
        uint64_t u;
        int64_t i;
        double f;
        bool b;
        struct gguf_str s;
        struct {
            uint32_t type;         /* element type (not ARRAY) */
            uint64_t n;
            const uint8_t *data;   /* raw elements in the file */
            uint64_t nbytes;
        } arr;
    } v;
};

struct gguf_tensor {
    struct gguf_str name;
    uint32_t n_dims;
    int64_t ne[4];     /* ne[0] innermost; unused dims are 1 */
    uint32_t type;     /* enum ggml_type */
    uint64_t offset;   /* from the data section */
    const uint8_t *data;
    uint64_t nbytes;
};

struct gguf_file {
    const uint8_t *base;
    size_t size;
    bool mapped;       /* base is an mmap of the file */
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv, n_tensors;
    struct gguf_kv *kv;
    struct gguf_tensor *tensors;
    uint64_t data_start;
    char path[512];
};

/* Parses a GGUF image in memory (not copied: buf must outlive the file). */
kvb_status kvb_gguf_open_buffer(const void *buf, size_t size, const char *name, struct gguf_file **out);
/* mmaps path and parses it. KVB_ERR_IO if it cannot be opened. */
kvb_status kvb_gguf_open(const char *path, struct gguf_file **out);
/* As kvb_gguf_open; with in_memory, the file is read into anonymous memory
 * (kvb_read_file) instead of mapped. */
kvb_status kvb_gguf_open_ex(const char *path, bool in_memory, struct gguf_file **out);
void kvb_gguf_close(struct gguf_file *f);

const struct gguf_kv *kvb_gguf_find(const struct gguf_file *f, const char *key);
const struct gguf_tensor *kvb_gguf_find_tensor(const struct gguf_file *f, const char *name);
bool kvb_gguf_str_eq(struct gguf_str s, const char *c);

/* Typed getters: KVB_ERR_CORRUPT naming the key if the type is wrong,
 * KVB_ERR_INVALID (with message) if absent and required. Integers of any
 * width convert if the value fits. */
kvb_status kvb_gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out, bool required);
kvb_status kvb_gguf_get_f32(const struct gguf_file *f, const char *key, float *out, bool required);
kvb_status kvb_gguf_get_bool(const struct gguf_file *f, const char *key, bool *out, bool required);
kvb_status kvb_gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out, bool required);
/* An array key of the given element type; n elements at data. */
kvb_status kvb_gguf_get_arr(const struct gguf_file *f, const char *key, uint32_t elem_type, uint64_t *n, const uint8_t **data, bool required);
/* Walks a string array: *cursor starts at the array data; returns the next string. */
struct gguf_str kvb_gguf_arr_next_str(const uint8_t **cursor);

#endif
