/*
 * ggml_types.h — the tensor types of the GGUF/ggml formats (ids as in
 * ggml.h) and their block traits. Shared by the GGUF reader/writer and the
 * weight kernels, which must not depend on each other.
 */
#ifndef KVB_GGML_TYPES_H
#define KVB_GGML_TYPES_H

#include "core.h"

/* ggml tensor types (ids as in ggml.h) */
enum ggml_type {
    GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_Q4_0 = 2, GGML_TYPE_Q4_1 = 3, GGML_TYPE_Q5_0 = 6, GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8, GGML_TYPE_Q8_1 = 9, GGML_TYPE_Q2_K = 10, GGML_TYPE_Q3_K = 11, GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13, GGML_TYPE_Q6_K = 14, GGML_TYPE_Q8_K = 15, GGML_TYPE_IQ4_NL = 20, GGML_TYPE_IQ4_XS = 23, GGML_TYPE_BF16 = 30,
    GGML_TYPE_MXFP4 = 39, GGML_TYPE_COUNT = 40
};

/* Type traits: elements per block and bytes per block; 0 if unknown. */
int64_t kvb_ggml_blck_size(uint32_t type);
size_t kvb_ggml_type_size(uint32_t type);
const char *kvb_ggml_type_name(uint32_t type);
/* Bytes of a row of n elements, 0 if n is not a whole number of blocks. */
size_t kvb_ggml_row_size(uint32_t type, int64_t n);


#endif
