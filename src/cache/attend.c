/*
 * attend.c — the attention workers of a cache: storing a token's rows, and
 * attention of one decode token or a block of prefill tokens over a stream,
 * with the runs a query sees (positions: see cache.c) and each KV head's
 * scratch. Everything here runs per KV head in parallel and cannot fail:
 * cache.c reserves the scratch and slots first.
 */
#include "cache_impl.h"

#include <math.h>

#define ROPE_MEMO 16 /* capped positions: the global tokens keep their rotations across steps */

struct kvb_head_scratch {
    float *acc;      /* [MAX_ROWS][d] */
    float *qrot;     /* [MAX_ROWS][d] */
    float *out;      /* [MAX_ROWS][d] */
    float *lse;      /* [MAX_ROWS] */
    int32_t *limit;  /* [MAX_ROWS] */
    float *krow;     /* [d] */
    float *p;        /* [G][cap] decode probabilities */
    float *col;      /* [cap] prefill column mass / mean weights */
    int32_t *seg_j;  /* [seg_cap] */
    float *seg_m;    /* [seg_cap][MAX_ROWS] */
    int64_t cap, seg_cap, p_rows;
    int64_t memo_pos[ROPE_MEMO];
    float *memo_cs;  /* [ROPE_MEMO][2*n_pairs] */
    int32_t memo_next;
    struct kvb_run *cruns; /* [cap + 1] runs of one query in CAPPED mode */
    int32_t *first;  /* [MAX_ROWS] a window layer's first visible key per query row */
    bool no_rope;    /* the stream being served rotates nothing (a NoPE layer): set by each entry point */
    bool rope_swa;   /* ... turns by rope_swa (a window layer's rotation): set likewise */
    float sink[KVB_ATTN_MAX_ROWS]; /* a block's rows' sink logits (their heads') */
};

/* ---- scratch ---- */

static void free_scratch(struct kvb_head_scratch *h) {
    kvb_free(h->acc); kvb_free(h->qrot); kvb_free(h->out); kvb_free(h->lse); kvb_free(h->limit); kvb_free(h->krow);
    kvb_free(h->p); kvb_free(h->col); kvb_free(h->seg_j); kvb_free(h->seg_m); kvb_free(h->memo_cs);
    kvb_free(h->cruns); kvb_free(h->first);
    memset(h, 0, sizeof *h);
}

struct kvb_head_scratch *kvb_head_scratch_new_array(int32_t n) {
    return kvb_calloc((size_t)n, sizeof(struct kvb_head_scratch));
}

void kvb_head_scratch_free_array(struct kvb_head_scratch *h, int32_t n) {
    if (!h) return;
    for (int32_t i = 0; i < n; i++) free_scratch(&h[i]);
    kvb_free(h);
}

struct kvb_head_scratch *kvb_head_scratch_at(struct kvb_head_scratch *arr, int32_t i) { return &arr[i]; }

float *kvb_head_scratch_col(struct kvb_head_scratch *h) { return h->col; }

kvb_status kvb_head_scratch_reserve(const struct kvb_cache *c, struct kvb_head_scratch *h, int64_t n, int32_t G) {
    const size_t d = (size_t)c->params.head_dim;
    if (!h->acc) {
        struct kvb_head_scratch t = {0};
        t.acc = kvb_malloc(sizeof(float) * KVB_ATTN_MAX_ROWS * d);
        t.qrot = kvb_malloc(sizeof(float) * KVB_ATTN_MAX_ROWS * d);
        t.out = kvb_malloc(sizeof(float) * KVB_ATTN_MAX_ROWS * d);
        t.lse = kvb_malloc(sizeof(float) * KVB_ATTN_MAX_ROWS);
        t.limit = kvb_malloc(sizeof(int32_t) * KVB_ATTN_MAX_ROWS);
        t.first = kvb_malloc(sizeof(int32_t) * KVB_ATTN_MAX_ROWS);
        t.krow = kvb_malloc(sizeof(float) * d * 2);
        t.memo_cs = kvb_malloc(sizeof(float) * ROPE_MEMO * 2 * (size_t)KVB_MAX(c->n_pairs, 1));
        if (!t.acc || !t.qrot || !t.out || !t.lse || !t.limit || !t.first || !t.krow || !t.memo_cs) {
            free_scratch(&t);
            return KVB_ERR_NOMEM;
        }
        for (int i = 0; i < ROPE_MEMO; i++) t.memo_pos[i] = INT64_MIN;
        *h = t;
    }
    if (n > h->cap || G > h->p_rows) {
        int64_t cap = KVB_MAX(h->cap, 64);
        while (cap < n) cap *= 2;
        const int64_t rows = KVB_MAX(h->p_rows, (int64_t)G);
        const int64_t seg_cap = cap / KVB_ATTN_TILE + cap + 2; /* runs <= keys */
        float *p = kvb_malloc(sizeof(float) * (size_t)(cap * rows));
        float *col = kvb_malloc(sizeof(float) * (size_t)cap);
        int32_t *sj = kvb_malloc(sizeof(int32_t) * (size_t)seg_cap);
        float *sm = kvb_malloc(sizeof(float) * (size_t)seg_cap * KVB_ATTN_MAX_ROWS);
        struct kvb_run *cr = kvb_malloc(sizeof(struct kvb_run) * (size_t)(cap + 1));
        if (!p || !col || !sj || !sm || !cr) {
            kvb_free(p); kvb_free(col); kvb_free(sj); kvb_free(sm); kvb_free(cr);
            return KVB_ERR_NOMEM;
        }
        kvb_free(h->p); kvb_free(h->col); kvb_free(h->seg_j); kvb_free(h->seg_m); kvb_free(h->cruns);
        h->p = p; h->col = col; h->seg_j = sj; h->seg_m = sm; h->cruns = cr;
        h->cap = cap; h->seg_cap = seg_cap; h->p_rows = rows;
    }
    return KVB_OK;
}

/* ---- rows and RoPE ---- */

/* cos/sin at pos of the rotation in force (rope, or a window layer's
 * rope_swa): memoised under 2 * pos + which. */
static const float *rope_cs(const struct kvb_cache *c, struct kvb_head_scratch *h, int64_t pos) {
    const size_t w = 2 * (size_t)c->n_pairs;
    const int64_t key = 2 * pos + (h->rope_swa ? 1 : 0);
    for (int i = 0; i < ROPE_MEMO; i++)
        if (h->memo_pos[i] == key) return h->memo_cs + (size_t)i * w;
    const int i = h->memo_next;
    h->memo_next = (i + 1) % ROPE_MEMO;
    h->memo_pos[i] = key;
    kvb_rope_cos_sin(h->rope_swa ? c->inv_freq_swa : c->inv_freq, h->rope_swa ? c->n_pairs_swa : c->n_pairs, pos, h->memo_cs + (size_t)i * w);
    return h->memo_cs + (size_t)i * w;
}

/* The stream's rotation, for the entry points below. */
static void serve_stream(struct kvb_head_scratch *h, const struct kvb_stream *s) {
    h->no_rope = s->no_rope;
    h->rope_swa = s->rope_swa;
}

/* The first logical slot of s a query at position pq sees: a window layer's
 * keys farther than its window are masked (positions increase with logical
 * order), from slot j on. */
static int32_t window_first(const struct kvb_stream *s, int64_t pq, int32_t j) {
    if (!s->window) return 0;
    while (j < s->v.n && pq - s->v.pos[s->v.order[j]] >= s->window) j++;
    return j;
}

static void rotate(const struct kvb_cache *c, struct kvb_head_scratch *h, float *x, int64_t pos) {
    if (c->params.rope.type == KVB_ROPE_NONE || h->no_rope) return;
    kvb_rope_apply(c->params.rope.type, h->rope_swa ? c->params.rope_swa.n_dims : c->params.rope.n_dims, rope_cs(c, h, pos), x); /* a window
                                                                                  * layer's rope_swa may rotate fewer dims (Gemma 4) */
}


void kvb_attend_append(struct kvb_cache *c, struct kvb_stream *s, struct kvb_head_scratch *h, const float *k,
                       const float *v, int32_t pos) {
    const int32_t d = c->params.head_dim;
    const size_t rb = c->geom.row_bytes;
    serve_stream(h, s);
    const int32_t slot = kvb_stream_push(&c->geom, s, pos);
    uint8_t *kd = kvb_stream_row(&c->geom, s, slot);
    if (k) {
        memcpy(h->krow, k, sizeof(float) * (size_t)d);
        rotate(c, h, h->krow, pos);
        kvb_kv_row_store(c->params.kv.kv_dtype, h->krow, kd, d); /* quantized here, once */
    } else {
        memset(kd, 0, rb);
    }
    if (!c->params.head_dim_v) { /* latent rows: the value is the K row's tail, no V row */
        uint8_t *vd = kvb_stream_vrow(&c->geom, s, slot);
        if (v) kvb_kv_row_store(c->params.kv.kv_dtype_v, v, vd, d);
        else memset(vd, 0, c->geom.row_bytes_v);
    }
    if (c->policy.iface->on_append) { /* a pinned token is no slot of the policy's view */
        struct kvb_stream_view pv;
        const int32_t pin = kvb_cache_policy_view(c, s, &pv);
        if (s->v.n - 1 >= pin) c->policy.iface->on_append(&c->policy, &pv, s->v.n - 1 - pin, k, d);
    }
}

void kvb_attend_read_slot(const struct kvb_cache *c, const struct kvb_stream *s, int32_t j, float *k, float *v) {
    const int32_t slot = s->v.order[j];
    if (k) kvb_kv_row_load(c->params.kv.kv_dtype, kvb_stream_row(&c->geom, s, slot), k, c->params.head_dim);
    if (v && c->params.head_dim_v) /* latent rows: the K row's last head_dim_v entries */
        kvb_kv_row_load(c->params.kv.kv_dtype, kvb_stream_row(&c->geom, s, slot) + c->v_in_k, v, c->params.head_dim_v);
    else if (v) kvb_kv_row_load(c->params.kv.kv_dtype_v, kvb_stream_vrow(&c->geom, s, slot), v, c->params.head_dim);
}

/* The rows a policy's view offers (policy.h, kvb_stream_view.rows). */
void kvb_attend_view_rows(const struct kvb_stream_view *v, int32_t j, float *k, float *val) {
    kvb_attend_read_slot(v->rows_at[0], v->rows_at[1], j + v->rows_pin, k, val);
}

/* The stream's rotation for a policy (kvb_stream_view.rope_mean, rope_apply):
 * cs is [cos[n_pairs], sin[n_pairs]] as kvb_rope_cos_sin writes it. */
static bool view_rotates(const struct kvb_cache *c, const struct kvb_stream *s) {
    return c->params.rope.type != KVB_ROPE_NONE && !s->no_rope;
}

void kvb_attend_view_rope_mean(const struct kvb_stream_view *v, int64_t from, int32_t T, float *cs) {
    const struct kvb_cache *c = v->rows_at[0];
    const struct kvb_stream *s = v->rows_at[1];
    const int32_t np = s->rope_swa ? c->n_pairs_swa : c->n_pairs;
    if (!view_rotates(c, s) || T < 1) return;
    double acc[KVB_ATTN_MAX_DIM];
    float one[KVB_ATTN_MAX_DIM];
    for (int32_t i = 0; i < 2 * np; i++) acc[i] = 0;
    for (int32_t t = 0; t < T; t++) {
        kvb_rope_cos_sin(s->rope_swa ? c->inv_freq_swa : c->inv_freq, np, from + t, one);
        for (int32_t i = 0; i < 2 * np; i++) acc[i] += one[i];
    }
    for (int32_t i = 0; i < 2 * np; i++) cs[i] = (float)(acc[i] / T);
}

void kvb_attend_view_rope_apply(const struct kvb_stream_view *v, const float *cs, float *x) {
    const struct kvb_cache *c = v->rows_at[0];
    const struct kvb_stream *s = v->rows_at[1];
    if (!view_rotates(c, s)) return;
    kvb_rope_apply(c->params.rope.type, s->rope_swa ? c->params.rope_swa.n_dims : c->params.rope.n_dims, cs, x);
}

/* ---- runs as a query sees them ---- */

/* Whether queries at original positions up to pq_max see a capped distance
 * in stream s or its recall area (then every query needs its own runs). */
static bool capped_far(const struct kvb_cache *c, const struct kvb_stream *s, int64_t pq_max) {
    if (c->pos_mode != KVB_POS_CAPPED) return false;
    const struct kvb_recall_stream *ra = kvb_recall_area(c, s);
    if (ra && pq_max - ra->pos[ra->order[0]] > c->params.kv.max_distance) return true;
    return s->v.n > 0 && pq_max - s->v.pos[s->v.order[0]] > c->params.kv.max_distance;
}

/* Runs of n keys with original positions pos[order[j]] (increasing) as a
 * query at pq sees them in ORIGINAL or CAPPED mode (see attn_runs). */
static int32_t keyed_runs(const struct kvb_cache *c, const int32_t *pos, const int32_t *order, int32_t n,
                          struct kvb_head_scratch *hs, int64_t pq, const struct kvb_run **out) {
    static const struct kvb_run one = {0, 0};
    *out = &one;
    if (c->pos_mode != KVB_POS_CAPPED || n == 0 || pq - pos[order[0]] <= c->params.kv.max_distance) return 1;
    const int64_t L = c->params.kv.max_distance;
    int32_t nr = 0, j = 0;
    for (; j < n && pq - pos[order[j]] > L; j++) hs->cruns[nr++] = (struct kvb_run){j, (int32_t)(pos[order[j]] + L - pq)};
    if (j < n) hs->cruns[nr++] = (struct kvb_run){j, 0};
    *out = hs->cruns;
    return nr;
}

/* Runs as seen by a query at original position pq: contiguous mode uses the
 * stream's runs, original mode a single run with delta 0, capped mode one run
 * per key farther than max_distance (delta p_j + max_distance - pq, so the
 * query is rotated to sit exactly max_distance after it) and then one run
 * with delta 0. The query is rotated at (CONTIGUOUS ? its cache position : pq)
 * + delta. */
static int32_t attn_runs(const struct kvb_cache *c, const struct kvb_stream *s, struct kvb_head_scratch *hs, int64_t pq,
                         const struct kvb_run **out) {
    if (c->pos_mode == KVB_POS_CONTIGUOUS) {
        *out = s->runs;
        return s->n_runs;
    }
    return keyed_runs(c, s->v.pos, s->v.order, s->v.n, hs, pq, out);
}

static struct kvb_kv_view kv_view(const struct kvb_cache *c, const struct kvb_stream *s) {
    struct kvb_kv_view v;
    v.pages = s->pages;
    v.slots = s->v.order;
    v.n = s->v.n;
    v.block_shift = c->geom.block_shift;
    v.head_dim = c->params.head_dim;
    v.row_bytes = c->geom.row_bytes;
    v.row_bytes_v = c->geom.row_bytes_v;
    v.v_offset = c->geom.v_offset;
    v.dtype = c->params.kv.kv_dtype;
    v.dtype_v = c->params.kv.kv_dtype_v;
    v.softcap = c->params.attn_softcap;
    v.head_dim_v = 0;
    if (c->params.head_dim_v) { /* latent rows: each V row is its K row's tail (dtype_v is dtype) */
        v.head_dim_v = c->params.head_dim_v;
        v.v_offset = c->v_in_k;
        v.row_bytes_v = c->geom.row_bytes;
    }
    return v;
}

/* Rotates the query rows of tokens [i0, i1) of KV head h's group for run
 * delta and scales them; q is [*][n_head][d], row r = (i - i0) * G + g.
 * Token i sits at original position p0 + i and logical slot n_prev + i. */
static void rotate_rows(const struct kvb_cache *c, struct kvb_head_scratch *hs, const float *q, int32_t n_head, int32_t G,
                        int32_t h, int32_t i0, int32_t i1, int32_t n_prev, int64_t p0, int32_t delta) {
    const int32_t d = c->params.head_dim;
    const float scale = 1.0f / sqrtf((float)d);
    for (int32_t i = i0; i < i1; i++) {
        const int64_t qpos = (c->pos_mode == KVB_POS_CONTIGUOUS ? (int64_t)n_prev + i : p0 + i) + delta;
        for (int32_t g = 0; g < G; g++) {
            float *qr = hs->qrot + (size_t)((i - i0) * G + g) * d;
            memcpy(qr, q + ((size_t)i * n_head + (size_t)h * G + g) * d, sizeof(float) * (size_t)d);
            rotate(c, hs, qr, qpos);
            for (int32_t x = 0; x < d; x++) qr[x] *= scale;
        }
    }
}

/* The recall area of s as a view (its keys 0 .. n-1 by increasing position). */
static struct kvb_kv_view area_view(const struct kvb_cache *c, const struct kvb_stream *s, const struct kvb_recall_stream *ra) {
    struct kvb_kv_view v = kv_view(c, s);
    v.pages = ra->pages;
    v.slots = ra->order;
    v.n = ra->n;
    return v;
}

#define RECALL_WINDOW 32 /* a prefill chunk's last tokens whose queries choose its recalled pages */

/* Chooses stream s's recalled pages with the query rows of tokens [i0, i1)
 * of q (KV head h's group; token i at original position p0 + i), rotated as
 * the scores see them: at their original positions, where keys are stored. */
static void recall_refresh(struct kvb_cache *c, struct kvb_stream *s, struct kvb_head_scratch *hs, const float *q, int32_t n_head,
                           int32_t G, int32_t h, int32_t i0, int32_t i1, int64_t p0) {
    if (!c->recall || s->window) return; /* a window layer's evicted tokens are never seen again */
    i0 = KVB_MAX(i0, i1 - KVB_ATTN_MAX_ROWS / G); /* qrot holds KVB_ATTN_MAX_ROWS rows */
    rotate_rows(c, hs, q, n_head, G, h, i0, i1, 0, p0, 0); /* recall never runs with contiguous positions */
    kvb_recall_refresh(c, s, hs->qrot, (i1 - i0) * G);
}

/* Rows [i0, i1) of q also attend to the recall area (every area key precedes
 * every query). No per-key probabilities: the policy's evidence is the hot
 * slots' (normalised over both, as the state's l includes the area). */
static void attend_area(struct kvb_cache *c, struct kvb_stream *s, struct kvb_head_scratch *hs, const float *q, int32_t n_head,
                        int32_t G, int32_t h, int32_t i0, int32_t i1, int32_t n_prev, int64_t p0, struct kvb_attn_state *st) {
    const struct kvb_recall_stream *ra = kvb_recall_area(c, s);
    if (!ra) return;
    const struct kvb_kv_view view = area_view(c, s, ra);
    float *p = st->p;
    st->p = NULL;
    int32_t jf = 0; /* capped: keys [0, jf) are farther than max_distance from token i0 */
    if (c->pos_mode == KVB_POS_CAPPED && ra->shadow) {
        const int64_t L = c->params.kv.max_distance;
        while (jf < ra->n && p0 + i0 - ra->pos[ra->order[jf]] > L) jf++;
        if (jf > 0) { /* tokens i0 .. i1 - 1 is one token here (attend_tokens: capped_far) */
            uint8_t *sp = (uint8_t *)ra->shadow;
            struct kvb_kv_view fv = view;
            fv.pages = &sp;
            fv.block_shift = ra->shadow_shift;
            fv.row_bytes = fv.row_bytes_v = sizeof(float) * (size_t)c->params.head_dim;
            fv.v_offset = fv.row_bytes << ra->shadow_shift;
            fv.dtype = fv.dtype_v = KVB_DTYPE_F32;
            if (c->params.head_dim_v) /* latent rows: the shadow's values are its keys' unrotated tails */
                fv.v_offset = sizeof(float) * (size_t)(c->params.head_dim - c->params.head_dim_v);
            rotate_rows(c, hs, q, n_head, G, h, i0, i1, n_prev, p0, (int32_t)(L - (p0 + i0))); /* the query at L */
            kvb_attn_run(c->kr, &fv, hs->qrot, NULL, 0, jf, st);
        }
    }
    if (jf < ra->n) {
        const struct kvb_run *runs;
        const int32_t nr = keyed_runs(c, ra->pos, ra->order + jf, ra->n - jf, hs, p0 + i0, &runs);
        for (int32_t r = 0; r < nr; r++) {
            rotate_rows(c, hs, q, n_head, G, h, i0, i1, n_prev, p0, runs[r].delta);
            kvb_attn_run(c->kr, &view, hs->qrot, NULL, jf + runs[r].j0, jf + (r + 1 < nr ? runs[r + 1].j0 : ra->n - jf), st);
        }
    }
    st->p = p;
}

/* ---- attention ---- */

/* End of run r of nr over n slots, clipped to the causal limit jmax. */
static inline int32_t run_end(const struct kvb_run *runs, int32_t nr, int32_t r, int32_t n, int32_t jmax) {
    return KVB_MIN(r + 1 < nr ? runs[r + 1].j0 : n, jmax);
}


/* G <= KVB_ATTN_MAX_ROWS query heads (q rows, out rows, their sinks) of
 * kvb_attend_decode: one pass over the stream. */
static void decode_group(struct kvb_cache *c, struct kvb_stream *s, struct kvb_head_scratch *h, const float *q, int32_t G,
                         const float *sink, int64_t pq, float *out, float *w) {
    const int32_t d = c->params.head_dim;
    const struct kvb_run *runs;
    const int32_t nr = attn_runs(c, s, h, pq, &runs);
    const struct kvb_kv_view view = kv_view(c, s);
    const int32_t jw = window_first(s, pq, 0); /* 0 but right after a restore or a caller's append */
    struct kvb_attn_state st;
    kvb_attn_begin(&st, G, d, h->acc, w ? h->p : NULL, s->v.n, h->seg_j, h->seg_m, (int32_t)h->seg_cap);
    st.dv = kvb_cache_dv(c);
    st.sink = sink; /* rows are these G query heads */
    for (int32_t r = 0; r < nr; r++) {
        const int32_t j0 = KVB_MAX(runs[r].j0, jw), j1 = run_end(runs, nr, r, s->v.n, s->v.n);
        if (j0 >= j1) continue;
        /* one token: the new one, at logical slot n - 1 and position pq */
        rotate_rows(c, h, q, G, G, 0, 0, 1, s->v.n - 1, pq, runs[r].delta);
        kvb_attn_run(c->kr, &view, h->qrot, NULL, j0, j1, &st);
    }
    attend_area(c, s, h, q, G, G, 0, 0, 1, s->v.n - 1, pq, &st);
    if (w) {
        kvb_attn_end_mean(&st, out, w, s->v.n);
        if (jw > 0) memset(w, 0, sizeof(float) * (size_t)jw); /* the slots outside the window: not seen */
    } else {
        kvb_attn_end(&st, out, NULL);
    }
}

/* More than KVB_ATTN_MAX_ROWS query heads per KV head (DeepSeek-V3's 128
 * over one latent row) attend in groups of KVB_ATTN_MAX_ROWS, one pass over
 * the stream each; the mean weights are the groups' means weighted by their
 * heads (the second and later groups' go through p's row KVB_ATTN_MAX_ROWS,
 * which no group uses). Recall chooses with the first group's queries. */
void kvb_attend_decode(struct kvb_cache *c, struct kvb_stream *s, struct kvb_head_scratch *h, const float *q, int32_t G,
                       int64_t pq, float *out, float *w) {
    serve_stream(h, s);
    const int32_t g1 = KVB_MIN(G, KVB_ATTN_MAX_ROWS);
    recall_refresh(c, s, h, q, g1, g1, 0, 0, 1, pq);
    if (G <= KVB_ATTN_MAX_ROWS) {
        decode_group(c, s, h, q, G, s->sink, pq, out, w);
        return;
    }
    const int32_t d = c->params.head_dim, dv = kvb_cache_dv(c), n = s->v.n;
    float *wg = w ? h->p + (size_t)KVB_ATTN_MAX_ROWS * (size_t)n : NULL;
    for (int32_t g0 = 0; g0 < G; g0 += KVB_ATTN_MAX_ROWS) {
        const int32_t gs = KVB_MIN(KVB_ATTN_MAX_ROWS, G - g0);
        decode_group(c, s, h, q + (size_t)g0 * d, gs, s->sink ? s->sink + g0 : NULL, pq, out + (size_t)g0 * dv, g0 ? wg : w);
        if (!w) continue;
        const float f = (float)gs / (float)G;
        if (g0 == 0) for (int32_t j = 0; j < n; j++) w[j] *= f;
        else for (int32_t j = 0; j < n; j++) w[j] += wg[j] * f;
    }
}

/* kvb_attend_tokens for G <= KVB_ATTN_MAX_ROWS query heads: those of KV
 * head h in q's [n_head] rows (h * G + g), their sinks; column mass weighted
 * w_col per row; refresh: this group chooses the recalled pages. */
static void tokens_group(struct kvb_cache *c, struct kvb_stream *s, struct kvb_head_scratch *hs, int32_t h, const float *q, int32_t n_head,
                         int32_t G, const float *sink, int32_t C, int32_t n_prev, int64_t p0, float *out, int32_t obs_from, float *col,
                         float w_col, bool refresh) {
    const int32_t d = c->params.head_dim, dv = kvb_cache_dv(c);
    const struct kvb_kv_view view = kv_view(c, s);
    /* recall: the chunk's last RECALL_WINDOW tokens choose (not for a vote: out == NULL) */
    if (out && refresh) recall_refresh(c, s, hs, q, n_head, G, h, KVB_MAX(0, C - RECALL_WINDOW), C, p0);
    /* capped positions with far keys: every token has its own runs */
    const int32_t tb = capped_far(c, s, p0 + C - 1) ? 1 : KVB_MAX(1, KVB_ATTN_MAX_ROWS / G);
    int32_t wf = 0; /* a window layer: the first key the current token sees, which only moves forward */
    for (int32_t i0 = 0; i0 < C; i0 += tb) {
        const int32_t i1 = KVB_MIN(C, i0 + tb), R = (i1 - i0) * G;
        const struct kvb_run *runs;
        const int32_t nr = attn_runs(c, s, hs, p0 + i0, &runs);
        for (int32_t i = i0; i < i1; i++) {
            wf = window_first(s, p0 + i, wf);
            for (int32_t g = 0; g < G; g++) {
                hs->limit[(i - i0) * G + g] = n_prev + i + 1;
                hs->first[(i - i0) * G + g] = wf;
            }
        }
        const int32_t jw = hs->first[0]; /* token i0's, the block's least */
        const int32_t jmax = n_prev + i1;
        struct kvb_attn_state st;
        kvb_attn_begin(&st, R, d, hs->acc, NULL, 0, NULL, NULL, 0);
        st.dv = dv;
        if (s->window) st.first = hs->first;
        if (sink) { /* row (token, g): query head g's */
            for (int32_t r = 0; r < R; r++) hs->sink[r] = sink[r % G];
            st.sink = hs->sink;
        }
        int32_t j1;
        for (int32_t r = 0; r < nr && (j1 = run_end(runs, nr, r, s->v.n, jmax)) > runs[r].j0; r++) {
            if (KVB_MAX(runs[r].j0, jw) >= j1) continue;
            rotate_rows(c, hs, q, n_head, G, h, i0, i1, n_prev, p0, runs[r].delta);
            kvb_attn_run(c->kr, &view, hs->qrot, hs->limit, KVB_MAX(runs[r].j0, jw), j1, &st);
        }
        if (out) attend_area(c, s, hs, q, n_head, G, h, i0, i1, n_prev, p0, &st);
        kvb_attn_end(&st, hs->out, hs->lse);
        if (out)
            for (int32_t i = i0; i < i1; i++)
                memcpy(out + ((size_t)i * n_head + (size_t)h * G) * dv, hs->out + (size_t)(i - i0) * G * dv,
                       sizeof(float) * (size_t)G * dv);
        if (col && i1 > obs_from) {
            const int32_t a = KVB_MAX(i0, obs_from); /* observed tokens of this block: [a, i1) */
            const int32_t off = (a - i0) * G, Ro = (i1 - a) * G;
            for (int32_t r = 0; r < nr && (j1 = run_end(runs, nr, r, s->v.n, jmax)) > runs[r].j0; r++) {
                rotate_rows(c, hs, q, n_head, G, h, i0, i1, n_prev, p0, runs[r].delta);
                kvb_attn_colmass(c->kr, &view, hs->qrot + (size_t)off * d, hs->limit + off, hs->lse + off, Ro,
                                 w_col, runs[r].j0, j1, col, st.s);
            }
        }
    }
}

/* More than KVB_ATTN_MAX_ROWS query heads per KV head: groups of
 * KVB_ATTN_MAX_ROWS heads, one token per block (their rows fill it), each
 * group's column mass weighted 1/G so that all G heads average; the first
 * group chooses the recalled pages. */
void kvb_attend_tokens(struct kvb_cache *c, struct kvb_stream *s, struct kvb_head_scratch *hs, int32_t h,
                       const float *q, int32_t n_head, int32_t G, int32_t C, int32_t n_prev, int64_t p0, float *out,
                       int32_t obs_from, float *col) {
    serve_stream(hs, s);
    if (G <= KVB_ATTN_MAX_ROWS) {
        tokens_group(c, s, hs, h, q, n_head, G, s->sink, C, n_prev, p0, out, obs_from, col, 1.0f / (float)G, true);
        return;
    }
    const size_t d = (size_t)c->params.head_dim, dv = (size_t)kvb_cache_dv(c), base = (size_t)h * (size_t)G;
    for (int32_t g0 = 0; g0 < G; g0 += KVB_ATTN_MAX_ROWS) /* head h * G + g0 + g is group row g of "KV head 0" at q + (h * G + g0) rows */
        tokens_group(c, s, hs, 0, q + (base + (size_t)g0) * d, n_head, KVB_MIN(KVB_ATTN_MAX_ROWS, G - g0), s->sink ? s->sink + g0 : NULL, C,
                     n_prev, p0, out ? out + (base + (size_t)g0) * dv : NULL, obs_from, col, 1.0f / (float)G, g0 == 0);
}

/* ---- kvzip's reconstruction score ---- */

void kvb_attend_recon_score(const struct kvb_cache *c, struct kvb_stream *s, struct kvb_head_scratch *hs, int32_t h, const float *q,
                            int32_t n_head, int32_t G, int32_t C, int32_t n_prev, int64_t p0, int32_t n_sink, int32_t lo, int32_t hi,
                            int32_t own, float *buf, float *score, size_t stride) {
    const int32_t d = c->params.head_dim, nsk = KVB_MIN(n_sink, lo);
    const float scale = 1.0f / sqrtf((float)d), cap = c->params.attn_softcap;
    serve_stream(hs, s);
    /* the keys as stored (rotated at their positions): sinks, chunk, the pass's own */
    int32_t K = 0;
    for (int32_t j = 0; j < nsk; j++) kvb_attend_read_slot(c, s, j, buf + (size_t)K++ * d, NULL);
    for (int32_t j = lo; j < hi; j++) kvb_attend_read_slot(c, s, j, buf + (size_t)K++ * d, NULL);
    const int32_t K0 = K; /* keys every token sees */
    for (int32_t j = own; j < n_prev + C; j++) kvb_attend_read_slot(c, s, j, buf + (size_t)K++ * d, NULL);
    float *lg = buf + (size_t)K * d;
    float qr[KVB_ATTN_MAX_DIM];
    for (int32_t i = 0; i < C; i++) {
        const int32_t Ki = K0 + (n_prev + i + 1 - own); /* causal: the pass's keys up to token i */
        for (int32_t g = 0; g < G; g++) {
            memcpy(qr, q + ((size_t)i * n_head + (size_t)h * G + g) * d, sizeof(float) * (size_t)d);
            rotate(c, hs, qr, p0 + i);
            float mx = -INFINITY;
            for (int32_t j = 0; j < Ki; j++) {
                const float *kr = buf + (size_t)j * d;
                float a[8] = {0, 0, 0, 0, 0, 0, 0, 0}; /* eight lanes the compiler can keep in one vector */
                int32_t t = 0;
                for (; t + 8 <= d; t += 8)
                    for (int u = 0; u < 8; u++) a[u] += qr[t + u] * kr[t + u];
                for (; t < d; t++) a[t & 7] += qr[t] * kr[t];
                float x = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
                x *= scale;
                if (cap > 0) x = cap * tanhf(x / cap);
                lg[j] = x;
                mx = x > mx ? x : mx;
            }
            double z = 0; /* each exponential once, in float; their sum in double */
            for (int32_t j = 0; j < Ki; j++) {
                lg[j] = expf(lg[j] - mx);
                z += lg[j];
            }
            const float inv = (float)(1.0 / z);
            for (int32_t j = lo; j < hi; j++) {
                const float w = lg[nsk + j - lo] * inv;
                float *st = &score[(size_t)j * stride];
                if (w > *st) *st = w;
            }
        }
    }
}
