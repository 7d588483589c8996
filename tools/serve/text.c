/*
 * text.c — a turn's text in and out: the tokens a turn reads (the whole
 * conversation through the chat template on a session's first turn, else
 * only the new messages glued on after the stop token the last answer
 * ended with; a completion's prompt as is), and stop strings cut from what
 * it writes, with the tail that may begin one held back from the client.
 * The template is the model's Jinja one (kvb_chat_apply) unless serve runs
 * without it, then its signature family (kvb_chat_format). Jinja renders
 * run on the connection thread before the job is queued (text_render);
 * the scheduler only joins and tokenizes what they made.
 */
#include "sched_impl.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The prompt is tokenized with parse_special (the template's markers are
 * control tokens), and the client's text goes in marked
 * (kvb_vocab_mark_plain): its "<|im_end|>" stays text, so a message cannot
 * close its turn and write another role's. --special-in-content: as
 * written (the old reading). A completion's prompt (marked false) is the
 * client's whole text, read as /tokenize reads it: with parse_special and
 * no marks, so a literal U+FDD0 in it is text as written. */
static int32_t *tokens_of(struct server *srv, const char *text, bool marked, bool bos, int32_t pending, int32_t *n) {
    int32_t *ids = NULL, k = 0;
    const kvb_status ts = !marked || srv->o.special_in_content ? kvb_vocab_tokenize(srv->vocab, text, strlen(text), bos, true, &ids, &k)
                                                               : kvb_vocab_tokenize_marked(srv->vocab, text, strlen(text), bos, &ids, &k);
    if (ts != KVB_OK) return NULL;
    int32_t *all = malloc(sizeof(int32_t) * (size_t)(k + 1));
    if (!all) { kvb_buffer_free(ids); return NULL; }
    int32_t m = 0;
    if (pending >= 0) all[m++] = pending;
    if (k) memcpy(all + m, ids, sizeof(int32_t) * (size_t)k);
    kvb_buffer_free(ids);
    *n = m + k;
    return all;
}

/* *s marked in place (a cJSON string); false for want of memory. */
static bool mark_str(const struct server *srv, char **s) {
    char *m = NULL;
    size_t ml = 0;
    const size_t sl = strlen(*s);
    if (kvb_vocab_mark_plain(srv->vocab, *s, sl, &m, &ml) != KVB_OK) return false;
    if (ml != sl) { /* marks only add bytes: the same length is the same text */
        char *c = cJSON_malloc(ml + 1);
        if (!c) { kvb_buffer_free(m); return false; }
        memcpy(c, m, ml + 1);
        cJSON_free(*s);
        *s = c;
    }
    kvb_buffer_free(m);
    return true;
}

static bool mark_tree(const struct server *srv, cJSON *n) {
    for (; n; n = n->next) {
        if (n->string && !(n->type & cJSON_StringIsConst) && !mark_str(srv, &n->string)) return false;
        if (cJSON_IsString(n) && n->valuestring && !mark_str(srv, &n->valuestring)) return false;
        if (n->child && !mark_tree(srv, n->child)) return false;
    }
    return true;
}

/* The client's JSON (messages, tools, template variables) with every
 * string and key marked, or NULL with *oom; NULL without it: use json as
 * it is (none given, or --special-in-content). */
static char *marked_json(const struct server *srv, const char *json, bool *oom) {
    if (!json || srv->o.special_in_content) return NULL;
    cJSON *t = cJSON_Parse(json);
    char *out = t && mark_tree(srv, t) ? cJSON_PrintUnformatted(t) : NULL;
    cJSON_Delete(t);
    if (!out) *oom = true;
    return out;
}

static kvb_status render(const struct server *srv, const struct job *j, const char *msgs, bool gen, char **out, size_t *len) {
    bool oom = false;
    char *m = marked_json(srv, msgs, &oom), *tools = marked_json(srv, j->tools_json, &oom), *vars = marked_json(srv, j->vars_json, &oom);
    struct kvb_chat_apply_params p = kvb_chat_apply_default_params();
    p.template_text = srv->template_text;
    p.vocab = srv->vocab;
    p.messages_json = m ? m : msgs;
    p.tools_json = tools ? tools : j->tools_json;
    p.vars_json = vars ? vars : j->vars_json;
    p.add_generation_prompt = gen;
    p.strip_bos = true;
    p.deadline_ms = srv->o.template_deadline_ms; /* 0: the library's 2 s */
    const kvb_status st = oom ? KVB_ERR_NOMEM : kvb_chat_apply(&p, out, len);
    cJSON_free(m);
    cJSON_free(tools);
    cJSON_free(vars);
    return st;
}

/* The request's messages [0, n) through the template's signature family,
 * after the template's default system message when the request has no
 * system message and the template has one. */
static kvb_status format_messages(const struct server *srv, const struct job *j, int32_t n, bool gen, char **text) {
    const bool sys = !j->system && srv->default_system[0];
    struct kvb_chat_message *m = malloc(sizeof *m * (size_t)(n + 1));
    if (!m) return KVB_ERR_NOMEM;
    if (sys) m[0] = (struct kvb_chat_message){"system", srv->default_system};
    if (n) memcpy(m + sys, j->msgs, sizeof *m * (size_t)n);
    kvb_status st = KVB_OK;
    char **marked = srv->o.special_in_content ? NULL : calloc((size_t)n + 1, sizeof *marked); /* the client's text, marked */
    if (!srv->o.special_in_content && !marked) st = KVB_ERR_NOMEM;
    for (int32_t i = 0; marked && i < n && st == KVB_OK; i++) {
        st = kvb_vocab_mark_plain(srv->vocab, j->msgs[i].content, strlen(j->msgs[i].content), &marked[i], NULL);
        if (st == KVB_OK) m[sys + i].content = marked[i];
    }
    size_t len;
    if (st == KVB_OK) st = kvb_chat_format(srv->style, m, n + sys, gen, text, &len);
    for (int32_t i = 0; marked && i < n; i++) kvb_buffer_free(marked[i]);
    free(marked);
    free(m);
    return st;
}

/* A library buffer as a malloc'ed copy (NULL: out of memory). */
static char *own_copy(char *lib, size_t len) {
    char *t = malloc(len + 1);
    if (t) {
        memcpy(t, lib, len);
        t[len] = 0;
    }
    kvb_buffer_free(lib);
    return t;
}

/* What a session's later turn reads through the Jinja template, less what
 * comes after the stop token (put before it at admission, with_close): the
 * template's rendering of the new messages after the previous exchange
 * (the conversation with them, less the conversation up to its last
 * answer). The request's own history is used when it sends one and the
 * template renders it as a prefix of the whole; else a stand-in exchange. */
/* The rendering of cont[k] after that of prev[k], for the first k whose
 * renderings agree (prev's a prefix of cont's). whole: cont[0] rendered
 * already (text_render's r_all, when cont[0] is the whole conversation), or
 * NULL. */
static kvb_status continue_of(struct server *srv, const struct job *j, const char *const prev[2], const char *const cont[2], const char *whole,
                              char **out, char *err, size_t cap) {
    kvb_status st = KVB_ERR_INVALID;
    for (int k = 0; k < 2; k++) {
        if (!prev[k]) continue;
        char *p = NULL, *f = NULL;
        size_t pl = 0, fl = 0;
        const char *c = k == 0 ? whole : NULL;
        st = render(srv, j, prev[k], false, &p, &pl);
        if (st == KVB_OK && !c && (st = render(srv, j, cont[k], true, &f, &fl)) == KVB_OK) c = f;
        if (c && !f) fl = strlen(c);
        if (st != KVB_OK) snprintf(err, cap, "the chat template: %s", kvb_last_error());
        else if (fl < pl || memcmp(c, p, pl)) {
            st = KVB_ERR_INVALID;
            snprintf(err, cap, "the chat template renders the conversation so that its new messages are no continuation of the session");
        } else if (!(*out = malloc(fl - pl + 1))) {
            st = KVB_ERR_NOMEM;
        } else {
            memcpy(*out, c + pl, fl - pl + 1);
        }
        kvb_buffer_free(p);
        kvb_buffer_free(f);
        if (st == KVB_OK || st == KVB_ERR_NOMEM) break;
    }
    return st;
}

static kvb_status jinja_continue(struct server *srv, const struct job *j, char **out, char *err, size_t cap) {
    const char *prev[2] = {j->prev_json, j->standin_prev_json}, *cont[2] = {j->cont_json, j->standin_json};
    return continue_of(srv, j, prev, cont, NULL, out, err, cap);
}

/* An implicit session's candidate c (implicit.c): what the request reads
 * after the checkpoint of its first cand_msgs[c] messages, as a session's
 * later turn reads its new messages (message_sets in openai.c: the history
 * up to the checkpoint's answer, and it with the later messages but for
 * system messages, which a session never reads after its first turn). */
static kvb_status candidate_continue(struct server *srv, const struct job *j, int c, char **out) {
    cJSON *all = cJSON_Parse(j->all_json), *prev = cJSON_CreateArray(), *cont = cJSON_CreateArray();
    cJSON *scont = cJSON_Parse(j->standin_prev_json); /* the stand-in exchange, then the new messages */
    int i = 0;
    const cJSON *m;
    bool ok = all && prev && cont && scont;
    const cJSON *msgs = ok ? all : NULL;
    cJSON_ArrayForEach(m, msgs) {
        const char *role = cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring;
        const bool sys = !strcmp(role, "system") || !strcmp(role, "developer");
        if (i < j->cand_msgs[c]) ok = ok && cJSON_AddItemToArray(prev, cJSON_Duplicate(m, true));
        if (i < j->cand_msgs[c] || !sys) ok = ok && cJSON_AddItemToArray(cont, cJSON_Duplicate(m, true));
        if (i >= j->cand_msgs[c] && !sys) ok = ok && cJSON_AddItemToArray(scont, cJSON_Duplicate(m, true));
        i++;
    }
    char *pj = ok ? cJSON_PrintUnformatted(prev) : NULL, *cj = ok ? cJSON_PrintUnformatted(cont) : NULL;
    char *sc = ok ? cJSON_PrintUnformatted(scont) : NULL;
    const bool all_kept = ok && cJSON_GetArraySize(cont) == i; /* no system message after the checkpoint was left out */
    cJSON_Delete(all);
    cJSON_Delete(prev);
    cJSON_Delete(cont);
    cJSON_Delete(scont);
    char err[320];
    /* as jinja_continue: the request's own history when the template renders it as a prefix of the whole, else the stand-in */
    const char *p2[2] = {pj, j->standin_prev_json}, *c2[2] = {cj, sc};
    /* none left out: the continuation is the whole conversation, rendered already (r_all) */
    const char *whole = all_kept && j->r_all_st == KVB_OK ? j->r_all : NULL;
    const kvb_status st = pj && cj && sc ? continue_of(srv, j, p2, c2, whole, out, err, sizeof err) : KVB_ERR_NOMEM;
    cJSON_free(pj);
    cJSON_free(cj);
    cJSON_free(sc);
    return st;
}

/* The closing the template writes after an answer, less the stop token the
 * model ended it with (that token is fed as `pending`), then delta. */
static char *with_close(const struct server *srv, const struct sess *x, const char *delta) {
    const char *close = srv->closing ? srv->closing : "";
    const size_t sl = strlen(x->stop_text);
    if (sl && !strncmp(close, x->stop_text, sl)) close += sl;
    else if (sl) close = "";
    const size_t cl = strlen(close), dl = strlen(delta);
    char *t = malloc(cl + dl + 1);
    if (t) {
        memcpy(t, close, cl);
        memcpy(t + cl, delta, dl + 1);
    }
    return t;
}

/* The conversation's instructions: its leading system and developer
 * messages of the JSON array all, as a JSON array (malloc), or NULL (none
 * and want_empty false, or no memory). */
static char *instruction_messages(const char *all, bool want_empty) {
    cJSON *a = all ? cJSON_Parse(all) : NULL, *out = cJSON_CreateArray();
    int k = 0;
    for (cJSON *m = cJSON_IsArray(a) ? a->child : NULL; m && out; m = m->next, k++) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role) || (strcmp(role->valuestring, "system") && strcmp(role->valuestring, "developer"))) break;
        cJSON *c = cJSON_Duplicate(m, true);
        if (!c) break;
        cJSON_AddItemToArray(out, c);
    }
    char *t = out && (k || want_empty) ? cJSON_PrintUnformatted(out) : NULL;
    cJSON_Delete(a);
    cJSON_Delete(out);
    return t;
}

void text_render(struct server *srv, struct job *j) {
    if (j->rendered || j->kind != JOB_CHAT || !srv->jinja || srv->o.dry_run) return;
    j->rendered = true;
    char *t = NULL;
    size_t len = 0;
    j->r_all_st = render(srv, j, j->all_json, true, &t, &len);
    if (j->r_all_st == KVB_OK && !(j->r_all = own_copy(t, len))) j->r_all_st = KVB_ERR_NOMEM;
    if (j->r_all_st != KVB_OK) snprintf(j->r_all_err, sizeof j->r_all_err, "the chat template: %s", kvb_last_error());
    if (j->session_id[0]) j->r_cont_st = jinja_continue(srv, j, &j->r_cont, j->r_cont_err, sizeof j->r_cont_err);
    for (int c = 0; j->implicit && c < j->n_cand; c++) j->cand_st[c] = candidate_continue(srv, j, c, &j->cand_cont[c]); /* one that fails is not tried */
    if (j->shared_json && render(srv, j, j->shared_json, false, &t, &len) == KVB_OK) j->r_shared = own_copy(t, len);
    char *instr = j->n_keep < 0 ? instruction_messages(j->all_json, j->tools_json != NULL) : NULL; /* n_keep -1: the span is wanted */
    if (instr && render(srv, j, instr, false, &t, &len) == KVB_OK) j->r_instr = own_copy(t, len);
    free(instr);
}

int32_t instruction_span(struct server *srv, const struct job *j, const int32_t *ids, int32_t n) {
    if (j->kind != JOB_CHAT) return 0; /* a completion has no messages: n_keep -1 pins nothing */
    char *lib = NULL;
    const char *text = NULL;
    if (srv->jinja) {
        text = j->r_instr; /* text_render's */
    } else {
        int32_t k = 0;
        while (k < j->n_msgs && (!strcmp(j->msgs[k].role, "system") || !strcmp(j->msgs[k].role, "developer"))) k++;
        if (k > 0 && format_messages(srv, j, k, false, &lib) == KVB_OK) text = lib;
    }
    int32_t nb = 0, span = 0;
    int32_t *pre = text ? tokens_of(srv, text, true, true, -1, &nb) : NULL;
    kvb_buffer_free(lib);
    /* the tokens the instructions rendered alone share with the whole prompt (a merge across the end would differ) */
    while (pre && span < nb && span < n && pre[span] == ids[span]) span++;
    free(pre);
    return span;
}

/* The text a turn reads, as tokens; NULL with err filled. */
int32_t *turn_tokens(struct server *srv, struct job *j, const struct sess *x, int32_t pending, int32_t *n, char *err, size_t cap) {
    const bool first = !x || x->turns == 0;
    const char *text = NULL;
    char *mine = NULL, *lib = NULL; /* what text points into, to free: malloc's, the library's */
    kvb_status st;
    bool named = false; /* err holds why st failed (a template's limit is KVB_ERR_NOMEM too, named by the library) */
    snprintf(err, cap, "the prompt is empty after tokenizing");
    if (j->kind == JOB_COMPLETION && j->ptoks) { /* tokenized already (implicit.c's lookup): all of it, or after a checkpoint of
                                                   * its first cand_ntok tokens the rest, from the pending one */
        const int32_t from = first ? 0 : j->cand_ntok - 1;
        if (!first && (from < 0 || from >= j->n_ptoks || j->ptoks[from] != pending)) return NULL;
        int32_t *ids = malloc(sizeof *ids * (size_t)(j->n_ptoks - from ? j->n_ptoks - from : 1));
        if (ids && j->n_ptoks - from) memcpy(ids, j->ptoks + from, sizeof *ids * (size_t)(j->n_ptoks - from));
        *n = j->n_ptoks - from;
        return ids;
    }
    if (j->kind == JOB_COMPLETION) {
        return tokens_of(srv, j->prompt, false, first, first ? -1 : pending, n);
    }
    if (srv->jinja) {
        text_render(srv, j); /* made before the job was queued; here only for one queued without it */
        if (first) {
            st = j->r_all_st;
            text = j->r_all;
            if (st != KVB_OK) named = snprintf(err, cap, "%s", j->r_all_err) > 0;
        } else {
            st = j->r_cont_st;
            if (st != KVB_OK) named = snprintf(err, cap, "%s", j->r_cont_err) > 0;
            else if (!(text = mine = with_close(srv, x, j->r_cont))) st = KVB_ERR_NOMEM;
        }
        if (st == KVB_OK) {
            j->syntax = srv->syntax;
            kvb_chat_syntax_detect(srv->template_text, text, &j->syntax); /* think_open from the prompt's end */
            j->syntax.tools = srv->syntax.tools;
        }
        if (st == KVB_OK && j->prefill) {
            const size_t tl = strlen(text), fl = strlen(j->prefill);
            char *t = malloc(tl + fl + 1);
            if (!t) st = KVB_ERR_NOMEM;
            else {
                memcpy(t, text, tl);
                memcpy(t + tl, j->prefill, fl + 1);
                free(mine);
                text = mine = t;
            }
        }
    } else if (first) {
        /* the whole conversation, with the template's default system message if it has one */
        st = format_messages(srv, j, j->n_msgs, true, &lib);
        if (st != KVB_OK) named = snprintf(err, cap, "%s", kvb_last_error()) > 0;
        text = lib;
    } else {
        char *user = NULL;
        st = srv->o.special_in_content ? KVB_OK : kvb_vocab_mark_plain(srv->vocab, j->user, strlen(j->user), &user, NULL);
        if (st == KVB_OK) st = kvb_chat_turn_text(srv->style, NULL, user ? user : j->user, false, x->stop_text, &lib, NULL);
        kvb_buffer_free(user);
        if (st != KVB_OK) named = snprintf(err, cap, "%s", kvb_last_error()) > 0;
        text = lib;
    }
    if (st == KVB_OK && j->answer_prefix) { /* a final assistant message: the answer continues it (no session: openai.c) */
        char *marked = NULL; /* the client's text: its control-token text stays text, as in the messages */
        const char *ap = j->answer_prefix;
        if (!srv->o.special_in_content && kvb_vocab_mark_plain(srv->vocab, ap, strlen(ap), &marked, NULL) != KVB_OK) st = KVB_ERR_NOMEM;
        if (marked) ap = marked;
        const size_t tl = st == KVB_OK ? strlen(text) : 0, al = strlen(ap);
        char *t = st == KVB_OK ? malloc(tl + al + 1) : NULL;
        if (st == KVB_OK && !t) st = KVB_ERR_NOMEM;
        else if (t) {
            memcpy(t, text, tl);
            memcpy(t + tl, ap, al + 1);
            free(mine);
            text = mine = t;
        }
        kvb_buffer_free(marked);
    }
    int32_t *ids = NULL;
    if (st == KVB_ERR_NOMEM && !named) snprintf(err, cap, "out of memory");
    else if (st == KVB_OK) ids = tokens_of(srv, text, true, first, first ? -1 : pending, n);
    free(mine);
    kvb_buffer_free(lib);
    return ids;
}

int32_t *completion_tokens(struct server *srv, const struct job *j, int32_t *n) { return tokens_of(srv, j->prompt, false, true, -1, n); }

int32_t prefix_boundary(struct server *srv, const struct job *j, const int32_t *ids, int32_t n) {
    if (j->kind != JOB_CHAT) return 0;
    char *lib = NULL;
    const char *text = NULL;
    if (srv->jinja) {
        text = j->r_shared; /* text_render's */
    } else {
        int32_t last_user = -1;
        for (int32_t i = 0; i < j->n_msgs; i++)
            if (!strcmp(j->msgs[i].role, "user")) last_user = i;
        if ((last_user > 0 || (last_user == 0 && !j->system && srv->default_system[0])) && format_messages(srv, j, last_user, false, &lib) == KVB_OK)
            text = lib;
    }
    int32_t nb = 0;
    int32_t *pre = text ? tokens_of(srv, text, true, true, -1, &nb) : NULL;
    kvb_buffer_free(lib);
    /* the shared messages' tokens must begin the prompt's (a merge across the cut would not) */
    const int32_t cut = pre && nb < n && !memcmp(pre, ids, sizeof(int32_t) * (size_t)nb) ? nb : 0;
    free(pre);
    return cut >= srv->o.prefix_min ? cut : 0;
}

/* The longest tail of text that begins some stop string. */
static size_t stop_prefix_tail(const struct job *j) {
    size_t best = 0;
    for (int k = 0; k < j->n_stops; k++) {
        const size_t ls = strlen(j->stops[k]);
        for (size_t t = ls - 1; t > best; t--)
            if (t <= j->text.n && !memcmp(j->text.p + j->text.n - t, j->stops[k], t)) { best = t; break; }
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
            if (!memcmp(j->text.p + at, j->stops[k], ls)) {
                j->text.n = at;
                j->text.p[at] = 0;
                j->held = 0;
                return true;
            }
    }
    j->held = stop_prefix_tail(j);
    return false;
}
