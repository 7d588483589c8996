/*
 * gen_opts.c — what `run` and `chat` share for generating text: the
 * sampling options (llama.cpp's names and meanings, one --help text whose
 * defaults are the ones the command passes), the window of recent tokens
 * that --repeat-penalty looks at, the options the two parse alike (model,
 * policy and cache, sampling, -n, -c), and the set-up they generate with
 * (model, context, sampler, logits, history), freed in one call.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

int cli_sampler_option(struct kvb_sampler_params *sp, int argc, char **argv, int *i) {
    static const char *const flags[] = {"--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--repeat-last-n", "-s", "--seed",
                                        "--presence-penalty", "--frequency-penalty"};
    const char *a = argv[*i];
    bool known = false;
    for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++) known |= !strcmp(a, flags[k]);
    if (!known) return 0;
    const char *v = cli_need_value(argc, argv, i);
    if (!v) return -1;
    int r;
    if (!strcmp(a, "--temp")) r = cli_parse_f32(a, v, 0, 100, &sp->temp);
    else if (!strcmp(a, "--top-k")) r = cli_parse_i32(a, v, 0, 1 << 24, &sp->top_k);
    else if (!strcmp(a, "--top-p")) r = cli_parse_f32(a, v, 1e-6, 1, &sp->top_p);
    else if (!strcmp(a, "--min-p")) r = cli_parse_f32(a, v, 0, 1, &sp->min_p);
    else if (!strcmp(a, "--repeat-penalty")) r = cli_parse_f32(a, v, 0.01, 100, &sp->repeat_penalty);
    else if (!strcmp(a, "--repeat-last-n")) r = cli_parse_i32(a, v, 0, 1 << 20, &sp->repeat_last_n);
    else if (!strcmp(a, "--presence-penalty")) r = cli_parse_f32(a, v, -100, 100, &sp->presence_penalty);
    else if (!strcmp(a, "--frequency-penalty")) r = cli_parse_f32(a, v, -100, 100, &sp->frequency_penalty);
    else { /* -s, --seed */
        long long seed;
        r = cli_parse_i64(a, v, 0, 1LL << 62, &seed);
        if (!r) sp->seed = (uint64_t)seed;
    }
    return r ? -1 : 1;
}

void cli_sampler_help(FILE *f, const struct kvb_sampler_params *sp) {
    fprintf(f,
            "  --temp T              temperature; 0 = greedy (default %g)\n"
            "  --top-k K             keep the K likeliest tokens (default %d; 0 = off)\n"
            "  --top-p P             keep the likeliest tokens up to probability P (default %g; 1 = off)\n"
            "  --min-p P             keep tokens at least P x the likeliest's probability (default %g; 0 = off)\n"
            "  --repeat-penalty R    penalize the last --repeat-last-n tokens (default %g = off)\n"
            "  --repeat-last-n N     the window of the three penalties (default %d)\n"
            "  --presence-penalty P  subtract P from the logit of every token in that window (default 0 = off)\n"
            "  --frequency-penalty F subtract F per occurrence in that window (default 0 = off)\n"
            "  -s, --seed S          sampling seed (default %llu); same seed and threads, same text\n",
            (double)sp->temp, sp->top_k, (double)sp->top_p, (double)sp->min_p, (double)sp->repeat_penalty, sp->repeat_last_n,
            (unsigned long long)sp->seed);
}

void cli_history_init(struct cli_history *h, int32_t window) {
    h->cap = window > 0 ? 2 * window : 2;
    h->n = 0;
    h->ids = cli_xmalloc(sizeof(int32_t) * (size_t)h->cap, "token history");
}

void cli_history_push(struct cli_history *h, int32_t id) {
    if (h->n == h->cap) { /* keep the newer half: at least the window */
        memmove(h->ids, h->ids + h->cap / 2, sizeof(int32_t) * (size_t)(h->cap - h->cap / 2));
        h->n = h->cap - h->cap / 2;
    }
    h->ids[h->n++] = id;
}

void cli_history_free(struct cli_history *h) {
    free(h->ids);
    h->ids = NULL;
    h->n = h->cap = 0;
}

void cli_gen_opts_init(struct cli_gen_opts *g, const char *cmd, enum kvb_policy_id pid, int default_budget, int n_predict) {
    cli_model_init(&g->mo, cmd, CLI_MODEL_TOKENIZER | CLI_MODEL_NO_MMAP | CLI_MODEL_THREADS | CLI_MODEL_NGL, 2);
    g->sp = kvb_sampler_default_params();
    g->pid = pid;
    cli_policy_init(&g->po, default_budget);
    cli_kv_types_init(&g->kvt, KVB_DTYPE_F16);
    cli_recall_init(&g->rec);
    g->n_predict = n_predict;
    g->ctx = 0;
    g->keep = 0;
}

int cli_gen_option(struct cli_gen_opts *g, int argc, char **argv, int *i) {
    int r = cli_model_option(&g->mo, argc, argv, i);
    if (r == 0) r = cli_cache_option(&g->po, &g->kvt, &g->rec, argc, argv, i);
    if (r == 0) r = cli_sampler_option(&g->sp, argc, argv, i);
    if (r != 0) return r;
    const char *a = argv[*i], *v;
    const bool policy = !strcmp(a, "--policy"), n = !strcmp(a, "-n") || !strcmp(a, "--n-predict"), keep = !strcmp(a, "--keep");
    if (!policy && !n && !keep && strcmp(a, "-c") && strcmp(a, "--ctx-size") && strcmp(a, "--ctx")) return 0;
    if (!(v = cli_opt_value(g->mo.cmd, a, argc, argv, i))) return -1; /* a is known: only a missing value fails */
    if (policy) {
        if (kvb_policy_from_name(v, &g->pid) == KVB_OK) return 1;
        fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error());
        return -1;
    }
    if (n) return cli_parse_i32(a, v, -1, 1 << 30, &g->n_predict) ? -1 : 1;
    if (keep) return cli_parse_i32(a, v, -1, KVB_KEEP_MAX, &g->keep) ? -1 : 1;
    return cli_parse_i32(a, v, 1, 1 << 30, &g->ctx) ? -1 : 1;
}

struct kvb_context_params cli_gen_context_params(const struct cli_gen_opts *g, const struct kvb_model_info *mi) {
    struct kvb_context_params cp = kvb_context_default_params();
    cp.kv = cli_kv_params(&g->po, g->pid, &g->kvt, &g->rec);
    cp.kv.keep = g->keep > 0 ? g->keep : 0; /* -1: the caller resolves it */
    cli_policy_warn(&g->po, g->pid, mi->n_ctx_train);
    cp.n_threads = g->mo.threads;
    cp.n_ctx = g->ctx ? g->ctx : mi->n_ctx_train;
    return cp;
}

int cli_gen_start(struct cli_gen *gen, const struct kvb_context_params *cp, const struct kvb_sampler_params *sp) {
    cli_history_init(&gen->hist, sp->repeat_last_n);
    gen->logits = malloc(sizeof(float) * (size_t)gen->mi.n_vocab);
    if (gen->logits && kvb_context_init(gen->m, cp, &gen->c) == KVB_OK && kvb_sampler_init(sp, gen->mi.n_vocab, &gen->smp) == KVB_OK) return 0;
    fprintf(stderr, "kvbound: %s\n", !gen->logits ? "out of memory" : kvb_last_error());
    return -1;
}

void cli_keep_help(FILE *f, const char *what_minus_one) {
    fprintf(f,
            "  --keep N              pin the first N tokens: no policy evicts them (sinks included), they never\n"
            "                        go cold, and they sit on top of --budget, which bounds the rest (default 0;\n"
            "                        -1 = %s; at most %d)\n",
            what_minus_one, KVB_KEEP_MAX);
}

int64_t cli_pinned_kept(const struct kvb_cache *cache, int32_t keep, int64_t n_past) {
    struct kvb_cache_params p;
    kvb_cache_get_params(cache, &p);
    int64_t kept = n_past < keep ? n_past : keep;
    for (int32_t l = 0; l < p.n_layer; l++) {
        bool window = false; /* a model's sliding-window layer: its window bounds it, not the policy */
        for (int32_t i = 0; i < p.kv.n_layers; i++) window |= p.kv.layers[i].layer == l;
        for (int32_t h = 0; h < p.n_kv_head && !window; h++) {
            int64_t j = 0;
            struct kvb_slot_info si;
            while (j < kept && kvb_cache_slot_info(cache, l, h, (int32_t)j, &si) == KVB_OK && si.pos_original == j) j++;
            kept = j;
        }
    }
    return kept;
}

void cli_gen_free(struct cli_gen *gen) {
    cli_history_free(&gen->hist);
    free(gen->logits);
    kvb_sampler_free(gen->smp);
    kvb_context_free(gen->c);
    kvb_model_free(gen->m);
    memset(gen, 0, sizeof *gen);
}
