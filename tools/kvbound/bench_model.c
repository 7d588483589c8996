/*
 * bench_model.c — `kvbound bench decode` and `kvbound bench prefill` on a
 * model file. Decode reports tok/s and the roofline fraction: (weight bytes
 * read per token + KV bytes read per token) x tok/s / the machine's read
 * bandwidth, measured in the same run. Prefill reports tok/s, achieved
 * GFLOP/s (2 flops per weight per token + attention) and this CPU's FMA peak,
 * measured in the same run with independent FMA chains on every thread.
 */
#include "cli.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include "ops/ops.h"

struct fma_job {
    double flops[64];
    int64_t iters;
};

#if defined(__x86_64__)
__attribute__((target("avx512f,fma"))) static double fma_loop512(int64_t iters) {
    __m512 a[12], m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
    for (int k = 0; k < 12; k++) a[k] = _mm512_set1_ps((float)k);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < 12; k++) a[k] = _mm512_fmadd_ps(a[k], m, c);
    __m512 s = a[0];
    for (int k = 1; k < 12; k++) s = _mm512_add_ps(s, a[k]);
    return (double)_mm512_reduce_add_ps(s);
}
#endif

static void fma_worker(int32_t ith, int32_t nth, void *arg) {
    (void)nth;
    struct fma_job *j = arg;
    double s = 0;
#if defined(__x86_64__)
    if (kvb_cpu_has_avx512()) s = fma_loop512(j->iters);
#endif
    j->flops[ith % 64] = s;
}

/* FLOP/s of FMA on every thread (AVX-512: 12 chains x 16 lanes x 2 flops). */
static double fma_peak(struct kvb_threadpool *tp) {
#if defined(__x86_64__)
    if (!kvb_cpu_has_avx512()) return 0;
    struct fma_job j;
    memset(&j, 0, sizeof j);
    j.iters = 20 * 1000 * 1000;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = cli_now_sec();
        kvb_threadpool_run(tp, fma_worker, &j);
        double dt = cli_now_sec() - t0;
        double fl = (double)j.iters * 12 * 16 * 2 * kvb_threadpool_n_threads(tp) / dt;
        if (fl > best) best = fl;
    }
    return best;
#else
    (void)tp;
    return 0;
#endif
}

/* Resident set size in bytes (Linux /proc/self/statm), 0 if unknown. */
static long long rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long long pages = 0, res = 0;
    if (!f) return 0;
    if (fscanf(f, "%lld %lld", &pages, &res) != 2) res = 0;
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

/* `kvbound bench stream`: decode with streaming at a fixed budget for n
 * tokens; tok/s over windows of 1000 tokens around token 2,000 and at the
 * end, and resident memory at both points. */
int bench_stream(int argc, char **argv) {
    const char *model = NULL, *tok = NULL;
    int threads = 1, n = 100000, budget = 1024;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: kvbound bench stream -m MODEL [-z TOKENIZER.bin] [-n TOKENS (100000)] [--budget N (1024)] [-t THREADS] [--json]\n");
            return 0;
        }
        if (!strcmp(a, "--json")) continue;
        if (!(v = cli_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer")) tok = v;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (cli_parse_i32(a, v, 1, 1024, &threads)) return 2; }
        else if (!strcmp(a, "-n")) { if (cli_parse_i32(a, v, 4000, 1 << 30, &n)) return 2; }
        else if (!strcmp(a, "--budget")) { if (cli_parse_i32(a, v, 8, 1 << 24, &budget)) return 2; }
        else { fprintf(stderr, "kvbound bench stream: unknown option '%s'\n", a); return 2; }
    }
    if (!model) { fprintf(stderr, "kvbound bench stream: -m MODEL is required\n"); return 2; }
    struct kvb_model_params mp = kvb_model_default_params();
    mp.tokenizer_path = tok;
    struct kvb_model *m;
    if (kvb_model_load(model, &mp, &m) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
    struct kvb_context_params cp = kvb_context_default_params();
    cp.policy = kvb_policy_default_params(KVB_POLICY_STREAMING);
    cp.policy.budget = budget;
    cp.n_threads = threads;
    size_t per_tok = (size_t)m->info.n_layer * m->info.n_head_kv * m->info.head_dim * 2 * 2;
    cp.kv_pool_bytes = per_tok * (size_t)(budget + 512) + ((size_t)16 << 20);
    struct kvb_context *c;
    if (kvb_context_init(m, &cp, &c) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
    float *logits = malloc(sizeof(float) * (size_t)m->info.n_vocab);
    double t_a0 = 0, t_a1 = 0, t_b0 = 0;
    long long rss_a = 0;
    int32_t t = 1;
    for (int i = 0; i < n; i++) {
        if (i == 1500) t_a0 = cli_now_sec();
        if (i == 2500) { t_a1 = cli_now_sec(); rss_a = rss_bytes(); }
        if (i == n - 1000) t_b0 = cli_now_sec();
        if (kvb_context_eval(c, &t, 1, logits, false) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
        int best = 0;
        for (int k = 1; k < m->info.n_vocab; k++)
            if (logits[k] > logits[best]) best = k;
        t = best;
        if (i % 10000 == 0) fprintf(stderr, "\rkvbound: %d/%d tokens", i, n);
    }
    double t_b1 = cli_now_sec();
    long long rss_b = rss_bytes();
    fprintf(stderr, "\n");
    double a = 1000 / (t_a1 - t_a0), b = 1000 / (t_b1 - t_b0);
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(kvb_context_cache(c), &cs);
    printf("{\"bench\":\"stream\",\"model\":\"%s\",\"budget\":%d,\"tokens\":%d,\"threads\":%d,\"tok_per_s_at_2000\":%.1f,"
           "\"tok_per_s_at_end\":%.1f,\"ratio\":%.3f,\"rss_at_2000\":%lld,\"rss_at_end\":%lld,\"rss_growth\":%lld,\"kv_bytes\":%zu,\"kv_peak\":%zu}\n",
           model, budget, n, threads, a, b, b / a, rss_a, rss_b, rss_b - rss_a, cs.bytes_used, cs.bytes_peak);
    free(logits);
    kvb_context_free(c);
    kvb_model_free(m);
    return 0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int bench_model(int argc, char **argv, bool prefill) {
    const char *model = NULL;
    int threads = 2, n = 64, chunk = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: kvbound bench %s -m MODEL [-t THREADS] [-n TOKENS] [--chunk C] [--json]\n", prefill ? "prefill" : "decode");
            return 0;
        }
        if (!strcmp(a, "--json")) continue;
        if (!(v = cli_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (cli_parse_i32(a, v, 1, 1024, &threads)) return 2; }
        else if (!strcmp(a, "-n")) { if (cli_parse_i32(a, v, 1, 1 << 20, &n)) return 2; }
        else if (!strcmp(a, "--chunk")) { if (cli_parse_i32(a, v, 1, 8192, &chunk)) return 2; }
        else { fprintf(stderr, "kvbound bench: unknown option '%s'\n", a); return 2; }
    }
    if (!model) { fprintf(stderr, "kvbound bench: -m MODEL is required\n"); return 2; }
    struct kvb_model *m;
    if (kvb_model_load(model, NULL, &m) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
    const struct kvb_model_info *in = &m->info;
    struct kvb_context_params cp = kvb_context_default_params();
    cp.n_threads = threads;
    cp.chunk = chunk;
    cp.n_ctx = prefill ? chunk * 3 + 8 : n + 16;
    size_t per_tok = (size_t)in->n_layer * in->n_head_kv * in->head_dim * 2 * 2;
    cp.kv_pool_bytes = per_tok * (size_t)(cp.n_ctx + 64) + ((size_t)16 << 20);
    struct kvb_context *c;
    if (kvb_context_init(m, &cp, &c) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
    float *logits = malloc(sizeof(float) * (size_t)in->n_vocab);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(chunk * 3 + n + 8));
    for (int i = 0; i < chunk * 3 + n + 8; i++) toks[i] = 1 + (i * 7919) % (in->n_vocab - 1);
    /* weights read per token: every matrix once, one embedding row */
    double w_bytes = (double)in->weight_bytes - (double)m->tok_embd.n_out * (double)m->tok_embd.row_bytes * (in->tied_output ? 0 : 1);
    char cpu[256];
    cpu_model_name(cpu, sizeof cpu);
    struct kvb_threadpool *tp = NULL;
    kvb_threadpool_init(threads, &tp);
    if (!prefill) {
        kvb_context_eval(c, toks, 1, logits, false);
        double *dt = malloc(sizeof(double) * (size_t)n);
        double kv_read = 0;
        for (int i = 0; i < n; i++) {
            double t0 = cli_now_sec();
            if (kvb_context_eval(c, &toks[i + 1], 1, logits, false) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
            dt[i] = cli_now_sec() - t0;
            kv_read += (double)(i + 2) * (double)per_tok;
        }
        qsort(dt, (size_t)n, sizeof(double), cmp_d);
        double med = dt[n / 2], tps = 1.0 / med;
        double bw = membw_read_gbs(tp, (size_t)1 << 30, 5);
        double bytes = w_bytes + kv_read / n;
        printf("{\"bench\":\"decode\",\"model\":\"%s\",\"weights\":\"%s\",\"threads\":%d,\"tokens\":%d,\"kernels\":\"%s\",\"tok_per_s\":%.2f,"
               "\"ms_per_token_median\":%.3f,\"bytes_per_token\":%.0f,\"machine_read_gbs\":%.2f,\"roofline_fraction\":%.3f,\"cpu\":\"%s\"}\n",
               model, ggml_type_name(in->weight_type), threads, n, kvb_kernels_name(), tps, med * 1e3, bytes, bw,
               bw > 0 ? bytes * tps / (bw * 1e9) : 0, cpu);
        free(dt);
    } else {
        double best = 1e30;
        for (int r = 0; r < 3; r++) {
            kvb_context_reset(c);
            double t0 = cli_now_sec();
            if (kvb_context_eval(c, toks, chunk, logits, false) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
            double d = cli_now_sec() - t0;
            if (d < best) best = d;
        }
        double params = w_bytes / ((double)ggml_type_size(in->weight_type) / (double)ggml_blck_size(in->weight_type));
        double attn = 2.0 * 2.0 * in->n_layer * (double)in->n_head * in->head_dim * chunk * (chunk + 1) / 2.0;
        double flops = 2.0 * params * chunk + attn;
        double peak = fma_peak(tp);
        printf("{\"bench\":\"prefill\",\"model\":\"%s\",\"weights\":\"%s\",\"threads\":%d,\"chunk\":%d,\"kernels\":\"%s\",\"tok_per_s\":%.2f,"
               "\"gflops\":%.2f,\"fma_peak_gflops\":%.2f,\"peak_fraction\":%.3f,\"cpu\":\"%s\"}\n",
               model, ggml_type_name(in->weight_type), threads, chunk, kvb_kernels_name(), chunk / best, flops / best / 1e9,
               peak / 1e9, peak > 0 ? flops / best / peak : 0, cpu);
    }
    kvb_threadpool_free(tp);
    free(logits);
    free(toks);
    kvb_context_free(c);
    kvb_model_free(m);
    return 0;
}
