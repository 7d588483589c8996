/*
 * test_deltanet.c — the Gated DeltaNet kernels (src/ops/deltanet.h): the
 * delta rule's recurrent and chunked forms against a float64 recurrence
 * written here, every kernel family the CPU runs against the scalar
 * reference (the same bits: deltanet.h's note), T split into calls, and the
 * short convolution against a direct double loop with its history carried
 * across calls. State rows live apart (reversed order, gaps between them
 * holding a sentinel), strides are wider than rows, and every kernel is
 * checked to write nothing outside its rows.
 */
#include "testing.h"
#include "ops/deltanet.h"
#include "ops/dispatch.h"

#define SENT 12345.0f
#define GAP 8 /* floats between state rows and after output rows */

/* The longest prompts: 200 tokens (300 with long memory), 70 under
 * KVB_TEST_QUICK (make asan: unoptimized code, where chunked against
 * recurrent also leaves out the longest prompt at Dk = Dv = 128); every
 * length crosses a chunk and ends in a short one. */
static bool quick;
static int TL = 200, TLL = 300;

/* The families this CPU runs, each Gated DeltaNet table once. */
static const struct kvb_gdn_kernels *fams[8];
static int n_fams;

static void find_families(void) {
    const unsigned have = kvb_cpu_features();
    for (int i = 0; i < kvb_n_families; i++) {
        if (kvb_families[i].needs & ~have) continue;
        bool seen = false;
        for (int j = 0; j < n_fams; j++) seen |= fams[j] == kvb_families[i].gdn;
        if (!seen) fams[n_fams++] = kvb_families[i].gdn;
    }
}

/* One v head's inputs over T tokens, with strides wider than the rows. */
struct head {
    int Dk, Dv, T;
    int64_t ldq, ldk, ldv, ldgb, ldo;
    float *q, *k, *v, *g, *beta, *S0; /* S0: the initial state, Dk x Dv */
};

static void l2n(float *x, int n, float scale) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    const float r = (float)(1.0 / fmax(sqrt(s), 1e-6)) * scale;
    for (int i = 0; i < n; i++) x[i] *= r;
}

/* The log decays are drawn from [-0.6 g_span - 0.02, -0.02]; a case may narrow them (long memory). */
static float g_span = 1.0f;

static struct head make_head(int Dk, int Dv, int T, unsigned long long seed) {
    struct head h = {Dk, Dv, T, Dk + 3, Dk + 5, Dv + 1, 3, Dv + GAP, NULL, NULL, NULL, NULL, NULL, NULL};
    unsigned long long s = seed;
    const int Tn = T > 0 ? T : 1;
    h.q = calloc((size_t)Tn * h.ldq, sizeof(float));
    h.k = calloc((size_t)Tn * h.ldk, sizeof(float));
    h.v = calloc((size_t)Tn * h.ldv, sizeof(float));
    h.g = calloc((size_t)Tn * h.ldgb, sizeof(float));
    h.beta = calloc((size_t)Tn * h.ldgb, sizeof(float));
    h.S0 = calloc((size_t)Dk * Dv, sizeof(float));
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < Dk; i++) h.q[t * h.ldq + i] = t_randf(&s), h.k[t * h.ldk + i] = t_randf(&s);
        l2n(h.q + t * h.ldq, Dk, 1.0f / sqrtf((float)Dk));
        l2n(h.k + t * h.ldk, Dk, 1.0f);
        for (int j = 0; j < Dv; j++) h.v[t * h.ldv + j] = t_randf(&s);
        h.g[t * h.ldgb] = -0.02f - 0.3f * g_span * (t_randf(&s) + 1.0f);
        h.beta[t * h.ldgb] = 0.5f + 0.45f * t_randf(&s);
    }
    for (int i = 0; i < Dk * Dv; i++) h.S0[i] = 0.5f * t_randf(&s);
    return h;
}

static void free_head(struct head *h) {
    free(h->q), free(h->k), free(h->v), free(h->g), free(h->beta), free(h->S0);
}

/* A state as the cache holds it: rows apart, in reversed order, gaps of
 * sentinels between them. */
struct state {
    int Dk, Dv;
    float *buf, **rows;
};

static struct state make_state(const struct head *h) {
    struct state st = {h->Dk, h->Dv, malloc((size_t)h->Dk * (h->Dv + GAP) * sizeof(float)), malloc((size_t)h->Dk * sizeof(float *))};
    for (int i = 0; i < h->Dk * (h->Dv + GAP); i++) st.buf[i] = SENT;
    for (int i = 0; i < h->Dk; i++) {
        st.rows[i] = st.buf + (size_t)(h->Dk - 1 - i) * (h->Dv + GAP);
        memcpy(st.rows[i], h->S0 + (size_t)i * h->Dv, (size_t)h->Dv * sizeof(float));
    }
    return st;
}

static bool state_gaps_intact(const struct state *st) {
    for (int r = 0; r < st->Dk; r++)
        for (int j = st->Dv; j < st->Dv + GAP; j++)
            if (st->buf[(size_t)r * (st->Dv + GAP) + j] != SENT) return false;
    return true;
}

static float *make_out(const struct head *h) {
    const int Tn = h->T > 0 ? h->T : 1;
    float *o = malloc((size_t)Tn * h->ldo * sizeof(float));
    for (int64_t i = 0; i < Tn * h->ldo; i++) o[i] = SENT;
    return o;
}

static bool out_gaps_intact(const struct head *h, const float *o) {
    for (int t = 0; t < h->T; t++)
        for (int64_t j = h->Dv; j < h->ldo; j++)
            if (o[t * h->ldo + j] != SENT) return false;
    return true;
}

/* The float64 recurrence: o (T x Dv) and the final state (Dk x Dv). */
static void recurrence64(const struct head *h, double *o, double *S) {
    const int Dk = h->Dk, Dv = h->Dv;
    double *kv = malloc((size_t)Dv * sizeof(double));
    for (int i = 0; i < Dk * Dv; i++) S[i] = h->S0[i];
    for (int t = 0; t < h->T; t++) {
        const float *q = h->q + t * h->ldq, *k = h->k + t * h->ldk, *v = h->v + t * h->ldv;
        const double e = exp((double)h->g[t * h->ldgb]), b = h->beta[t * h->ldgb];
        for (int i = 0; i < Dk * Dv; i++) S[i] *= e;
        for (int j = 0; j < Dv; j++) {
            kv[j] = 0;
            for (int i = 0; i < Dk; i++) kv[j] += S[i * Dv + j] * k[i];
        }
        for (int i = 0; i < Dk; i++)
            for (int j = 0; j < Dv; j++) S[i * Dv + j] += k[i] * (b * (v[j] - kv[j]));
        for (int j = 0; j < Dv; j++) {
            double a = 0;
            for (int i = 0; i < Dk; i++) a += S[i * Dv + j] * q[i];
            o[t * Dv + j] = a;
        }
    }
    free(kv);
}

/* Largest |a - ref| over the outputs and over the state. */
static double out_err(const struct head *h, const float *o, const double *ref) {
    double m = 0;
    for (int t = 0; t < h->T; t++)
        for (int j = 0; j < h->Dv; j++) m = fmax(m, fabs((double)o[t * h->ldo + j] - ref[t * h->Dv + j]));
    return m;
}
static double state_err(const struct state *st, const double *ref) {
    double m = 0;
    for (int i = 0; i < st->Dk; i++)
        for (int j = 0; j < st->Dv; j++) m = fmax(m, fabs((double)st->rows[i][j] - ref[i * st->Dv + j]));
    return m;
}
static bool same_bits(const struct head *h, const float *o1, const float *o2, const struct state *s1, const struct state *s2) {
    for (int t = 0; t < h->T; t++)
        if (memcmp(o1 + t * h->ldo, o2 + t * h->ldo, (size_t)h->Dv * sizeof(float))) return false;
    for (int i = 0; i < h->Dk; i++)
        if (memcmp(s1->rows[i], s2->rows[i], (size_t)h->Dv * sizeof(float))) return false;
    return true;
}

enum form { RECURRENT, CHUNKED };

static void run(const struct kvb_gdn_kernels *f, enum form form, const struct head *h, struct state *st, float *o, int t0, int n) {
    if (form == RECURRENT)
        f->recurrent(st->rows, h->Dk, h->Dv, n, h->q + t0 * h->ldq, h->ldq, h->k + t0 * h->ldk, h->ldk, h->v + t0 * h->ldv, h->ldv,
                     h->g + t0 * h->ldgb, h->beta + t0 * h->ldgb, h->ldgb, o + t0 * h->ldo, h->ldo);
    else {
        float *scratch = malloc(kvb_gdn_scratch_floats(h->Dk, h->Dv) * sizeof(float));
        f->chunked(st->rows, h->Dk, h->Dv, n, h->q + t0 * h->ldq, h->ldq, h->k + t0 * h->ldk, h->ldk, h->v + t0 * h->ldv, h->ldv,
                   h->g + t0 * h->ldgb, h->beta + t0 * h->ldgb, h->ldgb, o + t0 * h->ldo, h->ldo, scratch);
        free(scratch);
    }
}

static const int shapes[][2] = {{128, 128}, {16, 16}, {32, 32}, {16, 20}, {24, 40}, {8, 7}};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* One form of one family against the float64 recurrence, over shapes and
 * lengths; returns the worst (output, state) errors through *eo, *es. */
static bool form_vs_float64(const struct kvb_gdn_kernels *f, enum form form, int Dk, int Dv, int T, double *eo, double *es) {
    struct head h = make_head(Dk, Dv, T, 1000u + (unsigned)(Dk * 31 + Dv * 7 + T));
    struct state st = make_state(&h);
    float *o = make_out(&h);
    double *ro = malloc((size_t)(T > 0 ? T : 1) * Dv * sizeof(double)), *rs = malloc((size_t)Dk * Dv * sizeof(double));
    recurrence64(&h, ro, rs);
    run(f, form, &h, &st, o, 0, T);
    *eo = out_err(&h, o, ro);
    *es = state_err(&st, rs);
    if (getenv("GDN_VERBOSE")) printf("  %s %s Dk %d Dv %d T %d: out %.3g state %.3g\n", f->name, form == RECURRENT ? "rec" : "chunk", Dk, Dv, T, *eo, *es);
    const bool gaps = state_gaps_intact(&st) && out_gaps_intact(&h, o);
    free(ro), free(rs), free(o), free(st.buf), free(st.rows), free_head(&h);
    return gaps;
}

TEST(recurrent_reference_matches_float64_recurrence) {
    const int Ts[] = {1, 7, TL};
    for (int si = 0; si < N_SHAPES; si++)
        for (int ti = 0; ti < 3; ti++) {
            double eo, es;
            if (!form_vs_float64(&kvb_gdn_ref, RECURRENT, shapes[si][0], shapes[si][1], Ts[ti], &eo, &es))
                FAILF("Dk %d Dv %d T %d: wrote outside its rows", shapes[si][0], shapes[si][1], Ts[ti]);
            if (!(eo <= 2e-7 && es <= 2e-7)) FAILF("Dk %d Dv %d T %d: output err %g, state err %g", shapes[si][0], shapes[si][1], Ts[ti], eo, es);
        }
}

TEST(chunked_every_family_matches_float64_recurrence) {
    const int Ts[] = {1, 7, 64, 65, TL};
    for (int fi = 0; fi < n_fams; fi++)
        for (int si = 0; si < N_SHAPES; si++)
            for (int ti = 0; ti < 5; ti++) {
                double eo, es;
                if (!form_vs_float64(fams[fi], CHUNKED, shapes[si][0], shapes[si][1], Ts[ti], &eo, &es))
                    FAILF("%s Dk %d Dv %d T %d: wrote outside its rows", fams[fi]->name, shapes[si][0], shapes[si][1], Ts[ti]);
                if (!(eo <= 2e-6 && es <= 2e-6))
                    FAILF("%s Dk %d Dv %d T %d: output err %g, state err %g", fams[fi]->name, shapes[si][0], shapes[si][1], Ts[ti], eo, es);
            }
}

/* Decays near 1 (g in [-0.032, -0.02]): the state remembers the whole
 * prompt, the chunk's e^G terms stay near 1. */
TEST(chunked_matches_float64_with_long_memory) {
    const int Ts[] = {65, TLL};
    g_span = 0.02f;
    for (int fi = 0; fi < n_fams; fi++)
        for (int si = 0; si < 3; si++)
            for (int ti = 0; ti < 2; ti++) {
                double eo, es;
                const bool gaps = form_vs_float64(fams[fi], CHUNKED, shapes[si][0], shapes[si][1], Ts[ti], &eo, &es);
                if (!gaps || !(eo <= 1e-6 && es <= 1e-6)) {
                    g_span = 1.0f;
                    FAILF("%s Dk %d Dv %d T %d: output err %g, state err %g, rows kept %d", fams[fi]->name, shapes[si][0], shapes[si][1], Ts[ti], eo, es, gaps);
                }
            }
    g_span = 1.0f;
}

/* Every other family against the reference, same inputs: the same bits.
 * Returns the first family that differs (why: *gaps false when it wrote
 * outside its rows), or NULL. */
static const struct kvb_gdn_kernels *families_equal_ref(enum form form, int Dk, int Dv, int T, bool *gaps) {
    struct head h = make_head(Dk, Dv, T, 77u + (unsigned)(Dk + Dv * 3 + T * 11));
    struct state s1 = make_state(&h);
    float *o1 = make_out(&h);
    const struct kvb_gdn_kernels *bad = NULL;
    run(&kvb_gdn_ref, form, &h, &s1, o1, 0, T);
    *gaps = true;
    for (int fi = 0; fi < n_fams && !bad; fi++) {
        if (fams[fi] == &kvb_gdn_ref) continue;
        struct state s2 = make_state(&h);
        float *o2 = make_out(&h);
        run(fams[fi], form, &h, &s2, o2, 0, T);
        *gaps = state_gaps_intact(&s2) && out_gaps_intact(&h, o2);
        if (!same_bits(&h, o1, o2, &s1, &s2) || !*gaps) bad = fams[fi];
        free(o2), free(s2.buf), free(s2.rows);
    }
    free(o1), free(s1.buf), free(s1.rows), free_head(&h);
    return bad;
}

TEST(recurrent_every_family_gives_the_reference_bits) {
    const int Ts[] = {1, 3, 70};
    for (int si = 0; si < N_SHAPES; si++)
        for (int ti = 0; ti < 3; ti++) {
            bool gaps;
            const struct kvb_gdn_kernels *bad = families_equal_ref(RECURRENT, shapes[si][0], shapes[si][1], Ts[ti], &gaps);
            if (bad) FAILF("%s Dk %d Dv %d T %d: %s", bad->name, shapes[si][0], shapes[si][1], Ts[ti], gaps ? "not the reference's bits" : "wrote outside its rows");
        }
}

TEST(chunked_every_family_gives_the_reference_bits) {
    const int Ts[] = {1, 7, 64, 65, TL};
    for (int si = 0; si < N_SHAPES; si++)
        for (int ti = 0; ti < 5; ti++) {
            bool gaps;
            const struct kvb_gdn_kernels *bad = families_equal_ref(CHUNKED, shapes[si][0], shapes[si][1], Ts[ti], &gaps);
            if (bad) FAILF("%s Dk %d Dv %d T %d: %s", bad->name, shapes[si][0], shapes[si][1], Ts[ti], gaps ? "not the reference's bits" : "wrote outside its rows");
        }
}

/* Chunked against recurrent directly (both float): rounding apart only. */
TEST(chunked_equals_recurrent_within_rounding) {
    const int Ts[] = {1, 65, TL};
    for (int si = 0; si < N_SHAPES; si++)
        for (int ti = 0; ti < 3; ti++) {
            if (quick && si == 0 && ti == 2) continue;
            struct head h = make_head(shapes[si][0], shapes[si][1], Ts[ti], 5u + (unsigned)si);
            struct state s1 = make_state(&h), s2 = make_state(&h);
            float *o1 = make_out(&h), *o2 = make_out(&h);
            run(&kvb_gdn_ref, RECURRENT, &h, &s1, o1, 0, h.T);
            run(&kvb_gdn_ref, CHUNKED, &h, &s2, o2, 0, h.T);
            double eo = 0, es = 0;
            for (int t = 0; t < h.T; t++)
                for (int j = 0; j < h.Dv; j++) eo = fmax(eo, fabs((double)o1[t * h.ldo + j] - o2[t * h.ldo + j]));
            for (int i = 0; i < h.Dk; i++)
                for (int j = 0; j < h.Dv; j++) es = fmax(es, fabs((double)s1.rows[i][j] - s2.rows[i][j]));
            free(o1), free(o2), free(s1.buf), free(s1.rows), free(s2.buf), free(s2.rows), free_head(&h);
            if (!(eo <= 2e-6 && es <= 2e-6)) FAILF("Dk %d Dv %d T %d: output diff %g, state diff %g", shapes[si][0], shapes[si][1], Ts[ti], eo, es);
        }
}

/* The recurrent form over T split into calls: the bits of one call. */
TEST(recurrent_split_into_calls_is_bit_identical) {
    const int pieces[] = {1, 5, 0, 1, 33, TL - 40}; /* TL, a call of no tokens among them */
    for (int fi = 0; fi < n_fams; fi++)
        for (int si = 0; si < N_SHAPES; si++) {
            struct head h = make_head(shapes[si][0], shapes[si][1], TL, 9u + (unsigned)si);
            struct state s1 = make_state(&h), s2 = make_state(&h);
            float *o1 = make_out(&h), *o2 = make_out(&h);
            run(fams[fi], RECURRENT, &h, &s1, o1, 0, h.T);
            int t0 = 0;
            for (int p = 0; p < 6; p++) {
                run(fams[fi], RECURRENT, &h, &s2, o2, t0, pieces[p]);
                t0 += pieces[p];
            }
            const bool same = t0 == h.T && same_bits(&h, o1, o2, &s1, &s2);
            free(o1), free(o2), free(s1.buf), free(s1.rows), free(s2.buf), free(s2.rows), free_head(&h);
            if (!same) FAILF("%s Dk %d Dv %d: split calls differ from one call", fams[fi]->name, shapes[si][0], shapes[si][1]);
        }
}

TEST(zero_tokens_change_nothing) {
    for (int fi = 0; fi < n_fams; fi++) {
        struct head h = make_head(16, 20, 0, 3);
        struct state st = make_state(&h);
        float o[4] = {SENT, SENT, SENT, SENT}, hist[3 * 5], y[5] = {-1, -1, -1, -1, -1}; /* SiLU would change them */
        for (int i = 0; i < 15; i++) hist[i] = (float)i;
        run(fams[fi], RECURRENT, &h, &st, o, 0, 0);
        run(fams[fi], CHUNKED, &h, &st, o, 0, 0);
        fams[fi]->conv(hist, h.S0, 5, 4, h.v, 5, 0, y, 5, true);
        bool same = o[0] == SENT && y[0] == -1 && state_gaps_intact(&st);
        for (int i = 0; i < h.Dk; i++) same = same && memcmp(st.rows[i], h.S0 + i * h.Dv, (size_t)h.Dv * sizeof(float)) == 0;
        for (int i = 0; i < 15; i++) same = same && hist[i] == (float)i;
        free(st.buf), free(st.rows), free_head(&h);
        if (!same) FAILF("%s: T = 0 changed something", fams[fi]->name);
    }
}

/* ---- the short convolution ---- */

/* Feeds T rows in the pieces given to f->conv, from a random history, and
 * checks y against a direct double loop over [history; all rows] (and the
 * SiLU of it), and the history after each piece: the last K-1 rows, exact.
 * Returns the largest |y - ref| relative to max(1, |ref|); -1 on a wrong
 * history or a write outside y's rows. y_all (T x ldy) gets the outputs. */
static double conv_check(const struct kvb_gdn_kernels *f, int C, int K, const int *pieces, int n_pieces, bool silu, float *y_all,
                         unsigned long long seed) {
    int T = 0;
    for (int p = 0; p < n_pieces; p++) T += pieces[p];
    const int H = K - 1, ldx = C + 3, ldy = C + GAP;
    unsigned long long s = seed;
    float *w = malloc((size_t)C * K * sizeof(float)), *hist = malloc((size_t)(H > 0 ? H : 1) * C * sizeof(float));
    float *x = malloc((size_t)T * ldx * sizeof(float)), *xe = malloc((size_t)(H + T) * C * sizeof(float));
    for (int i = 0; i < C * K; i++) w[i] = t_randf(&s);
    for (int i = 0; i < H * C; i++) hist[i] = t_randf(&s);
    for (int i = 0; i < T * ldx; i++) x[i] = 2.0f * t_randf(&s);
    for (int r = 0; r < H; r++) memcpy(xe + (size_t)r * C, hist + (size_t)r * C, (size_t)C * sizeof(float));
    for (int t = 0; t < T; t++) memcpy(xe + (size_t)(H + t) * C, x + (size_t)t * ldx, (size_t)C * sizeof(float));
    for (int i = 0; i < T * ldy; i++) y_all[i] = SENT;
    double err = 0;
    int t0 = 0;
    for (int p = 0; p < n_pieces; p++) {
        f->conv(hist, w, C, K, x + (size_t)t0 * ldx, ldx, pieces[p], y_all + (size_t)t0 * ldy, ldy, silu);
        t0 += pieces[p];
        for (int r = 0; r < H; r++) /* xe rows t0 .. t0 + H - 1 */
            if (memcmp(hist + (size_t)r * C, xe + (size_t)(t0 + r) * C, (size_t)C * sizeof(float))) err = -1;
    }
    for (int t = 0; t < T && err >= 0; t++) {
        for (int c = 0; c < C; c++) {
            double a = 0;
            for (int j = 0; j < K; j++) a += (double)w[c * K + j] * xe[(size_t)(t + j) * C + c];
            if (silu) a = a / (1.0 + exp(-a));
            err = fmax(err, fabs(y_all[(size_t)t * ldy + c] - a) / fmax(1.0, fabs(a)));
        }
        for (int c = C; c < ldy; c++)
            if (y_all[(size_t)t * ldy + c] != SENT) err = -1;
    }
    free(w), free(hist), free(x), free(xe);
    return err;
}

static const int conv_shapes[][2] = {{40, 4}, {37, 4}, {16, 2}, {9, 1}, {24, 7}, {5, 20}}; /* C, K */
#define N_CONV ((int)(sizeof conv_shapes / sizeof conv_shapes[0]))

TEST(conv_every_family_matches_direct_loop_with_history_across_calls) {
    const int pieces[] = {1, 2, 1, 9, 3}; /* pieces shorter than K - 1 shift the history */
    float *y = malloc(16 * 64 * sizeof(float));
    for (int fi = 0; fi < n_fams; fi++)
        for (int ci = 0; ci < N_CONV; ci++)
            for (int silu = 0; silu < 2; silu++) {
                const double e = conv_check(fams[fi], conv_shapes[ci][0], conv_shapes[ci][1], pieces, 5, silu, y, 42u + (unsigned)ci);
                if (!(e >= 0 && e <= 2e-6)) {
                    free(y);
                    FAILF("%s C %d K %d silu %d: err %g (-1: history or a write outside y)", fams[fi]->name, conv_shapes[ci][0], conv_shapes[ci][1], silu, e);
                }
            }
    free(y);
}

TEST(conv_every_family_gives_the_reference_bits_before_silu) {
    const int pieces[] = {3, 1, 12};
    float *y1 = malloc(16 * 64 * sizeof(float)), *y2 = malloc(16 * 64 * sizeof(float));
    for (int fi = 0; fi < n_fams; fi++)
        for (int ci = 0; ci < N_CONV; ci++)
            for (int silu = 0; silu < 2; silu++) {
                const int C = conv_shapes[ci][0], K = conv_shapes[ci][1];
                conv_check(&kvb_gdn_ref, C, K, pieces, 3, silu, y1, 7u + (unsigned)ci);
                conv_check(fams[fi], C, K, pieces, 3, silu, y2, 7u + (unsigned)ci);
                for (int t = 0; t < 16; t++)
                    for (int c = 0; c < C; c++) {
                        const float a = y1[t * (C + GAP) + c], b = y2[t * (C + GAP) + c];
                        /* before SiLU the same bits; SiLU goes through the family's vexp */
                        if (silu ? !(fabsf(a - b) <= 1e-6f * fmaxf(1.0f, fabsf(a))) : memcmp(&a, &b, sizeof a) != 0) {
                            free(y1), free(y2);
                            FAILF("%s C %d K %d silu %d t %d c %d: %.9g vs reference %.9g", fams[fi]->name, C, K, silu, t, c, b, a);
                        }
                    }
            }
    free(y1), free(y2);
}

/* The entry points go through the family in use (and force_ref reaches them). */
TEST(entry_points_run_the_dispatched_family) {
    CHECK(kvb_gdn_kernels() == kvb_family()->gdn);
    kvb_kernels_force_ref(true);
    CHECK(kvb_gdn_kernels() == &kvb_gdn_ref);
    struct head h = make_head(16, 20, 70, 11);
    struct state s1 = make_state(&h), s2 = make_state(&h);
    float *o1 = make_out(&h), *o2 = make_out(&h);
    run(&kvb_gdn_ref, CHUNKED, &h, &s1, o1, 0, h.T);
    float *scratch = malloc(kvb_gdn_scratch_floats(h.Dk, h.Dv) * sizeof(float));
    kvb_gdn_chunked(s2.rows, h.Dk, h.Dv, h.T, h.q, h.ldq, h.k, h.ldk, h.v, h.ldv, h.g, h.beta, h.ldgb, o2, h.ldo, scratch);
    bool same = same_bits(&h, o1, o2, &s1, &s2);
    run(&kvb_gdn_ref, RECURRENT, &h, &s1, o1, 0, h.T);
    kvb_gdn_recurrent(s2.rows, h.Dk, h.Dv, h.T, h.q, h.ldq, h.k, h.ldk, h.v, h.ldv, h.g, h.beta, h.ldgb, o2, h.ldo);
    same = same && same_bits(&h, o1, o2, &s1, &s2);
    kvb_kernels_force_ref(false);
    CHECK(kvb_gdn_kernels() == kvb_family()->gdn);
    free(scratch), free(o1), free(o2), free(s1.buf), free(s1.rows), free(s2.buf), free(s2.rows), free_head(&h);
    CHECK(same);
    float hist[3 * 4] = {0}, w[4 * 4], x[2 * 4], y1[2 * 4], y2[2 * 4];
    unsigned long long s = 5;
    for (int i = 0; i < 16; i++) w[i] = t_randf(&s);
    for (int i = 0; i < 8; i++) x[i] = t_randf(&s);
    kvb_gdn_kernels()->conv(hist, w, 4, 4, x, 4, 2, y1, 4, false);
    memset(hist, 0, sizeof hist);
    kvb_ssm_conv(hist, w, 4, 4, x, 4, 2, y2, 4, false);
    CHECK(memcmp(y1, y2, sizeof y1) == 0);
    /* KVB_KERNELS=<family> reaches these kernels too: every family has a table */
    CHECK(kvb_families[0].gdn == &kvb_gdn_ref);
    const char *cap = getenv("KVB_KERNELS");
    char *saved = cap ? strdup(cap) : NULL;
    bool each = true;
    for (int i = 0; i < kvb_n_families; i++) {
        setenv("KVB_KERNELS", kvb_families[i].name, 1);
        kvb_kernels_force_ref(false);
        each = each && kvb_families[i].gdn && kvb_gdn_kernels() == kvb_family()->gdn &&
               ((kvb_families[i].needs & ~kvb_cpu_features()) != 0 || kvb_family() == &kvb_families[i] || getenv("KVB_REF"));
    }
    if (saved) setenv("KVB_KERNELS", saved, 1);
    else unsetenv("KVB_KERNELS");
    free(saved);
    kvb_kernels_force_ref(false);
    CHECK(each);
}

int main(void) {
    const char *q = getenv("KVB_TEST_QUICK");
    quick = q && *q && strcmp(q, "0") != 0;
    if (quick) TL = TLL = 70;
    find_families();
    printf("families:");
    for (int i = 0; i < n_fams; i++) printf(" %s", fams[i]->name);
    printf("\n");
    RUN(recurrent_reference_matches_float64_recurrence);
    RUN(chunked_every_family_matches_float64_recurrence);
    RUN(chunked_matches_float64_with_long_memory);
    RUN(recurrent_every_family_gives_the_reference_bits);
    RUN(chunked_every_family_gives_the_reference_bits);
    RUN(chunked_equals_recurrent_within_rounding);
    RUN(recurrent_split_into_calls_is_bit_identical);
    RUN(zero_tokens_change_nothing);
    RUN(conv_every_family_matches_direct_loop_with_history_across_calls);
    RUN(conv_every_family_gives_the_reference_bits_before_silu);
    RUN(entry_points_run_the_dispatched_family);
    return test_summary();
}
