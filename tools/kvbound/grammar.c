/*
 * grammar.c — `kvbound grammar` (JSON Schema to GBNF, and whether a text
 * matches a grammar) and `kvbound grammar-bench` (what the token mask costs
 * on a model's vocabulary, as JSON, beside the model's decode step).
 *
 * The bench walks the grammar at random (a random allowed token at each
 * step, EOG only where the grammar may end, steered to end after --tokens)
 * and times kvb_matcher_mask at every state, split into states inside a JSON
 * string (the worst case: nearly every token passes) and the rest.
 */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int grammar_usage(FILE *f) {
    fprintf(f,
            "usage: kvbound grammar --json-schema FILE [--prefix P]   print the GBNF of a JSON Schema (\"-\": stdin)\n"
            "       kvbound grammar --gbnf FILE [--root NAME] --check TEXTFILE\n"
            "                                 exit 0 when the whole text matches the grammar, 1 when not\n"
            "       kvbound grammar --json-schema FILE --check TEXTFILE   the same against the schema's grammar\n"
            "\n"
            "  --json-schema FILE   a JSON Schema ({} or {\"type\":\"object\"}: any value, any object)\n"
            "  --gbnf FILE          a grammar in llama.cpp's GBNF\n"
            "  --root NAME          the start rule (default root)\n"
            "  --prefix P           prefix of every rule written for a schema\n"
            "  --check FILE         the text to match (its bytes as they are)\n");
    return 0;
}

int cmd_grammar(int argc, char **argv) {
    const char *schema = NULL, *gbnf = NULL, *root = NULL, *prefix = NULL, *check = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return grammar_usage(stdout);
        if (!(v = cli_opt_value("grammar", "--json-schema --gbnf --root --prefix --check", argc, argv, &i))) return 2;
        if (!strcmp(a, "--json-schema")) schema = v;
        else if (!strcmp(a, "--gbnf")) gbnf = v;
        else if (!strcmp(a, "--root")) root = v;
        else if (!strcmp(a, "--prefix")) prefix = v;
        else check = v;
    }
    if (!schema == !gbnf) {
        fprintf(stderr, "kvbound grammar: needs one of --json-schema FILE or --gbnf FILE (see --help)\n");
        return 2;
    }
    size_t len;
    char *text = cli_read_file(schema ? schema : gbnf, (size_t)64 << 20, schema ? "schema" : "grammar", &len);
    if (!text) return 1;
    char *g_text = NULL;
    size_t g_len = 0;
    if (schema) {
        kvb_status st = kvb_json_schema_to_gbnf(text, len, prefix, &g_text, &g_len);
        if (st != KVB_OK) {
            fprintf(stderr, "kvbound grammar: %s\n", kvb_last_error());
            free(text);
            return 1;
        }
        if (!check) {
            fwrite(g_text, 1, g_len, stdout);
            kvb_buffer_free(g_text);
            free(text);
            return 0;
        }
    }
    char root_buf[64];
    if (schema) {
        snprintf(root_buf, sizeof root_buf, "%sroot", prefix ? prefix : "");
        root = root_buf;
    }
    struct kvb_grammar *g;
    kvb_status st = schema ? kvb_grammar_parse(g_text, g_len, root, &g) : kvb_grammar_parse(text, len, root, &g);
    kvb_buffer_free(g_text);
    free(text);
    if (st != KVB_OK) {
        fprintf(stderr, "kvbound grammar: %s\n", kvb_last_error());
        return 1;
    }
    if (!check) {
        printf("grammar ok\n");
        kvb_grammar_free(g);
        return 0;
    }
    size_t tlen;
    char *t = cli_read_file(check, (size_t)256 << 20, "text", &tlen);
    struct kvb_matcher *m = NULL;
    int rc = 1;
    if (t && kvb_matcher_new(g, NULL, &m) == KVB_OK) {
        size_t ok = 0; /* the longest prefix taken, byte by byte */
        while (ok < tlen && kvb_matcher_accept_bytes(m, t + ok, 1) == KVB_OK) ok++;
        if (ok == tlen && kvb_matcher_can_end(m)) {
            printf("match\n");
            rc = 0;
        } else if (ok == tlen) printf("no match: the text ends before the grammar does\n");
        else printf("no match: refused at byte %zu\n", ok);
    } else if (t) fprintf(stderr, "kvbound grammar: %s\n", kvb_last_error());
    kvb_matcher_free(m);
    kvb_grammar_free(g);
    free(t);
    return rc;
}

/* ---- grammar-bench ---- */

static int bench_usage(FILE *f) {
    fprintf(f,
            "usage: kvbound grammar-bench -m MODEL [--schema FILE] [--tokens N] [--walks N] [--seed S] [-t THREADS] [--no-decode]\n"
            "\n"
            "Times the grammar's token mask (kvb_matcher_mask) over the model's whole vocabulary at the states of\n"
            "random walks constrained by a JSON Schema, and prints JSON: median and p90 mask time in microseconds\n"
            "inside JSON strings and at the other (structural) states, the first mask of a fresh matcher, a mask inside\n"
            "a string with empty caches (string_mask_cold_us: after a cache rebuild), and the\n"
            "model's decode step (ms) for comparison.\n"
            "\n"
            "  -m FILE        GGUF model (or vocabulary-only GGUF with --no-decode)\n"
            "  --schema FILE  JSON Schema (default: a built-in object with strings, numbers, an array, an enum)\n"
            "  --tokens N     tokens per walk before it is steered to the end (default 200)\n"
            "  --walks N      walks (default 5)\n"
            "  --seed S       random seed (default 1)\n"
            "  -t N           threads of the decode step (default 2)\n"
            "  --no-decode    do not time a decode step (vocabulary only)\n");
    return 0;
}

static const char k_default_schema[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"email\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"
    "\"score\":{\"type\":\"number\"},\"role\":{\"enum\":[\"admin\",\"user\",\"guest\"]},\"bio\":{\"type\":\"string\"}},"
    "\"required\":[\"name\",\"age\",\"tags\",\"bio\"]}";

static double pct(double *v, int n, double q) {
    if (!n) return NAN;
    qsort(v, (size_t)n, sizeof *v, cli_cmp_double);
    int k = (int)(q * (n - 1) + 0.5);
    return v[k];
}

/* Whether the text so far is inside a JSON string (quotes not escaped). */
static bool in_string(const char *t, size_t n) {
    bool in = false, esc = false;
    for (size_t i = 0; i < n; i++) {
        if (esc) esc = false;
        else if (in && t[i] == '\\') esc = true;
        else if (t[i] == '"') in = !in;
    }
    return in;
}

/* One benchmark run: options, what it loaded, and the timings it gathers. */
struct gbench {
    const char *model_path, *schema_path;
    int tokens, walks, threads;
    long long seed;
    bool decode;
    struct kvb_model *model;
    struct kvb_vocab *vocab_own;
    const struct kvb_vocab *vocab;
    char *gtext;
    size_t glen;
    struct kvb_grammar *g;
    struct kvb_grammar_vocab *gv;
    double t_compile, t_vocab, decode_ms;
    int32_t nv;
    float *logits, *logits2;
    int32_t *allowed;
    double *t_str, *t_other, *t_first, *t_cold;
    int n_str, n_other, n_first, n_cold, complete;
    long long allowed_str, allowed_other;
    uint64_t rng;
    char *text;
};

/* CLI_GO_ON, or the exit status */
static int gbench_args(struct gbench *b, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return bench_usage(stdout);
        if (!strcmp(a, "--no-decode")) { b->decode = false; continue; }
        if (!(v = cli_opt_value("grammar-bench", "-m --schema --tokens --walks --seed -t", argc, argv, &i))) return 2;
        if (!strcmp(a, "-m")) b->model_path = v;
        else if (!strcmp(a, "--schema")) b->schema_path = v;
        else if (!strcmp(a, "--tokens")) { if (cli_parse_i32(a, v, 1, 100000, &b->tokens)) return 2; }
        else if (!strcmp(a, "--walks")) { if (cli_parse_i32(a, v, 1, 10000, &b->walks)) return 2; }
        else if (!strcmp(a, "--seed")) { if (cli_parse_i64(a, v, 0, (long long)1 << 62, &b->seed)) return 2; }
        else if (cli_parse_i32(a, v, 1, 256, &b->threads)) return 2;
    }
    if (!b->model_path) { fprintf(stderr, "kvbound grammar-bench: needs -m MODEL (see --help)\n"); return 2; }
    return CLI_GO_ON;
}

/* Loads the model (or vocabulary), compiles the schema and the vocabulary's trie. 0, or 1 (printed). */
static int gbench_setup(struct gbench *b) {
    char *schema = NULL;
    size_t slen = 0;
    if (b->schema_path && !(schema = cli_read_file(b->schema_path, (size_t)16 << 20, "schema", &slen))) return 1;
    kvb_status st;
    if (b->decode) {
        struct kvb_model_params mp = kvb_model_default_params();
        st = kvb_model_load(b->model_path, &mp, &b->model);
        b->vocab = b->model ? kvb_model_vocab(b->model) : NULL;
    } else {
        st = kvb_vocab_load(b->model_path, &b->vocab_own);
        b->vocab = b->vocab_own;
    }
    double t0 = cli_now_sec();
    if (st == KVB_OK)
        st = kvb_json_schema_to_gbnf(schema ? schema : k_default_schema, schema ? slen : strlen(k_default_schema), NULL, &b->gtext, &b->glen);
    if (st == KVB_OK) st = kvb_grammar_parse(b->gtext, b->glen, NULL, &b->g);
    b->t_compile = cli_now_sec() - t0;
    t0 = cli_now_sec();
    if (st == KVB_OK) st = kvb_grammar_vocab_new(b->vocab, &b->gv);
    b->t_vocab = cli_now_sec() - t0;
    free(schema);
    if (st != KVB_OK) { fprintf(stderr, "kvbound grammar-bench: %s\n", kvb_last_error()); return 1; }
    b->nv = kvb_vocab_size(b->vocab);
    b->logits = cli_xmalloc(sizeof(float) * (size_t)b->nv * 2, "logits");
    b->logits2 = b->logits + b->nv;
    b->allowed = cli_xmalloc(sizeof(int32_t) * (size_t)b->nv, "allowed tokens");
    size_t cap = (size_t)b->walks * ((size_t)b->tokens + 64) * 2 + 64;
    b->t_str = cli_xmalloc(sizeof(double) * (cap * 2 + (size_t)b->walks * 2), "timings");
    b->t_other = b->t_str + cap;
    b->t_first = b->t_other + cap;
    b->t_cold = b->t_first + b->walks;
    b->text = cli_xmalloc(((size_t)b->tokens + 64) * 2 * 256 + 1, "text");
    b->rng = (uint64_t)b->seed * 0x9E3779B97F4A7C15ULL + 1;
    return 0;
}

static uint64_t gbench_rand(struct gbench *b) {
    b->rng += 0x9E3779B97F4A7C15ULL;
    uint64_t z = b->rng;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* The next token of a walk among b->allowed[0..n_ok): random, then (past --tokens) EOG, else the shortest
 * token, closing ones first. */
static int32_t gbench_pick(struct gbench *b, int32_t n_ok, int step) {
    if (step < b->tokens) return b->allowed[gbench_rand(b) % (uint64_t)n_ok];
    int32_t best = b->allowed[0];
    size_t best_n = (size_t)-1;
    for (int32_t k = 0; k < n_ok; k++) {
        char t[64];
        size_t bn = kvb_vocab_token_bytes(b->vocab, b->allowed[k], false, t, sizeof t);
        if (bn == 0) return b->allowed[k]; /* end of generation */
        const char last = t[(bn < sizeof t ? bn : sizeof t) - 1];
        size_t score = bn + ((last == '"' || last == '}' || last == ']') ? 0 : 4);
        if (score < best_n) { best_n = score; best = b->allowed[k]; }
    }
    return best;
}

/* Times the mask at state `step` of walk w (and once per walk on a clone with empty caches). */
static int gbench_mask(struct gbench *b, struct kvb_matcher *m, int w, int step, size_t tn, int32_t *n_ok) {
    for (int32_t i = 0; i < b->nv; i++) b->logits[i] = 0;
    bool str = in_string(b->text, tn);
    double a = cli_now_sec();
    if (kvb_matcher_mask(m, b->logits) != KVB_OK) return 1;
    double dt = (cli_now_sec() - a) * 1e6;
    *n_ok = 0;
    for (int32_t i = 0; i < b->nv; i++)
        if (b->logits[i] != -INFINITY) b->allowed[(*n_ok)++] = i;
    struct kvb_matcher *c;
    if (str && *n_ok > b->nv / 2 && b->n_cold <= w && kvb_matcher_clone(m, &c) == KVB_OK) {
        double c0 = cli_now_sec();
        if (kvb_matcher_mask(c, b->logits2) == KVB_OK) b->t_cold[b->n_cold++] = (cli_now_sec() - c0) * 1e6;
        kvb_matcher_free(c);
    }
    if (step == 0) b->t_first[b->n_first++] = dt;
    else if (str) { b->t_str[b->n_str++] = dt; b->allowed_str += *n_ok; }
    else { b->t_other[b->n_other++] = dt; b->allowed_other += *n_ok; }
    return 0;
}

static int gbench_walk(struct gbench *b, int w) {
    struct kvb_matcher *m;
    if (kvb_matcher_new(b->g, b->gv, &m) != KVB_OK) return 1;
    size_t tn = 0;
    int rc = 0;
    for (int step = 0; step < 2 * b->tokens + 64 && !rc; step++) {
        int32_t n_ok;
        if ((rc = gbench_mask(b, m, w, step, tn, &n_ok)) || !n_ok) break;
        int32_t pick = gbench_pick(b, n_ok, step);
        char t[256];
        size_t bn = kvb_vocab_token_bytes(b->vocab, pick, false, t, sizeof t);
        if (kvb_matcher_accept(m, pick) != KVB_OK) rc = 1;
        if (bn <= sizeof t) { memcpy(b->text + tn, t, bn); tn += bn; }
        if (kvb_matcher_must_end(m)) { b->complete++; break; }
    }
    kvb_matcher_free(m);
    return rc;
}

/* The model's decode step (median of 6 after 2 warm-up steps), NAN when it cannot run. */
static double gbench_decode(const struct gbench *b) {
    struct kvb_context_params cp = kvb_context_default_params();
    cp.n_threads = b->threads;
    struct kvb_context *ctx;
    if (kvb_context_init(b->model, &cp, &ctx) != KVB_OK) return NAN;
    float *lg = cli_xmalloc(sizeof(float) * (size_t)b->nv, "logits");
    int32_t tok = 1;
    double ts[8];
    int n = 0;
    for (int i = 0; i < 8; i++) {
        double a = cli_now_sec();
        if (kvb_context_eval(ctx, &tok, 1, lg, false) != KVB_OK) break;
        ts[n++] = (cli_now_sec() - a) * 1e3;
    }
    free(lg);
    kvb_context_free(ctx);
    return n > 2 ? pct(ts + 2, n - 2, 0.5) : NAN;
}

static void gbench_print(struct gbench *b) {
    printf("{\n  \"model\": \"%s\",\n  \"n_vocab\": %d,\n  \"schema\": \"%s\",\n  \"grammar_bytes\": %zu,\n", b->model_path, (int)b->nv,
           b->schema_path ? b->schema_path : "built-in", b->glen);
    printf("  \"compile_ms\": %.3f,\n  \"vocab_trie_ms\": %.3f,\n  \"walks\": %d,\n  \"walks_complete\": %d,\n", b->t_compile * 1e3,
           b->t_vocab * 1e3, b->walks, b->complete);
    printf("  \"first_mask_us\": %.1f,\n  \"string_mask_cold_us_median\": %.1f,\n", pct(b->t_first, b->n_first, 0.5), pct(b->t_cold, b->n_cold, 0.5));
    printf("  \"string_states\": %d,\n  \"string_mask_us_median\": %.1f,\n  \"string_mask_us_p90\": %.1f,\n  \"string_allowed_mean\": %.0f,\n",
           b->n_str, pct(b->t_str, b->n_str, 0.5), pct(b->t_str, b->n_str, 0.9), b->n_str ? (double)b->allowed_str / b->n_str : 0.0);
    printf("  \"structural_states\": %d,\n  \"structural_mask_us_median\": %.1f,\n  \"structural_mask_us_p90\": %.1f,\n"
           "  \"structural_allowed_mean\": %.0f,\n",
           b->n_other, pct(b->t_other, b->n_other, 0.5), pct(b->t_other, b->n_other, 0.9),
           b->n_other ? (double)b->allowed_other / b->n_other : 0.0);
    if (b->decode_ms == b->decode_ms) printf("  \"decode_step_ms\": %.2f,\n  \"decode_threads\": %d\n}\n", b->decode_ms, b->threads);
    else printf("  \"decode_step_ms\": null\n}\n");
}

int cmd_grammar_bench(int argc, char **argv) {
    struct gbench b = {.tokens = 200, .walks = 5, .threads = 2, .seed = 1, .decode = true, .decode_ms = NAN};
    int rc = gbench_args(&b, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    rc = gbench_setup(&b);
    for (int w = 0; w < b.walks && !rc; w++)
        if ((rc = gbench_walk(&b, w))) fprintf(stderr, "kvbound grammar-bench: %s\n", kvb_last_error());
    if (!rc && b.decode) b.decode_ms = gbench_decode(&b);
    if (!rc) gbench_print(&b);
    free(b.text);
    free(b.t_str);
    free(b.allowed);
    free(b.logits);
    kvb_grammar_vocab_free(b.gv);
    kvb_grammar_free(b.g);
    kvb_buffer_free(b.gtext);
    kvb_model_free(b.model);
    kvb_vocab_free(b.vocab_own);
    return rc;
}
