/*
 * attn.c — the attention driver: online softmax over tiles of KVB_ATTN_TILE
 * keys, on top of the per-arch primitives (scores, accum, vexp).
 *
 * Per tile and row: s = q.k (masked to -inf past the row's limit), m' =
 * max(m, max s), acc *= exp(m - m'), l *= exp(m - m'), e = exp(s - m'),
 * l += sum e, acc += e V. One read of K and V per call, whatever the number of
 * rows (GQA: the G query heads of a KV head share every load).
 *
 * Probabilities for policies come at no extra pass over K/V: e of each tile
 * is kept with the m' it was taken against (a "segment"), and kvb_attn_end
 * rescales each segment by exp(m' - m_final) / l_final.
 *
 * Column mass (prefill observation) needs the final log-sum-exp of each row
 * first, so it is a second tiled pass that recomputes scores: exact, and no
 * T x T matrix is ever materialised.
 *
 * q8_0 and q4_0 keys are scored from int8 queries (scores_i8), as ggml
 * scores them: the rows are quantized at each call in the weights'
 * activation form, and the keys' codes are never expanded to f32. Values
 * are dequantized as before.
 */
#include "matmul.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>

struct kvb_q8_rows kvb_quantize_q_rows(const float *q, int32_t n_rows, int32_t d, int8_t *qq, float *dq, int16_t *sq) {
    const struct kvb_dot_kernels *k = kvb_dot_kernels();
    const int32_t nb = d / 32;
    for (int32_t r = 0; r < n_rows; r++)
        kvb_quantize_act_q8_with(k, q + (size_t)r * d, d, dq + (size_t)r * nb, qq + (size_t)r * d, sq + (size_t)r * nb);
    return (struct kvb_q8_rows){qq, dq, sq};
}

/* The int8 form of a call's query rows, per thread. Quantized at every call:
 * callers rotate the rows in place between the runs of one state (attend.c:
 * a position delta per run), so nothing about the last call's rows can be
 * trusted, and the cost is one pass over n_rows x d against a run's keys. */
static _Thread_local struct {
    int8_t q[KVB_ATTN_MAX_ROWS * KVB_ATTN_MAX_DIM];
    float dq[KVB_ATTN_MAX_ROWS * KVB_ATTN_MAX_DIM / 32];
    int16_t sq[KVB_ATTN_MAX_ROWS * KVB_ATTN_MAX_DIM / 32];
} t_q8;

static struct kvb_q8_rows q8_rows_for(const float *q, int32_t n_rows, int32_t d) {
    return kvb_quantize_q_rows(q, n_rows, d, t_q8.q, t_q8.dq, t_q8.sq);
}

void kvb_attn_begin(struct kvb_attn_state *st, int32_t n_rows, int32_t d, float *acc, float *p, int32_t p_stride,
                    int32_t *seg_j, float *seg_m, int32_t seg_cap) {
    st->n_rows = n_rows;
    st->d = d;
    st->dv = d;
    st->acc = acc;
    st->p = p;
    st->p_stride = p_stride;
    st->seg_j = seg_j;
    st->seg_m = seg_m;
    st->seg_cap = seg_cap;
    st->n_seg = 0;
    st->first = NULL;
    st->sink = NULL;
    for (int32_t r = 0; r < n_rows; r++) {
        st->m[r] = -INFINITY;
        st->l[r] = 0;
    }
    memset(acc, 0, sizeof(float) * (size_t)n_rows * (size_t)d);
}

/* Masks keys past each row's limit, before its first (a sliding window),
 * and the tile's padding (t >= nt), to -inf. */
static void apply_limits(float *s, const int32_t *limit, const int32_t *first, int32_t n_rows, int32_t j0, int32_t nt) {
    for (int32_t r = 0; r < n_rows; r++) {
        int32_t first_masked = limit ? limit[r] - j0 : nt;
        if (first_masked < 0) first_masked = 0;
        if (first_masked > nt) first_masked = nt;
        for (int32_t t = first_masked; t < KVB_ATTN_TILE; t++) s[r * KVB_ATTN_TILE + t] = -INFINITY;
        if (first)
            for (int32_t t = 0; t < nt && j0 + t < first[r]; t++) s[r * KVB_ATTN_TILE + t] = -INFINITY;
    }
}

void kvb_softcap(const struct kvb_kernels *kr, float *x, int64_t n, float cap) {
    const float k = 2.0f / cap;
    float e[256];
    for (int64_t i = 0; i < n; i += 256) {
        const int32_t m = (int32_t)(n - i < 256 ? n - i : 256);
        for (int32_t j = 0; j < m; j++) e[j] = x[i + j] * k;
        kr->vexp(e, m);
        for (int32_t j = 0; j < m; j++) x[i + j] = cap * ((e[j] - 1.0f) / (e[j] + 1.0f));
    }
}

/* Gemma 2's attention softcap over the tile's nt scores per row. */
static void apply_softcap(const struct kvb_kernels *kr, float *s, int32_t n_rows, int32_t nt, float cap) {
    for (int32_t r = 0; r < n_rows; r++) kvb_softcap(kr, s + r * KVB_ATTN_TILE, nt, cap);
}

/* Each row's max and sum over its nt scores, in t order exactly as a plain
 * loop per row computes them (the same bits), eight rows (then four, then
 * one) at a time so that their dependent chains overlap: a row alone waits
 * on one add per score, and eight chains cover the add's latency on both
 * ports. */
static inline __attribute__((always_inline)) void rows_max(const float *a, int C, int32_t nt, float *out) {
    float m[8];
    for (int c = 0; c < C; c++) m[c] = -INFINITY;
    for (int32_t t = 0; t < nt; t++)
        for (int c = 0; c < C; c++) {
            const float x = a[c * KVB_ATTN_TILE + t];
            m[c] = x > m[c] ? x : m[c];
        }
    for (int c = 0; c < C; c++) out[c] = m[c];
}

static inline __attribute__((always_inline)) void rows_sum(const float *a, int C, int32_t nt, float *out) {
    float m[8];
    for (int c = 0; c < C; c++) m[c] = 0;
    for (int32_t t = 0; t < nt; t++)
        for (int c = 0; c < C; c++) m[c] += a[c * KVB_ATTN_TILE + t];
    for (int c = 0; c < C; c++) out[c] = m[c];
}

void kvb_attn_row_max(const float *s, int32_t R, int32_t nt, float *out) {
    int32_t r = 0;
    for (; r + 8 <= R; r += 8) rows_max(s + r * KVB_ATTN_TILE, 8, nt, out + r);
    for (; r + 4 <= R; r += 4) rows_max(s + r * KVB_ATTN_TILE, 4, nt, out + r);
    for (; r < R; r++) rows_max(s + r * KVB_ATTN_TILE, 1, nt, out + r);
}

void kvb_attn_row_sum(const float *s, int32_t R, int32_t nt, float *out) {
    int32_t r = 0;
    for (; r + 8 <= R; r += 8) rows_sum(s + r * KVB_ATTN_TILE, 8, nt, out + r);
    for (; r + 4 <= R; r += 4) rows_sum(s + r * KVB_ATTN_TILE, 4, nt, out + r);
    for (; r < R; r++) rows_sum(s + r * KVB_ATTN_TILE, 1, nt, out + r);
}

/* Many rows over f16 pages: an f32 tile for families that ask (ops.h, f16_tile_rows). */
static bool f16_tiled(const struct kvb_kernels *kr, const struct kvb_kv_view *v, int32_t n_rows) {
    return kr->f16_tile_rows > 0 && v->dtype == KVB_DTYPE_F16 && n_rows >= kr->f16_tile_rows;
}

void kvb_attn_run(const struct kvb_kernels *kr, const struct kvb_kv_view *v, const float *q, const int32_t *limit,
                  int32_t j0, int32_t j1, struct kvb_attn_state *st) {
    const int32_t R = st->n_rows, d = st->d, dv = st->dv;
    const bool i8 = kr->scores_i8 && kvb_dtype_scores_i8(v->dtype) && j0 < j1;
    struct kvb_q8_rows qq = {0};
    if (i8) qq = q8_rows_for(q, R, d);
    const bool direct = kvb_view_direct(v, kr->quant_rows) && !f16_tiled(kr, v, R);
    for (int32_t jt = j0; jt < j1; jt += KVB_ATTN_TILE) {
        int32_t nt = KVB_MIN(KVB_ATTN_TILE, j1 - jt);
        if (limit) { /* stop once no row sees this tile: nothing further is visible */
            bool any = false;
            for (int32_t r = 0; r < R; r++) any |= limit[r] > jt;
            if (!any) break;
        }
        float *s = st->s;
        const struct kvb_kv_view *tv = v; /* pages the primitives cannot read: this tile in f32 scratch */
        struct kvb_kv_view tile;
        int32_t jj = jt;
        if (!direct) {
            tile = kvb_kv_tile_view(v, jt, nt, !i8, true);
            tv = &tile;
            jj = 0;
        }
        if (i8) kr->scores_i8(v, &qq, R, jt, nt, s);
        else kr->scores(tv, q, R, jj, nt, s);
        if (v->softcap > 0) apply_softcap(kr, s, R, nt, v->softcap);
        apply_limits(s, limit, st->first, R, jt, nt);
        float red[KVB_ATTN_MAX_ROWS];
        kvb_attn_row_max(s, R, nt, red);
        for (int32_t r = 0; r < R; r++) {
            float *sr = s + r * KVB_ATTN_TILE;
            const float mt = red[r];
            float mn = st->m[r] > mt ? st->m[r] : mt;
            if (mn == -INFINITY) continue; /* row sees nothing yet: its s stay -inf, e = 0 */
            if (mn != st->m[r]) {
                float alpha = st->m[r] == -INFINITY ? 0.0f : expf(st->m[r] - mn);
                st->l[r] *= alpha;
                float *ar = st->acc + (size_t)r * dv;
                if (alpha == 0.0f) memset(ar, 0, sizeof(float) * (size_t)dv);
                else for (int32_t i = 0; i < dv; i++) ar[i] *= alpha;
                st->m[r] = mn;
            }
            for (int32_t t = 0; t < nt; t++) sr[t] -= mn;
        }
        kr->vexp(s, (R - 1) * KVB_ATTN_TILE + nt);
        kvb_attn_row_sum(s, R, nt, red);
        for (int32_t r = 0; r < R; r++) st->l[r] += red[r];
        kr->accum(tv, s, R, jj, nt, st->acc);
        if (st->p) {
            if (st->n_seg < st->seg_cap) {
                st->seg_j[st->n_seg] = jt;
                for (int32_t r = 0; r < R; r++) st->seg_m[(size_t)st->n_seg * KVB_ATTN_MAX_ROWS + r] = st->m[r];
                st->n_seg++;
            }
            for (int32_t r = 0; r < R; r++)
                memcpy(st->p + (size_t)r * st->p_stride + jt, s + r * KVB_ATTN_TILE, sizeof(float) * (size_t)nt);
        }
    }
}

/* Row r's log softmax denominator with its sink logit s (one more key, value
 * zero): log(e^s + l e^m), -inf never (the sink is always there). */
static float sink_lse(const struct kvb_attn_state *st, int32_t r) {
    const float s = st->sink[r];
    if (!(st->l[r] > 0)) return s;
    const float base = st->m[r] + logf(st->l[r]), hi = fmaxf(base, s);
    return hi + log1pf(expf(fminf(base, s) - hi));
}

/* A key's weight from its tile's max sm: exp(sm - lse) with a sink in lse
 * (L: the rows' lse), else exp(sm - m) / l; 0 for a row or tile that saw nothing. */
static inline float tile_weight(const struct kvb_attn_state *st, const float *L, int32_t r, float sm) {
    if (sm == -INFINITY) return 0.0f;
    if (L) return expf(sm - L[r]);
    return st->l[r] > 0 ? expf(sm - st->m[r]) / st->l[r] : 0.0f;
}

/* With sinks every weight is exp(z - lse), the sink's share left out of the
 * outputs and the per-key probabilities alike. */
void kvb_attn_end(struct kvb_attn_state *st, float *out, float *lse) {
    const int32_t R = st->n_rows, d = st->dv;
    float L[KVB_ATTN_MAX_ROWS];
    for (int32_t r = 0; r < R; r++) {
        float f; /* acc holds sum exp(z - m) v */
        if (st->sink) {
            L[r] = sink_lse(st, r);
            f = st->l[r] > 0 ? expf(st->m[r] - L[r]) : 0.0f;
        } else {
            L[r] = st->l[r] > 0 ? st->m[r] + logf(st->l[r]) : -INFINITY;
            f = st->l[r] > 0 ? 1.0f / st->l[r] : 0.0f;
        }
        const float *ar = st->acc + (size_t)r * d;
        float *o = out + (size_t)r * d;
        for (int32_t i = 0; i < d; i++) o[i] = ar[i] * f;
        if (lse) lse[r] = L[r];
    }
    if (!st->p) return;
    for (int32_t g = 0; g < st->n_seg; g++) {
        int32_t a = st->seg_j[g];
        int32_t b = g + 1 < st->n_seg ? st->seg_j[g + 1] : st->p_stride;
        for (int32_t r = 0; r < R; r++) {
            const float f = tile_weight(st, st->sink ? L : NULL, r, st->seg_m[(size_t)g * KVB_ATTN_MAX_ROWS + r]);
            float *pr = st->p + (size_t)r * st->p_stride;
            for (int32_t j = a; j < b; j++) pr[j] *= f;
        }
    }
}

void kvb_attn_end_mean(struct kvb_attn_state *st, float *out, float *w, int32_t n) {
    float *p = st->p, L[KVB_ATTN_MAX_ROWS];
    st->p = NULL; /* outputs only */
    kvb_attn_end(st, out, L);
    st->p = p;
    const int32_t R = st->n_rows;
    const float inv_r = 1.0f / (float)R;
    float f[KVB_ATTN_MAX_ROWS];
    for (int32_t g = 0; g < st->n_seg; g++) {
        int32_t a = st->seg_j[g], b = g + 1 < st->n_seg ? st->seg_j[g + 1] : n;
        for (int32_t r = 0; r < R; r++) f[r] = tile_weight(st, st->sink ? L : NULL, r, st->seg_m[(size_t)g * KVB_ATTN_MAX_ROWS + r]) * inv_r;
        for (int32_t j = a; j < b; j++) w[j] = p[j] * f[0];
        for (int32_t r = 1; r < R; r++) {
            const float *pr = p + (size_t)r * st->p_stride;
            for (int32_t j = a; j < b; j++) w[j] += pr[j] * f[r];
        }
    }
}

void kvb_attn_colmass(const struct kvb_kernels *kr, const struct kvb_kv_view *v, const float *q, const int32_t *limit,
                      const float *lse, int32_t n_rows, float w_r, int32_t j0, int32_t j1, float *col, float *s) {
    const bool i8 = kr->scores_i8 && kvb_dtype_scores_i8(v->dtype) && j0 < j1;
    struct kvb_q8_rows qq = {0};
    if (i8) qq = q8_rows_for(q, n_rows, v->head_dim);
    for (int32_t jt = j0; jt < j1; jt += KVB_ATTN_TILE) {
        int32_t nt = KVB_MIN(KVB_ATTN_TILE, j1 - jt);
        if (i8) kr->scores_i8(v, &qq, n_rows, jt, nt, s);
        else if (kvb_view_direct(v, kr->quant_rows) && !f16_tiled(kr, v, n_rows)) kr->scores(v, q, n_rows, jt, nt, s);
        else {
            const struct kvb_kv_view tile = kvb_kv_tile_view(v, jt, nt, true, false);
            kr->scores(&tile, q, n_rows, 0, nt, s);
        }
        if (v->softcap > 0) apply_softcap(kr, s, n_rows, nt, v->softcap);
        apply_limits(s, limit, NULL, n_rows, jt, nt);
        for (int32_t r = 0; r < n_rows; r++) {
            float *sr = s + r * KVB_ATTN_TILE;
            float l = lse[r];
            for (int32_t t = 0; t < nt; t++) sr[t] = l == -INFINITY ? -INFINITY : sr[t] - l;
        }
        kr->vexp(s, (n_rows - 1) * KVB_ATTN_TILE + nt);
        for (int32_t t = 0; t < nt; t++) {
            float sum = 0;
            for (int32_t r = 0; r < n_rows; r++) sum += s[r * KVB_ATTN_TILE + t];
            col[jt + t] += w_r * sum;
        }
    }
}
