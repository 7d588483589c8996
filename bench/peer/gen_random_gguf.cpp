// gen_random_gguf: write a small random-weight GGUF for one llama.cpp architecture (no vocabulary: "no_vocab").
//
// llama.cpp builds the model skeleton from the metadata (llama_model_init_from_user), fills every tensor it creates
// through our callback, and we write the same metadata plus those tensors to OUT.gguf. Unlike test-llama-archs -o,
// this also works for the architectures whose hparams llama_model_saver cannot round-trip (gemma3, olmo2, ...),
// since the metadata written is exactly the metadata the model was built from.
//
// usage: gen_random_gguf ARCH OUT.gguf [--seed S] [--n-vocab 128] [--n-embd 256] [--n-head 4] [--n-head-kv 2]
//          [--n-ff 384] [--n-layer 2] [--head-dim D] [--n-ctx-train 2048] [--rope-base 10000] [--eps 1e-5]
//          [--swa N] [--swa-pattern P] [--std 0.02] [--f16] [--kv NAME=TYPE:VALUE ...] [--drop REGEX ...] [--plain]
//          [--mean REGEX=M ...]
//   --kv: extra metadata (it replaces a key written from the flags above); TYPE is u32|i32|f32|bool|str, or an array
//         u32[]|i32[]|f32[]|bool[] of comma-separated values; a leading '@' in NAME stands for "ARCH"
//         (e.g. --kv @.attn_logit_softcapping=f32:50 --kv @.final_logit_softcapping=f32:30,
//          --kv @.attention.sliding_window_pattern=bool[]:1,1,0,1).
//   weights ~ N(0, std); tensors whose name contains "norm", the RoPE frequency factors (rope_freqs, rope_factors_long,
//   rope_factors_short: divisors of the rotary frequencies) and gemma4's layer_output_scale (it multiplies the whole
//   residual stream), ~ 1 + N(0, std) (so RMS/LayerNorm scales are ~1).
//   --mean REGEX=M (repeatable; the first whose REGEX std::regex_search finds in the name wins): those tensors ~ M + N(0, std)
//   (e.g. gemma4's router scale and q/k norms, so that its routing and unscaled attention scores are not near ties or one-hot).
//   --f16: store 2-D weight matrices as F16 (1-D tensors, ssm_conv1d, Mamba-2's ssm_a/ssm_d/ssm_norm stay F32), done by a second build pass.
//   llama_model_init_from_user creates EVERY optional tensor the architecture knows (biases, rope_freqs, per-tensor
//   ".scale"/".input_scale" multipliers, ...). The file holds only the tensors that survive:
//   --drop REGEX   (repeatable, std::regex_search on the tensor name) leaves matching tensors out of the file;
//   --plain        = --drop '\.(scale|input_scale)$' --drop '^rope_(freqs|factors_long|factors_short)\.weight$' (biases stay; add --drop '\.bias$').
//   llama.cpp then treats the dropped tensors as absent when it loads OUT.gguf.
#include "llama.h"
#include "gguf.h"
#include "ggml-backend.h"

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <regex>
#include <string>
#include <vector>

struct fill_state {
    uint64_t seed;
    float std;
    std::vector<ggml_tensor *> tensors;
    std::vector<std::pair<std::regex, float>> means; // --mean: the first match sets the mean
};

static uint64_t fnv1a(const char * s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) { h ^= (unsigned char) *s; h *= 1099511628211ull; }
    return h;
}

static void fill_tensor(ggml_tensor * t, void * ud) {
    fill_state * st = (fill_state *) ud;
    st->tensors.push_back(t);
    std::mt19937_64 gen(fnv1a(t->name) ^ (st->seed * 0x9E3779B97F4A7C15ull));
    std::normal_distribution<float> dis(0.0f, st->std);
    const bool is_norm = strstr(t->name, "norm") != nullptr || strncmp(t->name, "rope_f", 6) == 0 ||
                         strstr(t->name, "layer_output_scale") != nullptr;
    float mean = is_norm ? 1.0f : 0.0f;
    for (const auto & m : st->means) {
        if (std::regex_search(t->name, m.first)) { mean = m.second; break; }
    }
    const int64_t ne = ggml_nelements(t);
    std::vector<float> v(ne);
    for (int64_t i = 0; i < ne; i++) v[i] = mean + dis(gen);
    if (t->type == GGML_TYPE_F32) {
        ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
    } else if (t->type == GGML_TYPE_F16) {
        std::vector<ggml_fp16_t> h(ne);
        ggml_fp32_to_fp16_row(v.data(), h.data(), ne);
        ggml_backend_tensor_set(t, h.data(), 0, ggml_nbytes(t));
    } else {
        fprintf(stderr, "unexpected tensor type for %s\n", t->name);
        exit(1);
    }
}

static void quiet_log(enum ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR || getenv("GEN_VERBOSE")) fputs(text, stderr);
}

static void usage(const char * a0) {
    fprintf(stderr,
        "usage: %s ARCH OUT.gguf [--seed S] [--n-vocab 128] [--n-embd 256] [--n-head 4] [--n-head-kv 2]\n"
        "         [--n-ff 384] [--n-layer 2] [--head-dim D] [--n-ctx-train 2048] [--rope-base 10000] [--eps 1e-5]\n"
        "         [--swa N] [--swa-pattern P] [--std 0.02] [--f16] [--kv NAME=TYPE:VALUE ...] [--drop REGEX ...] [--plain]\n"
        "         [--mean REGEX=M ...]\n"
        "  TYPE: u32|i32|f32|bool|str, or u32[]|i32[]|f32[]|bool[] with comma-separated VALUEs\n", a0);
}

static bool add_kv_spec(gguf_context * g, const std::string & arch, const std::string & spec) {
    size_t eq = spec.find('='), colon = spec.find(':', eq == std::string::npos ? 0 : eq);
    if (eq == std::string::npos || colon == std::string::npos) return false;
    std::string name = spec.substr(0, eq), type = spec.substr(eq + 1, colon - eq - 1), val = spec.substr(colon + 1);
    if (!name.empty() && name[0] == '@') name = arch + name.substr(1);
    if (type.size() > 2 && type.compare(type.size() - 2, 2, "[]") == 0) { // array: comma-separated values
        const std::string et = type.substr(0, type.size() - 2);
        std::vector<std::string> items;
        for (size_t p = 0; p <= val.size();) {
            size_t c = val.find(',', p);
            if (c == std::string::npos) c = val.size();
            items.push_back(val.substr(p, c - p));
            p = c + 1;
        }
        // every item a whole number (or float) of its type: an empty or bad item refuses the spec
        for (const auto & it : items) {
            char * end = nullptr;
            errno = 0;
            if (et == "f32") strtof(it.c_str(), &end);
            else if (et == "u32") { strtoull(it.c_str(), &end, 10); if (!it.empty() && (it[0] == '-' || strtoull(it.c_str(), nullptr, 10) > 0xFFFFFFFFull)) return false; }
            else if (et == "i32") { const long long v = strtoll(it.c_str(), &end, 10); if (v < INT32_MIN || v > INT32_MAX) return false; }
            else continue;
            if (it.empty() || errno || *end) return false;
        }
        if (et == "u32") {
            std::vector<uint32_t> a;
            for (const auto & it : items) a.push_back((uint32_t) strtoull(it.c_str(), nullptr, 10));
            gguf_set_arr_data(g, name.c_str(), GGUF_TYPE_UINT32, a.data(), a.size());
        } else if (et == "i32") {
            std::vector<int32_t> a;
            for (const auto & it : items) a.push_back((int32_t) strtoll(it.c_str(), nullptr, 10));
            gguf_set_arr_data(g, name.c_str(), GGUF_TYPE_INT32, a.data(), a.size());
        } else if (et == "f32") {
            std::vector<float> a;
            for (const auto & it : items) a.push_back(strtof(it.c_str(), nullptr));
            gguf_set_arr_data(g, name.c_str(), GGUF_TYPE_FLOAT32, a.data(), a.size());
        } else if (et == "bool") {
            std::vector<int8_t> a;
            for (const auto & it : items) a.push_back(it == "1" || it == "true");
            gguf_set_arr_data(g, name.c_str(), GGUF_TYPE_BOOL, a.data(), a.size());
        } else {
            return false;
        }
        return true;
    }
    if (type == "u32") gguf_set_val_u32(g, name.c_str(), (uint32_t) strtoul(val.c_str(), nullptr, 10));
    else if (type == "i32") gguf_set_val_i32(g, name.c_str(), (int32_t) strtol(val.c_str(), nullptr, 10));
    else if (type == "f32") gguf_set_val_f32(g, name.c_str(), strtof(val.c_str(), nullptr));
    else if (type == "bool") gguf_set_val_bool(g, name.c_str(), val == "1" || val == "true");
    else if (type == "str") gguf_set_val_str(g, name.c_str(), val.c_str());
    else return false;
    return true;
}

int main(int argc, char ** argv) {
    if (argc < 3) { usage(argv[0]); return 2; }
    const std::string arch = argv[1];
    const char * out = argv[2];
    uint64_t seed = 42;
    uint32_t n_vocab = 128, n_embd = 256, n_head = 4, n_head_kv = 2, n_ff = 384, n_layer = 2, head_dim = 0;
    uint32_t n_ctx_train = 2048, swa = 0, swa_pattern = 0;
    float rope_base = 10000.0f, eps = 1e-5f, stdv = 0.02f;
    bool f16 = false;
    std::vector<std::string> kvs;
    std::vector<std::regex> drops;
    std::vector<std::pair<std::regex, float>> means;
    for (int i = 3; i < argc; i++) {
        std::string a = argv[i];
        auto nxt = [&]() -> const char * { if (i + 1 >= argc) { usage(argv[0]); exit(2); } return argv[++i]; };
        if (a == "--seed") seed = strtoull(nxt(), nullptr, 10);
        else if (a == "--n-vocab") n_vocab = atoi(nxt());
        else if (a == "--n-embd") n_embd = atoi(nxt());
        else if (a == "--n-head") n_head = atoi(nxt());
        else if (a == "--n-head-kv") n_head_kv = atoi(nxt());
        else if (a == "--n-ff") n_ff = atoi(nxt());
        else if (a == "--n-layer") n_layer = atoi(nxt());
        else if (a == "--head-dim") head_dim = atoi(nxt());
        else if (a == "--n-ctx-train") n_ctx_train = atoi(nxt());
        else if (a == "--rope-base") rope_base = strtof(nxt(), nullptr);
        else if (a == "--eps") eps = strtof(nxt(), nullptr);
        else if (a == "--swa") swa = atoi(nxt());
        else if (a == "--swa-pattern") swa_pattern = atoi(nxt());
        else if (a == "--std") stdv = strtof(nxt(), nullptr);
        else if (a == "--f16") f16 = true;
        else if (a == "--kv") kvs.push_back(nxt());
        else if (a == "--drop") drops.emplace_back(nxt());
        else if (a == "--mean") {
            const std::string spec = nxt();
            const size_t eq = spec.rfind('=');
            if (eq == std::string::npos || eq == 0) { fprintf(stderr, "bad --mean %s\n", spec.c_str()); return 2; }
            means.emplace_back(std::regex(spec.substr(0, eq)), strtof(spec.c_str() + eq + 1, nullptr));
        }
        else if (a == "--plain") { drops.emplace_back("\\.(scale|input_scale)$"); drops.emplace_back("^rope_(freqs|factors_long|factors_short)\\.weight$"); }
        else { fprintf(stderr, "unknown argument %s\n", a.c_str()); usage(argv[0]); return 2; }
    }

    llama_log_set(quiet_log, nullptr);
    llama_backend_init();

    gguf_context * meta = gguf_init_empty();
    auto K = [&](const char * suffix) { static std::string s; s = arch + "." + suffix; return s.c_str(); };
    gguf_set_val_str(meta, "general.architecture", arch.c_str());
    gguf_set_val_str(meta, "general.name", ("random-" + arch).c_str());
    gguf_set_val_u32(meta, K("vocab_size"), n_vocab);
    gguf_set_val_u32(meta, K("context_length"), n_ctx_train);
    gguf_set_val_u32(meta, K("embedding_length"), n_embd);
    gguf_set_val_u32(meta, K("block_count"), n_layer);
    gguf_set_val_u32(meta, K("feed_forward_length"), n_ff);
    gguf_set_val_u32(meta, K("attention.head_count"), n_head);
    gguf_set_val_u32(meta, K("attention.head_count_kv"), n_head_kv);
    gguf_set_val_f32(meta, K("attention.layer_norm_rms_epsilon"), eps);
    gguf_set_val_f32(meta, K("attention.layer_norm_epsilon"), eps);
    gguf_set_val_f32(meta, K("rope.freq_base"), rope_base);
    if (head_dim) {
        gguf_set_val_u32(meta, K("attention.key_length"), head_dim);
        gguf_set_val_u32(meta, K("attention.value_length"), head_dim);
    }
    if (swa) gguf_set_val_u32(meta, K("attention.sliding_window"), swa);
    if (swa_pattern) gguf_set_val_u32(meta, K("attention.sliding_window_pattern"), swa_pattern);
    gguf_set_val_str(meta, "tokenizer.ggml.model", "no_vocab");
    for (const auto & s : kvs) {
        if (!add_kv_spec(meta, arch, s)) { fprintf(stderr, "bad --kv %s\n", s.c_str()); return 2; }
    }

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;

    fill_state st{seed, stdv, {}, means};
    llama_model * model = llama_model_init_from_user(meta, fill_tensor, &st, mp);
    if (!model) { fprintf(stderr, "llama_model_init_from_user failed for arch %s\n", arch.c_str()); return 1; }

    if (f16) {
        // second pass: declare the 2-D weights as F16 in the metadata, which makes the loader create them as F16
        std::vector<std::pair<std::string, std::vector<int64_t>>> todo;
        for (ggml_tensor * t : st.tensors) {
            // the conv taps stay F32, as llama.cpp's converter keeps them (its CPU ssm_conv asserts F32 weights): Gated
            // DeltaNet's ssm_conv1d and lfm2's shortconv.conv; and Mamba-2's 2-D ssm_a, ssm_d (no .weight suffix) and ssm_norm
            // (a norm), which the converter keeps F32 too (ggml's CPU ssm_scan asserts an F32 A)
            const size_t nl = strlen(t->name);
            const bool m2_f32 = strstr(t->name, ".ssm_") != nullptr &&
                                ((nl > 2 && (!strcmp(t->name + nl - 2, "_a") || !strcmp(t->name + nl - 2, "_d"))) ||
                                 (nl > 16 && !strcmp(t->name + nl - 16, ".ssm_norm.weight")));
            if (ggml_n_dims(t) < 2 || gguf_find_tensor(meta, t->name) != -1 || strstr(t->name, "ssm_conv1d") != nullptr ||
                strstr(t->name, "shortconv.conv") != nullptr || m2_f32) continue;
            bool seen = false;
            for (auto & p : todo) seen = seen || p.first == t->name;
            if (!seen) todo.push_back({t->name, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}});
        }
        llama_model_free(model);
        ggml_init_params ip = { ggml_tensor_overhead() * (todo.size() + 1), nullptr, true };
        ggml_context * tctx = ggml_init(ip);
        for (auto & p : todo) {
            ggml_tensor * t = ggml_new_tensor(tctx, GGML_TYPE_F16, 4, p.second.data());
            ggml_set_name(t, p.first.c_str());
            gguf_add_tensor(meta, t);
        }
        st.tensors.clear();
        model = llama_model_init_from_user(meta, fill_tensor, &st, mp);
        ggml_free(tctx);
        if (!model) { fprintf(stderr, "second (f16) pass failed for arch %s\n", arch.c_str()); return 1; }
    }

    gguf_context * outg = gguf_init_empty();
    gguf_set_kv(outg, meta);
    gguf_set_val_u32(outg, "general.file_type", f16 ? 1u : 0u);
    size_t n_written = 0;
    for (ggml_tensor * t : st.tensors) {
        if (gguf_find_tensor(outg, t->name) != -1) continue; // duplicated (tied) tensors
        bool drop = false;
        for (const auto & re : drops) drop = drop || std::regex_search(t->name, re);
        if (drop) continue;
        gguf_add_tensor(outg, t);
        n_written++;
    }
    if (!gguf_write_to_file(outg, out, false)) { fprintf(stderr, "failed to write %s\n", out); return 1; }
    printf("{\"arch\":\"%s\",\"out\":\"%s\",\"n_tensors\":%zu,\"f16\":%s,\"seed\":%llu}\n", arch.c_str(), out,
        n_written, f16 ? "true" : "false", (unsigned long long) seed);
    gguf_free(outg);
    llama_model_free(model);
    gguf_free(meta);
    llama_backend_free();
    return 0;
}
