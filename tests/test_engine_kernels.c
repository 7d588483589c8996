/*
 * test_engine_kernels.c — random-weight `tiny` models (and `tiny-qwen2`, with
 * biases and NeoX RoPE) in every supported weight type: logits of the fast
 * kernels against the scalar reference by NMSE, with a tolerance per type;
 * and crafted GGUF files (absurd counts and dims, unknown types, overlapping
 * tensors, misaligned offsets) that must fail with a clean error; and the
 * kernel family table (src/ops/dispatch.h) and its choice.
 */
#include "testing.h"
#include "ops/dispatch.h"
#include "ops/matmul.h"
#include "ops/ops.h"
#include "model/model.h"
#include "gguf/gguf_write.h"
#if defined(__aarch64__) && defined(__linux__)
#include <sys/prctl.h>
#endif

static double nmse(const float *a, const float *b, size_t n) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) { e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); s += (double)b[i] * b[i]; }
    return s > 0 ? e / s : e;
}

static int logits_for(const char *path, float *out, int32_t n_tok) {
    struct kvb_model *m;
    if (kvb_model_load(path, NULL, &m) != KVB_OK) { printf("  load: %s\n", kvb_last_error()); return -1; }
    struct kvb_context_params cp = kvb_context_default_params();
    cp.kv.kv_dtype = KVB_DTYPE_F32;
    cp.chunk = 8;
    struct kvb_context *c;
    if (kvb_context_init(m, &cp, &c) != KVB_OK) return -1;
    int32_t toks[64];
    for (int i = 0; i < n_tok; i++) toks[i] = i == 0 ? 1 : (i * 97 + 13) % kvb_vocab_size(kvb_model_vocab(m));
    /* the first half as prefill chunks, the rest one decode step at a time */
    const int32_t half = n_tok / 2, V = kvb_vocab_size(kvb_model_vocab(m));
    kvb_status st = kvb_context_eval(c, toks, half, out, true);
    for (int32_t i = half; st == KVB_OK && i < n_tok; i++) st = kvb_context_eval(c, &toks[i], 1, out + (size_t)i * V, false);
    kvb_context_free(c);
    kvb_model_free(m);
    return st == KVB_OK ? 0 : -1;
}

TEST(fast_kernels_match_reference_every_dtype) {
    const uint32_t types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K,
                              GGML_TYPE_Q5_K, GGML_TYPE_Q4_1, GGML_TYPE_Q5_1,
                              GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS, GGML_TYPE_MXFP4};
    /* quantized rows take int8 activations (q8_0: the tiles, decode and
     * prompt; q4_K, q6_K, q5_K: decode, and prompts on the families with
     * K-quant tiles; q4_0, q5_0, q4_1, q5_1, iq4_nl, iq4_xs, mxfp4: decode), as llama.cpp does, against the
     * reference's f32: about 1e-4 on tiny with AVX2; the kernels themselves
     * match their scalar integer references to float rounding (test_quant) */
    const double tol[] = {1e-9, 1e-9, 1e-9, 3e-4, 3e-4, 3e-4, 3e-4, 3e-4, 3e-4, 3e-4, 3e-4, 3e-4, 3e-4, 3e-4};
    kvb_kernels_force_ref(false);
    if (kvb_kernels() == &kvb_kernels_ref || kvb_dot_kernels() == &kvb_dot_ref) /* KVB_KERNELS=ref, KVB_REF=1, or no AVX2 */
        SKIP_CASE("the fast kernels here are the reference (%s): nothing to compare it with", kvb_kernels_name());
    const char *shapes[] = {"tiny", "tiny-qwen2"};
    enum { T = 20 };
    for (int s = 0; s < 2; s++) {
        struct kvb_model *m;
        void *owned;
        CHECK_OK(kvb_model_make(shapes[s], 7, NULL, &m, &owned));
        const int32_t V = m->info.n_vocab;
        float *fast = malloc(sizeof(float) * T * (size_t)V), *ref = malloc(sizeof(float) * T * (size_t)V);
        for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
            char path[96]; /* the pid: make test-aarch64 runs several tiers of this test at once */
            snprintf(path, sizeof path, "/tmp/kvb_test_%ld_%s_%s.gguf", (long)getpid(), shapes[s], kvb_ggml_type_name(types[t]));
            CHECK_OK(kvb_model_write_gguf(m, path, types[t], NULL, NULL));
            kvb_kernels_force_ref(false);
            CHECK(logits_for(path, fast, T) == 0);
            kvb_kernels_force_ref(true);
            CHECK(logits_for(path, ref, T) == 0);
            kvb_kernels_force_ref(false);
            double e = nmse(fast, ref, (size_t)T * V);
            printf("  %-10s %-5s NMSE fast vs ref %.2e\n", shapes[s], kvb_ggml_type_name(types[t]), e);
            if (!(e <= tol[t])) FAILF("%s %s: NMSE %.3g > %.3g", shapes[s], kvb_ggml_type_name(types[t]), e, tol[t]);
            remove(path);
        }
        free(fast);
        free(ref);
        kvb_model_make_free(m, owned);
    }
}

/* A minimal valid GGUF with one tensor, edited field by field. */
static size_t minimal_gguf(uint8_t *buf, uint64_t n_tensors, uint64_t n_kv, uint32_t n_dims, uint64_t ne0, uint32_t type,
                           uint64_t offset, uint64_t second_offset) {
    size_t at = 0;
#define PUT(v) (memcpy(buf + at, &(v), sizeof(v)), at += sizeof(v))
    memcpy(buf, "GGUF", 4);
    at = 4;
    uint32_t ver = 3;
    PUT(ver);
    PUT(n_tensors);
    PUT(n_kv);
    for (uint64_t k = 0; k < (n_kv < 2 ? n_kv : 1); k++) {
        uint64_t kl = 12;
        PUT(kl);
        memcpy(buf + at, "general.name", 12);
        at += 12;
        uint32_t t = 8;
        PUT(t);
        uint64_t sl = 3;
        PUT(sl);
        memcpy(buf + at, "abc", 3);
        at += 3;
    }
    for (uint64_t i = 0; i < (n_tensors < 3 ? n_tensors : 1); i++) {
        uint64_t nl = 2;
        PUT(nl);
        buf[at++] = 't';
        buf[at++] = (uint8_t)('0' + i);
        PUT(n_dims);
        for (uint32_t d = 0; d < n_dims && d < 4; d++) PUT(ne0);
        PUT(type);
        uint64_t off = i == 0 ? offset : second_offset;
        PUT(off);
    }
#undef PUT
    size_t data = (at + 31) / 32 * 32;
    memset(buf + at, 0, 4096 - at);
    return data + 1024;
}

TEST(crafted_gguf_errors) {
    static uint8_t buf[4096];
    struct gguf_file *f;
    size_t n = minimal_gguf(buf, 1, 1, 1, 64, GGML_TYPE_F32, 0, 0);
    CHECK_OK(kvb_gguf_open_buffer(buf, n, "ok", &f));
    kvb_gguf_close(f);
    n = minimal_gguf(buf, 1, 1, 1, 64, GGML_TYPE_F32, 0, 0);
    for (size_t cut = 0; cut < 24 + 12 + 8 + 4 + 8 + 3 + 8 + 2 + 4 + 8 + 4 + 8; cut++) /* truncated at every header byte */
        CHECK_STATUS(kvb_gguf_open_buffer(buf, cut, "cut", &f), KVB_ERR_CORRUPT);
    n = minimal_gguf(buf, 1ull << 60, 1, 1, 64, GGML_TYPE_F32, 0, 0);
    CHECK_STATUS(kvb_gguf_open_buffer(buf, n, "huge", &f), KVB_ERR_CORRUPT);
    CHECK(strstr(kvb_last_error(), "tensors") != NULL);
    n = minimal_gguf(buf, 1, 1ull << 62, 1, 64, GGML_TYPE_F32, 0, 0);
    CHECK_STATUS(kvb_gguf_open_buffer(buf, n, "hugekv", &f), KVB_ERR_CORRUPT);
    n = minimal_gguf(buf, 1, 1, 5, 64, GGML_TYPE_F32, 0, 0);
    CHECK_STATUS(kvb_gguf_open_buffer(buf, n, "dims", &f), KVB_ERR_CORRUPT);
    CHECK(strstr(kvb_last_error(), "'t0'") != NULL);
    n = minimal_gguf(buf, 1, 1, 2, 1ull << 41, GGML_TYPE_F32, 0, 0);
    CHECK_STATUS(kvb_gguf_open_buffer(buf, n, "bigdim", &f), KVB_ERR_CORRUPT);
    n = minimal_gguf(buf, 1, 1, 1, 1ull << 30, GGML_TYPE_F32, 0, 0);
    CHECK_STATUS(kvb_gguf_open_buffer(buf, n, "outside", &f), KVB_ERR_CORRUPT);
    CHECK(strstr(kvb_last_error(), "not within the file") != NULL);
    n = minimal_gguf(buf, 1, 1, 1, 64, 99, 0, 0);
    CHECK_STATUS(kvb_gguf_open_buffer(buf, n, "type", &f), KVB_ERR_UNSUPPORTED);
    n = minimal_gguf(buf, 1, 1, 1, 48, GGML_TYPE_Q8_0, 0, 0);
    CHECK_STATUS(kvb_gguf_open_buffer(buf, n, "blocks", &f), KVB_ERR_CORRUPT);
    n = minimal_gguf(buf, 1, 1, 1, 64, GGML_TYPE_F32, 7, 0);
    CHECK_STATUS(kvb_gguf_open_buffer(buf, n, "align", &f), KVB_ERR_CORRUPT);
    n = minimal_gguf(buf, 2, 1, 1, 64, GGML_TYPE_F32, 0, 128); /* 256 bytes at 0 and at 128: overlap */
    CHECK_STATUS(kvb_gguf_open_buffer(buf, n + 512, "overlap", &f), KVB_ERR_CORRUPT);
    CHECK(strstr(kvb_last_error(), "overlap") != NULL || strstr(kvb_last_error(), "tensor") != NULL);
    buf[0] = 'X';
    CHECK_STATUS(kvb_gguf_open_buffer(buf, n, "magic", &f), KVB_ERR_CORRUPT);
    n = minimal_gguf(buf, 0, 1, 1, 64, GGML_TYPE_F32, 0, 0);
    uint32_t v1 = 1;
    memcpy(buf + 4, &v1, 4);
    CHECK_STATUS(kvb_gguf_open_buffer(buf, n, "v1", &f), KVB_ERR_UNSUPPORTED);
}

/* The family KVB_KERNELS=<name of family i> should give: the last family at
 * or below i that the CPU runs (ref when KVB_REF=1 forces it). */
static const struct kvb_family *family_capped_at(int i, unsigned have, bool forced_ref) {
    while (i > 0 && (forced_ref || (kvb_families[i].needs & ~have) != 0)) i--;
    return &kvb_families[i];
}

/* The kernel table: the reference first; each family needing more than the
 * one before (AVX-VNNI and I8MM aside: avxvnni sits below avx512, sve above
 * i8mm, neither needed by the family after it); the family in use one entry, kvb_kernels() and
 * kvb_dot_kernels() its two halves; KVB_KERNELS=<name> caps the choice at
 * that family; and the integer attention scores of every family the CPU
 * runs give the reference's bits (test_attn tries the avx2 and avx512
 * primitives; this reaches avx512vnni's, which only the table names). */
TEST(kernel_table) {
    const struct kvb_family *fam = kvb_families;
    const int n = kvb_n_families;
    CHECK(n >= 1 && n <= 8);
    CHECK(strcmp(fam[0].name, "ref") == 0 && fam[0].needs == 0 && fam[0].attn == &kvb_kernels_ref && fam[0].dot == &kvb_dot_ref);
    for (int i = 1; i < n; i++) { /* but AVX-VNNI and I8MM: avx512 does not need the one, sve the other */
        const unsigned before = fam[i - 1].needs & ~(unsigned)(KVB_CPU_AVXVNNI | KVB_CPU_I8MM);
        if ((fam[i].needs & before) != before || fam[i].needs == fam[i - 1].needs)
            FAILF("%s does not need more than %s", fam[i].name, fam[i - 1].name);
    }
    kvb_kernels_force_ref(false);
    const struct kvb_family *used = kvb_family();
    CHECK(used >= fam && used < fam + n);
    CHECK(kvb_kernels() == used->attn && kvb_dot_kernels() == used->dot && strcmp(kvb_kernels_name(), used->attn->name) == 0);
    const unsigned have = kvb_cpu_features();
    const char *ref = getenv("KVB_REF");
    const bool forced_ref = ref && ref[0] && strcmp(ref, "0") != 0;
    CHECK(used == family_capped_at(n - 1, have, forced_ref) || getenv("KVB_KERNELS"));

    const char *cap = getenv("KVB_KERNELS");
    char *saved = cap ? strdup(cap) : NULL;
    const struct kvb_family *picked[8];
    for (int i = 0; i < n; i++) {
        setenv("KVB_KERNELS", fam[i].name, 1);
        kvb_kernels_force_ref(false);
        picked[i] = kvb_family();
    }
    setenv("KVB_KERNELS", "no-such-family", 1); /* caps nothing */
    kvb_kernels_force_ref(false);
    const struct kvb_family *unknown = kvb_family();
    if (saved) setenv("KVB_KERNELS", saved, 1);
    else unsetenv("KVB_KERNELS");
    free(saved);
    kvb_kernels_force_ref(false);
    CHECK(kvb_family() == used);
    for (int i = 0; i < n; i++)
        if (picked[i] != family_capped_at(i, have, forced_ref))
            FAILF("KVB_KERNELS=%s chose %s, not %s", fam[i].name, picked[i]->name, family_capped_at(i, have, forced_ref)->name);
    CHECK(unknown == family_capped_at(n - 1, have, forced_ref));

    enum { D = 128, N = 40, R = 5 };
    static float kx[N * D], q[R * D], want[R * KVB_ATTN_TILE], got[R * KVB_ATTN_TILE];
    static uint8_t rows[N * (D / 32) * 34];
    static int8_t qq[R * D];
    static float dq[R * D / 32];
    static int16_t sq[R * D / 32];
    int32_t slots[N];
    unsigned long long rs = 33;
    for (int i = 0; i < N * D; i++) kx[i] = t_randf(&rs) * 2;
    for (int i = 0; i < R * D; i++) q[i] = t_randf(&rs);
    for (int j = 0; j < N; j++) slots[j] = (j * 7) % N; /* scattered slots of one page */
    const struct kvb_q8_rows qr = kvb_quantize_q_rows(q, R, D, qq, dq, sq);
    const enum kvb_dtype dts[2] = {KVB_DTYPE_Q8_0, KVB_DTYPE_Q4_0};
    for (int t = 0; t < 2; t++) {
        const size_t rb = kvb_dtype_row_bytes(dts[t], D);
        for (int j = 0; j < N; j++) kvb_kv_row_store(dts[t], kx + (size_t)j * D, rows + (size_t)slots[j] * rb, D);
        uint8_t *page = rows;
        const struct kvb_kv_view v = {&page, slots, N, 6, D, rb, rb, 0, dts[t], dts[t], 0.0f, 0};
        kvb_kernels_ref.scores_i8(&v, &qr, R, 0, N, want);
        for (int i = 1; i < n; i++) {
            if ((fam[i].needs & ~have) != 0) continue;
            memset(got, 0, sizeof got);
            fam[i].attn->scores_i8(&v, &qr, R, 0, N, got);
            for (int r = 0; r < R; r++)
                if (memcmp(got + r * KVB_ATTN_TILE, want + r * KVB_ATTN_TILE, sizeof(float) * N) != 0)
                    FAILF("%s %s: integer scores of row %d differ from the reference's", fam[i].name, kvb_dtype_name(dts[t]), r);
        }
    }
}

/* AArch64 Linux: kvb_cpu_features() follows the kernel's hwcaps, read here
 * on their own from /proc/self/auxv (AT_HWCAP 16, AT_HWCAP2 26: asimd bit
 * 1, fphp 9, asimdhp 10, asimddp 20, sve 22; i8mm 13, bf16 14), and the
 * unforced family is the highest whose needs they meet; SVE_WIDE follows
 * the vector length prctl(PR_SVE_GET_VL) gives (above 16 bytes), and sve is
 * the best family where it and SDOT are. make test-aarch64 runs it under
 * qemu's max CPU (every feature, 512-bit SVE: sve) with each tier forced;
 * CI also unforced under CPUs without SDOT or SMMLA (QEMU_CPU=cortex-a53,
 * cortex-a76: neon, dotprod), with 512-bit SVE and no SDOT (a64fx: neon)
 * and with max's SVE at 128 bits (sve-default-vector-length=16: i8mm) and
 * 256 (=32: sve). Elsewhere: skipped. */
TEST(arm_features_follow_the_hwcaps) {
#if defined(__aarch64__) && defined(__linux__)
    FILE *f = fopen("/proc/self/auxv", "rb");
    if (!f) SKIP_CASE("no /proc/self/auxv");
    unsigned long pair[2], hw = 0, hw2 = 0;
    while (fread(pair, sizeof pair, 1, f) == 1 && pair[0] != 0) {
        if (pair[0] == 16) hw = pair[1];
        if (pair[0] == 26) hw2 = pair[1];
    }
    fclose(f);
    unsigned want = 0;
    if (hw & (1ul << 1)) want |= KVB_CPU_NEON;
    if ((hw & (1ul << 1)) && (hw & (1ul << 20))) want |= KVB_CPU_DOTPROD;
    if ((hw & (1ul << 1)) && (hw2 & (1ul << 13))) want |= KVB_CPU_I8MM;
    if ((hw & (1ul << 9)) && (hw & (1ul << 10))) want |= KVB_CPU_FP16;
    if (hw2 & (1ul << 14)) want |= KVB_CPU_BF16;
    if (hw & (1ul << 22)) want |= KVB_CPU_SVE;
#if defined(PR_SVE_GET_VL)
    const int vl_raw = (hw & (1ul << 22)) ? prctl(PR_SVE_GET_VL, 0, 0, 0, 0) : -1;
    const int vl = vl_raw < 0 ? 0 : vl_raw & PR_SVE_VL_LEN_MASK; /* as dispatch.c reads it */
#else
    const int vl = 0;
#endif
    if (vl > 16) want |= KVB_CPU_SVE_WIDE;
    const unsigned have = kvb_cpu_features();
    if (have != want) FAILF("features 0x%x, the hwcaps say 0x%x (AT_HWCAP 0x%lx, AT_HWCAP2 0x%lx)", have, want, hw, hw2);
    CHECK(have & KVB_CPU_NEON);
    CHECK((kvb_cpu_sve_bytes() > 0) == ((have & KVB_CPU_SVE) != 0));
    CHECK(kvb_cpu_sve_bytes() % 16 == 0 && kvb_cpu_sve_bytes() <= 256 && kvb_cpu_sve_bytes() == vl);
    const char *want_family = (want & KVB_CPU_SVE_WIDE) && (want & KVB_CPU_DOTPROD)   ? "sve"
                              : (want & KVB_CPU_I8MM) && (want & KVB_CPU_DOTPROD) ? "i8mm"
                              : (want & KVB_CPU_DOTPROD)                          ? "dotprod"
                                                                                  : "neon";
    const char *cap = getenv("KVB_KERNELS"), *ref = getenv("KVB_REF");
    if (!cap && !(ref && ref[0] && strcmp(ref, "0"))) {
        kvb_kernels_force_ref(false);
        if (strcmp(kvb_family()->name, want_family)) FAILF("chose %s on a CPU whose best is %s", kvb_family()->name, want_family);
    }
    printf("  hwcaps: features 0x%x, SVE %d bytes, best family %s\n", have, kvb_cpu_sve_bytes(), want_family);
#else
    SKIP_CASE("not AArch64 Linux (make test-aarch64 runs it under qemu)");
#endif
}

int main(void) {
    RUN(fast_kernels_match_reference_every_dtype);
    RUN(crafted_gguf_errors);
    RUN(kernel_table);
    RUN(arm_features_follow_the_hwcaps);
    return test_summary();
}
