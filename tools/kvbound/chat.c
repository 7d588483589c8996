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

/* The prompt format: --template, else the model's template as detected,
 * else plain. A detected (or fallen-back) style whose control tokens the
 * vocabulary lacks would feed the model markup it never saw: plain instead,
 * with a warning; a forced one is kept, with a warning. */
static bool pick_style(const struct kvb_vocab *vocab, const char *forced, enum kvb_chat_style *style) {
    *style = KVB_CHAT_PLAIN;
    if (forced) {
        if (kvb_chat_style_from_name(forced, style) != KVB_OK) {
            fprintf(stderr, "kvbound chat: --template: %s\n", kvb_last_error());
            return false;
        }
        const char *miss = kvb_chat_missing_token(vocab, *style);
        if (miss)
            fprintf(stderr, "kvbound chat: warning: --template %s: the vocabulary has no %s token; the markup is fed as plain text\n", forced, miss);
        return true;
    }
    const char *why = NULL;
    if (kvb_chat_style_for_vocab(vocab, style, &why) == KVB_FALLBACK && why)
        fprintf(stderr, "kvbound chat: warning: %s (--template to choose)\n", why);
    return true;
}

static int chat_usage(FILE *f) {
    fprintf(f,
            "usage: kvbound chat -m MODEL [-z TOKENIZER.bin] [options]\n"
            "\n"
            "Reads user turns from stdin (one per line) and answers each. Commands:\n"
            "  /stats  cache memory and tokens   /reset  forget the conversation\n"
            "  /save FILE  save the cache (with its cold tier)  /load FILE  restore a saved cache\n"
            "  /quit\n"
            "\n"
            "  --template NAME  chatml, llama3, llama2, mistral or plain (default: detected from the\n"
            "                   model's chat template; unrecognized -> chatml with a warning;\n"
            "                   no template, or a vocabulary without its tokens -> plain\n"
            "                   User:/Assistant:, with a warning in the second case)\n"
            "  --system TEXT    system message for the first turn (default: the template's own, if any)\n"
            "  --show-prompt    print the text fed to the model each turn to stderr, as [prompt: ...]\n"
            "  --policy NAME    cache policy (default streaming); snapkv, pyramidkv and adakv compress\n"
            "                   every turn's text with what the cache holds, and report the result\n"
            "  -n N             max tokens per answer (default 256)\n"
            "  --temp T         (default 0.7)   -s, --seed S (default 0)\n"
            "  -ngl N           accepted for llama.cpp's command lines; kvbound runs on the CPU\n"
            "  -t N             threads (default 2)\n"
            "  --no-mmap        read the weights into memory (huge pages) instead of mapping the file\n"
            "\n");
    cli_kv_types_help(f, "f16");
    cli_recall_help(f, 1024);
    cli_policy_help(f, 1024);
    return 0;
}

int cmd_chat(int argc, char **argv) {
    const char *model = NULL, *tok = NULL, *forced = NULL, *system = NULL;
    enum kvb_policy_id pid = KVB_POLICY_STREAMING;
    int n_predict = 256, threads = 2;
    struct cli_policy po;
    cli_policy_init(&po, 1024);
    long long seed = 0;
    struct kvb_sampler_params sp = kvb_sampler_default_params();
    sp.temp = 0.7f;
    bool show_prompt = false, no_mmap = false;
    struct cli_kv_types kvt;
    cli_kv_types_init(&kvt, KVB_DTYPE_F16);
    struct cli_recall rec;
    cli_recall_init(&rec);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return chat_usage(stdout);
        if (!strcmp(a, "--show-prompt")) { show_prompt = true; continue; }
        if (!strcmp(a, "--no-mmap")) { no_mmap = true; continue; }
        int pr = cli_policy_option(&po, argc, argv, &i);
        if (pr == 0) pr = cli_kv_types_option(&kvt, argc, argv, &i);
        if (pr == 0) pr = cli_recall_option(&rec, argc, argv, &i);
        if (pr < 0) return 2;
        if (pr > 0) continue;
        if (!(v = cli_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer")) tok = v;
        else if (!strcmp(a, "--template")) forced = v;
        else if (!strcmp(a, "--system")) system = v;
        else if (!strcmp(a, "--policy")) { if (kvb_policy_from_name(v, &pid) != KVB_OK) { fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error()); return 2; } }
        else if (!strcmp(a, "-n")) { if (cli_parse_i32(a, v, 1, 1 << 20, &n_predict)) return 2; }
        else if (!strcmp(a, "--temp")) { if (cli_parse_f32(a, v, 0, 100, &sp.temp)) return 2; }
        else if (!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers") || !strcmp(a, "--gpu-layers")) {
            int ngl;
            if (cli_parse_i32(a, v, -1, 1 << 20, &ngl)) return 2;
            fprintf(stderr, "kvbound: note: %s ignored: kvbound runs on the CPU, there is no GPU offload\n", a);
        }
        else if (!strcmp(a, "--seed") || !strcmp(a, "-s")) { if (cli_parse_i64(a, v, 0, (1LL << 62), &seed)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (cli_parse_i32(a, v, 1, 1024, &threads)) return 2; }
        else { fprintf(stderr, "kvbound chat: unknown option '%s'\n", a); return 2; }
    }
    if (!model) { fprintf(stderr, "kvbound chat: -m MODEL is required\n"); return 2; }
    struct kvb_model_params mp = kvb_model_default_params();
    mp.tokenizer_path = tok;
    mp.no_mmap = no_mmap;
    struct kvb_model *m;
    if (kvb_model_load(model, &mp, &m) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
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
    /* a compressing policy reads each turn whole before compressing: room for
     * turns of up to 4096 tokens on top of what it keeps (or --prefill-budget) */
    cp.kv_pool_bytes = cli_pool_bytes(&mi, &kvt, &cp.policy, (int64_t)cp.policy.budget + 4096, cp.chunk, cp.block_size, mi.n_ctx_train) +
                       cli_recall_pool_bytes(&mi, &kvt, &rec, cp.block_size);
    cp.recall = cli_recall_params(&rec);
    struct kvb_context *c = NULL;
    struct kvb_sampler *smp = NULL;
    sp.seed = (uint64_t)seed;
    float *logits = malloc(sizeof(float) * (size_t)mi.n_vocab);
    if (!logits || kvb_context_init(m, &cp, &c) != KVB_OK || kvb_sampler_init(&sp, mi.n_vocab, &smp) != KVB_OK) {
        fprintf(stderr, "kvbound: %s\n", !logits ? "out of memory" : kvb_last_error());
        free(logits); kvb_context_free(c); kvb_model_free(m);
        return 1;
    }
    const struct kvb_vocab *vocab = kvb_model_vocab(m);
    enum kvb_chat_style style;
    if (!pick_style(vocab, forced, &style)) { free(logits); kvb_sampler_free(smp); kvb_context_free(c); kvb_model_free(m); return 2; }
    const bool plain = style == KVB_CHAT_PLAIN;
    struct kvb_vocab_info vi;
    kvb_vocab_get_info(vocab, &vi);
    char default_system[1024];
    if (!system && style == KVB_CHAT_CHATML && vi.chat_template &&
        kvb_chat_default_system(vi.chat_template, default_system, sizeof default_system) > 0)
        system = default_system; /* as the template renders a conversation without one */
    const int32_t eos = kvb_vocab_special(vocab, KVB_SPECIAL_EOS), eot = kvb_vocab_special(vocab, KVB_SPECIAL_EOT);
    char stop_text[128] = "";
    const bool tty = isatty(0);
    fprintf(stderr, "kvbound chat: %s, template %s, policy %s (budget %d); /stats /reset /save /load /quit\n", mi.arch, kvb_chat_style_name(style),
            kvb_policy_name(pid), cp.policy.budget);
    char *line = NULL;
    size_t cap = 0;
    bool first = true;
    int rc = 0;
    for (;;) {
        if (tty) { fprintf(stdout, "> "); fflush(stdout); }
        ssize_t len = getline(&line, &cap, stdin);
        if (len < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
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
        if (s == KVB_OK) {
            s = kvb_context_prompt(c, ids, n, logits, false); /* the turn's text is a prompt: compressed here */
            kvb_buffer_free(ids);
            if (s == KVB_OK && kvb_policy_compresses(pid)) {
                struct kvb_cache_stats ps;
                kvb_cache_get_stats(kvb_context_cache(c), &ps);
                fprintf(stderr, "[compressed prompt: %.1f tokens per stream (min %d, max %d) of %lld seen]\n",
                        (double)ps.slots / ((double)mi.n_layer * mi.n_head_kv), ps.slots_min, ps.slots_max, (long long)kvb_context_n_past(c));
            }
        }
        first = false;
        char text[8192], piece[512];
        size_t tl = 0;
        struct kvb_detok dt = {0};
        stop_text[0] = 0;
        for (int g = 0; s == KVB_OK && g < n_predict; g++) {
            int32_t next = kvb_sampler_sample(smp, logits, NULL, 0);
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
        if (s != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); rc = 1; break; }
    }
    free(line);
    free(logits);
    kvb_sampler_free(smp);
    kvb_context_free(c);
    kvb_model_free(m);
    return rc;
}
