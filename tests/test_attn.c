/*
 * test_attn.c — attention kernels against a naive two-pass reference written
 * here (double precision, materialised scores), for every kernel family the
 * CPU has, F32 and F16 rows, several head dims, group sizes and lengths:
 * outputs within 1e-5 (F32), returned weights summing to 1 +- 1e-5, and the
 * prefill column mass against a materialised T x T reference.
 */
#include "testing.h"
#include "ops/ops.h"

static const struct kvb_kernels *families[3];
static int n_families;

static void find_families(void) {
    families[n_families++] = &kvb_kernels_ref;
#if defined(__x86_64__)
    if (kvb_cpu_has_avx2()) families[n_families++] = &kvb_kernels_avx2;
    if (kvb_cpu_has_avx512()) families[n_families++] = &kvb_kernels_avx512;
#endif
}

/* A fake stream: n rows in pages of B=4 slots, physical order scrambled. */
struct fake {
    int n, d, B;
    enum kvb_dtype dt;
    uint8_t **pages;
    int32_t *slots;
    float *k, *v; /* logical rows as the kernels will see them (after f16 rounding) */
    size_t row_bytes;
};

static void fake_init(struct fake *f, int n, int d, enum kvb_dtype dt, unsigned long long seed) {
    f->n = n; f->d = d; f->B = 4; f->dt = dt;
    f->row_bytes = kvb_dtype_row_bytes(dt, d);
    int n_pages = (n + f->B - 1) / f->B + 1;
    f->pages = calloc((size_t)n_pages, sizeof(uint8_t *));
    for (int p = 0; p < n_pages; p++) f->pages[p] = calloc(1, 2 * (size_t)f->B * f->row_bytes);
    f->slots = malloc(sizeof(int32_t) * (size_t)n);
    int cap = n_pages * f->B;
    int *perm = malloc(sizeof(int) * (size_t)cap);
    for (int i = 0; i < cap; i++) perm[i] = i;
    unsigned long long rs = seed;
    for (int i = cap - 1; i > 0; i--) {
        int j = (int)(t_rng_next(&rs) % (unsigned)(i + 1));
        int t = perm[i]; perm[i] = perm[j]; perm[j] = t;
    }
    f->k = malloc(sizeof(float) * (size_t)n * d);
    f->v = malloc(sizeof(float) * (size_t)n * d);
    for (int j = 0; j < n; j++) {
        f->slots[j] = perm[j];
        uint8_t *kr = f->pages[perm[j] / f->B] + (size_t)(perm[j] % f->B) * f->row_bytes;
        uint8_t *vr = kr + (size_t)f->B * f->row_bytes;
        for (int i = 0; i < d; i++) {
            float kv = t_randf(&rs) * 2, vv = t_randf(&rs);
            if (dt == KVB_DTYPE_F16) {
                uint16_t hk = kvb_f32_to_f16(kv), hv = kvb_f32_to_f16(vv);
                memcpy(kr + 2 * i, &hk, 2);
                memcpy(vr + 2 * i, &hv, 2);
                kv = kvb_f16_to_f32(hk);
                vv = kvb_f16_to_f32(hv);
            } else {
                memcpy(kr + 4 * i, &kv, 4);
                memcpy(vr + 4 * i, &vv, 4);
            }
            f->k[(size_t)j * d + i] = kv;
            f->v[(size_t)j * d + i] = vv;
        }
    }
    free(perm);
}

static struct kvb_kv_view fake_view(const struct fake *f) {
    struct kvb_kv_view v = {f->pages, f->slots, f->n, 2, f->d, f->row_bytes, f->row_bytes, (size_t)f->B * f->row_bytes, f->dt, f->dt};
    return v;
}

static void fake_free(struct fake *f) {
    int n_pages = (f->n + f->B - 1) / f->B + 1;
    for (int p = 0; p < n_pages; p++) free(f->pages[p]);
    free(f->pages); free(f->slots); free(f->k); free(f->v);
}

/* Naive reference: row r sees keys [0, lim); two passes in double. */
static void naive(const struct fake *f, const float *q, int lim, double *out, double *w) {
    const int d = f->d;
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

TEST(decode_matches_naive_every_family) {
    const int dims[] = {8, 16, 64, 80, 128};
    const int groups[] = {1, 4, 7};
    const int lens[] = {1, 5, 64, 65, 130};
    for (int fa = 0; fa < n_families; fa++)
        for (int dti = 0; dti < 2; dti++)
            for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
                for (size_t gi = 0; gi < 3; gi++)
                    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
                        const int d = dims[di], G = groups[gi], n = lens[li];
                        const enum kvb_dtype dt = dti ? KVB_DTYPE_F16 : KVB_DTYPE_F32;
                        struct fake f;
                        fake_init(&f, n, d, dt, 100 + di * 7 + gi * 3 + li);
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
                                    FAILF("%s %s d=%d G=%d n=%d head %d dim %d: %.9g vs %.9g", families[fa]->name,
                                          kvb_dtype_name(dt), d, G, n, g, i, (double)out[(size_t)g * d + i], ref[i]);
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

/* Causal prefill rows and the column mass against a materialised reference. */
TEST(prefill_rows_and_column_mass) {
    for (int fa = 0; fa < n_families; fa++) {
        const int d = 32, n = 150, R = 12, n_prev = n - R; /* rows = last 12 keys as queries, causal */
        struct fake f;
        fake_init(&f, n, d, KVB_DTYPE_F32, 5);
        unsigned long long rs = 77;
        float q[12 * 32], acc[12 * 32], out[12 * 32], lse[12], col[150], s_scr[KVB_ATTN_MAX_ROWS * KVB_ATTN_TILE];
        int32_t lim[12];
        for (int i = 0; i < R * d; i++) q[i] = t_randf(&rs);
        for (int r = 0; r < R; r++) lim[r] = n_prev + r + 1;
        struct kvb_attn_state st;
        struct kvb_kv_view v = fake_view(&f);
        kvb_attn_begin(&st, R, d, acc, NULL, 0, NULL, NULL, 0);
        kvb_attn_run(families[fa], &v, q, lim, 0, 70, &st);
        kvb_attn_run(families[fa], &v, q, lim, 70, n, &st);
        kvb_attn_end(&st, out, lse);
        memset(col, 0, sizeof col);
        kvb_attn_colmass(families[fa], &v, q, lim, lse, R, 0.5f, 0, 70, col, s_scr);
        kvb_attn_colmass(families[fa], &v, q, lim, lse, R, 0.5f, 70, n, col, s_scr);
        /* materialised reference */
        static double W[12][150];
        double ref[32];
        for (int r = 0; r < R; r++) {
            naive(&f, q + r * d, lim[r], ref, W[r]);
            for (int j = lim[r]; j < n; j++) W[r][j] = 0;
            for (int i = 0; i < d; i++)
                if (fabs(out[r * d + i] - ref[i]) > 1e-5) FAILF("%s row %d dim %d: %.9g vs %.9g", families[fa]->name, r, i, (double)out[r * d + i], ref[i]);
        }
        double total = 0;
        for (int j = 0; j < n; j++) {
            double c = 0;
            for (int r = 0; r < R; r++) c += 0.5 * W[r][j];
            total += col[j];
            if (fabs(col[j] - c) > 1e-5) FAILF("%s column %d: %.9g vs %.9g", families[fa]->name, j, (double)col[j], c);
        }
        CHECK_NEAR(total, 0.5 * R, 1e-4); /* every row's weights sum to one */
        fake_free(&f);
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

int main(void) {
    find_families();
    printf("kernel families on this CPU: %d\n", n_families);
    RUN(decode_matches_naive_every_family);
    RUN(prefill_rows_and_column_mass);
    RUN(vexp_matches_expf);
    return test_summary();
}
