/*
 * fuzz_cache_image.c — libFuzzer target for kvb_cache_load, the parser of
 * saved cache images (untrusted files). Inputs are tried twice: as given
 * (mostly stopped by the CRC) and re-signed with a valid CRC-32, so the
 * fuzzer reaches the field checks behind it. A loaded cache must be usable:
 * it is saved again and must reload.
 */
#include "kvbound.h"
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

static void try_load(const uint8_t *data, size_t size) {
    struct kvb_cache *c = NULL;
    if (kvb_cache_load(NULL, data, size, (size_t)1 << 24, &c) != KVB_OK) return;
    void *buf;
    size_t len;
    if (kvb_cache_save(c, &buf, &len) == KVB_OK) {
        struct kvb_cache *d = NULL;
        if (kvb_cache_load(NULL, buf, len, (size_t)1 << 24, &d) != KVB_OK) abort(); /* a saved cache must reload */
        kvb_cache_free(d);
        kvb_buffer_free(buf);
    }
    kvb_cache_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    try_load(data, size);
    if (size >= 8 + 4 && size < ((size_t)1 << 20)) {
        uint8_t *m = malloc(size + 4);
        if (!m) return 0;
        memcpy(m, data, size);
        memcpy(m, "KVBCACHE", 8);
        uint32_t crc = kvb_crc32(0, m, size);
        memcpy(m + size, &crc, 4);
        try_load(m, size + 4);
        free(m);
    }
    return 0;
}
