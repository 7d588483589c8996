/*
 * run.c — `kvbound run`: generate from a GGUF or llama2.c model with any
 * cache policy. stdout carries exactly the prompt followed by the generated
 * text, streamed (UTF-8 held back until a character is complete); a stats
 * line goes to stderr. With a bounded policy generation never stops because
 * the context is full; with `full` it stops at the context limit.
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
            "  -t, --threads N       threads (default 2)\n"
            CLI_NO_MMAP_HELP
            "\n");
    cli_kv_types_help(f, "f16");
    cli_recall_help(f, 1024);
    cli_policy_help(f, 256);
}

int cmd_run(int argc, char **argv) {
    const char *model = NULL, *tok = NULL, *prompt = NULL, *pfile = NULL;
    int n_predict = 128, threads = 2;
    bool ignore_eos = false, no_mmap = false;
    struct kvb_sampler_params sp = kvb_sampler_default_params();
    struct kvb_context_params cp = kvb_context_default_params();
    enum kvb_policy_id pid = KVB_POLICY_FULL;
    int block = 16, ctx = 0, chunk = 256;
    struct cli_policy po;
    cli_policy_init(&po, 256);
    struct cli_kv_types kvt;
    cli_kv_types_init(&kvt, KVB_DTYPE_F16);
    struct cli_recall rec;
    cli_recall_init(&rec);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { run_usage(stdout, &sp); return 0; }
        if (!strcmp(a, "--ignore-eos")) { ignore_eos = true; continue; }
        if (!strcmp(a, "--no-mmap")) { no_mmap = true; continue; }
        int pr = cli_policy_option(&po, argc, argv, &i);
        if (pr == 0) pr = cli_kv_types_option(&kvt, argc, argv, &i);
        if (pr == 0) pr = cli_recall_option(&rec, argc, argv, &i);
        if (pr == 0) pr = cli_sampler_option(&sp, argc, argv, &i);
        if (pr < 0) return 2;
        if (pr > 0) continue;
        if (!(v = cli_opt_value("run", "-m --model -z --tokenizer -p --prompt -f --file -n --n-predict -ngl --n-gpu-layers --gpu-layers --policy "
                                       "--block-size --ctx -c --ctx-size --chunk -b --batch-size -t --threads",
                                argc, argv, &i)))
            return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer")) tok = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) pfile = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { if (cli_parse_i32(a, v, -1, 1 << 30, &n_predict)) return 2; }
        else if (!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers") || !strcmp(a, "--gpu-layers")) {
            int ngl;
            if (cli_parse_i32(a, v, -1, 1 << 20, &ngl)) return 2;
            fprintf(stderr, "kvbound: note: %s ignored: kvbound runs on the CPU, there is no GPU offload\n", a);
        }
        else if (!strcmp(a, "--policy")) { if (kvb_policy_from_name(v, &pid) != KVB_OK) { fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error()); return 2; } }
        else if (!strcmp(a, "--block-size")) { if (cli_parse_i32(a, v, 1, 4096, &block)) return 2; }
        else if (!strcmp(a, "--ctx") || !strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { if (cli_parse_i32(a, v, 1, 1 << 30, &ctx)) return 2; }
        else if (!strcmp(a, "--chunk") || !strcmp(a, "-b") || !strcmp(a, "--batch-size")) { if (cli_parse_i32(a, v, 1, 8192, &chunk)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (cli_parse_i32(a, v, 1, 1024, &threads)) return 2; }
        else { fprintf(stderr, "kvbound run: unknown option '%s' (see --help)\n", a); return 2; }
    }
    if (!model) { fprintf(stderr, "kvbound run: -m MODEL is required\n"); return 2; }
    if (!prompt && !pfile) { fprintf(stderr, "kvbound run: give a prompt with -p or -f\n"); return 2; }
    if (prompt && pfile) { fprintf(stderr, "kvbound run: give the prompt with -p or with -f, not both\n"); return 2; }
    cli_warn_threads(threads);
    char *pbuf = NULL;
    size_t plen;
    if (pfile) {
        if (!(pbuf = cli_read_prompt_file(pfile, &plen))) return 1;
        prompt = pbuf;
    } else {
        plen = strlen(prompt);
    }
    struct kvb_model_params mp = kvb_model_default_params();
    mp.tokenizer_path = tok;
    mp.no_mmap = no_mmap;
    struct kvb_model *m;
    if (kvb_model_load(model, &mp, &m) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); free(pbuf); return 1; }
    struct kvb_model_info mi;
    kvb_model_get_info(m, &mi);
    int32_t *ids, n_ids;
    if (kvb_vocab_tokenize(kvb_model_vocab(m), prompt, plen, true, true, &ids, &n_ids) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); kvb_model_free(m); free(pbuf); return 1; }
    if (n_ids == 0) { fprintf(stderr, "kvbound: the prompt gives no tokens\n"); kvb_buffer_free(ids); kvb_model_free(m); free(pbuf); return 1; }
    cp.policy = cli_policy_params(&po, pid);
    cli_policy_warn(&po, pid, mi.n_ctx_train);
    cp.pos_mode = po.pos;
    cp.max_distance = po.max_distance;
    cp.kv_dtype = kvt.k;
    cp.kv_dtype_v = kvt.v;
    cp.block_size = block;
    cp.n_threads = threads;
    cp.chunk = chunk;
    cp.n_ctx = ctx ? ctx : mi.n_ctx_train;
    if (pid == KVB_POLICY_FULL && n_ids > cp.n_ctx) { /* fail before printing anything */
        fprintf(stderr, "kvbound: the prompt has %d tokens, more than the context of %d that policy full keeps (a bounded --policy, or a larger -c)\n",
                n_ids, cp.n_ctx);
        kvb_buffer_free(ids); kvb_model_free(m); free(pbuf);
        return 1;
    }
    cp.kv_pool_bytes = cli_pool_bytes(&mi, &kvt, &cp.policy, n_ids, chunk, block, cp.n_ctx) + cli_recall_pool_bytes(&mi, &kvt, &rec, block);
    cp.recall = cli_recall_params(&rec);
    if (pid == KVB_POLICY_FULL && ctx > mi.n_ctx_train)
        fprintf(stderr, "kvbound: warning: --ctx %d is beyond the model's trained length %d\n", ctx, mi.n_ctx_train);
    struct kvb_context *c = NULL;
    struct kvb_sampler *smp = NULL;
    struct cli_history hist;
    cli_history_init(&hist, sp.repeat_last_n);
    float *logits = malloc(sizeof(float) * (size_t)mi.n_vocab);
    if (!logits || kvb_context_init(m, &cp, &c) != KVB_OK || kvb_sampler_init(&sp, mi.n_vocab, &smp) != KVB_OK) {
        fprintf(stderr, "kvbound: %s\n", !logits ? "out of memory" : kvb_last_error());
        free(logits); cli_history_free(&hist); kvb_context_free(c); kvb_buffer_free(ids); kvb_model_free(m); free(pbuf);
        return 1;
    }
    fwrite(prompt, 1, plen, stdout);
    fflush(stdout);
    for (int32_t i = 0; i < n_ids; i++) cli_history_push(&hist, ids[i]);
    int rc = 0;
    double t0 = cli_now_sec();
    kvb_status st = kvb_context_prompt(c, ids, n_ids, logits, false);
    double t1 = cli_now_sec(), t2 = t1;
    struct kvb_cache_stats ps; /* after the prompt (compressed, for the snapkv family) */
    kvb_cache_get_stats(kvb_context_cache(c), &ps);
    char out[512];
    struct kvb_detok dt = {0}; /* whole UTF-8 characters only, so every flush is printable */
    const int32_t eot = kvb_vocab_special(kvb_model_vocab(m), KVB_SPECIAL_EOT);
    int generated = 0;
    const char *why = NULL, *stop = "the token limit (-n)";
    if (st != KVB_OK) {
        why = kvb_last_error();
        rc = 1;
    }
    for (; st == KVB_OK && (n_predict < 0 || generated < n_predict); generated++) { /* -n -1: no limit */
        int32_t next = kvb_sampler_sample(smp, logits, hist.ids, hist.n);
        if (!ignore_eos && (next == kvb_vocab_special(kvb_model_vocab(m), KVB_SPECIAL_EOS) || next == eot || next == kvb_vocab_special(kvb_model_vocab(m), KVB_SPECIAL_BOS))) {
            stop = next == eot && next != kvb_vocab_special(kvb_model_vocab(m), KVB_SPECIAL_EOS) ? "end of turn (--ignore-eos to go on)" : "end of sequence (--ignore-eos to go on)";
            break;
        }
        cli_history_push(&hist, next);
        size_t pl = kvb_detok_push(kvb_model_vocab(m), &dt, next, false, out, sizeof out);
        if (pl <= sizeof out) {
            fwrite(out, 1, pl, stdout);
            fflush(stdout);
        }
        if (generated + 1 == n_predict) { generated++; break; }
        st = kvb_context_eval(c, &next, 1, logits, false);
        if (st != KVB_OK) {
            why = kvb_last_error(); /* `next` was printed: the loop's increment counts it */
            if (st == KVB_ERR_INVALID && pid == KVB_POLICY_FULL) rc = 0; /* context full: a clean stop */
            else rc = 1;
        }
    }
    fwrite(out, 1, kvb_detok_flush(&dt, out, sizeof out), stdout);
    fflush(stdout);
    t2 = cli_now_sec();
    printf("\n");
    fflush(stdout);
    if (why) {
        fprintf(stderr, "kvbound: stopped: %s\n", why);
        stop = rc ? "an error" : "the context limit (--ctx)";
    }
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(kvb_context_cache(c), &cs);
    char kept[160] = "";
    if (kvb_policy_compresses(pid))
        snprintf(kept, sizeof kept, ", compressed prompt %.1f tokens per stream (min %d, max %d)",
                 (double)ps.slots / ((double)mi.n_layer * mi.n_head_kv), ps.slots_min, ps.slots_max);
    fprintf(stderr, "kvbound: prompt %d tokens%s, prefill %.1f tok/s, decode %.1f tok/s (%d tokens), KV %.2f MB (peak %.2f MB), policy %s, kernels %s, stopped at %s\n",
            n_ids, kept, n_ids / (t1 - t0 > 0 ? t1 - t0 : 1e-9), generated > 1 ? (generated - 1) / (t2 - t1 > 0 ? t2 - t1 : 1e-9) : 0.0, generated,
            cs.bytes_used / 1e6, cs.bytes_peak / 1e6, kvb_policy_name(pid), kvb_kernels_name(), stop);
    if (rec.on) cli_recall_stats(stderr, &cs);
    kvb_buffer_free(ids);
    free(logits);
    cli_history_free(&hist);
    free(pbuf);
    kvb_sampler_free(smp);
    kvb_context_free(c);
    kvb_model_free(m);
    return rc;
}
