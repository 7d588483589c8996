/* gguf_write.h — GGUF v3 writer (see gguf_write.c). */
#ifndef KVB_GGUF_WRITE_H
#define KVB_GGUF_WRITE_H

#include "gguf.h"

struct gguf_writer;
kvb_status kvb_gguf_writer_init(struct gguf_writer **out);
void kvb_gguf_writer_free(struct gguf_writer *w);
void kvb_gguf_writer_u32(struct gguf_writer *w, const char *key, uint32_t v);
void kvb_gguf_writer_f32(struct gguf_writer *w, const char *key, float v);
void kvb_gguf_writer_bool(struct gguf_writer *w, const char *key, bool v);
void kvb_gguf_writer_str(struct gguf_writer *w, const char *key, const char *v);
/* elem_type: GGUF_T_FLOAT32, GGUF_T_INT32 or GGUF_T_UINT32 (4 bytes each) */
void kvb_gguf_writer_arr(struct gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n);
void kvb_gguf_writer_arr_str(struct gguf_writer *w, const char *key, const char *const *strs, const uint32_t *lens, uint64_t n);
/* data is not copied: it must live until gguf_writer_write. ne[0] innermost. */
kvb_status kvb_gguf_writer_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne, const void *data);
kvb_status kvb_gguf_writer_write(struct gguf_writer *w, const char *path);

#endif
