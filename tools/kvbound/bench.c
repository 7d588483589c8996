/*
 * bench.c — `kvbound bench cache`: the whole cache work of decode steps.
 *
 * A step is one decode token through every layer: append k/v, attention of
 * every query head over the retained slots, the policy's update and the
 * eviction (kvb_cache_decode per layer). q/k/v are random (pre-generated, so
 * RNG cost is not timed). Each cache is first filled to its budget with
 * appends, so the steps run at steady state.
 *
 * With several policies (--policy a,b,c) the caches run round-robin, a few
 * steps each, so that the noise of a shared machine hits them alike; the
 * JSON then also gives each policy's median ratio to the first one.
 *
 * Output: one JSON object per policy (or an array), with ns_per_step (median),
 * the KV bytes attention read per step, the machine's read bandwidth measured
 * in the same run, and the fraction of it that the step achieved.
 *
 * bench_cache: the options (struct cache_bench_opts), then the caches and
 * their data (struct cache_bench, freed in one call), the timed rounds,
 * the report.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <math.h>

#define MAX_POL 16
#define DATA_SETS 4

struct bench_policy {
    enum kvb_policy_id id;
    struct kvb_cache *cache;
    double *ns;
    int n_ns;
};

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: kvbound bench cache [options]\n"
            "\n"
            "Times decode steps of the cache alone (no model): per step, every layer\n"
            "appends one token, attends with every query head and evicts to budget.\n"
            "\n"
            "  --policy P[,P...]   policies to run (default streaming); several run round-robin\n"
            "  --layers N          layers (default 32)\n"
            "  --kv-heads N        KV heads per layer (default 8)\n"
            "  --heads N           query heads per layer, a multiple of --kv-heads (default 4 x kv-heads)\n"
            "  --head-dim N        head dimension (default 128)\n"
            "  --budget N          retained tokens per stream (default 2048)\n"
            "  --steps N           timed steps per policy (default 64)\n"
            "  --kv-dtype T        KV rows: f16 (default), bf16, f32, q8_0, q4_0 (also --dtype; --kv-dtype-k T, --kv-dtype-v T apart)\n"
            "  --block-size N      tokens per page (default 16)\n"
            "  --positions M       original|contiguous|capped (default: the policy's; capped: at --budget)\n"
            "  -t, --threads N     threads (default 2)\n"
            "  --seed S            data seed (default 1)\n"
            "  --json              print JSON only (default prints JSON too)\n"
            "\n"
            "bw_fraction is attn_read_gbs (the K and V bytes a step attends to over its\n"
            "median time) against machine_read_gbs, one sequential read of 1 GiB by all\n"
            "threads; page_bw_fraction is against machine_page_read_gbs, the same loads\n"
            "over pages of the cache's page_bytes in a shuffled order, which is how a\n"
            "stream's pages lie in the pool. Both buffers are advised for huge pages,\n"
            "as the pool's slabs are.\n");
}

static double median(double *v, int n) {
    for (int i = 1; i < n; i++) { /* insertion sort: n is small */
        double x = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > x) { v[j + 1] = v[j]; j--; }
        v[j + 1] = x;
    }
    return n ? (n & 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : 0;
}

static float rnd(unsigned long long *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

struct cache_bench_opts {
    char policies[256];
    int layers, kv_heads, heads, head_dim, budget, steps, threads, block;
    long long seed;
    struct cli_kv_types kvt;
    enum kvb_pos_mode pos;
};

/* What bench cache holds: the caches, the thread pool, DATA_SETS sets of
 * random q, k, v for every layer, and the attention output. */
struct cache_bench {
    struct bench_policy pol[MAX_POL];
    int n_pol;
    struct kvb_threadpool *tp;
    float *q[DATA_SETS], *k[DATA_SETS], *v[DATA_SETS], *out;
    size_t page_bytes;
};

/* A value option of bench cache; -1: printed. */
static int cache_bench_option(struct cache_bench_opts *o, const char *a, const char *v) {
    if (!strcmp(a, "--policy")) snprintf(o->policies, sizeof o->policies, "%s", v);
    else if (!strcmp(a, "--layers")) return cli_parse_i32(a, v, 1, 4096, &o->layers);
    else if (!strcmp(a, "--kv-heads")) return cli_parse_i32(a, v, 1, 1024, &o->kv_heads);
    else if (!strcmp(a, "--heads")) return cli_parse_i32(a, v, 1, 65536, &o->heads);
    else if (!strcmp(a, "--head-dim")) return cli_parse_i32(a, v, 1, 512, &o->head_dim);
    else if (!strcmp(a, "--budget")) return cli_parse_i32(a, v, 1, 1 << 24, &o->budget);
    else if (!strcmp(a, "--steps")) return cli_parse_i32(a, v, 1, 1 << 24, &o->steps);
    else if (!strcmp(a, "--block-size")) return cli_parse_i32(a, v, 1, 4096, &o->block);
    else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) return cli_parse_i32(a, v, 1, 1024, &o->threads);
    else if (!strcmp(a, "--seed")) return cli_parse_i64(a, v, 0, (1LL << 62), &o->seed);
    else if (!strcmp(a, "--dtype")) {
        if (kvb_dtype_from_name(v, &o->kvt.k) != KVB_OK) { fprintf(stderr, "kvbound: --dtype: %s\n", kvb_last_error()); return -1; }
        o->kvt.v = KVB_DTYPE_AS_K;
    } else { /* --positions */
        if (!strcmp(v, "original")) o->pos = KVB_POS_ORIGINAL;
        else if (!strcmp(v, "contiguous")) o->pos = KVB_POS_CONTIGUOUS;
        else if (!strcmp(v, "capped")) o->pos = KVB_POS_CAPPED;
        else { fprintf(stderr, "kvbound: --positions: '%s' is not original, contiguous or capped\n", v); return -1; }
    }
    return 0;
}

static int cache_bench_parse(struct cache_bench_opts *o, int argc, char **argv) {
    *o = (struct cache_bench_opts){.layers = 32, .kv_heads = 8, .head_dim = 128, .budget = 2048, .steps = 64, .threads = 2, .block = 16, .seed = 1,
                                   .pos = KVB_POS_POLICY_DEFAULT};
    snprintf(o->policies, sizeof o->policies, "streaming");
    cli_kv_types_init(&o->kvt, KVB_DTYPE_F16);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { bench_usage(stdout); return 0; }
        else if (!strcmp(a, "--json")) continue;
        const int kr = cli_kv_types_option(&o->kvt, argc, argv, &i);
        if (kr < 0) return 2;
        if (kr > 0) continue;
        if (!(v = cli_opt_value("bench cache", "--policy --layers --kv-heads --heads --head-dim --budget --steps --block-size -t --threads --seed --dtype --positions", argc, argv, &i))) return 2;
        if (cache_bench_option(o, a, v)) return 2;
    }
    if (!o->heads) o->heads = 4 * o->kv_heads;
    if (o->heads % o->kv_heads) {
        fprintf(stderr, "kvbound: --heads (%d) must be a multiple of --kv-heads (%d)\n", o->heads, o->kv_heads);
        return 2;
    }
    return CLI_GO_ON;
}

/* --policy a,b,c into b->pol; -1: printed. */
static int cache_bench_policies(struct cache_bench_opts *o, struct cache_bench *b) {
    for (char *tok = strtok(o->policies, ","); tok; tok = strtok(NULL, ",")) {
        if (b->n_pol == MAX_POL) { fprintf(stderr, "kvbound: --policy: at most %d policies\n", MAX_POL); return -1; }
        if (kvb_policy_from_name(tok, &b->pol[b->n_pol].id) != KVB_OK) { fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error()); return -1; }
        b->n_pol++;
    }
    return 0;
}

/* The random q, k, v (generated before the clock runs); -1: printed. */
static int cache_bench_data(const struct cache_bench_opts *o, struct cache_bench *b) {
    const size_t nq = (size_t)o->layers * o->heads * o->head_dim, nk = (size_t)o->layers * o->kv_heads * o->head_dim;
    b->out = malloc(sizeof(float) * (size_t)o->heads * o->head_dim);
    unsigned long long rs = (unsigned long long)o->seed * 2654435761ull + 1;
    for (int d = 0; d < DATA_SETS; d++) {
        b->q[d] = malloc(sizeof(float) * nq);
        b->k[d] = malloc(sizeof(float) * nk);
        b->v[d] = malloc(sizeof(float) * nk);
        if (!b->q[d] || !b->k[d] || !b->v[d] || !b->out) { fprintf(stderr, "kvbound: out of memory for bench data\n"); return -1; }
        for (size_t i = 0; i < nq; i++) b->q[d][i] = rnd(&rs);
        for (size_t i = 0; i < nk; i++) { b->k[d][i] = rnd(&rs); b->v[d][i] = rnd(&rs); }
    }
    return 0;
}

/* Policy p's cache, filled to its budget with appends; -1: printed. */
static int cache_bench_fill(const struct cache_bench_opts *o, struct cache_bench *b, int p) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.kv.max_distance = o->budget; /* lminfinite: n_local = the cap, as the paper */
    cp.n_layer = o->layers; cp.n_kv_head = o->kv_heads; cp.head_dim = o->head_dim; cp.kv.kv_dtype = o->kvt.k; cp.kv.kv_dtype_v = o->kvt.v; cp.kv.block_size = o->block;
    cp.kv.pos_mode = o->pos;
    cp.rope = (struct kvb_rope){KVB_ROPE_INTERLEAVED, o->head_dim, 10000.0f, 1.0f, NULL};
    cp.kv.policy = kvb_policy_default_params(b->pol[p].id);
    if (b->pol[p].id != KVB_POLICY_FULL) cp.kv.policy.budget = o->budget;
    /* the snapkv family: the filled cache is its prompt, compressed (kept
     * whole) at the first step; a decode budget of 1 makes it attend to
     * budget + 1 tokens like every other bounded policy */
    if (kvb_policy_compresses(b->pol[p].id)) cp.kv.policy.decode_budget = 1;
    size_t page = kvb_cache_page_bytes(&cp);
    b->page_bytes = page;
    int64_t max_tokens = b->pol[p].id == KVB_POLICY_FULL ? (int64_t)o->budget + o->steps + 1 : o->budget + 2;
    cp.pool_bytes = (size_t)o->layers * o->kv_heads * (size_t)(max_tokens / o->block + 2) * (page + 64);
    if (kvb_cache_init(NULL, &cp, &b->pol[p].cache) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return -1; }
    const size_t kv_layer = (size_t)o->kv_heads * o->head_dim;
    for (int t = 0; t < o->budget; t++)
        for (int l = 0; l < o->layers; l++) {
            const size_t off = ((size_t)t % DATA_SETS);
            if (kvb_cache_append(b->pol[p].cache, l, b->k[off] + (size_t)l * kv_layer, b->v[off] + (size_t)l * kv_layer) != KVB_OK) {
                fprintf(stderr, "kvbound: fill: %s\n", kvb_last_error());
                return -1;
            }
        }
    b->pol[p].ns = cli_xcalloc((size_t)o->steps, sizeof(double), "step times");
    b->pol[p].n_ns = 0;
    return 0;
}

/* One decode step of policy p's cache on data set d, every layer; its time in *dt. -1: printed. */
static int cache_bench_step(const struct cache_bench_opts *o, struct cache_bench *b, int p, int d, double *dt) {
    const size_t q_layer = (size_t)o->heads * o->head_dim, kv_layer = (size_t)o->kv_heads * o->head_dim;
    double t0 = cli_now_sec();
    for (int l = 0; l < o->layers; l++) {
        kvb_status st = kvb_cache_decode(b->pol[p].cache, l, b->q[d] + (size_t)l * q_layer, o->heads, b->k[d] + (size_t)l * kv_layer,
                                         b->v[d] + (size_t)l * kv_layer, b->out, b->tp);
        if (st != KVB_OK) { fprintf(stderr, "kvbound: decode: %s\n", kvb_last_error()); return -1; }
    }
    *dt = cli_now_sec() - t0;
    return 0;
}

/* The timed steps, round-robin over the policies a few at a time, after
 * one untimed warm-up step each; -1: printed. */
static int cache_bench_rounds(const struct cache_bench_opts *o, struct cache_bench *b) {
    const int round = 4;
    for (int done = -1; done < o->steps; done += round) {
        for (int p = 0; p < b->n_pol; p++) {
            int n_here = done < 0 ? 1 : (o->steps - done < round ? o->steps - done : round);
            for (int s = 0; s < n_here; s++) {
                double dt;
                if (cache_bench_step(o, b, p, (done + s + DATA_SETS) % DATA_SETS, &dt)) return -1;
                if (done >= 0) b->pol[p].ns[b->pol[p].n_ns++] = dt * 1e9;
            }
        }
        if (done < 0) done = 0 - round;
    }
    return 0;
}

/* One JSON object per policy (an array for several), with the machine's read bandwidth measured now. */
static void cache_bench_report(const struct cache_bench_opts *o, struct cache_bench *b) {
    double bw = membw_read_gbs(b->tp, (size_t)1 << 30, 5);
    double page_bw = membw_page_read_gbs(b->tp, (size_t)1 << 30, b->page_bytes, 5);
    char cpu[256];
    cpu_model_name(cpu, sizeof cpu);
    double base_med = 0;
    printf("%s", b->n_pol > 1 ? "[\n" : "");
    for (int p = 0; p < b->n_pol; p++) {
        struct bench_policy *bp = &b->pol[p];
        struct kvb_cache_stats cs;
        kvb_cache_get_stats(bp->cache, &cs);
        double med = median(bp->ns, bp->n_ns);
        if (p == 0) base_med = med;
        double kv_read = (double)cs.slots * (double)(kvb_dtype_row_bytes(o->kvt.k, o->head_dim) + kvb_dtype_row_bytes(cli_kv_v(&o->kvt), o->head_dim));
        double gbs = kv_read / med; /* bytes per ns == GB/s */
        printf("%s{\"policy\":\"%s\",\"layers\":%d,\"kv_heads\":%d,\"heads\":%d,\"head_dim\":%d,\"budget\":%d,"
               "\"dtype\":\"%s\",\"dtype_v\":\"%s\",\"threads\":%d,\"steps\":%d,\"kernels\":\"%s\",\"positions\":\"%s\","
               "\"ns_per_step\":%.0f,\"ns_per_step_min\":%.0f,\"ns_per_step_max\":%.0f,\"bytes\":%zu,\"bytes_peak\":%zu,"
               "\"kv_bytes_read_per_step\":%.0f,\"attn_read_gbs\":%.2f,\"machine_read_gbs\":%.2f,"
               "\"bw_fraction\":%.3f,\"page_bytes\":%zu,\"machine_page_read_gbs\":%.2f,\"page_bw_fraction\":%.3f,"
               "\"ratio_to_first\":%.3f,\"cpu\":\"%s\",\"nproc\":%d}%s\n",
               b->n_pol > 1 ? "  " : "", kvb_policy_name(bp->id), o->layers, o->kv_heads, o->heads, o->head_dim, o->budget,
               kvb_dtype_name(o->kvt.k), kvb_dtype_name(cli_kv_v(&o->kvt)), o->threads, bp->n_ns, kvb_kernels_name(),
               kvb_pos_mode_name(kvb_cache_pos_mode(bp->cache)), med, bp->ns[0], bp->ns[bp->n_ns - 1],
               cs.bytes_used, cs.bytes_peak, kv_read, gbs, bw, bw > 0 ? gbs / bw : 0, b->page_bytes, page_bw,
               page_bw > 0 ? gbs / page_bw : 0, base_med > 0 ? med / base_med : 0,
               cpu, o->threads, p + 1 < b->n_pol ? "," : "");
    }
    printf("%s", b->n_pol > 1 ? "]\n" : "");
}

static void cache_bench_free(struct cache_bench *b) {
    for (int p = 0; p < b->n_pol; p++) {
        kvb_cache_free(b->pol[p].cache);
        free(b->pol[p].ns);
    }
    for (int d = 0; d < DATA_SETS; d++) { free(b->q[d]); free(b->k[d]); free(b->v[d]); }
    free(b->out);
    kvb_threadpool_free(b->tp);
}

static int bench_cache(int argc, char **argv) {
    struct cache_bench_opts o;
    int rc = cache_bench_parse(&o, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    struct cache_bench b;
    memset(&b, 0, sizeof b);
    if (cache_bench_policies(&o, &b)) return 2;
    rc = 1;
    if (kvb_threadpool_init(o.threads, &b.tp) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); b.tp = NULL; goto out; }
    if (cache_bench_data(&o, &b)) goto out;
    for (int p = 0; p < b.n_pol; p++)
        if (cache_bench_fill(&o, &b, p)) goto out;
    if (cache_bench_rounds(&o, &b)) goto out;
    cache_bench_report(&o, &b);
    rc = 0;
out:
    cache_bench_free(&b);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: kvbound bench cache|decode|prefill|stream|tokenize|batch|serve-memory [options]   (see 'kvbound bench NAME --help')\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "cache")) return bench_cache(argc - 1, argv + 1);
    if (!strcmp(argv[1], "decode")) return bench_model(argc - 1, argv + 1, false);
    if (!strcmp(argv[1], "prefill")) return bench_model(argc - 1, argv + 1, true);
    if (!strcmp(argv[1], "stream")) return bench_stream(argc - 1, argv + 1);
    if (!strcmp(argv[1], "tokenize")) return bench_tokenize(argc - 1, argv + 1);
    if (!strcmp(argv[1], "batch")) return bench_batch(argc - 1, argv + 1);
    if (!strcmp(argv[1], "serve-memory")) return bench_serve_memory(argc - 1, argv + 1);
    fprintf(stderr, "kvbound bench: unknown benchmark '%s' (available: cache, decode, prefill, stream, tokenize, batch, serve-memory)\n", argv[1]);
    return 2;
}
