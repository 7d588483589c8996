/*
 * fuzz_cold_file.c — libFuzzer target for kvb_cold_file_check, the reader of
 * recall's cold-tier files (src/cache/cold.c; untrusted: a file left on disk
 * can be anything). Each input is checked as written to a file, and again
 * re-signed (magic, version, header size and header CRC fixed, every whole
 * record's CRC recomputed) so the fuzzer reaches the geometry, count and
 * per-page checks behind the checksums. A file that passes must account for
 * every byte: header + pages x record bytes + tail = its size.
 */
#include "kvbound.h"
#include "cache/cold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_path[64];

static void check(const uint8_t *data, size_t size) {
    FILE *f = fopen(g_path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    struct kvb_cold_file_info in;
    if (kvb_cold_file_check(g_path, &in) != KVB_OK) return;
    const struct kvb_cold_geom g = {in.n_streams, in.block_size, in.head_dim, in.dtype, in.dtype_v,
                                    kvb_dtype_row_bytes(in.dtype, in.head_dim), kvb_dtype_row_bytes(in.dtype_v, in.head_dim)};
    if (KVB_COLD_HEADER_BYTES + (size_t)in.pages * kvb_cold_record_bytes(&g) + (size_t)in.tail_bytes != size) abort();
    if (in.tokens < in.pages || in.tokens > in.pages * in.block_size) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_path[0]) snprintf(g_path, sizeof g_path, "/tmp/kvb-fuzz-cold-%ld.kvc", (long)getpid());
    if (size > ((size_t)4 << 20)) return 0;
    check(data, size);
    if (size < KVB_COLD_HEADER_BYTES) return 0;
    uint8_t *m = malloc(size);
    if (!m) return 0;
    memcpy(m, data, size);
    memcpy(m, "KVBCOLD1", 8);
    const uint32_t ver = 1, hb = KVB_COLD_HEADER_BYTES;
    memcpy(m + 8, &ver, 4);
    memcpy(m + 12, &hb, 4);
    uint32_t crc = kvb_crc32(0, m, 48);
    memcpy(m + 48, &crc, 4);
    uint32_t rb;
    memcpy(&rb, m + 44, 4);
    if (rb >= 40 && rb <= (1u << 20))
        for (size_t off = KVB_COLD_HEADER_BYTES; off + rb <= size; off += rb) { /* the record format of cold.h */
            memcpy(m + off, "KVCP", 4);
            const uint32_t c = kvb_crc32(kvb_crc32(0, m + off, 12), m + off + 16, rb - 16);
            memcpy(m + off + 12, &c, 4);
        }
    check(m, size);
    free(m);
    return 0;
}
