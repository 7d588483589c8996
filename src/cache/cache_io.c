/*
 * cache_io.c — save and restore a cache to a byte buffer or a file.
 *
 * Format (little-endian), version 3 (version 2, still read, lacks dtype_v):
 *   "KVBCACHE" u32 version u32 flags(0)
 *   params: i32 n_layer n_kv_head head_dim dtype(K) dtype_v block_size pos_mode(resolved)
 *           i32 rope_type rope_n_dims f32 rope_base rope_freq_scale i32 has_ff [f32 ff[n_dims/2]]
 *           policy: i32 id budget f32 budget_frac i32 n_sink n_recent f32 heavy_ratio
 *                   i32 obs_window pool_kernel f32 pyramid_beta ada_floor i32 history threshold
 *                   i32 pool_mode decode_budget prefill_budget tova_scope
 *                   [i32 compress_prompt: flags 8192]
 *           i32 max_distance n_state
 *   i64 n_past[n_layer]
 *   per stream (layer-major): i32 budget prompt_end target n n_pages
 *           per logical slot: i32 phys_slot i32 pos f32 state[n_state] K row, V row (their stored
 *           types: quantized rows are saved as their blocks, never requantized)
 *           i32 free_slots[n_pages * block_size - n] (the hole stack, bottom first)
 *   flags 2: u8 no_rope[n_layer] after n_state (NoPE layers)
 *   flags 4: then i32 n_windows, n_windows x (i32 layer, i32 window), f32 rope_swa base freq_scale,
 *           i32 has_ff_swa [f32 ff[n_dims/2]], f32 attn_softcap (sliding-window layers, Gemma)
 *   flags 8: i32 n_sink_heads, f32 sinks[n_layer][n_sink_heads] before n_past (learned sink
 *           logits, gpt-oss)
 *   flags 32: then u8 recurrent[n_layer] i32 state_rows state_row_floats (a hybrid model's
 *           recurrent layers), and after the streams u8 has_state and, when 1, the state's
 *           rows (f32 [n_recurrent][state_rows][state_row_floats]); 0: the state is zero
 *   flags 64 (with 4): the windows' block begins with i32 rope_swa n_dims (it differs from rope's:
 *           Gemma 4's window heads), and its freq_factors are n_dims / 2 of them
 *   flags 128: then i32 kv_source[n_layer] after the recurrent layers (KV-shared layers)
 *   flags 256: then i32 kv_heads[n_layer] (per-layer KV head counts)
 *   flags 512: then i32 head_dim_v (> 0: latent rows, multi-head latent attention); every
 *           "V row" below is then absent (0 bytes): a token's value is its K row's tail.
 *           An image without the flag has head_dim_v 0 (V rows beside K, as before)
 *   flags 16: then i32 keep (kv.keep > 0, the pinned span; an image of a build without it
 *           is refused by its flags)
 *   version 4 (flags 1, written for a cache with recall) adds, after n_state:
 *           i32 recall_pages every summary i64 cold_mem_bytes i32 paused
 *           i64 dropped_pages total_cold_pages
 *   and after the streams, per stream: i64 n_cold lost scorings loads
 *           i32 since n_stage has_area
 *           the staged page: i32 pos[n_stage], K rows [n_stage], V rows [n_stage]
 *           n_cold sealed pages: i32 pos[block_size], K rows, V rows (a cold record's body)
 *           has_area: i64 loaded[recall_pages] i32 pos[recall_pages * block_size],
 *                     per area page its valid rows: K rows, then V rows
 *   (page summaries and the area's shadow rows are rebuilt from the rows, in
 *   the order they were built, so they come back as the same floats; the
 *   restored cold tier is in host memory, the image's pages plus
 *   cold_mem_bytes more, and has no file until kvb_cache_set_cold_dir: an
 *   image never makes the loader write where it says)
 *   flags 4096: then, per stream (layer-major), the query statistics of a KVB_PF_QUERY_STATS
 *           policy (expected-attention): i32 g (query heads; 0: no query yet) and, when g > 0,
 *           i64 n (tokens) f32 stats[g][head_dim + head_dim^2] (the policy's scratch block
 *           after them is not saved)
 *   flags 8192: i32 policy.compress_prompt (1: expected-attention compresses prompts) after
 *           tova_scope; an image without it has 0
 *   u32 crc32 of every byte before it
 *
 * The physical layout is saved, not just the logical content, so that a
 * restored cache continues bit-identically (block-level eviction looks at
 * pages). Loading checks the CRC first, then bounds-checks every field and
 * every count against the bytes that remain, so a hostile image can neither
 * crash the loader nor make it allocate more than the image justifies.
 *
 * Not saved: the queries an open snapkv-family prompt recorded for its vote
 * (a cache saved mid-prompt votes with what kvb_cache_observe_prefill fed).
 */
#include "cache_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>

#define KVB_CACHE_MAGIC "KVBCACHE"
#define KVB_CACHE_VERSION 3u        /* caches without recall */
#define KVB_CACHE_VERSION_RECALL 4u /* with recall: the cold tier and recall areas follow */
#define IMAGE_RECALL 1u             /* flags bit (version 4) */
#define IMAGE_NO_ROPE 2u            /* flags bit (versions 3, 4): u8 no_rope[n_layer] follow n_state */
#define IMAGE_WINDOWS 4u            /* flags bit (versions 3, 4): a model's windows, rope_swa, softcap follow no_rope */
#define IMAGE_SINKS 8u              /* flags bit (versions 3, 4): the sink logits come before n_past */
#define IMAGE_KEEP 16u              /* flags bit (versions 3, 4): i32 keep (the pinned span) follows the windows */
#define IMAGE_STATE 32u             /* flags bit (version 3): recurrent layers follow keep; their state follows the streams */
#define IMAGE_SWA_DIMS 64u          /* flags bit (version 3): rope_swa has its own n_dims (first in the windows' block) */
#define IMAGE_KV_SOURCE 128u        /* flags bit (version 3): i32 kv_source[n_layer] follow the recurrent layers */
#define IMAGE_KV_HEADS 256u         /* flags bit (version 3): i32 kv_heads[n_layer] follow kv_source */
#define IMAGE_HEAD_DIM_V 512u       /* flags bit (versions 3, 4): i32 head_dim_v (latent rows, no V rows) follows kv_heads */
#define IMAGE_QSTATS 4096u         /* flags bit (versions 3, 4): the policy's query statistics follow everything else */
#define IMAGE_COMPRESS_PROMPT 8192u /* flags bit (versions 3, 4): i32 policy.compress_prompt (1) follows tova_scope */
#define IMAGE_FLAGS (IMAGE_NO_ROPE | IMAGE_WINDOWS | IMAGE_SINKS | IMAGE_KEEP | IMAGE_STATE | IMAGE_SWA_DIMS | IMAGE_KV_SOURCE | IMAGE_KV_HEADS | \
                     IMAGE_HEAD_DIM_V | IMAGE_QSTATS | IMAGE_COMPRESS_PROMPT)

/* ---- writer ---- */
struct wbuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
};

static void w_bytes(struct wbuf *w, const void *src, size_t n) {
    if (w->oom || n == 0) return;
    if (w->n + n > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->n + n) cap *= 2;
        uint8_t *np = kvb_malloc(cap);
        if (!np) {
            w->oom = true;
            return;
        }
        if (w->n) memcpy(np, w->p, w->n);
        kvb_free(w->p);
        w->p = np;
        w->cap = cap;
    }
    memcpy(w->p + w->n, src, n);
    w->n += n;
}
static void w_i32(struct wbuf *w, int32_t v) { w_bytes(w, &v, 4); }
static void w_u32(struct wbuf *w, uint32_t v) { w_bytes(w, &v, 4); }
static void w_f32(struct wbuf *w, float v) { w_bytes(w, &v, 4); }
static void w_i64(struct wbuf *w, int64_t v) { w_bytes(w, &v, 8); }

/* The recall section, per stream (see the format above). Area pages are
 * saved up to their valid rows only, so images never carry stale bytes. */
static void save_recall(const struct kvb_cache *c, struct wbuf *w) {
    const struct kvb_cache_params *p = &c->params;
    const int64_t n_streams = (int64_t)p->n_layer * p->n_kv_head;
    const int32_t R = p->kv.recall.pages, B = p->kv.block_size;
    const size_t body = kvb_recall_body_bytes(c), rb = c->geom.row_bytes, rbv = c->geom.row_bytes_v;
    const struct kvb_cold_geom *g = &c->cold_geom;
    for (int64_t i = 0; i < n_streams; i++) {
        const struct kvb_recall_stream *r = &c->recall[i];
        w_i64(w, r->n_cold); w_i64(w, r->lost); w_i64(w, r->scorings); w_i64(w, r->loads);
        w_i32(w, r->since); w_i32(w, r->n_stage); w_i32(w, r->pages ? 1 : 0);
        w_bytes(w, kvb_cold_rec_pos(r->stage), sizeof(int32_t) * (size_t)r->n_stage);
        w_bytes(w, kvb_cold_rec_k(g, r->stage), (size_t)r->n_stage * rb);
        w_bytes(w, kvb_cold_rec_v(g, r->stage), (size_t)r->n_stage * rbv);
        for (int64_t k = 0; k < r->n_cold; k++) w_bytes(w, kvb_cold_get(c->cold, r->rec[k]) + KVB_COLD_REC_HEADER, body);
        if (!r->pages) continue;
        w_bytes(w, r->loaded, sizeof(int64_t) * (size_t)R);
        w_bytes(w, r->pos, sizeof(int32_t) * (size_t)R * (size_t)B);
        for (int32_t a = 0; a < R; a++) {
            const int32_t n = kvb_recall_area_rows(r, a, B);
            w_bytes(w, r->pages[a], (size_t)n * rb);
            w_bytes(w, r->pages[a] + c->geom.v_offset, (size_t)n * rbv);
        }
    }
}

kvb_status kvb_cache_save(const struct kvb_cache *c, void **buf, size_t *len) {
    if (!c || !buf || !len) return kvb_fail(KVB_ERR_INVALID, "cache_save: cache, buf and len must not be NULL");
    const struct kvb_cache_params *p = &c->params;
    const int32_t ns = c->policy.iface->n_state;
    struct wbuf w = {0};
    w_bytes(&w, KVB_CACHE_MAGIC, 8);
    w_u32(&w, c->recall ? KVB_CACHE_VERSION_RECALL : KVB_CACHE_VERSION);
    const bool windows = p->kv.n_layers > 0 || p->rope_swa.base > 0 || p->attn_softcap > 0;
    const bool swa_dims = windows && p->rope_swa.base > 0 && p->rope_swa.n_dims != p->rope.n_dims;
    const size_t n_qs = (size_t)p->n_layer * (size_t)p->n_kv_head, qblk = (size_t)p->head_dim * (size_t)(p->head_dim + 1);
    bool qstats = false;
    for (size_t i = 0; i < n_qs; i++) qstats |= c->streams[i].qstat_n > 0; /* statistics of no query are none */
    w_u32(&w, (c->recall ? IMAGE_RECALL : 0u) | (c->no_rope ? IMAGE_NO_ROPE : 0u) | (windows ? IMAGE_WINDOWS : 0u) | (c->sinks ? IMAGE_SINKS : 0u) |
                  (p->kv.keep ? IMAGE_KEEP : 0u) | (c->n_rec ? IMAGE_STATE : 0u) | (swa_dims ? IMAGE_SWA_DIMS : 0u) | (c->kv_src ? IMAGE_KV_SOURCE : 0u) |
                  (p->kv_heads ? IMAGE_KV_HEADS : 0u) | (p->head_dim_v ? IMAGE_HEAD_DIM_V : 0u) | (qstats ? IMAGE_QSTATS : 0u) |
                  (p->kv.policy.compress_prompt ? IMAGE_COMPRESS_PROMPT : 0u));
    w_i32(&w, p->n_layer); w_i32(&w, p->n_kv_head); w_i32(&w, p->head_dim); w_i32(&w, (int32_t)p->kv.kv_dtype); w_i32(&w, (int32_t)p->kv.kv_dtype_v);
    w_i32(&w, p->kv.block_size); w_i32(&w, (int32_t)c->pos_mode);
    w_i32(&w, (int32_t)p->rope.type); w_i32(&w, p->rope.n_dims); w_f32(&w, p->rope.base); w_f32(&w, p->rope.freq_scale);
    w_i32(&w, c->freq_factors ? 1 : 0);
    if (c->freq_factors) w_bytes(&w, c->freq_factors, sizeof(float) * (size_t)c->n_pairs);
    const struct kvb_policy_params *pp = &p->kv.policy;
    w_i32(&w, (int32_t)pp->id); w_i32(&w, pp->budget); w_f32(&w, pp->budget_frac); w_i32(&w, pp->n_sink);
    w_i32(&w, pp->n_recent); w_f32(&w, pp->heavy_ratio); w_i32(&w, pp->obs_window); w_i32(&w, pp->pool_kernel);
    w_f32(&w, pp->pyramid_beta); w_f32(&w, pp->ada_floor); w_i32(&w, pp->history); w_i32(&w, pp->threshold);
    w_i32(&w, (int32_t)pp->pool_mode); w_i32(&w, pp->decode_budget); w_i32(&w, pp->prefill_budget); w_i32(&w, (int32_t)pp->tova_scope);
    if (pp->compress_prompt) w_i32(&w, pp->compress_prompt);
    w_i32(&w, p->kv.max_distance);
    w_i32(&w, ns);
    if (c->no_rope) w_bytes(&w, c->no_rope, (size_t)p->n_layer);
    if (windows) {
        w_i32(&w, p->kv.n_layers);
        for (int32_t i = 0; i < p->kv.n_layers; i++) { w_i32(&w, p->kv.layers[i].layer); w_i32(&w, p->kv.layers[i].policy.budget); }
        if (swa_dims) w_i32(&w, p->rope_swa.n_dims);
        w_f32(&w, p->rope_swa.base); w_f32(&w, p->rope_swa.freq_scale);
        w_i32(&w, c->freq_factors_swa ? 1 : 0);
        if (c->freq_factors_swa) w_bytes(&w, c->freq_factors_swa, sizeof(float) * (size_t)c->n_pairs_swa);
        w_f32(&w, p->attn_softcap);
    }
    if (p->kv.keep) w_i32(&w, p->kv.keep);
    if (c->n_rec) {
        w_bytes(&w, c->recurrent, (size_t)p->n_layer);
        w_i32(&w, p->state_rows);
        w_i32(&w, p->state_row_floats);
    }
    if (c->kv_src) w_bytes(&w, c->kv_src, sizeof(int32_t) * (size_t)p->n_layer);
    if (p->kv_heads) w_bytes(&w, c->kvh, sizeof(int32_t) * (size_t)p->n_layer);
    if (p->head_dim_v) w_i32(&w, p->head_dim_v);
    const int64_t n_streams = (int64_t)p->n_layer * p->n_kv_head;
    if (c->recall) {
        struct kvb_cold_counts cc;
        kvb_cold_counts(c->cold, &cc);
        int64_t total = 0;
        for (int64_t i = 0; i < n_streams; i++) total += c->recall[i].n_cold;
        w_i32(&w, p->kv.recall.pages); w_i32(&w, p->kv.recall.every); w_i32(&w, (int32_t)p->kv.recall.summary);
        w_i64(&w, (int64_t)KVB_MIN(p->kv.recall.cold_mem_bytes, (size_t)INT64_MAX));
        w_i32(&w, c->recall_paused ? 1 : 0);
        w_i64(&w, cc.dropped_pages);
        w_i64(&w, total);
    }
    if (c->sinks) {
        w_i32(&w, p->n_sink_heads);
        w_bytes(&w, c->sinks, sizeof(float) * (size_t)p->n_layer * (size_t)p->n_sink_heads);
    }
    for (int32_t l = 0; l < p->n_layer; l++) w_i64(&w, c->n_past[l]);
    for (int64_t i = 0; i < n_streams; i++) {
        const struct kvb_stream *s = &c->streams[i];
        w_i32(&w, s->v.budget); w_i32(&w, s->v.prompt_end); w_i32(&w, s->v.target); w_i32(&w, s->v.n); w_i32(&w, s->v.n_pages);
        for (int32_t j = 0; j < s->v.n; j++) {
            int32_t slot = s->v.order[j];
            w_i32(&w, slot);
            w_i32(&w, s->v.pos[slot]);
            if (ns) w_bytes(&w, s->v.state + (size_t)j * ns, sizeof(float) * (size_t)ns);
            w_bytes(&w, kvb_stream_row(&c->geom, s, slot), c->geom.row_bytes);
            w_bytes(&w, kvb_stream_vrow(&c->geom, s, slot), c->geom.row_bytes_v);
        }
        w_bytes(&w, s->free_slots, sizeof(int32_t) * (size_t)s->n_free);
    }
    if (c->recall) save_recall(c, &w);
    if (c->n_rec) {
        const bool has = kvb_state_pages_held(c) > 0;
        const uint8_t flag = has ? 1 : 0;
        w_bytes(&w, &flag, 1);
        for (size_t i = 0; has && i < (size_t)c->n_rec * (size_t)p->state_rows; i++)
            w_bytes(&w, c->state_rows[i], sizeof(float) * (size_t)p->state_row_floats);
    }
    for (size_t i = 0; qstats && i < n_qs; i++) {
        const struct kvb_stream *s = &c->streams[i];
        w_i32(&w, s->qstat_n > 0 ? s->qstat_g : 0);
        if (s->qstat_n <= 0) continue;
        w_i64(&w, s->qstat_n);
        w_bytes(&w, s->qstat, sizeof(float) * (size_t)s->qstat_g * qblk);
    }
    uint32_t crc = w.oom ? 0 : kvb_crc32(0, w.p, w.n);
    w_u32(&w, crc);
    if (w.oom) {
        kvb_free(w.p);
        return kvb_fail(KVB_ERR_NOMEM, "cache_save: out of memory");
    }
    *buf = w.p;
    *len = w.n;
    return KVB_OK;
}

/* ---- reader ---- */
struct rbuf {
    const uint8_t *p;
    size_t n, at;
    const char *field; /* the field being read, for the error message */
};

static bool r_bytes(struct rbuf *r, void *dst, size_t n, const char *field) {
    r->field = field;
    if (n > r->n - r->at) return false;
    memcpy(dst, r->p + r->at, n);
    r->at += n;
    return true;
}
static bool r_i32(struct rbuf *r, int32_t *v, const char *f) { return r_bytes(r, v, 4, f); }
static bool r_f32(struct rbuf *r, float *v, const char *f) { return r_bytes(r, v, 4, f); }

#define TRUNC() kvb_fail(KVB_ERR_CORRUPT, "cache image truncated at field '%s' (offset %zu of %zu)", r.field, r.at, r.n)

/* n positions of stream i (layer l) at pos: each in [0, n_past) */
static bool positions_ok(const struct kvb_cache *c, int32_t l, const int32_t *pos, int32_t n) {
    for (int32_t t = 0; t < n; t++)
        if (pos[t] < 0 || pos[t] >= c->n_past[l]) return false;
    return true;
}

/* The query statistics (flags 4096) into c's streams: only for a policy
 * that keeps them, g within the query heads a KV head may have (KVB_CACHE_MAX_GROUP), n >= 0,
 * and every block bounded by the bytes that remain before it is allocated. */
static kvb_status load_qstats(struct kvb_cache *c, struct rbuf *rp) {
    struct rbuf r = *rp;
    const size_t n_streams = (size_t)c->params.n_layer * (size_t)c->params.n_kv_head;
    const size_t d = (size_t)c->params.head_dim, blk = d + d * d;
    if (!(c->policy.flags & KVB_PF_QUERY_STATS))
        return kvb_fail(KVB_ERR_CORRUPT, "cache image: query statistics for policy %s, which keeps none", kvb_policy_name(c->params.kv.policy.id));
    for (size_t i = 0; i < n_streams; i++) {
        struct kvb_stream *s = &c->streams[i];
        int32_t g = 0;
        int64_t n = 0;
        if (!r_i32(&r, &g, "qstat.g")) return TRUNC();
        if (g == 0) continue;
        if (g < 0 || g > KVB_CACHE_MAX_GROUP || s->no_kv || s->window)
            return kvb_fail(KVB_ERR_CORRUPT, "cache image: stream %zu has query statistics for %d heads", i, (int)g);
        if (!r_bytes(&r, &n, 8, "qstat.n")) return TRUNC();
        if (n < 1) return kvb_fail(KVB_ERR_CORRUPT, "cache image: stream %zu's query statistics count %lld tokens", i, (long long)n);
        r.field = "qstat.stats";
        if ((size_t)g * blk > (r.n - r.at) / sizeof(float)) return TRUNC();
        const size_t words = (size_t)(g + 1) * blk;
        if (words > KVB_QSTAT_MAX_WORDS) /* qstat_reserve's limit */
            return kvb_fail(KVB_ERR_CORRUPT, "cache image: stream %zu's query statistics for %d heads exceed the 64 MiB a stream a cache keeps", i, (int)g);
        for (size_t w = 0; w < (size_t)g * blk; w++) {
            float x;
            memcpy(&x, r.p + r.at + sizeof(float) * w, sizeof x);
            if (!isfinite(x)) return kvb_fail(KVB_ERR_CORRUPT, "cache image: stream %zu's query statistics hold a value that is not finite", i);
        }
        float *q = kvb_calloc(words, sizeof(float));
        if (!q) return kvb_fail(KVB_ERR_NOMEM, "cache image: out of memory for query statistics");
        memcpy(q, r.p + r.at, sizeof(float) * (size_t)g * blk);
        r.at += sizeof(float) * (size_t)g * blk;
        kvb_free(s->qstat);
        s->qstat = q;
        s->qstat_words = words;
        s->qstat_g = g;
        s->qstat_n = n;
    }
    *rp = r;
    return KVB_OK;
}

/* The recall section (save_recall) into c, made with the image's recall
 * params: every count bounded by the bytes that remain before anything is
 * allocated for it. */
static kvb_status load_recall(struct kvb_cache *c, struct rbuf *rp, int64_t total_cold) {
    struct rbuf r = *rp;
    const struct kvb_cache_params *p = &c->params;
    const int64_t n_streams = (int64_t)p->n_layer * p->n_kv_head;
    const int32_t R = p->kv.recall.pages, B = p->kv.block_size;
    const size_t body = kvb_recall_body_bytes(c), rb = c->geom.row_bytes, rbv = c->geom.row_bytes_v;
    const struct kvb_cold_geom *g = &c->cold_geom;
    uint8_t *rec = kvb_calloc(1, kvb_cold_record_bytes(g));
    if (!rec) return kvb_fail(KVB_ERR_NOMEM, "cache image: out of memory for a cold page");
    kvb_status st = KVB_OK;
    int64_t seen = 0;
    for (int64_t i = 0; i < n_streams && st == KVB_OK; i++) {
        struct kvb_recall_stream *rs = &c->recall[i];
        const int32_t layer = (int32_t)(i / p->n_kv_head);
        int64_t n_cold, lost, scorings, loads;
        int32_t since, n_stage, has_area;
        if (!r_bytes(&r, &n_cold, 8, "recall.n_cold") || !r_bytes(&r, &lost, 8, "recall.lost") ||
            !r_bytes(&r, &scorings, 8, "recall.scorings") || !r_bytes(&r, &loads, 8, "recall.loads") ||
            !r_i32(&r, &since, "recall.since") || !r_i32(&r, &n_stage, "recall.n_stage") || !r_i32(&r, &has_area, "recall.has_area")) {
            st = TRUNC();
            break;
        }
        if (n_cold < 0 || n_cold > total_cold - seen || lost < 0 || scorings < 0 || loads < 0 || since < 0 || since > p->kv.recall.every ||
            n_stage < 0 || n_stage >= B || (has_area != 0 && has_area != 1)) {
            st = kvb_fail(KVB_ERR_CORRUPT, "cache image: stream %lld has bad recall counts (%lld cold pages, %d staged, since %d)",
                          (long long)i, (long long)n_cold, (int)n_stage, (int)since);
            break;
        }
        seen += n_cold;
        int32_t *spos = kvb_cold_rec_pos(rs->stage);
        if (!r_bytes(&r, spos, sizeof(int32_t) * (size_t)n_stage, "recall.stage_pos") ||
            !r_bytes(&r, kvb_cold_rec_k(g, rs->stage), (size_t)n_stage * rb, "recall.stage_k") ||
            !r_bytes(&r, kvb_cold_rec_v(g, rs->stage), (size_t)n_stage * rbv, "recall.stage_v")) {
            st = TRUNC();
            break;
        }
        if (!positions_ok(c, layer, spos, n_stage)) {
            st = kvb_fail(KVB_ERR_CORRUPT, "cache image: stream %lld has a staged position out of range", (long long)i);
            break;
        }
        kvb_recall_restore_stage(c, (size_t)i, n_stage);
        for (int64_t k = 0; k < n_cold && st == KVB_OK; k++) {
            if (!r_bytes(&r, rec + KVB_COLD_REC_HEADER, body, "recall.cold_page"))
                st = TRUNC();
            else if (!positions_ok(c, layer, kvb_cold_rec_pos(rec), B))
                st = kvb_fail(KVB_ERR_CORRUPT, "cache image: stream %lld cold page %lld has a position out of range", (long long)i, (long long)k);
            else
                st = kvb_recall_restore_page(c, (size_t)i, rec);
        }
        if (st != KVB_OK) break;
        if (has_area) {
            if ((size_t)R * (8 + 4 * (size_t)B) > r.n - r.at) {
                st = kvb_fail(KVB_ERR_CORRUPT, "cache image: stream %lld recall area does not fit the image", (long long)i);
                break;
            }
            if ((st = kvb_recall_restore_area(c, (size_t)i)) != KVB_OK) break;
            r_bytes(&r, rs->loaded, sizeof(int64_t) * (size_t)R, "recall.loaded");
            r_bytes(&r, rs->pos, sizeof(int32_t) * (size_t)R * (size_t)B, "recall.area_pos");
            for (int32_t a = 0; a < R && st == KVB_OK; a++) {
                int32_t n = kvb_recall_area_rows(rs, a, B);
                for (int32_t t = n; t < B; t++)
                    if (rs->pos[a * B + t] != -1) n = -1;
                if (n < 0 || rs->loaded[a] < -2 || rs->loaded[a] >= n_cold || !positions_ok(c, layer, rs->pos + (size_t)a * B, n))
                    st = kvb_fail(KVB_ERR_CORRUPT, "cache image: stream %lld recall page %d is inconsistent", (long long)i, (int)a);
                else if (!r_bytes(&r, rs->pages[a], (size_t)n * rb, "recall.area_k") ||
                         !r_bytes(&r, rs->pages[a] + c->geom.v_offset, (size_t)n * rbv, "recall.area_v"))
                    st = TRUNC();
            }
            if (st != KVB_OK) break;
            kvb_recall_area_done(c, (size_t)i);
        }
        rs->since = since;
        rs->lost = lost;
        rs->scorings = scorings;
        rs->loads = loads;
    }
    kvb_free(rec);
    if (st == KVB_OK && seen != total_cold)
        st = kvb_fail(KVB_ERR_CORRUPT, "cache image: %lld cold pages in the streams, %lld in the header", (long long)seen, (long long)total_cold);
    if (st == KVB_OK) *rp = r;
    return st;
}

kvb_status kvb_cache_load(struct kvb_pool *pool, const void *buf, size_t len, size_t pool_bytes, struct kvb_cache **out) {
    if (!buf || !out) return kvb_fail(KVB_ERR_INVALID, "cache_load: buf and out must not be NULL");
    if (len < 8 + 4 + 4 + 4) return kvb_fail(KVB_ERR_CORRUPT, "cache image too short (%zu bytes)", len);
    const uint8_t *b = buf;
    if (memcmp(b, KVB_CACHE_MAGIC, 8) != 0) return kvb_fail(KVB_ERR_CORRUPT, "cache image: bad magic (not a kvbound cache)");
    uint32_t crc_stored;
    memcpy(&crc_stored, b + len - 4, 4);
    if (kvb_crc32(0, b, len - 4) != crc_stored) return kvb_fail(KVB_ERR_CORRUPT, "cache image: checksum mismatch (corrupt or truncated)");
    struct rbuf r = {b, len - 4, 8, "magic"};
    uint32_t version, flags;
    if (!r_bytes(&r, &version, 4, "version") || !r_bytes(&r, &flags, 4, "flags")) return TRUNC();
    if (version < 2u || version > KVB_CACHE_VERSION_RECALL)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "cache image version %u (this build reads 2 to %u)", version, KVB_CACHE_VERSION_RECALL);
    if ((flags & ~IMAGE_FLAGS) != (version == KVB_CACHE_VERSION_RECALL ? IMAGE_RECALL : 0u) || ((flags & IMAGE_FLAGS) && version < 3u) ||
        ((flags & IMAGE_SWA_DIMS) && !(flags & IMAGE_WINDOWS)))
        return kvb_fail(KVB_ERR_CORRUPT, "cache image: flags 0x%x are not valid for version %u", flags, version);
    struct kvb_cache_params p = kvb_cache_default_params();
    int32_t dtype, dtype_v = KVB_DTYPE_AS_K, pos_mode, rope_type, has_ff, pid;
    if (!r_i32(&r, &p.n_layer, "n_layer") || !r_i32(&r, &p.n_kv_head, "n_kv_head") || !r_i32(&r, &p.head_dim, "head_dim") ||
        !r_i32(&r, &dtype, "dtype") || (version >= 3u && !r_i32(&r, &dtype_v, "dtype_v")) ||
        !r_i32(&r, &p.kv.block_size, "block_size") || !r_i32(&r, &pos_mode, "pos_mode") ||
        !r_i32(&r, &rope_type, "rope_type") || !r_i32(&r, &p.rope.n_dims, "rope_n_dims") ||
        !r_f32(&r, &p.rope.base, "rope_base") || !r_f32(&r, &p.rope.freq_scale, "rope_freq_scale") ||
        !r_i32(&r, &has_ff, "has_freq_factors"))
        return TRUNC();
    if (dtype < 0 || dtype > KVB_DTYPE_BF16 || dtype_v < KVB_DTYPE_AS_K || dtype_v > KVB_DTYPE_BF16 || (version < 3u && dtype > 1) ||
        pos_mode < 1 || pos_mode > 3 || rope_type < 0 || rope_type > 2 || (has_ff != 0 && has_ff != 1))
        return kvb_fail(KVB_ERR_CORRUPT, "cache image: bad enum in params (dtype %d, dtype_v %d, pos_mode %d, rope %d, has_ff %d)", dtype,
                        dtype_v, pos_mode, rope_type, has_ff);
    p.kv.kv_dtype = (enum kvb_dtype)dtype;
    p.kv.kv_dtype_v = (enum kvb_dtype)dtype_v;
    p.kv.pos_mode = (enum kvb_pos_mode)pos_mode;
    p.rope.type = (enum kvb_rope_type)rope_type;
    float ff[KVB_ATTN_MAX_DIM / 2]; /* rope.n_dims <= head_dim */
    if (has_ff) {
        if (p.rope.n_dims < 2 || p.rope.n_dims > KVB_ATTN_MAX_DIM) return kvb_fail(KVB_ERR_CORRUPT, "cache image: rope_n_dims %d out of range", p.rope.n_dims);
        if (!r_bytes(&r, ff, sizeof(float) * (size_t)(p.rope.n_dims / 2), "rope_freq_factors")) return TRUNC();
        p.rope.freq_factors = ff;
    }
    struct kvb_policy_params *pp = &p.kv.policy;
    if (!r_i32(&r, &pid, "policy.id") || !r_i32(&r, &pp->budget, "policy.budget") || !r_f32(&r, &pp->budget_frac, "policy.budget_frac") ||
        !r_i32(&r, &pp->n_sink, "policy.n_sink") || !r_i32(&r, &pp->n_recent, "policy.n_recent") ||
        !r_f32(&r, &pp->heavy_ratio, "policy.heavy_ratio") || !r_i32(&r, &pp->obs_window, "policy.obs_window") ||
        !r_i32(&r, &pp->pool_kernel, "policy.pool_kernel") || !r_f32(&r, &pp->pyramid_beta, "policy.pyramid_beta") ||
        !r_f32(&r, &pp->ada_floor, "policy.ada_floor") || !r_i32(&r, &pp->history, "policy.history") ||
        !r_i32(&r, &pp->threshold, "policy.threshold"))
        return TRUNC();
    int32_t pool_mode, tova_scope;
    if (!r_i32(&r, &pool_mode, "policy.pool_mode") || !r_i32(&r, &pp->decode_budget, "policy.decode_budget") ||
        !r_i32(&r, &pp->prefill_budget, "policy.prefill_budget") || !r_i32(&r, &tova_scope, "policy.tova_scope") ||
        ((flags & IMAGE_COMPRESS_PROMPT) && !r_i32(&r, &pp->compress_prompt, "policy.compress_prompt")) ||
        !r_i32(&r, &p.kv.max_distance, "max_distance"))
        return TRUNC();
    if (pool_mode < 0 || pool_mode > 1 || tova_scope < 0 || tova_scope > 1)
        return kvb_fail(KVB_ERR_CORRUPT, "cache image: bad enum in policy (pool_mode %d, tova_scope %d)", pool_mode, tova_scope);
    pp->pool_mode = (enum kvb_pool_mode)pool_mode;
    pp->tova_scope = (enum kvb_tova_scope)tova_scope;
    if (!kvb_policy_iface((enum kvb_policy_id)pid)) return kvb_fail(KVB_ERR_CORRUPT, "cache image: unknown policy id %d", pid);
    pp->id = (enum kvb_policy_id)pid;
    p.pool_bytes = pool_bytes;
    int32_t ns;
    if (!r_i32(&r, &ns, "n_state")) return TRUNC();
    if (ns != kvb_policy_iface(pp->id)->n_state)
        return kvb_fail(KVB_ERR_CORRUPT, "cache image: n_state %d does not match policy %s", ns, kvb_policy_name(pp->id));
    uint8_t no_rope[4096];
    if (flags & IMAGE_NO_ROPE) {
        if (p.n_layer < 1 || p.n_layer > 4096) return kvb_fail(KVB_ERR_CORRUPT, "cache image: n_layer %d out of range", (int)p.n_layer);
        if (!r_bytes(&r, no_rope, (size_t)p.n_layer, "no_rope")) return TRUNC();
        p.no_rope = no_rope; /* kvb_cache_init checks each is 0 or 1, and copies them */
    }
    int32_t win[2 * 4096]; /* (layer, window) pairs */
    int32_t nw = 0;
    float ff_swa[KVB_ATTN_MAX_DIM / 2];
    if (flags & IMAGE_WINDOWS) {
        int32_t has_ff_swa;
        if (!r_i32(&r, &nw, "n_windows")) return TRUNC();
        if (nw < 0 || nw > p.n_layer || nw > 4096)
            return kvb_fail(KVB_ERR_CORRUPT, "cache image: n_windows %d out of range (n_layer %d)", (int)nw, (int)p.n_layer);
        if (!r_bytes(&r, win, sizeof(int32_t) * 2 * (size_t)nw, "windows")) return TRUNC();
        p.rope_swa = p.rope;
        p.rope_swa.freq_factors = NULL;
        if ((flags & IMAGE_SWA_DIMS) && !r_i32(&r, &p.rope_swa.n_dims, "rope_swa.n_dims")) return TRUNC();
        if ((flags & IMAGE_SWA_DIMS) && (p.rope_swa.n_dims < 2 || p.rope_swa.n_dims > KVB_ATTN_MAX_DIM || p.rope_swa.n_dims % 2))
            return kvb_fail(KVB_ERR_CORRUPT, "cache image: rope_swa n_dims %d out of range", (int)p.rope_swa.n_dims);
        if (!r_f32(&r, &p.rope_swa.base, "rope_swa.base") || !r_f32(&r, &p.rope_swa.freq_scale, "rope_swa.freq_scale") ||
            !r_i32(&r, &has_ff_swa, "has_freq_factors_swa"))
            return TRUNC();
        if (has_ff_swa != 0 && has_ff_swa != 1) return kvb_fail(KVB_ERR_CORRUPT, "cache image: has_freq_factors_swa is %d", (int)has_ff_swa);
        if (has_ff_swa) {
            if (p.rope_swa.n_dims < 2 || p.rope_swa.n_dims > KVB_ATTN_MAX_DIM) return kvb_fail(KVB_ERR_CORRUPT, "cache image: rope_n_dims %d out of range", p.rope_swa.n_dims);
            if (!r_bytes(&r, ff_swa, sizeof(float) * (size_t)(p.rope_swa.n_dims / 2), "rope_swa.freq_factors")) return TRUNC();
            p.rope_swa.freq_factors = ff_swa;
        }
        if (!r_f32(&r, &p.attn_softcap, "attn_softcap")) return TRUNC();
    }
    if (flags & IMAGE_KEEP) { /* kvb_cache_init checks its range */
        if (!r_i32(&r, &p.kv.keep, "keep")) return TRUNC();
        if (p.kv.keep < 1) return kvb_fail(KVB_ERR_CORRUPT, "cache image: keep %d with flags 16 (a pinned span)", (int)p.kv.keep);
    }
    uint8_t rec_layers[4096]; /* kvb_cache_init copies them and checks the rows against the page size */
    if (flags & IMAGE_STATE) {
        if (p.n_layer < 1 || p.n_layer > 4096) return kvb_fail(KVB_ERR_CORRUPT, "cache image: n_layer %d out of range", (int)p.n_layer);
        if (!r_bytes(&r, rec_layers, (size_t)p.n_layer, "recurrent") || !r_i32(&r, &p.state_rows, "state_rows") ||
            !r_i32(&r, &p.state_row_floats, "state_row_floats"))
            return TRUNC();
        int32_t n_rec = 0;
        for (int32_t l = 0; l < p.n_layer; l++) n_rec += rec_layers[l] == 1;
        if (n_rec == 0) return kvb_fail(KVB_ERR_CORRUPT, "cache image: flags 32 (recurrent layers) without a recurrent layer");
        p.recurrent = rec_layers;
    }
    int32_t kv_src[4096]; /* kvb_cache_init checks each (an earlier layer, not itself a reader) */
    if (flags & IMAGE_KV_SOURCE) {
        if (p.n_layer < 1 || p.n_layer > 4096) return kvb_fail(KVB_ERR_CORRUPT, "cache image: n_layer %d out of range", (int)p.n_layer);
        if (!r_bytes(&r, kv_src, sizeof(int32_t) * (size_t)p.n_layer, "kv_source")) return TRUNC();
        p.kv_source = kv_src;
    }
    int32_t kv_heads[4096]; /* kvb_cache_init checks each (1..n_kv_head) */
    if (flags & IMAGE_KV_HEADS) {
        if (p.n_layer < 1 || p.n_layer > 4096) return kvb_fail(KVB_ERR_CORRUPT, "cache image: n_layer %d out of range", (int)p.n_layer);
        if (!r_bytes(&r, kv_heads, sizeof(int32_t) * (size_t)p.n_layer, "kv_heads")) return TRUNC();
        p.kv_heads = kv_heads;
    }
    if (flags & IMAGE_HEAD_DIM_V) { /* kvb_cache_init checks it against head_dim, rope and the row type */
        if (!r_i32(&r, &p.head_dim_v, "head_dim_v")) return TRUNC();
        if (p.head_dim_v < 1) return kvb_fail(KVB_ERR_CORRUPT, "cache image: head_dim_v %d with flags 512 (latent rows)", (int)p.head_dim_v);
    }
    int32_t paused = 0;
    int64_t dropped = 0, total_cold = 0, image_cold_mem = 0;
    if (version == KVB_CACHE_VERSION_RECALL) {
        int32_t summary;
        int64_t mem;
        if (!r_i32(&r, &p.kv.recall.pages, "recall.pages") || !r_i32(&r, &p.kv.recall.every, "recall.every") ||
            !r_i32(&r, &summary, "recall.summary") || !r_bytes(&r, &mem, 8, "recall.cold_mem_bytes") ||
            !r_i32(&r, &paused, "recall.paused") || !r_bytes(&r, &dropped, 8, "recall.dropped_pages") ||
            !r_bytes(&r, &total_cold, 8, "recall.cold_pages"))
            return TRUNC();
        if (p.kv.recall.pages < 1 || summary < 0 || summary > 2 || mem < 0 || (paused != 0 && paused != 1) || dropped < 0 || total_cold < 0)
            return kvb_fail(KVB_ERR_CORRUPT, "cache image: bad recall params (pages %d, summary %d, paused %d, %lld cold pages)",
                            (int)p.kv.recall.pages, (int)summary, (int)paused, (long long)total_cold);
        p.kv.recall.summary = (enum kvb_recall_summary)summary;
        image_cold_mem = mem;
        /* the image's cold pages must fit in what remains (each record body
         * holds at least block_size positions and rows), and they all go to
         * host memory: the restored tier has no file (the image names none) */
        const int32_t dt_v = dtype_v == KVB_DTYPE_AS_K ? dtype : dtype_v;
        const size_t body = p.head_dim >= 1 && p.head_dim <= 4096 && p.kv.block_size >= 1 && p.kv.block_size <= 65536
                                ? (size_t)p.kv.block_size * (4 + kvb_dtype_row_bytes((enum kvb_dtype)dtype, p.head_dim) +
                                                          (p.head_dim_v ? 0 : kvb_dtype_row_bytes((enum kvb_dtype)dt_v, p.head_dim)))
                                : 0;
        if (body == 0 || (uint64_t)total_cold > (r.n - r.at) / body)
            return kvb_fail(KVB_ERR_CORRUPT, "cache image: %lld cold pages do not fit the image", (long long)total_cold);
        const size_t need = (size_t)total_cold * (body + KVB_COLD_REC_HEADER + 8);
        p.kv.recall.cold_mem_bytes = need + KVB_MIN((size_t)mem, (size_t)64 << 30); /* its pages, then its memory budget again */
        p.kv.recall.cold_dir = NULL;
    }
    /* the n_past array alone must fit in what remains */
    if (p.n_layer < 1 || (size_t)p.n_layer > (r.n - r.at) / 8)
        return kvb_fail(KVB_ERR_CORRUPT, "cache image: n_layer %d does not fit the image", p.n_layer);
    float *sinks = NULL; /* copied out (the image need not be aligned for floats); kvb_cache_init checks them */
    if (flags & IMAGE_SINKS) {
        if (!r_i32(&r, &p.n_sink_heads, "n_sink_heads")) return TRUNC();
        if (p.n_sink_heads < 1 || p.n_sink_heads > 65536 || (uint64_t)p.n_layer * (uint64_t)p.n_sink_heads > (r.n - r.at) / 4)
            return kvb_fail(KVB_ERR_CORRUPT, "cache image: %d sink heads per layer do not fit the image", (int)p.n_sink_heads);
        const size_t nb = sizeof(float) * (size_t)p.n_layer * (size_t)p.n_sink_heads;
        if (!(sinks = kvb_malloc(nb))) return kvb_fail(KVB_ERR_NOMEM, "cache image: out of memory");
        r_bytes(&r, sinks, nb, "sinks");
        p.sinks = sinks;
        if ((size_t)p.n_layer > (r.n - r.at) / 8) {
            kvb_free(sinks);
            return kvb_fail(KVB_ERR_CORRUPT, "cache image: n_layer %d does not fit the image", p.n_layer);
        }
    }
    struct kvb_cache *c;
    struct kvb_kv_layer *layers = nw ? kvb_malloc(sizeof(struct kvb_kv_layer) * (size_t)nw) : NULL;
    if (nw && !layers) {
        kvb_free(sinks);
        return kvb_fail(KVB_ERR_NOMEM, "cache image: out of memory");
    }
    for (int32_t i = 0; i < nw; i++) {
        layers[i] = (struct kvb_kv_layer){win[2 * i], kvb_policy_layer_window(win[2 * i + 1])};
    }
    p.kv.layers = layers;
    p.kv.n_layers = nw;
    kvb_status st = kvb_cache_init(pool, &p, &c); /* checks the windows and sinks and copies them */
    kvb_free(layers);
    kvb_free(sinks);
    if (st != KVB_OK) {
        if (st == KVB_ERR_INVALID) return kvb_fail(KVB_ERR_CORRUPT, "cache image: invalid params (%s)", kvb_last_error());
        return st;
    }
    const int32_t B = p.kv.block_size;
    for (int32_t l = 0; l < p.n_layer; l++) {
        if (!r_bytes(&r, &c->n_past[l], 8, "n_past")) { kvb_cache_free(c); return TRUNC(); }
        const int64_t past = c->n_past[l];
        if (past < 0 || past > INT32_MAX) {
            kvb_cache_free(c);
            return kvb_fail(KVB_ERR_CORRUPT, "cache image: n_past[%d] = %lld out of range", l, (long long)past);
        }
    }
    const size_t slot_bytes = 8 + 4 * (size_t)ns + c->geom.row_bytes + c->geom.row_bytes_v;
    const int64_t n_streams = (int64_t)p.n_layer * p.n_kv_head;
    for (int64_t i = 0; i < n_streams; i++) {
        struct kvb_stream *s = &c->streams[i];
        const int32_t layer = (int32_t)(i / p.n_kv_head);
        int32_t budget, prompt_end, target, n, n_pages;
        if (!r_i32(&r, &budget, "stream.budget") || !r_i32(&r, &prompt_end, "stream.prompt_end") ||
            !r_i32(&r, &target, "stream.target") || !r_i32(&r, &n, "stream.n") || !r_i32(&r, &n_pages, "stream.n_pages")) {
            kvb_cache_free(c);
            return TRUNC();
        }
        if (budget < 0 || target < 0 || prompt_end < -1 || n < 0 || (size_t)n > (r.n - r.at) / slot_bytes ||
            n_pages < 0 || (int64_t)n_pages * B >= (int64_t)n + 2 * (int64_t)B || (int64_t)n > (int64_t)n_pages * B ||
            n > c->n_past[layer]) {
            kvb_cache_free(c);
            return kvb_fail(KVB_ERR_CORRUPT, "cache image: stream %lld has inconsistent counts (n %d, pages %d, budget %d)",
                            (long long)i, n, n_pages, budget);
        }
        if (kvb_stream_reserve(&c->geom, s, n_pages, (int64_t)n + 1) != KVB_OK) {
            st = kvb_fail(KVB_ERR_NOMEM, "cache image: out of memory restoring stream %lld (%d slots)", (long long)i, n);
            kvb_cache_free(c);
            return st;
        }
        if (n_pages) {
            if ((st = kvb_pool_take(c->pool, n_pages, s->pages)) != KVB_OK) {
                kvb_cache_free(c);
                return st;
            }
            s->v.n_pages = n_pages;
        }
        s->v.budget = budget;
        s->v.prompt_end = prompt_end;
        s->v.target = target;
        int32_t last_pos = -1;
        for (int32_t j = 0; j < n; j++) {
            int32_t slot = -1, pos = -1;
            if (!r_i32(&r, &slot, "slot.phys") || !r_i32(&r, &pos, "slot.pos")) { kvb_cache_free(c); return TRUNC(); }
            if (slot < 0 || slot >= n_pages * B || s->v.pos[slot] >= 0 || pos <= last_pos || pos >= c->n_past[layer]) {
                kvb_cache_free(c);
                return kvb_fail(KVB_ERR_CORRUPT, "cache image: stream %lld slot %d has bad placement (phys %d, pos %d)",
                                (long long)i, j, slot, pos);
            }
            last_pos = pos;
            s->v.pos[slot] = pos;
            s->v.order[j] = slot;
            s->v.n = j + 1;
            if (ns) r_bytes(&r, s->v.state + (size_t)j * ns, sizeof(float) * (size_t)ns, "slot.state");
            r_bytes(&r, kvb_stream_row(&c->geom, s, slot), c->geom.row_bytes, "slot.k");
            r_bytes(&r, kvb_stream_vrow(&c->geom, s, slot), c->geom.row_bytes_v, "slot.v");
        }
        kvb_stream_rebuild(&c->geom, s);
        /* the hole stack, in its saved order: later appends land where they would have */
        const int32_t n_free = n_pages * B - n;
        if (s->n_free != n_free) {
            kvb_cache_free(c);
            return kvb_fail(KVB_ERR_CORRUPT, "cache image: stream %lld hole count mismatch", (long long)i);
        }
        for (int32_t f = 0; f < n_free; f++) {
            int32_t slot;
            if (!r_i32(&r, &slot, "stream.free_slots")) { kvb_cache_free(c); return TRUNC(); }
            if (slot < 0 || slot >= n_pages * B || s->v.pos[slot] != -1) {
                kvb_cache_free(c);
                return kvb_fail(KVB_ERR_CORRUPT, "cache image: stream %lld free slot %d is invalid", (long long)i, slot);
            }
            s->v.pos[slot] = -2; /* mark: seen once */
            s->free_slots[f] = slot;
        }
        for (int32_t f = 0; f < n_free; f++) s->v.pos[s->free_slots[f]] = -1;
    }
    if (c->recall) {
        st = load_recall(c, &r, total_cold);
        if (st != KVB_OK) {
            kvb_cache_free(c);
            return st;
        }
        c->recall_paused = paused != 0;
        c->params.kv.recall.cold_mem_bytes = (size_t)image_cold_mem; /* as configured (the store holds at least the image's pages) */
        kvb_cold_note_dropped(c->cold, dropped);
    }
    if (c->n_rec) {
        uint8_t has = 0;
        if (!r_bytes(&r, &has, 1, "has_state")) { kvb_cache_free(c); return TRUNC(); }
        const size_t bytes = (size_t)c->n_rec * (size_t)p.state_rows * (size_t)p.state_row_floats * sizeof(float);
        if (has > 1 || (has && bytes > r.n - r.at)) {
            kvb_cache_free(c);
            return kvb_fail(KVB_ERR_CORRUPT, "cache image: the recurrent state (%zu bytes, has_state %d) does not fit the image", bytes, (int)has);
        }
        if (has) {
            if ((st = kvb_state_restore(c, r.p + r.at)) != KVB_OK) {
                kvb_cache_free(c);
                return st;
            }
            r.at += bytes;
        }
        for (int32_t l = 0; l < p.n_layer; l++)
            for (int32_t h = 0; h < p.n_kv_head; h++)
                if (c->recurrent[l] && c->streams[(size_t)l * p.n_kv_head + h].v.n_pages) {
                    kvb_cache_free(c);
                    return kvb_fail(KVB_ERR_CORRUPT, "cache image: recurrent layer %d holds K/V pages", (int)l);
                }
    }
    for (int32_t l = 0; l < p.n_layer; l++) /* a reader (kv_source), or a head past its layer's (kv_heads), holds nothing */
        for (int32_t h = 0; h < p.n_kv_head; h++)
            if (c->streams[(size_t)l * p.n_kv_head + h].no_kv && c->streams[(size_t)l * p.n_kv_head + h].v.n_pages) {
                kvb_cache_free(c);
                return kvb_fail(KVB_ERR_CORRUPT, "cache image: layer %d head %d holds K/V pages it cannot have (recurrent, a reader, or past its heads)",
                                (int)l, (int)h);
            }
    if ((flags & IMAGE_QSTATS) && (st = load_qstats(c, &r)) != KVB_OK) {
        kvb_cache_free(c);
        return st;
    }
    if (r.at != r.n) {
        kvb_cache_free(c);
        return kvb_fail(KVB_ERR_CORRUPT, "cache image: %zu trailing bytes", r.n - r.at);
    }
    kvb_cache_note_peak(c);
    *out = c;
    return KVB_OK;
}

kvb_status kvb_cache_save_file(const struct kvb_cache *c, const char *path) {
    if (!path) return kvb_fail(KVB_ERR_INVALID, "cache_save_file: path is NULL");
    void *buf;
    size_t len;
    kvb_status st = kvb_cache_save(c, &buf, &len);
    if (st != KVB_OK) return st;
    /* write to a temporary name, then rename: a crash never leaves a half file */
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        kvb_free(buf);
        return kvb_fail(KVB_ERR_INVALID, "cache_save_file: path too long");
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        kvb_free(buf);
        return kvb_fail(KVB_ERR_IO, "cache_save_file: cannot open '%s': %s", tmp, strerror(errno));
    }
    bool ok = fwrite(buf, 1, len, f) == len;
    ok = (fclose(f) == 0) && ok;
    kvb_free(buf);
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return kvb_fail(KVB_ERR_IO, "cache_save_file: cannot write '%s': %s", path, strerror(errno));
    }
    return KVB_OK;
}

kvb_status kvb_cache_load_file(struct kvb_pool *pool, const char *path, size_t pool_bytes, struct kvb_cache **out) {
    if (!path) return kvb_fail(KVB_ERR_INVALID, "cache_load_file: path is NULL");
    FILE *f = fopen(path, "rb");
    if (!f) return kvb_fail(KVB_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return kvb_fail(KVB_ERR_IO, "cannot seek '%s'", path);
    }
    long sz = ftell(f);
    rewind(f);
    if (sz < 0) {
        fclose(f);
        return kvb_fail(KVB_ERR_IO, "cannot size '%s'", path);
    }
    uint8_t *buf = kvb_malloc((size_t)sz);
    if (!buf) {
        fclose(f);
        return kvb_fail(KVB_ERR_NOMEM, "out of memory reading '%s' (%ld bytes)", path, sz);
    }
    size_t got = fread(buf, 1, (size_t)sz, f);
    fclose(f);
    if (got != (size_t)sz) {
        kvb_free(buf);
        return kvb_fail(KVB_ERR_IO, "short read on '%s'", path);
    }
    kvb_status st = kvb_cache_load(pool, buf, (size_t)sz, pool_bytes, out);
    kvb_free(buf);
    if (st != KVB_OK && st != KVB_ERR_NOMEM) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", kvb_last_error());
        return kvb_fail(st, "%s: %s", path, msg);
    }
    return st;
}
