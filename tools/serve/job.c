/*
 * job.c — a generation's end in failure (job_fail: status, error type,
 * Retry-After, message; the waiting connection is woken), its prompt's
 * size checked (job_prompt_size) and its memory (job_free).
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

static void job_warn(struct job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void job_warn(struct job *j, const char *fmt, ...) {
    if (j->n_warnings >= (int)(sizeof j->warnings / sizeof *j->warnings)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->warnings[j->n_warnings], sizeof j->warnings[0], fmt, ap);
    va_end(ap);
    fprintf(stderr, "kvbound serve: warning: %s: %s\n", j->id, j->warnings[j->n_warnings]);
    j->n_warnings++;
}

bool job_prompt_size(struct server *srv, struct job *j, int32_t n) {
    if (srv->o.max_prompt_tokens > 0 && n > srv->o.max_prompt_tokens) {
        job_fail(srv, j, 400, "invalid_request_error", 0, "the prompt has %d tokens, more than this server takes (--max-prompt-tokens %d)", (int)n,
                 srv->o.max_prompt_tokens);
        return false;
    }
    const struct kvb_policy_params *pol = &j->sp.kv.policy;
    if (pol->id != KVB_POLICY_FULL && pol->budget > 0 && n > pol->budget)
        job_warn(j, "the prompt has %d tokens, more than the cache budget (%d, policy %s): the cache holds at most %d tokens, the rest of "
                    "the prompt was evicted as it was read", (int)n, (int)pol->budget, kvb_policy_name(pol->id), (int)pol->budget);
    if (srv->mi.n_ctx_train > 0 && n > srv->mi.n_ctx_train)
        job_warn(j, "the prompt has %d tokens, more than the model's trained length (%d): its answer may be worse", (int)n, (int)srv->mi.n_ctx_train);
    return true;
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
    free(j->ptoks);
    free(j->gen);
    for (int c = 0; c < j->n_cand; c++) free(j->cand_cont[c]);
    free(j->r_shared);
    free(j->r_instr);
    free(j->tools_json);
    free(j->vars_json);
    free(j->gbnf);
    kvb_grammar_free(j->grammar);
    kvb_matcher_free(j->matcher);
    free(j->prefill);
    free(j->answer_prefix);
    free(j->bias);
    for (int i = 0; i < j->n_msgs; i++) free((char *)j->msgs[i].content);
    free(j->msgs);
    for (int i = 0; i < j->n_stops; i++) free(j->stops[i]);
    kvb_str_free(&j->text);
    kvb_str_free(&j->deltas);
    kvb_str_free(&j->lp);
    free(j->message);
    kvb_chat_parser_free(j->parser);
    free(j->blob);
    free(j->replay);
    free(j->turn_meta);
    pthread_cond_destroy(&j->cv);
    free(j);
}
