/*
 * mla.c — multi-head latent attention (deepseek2: DeepSeek-V2/V3/R1, Kimi-K2),
 * in the absorbed form for prompts and decode alike.
 *
 * Per token (R = rope_dims, C = kv_lora_rank, Dn = head_dim_k_mla - R, Dv =
 * head_dim_v_mla, H heads, D = R + C the cache's row):
 *   q   = attn_q_b(rms(attn_q_a x) * q_a_norm)  or attn_q x     [H][Dn | R]
 *   kv  = attn_kv_a_mqa x                                      [C | R]
 *   c   = rms(kv[0:C]) * kv_a_norm;  k_pe = kv[C:C+R]
 *   K row (one per token, all heads)  = [k_pe | c]             [D]
 *   q row of head h = s * [q_pe_h | wk_b_h q_nope_h]           [D]
 *   head h's value  = wv_b_h (attention over the rows' c)      [Dv]
 *   out = attn_output [v_0 .. v_H-1]
 * q_nope . k_nope = q_nope . (wk_b^T c) = (wk_b q_nope) . c, so every head
 * attends over the one latent row per token; the cache rotates the first R
 * dims of q and K rows (YaRN's magnitude M on q_pe and k_pe, as ggml's rope)
 * and scales scores by 1/sqrt(D): s = kq_scale sqrt(D) makes them llama.cpp's
 * kq_scale = mscale^2 / sqrt(Dn + R) (family.c). Eviction chooses latent rows:
 * a token leaves every head at once, and the policies' scores (h2o, tova,
 * snapkv) come from this attention.
 *
 * The cache holds the K row only (kvb_cache_params.head_dim_v = C, set by
 * kvb_model_cache_params): a token's value is its row's last C entries, the
 * latent, so each head's output is its latent [C], and a token costs one row
 * of D per layer.
 */
#include "model.h"

#include <math.h>

static void rms_into(float *o, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float s = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    for (int64_t i = 0; i < n; i++) o[i] = x[i] * s * w[i];
}

/* Rows [r0, r0 + n) of w as a matrix of their own. */
static struct kvb_mat rows_of(const struct kvb_mat *w, int64_t r0, int64_t n) {
    return (struct kvb_mat){w->type, w->n_in, n, w->row_bytes, w->data + (size_t)r0 * w->row_bytes};
}

kvb_status kvb_mla_layer(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, const struct kvb_fwd_seg *seg, int32_t n_seg,
                         int32_t l, const float *xin, float *out) {
    const struct kvb_model_info *in = &m->info;
    const struct kvb_layer *L = &m->layers[l];
    const int64_t E = in->n_embd, H = in->n_head, D = in->head_dim, R = in->rope_dims, C = in->kv_lora_rank;
    const int64_t Dk = in->head_dim_k_mla, Dn = Dk - R, Dv = in->head_dim_v_mla, QL = in->q_lora_rank;
    const int64_t ldq = QL + H * Dk, HD = H * D;
    const int32_t rows = f->pass.n_rows;
    float *q = f->mq + QL; /* [rows] of ldq: the low-rank query first (q_lora), then the heads' */
    if (L->wq_a.data) {
        kvb_fwd_mm(tp, f->q8, &f->pass, &L->wq_a, xin, E, f->mq, ldq);
        for (int32_t t = 0; t < rows; t++) rms_into(f->mq + (size_t)t * ldq, f->mq + (size_t)t * ldq, L->q_a_norm, QL, in->rms_eps);
        kvb_fwd_mm(tp, f->q8, &f->pass, &L->wq_b, f->mq, ldq, q, ldq);
    } else {
        kvb_fwd_mm(tp, f->q8, &f->pass, &L->wq, xin, E, q, ldq);
    }
    kvb_fwd_mm(tp, f->q8, &f->pass, &L->wkv_a, xin, E, f->mkv, C + R);
    const float M = m->rope_mscale, s = m->mla_q_scale;
    for (int32_t t = 0; t < rows; t++) { /* K row [k_pe * M | rms(c)] and each head's q_pe */
        const float *kv = f->mkv + (size_t)t * (size_t)(C + R);
        float *k = f->k + (size_t)t * D;
        for (int64_t i = 0; i < R; i++) k[i] = kv[C + i] * M;
        rms_into(k + R, kv, L->kv_a_norm, C, in->rms_eps);
        for (int64_t h = 0; h < H; h++) {
            const float *qh = q + (size_t)t * ldq + h * Dk;
            float *qo = f->q + (size_t)t * HD + h * D;
            for (int64_t i = 0; i < R; i++) qo[i] = qh[Dn + i] * M * s;
        }
    }
    for (int64_t h = 0; h < H; h++) { /* each head's q_nope into the latent: wk_b_h q_nope_h */
        const struct kvb_mat wk = rows_of(&L->wk_b, h * C, C);
        kvb_fwd_mm(tp, f->q8, &f->pass, &wk, q + h * Dk, ldq, f->q + h * D + R, HD);
    }
    if (s != 1.0f)
        for (int32_t t = 0; t < rows; t++)
            for (int64_t h = 0; h < H; h++) {
                float *qo = f->q + (size_t)t * HD + h * D + R;
                for (int64_t i = 0; i < C; i++) qo[i] *= s;
            }
    for (int32_t i = 0; i < n_seg; i++) {
        const struct kvb_fwd_seg *g = &seg[i];
        /* the latent rows: no value rows (the cache reads them off K); att of each token is [H][C] */
        float *qs = f->q + (size_t)g->r0 * HD, *k = f->k + (size_t)g->r0 * D, *att = f->att + (size_t)g->r0 * H * C;
        kvb_status st = g->decode ? kvb_cache_decode(g->cache, l, qs, (int32_t)H, k, NULL, att, tp)
                                  : kvb_cache_prefill(g->cache, l, g->T, qs, (int32_t)H, k, NULL, att, tp);
        if (st != KVB_OK) return st;
    }
    for (int64_t h = 0; h < H; h++) { /* each head's latent output to its value: wv_b_h */
        const struct kvb_mat wv = rows_of(&L->wv_b, h * Dv, Dv);
        kvb_fwd_mm(tp, f->q8, &f->pass, &wv, f->att + h * C, H * C, f->mo + h * Dv, H * Dv);
    }
    kvb_fwd_mm(tp, f->q8, &f->pass, &L->wo, f->mo, H * Dv, out, E);
    kvb_fwd_scale_rows(out, rows, E, L->s_o);
    return KVB_OK;
}
