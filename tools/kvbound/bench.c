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

static int bench_cache(int argc, char **argv) {
    char policies_arg[256] = "streaming";
    int layers = 32, kv_heads = 8, heads = 0, head_dim = 128, budget = 2048, steps = 64, threads = 2, block = 16;
    long long seed = 1;
    struct cli_kv_types kvt;
    cli_kv_types_init(&kvt, KVB_DTYPE_F16);
    enum kvb_pos_mode pos = KVB_POS_POLICY_DEFAULT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { bench_usage(stdout); return 0; }
        else if (!strcmp(a, "--json")) continue;
        const int kr = cli_kv_types_option(&kvt, argc, argv, &i);
        if (kr < 0) return 2;
        if (kr > 0) continue;
        if (!(v = cli_opt_value("bench cache", "--policy --layers --kv-heads --heads --head-dim --budget --steps --block-size -t --threads --seed --dtype --positions", argc, argv, &i))) return 2;
        if (!strcmp(a, "--policy")) snprintf(policies_arg, sizeof policies_arg, "%s", v);
        else if (!strcmp(a, "--layers")) { if (cli_parse_i32(a, v, 1, 4096, &layers)) return 2; }
        else if (!strcmp(a, "--kv-heads")) { if (cli_parse_i32(a, v, 1, 1024, &kv_heads)) return 2; }
        else if (!strcmp(a, "--heads")) { if (cli_parse_i32(a, v, 1, 65536, &heads)) return 2; }
        else if (!strcmp(a, "--head-dim")) { if (cli_parse_i32(a, v, 1, 512, &head_dim)) return 2; }
        else if (!strcmp(a, "--budget")) { if (cli_parse_i32(a, v, 1, 1 << 24, &budget)) return 2; }
        else if (!strcmp(a, "--steps")) { if (cli_parse_i32(a, v, 1, 1 << 24, &steps)) return 2; }
        else if (!strcmp(a, "--block-size")) { if (cli_parse_i32(a, v, 1, 4096, &block)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (cli_parse_i32(a, v, 1, 1024, &threads)) return 2; }
        else if (!strcmp(a, "--seed")) { if (cli_parse_i64(a, v, 0, (1LL << 62), &seed)) return 2; }
        else if (!strcmp(a, "--dtype")) {
            if (kvb_dtype_from_name(v, &kvt.k) != KVB_OK) { fprintf(stderr, "kvbound: --dtype: %s\n", kvb_last_error()); return 2; }
            kvt.v = KVB_DTYPE_AS_K;
        } else if (!strcmp(a, "--positions")) {
            if (!strcmp(v, "original")) pos = KVB_POS_ORIGINAL;
            else if (!strcmp(v, "contiguous")) pos = KVB_POS_CONTIGUOUS;
            else if (!strcmp(v, "capped")) pos = KVB_POS_CAPPED;
            else { fprintf(stderr, "kvbound: --positions: '%s' is not original, contiguous or capped\n", v); return 2; }
        } else {
            fprintf(stderr, "kvbound bench cache: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (!heads) heads = 4 * kv_heads;
    if (heads % kv_heads) {
        fprintf(stderr, "kvbound: --heads (%d) must be a multiple of --kv-heads (%d)\n", heads, kv_heads);
        return 2;
    }
    struct bench_policy pol[MAX_POL];
    int n_pol = 0;
    for (char *tok = strtok(policies_arg, ","); tok; tok = strtok(NULL, ",")) {
        if (n_pol == MAX_POL) { fprintf(stderr, "kvbound: --policy: at most %d policies\n", MAX_POL); return 2; }
        if (kvb_policy_from_name(tok, &pol[n_pol].id) != KVB_OK) { fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error()); return 2; }
        n_pol++;
    }
    struct kvb_threadpool *tp;
    if (kvb_threadpool_init(threads, &tp) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }

    const size_t nq = (size_t)layers * heads * head_dim, nk = (size_t)layers * kv_heads * head_dim;
    float *q[DATA_SETS], *k[DATA_SETS], *v[DATA_SETS];
    float *out = malloc(sizeof(float) * (size_t)heads * head_dim);
    unsigned long long rs = (unsigned long long)seed * 2654435761ull + 1;
    for (int d = 0; d < DATA_SETS; d++) {
        q[d] = malloc(sizeof(float) * nq);
        k[d] = malloc(sizeof(float) * nk);
        v[d] = malloc(sizeof(float) * nk);
        if (!q[d] || !k[d] || !v[d] || !out) { fprintf(stderr, "kvbound: out of memory for bench data\n"); return 1; }
        for (size_t i = 0; i < nq; i++) q[d][i] = rnd(&rs);
        for (size_t i = 0; i < nk; i++) { k[d][i] = rnd(&rs); v[d][i] = rnd(&rs); }
    }
    int rc = 0;
    size_t page_bytes = 0;
    for (int p = 0; p < n_pol; p++) {
        struct kvb_cache_params cp = kvb_cache_default_params();
        cp.max_distance = budget; /* lminfinite: n_local = the cap, as the paper */
        cp.n_layer = layers; cp.n_kv_head = kv_heads; cp.head_dim = head_dim; cp.dtype = kvt.k; cp.dtype_v = kvt.v; cp.block_size = block;
        cp.pos_mode = pos;
        cp.rope = (struct kvb_rope){KVB_ROPE_INTERLEAVED, head_dim, 10000.0f, 1.0f, NULL};
        cp.policy = kvb_policy_default_params(pol[p].id);
        if (pol[p].id != KVB_POLICY_FULL) cp.policy.budget = budget;
        /* the snapkv family: the filled cache is its prompt, compressed (kept
         * whole) at the first step; a decode budget of 1 makes it attend to
         * budget + 1 tokens like every other bounded policy */
        if (kvb_policy_compresses(pol[p].id)) cp.policy.decode_budget = 1;
        size_t page = kvb_cache_page_bytes(&cp);
        page_bytes = page;
        int64_t max_tokens = pol[p].id == KVB_POLICY_FULL ? (int64_t)budget + steps + 1 : budget + 2;
        cp.pool_bytes = (size_t)layers * kv_heads * (size_t)(max_tokens / block + 2) * (page + 64);
        if (kvb_cache_init(NULL, &cp, &pol[p].cache) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
        for (int t = 0; t < budget; t++)
            for (int l = 0; l < layers; l++) {
                const size_t off = ((size_t)t % DATA_SETS);
                if (kvb_cache_append(pol[p].cache, l, k[off] + (size_t)l * kv_heads * head_dim, v[off] + (size_t)l * kv_heads * head_dim) != KVB_OK) {
                    fprintf(stderr, "kvbound: fill: %s\n", kvb_last_error());
                    return 1;
                }
            }
        pol[p].ns = cli_xcalloc((size_t)steps, sizeof(double), "step times");
        pol[p].n_ns = 0;
    }
    /* warm-up: one step each, untimed */
    const int round = 4;
    for (int done = -1; done < steps; done += round) {
        for (int p = 0; p < n_pol; p++) {
            int n_here = done < 0 ? 1 : (steps - done < round ? steps - done : round);
            for (int s = 0; s < n_here; s++) {
                int d = (done + s + DATA_SETS) % DATA_SETS;
                double t0 = cli_now_sec();
                for (int l = 0; l < layers; l++) {
                    kvb_status st = kvb_cache_decode(pol[p].cache, l, q[d] + (size_t)l * heads * head_dim, heads,
                                                     k[d] + (size_t)l * kv_heads * head_dim, v[d] + (size_t)l * kv_heads * head_dim, out, tp);
                    if (st != KVB_OK) { fprintf(stderr, "kvbound: decode: %s\n", kvb_last_error()); return 1; }
                }
                double dt = cli_now_sec() - t0;
                if (done >= 0) pol[p].ns[pol[p].n_ns++] = dt * 1e9;
            }
        }
        if (done < 0) done = 0 - round;
    }
    double bw = membw_read_gbs(tp, (size_t)1 << 30, 5);
    double page_bw = membw_page_read_gbs(tp, (size_t)1 << 30, page_bytes, 5);
    char cpu[256];
    cpu_model_name(cpu, sizeof cpu);
    double base_med = 0;
    printf("%s", n_pol > 1 ? "[\n" : "");
    for (int p = 0; p < n_pol; p++) {
        struct kvb_cache_stats cs;
        kvb_cache_get_stats(pol[p].cache, &cs);
        double med = median(pol[p].ns, pol[p].n_ns);
        if (p == 0) base_med = med;
        double kv_read = (double)cs.slots * (double)(kvb_dtype_row_bytes(kvt.k, head_dim) + kvb_dtype_row_bytes(cli_kv_v(&kvt), head_dim));
        double gbs = kv_read / med; /* bytes per ns == GB/s */
        printf("%s{\"policy\":\"%s\",\"layers\":%d,\"kv_heads\":%d,\"heads\":%d,\"head_dim\":%d,\"budget\":%d,"
               "\"dtype\":\"%s\",\"dtype_v\":\"%s\",\"threads\":%d,\"steps\":%d,\"kernels\":\"%s\",\"positions\":\"%s\","
               "\"ns_per_step\":%.0f,\"ns_per_step_min\":%.0f,\"ns_per_step_max\":%.0f,\"bytes\":%zu,\"bytes_peak\":%zu,"
               "\"kv_bytes_read_per_step\":%.0f,\"attn_read_gbs\":%.2f,\"machine_read_gbs\":%.2f,"
               "\"bw_fraction\":%.3f,\"page_bytes\":%zu,\"machine_page_read_gbs\":%.2f,\"page_bw_fraction\":%.3f,"
               "\"ratio_to_first\":%.3f,\"cpu\":\"%s\",\"nproc\":%d}%s\n",
               n_pol > 1 ? "  " : "", kvb_policy_name(pol[p].id), layers, kv_heads, heads, head_dim, budget,
               kvb_dtype_name(kvt.k), kvb_dtype_name(cli_kv_v(&kvt)), threads, pol[p].n_ns, kvb_kernels_name(),
               kvb_pos_mode_name(kvb_cache_pos_mode(pol[p].cache)), med, pol[p].ns[0], pol[p].ns[pol[p].n_ns - 1],
               cs.bytes_used, cs.bytes_peak, kv_read, gbs, bw, bw > 0 ? gbs / bw : 0, page_bytes, page_bw,
               page_bw > 0 ? gbs / page_bw : 0, base_med > 0 ? med / base_med : 0,
               cpu, threads, p + 1 < n_pol ? "," : "");
    }
    printf("%s", n_pol > 1 ? "]\n" : "");
    for (int p = 0; p < n_pol; p++) {
        kvb_cache_free(pol[p].cache);
        free(pol[p].ns);
    }
    for (int d = 0; d < DATA_SETS; d++) { free(q[d]); free(k[d]); free(v[d]); }
    free(out);
    kvb_threadpool_free(tp);
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
