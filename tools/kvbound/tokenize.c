/*
 * tokenize.c — `kvbound tokenize`: text to ids with a model's tokenizer, in
 * llama-tokenize's output formats so the two can be diffed directly:
 * "[1, 2, 3]" with --ids, else one "    id -> 'piece'" line per token.
 * Only the GGUF metadata is read, so vocab-only files work.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static int tokenize_usage(FILE *f) {
    fprintf(f,
            "usage: kvbound tokenize -m MODEL.gguf (-p TEXT | -f FILE | --stdin) [options]\n"
            "\n"
            "  -m, --model FILE       GGUF model or vocab-only GGUF (tokenizer.ggml.* keys)\n"
            "  -p, --prompt TEXT      text to tokenize\n"
            "  -f, --file FILE        read the text from a file\n"
            "      --stdin            read the text from standard input\n"
            "      --ids              print only the ids, as [1, 2, 3]\n"
            "      --no-bos           do not add BOS/EOS even if the vocabulary asks for them\n"
            "      --no-parse-special control-token text (\"<|im_start|>\") stays plain text\n"
            "      --show-count       print the number of tokens at the end\n"
            "      --chat ROLE:TEXT   add a chat message (repeatable); the conversation is formatted as\n"
            "                         'kvbound chat' formats it (the model's template, and its default\n"
            "                         system message when none is given), with an assistant header\n"
            "      --template NAME    chatml, llama3, llama2, mistral or plain (User:/Assistant: lines)\n"
            "                         (default: the model's template, as detected by 'kvbound chat')\n");
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL, *tmpl = NULL;
    bool from_stdin = false, ids_only = false, add_special = true, parse_special = true, show_count = false;
    struct kvb_chat_message msgs[64];
    int n_msgs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return tokenize_usage(stdout);
        if (!strcmp(a, "--ids")) { ids_only = true; continue; }
        if (!strcmp(a, "--no-bos")) { add_special = false; continue; }
        if (!strcmp(a, "--no-parse-special")) { parse_special = false; continue; }
        if (!strcmp(a, "--show-count")) { show_count = true; continue; }
        if (!strcmp(a, "--stdin")) { from_stdin = true; continue; }
        if (!(v = cli_opt_value("tokenize", "-m --model -p --prompt -f --file --template --chat", argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) file = v;
        else if (!strcmp(a, "--template")) tmpl = v;
        else if (!strcmp(a, "--chat")) {
            const char *colon = strchr(v, ':');
            if (!colon || n_msgs == 64) { fprintf(stderr, "kvbound: --chat wants ROLE:TEXT (at most 64), got '%s'\n", v); return 2; }
            char *role = malloc((size_t)(colon - v) + 1);
            if (!role) return 1;
            memcpy(role, v, (size_t)(colon - v));
            role[colon - v] = 0;
            msgs[n_msgs++] = (struct kvb_chat_message){role, colon + 1};
        } else {
            fprintf(stderr, "kvbound: tokenize: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    int sources = !!prompt + !!file + from_stdin + (n_msgs > 0);
    if (!model || sources != 1) {
        fprintf(stderr, "kvbound: tokenize needs -m MODEL and exactly one of -p, -f, --stdin, --chat (see --help)\n");
        return 2;
    }
    struct kvb_vocab *vocab;
    if (kvb_vocab_load(model, &vocab) != KVB_OK) {
        fprintf(stderr, "kvbound: tokenize: %s\n", kvb_last_error());
        for (int i = 0; i < n_msgs; i++) free((void *)msgs[i].role);
        return 1;
    }
    char *text = NULL;
    size_t len = 0;
    int fail_rc = 1; /* 2: a usage error (--template, a message) */
    if (prompt) {
        len = strlen(prompt);
        text = malloc(len + 1);
        if (text) memcpy(text, prompt, len + 1);
    } else if (file || from_stdin) {
        text = cli_read_file(file ? file : "-", (size_t)1 << 31, file ? "text file" : "standard input", &len);
    } else { /* --chat: as kvbound chat formats the conversation */
        enum kvb_chat_style style;
        char *chat, sys_buf[1024];
        struct kvb_chat_message all[65];
        int n_all = 0;
        bool has_system = false;
        for (int i = 0; i < n_msgs; i++) has_system |= !strcmp(msgs[i].role, "system");
        fail_rc = 2;
        if (cli_chat_style("tokenize", vocab, tmpl, &style)) {
            const char *sys = has_system ? NULL : cli_chat_default_system(vocab, style, sys_buf, sizeof sys_buf);
            if (sys) all[n_all++] = (struct kvb_chat_message){"system", sys};
            for (int i = 0; i < n_msgs; i++) all[n_all++] = msgs[i];
            if (kvb_chat_format(style, all, n_all, true, &chat, &len) == KVB_OK) {
                fail_rc = 1;
                text = malloc(len + 1);
                if (text) memcpy(text, chat, len + 1);
                kvb_buffer_free(chat);
            } else {
                fprintf(stderr, "kvbound: tokenize: %s\n", kvb_last_error());
            }
        }
    }
    for (int i = 0; i < n_msgs; i++) free((void *)msgs[i].role);
    if (!text) {
        kvb_vocab_free(vocab);
        return fail_rc;
    }
    int32_t *ids, n;
    kvb_status st = kvb_vocab_tokenize(vocab, text, len, add_special, parse_special, &ids, &n);
    free(text);
    if (st != KVB_OK) {
        fprintf(stderr, "kvbound: tokenize: %s\n", kvb_last_error());
        kvb_vocab_free(vocab);
        return 1;
    }
    int rc = 0;
    if (ids_only) { /* one big buffer: printf per token would dominate the run time */
        size_t cap = (size_t)n * 16 + 64, at = 0;
        char *o = malloc(cap);
        if (o) {
            o[at++] = '[';
            for (int32_t i = 0; i < n; i++) at += (size_t)snprintf(o + at, cap - at, i ? ", %d" : "%d", ids[i]);
            o[at++] = ']';
            o[at++] = '\n';
            fwrite(o, 1, at, stdout);
            free(o);
        } else {
            fprintf(stderr, "kvbound: tokenize: out of memory for the output\n");
            rc = 1;
        }
    } else {
        char piece[1024];
        for (int32_t i = 0; i < n; i++) {
            size_t pl = kvb_vocab_token_bytes(vocab, ids[i], true, piece, sizeof piece - 1);
            piece[pl < sizeof piece - 1 ? pl : sizeof piece - 1] = 0;
            printf("%6d -> '%s'\n", ids[i], piece);
        }
    }
    if (show_count && rc == 0) printf("Total number of tokens: %d\n", n);
    kvb_buffer_free(ids);
    kvb_vocab_free(vocab);
    return rc;
}
