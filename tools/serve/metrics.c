/*
 * metrics.c — GET /metrics in Prometheus text format: counters, gauges
 * from the scheduler, and histograms of time to first token and
 * inter-token latency. Counters are updated from the scheduler thread and
 * read by connection threads, under the metrics' own mutex.
 */
#include "serve.h"

#include <stdlib.h>

static const double k_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
#define N_BOUNDS (sizeof k_bounds / sizeof k_bounds[0])

struct hist {
    int64_t bucket[N_BOUNDS + 1];
    int64_t count;
    double sum;
};

struct metrics {
    pthread_mutex_t mu;
    int64_t prefill_tokens, decode_tokens, requests_ok, requests_failed;
    int64_t implicit_hits, implicit_misses, implicit_reused, checkpoints_stored;
    double prefill_rate, decode_rate;
    struct hist ttft, itl;
};

struct metrics *metrics_new(void) {
    struct metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void metrics_free(struct metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static void observe(struct hist *h, double v) {
    size_t i = 0;
    while (i < N_BOUNDS && v > k_bounds[i]) i++;
    h->bucket[i]++;
    h->count++;
    h->sum += v;
}

void metrics_token(struct metrics *m, bool first, double seconds) {
    pthread_mutex_lock(&m->mu);
    observe(first ? &m->ttft : &m->itl, seconds);
    pthread_mutex_unlock(&m->mu);
}

void metrics_count(struct metrics *m, int64_t prefill, int64_t decode, int64_t ok, int64_t failed) {
    pthread_mutex_lock(&m->mu);
    m->prefill_tokens += prefill;
    m->decode_tokens += decode;
    m->requests_ok += ok;
    m->requests_failed += failed;
    pthread_mutex_unlock(&m->mu);
}

void metrics_implicit(struct metrics *m, int hits, int misses, int64_t reused, int stored) {
    pthread_mutex_lock(&m->mu);
    m->implicit_hits += hits;
    m->implicit_misses += misses;
    m->implicit_reused += reused;
    m->checkpoints_stored += stored;
    pthread_mutex_unlock(&m->mu);
}

void metrics_rate(struct metrics *m, double prefill, double decode) {
    pthread_mutex_lock(&m->mu);
    m->prefill_rate = prefill;
    m->decode_rate = decode;
    pthread_mutex_unlock(&m->mu);
}

static void render_hist(struct kvb_str *o, const char *name, const char *help, const struct hist *h) {
    kvb_str_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    int64_t cum = 0;
    for (size_t i = 0; i < N_BOUNDS; i++) {
        cum += h->bucket[i];
        kvb_str_printf(o, "%s_bucket{le=\"%g\"} %lld\n", name, k_bounds[i], (long long)cum);
    }
    cum += h->bucket[N_BOUNDS];
    kvb_str_printf(o, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %.6f\n%s_count %lld\n", name, (long long)cum, name, h->sum, name, (long long)h->count);
}

#define GAUGE(name, help, v) kvb_str_printf(o, "# HELP " name " " help "\n# TYPE " name " gauge\n" name " %lld\n", (long long)(v))
#define COUNTER(name, help, v) kvb_str_printf(o, "# HELP " name " " help "\n# TYPE " name " counter\n" name " %lld\n", (long long)(v))

void metrics_render(struct metrics *m, const struct sched_gauges *g, struct kvb_str *o) {
    pthread_mutex_lock(&m->mu);
    GAUGE("kvbound_pool_pages_used", "Pages of the KV pool in use.", g->pages_used);
    GAUGE("kvbound_pool_pages_free", "Pages of the KV pool free.", g->pages_free);
    GAUGE("kvbound_pool_bytes_used", "Bytes of the KV pool in use.", g->pages_used * g->page_bytes);
    GAUGE("kvbound_pool_bytes_free", "Bytes of the KV pool free.", g->pages_free * g->page_bytes);
    GAUGE("kvbound_pool_pages_shared", "Pages of the KV pool in use held by more than one sequence (shared prefixes), each counted once in pages_used.", g->pages_shared);
    GAUGE("kvbound_prefixes", "Shared prefixes kept (--prefix-cache).", g->prefixes);
    COUNTER("kvbound_prefix_hits_total", "Turns that forked a shared prefix instead of reading it.", g->prefix_hits);
    COUNTER("kvbound_prefix_tokens_reused_total", "Prompt tokens those turns did not read.", g->prefix_tokens_reused);
    COUNTER("kvbound_implicit_hits_total", "Stateless turns (no session_id) that resumed a checkpoint of their conversation.", m->implicit_hits);
    COUNTER("kvbound_implicit_misses_total", "Stateless turns that found no checkpoint and read their whole prompt.", m->implicit_misses);
    COUNTER("kvbound_implicit_tokens_reused_total", "Conversation tokens the resumed turns did not read again.", m->implicit_reused);
    COUNTER("kvbound_checkpoints_stored_total", "Checkpoints stored at turn ends (implicit sessions).", m->checkpoints_stored);
    GAUGE("kvbound_checkpoints", "Checkpoints in the session store (-1: not counted yet).", g->checkpoints);
    GAUGE("kvbound_checkpoint_bytes", "Their bytes (-1: not counted yet).", g->checkpoint_bytes);
    GAUGE("kvbound_sessions_active", "Requests generating now.", g->active);
    GAUGE("kvbound_sessions_queued", "Requests waiting for room.", g->queued);
    GAUGE("kvbound_sessions_in_memory", "Sessions whose cache is in the pool.", g->in_memory);
    GAUGE("kvbound_sessions_persisted", "Sessions in the session store.", g->persisted);
    GAUGE("kvbound_session_records", "Sessions the server keeps a record of: in memory or in a turn (bounded by --max-sessions and --parallel).", g->records);
    GAUGE("kvbound_store_requests_pending", "Session-store reads, writes and deletes not yet done by the store worker.", g->store_pending);
    GAUGE("kvbound_connections_open", "HTTP connections open.", g->conn_open);
    COUNTER("kvbound_connections_refused_total", "Connections refused at once (--max-connections, --max-connections-per-ip).", g->conn_refused);
    COUNTER("kvbound_connections_timed_out_total", "Connections closed for not sending a whole request in --request-timeout.", g->conn_timed_out);
    COUNTER("kvbound_sessions_offloaded_total", "Idle sessions whose pages were returned to the pool.", g->evictions_idle);
    COUNTER("kvbound_tokens_generated_total", "Tokens generated (decode steps).", m->decode_tokens);
    COUNTER("kvbound_tokens_prefill_total", "Prompt tokens read.", m->prefill_tokens);
    COUNTER("kvbound_requests_total", "Generations that finished.", m->requests_ok);
    COUNTER("kvbound_requests_failed_total", "Generations that failed or were cancelled.", m->requests_failed);
    kvb_str_printf(o, "# HELP kvbound_prefill_tokens_per_second Prompt tokens per second of prefill steps.\n# TYPE kvbound_prefill_tokens_per_second gauge\n"
                 "kvbound_prefill_tokens_per_second %.3f\n", m->prefill_rate);
    kvb_str_printf(o, "# HELP kvbound_decode_tokens_per_second Generated tokens per second of decode steps.\n# TYPE kvbound_decode_tokens_per_second gauge\n"
                 "kvbound_decode_tokens_per_second %.3f\n", m->decode_rate);
    render_hist(o, "kvbound_time_to_first_token_seconds", "From request to its first generated token.", &m->ttft);
    render_hist(o, "kvbound_inter_token_latency_seconds", "Between consecutive generated tokens of a request.", &m->itl);
    pthread_mutex_unlock(&m->mu);
}
