/*
 * test_fork.c — copy-on-write forks (kvb_cache_fork). A fork must continue
 * exactly as the cache it came from: for every policy, row type and many
 * seeds, a cache fed a random prompt is forked, then the original and the
 * fork are fed different random steps, interleaved, and each must equal, at
 * every step, a cache that never forked and was fed the same inputs: the
 * outputs bit for bit and the whole cache image byte for byte (positions,
 * scores, holes and page layout). The pool's accounting is exact throughout
 * (pages in use = pages held by both less those they share), no write ever
 * lands in a page the other still holds (the reference would differ), a
 * failed step leaves the cache unchanged, and nothing leaks.
 */
#include "cache_helpers.h"

#include "../src/cache/cache_impl.h"
#include "../src/cache/pool.h"

enum { D = 8, L = 2, HK = 2 };

static void fill(unsigned long long *rs, float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = t_randf(rs);
}

static struct kvb_cache_params fork_params(enum kvb_policy_id pid, unsigned long long seed, unsigned long long *rs) {
    static const enum kvb_dtype kq[] = {KVB_DTYPE_Q8_0, KVB_DTYPE_Q4_0};
    const int d = seed > 8 ? 32 : D;
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.kv.max_distance = 24;
    cp.n_layer = L; cp.n_kv_head = HK; cp.head_dim = d;
    cp.kv.kv_dtype = seed > 8 ? kq[seed % 2] : seed & 1 ? KVB_DTYPE_F16 : KVB_DTYPE_F32;
    cp.kv.block_size = seed & 2 ? 4 : 16;
    cp.kv.pos_mode = (enum kvb_pos_mode)(t_rng_next(rs) % 3);
    if (pid == KVB_POLICY_KVZIP) cp.kv.pos_mode = KVB_POS_ORIGINAL; /* the only one it takes (refused by name otherwise) */
    cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, d, 10000.0f, 1.0f, NULL};
    cp.kv.policy = kvb_policy_default_params(pid);
    cp.kv.policy.budget = pid == KVB_POLICY_FULL ? 0 : 10 + (int)(t_rng_next(rs) % 40);
    if (pid == KVB_POLICY_SNAPKV || pid == KVB_POLICY_PYRAMIDKV || pid == KVB_POLICY_ADAKV) cp.kv.policy.obs_window = 2 + (int)(t_rng_next(rs) % 6);
    if (cp.kv.policy.budget && cp.kv.policy.budget <= cp.kv.policy.n_sink) cp.kv.policy.budget = cp.kv.policy.n_sink + 1;
    if (seed > 12) cp.kv.keep = 3 + (int)(seed % 9); /* a pinned span: never evicted, on top of the budget */
    return cp;
}

static struct kvb_pool *new_pool_slabs(const struct kvb_cache_params *cp, size_t pages, int32_t per_slab) {
    struct kvb_pool_params pp = kvb_pool_default_params();
    pp.page_bytes = kvb_cache_page_bytes(cp);
    pp.capacity_bytes = ((pp.page_bytes + 63) & ~(size_t)63) * pages;
    pp.pages_per_slab = per_slab;
    struct kvb_pool *p = NULL;
    return kvb_pool_init(&pp, &p) == KVB_OK ? p : NULL;
}

static struct kvb_pool *new_pool(const struct kvb_cache_params *cp, size_t pages) {
    return new_pool_slabs(cp, pages, 8);
}

/* One chunk (C tokens, prefill when C > 1) into every layer of c; outputs to o. */
static kvb_status feed(struct kvb_cache *c, int C, const float *q, const float *k, const float *v, float *o, int G) {
    struct kvb_cache_params cp;
    kvb_cache_get_params(c, &cp);
    const size_t qs = (size_t)C * HK * G * cp.head_dim, ks = (size_t)C * HK * cp.head_dim;
    for (int l = 0; l < L; l++) {
        kvb_status st = C > 1 ? kvb_cache_prefill(c, l, C, q + l * qs, HK * G, k + l * ks, v + l * ks, o + l * qs, NULL)
                              : kvb_cache_decode(c, l, q + l * qs, HK * G, k + l * ks, v + l * ks, o + l * qs, NULL);
        if (st != KVB_OK) return st;
    }
    return KVB_OK;
}

static int same_image(const struct kvb_cache *a, const struct kvb_cache *b, const char *where) {
    void *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    if (kvb_cache_save(a, &x, &nx) != KVB_OK || kvb_cache_save(b, &y, &ny) != KVB_OK) {
        printf("  %s: save: %s\n", where, kvb_last_error());
        kvb_buffer_free(x); kvb_buffer_free(y);
        return 1;
    }
    const int bad = nx != ny || memcmp(x, y, nx) != 0;
    if (bad) printf("  %s: the cache image differs from the reference's (%zu vs %zu bytes)\n", where, nx, ny);
    kvb_buffer_free(x); kvb_buffer_free(y);
    return bad;
}

static int64_t held(const struct kvb_cache *c) {
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(c, &cs);
    return cs.pages_in_use;
}

/* The pool's pages in use are the pages both caches hold less those they share. */
static int accounting(struct kvb_pool *pool, const struct kvb_cache *a, const struct kvb_cache *b, const char *where) {
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(pool, &ps);
    const char *why = kvb_pool_check(pool);
    const int64_t want = (a ? held(a) : 0) + (b ? held(b) : 0) - ps.pages_shared;
    if (why || ps.pages_in_use != want) {
        printf("  %s: pool %s; %lld pages in use, caches hold %lld + %lld, %lld shared\n", where, why ? why : "consistent", (long long)ps.pages_in_use,
               (long long)(a ? held(a) : 0), (long long)(b ? held(b) : 0), (long long)ps.pages_shared);
        return 1;
    }
    return 0;
}

static int fork_run(enum kvb_policy_id pid, unsigned long long seed) {
    unsigned long long rs = seed * 104729 + (unsigned long long)pid;
    const int G = 1 + (int)(t_rng_next(&rs) % 2);
    struct kvb_cache_params cp = fork_params(pid, seed, &rs);
    const int d = cp.head_dim;
    struct kvb_pool *pool = new_pool(&cp, 4096), *rpool = new_pool(&cp, 4096);
    struct kvb_cache *a = NULL, *b = NULL, *ra = NULL, *rb = NULL;
    int bad = !pool || !rpool || kvb_cache_init(pool, &cp, &a) != KVB_OK || kvb_cache_init(rpool, &cp, &ra) != KVB_OK ||
              kvb_cache_init(rpool, &cp, &rb) != KVB_OK;
    const size_t qn = (size_t)L * 64 * HK * G * d, kn = (size_t)L * 64 * HK * d;
    float *q = malloc(sizeof(float) * qn), *k = malloc(sizeof(float) * kn), *v = malloc(sizeof(float) * kn);
    float *o = malloc(sizeof(float) * qn), *ro = malloc(sizeof(float) * qn);
    char where[160];
    /* the shared prompt: a few chunks into a, ra and rb alike */
    const int chunks = 1 + (int)(t_rng_next(&rs) % 3);
    for (int ch = 0; ch < chunks && !bad; ch++) {
        const int C = 2 + (int)(t_rng_next(&rs) % 40);
        fill(&rs, q, qn); fill(&rs, k, kn); fill(&rs, v, kn);
        bad = feed(a, C, q, k, v, o, G) != KVB_OK || feed(ra, C, q, k, v, ro, G) != KVB_OK || feed(rb, C, q, k, v, ro, G) != KVB_OK;
    }
    kvb_cache_compress(a, NULL); kvb_cache_compress(ra, NULL); kvb_cache_compress(rb, NULL);
    const int64_t before = held(a);
    struct kvb_pool_stats ps;
    if (!bad && kvb_cache_fork(a, &b) != KVB_OK) { printf("  fork: %s\n", kvb_last_error()); bad = 1; }
    kvb_pool_get_stats(pool, &ps);
    snprintf(where, sizeof where, "%s seed %llu at the fork", kvb_policy_name(pid), seed);
    if (!bad && (ps.pages_in_use != before || ps.pages_shared != before || held(b) != before)) {
        printf("  %s: %lld pages in use (%lld shared) for a cache of %lld and its fork of %lld\n", where, (long long)ps.pages_in_use,
               (long long)ps.pages_shared, (long long)before, (long long)held(b));
        bad = 1;
    }
    bad = bad || same_image(b, rb, where) || same_image(a, ra, where);
    /* then different steps into each side, interleaved, each against its reference */
    for (int step = 0; step < 80 && !bad; step++) {
        const int side = (int)(t_rng_next(&rs) % 2);
        const int C = t_rng_next(&rs) % 5 == 0 ? 2 + (int)(t_rng_next(&rs) % 20) : 1;
        struct kvb_cache *c = side ? b : a, *r = side ? rb : ra;
        fill(&rs, q, qn); fill(&rs, k, kn); fill(&rs, v, kn);
        snprintf(where, sizeof where, "%s seed %llu step %d (%s, %d tokens)", kvb_policy_name(pid), seed, step, side ? "fork" : "original", C);
        if (feed(c, C, q, k, v, o, G) != KVB_OK || feed(r, C, q, k, v, ro, G) != KVB_OK) {
            printf("  %s: %s\n", where, kvb_last_error());
            bad = 1;
            break;
        }
        if (memcmp(o, ro, sizeof(float) * (size_t)L * C * HK * G * d) != 0) { printf("  %s: outputs differ from the reference's\n", where); bad = 1; }
        bad = bad || same_image(c, r, where) || accounting(pool, a, b, where);
        if (!bad && step == 40 && pid != KVB_POLICY_FULL) { /* a burst of evictions: compaction beside shared pages */
            if (kvb_cache_set_budget(c, -1, -1, cp.kv.policy.n_sink + 2) != KVB_OK || kvb_cache_set_budget(r, -1, -1, cp.kv.policy.n_sink + 2) != KVB_OK) {
                printf("  %s: set_budget: %s\n", where, kvb_last_error());
                bad = 1;
                break;
            }
            for (int l = 0; l < L; l++) { kvb_cache_evict(c, l); kvb_cache_evict(r, l); }
            bad = same_image(c, r, where) || accounting(pool, a, b, where);
        }
    }
    /* whichever goes first, the other keeps its pages intact */
    if (!bad) {
        const bool a_first = t_rng_next(&rs) % 2;
        kvb_cache_free(a_first ? a : b);
        if (a_first) a = NULL; else b = NULL;
        snprintf(where, sizeof where, "%s seed %llu after freeing the %s", kvb_policy_name(pid), seed, a_first ? "original" : "fork");
        bad = same_image(a_first ? b : a, a_first ? rb : ra, where) || accounting(pool, a, b, where);
        kvb_pool_get_stats(pool, &ps);
        if (!bad && ps.pages_shared != 0) { printf("  %s: %lld pages still shared\n", where, (long long)ps.pages_shared); bad = 1; }
    }
    kvb_cache_free(a); kvb_cache_free(b); kvb_cache_free(ra); kvb_cache_free(rb);
    if (pool) {
        kvb_pool_get_stats(pool, &ps);
        if (!bad && (ps.pages_in_use != 0 || kvb_pool_check(pool))) { printf("  %s seed %llu: %lld pages leaked\n", kvb_policy_name(pid), seed, (long long)ps.pages_in_use); bad = 1; }
    }
    kvb_pool_free(pool); kvb_pool_free(rpool);
    free(q); free(k); free(v); free(o); free(ro);
    return bad;
}

TEST(fork_continues_exactly_every_policy) {
    for (int pid = 0; pid < KVB_POLICY_COUNT; pid++)
        for (unsigned long long seed = 1; seed <= 12; seed++)
            if (fork_run((enum kvb_policy_id)pid, seed)) FAILF("policy %s seed %llu", kvb_policy_name((enum kvb_policy_id)pid), seed);
}

/* The same with a pinned span (kv.keep 4..6): the fork and the original
 * continue exactly, their pages accounted for, while eviction beside the
 * span compacts next to shared pages. */
TEST(fork_continues_exactly_with_a_pinned_span) {
    for (int pid = 0; pid < KVB_POLICY_COUNT; pid++)
        for (unsigned long long seed = 13; seed <= 15; seed++)
            if (fork_run((enum kvb_policy_id)pid, seed)) FAILF("policy %s seed %llu", kvb_policy_name((enum kvb_policy_id)pid), seed);
}

/* A small cache of the test's shape: policy pid at budget, rows of dtype, pages of block tokens. */
static struct kvb_cache_params small_params(enum kvb_policy_id pid, int budget, enum kvb_dtype dtype, int block) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = L; cp.n_kv_head = HK; cp.head_dim = D; cp.kv.kv_dtype = dtype; cp.kv.block_size = block;
    cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, D, 10000.0f, 1.0f, NULL};
    cp.kv.policy = kvb_policy_default_params(pid);
    cp.kv.policy.budget = budget;
    return cp;
}

TEST(forks_share_pages_until_written) {
    /* one 40-token prompt (pages of 16: 3 pages a stream, the last part-filled), 8 forks */
    struct kvb_cache_params cp = small_params(KVB_POLICY_STREAMING, 64, KVB_DTYPE_F16, 16);
    struct kvb_pool *pool = new_pool(&cp, 1024);
    CHECK(pool != NULL);
    struct kvb_cache *src, *f[8];
    CHECK_OK(kvb_cache_init(pool, &cp, &src));
    unsigned long long rs = 5;
    float q[40 * L * HK * D], k[40 * L * HK * D], v[40 * L * HK * D], o[40 * L * HK * D];
    fill(&rs, q, sizeof q / sizeof *q); fill(&rs, k, sizeof k / sizeof *k); fill(&rs, v, sizeof v / sizeof *v);
    CHECK_OK(feed(src, 40, q, k, v, o, 1));
    const int64_t one = held(src);
    CHECK(one == L * HK * 3);
    for (int i = 0; i < 8; i++) CHECK_OK(kvb_cache_fork(src, &f[i]));
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(pool, &ps);
    CHECK(ps.pages_in_use == one && ps.pages_shared == one);
    /* each fork's next token goes into the part-filled last page: one copy a stream */
    for (int i = 0; i < 8; i++) {
        fill(&rs, q, L * HK * D); fill(&rs, k, L * HK * D); fill(&rs, v, L * HK * D);
        CHECK_OK(feed(f[i], 1, q, k, v, o, 1));
    }
    kvb_pool_get_stats(pool, &ps);
    CHECK(ps.pages_in_use == one + 8 * L * HK);
    CHECK(ps.pages_shared == one - L * HK); /* the full pages by all nine; each last page by src alone now */
    for (int i = 0; i < 8; i++) kvb_cache_free(f[i]);
    kvb_pool_get_stats(pool, &ps);
    CHECK(ps.pages_in_use == one && ps.pages_shared == 0);
    CHECK(kvb_pool_check(pool) == NULL);
    kvb_cache_free(src);
    kvb_pool_free(pool);
}

/* 32 sessions that open with the same instructions (a pinned span of 410
 * positions, kv.keep) and a few-shot block of 30 (not pinned), forked from
 * one cache, each talking past its budget of 512 under an evicting policy
 * (turns of 40 tokens and 4 decode steps). After every step of every fork:
 * (a) the span's 25 whole pages (pages of 16) are still the parent's own
 * pages and no pinned slot has moved (the page holding the span's end, the
 * few-shot block and the conversation follow copy on write: after a turn
 * that cannot compact the few-shot block's whole pages are still shared);
 * (b) the fork's outputs (and its whole cache image after each turn) equal
 * those of an unshared cache fed the same tokens (built without a fork, in
 * a pool of its own); (c) the pool holds the span once and each fork's own
 * pages: at the end at most span + 32 x (budget + 4 pages) a stream, under
 * 0.7 of the unshared caches' pages, with pages_shared exactly the span's. */
static int span_shared_run(enum kvb_policy_id pid) {
    enum { N_FORK = 32, KEEP = 410, FEW = 30, BUDGET = 512, B = 16, ROUNDS = 13, CH = 40, DEC = 4, S = L * HK };
    const int span_pages = KEEP / B; /* 25 whole pages of pinned slots */
    struct kvb_cache_params cp = small_params(pid, BUDGET, KVB_DTYPE_F16, B);
    cp.kv.keep = KEEP;
    int bad_pool = 0;
    if (pid == KVB_POLICY_SNAPKV) cp.kv.policy.obs_window = 4;
    /* slabs of 2 MiB (pages of 512 bytes: runs of 64 pages), so a stream of 28 pages turns long
     * (32, pool.c) in the conversation: a fork then keeps the span's pages where they are */
    struct kvb_pool *pool = new_pool_slabs(&cp, 16384, 0), *rpool = new_pool_slabs(&cp, 16384, 0);
    struct kvb_cache *parent = NULL, *f[N_FORK] = {0}, *r[N_FORK] = {0};
    if (pool && pool->long_pages != 32) { printf("  the pool's runs are not of 64 pages (long at %d)\n", (int)pool->long_pages); bad_pool = 1; }
    int bad = bad_pool || !pool || !rpool || kvb_cache_init(pool, &cp, &parent) != KVB_OK;
    const int P = KEEP + FEW;
    const size_t pn = (size_t)L * P * HK * D;
    float *q = malloc(sizeof(float) * pn), *k = malloc(sizeof(float) * pn), *v = malloc(sizeof(float) * pn);
    float *o = malloc(sizeof(float) * pn), *ro = malloc(sizeof(float) * pn);
    unsigned long long rs = 77 + (unsigned long long)pid;
    fill(&rs, q, pn); fill(&rs, k, pn); fill(&rs, v, pn);
    /* the prompt, read once by the parent and by every reference */
    bad = bad || feed(parent, P, q, k, v, o, 1) != KVB_OK;
    if (!bad) kvb_cache_compress(parent, NULL);
    for (int i = 0; i < N_FORK && !bad; i++) {
        bad = kvb_cache_fork(parent, &f[i]) != KVB_OK || kvb_cache_init(rpool, &cp, &r[i]) != KVB_OK || feed(r[i], P, q, k, v, ro, 1) != KVB_OK;
        if (!bad) kvb_cache_compress(r[i], NULL);
    }
    if (bad) printf("  %s: setup: %s\n", kvb_policy_name(pid), kvb_last_error());
    void *pimg = NULL;
    size_t plen = 0;
    bad = bad || kvb_cache_save(parent, &pimg, &plen) != KVB_OK;
    char where[160];
    for (int round = 0; round < ROUNDS && !bad; round++) {
        if (round == 1 && pid != KVB_POLICY_SNAPKV) { /* the few-shot block follows copy on write: its whole */
            struct kvb_pool_stats ps;               /* pages (2 a stream) stay shared until a fork may compact */
            kvb_pool_get_stats(pool, &ps);
            if (ps.pages_shared != (int64_t)S * (span_pages + 2)) {
                printf("  %s after a turn: %lld pages shared, want %d (the span and the few-shot block's whole pages)\n", kvb_policy_name(pid),
                       (long long)ps.pages_shared, S * (span_pages + 2));
                bad = 1;
            }
        }
        for (int i = 0; i < N_FORK && !bad; i++)
            for (int step = 0; step <= DEC && !bad; step++) {
                const int C = step == 0 ? CH : 1; /* a user's turn, then a few generated tokens */
                const size_t n = (size_t)L * C * HK * D;
                fill(&rs, q, n); fill(&rs, k, n); fill(&rs, v, n);
                snprintf(where, sizeof where, "%s round %d fork %d step %d", kvb_policy_name(pid), round, i, step);
                if (feed(f[i], C, q, k, v, o, 1) != KVB_OK || feed(r[i], C, q, k, v, ro, 1) != KVB_OK) {
                    printf("  %s: %s\n", where, kvb_last_error());
                    bad = 1;
                    break;
                }
                if (memcmp(o, ro, sizeof(float) * n) != 0) { printf("  %s: outputs differ from the unshared cache's\n", where); bad = 1; }
                bad = bad || (step == DEC && same_image(f[i], r[i], where));
                for (int st = 0; st < S && !bad; st++) { /* (a): the span's pages are the parent's */
                    for (int pg = 0; pg < span_pages && !bad; pg++)
                        if (parent->streams[st].pages[pg] != f[i]->streams[st].pages[pg]) {
                            printf("  %s: stream %d page %d of the span is no longer shared\n", where, st, pg);
                            bad = 1;
                        }
                    const struct kvb_stream *fs = &f[i]->streams[st]; /* and no pinned slot ever moved */
                    for (int j = 0; j < KEEP && !bad; j++)
                        if (fs->v.order[j] != j || fs->v.pos[j] != j) {
                            printf("  %s: stream %d: pinned position %d is in slot %d\n", where, st, j, (int)fs->v.order[j]);
                            bad = 1;
                        }
                }
                struct kvb_pool_stats ps;
                kvb_pool_get_stats(pool, &ps);
                if (!bad && ps.pages_shared < (int64_t)S * span_pages) {
                    printf("  %s: %lld pages shared, the span is %d\n", where, (long long)ps.pages_shared, S * span_pages);
                    bad = 1;
                }
            }
    }
    struct kvb_pool_stats ps, rps;
    kvb_pool_get_stats(pool, &ps);
    kvb_pool_get_stats(rpool, &rps);
    int64_t holders = held(parent);
    for (int i = 0; i < N_FORK; i++) holders += f[i] ? held(f[i]) : 0;
    const int64_t bound = (int64_t)S * (span_pages + 3 + N_FORK * (BUDGET / B + 4));
    if (!bad) {
        /* every fork is past its budget (each read 30 + 13 x 44 tokens) and has compacted beside the span */
        for (int i = 0; i < N_FORK && !bad; i++)
            if (kvb_cache_n_slots(f[i], 0, 0) < KEEP || kvb_cache_n_slots(f[i], 0, 0) > KEEP + BUDGET + CH) { printf("  %s fork %d holds %d slots\n", kvb_policy_name(pid), i, kvb_cache_n_slots(f[i], 0, 0)); bad = 1; }
        if (!bad && (ps.pages_shared != (int64_t)S * span_pages || holders - ps.pages_in_use != (int64_t)N_FORK * S * span_pages)) {
            printf("  %s: %lld pages shared, %lld extra holders; the span is %d pages held by %d forks and the parent\n", kvb_policy_name(pid),
                   (long long)ps.pages_shared, (long long)(holders - ps.pages_in_use), S * span_pages, N_FORK);
            bad = 1;
        }
        if (!bad && (ps.pages_in_use > bound || (double)ps.pages_in_use > 0.7 * (double)rps.pages_in_use)) {
            printf("  %s: the pool holds %lld pages (bound %lld), the unshared caches %lld\n", kvb_policy_name(pid), (long long)ps.pages_in_use,
                   (long long)bound, (long long)rps.pages_in_use);
            bad = 1;
        }
        if (!bad) printf("  %s: %lld pages shared by 33 caches, %lld in use vs %lld unshared (%.2fx)\n", kvb_policy_name(pid), (long long)ps.pages_shared,
                         (long long)ps.pages_in_use, (long long)rps.pages_in_use, (double)ps.pages_in_use / (double)rps.pages_in_use);
    }
    /* the parent never changed; once every fork is gone it holds its pages alone */
    void *img = NULL;
    size_t len = 0;
    if (!bad && (kvb_cache_save(parent, &img, &len) != KVB_OK || len != plen || memcmp(img, pimg, len) != 0)) { printf("  %s: the parent changed\n", kvb_policy_name(pid)); bad = 1; }
    kvb_buffer_free(img); kvb_buffer_free(pimg);
    for (int i = 0; i < N_FORK; i++) { kvb_cache_free(f[i]); kvb_cache_free(r[i]); }
    if (pool) kvb_pool_get_stats(pool, &ps);
    if (!bad && parent && (ps.pages_shared != 0 || ps.pages_in_use != held(parent) || kvb_pool_check(pool))) {
        printf("  %s: after the forks, %lld pages shared, %lld in use\n", kvb_policy_name(pid), (long long)ps.pages_shared, (long long)ps.pages_in_use);
        bad = 1;
    }
    kvb_cache_free(parent);
    kvb_pool_free(pool); kvb_pool_free(rpool);
    free(q); free(k); free(v); free(o); free(ro);
    return bad;
}

TEST(thirty_two_forks_share_a_pinned_span_past_their_budget) {
    static const enum kvb_policy_id pids[] = {KVB_POLICY_H2O, KVB_POLICY_SNAPKV, KVB_POLICY_STREAMING, KVB_POLICY_BLOCK_H2O};
    const size_t n = getenv("KVB_TEST_QUICK") ? 2 : sizeof pids / sizeof *pids; /* sanitizer builds: h2o and snapkv */
    for (size_t i = 0; i < n; i++)
        if (span_shared_run(pids[i])) FAILF("policy %s", kvb_policy_name(pids[i]));
}

TEST(fork_copy_fails_cleanly_when_the_pool_is_full) {
    struct kvb_cache_params cp = small_params(KVB_POLICY_WINDOW, 8, KVB_DTYPE_F32, 4);
    struct kvb_pool *pool = new_pool(&cp, 9); /* 4 streams x 2 pages, 1 spare */
    CHECK(pool != NULL);
    struct kvb_cache *a, *b;
    CHECK_OK(kvb_cache_init(pool, &cp, &a));
    unsigned long long rs = 9;
    float q[6 * L * HK * D], k[6 * L * HK * D], v[6 * L * HK * D], o[6 * L * HK * D];
    fill(&rs, q, sizeof q / sizeof *q); fill(&rs, k, sizeof k / sizeof *k); fill(&rs, v, sizeof v / sizeof *v);
    CHECK_OK(feed(a, 6, q, k, v, o, 1)); /* 2 pages a stream, the second half full */
    CHECK_OK(kvb_cache_fork(a, &b));
    /* either one's next token needs a copy of the last page of both streams of layer 0: 2 pages, 1 free */
    fill(&rs, q, L * HK * D); fill(&rs, k, L * HK * D); fill(&rs, v, L * HK * D);
    for (int side = 0; side < 2; side++) {
        struct kvb_cache *c = side ? b : a;
        void *img, *img2;
        size_t len, len2;
        CHECK_OK(kvb_cache_save(c, &img, &len));
        CHECK_STATUS(kvb_cache_decode(c, 0, q, HK, k, v, o, NULL), KVB_ERR_NOMEM);
        CHECK(strstr(kvb_last_error(), "pool exhausted") != NULL);
        CHECK_OK(kvb_cache_save(c, &img2, &len2));
        CHECK(len == len2 && memcmp(img, img2, len) == 0);
        kvb_buffer_free(img); kvb_buffer_free(img2);
        CHECK(kvb_pool_check(pool) == NULL);
    }
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(pool, &ps);
    CHECK(ps.pages_in_use == 8 && ps.pages_shared == 8);
    /* once b is gone, a holds its pages alone and writes into them in place */
    kvb_cache_free(b);
    CHECK_OK(kvb_cache_decode(a, 0, q, HK, k, v, o, NULL));
    kvb_pool_get_stats(pool, &ps);
    CHECK(ps.pages_in_use == 8 && ps.pages_shared == 0);
    kvb_cache_free(a);
    kvb_pool_get_stats(pool, &ps);
    CHECK(ps.pages_in_use == 0 && ps.pages_shared == 0);
    kvb_pool_free(pool);
}

/* A snapkv-family cache forks only with its prompt compressed (with or
 * without a prefill budget), and its pages then stay shared through decode
 * steps: only the page a token is written into is copied. */
TEST(compressed_prompts_fork_and_stay_shared) {
    for (int pb = 0; pb < 2; pb++) {
        struct kvb_cache_params cp = small_params(KVB_POLICY_SNAPKV, 24, KVB_DTYPE_F16, 4);
        cp.kv.policy.obs_window = 4;
        cp.kv.policy.prefill_budget = pb ? 32 : 0;
        struct kvb_pool *pool = new_pool(&cp, 1024);
        struct kvb_cache *a, *f = NULL;
        CHECK_OK(kvb_cache_init(pool, &cp, &a));
        unsigned long long rs = 21;
        float q[40 * L * HK * D], k[40 * L * HK * D], v[40 * L * HK * D], o[40 * L * HK * D];
        fill(&rs, q, sizeof q / sizeof *q); fill(&rs, k, sizeof k / sizeof *k); fill(&rs, v, sizeof v / sizeof *v);
        CHECK_OK(feed(a, 20, q, k, v, o, 1));
        CHECK_STATUS(kvb_cache_fork(a, &f), KVB_ERR_INVALID); /* the prompt is open */
        CHECK(strstr(kvb_last_error(), "prompt open") != NULL && f == NULL);
        CHECK_OK(feed(a, 20, q, k, v, o, 1));
        kvb_cache_compress(a, NULL);
        CHECK_OK(kvb_cache_fork(a, &f));
        struct kvb_pool_stats ps0, ps1;
        kvb_pool_get_stats(pool, &ps0);
        fill(&rs, q, L * HK * D); fill(&rs, k, L * HK * D); fill(&rs, v, L * HK * D);
        CHECK_OK(feed(f, 1, q, k, v, o, 1));
        kvb_pool_get_stats(pool, &ps1);
        if (ps1.pages_shared < ps0.pages_shared - L * HK || ps1.pages_in_use > ps0.pages_in_use + L * HK)
            FAILF("prefill_budget %d: a decode step on the fork took %lld pages (shared %lld -> %lld)", cp.kv.policy.prefill_budget,
                  (long long)(ps1.pages_in_use - ps0.pages_in_use), (long long)ps0.pages_shared, (long long)ps1.pages_shared);
        kvb_cache_free(f);
        kvb_cache_free(a);
        kvb_pool_free(pool);
    }
}

TEST(fork_refusals_are_named) {
    struct kvb_cache_params cp = small_params(KVB_POLICY_FULL, 0, KVB_DTYPE_F16, 4);
    struct kvb_cache *c, *f = NULL;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c)); /* its own pool */
    CHECK_STATUS(kvb_cache_fork(c, &f), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "pool of its own") != NULL && f == NULL);
    CHECK_STATUS(kvb_cache_fork(NULL, &f), KVB_ERR_INVALID);
    kvb_cache_free(c);
    cp = small_params(KVB_POLICY_STREAMING, 16, KVB_DTYPE_F16, 4);
    cp.kv.recall.pages = 2;
    struct kvb_pool *pool = new_pool(&cp, 64);
    CHECK_OK(kvb_cache_init(pool, &cp, &c));
    CHECK_STATUS(kvb_cache_fork(c, &f), KVB_ERR_UNSUPPORTED);
    CHECK(strstr(kvb_last_error(), "recall") != NULL);
    kvb_cache_free(c);
    kvb_pool_free(pool);
}

int main(void) {
    RUN(fork_continues_exactly_every_policy);
    RUN(fork_continues_exactly_with_a_pinned_span);
    RUN(forks_share_pages_until_written);
    RUN(thirty_two_forks_share_a_pinned_span_past_their_budget);
    RUN(fork_copy_fails_cleanly_when_the_pool_is_full);
    RUN(compressed_prompts_fork_and_stay_shared);
    RUN(fork_refusals_are_named);
    return test_summary();
}
