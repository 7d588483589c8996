/*
 * json_body.c — every JSON request body the server reads, read as exactly
 * one valid JSON value, so that kvbound never sees a different request from
 * the one a gateway in front of it checked (Python, Go and JS parsers
 * refuse what follows, or read it otherwise):
 *   - the body is UTF-8;
 *   - no raw control byte: a string must escape U+0000..U+001F (RFC 8259
 *     7; cJSON would take them, and cut a string at a raw NUL), and only
 *     space, tab, CR and LF are white space between tokens;
 *   - no string escapes U+0000 (\u0000): cJSON keeps strings NUL-ended, so
 *     "demo\u0000x" would be read as "demo";
 *   - nothing but white space follows the top-level value;
 *   - no object names a key twice (cJSON reads the first, the others the
 *     last: a gateway that checks max_tokens or session_id would check
 *     another value than the one kvbound runs).
 * Each is a 400 naming the byte offset, or the key and where it is.
 */
#include "serve.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* The first raw control byte (inside a string, or outside one where it is
 * not JSON's white space: cJSON would skip it) or the first \u0000 escape:
 * its offset, *escaped saying which; -1 for none. */
static long bad_string_byte(const char *body, size_t len, bool *escaped) {
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = (unsigned char)body[i];
        if (!in_str) {
            if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
                *escaped = false;
                return (long)i;
            }
            in_str = c == '"';
            continue;
        }
        if (c < 0x20) {
            *escaped = false;
            return (long)i;
        }
        if (c == '"') {
            in_str = false;
            continue;
        }
        if (c != '\\' || i + 1 >= len) continue;
        if (body[i + 1] == 'u' && i + 5 < len && !memcmp(body + i + 2, "0000", 4)) {
            *escaped = true;
            return (long)i;
        }
        i++; /* the escaped character */
    }
    return -1;
}

static int key_cmp(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* The first key that some object under v names twice, into *dup (NULL:
 * none); false for want of memory. Sorting keeps a 4 MiB object of short
 * keys at n log n; cJSON's nesting limit bounds the recursion. */
static bool duplicate_key(const cJSON *v, const cJSON **dup) {
    if (cJSON_IsObject(v)) {
        const int n = cJSON_GetArraySize(v);
        if (n > 1) {
            const cJSON **keys = malloc(sizeof *keys * (size_t)n);
            if (!keys) return false;
            int k = 0;
            const cJSON *c;
            cJSON_ArrayForEach(c, v) keys[k++] = c;
            qsort(keys, (size_t)n, sizeof *keys, key_cmp);
            for (int i = 1; i < n && !*dup; i++)
                if (!strcmp(keys[i - 1]->string, keys[i]->string)) *dup = keys[i];
            free(keys);
            if (*dup) return true;
        }
    }
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        const cJSON *c;
        cJSON_ArrayForEach(c, v) {
            if (!duplicate_key(c, dup)) return false;
            if (*dup) return true;
        }
    }
    return true;
}

cJSON *serve_json_body(const char *body, size_t len, struct http_resp *r) {
    if (!body) body = "";
    if (!utf8_valid(body, len)) {
        serve_error(r, 400, "invalid_request_error", "the request body is not valid UTF-8");
        return NULL;
    }
    bool escaped = false;
    const long bad = bad_string_byte(body, len, &escaped);
    if (bad >= 0 && escaped) {
        serve_error(r, 400, "invalid_request_error", "a string of the request holds U+0000 (\\u0000, at byte %ld), which kvbound refuses rather than cut the string there", bad);
        return NULL;
    }
    if (bad >= 0) {
        serve_error(r, 400, "invalid_request_error", "the request body is not valid JSON: a raw control byte 0x%02x at byte %ld (in a string, escape it as \\u%04x)",
                    (unsigned)(unsigned char)body[bad], bad, (unsigned)(unsigned char)body[bad]);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        serve_error(r, 400, "invalid_request_error", "the request body is not valid JSON (near byte %ld)", at && at >= body && at <= body + len ? (long)(at - body) : -1L);
        return NULL;
    }
    size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : len;
    while (at < len && (body[at] == ' ' || body[at] == '\t' || body[at] == '\n' || body[at] == '\r')) at++;
    if (at < len) {
        cJSON_Delete(root);
        serve_error(r, 400, "invalid_request_error", "the request body is not one JSON value: bytes follow it at byte %zu", at);
        return NULL;
    }
    const cJSON *dup = NULL;
    if (!duplicate_key(root, &dup)) {
        cJSON_Delete(root);
        serve_error(r, 500, "server_error", "out of memory");
        return NULL;
    }
    if (dup) {
        serve_error(r, 400, "invalid_request_error", "the request body names the key '%.80s' twice in one object; kvbound refuses rather than pick one", dup->string);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}
