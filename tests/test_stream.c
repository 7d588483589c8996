/*
 * test_stream.c — the stream module alone (src/cache/stream.c), with no
 * cache, attention or policy: random appends and evictions against a plain
 * array model of the retained tokens; after every step every invariant of
 * stream.h holds (kvb_stream_check), every row still holds the token it was
 * written for, the pool's pages in use equal the stream's pages, and fewer
 * than two pages of holes remain.
 */
#include "cache/stream.h"
#include "testing.h"

#define ROW_FLOATS 4
#define VROW_FLOATS 2 /* V rows narrower than K rows, as with q4_0 V under q8_0 K */

static struct kvb_stream_geom geom(int32_t B, bool runs) {
    struct kvb_stream_geom g = {0};
    g.block_size = B;
    while ((1 << g.block_shift) < B) g.block_shift++;
    g.row_bytes = sizeof(float) * ROW_FLOATS;
    g.row_bytes_v = sizeof(float) * VROW_FLOATS;
    g.v_offset = (size_t)B * g.row_bytes;
    g.n_state = 2;
    g.runs = runs;
    return g;
}

static struct kvb_pool *make_pool(const struct kvb_stream_geom *g, int64_t pages) {
    struct kvb_pool_params pp = kvb_pool_default_params();
    pp.page_bytes = g->v_offset + (size_t)g->block_size * g->row_bytes_v;
    pp.capacity_bytes = (size_t)pages * ((pp.page_bytes + 63) & ~(size_t)63);
    struct kvb_pool *pool = NULL;
    return kvb_pool_init(&pp, &pool) == KVB_OK ? pool : NULL;
}

/* Appends a token at pos: K row = pos, V row = -pos, state = {pos, 1}. */
static kvb_status append(const struct kvb_stream_geom *g, struct kvb_stream *s, struct kvb_pool *pool, int32_t pos) {
    const int64_t np = kvb_stream_pages_needed(g, s, 1);
    if (kvb_stream_reserve(g, s, s->v.n_pages + np, (int64_t)s->v.n + 2) != KVB_OK) return KVB_ERR_NOMEM;
    uint8_t *pages[4];
    if (np) {
        kvb_status st = kvb_pool_take(pool, np, pages);
        if (st != KVB_OK) return st;
        kvb_stream_attach(g, s, pages, np);
    }
    const int32_t slot = kvb_stream_push(g, s, pos);
    float *k = (float *)kvb_stream_row(g, s, slot), *v = (float *)kvb_stream_vrow(g, s, slot);
    for (int i = 0; i < ROW_FLOATS; i++) k[i] = (float)pos;
    for (int i = 0; i < VROW_FLOATS; i++) v[i] = -(float)pos;
    float *st = s->v.state + (size_t)(s->v.n - 1) * (size_t)g->n_state;
    st[0] = (float)pos;
    st[1] = 1;
    return KVB_OK;
}

/* The stream agrees with the model (positions in logical order). */
static const char *agrees(const struct kvb_stream_geom *g, const struct kvb_stream *s, const struct kvb_pool *pool,
                          const int32_t *model, int32_t m) {
    const char *why = kvb_stream_check(g, s);
    if (why) return why;
    if (s->v.n != m) return "live count differs from the model";
    for (int32_t j = 0; j < m; j++) {
        const int32_t slot = s->v.order[j];
        if (s->v.pos[slot] != model[j]) return "position differs from the model";
        const float *k = (const float *)kvb_stream_row(g, s, slot);
        const float *v = (const float *)kvb_stream_vrow(g, s, slot);
        for (int i = 0; i < ROW_FLOATS; i++)
            if (k[i] != (float)model[j] || (i < VROW_FLOATS && v[i] != -(float)model[j])) return "a row did not follow its token";
        const float *st = s->v.state + (size_t)j * (size_t)g->n_state;
        if (st[0] != (float)model[j] || st[1] != 1) return "state did not follow its token";
    }
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(pool, &ps);
    if (ps.pages_in_use != s->v.n_pages) return "pool pages in use differ from the stream's pages";
    return NULL;
}

static uint64_t rng = 0x1234;
static int32_t rnd(int32_t n) { return (int32_t)(kvb_rand_unit(&rng) * n) % n; }

static void random_walk(int32_t B, bool runs, int32_t steps) {
    struct kvb_stream_geom g = geom(B, runs);
    struct kvb_pool *pool = make_pool(&g, 4096);
    struct kvb_stream s;
    memset(&s, 0, sizeof s);
    int32_t *model = malloc(sizeof(int32_t) * 100000), m = 0, next = 0;
    int32_t victims[256];
    const char *why = NULL;
    for (int32_t step = 0; step < steps && !why; step++) {
        const int32_t burst = 1 + rnd(3 * B);
        for (int32_t i = 0; i < burst; i++) {
            if (append(&g, &s, pool, next) != KVB_OK) { why = "append failed"; break; }
            model[m++] = next;
            next += 1 + (rnd(4) == 0); /* gaps in positions too */
        }
        if (!why) why = agrees(&g, &s, pool, model, m);
        /* evict: sometimes a few scattered slots, sometimes a range, keeping about 5 pages */
        int32_t k = 0;
        const int32_t target = 5 * B;
        if (m > target) {
            const int32_t over = m - target + rnd(B);
            for (int32_t i = 0; i < over && k < 256; i++) victims[k++] = rnd(2) ? rnd(m) : KVB_MIN(m - 1, i);
            k = kvb_stream_sort_victims(victims, k);
            for (int32_t i = 1; i < k && !why; i++)
                if (victims[i] <= victims[i - 1]) why = "victims not sorted and distinct";
            kvb_stream_remove(&g, &s, pool, victims, k);
            int32_t w = 0;
            for (int32_t j = 0, vi = 0; j < m; j++) {
                if (vi < k && victims[vi] == j) { vi++; continue; }
                model[w++] = model[j];
            }
            m = w;
            if (!why) why = agrees(&g, &s, pool, model, m);
        }
    }
    /* a restore rebuilds page_live, holes and runs from pos and order alone */
    if (!why && s.v.n_pages) {
        int32_t *live = malloc(sizeof(int32_t) * (size_t)s.v.n_pages);
        memcpy(live, s.v.page_live, sizeof(int32_t) * (size_t)s.v.n_pages);
        const int32_t nf = s.n_free, nr = s.n_runs;
        for (int32_t p = 0; p < s.v.n_pages; p++) s.v.page_live[p] = 99;
        s.n_free = 0;
        s.n_runs = 0;
        kvb_stream_rebuild(&g, &s);
        if (memcmp(live, s.v.page_live, sizeof(int32_t) * (size_t)s.v.n_pages) || s.n_free != nf || s.n_runs != nr)
            why = "rebuild differs";
        if (!why) why = agrees(&g, &s, pool, model, m);
        free(live);
    }
    kvb_stream_clear(&s, pool);
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(pool, &ps);
    if (!why && ps.pages_in_use != 0) why = "clear kept pages";
    kvb_stream_free(&s);
    kvb_pool_free(pool);
    free(model);
    if (why) FAILF("B=%d runs=%d: %s", (int)B, (int)runs, why);
}

TEST(random_appends_and_evictions_keep_invariants) {
    random_walk(4, true, 400);
    if (t_case_failed) return;
    random_walk(16, true, 300);
    if (t_case_failed) return;
    random_walk(1, false, 200);
    if (t_case_failed) return;
    random_walk(8, false, 300);
}

TEST(steady_evict_one_append_one_moves_no_row) {
    struct kvb_stream_geom g = geom(4, true);
    struct kvb_pool *pool = make_pool(&g, 64);
    struct kvb_stream s;
    memset(&s, 0, sizeof s);
    for (int32_t p = 0; p < 12; p++) CHECK_OK(append(&g, &s, pool, p));
    int32_t slot_of_5 = s.v.order[5];
    for (int32_t p = 12; p < 40; p++) { /* evict the oldest after 2 sinks, append one */
        int32_t victim = 2;
        if (s.v.pos[s.v.order[2]] == 5) victim = 3; /* keep token 5 */
        kvb_stream_remove(&g, &s, pool, &victim, 1);
        CHECK_OK(append(&g, &s, pool, p));
        CHECK(kvb_stream_check(&g, &s) == NULL);
        CHECK_EQ_INT(s.v.n_pages, 3);
    }
    int32_t j5 = -1;
    for (int32_t j = 0; j < s.v.n; j++)
        if (s.v.pos[s.v.order[j]] == 5) j5 = j;
    CHECK(j5 >= 0);
    CHECK_EQ_INT(s.v.order[j5], slot_of_5); /* a hole is refilled in place: token 5 never moved */
    /* contiguous runs: sinks 0,1 (delta 0), token 5 (delta 5-2), then the window */
    CHECK_EQ_INT(s.n_runs, 3);
    CHECK_EQ_INT(s.runs[0].delta, 0);
    CHECK_EQ_INT(s.runs[1].delta, 3);
    kvb_stream_clear(&s, pool);
    kvb_stream_free(&s);
    kvb_pool_free(pool);
}

TEST(pool_exhaustion_leaves_the_stream_unchanged) {
    struct kvb_stream_geom g = geom(4, false);
    struct kvb_pool *pool = make_pool(&g, 2);
    struct kvb_stream s;
    memset(&s, 0, sizeof s);
    for (int32_t p = 0; p < 8; p++) CHECK_OK(append(&g, &s, pool, p));
    CHECK_STATUS(append(&g, &s, pool, 8), KVB_ERR_NOMEM);
    CHECK(kvb_stream_check(&g, &s) == NULL);
    CHECK_EQ_INT(s.v.n, 8);
    CHECK_EQ_INT(s.v.n_pages, 2);
    int32_t victims[] = {0, 1, 2, 3, 4, 5};
    kvb_stream_remove(&g, &s, pool, victims, 6); /* six of eight go: one page returns */
    CHECK(kvb_stream_check(&g, &s) == NULL);
    CHECK_EQ_INT(s.v.n_pages, 1);
    CHECK_OK(append(&g, &s, pool, 8));
    kvb_stream_clear(&s, pool);
    kvb_stream_free(&s);
    kvb_pool_free(pool);
}

TEST(sort_victims_dedupes) {
    int32_t v[] = {9, 3, 3, 7, 1, 9, 0};
    CHECK_EQ_INT(kvb_stream_sort_victims(v, 7), 5);
    CHECK_EQ_INT(v[0], 0); CHECK_EQ_INT(v[1], 1); CHECK_EQ_INT(v[2], 3); CHECK_EQ_INT(v[3], 7); CHECK_EQ_INT(v[4], 9);
    int32_t big[40];
    for (int i = 0; i < 40; i++) big[i] = (i * 7) % 20; /* each of 0..19 twice */
    CHECK_EQ_INT(kvb_stream_sort_victims(big, 40), 20);
    for (int i = 0; i < 20; i++) CHECK_EQ_INT(big[i], i);
    CHECK_EQ_INT(kvb_stream_sort_victims(big, 0), 0);
}

int main(void) {
    RUN(random_appends_and_evictions_keep_invariants);
    RUN(steady_evict_one_append_one_moves_no_row);
    RUN(pool_exhaustion_leaves_the_stream_unchanged);
    RUN(sort_victims_dedupes);
    return test_summary();
}
