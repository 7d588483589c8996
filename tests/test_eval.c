/*
 * test_eval.c — the evaluation harness: the needle haystack has exactly the
 * requested length with the passkey where the depth says, `full` within the
 * context retains it in every stream, `streaming` only while it is in the
 * window; kvb_eval_ppl's baselines agree with themselves (full vs full: KL 0,
 * top-1 1, same ppl) and the recompute oracle equals the windowed direct
 * definition for a budget larger than the text (then it is plain full
 * attention).
 */
#include "testing.h"
#include "kvbound.h"

TEST(needle_haystack_and_retention) {
    NEED_SHARED(g, "models/stories260K/stories260K.llamacpp.gguf");
    struct kvb_model *m;
    CHECK_OK(kvb_model_load(g, NULL, &m));
    const int lengths[3] = {96, 200, 400};
    const double depths[3] = {0.0, 0.5, 1.0};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            struct kvb_needle_params np = kvb_needle_default_params(); /* full, f16 rows */
            np.length = lengths[i];
            np.depth = depths[j];
            np.key = 48213;
            np.chunk = 64;
            struct kvb_needle_result r;
            CHECK_OK(kvb_eval_needle(m, &np, &r));
            CHECK_EQ_INT(r.prompt_tokens, lengths[i]);
            CHECK_NEAR(r.retained, 1.0, 0);
            /* depth is a fraction of the filler (the prompt also holds the needle
             * sentence and the question, ~50 tokens with this vocabulary) */
            if (depths[j] == 0.0 && r.needle_pos > 12) FAILF("length %d depth 0: needle at %d", lengths[i], r.needle_pos);
            if (depths[j] == 1.0 && r.needle_pos < lengths[i] - 64) FAILF("length %d depth 1: needle at %d", lengths[i], r.needle_pos);
            if (depths[j] == 0.5 && fabs(r.needle_pos - (lengths[i] - 50) / 2.0) > 0.2 * lengths[i])
                FAILF("length %d depth 0.5: needle at %d", lengths[i], r.needle_pos);
            /* streaming at budget 80: kept only when the needle is in the window (depth 1) */
            np.kv.policy = kvb_policy_default_params(KVB_POLICY_STREAMING);
            np.kv.policy.budget = 80; /* window 76 > question + needle tail (~45 tokens) */
            np.chunk = 16;
            CHECK_OK(kvb_eval_needle(m, &np, &r));
            if (depths[j] == 1.0) CHECK_NEAR(r.retained, 1.0, 0);
            if (depths[j] == 0.5 && lengths[i] >= 200) CHECK_NEAR(r.retained, 0.0, 0);
        }
    struct kvb_needle_params bad = kvb_needle_default_params();
    bad.length = 100;
    bad.depth = 1.5;
    struct kvb_needle_result r;
    CHECK_STATUS(kvb_eval_needle(m, &bad, &r), KVB_ERR_INVALID);
    kvb_model_free(m);
}

/* Several passkeys (issue 52): N needles placed apart, each asked; with
 * ask_after the prompt is the haystack alone (compressed before any
 * question), the questions come in later turns; bad counts refused. */
TEST(needle_passkeys_ask_after) {
    NEED_SHARED(g, "models/stories260K/stories260K.llamacpp.gguf");
    struct kvb_model *m;
    CHECK_OK(kvb_model_load(g, NULL, &m));
    struct kvb_needle_params np = kvb_needle_default_params();
    np.length = 400;
    np.depth = 0;
    np.chunk = 16;
    np.passkeys = 4;
    struct kvb_needle_result in, after, st;
    CHECK_OK(kvb_eval_needle(m, &np, &in)); /* questions inside the prompt */
    CHECK_EQ_INT(in.passkeys, 4);
    CHECK_EQ_INT(in.prompt_tokens, 400);
    CHECK_NEAR(in.retained, 1.0, 0);
    if (in.needle_pos > 24) FAILF("passkey 1 at depth 0: at %d", in.needle_pos);
    np.ask_after = true;
    CHECK_OK(kvb_eval_needle(m, &np, &after));
    CHECK_EQ_INT(after.passkeys, 4);
    CHECK_NEAR(after.retained, 1.0, 0);
    /* the prompt ends before the question: shorter by the question's tokens */
    if (after.prompt_tokens >= 400 - 10) FAILF("ask_after: prompt of %d tokens holds a question", after.prompt_tokens);
    /* streaming 80 over the haystack alone: only the last passkey (depth 0.75) is near the end */
    np.kv.policy = kvb_policy_default_params(KVB_POLICY_STREAMING);
    np.kv.policy.budget = 80;
    CHECK_OK(kvb_eval_needle(m, &np, &st));
    if (!(st.retained <= 0.25 + 1e-9)) FAILF("streaming 80: retained %.3f of 4 spread passkeys", st.retained);
    if (st.n_correct > after.n_correct) FAILF("streaming answered %d, full %d", st.n_correct, after.n_correct);
    /* at depth 1 the first passkey ends the haystack, the others at 0.25, 0.5
     * and 0.75: streaming holds it alone when it is asked first, a quarter */
    np.depth = 1;
    CHECK_OK(kvb_eval_needle(m, &np, &st));
    CHECK_NEAR(st.retained, 0.25, 1e-9);
    np.passkeys = 65;
    CHECK_STATUS(kvb_eval_needle(m, &np, &st), KVB_ERR_INVALID);
    np.depth = 0;
    np.passkeys = 4; /* each passkey needs 8 filler tokens: 4 fit in 220 tokens, not in 200 */
    np.length = 220;
    CHECK_OK(kvb_eval_needle(m, &np, &st));
    np.length = 200;
    CHECK_STATUS(kvb_eval_needle(m, &np, &st), KVB_ERR_INVALID);
    np.passkeys = 30;
    np.length = 96;
    CHECK_STATUS(kvb_eval_needle(m, &np, &st), KVB_ERR_INVALID);
    kvb_model_free(m);
}

TEST(ppl_baselines_are_consistent) {
    NEED_SHARED(g, "models/stories260K/stories260K.llamacpp.gguf");
    NEED_SHARED(tp, "text/tinystories_validation_head.txt");
    struct kvb_model *m;
    CHECK_OK(kvb_model_load(g, NULL, &m));
    size_t len;
    char *text = t_read_file(tp, &len);
    int32_t *ids, n;
    CHECK_OK(kvb_vocab_tokenize(kvb_model_vocab(m), text, 3000, true, false, &ids, &n));
    n = n > 200 ? 200 : n;
    /* full vs its own full baseline: identical */
    struct kvb_ppl_params pp = kvb_ppl_default_params();
    pp.kv.policy = kvb_policy_default_params(KVB_POLICY_FULL);
    pp.baseline = KVB_BASELINE_FULL;
    pp.chunk = 8;
    struct kvb_ppl_result r;
    CHECK_OK(kvb_eval_ppl(m, ids, n, &pp, &r));
    CHECK_NEAR(r.kl, 0.0, 1e-6);
    CHECK_NEAR(r.top1, 1.0, 0);
    CHECK_NEAR(r.ppl, r.base_ppl, 1e-6 * r.ppl);
    CHECK_EQ_INT(r.tokens, n - 1);
    const double full_ppl = r.ppl;
    kvb_ppl_result_free(&r);
    /* recompute with B >= the text is full attention */
    pp.kv.policy = kvb_policy_default_params(KVB_POLICY_STREAMING);
    pp.kv.policy.budget = 400;
    pp.chunk = 1;
    pp.baseline = KVB_BASELINE_RECOMPUTE;
    CHECK_OK(kvb_eval_ppl(m, ids, n, &pp, &r));
    CHECK_NEAR(r.base_ppl, full_ppl, 1e-4 * full_ppl);
    CHECK_NEAR(r.ppl, full_ppl, 1e-4 * full_ppl); /* nothing evicted either */
    kvb_ppl_result_free(&r);
    /* a policy that evicts has KL > 0 and keeps less than all the mass */
    pp.kv.policy.budget = 24;
    pp.baseline = KVB_BASELINE_FULL;
    pp.mass = true;
    CHECK_OK(kvb_eval_ppl(m, ids, n, &pp, &r));
    CHECK(r.kl > 0);
    CHECK(r.mass > 0.3 && r.mass < 1.0);
    CHECK(r.sink_mass >= 0 && r.sink_mass <= 1);
    CHECK_EQ_INT(r.n_layer, 5);
    kvb_ppl_result_free(&r);
    /* budget too small for sinks + chunk: a clear error */
    pp.mass = false;
    pp.kv.policy.budget = 5;
    pp.chunk = 4;
    CHECK_STATUS(kvb_eval_ppl(m, ids, n, &pp, &r), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "budget") != NULL);
    kvb_buffer_free(ids);
    free(text);
    kvb_model_free(m);
}

int main(void) {
    RUN(needle_haystack_and_retention);
    RUN(needle_passkeys_ask_after);
    RUN(ppl_baselines_are_consistent);
    return test_summary();
}
