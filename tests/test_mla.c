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
 * Then images and forks of a latent cache continue bit for bit, and bad
 * values are refused by name.
 */
#include "cache_helpers.h"
#include "core/core.h"
#include "ops/ops.h"

#define NROT 32  /* k_pe / q_pe: the rotated dims (rope.n_dims) */
#define RANK 64  /* kv_lora_rank: the latent, head_dim_v */
#define D (NROT + RANK)
#define H 4      /* query heads over one shared latent row (n_kv_head 1) */
#define NOPE 16  /* qk_nope_head_dim */
#define DVH 16   /* v_head_dim */
#define NTOK 64  /* tokens of a run: prompt then decode */
#define PROMPT 20

struct mla {
    float wkb[H][NOPE][RANK], wvb[H][DVH][RANK];
    float c[NTOK][RANK], kpe[NTOK][NROT];
    float qn[NTOK][H][NOPE], qp[NTOK][H][NROT];
};

static struct mla M;

static void mla_init(unsigned long long seed) {
    unsigned long long rs = seed;
    const float sw = 1.0f / sqrtf((float)RANK);
    for (int h = 0; h < H; h++) {
        for (int i = 0; i < NOPE; i++)
            for (int r = 0; r < RANK; r++) M.wkb[h][i][r] = t_randf(&rs) * 4 * sw;
        for (int i = 0; i < DVH; i++)
            for (int r = 0; r < RANK; r++) M.wvb[h][i][r] = t_randf(&rs) * 2 * sw;
    }
    for (int t = 0; t < NTOK; t++) {
        for (int r = 0; r < RANK; r++) M.c[t][r] = t_randf(&rs) * 2;
        for (int i = 0; i < NROT; i++) M.kpe[t][i] = t_randf(&rs) * 2;
        for (int h = 0; h < H; h++) {
            for (int i = 0; i < NOPE; i++) M.qn[t][h][i] = t_randf(&rs) * 2;
            for (int i = 0; i < NROT; i++) M.qp[t][h][i] = t_randf(&rs) * 2;
        }
    }
}

static const struct kvb_rope ROPE = {.type = KVB_ROPE_NEOX, .n_dims = NROT, .base = 10000.0f, .freq_scale = 1.0f};
static const double SCALE = 0.2; /* the model's kq_scale: 1/sqrt(NOPE + NROT) = 0.2 */

/* The engine's rows of token t: q [H][D] (absorbed, pre-scaled so the
 * cache's 1/sqrt(D) gives SCALE), k [D] = [k_pe | c], v [D] = [c | 0]
 * (explicit V rows only). */
static void rows_of(int t, float *q, float *k, float *v) {
    const float pre = (float)(SCALE * sqrt((double)D));
    for (int h = 0; h < H; h++) {
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
 * are o [H][RANK], the keys being toks[0..n). */
static double max_err(int tq, const float *o, const int *toks, int n) {
    double e = 0, y[DVH], r[DVH];
    for (int h = 0; h < H; h++) {
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
        static float q[PROMPT][H * D], k[PROMPT][D], o[PROMPT][H * RANK];
        int before[NTOK], nb = 0, toks[NTOK];
        double worst = 0, all_err = 0;
        /* the prompt in two chunks: token i sees what was kept before its chunk and the chunk up to itself */
        for (int c0 = 0; c0 < PROMPT; c0 += PROMPT / 2) {
            const int C = PROMPT / 2;
            for (int i = 0; i < C; i++) rows_of(c0 + i, q[i], k[i], NULL);
            CHECK_OK(kvb_cache_prefill(c, 0, C, q[0], H, k[0], NULL, o[0], NULL));
            for (int i = 0; i < C; i++) {
                memcpy(toks, before, sizeof(int) * (size_t)nb);
                for (int j = 0; j <= i; j++) toks[nb + j] = c0 + j;
                worst = fmax(worst, max_err(c0 + i, o[i], toks, nb + i + 1));
            }
            nb = kept(c, before);
        }
        kvb_cache_compress(c, NULL);
        nb = kept(c, before);
        for (int t = PROMPT; t < NTOK; t++) {
            rows_of(t, q[0], k[0], NULL);
            CHECK_OK(kvb_cache_decode(c, 0, q[0], H, k[0], NULL, o[0], NULL));
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

/* One run (prompt in two chunks, compress, decode to NTOK) of a cache built
 * from cp, appending explicit V rows when explicit; outputs [NTOK][H][RANK]
 * and the positions held after each step [NTOK][NTOK] (-1 past the end). */
static kvb_status run_cache(const struct kvb_cache_params *cp, bool explicit_v, float *outs, int *held) {
    struct kvb_cache *c;
    kvb_status st = kvb_cache_init(NULL, cp, &c);
    if (st != KVB_OK) return st;
    static float q[PROMPT][H * D], k[PROMPT][D], v[PROMPT][D], o[PROMPT][H * D];
    const int ow = explicit_v ? D : RANK; /* out's row: head_dim, or head_dim_v */
    for (int i = 0; i < NTOK * NTOK; i++) held[i] = -1;
    for (int c0 = 0; c0 < NTOK && st == KVB_OK;) {
        const int C = c0 < PROMPT ? PROMPT / 2 : 1;
        for (int i = 0; i < C; i++) rows_of(c0 + i, q[i], k[i], v[i]);
        if (c0 < PROMPT) st = kvb_cache_prefill(c, 0, C, q[0], H, k[0], explicit_v ? v[0] : NULL, o[0], NULL);
        else st = kvb_cache_decode(c, 0, q[0], H, k[0], explicit_v ? v[0] : NULL, o[0], NULL);
        if (c0 + C == PROMPT) kvb_cache_compress(c, NULL);
        for (int i = 0; i < C; i++)
            for (int h = 0; h < H; h++) memcpy(outs + ((size_t)(c0 + i) * H + h) * RANK, o[0] + ((size_t)i * H + h) * ow, sizeof(float) * RANK);
        c0 += C;
        kept(c, held + (size_t)(c0 - 1) * NTOK);
    }
    kvb_cache_free(c);
    return st;
}

TEST(latent_rows_equal_explicit_v_rows_bit_for_bit_every_row_type_and_policy) {
    mla_init(52);
    static float a[NTOK * H * RANK], b[NTOK * H * RANK];
    static int ha[NTOK * NTOK], hb[NTOK * NTOK];
    const enum kvb_policy_id pols[] = {KVB_POLICY_H2O, KVB_POLICY_SNAPKV, KVB_POLICY_STREAMING, KVB_POLICY_TOVA, KVB_POLICY_FULL};
    for (int ref = 0; ref < 2; ref++) {
        kvb_kernels_force_ref(ref == 1); /* the dispatched family, then the scalar reference */
        for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++)
            for (size_t pi = 0; pi < sizeof pols / sizeof pols[0]; pi++) {
                const struct kvb_cache_params lp = latent_params(pols[pi], TYPES[ti], true), ep = latent_params(pols[pi], TYPES[ti], false);
                CHECK_OK(run_cache(&lp, false, a, ha));
                CHECK_OK(run_cache(&ep, true, b, hb));
                if (memcmp(ha, hb, sizeof ha))
                    FAILF("%s %s (%s kernels): the latent cache kept other tokens than explicit V rows", kvb_policy_name(pols[pi]),
                          kvb_dtype_name(TYPES[ti]), ref ? "ref" : "dispatched");
                for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
                    if (memcmp(&a[i], &b[i], sizeof(float)))
                        FAILF("%s %s (%s kernels): output %zu is %.9g with latent rows, %.9g with explicit V rows", kvb_policy_name(pols[pi]),
                              kvb_dtype_name(TYPES[ti]), ref ? "ref" : "dispatched", i, (double)a[i], (double)b[i]);
                if (pols[pi] != KVB_POLICY_FULL && ha[(NTOK - 1) * NTOK + 20] >= 0) FAILF("%s: nothing evicted", kvb_policy_name(pols[pi]));
                /* a page holds K rows only */
                CHECK_EQ_INT(kvb_cache_page_bytes(&lp), 8 * kvb_dtype_row_bytes(TYPES[ti], D));
                CHECK_EQ_INT(kvb_cache_page_bytes(&ep), 2 * kvb_cache_page_bytes(&lp));
            }
    }
    kvb_kernels_force_ref(false);
}

int main(void) {
    RUN(latent_attention_with_eviction_equals_float64_reference_every_head);
    RUN(latent_rows_equal_explicit_v_rows_bit_for_bit_every_row_type_and_policy);
    return test_summary();
}
