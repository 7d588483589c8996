/*
 * bench_model.c — `kvbound bench decode` and `kvbound bench prefill` on a
 * model file. Decode reports tok/s and the roofline fraction: (weight bytes
 * read per token + KV bytes read per token) x tok/s / the machine's read
 * bandwidth, measured in the same run. Prefill reports tok/s, achieved
 * GFLOP/s (2 flops per weight per token + attention) and this CPU's FMA peak,
 * measured in the same run with independent FMA chains on every thread.
 * bench_model: the options (struct model_bench_opts), the set-up both
 * share (struct model_bench: model, context, tokens, thread pool, freed in
 * one call), then decode's prompt, steps and report, or prefill's.
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

#if defined(__x86_64__) /* the FMA loops are x86's: elsewhere fma_peak is 0 */
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
#endif

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
               "(from the median step), bytes_per_token (weights + the KV rows attended; of a\n"
               "mixture of experts, only the routed experts'), machine_read_gbs (measured in the\n"
               "same run), roofline_fraction, depth, cache_tokens (retained per stream at the end),\n"
               "prefill_s; with experts, experts, experts_used, expert_bytes_per_token (measured)\n"
               "and expert_bytes_ideal (the routed experts' bytes).\n"
               "  --policy NAME   cache policy (default full); its options as in 'kvbound run --help'\n"
               "  --kv-dtype T    KV rows: f16 (default), bf16, f32, q8_0, q4_0 (--kv-dtype-k T, --kv-dtype-v T apart)\n"
               "  --no-mmap       read the weights into memory (huge pages) instead of mapping the file\n"
               "With --recall the decode steps alternate, 8 at a time, between recall paused and on (one context,\n"
               "one run): tok_per_s is with recall; the JSON adds tok_per_s_without_recall, recall_cost_ratio\n"
               "(median step with / without), recall_score_ms_per_token, recall_load_ms_per_token, cold_pages,\n"
               "cold_mem_bytes, cold_file_bytes and recall_bytes.\n");
    cli_recall_help(f, 1024);
}

struct model_bench_opts {
    struct cli_model_opts mo; /* -m -t --no-mmap */
    bool prefill;
    int n, chunk, depth;
    enum kvb_policy_id pid; /* decode: --policy and the cache options */
    struct cli_policy po;
    struct cli_kv_types kvt;
    struct cli_recall rec;
};

/* What both benchmarks hold; model_bench_free releases it. */
struct model_bench {
    struct kvb_model *m;
    struct kvb_model_info in;
    struct kvb_context_params cp;
    struct kvb_context *c;
    float *logits;
    int32_t *toks; /* synthetic tokens: the prompt, then one per decode step */
    struct kvb_threadpool *tp;
    double w_bytes; /* weights read per token: every matrix once, one embedding row */
    char cpu[256];
};

/* The decode steps' times, recall on (dt) and paused (dt0), and what the steps with it on read. */
struct decode_steps {
    double *dt, *dt0;
    int n_on, n_off;
    double prefill_s, kv_read, score_s, load_s;
    double expert_read;        /* expert weight bytes of the timed steps */
    struct kvb_cache_stats cs; /* after the last step */
};

static int model_bench_parse(struct model_bench_opts *o, int argc, char **argv, bool prefill) {
    memset(o, 0, sizeof *o);
    const char *cmd = prefill ? "bench prefill" : "bench decode";
    cli_model_init(&o->mo, cmd, CLI_MODEL_NO_MMAP | CLI_MODEL_THREADS, 2);
    o->prefill = prefill;
    o->n = 64;
    o->chunk = 256;
    o->pid = KVB_POLICY_FULL;
    cli_kv_types_init(&o->kvt, KVB_DTYPE_F16);
    cli_policy_init(&o->po, 1024);
    cli_recall_init(&o->rec);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { model_usage(stdout, prefill); return 0; }
        if (!strcmp(a, "--json")) continue;
        int r = cli_model_option(&o->mo, argc, argv, &i);
        if (r == 0 && !prefill) r = cli_cache_option(&o->po, &o->kvt, &o->rec, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!(v = cli_opt_value(cmd, prefill ? "-n --chunk" : "--depth --policy -n --chunk", argc, argv, &i))) return 2;
        if (!strcmp(a, "--depth")) { if (cli_parse_i32(a, v, 0, 1 << 22, &o->depth)) return 2; }
        else if (!strcmp(a, "--policy")) {
            if (kvb_policy_from_name(v, &o->pid) != KVB_OK) { fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error()); return 2; }
        }
        else if (!strcmp(a, "-n")) { if (cli_parse_i32(a, v, 1, 1 << 20, &o->n)) return 2; }
        else if (cli_parse_i32(a, v, 1, 8192, &o->chunk)) return 2; /* --chunk */
    }
    if (!o->mo.path) { fprintf(stderr, "kvbound bench: -m MODEL is required\n"); return 2; }
    return CLI_GO_ON;
}

/* The model, a context sized for the run, the tokens and a thread pool; -1: printed. */
static int model_bench_setup(const struct model_bench_opts *o, struct model_bench *b) {
    if (cli_load_model(&o->mo, &b->m, &b->in)) return -1;
    const struct kvb_model_info *in = &b->in;
    struct kvb_context_params *cp = &b->cp;
    *cp = kvb_context_default_params();
    cp->n_threads = o->mo.threads;
    cp->chunk = o->chunk;
    cp->n_ctx = o->prefill ? o->chunk * 3 + 8 : o->depth + o->n + 16;
    if (o->prefill) { /* full, the row types only */
        cp->kv.kv_dtype = o->kvt.k;
        cp->kv.kv_dtype_v = o->kvt.v;
    } else {
        cp->kv = cli_kv_params(&o->po, o->pid, &o->kvt, &o->rec);
        cli_policy_warn(&o->po, o->pid, in->n_ctx_train);
    }
    cp->kv_pool_bytes = kvb_model_kv_seq_bytes(b->m, &cp->kv, cp->n_ctx, o->prefill ? cp->n_ctx : o->depth + 1, o->chunk);
    if (kvb_context_init(b->m, cp, &b->c) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return -1; }
    b->logits = cli_xmalloc(sizeof(float) * (size_t)in->n_vocab, "logits");
    const int n_toks = o->chunk * 3 + o->depth + o->n + 8;
    b->toks = cli_xmalloc(sizeof(int32_t) * (size_t)n_toks, "tokens");
    for (int i = 0; i < n_toks; i++) b->toks[i] = 1 + (i * 7919) % (in->n_vocab - 1);
    b->w_bytes = (double)in->weight_bytes - (double)kvb_model_token_embd_bytes(b->m) * (in->tied_output ? 0 : 1);
    if (in->n_expert > 0) /* a token reads its routed experts only: the others' bytes are not its */
        b->w_bytes -= (double)in->expert_bytes_per_token / in->n_expert_used * (in->n_expert - in->n_expert_used);
    cpu_model_name(b->cpu, sizeof b->cpu);
    kvb_threadpool_init(o->mo.threads, &b->tp);
    return 0;
}

/* Decode's prompt: --depth tokens (at least one), chunk by chunk with progress; -1: printed. */
static int decode_prompt(const struct model_bench_opts *o, struct model_bench *b, struct decode_steps *d) {
    const double tp0 = cli_now_sec();
    const int plen = o->depth > 0 ? o->depth : 1;
    for (int done = 0; done < plen;) {
        const int take = o->chunk < plen - done ? o->chunk : plen - done;
        const kvb_status st = done + take < plen ? kvb_context_eval(b->c, b->toks + done, take, NULL, false)
                                                : kvb_context_prompt(b->c, b->toks + done, take, b->logits, false);
        if (st != KVB_OK) { fprintf(stderr, "kvbound: prompt token %d of %d: %s\n", done, plen, kvb_last_error()); return -1; }
        done += take;
        if (o->depth >= 4 * o->chunk && (done % (8 * o->chunk) == 0 || done == plen))
            fprintf(stderr, "kvbound bench decode: read %d of %d prompt tokens (%.0f s)\n", done, plen, cli_now_sec() - tp0);
    }
    d->prefill_s = cli_now_sec() - tp0;
    return 0;
}

/* The -n timed decode steps; with --recall, blocks of 8 steps with recall
 * on, then 8 paused (the first block on). -1: printed. */
static int decode_run(const struct model_bench_opts *o, struct model_bench *b, struct decode_steps *d) {
    const int plen = o->depth > 0 ? o->depth : 1;
    const size_t kv_rows = cli_kv_head_bytes(&b->in, &o->kvt); /* one head's K and V rows of a token */
    d->dt = cli_xmalloc(sizeof(double) * (size_t)o->n, "step times");
    d->dt0 = cli_xmalloc(sizeof(double) * (size_t)o->n, "step times");
    struct kvb_cache_stats before;
    struct kvb_cache *cache = kvb_context_cache(b->c);
    for (int i = 0; i < o->n; i++) {
        const bool on = !o->rec.on || (i / 8) % 2 == 0;
        if (o->rec.on) {
            if (i % 8 == 0) kvb_cache_set_recall(cache, on); /* a block's first step: resuming chooses afresh */
            kvb_cache_get_stats(cache, &before);
        }
        const int64_t e0 = kvb_context_expert_bytes_read(b->c);
        double t0 = cli_now_sec();
        if (kvb_context_eval(b->c, &b->toks[plen + i], 1, b->logits, false) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return -1; }
        const double t = cli_now_sec() - t0;
        if (on) d->expert_read += (double)(kvb_context_expert_bytes_read(b->c) - e0);
        kvb_cache_get_stats(cache, &d->cs); /* the rows this step attended: what its streams hold */
        if (on) {
            d->dt[d->n_on++] = t;
            d->kv_read += (double)d->cs.slots * (double)kv_rows + (double)d->cs.recall_bytes;
            d->score_s += d->cs.recall_score_s - (o->rec.on ? before.recall_score_s : 0);
            d->load_s += d->cs.recall_load_s - (o->rec.on ? before.recall_load_s : 0);
        } else {
            d->dt0[d->n_off++] = t;
        }
    }
    qsort(d->dt, (size_t)d->n_on, sizeof(double), cli_cmp_double);
    qsort(d->dt0, (size_t)d->n_off, sizeof(double), cli_cmp_double);
    return 0;
}

/* Decode's JSON: tok/s from the median step, bytes per token against the machine's read bandwidth. */
static void decode_report(const struct model_bench_opts *o, struct model_bench *b, const struct decode_steps *d) {
    const struct kvb_cache_stats *cs = &d->cs;
    const double med = d->dt[d->n_on / 2], tps = 1.0 / med;
    const int n = d->n_on;
    double bw = membw_read_gbs(b->tp, (size_t)1 << 30, 5);
    double bytes = b->w_bytes + d->kv_read / n;
    printf("{\"bench\":\"decode\",\"model\":\"%s\",\"weights\":\"%s\",\"threads\":%d,\"tokens\":%d,\"depth\":%d,\"policy\":\"%s\","
           "\"budget\":%d,\"kv_dtype\":\"%s\",\"kv_dtype_v\":\"%s\",\"cache_tokens\":%d,\"prefill_s\":%.2f,\"kernels\":\"%s\",\"tok_per_s\":%.2f,"
           "\"ms_per_token_median\":%.3f,\"bytes_per_token\":%.0f,\"machine_read_gbs\":%.2f,\"roofline_fraction\":%.3f,\"cpu\":\"%s\"",
           o->mo.path, kvb_type_name(b->in.weight_type), o->mo.threads, n, o->depth, kvb_policy_name(o->pid), o->pid == KVB_POLICY_FULL ? 0 : b->cp.kv.policy.budget,
           kvb_dtype_name(o->kvt.k), kvb_dtype_name(cli_kv_v(&o->kvt)), cs->slots_max, d->prefill_s, kvb_kernels_name(), tps, med * 1e3, bytes, bw,
           bw > 0 ? bytes * tps / (bw * 1e9) : 0, b->cpu);
    if (b->in.n_expert > 0) /* measured against the ideal: the routed experts only */
        printf(",\"experts\":%d,\"experts_used\":%d,\"expert_bytes_per_token\":%.0f,\"expert_bytes_ideal\":%zu", b->in.n_expert,
               b->in.n_expert_used, n ? d->expert_read / n : 0, b->in.expert_bytes_per_token);
    if (o->rec.on) {
        const struct cli_recall *rec = &o->rec;
        const double med0 = d->n_off ? d->dt0[d->n_off / 2] : 0;
        printf(",\"recall\":true,\"recall_pages\":%d,\"recall_every\":%d,\"recall_summary\":\"%s\",\"tok_per_s_without_recall\":%.2f,"
               "\"recall_cost_ratio\":%.3f,\"recall_score_ms_per_token\":%.3f,\"recall_load_ms_per_token\":%.3f,\"cold_pages\":%lld,"
               "\"cold_mem_bytes\":%zu,\"cold_file_bytes\":%zu,\"recall_bytes\":%zu",
               rec->pages, rec->every, rec->summary == KVB_RECALL_BOUNDS ? "bounds" : rec->summary == KVB_RECALL_CENTROID ? "centroid" : "exact",
               med0 > 0 ? 1.0 / med0 : 0, med0 > 0 ? med / med0 : 0, n ? d->score_s * 1e3 / n : 0, n ? d->load_s * 1e3 / n : 0,
               (long long)cs->cold_pages, cs->cold_mem_bytes, cs->cold_file_bytes, cs->recall_bytes);
    }
    printf("}\n");
}

/* Prefill: one chunk of --chunk tokens, best of 3, against the FMA peak; -1: printed. */
static int prefill_run(const struct model_bench_opts *o, struct model_bench *b) {
    const struct kvb_model_info *in = &b->in;
    const int chunk = o->chunk;
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        kvb_context_reset(b->c);
        double t0 = cli_now_sec();
        if (kvb_context_eval(b->c, b->toks, chunk, b->logits, false) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return -1; }
        double d = cli_now_sec() - t0;
        if (d < best) best = d;
    }
    double params = b->w_bytes / ((double)kvb_type_row_bytes(in->weight_type, 256) / 256.0);
    double attn = 2.0 * 2.0 * in->n_layer * (double)in->n_head * in->head_dim * chunk * (chunk + 1) / 2.0;
    double flops = 2.0 * params * chunk + attn;
    double peak = fma_peak(b->tp);
    printf("{\"bench\":\"prefill\",\"model\":\"%s\",\"weights\":\"%s\",\"threads\":%d,\"chunk\":%d,\"kernels\":\"%s\",\"tok_per_s\":%.2f,"
           "\"gflops\":%.2f,\"fma_peak_gflops\":%.2f,\"peak_fraction\":%.3f,\"cpu\":\"%s\"}\n",
           o->mo.path, kvb_type_name(in->weight_type), o->mo.threads, chunk, kvb_kernels_name(), chunk / best, flops / best / 1e9,
           peak / 1e9, peak > 0 ? flops / best / peak : 0, b->cpu);
    return 0;
}

static void model_bench_free(struct model_bench *b, struct decode_steps *d) {
    free(d->dt);
    free(d->dt0);
    kvb_threadpool_free(b->tp);
    free(b->logits);
    free(b->toks);
    kvb_context_free(b->c);
    kvb_model_free(b->m);
}

int bench_model(int argc, char **argv, bool prefill) {
    struct model_bench_opts o;
    int rc = model_bench_parse(&o, argc, argv, prefill);
    if (rc != CLI_GO_ON) return rc;
    struct model_bench b;
    struct decode_steps d;
    memset(&b, 0, sizeof b);
    memset(&d, 0, sizeof d);
    rc = 1;
    if (model_bench_setup(&o, &b) == 0) {
        if (prefill) rc = prefill_run(&o, &b) ? 1 : 0;
        else if (decode_prompt(&o, &b, &d) == 0 && decode_run(&o, &b, &d) == 0) {
            decode_report(&o, &b, &d);
            rc = 0;
        }
    }
    model_bench_free(&b, &d);
    return rc;
}
