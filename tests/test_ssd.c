/*
 * test_ssd.c — the Mamba-2 scan kernels (src/ops/ssd.h): the recurrent and
 * the chunked (SSD) form against a float64 recurrence written here, over
 * prompts that cross several chunks and end in a short one, from a nonzero
 * state; T split into calls (the recurrent form bit for bit, the chunked
 * one within rounding); zero tokens change nothing. State rows live apart
 * (reversed order, sentinels between them), strides are wider than rows,
 * and no kernel writes outside its rows.
 */
#include "testing.h"
#include "ops/ssd.h"
#include "ops/dispatch.h"

#include <stdbool.h>

#define SENT 12345.0f
#define GAP 8

struct head {
    int P, N, T;
    int64_t ldx, ldbc, lddt, ldy;
    float A, D;
    float *x, *B, *C, *dt, *S0; /* S0: P x N */
};

static struct head make_head(int P, int N, int T, unsigned long long seed) {
    struct head h = {P, N, T, P + 3, N + 5, 3, P + GAP, 0, 0, NULL, NULL, NULL, NULL, NULL};
    unsigned long long s = seed;
    const int Tn = T > 0 ? T : 1;
    h.x = calloc((size_t)Tn * h.ldx, sizeof(float));
    h.B = calloc((size_t)Tn * h.ldbc, sizeof(float));
    h.C = calloc((size_t)Tn * h.ldbc, sizeof(float));
    h.dt = calloc((size_t)Tn * h.lddt, sizeof(float));
    h.S0 = calloc((size_t)P * N, sizeof(float));
    h.A = -0.2f - 0.3f * (t_randf(&s) + 1.0f);
    h.D = 1.0f + 0.5f * t_randf(&s);
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < P; i++) h.x[t * h.ldx + i] = t_randf(&s);
        for (int n = 0; n < N; n++) h.B[t * h.ldbc + n] = t_randf(&s), h.C[t * h.ldbc + n] = t_randf(&s);
        h.dt[t * h.lddt] = 0.05f + 0.1f * (t_randf(&s) + 1.0f); /* softplus'd: > 0; decays e^(dt A) near 0.8..0.99 (long memory) */
    }
    for (int i = 0; i < P * N; i++) h.S0[i] = 0.5f * t_randf(&s);
    return h;
}

static void free_head(struct head *h) { free(h->x), free(h->B), free(h->C), free(h->dt), free(h->S0); }

struct state {
    int P, N;
    float *buf, **rows;
};

static struct state make_state(const struct head *h) {
    struct state st = {h->P, h->N, malloc((size_t)h->P * (h->N + GAP) * sizeof(float)), malloc((size_t)h->P * sizeof(float *))};
    for (int i = 0; i < h->P * (h->N + GAP); i++) st.buf[i] = SENT;
    for (int i = 0; i < h->P; i++) {
        st.rows[i] = st.buf + (size_t)(h->P - 1 - i) * (h->N + GAP);
        memcpy(st.rows[i], h->S0 + (size_t)i * h->N, (size_t)h->N * sizeof(float));
    }
    return st;
}

static bool intact(const struct state *st, const struct head *h, const float *y) {
    for (int r = 0; r < st->P; r++)
        for (int j = st->N; j < st->N + GAP; j++)
            if (st->buf[(size_t)r * (st->N + GAP) + j] != SENT) return false;
    for (int t = 0; t < h->T; t++)
        for (int64_t j = h->P; j < h->ldy; j++)
            if (y[t * h->ldy + j] != SENT) return false;
    return true;
}

static float *make_out(const struct head *h) {
    const int Tn = h->T > 0 ? h->T : 1;
    float *y = malloc((size_t)Tn * h->ldy * sizeof(float));
    for (int64_t i = 0; i < Tn * h->ldy; i++) y[i] = SENT;
    return y;
}

/* The float64 recurrence: y (T x P) and the final state (P x N). */
static void ref64(const struct head *h, double *y, double *S) {
    for (int i = 0; i < h->P * h->N; i++) S[i] = h->S0[i];
    for (int t = 0; t < h->T; t++) {
        const double d = h->dt[t * h->lddt], dA = exp(d * h->A);
        for (int i = 0; i < h->P; i++) {
            double acc = 0;
            for (int n = 0; n < h->N; n++) {
                double *s = &S[(size_t)i * h->N + n];
                *s = *s * dA + d * h->x[t * h->ldx + i] * h->B[t * h->ldbc + n];
                acc += *s * h->C[t * h->ldbc + n];
            }
            y[(size_t)t * h->P + i] = acc + h->D * h->x[t * h->ldx + i];
        }
    }
}

/* max |engine - float64| over y and the final state, relative to the largest |float64| value. */
static double rel_err(const struct head *h, const float *y, const struct state *st, const double *ry, const double *rS) {
    double e = 0, m = 1e-30;
    for (int t = 0; t < h->T; t++)
        for (int i = 0; i < h->P; i++) {
            e = fmax(e, fabs(y[t * h->ldy + i] - ry[(size_t)t * h->P + i]));
            m = fmax(m, fabs(ry[(size_t)t * h->P + i]));
        }
    for (int i = 0; i < h->P; i++)
        for (int n = 0; n < h->N; n++) {
            e = fmax(e, fabs(st->rows[i][n] - rS[(size_t)i * h->N + n]));
            m = fmax(m, fabs(rS[(size_t)i * h->N + n]));
        }
    return e / m;
}

static float *g_scratch;

/* One head over T tokens in calls of `split` tokens (0: one call), the chunked form or the recurrent one. */
static void run(const struct head *h, struct state *st, float *y, bool chunked, int split) {
    const int step = split > 0 ? split : (h->T > 0 ? h->T : 1);
    for (int t0 = 0; t0 < h->T || (h->T == 0 && t0 == 0); t0 += step) {
        const int n = h->T - t0 < step ? h->T - t0 : step;
        if (chunked)
            kvb_ssd_chunked(st->rows, h->P, h->N, n, h->x + t0 * h->ldx, h->ldx, h->B + t0 * h->ldbc, h->C + t0 * h->ldbc, h->ldbc,
                            h->dt + t0 * h->lddt, h->lddt, h->A, h->D, y + t0 * h->ldy, h->ldy, g_scratch);
        else
            kvb_ssd_recurrent(st->rows, h->P, h->N, n, h->x + t0 * h->ldx, h->ldx, h->B + t0 * h->ldbc, h->C + t0 * h->ldbc, h->ldbc,
                              h->dt + t0 * h->lddt, h->lddt, h->A, h->D, y + t0 * h->ldy, h->ldy);
        if (h->T == 0) break;
    }
}

static void check_form(bool chunked, int split) {
    static const int shapes[][3] = {{16, 16, 1}, {16, 16, 5}, {8, 32, 64}, {16, 16, 65}, {64, 128, 150}, {4, 8, 200}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        struct head h = make_head(shapes[c][0], shapes[c][1], shapes[c][2], 7 + c);
        struct state st = make_state(&h);
        float *y = make_out(&h);
        double *ry = malloc(sizeof(double) * (size_t)h.T * h.P), *rS = malloc(sizeof(double) * (size_t)h.P * h.N);
        ref64(&h, ry, rS);
        run(&h, &st, y, chunked, split);
        const double e = rel_err(&h, y, &st, ry, rS);
        const bool ok = e < 2e-5 && intact(&st, &h, y);
        if (!ok) printf("  P %d N %d T %d split %d: relative error %.3g%s\n", h.P, h.N, h.T, split, e, intact(&st, &h, y) ? "" : ", wrote outside its rows");
        free(ry), free(rS), free(y), free(st.buf), free(st.rows), free_head(&h);
        if (!ok) FAILF("%s form against the float64 recurrence", chunked ? "chunked" : "recurrent");
    }
}

TEST(recurrent_matches_float64_recurrence) { check_form(false, 0); }
TEST(chunked_matches_float64_recurrence_across_chunks) { check_form(true, 0); }
TEST(chunked_in_calls_of_7_carries_the_state) { check_form(true, 7); }

TEST(recurrent_split_into_calls_is_bit_identical) {
    struct head h = make_head(16, 32, 70, 99);
    struct state a = make_state(&h), b = make_state(&h);
    float *ya = make_out(&h), *yb = make_out(&h);
    run(&h, &a, ya, false, 0);
    run(&h, &b, yb, false, 3);
    CHECK(!memcmp(ya, yb, sizeof(float) * (size_t)h.T * h.ldy));
    CHECK(!memcmp(a.buf, b.buf, sizeof(float) * (size_t)h.P * (h.N + GAP)));
    free(ya), free(yb), free(a.buf), free(a.rows), free(b.buf), free(b.rows), free_head(&h);
}

/* Every family this CPU runs (AVX2) gives the scalar reference's bits: outputs and state, N with a tail (N % 8 != 0) and
 * without; and the dispatch follows KVB_REF (kvb_kernels_force_ref). */
TEST(recurrent_every_family_gives_the_reference_bits) {
    const struct kvb_ssd_kernels *fams[2] = {&kvb_ssd_ref, NULL};
#if defined(__x86_64__)
    if (kvb_cpu_features() & KVB_CPU_AVX2) fams[1] = &kvb_ssd_avx2;
#endif
    static const int shapes[][3] = {{16, 16, 9}, {8, 13, 7}, {64, 128, 5}, {3, 5, 4}};
    for (int f = 1; f < 2 && fams[f]; f++)
        for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
            struct head h = make_head(shapes[c][0], shapes[c][1], shapes[c][2], 31 + c);
            struct state a = make_state(&h), b = make_state(&h);
            float *ya = make_out(&h), *yb = make_out(&h);
            fams[0]->recurrent(a.rows, h.P, h.N, h.T, h.x, h.ldx, h.B, h.C, h.ldbc, h.dt, h.lddt, h.A, h.D, ya, h.ldy);
            fams[f]->recurrent(b.rows, h.P, h.N, h.T, h.x, h.ldx, h.B, h.C, h.ldbc, h.dt, h.lddt, h.A, h.D, yb, h.ldy);
            const bool same = !memcmp(ya, yb, sizeof(float) * (size_t)h.T * h.ldy) && !memcmp(a.buf, b.buf, sizeof(float) * (size_t)h.P * (h.N + GAP));
            if (!same) printf("  %s: P %d N %d T %d differs from the reference\n", fams[f]->name, h.P, h.N, h.T);
            free(ya), free(yb), free(a.buf), free(a.rows), free(b.buf), free(b.rows), free_head(&h);
            if (!same) FAILF("%s's recurrent form is not the reference's bits", fams[f]->name);
        }
    kvb_kernels_force_ref(true);
    const bool ref = kvb_ssd_kernels() == &kvb_ssd_ref;
    kvb_kernels_force_ref(false);
    CHECK(ref);
}

/* The chunked form too: every family gives the reference's bits, outputs and state, over several chunks and a short last
 * one, N with a tail and without, P odd. */
TEST(chunked_every_family_gives_the_reference_bits) {
    const struct kvb_ssd_kernels *fams[2] = {&kvb_ssd_ref, NULL};
#if defined(__x86_64__)
    if (kvb_cpu_features() & KVB_CPU_AVX2) fams[1] = &kvb_ssd_avx2;
#endif
    static const int shapes[][3] = {{16, 16, 9}, {8, 13, 70}, {64, 128, 150}, {3, 5, 64}, {5, 24, 129}};
    for (int f = 1; f < 2 && fams[f]; f++)
        for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
            struct head h = make_head(shapes[c][0], shapes[c][1], shapes[c][2], 61 + c);
            struct state a = make_state(&h), b = make_state(&h);
            float *ya = make_out(&h), *yb = make_out(&h);
            fams[0]->chunked(a.rows, h.P, h.N, h.T, h.x, h.ldx, h.B, h.C, h.ldbc, h.dt, h.lddt, h.A, h.D, ya, h.ldy, g_scratch);
            fams[f]->chunked(b.rows, h.P, h.N, h.T, h.x, h.ldx, h.B, h.C, h.ldbc, h.dt, h.lddt, h.A, h.D, yb, h.ldy, g_scratch);
            const bool same = !memcmp(ya, yb, sizeof(float) * (size_t)h.T * h.ldy) && !memcmp(a.buf, b.buf, sizeof(float) * (size_t)h.P * (h.N + GAP));
            if (!same) printf("  %s: P %d N %d T %d differs from the reference\n", fams[f]->name, h.P, h.N, h.T);
            free(ya), free(yb), free(a.buf), free(a.rows), free(b.buf), free(b.rows), free_head(&h);
            if (!same) FAILF("%s's chunked form is not the reference's bits", fams[f]->name);
        }
}

TEST(zero_tokens_change_nothing) {
    struct head h = make_head(8, 8, 0, 5);
    struct state st = make_state(&h);
    float *y = make_out(&h);
    run(&h, &st, y, true, 0);
    run(&h, &st, y, false, 0);
    for (int i = 0; i < h.P; i++) CHECK(!memcmp(st.rows[i], h.S0 + (size_t)i * h.N, sizeof(float) * (size_t)h.N));
    CHECK(y[0] == SENT);
    free(y), free(st.buf), free(st.rows), free_head(&h);
}

int main(void) {
    g_scratch = malloc(sizeof(float) * kvb_ssd_scratch_floats(128));
    RUN(recurrent_matches_float64_recurrence);
    RUN(chunked_matches_float64_recurrence_across_chunks);
    RUN(chunked_in_calls_of_7_carries_the_state);
    RUN(recurrent_split_into_calls_is_bit_identical);
    RUN(zero_tokens_change_nothing);
    RUN(recurrent_every_family_gives_the_reference_bits);
    RUN(chunked_every_family_gives_the_reference_bits);
    free(g_scratch);
    return test_summary();
}
