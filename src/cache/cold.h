/*
 * cold.h — the cold tier of a cache with recall: pages of evicted tokens,
 * written once and never changed (append-only), first in host memory up to
 * a byte limit, then in a memory-mapped file under a directory.
 *
 * A cold page is one record of fixed size, laid out as a cache page with a
 * header and the tokens' original positions in front:
 *
 *   "KVCP" u32 stream u32 n u32 crc u64 seq u64 0     (32 bytes)
 *   i32 pos[block_size]
 *   K rows [block_size][row_bytes], V rows [block_size][row_bytes_v]
 *   zero padding to a multiple of 8 bytes
 *
 * n <= block_size tokens are used; crc is the CRC-32 of the record with the
 * crc field skipped; seq is the record's index in its tier. Rows are the
 * stored bytes of the hot page (f16, q8_0, ...), copied, never converted, so
 * a recalled row is bit-identical to the evicted one.
 *
 * The file (one per cache, created on the first spill, removed when the
 * store is freed) starts with a 4096-byte header:
 *
 *   "KVBCOLD1" u32 version(1) u32 header_bytes(4096)
 *   i32 n_streams block_size head_dim dtype dtype_v
 *   u32 row_bytes row_bytes_v record_bytes
 *   u32 crc of bytes [0, 48)                    at 48
 *   u64 committed pages                          at 64
 *
 * A page is appended with one write at header_bytes + seq * record_bytes and
 * only then committed by rewriting the 8-byte count. A writer killed at any
 * point leaves a file whose committed pages are all whole; bytes past them
 * are an uncommitted tail that readers ignore. kvb_cold_file_check verifies
 * a file: header, geometry and every committed page, and refuses a file
 * shorter than its count (truncated) or any page whose checksum, sequence,
 * stream or count is wrong, naming it. No fsync: a crash of the process is
 * covered, a crash of the machine is not.
 *
 * Appends are serialised by a mutex (the cache evicts from several worker
 * threads). Reads take no lock: a page's address never changes once it is
 * appended (memory chunks and file segments sit in fixed directories), and a
 * page is read only by the stream that wrote it. An append that cannot be
 * stored (memory and file full or failing) drops the page and counts it: the
 * cache then forgets those tokens, as it would without recall.
 */
#ifndef KVB_COLD_H
#define KVB_COLD_H

#include "../core/core.h"

#define KVB_COLD_FILE_ID ((int64_t)1 << 40) /* record ids from here on are in the file */
#define KVB_COLD_HEADER_BYTES 4096u
#define KVB_COLD_REC_HEADER 32u

struct kvb_cold_geom {
    int32_t n_streams, block_size, head_dim;
    enum kvb_dtype dtype, dtype_v;
    size_t row_bytes, row_bytes_v;
};

struct kvb_cold;

/* Bytes of one record. */
size_t kvb_cold_record_bytes(const struct kvb_cold_geom *g);
/* Positions and rows of a record (rec points at its first byte). */
static inline int32_t *kvb_cold_rec_pos(uint8_t *rec) { return (int32_t *)(void *)(rec + KVB_COLD_REC_HEADER); }
static inline uint8_t *kvb_cold_rec_k(const struct kvb_cold_geom *g, uint8_t *rec) {
    return rec + KVB_COLD_REC_HEADER + sizeof(int32_t) * (size_t)g->block_size;
}
static inline uint8_t *kvb_cold_rec_v(const struct kvb_cold_geom *g, uint8_t *rec) {
    return kvb_cold_rec_k(g, rec) + (size_t)g->block_size * g->row_bytes;
}

/* A store for records of geometry g: mem_bytes of host memory, then a file
 * under dir (NULL: no file; pages beyond memory are dropped). The file is
 * created when first needed. KVB_ERR_NOMEM, KVB_ERR_INVALID. */
kvb_status kvb_cold_create(const struct kvb_cold_geom *g, size_t mem_bytes, const char *dir, struct kvb_cold **out);
/* Empties the store (memory chunks kept for reuse) and removes its file. */
void kvb_cold_clear(struct kvb_cold *c);
/* Frees the store and removes its file. */
void kvb_cold_free(struct kvb_cold *c);

/* Appends rec (record_bytes, with positions and rows filled) as a page of
 * stream with n tokens: fills the header and stores it. Returns its id, or
 * -1 when it was dropped (counted; the first reason is logged). Thread-safe. */
int64_t kvb_cold_append(struct kvb_cold *c, uint8_t *rec, int32_t stream, int32_t n);
/* The directory for the file from now on, when the store has no file yet
 * (a restored cache's store starts with none). KVB_ERR_INVALID, KVB_ERR_NOMEM;
 * the store is unchanged on failure. */
kvb_status kvb_cold_set_dir(struct kvb_cold *c, const char *dir);
/* Counts n pages as dropped (a restored image's count). */
void kvb_cold_note_dropped(struct kvb_cold *c, int64_t n);
/* The stored record id (valid while the store lives). */
const uint8_t *kvb_cold_get(const struct kvb_cold *c, int64_t id);

struct kvb_cold_counts {
    int64_t mem_pages, file_pages, dropped_pages;
    size_t mem_bytes, file_bytes; /* records held: pages * record_bytes (file: plus its header) */
};
void kvb_cold_counts(const struct kvb_cold *c, struct kvb_cold_counts *out);
/* The file's path, or NULL before the first spill. */
const char *kvb_cold_path(const struct kvb_cold *c);

#endif /* KVB_COLD_H */
