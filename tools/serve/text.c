/*
 * text.c — a turn's text in and out: the tokens a turn reads (the whole
 * conversation through the chat template on a session's first turn, else
 * only the new user message glued on after the stop token the last answer
 * ended with; a completion's prompt as is), and stop strings cut from what
 * it writes, with the tail that may begin one held back from the client.
 */
#include "sched_impl.h"

#include <stdlib.h>
#include <string.h>

static int32_t *tokens_of(struct server *srv, const char *text, bool bos, int32_t pending, int32_t *n) {
    int32_t *ids = NULL, k = 0;
    if (kvb_vocab_tokenize(srv->vocab, text, strlen(text), bos, true, &ids, &k) != KVB_OK) return NULL;
    int32_t *all = malloc(sizeof(int32_t) * (size_t)(k + 1));
    if (!all) { kvb_buffer_free(ids); return NULL; }
    int32_t m = 0;
    if (pending >= 0) all[m++] = pending;
    if (k) memcpy(all + m, ids, sizeof(int32_t) * (size_t)k);
    kvb_buffer_free(ids);
    *n = m + k;
    return all;
}

/* The text a turn reads, as tokens. */
int32_t *turn_tokens(struct server *srv, struct job *j, const struct sess *x, int32_t pending, int32_t *n) {
    const bool first = !x || x->turns == 0;
    char *text = NULL;
    kvb_status st;
    if (j->kind == JOB_COMPLETION) {
        return tokens_of(srv, j->prompt, first, first ? -1 : pending, n);
    }
    if (first) {
        /* the whole conversation, with the template's default system message if it has one */
        struct kvb_chat_message *msgs = j->msgs;
        int32_t nm = j->n_msgs;
        struct kvb_chat_message *withsys = NULL;
        if (!j->system && srv->default_system[0]) {
            withsys = malloc(sizeof *withsys * (size_t)(nm + 1));
            if (!withsys) return NULL;
            withsys[0] = (struct kvb_chat_message){"system", srv->default_system};
            memcpy(withsys + 1, msgs, sizeof *msgs * (size_t)nm);
            msgs = withsys;
            nm++;
        }
        size_t len;
        st = kvb_chat_format(srv->style, msgs, nm, true, &text, &len);
        free(withsys);
    } else {
        st = kvb_chat_turn_text(srv->style, NULL, j->user, false, x->stop_text, &text, NULL);
    }
    if (st != KVB_OK) return NULL;
    int32_t *ids = tokens_of(srv, text, first, first ? -1 : pending, n);
    kvb_buffer_free(text);
    return ids;
}

/* The longest tail of text that begins some stop string. */
static size_t stop_prefix_tail(const struct job *j) {
    size_t best = 0;
    for (int k = 0; k < j->n_stops; k++) {
        const size_t ls = strlen(j->stops[k]);
        for (size_t t = ls - 1; t > best; t--)
            if (t <= j->text.n && !memcmp(j->text.s + j->text.n - t, j->stops[k], t)) { best = t; break; }
    }
    return best;
}

/* Appends piece to the job's text; true when a stop string ended it. */
bool add_text(struct job *j, const char *piece, size_t pl) {
    const size_t before = j->text.n;
    sb_put_utf8(&j->text, piece, pl); /* JSON carries UTF-8: bytes that are no character become U+FFFD */
    for (int k = 0; k < j->n_stops; k++) {
        const size_t ls = strlen(j->stops[k]);
        const size_t from = before >= ls ? before - ls + 1 : 0;
        for (size_t at = from; at + ls <= j->text.n; at++)
            if (!memcmp(j->text.s + at, j->stops[k], ls)) {
                j->text.n = at;
                j->text.s[at] = 0;
                j->held = 0;
                return true;
            }
    }
    j->held = stop_prefix_tail(j);
    return false;
}
