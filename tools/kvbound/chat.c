/*
 * chat.c — `kvbound chat`: an interactive conversation with a bounded cache
 * (streaming by default), so it can go on for days. The prompt format comes
 * from the GGUF chat template, recognized by kvb_chat_detect (ChatML,
 * Llama 3, Llama 2, Mistral; unrecognized -> ChatML with a warning), or a
 * plain "User: / Assistant:" exchange for models without a template or
 * whose vocabulary lacks the template's control tokens. With --jinja the
 * template itself runs (kvb_chat_apply) over the conversation kept as JSON
 * messages, and each turn feeds what the new message adds to the render. Each
 * turn feeds only the new text; answers stream through kvb_detok, so a
 * character split across tokens is never printed half.
 * Commands: /stats, /reset, /save FILE, /load FILE, /quit. Works with stdin
 * as a pipe (no prompt marker is printed then). On a terminal, lines are
 * typed through a small line editor with history (lineedit.c), and Ctrl-C
 * during an answer stops that answer (a SIGINT handler sets a flag read at
 * every token); a second Ctrl-C before the first is seen ends the program. With --recall, what the
 * policy evicts goes to the cold tier and comes back when a turn's queries
 * score it (docs/RECALL.md); /save keeps the cold tier in the image, and
 * /load brings it back (in memory, spilling to --cold-dir beyond it).
 * cmd_chat: the options (chat_parse, the shared ones by cli_gen_option),
 * the set-up (chat_setup), then line by line (chat_loop) a /command
 * (chat_command) or a turn (chat_turn: its text read, then chat_answer);
 * struct chat holds the conversation and chat_free releases it.
 */
#include "cli.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Ctrl-C during a turn (stdin a terminal): the answer stops at its next token. */
static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig) {
    if (g_interrupted) { /* not seen yet (a long prefill, a stuck step): the default, the program ends */
        signal(sig, SIG_DFL);
        raise(sig);
    }
    g_interrupted = 1;
}

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
            "On a terminal a line can be edited: left/right, backspace, Delete, home/end, Ctrl-A/E (start, end),\n"
            "Ctrl-U/K (delete to the start, to the end), up/down for the lines entered before. Ctrl-C during an\n"
            "answer stops the answer (what was generated stays in the conversation) and the chat goes on; at the\n"
            "prompt it clears the line, and on an empty line it ends the chat, as Ctrl-D does.\n"
            "A turn that does not fit the context (policy full) is refused with a message and the\n"
            "conversation goes on; the exit status is then 1 at the end.\n"
            "\n"
            "  --template NAME  chatml, llama3, llama2, mistral, gemma or plain (default: detected from the\n"
            "                   model's chat template; unrecognized -> chatml with a warning;\n"
            "                   no template, or a vocabulary without its tokens -> plain\n"
            "                   User:/Assistant:, with a warning in the second case)\n"
            "  -sys, --system-prompt TEXT  system message for the first turn (default: the template's\n"
            "                   own, if any; also --system)\n"
            "  -p, --prompt TEXT  the first user turn, before those from stdin\n"
            "  -f, --file FILE  the first user turn from a file (- = stdin), less one trailing newline\n"
            "  --jinja          format turns with the model's own Jinja chat template (kvb_chat_apply, as\n"
            "                   'kvbound template -m' renders it): each turn feeds what the conversation\n"
            "                   with the new message adds to its rendering without it; a model without a\n"
            "                   template, or one kvbound cannot run, keeps the signature families (warned)\n"
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
    cli_keep_help(f, "the system message: the first turn's tokens before the user's words");
    cli_kv_types_help(f, "f16");
    cli_recall_help(f, 1024);
    cli_policy_help(f, 1024);
    return 0;
}

struct chat_opts {
    struct cli_gen_opts g; /* -m -z --no-mmap -t -ngl, --policy and the cache options, sampling, -n, -c */
    const char *forced, *system, *first_turn, *pfile;
    bool show_prompt, jinja;
};

/* A conversation: what it holds (chat_free releases it) and where it stands. */
struct chat {
    struct cli_gen gen;
    struct kvb_context_params cp;
    const struct kvb_vocab *vocab;
    enum kvb_chat_style style;
    bool plain, full, tty;
    const char *system; /* the first turn's system message, or NULL */
    char default_system[1024];
    char *fbuf;             /* the first turn read with -f */
    const char *first_turn; /* -p / -f: read before stdin */
    char *line;             /* the line read last */
    size_t cap;
    struct cli_lineedit le; /* on a terminal: the lines entered, for up/down */
    int32_t eos, eot;
    bool first;   /* the next turn starts the conversation (BOS, the system message) */
    bool refused; /* a turn or an answer did not fit the context: exit status 1 at the end */
    char stop_text[128]; /* the end-of-turn token the last answer ended with */
    /* --jinja: the conversation as a JSON array of messages, and the last answer's text */
    bool jinja;
    struct kvb_str conv, answer;
};

/* s appended to b; false when out of memory (b then takes nothing more until cut) */
static bool str_add(struct kvb_str *b, const char *s, size_t len) {
    kvb_str_put(b, s, len);
    return !kvb_str_error(b);
}

/* b cut back to its first n bytes, a failure forgotten (what failed is not taken) */
static void str_cut(struct kvb_str *b, size_t n) {
    b->n = n;
    b->err = KVB_OK;
    if (b->p) b->p[n] = 0;
}

/* {"role": ROLE, "content": TEXT} appended to the conversation's JSON array;
 * false (the conversation as it was) when out of memory */
static bool conv_add(struct chat *ch, const char *role, const char *text, size_t len) {
    struct kvb_str *b = &ch->conv;
    const size_t keep = b->n;
    kvb_str_puts(b, keep ? ", {\"role\": \"" : "{\"role\": \"");
    kvb_str_puts(b, role);
    kvb_str_puts(b, "\", \"content\": ");
    kvb_str_json(b, text, len, 0);
    kvb_str_puts(b, "}");
    if (!kvb_str_error(b)) return true;
    str_cut(b, keep);
    return false;
}

/* The conversation (plus one more message, when role) rendered by the
 * model's template: kvb_buffer_free; NULL after printing the error. */
static char *conv_render(struct chat *ch, bool add_generation_prompt) {
    char *js = malloc(ch->conv.n + 3), *out = NULL;
    if (!js) return NULL;
    js[0] = '[';
    if (ch->conv.n) memcpy(js + 1, ch->conv.p, ch->conv.n);
    js[ch->conv.n + 1] = ']';
    js[ch->conv.n + 2] = 0;
    struct kvb_chat_apply_params p = kvb_chat_apply_default_params();
    p.vocab = ch->vocab;
    p.messages_json = js;
    p.add_generation_prompt = add_generation_prompt;
    p.strip_bos = true; /* BOS is added by tokenizing the first turn */
    size_t len;
    if (kvb_chat_apply(&p, &out, &len) != KVB_OK) {
        fprintf(stderr, "kvbound chat: %s\n", kvb_last_error());
        out = NULL;
    }
    free(js);
    return out;
}

/* The text of the turn in ch->line under --jinja: what the conversation with
 * it (and the generation prompt) adds to its rendering without it, after
 * what the template writes behind the end-of-turn token the answer ended
 * with (or behind the answer, when it was cut). kvb_buffer_free; NULL: printed. */
static char *jinja_turn_text(struct chat *ch) {
    char *past = NULL;
    if (ch->conv.n && !(past = conv_render(ch, false))) return NULL;
    size_t keep = ch->conv.n;
    if (ch->first && ch->system && !conv_add(ch, "system", ch->system, strlen(ch->system))) goto oom;
    if (!conv_add(ch, "user", ch->line, strlen(ch->line))) goto oom;
    char *now = conv_render(ch, true);
    if (!now) {
        str_cut(&ch->conv, keep); /* the turn is not taken */
        kvb_buffer_free(past);
        return NULL;
    }
    const char *glue = "";
    size_t common = 0;
    if (past) {
        const char *mark = ch->stop_text[0] ? ch->stop_text : ch->answer.p;
        for (const char *q = mark && *mark ? strstr(past, mark) : NULL; q; q = strstr(q + 1, mark)) glue = q + strlen(mark);
        while (past[common] && past[common] == now[common]) common++;
    }
    size_t gl = strlen(glue), nl = strlen(now + common);
    char *t = malloc(gl + nl + 1);
    if (t) {
        memcpy(t, glue, gl);
        memcpy(t + gl, now + common, nl + 1);
    }
    kvb_buffer_free(past);
    kvb_buffer_free(now);
    if (!t) fprintf(stderr, "kvbound chat: out of memory\n");
    return t;
oom:
    kvb_buffer_free(past);
    fprintf(stderr, "kvbound chat: out of memory\n");
    return NULL;
}

static int chat_parse(struct chat_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    cli_gen_opts_init(&o->g, "chat", KVB_POLICY_STREAMING, 1024, 256);
    o->g.sp.temp = 0.7f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return chat_usage(stdout, &o->g.sp);
        if (!strcmp(a, "--show-prompt")) { o->show_prompt = true; continue; }
        if (!strcmp(a, "--jinja")) { o->jinja = true; continue; }
        const int r = cli_gen_option(&o->g, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!(v = cli_opt_value("chat", "--template --system -sys --system-prompt -p --prompt -f --file", argc, argv, &i))) return 2;
        if (!strcmp(a, "--template")) o->forced = v;
        else if (!strcmp(a, "--system") || !strcmp(a, "-sys") || !strcmp(a, "--system-prompt")) o->system = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) o->first_turn = v;
        else o->pfile = v; /* -f, --file */
    }
    if (!cli_model_required(&o->g.mo)) return 2;
    if (o->jinja && o->forced) { fprintf(stderr, "kvbound chat: --jinja uses the model's template; it excludes --template\n"); return 2; }
    if (o->first_turn && o->pfile) { fprintf(stderr, "kvbound chat: give the first turn with -p or with -f, not both\n"); return 2; }
    return CLI_GO_ON;
}

/* --keep -1: the tokens of the first turn's text before the user's own
 * words (BOS, the system message as the template renders it, the user
 * header), tokenized as that turn is; 0 without a system message. A
 * sentinel stands for the user's line. 1: an error (printed). */
static int chat_system_span(struct chat *ch, int32_t *keep) {
    static const char sentinel[] = "\x01kvbound-user\x01";
    *keep = 0;
    if (!ch->system) return 0;
    char *text = NULL;
    bool ok;
    if (ch->jinja) {
        const size_t n0 = ch->conv.n;
        ok = conv_add(ch, "system", ch->system, strlen(ch->system)) && conv_add(ch, "user", sentinel, strlen(sentinel)) &&
             (text = conv_render(ch, true)) != NULL;
        str_cut(&ch->conv, n0);
    } else {
        ok = kvb_chat_turn_text(ch->style, ch->system, sentinel, true, "", &text, NULL) == KVB_OK;
    }
    const char *at = ok ? strstr(text, sentinel) : NULL;
    int32_t *ids = NULL, n = 0;
    if (at && kvb_vocab_tokenize(ch->vocab, text, (size_t)(at - text), true, true, &ids, &n) == KVB_OK) {
        *keep = n;
        kvb_buffer_free(ids);
        kvb_buffer_free(text);
        return 0;
    }
    fprintf(stderr, "kvbound chat: --keep -1: %s\n", ok && !at ? "the template does not write the user's message" : kvb_last_error());
    kvb_buffer_free(text);
    return 1;
}

/* The first turn of -f, the model and the context. CLI_GO_ON, or the exit status (printed). */
static int chat_setup(const struct chat_opts *o, struct chat *ch) {
    ch->first_turn = o->first_turn;
    if (o->pfile) {
        size_t flen;
        if (!(ch->fbuf = cli_read_prompt_file(o->pfile, &flen))) return 1;
        ch->first_turn = ch->fbuf;
    }
    struct cli_gen *g = &ch->gen;
    if (cli_load_model(&o->g.mo, &g->m, &g->mi)) return 1;
    ch->cp = cli_gen_context_params(&o->g, &g->mi);
    cli_warn_threads(o->g.mo.threads);
    ch->cp.chunk = 128;
    if (o->g.pid == KVB_POLICY_FULL && o->g.ctx > g->mi.n_ctx_train)
        fprintf(stderr, "kvbound chat: warning: -c %d is beyond the model's trained length %d\n", o->g.ctx, g->mi.n_ctx_train);
    /* a compressing policy reads each turn whole before compressing: room for
     * turns of up to 4096 tokens on top of what it keeps (or --prefill-budget) */
    const struct kvb_policy_params *pp = &ch->cp.kv.policy;
    const int64_t turn = (int64_t)pp->budget + (pp->decode_budget ? pp->decode_budget : pp->budget) + 4096; /* what it keeps + a turn */
    ch->vocab = kvb_model_vocab(g->m);
    if (o->jinja) {
        struct kvb_vocab_info vi;
        kvb_vocab_get_info(ch->vocab, &vi);
        struct kvb_chat_apply_params p = kvb_chat_apply_default_params();
        char *probe = NULL, why[512] = "";
        size_t pl;
        p.vocab = ch->vocab;
        p.messages_json = "[{\"role\": \"user\", \"content\": \"hi\"}]";
        p.fallback = true;
        p.why = why;
        p.why_cap = sizeof why;
        const kvb_status ps = vi.chat_template ? kvb_chat_apply(&p, &probe, &pl) : KVB_FALLBACK;
        kvb_buffer_free(probe);
        if (ps == KVB_OK) {
            ch->jinja = true;
            ch->style = KVB_CHAT_CHATML; /* not plain: end-of-turn tokens end answers and stay in the cache */
        } else
            fprintf(stderr, "kvbound chat: warning: --jinja: %s; using the signature families\n",
                    !vi.chat_template ? "the model has no chat template" : ps == KVB_FALLBACK ? why : kvb_last_error());
    }
    if (!ch->jinja && !cli_chat_style("chat", ch->vocab, o->forced, &ch->style)) return 2;
    ch->plain = ch->style == KVB_CHAT_PLAIN;
    ch->full = o->g.pid == KVB_POLICY_FULL;
    ch->system = o->system ? o->system : ch->jinja ? NULL : cli_chat_default_system(ch->vocab, ch->style, ch->default_system, sizeof ch->default_system);
    if (o->g.keep < 0 && chat_system_span(ch, &ch->cp.kv.keep)) return 1; /* --keep -1: the system message's span */
    ch->cp.kv_pool_bytes = kvb_model_kv_seq_bytes(g->m, &ch->cp.kv, ch->cp.n_ctx, turn, ch->cp.chunk); /* the span on top */
    if (cli_gen_start(g, &ch->cp, &o->g.sp)) return 1;
    ch->eos = kvb_vocab_special(ch->vocab, KVB_SPECIAL_EOS);
    ch->eot = kvb_vocab_special(ch->vocab, KVB_SPECIAL_EOT);
    ch->tty = isatty(0);
    ch->first = true;
    if (ch->tty) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint; /* no SA_RESTART: nothing blocks while generating */
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
    }
    fprintf(stderr, "kvbound chat: %s, template %s, policy %s (%s %d); /stats /reset /save /load /quit\n", g->mi.arch,
            ch->jinja ? "jinja (the model's)" : kvb_chat_style_name(ch->style),
            kvb_policy_name(o->g.pid), ch->full ? "context" : "budget", ch->full ? ch->cp.n_ctx : ch->cp.kv.policy.budget);
    return CLI_GO_ON;
}

/* The next user line into ch->line, without its line end: the first turn
 * of -p / -f, then stdin's lines. -1: end of input; -2: out of memory (printed). */
static ssize_t chat_read(struct chat *ch) {
    if (ch->first_turn) {
        free(ch->line);
        ch->line = strdup(ch->first_turn);
        ch->first_turn = NULL;
        if (!ch->line) { fprintf(stderr, "kvbound chat: out of memory\n"); return -2; }
        ch->cap = strlen(ch->line) + 1;
        return (ssize_t)strlen(ch->line);
    }
    fflush(stdout);
    const ssize_t len = cli_lineedit_read(&ch->le, ch->tty ? "> " : "", &ch->line, &ch->cap);
    if (len == -2) fprintf(stderr, "kvbound chat: out of memory\n");
    return len;
}

static void chat_stats(const struct chat *ch, const struct chat_opts *o) {
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(kvb_context_cache(ch->gen.c), &cs);
    printf("[tokens seen %lld, retained %lld in all streams (longest %d), KV %.2f MB (peak %.2f MB), policy %s]\n",
           (long long)kvb_context_n_past(ch->gen.c), (long long)cs.slots, cs.slots_max, cs.bytes_used / 1e6, cs.bytes_peak / 1e6, kvb_policy_name(o->g.pid));
    if (cs.window_layers) cli_window_stats(stdout, &cs, ch->gen.mi.n_layer, ch->gen.mi.n_kv_shared);
    if (ch->cp.kv.keep > 0)
        printf("[keep %d: positions 0..%lld pinned in every stream]\n", (int)ch->cp.kv.keep,
               (long long)cli_pinned_kept(kvb_context_cache(ch->gen.c), ch->cp.kv.keep, kvb_context_n_past(ch->gen.c)) - 1);
    if (o->g.rec.on)
        printf("[recall: %lld cold pages (%.1f MiB in memory, %.1f MiB in file), %lld dropped; recall area %.1f MiB; %lld pages loaded]\n",
               (long long)cs.cold_pages, (double)cs.cold_mem_bytes / (1 << 20), (double)cs.cold_file_bytes / (1 << 20),
               (long long)cs.cold_dropped_pages, (double)cs.recall_bytes / (1 << 20), (long long)cs.recall_loads);
}

/* A /command line: /stats, /reset, /save FILE, /load FILE; false for /quit. */
static bool chat_command(struct chat *ch, const struct chat_opts *o) {
    const char *line = ch->line;
    struct kvb_context *c = ch->gen.c;
    if (!strcmp(line, "/quit")) return false;
    if (!strcmp(line, "/stats")) {
        chat_stats(ch, o);
    } else if (!strcmp(line, "/reset")) {
        kvb_context_reset(c);
        ch->first = true;
        ch->stop_text[0] = 0;
        ch->gen.hist.n = 0;
        str_cut(&ch->conv, 0);
        printf("[conversation reset]\n");
    } else if (!strncmp(line, "/save ", 6)) {
        if (kvb_context_save(c, line + 6) == KVB_OK) printf("[saved %s]\n", line + 6);
        else printf("[save failed: %s]\n", kvb_last_error());
    } else if (!strncmp(line, "/load ", 6)) {
        if (kvb_context_load(c, line + 6) == KVB_OK) {
            printf("[loaded %s: %lld tokens seen]\n", line + 6, (long long)kvb_context_n_past(c));
            ch->first = false;
            str_cut(&ch->conv, 0); /* --jinja: the saved conversation's messages are not in the image */
        }
        else printf("[load failed: %s]\n", kvb_last_error());
    } else {
        printf("[unknown command %s: /stats /reset /save FILE /load FILE /quit]\n", line);
    }
    fflush(stdout);
    return true;
}

/* The answer to the turn just read (when s is KVB_OK): sampled and printed
 * up to -n tokens or the end of turn, whose token stays in the cache.
 * Returns the last status. */
static kvb_status chat_answer(struct chat *ch, const struct chat_opts *o, kvb_status s) {
    struct cli_gen *g = &ch->gen;
    char text[8192], piece[512];
    size_t tl = 0;
    struct kvb_detok dt = {0};
    bool cut = false; /* the context filled during the answer */
    ch->stop_text[0] = 0;
    str_cut(&ch->answer, 0);
    bool stopped = false; /* Ctrl-C */
    for (int k = 0; s == KVB_OK && (o->g.n_predict < 0 || k < o->g.n_predict); k++) {
        if (g_interrupted) { stopped = true; break; }
        int32_t next = kvb_sampler_sample(g->smp, g->logits, g->hist.ids, g->hist.n);
        if (ch->full && kvb_context_n_past(g->c) + 1 > ch->cp.n_ctx) { cut = true; break; }
        cli_history_push(&g->hist, next);
        if (next == ch->eos || next == ch->eot || next == kvb_vocab_special(ch->vocab, KVB_SPECIAL_BOS)) {
            if (ch->plain) break;
            size_t sl = kvb_vocab_token_bytes(ch->vocab, next, true, ch->stop_text, sizeof ch->stop_text - 1);
            ch->stop_text[sl < sizeof ch->stop_text ? sl : sizeof ch->stop_text - 1] = 0;
            s = kvb_context_eval(g->c, &next, 1, g->logits, false); /* keep the end-of-turn token in the cache */
            break;
        }
        size_t pl = kvb_detok_push(ch->vocab, &dt, next, false, piece, sizeof piece);
        if (pl > sizeof piece) pl = 0; /* a token longer than 512 bytes: not shown */
        if (ch->jinja && !str_add(&ch->answer, piece, pl)) s = KVB_ERR_NOMEM;
        if (tl + pl < sizeof text) { memcpy(text + tl, piece, pl); tl += pl; }
        text[tl] = 0;
        if (ch->plain && strstr(text, "\nUser:")) break; /* the model starts the next turn */
        fwrite(piece, 1, pl, stdout);
        fflush(stdout);
        s = kvb_context_eval(g->c, &next, 1, g->logits, false);
    }
    const size_t fl = kvb_detok_flush(&dt, piece, sizeof piece);
    fwrite(piece, 1, fl, stdout);
    if (ch->jinja && (!str_add(&ch->answer, piece, fl) ||
                      !conv_add(ch, "assistant", ch->answer.p ? ch->answer.p : "", ch->answer.n)) && s == KVB_OK) {
        fprintf(stderr, "kvbound chat: out of memory for the conversation\n");
        s = KVB_ERR_NOMEM;
    }
    printf("\n");
    fflush(stdout);
    if (stopped) fprintf(stderr, "[answer stopped (Ctrl-C); the chat goes on]\n");
    g_interrupted = 0;
    if (cut) {
        fprintf(stderr, "kvbound chat: the answer stops here: the context of %d tokens is full (policy full keeps every token; /reset, a "
                        "larger -c, or a bounded --policy)\n", ch->cp.n_ctx);
        ch->refused = true;
    }
    return s;
}

/* One user turn: its text read into the cache, then the answer. A turn
 * that does not fit is refused whole, the cache as it was. 1: an error (printed). */
static int chat_turn(struct chat *ch, const struct chat_opts *o) {
    struct cli_gen *g = &ch->gen;
    char *turn = NULL;
    const size_t conv_keep = ch->conv.n; /* --jinja: the messages before this turn */
    if (ch->jinja) {
        if (!(turn = jinja_turn_text(ch))) return 1;
    } else if (kvb_chat_turn_text(ch->style, ch->system, ch->line, ch->first, ch->stop_text, &turn, NULL) != KVB_OK) {
        fprintf(stderr, "kvbound chat: %s\n", kvb_last_error());
        return 1;
    }
    if (o->show_prompt) fprintf(stderr, "[prompt: %s]\n", turn);
    g_interrupted = 0; /* a Ctrl-C from here on stops this turn's answer */
    int32_t *ids, n;
    /* BOS once, at the start (later "<s>" texts of Llama 2 become BOS by parse_special) */
    kvb_status s = kvb_vocab_tokenize(ch->vocab, turn, strlen(turn), ch->first, true, &ids, &n);
    kvb_buffer_free(turn);
    if (s != KVB_OK) { fprintf(stderr, "kvbound chat: %s\n", kvb_last_error()); return 1; }
    const int64_t seen = kvb_context_n_past(g->c);
    if (ch->full && seen + n > ch->cp.n_ctx) { /* refused whole, before anything is read: the cache is as it was */
        fprintf(stderr, "kvbound chat: this turn is not read: its %d tokens do not fit the context (%lld of %d used; policy full keeps "
                        "every token): /reset, a larger -c, or a bounded --policy; the conversation goes on\n",
                n, (long long)seen, ch->cp.n_ctx);
        kvb_buffer_free(ids);
        ch->refused = true;
        str_cut(&ch->conv, conv_keep); /* --jinja: nor is its message */
        return 0;
    }
    for (int32_t k = 0; k < n; k++) cli_history_push(&g->hist, ids[k]);
    s = kvb_context_prompt(g->c, ids, n, g->logits, false); /* the turn's text is a prompt: compressed here */
    kvb_buffer_free(ids);
    if (s == KVB_OK && (kvb_policy_compresses(o->g.pid) || o->g.po.compress_prompt)) {
        struct kvb_cache_stats ps;
        kvb_cache_get_stats(kvb_context_cache(g->c), &ps);
        fprintf(stderr, "[compressed prompt: %.1f tokens per stream (min %d, max %d) of %lld seen]\n",
                (double)ps.slots / ((double)(g->mi.n_layer - g->mi.n_rec_layers - g->mi.n_kv_shared > 1 ? g->mi.n_layer - g->mi.n_rec_layers - g->mi.n_kv_shared : 1) * g->mi.n_head_kv), ps.slots_min, ps.slots_max, (long long)kvb_context_n_past(g->c));
    }
    ch->first = false;
    if (chat_answer(ch, o, s) == KVB_OK) return 0;
    fprintf(stderr, "kvbound: %s\n", kvb_last_error());
    return 1;
}

/* Turns and commands until /quit or the end of input: the exit status. */
static int chat_loop(struct chat *ch, const struct chat_opts *o) {
    for (;;) {
        const ssize_t len = chat_read(ch);
        if (len == -2) return 1;
        if (len < 0) break;
        if (!len) continue;
        if (ch->line[0] == '/') {
            if (!chat_command(ch, o)) break;
        } else if (chat_turn(ch, o)) {
            return 1;
        }
    }
    return ch->refused ? 1 : 0;
}

static void chat_free(struct chat *ch) {
    if (ch->tty) signal(SIGINT, SIG_DFL);
    cli_lineedit_free(&ch->le);
    free(ch->line);
    free(ch->fbuf);
    kvb_str_free(&ch->conv);
    kvb_str_free(&ch->answer);
    cli_gen_free(&ch->gen);
}

int cmd_chat(int argc, char **argv) {
    struct chat_opts o;
    int rc = chat_parse(&o, argc, argv);
    if (rc != CLI_GO_ON) return rc;
    struct chat ch;
    memset(&ch, 0, sizeof ch);
    rc = chat_setup(&o, &ch);
    if (rc == CLI_GO_ON) rc = chat_loop(&ch, &o);
    chat_free(&ch);
    return rc;
}
