/*
 * output.c — what a turn writes beyond its text, on the scheduler thread:
 *  - a grammar (response_format, grammar, a forced tool call): the job's
 *    matcher, which the batch consults at every sample;
 *  - the chat parser (tools, or a model that reasons): the text that is
 *    certain (no stop string may begin in it) is fed to it as it comes, and
 *    its deltas are queued one JSON object a line for the stream; at the
 *    end it gives the whole message (content, reasoning_content,
 *    tool_calls);
 *  - logprobs: for each token, its log-probability under the model's
 *    distribution (softmax of the raw logits, before any penalty, bias or
 *    grammar) and the top_logprobs most likely, one JSON object a line.
 */
#include "sched_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* 64 bits for the parser's tool call ids, from the system's random source
 * and never from the request's seed: a fixed seed must not give every call
 * the same id across requests (clients pair tool results with calls by
 * id). Should getrandom fail, the clock and the job's address, mixed. */
static uint64_t call_id_seed(const struct job *j) {
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r) return r;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    static uint64_t counter;
    return (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)j ^ ++counter * 0xBF58476D1CE4E5B9ull;
}

bool output_start(struct server *srv, struct job *j) {
    struct sched *s = srv->sched;
    if (j->grammar) {
        if (kvb_matcher_new(j->grammar, srv->gvocab, &j->matcher) != KVB_OK) return false;
        kvb_batch_set_matcher(s->b, j->seq, j->matcher);
    }
    /* harmony's channels need the parser even without tools: the answer is its final channel */
    if (j->kind == JOB_CHAT && srv->jinja && (j->tools_json || j->syntax.think || j->syntax.tools == KVB_TOOLS_HARMONY)) {
        struct kvb_chat_syntax syn = j->syntax;
        if ((!j->tools_json || j->tool_choice == TOOLS_NONE) && syn.tools != KVB_TOOLS_HARMONY) syn.tools = KVB_TOOLS_NONE; /* no call wanted: no text is a call */
        /* tools under auto: made with its tools declared on the connection thread (openai.c); the syntax is known now */
        if (j->parser ? kvb_chat_parser_syntax(j->parser, &syn) != KVB_OK : kvb_chat_parser_new(&syn, &j->parser) != KVB_OK) return false;
        kvb_chat_parser_seed(j->parser, call_id_seed(j)); /* fresh ids every turn, whatever the request's seed */
        if (j->prefill) {
            char *delta = NULL;
            if (kvb_chat_parser_feed(j->parser, j->prefill, strlen(j->prefill), false, &delta) != KVB_OK) return false;
            if (delta) {
                kvb_str_puts(&j->deltas, delta);
                kvb_str_puts(&j->deltas, "\n");
                kvb_buffer_free(delta);
            }
        }
    }
    return true;
}

void feed_parser(struct job *j, bool final) {
    const size_t ready = final ? j->text.n : j->text.n - (j->held < j->text.n ? j->held : j->text.n);
    if (ready <= j->parsed && !final) return;
    char *delta = NULL;
    const size_t from = j->parsed < ready ? j->parsed : ready;
    if (kvb_chat_parser_feed(j->parser, j->text.p ? j->text.p + from : "", ready - from, final, &delta) != KVB_OK) {
        j->deltas.err = KVB_ERR_NOMEM;
        return;
    }
    j->parsed = ready;
    if (delta) {
        kvb_str_puts(&j->deltas, delta);
        kvb_str_puts(&j->deltas, "\n");
        kvb_buffer_free(delta);
    }
}

/* A token's text as a JSON string (ill-formed UTF-8 as U+FFFD) and its bytes. */
static void token_fields(const struct server *srv, struct kvb_str *b, int32_t id) {
    char piece[256];
    size_t pl = kvb_vocab_token_bytes(srv->vocab, id, true, piece, sizeof piece);
    if (pl > sizeof piece) pl = sizeof piece;
    struct kvb_str t = {0};
    sb_put_utf8(&t, piece, pl);
    kvb_str_put(&t, "", 1);
    if (t.err && !b->err) b->err = t.err; /* the token's text lost: the whole answer fails, never a cut string */
    kvb_str_puts(b, "\"token\":");
    kvb_str_json(b, t.p ? t.p : "", t.p ? strlen(t.p) : 0, 0);
    kvb_str_free(&t);
    kvb_str_puts(b, ",\"bytes\":[");
    for (size_t k = 0; k < pl; k++) kvb_str_printf(b, "%s%u", k ? "," : "", (unsigned)(unsigned char)piece[k]);
    kvb_str_puts(b, "]");
}

static void put_lp(struct kvb_str *b, float lp) {
    if (isfinite(lp)) kvb_str_printf(b, ",\"logprob\":%.9g", (double)lp);
    else kvb_str_puts(b, ",\"logprob\":-9999.0"); /* OpenAI's stand-in for -inf */
}

void add_logprobs(const struct server *srv, struct job *j, int32_t token, const float *logits) {
    if (!logits) return;
    int32_t ids[20];
    float lps[20];
    int k = j->top_logprobs < 20 ? j->top_logprobs : 20; /* OpenAI's cap, below KVB_LOGPROBS_MAX_K */
    if (k > srv->mi.n_vocab) k = srv->mi.n_vocab;         /* kvb_logprobs writes no more (issue 48 survivor 8) */
    const float lp = kvb_logprobs(logits, srv->mi.n_vocab, token, k, ids, lps);
    kvb_str_puts(&j->lp, "{");
    token_fields(srv, &j->lp, token);
    put_lp(&j->lp, lp);
    kvb_str_puts(&j->lp, ",\"top_logprobs\":[");
    for (int i = 0; i < k; i++) {
        kvb_str_puts(&j->lp, i ? ",{" : "{");
        token_fields(srv, &j->lp, ids[i]);
        put_lp(&j->lp, lps[i]);
        kvb_str_puts(&j->lp, "}");
    }
    kvb_str_puts(&j->lp, "]}\n");
}

void output_finish(struct job *j) {
    if (!j->parser) return;
    feed_parser(j, true);
    char *msg = NULL;
    if (kvb_chat_parser_message(j->parser, &msg) == KVB_OK && msg) {
        j->message = strdup(msg);
        kvb_buffer_free(msg);
    }
}
