/*
 * mem.c — `kvbound mem`: KV-cache memory, M = B x T x L x n_kv x (K row +
 * V row bytes), K and V each in its type, quantized types counted by their
 * blocks (q8_0: 34 bytes per 32 values) and optional page rounding. A bounded
 * policy's size does not depend on T; the saving is printed beside it.
 * GB = 10^9 bytes (GiB with --gib), rounded to nearest.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct preset {
    const char *name;
    int32_t layers, kv_heads, head_dim;
};

/* From the public model configs (num_hidden_layers, num_key_value_heads, head_dim). */
static const struct preset k_presets[] = {
    {"llama2-7b", 32, 32, 128},  {"llama2-13b", 40, 40, 128},    {"llama3-8b", 32, 8, 128},
    {"llama3-70b", 80, 8, 128},  {"llama3.1-405b", 126, 8, 128}, {"mistral-7b", 32, 8, 128},
    {"qwen2.5-7b", 28, 4, 128},  {"tinyllama-1.1b", 22, 4, 64},  {"smollm2-135m", 30, 3, 64},
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

int cmd_mem(int argc, char **argv) {
    const char *preset = NULL, *model = NULL;
    int32_t L = 0, H = 0, D = 0, block = 0, budget = 0, sinks = -1, recall = 0;
    long long ctx[16], batch[16];
    int n_ctx = 0, n_batch = 0;
    uint32_t type = KVB_TYPE_F16, vtype = KVB_TYPE_F16;
    bool v_set = false;
    bool json = false, gib = false;
    enum kvb_policy_id pid = KVB_POLICY_FULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: kvbound mem [--preset NAME | -m MODEL.gguf | --layers L --kv-heads H --head-dim D] --ctx T[,T...]\n"
                   "                   [--batch B[,B...]] [--dtype f32|f16|bf16|q8_0|q4_0] [--dtype-k T --dtype-v T]\n"
                   "                   [--policy P --budget N [--sinks S]] [--recall-pages R] [--block-size N] [--gib] [--json]\n\n"
                   "KV memory M = batch x tokens x layers x kv_heads x (K row + V row bytes), a row being head_dim\n"
                   "elements (q8_0: 34 bytes per 32, q4_0: 18 per 32, ggml's blocks). --dtype sets both (also\n"
                   "--kv-dtype, --kv-dtype-k, --kv-dtype-v as the other commands); --block-size rounds tokens up to whole pages, which\n"
                   "is what a kvbound cache with that page size holds.\n"
                   "--recall-pages R (with a bounded policy): the pool also holds each stream's recall area, R pages\n"
                   "of --block-size (16) tokens; bounded bytes include it (recall_bytes in the JSON). The cold tier is\n"
                   "host memory or disk, not pool: cold_bytes_per_token is what each evicted token costs there.\n"
                   "Note: some published tables halve these figures: they drop the factor 2 for K and V.\npresets:");
            for (size_t k = 0; k < sizeof k_presets / sizeof *k_presets; k++) printf(" %s", k_presets[k].name);
            printf("\n");
            return 0;
        }
        if (!strcmp(a, "--json")) { json = true; continue; }
        if (!strcmp(a, "--gib")) { gib = true; continue; }
        if (!(v = cli_opt_value("mem", "--preset -m --model --layers --kv-heads --head-dim --ctx --batch --block-size --budget --recall-pages --sinks --policy "
                                             "--dtype --kv-dtype --dtype-k --kv-dtype-k --dtype-v --kv-dtype-v", argc, argv, &i))) return 2;
        if (!strcmp(a, "--preset")) preset = v;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--layers")) { if (cli_parse_i32(a, v, 1, 100000, &L)) return 2; }
        else if (!strcmp(a, "--kv-heads")) { if (cli_parse_i32(a, v, 1, 100000, &H)) return 2; }
        else if (!strcmp(a, "--head-dim")) { if (cli_parse_i32(a, v, 1, 100000, &D)) return 2; }
        else if (!strcmp(a, "--ctx")) { if (parse_list_ll(a, v, ctx, &n_ctx, 16)) return 2; }
        else if (!strcmp(a, "--batch")) { if (parse_list_ll(a, v, batch, &n_batch, 16)) return 2; }
        else if (!strcmp(a, "--block-size")) { if (cli_parse_i32(a, v, 1, 1 << 20, &block)) return 2; }
        else if (!strcmp(a, "--budget")) { if (cli_parse_i32(a, v, 1, 1 << 30, &budget)) return 2; }
        else if (!strcmp(a, "--recall-pages")) { if (cli_parse_i32(a, v, 1, KVB_RECALL_MAX_PAGES, &recall)) return 2; }
        else if (!strcmp(a, "--sinks")) { if (cli_parse_i32(a, v, 0, 1 << 20, &sinks)) return 2; }
        else if (!strcmp(a, "--policy")) { if (kvb_policy_from_name(v, &pid) != KVB_OK) { fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error()); return 2; } }
        else if (!strcmp(a, "--dtype") || !strcmp(a, "--kv-dtype")) {
            if (!kv_type(a, v, &type)) return 2;
            v_set = false;
        } else if (!strcmp(a, "--dtype-k") || !strcmp(a, "--kv-dtype-k")) {
            if (!kv_type(a, v, &type)) return 2;
        } else if (!strcmp(a, "--dtype-v") || !strcmp(a, "--kv-dtype-v")) {
            if (!kv_type(a, v, &vtype)) return 2;
            v_set = true;
        } else { fprintf(stderr, "kvbound mem: unknown option '%s'\n", a); return 2; }
    }
    char name[128] = "custom";
    if (preset) {
        const struct preset *p = NULL;
        for (size_t k = 0; k < sizeof k_presets / sizeof *k_presets; k++)
            if (!strcmp(preset, k_presets[k].name)) p = &k_presets[k];
        if (!p) { fprintf(stderr, "kvbound: --preset: unknown '%s' (see --help)\n", preset); return 2; }
        L = p->layers; H = p->kv_heads; D = p->head_dim;
        snprintf(name, sizeof name, "%s", p->name);
    } else if (model) {
        struct kvb_model *m;
        struct kvb_model_params mp = kvb_model_default_params();
        if (kvb_model_load(model, &mp, &m) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
        struct kvb_model_info in;
        kvb_model_get_info(m, &in);
        L = in.n_layer; H = in.n_head_kv; D = in.head_dim;
        snprintf(name, sizeof name, "%s", model);
        kvb_model_free(m);
    }
    if (!L || !H || !D) { fprintf(stderr, "kvbound mem: give --preset, -m MODEL, or --layers, --kv-heads and --head-dim\n"); return 2; }
    if (!v_set) vtype = type;
    if (!kvb_type_row_bytes(type, D) || !kvb_type_row_bytes(vtype, D)) {
        fprintf(stderr, "kvbound mem: head dim %d is not a whole number of %s blocks\n", D, kvb_type_name(kvb_type_row_bytes(type, D) ? vtype : type));
        return 2;
    }
    char tname[64];
    if (vtype == type) snprintf(tname, sizeof tname, "%s", kvb_type_name(type));
    else snprintf(tname, sizeof tname, "K %s, V %s", kvb_type_name(type), kvb_type_name(vtype));
    if (!n_ctx) { fprintf(stderr, "kvbound mem: --ctx T is required\n"); return 2; }
    if (!n_batch) batch[n_batch++] = 1;
    if (pid != KVB_POLICY_FULL && !budget) { fprintf(stderr, "kvbound mem: --policy %s needs --budget\n", kvb_policy_name(pid)); return 2; }
    if (recall && pid == KVB_POLICY_FULL) { fprintf(stderr, "kvbound mem: --recall-pages needs a bounded --policy (full never evicts)\n"); return 2; }
    const int32_t rblock = block > 0 ? block : 16;
    /* a cold page: 32-byte header, positions, rows, 8-byte padding; its index entry: id, min and max per channel, sums */
    const unsigned long long rec = (32 + 4ull * (unsigned)rblock + (unsigned long long)rblock * (kvb_type_row_bytes(type, D) + kvb_type_row_bytes(vtype, D)) + 7) / 8 * 8;
    const double cold_per_tok = (double)L * H * ((double)rec + 8.0 + 12.0 * D) / rblock;
    const double unit = gib ? 1073741824.0 : 1e9;
    const char *un = gib ? "GiB" : "GB";
    if (!json) {
        printf("%s: %d layers x %d KV heads x %d dims, %s; %s = %s bytes%s\n", name, L, H, D, tname, un,
               gib ? "2^30" : "10^9", block ? ", tokens rounded up to pages" : "");
        printf("%12s %6s %16s %12s", "tokens", "batch", "bytes", un);
        if (pid != KVB_POLICY_FULL) printf(" %14s %10s", "bounded", "saving");
        printf("\n");
    } else {
        printf("{\"model\":\"%s\",\"layers\":%d,\"kv_heads\":%d,\"head_dim\":%d,\"dtype\":\"%s\",\"dtype_k\":\"%s\",\"dtype_v\":\"%s\",\"unit\":\"%s\",\"rows\":[",
               name, L, H, D, vtype == type ? kvb_type_name(type) : "mixed", kvb_type_name(type), kvb_type_name(vtype), un);
    }
    int first = 1;
    for (int c = 0; c < n_ctx; c++)
        for (int b = 0; b < n_batch; b++) {
            unsigned long long bytes = kv_bytes(L, H, D, type, vtype, ctx[c], batch[b], block);
            long long kept = budget < ctx[c] ? budget : ctx[c];
            const unsigned long long area = recall ? kv_bytes(L, H, D, type, vtype, (long long)recall * rblock, batch[b], rblock) : 0;
            unsigned long long bounded = pid != KVB_POLICY_FULL ? kv_bytes(L, H, D, type, vtype, kept, batch[b], block) + area : bytes;
            if (json)
                printf("%s{\"tokens\":%lld,\"batch\":%lld,\"bytes\":%llu,\"size\":%.2f%s", first ? "" : ",", ctx[c], batch[b], bytes, bytes / unit,
                       pid != KVB_POLICY_FULL ? "" : "}");
            else
                printf("%12lld %6lld %16llu %12.2f", ctx[c], batch[b], bytes, bytes / unit);
            if (pid != KVB_POLICY_FULL) {
                if (json) {
                    printf(",\"policy\":\"%s\",\"budget\":%d,\"bounded_bytes\":%llu,\"bounded_size\":%.2f,\"saving\":%.4f", kvb_policy_name(pid), budget, bounded, bounded / unit, 1.0 - (double)bounded / (double)bytes);
                    if (recall) printf(",\"recall_pages\":%d,\"recall_bytes\":%llu,\"cold_bytes_per_token\":%.1f", recall, area, cold_per_tok * (double)batch[b]);
                    printf("}");
                }
                else printf(" %14.2f %9.1f%%", bounded / unit, 100.0 * (1.0 - (double)bounded / (double)bytes));
            }
            if (!json) printf("\n");
            first = 0;
        }
    if (json) printf("]}\n");
    else if (pid != KVB_POLICY_FULL) printf("bounded: %s keeps at most %d tokens per (layer, KV head), whatever the context length%s\n", kvb_policy_name(pid), budget,
                                            sinks >= 0 ? " (sinks included)" : "");
    if (!json && recall)
        printf("recall: bounded includes a recall area of %d pages x %d tokens per (layer, KV head); the cold tier holds %.0f bytes per evicted token (host memory, then --cold-dir)\n",
               recall, rblock, cold_per_tok);
    return 0;
}
