/*
 * bench_stream.c — `kvbound bench stream`: per-token decode latency (p50,
 * p99 over the 500 tokens before each checkpoint) and RSS at 1K, 10K, 100K
 * (and 1M with --long) for streaming; the same for full up to --full-max
 * tokens; and the speedup of streaming over recomputing the last `budget`
 * tokens per token (StreamingLLM's sliding window with recompute). Prints
 * one JSON object.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Resident set size in bytes (Linux /proc/self/statm), 0 if unknown. */
static long long rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long long pages = 0, res = 0;
    if (!f) return 0;
    if (fscanf(f, "%lld %lld", &pages, &res) != 2) res = 0;
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

/* Decodes n tokens greedily with one policy, recording each token's latency
 * and the RSS at the checkpoints. */
static int stream_run(struct kvb_model *m, enum kvb_policy_id id, int budget, int threads, int64_t n, double *lat, long long *rss,
                      const int64_t *cps, int ncp) {
    struct kvb_context_params cp = kvb_context_default_params();
    cp.kv.policy = kvb_policy_default_params(id);
    if (id != KVB_POLICY_FULL) cp.kv.policy.budget = budget;
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
    qsort(tmp, (size_t)w, sizeof(double), cli_cmp_double);
    *p50 = tmp[w / 2];
    *p99 = tmp[(w * 99) / 100 < w ? (w * 99) / 100 : w - 1];
    free(tmp);
}

struct stream_opts {
    struct cli_model_opts mo; /* -m -z -t */
    int budget;
    long long full_max;
    bool longrun;
};

static void stream_usage(void) {
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
}

static int stream_parse(struct stream_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    cli_model_init(&o->mo, "bench stream", CLI_MODEL_TOKENIZER | CLI_MODEL_THREADS, 1);
    o->budget = 1024;
    o->full_max = 10000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { stream_usage(); return 0; }
        if (!strcmp(a, "--json")) continue;
        if (!strcmp(a, "--long")) { o->longrun = true; continue; }
        const int r = cli_model_option(&o->mo, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!(v = cli_opt_value("bench stream", "--budget --full-max", argc, argv, &i))) return 2;
        if (!strcmp(a, "--budget")) { if (cli_parse_i32(a, v, 8, 1 << 24, &o->budget)) return 2; }
        else if (cli_parse_i64(a, v, 0, 1LL << 30, &o->full_max)) return 2; /* --full-max */
    }
    return cli_model_required(&o->mo) ? CLI_GO_ON : 2;
}

/* The JSON objects of the first n checkpoints: percentiles of lat before each, and the RSS there. */
static void stream_points(const double *lat, const int64_t *cps, int n, const long long *rss) {
    for (int k = 0; k < n; k++) {
        double p50, p99;
        pct(lat, cps[k], &p50, &p99);
        printf("%s{\"tokens\":%lld,\"p50_ms\":%.4f,\"p99_ms\":%.4f,\"rss\":%lld}", k ? "," : "", (long long)cps[k], p50 * 1e3, p99 * 1e3, rss[k]);
    }
}

/* Seconds to read the last `budget` tokens from scratch, as the sliding
 * window with recompute does for every new token: the mean of 5 (0 when
 * no context could be made). */
static double stream_recompute(const struct kvb_model *m, int threads, int budget) {
    struct kvb_model_info mi;
    kvb_model_get_info(m, &mi);
    struct kvb_context_params cp = kvb_context_default_params();
    cp.n_threads = threads;
    cp.chunk = budget;
    cp.n_ctx = budget + 8;
    struct kvb_context *c;
    if (kvb_context_init(m, &cp, &c) != KVB_OK) return 0;
    int32_t *toks = cli_xmalloc(sizeof(int32_t) * (size_t)budget, "tokens");
    for (int i = 0; i < budget; i++) toks[i] = 1 + (i * 7919) % (mi.n_vocab - 1);
    float *lg = cli_xmalloc(sizeof(float) * (size_t)mi.n_vocab, "logits");
    const int reps = 5;
    double t0 = cli_now_sec();
    for (int r = 0; r < reps; r++) {
        kvb_context_reset(c);
        kvb_context_eval(c, toks, budget, lg, false);
    }
    const double rec = (cli_now_sec() - t0) / reps;
    free(toks);
    free(lg);
    kvb_context_free(c);
    return rec;
}

int bench_stream(int argc, char **argv) {
    struct stream_opts o;
    int rc = stream_parse(&o, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    struct kvb_model *m;
    if (cli_load_model(&o.mo, &m, NULL)) return 1;
    const int64_t cps[4] = {1000, 10000, 100000, 1000000};
    const int ncp = o.longrun ? 4 : 3;
    const int64_t n = cps[ncp - 1];
    double *lat = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; lat && i < n; i++) lat[i] = -1.0; /* touch it now (non-zero: a zero memset becomes calloc): RSS then measures the engine */
    long long rss[4] = {0}, rss_f[4] = {0};
    rc = 1;
    if (lat && stream_run(m, KVB_POLICY_STREAMING, o.budget, o.mo.threads, n, lat, rss, cps, ncp) == 0) {
        printf("{\"bench\":\"stream\",\"model\":\"%s\",\"budget\":%d,\"threads\":%d,\"streaming\":[", o.mo.path, o.budget, o.mo.threads);
        double p99, p50_end = 0;
        pct(lat, cps[ncp - 1], &p50_end, &p99);
        stream_points(lat, cps, ncp, rss);
        printf("],\"full\":[");
        int nf = 0;
        while (nf < ncp && cps[nf] <= o.full_max) nf++;
        if (nf && stream_run(m, KVB_POLICY_FULL, 0, o.mo.threads, cps[nf - 1], lat, rss_f, cps, nf) == 0) stream_points(lat, cps, nf, rss_f);
        const double rec = stream_recompute(m, o.mo.threads, o.budget);
        printf("],\"recompute_ms_per_token\":%.3f,\"streaming_p50_ms\":%.4f,\"speedup_vs_recompute\":%.1f}\n", rec * 1e3, p50_end * 1e3,
               p50_end > 0 ? rec / p50_end : 0);
        rc = 0;
    }
    free(lat);
    kvb_model_free(m);
    return rc;
}
