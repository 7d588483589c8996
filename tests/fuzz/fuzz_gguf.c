/*
 * fuzz_gguf.c — libFuzzer target for the GGUF reader and the model loader
 * behind it: the input is parsed as a GGUF image; if it parses, the
 * vocabulary and hyperparameter getters run on it, and the family loader
 * (family.c: keys, RoPE scaling, YaRN, Gated DeltaNet, short-conv and MTP layers, gemma4's per-layer keys, every tensor bound or refused). Any crash, sanitizer
 * report or allocation beyond the input's size is a finding.
 */
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct gguf_file *f;
    if (kvb_gguf_open_buffer(data, size, "fuzz", &f) != KVB_OK) return 0;
    struct kvb_vocab *v = NULL;
    if (kvb_vocab_from_gguf(f, &v) == KVB_OK) {
        int32_t *ids, n;
        if (kvb_vocab_tokenize(v, "Hello <s> world \xE4\xB8\xAD", 19, true, true, &ids, &n) == KVB_OK) kvb_free(ids);
        kvb_vocab_free(v);
    }
    struct kvb_model *m = kvb_calloc(1, sizeof *m);
    if (m) { /* the family loader on the same file; what it made is freed here (the file is ours) */
        (void)kvb_family_load(f, m);
        kvb_vocab_free(m->vocab);
        kvb_free(m->layers);
        kvb_free(m->owned);
        kvb_free(m->no_rope);
        kvb_free(m->recurrent); /* qwen35's, lfm2's and granitehybrid's layer kinds */
        kvb_free(m->file_layer); /* nemotron_h's blocks */
        kvb_free(m->swa_layers);
        kvb_free(m->swa_mask); /* gemma4's window pattern, KV sources, FFN widths */
        kvb_free(m->kv_source);
        kvb_free(m->n_ff_layer);
        kvb_free(m);
    }
    uint32_t u;
    float x;
    struct gguf_str s;
    kvb_gguf_get_u32(f, "llama.block_count", &u, false);
    kvb_gguf_get_f32(f, "llama.rope.freq_base", &x, false);
    kvb_gguf_get_str(f, "general.architecture", &s, false);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        volatile uint8_t sink = f->tensors[i].nbytes ? f->tensors[i].data[f->tensors[i].nbytes - 1] : 0;
        (void)sink;
    }
    kvb_gguf_close(f);
    return 0;
}
