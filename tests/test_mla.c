/*
 * test_mla.c — the cache holding latent rows (kvb_cache_params.head_dim_v):
 * multi-head latent attention (DeepSeek-V2/V3, Kimi-K2) in the absorbed
 * form, where every query head attends over one shared row per token,
 * K = [k_pe (rotated) | c_kv (the latent)], and the value is that row's
 * latent tail.
 *
 * The references here are written independently of the library, in double:
 *   - the NON-absorbed (textbook) form: per head h, k_h = [W_kb[h] c ; RoPE(k_pe)],
 *     v_h = W_vb[h] c, q_h = [q_nope ; RoPE(q_pe)], softmax over exactly the
 *     tokens the cache kept; the cache's absorbed outputs (q_nope taken into
 *     the latent space by W_kb[h]^T, W_vb[h] applied to its latent output)
 *     must equal it, so evicting a latent row removes that token from every
 *     head at once;
 *   - the same cache with explicit V rows (head_dim_v 0, V = [c | 0]): the
 *     latent cache gives the same bits and makes the same eviction
 *     decisions, for every row type and policy, on the dispatched kernels
 *     and on the scalar reference.
 * Then images and forks of a latent cache continue bit for bit (recall,
 * the pinned span and windows included), bad values are refused by name,
 * the sizing rule for K-only pages (kvb_kv_seq_bytes_latent) holds, the
 * cold tier's file holds K rows only, and more query heads than one driver
 * call's 64 rows (DeepSeek-V3's 128) attend in groups.
 */
#include "cache_helpers.h"
#include "core/core.h"
#include "ops/ops.h"

#include <dirent.h>
#include <unistd.h>

#define NROT 32  /* k_pe / q_pe: the rotated dims (rope.n_dims) */
#define RANK 64  /* kv_lora_rank: the latent, head_dim_v */
#define D (NROT + RANK)
#define HMAX 80  /* query heads over one shared latent row (n_kv_head 1): NH of them, up to HMAX */
#define NOPE 16  /* qk_nope_head_dim */
#define DVH 16   /* v_head_dim */
#define NTOK 64  /* tokens of a run: prompt then decode */
#define PROMPT 20

struct mla {
    float wkb[HMAX][NOPE][RANK], wvb[HMAX][DVH][RANK];
    float c[NTOK][RANK], kpe[NTOK][NROT];
    float qn[NTOK][HMAX][NOPE], qp[NTOK][HMAX][NROT];
};

static struct mla M;
static int NH = 4; /* the heads of the run: 4, or 80 (more than a driver call's 64 rows: groups) */

static void mla_init(unsigned long long seed) {
    unsigned long long rs = seed;
    const float sw = 1.0f / sqrtf((float)RANK);
    for (int h = 0; h < NH; h++) {
        for (int i = 0; i < NOPE; i++)
            for (int r = 0; r < RANK; r++) M.wkb[h][i][r] = t_randf(&rs) * 4 * sw;
        for (int i = 0; i < DVH; i++)
            for (int r = 0; r < RANK; r++) M.wvb[h][i][r] = t_randf(&rs) * 2 * sw;
    }
    for (int t = 0; t < NTOK; t++) {
        for (int r = 0; r < RANK; r++) M.c[t][r] = t_randf(&rs) * 2;
        for (int i = 0; i < NROT; i++) M.kpe[t][i] = t_randf(&rs) * 2;
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < NOPE; i++) M.qn[t][h][i] = t_randf(&rs) * 2;
            for (int i = 0; i < NROT; i++) M.qp[t][h][i] = t_randf(&rs) * 2;
        }
    }
}

static const struct kvb_rope ROPE = {.type = KVB_ROPE_NEOX, .n_dims = NROT, .base = 10000.0f, .freq_scale = 1.0f};
static const double SCALE = 0.2; /* the model's kq_scale: 1/sqrt(NOPE + NROT) = 0.2 */

/* The engine's rows of token t: q [NH][D] (absorbed, pre-scaled so the
 * cache's 1/sqrt(D) gives SCALE), k [D] = [k_pe | c], v [D] = [c | 0]
 * (explicit V rows only). */
static void rows_of(int t, float *q, float *k, float *v) {
    const float pre = (float)(SCALE * sqrt((double)D));
    for (int h = 0; h < NH; h++) {
        float *qh = q + (size_t)h * D;
        for (int i = 0; i < NROT; i++) qh[i] = M.qp[t][h][i] * pre;
        for (int r = 0; r < RANK; r++) {
            double a = 0;
            for (int i = 0; i < NOPE; i++) a += (double)M.wkb[h][i][r] * M.qn[t][h][i];
            qh[NROT + r] = (float)a * pre;
        }
    }
    memcpy(k, M.kpe[t], sizeof(float) * NROT);
    memcpy(k + NROT, M.c[t], sizeof(float) * RANK);
    if (v) {
        memcpy(v, M.c[t], sizeof(float) * RANK);
        memset(v + RANK, 0, sizeof(float) * NROT);
    }
}

/* The non-absorbed float64 reference: head h of query token tq (at its
 * position) over the tokens toks[0..n), each at its position; y [DVH]. */
static void reference(int tq, int h, const int *toks, int n, double *y) {
    double qpe[NROT], kpe[NROT], *s = malloc(sizeof(double) * (size_t)n), mx = -1e300;
    ref_rope(&ROPE, M.qp[tq][h], NROT, tq, qpe);
    for (int j = 0; j < n; j++) {
        const int t = toks[j];
        double a = 0;
        for (int i = 0; i < NOPE; i++) { /* q_nope . (W_kb c) */
            double kn = 0;
            for (int r = 0; r < RANK; r++) kn += (double)M.wkb[h][i][r] * M.c[t][r];
            a += M.qn[tq][h][i] * kn;
        }
        ref_rope(&ROPE, M.kpe[t], NROT, t, kpe);
        for (int i = 0; i < NROT; i++) a += qpe[i] * kpe[i];
        s[j] = a * SCALE;
        if (s[j] > mx) mx = s[j];
    }
    double sum = 0;
    for (int j = 0; j < n; j++) sum += (s[j] = exp(s[j] - mx));
    for (int i = 0; i < DVH; i++) y[i] = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < DVH; i++) {
            double v = 0; /* v_h = W_vb[h] c */
            for (int r = 0; r < RANK; r++) v += (double)M.wvb[h][i][r] * M.c[toks[j]][r];
            y[i] += s[j] / sum * v;
        }
    free(s);
}

/* Head h's latent output o [RANK] through W_vb[h]. */
static void up_project(int h, const float *o, double *y) {
    for (int i = 0; i < DVH; i++) {
        double a = 0;
        for (int r = 0; r < RANK; r++) a += (double)M.wvb[h][i][r] * o[r];
        y[i] = a;
    }
}

static struct kvb_cache_params latent_params(enum kvb_policy_id pid, enum kvb_dtype dt, bool latent) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = D;
    cp.head_dim_v = latent ? RANK : 0;
    cp.rope = ROPE;
    cp.kv.kv_dtype = dt;
    cp.kv.block_size = 8;
    cp.kv.policy = kvb_policy_default_params(pid);
    if (pid != KVB_POLICY_FULL) cp.kv.policy.budget = 12;
    cp.kv.policy.n_sink = 2;
    cp.kv.policy.obs_window = 4;
    cp.kv.policy.decode_budget = 6;
    cp.pool_bytes = 4 << 20;
    return cp;
}

/* The tokens stream 0 holds now, by position. */
static int kept(const struct kvb_cache *c, int *toks) {
    const int n = kvb_cache_n_slots(c, 0, 0);
    for (int j = 0; j < n; j++) {
        struct kvb_slot_info si;
        if (kvb_cache_slot_info(c, 0, 0, j, &si) != KVB_OK) return -1;
        toks[j] = (int)si.pos_original;
    }
    return n;
}

/* Max |cache - reference| over heads of query token tq whose latent outputs
 * are o [NH][RANK], the keys being toks[0..n). */
static double max_err(int tq, const float *o, const int *toks, int n) {
    double e = 0, y[DVH], r[DVH];
    for (int h = 0; h < NH; h++) {
        up_project(h, o + (size_t)h * RANK, y);
        reference(tq, h, toks, n, r);
        for (int i = 0; i < DVH; i++) e = fmax(e, fabs(y[i] - r[i]));
    }
    return e;
}

/* The policies with a bounded cache that the tests walk: a heavy-hitter
 * score from this attention (h2o), a prompt vote (snapkv), and positions
 * alone (streaming). */
static const enum kvb_policy_id BOUNDED[] = {KVB_POLICY_H2O, KVB_POLICY_SNAPKV, KVB_POLICY_STREAMING};

TEST(latent_attention_with_eviction_equals_float64_reference_every_head) {
    mla_init(51);
    for (size_t pi = 0; pi < sizeof BOUNDED / sizeof BOUNDED[0]; pi++) {
        struct kvb_cache_params cp = latent_params(BOUNDED[pi], KVB_DTYPE_F32, true);
        cp.kv.pos_mode = KVB_POS_ORIGINAL; /* every key at its own position, as the reference */
        struct kvb_cache *c;
        CHECK_OK(kvb_cache_init(NULL, &cp, &c));
        static float q[PROMPT][HMAX * D], k[PROMPT][D], o[PROMPT][HMAX * RANK];
        int before[NTOK], nb = 0, toks[NTOK];
        double worst = 0, all_err = 0;
        /* the prompt in two chunks: token i sees what was kept before its chunk and the chunk up to itself */
        for (int c0 = 0; c0 < PROMPT; c0 += PROMPT / 2) {
            const int C = PROMPT / 2;
            for (int i = 0; i < C; i++) rows_of(c0 + i, q[0] + (size_t)i * NH * D, k[i], NULL);
            CHECK_OK(kvb_cache_prefill(c, 0, C, q[0], NH, k[0], NULL, o[0], NULL));
            for (int i = 0; i < C; i++) {
                memcpy(toks, before, sizeof(int) * (size_t)nb);
                for (int j = 0; j <= i; j++) toks[nb + j] = c0 + j;
                worst = fmax(worst, max_err(c0 + i, o[0] + (size_t)i * NH * RANK, toks, nb + i + 1));
            }
            nb = kept(c, before);
        }
        kvb_cache_compress(c, NULL);
        nb = kept(c, before);
        for (int t = PROMPT; t < NTOK; t++) {
            rows_of(t, q[0], k[0], NULL);
            CHECK_OK(kvb_cache_decode(c, 0, q[0], NH, k[0], NULL, o[0], NULL));
            memcpy(toks, before, sizeof(int) * (size_t)nb);
            toks[nb] = t;
            worst = fmax(worst, max_err(t, o[0], toks, nb + 1));
            if (t == NTOK - 1) { /* the same step over every token: what an eviction that left a head its token would give */
                int every[NTOK];
                for (int j = 0; j <= t; j++) every[j] = j;
                all_err = max_err(t, o[0], every, t + 1);
            }
            nb = kept(c, before);
        }
        if (getenv("MLA_DEBUG")) printf("  %s: worst %g, every %g\n", kvb_policy_name(BOUNDED[pi]), worst, all_err);
        if (worst > 2e-4) FAILF("%s: absorbed latent attention differs from the float64 per-head reference by %g", kvb_policy_name(BOUNDED[pi]), worst);
        if (nb >= NTOK - 8) FAILF("%s: only %d of %d tokens evicted: the check would not see eviction", kvb_policy_name(BOUNDED[pi]), NTOK - nb, NTOK);
        if (all_err < 1e-2) FAILF("%s: the reference over every token is as close (%g): the evicted tokens do not matter here", kvb_policy_name(BOUNDED[pi]), all_err);
        kvb_cache_free(c);
    }
}

static const enum kvb_dtype TYPES[] = {KVB_DTYPE_F32, KVB_DTYPE_F16, KVB_DTYPE_BF16, KVB_DTYPE_Q8_0, KVB_DTYPE_Q4_0};

/* Steps [t0, t1) of a run (the prompt in two chunks of PROMPT / 2, the
 * compress, then decode to NTOK) on c, appending explicit V rows when
 * explicit_v; outputs [NTOK][NH][RANK] and the positions held after each
 * step [NTOK][NTOK] (-1 past the end). */
static kvb_status steps(struct kvb_cache *c, bool explicit_v, int t0, int t1, float *outs, int *held) {
    static float q[PROMPT][HMAX * D], k[PROMPT][D], v[PROMPT][D], o[PROMPT][HMAX * D];
    const int ow = explicit_v ? D : RANK; /* out's row: head_dim, or head_dim_v */
    kvb_status st = KVB_OK;
    for (int c0 = t0; c0 < t1 && st == KVB_OK;) {
        const int C = c0 < PROMPT ? PROMPT / 2 : 1;
        for (int i = 0; i < C; i++) rows_of(c0 + i, q[0] + (size_t)i * NH * D, k[i], v[i]);
        if ((c0 & 1) && (st = kvb_cache_reserve(c, C, NH)) != KVB_OK) break; /* a batch's step: pages taken first */
        if (c0 < PROMPT) st = kvb_cache_prefill(c, 0, C, q[0], NH, k[0], explicit_v ? v[0] : NULL, o[0], NULL);
        else st = kvb_cache_decode(c, 0, q[0], NH, k[0], explicit_v ? v[0] : NULL, o[0], NULL);
        if (c0 + C == PROMPT) kvb_cache_compress(c, NULL);
        for (int i = 0; i < C; i++)
            for (int h = 0; h < NH; h++) memcpy(outs + ((size_t)(c0 + i) * NH + h) * RANK, o[0] + ((size_t)i * NH + h) * ow, sizeof(float) * RANK);
        c0 += C;
        for (int j = 0; j < NTOK; j++) held[(size_t)(c0 - 1) * NTOK + j] = -1;
        kept(c, held + (size_t)(c0 - 1) * NTOK);
    }
    return st;
}

static kvb_status run_cache(const struct kvb_cache_params *cp, bool explicit_v, float *outs, int *held) {
    struct kvb_cache *c;
    kvb_status st = kvb_cache_init(NULL, cp, &c);
    if (st != KVB_OK) return st;
    for (int i = 0; i < NTOK * NTOK; i++) held[i] = -1;
    st = steps(c, explicit_v, 0, NTOK, outs, held);
    kvb_cache_free(c);
    return st;
}

/* The configurations the bit checks walk: policies with the positions
 * they choose, and recall (the cold tier holds K rows only) with original
 * and capped positions (capped: far keys are read from the area's shadow). */
struct config {
    enum kvb_policy_id pid;
    int recall;
    enum kvb_pos_mode pos;
    int keep, window; /* kv.keep; a sliding window (kv.layers) of this many tokens */
};
static const struct config CONFIGS[] = {
    {KVB_POLICY_H2O, 0, KVB_POS_POLICY_DEFAULT, 0, 0},       {KVB_POLICY_SNAPKV, 0, KVB_POS_POLICY_DEFAULT, 0, 0},
    {KVB_POLICY_STREAMING, 0, KVB_POS_POLICY_DEFAULT, 0, 0}, {KVB_POLICY_TOVA, 0, KVB_POS_POLICY_DEFAULT, 0, 0},
    {KVB_POLICY_FULL, 0, KVB_POS_POLICY_DEFAULT, 0, 0},      {KVB_POLICY_H2O, 2, KVB_POS_ORIGINAL, 0, 0},
    {KVB_POLICY_STREAMING, 2, KVB_POS_CAPPED, 0, 0},         {KVB_POLICY_H2O, 0, KVB_POS_POLICY_DEFAULT, 5, 0},
    {KVB_POLICY_FULL, 0, KVB_POS_POLICY_DEFAULT, 0, 10},
    /* the policies that read rows themselves: keydiff the keys, expected-attention the values (its norm over value_dim) */
    {KVB_POLICY_KEYDIFF, 0, KVB_POS_POLICY_DEFAULT, 0, 0},   {KVB_POLICY_EXPECTED_ATTENTION, 0, KVB_POS_POLICY_DEFAULT, 0, 0},
};

static struct kvb_cache_params config_params(const struct config *cf, enum kvb_dtype dt, bool latent) {
    struct kvb_cache_params cp = latent_params(cf->pid, dt, latent);
    cp.kv.pos_mode = cf->pos;
    if (cf->pos == KVB_POS_CAPPED) cp.kv.max_distance = 16;
    cp.kv.recall.pages = cf->recall;
    if (cf->recall) cp.kv.recall.cold_mem_bytes = 1 << 20;
    cp.kv.keep = cf->keep;
    static struct kvb_kv_layer win;
    if (cf->window) {
        win.layer = 0;
        win.policy = kvb_policy_default_params(KVB_POLICY_WINDOW);
        win.policy.budget = cf->window;
        win.policy.n_sink = 0;
        cp.kv.layers = &win;
        cp.kv.n_layers = 1;
    }
    return cp;
}

static const char *config_name(const struct config *cf) {
    static char buf[64];
    snprintf(buf, sizeof buf, "%s%s%s%s%s", kvb_policy_name(cf->pid), cf->recall ? " +recall" : "", cf->pos == KVB_POS_CAPPED ? " capped" : "",
             cf->keep ? " +keep" : "", cf->window ? " window" : "");
    return buf;
}

TEST(latent_rows_equal_explicit_v_rows_bit_for_bit_every_row_type_and_policy) {
    mla_init(52);
    static float a[NTOK * HMAX * RANK], b[NTOK * HMAX * RANK];
    static int ha[NTOK * NTOK], hb[NTOK * NTOK];
    for (int ref = 0; ref < 2; ref++) {
        kvb_kernels_force_ref(ref == 1); /* the dispatched family, then the scalar reference */
        for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++)
            for (size_t ci = 0; ci < sizeof CONFIGS / sizeof CONFIGS[0]; ci++) {
                const struct config *cf = &CONFIGS[ci];
                const struct kvb_cache_params lp = config_params(cf, TYPES[ti], true), ep = config_params(cf, TYPES[ti], false);
                CHECK_OK(run_cache(&lp, false, a, ha));
                CHECK_OK(run_cache(&ep, true, b, hb));
                if (memcmp(ha, hb, sizeof ha))
                    FAILF("%s %s (%s kernels): the latent cache kept other tokens than explicit V rows", config_name(cf), kvb_dtype_name(TYPES[ti]),
                          ref ? "ref" : "dispatched");
                for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
                    if (memcmp(&a[i], &b[i], sizeof(float)))
                        FAILF("%s %s (%s kernels): output %zu is %.9g with latent rows, %.9g with explicit V rows", config_name(cf),
                              kvb_dtype_name(TYPES[ti]), ref ? "ref" : "dispatched", i, (double)a[i], (double)b[i]);
                if ((cf->pid != KVB_POLICY_FULL || cf->window) && ha[(NTOK - 1) * NTOK + 20] >= 0) FAILF("%s: nothing evicted", config_name(cf));
                if (cf->keep && ha[(NTOK - 1) * NTOK + cf->keep - 1] != cf->keep - 1) FAILF("%s: the pinned span was evicted", config_name(cf));
                /* a page holds K rows only */
                CHECK_EQ_INT(kvb_cache_page_bytes(&lp), 8 * kvb_dtype_row_bytes(TYPES[ti], D));
                CHECK_EQ_INT(kvb_cache_page_bytes(&ep), 2 * kvb_cache_page_bytes(&lp));
            }
    }
    kvb_kernels_force_ref(false);
}

static struct kvb_pool *pool_for(const struct kvb_cache_params *cp) {
    struct kvb_pool_params pp = kvb_pool_default_params();
    pp.page_bytes = kvb_cache_page_bytes(cp);
    pp.capacity_bytes = 4 << 20;
    struct kvb_pool *p;
    return kvb_pool_init(&pp, &p) == KVB_OK ? p : NULL;
}

/* A latent cache saved (and restored) or forked mid-run continues exactly
 * as the cache that never stopped: outputs and kept tokens bit for bit,
 * every row type and configuration (a fork without recall: the cold tier is
 * per cache), the image restoring head_dim_v. */
TEST(latent_image_and_fork_continue_bit_for_bit) {
    mla_init(53);
    static float a[NTOK * HMAX * RANK], b[NTOK * HMAX * RANK], f[NTOK * HMAX * RANK];
    static int ha[NTOK * NTOK], hb[NTOK * NTOK], hf[NTOK * NTOK];
    const int cut = PROMPT + 13;
    for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++)
        for (size_t ci = 0; ci < sizeof CONFIGS / sizeof CONFIGS[0]; ci++) {
            const struct config *cf = &CONFIGS[ci];
            const struct kvb_cache_params cp = config_params(cf, TYPES[ti], true);
            struct kvb_pool *pool = pool_for(&cp);
            CHECK(pool != NULL);
            struct kvb_cache *c, *r = NULL, *fk = NULL;
            CHECK_OK(kvb_cache_init(pool, &cp, &c));
            for (int i = 0; i < NTOK * NTOK; i++) ha[i] = hb[i] = hf[i] = -1;
            CHECK_OK(steps(c, false, 0, cut, a, ha));
            void *img;
            size_t len;
            CHECK_OK(kvb_cache_save(c, &img, &len));
            CHECK_OK(kvb_cache_load(pool, img, len, 0, &r));
            kvb_buffer_free(img);
            struct kvb_cache_params got;
            kvb_cache_get_params(r, &got);
            CHECK_EQ_INT(got.head_dim_v, RANK);
            if (!cf->recall) CHECK_OK(kvb_cache_fork(c, &fk));
            CHECK_OK(steps(c, false, cut, NTOK, a, ha));
            CHECK_OK(steps(r, false, cut, NTOK, b, hb));
            struct kvb_cache_stats cs;
            kvb_cache_get_stats(c, &cs);
            if (cf->recall && (cs.cold_pages < 2 || cs.recall_loads < 2))
                FAILF("%s %s: %lld cold pages, %lld loads: recall was not exercised", config_name(cf), kvb_dtype_name(TYPES[ti]),
                      (long long)cs.cold_pages, (long long)cs.recall_loads);
            if (fk) CHECK_OK(steps(fk, false, cut, NTOK, f, hf));
            const size_t from = (size_t)cut * NH * RANK;
            if (memcmp(a + from, b + from, sizeof(float) * (NTOK * NH * RANK - from)) || memcmp(ha + cut * NTOK, hb + cut * NTOK, sizeof(int) * (NTOK - cut) * NTOK))
                FAILF("%s %s: the restored latent cache does not continue bit for bit", config_name(cf), kvb_dtype_name(TYPES[ti]));
            if (fk && (memcmp(a + from, f + from, sizeof(float) * (NTOK * NH * RANK - from)) || memcmp(ha + cut * NTOK, hf + cut * NTOK, sizeof(int) * (NTOK - cut) * NTOK)))
                FAILF("%s %s: the fork of a latent cache does not continue bit for bit", config_name(cf), kvb_dtype_name(TYPES[ti]));
            kvb_cache_free(fk);
            kvb_cache_free(r);
            kvb_cache_free(c);
            kvb_pool_free(pool);
        }
}

/* An image's head_dim_v (flags bit 512) is checked like the params: a
 * value out of range, one that would rotate the value, or 0 with the flag
 * is refused by name; an image without the flag (every image before it)
 * restores head_dim_v 0. */
TEST(latent_image_bad_head_dim_v_refused_by_name_older_images_load_as_0) {
    mla_init(54);
    struct kvb_cache_params cp = latent_params(KVB_POLICY_H2O, KVB_DTYPE_F32, true);
    struct kvb_cache *c, *r;
    static float outs[NTOK * HMAX * RANK];
    static int held[NTOK * NTOK];
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    CHECK_OK(steps(c, false, 0, PROMPT + 4, outs, held));
    uint8_t *img;
    size_t len;
    CHECK_OK(kvb_cache_save(c, (void **)&img, &len));
    kvb_cache_free(c);
    /* magic, version, flags; 7 params; rope (5); the policy (16); max_distance, n_state: then head_dim_v */
    const size_t at = 16 + 7 * 4 + 5 * 4 + 16 * 4 + 2 * 4;
    uint32_t flags;
    int32_t got;
    memcpy(&flags, img + 12, 4);
    memcpy(&got, img + at, 4);
    CHECK_EQ_INT(flags & 512u, 512u);
    CHECK_EQ_INT(got, RANK);
    const struct { int32_t v; const char *says; } bad[] = {{0, "head_dim_v 0 with flags 512"}, {-3, "head_dim_v -3"},
                                                          {D + 1, "head_dim_v must be in 0..head_dim"}, {D - NROT + 8, "rope.n_dims 32 + head_dim_v"},
                                                          {D - 8, "rope.n_dims 32 + head_dim_v"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t *e = malloc(len);
        memcpy(e, img, len);
        memcpy(e + at, &bad[i].v, 4);
        const uint32_t crc = kvb_crc32(0, e, len - 4);
        memcpy(e + len - 4, &crc, 4);
        const kvb_status st = kvb_cache_load(NULL, e, len, 4 << 20, &r);
        free(e);
        if (st == KVB_OK) FAILF("head_dim_v %d loaded", (int)bad[i].v);
        if (!strstr(kvb_last_error(), bad[i].says)) FAILF("head_dim_v %d: \"%s\" does not say \"%s\"", (int)bad[i].v, kvb_last_error(), bad[i].says);
    }
    kvb_buffer_free(img);
    /* explicit V rows: no flag, head_dim_v 0 back */
    cp = latent_params(KVB_POLICY_H2O, KVB_DTYPE_F32, false);
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    CHECK_OK(steps(c, true, 0, PROMPT + 4, outs, held));
    CHECK_OK(kvb_cache_save(c, (void **)&img, &len));
    memcpy(&flags, img + 12, 4);
    CHECK_EQ_INT(flags & 512u, 0);
    CHECK_OK(kvb_cache_load(NULL, img, len, 4 << 20, &r));
    struct kvb_cache_params gp;
    kvb_cache_get_params(r, &gp);
    CHECK_EQ_INT(gp.head_dim_v, 0);
    kvb_buffer_free(img);
    kvb_cache_free(r);
    kvb_cache_free(c);
}

/* Bad params are refused by name, and a latent cache takes v = NULL. */
TEST(latent_params_refused_by_name) {
    const struct { int32_t dv, n_dims; enum kvb_dtype dt, dtv; const char *says; } bad[] = {
        {-1, NROT, KVB_DTYPE_F32, KVB_DTYPE_AS_K, "head_dim_v must be in 0..head_dim"},
        {D + 1, NROT, KVB_DTYPE_F32, KVB_DTYPE_AS_K, "head_dim_v must be in 0..head_dim"},
        {RANK, NROT + 2, KVB_DTYPE_F32, KVB_DTYPE_AS_K, "rope.n_dims 34 + head_dim_v exceeds head_dim"},
        {RANK, NROT, KVB_DTYPE_F16, KVB_DTYPE_Q8_0, "kv_dtype_v must be as K"},
        {RANK + 16, 16, KVB_DTYPE_Q8_0, KVB_DTYPE_AS_K, "not on a block of 32"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct kvb_cache_params cp = latent_params(KVB_POLICY_H2O, bad[i].dt, true);
        cp.head_dim_v = bad[i].dv;
        cp.rope.n_dims = bad[i].n_dims;
        cp.kv.kv_dtype_v = bad[i].dtv;
        struct kvb_cache *c;
        if (kvb_cache_init(NULL, &cp, &c) == KVB_OK) FAILF("case %zu: a cache was made", i);
        if (!strstr(kvb_last_error(), bad[i].says)) FAILF("case %zu: \"%s\" does not say \"%s\"", i, kvb_last_error(), bad[i].says);
    }
    struct kvb_cache_params cp = latent_params(KVB_POLICY_H2O, KVB_DTYPE_Q8_0, true);
    cp.head_dim_v = D; /* the whole row is the value: allowed without rotation */
    cp.rope.type = KVB_ROPE_NONE;
    struct kvb_cache *c;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    static float q[HMAX * D], k[D], v[D], o[HMAX * D];
    for (int i = 0; i < D; i++) k[i] = 0.25f * (float)(i % 13) - 1.5f;
    if (kvb_cache_decode(c, 0, q, NH, k, v, o, NULL) == KVB_OK) FAILF("decode with a V row on a latent cache");
    if (!strstr(kvb_last_error(), "v must be NULL with head_dim_v")) FAILF("\"%s\"", kvb_last_error());
    CHECK_EQ_INT(kvb_cache_n_past(c, 0), 0);
    CHECK_OK(kvb_cache_decode(c, 0, q, NH, k, NULL, o, NULL));
    float kr[D], vr[D];
    CHECK_OK(kvb_cache_read_slot(c, 0, 0, 0, kr, vr));
    CHECK(memcmp(kr, vr, sizeof kr) == 0); /* the value is the row */
    kvb_cache_free(c);
}

/* The sizing rule for latent rows (kvb_kv_seq_bytes_latent): a pool of
 * exactly that many bytes holds a whole run of every configuration (the
 * cache's peak fits it), it is what pages of K rows alone take, less than
 * K and V rows need; head_dim_v 0 is kvb_kv_seq_bytes itself. */
TEST(latent_sizing_rule_holds_k_rows_only) {
    mla_init(55);
    static float outs[NTOK * HMAX * RANK];
    static int held[NTOK * NTOK];
    for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++)
        for (size_t ci = 0; ci < sizeof CONFIGS / sizeof CONFIGS[0]; ci++) {
            const struct config *cf = &CONFIGS[ci];
            const struct kvb_cache_params cp = config_params(cf, TYPES[ti], true);
            const size_t need = kvb_kv_seq_bytes_latent(&cp.kv, 1, 1, D, RANK, NTOK, PROMPT, PROMPT / 2);
            const size_t kv_need = kvb_kv_seq_bytes(&cp.kv, 1, 1, D, NTOK, PROMPT, PROMPT / 2);
            CHECK(need > 0);
            CHECK_EQ_INT(kvb_kv_seq_bytes_latent(&cp.kv, 1, 1, D, 0, NTOK, PROMPT, PROMPT / 2), kv_need);
            const size_t page = (kvb_cache_page_bytes(&cp) + 63) & ~(size_t)63;
            CHECK_EQ_INT(need % page, 0);
            if (!(need < kv_need)) FAILF("%s %s: latent rows need %zu bytes, K and V rows %zu", config_name(cf), kvb_dtype_name(TYPES[ti]), need, kv_need);
            struct kvb_pool_params pp = kvb_pool_default_params();
            pp.page_bytes = kvb_cache_page_bytes(&cp);
            pp.capacity_bytes = need;
            struct kvb_pool *pool;
            CHECK_OK(kvb_pool_init(&pp, &pool));
            struct kvb_cache *c;
            CHECK_OK(kvb_cache_init(pool, &cp, &c));
            const kvb_status st = steps(c, false, 0, NTOK, outs, held);
            struct kvb_cache_stats cs;
            kvb_cache_get_stats(c, &cs);
            kvb_cache_free(c);
            kvb_pool_free(pool);
            if (st != KVB_OK) FAILF("%s %s: a pool of kvb_kv_seq_bytes_latent's %zu bytes ran out (%s)", config_name(cf), kvb_dtype_name(TYPES[ti]), need, kvb_last_error());
            if (cs.bytes_peak > need) FAILF("%s %s: peak %zu > %zu", config_name(cf), kvb_dtype_name(TYPES[ti]), cs.bytes_peak, need);
        }
    struct kvb_kv_params kv = kvb_kv_default_params();
    CHECK(kvb_kv_seq_bytes_latent(&kv, 2, 1, D, RANK, 100, 10, 4) > 0);
    CHECK(kvb_kv_seq_bytes_latent(&kv, 2, 1, D, -1, 100, 10, 4) == 0);
    CHECK(kvb_kv_seq_bytes_latent(&kv, 2, 1, D, D + 1, 100, 10, 4) == 0);
}

/* The cold tier's file holds K rows only (records without V rows): a
 * latent cache whose evicted pages spill to a file (no cold memory) writes
 * one that kvb_cold_file_check reads, and the run equals the in-memory one. */
TEST(latent_cold_file_holds_k_rows_only) {
    mla_init(56);
    char dir[] = "/tmp/kvb_mla_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    struct kvb_cache_params cp = config_params(&CONFIGS[5], KVB_DTYPE_Q8_0, true); /* h2o, recall, original positions */
    static float a[NTOK * HMAX * RANK], b[NTOK * HMAX * RANK];
    static int ha[NTOK * NTOK], hb[NTOK * NTOK];
    CHECK_OK(run_cache(&cp, false, a, ha));
    cp.kv.recall.cold_mem_bytes = 0;
    cp.kv.recall.cold_dir = dir;
    struct kvb_cache *c;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    for (int i = 0; i < NTOK * NTOK; i++) hb[i] = -1;
    CHECK_OK(steps(c, false, 0, NTOK, b, hb));
    char path[512] = "";
    DIR *dd = opendir(dir);
    CHECK(dd != NULL);
    for (struct dirent *e; (e = readdir(dd));)
        if (e->d_name[0] != '.') snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    closedir(dd);
    struct kvb_cold_file_info in;
    const kvb_status st = path[0] ? kvb_cold_file_check(path, &in) : KVB_ERR_IO;
    kvb_cache_free(c);
    if (path[0]) remove(path);
    rmdir(dir);
    if (st != KVB_OK) FAILF("cold file \"%s\": %s", path, kvb_last_error());
    if (in.pages < 2 || in.head_dim != D || in.dtype != KVB_DTYPE_Q8_0 || in.dtype_v != KVB_DTYPE_Q8_0)
        FAILF("cold file: %lld pages, head_dim %d, %s/%s", (long long)in.pages, (int)in.head_dim, kvb_dtype_name(in.dtype), kvb_dtype_name(in.dtype_v));
    if (memcmp(a, b, sizeof a) || memcmp(ha, hb, sizeof ha)) FAILF("a cold file changed the run");
}

/* DeepSeek-V3 has 128 query heads over its one latent row, more than one
 * driver call's KVB_ATTN_MAX_ROWS (64): the cache attends in groups of 64
 * heads (decode: a pass each, the policy's weights their heads' mean;
 * prefill: one token per block). 80 heads (64 + 16) against the float64
 * reference with eviction, and saved, restored and forked runs. */
TEST(more_query_heads_than_a_driver_call_attend_in_groups) {
    NH = 80;
    test_latent_attention_with_eviction_equals_float64_reference_every_head();
    if (!t_case_failed) test_latent_image_and_fork_continue_bit_for_bit();
    NH = 4;
}

int main(void) {
    RUN(latent_attention_with_eviction_equals_float64_reference_every_head);
    RUN(latent_rows_equal_explicit_v_rows_bit_for_bit_every_row_type_and_policy);
    RUN(latent_image_and_fork_continue_bit_for_bit);
    RUN(latent_image_bad_head_dim_v_refused_by_name_older_images_load_as_0);
    RUN(latent_params_refused_by_name);
    RUN(latent_sizing_rule_holds_k_rows_only);
    RUN(latent_cold_file_holds_k_rows_only);
    RUN(more_query_heads_than_a_driver_call_attend_in_groups);
    return test_summary();
}
