/*
 * lookup.c — what the encoders (spm.c, bpe.c) and the tokenizing fronts
 * (vocab.c, plain.c) take from a vocabulary: a piece's id, through the
 * open-addressing hash that vocab.c fills once at load (kvb_vocab_index),
 * and the id list they emit into. Below every other file of the folder but
 * the Unicode tables; it calls none of them, so the fronts call the encoders
 * and the encoders call this, one way.
 */
#include "tokenizer.h"

int32_t kvb_vocab_find(const struct kvb_vocab *v, const char *text, size_t len) {
    uint32_t m = v->hash_cap - 1;
    for (uint32_t h = kvb_fnv1a(text, len) & m;; h = (h + 1) & m) {
        int32_t id = v->hash[h];
        if (id < 0) return -1;
        if (kvb_vocab_len(v, id) == len && memcmp(kvb_vocab_text(v, id), text, len) == 0) return id;
    }
}

void kvb_vocab_index(struct kvb_vocab *v, int32_t id) {
    const char *t = kvb_vocab_text(v, id);
    const uint32_t len = kvb_vocab_len(v, id);
    if (kvb_vocab_find(v, t, len) >= 0) return; /* first occurrence wins */
    uint32_t m = v->hash_cap - 1, h = kvb_fnv1a(t, len) & m;
    while (v->hash[h] >= 0) h = (h + 1) & m;
    v->hash[h] = id;
}

void kvb_tok_emit(struct kvb_tok_out *o, int32_t id) {
    if (o->oom) return;
    if (o->n == o->cap && /* the call only when full: this runs once per token */
        kvb_grow((void **)&o->ids, &o->cap, (int64_t)o->n + 1, sizeof(int32_t)) != KVB_OK) {
        o->oom = true;
        return;
    }
    o->ids[o->n++] = id;
}
