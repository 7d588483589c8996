/*
 * bench_tokenize.c — `kvbound bench tokenize`: what `kvbound tokenize -f
 * FILE --ids` costs, split into vocabulary load, encoding and printing the
 * ids, repeated and reported as medians (wall and process CPU time) with
 * throughput in MB/s. One JSON object per vocabulary, all in one array, so
 * ratios between them share the machine's noise.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static int bench_tok_usage(FILE *f) {
    fprintf(f,
            "usage: kvbound bench tokenize -m VOCAB.gguf [-m VOCAB2.gguf ...] -f TEXT [--reps N]\n"
            "\n"
            "  -m FILE     GGUF with tokenizer.ggml.* metadata (repeatable, up to 16)\n"
            "  -f FILE     text to encode (e.g. ../shared/data/text/pg2600_war_and_peace.txt)\n"
            "  --reps N    repetitions per vocabulary, median reported (default 5)\n");
    return 0;
}

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cli_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int bench_tokenize(int argc, char **argv) {
    const char *models[16], *file = NULL;
    int n_models = 0, reps = 5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return bench_tok_usage(stdout);
        if (!(v = cli_opt_value("bench tokenize", "-m -f --reps", argc, argv, &i))) return 2;
        if (!strcmp(a, "-m")) {
            if (n_models == 16) { fprintf(stderr, "kvbound bench tokenize: at most 16 -m\n"); return 2; }
            models[n_models++] = v;
        } else if (!strcmp(a, "-f")) file = v;
        else if (!strcmp(a, "--reps")) { if (cli_parse_i32(a, v, 1, 1000, &reps)) return 2; }
        else { fprintf(stderr, "kvbound bench tokenize: unknown option '%s'\n", a); return 2; }
    }
    if (!n_models || !file) { fprintf(stderr, "kvbound bench tokenize: needs -m VOCAB and -f TEXT (see --help)\n"); return 2; }
    size_t size;
    char *text = cli_read_file(file, (size_t)1 << 31, "text file", &size);
    if (!text) return 1;
    double *t_load = cli_xmalloc(sizeof(double) * (size_t)reps * 4, "timings"), *t_enc = t_load + reps, *t_cpu = t_enc + reps, *t_out = t_cpu + reps;
    printf("[\n");
    int rc = 0;
    for (int k = 0; k < n_models && rc == 0; k++) {
        int32_t n_tokens = 0;
        for (int r = 0; r < reps; r++) {
            double c0 = cpu_now(), w0 = cli_now_sec();
            struct kvb_vocab *v;
            if (kvb_vocab_load(models[k], &v) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); rc = 1; break; }
            double w1 = cli_now_sec();
            int32_t *ids;
            if (kvb_vocab_tokenize(v, text, (size_t)size, true, true, &ids, &n_tokens) != KVB_OK) {
                fprintf(stderr, "kvbound: %s\n", kvb_last_error());
                kvb_vocab_free(v);
                rc = 1;
                break;
            }
            double w2 = cli_now_sec();
            size_t cap = (size_t)n_tokens * 16 + 8, at = 0; /* the ids as `tokenize --ids` prints them */
            char *o = malloc(cap);
            for (int32_t i = 0; o && i < n_tokens; i++) at += (size_t)snprintf(o + at, cap - at, i ? ", %d" : "%d", ids[i]);
            free(o);
            kvb_buffer_free(ids);
            kvb_vocab_free(v);
            double w3 = cli_now_sec();
            t_load[r] = w1 - w0; t_enc[r] = w2 - w1; t_out[r] = w3 - w2; t_cpu[r] = cpu_now() - c0;
        }
        if (rc) break;
        const double load = median(t_load, reps), enc = median(t_enc, reps), out = median(t_out, reps), cpu = median(t_cpu, reps);
        printf("  {\"bench\": \"tokenize\", \"vocab\": \"%s\", \"text\": \"%s\", \"bytes\": %zu, \"tokens\": %d, \"reps\": %d,\n"
               "   \"load_s\": %.4f, \"encode_s\": %.4f, \"print_s\": %.4f, \"cpu_s\": %.4f, \"encode_mb_per_s\": %.2f, \"total_mb_per_s\": %.2f}%s\n",
               models[k], file, size, (int)n_tokens, reps, load, enc, out, cpu, size / enc / 1e6, size / (load + enc + out) / 1e6,
               k + 1 < n_models ? "," : "");
        fflush(stdout);
    }
    printf("]\n");
    free(t_load);
    free(text);
    return rc;
}
