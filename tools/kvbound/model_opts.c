/*
 * model_opts.c — the model options, parsed once for every command that
 * loads a model (run, chat, ppl, sweep, needle, mem, info, convert,
 * tokenize, the model benchmarks, serve): -m/--model and those of -z,
 * --no-mmap, -t and -ngl the command takes. A flag it does not take is
 * left to the command, which calls it unknown, as before. Messages name
 * the command as its own options do ("kvbound run: -t needs a value"), and
 * a model that does not load is reported as the library says it.
 */
#include "cli.h"

#include <string.h>

/* The model options that take a value, each with the CLI_MODEL_* that lets
 * a command take it (0: every command). */
static const struct {
    const char *flag;
    unsigned needs;
} k_value_opts[] = {
    {"-m", 0},
    {"--model", 0},
    {"-z", CLI_MODEL_TOKENIZER},
    {"--tokenizer", CLI_MODEL_TOKENIZER},
    {"-t", CLI_MODEL_THREADS},
    {"--threads", CLI_MODEL_THREADS},
    {"-ngl", CLI_MODEL_NGL},
    {"--n-gpu-layers", CLI_MODEL_NGL},
    {"--gpu-layers", CLI_MODEL_NGL},
};

void cli_model_init(struct cli_model_opts *mo, const char *cmd, unsigned takes, int default_threads) {
    memset(mo, 0, sizeof *mo);
    mo->cmd = cmd;
    mo->takes = takes;
    mo->threads = default_threads;
    mo->threads_max = 1024;
}

/* The CLI_MODEL_* of value option a, or -1 when a is none of them. */
static int value_opt(const char *a) {
    for (size_t k = 0; k < sizeof k_value_opts / sizeof k_value_opts[0]; k++)
        if (!strcmp(a, k_value_opts[k].flag)) return (int)k_value_opts[k].needs;
    return -1;
}

int cli_model_option(struct cli_model_opts *mo, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strcmp(a, "--no-mmap") && (mo->takes & CLI_MODEL_NO_MMAP)) {
        mo->no_mmap = true;
        return 1;
    }
    const int needs = value_opt(a);
    if (needs < 0 || (needs && !(mo->takes & (unsigned)needs))) return 0;
    const char *v = cli_opt_value(mo->cmd, a, argc, argv, i); /* a is known: only a missing value fails */
    if (!v) return -1;
    if (needs == 0) mo->path = v;
    else if (needs == CLI_MODEL_TOKENIZER) mo->tokenizer = v;
    else if (needs == CLI_MODEL_THREADS) return cli_parse_i32(a, v, 1, mo->threads_max, &mo->threads) ? -1 : 1;
    else { /* CLI_MODEL_NGL */
        int ngl;
        if (cli_parse_i32(a, v, -1, 1 << 20, &ngl)) return -1;
        fprintf(stderr, "kvbound: note: %s ignored: kvbound runs on the CPU, there is no GPU offload\n", a);
    }
    return 1;
}

bool cli_model_required(const struct cli_model_opts *mo) {
    if (mo->path) return true;
    fprintf(stderr, "kvbound %s: -m MODEL is required\n", mo->cmd);
    return false;
}

struct kvb_model_params cli_model_params(const struct cli_model_opts *mo) {
    struct kvb_model_params mp = kvb_model_default_params();
    mp.tokenizer_path = mo->tokenizer;
    mp.no_mmap = mo->no_mmap;
    return mp;
}

int cli_load_model(const struct cli_model_opts *mo, struct kvb_model **m, struct kvb_model_info *mi) {
    const struct kvb_model_params mp = cli_model_params(mo);
    if (kvb_model_load(mo->path, &mp, m) == KVB_OK) {
        if (mi) kvb_model_get_info(*m, mi);
        return 0;
    }
    *m = NULL;
    if (mo->name_cmd_on_load) fprintf(stderr, "kvbound %s: %s\n", mo->cmd, kvb_last_error());
    else fprintf(stderr, "kvbound: %s\n", kvb_last_error());
    return -1;
}
