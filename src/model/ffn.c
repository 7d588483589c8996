/*
 * ffn.c — the matmuls of a pass and the dense FFN, below both forward.c (the
 * attention and FFN blocks of a layer) and moe.c (each expert is a dense FFN
 * over its gathered rows): y = W x over a pass's rows, each decode row as a
 * lone decode and each prompt chunk as if alone (struct kvb_pass_rows), so a
 * row's bits never depend on what shares the pass; per-tensor scales and
 * biases; the gated activations; and kvb_fwd_ffn, the three matmuls of a
 * dense FFN. Nothing here calls forward.c or moe.c.
 */
#include "model.h"

#include <math.h>

/* y = W x over the prompt rows of a pass: the chunks together (each as if
 * alone), one-row prompts as kvb_matmul with T = 1. */
static void mm_prompts(struct kvb_threadpool *tp, const struct kvb_pass_rows *p, const struct kvb_mat *w, const float *x, int64_t ldx, float *y,
                       int64_t ldy, struct kvb_q8_buf *q8) {
    int32_t big_r0[64], big_T[64], nb = 0, c0 = 0;
    if (p->int8_below > 0 && kvb_matmul_int8_rows(w)) { /* small chunks on the integer dot, the others in panels */
        for (int32_t c = 0; c < p->nc; c++) {
            if (p->cT[c] < p->int8_below) {
                kvb_matmul_decode(tp, w, x + (size_t)p->cr0[c] * ldx, ldx, y + (size_t)p->cr0[c] * ldy, ldy, p->cT[c], q8);
                continue;
            }
            if (nb == 64) { /* flush */
                kvb_matmul_chunks(tp, w, x, ldx, y, ldy, big_r0, big_T, nb);
                nb = 0;
            }
            big_r0[nb] = p->cr0[c];
            big_T[nb++] = p->cT[c];
        }
        if (nb) kvb_matmul_chunks(tp, w, x, ldx, y, ldy, big_r0, big_T, nb);
        c0 = p->nc;
    }
    if (c0 < p->nc) kvb_matmul_chunks(tp, w, x, ldx, y, ldy, p->cr0, p->cT, p->nc); /* weights expanded once for every chunk */
    for (int32_t i = 0; i < p->n_one; i++) kvb_matmul(tp, w, x + (size_t)p->one[i] * ldx, ldx, y + (size_t)p->one[i] * ldy, ldy, 1);
}

void kvb_fwd_mm(struct kvb_threadpool *tp, struct kvb_q8_buf *q8, const struct kvb_pass_rows *p, const struct kvb_mat *w, const float *x,
                int64_t ldx, float *y, int64_t ldy) {
    const bool tiles = kvb_matmul_int8_tiles(w); /* Q8_0 or K-quant rows on int8 tiles: every row of the pass, prompts too */
    kvb_matmul_decode(tp, w, x, ldx, y, ldy, tiles ? p->n_rows : p->n_dec, q8);
    if (!tiles) mm_prompts(tp, p, w, x, ldx, y, ldy, q8);
}

void kvb_fwd_mm_group(struct kvb_threadpool *tp, struct kvb_q8_buf *q8, const struct kvb_pass_rows *p, const struct kvb_mat *const *w, int32_t n,
                      const float *x, int64_t ldx, float *const *y, const int64_t *ldy) {
    const bool tiles = kvb_matmul_int8_tiles(w[0]);
    for (int32_t i = 1; i < n; i++)
        if (kvb_matmul_int8_tiles(w[i]) != tiles) { /* mixed: each its own path */
            for (int32_t j = 0; j < n; j++) kvb_fwd_mm(tp, q8, p, w[j], x, ldx, y[j], ldy[j]);
            return;
        }
    kvb_matmul_decode_group(tp, w, n, x, ldx, y, ldy, tiles ? p->n_rows : p->n_dec, q8);
    if (!tiles)
        for (int32_t i = 0; i < n; i++) mm_prompts(tp, p, w[i], x, ldx, y[i], ldy[i], q8);
}

void kvb_fwd_scale_rows(float *y, int32_t rows, int64_t n, float s) {
    if (s != 1.0f)
        for (size_t i = 0; i < (size_t)rows * (size_t)n; i++) y[i] *= s;
}

void kvb_fwd_add_bias(float *y, int32_t rows, int64_t n, const float *b) {
    if (b)
        for (int32_t t = 0; t < rows; t++)
            for (int64_t i = 0; i < n; i++) y[(size_t)t * n + i] += b[i];
}

/* The gated activations, g = act(g) * u over n values, in blocks through
 * the kernel family's vexp (ref: expf) and split over the pool's threads
 * when there is enough work (elementwise: a value's bits do not depend on
 * the split, so batch equals single):
 *   SiLU       g / (1 + e^-g)
 *   GELU-tanh  0.5 g (1 + tanh(k (g + 0.044715 g^3))) = g e / (1 + e),
 *              e = e^(2 k (g + 0.044715 g^3)), k = sqrt(2 / pi)
 *   OAI        g' = min(g, 7), u' = clamp(u, -7, 7): g' / (1 + e^(-1.702 g')) * (u' + 1)
 * vexp clamps its argument (no inf), so all stay finite for any g. */
struct glu_job {
    const struct kvb_kernels *kr;
    enum kvb_ffn_act act;
    float *g;
    const float *u;
    size_t n;
};

static void glu_worker(int32_t ith, int32_t nth, void *arg) {
    const struct glu_job *j = arg;
    const size_t per = (j->n + (size_t)nth - 1) / (size_t)nth, a = per * (size_t)ith, b = KVB_MIN(j->n, a + per);
    float e[256];
    for (size_t i = a; i < b; i += 256) {
        const int32_t m = (int32_t)KVB_MIN((size_t)256, b - i);
        float *g = j->g + i;
        const float *u = j->u + i;
        switch (j->act) {
        case KVB_FFN_GELU_TANH:
            for (int32_t k = 0; k < m; k++) e[k] = 1.5957691216057308f * (g[k] + 0.044715f * g[k] * g[k] * g[k]);
            j->kr->vexp(e, m);
            for (int32_t k = 0; k < m; k++) g[k] = g[k] * (e[k] / (1.0f + e[k])) * u[k];
            break;
        case KVB_FFN_SWIGLU_OAI:
            for (int32_t k = 0; k < m; k++) e[k] = -1.702f * fminf(g[k], 7.0f);
            j->kr->vexp(e, m);
            for (int32_t k = 0; k < m; k++) g[k] = fminf(g[k], 7.0f) / (1.0f + e[k]) * (fminf(fmaxf(u[k], -7.0f), 7.0f) + 1.0f);
            break;
        default:
            for (int32_t k = 0; k < m; k++) e[k] = -g[k];
            j->kr->vexp(e, m);
            for (int32_t k = 0; k < m; k++) g[k] = g[k] / (1.0f + e[k]) * u[k];
        }
    }
}

void kvb_fwd_glu(struct kvb_threadpool *tp, enum kvb_ffn_act act, float *g, const float *u, size_t n) {
    struct glu_job j = {kvb_kernels(), act, g, u, n};
    kvb_threadpool_run(n >= 16384 ? tp : NULL, glu_worker, &j); /* below: waking the pool costs more */
}

void kvb_fwd_ffn(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, const struct kvb_pass_rows *p, const struct kvb_ffn_w *w,
                 int64_t F, const float *xin, float *out) {
    const int64_t E = m->info.n_embd;
    const int32_t R = p->n_rows;
    if (!w->gate->data) { /* ungated (nemotron_h): relu(xin Wu^T + bu)^2, then down */
        kvb_fwd_mm(tp, f->q8, p, w->up, xin, E, f->hu, F);
        kvb_fwd_add_bias(f->hu, R, F, w->b_up);
        kvb_fwd_scale_rows(f->hu, R, F, w->s_up);
        for (size_t i = 0; i < (size_t)R * (size_t)F; i++) {
            const float u = f->hu[i] > 0 ? f->hu[i] : 0.0f;
            f->hg[i] = u * u;
        }
        kvb_fwd_mm(tp, f->q8, p, w->down, f->hg, F, out, E);
        kvb_fwd_add_bias(out, R, E, w->b_down);
        kvb_fwd_scale_rows(out, R, E, w->s_down);
        return;
    }
    {
        const struct kvb_mat *mw[2] = {w->gate, w->up};
        float *y[2] = {f->hg, f->hu};
        const int64_t ld[2] = {F, F};
        kvb_fwd_mm_group(tp, f->q8, p, mw, 2, xin, E, y, ld);
    }
    kvb_fwd_add_bias(f->hg, R, F, w->b_gate); /* in the FFN the scales come after the biases, as in llama.cpp */
    kvb_fwd_add_bias(f->hu, R, F, w->b_up);
    kvb_fwd_scale_rows(f->hg, R, F, w->s_gate);
    kvb_fwd_scale_rows(f->hu, R, F, w->s_up);
    kvb_fwd_glu(tp, m->act, f->hg, f->hu, (size_t)R * F);
    kvb_fwd_mm(tp, f->q8, p, w->down, f->hg, F, out, E);
    kvb_fwd_add_bias(out, R, E, w->b_down);
    kvb_fwd_scale_rows(out, R, E, w->s_down);
}
