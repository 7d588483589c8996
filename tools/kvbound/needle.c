/*
 * needle.c — `kvbound needle`: passkey retrieval through eviction over a
 * grid of haystack lengths x needle depths (kvb_eval_needle). Writes
 * DIR/needle.json, DIR/needle.md and DIR/needle.svg (heat maps of accuracy
 * and of passkey retention, length x depth).
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

int cmd_needle(int argc, char **argv) {
    const char *model = NULL, *tok = NULL, *out = NULL, *filler_path = NULL;
    double lengths[16], depths[16];
    int nl = 0, ndp = 0, trials = 1, threads = 2, chunk = 256;
    struct cli_policy po;
    cli_policy_init(&po, 256);
    long long seed = 1;
    enum kvb_policy_id pid = KVB_POLICY_FULL;
    struct cli_kv_types kvt;
    cli_kv_types_init(&kvt, KVB_DTYPE_F16);
    struct cli_recall rec;
    cli_recall_init(&rec);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: kvbound needle -m MODEL [-z TOK] --lengths 256,512,... --depths 0,0.25,...,1 --policy P [--budget B]\n"
                   "                      [--trials K] [--seed S] [--filler FILE] [--chunk C] [-t N] [policy options] --out DIR\n\n"
                   "Passkey retrieval: accuracy of the model's greedy answer, and retention (share of streams still holding\n"
                   "the passkey tokens when the question is read, after the prompt's compression), over length x depth.\n"
                   "Writes needle.json/.md/.svg.\n"
                   "With --recall every cell runs twice, with and without recall (same policy and budget): retention then\n"
                   "counts the attended set (retained slots plus the stream's recall area, as the question's last token\n"
                   "chose it), and the cells add accuracy_no_recall, retained_no_recall and retained_hot.\n\n");
            cli_kv_types_help(stdout, "f16");
            cli_recall_help(stdout, 1024);
            cli_policy_help(stdout, 256);
            return 0;
        }
        int pr = cli_policy_option(&po, argc, argv, &i);
        if (pr == 0) pr = cli_kv_types_option(&kvt, argc, argv, &i);
        if (pr == 0) pr = cli_recall_option(&rec, argc, argv, &i);
        if (pr < 0) return 2;
        if (pr > 0) continue;
        if (!(v = cli_opt_value("needle", "-m --model -z --tokenizer --out --filler --lengths --depths --trials --chunk -t --threads --seed --policy", argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer")) tok = v;
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--filler")) filler_path = v;
        else if (!strcmp(a, "--lengths")) { if (parse_dlist(a, v, lengths, &nl, 16, false)) return 2; }
        else if (!strcmp(a, "--depths")) { if (parse_dlist(a, v, depths, &ndp, 16, true)) return 2; }
        else if (!strcmp(a, "--trials")) { if (cli_parse_i32(a, v, 1, 1000, &trials)) return 2; }
        else if (!strcmp(a, "--chunk")) { if (cli_parse_i32(a, v, 1, 8192, &chunk)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (cli_parse_i32(a, v, 1, 1024, &threads)) return 2; }
        else if (!strcmp(a, "--seed")) { if (cli_parse_i64(a, v, 0, 1LL << 62, &seed)) return 2; }
        else if (!strcmp(a, "--policy")) { if (kvb_policy_from_name(v, &pid) != KVB_OK) { fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error()); return 2; } }
        else { fprintf(stderr, "kvbound needle: unknown option '%s'\n", a); return 2; }
    }
    if (!model || !out || !nl || !ndp) { fprintf(stderr, "kvbound needle: -m MODEL, --lengths, --depths and --out are required\n"); return 2; }
    char outdir[3072]; /* no "dir//needle.json" */
    if (!(out = cli_dir_arg("--out", out, outdir, sizeof outdir))) return 2;
    char *filler = NULL;
    size_t filler_len;
    if (filler_path && !(filler = cli_read_file(filler_path, (size_t)64 << 20, "filler", &filler_len))) return 1;
    cli_warn_threads(threads);
    if (mkdir(out, 0777) != 0 && errno != EEXIST) { fprintf(stderr, "kvbound: cannot create '%s': %s\n", out, strerror(errno)); return 1; }
    struct kvb_model_params mp = kvb_model_default_params();
    mp.tokenizer_path = tok;
    struct kvb_model *m;
    if (kvb_model_load(model, &mp, &m) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
    double acc[256], ret[256], acc0[256], ret0[256], ret_hot[256];
    unsigned long long rs = (unsigned long long)seed * 0x9E3779B97F4A7C15ull + 7;
    for (int i = 0; i < nl; i++)
        for (int j = 0; j < ndp; j++) {
            int ok = 0, ok0 = 0;
            double r = 0, r0 = 0, rh = 0;
            for (int k = 0; k < trials; k++) {
                rs = rs * 6364136223846793005ull + 1442695040888963407ull;
                struct kvb_needle_params np = {cli_policy_params(&po, pid), po.pos, (int32_t)lengths[i], depths[j],
                                               10000u + (uint32_t)((rs >> 33) % 90000u), filler, chunk, threads, kvt.k, kvt.v,
                                               cli_recall_params(&rec)};
                struct kvb_needle_result nr;
                if (kvb_eval_needle(m, &np, &nr) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
                ok += nr.correct;
                r += nr.retained;
                rh += nr.retained_hot;
                if (rec.on) { /* the same cell without recall */
                    np.recall = (struct kvb_recall_params){0};
                    if (kvb_eval_needle(m, &np, &nr) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
                    ok0 += nr.correct;
                    r0 += nr.retained;
                }
            }
            acc[i * ndp + j] = (double)ok / trials;
            ret[i * ndp + j] = r / trials;
            ret_hot[i * ndp + j] = rh / trials;
            acc0[i * ndp + j] = (double)ok0 / trials;
            ret0[i * ndp + j] = r0 / trials;
            if (rec.on)
                fprintf(stderr, "kvbound needle: length %.0f depth %.2f: accuracy %.2f, retained %.2f with recall; %.2f, %.2f without\n", lengths[i],
                        depths[j], acc[i * ndp + j], ret[i * ndp + j], acc0[i * ndp + j], ret0[i * ndp + j]);
            else
                fprintf(stderr, "kvbound needle: length %.0f depth %.2f: accuracy %.2f, retained %.2f\n", lengths[i], depths[j], acc[i * ndp + j], ret[i * ndp + j]);
        }
    char path[4096];
    snprintf(path, sizeof path, "%s/needle.json", out);
    FILE *j = fopen(path, "w");
    snprintf(path, sizeof path, "%s/needle.md", out);
    FILE *md = fopen(path, "w");
    snprintf(path, sizeof path, "%s/needle.svg", out);
    FILE *sv = fopen(path, "w");
    if (!j || !md || !sv) { fprintf(stderr, "kvbound: cannot write in '%s'\n", out); return 1; }
    fprintf(j, "{\"model\":\"%s\",\"policy\":\"%s\",\"budget\":%d,\"kv_dtype\":\"%s\",\"kv_dtype_v\":\"%s\",\"trials\":%d,\"seed\":%lld,",
            model, kvb_policy_name(pid), pid == KVB_POLICY_FULL ? 0 : po.budget, kvb_dtype_name(kvt.k), kvb_dtype_name(cli_kv_v(&kvt)), trials, seed);
    if (rec.on) fprintf(j, "\"recall\":true,\"recall_pages\":%d,\"recall_every\":%d,", rec.pages, rec.every);
    else fprintf(j, "\"recall\":false,");
    fprintf(j, "\"cells\":[");
    fprintf(md, "Needle retrieval, `%s`, policy %s%s, %d trial(s) per cell. Accuracy (retention)%s:\n\n| tokens / depth |", model, kvb_policy_name(pid),
            pid == KVB_POLICY_FULL ? "" : " (budget)", trials, rec.on ? " with recall / without" : "");
    for (int d = 0; d < ndp; d++) fprintf(md, " %.2f |", depths[d]);
    fprintf(md, "\n|---|");
    for (int d = 0; d < ndp; d++) fprintf(md, "---|");
    fprintf(md, "\n");
    for (int i = 0; i < nl; i++) {
        fprintf(md, "| %.0f |", lengths[i]);
        for (int d = 0; d < ndp; d++) {
            fprintf(j, "%s{\"length\":%.0f,\"depth\":%.4f,\"accuracy\":%.4f,\"retained\":%.4f", i + d ? "," : "", lengths[i], depths[d], acc[i * ndp + d], ret[i * ndp + d]);
            if (rec.on)
                fprintf(j, ",\"retained_hot\":%.4f,\"accuracy_no_recall\":%.4f,\"retained_no_recall\":%.4f", ret_hot[i * ndp + d], acc0[i * ndp + d], ret0[i * ndp + d]);
            fprintf(j, "}");
            if (rec.on) fprintf(md, " %.2f (%.2f) / %.2f (%.2f) |", acc[i * ndp + d], ret[i * ndp + d], acc0[i * ndp + d], ret0[i * ndp + d]);
            else fprintf(md, " %.2f (%.2f) |", acc[i * ndp + d], ret[i * ndp + d]);
        }
        fprintf(md, "\n");
    }
    fprintf(j, "]}\n");
    const int w = 2 * (70 + ndp * 56 + 30), h = 30 + nl * 26 + 40;
    fprintf(sv, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\"><rect width=\"%d\" height=\"%d\" fill=\"white\"/>", w, h, w, h, w, h);
    heat(sv, 0, "accuracy (greedy answer = passkey)", lengths, nl, depths, ndp, acc);
    heat(sv, w / 2, "retention (passkey tokens kept in every stream)", lengths, nl, depths, ndp, ret);
    fprintf(sv, "</svg>\n");
    fclose(j);
    fclose(md);
    fclose(sv);
    printf("needle: %s/needle.json, %s/needle.md, %s/needle.svg\n", out, out, out);
    free(filler);
    kvb_model_free(m);
    return 0;
}
