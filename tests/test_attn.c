/*
 * test_attn.c — attention kernels against a naive two-pass reference written
 * here (double precision, materialised scores), for every kernel family the
 * CPU has, F32 and F16 rows (and q8_0, q4_0, bf16 and mixed K/V pages, which
 * the driver dequantizes a tile at a time), several head dims, group sizes
 * and lengths; the references' q8_0/q4_0 rows and int8 query rows come from
 * quantizers written here, not the library's:
 * outputs within 1e-5 (F32), returned weights summing to 1 +- 1e-5, and the
 * prefill column mass against a materialised T x T reference.
 */
#include "testing.h"
#include "families.h"
#include "ops/ops.h"
#include "ops/quant.h"
#include "core/ggml_types.h"

static const struct kvb_kernels *families[8];
static int n_families;

/* Whether two families' attention primitives are the same functions (the
 * NEON families share one set: testing it again proves nothing; sve's
 * scores and accum are its own). */
static bool same_primitives(const struct kvb_kernels *a, const struct kvb_kernels *b) {
    return a->scores == b->scores && a->accum == b->accum && a->vexp == b->vexp && a->scores_i8 == b->scores_i8 && a->to_f16 == b->to_f16 &&
           a->from_f16 == b->from_f16 && a->from_q8_0 == b->from_q8_0 && a->from_q4_0 == b->from_q4_0 && a->page_bounds == b->page_bounds &&
           a->quant_rows == b->quant_rows && a->f16_tile_rows == b->f16_tile_rows;
}

/* The reference, then the families this CPU runs up to the one in use
 * (families.h: x86's avx2, avxvnni, avx512 and avx512vnni, whose primitives
 * differ only in the integer scores, which test_engine_kernels kernel_table
 * checks too; AArch64's NEON set, and sve's where SVE is wider than 128
 * bits), each set of primitives once. */
static void find_families(void) {
    families[n_families++] = &kvb_kernels_ref;
    const struct kvb_family *f[7];
    const int n = t_fast_families(f, 7);
    for (int i = 0; i < n; i++) {
        bool seen = false;
        for (int j = 0; j < n_families; j++) seen = seen || same_primitives(families[j], f[i]->attn);
        if (!seen) families[n_families++] = f[i]->attn;
    }
}

/* A fake stream: n rows in pages of B=4 slots, physical order scrambled;
 * K rows in dt, V rows in dtv (their own sizes, V after the page's K rows). */
struct fake {
    int n, d, B;
    enum kvb_dtype dt, dtv;
    uint8_t **pages;
    int32_t *slots;
    float *k, *v; /* logical rows as the kernels will see them (after rounding or quantization) */
    size_t row_bytes, row_bytes_v;
};

/* The test's own quantizers, written here from ggml's block formats so that
 * a broken library quantizer cannot move the references with it. q8_0: per
 * 32 values d = amax / 127 (stored as f16), codes x / d rounded to nearest;
 * q4_0: d = the value of largest magnitude / -8, codes x / d rounded, + 8,
 * clamped to 0..15. y gets the values the codes stand for, f16(d) * code. */
static void own_quantized(enum kvb_dtype dt, const float *x, int d, float *y) {
    for (int b = 0; b < d / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0, mx = 0;
        for (int k = 0; k < 32; k++)
            if (fabsf(xb[k]) > amax) amax = fabsf(xb[k]), mx = xb[k];
        const float s = dt == KVB_DTYPE_Q8_0 ? amax / 127.0f : mx / -8.0f, inv = s != 0 ? 1.0f / s : 0.0f;
        const float s16 = kvb_f16_to_f32(kvb_f32_to_f16(s));
        for (int k = 0; k < 32; k++) {
            float c = rintf(xb[k] * inv);
            if (dt == KVB_DTYPE_Q4_0) c = fminf(15.0f, fmaxf(0.0f, c + 8.0f)) - 8.0f;
            y[b * 32 + k] = s16 * c;
        }
    }
}

/* One element of a row in an f32/f16 layout, or a whole quantized row at i == 0
 * (stored by the library; the value returned is the test's own quantizer's). */
static float put_row(enum kvb_dtype dt, uint8_t *row, const float *x, int d, int i) {
    if (dt == KVB_DTYPE_F16) {
        uint16_t h = kvb_f32_to_f16(x[i]);
        memcpy(row + 2 * i, &h, 2);
        return kvb_f16_to_f32(h);
    }
    if (dt == KVB_DTYPE_F32) {
        memcpy(row + 4 * i, &x[i], 4);
        return x[i];
    }
    float back[KVB_ATTN_MAX_DIM];
    if (i == 0) kvb_kv_row_store(dt, x, row, d);
    if (dt == KVB_DTYPE_Q8_0 || dt == KVB_DTYPE_Q4_0) own_quantized(dt, x, d, back);
    else kvb_kv_row_load(dt, row, back, d);
    return back[i];
}

/* How fake_init2 lays the keys in slots: shuffled over every page (no two
 * keys adjacent), or as an appended stream (key j in slot j) with a few keys
 * moved, so kernels meet runs of adjacent slots (kvb_view_run), runs broken
 * by a moved key, and runs across a page boundary. */
enum fake_layout { FAKE_SHUFFLED, FAKE_APPENDED };
static enum fake_layout fake_layout = FAKE_SHUFFLED;

static void fake_init2(struct fake *f, int n, int d, enum kvb_dtype dt, enum kvb_dtype dtv, unsigned long long seed) {
    f->n = n; f->d = d; f->B = 4; f->dt = dt; f->dtv = dtv;
    f->row_bytes = kvb_dtype_row_bytes(dt, d);
    f->row_bytes_v = kvb_dtype_row_bytes(dtv, d);
    int n_pages = (n + f->B - 1) / f->B + 1;
    f->pages = calloc((size_t)n_pages, sizeof(uint8_t *));
    for (int p = 0; p < n_pages; p++) f->pages[p] = calloc(1, (size_t)f->B * (f->row_bytes + f->row_bytes_v));
    f->slots = malloc(sizeof(int32_t) * (size_t)n);
    int cap = n_pages * f->B;
    int *perm = malloc(sizeof(int) * (size_t)cap);
    for (int i = 0; i < cap; i++) perm[i] = i;
    unsigned long long rs = seed;
    if (fake_layout == FAKE_SHUFFLED) {
        for (int i = cap - 1; i > 0; i--) {
            int j = (int)(t_rng_next(&rs) % (unsigned)(i + 1));
            int t = perm[i]; perm[i] = perm[j]; perm[j] = t;
        }
    } else {
        for (int i = 3; i + 6 < cap; i += 11) { int t = perm[i]; perm[i] = perm[i + 6]; perm[i + 6] = t; }
        if (cap > n) { int t = perm[n / 2]; perm[n / 2] = perm[cap - 1]; perm[cap - 1] = t; } /* one key in the spare page */
    }
    f->k = malloc(sizeof(float) * (size_t)n * d);
    f->v = malloc(sizeof(float) * (size_t)n * d);
    for (int j = 0; j < n; j++) {
        f->slots[j] = perm[j];
        uint8_t *page = f->pages[perm[j] / f->B];
        uint8_t *kr = page + (size_t)(perm[j] % f->B) * f->row_bytes;
        uint8_t *vr = page + (size_t)f->B * f->row_bytes + (size_t)(perm[j] % f->B) * f->row_bytes_v;
        float kx[KVB_ATTN_MAX_DIM], vx[KVB_ATTN_MAX_DIM];
        for (int i = 0; i < d; i++) { kx[i] = t_randf(&rs) * 2; vx[i] = t_randf(&rs); }
        for (int i = 0; i < d; i++) {
            f->k[(size_t)j * d + i] = put_row(dt, kr, kx, d, i);
            f->v[(size_t)j * d + i] = put_row(dtv, vr, vx, d, i);
        }
    }
    free(perm);
}

static void fake_init(struct fake *f, int n, int d, enum kvb_dtype dt, unsigned long long seed) { fake_init2(f, n, d, dt, dt, seed); }

static struct kvb_kv_view fake_view(const struct fake *f) {
    struct kvb_kv_view v = {f->pages, f->slots, f->n, 2, f->d, f->row_bytes, f->row_bytes_v, (size_t)f->B * f->row_bytes, f->dt, f->dtv, 0.0f, 0};
    return v;
}

static void fake_free(struct fake *f) {
    int n_pages = (f->n + f->B - 1) / f->B + 1;
    for (int p = 0; p < n_pages; p++) free(f->pages[p]);
    free(f->pages); free(f->slots); free(f->k); free(f->v);
}

/* The query row as the kernels score it: q8_0/q4_0 keys meet q's int8
 * form (ops.h, scores_i8), i.e. the row d_b * code of each block, with
 * d_b = amax / 127 in f32 and codes rounded to nearest (written here). */
static void as_scored(const struct fake *f, const float *q, float *qs) {
    const int d = f->d;
    if (!kvb_dtype_scores_i8(f->dt)) {
        memcpy(qs, q, sizeof(float) * (size_t)d);
        return;
    }
    for (int b = 0; b < d / 32; b++) {
        float amax = 0;
        for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(q[b * 32 + k]));
        const float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0.0f;
        for (int k = 0; k < 32; k++) qs[b * 32 + k] = s * rintf(q[b * 32 + k] * inv);
    }
}

/* Naive reference: row r sees keys [0, lim); two passes in double. */
static void naive(const struct fake *f, const float *q_in, int lim, double *out, double *w) {
    const int d = f->d;
    float q[KVB_ATTN_MAX_DIM];
    as_scored(f, q_in, q);
    double *s = malloc(sizeof(double) * (size_t)(lim > 0 ? lim : 1));
    double mx = -1e300;
    for (int j = 0; j < lim; j++) {
        double acc = 0;
        for (int i = 0; i < d; i++) acc += (double)q[i] * f->k[(size_t)j * d + i];
        s[j] = acc;
        if (acc > mx) mx = acc;
    }
    double sum = 0;
    for (int j = 0; j < lim; j++) { s[j] = exp(s[j] - mx); sum += s[j]; }
    for (int i = 0; i < d; i++) out[i] = 0;
    for (int j = 0; j < lim; j++) {
        double p = s[j] / sum;
        if (w) w[j] = p;
        for (int i = 0; i < d; i++) out[i] += p * f->v[(size_t)j * d + i];
    }
    free(s);
}

/* K/V storage pairs: the direct f32/f16 views, and the quantized, bf16 and
 * mixed ones the driver hands to the primitives a dequantized tile at a time. */
static const enum kvb_dtype kv_pairs[][2] = {
    {KVB_DTYPE_F32, KVB_DTYPE_F32}, {KVB_DTYPE_F16, KVB_DTYPE_F16}, {KVB_DTYPE_Q8_0, KVB_DTYPE_Q8_0},
    {KVB_DTYPE_Q4_0, KVB_DTYPE_Q4_0}, {KVB_DTYPE_BF16, KVB_DTYPE_BF16}, {KVB_DTYPE_Q8_0, KVB_DTYPE_F16}, {KVB_DTYPE_F16, KVB_DTYPE_Q4_0},
};

TEST(decode_matches_naive_every_family) {
    const int dims[] = {8, 16, 64, 80, 128};
    const int groups[] = {1, 4, 7};
    const int lens[] = {1, 5, 64, 65, 130};
    for (int lay = 0; lay < 2; lay++)
    for (int fa = 0; fa < n_families; fa++)
        for (size_t dti = 0; dti < sizeof kv_pairs / sizeof *kv_pairs; dti++)
            for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
                for (size_t gi = 0; gi < 3; gi++)
                    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
                        const int d = dims[di], G = groups[gi], n = lens[li];
                        const enum kvb_dtype dt = kv_pairs[dti][0], dtv = kv_pairs[dti][1];
                        if (!kvb_dtype_row_bytes(dt, d) || !kvb_dtype_row_bytes(dtv, d)) continue; /* blocks of 32 */
                        struct fake f;
                        fake_layout = lay ? FAKE_APPENDED : FAKE_SHUFFLED;
                        fake_init2(&f, n, d, dt, dtv, 100 + di * 7 + gi * 3 + li);
                        fake_layout = FAKE_SHUFFLED;
                        unsigned long long rs = 999 + li;
                        float *q = malloc(sizeof(float) * (size_t)G * d), *acc = malloc(sizeof(float) * (size_t)G * d);
                        float *out = malloc(sizeof(float) * (size_t)G * d), *p = malloc(sizeof(float) * (size_t)G * n);
                        for (int i = 0; i < G * d; i++) q[i] = t_randf(&rs) * 0.5f;
                        int32_t seg_j[64];
                        float seg_m[64 * KVB_ATTN_MAX_ROWS];
                        struct kvb_attn_state st;
                        struct kvb_kv_view v = fake_view(&f);
                        kvb_attn_begin(&st, G, d, acc, p, n, seg_j, seg_m, 64);
                        /* feed as two runs to exercise run boundaries */
                        int split = n / 3;
                        kvb_attn_run(families[fa], &v, q, NULL, 0, split, &st);
                        kvb_attn_run(families[fa], &v, q, NULL, split, n, &st);
                        kvb_attn_end(&st, out, NULL);
                        double ref[128], w[130];
                        double tol = 1e-5;
                        for (int g = 0; g < G; g++) {
                            naive(&f, q + (size_t)g * d, n, ref, w);
                            double wsum = 0;
                            for (int i = 0; i < d; i++)
                                if (fabs(out[(size_t)g * d + i] - ref[i]) > tol)
                                    FAILF("%s %s/%s %s d=%d G=%d n=%d head %d dim %d: %.9g vs %.9g", families[fa]->name,
                                          kvb_dtype_name(dt), kvb_dtype_name(dtv), lay ? "appended" : "shuffled", d, G, n, g, i,
                                          (double)out[(size_t)g * d + i], ref[i]);
                            for (int j = 0; j < n; j++) {
                                wsum += p[(size_t)g * n + j];
                                if (fabs(p[(size_t)g * n + j] - w[j]) > tol)
                                    FAILF("%s weight %d: %.9g vs %.9g", families[fa]->name, j, (double)p[(size_t)g * n + j], w[j]);
                            }
                            if (fabs(wsum - 1.0) > 1e-5) FAILF("%s weights sum to %.9g", families[fa]->name, wsum);
                        }
                        free(q); free(acc); free(out); free(p);
                        fake_free(&f);
                    }
}

/* Latent views (multi-head latent attention, kvb_cache_params.head_dim_v):
 * each key's value is its K row's last dv entries, read in place (v_offset
 * within the row, row_bytes_v = row_bytes), and acc/out rows are dv wide.
 * Every family against the double reference over those tails, for every
 * row type (the quantized ones with the value on a block boundary), a
 * row or two (accum's direct rows), 16 (AVX2's converted-once rows) and 64
 * rows (AVX-512's f16 tiles), and DeepSeek's 576 = 64 + 512. */
TEST(latent_views_read_values_in_the_key_row_every_family) {
    const int dims[][2] = {{64, 32}, {96, 64}, {576, 512}};
    const int groups[] = {1, 2, 16, 64};
    const int lens[] = {5, 130};
    const enum kvb_dtype types[] = {KVB_DTYPE_F32, KVB_DTYPE_F16, KVB_DTYPE_BF16, KVB_DTYPE_Q8_0, KVB_DTYPE_Q4_0};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
        for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
            for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
                const int d = dims[di][0], dv = dims[di][1], n = lens[li];
                const enum kvb_dtype dt = types[ti];
                struct fake f;
                fake_layout = li ? FAKE_APPENDED : FAKE_SHUFFLED;
                fake_init2(&f, n, d, dt, dt, 300 + di * 7 + li);
                fake_layout = FAKE_SHUFFLED;
                struct kvb_kv_view v = fake_view(&f);
                v.head_dim_v = dv;
                v.v_offset = kvb_dtype_row_bytes(dt, d - dv);
                v.row_bytes_v = v.row_bytes;
                /* the reference's values: the keys' tails (f.v, the V rows, are not the view's) */
                struct fake t = f;
                t.v = malloc(sizeof(float) * (size_t)n * d);
                for (int j = 0; j < n; j++)
                    for (int i = 0; i < d; i++) t.v[(size_t)j * d + i] = i < dv ? f.k[(size_t)j * d + d - dv + i] : 0.0f;
                for (int fa = 0; fa < n_families; fa++)
                    for (size_t gi = 0; gi < sizeof groups / sizeof *groups; gi++) {
                        const int G = groups[gi];
                        unsigned long long rs = 77 + li + gi;
                        float *q = malloc(sizeof(float) * (size_t)G * d), *acc = malloc(sizeof(float) * (size_t)G * d);
                        float *out = malloc(sizeof(float) * (size_t)G * dv);
                        double *ref = malloc(sizeof(double) * (size_t)d);
                        for (int i = 0; i < G * d; i++) q[i] = t_randf(&rs) * 4.0f / sqrtf((float)d); /* scores as at d = 64 */
                        struct kvb_attn_state st;
                        kvb_attn_begin(&st, G, d, acc, NULL, 0, NULL, NULL, 0);
                        st.dv = dv;
                        kvb_attn_run(families[fa], &v, q, NULL, 0, n / 3, &st);
                        kvb_attn_run(families[fa], &v, q, NULL, n / 3, n, &st);
                        kvb_attn_end(&st, out, NULL);
                        for (int g = 0; g < G; g++) {
                            naive(&t, q + (size_t)g * d, n, ref, NULL);
                            for (int i = 0; i < dv; i++)
                                if (fabs(out[(size_t)g * dv + i] - ref[i]) > 1e-5)
                                    FAILF("%s %s d=%d dv=%d G=%d n=%d head %d dim %d: %.9g vs %.9g", families[fa]->name, kvb_dtype_name(dt), d,
                                          dv, G, n, g, i, (double)out[(size_t)g * dv + i], ref[i]);
                        }
                        free(ref); free(q); free(acc); free(out);
                    }
                free(t.v);
                fake_free(&f);
            }
}

/* gpt-oss's learned sinks: each row's softmax has one more logit, its sink,
 * whose value row is zero. Against a double reference: the outputs, each
 * key's weight (summing to 1 minus the sink's share), the log denominator
 * (colmass reads it) and the mean weights, for sinks below, among and far
 * above the scores, and for a row that sees no key (all to the sink). */
TEST(sinks_take_their_share) {
    enum { d = 64, G = 4 };
    const int lens[] = {0, 1, 65, 130};
    const float sinks[G] = {-3.0f, 0.2f, 1.5f, 40.0f};
    for (int fa = 0; fa < n_families; fa++)
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            const int n = lens[li];
            struct fake f;
            fake_init2(&f, n, d, KVB_DTYPE_F32, KVB_DTYPE_F32, 40 + li);
            unsigned long long rs = 77 + li;
            float q[G * 64], acc[G * 64], out[G * 64], out2[G * 64], lse[G], p[G * 130], w[130];
            for (int i = 0; i < G * d; i++) q[i] = t_randf(&rs) * 0.5f;
            int32_t seg_j[64];
            float seg_m[64 * KVB_ATTN_MAX_ROWS];
            struct kvb_attn_state st;
            struct kvb_kv_view v = fake_view(&f);
            for (int pass = 0; pass < 2; pass++) {
                kvb_attn_begin(&st, G, d, acc, p, n > 0 ? n : 1, seg_j, seg_m, 64);
                st.sink = sinks;
                kvb_attn_run(families[fa], &v, q, NULL, 0, n / 2, &st);
                kvb_attn_run(families[fa], &v, q, NULL, n / 2, n, &st);
                if (pass == 0) kvb_attn_end_mean(&st, out2, w, n);
                else kvb_attn_end(&st, out, lse); /* last: p normalized */
            }
            double mean[130] = {0};
            for (int g = 0; g < G; g++) {
                double sc[130], mx = sinks[g], sum = 0;
                for (int j = 0; j < n; j++) {
                    sc[j] = 0;
                    for (int i = 0; i < d; i++) sc[j] += (double)q[g * d + i] * f.k[(size_t)j * d + i];
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j < n; j++) sum += exp(sc[j] - mx);
                sum += exp(sinks[g] - mx);
                for (int i = 0; i < d; i++) {
                    double o = 0;
                    for (int j = 0; j < n; j++) o += exp(sc[j] - mx) / sum * f.v[(size_t)j * d + i];
                    if (fabs(out[g * d + i] - o) > 1e-5 || fabs(out2[g * d + i] - out[g * d + i]) > 0)
                        FAILF("%s n=%d head %d dim %d: %.9g (mean pass %.9g) vs %.9g", families[fa]->name, n, g, i, (double)out[g * d + i],
                              (double)out2[g * d + i], o);
                }
                if (fabs(lse[g] - (mx + log(sum))) > 1e-4) FAILF("%s n=%d head %d: lse %.9g vs %.9g", families[fa]->name, n, g, (double)lse[g], mx + log(sum));
                for (int j = 0; j < n; j++) {
                    const double pj = exp(sc[j] - mx) / sum;
                    mean[j] += pj / G;
                    if (fabs(p[(size_t)g * n + j] - pj) > 1e-6) FAILF("%s n=%d head %d key %d: %.9g vs %.9g", families[fa]->name, n, g, j, (double)p[(size_t)g * n + j], pj);
                }
            }
            for (int j = 0; j < n; j++)
                if (fabs(w[j] - mean[j]) > 1e-6) FAILF("%s n=%d mean weight %d: %.9g vs %.9g", families[fa]->name, n, j, (double)w[j], mean[j]);
            fake_free(&f);
        }
}

/* The runs of one state may bring other query rows in the same buffer
 * (attend.c rotates them in place by each run's position delta): every run
 * is scored with the rows it was given, quantized keys included. */
TEST(runs_may_bring_other_query_rows) {
    static const enum kvb_dtype pairs[][2] = {{KVB_DTYPE_F16, KVB_DTYPE_F16}, {KVB_DTYPE_Q8_0, KVB_DTYPE_Q8_0},
                                              {KVB_DTYPE_Q4_0, KVB_DTYPE_Q4_0}, {KVB_DTYPE_Q8_0, KVB_DTYPE_F16}};
    const int d = 64, G = 4, n = 130, split = 70;
    for (int fa = 0; fa < n_families; fa++)
        for (size_t pi = 0; pi < sizeof pairs / sizeof *pairs; pi++) {
            struct fake f;
            fake_init2(&f, n, d, pairs[pi][0], pairs[pi][1], 41 + pi);
            unsigned long long rs = 3 + pi;
            float qa[4 * 64], qb[4 * 64], q[4 * 64], acc[4 * 64], out[4 * 64];
            for (int i = 0; i < G * d; i++) qa[i] = t_randf(&rs) * 0.6f, qb[i] = t_randf(&rs) * 0.6f;
            struct kvb_attn_state st;
            const struct kvb_kv_view v = fake_view(&f);
            kvb_attn_begin(&st, G, d, acc, NULL, 0, NULL, NULL, 0);
            memcpy(q, qa, sizeof q);
            kvb_attn_run(families[fa], &v, q, NULL, 0, split, &st);
            memcpy(q, qb, sizeof q); /* the same buffer, other rows */
            kvb_attn_run(families[fa], &v, q, NULL, split, n, &st);
            kvb_attn_end(&st, out, NULL);
            for (int g = 0; g < G; g++) {
                float sa[64], sb[64];
                as_scored(&f, qa + g * d, sa);
                as_scored(&f, qb + g * d, sb);
                double sc[130], mx = -1e300, sum = 0, ref[64] = {0};
                for (int j = 0; j < n; j++) {
                    const float *qs = j < split ? sa : sb;
                    double e = 0;
                    for (int i = 0; i < d; i++) e += (double)qs[i] * f.k[(size_t)j * d + i];
                    sc[j] = e;
                    mx = e > mx ? e : mx;
                }
                for (int j = 0; j < n; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (int j = 0; j < n; j++)
                    for (int i = 0; i < d; i++) ref[i] += sc[j] / sum * f.v[(size_t)j * d + i];
                for (int i = 0; i < d; i++)
                    if (fabs(out[g * d + i] - ref[i]) > 1e-5) {
                        FAILF("%s %s/%s head %d dim %d: %.9g vs %.9g", families[fa]->name, kvb_dtype_name(pairs[pi][0]),
                              kvb_dtype_name(pairs[pi][1]), g, i, (double)out[g * d + i], ref[i]);
                        break;
                    }
            }
            fake_free(&f);
        }
}

/* A family that hands many-row calls over f16 pages an f32 tile
 * (f16_tile_rows) gives the bits of its direct f16 path: outputs, lse,
 * weights and column mass, causal limits, runs split mid-tile, both layouts, and row counts
 * on both sides of the threshold; and the outputs against the naive
 * reference. */
TEST(f16_tiles_for_many_rows_are_the_direct_bits) {
    const int dims[] = {64, 80, 128};
    int tested = 0;
    for (int fa = 0; fa < n_families; fa++) {
        const int thr = families[fa]->f16_tile_rows;
        if (thr <= 0) continue;
        struct kvb_kernels direct = *families[fa];
        direct.f16_tile_rows = 0;
        const int rows[] = {thr - 1, thr, KVB_ATTN_MAX_ROWS};
        for (int lay = 0; lay < 2; lay++)
            for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
                for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
                    const int d = dims[di], R = rows[ri], n = 150, n_prev = n - R;
                    struct fake f;
                    fake_layout = lay ? FAKE_APPENDED : FAKE_SHUFFLED;
                    fake_init(&f, n, d, KVB_DTYPE_F16, 300 + di * 5 + ri + lay * 17);
                    fake_layout = FAKE_SHUFFLED;
                    unsigned long long rs = 61 + ri;
                    float *q = malloc(sizeof(float) * (size_t)R * d);
                    float *acc[2], *out[2], *p[2], lse[2][KVB_ATTN_MAX_ROWS];
                    int32_t lim[KVB_ATTN_MAX_ROWS], seg_j[2][8];
                    float seg_m[2][8 * KVB_ATTN_MAX_ROWS];
                    for (int i = 0; i < R * d; i++) q[i] = t_randf(&rs) * 0.5f;
                    for (int r = 0; r < R; r++) lim[r] = n_prev + r + 1;
                    const struct kvb_kv_view v = fake_view(&f);
                    for (int k = 0; k < 2; k++) {
                        const struct kvb_kernels *kr = k ? &direct : families[fa];
                        acc[k] = malloc(sizeof(float) * (size_t)R * d);
                        out[k] = malloc(sizeof(float) * (size_t)R * d);
                        p[k] = calloc((size_t)R * n, sizeof(float));
                        struct kvb_attn_state st;
                        kvb_attn_begin(&st, R, d, acc[k], p[k], n, seg_j[k], seg_m[k], 8);
                        kvb_attn_run(kr, &v, q, lim, 0, 37, &st);
                        kvb_attn_run(kr, &v, q, lim, 37, n, &st);
                        kvb_attn_end(&st, out[k], lse[k]);
                    }
                    if (memcmp(out[0], out[1], sizeof(float) * (size_t)R * d) || memcmp(lse[0], lse[1], sizeof(float) * (size_t)R) ||
                        memcmp(p[0], p[1], sizeof(float) * (size_t)R * n))
                        FAILF("%s d=%d R=%d %s: the f32 tile's bits differ from the f16 pages'", families[fa]->name, d, R,
                              lay ? "appended" : "shuffled");
                    float col[2][150], s_scr[KVB_ATTN_MAX_ROWS * KVB_ATTN_TILE];
                    for (int k = 0; k < 2; k++) {
                        memset(col[k], 0, sizeof col[k]);
                        kvb_attn_colmass(k ? &direct : families[fa], &v, q, lim, lse[0], R, 1.0f / (float)R, 0, n, col[k], s_scr);
                    }
                    if (memcmp(col[0], col[1], sizeof col[0]))
                        FAILF("%s d=%d R=%d: the column mass over the f32 tile differs from the f16 pages'", families[fa]->name, d, R);
                    for (int r = 0; r < R; r += 7) {
                        double ref[128], w[150];
                        naive(&f, q + (size_t)r * d, lim[r], ref, w);
                        for (int i = 0; i < d; i++)
                            if (fabs(out[0][(size_t)r * d + i] - ref[i]) > 1e-5)
                                FAILF("%s d=%d R=%d row %d dim %d: %.9g vs %.9g", families[fa]->name, d, R, r, i,
                                      (double)out[0][(size_t)r * d + i], ref[i]);
                    }
                    for (int k = 0; k < 2; k++) { free(acc[k]); free(out[k]); free(p[k]); }
                    free(q);
                    fake_free(&f);
                    tested++;
                }
    }
    for (int fa = 0; fa < n_families; fa++)
        if (!strcmp(families[fa]->name, "avx512") && !families[fa]->f16_tile_rows) FAILF("the avx512 family sets no f16_tile_rows");
    if (!tested) SKIP_CASE("no kernel family on this CPU takes f16 tiles (the avx512 family does)");
}

/* Causal prefill rows and the column mass against a materialised reference. */
TEST(prefill_rows_and_column_mass) {
    for (int fa = 0; fa < 2 * n_families; fa++) { /* f32 pages, then q8_0 K with q4_0 V */
        const int d = 32, n = 150, R = 12, n_prev = n - R; /* rows = last 12 keys as queries, causal */
        struct fake f;
        if (fa < n_families) fake_init(&f, n, d, KVB_DTYPE_F32, 5);
        else fake_init2(&f, n, d, KVB_DTYPE_Q8_0, KVB_DTYPE_Q4_0, 5);
        unsigned long long rs = 77;
        float q[12 * 32], acc[12 * 32], out[12 * 32], lse[12], col[150], s_scr[KVB_ATTN_MAX_ROWS * KVB_ATTN_TILE];
        int32_t lim[12];
        for (int i = 0; i < R * d; i++) q[i] = t_randf(&rs);
        for (int r = 0; r < R; r++) lim[r] = n_prev + r + 1;
        struct kvb_attn_state st;
        struct kvb_kv_view v = fake_view(&f);
        kvb_attn_begin(&st, R, d, acc, NULL, 0, NULL, NULL, 0);
        kvb_attn_run(families[fa % n_families], &v, q, lim, 0, 70, &st);
        kvb_attn_run(families[fa % n_families], &v, q, lim, 70, n, &st);
        kvb_attn_end(&st, out, lse);
        memset(col, 0, sizeof col);
        kvb_attn_colmass(families[fa % n_families], &v, q, lim, lse, R, 0.5f, 0, 70, col, s_scr);
        kvb_attn_colmass(families[fa % n_families], &v, q, lim, lse, R, 0.5f, 70, n, col, s_scr);
        /* materialised reference */
        static double W[12][150];
        double ref[32];
        for (int r = 0; r < R; r++) {
            naive(&f, q + r * d, lim[r], ref, W[r]);
            for (int j = lim[r]; j < n; j++) W[r][j] = 0;
            for (int i = 0; i < d; i++)
                if (fabs(out[r * d + i] - ref[i]) > 1e-5) FAILF("%s row %d dim %d: %.9g vs %.9g", families[fa % n_families]->name, r, i, (double)out[r * d + i], ref[i]);
        }
        double total = 0;
        for (int j = 0; j < n; j++) {
            double c = 0;
            for (int r = 0; r < R; r++) c += 0.5 * W[r][j];
            total += col[j];
            if (fabs(col[j] - c) > 1e-5) FAILF("%s column %d: %.9g vs %.9g", families[fa % n_families]->name, j, (double)col[j], c);
        }
        CHECK_NEAR(total, 0.5 * R, 1e-4); /* every row's weights sum to one */
        fake_free(&f);
    }
}

/* Integer scores (q8_0/q4_0 keys against int8 queries): every family's bits
 * are the reference's, over head dims, row counts past the kernels' row
 * groups, tiles starting mid-stream and partial key groups; with extreme
 * codes (q8_0's -128 and 127, q4_0's 0 and 15), a zero key scale and an
 * all-zero query block; and nothing outside the n_rows x nt scores is
 * written. The reference itself against a double dot of the dequantized
 * rows. */
TEST(int8_scores_every_family_equal_reference) {
    const int dims[] = {32, 64, 128, 512};
    const int rows[] = {1, 3, 8, 9, 17, 64};
    const int spans[][2] = {{0, 64}, {5, 17}, {64, 1}, {16, 48}, {100, 30}};
    for (int tq = 0; tq < 2; tq++)
        for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
            const int d = dims[di], n = 130, nb = d / 32;
            const enum kvb_dtype dt = tq ? KVB_DTYPE_Q4_0 : KVB_DTYPE_Q8_0;
            struct fake f;
            fake_init(&f, n, d, dt, 31 + di);
            const struct kvb_kv_view v = fake_view(&f);
            for (int j = 0; j < n; j += 7) { /* extreme codes in some keys, a zero scale in one */
                uint8_t *k = (uint8_t *)kvb_view_k(&v, j);
                const size_t bsz = tq ? 18 : 34;
                for (int b = 0; b < nb; b++) {
                    uint8_t *code = k + (size_t)b * bsz + 2;
                    code[0] = tq ? 0x00 : 0x80; /* -128, or nibbles 0 */
                    code[1] = tq ? 0xFF : 0x7F; /* 127, or nibbles 15 */
                    code[2] = tq ? 0xF0 : 0x80;
                    if (j == 14 && b == 0) memset(k, 0, 2);
                }
                kvb_kv_row_load(dt, k, f.k + (size_t)j * d, d); /* the logical row follows */
            }
            for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
                const int R = rows[ri];
                static float q[64 * 512], qs[512], dq[64 * 16];
                static int8_t code[64 * 512];
                static int16_t sq[64 * 16];
                unsigned long long rs = 7 + ri;
                for (int i = 0; i < R * d; i++) q[i] = t_randf(&rs) * (i % 97 == 0 ? 40.0f : 0.3f);
                for (int i = 0; i < 32 && R > 1; i++) q[d + i] = 0; /* row 1's first block all zero */
                const struct kvb_q8_rows qq = kvb_quantize_q_rows(q, R, d, code, dq, sq);
                for (size_t si = 0; si < sizeof spans / sizeof *spans; si++) {
                    const int j0 = spans[si][0], nt = spans[si][1];
                    static float want[KVB_ATTN_MAX_ROWS * KVB_ATTN_TILE], got[KVB_ATTN_MAX_ROWS * KVB_ATTN_TILE];
                    for (int i = 0; i < KVB_ATTN_MAX_ROWS * KVB_ATTN_TILE; i++) want[i] = NAN;
                    kvb_kernels_ref.scores_i8(&v, &qq, R, j0, nt, want);
                    for (int r = 0; r < R; r++) { /* the reference against doubles */
                        for (int i = 0; i < d; i++) qs[i] = dq[(size_t)r * nb + i / 32] * (float)code[(size_t)r * d + i];
                        for (int t = 0; t < nt; t++) {
                            double e = 0, mag = 0;
                            for (int i = 0; i < d; i++) {
                                e += (double)qs[i] * f.k[(size_t)(j0 + t) * d + i];
                                mag += fabs((double)qs[i] * f.k[(size_t)(j0 + t) * d + i]);
                            }
                            if (fabs(want[r * KVB_ATTN_TILE + t] - e) > 1e-6 * mag + 1e-30)
                                FAILF("ref %s d=%d row %d key %d: %.9g vs %.9g", kvb_dtype_name(dt), d, r, j0 + t,
                                      (double)want[r * KVB_ATTN_TILE + t], e);
                        }
                    }
                    for (int fa = 1; fa < n_families; fa++) {
                        for (int i = 0; i < KVB_ATTN_MAX_ROWS * KVB_ATTN_TILE; i++) got[i] = NAN;
                        families[fa]->scores_i8(&v, &qq, R, j0, nt, got);
                        for (int i = 0; i < KVB_ATTN_MAX_ROWS * KVB_ATTN_TILE; i++) {
                            const int r = i / KVB_ATTN_TILE, t = i % KVB_ATTN_TILE;
                            const bool inside = r < R && t < nt;
                            if (inside ? memcmp(&got[i], &want[i], sizeof(float)) != 0 : got[i] == got[i]) {
                                FAILF("%s %s d=%d rows %d keys [%d, %d): s[%d][%d] = %.9g, ref %.9g", families[fa]->name, kvb_dtype_name(dt), d,
                                      R, j0, j0 + nt, r, t, (double)got[i], (double)want[i]);
                                break;
                            }
                        }
                    }
                }
            }
            fake_free(&f);
        }
}

/* Every family's q8_0/q4_0 row loaders give the scalar dequantizer's bits,
 * on random rows and at the edges (scale +-max f16, codes -127/127, 0/15). */
TEST(kv_row_loaders_equal_dequantizer) {
    static uint8_t row[512 / 32 * 34];
    static float x[512], want[512], got[512];
    for (int fa = 0; fa < n_families; fa++)
        for (int type = 0; type < 2; type++)
            for (int trial = 0; trial < 6; trial++) {
                const int d = 32 * (1 + trial * 3);
                unsigned long long rs = 40 + (unsigned long long)trial;
                for (int i = 0; i < d; i++) x[i] = t_randf(&rs) * (trial == 5 ? 60000.0f : 3.0f);
                const uint32_t gt = type ? GGML_TYPE_Q4_0 : GGML_TYPE_Q8_0;
                CHECK(kvb_quantize_row(gt, x, row, d));
                if (trial == 4) for (int i = 0; i < d / 32 * (type ? 18 : 34); i++) if (i % (type ? 18 : 34) >= 2) row[i] = (uint8_t)(i & 1 ? 0x81 : 0x7f);
                kvb_dequantize_row(gt, row, want, d);
                (type ? families[fa]->from_q4_0 : families[fa]->from_q8_0)(row, got, d);
                if (memcmp(want, got, sizeof(float) * (size_t)d))
                    FAILF("%s %s d=%d trial %d: a loaded row differs from the dequantizer", families[fa]->name, type ? "q4_0" : "q8_0", d, trial);
            }
}

TEST(vexp_matches_expf) {
    for (int fa = 0; fa < n_families; fa++) {
        float x[1000], y[1000];
        unsigned long long rs = 3;
        for (int i = 0; i < 1000; i++) x[i] = y[i] = t_randf(&rs) * 88.0f - (i % 2 ? 10.0f : 0.0f);
        x[0] = y[0] = -INFINITY;
        x[1] = y[1] = 0;
        families[fa]->vexp(y, 1000);
        CHECK(y[0] == 0.0f);
        CHECK_NEAR(y[1], 1.0, 1e-7);
        for (int i = 2; i < 1000; i++) {
            double e = exp((double)x[i]);
            if (e < 1e-37) { CHECK(y[i] < 1e-36); continue; }
            if (fabs(y[i] - e) / e > 3e-7) FAILF("%s exp(%g) = %.9g vs %.9g", families[fa]->name, (double)x[i], (double)y[i], e);
        }
    }
}

/* Recall's page bounds: every family equals the scalar reference on random
 * rows and pages (odd head dims for the tails), to rounding of the sum. */
/* The driver's per-row max and sum give a plain in-order loop's bits for
 * every row count (the 8- and 4-row groups and the rest) and tile length, on
 * values whose sums round differently in any other order. */
TEST(row_max_and_sum_are_in_order) {
    static float s[KVB_ATTN_MAX_ROWS * KVB_ATTN_TILE];
    unsigned long long rs = 5;
    for (int i = 0; i < KVB_ATTN_MAX_ROWS * KVB_ATTN_TILE; i++) {
        const float u = t_randf(&rs);
        s[i] = i % 97 == 0 ? -INFINITY : (i % 5 == 0 ? 1e7f : 1.0f) * u; /* masked scores are -inf */
    }
    int checked = 0;
    for (int32_t R = 1; R <= 21; R++)
        for (int32_t nt = 1; nt <= KVB_ATTN_TILE; nt += (nt < 8 ? 1 : 7)) {
            float mx[KVB_ATTN_MAX_ROWS], sm[KVB_ATTN_MAX_ROWS];
            kvb_attn_row_max(s, R, nt, mx);
            kvb_attn_row_sum(s, R, nt, sm);
            for (int32_t r = 0; r < R; r++) {
                float m = -INFINITY, a = 0, rev = 0;
                for (int32_t t = 0; t < nt; t++) {
                    const float v = s[r * KVB_ATTN_TILE + t];
                    m = v > m ? v : m;
                    a += v;
                }
                for (int32_t t = nt - 1; t >= 0; t--) rev += s[r * KVB_ATTN_TILE + t];
                if (memcmp(&m, &mx[r], sizeof m) || memcmp(&a, &sm[r], sizeof a))
                    FAILF("R=%d nt=%d row %d: max %.9g sum %.9g, in order %.9g %.9g", (int)R, (int)nt, (int)r, mx[r], sm[r], m, a);
                checked += memcmp(&a, &rev, sizeof a) != 0; /* the data can tell the orders apart */
            }
        }
    CHECK(checked > 100);
}

TEST(page_bounds_equal_reference) {
    const int dims[4] = {8, 13, 64, 128};
    for (int di = 0; di < 4; di++) {
        const int d = dims[di], R = 5;
        const int64_t P = 37;
        float *q = malloc(sizeof(float) * (size_t)R * d), *lohi = malloc(sizeof(float) * 2 * (size_t)d * P);
        float want[37], got[37];
        for (int i = 0; i < R * d; i++) q[i] = (float)((i * 7919 % 201) - 100) / 37.0f;
        for (int64_t p = 0; p < P; p++)
            for (int c = 0; c < d; c++) {
                const float a = (float)(((p * 31 + c * 17) % 97) - 48) / 11.0f, b = a + (float)((p + c) % 7) / 3.0f;
                lohi[p * 2 * d + c] = a;
                lohi[p * 2 * d + d + c] = b;
            }
        for (int64_t p = 0; p < P; p++) {
            want[p] = -INFINITY;
            for (int r = 0; r < R; r++) want[p] = fmaxf(want[p], kvb_page_bound_ref(q + r * d, lohi + p * 2 * d, lohi + p * 2 * d + d, d));
        }
        for (int fa = 0; fa < n_families; fa++) {
            families[fa]->page_bounds(q, R, lohi, P, d, got);
            for (int64_t p = 0; p < P; p++)
                if (fabsf(got[p] - want[p]) > 1e-4f * (1.0f + fabsf(want[p])))
                    FAILF("%s d %d page %lld: %g, reference %g", families[fa]->name, d, (long long)p, got[p], want[p]);
        }
        free(q);
        free(lohi);
    }
}

int main(void) {
    find_families();
    printf("kernel families on this CPU: %d\n", n_families);
    RUN(decode_matches_naive_every_family);
    RUN(latent_views_read_values_in_the_key_row_every_family);
    RUN(sinks_take_their_share);
    RUN(prefill_rows_and_column_mass);
    RUN(f16_tiles_for_many_rows_are_the_direct_bits);
    RUN(runs_may_bring_other_query_rows);
    RUN(int8_scores_every_family_equal_reference);
    RUN(vexp_matches_expf);
    RUN(kv_row_loaders_equal_dequantizer);
    RUN(page_bounds_equal_reference);
    RUN(row_max_and_sum_are_in_order);
    return test_summary();
}
