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
            "inside JSON strings and at the other (structural) states, the first mask of a fresh matcher, and the\n"
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

int cmd_grammar_bench(int argc, char **argv) {
    const char *model_path = NULL, *schema_path = NULL;
    int tokens = 200, walks = 5, threads = 2;
    long long seed = 1;
    bool decode = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return bench_usage(stdout);
        if (!strcmp(a, "--no-decode")) { decode = false; continue; }
        if (!(v = cli_opt_value("grammar-bench", "-m --schema --tokens --walks --seed -t", argc, argv, &i))) return 2;
        if (!strcmp(a, "-m")) model_path = v;
        else if (!strcmp(a, "--schema")) schema_path = v;
        else if (!strcmp(a, "--tokens")) { if (cli_parse_i32(a, v, 1, 100000, &tokens)) return 2; }
        else if (!strcmp(a, "--walks")) { if (cli_parse_i32(a, v, 1, 10000, &walks)) return 2; }
        else if (!strcmp(a, "--seed")) { if (cli_parse_i64(a, v, 0, (long long)1 << 62, &seed)) return 2; }
        else if (cli_parse_i32(a, v, 1, 256, &threads)) return 2;
    }
    if (!model_path) { fprintf(stderr, "kvbound grammar-bench: needs -m MODEL (see --help)\n"); return 2; }
    char *schema = NULL;
    size_t slen = 0;
    if (schema_path && !(schema = cli_read_file(schema_path, (size_t)16 << 20, "schema", &slen))) return 1;
    struct kvb_model *model = NULL;
    struct kvb_vocab *vocab_own = NULL;
    const struct kvb_vocab *vocab;
    kvb_status st;
    if (decode) {
        struct kvb_model_params mp = kvb_model_default_params();
        st = kvb_model_load(model_path, &mp, &model);
        vocab = model ? kvb_model_vocab(model) : NULL;
    } else {
        st = kvb_vocab_load(model_path, &vocab_own);
        vocab = vocab_own;
    }
    if (st != KVB_OK) { fprintf(stderr, "kvbound grammar-bench: %s\n", kvb_last_error()); free(schema); return 1; }
    char *gtext = NULL;
    size_t glen = 0;
    struct kvb_grammar *g = NULL;
    struct kvb_grammar_vocab *gv = NULL;
    double t0 = cli_now_sec();
    st = kvb_json_schema_to_gbnf(schema ? schema : k_default_schema, schema ? slen : strlen(k_default_schema), NULL, &gtext, &glen);
    if (st == KVB_OK) st = kvb_grammar_parse(gtext, glen, NULL, &g);
    double t_compile = cli_now_sec() - t0;
    t0 = cli_now_sec();
    if (st == KVB_OK) st = kvb_grammar_vocab_new(vocab, &gv);
    double t_vocab = cli_now_sec() - t0;
    if (st != KVB_OK) {
        fprintf(stderr, "kvbound grammar-bench: %s\n", kvb_last_error());
        kvb_buffer_free(gtext);
        kvb_grammar_free(g);
        kvb_model_free(model);
        kvb_vocab_free(vocab_own);
        free(schema);
        return 1;
    }
    const int32_t nv = kvb_vocab_size(vocab);
    float *logits = cli_xmalloc(sizeof(float) * (size_t)nv, "logits");
    int32_t *allowed = cli_xmalloc(sizeof(int32_t) * (size_t)nv, "allowed tokens");
    int cap_s = walks * (tokens + 64) * 2 + 64;
    double *t_str = cli_xmalloc(sizeof(double) * (size_t)cap_s, "timings"), *t_other = cli_xmalloc(sizeof(double) * (size_t)cap_s, "timings");
    double *t_first = cli_xmalloc(sizeof(double) * (size_t)walks, "timings");
    int n_str = 0, n_other = 0, n_first = 0, complete = 0;
    long long allowed_str = 0, allowed_other = 0;
    uint64_t rng = (uint64_t)seed * 0x9E3779B97F4A7C15ULL + 1;
    char *text = cli_xmalloc((size_t)(tokens + 64) * 2 * 256 + 1, "text");
    int rc = 0;
    for (int w = 0; w < walks && !rc; w++) {
        struct kvb_matcher *m;
        if (kvb_matcher_new(g, gv, &m) != KVB_OK) { fprintf(stderr, "kvbound grammar-bench: %s\n", kvb_last_error()); rc = 1; break; }
        size_t tn = 0;
        for (int step = 0; step < 2 * tokens + 64; step++) {
            for (int32_t i = 0; i < nv; i++) logits[i] = 0;
            bool str = in_string(text, tn);
            double a = cli_now_sec();
            if (kvb_matcher_mask(m, logits) != KVB_OK) { fprintf(stderr, "kvbound grammar-bench: %s\n", kvb_last_error()); rc = 1; break; }
            double dt = (cli_now_sec() - a) * 1e6;
            int32_t n_ok = 0, eog = -1;
            for (int32_t i = 0; i < nv; i++)
                if (logits[i] != -INFINITY) allowed[n_ok++] = i;
            if (step == 0) t_first[n_first++] = dt;
            else if (str) { t_str[n_str++] = dt; allowed_str += n_ok; }
            else { t_other[n_other++] = dt; allowed_other += n_ok; }
            if (!n_ok) break;
            /* pick: past the budget prefer EOG, then tokens that close (short ones) */
            for (int32_t k = 0; k < n_ok; k++) {
                char b[8];
                if (kvb_vocab_token_bytes(vocab, allowed[k], false, b, sizeof b) == 0) { eog = allowed[k]; break; }
            }
            int32_t pick;
            if (eog >= 0 && step >= tokens) pick = eog;
            else if (step >= tokens) {
                /* the allowed token of fewest bytes that is a closing character, else any of the fewest bytes */
                int32_t best = allowed[0];
                size_t best_n = (size_t)-1;
                for (int32_t k = 0; k < n_ok; k++) {
                    char b[64];
                    size_t bn = kvb_vocab_token_bytes(vocab, allowed[k], false, b, sizeof b);
                    size_t score = bn + ((bn && (b[bn - 1] == '"' || b[bn - 1] == '}' || b[bn - 1] == ']')) ? 0 : 4);
                    if (score < best_n) { best_n = score; best = allowed[k]; }
                }
                pick = best;
            } else {
                rng += 0x9E3779B97F4A7C15ULL;
                uint64_t z = rng;
                z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
                z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
                pick = allowed[(z ^ (z >> 31)) % (uint64_t)n_ok];
            }
            char b[256];
            size_t bn = kvb_vocab_token_bytes(vocab, pick, false, b, sizeof b);
            if (kvb_matcher_accept(m, pick) != KVB_OK) { fprintf(stderr, "kvbound grammar-bench: %s\n", kvb_last_error()); rc = 1; break; }
            if (bn <= sizeof b) { memcpy(text + tn, b, bn); tn += bn; }
            if (kvb_matcher_must_end(m)) { complete++; break; }
        }
        kvb_matcher_free(m);
    }
    double decode_ms = NAN;
    if (!rc && decode) {
        struct kvb_context_params cp = kvb_context_default_params();
        cp.n_threads = threads;
        struct kvb_context *ctx;
        if (kvb_context_init(model, &cp, &ctx) == KVB_OK) {
            float *lg = cli_xmalloc(sizeof(float) * (size_t)nv, "logits");
            int32_t tok = 1;
            double ts[8];
            for (int i = 0; i < 8; i++) {
                double a = cli_now_sec();
                if (kvb_context_eval(ctx, &tok, 1, lg, false) != KVB_OK) break;
                ts[i] = (cli_now_sec() - a) * 1e3;
            }
            decode_ms = pct(ts + 2, 6, 0.5);
            free(lg);
            kvb_context_free(ctx);
        }
    }
    if (!rc) {
        double med_s = pct(t_str, n_str, 0.5), p90_s = pct(t_str, n_str, 0.9), med_o = pct(t_other, n_other, 0.5), p90_o = pct(t_other, n_other, 0.9);
        printf("{\n  \"model\": \"%s\",\n  \"n_vocab\": %d,\n  \"schema\": \"%s\",\n  \"grammar_bytes\": %zu,\n", model_path, (int)nv,
               schema_path ? schema_path : "built-in", glen);
        printf("  \"compile_ms\": %.3f,\n  \"vocab_trie_ms\": %.3f,\n  \"walks\": %d,\n  \"walks_complete\": %d,\n", t_compile * 1e3, t_vocab * 1e3,
               walks, complete);
        printf("  \"first_mask_us\": %.1f,\n", pct(t_first, n_first, 0.5));
        printf("  \"string_states\": %d,\n  \"string_mask_us_median\": %.1f,\n  \"string_mask_us_p90\": %.1f,\n  \"string_allowed_mean\": %.0f,\n", n_str,
               med_s, p90_s, n_str ? (double)allowed_str / n_str : 0.0);
        printf("  \"structural_states\": %d,\n  \"structural_mask_us_median\": %.1f,\n  \"structural_mask_us_p90\": %.1f,\n  \"structural_allowed_mean\": %.0f,\n",
               n_other, med_o, p90_o, n_other ? (double)allowed_other / n_other : 0.0);
        if (decode_ms == decode_ms) printf("  \"decode_step_ms\": %.2f,\n  \"decode_threads\": %d\n}\n", decode_ms, threads);
        else printf("  \"decode_step_ms\": null\n}\n");
    }
    free(text);
    free(t_str);
    free(t_other);
    free(t_first);
    free(allowed);
    free(logits);
    kvb_grammar_vocab_free(gv);
    kvb_grammar_free(g);
    kvb_buffer_free(gtext);
    kvb_model_free(model);
    kvb_vocab_free(vocab_own);
    free(schema);
    return rc;
}
