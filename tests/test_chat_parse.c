/*
 * test_chat_parse.c — kvb_chat_parser (src/chat/chat_parse.c): model
 * outputs of every format parsed into the exact OpenAI message; the same
 * texts streamed split at every byte boundary, at each single boundary and
 * at random, whose deltas must concatenate to the one-shot message; format
 * names and errors; kvb_chat_syntax_detect over the official templates; and
 * the round trip through them: an assistant message with tool calls rendered
 * by kvb_chat_apply, its part of the prompt parsed back into the same calls.
 * The templates are llama.cpp's models/templates, named by
 * KVB_LLAMA_TEMPLATES=DIR (those cases are skipped without it).
 */
#include "testing.h"

#include <ctype.h>
#include <time.h>

#include "fuzz/fuzz_chat_parse.c" /* chat_parse_split, chat_parse_check, LLVMFuzzerTestOneInput */

/* like FAILF, without leaving the case (so every failure shows, and nothing leaks) */
#define FAILC(...)                                   \
    do {                                             \
        printf("  %s:%d: ", __FILE__, __LINE__);     \
        printf(__VA_ARGS__);                         \
        printf("\n");                                \
        t_case_failed = 1;                           \
    } while (0)

struct pcase {
    const char *name;
    enum kvb_tool_format fmt;
    bool think, think_open;
    const char *text, *want;
};

#include "chat_parse_cases.h"

static char *parse_once(const struct kvb_chat_syntax *syn, const char *text, size_t n) {
    struct kvb_chat_parser *p;
    char *d = NULL, *m = NULL;
    if (kvb_chat_parser_new(syn, &p)) return NULL;
    kvb_chat_parser_seed(p, 7);
    if (kvb_chat_parser_feed(p, text, n, true, &d) == KVB_OK) kvb_chat_parser_message(p, &m);
    kvb_buffer_free(d);
    kvb_chat_parser_free(p);
    return m;
}

/* the streaming invariant for one text: every byte, each single cut, random cuts */
static void check_streams(const struct kvb_chat_syntax *syn, const char *text, size_t n, const char *name) {
    size_t *cuts = malloc(sizeof *cuts * (n + 1));
    const char *why;
    int k = 0;
    for (size_t i = 1; i < n; i++) cuts[k++] = i;
    if (chat_parse_split(syn, text, n, cuts, k, NULL, &why)) FAILC("%s: byte by byte: %s", name, why);
    for (size_t i = 0; i <= n; i++) {
        cuts[0] = i;
        if (chat_parse_split(syn, text, n, cuts, 1, NULL, &why)) {
            FAILC("%s: split at %zu: %s", name, i, why);
            break;
        }
    }
    uint64_t s = 0x1234567ull + n;
    for (int r = 0; r < 20; r++) {
        k = 0;
        for (size_t i = 1; i < n; i++)
            if (cp_rand(&s) % 5 == 0) cuts[k++] = i;
        if (chat_parse_split(syn, text, n, cuts, k, NULL, &why)) {
            FAILC("%s: random split %d: %s", name, r, why);
            break;
        }
    }
    free(cuts);
}

TEST(formats) {
    for (size_t i = 0; i < sizeof k_cases / sizeof *k_cases; i++) {
        const struct pcase *c = &k_cases[i];
        struct kvb_chat_syntax syn = {c->fmt, c->think, c->think_open};
        char *m = parse_once(&syn, c->text, strlen(c->text));
        if (!m) FAILC("%s: no message", c->name);
        else if (!c->want || strcmp(m, c->want)) FAILC("%s:\n   got %s\n  want %s", c->name, m, c->want ? c->want : "?");
        kvb_buffer_free(m);
        check_streams(&syn, c->text, strlen(c->text), c->name);
    }
}

/* deltas of a stream, one per piece */
TEST(deltas) {
    struct kvb_chat_syntax syn = {KVB_TOOLS_HERMES, true, false};
    static const char *const pieces[] = {"<thi", "nk>\nR", "\n</think>\n\nHi ", "<tool", "_call>\n{\"name\": \"f\", \"argu", "ments\": {\"a\": 1}}\n</tool_call>", ""};
    static const char *const want[] = {NULL, "{\"reasoning_content\":\"R\"}", "{\"content\":\"Hi\"}", NULL, NULL,
                                       "{\"tool_calls\":[{\"index\":0,\"id\":\"call_", NULL};
    struct kvb_chat_parser *p;
    CHECK_OK(kvb_chat_parser_new(&syn, &p));
    for (int i = 0; i < 7; i++) {
        char *d = (char *)1;
        CHECK_OK(kvb_chat_parser_feed(p, pieces[i], strlen(pieces[i]), i == 6, &d));
        if (!want[i] ? d != NULL : !d || strncmp(d, want[i], strlen(want[i]))) FAILC("piece %d: delta %s, want %s", i, d ? d : "NULL", want[i] ? want[i] : "NULL");
        if (i == 5 && d && !strstr(d, "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]}")) FAILC("call delta %s", d);
        kvb_buffer_free(d);
    }
    char *d = (char *)1;
    CHECK_STATUS(kvb_chat_parser_feed(p, "x", 1, false, &d), KVB_ERR_INVALID);
    CHECK(d == NULL);
    CHECK_OK(kvb_chat_parser_feed(p, "", 0, true, &d));
    CHECK(d == NULL);
    kvb_chat_parser_free(p);
}

/* Issue 47: a forced call cut by max_tokens (kvb_chat_parser_cut) comes back as a call, never as markup in content;
 * without the cut, an unfinished call stays content as before. */
static char *parse_cut(enum kvb_tool_format f, const char *pre, const char *text, bool cut, const char *hint) {
    struct kvb_chat_syntax syn = {f, false, false};
    struct kvb_chat_parser *p;
    char *d = NULL, *m = NULL;
    if (kvb_chat_parser_new(&syn, &p)) return NULL;
    kvb_chat_parser_seed(p, 7);
    if (kvb_chat_parser_feed(p, pre, strlen(pre), false, &d) == KVB_OK) {
        kvb_buffer_free(d);
        d = NULL;
        if (cut) kvb_chat_parser_cut(p, hint);
        if (kvb_chat_parser_feed(p, text, strlen(text), true, &d) == KVB_OK) kvb_chat_parser_message(p, &m);
    }
    kvb_buffer_free(d);
    kvb_chat_parser_free(p);
    return m;
}

TEST(cut_forced_call) {
    static const struct {
        enum kvb_tool_format f;
        const char *pre, *text, *hint, *want; /* want: the message's tool_calls part */
    } cases[] = {
        {KVB_TOOLS_HERMES, "<tool_call>\n", "{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Par", NULL,
         "\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Par\"}"},
        {KVB_TOOLS_HERMES, "<tool_call>\n", "{\"name\": \"get_we", "get_weather", "\"name\":\"get_weather\",\"arguments\":\"\"}"},
        {KVB_TOOLS_HERMES, "<tool_call>\n", "{\"name\": \"f\", \"arguments\": ", NULL, "\"name\":\"f\",\"arguments\":\"\"}"},
        {KVB_TOOLS_MISTRAL, "[TOOL_CALLS]", "[{\"name\": \"f\", \"arguments\": {\"a\":[1,", NULL, "\"name\":\"f\",\"arguments\":\"{\\\"a\\\":[1,\"}"},
        {KVB_TOOLS_LLAMA3, "", "{\"name\": \"f\", \"parameters\": {\"a\":", NULL, "\"name\":\"f\",\"arguments\":\"{\\\"a\\\":\"}"},
        {KVB_TOOLS_HARMONY, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>", "{\"a\":\"x", NULL,
         "\"name\":\"f\",\"arguments\":\"{\\\"a\\\":\\\"x\"}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *m = parse_cut(cases[i].f, cases[i].pre, cases[i].text, true, cases[i].hint);
        if (!m || !strstr(m, "\"content\":null") || !strstr(m, cases[i].want) || strstr(m, "<tool_call>") || strstr(m, "TOOL_CALLS"))
            FAILC("case %zu: %s\n  want a call with %s", i, m ? m : "(none)", cases[i].want);
        kvb_buffer_free(m);
        /* not cut: the unfinished call stays content, as written */
        m = parse_cut(cases[i].f, cases[i].pre, cases[i].text, false, NULL);
        if (!m || strstr(m, "tool_calls")) FAILC("case %zu uncut: %s", i, m ? m : "(none)");
        kvb_buffer_free(m);
    }
    /* a whole call is taken as ever, cut or not */
    char *m = parse_cut(KVB_TOOLS_HERMES, "<tool_call>\n", "{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>", true, "f");
    if (!m || !strstr(m, "\"arguments\":\"{\\\"a\\\":1}\"")) FAILC("whole call: %s", m ? m : "(none)");
    kvb_buffer_free(m);
}

/* Issue 47: with the request's tools declared (kvb_chat_parser_tools), a call to an undeclared function, or with
 * arguments its schema refuses, is not a call: its text stays content; valid calls (keys in any order) are taken. */
static char *parse_tools(const char *tools, const char *text) {
    struct kvb_chat_syntax syn = {KVB_TOOLS_HERMES, false, false};
    struct kvb_chat_parser *p;
    char *d = NULL, *m = NULL;
    if (kvb_chat_parser_new(&syn, &p)) return NULL;
    if (kvb_chat_parser_tools(p, tools, strlen(tools)) == KVB_OK && kvb_chat_parser_feed(p, text, strlen(text), true, &d) == KVB_OK)
        kvb_chat_parser_message(p, &m);
    kvb_buffer_free(d);
    kvb_chat_parser_free(p);
    return m;
}

TEST(calls_checked_against_tools) {
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
                        "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"c\",\"f\"]},\"at\":{\"type\":\"object\","
                        "\"properties\":{\"h\":{\"type\":\"integer\"},\"m\":{\"type\":\"integer\"}}}},\"required\":[\"city\"]}}},"
                        "{\"type\":\"function\",\"function\":{\"name\":\"ping\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}},"
                        "{\"type\":\"function\",\"function\":{\"name\":\"free\"}},"
                        "{\"type\":\"function\",\"function\":{\"name\":\"odd\",\"parameters\":{\"type\":\"object\",\"patternProperties\":{}}}}]";
    static const struct {
        const char *args;
        const char *name;
        bool call;
    } cases[] = {
        {"{\"city\": \"Paris\"}", "get_weather", true},
        {"{\"unit\": \"c\", \"city\": \"Paris\"}", "get_weather", true},           /* keys in another order */
        {"{\"city\": \"P\", \"at\": {\"m\": 5, \"h\": 1}}", "get_weather", true}, /* nested, too */
        {"{}", "ping", true},
        {"{\"anything\": [1, {\"x\": null}]}", "free", true}, /* no parameters: any object */
        {"{\"city\": 3}", "get_weather", false},                /* wrong type */
        {"{\"unit\": \"c\"}", "get_weather", false},            /* required missing */
        {"{\"city\": \"P\", \"unit\": \"k\"}", "get_weather", false},
        {"{\"city\": \"P\", \"x\": 1}", "get_weather", false}, /* not a declared property */
        {"{\"a\": 1}", "ping", false},                           /* a tool without arguments */
        {"{\"city\": \"Paris\"}", "rm_rf", false},               /* not a declared function */
        {"{\"z\": 1}", "odd", true}, /* a schema the compiler refuses: the name only */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "Sure.\n<tool_call>\n{\"name\": \"%s\", \"arguments\": %s}\n</tool_call>", cases[i].name, cases[i].args);
        char *m = parse_tools(tools, text);
        bool is_call = m && strstr(m, "\"tool_calls\"");
        bool markup_in_content = m && strstr(m, "\"content\":\"Sure.\\n<tool_call>");
        if (!m || is_call != cases[i].call || markup_in_content == cases[i].call) FAILC("case %zu (%s %s): %s", i, cases[i].name, cases[i].args, m ? m : "(none)");
        kvb_buffer_free(m);
    }
    /* declared once, before the first feed; a bad list is refused */
    struct kvb_chat_syntax syn = {KVB_TOOLS_HERMES, false, false};
    struct kvb_chat_parser *p;
    CHECK_OK(kvb_chat_parser_new(&syn, &p));
    CHECK_STATUS(kvb_chat_parser_tools(p, "{}", 2), KVB_ERR_INVALID);
    CHECK_OK(kvb_chat_parser_tools(p, "[]", 2));
    CHECK_STATUS(kvb_chat_parser_tools(p, "[]", 2), KVB_ERR_INVALID);
    kvb_chat_parser_free(p);
}

/* Issue 47: a server declares the tools on the request's thread (every schema compiled there, once) and sets the syntax
 * at admission, when think_open is known; the calls are still checked. A tools list deeper than 64 is KVB_ERR_INVALID. */
TEST(tools_declared_before_syntax) {
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                        "\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}}}]";
    struct kvb_chat_syntax syn = {KVB_TOOLS_HERMES, false, false};
    struct kvb_chat_parser *p;
    CHECK_OK(kvb_chat_parser_new(&syn, &p));
    CHECK_OK(kvb_chat_parser_tools(p, tools, strlen(tools)));
    syn.think = syn.think_open = true;
    CHECK_OK(kvb_chat_parser_syntax(p, &syn));
    const char *t = "hmm</think><tool_call>{\"name\":\"f\",\"arguments\":{\"a\":\"x\"}}</tool_call>"
                    "<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":2}}</tool_call>";
    char *d = NULL, *m = NULL;
    CHECK_OK(kvb_chat_parser_feed(p, t, strlen(t), true, &d));
    CHECK_OK(kvb_chat_parser_message(p, &m));
    CHECK(kvb_chat_parser_n_calls(p) == 1);
    if (!m || !strstr(m, "\"reasoning_content\":\"hmm\"") || !strstr(m, "\"arguments\":\"{\\\"a\\\":2}\"")) FAILC("message: %s", m ? m : "(none)");
    CHECK_STATUS(kvb_chat_parser_syntax(p, &syn), KVB_ERR_INVALID); /* after the first feed */
    kvb_buffer_free(d);
    kvb_buffer_free(m);
    kvb_chat_parser_free(p);
    char deep[400];
    size_t n = 0;
    n += (size_t)snprintf(deep + n, sizeof deep - n, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":");
    for (int i = 0; i < 70; i++) deep[n++] = '[';
    for (int i = 0; i < 70; i++) deep[n++] = ']';
    n += (size_t)snprintf(deep + n, sizeof deep - n, "}}]");
    CHECK_OK(kvb_chat_parser_new(&syn, &p));
    CHECK_STATUS(kvb_chat_parser_tools(p, deep, n), KVB_ERR_INVALID);
    kvb_chat_parser_free(p);
}

TEST(names_and_errors) {
    for (int f = 0; f <= KVB_TOOLS_GRANITE; f++) {
        enum kvb_tool_format g;
        CHECK_OK(kvb_tool_format_from_name(kvb_tool_format_name((enum kvb_tool_format)f), &g));
        CHECK_EQ_INT((int)g, f);
    }
    CHECK(!strcmp(kvb_tool_format_name(KVB_TOOLS_HARMONY), "harmony"));
    enum kvb_tool_format g;
    CHECK_STATUS(kvb_tool_format_from_name("qwen", &g), KVB_ERR_INVALID);
    struct kvb_chat_syntax syn = {(enum kvb_tool_format)17, false, false};
    struct kvb_chat_parser *p = (struct kvb_chat_parser *)1;
    CHECK_STATUS(kvb_chat_parser_new(&syn, &p), KVB_ERR_INVALID);
    CHECK(p == NULL);
    CHECK_STATUS(kvb_chat_parser_new(NULL, &p), KVB_ERR_INVALID);
    CHECK_STATUS(kvb_chat_syntax_detect("", NULL, NULL), KVB_ERR_INVALID);
    syn.think = true;
    CHECK_OK(kvb_chat_syntax_detect(NULL, "x<think>\n", &syn));
    CHECK(syn.tools == KVB_TOOLS_NONE && !syn.think && !syn.think_open);
    kvb_chat_parser_free(NULL);
    /* ids: call_ + 24 alphanumerics, per parser seed; Mistral 9 */
    syn = (struct kvb_chat_syntax){KVB_TOOLS_HERMES, false, false};
    const char *t = "<tool_call>{\"name\":\"f\"}</tool_call><tool_call>{\"name\":\"g\"}</tool_call>";
    char *a = parse_once(&syn, t, strlen(t)), *b = parse_once(&syn, t, strlen(t));
    CHECK(a && b && !strcmp(a, b));
    struct kvb_chat_parser *q;
    CHECK_OK(kvb_chat_parser_new(&syn, &q));
    char *dq = NULL;
    CHECK_OK(kvb_chat_parser_feed(q, t, strlen(t), true, &dq));
    CHECK_EQ_INT(kvb_chat_parser_n_calls(q), 2);
    CHECK_EQ_INT(kvb_chat_parser_n_calls(NULL), 0);
    kvb_buffer_free(dq);
    kvb_chat_parser_free(q);
    const char *id = a ? strstr(a, "\"id\":\"call_") : NULL;
    CHECK(id != NULL);
    if (id) {
        for (int i = 0; i < 24; i++) CHECK(isalnum((unsigned char)id[11 + i]));
        CHECK(id[35] == '"');
        const char *id2 = strstr(id + 1, "\"id\":\"call_");
        CHECK(id2 && memcmp(id, id2, 36));
    }
    kvb_buffer_free(a);
    kvb_buffer_free(b);
    syn.tools = KVB_TOOLS_MISTRAL;
    t = "[TOOL_CALLS]f[ARGS]{}";
    a = parse_once(&syn, t, strlen(t));
    id = a ? strstr(a, "\"id\":\"") : NULL;
    CHECK(id && strlen(id) > 16 && id[15] == '"');
    kvb_buffer_free(a);
    /* white space runs longer than what is held back */
    char *w = malloc(3000);
    w[0] = 'a';
    memset(w + 1, ' ', 2000);
    memcpy(w + 2001, "b \n", 4);
    syn.tools = KVB_TOOLS_NONE;
    a = parse_once(&syn, w, strlen(w));
    CHECK(a && strlen(a) == strlen("{\"role\":\"assistant\",\"content\":\"\"}") + 2002 && strstr(a, "a    ") && strstr(a, " b\"}"));
    kvb_buffer_free(a);
    check_streams(&syn, w, strlen(w), "long white space");
    free(w);
    /* limits decide by position, never by how much was fed: texts around each limit, split everywhere */
    char *lim = malloc(4096);
    for (int len = 1008; len <= 1030; len += 2) {
        struct {
            enum kvb_tool_format f;
            const char *head, *fill, *tail;
        } k[] = {{KVB_TOOLS_HARMONY, "", "a", "<|message|>hi"},
                 {KVB_TOOLS_HARMONY, "<|channel|>final", " ", "<|message|>hi"},
                 {KVB_TOOLS_HERMES, "<tool_call>{\"name\":\"f\"}", " ", "</tool_call>"},
                 {KVB_TOOLS_LLAMA3, "{", "\n", "\"name\": \"f\", \"parameters\": {}}"}};
        for (int j = 0; j < 4; j++) {
            size_t o = strlen(strcpy(lim, k[j].head));
            for (int r = 0; r < len; r++) lim[o++] = k[j].fill[0];
            strcpy(lim + o, k[j].tail);
            syn.tools = k[j].f;
            check_streams(&syn, lim, strlen(lim), "limit");
        }
    }
    free(lim);
    /* bounds: a call over 1 MiB stays content; so does one nested too deeply */
    size_t big = (1u << 20) + 100;
    char *s = malloc(big + 64);
    strcpy(s, "<tool_call>{\"name\":\"f\",\"arguments\":{\"x\":\"");
    size_t o = strlen(s);
    memset(s + o, 'a', big);
    strcpy(s + o + big, "\"}}</tool_call>");
    syn.tools = KVB_TOOLS_HERMES;
    a = parse_once(&syn, s, strlen(s));
    CHECK(a && !strstr(a, "tool_calls") && strstr(a, "\"content\":\"<tool_call>{"));
    kvb_buffer_free(a);
    o = strlen(strcpy(s, "<tool_call>{\"name\":\"f\",\"arguments\":"));
    for (int i = 0; i < 70; i++) s[o++] = '[';
    for (int i = 0; i < 70; i++) s[o++] = ']';
    strcpy(s + o, "}</tool_call>");
    a = parse_once(&syn, s, strlen(s));
    CHECK(a && !strstr(a, "tool_calls"));
    kvb_buffer_free(a);
    free(s);
}

/* Time stays linear: big calls fed in small pieces, and texts that start a
 * call over and over without finishing one, in every format. */
TEST(linear_time) {
    static const struct {
        enum kvb_tool_format f;
        const char *head, *unit, *tail;
    } k[] = {
        {KVB_TOOLS_HERMES, "<tool_call>{\"name\":\"f\",\"arguments\":{\"s\":\"", "abcdefgh", "\"}}</tool_call>"},
        {KVB_TOOLS_HERMES, "", "<tool_call>{\"a\":\"", ""},
        {KVB_TOOLS_LLAMA3, "<|python_tag|>f.call(x=\"", "abcdefgh", "\")"},
        {KVB_TOOLS_LLAMA3, "", "<|python_tag|>a.call(x=\"", ""},
        {KVB_TOOLS_MISTRAL, "", "[TOOL_CALLS]f[ARGS]{\"a\":\"", ""},
        {KVB_TOOLS_MISTRAL, "[TOOL_CALLS]f[ARGS]", "[[[[", ""},
        {KVB_TOOLS_HARMONY, "", "<|channel|>", ""},
        {KVB_TOOLS_HARMONY, "<|channel|>commentary to=functions.f<|message|>{\"a\":[", "1,2,3,", "4]}"},
        {KVB_TOOLS_GRANITE, "", "<|tool_call|>[{\"a\":\"", ""},
        {KVB_TOOLS_NONE, "<think>", "a <think> b ", ""},
    };
    size_t total = 900000;
    char *text = malloc(total + 200);
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        size_t o = strlen(strcpy(text, k[i].head)), ul = strlen(k[i].unit);
        while (o + ul < total) {
            memcpy(text + o, k[i].unit, ul);
            o += ul;
        }
        strcpy(text + o, k[i].tail);
        size_t n = strlen(text);
        struct kvb_chat_syntax syn = {k[i].f, true, false};
        struct kvb_chat_parser *p;
        CHECK_OK(kvb_chat_parser_new(&syn, &p));
        clock_t t0 = clock();
        for (size_t at = 0; at < n; at += 3) {
            char *d = NULL;
            size_t len = n - at < 3 ? n - at : 3;
            if (kvb_chat_parser_feed(p, text + at, len, false, &d)) FAILC("case %zu: feed failed", i);
            kvb_buffer_free(d);
        }
        char *d = NULL;
        CHECK_OK(kvb_chat_parser_feed(p, "", 0, true, &d));
        kvb_buffer_free(d);
        double sec = (double)(clock() - t0) / CLOCKS_PER_SEC;
        if (sec > 20) FAILC("case %zu (%s): %.1f s for %zu bytes", i, kvb_tool_format_name(k[i].f), sec, n);
        printf("  linear %zu %s: %.2f s\n", i, kvb_tool_format_name(k[i].f), sec);
        kvb_chat_parser_free(p);
    }
    free(text);
}

/* ---- allocation failures: a failed feed leaves the parser as it was ---- */

static long g_calls, g_fail_at, g_live;
static void *t_malloc(size_t n, void *u) {
    (void)u;
    if (++g_calls == g_fail_at) return NULL;
    void *p = malloc(n);
    if (p) g_live++;
    return p;
}
static void t_free(void *p, void *u) {
    (void)u;
    if (!p) return;
    g_live--;
    free(p);
}

/* One run over the pieces with the fail_at-th allocation failing; a failed
 * feed must leave the message as it was and succeed when retried. The
 * deltas (joined by '|') and the final message go to *out. */
static int oom_run(const struct kvb_chat_syntax *syn, const char *const *pieces, int n, long fail_at, char **out) {
    g_calls = 0;
    g_fail_at = fail_at;
    struct kvb_chat_parser *p;
    kvb_status st = kvb_chat_parser_new(syn, &p);
    if (st == KVB_ERR_NOMEM) {
        g_fail_at = 0;
        st = kvb_chat_parser_new(syn, &p);
    }
    if (st) return -1;
    size_t cap = 1 << 16, o = 0;
    char *acc = malloc(cap);
    acc[0] = 0;
    int bad = 0;
    for (int i = 0; i < n && !bad; i++) {
        long keep = g_fail_at;
        g_fail_at = 0;
        char *before = NULL, *after = NULL, *d = NULL;
        kvb_chat_parser_message(p, &before);
        g_fail_at = keep;
        st = kvb_chat_parser_feed(p, pieces[i], strlen(pieces[i]), i == n - 1, &d);
        if (st == KVB_ERR_NOMEM) {
            g_fail_at = 0;
            kvb_chat_parser_message(p, &after);
            if (d || !before || !after || strcmp(before, after)) bad = 1;
            st = kvb_chat_parser_feed(p, pieces[i], strlen(pieces[i]), i == n - 1, &d);
        }
        if (st) bad = 1;
        o += (size_t)snprintf(acc + o, cap - o, "%s|", d ? d : "");
        kvb_buffer_free(d);
        kvb_buffer_free(before);
        kvb_buffer_free(after);
    }
    g_fail_at = 0;
    char *m = NULL;
    if (kvb_chat_parser_message(p, &m)) bad = 1;
    else o += (size_t)snprintf(acc + o, cap - o, "%s", m);
    kvb_buffer_free(m);
    kvb_chat_parser_free(p);
    *out = acc;
    return bad ? -1 : 0;
}

TEST(out_of_memory) {
    static const char *const pieces[] = {"<thi", "nk>\nR \xc3", "\xa9\n</think>\n\nHi <tool", "_call>\n{\"name\": \"f\", \"argu", "ments\": {\"a\": [1, \"x\"]}}\n</tool_call>",
                                         " end <tool_call>{\"name\": \"g\"}</tool_call>", "<tool_call>{\"bad\"", ""};
    struct kvb_chat_syntax syn = {KVB_TOOLS_HERMES, true, false};
    struct kvb_allocator al = {t_malloc, t_free, NULL};
    kvb_allocator_set(&al);
    char *ref = NULL;
    g_live = 0;
    int r = oom_run(&syn, pieces, 8, 0, &ref);
    long count = g_calls;
    if (r) FAILC("the run without failures failed");
    for (long n = 1; n <= count + 2 && !r; n++) {
        char *got = NULL;
        g_live = 0;
        if (oom_run(&syn, pieces, 8, n, &got)) FAILC("allocation %ld failing: a feed failed or changed the parser", n);
        else if (strcmp(got, ref)) FAILC("allocation %ld failing: the stream differs:\n%s\n%s", n, got, ref);
        if (g_live) FAILC("allocation %ld failing: %ld allocations leaked", n, g_live);
        free(got);
    }
    kvb_allocator_set(NULL);
    free(ref);
    CHECK(count > 10);
    /* the tools' declaration (every schema parsed and compiled there): any allocation failing is KVB_ERR_NOMEM, nothing leaks */
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                        "\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"enum\":[\"x\",\"y\"]}}}}},{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]";
    syn = (struct kvb_chat_syntax){KVB_TOOLS_HERMES, false, false};
    kvb_allocator_set(&al);
    long total = 0;
    for (long n = 0; n <= total + 2; n++) {
        struct kvb_chat_parser *p = NULL;
        g_calls = 0;
        g_live = 0;
        g_fail_at = 0;
        if (kvb_chat_parser_new(&syn, &p) != KVB_OK) { FAILC("new"); break; }
        const long base = g_calls;
        g_fail_at = n ? base + n : 0;
        const kvb_status st = kvb_chat_parser_tools(p, tools, strlen(tools));
        if (!n) total = g_calls - base;
        else if (n <= total && st != KVB_ERR_NOMEM) FAILC("allocation %ld of the tools failing: status %d", n, (int)st);
        g_fail_at = 0;
        kvb_chat_parser_free(p);
        if (g_live) FAILC("allocation %ld of the tools failing: %ld allocations leaked", n, g_live);
    }
    kvb_allocator_set(NULL);
    CHECK(total > 5);
}

/* ---- the official templates ---- */

struct dcase {
    const char *file;
    enum kvb_tool_format fmt;
    bool think;
};

#include "chat_parse_detect.h"

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

TEST(detect) {
    const char *dir = getenv("KVB_LLAMA_TEMPLATES");
    if (!dir || !*dir) SKIP_CASE("KVB_LLAMA_TEMPLATES=DIR (llama.cpp's models/templates) is not set");
    int seen = 0;
    for (size_t i = 0; i < sizeof k_detect / sizeof *k_detect; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, k_detect[i].file);
        char *t = read_text(path);
        if (!t) continue;
        seen++;
        struct kvb_chat_syntax syn;
        CHECK_OK(kvb_chat_syntax_detect(t, NULL, &syn));
        if (syn.tools != k_detect[i].fmt || syn.think != k_detect[i].think)
            FAILC("%s: %s think=%d, want %s think=%d", k_detect[i].file, kvb_tool_format_name(syn.tools), syn.think, kvb_tool_format_name(k_detect[i].fmt), k_detect[i].think);
        free(t);
    }
    CHECK(seen > 10);
    /* DeepSeek-R1 distills: their generation prompt opens the reasoning */
    static const char *const r1[] = {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"};
    for (int i = 0; i < 2; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, r1[i]);
        char *t = read_text(path), *prompt = NULL;
        if (!t) continue;
        struct kvb_chat_apply_params ap = kvb_chat_apply_default_params();
        ap.template_text = t;
        ap.messages_json = "[{\"role\": \"user\", \"content\": \"2+2?\"}]";
        ap.vars_json = "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"enable_thinking\": true}"; /* llama.cpp's Qwen-32B copy closes it otherwise */
        struct kvb_chat_syntax syn;
        CHECK_OK(kvb_chat_apply(&ap, &prompt, NULL));
        CHECK_OK(kvb_chat_syntax_detect(t, prompt, &syn));
        if (!syn.think || !syn.think_open) FAILC("%s: think %d think_open %d", r1[i], syn.think, syn.think_open);
        const char *out = "Okay, 4.\n</think>\n\n**4**";
        char *m = parse_once(&syn, out, strlen(out));
        if (!m || strcmp(m, "{\"role\":\"assistant\",\"content\":\"**4**\",\"reasoning_content\":\"Okay, 4.\"}")) FAILC("%s: %s", r1[i], m ? m : "NULL");
        kvb_buffer_free(m);
        kvb_buffer_free(prompt);
        free(t);
    }
    /* think_open from the rendered prompt */
    struct kvb_chat_syntax syn;
    CHECK_OK(kvb_chat_syntax_detect("{{ '<think>' }}", "<|User|>hi<|Assistant|><think>\n", &syn));
    CHECK(syn.think && syn.think_open && syn.tools == KVB_TOOLS_NONE);
    CHECK_OK(kvb_chat_syntax_detect("<tool_call><think>", "<|im_start|>assistant\n<think>\n\n</think>\n\n", &syn));
    CHECK(syn.think && !syn.think_open && syn.tools == KVB_TOOLS_HERMES);
}

static const char k_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather of a city\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"unit\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}, "
    "{\"type\": \"function\", \"function\": {\"name\": \"get_time\", \"description\": \"Time in a zone\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"tz\": {\"type\": \"string\"}}}}}]";
static const char *const k_names[] = {"get_weather", "get_time"};
static const char *const k_args[] = {"{\"city\":\"Paris\",\"unit\":\"c\"}", "{\"tz\":\"Europe/Paris\"}"};
static const char *const k_ids[] = {"abcDEF123", "xyz789UVW"};

struct rcase {
    const char *file;
    int n_calls;
};

static const struct rcase k_round[] = {
    {"Qwen-Qwen2.5-7B-Instruct.jinja", 2},
    {"Qwen-Qwen3-0.6B.jinja", 2},
    {"Qwen-QwQ-32B.jinja", 2},
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", 2},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", 2},
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", 1},
    {"meta-llama-Llama-3.2-3B-Instruct.jinja", 1},
    {"meta-llama-Llama-3.3-70B-Instruct.jinja", 1},
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", 2},
    {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", 2},
    {"unsloth-mistral-Devstral-Small-2507.jinja", 2},
    {"Mistral-Small-3.2-24B-Instruct-2506.jinja", 2},
    {"openai-gpt-oss-120b.jinja", 1},
    {"ibm-granite-granite-4.0.jinja", 2},
};

static const char *const k_stops[] = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>", "<|end_of_text|>", "<|return|>", "<|end|>", "<|call|>", "<|endoftext|>"};

static void round_trip(const char *dir, const struct rcase *rc) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, rc->file);
    char *t = read_text(path);
    if (!t) {
        SKIP_CASE("%s is absent", path);
    }
    char calls[1024] = "", msgs[2048];
    for (int i = 0; i < rc->n_calls; i++) {
        size_t o = strlen(calls);
        snprintf(calls + o, sizeof calls - o, "%s{\"id\": \"%s\", \"type\": \"function\", \"function\": {\"name\": \"%s\", \"arguments\": %s}}", i ? ", " : "",
                 k_ids[i], k_names[i], k_args[i]);
    }
    const char *user = "{\"role\": \"user\", \"content\": \"Weather and time in Paris?\"}";
    char *with = NULL, *without = NULL;
    struct kvb_chat_apply_params ap = kvb_chat_apply_default_params();
    ap.template_text = t;
    ap.tools_json = k_tools;
    ap.vars_json = "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";
    snprintf(msgs, sizeof msgs, "[%s, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [%s]}]", user, calls);
    ap.messages_json = msgs;
    ap.add_generation_prompt = false;
    kvb_status st = kvb_chat_apply(&ap, &with, NULL);
    if (st != KVB_OK) FAILC("%s: render with the call: %s", rc->file, kvb_last_error());
    char msgs2[512];
    snprintf(msgs2, sizeof msgs2, "[%s]", user);
    ap.messages_json = msgs2;
    ap.add_generation_prompt = true;
    if (st == KVB_OK && (st = kvb_chat_apply(&ap, &without, NULL)) != KVB_OK) FAILC("%s: render without: %s", rc->file, kvb_last_error());
    if (st == KVB_OK) {
        size_t k = 0;
        while (with[k] && with[k] == without[k]) k++;
        if (without[k]) /* the generation prompt goes on (QwQ's "<think>\n"): the answer starts after the header */
            while (k && with[k - 1] != '\n' && with[k - 1] != '>') k--;
        char *part = with + k;
        size_t n = strlen(part);
        for (bool again = true; again;) { /* the stop token ends generation: it is not in the output */
            again = false;
            while (n && strchr(" \n\r\t", part[n - 1])) n--;
            for (size_t s = 0; s < sizeof k_stops / sizeof *k_stops; s++) {
                size_t sl = strlen(k_stops[s]);
                if (n >= sl && !memcmp(part + n - sl, k_stops[s], sl)) {
                    n -= sl;
                    again = true;
                }
            }
        }
        struct kvb_chat_syntax syn;
        char keep = with[k];
        with[k] = 0; /* the prompt this answer follows */
        CHECK_OK(kvb_chat_syntax_detect(t, with, &syn));
        with[k] = keep;
        char *m = parse_once(&syn, part, n);
        bool ok = m != NULL;
        for (int i = 0; ok && i < rc->n_calls; i++) {
            char want[512];
            snprintf(want, sizeof want, "\"function\":{\"name\":\"%s\",\"arguments\":\"", k_names[i]);
            const char *at = strstr(m, want);
            ok = at != NULL;
            if (ok) { /* the arguments, unescaped */
                at += strlen(want);
                char got[256];
                size_t g = 0;
                while (*at && *at != '"' && g < sizeof got - 1) {
                    if (*at == '\\') at++;
                    got[g++] = *at++;
                }
                got[g] = 0;
                ok = !strcmp(got, k_args[i]);
            }
            if (ok && syn.tools == KVB_TOOLS_MISTRAL && strstr(part, k_ids[i])) { /* the model's ids are kept */
                snprintf(want, sizeof want, "\"id\":\"%s\"", k_ids[i]);
                ok = strstr(m, want) != NULL;
            }
        }
        if (ok && rc->n_calls == 1) ok = strstr(m, "get_time") == NULL;
        if (ok) ok = strstr(m, "\"content\":null") != NULL;
        if (!ok) FAILC("%s (%s): the assistant's text\n%.*s\nparsed as %s", rc->file, kvb_tool_format_name(syn.tools), (int)n, part, m ? m : "NULL");
        else check_streams(&syn, part, n, rc->file);
        printf("  round trip %s (%s): %d call(s)\n", rc->file, kvb_tool_format_name(syn.tools), rc->n_calls);
        kvb_buffer_free(m);
    }
    kvb_buffer_free(with);
    kvb_buffer_free(without);
    free(t);
}

TEST(round_trip) {
    const char *dir = getenv("KVB_LLAMA_TEMPLATES");
    if (!dir || !*dir) SKIP_CASE("KVB_LLAMA_TEMPLATES=DIR (llama.cpp's models/templates) is not set");
    for (size_t i = 0; i < sizeof k_round / sizeof *k_round; i++) round_trip(dir, &k_round[i]);
}

/* the fuzz target over the case texts in every format, their prefixes and byte flips */
TEST(fuzz_seeds) {
    uint8_t buf[600];
    for (size_t i = 0; i < sizeof k_cases / sizeof *k_cases; i++) {
        size_t n = strlen(k_cases[i].text);
        if (n + 2 > sizeof buf) continue;
        for (int f = 0; f < 24; f++) {
            buf[0] = (uint8_t)f;
            buf[1] = (uint8_t)(i * 7 + (size_t)f);
            memcpy(buf + 2, k_cases[i].text, n);
            const char *why;
            if (chat_parse_check(buf, n + 2, &why)) FAILC("%s format byte %d: %s", k_cases[i].name, f, why);
            for (size_t k = 0; k < n; k += 5) {
                buf[2 + k] ^= (uint8_t)(0x55 + k);
                if (chat_parse_check(buf, n + 2, &why)) FAILC("%s format byte %d flip %zu: %s", k_cases[i].name, f, k, why);
                buf[2 + k] ^= (uint8_t)(0x55 + k);
                if (chat_parse_check(buf, k + 2, &why)) FAILC("%s format byte %d prefix %zu: %s", k_cases[i].name, f, k, why);
            }
        }
    }
}

int main(void) {
    RUN(formats);
    RUN(deltas);
    RUN(names_and_errors);
    RUN(cut_forced_call);
    RUN(calls_checked_against_tools);
    RUN(tools_declared_before_syntax);
    RUN(out_of_memory);
    RUN(linear_time);
    RUN(detect);
    RUN(round_trip);
    RUN(fuzz_seeds);
    return test_summary();
}
