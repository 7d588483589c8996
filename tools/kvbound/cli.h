/*
 * cli.h — helpers shared by the kvbound subcommands: strict number parsing
 * that names the flag on error, the stderr log sink, the option groups
 * every command parses the same way (model, policy, KV types, recall,
 * sampling), and the subcommand entry points (one file each).
 *
 * A command is a short function over static helpers of its file: one that
 * parses the options into a struct (returning CLI_GO_ON, or the exit status
 * after --help or a usage error), one that sets up and runs, one that
 * reports; what it holds is released on one path.
 */
#ifndef KVB_CLI_H
#define KVB_CLI_H

#include "kvbound.h"

#include <stdio.h>
#include <sys/types.h>

/* What a parse or set-up step returns when the command goes on; any other
 * value is the command's exit status (0 after --help, 2 after a usage
 * error, 1 after a failure). */
#define CLI_GO_ON (-1)

/* Parse "value" of flag into *out within [lo, hi]; prints an error naming the flag. */
int cli_parse_i64(const char *flag, const char *value, long long lo, long long hi, long long *out);
int cli_parse_i32(const char *flag, const char *value, int lo, int hi, int *out);
int cli_parse_f32(const char *flag, const char *value, double lo, double hi, float *out);
/* The value of option argv[*i], one of the command's options that take a
 * value, listed in `opts` separated by spaces ("-m --model -n"): returns
 * argv[*i + 1] and advances *i. Returns NULL after printing, naming `cmd`
 * ("run", "bench batch"), "unknown option 'X'" when argv[*i] is not in opts
 * (wherever it stands on the line), "unexpected argument 'X'" when it is not
 * an option at all, or "X needs a value" when it is the last argument. */
const char *cli_opt_value(const char *cmd, const char *opts, int argc, char **argv, int *i);
/* The value of option argv[*i], known to take one (the shared option
 * helpers below): argv[*i + 1], advancing *i, or NULL after printing
 * "X needs a value". */
const char *cli_need_value(int argc, char **argv, int *i);
/* The whole of a file ("-" = stdin, pipes too), NUL-terminated; at most
 * max_bytes. On error prints the cause (strerror, a directory, too large)
 * naming `what` and the path, and returns NULL. */
char *cli_read_file(const char *path, size_t max_bytes, const char *what, size_t *len);
/* A prompt file (-f) as llama.cpp reads it: the whole file ("-" = stdin)
 * less one trailing newline, if it ends with one. */
char *cli_read_prompt_file(const char *path, size_t *len);
/* An output directory given on the command line (--out DIR) without its
 * trailing slashes (a lone "/" stays), in buf: "DIR/name" then has one
 * slash. Returns buf; NULL (printed, naming flag) when too long. */
const char *cli_dir_arg(const char *flag, const char *dir, char *buf, size_t cap);
/* Checks, before any work, that a file can be written at path: not a
 * directory, and its directory exists and is writable. -1: printed,
 * naming cmd, flag and the path. */
int cli_check_output_file(const char *cmd, const char *flag, const char *path);
/* Progress on stderr: on a terminal one line redrawn with \r; elsewhere
 * (a log, a pipe) whole lines, at every tenth of the way and at the end. */
void cli_progress(const char *what, long long done, long long total);
int cli_cores(void);
/* Warns when -t exceeds the cores. */
void cli_warn_threads(int threads);
void cli_log_stderr(enum kvb_log_level level, const char *msg, void *user);
double cli_now_sec(void);
/* qsort comparison of doubles, ascending. */
int cli_cmp_double(const void *a, const void *b);
/* The --no-mmap line of every command that loads a model (kvb_model_params.no_mmap). */
#define CLI_NO_MMAP_HELP                                                                              \
    "  --no-mmap             read the weights into memory (transparent huge pages) instead of\n" \
    "                        mapping the file: faster prefill; RSS grows by the file's size\n"
/* malloc / calloc for the CLI's own buffers: on failure print "out of
 * memory" naming what and exit(1) (the program, never the library). */
void *cli_xmalloc(size_t bytes, const char *what);
/* tools/serve/main.c, when built with the server */
int cmd_serve_main(int argc, char **argv);
void *cli_xcalloc(size_t n, size_t size, const char *what);

/* The model options (model_opts.c), parsed once for every command that
 * loads a model, as the policy options are: -m/--model FILE, and of the
 * others those the command takes (CLI_MODEL_*; one it does not take stays
 * the command's unknown option). */
enum {
    CLI_MODEL_TOKENIZER = 1 << 0, /* -z, --tokenizer FILE: llama2.c tokenizer.bin, for .bin checkpoints */
    CLI_MODEL_NO_MMAP = 1 << 1,   /* --no-mmap: the weights read into memory */
    CLI_MODEL_THREADS = 1 << 2,   /* -t, --threads N, 1..threads_max */
    CLI_MODEL_NGL = 1 << 3,       /* -ngl, --n-gpu-layers, --gpu-layers N: llama.cpp's, noted and ignored */
};
struct cli_model_opts {
    const char *cmd; /* the command in messages: "run", "bench decode" */
    unsigned takes;  /* CLI_MODEL_* */
    const char *path, *tokenizer;
    bool no_mmap;
    int threads, threads_max; /* threads_max: 1024 unless changed after init */
    bool name_cmd_on_load;    /* a load error reads "kvbound CMD: REASON"; else "kvbound: REASON", as
                               * the kvbound commands have always printed it */
};
void cli_model_init(struct cli_model_opts *mo, const char *cmd, unsigned takes, int default_threads);
/* 1: argv[*i] was a model option (value consumed), 0: not one, -1: bad value (printed). */
int cli_model_option(struct cli_model_opts *mo, int argc, char **argv, int *i);
/* false, after printing "kvbound CMD: -m MODEL is required", when no -m was given. */
bool cli_model_required(const struct cli_model_opts *mo);
struct kvb_model_params cli_model_params(const struct cli_model_opts *mo);
/* Loads mo->path with mo's parameters, and reads its info into *mi unless
 * mi is NULL; -1 (printed, *m NULL) on failure. */
int cli_load_model(const struct cli_model_opts *mo, struct kvb_model **m, struct kvb_model_info *mi);

/* KV row types of every command that builds a cache (policy_opts.c):
 * --kv-dtype T (K and V), --kv-dtype-k T, --kv-dtype-v T; T is f32, f16,
 * bf16, q8_0 or q4_0. */
struct cli_kv_types {
    enum kvb_dtype k, v; /* v: KVB_DTYPE_AS_K unless given */
};
void cli_kv_types_init(struct cli_kv_types *t, enum kvb_dtype def);
/* 1: argv[*i] was one of the flags (value consumed), 0: not one, -1: bad value (printed). */
int cli_kv_types_option(struct cli_kv_types *t, int argc, char **argv, int *i);
void cli_kv_types_help(FILE *f, const char *def);
/* The V rows' type, resolved. */
enum kvb_dtype cli_kv_v(const struct cli_kv_types *t);
/* Bytes of one token's K row and V row in one (layer, KV head). */
size_t cli_kv_head_bytes(const struct kvb_model_info *mi, const struct cli_kv_types *t);

/* Recall options (policy_opts.c): --recall, --recall-pages R,
 * --recall-every N, --cold-mb M, --cold-dir DIR (each implies --recall). */
struct cli_recall {
    bool on;
    int pages, every;
    long long cold_mb;
    const char *cold_dir;
    enum kvb_recall_summary summary;
};
void cli_recall_init(struct cli_recall *r);
/* 1: argv[*i] was a recall option, 0: not one, -1: bad value (printed). */
int cli_recall_option(struct cli_recall *r, int argc, char **argv, int *i);
void cli_recall_help(FILE *f, long long cold_mb_default);
struct kvb_recall_params cli_recall_params(const struct cli_recall *r);
/* One line on stderr: cold tier, recall area, time scoring and loading. */
/* The stats line of a model with sliding-window layers: both kinds' tokens and bytes; n_shared KV-shared layers (Gemma 4) counted apart. */
void cli_window_stats(FILE *f, const struct kvb_cache_stats *s, int32_t n_layer, int32_t n_shared);
void cli_recall_stats(FILE *f, const struct kvb_cache_stats *s);

/* Sampling options shared by run and chat (gen_opts.c), llama.cpp's names
 * and meanings: --temp, --top-k, --top-p, --min-p, --repeat-penalty,
 * --repeat-last-n, -s/--seed (into sp->seed).
 * 1: argv[*i] was one (value consumed), 0: not one, -1: bad value (printed). */
int cli_sampler_option(struct kvb_sampler_params *sp, int argc, char **argv, int *i);
/* Their --help lines, with sp's values as the defaults. */
void cli_sampler_help(FILE *f, const struct kvb_sampler_params *sp);
/* The recent tokens --repeat-penalty looks at: at least the last `window`. */
struct cli_history {
    int32_t *ids;
    int32_t n, cap;
};
void cli_history_init(struct cli_history *h, int32_t window);
void cli_history_push(struct cli_history *h, int32_t id);
void cli_history_free(struct cli_history *h);

/* chat's line editor (lineedit.c): on a terminal, raw mode while a line is
 * typed (arrows, backspace, home/end, Ctrl-A/E/U/K, up/down through this
 * session's lines); otherwise getline. Prints prompt, then reads a line
 * into *line (without its line end; realloc'd, *cap its size). Returns its
 * length; -1 at the end of input (EOF, Ctrl-D or Ctrl-C on an empty line);
 * -2 out of memory. cli_lineedit_free releases the history. */
struct cli_lineedit {
    char **hist;
    int n;
};
ssize_t cli_lineedit_read(struct cli_lineedit *le, const char *prompt, char **line, size_t *cap);
void cli_lineedit_free(struct cli_lineedit *le);

/* The prompt format of chat and tokenize --chat (chat.c): --template NAME
 * when given (a warning when the vocabulary lacks its control tokens), else
 * the model's template as detected, plain when it has none or lacks its
 * tokens (with a warning). false: a bad NAME (printed, naming cmd). */
bool cli_chat_style(const char *cmd, const struct kvb_vocab *vocab, const char *forced, enum kvb_chat_style *style);
/* The system message a conversation without one gets, as the model's
 * template renders it (ChatML templates such as Qwen's), in buf; or NULL. */
const char *cli_chat_default_system(const struct kvb_vocab *vocab, enum kvb_chat_style style, char *buf, size_t cap);

/* Policy options shared by run, chat, ppl, sweep and needle (policy_opts.c).
 * Unset fields are -1 (the policy's default applies). */
struct cli_policy {
    int budget, sinks, recent, history, threshold, obs_window, pool_kernel, decode_budget, prefill_budget;
    int pool_mode, tova_scope, max_distance;
    bool budget_set; /* --budget given (a warning when the policy ignores it) */
    int compress_prompt; /* --compress-prompt uniform|adakv (expected-attention): 1 or 2; 0 unset */
    float heavy_ratio, pyramid_beta, ada_floor;
    enum kvb_pos_mode pos;
};
void cli_policy_init(struct cli_policy *o, int default_budget);
/* 1: argv[*i] was a policy option (value consumed), 0: not one, -1: bad value (printed). */
int cli_policy_option(struct cli_policy *o, int argc, char **argv, int *i);
/* Policy id's defaults with the options applied (budget ignored for full). */
struct kvb_policy_params cli_policy_params(const struct cli_policy *o, enum kvb_policy_id id);
void cli_policy_help(FILE *f, int default_budget);
/* Warnings for options a policy ignores, or a --budget given past the
 * trained length (a command's default budget is not warned about). */
void cli_policy_warn(const struct cli_policy *o, enum kvb_policy_id id, int32_t n_ctx_train);
/* The KV configuration the options give (kvb_kv_params): policy pid with
 * its knobs, positions, --max-distance, the row types and, unless rec is
 * NULL, recall. Block size: the library's default. Pool sizes come from
 * kvb_model_kv_seq_bytes, the library's one sizing rule for the model's
 * caches (its sliding-window layers at their width). */
struct kvb_kv_params cli_kv_params(const struct cli_policy *po, enum kvb_policy_id pid, const struct cli_kv_types *t,
                                   const struct cli_recall *rec);
/* One of the cache options of a command that builds caches: the policy's,
 * the KV types' and, unless rec is NULL, recall's. 1: taken (value
 * consumed), 0: not one, -1: bad value (printed). */
int cli_cache_option(struct cli_policy *po, struct cli_kv_types *kvt, struct cli_recall *rec, int argc, char **argv, int *i);

/* The options run and chat share (gen_opts.c): the model's (-m, -z,
 * --no-mmap, -t, -ngl), --policy NAME with the cache options, sampling,
 * -n/--n-predict N and -c/--ctx-size/--ctx N. */
struct cli_gen_opts {
    struct cli_model_opts mo;
    struct kvb_sampler_params sp;
    enum kvb_policy_id pid;
    struct cli_policy po;
    struct cli_kv_types kvt;
    struct cli_recall rec;
    int n_predict, ctx; /* ctx 0: the model's trained length */
    int keep;           /* --keep N: the pinned span (kvb_kv_params.keep); -1: the command's
                         * whole instruction span (run: the prompt, chat: the system message) */
};
void cli_gen_opts_init(struct cli_gen_opts *g, const char *cmd, enum kvb_policy_id pid, int default_budget, int n_predict);
/* 1: argv[*i] was one of them (value consumed), 0: not one, -1: bad value (printed). */
int cli_gen_option(struct cli_gen_opts *g, int argc, char **argv, int *i);
/* What run and chat generate with: the model, its context, the sampler,
 * the logits and the recent tokens. */
struct cli_gen {
    struct kvb_model *m;
    struct kvb_model_info mi;
    struct kvb_context *c;
    struct kvb_sampler *smp;
    float *logits;
    struct cli_history hist;
};
/* The context parameters of g's options for model mi (the policy's
 * warnings printed): policy, positions, KV types, threads, n_ctx, recall;
 * the caller adds the chunk, the page size and the pool. */
struct kvb_context_params cli_gen_context_params(const struct cli_gen_opts *g, const struct kvb_model_info *mi);
/* The context, the sampler, the logits and the history, for gen->m; -1:
 * printed ("kvbound: REASON"). */
int cli_gen_start(struct cli_gen *gen, const struct kvb_context_params *cp, const struct kvb_sampler_params *sp);
/* Frees all of it, the model too; a zeroed cli_gen is fine. */
void cli_gen_free(struct cli_gen *gen);
/* The --keep line of run's and chat's --help; what_minus_one: what -1 pins. */
void cli_keep_help(FILE *f, const char *what_minus_one);
/* How many of the first keep positions every policy-governed stream of the
 * cache still holds (all keep of them, or as many as were read, when the
 * span is kept): the pinned span as the cache shows it. */
int64_t cli_pinned_kept(const struct kvb_cache *cache, int32_t keep, int64_t n_past);

int cmd_policies(int argc, char **argv);
int cmd_cold(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int bench_model(int argc, char **argv, bool prefill);
int bench_stream(int argc, char **argv);
int bench_tokenize(int argc, char **argv);
int bench_batch(int argc, char **argv);
int bench_serve_memory(int argc, char **argv);
int cmd_lab(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_mem(int argc, char **argv);
int cmd_ppl(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_needle(int argc, char **argv);
int cmd_ruler(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_grammar(int argc, char **argv);       /* grammar.c */
int cmd_grammar_bench(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_logits(int argc, char **argv);

/* Machine read bandwidth in GB/s: all threads of tp stream a buffer of
 * `bytes` with the widest vector loads available; best of `reps`. */
double membw_read_gbs(struct kvb_threadpool *tp, size_t bytes, int reps);
/* The same loads, page by page (page_bytes each) in a fixed shuffled order. */
double membw_page_read_gbs(struct kvb_threadpool *tp, size_t bytes, size_t page_bytes, int reps);
const char *cpu_model_name(char *buf, size_t n);

#endif
