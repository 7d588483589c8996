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

#include <unistd.h>

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

/* ---- RULER (issue 52): the generators' structure, without a model ----
 * A synthetic word list (4-letter words, with lines the filter must drop
 * and duplicates) and a synthetic essay (numbered sentences between
 * Project Gutenberg's markers, a trailer after them); tokens counted as
 * whitespace-separated words. */
static int64_t words_in(const char *t, size_t n) {
    int64_t c = 0;
    bool in = false;
    for (size_t i = 0; i < n; i++) {
        const bool sp = (unsigned char)t[i] <= ' ';
        c += !sp && !in;
        in = !sp;
    }
    return c;
}
static int64_t ruler_words(void *ud, const char *ctx, const char *q, const char *pre) {
    (void)ud;
    return words_in(ctx, strlen(ctx)) + words_in(q, strlen(q)) + words_in(pre, strlen(pre));
}

static struct kvb_ruler_corpus *ruler_corpus(void) {
    static char words[6000 * 6 + 64], essay[3000 * 40 + 128];
    size_t w = 0, e = 0;
    for (int i = 0; i < 6000; i++) { /* 5900 distinct 4-letter words, then the first 100 again */
        const int k = i % 5900;
        w += (size_t)snprintf(words + w, sizeof words - w, "%c%c%c%c\n", 'a' + k / 17576 % 26, 'a' + k / 676 % 26, 'a' + k / 26 % 26, 'a' + k % 26);
    }
    w += (size_t)snprintf(words + w, sizeof words - w, "Capital\nit's\nab\nx9yz\n");
    e += (size_t)snprintf(essay + e, sizeof essay - e, "\xEF\xBB\xBFheader words *** START OF THE BOOK ***\n");
    for (int i = 0; i < 3000; i++) e += (size_t)snprintf(essay + e, sizeof essay - e, "Sentence number %d is here. ", i);
    snprintf(essay + e, sizeof essay - e, "\n*** END OF THE BOOK ***\nTRAILER words.\n");
    struct kvb_ruler_corpus *c = NULL;
    if (kvb_ruler_corpus_new(essay, strlen(essay), words, strlen(words), &c) != KVB_OK) return NULL;
    return c;
}

/* Counts of "One of the special magic ... for KEY is: VALUE." in text. */
struct needles {
    char key[1024][64], val[1024][64];
    int n;
};
static void find_needles(const char *text, struct needles *nd) {
    nd->n = 0;
    for (const char *p = text; (p = strstr(p, "One of the special magic ")) && nd->n < 1024; p++) {
        const char *f = strstr(p, " for "), *is = f ? strstr(f, " is: ") : NULL, *dot = is ? strchr(is + 5, '.') : NULL;
        if (!dot) break;
        snprintf(nd->key[nd->n], 64, "%.*s", (int)(is - f - 5), f + 5);
        snprintf(nd->val[nd->n], 64, "%.*s", (int)(dot - is - 5), is + 5);
        nd->n++;
    }
}

TEST(ruler_task_names_and_refusals_by_name) {
    static const char *const names[KVB_RULER_TASKS] = {"niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
                                                       "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe"};
    for (int i = 0; i < KVB_RULER_TASKS; i++) {
        int32_t t = -1;
        CHECK(!strcmp(kvb_ruler_task_name(i), names[i]));
        CHECK_OK(kvb_ruler_task_from_name(names[i], &t));
        CHECK_EQ_INT(t, i);
        CHECK(!kvb_ruler_task_part(i)); /* string_match_all */
    }
    CHECK(kvb_ruler_task_name(KVB_RULER_TASKS) == NULL);
    int32_t t;
    CHECK_STATUS(kvb_ruler_task_from_name("qa_1", &t), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "qa_1") && strstr(kvb_last_error(), "absent"));
    CHECK_STATUS(kvb_ruler_task_from_name("qa_2", &t), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "HotpotQA"));
    CHECK_STATUS(kvb_ruler_task_from_name("niah_single_4", &t), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "unknown task 'niah_single_4'"));
    struct kvb_ruler_corpus *c = ruler_corpus(), *bare = NULL;
    CHECK(c != NULL);
    int64_t nw, ne;
    kvb_ruler_corpus_size(c, &nw, &ne);
    CHECK_EQ_INT(nw, 5900); /* 6000 lines, 100 duplicates; "Capital", "it's", "ab", "x9yz" dropped */
    CHECK_EQ_INT(ne, 3000 * 5); /* the header, the markers and the trailer cut off */
    struct kvb_ruler_sample s;
    CHECK_STATUS(kvb_ruler_generate(c, 0, 1, 63, ruler_words, NULL, &s), KVB_ERR_INVALID); /* length */
    CHECK_STATUS(kvb_ruler_generate(c, 0, 1, 140, ruler_words, NULL, &s), KVB_ERR_INVALID); /* too short for the task */
    CHECK(strstr(kvb_last_error(), "too short for niah_single_1"));
    CHECK_STATUS(kvb_ruler_generate(c, KVB_RULER_TASKS, 1, 1000, ruler_words, NULL, &s), KVB_ERR_INVALID);
    CHECK_OK(kvb_ruler_corpus_new(NULL, 0, NULL, 0, &bare));
    CHECK_STATUS(kvb_ruler_generate(bare, 0, 1, 1000, ruler_words, NULL, &s), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "wamerican"));
    kvb_ruler_corpus_free(bare);
    char few[100 * 5 + 1];
    for (int i = 0; i < 100; i++) snprintf(few + 5 * i, 6, "%c%c%c%c\n", 'a' + i / 26, 'a' + i % 26, 'x', 'y');
    CHECK_OK(kvb_ruler_corpus_new(NULL, 0, few, strlen(few), &bare));
    CHECK_STATUS(kvb_ruler_generate(bare, 1, 1, 1000, ruler_words, NULL, &s), KVB_ERR_INVALID); /* niah_single_2: essay */
    CHECK(strstr(kvb_last_error(), "essay"));
    CHECK_OK(kvb_ruler_generate(bare, 8, 1, 1000, ruler_words, NULL, &s)); /* vt needs neither */
    kvb_ruler_sample_free(&s);
    kvb_ruler_corpus_free(bare);
    kvb_ruler_corpus_free(c);
}

/* niah: the needle counts (nk * nv needles; the needle haystack's
 * distractors besides), every key and value distinct, the answers the
 * queried keys' values, the value formats, RULER's singular/plural
 * template, essay needles at sentence boundaries. */
TEST(ruler_niah_needle_counts_and_unique_keys) {
    struct kvb_ruler_corpus *c = ruler_corpus();
    CHECK(c != NULL);
    static const int nk[8] = {1, 1, 1, 4, 1, 1, 1, 4}, nv[8] = {1, 1, 1, 1, 1, 1, 4, 1}, nq[8] = {1, 1, 1, 1, 1, 1, 1, 4};
    static struct needles nd;
    for (int t = 0; t < 8; t++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            struct kvb_ruler_sample s;
            CHECK_OK(kvb_ruler_generate(c, t, seed, 1500, ruler_words, NULL, &s));
            find_needles(s.context, &nd);
            const bool distractors = t == 4 || t == 5;
            if (distractors) CHECK_EQ_INT(nd.n, s.units + nk[t] * nv[t]);
            else CHECK_EQ_INT(nd.n, nk[t] * nv[t]);
            CHECK_EQ_INT(s.n_answers, nq[t] * nv[t]);
            CHECK_EQ_INT(s.tokens_to_generate, 128);
            /* keys: distinct but for a key's several values; values all distinct */
            int dup_keys = 0;
            for (int i = 0; i < nd.n; i++)
                for (int j = i + 1; j < nd.n; j++) {
                    if (!strcmp(nd.val[i], nd.val[j])) FAILF("task %d: value %s twice", t, nd.val[i]);
                    dup_keys += !strcmp(nd.key[i], nd.key[j]);
                }
            CHECK_EQ_INT(dup_keys, nv[t] * (nv[t] - 1) / 2);
            /* each answer: a needle's value whose key the question names */
            for (int a = 0; a < s.n_answers; a++) {
                int hit = 0;
                for (int i = 0; i < nd.n; i++)
                    if (!strcmp(nd.val[i], s.answers[a])) {
                        hit++;
                        if (!strstr(s.question, nd.key[i]) || !strstr(s.answer_prefix, nd.key[i])) FAILF("task %d: key %s not asked", t, nd.key[i]);
                    }
                CHECK_EQ_INT(hit, 1);
                const char *v = s.answers[a];
                if (t == 2 || t == 5) { /* a version 4 UUID */
                    CHECK_EQ_INT(strlen(v), 36);
                    CHECK(v[8] == '-' && v[13] == '-' && v[14] == '4' && v[18] == '-' && strchr("89ab", v[19]) && v[23] == '-');
                } else {
                    CHECK_EQ_INT(strlen(v), 7);
                    CHECK(strspn(v, "0123456789") == 7 && v[0] != '0');
                }
            }
            if (t != 5) /* keys: word pairs */
                for (int i = 0; i < nd.n; i++) CHECK(strlen(nd.key[i]) == 9 && nd.key[i][4] == '-');
            const bool one = nq[t] * nv[t] == 1;
            CHECK(strncmp(s.context, one ? "A special magic " : "Some special magic ", one ? 16 : 19) == 0);
            CHECK(strstr(s.question, one ? "\nWhat is the special magic " : "\nWhat are all the special magic ") == s.question);
            CHECK(strstr(s.answer_prefix, one ? "mentioned in the provided text is" : "mentioned in the provided text are"));
            if (nq[t] == 4) CHECK(strstr(s.question, ", and "));
            if (t == 1 || t == 2 || t == 3 || t == 6 || t == 7) /* essay: needles between sentences, no trailer */
                for (const char *p = s.context; (p = strstr(p, "One of the special magic ")); p++) {
                    const char *b = p - 1;
                    while (*b == ' ') b--;
                    if (!(*b == '.' || *b == '\n')) FAILF("task %d: a needle after '%c', inside a sentence", t, *b);
                }
            CHECK(!strstr(s.context, "TRAILER") && !strstr(s.context, "START OF"));
            kvb_ruler_sample_free(&s);
        }
    /* 100 words (10,000 pairs), ~380 distractor needles: keys drawn at random would repeat */
    struct kvb_ruler_corpus *few_c = NULL;
    char few[100 * 5 + 1];
    for (int i = 0; i < 100; i++) snprintf(few + 5 * i, 6, "%c%c%c%c\n", 'a' + i / 26, 'a' + i % 26, 'x', 'y');
    CHECK_OK(kvb_ruler_corpus_new(NULL, 0, few, strlen(few), &few_c));
    struct kvb_ruler_sample s;
    CHECK_OK(kvb_ruler_generate(few_c, 4, 3, 5000, ruler_words, NULL, &s));
    find_needles(s.context, &nd);
    CHECK(nd.n > 200);
    for (int i = 0; i < nd.n; i++)
        for (int j = i + 1; j < nd.n; j++)
            if (!strcmp(nd.key[i], nd.key[j])) FAILF("niah_multikey_2: key %s twice", nd.key[i]);
    kvb_ruler_sample_free(&s);
    kvb_ruler_corpus_free(few_c);
    kvb_ruler_corpus_free(c);
}

/* vt: the chain after the worked example: following "VAR X = ..." from the
 * queried value reaches exactly the five answers, in order; the example
 * (3-letter names) carries its own answer. */
TEST(ruler_vt_variable_chains) {
    struct kvb_ruler_corpus *c = ruler_corpus();
    CHECK(c != NULL);
    for (uint64_t seed = 1; seed <= 4; seed++) {
        struct kvb_ruler_sample s;
        CHECK_OK(kvb_ruler_generate(c, 8, seed, 2000, ruler_words, NULL, &s));
        CHECK_EQ_INT(s.n_answers, 5);
        CHECK_EQ_INT(s.tokens_to_generate, 30);
        const char *head = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n";
        const char *ex = strstr(s.context, head), *main_ = ex ? strstr(ex + 1, head) : NULL;
        CHECK(ex == s.context && main_ != NULL);
        CHECK(strstr(ex, "they are: ") && strstr(ex, "they are: ") < main_); /* the example's answer */
        int value = 0;
        CHECK(sscanf(s.question, "\nQuestion: Find all variables that are assigned the value %d in the text above.", &value) == 1);
        CHECK(value >= 10000 && value <= 99999);
        char want[8];
        snprintf(want, sizeof want, "%d", value);
        CHECK(strstr(s.answer_prefix, " 5 variables are assgined the value ") && strstr(s.answer_prefix, want));
        /* the assignments of the main part */
        char lhs[64][8], rhs[64][16];
        int n = 0;
        for (const char *p = main_; (p = strstr(p, "VAR ")) && n < 64; p += 4) {
            if (sscanf(p, "VAR %7s = %15s", lhs[n], rhs[n]) != 2) continue;
            if (!strcmp(rhs[n], "VAR")) sscanf(p, "VAR %7s = VAR %15s", lhs[n], rhs[n]);
            n++;
            p = strchr(p, '=');
        }
        CHECK_EQ_INT(n, 5);
        const char *cur = want;
        for (int hop = 0; hop < 5; hop++) { /* the one variable assigned cur, then the one assigned it */
            int found = -1;
            for (int i = 0; i < n; i++)
                if (!strcmp(rhs[i], cur)) { CHECK(found < 0); found = i; }
            CHECK(found >= 0);
            CHECK(!strcmp(lhs[found], s.answers[hop]));
            CHECK_EQ_INT(strlen(lhs[found]), 5);
            cur = lhs[found];
        }
        kvb_ruler_sample_free(&s);
    }
    kvb_ruler_corpus_free(c);
}

/* cwe: 10 words 30 times and the rest 3 (6 and 1 below 4K), numbered
 * 1..N; fwe: rank k drawn floor(N k^-2 / zeta(2)) times, "..." first, the
 * answer ranks 2..4. */
TEST(ruler_cwe_fwe_word_frequency_law) {
    struct kvb_ruler_corpus *c = ruler_corpus();
    CHECK(c != NULL);
    static char word[20000][16];
    static int cnt[20000];
    for (int big = 0; big < 2; big++) {
        struct kvb_ruler_sample s;
        CHECK_OK(kvb_ruler_generate(c, 9, 5, big ? 6000 : 3000, ruler_words, NULL, &s));
        CHECK_EQ_INT(s.n_answers, 10);
        const char *head = "Below is a numbered list of words.";
        const char *p = strstr(s.context, head);
        CHECK(p == s.context);
        p = strstr(p + 1, head); /* past the worked example */
        CHECK(p != NULL);
        p = strchr(p, '\n') + 1;
        int nw = 0, num, listed = 0;
        char w[16];
        int used;
        while (sscanf(p, "%d. %15s%n", &num, w, &used) == 2) {
            CHECK_EQ_INT(num, ++listed);
            int k = 0;
            while (k < nw && strcmp(word[k], w)) k++;
            if (k == nw) { snprintf(word[nw], 16, "%s", w); cnt[nw++] = 0; }
            cnt[k]++;
            p += used;
            if (nw >= 20000) break;
        }
        CHECK_EQ_INT(nw, s.units);
        const int cr = big ? 30 : 6, ur = big ? 3 : 1;
        int commons = 0;
        for (int k = 0; k < nw; k++) {
            bool ans = false;
            for (int a = 0; a < 10; a++) ans |= !strcmp(s.answers[a], word[k]);
            commons += ans;
            if (cnt[k] != (ans ? cr : ur)) FAILF("cwe: %s listed %d times, want %d", word[k], cnt[k], ans ? cr : ur);
        }
        CHECK_EQ_INT(commons, 10);
        kvb_ruler_sample_free(&s);
    }
    struct kvb_ruler_sample s;
    CHECK_OK(kvb_ruler_generate(c, 10, 9, 4000, ruler_words, NULL, &s));
    CHECK_EQ_INT(s.n_answers, 3);
    const char *p = strstr(s.context, "coded words. ");
    CHECK(p != NULL);
    p += 13;
    int nw = 0, used;
    char w[16];
    while (sscanf(p, "%15s%n", w, &used) == 1) {
        int k = 0;
        while (k < nw && strcmp(word[k], w)) k++;
        if (k == nw) { snprintf(word[nw], 16, "%s", w); cnt[nw++] = 0; }
        cnt[k]++;
        p += used;
    }
    for (int r = 0; r < 6; r++) { /* ranks: the k-th most drawn word */
        int best = r;
        for (int k = r + 1; k < nw; k++)
            if (cnt[k] > cnt[best]) best = k;
        int tc = cnt[r]; cnt[r] = cnt[best]; cnt[best] = tc;
        char tw[16];
        memcpy(tw, word[r], 16), memcpy(word[r], word[best], 16), memcpy(word[best], tw, 16);
        const int law = (int)floor((double)s.units * pow(r + 1, -2.0) / 1.6449340668482264);
        if (cnt[r] != law) FAILF("fwe: rank %d drawn %d times, the law says %d (N %lld)", r + 1, cnt[r], law, (long long)s.units);
        if (r == 0) CHECK(!strcmp(word[0], "..."));
        if (r >= 1 && r <= 3) CHECK(!strcmp(word[r], s.answers[r - 1]) && strlen(word[r]) == 6);
    }
    kvb_ruler_sample_free(&s);
    kvb_ruler_corpus_free(c);
}

/* Every task: the input plus the answer's tokens within the length and
 * near it (a unit less than the length would allow is never left over),
 * the same sample for the same seed, another for another seed. */
TEST(ruler_length_within_target_and_determinism_by_seed) {
    struct kvb_ruler_corpus *c = ruler_corpus();
    CHECK(c != NULL);
    for (int t = 0; t < KVB_RULER_TASKS; t++)
        for (int li = 0; li < 2; li++) {
            const int64_t len = li ? 5000 : 1200;
            struct kvb_ruler_sample a, b, d;
            CHECK_OK(kvb_ruler_generate(c, t, 11, len, ruler_words, NULL, &a));
            CHECK_OK(kvb_ruler_generate(c, t, 11, len, ruler_words, NULL, &b));
            CHECK_OK(kvb_ruler_generate(c, t, 12, len, ruler_words, NULL, &d));
            char *all = malloc(strlen(a.context) + strlen(a.question) + strlen(a.answer_prefix) + 1);
            strcat(strcat(strcpy(all, a.context), a.question), a.answer_prefix);
            CHECK_EQ_INT(a.tokens, words_in(all, strlen(all))); /* no word spans two parts */
            free(all);
            if (a.tokens + a.tokens_to_generate > len) FAILF("%s: %lld tokens + %d > %lld", kvb_ruler_task_name(t), (long long)a.tokens, a.tokens_to_generate, (long long)len);
            if (a.tokens + a.tokens_to_generate < len - 60) FAILF("%s: %lld tokens + %d, far under %lld", kvb_ruler_task_name(t), (long long)a.tokens, a.tokens_to_generate, (long long)len);
            CHECK(!strcmp(a.context, b.context) && !strcmp(a.question, b.question) && !strcmp(a.answer_prefix, b.answer_prefix));
            CHECK_EQ_INT(a.n_answers, b.n_answers);
            for (int i = 0; i < a.n_answers; i++) CHECK(!strcmp(a.answers[i], b.answers[i]));
            CHECK(strcmp(a.context, d.context) != 0);
            kvb_ruler_sample_free(&a), kvb_ruler_sample_free(&b), kvb_ruler_sample_free(&d);
        }
    kvb_ruler_corpus_free(c);
}

/* RULER's string match: all = share of the answers found, part = any;
 * case-insensitive substrings. */
TEST(ruler_string_match_all_and_part) {
    const char *ans[4] = {"1234567", "ABC-def", "zz", "q"};
    CHECK_NEAR(kvb_ruler_match("the numbers are 1234567 and abc-DEF.", ans, 2, false), 1.0, 0);
    CHECK_NEAR(kvb_ruler_match("the numbers are 1234567", ans, 2, false), 0.5, 0);
    CHECK_NEAR(kvb_ruler_match("the numbers are 1234567", ans, 2, true), 1.0, 0);
    CHECK_NEAR(kvb_ruler_match("123456 abc", ans, 2, true), 0.0, 0);
    CHECK_NEAR(kvb_ruler_match("zz and 1234567 ", ans, 4, false), 0.5, 0);
    CHECK_NEAR(kvb_ruler_match("", ans, 4, false), 0.0, 0);
}

/* kvb_eval_ruler on the shared model: a hand-made sample whose greedy
 * continuation is known (stories260K: "... Lily. She loved to play outside
 * in the park."): scored by string match all (2 of 3 answers found), the
 * same answer with the question read after the context (full cache), the
 * ratio's budget from the compressed tokens (ask_after: the context's),
 * a ratio without a policy that evicts refused. */
TEST(ruler_eval_greedy_answer_scored) {
    NEED_SHARED(g, "models/stories260K/stories260K.llamacpp.gguf");
    struct kvb_model *m;
    CHECK_OK(kvb_model_load(g, NULL, &m));
    struct kvb_ruler_sample s;
    memset(&s, 0, sizeof s);
    s.context = (char *)"Once upon a time, there was a little girl named Lily.";
    s.question = (char *)" She loved";
    s.answer_prefix = (char *)" to";
    s.answers[0] = (char *)"PLAY", s.answers[1] = (char *)"park", s.answers[2] = (char *)"dragon";
    s.n_answers = 3;
    s.tokens_to_generate = 16;
    struct kvb_ruler_params p = kvb_ruler_default_params();
    struct kvb_ruler_result r, ra;
    CHECK_OK(kvb_eval_ruler(m, &p, 0, &s, &r));
    if (strncmp(r.output, " play outside in the park", 25) != 0) FAILF("output '%s'", r.output);
    CHECK_NEAR(r.score, 2.0 / 3.0, 1e-12);
    CHECK_EQ_INT(r.budget, 0);
    CHECK_EQ_INT(r.compressed_tokens, r.prompt_tokens);
    CHECK(r.prompt_tokens > 10 && r.prompt_tokens < 40);
    p.ask_after = true;
    CHECK_OK(kvb_eval_ruler(m, &p, 0, &s, &ra));
    CHECK(!strcmp(ra.output, r.output));
    CHECK_EQ_INT(ra.prompt_tokens, r.prompt_tokens);
    CHECK(ra.compressed_tokens < r.prompt_tokens - 2);
    p.ratio = 0.5;
    CHECK_STATUS(kvb_eval_ruler(m, &p, 0, &s, &ra), KVB_ERR_INVALID); /* full: nothing to remove */
    CHECK(strstr(kvb_last_error(), "ratio"));
    p.kv.policy = kvb_policy_default_params(KVB_POLICY_STREAMING);
    p.ratio = 0.25;
    p.chunk = 8;
    CHECK_OK(kvb_eval_ruler(m, &p, 0, &s, &ra));
    CHECK_EQ_INT(ra.budget, (int)floor(0.75 * ra.compressed_tokens + 0.5));
    kvb_model_free(m);
}

/* The chat template's split (kvb_ruler_tokens): the Llama 3 instruct
 * vocabulary with a Llama 3 template added (a string key put first after
 * the GGUF header): the context part opens with BOS and the user header and
 * ends with the context, the rest is the question, <|eot_id|>, the
 * assistant header and the answer prefix; "<|eot_id|>" written in the
 * sample's text stays text. Without a template: the plain text. */
static char *ruler_decode(const struct kvb_vocab *v, const int32_t *ids, int32_t n) {
    static char out[4096];
    size_t w = 0;
    for (int32_t i = 0; i < n; i++) {
        char buf[256];
        const size_t k = kvb_vocab_token_bytes(v, ids[i], true, buf, sizeof buf);
        if (k <= sizeof buf && w + k < sizeof out) memcpy(out + w, buf, k), w += k;
    }
    out[w] = 0;
    return out;
}

TEST(ruler_chat_template_split) {
    NEED_SHARED(vp, "tokenizers/llama3/llama3-8b-instruct.vocab.gguf");
    FILE *f = fopen(vp, "rb");
    CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    rewind(f);
    unsigned char *g = malloc((size_t)n + 512);
    CHECK(g && fread(g, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    static const char key[] = "tokenizer.chat_template", val[] = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}{{ '<|eot_id|>' }}";
    unsigned char kv[512];
    size_t o = 0;
    uint64_t x = sizeof key - 1;
    memcpy(kv + o, &x, 8), o += 8, memcpy(kv + o, key, x), o += x;
    const uint32_t ty = 8; /* string */
    memcpy(kv + o, &ty, 4), o += 4;
    x = sizeof val - 1;
    memcpy(kv + o, &x, 8), o += 8, memcpy(kv + o, val, x), o += x;
    uint64_t nkv;
    memcpy(&nkv, g + 16, 8), nkv++, memcpy(g + 16, &nkv, 8);
    memmove(g + 24 + o, g + 24, (size_t)n - 24), memcpy(g + 24, kv, o);
    char path[64];
    snprintf(path, sizeof path, "/tmp/kvb-test-ruler-%d.gguf", (int)getpid());
    f = fopen(path, "wb");
    CHECK(f && fwrite(g, 1, (size_t)n + o, f) == (size_t)n + o);
    fclose(f);
    free(g);
    struct kvb_vocab *v = NULL, *plain = NULL;
    CHECK_OK(kvb_vocab_load(path, &v));
    remove(path);
    CHECK_OK(kvb_vocab_load(vp, &plain));
    struct kvb_ruler_sample s;
    memset(&s, 0, sizeof s);
    s.context = (char *)"Some text <|eot_id|> here.";
    s.question = (char *)"\nWhat is it?";
    s.answer_prefix = (char *)" It is";
    int32_t *a, *b, na, nb;
    CHECK_OK(kvb_ruler_tokens(v, &s, &a, &na, &b, &nb));
    const int32_t eot = 128009;
    CHECK(!strcmp(ruler_decode(v, a, na), "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nSome text <|eot_id|> here."));
    CHECK(!strcmp(ruler_decode(v, b, nb), "\nWhat is it?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n It is"));
    CHECK_EQ_INT(a[0], 128000);
    for (int32_t i = 0; i < na; i++) CHECK(a[i] != eot); /* the sample's "<|eot_id|>" is text */
    int eots = 0;
    for (int32_t i = 0; i < nb; i++) eots += b[i] == eot;
    CHECK_EQ_INT(eots, 1);
    kvb_buffer_free(a), kvb_buffer_free(b);
    CHECK_OK(kvb_ruler_tokens(plain, &s, &a, &na, &b, &nb)); /* no template: plain text */
    CHECK(!strcmp(ruler_decode(plain, a, na), "<|begin_of_text|>Some text <|eot_id|> here."));
    CHECK(!strcmp(ruler_decode(plain, b, nb), "\nWhat is it? It is"));
    for (int32_t i = 0; i < na; i++) CHECK(a[i] != eot);
    kvb_buffer_free(a), kvb_buffer_free(b);
    kvb_vocab_free(v);
    kvb_vocab_free(plain);
}

int main(void) {
    RUN(needle_haystack_and_retention);
    RUN(needle_passkeys_ask_after);
    RUN(ppl_baselines_are_consistent);
    RUN(ruler_task_names_and_refusals_by_name);
    RUN(ruler_niah_needle_counts_and_unique_keys);
    RUN(ruler_vt_variable_chains);
    RUN(ruler_cwe_fwe_word_frequency_law);
    RUN(ruler_length_within_target_and_determinism_by_seed);
    RUN(ruler_string_match_all_and_part);
    RUN(ruler_eval_greedy_answer_scored);
    RUN(ruler_chat_template_split);
    return test_summary();
}
