/*
 * chat_json.c — the JSON inputs of kvb_chat_apply read with the library's
 * JSON values (src/json): each checked before a render (jjson_check), and
 * the messages as plain role/content pairs for the signature families
 * (jjson_simple_messages).
 */
#include "jinja.h"

#include <stdio.h>
#include <string.h>

/* ---- checks and plain messages for kvb_chat_apply ---- */

struct work {
    struct jerr e;
    struct jarena a;
};

/* The two entry points below parse inside one setjmp frame: their state is
 * on the heap (what the frame changes before a longjmp must not be a local),
 * with an arena of at most 256 MiB and a render's default work budget. */
static struct work *work_new(void) {
    struct work *w = kvb_calloc(1, sizeof *w);
    if (w) {
        w->a.limit = 256u << 20;
        w->e.max_work = (int64_t)1000000 * JWORK_STEP; /* a render's default budget: an object's keys are compared one by one */
    }
    return w;
}

/* After a longjmp: the failure's status, its message copied to msg. */
static kvb_status work_failed(const struct work *w, char *msg, size_t msg_cap) {
    if (msg && msg_cap) snprintf(msg, msg_cap, "%s", w->e.msg);
    return w->e.st;
}

static kvb_status work_free(struct work *w, kvb_status st) {
    jarena_free(&w->a);
    kvb_free(w);
    return st;
}

kvb_status jjson_check(const char *what, const char *text, char want, bool is_messages, char *msg, size_t msg_cap) {
    struct work *w = work_new();
    if (!w) return KVB_ERR_NOMEM;
    struct jerr *e = &w->e;
    kvb_status st = KVB_OK;
    if (!setjmp(e->jb)) {
        jv v = jjson_parse(&w->a, e, what, text, strlen(text), 512);
        if (want == '[' && v.t != JV_LIST) jerr_throw(e, KVB_ERR_INVALID, "%s: a JSON array expected", what);
        if (want == '{' && v.t != JV_DICT) jerr_throw(e, KVB_ERR_INVALID, "%s: a JSON object expected", what);
        for (int32_t i = 0; is_messages && i < v.u.l->n; i++) {
            jv m = v.u.l->v[i];
            if (m.t != JV_DICT) jerr_throw(e, KVB_ERR_INVALID, "%s: message %d is not an object", what, (int)i);
            jv *r = jv_dict_get(m.u.d, "role", 4);
            if (!r || r->t != JV_STR) jerr_throw(e, KVB_ERR_INVALID, "%s: message %d has no string \"role\"", what, (int)i);
        }
    } else {
        st = work_failed(w, msg, msg_cap);
    }
    return work_free(w, st);
}

kvb_status jjson_simple_messages(const char *text, struct kvb_chat_message **msgs, int32_t *n, void **block, char *msg, size_t msg_cap) {
    struct work *w = work_new();
    if (!w) return KVB_ERR_NOMEM;
    struct jerr *e = &w->e;
    kvb_status st = KVB_OK;
    *block = NULL;
    *msgs = NULL;
    *n = 0;
    if (!setjmp(e->jb)) {
        jv v = jjson_parse(&w->a, e, "messages", text, strlen(text), 512);
        if (v.t != JV_LIST) jerr_throw(e, KVB_ERR_INVALID, "messages: a JSON array expected");
        int32_t k = v.u.l->n;
        /* role and content texts, each NUL-terminated, after the array */
        size_t bytes = sizeof(struct kvb_chat_message) * (size_t)(k + 1);
        const char **role = jarena_alloc(&w->a, e, sizeof *role * (size_t)(k + 1)), **cont = jarena_alloc(&w->a, e, sizeof *cont * (size_t)(k + 1));
        size_t *clen = jarena_alloc(&w->a, e, sizeof *clen * (size_t)(k + 1));
        for (int32_t i = 0; i < k; i++) {
            jv m = v.u.l->v[i];
            jv *r = m.t == JV_DICT ? jv_dict_get(m.u.d, "role", 4) : NULL, *ct = m.t == JV_DICT ? jv_dict_get(m.u.d, "content", 7) : NULL;
            if (!r || r->t != JV_STR) jerr_throw(e, KVB_ERR_INVALID, "messages: message %d has no string \"role\"", (int)i);
            role[i] = r->u.s;
            struct jbuf b = {.limit = 64u << 20};
            jbuf_put(&w->a, e, &b, "", 0);
            if (ct && ct->t == JV_STR) jbuf_put(&w->a, e, &b, ct->u.s, ct->n);
            else if (ct && ct->t == JV_LIST)
                for (int32_t j = 0; j < ct->u.l->n; j++) {
                    jv part = ct->u.l->v[j];
                    jv *t = part.t == JV_DICT ? jv_dict_get(part.u.d, "text", 4) : NULL;
                    if (t && t->t == JV_STR) jbuf_put(&w->a, e, &b, t->u.s, t->n);
                }
            else if (ct && ct->t != JV_NONE) jerr_throw(e, KVB_ERR_INVALID, "messages: message %d: content is neither a string nor a list", (int)i);
            cont[i] = b.p;
            clen[i] = b.n;
            bytes += strlen(role[i]) + 1 + clen[i] + 1;
        }
        char *blk = kvb_malloc(bytes);
        if (!blk) jerr_throw(e, KVB_ERR_NOMEM, "messages: out of memory");
        struct kvb_chat_message *out = (struct kvb_chat_message *)blk;
        char *wp = blk + sizeof(struct kvb_chat_message) * (size_t)(k + 1);
        for (int32_t i = 0; i < k; i++) {
            size_t rl = strlen(role[i]);
            memcpy(wp, role[i], rl + 1);
            out[i].role = wp;
            wp += rl + 1;
            memcpy(wp, cont[i], clen[i]);
            wp[clen[i]] = 0;
            out[i].content = wp;
            wp += clen[i] + 1;
        }
        *block = blk;
        *msgs = out;
        *n = k;
    } else {
        st = work_failed(w, msg, msg_cap);
    }
    return work_free(w, st);
}
