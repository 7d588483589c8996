/*
 * core.h — private helpers shared by every module: allocation through the
 * replaceable allocator, error recording, logging, f16 conversion, CRC-32.
 *
 * Errors: a failing function calls kvb_fail(status, fmt, ...) which records a
 * thread-local message (kvb_last_error), sends it to the log callback at ERROR
 * level, and returns the status, so the idiom is `return kvb_fail(...)`.
 */
#ifndef KVB_CORE_H
#define KVB_CORE_H

#include "kvbound.h"

#include <stdarg.h>
#include <string.h>

#define KVB_MAX_KV_HEADS 1024 /* most KV heads per layer (kvb_cache_params.n_kv_head) */
#define KVB_MAX_ROW_DIM 576   /* widest K/V row the cache holds (head_dim): 512, or a latent row of 64 rotated dims and a
                                * 512-dim latent (DeepSeek-V3's multi-head latent attention) */

#if defined(__GNUC__)
#define KVB_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define KVB_LIKELY(x) __builtin_expect(!!(x), 1)
#define KVB_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define KVB_PRINTF(a, b)
#define KVB_LIKELY(x) (x)
#define KVB_UNLIKELY(x) (x)
#endif

#define KVB_MIN(a, b) ((a) < (b) ? (a) : (b))
#define KVB_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Allocation: every byte the library holds goes through these. */
void *kvb_malloc(size_t n);
void *kvb_calloc(size_t count, size_t size); /* overflow-checked, zeroed */
void kvb_free(void *p);
/* Grows *p (count elements of elem bytes) to at least need elements. On
 * failure *p and *cap are unchanged and KVB_ERR_NOMEM is returned. */
kvb_status kvb_grow(void **p, int64_t *cap, int64_t need, size_t elem);
/* 64-byte aligned block; free with kvb_aligned_free. */
void *kvb_aligned_alloc(size_t n);
void kvb_aligned_free(void *p);
/* Block aligned to 2 MiB and advised for transparent huge pages where the OS
 * has them (page pools: one TLB entry per 2 MiB instead of per 4 KiB). Free
 * with kvb_aligned_free. */
void *kvb_huge_alloc(size_t n);

/* Maps a regular file read-only (private, never copied). Errors name the
 * file: KVB_ERR_IO (cannot open, not a regular file, cannot map),
 * KVB_ERR_CORRUPT ("too short for <what>" below min_size bytes); *map and
 * *size untouched on failure. Release with kvb_unmap_file. */
kvb_status kvb_map_file(const char *path, size_t min_size, const char *what, void **map, size_t *size);
/* The same contract, but the file is read into anonymous memory advised to
 * transparent huge pages (a model's weights: fewer TLB misses than the page
 * cache's 4 KiB pages; costs the file's size in RSS and a read). Also
 * KVB_ERR_NOMEM (no room), KVB_ERR_IO (a read failed or came up short). */
kvb_status kvb_read_file(const char *path, size_t min_size, const char *what, void **map, size_t *size);
void kvb_unmap_file(void *map, size_t size);

/* Records the message for kvb_last_error, logs it, returns s. */
kvb_status kvb_fail(kvb_status s, const char *fmt, ...) KVB_PRINTF(2, 3);
void kvb_logf(enum kvb_log_level level, const char *fmt, ...) KVB_PRINTF(2, 3);

/* IEEE half <-> single, round to nearest even; exact for every f16. */
static inline float kvb_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400u));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t kvb_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan (keep a quiet nan) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign; /* < 2^-25 rounds to 0 */
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14 + (113 - e) ... so that result = m >> (shift) */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ax - 0x38000000u; /* rebias exponent 127 -> 15 */
    uint32_t lsb = (r >> 13) & 1u;
    r += 0xfffu + lsb;
    return (uint16_t)(sign | (r >> 13));
}

/* CRC-32 (IEEE 802.3, reflected, poly 0xEDB88320), continuable: pass the
 * previous value, starting from 0. */
uint32_t kvb_crc32(uint32_t crc, const void *data, size_t n);

/* Decodes one code point at s[0..n); *len gets its byte length. An invalid
 * or truncated sequence decodes as one byte with the marker value
 * 0x110000 + byte (not a letter, number or space). */
uint32_t kvb_utf8_decode(const uint8_t *s, size_t n, int *len);
/* Writes cp as UTF-8 (1..4 bytes); returns the length. */
int kvb_utf8_encode(uint32_t cp, char *out);

/* The library's one seeded random stream (splitmix64): the next 64 bits,
 * and a uniform double in [0, 1). Reentrant: the caller owns the state. */
static inline uint64_t kvb_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline double kvb_rand_unit(uint64_t *state) { return (double)(kvb_splitmix64(state) >> 11) * (1.0 / 9007199254740992.0); }

/* kvb_threadpool_run for work that threads claim dynamically: fn(ith, nth,
 * arg) runs on the caller (ith 0) and on each worker that comes to the run
 * before the caller's own fn(0, ...) has returned, at most once each; a
 * worker the machine has not scheduled by then is not waited for. nth is the
 * pool's size (so own-share-first schemes keep their layout), but fn must
 * leave every result complete and identical whichever threads come: it
 * claims its work from shared counters, and the caller's call ends only when
 * nothing is left to claim. Returns when every thread that came has left fn. */
void kvb_threadpool_run_shared(struct kvb_threadpool *tp, void (*fn)(int32_t ith, int32_t nth, void *arg), void *arg);

#endif /* KVB_CORE_H */
