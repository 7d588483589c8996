/*
 * cold.c — the cold tier's store and its file format (see cold.h), and the
 * checker of cold files (kvb_cold_file_check, public).
 *
 * Host memory holds records in chunks of about 1 MiB whose directory is
 * sized once for mem_bytes; the file tier maps the file in 64 MiB segments,
 * each when its first record is written, from a fixed directory of 16,384
 * segments (1 TiB). Neither directory moves, so readers need no lock.
 */
#define _GNU_SOURCE
#include "cold.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define COLD_MAGIC "KVBCOLD1"
#define COLD_VERSION 1u
#define CHUNK_BYTES ((size_t)1 << 20)
#define SEG_BYTES ((size_t)64 << 20)
#define MAX_SEGS 16384
#define OFF_COMMITTED 64

struct kvb_cold {
    struct kvb_cold_geom g;
    size_t rec_bytes;
    pthread_mutex_t mu;
    /* memory tier */
    int64_t mem_cap, per_chunk, n_chunks, n_mem;
    uint8_t **chunks;
    /* file tier */
    char *dir, *path;
    int fd;
    int64_t per_seg, n_file;
    uint8_t **seg;     /* [MAX_SEGS] first record of each mapped segment */
    void **seg_base;   /* [MAX_SEGS] mapping */
    size_t *seg_len;   /* [MAX_SEGS] */
    /* failures */
    int64_t dropped;
    bool file_failed;
};

size_t kvb_cold_record_bytes(const struct kvb_cold_geom *g) {
    size_t n = KVB_COLD_REC_HEADER + sizeof(int32_t) * (size_t)g->block_size + (size_t)g->block_size * (g->row_bytes + g->row_bytes_v);
    return (n + 7) & ~(size_t)7;
}

/* The file tier's directory (a copy) and segment directories, for a store
 * with no file yet: all or nothing (false: out of memory, c unchanged). */
static bool use_dir(struct kvb_cold *c, const char *dir) {
    const size_t n = strlen(dir) + 1;
    char *d = kvb_malloc(n);
    uint8_t **seg = c->seg ? c->seg : kvb_calloc(MAX_SEGS, sizeof(uint8_t *));
    void **base = c->seg_base ? c->seg_base : kvb_calloc(MAX_SEGS, sizeof(void *));
    size_t *len = c->seg_len ? c->seg_len : kvb_calloc(MAX_SEGS, sizeof(size_t));
    if (!d || !seg || !base || !len) {
        kvb_free(d);
        if (!c->seg) kvb_free(seg);
        if (!c->seg_base) kvb_free(base);
        if (!c->seg_len) kvb_free(len);
        return false;
    }
    memcpy(d, dir, n);
    kvb_free(c->dir);
    c->dir = d;
    c->seg = seg;
    c->seg_base = base;
    c->seg_len = len;
    c->file_failed = false;
    return true;
}

kvb_status kvb_cold_create(const struct kvb_cold_geom *g, size_t mem_bytes, const char *dir, struct kvb_cold **out) {
    if (!g || !out || g->block_size < 1 || g->n_streams < 1) return kvb_fail(KVB_ERR_INVALID, "cold store: bad geometry");
    struct kvb_cold *c = kvb_calloc(1, sizeof *c);
    if (!c) return kvb_fail(KVB_ERR_NOMEM, "cold store: out of memory");
    c->g = *g;
    c->fd = -1;
    c->rec_bytes = kvb_cold_record_bytes(g);
    c->mem_cap = (int64_t)(mem_bytes / c->rec_bytes);
    c->per_chunk = KVB_MAX((int64_t)(CHUNK_BYTES / c->rec_bytes), (int64_t)1);
    c->n_chunks = (c->mem_cap + c->per_chunk - 1) / c->per_chunk;
    c->per_seg = KVB_MAX((int64_t)(SEG_BYTES / c->rec_bytes), (int64_t)1);
    if ((c->n_chunks && !(c->chunks = kvb_calloc((size_t)c->n_chunks, sizeof(uint8_t *)))) || (dir && !use_dir(c, dir))) {
        kvb_free(c->chunks);
        kvb_free(c);
        return kvb_fail(KVB_ERR_NOMEM, "cold store: out of memory");
    }
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return KVB_OK;
}

void kvb_cold_clear(struct kvb_cold *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->n_mem = 0;
    if (c->seg_base)
        for (int i = 0; i < MAX_SEGS; i++)
            if (c->seg_base[i]) {
                munmap(c->seg_base[i], c->seg_len[i]);
                c->seg_base[i] = NULL;
                c->seg[i] = NULL;
            }
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    if (c->path) unlink(c->path);
    kvb_free(c->path);
    c->path = NULL;
    c->n_file = 0;
    c->dropped = 0;
    c->file_failed = false;
    pthread_mutex_unlock(&c->mu);
}

void kvb_cold_free(struct kvb_cold *c) {
    if (!c) return;
    kvb_cold_clear(c); /* unmaps, closes and removes the file */
    for (int64_t i = 0; i < c->n_chunks; i++) kvb_free(c->chunks[i]);
    pthread_mutex_destroy(&c->mu);
    kvb_free(c->chunks); kvb_free(c->dir);
    kvb_free(c->seg); kvb_free(c->seg_base); kvb_free(c->seg_len);
    kvb_free(c);
}

/* ---- the file ---- */

static bool write_all(int fd, const void *buf, size_t n, off_t off) {
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = pwrite(fd, p, n, off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
        off += w;
    }
    return true;
}

static void header_bytes(const struct kvb_cold *c, uint8_t *h) {
    memset(h, 0, KVB_COLD_HEADER_BYTES);
    memcpy(h, COLD_MAGIC, 8);
    const uint32_t u[3] = {COLD_VERSION, KVB_COLD_HEADER_BYTES, 0};
    memcpy(h + 8, u, 8);
    const int32_t gi[5] = {c->g.n_streams, c->g.block_size, c->g.head_dim, (int32_t)c->g.dtype, (int32_t)c->g.dtype_v};
    memcpy(h + 16, gi, sizeof gi);
    const uint32_t r[3] = {(uint32_t)c->g.row_bytes, (uint32_t)c->g.row_bytes_v, (uint32_t)c->rec_bytes};
    memcpy(h + 36, r, sizeof r);
    const uint32_t crc = kvb_crc32(0, h, 48);
    memcpy(h + 48, &crc, 4);
}

/* Creates the file (under the lock). false: logged, file tier off. */
static bool open_file(struct kvb_cold *c) {
    static int64_t serial; /* shared by every store: atomic */
    char *path = kvb_malloc(strlen(c->dir) + 96);
    if (!path) return false;
    int dir_len = (int)strlen(c->dir); /* "dir/" + name: one slash */
    while (dir_len > 1 && c->dir[dir_len - 1] == '/') dir_len--;
    for (int tries = 0; tries < 100; tries++) {
        sprintf(path, "%.*s/kvbound-cold-%ld-%lx-%lld.kvc", dir_len, c->dir, (long)getpid(), (unsigned long)(uintptr_t)c, (long long)__atomic_fetch_add(&serial, 1, __ATOMIC_RELAXED));
        c->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (c->fd >= 0 || errno != EEXIST) break;
    }
    if (c->fd < 0) {
        kvb_logf(KVB_LOG_WARN, "cold tier: cannot create a file under '%s': %s; further evicted pages are forgotten", c->dir, strerror(errno));
        kvb_free(path);
        return false;
    }
    uint8_t *h = kvb_malloc(KVB_COLD_HEADER_BYTES);
    if (!h || (header_bytes(c, h), !write_all(c->fd, h, KVB_COLD_HEADER_BYTES, 0))) {
        kvb_logf(KVB_LOG_WARN, "cold tier: cannot write '%s'; further evicted pages are forgotten", path);
        kvb_free(h);
        close(c->fd);
        c->fd = -1;
        unlink(path);
        kvb_free(path);
        return false;
    }
    kvb_free(h);
    c->path = path;
    return true;
}

/* Maps segment k (records [k * per_seg, (k + 1) * per_seg) of the file). */
static bool map_segment(struct kvb_cold *c, int64_t k) {
    const long pg = sysconf(_SC_PAGESIZE);
    const off_t start = (off_t)KVB_COLD_HEADER_BYTES + (off_t)(k * c->per_seg) * (off_t)c->rec_bytes;
    const off_t aligned = start & ~((off_t)pg - 1);
    const size_t len = (size_t)c->per_seg * c->rec_bytes + (size_t)(start - aligned);
    void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, c->fd, aligned);
    if (p == MAP_FAILED) return false;
    c->seg_base[k] = p;
    c->seg_len[k] = len;
    c->seg[k] = (uint8_t *)p + (start - aligned);
    return true;
}

static bool append_file(struct kvb_cold *c, const uint8_t *rec) {
    if (c->file_failed || !c->dir) return false;
    if (c->fd < 0 && !open_file(c)) {
        c->file_failed = true;
        return false;
    }
    const int64_t i = c->n_file, k = i / c->per_seg;
    if (k >= MAX_SEGS) {
        kvb_logf(KVB_LOG_WARN, "cold tier: '%s' is full (%d segments); further evicted pages are forgotten", c->path, MAX_SEGS);
        c->file_failed = true;
        return false;
    }
    const off_t off = (off_t)KVB_COLD_HEADER_BYTES + (off_t)i * (off_t)c->rec_bytes;
    const uint64_t committed = (uint64_t)i + 1;
    if (!write_all(c->fd, rec, c->rec_bytes, off) || !write_all(c->fd, &committed, 8, OFF_COMMITTED) ||
        (!c->seg[k] && !map_segment(c, k))) {
        kvb_logf(KVB_LOG_WARN, "cold tier: cannot append to '%s': %s; further evicted pages are forgotten", c->path, strerror(errno));
        c->file_failed = true;
        return false;
    }
    c->n_file++;
    return true;
}

/* ---- records ---- */

static uint32_t rec_crc(const uint8_t *rec, size_t n) { return kvb_crc32(kvb_crc32(0, rec, 12), rec + 16, n - 16); }

/* Fills rec's header as page seq of stream with n tokens. */
static void seal(const struct kvb_cold *c, uint8_t *rec, int32_t stream, int32_t n, int64_t seq) {
    const uint64_t sq = (uint64_t)seq, zero = 0;
    memcpy(rec, "KVCP", 4);
    memcpy(rec + 4, &stream, 4);
    memcpy(rec + 8, &n, 4);
    memcpy(rec + 16, &sq, 8);
    memcpy(rec + 24, &zero, 8);
    const uint32_t crc = rec_crc(rec, c->rec_bytes);
    memcpy(rec + 12, &crc, 4);
}

int64_t kvb_cold_append(struct kvb_cold *c, uint8_t *rec, int32_t stream, int32_t n) {
    pthread_mutex_lock(&c->mu);
    int64_t id = -1;
    if (c->n_mem < c->mem_cap) {
        const int64_t ci = c->n_mem / c->per_chunk;
        if (!c->chunks[ci]) c->chunks[ci] = kvb_malloc((size_t)c->per_chunk * c->rec_bytes);
        if (c->chunks[ci]) {
            seal(c, rec, stream, n, c->n_mem);
            memcpy(c->chunks[ci] + (size_t)(c->n_mem % c->per_chunk) * c->rec_bytes, rec, c->rec_bytes);
            id = c->n_mem++;
        } else {
            c->mem_cap = c->n_mem; /* the host has no more: the file from now on */
        }
    }
    if (id < 0) {
        seal(c, rec, stream, n, c->n_file);
        if (append_file(c, rec)) id = KVB_COLD_FILE_ID + c->n_file - 1;
    }
    if (id < 0 && c->dropped++ == 0 && !c->dir)
        kvb_logf(KVB_LOG_WARN, "cold tier: host memory for cold pages is full and no cold directory is set; further evicted pages are forgotten");
    pthread_mutex_unlock(&c->mu);
    return id;
}

kvb_status kvb_cold_set_dir(struct kvb_cold *c, const char *dir) {
    if (!dir || !*dir) return kvb_fail(KVB_ERR_INVALID, "cold tier: the directory must be a non-empty path");
    pthread_mutex_lock(&c->mu);
    kvb_status st = KVB_OK;
    if (c->path) st = kvb_fail(KVB_ERR_INVALID, "cold tier: it already has its file '%s'", c->path);
    else if (!use_dir(c, dir)) st = kvb_fail(KVB_ERR_NOMEM, "cold tier: out of memory");
    pthread_mutex_unlock(&c->mu);
    return st;
}

void kvb_cold_note_dropped(struct kvb_cold *c, int64_t n) {
    pthread_mutex_lock(&c->mu);
    c->dropped += n;
    pthread_mutex_unlock(&c->mu);
}

const uint8_t *kvb_cold_get(const struct kvb_cold *c, int64_t id) {
    if (id < KVB_COLD_FILE_ID) return c->chunks[id / c->per_chunk] + (size_t)(id % c->per_chunk) * c->rec_bytes;
    const int64_t i = id - KVB_COLD_FILE_ID;
    return c->seg[i / c->per_seg] + (size_t)(i % c->per_seg) * c->rec_bytes;
}

void kvb_cold_counts(const struct kvb_cold *c, struct kvb_cold_counts *o) {
    memset(o, 0, sizeof *o);
    if (!c) return;
    pthread_mutex_lock((pthread_mutex_t *)&c->mu);
    o->mem_pages = c->n_mem;
    o->file_pages = c->n_file;
    o->dropped_pages = c->dropped;
    o->mem_bytes = (size_t)c->n_mem * c->rec_bytes;
    o->file_bytes = c->fd >= 0 ? KVB_COLD_HEADER_BYTES + (size_t)c->n_file * c->rec_bytes : 0;
    pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
}

const char *kvb_cold_path(const struct kvb_cold *c) { return c ? c->path : NULL; }

/* ---- checking a file ---- */

kvb_status kvb_cold_file_check(const char *path, struct kvb_cold_file_info *out) {
    if (!path || !out) return kvb_fail(KVB_ERR_INVALID, "cold_file_check: path and out must not be NULL");
    void *map;
    size_t size;
    kvb_status st = kvb_map_file(path, KVB_COLD_HEADER_BYTES, "a cold-tier header", &map, &size);
    if (st != KVB_OK) return st;
    const uint8_t *h = map;
    struct kvb_cold_file_info in;
    memset(&in, 0, sizeof in);
    uint32_t u[3], r[3], crc;
    int32_t gi[5];
    uint64_t committed;
    memcpy(u, h + 8, 8);
    memcpy(gi, h + 16, sizeof gi);
    memcpy(r, h + 36, sizeof r);
    memcpy(&crc, h + 48, 4);
    memcpy(&committed, h + OFF_COMMITTED, 8);
    if (memcmp(h, COLD_MAGIC, 8) != 0) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: not a kvbound cold-tier file (magic)", path); goto done; }
    if (u[0] != COLD_VERSION) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: cold-tier version %u, this build reads %u", path, u[0], COLD_VERSION); goto done; }
    if (u[1] != KVB_COLD_HEADER_BYTES) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: header_bytes %u, expected %u", path, u[1], KVB_COLD_HEADER_BYTES); goto done; }
    if (kvb_crc32(0, h, 48) != crc) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: header checksum mismatch", path); goto done; }
    in.n_streams = gi[0]; in.block_size = gi[1]; in.head_dim = gi[2];
    in.dtype = (enum kvb_dtype)gi[3]; in.dtype_v = (enum kvb_dtype)gi[4];
    if (in.n_streams < 1 || in.n_streams > (1 << 24)) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: n_streams %d out of range", path, (int)in.n_streams); goto done; }
    if (in.block_size < 1 || in.block_size > 4096 || (in.block_size & (in.block_size - 1))) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: block_size %d is not a power of two in 1..4096", path, (int)in.block_size); goto done; }
    if (in.head_dim < 1 || in.head_dim > 512) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: head_dim %d out of range 1..512", path, (int)in.head_dim); goto done; }
    if (gi[3] < KVB_DTYPE_F32 || gi[3] > KVB_DTYPE_BF16 || gi[4] < KVB_DTYPE_F32 || gi[4] > KVB_DTYPE_BF16) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: unknown dtype %d / dtype_v %d", path, (int)gi[3], (int)gi[4]); goto done; }
    struct kvb_cold_geom g = {in.n_streams, in.block_size, in.head_dim, in.dtype, in.dtype_v,
                              kvb_dtype_row_bytes(in.dtype, in.head_dim), kvb_dtype_row_bytes(in.dtype_v, in.head_dim)};
    if (!g.row_bytes || !g.row_bytes_v || r[0] != g.row_bytes || r[1] != g.row_bytes_v) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: row_bytes %u / %u do not match %s / %s rows of %d", path, r[0], r[1], kvb_dtype_name(in.dtype), kvb_dtype_name(in.dtype_v), (int)in.head_dim); goto done; }
    const size_t rb = kvb_cold_record_bytes(&g);
    if (r[2] != rb) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: record_bytes %u, the geometry gives %zu", path, r[2], rb); goto done; }
    const size_t body = size - KVB_COLD_HEADER_BYTES;
    if (committed > body / rb) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: truncated: the header commits %llu pages, the file holds %zu", path, (unsigned long long)committed, body / rb); goto done; }
    in.pages = (int64_t)committed;
    in.tail_bytes = (int64_t)(body - (size_t)committed * rb);
    in.pos_min = INT64_MAX;
    in.pos_max = -1;
    for (uint64_t i = 0; i < committed; i++) {
        const uint8_t *rec = h + KVB_COLD_HEADER_BYTES + (size_t)i * rb;
        int32_t stream, n;
        uint32_t c2;
        uint64_t seq;
        memcpy(&stream, rec + 4, 4); memcpy(&n, rec + 8, 4); memcpy(&c2, rec + 12, 4); memcpy(&seq, rec + 16, 8);
        if (memcmp(rec, "KVCP", 4) != 0 || c2 != rec_crc(rec, rb)) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: page %llu: checksum mismatch", path, (unsigned long long)i); goto done; }
        if (seq != i) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: page %llu: sequence number %llu", path, (unsigned long long)i, (unsigned long long)seq); goto done; }
        if (stream < 0 || stream >= in.n_streams) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: page %llu: stream %d out of range 0..%d", path, (unsigned long long)i, (int)stream, (int)in.n_streams - 1); goto done; }
        if (n < 1 || n > in.block_size) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: page %llu: %d tokens, block_size is %d", path, (unsigned long long)i, (int)n, (int)in.block_size); goto done; }
        for (int32_t t = 0; t < n; t++) {
            int32_t p;
            memcpy(&p, rec + KVB_COLD_REC_HEADER + 4 * (size_t)t, 4);
            if (p < 0) { st = kvb_fail(KVB_ERR_CORRUPT, "%s: page %llu: token %d has position %d", path, (unsigned long long)i, (int)t, (int)p); goto done; }
            in.pos_min = KVB_MIN(in.pos_min, (int64_t)p);
            in.pos_max = KVB_MAX(in.pos_max, (int64_t)p);
        }
        in.tokens += n;
    }
    if (!in.tokens) in.pos_min = -1;
    *out = in;
done:
    kvb_unmap_file(map, size);
    return st;
}
