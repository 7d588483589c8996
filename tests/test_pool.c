/*
 * test_pool.c — the page pool alone (src/cache/pool.c): its lists and counts
 * after every call (kvb_pool_check), the capacity as a hard limit that no
 * layout choice may lower, all-or-nothing takes under allocation failure,
 * and the runs long streams get when they grow in lockstep, as a cache's
 * streams do (the reason the pool has extents at all); which pages a request
 * gets when runs must give way to others, in order.
 */
#include "cache/cache_impl.h"
#include "cache/pool.h"
#include "testing.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static int64_t rnd(int64_t n) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (int64_t)(rng % (uint64_t)n);
}

static struct kvb_pool *new_pool(size_t page_bytes, int64_t cap_pages, int32_t per_slab) {
    struct kvb_pool_params pp = kvb_pool_default_params();
    pp.page_bytes = page_bytes;
    pp.capacity_bytes = (size_t)cap_pages * page_bytes;
    pp.pages_per_slab = per_slab;
    struct kvb_pool *p = NULL;
    if (kvb_pool_init(&pp, &p) != KVB_OK) return NULL;
    return p;
}

/* S streams grown in lockstep, one page each per round, as a cache's streams grow. */
struct streams {
    int S;
    uint8_t *pg[64][512];
    int64_t n[64];
};

/* One round: every stream asks for one page near its last. */
static kvb_status grow_round(struct kvb_pool *p, struct streams *st) {
    struct kvb_pool_req reqs[64];
    uint8_t *out[64];
    for (int s = 0; s < st->S; s++) reqs[s] = (struct kvb_pool_req){1, st->n[s], st->n[s] ? st->pg[s][st->n[s] - 1] : NULL};
    kvb_status rc = kvb_pool_take_reqs(p, reqs, st->S, out);
    if (rc != KVB_OK) return rc;
    for (int s = 0; s < st->S; s++) st->pg[s][st->n[s]++] = out[s];
    return KVB_OK;
}

/* Pages of stream s that do not follow the one before them in memory. */
static int breaks(const struct kvb_pool *p, const struct streams *st, int s, int64_t from) {
    int b = 0;
    for (int64_t i = from + 1; i < st->n[s]; i++) b += st->pg[s][i] != st->pg[s][i - 1] + p->page_bytes;
    return b;
}

TEST(lockstep_streams_get_runs) {
    /* 8 KiB pages: 32 to an extent, a stream is long from 16 pages */
    struct kvb_pool *p = new_pool(8192, 100000, 0);
    CHECK(p);
    CHECK_EQ_INT(p->extent_pages, 32);
    CHECK_EQ_INT(p->long_pages, 16);
    static struct streams st;
    memset(&st, 0, sizeof st);
    st.S = 48;
    for (int r = 0; r < 200; r++) {
        CHECK_EQ_INT(grow_round(p, &st), KVB_OK);
        const char *why = kvb_pool_check(p);
        if (why) FAILF("round %d: %s", r, why);
    }
    for (int s = 0; s < st.S; s++) {
        /* from page 15 (the first asked for as long) on: a break only where a run of 32 ends */
        const int b = breaks(p, &st, s, 15);
        if (b > (200 - 15 + 31) / 32) FAILF("stream %d: %d breaks in %d pages", s, b, 200 - 15);
    }
    /* the memory held and not in use: less than one extent per long stream, plus a slab */
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(p, &ps);
    CHECK_EQ_INT(ps.pages_in_use, 48 * 200);
    if (ps.pages_reserved - ps.pages_in_use > 48 * 32 + p->pages_per_slab)
        FAILF("%lld pages reserved for %lld in use", (long long)ps.pages_reserved, (long long)ps.pages_in_use);
    for (int s = 0; s < st.S; s++) kvb_pool_give(p, st.pg[s], st.n[s]);
    CHECK(kvb_pool_check(p) == NULL);
    kvb_pool_get_stats(p, &ps);
    CHECK_EQ_INT(ps.pages_in_use, 0);
    CHECK_EQ_INT(p->head[KVB_EXT_OPEN], -1); /* every extent free again */
    CHECK_EQ_INT(p->head[KVB_EXT_RUN], -1);
    kvb_pool_free(p);
}

/* The capacity holds exactly: with room for exactly what lockstep streams
 * need, every round succeeds (runs give way: other streams take from them),
 * and one page more fails without a change. */
TEST(capacity_is_exact_whatever_the_runs) {
    for (int per_slab = 0; per_slab <= 40; per_slab += 40) {
        const int S = 24, R = 70;
        struct kvb_pool *p = new_pool(4096, (int64_t)S * R, per_slab);
        CHECK(p);
        static struct streams st;
        memset(&st, 0, sizeof st);
        st.S = S;
        for (int r = 0; r < R; r++) {
            if (grow_round(p, &st) != KVB_OK) FAILF("slab %d: round %d of %d failed within capacity", per_slab, r, R);
            const char *why = kvb_pool_check(p);
            if (why) FAILF("slab %d round %d: %s", per_slab, r, why);
        }
        struct kvb_pool_stats ps;
        kvb_pool_get_stats(p, &ps);
        CHECK_EQ_INT(ps.pages_in_use, (int64_t)S * R);
        CHECK_EQ_INT(ps.pages_reserved, (int64_t)S * R);
        uint8_t *one;
        CHECK_EQ_INT(kvb_pool_take(p, 1, &one), KVB_ERR_NOMEM);
        /* every page handed out once */
        for (int s = 0; s < S; s++)
            for (int i = 0; i < st.n[s]; i++)
                for (int s2 = s; s2 < S; s2++)
                    for (int i2 = s2 == s ? i + 1 : 0; i2 < st.n[s2]; i2++)
                        if (st.pg[s][i] == st.pg[s2][i2]) FAILF("a page was handed out twice");
        for (int s = 0; s < S; s++) kvb_pool_give(p, st.pg[s], st.n[s]);
        CHECK(kvb_pool_check(p) == NULL);
        kvb_pool_free(p);
    }
}

/* Random takes (with and without tails, one request or several) and gives:
 * the lists and counts stay true, a take fails only past the capacity, and
 * a failed take changes nothing. */
TEST(random_takes_and_gives_keep_invariants) {
    const int64_t cap = 700;
    struct kvb_pool *p = new_pool(1024, cap, 100);
    CHECK(p);
    static uint8_t *held[700];
    static uint8_t seen[700];
    int64_t n = 0;
    for (int step = 0; step < 20000; step++) {
        if (rnd(3) > 0) {
            struct kvb_pool_req reqs[3];
            const int nr = 1 + (int)rnd(3);
            int64_t want = 0;
            for (int r = 0; r < nr; r++) {
                const int64_t h = n ? rnd(n) : 0;
                reqs[r] = (struct kvb_pool_req){rnd(9), rnd(80), n && rnd(2) ? held[h] : NULL};
                want += reqs[r].n;
            }
            static uint8_t *out[64];
            struct kvb_pool_stats before;
            kvb_pool_get_stats(p, &before);
            kvb_status rc = kvb_pool_take_reqs(p, reqs, nr, out);
            if (want > cap - n) {
                if (rc != KVB_ERR_NOMEM) FAILF("step %d: took %lld with %lld of %lld held", step, (long long)want, (long long)n, (long long)cap);
                struct kvb_pool_stats after;
                kvb_pool_get_stats(p, &after);
                CHECK_EQ_INT(after.pages_in_use, before.pages_in_use);
            } else {
                if (rc != KVB_OK) FAILF("step %d: a take of %lld failed with %lld of %lld held", step, (long long)want, (long long)n, (long long)cap);
                for (int64_t i = 0; i < want; i++) held[n++] = out[i];
            }
        } else if (n) {
            const int64_t k = 1 + rnd(KVB_MIN(n, (int64_t)12));
            for (int64_t i = 0; i < k; i++) { /* k random pages to the end, then give them */
                const int64_t a = rnd(n - i);
                uint8_t *t = held[a]; held[a] = held[n - 1 - i]; held[n - 1 - i] = t;
            }
            kvb_pool_give(p, held + n - k, k);
            n -= k;
        }
        const char *why = kvb_pool_check(p);
        if (why) FAILF("step %d: %s", step, why);
        struct kvb_pool_stats ps;
        kvb_pool_get_stats(p, &ps);
        if (ps.pages_in_use != n) FAILF("step %d: pool says %lld in use, %lld held", step, (long long)ps.pages_in_use, (long long)n);
        if (step % 500 == 0) { /* no page is held twice, and each lies inside a slab */
            memset(seen, 0, sizeof seen);
            for (int64_t i = 0; i < n; i++) {
                int64_t idx = -1;
                for (int64_t s = 0; s < p->n_slabs; s++) {
                    const uint8_t *b = p->slabs[s].base;
                    if (held[i] >= b && held[i] < b + p->slabs[s].n_pages * (int64_t)p->page_bytes) {
                        idx = (held[i] - b) / (int64_t)p->page_bytes + s * 100;
                        break;
                    }
                }
                if (idx < 0 || idx >= cap) FAILF("step %d: a page outside the slabs", step);
                if (seen[idx]++) FAILF("step %d: a page held twice", step);
            }
        }
    }
    kvb_pool_give(p, held, n);
    CHECK(kvb_pool_check(p) == NULL);
    kvb_pool_free(p);
}

/* The allocator fails part way through a take, from its N-th call on: the
 * pages already taken (new slabs' and other streams' runs') go back, the
 * count is unchanged, and the same take succeeds once the allocator does. */
static long g_calls, g_fail_at;
static void *f_malloc(size_t n, void *u) {
    (void)u;
    return ++g_calls >= g_fail_at ? NULL : malloc(n); /* from the N-th call on */
}
static void f_free(void *q, void *u) {
    (void)u;
    free(q);
}

TEST(failed_allocation_leaves_the_pool_as_it_was) {
    int failed = 0;
    for (g_fail_at = 1; g_fail_at < 48; g_fail_at++) {
        struct kvb_pool *p = new_pool(4096, 4000, 16);
        CHECK(p);
        static struct streams st;
        memset(&st, 0, sizeof st);
        st.S = 6;
        for (int r = 0; r < 20; r++) CHECK_EQ_INT(grow_round(p, &st), KVB_OK);
        struct kvb_pool_stats before;
        kvb_pool_get_stats(p, &before);
        struct kvb_allocator a = {f_malloc, f_free, NULL};
        g_calls = 0;
        kvb_allocator_set(&a);
        struct kvb_pool_req reqs[6];
        uint8_t *out[6 * 40];
        for (int s = 0; s < 6; s++) reqs[s] = (struct kvb_pool_req){40, st.n[s], st.pg[s][st.n[s] - 1]};
        kvb_status rc = kvb_pool_take_reqs(p, reqs, 6, out);
        kvb_allocator_set(NULL);
        const char *why = kvb_pool_check(p);
        if (why) FAILF("fail at %ld: %s", g_fail_at, why);
        struct kvb_pool_stats after;
        kvb_pool_get_stats(p, &after);
        if (rc == KVB_OK) {
            CHECK_EQ_INT(after.pages_in_use, before.pages_in_use + 240);
            kvb_pool_give(p, out, 240);
        } else {
            CHECK_EQ_INT(rc, KVB_ERR_NOMEM);
            failed++;
            CHECK_EQ_INT(after.pages_in_use, before.pages_in_use);
            CHECK_EQ_INT(kvb_pool_take_reqs(p, reqs, 6, out), KVB_OK);
            kvb_pool_give(p, out, 240);
        }
        for (int s = 0; s < st.S; s++) kvb_pool_give(p, st.pg[s], st.n[s]);
        CHECK(kvb_pool_check(p) == NULL);
        kvb_pool_free(p);
    }
    if (failed < 12) FAILF("only %d of 47 takes met a failure", failed);
}

/* Pages by slab in the order the slabs were allocated: page i of the k-th is k * 1000 + i. */
struct slab_ids {
    const uint8_t *base[4];
    int n;
};

static int page_id(const struct kvb_pool *p, struct slab_ids *ids, const uint8_t *pg) {
    for (int64_t s = 0; s < p->n_slabs; s++) { /* note a new slab */
        int k = 0;
        while (k < ids->n && ids->base[k] != p->slabs[s].base) k++;
        if (k == ids->n && ids->n < 4) ids->base[ids->n++] = p->slabs[s].base;
    }
    for (int k = 0; k < ids->n; k++)
        for (int64_t s = 0; s < p->n_slabs; s++)
            if (p->slabs[s].base == ids->base[k] && pg >= ids->base[k] && pg < ids->base[k] + p->slabs[s].n_pages * (int64_t)p->page_bytes)
                return k * 1000 + (int)((pg - ids->base[k]) / (int64_t)p->page_bytes);
    return -1;
}

/* n pages (held, tail as given), or with held -1 n pages for short streams
 * (requests of 8 pages for new holders: none long); the pages must be
 * want[0..n). 0, or prints and returns 1. */
static int take_expect(struct kvb_pool *p, struct slab_ids *ids, const char *what, int64_t n, int64_t held, const uint8_t *tail,
                       uint8_t **out, const int *want) {
    struct kvb_pool_req q[8];
    int nq = 0;
    if (held >= 0) q[nq++] = (struct kvb_pool_req){n, held, tail};
    else
        for (int64_t left = n; left > 0 && nq < 8; left -= 8) q[nq++] = (struct kvb_pool_req){left < 8 ? left : 8, 0, NULL};
    if (kvb_pool_take_reqs(p, q, nq, out) != KVB_OK) { printf("  %s: %s\n", what, kvb_last_error()); return 1; }
    const char *why = kvb_pool_check(p);
    if (why) { printf("  %s: %s\n", what, why); return 1; }
    for (int64_t i = 0; i < n; i++)
        if (page_id(p, ids, out[i]) != want[i]) {
            printf("  %s: page %lld is %d, want %d\n", what, (long long)i, page_id(p, ids, out[i]), want[i]);
            return 1;
        }
    return 0;
}

/* Which pages a request gets, in order (8 KiB pages: extents of 32, a stream
 * is long from 16 pages; slabs of 64 pages, capacity 128). Long streams
 * claim free extents and take them bottom up; a short request takes from an
 * OPEN extent, then a FREE one, then a new slab while the capacity allows
 * one, and only then from other streams' runs: the most recently claimed
 * run first, from its top down, so that the owner's next page stays free
 * for it. A stream whose run is full takes from others' tops the same way,
 * and a page given back to an unclaimed extent is taken before any run's. */
TEST(run_stealing_order) {
    struct kvb_pool *p = new_pool(8192, 128, 64);
    CHECK(p);
    CHECK_EQ_INT(p->extent_pages, 32);
    CHECK_EQ_INT(p->long_pages, 16);
    struct slab_ids ids = {{NULL}, 0};
    static uint8_t *a[21], *b[21], *c[4], *d[21], *e[40], *f[3], *g[2];
    int want[40];
    for (int i = 0; i < 20; i++) want[i] = i;
    if (take_expect(p, &ids, "A claims extent 0", 20, 0, NULL, a, want)) FAILF("A");
    for (int i = 0; i < 20; i++) want[i] = 32 + i;
    if (take_expect(p, &ids, "B claims extent 1", 20, 0, NULL, b, want)) FAILF("B");
    /* the capacity allows a second slab: a short request takes it, not a run */
    for (int i = 0; i < 4; i++) want[i] = 1000 + i;
    if (take_expect(p, &ids, "C (short) opens slab 1's extent 0", 4, -1, NULL, c, want)) FAILF("C");
    for (int i = 0; i < 20; i++) want[i] = 1032 + i;
    if (take_expect(p, &ids, "D claims slab 1's extent 1", 20, 0, NULL, d, want)) FAILF("D");
    /* no slab left: the OPEN extent first, then D's run (the last claimed) from its top */
    for (int i = 0; i < 28; i++) want[i] = 1004 + i;
    for (int i = 0; i < 12; i++) want[28 + i] = 1063 - i;
    if (take_expect(p, &ids, "E (short) takes OPEN, then D's run top down", 40, -1, NULL, e, want)) FAILF("E");
    /* D's extent is full: B's run next, again from the top */
    for (int i = 0; i < 3; i++) want[i] = 63 - i;
    if (take_expect(p, &ids, "F (short) takes B's run top down", 3, -1, NULL, f, want)) FAILF("F");
    /* the owners' next pages were left to them */
    want[0] = 20;
    if (take_expect(p, &ids, "A's next", 1, 20, a[19], a + 20, want)) FAILF("A's next");
    want[0] = 52;
    if (take_expect(p, &ids, "B's next", 1, 20, b[19], b + 20, want)) FAILF("B's next");
    /* D's run is full and no extent is free: it takes from B's top */
    want[0] = 60;
    if (take_expect(p, &ids, "D's next, from B's top", 1, 20, d[19], d + 20, want)) FAILF("D's next");
    /* extents by allocation: A's 0, B's 1, then slab 1's 2 (shared) and D's 3, which gave up its claim */
    CHECK(p->ext[0].claimed && p->ext[1].claimed && !p->ext[2].claimed && !p->ext[3].claimed);
    /* a page given back to an unclaimed extent comes before any run's */
    kvb_pool_give(p, &e[6], 1);
    want[0] = 1010;
    want[1] = 59;
    if (take_expect(p, &ids, "G (short): the given page, then B's top", 2, -1, NULL, g, want)) FAILF("G");
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(p, &ps);
    CHECK_EQ_INT(ps.pages_in_use, 21 + 21 + 4 + 21 + 40 - 1 + 3 + 2);
    CHECK_EQ_INT(ps.pages_reserved, 128);
    kvb_pool_give(p, a, 21); kvb_pool_give(p, b, 21); kvb_pool_give(p, c, 4); kvb_pool_give(p, d, 21);
    kvb_pool_give(p, e, 6); kvb_pool_give(p, e + 7, 33); kvb_pool_give(p, f, 3); kvb_pool_give(p, g, 2);
    CHECK(kvb_pool_check(p) == NULL);
    kvb_pool_get_stats(p, &ps);
    CHECK_EQ_INT(ps.pages_in_use, 0);
    kvb_pool_free(p);
}

/* Pages of 256 KiB and more: extents of one page, no runs, and nothing reserved beyond use. */
TEST(big_pages_take_no_runs) {
    struct kvb_pool *p = new_pool((size_t)256 << 10, 64, 0);
    CHECK(p);
    CHECK_EQ_INT(p->extent_pages, 1);
    static struct streams st;
    memset(&st, 0, sizeof st);
    st.S = 4;
    for (int r = 0; r < 16; r++) CHECK_EQ_INT(grow_round(p, &st), KVB_OK);
    CHECK(kvb_pool_check(p) == NULL);
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(p, &ps);
    CHECK_EQ_INT(ps.pages_in_use, 64);
    CHECK_EQ_INT(ps.pages_reserved, 64);
    for (int s = 0; s < st.S; s++) kvb_pool_give(p, st.pg[s], st.n[s]);
    kvb_pool_free(p);
}

/* A cache takes its pages near each stream's last: streams appended in
 * lockstep, as decode appends them, end with their pages in runs (a break
 * only where a run of an extent ends), the rows they hold are the ones
 * appended, and the first pages of each stream, taken before it was long,
 * were moved into its first run. */
TEST(cache_streams_lie_in_runs) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = 2;
    cp.n_kv_head = 4;
    cp.head_dim = 64;
    cp.kv.policy.id = KVB_POLICY_FULL;
    struct kvb_cache *c = NULL;
    CHECK_EQ_INT(kvb_cache_init(NULL, &cp, &c), KVB_OK);
    const int32_t H = 4, D = 64, T = 1200;
    float *k = calloc((size_t)H * D, sizeof(float)), *v = calloc((size_t)H * D, sizeof(float));
    CHECK(k && v);
    for (int32_t t = 0; t < T; t++)
        for (int32_t l = 0; l < 2; l++) {
            for (int32_t i = 0; i < H * D; i++) k[i] = (float)(t % 1000) + (float)(l * H + i / D), v[i] = -k[i];
            if (kvb_cache_append(c, l, k, v) != KVB_OK) FAILF("append %d: %s", (int)t, kvb_last_error());
        }
    const struct kvb_pool *p = c->pool;
    CHECK_EQ_INT(p->extent_pages, 64); /* 4 KiB pages */
    for (int32_t l = 0; l < 2; l++)
        for (int32_t h = 0; h < H; h++) {
            const struct kvb_stream *s = kvb_cache_stream(c, l, h);
            int b = 0;
            for (int32_t i = 1; i < s->v.n_pages; i++) b += s->pages[i] != s->pages[i - 1] + p->page_bytes;
            if (b > (s->v.n_pages + 63) / 64) FAILF("stream (%d,%d): %d breaks in %d pages", (int)l, (int)h, b, (int)s->v.n_pages);
            for (int32_t j = 0; j < s->v.n; j += 37) {
                const uint16_t *kr = (const uint16_t *)kvb_stream_row(&c->geom, s, s->v.order[j]);
                const float want = (float)(s->v.pos[s->v.order[j]] % 1000) + (float)(l * H + h);
                if (kvb_f16_to_f32(kr[0]) != want) FAILF("stream (%d,%d) slot %d holds %g, not %g", (int)l, (int)h, (int)j, kvb_f16_to_f32(kr[0]), want);
            }
        }
    CHECK(kvb_pool_check(c->pool) == NULL);
    kvb_cache_free(c);
    free(k);
    free(v);
}

int main(void) {
    RUN(lockstep_streams_get_runs);
    RUN(capacity_is_exact_whatever_the_runs);
    RUN(run_stealing_order);
    RUN(random_takes_and_gives_keep_invariants);
    RUN(failed_allocation_leaves_the_pool_as_it_was);
    RUN(big_pages_take_no_runs);
    RUN(cache_streams_lie_in_runs);
    return test_summary();
}
