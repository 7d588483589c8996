/*
 * bench_model.c — `kvbound bench decode` and `kvbound bench prefill` on a
 * model file. Decode reports tok/s and the roofline fraction: (weight bytes
 * read per token + KV bytes read per token) x tok/s / the machine's read
 * bandwidth, measured in the same run. Prefill reports tok/s, achieved
 * GFLOP/s (2 flops per weight per token + attention) and this CPU's FMA peak,
 * measured in the same run with independent FMA chains on every thread.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

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
__attribute__((target("avx2,fma"))) static double fma_loop256(int64_t iters) {
    __m256 a[12], m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);
    for (int k = 0; k < 12; k++) a[k] = _mm256_set1_ps((float)k);
    for (int64_t i = 0; i < iters; i++)
        for (int k = 0; k < 12; k++) a[k] = _mm256_fmadd_ps(a[k], m, c);
    __m256 s = a[0];
    for (int k = 1; k < 12; k++) s = _mm256_add_ps(s, a[k]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return (double)(out[0] + out[7]);
}
#endif

static int fma_lanes(void) {
#if defined(__x86_64__)
    if (kvb_cpu_has_avx512()) return 16;
    if (kvb_cpu_has_avx2()) return 8;
#endif
    return 0;
}

static void fma_worker(int32_t ith, int32_t nth, void *arg) {
    (void)nth;
    struct fma_job *j = arg;
    double s = 0;
#if defined(__x86_64__)
    if (kvb_cpu_has_avx512()) s = fma_loop512(j->iters);
    else if (kvb_cpu_has_avx2()) s = fma_loop256(j->iters);
#endif
    j->flops[ith % 64] = s;
}

/* FLOP/s of FMA on every thread (12 independent chains x 16 (AVX-512) or 8
 * (AVX2) lanes x 2 flops). */
static double fma_peak(struct kvb_threadpool *tp) {
#if defined(__x86_64__)
    const int lanes = fma_lanes();
    if (!lanes) return 0;
    struct fma_job j;
    memset(&j, 0, sizeof j);
    j.iters = 20 * 1000 * 1000;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = cli_now_sec();
        kvb_threadpool_run(tp, fma_worker, &j);
        double dt = cli_now_sec() - t0;
        double fl = (double)j.iters * 12 * lanes * 2 * kvb_threadpool_n_threads(tp) / dt;
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

static int cmp_d(const void *a, const void *b);

/* Decodes n tokens greedily with one policy, recording each token's latency
 * and the RSS at the checkpoints. */
static int stream_run(struct kvb_model *m, enum kvb_policy_id id, int budget, int threads, int64_t n, double *lat, long long *rss,
                      const int64_t *cps, int ncp) {
    struct kvb_context_params cp = kvb_context_default_params();
    cp.policy = kvb_policy_default_params(id);
    if (id != KVB_POLICY_FULL) cp.policy.budget = budget;
    cp.n_threads = threads;
    cp.n_ctx = (int32_t)(n + 16);
    struct kvb_model_info mi;
    kvb_model_get_info(m, &mi);
    size_t per_tok = (size_t)mi.n_layer * mi.n_head_kv * mi.head_dim * 2 * 2;
    cp.kv_pool_bytes = per_tok * (size_t)((id == KVB_POLICY_FULL ? n : budget) + 512) + ((size_t)16 << 20);
    struct kvb_context *c;
    if (kvb_context_init(m, &cp, &c) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return -1; }
    float *logits = cli_xmalloc(sizeof(float) * (size_t)mi.n_vocab, "logits");
    int32_t t = 1;
    int k = 0;
    for (int64_t i = 0; i < n; i++) {
        double t0 = cli_now_sec();
        if (kvb_context_eval(c, &t, 1, logits, false) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); free(logits); kvb_context_free(c); return -1; }
        lat[i] = cli_now_sec() - t0;
        int best = 0;
        for (int v = 1; v < mi.n_vocab; v++)
            if (logits[v] > logits[best]) best = v;
        t = best == kvb_vocab_special(kvb_model_vocab(m), KVB_SPECIAL_BOS) ? 13 % mi.n_vocab : best;
        if (k < ncp && i + 1 == cps[k]) rss[k++] = rss_bytes();
        if (i % 10000 == 0 && isatty(2)) fprintf(stderr, "\rkvbound: %s %lld/%lld", kvb_policy_name(id), (long long)i, (long long)n);
    }
    if (isatty(2)) fprintf(stderr, "\n");
    free(logits);
    kvb_context_free(c);
    return 0;
}

static void pct(const double *lat, int64_t end, double *p50, double *p99) {
    int64_t w = end < 500 ? end : 500;
    double *tmp = cli_xmalloc(sizeof(double) * (size_t)w, "latency percentiles");
    memcpy(tmp, lat + end - w, sizeof(double) * (size_t)w);
    qsort(tmp, (size_t)w, sizeof(double), cmp_d);
    *p50 = tmp[w / 2];
    *p99 = tmp[(w * 99) / 100 < w ? (w * 99) / 100 : w - 1];
    free(tmp);
}

/* `kvbound bench stream`: per-token decode latency (p50, p99 over the 500
 * tokens before each checkpoint) and RSS at 1K, 10K, 100K (and 1M with
 * --long) for streaming; the same for full up to --full-max tokens; and the
 * speedup of streaming over recomputing the last `budget` tokens per token
 * (StreamingLLM's sliding window with recompute). */
int bench_stream(int argc, char **argv) {
    const char *model = NULL, *tok = NULL;
    int threads = 1, budget = 1024;
    long long full_max = 10000;
    bool longrun = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: kvbound bench stream -m MODEL [-z TOKENIZER.bin] [--budget N] [--full-max N] [--long] [-t N] [--json]\n"
                   "\n"
                   "Decodes greedily from one token, with no prompt, under policy streaming (--budget N tokens per\n"
                   "stream, default 1024, the policy's sinks), timing every token: p50_ms and p99_ms over the 500\n"
                   "tokens before each checkpoint, and rss (the process's resident bytes) there, at 1,000, 10,000 and\n"
                   "100,000 tokens (and 1,000,000 with --long). Then the same under policy full, at the checkpoints up\n"
                   "to --full-max tokens (default 10000; below 1000: none). Then StreamingLLM's sliding window with\n"
                   "recompute: the time to read a window of N tokens afresh, as it does for each new token\n"
                   "(recompute_ms_per_token, the mean of 5), and speedup_vs_recompute, that over streaming's p50 at\n"
                   "the last checkpoint (streaming_p50_ms). Prints one JSON object (with or without --json).\n"
                   "\n"
                   "  -m, --model FILE      GGUF model or llama2.c checkpoint\n"
                   "  -z, --tokenizer FILE  llama2.c tokenizer.bin (for .bin checkpoints)\n"
                   "  --budget N            streaming's tokens per stream, and the recompute window (default 1024)\n"
                   "  --full-max N          the last checkpoint policy full runs to (default 10000)\n"
                   "  --long                add the 1,000,000-token checkpoint\n"
                   "  -t, --threads N       threads (default 1)\n");
            return 0;
        }
        if (!strcmp(a, "--json")) continue;
        if (!strcmp(a, "--long")) { longrun = true; continue; }
        if (!(v = cli_opt_value("bench stream", "-m --model -z --tokenizer -t --threads --budget --full-max", argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer")) tok = v;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (cli_parse_i32(a, v, 1, 1024, &threads)) return 2; }
        else if (!strcmp(a, "--budget")) { if (cli_parse_i32(a, v, 8, 1 << 24, &budget)) return 2; }
        else if (!strcmp(a, "--full-max")) { if (cli_parse_i64(a, v, 0, 1LL << 30, &full_max)) return 2; }
        else { fprintf(stderr, "kvbound bench stream: unknown option '%s'\n", a); return 2; }
    }
    if (!model) { fprintf(stderr, "kvbound bench stream: -m MODEL is required\n"); return 2; }
    struct kvb_model_params mp = kvb_model_default_params();
    mp.tokenizer_path = tok;
    struct kvb_model *m;
    if (kvb_model_load(model, &mp, &m) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
    const int64_t cps[4] = {1000, 10000, 100000, 1000000};
    const int ncp = longrun ? 4 : 3;
    const int64_t n = cps[ncp - 1];
    double *lat = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; lat && i < n; i++) lat[i] = -1.0; /* touch it now (non-zero: a zero memset becomes calloc): RSS then measures the engine */
    long long rss[4] = {0}, rss_f[4] = {0};
    if (!lat || stream_run(m, KVB_POLICY_STREAMING, budget, threads, n, lat, rss, cps, ncp)) return 1;
    printf("{\"bench\":\"stream\",\"model\":\"%s\",\"budget\":%d,\"threads\":%d,\"streaming\":[", model, budget, threads);
    double p50_end = 0;
    for (int k = 0; k < ncp; k++) {
        double p50, p99;
        pct(lat, cps[k], &p50, &p99);
        p50_end = p50;
        printf("%s{\"tokens\":%lld,\"p50_ms\":%.4f,\"p99_ms\":%.4f,\"rss\":%lld}", k ? "," : "", (long long)cps[k], p50 * 1e3, p99 * 1e3, rss[k]);
    }
    printf("],\"full\":[");
    int nf = 0;
    while (nf < ncp && cps[nf] <= full_max) nf++;
    if (nf && stream_run(m, KVB_POLICY_FULL, 0, threads, cps[nf - 1], lat, rss_f, cps, nf) == 0)
        for (int k = 0; k < nf; k++) {
            double p50, p99;
            pct(lat, cps[k], &p50, &p99);
            printf("%s{\"tokens\":%lld,\"p50_ms\":%.4f,\"p99_ms\":%.4f,\"rss\":%lld}", k ? "," : "", (long long)cps[k], p50 * 1e3, p99 * 1e3, rss_f[k]);
        }
    /* recompute: the last `budget` tokens from scratch for every new token */
    struct kvb_model_info mi;
    kvb_model_get_info(m, &mi);
    struct kvb_context_params cp = kvb_context_default_params();
    cp.n_threads = threads;
    cp.chunk = budget;
    cp.n_ctx = budget + 8;
    struct kvb_context *c;
    double rec = 0;
    if (kvb_context_init(m, &cp, &c) == KVB_OK) {
        int32_t *toks = cli_xmalloc(sizeof(int32_t) * (size_t)budget, "tokens");
        for (int i = 0; i < budget; i++) toks[i] = 1 + (i * 7919) % (mi.n_vocab - 1);
        float *lg = cli_xmalloc(sizeof(float) * (size_t)mi.n_vocab, "logits");
        const int reps = 5;
        double t0 = cli_now_sec();
        for (int r = 0; r < reps; r++) {
            kvb_context_reset(c);
            kvb_context_eval(c, toks, budget, lg, false);
        }
        rec = (cli_now_sec() - t0) / reps;
        free(toks);
        free(lg);
        kvb_context_free(c);
    }
    printf("],\"recompute_ms_per_token\":%.3f,\"streaming_p50_ms\":%.4f,\"speedup_vs_recompute\":%.1f}\n", rec * 1e3, p50_end * 1e3,
           p50_end > 0 ? rec / p50_end : 0);
    free(lat);
    kvb_model_free(m);
    return 0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void model_usage(FILE *f, bool prefill) {
    if (prefill) {
        fprintf(f, "usage: kvbound bench prefill -m MODEL [-t THREADS] [--chunk C] [--no-mmap] [--json]\n\n"
                   "Times one prompt chunk of C tokens (best of 3); prints JSON: tok_per_s, gflops,\n"
                   "fma_peak_gflops (this CPU's f32 FMA peak, measured in the same run), peak_fraction\n"
                   "(gflops over it: Q8_0 prompts run on int8 tiles, where it can pass 1).\n"
                   "  --no-mmap       read the weights into memory (huge pages) instead of mapping the file\n");
        return;
    }
    fprintf(f, "usage: kvbound bench decode -m MODEL [-t THREADS] [-n TOKENS] [--depth D] [--policy P --budget B ...]\n"
               "                            [--chunk C] [--kv-dtype T | --kv-dtype-k T --kv-dtype-v T] [--no-mmap] [--json]\n\n"
               "Reads a D-token prompt (default 0; in chunks of C, a bounded policy evicting\n"
               "between chunks), then times N decode steps (default 64); prints JSON: tok_per_s\n"
               "(from the median step), bytes_per_token (weights + the KV rows attended),\n"
               "machine_read_gbs (measured in the same run), roofline_fraction, depth,\n"
               "cache_tokens (retained per stream at the end), prefill_s.\n"
               "  --policy NAME   cache policy (default full); its options as in 'kvbound run --help'\n"
               "  --kv-dtype T    KV rows: f16 (default), bf16, f32, q8_0, q4_0 (--kv-dtype-k T, --kv-dtype-v T apart)\n"
               "  --no-mmap       read the weights into memory (huge pages) instead of mapping the file\n"
               "With --recall the decode steps alternate, 8 at a time, between recall paused and on (one context,\n"
               "one run): tok_per_s is with recall; the JSON adds tok_per_s_without_recall, recall_cost_ratio\n"
               "(median step with / without), recall_score_ms_per_token, recall_load_ms_per_token, cold_pages,\n"
               "cold_mem_bytes, cold_file_bytes and recall_bytes.\n");
    cli_recall_help(f, 1024);
}

int bench_model(int argc, char **argv, bool prefill) {
    const char *model = NULL;
    int threads = 2, n = 64, chunk = 256, depth = 0;
    struct kvb_model_params mp = kvb_model_default_params();
    enum kvb_policy_id pid = KVB_POLICY_FULL;
    struct cli_kv_types kvt;
    cli_kv_types_init(&kvt, KVB_DTYPE_F16);
    struct cli_policy po;
    cli_policy_init(&po, 1024);
    struct cli_recall rec;
    cli_recall_init(&rec);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            model_usage(stdout, prefill);
            return 0;
        }
        if (!strcmp(a, "--json")) continue;
        if (!strcmp(a, "--no-mmap")) { mp.no_mmap = true; continue; }
        if (!prefill) {
            int pr = cli_policy_option(&po, argc, argv, &i);
            if (pr == 0) pr = cli_kv_types_option(&kvt, argc, argv, &i);
            if (pr == 0) pr = cli_recall_option(&rec, argc, argv, &i);
            if (pr < 0) return 2;
            if (pr > 0) continue;
        }
        if (!(v = cli_opt_value(prefill ? "bench prefill" : "bench decode", prefill ? "-m --model -t --threads -n --chunk" : "-m --model --depth --policy -t --threads -n --chunk",
                                argc, argv, &i)))
            return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!prefill && !strcmp(a, "--depth")) { if (cli_parse_i32(a, v, 0, 1 << 22, &depth)) return 2; }
        else if (!prefill && !strcmp(a, "--policy")) {
            if (kvb_policy_from_name(v, &pid) != KVB_OK) { fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error()); return 2; }
        }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (cli_parse_i32(a, v, 1, 1024, &threads)) return 2; }
        else if (!strcmp(a, "-n")) { if (cli_parse_i32(a, v, 1, 1 << 20, &n)) return 2; }
        else if (!strcmp(a, "--chunk")) { if (cli_parse_i32(a, v, 1, 8192, &chunk)) return 2; }
        else { fprintf(stderr, "kvbound bench: unknown option '%s'\n", a); return 2; }
    }
    if (!model) { fprintf(stderr, "kvbound bench: -m MODEL is required\n"); return 2; }
    struct kvb_model *m;
    if (kvb_model_load(model, &mp, &m) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
    struct kvb_model_info info;
    kvb_model_get_info(m, &info);
    const struct kvb_model_info *in = &info;
    struct kvb_context_params cp = kvb_context_default_params();
    cp.n_threads = threads;
    cp.chunk = chunk;
    cp.kv_dtype = kvt.k;
    cp.kv_dtype_v = kvt.v;
    cp.n_ctx = prefill ? chunk * 3 + 8 : depth + n + 16;
    if (!prefill) {
        cp.policy = cli_policy_params(&po, pid);
        cli_policy_warn(&po, pid, in->n_ctx_train);
    }
    const size_t kv_rows = cli_kv_head_bytes(in, &kvt); /* one head's K and V rows of a token */
    size_t per_tok = cli_kv_token_bytes(in, &kvt);
    cp.kv_pool_bytes = prefill ? per_tok * (size_t)(cp.n_ctx + 64) + ((size_t)16 << 20)
                               : cli_pool_bytes(in, &kvt, &cp.policy, depth + 1, chunk, cp.block_size, cp.n_ctx) +
                                     cli_recall_pool_bytes(in, &kvt, &rec, cp.block_size);
    if (!prefill) cp.recall = cli_recall_params(&rec);
    struct kvb_context *c;
    if (kvb_context_init(m, &cp, &c) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
    float *logits = cli_xmalloc(sizeof(float) * (size_t)in->n_vocab, "logits");
    const int n_toks = chunk * 3 + depth + n + 8;
    int32_t *toks = cli_xmalloc(sizeof(int32_t) * (size_t)n_toks, "tokens");
    for (int i = 0; i < n_toks; i++) toks[i] = 1 + (i * 7919) % (in->n_vocab - 1);
    /* weights read per token: every matrix once, one embedding row */
    double w_bytes = (double)in->weight_bytes - (double)kvb_model_token_embd_bytes(m) * (in->tied_output ? 0 : 1);
    char cpu[256];
    cpu_model_name(cpu, sizeof cpu);
    struct kvb_threadpool *tp = NULL;
    kvb_threadpool_init(threads, &tp);
    if (!prefill) {
        /* the prompt: depth tokens (at least one), chunk by chunk with progress */
        const double tp0 = cli_now_sec();
        const int plen = depth > 0 ? depth : 1;
        for (int done = 0; done < plen;) {
            const int take = chunk < plen - done ? chunk : plen - done;
            const kvb_status st = done + take < plen ? kvb_context_eval(c, toks + done, take, NULL, false)
                                                    : kvb_context_prompt(c, toks + done, take, logits, false);
            if (st != KVB_OK) { fprintf(stderr, "kvbound: prompt token %d of %d: %s\n", done, plen, kvb_last_error()); return 1; }
            done += take;
            if (depth >= 4 * chunk && (done % (8 * chunk) == 0 || done == plen))
                fprintf(stderr, "kvbound bench decode: read %d of %d prompt tokens (%.0f s)\n", done, plen, cli_now_sec() - tp0);
        }
        const double prefill_s = cli_now_sec() - tp0;
        double *dt = cli_xmalloc(sizeof(double) * (size_t)n, "step times");
        double *dt0 = cli_xmalloc(sizeof(double) * (size_t)n, "step times");
        double kv_read = 0, score_s = 0, load_s = 0;
        int n_on = 0, n_off = 0;
        struct kvb_cache_stats cs, before;
        struct kvb_cache *cache = kvb_context_cache(c);
        for (int i = 0; i < n; i++) {
            /* recall: blocks of 8 steps paused, then 8 on (the first block on) */
            const bool on = !rec.on || (i / 8) % 2 == 0;
            if (rec.on) {
                if (i % 8 == 0) kvb_cache_set_recall(cache, on); /* a block's first step: resuming chooses afresh */
                kvb_cache_get_stats(cache, &before);
            }
            double t0 = cli_now_sec();
            if (kvb_context_eval(c, &toks[plen + i], 1, logits, false) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
            const double t = cli_now_sec() - t0;
            kvb_cache_get_stats(cache, &cs); /* the rows this step attended: what its streams hold */
            if (on) {
                dt[n_on++] = t;
                kv_read += (double)cs.slots * (double)kv_rows + (double)cs.recall_bytes;
                score_s += cs.recall_score_s - (rec.on ? before.recall_score_s : 0);
                load_s += cs.recall_load_s - (rec.on ? before.recall_load_s : 0);
            } else {
                dt0[n_off++] = t;
            }
        }
        qsort(dt, (size_t)n_on, sizeof(double), cmp_d);
        qsort(dt0, (size_t)n_off, sizeof(double), cmp_d);
        double med = dt[n_on / 2], tps = 1.0 / med;
        n = n_on;
        double bw = membw_read_gbs(tp, (size_t)1 << 30, 5);
        double bytes = w_bytes + kv_read / n;
        printf("{\"bench\":\"decode\",\"model\":\"%s\",\"weights\":\"%s\",\"threads\":%d,\"tokens\":%d,\"depth\":%d,\"policy\":\"%s\","
               "\"budget\":%d,\"kv_dtype\":\"%s\",\"kv_dtype_v\":\"%s\",\"cache_tokens\":%d,\"prefill_s\":%.2f,\"kernels\":\"%s\",\"tok_per_s\":%.2f,"
               "\"ms_per_token_median\":%.3f,\"bytes_per_token\":%.0f,\"machine_read_gbs\":%.2f,\"roofline_fraction\":%.3f,\"cpu\":\"%s\"",
               model, kvb_type_name(in->weight_type), threads, n, depth, kvb_policy_name(pid), pid == KVB_POLICY_FULL ? 0 : cp.policy.budget,
               kvb_dtype_name(kvt.k), kvb_dtype_name(cli_kv_v(&kvt)), cs.slots_max, prefill_s, kvb_kernels_name(), tps, med * 1e3, bytes, bw,
               bw > 0 ? bytes * tps / (bw * 1e9) : 0, cpu);
        if (rec.on) {
            const double med0 = n_off ? dt0[n_off / 2] : 0;
            printf(",\"recall\":true,\"recall_pages\":%d,\"recall_every\":%d,\"recall_summary\":\"%s\",\"tok_per_s_without_recall\":%.2f,"
                   "\"recall_cost_ratio\":%.3f,\"recall_score_ms_per_token\":%.3f,\"recall_load_ms_per_token\":%.3f,\"cold_pages\":%lld,"
                   "\"cold_mem_bytes\":%zu,\"cold_file_bytes\":%zu,\"recall_bytes\":%zu",
                   rec.pages, rec.every, rec.summary == KVB_RECALL_BOUNDS ? "bounds" : rec.summary == KVB_RECALL_CENTROID ? "centroid" : "exact",
                   med0 > 0 ? 1.0 / med0 : 0, med0 > 0 ? med / med0 : 0, n_on ? score_s * 1e3 / n_on : 0, n_on ? load_s * 1e3 / n_on : 0,
                   (long long)cs.cold_pages, cs.cold_mem_bytes, cs.cold_file_bytes, cs.recall_bytes);
        }
        printf("}\n");
        free(dt);
        free(dt0);
    } else {
        double best = 1e30;
        for (int r = 0; r < 3; r++) {
            kvb_context_reset(c);
            double t0 = cli_now_sec();
            if (kvb_context_eval(c, toks, chunk, logits, false) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
            double d = cli_now_sec() - t0;
            if (d < best) best = d;
        }
        double params = w_bytes / ((double)kvb_type_row_bytes(in->weight_type, 256) / 256.0);
        double attn = 2.0 * 2.0 * in->n_layer * (double)in->n_head * in->head_dim * chunk * (chunk + 1) / 2.0;
        double flops = 2.0 * params * chunk + attn;
        double peak = fma_peak(tp);
        printf("{\"bench\":\"prefill\",\"model\":\"%s\",\"weights\":\"%s\",\"threads\":%d,\"chunk\":%d,\"kernels\":\"%s\",\"tok_per_s\":%.2f,"
               "\"gflops\":%.2f,\"fma_peak_gflops\":%.2f,\"peak_fraction\":%.3f,\"cpu\":\"%s\"}\n",
               model, kvb_type_name(in->weight_type), threads, chunk, kvb_kernels_name(), chunk / best, flops / best / 1e9,
               peak / 1e9, peak > 0 ? flops / best / peak : 0, cpu);
    }
    kvb_threadpool_free(tp);
    free(logits);
    free(toks);
    kvb_context_free(c);
    kvb_model_free(m);
    return 0;
}
