/*
 * chat.c — `kvbound chat`: an interactive conversation with a bounded cache
 * (streaming by default), so it can go on for days. The prompt format comes
 * from the GGUF chat template, recognized by kvb_chat_detect (ChatML,
 * Llama 3, Llama 2, Mistral; unrecognized -> ChatML with a warning), or a
 * plain "User: / Assistant:" exchange for models without a template or
 * whose vocabulary lacks the template's control tokens. Each
 * turn feeds only the new text; answers stream through kvb_detok, so a
 * character split across tokens is never printed half.
 * Commands: /stats, /reset, /save FILE, /load FILE, /quit. Works with stdin
 * as a pipe (no prompt marker is printed then). With --recall, what the
 * policy evicts goes to the cold tier and comes back when a turn's queries
 * score it (docs/RECALL.md); /save keeps the cold tier in the image, and
 * /load brings it back (in memory, spilling to --cold-dir beyond it).
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool cli_chat_style(const char *cmd, const struct kvb_vocab *vocab, const char *forced, enum kvb_chat_style *style) {
    *style = KVB_CHAT_PLAIN;
    if (forced) {
        if (kvb_chat_style_from_name(forced, style) != KVB_OK) {
            fprintf(stderr, "kvbound %s: --template: %s\n", cmd, kvb_last_error());
            return false;
        }
        const char *miss = kvb_chat_missing_token(vocab, *style);
        if (miss)
            fprintf(stderr, "kvbound %s: warning: --template %s: the vocabulary has no %s token; the markup is fed as plain text\n", cmd, forced, miss);
        return true;
    }
    const char *why = NULL;
    if (kvb_chat_style_for_vocab(vocab, style, &why) == KVB_FALLBACK && why)
        fprintf(stderr, "kvbound %s: warning: %s (--template to choose)\n", cmd, why);
    return true;
}

const char *cli_chat_default_system(const struct kvb_vocab *vocab, enum kvb_chat_style style, char *buf, size_t cap) {
    struct kvb_vocab_info vi;
    kvb_vocab_get_info(vocab, &vi);
    if (style == KVB_CHAT_CHATML && vi.chat_template && kvb_chat_default_system(vi.chat_template, buf, cap) > 0) return buf;
    return NULL;
}

static int chat_usage(FILE *f, const struct kvb_sampler_params *sp) {
    fprintf(f,
            "usage: kvbound chat -m MODEL [-z TOKENIZER.bin] [options]\n"
            "\n"
            "Reads user turns from stdin (one per line) and answers each. Commands:\n"
            "  /stats  cache memory and tokens   /reset  forget the conversation\n"
            "  /save FILE  save the cache (with its cold tier)  /load FILE  restore a saved cache\n"
            "  /quit\n"
            "A turn that does not fit the context (policy full) is refused with a message and the\n"
            "conversation goes on; the exit status is then 1 at the end.\n"
            "\n"
            "  --template NAME  chatml, llama3, llama2, mistral or plain (default: detected from the\n"
            "                   model's chat template; unrecognized -> chatml with a warning;\n"
            "                   no template, or a vocabulary without its tokens -> plain\n"
            "                   User:/Assistant:, with a warning in the second case)\n"
            "  -sys, --system-prompt TEXT  system message for the first turn (default: the template's\n"
            "                   own, if any; also --system)\n"
            "  -p, --prompt TEXT  the first user turn, before those from stdin\n"
            "  -f, --file FILE  the first user turn from a file (- = stdin), less one trailing newline\n"
            "  --show-prompt    print the text fed to the model each turn to stderr, as [prompt: ...]\n"
            "  --policy NAME    cache policy (default streaming); snapkv, pyramidkv and adakv compress\n"
            "                   every turn's text with what the cache holds, and report the result\n"
            "  -c, --ctx-size N context limit for the full policy (default: the model's trained length;\n"
            "                   also --ctx)\n"
            "  -n, --n-predict N  max tokens per answer (default 256; -1 = until end-of-turn or the\n"
            "                   context limit)\n");
    cli_sampler_help(f, sp);
    fprintf(f,
            "  -ngl N           accepted for llama.cpp's command lines; kvbound runs on the CPU\n"
            "  -t, --threads N  threads (default 2)\n"
            CLI_NO_MMAP_HELP
            "\n");
    cli_kv_types_help(f, "f16");
    cli_recall_help(f, 1024);
    cli_policy_help(f, 1024);
    return 0;
}

int cmd_chat(int argc, char **argv) {
    const char *model = NULL, *tok = NULL, *forced = NULL, *system = NULL, *first_turn = NULL, *pfile = NULL;
    enum kvb_policy_id pid = KVB_POLICY_STREAMING;
    int n_predict = 256, threads = 2, ctx = 0;
    struct cli_policy po;
    cli_policy_init(&po, 1024);
    struct kvb_sampler_params sp = kvb_sampler_default_params();
    sp.temp = 0.7f;
    bool show_prompt = false, no_mmap = false;
    struct cli_kv_types kvt;
    cli_kv_types_init(&kvt, KVB_DTYPE_F16);
    struct cli_recall rec;
    cli_recall_init(&rec);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return chat_usage(stdout, &sp);
        if (!strcmp(a, "--show-prompt")) { show_prompt = true; continue; }
        if (!strcmp(a, "--no-mmap")) { no_mmap = true; continue; }
        int pr = cli_policy_option(&po, argc, argv, &i);
        if (pr == 0) pr = cli_kv_types_option(&kvt, argc, argv, &i);
        if (pr == 0) pr = cli_recall_option(&rec, argc, argv, &i);
        if (pr == 0) pr = cli_sampler_option(&sp, argc, argv, &i);
        if (pr < 0) return 2;
        if (pr > 0) continue;
        if (!(v = cli_opt_value("chat", "-m --model -z --tokenizer --template --system -sys --system-prompt -p --prompt -f --file --policy "
                                        "-n --n-predict -c --ctx-size --ctx -ngl --n-gpu-layers --gpu-layers -t --threads",
                                argc, argv, &i)))
            return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer")) tok = v;
        else if (!strcmp(a, "--template")) forced = v;
        else if (!strcmp(a, "--system") || !strcmp(a, "-sys") || !strcmp(a, "--system-prompt")) system = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) first_turn = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) pfile = v;
        else if (!strcmp(a, "--policy")) { if (kvb_policy_from_name(v, &pid) != KVB_OK) { fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error()); return 2; } }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { if (cli_parse_i32(a, v, -1, 1 << 30, &n_predict)) return 2; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size") || !strcmp(a, "--ctx")) { if (cli_parse_i32(a, v, 1, 1 << 30, &ctx)) return 2; }
        else if (!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers") || !strcmp(a, "--gpu-layers")) {
            int ngl;
            if (cli_parse_i32(a, v, -1, 1 << 20, &ngl)) return 2;
            fprintf(stderr, "kvbound: note: %s ignored: kvbound runs on the CPU, there is no GPU offload\n", a);
        }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (cli_parse_i32(a, v, 1, 1024, &threads)) return 2; }
        else { fprintf(stderr, "kvbound chat: unknown option '%s' (see --help)\n", a); return 2; }
    }
    if (!model) { fprintf(stderr, "kvbound chat: -m MODEL is required\n"); return 2; }
    if (first_turn && pfile) { fprintf(stderr, "kvbound chat: give the first turn with -p or with -f, not both\n"); return 2; }
    char *fbuf = NULL;
    if (pfile) {
        size_t flen;
        if (!(fbuf = cli_read_prompt_file(pfile, &flen))) return 1;
        first_turn = fbuf;
    }
    struct kvb_model_params mp = kvb_model_default_params();
    mp.tokenizer_path = tok;
    mp.no_mmap = no_mmap;
    struct kvb_model *m;
    if (kvb_model_load(model, &mp, &m) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); free(fbuf); return 1; }
    struct kvb_model_info mi;
    kvb_model_get_info(m, &mi);
    struct kvb_context_params cp = kvb_context_default_params();
    cp.policy = cli_policy_params(&po, pid);
    cli_policy_warn(&po, pid, mi.n_ctx_train);
    cli_warn_threads(threads);
    cp.pos_mode = po.pos;
    cp.max_distance = po.max_distance;
    cp.n_threads = threads;
    cp.chunk = 128;
    cp.kv_dtype = kvt.k;
    cp.kv_dtype_v = kvt.v;
    cp.n_ctx = ctx ? ctx : mi.n_ctx_train;
    if (pid == KVB_POLICY_FULL && ctx > mi.n_ctx_train)
        fprintf(stderr, "kvbound chat: warning: -c %d is beyond the model's trained length %d\n", ctx, mi.n_ctx_train);
    /* a compressing policy reads each turn whole before compressing: room for
     * turns of up to 4096 tokens on top of what it keeps (or --prefill-budget) */
    cp.kv_pool_bytes = cli_pool_bytes(&mi, &kvt, &cp.policy, (int64_t)cp.policy.budget + 4096, cp.chunk, cp.block_size, cp.n_ctx) +
                       cli_recall_pool_bytes(&mi, &kvt, &rec, cp.block_size);
    cp.recall = cli_recall_params(&rec);
    struct kvb_context *c = NULL;
    struct kvb_sampler *smp = NULL;
    struct cli_history hist;
    cli_history_init(&hist, sp.repeat_last_n);
    float *logits = malloc(sizeof(float) * (size_t)mi.n_vocab);
    if (!logits || kvb_context_init(m, &cp, &c) != KVB_OK || kvb_sampler_init(&sp, mi.n_vocab, &smp) != KVB_OK) {
        fprintf(stderr, "kvbound: %s\n", !logits ? "out of memory" : kvb_last_error());
        free(logits); cli_history_free(&hist); kvb_context_free(c); kvb_model_free(m); free(fbuf);
        return 1;
    }
    const struct kvb_vocab *vocab = kvb_model_vocab(m);
    enum kvb_chat_style style;
    if (!cli_chat_style("chat", vocab, forced, &style)) {
        free(logits); cli_history_free(&hist); kvb_sampler_free(smp); kvb_context_free(c); kvb_model_free(m); free(fbuf);
        return 2;
    }
    const bool plain = style == KVB_CHAT_PLAIN, full = pid == KVB_POLICY_FULL;
    char default_system[1024];
    if (!system) system = cli_chat_default_system(vocab, style, default_system, sizeof default_system);
    const int32_t eos = kvb_vocab_special(vocab, KVB_SPECIAL_EOS), eot = kvb_vocab_special(vocab, KVB_SPECIAL_EOT);
    char stop_text[128] = "";
    const bool tty = isatty(0);
    fprintf(stderr, "kvbound chat: %s, template %s, policy %s (%s %d); /stats /reset /save /load /quit\n", mi.arch, kvb_chat_style_name(style),
            kvb_policy_name(pid), full ? "context" : "budget", full ? cp.n_ctx : cp.policy.budget);
    char *line = NULL;
    size_t cap = 0;
    bool first = true, refused = false;
    int rc = 0;
    for (;;) {
        ssize_t len;
        if (first_turn) { /* -p / -f: the first turn, then stdin */
            free(line);
            line = strdup(first_turn);
            if (!line) { fprintf(stderr, "kvbound chat: out of memory\n"); rc = 1; break; }
            cap = strlen(line) + 1;
            len = (ssize_t)strlen(line);
            first_turn = NULL;
        } else {
            if (tty) { fprintf(stdout, "> "); fflush(stdout); }
            len = getline(&line, &cap, stdin);
            if (len < 0) break;
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        }
        if (!len) continue;
        if (line[0] == '/') {
            struct kvb_cache_stats cs;
            if (!strcmp(line, "/quit")) break;
            if (!strcmp(line, "/stats")) {
                kvb_cache_get_stats(kvb_context_cache(c), &cs);
                printf("[tokens seen %lld, retained %lld in all streams (longest %d), KV %.2f MB (peak %.2f MB), policy %s]\n",
                       (long long)kvb_context_n_past(c), (long long)cs.slots, cs.slots_max, cs.bytes_used / 1e6, cs.bytes_peak / 1e6, kvb_policy_name(pid));
                if (rec.on)
                    printf("[recall: %lld cold pages (%.1f MiB in memory, %.1f MiB in file), %lld dropped; recall area %.1f MiB; %lld pages loaded]\n",
                           (long long)cs.cold_pages, (double)cs.cold_mem_bytes / (1 << 20), (double)cs.cold_file_bytes / (1 << 20),
                           (long long)cs.cold_dropped_pages, (double)cs.recall_bytes / (1 << 20), (long long)cs.recall_loads);
            } else if (!strcmp(line, "/reset")) {
                kvb_context_reset(c);
                first = true;
                stop_text[0] = 0;
                hist.n = 0;
                printf("[conversation reset]\n");
            } else if (!strncmp(line, "/save ", 6)) {
                if (kvb_context_save(c, line + 6) == KVB_OK) printf("[saved %s]\n", line + 6);
                else printf("[save failed: %s]\n", kvb_last_error());
            } else if (!strncmp(line, "/load ", 6)) {
                if (kvb_context_load(c, line + 6) == KVB_OK) { printf("[loaded %s: %lld tokens seen]\n", line + 6, (long long)kvb_context_n_past(c)); first = false; }
                else printf("[load failed: %s]\n", kvb_last_error());
            } else {
                printf("[unknown command %s: /stats /reset /save FILE /load FILE /quit]\n", line);
            }
            fflush(stdout);
            continue;
        }
        char *turn = NULL;
        if (kvb_chat_turn_text(style, system, line, first, stop_text, &turn, NULL) != KVB_OK) { fprintf(stderr, "kvbound chat: %s\n", kvb_last_error()); rc = 1; break; }
        if (show_prompt) fprintf(stderr, "[prompt: %s]\n", turn);
        int32_t *ids, n;
        /* BOS once, at the start (later "<s>" texts of Llama 2 become BOS by parse_special) */
        kvb_status s = kvb_vocab_tokenize(kvb_model_vocab(m), turn, strlen(turn), first, true, &ids, &n);
        kvb_buffer_free(turn);
        if (s != KVB_OK) { fprintf(stderr, "kvbound chat: %s\n", kvb_last_error()); rc = 1; break; }
        const int64_t seen = kvb_context_n_past(c);
        if (full && seen + n > cp.n_ctx) { /* refused whole, before anything is read: the cache is as it was */
            fprintf(stderr, "kvbound chat: this turn is not read: its %d tokens do not fit the context (%lld of %d used; policy full keeps "
                            "every token): /reset, a larger -c, or a bounded --policy; the conversation goes on\n",
                    n, (long long)seen, cp.n_ctx);
            kvb_buffer_free(ids);
            refused = true;
            continue;
        }
        for (int32_t k = 0; k < n; k++) cli_history_push(&hist, ids[k]);
        s = kvb_context_prompt(c, ids, n, logits, false); /* the turn's text is a prompt: compressed here */
        kvb_buffer_free(ids);
        if (s == KVB_OK && kvb_policy_compresses(pid)) {
            struct kvb_cache_stats ps;
            kvb_cache_get_stats(kvb_context_cache(c), &ps);
            fprintf(stderr, "[compressed prompt: %.1f tokens per stream (min %d, max %d) of %lld seen]\n",
                    (double)ps.slots / ((double)mi.n_layer * mi.n_head_kv), ps.slots_min, ps.slots_max, (long long)kvb_context_n_past(c));
        }
        first = false;
        char text[8192], piece[512];
        size_t tl = 0;
        struct kvb_detok dt = {0};
        bool cut = false; /* the context filled during the answer */
        stop_text[0] = 0;
        for (int g = 0; s == KVB_OK && (n_predict < 0 || g < n_predict); g++) {
            int32_t next = kvb_sampler_sample(smp, logits, hist.ids, hist.n);
            if (full && kvb_context_n_past(c) + 1 > cp.n_ctx) { cut = true; break; }
            cli_history_push(&hist, next);
            if (next == eos || next == eot || next == kvb_vocab_special(vocab, KVB_SPECIAL_BOS)) {
                if (plain) break;
                size_t sl = kvb_vocab_token_bytes(vocab, next, true, stop_text, sizeof stop_text - 1);
                stop_text[sl < sizeof stop_text ? sl : sizeof stop_text - 1] = 0;
                s = kvb_context_eval(c, &next, 1, logits, false); /* keep the end-of-turn token in the cache */
                break;
            }
            size_t pl = kvb_detok_push(vocab, &dt, next, false, piece, sizeof piece);
            if (pl > sizeof piece) pl = 0; /* a token longer than 512 bytes: not shown */
            if (tl + pl < sizeof text) { memcpy(text + tl, piece, pl); tl += pl; }
            text[tl] = 0;
            if (plain && strstr(text, "\nUser:")) break; /* the model starts the next turn */
            fwrite(piece, 1, pl, stdout);
            fflush(stdout);
            s = kvb_context_eval(c, &next, 1, logits, false);
        }
        fwrite(piece, 1, kvb_detok_flush(&dt, piece, sizeof piece), stdout);
        printf("\n");
        fflush(stdout);
        if (cut) {
            fprintf(stderr, "kvbound chat: the answer stops here: the context of %d tokens is full (policy full keeps every token; /reset, a "
                            "larger -c, or a bounded --policy)\n", cp.n_ctx);
            refused = true;
        }
        if (s != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); rc = 1; break; }
    }
    free(line);
    free(fbuf);
    free(logits);
    cli_history_free(&hist);
    kvb_sampler_free(smp);
    kvb_context_free(c);
    kvb_model_free(m);
    return rc ? rc : refused ? 1 : 0;
}
