/*
 * gen_opts.c — what `run` and `chat` share for generating text: the
 * sampling options (llama.cpp's names and meanings, one --help text whose
 * defaults are the ones the command passes), and the window of recent
 * tokens that --repeat-penalty looks at.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

int cli_sampler_option(struct kvb_sampler_params *sp, int argc, char **argv, int *i) {
    static const char *const flags[] = {"--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--repeat-last-n", "-s", "--seed"};
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
            "  --repeat-last-n N     the window of --repeat-penalty (default %d)\n"
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
