/*
 * tokenize.c — `kvbound tokenize`: text to ids with a model's tokenizer, in
 * llama-tokenize's output formats so the two can be diffed directly:
 * "[1, 2, 3]" with --ids, else one "    id -> 'piece'" line per token.
 * Only the GGUF metadata is read, so vocab-only files work. The options
 * parse into struct tok_opts (which owns the --chat roles); the text comes
 * from -p, -f, --stdin or the --chat messages formatted as `chat` would.
 */
#include "cli.h"

#include <stdio.h>
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
            "      --template NAME    chatml, llama3, llama2, mistral, gemma or plain (User:/Assistant: lines)\n"
            "                         (default: the model's template, as detected by 'kvbound chat')\n"
            "      --jinja            format --chat with the model's own Jinja chat template instead, as\n"
            "                         'kvbound template -m MODEL' renders it (its leading BOS text dropped\n"
            "                         when BOS is added)\n");
    return 0;
}

struct tok_opts {
    struct cli_model_opts mo; /* -m */
    const char *prompt, *file, *tmpl;
    bool from_stdin, ids_only, add_special, parse_special, show_count, jinja;
    struct kvb_chat_message msgs[64]; /* --chat; each role allocated, freed by cmd_tokenize */
    int n_msgs;
};

/* --chat ROLE:TEXT; 2 or 1: the exit status (printed), 0: taken. */
static int tok_chat_option(struct tok_opts *o, const char *v) {
    const char *colon = strchr(v, ':');
    if (!colon || o->n_msgs == 64) { fprintf(stderr, "kvbound: --chat wants ROLE:TEXT (at most 64), got '%s'\n", v); return 2; }
    char *role = malloc((size_t)(colon - v) + 1);
    if (!role) return 1;
    memcpy(role, v, (size_t)(colon - v));
    role[colon - v] = 0;
    o->msgs[o->n_msgs++] = (struct kvb_chat_message){role, colon + 1};
    return 0;
}

static int tok_parse(struct tok_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    cli_model_init(&o->mo, "tokenize", 0, 0);
    o->add_special = o->parse_special = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return tokenize_usage(stdout);
        if (!strcmp(a, "--ids")) { o->ids_only = true; continue; }
        if (!strcmp(a, "--no-bos")) { o->add_special = false; continue; }
        if (!strcmp(a, "--no-parse-special")) { o->parse_special = false; continue; }
        if (!strcmp(a, "--show-count")) { o->show_count = true; continue; }
        if (!strcmp(a, "--stdin")) { o->from_stdin = true; continue; }
        if (!strcmp(a, "--jinja")) { o->jinja = true; continue; }
        const int r = cli_model_option(&o->mo, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!(v = cli_opt_value("tokenize", "-p --prompt -f --file --template --chat", argc, argv, &i))) return 2;
        if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) o->prompt = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) o->file = v;
        else if (!strcmp(a, "--template")) o->tmpl = v;
        else {
            const int cr = tok_chat_option(o, v); /* --chat */
            if (cr) return cr;
        }
    }
    int sources = !!o->prompt + !!o->file + o->from_stdin + (o->n_msgs > 0);
    if (!o->mo.path || sources != 1) {
        fprintf(stderr, "kvbound: tokenize needs -m MODEL and exactly one of -p, -f, --stdin, --chat (see --help)\n");
        return 2;
    }
    if (o->jinja && (!o->n_msgs || o->tmpl)) {
        fprintf(stderr, "kvbound: tokenize: --jinja formats --chat messages and excludes --template (see --help)\n");
        return 2;
    }
    return CLI_GO_ON;
}

/* --chat --jinja: the messages as JSON through kvb_chat_apply, the model's
 * template (its signature family as the fallback, said on stderr) */
static int tok_jinja_text(const struct tok_opts *o, const struct kvb_vocab *vocab, char **text, size_t *len) {
    struct kvb_str b = {0};
    char *js, *chat = NULL, why[512] = "";
    kvb_str_putc(&b, '[');
    for (int i = 0; i < o->n_msgs; i++) {
        kvb_str_printf(&b, "%s{\"role\": ", i ? ", " : "");
        kvb_str_json(&b, o->msgs[i].role, strlen(o->msgs[i].role), 0);
        kvb_str_puts(&b, ", \"content\": ");
        kvb_str_json(&b, o->msgs[i].content, strlen(o->msgs[i].content), 0);
        kvb_str_putc(&b, '}');
    }
    kvb_str_putc(&b, ']');
    if (!(js = kvb_str_finish(&b, NULL))) { fprintf(stderr, "kvbound: tokenize: out of memory\n"); return 1; }
    struct kvb_chat_apply_params p = kvb_chat_apply_default_params();
    p.vocab = vocab;
    p.messages_json = js;
    p.fallback = true;
    p.strip_bos = o->add_special; /* the template writes bos_token; tokenizing adds BOS again */
    p.why = why;
    p.why_cap = sizeof why;
    kvb_status st = kvb_chat_apply(&p, &chat, len);
    kvb_buffer_free(js);
    if (st != KVB_OK && st != KVB_FALLBACK) {
        fprintf(stderr, "kvbound: tokenize: %s\n", kvb_last_error());
        return 1;
    }
    if (st == KVB_FALLBACK) fprintf(stderr, "kvbound: tokenize: note: %s\n", why);
    *text = malloc(*len + 1);
    if (*text) memcpy(*text, chat, *len + 1);
    kvb_buffer_free(chat);
    return *text ? CLI_GO_ON : 1;
}

/* The --chat conversation as `kvbound chat` formats it (the model's
 * template, its default system message when none is given, an assistant
 * header): CLI_GO_ON, or the exit status (printed). */
static int tok_chat_text(const struct tok_opts *o, const struct kvb_vocab *vocab, char **text, size_t *len) {
    enum kvb_chat_style style;
    char *chat, sys_buf[1024];
    struct kvb_chat_message all[65];
    int n_all = 0;
    bool has_system = false;
    for (int i = 0; i < o->n_msgs; i++) has_system |= !strcmp(o->msgs[i].role, "system");
    if (!cli_chat_style("tokenize", vocab, o->tmpl, &style)) return 2;
    const char *sys = has_system ? NULL : cli_chat_default_system(vocab, style, sys_buf, sizeof sys_buf);
    if (sys) all[n_all++] = (struct kvb_chat_message){"system", sys};
    for (int i = 0; i < o->n_msgs; i++) all[n_all++] = o->msgs[i];
    if (kvb_chat_format(style, all, n_all, true, &chat, len) != KVB_OK) {
        fprintf(stderr, "kvbound: tokenize: %s\n", kvb_last_error());
        return 2;
    }
    *text = malloc(*len + 1);
    if (*text) memcpy(*text, chat, *len + 1);
    kvb_buffer_free(chat);
    return *text ? CLI_GO_ON : 1;
}

/* The vocabulary and the text to encode: CLI_GO_ON, or the exit status (printed). */
static int tok_load(const struct tok_opts *o, struct kvb_vocab **vocab, char **text, size_t *len) {
    if (kvb_vocab_load(o->mo.path, vocab) != KVB_OK) {
        *vocab = NULL;
        fprintf(stderr, "kvbound: tokenize: %s\n", kvb_last_error());
        return 1;
    }
    if (o->prompt) {
        *len = strlen(o->prompt);
        *text = malloc(*len + 1);
        if (*text) memcpy(*text, o->prompt, *len + 1);
    } else if (o->file || o->from_stdin) {
        *text = cli_read_file(o->file ? o->file : "-", (size_t)1 << 31, o->file ? "text file" : "standard input", len);
    } else if (o->jinja) {
        return tok_jinja_text(o, *vocab, text, len);
    } else {
        return tok_chat_text(o, *vocab, text, len);
    }
    return *text ? CLI_GO_ON : 1;
}

/* The ids as [1, 2, 3]; -1: printed. */
static int tok_print_ids(const int32_t *ids, int32_t n) {
    size_t cap = (size_t)n * 16 + 64, at = 0; /* one big buffer: printf per token would dominate the run time */
    char *o = malloc(cap);
    if (!o) { fprintf(stderr, "kvbound: tokenize: out of memory for the output\n"); return -1; }
    o[at++] = '[';
    for (int32_t i = 0; i < n; i++) at += (size_t)snprintf(o + at, cap - at, i ? ", %d" : "%d", ids[i]);
    o[at++] = ']';
    o[at++] = '\n';
    fwrite(o, 1, at, stdout);
    free(o);
    return 0;
}

/* Encodes the text and prints the ids (--ids) or "id -> 'piece'" lines; the exit status. */
static int tok_print(const struct tok_opts *o, const struct kvb_vocab *vocab, const char *text, size_t len) {
    int32_t *ids, n;
    if (kvb_vocab_tokenize(vocab, text, len, o->add_special, o->parse_special, &ids, &n) != KVB_OK) {
        fprintf(stderr, "kvbound: tokenize: %s\n", kvb_last_error());
        return 1;
    }
    int rc = 0;
    if (o->ids_only) {
        if (tok_print_ids(ids, n)) rc = 1;
    } else {
        char piece[1024];
        for (int32_t i = 0; i < n; i++) {
            size_t pl = kvb_vocab_token_bytes(vocab, ids[i], true, piece, sizeof piece - 1);
            piece[pl < sizeof piece - 1 ? pl : sizeof piece - 1] = 0;
            printf("%6d -> '%s'\n", ids[i], piece);
        }
    }
    if (o->show_count && rc == 0) printf("Total number of tokens: %d\n", n);
    kvb_buffer_free(ids);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    struct tok_opts o;
    struct kvb_vocab *vocab = NULL;
    char *text = NULL;
    size_t len = 0;
    int rc = tok_parse(&o, argc, argv);
    if (rc == CLI_GO_ON) rc = tok_load(&o, &vocab, &text, &len);
    if (rc == CLI_GO_ON) rc = tok_print(&o, vocab, text, len);
    for (int i = 0; i < o.n_msgs; i++) free((void *)o.msgs[i].role);
    free(text);
    kvb_vocab_free(vocab);
    return rc;
}
