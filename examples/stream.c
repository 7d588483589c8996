/*
 * stream.c — generate text from a GGUF (or llama2.c) model with a bounded
 * KV cache: StreamingLLM's sinks + window, so memory stays constant however
 * long it runs. Greedy decoding; prints the text and the cache's size.
 *
 *   cc stream.c $(pkg-config --cflags --libs kvbound) -o stream
 *   ./stream model.gguf "Once upon a time" 200 [tokenizer.bin]
 */
#include <kvbound.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL PROMPT N_TOKENS [TOKENIZER.bin]\n", argv[0]);
        return 2;
    }
    struct kvb_model_params mp = kvb_model_default_params();
    mp.tokenizer_path = argc > 4 ? argv[4] : NULL;
    struct kvb_model *model;
    if (kvb_model_load(argv[1], &mp, &model) != KVB_OK) {
        fprintf(stderr, "%s\n", kvb_last_error());
        return 1;
    }
    struct kvb_context_params cp = kvb_context_default_params();
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_STREAMING); /* 4 sinks */
    cp.kv.policy.budget = 64;                                       /* tokens per (layer, KV head) */
    cp.kv_pool_bytes = 64u << 20;
    struct kvb_context *ctx;
    int32_t *ids, n;
    if (kvb_context_init(model, &cp, &ctx) != KVB_OK ||
        kvb_vocab_tokenize(kvb_model_vocab(model), argv[2], strlen(argv[2]), true, false, &ids, &n) != KVB_OK) {
        fprintf(stderr, "%s\n", kvb_last_error());
        kvb_model_free(model);
        return 1;
    }
    const int32_t V = kvb_vocab_size(kvb_model_vocab(model));
    float *logits = malloc(sizeof(float) * (size_t)V);
    if (!logits || kvb_context_prompt(ctx, ids, n, logits, false) != KVB_OK) {
        fprintf(stderr, "%s\n", logits ? kvb_last_error() : "out of memory");
        return 1;
    }
    kvb_buffer_free(ids);
    printf("%s", argv[2]);
    struct kvb_detok dt = {0};
    char piece[256];
    for (int i = 0, steps = atoi(argv[3]); i < steps; i++) {
        int32_t next = 0;
        for (int32_t v = 1; v < V; v++)
            if (logits[v] > logits[next]) next = v;
        if (next == kvb_vocab_special(kvb_model_vocab(model), KVB_SPECIAL_EOS)) break;
        size_t len = kvb_detok_push(kvb_model_vocab(model), &dt, next, false, piece, sizeof piece);
        if (len <= sizeof piece) fwrite(piece, 1, len, stdout);
        if (kvb_context_eval(ctx, &next, 1, logits, false) != KVB_OK) {
            fprintf(stderr, "\n%s\n", kvb_last_error());
            break;
        }
    }
    fwrite(piece, 1, kvb_detok_flush(&dt, piece, sizeof piece), stdout);
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(kvb_context_cache(ctx), &cs);
    printf("\n[%lld tokens seen, KV %zu bytes, longest stream %d tokens]\n", (long long)kvb_context_n_past(ctx), cs.bytes_used,
           cs.slots_max);
    free(logits);
    kvb_context_free(ctx);
    kvb_model_free(model);
    return 0;
}
