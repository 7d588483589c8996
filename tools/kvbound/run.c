/*
 * run.c — `kvbound run`: generate from a GGUF or llama2.c model with any
 * cache policy. stdout carries exactly the prompt followed by the generated
 * text, streamed (UTF-8 held back until a character is complete); a stats
 * line goes to stderr. With a bounded policy generation never stops because
 * the context is full; with `full` it stops at the context limit.
 * cmd_run: the options (run_parse, the shared ones by cli_gen_option), the
 * prompt, model and context (run_setup), generation (run_generate), the
 * stats line (run_report); struct run holds it all and run_free releases it.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static void run_usage(FILE *f, const struct kvb_sampler_params *sp) {
    fprintf(f,
            "usage: kvbound run -m MODEL [-z TOKENIZER.bin] (-p PROMPT | -f PROMPT_FILE) [-n N] [options]\n"
            "\n"
            "  -m, --model FILE      GGUF model (llama, qwen2) or llama2.c checkpoint (.bin)\n"
            "  -z, --tokenizer FILE  llama2.c tokenizer.bin (for .bin checkpoints)\n"
            "  -p, --prompt TEXT     prompt text\n"
            "  -f, --file FILE       read the prompt from a file (- = standard input), less one trailing\n"
            "                        newline, as llama.cpp\n"
            "  -n, --n-predict N     tokens to generate (default 128; -1 = until end-of-sequence or the\n"
            "                        context limit, as llama.cpp)\n");
    cli_sampler_help(f, sp);
    fprintf(f,
            "  --policy NAME         cache policy (default full; see 'kvbound policies')\n"
            "  --block-size B        tokens per cache page (default 16)\n"
            "  -c, --ctx-size N      context limit for the full policy (default: the model's trained length; also --ctx)\n"
            "  -b, --batch-size C    prefill chunk (default 256; also --chunk)\n"
            "  -ngl N                accepted for llama.cpp's command lines; kvbound runs on the CPU (no offload)\n"
            "  --ignore-eos          keep generating after end-of-sequence / end-of-turn\n"
            "  --grammar-file FILE   constrain the text to a GBNF grammar (llama.cpp's)\n"
            "  -j, --json-schema SCHEMA  constrain the text to JSON valid under a JSON Schema (text)\n"
            "  -jf, --json-schema-file FILE  the same, the schema read from FILE\n"
            "                        (with a grammar the stats line adds the time spent masking)\n"
            "  -t, --threads N       threads (default 2)\n"
            CLI_NO_MMAP_HELP
            "\n");
    cli_keep_help(f, "the whole prompt, as llama.cpp's --keep -1");
    cli_kv_types_help(f, "f16");
    cli_recall_help(f, 1024);
    cli_policy_help(f, 256);
}

struct run_opts {
    struct cli_gen_opts g; /* -m -z --no-mmap -t -ngl, --policy and the cache options, sampling, -n, -c */
    const char *prompt, *pfile;
    int block, chunk;
    bool ignore_eos;
    const char *grammar_file, *json_schema, *json_schema_file;
};

/* What a run holds (run_free releases it) and what its stats line reports. */
struct run {
    struct cli_gen gen;
    char *pbuf; /* the prompt read with -f */
    const char *prompt;
    size_t plen;
    int32_t *ids, n_ids;       /* the prompt's tokens */
    struct kvb_cache_stats ps; /* after the prompt (compressed, for the snapkv family) */
    double t0, t1, t2;         /* start, prompt read, generation done */
    int generated, rc;
    const char *stop; /* what ended generation */
    struct kvb_grammar *grammar;   /* --grammar-file, --json-schema */
    struct kvb_grammar_vocab *gv;
    struct kvb_matcher *matcher;
    double mask_s;                 /* time in the grammar's checks and masks */
    int masks;                     /* steps that masked the vocabulary */
};

static int run_parse(struct run_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    cli_gen_opts_init(&o->g, "run", KVB_POLICY_FULL, 256, 128);
    o->block = 16;
    o->chunk = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { run_usage(stdout, &o->g.sp); return 0; }
        if (!strcmp(a, "--ignore-eos")) { o->ignore_eos = true; continue; }
        const int r = cli_gen_option(&o->g, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!(v = cli_opt_value("run", "-p --prompt -f --file --block-size --chunk -b --batch-size --grammar-file -j --json-schema -jf --json-schema-file",
                                argc, argv, &i)))
            return 2;
        if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) o->prompt = v;
        else if (!strcmp(a, "--grammar-file")) o->grammar_file = v;
        else if (!strcmp(a, "-j") || !strcmp(a, "--json-schema")) o->json_schema = v;
        else if (!strcmp(a, "-jf") || !strcmp(a, "--json-schema-file")) o->json_schema_file = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) o->pfile = v;
        else if (!strcmp(a, "--block-size")) { if (cli_parse_i32(a, v, 1, 4096, &o->block)) return 2; }
        else if (cli_parse_i32(a, v, 1, 8192, &o->chunk)) return 2; /* --chunk, -b, --batch-size */
    }
    if (!cli_model_required(&o->g.mo)) return 2;
    if (!o->prompt && !o->pfile) { fprintf(stderr, "kvbound run: give a prompt with -p or -f\n"); return 2; }
    if (o->prompt && o->pfile) { fprintf(stderr, "kvbound run: give the prompt with -p or with -f, not both\n"); return 2; }
    if (!!o->grammar_file + !!o->json_schema + !!o->json_schema_file > 1) {
        fprintf(stderr, "kvbound run: give one of --grammar-file, --json-schema and --json-schema-file\n");
        return 2;
    }
    return CLI_GO_ON;
}

/* The grammar of --grammar-file / --json-schema(-file), if any: 0, or 1 (printed). */
static int run_grammar(const struct run_opts *o, struct run *r) {
    if (!o->grammar_file && !o->json_schema && !o->json_schema_file) return 0;
    size_t len = 0;
    char *text = NULL, *gbnf = NULL;
    const char *what = o->grammar_file ? o->grammar_file : o->json_schema_file ? o->json_schema_file : "--json-schema";
    if (o->grammar_file || o->json_schema_file) {
        text = cli_read_file(o->grammar_file ? o->grammar_file : o->json_schema_file, (size_t)16 << 20, what, &len);
        if (!text) return 1;
    }
    kvb_status st = KVB_OK;
    if (!o->grammar_file) {
        const char *schema = text ? text : o->json_schema;
        st = kvb_json_schema_to_gbnf(schema, strlen(schema), NULL, &gbnf, &len);
    }
    if (st == KVB_OK) st = kvb_grammar_parse(gbnf ? gbnf : text, gbnf ? len : strlen(text), NULL, &r->grammar);
    kvb_buffer_free(gbnf);
    free(text);
    if (st == KVB_OK) st = kvb_grammar_vocab_new(kvb_model_vocab(r->gen.m), &r->gv);
    if (st == KVB_OK) st = kvb_matcher_new(r->grammar, r->gv, &r->matcher);
    if (st != KVB_OK) {
        fprintf(stderr, "kvbound run: %s: %s\n", what, kvb_last_error());
        return 1;
    }
    return 0;
}

/* The prompt, the model, the prompt's tokens and the context: CLI_GO_ON, or 1 (printed). */
static int run_setup(const struct run_opts *o, struct run *r) {
    cli_warn_threads(o->g.mo.threads);
    if (o->pfile) {
        if (!(r->pbuf = cli_read_prompt_file(o->pfile, &r->plen))) return 1;
        r->prompt = r->pbuf;
    } else {
        r->prompt = o->prompt;
        r->plen = strlen(o->prompt);
    }
    struct cli_gen *g = &r->gen;
    if (cli_load_model(&o->g.mo, &g->m, &g->mi)) return 1;
    if (kvb_vocab_tokenize(kvb_model_vocab(g->m), r->prompt, r->plen, true, true, &r->ids, &r->n_ids) != KVB_OK) {
        fprintf(stderr, "kvbound: %s\n", kvb_last_error());
        return 1;
    }
    if (r->n_ids == 0) { fprintf(stderr, "kvbound: the prompt gives no tokens\n"); return 1; }
    if (run_grammar(o, r)) return 1;
    struct kvb_context_params cp = cli_gen_context_params(&o->g, &g->mi);
    if (o->g.keep < 0) cp.kv.keep = r->n_ids; /* --keep -1: the whole prompt */
    cp.kv.block_size = o->block;
    cp.chunk = o->chunk;
    if (o->g.pid == KVB_POLICY_FULL && r->n_ids > cp.n_ctx) { /* fail before printing anything */
        fprintf(stderr, "kvbound: the prompt has %d tokens, more than the context of %d that policy full keeps (a bounded --policy, or a larger -c)\n",
                r->n_ids, cp.n_ctx);
        return 1;
    }
    cp.kv_pool_bytes = kvb_model_kv_seq_bytes(g->m, &cp.kv, cp.n_ctx, r->n_ids, o->chunk);
    if (o->g.pid == KVB_POLICY_FULL && o->g.ctx > g->mi.n_ctx_train)
        fprintf(stderr, "kvbound: warning: --ctx %d is beyond the model's trained length %d\n", o->g.ctx, g->mi.n_ctx_train);
    return cli_gen_start(g, &cp, &o->g.sp) ? 1 : CLI_GO_ON;
}

/* Why generation ends at token `next`: end of sequence or of turn; NULL: it goes on. */
static const char *run_end_of(const struct kvb_vocab *vocab, int32_t next) {
    const int32_t eos = kvb_vocab_special(vocab, KVB_SPECIAL_EOS), eot = kvb_vocab_special(vocab, KVB_SPECIAL_EOT);
    if (!kvb_vocab_is_eog(vocab, next) && next != kvb_vocab_special(vocab, KVB_SPECIAL_BOS)) return NULL;
    return next == eot && next != eos ? "end of turn (--ignore-eos to go on)" : "end of sequence (--ignore-eos to go on)";
}

/* Prints the prompt, reads it, then samples and prints up to -n tokens. */
static void run_generate(const struct run_opts *o, struct run *r) {
    struct cli_gen *g = &r->gen;
    const struct kvb_vocab *vocab = kvb_model_vocab(g->m);
    fwrite(r->prompt, 1, r->plen, stdout);
    fflush(stdout);
    for (int32_t i = 0; i < r->n_ids; i++) cli_history_push(&g->hist, r->ids[i]);
    r->t0 = cli_now_sec();
    kvb_status st = kvb_context_prompt(g->c, r->ids, r->n_ids, g->logits, false);
    r->t1 = cli_now_sec();
    kvb_cache_get_stats(kvb_context_cache(g->c), &r->ps);
    char out[512];
    struct kvb_detok dt = {0}; /* whole UTF-8 characters only, so every flush is printable */
    const char *why = NULL;
    r->stop = "the token limit (-n)";
    if (st != KVB_OK) {
        why = kvb_last_error();
        r->rc = 1;
    }
    for (; st == KVB_OK && (o->g.n_predict < 0 || r->generated < o->g.n_predict); r->generated++) { /* -n -1: no limit */
        int32_t next;
        if (r->matcher) { /* the sampler's pick when the grammar takes it, else a pick among what it allows */
            const double tm = cli_now_sec();
            kvb_sampler_adjust(g->smp, g->logits, g->hist.ids, g->hist.n);
            next = kvb_sampler_pick(g->smp, g->logits);
            if (!kvb_matcher_allows(r->matcher, next)) {
                kvb_matcher_mask(r->matcher, g->logits);
                next = kvb_sampler_pick(g->smp, g->logits);
                r->masks++;
            }
            kvb_matcher_accept(r->matcher, next);
            r->mask_s += cli_now_sec() - tm;
        } else {
            next = kvb_sampler_sample(g->smp, g->logits, g->hist.ids, g->hist.n);
        }
        const char *end = o->ignore_eos ? NULL : run_end_of(vocab, next);
        if (end) { r->stop = end; break; }
        cli_history_push(&g->hist, next);
        size_t pl = kvb_detok_push(vocab, &dt, next, false, out, sizeof out);
        if (pl <= sizeof out) {
            fwrite(out, 1, pl, stdout);
            fflush(stdout);
        }
        if (r->generated + 1 == o->g.n_predict) { r->generated++; break; }
        st = kvb_context_eval(g->c, &next, 1, g->logits, false);
        if (st != KVB_OK) {
            why = kvb_last_error(); /* `next` was printed: the loop's increment counts it */
            r->rc = st == KVB_ERR_INVALID && o->g.pid == KVB_POLICY_FULL ? 0 : 1; /* context full: a clean stop */
        }
    }
    fwrite(out, 1, kvb_detok_flush(&dt, out, sizeof out), stdout);
    fflush(stdout);
    r->t2 = cli_now_sec();
    printf("\n");
    fflush(stdout);
    if (why) {
        fprintf(stderr, "kvbound: stopped: %s\n", why);
        r->stop = r->rc ? "an error" : "the context limit (--ctx)";
    }
}

/* The stats line on stderr, and recall's with --recall. */
static void run_report(const struct run_opts *o, const struct run *r) {
    const struct cli_gen *g = &r->gen;
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(kvb_context_cache(g->c), &cs);
    char kept[160] = "";
    if (kvb_policy_compresses(o->g.pid) || o->g.po.compress_prompt)
        snprintf(kept, sizeof kept, ", compressed prompt %.1f tokens per stream (min %d, max %d)",
                 (double)r->ps.slots / ((double)(g->mi.n_layer - g->mi.n_rec_layers - g->mi.n_kv_shared > 1 ? g->mi.n_layer - g->mi.n_rec_layers - g->mi.n_kv_shared : 1) * g->mi.n_head_kv), r->ps.slots_min, r->ps.slots_max);
    const double prefill_s = r->t1 - r->t0, decode_s = r->t2 - r->t1;
    fprintf(stderr, "kvbound: prompt %d tokens%s, prefill %.1f tok/s, decode %.1f tok/s (%d tokens), KV %.2f MB (peak %.2f MB), policy %s, kernels %s, stopped at %s\n",
            r->n_ids, kept, r->n_ids / (prefill_s > 0 ? prefill_s : 1e-9), r->generated > 1 ? (r->generated - 1) / (decode_s > 0 ? decode_s : 1e-9) : 0.0,
            r->generated, cs.bytes_used / 1e6, cs.bytes_peak / 1e6, kvb_policy_name(o->g.pid), kvb_kernels_name(), r->stop);
    if (cs.window_layers) cli_window_stats(stderr, &cs, g->mi.n_layer, g->mi.n_kv_shared);
    if (o->g.rec.on) cli_recall_stats(stderr, &cs);
    struct kvb_cache_params kp;
    kvb_cache_get_params(kvb_context_cache(g->c), &kp);
    if (kp.kv.keep > 0) { /* the span as the cache shows it: how many of positions 0..N-1 every policy-governed stream holds */
        const long long held = (long long)cli_pinned_kept(kvb_context_cache(g->c), kp.kv.keep, kvb_context_n_past(g->c));
        fprintf(stderr, "kvbound: keep %d: positions 0..%lld pinned in every stream (%lld tokens), the longest stream holds %d tokens\n",
                (int)kp.kv.keep, held - 1, held, cs.slots_max);
    }
    if (r->matcher)
        fprintf(stderr, "kvbound: grammar: %.3f ms per token in checks and masks (%d of %d tokens masked the vocabulary), %.1f%% of decode time\n",
                r->generated ? 1e3 * r->mask_s / r->generated : 0.0, r->masks, r->generated, decode_s > 0 ? 100 * r->mask_s / decode_s : 0.0);
}

static void run_free(struct run *r) {
    kvb_matcher_free(r->matcher);
    kvb_grammar_vocab_free(r->gv);
    kvb_grammar_free(r->grammar);
    kvb_buffer_free(r->ids);
    free(r->pbuf);
    cli_gen_free(&r->gen);
}

int cmd_run(int argc, char **argv) {
    struct run_opts o;
    int rc = run_parse(&o, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    struct run r;
    memset(&r, 0, sizeof r);
    rc = run_setup(&o, &r);
    if (rc == CLI_GO_ON) {
        run_generate(&o, &r);
        run_report(&o, &r);
        rc = r.rc;
    }
    run_free(&r);
    return rc;
}
