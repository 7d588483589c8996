/*
 * lab.c — the synthetic attention laboratory.
 *
 * A cache policy is a bet about future attention. The lab makes the bet
 * visible without a model: it generates deterministic attention rows whose
 * ground truth is known, feeds them to the library's real policy objects
 * through the same append / observe / evict interface the engine uses, and
 * measures what each policy keeps.
 *
 * Generator (query position q, keys 0..q), before normalisation:
 *   background  bg / (q+1) per key, times a hash noise in [0.5, 1.5)
 *   recency     rec * exp(-(q-i)/tau) / sum over the row
 *   sinks       sink * w_k over the first 4 positions (w = .55 .2 .15 .1)
 *   salience    base[f] on each fact f placed before q (heavy hitters)
 *   reveal      in the last obs_window prompt rows: obs_mass shared by the
 *               facts of group A (what the question will need)
 *   queries     at generated step t: strength on each fact queried at t
 * then the row is divided by its sum. Noise is a hash of (seed, q, i), so a
 * row is computed on its own, in any order, identically for a given seed.
 */
#include "../core/core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define LAB_MAX_FACTS 32
#define LAB_MAX_QUERIES 128
#define LAB_SINKS 4

struct lab_query {
    int32_t step, fact;
    double strength;
};

struct kvb_lab_stream {
    char name[16];
    int32_t P, G;
    uint64_t seed;
    double bg, rec, tau, sink, obs_mass;
    int32_t obs_window;
    int32_t n_facts;
    struct kvb_lab_fact facts[LAB_MAX_FACTS];
    double base[LAB_MAX_FACTS];
    int32_t n_queries;
    struct lab_query queries[LAB_MAX_QUERIES];
};

static uint64_t mix64(uint64_t z) { return kvb_splitmix64(&z); } /* a hash of z */

static double unit(uint64_t *s) { /* [0, 1) */
    *s = mix64(*s);
    return (double)(*s >> 11) * (1.0 / 9007199254740992.0);
}

static const struct {
    const char *name, *describe;
} g_scenarios[] = {
    {"chat", "streaming chat: strong sinks, mostly local attention, occasional callbacks to old facts"},
    {"needle", "needle QA: one fact a third into the prompt, revealed by the observation window, queried during generation"},
    {"diffuse", "weak facts and spread-out attention, where budget spent on old positions can lose to plain recency"},
    {"drift", "topic drift: the observation window points at facts A, generation later needs facts B"},
};

const char *kvb_lab_scenario_describe(const char *scenario) {
    for (size_t i = 0; i < sizeof g_scenarios / sizeof g_scenarios[0]; i++)
        if (scenario && strcmp(scenario, g_scenarios[i].name) == 0) return g_scenarios[i].describe;
    return NULL;
}

/* Places n facts of a group at distinct prompt positions in [lo, hi). */
static void place_facts(struct kvb_lab_stream *st, uint64_t *rs, int32_t n, int32_t group, int32_t lo, int32_t hi, double base) {
    for (int32_t k = 0; k < n && st->n_facts < LAB_MAX_FACTS; k++) {
        int32_t pos;
        bool clash;
        do {
            pos = lo + (int32_t)(unit(rs) * (double)(hi - lo));
            clash = false;
            for (int32_t f = 0; f < st->n_facts; f++) clash |= abs(st->facts[f].pos - pos) < 2;
        } while (clash);
        st->facts[st->n_facts].pos = pos;
        st->facts[st->n_facts].group = group;
        st->base[st->n_facts] = base;
        st->n_facts++;
    }
}

static void add_query(struct kvb_lab_stream *st, int32_t step, int32_t fact, double strength) {
    if (st->n_queries >= LAB_MAX_QUERIES || step < 0 || step >= st->G) return;
    st->queries[st->n_queries++] = (struct lab_query){step, fact, strength};
}

/* Each fact of [f0, f1) queried `per` times at steps in [lo, hi). */
static void schedule(struct kvb_lab_stream *st, uint64_t *rs, int32_t f0, int32_t f1, int32_t per, int32_t lo, int32_t hi,
                     double strength) {
    for (int32_t f = f0; f < f1; f++)
        for (int32_t k = 0; k < per; k++) add_query(st, lo + (int32_t)(unit(rs) * (double)(hi - lo)), f, strength);
}

kvb_status kvb_lab_stream_init(const char *scenario, int32_t prompt, int32_t steps, uint64_t seed, struct kvb_lab_stream **out) {
    if (!out) return kvb_fail(KVB_ERR_INVALID, "lab: out is NULL");
    if (!kvb_lab_scenario_describe(scenario))
        return kvb_fail(KVB_ERR_INVALID, "lab: unknown scenario '%s' (chat, needle, diffuse, drift)", scenario ? scenario : "(null)");
    if (prompt < 64 || prompt > (1 << 20)) return kvb_fail(KVB_ERR_INVALID, "lab: prompt must be in 64..1048576 tokens, got %d", (int)prompt);
    if (steps < 16 || steps > (1 << 20)) return kvb_fail(KVB_ERR_INVALID, "lab: steps must be in 16..1048576, got %d", (int)steps);
    struct kvb_lab_stream *st = kvb_calloc(1, sizeof *st);
    if (!st) return kvb_fail(KVB_ERR_NOMEM, "lab: out of memory");
    snprintf(st->name, sizeof st->name, "%s", scenario);
    st->P = prompt;
    st->G = steps;
    st->seed = seed;
    uint64_t rs = mix64(seed ^ 0x6c6162ull) ^ (uint64_t)strlen(scenario) * 0x100000001b3ull;
    for (const char *p = scenario; *p; p++) rs = mix64(rs ^ (uint64_t)(unsigned char)*p);
    const int32_t P = prompt, G = steps;
    st->obs_window = 32;
    if (!strcmp(scenario, "chat")) {
        st->bg = 0.20; st->rec = 0.45; st->tau = 12; st->sink = 0.35; st->obs_mass = 0.05;
        place_facts(st, &rs, 4, 0, P / 8, 7 * P / 8, 0.004);
        place_facts(st, &rs, 4, 1, P / 8, 7 * P / 8, 0.004);
        schedule(st, &rs, 0, st->n_facts, 2, 0, G, 0.25);
    } else if (!strcmp(scenario, "needle")) {
        st->bg = 0.45; st->rec = 0.35; st->tau = 8; st->sink = 0.20; st->obs_mass = 0.50;
        st->facts[0] = (struct kvb_lab_fact){P / 3, 0};
        st->base[0] = 0.0;
        st->n_facts = 1;
        for (int32_t k = 1; k <= 6; k++) add_query(st, k * G / 7, 0, 0.60);
    } else if (!strcmp(scenario, "diffuse")) {
        st->bg = 0.55; st->rec = 0.40; st->tau = 48; st->sink = 0.05; st->obs_mass = 0.05;
        place_facts(st, &rs, 8, 0, P / 16, 15 * P / 16, 0.001);
        place_facts(st, &rs, 8, 1, P / 16, 15 * P / 16, 0.001);
        schedule(st, &rs, 0, st->n_facts, 2, 0, G, 0.04);
    } else { /* drift */
        st->bg = 0.40; st->rec = 0.35; st->tau = 10; st->sink = 0.25; st->obs_mass = 0.40;
        place_facts(st, &rs, 4, 0, P / 8, 7 * P / 8, 0.0);
        place_facts(st, &rs, 4, 1, P / 8, 7 * P / 8, 0.0005);
        schedule(st, &rs, 0, 4, 2, 0, G / 2, 0.35);
        schedule(st, &rs, 4, 8, 2, G / 2, G, 0.35);
    }
    *out = st;
    return KVB_OK;
}

void kvb_lab_stream_free(struct kvb_lab_stream *st) { kvb_free(st); }
int32_t kvb_lab_prompt_len(const struct kvb_lab_stream *st) { return st->P; }
int32_t kvb_lab_steps(const struct kvb_lab_stream *st) { return st->G; }
int32_t kvb_lab_n_facts(const struct kvb_lab_stream *st) { return st->n_facts; }

struct kvb_lab_fact kvb_lab_fact(const struct kvb_lab_stream *st, int32_t i) {
    struct kvb_lab_fact none = {-1, -1};
    return i >= 0 && i < st->n_facts ? st->facts[i] : none;
}

int32_t kvb_lab_active_facts(const struct kvb_lab_stream *st, int32_t t, int32_t *facts, int32_t max) {
    int32_t n = 0;
    for (int32_t k = 0; k < st->n_queries; k++)
        if (st->queries[k].step == t) {
            bool dup = false;
            for (int32_t i = 0; i < n && i < max; i++) dup |= facts[i] == st->queries[k].fact;
            if (!dup) {
                if (n < max) facts[n] = st->queries[k].fact;
                n++;
            }
        }
    return KVB_MIN(n, max);
}

void kvb_lab_row(const struct kvb_lab_stream *st, int64_t q, double *row) {
    const double n = (double)(q + 1);
    const uint64_t base = mix64(st->seed * 0x2545F4914F6CDD1Dull ^ (uint64_t)q);
    /* background with noise, recency */
    const double decay = exp(-1.0 / st->tau);
    const double rec_norm = (1.0 - pow(decay, n)) / (1.0 - decay);
    for (int64_t i = 0; i <= q; i++) {
        double noise = 0.5 + (double)(mix64(base ^ (uint64_t)i * 0x9E3779B97F4A7C15ull) >> 11) * (1.0 / 9007199254740992.0);
        row[i] = st->bg * noise / n + st->rec * pow(decay, (double)(q - i)) / rec_norm;
    }
    static const double sw[LAB_SINKS] = {0.55, 0.20, 0.15, 0.10};
    int64_t ns = KVB_MIN(q + 1, (int64_t)LAB_SINKS);
    double sws = 0;
    for (int64_t k = 0; k < ns; k++) sws += sw[k];
    for (int64_t k = 0; k < ns; k++) row[k] += st->sink * sw[k] / sws;
    int32_t n_a = 0;
    for (int32_t f = 0; f < st->n_facts; f++) n_a += st->facts[f].group == 0;
    for (int32_t f = 0; f < st->n_facts; f++) {
        int64_t pos = st->facts[f].pos;
        if (pos >= q) continue;
        row[pos] += st->base[f];
        if (q >= st->P - st->obs_window && q < st->P && st->facts[f].group == 0 && n_a) row[pos] += st->obs_mass / n_a;
    }
    if (q >= st->P) {
        int32_t t = (int32_t)(q - st->P);
        for (int32_t k = 0; k < st->n_queries; k++)
            if (st->queries[k].step == t && st->facts[st->queries[k].fact].pos < q) row[st->facts[st->queries[k].fact].pos] += st->queries[k].strength;
    }
    double sum = 0;
    for (int64_t i = 0; i <= q; i++) sum += row[i];
    for (int64_t i = 0; i <= q; i++) row[i] /= sum;
}

void kvb_lab_check_rows(const struct kvb_lab_stream *st, double *max_sum_err, double *min_entry) {
    const int64_t T = (int64_t)st->P + st->G;
    double *row = kvb_malloc(sizeof(double) * (size_t)T);
    double err = 0, mn = INFINITY;
    if (!row) {
        *max_sum_err = INFINITY;
        *min_entry = -INFINITY;
        return;
    }
    for (int64_t q = 0; q < T; q++) {
        kvb_lab_row(st, q, row);
        double s = 0;
        for (int64_t i = 0; i <= q; i++) {
            s += row[i];
            if (row[i] < mn || row[i] != row[i]) mn = row[i] != row[i] ? -INFINITY : row[i];
        }
        if (fabs(s - 1.0) > err || s != s) err = s != s ? INFINITY : fabs(s - 1.0);
    }
    kvb_free(row);
    *max_sum_err = err;
    *min_entry = mn;
}

/* ---- running a policy ---- */

void kvb_lab_result_free(struct kvb_lab_result *r) {
    if (!r) return;
    kvb_free(r->mass);
    kvb_free(r->snap_n);
    kvb_free(r->snap_pos);
    memset(r, 0, sizeof *r);
}

static void positions(const struct kvb_cache *c, int64_t *pos, int32_t n) {
    for (int32_t j = 0; j < n; j++) {
        struct kvb_slot_info si;
        kvb_cache_slot_info(c, 0, 0, j, &si);
        pos[j] = si.pos_original;
    }
}

static bool retained(const int64_t *pos, int32_t n, int64_t p) {
    int32_t lo = 0, hi = n - 1; /* positions are increasing */
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (pos[mid] == p) return true;
        if (pos[mid] < p) lo = mid + 1;
        else hi = mid - 1;
    }
    return false;
}

/* Reversible eviction in the lab: evicted positions in eviction order,
 * grouped into pages of LAB_PAGE (the last one partial, as the cache's
 * staged page). */
#define LAB_PAGE 16
struct lab_cold {
    int64_t *pos; /* [T] */
    int64_t n;
};

/* Appends what left the retained set: before[0..nb) minus after[0..na),
 * both increasing, in increasing position (the cache stages its victims so). */
static void lab_evicted(struct lab_cold *cold, const int64_t *before, int32_t nb, const int64_t *after, int32_t na) {
    for (int32_t i = 0, j = 0; i < nb; i++) {
        while (j < na && after[j] < before[i]) j++;
        if (j < na && after[j] == before[i]) continue;
        cold->pos[cold->n++] = before[i];
    }
}

/* The R cold pages with the largest attention weight on one of their tokens
 * (row: the generator's, the exact page score; the cache estimates it from
 * keys, and the lab has none): their positions into rec[0..), count back. */
static int32_t lab_recall(const struct lab_cold *cold, const double *row, int32_t R, int64_t *rec) {
    const int64_t np = (cold->n + LAB_PAGE - 1) / LAB_PAGE;
    int64_t best[64];
    double bs[64];
    int32_t nb = 0;
    for (int64_t p = 0; p < np; p++) {
        double sc = -1;
        for (int64_t t = p * LAB_PAGE; t < KVB_MIN(cold->n, (p + 1) * LAB_PAGE); t++) sc = row[cold->pos[t]] > sc ? row[cold->pos[t]] : sc;
        int32_t at = nb;
        while (at > 0 && bs[at - 1] < sc) at--;
        if (at >= R) continue;
        if (nb < R) nb++;
        memmove(best + at + 1, best + at, sizeof(int64_t) * (size_t)(nb - 1 - at));
        memmove(bs + at + 1, bs + at, sizeof(double) * (size_t)(nb - 1 - at));
        best[at] = p;
        bs[at] = sc;
    }
    int32_t n = 0;
    for (int32_t i = 0; i < nb; i++)
        for (int64_t t = best[i] * LAB_PAGE; t < KVB_MIN(cold->n, (best[i] + 1) * LAB_PAGE); t++) rec[n++] = cold->pos[t];
    return n;
}

static bool in_list(const int64_t *list, int32_t n, int64_t p) {
    for (int32_t i = 0; i < n; i++)
        if (list[i] == p) return true;
    return false;
}

static kvb_status lab_run(const struct kvb_lab_stream *st, const struct kvb_policy_params *policy, int32_t chunk, int32_t recall_pages,
                          const int32_t *snap_steps, int32_t n_snap, struct kvb_lab_result *out);

kvb_status kvb_lab_run(const struct kvb_lab_stream *st, const struct kvb_policy_params *policy, int32_t chunk,
                       const int32_t *snap_steps, int32_t n_snap, struct kvb_lab_result *out) {
    return lab_run(st, policy, chunk, 0, snap_steps, n_snap, out);
}

kvb_status kvb_lab_run_recall(const struct kvb_lab_stream *st, const struct kvb_policy_params *policy, int32_t chunk, int32_t recall_pages,
                              const int32_t *snap_steps, int32_t n_snap, struct kvb_lab_result *out) {
    if (recall_pages < 1 || recall_pages > KVB_RECALL_MAX_PAGES)
        return kvb_fail(KVB_ERR_INVALID, "lab_run_recall: recall_pages must be in 1..%d, got %d", KVB_RECALL_MAX_PAGES, (int)recall_pages);
    return lab_run(st, policy, chunk, recall_pages, snap_steps, n_snap, out);
}

static kvb_status lab_run(const struct kvb_lab_stream *st, const struct kvb_policy_params *policy, int32_t chunk, int32_t recall_pages,
                          const int32_t *snap_steps, int32_t n_snap, struct kvb_lab_result *out) {
    if (!st || !policy || !out || n_snap < 0 || (n_snap && !snap_steps))
        return kvb_fail(KVB_ERR_INVALID, "lab_run: bad arguments");
    memset(out, 0, sizeof *out);
    const int32_t P = st->P, G = st->G;
    const int64_t T = (int64_t)P + G;
    if (chunk <= 0 || chunk > P) chunk = P;
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.kv.max_distance = (int32_t)KVB_MIN(T, (int64_t)INT32_MAX); /* no RoPE here: the cap changes nothing */
    cp.n_layer = 1;
    cp.n_kv_head = 1;
    cp.head_dim = 4; /* bookkeeping only: rows are zero, the attention comes from the generator */
    cp.kv.kv_dtype = KVB_DTYPE_F32;
    cp.kv.block_size = 16;
    cp.kv.policy = *policy;
    if (kvb_policy_compresses(policy->id) && !policy->decode_budget && policy->budget > 1) {
        /* equal memory in decode: the compressed prompt and the generated
         * tokens share the budget, a quarter of it for generated tokens */
        cp.kv.policy.decode_budget = KVB_MAX(policy->budget / 4, 1);
        cp.kv.policy.budget = policy->budget - cp.kv.policy.decode_budget;
        if (cp.kv.policy.budget <= cp.kv.policy.n_sink) cp.kv.policy.budget = cp.kv.policy.n_sink + 1;
    }
    cp.pool_bytes = (size_t)(T / 16 + 8) * kvb_cache_page_bytes(&cp) + 4096;
    struct kvb_cache *c;
    kvb_status s = kvb_cache_init(NULL, &cp, &c);
    if (s != KVB_OK) return s;
    double *row = kvb_malloc(sizeof(double) * (size_t)T);
    int64_t *pos = kvb_malloc(sizeof(int64_t) * (size_t)T);
    int64_t *after = kvb_malloc(sizeof(int64_t) * (size_t)T);
    int64_t *rec = kvb_malloc(sizeof(int64_t) * (size_t)(KVB_RECALL_MAX_PAGES * LAB_PAGE));
    struct lab_cold cold = {kvb_malloc(sizeof(int64_t) * (size_t)T), 0};
    float *w = kvb_malloc(sizeof(float) * (size_t)T);
    out->mass = kvb_calloc((size_t)G, sizeof(double));
    out->snap_stride = (int32_t)KVB_MIN(T, (int64_t)INT32_MAX);
    out->n_snap = n_snap;
    out->snap_n = kvb_calloc((size_t)KVB_MAX(n_snap, 1), sizeof(int32_t));
    out->snap_pos = kvb_calloc((size_t)KVB_MAX(n_snap, 1) * (size_t)T, sizeof(int64_t));
    if (!row || !pos || !w || !after || !rec || !cold.pos || !out->mass || !out->snap_n || !out->snap_pos) {
        s = kvb_fail(KVB_ERR_NOMEM, "lab_run: out of memory for a stream of %lld tokens", (long long)T);
        goto done;
    }
    const int32_t obs = kvb_cache_prefill_obs_queries(c);
    /* prompt: chunks, each observed with the policy's prefill evidence */
    for (int32_t c0 = 0; c0 < P; c0 += chunk) {
        const int32_t c1 = KVB_MIN(P, c0 + chunk);
        for (int32_t q = c0; q < c1; q++)
            if ((s = kvb_cache_append(c, 0, NULL, NULL)) != KVB_OK) goto done;
        const int32_t n = kvb_cache_n_slots(c, 0, 0);
        out->peak_slots = KVB_MAX(out->peak_slots, n);
        positions(c, pos, n);
        for (int32_t j = 0; j < n; j++) w[j] = 0;
        /* the snapkv family in its exact mode: only the prompt's last obs_window
         * queries vote, wherever the chunks cut (the cache's kvb_cache_prefill
         * records them and votes at compress) */
        const bool exact_vote = kvb_policy_compresses(policy->id) && !policy->prefill_budget;
        if (exact_vote && c1 < P) {
            kvb_cache_evict(c, 0);
            if (recall_pages) { /* what left goes cold */
                const int32_t na = kvb_cache_n_slots(c, 0, 0);
                positions(c, after, na);
                lab_evicted(&cold, pos, n, after, na);
            }
            continue;
        }
        const int32_t from = exact_vote ? KVB_MAX(0, P - obs) : obs > 0 ? KVB_MAX(c0, c1 - obs) : c0;
        for (int32_t q = from; q < c1; q++) {
            kvb_lab_row(st, q, row);
            double z = 0;
            for (int32_t j = 0; j < n && pos[j] <= q; j++) z += row[pos[j]];
            for (int32_t j = 0; j < n && pos[j] <= q; j++) w[j] += (float)(row[pos[j]] / z);
        }
        if ((s = kvb_cache_observe_prefill(c, 0, 0, w, n)) != KVB_OK) goto done;
        kvb_cache_evict(c, 0);
        if (recall_pages) {
            const int32_t na = kvb_cache_n_slots(c, 0, 0);
            positions(c, after, na);
            lab_evicted(&cold, pos, n, after, na);
        }
    }
    if (recall_pages) { /* the compression's victims too */
        const int32_t nb = kvb_cache_n_slots(c, 0, 0);
        positions(c, pos, nb);
        kvb_cache_compress(c, NULL);
        const int32_t na = kvb_cache_n_slots(c, 0, 0);
        positions(c, after, na);
        lab_evicted(&cold, pos, nb, after, na);
    } else {
        kvb_cache_compress(c, NULL);
    }
    /* generation */
    double sum = 0, mn = INFINITY;
    for (int32_t t = 0; t < G; t++) {
        const int64_t q = (int64_t)P + t;
        if ((s = kvb_cache_append(c, 0, NULL, NULL)) != KVB_OK) goto done;
        const int32_t n = kvb_cache_n_slots(c, 0, 0);
        out->peak_slots = KVB_MAX(out->peak_slots, n);
        positions(c, pos, n);
        kvb_lab_row(st, q, row);
        const int32_t nr = recall_pages ? lab_recall(&cold, row, recall_pages, rec) : 0; /* attended besides the slots */
        double R = 0;
        for (int32_t j = 0; j < n; j++) R += row[pos[j]];
        for (int32_t j = 0; j < nr; j++) R += row[rec[j]];
        for (int32_t j = 0; j < n; j++) w[j] = R > 0 ? (float)(row[pos[j]] / R) : 0.0f;
        out->mass[t] = R;
        sum += R;
        mn = R < mn ? R : mn;
        if (!(R >= -1e-12 && R <= 1.0 + 1e-9)) out->mass_out_of_range++;
        int32_t act[LAB_MAX_FACTS];
        int32_t na = kvb_lab_active_facts(st, t, act, LAB_MAX_FACTS);
        for (int32_t k = 0; k < na; k++) {
            const struct kvb_lab_fact f = st->facts[act[k]];
            out->fact_queries[f.group]++;
            out->fact_hits[f.group] += retained(pos, n, f.pos) || in_list(rec, nr, f.pos);
        }
        for (int32_t k = 0; k < n_snap; k++)
            if (snap_steps[k] == t) {
                out->snap_n[k] = n;
                memcpy(out->snap_pos + (size_t)k * out->snap_stride, pos, sizeof(int64_t) * (size_t)n);
            }
        if ((s = kvb_cache_observe(c, 0, 0, w, n)) != KVB_OK) goto done;
        kvb_cache_evict(c, 0);
        if (recall_pages) {
            const int32_t kept = kvb_cache_n_slots(c, 0, 0);
            positions(c, after, kept);
            lab_evicted(&cold, pos, n, after, kept);
        }
        const int32_t budget = kvb_cache_budget(c, 0, 0);
        if (budget > 0 && kvb_cache_n_slots(c, 0, 0) > budget) out->budget_violations++;
    }
    out->mass_mean = sum / G;
    out->mass_min = mn;
done:
    kvb_free(row);
    kvb_free(pos);
    kvb_free(after);
    kvb_free(rec);
    kvb_free(cold.pos);
    kvb_free(w);
    kvb_cache_free(c);
    if (s != KVB_OK) kvb_lab_result_free(out);
    return s;
}
