/*
 * policy_opts.c — the policy options every subcommand that chooses a policy
 * accepts (run, chat, ppl, sweep, needle): the budget, sinks, position mode
 * and every knob of struct kvb_policy_params, parsed once, with one --help
 * text whose defaults are read from the library; the KV row types and the
 * recall options likewise, and cli_cache_option to take all three in one call.
 */
#include "cli.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KVB_MAX_I64(a, b) ((a) > (b) ? (a) : (b))

void cli_policy_init(struct cli_policy *o, int default_budget) {
    memset(o, 0, sizeof *o);
    o->budget = default_budget;
    o->sinks = o->recent = o->history = o->threshold = o->obs_window = o->pool_kernel = -1;
    o->decode_budget = o->prefill_budget = o->pool_mode = o->tova_scope = -1;
    o->max_distance = 0;
    o->heavy_ratio = o->pyramid_beta = o->ada_floor = -1;
    o->pos = KVB_POS_POLICY_DEFAULT;
}

int cli_policy_option(struct cli_policy *o, int argc, char **argv, int *i) {
    static const char *const flags[] = {"--budget", "--sinks", "--positions", "--recent", "--heavy-ratio", "--history",
                                        "--threshold", "--obs-window", "--pool-kernel", "--pool", "--pyramid-beta",
                                        "--ada-floor", "--decode-budget", "--prefill-budget", "--tova-scope", "--max-distance",
                                        "--compress-prompt"};
    const char *a = argv[*i];
    bool known = false;
    for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++) known |= !strcmp(a, flags[k]);
    if (!known) return 0;
    const char *v = cli_need_value(argc, argv, i);
    if (!v) return -1;
    int r = 0;
    if (!strcmp(a, "--budget")) {
        r = cli_parse_i32(a, v, 2, 1 << 24, &o->budget);
        o->budget_set = true;
    }
    else if (!strcmp(a, "--sinks")) r = cli_parse_i32(a, v, 0, 1 << 20, &o->sinks);
    else if (!strcmp(a, "--recent")) r = cli_parse_i32(a, v, 0, 1 << 24, &o->recent);
    else if (!strcmp(a, "--history")) r = cli_parse_i32(a, v, 1, 32, &o->history);
    else if (!strcmp(a, "--threshold")) r = cli_parse_i32(a, v, 1, 32, &o->threshold);
    else if (!strcmp(a, "--obs-window")) r = cli_parse_i32(a, v, 1, 1 << 16, &o->obs_window);
    else if (!strcmp(a, "--pool-kernel")) {
        r = cli_parse_i32(a, v, 1, 255, &o->pool_kernel);
        if (!r && !(o->pool_kernel & 1)) { fprintf(stderr, "kvbound: --pool-kernel: %d is not odd\n", o->pool_kernel); r = -1; }
    }
    else if (!strcmp(a, "--max-distance")) r = cli_parse_i32(a, v, 1, 1 << 30, &o->max_distance);
    else if (!strcmp(a, "--decode-budget")) r = cli_parse_i32(a, v, 1, 1 << 24, &o->decode_budget);
    else if (!strcmp(a, "--prefill-budget")) r = cli_parse_i32(a, v, 0, 1 << 24, &o->prefill_budget);
    else if (!strcmp(a, "--heavy-ratio")) r = cli_parse_f32(a, v, 0, 1, &o->heavy_ratio);
    else if (!strcmp(a, "--pyramid-beta")) r = cli_parse_f32(a, v, 1, 1e6, &o->pyramid_beta);
    else if (!strcmp(a, "--ada-floor")) r = cli_parse_f32(a, v, 0, 1, &o->ada_floor);
    else if (!strcmp(a, "--pool")) {
        if (!strcmp(v, "max")) o->pool_mode = KVB_POOL_MAX;
        else if (!strcmp(v, "avg")) o->pool_mode = KVB_POOL_AVG;
        else { fprintf(stderr, "kvbound: --pool: '%s' is not max or avg\n", v); r = -1; }
    } else if (!strcmp(a, "--compress-prompt")) {
        if (!strcmp(v, "uniform")) o->compress_prompt = 1;
        else if (!strcmp(v, "adakv")) o->compress_prompt = 2;
        else { fprintf(stderr, "kvbound: --compress-prompt: '%s' is not uniform or adakv\n", v); r = -1; }
    } else if (!strcmp(a, "--tova-scope")) {
        if (!strcmp(v, "layer")) o->tova_scope = KVB_TOVA_LAYER;
        else if (!strcmp(v, "head")) o->tova_scope = KVB_TOVA_HEAD;
        else { fprintf(stderr, "kvbound: --tova-scope: '%s' is not layer or head\n", v); r = -1; }
    } else { /* --positions */
        if (!strcmp(v, "original")) o->pos = KVB_POS_ORIGINAL;
        else if (!strcmp(v, "contiguous")) o->pos = KVB_POS_CONTIGUOUS;
        else if (!strcmp(v, "capped")) o->pos = KVB_POS_CAPPED;
        else { fprintf(stderr, "kvbound: --positions: '%s' is not original, contiguous or capped\n", v); r = -1; }
    }
    return r ? -1 : 1;
}

void cli_policy_warn(const struct cli_policy *o, enum kvb_policy_id id, int32_t n_ctx_train) {
    if (id == KVB_POLICY_FULL && o->budget_set)
        fprintf(stderr, "kvbound: warning: --budget has no effect with policy full (give --policy, e.g. streaming)\n");
    /* only a --budget given: a command's default (chat's 1024) is not the user's choice */
    if (id != KVB_POLICY_FULL && o->budget_set && n_ctx_train > 0 && o->budget > n_ctx_train && o->pos != KVB_POS_CAPPED &&
        !(id == KVB_POLICY_LMINFINITE && o->pos == KVB_POS_POLICY_DEFAULT))
        fprintf(stderr, "kvbound: warning: --budget %d exceeds the model's trained length %d: attention will see distances it was not "
                        "trained on (lminfinite, or --positions capped, caps them)\n", o->budget, n_ctx_train);
}

struct kvb_policy_params cli_policy_params(const struct cli_policy *o, enum kvb_policy_id id) {
    struct kvb_policy_params p = kvb_policy_default_params(id);
    if (id != KVB_POLICY_FULL) p.budget = o->budget;
    if (o->sinks >= 0) p.n_sink = o->sinks;
    if (o->recent >= 0) p.n_recent = o->recent;
    if (o->history >= 0) p.history = o->history;
    if (o->threshold >= 0) p.threshold = o->threshold;
    if (o->obs_window >= 0) p.obs_window = o->obs_window;
    if (o->pool_kernel >= 0) p.pool_kernel = o->pool_kernel;
    if (o->decode_budget >= 0) p.decode_budget = o->decode_budget;
    if (o->prefill_budget >= 0) p.prefill_budget = o->prefill_budget;
    if (o->pool_mode >= 0) p.pool_mode = (enum kvb_pool_mode)o->pool_mode;
    if (o->tova_scope >= 0) p.tova_scope = (enum kvb_tova_scope)o->tova_scope;
    if (o->heavy_ratio >= 0) p.heavy_ratio = o->heavy_ratio;
    if (o->pyramid_beta >= 0) p.pyramid_beta = o->pyramid_beta;
    if (o->ada_floor >= 0) p.ada_floor = o->ada_floor;
    if (o->compress_prompt) p.compress_prompt = o->compress_prompt; /* a policy without the mode refuses it by name */
    return p;
}

void cli_policy_help(FILE *f, int default_budget) {
    const struct kvb_policy_params d = kvb_policy_default_params(KVB_POLICY_H2O);
    const struct kvb_policy_params st = kvb_policy_default_params(KVB_POLICY_STREAMING);
    const struct kvb_policy_params lm = kvb_policy_default_params(KVB_POLICY_LMINFINITE);
    const struct kvb_policy_params kd = kvb_policy_default_params(KVB_POLICY_KEYDIFF);
    fprintf(f,
            "Policy options (every policy's knobs; 'kvbound policies' shows which a policy uses):\n"
            "  --budget N          tokens kept per (layer, KV head) by bounded policies (default %d)\n"
            "  --sinks N           pinned first tokens (default: the policy's; streaming %d, lminfinite %d, keydiff %d,\n"
            "                      others %d)\n"
            "  --positions MODE    original | contiguous | capped (default: the policy's; capped = distances\n"
            "                      capped at --max-distance, as LM-Infinite)\n"
            "  --max-distance N    positions capped: the largest distance attention sees (default: the model's\n"
            "                      trained length, GGUF context_length)\n"
            "  --recent N          protected most recent tokens (default: the policy's rule)\n"
            "  --heavy-ratio F     h2o, block-h2o: share of the budget for heavy hitters (default %g)\n"
            "  --history N         scissorhands: history window in steps (default %d)\n"
            "  --threshold N       scissorhands: low-importance count that marks a victim (default %d)\n"
            "  --obs-window N      snapkv, pyramidkv, adakv: last prompt queries that vote (default %d)\n"
            "  --pool-kernel K     snapkv family: pooling kernel, odd (default %d)\n"
            "  --pool max|avg      snapkv family: pooling of the votes (default max)\n"
            "  --pyramid-beta F    pyramidkv: the top layer keeps (budget - window) / beta + window (default %g)\n"
            "  --ada-floor F       adakv (and --compress-prompt adakv): each head keeps at least F x its\n"
            "                      share (default %g)\n"
            "  --decode-budget N   snapkv family, kvzip: generated tokens kept after the compressed prompt (default: --budget)\n"
            "  --prefill-budget N  snapkv family: evict to N between prompt chunks, votes accumulating\n"
            "                      (default 0: read the whole prompt, then compress, as the papers)\n"
            "  --tova-scope S      tova: layer (one score per layer, as the paper) | head (default layer)\n"
            "  --compress-prompt M expected-attention: read each prompt whole and compress it at its end, scored\n"
            "                      at once (kvpress's press; --prefill-budget as the snapkv family's), then evict\n"
            "                      at every decode step (default: after each prompt chunk); M = uniform (every\n"
            "                      head keeps the budget) | adakv (a layer's heads share budget x heads by score,\n"
            "                      each keeping --ada-floor of its share: AdaKV, as kvpress pairs them)\n",
            default_budget, st.n_sink, lm.n_sink, kd.n_sink, d.n_sink, (double)d.heavy_ratio, d.history, d.threshold, d.obs_window,
            d.pool_kernel, (double)d.pyramid_beta, (double)d.ada_floor);
}

void cli_kv_types_init(struct cli_kv_types *t, enum kvb_dtype def) {
    t->k = def;
    t->v = KVB_DTYPE_AS_K;
}

int cli_kv_types_option(struct cli_kv_types *t, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (strcmp(a, "--kv-dtype") && strcmp(a, "--kv-dtype-k") && strcmp(a, "--kv-dtype-v")) return 0;
    const char *v = cli_need_value(argc, argv, i);
    if (!v) return -1;
    enum kvb_dtype d;
    if (kvb_dtype_from_name(v, &d) != KVB_OK) {
        fprintf(stderr, "kvbound: %s: %s\n", a, kvb_last_error());
        return -1;
    }
    if (!strcmp(a, "--kv-dtype")) t->k = d, t->v = KVB_DTYPE_AS_K;
    else if (!strcmp(a, "--kv-dtype-k")) t->k = d;
    else t->v = d;
    return 1;
}

void cli_kv_types_help(FILE *f, const char *def) {
    fprintf(f, "  --kv-dtype T          KV rows: f16 | bf16 | f32 | q8_0 | q4_0 (default %s; q8_0/q4_0: ggml's\n"
               "                        blocks of 32, quantized once when a token is appended)\n"
               "  --kv-dtype-k T, --kv-dtype-v T   K and V rows apart (a later --kv-dtype sets both again)\n", def);
}

enum kvb_dtype cli_kv_v(const struct cli_kv_types *t) { return t->v == KVB_DTYPE_AS_K ? t->k : t->v; }

size_t cli_kv_head_bytes(const struct kvb_model_info *mi, const struct cli_kv_types *t) {
    if (mi->kv_lora_rank) return kvb_dtype_row_bytes(t->k, mi->head_dim); /* latent rows: the value is the K row's tail */
    return kvb_dtype_row_bytes(t->k, mi->head_dim) + kvb_dtype_row_bytes(cli_kv_v(t), mi->head_dim);
}


struct kvb_kv_params cli_kv_params(const struct cli_policy *po, enum kvb_policy_id pid, const struct cli_kv_types *t,
                                   const struct cli_recall *rec) {
    struct kvb_kv_params kv = kvb_kv_default_params();
    kv.policy = cli_policy_params(po, pid);
    kv.pos_mode = po->pos;
    kv.max_distance = po->max_distance > 0 ? po->max_distance : 0;
    kv.kv_dtype = t->k;
    kv.kv_dtype_v = t->v;
    if (rec) kv.recall = cli_recall_params(rec);
    return kv;
}

int cli_cache_option(struct cli_policy *po, struct cli_kv_types *kvt, struct cli_recall *rec, int argc, char **argv, int *i) {
    int r = cli_policy_option(po, argc, argv, i);
    if (r == 0) r = cli_kv_types_option(kvt, argc, argv, i);
    if (r == 0 && rec) r = cli_recall_option(rec, argc, argv, i);
    return r;
}

/* ---- recall ---- */

void cli_recall_init(struct cli_recall *r) {
    memset(r, 0, sizeof *r);
    r->pages = 8;
    r->every = 1;
    r->cold_mb = 1024;
}

int cli_recall_option(struct cli_recall *r, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    if (!strcmp(a, "--recall")) { r->on = true; return 1; }
    if (strcmp(a, "--recall-pages") && strcmp(a, "--recall-every") && strcmp(a, "--cold-mb") && strcmp(a, "--cold-dir") &&
        strcmp(a, "--recall-summary"))
        return 0;
    if (!(v = cli_need_value(argc, argv, i))) return -1;
    r->on = true; /* each of these implies --recall */
    if (!strcmp(a, "--recall-pages")) return cli_parse_i32(a, v, 1, KVB_RECALL_MAX_PAGES, &r->pages) ? -1 : 1;
    if (!strcmp(a, "--recall-every")) return cli_parse_i32(a, v, 1, 1 << 20, &r->every) ? -1 : 1;
    if (!strcmp(a, "--cold-mb")) return cli_parse_i64(a, v, 0, 1LL << 24, &r->cold_mb) ? -1 : 1;
    if (!strcmp(a, "--recall-summary")) {
        if (!strcmp(v, "bounds")) r->summary = KVB_RECALL_BOUNDS;
        else if (!strcmp(v, "centroid")) r->summary = KVB_RECALL_CENTROID;
        else if (!strcmp(v, "exact")) r->summary = KVB_RECALL_EXACT;
        else {
            fprintf(stderr, "kvbound: --recall-summary: '%s' is not bounds, centroid or exact\n", v);
            return -1;
        }
        return 1;
    }
    struct stat sb;
    if (stat(v, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(v, W_OK) != 0) {
        fprintf(stderr, "kvbound: --cold-dir '%s' is not a writable directory\n", v);
        return -1;
    }
    r->cold_dir = v;
    return 1;
}

void cli_recall_help(FILE *f, long long cold_mb_default) {
    fprintf(f, "  --recall              reversible eviction: evicted tokens go to a cold tier in pages; each\n"
               "                        attention step brings back the pages whose key bounds score highest\n"
               "                        (docs/RECALL.md). Positions: a streaming policy's become capped\n"
               "  --recall-pages R      cold pages recalled per layer and KV head (default 8; implies --recall)\n"
               "  --recall-every N      choose them every N steps, reusing them in between (default 1)\n"
               "  --recall-summary S    how cold pages are scored: bounds (default: per-channel key min/max, an\n"
               "                        upper bound, Quest), centroid (the mean key), exact (every cold key read:\n"
               "                        a reference for measurements, slow)\n"
               "  --cold-mb M           host memory for cold pages (default %lld); beyond it --cold-dir\n"
               "  --cold-dir DIR        append cold pages beyond --cold-mb to a file in DIR (removed at exit);\n"
               "                        without it, pages beyond --cold-mb are forgotten (counted)\n",
            cold_mb_default);
}

struct kvb_recall_params cli_recall_params(const struct cli_recall *r) {
    struct kvb_recall_params p = {0};
    if (!r->on) return p;
    p.pages = r->pages;
    p.every = r->every;
    p.cold_mem_bytes = (size_t)r->cold_mb << 20;
    p.cold_dir = r->cold_dir;
    p.summary = r->summary;
    return p;
}

void cli_window_stats(FILE *f, const struct kvb_cache_stats *s, int32_t n_layer, int32_t n_shared) {
    const size_t page = s->pages_in_use ? s->bytes_used / (size_t)s->pages_in_use : 0;
    char shared[64] = "";
    if (n_shared > 0) snprintf(shared, sizeof shared, ", %d KV-shared (no K/V of their own)", (int)n_shared);
    fprintf(f, "kvbound: layers: %d sliding-window (the model's window: %lld tokens, %.2f MB), %d global (the policy: %lld tokens, %.2f MB)%s\n",
            (int)s->window_layers, (long long)s->window_slots, (double)((size_t)s->window_pages * page) / 1e6, (int)(n_layer - n_shared - s->window_layers),
            (long long)(s->slots - s->window_slots), (double)((size_t)(s->pages_in_use - s->window_pages) * page) / 1e6, shared);
}

void cli_recall_stats(FILE *f, const struct kvb_cache_stats *s) {
    fprintf(f, "kvbound: recall: %lld cold pages (%.1f MiB in memory, %.1f MiB in file), %lld tokens staged, %lld dropped; "
               "recall area %.1f MiB; %lld scorings %.3f s, %lld pages loaded %.3f s\n",
            (long long)s->cold_pages, (double)s->cold_mem_bytes / (1 << 20), (double)s->cold_file_bytes / (1 << 20),
            (long long)s->cold_staged_tokens, (long long)s->cold_dropped_pages, (double)s->recall_bytes / (1 << 20),
            (long long)s->recall_scorings, s->recall_score_s, (long long)s->recall_loads, s->recall_load_s);
}
