/*
 * logits.c — `kvbound logits`: the logits of given token ids, every
 * position's, written raw (float32, [n_tokens][n_vocab]) to compare with
 * another engine on the same file and ids (bench/compare_llama_logits.sh does
 * it against llama.cpp). The prompt mode reads the ids as one prompt with
 * every row's logits; the decode mode feeds them one step at a time. Policy
 * full: the comparison is of the model, not of eviction.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

struct logits_opts {
    struct cli_model_opts mo;
    struct cli_kv_types kvt;
    const char *tokens, *out;
    bool decode;
    int n_ctx;
};

/* "1,2,3" into ids (at most cap); -1: printed. */
static int parse_ids(const char *s, int32_t *ids, int cap, int32_t n_vocab) {
    int n = 0;
    for (const char *p = s; *p;) {
        while (*p == ',' || *p == ' ') p++;
        if (!*p) break;
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= n_vocab || n == cap) {
            fprintf(stderr, "kvbound logits: --tokens: '%.20s' is not an id in 0..%d (at most %d ids)\n", p, (int)n_vocab - 1, cap);
            return -1;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    if (!n) fprintf(stderr, "kvbound logits: --tokens gives no ids\n");
    return n ? n : -1;
}

static int logits_parse(struct logits_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    cli_model_init(&o->mo, "logits", CLI_MODEL_THREADS | CLI_MODEL_NO_MMAP, 1);
    cli_kv_types_init(&o->kvt, KVB_DTYPE_F32);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: kvbound logits -m MODEL --tokens ID,ID,... -o OUT.bin [--mode prompt|decode] [-c N] [--kv-dtype T] [-t N]\n\n"
                   "Writes the logits after every id as float32 [n_tokens][n_vocab] to OUT.bin and one JSON line\n"
                   "(n_tokens, n_vocab, arch, mode) to stdout: the model under policy full, to compare with\n"
                   "another engine on the same ids. --mode prompt (default): one prompt, every row's logits;\n"
                   "decode: one id per step. -c: the context (default the trained length; LongRoPE picks its\n"
                   "factors by it, rounded up to a multiple of 256 as llama.cpp does). KV rows f32 unless --kv-dtype.\n");
            cli_kv_types_help(stdout, "f32");
            return 0;
        }
        int r = cli_model_option(&o->mo, argc, argv, &i);
        if (r == 0) r = cli_kv_types_option(&o->kvt, argc, argv, &i);
        if (r < 0) return 2;
        if (r) continue;
        if (!(v = cli_opt_value("logits", "--tokens --mode -o --out -c --ctx", argc, argv, &i))) return 2;
        if (!strcmp(a, "--tokens")) o->tokens = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) { if (cli_parse_i32(a, v, 1, 1 << 30, &o->n_ctx)) return 2; }
        else if (!strcmp(v, "prompt") || !strcmp(v, "decode")) o->decode = !strcmp(v, "decode");
        else { fprintf(stderr, "kvbound logits: --mode: '%s' is not prompt or decode\n", v); return 2; }
    }
    if (!cli_model_required(&o->mo)) return 2;
    if (!o->tokens || !o->out) { fprintf(stderr, "kvbound logits: --tokens and -o are required\n"); return 2; }
    return cli_check_output_file("logits", "-o", o->out) ? 1 : CLI_GO_ON;
}

int cmd_logits(int argc, char **argv) {
    struct logits_opts o;
    int rc = logits_parse(&o, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    struct kvb_model *m;
    struct kvb_model_info mi;
    if (cli_load_model(&o.mo, &m, &mi)) return 1;
    enum { CAP = 8192 };
    int32_t *ids = cli_xmalloc(sizeof(int32_t) * CAP, "ids");
    const int n = parse_ids(o.tokens, ids, CAP, mi.n_vocab);
    float *lg = n > 0 ? cli_xmalloc(sizeof(float) * (size_t)n * (size_t)mi.n_vocab, "logits") : NULL;
    struct kvb_context_params cp = kvb_context_default_params();
    cp.kv.kv_dtype = o.kvt.k;
    cp.kv.kv_dtype_v = o.kvt.v;
    cp.n_threads = o.mo.threads;
    cp.n_ctx = o.n_ctx ? o.n_ctx : mi.n_ctx_train;
    cp.chunk = n > 0 && n <= 8192 ? n : 256;
    cp.kv_pool_bytes = kvb_model_kv_seq_bytes(m, &cp.kv, n, n, cp.chunk);
    struct kvb_context *c = NULL;
    kvb_status st = n < 0 ? KVB_ERR_INVALID : kvb_context_init(m, &cp, &c);
    if (st == KVB_OK && !o.decode) st = kvb_context_eval(c, ids, n, lg, true);
    for (int t = 0; st == KVB_OK && o.decode && t < n; t++) st = kvb_context_eval(c, &ids[t], 1, lg + (size_t)t * mi.n_vocab, false);
    FILE *f = st == KVB_OK ? fopen(o.out, "wb") : NULL;
    rc = n < 0 ? 2 : 1;
    if (st != KVB_OK && n > 0) fprintf(stderr, "kvbound: %s\n", kvb_last_error());
    else if (f && fwrite(lg, sizeof(float) * (size_t)mi.n_vocab, (size_t)n, f) == (size_t)n && fclose(f) == 0) {
        f = NULL;
        printf("{\"n_tokens\":%d,\"n_vocab\":%d,\"arch\":\"%s\",\"mode\":\"%s\"}\n", n, (int)mi.n_vocab, mi.arch, o.decode ? "decode" : "prompt");
        rc = 0;
    } else if (st == KVB_OK) fprintf(stderr, "kvbound logits: cannot write '%s'\n", o.out);
    if (f) fclose(f);
    kvb_context_free(c);
    free(lg);
    free(ids);
    kvb_model_free(m);
    return rc;
}
