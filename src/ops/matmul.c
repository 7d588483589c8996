/* matmul.c — the threaded driver and the dispatch of the dot kernels. */
#include "matmul.h"

#include <stdlib.h>

static const struct kvb_dot_kernels *g_dot;

const struct kvb_dot_kernels *kvb_dot_kernels(void) {
    if (!g_dot) {
        const struct kvb_kernels *k = kvb_kernels(); /* same choice as attention */
        g_dot = &kvb_dot_ref;
#if defined(__x86_64__)
        if (!strcmp(k->name, "avx512")) g_dot = &kvb_dot_avx512;
        else if (!strcmp(k->name, "avx2")) g_dot = &kvb_dot_avx2;
#else
        (void)k;
#endif
    }
    return g_dot;
}

void kvb_matmul_redispatch(void);
void kvb_matmul_redispatch(void) { g_dot = NULL; }

bool kvb_matmul_supports(uint32_t type) { return type < GGML_TYPE_COUNT && kvb_dot_ref.dot[type] != NULL; }

void kvb_matmul_rows(const struct kvb_dot_kernels *k, const struct kvb_mat *w, const float *x, int64_t ldx, float *y,
                     int64_t ldy, int32_t T, int64_t r0, int64_t r1) {
    kvb_dot_fn dot = k->dot[w->type] ? k->dot[w->type] : kvb_dot_ref.dot[w->type];
    for (int64_t r = r0; r < r1; r++) {
        const void *row = w->data + (size_t)r * w->row_bytes;
        for (int32_t t = 0; t < T; t++) y[(size_t)t * ldy + r] = dot(row, x + (size_t)t * ldx, w->n_in);
    }
}

struct mm_job {
    const struct kvb_mat *w;
    const float *x;
    float *y;
    int64_t ldx, ldy;
    int32_t T;
};

static void mm_worker(int32_t ith, int32_t nth, void *arg) {
    struct mm_job *j = arg;
    const int64_t n = j->w->n_out;
    const int64_t per = (n + nth - 1) / nth;
    const int64_t r0 = per * ith, r1 = KVB_MIN(n, r0 + per);
    if (r0 < r1) kvb_matmul_rows(kvb_dot_kernels(), j->w, j->x, j->ldx, j->y, j->ldy, j->T, r0, r1);
}

void kvb_matmul(struct kvb_threadpool *tp, const struct kvb_mat *w, const float *x, int64_t ldx, float *y, int64_t ldy, int32_t T) {
    struct mm_job j = {w, x, y, ldx, ldy, T};
    /* small matrices: threads cost more than they save */
    if (w->n_out * w->n_in * (int64_t)T < (1 << 16)) mm_worker(0, 1, &j);
    else kvb_threadpool_run(tp, mm_worker, &j);
}
