/*
 * tenant.c — who may reuse whose state (docs/SERVING.md, "Tenants").
 *
 * A tenant is an API key: --api-key (or KVB_API_KEY) is one tenant,
 * --api-key-file one per key line, and no key one tenant for everyone.
 * The server never keeps a key where it could be shown: a tenant is known
 * by its digest (SHA-256 of a label and the key), and what one request may
 * reuse of another's (a shared prefix, prefix.c) is keyed by a scope, the
 * digest of the tenant's digest and the request's cache_salt. Sessions keep
 * their tenant's digest (session.c), so another tenant's request finds
 * none. SHA-256 is written here from FIPS 180-4; the program has no crypto
 * library, and the keys must compare in time independent of their bytes
 * (tenant_match compares every key, every byte).
 *
 * This file calls nothing else of serve: it is at the bottom with sbuf.c.
 */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- SHA-256 (FIPS 180-4, section 6.2) ---- */
static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be,
    0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa,
    0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85,
    0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
    0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
    0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int r) { return (x >> r) | (x << (32 - r)); }

static void sha_block(struct serve_sha *c, const unsigned char *p) {
    uint32_t w[64];
    for (int t = 0; t < 16; t++) w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 | (uint32_t)p[4 * t + 2] << 8 | p[4 * t + 3];
    for (int t = 16; t < 64; t++) {
        const uint32_t s0 = ror(w[t - 15], 7) ^ ror(w[t - 15], 18) ^ (w[t - 15] >> 3);
        const uint32_t s1 = ror(w[t - 2], 17) ^ ror(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3], e = c->h[4], f = c->h[5], g = c->h[6], h = c->h[7];
    for (int t = 0; t < 64; t++) {
        const uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K256[t] + w[t];
        const uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
        h = g; g = f; f = e; e = d + t1; d = cc; cc = b; b = a; a = t1 + t2;
    }
    c->h[0] += a; c->h[1] += b; c->h[2] += cc; c->h[3] += d; c->h[4] += e; c->h[5] += f; c->h[6] += g; c->h[7] += h;
}

void serve_sha_init(struct serve_sha *c) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, h0, sizeof h0);
    c->len = 0;
    c->n = 0;
}

void serve_sha_put(struct serve_sha *c, const void *data, size_t n) {
    const unsigned char *p = data;
    c->len += n;
    while (n) {
        size_t take = 64 - c->n;
        if (take > n) take = n;
        memcpy(c->buf + c->n, p, take);
        c->n += take;
        p += take;
        n -= take;
        if (c->n == 64) { sha_block(c, c->buf); c->n = 0; }
    }
}

void serve_sha_end(struct serve_sha *c, unsigned char out[SERVE_DIGEST]) {
    const uint64_t bits = c->len * 8;
    const unsigned char one = 0x80, zero = 0;
    serve_sha_put(c, &one, 1);
    while (c->n != 56) serve_sha_put(c, &zero, 1);
    unsigned char lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (unsigned char)(bits >> (56 - 8 * i));
    serve_sha_put(c, lb, 8);
    for (int i = 0; i < 8; i++)
        for (int k = 0; k < 4; k++) out[4 * i + k] = (unsigned char)(c->h[i] >> (24 - 8 * k));
}

void serve_sha256(const void *data, size_t n, unsigned char out[SERVE_DIGEST]) {
    struct serve_sha c;
    serve_sha_init(&c);
    serve_sha_put(&c, data, n);
    serve_sha_end(&c, out);
}

/* ---- tenants ---- */
static void key_digest(const char *key, unsigned char out[SERVE_DIGEST]) {
    struct serve_sha c;
    serve_sha_init(&c);
    static const char label[] = "kvbound tenant key\n";
    serve_sha_put(&c, label, sizeof label - 1);
    serve_sha_put(&c, key, strlen(key));
    serve_sha_end(&c, out);
}

static bool keys_add(struct serve_keys *k, const char *key) {
    char **kk = realloc(k->key, sizeof *kk * (size_t)(k->n + 1));
    if (!kk) return false;
    k->key = kk;
    unsigned char(*dd)[SERVE_DIGEST] = realloc(k->digest, sizeof *dd * (size_t)(k->n + 1));
    if (!dd) return false;
    k->digest = dd;
    const size_t n = strlen(key) + 1;
    if (!(k->key[k->n] = malloc(n))) return false;
    memcpy(k->key[k->n], key, n);
    key_digest(key, k->digest[k->n]);
    k->n++;
    return true;
}

bool tenant_one_key(struct serve_keys *k, const char *key) { return keys_add(k, key); }

void tenant_keys_free(struct serve_keys *k) {
    for (int i = 0; i < k->n; i++) free(k->key[i]);
    free(k->key);
    free(k->digest);
    memset(k, 0, sizeof *k);
}

bool tenant_parse_keys(char *text, size_t len, struct serve_keys *k, char *err, size_t cap) {
    int *lines = NULL; /* each key's line, for the duplicate's message */
    bool ok = false;
    if (memchr(text, 0, len)) { snprintf(err, cap, "holds a NUL byte"); goto out; }
    int lineno = 0;
    for (char *line = text; line && *line;) {
        lineno++;
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        char *next = nl ? nl + 1 : NULL;
        size_t n = strlen(line);
        while (n && (line[n - 1] == ' ' || line[n - 1] == '\t' || line[n - 1] == '\r')) line[--n] = 0;
        while (*line == ' ' || *line == '\t') line++, n--;
        if (!n || line[0] == '#') { line = next; continue; } /* a blank line, a comment */
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)line[i] <= 0x20 || line[i] == 0x7f) { /* the Authorization header could not carry it */
                snprintf(err, cap, "line %d: a key is visible characters without spaces (comments start a line with #)", lineno);
                goto out;
            }
        for (int i = 0; i < k->n; i++)
            if (!strcmp(k->key[i], line)) { /* never the key itself in the message: it may be in a log */
                snprintf(err, cap, "line %d repeats the key of line %d (each key is one tenant)", lineno, lines[i]);
                goto out;
            }
        int *ll = realloc(lines, sizeof *ll * (size_t)(k->n + 1));
        if (!ll) { snprintf(err, cap, "out of memory"); goto out; }
        lines = ll;
        lines[k->n] = lineno;
        if (!keys_add(k, line)) { snprintf(err, cap, "out of memory"); goto out; }
        line = next;
    }
    if (!k->n) { snprintf(err, cap, "holds no key (one key a line; blank lines and lines starting with # are skipped)"); goto out; }
    ok = true;
out:
    free(lines);
    return ok;
}

/* Whether g is k: every byte of k compared, whatever matches first. */
static bool key_equal(const char *k, const char *g) {
    size_t lk = strlen(k), lg = strlen(g);
    unsigned diff = (unsigned)(lk ^ lg);
    for (size_t i = 0; i < lk; i++) diff |= (unsigned)(k[i] ^ (i < lg ? g[i] : 0));
    return diff == 0;
}

int tenant_match(const struct serve_keys *k, const char *g) {
    int found = -1;
    for (int i = 0; i < k->n; i++) /* every key, the match or not: the time says nothing of which */
        if (key_equal(k->key[i], g) && found < 0) found = i;
    return found;
}

void tenant_scope(const unsigned char tenant[SERVE_DIGEST], const char *salt, unsigned char out[SERVE_DIGEST]) {
    struct serve_sha c;
    serve_sha_init(&c);
    static const char label[] = "kvbound reuse scope\n";
    serve_sha_put(&c, label, sizeof label - 1);
    serve_sha_put(&c, tenant, SERVE_DIGEST);
    const unsigned char given = salt ? 1 : 0; /* no salt is not the salt "" (which is refused anyway) */
    serve_sha_put(&c, &given, 1);
    if (salt) serve_sha_put(&c, salt, strlen(salt));
    serve_sha_end(&c, out);
}

void tenant_session_key(const struct serve_keys *k, int tenant, const char *id, char *out) {
    if (tenant <= 0 || tenant >= k->n) { /* the first tenant's sessions keep the ids they had before tenants */
        snprintf(out, SERVE_SKEY_MAX + 1, "%s", id);
        return;
    }
    char tag[34];
    tag[0] = 't';
    for (int i = 0; i < 16; i++) snprintf(tag + 1 + 2 * i, 3, "%02x", k->digest[tenant][i]);
    snprintf(out, SERVE_SKEY_MAX + 1, "%s:%.*s", tag, SERVE_ID_MAX, id);
}

const char *tenant_public_id(const char *key) {
    const char *c = strchr(key, ':');
    return c ? c + 1 : key;
}
