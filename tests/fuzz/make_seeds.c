/* make_seeds.c — writes fuzzing seed corpora: small valid cache images
 * (every policy) into DIR and, with GGUF_DIR, small byte-level BPE
 * vocab-only GGUF files (every supported pre-tokenizer) and the synthetic
 * gemma4 vocabulary of the tokenizer tests (tokenizer.ggml.model "gemma4",
 * and "gpt2" with pre "gemma4") so the GGUF fuzzer reaches the merges parser
 * and the BPE encoders: make_seeds DIR [GGUF_DIR].
 * make_seeds --sessions MODEL DIR writes session images (kvb_batch_seq_save,
 * a few policies, after a short turn) for fuzz_session_image. */
#include "kvbound.h"
#include "cache/cold.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "../tokenizer_gemma4_vocab.h"

#include <stdio.h>
#include <string.h>

/* 256 byte tokens (GPT-2's printable mapping), a few merges and specials. */
static int write_bpe_seed(const char *dir, const char *pre) {
    static char bytes[256][3];
    const char *toks[256 + 8];
    uint32_t lens[256 + 8];
    int32_t types[256 + 8];
    int n = 0, k = 0;
    for (int b = 0; b < 256; b++) { /* GPT-2: printable bytes map to themselves, the rest to 256 + k */
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        unsigned cp = printable ? (unsigned)b : 256u + (unsigned)k++;
        int l = cp < 0x80 ? 1 : 2;
        if (l == 1) bytes[b][0] = (char)cp;
        else { bytes[b][0] = (char)(0xC0 | (cp >> 6)); bytes[b][1] = (char)(0x80 | (cp & 0x3F)); }
        toks[n] = bytes[b]; lens[n] = (uint32_t)l; types[n++] = 1;
    }
    static const char *const extra[] = {"he", "ll", "llo", "\xC4\xA0w", "or", "<|begin_of_text|>", "<|im_end|>", "<tool>"};
    static const int32_t extra_type[] = {1, 1, 1, 1, 1, 3, 3, 4};
    for (int i = 0; i < 8; i++) { toks[n] = extra[i]; lens[n] = (uint32_t)strlen(extra[i]); types[n++] = extra_type[i]; }
    static const char *const merges[] = {"h e", "l l", "ll o", "\xC4\xA0 w", "o r"};
    uint32_t mlens[5];
    for (int i = 0; i < 5; i++) mlens[i] = (uint32_t)strlen(merges[i]);
    struct gguf_writer *w;
    if (kvb_gguf_writer_init(&w) != KVB_OK) return 1;
    kvb_gguf_writer_str(w, "general.architecture", "llama");
    kvb_gguf_writer_str(w, "tokenizer.ggml.model", "gpt2");
    kvb_gguf_writer_str(w, "tokenizer.ggml.pre", pre);
    kvb_gguf_writer_arr_str(w, "tokenizer.ggml.tokens", toks, lens, (uint64_t)n);
    kvb_gguf_writer_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, types, (uint64_t)n);
    kvb_gguf_writer_arr_str(w, "tokenizer.ggml.merges", merges, mlens, 5);
    kvb_gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", 261);
    kvb_gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", 262);
    kvb_gguf_writer_bool(w, "tokenizer.ggml.add_bos_token", true);
    char path[4096];
    snprintf(path, sizeof path, "%s/bpe-%s.gguf", dir, pre);
    kvb_status st = kvb_gguf_writer_write(w, path);
    kvb_gguf_writer_free(w);
    return st != KVB_OK;
}

static int session_seeds(const char *model_path, const char *dir) {
    struct kvb_model *m;
    struct kvb_model_params mp = kvb_model_default_params();
    if (kvb_model_load(model_path, &mp, &m) != KVB_OK) { fprintf(stderr, "make_seeds: %s\n", kvb_last_error()); return 1; }
    struct kvb_batch_params bp = kvb_batch_default_params();
    bp.kv_pool_bytes = (size_t)8 << 20;
    struct kvb_batch *b;
    if (kvb_batch_init(m, &bp, &b) != KVB_OK) return 1;
    struct kvb_model_info mi;
    kvb_model_get_info(m, &mi);
    /* the last one with recall: its image holds a cold tier (cache image version 4); a hybrid
     * model's images hold its recurrent state instead (recall is refused there) */
    const enum kvb_policy_id ids[] = {KVB_POLICY_FULL, KVB_POLICY_STREAMING, KVB_POLICY_H2O, KVB_POLICY_SNAPKV, KVB_POLICY_STREAMING};
    for (int i = 0; i < (mi.n_rec_layers ? 4 : 5); i++) {
        struct kvb_seq_params sp = kvb_seq_default_params();
        sp.kv.policy = kvb_policy_default_params(ids[i]);
        if (ids[i] != KVB_POLICY_FULL) { sp.kv.policy.budget = 8; sp.kv.policy.n_sink = 2; sp.kv.policy.obs_window = 2; }
        if (i == 4) sp.kv.recall = (struct kvb_recall_params){2, 1, 1 << 16, NULL, KVB_RECALL_BOUNDS};
        sp.max_tokens = 6;
        sp.ignore_eos = true;
        sp.n_ctx = 64;
        const int32_t prompt[10] = {1, 5, 9, 13, 17, 21, 25, 29, 33, 37};
        int32_t id, adv, failed;
        if (kvb_batch_add(b, &sp, prompt, 10, &id) != KVB_OK) return 1;
        struct kvb_seq_info si;
        do {
            if (kvb_batch_step(b, &adv, &failed) != KVB_OK) return 1;
            kvb_batch_seq_info(b, id, &si);
        } while (si.state != KVB_SEQ_DONE);
        void *buf;
        size_t len;
        if (kvb_batch_seq_save(b, id, &buf, &len) != KVB_OK) return 1;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s%s%s.session", dir, mi.n_rec_layers ? "hybrid-" : "", kvb_policy_name(ids[i]), i == 4 ? "-recall" : "");
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, len, f) != len) return 1;
        fclose(f);
        kvb_buffer_free(buf);
        kvb_batch_remove(b, id);
    }
    kvb_batch_free(b);
    kvb_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--sessions")) return session_seeds(argv[2], argv[3]);
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: make_seeds DIR [GGUF_DIR]\n");
        return 2;
    }
    static const char *const pres[] = {"gpt-2", "llama-bpe", "qwen2", "smollm", "default", "dbrx",
                                       "smaug-bpe", "refact", "starcoder", "gpt-4o", "tekken", "qwen35"};
    for (int i = 0; argc == 3 && i < (int)(sizeof pres / sizeof *pres); i++)
        if (write_bpe_seed(argv[2], pres[i])) return 1;
    for (int i = 0; argc == 3 && i < 2; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.gguf", argv[2], i ? "bpe-gemma4" : "gemma4");
        if (g4_write_vocab(path, false, i ? "gpt2" : "gemma4") != KVB_OK) return 1;
    }
    for (int id = 0; id < KVB_POLICY_COUNT; id++) {
        struct kvb_cache_params cp = kvb_cache_default_params();
        cp.n_layer = 2; cp.n_kv_head = 2; cp.head_dim = 4; cp.kv.block_size = 4;
        cp.kv.max_distance = 5; /* lminfinite: positions capped */
        cp.kv.kv_dtype = id & 1 ? KVB_DTYPE_F16 : KVB_DTYPE_F32;
        cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, 4, 10000.0f, 1.0f, NULL};
        cp.kv.policy = kvb_policy_default_params((enum kvb_policy_id)id);
        if (id) cp.kv.policy.budget = 6;
        if (cp.kv.policy.n_sink >= 6) cp.kv.policy.n_sink = 2;
        cp.kv.policy.obs_window = 2;
        cp.pool_bytes = 1 << 20;
        struct kvb_cache *c;
        if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) return 1;
        float q[2 * 4] = {1, 2, 3, 4, 5, 6, 7, 8}, k[2 * 4] = {1, 0, 1, 0, 0, 1, 0, 1}, v[2 * 4] = {1, 1, 1, 1, 2, 2, 2, 2}, o[8];
        for (int t = 0; t < 9; t++)
            for (int l = 0; l < 2; l++) {
                k[0] = (float)t;
                kvb_cache_decode(c, l, q, 2, k, v, o, NULL);
            }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.kvb", argv[1], kvb_policy_name((enum kvb_policy_id)id));
        if (kvb_cache_save_file(c, path) != KVB_OK) return 1;
        kvb_cache_free(c);
    }
    /* a cache with a pinned span (kv.keep 3: flags bit 16), read past its budget */
    {
        struct kvb_cache_params cp = kvb_cache_default_params();
        cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = 4; cp.kv.block_size = 4; cp.kv.kv_dtype = KVB_DTYPE_F32;
        cp.kv.policy = kvb_policy_default_params(KVB_POLICY_H2O);
        cp.kv.policy.budget = 6;
        cp.kv.keep = 3;
        cp.pool_bytes = 1 << 20;
        struct kvb_cache *c;
        if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) return 1;
        float q[4] = {1, 2, 3, 4}, k[4] = {1, 0, 1, 0}, v[4] = {1, 1, 1, 1}, o[4];
        for (int t = 0; t < 14; t++) {
            k[1] = (float)t;
            kvb_cache_decode(c, 0, q, 1, k, v, o, NULL);
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/h2o-keep.kvb", argv[1]);
        if (kvb_cache_save_file(c, path) != KVB_OK) return 1;
        kvb_cache_free(c);
    }
    /* a cold-tier file (recall): 5 pages of 4 tokens, f16 K / q8_0 V rows of 32, one page partial */
    {
        const struct kvb_cold_geom g = {2, 4, 32, KVB_DTYPE_F16, KVB_DTYPE_Q8_0, 64, 34};
        struct kvb_cold *cold;
        if (kvb_cold_create(&g, 0, argv[1], &cold) != KVB_OK) return 1;
        uint8_t rec[1024] = {0};
        for (int p = 0; p < 5; p++) {
            for (int t = 0; t < 4; t++) kvb_cold_rec_pos(rec)[t] = p * 4 + t;
            for (int i = 0; i < 4 * (64 + 34); i++) kvb_cold_rec_k(&g, rec)[i] = (uint8_t)(i * 7 + p);
            if (kvb_cold_append(cold, rec, p % 2, p == 4 ? 2 : 4) < 0) return 1;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/cold-seed.kvc", argv[1]);
        if (rename(kvb_cold_path(cold), path) != 0) return 1;
        kvb_cold_free(cold);
    }
    /* quantized pages (image version 3): q8_0 K with q4_0 V, and q4_0 K with bf16 V, 32 dims */
    for (int qi = 0; qi < 2; qi++) {
        struct kvb_cache_params cp = kvb_cache_default_params();
        cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = 32; cp.kv.block_size = 4;
        cp.kv.kv_dtype = qi ? KVB_DTYPE_Q4_0 : KVB_DTYPE_Q8_0;
        cp.kv.kv_dtype_v = qi ? KVB_DTYPE_BF16 : KVB_DTYPE_Q4_0;
        cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, 32, 10000.0f, 1.0f, NULL};
        cp.kv.policy = kvb_policy_default_params(qi ? KVB_POLICY_H2O : KVB_POLICY_STREAMING);
        cp.kv.policy.budget = 6;
        cp.kv.policy.n_sink = 2;
        cp.pool_bytes = 1 << 20;
        struct kvb_cache *c;
        if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) return 1;
        float q[32], k[32], v[32], o[32];
        for (int t = 0; t < 9; t++) {
            for (int i = 0; i < 32; i++) { q[i] = (float)((i * 7 + t) % 11) - 5; k[i] = (float)((i * 3 + t) % 7) - 3; v[i] = (float)(i % 5) * 0.5f; }
            kvb_cache_decode(c, 0, q, 1, k, v, o, NULL);
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/quantized-%s.kvb", argv[1], qi ? "q4_0-bf16" : "q8_0-q4_0");
        if (kvb_cache_save_file(c, path) != KVB_OK) return 1;
        kvb_cache_free(c);
    }
    /* latent rows (head_dim_v, flags bit 512: no V rows), q8_0 without and
     * f16 with recall (version 4: cold pages of K rows only) */
    for (int li = 0; li < 2; li++) {
        struct kvb_cache_params cp = kvb_cache_default_params();
        cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = 64; cp.head_dim_v = 32; cp.kv.block_size = 4;
        cp.kv.kv_dtype = li ? KVB_DTYPE_F16 : KVB_DTYPE_Q8_0;
        cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, 32, 10000.0f, 1.0f, NULL};
        cp.kv.policy = kvb_policy_default_params(KVB_POLICY_H2O);
        cp.kv.policy.budget = 6;
        cp.kv.policy.n_sink = 2;
        cp.kv.pos_mode = KVB_POS_ORIGINAL;
        cp.pool_bytes = 1 << 20;
        if (li) cp.kv.recall = (struct kvb_recall_params){2, 1, 1 << 16, NULL, KVB_RECALL_BOUNDS};
        struct kvb_cache *c;
        if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) return 1;
        float q[2 * 64], k[64], o[2 * 32];
        for (int t = 0; t < 15; t++) {
            for (int i = 0; i < 64; i++) { q[i] = q[64 + i] = (float)((i * 7 + t) % 11) - 5; k[i] = (float)((i * 3 + t) % 7) - 3; }
            kvb_cache_decode(c, 0, q, 2, k, NULL, o, NULL);
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/latent-%s.kvb", argv[1], li ? "f16-recall" : "q8_0");
        if (kvb_cache_save_file(c, path) != KVB_OK) return 1;
        kvb_cache_free(c);
    }
    /* caches with recall (image version 4): cold pages, a staged page and
     * recall areas; streaming (capped positions: shadows) and h2o */
    for (int ri = 0; ri < 2; ri++) {
        struct kvb_cache_params cp = kvb_cache_default_params();
        cp.n_layer = 1; cp.n_kv_head = 2; cp.head_dim = 8; cp.kv.block_size = 4;
        cp.kv.kv_dtype = ri ? KVB_DTYPE_F16 : KVB_DTYPE_F32;
        cp.kv.max_distance = 12;
        cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, 8, 10000.0f, 1.0f, NULL};
        cp.kv.policy = kvb_policy_default_params(ri ? KVB_POLICY_H2O : KVB_POLICY_STREAMING);
        cp.kv.policy.budget = 6;
        cp.kv.policy.n_sink = 2;
        cp.pool_bytes = 1 << 20;
        cp.kv.recall = (struct kvb_recall_params){2, 1 + ri, 1 << 16, NULL, KVB_RECALL_BOUNDS};
        struct kvb_cache *c;
        if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) return 1;
        float q[4 * 8], k[2 * 8], v[2 * 8], o[4 * 8];
        for (int t = 0; t < 23; t++) {
            for (int i = 0; i < 32; i++) q[i] = (float)((i * 7 + t) % 11) - 5;
            for (int i = 0; i < 16; i++) { k[i] = (float)((i * 3 + t) % 7) - 3; v[i] = (float)(i % 5) * 0.5f; }
            kvb_cache_decode(c, 0, q, 4, k, v, o, NULL);
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/recall-%s.kvb", argv[1], ri ? "h2o" : "streaming");
        if (kvb_cache_save_file(c, path) != KVB_OK) return 1;
        kvb_cache_free(c);
    }
    /* sliding-window layers (flags 4): layer 0 a window of 5 with its own RoPE, a softcap, recall on layer 1 */
    {
        struct kvb_cache_params cp = kvb_cache_default_params();
        cp.n_layer = 2; cp.n_kv_head = 1; cp.head_dim = 8; cp.kv.block_size = 2;
        cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, 8, 1000000.0f, 0.125f, NULL};
        cp.rope_swa = (struct kvb_rope){KVB_ROPE_NEOX, 8, 10000.0f, 1.0f, NULL};
        cp.attn_softcap = 50.0f;
        cp.kv.policy = kvb_policy_default_params(KVB_POLICY_H2O);
        cp.kv.policy.budget = 6;
        cp.kv.policy.n_sink = 1;
        cp.kv.recall = (struct kvb_recall_params){2, 1, 1 << 16, NULL, KVB_RECALL_BOUNDS};
        struct kvb_kv_layer win = {0, kvb_policy_default_params(KVB_POLICY_WINDOW)};
        win.policy.n_sink = 0;
        win.policy.budget = 5;
        cp.kv.layers = &win;
        cp.kv.n_layers = 1;
        cp.pool_bytes = 1 << 20;
        struct kvb_cache *c;
        if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) return 1;
        float q[8], k[8], v[8], o[8];
        for (int t = 0; t < 17; t++)
            for (int l = 0; l < 2; l++) {
                for (int i = 0; i < 8; i++) { q[i] = (float)((i * 7 + t) % 11) - 5; k[i] = (float)((i * 3 + t) % 7) - 3; v[i] = (float)(i % 5) * 0.5f; }
                kvb_cache_decode(c, l, q, 1, k, v, o, NULL);
            }
        char path[4096];
        snprintf(path, sizeof path, "%s/windows.kvb", argv[1]);
        if (kvb_cache_save_file(c, path) != KVB_OK) return 1;
        kvb_cache_free(c);
    }
    { /* a hybrid model's cache (issue 50): two recurrent layers with their state rows beside one attention layer */
        static const uint8_t rec[3] = {1, 0, 1};
        struct kvb_cache_params cp = kvb_cache_default_params();
        cp.n_layer = 3; cp.n_kv_head = 1; cp.head_dim = 8;
        cp.kv.kv_dtype = KVB_DTYPE_F32;
        cp.kv.block_size = 4;
        cp.kv.policy = kvb_policy_default_params(KVB_POLICY_STREAMING);
        cp.kv.policy.budget = 6;
        cp.kv.policy.n_sink = 2;
        cp.recurrent = rec;
        cp.state_rows = 5;
        cp.state_row_floats = 8;
        cp.pool_bytes = 1 << 20;
        struct kvb_cache *c;
        if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) return 1;
        float q[8], k[8], v[8], o[8];
        for (int t = 0; t < 9; t++) {
            for (int i = 0; i < 8; i++) { q[i] = (float)((i * 5 + t) % 9) - 4; k[i] = (float)((i * 3 + t) % 7) - 3; v[i] = (float)(i % 5) * 0.5f; }
            if (kvb_cache_decode(c, 1, q, 1, k, v, o, NULL) != KVB_OK) return 1;
            for (int l = 0; l < 3; l += 2) {
                float *const *rows;
                if (kvb_cache_state(c, l, 1, &rows) != KVB_OK) return 1;
                for (int r = 0; r < 5; r++)
                    for (int i = 0; i < 8; i++) rows[r][i] = rows[r][i] * 0.5f + (float)(r + i + t);
            }
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/recurrent.kvb", argv[1]);
        if (kvb_cache_save_file(c, path) != KVB_OK) return 1;
        kvb_cache_free(c);
    }
    { /* Gemma 4's cache (issue 50): a window layer of 4 KV heads rotating half its dims, a global layer of 2, and readers of each */
        static const int32_t src[4] = {-1, -1, 0, 1}, heads[4] = {4, 2, 4, 2};
        struct kvb_kv_layer win[2] = {{0, kvb_policy_default_params(KVB_POLICY_WINDOW)}, {2, kvb_policy_default_params(KVB_POLICY_WINDOW)}};
        for (int i = 0; i < 2; i++) { win[i].policy.n_sink = 0; win[i].policy.budget = 5; }
        struct kvb_cache_params cp = kvb_cache_default_params();
        cp.n_layer = 4; cp.n_kv_head = 4; cp.head_dim = 8;
        cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, 8, 1000000.0f, 1.0f, NULL};
        cp.rope_swa = (struct kvb_rope){KVB_ROPE_NEOX, 4, 10000.0f, 1.0f, NULL};
        cp.kv.kv_dtype = KVB_DTYPE_F16;
        cp.kv.block_size = 4;
        cp.kv.layers = win;
        cp.kv.n_layers = 2;
        cp.kv_source = src;
        cp.kv_heads = heads;
        cp.pool_bytes = 1 << 20;
        struct kvb_cache *c;
        if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) return 1;
        float q[8 * 8], k[4 * 8], v[4 * 8], o[8 * 8];
        for (int t = 0; t < 9; t++)
            for (int l = 0; l < 4; l++) {
                for (int i = 0; i < 64; i++) q[i] = (float)((i * 5 + t + l) % 9) - 4;
                for (int i = 0; i < 32; i++) { k[i] = (float)((i * 3 + t) % 7) - 3; v[i] = (float)(i % 5) * 0.5f; }
                if (kvb_cache_decode(c, l, q, 8, src[l] < 0 ? k : NULL, src[l] < 0 ? v : NULL, o, NULL) != KVB_OK) return 1;
            }
        char path[4096];
        snprintf(path, sizeof path, "%s/shared-kv.kvb", argv[1]);
        if (kvb_cache_save_file(c, path) != KVB_OK) return 1;
        kvb_cache_free(c);
    }
    return 0;
}
