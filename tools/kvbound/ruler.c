/*
 * ruler.c — `kvbound ruler`: RULER's synthetic tasks (kvb_ruler_generate,
 * kvb_eval_ruler) on a model, with a policy at a budget or at kvpress's
 * compression ratio (the fraction of the cache removed), the question in
 * the compressed prompt or asked after its compression (--ask-after).
 * Writes DIR/ruler.json ({"model", "length", "policy", "ratio",
 * "ask_after", "tasks": {NAME: {"score", "samples"}}, "average"}, scores in
 * percent as RULER and kvpress print them) and DIR/ruler.md, a table.
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
    enum kvb_policy_id pid;
    double ratio; /* 0: none */
    bool ask_after;
    struct cli_policy po;
    struct cli_kv_types kvt;
    struct cli_recall rec;
};

static void ruler_usage(void) {
    printf("usage: kvbound ruler -m MODEL [-z TOK] [--tasks LIST|all] [--length N] [--samples N] [--seed S]\n"
           "                     [--policy P (--budget B | --ratio R)] [--ask-after] --out DIR\n"
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
           "question ends the compressed prompt.\n"
           "--haystack FILE (up to 8): the essay tasks' text (Project Gutenberg boilerplate is cut); default the\n"
           "books of $KVB_SHARED_DATA/text (../shared/data) when present. --words FILE: one word a line (default\n"
           RULER_WORDS ", Debian package wamerican).\n"
           "Writes DIR/ruler.json (scores in percent; \"average\" over the tasks run) and DIR/ruler.md.\n\n");
    cli_kv_types_help(stdout, "f16");
    cli_recall_help(stdout, 1024);
    cli_policy_help(stdout, 256);
}

static int parse_tasks(struct ruler_opts *o, const char *v) {
    char buf[512];
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
    o->pid = KVB_POLICY_FULL;
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
            char *end;
            errno = 0;
            const double x = strtod(v, &end);
            if (errno || end == v || *end || !(x > 0 && x < 1)) {
                fprintf(stderr, "kvbound: --ratio must be in (0, 1), the fraction of the cache removed, not '%s'\n", v);
                return 2;
            }
            o->ratio = x;
            ratio_set = true;
        } else if (kvb_policy_from_name(v, &o->pid) != KVB_OK) { /* --policy */
            fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error());
            return 2;
        }
    }
    if (!cli_model_required(&o->mo)) return 2;
    if (!o->out) { fprintf(stderr, "kvbound ruler: --out DIR is required\n"); return 2; }
    if (ratio_set && o->po.budget_set) { fprintf(stderr, "kvbound ruler: --budget and --ratio exclude each other (give one)\n"); return 2; }
    if (ratio_set && o->pid == KVB_POLICY_FULL) { fprintf(stderr, "kvbound ruler: --ratio needs --policy P, a policy that evicts (full keeps everything)\n"); return 2; }
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

/* DIR/ruler.json and DIR/ruler.md; -1: printed. */
static int ruler_write(const struct ruler_opts *o, const double *score, const int *done, const char *style) {
    char pj[4096], pm[4096];
    snprintf(pj, sizeof pj, "%s/ruler.json", o->out);
    snprintf(pm, sizeof pm, "%s/ruler.md", o->out);
    FILE *j = fopen(pj, "w"), *md = fopen(pm, "w");
    if (!j || !md) {
        fprintf(stderr, "kvbound: cannot write in '%s'\n", o->out);
        if (j) fclose(j);
        if (md) fclose(md);
        return -1;
    }
    double sum = 0;
    int nt = 0;
    for (int t = 0; t < KVB_RULER_TASKS; t++)
        if (o->tasks[t]) sum += score[t], nt++;
    const double avg = nt ? sum / nt : 0;
    fprintf(j, "{\"model\":");
    json_str(j, o->mo.path);
    fprintf(j, ",\"length\":%d,\"policy\":\"%s\",", o->length, kvb_policy_name(o->pid));
    if (o->pid == KVB_POLICY_FULL) fprintf(j, "\"ratio\":0,");
    else if (o->ratio > 0) fprintf(j, "\"ratio\":%g,", o->ratio);
    else fprintf(j, "\"ratio\":null,\"budget\":%d,", o->po.budget);
    fprintf(j, "\"ask_after\":%s,\"seed\":%lld,\"chat_template\":\"%s\",\"tasks\":{", o->ask_after ? "true" : "false", o->seed, style);
    bool first = true;
    for (int t = 0; t < KVB_RULER_TASKS; t++) {
        if (!o->tasks[t]) continue;
        fprintf(j, "%s\"%s\":{\"score\":%.2f,\"samples\":%d}", first ? "" : ",", kvb_ruler_task_name(t), score[t], done[t]);
        first = false;
    }
    fprintf(j, "},\"average\":%.2f}\n", avg);
    char what[96];
    if (o->pid == KVB_POLICY_FULL) snprintf(what, sizeof what, "full (compression ratio 0)");
    else if (o->ratio > 0) snprintf(what, sizeof what, "%s at compression ratio %g", kvb_policy_name(o->pid), o->ratio);
    else snprintf(what, sizeof what, "%s at budget %d", kvb_policy_name(o->pid), o->po.budget);
    fprintf(md, "RULER, `%s`, length %d, %s, question %s, seed %lld, chat template: %s. Scores in percent (string match, all answers).\n\n",
            o->mo.path, o->length, what, o->ask_after ? "asked after compression" : "inside the compressed prompt", o->seed, style);
    fprintf(md, "| task | score | samples |\n|---|---|---|\n");
    for (int t = 0; t < KVB_RULER_TASKS; t++)
        if (o->tasks[t]) fprintf(md, "| %s | %.2f | %d |\n", kvb_ruler_task_name(t), score[t], done[t]);
    fprintf(md, "| average | %.2f | |\n", avg);
    fclose(j);
    fclose(md);
    printf("ruler: %s, %s (average %.2f)\n", pj, pm, avg);
    return 0;
}

int cmd_ruler(int argc, char **argv) {
    struct ruler_opts o;
    int rc = ruler_parse(&o, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    struct kvb_ruler_corpus *corpus = NULL;
    struct kvb_model *m = NULL;
    rc = 1;
    if (ruler_corpus(&o, &corpus)) goto out;
    cli_warn_threads(o.mo.threads);
    if (mkdir(o.out, 0777) != 0 && errno != EEXIST) { fprintf(stderr, "kvbound: cannot create '%s': %s\n", o.out, strerror(errno)); goto out; }
    if (cli_load_model(&o.mo, &m, NULL)) goto out;
    struct kvb_vocab_info vi;
    kvb_vocab_get_info(kvb_model_vocab(m), &vi);
    enum kvb_chat_style style = KVB_CHAT_PLAIN;
    if (vi.chat_template) kvb_chat_style_for_vocab(kvb_model_vocab(m), &style, NULL);
    const char *style_name = vi.chat_template ? kvb_chat_style_name(style) : "none";
    struct kvb_ruler_params rp = kvb_ruler_default_params();
    rp.kv = cli_kv_params(&o.po, o.pid, &o.kvt, &o.rec);
    rp.ratio = o.ratio;
    rp.ask_after = o.ask_after;
    rp.chunk = o.chunk;
    rp.n_threads = o.mo.threads;
    double score[KVB_RULER_TASKS] = {0};
    int done[KVB_RULER_TASKS] = {0};
    const double t0 = cli_now_sec();
    for (int t = 0; t < KVB_RULER_TASKS; t++) {
        if (!o.tasks[t]) continue;
        double sum = 0;
        for (int s = 0; s < o.samples; s++) {
            /* one seed a (task, sample): the same sample whatever else runs */
            const uint64_t seed = (uint64_t)o.seed * 0x9E3779B97F4A7C15ull + (uint64_t)t * 0x100000001B3ull + (uint64_t)s;
            struct kvb_ruler_sample smp;
            struct kvb_ruler_result res;
            if (kvb_ruler_generate(corpus, t, seed, o.length, kvb_ruler_count_model, m, &smp) != KVB_OK) {
                fprintf(stderr, "kvbound: %s\n", kvb_last_error());
                goto out;
            }
            const kvb_status st = kvb_eval_ruler(m, &rp, t, &smp, &res);
            kvb_ruler_sample_free(&smp);
            if (st != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); goto out; }
            sum += res.score;
            done[t]++;
            fprintf(stderr, "kvbound ruler: %s %d/%d: %.0f%% (%d prompt tokens, %d compressed, budget %d; %.1f s so far)\n",
                    kvb_ruler_task_name(t), s + 1, o.samples, 100 * res.score, res.prompt_tokens, res.compressed_tokens, res.budget,
                    cli_now_sec() - t0);
        }
        score[t] = floor(100.0 * sum / o.samples * 100 + 0.5) / 100; /* RULER rounds to 2 places */
    }
    rc = ruler_write(&o, score, done, style_name) ? 1 : 0;
out:
    kvb_model_free(m);
    kvb_ruler_corpus_free(corpus);
    return rc;
}
