/* test_core.c — f16 conversion, CRC-32, status strings, thread pool. */
#include "testing.h"
#include "core/core.h"
#include "ops/ops.h"

#include <stdatomic.h>

TEST(f16_roundtrip_every_half) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kvb_f16_to_f32((uint16_t)h);
        uint16_t back = kvb_f32_to_f16(f);
        if (f != f) { /* NaN stays NaN */
            CHECK((back & 0x7c00) == 0x7c00 && (back & 0x3ff));
            continue;
        }
        if (back != h) FAILF("half 0x%04x -> %g -> 0x%04x", h, (double)f, back);
    }
}

TEST(f16_known_values) {
    CHECK_EQ_INT(kvb_f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ_INT(kvb_f32_to_f16(-2.0f), 0xc000);
    CHECK_EQ_INT(kvb_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ_INT(kvb_f32_to_f16(65520.0f), 0x7c00);      /* rounds to inf */
    CHECK_EQ_INT(kvb_f32_to_f16(5.960464477539063e-8f), 0x0001); /* smallest subnormal */
    CHECK_EQ_INT(kvb_f32_to_f16(2.98023223876953125e-8f), 0x0000); /* half of it: ties to even -> 0 */
    CHECK_EQ_INT(kvb_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie -> even */
    CHECK_EQ_INT(kvb_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02); /* tie -> even (up) */
    CHECK_NEAR(kvb_f16_to_f32(0x3555), 0.333251953125, 0);
}

/* Every kernel family's f16 conversion equals the scalar one, bit for bit. */
TEST(f16_kernels_match_scalar) {
    const struct kvb_kernels *fams[3] = {&kvb_kernels_ref, NULL, NULL};
#if defined(__x86_64__)
    if (kvb_cpu_has_avx2()) fams[1] = &kvb_kernels_avx2;
    if (kvb_cpu_has_avx512()) fams[2] = &kvb_kernels_avx512;
#endif
    unsigned long long rs = 7;
    enum { N = 4099 };
    static float src[N], back[N];
    static uint16_t h[N];
    for (int i = 0; i < N; i++) {
        float scale = (float)pow(2.0, (double)((int)(t_rng_next(&rs) % 40) - 28));
        src[i] = t_randf(&rs) * scale;
    }
    for (int f = 0; f < 3; f++) {
        if (!fams[f]) continue;
        fams[f]->to_f16(src, h, N);
        for (int i = 0; i < N; i++)
            if (h[i] != kvb_f32_to_f16(src[i])) FAILF("%s to_f16(%g) = 0x%04x, scalar 0x%04x", fams[f]->name, (double)src[i], h[i], kvb_f32_to_f16(src[i]));
        fams[f]->from_f16(h, back, N);
        for (int i = 0; i < N; i++)
            if (back[i] != kvb_f16_to_f32(h[i])) FAILF("%s from_f16 mismatch at %d", fams[f]->name, i);
    }
}

TEST(crc32_check_value) {
    CHECK_EQ_INT(kvb_crc32(0, "123456789", 9), 0xCBF43926u);
    uint32_t part = kvb_crc32(0, "12345", 5);
    CHECK_EQ_INT(kvb_crc32(part, "6789", 4), 0xCBF43926u);
}

TEST(status_strings) {
    CHECK(strcmp(kvb_status_str(KVB_OK), "ok") == 0);
    CHECK(strcmp(kvb_status_str(KVB_ERR_CORRUPT), "corrupt input") == 0);
    CHECK(strcmp(kvb_status_str((kvb_status)-99), "unknown status") == 0);
    CHECK_STATUS(kvb_threadpool_init(0, NULL), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "n_threads") != NULL);
}

struct tp_arg {
    atomic_int seen[8];
    atomic_int calls;
};
static void tp_fn(int32_t ith, int32_t nth, void *p) {
    struct tp_arg *a = p;
    if (nth == 3 && ith < 8) atomic_fetch_add(&a->seen[ith], 1);
    atomic_fetch_add(&a->calls, 1);
}

TEST(threadpool_runs_every_thread) {
    struct kvb_threadpool *tp;
    CHECK_OK(kvb_threadpool_init(3, &tp));
    struct tp_arg a;
    memset(&a, 0, sizeof a);
    for (int r = 0; r < 1000; r++) kvb_threadpool_run(tp, tp_fn, &a);
    kvb_threadpool_free(tp);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(atomic_load(&a.seen[i]), 1000);
    CHECK_EQ_INT(atomic_load(&a.calls), 3000);
    kvb_threadpool_run(NULL, tp_fn, &a); /* NULL pool runs inline */
    CHECK_EQ_INT(atomic_load(&a.calls), 3001);
}

int main(void) {
    RUN(f16_roundtrip_every_half);
    RUN(f16_known_values);
    RUN(f16_kernels_match_scalar);
    RUN(crc32_check_value);
    RUN(status_strings);
    RUN(threadpool_runs_every_thread);
    return test_summary();
}
