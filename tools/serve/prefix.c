/*
 * prefix.c — shared prefixes: sessions that begin with the same tokens (a
 * system prompt, few-shot examples) read them once and hold their pages
 * once.
 *
 * Where a prompt's shared part ends is the template's to say: a chat's
 * first turn is cut after the messages before its last user message,
 * rendered alone through the same template (text.c, prefix_boundary), when
 * their tokens begin the whole prompt's and number at least --prefix-min.
 * Every such turn is read with no chunk crossing the cut
 * (kvb_seq_params.prompt_split), shared or not, --prefix-cache 0 too, so
 * the chunks, and what a policy evicts between them, never depend on
 * whether a prefix was there.
 *
 * The scheduler keeps up to --prefix-cache prefixes, each a sequence of the
 * batch that read exactly those tokens under one cache configuration and
 * finished (max_tokens 1; its one sampled token is never read). A turn whose
 * prompt begins with a prefix that is there forks it (kvb_batch_seq_fork:
 * the same pages, copy on write) and reads only the rest of its prompt; so
 * does a turn whose prefix is not there yet, after a sequence it starts has
 * read it (meanwhile it keeps its place in the queue without holding up the
 * turns behind it, and --queue-timeout does not end it: the reading is
 * progress): the second session's first token skips the prefix, and every turn
 * with a prefix reads its prompt cut at the same place. A fork continues
 * exactly as the prefix's own sequence would (test_batch), so a session's
 * text is the same with or without sharing (test_serve_prefix_cli.sh).
 *
 * A prefix is found only by turns of the tenant and cache_salt of the turn
 * that had it read (its scope, tenant.c): another tenant's turn with the
 * same prompt reads its own, so nothing it sees (cached_tokens, the time to
 * its first token) depends on what another tenant sent.
 *
 * Prefixes have --prefix-cache places in the batch beside the sessions'
 * (session_place keeps sessions and turns to --parallel + --max-sessions).
 * A prefix is let go, least recently used first, when another needs its
 * place, or when the pool is short and no idle session is left to offload;
 * pages its forks still share stay theirs. A prefix whose reading fails for
 * want of pages is dropped, and the turns that waited for it read their
 * whole prompts as if there were no sharing.
 */
#include "sched_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct prefix {
    int32_t *ids;
    int32_t n;
    struct kvb_kv_params kv; /* the cache configuration it was read under (recall off) */
    int32_t n_ctx;
    unsigned char scope[SERVE_DIGEST]; /* the tenant and cache_salt of the turn that read it (tenant.c): no other forks it */
    int32_t seq;             /* its sequence in the batch */
    bool ready;              /* read: turns may fork it */
    double last_used;
};

static bool same_config(const struct kvb_kv_params *a, int32_t a_ctx, const struct kvb_seq_params *sp) {
    const struct kvb_kv_params *b = &sp->kv;
    return !memcmp(&a->policy, &b->policy, sizeof a->policy) && a->pos_mode == b->pos_mode && a->max_distance == b->max_distance &&
           a->kv_dtype == b->kv_dtype && a->kv_dtype_v == b->kv_dtype_v && a->block_size == b->block_size && a_ctx == sp->n_ctx &&
           a->keep == b->keep;
}

static struct prefix *find(struct sched *s, const struct job *j, const int32_t *ids, int32_t n) {
    for (int i = 0; i < s->n_prefixes; i++) {
        struct prefix *p = &s->prefixes[i];
        if (p->n == n && !memcmp(p->scope, j->scope, SERVE_DIGEST) && !memcmp(p->ids, ids, sizeof(int32_t) * (size_t)n) &&
            same_config(&p->kv, p->n_ctx, &j->sp))
            return p;
    }
    return NULL;
}

static void drop(struct sched *s, int i) {
    struct prefix *p = &s->prefixes[i];
    kvb_batch_remove(s->b, p->seq);
    if (!p->ready) s->n_reading--;
    free(p->ids);
    s->prefixes[i] = s->prefixes[--s->n_prefixes];
}

bool prefix_drop_lru(struct server *srv) {
    struct sched *s = srv->sched;
    int lru = -1;
    for (int i = 0; i < s->n_prefixes; i++)
        if (s->prefixes[i].ready && (lru < 0 || s->prefixes[i].last_used < s->prefixes[lru].last_used)) lru = i;
    if (lru < 0) return false;
    drop(s, lru);
    return true;
}

bool offload_one(struct server *srv) {
    return offload_session(srv) || prefix_drop_lru(srv); /* a prefix's forks keep what they share */
}

/* Starts a sequence that reads ids[0..n) as a new prefix. */
static bool start_reading(struct server *srv, const struct job *j, const int32_t *ids, int32_t n) {
    struct sched *s = srv->sched;
    if (s->n_prefixes == srv->o.prefix_cache && !prefix_drop_lru(srv)) return false; /* every place is being read */
    struct kvb_seq_params sp = j->sp;
    sp.prompt_split = 0;
    sp.sampler = kvb_sampler_default_params();
    sp.sampler.temp = 0;
    sp.max_tokens = 1;
    sp.ignore_eos = true;
    if (kvb_batch_can_admit(s->b, &sp, n) != KVB_OK) return false;
    int32_t *copy = malloc(sizeof(int32_t) * (size_t)n);
    if (!copy) return false;
    int32_t seq = -1;
    if (kvb_batch_add(s->b, &sp, ids, n, &seq) != KVB_OK) { /* its place is one of --prefix-cache's */
        free(copy);
        return false;
    }
    memcpy(copy, ids, sizeof(int32_t) * (size_t)n);
    struct prefix *p = &s->prefixes[s->n_prefixes++];
    memset(p, 0, sizeof *p);
    p->ids = copy;
    p->n = n;
    p->kv = j->sp.kv;
    p->kv.layers = NULL;
    p->kv.n_layers = 0;
    p->kv.recall.cold_dir = NULL;
    p->n_ctx = j->sp.n_ctx;
    memcpy(p->scope, j->scope, SERVE_DIGEST);
    p->seq = seq;
    p->last_used = serve_now();
    s->n_reading++;
    return true;
}

int prefix_admit(struct server *srv, struct job *j, const int32_t *ids, int32_t n, int32_t *seq) {
    struct sched *s = srv->sched;
    /* the snapkv family and kvzip compress a prompt where it ends: a prefix read alone would be compressed at its own end */
    const enum kvb_policy_id pid = j->sp.kv.policy.id;
    if (srv->o.prefix_cache <= 0 || j->prefix_tried || j->sp.kv.recall.pages > 0 || pid == KVB_POLICY_SNAPKV || pid == KVB_POLICY_PYRAMIDKV ||
        pid == KVB_POLICY_ADAKV || pid == KVB_POLICY_KVZIP)
        return PREFIX_NONE;
    if (j->prefix_n <= 0) {
        j->prefix_tried = true;
        return PREFIX_NONE;
    }
    struct prefix *p = find(s, j, ids, j->prefix_n);
    if (!p) {
        /* it was dropped while this turn waited for it, or there is no room to read it: no sharing */
        if (j->prefix_asked || !start_reading(srv, j, ids, j->prefix_n)) {
            j->prefix_tried = true;
            return PREFIX_NONE;
        }
        j->prefix_waiting = j->prefix_asked = j->prefix_started = true;
        return PREFIX_WAIT;
    }
    if (!p->ready) {
        j->prefix_waiting = j->prefix_asked = true;
        return PREFIX_WAIT;
    }
    int32_t id = -1;
    kvb_status st = kvb_batch_seq_fork(s->b, p->seq, &j->sp, &id); /* its place: session_place made it */
    if (st == KVB_OK) {
        struct kvb_seq_params rest = j->sp;
        rest.prompt_split = 0; /* the split is where the rest begins */
        st = kvb_batch_continue(s->b, id, &rest, ids + p->n, n - p->n);
        if (st != KVB_OK) kvb_batch_remove(s->b, id);
    }
    if (st != KVB_OK) {
        j->prefix_tried = true;
        return PREFIX_NONE;
    }
    p->last_used = serve_now();
    if (!j->prefix_started) { /* the turn that had it read paid for it */
        s->prefix_hits++;
        s->prefix_tokens_reused += p->n;
        j->cached_tokens = p->n;
    }
    *seq = id;
    return PREFIX_FORKED;
}

void prefix_poll(struct server *srv) {
    struct sched *s = srv->sched;
    for (int i = 0; s->n_reading > 0 && i < s->n_prefixes; i++) {
        struct prefix *p = &s->prefixes[i];
        struct kvb_seq_info si;
        if (p->ready || kvb_batch_seq_info(s->b, p->seq, &si) != KVB_OK || si.state != KVB_SEQ_DONE) continue;
        p->ready = true;
        p->last_used = serve_now(); /* the turns that waited for it come next: not the first to go */
        s->n_reading--;
    }
}

bool prefix_step_failed(struct server *srv, int32_t seq) {
    struct sched *s = srv->sched;
    for (int i = 0; i < s->n_prefixes; i++)
        if (s->prefixes[i].seq == seq) {
            drop(s, i);
            return true;
        }
    return false;
}

int prefix_init(struct server *srv) {
    struct sched *s = srv->sched;
    if (srv->o.prefix_cache <= 0) return 0;
    s->prefixes = calloc((size_t)srv->o.prefix_cache, sizeof *s->prefixes);
    return s->prefixes ? 0 : -1;
}

void prefix_free(struct server *srv) {
    struct sched *s = srv->sched;
    while (s->n_prefixes > 0) drop(s, s->n_prefixes - 1);
    free(s->prefixes);
    s->prefixes = NULL;
}
