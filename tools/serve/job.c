/*
 * job.c — a generation's end in failure (job_fail: status, error type,
 * Retry-After, message; the waiting connection is woken) and its memory
 * (job_free).
 */
#include "sched_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void job_fail(struct server *srv, struct job *j, int status, const char *type, int retry_after, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->error, sizeof j->error, fmt, ap);
    va_end(ap);
    snprintf(j->error_type, sizeof j->error_type, "%s", type);
    j->status = status;
    j->retry_after = retry_after;
    j->failed = j->done = true;
    metrics_count(srv->metrics, 0, 0, 0, 1);
    pthread_cond_broadcast(&j->cv);
}

void job_free(struct job *j) {
    if (!j) return;
    free(j->system);
    free(j->user);
    free(j->prompt);
    free(j->all_json);
    free(j->shared_json);
    free(j->prev_json);
    free(j->cont_json);
    free(j->standin_prev_json);
    free(j->standin_json);
    free(j->r_all);
    free(j->r_cont);
    free(j->r_shared);
    free(j->tools_json);
    free(j->vars_json);
    free(j->gbnf);
    kvb_grammar_free(j->grammar);
    kvb_matcher_free(j->matcher);
    free(j->prefill);
    free(j->bias);
    for (int i = 0; i < j->n_msgs; i++) free((char *)j->msgs[i].content);
    free(j->msgs);
    for (int i = 0; i < j->n_stops; i++) free(j->stops[i]);
    sb_free(&j->text);
    sb_free(&j->deltas);
    sb_free(&j->lp);
    free(j->message);
    kvb_chat_parser_free(j->parser);
    free(j->blob);
    pthread_cond_destroy(&j->cv);
    free(j);
}
