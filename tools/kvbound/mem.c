/*
 * mem.c — `kvbound mem`: KV-cache memory, M = B x T x L x n_kv x (K row +
 * V row bytes), K and V each in its type, quantized types counted by their
 * blocks (q8_0: 34 bytes per 32 values) and optional page rounding. A bounded
 * policy's size does not depend on T; the saving is printed beside it. A
 * model's sliding-window layers (Gemma 2/3: its info's window and count, or
 * a preset's, or --window/--window-layers) hold min(W - 1, T) tokens
 * whatever the policy (what the cache keeps between steps; a step adds its
 * tokens), which governs the other (global) layers only.
 * GB = 10^9 bytes (GiB with --gib), rounded to nearest. The options parse
 * into struct mem_opts; the shape comes from a preset, a model or the
 * flags; then a header, a row per tokens x batch, and the notes.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct preset {
    const char *name;
    int32_t layers, kv_heads, head_dim;
    int32_t window, window_layers; /* sliding-window layers (Gemma): W tokens on that many layers; 0: none */
};

/* From the public model configs (num_hidden_layers, num_key_value_heads, head_dim). */
static const struct preset k_presets[] = {
    {"llama2-7b", 32, 32, 128, 0, 0},  {"llama2-13b", 40, 40, 128, 0, 0},    {"llama3-8b", 32, 8, 128, 0, 0},
    {"llama3-70b", 80, 8, 128, 0, 0},  {"llama3.1-405b", 126, 8, 128, 0, 0}, {"mistral-7b", 32, 8, 128, 0, 0},
    {"qwen2.5-7b", 28, 4, 128, 0, 0},  {"tinyllama-1.1b", 22, 4, 64, 0, 0},  {"smollm2-135m", 30, 3, 64, 0, 0},
    {"gemma2-2b", 26, 4, 256, 4096, 13}, {"gemma2-9b", 42, 8, 256, 4096, 21}, {"gemma3-1b", 26, 1, 256, 512, 22},
    {"gemma3-4b", 34, 4, 256, 1024, 29}, {"gemma3-27b", 62, 16, 128, 1024, 52},
};

/* Bytes of the K and V of `tokens` tokens: a K row and a V row of head_dim
 * elements per (layer, KV head), each in its type; with block_size > 0 the
 * tokens round up to whole pages (the bytes a kvbound cache then holds). */
static unsigned long long kv_bytes(int32_t L, int32_t H, int32_t D, uint32_t kt, uint32_t vt, long long tokens, long long batch, int32_t block) {
    long long t = tokens;
    if (block > 0) t = (tokens + block - 1) / block * block;
    return (unsigned long long)batch * (unsigned long long)t * (unsigned long long)L * (unsigned long long)H *
           (kvb_type_row_bytes(kt, D) + kvb_type_row_bytes(vt, D));
}

/* f32, f16, bf16, q8_0 or q4_0 by name; false (printed) otherwise. */
static bool kv_type(const char *flag, const char *v, uint32_t *out) {
    const uint32_t ok[] = {KVB_TYPE_F32, KVB_TYPE_F16, KVB_TYPE_BF16, KVB_TYPE_Q8_0, KVB_TYPE_Q4_0};
    for (size_t k = 0; k < 5; k++)
        if (!strcasecmp(v, kvb_type_name(ok[k]))) {
            *out = ok[k];
            return true;
        }
    fprintf(stderr, "kvbound: %s: '%s' is not f32, f16, bf16, q8_0 or q4_0\n", flag, v);
    return false;
}

static int parse_list_ll(const char *flag, const char *v, long long *out, int *n, int max) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*n >= max) { fprintf(stderr, "kvbound: %s: at most %d values\n", flag, max); return -1; }
        long long x;
        if (cli_parse_i64(flag, tok, 1, 1LL << 40, &x)) return -1;
        out[(*n)++] = x;
    }
    return 0;
}

struct mem_opts {
    struct cli_model_opts mo; /* -m */
    const char *preset;
    char name[128]; /* the preset's, the model's or "custom" */
    int32_t L, H, D, block, budget, sinks, recall, keep; /* keep: the pinned span, on top of the budget */
    int32_t window, n_win; /* sliding-window layers: n_win of the L hold min(window, T) tokens; 0: none */
    long long ctx[16], batch[16];
    int n_ctx, n_batch;
    uint32_t type, vtype;
    bool v_set, json, gib;
    enum kvb_policy_id pid;
};

static void mem_usage(void) {
    printf("usage: kvbound mem [--preset NAME | -m MODEL.gguf | --layers L --kv-heads H --head-dim D] --ctx T[,T...]\n"
           "                   [--batch B[,B...]] [--dtype f32|f16|bf16|q8_0|q4_0] [--dtype-k T --dtype-v T]\n"
           "                   [--policy P --budget N [--sinks S] [--keep K]] [--recall-pages R] [--block-size N] [--gib] [--json]\n"
           "                   [--window W --window-layers N]\n\n"
           "KV memory M = batch x tokens x layers x kv_heads x (K row + V row bytes), a row being head_dim\n"
           "elements (q8_0: 34 bytes per 32, q4_0: 18 per 32, ggml's blocks). --dtype sets both (also\n"
           "--kv-dtype, --kv-dtype-k, --kv-dtype-v as the other commands); --block-size rounds tokens up to whole pages, which\n"
           "is what a kvbound cache with that page size holds.\n"
           "--recall-pages R (with a bounded policy): the pool also holds each stream's recall area, R pages\n"
           "of --block-size (16) tokens; bounded bytes include it (recall_bytes in the JSON). The cold tier is\n"
           "host memory or disk, not pool: cold_bytes_per_token is what each evicted token costs there.\n"
           "--keep K (with a bounded policy): the first K tokens are pinned (never evicted) on top of the budget,\n"
           "so a stream holds min(budget + K, tokens), as run's, chat's and the library's sizing rule count them.\n"
           "Sliding-window layers (Gemma 2/3: from -m MODEL or a gemma preset, or --window W --window-layers N):\n"
           "those layers hold min(W - 1, tokens) between steps whatever the policy, which bounds the other (global)\n"
           "layers only; recall areas and the cold tier are the global layers'.\n"
           "Note: some published tables halve these figures: they drop the factor 2 for K and V.\npresets:");
    for (size_t k = 0; k < sizeof k_presets / sizeof *k_presets; k++) printf(" %s", k_presets[k].name);
    printf("\n");
}

/* A value option of mem; -1: printed. */
static int mem_option(struct mem_opts *o, const char *a, const char *v) {
    if (!strcmp(a, "--preset")) o->preset = v;
    else if (!strcmp(a, "--layers")) return cli_parse_i32(a, v, 1, 100000, &o->L);
    else if (!strcmp(a, "--kv-heads")) return cli_parse_i32(a, v, 1, 100000, &o->H);
    else if (!strcmp(a, "--head-dim")) return cli_parse_i32(a, v, 1, 100000, &o->D);
    else if (!strcmp(a, "--ctx")) return parse_list_ll(a, v, o->ctx, &o->n_ctx, 16);
    else if (!strcmp(a, "--batch")) return parse_list_ll(a, v, o->batch, &o->n_batch, 16);
    else if (!strcmp(a, "--block-size")) return cli_parse_i32(a, v, 1, 1 << 20, &o->block);
    else if (!strcmp(a, "--budget")) return cli_parse_i32(a, v, 1, 1 << 30, &o->budget);
    else if (!strcmp(a, "--recall-pages")) return cli_parse_i32(a, v, 1, KVB_RECALL_MAX_PAGES, &o->recall);
    else if (!strcmp(a, "--keep")) return cli_parse_i32(a, v, 0, KVB_KEEP_MAX, &o->keep);
    else if (!strcmp(a, "--sinks")) return cli_parse_i32(a, v, 0, 1 << 20, &o->sinks);
    else if (!strcmp(a, "--window")) return cli_parse_i32(a, v, 1, 1 << 30, &o->window);
    else if (!strcmp(a, "--window-layers")) return cli_parse_i32(a, v, 0, 100000, &o->n_win);
    else if (!strcmp(a, "--policy")) {
        if (kvb_policy_from_name(v, &o->pid) != KVB_OK) { fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error()); return -1; }
    } else if (!strcmp(a, "--dtype") || !strcmp(a, "--kv-dtype")) {
        if (!kv_type(a, v, &o->type)) return -1;
        o->v_set = false;
    } else if (!strcmp(a, "--dtype-k") || !strcmp(a, "--kv-dtype-k")) {
        if (!kv_type(a, v, &o->type)) return -1;
    } else { /* --dtype-v, --kv-dtype-v */
        if (!kv_type(a, v, &o->vtype)) return -1;
        o->v_set = true;
    }
    return 0;
}

static int mem_parse(struct mem_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    cli_model_init(&o->mo, "mem", 0, 0);
    o->sinks = -1;
    o->type = o->vtype = KVB_TYPE_F16;
    o->pid = KVB_POLICY_FULL;
    snprintf(o->name, sizeof o->name, "custom");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { mem_usage(); return 0; }
        if (!strcmp(a, "--json")) { o->json = true; continue; }
        if (!strcmp(a, "--gib")) { o->gib = true; continue; }
        const int r = cli_model_option(&o->mo, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!(v = cli_opt_value("mem", "--preset --layers --kv-heads --head-dim --ctx --batch --block-size --budget --recall-pages --sinks --keep --policy "
                                       "--dtype --kv-dtype --dtype-k --kv-dtype-k --dtype-v --kv-dtype-v --window --window-layers", argc, argv, &i))) return 2;
        if (mem_option(o, a, v)) return 2;
    }
    return CLI_GO_ON;
}

/* Layers, KV heads and head dim from --preset or -m (else the flags'):
 * CLI_GO_ON, or the exit status (printed). */
static int mem_shape(struct mem_opts *o) {
    if (o->preset) {
        const struct preset *p = NULL;
        for (size_t k = 0; k < sizeof k_presets / sizeof *k_presets; k++)
            if (!strcmp(o->preset, k_presets[k].name)) p = &k_presets[k];
        if (!p) { fprintf(stderr, "kvbound: --preset: unknown '%s' (see --help)\n", o->preset); return 2; }
        o->L = p->layers; o->H = p->kv_heads; o->D = p->head_dim;
        if (!o->window) { o->window = p->window; o->n_win = p->window_layers; }
        snprintf(o->name, sizeof o->name, "%s", p->name);
    } else if (o->mo.path) {
        struct kvb_model *m;
        struct kvb_model_info in;
        if (cli_load_model(&o->mo, &m, &in)) return 1;
        o->L = in.n_layer; o->H = in.n_head_kv; o->D = in.head_dim;
        if (!o->window) { o->window = in.sliding_window; o->n_win = in.n_swa_layers; } /* the model's windows */
        snprintf(o->name, sizeof o->name, "%s", o->mo.path);
        kvb_model_free(m);
    }
    if (!o->L || !o->H || !o->D) { fprintf(stderr, "kvbound mem: give --preset, -m MODEL, or --layers, --kv-heads and --head-dim\n"); return 2; }
    if (o->n_win > o->L || (o->n_win > 0) != (o->window > 0)) {
        fprintf(stderr, "kvbound mem: --window W and --window-layers N (at most the %d layers) go together\n", o->L);
        return 2;
    }
    if (!o->window) o->n_win = 0;
    return CLI_GO_ON;
}

/* The types fit the head dim, and the sizes asked for can be computed: CLI_GO_ON, or 2 (printed). */
static int mem_check(struct mem_opts *o) {
    if (!o->v_set) o->vtype = o->type;
    if (!kvb_type_row_bytes(o->type, o->D) || !kvb_type_row_bytes(o->vtype, o->D)) {
        fprintf(stderr, "kvbound mem: head dim %d is not a whole number of %s blocks\n", o->D, kvb_type_name(kvb_type_row_bytes(o->type, o->D) ? o->vtype : o->type));
        return 2;
    }
    if (!o->n_ctx) { fprintf(stderr, "kvbound mem: --ctx T is required\n"); return 2; }
    if (!o->n_batch) o->batch[o->n_batch++] = 1;
    if (o->pid != KVB_POLICY_FULL && !o->budget) { fprintf(stderr, "kvbound mem: --policy %s needs --budget\n", kvb_policy_name(o->pid)); return 2; }
    if (o->keep && o->pid == KVB_POLICY_FULL) { fprintf(stderr, "kvbound mem: --keep needs a bounded --policy (full keeps every token)\n"); return 2; }
    if (o->recall && o->pid == KVB_POLICY_FULL) { fprintf(stderr, "kvbound mem: --recall-pages needs a bounded --policy (full never evicts)\n"); return 2; }
    return CLI_GO_ON;
}

static void mem_header(const struct mem_opts *o) {
    const char *un = o->gib ? "GiB" : "GB";
    if (o->json) {
        printf("{\"model\":\"%s\",\"layers\":%d,\"kv_heads\":%d,\"head_dim\":%d,\"dtype\":\"%s\",\"dtype_k\":\"%s\",\"dtype_v\":\"%s\",\"unit\":\"%s\",",
               o->name, o->L, o->H, o->D, o->vtype == o->type ? kvb_type_name(o->type) : "mixed", kvb_type_name(o->type), kvb_type_name(o->vtype), un);
        if (o->n_win) printf("\"window\":%d,\"window_layers\":%d,", o->window, o->n_win);
        if (o->keep) printf("\"keep\":%d,", o->keep);
        printf("\"rows\":[");
        return;
    }
    char tname[64];
    if (o->vtype == o->type) snprintf(tname, sizeof tname, "%s", kvb_type_name(o->type));
    else snprintf(tname, sizeof tname, "K %s, V %s", kvb_type_name(o->type), kvb_type_name(o->vtype));
    printf("%s: %d layers x %d KV heads x %d dims, %s; %s = %s bytes%s\n", o->name, o->L, o->H, o->D, tname, un,
           o->gib ? "2^30" : "10^9", o->block ? ", tokens rounded up to pages" : "");
    if (o->n_win)
        printf("%d sliding-window layers hold min(%d, tokens) between steps whatever the policy; the policy bounds the %d global layers\n", o->n_win, o->window - 1,
               o->L - o->n_win);
    printf("%12s %6s %16s %12s", "tokens", "batch", "bytes", un);
    if (o->pid != KVB_POLICY_FULL) printf(" %14s %10s", "bounded", "saving");
    printf("\n");
}

/* The row of ctx tokens x batch sequences; cold_per_tok: a recall page's host bytes per evicted token. */
static void mem_row(const struct mem_opts *o, long long ctx, long long batch, bool first, double cold_per_tok) {
    const int32_t rblock = o->block > 0 ? o->block : 16;
    const double unit = o->gib ? 1073741824.0 : 1e9;
    const bool bounded_too = o->pid != KVB_POLICY_FULL;
    const int32_t G = o->L - o->n_win; /* global layers; the window layers hold min(W - 1, ctx) between steps under any policy */
    const long long held = o->window - 1 < ctx ? o->window - 1 : ctx;
    const unsigned long long win = o->n_win ? kv_bytes(o->n_win, o->H, o->D, o->type, o->vtype, held, batch, o->block) : 0;
    unsigned long long bytes = (G ? kv_bytes(G, o->H, o->D, o->type, o->vtype, ctx, batch, o->block) : 0) + win;
    long long kept = (long long)o->budget + o->keep < ctx ? (long long)o->budget + o->keep : ctx; /* the pinned span on top */
    const unsigned long long area = o->recall && G ? kv_bytes(G, o->H, o->D, o->type, o->vtype, (long long)o->recall * rblock, batch, rblock) : 0;
    unsigned long long bounded = bounded_too ? (G ? kv_bytes(G, o->H, o->D, o->type, o->vtype, kept, batch, o->block) : 0) + win + area : bytes;
    if (o->json)
        printf("%s{\"tokens\":%lld,\"batch\":%lld,\"bytes\":%llu,\"size\":%.2f%s", first ? "" : ",", ctx, batch, bytes, bytes / unit, bounded_too ? "" : "}");
    else
        printf("%12lld %6lld %16llu %12.2f", ctx, batch, bytes, bytes / unit);
    if (bounded_too) {
        if (o->json) {
            printf(",\"policy\":\"%s\",\"budget\":%d,\"bounded_bytes\":%llu,\"bounded_size\":%.2f,\"saving\":%.4f", kvb_policy_name(o->pid), o->budget, bounded,
                   bounded / unit, 1.0 - (double)bounded / (double)bytes);
            if (o->recall) printf(",\"recall_pages\":%d,\"recall_bytes\":%llu,\"cold_bytes_per_token\":%.1f", o->recall, area, cold_per_tok * (double)batch);
            printf("}");
        } else {
            printf(" %14.2f %9.1f%%", bounded / unit, 100.0 * (1.0 - (double)bounded / (double)bytes));
        }
    }
    if (!o->json) printf("\n");
}

static void mem_footer(const struct mem_opts *o, double cold_per_tok) {
    if (o->json) printf("]}\n");
    else if (o->pid != KVB_POLICY_FULL)
        printf("bounded: %s keeps at most %d tokens per (%slayer, KV head), whatever the context length%s\n", kvb_policy_name(o->pid), o->budget + o->keep,
               o->n_win ? "global " : "", o->keep ? " (the pinned span of --keep on top of the budget)" : o->sinks >= 0 ? " (sinks included)" : "");
    if (!o->json && o->recall)
        printf("recall: bounded includes a recall area of %d pages x %d tokens per (layer, KV head); the cold tier holds %.0f bytes per evicted token (host memory, then --cold-dir)\n",
               o->recall, o->block > 0 ? o->block : 16, cold_per_tok);
}

int cmd_mem(int argc, char **argv) {
    struct mem_opts o;
    int rc = mem_parse(&o, argc, argv);
    if (rc == CLI_GO_ON) rc = mem_shape(&o);
    if (rc == CLI_GO_ON) rc = mem_check(&o);
    if (rc != CLI_GO_ON) return rc;
    const int32_t rblock = o.block > 0 ? o.block : 16;
    /* a cold page: 32-byte header, positions, rows, 8-byte padding; its index entry: id, min and max per channel, sums */
    const unsigned long long rec =
        (32 + 4ull * (unsigned)rblock + (unsigned long long)rblock * (kvb_type_row_bytes(o.type, o.D) + kvb_type_row_bytes(o.vtype, o.D)) + 7) / 8 * 8;
    const double cold_per_tok = (double)(o.L - o.n_win) * o.H * ((double)rec + 8.0 + 12.0 * o.D) / rblock; /* global layers only */
    mem_header(&o);
    for (int c = 0; c < o.n_ctx; c++)
        for (int b = 0; b < o.n_batch; b++) mem_row(&o, o.ctx[c], o.batch[b], c == 0 && b == 0, cold_per_tok);
    mem_footer(&o, cold_per_tok);
    return 0;
}
