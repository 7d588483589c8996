/*
 * fuzz_serve_request.c — libFuzzer target for `kvbound serve`'s request
 * handling (serve_route and the OpenAI JSON parser behind it), with no
 * socket and no model: the server runs in dry-run mode, where a
 * generation is checked and answered {} instead of queued. Input: byte 0
 * picks the method and path, byte 1 the length of an Authorization
 * header that follows, the rest is the body; bits of byte 1 also send
 * that header's bytes as the Host (0x40), the Origin (0x20), X-Api-Key
 * (0x10) and Idempotency-Key (0x08); with byte 0's 0x80 (the right key)
 * bit 0x04 makes it the second tenant's key, "j" (--api-key-file of two
 * keys: "k" the operator's, "j") (the server checks
 * Host as on loopback without a key, and allows one --cors origin). Every
 * answer must be a status between 200 and 599 with a body (a 204
 * preflight's is empty); a 4xx must carry OpenAI's error object.
 */
#include "serve.h"

#include <stdlib.h>
#include <string.h>

static struct server g_srv;

static void setup(void) {
    if (g_srv.metrics) return;
    g_srv.metrics = metrics_new();
    pthread_mutex_init(&g_srv.mu, NULL);
    struct serve_opts *o = &g_srv.o;
    o->dry_run = true;
    o->model_name = "fuzz";
    o->max_tokens_cap = 4096;
    o->default_max_tokens = 16;
    o->max_budget = 4096;
    o->keep = -1; /* the defaults: n_keep -1, at most 4096 pinned */
    o->keep_max = 4096;
    o->queue_max = 4;
    o->max_body = 1 << 20;
    if (!tenant_one_key(&o->keys, "k") || !tenant_one_key(&o->keys, "j")) abort(); /* two tenants */
    o->api_key = o->keys.key[0];
    o->host = "127.0.0.1";
    o->check_host = true;
    o->cors[0] = "http://a.example";
    o->n_cors = 1;
    o->kv = kvb_kv_default_params();
    o->kv.policy = kvb_policy_default_params(KVB_POLICY_STREAMING);
    o->kv.policy.budget = 256;
    g_srv.mi.n_vocab = 1000;
    g_srv.jinja = true; /* tools, grammars and template variables are checked as with a template */
    g_srv.tmpl_tools = true;
    g_srv.syntax.tools = KVB_TOOLS_HERMES;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const routes[][2] = {
        {"POST", "/v1/chat/completions"}, {"POST", "/v1/completions"}, {"GET", "/v1/models"}, {"GET", "/health"},
        {"GET", "/metrics"}, {"GET", "/v1/sessions/abc"}, {"DELETE", "/v1/sessions/abc"}, {"GET", "/"},
        {"PUT", "/v1/completions"}, {"GET", "/v1/sessions/abc/map"}, {"POST", "/nothing"}, {"GET", "/v1/sessions//x"},
        {"OPTIONS", "/v1/chat/completions"}, {"POST", "/health"}, {"POST", "/tokenize"}, {"POST", "/detokenize"},
        {"GET", "/props"}, {"GET", "/v1/models/fuzz"}, {"GET", "/tokenize"},
        {"POST", "/completion"}, {"POST", "/chat/completions"}, {"POST", "/completions"}, {"GET", "/v1/health"},
    };
    setup();
    if (size < 2) return 0;
    const size_t r = data[0] % (sizeof routes / sizeof routes[0]);
    size_t alen = data[1];
    if (alen > size - 2) alen = size - 2;
    char *auth = malloc(alen + 1);
    memcpy(auth, data + 2, alen);
    auth[alen] = 0;
    const size_t blen = size - 2 - alen;
    char *body = malloc(blen + 1); /* exactly the bytes: an overread is caught by ASan */
    memcpy(body, data + 2 + alen, blen);
    body[blen] = 0;
    struct http_req q = {routes[r][0], routes[r][1], (data[0] & 0x80) ? ((data[1] & 0x04) ? "Bearer j" : "Bearer k") : auth, body, blen, false,
                         (data[1] & 0x40) ? auth : NULL, (data[1] & 0x20) ? auth : NULL, (data[1] & 0x10) ? auth : NULL,
                         (data[1] & 0x08) ? auth : NULL};
    struct http_resp resp;
    serve_route(&g_srv, &q, &resp);
    if (resp.status < 200 || resp.status > 599 || (!resp.body.p && resp.status != 204) || resp.job) abort();
    if (resp.status >= 400 && !strstr(resp.body.p, "\"error\":{\"message\":")) abort();
    http_resp_free(&resp);
    free(body);
    free(auth);
    return 0;
}
