/*
 * fuzz_tokenize.c — libFuzzer target for the encoders on real vocabularies
 * (../shared/data/tokenizers, or $KVB_SHARED_DATA/tokenizers): random bytes,
 * invalid UTF-8, special-token texts, long inputs. Each byte-level BPE
 * pre-tokenizer that none of those files uses (default, dbrx, gpt-4o,
 * tekken, ...) runs on a further copy of the GPT-2 vocabulary set to it, with
 * that pre type's flags, except gemma4 (▁ for spaces, raw UTF-8, <0xNN>
 * bytes: no byte-level vocabulary's), which runs on the tests' synthetic
 * gemma4 vocabulary (tokenizer_gemma4_vocab.h), written to a temporary file
 * and loaded, shared data or not. There the round trip holds up to "▁" and
 * ' ' (a literal "▁" reads back as a space, and a merged "▁" symbol that is
 * no token falls back to its bytes), for well-formed UTF-8. The first byte picks the vocabulary and the
 * add_special / parse_special flags; the rest is the text. Besides not crashing, every result must decode back to the text
 * exactly (SentencePiece: after its added leading space) when special
 * parsing is off — the round-trip property the tests check on books —
 * unless the text holds a byte the vocabulary cannot represent or, for
 * SentencePiece, a literal "▁" (which decodes as a space by design). With
 * parse_special, the text marked by kvb_vocab_mark_plain must give through
 * kvb_vocab_tokenize_marked exactly the ids of the text without it.
 */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "../tokenizer_gemma4_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *const k_files[] = {
    "llama3/llama3-8b-instruct.vocab.gguf", "qwen2.5/qwen2.5-0.5b-instruct.vocab.gguf", "smollm2/smollm2-135m-instruct.vocab.gguf",
    "gpt2/ggml-vocab-gpt-2.gguf",          "llama2/ggml-vocab-llama-spm.gguf",          "mistral-v0.3/mistral-7b-instruct-v0.3.vocab.gguf",
};
enum { N_FILES = sizeof k_files / sizeof *k_files, N_VOCABS = N_FILES + KVB_PRE_COUNT };
static struct kvb_vocab *g_vocab[N_VOCABS];
static int g_n;
static bool g_has_byte[N_VOCABS][256]; /* some vocabularies (SmolLM2) lack bytes that never occur in UTF-8 */

static void note_bytes(int k) {
    for (int b = 0; b < 256; b++) {
        char t[4];
        int l = kvb_utf8_encode(kvb_byte_to_cp((uint8_t)b), t);
        g_has_byte[k][b] = g_vocab[k]->kind == KVB_VOCAB_BPE && g_vocab[k]->pre != KVB_PRE_GEMMA4 ? kvb_vocab_find(g_vocab[k], t, (size_t)l) >= 0
                                                                                                 : g_vocab[k]->byte_id[b] >= 0;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const char *dir = getenv("KVB_SHARED_DATA") ? getenv("KVB_SHARED_DATA") : "../shared/data";
    char gpt2[1024] = "";
    bool has_pre[KVB_PRE_COUNT] = {false};
    for (int i = 0; i < N_FILES; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tokenizers/%s", dir, k_files[i]);
        if (kvb_vocab_load(path, &g_vocab[g_n]) == KVB_OK) {
            if (g_vocab[g_n]->kind == KVB_VOCAB_BPE) has_pre[g_vocab[g_n]->pre] = true;
            if (g_vocab[g_n]->kind == KVB_VOCAB_BPE && g_vocab[g_n]->pre == KVB_PRE_GPT2) snprintf(gpt2, sizeof gpt2, "%s", path);
            note_bytes(g_n++);
        }
        else fprintf(stderr, "fuzz_tokenize: skipping %s: %s\n", path, kvb_last_error());
    }
    for (int p = 0; gpt2[0] && p < KVB_PRE_COUNT; p++) { /* the other pre-tokenizers on GPT-2's vocabulary */
        if (has_pre[p] || p == KVB_PRE_GEMMA4 || kvb_vocab_load(gpt2, &g_vocab[g_n]) != KVB_OK) continue;
        struct kvb_vocab *v = g_vocab[g_n];
        const char *name = kvb_pre_name((enum kvb_pre_type)p);
        if (!kvb_pre_lookup(name, strlen(name), &v->pre, &v->ignore_merges, &v->add_bos)) abort();
        note_bytes(g_n++);
    }
    const int n_shared = g_n;
    char g4[] = "/tmp/kvb-fuzz-g4-XXXXXX";
    int fd = mkstemp(g4);
    if (fd >= 0) {
        close(fd);
        if (g4_write_vocab(g4, false, "gemma4") == KVB_OK && kvb_vocab_load(g4, &g_vocab[g_n]) == KVB_OK) note_bytes(g_n++);
        else fprintf(stderr, "fuzz_tokenize: skipping the gemma4 vocabulary: %s\n", kvb_last_error());
        unlink(g4);
    }
    if (!n_shared && getenv("KVB_REQUIRE_SHARED") && !strcmp(getenv("KVB_REQUIRE_SHARED"), "1")) {
        fprintf(stderr, "fuzz_tokenize: no vocabularies under %s (KVB_REQUIRE_SHARED=1)\n", dir);
        abort();
    }
    return 0;
}

/* UTF-8 that reads back as written: no overlong form, surrogate or code point above U+10FFFF. */
static bool well_formed(const char *t, size_t n) {
    for (size_t at = 0; at < n;) {
        int l;
        char re[4];
        const uint32_t cp = kvb_utf8_decode((const uint8_t *)t + at, n - at, &l);
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || kvb_utf8_encode(cp, re) != l) return false;
        at += (size_t)l;
    }
    return true;
}

/* a[0..na) and b[0..nb) equal once every "▁" of either is a space. */
static bool same_up_to_spaces(const char *a, size_t na, const char *b, size_t nb) {
    size_t i = 0, j = 0;
    while (i < na && j < nb) {
        const bool sa = a[i] == ' ' || (na - i >= 3 && !memcmp(a + i, "\xE2\x96\x81", 3));
        const bool sb = b[j] == ' ' || (nb - j >= 3 && !memcmp(b + j, "\xE2\x96\x81", 3));
        if (sa != sb || (!sa && a[i] != b[j])) return false;
        i += sa && a[i] != ' ' ? 3 : 1;
        j += sb && b[j] != ' ' ? 3 : 1;
    }
    return i == na && j == nb;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || !g_n) return 0;
    const struct kvb_vocab *v = g_vocab[data[0] % g_n];
    const bool add_special = data[0] & 0x40, parse_special = data[0] & 0x80;
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    int32_t *ids, n;
    if (kvb_vocab_tokenize(v, text, len, add_special, parse_special, &ids, &n) != KVB_OK) return 0;
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= v->n) abort();
    const size_t cap = 3 * len + 64; /* gemma4: a space may read back as the 3 bytes of "▁" */
    char *dec = malloc(cap);
    struct kvb_detok d = {0};
    size_t at = 0;
    bool fits = true;
    for (int32_t i = 0; i < n && fits; i++) {
        size_t r = kvb_detok_push(v, &d, ids[i], false, dec + at, cap - at);
        if (r > cap - at) fits = false;
        else at += r;
    }
    if (fits) at += kvb_detok_flush(&d, dec + at, cap - at);
    const bool g4 = v->kind == KVB_VOCAB_BPE && v->pre == KVB_PRE_GEMMA4;
    if (g4 && !parse_special && !add_special && well_formed(text, len) && (!fits || !same_up_to_spaces(dec, at, text, len))) {
        fprintf(stderr, "gemma4 round trip differs (%zu bytes in, %zu out)\n", len, at);
        abort();
    }
    bool representable = !g4; /* gemma4's round trip is the one above */
    for (size_t i = 0; i < len && representable; i++) {
        representable &= g_has_byte[data[0] % g_n][(uint8_t)text[i]];
        if (v->kind == KVB_VOCAB_SPM && i + 3 <= len && !memcmp(text + i, "\xE2\x96\x81", 3)) representable = false; /* "▁" reads back as ' ' */
    }
    if (!parse_special && !add_special && representable) {
        size_t skip = v->kind == KVB_VOCAB_SPM && v->add_space_prefix && len > 0;
        if (!fits || at != len + skip || memcmp(dec + skip, text, len) != 0) {
            fprintf(stderr, "round trip differs (vocab %d, %zu bytes in, %zu out)\n", data[0] % g_n, len, at);
            abort();
        }
    }
    free(dec);
    kvb_free(ids);
    if (parse_special && !add_special) { /* client text marked (plain.c) reads as it does without parse_special */
        char *m = NULL;
        size_t ml = 0;
        int32_t *want, nw, *got, ng;
        if (kvb_vocab_mark_plain(v, text, len, &m, &ml) != KVB_OK) return 0;
        if (kvb_vocab_tokenize(v, text, len, false, false, &want, &nw) == KVB_OK) {
            if (kvb_vocab_tokenize_marked(v, m, ml, false, &got, &ng) == KVB_OK) {
                if (ng != nw || (nw && memcmp(got, want, sizeof *got * (size_t)nw))) {
                    fprintf(stderr, "marked text tokenizes otherwise than plain text (vocab %d, %d ids against %d)\n", data[0] % g_n, (int)ng, (int)nw);
                    abort();
                }
                kvb_free(got);
            }
            kvb_free(want);
        }
        kvb_buffer_free(m);
    }
    return 0;
}
