/*
 * moe.c — mixture-of-experts layers: the router and the experts.
 *
 * A router is a matrix [n_expert][E]; for each row it gives n_expert logits,
 * of which the gating (kvb_moe_gating) makes the weights of the top
 * n_expert_used experts, optionally normalized to sum 1 and scaled; a
 * selection bias (lfm2moe's and glm4moe's exp_probs_b.bias) moves the choice, not the
 * weights, which stay the chosen experts' unbiased probabilities. The
 * experts are slices of llama.cpp's 3-D ffn_{gate,up,down}_exps tensors, so
 * an expert is a kvb_mat over its own rows and only routed experts are read.
 *
 * All rows of a pass are routed first, then grouped by expert (a counting
 * sort that keeps row order): each expert's rows are gathered and go through
 * the ordinary matmuls as a pass of their own, in which a decode row is still
 * a lone decode and a prompt chunk's rows are that chunk alone. So a decode
 * step of many sequences reads each routed expert once for all of them, a
 * prompt chunk reads each expert once for all its tokens, and a row's bits
 * never depend on what shares the pass (batch equals single). The outputs
 * are summed per row in expert order, each times its weight.
 *
 * Shared experts (deepseek, qwen2moe, granite's) are a dense FFN that every
 * row of the layer runs (kvb_fwd_ffn over the same pass, so they keep batch
 * equal to single); their output is added to the routed sum, times
 * sigmoid(gate_inp_shexp . x) per row where the layer has that gate
 * (qwen2moe). A model's MoE layers may follow dense ones (deepseek's
 * leading_dense_block_count): a layer without a router runs its dense FFN.
 */
#include "model.h"

#include <math.h>

struct kvb_mat kvb_moe_expert(const struct kvb_layer *L, int which, int32_t e) {
    if (which < 2 && L->gate_up_exps.data) { /* fused (gemma4, qwen35moe): expert e's 2Fe rows, gate first */
        const struct kvb_mat *w = &L->gate_up_exps;
        const int64_t rows = w->n_out / L->router.n_out / 2;
        return (struct kvb_mat){w->type, w->n_in, rows, w->row_bytes, w->data + ((size_t)(2 * e + which) * (size_t)rows) * w->row_bytes};
    }
    const struct kvb_mat *w = which == 0 ? &L->gate_exps : which == 1 ? &L->up_exps : &L->down_exps;
    const int64_t rows = w->n_out / L->router.n_out;
    return (struct kvb_mat){w->type, w->n_in, rows, w->row_bytes, w->data + (size_t)e * (size_t)rows * w->row_bytes};
}

kvb_status kvb_moe_buf_init(struct kvb_moe_buf *b, const struct kvb_model_info *in, int32_t rows) {
    memset(b, 0, sizeof *b);
    if (in->n_expert <= 0) return KVB_OK;
    const size_t R = (size_t)rows, N = (size_t)in->n_expert, K = (size_t)in->n_expert_used, E = (size_t)in->n_embd, Fe = (size_t)in->n_ff_exp;
    b->logits = kvb_malloc(sizeof(float) * R * N);
    b->sel = kvb_malloc(sizeof(int32_t) * R * K);
    b->wt = kvb_malloc(sizeof(float) * R * K);
    b->by_expert = kvb_malloc(sizeof(int32_t) * R * K);
    b->off = kvb_malloc(sizeof(int32_t) * (N + 1));
    b->group = kvb_malloc(sizeof(int32_t) * R);
    b->x = kvb_malloc(sizeof(float) * R * E);
    b->g = kvb_malloc(sizeof(float) * R * Fe);
    b->u = kvb_malloc(sizeof(float) * R * Fe);
    b->y = kvb_malloc(sizeof(float) * R * E);
    b->pass.cr0 = kvb_malloc(sizeof(int32_t) * R);
    b->pass.cT = kvb_malloc(sizeof(int32_t) * R);
    b->pass.one = kvb_malloc(sizeof(int32_t) * R);
    if (!b->logits || !b->sel || !b->wt || !b->by_expert || !b->off || !b->group || !b->x || !b->g || !b->u || !b->y || !b->pass.cr0 ||
        !b->pass.cT || !b->pass.one) {
        kvb_moe_buf_free(b);
        return kvb_fail(KVB_ERR_NOMEM, "out of memory for the expert buffers (%d rows)", (int)rows);
    }
    return KVB_OK;
}

void kvb_moe_buf_free(struct kvb_moe_buf *b) {
    kvb_free(b->logits); kvb_free(b->sel); kvb_free(b->wt); kvb_free(b->by_expert); kvb_free(b->off); kvb_free(b->group);
    kvb_free(b->x); kvb_free(b->g); kvb_free(b->u); kvb_free(b->y);
    kvb_free(b->pass.cr0); kvb_free(b->pass.cT); kvb_free(b->pass.one);
    memset(b, 0, sizeof *b);
}

/* The k largest of v[0..n) in descending order (ties: the lower index first). */
static void top_k(const float *v, int32_t n, int32_t k, int32_t *sel) {
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t i = 0; i < n; i++) {
            bool taken = false;
            for (int32_t t = 0; t < j && !taken; t++) taken = sel[t] == i;
            if (!taken && (best < 0 || v[i] > v[best] || (isnan(v[best]) && !isnan(v[i])))) best = i;
        }
        sel[j] = best;
    }
}

/* softmax of v[0..n) into p (the largest subtracted; sum in double) */
static void softmax(const float *v, int32_t n, float *p) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++) mx = fmaxf(mx, v[i]);
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += (double)(p[i] = expf(v[i] - mx));
    const float inv = sum > 0 ? (float)(1.0 / sum) : 0.0f;
    for (int32_t i = 0; i < n; i++) p[i] *= inv;
}

/* the top k of the probabilities p, plus the selection bias where there is one */
/* The top k of p + bias (bias NULL: p), among the experts of m's best groups when it routes by groups (deepseek2's
 * expert_group_count G, _used_count U, as llama.cpp's build_moe_ffn): a group's score is the sum of its two best
 * biased scores (its one, with one expert a group), the U best groups kept (ties: the lower group), the others' experts
 * out of the choice. */
static void top_k_biased(const struct kvb_model *m, const float *p, const float *bias, int32_t n, int32_t k, int32_t *sel) {
    float q[512];
    for (int32_t i = 0; i < n; i++) q[i] = bias ? p[i] + bias[i] : p[i];
    const int32_t G = m->moe_groups;
    if (G > 1) {
        const int32_t per = n / G;
        float score[512];
        int32_t best[2], keep[512];
        for (int32_t g = 0; g < G; g++) {
            top_k(q + g * per, per, KVB_MIN(2, per), best);
            score[g] = q[g * per + best[0]] + (per > 1 ? q[g * per + best[1]] : 0.0f);
        }
        top_k(score, G, m->moe_groups_used, keep);
        uint8_t on[512] = {0};
        for (int32_t j = 0; j < m->moe_groups_used; j++) on[keep[j]] = 1;
        for (int32_t i = 0; i < n; i++)
            if (!on[i / per]) q[i] = -INFINITY;
    }
    top_k(q, n, k, sel);
}

void kvb_moe_route(const struct kvb_model *m, const float *logits, const float *bias, int32_t *sel, float *wt) {
    const int32_t n = m->info.n_expert, k = m->info.n_expert_used;
    float p[512]; /* n_expert <= 512 (family.c, llama.cpp's bound; mkmodel's shapes have at most 128) */
    switch (m->moe_gating) {
    case KVB_MOE_SIGMOID:
        for (int32_t i = 0; i < n; i++) p[i] = 1.0f / (1.0f + expf(-logits[i]));
        top_k_biased(m, p, bias, n, k, sel);
        for (int32_t j = 0; j < k; j++) wt[j] = p[sel[j]];
        break;
    case KVB_MOE_SOFTMAX_WEIGHT: { /* the top k logits, then a softmax over them */
        top_k_biased(m, logits, bias, n, k, sel);
        for (int32_t j = 0; j < k; j++) wt[j] = logits[sel[j]];
        softmax(wt, k, wt);
        break;
    }
    default:
        softmax(logits, n, p);
        top_k_biased(m, p, bias, n, k, sel);
        for (int32_t j = 0; j < k; j++) wt[j] = p[sel[j]];
    }
    if (m->moe_norm) {
        float sum = 0;
        for (int32_t j = 0; j < k; j++) sum += wt[j];
        sum = fmaxf(sum, 6.103515625e-5f); /* llama.cpp clamps the sum so (as there) */
        for (int32_t j = 0; j < k; j++) wt[j] /= sum;
    }
    if (m->moe_scale != 1.0f)
        for (int32_t j = 0; j < k; j++) wt[j] *= m->moe_scale;
}

/* the per-expert scale s[e] (s NULL: none) */
static float expert_scale(const float *s, int32_t e) { return s ? s[e] : 1.0f; }

/* An expert's rows of one prompt chunk fewer than this go through the integer
 * dot as decode rows do (kvb_pass_rows.int8_below): a chunk of 256 tokens gives
 * each of Qwen3.6-35B-A3B's 256 experts about 8 rows, and expanding the
 * expert's weights into f32 panels for them cost more than the rows: prefill
 * 131 tok/s with panels, 236 below 16 rows, 242 below 32, 241 below 64
 * (qwen3.6-35b-a3b-4l Q4_K_M, 2 threads, the model 167 Xeon, 2026-12-07). */
#define EXPERT_INT8_BELOW 32

/* The rows of one expert (entries by_expert[a..b), rows ascending) as a pass:
 * decode rows first, then each prompt group's rows together (a chunk when
 * there are two or more, else a one-row prompt). */
static void expert_pass(struct kvb_moe_buf *B, const struct kvb_pass_rows *p, int32_t K, int32_t a, int32_t b) {
    struct kvb_pass_rows *q = &B->pass;
    q->n_rows = b - a;
    q->n_dec = q->nc = q->n_one = 0;
    q->int8_below = EXPERT_INT8_BELOW;
    for (int32_t i = a; i < b; i++) {
        const int32_t r = B->by_expert[i] / K;
        if (r < p->n_dec) {
            q->n_dec++;
            continue;
        }
        int32_t j = i + 1; /* the rows of r's prompt group */
        while (j < b && B->group[B->by_expert[j] / K] == B->group[r]) j++;
        if (j - i >= 2) {
            q->cr0[q->nc] = i - a;
            q->cT[q->nc++] = j - i;
        } else {
            q->one[q->n_one++] = i - a;
        }
        i = j - 1;
    }
}

void kvb_moe_ffn(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, const struct kvb_pass_rows *p, int32_t l,
                 const float *xin, float *out) {
    kvb_moe_ffn_routed(m, tp, f, p, l, xin, xin, out);
}

void kvb_moe_ffn_routed(const struct kvb_model *m, struct kvb_threadpool *tp, struct kvb_fwd *f, const struct kvb_pass_rows *p, int32_t l,
                        const float *rin, const float *xin, float *out) {
    const struct kvb_model_info *in = &m->info;
    const struct kvb_layer *L = &m->layers[l];
    struct kvb_moe_buf *B = &f->moe;
    const int32_t R = p->n_rows, N = in->n_expert, K = in->n_expert_used;
    const int64_t E = in->n_embd, Fe = in->n_ff_exp;
    kvb_fwd_mm(tp, f->q8, p, &L->router, rin, E, B->logits, N);
    kvb_fwd_add_bias(B->logits, R, N, L->b_router);
    for (int32_t r = 0; r < R; r++) kvb_moe_route(m, B->logits + (size_t)r * N, L->exp_probs_b, B->sel + (size_t)r * K, B->wt + (size_t)r * K);
    /* each prompt row's group: its chunk's first row, or itself */
    for (int32_t r = 0; r < R; r++) B->group[r] = r;
    for (int32_t c = 0; c < p->nc; c++)
        for (int32_t t = 0; t < p->cT[c]; t++) B->group[p->cr0[c] + t] = p->cr0[c];
    /* the (row, slot) entries grouped by expert, rows ascending within each */
    memset(B->off, 0, sizeof(int32_t) * (size_t)(N + 1));
    for (int32_t i = 0; i < R * K; i++) B->off[B->sel[i] + 1]++;
    for (int32_t e = 0; e < N; e++) B->off[e + 1] += B->off[e];
    for (int32_t i = 0; i < R * K; i++) B->by_expert[B->off[B->sel[i]]++] = i;
    for (int32_t e = N; e > 0; e--) B->off[e] = B->off[e - 1];
    B->off[0] = 0;
    memset(out, 0, sizeof(float) * (size_t)R * (size_t)E);
    for (int32_t e = 0; e < N; e++) {
        const int32_t a = B->off[e], b = B->off[e + 1], n = b - a;
        if (!n) continue;
        expert_pass(B, p, K, a, b);
        for (int32_t i = 0; i < n; i++) memcpy(B->x + (size_t)i * E, xin + (size_t)(B->by_expert[a + i] / K) * E, sizeof(float) * (size_t)E);
        const bool ungated = !L->gate_exps.data && !L->gate_up_exps.data; /* nemotron_h_moe: relu(up x)^2 */
        const struct kvb_mat gate = ungated ? kvb_moe_expert(L, 1, e) : kvb_moe_expert(L, 0, e), up = kvb_moe_expert(L, 1, e),
                             down = kvb_moe_expert(L, 2, e);
        const struct kvb_mat *w[2] = {&gate, &up};
        float *y[2] = {B->g, B->u};
        const int64_t ld[2] = {Fe, Fe};
        if (ungated) kvb_fwd_mm(tp, f->q8, &B->pass, &up, B->x, E, B->u, Fe);
        else kvb_fwd_mm_group(tp, f->q8, &B->pass, w, 2, B->x, E, y, ld);
        kvb_fwd_add_bias(B->g, n, Fe, L->b_gate_exps ? L->b_gate_exps + (size_t)e * Fe : NULL);
        kvb_fwd_add_bias(B->u, n, Fe, L->b_up_exps ? L->b_up_exps + (size_t)e * Fe : NULL);
        kvb_fwd_scale_rows(B->g, n, Fe, expert_scale(L->s_gate_exps, e)); /* the scales after the biases, as llama.cpp's build_moe_ffn */
        kvb_fwd_scale_rows(B->u, n, Fe, expert_scale(L->s_up_exps, e));
        if (ungated)
            for (size_t i = 0; i < (size_t)n * (size_t)Fe; i++) B->g[i] = B->u[i] > 0 ? B->u[i] * B->u[i] : 0.0f;
        else kvb_fwd_glu(tp, m->act, B->g, B->u, (size_t)n * (size_t)Fe);
        kvb_fwd_mm(tp, f->q8, &B->pass, &down, B->g, Fe, B->y, E);
        kvb_fwd_add_bias(B->y, n, E, L->b_down_exps ? L->b_down_exps + (size_t)e * E : NULL);
        kvb_fwd_scale_rows(B->y, n, E, expert_scale(L->s_down_exps, e));
        for (int32_t i = 0; i < n; i++) {
            const int32_t slot = B->by_expert[a + i], r = slot / K;
            const float wgt = B->wt[slot];
            float *o = out + (size_t)r * E;
            const float *ye = B->y + (size_t)i * E;
            for (int64_t j = 0; j < E; j++) o[j] += wgt * ye[j];
        }
        B->bytes_read += (int64_t)((ungated ? 1 : 2) * (size_t)Fe * gate.row_bytes + (size_t)E * down.row_bytes);
    }
    if (!L->up_shexp.data) return; /* (nemotron_h_moe's has no gate: kvb_fwd_ffn's squared ReLU) */
    /* the shared experts: every row, as a dense FFN over the pass; gated, each row's output times sigmoid(gate_inp_shexp . x) */
    const struct kvb_ffn_w w = {&L->gate_shexp, &L->up_shexp, &L->down_shexp, NULL, NULL, NULL, 1.0f, 1.0f, 1.0f};
    kvb_fwd_ffn(m, tp, f, p, &w, in->n_ff_shexp, xin, B->y);
    for (int32_t r = 0; r < R; r++) {
        const float *x = xin + (size_t)r * E, *ys = B->y + (size_t)r * E;
        float gate = 1.0f;
        if (L->gate_inp_shexp) {
            float d = 0;
            for (int64_t j = 0; j < E; j++) d += L->gate_inp_shexp[j] * x[j];
            gate = 1.0f / (1.0f + expf(-d));
        }
        float *o = out + (size_t)r * E;
        for (int64_t j = 0; j < E; j++) o[j] += gate * ys[j];
    }
}
