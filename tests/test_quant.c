/*
 * test_quant.c — weight formats and their kernels: hand-built blocks
 * dequantize to values computed here from the format description;
 * quantize/dequantize round trips stay within a per-type error measured
 * (with a margin); q8_0 codes are the nearest, by a quantizer written here; every SIMD
 * dot kernel on the CPU equals the reference (dequantize + sum) within a
 * relative 1e-5, on rows of random quantized blocks; the int8 tiles
 * (Q8_0's q8_tile, the K-quants' kq_tile) give every pair of every shape the
 * bits of the family's lone integer dot.
 */
#include "testing.h"
#include "families.h"
#include "ops/matmul.h"
#include "ops/quant.h"

static const uint32_t k_types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K,
                                   GGML_TYPE_Q5_K, GGML_TYPE_Q4_1, GGML_TYPE_Q5_1,
                              GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS, GGML_TYPE_MXFP4};

TEST(hand_built_blocks) {
    float y[256];
    struct block_q4_0 b4;
    b4.d = kvb_f32_to_f16(0.5f);
    for (int k = 0; k < 16; k++) b4.qs[k] = (uint8_t)(k | ((15 - k) << 4));
    kvb_dequantize_row(GGML_TYPE_Q4_0, &b4, y, 32);
    for (int k = 0; k < 16; k++) {
        CHECK_NEAR(y[k], 0.5 * (k - 8), 0);
        CHECK_NEAR(y[16 + k], 0.5 * (7 - k), 0);
    }
    /* Q5_0: element k's code is its nibble plus 16 times bit k of qh */
    struct block_q5_0 b5;
    b5.d = kvb_f32_to_f16(0.5f);
    for (int k = 0; k < 16; k++) b5.qs[k] = (uint8_t)(k | ((15 - k) << 4));
    const uint32_t qh5 = 0xA5C30F01u;
    memcpy(b5.qh, &qh5, 4);
    kvb_dequantize_row(GGML_TYPE_Q5_0, &b5, y, 32);
    for (int k = 0; k < 16; k++) {
        CHECK_NEAR(y[k], 0.5 * (k + 16 * (int)((qh5 >> k) & 1) - 16), 0);
        CHECK_NEAR(y[16 + k], 0.5 * (15 - k + 16 * (int)((qh5 >> (16 + k)) & 1) - 16), 0);
    }
    struct block_q8_0 b8;
    b8.d = kvb_f32_to_f16(0.25f);
    for (int k = 0; k < 32; k++) b8.qs[k] = (int8_t)(k - 16);
    kvb_dequantize_row(GGML_TYPE_Q8_0, &b8, y, 32);
    for (int k = 0; k < 32; k++) CHECK_NEAR(y[k], 0.25 * (k - 16), 0);
    /* Q4_K: scales j<4 in the low 6 bits of bytes 0..3 (mins 4..7); j>=4 split */
    struct block_q4_K bk;
    memset(&bk, 0, sizeof bk);
    bk.d = kvb_f32_to_f16(1.0f);
    bk.dmin = kvb_f32_to_f16(0.5f);
    const uint8_t sc[8] = {1, 2, 3, 4, 40, 50, 60, 63}, mn[8] = {0, 1, 2, 3, 33, 17, 5, 63};
    for (int j = 0; j < 4; j++) { bk.scales[j] = sc[j]; bk.scales[j + 4] = mn[j]; }
    for (int j = 4; j < 8; j++) {
        bk.scales[j + 4] = (uint8_t)((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
        bk.scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
        bk.scales[j] |= (uint8_t)((mn[j] >> 4) << 6);
    }
    for (int k = 0; k < 128; k++) bk.qs[k] = (uint8_t)((k % 16) | (((k + 5) % 16) << 4));
    kvb_dequantize_row(GGML_TYPE_Q4_K, &bk, y, 256);
    for (int e = 0; e < 256; e++) {
        int j = e / 32, byte = (e / 64) * 32 + e % 32;
        int q = j % 2 == 0 ? bk.qs[byte] & 0xF : bk.qs[byte] >> 4;
        if (y[e] != 1.0f * sc[j] * q - 0.5f * mn[j]) FAILF("q4_K element %d: %g vs %g", e, (double)y[e], 1.0 * sc[j] * q - 0.5 * mn[j]);
    }
    /* Q6_K: element e = 128 h + 32 g + l: 6-bit q from ql/qh, scale index 8h + l/16 + 2g */
    struct block_q6_K b6;
    for (int k = 0; k < 128; k++) b6.ql[k] = (uint8_t)(k * 7);
    for (int k = 0; k < 64; k++) b6.qh[k] = (uint8_t)(k * 13 + 1);
    for (int k = 0; k < 16; k++) b6.scales[k] = (int8_t)(k - 8);
    b6.d = kvb_f32_to_f16(0.125f);
    kvb_dequantize_row(GGML_TYPE_Q6_K, &b6, y, 256);
    for (int e = 0; e < 256; e++) {
        int h = e / 128, g = (e % 128) / 32, l = e % 32;
        uint8_t lo = b6.ql[64 * h + l + (g & 1) * 32];
        int low = g < 2 ? lo & 0xF : lo >> 4;
        int high = (b6.qh[32 * h + l] >> (2 * g)) & 3;
        double want = 0.125 * b6.scales[8 * h + l / 16 + 2 * g] * ((low | (high << 4)) - 32);
        if (fabs(y[e] - want) > 0) FAILF("q6_K element %d: %g vs %g", e, (double)y[e], want);
    }
    CHECK_EQ_INT(kvb_f32_to_bf16(1.0f), 0x3f80);
    CHECK_NEAR(kvb_bf16_to_f32(0xc040), -3.0, 0);
}

TEST(round_trip_error_per_type) {
    /* relative RMS error: measured 0, 2.13e-4, 1.70e-3, 4.37e-3, 6.90e-2,
     * 3.44e-2, 6.62e-2, 1.56e-2, 3.21e-2 (q5_K), 6.57e-2 (q4_1), 3.17e-2 (q5_1),
     * 7.26e-2 (iq4_nl), 7.26e-2 (iq4_xs), 1.13e-1 (mxfp4); the bounds allow ~15%, while codes truncated
     * instead of rounded double the error (q8_0: 8.5e-3) */
    const double max_rel[] = {0, 2.5e-4, 2e-3, 5e-3, 8e-2, 4e-2, 7.6e-2, 1.8e-2, 3.7e-2, 7.6e-2, 3.7e-2, 8.4e-2, 8.4e-2, 1.3e-1};
    enum { N = 4096 };
    static float x[N], y[N];
    static uint8_t row[N * 4];
    unsigned long long rs = 17;
    double ss = 0;
    for (int i = 0; i < N; i++) { x[i] = t_randf(&rs) * (1 + (i % 97) * 0.02f); ss += (double)x[i] * x[i]; }
    for (size_t t = 0; t < sizeof k_types / sizeof *k_types; t++) {
        CHECK(kvb_quantize_row(k_types[t], x, row, N));
        kvb_dequantize_row(k_types[t], row, y, N);
        double es = 0;
        for (int i = 0; i < N; i++) es += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        double rel = sqrt(es / ss);
        printf("  %-5s relative RMS round-trip error %.2e\n", kvb_ggml_type_name(k_types[t]), rel);
        if (rel > max_rel[t] + 1e-12) FAILF("%s: error %.3g > %.3g", kvb_ggml_type_name(k_types[t]), rel, max_rel[t]);
    }
}

/* q8_0 blocks against a quantizer written here (ggml's format): the scale is
 * f16(amax / 127) and every code is x / scale rounded to nearest, at most half
 * a step from it (rows at several magnitudes, an all-zero block). */
TEST(q8_0_codes_round_to_nearest) {
    enum { N = 1024 };
    static float x[N];
    static struct block_q8_0 row[N / 32];
    unsigned long long rs = 23;
    for (int trial = 0; trial < 4; trial++) {
        for (int i = 0; i < N; i++) x[i] = t_randf(&rs) * (trial == 3 ? 3000.0f : 0.01f + trial);
        for (int i = 64; i < 96; i++) x[i] = 0;
        CHECK(kvb_quantize_row(GGML_TYPE_Q8_0, x, row, N));
        for (int b = 0; b < N / 32; b++) {
            float amax = 0;
            for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(x[b * 32 + k]));
            const float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0.0f;
            CHECK_EQ_INT(row[b].d, kvb_f32_to_f16(s));
            for (int k = 0; k < 32; k++) {
                const double v = (double)x[b * 32 + k] * inv;
                if (fabs(row[b].qs[k] - v) > 0.5 + 1e-4 || row[b].qs[k] != (int)rintf(x[b * 32 + k] * inv))
                    FAILF("trial %d block %d value %d: %.9g / %.9g gives code %d", trial, b, k, (double)x[b * 32 + k], (double)s, row[b].qs[k]);
            }
        }
    }
}

/* The weight kernels of the families this CPU runs, up to the one in use
 * (families.h: x86's avx2, avxvnni, avx512, avx512vnni; AArch64's neon,
 * dotprod, i8mm), NULL past them. */
enum { N_FAMS = 4 };
static void present_families(const struct kvb_dot_kernels *fams[N_FAMS]) {
    const struct kvb_family *f[N_FAMS];
    const int n = t_fast_families(f, N_FAMS);
    for (int i = 0; i < N_FAMS; i++) fams[i] = i < n ? f[i]->dot : NULL;
}

/* The avxvnni family's integer kernels must give avx2's bits (dot_i8_avx2.h):
 * avx2's kernel for the same call where fam is avxvnni, else NULL. */
static const struct kvb_dot_kernels *avx2_twin(const struct kvb_dot_kernels *fam) {
#if defined(__x86_64__)
    if (fam == &kvb_dot_avxvnni && kvb_cpu_has_avx2()) return &kvb_dot_avx2;
#else
    (void)fam;
#endif
    return NULL;
}

TEST(simd_dot_equals_reference) {
    const struct kvb_dot_kernels *fams[N_FAMS + 1] = {&kvb_dot_ref, NULL, NULL, NULL, NULL};
    present_families(fams + 1);
    enum { N = 1024 + 64 };
    static float w[N], x[N];
    static uint8_t row[N * 4];
    for (size_t t = 0; t < sizeof k_types / sizeof *k_types; t++)
        for (int trial = 0; trial < 20; trial++) {
            unsigned long long rs = 100 + trial;
            int64_t n = (trial % 4 + 1) * 256;
            if (kvb_ggml_blck_size(k_types[t]) == 1) n += trial * 3; /* float rows: every tail (a SIMD row's last partial vectors) */
            for (int i = 0; i < n; i++) { w[i] = t_randf(&rs); x[i] = t_randf(&rs); }
            kvb_quantize_row(k_types[t], w, row, n);
            kvb_dequantize_row(k_types[t], row, w, n); /* the reference sum, in double */
            double ref = 0, mag = 0;
            for (int i = 0; i < n; i++) { ref += (double)w[i] * x[i]; mag += fabs((double)w[i] * x[i]); }
            for (int f = 0; f < N_FAMS + 1; f++) {
                if (!fams[f] || !fams[f]->dot[k_types[t]]) continue;
                double got = fams[f]->dot[k_types[t]](row, x, n);
                if (fabs(got - ref) > 1e-5 * mag + 1e-7)
                    FAILF("%s %s n=%lld: %.9g vs %.9g", fams[f]->name, kvb_ggml_type_name(k_types[t]), (long long)n, got, ref);
            }
        }
}

/* Q8_0 rows against int8 activations: the scalar reference and (where the
 * CPU has it) the VNNI kernel equal the exact sum of dequantized weights
 * times dequantized activations. */
TEST(q8_activation_kernel_exact) {
#if defined(__x86_64__)
    enum { N = 2048 };
    static float w[N], x[N], wd[N], xd[N], xs[N / 32];
    static int8_t xq[N];
    static int16_t xsum[N / 32];
    static struct block_q8_0 row[N / 32];
    unsigned long long rs = 5;
    for (int i = 0; i < N; i++) { w[i] = t_randf(&rs); x[i] = t_randf(&rs) * 3; }
    kvb_quantize_row(GGML_TYPE_Q8_0, w, row, N);
    kvb_dequantize_row(GGML_TYPE_Q8_0, row, wd, N);
    kvb_quantize_act_q8(x, N, xs, xq, xsum);
    for (int i = 0; i < N; i++) xd[i] = xs[i / 32] * xq[i];
    for (int b = 0; b < N / 32; b++) { /* the block sums */
        int sum = 0;
        for (int i = 0; i < 32; i++) sum += xq[b * 32 + i];
        CHECK(xsum[b] == sum);
    }
    double ref = 0, mag = 0;
    for (int i = 0; i < N; i++) { ref += (double)wd[i] * xd[i]; mag += fabs((double)wd[i] * xd[i]); }
    const struct kvb_q8_act a = {xs, xq, xsum};
    double got = kvb_dot_q8_0_q8_ref(row, &a, N);
    if (fabs(got - ref) > 1e-6 * mag) FAILF("scalar reference %.9g vs %.9g", got, ref);
    if (kvb_cpu_has_avx2()) { /* the AVX2 maddubs kernel, and at the int16 edge (+-127 everywhere: q8_0 quantizes to -127..127) */
        double g2 = kvb_dot_avx2.dot_q8[GGML_TYPE_Q8_0](row, &a, N);
        if (fabs(g2 - ref) > 1e-6 * mag) FAILF("avx2 %.9g vs %.9g", g2, ref);
        static struct block_q8_0 edge[N / 32];
        static int8_t xe[N];
        static int16_t se[N / 32];
        for (int i = 0; i < N / 32; i++) { edge[i].d = row[i].d; for (int j = 0; j < 32; j++) edge[i].qs[j] = (int8_t)(j % 3 ? -127 : 127); }
        for (int i = 0; i < N; i++) xe[i] = (int8_t)(i % 2 ? -127 : 127);
        const struct kvb_q8_act ae = {xs, xe, se}; /* (the sums are 0) */
        double re = kvb_dot_q8_0_q8_ref(edge, &ae, N), ge = kvb_dot_avx2.dot_q8[GGML_TYPE_Q8_0](edge, &ae, N);
        if (fabs(ge - re) > 1e-5 * (fabs(re) + 1)) FAILF("avx2 at the int16 edge %.9g vs %.9g", ge, re);
    }
    const struct kvb_dot_kernels *tiled[3] = {kvb_cpu_has_avx2() ? &kvb_dot_avx2 : NULL, kvb_cpu_has_avx512vnni() ? &kvb_dot_avx512vnni : NULL,
                                              kvb_cpu_has_avxvnni() ? &kvb_dot_avxvnni : NULL};
    for (int f = 0; f < 3; f++) { /* tiles: every shape gives each pair the lone dot's bits */
        const struct kvb_dot_kernels *fam = tiled[f];
        if (!fam || !fam->q8_tile) continue;
        CHECK(fam->q8_tile_tokens >= 1 && fam->q8_tile_tokens <= KVB_Q8_TILE_TOKENS_MAX);
        CHECK(fam->q8_tile_rows >= 1 && fam->q8_tile_rows <= KVB_Q8_TILE_ROWS_MAX && fam->q8_tile_rows_one >= 0 &&
              fam->q8_tile_rows_one <= fam->q8_tile_rows);
        static struct block_q8_0 rowsT[KVB_Q8_TILE_ROWS_MAX][N / 32];
        static int8_t xq3[KVB_Q8_TILE_TOKENS_MAX][N];
        static int16_t xsum3[KVB_Q8_TILE_TOKENS_MAX][N / 32];
        static float xs3[KVB_Q8_TILE_TOKENS_MAX][N / 32], tmp[N];
        for (int r = 0; r < KVB_Q8_TILE_ROWS_MAX; r++) {
            for (int i = 0; i < N; i++) tmp[i] = t_randf(&rs);
            kvb_quantize_row(GGML_TYPE_Q8_0, tmp, rowsT[r], N);
        }
        if (f == 1) /* codes at the ends of the range, -128 included (a file may hold it) */
            for (int i = 0; i < 32; i++) { rowsT[3][5].qs[i] = (int8_t)(i % 2 ? -128 : 127); rowsT[15][0].qs[i] = -128; }
        struct kvb_q8_act a3[KVB_Q8_TILE_TOKENS_MAX];
        for (int t = 0; t < KVB_Q8_TILE_TOKENS_MAX; t++) {
            for (int i = 0; i < N; i++) tmp[i] = t_randf(&rs) * 2;
            kvb_quantize_act_q8(tmp, N, xs3[t], xq3[t], xsum3[t]);
            a3[t] = (struct kvb_q8_act){xs3[t], xq3[t], xsum3[t]};
        }
        for (int nr = 1; nr <= fam->q8_tile_rows; nr++)
            for (int nt = 1; nt <= fam->q8_tile_tokens * 2; nt++) { /* past the family's width: an odd block count (N - 32) */
                const int64_t nn = nt > fam->q8_tile_tokens ? N - 32 : N;
                const int ntt = nt > fam->q8_tile_tokens ? nt - fam->q8_tile_tokens : nt;
                enum { LDO = KVB_Q8_TILE_ROWS_MAX + 1 };
                float out[KVB_Q8_TILE_TOKENS_MAX * LDO];
                for (int i = 0; i < KVB_Q8_TILE_TOKENS_MAX * LDO; i++) out[i] = NAN; /* what the tile does not write stays NaN */
                fam->q8_tile(rowsT, sizeof rowsT[0], nr, a3, ntt, nn, out, LDO, nt % 2 == 1); /* with and without the prefetch */
                for (int t = 0; t < KVB_Q8_TILE_TOKENS_MAX; t++)
                    for (int r = 0; r < LDO; r++) {
                        if (t >= ntt || r >= nr) {
                            if (!isnan(out[t * LDO + r])) FAILF("%s tile %dx%d wrote (%d,%d) outside itself", fam->name, nr, ntt, r, t);
                            continue;
                        }
                        const float one = fam->dot_q8[GGML_TYPE_Q8_0](rowsT[r], &a3[t], nn);
                        const double rf = kvb_dot_q8_0_q8_ref(rowsT[r], &a3[t], nn);
                        if (memcmp(&one, &out[t * LDO + r], sizeof one))
                            FAILF("%s tile %dx%d n=%lld pair (%d,%d): %.9g, lone %.9g", fam->name, nr, ntt, (long long)nn, r, t, out[t * LDO + r], one);
                        if (fabs(one - rf) > 1e-4 * (fabs(rf) + 1)) FAILF("%s tile pair vs reference %.9g vs %.9g", fam->name, one, rf);
                        if (f == 2 && tiled[0]) { /* avxvnni: the avx2 tile's bits */
                            const float two = kvb_dot_avx2.dot_q8[GGML_TYPE_Q8_0](rowsT[r], &a3[t], nn);
                            if (memcmp(&two, &out[t * LDO + r], sizeof two))
                                FAILF("avxvnni tile %dx%d pair (%d,%d): %.9g, avx2 %.9g", nr, ntt, r, t, out[t * LDO + r], two);
                        }
                        if (f == 1) { /* VNNI: the FMA chain over the blocks in order (dot_vnni.c), bit for bit */
                            float chain = 0;
                            for (int64_t b = 0; b < nn / 32; b++) {
                                int32_t isum = 0;
                                for (int i = 0; i < 32; i++) isum += rowsT[r][b].qs[i] * a3[t].q[b * 32 + i];
                                chain = fmaf((float)isum, kvb_f16_to_f32(rowsT[r][b].d) * a3[t].d[b], chain);
                            }
                            if (memcmp(&chain, &out[t * LDO + r], sizeof chain))
                                FAILF("vnni tile pair (%d,%d) n=%lld: %.9g, the fmaf chain %.9g", r, t, (long long)nn, out[t * LDO + r], chain);
                        }
                    }
            }
    }
    if (kvb_cpu_has_avx512vnni()) {
        double gv = kvb_dot_avx512vnni.dot_q8[GGML_TYPE_Q8_0](row, &a, N);
        if (fabs(gv - ref) > 1e-6 * mag) FAILF("vnni %.9g vs %.9g", gv, ref);
    } else {
        printf("  (no AVX512_VNNI on this CPU: the AVX2 kernel and the scalar reference)\n");
    }
    double xref = 0; /* and the activation quantization error is small */
    for (int i = 0; i < N; i++) xref += (double)wd[i] * x[i];
    CHECK(fabs(got - xref) < 0.02 * mag);
#endif
}

/* Every quantized type against int8 activations in its form (Q8_0 blocks of
 * 32, or Q8_K blocks of 256 with sums per 16): the scalar reference equals
 * the exact sum of dequantized weights times dequantized activations, and
 * every SIMD family's kernel equals the reference, on random rows and at the
 * edges of the integer ranges (largest codes, scales and activations, where
 * an int16 pair or an int32 super-block sum would overflow if the bounds in
 * dot_avx2.c were wrong). */
static void dequant_act(uint32_t type, const struct kvb_q8_act *a, int64_t n, float *out) {
    const int64_t bs = kvb_act_form(type) == KVB_ACT_Q8_K ? 256 : 32;
    for (int64_t i = 0; i < n; i++) out[i] = a->d[i / bs] * a->q[i];
}


TEST(int8_kernels_equal_reference) {
    enum { N = 2048 };
    static const uint32_t types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q5_K, GGML_TYPE_Q4_1, GGML_TYPE_Q5_1,
                              GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS, GGML_TYPE_MXFP4};
    static float w[N], x[N], wd[N], xd[N], xs[N / 32];
    static int8_t xq[N];
    static int16_t xsum[N / 16];
    static uint8_t row[N * 2];
    const struct kvb_dot_kernels *fams[N_FAMS];
    present_families(fams);
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const uint32_t type = types[ti];
        const kvb_dot_q8_fn ref = kvb_dot_q8_ref(type);
        CHECK(ref != NULL);
        for (int trial = 0; trial < 12; trial++) {
            unsigned long long rs = 1000 + 37 * ti + trial;
            const int64_t n = (trial % 4 + 1) * 512;
            const bool edge = trial >= 10;
            for (int64_t i = 0; i < n; i++) {
                w[i] = t_randf(&rs) * (1 + (float)(i % 61) * 0.05f);
                x[i] = t_randf(&rs) * 3;
                if (edge) { x[i] = trial == 10 ? 1.0f : (i % 2 ? -1.0f : 1.0f); w[i] = i % 3 ? 1.0f : -1.0f; }
            }
            CHECK(kvb_quantize_row(type, w, row, n));
            if (edge && type == GGML_TYPE_Q4_K) /* the largest codes, scales and mins */
                for (int64_t b = 0; b < n / 256; b++) {
                    struct block_q4_K *bk = (struct block_q4_K *)row + b;
                    memset(bk->scales, 0xff, sizeof bk->scales);
                    memset(bk->qs, trial == 10 ? 0xff : 0x0f, sizeof bk->qs);
                }
            if (edge && type == GGML_TYPE_Q5_K) /* the largest codes (31 or 15: qh set or clear), scales and mins */
                for (int64_t b = 0; b < n / 256; b++) {
                    struct block_q5_K *bk = (struct block_q5_K *)row + b;
                    memset(bk->scales, 0xff, sizeof bk->scales);
                    memset(bk->qs, 0xff, sizeof bk->qs);
                    memset(bk->qh, trial == 10 ? 0xff : 0x5a, sizeof bk->qh);
                }
            if (edge && (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1)) /* the largest codes (31: every nibble and qh bit set) */
                for (int64_t b = 0; b < n / 32; b++) {
                    uint8_t *bk = row + (size_t)b * kvb_ggml_type_size(type);
                    memset(bk + 4, trial == 10 ? 0xff : 0x00, kvb_ggml_type_size(type) - 4);
                }
            if (edge && (type == GGML_TYPE_IQ4_NL || type == GGML_TYPE_MXFP4)) /* codes of the largest magnitude (-127, -12) */
                for (int64_t b = 0; b < n / 32; b++) {
                    uint8_t *bk = row + (size_t)b * kvb_ggml_type_size(type);
                    const size_t off = type == GGML_TYPE_MXFP4 ? 1 : 2;
                    memset(bk + off, type == GGML_TYPE_MXFP4 ? 0xff : (trial == 10 ? 0x00 : 0xff), kvb_ggml_type_size(type) - off);
                }
            if (edge && type == GGML_TYPE_IQ4_XS) /* -127 everywhere with ls - 32 = -32, and 113 with 31 */
                for (int64_t b = 0; b < n / 256; b++) {
                    struct block_iq4_xs *bk = (struct block_iq4_xs *)row + b;
                    memset(bk->qs, trial == 10 ? 0x00 : 0xff, sizeof bk->qs);
                    memset(bk->scales_l, trial == 10 ? 0x00 : 0xff, sizeof bk->scales_l);
                    bk->scales_h = trial == 10 ? 0 : 0x5555;
                }
            if (edge && type == GGML_TYPE_Q6_K)
                for (int64_t b = 0; b < n / 256; b++) {
                    struct block_q6_K *bk = (struct block_q6_K *)row + b;
                    memset(bk->ql, trial == 10 ? 0xff : 0x00, sizeof bk->ql);
                    memset(bk->qh, trial == 10 ? 0xff : 0x00, sizeof bk->qh);
                    for (int k = 0; k < 16; k++) bk->scales[k] = (int8_t)(k % 2 ? -128 : 127);
                }
            kvb_dequantize_row(type, row, wd, n);
            const struct kvb_q8_act a = {xs, xq, xsum};
            if (kvb_act_form(type) == KVB_ACT_Q8_K) kvb_quantize_act_q8k(x, n, xs, xq, xsum);
            else kvb_quantize_act_q8(x, n, xs, xq, xsum);
            dequant_act(type, &a, n, xd);
            double exact = 0, mag = 0, unq = 0;
            for (int64_t i = 0; i < n; i++) {
                exact += (double)wd[i] * xd[i];
                mag += fabs((double)wd[i] * xd[i]);
                unq += (double)wd[i] * x[i];
            }
            const double got = ref(row, &a, n);
            if (fabs(got - exact) > 1e-6 * mag + 1e-6)
                FAILF("%s reference n=%lld trial %d: %.9g vs exact %.9g", kvb_ggml_type_name(type), (long long)n, trial, got, exact);
            if (!edge && fabs(got - unq) > 0.02 * mag) /* activation quantization costs little */
                FAILF("%s: int8 activations moved the dot %.6g -> %.6g (magnitude %.6g)", kvb_ggml_type_name(type), unq, got, mag);
            for (int f = 0; f < N_FAMS; f++) {
                if (!fams[f] || !fams[f]->dot_q8[type]) continue;
                const float g = fams[f]->dot_q8[type](row, &a, n);
                if (fabs(g - got) > 1e-5 * mag + 1e-6)
                    FAILF("%s %s n=%lld trial %d: %.9g vs reference %.9g", fams[f]->name, kvb_ggml_type_name(type), (long long)n, trial, g, got);
                if (avx2_twin(fams[f])) { /* avxvnni: avx2's integers by VNNI, so avx2's bits (dot_i8_avx2.h) */
                    const float g2 = avx2_twin(fams[f])->dot_q8[type](row, &a, n);
                    if (memcmp(&g, &g2, sizeof g))
                        FAILF("avxvnni %s n=%lld trial %d: %.9g, avx2 %.9g", kvb_ggml_type_name(type), (long long)n, trial, g, g2);
                }
            }
        }
    }
    if (!fams[0]) printf("  (no SIMD family on this CPU or under this KVB_KERNELS: the references only)\n");
#if defined(__x86_64__)
    if (!kvb_cpu_has_avxvnni()) printf("  (no AVX-VNNI on this CPU: the avxvnni family's bits against avx2's are not compared)\n");
#endif
    CHECK(kvb_dot_q8_ref(GGML_TYPE_F16) == NULL);
    CHECK_EQ_INT(kvb_act_form(GGML_TYPE_Q4_K), KVB_ACT_Q8_K);
    CHECK_EQ_INT(kvb_act_form(GGML_TYPE_Q4_0), KVB_ACT_Q8_0);
    CHECK_EQ_INT(kvb_act_form(GGML_TYPE_Q5_0), KVB_ACT_Q8_0);
    CHECK_EQ_INT(kvb_act_form(GGML_TYPE_Q5_K), KVB_ACT_Q8_K);
    CHECK_EQ_INT(kvb_act_form(GGML_TYPE_Q4_1), KVB_ACT_Q8_0);
    CHECK_EQ_INT(kvb_act_form(GGML_TYPE_Q5_1), KVB_ACT_Q8_0);
    CHECK_EQ_INT(kvb_act_form(GGML_TYPE_IQ4_NL), KVB_ACT_Q8_0);
    CHECK_EQ_INT(kvb_act_form(GGML_TYPE_MXFP4), KVB_ACT_Q8_0);
    CHECK_EQ_INT(kvb_act_form(GGML_TYPE_IQ4_XS), KVB_ACT_Q8_K);
}

/* K-quant tiles (kq_tile: q4_K, q5_K, q6_K rows x several tokens, each
 * block's weights unpacked once for the tile's tokens): every family that
 * has them gives each (row, token) pair of every shape, nr 1 .. kq_tile_rows
 * and nt 1 .. kq_tile_tokens, with and without the prefetch, exactly the
 * bits of its dot_q8 for that pair, within rounding of the scalar
 * reference, on random rows of 1 and 5 blocks, one row at the edges of the
 * integer ranges; and kvb_matmul_decode of N tokens (the tiles) gives each
 * token the bits of N = 1 (the lone dot). */
TEST(kquant_tiles_equal_lone_dot_every_shape) {
    enum { NMAX = 5 * 256, RMAX = KVB_Q8_TILE_ROWS_MAX, TMAX = KVB_Q8_TILE_TOKENS_MAX, LDO = RMAX + 1 };
    static const uint32_t types[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    static float tmp[NMAX], xs[TMAX][NMAX / 32];
    static int8_t xq[TMAX][NMAX];
    static int16_t xsum[TMAX][NMAX / 16];
    static uint8_t rows[RMAX][NMAX]; /* >= any K-type's bytes for NMAX */
    const struct kvb_dot_kernels *fams[N_FAMS];
    present_families(fams);
    CHECK(kvb_dot_ref.kq_tile[GGML_TYPE_Q4_K] == NULL); /* the reference: one pair at a time */
    int tiled = 0;
    unsigned long long rs = 4242;
    struct kvb_q8_act a[TMAX];
    for (int t = 0; t < TMAX; t++) {
        for (int i = 0; i < NMAX; i++) tmp[i] = t_randf(&rs) * 3;
        if (t == 2) for (int i = 0; i < NMAX; i++) tmp[i] = i % 2 ? -1.0f : 1.0f; /* +-127 everywhere */
        kvb_quantize_act_q8k(tmp, NMAX, xs[t], xq[t], xsum[t]);
        a[t] = (struct kvb_q8_act){xs[t], xq[t], xsum[t]};
    }
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const uint32_t type = types[ti];
        const kvb_dot_q8_fn ref = kvb_dot_q8_ref(type);
        for (int r = 0; r < RMAX; r++) {
            for (int i = 0; i < NMAX; i++) tmp[i] = t_randf(&rs) * (1 + (float)((i + r) % 61) * 0.05f);
            CHECK(kvb_quantize_row(type, tmp, rows[r], NMAX));
        }
        /* row 1: the largest codes and scales in its second block */
        uint8_t *bk = rows[1] + kvb_ggml_type_size(type);
        if (type == GGML_TYPE_Q6_K) {
            struct block_q6_K *b6 = (struct block_q6_K *)(void *)bk;
            memset(b6->ql, 0xff, sizeof b6->ql);
            memset(b6->qh, 0xff, sizeof b6->qh);
            for (int k = 0; k < 16; k++) b6->scales[k] = (int8_t)(k % 2 ? -128 : 127);
        } else {
            struct block_q4_K *b4 = (struct block_q4_K *)(void *)bk;
            memset(b4->scales, 0xff, sizeof b4->scales);
            if (type == GGML_TYPE_Q4_K) memset(b4->qs, 0xff, sizeof b4->qs);
            else {
                memset(((struct block_q5_K *)(void *)bk)->qs, 0xff, sizeof b4->qs);
                memset(((struct block_q5_K *)(void *)bk)->qh, 0xff, 32);
            }
        }
        for (int f = 0; f < N_FAMS; f++) {
            const struct kvb_dot_kernels *fam = fams[f];
            if (!fam || !fam->kq_tile[type]) continue;
            tiled++;
            CHECK(fam->kq_tile_rows >= 1 && fam->kq_tile_rows <= KVB_Q8_TILE_ROWS_MAX);
            CHECK(fam->kq_tile_tokens >= 1 && fam->kq_tile_tokens <= KVB_Q8_TILE_TOKENS_MAX);
            const int64_t lens[2] = {256, NMAX};
            for (int li = 0; li < 2; li++)
                for (int nr = 1; nr <= fam->kq_tile_rows; nr++)
                    for (int nt = 1; nt <= fam->kq_tile_tokens; nt++) {
                        const int64_t n = lens[li];
                        const int t0 = (nr + nt) % 3; /* which tokens share the tile varies */
                        float out[TMAX * LDO];
                        for (int i = 0; i < TMAX * LDO; i++) out[i] = NAN;
                        fam->kq_tile[type](rows, sizeof rows[0], nr, a + t0, nt, n, out, LDO, (nr + nt) % 2 == 0);
                        for (int t = 0; t < TMAX; t++)
                            for (int r = 0; r < LDO; r++) {
                                const float o = out[t * LDO + r];
                                if (t >= nt || r >= nr) {
                                    if (!isnan(o)) FAILF("%s %s tile %dx%d wrote (%d,%d) outside itself", fam->name, kvb_ggml_type_name(type), nr, nt, r, t);
                                    continue;
                                }
                                const float one = fam->dot_q8[type](rows[r], &a[t0 + t], n);
                                if (memcmp(&one, &o, sizeof one))
                                    FAILF("%s %s tile %dx%d n=%lld pair (%d,%d): %.9g, lone dot %.9g", fam->name, kvb_ggml_type_name(type), nr, nt,
                                          (long long)n, r, t, o, one);
                                if (avx2_twin(fam)) { /* avxvnni's tiles: avx2's bits */
                                    const float o2 = avx2_twin(fam)->dot_q8[type](rows[r], &a[t0 + t], n);
                                    if (memcmp(&o2, &o, sizeof o))
                                        FAILF("avxvnni %s tile %dx%d pair (%d,%d): %.9g, avx2 %.9g", kvb_ggml_type_name(type), nr, nt, r, t, o, o2);
                                }
                                const double rf = ref(rows[r], &a[t0 + t], n);
                                if (fabs(o - rf) > 1e-4 * (fabs(rf) + 1))
                                    FAILF("%s %s tile pair (%d,%d) vs reference %.9g vs %.9g", fam->name, kvb_ggml_type_name(type), r, t, o, rf);
                            }
                    }
        }
        /* the driver: N tokens through the family in use, each token as N = 1 */
        enum { R = 37, NT = 11 };
        static float x[NT * NMAX], want[NT * R], got[NT * R];
        for (int i = 0; i < NT * NMAX; i++) x[i] = t_randf(&rs) * 2;
        static uint8_t mat[R * NMAX];
        const size_t rb = kvb_ggml_type_size(type) * (NMAX / 256);
        for (int r = 0; r < R; r++) memcpy(mat + (size_t)r * rb, rows[r % RMAX], rb); /* the edge row among them */
        const struct kvb_mat m = {type, NMAX, R, rb, mat};
        static float qd[NT * NMAX / 32];
        static int8_t qq[NT * NMAX];
        static int16_t qsum[NT * NMAX / 16];
        static struct kvb_q8_buf qbuf;
        struct kvb_q8_buf *qb = &qbuf;
        qb->d = qd, qb->q = qq, qb->s = qsum, qb->cap = NT * NMAX;
        for (int t = 0; t < NT; t++) kvb_matmul_decode(NULL, &m, x + (size_t)t * NMAX, NMAX, want + (size_t)t * R, R, 1, qb);
        for (int i = 0; i < NT * R; i++) got[i] = NAN;
        kvb_matmul_decode(NULL, &m, x, NMAX, got, R, NT, qb);
        if (memcmp(want, got, sizeof want)) FAILF("%s: %d decode tokens at once differ from one at a time", kvb_ggml_type_name(type), NT);
    }
    if (!tiled) printf("  (no family with K-quant tiles on this CPU)\n");
}

/* The prefill panel kernel of every family equals kvb_panel_ref bit for
 * bit (the contract: one FMA chain per pair in k order), for full and
 * partial panels, lengths with and without a vector tail and across blocks
 * of k, and token counts on and off each family's tile and group; the reference is within float rounding of
 * a double-precision dot; and packing puts row r's element k at [k][r]
 * with the rows past the panel zero. */
TEST(prefill_panel_equals_reference) {
    const struct kvb_dot_kernels *fams[N_FAMS + 1] = {&kvb_dot_ref, NULL, NULL, NULL, NULL};
    present_families(fams + 1);
    enum { NMAX = 1003, TMAX = 101 }; /* 101 tokens: past the AVX2 panel's group of 96; 1003: four of its k-blocks */
    static float w[KVB_PANEL_ROWS * NMAX], x[TMAX * NMAX], wp[KVB_PANEL_ROWS * NMAX], row[NMAX];
    static float yref[TMAX * KVB_PANEL_ROWS], y[TMAX * KVB_PANEL_ROWS], scratch[KVB_PACK_SCRATCH_ROWS * 1024];
    const int64_t lens[] = {7, 64, 1003};
    const int nrs[] = {32, 17, 5}, nts[] = {1, 5, 6, 7, 12, 13, 27, 101};
    for (size_t li = 0; li < 3; li++)
        for (size_t ri = 0; ri < 3; ri++) {
            const int64_t n = lens[li];
            const int nr = nrs[ri];
            unsigned long long rs = 77 + li * 3 + ri;
            for (int64_t i = 0; i < KVB_PANEL_ROWS * n; i++) w[i] = t_randf(&rs);
            for (int64_t i = 0; i < TMAX * n; i++) x[i] = t_randf(&rs);
            const struct kvb_mat m = {GGML_TYPE_F32, n, KVB_PANEL_ROWS, (size_t)n * 4, (const uint8_t *)w};
            memset(wp, 0x7f, sizeof wp);
            kvb_pack_panel(&m, 0, nr, wp, scratch);
            for (int64_t k = 0; k < n; k++)
                for (int r = 0; r < KVB_PANEL_ROWS; r++)
                    if (wp[k * KVB_PANEL_ROWS + r] != (r < nr ? w[r * n + k] : 0.0f)) FAILF("pack n=%lld: [%lld][%d] wrong", (long long)n, (long long)k, r);
            for (size_t ti = 0; ti < sizeof nts / sizeof *nts; ti++) {
                const int nt = nts[ti];
                memset(yref, 0, sizeof yref);
                kvb_panel_ref(wp, n, x, n, nt, yref, KVB_PANEL_ROWS, nr);
                for (int t = 0; t < nt; t++)
                    for (int r = 0; r < nr; r++) {
                        double ref = 0, mag = 0;
                        for (int64_t i = 0; i < n; i++) { ref += (double)w[r * n + i] * x[t * n + i]; mag += fabs((double)w[r * n + i] * x[t * n + i]); }
                        if (fabs(yref[t * KVB_PANEL_ROWS + r] - ref) > 1e-5 * mag + 1e-7)
                            FAILF("reference n=%lld row %d token %d: %.9g vs %.9g", (long long)n, r, t, yref[t * KVB_PANEL_ROWS + r], ref);
                    }
                for (int f = 0; f < N_FAMS + 1; f++) {
                    if (!fams[f] || !fams[f]->panel) continue;
                    for (size_t i = 0; i < sizeof y / sizeof *y; i++) y[i] = -1.0f; /* untouched past nr */
                    fams[f]->panel(wp, n, x, n, nt, y, KVB_PANEL_ROWS, nr);
                    for (int t = 0; t < nt; t++)
                        for (int r = 0; r < KVB_PANEL_ROWS; r++) {
                            const float want = r < nr ? yref[t * KVB_PANEL_ROWS + r] : -1.0f, got = y[t * KVB_PANEL_ROWS + r];
                            if (memcmp(&want, &got, sizeof got))
                                FAILF("%s panel n=%lld nr=%d nt=%d row %d token %d: %.9g, the reference %.9g", fams[f]->name, (long long)n, nr, nt,
                                      r, t, got, want);
                        }
                }
            }
        }
    if (!fams[1]) printf("  (no SIMD family on this CPU or under this KVB_KERNELS: the reference only)\n");
    (void)row;
}

/* Rows longer than a panel holds (16384: a dense FFN's down projection of
 * n_ff 18432, DeepSeek-V3's) go through the prefill panels in spans, the
 * later spans' products added: a prompt's values are within rounding of a
 * double-precision dot for q8_0, q4_K and f16 weights, through kvb_matmul
 * and kvb_matmul_chunks (chunks of 5, 63 and 2 tokens) alike, and the two
 * give the same bits. */
TEST(prefill_rows_longer_than_a_panel) {
    enum { N = 16384 + 2048 + 256, R = 37, T = 70 };
    static const uint32_t types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_F16};
    float *wf = malloc(sizeof(float) * (size_t)N * R), *x = malloc(sizeof(float) * (size_t)N * T), *deq = malloc(sizeof(float) * N);
    float *y = malloc(sizeof(float) * (size_t)T * R), *yc = malloc(sizeof(float) * (size_t)T * R);
    unsigned long long rs = 4242;
    for (size_t i = 0; i < (size_t)N * R; i++) wf[i] = t_randf(&rs);
    for (size_t i = 0; i < (size_t)N * T; i++) x[i] = t_randf(&rs);
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const size_t rb = kvb_ggml_row_size(types[ti], N);
        uint8_t *q = malloc(rb * R);
        for (int r = 0; r < R; r++) kvb_quantize_row(types[ti], wf + (size_t)r * N, q + (size_t)r * rb, N);
        const struct kvb_mat m = {types[ti], N, R, rb, q};
        kvb_matmul(NULL, &m, x, N, y, R, T);
        const int32_t cr0[] = {0, 5, 68}, cT[] = {5, 63, 2};
        kvb_matmul_chunks(NULL, &m, x, N, yc, R, cr0, cT, 3);
        if (memcmp(y, yc, sizeof(float) * (size_t)T * R)) FAILF("%s: kvb_matmul and kvb_matmul_chunks differ", kvb_ggml_type_name(types[ti]));
        for (int r = 0; r < R; r++) {
            kvb_dequantize_row(types[ti], q + (size_t)r * rb, deq, N);
            for (int t = 0; t < T; t++) {
                double ref = 0, mag = 0;
                for (int i = 0; i < N; i++) { ref += (double)deq[i] * x[(size_t)t * N + i]; mag += fabs((double)deq[i] * x[(size_t)t * N + i]); }
                if (fabs(y[(size_t)t * R + r] - ref) > 1e-5 * mag + 1e-6)
                    FAILF("%s row %d token %d: %.9g, a double dot %.9g", kvb_ggml_type_name(types[ti]), r, t, y[(size_t)t * R + r], ref);
            }
        }
        free(q);
    }
    free(wf), free(x), free(deq), free(y), free(yc);
}

/* Every family's panel packing gives kvb_pack_panel's floats (the values of
 * kvb_dequantize_row, k-major, zero past the panel's rows) for every weight
 * type, full and partial panels, with and without a column tail. */
TEST(panel_packing_equals_reference) {
    const struct kvb_dot_kernels *fams[N_FAMS];
    present_families(fams);
    enum { N = 512, ROWS = 40 };
    static float src[ROWS * N], want[KVB_PANEL_ROWS * N], got[KVB_PANEL_ROWS * N], scratch[KVB_PACK_SCRATCH_ROWS * N];
    static uint8_t q[ROWS * N * 4];
    const uint32_t types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K,
                              GGML_TYPE_Q5_K, GGML_TYPE_Q4_1, GGML_TYPE_Q5_1,
                              GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS, GGML_TYPE_MXFP4};
    unsigned long long rs = 4242;
    for (int i = 0; i < ROWS * N; i++) src[i] = t_randf(&rs) * 2;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const uint32_t type = types[ti];
        const int64_t lens[] = {N, 61};
        for (int li = 0; li < 2; li++) {
            const int64_t n = lens[li];
            if (type != GGML_TYPE_F32 && type != GGML_TYPE_F16 && type != GGML_TYPE_BF16 && n != N) continue; /* whole blocks */
            const size_t rb = kvb_ggml_type_size(type) * (size_t)(n / kvb_ggml_blck_size(type));
            for (int r = 0; r < ROWS; r++) CHECK(kvb_quantize_row(type, src + (size_t)r * N, q + (size_t)r * rb, n));
            const struct kvb_mat m = {type, n, ROWS, rb, q};
            const int cases[][2] = {{0, 32}, {8, 32}, {3, 29}, {35, 5}, {0, 1}};
            for (int c = 0; c < 5; c++) {
                kvb_pack_panel(&m, cases[c][0], cases[c][1], want, scratch);
                for (int f = 0; f < N_FAMS; f++) {
                    if (!fams[f] || !fams[f]->pack) continue;
                    memset(got, 0x5a, sizeof got);
                    fams[f]->pack(&m, cases[c][0], cases[c][1], got, scratch);
                    if (memcmp(got, want, sizeof(float) * KVB_PANEL_ROWS * (size_t)n))
                        FAILF("%s packing of %s n=%lld rows %d+%d differs from the reference", fams[f]->name, kvb_ggml_type_name(type), (long long)n,
                              cases[c][0], cases[c][1]);
                }
            }
        }
    }
}

/* Room for the int8 activations of up to 16 decode tokens of 512. */
static struct kvb_q8_buf *decode_q8_buf(void) {
    enum { N = 512, TOK = 16 };
    static float qd[TOK * N / 32 + 1];
    static int8_t qq[TOK * N];
    static int16_t qs[TOK * N / 16 + 1];
    static struct kvb_q8_buf qb;
    qb.d = qd, qb.q = qq, qb.s = qs, qb.cap = TOK * N;
    return &qb;
}

/* kvb_matmul_decode_group (q/k/v and gate/up in one threadpool run, the
 * activations quantized once): each matrix's outputs equal kvb_matmul_decode
 * of it alone bit for bit, for matrices sharing an int8 form (Q8_0 tiles;
 * q4_K with q6_K), for mixed forms (each its own) and for float matrices, at
 * 1, 3 and 16 tokens, with two threads. */
TEST(decode_group_equals_single_matrices) {
    enum { N = 512, TOK = 16, MAXR = 96 };
    static float x[TOK * N], src[MAXR * N], want[TOK * (MAXR + 3)], got[4][TOK * (MAXR + 3)];
    static uint8_t q[4][MAXR * N * 4];
    struct kvb_q8_buf *qb = decode_q8_buf();
    struct kvb_threadpool *tp;
    CHECK_OK(kvb_threadpool_init(2, &tp));
    unsigned long long rs = 99;
    for (int i = 0; i < TOK * N; i++) x[i] = t_randf(&rs) * 3;
    for (int i = 0; i < MAXR * N; i++) src[i] = t_randf(&rs);
    const struct { int n; uint32_t type[3]; int64_t rows[3]; } groups[] = {
        {3, {GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, GGML_TYPE_Q8_0}, {96, 40, 40}},
        {2, {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, 0}, {64, 33, 0}},
        {2, {GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, 0}, {64, 32, 0}},
        {2, {GGML_TYPE_F16, GGML_TYPE_F32, 0}, {64, 30, 0}},
    };
    const int32_t toks[] = {1, 3, TOK};
    for (size_t g = 0; g < sizeof groups / sizeof *groups; g++) {
        struct kvb_mat m[3];
        const struct kvb_mat *w[3];
        for (int i = 0; i < groups[g].n; i++) {
            const uint32_t type = groups[g].type[i];
            const size_t rb = kvb_ggml_type_size(type) * (size_t)(N / kvb_ggml_blck_size(type));
            for (int64_t r = 0; r < groups[g].rows[i]; r++) CHECK(kvb_quantize_row(type, src + (size_t)r * N, q[i] + (size_t)r * rb, N));
            m[i] = (struct kvb_mat){type, N, groups[g].rows[i], rb, q[i]};
            w[i] = &m[i];
        }
        for (int ti = 0; ti < 3; ti++) {
            float *y[3] = {got[0], got[1], got[2]};
            const int64_t ld[3] = {MAXR + 1, MAXR, MAXR + 3}; /* strides of their own */
            kvb_matmul_decode_group(tp, w, groups[g].n, x, N, y, ld, toks[ti], qb);
            for (int i = 0; i < groups[g].n; i++) {
                kvb_matmul_decode(tp, w[i], x, N, want, ld[i], toks[ti], qb);
                for (int32_t t = 0; t < toks[ti]; t++)
                    if (memcmp(want + (size_t)t * ld[i], got[i] + (size_t)t * ld[i], sizeof(float) * (size_t)groups[g].rows[i]))
                        FAILF("group %zu, matrix %d (%s), %d tokens: token %d differs from the matrix alone", g, i,
                              kvb_ggml_type_name(groups[g].type[i]), (int)toks[ti], (int)t);
            }
        }
    }
    kvb_threadpool_free(tp);
}

/* Batched decode shares a matrix's rows out in chunks (each thread its own
 * share first, then the others'): at any thread count, with more threads
 * than cores (so some fall behind and their chunks are taken), every row of
 * every token is written, with the bits one thread gives. y starts as NaN, so
 * a chunk no thread took fails; 17 threads run the fixed split instead. */
TEST(decode_rows_shared_over_threads_cover_every_row) {
    enum { N = 512, TOK = 16, R = 1000 };
    static float x[TOK * N], src[R * N], want[3][TOK * R], got[3][TOK * R];
    static uint8_t q[3][R * N * 4];
    struct kvb_q8_buf *qb = decode_q8_buf();
    unsigned long long rs = 7;
    for (int i = 0; i < TOK * N; i++) x[i] = t_randf(&rs) * 3;
    for (int i = 0; i < R * N; i++) src[i] = t_randf(&rs);
    const uint32_t types[3] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q8_0};
    const int64_t rows[3] = {R, 301, 77}; /* not multiples of a chunk */
    struct kvb_mat m[3];
    const struct kvb_mat *w[3];
    for (int i = 0; i < 3; i++) {
        const size_t rb = kvb_ggml_type_size(types[i]) * (size_t)(N / kvb_ggml_blck_size(types[i]));
        for (int64_t r = 0; r < rows[i]; r++) CHECK(kvb_quantize_row(types[i], src + (size_t)r * N, q[i] + (size_t)r * rb, N));
        m[i] = (struct kvb_mat){types[i], N, rows[i], rb, q[i]};
        w[i] = &m[i];
    }
    const int32_t toks[] = {2, 5, TOK};
    struct kvb_threadpool *one;
    CHECK_OK(kvb_threadpool_init(1, &one));
    for (int ti = 0; ti < 3; ti++) {
        for (int i = 0; i < 3; i++) kvb_matmul_decode(one, w[i], x, N, want[i], R, toks[ti], qb);
        const int nths[] = {2, 3, 5, 17};
        for (int k = 0; k < 4; k++) {
            struct kvb_threadpool *tp;
            CHECK_OK(kvb_threadpool_init(nths[k], &tp));
            for (int rep = 0; rep < 3; rep++) {
                for (int i = 0; i < 3; i++)
                    for (size_t e = 0; e < (size_t)TOK * R; e++) got[i][e] = NAN;
                if (rep == 2) { /* the two Q8_0 matrices as one group (rows laid end to end); Q4_K, another int8 form, alone */
                    float *y[3] = {got[0], got[1], got[2]};
                    const int64_t ld[3] = {R, R, R};
                    kvb_matmul_decode_group(tp, (const struct kvb_mat *const[]){w[0], w[2]}, 2, x, N, (float *const[]){y[0], y[2]}, ld,
                                            toks[ti], qb);
                    kvb_matmul_decode(tp, w[1], x, N, got[1], R, toks[ti], qb);
                } else
                    for (int i = 0; i < 3; i++) kvb_matmul_decode(tp, w[i], x, N, got[i], R, toks[ti], qb);
                for (int i = 0; i < 3; i++)
                    for (int32_t t = 0; t < toks[ti]; t++)
                        for (int64_t r = 0; r < rows[i]; r++)
                            if (memcmp(&want[i][(size_t)t * R + r], &got[i][(size_t)t * R + r], sizeof(float))) {
                                FAILF("%d threads, %d tokens, %s rows %lld: (row %lld, token %d) = %.9g, one thread %.9g", nths[k],
                                      (int)toks[ti], kvb_ggml_type_name(types[i]), (long long)rows[i], (long long)r, (int)t,
                                      got[i][(size_t)t * R + r], want[i][(size_t)t * R + r]);
                                r = rows[i];
                                t = toks[ti];
                            }
            }
            kvb_threadpool_free(tp);
        }
    }
    kvb_threadpool_free(one);
}

/* Every family's activation quantizer gives the reference's scale and int8
 * codes bit for bit: random blocks, ties (amax 127: the quotients are the
 * inputs, so x.5 rounds to even), zeros, NaNs, infinities, subnormals,
 * signed zeros and the float range's ends; and the reference itself rounds
 * ties to even and maps a NaN to 0. */
TEST(activation_quantization_equals_reference) {
    enum { LEN = 256 };
    static float x[LEN];
    const struct kvb_dot_kernels *fams[N_FAMS];
    present_families(fams);
    int checked = 0;
    for (int trial = 0; trial < 40; trial++) {
        unsigned long long rs = 77 + (unsigned long long)trial;
        const int len = trial % 2 ? 256 : 32;
        for (int i = 0; i < len; i++) {
            x[i] = t_randf(&rs) * (trial % 5 == 0 ? 1e-3f : 40.0f);
            switch (trial / 4) {
            case 1: x[i] = (float)((i % 21) - 10) + 0.5f; x[len / 2] = 127.0f; break; /* ties */
            case 2: x[i] = 0.0f; if (i % 3 == 0) x[i] = -0.0f; break;
            case 3: if (i % 7 == 3) x[i] = NAN; break;
            case 4: if (i == 5) x[i] = INFINITY; if (i == 9) x[i] = -INFINITY; break;
            case 5: x[i] *= 1e-40f; break; /* subnormal */
            case 6: x[i] = i % 2 ? 3.4e38f : -3.4e38f * t_randf(&rs); break;
            case 7: if (i == len - 1) x[i] = NAN; x[0] = -1e30f; break;
            default: break;
            }
        }
        float dr;
        int8_t qr[LEN];
        kvb_quant_block_ref(x, len, &dr, qr);
        if (trial / 4 == 1) /* amax 127: d = 1 and q = x rounded half to even */
            for (int i = 0; i < len; i++) {
                const float want = nearbyintf(x[i]);
                if (dr != 1.0f || qr[i] != (int8_t)want) FAILF("trial %d: ref %g -> %d (d %g), want %g", trial, (double)x[i], qr[i], (double)dr, (double)want);
            }
        if (trial / 4 == 3)
            for (int i = 0; i < len; i++)
                if (isnan(x[i]) && qr[i] != 0) FAILF("trial %d: a NaN quantized to %d", trial, qr[i]);
        for (int f = 0; f < N_FAMS; f++) {
            if (!fams[f] || !fams[f]->quant_block) continue;
            float dg = -1;
            int8_t qg[LEN];
            fams[f]->quant_block(x, len, &dg, qg);
            if (memcmp(&dg, &dr, sizeof dr) != 0) FAILF("%s trial %d: scale %.9g vs reference %.9g", fams[f]->name, trial, (double)dg, (double)dr);
            for (int i = 0; i < len; i++)
                if (qg[i] != qr[i]) FAILF("%s trial %d: element %d (%g): %d vs reference %d", fams[f]->name, trial, i, (double)x[i], qg[i], qr[i]);
            checked++;
        }
    }
    /* the whole-row forms too: 2048 activations through the family equal the reference */
    static float xr[2048], d1[2048 / 32], d2[2048 / 32];
    static int8_t q1[2048], q2[2048];
    static int16_t s1[2048 / 16], s2[2048 / 16];
    unsigned long long rs = 9;
    for (int i = 0; i < 2048; i++) xr[i] = t_randf(&rs) * 5;
    for (int f = 0; f < N_FAMS; f++) {
        if (!fams[f]) continue;
        kvb_quantize_act_q8(xr, 2048, d1, q1, s1);
        kvb_quantize_act_q8_with(fams[f], xr, 2048, d2, q2, s2);
        CHECK(memcmp(d1, d2, sizeof d1) == 0 && memcmp(q1, q2, sizeof q1) == 0 && memcmp(s1, s2, 2048 / 32 * sizeof *s1) == 0);
        kvb_quantize_act_q8k(xr, 2048, d1, q1, s1);
        kvb_quantize_act_q8k_with(fams[f], xr, 2048, d2, q2, s2);
        CHECK(memcmp(d1, d2, 2048 / 256 * sizeof *d1) == 0 && memcmp(q1, q2, sizeof q1) == 0 && memcmp(s1, s2, sizeof s1) == 0);
    }
    if (!checked) printf("  (no SIMD family on this CPU: the reference's own rules checked)\n");
}

/* The ARM families (src/ops/arm/dot_arm.h) give the scalar integer
 * references' bits: each block's integer sum exact (SMULL/SADALP, SDOT or
 * SMMLA), then scaled and summed in double in block order. Every int8 dot
 * of q8_0, q4_0, q4_K, q6_K, q5_0, q4_1, q5_1, iq4_nl, mxfp4, q5_K and
 * iq4_xs, on random rows and at the ends of the code ranges (q8_0's -128
 * and 127, q4_K's and q5_K's largest codes, scales and mins, q6_K's -32 and
 * 31 with scales -128 and 127, iq4_xs's -127 and 113 with scales 31 and -32,
 * the others' codes all 0 or all largest), every shape of a family's Q8_0
 * tile (dotprod's SDOT, i8mm's SMMLA) and of its K-quant tiles (dotprod's and i8mm's SDOT;
 * a 1-row tile on the edge row), equal the reference to the bit. x86: skipped (its
 * families' contract is the reference within float rounding). */
TEST(arm_int8_dots_and_tiles_are_the_reference_bits) {
#if defined(__aarch64__)
    enum { N = 1024, LDO = KVB_Q8_TILE_ROWS_MAX + 1 };
    static const uint32_t types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q5_0,
                                     GGML_TYPE_Q4_1, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL, GGML_TYPE_MXFP4, GGML_TYPE_Q5_K, GGML_TYPE_IQ4_XS};
    static float w[N], x[N], xs[KVB_Q8_TILE_TOKENS_MAX][N / 32];
    static int8_t xq[KVB_Q8_TILE_TOKENS_MAX][N];
    static int16_t xsum[KVB_Q8_TILE_TOKENS_MAX][N / 16];
    static uint8_t rows[KVB_Q8_TILE_ROWS_MAX][N * 2];
    const struct kvb_dot_kernels *fams[N_FAMS];
    present_families(fams);
    if (!fams[0]) SKIP_CASE("KVB_KERNELS=ref: no ARM family to compare");
    int checked = 0, tiles = 0, ktiles = 0;
    unsigned long long rs = 909;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const uint32_t type = types[ti];
        const size_t rb = kvb_ggml_type_size(type) * (size_t)(N / kvb_ggml_blck_size(type));
        struct kvb_q8_act a[KVB_Q8_TILE_TOKENS_MAX];
        for (int t = 0; t < KVB_Q8_TILE_TOKENS_MAX; t++) {
            for (int i = 0; i < N; i++) x[i] = t == 1 ? (i % 2 ? -1.0f : 1.0f) : t_randf(&rs) * 3; /* token 1: +-127 everywhere */
            if (kvb_act_form(type) == KVB_ACT_Q8_K) kvb_quantize_act_q8k(x, N, xs[t], xq[t], xsum[t]);
            else kvb_quantize_act_q8(x, N, xs[t], xq[t], xsum[t]);
            a[t] = (struct kvb_q8_act){xs[t], xq[t], xsum[t]};
        }
        for (int r = 0; r < KVB_Q8_TILE_ROWS_MAX; r++) {
            for (int i = 0; i < N; i++) w[i] = t_randf(&rs) * (1 + (float)((i + r) % 61) * 0.05f);
            CHECK(kvb_quantize_row(type, w, rows[r], N));
        }
        /* row 1: the ends of the ranges */
        if (type == GGML_TYPE_Q8_0)
            for (int b = 0; b < N / 32; b++)
                for (int k = 0; k < 32; k++) ((struct block_q8_0 *)rows[1])[b].qs[k] = (int8_t)(k % 2 ? -128 : 127);
        if (type == GGML_TYPE_Q4_0) memset(rows[1] + 2, 0xff, 16);
        if (type == GGML_TYPE_Q4_K) {
            struct block_q4_K *bk = (struct block_q4_K *)rows[1];
            memset(bk->scales, 0xff, sizeof bk->scales);
            memset(bk->qs, 0xff, sizeof bk->qs);
        }
        if (type == GGML_TYPE_Q6_K) {
            struct block_q6_K *bk = (struct block_q6_K *)rows[1];
            memset(bk->ql, 0xff, sizeof bk->ql);
            memset(bk->qh, 0xff, sizeof bk->qh);
            memset(bk[1].ql, 0x00, sizeof bk->ql);
            memset(bk[1].qh, 0x00, sizeof bk->qh);
            for (int k = 0; k < 16; k++) bk->scales[k] = bk[1].scales[k] = (int8_t)(k % 2 ? -128 : 127);
        }
        if (type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1 || type == GGML_TYPE_IQ4_NL || type == GGML_TYPE_MXFP4) {
            const size_t bs = kvb_ggml_type_size(type), off = type == GGML_TYPE_MXFP4 ? 1 : (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1) ? 4 : 2;
            for (size_t b = 0; b < rb / bs; b++) memset(rows[1] + b * bs + off, b % 2 ? 0xff : 0x00, bs - off); /* every code largest, or 0 */
        }
        if (type == GGML_TYPE_Q5_K) { /* the largest codes (31), scales and mins */
            struct block_q5_K *bk = (struct block_q5_K *)rows[1];
            memset(bk->scales, 0xff, sizeof bk->scales);
            memset(bk->qs, 0xff, sizeof bk->qs);
            memset(bk->qh, 0xff, sizeof bk->qh);
        }
        if (type == GGML_TYPE_IQ4_XS) { /* -127 everywhere (ls 31: scale -1), then 113 everywhere with scale -32 */
            struct block_iq4_xs *bk = (struct block_iq4_xs *)rows[1];
            memset(bk->qs, 0x00, sizeof bk->qs);
            memset(bk->scales_l, 0xff, sizeof bk->scales_l);
            bk->scales_h = 0x5555;
            memset(bk[1].qs, 0xff, sizeof bk->qs);
            memset(bk[1].scales_l, 0x00, sizeof bk->scales_l);
            bk[1].scales_h = 0;
        }
        const kvb_dot_q8_fn ref = kvb_dot_q8_ref(type);
        for (int f = 0; f < N_FAMS; f++) {
            if (!fams[f]) continue;
            for (int r = 0; r < 4; r++)
                for (int t = 0; t < 3; t++) {
                    const float want = ref(rows[r], &a[t], N), got = fams[f]->dot_q8[type](rows[r], &a[t], N);
                    if (memcmp(&want, &got, sizeof want))
                        FAILF("%s %s row %d token %d: %.9g, the reference %.9g", fams[f]->name, kvb_ggml_type_name(type), r, t, got, want);
                    checked++;
                }
            const kvb_q8_tile_fn kq = fams[f]->kq_tile[type];
            if (kq) /* K-quant tiles (the SDOT families): every shape, each pair the reference's bits, the edge row in each */
                for (int nr = 1; nr <= fams[f]->kq_tile_rows; nr++)
                    for (int nt = 1; nt <= fams[f]->kq_tile_tokens; nt++) {
                        float out[KVB_Q8_TILE_TOKENS_MAX * LDO];
                        for (int i = 0; i < KVB_Q8_TILE_TOKENS_MAX * LDO; i++) out[i] = NAN;
                        const int r0 = nr > 1 ? 0 : 1; /* rows r0.., tokens 0.. (token 1: +-127) */
                        kq(rows[r0], sizeof rows[0], nr, a, nt, N, out, LDO, nt % 2 == 0);
                        for (int t = 0; t < KVB_Q8_TILE_TOKENS_MAX; t++)
                            for (int r = 0; r < LDO; r++) {
                                const float g = out[t * LDO + r];
                                if (t >= nt || r >= nr) {
                                    if (!isnan(g)) FAILF("%s %s tile %dx%d wrote (%d,%d) outside itself", fams[f]->name, kvb_ggml_type_name(type), nr, nt, r, t);
                                    continue;
                                }
                                const float want = ref(rows[r0 + r], &a[t], N);
                                if (memcmp(&want, &g, sizeof g))
                                    FAILF("%s %s tile %dx%d pair (%d,%d): %.9g, the reference %.9g", fams[f]->name, kvb_ggml_type_name(type), nr, nt,
                                          r, t, g, want);
                            }
                        ktiles++;
                    }
            if (type != GGML_TYPE_Q8_0 || !fams[f]->q8_tile) continue;
            for (int nr = 1; nr <= fams[f]->q8_tile_rows; nr++)
                for (int nt = 1; nt <= fams[f]->q8_tile_tokens; nt++) {
                    float out[KVB_Q8_TILE_TOKENS_MAX * LDO];
                    for (int i = 0; i < KVB_Q8_TILE_TOKENS_MAX * LDO; i++) out[i] = NAN;
                    fams[f]->q8_tile(rows, sizeof rows[0], nr, a, nt, N - 32, out, LDO, nt % 2 == 1);
                    for (int t = 0; t < KVB_Q8_TILE_TOKENS_MAX; t++)
                        for (int r = 0; r < LDO; r++) {
                            const float g = out[t * LDO + r];
                            if (t >= nt || r >= nr) {
                                if (!isnan(g)) FAILF("%s tile %dx%d wrote (%d,%d) outside itself", fams[f]->name, nr, nt, r, t);
                                continue;
                            }
                            const float want = ref(rows[r], &a[t], N - 32);
                            if (memcmp(&want, &g, sizeof g))
                                FAILF("%s tile %dx%d pair (%d,%d): %.9g, the reference %.9g", fams[f]->name, nr, nt, r, t, g, want);
                        }
                    tiles++;
                }
        }
    }
    CHECK(checked > 0);
    CHECK(tiles > 0 || !fams[1]); /* dotprod and i8mm have a Q8_0 tile */
    CHECK(ktiles > 0 || !fams[1]); /* dotprod and i8mm have K-quant tiles */
#else
    SKIP_CASE("not an AArch64 build (make test-aarch64 runs it under qemu)");
#endif
}

int main(void) {
    RUN(q8_activation_kernel_exact);
    RUN(int8_kernels_equal_reference);
    RUN(kquant_tiles_equal_lone_dot_every_shape);
    RUN(activation_quantization_equals_reference);
    RUN(hand_built_blocks);
    RUN(round_trip_error_per_type);
    RUN(q8_0_codes_round_to_nearest);
    RUN(simd_dot_equals_reference);
    RUN(prefill_panel_equals_reference);
    RUN(prefill_rows_longer_than_a_panel);
    RUN(panel_packing_equals_reference);
    RUN(decode_group_equals_single_matrices);
    RUN(decode_rows_shared_over_threads_cover_every_row);
    RUN(arm_int8_dots_and_tiles_are_the_reference_bits);
    return test_summary();
}
