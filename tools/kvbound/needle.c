/*
 * needle.c — `kvbound needle`: passkey retrieval through eviction over a
 * grid of haystack lengths x needle depths (kvb_eval_needle). Writes
 * DIR/needle.json, DIR/needle.md and DIR/needle.svg (heat maps of accuracy
 * and of passkey retention, length x depth); DIR is ./needle unless --out.
 * --policy takes a list, as ppl's does: the grid runs once per policy, and
 * with more than one each policy's files are DIR/needle-POLICY.json, .md and
 * .svg. Options parse into struct needle_opts, each policy's grid runs into
 * struct needle_grid, and its three files are written from them.
 * --passkeys N and --ask-after pass through to kvb_eval_needle; a cell's
 * accuracy is then over the passkeys asked.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int parse_dlist(const char *flag, const char *v, double *out, int *n, int max, bool frac) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*n >= max) { fprintf(stderr, "kvbound: %s: at most %d values\n", flag, max); return -1; }
        float x;
        if (cli_parse_f32(flag, tok, frac ? 0 : 32, frac ? 1 : 1 << 24, &x)) return -1;
        out[(*n)++] = x;
    }
    return 0;
}

static void heat(FILE *f, int x0, const char *title, const double *lengths, int nl, const double *depths, int nd, const double *val) {
    const int cw = 56, ch = 26, L = 70, T = 30;
    fprintf(f, "<text x=\"%d\" y=\"18\" font-size=\"13\">%s</text>", x0 + L, title);
    for (int i = 0; i < nl; i++) {
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"end\">%.0f</text>", x0 + L - 4, T + i * ch + 17, lengths[i]);
        for (int j = 0; j < nd; j++) {
            double v = val[i * nd + j];
            int g = (int)(255 * v), r = 255 - g;
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"rgb(%d,%d,90)\" stroke=\"white\"/><text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%.2f</text>",
                    x0 + L + j * cw, T + i * ch, cw, ch, r, g, x0 + L + j * cw + cw / 2, T + i * ch + 17, v);
        }
    }
    for (int j = 0; j < nd; j++)
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%.2f</text>", x0 + L + j * cw + cw / 2, T + nl * ch + 14, depths[j]);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">needle depth</text>", x0 + L + nd * cw / 2, T + nl * ch + 30);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\" transform=\"rotate(-90 %d %d)\">haystack tokens</text>", x0 + 14,
            T + nl * ch / 2, x0 + 14, T + nl * ch / 2);
}

/* --policy P[,P...] into ids (at most 16, no repeats); -1: printed */
static int parse_policies(const char *v, enum kvb_policy_id *ids, int *n) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    *n = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*n >= 16) { fprintf(stderr, "kvbound: --policy: at most 16\n"); return -1; }
        if (kvb_policy_from_name(tok, &ids[*n]) != KVB_OK) { fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error()); return -1; }
        for (int k = 0; k < *n; k++)
            if (ids[k] == ids[*n]) { fprintf(stderr, "kvbound: --policy: %s is listed twice\n", tok); return -1; }
        (*n)++;
    }
    if (!*n) { fprintf(stderr, "kvbound: --policy: no policy named\n"); return -1; }
    return 0;
}

struct needle_opts {
    struct cli_model_opts mo; /* -m -z -t */
    const char *out, *filler_path;
    char outdir[3072]; /* --out without trailing slashes: no "dir//needle.json" */
    double lengths[16], depths[16];
    int nl, nd, trials, chunk;
    int passkeys;   /* --passkeys (1) */
    bool ask_after; /* --ask-after */
    long long seed;
    enum kvb_policy_id pid;      /* the policy being run */
    enum kvb_policy_id pids[16]; /* --policy's list */
    int np;
    struct cli_policy po;
    struct cli_kv_types kvt;
    struct cli_recall rec;
};

/* Every cell's results, [length * nd + depth]; ...0: the same cell without recall. */
struct needle_grid {
    double acc[256], ret[256], ret_hot[256], acc0[256], ret0[256];
    long long kz_pass, kz_ctx; /* kvzip: reconstruction tokens and the context tokens they scored, every trial */
};

static void needle_usage(void) {
    printf("usage: kvbound needle -m MODEL [-z TOK] --lengths 256,512,... --depths 0,0.25,...,1 [--policy P[,P...]]\n"
           "                      [--budget B] [--trials K] [--seed S] [--filler FILE] [--chunk C] [-t N] [policy options]\n"
           "                      [--passkeys N] [--ask-after] [--out DIR]\n\n"
           "Passkey retrieval: accuracy of the model's greedy answer, and retention (share of streams still holding\n"
           "the passkey tokens when the question is read, after the prompt's compression), over length x depth.\n"
           "--policy (default full) takes a list, as ppl's does: each policy runs the whole grid. Writes\n"
           "DIR/needle.json/.md/.svg (DIR: --out, default ./needle); with several policies, DIR/needle-POLICY.json/.md/.svg\n"
           "for each.\n"
           "With --recall every cell runs twice, with and without recall (same policy and budget): retention then\n"
           "counts the attended set (retained slots plus the stream's recall area, as the question's last token\n"
           "chose it), and the cells add accuracy_no_recall, retained_no_recall and retained_hot.\n"
           "--passkeys N (1..64, default 1): N distinct passkeys, \"The pass key number I is K.\", the first at the depth,\n"
           "the others spread evenly after it (mod 1); each is asked in a prompt of its own, its question ending the\n"
           "compressed prompt. --ask-after: the haystack alone is the prompt, compressed before any question; then\n"
           "one turn per passkey in the same context (its question, up to 8 greedy tokens). A cell's accuracy is the\n"
           "share of passkeys answered, retention the mean over passkeys; needle.json then adds \"passkeys\" and\n"
           "\"ask_after\" (absent: 1 and false).\n\n");
    cli_kv_types_help(stdout, "f16");
    cli_recall_help(stdout, 1024);
    cli_policy_help(stdout, 256);
}

static int needle_parse(struct needle_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    cli_model_init(&o->mo, "needle", CLI_MODEL_TOKENIZER | CLI_MODEL_THREADS, 2);
    o->trials = 1;
    o->chunk = 256;
    o->seed = 1;
    o->passkeys = 1;
    o->pid = o->pids[0] = KVB_POLICY_FULL;
    o->np = 1;
    o->out = "needle";
    cli_policy_init(&o->po, 256);
    cli_kv_types_init(&o->kvt, KVB_DTYPE_F16);
    cli_recall_init(&o->rec);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { needle_usage(); return 0; }
        int r = cli_model_option(&o->mo, argc, argv, &i);
        if (r == 0) r = cli_cache_option(&o->po, &o->kvt, &o->rec, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "--ask-after")) { o->ask_after = true; continue; }
        if (!(v = cli_opt_value("needle", "--out --filler --lengths --depths --trials --chunk --seed --policy --passkeys", argc, argv, &i))) return 2;
        if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--filler")) o->filler_path = v;
        else if (!strcmp(a, "--lengths")) { if (parse_dlist(a, v, o->lengths, &o->nl, 16, false)) return 2; }
        else if (!strcmp(a, "--depths")) { if (parse_dlist(a, v, o->depths, &o->nd, 16, true)) return 2; }
        else if (!strcmp(a, "--trials")) { if (cli_parse_i32(a, v, 1, 1000, &o->trials)) return 2; }
        else if (!strcmp(a, "--chunk")) { if (cli_parse_i32(a, v, 1, 8192, &o->chunk)) return 2; }
        else if (!strcmp(a, "--passkeys")) { if (cli_parse_i32(a, v, 1, 64, &o->passkeys)) return 2; }
        else if (!strcmp(a, "--seed")) { if (cli_parse_i64(a, v, 0, 1LL << 62, &o->seed)) return 2; }
        else if (parse_policies(v, o->pids, &o->np)) return 2; /* --policy */
    }
    if (!o->mo.path || !o->nl || !o->nd) { fprintf(stderr, "kvbound needle: -m MODEL, --lengths and --depths are required\n"); return 2; }
    if (!(o->out = cli_dir_arg("--out", o->out, o->outdir, sizeof o->outdir))) return 2;
    return CLI_GO_ON;
}

/* Cell (i, j) of the grid over o->trials passkeys drawn from *rs, with and
 * (with --recall) without recall; its line on stderr. -1: printed. */
static int needle_cell(const struct needle_opts *o, const struct kvb_model *m, const char *filler, int i, int j, unsigned long long *rs,
                       struct needle_grid *g) {
    int ok = 0, ok0 = 0, asked = 0;
    double r = 0, r0 = 0, rh = 0;
    for (int k = 0; k < o->trials; k++) {
        *rs = *rs * 6364136223846793005ull + 1442695040888963407ull;
        struct kvb_needle_params np = kvb_needle_default_params();
        np.kv = cli_kv_params(&o->po, o->pid, &o->kvt, &o->rec);
        np.length = (int32_t)o->lengths[i];
        np.depth = o->depths[j];
        np.key = 10000u + (uint32_t)((*rs >> 33) % 90000u);
        np.filler = filler;
        np.chunk = o->chunk;
        np.n_threads = o->mo.threads;
        np.passkeys = o->passkeys;
        np.ask_after = o->ask_after;
        struct kvb_needle_result nr;
        if (kvb_eval_needle(m, &np, &nr) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return -1; }
        ok += nr.n_correct;
        asked += nr.passkeys;
        g->kz_pass += nr.kvzip_pass_tokens;
        g->kz_ctx += nr.kvzip_context_tokens;
        r += nr.retained;
        rh += nr.retained_hot;
        if (o->rec.on) { /* the same cell without recall */
            np.kv.recall = (struct kvb_recall_params){0};
            if (kvb_eval_needle(m, &np, &nr) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return -1; }
            ok0 += nr.n_correct;
            r0 += nr.retained;
        }
    }
    const int c = i * o->nd + j;
    g->acc[c] = asked ? (double)ok / asked : 0;
    g->ret[c] = r / o->trials;
    g->ret_hot[c] = rh / o->trials;
    g->acc0[c] = asked ? (double)ok0 / asked : 0;
    g->ret0[c] = r0 / o->trials;
    if (o->rec.on)
        fprintf(stderr, "kvbound needle: length %.0f depth %.2f: accuracy %.2f, retained %.2f with recall; %.2f, %.2f without\n", o->lengths[i],
                o->depths[j], g->acc[c], g->ret[c], g->acc0[c], g->ret0[c]);
    else
        fprintf(stderr, "kvbound needle: length %.0f depth %.2f: accuracy %.2f, retained %.2f\n", o->lengths[i], o->depths[j], g->acc[c], g->ret[c]);
    return 0;
}

/* Every cell, lengths by depths, the passkeys drawn from --seed; -1: printed. */
static int needle_run(const struct needle_opts *o, const struct kvb_model *m, const char *filler, struct needle_grid *g) {
    unsigned long long rs = (unsigned long long)o->seed * 0x9E3779B97F4A7C15ull + 7;
    for (int i = 0; i < o->nl; i++)
        for (int j = 0; j < o->nd; j++)
            if (needle_cell(o, m, filler, i, j, &rs, g)) return -1;
    return 0;
}

static void needle_json(FILE *j, const struct needle_opts *o, const struct needle_grid *g) {
    fprintf(j, "{\"model\":\"%s\",\"policy\":\"%s\",\"budget\":%d,\"kv_dtype\":\"%s\",\"kv_dtype_v\":\"%s\",\"trials\":%d,\"seed\":%lld,",
            o->mo.path, kvb_policy_name(o->pid), o->pid == KVB_POLICY_FULL ? 0 : o->po.budget, kvb_dtype_name(o->kvt.k),
            kvb_dtype_name(cli_kv_v(&o->kvt)), o->trials, o->seed);
    if (o->passkeys > 1 || o->ask_after) fprintf(j, "\"passkeys\":%d,\"ask_after\":%s,", o->passkeys, o->ask_after ? "true" : "false");
    if (o->rec.on) fprintf(j, "\"recall\":true,\"recall_pages\":%d,\"recall_every\":%d,", o->rec.pages, o->rec.every);
    else fprintf(j, "\"recall\":false,");
    if (o->pid == KVB_POLICY_KVZIP) /* the extra prefill of its reconstruction, against the contexts' own */
        fprintf(j, "\"kvzip_pass_tokens\":%lld,\"kvzip_context_tokens\":%lld,\"kvzip_prefill_ratio\":%.4f,", g->kz_pass, g->kz_ctx,
                g->kz_ctx ? (double)g->kz_pass / (double)g->kz_ctx : 0.0);
    fprintf(j, "\"cells\":[");
    for (int i = 0; i < o->nl; i++)
        for (int d = 0; d < o->nd; d++) {
            const int c = i * o->nd + d;
            fprintf(j, "%s{\"length\":%.0f,\"depth\":%.4f,\"accuracy\":%.4f,\"retained\":%.4f", i + d ? "," : "", o->lengths[i], o->depths[d], g->acc[c], g->ret[c]);
            if (o->rec.on)
                fprintf(j, ",\"retained_hot\":%.4f,\"accuracy_no_recall\":%.4f,\"retained_no_recall\":%.4f", g->ret_hot[c], g->acc0[c], g->ret0[c]);
            fprintf(j, "}");
        }
    fprintf(j, "]}\n");
}

static void needle_md(FILE *md, const struct needle_opts *o, const struct needle_grid *g) {
    fprintf(md, "Needle retrieval, `%s`, policy %s%s, %d trial(s) per cell. Accuracy (retention)%s:\n\n| tokens / depth |", o->mo.path,
            kvb_policy_name(o->pid), o->pid == KVB_POLICY_FULL ? "" : " (budget)", o->trials, o->rec.on ? " with recall / without" : "");
    for (int d = 0; d < o->nd; d++) fprintf(md, " %.2f |", o->depths[d]);
    fprintf(md, "\n|---|");
    for (int d = 0; d < o->nd; d++) fprintf(md, "---|");
    fprintf(md, "\n");
    for (int i = 0; i < o->nl; i++) {
        fprintf(md, "| %.0f |", o->lengths[i]);
        for (int d = 0; d < o->nd; d++) {
            const int c = i * o->nd + d;
            if (o->rec.on) fprintf(md, " %.2f (%.2f) / %.2f (%.2f) |", g->acc[c], g->ret[c], g->acc0[c], g->ret0[c]);
            else fprintf(md, " %.2f (%.2f) |", g->acc[c], g->ret[c]);
        }
        fprintf(md, "\n");
    }
}

static void needle_svg(FILE *sv, const struct needle_opts *o, const struct needle_grid *g) {
    const int w = 2 * (70 + o->nd * 56 + 30), h = 30 + o->nl * 26 + 40;
    fprintf(sv, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\"><rect width=\"%d\" height=\"%d\" fill=\"white\"/>", w, h, w, h, w, h);
    heat(sv, 0, "accuracy (greedy answer = passkey)", o->lengths, o->nl, o->depths, o->nd, g->acc);
    heat(sv, w / 2, "retention (passkey tokens kept in every stream)", o->lengths, o->nl, o->depths, o->nd, g->ret);
    fprintf(sv, "</svg>\n");
}

/* DIR/needle.json, .md and .svg (needle-POLICY.* when --policy lists
 * several); -1: printed. */
static int needle_write(const struct needle_opts *o, const struct needle_grid *g) {
    static const char *const ext[3] = {"json", "md", "svg"};
    char stem[64], path[3][4096];
    if (o->np > 1) snprintf(stem, sizeof stem, "needle-%s", kvb_policy_name(o->pid));
    else snprintf(stem, sizeof stem, "needle");
    FILE *f[3];
    for (int k = 0; k < 3; k++) {
        snprintf(path[k], sizeof path[k], "%s/%s.%s", o->out, stem, ext[k]);
        f[k] = fopen(path[k], "w");
    }
    const bool opened = f[0] && f[1] && f[2];
    if (opened) {
        needle_json(f[0], o, g);
        needle_md(f[1], o, g);
        needle_svg(f[2], o, g);
    } else {
        fprintf(stderr, "kvbound: cannot write in '%s'\n", o->out);
    }
    for (int k = 0; k < 3; k++)
        if (f[k]) fclose(f[k]);
    if (!opened) return -1;
    printf("needle: %s, %s, %s\n", path[0], path[1], path[2]);
    return 0;
}

int cmd_needle(int argc, char **argv) {
    struct needle_opts o;
    int rc = needle_parse(&o, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    char *filler = NULL;
    struct kvb_model *m = NULL;
    static struct needle_grid grid;
    size_t filler_len;
    rc = 1;
    if (o.filler_path && !(filler = cli_read_file(o.filler_path, (size_t)64 << 20, "filler", &filler_len))) goto out;
    cli_warn_threads(o.mo.threads);
    if (mkdir(o.out, 0777) != 0 && errno != EEXIST) { fprintf(stderr, "kvbound: cannot create '%s': %s\n", o.out, strerror(errno)); goto out; }
    if (cli_load_model(&o.mo, &m, NULL)) goto out;
    rc = 0;
    for (int p = 0; p < o.np && rc == 0; p++) {
        o.pid = o.pids[p];
        if (o.np > 1) fprintf(stderr, "kvbound needle: policy %s\n", kvb_policy_name(o.pid));
        memset(&grid, 0, sizeof grid);
        if (needle_run(&o, m, filler, &grid) || needle_write(&o, &grid)) rc = 1;
    }
out:
    free(filler);
    kvb_model_free(m);
    return rc;
}
