/*
 * eval.c — `kvbound ppl` (a policy's quality on a text, against the full
 * cache or StreamingLLM's recompute oracle) and `kvbound sweep` (quality
 * against KV bytes over policies x budgets). The protocol is in
 * docs/EVALUATION.md and in kvb_eval_ppl (src/eval/ppl.c). Both parse into
 * struct eval_opts, load the model and the text alike (load), and score
 * with run_one; ppl prints each run (and writes --csv, --plot), sweep runs
 * the grid and writes its tables and figure.
 */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const k_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#222222"};

/* Progress of one run on stderr (JSON on stdout stays clean): on a terminal
 * a bar with the elapsed time and an ETA, redrawn in place; otherwise, so
 * that a long run in a log is not silent, a line every 30 s once it has run
 * 10 s (a short run prints nothing). */
struct progress_state {
    const char *label; /* "streaming budget 256" */
    double t0, last_line;
    bool tty;
};

static void fmt_secs(char *b, size_t cap, double s) {
    if (s < 60) snprintf(b, cap, "%.0f s", s);
    else if (s < 3600) snprintf(b, cap, "%d min %02d s", (int)(s / 60), (int)s % 60);
    else snprintf(b, cap, "%d h %02d min", (int)(s / 3600), (int)s / 60 % 60);
}

static void progress(int64_t done, int64_t total, void *user) {
    struct progress_state *ps = user;
    const double el = cli_now_sec() - ps->t0;
    char es[32], eta[32];
    fmt_secs(es, sizeof es, el);
    if (done > 0 && done < total) fmt_secs(eta, sizeof eta, el * (double)(total - done) / (double)done);
    else snprintf(eta, sizeof eta, "%s", done >= total ? "done" : "?");
    if (ps->tty) {
        int w = 30, k = (int)(w * done / (total ? total : 1));
        fprintf(stderr, "\r%s [%.*s%*s] %lld/%lld, %s, ETA %s   ", ps->label, k, "==============================", w - k, "", (long long)done,
                (long long)total, es, eta);
        if (done == total) fprintf(stderr, "\n");
    } else if (ps->last_line > 0 ? el - ps->last_line >= 30 || done == total : el >= 10) {
        fprintf(stderr, "kvbound: %s: %lld/%lld predictions (%.0f%%), %s, ETA %s\n", ps->label, (long long)done, (long long)total,
                100.0 * (double)done / (double)(total ? total : 1), es, eta);
        ps->last_line = el;
    }
}

struct eval_opts {
    struct cli_model_opts mo; /* -m -z -t */
    const char *text;
    char policies[256];
    int32_t chunk, prompt;
    long long max_tokens;
    enum kvb_baseline baseline;
    struct cli_policy po; /* --budget, --sinks, --positions and every policy knob */
    struct cli_kv_types kvt; /* the policy's KV rows (default f32); the full baseline's are f32 */
    struct cli_recall rec;   /* ppl --recall: each bounded policy also runs with recall */
    bool mass, json, long_baseline;
    const char *csv, *plot;
};

/* Tokenizes the whole text with BOS, keeps max_tokens. */
static int load(const struct eval_opts *o, struct kvb_model **m, int32_t **ids, int32_t *n) {
    if (cli_load_model(&o->mo, m, NULL)) return -1;
    size_t len;
    char *text = cli_read_file(o->text, (size_t)1 << 30, "text file", &len);
    if (!text) return -1;
    kvb_status st = kvb_vocab_tokenize(kvb_model_vocab(*m), text, len, true, false, ids, n);
    free(text);
    if (st != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return -1; }
    if (o->max_tokens > 0 && *n > o->max_tokens) *n = (int32_t)o->max_tokens;
    if (*n < 2) { fprintf(stderr, "kvbound: '%s' gives fewer than 2 tokens\n", o->text); return -1; }
    return 0;
}

/* The full baseline attends over all n tokens: past the trained length its
 * positions were never trained, so its numbers are not the model's best. */
static void warn_full_past_trained(const struct kvb_model *m, int32_t n) {
    struct kvb_model_info mi;
    kvb_model_get_info(m, &mi);
    if (mi.n_ctx_train > 0 && n > mi.n_ctx_train)
        fprintf(stderr, "kvbound: warning: the full baseline runs %d tokens, past the model's trained length %d (the dense baseline of the StreamingLLM "
                        "paper; --max-tokens %d stays within it)\n", n, mi.n_ctx_train, mi.n_ctx_train);
}

/* Past 8x the trained length, without --max-tokens, it is most likely a whole book
 * given by mistake (hours of quadratic work): refused, -1 (printed), unless
 * --allow-long-baseline. */
#define PPL_LONG_BASELINE 8
static int check_full_past_trained(const struct eval_opts *o, const struct kvb_model *m, int32_t n) {
    struct kvb_model_info mi;
    kvb_model_get_info(m, &mi);
    if (mi.n_ctx_train > 0 && n > (int64_t)PPL_LONG_BASELINE * mi.n_ctx_train && !o->max_tokens && !o->long_baseline) {
        fprintf(stderr, "kvbound ppl: the text is %d tokens, more than %dx the model's trained length %d: the full baseline would attend "
                        "over all of them, at a cost that grows with the square of the length. Score the first N tokens with --max-tokens N (e.g. --max-tokens %d), "
                        "run it whole with --allow-long-baseline, or drop the baseline with --baseline none\n",
                n, PPL_LONG_BASELINE, mi.n_ctx_train, PPL_LONG_BASELINE * mi.n_ctx_train);
        return -1;
    }
    warn_full_past_trained(m, n);
    return 0;
}

static int run_one(const struct eval_opts *o, const struct kvb_model *m, const int32_t *ids, int32_t n, enum kvb_policy_id id, int32_t budget,
                   enum kvb_baseline base, bool mass, bool recall, struct kvb_ppl_result *r) {
    struct kvb_ppl_params pp = kvb_ppl_default_params();
    struct cli_policy po = o->po;
    po.budget = budget;
    pp.kv = cli_kv_params(&po, id, &o->kvt, recall ? &o->rec : NULL);
    if (pp.kv.policy.n_sink >= budget - o->chunk && id != KVB_POLICY_FULL && pp.kv.policy.n_sink > 0) {
        if (o->po.sinks >= 0)
            fprintf(stderr, "kvbound: warning: %s: --sinks %d leaves no room in budget %d with chunk %d; using 0 sinks\n", kvb_policy_name(id),
                    o->po.sinks, budget, o->chunk);
        pp.kv.policy.n_sink = 0;
    }
    pp.prompt = o->prompt;
    pp.chunk = o->chunk;
    pp.baseline = base;
    pp.mass = mass;
    pp.n_threads = o->mo.threads;
    char label[96];
    snprintf(label, sizeof label, "%s%s budget %d", kvb_policy_name(id), recall ? "+recall" : "", id == KVB_POLICY_FULL ? 0 : budget);
    struct progress_state ps = {.label = label, .t0 = cli_now_sec(), .tty = isatty(2)};
    pp.progress = progress;
    pp.user = &ps;
    if (kvb_eval_ppl(m, ids, n, &pp, r) != KVB_OK) {
        fprintf(stderr, "kvbound: %s (budget %d): %s\n", kvb_policy_name(id), budget, kvb_last_error());
        return -1;
    }
    return 0;
}

/* One layer's entry of mass_layer / sink_mass_layer: null for a layer without attention (NaN: a hybrid's Gated DeltaNet layers). */
static void json_mass(FILE *f, int32_t l, double v) {
    if (isnan(v)) fprintf(f, "%snull", l ? "," : "");
    else fprintf(f, "%s%.6f", l ? "," : "", v);
}

static void json_run(FILE *f, enum kvb_policy_id id, int32_t budget, const struct kvb_ppl_result *r, enum kvb_baseline base, int32_t prompt,
                     const struct cli_kv_types *kvt, const struct cli_recall *rec) {
    fprintf(f, "{\"policy\":\"%s\",\"budget\":%d,\"tokens\":%lld,\"nll\":%.6f,\"ppl\":%.6f", kvb_policy_name(id), id == KVB_POLICY_FULL ? 0 : budget,
            (long long)r->tokens, r->nll, r->ppl);
    if (rec) fprintf(f, ",\"recall\":true,\"recall_pages\":%d,\"recall_every\":%d,\"cold_pages\":%lld,\"recall_bytes\":%zu,\"recall_score_s\":%.4f,\"recall_load_s\":%.4f",
                     rec->pages, rec->every, (long long)r->cold_pages, r->recall_bytes, r->recall_score_s, r->recall_load_s);
    else fprintf(f, ",\"recall\":false");
    if (r->has_baseline) fprintf(f, ",\"baseline\":\"%s\",\"baseline_ppl\":%.6f", base == KVB_BASELINE_FULL ? "full" : "recompute", r->base_ppl);
    if (r->has_kl) fprintf(f, ",\"kl\":%.6f,\"top1\":%.4f", r->kl, r->top1);
    if (prompt > 0)
        fprintf(f, ",\"prompt\":%d,\"prompt_kept\":%.2f,\"prompt_kept_min\":%d,\"prompt_kept_max\":%d", prompt, r->prompt_kept,
                r->prompt_kept_min, r->prompt_kept_max);
    if (prompt > 0 && id == KVB_POLICY_KVZIP) /* the extra prefill of its reconstruction, against the prompt's own */
        fprintf(f, ",\"kvzip_pass_tokens\":%lld,\"kvzip_context_tokens\":%lld,\"kvzip_prefill_ratio\":%.4f", (long long)r->kvzip_pass_tokens,
                (long long)r->kvzip_context_tokens, r->kvzip_context_tokens ? (double)r->kvzip_pass_tokens / (double)r->kvzip_context_tokens : 0.0);
    if (r->has_mass) {
        fprintf(f, ",\"mass\":%.6f,\"mass_layer\":[", r->mass);
        for (int32_t l = 0; l < r->n_layer; l++) json_mass(f, l, r->mass_layer[l]);
        fprintf(f, "],\"sink_mass\":%.6f,\"sink_mass_layer\":[", r->sink_mass);
        for (int32_t l = 0; l < r->n_layer; l++) json_mass(f, l, r->sink_mass_layer[l]);
        fprintf(f, "]");
    }
    fprintf(f, ",\"kv_bytes_peak\":%zu,\"kv_dtype\":\"%s\",\"kv_dtype_v\":\"%s\",\"tok_per_s\":%.1f,\"segments\":[", r->kv_bytes_peak,
            kvb_dtype_name(kvt->k), kvb_dtype_name(cli_kv_v(kvt)), r->tok_per_s);
    for (int32_t s = 0; s < r->n_seg; s++) fprintf(f, "%s%.4f", s ? "," : "", r->seg_ppl[s]);
    fprintf(f, "]}");
}

/* SVG of NLL smoothed over 64 predictions against position, a line per run. */
static int plot_nll(const char *path, struct kvb_ppl_result *r, const char **names, int n_runs) {
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "kvbound: cannot write '%s'\n", path); return -1; }
    const int W = 900, H = 360, L = 60, R = 140, T = 14, B = 40;
    double mx = 0;
    int64_t n = r[0].tokens;
    for (int k = 0; k < n_runs; k++)
        for (int64_t i = 0; i < r[k].tokens; i++) mx = r[k].nll_tok[i] > mx ? r[k].nll_tok[i] : mx;
    mx = mx > 0 ? mx : 1;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n", W, H, W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", L, H - B, W - R, H - B, L, T, L, H - B);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">token position</text>\n", (L + W - R) / 2, H - 8);
    fprintf(f, "<text x=\"14\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 14 %d)\">NLL (nats, mean of 64)</text>\n", (T + H - B) / 2, (T + H - B) / 2);
    for (int k = 0; k <= 4; k++)
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%.1f</text><text x=\"%.1f\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%lld</text>\n",
                L - 4, H - B - k * (H - T - B) / 4.0 + 3, mx * k / 4, L + k * (W - L - R) / 4.0, H - B + 14, (long long)(n * k / 4));
    for (int k = 0; k < n_runs; k++) {
        fprintf(f, "<polyline fill=\"none\" stroke-width=\"1.3\" stroke=\"%s\" points=\"", k_colors[k % 11]);
        const int64_t step = r[k].tokens > 600 ? r[k].tokens / 600 : 1;
        for (int64_t i = 0; i < r[k].tokens; i += step) {
            double a = 0;
            int64_t c = 0;
            for (int64_t j = i > 63 ? i - 63 : 0; j <= i; j++, c++) a += r[k].nll_tok[j];
            fprintf(f, "%.1f,%.1f ", L + (double)i / (double)(n > 1 ? n - 1 : 1) * (W - L - R), H - B - (a / c) / mx * (H - T - B));
        }
        fprintf(f, "\"/>\n<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"4\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" font-size=\"11\">%s</text>\n", W - R + 10,
                T + 6 + k * 16, k_colors[k % 11], W - R + 26, T + 11 + k * 16, names[k]);
    }
    fprintf(f, "</svg>\n");
    return fclose(f) == 0 ? 0 : -1;
}

/* the value options parse_common knows */
#define EVAL_OPTS "-f --file --policy --policies --prompt --chunk --max-tokens --csv --plot --baseline"

static int parse_common(struct eval_opts *o, const char *a, const char *v) {
    if (!strcmp(a, "-f") || !strcmp(a, "--file")) o->text = v;
    else if (!strcmp(a, "--policy") || !strcmp(a, "--policies")) snprintf(o->policies, sizeof o->policies, "%s", v);
    else if (!strcmp(a, "--prompt")) { if (cli_parse_i32(a, v, 1, 1 << 30, &o->prompt)) return -1; }
    else if (!strcmp(a, "--chunk")) { if (cli_parse_i32(a, v, 1, 8192, &o->chunk)) return -1; }
    else if (!strcmp(a, "--max-tokens")) { if (cli_parse_i64(a, v, 2, 1LL << 31, &o->max_tokens)) return -1; }
    else if (!strcmp(a, "--csv")) o->csv = v;
    else if (!strcmp(a, "--plot")) o->plot = v;
    else if (!strcmp(a, "--baseline")) {
        if (!strcmp(v, "full")) o->baseline = KVB_BASELINE_FULL;
        else if (!strcmp(v, "recompute")) o->baseline = KVB_BASELINE_RECOMPUTE;
        else if (!strcmp(v, "none")) o->baseline = KVB_BASELINE_NONE;
        else { fprintf(stderr, "kvbound: --baseline: '%s' is not full, recompute or none\n", v); return -1; }
    } else {
        fprintf(stderr, "kvbound: unknown option '%s' (see --help)\n", a);
        return -1;
    }
    return 0;
}

static void defaults(struct eval_opts *o, const char *cmd) {
    memset(o, 0, sizeof *o);
    cli_model_init(&o->mo, cmd, CLI_MODEL_TOKENIZER | CLI_MODEL_THREADS, 2);
    snprintf(o->policies, sizeof o->policies, "streaming");
    cli_policy_init(&o->po, 256);
    cli_kv_types_init(&o->kvt, KVB_DTYPE_F32);
    cli_recall_init(&o->rec);
    o->chunk = 1;
    o->baseline = KVB_BASELINE_FULL;
}

/* ---- ppl ---- */

/* The runs of ppl: every --policy, and with --recall each bounded one again with recall. */
struct ppl_runs {
    enum kvb_policy_id id[32];
    bool with_rec[32];
    int n; /* after a failed run: the runs done */
    struct kvb_ppl_result r[32];
    const char *names[32];
    char rec_names[32][40];
};

static void ppl_usage(void) {
    printf("usage: kvbound ppl -m MODEL [-z TOK] -f TEXT --policy P[,P...] --budget B [--prompt P]\n"
           "                   [--chunk C] [--max-tokens N] [--baseline full|recompute|none] [--allow-long-baseline]\n"
           "                   [--mass] [-t N]\n"
           "                   [--json] [--csv FILE] [--plot FILE.svg] [policy options]\n\n"
           "The file is tokenized as one string with BOS; every next-token prediction from position 1 is scored.\n"
           "B is the most tokens any query attends to, the current one included. Baseline (default full) gives\n"
           "baseline_ppl, and for full also KL(full || policy) and top-1 agreement. --mass measures the share of the\n"
           "full attention that falls on retained tokens (and on position 0), per layer. See docs/EVALUATION.md.\n"
           "A text past 8x the model's trained length is refused with the full baseline unless --max-tokens N\n"
           "is given or --allow-long-baseline runs it whole. Progress, with an ETA, goes to stderr.\n\n"
           "--prompt P (the kvpress protocol, for prompt compression): the first P tokens (BOS included) are a prompt,\n"
           "prefilled and compressed by the policy (snapkv, pyramidkv, adakv keep B per stream and then up to\n"
           "--decode-budget continuation tokens); decode-time policies hold B throughout. Only the continuation is\n"
           "scored, from the prediction of token P on; JSON adds prompt_kept (prompt tokens kept per stream).\n"
           "Baselines: full (or none).\n\n"
           "--kv-dtype T (or --kv-dtype-k/--kv-dtype-v apart) stores the policy's KV rows as T (default f32); the full baseline's\n"
           "rows stay f32, so --policy full --kv-dtype q8_0 gives what the bits alone cost (KL), and a bounded\n"
           "policy with quantized rows both costs together.\n\n");
    cli_kv_types_help(stdout, "f32");
    printf("  With --recall every bounded policy runs twice at the same hot budget, without and with recall\n"
           "  (\"recall\": false / true in the JSON, which adds recall_pages, cold_pages, recall_bytes,\n"
           "  recall_score_s and recall_load_s); B then bounds the hot cache, and a query attends to at most\n"
           "  B + R x block tokens.\n");
    cli_recall_help(stdout, 1024);
    cli_policy_help(stdout, 256);
}

static int ppl_parse(struct eval_opts *o, int argc, char **argv) {
    defaults(o, "ppl");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { ppl_usage(); return 0; }
        if (!strcmp(a, "--json")) { o->json = true; continue; }
        if (!strcmp(a, "--mass")) { o->mass = true; continue; }
        if (!strcmp(a, "--allow-long-baseline")) { o->long_baseline = true; continue; }
        int r = cli_model_option(&o->mo, argc, argv, &i);
        if (r == 0) r = cli_cache_option(&o->po, &o->kvt, &o->rec, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!(v = cli_opt_value("ppl", EVAL_OPTS, argc, argv, &i))) return 2;
        if (parse_common(o, a, v)) return 2;
    }
    if (!o->mo.path || !o->text) { fprintf(stderr, "kvbound ppl: -m MODEL and -f TEXT are required\n"); return 2; }
    if (o->rec.on && (o->mass || o->baseline == KVB_BASELINE_RECOMPUTE)) {
        fprintf(stderr, "kvbound ppl: --recall works with the full baseline (or none), without --mass\n");
        return 2;
    }
    return CLI_GO_ON;
}

/* The runs of --policy (at most 16 policies); -1: printed. */
static int ppl_policies(const struct eval_opts *o, struct ppl_runs *runs) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", o->policies);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (runs->n >= 16) { fprintf(stderr, "kvbound: --policy: at most 16\n"); return -1; }
        if (kvb_policy_from_name(tok, &runs->id[runs->n]) != KVB_OK) { fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error()); return -1; }
        runs->n++;
        if (o->rec.on && runs->id[runs->n - 1] != KVB_POLICY_FULL) { /* the same policy and hot budget, with recall */
            runs->id[runs->n] = runs->id[runs->n - 1];
            runs->with_rec[runs->n++] = true;
        }
    }
    return 0;
}

/* Run k's line of the table (without --json). */
static void ppl_line(const struct eval_opts *o, const struct ppl_runs *runs, int k) {
    const struct kvb_ppl_result *r = &runs->r[k];
    printf("%-20s budget %-6d ppl %10.4f (nll %.4f)", runs->names[k], runs->id[k] == KVB_POLICY_FULL ? 0 : o->po.budget, r->ppl, r->nll);
    if (r->has_baseline) printf("  %s %10.4f", o->baseline == KVB_BASELINE_FULL ? "full" : "recompute", r->base_ppl);
    if (r->has_kl) printf("  kl %.4f  top1 %.3f", r->kl, r->top1);
    if (r->has_mass) printf("  mass %.3f  sink %.3f", r->mass, r->sink_mass);
    if (o->prompt > 0) printf("  prompt kept %.1f/stream", r->prompt_kept);
    printf("  KV peak %.2f MB  %.0f tok/s  (%lld predictions)", r->kv_bytes_peak / 1e6, r->tok_per_s, (long long)r->tokens);
    if (runs->with_rec[k])
        printf("  recall area %.2f MB, %lld cold pages, scoring %.2f s, loading %.2f s", r->recall_bytes / 1e6, (long long)r->cold_pages,
               r->recall_score_s, r->recall_load_s);
    printf("\n");
}

/* Every run, printed as it ends (a table, or one JSON object); 1 after a
 * failed run (printed; runs->n is then the runs done). */
static int ppl_run_all(const struct eval_opts *o, const struct kvb_model *m, const int32_t *ids, int32_t n, struct ppl_runs *runs) {
    int rc = 0;
    if (o->json) printf("{\"model\":\"%s\",\"text\":\"%s\",\"tokens\":%d,\"chunk\":%d,\"prompt\":%d,\"runs\":[", o->mo.path, o->text, n, o->chunk, o->prompt);
    for (int k = 0; k < runs->n; k++) {
        if (run_one(o, m, ids, n, runs->id[k], o->po.budget, o->baseline, o->mass, runs->with_rec[k], &runs->r[k])) { rc = 1; runs->n = k; break; }
        snprintf(runs->rec_names[k], sizeof runs->rec_names[k], "%s+recall", kvb_policy_name(runs->id[k]));
        runs->names[k] = runs->with_rec[k] ? runs->rec_names[k] : kvb_policy_name(runs->id[k]);
        if (o->json) {
            if (k) printf(",");
            json_run(stdout, runs->id[k], o->po.budget, &runs->r[k], o->baseline, o->prompt, &o->kvt, runs->with_rec[k] ? &o->rec : NULL);
        } else {
            ppl_line(o, runs, k);
        }
    }
    if (o->json) printf("]}\n");
    return rc;
}

/* --csv: each prediction's NLL under every run (and the baseline); -1: printed. */
static int ppl_csv(const struct eval_opts *o, const struct ppl_runs *runs) {
    FILE *f = fopen(o->csv, "w");
    if (!f) { fprintf(stderr, "kvbound: cannot write '%s'\n", o->csv); return -1; }
    const struct kvb_ppl_result *r = runs->r;
    fprintf(f, "position");
    for (int k = 0; k < runs->n; k++) fprintf(f, ",nll_%s", runs->names[k]);
    if (r[0].base_nll_tok) fprintf(f, ",nll_%s", o->baseline == KVB_BASELINE_FULL ? "full" : "recompute");
    fprintf(f, "\n");
    for (int64_t i = 0; i < r[0].tokens; i++) {
        fprintf(f, "%lld", (long long)i + (o->prompt > 0 ? o->prompt : 1));
        for (int k = 0; k < runs->n; k++) fprintf(f, ",%.6f", r[k].nll_tok[i]);
        if (r[0].base_nll_tok) fprintf(f, ",%.6f", r[0].base_nll_tok[i]);
        fprintf(f, "\n");
    }
    fclose(f);
    return 0;
}

int cmd_ppl(int argc, char **argv) {
    struct eval_opts o;
    int rc = ppl_parse(&o, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    static struct ppl_runs runs;
    memset(&runs, 0, sizeof runs);
    if (ppl_policies(&o, &runs)) return 2;
    struct kvb_model *m = NULL;
    int32_t *ids = NULL, n = 0;
    rc = 1;
    if (load(&o, &m, &ids, &n) == 0) {
        if (o.baseline == KVB_BASELINE_FULL && check_full_past_trained(&o, m, n)) rc = 2;
        else rc = ppl_run_all(&o, m, ids, n, &runs);
        if (o.csv && runs.n && ppl_csv(&o, &runs)) rc = 1;
        if (o.plot && runs.n && plot_nll(o.plot, runs.r, runs.names, runs.n)) rc = 1;
    }
    for (int k = 0; k < runs.n; k++) kvb_ppl_result_free(&runs.r[k]);
    kvb_buffer_free(ids);
    kvb_model_free(m);
    return rc;
}

/* ---- sweep ---- */

struct sweep_opts {
    struct eval_opts e;
    const char *out, *budgets;
    char outdir[3072]; /* leaves room for "/sweep.csv" in 4096-byte paths */
};

/* The grid, policies x budgets, and its results. */
struct sweep {
    enum kvb_policy_id pol[16];
    int32_t bud[16];
    int np, nb;
    struct kvb_ppl_result res[16][16];
    double full_ppl;
};

static void sweep_usage(void) {
    printf("usage: kvbound sweep -m MODEL [-z TOK] -f TEXT --policies a,b,c --budgets 64,128,... [--max-tokens N (4000)] [--chunk C]\n"
           "                     [--prompt P] [policy options] --out DIR\n\n"
           "Runs kvbound ppl (baseline full) for every policy x budget; writes DIR/sweep.csv, DIR/sweep.md and\n"
           "DIR/sweep.svg (ppl, KL and top-1 against peak KV bytes, a line per policy). --prompt as in kvbound ppl.\n"
           "The policy options apply to every policy (--budget is replaced by --budgets).\n\n");
    cli_kv_types_help(stdout, "f32");
    cli_policy_help(stdout, 256);
}

static int sweep_parse(struct sweep_opts *o, int argc, char **argv) {
    defaults(&o->e, "sweep");
    snprintf(o->e.policies, sizeof o->e.policies, "window,streaming,h2o,tova,snapkv");
    o->out = NULL;
    o->budgets = "64,128,256";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { sweep_usage(); return 0; }
        int r = cli_model_option(&o->e.mo, argc, argv, &i);
        if (r == 0) r = cli_cache_option(&o->e.po, &o->e.kvt, NULL, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!(v = cli_opt_value("sweep", "--out --budgets " EVAL_OPTS, argc, argv, &i))) return 2;
        if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--budgets")) o->budgets = v;
        else if (parse_common(&o->e, a, v)) return 2;
    }
    if (!o->e.mo.path || !o->e.text || !o->out) { fprintf(stderr, "kvbound sweep: -m MODEL, -f TEXT and --out DIR are required\n"); return 2; }
    if (!(o->out = cli_dir_arg("--out", o->out, o->outdir, sizeof o->outdir))) return 2; /* no "dir//sweep.csv" */
    return CLI_GO_ON;
}

/* --max-tokens' default, the output directory, and the grid's policies and
 * budgets: CLI_GO_ON, or the exit status (printed). */
static int sweep_prepare(struct sweep_opts *o, struct sweep *sw) {
    if (!o->e.max_tokens) {
        o->e.max_tokens = 4000;
        fprintf(stderr, "kvbound sweep: scoring the first 4000 tokens (--max-tokens N to change)\n");
    }
    if (mkdir(o->out, 0777) != 0 && errno != EEXIST) { fprintf(stderr, "kvbound: cannot create '%s': %s\n", o->out, strerror(errno)); return 1; }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", o->e.policies);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (sw->np == 16 || kvb_policy_from_name(tok, &sw->pol[sw->np]) != KVB_OK) { fprintf(stderr, "kvbound: --policies: %s\n", kvb_last_error()); return 2; }
        sw->np++;
    }
    snprintf(buf, sizeof buf, "%s", o->budgets);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (sw->nb == 16 || cli_parse_i32("--budgets", tok, 2, 1 << 24, &sw->bud[sw->nb])) return 2;
        sw->nb++;
    }
    return CLI_GO_ON;
}

/* Every cell of the grid; -1: printed. */
static int sweep_run(const struct sweep_opts *o, const struct kvb_model *m, const int32_t *ids, int32_t n, struct sweep *sw) {
    for (int p = 0; p < sw->np; p++)
        for (int b = 0; b < sw->nb; b++) {
            fprintf(stderr, "kvbound sweep: %s budget %d\n", kvb_policy_name(sw->pol[p]), sw->bud[b]);
            if (run_one(&o->e, m, ids, n, sw->pol[p], sw->bud[b], KVB_BASELINE_FULL, false, false, &sw->res[p][b])) return -1;
            sw->full_ppl = sw->res[p][b].base_ppl;
        }
    return 0;
}

/* DIR/sweep.csv and DIR/sweep.md; -1: printed. */
static int sweep_tables(const struct sweep_opts *o, const struct sweep *sw, int32_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/sweep.csv", o->out);
    FILE *c = fopen(path, "w");
    snprintf(path, sizeof path, "%s/sweep.md", o->out);
    FILE *md = fopen(path, "w");
    if (!c || !md) {
        fprintf(stderr, "kvbound: cannot write in '%s'\n", o->out);
        if (c) fclose(c);
        if (md) fclose(md);
        return -1;
    }
    fprintf(c, "policy,budget,tokens,ppl,full_ppl,kl,top1,kv_bytes_peak\n");
    fprintf(md, "Model `%s`, text `%s`, %d tokens (%d predictions), full-cache ppl %.4f.\n\n| policy | budget | ppl | KL(full‖policy) | top-1 | KV bytes peak |\n|---|---|---|---|---|---|\n",
            o->e.mo.path, o->e.text, n, n - 1, sw->full_ppl);
    for (int p = 0; p < sw->np; p++)
        for (int b = 0; b < sw->nb; b++) {
            const struct kvb_ppl_result *r = &sw->res[p][b];
            fprintf(c, "%s,%d,%lld,%.6f,%.6f,%.6f,%.4f,%zu\n", kvb_policy_name(sw->pol[p]), sw->bud[b], (long long)r->tokens, r->ppl, r->base_ppl, r->kl, r->top1, r->kv_bytes_peak);
            fprintf(md, "| %s | %d | %.4f | %.4f | %.3f | %zu |\n", kvb_policy_name(sw->pol[p]), sw->bud[b], r->ppl, r->kl, r->top1, r->kv_bytes_peak);
        }
    fclose(c);
    fclose(md);
    return 0;
}

/* One panel of the figure (0 ppl, 1 KL, 2 top-1) against KV bytes up to xmax: a line per policy. */
static void sweep_panel(FILE *f, const struct sweep *sw, int panel, double xmax) {
    static const char *const titles[3] = {"perplexity", "KL(full || policy)", "top-1 agreement"};
    const int H = 300, PW = 280, L = 50, T = 20, B = 40;
    double ymax = panel == 2 ? 1.0 : 0;
    for (int p = 0; p < sw->np && panel < 2; p++)
        for (int b = 0; b < sw->nb; b++) {
            double y = panel == 0 ? sw->res[p][b].ppl : sw->res[p][b].kl;
            ymax = y > ymax ? y : ymax;
        }
    ymax = ymax > 0 ? ymax * 1.05 : 1;
    int x0 = panel * (PW + 40) + L;
    fprintf(f, "<text x=\"%d\" y=\"14\" font-size=\"12\" text-anchor=\"middle\">%s</text>", x0 + PW / 2, titles[panel]);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>", x0, H - B, x0 + PW, H - B, x0, T, x0, H - B);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">KV bytes (peak), max %.2f MB</text>", x0 + PW / 2, H - 8, xmax / 1e6);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\">%.3g</text><text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\">0</text>", x0 - 4, T + 4, ymax, x0 - 4, H - B);
    for (int p = 0; p < sw->np; p++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", k_colors[p % 11]);
        for (int b = 0; b < sw->nb; b++) {
            double y = panel == 0 ? sw->res[p][b].ppl : panel == 1 ? sw->res[p][b].kl : sw->res[p][b].top1;
            fprintf(f, "%.1f,%.1f ", x0 + sw->res[p][b].kv_bytes_peak / xmax * PW, H - B - y / ymax * (H - T - B));
        }
        fprintf(f, "\"/>");
    }
}

/* DIR/sweep.svg: three panels (ppl, KL, top-1) against KV bytes; -1: printed. */
static int sweep_svg(const struct sweep_opts *o, const struct sweep *sw) {
    char path[4096];
    snprintf(path, sizeof path, "%s/sweep.svg", o->out);
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "kvbound: cannot write '%s'\n", path); return -1; }
    const int W = 960, H = 300, L = 50, h = H + 20 * ((sw->np + 3) / 4);
    double xmax = 0;
    for (int p = 0; p < sw->np; p++)
        for (int b = 0; b < sw->nb; b++) xmax = sw->res[p][b].kv_bytes_peak > xmax ? (double)sw->res[p][b].kv_bytes_peak : xmax;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\"><rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, h, W, h, W, h);
    for (int panel = 0; panel < 3; panel++) sweep_panel(f, sw, panel, xmax);
    for (int p = 0; p < sw->np; p++)
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"4\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" font-size=\"11\">%s</text>", L + (p % 4) * 200,
                H + 6 + (p / 4) * 18, k_colors[p % 11], L + (p % 4) * 200 + 16, H + 11 + (p / 4) * 18, kvb_policy_name(sw->pol[p]));
    fprintf(f, "</svg>\n");
    fclose(f);
    return 0;
}

int cmd_sweep(int argc, char **argv) {
    struct sweep_opts o;
    int rc = sweep_parse(&o, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    static struct sweep sw;
    memset(&sw, 0, sizeof sw);
    if ((rc = sweep_prepare(&o, &sw)) != CLI_GO_ON) return rc;
    struct kvb_model *m = NULL;
    int32_t *ids = NULL, n = 0;
    rc = 1;
    if (load(&o.e, &m, &ids, &n) == 0) {
        warn_full_past_trained(m, n); /* every cell's baseline is full */
        if (sweep_run(&o, m, ids, n, &sw) == 0 && sweep_tables(&o, &sw, n) == 0 && sweep_svg(&o, &sw) == 0) {
            printf("sweep: %s/sweep.csv, %s/sweep.md, %s/sweep.svg\n", o.out, o.out, o.out);
            rc = 0;
        }
    }
    for (int p = 0; p < sw.np; p++)
        for (int b = 0; b < sw.nb; b++) kvb_ppl_result_free(&sw.res[p][b]);
    kvb_buffer_free(ids);
    kvb_model_free(m);
    return rc;
}
