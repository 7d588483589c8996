/*
 * core.c — status strings, the thread-local last error, the log callback and
 * the replaceable allocator. Nothing here prints: messages go to the callback.
 */
#define _DEFAULT_SOURCE /* madvise(MADV_HUGEPAGE) */
#include "core.h"

#include <pthread.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static kvb_log_fn g_log_fn;
static void *g_log_user;
static struct kvb_allocator g_alloc;
static bool g_alloc_custom;
static _Thread_local char t_last_error[512];

const char *kvb_status_str(kvb_status s) {
    switch (s) {
    case KVB_FALLBACK: return "ok (fallback)";
    case KVB_OK: return "ok";
    case KVB_ERR_NOMEM: return "out of memory";
    case KVB_ERR_IO: return "i/o error";
    case KVB_ERR_CORRUPT: return "corrupt input";
    case KVB_ERR_INVALID: return "invalid argument";
    case KVB_ERR_UNSUPPORTED: return "unsupported";
    }
    return "unknown status";
}

const char *kvb_last_error(void) { return t_last_error; }

void kvb_log_set(kvb_log_fn fn, void *user) {
    g_log_fn = fn;
    g_log_user = user;
}

static void vlog(enum kvb_log_level level, const char *fmt, va_list ap, char *buf, size_t n) {
    vsnprintf(buf, n, fmt, ap);
    if (g_log_fn) g_log_fn(level, buf, g_log_user);
}

void kvb_logf(enum kvb_log_level level, const char *fmt, ...) {
    if (!g_log_fn) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap, buf, sizeof buf);
    va_end(ap);
}

kvb_status kvb_fail(kvb_status s, const char *fmt, ...) {
    char buf[sizeof t_last_error]; /* formatted apart: an argument may be kvb_last_error() itself */
    va_list ap;
    va_start(ap, fmt);
    vlog(KVB_LOG_ERROR, fmt, ap, buf, sizeof buf);
    va_end(ap);
    memcpy(t_last_error, buf, strlen(buf) + 1);
    return s;
}

void kvb_allocator_set(const struct kvb_allocator *a) {
    if (a && a->malloc_fn && a->free_fn) {
        g_alloc = *a;
        g_alloc_custom = true;
    } else {
        g_alloc_custom = false;
    }
}

void *kvb_malloc(size_t n) {
    if (n == 0) n = 1;
    return g_alloc_custom ? g_alloc.malloc_fn(n, g_alloc.user) : malloc(n);
}

void kvb_free(void *p) {
    if (!p) return;
    if (g_alloc_custom) g_alloc.free_fn(p, g_alloc.user);
    else free(p);
}

/* The public release of every buffer the library hands out (images,
 * token arrays, formatted text): core, so that no module reaches into
 * another to free what it was given. */
void kvb_buffer_free(void *buf) { kvb_free(buf); }

void *kvb_calloc(size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) return NULL;
    void *p = kvb_malloc(count * size);
    if (p) memset(p, 0, count * size);
    return p;
}

kvb_status kvb_grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return KVB_OK;
    int64_t ncap = *cap ? *cap : 16;
    while (ncap < need) ncap *= 2;
    if ((uint64_t)ncap > SIZE_MAX / elem) return KVB_ERR_NOMEM;
    void *np = kvb_malloc((size_t)ncap * elem);
    if (!np) return KVB_ERR_NOMEM;
    if (*p && *cap) memcpy(np, *p, (size_t)*cap * elem);
    memset((char *)np + (size_t)*cap * elem, 0, (size_t)(ncap - *cap) * elem);
    kvb_free(*p);
    *p = np;
    *cap = ncap;
    return KVB_OK;
}

static void *aligned_alloc_to(size_t n, size_t align) {
    if (n > SIZE_MAX - align - sizeof(void *)) return NULL;
    char *raw = kvb_malloc(n + align + sizeof(void *));
    if (!raw) return NULL;
    uintptr_t a = ((uintptr_t)(raw + sizeof(void *)) + align - 1) & ~(uintptr_t)(align - 1);
    ((void **)a)[-1] = raw;
    return (void *)a;
}

void *kvb_aligned_alloc(size_t n) { return aligned_alloc_to(n, 64); }

#define HUGE_PAGE ((size_t)2 << 20)

void *kvb_huge_alloc(size_t n) {
    if (n < HUGE_PAGE) return aligned_alloc_to(n, 64);
    void *p = aligned_alloc_to(n, HUGE_PAGE);
#if defined(MADV_HUGEPAGE)
    if (p) madvise(p, n & ~(HUGE_PAGE - 1), MADV_HUGEPAGE); /* advice only: failure is harmless */
#endif
    return p;
}

void kvb_aligned_free(void *p) {
    if (p) kvb_free(((void **)p)[-1]);
}

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

const char *kvb_version(void) { return KVB_VERSION_STRING; }

size_t kvb_abi_sizeof(const char *name) {
    static const struct {
        const char *name;
        size_t size;
    } sizes[] = {
        {"kvb_rope", sizeof(struct kvb_rope)},
        {"kvb_policy_params", sizeof(struct kvb_policy_params)},
        {"kvb_kv_params", sizeof(struct kvb_kv_params)},
        {"kvb_cache_params", sizeof(struct kvb_cache_params)},
        {"kvb_cache_stats", sizeof(struct kvb_cache_stats)},
        {"kvb_slot_info", sizeof(struct kvb_slot_info)},
        {"kvb_model_params", sizeof(struct kvb_model_params)},
        {"kvb_model_info", sizeof(struct kvb_model_info)},
        {"kvb_context_params", sizeof(struct kvb_context_params)},
        {"kvb_sampler_params", sizeof(struct kvb_sampler_params)},
        {"kvb_ppl_params", sizeof(struct kvb_ppl_params)},
        {"kvb_ppl_result", sizeof(struct kvb_ppl_result)},
        {"kvb_detok", sizeof(struct kvb_detok)},
        {"kvb_chat_apply_params", sizeof(struct kvb_chat_apply_params)},
        {"kvb_str", sizeof(struct kvb_str)},
    };
    for (size_t i = 0; name && i < sizeof sizes / sizeof sizes[0]; i++)
        if (!strcmp(name, sizes[i].name)) return sizes[i].size;
    return 0;
}

uint32_t kvb_crc32(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc_once, crc_init); /* the table is built once, before any thread reads it */
    const uint8_t *b = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ b[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

const char *kvb_dtype_name(enum kvb_dtype t) {
    switch (t) {
    case KVB_DTYPE_AS_K: return "as-k";
    case KVB_DTYPE_F32: return "f32";
    case KVB_DTYPE_F16: return "f16";
    case KVB_DTYPE_Q8_0: return "q8_0";
    case KVB_DTYPE_Q4_0: return "q4_0";
    case KVB_DTYPE_BF16: return "bf16";
    }
    return "?";
}

kvb_status kvb_dtype_from_name(const char *name, enum kvb_dtype *out) {
    static const enum kvb_dtype all[] = {KVB_DTYPE_F32, KVB_DTYPE_F16, KVB_DTYPE_BF16, KVB_DTYPE_Q8_0, KVB_DTYPE_Q4_0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (name && strcmp(name, kvb_dtype_name(all[i])) == 0) {
            *out = all[i];
            return KVB_OK;
        }
    return kvb_fail(KVB_ERR_INVALID, "unknown dtype '%s' (expected f32, f16, bf16, q8_0 or q4_0)", name ? name : "(null)");
}

size_t kvb_dtype_row_bytes(enum kvb_dtype t, int32_t n) {
    if (n <= 0) return 0;
    switch (t) {
    case KVB_DTYPE_F32: return (size_t)n * 4;
    case KVB_DTYPE_F16: case KVB_DTYPE_BF16: return (size_t)n * 2;
    case KVB_DTYPE_Q8_0: return n % 32 ? 0 : (size_t)(n / 32) * 34;
    case KVB_DTYPE_Q4_0: return n % 32 ? 0 : (size_t)(n / 32) * 18;
    case KVB_DTYPE_AS_K: return 0;
    }
    return 0;
}

const char *kvb_pos_mode_name(enum kvb_pos_mode m) {
    switch (m) {
    case KVB_POS_POLICY_DEFAULT: return "policy-default";
    case KVB_POS_ORIGINAL: return "original";
    case KVB_POS_CONTIGUOUS: return "contiguous";
    case KVB_POS_CAPPED: return "capped";
    }
    return "?";
}

/* Opens path as a regular file of at least min_size bytes: the descriptor
 * and size, or a named error. */
static kvb_status open_sized(const char *path, size_t min_size, const char *what, int *fd_out, size_t *size) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return kvb_fail(KVB_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return kvb_fail(KVB_ERR_IO, "'%s' is not a regular file", path);
    }
    const size_t n = (size_t)sb.st_size;
    if (n < min_size) {
        close(fd);
        return kvb_fail(KVB_ERR_CORRUPT, "%s: too short for %s (%zu bytes)", path, what, n);
    }
    *fd_out = fd;
    *size = n;
    return KVB_OK;
}

kvb_status kvb_map_file(const char *path, size_t min_size, const char *what, void **map, size_t *size) {
    int fd = -1;
    size_t n = 0;
    kvb_status st = open_sized(path, min_size, what, &fd, &n);
    if (st != KVB_OK) return st;
    void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return kvb_fail(KVB_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
    *map = p;
    *size = n;
    return KVB_OK;
}

kvb_status kvb_read_file(const char *path, size_t min_size, const char *what, void **map, size_t *size) {
    int fd = -1;
    size_t n = 0;
    kvb_status st = open_sized(path, min_size, what, &fd, &n);
    if (st != KVB_OK) return st;
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        const int err = errno;
        close(fd);
        return kvb_fail(KVB_ERR_NOMEM, "cannot allocate %zu bytes to read '%s' into: %s", n, path, strerror(err));
    }
#if defined(MADV_HUGEPAGE)
    (void)madvise(p, n, MADV_HUGEPAGE); /* advice only: without it, 4 KiB pages */
#endif
    for (size_t off = 0; off < n;) {
        const ssize_t r = pread(fd, (char *)p + off, KVB_MIN(n - off, (size_t)1 << 30), (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            const int err = errno;
            munmap(p, n);
            close(fd);
            return r == 0 ? kvb_fail(KVB_ERR_IO, "cannot read '%s': it ended at byte %zu of %zu (changed while reading?)", path, off, n)
                          : kvb_fail(KVB_ERR_IO, "cannot read '%s' at byte %zu: %s", path, off, strerror(err));
        }
        off += (size_t)r;
    }
    close(fd);
    (void)mprotect(p, n, PROT_READ); /* read-only, as a mapping of the file would be */
    *map = p;
    *size = n;
    return KVB_OK;
}

void kvb_unmap_file(void *map, size_t size) {
    if (map) munmap(map, size);
}
