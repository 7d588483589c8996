/* matmul.c — the threaded driver of the weight kernels. The family's
 * kernels come from kvb_dot_kernels() (dispatch.c chooses it, with the
 * attention primitives, from one table); nothing here looks at the CPU.
 * Batched decode goes through the family's int8 tiles where it has them
 * (Q8_0's q8_tile, the K-quants' kq_tile), which give each (row, token)
 * the bits of the lone dot, so a sequence decodes the same alone or in a
 * batch. */
#include "matmul.h"
#include "quant.h"

#include <math.h>
#include <stdatomic.h>

#include <stdlib.h>

/* The activations' int8 form (kvb_quant_block_fn's contract in matmul.h). */
void kvb_quant_block_ref(const float *x, int len, float *d, int8_t *q) {
    float amax = 0;
    for (int i = 0; i < len; i++) { /* fmaxf's result (a NaN is skipped), without its libm call */
        const float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
    }
    const float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0.0f;
    *d = s;
    for (int i = 0; i < len; i++) {
        const float v = x[i] * inv; /* |v| <= 127 unless NaN (rounds in the current mode: to nearest, ties to even) */
        q[i] = v == v ? (int8_t)lrintf(v) : 0;
    }
}

/* The integer sum of len codes. */
static int block_sum(const int8_t *q, int len) {
    int sum = 0;
    for (int i = 0; i < len; i++) sum += q[i];
    return sum;
}

void kvb_quantize_act_q8_with(const struct kvb_dot_kernels *k, const float *x, int64_t n, float *d, int8_t *q, int16_t *s) {
    const kvb_quant_block_fn qb = k && k->quant_block ? k->quant_block : kvb_quant_block_ref;
    for (int64_t b = 0; b < n / 32; b++) {
        qb(x + b * 32, 32, &d[b], q + b * 32);
        s[b] = (int16_t)block_sum(q + b * 32, 32);
    }
}

void kvb_quantize_act_q8(const float *x, int64_t n, float *d, int8_t *q, int16_t *s) { kvb_quantize_act_q8_with(NULL, x, n, d, q, s); }

void kvb_quantize_act_q8k(const float *x, int64_t n, float *d, int8_t *q, int16_t *s) { kvb_quantize_act_q8k_with(NULL, x, n, d, q, s); }

void kvb_quantize_act_q8k_with(const struct kvb_dot_kernels *k, const float *x, int64_t n, float *d, int8_t *q, int16_t *s) {
    const kvb_quant_block_fn quant = k && k->quant_block ? k->quant_block : kvb_quant_block_ref;
    for (int64_t b = 0; b < n / 256; b++) {
        int8_t *qb = q + b * 256;
        quant(x + b * 256, 256, &d[b], qb);
        for (int g = 0; g < 16; g++) s[b * 16 + g] = (int16_t)block_sum(qb + g * 16, 16);
    }
}

enum kvb_act_form kvb_act_form(uint32_t type) {
    switch (type) {
    case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1:
    case GGML_TYPE_IQ4_NL: case GGML_TYPE_MXFP4: return KVB_ACT_Q8_0;
    case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K: case GGML_TYPE_IQ4_XS: return KVB_ACT_Q8_K;
    default: return KVB_ACT_NONE;
    }
}

/* x quantized in type's form into d/q/s (room for n elements). */
static struct kvb_q8_act quantize_for(const struct kvb_dot_kernels *k, uint32_t type, const float *x, int64_t n, float *d, int8_t *q,
                                      int16_t *s) {
    if (kvb_act_form(type) == KVB_ACT_Q8_K) kvb_quantize_act_q8k_with(k, x, n, d, q, s);
    else kvb_quantize_act_q8_with(k, x, n, d, q, s);
    return (struct kvb_q8_act){d, q, s};
}

bool kvb_matmul_supports(uint32_t type) { return type < GGML_TYPE_COUNT && kvb_dot_ref.dot[type] != NULL; }

/* Prefill (T > 1): rows are taken in panels of KVB_PANEL_ROWS, expanded to
 * f32 once and packed k-major into a per-thread buffer (L2), and every token
 * of the call passes over the panel in the family's register tile (matmul.h,
 * kvb_panel_fn): the weights are read from memory once per call, the
 * activations once per panel. Decode (T == 1) reads each row once with the
 * type's dot kernel. */
#define PANEL_MAX_IN 16384
static _Thread_local float t_panel[KVB_PANEL_ROWS * PANEL_MAX_IN];
static _Thread_local float t_scratch[KVB_PACK_SCRATCH_ROWS * PANEL_MAX_IN];

void kvb_pack_panel(const struct kvb_mat *w, int64_t r0, int nr, float *wp, float *scratch) {
    float *row = scratch;
    const int64_t n = w->n_in;
    for (int i = 0; i < KVB_PANEL_ROWS; i++) {
        if (i < nr) kvb_dequantize_row(w->type, w->data + (size_t)(r0 + i) * w->row_bytes, row, n);
        float *dst = wp + i;
        if (i < nr)
            for (int64_t k = 0; k < n; k++) dst[(size_t)k * KVB_PANEL_ROWS] = row[k];
        else
            for (int64_t k = 0; k < n; k++) dst[(size_t)k * KVB_PANEL_ROWS] = 0.0f;
    }
}

/* Rows [r0, r1) of w against N int8 tokens (in w's activation form):
 * y[t * ldy + r]. Q8_0 in tiles when the family has them, and the K-quants
 * (q4_K, q5_K, q6_K) in theirs for two tokens or more; otherwise pair by
 * pair, rows in blocks of ROW_BLOCK so a block stays in L1/L2 while every
 * token passes over it (the weights are read from memory once). Either way
 * each pair is the family's dot_q8 for the type. */
#define ROW_BLOCK 16
/* Rows [r0, r1) against N tokens through a tile function of tr rows and tt tokens. */
static void tiled_rows(kvb_q8_tile_fn tile, int64_t tr, int32_t tt, const struct kvb_mat *w, const struct kvb_q8_act *xa, int32_t N, float *y,
                       int64_t ldy, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r += tr) {
        const int nr = (int)KVB_MIN(tr, r1 - r);
        for (int32_t t = 0; t < N; t += tt)
            tile(w->data + (size_t)r * w->row_bytes, w->row_bytes, nr, xa + t, (int)KVB_MIN(tt, N - t), w->n_in, y + (size_t)t * ldy + r, ldy, t == 0);
    }
}

static void q8_rows(const struct kvb_dot_kernels *k, const struct kvb_mat *w, const struct kvb_q8_act *xa, int32_t N, float *y,
                    int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t n = w->n_in;
    const kvb_q8_tile_fn kq = w->type < GGML_TYPE_COUNT ? k->kq_tile[w->type] : NULL;
    if (kq && N >= 2) {
        /* K-quant tiles: a block's weights unpacked once for every token of
         * the tile (each pair has dot_q8's bits); one token stays below. */
        tiled_rows(kq, k->kq_tile_rows, k->kq_tile_tokens, w, xa, N, y, ldy, r0, r1);
        return;
    }
    if (w->type != GGML_TYPE_Q8_0 || !k->q8_tile || (N == 1 && k->q8_tile_rows_one == 0)) {
        /* The first token's pass over a block fetches the next row while it
         * reads this one: rows streamed from memory on the model 167 Xeon went
         * 2.8 -> 8 GB/s a thread (mxfp4, q4_0, iq4_nl; docs/BENCHMARKS.md,
         * "Mixtures of experts"); it changes no value. */
        const kvb_dot_q8_fn dot = k->dot_q8[w->type];
        for (int64_t b0 = r0; b0 < r1; b0 += ROW_BLOCK) {
            const int64_t b1 = KVB_MIN(r1, b0 + ROW_BLOCK);
            for (int32_t t = 0; t < N; t++)
                for (int64_t r = b0; r < b1; r++) {
                    if (t == 0 && r + 1 < r1) {
                        const uint8_t *next = w->data + (size_t)(r + 1) * w->row_bytes;
                        for (size_t o = 0; o < w->row_bytes; o += 64) __builtin_prefetch(next + o);
                    }
                    y[(size_t)t * ldy + r] = dot(w->data + (size_t)r * w->row_bytes, &xa[t], n);
                }
        }
        return;
    }
    /* One token: the family's rows for one (AVX2: a row at a time, one
     * stream; its 4-row tiles measured 20% slower on TinyLlama Q8_0 decode,
     * docs/BENCHMARKS.md). More: its full tiles. */
    tiled_rows(k->q8_tile, N == 1 ? k->q8_tile_rows_one : k->q8_tile_rows, k->q8_tile_tokens, w, xa, N, y, ldy, r0, r1);
}

/* Whether w's rows go through the family's integer dot (decode). */
static bool int8_path(const struct kvb_dot_kernels *k, const struct kvb_mat *w) {
    return w->type < GGML_TYPE_COUNT && k->dot_q8[w->type] && w->n_in <= PANEL_MAX_IN && kvb_act_form(w->type) != KVB_ACT_NONE;
}

/* Per-thread room for one token's int8 activations. */
static _Thread_local float t_d[PANEL_MAX_IN / 32];
static _Thread_local int8_t t_q[PANEL_MAX_IN];
static _Thread_local int16_t t_s[PANEL_MAX_IN / 16];

/* Whether w's prefill goes through panels: rows of at most PANEL_MAX_IN, or
 * longer rows of a ggml type whose blocks split them into spans of
 * PANEL_MAX_IN (a dense FFN's down projection of n_ff > 16384: DeepSeek-V3's
 * 18432, Llama 3 70B's 28672). */
static bool panel_fits(const struct kvb_mat *w) {
    return w->n_in <= PANEL_MAX_IN || (w->type < GGML_TYPE_COUNT && kvb_ggml_row_size(w->type, PANEL_MAX_IN) != 0);
}

#define PART_TOKENS 64 /* tokens of a later span's partial products at a time */
static _Thread_local float t_part[PART_TOKENS * KVB_PANEL_ROWS];

/* The prefill path: rows in panels, each packed once and multiplied with
 * every chunk (rows cr0[c] .. cr0[c] + cT[c] of x and y). Each (row, token) value is the panel contract's single
 * FMA chain, so it is the same whatever the chunking or the family. Rows longer than PANEL_MAX_IN go in spans
 * of it: the first span's chain writes y, each later span's is added to it (the same whatever the chunking). */
static void panel_chunks(const struct kvb_dot_kernels *k, const struct kvb_mat *w, const float *x, int64_t ldx, float *y, int64_t ldy,
                         const int32_t *cr0, const int32_t *cT, int32_t nc, int64_t r0, int64_t r1) {
    const int64_t n = w->n_in;
    const kvb_panel_fn panel = k->panel ? k->panel : kvb_panel_ref;
    const kvb_pack_fn pack = k->pack ? k->pack : kvb_pack_panel;
    if (!panel_fits(w)) { /* rows too long for a panel, of no splittable type: a dot per (row, token) */
        for (int32_t c = 0; c < nc; c++) kvb_matmul_rows(k, w, x + (size_t)cr0[c] * ldx, ldx, y + (size_t)cr0[c] * ldy, ldy, cT[c], r0, r1);
        return;
    }
    for (int64_t p0 = r0; p0 < r1; p0 += KVB_PANEL_ROWS) {
        const int np = (int)KVB_MIN((int64_t)KVB_PANEL_ROWS, r1 - p0);
        for (int64_t c0 = 0; c0 < n; c0 += PANEL_MAX_IN) {
            const int64_t cn = KVB_MIN((int64_t)PANEL_MAX_IN, n - c0);
            struct kvb_mat span = *w; /* columns [c0, c0 + cn): the same rows, from the block holding c0 */
            span.n_in = cn;
            span.data = w->data + (c0 ? kvb_ggml_row_size(w->type, c0) : 0);
            pack(&span, p0, np, t_panel, t_scratch);
            for (int32_t c = 0; c < nc; c++) {
                if (c0 == 0) {
                    panel(t_panel, cn, x + (size_t)cr0[c] * ldx, ldx, cT[c], y + (size_t)cr0[c] * ldy + p0, ldy, np);
                    continue;
                }
                for (int32_t t0 = 0; t0 < cT[c]; t0 += PART_TOKENS) {
                    const int nt = (int)KVB_MIN(PART_TOKENS, cT[c] - t0);
                    panel(t_panel, cn, x + (size_t)(cr0[c] + t0) * ldx + c0, ldx, nt, t_part, KVB_PANEL_ROWS, np);
                    for (int t = 0; t < nt; t++)
                        for (int r = 0; r < np; r++) y[(size_t)(cr0[c] + t0 + t) * ldy + p0 + r] += t_part[t * KVB_PANEL_ROWS + r];
                }
            }
        }
    }
}

void kvb_matmul_rows(const struct kvb_dot_kernels *k, const struct kvb_mat *w, const float *x, int64_t ldx, float *y,
                     int64_t ldy, int32_t T, int64_t r0, int64_t r1) {
    kvb_dot_fn dot = k->dot[w->type] ? k->dot[w->type] : kvb_dot_ref.dot[w->type];
    const int64_t n = w->n_in;
    if (T == 1 && int8_path(k, w)) { /* decode: int8 activations once, integer dot products per row */
        const struct kvb_q8_act xa = quantize_for(k, w->type, x, n, t_d, t_q, t_s);
        q8_rows(k, w, &xa, 1, y, ldy, r0, r1);
        return;
    }
    if (T == 1 || !panel_fits(w)) {
        for (int64_t r = r0; r < r1; r++) {
            const void *row = w->data + (size_t)r * w->row_bytes;
            for (int32_t t = 0; t < T; t++) y[(size_t)t * ldy + r] = dot(row, x + (size_t)t * ldx, n);
        }
        return;
    }
    const int32_t r0c = 0;
    panel_chunks(k, w, x, ldx, y, ldy, &r0c, &T, 1, r0, r1);
}

/* Decode rows: N tokens, each computed exactly as a T == 1 call computes it
 * (so a sequence in a batch gets the bits it gets alone), with the weights
 * read once for all N: rows go in blocks small enough to stay in L1/L2 while
 * every token passes over them. xa: the N tokens' int8 activations when the
 * int8 kernel applies (quantized once per call), else NULL. */
static void rows_decode(const struct kvb_dot_kernels *k, const struct kvb_mat *w, const float *x, int64_t ldx, float *y, int64_t ldy,
                        int32_t N, const struct kvb_q8_act *xa, int64_t r0, int64_t r1) {
    const int64_t n = w->n_in;
    if (xa) { /* q8_rows blocks the rows and passes every token over them */
        q8_rows(k, w, xa, N, y, ldy, r0, r1);
        return;
    }
    if (N == 1) {
        kvb_matmul_rows(k, w, x, ldx, y, ldy, 1, r0, r1);
        return;
    }
    if (int8_path(k, w)) {
        for (int64_t b0 = r0; b0 < r1; b0 += ROW_BLOCK) {
            const int64_t b1 = KVB_MIN(r1, b0 + ROW_BLOCK);
            for (int32_t t = 0; t < N; t++) { /* no buffer: quantize per block (deterministic: the same bits) */
                const struct kvb_q8_act one = quantize_for(k, w->type, x + (size_t)t * ldx, n, t_d, t_q, t_s);
                q8_rows(k, w, &one, 1, y + (size_t)t * ldy, ldy, b0, b1);
            }
        }
        return;
    }
    kvb_dot_fn dot = k->dot[w->type] ? k->dot[w->type] : kvb_dot_ref.dot[w->type];
    for (int64_t b0 = r0; b0 < r1; b0 += ROW_BLOCK) {
        const int64_t b1 = KVB_MIN(r1, b0 + ROW_BLOCK);
        for (int32_t t = 0; t < N; t++)
            for (int64_t r = b0; r < b1; r++) y[(size_t)t * ldy + r] = dot(w->data + (size_t)r * w->row_bytes, x + (size_t)t * ldx, n);
    }
}

/* Batched decode (several tokens on the int8 tiles) is bound by arithmetic,
 * not by the weights' stream, so a thread the machine slows down holds the
 * step back by its whole lag. Each thread therefore walks its own share of
 * the rows in chunks, in order (one stream, as a fixed split), and then
 * takes the chunks the others have not reached from their counters. A row's
 * value does not depend on which thread computes it. */
#define SHARE_THREADS_MAX 16
#define SHARE_ROWS 32 /* rows per chunk: two 16-row VNNI tiles, eight 4-row AVX2 ones */
struct row_share {
    struct {
        _Alignas(64) atomic_llong next; /* chunks of this thread's share taken so far */
    } at[SHARE_THREADS_MAX];
};

static void row_share_init(struct row_share *sh) {
    for (int i = 0; i < SHARE_THREADS_MAX; i++) atomic_init(&sh->at[i].next, 0);
}

/* Whether a step of N tokens shares its rows (nth threads). */
static bool row_share_use(const struct kvb_q8_act *xa, int32_t N, int32_t nth) { return xa && N > 1 && nth > 1 && nth <= SHARE_THREADS_MAX; }

/* The next chunk [*r0, *r1) of rows [0, rows) for thread ith: its own share
 * first, then the others'. False when none is left. */
static bool row_share_next(struct row_share *sh, int64_t rows, int32_t ith, int32_t nth, int64_t *r0, int64_t *r1) {
    const int64_t chunks = (rows + SHARE_ROWS - 1) / SHARE_ROWS, per = (chunks + nth - 1) / nth;
    for (int32_t k = 0; k < nth; k++) {
        const int32_t o = (ith + k) % nth;
        const int64_t c0 = per * o, c1 = KVB_MIN(chunks, c0 + per);
        if (c0 >= c1 || atomic_load_explicit(&sh->at[o].next, memory_order_relaxed) >= c1 - c0) continue;
        const int64_t c = c0 + (int64_t)atomic_fetch_add_explicit(&sh->at[o].next, 1, memory_order_relaxed);
        if (c >= c1) continue;
        *r0 = c * SHARE_ROWS;
        *r1 = KVB_MIN(rows, *r0 + SHARE_ROWS);
        return true;
    }
    return false;
}

/* One token (decode, or a T == 1 call): x in w's int8 form, quantized once
 * per call and thread into the thread's own room, or NULL when w's rows take
 * the float dot. */
static const struct kvb_q8_act *one_token_act(const struct kvb_dot_kernels *k, const struct kvb_mat *w, const float *x,
                                              struct kvb_q8_act *room) {
    if (!int8_path(k, w)) return NULL;
    *room = quantize_for(k, w->type, x, w->n_in, t_d, t_q, t_s);
    return room;
}

/* Rows [r0, r1) of w for one token: as kvb_matmul_rows with T == 1 computes
 * them (xa: one_token_act's result for x). */
static void one_token_rows(const struct kvb_dot_kernels *k, const struct kvb_mat *w, const float *x, const struct kvb_q8_act *xa, float *y,
                           int64_t r0, int64_t r1) {
    if (xa) q8_rows(k, w, xa, 1, y, 1, r0, r1);
    else kvb_matmul_rows(k, w, x, 1, y, 1, 1, r0, r1);
}

struct mm_job {
    const struct kvb_mat *w;
    const float *x;
    float *y;
    int64_t ldx, ldy;
    int32_t T;
    bool decode;
    const struct kvb_q8_act *xa; /* decode: pre-quantized activations, or NULL */
    const int32_t *cr0, *cT;     /* chunks: first rows and lengths (nc of them), or NULL */
    int32_t nc;
    atomic_llong next_panel;     /* prefill: the next panel a thread takes */
    struct row_share share;      /* batched decode on the int8 tiles */
};

static void mm_worker(int32_t ith, int32_t nth, void *arg) {
    struct mm_job *j = arg;
    const int64_t n = j->w->n_out;
    if (j->cr0 || (!j->decode && j->T > 1 && panel_fits(j->w))) {
        /* Prefill: threads take panels from a shared counter, so a thread
         * the machine slows down takes fewer (a panel's values do not depend
         * on which thread computes it). */
        const int32_t zero = 0;
        const int32_t *cr0 = j->cr0 ? j->cr0 : &zero, *cT = j->cr0 ? j->cT : &j->T, nc = j->cr0 ? j->nc : 1;
        for (;;) {
            const int64_t r0 = (int64_t)atomic_fetch_add_explicit(&j->next_panel, 1, memory_order_relaxed) * KVB_PANEL_ROWS;
            if (r0 >= n) break;
            panel_chunks(kvb_dot_kernels(), j->w, j->x, j->ldx, j->y, j->ldy, cr0, cT, nc, r0, KVB_MIN(n, r0 + KVB_PANEL_ROWS));
        }
        return;
    }
    if (j->T == 1 && nth > 1 && nth <= SHARE_THREADS_MAX) {
        /* One token: the rows shared in chunks as for batched decode (own
         * share first, then the others'), so a thread the machine has
         * descheduled holds the join back by at most the chunk it holds,
         * not by its whole share; the pool runs this without waiting for
         * workers that do not come (kvb_threadpool_run_shared). */
        const struct kvb_dot_kernels *k = kvb_dot_kernels();
        struct kvb_q8_act room;
        const struct kvb_q8_act *xa = one_token_act(k, j->w, j->x, &room);
        int64_t r0, r1;
        while (row_share_next(&j->share, n, ith, nth, &r0, &r1)) one_token_rows(k, j->w, j->x, xa, j->y, r0, r1);
        return;
    }
    if (j->decode && row_share_use(j->xa, j->T, nth)) {
        int64_t r0, r1;
        while (row_share_next(&j->share, n, ith, nth, &r0, &r1))
            rows_decode(kvb_dot_kernels(), j->w, j->x, j->ldx, j->y, j->ldy, j->T, j->xa, r0, r1);
        return;
    }
    const int64_t per = (n + nth - 1) / nth;
    const int64_t r0 = per * ith, r1 = KVB_MIN(n, r0 + per);
    if (r0 >= r1) return;
    if (j->decode) rows_decode(kvb_dot_kernels(), j->w, j->x, j->ldx, j->y, j->ldy, j->T, j->xa, r0, r1);
    else kvb_matmul_rows(kvb_dot_kernels(), j->w, j->x, j->ldx, j->y, j->ldy, j->T, r0, r1);
}

/* Whether mm_worker claims all of j's work from counters (then the pool
 * need not wait for a worker the machine has not scheduled). */
static bool mm_claims(const struct mm_job *j, int32_t nth) {
    if (j->cr0 || (!j->decode && j->T > 1 && panel_fits(j->w))) return true;
    return nth <= SHARE_THREADS_MAX && (j->T == 1 || (j->decode && row_share_use(j->xa, j->T, nth)));
}

static void mm_run(struct kvb_threadpool *tp, struct mm_job *j) {
    if (mm_claims(j, kvb_threadpool_n_threads(tp))) kvb_threadpool_run_shared(tp, mm_worker, j);
    else kvb_threadpool_run(tp, mm_worker, j);
}

void kvb_matmul(struct kvb_threadpool *tp, const struct kvb_mat *w, const float *x, int64_t ldx, float *y, int64_t ldy, int32_t T) {
    struct mm_job j = {.w = w, .x = x, .y = y, .ldx = ldx, .ldy = ldy, .T = T};
    atomic_init(&j.next_panel, 0);
    row_share_init(&j.share);
    /* small matrices: threads cost more than they save */
    if (w->n_out * w->n_in * (int64_t)T < (1 << 16)) mm_worker(0, 1, &j);
    else mm_run(tp, &j);
}

void kvb_matmul_decode(struct kvb_threadpool *tp, const struct kvb_mat *w, const float *x, int64_t ldx, float *y, int64_t ldy,
                       int32_t N, struct kvb_q8_buf *qb) {
    if (N <= 0) return;
    if (qb && N > KVB_Q8_BUF_TOKENS) { /* in slices that each quantize their tokens once (a row's bits do not depend on its slice) */
        for (int32_t r = 0; r < N; r += KVB_Q8_BUF_TOKENS)
            kvb_matmul_decode(tp, w, x + (size_t)r * (size_t)ldx, ldx, y + (size_t)r * (size_t)ldy, ldy, KVB_MIN(KVB_Q8_BUF_TOKENS, N - r), qb);
        return;
    }
    struct mm_job j = {.w = w, .x = x, .y = y, .ldx = ldx, .ldy = ldy, .T = N, .decode = true};
    atomic_init(&j.next_panel, 0);
    row_share_init(&j.share);
    const struct kvb_dot_kernels *k = kvb_dot_kernels();
    const int64_t n = w->n_in;
    if (N > 1 && qb && int8_path(k, w) && N <= KVB_Q8_BUF_TOKENS && (int64_t)N * n <= qb->cap) {
        /* quantize each token once for every row (the same bits a lone call computes) */
        for (int32_t t = 0; t < N; t++)
            qb->act[t] = quantize_for(k, w->type, x + (size_t)t * ldx, n, qb->d + (size_t)t * (size_t)(n / 32), qb->q + (size_t)t * (size_t)n,
                                      qb->s + (size_t)t * (size_t)(n / 16));
        j.xa = qb->act;
    }
    if (w->n_out * w->n_in * (int64_t)N < (1 << 16)) mm_worker(0, 1, &j);
    else mm_run(tp, &j);
}

/* Several matrices on the same decode rows (q/k/v, gate/up): one threadpool
 * run over their rows laid end to end, and the activations quantized once
 * when every matrix takes the same int8 form. A row's value does not depend
 * on which thread or tile computes it, so each y[i] is bit-identical to
 * kvb_matmul_decode of w[i] alone; the saving is the joins and quantizations. */
#define GROUP_MAX 4
struct mm_group_job {
    const struct kvb_mat *w[GROUP_MAX];
    float *y[GROUP_MAX];
    int64_t ldy[GROUP_MAX], rows;
    int32_t n_mat, N;
    const float *x;
    int64_t ldx;
    const struct kvb_q8_act *xa;
    struct row_share share;
};

/* Rows [g0, g1) of the matrices laid end to end. */
static void mm_group_rows(const struct mm_group_job *j, int64_t g0, int64_t g1) {
    int64_t base = 0;
    for (int32_t i = 0; i < j->n_mat && base < g1; base += j->w[i]->n_out, i++) {
        const int64_t r0 = KVB_MAX(g0 - base, (int64_t)0), r1 = KVB_MIN(g1 - base, j->w[i]->n_out);
        if (r0 < r1) rows_decode(kvb_dot_kernels(), j->w[i], j->x, j->ldx, j->y[i], j->ldy[i], j->N, j->xa, r0, r1);
    }
}

/* Whether mm_group_worker claims all its work from counters (N tokens, xa:
 * their shared int8 form or NULL, nth threads). */
static bool group_claims(int32_t N, const struct kvb_q8_act *xa, int32_t nth) {
    return nth <= SHARE_THREADS_MAX && (N == 1 || row_share_use(xa, N, nth));
}

static void mm_group_worker(int32_t ith, int32_t nth, void *arg) {
    struct mm_group_job *j = arg;
    if (j->N == 1 && nth > 1 && nth <= SHARE_THREADS_MAX) {
        /* one token: shared rows, as in mm_worker; the token quantized once
         * per thread when every matrix takes the same int8 form */
        const struct kvb_dot_kernels *k = kvb_dot_kernels();
        struct kvb_q8_act room;
        const struct kvb_q8_act *xa = j->xa;
        bool same_form = !xa;
        for (int32_t i = 0; same_form && i < j->n_mat; i++)
            same_form = int8_path(k, j->w[i]) && kvb_act_form(j->w[i]->type) == kvb_act_form(j->w[0]->type);
        if (same_form) xa = one_token_act(k, j->w[0], j->x, &room);
        int64_t g0, g1;
        while (row_share_next(&j->share, j->rows, ith, nth, &g0, &g1)) {
            if (!xa) {
                mm_group_rows(j, g0, g1);
                continue;
            }
            int64_t base = 0;
            for (int32_t i = 0; i < j->n_mat && base < g1; base += j->w[i]->n_out, i++) {
                const int64_t r0 = KVB_MAX(g0 - base, (int64_t)0), r1 = KVB_MIN(g1 - base, j->w[i]->n_out);
                if (r0 < r1) one_token_rows(k, j->w[i], j->x, xa, j->y[i], r0, r1);
            }
        }
        return;
    }
    if (row_share_use(j->xa, j->N, nth)) {
        int64_t g0, g1;
        while (row_share_next(&j->share, j->rows, ith, nth, &g0, &g1)) mm_group_rows(j, g0, g1);
        return;
    }
    const int64_t per = (j->rows + nth - 1) / nth, g0 = per * ith, g1 = KVB_MIN(j->rows, g0 + per);
    mm_group_rows(j, g0, g1);
}

void kvb_matmul_decode_group(struct kvb_threadpool *tp, const struct kvb_mat *const *w, int32_t n_mat, const float *x, int64_t ldx,
                             float *const *y, const int64_t *ldy, int32_t N, struct kvb_q8_buf *qb) {
    if (N <= 0 || n_mat <= 0) return;
    if (qb && N > KVB_Q8_BUF_TOKENS && n_mat <= GROUP_MAX) { /* in slices, as kvb_matmul_decode (more matrices: it slices each) */
        float *ys[GROUP_MAX];
        for (int32_t r = 0; r < N; r += KVB_Q8_BUF_TOKENS) {
            for (int32_t i = 0; i < n_mat; i++) ys[i] = y[i] + (size_t)r * (size_t)ldy[i];
            kvb_matmul_decode_group(tp, w, n_mat, x + (size_t)r * (size_t)ldx, ldx, ys, ldy, KVB_MIN(KVB_Q8_BUF_TOKENS, N - r), qb);
        }
        return;
    }
    const struct kvb_dot_kernels *k = kvb_dot_kernels();
    const int64_t n = w[0]->n_in;
    bool same = n_mat <= GROUP_MAX, shared = N > 1 && qb && N <= KVB_Q8_BUF_TOKENS && (int64_t)N * n <= qb->cap;
    for (int32_t i = 0; same && i < n_mat; i++) {
        same = w[i]->n_in == n;
        shared = shared && int8_path(k, w[i]) && kvb_act_form(w[i]->type) == kvb_act_form(w[0]->type);
    }
    /* other widths, or int8 forms that differ (each quantizes its own): matrix by matrix */
    if (!same || (!shared && N > 1 && qb)) {
        for (int32_t i = 0; i < n_mat; i++) kvb_matmul_decode(tp, w[i], x, ldx, y[i], ldy[i], N, qb);
        return;
    }
    struct mm_group_job j = {.n_mat = n_mat, .N = N, .x = x, .ldx = ldx};
    row_share_init(&j.share);
    for (int32_t i = 0; i < n_mat; i++) {
        j.w[i] = w[i];
        j.y[i] = y[i];
        j.ldy[i] = ldy[i];
        j.rows += w[i]->n_out;
    }
    if (shared) { /* each token quantized once for every row of every matrix */
        for (int32_t t = 0; t < N; t++)
            qb->act[t] = quantize_for(k, w[0]->type, x + (size_t)t * ldx, n, qb->d + (size_t)t * (size_t)(n / 32), qb->q + (size_t)t * (size_t)n,
                                      qb->s + (size_t)t * (size_t)(n / 16));
        j.xa = qb->act;
    }
    if (j.rows * n * (int64_t)N < (1 << 16)) mm_group_worker(0, 1, &j);
    else if (group_claims(j.N, j.xa, kvb_threadpool_n_threads(tp))) kvb_threadpool_run_shared(tp, mm_group_worker, &j);
    else kvb_threadpool_run(tp, mm_group_worker, &j);
}

void kvb_matmul_chunks(struct kvb_threadpool *tp, const struct kvb_mat *w, const float *x, int64_t ldx, float *y, int64_t ldy,
                       const int32_t *r0, const int32_t *T, int32_t n) {
    if (n <= 0) return;
    if (w->n_in > PANEL_MAX_IN) { /* the per-row path, chunk by chunk, as kvb_matmul would */
        for (int32_t c = 0; c < n; c++) kvb_matmul(tp, w, x + (size_t)r0[c] * ldx, ldx, y + (size_t)r0[c] * ldy, ldy, T[c]);
        return;
    }
    int64_t rows = 0;
    for (int32_t c = 0; c < n; c++) rows += T[c];
    struct mm_job j = {.w = w, .x = x, .y = y, .ldx = ldx, .ldy = ldy, .cr0 = r0, .cT = T, .nc = n};
    atomic_init(&j.next_panel, 0);
    if (w->n_out * w->n_in * rows < (1 << 16)) mm_worker(0, 1, &j);
    else mm_run(tp, &j);
}

bool kvb_matmul_int8_rows(const struct kvb_mat *w) { return int8_path(kvb_dot_kernels(), w); }

bool kvb_matmul_int8_tiles(const struct kvb_mat *w) {
    const struct kvb_dot_kernels *k = kvb_dot_kernels();
    if (w->type < GGML_TYPE_COUNT && k->kq_tile[w->type] && k->kq_tile_prompts && int8_path(k, w)) return true;
    return w->type == GGML_TYPE_Q8_0 && int8_path(k, w) && k->q8_tile != NULL && k->q8_tile_prompts;
}
