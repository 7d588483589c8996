/* ggml_types.c — block traits of the ggml tensor types. */
#include "ggml_types.h"
#include "core.h"

static const struct {
    const char *name;
    int64_t blck;
    size_t size;
} k_types[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = {"f32", 1, 4},       [GGML_TYPE_F16] = {"f16", 1, 2},
    [GGML_TYPE_Q4_0] = {"q4_0", 32, 18},   [GGML_TYPE_Q4_1] = {"q4_1", 32, 20},
    [GGML_TYPE_Q5_0] = {"q5_0", 32, 22},   [GGML_TYPE_Q5_1] = {"q5_1", 32, 24},
    [GGML_TYPE_Q8_0] = {"q8_0", 32, 34},   [GGML_TYPE_Q8_1] = {"q8_1", 32, 36},
    [GGML_TYPE_Q2_K] = {"q2_K", 256, 84},  [GGML_TYPE_Q3_K] = {"q3_K", 256, 110},
    [GGML_TYPE_Q4_K] = {"q4_K", 256, 144}, [GGML_TYPE_Q5_K] = {"q5_K", 256, 176},
    [GGML_TYPE_Q6_K] = {"q6_K", 256, 210}, [GGML_TYPE_Q8_K] = {"q8_K", 256, 292},
    [GGML_TYPE_IQ4_NL] = {"iq4_nl", 32, 18}, [GGML_TYPE_IQ4_XS] = {"iq4_xs", 256, 136},
    [GGML_TYPE_BF16] = {"bf16", 1, 2},     [GGML_TYPE_MXFP4] = {"mxfp4", 32, 17},
};

int64_t kvb_ggml_blck_size(uint32_t t) { return t < GGML_TYPE_COUNT ? k_types[t].blck : 0; }
size_t kvb_ggml_type_size(uint32_t t) { return t < GGML_TYPE_COUNT ? k_types[t].size : 0; }
const char *kvb_ggml_type_name(uint32_t t) { return t < GGML_TYPE_COUNT && k_types[t].name ? k_types[t].name : "unknown"; }

size_t kvb_ggml_row_size(uint32_t t, int64_t n) {
    int64_t b = kvb_ggml_blck_size(t);
    if (b <= 0 || n <= 0 || n % b) return 0;
    return (size_t)(n / b) * kvb_ggml_type_size(t);
}


/* ---- the public names (kvbound.h) ---- */

static const uint32_t k_public_types[] = {KVB_TYPE_F32, KVB_TYPE_F16, KVB_TYPE_BF16, KVB_TYPE_Q8_0, KVB_TYPE_Q4_0, KVB_TYPE_Q5_0, KVB_TYPE_Q4_1, KVB_TYPE_Q5_1, KVB_TYPE_Q4_K, KVB_TYPE_Q5_K, KVB_TYPE_Q6_K,
                                          KVB_TYPE_IQ4_NL, KVB_TYPE_IQ4_XS, KVB_TYPE_MXFP4};

const char *kvb_type_name(uint32_t type) {
    const char *n = kvb_ggml_type_name(type);
    return strcmp(n, "unknown") ? n : "?";
}

kvb_status kvb_type_from_name(const char *name, uint32_t *type) {
    for (size_t i = 0; name && type && i < sizeof k_public_types / sizeof k_public_types[0]; i++) {
        const char *n = kvb_ggml_type_name(k_public_types[i]);
        size_t k = 0;
        while (n[k] && name[k] && (n[k] | 0x20) == (name[k] | 0x20)) k++;
        if (!n[k] && !name[k]) {
            *type = k_public_types[i];
            return KVB_OK;
        }
    }
    return kvb_fail(KVB_ERR_INVALID, "type '%s' is not one of f32, f16, bf16, q8_0, q4_0, q5_0, q4_1, q5_1, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, mxfp4", name ? name : "(null)");
}

size_t kvb_type_row_bytes(uint32_t type, int64_t n) { return n < 0 ? 0 : kvb_ggml_row_size(type, n); }
