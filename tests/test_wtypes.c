/*
 * test_wtypes.c — the weight types of other people's GGUF files (q4_1, q5_1,
 * q5_K, iq4_nl, iq4_xs, mxfp4): dequantization equals ggml's bit for bit on
 * blocks whose ggml values were recorded out of tree (wtypes_golden.h); the
 * reference dots equal a float64 sum over the dequantized weights; the
 * types are named, supported by matmul, quantized where kvbound writes them,
 * and types still unsupported stay refused.
 */
#include "testing.h"
#include "ops/matmul.h"
#include "ops/quant.h"
#include "wtypes_golden.h"

#include <math.h>

struct golden {
    uint32_t type;
    const uint8_t *bytes; /* [3][type size] */
    const uint32_t *bits; /* [3][block size] */
};
#define G(T, name) {T, &g_##name##_bytes[0][0], &g_##name##_bits[0][0]}
static const struct golden k_golden[] = {
    G(GGML_TYPE_Q4_1, q4_1), G(GGML_TYPE_Q5_1, q5_1), G(GGML_TYPE_Q5_K, q5_K),
    G(GGML_TYPE_IQ4_NL, iq4_nl), G(GGML_TYPE_IQ4_XS, iq4_xs), G(GGML_TYPE_MXFP4, mxfp4),
};
#undef G
#define N_GOLDEN (sizeof k_golden / sizeof *k_golden)

TEST(dequantize_equals_ggml_bits) {
    float y[QK_K];
    for (size_t g = 0; g < N_GOLDEN; g++) {
        const uint32_t t = k_golden[g].type;
        const int64_t bs = kvb_ggml_blck_size(t);
        const size_t tb = kvb_ggml_type_size(t);
        CHECK(kvb_matmul_supports(t));
        CHECK(bs > 0 && bs <= QK_K);
        if (bs <= 0 || bs > QK_K) continue;
        int bad = 0;
        for (int k = 0; k < 3; k++) {
            kvb_dequantize_row(t, k_golden[g].bytes + (size_t)k * tb, y, bs);
            for (int64_t j = 0; j < bs; j++) {
                uint32_t u;
                memcpy(&u, &y[j], 4);
                if (u != k_golden[g].bits[k * bs + j] && bad++ < 3)
                    FAILF("%s block %d el %lld: %08x, ggml %08x", kvb_ggml_type_name(t), k, (long long)j, u, k_golden[g].bits[k * bs + j]);
            }
        }
        printf("  %-6s 3 blocks: %s\n", kvb_ggml_type_name(t), bad ? "DIFFER" : "ggml's bits");
    }
}

/* The reference f32 dot of every family's table equals the float64 sum of
 * the dequantized row times x (to float rounding), on random blocks. */
TEST(reference_dot_equals_float64_sum) {
    enum { N = 1024 };
    static uint8_t row[N * 2];
    static float x[N], w[N];
    unsigned long long rs = 99;
    for (size_t g = 0; g < N_GOLDEN; g++) {
        const uint32_t t = k_golden[g].type;
        const size_t rb = kvb_ggml_row_size(t, N);
        CHECK(rb > 0 && rb <= sizeof row);
        for (int trial = 0; trial < 4; trial++) {
            for (size_t i = 0; i < rb; i++) row[i] = (uint8_t)(t_randf(&rs) * 128 + 128);
            for (int64_t b = 0; b < N / kvb_ggml_blck_size(t); b++) { /* finite scales, |s| < 2 */
                uint8_t *blk = row + (size_t)b * kvb_ggml_type_size(t);
                if (t == GGML_TYPE_MXFP4) blk[0] = (uint8_t)(120 + b % 12);
                else {
                    const uint16_t h = kvb_f32_to_f16(t_randf(&rs)), h2 = kvb_f32_to_f16(t_randf(&rs));
                    memcpy(blk, &h, 2);
                    if (t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1 || t == GGML_TYPE_Q5_K) memcpy(blk + 2, &h2, 2);
                }
            }
            for (int i = 0; i < N; i++) x[i] = t_randf(&rs);
            kvb_dequantize_row(t, row, w, N);
            double exact = 0, mag = 0;
            for (int i = 0; i < N; i++) { exact += (double)w[i] * x[i]; mag += fabs((double)w[i] * x[i]); }
            CHECK(mag > 0);
            const double got = kvb_dot_ref.dot[t](row, x, N);
            if (fabs(got - exact) > 1e-5 * mag) FAILF("%s trial %d: %.9g vs %.9g", kvb_ggml_type_name(t), trial, got, exact);
        }
    }
}

/* Every kernel family has a dot for every type the reference computes, and
 * an integer dot for every type with an activation form (a NULL there would
 * crash matmul on a file of that type). */
TEST(every_family_covers_every_type) {
    const struct kvb_dot_kernels *fams[5] = {&kvb_dot_ref, NULL, NULL, NULL, NULL};
#if defined(__x86_64__)
    fams[1] = &kvb_dot_avx2;
    fams[2] = &kvb_dot_avx512;
    fams[3] = &kvb_dot_avx512vnni;
    fams[4] = &kvb_dot_avxvnni;
#endif
    int n = 0;
    for (int f = 0; f < 5; f++) {
        if (!fams[f]) continue;
        for (uint32_t t = 0; t < GGML_TYPE_COUNT; t++) {
            if (!kvb_dot_ref.dot[t]) continue;
            n++;
            if (!fams[f]->dot[t]) FAILF("%s: no dot for %s", fams[f]->name, kvb_ggml_type_name(t));
            if (f > 0 && kvb_act_form(t) != KVB_ACT_NONE && !fams[f]->dot_q8[t]) FAILF("%s: no integer dot for %s", fams[f]->name, kvb_ggml_type_name(t));
            if (kvb_act_form(t) != KVB_ACT_NONE && !kvb_dot_q8_ref(t)) FAILF("no integer reference for %s", kvb_ggml_type_name(t));
        }
    }
    for (size_t g = 0; g < N_GOLDEN; g++) CHECK(kvb_act_form(k_golden[g].type) != KVB_ACT_NONE);
    CHECK(n >= 14);
}

/* Every family's integer dot equals the scalar reference on rows of 1 to 9
 * blocks of 32 (the VNNI kernels take blocks in pairs, an odd last one by
 * the AVX2 kernel) and 1 to 3 of 256. */
TEST(integer_dots_every_length) {
    enum { N = 768 };
    static float w[N], x[N], xd[N / 32];
    static int8_t xq[N];
    static int16_t xs[N / 16];
    static uint8_t row[N * 2];
    const struct kvb_dot_kernels *fams[4] = {NULL, NULL, NULL, NULL};
#if defined(__x86_64__)
    if (kvb_cpu_has_avx2()) fams[0] = &kvb_dot_avx2;
    if (kvb_cpu_has_avx512()) fams[1] = &kvb_dot_avx512;
    if (kvb_cpu_has_avx512vnni()) fams[2] = &kvb_dot_avx512vnni;
    if (kvb_cpu_has_avxvnni()) fams[3] = &kvb_dot_avxvnni;
#endif
    unsigned long long rs = 7;
    int n_cmp = 0;
    for (size_t g = 0; g < N_GOLDEN; g++) {
        const uint32_t t = k_golden[g].type;
        const int64_t bs = kvb_ggml_blck_size(t);
        for (int64_t n = bs; n <= (bs == 32 ? 9 * 32 : 3 * 256); n += bs) {
            for (int64_t i = 0; i < n; i++) { w[i] = t_randf(&rs); x[i] = t_randf(&rs) * 2; }
            CHECK(kvb_quantize_row(t, w, row, n));
            const struct kvb_q8_act a = {xd, xq, xs};
            if (kvb_act_form(t) == KVB_ACT_Q8_K) kvb_quantize_act_q8k(x, n, xd, xq, xs);
            else kvb_quantize_act_q8(x, n, xd, xq, xs);
            const double want = kvb_dot_q8_ref(t)(row, &a, n);
            double mag = 0;
            for (int64_t i = 0; i < n; i++) mag += fabs((double)w[i] * x[i]);
            for (int f = 0; f < 4; f++) {
                if (!fams[f]) continue;
                const double got = fams[f]->dot_q8[t](row, &a, n);
                n_cmp++;
                if (fabs(got - want) > 1e-5 * mag + 1e-6)
                    FAILF("%s %s n=%lld: %.9g vs reference %.9g", fams[f]->name, kvb_ggml_type_name(t), (long long)n, got, want);
            }
        }
    }
    if (!fams[0]) printf("  (no AVX2 on this CPU: nothing to compare)\n");
    else printf("  %d kernel results equal the reference\n", n_cmp);
}

/* Names: kvb_type_name / kvb_type_from_name know the new types; a type
 * kvbound cannot compute with (q2_K, q3_K) stays unsupported and unnamed. */
TEST(names_and_refusals) {
    for (size_t g = 0; g < N_GOLDEN; g++) {
        const uint32_t t = k_golden[g].type;
        uint32_t back = 9999;
        const char *name = kvb_type_name(t);
        CHECK(strcmp(name, "?") != 0);
        CHECK_OK(kvb_type_from_name(name, &back));
        CHECK_EQ_INT((int)back, (int)t);
    }
    uint32_t t = 0;
    CHECK(!kvb_matmul_supports(GGML_TYPE_Q2_K));
    CHECK(!kvb_matmul_supports(GGML_TYPE_Q3_K));
    CHECK(kvb_type_from_name("q2_K", &t) == KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "q2_K") != NULL);
}

int main(void) {
    RUN(dequantize_equals_ggml_bits);
    RUN(reference_dot_equals_float64_sum);
    RUN(every_family_covers_every_type);
    RUN(integer_dots_every_length);
    RUN(names_and_refusals);
    return test_summary();
}
