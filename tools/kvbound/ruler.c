/*
 * ruler.c — `kvbound ruler`: RULER's synthetic tasks (kvb_ruler_generate,
 * kvb_eval_ruler) on a model, with a policy at a budget or at kvpress's
 * compression ratio (the fraction of the cache removed), the question in
 * the compressed prompt or asked after its compression (--ask-after).
 * Writes DIR/ruler.json ({"model", "length", "policy", "ratio",
 * "ask_after", "tasks": {NAME: {"score", "samples"}}, "average"}, scores in
 * percent as RULER and kvpress print them) and DIR/ruler.md, a table.
 * --policy and --ratio take lists, as sweep's do: every (policy, ratio)
 * runs on the same samples (each generated once), its files then
 * DIR/ruler-POLICY-rR.json and .md, and DIR/ruler-table.md puts the runs
 * side by side (full runs once, at ratio 0).
 * The sources: the word list (--words, default Debian wamerican's
 * /usr/share/dict/american-english) and the essay haystack (--haystack
 * FILE, repeatable; default the public-domain books of
 * $KVB_SHARED_DATA/text, ../shared/data by default, when present).
 */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RULER_WORDS "/usr/share/dict/american-english"

static const char *const k_books[] = {"pg2600_war_and_peace.txt", "pg2701_moby_dick.txt", "pg98_a_tale_of_two_cities.txt",
                                      "pg345_dracula.txt", "pg2591_grimms_fairy_tales.txt"};

struct ruler_opts {
    struct cli_model_opts mo;
    const char *out, *words, *haystack[8];
    char outdir[3072];
    int n_hay;
    bool tasks[KVB_RULER_TASKS];
    int length, samples, chunk;
    long long seed;
    enum kvb_policy_id pids[16];
    int np;
    double ratios[16]; /* --ratio's list; none: the budget */
    int nr;
    bool ask_after;
    struct cli_policy po;
    struct cli_kv_types kvt;
    struct cli_recall rec;
};

static void ruler_usage(void) {
    printf("usage: kvbound ruler -m MODEL [-z TOK] [--tasks LIST|all] [--length N] [--samples N] [--seed S]\n"
           "                     [--policy P[,P...] (--budget B | --ratio R[,R...])] [--ask-after] --out DIR\n"
           "                     [--haystack FILE]... [--words FILE] [--chunk C] [-t N] [policy options]\n\n"
           "RULER's synthetic tasks (NVIDIA/RULER), generated in C, deterministic by seed, at any length:\n"
           "niah_single_1/2/3, niah_multikey_1/2/3, niah_multivalue, niah_multiquery, vt, cwe, fwe (--tasks, a\n"
           "comma list, default all; qa_1 and qa_2 need SQuAD/HotpotQA and are absent). Each sample's input fills\n"
           "--length tokens (default 4096) less the task's answer tokens, through the model's chat template when\n"
           "it has one; the model answers greedily and RULER's string match scores it (all answers found).\n"
           "--samples N a task (default 10), --seed S (default 42). --policy P (default full) with --budget B\n"
           "(tokens kept per stream) or --ratio R (kvpress's compression ratio: the fraction of the compressed\n"
           "prompt's tokens removed, 0 < R < 1). --ask-after: the context alone is prefilled and compressed, then\n"
           "the question is read (kvpress's query-agnostic mode; a multi-turn session meets this); else the\n"
           "question ends the compressed prompt. --policy and --ratio take lists (up to 16 each): every pair\n"
           "runs on the same samples (full once, at ratio 0), its files DIR/ruler-POLICY-rR.json and .md\n"
           "(ruler-POLICY.* at a budget), and DIR/ruler-table.md puts the runs side by side.\n"
           "--haystack FILE (up to 8): the essay tasks' text (Project Gutenberg boilerplate is cut); default the\n"
           "books of $KVB_SHARED_DATA/text (../shared/data) when present. --words FILE: one word a line (default\n"
           RULER_WORDS ", Debian package wamerican).\n"
           "Writes DIR/ruler.json (scores in percent; \"average\" over the tasks run) and DIR/ruler.md (one run).\n\n");
    cli_kv_types_help(stdout, "f16");
    cli_recall_help(stdout, 1024);
    cli_policy_help(stdout, 256);
}

static int parse_tasks(struct ruler_opts *o, const char *v) {
    char buf[512];
    if (strlen(v) >= sizeof buf) {
        fprintf(stderr, "kvbound: --tasks: a list of at most %d characters\n", (int)sizeof buf - 1);
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", v);
    memset(o->tasks, 0, sizeof o->tasks);
    int n = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ","), n++) {
        if (!strcmp(tok, "all")) {
            for (int i = 0; i < KVB_RULER_TASKS; i++) o->tasks[i] = true;
            continue;
        }
        int32_t t;
        if (kvb_ruler_task_from_name(tok, &t) != KVB_OK) { fprintf(stderr, "kvbound: --tasks: %s\n", kvb_last_error()); return -1; }
        o->tasks[t] = true;
    }
    if (!n) { fprintf(stderr, "kvbound: --tasks: no task named\n"); return -1; }
    return 0;
}

static int ruler_parse(struct ruler_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    cli_model_init(&o->mo, "ruler", CLI_MODEL_TOKENIZER | CLI_MODEL_THREADS | CLI_MODEL_NO_MMAP, 2);
    for (int i = 0; i < KVB_RULER_TASKS; i++) o->tasks[i] = true;
    o->length = 4096;
    o->samples = 10;
    o->seed = 42;
    o->chunk = 256;
    o->pids[0] = KVB_POLICY_FULL;
    o->np = 1;
    o->words = RULER_WORDS;
    cli_policy_init(&o->po, 256);
    cli_kv_types_init(&o->kvt, KVB_DTYPE_F16);
    cli_recall_init(&o->rec);
    bool ratio_set = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { ruler_usage(); return 0; }
        int r = cli_model_option(&o->mo, argc, argv, &i);
        if (r == 0) r = cli_cache_option(&o->po, &o->kvt, &o->rec, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "--ask-after")) { o->ask_after = true; continue; }
        if (!(v = cli_opt_value("ruler", "--out --tasks --length --samples --seed --policy --ratio --haystack --words --chunk", argc, argv, &i))) return 2;
        if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--tasks")) { if (parse_tasks(o, v)) return 2; }
        else if (!strcmp(a, "--length")) { if (cli_parse_i32(a, v, 64, 1 << 24, &o->length)) return 2; }
        else if (!strcmp(a, "--samples")) { if (cli_parse_i32(a, v, 1, 100000, &o->samples)) return 2; }
        else if (!strcmp(a, "--seed")) { if (cli_parse_i64(a, v, 0, 1LL << 62, &o->seed)) return 2; }
        else if (!strcmp(a, "--chunk")) { if (cli_parse_i32(a, v, 1, 8192, &o->chunk)) return 2; }
        else if (!strcmp(a, "--words")) o->words = v;
        else if (!strcmp(a, "--haystack")) {
            if (o->n_hay >= 8) { fprintf(stderr, "kvbound: --haystack: at most 8 files\n"); return 2; }
            o->haystack[o->n_hay++] = v;
        } else if (!strcmp(a, "--ratio")) {
            char buf[512];
            if (strlen(v) >= sizeof buf) { fprintf(stderr, "kvbound: --ratio: a list of at most %d characters\n", (int)sizeof buf - 1); return 2; }
            snprintf(buf, sizeof buf, "%s", v);
            o->nr = 0;
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                char *end;
                errno = 0;
                const double x = strtod(tok, &end);
                if (errno || end == tok || *end || !(x > 0 && x < 1)) {
                    fprintf(stderr, "kvbound: --ratio must be in (0, 1), the fraction of the cache removed, not '%s'\n", tok);
                    return 2;
                }
                if (o->nr >= 16) { fprintf(stderr, "kvbound: --ratio: at most 16 values\n"); return 2; }
                o->ratios[o->nr++] = x;
            }
            if (!o->nr) { fprintf(stderr, "kvbound: --ratio: no value given\n"); return 2; }
            ratio_set = true;
        } else { /* --policy P[,P...] */
            char buf[256];
            if (strlen(v) >= sizeof buf) { fprintf(stderr, "kvbound: --policy: a list of at most %d characters\n", (int)sizeof buf - 1); return 2; }
            snprintf(buf, sizeof buf, "%s", v);
            o->np = 0;
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                if (o->np >= 16) { fprintf(stderr, "kvbound: --policy: at most 16\n"); return 2; }
                if (kvb_policy_from_name(tok, &o->pids[o->np]) != KVB_OK) { fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error()); return 2; }
                for (int k = 0; k < o->np; k++)
                    if (o->pids[k] == o->pids[o->np]) { fprintf(stderr, "kvbound: --policy: %s is listed twice\n", tok); return 2; }
                o->np++;
            }
            if (!o->np) { fprintf(stderr, "kvbound: --policy: no policy named\n"); return 2; }
        }
    }
    if (!cli_model_required(&o->mo)) return 2;
    if (!o->out) { fprintf(stderr, "kvbound ruler: --out DIR is required\n"); return 2; }
    if (ratio_set && o->po.budget_set) { fprintf(stderr, "kvbound ruler: --budget and --ratio exclude each other (give one)\n"); return 2; }
    bool evicts = false;
    for (int k = 0; k < o->np; k++) evicts |= o->pids[k] != KVB_POLICY_FULL;
    if (ratio_set && !evicts) { fprintf(stderr, "kvbound ruler: --ratio needs --policy P, a policy that evicts (full keeps everything)\n"); return 2; }
    if (!(o->out = cli_dir_arg("--out", o->out, o->outdir, sizeof o->outdir))) return 2;
    return CLI_GO_ON;
}

/* The sources read into a corpus; -1: printed. */
static int ruler_corpus(const struct ruler_opts *o, struct kvb_ruler_corpus **c) {
    size_t wl = 0, el = 0;
    char *words = NULL, *essay = NULL;
    struct stat sb;
    if (stat(o->words, &sb) != 0) {
        if (!strcmp(o->words, RULER_WORDS))
            fprintf(stderr, "kvbound ruler: no word list at %s: install Debian's wamerican (apt-get install wamerican), or give --words FILE\n", RULER_WORDS);
        else
            fprintf(stderr, "kvbound ruler: --words %s: %s\n", o->words, strerror(errno));
        return -1;
    }
    if (!(words = cli_read_file(o->words, (size_t)64 << 20, "word list", &wl))) return -1;
    char path[4096];
    const char *shared = getenv("KVB_SHARED_DATA");
    const int nb = o->n_hay ? o->n_hay : (int)(sizeof k_books / sizeof k_books[0]);
    for (int i = 0; i < nb; i++) {
        if (o->n_hay) snprintf(path, sizeof path, "%s", o->haystack[i]);
        else snprintf(path, sizeof path, "%s/text/%s", shared && *shared ? shared : "../shared/data", k_books[i]);
        if (!o->n_hay && stat(path, &sb) != 0) continue; /* the default books are optional */
        size_t l;
        char *t = cli_read_file(path, (size_t)256 << 20, "haystack", &l);
        if (!t) { free(words); free(essay); return -1; }
        essay = realloc(essay, el + l + 2);
        if (!essay) { fprintf(stderr, "kvbound: out of memory\n"); free(t); free(words); return -1; }
        memcpy(essay + el, t, l);
        el += l;
        essay[el++] = '\n';
        free(t);
    }
    const kvb_status st = kvb_ruler_corpus_new(essay, el, words, wl, c);
    free(words);
    free(essay);
    if (st != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return -1; }
    return 0;
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

/* One (policy, ratio) run: its scores summed over the samples. */
struct ruler_run {
    enum kvb_policy_id pid;
    double ratio; /* 0: the budget (full: nothing removed) */
    double sum[KVB_RULER_TASKS], score[KVB_RULER_TASKS];
    int done[KVB_RULER_TASKS];
    double average;
};

static void run_label(const struct ruler_opts *o, const struct ruler_run *r, char *buf, size_t cap) {
    if (r->pid == KVB_POLICY_FULL) snprintf(buf, cap, "full (compression ratio 0)");
    else if (r->ratio > 0) snprintf(buf, cap, "%s at compression ratio %g", kvb_policy_name(r->pid), r->ratio);
    else snprintf(buf, cap, "%s at budget %d", kvb_policy_name(r->pid), o->po.budget);
}

/* DIR/STEM.json and DIR/STEM.md of one run; -1: printed. */
static int ruler_write(const struct ruler_opts *o, const struct ruler_run *r, const char *stem, const char *style) {
    char pj[4096], pm[4096];
    snprintf(pj, sizeof pj, "%s/%s.json", o->out, stem);
    snprintf(pm, sizeof pm, "%s/%s.md", o->out, stem);
    FILE *j = fopen(pj, "w"), *md = fopen(pm, "w");
    if (!j || !md) {
        fprintf(stderr, "kvbound: cannot write in '%s'\n", o->out);
        if (j) fclose(j);
        if (md) fclose(md);
        return -1;
    }
    fprintf(j, "{\"model\":");
    json_str(j, o->mo.path);
    fprintf(j, ",\"length\":%d,\"policy\":\"%s\",", o->length, kvb_policy_name(r->pid));
    if (r->pid == KVB_POLICY_FULL) fprintf(j, "\"ratio\":0,");
    else if (r->ratio > 0) fprintf(j, "\"ratio\":%g,", r->ratio);
    else fprintf(j, "\"ratio\":null,\"budget\":%d,", o->po.budget);
    fprintf(j, "\"ask_after\":%s,\"seed\":%lld,\"chat_template\":\"%s\",", o->ask_after ? "true" : "false", o->seed, style);
    if (o->rec.on) fprintf(j, "\"recall\":true,\"recall_pages\":%d,\"recall_every\":%d,\"tasks\":{", o->rec.pages, o->rec.every);
    else fprintf(j, "\"recall\":false,\"tasks\":{");
    bool first = true;
    for (int t = 0; t < KVB_RULER_TASKS; t++) {
        if (!o->tasks[t]) continue;
        fprintf(j, "%s\"%s\":{\"score\":%.2f,\"samples\":%d}", first ? "" : ",", kvb_ruler_task_name(t), r->score[t], r->done[t]);
        first = false;
    }
    fprintf(j, "},\"average\":%.2f}\n", r->average);
    char what[96];
    run_label(o, r, what, sizeof what);
    fprintf(md, "RULER, `%s`, length %d, %s%s, question %s, seed %lld, chat template: %s. Scores in percent (string match, all answers).\n\n",
            o->mo.path, o->length, what, o->rec.on ? " with recall" : "", o->ask_after ? "asked after compression" : "inside the compressed prompt",
            o->seed, style);
    fprintf(md, "| task | score | samples |\n|---|---|---|\n");
    for (int t = 0; t < KVB_RULER_TASKS; t++)
        if (o->tasks[t]) fprintf(md, "| %s | %.2f | %d |\n", kvb_ruler_task_name(t), r->score[t], r->done[t]);
    fprintf(md, "| average | %.2f | |\n", r->average);
    fclose(j);
    fclose(md);
    printf("ruler: %s, %s (average %.2f)\n", pj, pm, r->average);
    return 0;
}

/* DIR/ruler-table.md: the runs side by side, a row each; -1: printed. */
static int ruler_table(const struct ruler_opts *o, const struct ruler_run *runs, int n, const char *style) {
    char path[4096];
    snprintf(path, sizeof path, "%s/ruler-table.md", o->out);
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "kvbound: cannot write '%s'\n", path); return -1; }
    fprintf(f, "RULER, `%s`, length %d, question %s, %d samples a task, seed %lld, chat template: %s. Scores in percent;\n"
               "ratio: the fraction of the cache removed (kvpress's compression ratio).\n\n| policy | ratio |",
            o->mo.path, o->length, o->ask_after ? "asked after compression" : "inside the compressed prompt", o->samples, o->seed, style);
    for (int t = 0; t < KVB_RULER_TASKS; t++)
        if (o->tasks[t]) fprintf(f, " %s |", kvb_ruler_task_name(t));
    fprintf(f, " average |\n|---|---|");
    for (int t = 0; t < KVB_RULER_TASKS; t++)
        if (o->tasks[t]) fprintf(f, "---|");
    fprintf(f, "---|\n");
    for (int i = 0; i < n; i++) {
        const struct ruler_run *r = &runs[i];
        if (r->pid == KVB_POLICY_FULL) fprintf(f, "| full | 0 |");
        else if (r->ratio > 0) fprintf(f, "| %s | %g |", kvb_policy_name(r->pid), r->ratio);
        else fprintf(f, "| %s | budget %d |", kvb_policy_name(r->pid), o->po.budget);
        for (int t = 0; t < KVB_RULER_TASKS; t++)
            if (o->tasks[t]) fprintf(f, " %.2f |", r->score[t]);
        fprintf(f, " %.2f |\n", r->average);
    }
    fclose(f);
    printf("ruler: %s\n", path);
    return 0;
}

/* The runs of the lists: full once, at ratio 0; the others at each ratio,
 * or at the budget. Returns their count. */
static int ruler_runs(const struct ruler_opts *o, struct ruler_run *runs) {
    int n = 0;
    memset(runs, 0, sizeof(struct ruler_run) * 16 * 16);
    for (int p = 0; p < o->np; p++)
        for (int k = 0; k < (o->pids[p] == KVB_POLICY_FULL || !o->nr ? 1 : o->nr); k++) {
            runs[n].pid = o->pids[p];
            runs[n++].ratio = o->pids[p] == KVB_POLICY_FULL || !o->nr ? 0 : o->ratios[k];
        }
    return n;
}

/* Sample s of task t through every run, its line on stderr each; -1: printed. */
static int ruler_sample(const struct ruler_opts *o, const struct kvb_model *m, const struct kvb_ruler_sample *smp, int t, int s,
                        struct ruler_run *runs, int nrun, double t0) {
    for (int i = 0; i < nrun; i++) {
        struct ruler_run *r = &runs[i];
        struct kvb_ruler_params rp = kvb_ruler_default_params();
        rp.kv = cli_kv_params(&o->po, r->pid, &o->kvt, &o->rec);
        rp.ratio = r->ratio;
        rp.ask_after = o->ask_after;
        rp.chunk = o->chunk;
        rp.n_threads = o->mo.threads;
        struct kvb_ruler_result res;
        if (kvb_eval_ruler(m, &rp, t, smp, &res) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return -1; }
        r->sum[t] += res.score;
        r->done[t]++;
        char what[96] = "";
        if (nrun > 1) run_label(o, r, what, sizeof what);
        fprintf(stderr, "kvbound ruler: %s %d/%d%s%s: %.0f%% (%d prompt tokens, %d compressed, budget %d; %.1f s so far)\n",
                kvb_ruler_task_name(t), s + 1, o->samples, nrun > 1 ? ", " : "", what, 100 * res.score, res.prompt_tokens,
                res.compressed_tokens, res.budget, cli_now_sec() - t0);
    }
    return 0;
}

/* Every run's scores (RULER rounds to 2 places) and average, its files,
 * and with several the table; -1: printed. */
static int ruler_report(const struct ruler_opts *o, struct ruler_run *runs, int nrun, const char *style) {
    for (int i = 0; i < nrun; i++) {
        struct ruler_run *r = &runs[i];
        double sum = 0;
        int nt = 0;
        for (int t = 0; t < KVB_RULER_TASKS; t++)
            if (o->tasks[t]) {
                r->score[t] = floor(100.0 * r->sum[t] / o->samples * 100 + 0.5) / 100;
                sum += r->score[t], nt++;
            }
        r->average = nt ? sum / nt : 0;
        char stem[64];
        if (nrun == 1) snprintf(stem, sizeof stem, "ruler");
        else if (r->ratio > 0) snprintf(stem, sizeof stem, "ruler-%s-r%g", kvb_policy_name(r->pid), r->ratio);
        else snprintf(stem, sizeof stem, "ruler-%s", kvb_policy_name(r->pid));
        if (ruler_write(o, r, stem, style)) return -1;
    }
    return nrun > 1 ? ruler_table(o, runs, nrun, style) : 0;
}

int cmd_ruler(int argc, char **argv) {
    struct ruler_opts o;
    int rc = ruler_parse(&o, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    struct kvb_ruler_corpus *corpus = NULL;
    struct kvb_model *m = NULL;
    static struct ruler_run runs[16 * 16];
    const int nrun = ruler_runs(&o, runs);
    rc = 1;
    if (ruler_corpus(&o, &corpus)) goto out;
    cli_warn_threads(o.mo.threads);
    if (mkdir(o.out, 0777) != 0 && errno != EEXIST) { fprintf(stderr, "kvbound: cannot create '%s': %s\n", o.out, strerror(errno)); goto out; }
    if (cli_load_model(&o.mo, &m, NULL)) goto out;
    struct kvb_vocab_info vi;
    kvb_vocab_get_info(kvb_model_vocab(m), &vi);
    enum kvb_chat_style style = KVB_CHAT_PLAIN;
    if (vi.chat_template) kvb_chat_style_for_vocab(kvb_model_vocab(m), &style, NULL);
    const double t0 = cli_now_sec();
    for (int t = 0; t < KVB_RULER_TASKS; t++)
        for (int s = 0; o.tasks[t] && s < o.samples; s++) {
            /* one seed a (task, sample): the same sample whatever else runs */
            const uint64_t seed = (uint64_t)o.seed * 0x9E3779B97F4A7C15ull + (uint64_t)t * 0x100000001B3ull + (uint64_t)s;
            struct kvb_ruler_sample smp;
            if (kvb_ruler_generate(corpus, t, seed, o.length, kvb_ruler_count_model, m, &smp) != KVB_OK) {
                fprintf(stderr, "kvbound: %s\n", kvb_last_error());
                goto out;
            }
            const int bad = ruler_sample(&o, m, &smp, t, s, runs, nrun, t0);
            kvb_ruler_sample_free(&smp);
            if (bad) goto out;
        }
    rc = ruler_report(&o, runs, nrun, vi.chat_template ? kvb_chat_style_name(style) : "none") ? 1 : 0;
out:
    kvb_model_free(m);
    kvb_ruler_corpus_free(corpus);
    return rc;
}
