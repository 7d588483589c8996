/*
 * fuzz_session_image.c — libFuzzer target for kvb_batch_seq_load, the
 * parser of session images (what `kvbound serve` keeps in SQLite or
 * Redis, untrusted once stored). The model is a small GGUF named by
 * KVB_FUZZ_MODEL (default build-fuzz/tiny.gguf; .ci/run writes it with
 * kvbound mkmodel). Inputs are tried as given and re-signed with a valid
 * CRC-32, so the fuzzer reaches the checks behind it; a loaded session
 * must save again, reload, and give back every page when removed.
 */
#include "kvbound.h"
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct kvb_model *g_model, *g_hybrid;
static struct kvb_batch *g_batch, *g_hbatch;

static int setup(void) {
    if (g_batch) return 1;
    const char *path = getenv("KVB_FUZZ_MODEL");
    struct kvb_model_params mp = kvb_model_default_params();
    if (kvb_model_load(path ? path : "build-fuzz/tiny.gguf", &mp, &g_model) != KVB_OK) {
        fprintf(stderr, "fuzz_session_image: %s (set KVB_FUZZ_MODEL)\n", kvb_last_error());
        abort();
    }
    struct kvb_batch_params bp = kvb_batch_default_params();
    bp.kv_pool_bytes = (size_t)8 << 20;
    bp.max_seqs = 4;
    const char *hy = getenv("KVB_FUZZ_MODEL_HYBRID");
    if (hy && *hy) {
        if (kvb_model_load(hy, &mp, &g_hybrid) != KVB_OK || kvb_batch_init(g_hybrid, &bp, &g_hbatch) != KVB_OK) {
            fprintf(stderr, "fuzz_session_image: KVB_FUZZ_MODEL_HYBRID: %s\n", kvb_last_error());
            abort();
        }
    }
    return kvb_batch_init(g_model, &bp, &g_batch) == KVB_OK;
}

static void try_load_on(struct kvb_batch *b, const uint8_t *data, size_t size) {
    struct kvb_seq_params sp = kvb_seq_default_params();
    int32_t id;
    if (kvb_batch_seq_load(b, &sp, data, size, &id) != KVB_OK) return;
    void *buf;
    size_t len;
    if (kvb_batch_seq_save(b, id, &buf, &len) != KVB_OK) abort();
    if (kvb_batch_remove(b, id) != KVB_OK) abort();
    if (kvb_batch_seq_load(b, &sp, buf, len, &id) != KVB_OK) abort(); /* a saved session must reload */
    kvb_buffer_free(buf);
    kvb_batch_remove(b, id);
    struct kvb_batch_stats bs;
    kvb_batch_get_stats(b, &bs);
    if (bs.pool_bytes_in_use != 0 || bs.n_seqs != 0) abort();
}

static void try_load(const uint8_t *data, size_t size) {
    try_load_on(g_batch, data, size);
    if (g_hbatch) try_load_on(g_hbatch, data, size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!setup()) abort();
    try_load(data, size);
    if (size >= 4) {
        uint8_t *d = malloc(size);
        memcpy(d, data, size);
        const uint32_t crc = kvb_crc32(0, d, size - 4);
        memcpy(d + size - 4, &crc, 4);
        try_load(d, size);
        free(d);
    }
    return 0;
}
