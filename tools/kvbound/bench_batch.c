/*
 * bench_batch.c — `kvbound bench batch` and `kvbound bench serve-memory`:
 * the batched engine measured.
 *
 * batch: for each N in --parallel, N sequences of P prompt tokens read
 *   together (chunked prefill), then G tokens each decoded together; JSON
 *   list, one object per N. With --peer PATH, llama.cpp's
 *   llama-batched-bench runs on the same file with the same shapes
 *   (-npp P -ntg G -npl N...) and its speeds are printed alongside, so the
 *   ratio comes from one run.
 * serve-memory: a fixed KV pool of M bytes and sequences that have already
 *   seen T tokens (synthetic keys and values: full keeps all T, a bounded
 *   policy what it retains, its budget B); how many fit with each, and the
 *   aggregate decode rate each achieves over G steps.
 * Each parses its options into a struct (the model's through
 * cli_model_option), loads with cli_load_model and frees on one path.
 */
#include "cli.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PAR 64
#define MAXI(a, b) ((a) > (b) ? (a) : (b))
#define MINI(a, b) ((a) < (b) ? (a) : (b))

static int parse_list(const char *flag, const char *v, int *out, int max, int lo, int hi) {
    int n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (n == max) { fprintf(stderr, "kvbound bench: %s takes at most %d values\n", flag, max); return -1; }
        if (cli_parse_i32(flag, tok, lo, hi, &out[n])) return -1;
        n++;
    }
    if (!n) { fprintf(stderr, "kvbound bench: %s needs a list like 1,2,4\n", flag); return -1; }
    return n;
}

struct peer_row {
    int pl;
    double speed_pp, speed_tg;
};

/* Runs llama-batched-bench and reads its jsonl rows. Returns rows read, -1 on failure (printed). */
static int run_peer(const char *peer, const char *peer_args, const char *model, int P, int G, const int *par, int n_par, int threads,
                    struct peer_row *rows) {
    char npl[256] = "";
    int max_n = 1;
    for (int i = 0; i < n_par; i++) {
        size_t at = strlen(npl);
        snprintf(npl + at, sizeof npl - at, i ? ",%d" : "%d", par[i]);
        if (par[i] > max_n) max_n = par[i];
    }
    const int ctx = max_n * (P + G) + 256;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -c %d -b 2048 -ub 512 -npp %d -ntg %d -npl %s -t %d %s --output-format jsonl 2>/dev/null", peer,
             model, ctx, P, G, npl, threads, peer_args ? peer_args : "");
    fprintf(stderr, "kvbound bench batch: peer: %s\n", cmd);
    FILE *f = popen(cmd, "r");
    if (!f) { fprintf(stderr, "kvbound bench batch: cannot run the peer '%s'\n", peer); return -1; }
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < MAX_PAR) {
        const char *pl = strstr(line, "\"pl\":"), *pp = strstr(line, "\"speed_pp\":"), *tg = strstr(line, "\"speed_tg\":");
        if (!pl || !pp || !tg) continue;
        rows[n].pl = atoi(pl + 5);
        rows[n].speed_pp = atof(pp + 11);
        rows[n].speed_tg = atof(tg + 11);
        n++;
    }
    int rc = pclose(f);
    if (rc != 0 || n == 0) {
        fprintf(stderr, "kvbound bench batch: the peer exited with status %d after %d rows (is '%s' llama-batched-bench?)\n", rc, n, peer);
        return -1;
    }
    return n;
}

static int batch_usage(FILE *f) {
    fprintf(f,
            "usage: kvbound bench batch -m MODEL [options]\n"
            "\n"
            "N sequences read P-token prompts together, then decode G tokens each together;\n"
            "prints a JSON list, one object per N: parallel, prefill_tok_per_s,\n"
            "decode_tok_per_s (aggregate), decode_tok_per_s_per_seq, pool_bytes_peak\n"
            "(and expert_bytes_per_token for a mixture of experts: the expert weight bytes a decoded\n"
            "token cost, each routed expert read once per step for all the sequences it serves)\n"
            "(and recall_pages with --recall: every sequence with its own cold tier).\n"
            "\n"
            "  --parallel LIST      sequence counts (default 1,2,4,8,16,32)\n"
            "  --prompt-tokens P    prompt tokens per sequence (default 128)\n"
            "  --gen-tokens G       tokens generated per sequence (default 64)\n"
            "  --policy NAME        cache policy of every sequence (default full)\n"
            "  --chunk C            prompt chunk (default 256)\n"
            "  --step-tokens S      rows per step (default: N x min(P, C), at most 4096: all prompts in one step)\n"
            "  -t N                 threads (default 2)\n"
            "  --no-mmap            read the weights into memory (huge pages) instead of mapping the file\n"
            "  --peer PATH          also run llama.cpp's llama-batched-bench on the same file and shapes\n"
            "  --peer-args ARGS     more arguments for the peer, e.g. '--no-repack' (llama.cpp without its AMX and\n"
            "                       repacked weights, which crash on prompt batches on some Xeons)\n"
            "  --json               accepted (the output is JSON)\n"
            "\n");
    cli_kv_types_help(f, "f16");
    cli_recall_help(f, 1024);
    cli_policy_help(f, 1024);
    return 0;
}

static double now(void) { return cli_now_sec(); }

struct batch_opts {
    struct cli_model_opts mo; /* -m -t --no-mmap */
    const char *peer, *peer_args;
    int par[MAX_PAR], n_par, P, G, chunk, step_tokens;
    enum kvb_policy_id pid;
    struct cli_policy po;
    struct cli_kv_types kvt;
    struct cli_recall rec;
};

/* What one sequence count's run measured. */
struct batch_result {
    double t_pp, t_tg; /* seconds reading the prompts, decoding */
    int64_t decode_tokens;
    size_t pool_bytes_peak;
    int64_t expert_bytes_decode; /* expert weight bytes the decode steps read */
};

/* A value option of bench batch; -1: printed. */
static int batch_option(struct batch_opts *o, const char *a, const char *v) {
    if (!strcmp(a, "--peer")) o->peer = v;
    else if (!strcmp(a, "--peer-args")) { /* words and dashes only: they go through a shell */
        for (const char *c = v; *c; c++)
            if (!(isalnum((unsigned char)*c) || strchr(" -_.,=/:", *c))) {
                fprintf(stderr, "kvbound bench batch: --peer-args '%s': '%c' is not allowed (letters, digits, spaces and -_.,=/: only)\n", v, *c);
                return -1;
            }
        o->peer_args = v;
    }
    else if (!strcmp(a, "--parallel")) return (o->n_par = parse_list(a, v, o->par, MAX_PAR, 1, 4096)) < 0 ? -1 : 0;
    else if (!strcmp(a, "--prompt-tokens")) return cli_parse_i32(a, v, 1, 1 << 20, &o->P);
    else if (!strcmp(a, "--gen-tokens")) return cli_parse_i32(a, v, 2, 1 << 20, &o->G);
    else if (!strcmp(a, "--chunk")) return cli_parse_i32(a, v, 1, 8192, &o->chunk);
    else if (!strcmp(a, "--step-tokens")) return cli_parse_i32(a, v, 1, 65536, &o->step_tokens);
    else if (kvb_policy_from_name(v, &o->pid) != KVB_OK) { /* --policy */
        fprintf(stderr, "kvbound bench batch: %s\n", kvb_last_error());
        return -1;
    }
    return 0;
}

static int batch_parse(struct batch_opts *o, int argc, char **argv) {
    *o = (struct batch_opts){.par = {1, 2, 4, 8, 16, 32}, .n_par = 6, .P = 128, .G = 64, .chunk = 256, .pid = KVB_POLICY_FULL};
    cli_model_init(&o->mo, "bench batch", CLI_MODEL_NO_MMAP | CLI_MODEL_THREADS, 2);
    cli_recall_init(&o->rec);
    cli_policy_init(&o->po, 1024);
    cli_kv_types_init(&o->kvt, KVB_DTYPE_F16);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return batch_usage(stdout);
        if (!strcmp(a, "--json")) continue;
        int r = cli_model_option(&o->mo, argc, argv, &i);
        if (r == 0) r = cli_cache_option(&o->po, &o->kvt, &o->rec, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!(v = cli_opt_value("bench batch", "--peer --peer-args --parallel --prompt-tokens --gen-tokens --chunk --step-tokens --policy", argc, argv, &i))) return 2;
        if (batch_option(o, a, v)) return 2;
    }
    if (!cli_model_required(&o->mo)) return 2;
    if (o->step_tokens && o->step_tokens < o->chunk) {
        fprintf(stderr, "kvbound bench batch: --step-tokens (%d) must be at least --chunk (%d)\n", o->step_tokens, o->chunk);
        return 2;
    }
    return CLI_GO_ON;
}

/* Every sequence's parameters: the policy, G tokens each, greedy, past end-of-sequence. */
static struct kvb_seq_params batch_seq_params(const struct batch_opts *o) {
    struct kvb_seq_params sp = kvb_seq_default_params();
    sp.kv = cli_kv_params(&o->po, o->pid, &o->kvt, &o->rec);
    sp.n_ctx = o->P + o->G + 8;
    sp.max_tokens = o->G;
    sp.ignore_eos = true;
    sp.sampler.temp = 0;
    return sp;
}

/* A batch for N sequences with the pool they need (a first batch tells
 * its size), holding the N prompts; -1: printed (*b may need freeing). */
static int batch_open(const struct batch_opts *o, const struct kvb_model *m, const struct kvb_seq_params *sp, int N, int32_t *prompt, struct kvb_batch **b) {
    struct kvb_model_info mi;
    kvb_model_get_info(m, &mi);
    struct kvb_batch_params bp = kvb_batch_default_params();
    bp.n_threads = o->mo.threads;
    bp.kv.kv_dtype = o->kvt.k;
    bp.kv.kv_dtype_v = o->kvt.v;
    bp.max_seqs = N;
    bp.chunk = o->chunk;
    /* default: every prompt read in one step (up to 4096 rows), as llama-batched-bench reads them before decoding */
    bp.step_tokens = o->step_tokens ? MAXI(o->step_tokens, N) : MAXI(o->chunk, MINI(N * MINI(o->P, o->chunk), 4096));
    if (kvb_batch_init(m, &bp, b) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return -1; }
    bp.kv_pool_bytes = kvb_batch_seq_min_bytes(*b, sp, o->P) * (size_t)N + ((size_t)64 << 20);
    kvb_batch_free(*b);
    *b = NULL;
    if (kvb_batch_init(m, &bp, b) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return -1; }
    for (int s = 0; s < N; s++) {
        for (int i = 0; i < o->P; i++) prompt[i] = 1 + (int32_t)(((uint64_t)(s + 1) * 7919u + (uint64_t)i * 104729u) % (uint64_t)(mi.n_vocab - 1));
        int32_t id;
        if (kvb_batch_add(*b, sp, prompt, o->P, &id) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return -1; }
    }
    return 0;
}

/* Steps until every prompt is read (each ends with its first token
 * sampled), then until every sequence is done, timing the two; -1: printed. */
static int batch_steps(struct kvb_batch *b, int N, struct batch_result *res) {
    double t0 = now();
    int rc = 0;
    for (;;) {
        int32_t adv, failed;
        struct kvb_batch_stats bs;
        if (kvb_batch_step(b, &adv, &failed) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); rc = -1; break; }
        int waiting = 0, done = 0;
        for (int s = 0; s < N; s++) {
            struct kvb_seq_info si;
            kvb_batch_seq_info(b, s, &si);
            waiting += si.state == KVB_SEQ_PROMPT;
            done += si.state == KVB_SEQ_DONE;
        }
        kvb_batch_get_stats(b, &bs);
        if (!waiting && res->t_pp == 0) {
            res->t_pp = now() - t0;
            res->expert_bytes_decode = -bs.expert_bytes_read; /* from here on */
            t0 = now();
            fprintf(stderr, "kvbound bench batch: N %d: %d prompts read in %.2f s\n", N, N, res->t_pp);
            continue;
        }
        if (res->t_pp > 0) res->decode_tokens += adv;
        if (done == N || adv == 0) break;
    }
    res->t_tg = now() - t0;
    struct kvb_batch_stats bs;
    kvb_batch_get_stats(b, &bs);
    res->pool_bytes_peak = bs.pool_bytes_peak;
    res->expert_bytes_decode += bs.expert_bytes_read;
    return rc;
}

/* The JSON object of N sequences (with the peer's speeds for N, if any); last: no comma after it. */
static void batch_row(const struct batch_opts *o, const struct kvb_seq_params *sp, int N, const struct batch_result *res, const char *cpu,
                      const struct peer_row *prow, int n_peer, bool last) {
    const double dec = res->t_tg > 0 ? (double)res->decode_tokens / res->t_tg : 0;
    printf("  {\"bench\":\"batch\",\"model\":\"%s\",\"policy\":\"%s\",\"budget\":%d,\"threads\":%d,\"kernels\":\"%s\",\"parallel\":%d,"
           "\"prompt_tokens\":%d,\"gen_tokens\":%d,\"prefill_tok_per_s\":%.2f,\"decode_tok_per_s\":%.2f,"
           "\"decode_tok_per_s_per_seq\":%.2f,\"pool_bytes_peak\":%zu",
           o->mo.path, kvb_policy_name(o->pid), o->pid == KVB_POLICY_FULL ? 0 : sp->kv.policy.budget, o->mo.threads, kvb_kernels_name(), N, o->P, o->G,
           res->t_pp > 0 ? (double)N * o->P / res->t_pp : 0, dec, dec / N, res->pool_bytes_peak);
    if (sp->kv.recall.pages > 0) printf(",\"recall_pages\":%d", (int)sp->kv.recall.pages);
    if (res->expert_bytes_decode > 0) /* each routed expert read once per step for all the rows it serves */
        printf(",\"expert_bytes_per_token\":%.0f", res->decode_tokens > 0 ? (double)res->expert_bytes_decode / (double)res->decode_tokens : 0);
    for (int r = 0; r < n_peer; r++)
        if (prow[r].pl == N)
            printf(",\"peer_prefill_tok_per_s\":%.2f,\"peer_decode_tok_per_s\":%.2f,\"decode_ratio_vs_peer\":%.3f", prow[r].speed_pp,
                   prow[r].speed_tg, prow[r].speed_tg > 0 ? dec / prow[r].speed_tg : 0);
    printf(",\"cpu\":\"%s\"}%s\n", cpu, last ? "" : ",");
    fflush(stdout);
}

/* Every --parallel N in turn, a JSON list; the exit status. */
static int batch_run_all(const struct batch_opts *o, const struct kvb_model *m, const struct kvb_seq_params *sp, const struct peer_row *prow, int n_peer) {
    char cpu[256];
    cpu_model_name(cpu, sizeof cpu);
    int32_t *prompt = cli_xmalloc(sizeof(int32_t) * (size_t)o->P, "prompt");
    printf("[\n");
    int rc = 0;
    for (int k = 0; k < o->n_par && !rc; k++) {
        struct kvb_batch *b = NULL;
        struct batch_result res = {0};
        if (batch_open(o, m, sp, o->par[k], prompt, &b) || batch_steps(b, o->par[k], &res)) rc = 1;
        else batch_row(o, sp, o->par[k], &res, cpu, prow, n_peer, k + 1 == o->n_par);
        kvb_batch_free(b);
    }
    printf("]\n");
    free(prompt);
    return rc;
}

int bench_batch(int argc, char **argv) {
    struct batch_opts o;
    int rc = batch_parse(&o, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    cli_warn_threads(o.mo.threads);
    struct kvb_model *m;
    struct kvb_model_info mi;
    if (cli_load_model(&o.mo, &m, &mi)) return 1;
    cli_policy_warn(&o.po, o.pid, mi.n_ctx_train);
    const struct kvb_seq_params sp = batch_seq_params(&o);
    struct peer_row prow[MAX_PAR];
    int n_peer = o.peer ? run_peer(o.peer, o.peer_args, o.mo.path, o.P, o.G, o.par, o.n_par, o.mo.threads, prow) : 0;
    rc = n_peer < 0 ? 1 : batch_run_all(&o, m, &sp, prow, n_peer);
    kvb_model_free(m);
    return rc;
}

/* ---- serve-memory ---- */

static int serve_usage(FILE *f) {
    fprintf(f,
            "usage: kvbound bench serve-memory -m MODEL [options]\n"
            "\n"
            "A KV pool of M bytes and sequences that have each already seen T tokens: how\n"
            "many fit at once under full and under a bounded policy at budget B, and the\n"
            "aggregate decode tokens/s each achieves (synthetic keys and values stand in for\n"
            "the T tokens: full holds all T, the bounded policy the B it retains).\n"
            "\n"
            "  --pool-mb M        KV pool in MiB (default 4096)\n"
            "  --context T        tokens each sequence has seen (default 16384)\n"
            "  --sessions S       sequences wanted (default 32)\n"
            "  --policy NAME      the bounded policy (default streaming); --budget B (default 1024)\n"
            "  --gen-tokens G     decode steps measured (default 16)\n"
            "  -t N               threads (default 2)\n"
            "  --json             one object: sessions_full, sessions_bounded, decode_tok_per_s_full,\n"
            "                     decode_tok_per_s_bounded, throughput_ratio\n");
    cli_kv_types_help(f, "f16");
    return 0;
}

/* Decode rate of n sequences each holding `hold` synthetic tokens. */
static int serve_run(struct kvb_model *m, const struct kvb_model_info *mi, const struct cli_kv_types *kvt, const struct kvb_seq_params *sp, int n,
                     int hold, size_t pool_bytes,
                     int threads, int G, double *tok_per_s, size_t *peak) {
    struct kvb_batch_params bp = kvb_batch_default_params();
    bp.n_threads = threads;
    bp.kv.kv_dtype = kvt->k;
    bp.kv.kv_dtype_v = kvt->v;
    bp.max_seqs = n;
    bp.kv_pool_bytes = pool_bytes;
    bp.step_tokens = MAXI(bp.chunk, n);
    struct kvb_batch *b;
    if (kvb_batch_init(m, &bp, &b) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
    const size_t KD = (size_t)mi->n_head_kv * mi->head_dim;
    float *k = cli_xmalloc(sizeof(float) * KD, "keys"), *v = cli_xmalloc(sizeof(float) * KD, "values");
    uint64_t rng = 12345;
    int rc = 0;
    for (int s = 0; s < n && !rc; s++) {
        int32_t tok = 1 + s % (mi->n_vocab - 1), id;
        if (kvb_batch_add(b, sp, &tok, 1, &id) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); rc = 1; break; }
        struct kvb_cache *c = kvb_batch_seq_cache(b, id);
        for (int t = 0; t < hold && !rc; t++)
            for (int l = 0; l < mi->n_layer && !rc; l++) {
                for (size_t i = 0; i < KD; i++) {
                    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                    k[i] = (float)((int)(rng >> 40) % 2001 - 1000) / 1000.0f;
                    v[i] = (float)((int)(rng >> 20) % 2001 - 1000) / 1000.0f;
                }
                if (kvb_cache_append(c, l, k, v) != KVB_OK) {
                    fprintf(stderr, "kvbound: sequence %d of %d, token %d: %s\n", s, n, t, kvb_last_error());
                    rc = 1;
                }
            }
        if (s % 4 == 3 || s + 1 == n) fprintf(stderr, "kvbound bench serve-memory: %s: %d of %d sequences hold %d tokens\n",
                                              kvb_policy_name(sp->kv.policy.id), s + 1, n, hold);
    }
    double t0 = 0;
    int64_t tokens = 0;
    for (int step = 0; step <= G && !rc; step++) {
        int32_t adv, failed;
        if (step == 1) t0 = cli_now_sec(); /* step 0 reads the one-token prompts */
        if (kvb_batch_step(b, &adv, &failed) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); rc = 1; break; }
        if (step >= 1) tokens += adv;
    }
    *tok_per_s = rc ? 0 : (double)tokens / (cli_now_sec() - t0);
    struct kvb_batch_stats bs;
    kvb_batch_get_stats(b, &bs);
    *peak = bs.pool_bytes_peak;
    free(k);
    free(v);
    kvb_batch_free(b);
    return rc;
}

struct serve_mem_opts {
    struct cli_model_opts mo; /* -m -t */
    int pool_mb, T, S, G;
    bool json;
    enum kvb_policy_id pid;
    struct cli_policy po;
    struct cli_kv_types kvt;
};

/* One side of serve-memory, full or bounded: its sequences, how many fit the pool, what they achieved. */
struct serve_side {
    struct kvb_seq_params sp;
    int hold; /* tokens each sequence holds */
    int fit;
    double tok_per_s;
    size_t peak;
};

static int serve_mem_parse(struct serve_mem_opts *o, int argc, char **argv) {
    *o = (struct serve_mem_opts){.pool_mb = 4096, .T = 16384, .S = 32, .G = 16, .pid = KVB_POLICY_STREAMING};
    cli_model_init(&o->mo, "bench serve-memory", CLI_MODEL_THREADS, 2);
    cli_policy_init(&o->po, 1024);
    cli_kv_types_init(&o->kvt, KVB_DTYPE_F16);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return serve_usage(stdout);
        if (!strcmp(a, "--json")) { o->json = true; continue; }
        int r = cli_model_option(&o->mo, argc, argv, &i);
        if (r == 0) r = cli_cache_option(&o->po, &o->kvt, NULL, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!(v = cli_opt_value("bench serve-memory", "--pool-mb --context --sessions --gen-tokens --policy", argc, argv, &i))) return 2;
        if (!strcmp(a, "--pool-mb")) { if (cli_parse_i32(a, v, 1, 1 << 20, &o->pool_mb)) return 2; }
        else if (!strcmp(a, "--context")) { if (cli_parse_i32(a, v, 1, 1 << 24, &o->T)) return 2; }
        else if (!strcmp(a, "--sessions")) { if (cli_parse_i32(a, v, 1, 4096, &o->S)) return 2; }
        else if (!strcmp(a, "--gen-tokens")) { if (cli_parse_i32(a, v, 1, 1 << 20, &o->G)) return 2; }
        else if (kvb_policy_from_name(v, &o->pid) != KVB_OK) { /* --policy */
            fprintf(stderr, "kvbound bench serve-memory: %s\n", kvb_last_error());
            return 2;
        }
    }
    if (!cli_model_required(&o->mo)) return 2;
    if (o->pid == KVB_POLICY_FULL) { fprintf(stderr, "kvbound bench serve-memory: --policy must be a bounded policy (full is the other side)\n"); return 2; }
    return CLI_GO_ON;
}

/* How many sequences of each side fit the pool, each at what it holds
 * after T tokens plus G more (printed); -1: printed. */
static int serve_mem_fit(const struct serve_mem_opts *o, const struct kvb_model *m, struct serve_side *full, struct serve_side *bounded) {
    const size_t pool = (size_t)o->pool_mb << 20;
    struct kvb_batch_params bp = kvb_batch_default_params();
    bp.kv.kv_dtype = o->kvt.k;
    bp.kv.kv_dtype_v = o->kvt.v;
    bp.max_seqs = 1;
    bp.kv_pool_bytes = pool;
    struct kvb_batch *probe;
    if (kvb_batch_init(m, &bp, &probe) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return -1; }
    const size_t per_full = kvb_batch_seq_min_bytes(probe, &full->sp, 1), per_bounded = kvb_batch_seq_min_bytes(probe, &bounded->sp, 1);
    kvb_batch_free(probe);
    full->fit = (int)MINI((size_t)o->S, pool / per_full);
    bounded->fit = (int)MINI((size_t)o->S, pool / per_bounded);
    fprintf(stderr, "kvbound bench serve-memory: pool %d MiB; full needs %.1f MiB per sequence of %d tokens -> %d; %s at %d needs %.1f MiB -> %d\n",
            o->pool_mb, per_full / 1048576.0, o->T, full->fit, kvb_policy_name(o->pid), bounded->sp.kv.policy.budget, per_bounded / 1048576.0, bounded->fit);
    return 0;
}

static void serve_mem_report(const struct serve_mem_opts *o, const struct serve_side *full, const struct serve_side *bounded) {
    const double ratio = full->tok_per_s > 0 ? bounded->tok_per_s / full->tok_per_s : 0;
    const int B = bounded->sp.kv.policy.budget;
    if (o->json)
        printf("{\"bench\":\"serve-memory\",\"model\":\"%s\",\"pool_bytes\":%zu,\"context\":%d,\"sessions\":%d,\"policy\":\"%s\",\"budget\":%d,"
               "\"threads\":%d,\"gen_tokens\":%d,\"sessions_full\":%d,\"sessions_bounded\":%d,\"decode_tok_per_s_full\":%.2f,"
               "\"decode_tok_per_s_bounded\":%.2f,\"throughput_ratio\":%.3f,\"pool_bytes_peak_full\":%zu,\"pool_bytes_peak_bounded\":%zu}\n",
               o->mo.path, (size_t)o->pool_mb << 20, o->T, o->S, kvb_policy_name(o->pid), B, o->mo.threads, o->G, full->fit, bounded->fit,
               full->tok_per_s, bounded->tok_per_s, ratio, full->peak, bounded->peak);
    else
        printf("pool %d MiB, context %d, wanted %d sessions\n  full:      %3d sessions, %8.2f tok/s aggregate\n  %-10s %3d sessions, %8.2f tok/s aggregate (budget %d)\n  ratio %.2fx\n",
               o->pool_mb, o->T, o->S, full->fit, full->tok_per_s, kvb_policy_name(o->pid), bounded->fit, bounded->tok_per_s, B, ratio);
}

int bench_serve_memory(int argc, char **argv) {
    struct serve_mem_opts o;
    int rc = serve_mem_parse(&o, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    cli_warn_threads(o.mo.threads);
    struct kvb_model *m;
    struct kvb_model_info mi;
    if (cli_load_model(&o.mo, &m, &mi)) return 1;
    struct serve_side full = {.sp = kvb_seq_default_params(), .hold = o.T}, bounded = {.sp = kvb_seq_default_params()};
    full.sp.n_ctx = o.T + o.G + 8;
    full.sp.ignore_eos = bounded.sp.ignore_eos = true;
    full.sp.sampler.temp = bounded.sp.sampler.temp = 0;
    bounded.sp.kv = cli_kv_params(&o.po, o.pid, &o.kvt, NULL);
    full.sp.kv.kv_dtype = o.kvt.k; /* the pool's rows */
    full.sp.kv.kv_dtype_v = o.kvt.v;
    bounded.hold = MINI(o.T, bounded.sp.kv.policy.budget);
    const size_t pool = (size_t)o.pool_mb << 20;
    rc = serve_mem_fit(&o, m, &full, &bounded) ? 1 : 0;
    struct serve_side *sides[2] = {&full, &bounded};
    for (int k = 0; k < 2 && !rc; k++)
        if (sides[k]->fit > 0)
            rc = serve_run(m, &mi, &o.kvt, &sides[k]->sp, sides[k]->fit, sides[k]->hold, pool, o.mo.threads, o.G, &sides[k]->tok_per_s, &sides[k]->peak);
    if (!rc) serve_mem_report(&o, &full, &bounded);
    kvb_model_free(m);
    return rc;
}
