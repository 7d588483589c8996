/*
 * test_streaming_model.c — `streaming` with contiguous positions, run by the
 * engine on a real model (stories260K), equals an independent reference
 * written here: a naive llama forward pass in double precision that keeps
 * every token's pre-RoPE K and V and, at each step, re-applies RoPE from
 * scratch at the cache positions 0..n-1 of the retained tokens (sinks +
 * window) — what the StreamingLLM reference code does. Logits agree within
 * 1e-4 at every step, far past the window (and the model's 128-token
 * trained context).
 *
 * The same reference, with original positions and an explicit retained set
 * per (layer, KV head), also checks `ppl --prompt` for SnapKV (votes of the
 * prompt's last window computed here, pooled, top-k, then the frozen prompt
 * plus a decode budget) and for window, and the recompute baseline with a
 * budget shorter than the text.
 */
#include "testing.h"
#include "model/model.h"
#include "ops/quant.h"

enum { STEPS = 300, BUDGET = 24 };
static int SINKS = 4; /* 0 for window */

struct ref {
    const struct kvb_model *m;
    int E, L, H, HK, D, F, V;
    double *k, *v; /* [L][STEPS][HK*D] pre-RoPE */
};

static void matvec(const struct kvb_mat *w, const double *x, double *y) {
    static float row[4096];
    for (int64_t r = 0; r < w->n_out; r++) {
        kvb_dequantize_row(w->type, w->data + (size_t)r * w->row_bytes, row, w->n_in);
        double s = 0;
        for (int64_t i = 0; i < w->n_in; i++) s += row[i] * x[i];
        y[r] = s;
    }
}

static void rmsnorm(const double *x, const float *w, int n, double eps, double *o) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) o[i] = x[i] * s * w[i];
}

static void rope(double *x, int D, int pos, double base) { /* interleaved pairs */
    for (int i = 0; i < D / 2; i++) {
        double th = pos * pow(base, -2.0 * i / D), c = cos(th), s = sin(th);
        double a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c - b * s;
        x[2 * i + 1] = a * s + b * c;
    }
}

/* The forward pass of token `tok` stored at slot t (K/V kept pre-RoPE per
 * slot). Stream s = layer * HK + kv_head attends to its slots ret[s][0..n[s])
 * (the last is t itself), the key of ret[s][j] rotated at kpos[s][j] and the
 * query at qpos: RoPE from scratch, in double. With vote, the softmax rows
 * / G are added to vote[s * STEPS + slot]. */
static void ref_forward(struct ref *R, int32_t tok, int t, const int *const *ret, const int *const *kpos, const int *n, int qpos,
                        double *vote, double *logits) {
    const struct kvb_model *m = R->m;
    double x[4096], xb[4096], q[4096], kk[4096], vv[4096], att[4096], hg[4096], hu[4096], tmp[4096];
    static double s[STEPS];
    float emb[4096];
    const int G = R->H / R->HK;
    kvb_dequantize_row(m->tok_embd.type, m->tok_embd.data + (size_t)tok * m->tok_embd.row_bytes, emb, R->E);
    for (int i = 0; i < R->E; i++) x[i] = emb[i];
    for (int l = 0; l < R->L; l++) {
        const struct kvb_layer *ly = &m->layers[l];
        rmsnorm(x, ly->attn_norm, R->E, m->info.rms_eps, xb);
        matvec(&ly->wq, xb, q);
        matvec(&ly->wk, xb, kk);
        matvec(&ly->wv, xb, vv);
        memcpy(R->k + ((size_t)l * STEPS + t) * R->HK * R->D, kk, sizeof(double) * R->HK * R->D);
        memcpy(R->v + ((size_t)l * STEPS + t) * R->HK * R->D, vv, sizeof(double) * R->HK * R->D);
        for (int h = 0; h < R->H; h++) {
            const int hk = h / G, st = l * R->HK + hk, ns = n[st];
            double qr[64], mx = -1e300, z = 0;
            memcpy(qr, q + h * R->D, sizeof(double) * R->D);
            rope(qr, R->D, qpos, m->info.rope_base);
            for (int j = 0; j < ns; j++) {
                double kr[64];
                memcpy(kr, R->k + ((size_t)l * STEPS + ret[st][j]) * R->HK * R->D + hk * R->D, sizeof(double) * R->D);
                rope(kr, R->D, kpos[st][j], m->info.rope_base);
                s[j] = 0;
                for (int i = 0; i < R->D; i++) s[j] += qr[i] * kr[i];
                s[j] /= sqrt((double)R->D);
                mx = fmax(mx, s[j]);
            }
            for (int j = 0; j < ns; j++) { s[j] = exp(s[j] - mx); z += s[j]; }
            for (int i = 0; i < R->D; i++) {
                double a = 0;
                for (int j = 0; j < ns; j++) a += s[j] / z * R->v[((size_t)l * STEPS + ret[st][j]) * R->HK * R->D + hk * R->D + i];
                att[h * R->D + i] = a;
            }
            if (vote)
                for (int j = 0; j < ns; j++) vote[(size_t)st * STEPS + ret[st][j]] += s[j] / z / G;
        }
        matvec(&ly->wo, att, tmp);
        for (int i = 0; i < R->E; i++) x[i] += tmp[i];
        rmsnorm(x, ly->ffn_norm, R->E, m->info.rms_eps, xb);
        matvec(&ly->w_gate, xb, hg);
        matvec(&ly->w_up, xb, hu);
        for (int i = 0; i < R->F; i++) hg[i] = hg[i] / (1 + exp(-hg[i])) * hu[i];
        matvec(&ly->w_down, hg, tmp);
        for (int i = 0; i < R->E; i++) x[i] += tmp[i];
    }
    rmsnorm(x, m->output_norm, R->E, m->info.rms_eps, xb);
    matvec(&m->output, xb, logits);
}

enum { MAX_STREAMS = 64 };

/* Model g and the first 4,000 bytes of text tp as ids (BOS first): at least
 * STEPS tokens. Prints the library's error and returns -1 on failure. */
static int load_story(const char *g, const char *tp, struct kvb_model **m, int32_t **ids, int32_t *n) {
    size_t len = 0;
    char *text = t_read_file(tp, &len);
    if (!text || len < 4000) {
        printf("  cannot read 4000 bytes of %s\n", tp);
        free(text);
        return -1;
    }
    kvb_status st = kvb_model_load(g, NULL, m);
    if (st == KVB_OK && (st = kvb_vocab_tokenize(kvb_model_vocab(*m), text, 4000, true, false, ids, n)) != KVB_OK) kvb_model_free(*m);
    free(text);
    if (st != KVB_OK) printf("  %s\n", kvb_last_error());
    return st == KVB_OK && *n >= STEPS ? 0 : -1;
}

/* The reference for model m, with room for STEPS slots of K/V. */
static struct ref ref_new(const struct kvb_model *m) {
    struct ref R = {m, m->info.n_embd, m->info.n_layer, m->info.n_head, m->info.n_head_kv, m->info.head_dim, m->info.n_ff, m->info.n_vocab, NULL, NULL};
    R.k = calloc((size_t)R.L * STEPS * R.HK * R.D, sizeof(double));
    R.v = calloc((size_t)R.L * STEPS * R.HK * R.D, sizeof(double));
    return R;
}

/* Streaming / window with contiguous positions: the same retained set in
 * every stream (sinks + window, incl. t), keys at cache positions 0..n-1. */
static void ref_step(struct ref *R, int32_t tok, int t, double *logits) {
    static int ret[STEPS], pos[STEPS];
    const int *rets[MAX_STREAMS], *poss[MAX_STREAMS];
    int ns[MAX_STREAMS], n = 0;
    for (int p = 0; p <= t; p++)
        if (p < SINKS || p > t - (BUDGET + 1 - SINKS)) { ret[n] = p; pos[n] = n; n++; }
    for (int st = 0; st < R->L * R->HK; st++) { rets[st] = ret; poss[st] = pos; ns[st] = n; }
    ref_forward(R, tok, t, rets, poss, ns, n - 1, NULL, logits);
}

/* Original positions, a retained set per stream: the slots j < t with
 * keep[s * STEPS + j], and t itself. */
static void ref_step_keep(struct ref *R, int32_t tok, int t, const unsigned char *keep, double *vote, double *logits) {
    static int ret[MAX_STREAMS][STEPS];
    const int *rets[MAX_STREAMS];
    int ns[MAX_STREAMS];
    for (int st = 0; st < R->L * R->HK; st++) {
        ns[st] = 0;
        for (int j = 0; j <= t; j++)
            if (j == t || keep[(size_t)st * STEPS + j]) ret[st][ns[st]++] = j;
        rets[st] = ret[st];
    }
    ref_forward(R, tok, t, rets, rets, ns, t, vote, logits);
}

static double ref_nll(const double *lr, int V, int32_t target) {
    double mx = lr[0], z = 0;
    for (int i = 1; i < V; i++) mx = fmax(mx, lr[i]);
    for (int i = 0; i < V; i++) z += exp(lr[i] - mx);
    return mx + log(z) - lr[target];
}

/* kvbound ppl --prompt for snapkv (budget 64, window 16, max pool 7,
 * decode budget 64) and window equals the reference within 0.5% in ppl. */
TEST(ppl_prompt_snapkv_and_window_equal_reference) {
    NEED_SHARED(g, "models/stories260K/stories260K.llamacpp.gguf");
    NEED_SHARED(tp, "text/tinystories_validation_head.txt");
    enum { P = 150, B = 64, W = 16, K = 7 };
    struct kvb_model *m;
    int32_t *ids, n;
    if (load_story(g, tp, &m, &ids, &n)) FAILF("cannot load %s and its text %s", g, tp);
    n = getenv("KVB_TEST_QUICK") ? 220 : STEPS;
    struct ref R = ref_new(m);
    const size_t NS = (size_t)R.L * R.HK * STEPS;
    unsigned char *keep = malloc(NS);
    double *vote = calloc(NS, sizeof(double)), *lr = malloc(sizeof(double) * (size_t)R.V), *nll = calloc((size_t)n, sizeof(double));
    /* the prompt at full attention; its last W queries vote */
    memset(keep, 1, NS);
    for (int t = 0; t < P; t++) ref_step_keep(&R, ids[t], t, keep, t >= P - W ? vote : NULL, lr);
    nll[0] = ref_nll(lr, R.V, ids[P]);
    /* per stream: max-pool over [0, P - W), top B - W (ties: the newer stays), + the window */
    for (size_t s = 0; s < (size_t)R.L * R.HK; s++) {
        double pooled[P];
        unsigned char *kp = keep + s * STEPS;
        const double *vt = vote + s * STEPS;
        for (int j = 0; j < P - W; j++) {
            pooled[j] = -1;
            for (int u = j - K / 2; u <= j + K / 2; u++)
                if (u >= 0 && u < P - W) pooled[j] = fmax(pooled[j], vt[u]);
        }
        for (int j = 0; j < STEPS; j++) kp[j] = j >= P - W && j < P;
        for (int r = 0; r < B - W; r++) {
            int best = -1;
            for (int j = 0; j < P - W; j++)
                if (!kp[j] && (best < 0 || pooled[j] >= pooled[best])) best = j;
            kp[best] = 1;
        }
    }
    /* the continuation: the frozen prompt + the last B generated, original positions */
    for (int t = P; t + 1 < n; t++) {
        for (size_t s = 0; s < (size_t)R.L * R.HK; s++)
            for (int j = P; j < t; j++) keep[s * STEPS + j] = j >= t - B;
        ref_step_keep(&R, ids[t], t, keep, NULL, lr);
        nll[t - P + 1] = ref_nll(lr, R.V, ids[t + 1]);
    }
    double sum_ref = 0;
    for (int k = 0; k < n - P; k++) sum_ref += nll[k];
    const double ppl_ref = exp(sum_ref / (n - P));
    struct kvb_ppl_params pp = kvb_ppl_default_params();
    pp.kv.policy = kvb_policy_default_params(KVB_POLICY_SNAPKV);
    pp.kv.policy.budget = B;
    pp.kv.policy.obs_window = W;
    pp.prompt = P;
    pp.baseline = KVB_BASELINE_FULL;
    struct kvb_ppl_result r;
    CHECK_OK(kvb_eval_ppl(m, ids, n, &pp, &r));
    CHECK_EQ_INT(r.tokens, n - P);
    CHECK_NEAR(r.prompt_kept, B, 1e-9);
    double worst = 0;
    for (int k = 0; k < n - P; k++) worst = fmax(worst, fabs(nll[k] - r.nll_tok[k]));
    printf("  snapkv --prompt %d --budget %d: ppl %.6f, reference %.6f (%.4f%%), max per-token NLL difference %.2e; full %.6f\n", P, B, r.ppl,
           ppl_ref, 100 * fabs(r.ppl / ppl_ref - 1), worst, r.base_ppl);
    if (fabs(r.ppl / ppl_ref - 1) > 0.005) FAILF("snapkv --prompt ppl %.6f vs reference %.6f", r.ppl, ppl_ref);
    CHECK(fabs(r.ppl - r.base_ppl) > 1e-3); /* the compression changed something */
    kvb_ppl_result_free(&r);
    /* window (a decode-time policy): B + 1 tokens attended throughout, the prompt unscored */
    memset(keep, 1, NS);
    for (int t = 0; t + 1 < n; t++) {
        for (size_t s = 0; s < (size_t)R.L * R.HK; s++)
            for (int j = 0; j < t; j++) keep[s * STEPS + j] = j >= t - B;
        ref_step_keep(&R, ids[t], t, keep, NULL, lr);
        if (t >= P - 1) nll[t - P + 1] = ref_nll(lr, R.V, ids[t + 1]);
    }
    sum_ref = 0;
    for (int k = 0; k < n - P; k++) sum_ref += nll[k];
    const double wppl_ref = exp(sum_ref / (n - P));
    pp.kv.policy = kvb_policy_default_params(KVB_POLICY_WINDOW);
    pp.kv.policy.budget = B + 1;
    CHECK_OK(kvb_eval_ppl(m, ids, n, &pp, &r));
    worst = 0;
    for (int k = 0; k < n - P; k++) worst = fmax(worst, fabs(nll[k] - r.nll_tok[k]));
    printf("  window --prompt %d --budget %d: ppl %.6f, reference %.6f, max per-token NLL difference %.2e\n", P, B + 1, r.ppl, wppl_ref, worst);
    if (worst > 1e-4 || fabs(r.ppl / wppl_ref - 1) > 0.005) FAILF("window --prompt differs from the reference");
    kvb_ppl_result_free(&r);
    free(keep); free(vote); free(lr); free(nll); free(R.k); free(R.v);
    kvb_buffer_free(ids);
    kvb_model_free(m);
}

/* The recompute baseline (the last B tokens from scratch at 0..B-1) with B
 * shorter than the text, against the reference run from scratch per token. */
TEST(recompute_baseline_equals_reference) {
    NEED_SHARED(g, "models/stories260K/stories260K.llamacpp.gguf");
    NEED_SHARED(tp, "text/tinystories_validation_head.txt");
    enum { B = 24 };
    struct kvb_model *m;
    int32_t *ids, n;
    if (load_story(g, tp, &m, &ids, &n)) FAILF("cannot load %s and its text %s", g, tp);
    n = getenv("KVB_TEST_QUICK") ? 60 : 120;
    struct ref R = ref_new(m);
    const size_t NS = (size_t)R.L * R.HK * STEPS;
    unsigned char *keep = malloc(NS);
    memset(keep, 1, NS);
    double *lr = malloc(sizeof(double) * (size_t)R.V), worst = 0, sum_ref = 0;
    struct kvb_ppl_params pp = kvb_ppl_default_params();
    pp.kv.policy = kvb_policy_default_params(KVB_POLICY_STREAMING);
    pp.kv.policy.budget = B;
    pp.baseline = KVB_BASELINE_RECOMPUTE;
    struct kvb_ppl_result r;
    CHECK_OK(kvb_eval_ppl(m, ids, n, &pp, &r));
    for (int g2 = 0; g2 + 1 < n; g2++) {
        const int s0 = g2 - B + 1 > 0 ? g2 - B + 1 : 0;
        for (int i = 0; i <= g2 - s0; i++) ref_step_keep(&R, ids[s0 + i], i, keep, NULL, lr);
        const double nl = ref_nll(lr, R.V, ids[g2 + 1]);
        sum_ref += nl;
        worst = fmax(worst, fabs(nl - r.base_nll_tok[g2]));
    }
    const double ppl_ref = exp(sum_ref / (n - 1));
    printf("  recompute B %d over %d tokens: %.6f, reference %.6f, max per-token NLL difference %.2e\n", B, n, r.base_ppl, ppl_ref, worst);
    if (worst > 1e-4) FAILF("recompute baseline differs from the reference");
    CHECK(n > B + 10); /* the budget is shorter than the text: the oracle drops tokens */
    kvb_ppl_result_free(&r);
    free(keep); free(lr); free(R.k); free(R.v);
    kvb_buffer_free(ids);
    kvb_model_free(m);
}

TEST(streaming_contiguous_equals_rerotation_reference) {
    NEED_SHARED(g, "models/stories260K/stories260K.llamacpp.gguf");
    struct kvb_model *m;
    CHECK_OK(kvb_model_load(g, NULL, &m));
    struct ref R = ref_new(m);
    struct kvb_context_params cp = kvb_context_default_params();
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_STREAMING);
    cp.kv.policy.budget = BUDGET;
    cp.kv.policy.n_sink = SINKS;
    cp.kv.kv_dtype = KVB_DTYPE_F32;
    struct kvb_context *c;
    CHECK_OK(kvb_context_init(m, &cp, &c));
    CHECK_EQ_INT(kvb_cache_pos_mode(kvb_context_cache(c)), KVB_POS_CONTIGUOUS);
    float *lg = malloc(sizeof(float) * (size_t)R.V);
    double *lr = malloc(sizeof(double) * (size_t)R.V), worst = 0;
    int32_t tok = 1;
    for (int t = 0; t < STEPS; t++) {
        CHECK_OK(kvb_context_eval(c, &tok, 1, lg, false));
        ref_step(&R, tok, t, lr);
        int best = 0;
        for (int i = 0; i < R.V; i++) {
            worst = fmax(worst, fabs(lg[i] - lr[i]));
            if (lr[i] > lr[best]) best = i;
        }
        if (worst > 1e-4) FAILF("step %d: max |logit - reference| %.3g", t, worst);
        tok = best == 1 ? 13 : best; /* follow the reference's greedy path */
    }
    printf("  %d steps, window %d + %d sinks: max |logit difference| %.2e\n", STEPS, BUDGET - SINKS, SINKS, worst);
    free(lg);
    free(lr);
    free(R.k);
    free(R.v);
    kvb_context_free(c);
    kvb_model_free(m);
}

/* kvbound ppl's definition (B = most tokens a query attends to, current
 * included), for window and streaming with contiguous positions, equals the
 * reference's NLL on a real text within 1e-4. */
TEST(ppl_window_and_streaming_equal_direct_recomputation) {
    NEED_SHARED(g, "models/stories260K/stories260K.llamacpp.gguf");
    NEED_SHARED(tp, "text/tinystories_validation_head.txt");
    struct kvb_model *m;
    int32_t *ids, n;
    if (load_story(g, tp, &m, &ids, &n)) FAILF("cannot load %s and its text %s", g, tp);
    n = STEPS;
    struct ref R = ref_new(m);
    double *lr = malloc(sizeof(double) * (size_t)R.V);
    const enum kvb_policy_id pols[2] = {KVB_POLICY_WINDOW, KVB_POLICY_STREAMING};
    for (int k = 0; k < 2; k++) {
        SINKS = k == 0 ? 0 : 4;
        struct kvb_ppl_params pp = kvb_ppl_default_params();
        pp.kv.policy = kvb_policy_default_params(pols[k]);
        pp.kv.policy.budget = BUDGET + 1; /* attention sees BUDGET + 1 tokens, as the reference */
        pp.kv.policy.n_sink = SINKS;
        pp.kv.pos_mode = KVB_POS_CONTIGUOUS;
        struct kvb_ppl_result r;
        CHECK_OK(kvb_eval_ppl(m, ids, n, &pp, &r));
        double worst = 0, sum_ref = 0;
        for (int t = 0; t + 1 < n; t++) {
            ref_step(&R, ids[t], t, lr);
            double mx = lr[0], z = 0;
            for (int i = 1; i < R.V; i++) mx = fmax(mx, lr[i]);
            for (int i = 0; i < R.V; i++) z += exp(lr[i] - mx);
            double nll = mx + log(z) - lr[ids[t + 1]];
            sum_ref += nll;
            worst = fmax(worst, fabs(nll - r.nll_tok[t]));
        }
        double ppl_ref = exp(sum_ref / (n - 1));
        printf("  %s: ppl %.6f, direct recomputation %.6f, max per-token NLL difference %.2e\n", kvb_policy_name(pols[k]), r.ppl, ppl_ref, worst);
        if (worst > 1e-4 || fabs(r.ppl - ppl_ref) > 1e-4 * ppl_ref) FAILF("%s: kvbound ppl differs from the direct recomputation", kvb_policy_name(pols[k]));
        kvb_ppl_result_free(&r);
    }
    SINKS = 4;
    free(lr);
    free(R.k);
    free(R.v);
    kvb_buffer_free(ids);
    kvb_model_free(m);
}

int main(void) {
    RUN(ppl_window_and_streaming_equal_direct_recomputation);
    RUN(streaming_contiguous_equals_rerotation_reference);
    RUN(ppl_prompt_snapkv_and_window_equal_reference);
    RUN(recompute_baseline_equals_reference);
    return test_summary();
}
