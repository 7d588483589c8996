// dump_logits: run a GGUF model with llama.cpp on the CPU and write the logits of every fed token.
//
// usage: dump_logits MODEL.gguf OUT.bin [--tokens "1,2,3"] [--mode prompt|decode] [--threads N]
//                    [--kv-type f32|f16] [--flash-attn off|on|auto] [--n-ctx N] [-v]
//
// OUT.bin: raw float32 little-endian, [n_tokens][n_vocab], row i = logits after token i.
// stdout:  one JSON line {"n_tokens":..,"n_vocab":..,"arch":"..",...}
// Defaults: 24 tokens (ids 1..24 modulo n_vocab), mode prompt, 2 threads, f32 KV cache, flash attention off.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static bool g_verbose = false;

static void log_cb(enum ggml_log_level level, const char * text, void * /*ud*/) {
    if (g_verbose || level == GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

static void usage(const char * argv0) {
    fprintf(stderr,
        "usage: %s MODEL.gguf OUT.bin [--tokens \"1,2,3,...\"] [--mode prompt|decode] [--threads N]\n"
        "          [--kv-type f32|f16] [--flash-attn off|on|auto] [--n-ctx N] [-v]\n", argv0);
}

static bool parse_tokens(const char * s, std::vector<llama_token> & out) {
    out.clear();
    const char * p = s;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        char * end = nullptr;
        long v = strtol(p, &end, 10);
        if (end == p) return false;
        out.push_back((llama_token) v);
        p = end;
    }
    return !out.empty();
}

int main(int argc, char ** argv) {
    if (argc < 3) { usage(argv[0]); return 2; }
    const char * model_path = argv[1];
    const char * out_path   = argv[2];
    const char * tokens_arg = nullptr;
    std::string mode = "prompt";
    int n_threads = 2;
    int n_ctx_req = 0;
    ggml_type kv_type = GGML_TYPE_F32;
    bool extra_bufts = true;
    llama_flash_attn_type fa = LLAMA_FLASH_ATTN_TYPE_DISABLED;

    for (int i = 3; i < argc; i++) {
        std::string a = argv[i];
        auto need = [&](void) -> const char * {
            if (i + 1 >= argc) { usage(argv[0]); exit(2); }
            return argv[++i];
        };
        if (a == "--tokens")        tokens_arg = need();
        else if (a == "--mode")     mode = need();
        else if (a == "--threads")  n_threads = atoi(need());
        else if (a == "--n-ctx")    n_ctx_req = atoi(need());
        else if (a == "--kv-type") {
            std::string t = need();
            if (t == "f32") kv_type = GGML_TYPE_F32;
            else if (t == "f16") kv_type = GGML_TYPE_F16;
            else { fprintf(stderr, "bad --kv-type %s\n", t.c_str()); return 2; }
        } else if (a == "--flash-attn") {
            std::string t = need();
            if (t == "off") fa = LLAMA_FLASH_ATTN_TYPE_DISABLED;
            else if (t == "on") fa = LLAMA_FLASH_ATTN_TYPE_ENABLED;
            else if (t == "auto") fa = LLAMA_FLASH_ATTN_TYPE_AUTO;
            else { fprintf(stderr, "bad --flash-attn %s\n", t.c_str()); return 2; }
        } else if (a == "--no-repack") extra_bufts = false; /* no AMX/repacked weights (this peer's AMX crashes on quantized prompt batches) */
        else if (a == "-v" || a == "--verbose") g_verbose = true;
        else { fprintf(stderr, "unknown argument: %s\n", a.c_str()); usage(argv[0]); return 2; }
    }
    if (mode != "prompt" && mode != "decode") { fprintf(stderr, "bad --mode %s\n", mode.c_str()); return 2; }
    if (n_threads < 1) n_threads = 1;

    llama_log_set(log_cb, nullptr);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = extra_bufts;
    llama_model * model = llama_model_load_from_file(model_path, mp);
    if (!model) { fprintf(stderr, "failed to load %s\n", model_path); return 1; }

    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    char arch[128] = "unknown";
    llama_model_meta_val_str(model, "general.architecture", arch, sizeof(arch));

    std::vector<llama_token> tokens;
    if (tokens_arg) {
        if (!parse_tokens(tokens_arg, tokens)) { fprintf(stderr, "bad --tokens\n"); return 2; }
        for (llama_token t : tokens) {
            if (t < 0 || t >= n_vocab) { fprintf(stderr, "token %d out of range [0,%d)\n", t, n_vocab); return 2; }
        }
    } else {
        for (int i = 1; i <= 24; i++) tokens.push_back((llama_token) (i % n_vocab));
    }
    const int n_tokens = (int) tokens.size();

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx           = n_ctx_req > 0 ? (uint32_t) n_ctx_req : (uint32_t) (n_tokens < 256 ? 256 : n_tokens);
    cp.n_batch         = n_tokens;  // whole prompt in one llama_decode
    cp.n_ubatch        = n_tokens;  // and in one micro-batch
    cp.n_seq_max       = 1;
    cp.n_threads       = n_threads;
    cp.n_threads_batch = n_threads;
    cp.type_k          = kv_type;
    cp.type_v          = kv_type;
    cp.flash_attn_type = fa;
    cp.no_perf         = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "failed to create context\n"); return 1; }

    std::vector<float> logits((size_t) n_tokens * n_vocab);
    if (mode == "prompt") {
        llama_batch b = llama_batch_init(n_tokens, 0, 1);
        for (int i = 0; i < n_tokens; i++) {
            b.token[i] = tokens[i];
            b.pos[i] = i;
            b.n_seq_id[i] = 1;
            b.seq_id[i][0] = 0;
            b.logits[i] = 1;
        }
        b.n_tokens = n_tokens;
        int rc = llama_decode(ctx, b);
        if (rc != 0) { fprintf(stderr, "llama_decode failed: %d\n", rc); return 1; }
        for (int i = 0; i < n_tokens; i++) {
            const float * l = llama_get_logits_ith(ctx, i);
            if (!l) { fprintf(stderr, "no logits for token %d\n", i); return 1; }
            memcpy(&logits[(size_t) i * n_vocab], l, sizeof(float) * n_vocab);
        }
        llama_batch_free(b);
    } else {
        llama_batch b = llama_batch_init(1, 0, 1);
        for (int i = 0; i < n_tokens; i++) {
            b.token[0] = tokens[i];
            b.pos[0] = i;
            b.n_seq_id[0] = 1;
            b.seq_id[0][0] = 0;
            b.logits[0] = 1;
            b.n_tokens = 1;
            int rc = llama_decode(ctx, b);
            if (rc != 0) { fprintf(stderr, "llama_decode failed at token %d: %d\n", i, rc); return 1; }
            const float * l = llama_get_logits_ith(ctx, 0);
            if (!l) { fprintf(stderr, "no logits for token %d\n", i); return 1; }
            memcpy(&logits[(size_t) i * n_vocab], l, sizeof(float) * n_vocab);
        }
        llama_batch_free(b);
    }

    FILE * f = fopen(out_path, "wb");
    if (!f) { fprintf(stderr, "cannot open %s\n", out_path); return 1; }
    if (fwrite(logits.data(), sizeof(float), logits.size(), f) != logits.size()) { fprintf(stderr, "write failed\n"); return 1; }
    fclose(f);

    printf("{\"n_tokens\":%d,\"n_vocab\":%d,\"arch\":\"%s\",\"mode\":\"%s\",\"n_ctx\":%u,\"kv_type\":\"%s\",\"flash_attn\":\"%s\",\"n_swa\":%d,\"threads\":%d}\n",
        n_tokens, n_vocab, arch, mode.c_str(), llama_n_ctx(ctx), kv_type == GGML_TYPE_F32 ? "f32" : "f16",
        llama_flash_attn_type_name(fa), llama_model_n_swa(model), n_threads);

    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
