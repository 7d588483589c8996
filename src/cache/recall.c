/*
 * recall.c — reversible eviction: evicted tokens go to the cold tier, and a
 * query brings back the cold pages that can matter to it.
 *
 * Eviction. The victims of a stream (rows as stored, original positions)
 * are copied into the stream's staged cold page; when it holds block_size
 * tokens it is appended to the store (cold.c) and indexed. A page is a
 * group of tokens evicted one after another, not a hot page: policies evict
 * tokens, and for streaming these are consecutive positions anyway.
 *
 * Page summary (Quest): per channel c the min lo_c and max hi_c of the
 * page's keys, as attention reads them (stored rows dequantized; keys are
 * stored rotated at their original position). For any query q,
 *     q.k = sum_c q_c k_c <= sum_c max(q_c lo_c, q_c hi_c)
 * so the bound is never below a true logit, whatever the page holds. A GQA
 * group has G query rows per KV head: the page's score is the largest of
 * their bounds. The staged (partial) page is scored the same way, so tokens
 * evicted a moment ago are recallable too. Summaries cost 2 * head_dim
 * floats per page and KV head (a 16-token f16 page of head_dim 64 holds
 * 4 KiB of rows; its summary is 512 bytes). docs/RECALL.md compares this
 * with representative keys (InfLLM).
 *
 * Recall. Each stream owns R pages of the pool (taken by the prepare step
 * once it has cold pages) as its recall area. The R best-scoring pages are
 * copied there byte for byte; pages already there stay. Attention then runs
 * over the hot slots and the area together (attend.c); the policy's
 * per-slot evidence covers the hot slots only, normalised over both.
 * With every = N the choice is made on one call in N and reused.
 */
#include "cache_impl.h"

#include <math.h>
#include <time.h>

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#define SUMW(d) (3 * (size_t)(d)) /* the staged page's summary: per-channel min, max and sum of its keys */

static void lohi_reset(float *lohi, int32_t d) {
    for (int32_t i = 0; i < d; i++) {
        lohi[i] = INFINITY;
        lohi[d + i] = -INFINITY;
        lohi[2 * d + i] = 0;
    }
}

kvb_status kvb_recall_init(struct kvb_cache *c) {
    const struct kvb_recall_params *rp = &c->params.kv.recall;
    if (rp->pages <= 0) return KVB_OK;
    const size_t n = (size_t)c->params.n_layer * (size_t)c->params.n_kv_head;
    const int32_t R = rp->pages, B = c->params.kv.block_size, d = c->params.head_dim;
    c->cold_geom = (struct kvb_cold_geom){(int32_t)n, B, d, c->params.kv.kv_dtype, c->params.kv.kv_dtype_v, c->geom.row_bytes, c->geom.row_bytes_v};
    kvb_status st = kvb_cold_create(&c->cold_geom, rp->cold_mem_bytes, rp->cold_dir, &c->cold);
    if (st != KVB_OK) return st;
    if (!(c->recall = kvb_calloc(n, sizeof *c->recall))) return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory for recall");
    if (c->pos_mode == KVB_POS_CAPPED && c->n_pairs) {
        if (!(c->recall_cs_step = kvb_malloc(sizeof(float) * 2 * (size_t)c->n_pairs * (size_t)B)))
            return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory for recall");
        for (int32_t k = 0; k < B; k++) kvb_rope_cos_sin(c->inv_freq, c->n_pairs, -(int64_t)k, c->recall_cs_step + (size_t)k * 2 * c->n_pairs);
    }
    const size_t rec = kvb_cold_record_bytes(&c->cold_geom);
    for (size_t i = 0; i < n; i++) {
        struct kvb_recall_stream *r = &c->recall[i];
        r->stage = kvb_calloc(1, rec);
        r->stage_lohi = kvb_malloc(sizeof(float) * SUMW(d));
        r->score = kvb_malloc(sizeof(float));
        r->loaded = kvb_malloc(sizeof(int64_t) * (size_t)R);
        r->pos = kvb_malloc(sizeof(int32_t) * (size_t)R * (size_t)B);
        r->order = kvb_malloc(sizeof(int32_t) * (size_t)R * (size_t)B);
        if (!r->stage || !r->stage_lohi || !r->score || !r->loaded || !r->pos || !r->order)
            return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory for recall");
        lohi_reset(r->stage_lohi, d);
        r->no_rope = c->streams[i].no_rope;
        if (c->pos_mode == KVB_POS_CAPPED) { /* far recalled keys: one run (see load_page) */
            while ((1 << r->shadow_shift) < R * B) r->shadow_shift++;
            if (!(r->shadow = kvb_malloc(sizeof(float) * 2 * (size_t)d << r->shadow_shift)))
                return kvb_fail(KVB_ERR_NOMEM, "cache: out of memory for recall");
        }
        for (int32_t a = 0; a < R; a++) r->loaded[a] = -1;
        for (int32_t t = 0; t < R * B; t++) r->pos[t] = -1;
    }
    return KVB_OK;
}

static void give_area(struct kvb_cache *c, struct kvb_recall_stream *r) {
    if (!r->pages) return;
    kvb_pool_give(c->pool, r->pages, c->params.kv.recall.pages);
    kvb_free(r->pages);
    r->pages = NULL;
    r->n = 0;
    r->reserved = false;
    for (int32_t a = 0; a < c->params.kv.recall.pages; a++) r->loaded[a] = -1;
    for (int32_t t = 0; t < c->params.kv.recall.pages * c->params.kv.block_size; t++) r->pos[t] = -1;
}

void kvb_recall_free(struct kvb_cache *c) {
    kvb_free(c->recall_cs_step);
    if (!c->recall) {
        kvb_cold_free(c->cold);
        return;
    }
    const size_t n = (size_t)c->params.n_layer * (size_t)c->params.n_kv_head;
    for (size_t i = 0; i < n; i++) {
        struct kvb_recall_stream *r = &c->recall[i];
        if (c->pool) give_area(c, r);
        kvb_free(r->stage); kvb_free(r->stage_lohi); kvb_free(r->rec); kvb_free(r->lohi); kvb_free(r->sums); kvb_free(r->score);
        kvb_free(r->loaded); kvb_free(r->pos); kvb_free(r->order); kvb_free(r->shadow);
    }
    kvb_free(c->recall);
    kvb_cold_free(c->cold);
}

void kvb_recall_reset(struct kvb_cache *c) {
    if (!c->recall) return;
    const size_t n = (size_t)c->params.n_layer * (size_t)c->params.n_kv_head;
    for (size_t i = 0; i < n; i++) {
        struct kvb_recall_stream *r = &c->recall[i];
        give_area(c, r);
        r->n_stage = 0;
        r->n_cold = 0;
        r->since = 0;
        lohi_reset(r->stage_lohi, c->params.head_dim);
    }
    kvb_cold_clear(c->cold);
}

int32_t kvb_recall_pages_needed(const struct kvb_cache *c, size_t i) {
    if (!c->recall) return 0;
    const struct kvb_recall_stream *r = &c->recall[i];
    return !r->pages && (r->n_cold > 0 || r->n_stage > 0) ? c->params.kv.recall.pages : 0;
}

void kvb_recall_attach(struct kvb_cache *c, size_t i, uint8_t *const *pages, bool reserve) {
    struct kvb_recall_stream *r = &c->recall[i];
    const int32_t R = c->params.kv.recall.pages;
    /* the pointer array itself: small, from the allocator; without it the
     * pages go straight back and this stream attends without recall */
    r->pages = kvb_malloc(sizeof(uint8_t *) * (size_t)R);
    if (!r->pages) {
        kvb_pool_give(c->pool, (uint8_t **)pages, R);
        return;
    }
    memcpy(r->pages, pages, sizeof(uint8_t *) * (size_t)R);
    r->reserved = reserve;
    r->since = 0;
    r->n = 0;
}

void kvb_recall_unreserve(struct kvb_cache *c, size_t i) {
    if (c->recall && c->recall[i].reserved) give_area(c, &c->recall[i]);
}

int64_t kvb_recall_pages_held(const struct kvb_cache *c) {
    if (!c->recall) return 0;
    const size_t n = (size_t)c->params.n_layer * (size_t)c->params.n_kv_head;
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) k += c->recall[i].pages ? c->params.kv.recall.pages : 0;
    return k;
}

size_t kvb_recall_meta_bytes(const struct kvb_cache *c) {
    if (!c->recall) return 0;
    const size_t n = (size_t)c->params.n_layer * (size_t)c->params.n_kv_head, d = (size_t)c->params.head_dim;
    const size_t R = (size_t)c->params.kv.recall.pages, B = (size_t)c->params.kv.block_size;
    size_t b = n * (sizeof(struct kvb_recall_stream) + kvb_cold_record_bytes(&c->cold_geom) + SUMW(d) * sizeof(float) +
                    (c->recall[0].shadow ? sizeof(float) * 2 * d << c->recall[0].shadow_shift : 0) +
                    R * (sizeof(int64_t) + sizeof(uint8_t *)) + 2 * R * B * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) b += (size_t)c->recall[i].cap * (sizeof(int64_t) + (3 * d + 1) * sizeof(float));
    return b;
}

/* ---- eviction: to the cold tier ---- */

/* Adds one key row (stored bytes) to a [3][d] summary: per-channel min, max
 * and sum. Summaries are built a key at a time in page order, so restoring
 * an image (kvb_recall_restore_*) rebuilds the very same floats. */
static void summary_add(const struct kvb_cache *c, float *lohi3, const uint8_t *krow) {
    const int32_t d = c->params.head_dim;
    float key[KVB_ATTN_MAX_DIM];
    kvb_kv_row_load(c->params.kv.kv_dtype, krow, key, d);
    float *lo = lohi3, *hi = lohi3 + d, *sum = lohi3 + 2 * d;
    for (int32_t ch = 0; ch < d; ch++) {
        lo[ch] = key[ch] < lo[ch] ? key[ch] : lo[ch];
        hi[ch] = key[ch] > hi[ch] ? key[ch] : hi[ch];
        sum[ch] += key[ch];
    }
}

/* Room in stream r's index for one more page (grown as a worker would:
 * doubling from 64; false when the allocator has none). */
static bool index_room(struct kvb_cache *c, struct kvb_recall_stream *r) {
    if (r->n_cold < r->cap) return true;
    const int32_t d = c->params.head_dim;
    const int64_t cap = KVB_MAX(r->cap * 2, (int64_t)64);
    int64_t *rec = kvb_malloc(sizeof(int64_t) * (size_t)cap);
    float *lohi = kvb_malloc(sizeof(float) * 2 * (size_t)d * (size_t)cap);
    float *sums = kvb_malloc(sizeof(float) * (size_t)d * (size_t)cap);
    float *score = kvb_malloc(sizeof(float) * (size_t)(cap + 1));
    if (!rec || !lohi || !sums || !score) {
        kvb_free(rec); kvb_free(lohi); kvb_free(sums); kvb_free(score);
        return false;
    }
    if (r->n_cold) {
        memcpy(rec, r->rec, sizeof(int64_t) * (size_t)r->n_cold);
        memcpy(lohi, r->lohi, sizeof(float) * 2 * (size_t)d * (size_t)r->n_cold);
        memcpy(sums, r->sums, sizeof(float) * (size_t)d * (size_t)r->n_cold);
    }
    kvb_free(r->rec); kvb_free(r->lohi); kvb_free(r->sums); kvb_free(r->score);
    r->rec = rec; r->lohi = lohi; r->sums = sums; r->score = score;
    r->cap = cap;
    return true;
}

/* Indexes record id with its [3][d] summary (min, max, sum); needs index_room. */
static void index_add(const struct kvb_cache *c, struct kvb_recall_stream *r, int64_t id, const float *lohi3) {
    const int32_t d = c->params.head_dim;
    r->rec[r->n_cold] = id;
    memcpy(r->lohi + (size_t)r->n_cold * 2 * (size_t)d, lohi3, sizeof(float) * 2 * (size_t)d);
    memcpy(r->sums + (size_t)r->n_cold * (size_t)d, lohi3 + 2 * d, sizeof(float) * (size_t)d);
    r->n_cold++;
}

/* Seals the staged page: to the store, then into the index. A page the
 * store or the index cannot take is lost (the worker cannot fail). */
static void seal_stage(struct kvb_cache *c, struct kvb_recall_stream *r, int32_t stream) {
    const int64_t id = kvb_cold_append(c->cold, r->stage, stream, r->n_stage);
    if (id >= 0 && index_room(c, r)) index_add(c, r, id, r->stage_lohi);
    else r->lost++;
    /* the staged page was possibly in the area: it is a sealed page now, reloaded if chosen */
    for (int32_t a = 0; a < c->params.kv.recall.pages; a++)
        if (r->loaded[a] == -2) r->loaded[a] = -1; /* its rows stay attended until the next choice */
    r->n_stage = 0;
    lohi_reset(r->stage_lohi, c->params.head_dim);
}

void kvb_recall_evicted(struct kvb_cache *c, struct kvb_stream *s, const int32_t *victims, int32_t k) {
    if (!c->recall || k <= 0) return;
    const size_t i = kvb_cache_stream_index(c, s);
    struct kvb_recall_stream *r = &c->recall[i];
    const struct kvb_cold_geom *g = &c->cold_geom;
    for (int32_t x = 0; x < k; x++) {
        const int32_t slot = s->v.order[victims[x]], t = r->n_stage;
        const uint8_t *kr = kvb_stream_row(&c->geom, s, slot);
        kvb_cold_rec_pos(r->stage)[t] = s->v.pos[slot];
        memcpy(kvb_cold_rec_k(g, r->stage) + (size_t)t * g->row_bytes, kr, g->row_bytes);
        memcpy(kvb_cold_rec_v(g, r->stage) + (size_t)t * g->row_bytes_v, kvb_stream_vrow(&c->geom, s, slot), g->row_bytes_v);
        summary_add(c, r->stage_lohi, kr);
        if (++r->n_stage == g->block_size) seal_stage(c, r, (int32_t)i);
    }
}

/* ---- scoring and loading ---- */

float kvb_recall_bound(const float *q, const float *lohi, int32_t d) { return kvb_page_bound_ref(q, lohi, lohi + d, d); }

static float dot(const float *a, const float *b, int32_t d) {
    float s = 0;
    for (int32_t i = 0; i < d; i++) s += a[i] * b[i];
    return s;
}

/* A page's score for n_rows query rows: the largest over the rows of the
 * summary's estimate of the page's best logit (bounds: an upper bound, from
 * lohi; centroid: q . mean key, from sum; exact: the true max, every key of
 * the record read). */
static float page_score(const struct kvb_cache *c, const float *qrot, int32_t n_rows, const float *lohi, const float *sum, int32_t n,
                        const uint8_t *rec) {
    const int32_t d = c->params.head_dim;
    const enum kvb_recall_summary mode = c->params.kv.recall.summary;
    float best = -INFINITY, mean[KVB_ATTN_MAX_DIM], key[KVB_ATTN_MAX_DIM];
    if (mode == KVB_RECALL_BOUNDS) {
        c->kr->page_bounds(qrot, n_rows, lohi, 1, d, &best);
        return best;
    }
    if (mode == KVB_RECALL_CENTROID)
        for (int32_t i = 0; i < d; i++) mean[i] = sum[i] / (float)n;
    for (int32_t t = 0; t < (mode == KVB_RECALL_EXACT ? n : 1); t++) {
        if (mode == KVB_RECALL_EXACT) kvb_kv_row_load(c->params.kv.kv_dtype, kvb_cold_rec_k(&c->cold_geom, (uint8_t *)rec) + (size_t)t * c->geom.row_bytes, key, d);
        for (int32_t g = 0; g < n_rows; g++) {
            const float b = dot(qrot + (size_t)g * d, mode == KVB_RECALL_CENTROID ? mean : key, d);
            best = b > best ? b : best;
        }
    }
    return best;
}

/* Area slots by increasing position (heap sort: R * B can be large). */
static void sort_area(struct kvb_recall_stream *r, int32_t total) {
    int32_t n = 0;
    for (int32_t t = 0; t < total; t++)
        if (r->pos[t] >= 0) r->order[n++] = t;
    int32_t *a = r->order;
    const int32_t *p = r->pos;
    for (int32_t start = n / 2 - 1, end = n;;) { /* heapify, then pop */
        int32_t root;
        if (start >= 0) root = start--;
        else {
            if (--end <= 0) break;
            const int32_t t = a[0]; a[0] = a[end]; a[end] = t;
            root = 0;
        }
        for (int32_t child; (child = 2 * root + 1) < end; root = child) {
            if (child + 1 < end && p[a[child + 1]] > p[a[child]]) child++;
            if (p[a[root]] >= p[a[child]]) break;
            const int32_t t = a[root]; a[root] = a[child]; a[child] = t;
        }
    }
    r->n = n;
}

static void area_shadow(const struct kvb_cache *c, struct kvb_recall_stream *r, int32_t a, int32_t n);

static void load_page(const struct kvb_cache *c, struct kvb_recall_stream *r, int32_t a, const uint8_t *rec, int32_t n) {
    const struct kvb_cold_geom *g = &c->cold_geom;
    const int32_t B = g->block_size;
    uint8_t *page = r->pages[a], *src = (uint8_t *)rec;
    memcpy(page, kvb_cold_rec_k(g, src), (size_t)n * g->row_bytes);
    memcpy(page + c->geom.v_offset, kvb_cold_rec_v(g, src), (size_t)n * g->row_bytes_v);
    const int32_t *pos = kvb_cold_rec_pos(src);
    for (int32_t t = 0; t < B; t++) r->pos[a * B + t] = t < n ? pos[t] : -1;
    area_shadow(c, r, a, n);
}

/* The shadow rows of area page a's first n tokens, from the page's rows and
 * r->pos (load_page, and an image's area on restore). */
static void area_shadow(const struct kvb_cache *c, struct kvb_recall_stream *r, int32_t a, int32_t n) {
    if (!r->shadow) return;
    const int32_t B = c->params.kv.block_size;
    const uint8_t *page = r->pages[a];
    const int32_t *pos = r->pos + (size_t)a * B;
    /* capped positions: a key farther than max_distance is seen at exactly that
     * distance, <R(p + L) q, R(p) k> = <R(L) q, k>: with the key rotated back to
     * position 0, every far key is one run with the query at L (attend.c) */
    const int32_t d = c->params.head_dim;
    const size_t vofs = (size_t)d << r->shadow_shift;
    float cs0[KVB_ATTN_MAX_DIM], cs[KVB_ATTN_MAX_DIM]; /* 2 x n_pairs <= head_dim */
    const int32_t np = c->n_pairs;
    for (int32_t t = 0; t < n; t++) {
        float *ks = r->shadow + (size_t)(a * B + t) * d;
        kvb_kv_row_load(c->params.kv.kv_dtype, page + (size_t)t * c->geom.row_bytes, ks, d);
        if (c->geom.row_bytes_v) /* latent rows (head_dim_v) have none: attend.c reads the key's tail */
            kvb_kv_row_load(c->params.kv.kv_dtype_v, page + c->geom.v_offset + (size_t)t * c->geom.row_bytes_v, r->shadow + vofs + (size_t)(a * B + t) * d, d);
        if (!np || r->no_rope) continue; /* a NoPE layer's keys were never rotated */
        const int64_t k = (int64_t)pos[t] - pos[0];
        if (t == 0) {
            kvb_rope_cos_sin(c->inv_freq, np, -(int64_t)pos[0], cs0);
            memcpy(cs, cs0, sizeof(float) * 2 * (size_t)np);
        } else if (k > 0 && k < B) { /* a page's tokens are mostly consecutive: -p = -p0 - k, by angle addition */
            const float *st = c->recall_cs_step + (size_t)k * 2 * np;
            for (int32_t i = 0; i < np; i++) {
                cs[i] = cs0[i] * st[i] - cs0[np + i] * st[np + i];
                cs[np + i] = cs0[np + i] * st[i] + cs0[i] * st[np + i];
            }
        } else {
            kvb_rope_cos_sin(c->inv_freq, np, -(int64_t)pos[t], cs);
        }
        kvb_rope_apply(c->params.rope.type, c->params.rope.n_dims, cs, ks);
    }
}

void kvb_recall_refresh(struct kvb_cache *c, const struct kvb_stream *s, const float *qrot, int32_t n_rows) {
    if (!c->recall || c->recall_paused) return;
    struct kvb_recall_stream *r = &c->recall[kvb_cache_stream_index(c, s)];
    if (!r->pages) return;
    if (r->since > 0 && r->since < c->params.kv.recall.every) {
        r->since++;
        return;
    }
    r->since = 1;
    const int32_t d = c->params.head_dim, R = c->params.kv.recall.pages;
    const int64_t t0 = now_ns();
    /* candidates: sealed pages 0..n_cold-1, then the staged page as n_cold */
    const int64_t nc = r->n_cold + (r->n_stage > 0);
    const int32_t B = c->params.kv.block_size;
    if (c->params.kv.recall.summary == KVB_RECALL_BOUNDS) /* every sealed page in one pass */
        c->kr->page_bounds(qrot, n_rows, r->lohi, r->n_cold, d, r->score);
    else
        for (int64_t p = 0; p < r->n_cold; p++)
            r->score[p] = page_score(c, qrot, n_rows, r->lohi + (size_t)p * 2 * (size_t)d, r->sums + (size_t)p * (size_t)d, B,
                                     kvb_cold_get(c->cold, r->rec[p]));
    if (r->n_stage > 0) r->score[r->n_cold] = page_score(c, qrot, n_rows, r->stage_lohi, r->stage_lohi + 2 * d, r->n_stage, r->stage);
    int64_t best[64]; /* the top R, highest first; ties keep the older page */
    int32_t nb = 0;
    for (int64_t p = 0; p < nc; p++) {
        int32_t at = nb;
        while (at > 0 && r->score[best[at - 1]] < r->score[p]) at--;
        if (at >= R) continue;
        if (nb < R) nb++;
        memmove(best + at + 1, best + at, sizeof(int64_t) * (size_t)(nb - 1 - at));
        best[at] = p;
    }
    const int64_t t1 = now_ns();
    /* keep the area pages that hold a chosen sealed page; load the rest */
    bool keep[64] = {false};
    bool have[64] = {false};
    for (int32_t i = 0; i < nb; i++)
        for (int32_t a = 0; a < R; a++)
            if (best[i] < r->n_cold && r->loaded[a] == best[i]) {
                keep[a] = true;
                have[i] = true;
            }
    int32_t a = 0;
    for (int32_t i = 0; i < nb; i++) {
        if (have[i]) continue;
        while (keep[a]) a++;
        if (best[i] < r->n_cold) {
            load_page(c, r, a, kvb_cold_get(c->cold, r->rec[best[i]]), c->params.kv.block_size);
            r->loaded[a] = best[i];
        } else {
            load_page(c, r, a, r->stage, r->n_stage);
            r->loaded[a] = -2;
        }
        keep[a] = true;
        r->loads++;
    }
    for (int32_t b = 0; b < R; b++)
        if (!keep[b]) {
            r->loaded[b] = -1;
            for (int32_t t = 0; t < c->params.kv.block_size; t++) r->pos[b * c->params.kv.block_size + t] = -1;
        }
    sort_area(r, R * c->params.kv.block_size);
    r->scorings++;
    r->score_ns += t1 - t0;
    r->load_ns += now_ns() - t1;
}

const struct kvb_recall_stream *kvb_recall_area(const struct kvb_cache *c, const struct kvb_stream *s) {
    if (!c->recall || c->recall_paused) return NULL;
    const struct kvb_recall_stream *r = &c->recall[kvb_cache_stream_index(c, s)];
    return r->pages && r->n > 0 ? r : NULL;
}

/* ---- restoring an image (cache_io.c) ---- */

size_t kvb_recall_body_bytes(const struct kvb_cache *c) {
    const size_t B = (size_t)c->params.kv.block_size;
    return sizeof(int32_t) * B + B * (c->geom.row_bytes + c->geom.row_bytes_v);
}

kvb_status kvb_recall_restore_page(struct kvb_cache *c, size_t i, uint8_t *rec) {
    struct kvb_recall_stream *r = &c->recall[i];
    const struct kvb_cold_geom *g = &c->cold_geom;
    float lohi3[3 * KVB_ATTN_MAX_DIM];
    lohi_reset(lohi3, c->params.head_dim);
    for (int32_t t = 0; t < g->block_size; t++) summary_add(c, lohi3, kvb_cold_rec_k(g, rec) + (size_t)t * g->row_bytes);
    if (!index_room(c, r)) return kvb_fail(KVB_ERR_NOMEM, "cache image: out of memory for the cold-page index of stream %zu", i);
    const int64_t id = kvb_cold_append(c->cold, rec, (int32_t)i, g->block_size);
    if (id < 0) return kvb_fail(KVB_ERR_NOMEM, "cache image: the cold tier cannot hold page %lld of stream %zu", (long long)r->n_cold, i);
    index_add(c, r, id, lohi3);
    return KVB_OK;
}

void kvb_recall_restore_stage(struct kvb_cache *c, size_t i, int32_t n) {
    struct kvb_recall_stream *r = &c->recall[i];
    lohi_reset(r->stage_lohi, c->params.head_dim);
    for (int32_t t = 0; t < n; t++) summary_add(c, r->stage_lohi, kvb_cold_rec_k(&c->cold_geom, r->stage) + (size_t)t * c->geom.row_bytes);
    r->n_stage = n;
}

kvb_status kvb_recall_restore_area(struct kvb_cache *c, size_t i) {
    const int32_t R = c->params.kv.recall.pages;
    uint8_t *got[64];
    kvb_status st = kvb_pool_take(c->pool, R, got);
    if (st != KVB_OK) return st;
    kvb_recall_attach(c, i, got, false);
    if (!c->recall[i].pages) return kvb_fail(KVB_ERR_NOMEM, "cache image: out of memory for the recall area of stream %zu", i);
    return KVB_OK;
}

int32_t kvb_recall_area_rows(const struct kvb_recall_stream *r, int32_t a, int32_t B) {
    int32_t n = 0;
    while (n < B && r->pos[a * B + n] >= 0) n++;
    return n;
}

void kvb_recall_area_done(struct kvb_cache *c, size_t i) {
    struct kvb_recall_stream *r = &c->recall[i];
    const int32_t R = c->params.kv.recall.pages, B = c->params.kv.block_size;
    for (int32_t a = 0; a < R; a++) area_shadow(c, r, a, kvb_recall_area_rows(r, a, B));
    sort_area(r, R * B);
}
