/*
 * test_model.c — the engine on the three real trained models of
 * ../shared/data (both the llama2.c .bin and the llama.cpp GGUF):
 *   - greedy text for "Once upon a time" equals the README's reference
 *     (run.c, -t 0, 64 positions) exactly, with F32 and F16 KV caches;
 *   - .bin and .gguf of the same model give the same logits (1e-5);
 *   - the full-attention perplexity protocol reproduces the README within
 *     0.5% (the token counts exactly);
 *   - weights read into memory (no_mmap) give the mapped file's logits bit
 *     for bit, and hostile files fail the same way in both modes.
 * KVB_TEST_QUICK=1 (set under sanitizers) scores only the first windows.
 */
#include "testing.h"
#include "kvbound.h"

struct ref {
    const char *dir, *gguf, *bin, *tok, *text;
};

static const struct ref k_models[] = {
    {"stories260K", "models/stories260K/stories260K.llamacpp.gguf", "models/stories260K/stories260K.bin", "models/stories260K/tok512.bin",
     "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. "
     "She wanted to play with it, but it was too high.\nLily"},
    {"model5000", "models/babyllama-tok105/model5000.llamacpp.gguf", "models/babyllama-tok105/model5000.bin", "models/babyllama-tok105/tok105.bin",
     "Once upon a time, there was a little girl named Lily. She loved"},
    {"aidreams260K", "models/aidreams260K/aidreams260K.llamacpp.gguf", "models/aidreams260K/aidreams260K.bin", "models/aidreams260K/tok512_aidreams.bin",
     "Once upon a time, pixels unfolding like petals. Classifications unfold, a kaleidoscope of probability revealing hidden patterns"},
};

static struct kvb_model *load_as(const char *path, const char *tok, bool no_mmap) {
    struct kvb_model_params mp = kvb_model_default_params();
    mp.tokenizer_path = tok;
    mp.no_mmap = no_mmap;
    struct kvb_model *m = NULL;
    if (kvb_model_load(path, &mp, &m) != KVB_OK) printf("  load %s: %s\n", path, kvb_last_error());
    return m;
}

static struct kvb_model *load(const char *path, const char *tok) { return load_as(path, tok, false); }

/* run.c's loop: 64 forward passes, greedy, stop at BOS; text after BOS
 * without its leading space. */
static int greedy(struct kvb_model *m, enum kvb_dtype kv, int threads, char *out, size_t cap) {
    struct kvb_context_params cp = kvb_context_default_params();
    cp.kv.kv_dtype = kv;
    cp.n_threads = threads;
    cp.n_ctx = 128;
    struct kvb_context *c;
    if (kvb_context_init(m, &cp, &c) != KVB_OK) return -1;
    int32_t *ids, n;
    kvb_vocab_tokenize(kvb_model_vocab(m), "Once upon a time", 16, true, false, &ids, &n);
    int32_t toks[80];
    memcpy(toks, ids, sizeof(int32_t) * (size_t)n);
    kvb_buffer_free(ids);
    const int32_t V = kvb_vocab_size(kvb_model_vocab(m));
    float *lg = malloc(sizeof(float) * (size_t)V);
    int nt = n;
    kvb_context_eval(c, toks, nt, lg, false);
    while (nt < 65) {
        int best = 0;
        for (int i = 1; i < V; i++)
            if (lg[i] > lg[best]) best = i;
        if (best == kvb_vocab_special(kvb_model_vocab(m), KVB_SPECIAL_BOS)) break;
        toks[nt++] = best;
        if (nt == 65) break;
        if (kvb_context_eval(c, &toks[nt - 1], 1, lg, false) != KVB_OK) break;
    }
    size_t w = 0;
    for (int i = 1; i < nt; i++) w += kvb_vocab_token_bytes(kvb_model_vocab(m), toks[i], false, out + w, cap - 1 - w);
    out[w] = 0;
    if (out[0] == ' ') memmove(out, out + 1, w);
    free(lg);
    kvb_context_free(c);
    return 0;
}

TEST(greedy_text_matches_reference) {
    for (size_t i = 0; i < sizeof k_models / sizeof *k_models; i++) {
        NEED_SHARED(g, k_models[i].gguf);
        NEED_SHARED(b, k_models[i].bin);
        NEED_SHARED(t, k_models[i].tok);
        const char *paths[2] = {g, b};
        for (int src = 0; src < 2; src++) {
            struct kvb_model *m = load(paths[src], src ? t : NULL);
            CHECK(m != NULL);
            for (int kv = 0; kv < 2; kv++) {
                char out[2048];
                CHECK(greedy(m, kv ? KVB_DTYPE_F16 : KVB_DTYPE_F32, 1 + kv, out, sizeof out) == 0);
                if (strcmp(out, k_models[i].text) != 0)
                    FAILF("%s (%s, %s KV): got\n    [%s]\n  want\n    [%s]", k_models[i].dir, src ? "bin" : "gguf", kv ? "f16" : "f32", out, k_models[i].text);
            }
            kvb_model_free(m);
        }
    }
}

TEST(bin_and_gguf_logits_agree) {
    for (size_t i = 0; i < sizeof k_models / sizeof *k_models; i++) {
        NEED_SHARED(g, k_models[i].gguf);
        NEED_SHARED(b, k_models[i].bin);
        NEED_SHARED(t, k_models[i].tok);
        struct kvb_model *mg = load(g, NULL), *mb = load(b, t);
        CHECK(mg && mb);
        CHECK_EQ_INT(kvb_vocab_size(kvb_model_vocab(mg)), kvb_vocab_size(kvb_model_vocab(mb)));
        struct kvb_context_params cp = kvb_context_default_params();
        cp.kv.kv_dtype = KVB_DTYPE_F32;
        cp.n_ctx = 64;
        struct kvb_context *cg, *cb;
        CHECK_OK(kvb_context_init(mg, &cp, &cg));
        CHECK_OK(kvb_context_init(mb, &cp, &cb));
        int32_t toks[40];
        for (int k = 0; k < 40; k++) toks[k] = k == 0 ? 1 : (k * 37 + 11) % kvb_vocab_size(kvb_model_vocab(mg));
        const int32_t V = kvb_vocab_size(kvb_model_vocab(mg));
        float *lg = malloc(sizeof(float) * 40 * (size_t)V), *lb = malloc(sizeof(float) * 40 * (size_t)V);
        CHECK_OK(kvb_context_eval(cg, toks, 40, lg, true));
        CHECK_OK(kvb_context_eval(cb, toks, 40, lb, true));
        double mx = 0;
        for (size_t k = 0; k < 40 * (size_t)V; k++) mx = fmax(mx, fabs((double)lg[k] - lb[k]));
        if (mx > 1e-5) FAILF("%s: max |logit difference| %.3g", k_models[i].dir, mx);
        free(lg);
        free(lb);
        kvb_context_free(cg);
        kvb_context_free(cb);
        kvb_model_free(mg);
        kvb_model_free(mb);
    }
}

/* kvb_model_params.no_mmap reads the file into anonymous memory: the same
 * bytes, so the same logits bit for bit, from GGUF and .bin alike. */
TEST(weights_read_into_memory_equal_mapped) {
    for (size_t i = 0; i < sizeof k_models / sizeof *k_models; i++) {
        NEED_SHARED(g, k_models[i].gguf);
        NEED_SHARED(b, k_models[i].bin);
        NEED_SHARED(t, k_models[i].tok);
        const char *paths[2] = {g, b};
        for (int src = 0; src < 2; src++) {
            struct kvb_model *mm = load(paths[src], src ? t : NULL), *mr = load_as(paths[src], src ? t : NULL, true);
            CHECK(mm != NULL && mr != NULL);
            struct kvb_model_info im, ir;
            kvb_model_get_info(mm, &im);
            kvb_model_get_info(mr, &ir);
            CHECK_EQ_INT((long long)im.weight_bytes, (long long)ir.weight_bytes);
            struct kvb_context_params cp = kvb_context_default_params();
            cp.n_ctx = 64;
            struct kvb_context *cm, *cr;
            CHECK_OK(kvb_context_init(mm, &cp, &cm));
            CHECK_OK(kvb_context_init(mr, &cp, &cr));
            const int32_t V = kvb_vocab_size(kvb_model_vocab(mm));
            int32_t toks[24];
            for (int k = 0; k < 24; k++) toks[k] = k == 0 ? 1 : (k * 53 + 7) % V;
            float *lm = malloc(sizeof(float) * 24 * (size_t)V), *lr = malloc(sizeof(float) * 24 * (size_t)V);
            CHECK_OK(kvb_context_eval(cm, toks, 24, lm, true));
            CHECK_OK(kvb_context_eval(cr, toks, 24, lr, true));
            if (memcmp(lm, lr, sizeof(float) * 24 * (size_t)V) != 0) FAILF("%s (%s): logits differ when read into memory", k_models[i].dir, src ? "bin" : "gguf");
            free(lm);
            free(lr);
            kvb_context_free(cm);
            kvb_context_free(cr);
            kvb_model_free(mm);
            kvb_model_free(mr);
        }
    }
}

/* Prefill in chunks and token-by-token decode give the same logits. */
TEST(prefill_equals_decode) {
    NEED_SHARED(g, "models/stories260K/stories260K.llamacpp.gguf");
    struct kvb_model *m = load(g, NULL);
    CHECK(m != NULL);
    const int32_t V = kvb_vocab_size(kvb_model_vocab(m));
    struct kvb_context_params cp = kvb_context_default_params();
    cp.kv.kv_dtype = KVB_DTYPE_F32;
    cp.chunk = 7;
    struct kvb_context *a, *b;
    CHECK_OK(kvb_context_init(m, &cp, &a));
    CHECK_OK(kvb_context_init(m, &cp, &b));
    int32_t toks[30];
    for (int k = 0; k < 30; k++) toks[k] = k == 0 ? 1 : (k * 53 + 7) % V;
    float *la = malloc(sizeof(float) * 30 * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    CHECK_OK(kvb_context_eval(a, toks, 30, la, true));
    double mx = 0;
    for (int k = 0; k < 30; k++) {
        CHECK_OK(kvb_context_eval(b, &toks[k], 1, lb, false));
        for (int32_t i = 0; i < V; i++) mx = fmax(mx, fabs((double)la[(size_t)k * V + i] - lb[i]));
    }
    if (mx > 1e-4) FAILF("max |prefill - decode| = %.3g", mx);
    free(la);
    free(lb);
    kvb_context_free(a);
    kvb_context_free(b);
    kvb_model_free(m);
}

static void ppl_case(const char *model, const char *text, int32_t W, int64_t want_tokens, double want_nll, const char **fail) {
    static char msg[256];
    const char *mp = t_shared(model), *tp = t_shared(text);
    struct kvb_model *m = load(mp, NULL);
    size_t len;
    char *buf = t_read_file(tp, &len);
    if (!m || !buf) { *fail = "load"; return; }
    int32_t *ids;
    int64_t n;
    kvb_eval_tokenize_paragraphs(m, buf, len < 100000 ? len : 100000, &ids, &n);
    const char *q = getenv("KVB_TEST_QUICK");
    bool quick = q && !strcmp(q, "1");
    double s = 0;
    int64_t c = 0;
    kvb_eval_window_nll(m, ids, n, W, 2, quick ? 3 : 0, &s, &c);
    double nll = s / (double)c;
    printf("  %s on %s, W %d: %lld tokens, %lld predictions, mean NLL %.4f, PPL %.3f%s\n", model, text, (int)W, (long long)n,
           (long long)c, nll, exp(nll), quick ? " (quick: first 3 windows)" : "");
    if (n != want_tokens) {
        snprintf(msg, sizeof msg, "%s: %lld tokens, want %lld", model, (long long)n, (long long)want_tokens);
        *fail = msg;
    } else if (!quick && fabs(exp(nll) / exp(want_nll) - 1.0) > 0.005) {
        snprintf(msg, sizeof msg, "%s: PPL %.4f, want %.4f (0.5%%)", model, exp(nll), exp(want_nll));
        *fail = msg;
    }
    kvb_buffer_free(ids);
    free(buf);
    kvb_model_free(m);
}

TEST(perplexity_protocol_matches_reference) {
    NEED_SHARED(a, "models/stories260K/stories260K.llamacpp.gguf");
    NEED_SHARED(b, "models/babyllama-tok105/model5000.llamacpp.gguf");
    NEED_SHARED(c, "text/tinystories_validation_head.txt");
    NEED_SHARED(d, "text/tinyshakespeare.txt");
    const char *fail = NULL;
    ppl_case("models/stories260K/stories260K.llamacpp.gguf", "text/tinystories_validation_head.txt", 512, 46829, 1.4174, &fail);
    if (!fail) ppl_case("models/babyllama-tok105/model5000.llamacpp.gguf", "text/tinystories_validation_head.txt", 256, 100002, 0.7429, &fail);
    if (!fail) ppl_case("models/stories260K/stories260K.llamacpp.gguf", "text/tinyshakespeare.txt", 512, 59998, 4.6466, &fail);
    if (fail) FAILF("%s", fail);
}

TEST(hostile_model_files_fail_cleanly) {
    NEED_SHARED(g, "models/stories260K/stories260K.llamacpp.gguf");
    size_t len;
    char *buf = t_read_file(g, &len);
    char path[] = "/tmp/kvb_bad_model_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    /* truncated at many points, including every byte of the header region */
    for (size_t cut = 0; cut < len; cut += cut < 16384 ? 1 : 4099) {
        FILE *f = fopen(path, "wb");
        fwrite(buf, 1, cut, f);
        fclose(f);
        struct kvb_model *m = NULL;
        kvb_status st = kvb_model_load(path, NULL, &m);
        if (st == KVB_OK || m) FAILF("truncated at %zu of %zu bytes: loaded", cut, len);
        if (st != KVB_ERR_CORRUPT && st != KVB_ERR_INVALID) FAILF("truncated at %zu: status %d (%s)", cut, (int)st, kvb_last_error());
        if (cut % 7 == 0 || cut > 16384) { /* read into memory: the same refusal */
            struct kvb_model_params mp = kvb_model_default_params();
            mp.no_mmap = true;
            kvb_status sr = kvb_model_load(path, &mp, &m);
            if (sr != st || m) FAILF("truncated at %zu, read into memory: status %d, mapped %d", cut, (int)sr, (int)st);
        }
    }
    /* a .bin with a lying header */
    NEED_SHARED(b, "models/stories260K/stories260K.bin");
    NEED_SHARED(t, "models/stories260K/tok512.bin");
    char *bb = t_read_file(b, &len);
    int32_t bad[4] = {0, -5, 1 << 30, 7};
    for (int k = 0; k < 4; k++) {
        memcpy(bb + 4 * (k % 3), &bad[k], 4);
        FILE *f = fopen(path, "wb");
        fwrite(bb, 1, len, f);
        fclose(f);
        struct kvb_model_params mp = kvb_model_default_params();
        mp.tokenizer_path = t;
        struct kvb_model *m = NULL;
        kvb_status st = kvb_model_load(path, &mp, &m);
        if (st != KVB_ERR_CORRUPT) FAILF(".bin with header word %d = %d: status %d", k % 3, bad[k], (int)st);
        CHECK(strstr(kvb_last_error(), path) != NULL);
        free(bb);
        bb = t_read_file(b, &len);
    }
    free(bb);
    remove(path);
    free(buf);
    struct kvb_model *m = NULL;
    CHECK_STATUS(kvb_model_load("/nonexistent/model.gguf", NULL, &m), KVB_ERR_IO);
    struct kvb_model_params mr = kvb_model_default_params();
    mr.no_mmap = true;
    CHECK_STATUS(kvb_model_load("/nonexistent/model.gguf", &mr, &m), KVB_ERR_IO);
    CHECK(strstr(kvb_last_error(), "/nonexistent/model.gguf") != NULL);
    CHECK_STATUS(kvb_model_load(b, NULL, &m), KVB_ERR_INVALID); /* .bin without tokenizer */
    CHECK(strstr(kvb_last_error(), "tokenizer") != NULL);
}

int main(void) {
    RUN(greedy_text_matches_reference);
    RUN(bin_and_gguf_logits_agree);
    RUN(weights_read_into_memory_equal_mapped);
    RUN(prefill_equals_decode);
    RUN(perplexity_protocol_matches_reference);
    RUN(hostile_model_files_fail_cleanly);
    return test_summary();
}
