/*
 * fuzz_tokenizer_bin.c — libFuzzer target for llama2.c tokenizer.bin
 * parsing and the SentencePiece encoder on the vocabulary it yields. The
 * first byte of the input picks the vocabulary size (3..258).
 */
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int32_t n_vocab = 3 + data[0];
    struct kvb_vocab *v;
    if (kvb_vocab_from_llama2c(data + 1, size - 1, n_vocab, "fuzz", &v) != KVB_OK) return 0;
    int32_t *ids, n;
    const char *text = (const char *)data + 1;
    size_t len = size - 1 < 256 ? size - 1 : 256;
    if (kvb_vocab_tokenize(v, text, len, true, true, &ids, &n) == KVB_OK) {
        char buf[64];
        for (int32_t i = 0; i < n; i++) kvb_vocab_piece(v, ids[i], buf, sizeof buf);
        kvb_free(ids);
    }
    kvb_vocab_free(v);
    return 0;
}
