/*
 * tokenize.c — text to token ids and back with the vocabulary of any GGUF
 * (vocab-only files too), ids identical to llama.cpp's.
 *
 *   cc tokenize.c $(pkg-config --cflags --libs kvbound) -o tokenize
 *   ./tokenize model.gguf "Hello world"
 */
#include <kvbound.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL_OR_VOCAB.gguf TEXT\n", argv[0]);
        return 2;
    }
    struct kvb_vocab *vocab;
    int32_t *ids, n;
    if (kvb_vocab_load(argv[1], &vocab) != KVB_OK ||
        kvb_vocab_tokenize(vocab, argv[2], strlen(argv[2]), true, true, &ids, &n) != KVB_OK) {
        fprintf(stderr, "%s\n", kvb_last_error());
        return 1;
    }
    struct kvb_detok dt = {0};
    char piece[256];
    for (int32_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "[", ids[i]);
    printf("]\n");
    for (int32_t i = 0; i < n; i++) {
        size_t len = kvb_detok_push(vocab, &dt, ids[i], false, piece, sizeof piece);
        if (len <= sizeof piece) fwrite(piece, 1, len, stdout);
    }
    fwrite(piece, 1, kvb_detok_flush(&dt, piece, sizeof piece), stdout);
    printf("\n");
    kvb_buffer_free(ids);
    kvb_vocab_free(vocab);
    return 0;
}
