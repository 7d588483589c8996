/*
 * test_state.c — the recurrent state of a hybrid model's cache
 * (kvb_cache_params.recurrent, kvb_cache_state; src/cache/state.c).
 * A recurrent layer keeps state_rows rows of state_row_floats floats in
 * pages of the pool, zero until written; it holds no K/V and refuses
 * decode/prefill; forks share its pages and copy them before a write, so
 * fork and source go on independently; images carry it; reset and free give
 * its pages back; reserve takes them ahead of a step and unreserve returns
 * them; the pool's accounting counts them exactly.
 */
#include "testing.h"
#include "kvbound.h"

#include <string.h>

enum { L = 4, HK = 2, D = 8, ROWS = 21, RF = 16 };

static const uint8_t k_rec[L] = {1, 1, 0, 1}; /* Qwen3.5's pattern: three recurrent layers, then attention */

static struct kvb_cache_params params(void) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = L;
    cp.n_kv_head = HK;
    cp.head_dim = D;
    cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, D, 10000.0f, 1.0f, NULL};
    cp.kv.kv_dtype = KVB_DTYPE_F32;
    cp.kv.block_size = 16; /* a page of 16 * 2 * 32 bytes = 1 KiB holds 16 rows of 64 bytes */
    cp.recurrent = k_rec;
    cp.state_rows = ROWS;
    cp.state_row_floats = RF;
    cp.pool_bytes = 1 << 20;
    return cp;
}

static struct kvb_pool *pool_for(const struct kvb_cache_params *cp, int64_t pages) {
    struct kvb_pool_params pp = kvb_pool_default_params();
    pp.page_bytes = kvb_cache_page_bytes(cp);
    pp.capacity_bytes = ((pp.page_bytes + 63) & ~(size_t)63) * (size_t)pages;
    struct kvb_pool *p = NULL;
    return kvb_pool_init(&pp, &p) == KVB_OK ? p : NULL;
}

/* Writes a recognisable value into every row of layer l: v + row + col / 100. */
static void write_layer(struct kvb_cache *c, int l, float v) {
    float *const *rows = NULL;
    if (kvb_cache_state(c, l, 1, &rows) != KVB_OK || !rows) return;
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < RF; j++) rows[i][j] = v + (float)i + (float)j / 100.0f;
}

/* Whether layer l's rows hold what write_layer(v) wrote (reading through a one-token state call). */
static int layer_is(struct kvb_cache *c, int l, float v) {
    float *const *rows = NULL;
    if (kvb_cache_state(c, l, 1, &rows) != KVB_OK || !rows) return 0;
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < RF; j++)
            if (rows[i][j] != v + (float)i + (float)j / 100.0f) return 0;
    return 1;
}

static int64_t pool_used(struct kvb_pool *p) {
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(p, &ps);
    return ps.pages_in_use;
}

TEST(state_starts_at_zero_and_takes_its_pages_at_the_first_write) {
    struct kvb_cache_params cp = params();
    CHECK_EQ_INT((int)kvb_cache_state_pages(&cp), 3 * 2); /* 21 rows, 16 to a page: 2 pages per layer */
    struct kvb_pool *pool = pool_for(&cp, 64);
    struct kvb_cache *c = NULL;
    CHECK_OK(kvb_cache_init(pool, &cp, &c));
    struct kvb_cache_stats st;
    kvb_cache_get_stats(c, &st);
    CHECK_EQ_INT(st.state_layers, 3);
    CHECK_EQ_INT((int)st.state_pages, 0);
    CHECK_EQ_INT((int)pool_used(pool), 0);
    float *const *rows = NULL;
    CHECK_OK(kvb_cache_state(c, 0, 5, &rows));
    CHECK(rows != NULL);
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < RF; j++) CHECK(rows[i][j] == 0.0f);
    CHECK_EQ_INT((int)kvb_cache_n_past(c, 0), 5);
    CHECK_EQ_INT((int)kvb_cache_n_past(c, 1), 0);
    kvb_cache_get_stats(c, &st);
    CHECK_EQ_INT((int)st.state_pages, 6);
    CHECK_EQ_INT((int)st.pages_in_use, 6);
    CHECK(st.state_bytes == 6 * ((kvb_cache_page_bytes(&cp) + 63) & ~(size_t)63));
    CHECK_EQ_INT((int)pool_used(pool), 6);
    /* rows are distinct and each lies whole in memory the cache holds */
    for (int i = 1; i < ROWS; i++) CHECK(rows[i] != rows[i - 1]);
    write_layer(c, 1, 7.0f);
    CHECK(layer_is(c, 1, 7.0f));
    kvb_cache_reset(c);
    kvb_cache_get_stats(c, &st);
    CHECK_EQ_INT((int)st.state_pages, 0);
    CHECK_EQ_INT((int)pool_used(pool), 0);
    CHECK(layer_is(c, 1, -1.0f) == 0);
    CHECK_OK(kvb_cache_state(c, 1, 1, &rows));
    CHECK(rows[3][2] == 0.0f); /* zero again after reset */
    kvb_cache_free(c);
    CHECK_EQ_INT((int)pool_used(pool), 0);
    kvb_pool_free(pool);
}

TEST(recurrent_layers_refuse_kv_and_attention_layers_refuse_state) {
    struct kvb_cache_params cp = params();
    struct kvb_cache *c = NULL;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    float q[HK * D] = {0}, k[HK * D] = {0}, v[HK * D] = {0}, o[HK * D];
    float *const *rows = NULL;
    CHECK_STATUS(kvb_cache_decode(c, 0, q, HK, k, v, o, NULL), KVB_ERR_INVALID);
    CHECK_STATUS(kvb_cache_prefill(c, 1, 1, q, HK, k, v, o, NULL), KVB_ERR_INVALID);
    CHECK_STATUS(kvb_cache_append(c, 3, k, v), KVB_ERR_INVALID);
    CHECK_STATUS(kvb_cache_state(c, 2, 1, &rows), KVB_ERR_INVALID);
    CHECK_STATUS(kvb_cache_state(c, 0, 0, &rows), KVB_ERR_INVALID);
    CHECK_STATUS(kvb_cache_state(c, 9, 1, &rows), KVB_ERR_INVALID);
    CHECK_OK(kvb_cache_decode(c, 2, q, HK, k, v, o, NULL));
    struct kvb_cache_stats st;
    kvb_cache_get_stats(c, &st);
    CHECK_EQ_INT((int)st.slots, HK); /* the attention layer's token only */
    CHECK_EQ_INT(st.slots_min, 1);   /* recurrent layers' empty streams are not counted */
    kvb_cache_free(c);
}

TEST(a_row_that_does_not_fit_a_page_and_recall_are_refused_by_name) {
    struct kvb_cache_params cp = params();
    cp.state_row_floats = 1024; /* 4 KiB > a 1 KiB page */
    struct kvb_cache *c = NULL;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "state_row_floats") != NULL);
    CHECK_EQ_INT((int)kvb_cache_state_pages(&cp), -1);
    cp = params();
    cp.state_rows = 0;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "state_rows") != NULL);
    cp = params();
    cp.kv.recall.pages = 2;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_UNSUPPORTED);
    CHECK(strstr(kvb_last_error(), "recall") != NULL);
}

TEST(forks_share_the_state_until_one_writes) {
    struct kvb_cache_params cp = params();
    struct kvb_pool *pool = pool_for(&cp, 64);
    struct kvb_cache *a = NULL, *b = NULL;
    CHECK_OK(kvb_cache_init(pool, &cp, &a));
    write_layer(a, 0, 1.0f);
    write_layer(a, 1, 2.0f);
    write_layer(a, 3, 3.0f);
    CHECK_OK(kvb_cache_fork(a, &b));
    CHECK_EQ_INT((int)pool_used(pool), 6); /* shared, not copied */
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(pool, &ps);
    CHECK_EQ_INT((int)ps.pages_shared, 6);
    CHECK_EQ_INT((int)kvb_cache_n_past(b, 0), 1);
    /* the fork writes: it copies every shared page first; the source keeps its values */
    write_layer(b, 1, 9.0f);
    CHECK_EQ_INT((int)pool_used(pool), 12);
    CHECK(layer_is(b, 1, 9.0f));
    CHECK(layer_is(b, 0, 1.0f));
    CHECK(layer_is(a, 1, 2.0f));
    CHECK(layer_is(a, 3, 3.0f));
    write_layer(a, 3, 4.0f);
    CHECK(layer_is(b, 3, 3.0f));
    CHECK(layer_is(a, 3, 4.0f));
    kvb_cache_free(b);
    CHECK_EQ_INT((int)pool_used(pool), 6);
    kvb_cache_free(a);
    CHECK_EQ_INT((int)pool_used(pool), 0);
    kvb_pool_free(pool);
}

TEST(a_fork_that_cannot_copy_fails_and_changes_nothing) {
    struct kvb_cache_params cp = params();
    struct kvb_pool *pool = pool_for(&cp, 8); /* room for 6 state pages and 2 more */
    struct kvb_cache *a = NULL, *b = NULL;
    CHECK_OK(kvb_cache_init(pool, &cp, &a));
    write_layer(a, 0, 1.0f);
    CHECK_OK(kvb_cache_fork(a, &b));
    float *const *rows = NULL;
    CHECK_STATUS(kvb_cache_state(b, 0, 1, &rows), KVB_ERR_NOMEM);
    CHECK_EQ_INT((int)kvb_cache_n_past(b, 0), 1);
    CHECK_EQ_INT((int)pool_used(pool), 6);
    kvb_cache_free(a); /* now b alone holds them: no copy needed */
    CHECK(layer_is(b, 0, 1.0f));
    CHECK_EQ_INT((int)pool_used(pool), 6);
    kvb_cache_free(b);
    kvb_pool_free(pool);
}

TEST(reserve_takes_the_state_and_unreserve_gives_it_back) {
    struct kvb_cache_params cp = params();
    struct kvb_pool *pool = pool_for(&cp, 64);
    struct kvb_cache *c = NULL;
    CHECK_OK(kvb_cache_init(pool, &cp, &c));
    CHECK_OK(kvb_cache_reserve(c, 4, HK));
    const int64_t held = pool_used(pool);
    CHECK(held >= 6 + HK); /* the state and the attention layer's pages */
    kvb_cache_unreserve(c);
    CHECK_EQ_INT((int)pool_used(pool), 0);
    struct kvb_pool *tiny = pool_for(&cp, 4); /* the state alone needs 6: refused up front, naming it */
    struct kvb_cache *d = NULL, *e = NULL;
    CHECK_STATUS(kvb_cache_init(tiny, &cp, &d), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "does not fit the pool") != NULL);
    kvb_pool_free(tiny);
    struct kvb_pool *small = pool_for(&cp, 10); /* room for one state (6) and its attention pages, not two */
    CHECK_OK(kvb_cache_init(small, &cp, &d));
    CHECK_OK(kvb_cache_init(small, &cp, &e));
    CHECK_OK(kvb_cache_reserve(d, 1, HK));
    const int64_t before = pool_used(small);
    CHECK_STATUS(kvb_cache_reserve(e, 1, HK), KVB_ERR_NOMEM);
    CHECK_EQ_INT((int)pool_used(small), (int)before); /* nothing taken */
    struct kvb_cache_stats es;
    kvb_cache_get_stats(e, &es);
    CHECK_EQ_INT((int)es.state_pages, 0);
    kvb_cache_free(e);
    kvb_cache_free(d);
    CHECK_EQ_INT((int)pool_used(small), 0);
    kvb_pool_free(small);
    kvb_cache_free(c);
    kvb_pool_free(pool);
}

TEST(images_carry_the_state) {
    struct kvb_cache_params cp = params();
    struct kvb_cache *c = NULL, *r = NULL;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    void *buf = NULL;
    size_t len = 0;
    CHECK_OK(kvb_cache_save(c, &buf, &len)); /* a zero state: no rows in the image */
    CHECK_OK(kvb_cache_load(NULL, buf, len, 1 << 20, &r));
    struct kvb_cache_stats st;
    kvb_cache_get_stats(r, &st);
    CHECK_EQ_INT(st.state_layers, 3);
    CHECK_EQ_INT((int)st.state_pages, 0);
    const size_t zero_len = len;
    kvb_buffer_free(buf);
    kvb_cache_free(r);
    write_layer(c, 0, 1.5f);
    write_layer(c, 3, -2.0f);
    float q[HK * D], k[HK * D], v[HK * D], o[HK * D];
    for (int i = 0; i < HK * D; i++) q[i] = k[i] = v[i] = (float)i / 10.0f;
    CHECK_OK(kvb_cache_decode(c, 2, q, HK, k, v, o, NULL));
    CHECK_OK(kvb_cache_save(c, &buf, &len));
    CHECK(len >= zero_len + (size_t)3 * ROWS * RF * 4);
    CHECK_OK(kvb_cache_load(NULL, buf, len, 1 << 20, &r));
    CHECK_EQ_INT((int)kvb_cache_n_past(r, 0), (int)kvb_cache_n_past(c, 0));
    CHECK(layer_is(r, 0, 1.5f));
    CHECK(layer_is(r, 3, -2.0f));
    CHECK_EQ_INT(kvb_cache_n_slots(r, 2, 1), 1);
    /* a saved-again restored cache is the same image, byte for byte */
    void *buf2 = NULL;
    size_t len2 = 0;
    kvb_cache_free(r);
    CHECK_OK(kvb_cache_load(NULL, buf, len, 1 << 20, &r));
    CHECK_OK(kvb_cache_save(r, &buf2, &len2));
    CHECK(len2 == len && memcmp(buf, buf2, len) == 0);
    /* truncated: refused, never a crash */
    kvb_cache_free(r);
    r = NULL;
    CHECK(kvb_cache_load(NULL, buf, len - 10, 1 << 20, &r) != KVB_OK && r == NULL);
    kvb_buffer_free(buf2);
    kvb_buffer_free(buf);
    kvb_cache_free(c);
}

int main(void) {
    RUN(state_starts_at_zero_and_takes_its_pages_at_the_first_write);
    RUN(recurrent_layers_refuse_kv_and_attention_layers_refuse_state);
    RUN(a_row_that_does_not_fit_a_page_and_recall_are_refused_by_name);
    RUN(forks_share_the_state_until_one_writes);
    RUN(a_fork_that_cannot_copy_fails_and_changes_nothing);
    RUN(reserve_takes_the_state_and_unreserve_gives_it_back);
    RUN(images_carry_the_state);
    return test_summary();
}
