/*
 * fuzz_ruler.c — libFuzzer target for kvb_ruler_corpus_new, the parser of
 * `kvbound ruler`'s sources (a word list, one word a line, and an essay text
 * whose Project Gutenberg markers are cut), and the generators that read
 * them. Byte 0 picks the task, byte 1 the length (64..2104 "tokens", here
 * bytes / 4 + 1) and byte 2 where the rest splits into word list and essay.
 * Besides not crashing: a generated sample fits its length and has answers
 * that are not empty, the same seed gives the same sample, and a refusal
 * leaves nothing allocated.
 */
#include "kvbound.h"

#include <stdlib.h>
#include <string.h>

static int64_t count_bytes(void *ud, const char *context, const char *question, const char *answer_prefix) {
    (void)ud;
    return (int64_t)((strlen(context) + strlen(question) + strlen(answer_prefix)) / 4 + 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    const int32_t task = data[0] % KVB_RULER_TASKS;
    const int64_t length = 64 + 8 * (int64_t)data[1];
    const size_t rest = size - 3, split = rest * data[2] / 255;
    const char *words = (const char *)data + 3, *essay = words + split;
    struct kvb_ruler_corpus *c = NULL;
    if (kvb_ruler_corpus_new(essay, rest - split, words, split, &c) != KVB_OK) return 0;
    struct kvb_ruler_sample s, t;
    if (kvb_ruler_generate(c, task, size, length, count_bytes, NULL, &s) == KVB_OK) {
        if (s.tokens + s.tokens_to_generate > length || s.n_answers <= 0) abort();
        for (int i = 0; i < s.n_answers; i++)
            if (!s.answers[i] || !*s.answers[i]) abort();
        if (kvb_ruler_generate(c, task, size, length, count_bytes, NULL, &t) != KVB_OK) abort();
        if (strcmp(s.context, t.context) || strcmp(s.question, t.question)) abort();
        kvb_ruler_sample_free(&t);
        kvb_ruler_sample_free(&s);
    }
    kvb_ruler_corpus_free(c);
    return 0;
}
