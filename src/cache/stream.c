/*
 * stream.c — slots, holes, runs, victims and compaction of one stream (see
 * stream.h for the invariants). Growing is all or nothing and happens before
 * any change; everything after it cannot fail.
 */
#include "stream.h"

#include <stdlib.h>

int64_t kvb_stream_pages_needed(const struct kvb_stream_geom *g, const struct kvb_stream *s, int64_t n_new) {
    const int64_t need = n_new - s->n_free;
    return need > 0 ? (need + g->block_size - 1) / g->block_size : 0;
}

/* Grows every per-slot array of s to hold at least need slots. All or nothing. */
static kvb_status grow_slots(const struct kvb_stream_geom *g, struct kvb_stream *s, int64_t need) {
    if (need <= s->slot_cap) return KVB_OK;
    int64_t cap = s->slot_cap ? s->slot_cap : 64;
    while (cap < need) cap *= 2;
    const int32_t ns = KVB_MAX(g->n_state, 1);
    int32_t *pos = kvb_malloc(sizeof(int32_t) * (size_t)cap);
    float *state = kvb_calloc((size_t)cap * (size_t)ns, sizeof(float));
    int32_t *fr = kvb_malloc(sizeof(int32_t) * (size_t)cap);
    int32_t *order = kvb_malloc(sizeof(int32_t) * (size_t)cap);
    float *fs = kvb_calloc((size_t)cap, sizeof(float));
    int32_t *is = kvb_calloc((size_t)cap, sizeof(int32_t));
    int32_t *vic = kvb_calloc((size_t)cap, sizeof(int32_t));
    if (!pos || !state || !fr || !order || !fs || !is || !vic) {
        kvb_free(pos); kvb_free(state); kvb_free(fr); kvb_free(order); kvb_free(fs); kvb_free(is); kvb_free(vic);
        return KVB_ERR_NOMEM;
    }
    const size_t old = (size_t)s->slot_cap;
    if (old) {
        memcpy(pos, s->v.pos, sizeof(int32_t) * old);
        memcpy(state, s->v.state, sizeof(float) * old * (size_t)ns);
        memcpy(fr, s->free_slots, sizeof(int32_t) * old);
        memcpy(order, s->v.order, sizeof(int32_t) * old);
    }
    for (int64_t i = (int64_t)old; i < cap; i++) pos[i] = -1;
    kvb_free(s->v.pos); kvb_free(s->v.state); kvb_free(s->free_slots); kvb_free(s->v.order);
    kvb_free(s->v.fscratch); kvb_free(s->v.iscratch); kvb_free(s->victims);
    s->v.pos = pos; s->v.state = state; s->free_slots = fr; s->v.order = order; s->v.fscratch = fs; s->v.iscratch = is;
    s->victims = vic;
    s->slot_cap = cap;
    return KVB_OK;
}

static kvb_status grow_pages(struct kvb_stream *s, int64_t need) {
    if (need <= s->pages_cap) return KVB_OK;
    int64_t cap = s->pages_cap ? s->pages_cap : 8;
    while (cap < need) cap *= 2;
    uint8_t **pages = kvb_calloc((size_t)cap, sizeof(uint8_t *));
    int32_t *live = kvb_calloc((size_t)cap, sizeof(int32_t));
    if (!pages || !live) {
        kvb_free(pages); kvb_free(live);
        return KVB_ERR_NOMEM;
    }
    if (s->v.n_pages) {
        memcpy(pages, s->pages, sizeof(uint8_t *) * (size_t)s->v.n_pages);
        memcpy(live, s->v.page_live, sizeof(int32_t) * (size_t)s->v.n_pages);
    }
    kvb_free(s->pages); kvb_free(s->v.page_live);
    s->pages = pages; s->v.page_live = live; s->pages_cap = cap;
    return KVB_OK;
}

kvb_status kvb_stream_reserve(const struct kvb_stream_geom *g, struct kvb_stream *s, int64_t n_pages, int64_t n_runs) {
    if (n_pages > INT32_MAX / g->block_size) return KVB_ERR_NOMEM;
    if (grow_pages(s, n_pages) != KVB_OK || grow_slots(g, s, n_pages * g->block_size) != KVB_OK) return KVB_ERR_NOMEM;
    if (s->runs_cap < n_runs && kvb_grow((void **)&s->runs, &s->runs_cap, n_runs, sizeof(struct kvb_run)) != KVB_OK)
        return KVB_ERR_NOMEM;
    return KVB_OK;
}

void kvb_stream_attach(const struct kvb_stream_geom *g, struct kvb_stream *s, uint8_t *const *pages, int64_t np) {
    const int32_t B = g->block_size;
    for (int64_t i = 0; i < np; i++) {
        const int32_t pg = s->v.n_pages++;
        s->pages[pg] = pages[i];
        s->v.page_live[pg] = 0;
    }
    /* new slots go on top of the hole stack, lowest popping first */
    for (int64_t sl = (int64_t)s->v.n_pages * B - 1; sl >= (int64_t)(s->v.n_pages - np) * B; sl--)
        s->free_slots[s->n_free++] = (int32_t)sl;
}

void kvb_stream_detach(const struct kvb_stream_geom *g, struct kvb_stream *s, uint8_t **pages, int64_t np) {
    for (int64_t i = 0; i < np; i++) {
        const int32_t pg = --s->v.n_pages;
        pages[i] = s->pages[pg];
        s->pages[pg] = NULL;
    }
    s->n_free -= (int32_t)(np * g->block_size);
}

/* ---- runs (contiguous positions) ---- */

static void runs_append(struct kvb_stream *s, int32_t j, int32_t pos) {
    const int32_t delta = pos - j;
    if (s->n_runs > 0 && s->runs[s->n_runs - 1].delta == delta) return;
    s->runs[s->n_runs].j0 = j;
    s->runs[s->n_runs].delta = delta;
    s->n_runs++;
}

/* Logical slot je is being removed: later slots move down one rank, so their
 * delta grows by one. The run holding je splits at je. */
static void runs_remove(struct kvb_stream *s, int32_t je, int32_t n_before) {
    int32_t r = s->n_runs - 1;
    while (r > 0 && s->runs[r].j0 > je) r--;
    const int32_t end = r + 1 < s->n_runs ? s->runs[r + 1].j0 : n_before;
    for (int32_t q = r + 1; q < s->n_runs; q++) {
        s->runs[q].j0--;
        s->runs[q].delta++;
    }
    if (end - s->runs[r].j0 == 1) { /* the run was just je: drop it */
        memmove(&s->runs[r], &s->runs[r + 1], sizeof(struct kvb_run) * (size_t)(s->n_runs - r - 1));
        s->n_runs--;
    } else if (je == s->runs[r].j0) {
        s->runs[r].delta++;
    } else if (je < end - 1) { /* interior: split */
        memmove(&s->runs[r + 2], &s->runs[r + 1], sizeof(struct kvb_run) * (size_t)(s->n_runs - r - 1));
        s->runs[r + 1].j0 = je;
        s->runs[r + 1].delta = s->runs[r].delta + 1;
        s->n_runs++;
    } /* else: je was the run's last slot; nothing after it in this run */
}

int32_t kvb_stream_push(const struct kvb_stream_geom *g, struct kvb_stream *s, int32_t pos) {
    const int32_t slot = s->free_slots[--s->n_free];
    s->v.pos[slot] = pos;
    s->v.page_live[slot >> g->block_shift]++;
    const int32_t j = s->v.n++;
    s->v.order[j] = slot;
    if (g->runs) runs_append(s, j, pos);
    if (g->n_state) memset(s->v.state + (size_t)j * (size_t)g->n_state, 0, sizeof(float) * (size_t)g->n_state);
    return slot;
}

/* ---- victims and compaction ---- */

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int32_t kvb_stream_sort_victims(int32_t *victims, int32_t k) {
    if (k <= 1) return KVB_MAX(k, 0);
    if (k < 16) { /* insertion sort: k is 1 in steady state */
        for (int32_t i = 1; i < k; i++) {
            const int32_t x = victims[i];
            int32_t j = i - 1;
            while (j >= 0 && victims[j] > x) { victims[j + 1] = victims[j]; j--; }
            victims[j + 1] = x;
        }
    } else {
        qsort(victims, (size_t)k, sizeof(int32_t), cmp_i32);
    }
    int32_t u = 1;
    for (int32_t i = 1; i < k; i++)
        if (victims[i] != victims[u - 1]) victims[u++] = victims[i];
    return u;
}

/* The hole stack from v.pos: every free slot, the lowest on top. */
static void rebuild_holes(const struct kvb_stream_geom *g, struct kvb_stream *s) {
    int32_t nf = 0;
    for (int64_t sl = (int64_t)s->v.n_pages * g->block_size - 1; sl >= 0; sl--)
        if (s->v.pos[sl] < 0) s->free_slots[nf++] = (int32_t)sl;
    s->n_free = nf;
}

static void move_slot(const struct kvb_stream_geom *g, struct kvb_stream *s, int32_t *rank_of, int32_t src, int32_t dst,
                      bool copy_rows) {
    if (copy_rows) {
        memcpy(kvb_stream_row(g, s, dst), kvb_stream_row(g, s, src), g->row_bytes);
        memcpy(kvb_stream_vrow(g, s, dst), kvb_stream_vrow(g, s, src), g->row_bytes_v);
    }
    s->v.pos[dst] = s->v.pos[src];
    s->v.pos[src] = -1;
    const int32_t j = rank_of[src];
    s->v.order[j] = dst;
    rank_of[dst] = j;
}

/* Holes in pages [0, L) that s alone holds; marks each page's sharing in
 * v.fscratch (1: shared), which compaction then reads. */
static int32_t private_holes(const struct kvb_stream_geom *g, struct kvb_stream *s, struct kvb_pool *pool, int32_t L) {
    int32_t n = 0;
    for (int32_t pg = 0; pg < L; pg++) {
        const bool shared = kvb_pool_is_shared(pool, s->pages[pg]);
        s->v.fscratch[pg] = shared ? 1.0f : 0.0f;
        if (!shared) n += g->block_size - s->v.page_live[pg];
    }
    return n;
}

/* Returns whole pages to the pool. An empty page goes back at once (pointer
 * moves only: it is swapped with the last page). Moving live rows out of the
 * last page into holes waits until the stream holds two pages worth of holes,
 * then runs until it holds less than one. The hysteresis matters: with a
 * budget that is a multiple of the page size, compacting at one page of
 * holes would take and return a page at every step (measured: ~4% of a
 * decode step). So a stream wastes less than two pages. Cannot fail. */
static void compact(const struct kvb_stream_geom *g, struct kvb_stream *s, struct kvb_pool *pool) {
    const int32_t B = g->block_size;
    if (s->n_free < B) return; /* no page can be empty */
    const bool move_rows = s->n_free >= 2 * B;
    if (!move_rows) {
        bool any_empty = false;
        for (int32_t pg = 0; pg < s->v.n_pages && !any_empty; pg++) any_empty = s->v.page_live[pg] == 0;
        if (!any_empty) return;
    }
    int32_t *rank_of = s->v.iscratch; /* physical -> logical, for the moved slots */
    for (int32_t j = 0; j < s->v.n; j++) rank_of[s->v.order[j]] = j;
    uint8_t *give[64];
    int32_t n_give = 0;
    int32_t hole = 0; /* cursor over physical slots looking for holes */
    int32_t n_free = s->n_free;
    while (n_free >= B) {
        const int32_t L = s->v.n_pages - 1;
        if (s->v.page_live[L] != 0) {
            int32_t e = -1;
            for (int32_t pg = 0; pg < L; pg++)
                if (s->v.page_live[pg] == 0) { e = pg; break; }
            if (e >= 0) { /* swap the empty page e with the last page: no row copies */
                uint8_t *tp = s->pages[e];
                s->pages[e] = s->pages[L];
                s->pages[L] = tp;
                s->v.page_live[e] = s->v.page_live[L];
                s->v.page_live[L] = 0;
                for (int32_t i = 0; i < B; i++) {
                    const int32_t src = L * B + i, dst = e * B + i;
                    if (s->v.pos[src] >= 0) move_slot(g, s, rank_of, src, dst, false);
                }
            } else if (!move_rows) {
                break;
            } else { /* move the last page's live rows into holes (of pages it alone holds) */
                if (s->cow && private_holes(g, s, pool, L) < s->v.page_live[L]) break;
                for (int32_t i = 0; i < B; i++) {
                    const int32_t src = L * B + i;
                    if (s->v.pos[src] < 0) continue;
                    while (s->v.pos[hole] >= 0 || (s->cow && s->v.fscratch[hole / B] != 0)) hole++;
                    move_slot(g, s, rank_of, src, hole, true);
                    s->v.page_live[hole / B]++;
                    s->v.page_live[L]--;
                }
            }
        }
        give[n_give++] = s->pages[L];
        s->pages[L] = NULL;
        s->v.n_pages--;
        n_free -= B;
        if (n_give == 64) {
            kvb_pool_give(pool, give, n_give);
            n_give = 0;
        }
    }
    kvb_pool_give(pool, give, n_give);
    rebuild_holes(g, s);
}

void kvb_stream_remove(const struct kvb_stream_geom *g, struct kvb_stream *s, struct kvb_pool *pool,
                       const int32_t *victims, int32_t k) {
    if (k <= 0) return;
    const int32_t n_before = s->v.n;
    if (g->runs)
        for (int32_t i = k - 1; i >= 0; i--) runs_remove(s, victims[i], n_before - (k - 1 - i));
    for (int32_t i = 0; i < k; i++) {
        const int32_t slot = s->v.order[victims[i]];
        s->v.pos[slot] = -1;
        s->v.page_live[slot >> g->block_shift]--;
        s->free_slots[s->n_free++] = slot;
    }
    const size_t ns = (size_t)g->n_state;
    int32_t w = victims[0];
    for (int32_t j = victims[0], vi = 0; j < n_before; j++) {
        if (vi < k && victims[vi] == j) {
            vi++;
            continue;
        }
        s->v.order[w] = s->v.order[j];
        if (ns) memcpy(s->v.state + (size_t)w * ns, s->v.state + (size_t)j * ns, sizeof(float) * ns);
        w++;
    }
    s->v.n = w;
    compact(g, s, pool);
}

void kvb_stream_pop(const struct kvb_stream_geom *g, struct kvb_stream *s, int32_t k) {
    for (int32_t j = s->v.n - 1; j >= s->v.n - k && j >= 0; j--) { /* the last first: the earliest ends on top of the stack */
        const int32_t slot = s->v.order[j];
        s->v.pos[slot] = -1;
        s->v.page_live[slot >> g->block_shift]--;
        s->free_slots[s->n_free++] = slot;
    }
    s->v.n = KVB_MAX(0, s->v.n - k);
}

void kvb_stream_rebuild(const struct kvb_stream_geom *g, struct kvb_stream *s) {
    for (int32_t pg = 0; pg < s->v.n_pages; pg++) s->v.page_live[pg] = 0;
    for (int32_t j = 0; j < s->v.n; j++) s->v.page_live[s->v.order[j] >> g->block_shift]++;
    rebuild_holes(g, s);
    s->n_runs = 0;
    if (g->runs)
        for (int32_t j = 0; j < s->v.n; j++) runs_append(s, j, s->v.pos[s->v.order[j]]);
}

void kvb_stream_clear(struct kvb_stream *s, struct kvb_pool *pool) {
    if (s->v.n_pages && pool) kvb_pool_give(pool, s->pages, s->v.n_pages);
    s->v.n_pages = 0;
    for (int64_t k = 0; k < s->slot_cap; k++) s->v.pos[k] = -1;
    s->v.n = 0;
    s->n_free = 0;
    s->n_runs = 0;
    s->cow = false;
    if (s->qstat) memset(s->qstat, 0, sizeof(float) * s->qstat_words); /* the queries start again */
    s->qstat_n = 0;
}

void kvb_stream_free(struct kvb_stream *s) {
    kvb_free(s->pages); kvb_free(s->v.page_live); kvb_free(s->v.pos); kvb_free(s->v.state);
    kvb_free(s->free_slots); kvb_free(s->v.order); kvb_free(s->runs); kvb_free(s->v.fscratch); kvb_free(s->v.iscratch);
    kvb_free(s->victims); kvb_free(s->qstat);
    memset(s, 0, sizeof *s);
}

size_t kvb_stream_meta_bytes(const struct kvb_stream_geom *g, const struct kvb_stream *s) {
    return (size_t)s->slot_cap * (sizeof(int32_t) * 5 + sizeof(float) * (1 + (size_t)KVB_MAX(g->n_state, 1))) +
           (size_t)s->pages_cap * (sizeof(uint8_t *) + sizeof(int32_t)) + (size_t)s->runs_cap * sizeof(struct kvb_run) +
           s->qstat_words * sizeof(float); /* a policy's query statistics (expected-attention) */
}

const char *kvb_stream_check(const struct kvb_stream_geom *g, const struct kvb_stream *s) {
    const int32_t B = g->block_size;
    const int64_t slots = (int64_t)s->v.n_pages * B;
    if (s->v.n < 0 || s->n_free < 0 || (int64_t)s->v.n + s->n_free != slots) return "live slots + holes != page slots";
    for (int32_t pg = 0; pg < s->v.n_pages; pg++) {
        int32_t live = 0;
        for (int32_t i = 0; i < B; i++) live += s->v.pos[pg * B + i] >= 0;
        if (live != s->v.page_live[pg]) return "page_live disagrees with pos";
        if (!s->pages[pg]) return "a counted page is NULL";
    }
    int32_t prev = -1;
    for (int32_t j = 0; j < s->v.n; j++) {
        const int32_t slot = s->v.order[j];
        if (slot < 0 || slot >= slots) return "order points outside the pages";
        if (s->v.pos[slot] <= prev) return "logical order is not increasing original position";
        prev = s->v.pos[slot];
    }
    for (int32_t i = 0; i < s->n_free; i++) {
        const int32_t slot = s->free_slots[i];
        if (slot < 0 || slot >= slots || s->v.pos[slot] >= 0) return "a hole is not a free slot";
    }
    if (s->v.n_pages > 0 && s->n_free >= 2 * B && !s->cow) return "two pages of holes left after compaction";
    if (g->runs) {
        int32_t r = 0;
        for (int32_t j = 0; j < s->v.n; j++) {
            const int32_t delta = s->v.pos[s->v.order[j]] - j;
            if (r + 1 < s->n_runs && s->runs[r + 1].j0 == j) r++;
            if (r >= s->n_runs || s->runs[r].j0 > j || s->runs[r].delta != delta) return "runs disagree with positions";
            if (j == s->runs[r].j0 && r > 0 && s->runs[r - 1].delta == delta) return "two adjacent runs share a delta";
        }
        if (s->n_runs != (s->v.n ? r + 1 : 0)) return "runs beyond the live slots";
    }
    return NULL;
}
