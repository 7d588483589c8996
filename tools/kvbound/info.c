/* info.c — `kvbound info -m FILE`: architecture, hyperparameters (sliding windows, Gated DeltaNet, short-conv and Mamba-2 layers, MTP layers too), tensors, KV bytes per token. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static void print_tokenizer(const struct kvb_vocab *vocab) {
    struct kvb_vocab_info v;
    kvb_vocab_get_info(vocab, &v);
    if (v.bpe) printf("tokenizer     byte-level BPE, pre %s%s, %d merges", v.pre, v.ignore_merges ? " (ignore_merges)" : "", (int)v.n_merges);
    else printf("tokenizer     SentencePiece%s", v.add_space_prefix ? ", space prefix" : "");
    printf("; %d tokens; bos %d, eos %d, eot %d, add_bos %s\n", (int)v.n_tokens, (int)v.bos, (int)v.eos, (int)v.eot, v.add_bos ? "yes" : "no");
}

static void print_chat_template(const char *tmpl) {
    enum kvb_chat_style cs;
    printf("chat template %s\n", !tmpl ? "none" : kvb_chat_detect(tmpl, &cs) == KVB_OK ? kvb_chat_style_name(cs) : "not recognized (chat uses chatml)");
}

static void print_tensors(const char *path) {
    struct kvb_tensor_info *t;
    int64_t n;
    if (kvb_gguf_tensors(path, &t, &n) != KVB_OK) return;
    printf("\n%-32s %-6s %-22s %12s\n", "tensor", "type", "shape", "bytes");
    for (int64_t i = 0; i < n; i++) {
        char shape[96];
        snprintf(shape, sizeof shape, "[%lld, %lld, %lld, %lld]", (long long)t[i].ne[0], (long long)t[i].ne[1], (long long)t[i].ne[2], (long long)t[i].ne[3]);
        printf("%-32s %-6s %-22s %12llu\n", t[i].name, kvb_type_name(t[i].type), shape, (unsigned long long)t[i].bytes);
    }
    if (!n) printf("(no tensors)\n");
    kvb_buffer_free(t);
}

/* A GGUF that holds only a vocabulary: what it has (why: the model load's error). */
static void print_vocab_only(const char *path, const struct kvb_vocab *vocab, const char *why) {
    printf("file          %s (gguf, vocabulary only: %s)\n", path, why);
    struct kvb_vocab_info vi;
    kvb_vocab_get_info(vocab, &vi);
    print_tokenizer(vocab);
    print_chat_template(vi.chat_template);
    print_tensors(path);
}

static void print_model(const char *path, const struct kvb_model *m) {
    struct kvb_model_info in;
    kvb_model_get_info(m, &in);
    printf("file          %s (%s)\n", path, in.source);
    printf("architecture  %s\n", in.arch);
    printf("vocab         %d\nembedding     %d\nlayers        %d\nheads         %d (KV heads %d, head dim %d)\nffn           %d\n",
           in.n_vocab, in.n_embd, in.n_layer, in.n_head, in.n_head_kv, in.head_dim, in.n_ff);
    printf("context       %d (trained)\nrms eps       %g\nrope          %s, base %g, dims %d, freq scale %g\n", in.n_ctx_train, (double)in.rms_eps,
           in.rope_type == KVB_ROPE_NEOX ? "neox" : in.rope_type == KVB_ROPE_NONE ? "none" : "interleaved", (double)in.rope_base, in.rope_dims,
           (double)in.rope_freq_scale);
    if (in.sliding_window > 0)
        printf("window        %d tokens on %d sliding-window layers, %d global layers\n", in.sliding_window, in.n_swa_layers,
               in.n_layer - in.n_swa_layers);
    if (in.n_expert > 0)
        printf("experts       %d per layer on %d layers, %d used per token, expert ffn %d (%zu expert weight bytes read per token)\n", in.n_expert,
               in.n_moe_layers, in.n_expert_used, in.n_ff_exp, in.expert_bytes_per_token);
    if (in.n_ff_shexp > 0) printf("shared        a dense ffn of %d on each expert layer, run on every token\n", in.n_ff_shexp);
    if (in.n_rec_layers > 0 && in.shortconv)
        printf("shortconv     %d short-conv layers (no KV): L_cache %d taps over %d channels; state %zu bytes a sequence\n", in.n_rec_layers,
               in.ssm_conv, in.n_embd, in.state_bytes);
    else if (in.n_rec_layers > 0 && in.mamba2)
        printf("mamba2        %d Mamba-2 layers (no KV): %d heads of %d, %d groups, state %d, conv %d taps; state %zu bytes a sequence\n",
               in.n_rec_layers, in.ssm_heads, in.ssm_inner / in.ssm_heads, in.ssm_groups, in.ssm_state, in.ssm_conv, in.state_bytes);
    else if (in.n_rec_layers > 0)
        printf("deltanet      %d Gated DeltaNet layers (no KV): %d key heads, %d value heads of %d, conv %d taps; state %zu bytes a sequence\n",
               in.n_rec_layers, in.ssm_groups, in.ssm_heads, in.ssm_state, in.ssm_conv, in.state_bytes);
    if (in.head_dim_swa > 0 || in.n_kv_shared > 0 || in.n_embd_per_layer > 0)
        printf("gemma4        window heads of %d (global %d, padded to it in the cache); %d KV-shared layers (no K/V of their own); "
               "per-layer embeddings of %d\n", in.head_dim_swa ? in.head_dim_swa : in.head_dim, in.head_dim, in.n_kv_shared, in.n_embd_per_layer);
    if (in.n_head_kv_swa > 0 || in.n_head_kv_global > 0)
        printf("kv heads      %d on the window layers, %d on the global ones (per layer)\n", in.n_head_kv_swa, in.n_head_kv_global);
    if (in.n_nextn_layers > 0) printf("mtp           %d multi-token-prediction layers (loaded, not run)\n", in.n_nextn_layers);
    if (in.features[0]) printf("features      %s\n", in.features);
    printf("output        %s\nqkv bias      %s\n", in.tied_output ? "tied to token embeddings" : "separate", in.has_qkv_bias ? "yes" : "no");
    printf("weights       %zu bytes (%s)\n", in.weight_bytes, kvb_type_name(in.weight_type));
    if (in.kv_lora_rank > 0)
        printf("KV per token  %zu bytes in f16 (%d layers x one latent row of %d dims x 2 bytes; no V rows: a token's value is its latent)\n",
               in.kv_bytes_per_token_f16, in.n_layer, in.head_dim);
    else if (in.n_head_kv_swa > 0 || in.n_head_kv_global > 0)
        printf("KV per token  %zu bytes in f16 (2 x each K/V-holding layer's KV heads x %d dims x 2 bytes)\n", in.kv_bytes_per_token_f16, in.head_dim);
    else
    printf("KV per token  %zu bytes in f16 (2 x %d %slayers x %d KV heads x %d dims x 2 bytes)\n", in.kv_bytes_per_token_f16,
           in.n_layer - in.n_rec_layers - in.n_kv_shared, in.n_rec_layers ? "attention " : in.n_kv_shared ? "K/V-holding " : "", in.n_head_kv, in.head_dim);
    print_tokenizer(kvb_model_vocab(m));
    struct kvb_vocab_info vi;
    kvb_vocab_get_info(kvb_model_vocab(m), &vi);
    print_chat_template(vi.chat_template);
    if (!strcmp(in.source, "gguf")) print_tensors(path);
}

int cmd_info(int argc, char **argv) {
    struct cli_model_opts mo; /* -m -z */
    cli_model_init(&mo, "info", CLI_MODEL_TOKENIZER, 0);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: kvbound info -m MODEL [-z TOKENIZER.bin]\n\nPrints the architecture, hyperparameters, tensor table with dtypes, and KV bytes per token.\n");
            return 0;
        }
        const int r = cli_model_option(&mo, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) { /* info has no options of its own: called unknown (or unexpected) */
            cli_opt_value("info", "", argc, argv, &i);
            return 2;
        }
    }
    if (!cli_model_required(&mo)) return 2;
    const struct kvb_model_params mp = cli_model_params(&mo);
    struct kvb_model *m;
    if (kvb_model_load(mo.path, &mp, &m) == KVB_OK) {
        print_model(mo.path, m);
        kvb_model_free(m);
        return 0;
    }
    char why[512];
    snprintf(why, sizeof why, "%s", kvb_last_error());
    struct kvb_vocab *vocab;
    if (!mo.tokenizer && kvb_vocab_load(mo.path, &vocab) == KVB_OK) { /* a vocab-only GGUF: what it has */
        print_vocab_only(mo.path, vocab, why);
        kvb_vocab_free(vocab);
        return 0;
    }
    fprintf(stderr, "kvbound: %s\n", why);
    return 1;
}
