/*
 * ops.h — kernels over raw rows: RoPE and attention. Ops know nothing about
 * caches or policies; they see K/V rows through a page-table view.
 *
 * Attention is split in two layers:
 *   - per-arch primitives (ref, avx2, avx512; avx512vnni's integer
 *     scores), one set per family of the kernel table (dispatch.h), chosen
 *     once: tile scores, tile value accumulation, exp;
 *   - a generic driver (attn.c) doing online softmax over tiles of keys, with
 *     per-row causal limits, optional per-key probabilities (for policies),
 *     and an exact column-mass pass (for prefill observation).
 *
 * Shapes: d = head_dim. A "row" is one query vector (one head of one token),
 * already rotated and pre-multiplied by 1/sqrt(d).
 *
 * The Gated DeltaNet layers' kernels (the delta rule, recurrent and
 * chunked, and the short conv) are deltanet.h's: reference deltanet.c,
 * x86/deltanet_avx2.c and x86/deltanet_avx512.c from one body
 * (x86/deltanet_width.h), in each family's table beside these.
 */
#ifndef KVB_OPS_H
#define KVB_OPS_H

#include "../core/core.h"

#define KVB_ATTN_TILE 64     /* keys per tile */
#define KVB_ATTN_MAX_ROWS 64 /* query rows per driver call */
#define KVB_ATTN_MAX_DIM KVB_MAX_ROW_DIM /* head_dim (the cache refuses more; core.h) */

/* K/V rows of one stream seen through its page table. Logical key j lives in
 * physical slot s = slots[j]; its K row at pages[s >> block_shift] +
 * (s & mask) * row_bytes, its V row at the same page + v_offset +
 * (s & mask) * row_bytes_v. A latent view (multi-head latent attention) has
 * V rows of head_dim_v < head_dim inside the K rows: v_offset is then the
 * value's byte offset within a K row and row_bytes_v == row_bytes, so
 * kvb_view_v finds it there. The per-arch primitives read f32/f16 views
 * with dtype == dtype_v, and q8_0/q4_0 ones where the family says so
 * (quant_rows); the driver (attn.c) hands them any other view a tile at a
 * time, dequantized into f32 (kvb_kv_row_load). */
struct kvb_kv_view {
    uint8_t *const *pages;
    const int32_t *slots;
    int32_t n;            /* logical keys in the view (bounds software prefetch) */
    int32_t block_shift;
    int32_t head_dim;
    size_t row_bytes;     /* K row */
    size_t row_bytes_v;   /* V row */
    size_t v_offset;
    enum kvb_dtype dtype;   /* K rows */
    enum kvb_dtype dtype_v; /* V rows */
    float softcap;          /* > 0: scores s (q already scaled) become softcap * tanh(s / softcap)
                             * before masks and softmax (Gemma 2); 0: off */
    int32_t head_dim_v;     /* V row width, the accumulators' row stride; 0: head_dim */
};

/* The V rows' width of a view (accum reads and writes that many per row). */
static inline int32_t kvb_view_dv(const struct kvb_kv_view *v) { return v->head_dim_v > 0 ? v->head_dim_v : v->head_dim; }

static inline const void *kvb_view_k(const struct kvb_kv_view *v, int32_t j) {
    int32_t s = v->slots[j];
    return v->pages[s >> v->block_shift] + (size_t)(s & ((1 << v->block_shift) - 1)) * v->row_bytes;
}
static inline const void *kvb_view_v(const struct kvb_kv_view *v, int32_t j) {
    int32_t s = v->slots[j];
    return v->pages[s >> v->block_shift] + v->v_offset + (size_t)(s & ((1 << v->block_shift) - 1)) * v->row_bytes_v;
}
/* Whether keys j..j+n-1 (all < v->n) are n consecutive slots of one page:
 * their K rows are then one span of n * row_bytes, and their V rows
 * another. A stream that only appends (no holes refilled, no compaction)
 * is such runs end to end, so kernels take this path for most keys. */
static inline bool kvb_view_run(const struct kvb_kv_view *v, int32_t j, int32_t n) {
    const int32_t s0 = v->slots[j];
    if ((s0 >> v->block_shift) != ((s0 + n - 1) >> v->block_shift)) return false;
    for (int32_t t = 1; t < n; t++)
        if (v->slots[j + t] != s0 + t) return false;
    return true;
}
/* Whether the primitives read the view directly: f32 or f16 rows, K and V
 * alike; or q8_0/q4_0 rows (K and V alike) on a family that reads them. */
static inline bool kvb_view_direct(const struct kvb_kv_view *v, bool quant_rows) {
    if (v->dtype != v->dtype_v) return false;
    return v->dtype == KVB_DTYPE_F32 || v->dtype == KVB_DTYPE_F16 || (quant_rows && (v->dtype == KVB_DTYPE_Q8_0 || v->dtype == KVB_DTYPE_Q4_0));
}
/* One KV row of d elements in dtype t: stored from f32 (quantized for
 * q8_0/q4_0, rounded for f16/bf16) and loaded back to f32. */
void kvb_kv_row_store(enum kvb_dtype t, const float *src, void *dst, int32_t d);
void kvb_kv_row_load(enum kvb_dtype t, const void *src, float *dst, int32_t d);
/* Keys [jt, jt + nt) of v (nt <= KVB_ATTN_TILE, head_dim <= KVB_ATTN_MAX_DIM) as an f32
 * view whose keys are 0 .. nt - 1, in this thread's scratch (valid until its
 * next call): its K rows when with_k, its V rows when with_v. */
struct kvb_kv_view kvb_kv_tile_view(const struct kvb_kv_view *v, int32_t jt, int32_t nt, bool with_k, bool with_v);

/* Query rows quantized for integer scores against q8_0/q4_0 keys: row r's
 * codes at q + r * d, and for each of its d / 32 blocks b the scale
 * d[r * (d / 32) + b] and the codes' sum s[...] (x ~ scale * code, codes in
 * -127..127: kvb_quantize_act_q8's form, the weights' int8 activations). */
struct kvb_q8_rows {
    const int8_t *q;
    const float *d;
    const int16_t *s;
};
/* Quantizes n_rows rows of d (a multiple of 32) into q/dq/sq (room for
 * n_rows * d codes and n_rows * d / 32 scales and sums) with the dispatched
 * activation quantizer (the reference's bits). */
struct kvb_q8_rows kvb_quantize_q_rows(const float *q, int32_t n_rows, int32_t d, int8_t *qq, float *dq, int16_t *sq);
/* Whether K rows of type t are scored from int8 queries (scores_i8). */
static inline bool kvb_dtype_scores_i8(enum kvb_dtype t) { return t == KVB_DTYPE_Q8_0 || t == KVB_DTYPE_Q4_0; }

/* Per-arch primitives. */
struct kvb_kernels {
    const char *name;
    /* s[r*KVB_ATTN_TILE + t] = dot(q[r], K[j0+t]) for r < n_rows, t < nt. q is [n_rows][d]. */
    void (*scores)(const struct kvb_kv_view *v, const float *q, int32_t n_rows, int32_t j0, int32_t nt, float *s);
    /* acc[r] += sum_t e[r*KVB_ATTN_TILE + t] * V[j0+t], acc is [n_rows][dv], dv = kvb_view_dv(v). */
    void (*accum)(const struct kvb_kv_view *v, const float *e, int32_t n_rows, int32_t j0, int32_t nt, float *acc);
    /* x[i] = exp(x[i]); exp(-inf) = 0. Relative error <= 2e-7 or so. */
    void (*vexp)(float *x, int32_t n);
    /* dst[i] = f32(src[i]) and back, for K/V rows. */
    void (*to_f16)(const float *src, uint16_t *dst, int32_t n);
    void (*from_f16)(const uint16_t *src, float *dst, int32_t n);
    /* dst[0..n) = a q8_0 (or q4_0) row of n elements (n a multiple of 32),
     * dequantized as kvb_dequantize_row does: d * q, d * (q - 8). */
    void (*from_q8_0)(const void *src, float *dst, int32_t n);
    void (*from_q4_0)(const void *src, float *dst, int32_t n);
    bool quant_rows; /* scores/accum read q8_0 and q4_0 pages (K and V of one type) */
    /* Driver calls with at least this many query rows over f16 pages hand
     * the primitives an f32 tile (kvb_kv_tile_view) instead of the pages:
     * each row is then converted once per call, not once per row group.
     * Only where the family's f32 and f16 paths are the same operations on
     * the same values, so the bits do not change (test_attn); 0: never. */
    int32_t f16_tile_rows;
    /* Scores of int8 queries against q8_0 or q4_0 K rows (v->dtype), in
     * scores' layout: s[r*KVB_ATTN_TILE + t] is the FMA chain over K's
     * blocks in order,
     *     acc = 0; for each block b: acc = fma((float)isum_b, d_k * d_q, acc)
     * with isum_b the exact integer dot of the block's codes (q4_0's less 8)
     * and q's, d_k the f16 scale in f32 and d_q q's. Every family gives the
     * reference's bits. V rows are not read. */
    void (*scores_i8)(const struct kvb_kv_view *v, const struct kvb_q8_rows *q, int32_t n_rows, int32_t j0, int32_t nt, float *s);
    /* Recall's page scores: out[p] = max over rows r < n_rows of
     * sum_c max(q[r][c] * lo_p[c], q[r][c] * hi_p[c]), with lo_p = lohi + p * 2d
     * and hi_p = lo_p + d (an upper bound of q[r] . k for any k within them). */
    void (*page_bounds)(const float *q, int32_t n_rows, const float *lohi, int64_t n_pages, int32_t d, float *out);
};

extern const struct kvb_kernels kvb_kernels_ref;
/* The reference page bound of one row (kvb_kernels_ref.page_bounds per row). */
float kvb_page_bound_ref(const float *q, const float *lo, const float *hi, int32_t d);
#if defined(__x86_64__)
extern const struct kvb_kernels kvb_kernels_avx2;
/* AVX-VNNI: avx2's primitives, the integer scores by vpdpbusd (attn_avx2.c). */
extern const struct kvb_kernels kvb_kernels_avxvnni;
/* AVX-512: integer scores by AVX2's kernel; the avx512vnni family's by VNNI. */
extern const struct kvb_kernels kvb_kernels_avx512, kvb_kernels_avx512vnni;
#endif
/* The primitives of the family in use (dispatch.c: chosen on first call;
 * KVB_REF=1 forces ref, KVB_KERNELS=name caps the choice). */
const struct kvb_kernels *kvb_kernels(void);
/* Tests: switch every op family to the reference (true) or back to the
 * dispatched choice (false). Not thread-safe; call between runs. */
void kvb_kernels_force_ref(bool ref);

/* ---- RoPE ---- */

/* Precomputed inverse frequencies of a rope config: n_dims/2 doubles. */
void kvb_rope_inv_freq(const struct kvb_rope *r, const float *freq_factors, double *inv_freq);
/* cs[i] = cos(pos*inv_freq[i]), cs[n_pairs+i] = sin(...). */
void kvb_rope_cos_sin(const double *inv_freq, int32_t n_pairs, int64_t pos, float *cs);
/* Rotates x (one head, head_dim values; the first n_dims rotate) by cs. */
void kvb_rope_apply(enum kvb_rope_type type, int32_t n_dims, const float *cs, float *x);

/* ---- attention driver ---- */

struct kvb_attn_state {
    int32_t n_rows, d;
    int32_t dv;                  /* the value rows' width: acc's and out's rows; kvb_attn_begin
                                  * sets d, a latent view's caller sets its head_dim_v after */
    float m[KVB_ATTN_MAX_ROWS];  /* running max */
    float l[KVB_ATTN_MAX_ROWS];  /* running sum of exp */
    float *acc;                  /* [n_rows][dv] running numerator */
    /* Optional per-key probabilities: p[r*p_stride + j] = exp(s - m at its tile);
     * tile records (seg_j, seg_m) let kvb_attn_end normalise them exactly. */
    float *p;
    int32_t p_stride;
    int32_t *seg_j;              /* [seg_cap] first key of each tile */
    float *seg_m;                /* [seg_cap][KVB_ATTN_MAX_ROWS] */
    int32_t n_seg, seg_cap;
    const int32_t *first;        /* or NULL: row r sees only keys j >= first[r] (a sliding
                                  * window); set after kvb_attn_begin, which clears it */
    const float *sink;           /* or NULL: row r's softmax has one more logit, sink[r], with a
                                  * zero value row (gpt-oss); set likewise */
    float s[KVB_ATTN_MAX_ROWS * KVB_ATTN_TILE]; /* scratch scores */
};

/* Segments needed for keys [0, n) split into n_runs runs. */
static inline int32_t kvb_attn_seg_cap(int32_t n, int32_t n_runs) { return n / KVB_ATTN_TILE + n_runs + 1; }

void kvb_attn_begin(struct kvb_attn_state *st, int32_t n_rows, int32_t d, float *acc, float *p, int32_t p_stride,
                    int32_t *seg_j, float *seg_m, int32_t seg_cap);
/* Each of R rows' (KVB_ATTN_TILE apart) max and sum over its first nt
 * values, in order: the bits of a plain loop per row (tests/test_attn.c). */
void kvb_attn_row_max(const float *s, int32_t R, int32_t nt, float *out);
void kvb_attn_row_sum(const float *s, int32_t R, int32_t nt, float *out);
/* Attends rows q[n_rows][d] to logical keys [j0, j1). limit (or NULL):
 * row r sees only keys j < limit[r]. Runs must be fed in increasing j; each
 * may bring other q rows (attend.c rotates them per run). q8_0 and q4_0 keys
 * are scored from q's int8 form, quantized at each call. */
void kvb_attn_run(const struct kvb_kernels *kr, const struct kvb_kv_view *v, const float *q, const int32_t *limit,
                  int32_t j0, int32_t j1, struct kvb_attn_state *st);
/* out[r] = acc[r] / l[r]; lse[r] = m + log(l) if lse; normalises p if kept. */
void kvb_attn_end(struct kvb_attn_state *st, float *out, float *lse);
/* Like kvb_attn_end, but instead of normalising p in place it writes
 * w[j] = mean over rows of the normalised probability of key j, j < n
 * (one pass: what a policy needs from the G query heads of a KV head). */
void kvb_attn_end_mean(struct kvb_attn_state *st, float *out, float *w, int32_t n);
/* x = cap * tanh(x / cap) over n values (Gemma's softcaps, attention and
 * logits): tanh(z) = (e - 1) / (e + 1), e = e^(2z) from the family's vexp,
 * whose clamped argument gives +-cap at the extremes, never NaN. */
void kvb_softcap(const struct kvb_kernels *kr, float *x, int64_t n, float cap);
/* Column mass: col[j] += sum_r w_r * exp(q_r.k_j - lse[r]) over keys [j0, j1),
 * with the same limits (no sliding window: the cache never observes a
 * window layer); one call per run. */
void kvb_attn_colmass(const struct kvb_kernels *kr, const struct kvb_kv_view *v, const float *q, const int32_t *limit,
                      const float *lse, int32_t n_rows, float w_r, int32_t j0, int32_t j1, float *col, float *s_scratch);

#endif /* KVB_OPS_H */
