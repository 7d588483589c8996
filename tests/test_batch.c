/*
 * test_batch.c — batched decode against the single-sequence path, on the
 * real stories260K model (GQA: 8 query heads on 4 KV heads):
 *   - every policy, sequences with different prompts joining at different
 *     steps, one cancelled mid-prompt and one mid-answer: each sequence's
 *     logits at every step equal a lone kvb_context's (prompt through
 *     kvb_context_prompt with the same chunk, then one eval per token)
 *     within 1e-4, and after every step the pool's pages in use are the sum
 *     of the sequences' pages; the same with recall (kvb_seq_params.recall);
 *   - pool exhaustion mid-step and allocation failures during a step leave
 *     every cache byte-identical and name the sequence; with recall (no
 *     images), a step failed at every allocation in turn leaves each
 *     sequence's state and stats as they were, and its logits then equal a
 *     twin batch's that never failed;
 *   - sequences removed in random order give back every page;
 *   - stall-free steps (step_target_ms): the step-cost fit (kvb_step_cost)
 *     finds a synthetic cost, follows a change and gives the budget; with a
 *     target so small that prompts read prompt_min_rows a step (pieces cut
 *     below the chunk where the cache cannot evict), every policy's logits
 *     still equal a lone context's with chunks of CHUNK, and the oldest
 *     prompt progresses by at least prompt_min_rows a step next to decoders;
 *     with step_target_x, every step takes exactly the prompt rows the fit
 *     gives for x times the decode-only step of its decoders; the fit
 *     observes every row of a step, the decoders' too;
 *   - prompt_min_rows may equal the chunk (one above is refused).
 */
#include "testing.h"
#include "kvbound.h"
#include "core/core.h" /* KVB_MIN, KVB_MAX */

#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

#define CHUNK 16
#define MAX_GEN 20

static struct kvb_model *g_model;
static int32_t *g_ids, g_n_ids;

static int load(void) {
    if (g_model) return 1;
    const char *path = t_shared("models/stories260K/stories260K.llamacpp.gguf");
    const char *text = t_shared("text/tinystories_validation_head.txt");
    if (!path || !text) return 0;
    struct kvb_model_params mp = kvb_model_default_params();
    if (kvb_model_load(path, &mp, &g_model) != KVB_OK) return 0;
    size_t len;
    char *t = t_read_file(text, &len);
    if (!t) return 0;
    kvb_status st = kvb_vocab_tokenize(kvb_model_vocab(g_model), t, len < 6000 ? len : 6000, true, false, &g_ids, &g_n_ids);
    free(t);
    return st == KVB_OK;
}

#define NEED_MODEL()                                                                    \
    do {                                                                                \
        NEED_SHARED(_m, "models/stories260K/stories260K.llamacpp.gguf");                \
        NEED_SHARED(_t, "text/tinystories_validation_head.txt");                        \
        if (!load()) FAILF("cannot load stories260K: %s", kvb_last_error());            \
    } while (0)

static struct kvb_policy_params policy(enum kvb_policy_id id) {
    struct kvb_policy_params p = kvb_policy_default_params(id);
    if (id != KVB_POLICY_FULL) {
        p.budget = 40;
        if (p.n_sink >= 40) p.n_sink = 4;
    }
    if (id == KVB_POLICY_SNAPKV || id == KVB_POLICY_PYRAMIDKV || id == KVB_POLICY_ADAKV) p.obs_window = 8;
    return p;
}

/* A lone context's logits for the prompt and then for each token of `fed`. */
static int single_logits(struct kvb_model *model, struct kvb_policy_params pol, struct kvb_recall_params rec, const int32_t *prompt, int32_t n_prompt,
                         const int32_t *fed, int32_t n_fed, float *out /* [(n_fed + 1) * V] */) {
    struct kvb_context_params cp = kvb_context_default_params();
    cp.kv.policy = pol;
    cp.kv.recall = rec;
    cp.chunk = CHUNK;
    cp.kv_pool_bytes = (size_t)64 << 20;
    struct kvb_context *c;
    if (kvb_context_init(model, &cp, &c) != KVB_OK) return 0;
    struct kvb_model_info mi;
    kvb_model_get_info(model, &mi);
    int ok = kvb_context_prompt(c, prompt, n_prompt, out, false) == KVB_OK;
    for (int32_t i = 0; ok && i < n_fed; i++) ok = kvb_context_eval(c, &fed[i], 1, out + (size_t)(i + 1) * mi.n_vocab, false) == KVB_OK;
    kvb_context_free(c);
    return ok;
}

struct track {
    int32_t id, start, n_prompt, cancel_at;
    enum kvb_policy_id pol;
    int32_t fed[MAX_GEN + 1];
    int32_t n_fed;
    float *lg; /* [(MAX_GEN + 1) * V] logits seen in the batch */
    int32_t n_lg;
    bool done, removed;
    bool refused; /* kvzip on a model with sliding-window or recurrent layers: refused by name at admission */
};

/* Pool pages in use equal the sequences' pages (nothing leaks, nothing is
 * counted twice). */
static int pool_matches(struct kvb_batch *b, const struct track *tr, int n) {
    size_t sum = 0;
    for (int i = 0; i < n; i++) {
        if (tr[i].id < 0 || tr[i].removed) continue;
        struct kvb_seq_info si;
        if (kvb_batch_seq_info(b, tr[i].id, &si) != KVB_OK) return 0;
        sum += si.kv_bytes;
    }
    struct kvb_batch_stats bs;
    kvb_batch_get_stats(b, &bs);
    return bs.pool_bytes_in_use == sum;
}

/* n_seq sequences cycling through the policies, two joining per step, at
 * most 8 at once, one cancelled mid-prompt and one mid-answer; every one's
 * logits against a lone context. Returns through FAILF. */
#define NS_MAX (KVB_POLICY_COUNT + 2)
static float g_eq_target_ms;  /* > 0: the runs' batches have this step target */
static float g_eq_share; /* prompt_step_share of equality_run's batch under a target */
static int32_t g_eq_min_rows; /* and this prompt_min_rows */
static long g_eq_cuts;        /* prompts seen part-read at a point that is not a chunk boundary */
static void equality_run(struct kvb_model *model, int NS, int n_pol, struct kvb_recall_params rec) {
    struct kvb_model_info mi;
    kvb_model_get_info(model, &mi);
    const int32_t V = mi.n_vocab;
    struct track tr[NS_MAX];
    for (int i = 0; i < NS; i++) {
        memset(&tr[i], 0, sizeof tr[i]);
        tr[i].id = -1;
        tr[i].pol = (enum kvb_policy_id)(i % n_pol);
        tr[i].start = i / 2;                     /* two join per step */
        tr[i].n_prompt = 5 + (i * 23) % 70;      /* 5..74 tokens: one to five chunks */
        tr[i].cancel_at = i == 3 ? tr[i].start + 2 : i == 8 ? tr[i].start + 9 : -1; /* mid-prompt; mid-answer */
        tr[i].lg = malloc(sizeof(float) * (size_t)(MAX_GEN + 1) * (size_t)V);
    }
    struct kvb_batch_params bp = kvb_batch_default_params();
    bp.n_threads = 2;
    bp.max_seqs = 8;
    bp.chunk = CHUNK;
    bp.step_tokens = 3 * CHUNK;
    bp.kv_pool_bytes = (size_t)64 << 20;
    if (g_eq_target_ms > 0) {
        bp.step_target_ms = g_eq_target_ms;
        bp.prompt_min_rows = g_eq_min_rows;
        bp.prompt_step_share = g_eq_share;
    }
    struct kvb_batch *b;
    CHECK_OK(kvb_batch_init(model, &bp, &b));
    int active_max = 0;
    long long recall_loads = 0;
    for (int step = 0; step < 200; step++) {
        for (int i = 0; i < NS; i++) /* joins (when a slot is free) */
            if (tr[i].id < 0 && !tr[i].done && step >= tr[i].start) {
                struct kvb_seq_params sp = kvb_seq_default_params();
                sp.kv.policy = policy(tr[i].pol);
                sp.kv.recall = rec;
                sp.max_tokens = MAX_GEN;
                sp.ignore_eos = true;
                sp.sampler.temp = 0;
                if (kvb_batch_add(b, &sp, g_ids + 100 * i, tr[i].n_prompt, &tr[i].id) != KVB_OK) {
                    tr[i].id = -1;
                    if (tr[i].pol == KVB_POLICY_KVZIP && strstr(kvb_last_error(), "policy kvzip on a model with")) tr[i].done = tr[i].refused = true;
                }
            }
        int32_t adv, failed;
        CHECK_OK(kvb_batch_step(b, &adv, &failed));
        int active = 0;
        for (int i = 0; i < NS; i++) {
            if (tr[i].id < 0 || tr[i].done) continue;
            struct kvb_seq_info si;
            CHECK_OK(kvb_batch_seq_info(b, tr[i].id, &si));
            if (si.n_generated > tr[i].n_lg) { /* sampled this step: keep its logits and token */
                memcpy(tr[i].lg + (size_t)tr[i].n_lg * V, kvb_batch_logits(b, tr[i].id), sizeof(float) * (size_t)V);
                tr[i].fed[tr[i].n_lg++] = si.last_token;
            }
            active += si.state != KVB_SEQ_DONE;
            if (si.state == KVB_SEQ_PROMPT && si.n_prompt_done % CHUNK) g_eq_cuts++;
            if (step == tr[i].cancel_at || si.state == KVB_SEQ_DONE) {
                struct kvb_cache_stats cs;
                kvb_cache_get_stats(kvb_batch_seq_cache(b, tr[i].id), &cs);
                recall_loads += cs.recall_loads;
                if (rec.pages > 0 && si.state == KVB_SEQ_DONE) { /* the session image holds the cold tier */
                    void *img = NULL;
                    size_t ilen = 0;
                    CHECK_OK(kvb_batch_seq_save(b, tr[i].id, &img, &ilen));
                    kvb_buffer_free(img);
                }
                if (si.state == KVB_SEQ_DONE) CHECK(!strcmp(si.stop, "length") && si.n_generated == MAX_GEN);
                CHECK_OK(kvb_batch_remove(b, tr[i].id));
                tr[i].done = true;
                tr[i].removed = true;
            }
        }
        active_max = active > active_max ? active : active_max;
        if (!pool_matches(b, tr, NS)) FAILF("step %d: pool pages in use differ from the sequences' pages", step);
        bool all = true;
        for (int i = 0; i < NS; i++) all = all && tr[i].done;
        if (all) break;
    }
    CHECK(active_max >= (NS >= 8 ? (g_eq_target_ms > 0 ? 4 : 6) : NS / 2));
    if (rec.pages > 0 && recall_loads == 0) FAILF("recall on, but no sequence loaded a page into its recall area");
    if (rec.pages == 0) CHECK_EQ_INT((int)recall_loads, 0);
    struct kvb_batch_stats bs;
    kvb_batch_get_stats(b, &bs);
    CHECK_EQ_INT((int)bs.n_seqs, 0);
    CHECK_EQ_INT((int)bs.pool_bytes_in_use, 0);
    kvb_batch_free(b);
    /* each sequence alone */
    float *want = malloc(sizeof(float) * (size_t)(MAX_GEN + 1) * (size_t)V);
    for (int i = 0; i < NS; i++) {
        if (tr[i].cancel_at >= 0 && tr[i].n_lg == MAX_GEN) FAILF("sequence %d was to be cancelled, ran to the end", i);
        if (tr[i].refused) continue;
        if (tr[i].cancel_at < 0 && tr[i].n_lg != MAX_GEN) FAILF("sequence %d (%s) sampled %d tokens, want %d", i, kvb_policy_name(tr[i].pol), (int)tr[i].n_lg, MAX_GEN);
        if (!tr[i].n_lg) continue;
        if (!single_logits(model, policy(tr[i].pol), rec, g_ids + 100 * i, tr[i].n_prompt, tr[i].fed, tr[i].n_lg - 1, want))
            FAILF("single run %d: %s", i, kvb_last_error());
        double worst = 0;
        for (size_t k = 0; k < (size_t)tr[i].n_lg * (size_t)V; k++) {
            double d = fabs((double)want[k] - (double)tr[i].lg[k]);
            if (d > worst) worst = d;
        }
        if (worst > 1e-4) FAILF("sequence %d (%s, prompt %d): logits differ from the lone context by %g", i, kvb_policy_name(tr[i].pol), (int)tr[i].n_prompt, worst);
    }
    free(want);
    for (int i = 0; i < NS; i++) free(tr[i].lg);
}

TEST(batch_equals_single_every_policy_with_joins_and_cancels) {
    NEED_MODEL();
    struct kvb_recall_params none = {0};
    equality_run(g_model, NS_MAX, KVB_POLICY_COUNT, none);
}

/* Recall in a batch: evicted pages go to each sequence's cold tier and come
 * back into its recall area, as in a lone context; the areas' pages are the
 * sequences' (pool_matches) and come back when they leave. */
TEST(batch_equals_single_with_recall) {
    NEED_MODEL();
    struct kvb_recall_params rec = {0};
    rec.pages = 2;
    rec.every = 1;
    rec.cold_mem_bytes = (size_t)1 << 20;
    equality_run(g_model, NS_MAX, KVB_POLICY_COUNT, rec);
}

/* Q8_0 weights: decode rows go through the int8 kernel with activations
 * quantized once per matmul for the whole batch; still the lone bits. */
TEST(batch_equals_single_q8_0_weights) {
    NEED_MODEL();
    char path[] = "/tmp/kvb_test_batch_q8_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    uint32_t q8_0;
    CHECK_OK(kvb_type_from_name("q8_0", &q8_0));
    CHECK_OK(kvb_model_write_gguf(g_model, path, q8_0, NULL, NULL));
    struct kvb_model_params mp = kvb_model_default_params();
    struct kvb_model *q8;
    CHECK_OK(kvb_model_load(path, &mp, &q8));
    struct kvb_model_info mi;
    kvb_model_get_info(q8, &mi);
    CHECK(!strcmp(kvb_type_name(mi.weight_type), "q8_0"));
    struct kvb_recall_params none = {0};
    equality_run(q8, 8, 4, none); /* full, window, streaming, h2o */
    kvb_model_free(q8);
    unlink(path);
}

/* Every model family: a batch of sequences of every policy (recall on the
 * second half) against lone contexts, on the family's tiny mkmodel shape. */
TEST(batch_equals_single_every_family) {
    NEED_MODEL(); /* the prompts' ids (all below the tiny shapes' 512) */
    static const char *const shapes[] = {"tiny-llama-bias", "tiny-qwen3", "tiny-granite", "tiny-olmo2", "tiny-phi3", "tiny-mistral3", "tiny-smollm3",
                                         "tiny-gemma2", "tiny-gemma3", "tiny-qwen3moe", "tiny-mixtral", "tiny-granitemoe", "tiny-gpt-oss",
                                         "tiny-granitemoe-shared", "tiny-qwen2moe", "tiny-deepseek", "tiny-olmoe"};
    struct kvb_recall_params rec = {0};
    rec.pages = 2;
    rec.every = 1;
    rec.cold_mem_bytes = (size_t)1 << 20;
    const struct kvb_recall_params none = {0};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        struct kvb_model *m;
        void *owned;
        CHECK_OK(kvb_model_make(shapes[k], 5, NULL, &m, &owned));
        printf("  %s\n", shapes[k]);
        equality_run(m, KVB_POLICY_COUNT, KVB_POLICY_COUNT, k % 2 == 0 ? rec : none); /* recall on tiny-smollm3's NoPE layers too */
        kvb_model_make_free(m, owned);
        if (t_case_failed) return;
    }
}

/* Experts in the weight types people's files use: each step's rows are
 * grouped by expert across the sequences (decode rows of q8_0 experts on
 * int8 tiles with the prompts, q4_K's through their integer dot or, on the
 * families with K-quant tiles (avx2, avxvnni, both AVX-512, dotprod, sve,
 * i8mm), the K-quant tiles with the prompts), and every
 * sequence still has the bits of a lone context. */
TEST(batch_equals_single_quantized_experts) {
    NEED_MODEL();
    /* and deepseek's dense first layer and shared experts, quantized beside its experts */
    static const char *const types[] = {"q8_0", "q4_K", "mxfp4", "q8_0"}, *const shapes[] = {"tiny-qwen3moe", "tiny-qwen3moe", "tiny-qwen3moe", "tiny-deepseek"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        struct kvb_model *made, *m;
        void *owned;
        CHECK_OK(kvb_model_make(shapes[i], 7, NULL, &made, &owned));
        char path[] = "/tmp/kvb_test_batch_moe_XXXXXX";
        int fd = mkstemp(path);
        CHECK(fd >= 0);
        close(fd);
        uint32_t type;
        CHECK_OK(kvb_type_from_name(types[i], &type));
        CHECK_OK(kvb_model_write_gguf(made, path, type, NULL, NULL));
        kvb_model_make_free(made, owned);
        struct kvb_model_params mp = kvb_model_default_params();
        CHECK_OK(kvb_model_load(path, &mp, &m));
        unlink(path);
        printf("  %s %s\n", shapes[i], types[i]);
        struct kvb_recall_params none = {0};
        equality_run(m, 8, 4, none); /* full, window, streaming, h2o */
        kvb_model_free(m);
        if (t_case_failed) return;
    }
}

/* Hybrid models (qwen35, qwen35moe: Gated DeltaNet layers with a recurrent
 * state beside attention layers): a batch of every policy equals lone
 * contexts, forks continue exactly (the state shared copy-on-write), and
 * sessions saved and loaded continue as if never stopped (the state in the
 * image). Defined after the tests it reruns on these models. Under the
 * sanitizers (KVB_TEST_QUICK, set by make asan and make tsan) the batch runs
 * four policies on each shape and the fork and session tests run on the
 * first shape of each kind only: ThreadSanitizer runs them ten times slower. */
static bool g_no_recall; /* the model in g_model refuses recall (a hybrid) */
static void test_forked_sequences_continue_exactly_every_policy(void);
static void test_sessions_continue_save_and_load(void);
TEST(hybrid_models_batch_fork_and_sessions_exact) {
    NEED_MODEL();
    /* and Gemma 4: KV-shared layers, padded window heads; with experts and per-layer KV heads (tiny-gemma4moe); and LFM2's
     * short-conv layers (their state: the last 2 rows of B*x), with windows on its attention layers (tiny-lfm2-swa), with
     * sigmoid-routed experts and their selection bias (tiny-lfm2moe); GLM-4.5's partial RoPE, sigmoid experts beside a
     * shared expert and an MTP layer that never runs (tiny-glm4moe); deepseek2's latent attention (one latent row per
     * token for every head, the absorbed form in prompts and decode alike); and Granite 4.0-H's Mamba-2 layers (their state: the
     * scan's H P rows and the conv's last 3 rows of xBC) beside attention without RoPE (tiny-granitehybrid), with experts and a shared expert (tiny-granitehybrid-moe); Nemotron-H's blocks (tiny-nemotron-h), with experts (tiny-nemotron-h-moe) */
    static const char *const shapes[] = {"tiny-qwen35", "tiny-qwen35moe", "tiny-gemma4", "tiny-gemma4moe", "tiny-lfm2", "tiny-lfm2-swa", "tiny-lfm2moe",
                                         "tiny-glm4moe", "tiny-deepseek2", "tiny-granitehybrid", "tiny-granitehybrid-moe", "tiny-nemotron-h",
                                         "tiny-nemotron-h-moe"};
    const struct kvb_recall_params none = {0};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        struct kvb_model *m, *keep = g_model;
        void *owned;
        CHECK_OK(kvb_model_make(shapes[k], 5, NULL, &m, &owned));
        printf("  %s\n", shapes[k]);
        const bool quick = getenv("KVB_TEST_QUICK") != NULL;
        equality_run(m, quick ? 8 : KVB_POLICY_COUNT, quick ? 4 : KVB_POLICY_COUNT, none); /* quick: full, window, streaming, h2o */
        g_model = m;
        g_no_recall = true;
        if (!t_case_failed && (!quick || k == 0 || k == 3 || k == 4 || k == 7)) test_forked_sequences_continue_exactly_every_policy();
        if (!t_case_failed && (!quick || k == 0 || k == 3 || k == 4 || k == 7)) test_sessions_continue_save_and_load();
        g_model = keep;
        g_no_recall = false;
        kvb_model_make_free(m, owned);
        if (t_case_failed) return;
    }
}

/* ---- failures change nothing ---- */

static long g_calls, g_fail_at;
static bool g_count;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static void *t_malloc(size_t n, void *u) {
    (void)u;
    pthread_mutex_lock(&g_mu);
    bool fail = g_count && ++g_calls == g_fail_at;
    pthread_mutex_unlock(&g_mu);
    return fail ? NULL : malloc(n);
}
static void t_free(void *p, void *u) { (void)u; free(p); }

static int images(struct kvb_batch *b, const int32_t *ids, int n, void **img, size_t *len) {
    for (int i = 0; i < n; i++)
        if (kvb_cache_save(kvb_batch_seq_cache(b, ids[i]), &img[i], &len[i]) != KVB_OK) return 0;
    return 1;
}
static int same_images(struct kvb_batch *b, const int32_t *ids, int n, void **img, const size_t *len) {
    int ok = 1;
    for (int i = 0; i < n; i++) {
        void *x;
        size_t nx;
        if (kvb_cache_save(kvb_batch_seq_cache(b, ids[i]), &x, &nx) != KVB_OK) return 0;
        ok = ok && nx == len[i] && !memcmp(x, img[i], nx);
        kvb_buffer_free(x);
    }
    return ok;
}

TEST(pool_exhaustion_and_allocation_failures_change_no_cache) {
    NEED_MODEL();
    struct kvb_batch_params bp = kvb_batch_default_params();
    bp.max_seqs = 6;
    bp.chunk = CHUNK;
    bp.step_tokens = 4 * CHUNK;
    bp.n_threads = 2;
    bp.kv_pool_bytes = (size_t)1 << 19; /* 1024 pages of 512 bytes (stories260K): full sequences run out */
    struct kvb_batch *b;
    CHECK_OK(kvb_batch_init(g_model, &bp, &b));
    int32_t ids[6];
    for (int i = 0; i < 6; i++) {
        struct kvb_seq_params sp = kvb_seq_default_params();
        sp.kv.policy = policy(i % 2 ? KVB_POLICY_FULL : KVB_POLICY_H2O);
        sp.n_ctx = 4096; /* past the trained 128: the full sequences keep growing */
        sp.ignore_eos = true;
        CHECK_OK(kvb_batch_add(b, &sp, g_ids + 50 * i, 30, &ids[i]));
    }
    void *img[6];
    size_t len[6];
    int failures = 0;
    for (int step = 0; step < 400 && !failures; step++) {
        CHECK(images(b, ids, 6, img, len));
        int32_t adv, failed;
        kvb_status st = kvb_batch_step(b, &adv, &failed);
        if (st == KVB_ERR_NOMEM) {
            failures++;
            CHECK(failed >= 0 && failed < 6 && ids[failed % 6] >= 0);
            CHECK(strstr(kvb_last_error(), "sequence") != NULL);
            if (!same_images(b, ids, 6, img, len)) FAILF("step %d: a failed step changed a cache", step);
        } else {
            CHECK_OK(st);
        }
        for (int i = 0; i < 6; i++) kvb_buffer_free(img[i]);
    }
    CHECK_EQ_INT(failures, 1); /* full sequences grow until the pool is gone */
    /* allocation failures in a step: each leaves every cache as it was */
    kvb_batch_free(b);
    bp.kv_pool_bytes = (size_t)64 << 20;
    CHECK_OK(kvb_batch_init(g_model, &bp, &b));
    for (int i = 0; i < 4; i++) {
        struct kvb_seq_params sp = kvb_seq_default_params();
        sp.kv.policy = policy(i % 2 ? KVB_POLICY_SNAPKV : KVB_POLICY_STREAMING);
        sp.ignore_eos = true;
        CHECK_OK(kvb_batch_add(b, &sp, g_ids + 70 * i, 20 + 9 * i, &ids[i]));
    }
    struct kvb_allocator al = {t_malloc, t_free, NULL};
    int injected = 0;
    for (int step = 0; step < 12; step++) {
        for (long at = 1;; at++) {
            CHECK(images(b, ids, 4, img, len));
            kvb_allocator_set(&al);
            g_calls = 0;
            g_fail_at = at;
            g_count = true;
            int32_t adv, failed;
            kvb_status st = kvb_batch_step(b, &adv, &failed);
            g_count = false;
            kvb_allocator_set(NULL);
            if (st == KVB_OK) {
                for (int i = 0; i < 4; i++) kvb_buffer_free(img[i]);
                break;
            }
            injected++;
            if (st != KVB_ERR_NOMEM) FAILF("step %d, allocation %ld: status %d (%s)", step, at, (int)st, kvb_last_error());
            if (!same_images(b, ids, 4, img, len)) FAILF("step %d: failing allocation %ld changed a cache", step, at);
            for (int i = 0; i < 4; i++) kvb_buffer_free(img[i]);
        }
    }
    CHECK(injected > 0);
    kvb_batch_free(b);
}

/* Recall sequences cannot be saved as images (the cold tier is not in
 * them), so here a failed step is checked against a twin batch that never
 * fails: after every injected failure each sequence's state and cache stats
 * are as before, and once the step goes through, every sequence's logits
 * equal the twin's bit for bit. A cold page the cold tier cannot allocate is
 * dropped, not failed (the documented degrade, counted in
 * cold_dropped_pages); a sequence that dropped one is no longer compared. */
struct recall_seq_state {
    struct kvb_seq_info info;
    struct kvb_cache_stats cs;
};
static void recall_seq_state(struct kvb_batch *b, int32_t id, struct recall_seq_state *out) {
    memset(out, 0, sizeof *out);
    kvb_batch_seq_info(b, id, &out->info);
    kvb_cache_get_stats(kvb_batch_seq_cache(b, id), &out->cs);
}
static int same_recall_state(const struct recall_seq_state *a, const struct recall_seq_state *b) {
    return a->info.state == b->info.state && a->info.n_prompt_done == b->info.n_prompt_done && a->info.n_generated == b->info.n_generated &&
           a->info.n_past == b->info.n_past && a->info.kv_bytes == b->info.kv_bytes && a->cs.bytes_used == b->cs.bytes_used &&
           a->cs.slots == b->cs.slots && a->cs.cold_pages == b->cs.cold_pages && a->cs.cold_mem_bytes == b->cs.cold_mem_bytes &&
           a->cs.cold_staged_tokens == b->cs.cold_staged_tokens && a->cs.cold_dropped_pages == b->cs.cold_dropped_pages &&
           a->cs.recall_loads == b->cs.recall_loads && a->cs.recall_bytes == b->cs.recall_bytes;
}

TEST(allocation_failures_with_recall_change_nothing) {
    NEED_MODEL();
    enum { NS = 4 };
    static const enum kvb_policy_id pols[NS] = {KVB_POLICY_STREAMING, KVB_POLICY_H2O, KVB_POLICY_SNAPKV, KVB_POLICY_TOVA};
    struct kvb_batch_params bp = kvb_batch_default_params();
    bp.max_seqs = NS;
    bp.chunk = CHUNK;
    bp.step_tokens = 4 * CHUNK;
    bp.n_threads = 2;
    bp.kv_pool_bytes = (size_t)64 << 20;
    struct kvb_batch *b[2]; /* b[0] fails, b[1] is its twin */
    int32_t ids[2][NS];
    for (int k = 0; k < 2; k++) {
        CHECK_OK(kvb_batch_init(g_model, &bp, &b[k]));
        for (int i = 0; i < NS; i++) {
            struct kvb_seq_params sp = kvb_seq_default_params();
            sp.kv.policy = policy(pols[i]);
            sp.ignore_eos = true;
            sp.max_tokens = 40;
            sp.kv.recall.pages = 2;
            sp.kv.recall.every = 1 + i % 2;
            sp.kv.recall.cold_mem_bytes = (size_t)1 << 20;
            CHECK_OK(kvb_batch_add(b[k], &sp, g_ids + 60 * i, 50 + 7 * i, &ids[k][i]));
        }
    }
    struct kvb_model_info mi;
    kvb_model_get_info(g_model, &mi);
    struct kvb_allocator al = {t_malloc, t_free, NULL};
    bool compared[NS] = {false}, dropped[NS] = {false};
    int injected = 0, cold_pages = 0;
    for (int step = 0; step < 60; step++) {
        int32_t adv_twin, failed;
        CHECK_OK(kvb_batch_step(b[1], &adv_twin, &failed));
        if (adv_twin == 0) break;
        for (long at = 1;; at++) {
            struct recall_seq_state before[NS], after[NS];
            for (int i = 0; i < NS; i++) recall_seq_state(b[0], ids[0][i], &before[i]);
            kvb_allocator_set(&al);
            g_calls = 0;
            g_fail_at = at;
            g_count = true;
            int32_t adv;
            kvb_status st = kvb_batch_step(b[0], &adv, &failed);
            g_count = false;
            kvb_allocator_set(NULL);
            if (st == KVB_OK) {
                CHECK_EQ_INT(adv, adv_twin);
                break;
            }
            injected++;
            if (st != KVB_ERR_NOMEM) FAILF("step %d, allocation %ld: status %d (%s)", step, at, (int)st, kvb_last_error());
            for (int i = 0; i < NS; i++) {
                recall_seq_state(b[0], ids[0][i], &after[i]);
                if (!same_recall_state(&before[i], &after[i]))
                    FAILF("step %d: failing allocation %ld changed sequence %d (%s)", step, at, i, kvb_policy_name(pols[i]));
            }
        }
        for (int i = 0; i < NS; i++) {
            struct kvb_cache_stats cs;
            kvb_cache_get_stats(kvb_batch_seq_cache(b[0], ids[0][i]), &cs);
            if (cs.cold_dropped_pages > 0) dropped[i] = true;
            if (dropped[i]) continue;
            const float *la = kvb_batch_logits(b[0], ids[0][i]), *lb = kvb_batch_logits(b[1], ids[1][i]);
            if (!la || !lb) {
                if (la != lb && (la == NULL) != (lb == NULL)) FAILF("step %d: sequence %d has logits in one batch only", step, i);
                continue;
            }
            if (memcmp(la, lb, sizeof(float) * (size_t)mi.n_vocab))
                FAILF("step %d: sequence %d (%s) differs from its twin after injected failures", step, i, kvb_policy_name(pols[i]));
            compared[i] = true;
        }
    }
    for (int i = 0; i < NS; i++) {
        struct kvb_cache_stats cs;
        kvb_cache_get_stats(kvb_batch_seq_cache(b[0], ids[0][i]), &cs);
        cold_pages += (int)cs.cold_pages;
        CHECK(compared[i]);
    }
    CHECK(injected > 0);
    CHECK(cold_pages > 0); /* evictions reached the cold tier: its allocations were in the walk */
    printf("  (%d injected failures; %d cold pages; sequences that dropped a page: %d %d %d %d)\n", injected, cold_pages, dropped[0],
           dropped[1], dropped[2], dropped[3]);
    kvb_batch_free(b[0]);
    kvb_batch_free(b[1]);
}

TEST(sequences_freed_in_random_order_return_every_page) {
    NEED_MODEL();
    struct kvb_batch_params bp = kvb_batch_default_params();
    bp.max_seqs = 24;
    bp.chunk = CHUNK;
    bp.step_tokens = 128;
    bp.kv_pool_bytes = (size_t)64 << 20;
    struct kvb_batch *b;
    CHECK_OK(kvb_batch_init(g_model, &bp, &b));
    int32_t ids[24];
    struct track tr[24];
    for (int i = 0; i < 24; i++) {
        struct kvb_seq_params sp = kvb_seq_default_params();
        sp.kv.policy = policy((enum kvb_policy_id)(i % KVB_POLICY_COUNT));
        sp.ignore_eos = true;
        CHECK_OK(kvb_batch_add(b, &sp, g_ids + 30 * i, 10 + i, &ids[i]));
        memset(&tr[i], 0, sizeof tr[i]);
        tr[i].id = ids[i];
    }
    for (int s = 0; s < 6; s++) CHECK_OK(kvb_batch_step(b, NULL, NULL));
    unsigned rng = 7;
    for (int left = 24; left > 0; left--) {
        rng = rng * 1103515245u + 12345u;
        int k = (int)((rng >> 8) % (unsigned)left), j = -1;
        for (int i = 0; i < 24 && k >= 0; i++)
            if (!tr[i].removed && k-- == 0) j = i;
        CHECK_OK(kvb_batch_remove(b, ids[j]));
        tr[j].removed = true;
        if (!pool_matches(b, tr, 24)) FAILF("after removing %d: pool pages differ from the sequences'", j);
        if (left % 5 == 0) CHECK_OK(kvb_batch_step(b, NULL, NULL));
    }
    struct kvb_batch_stats bs;
    kvb_batch_get_stats(b, &bs);
    CHECK_EQ_INT((int)bs.pool_bytes_in_use, 0);
    CHECK(bs.pool_bytes_peak > 0);
    CHECK_STATUS(kvb_batch_remove(b, ids[0]), KVB_ERR_INVALID);
    kvb_batch_free(b);
}

TEST(admission_and_bad_arguments) {
    NEED_MODEL();
    struct kvb_batch_params bp = kvb_batch_default_params();
    bp.chunk = CHUNK;
    bp.kv_pool_bytes = (size_t)2 << 20;
    struct kvb_batch *b;
    CHECK_OK(kvb_batch_init(g_model, &bp, &b));
    struct kvb_seq_params sp = kvb_seq_default_params(); /* full: needs its whole context */
    sp.n_ctx = 2048;
    const size_t full_min = kvb_batch_seq_min_bytes(b, &sp, 10);
    struct kvb_seq_params bounded = kvb_seq_default_params();
    bounded.kv.policy = policy(KVB_POLICY_STREAMING);
    CHECK(kvb_batch_seq_min_bytes(b, &bounded, 10) < full_min / 4);
    { /* recall: the minimum also holds the recall area, R pages per stream */
        struct kvb_seq_params rb = bounded;
        rb.kv.recall.pages = 3;
        struct kvb_model_info mi;
        kvb_model_get_info(g_model, &mi);
        struct kvb_batch_stats bs;
        kvb_batch_get_stats(b, &bs);
        CHECK_EQ_INT((long long)(kvb_batch_seq_min_bytes(b, &rb, 10) - kvb_batch_seq_min_bytes(b, &bounded, 10)),
                     3LL * mi.n_layer * mi.n_head_kv * (long long)bs.page_bytes);
        /* the pinned span (kv.keep) sits on top of the budget: admission counts 32 more tokens, 2 pages, per stream */
        struct kvb_seq_params kb = bounded;
        kb.kv.keep = 32;
        CHECK_EQ_INT((long long)(kvb_batch_seq_min_bytes(b, &kb, 10) - kvb_batch_seq_min_bytes(b, &bounded, 10)),
                     2LL * mi.n_layer * mi.n_head_kv * (long long)bs.page_bytes);
        /* sizing counts the query statistics: expected-attention's minimum is keydiff's (the same budget, the same
         * pages) plus its statistics, per stream (G + 1) x (d + d^2) floats for the G query heads of a KV head */
        struct kvb_seq_params ea = bounded, kd = bounded;
        ea.kv.policy = policy(KVB_POLICY_EXPECTED_ATTENTION);
        kd.kv.policy = policy(KVB_POLICY_KEYDIFF);
        ea.kv.policy.budget = kd.kv.policy.budget = bounded.kv.policy.budget;
        const long long G = mi.n_head / mi.n_head_kv, d = mi.head_dim;
        CHECK_EQ_INT((long long)(kvb_batch_seq_min_bytes(b, &ea, 10) - kvb_batch_seq_min_bytes(b, &kd, 10)),
                     (long long)mi.n_layer * mi.n_head_kv * (G + 1) * (d + d * d) * 4);
    }
    /* admission: a bounded sequence's minimum, by the formula written here (not
     * kvb_batch_seq_min_bytes): per stream, its budget plus the prompt chunk read
     * before eviction, in pages, plus two spare pages; the pool admits sequences
     * while their minimums fit, so floor(pool pages / the minimum) of them */
    struct kvb_model_info mi;
    kvb_model_get_info(g_model, &mi);
    struct kvb_batch_stats bs;
    kvb_batch_get_stats(b, &bs);
    const long long blk = bp.kv.block_size, chunk = CHUNK < 10 ? CHUNK : 10;
    const long long seq_pages = ((bounded.kv.policy.budget + chunk + blk - 1) / blk + 2) * mi.n_layer * mi.n_head_kv;
    const long long pool_pages = (long long)(bp.kv_pool_bytes / bs.page_bytes);
    CHECK_EQ_INT((long long)bs.pool_bytes_capacity, pool_pages * (long long)bs.page_bytes);
    CHECK_EQ_INT(seq_pages, 6 * 5 * 4); /* stories260K: 5 layers x 4 KV heads, ceil(50 / 16) + 2 pages each */
    CHECK_EQ_INT(pool_pages / seq_pages, 34);
    int32_t id, bad = -5;
    int admitted = 0;
    while (kvb_batch_can_admit(b, &bounded, 10) == KVB_OK && admitted < 100) {
        CHECK_OK(kvb_batch_add(b, &bounded, g_ids, 10, &id));
        admitted++;
    }
    CHECK_EQ_INT(admitted, pool_pages / seq_pages);
    CHECK(strstr(kvb_last_error(), "short") != NULL);
    { /* a pool of exactly 3 minimums admits 3 (a minimum that fills the pool fits); one page less, 2 */
        for (int less = 0; less < 2; less++) {
            struct kvb_batch_params ep = bp;
            ep.kv_pool_bytes = (size_t)(3 * seq_pages - less) * bs.page_bytes;
            struct kvb_batch *e;
            CHECK_OK(kvb_batch_init(g_model, &ep, &e));
            int n = 0;
            while (kvb_batch_can_admit(e, &bounded, 10) == KVB_OK && n < 10) {
                int32_t eid;
                if (kvb_batch_add(e, &bounded, g_ids, 10, &eid) != KVB_OK) break;
                n++;
            }
            kvb_batch_free(e);
            CHECK_EQ_INT(n, 3 - less);
        }
    }
    CHECK_STATUS(kvb_batch_add(b, &sp, &bad, 1, &id), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "out of range") != NULL);
    CHECK_STATUS(kvb_batch_add(b, &sp, g_ids, 0, &id), KVB_ERR_INVALID);
    bp.step_tokens = CHUNK - 1;
    struct kvb_batch *b2 = NULL;
    CHECK_STATUS(kvb_batch_init(g_model, &bp, &b2), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "step_tokens") != NULL);
    { /* one KV configuration: a sequence's rows are the pool's, or it is refused by name */
        struct kvb_batch_stats before, after;
        kvb_batch_get_stats(b, &before);
        struct kvb_seq_params bf = kvb_seq_default_params();
        bf.kv.kv_dtype = KVB_DTYPE_BF16;
        CHECK_STATUS(kvb_batch_add(b, &bf, g_ids, 4, &id), KVB_ERR_INVALID);
        CHECK(strstr(kvb_last_error(), "kv.kv_dtype bf16") != NULL && strstr(kvb_last_error(), "the batch's f16") != NULL);
        struct kvb_seq_params b32 = kvb_seq_default_params();
        b32.kv.block_size = 32;
        CHECK_STATUS(kvb_batch_add(b, &b32, g_ids, 4, &id), KVB_ERR_INVALID);
        CHECK(strstr(kvb_last_error(), "kv.block_size 32") != NULL);
        kvb_batch_get_stats(b, &after);
        CHECK_EQ_INT(after.n_seqs, before.n_seqs);
        /* a bf16 batch gives its sequences bf16 rows, and its policy as their default */
        struct kvb_batch_params qp = bp;
        qp.step_tokens = CHUNK;
        qp.kv.kv_dtype = KVB_DTYPE_BF16;
        qp.kv.policy = policy(KVB_POLICY_H2O);
        struct kvb_batch *bq = NULL;
        CHECK_OK(kvb_batch_init(g_model, &qp, &bq));
        const struct kvb_seq_params dq = kvb_batch_seq_default_params(bq);
        CHECK(dq.kv.kv_dtype == KVB_DTYPE_BF16 && dq.kv.policy.id == KVB_POLICY_H2O && dq.kv.policy.budget == qp.kv.policy.budget);
        CHECK_OK(kvb_batch_add(bq, &dq, g_ids, 4, &id));
        struct kvb_cache_params cq;
        kvb_cache_get_params(kvb_batch_seq_cache(bq, id), &cq);
        CHECK(cq.kv.kv_dtype == KVB_DTYPE_BF16 && cq.kv.policy.id == KVB_POLICY_H2O);
        kvb_batch_free(bq);
        const struct kvb_kv_layer sliding = {0, policy(KVB_POLICY_WINDOW)};
        qp.kv.layers = &sliding;
        qp.kv.n_layers = 1;
        CHECK_STATUS(kvb_batch_init(g_model, &qp, &bq), KVB_ERR_UNSUPPORTED);
        CHECK(strstr(kvb_last_error(), "kv.layers") != NULL);
    }
    kvb_batch_free(b);
}

/* Runs the batch until sequence id is DONE; returns the tokens it sampled
 * (out[0..*n)) and the logits of its last sample in lg. */
static int run_turn(struct kvb_batch *b, int32_t id, int32_t *out, int *n, float *lg, int32_t V) {
    *n = 0;
    for (int step = 0; step < 400; step++) {
        int32_t adv, failed;
        if (kvb_batch_step(b, &adv, &failed) != KVB_OK) return 0;
        struct kvb_seq_info si;
        if (kvb_batch_seq_info(b, id, &si) != KVB_OK) return 0;
        if (si.n_generated > *n) {
            out[(*n)++] = si.last_token;
            if (lg) memcpy(lg, kvb_batch_logits(b, id), sizeof(float) * (size_t)V);
        }
        if (si.state == KVB_SEQ_DONE) return 1;
    }
    return 0;
}

/* Steps the batch until the nf sequences ids are all DONE (at most 400
 * steps): sequence i's new tokens go to got[i * cap + n_got[i]++] and the
 * logits of its last sample to lg + i * V. 0 when a call fails. */
static int step_forks(struct kvb_batch *b, const int32_t *ids, int nf, int32_t *got, int cap, int32_t *n_got, float *lg, int32_t V) {
    for (int step = 0; step < 400; step++) {
        int32_t adv, failed;
        if (kvb_batch_step(b, &adv, &failed) != KVB_OK) return 0;
        int done = 0;
        for (int i = 0; i < nf; i++) {
            struct kvb_seq_info si;
            if (kvb_batch_seq_info(b, ids[i], &si) != KVB_OK) return 0;
            if (si.n_generated > n_got[i]) {
                got[(size_t)i * (size_t)cap + (size_t)n_got[i]++] = si.last_token;
                memcpy(lg + (size_t)i * V, kvb_batch_logits(b, ids[i]), sizeof(float) * (size_t)V);
            }
            done += si.state == KVB_SEQ_DONE;
        }
        if (done == nf) return 1;
    }
    return 1;
}

/* Two turns on one sequence equal a lone context that reads the first
 * prompt, its answer and the second prompt; a saved and reloaded session
 * (in a new batch) continues with the same tokens and bit-identical logits;
 * every damaged image is refused and leaves the batch unchanged. */
TEST(sessions_continue_save_and_load) {
    NEED_MODEL();
    struct kvb_model_info mi;
    kvb_model_get_info(g_model, &mi);
    const int32_t V = mi.n_vocab;
    /* the last two with recall: the session image holds the cold tier */
    const enum kvb_policy_id pols[] = {KVB_POLICY_FULL, KVB_POLICY_STREAMING, KVB_POLICY_H2O, KVB_POLICY_SNAPKV, KVB_POLICY_STREAMING, KVB_POLICY_H2O};
    float *lg_a = malloc(sizeof(float) * (size_t)V), *lg_b = malloc(sizeof(float) * (size_t)V), *want = malloc(sizeof(float) * (size_t)V);
    for (size_t k = 0; k < sizeof pols / sizeof pols[0]; k++) {
        const bool with_recall = k >= 4;
        if (with_recall && g_no_recall) continue; /* a hybrid model: recall is refused on its recurrent layers */
        struct kvb_batch_params bp = kvb_batch_default_params();
        bp.chunk = CHUNK;
        bp.step_tokens = 2 * CHUNK;
        bp.kv_pool_bytes = (size_t)16 << 20;
        struct kvb_seq_params sp = kvb_seq_default_params();
        sp.kv.policy = policy(pols[k]);
        sp.max_tokens = 8;
        sp.ignore_eos = true;
        sp.sampler.temp = 0;
        if (with_recall) sp.kv.recall = (struct kvb_recall_params){2, 1, (size_t)1 << 20, NULL, KVB_RECALL_BOUNDS};
        struct kvb_batch *a, *b;
        CHECK_OK(kvb_batch_init(g_model, &bp, &a));
        CHECK_OK(kvb_batch_init(g_model, &bp, &b));
        int32_t ia, ib, other, g1[16], g2a[16], g2b[16], turn2[40];
        int n1, n1b, n2a, n2b;
        CHECK_OK(kvb_batch_add(a, &sp, g_ids, 50, &ia));
        CHECK_OK(kvb_batch_add(a, &sp, g_ids + 300, 20, &other)); /* company in the same steps */
        CHECK(run_turn(a, ia, g1, &n1, lg_a, V));
        CHECK_EQ_INT(n1, 8);
        /* the same first turn in b, then saved, removed, loaded back */
        CHECK_OK(kvb_batch_add(b, &sp, g_ids, 50, &ib));
        CHECK(run_turn(b, ib, g2b, &n1b, lg_b, V));
        void *img;
        size_t len;
        CHECK_OK(kvb_batch_seq_save(b, ib, &img, &len));
        CHECK_OK(kvb_batch_remove(b, ib));
        struct kvb_batch_stats before, after;
        kvb_batch_get_stats(b, &before);
        CHECK_EQ_INT((int)before.pool_bytes_in_use, 0);
        /* damage: truncations and flipped bytes are all refused, nothing held */
        uint8_t *bad = malloc(len);
        for (size_t at = 0; at < len; at += 1 + len / 97) {
            memcpy(bad, img, len);
            bad[at] ^= 0x5a;
            int32_t x;
            kvb_status st = kvb_batch_seq_load(b, &sp, bad, len, &x);
            if (st == KVB_OK) FAILF("a session image with byte %zu flipped was accepted", at);
            st = kvb_batch_seq_load(b, &sp, img, at, &x);
            if (st == KVB_OK) FAILF("a session image cut to %zu of %zu bytes was accepted", at, len);
        }
        free(bad);
        kvb_batch_get_stats(b, &after);
        CHECK_EQ_INT(after.n_seqs, 0);
        CHECK_EQ_INT((int)after.pool_bytes_in_use, 0);
        CHECK_OK(kvb_batch_seq_load(b, &sp, img, len, &ib));
        kvb_buffer_free(img);
        if (with_recall) { /* the cold tier came back with the image */
            struct kvb_cache_stats ca, cb;
            kvb_cache_get_stats(kvb_batch_seq_cache(a, ia), &ca);
            kvb_cache_get_stats(kvb_batch_seq_cache(b, ib), &cb);
            CHECK(cb.cold_pages > 0 && cb.cold_pages == ca.cold_pages && cb.cold_staged_tokens == ca.cold_staged_tokens &&
                  cb.recall_bytes == ca.recall_bytes);
        }
        struct kvb_seq_info si;
        CHECK_OK(kvb_batch_seq_info(b, ib, &si));
        CHECK(si.state == KVB_SEQ_DONE && si.last_token == g1[7] && si.n_past == 50 + 7);
        /* turn 2: the pending token, then new text */
        turn2[0] = g1[n1 - 1];
        memcpy(turn2 + 1, g_ids + 600, sizeof(int32_t) * 30);
        sp.max_tokens = 6;
        CHECK_OK(kvb_batch_continue(a, ia, &sp, turn2, 31));
        CHECK_OK(kvb_batch_continue(b, ib, &sp, turn2, 31));
        CHECK_STATUS(kvb_batch_continue(b, ib, &sp, turn2, 31), KVB_ERR_INVALID); /* mid-turn */
        CHECK(run_turn(a, ia, g2a, &n2a, lg_a, V));
        CHECK(run_turn(b, ib, g2b, &n2b, lg_b, V));
        CHECK_EQ_INT(n2a, 6);
        CHECK_EQ_INT(n2b, 6);
        for (int i = 0; i < 6; i++)
            if (g2a[i] != g2b[i]) FAILF("%s: the reloaded session's token %d is %d, the uninterrupted one's %d", kvb_policy_name(pols[k]), i, (int)g2b[i], (int)g2a[i]);
        CHECK(memcmp(lg_a, lg_b, sizeof(float) * (size_t)V) == 0);
        /* a lone context: prompt, the first answer, then the second prompt */
        struct kvb_context_params cp = kvb_context_default_params();
        cp.kv.policy = sp.kv.policy;
        cp.kv.recall = sp.kv.recall;
        cp.chunk = CHUNK;
        cp.kv_pool_bytes = (size_t)16 << 20;
        struct kvb_context *c;
        CHECK_OK(kvb_context_init(g_model, &cp, &c));
        CHECK_OK(kvb_context_prompt(c, g_ids, 50, want, false));
        for (int i = 0; i < n1 - 1; i++) CHECK_OK(kvb_context_eval(c, &g1[i], 1, want, false));
        CHECK_OK(kvb_context_prompt(c, turn2, 31, want, false));
        for (int i = 0; i < n2a - 1; i++) CHECK_OK(kvb_context_eval(c, &g2a[i], 1, want, false));
        double worst = 0;
        for (int32_t v = 0; v < V; v++) worst = fmax(worst, fabs((double)want[v] - (double)lg_a[v]));
        if (worst > 1e-4) FAILF("%s%s: the second turn's logits differ from a lone context's by %g", kvb_policy_name(pols[k]), with_recall ? " with recall" : "", worst);
        kvb_context_free(c);
        kvb_batch_free(a);
        kvb_batch_free(b);
    }
    free(lg_a);
    free(lg_b);
    free(want);
}

/* Sessions forked from a sequence whose instructions are pinned (kv.keep 48:
 * 3 whole pages of 16 a stream) keep sharing those pages after each talks
 * past its budget of 40 (h2o, streaming; an 80-token turn read in chunks of
 * 64 evicts more than two pages at once, so a fork may compact and copies
 * every other page it shares first): every fork's tokens and last
 * logits equal those of a session that read the instructions itself, and
 * once all are DONE the pool still holds the span's pages once
 * (pool_bytes_shared: 3 pages a stream); without a span (keep 0) every
 * shared page was copied when a fork could compact, as before. */
TEST(forks_keep_a_pinned_span_shared_past_their_budget) {
    NEED_MODEL();
    struct kvb_model_info mi;
    kvb_model_get_info(g_model, &mi);
    const int32_t V = mi.n_vocab;
    enum { NF = 4, GEN = 24, KEEP = 48, PROMPT = 50, TURN = 80 };
    float *lg = malloc(sizeof(float) * (size_t)V * NF), *want = malloc(sizeof(float) * (size_t)V);
    static const enum kvb_policy_id pids[] = {KVB_POLICY_H2O, KVB_POLICY_STREAMING};
    for (size_t pi = 0; pi < 2 * sizeof pids / sizeof *pids; pi++) {
        const enum kvb_policy_id pid = pids[pi / 2];
        const int keep = pi % 2 ? KEEP : 0;
        struct kvb_batch_params bp = kvb_batch_default_params();
        bp.chunk = 64; /* a turn's chunk evicts more than two pages: a fork may compact */
        bp.kv_pool_bytes = (size_t)16 << 20;
        struct kvb_seq_params sp = kvb_seq_default_params(), pre;
        sp.kv.policy = policy(pid);
        sp.kv.keep = keep;
        sp.ignore_eos = true;
        sp.sampler.temp = 0;
        pre = sp;
        pre.max_tokens = 1;
        sp.max_tokens = GEN;
        struct kvb_batch *b, *r;
        CHECK_OK(kvb_batch_init(g_model, &bp, &b));
        CHECK_OK(kvb_batch_init(g_model, &bp, &r));
        int32_t src, ids[NF], got[NF][GEN], n_got[NF] = {0}, ref[GEN + 4], tmp[4];
        int n, n_ref;
        CHECK_OK(kvb_batch_add(b, &pre, g_ids, PROMPT, &src));
        CHECK(run_turn(b, src, tmp, &n, NULL, V));
        for (int i = 0; i < NF; i++) CHECK_OK(kvb_batch_seq_fork(b, src, &sp, &ids[i]));
        for (int i = 0; i < NF; i++) CHECK_OK(kvb_batch_continue(b, ids[i], &sp, g_ids + 100 + 40 * i, TURN));
        CHECK(step_forks(b, ids, NF, &got[0][0], (int)(sizeof got[0] / sizeof got[0][0]), n_got, lg, V));
        struct kvb_batch_stats st;
        kvb_batch_get_stats(b, &st);
        const size_t span = (size_t)(KEEP / 16) * mi.n_layer * mi.n_head_kv * st.page_bytes;
        if (st.pool_bytes_shared != (keep ? span : 0))
            FAILF("%s keep %d: %zu bytes shared after the forks passed their budget, want %zu", kvb_policy_name(pid), keep, st.pool_bytes_shared,
                  keep ? span : (size_t)0);
        for (int i = 0; i < NF; i++) {
            int32_t own;
            CHECK_OK(kvb_batch_add(r, &pre, g_ids, PROMPT, &own));
            CHECK(run_turn(r, own, tmp, &n, NULL, V));
            CHECK_OK(kvb_batch_continue(r, own, &sp, g_ids + 100 + 40 * i, TURN));
            CHECK(run_turn(r, own, ref, &n_ref, want, V));
            CHECK_EQ_INT(n_got[i], GEN);
            CHECK_EQ_INT(n_ref, GEN);
            if (memcmp(got[i], ref, sizeof(int32_t) * GEN) != 0 || memcmp(lg + (size_t)i * V, want, sizeof(float) * (size_t)V) != 0)
                FAILF("%s keep %d: fork %d differs from the session that read the instructions itself", kvb_policy_name(pid), keep, i);
            CHECK_OK(kvb_batch_remove(r, own));
        }
        CHECK_OK(kvb_batch_remove(b, src));
        for (int i = 0; i < NF; i++) CHECK_OK(kvb_batch_remove(b, ids[i]));
        kvb_batch_get_stats(b, &st);
        CHECK_EQ_INT((int)st.pool_bytes_in_use, 0);
        kvb_batch_free(b);
        kvb_batch_free(r);
    }
    free(lg);
    free(want);
}

/* Sessions forked from one sequence that read a shared prompt (a system
 * prompt) continue exactly as that sequence would have: for every policy,
 * four forks, each continuing with its own tokens in the same steps, give
 * bit for bit the tokens and logits of a batch without forks in which each
 * session read the shared prompt itself, and (but for the snapkv family,
 * which compresses where a prompt ends) of one that read each whole prompt
 * with prompt_split at the shared part's end; right after the forks the pool
 * holds the shared prompt's pages once, and every page comes back. */
/* Fork i's GEN tokens and last logits against a reference run's (n_ref tokens); false: said why. */
static bool same_run(enum kvb_policy_id pid, int i, const int32_t *got, const int32_t *ref, int n_ref, const float *lg, const float *want,
                     int32_t V, const char *what) {
    enum { GEN = 6 };
    if (n_ref != GEN) { printf("  %s: %s run gave %d tokens, want %d\n", kvb_policy_name(pid), what, n_ref, GEN); t_case_failed = 1; return false; }
    for (int t = 0; t < GEN; t++)
        if (got[t] != ref[t]) {
            printf("  %s: fork %d's token %d is %d, %s %d\n", kvb_policy_name(pid), i, t, (int)got[t], what, (int)ref[t]);
            t_case_failed = 1;
            return false;
        }
    if (memcmp(lg, want, sizeof(float) * (size_t)V) != 0) {
        printf("  %s: fork %d's last logits differ from %s\n", kvb_policy_name(pid), i, what);
        t_case_failed = 1;
        return false;
    }
    return true;
}

TEST(forked_sequences_continue_exactly_every_policy) {
    NEED_MODEL();
    struct kvb_model_info mi;
    kvb_model_get_info(g_model, &mi);
    const int32_t V = mi.n_vocab;
    enum { NF = 4, GEN = 6 };
    float *lg = malloc(sizeof(float) * (size_t)V * NF), *want = malloc(sizeof(float) * (size_t)V);
    for (int pid = 0; pid < KVB_POLICY_COUNT; pid++) {
        struct kvb_batch_params bp = kvb_batch_default_params();
        bp.chunk = CHUNK;
        bp.step_tokens = 3 * CHUNK;
        bp.kv_pool_bytes = (size_t)16 << 20;
        struct kvb_seq_params sp = kvb_seq_default_params(), pre;
        sp.kv.policy = policy((enum kvb_policy_id)pid);
        sp.ignore_eos = true;
        sp.sampler.temp = 0;
        pre = sp;
        pre.max_tokens = 1;
        sp.max_tokens = GEN;
        struct kvb_batch *b, *r;
        CHECK_OK(kvb_batch_init(g_model, &bp, &b));
        CHECK_OK(kvb_batch_init(g_model, &bp, &r));
        int32_t src, ids[NF], got[NF][16], n_got[NF], ref[16], n_ref, tmp[4];
        int n;
        const kvb_status ast = kvb_batch_add(b, &pre, g_ids, 60, &src);
        if (pid == KVB_POLICY_KVZIP && ast == KVB_ERR_UNSUPPORTED && strstr(kvb_last_error(), "policy kvzip on a model with")) {
            kvb_batch_free(b); /* refused by name on a hybrid or sliding-window model */
            kvb_batch_free(r);
            continue;
        }
        CHECK_OK(ast);
        CHECK(run_turn(b, src, tmp, &n, NULL, V));
        struct kvb_batch_stats st0, st1;
        kvb_batch_get_stats(b, &st0);
        for (int i = 0; i < NF; i++) CHECK_OK(kvb_batch_seq_fork(b, src, &sp, &ids[i]));
        kvb_batch_get_stats(b, &st1);
        CHECK(st1.pool_bytes_in_use == st0.pool_bytes_in_use); /* nothing copied yet */
        struct kvb_seq_info si;
        CHECK_OK(kvb_batch_seq_info(b, ids[0], &si));
        CHECK(si.state == KVB_SEQ_DONE && !strcmp(si.stop, "forked") && si.n_past == 60);
        for (int i = 0; i < NF; i++) CHECK_OK(kvb_batch_continue(b, ids[i], &sp, g_ids + 100 + 40 * i, 20 + 5 * i));
        CHECK_STATUS(kvb_batch_seq_fork(b, ids[0], &sp, &n), KVB_ERR_INVALID); /* mid-turn */
        /* all four in the same steps; the source stays, DONE */
        for (int i = 0; i < NF; i++) n_got[i] = 0;
        CHECK(step_forks(b, ids, NF, &got[0][0], (int)(sizeof got[0] / sizeof got[0][0]), n_got, lg, V));
        for (int i = 0; i < NF; i++) {
            /* the reference: a sequence of its own reads the shared prompt, then continues */
            int32_t own;
            CHECK_OK(kvb_batch_add(r, &pre, g_ids, 60, &own));
            CHECK(run_turn(r, own, tmp, &n, NULL, V));
            CHECK_OK(kvb_batch_continue(r, own, &sp, g_ids + 100 + 40 * i, 20 + 5 * i));
            CHECK(run_turn(r, own, ref, &n_ref, want, V));
            CHECK_EQ_INT(n_got[i], GEN);
            if (!same_run((enum kvb_policy_id)pid, i, got[i], ref, n_ref, lg + (size_t)i * V, want, V, "the unforked session's")) return;
            CHECK_OK(kvb_batch_remove(r, own));
            /* the whole prompt read with no chunk across the prefix's end (prompt_split) reads the same chunks:
             * the same tokens and logits, but for the snapkv family and kvzip, which compress once, at the end */
            if (pid == KVB_POLICY_SNAPKV || pid == KVB_POLICY_PYRAMIDKV || pid == KVB_POLICY_ADAKV || pid == KVB_POLICY_KVZIP) continue;
            int32_t whole[60 + 40];
            memcpy(whole, g_ids, sizeof(int32_t) * 60);
            memcpy(whole + 60, g_ids + 100 + 40 * i, sizeof(int32_t) * (size_t)(20 + 5 * i));
            struct kvb_seq_params ssp = sp;
            ssp.prompt_split = 60;
            CHECK_OK(kvb_batch_add(r, &ssp, whole, 60 + 20 + 5 * i, &own));
            CHECK(run_turn(r, own, ref, &n_ref, want, V));
            if (!same_run((enum kvb_policy_id)pid, i, got[i], ref, n_ref, lg + (size_t)i * V, want, V, "the split prompt's")) return;
            CHECK_OK(kvb_batch_remove(r, own));
            ssp.prompt_split = 60 + 20 + 5 * i; /* not inside the prompt */
            CHECK_STATUS(kvb_batch_add(r, &ssp, whole, 60 + 20 + 5 * i, &own), KVB_ERR_INVALID);
        }
        CHECK_OK(kvb_batch_remove(b, src));
        for (int i = 0; i < NF; i++) CHECK_OK(kvb_batch_remove(b, ids[i]));
        kvb_batch_get_stats(b, &st1);
        CHECK_EQ_INT((int)st1.pool_bytes_in_use, 0);
        kvb_batch_free(b);
        kvb_batch_free(r);
    }
    /* a recall sequence is not forked: its cold tier is its own */
    if (!g_no_recall) { /* (a hybrid model refuses recall) */
        struct kvb_batch_params bp = kvb_batch_default_params();
        bp.kv_pool_bytes = (size_t)16 << 20;
        struct kvb_seq_params sp = kvb_seq_default_params();
        sp.kv.policy = policy(KVB_POLICY_STREAMING);
        sp.kv.recall = (struct kvb_recall_params){2, 1, (size_t)1 << 20, NULL, KVB_RECALL_BOUNDS};
        sp.max_tokens = 1;
        struct kvb_batch *b;
        int32_t src, f, tmp[4];
        int n;
        CHECK_OK(kvb_batch_init(g_model, &bp, &b));
        CHECK_OK(kvb_batch_add(b, &sp, g_ids, 30, &src));
        CHECK(run_turn(b, src, tmp, &n, NULL, V));
        CHECK_STATUS(kvb_batch_seq_fork(b, src, &sp, &f), KVB_ERR_UNSUPPORTED);
        CHECK_STATUS(kvb_batch_seq_fork(b, 77, &sp, &f), KVB_ERR_INVALID);
        kvb_batch_free(b);
    }
    free(lg);
    free(want);
}

/* A grammar on one sequence of a batch: every token it samples is one a
 * fresh matcher allows at that point, it ends (end of sequence) only where
 * the grammar may end, its text matches the grammar; the sequence beside it
 * samples exactly what it samples alone; kvb_batch_continue clears it. */
TEST(grammar_constrains_one_sequence) {
    NEED_MODEL();
    const struct kvb_vocab *vocab = kvb_model_vocab(g_model);
    const char *gbnf = "root ::= \"Once\" (\" \" [a-z]+){2,5} \".\"\n";
    struct kvb_grammar *g = NULL;
    struct kvb_grammar_vocab *gv = NULL;
    CHECK_OK(kvb_grammar_parse(gbnf, strlen(gbnf), NULL, &g));
    CHECK_OK(kvb_grammar_vocab_new(vocab, &gv));
    for (uint64_t seed = 1; seed <= 6; seed++) {
        struct kvb_batch_params bp = kvb_batch_default_params();
        bp.chunk = CHUNK;
        bp.kv_pool_bytes = (size_t)16 << 20;
        struct kvb_seq_params sp = kvb_seq_default_params();
        sp.max_tokens = 60;
        sp.sampler.temp = 1.0f;
        sp.sampler.seed = seed;
        struct kvb_batch *b, *alone;
        CHECK_OK(kvb_batch_init(g_model, &bp, &b));
        CHECK_OK(kvb_batch_init(g_model, &bp, &alone));
        int32_t ia, ib, ic;
        struct kvb_matcher *m = NULL;
        CHECK_OK(kvb_matcher_new(g, gv, &m));
        CHECK_OK(kvb_batch_add(b, &sp, g_ids, 30, &ia));
        CHECK_OK(kvb_batch_add(b, &sp, g_ids + 100, 25, &ib));
        CHECK_OK(kvb_batch_set_matcher(b, ia, m));
        CHECK_OK(kvb_batch_add(alone, &sp, g_ids + 100, 25, &ic));
        int32_t ta[64], tb[64], tc[64];
        int na = 0, nb = 0, nc = 0;
        bool done_a = false, done_b = false;
        for (int step = 0; step < 400 && !(done_a && done_b); step++) {
            int32_t adv, failed;
            CHECK_OK(kvb_batch_step(b, &adv, &failed));
            struct kvb_seq_info si;
            CHECK_OK(kvb_batch_seq_info(b, ia, &si));
            if (si.n_generated > na) ta[na++] = si.last_token;
            done_a = si.state == KVB_SEQ_DONE;
            CHECK_OK(kvb_batch_seq_info(b, ib, &si));
            if (si.n_generated > nb) tb[nb++] = si.last_token;
            done_b = si.state == KVB_SEQ_DONE;
        }
        CHECK(done_a && done_b);
        CHECK(run_turn(alone, ic, tc, &nc, NULL, 0));
        /* the neighbour is untouched by the grammar */
        CHECK_EQ_INT(nb, nc);
        for (int i = 0; i < nb; i++) CHECK_EQ_INT(tb[i], tc[i]);
        /* replayed through a fresh matcher: each token allowed; the last one an end where the grammar may end */
        struct kvb_matcher *r = NULL;
        CHECK_OK(kvb_matcher_new(g, gv, &r));
        char text[1024];
        size_t tl = 0;
        for (int i = 0; i < na; i++) {
            if (!kvb_matcher_allows(r, ta[i])) FAILF("seed %llu: token %d (%d) not allowed by the grammar", (unsigned long long)seed, i, (int)ta[i]);
            if (kvb_vocab_is_eog(vocab, ta[i])) {
                CHECK(i == na - 1 && kvb_matcher_can_end(r));
                break;
            }
            CHECK_OK(kvb_matcher_accept(r, ta[i]));
            tl += kvb_vocab_token_bytes(vocab, ta[i], false, text + tl, sizeof text - 1 - tl);
        }
        text[tl] = 0;
        CHECK(kvb_vocab_is_eog(vocab, ta[na - 1]));
        CHECK(!strncmp(text, "Once ", 5) && text[tl - 1] == '.');
        struct kvb_matcher *chk = NULL;
        CHECK_OK(kvb_matcher_new(g, gv, &chk));
        CHECK_OK(kvb_matcher_accept_bytes(chk, text, tl));
        CHECK(kvb_matcher_can_end(chk));
        kvb_matcher_free(chk);
        kvb_matcher_free(r);
        /* a new turn runs free: the matcher was cleared */
        struct kvb_seq_info si;
        CHECK_OK(kvb_batch_seq_info(b, ia, &si));
        CHECK_OK(kvb_batch_continue(b, ia, &sp, &si.last_token, 1));
        kvb_matcher_free(m); /* the batch holds no pointer to it now */
        CHECK(run_turn(b, ia, ta, &na, NULL, 0));
        kvb_batch_free(b);
        kvb_batch_free(alone);
    }
    kvb_grammar_vocab_free(gv);
    kvb_grammar_free(g);
}

/* ---- stall-free steps ---- */

/* The fit finds t = 40 + 3R (R: a step's rows) from steps of varied sizes,
 * predicts a step, gives the budget (target - a) / r clamped to [min, max],
 * keeps its fit through steps of one size, and follows the machine when the
 * cost changes. */
TEST(step_cost_fit_and_budget) {
    struct kvb_step_cost c;
    memset(&c, 0, sizeof c);
    CHECK_EQ_INT(kvb_step_cost_budget(&c, 100, 16, 512), 16); /* no fit: the minimum */
    CHECK(kvb_step_cost_predict(&c, 10) == 0);
    for (int i = 0; i < 5; i++) kvb_step_cost_observe(&c, 0, 40); /* steps of one size: no slope yet */
    CHECK_EQ_INT(kvb_step_cost_budget(&c, 100, 16, 512), 16);
    CHECK(kvb_step_cost_predict(&c, 10) == 0);
    static const int32_t P[] = {0, 64, 0, 16, 200, 0, 32, 128, 0, 48};
    for (int i = 0; i < 40; i++) kvb_step_cost_observe(&c, P[i % 10], 40 + 3.0 * P[i % 10]);
    CHECK(fabs(c.a_ms - 40) < 1e-6 && fabs(c.r_ms - 3) < 1e-6);
    CHECK_EQ_INT(kvb_step_cost_budget(&c, 100, 16, 512), 20);   /* (100 - 40) / 3 */
    CHECK(fabs(kvb_step_cost_predict(&c, 4) - 52) < 1e-6);       /* four decoders alone */
    /* what kvb_batch_step asks next to 4 decoders with step_target_x 4: rows (4 * 52 - 40) / 3 = 56, 52 of them prompt */
    CHECK_EQ_INT(kvb_step_cost_budget(&c, 4 * kvb_step_cost_predict(&c, 4), 4, 512), 56);
    CHECK_EQ_INT(kvb_step_cost_budget(&c, 100, 0, 10), 10);     /* step_tokens caps it */
    CHECK_EQ_INT(kvb_step_cost_budget(&c, 30, 16, 512), 16);     /* below a decode step: the minimum */
    CHECK_EQ_INT(kvb_step_cost_budget(&c, 30, 0, 512), 0);
    CHECK_EQ_INT(kvb_step_cost_budget(&c, 1e9, 16, 512), 512);
    CHECK_EQ_INT(kvb_step_cost_budget(&c, 100, 600, 512), 512); /* min above max: max */
    for (int i = 0; i < 200; i++) kvb_step_cost_observe(&c, 16, 88); /* one size: the slope stands, the intercept follows */
    CHECK(fabs(c.r_ms - 3) < 1e-3 && fabs(c.a_ms - 40) < 1.0);
    for (int i = 0; i < 200; i++) kvb_step_cost_observe(&c, P[i % 10], 80 + 6.0 * P[i % 10]); /* a slower machine */
    CHECK(fabs(c.a_ms - 80) < 0.5 && fabs(c.r_ms - 6) < 0.05);
    CHECK_EQ_INT(kvb_step_cost_budget(&c, 3 * c.a_ms, 16, 512), 26); /* 3x the decode step: (240 - 80) / 6 */
    kvb_step_cost_observe(&c, 10, -1); /* a clock that went back: ignored */
    kvb_step_cost_observe(&c, -1, 5);
    CHECK(fabs(c.a_ms - 80) < 0.5);
    kvb_step_cost_observe(NULL, 1, 1);
    CHECK_EQ_INT(kvb_step_cost_budget(NULL, 1, 2, 3), 2);
}

/* A target no step can meet: prompts read prompt_min_rows (5) a step next
 * to the decoders, cut below CHUNK where the cache cannot evict, whole
 * chunks where it can; every policy still equals a lone context. */
TEST(stall_free_steps_equal_single_every_policy) {
    NEED_MODEL();
    struct kvb_recall_params none = {0};
    g_eq_target_ms = 1e-3f;
    g_eq_min_rows = 5;
    g_eq_cuts = 0;
    equality_run(g_model, NS_MAX, KVB_POLICY_COUNT, none);
    g_eq_target_ms = 0;
    if (!g_eq_cuts) FAILF("no prompt was read in pieces smaller than the chunk");
    struct kvb_recall_params rec = {0};
    rec.pages = 2;
    rec.every = 1;
    rec.cold_mem_bytes = (size_t)1 << 20;
    g_eq_target_ms = 1e-3f;
    g_eq_share = 0.5f; /* and some steps carry their decoders alone */
    equality_run(g_model, NS_MAX, KVB_POLICY_COUNT, rec);
    g_eq_target_ms = 0;
    g_eq_share = 0;
}

/* The recurrent layers' chunked forms (Gated DeltaNet, Mamba-2) round by
 * their chunks of 64 from a call's first token, so a hybrid's prompt read
 * in pieces under a step target must end each piece where the lone
 * context's call of `chunk` rows ends or on one of its 64-token
 * boundaries: then the sequence keeps the lone context's bits. A decoder
 * makes the target bind; prompt_min_rows 70 lets the oldest prompt take 64
 * rows a step (the cut), and the logits at the prompt's end and after must
 * equal a lone context's at chunk 128 exactly. Cutting at 70 rows (no
 * alignment) misses. */
TEST(stall_free_recurrent_pieces_keep_single_bits) {
    NEED_MODEL();
    static const char *const shapes[] = {"tiny-qwen35", "tiny-granitehybrid"};
    const int32_t chunk = 128, n_prompt = 300, n_gen = 4;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        struct kvb_model *m;
        void *owned;
        CHECK_OK(kvb_model_make(shapes[k], 5, NULL, &m, &owned));
        struct kvb_model_info mi;
        kvb_model_get_info(m, &mi);
        const int32_t V = mi.n_vocab;
        struct kvb_batch_params bp = kvb_batch_default_params();
        bp.n_threads = 2;
        bp.max_seqs = 4;
        bp.chunk = chunk;
        bp.step_tokens = 2 * chunk;
        bp.kv_pool_bytes = (size_t)64 << 20;
        bp.step_target_ms = 1e-3f;
        bp.prompt_min_rows = 70;
        struct kvb_batch *b;
        CHECK_OK(kvb_batch_init(m, &bp, &b));
        struct kvb_seq_params sp = kvb_seq_default_params();
        sp.ignore_eos = true;
        sp.sampler.temp = 0;
        sp.kv.policy = kvb_policy_default_params(KVB_POLICY_FULL);
        sp.max_tokens = 200;
        int32_t dec, big, adv, failed;
        CHECK_OK(kvb_batch_add(b, &sp, g_ids + 900, 3, &dec)); /* a decoder: the target binds */
        CHECK_OK(kvb_batch_step(b, &adv, &failed));
        sp.max_tokens = n_gen;
        CHECK_OK(kvb_batch_add(b, &sp, g_ids + 10, n_prompt, &big));
        float *got = calloc((size_t)(n_gen + 1) * (size_t)V, sizeof(float)), *want = calloc((size_t)(n_gen + 1) * (size_t)V, sizeof(float));
        int32_t fed[8], n_lg = 0, pieces = 0, cuts = 0;
        for (int step = 0; step < 100 && n_lg < n_gen; step++) {
            struct kvb_seq_info si;
            CHECK_OK(kvb_batch_seq_info(b, big, &si));
            const int32_t before = si.n_prompt_done;
            CHECK_OK(kvb_batch_step(b, &adv, &failed));
            CHECK_OK(kvb_batch_seq_info(b, big, &si));
            if (si.n_prompt_done > before) {
                pieces++;
                cuts += si.n_prompt_done < n_prompt && si.n_prompt_done % chunk != 0;
                if ((si.n_prompt_done - before) % 64 && si.n_prompt_done < n_prompt && si.n_prompt_done % chunk)
                    FAILF("%s: a piece of %d rows ends at %d, off the lone context's 64-row chunks", shapes[k], (int)(si.n_prompt_done - before),
                          (int)si.n_prompt_done);
            }
            if (si.n_generated > n_lg) {
                memcpy(got + (size_t)n_lg * V, kvb_batch_logits(b, big), sizeof(float) * (size_t)V);
                fed[n_lg++] = si.last_token;
            }
        }
        kvb_batch_free(b);
        if (!cuts) FAILF("%s: the prompt was never read in a piece smaller than the chunk (%d pieces)", shapes[k], (int)pieces);
        struct kvb_context_params cp = kvb_context_default_params();
        cp.kv.policy = sp.kv.policy;
        cp.chunk = chunk;
        cp.kv_pool_bytes = (size_t)64 << 20;
        struct kvb_context *c;
        CHECK_OK(kvb_context_init(m, &cp, &c));
        CHECK_OK(kvb_context_prompt(c, g_ids + 10, n_prompt, want, false));
        for (int32_t i = 0; i + 1 < n_lg; i++) CHECK_OK(kvb_context_eval(c, &fed[i], 1, want + (size_t)(i + 1) * V, false));
        kvb_context_free(c);
        size_t diff = 0;
        for (size_t i = 0; i < (size_t)n_lg * (size_t)V; i++) diff += got[i] != want[i];
        if (n_lg != n_gen || diff) FAILF("%s: %d of %d logits differ from the lone context's (%d tokens sampled, %d pieces)", shapes[k], (int)diff,
                                         (int)(n_lg * V), (int)n_lg, (int)pieces);
        free(got);
        free(want);
        kvb_model_make_free(m, owned);
        if (t_case_failed) return;
    }
}

/* A batch of two threads and a 64 MiB pool with the given steps and
 * target, and greedy sequence parameters that ignore EOS. */
static struct kvb_batch *stall_free_batch(int32_t max_seqs, int32_t chunk, int32_t step_tokens, float target_ms, float target_x,
                                          int32_t min_rows, struct kvb_seq_params *sp) {
    struct kvb_batch_params bp = kvb_batch_default_params();
    bp.n_threads = 2;
    bp.max_seqs = max_seqs;
    bp.chunk = chunk;
    bp.step_tokens = step_tokens;
    bp.kv_pool_bytes = (size_t)64 << 20;
    bp.step_target_ms = target_ms;
    bp.step_target_x = target_x;
    bp.prompt_min_rows = min_rows;
    struct kvb_batch *b = NULL;
    if (kvb_batch_init(g_model, &bp, &b) != KVB_OK) return NULL;
    *sp = kvb_seq_default_params();
    sp->ignore_eos = true;
    sp->sampler.temp = 0;
    return b;
}

/* Each step's prompt rows are the ones kvb_step_cost gives for the decoders
 * at hand: before every step the fit is read (kvb_batch_stats.step_cost),
 * the rows the oldest prompt should take are computed with the pure
 * functions (x times the decode-only step of n decoders, a + r n), and the
 * step must take exactly that many. Decoders join along the way, so steps
 * differ in size and the fit has a slope. The test fails unless some step's
 * budget differs from what a target of x * a (blind to the decoders) would
 * give, so it cannot pass on the clamps alone. The fit is measured, so on a
 * loaded machine a run may read the prompt in two steps or never need the
 * decoders' count (seen here once, beside make asan): such a run checks every step all
 * the same and is tried again, up to three times. */
static void budget_follows_decoders_run(int32_t *steps_out, int32_t *told_out) {
    const int32_t chunk = 512, step_tokens = 1024;
    const int32_t min_rows = 2;
    const double x = 1.5;
    struct kvb_seq_params sp;
    struct kvb_batch *b = stall_free_batch(16, chunk, step_tokens, 0, (float)x, min_rows, &sp);
    if (!b) FAILF("batch: %s", kvb_last_error());
    sp.max_tokens = 80;
    sp.n_ctx = 512;
    int32_t id, adv, failed, joined = 0, told = 0, steps = 0;
    /* steps of 4 (the first, not observed), 50 and 150 prompt rows alone give the fit its slope */
    static const int32_t warm[] = {4, 50, 150};
    struct kvb_seq_params once = sp;
    once.max_tokens = 1;
    for (int i = 0; i < 3; i++) {
        CHECK_OK(kvb_batch_add(b, &once, g_ids + 200 * i, warm[i], &id));
        CHECK_OK(kvb_batch_step(b, &adv, &failed));
    }
    for (int i = 0; i < 6; i++) CHECK_OK(kvb_batch_add(b, &sp, g_ids + 700 + 10 * i, 3, &id)); /* six decoders */
    CHECK_OK(kvb_batch_step(b, &adv, &failed));
    int32_t big;
    CHECK_OK(kvb_batch_add(b, &sp, g_ids + 40, 400, &big));
    for (;; steps++) {
        struct kvb_seq_info si;
        CHECK_OK(kvb_batch_seq_info(b, big, &si));
        if (si.n_prompt_done == si.n_prompt || steps > 2000) break;
        if (steps % 3 == 0 && joined < 4) { /* a decoder joins (its 3-token prompt reads behind the big one) */
            CHECK_OK(kvb_batch_add(b, &sp, g_ids + 500 + 10 * joined, 3, &id));
            joined++;
        }
        struct kvb_batch_stats st;
        kvb_batch_get_stats(b, &st);
        int32_t n_dec = 0;
        for (int32_t q = 0; q < 16; q++) {
            struct kvb_seq_info qi;
            if (kvb_batch_seq_info(b, q, &qi) == KVB_OK && qi.state == KVB_SEQ_DECODE) n_dec++;
        }
        int32_t want = KVB_MIN(chunk, si.n_prompt - si.n_prompt_done);
        if (n_dec > 0) {
            const int32_t room = step_tokens - n_dec;
            const int32_t left = kvb_step_cost_budget(&st.step_cost, x * kvb_step_cost_predict(&st.step_cost, n_dec), n_dec, n_dec + room) - n_dec;
            const int32_t blind = kvb_step_cost_budget(&st.step_cost, x * st.step_cost.a_ms, 0, room);
            told += left != blind && KVB_MAX(left, min_rows) < want;
            want = KVB_MIN(want, KVB_MIN(room, KVB_MAX(left, min_rows)));
        }
        const int32_t before = si.n_prompt_done;
        CHECK_OK(kvb_batch_step(b, &adv, &failed));
        CHECK_OK(kvb_batch_seq_info(b, big, &si));
        if (si.n_prompt_done - before != want) {
            FAILF("step %d, %d decoders, fit a %.4f r %.6f: the prompt read %d rows, want %d", (int)steps, (int)n_dec, st.step_cost.a_ms,
                  st.step_cost.r_ms, (int)(si.n_prompt_done - before), (int)want);
        }
    }
    CHECK(steps <= 2000);
    *steps_out = steps;
    *told_out = told;
    kvb_batch_free(b);
}

TEST(stall_free_budget_follows_decoders) {
    NEED_MODEL();
    int32_t steps = 0, told = 0;
    for (int attempt = 0; attempt < 3 && !t_case_failed && (steps <= 2 || !told); attempt++) budget_follows_decoders_run(&steps, &told);
    if (t_case_failed) return;
    CHECK(steps > 2);
    if (!told) FAILF("no step's budget told the decoders' count apart (%d steps, 3 runs): the test checked only clamps", (int)steps);
}

/* Next to four decoders and under a target no step meets, a 70-token
 * prompt still reads prompt_min_rows a step (oldest first), and the
 * decoders advance every step; parameters out of range are refused. */
TEST(stall_free_no_starvation_and_params) {
    NEED_MODEL();
    struct kvb_seq_params sp;
    struct kvb_batch *b = stall_free_batch(8, CHUNK, 3 * CHUNK, 1e-3f, 0, 7, &sp);
    if (!b) FAILF("batch: %s", kvb_last_error());
    int32_t dec[4], pr, pr2, adv, failed;
    for (int i = 0; i < 4; i++) CHECK_OK(kvb_batch_add(b, &sp, g_ids + 10 * i, 5, &dec[i]));
    CHECK_OK(kvb_batch_step(b, &adv, &failed)); /* no decoders yet: their prompts at once */
    CHECK_EQ_INT((int)adv, 4);
    CHECK_OK(kvb_batch_add(b, &sp, g_ids + 300, 70, &pr));
    CHECK_OK(kvb_batch_add(b, &sp, g_ids + 400, 30, &pr2));
    int32_t done = 0;
    int steps = 0;
    for (; done < 70 && steps < 40; steps++) {
        CHECK_OK(kvb_batch_step(b, &adv, &failed));
        struct kvb_seq_info si, si2;
        CHECK_OK(kvb_batch_seq_info(b, pr, &si));
        CHECK_OK(kvb_batch_seq_info(b, pr2, &si2));
        CHECK(si.n_prompt_done - done >= 7 || si.n_prompt_done == 70);
        CHECK_EQ_INT((int)si2.n_prompt_done, 0); /* first come, first served: the newer one waits */
        CHECK_EQ_INT((int)adv, 5);               /* four decoders and the prompt */
        done = si.n_prompt_done;
    }
    CHECK_EQ_INT((int)steps, 10); /* ceil(70 / 7) */
    kvb_batch_free(b);
    struct kvb_batch_params bp = kvb_batch_default_params();
    bp.chunk = CHUNK;
    bp.step_tokens = 3 * CHUNK;
    bp.kv_pool_bytes = (size_t)64 << 20;
    bp.step_target_ms = 1e-3f;
    bp.prompt_min_rows = 7;
    CHECK_OK(kvb_batch_init(g_model, &bp, &b)); /* the parameters above, then one wrong at a time */
    kvb_batch_free(b);
    bp.prompt_min_rows = CHUNK + 1;
    CHECK(kvb_batch_init(g_model, &bp, &b) == KVB_ERR_INVALID);
    bp.prompt_min_rows = 0;
    CHECK(kvb_batch_init(g_model, &bp, &b) == KVB_ERR_INVALID);
    bp.prompt_min_rows = 16;
    bp.step_target_ms = -1;
    CHECK(kvb_batch_init(g_model, &bp, &b) == KVB_ERR_INVALID);
    bp.step_target_ms = 0;
    bp.step_target_x = NAN;
    CHECK(kvb_batch_init(g_model, &bp, &b) == KVB_ERR_INVALID);
}

/* issue 48 survivor 12: the step-cost fit observes every row of a step,
 * the decoders' included (a fit over prompt rows alone takes the decoders
 * into its intercept). Each observed step adds its rows to the decayed sum
 * sp and one to the weight w: a decode-only step of four adds 4, a step of
 * four decoders and a 10-token prompt adds 14. */
TEST(step_cost_fit_observes_decode_rows) {
    NEED_MODEL();
    struct kvb_seq_params sp;
    struct kvb_batch *b = stall_free_batch(8, CHUNK, 3 * CHUNK, 0, 0, 16, &sp);
    if (!b) FAILF("batch: %s", kvb_last_error());
    int32_t id, adv, failed;
    for (int i = 0; i < 4; i++) CHECK_OK(kvb_batch_add(b, &sp, g_ids + 10 * i, 5, &id));
    CHECK_OK(kvb_batch_step(b, &adv, &failed)); /* the first step: not observed */
    struct kvb_batch_stats s0, s1, s2;
    kvb_batch_get_stats(b, &s0);
    CHECK_OK(kvb_batch_step(b, &adv, &failed)); /* four decoders alone */
    CHECK_EQ_INT((int)adv, 4);
    kvb_batch_get_stats(b, &s1);
    CHECK_NEAR(s1.step_cost.w, 0.9 * s0.step_cost.w + 1, 1e-9);
    CHECK_NEAR(s1.step_cost.sp, 0.9 * s0.step_cost.sp + 4, 1e-9);
    CHECK_NEAR(s1.step_cost.spp, 0.9 * s0.step_cost.spp + 16, 1e-9);
    CHECK_OK(kvb_batch_add(b, &sp, g_ids + 300, 10, &id));
    CHECK_OK(kvb_batch_step(b, &adv, &failed)); /* four decoders and a 10-token prompt */
    CHECK_EQ_INT((int)adv, 5);
    kvb_batch_get_stats(b, &s2);
    CHECK_NEAR(s2.step_cost.sp, 0.9 * s1.step_cost.sp + 14, 1e-9);
    CHECK_NEAR(s2.step_cost.spp, 0.9 * s1.step_cost.spp + 196, 1e-9);
    kvb_batch_free(b);
}

/* issue 48 survivor 13: prompt_min_rows may equal the chunk (kvbound serve
 * --chunk 16 gives 16 and 16; --chunk 1 gives 1 and 1); one above is
 * refused by name, as 0 is. */
TEST(prompt_min_rows_equal_to_chunk_accepted) {
    NEED_MODEL();
    struct kvb_batch_params bp = kvb_batch_default_params();
    bp.kv_pool_bytes = (size_t)16 << 20;
    bp.step_target_x = 3.5f;
    static const int32_t chunks[] = {1, 15, 16, 17};
    for (int i = 0; i < 4; i++) {
        struct kvb_batch *b = NULL;
        bp.chunk = chunks[i];
        bp.step_tokens = 64;
        bp.prompt_min_rows = chunks[i];
        CHECK_OK(kvb_batch_init(g_model, &bp, &b));
        kvb_batch_free(b);
        bp.prompt_min_rows = chunks[i] - 1;
        if (bp.prompt_min_rows >= 1) {
            CHECK_OK(kvb_batch_init(g_model, &bp, &b));
            kvb_batch_free(b);
        }
        bp.prompt_min_rows = chunks[i] + 1;
        b = NULL;
        CHECK_STATUS(kvb_batch_init(g_model, &bp, &b), KVB_ERR_INVALID);
        CHECK(b == NULL && strstr(kvb_last_error(), "prompt_min_rows") != NULL);
        bp.prompt_min_rows = 0;
        CHECK_STATUS(kvb_batch_init(g_model, &bp, &b), KVB_ERR_INVALID);
    }
}

/* issue 53: prompt_step_share. Next to four decoders, with a 70-token
 * prompt waiting under a target no step meets (7 rows a step), a step
 * carries prompt rows exactly when the decoders' decayed share of gaps
 * lengthened by prompt rows, this step's included, stays within the cap
 * (an independent count here, decay 0.9); the decoders advance every step,
 * the prompt still finishes, and its steps' share of gaps is the cap's.
 * Share 1 carries prompt rows every step; outside 0..1 is refused by name. */
TEST(prompt_step_share_paces_prompt_steps) {
    NEED_MODEL();
    static const float shares[] = {0.4f, 0.25f, 1.0f};
    for (int si_ = 0; si_ < 3; si_++) {
        const float share = shares[si_];
        struct kvb_batch_params bp = kvb_batch_default_params();
        bp.n_threads = 2;
        bp.max_seqs = 8;
        bp.chunk = CHUNK;
        bp.step_tokens = 3 * CHUNK;
        bp.kv_pool_bytes = (size_t)64 << 20;
        bp.step_target_ms = 1e-3f;
        bp.prompt_min_rows = 7;
        bp.prompt_step_share = share;
        struct kvb_batch *b = NULL;
        CHECK_OK(kvb_batch_init(g_model, &bp, &b));
        struct kvb_seq_params sp = kvb_seq_default_params();
        sp.ignore_eos = true;
        sp.sampler.temp = 0;
        int32_t dec[4], pr, adv, failed;
        for (int i = 0; i < 4; i++) CHECK_OK(kvb_batch_add(b, &sp, g_ids + 10 * i, 5, &dec[i]));
        CHECK_OK(kvb_batch_step(b, &adv, &failed)); /* no decoders yet: the prompts at once (no gaps counted) */
        CHECK_OK(kvb_batch_add(b, &sp, g_ids + 300, 70, &pr));
        double heavy = 0, all = 0;
        int32_t done = 0, steps = 0, with_rows = 0;
        for (; done < 70 && steps < 200; steps++) {
            const bool want_rows = 0.9 * heavy + 4 <= (double)share * (0.9 * all + 4) || share >= 1.0f;
            CHECK_OK(kvb_batch_step(b, &adv, &failed));
            struct kvb_seq_info si;
            CHECK_OK(kvb_batch_seq_info(b, pr, &si));
            const bool got_rows = si.n_prompt_done > done;
            if (got_rows != want_rows)
                FAILF("share %.2f, step %d: the prompt read %d rows, want %s", (double)share, (int)steps, (int)(si.n_prompt_done - done),
                      want_rows ? "7" : "none");
            CHECK_EQ_INT((int)adv, got_rows ? 5 : 4); /* the decoders every step */
            all = 0.9 * all + 4;
            heavy = 0.9 * heavy + (got_rows ? 4 : 0);
            with_rows += got_rows;
            done = si.n_prompt_done;
            if (t_case_failed) break;
        }
        kvb_batch_free(b);
        if (t_case_failed) return;
        CHECK_EQ_INT((int)done, 70);
        CHECK_EQ_INT((int)with_rows, 10); /* ceil(70 / 7) */
        if (share >= 1.0f) CHECK_EQ_INT((int)steps, 10);
        else if (fabs((double)with_rows / steps - share) > 0.1)
            FAILF("share %.2f: %d of %d steps carried prompt rows", (double)share, (int)with_rows, (int)steps);
    }
    struct kvb_batch_params bp = kvb_batch_default_params();
    bp.kv_pool_bytes = (size_t)16 << 20;
    bp.step_target_x = 3.5f;
    static const float bad[] = {-0.1f, 1.5f, NAN};
    for (int i = 0; i < 3; i++) {
        struct kvb_batch *b = NULL;
        bp.prompt_step_share = bad[i];
        CHECK_STATUS(kvb_batch_init(g_model, &bp, &b), KVB_ERR_INVALID);
        CHECK(b == NULL && strstr(kvb_last_error(), "prompt_step_share") != NULL);
    }
}

int main(void) {
    RUN(batch_equals_single_every_policy_with_joins_and_cancels);
    RUN(batch_equals_single_with_recall);
    RUN(batch_equals_single_q8_0_weights);
    RUN(batch_equals_single_every_family);
    RUN(batch_equals_single_quantized_experts);
    RUN(hybrid_models_batch_fork_and_sessions_exact);
    RUN(pool_exhaustion_and_allocation_failures_change_no_cache);
    RUN(allocation_failures_with_recall_change_nothing);
    RUN(sequences_freed_in_random_order_return_every_page);
    RUN(admission_and_bad_arguments);
    RUN(sessions_continue_save_and_load);
    RUN(forked_sequences_continue_exactly_every_policy);
    RUN(forks_keep_a_pinned_span_shared_past_their_budget);
    RUN(grammar_constrains_one_sequence);
    RUN(step_cost_fit_and_budget);
    RUN(stall_free_steps_equal_single_every_policy);
    RUN(stall_free_no_starvation_and_params);
    RUN(stall_free_budget_follows_decoders);
    RUN(stall_free_recurrent_pieces_keep_single_bits);
    RUN(step_cost_fit_observes_decode_rows);      /* issue 48 survivor 12 */
    RUN(prompt_min_rows_equal_to_chunk_accepted); /* issue 48 survivor 13 */
    RUN(prompt_step_share_paces_prompt_steps);    /* issue 53 */
    kvb_buffer_free(g_ids);
    kvb_model_free(g_model);
    return test_summary();
}
