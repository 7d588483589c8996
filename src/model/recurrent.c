/*
 * recurrent.c — the Gated DeltaNet layer of the hybrid families (qwen35,
 * qwen35moe: three layers of four), as llama.cpp's delta-net graph computes
 * it (src/models/qwen35.cpp build_layer_attn_linear):
 *
 *   mixed = x Wqkv^T [C]   z = x Wz^T [Hv*Dv]   beta = sigmoid(x Wb^T) [Hv]
 *   g = softplus(x Wa^T + dt_bias) * a          (a = -exp(A_log), stored)
 *   y = silu(causal depthwise conv_K(mixed))    (K - 1 inputs carried over)
 *   q, k, v = the Hk, Hk and Hv heads of y;  q, k l2-normed (eps: rms_eps);
 *   q /= sqrt(Dk);  v head h reads q/k head h % Hk (ggml's repeat)
 *   per v head, state S [Dk][Dv]:  S *= e^g;  d = beta (v - S^T k);
 *                                  S += k d^T;  o = S^T q
 *   out = (rmsnorm(o per head) * ssm_norm * silu(z)) Wout^T
 *
 * The state lives in the sequence's cache (kvb_cache_state): per layer Hv*Dk
 * rows of Dv floats (head h's rows from h*Dk), then the conv history, K - 1
 * rows of C values packed into further rows of Dv floats. A decode step and
 * a one-row prompt run the recurrent form, a prompt chunk the chunked form
 * (src/ops/deltanet.c), each sequence alone, so a row's bits never depend on
 * what shares the pass. The (sequence, head) pairs split over the threads.
 *
 * LFM2's short convolution (info.shortconv; llama.cpp's lfm2.cpp
 * build_shortconv_block) is the other recurrent layer kind:
 *
 *   B, C, x = the three E-wide chunks of x W_in^T    (shortconv.in_proj)
 *   y = (C * causal depthwise conv_K(B * x)) W_out^T (no activation)
 *
 * Its state is the conv history alone: the last K - 1 rows of B*x (E values
 * each), packed into state rows of head_dim floats (so a row fits any page
 * the attention layers' K/V rows do). The same conv kernel, without SiLU.
 *
 * Mamba-2 (info.mamba2; llama.cpp's build_mamba2_layer, ggml_ssm_conv and
 * ggml_ssm_scan) is the third, H heads of P channels, G groups, state size N:
 *
 *   z, xBC, dt = x W_in^T  (d_inner, d_inner + 2 G N, H wide)
 *   xBC = silu(causal depthwise conv_K(xBC) + conv bias);  x, B, C = its parts
 *   dt = softplus(dt + dt_bias);  per head h (group g = h / (H / G)):
 *       S_h = e^(dt A_h) S_h + dt x_h B_g^T;  y_h = S_h C_g + D_h x_h
 *   out = (rmsnorm_per_group(y * silu(z)) * ssm_norm) W_out^T
 *
 * Its state: per layer the H P rows of N floats of S, then the conv history
 * ((K - 1) x (d_inner + 2 G N) values) packed into further rows of N floats.
 * A decode step and a one-row prompt run the recurrent form, a prompt chunk
 * the chunked (SSD) form (src/ops/ssd.c).
 *
 * Calls: ffn.c (the projections), ops (the kernels); called by forward.c.
 */
#include "model.h"
#include "../ops/deltanet.h"
#include "../ops/ssd.h"

#include <math.h>

int32_t kvb_rec_row_floats(const struct kvb_model_info *in) { return in->shortconv ? in->head_dim : in->ssm_state; }

/* The conv history's (K - 1) x C values (C: a short conv's E channels, Gated DeltaNet's 2 Hk Dk + Hv Dv) in whole rows. */
/* The conv's channels: a short conv's E, Gated DeltaNet's 2 Hk Dk + Hv Dv, Mamba-2's d_inner + 2 G N. */
static int64_t conv_channels(const struct kvb_model_info *in) {
    if (in->shortconv) return in->n_embd;
    if (in->mamba2) return (int64_t)in->ssm_inner + 2 * (int64_t)in->ssm_groups * in->ssm_state;
    return 2 * (int64_t)in->ssm_groups * in->ssm_state + (int64_t)in->ssm_heads * in->ssm_state;
}

int32_t kvb_rec_conv_rows(const struct kvb_model_info *in) {
    const int64_t C = conv_channels(in);
    const int64_t W = kvb_rec_row_floats(in);
    return (int32_t)(((int64_t)(in->ssm_conv - 1) * C + W - 1) / W);
}

int32_t kvb_rec_state_rows(const struct kvb_model_info *in) {
    if (in->shortconv) return kvb_rec_conv_rows(in);
    if (in->mamba2) return in->ssm_inner + kvb_rec_conv_rows(in);
    return in->ssm_heads * in->ssm_state + kvb_rec_conv_rows(in);
}

kvb_status kvb_rec_buf_init(struct kvb_rec_buf *b, const struct kvb_model_info *in, int32_t rows) {
    memset(b, 0, sizeof *b);
    if (!in->n_rec_layers) return KVB_OK;
    if (in->shortconv) { /* mix [T][3E] (B, C, x), z [T][E] (B*x), y [T][E] (the conv, then times C), hist [K-1][E] */
        const size_t T = (size_t)rows, E = (size_t)in->n_embd;
        b->mix = kvb_malloc(sizeof(float) * T * 3 * E);
        b->z = kvb_malloc(sizeof(float) * T * E);
        b->y = kvb_malloc(sizeof(float) * T * E);
        b->hist = kvb_malloc(sizeof(float) * (size_t)KVB_MAX(in->ssm_conv - 1, 1) * E);
        b->rows = kvb_malloc(sizeof(float *const *) * T);
        if (!b->mix || !b->z || !b->y || !b->hist || !b->rows) {
            kvb_rec_buf_free(b);
            return kvb_fail(KVB_ERR_NOMEM, "out of memory for the short-conv layers' activations (%d rows)", (int)rows);
        }
        return KVB_OK;
    }
    if (in->mamba2) { /* mix [T][W = 2 d_inner + 2GN + H], y [T][W] (the conv's output at mix's stride), o [T][d_inner], g [T][H] (dt), hist [K-1][Cx] */
        const size_t T = (size_t)rows, H = (size_t)in->ssm_heads, DI = (size_t)in->ssm_inner, Cx = (size_t)conv_channels(in);
        b->mix = kvb_malloc(sizeof(float) * T * (DI + Cx + H));
        b->y = kvb_malloc(sizeof(float) * T * (DI + Cx + H));
        b->o = kvb_malloc(sizeof(float) * T * DI);
        b->g = kvb_malloc(sizeof(float) * T * H);
        b->hist = kvb_malloc(sizeof(float) * (size_t)KVB_MAX(in->ssm_conv - 1, 1) * Cx);
        b->rows = kvb_malloc(sizeof(float *const *) * T);
        if (!b->mix || !b->y || !b->o || !b->g || !b->hist || !b->rows) {
            kvb_rec_buf_free(b);
            return kvb_fail(KVB_ERR_NOMEM, "out of memory for the Mamba-2 layers' activations (%d rows)", (int)rows);
        }
        return KVB_OK;
    }
    const size_t T = (size_t)rows, Hv = (size_t)in->ssm_heads, D = (size_t)in->ssm_state;
    const size_t C = 2 * (size_t)in->ssm_groups * D + Hv * D;
    b->mix = kvb_malloc(sizeof(float) * T * C);
    b->y = kvb_malloc(sizeof(float) * T * C);
    b->z = kvb_malloc(sizeof(float) * T * Hv * D);
    b->o = kvb_malloc(sizeof(float) * T * Hv * D);
    b->beta = kvb_malloc(sizeof(float) * T * Hv);
    b->g = kvb_malloc(sizeof(float) * T * Hv);
    b->hist = kvb_malloc(sizeof(float) * (size_t)KVB_MAX(in->ssm_conv - 1, 1) * C);
    b->rows = kvb_malloc(sizeof(float *const *) * T);
    if (!b->mix || !b->y || !b->z || !b->o || !b->beta || !b->g || !b->hist || !b->rows) {
        kvb_rec_buf_free(b);
        return kvb_fail(KVB_ERR_NOMEM, "out of memory for the recurrent layers' activations (%d rows)", (int)rows);
    }
    return KVB_OK;
}

void kvb_rec_buf_free(struct kvb_rec_buf *b) {
    kvb_free(b->mix); kvb_free(b->y); kvb_free(b->z); kvb_free(b->o); kvb_free(b->beta); kvb_free(b->g);
    kvb_free(b->hist); kvb_free(b->rows); kvb_free(b->scratch);
    memset(b, 0, sizeof *b);
}

/* The conv history of a layer's state: (K - 1) x C values, packed into rows of
 * D floats from row r0 on; to (gather) or from (scatter) hist. */
static void conv_hist(float *const *rows, int32_t r0, int32_t D, float *hist, size_t n, bool gather) {
    for (size_t at = 0; at < n; at += (size_t)D) {
        const size_t len = KVB_MIN((size_t)D, n - at);
        float *row = rows[r0 + (int32_t)(at / (size_t)D)];
        if (gather) memcpy(hist + at, row, sizeof(float) * len);
        else memcpy(row, hist + at, sizeof(float) * len);
    }
}

/* The causal convolution of every segment's rows x ([rows][ldx], C channels,
 * K taps w) into y: each sequence's state (its pages, its position advanced by
 * its T) gives the history before its first row, and its last K - 1 inputs go
 * back into it (rows of W floats from row0 on). silu: Gated DeltaNet's SiLU
 * after the conv (LFM2's short conv has none). */
static kvb_status conv_segments(struct kvb_rec_buf *b, const struct kvb_fwd_seg *seg, int32_t n_seg, int32_t l, const float *w, int32_t K,
                                int64_t C, int32_t row0, int32_t W, const float *x, int64_t ldx, float *y, bool silu) {
    for (int32_t i = 0; i < n_seg; i++) {
        kvb_status st = kvb_cache_state(seg[i].cache, l, seg[i].T, &b->rows[i]);
        if (st != KVB_OK) return st;
    }
    const size_t nh = (size_t)(K - 1) * (size_t)C;
    for (int32_t i = 0; i < n_seg; i++) {
        const struct kvb_fwd_seg *g = &seg[i];
        if (nh) conv_hist(b->rows[i], row0, W, b->hist, nh, true);
        kvb_ssm_conv(b->hist, w, (int32_t)C, K, x + (size_t)g->r0 * ldx, ldx, g->T, y + (size_t)g->r0 * ldx, ldx, silu);
        if (nh) conv_hist(b->rows[i], row0, W, b->hist, nh, false);
    }
    return KVB_OK;
}

static void l2norm(float *x, int32_t n, float eps, float scale) {
    double ss = 0;
    for (int32_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float s = scale / fmaxf(sqrtf((float)ss), eps);
    for (int32_t i = 0; i < n; i++) x[i] *= s;
}

struct rec_job {
    const struct kvb_model_info *in;
    const struct kvb_fwd_seg *seg;
    struct kvb_rec_buf *b;
    int32_t n_items;
    size_t scratch_n;
};

static void rec_worker(int32_t ith, int32_t nth, void *arg) {
    const struct rec_job *jb = arg;
    const struct kvb_model_info *in = jb->in;
    const int32_t Hk = in->ssm_groups, Hv = in->ssm_heads, D = in->ssm_state;
    const int64_t C = 2 * (int64_t)Hk * D + (int64_t)Hv * D, VD = (int64_t)Hv * D;
    const int32_t i0 = (int32_t)((int64_t)jb->n_items * ith / nth), i1 = (int32_t)((int64_t)jb->n_items * (ith + 1) / nth);
    for (int32_t it = i0; it < i1; it++) {
        const int32_t s = it / Hv, h = it % Hv, kh = h % Hk;
        const struct kvb_fwd_seg *g = &jb->seg[s];
        const float *y = jb->b->y + (size_t)g->r0 * C;
        const float *q = y + (size_t)kh * D, *k = y + (size_t)Hk * D + (size_t)kh * D, *v = y + 2 * (size_t)Hk * D + (size_t)h * D;
        const float *gg = jb->b->g + (size_t)g->r0 * Hv + h, *beta = jb->b->beta + (size_t)g->r0 * Hv + h;
        float *o = jb->b->o + (size_t)g->r0 * VD + (size_t)h * D;
        float *const *S = jb->b->rows[s] + (size_t)h * D;
        if (g->decode || g->T == 1) kvb_gdn_recurrent(S, D, D, g->T, q, C, k, C, v, C, gg, beta, Hv, o, VD);
        else kvb_gdn_chunked(S, D, D, g->T, q, C, k, C, v, C, gg, beta, Hv, o, VD, jb->b->scratch + (size_t)ith * jb->scratch_n);
    }
}

/* LFM2's short-conv layer l: out = (C * conv(B * x)) W_out^T, each segment's history from and back to its state. */
static kvb_status shortconv_layer(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, const struct kvb_fwd_seg *seg,
                                  int32_t n_seg, int32_t l, const float *xin, float *out) {
    const struct kvb_model_info *in = &m->info;
    const struct kvb_layer *L = &m->layers[l];
    struct kvb_rec_buf *b = &f->rec;
    const int32_t K = in->ssm_conv, W = kvb_rec_row_floats(in);
    const int64_t E = in->n_embd;
    const int32_t R = f->pass.n_rows;
    kvb_fwd_mm(tp, f->q8, &f->pass, &L->ssm_qkv, xin, E, b->mix, 3 * E);
    for (int32_t t = 0; t < R; t++) {
        const float *bb = b->mix + (size_t)t * 3 * E, *x = bb + 2 * E;
        float *bx = b->z + (size_t)t * E;
        for (int64_t c = 0; c < E; c++) bx[c] = bb[c] * x[c];
    }
    kvb_status st = conv_segments(b, seg, n_seg, l, L->ssm_conv, K, E, 0, W, b->z, E, b->y, false);
    if (st != KVB_OK) return st;
    for (int32_t t = 0; t < R; t++) {
        const float *cc = b->mix + (size_t)t * 3 * E + E;
        float *y = b->y + (size_t)t * E;
        for (int64_t c = 0; c < E; c++) y[c] *= cc[c];
    }
    kvb_fwd_mm(tp, f->q8, &f->pass, &L->ssm_out, b->y, E, out, E);
    return KVB_OK;
}

struct ssd_job {
    const struct kvb_model *m;
    const struct kvb_layer *L;
    const struct kvb_fwd_seg *seg;
    struct kvb_rec_buf *b;
    int32_t n_items;
};

/* Room for each of nth threads' scratch of a chunked form (per floats each); a model's layers
 * ask the same size, so the buffer only grows with the threads. */
static kvb_status thread_scratch(struct kvb_rec_buf *b, size_t per, int32_t nth, const char *what) {
    if (b->scratch_threads >= nth) return KVB_OK;
    float *sc = kvb_malloc(sizeof(float) * per * (size_t)nth);
    if (!sc) return kvb_fail(KVB_ERR_NOMEM, "out of memory for the %s layers' scratch", what);
    kvb_free(b->scratch);
    b->scratch = sc;
    b->scratch_threads = nth;
    return KVB_OK;
}

/* (sequence, head) items: the scan of head h of segment s over its T rows. */
static void ssd_worker(int32_t ith, int32_t nth, void *arg) {
    const struct ssd_job *jb = arg;
    const struct kvb_model_info *in = &jb->m->info;
    const int32_t H = in->ssm_heads, G = in->ssm_groups, N = in->ssm_state, DI = in->ssm_inner, P = DI / H;
    const int64_t Cx = (int64_t)DI + 2 * (int64_t)G * N, W = DI + Cx + H; /* the conv's output rows: stride W */
    const int32_t i0 = (int32_t)((int64_t)jb->n_items * ith / nth), i1 = (int32_t)((int64_t)jb->n_items * (ith + 1) / nth);
    for (int32_t it = i0; it < i1; it++) {
        const int32_t s = it / H, h = it % H, g = h / (H / G);
        const struct kvb_fwd_seg *sg = &jb->seg[s];
        const float *xbc = jb->b->y + (size_t)sg->r0 * W;
        const float *x = xbc + (size_t)h * P, *B = xbc + DI + (size_t)g * N, *C = xbc + DI + (size_t)G * N + (size_t)g * N;
        const float *dt = jb->b->g + (size_t)sg->r0 * H + h;
        float *y = jb->b->o + (size_t)sg->r0 * DI + (size_t)h * P;
        float *const *S = jb->b->rows[s] + (size_t)h * P;
        if (sg->decode || sg->T == 1) kvb_ssd_recurrent(S, P, N, sg->T, x, W, B, C, W, dt, H, jb->L->ssm_a[h], jb->L->ssm_d[h], y, DI);
        else kvb_ssd_chunked(S, P, N, sg->T, x, W, B, C, W, dt, H, jb->L->ssm_a[h], jb->L->ssm_d[h], y, DI,
                             jb->b->scratch + (size_t)ith * kvb_ssd_scratch_floats(N));
    }
}

/* A Mamba-2 layer l (the file's comment): each segment's conv history and scan state from and back to its cache. */
static kvb_status mamba2_layer(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, const struct kvb_fwd_seg *seg,
                               int32_t n_seg, int32_t l, const float *xin, float *out) {
    const struct kvb_model_info *in = &m->info;
    const struct kvb_layer *L = &m->layers[l];
    struct kvb_rec_buf *b = &f->rec;
    const int32_t H = in->ssm_heads, G = in->ssm_groups, N = in->ssm_state, K = in->ssm_conv, DI = in->ssm_inner;
    const int64_t E = in->n_embd, Cx = (int64_t)DI + 2 * (int64_t)G * N, W = DI + Cx + H;
    const int32_t R = f->pass.n_rows;
    const int32_t nth = tp ? kvb_threadpool_n_threads(tp) : 1;
    kvb_status st = thread_scratch(b, kvb_ssd_scratch_floats(N), nth, "Mamba-2");
    if (st != KVB_OK) return st;
    kvb_fwd_mm(tp, f->q8, &f->pass, &L->ssm_qkv, xin, E, b->mix, W);
    kvb_fwd_scale_rows(b->mix, R, W, L->s_ssm_in);
    /* the conv over xBC (after the state's H P rows), then its bias and SiLU */
    st = conv_segments(b, seg, n_seg, l, L->ssm_conv, K, Cx, DI, N, b->mix + DI, W, b->y, false);
    if (st != KVB_OK) return st;
    /* conv_segments wrote y at the rows' stride W: the bias, SiLU */
    for (int32_t t = 0; t < R; t++) {
        float *yt = b->y + (size_t)t * W;
        for (int64_t c = 0; c < Cx; c++) {
            const float v = yt[c] + (L->ssm_conv_b ? L->ssm_conv_b[c] : 0.0f);
            yt[c] = v / (1.0f + expf(-v));
        }
    }
    for (int32_t t = 0; t < R; t++)
        for (int32_t h = 0; h < H; h++) {
            const float a = b->mix[(size_t)t * W + DI + Cx + h] + L->ssm_dt[h];
            b->g[(size_t)t * H + h] = a > 20.0f ? a : log1pf(expf(a));
        }
    struct ssd_job jb = {m, L, seg, b, n_seg * H};
    kvb_threadpool_run(n_seg * H > 1 ? tp : NULL, ssd_worker, &jb);
    /* y * silu(z), then the RMS norm over each group's d_inner / G channels */
    const int32_t GW = DI / G;
    for (int32_t t = 0; t < R; t++) {
        float *y = b->o + (size_t)t * DI;
        const float *z = b->mix + (size_t)t * W;
        for (int32_t i = 0; i < DI; i++) y[i] *= z[i] / (1.0f + expf(-z[i]));
        for (int32_t g = 0; L->ssm_norm && g < G; g++) {
            float *yg = y + (size_t)g * GW;
            double ss = 0;
            for (int32_t i = 0; i < GW; i++) ss += (double)yg[i] * yg[i];
            const float sc = 1.0f / sqrtf((float)(ss / (double)GW) + in->rms_eps);
            for (int32_t i = 0; i < GW; i++) yg[i] = yg[i] * sc * L->ssm_norm[(size_t)g * GW + i];
        }
    }
    kvb_fwd_mm(tp, f->q8, &f->pass, &L->ssm_out, b->o, DI, out, E);
    kvb_fwd_scale_rows(out, R, E, L->s_ssm_out);
    return KVB_OK;
}

kvb_status kvb_rec_layer(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, const struct kvb_fwd_seg *seg, int32_t n_seg,
                         int32_t l, const float *xin, float *out) {
    if (m->info.shortconv) return shortconv_layer(m, tp, f, seg, n_seg, l, xin, out);
    if (m->info.mamba2) return mamba2_layer(m, tp, f, seg, n_seg, l, xin, out);
    const struct kvb_model_info *in = &m->info;
    const struct kvb_layer *L = &m->layers[l];
    struct kvb_rec_buf *b = &f->rec;
    const int32_t Hk = in->ssm_groups, Hv = in->ssm_heads, D = in->ssm_state, K = in->ssm_conv;
    const int64_t E = in->n_embd, C = 2 * (int64_t)Hk * D + (int64_t)Hv * D, VD = (int64_t)Hv * D;
    const int32_t R = f->pass.n_rows;
    /* per-thread scratch of the chunked form, before anything changes */
    const int32_t nth = tp ? kvb_threadpool_n_threads(tp) : 1;
    const size_t sn = kvb_gdn_scratch_floats(D, D);
    kvb_status st = thread_scratch(b, sn, nth, "Gated DeltaNet");
    if (st != KVB_OK) return st;
    {
        const struct kvb_mat *w[4] = {&L->ssm_qkv, &L->ssm_z, &L->ssm_beta, &L->ssm_alpha};
        float *y[4] = {b->mix, b->z, b->beta, b->g};
        const int64_t ld[4] = {C, VD, Hv, Hv};
        kvb_fwd_mm_group(tp, f->q8, &f->pass, w, 4, xin, E, y, ld);
    }
    for (int64_t i = 0; i < (int64_t)R * Hv; i++) {
        const int32_t h = (int32_t)(i % Hv);
        b->beta[i] = 1.0f / (1.0f + expf(-b->beta[i]));
        const float a = b->g[i] + L->ssm_dt[h];
        b->g[i] = (a > 20.0f ? a : logf(1.0f + expf(a))) * L->ssm_a[h];
    }
    /* each sequence's state: its pages (the batch reserved them), its position advanced; the conv history after the
     * Hv x D rows of the matrix state */
    st = conv_segments(b, seg, n_seg, l, L->ssm_conv, K, C, Hv * D, D, b->mix, C, b->y, true);
    if (st != KVB_OK) return st;
    const float eps = in->rms_eps, qs = 1.0f / sqrtf((float)D);
    for (int32_t t = 0; t < R; t++) {
        float *y = b->y + (size_t)t * C;
        for (int32_t h = 0; h < Hk; h++) {
            l2norm(y + (size_t)h * D, D, eps, qs);
            l2norm(y + (size_t)(Hk + h) * D, D, eps, 1.0f);
        }
    }
    struct rec_job jb = {in, seg, b, n_seg * Hv, sn};
    kvb_threadpool_run(n_seg * Hv > 1 ? tp : NULL, rec_worker, &jb);
    /* gated RMS norm per head, then the output projection */
    for (int32_t t = 0; t < R; t++)
        for (int32_t h = 0; h < Hv; h++) {
            float *o = b->o + (size_t)t * VD + (size_t)h * D;
            const float *z = b->z + (size_t)t * VD + (size_t)h * D;
            double ss = 0;
            for (int32_t i = 0; i < D; i++) ss += (double)o[i] * o[i];
            const float s = 1.0f / sqrtf((float)(ss / (double)D) + eps);
            for (int32_t i = 0; i < D; i++) o[i] = o[i] * s * L->ssm_norm[i] * (z[i] / (1.0f + expf(-z[i])));
        }
    kvb_fwd_mm(tp, f->q8, &f->pass, &L->ssm_out, b->o, VD, out, E);
    return KVB_OK;
}
