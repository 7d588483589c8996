/*
 * test_tokenizer.c — SentencePiece tokenization against llama.cpp: every
 * case of ../shared/data/tokenizers/{llama2,mistral-v0.3}/cases.jsonl (ids
 * from llama-tokenize), the reference ids of the three shared models for
 * "Once upon a time" from both their GGUF and their llama2.c tokenizer.bin,
 * and decoding back to text.
 */
#include "testing.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

static int hexval(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c - 'A' + 10; }

/* One cases.jsonl line: text (from text_hex), ids, flags. */
static int parse_case(const char *line, char *text, size_t *tlen, int32_t *ids, int *n, int *add_bos, int *parse_special) {
    const char *h = strstr(line, "\"text_hex\": \"");
    const char *i = strstr(line, "\"ids\": [");
    const char *b = strstr(line, "\"add_bos\": ");
    const char *p = strstr(line, "\"parse_special\": ");
    if (!h || !i || !b || !p) return -1;
    h += 13;
    *tlen = 0;
    while (*h && *h != '"') { text[(*tlen)++] = (char)(hexval(h[0]) * 16 + hexval(h[1])); h += 2; }
    i += 8;
    *n = 0;
    while (*i && *i != ']') {
        while (*i == ' ' || *i == ',') i++;
        if (*i == ']') break;
        ids[(*n)++] = (int32_t)strtol(i, (char **)&i, 10);
    }
    *add_bos = strncmp(b + 11, "true", 4) == 0;
    *parse_special = strncmp(p + 17, "true", 4) == 0;
    return 0;
}

static void run_cases(const char *gguf_path, const char *cases_path, int *pass, int *total, char *first_fail, size_t ff) {
    struct gguf_file *f;
    struct kvb_vocab *v;
    if (gguf_open(gguf_path, &f) != KVB_OK || kvb_vocab_from_gguf(f, &v) != KVB_OK) {
        snprintf(first_fail, ff, "load: %s", kvb_last_error());
        return;
    }
    char *all = t_read_file(cases_path, NULL);
    static char text[65536];
    static int32_t want[16384];
    for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
        size_t tl;
        int n, ab, ps;
        if (parse_case(line, text, &tl, want, &n, &ab, &ps)) continue;
        int32_t *got;
        int32_t ng;
        (*total)++;
        if (kvb_vocab_tokenize(v, text, tl, ab, ps, &got, &ng) != KVB_OK) continue;
        int same = ng == n && (n == 0 || memcmp(got, want, sizeof(int32_t) * (size_t)n) == 0);
        if (same) (*pass)++;
        else if (!first_fail[0]) {
            int w = snprintf(first_fail, ff, "text %.40s (bos %d special %d): got", line + 9, ab, ps);
            for (int k = 0; k < ng && k < 12 && w < (int)ff - 12; k++) w += snprintf(first_fail + w, ff - (size_t)w, " %d", got[k]);
            w += snprintf(first_fail + w, ff - (size_t)w, " want");
            for (int k = 0; k < n && k < 12 && w < (int)ff - 12; k++) w += snprintf(first_fail + w, ff - (size_t)w, " %d", want[k]);
        }
        kvb_free(got);
    }
    free(all);
    kvb_vocab_free(v);
    gguf_close(f);
}

TEST(llama2_cases_match_llama_cpp) {
    NEED_SHARED(g, "tokenizers/llama2/ggml-vocab-llama-spm.gguf");
    NEED_SHARED(c, "tokenizers/llama2/cases.jsonl");
    int pass = 0, total = 0;
    char ff[512] = "";
    run_cases(g, c, &pass, &total, ff, sizeof ff);
    printf("  llama2: %d/%d cases\n", pass, total);
    if (pass != total || total < 100) FAILF("%s", ff);
}

TEST(mistral_cases_match_llama_cpp) {
    NEED_SHARED(g, "tokenizers/mistral-v0.3/mistral-7b-instruct-v0.3.vocab.gguf");
    NEED_SHARED(c, "tokenizers/mistral-v0.3/cases.jsonl");
    int pass = 0, total = 0;
    char ff[512] = "";
    run_cases(g, c, &pass, &total, ff, sizeof ff);
    printf("  mistral-v0.3: %d/%d cases\n", pass, total);
    if (pass != total || total < 100) FAILF("%s", ff);
}

#define CASES_TEST(name, label, gguf, cases, min_cases)                       \
    TEST(name) {                                                              \
        NEED_SHARED(g, gguf);                                                 \
        NEED_SHARED(c, cases);                                                \
        int pass = 0, total = 0;                                              \
        char ff[512] = "";                                                    \
        run_cases(g, c, &pass, &total, ff, sizeof ff);                        \
        printf("  %s: %d/%d cases\n", label, pass, total);                    \
        if (pass != total || total < (min_cases)) FAILF("%s", ff);            \
    }

CASES_TEST(gpt2_cases_match_llama_cpp, "gpt2", "tokenizers/gpt2/ggml-vocab-gpt-2.gguf", "tokenizers/gpt2/cases.jsonl", 60)
CASES_TEST(llama3_cases_match_llama_cpp, "llama3", "tokenizers/llama3/llama3-8b-instruct.vocab.gguf", "tokenizers/llama3/cases.jsonl", 120)
CASES_TEST(qwen25_cases_match_llama_cpp, "qwen2.5", "tokenizers/qwen2.5/qwen2.5-0.5b-instruct.vocab.gguf", "tokenizers/qwen2.5/cases.jsonl", 60)
CASES_TEST(smollm2_cases_match_llama_cpp, "smollm2", "tokenizers/smollm2/smollm2-135m-instruct.vocab.gguf", "tokenizers/smollm2/cases.jsonl", 60)

/* llama.cpp's test-tokenizer-0 inputs: .inp holds texts separated by
 * "\n__ggml_vocab_test__\n", .out one line of ids per text (no BOS, no
 * special parsing). Every text must also decode back to itself. */
static void run_inp_out(const char *gguf_path, const char *inp_path, const char *out_path, int *pass, int *total, int *round_trip,
                        char *first_fail, size_t ff) {
    struct gguf_file *f;
    struct kvb_vocab *v;
    if (gguf_open(gguf_path, &f) != KVB_OK || kvb_vocab_from_gguf(f, &v) != KVB_OK) {
        snprintf(first_fail, ff, "load: %s", kvb_last_error());
        return;
    }
    size_t in_size;
    char *in = t_read_file(inp_path, &in_size);
    char *outs = t_read_file(out_path, NULL);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *text = in, *line = outs;
    char dec[8192];
    while (text < in + in_size && line && *line) {
        char *end = strstr(text, sep);
        size_t tl = end ? (size_t)(end - text) : strlen(text);
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        int32_t want[1024];
        int n = 0;
        for (char *p = line; *p && n < 1024;) {
            char *e;
            long x = strtol(p, &e, 10);
            if (e == p) break;
            want[n++] = (int32_t)x;
            p = e;
        }
        int32_t *got;
        int32_t ng;
        (*total)++;
        if (kvb_vocab_tokenize(v, text, tl, false, false, &got, &ng) == KVB_OK) {
            if (ng == n && (n == 0 || memcmp(got, want, sizeof(int32_t) * (size_t)n) == 0)) (*pass)++;
            else if (!first_fail[0]) snprintf(first_fail, ff, "text '%.*s': got %d ids, want %d", (int)KVB_MIN(tl, (size_t)40), text, ng, n);
            size_t dl = 0;
            for (int32_t k = 0; k < ng; k++) dl += kvb_vocab_piece(v, got[k], dec + KVB_MIN(dl, sizeof dec), dl < sizeof dec ? sizeof dec - dl : 0);
            size_t skip = v->kind == KVB_VOCAB_SPM && v->add_space_prefix && dl == tl + 1 && dec[0] == ' '; /* the added prefix */
            if (dl == tl + skip && memcmp(dec + skip, text, tl) == 0) (*round_trip)++;
            kvb_free(got);
        }
        if (!end) break;
        text = end + sizeof sep - 1;
        line = nl ? nl + 1 : NULL;
    }
    free(in);
    free(outs);
    kvb_vocab_free(v);
    gguf_close(f);
}

#define INP_OUT_TEST(name, label, gguf, base)                                                         \
    TEST(name) {                                                                                           \
        NEED_SHARED(g, gguf);                                                                              \
        NEED_SHARED(i, base ".inp");                                                                       \
        NEED_SHARED(o, base ".out");                                                                       \
        int pass = 0, total = 0, rt = 0;                                                                   \
        char ff[512] = "";                                                                                 \
        run_inp_out(g, i, o, &pass, &total, &rt, ff, sizeof ff);                                           \
        printf("  %s: %d/%d llama.cpp test inputs, %d/%d round trips\n", label, pass, total, rt, total);    \
        if (pass != total || total < 40) FAILF("%s", ff);                                                  \
        if (rt != total) FAILF("%d of %d texts do not decode back to themselves", total - rt, total); \
    }

INP_OUT_TEST(gpt2_test_inputs, "gpt2", "tokenizers/gpt2/ggml-vocab-gpt-2.gguf", "tokenizers/gpt2/ggml-vocab-gpt-2.gguf")
INP_OUT_TEST(llama3_test_inputs, "llama3", "tokenizers/llama3/llama3-8b-instruct.vocab.gguf", "tokenizers/llama3/ggml-vocab-llama-bpe.gguf")
INP_OUT_TEST(qwen2_test_inputs, "qwen2", "tokenizers/qwen2.5/qwen2.5-0.5b-instruct.vocab.gguf", "tokenizers/qwen2.5/ggml-vocab-qwen2.gguf")
INP_OUT_TEST(llama2_test_inputs, "llama2", "tokenizers/llama2/ggml-vocab-llama-spm.gguf", "tokenizers/llama2/ggml-vocab-llama-spm.gguf")

struct model_ref {
    const char *gguf, *bin, *tok;
    int32_t n_vocab;
    int32_t ids[20];
    int n;
};

static const struct model_ref k_refs[] = {
    {"models/stories260K/stories260K.llamacpp.gguf", "models/stories260K/stories260K.bin", "models/stories260K/tok512.bin", 512,
     {1, 403, 407, 261, 378}, 5},
    {"models/babyllama-tok105/model5000.llamacpp.gguf", "models/babyllama-tok105/model5000.bin", "models/babyllama-tok105/tok105.bin", 105,
     {1, 3, 34, 9, 22, 4, 3, 18, 20, 7, 9, 3, 5, 3, 6, 10, 16, 4}, 18},
    {"models/aidreams260K/aidreams260K.llamacpp.gguf", "models/aidreams260K/aidreams260K.bin", "models/aidreams260K/tok512_aidreams.bin", 512,
     {1, 429, 491, 433, 295, 429, 444, 445, 265, 262, 263, 342, 430}, 13},
};

static int check_ids(const struct kvb_vocab *v, const struct model_ref *r, char *msg, size_t n) {
    int32_t *ids;
    int32_t ng;
    const char *text = "Once upon a time";
    if (kvb_vocab_tokenize(v, text, strlen(text), true, false, &ids, &ng) != KVB_OK) return -1;
    int ok = ng == r->n && memcmp(ids, r->ids, sizeof(int32_t) * (size_t)ng) == 0;
    if (!ok) snprintf(msg, n, "got %d ids, first %d %d %d", ng, ids[0], ng > 1 ? ids[1] : -1, ng > 2 ? ids[2] : -1);
    /* decoding after BOS gives the text back with one leading space */
    char buf[256];
    size_t w = 0;
    for (int k = 1; k < ng; k++) w += kvb_vocab_piece(v, ids[k], buf + w, sizeof buf - w);
    buf[w] = 0;
    if (ok && strcmp(buf, " Once upon a time") != 0) {
        snprintf(msg, n, "decoded '%s'", buf);
        ok = 0;
    }
    kvb_free(ids);
    return ok ? 0 : -1;
}

TEST(model_reference_ids_gguf_and_bin) {
    for (size_t i = 0; i < sizeof k_refs / sizeof k_refs[0]; i++) {
        NEED_SHARED(g, k_refs[i].gguf);
        NEED_SHARED(t, k_refs[i].tok);
        struct gguf_file *f;
        struct kvb_vocab *v;
        CHECK_OK(gguf_open(g, &f));
        CHECK_OK(kvb_vocab_from_gguf(f, &v));
        char msg[256] = "";
        if (check_ids(v, &k_refs[i], msg, sizeof msg)) FAILF("%s (gguf): %s", k_refs[i].gguf, msg);
        kvb_vocab_free(v);
        gguf_close(f);
        size_t len;
        char *buf = t_read_file(t, &len);
        CHECK(buf != NULL);
        CHECK_OK(kvb_vocab_from_llama2c(buf, len, k_refs[i].n_vocab, t, &v));
        if (check_ids(v, &k_refs[i], msg, sizeof msg)) FAILF("%s (bin): %s", k_refs[i].tok, msg);
        kvb_vocab_free(v);
        free(buf);
    }
}

TEST(byte_fallback_and_unknown) {
    NEED_SHARED(t, "models/stories260K/tok512.bin");
    size_t len;
    char *buf = t_read_file(t, &len);
    struct kvb_vocab *v;
    CHECK_OK(kvb_vocab_from_llama2c(buf, len, 512, t, &v));
    int32_t *ids;
    int32_t n;
    /* "中\n": not in the vocabulary, so its bytes (id = byte + 3), after the "▁" prefix */
    CHECK_OK(kvb_vocab_tokenize(v, "\xE4\xB8\xAD\n", 4, false, false, &ids, &n));
    CHECK_EQ_INT(n, 5);
    CHECK_EQ_INT(ids[0], kvb_vocab_find(v, "\xE2\x96\x81", 3));
    CHECK_EQ_INT(ids[1], 0xE4 + 3);
    CHECK_EQ_INT(ids[2], 0xB8 + 3);
    CHECK_EQ_INT(ids[3], 0xAD + 3);
    CHECK_EQ_INT(ids[4], 13);
    char out[32];
    size_t w = 0;
    for (int k = 0; k < n; k++) w += kvb_vocab_piece(v, ids[k], out + w, sizeof out - w);
    CHECK_EQ_INT(w, 5);
    CHECK(memcmp(out, " \xE4\xB8\xAD\n", 5) == 0);
    kvb_free(ids);
    kvb_vocab_free(v);
    free(buf);
    /* truncated tokenizer.bin: a clean error, every length */
    buf = t_read_file(t, &len);
    for (size_t cut = 0; cut < len; cut += 7) {
        struct kvb_vocab *cv = NULL;
        kvb_status st = kvb_vocab_from_llama2c(buf, cut, 512, "cut", &cv);
        if (st != KVB_ERR_CORRUPT) FAILF("cut at %zu: status %d", cut, (int)st);
    }
    free(buf);
}

int main(void) {
    RUN(llama2_cases_match_llama_cpp);
    RUN(mistral_cases_match_llama_cpp);
    RUN(gpt2_cases_match_llama_cpp);
    RUN(llama3_cases_match_llama_cpp);
    RUN(qwen25_cases_match_llama_cpp);
    RUN(smollm2_cases_match_llama_cpp);
    RUN(gpt2_test_inputs);
    RUN(llama3_test_inputs);
    RUN(qwen2_test_inputs);
    RUN(llama2_test_inputs);
    RUN(model_reference_ids_gguf_and_bin);
    RUN(byte_fallback_and_unknown);
    return test_summary();
}
