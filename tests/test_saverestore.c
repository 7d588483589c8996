/*
 * test_saverestore.c — save, restore, continue: bit-identical to a run that
 * never stopped, for every policy (buffer and file), on f16 and on quantized
 * pages. Every truncation, every single-byte flip, and crafted images with a
 * valid checksum but absurd counts give KVB_ERR_CORRUPT, never a crash.
 */
#include "testing.h"
#include "kvbound.h"
#include "core/core.h"

#include <unistd.h>

enum { L = 2, HK = 2, G = 2, D = 8, DMAX = 32 };
/* head dim and K/V types of the caches make() builds (the quantized test sets them) */
static int g_d = D;
static enum kvb_dtype g_dt = KVB_DTYPE_F16, g_dtv = KVB_DTYPE_AS_K;
static int g_keep; /* kv.keep of the caches make() makes */

static struct kvb_cache *make(enum kvb_policy_id id, int budget) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.kv.max_distance = 24; /* lminfinite (positions capped): short, so the cap is exercised */
    cp.n_layer = L; cp.n_kv_head = HK; cp.head_dim = g_d; cp.kv.kv_dtype = g_dt; cp.kv.kv_dtype_v = g_dtv; cp.kv.block_size = 4;
    cp.rope = (struct kvb_rope){KVB_ROPE_INTERLEAVED, g_d, 10000.0f, 1.0f, NULL};
    cp.kv.policy = kvb_policy_default_params(id);
    if (id != KVB_POLICY_FULL) cp.kv.policy.budget = budget;
    if (id == KVB_POLICY_SNAPKV || id == KVB_POLICY_PYRAMIDKV || id == KVB_POLICY_ADAKV) cp.kv.policy.obs_window = 4;
    cp.kv.keep = g_keep;
    cp.pool_bytes = 1 << 22;
    struct kvb_cache *c = NULL;
    if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) printf("  init: %s\n", kvb_last_error());
    return c;
}

static void step_inputs(unsigned long long seed, float *q, float *k, float *v) {
    unsigned long long rs = seed;
    for (int i = 0; i < HK * G * g_d; i++) q[i] = t_randf(&rs);
    for (int i = 0; i < HK * g_d; i++) { k[i] = t_randf(&rs); v[i] = t_randf(&rs); }
}

static void prefill(struct kvb_cache *c) {
    enum { P = 30 };
    static float q[P * HK * G * DMAX], k[P * HK * DMAX], v[P * HK * DMAX], o[P * HK * G * DMAX];
    unsigned long long rs = 42;
    for (int i = 0; i < P * HK * G * g_d; i++) q[i] = t_randf(&rs);
    for (int i = 0; i < P * HK * g_d; i++) { k[i] = t_randf(&rs); v[i] = t_randf(&rs); }
    for (int l = 0; l < L; l++) kvb_cache_prefill(c, l, P, q, HK * G, k, v, o, NULL);
    kvb_cache_compress(c, NULL);
}

/* Runs steps [from, to) and appends every output to outs. */
static void run_steps(struct kvb_cache *c, int from, int to, float *outs) {
    float q[HK * G * DMAX], k[HK * DMAX], v[HK * DMAX];
    for (int s = from; s < to; s++)
        for (int l = 0; l < L; l++) {
            step_inputs((unsigned long long)(s * 31 + l + 1), q, k, v);
            kvb_cache_decode(c, l, q, HK * G, k, v, outs + ((size_t)(s - from) * L + l) * HK * G * g_d, NULL);
        }
}

TEST(restore_continues_bit_identically) {
    enum { S1 = 40, S2 = 60 };
    static float out_a[S2 * L * HK * G * DMAX], out_b[S2 * L * HK * G * DMAX], scratch[S1 * L * HK * G * DMAX];
    /* f16 pages of 8 dims, then quantized pages of 32 (q8_0 K with q4_0 V, q4_0 K with bf16 V):
     * a quantized row is saved and restored as its blocks, never requantized */
    static const enum kvb_dtype kinds[3][2] = {{KVB_DTYPE_F16, KVB_DTYPE_AS_K}, {KVB_DTYPE_Q8_0, KVB_DTYPE_Q4_0}, {KVB_DTYPE_Q4_0, KVB_DTYPE_BF16}};
    for (int kind = 0; kind < 3; kind++)
    for (int id = 0; id < KVB_POLICY_COUNT; id++) {
        g_d = kind ? 32 : D;
        g_dt = kinds[kind][0];
        g_dtv = kinds[kind][1];
        struct kvb_cache *a = make((enum kvb_policy_id)id, 14), *b;
        prefill(a);
        run_steps(a, 0, S1, scratch);
        void *img;
        size_t len;
        CHECK_OK(kvb_cache_save(a, &img, &len));
        CHECK_OK(kvb_cache_load(NULL, img, len, 1 << 22, &b));
        kvb_buffer_free(img);
        run_steps(a, S1, S1 + S2, out_a);
        run_steps(b, S1, S1 + S2, out_b);
        if (memcmp(out_a, out_b, sizeof out_a) != 0)
            FAILF("policy %s, %s/%s pages: outputs differ after restore", kvb_policy_name((enum kvb_policy_id)id), kvb_dtype_name(g_dt), kvb_dtype_name(g_dtv));
        void *ia, *ib;
        size_t la, lb;
        CHECK_OK(kvb_cache_save(a, &ia, &la));
        CHECK_OK(kvb_cache_save(b, &ib, &lb));
        int same = la == lb && memcmp(ia, ib, la) == 0;
        kvb_buffer_free(ia);
        kvb_buffer_free(ib);
        if (!same) FAILF("policy %s: final images differ", kvb_policy_name((enum kvb_policy_id)id));
        kvb_cache_free(a);
        kvb_cache_free(b);
    }
    g_d = D;
    g_dt = KVB_DTYPE_F16;
    g_dtv = KVB_DTYPE_AS_K;
}

TEST(file_roundtrip) {
    struct kvb_cache *a = make(KVB_POLICY_H2O, 12), *b;
    static float outs[20 * L * HK * G * D];
    prefill(a);
    run_steps(a, 0, 20, outs);
    char path[] = "/tmp/kvb_test_cache_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK_OK(kvb_cache_save_file(a, path));
    CHECK_OK(kvb_cache_load_file(NULL, path, 1 << 22, &b));
    CHECK_EQ_INT(kvb_cache_n_slots(b, 1, 1), kvb_cache_n_slots(a, 1, 1));
    CHECK_EQ_INT(kvb_cache_n_past(b, 0), kvb_cache_n_past(a, 0));
    kvb_cache_free(b);
    remove(path);
    CHECK_STATUS(kvb_cache_load_file(NULL, path, 1 << 22, &b), KVB_ERR_IO);
    CHECK(strstr(kvb_last_error(), path) != NULL);
    CHECK_STATUS(kvb_cache_save_file(a, "/nonexistent-dir/x.kvb"), KVB_ERR_IO);
    kvb_cache_free(a);
}

TEST(every_truncation_and_flip_is_corrupt) {
    struct kvb_cache *a = make(KVB_POLICY_SCISSORHANDS, 10), *b = NULL;
    static float outs[15 * L * HK * G * D];
    prefill(a);
    run_steps(a, 0, 15, outs);
    uint8_t *img;
    size_t len;
    CHECK_OK(kvb_cache_save(a, (void **)&img, &len));
    for (size_t n = 0; n < len; n++) {
        kvb_status st = kvb_cache_load(NULL, img, n, 1 << 22, &b);
        if (st != KVB_ERR_CORRUPT) FAILF("truncated to %zu of %zu: status %d", n, len, (int)st);
    }
    uint8_t *mut = malloc(len);
    unsigned long long rs = 1;
    for (size_t i = 0; i < len; i++) {
        memcpy(mut, img, len);
        mut[i] ^= (uint8_t)(1u << (t_rng_next(&rs) % 8));
        kvb_status st = kvb_cache_load(NULL, mut, len, 1 << 22, &b);
        if (st != KVB_ERR_CORRUPT && st != KVB_ERR_UNSUPPORTED) FAILF("flip at %zu: status %d", i, (int)st);
    }
    free(mut);
    kvb_buffer_free(img);
    kvb_cache_free(a);
}

/* Valid checksum, hostile content: re-sign after editing a field. */
static kvb_status load_edited(const uint8_t *img, size_t len, size_t off, int32_t value) {
    uint8_t *m = malloc(len);
    memcpy(m, img, len);
    memcpy(m + off, &value, 4);
    uint32_t crc = kvb_crc32(0, m, len - 4);
    memcpy(m + len - 4, &crc, 4);
    struct kvb_cache *b = NULL;
    kvb_status st = kvb_cache_load(NULL, m, len, 1 << 22, &b);
    kvb_cache_free(b);
    free(m);
    return st;
}

TEST(signed_hostile_images_are_corrupt) {
    struct kvb_cache *a = make(KVB_POLICY_STREAMING, 10);
    static float outs[15 * L * HK * G * D];
    prefill(a);
    run_steps(a, 0, 15, outs);
    uint8_t *img;
    size_t len;
    CHECK_OK(kvb_cache_save(a, (void **)&img, &len));
    /* header: magic 8, version 4, flags 4, then n_layer at 16, n_kv_head 20, head_dim 24, dtype 28, dtype_v 32 */
    CHECK_STATUS(load_edited(img, len, 16, 1 << 30), KVB_ERR_CORRUPT);
    CHECK(strstr(kvb_last_error(), "n_layer") != NULL);
    CHECK_STATUS(load_edited(img, len, 16, -5), KVB_ERR_CORRUPT);
    CHECK_STATUS(load_edited(img, len, 20, 1 << 20), KVB_ERR_CORRUPT);
    CHECK_STATUS(load_edited(img, len, 24, 100000), KVB_ERR_CORRUPT);
    CHECK_STATUS(load_edited(img, len, 8, 99), KVB_ERR_UNSUPPORTED); /* version */
    /* first stream header follows params (policy: 16 fields; then max_distance
     * and n_state) and n_past[2] */
    size_t params_end = 16 + 7 * 4 + 5 * 4 + 16 * 4 + 4 + 4; /* no freq factors */
    CHECK_STATUS(load_edited(img, len, 32, 77), KVB_ERR_CORRUPT); /* dtype_v */
    CHECK(strstr(kvb_last_error(), "dtype_v 77") != NULL);
    CHECK_STATUS(load_edited(img, len, params_end - 8 - 4, 7), KVB_ERR_CORRUPT); /* tova_scope */
    CHECK(strstr(kvb_last_error(), "tova_scope") != NULL);
    size_t s0 = params_end + 2 * 8;
    CHECK_STATUS(load_edited(img, len, s0 + 12, 1 << 29), KVB_ERR_CORRUPT);  /* n */
    CHECK(strstr(kvb_last_error(), "stream 0") != NULL);
    CHECK_STATUS(load_edited(img, len, s0 + 16, 1 << 29), KVB_ERR_CORRUPT);  /* n_pages */
    CHECK_STATUS(load_edited(img, len, s0 + 20, 1 << 29), KVB_ERR_CORRUPT);  /* first slot's physical index */
    CHECK_STATUS(load_edited(img, len, s0 + 24, -7), KVB_ERR_CORRUPT);       /* first slot's position */
    kvb_buffer_free(img);
    kvb_cache_free(a);
}

/* A cache with a pinned span (kv.keep 6, budget 14) under every policy: its image
 * carries keep (flags 16), the restored cache continues bit-identically and
 * still holds positions 0..5; a cache without a span writes no flag 16 (its
 * image is as before). */
TEST(pinned_span_restored_bit_identically) {
    enum { S1 = 40, S2 = 60 };
    static float out_a[S2 * L * HK * G * DMAX], out_b[S2 * L * HK * G * DMAX], scratch[S1 * L * HK * G * DMAX];
    for (int id = 0; id < KVB_POLICY_COUNT; id++) {
        g_keep = 6;
        struct kvb_cache *a = make((enum kvb_policy_id)id, 14), *b;
        g_keep = 0;
        prefill(a);
        run_steps(a, 0, S1, scratch);
        void *img;
        size_t len;
        CHECK_OK(kvb_cache_save(a, &img, &len));
        uint32_t flags;
        memcpy(&flags, (const uint8_t *)img + 12, 4);
        CHECK(flags & 16u);
        CHECK_OK(kvb_cache_load(NULL, img, len, 1 << 22, &b));
        kvb_buffer_free(img);
        struct kvb_cache_params got;
        kvb_cache_get_params(b, &got);
        CHECK_EQ_INT(got.kv.keep, 6);
        run_steps(a, S1, S1 + S2, out_a);
        run_steps(b, S1, S1 + S2, out_b);
        if (memcmp(out_a, out_b, sizeof out_a) != 0) FAILF("policy %s: outputs differ after restore", kvb_policy_name((enum kvb_policy_id)id));
        for (int l = 0; l < L; l++)
            for (int h = 0; h < HK; h++)
                for (int j = 0; j < 6; j++) {
                    struct kvb_slot_info si;
                    CHECK_OK(kvb_cache_slot_info(b, l, h, j, &si));
                    if (si.pos_original != j) FAILF("policy %s: restored stream (%d,%d) lost pinned position %d", kvb_policy_name((enum kvb_policy_id)id), l, h, j);
                }
        kvb_cache_free(a);
        kvb_cache_free(b);
    }
    struct kvb_cache *c = make(KVB_POLICY_H2O, 10);
    void *img;
    size_t len;
    CHECK_OK(kvb_cache_save(c, &img, &len));
    uint32_t flags;
    memcpy(&flags, (const uint8_t *)img + 12, 4);
    CHECK_EQ_INT(flags & 16u, 0);
    kvb_buffer_free(img);
    kvb_cache_free(c);
    /* hostile keep fields, re-signed: refused by name */
    g_keep = 6;
    c = make(KVB_POLICY_H2O, 10);
    g_keep = 0;
    CHECK_OK(kvb_cache_save(c, &img, &len));
    const size_t at = 16 + 7 * 4 + 5 * 4 + 16 * 4 + 4 + 4; /* after n_state: no freq factors, no_rope or windows */
    int32_t kv;
    memcpy(&kv, (const uint8_t *)img + at, 4);
    CHECK_EQ_INT(kv, 6);
    CHECK_STATUS(load_edited(img, len, at, 0), KVB_ERR_CORRUPT);
    CHECK(strstr(kvb_last_error(), "keep 0") != NULL);
    CHECK_STATUS(load_edited(img, len, at, -3), KVB_ERR_CORRUPT);
    CHECK_STATUS(load_edited(img, len, at, KVB_KEEP_MAX + 1), KVB_ERR_CORRUPT);
    if (!strstr(kvb_last_error(), "kv.keep")) FAILF("error: %s", kvb_last_error());
    kvb_buffer_free(img);
    kvb_cache_free(c);
}

/* expected-attention's query statistics (flags 4096) close the image, one
 * block per stream (i32 g, i64 n, f32 [g][d + d^2]); a hostile g or n, or
 * the flag on a policy that keeps none, is refused by name. */
TEST(query_statistics_in_images_are_checked) {
    struct kvb_cache *a = make(KVB_POLICY_EXPECTED_ATTENTION, 10);
    static float outs[15 * L * HK * G * DMAX];
    prefill(a);
    run_steps(a, 0, 15, outs);
    uint8_t *img;
    size_t len;
    CHECK_OK(kvb_cache_save(a, (void **)&img, &len));
    uint32_t flags;
    memcpy(&flags, img + 12, 4);
    CHECK(flags & 4096u);
    const size_t blk = 4 + 8 + 4 * (size_t)G * (D + D * D), first = len - 4 - (size_t)L * HK * blk;
    int32_t g0;
    int64_t n0;
    memcpy(&g0, img + first, 4);
    memcpy(&n0, img + first + 4, 8);
    CHECK_EQ_INT(g0, G);
    CHECK_EQ_INT(n0, 30 + 15 - 4); /* every query from position n_sink (4) on */
    CHECK_STATUS(load_edited(img, len, first, 1025), KVB_ERR_CORRUPT); /* more heads than a KV head serves (KVB_CACHE_MAX_GROUP) */
    CHECK(strstr(kvb_last_error(), "query statistics") != NULL);
    CHECK_STATUS(load_edited(img, len, first + 8, -1), KVB_ERR_CORRUPT); /* n's high word: n < 0 */
    CHECK(strstr(kvb_last_error(), "query statistics") != NULL);
    CHECK_STATUS(load_edited(img, len, first, 0), KVB_ERR_CORRUPT);      /* g 0: the stream's n and stats are trailing bytes */
    kvb_buffer_free(img);
    kvb_cache_free(a);
    a = make(KVB_POLICY_STREAMING, 10);
    prefill(a);
    CHECK_OK(kvb_cache_save(a, (void **)&img, &len));
    memcpy(&flags, img + 12, 4);
    CHECK(!(flags & 4096u));
    CHECK_STATUS(load_edited(img, len, 12, (int32_t)(flags | 4096u)), KVB_ERR_CORRUPT);
    CHECK(strstr(kvb_last_error(), "query statistics for policy streaming") != NULL);
    kvb_buffer_free(img);
    kvb_cache_free(a);
}

int main(void) {
    RUN(restore_continues_bit_identically);
    RUN(file_roundtrip);
    RUN(every_truncation_and_flip_is_corrupt);
    RUN(signed_hostile_images_are_corrupt);
    RUN(query_statistics_in_images_are_checked);
    RUN(pinned_span_restored_bit_identically);
    return test_summary();
}
