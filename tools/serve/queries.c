/*
 * queries.c — GET /v1/sessions/{id}, its /map and DELETE, on the
 * scheduler thread. A connection thread queues a struct ctl and waits
 * (ctl_run); the loop answers it from memory when the session is there,
 * else posts a store request and answers when the worker is done: a
 * stored session's state from its blob's meta, its map by loading it into
 * the batch for the moment; a delete removes it from memory and the store.
 */
#include "sched_impl.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int sess_json(struct server *srv, const struct sess *x, bool busy, bool with_policy, struct kvb_str *out) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", tenant_public_id(x->id));
    cJSON_AddStringToObject(o, "object", "session");
    cJSON_AddBoolToObject(o, "in_memory", x->seq >= 0);
    cJSON_AddBoolToObject(o, "busy", busy);
    cJSON_AddNumberToObject(o, "turns", (double)x->turns);
    cJSON_AddNumberToObject(o, "position", (double)x->position);
    cJSON_AddNumberToObject(o, "cache_tokens", (double)x->cache_tokens);
    if (srv->mi.n_swa_layers) { /* both kinds of layers, per stream */
        cJSON_AddNumberToObject(o, "window_layers", srv->mi.n_swa_layers);
        cJSON_AddNumberToObject(o, "window", srv->mi.sliding_window);
        cJSON_AddNumberToObject(o, "window_cache_tokens", (double)x->window_tokens);
        cJSON_AddNumberToObject(o, "global_cache_tokens", (double)x->global_tokens);
    }
    cJSON_AddNumberToObject(o, "kv_bytes", (double)x->kv_bytes);
    if (srv->mi.n_rec_layers) { /* a hybrid model: its recurrent layers' state, part of kv_bytes (pages held; the model's size when not in memory) */
        struct kvb_cache_stats cs = {0};
        if (x->seq >= 0) kvb_cache_get_stats(kvb_batch_seq_cache(srv->sched->b, x->seq), &cs);
        cJSON_AddNumberToObject(o, "recurrent_layers", srv->mi.n_rec_layers);
        cJSON_AddNumberToObject(o, "state_bytes", (double)(x->seq >= 0 ? cs.state_bytes : srv->mi.state_bytes));
    }
    cJSON_AddNumberToObject(o, "cold_pages", (double)x->cold_pages);
    cJSON_AddNumberToObject(o, "stored_bytes", (double)x->stored_bytes);
    cJSON_AddNumberToObject(o, "version", (double)(x->version < 0 ? 0 : x->version));
    if (with_policy) {
        cJSON_AddStringToObject(o, "kv_policy", kvb_policy_name(x->pol.id));
        cJSON_AddNumberToObject(o, "kv_budget", x->pol.budget);
        cJSON_AddNumberToObject(o, "kv_sinks", x->pol.n_sink);
    }
    cJSON_AddNumberToObject(o, "pinned", x->keep); /* positions 0..pinned-1 are never evicted (n_keep, --keep-max) */
    cJSON_AddNumberToObject(o, "keep_span", x->keep_span);
    cJSON_AddNumberToObject(o, "n_keep", x->n_keep);
    cJSON_AddStringToObject(o, "store", srv->store->kind);
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!t) return 500;
    kvb_str_puts(out, t);
    kvb_str_puts(out, "\n");
    free(t);
    return 200;
}

/* Which positions each layer keeps (per KV head) in a sequence, for the page;
 * a KV-shared layer (Gemma 4) lists its source layer's, which it attends,
 * and kv_source names the source of each layer (-1: its own). */
static int seq_map(struct server *srv, const char *id, int32_t seq, const struct kvb_policy_params *pol, bool busy, struct kvb_str *out) {
    struct kvb_cache *c = kvb_batch_seq_cache(srv->sched->b, seq);
    if (!c) return 404;
    const int32_t L = srv->mi.n_layer, H = srv->mi.n_head_kv;
    struct kvb_cache_params cp;
    kvb_cache_get_params(c, &cp);
    kvb_str_printf(out, "{\"id\":\"%s\",\"object\":\"session.map\",\"position\":%lld,\"n_layer\":%d,\"n_head_kv\":%d,\"kv_policy\":\"%s\",\"kv_budget\":%d,"
                   "\"kv_sinks\":%d,\"pinned\":%d,\"busy\":%s,\"layers\":[",
              tenant_public_id(id), (long long)kvb_cache_n_past(c, 0), (int)L, (int)H, kvb_policy_name(pol->id), (int)pol->budget, (int)pol->n_sink, (int)cp.kv.keep,
              busy ? "true" : "false");
    for (int32_t l = 0; l < L; l++) {
        const int32_t held = cp.kv_source && cp.kv_source[l] >= 0 ? cp.kv_source[l] : l;
        kvb_str_puts(out, l ? ",[" : "[");
        for (int32_t h = 0; h < H; h++) {
            kvb_str_puts(out, h ? ",[" : "[");
            const int32_t n = kvb_cache_n_slots(c, held, h);
            for (int32_t k = 0; k < n; k++) {
                struct kvb_slot_info si;
                if (kvb_cache_slot_info(c, held, h, k, &si) == KVB_OK) kvb_str_printf(out, k ? ",%lld" : "%lld", (long long)si.pos_original);
            }
            kvb_str_puts(out, "]");
        }
        kvb_str_puts(out, "]");
    }
    kvb_str_puts(out, "]");
    if (cp.kv_source)
        for (int32_t l = 0; l < L; l++) kvb_str_printf(out, "%s%d", l ? "," : ",\"kv_source\":[", (int)cp.kv_source[l]);
    kvb_str_puts(out, cp.kv_source ? "]}\n" : "}\n");
    return out->err ? 500 : 200;
}

/* Answers c from memory when it can; false: it needs the store. */
static bool ctl_from_memory(struct server *srv, struct ctl *c) {
    struct sched *s = srv->sched;
    struct sess *x = sess_find(s, c->id);
    switch (c->kind) {
    case CTL_JSON:
        if (!x || x->seq < 0) return false;
        if (!x->busy) sess_figures(srv, x);
        c->status = sess_json(srv, x, x->busy != NULL, true, c->out);
        return true;
    case CTL_MAP:
        if (!x || x->seq < 0) return false;
        c->status = seq_map(srv, x->id, x->seq, &x->pol, x->busy != NULL, c->out);
        return true;
    case CTL_DELETE:
        if (x && x->busy) { c->status = 429; return true; }
        if (x) { sess_release(s, x); c->was_in_memory = true; }
        return false; /* and from the store */
    }
    return true;
}

/* Answers c from what the store said. */
void ctl_from_store(struct server *srv, struct ctl *c, struct store_req *r) {
    if (r->rc == STORE_ERROR || r->rc == STORE_UNKNOWN) { /* the store failed: as a turn's, 503 store_unavailable with its cause */
        c->status = 503;
        snprintf(c->error, sizeof c->error, "%.190s", r->error[0] ? r->error : "the store failed");
        return;
    }
    if (c->kind == CTL_DELETE) {
        c->status = r->rc == STORE_OK || (r->rc == STORE_NOT_FOUND && c->was_in_memory) ? 200 : r->rc == STORE_NOT_FOUND ? 404 : 500;
        return;
    }
    if (r->rc == STORE_NOT_FOUND) { c->status = 404; return; }
    if (r->rc != STORE_OK) { c->status = 503; return; }
    struct sess tmp;
    memset(&tmp, 0, sizeof tmp);
    snprintf(tmp.id, sizeof tmp.id, "%s", c->id);
    tmp.seq = -1;
    tmp.version = r->version;
    size_t il = 0;
    const char *img = blob_meta(r->buf, r->len, &tmp, &il);
    free(tmp.extra); /* its history is not shown */
    if (!img) { c->status = 500; return; }
    const struct sess *live = sess_find(srv->sched, c->id);
    const bool busy = live && live->busy;
    if (c->kind == CTL_JSON) { c->status = sess_json(srv, &tmp, busy, false, c->out); return; }
    /* the map of a stored session: loaded for the moment, then let go */
    struct kvb_seq_params sp = kvb_seq_default_params();
    int32_t seq = -1;
    session_place(srv);
    kvb_status st = kvb_batch_seq_load(srv->sched->b, &sp, img, il, &seq);
    while (st == KVB_ERR_NOMEM && offload_one(srv)) st = kvb_batch_seq_load(srv->sched->b, &sp, img, il, &seq);
    if (st != KVB_OK) { c->status = st == KVB_ERR_NOMEM ? 503 : 500; return; }
    struct kvb_cache_params cp;
    kvb_cache_get_params(kvb_batch_seq_cache(srv->sched->b, seq), &cp);
    c->status = seq_map(srv, c->id, seq, &cp.kv.policy, busy, c->out);
    kvb_batch_remove(srv->sched->b, seq);
}

void ctl_finish(struct ctl *c) {
    c->done = true;
    pthread_cond_broadcast(&c->cv);
}

/* The session queries waiting (under mu): answered from memory, or sent
 * to the store worker. */
void run_ctls(struct server *srv) {
    struct sched *s = srv->sched;
    struct ctl *list = s->ctl_head;
    s->ctl_head = NULL;
    for (struct ctl *c = list, *nx; c; c = nx) {
        nx = c->next;
        if (ctl_from_memory(srv, c)) { ctl_finish(c); continue; }
        struct store_req *r = s->store_stopped ? NULL : store_req_new(c->kind == CTL_DELETE ? SOP_DEL : SOP_GET, c->id, c, OWN_CTL);
        if (!r) {
            c->status = 503;
            snprintf(c->error, sizeof c->error, "%s", s->store_stopped ? "the server is stopping" : "out of memory");
            ctl_finish(c);
            continue;
        }
        store_queue_post(s->q, r);
    }
}

static int ctl_run(struct server *srv, int kind, const char *id, struct kvb_str *out, char *err, size_t cap) {
    struct ctl c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.id = id;
    c.out = out;
    pthread_cond_init(&c.cv, NULL);
    pthread_mutex_lock(&srv->mu);
    if (!srv->sched->running) {
        pthread_mutex_unlock(&srv->mu);
        pthread_cond_destroy(&c.cv);
        if (err) snprintf(err, cap, "the server is stopping");
        return 503;
    }
    c.next = srv->sched->ctl_head;
    srv->sched->ctl_head = &c;
    pthread_cond_signal(&srv->work);
    while (!c.done) pthread_cond_wait(&c.cv, &srv->mu);
    pthread_mutex_unlock(&srv->mu);
    pthread_cond_destroy(&c.cv);
    if (err) snprintf(err, cap, "%s", c.error);
    return c.status;
}

int sched_session_json(struct server *srv, const char *id, bool map, struct kvb_str *out, char *err, size_t cap) {
    return ctl_run(srv, map ? CTL_MAP : CTL_JSON, id, out, err, cap);
}

int sched_session_delete(struct server *srv, const char *id, char *err, size_t cap) { return ctl_run(srv, CTL_DELETE, id, NULL, err, cap); }
