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

static char rt_fail[256];
static void run_cases(const char *gguf_path, const char *cases_path, int *pass, int *total, int *rt, char *first_fail, size_t ff) {
    struct gguf_file *f;
    struct kvb_vocab *v;
    if (kvb_gguf_open(gguf_path, &f) != KVB_OK || kvb_vocab_from_gguf(f, &v) != KVB_OK) {
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
        /* round trip of the text itself (no BOS, no special parsing) */
        if (kvb_vocab_tokenize(v, text, tl, false, false, &got, &ng) != KVB_OK) continue;
        static char dec[65536 + 8];
        size_t dl = 0;
        for (int32_t k = 0; k < ng; k++) dl += kvb_vocab_piece(v, got[k], dec + KVB_MIN(dl, sizeof dec), dl < sizeof dec ? sizeof dec - dl : 0);
        size_t skip = v->kind == KVB_VOCAB_SPM && v->add_space_prefix && tl && dl == tl + 1 && dec[0] == ' ';
        if (dl == tl + skip && memcmp(dec + skip, text, tl) == 0) (*rt)++;
        else if (!rt_fail[0]) snprintf(rt_fail, 200, "round trip of '%.40s' gives '%.*s'", line + 9, (int)KVB_MIN(dl, (size_t)40), dec);
        kvb_free(got);
    }
    free(all);
    kvb_vocab_free(v);
    kvb_gguf_close(f);
}

#define CASES_TEST(name, label, gguf, cases, min_cases)                       \
    TEST(name) {                                                              \
        NEED_SHARED(g, gguf);                                                 \
        NEED_SHARED(c, cases);                                                \
        int pass = 0, total = 0, rt = 0;                                      \
        char ff[512] = "";                                                    \
        rt_fail[0] = 0;                                                       \
        run_cases(g, c, &pass, &total, &rt, ff, sizeof ff);                   \
        printf("  %s: %d/%d cases, %d/%d round trips\n", label, pass, total, rt, total); \
        if (pass != total || total < (min_cases)) FAILF("%s", ff);            \
        if (rt != total) FAILF("%s", rt_fail);                                \
    }

CASES_TEST(llama2_cases_match_llama_cpp, "llama2", "tokenizers/llama2/ggml-vocab-llama-spm.gguf", "tokenizers/llama2/cases.jsonl", 100)
CASES_TEST(mistral_cases_match_llama_cpp, "mistral-v0.3", "tokenizers/mistral-v0.3/mistral-7b-instruct-v0.3.vocab.gguf", "tokenizers/mistral-v0.3/cases.jsonl", 100)
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
    if (kvb_gguf_open(gguf_path, &f) != KVB_OK || kvb_vocab_from_gguf(f, &v) != KVB_OK) {
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
    kvb_gguf_close(f);
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

/* Every family round-trips the public-domain books, byte for byte; the SPM
 * word-cut fast path gives exactly the ids of whole-text merging. */
TEST(books_round_trip_every_family) {
    static const char *const vocabs[] = {"tokenizers/gpt2/ggml-vocab-gpt-2.gguf", "tokenizers/llama3/llama3-8b-instruct.vocab.gguf",
                                         "tokenizers/qwen2.5/qwen2.5-0.5b-instruct.vocab.gguf", "tokenizers/smollm2/smollm2-135m-instruct.vocab.gguf",
                                         "tokenizers/llama2/ggml-vocab-llama-spm.gguf", "tokenizers/mistral-v0.3/mistral-7b-instruct-v0.3.vocab.gguf"};
    NEED_SHARED(book, "text/pg345_dracula.txt");
    size_t len;
    char *text = t_read_file(book, &len);
    size_t cut = getenv("KVB_TEST_QUICK") ? 60000 : len; /* sanitizer builds: a slice */
    char *dec = malloc(cut + 16);
    for (size_t k = 0; k < sizeof vocabs / sizeof *vocabs; k++) {
        NEED_SHARED(g, vocabs[k]);
        struct kvb_vocab *v;
        if (kvb_vocab_load(g, &v) != KVB_OK) FAILF("%s: %s", g, kvb_last_error());
        int32_t *ids, n;
        CHECK(kvb_vocab_tokenize(v, text, cut, false, false, &ids, &n) == KVB_OK);
        struct kvb_detok d = {0};
        size_t at = 0;
        for (int32_t i = 0; i < n; i++) {
            size_t r = kvb_detok_push(v, &d, ids[i], false, dec + at, cut + 16 - at);
            if (r > cut + 16 - at) FAILF("%s: decoded text longer than the input", g);
            at += r;
        }
        at += kvb_detok_flush(&d, dec + at, cut + 16 - at);
        size_t skip = v->kind == KVB_VOCAB_SPM && at == cut + 1 && dec[0] == ' ';
        printf("  %-55s %zu bytes -> %d tokens, round trip %s\n", vocabs[k], cut, (int)n, at == cut + skip && !memcmp(dec + skip, text, cut) ? "exact" : "DIFFERS");
        if (at != cut + skip || memcmp(dec + skip, text, cut)) FAILF("%s: decode(encode(book)) differs", g);
        if (v->kind == KVB_VOCAB_SPM) {
            CHECK(v->spm_word_split);
            v->spm_word_split = false;
            int32_t *slow, ns;
            CHECK(kvb_vocab_tokenize(v, text, KVB_MIN(cut, (size_t)200000), false, false, &slow, &ns) == KVB_OK);
            int32_t *fast, nf;
            v->spm_word_split = true;
            CHECK(kvb_vocab_tokenize(v, text, KVB_MIN(cut, (size_t)200000), false, false, &fast, &nf) == KVB_OK);
            if (ns != nf || memcmp(slow, fast, sizeof(int32_t) * (size_t)ns)) FAILF("%s: word-cut ids differ from whole-text merging", g);
            kvb_free(slow);
            kvb_free(fast);
        }
        kvb_free(ids);
        kvb_vocab_free(v);
    }
    free(dec);
    free(text);
}

/* Streaming decode holds partial UTF-8 back; special tokens render only on request. */
TEST(streaming_decode_and_special_rendering) {
    NEED_SHARED(g, "tokenizers/llama3/llama3-8b-instruct.vocab.gguf");
    struct kvb_vocab *v;
    CHECK(kvb_vocab_load(g, &v) == KVB_OK);
    const char *text = "<|begin_of_text|>\xF0\x9F\x98\x80\xE4\xB8\xAD\xE6\x96\x87 ok";
    int32_t *ids, n;
    CHECK(kvb_vocab_tokenize(v, text, strlen(text), false, true, &ids, &n) == KVB_OK);
    CHECK_EQ_INT(ids[0], kvb_vocab_special(v, KVB_SPECIAL_BOS));
    char out[256], buf[64];
    size_t at = 0;
    struct kvb_detok d = {0};
    for (int32_t i = 0; i < n; i++) {
        size_t r = kvb_detok_push(v, &d, ids[i], false, buf, sizeof buf);
        for (size_t k = 0; k < r;) { /* every chunk is whole UTF-8 */
            uint8_t b = (uint8_t)buf[k];
            size_t need = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
            if (k + need > r) FAILF("token %d: chunk ends inside a character", (int)i);
            k += need;
        }
        memcpy(out + at, buf, r);
        at += r;
    }
    CHECK_EQ_INT((int)d.n_held, 0);
    CHECK(at == strlen(text) - strlen("<|begin_of_text|>") && !memcmp(out, text + strlen("<|begin_of_text|>"), at));
    size_t r = kvb_detok_push(v, &d, ids[0], true, buf, sizeof buf);
    CHECK(r == strlen("<|begin_of_text|>") && !memcmp(buf, "<|begin_of_text|>", r));
    CHECK_EQ_INT((int)kvb_detok_push(v, &d, ids[0], true, buf, 4), (int)strlen("<|begin_of_text|>")); /* too small: state unchanged */
    CHECK_EQ_INT(kvb_vocab_special(v, KVB_SPECIAL_EOT), kvb_vocab_find(v, "<|eot_id|>", 10));
    /* a lone lead byte is held, then flushed */
    int32_t lead = v->n;
    for (int32_t id = 0; id < v->n && lead == v->n; id++) {
        char p[8];
        if (kvb_vocab_token_bytes(v, id, false, p, sizeof p) == 1 && (uint8_t)p[0] == 0xE4) lead = id;
    }
    CHECK(lead < v->n);
    CHECK_EQ_INT((int)kvb_detok_push(v, &d, lead, false, buf, sizeof buf), 0);
    CHECK_EQ_INT((int)kvb_detok_flush(&d, buf, sizeof buf), 1);
    kvb_free(ids);
    kvb_vocab_free(v);
}

/* Chat formats, written out from the templates' published renderings. */
TEST(chat_templates_detect_and_format) {
    static const struct { const char *sig; enum kvb_chat_style style; } det[] = {
        {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'}}", KVB_CHAT_CHATML},
        {"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}{{ '<|eot_id|>' }}", KVB_CHAT_LLAMA3},
        {"{{ bos_token + '[INST] ' + '<<SYS>>\\n' + content.strip() + ' [/INST]' }}", KVB_CHAT_LLAMA2},
        {"{{- '[INST] ' + message['content'] + '[/INST]' }}", KVB_CHAT_MISTRAL},
    };
    for (size_t i = 0; i < sizeof det / sizeof *det; i++) {
        enum kvb_chat_style st;
        CHECK(kvb_chat_detect(det[i].sig, &st) == KVB_OK);
        CHECK_EQ_INT((int)st, (int)det[i].style);
    }
    enum kvb_chat_style st;
    st = KVB_CHAT_LLAMA3;
    CHECK(kvb_chat_detect("{{ message.content }}", &st) == KVB_FALLBACK); /* not an error, and nothing logged */
    CHECK(st == KVB_CHAT_CHATML);
    const struct kvb_chat_message conv[] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye "}};
    static const char *const want[] = {
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
        "<|im_start|>user\nBye <|im_end|>\n<|im_start|>assistant\n",
        "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Bye [/INST]",
        "[INST] Hi[/INST] Hello.</s>[INST] Be brief.\n\nBye [/INST]",
        "System: Be brief.\nUser: Hi\nAssistant: Hello.\nUser: Bye \nAssistant:",
    };
    for (int s = 0; s < 5; s++) {
        char *out;
        size_t len;
        CHECK(kvb_chat_format((enum kvb_chat_style)s, conv, 4, true, &out, &len) == KVB_OK);
        if (strcmp(out, want[s])) FAILF("%s:\n got  [%s]\n want [%s]", kvb_chat_style_name((enum kvb_chat_style)s), out, want[s]);
        CHECK_EQ_INT((int)len, (int)strlen(want[s]));
        kvb_free(out);
    }
    /* default system messages, from the templates' literal text */
    char sys[256];
    const char *qwen = "{%- else %}\n        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
                       "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}";
    CHECK_EQ_INT((int)kvb_chat_default_system(qwen, sys, sizeof sys), 68);
    CHECK(!strcmp(sys, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."));
    CHECK_EQ_INT((int)kvb_chat_default_system(det[0].sig, sys, sizeof sys), 0);
    CHECK_EQ_INT((int)kvb_chat_default_system("{{ '<|im_start|>system\\n' + message['content'] + '<|im_end|>' }}", sys, sizeof sys), 0);
    const struct kvb_chat_message bad[] = {{"tool", "x"}};
    char *out = NULL;
    CHECK(kvb_chat_format(KVB_CHAT_CHATML, bad, 1, true, &out, NULL) == KVB_ERR_INVALID && out == NULL);
}

/* The budget: Llama 3's structures (128K tokens, 280K merges) at most
 * 3x the vocabulary data, taken as the vocab-only GGUF's size. */
TEST(llama3_vocab_memory_within_3x) {
    NEED_SHARED(g, "tokenizers/llama3/llama3-8b-instruct.vocab.gguf");
    FILE *f = fopen(g, "rb");
    CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    long file = ftell(f);
    fclose(f);
    struct kvb_vocab *v;
    CHECK(kvb_vocab_load(g, &v) == KVB_OK);
    size_t b = kvb_vocab_bytes(v);
    printf("  llama3: %d tokens, %d merges: structures %.2f MB, file %.2f MB (%.2fx)\n", (int)v->n, (int)v->n_merges, b / 1e6, file / 1e6,
           (double)b / (double)file);
    CHECK(v->n == 128256 && v->n_merges == 280147);
    if ((double)b > 3.0 * (double)file) FAILF("%.2fx the file", (double)b / (double)file);
    kvb_vocab_free(v);
}

/* Unknown pre-tokenizers and broken merges are refused by name. */
TEST(bpe_metadata_errors_name_the_key) {
    NEED_SHARED(g, "tokenizers/gpt2/ggml-vocab-gpt-2.gguf");
    size_t size;
    char *img = t_read_file(g, &size);
    char *at = NULL; /* the tokenizer.ggml.pre value: key, u32 type, u64 length, text */
    for (size_t i = 0; i + 18 + 12 <= size && !at; i++)
        if (!memcmp(img + i, "tokenizer.ggml.pre", 18)) at = img + i + 18 + 12;
    CHECK(at != NULL && !memcmp(at, "gpt-2", 5));
    memcpy(at, "gpt-9", 5);
    struct gguf_file *f;
    struct kvb_vocab *v = NULL;
    CHECK(kvb_gguf_open_buffer(img, size, "patched", &f) == KVB_OK);
    CHECK(kvb_vocab_from_gguf(f, &v) == KVB_ERR_UNSUPPORTED && v == NULL);
    if (!strstr(kvb_last_error(), "tokenizer.ggml.pre") || !strstr(kvb_last_error(), "gpt-9")) FAILF("error: %s", kvb_last_error());
    kvb_gguf_close(f);
    free(img);
}

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
        CHECK_OK(kvb_gguf_open(g, &f));
        CHECK_OK(kvb_vocab_from_gguf(f, &v));
        char msg[256] = "";
        if (check_ids(v, &k_refs[i], msg, sizeof msg)) FAILF("%s (gguf): %s", k_refs[i].gguf, msg);
        kvb_vocab_free(v);
        kvb_gguf_close(f);
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
    RUN(books_round_trip_every_family);
    RUN(streaming_decode_and_special_rendering);
    RUN(chat_templates_detect_and_format);
    RUN(bpe_metadata_errors_name_the_key);
    RUN(llama3_vocab_memory_within_3x);
    RUN(model_reference_ids_gguf_and_bin);
    RUN(byte_fallback_and_unknown);
    return test_summary();
}
