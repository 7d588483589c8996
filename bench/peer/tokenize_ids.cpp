// tokenize_ids: llama.cpp's token ids for texts, with a vocab-only load (as llama-tokenize does).
//
// usage: tokenize_ids MODEL.gguf TEXTS [--pre NAME]
//
// TEXTS: texts separated (or each ended) by "\n__ggml_vocab_test__\n" (the layout of
// llama.cpp's models/ggml-vocab-*.gguf.inp). stdout: one line per text, its ids separated by
// spaces (the layout of the .out files), tokenized with no BOS/EOS and no special
// token parsing. --pre NAME loads the file with tokenizer.ggml.pre overridden to
// NAME (llama.cpp's key override; the vocabulary reads the key through it).
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static void log_cb(enum ggml_log_level level, const char * text, void * /*ud*/) {
    if (level == GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

int main(int argc, char ** argv) {
    if (argc != 3 && !(argc == 5 && !strcmp(argv[3], "--pre"))) {
        fprintf(stderr, "usage: %s MODEL.gguf TEXTS [--pre NAME]\n", argv[0]);
        return 2;
    }
    FILE * f = fopen(argv[2], "rb");
    if (!f) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 1;
    }
    std::string all;
    char buf[65536];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) all.append(buf, n);
    fclose(f);

    llama_log_set(log_cb, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    std::vector<llama_model_kv_override> ov;
    if (argc == 5) {
        llama_model_kv_override o = {};
        snprintf(o.key, sizeof o.key, "%s", "tokenizer.ggml.pre");
        o.tag = LLAMA_KV_OVERRIDE_TYPE_STR;
        snprintf(o.val_str, sizeof o.val_str, "%s", argv[4]);
        ov.push_back(o);
        ov.push_back(llama_model_kv_override{}); // the list ends with an empty key
        mp.kv_overrides = ov.data();
    }
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);

    const std::string sep = "\n__ggml_vocab_test__\n";
    size_t at = 0;
    for (;;) {
        size_t e = all.find(sep, at);
        std::string text = all.substr(at, e == std::string::npos ? std::string::npos : e - at);
        if (e == std::string::npos && text.empty() && at > 0) break; // the separator ends the last text
        std::vector<llama_token> ids(text.size() + 8);
        int n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), ids.data(), (int32_t) ids.size(), false, false);
        if (n < 0) {
            fprintf(stderr, "llama_tokenize failed (%d)\n", n);
            return 1;
        }
        for (int i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
        printf("\n");
        if (e == std::string::npos) break;
        at = e + sep.size();
    }
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
