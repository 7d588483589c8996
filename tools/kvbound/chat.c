/*
 * chat.c — `kvbound chat`: an interactive conversation with a bounded cache
 * (streaming by default), so it can go on for days. The prompt format comes
 * from the GGUF chat template when it is one of the known styles (ChatML,
 * Llama-3, Llama-2 [INST]), else a plain "User: / Assistant:" exchange.
 * Commands: /stats, /reset, /save FILE, /load FILE, /quit. Works with stdin
 * as a pipe (no prompt marker is printed then).
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum style { STYLE_PLAIN, STYLE_CHATML, STYLE_LLAMA3, STYLE_LLAMA2 };
static const char *k_style_name[] = {"plain User:/Assistant:", "ChatML", "Llama-3", "Llama-2 [INST]"};

static enum style detect(const char *tmpl) {
    if (!tmpl) return STYLE_PLAIN;
    if (strstr(tmpl, "<|im_start|>")) return STYLE_CHATML;
    if (strstr(tmpl, "<|start_header_id|>")) return STYLE_LLAMA3;
    if (strstr(tmpl, "[INST]")) return STYLE_LLAMA2;
    return STYLE_PLAIN;
}

static int chat_usage(FILE *f) {
    fprintf(f,
            "usage: kvbound chat -m MODEL [-z TOKENIZER.bin] [options]\n"
            "\n"
            "Reads user turns from stdin (one per line) and answers each. Commands:\n"
            "  /stats  cache memory and tokens   /reset  forget the conversation\n"
            "  /save FILE  save the cache         /load FILE  restore a saved cache\n"
            "  /quit\n"
            "\n"
            "  --policy NAME    cache policy (default streaming)\n"
            "  --budget N       tokens per (layer, KV head) (default 1024)\n"
            "  --sinks N        pinned tokens (default: the policy's)\n"
            "  -n N             max tokens per answer (default 256)\n"
            "  --temp T         (default 0.7)   --seed S (default 0)\n"
            "  -t N             threads (default 2)\n");
    return 0;
}

int cmd_chat(int argc, char **argv) {
    const char *model = NULL, *tok = NULL;
    enum kvb_policy_id pid = KVB_POLICY_STREAMING;
    int budget = 1024, sinks = -1, n_predict = 256, threads = 2;
    long long seed = 0;
    struct kvb_sampler_params sp = kvb_sampler_default_params();
    sp.temp = 0.7f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return chat_usage(stdout);
        if (!(v = cli_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-z") || !strcmp(a, "--tokenizer")) tok = v;
        else if (!strcmp(a, "--policy")) { if (kvb_policy_from_name(v, &pid) != KVB_OK) { fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error()); return 2; } }
        else if (!strcmp(a, "--budget")) { if (cli_parse_i32(a, v, 8, 1 << 24, &budget)) return 2; }
        else if (!strcmp(a, "--sinks")) { if (cli_parse_i32(a, v, 0, 1 << 20, &sinks)) return 2; }
        else if (!strcmp(a, "-n")) { if (cli_parse_i32(a, v, 1, 1 << 20, &n_predict)) return 2; }
        else if (!strcmp(a, "--temp")) { if (cli_parse_f32(a, v, 0, 100, &sp.temp)) return 2; }
        else if (!strcmp(a, "--seed")) { if (cli_parse_i64(a, v, 0, (1LL << 62), &seed)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (cli_parse_i32(a, v, 1, 1024, &threads)) return 2; }
        else { fprintf(stderr, "kvbound chat: unknown option '%s'\n", a); return 2; }
    }
    if (!model) { fprintf(stderr, "kvbound chat: -m MODEL is required\n"); return 2; }
    struct kvb_model_params mp = kvb_model_default_params();
    mp.tokenizer_path = tok;
    struct kvb_model *m;
    if (kvb_model_load(model, &mp, &m) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
    struct kvb_model_info mi;
    kvb_model_get_info(m, &mi);
    struct kvb_context_params cp = kvb_context_default_params();
    cp.policy = kvb_policy_default_params(pid);
    if (pid != KVB_POLICY_FULL) cp.policy.budget = budget;
    if (sinks >= 0) cp.policy.n_sink = sinks;
    cp.n_threads = threads;
    cp.chunk = 128;
    size_t per_tok = (size_t)mi.n_layer * mi.n_head_kv * mi.head_dim * 2 * 2;
    cp.kv_pool_bytes = per_tok * (size_t)((pid == KVB_POLICY_FULL ? mi.n_ctx_train : budget) + cp.chunk + 64) + ((size_t)16 << 20);
    struct kvb_context *c;
    if (kvb_context_init(m, &cp, &c) != KVB_OK) { fprintf(stderr, "kvbound: %s\n", kvb_last_error()); return 1; }
    sp.seed = (uint64_t)seed;
    struct kvb_sampler *smp;
    kvb_sampler_init(&sp, mi.n_vocab, &smp);
    const enum style st = detect(kvb_model_chat_template(m));
    const int32_t stop1 = st == STYLE_CHATML ? kvb_token_find(m, "<|im_end|>") : st == STYLE_LLAMA3 ? kvb_token_find(m, "<|eot_id|>") : -1;
    const bool tty = isatty(0);
    fprintf(stderr, "kvbound chat: %s, template %s, policy %s (budget %d); /stats /reset /save /load /quit\n", mi.arch, k_style_name[st],
            kvb_policy_name(pid), budget);
    float *logits = malloc(sizeof(float) * (size_t)mi.n_vocab);
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
        char *turn = malloc((size_t)len + 256);
        switch (st) {
        case STYLE_CHATML: sprintf(turn, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", line); break;
        case STYLE_LLAMA3: sprintf(turn, "%s<|start_header_id|>user<|end_header_id|>\n\n%s<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", first ? "<|begin_of_text|>" : "", line); break;
        case STYLE_LLAMA2: sprintf(turn, "[INST] %s [/INST]", line); break;
        default: sprintf(turn, "%sUser: %s\nAssistant:", first ? "" : "\n", line); break;
        }
        int32_t *ids, n;
        bool bos = st == STYLE_LLAMA2 || (first && st != STYLE_LLAMA3);
        kvb_status s = kvb_tokenize(m, turn, strlen(turn), bos, true, &ids, &n);
        free(turn);
        if (s == KVB_OK) s = kvb_context_eval(c, ids, n, logits, false);
        if (s == KVB_OK) kvb_buffer_free(ids);
        first = false;
        char text[8192];
        size_t tl = 0;
        for (int g = 0; s == KVB_OK && g < n_predict; g++) {
            int32_t next = kvb_sampler_sample(smp, logits, NULL, 0);
            if (next == kvb_token_eos(m) || next == stop1 || next == kvb_token_bos(m)) {
                if (next != stop1 || st == STYLE_PLAIN) break;
                s = kvb_context_eval(c, &next, 1, logits, false); /* keep the end-of-turn token in the cache */
                break;
            }
            char piece[64];
            size_t pl = kvb_token_piece(m, next, piece, sizeof piece);
            if (tl + pl < sizeof text) { memcpy(text + tl, piece, pl); tl += pl; }
            text[tl] = 0;
            if (st == STYLE_PLAIN && strstr(text, "\nUser:")) break; /* the model starts the next turn */
            fwrite(piece, 1, pl, stdout);
            fflush(stdout);
            s = kvb_context_eval(c, &next, 1, logits, false);
        }
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
