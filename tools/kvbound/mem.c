/*
 * mem.c — `kvbound mem`: KV-cache memory, M = B x T x L x n_kv x (K row +
 * V row bytes), K and V each in its type, quantized types counted by their
 * blocks (q8_0: 34 bytes per 32 values) and optional page rounding. A bounded
 * policy's size does not depend on T; the saving is printed beside it. A
 * model's sliding-window layers (Gemma 2/3: its info's window and count, or
 * a preset's, or --window/--window-layers) hold min(W - 1, T) tokens
 * whatever the policy (what the cache keeps between steps; a step adds its
 * tokens), which governs the other (global) layers only. A hybrid model's
 * Gated DeltaNet layers (Qwen3.5/3.6: its info, or a preset's shape) hold no
 * K/V but a recurrent state of fixed size per sequence (f32: Hv Dk Dv + (K - 1)
 * C floats a layer, C = 2 Hk Dk + Hv Dv; with --block-size packed into pages
 * as the cache packs it), the same under every policy: K/V counts the
 * attention layers only, and the totals and the saving count the state.
 * Mamba-2 layers (Granite 4.0-H: its info, or a granite-4.0-h preset) hold
 * d_inner N + (K - 1) (d_inner + 2 G N) floats a layer the same way (rows of
 * N floats in pages).
 * Gemma 4's window layers have their own KV heads (held at the global head
 * size, padded: the cache has one), and its KV-shared layers hold nothing.
 * GB = 10^9 bytes (GiB with --gib), rounded to nearest. The options parse
 * into struct mem_opts; the shape comes from a preset, a model or the
 * flags; then a header, a row per tokens x batch, and the notes.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct preset {
    const char *name;
    int32_t layers, kv_heads, head_dim;
    int32_t window, window_layers; /* sliding-window layers (Gemma): W tokens on that many layers; 0: none */
    int32_t attn_every;            /* hybrid (Qwen3.5/3.6): every attn_every-th layer attention, the others Gated DeltaNet; 0: none */
    int32_t lin_k_heads, lin_v_heads, lin_dim, conv; /* Gated DeltaNet: key and value heads of lin_dim, conv taps */
    int32_t win_heads, win_dim;    /* Gemma 4: the window layers' KV heads and head size where they differ (0: kv_heads, head_dim) */
    int32_t shared, shared_win;    /* Gemma 4: KV-shared layers (no K/V of their own), of them window layers */
    int32_t mla_heads, mla_k, mla_v; /* latent attention (DeepSeek-V2/V3, Kimi-K2): the query heads and the per-head K and V sizes the
                                      * latent row (head_dim, one KV head) replaces; 0: none */
};

/* From the public model configs (num_hidden_layers, num_key_value_heads, head_dim; Gemma's sliding_window and
 * its window layers; the hybrids' full_attention_interval, linear_num_key_heads, linear_num_value_heads,
 * linear_key_head_dim (= linear_value_head_dim), linear_conv_kernel_dim). */
static const struct preset k_presets[] = {
    {"llama2-7b", 32, 32, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"llama2-13b", 40, 40, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"llama3-8b", 32, 8, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"llama3-70b", 80, 8, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"llama3.1-405b", 126, 8, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"mistral-7b", 32, 8, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"qwen2.5-7b", 28, 4, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"tinyllama-1.1b", 22, 4, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"smollm2-135m", 30, 3, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"gemma2-2b", 26, 4, 256, 4096, 13, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"gemma2-9b", 42, 8, 256, 4096, 21, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"gemma3-1b", 26, 1, 256, 512, 22, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"gemma3-4b", 34, 4, 256, 1024, 29, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"gemma3-27b", 62, 16, 128, 1024, 52, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    /* Qwen3.6-35B-A3B, its model card (huggingface.co/Qwen/Qwen3.6-35B-A3B): 40 layers laid out as
     * 10 x (3 Gated DeltaNet + 1 gated attention), attention 16 Q and 2 KV heads of 256, Gated DeltaNet
     * 32 V and 16 QK heads of 128; conv kernel 4 as every Qwen3.5/3.6 config.json (linear_conv_kernel_dim) */
    {"qwen3.6-35b-a3b", 40, 2, 256, 0, 0, 4, 16, 32, 128, 4, 0, 0, 0, 0, 0, 0, 0},
    /* Qwen3.5-27B, its config.json text_config (as copies of it on huggingface.co and the defaults of
     * Modular MAX's Qwen3_5Config quote it): num_hidden_layers 64, full_attention_interval 4,
     * num_key_value_heads 4, head_dim 256, linear_num_key_heads 16, linear_num_value_heads 48,
     * linear_key_head_dim 128, linear_conv_kernel_dim 4 */
    {"qwen3.5-27b", 64, 4, 256, 0, 0, 4, 16, 48, 128, 4, 0, 0, 0, 0, 0, 0, 0},
    /* Gemma 4, the text_config of each size (num_hidden_layers, num_global_key_value_heads and global_head_dim for the
     * global layers, num_key_value_heads and head_dim for the window ones, sliding_window, the layer_types pattern:
     * E2B 4 window + 1 global, the others 5 + 1; num_kv_shared_layers, the last layers, reading the last window and the
     * last global layer before them). E2B: 35 layers, 20 shared, so 12 window and 3 global layers hold K/V */
    {"gemma4-e2b", 35, 1, 512, 512, 12, 0, 0, 0, 0, 0, 1, 256, 20, 16, 0, 0, 0},
    {"gemma4-e4b", 42, 2, 512, 512, 20, 0, 0, 0, 0, 0, 2, 256, 18, 15, 0, 0, 0},
    {"gemma4-26b-a4b", 30, 2, 512, 1024, 25, 0, 0, 0, 0, 0, 8, 256, 0, 0, 0, 0, 0},
    {"gemma4-31b", 60, 4, 512, 1024, 50, 0, 0, 0, 0, 0, 16, 256, 0, 0, 0, 0, 0},
    /* GLM-4.5-Air and GLM-4.5, their config.json (num_hidden_layers 46 and 92, num_key_value_heads 8, head_dim 128); the
     * num_nextn_predict_layers MTP layer after them holds no K/V (it never runs, in llama.cpp as here) */
    {"glm-4.5-air", 46, 8, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"glm-4.5", 92, 8, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    /* DeepSeek-V3 / R1 and Kimi-K2, their config.json: num_hidden_layers 61, kv_lora_rank 512 + qk_rope_head_dim 64 = the latent
     * row of 576 per token and layer for num_attention_heads 128 (Kimi-K2: 64) heads of qk_nope_head_dim 128 + 64 = 192 (K) and
     * v_head_dim 128 (V) */
    {"deepseek-v3", 61, 1, 576, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 128, 192, 128},
    {"kimi-k2", 61, 1, 576, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 192, 128},
};

/* Mamba-2 hybrids (granitehybrid), from the public configs as recalled (not in the llama.cpp tree): num_hidden_layers,
 * the attention layers of layer_types, num_key_value_heads, head_dim; mamba_n_heads x mamba_d_head (d_inner),
 * mamba_d_state, mamba_n_groups, mamba_d_conv. Granite 4.0-H Tiny (7B-A1B): 40 layers, 4 attention with 4 KV heads of
 * 128, Mamba-2 48 x 64, state 128, 1 group, 4 taps; Small (32B-A9B): 40 layers, 4 attention with 8 KV heads of 128,
 * Mamba-2 128 x 64, state 128, 1 group, 4 taps. */
struct m2_preset {
    const char *name;
    int32_t layers, attn_layers, kv_heads, head_dim, inner, state, groups, heads, conv;
};
static const struct m2_preset k_m2_presets[] = {
    {"granite-4.0-h-tiny", 40, 4, 4, 128, 3072, 128, 1, 48, 4},
    {"granite-4.0-h-small", 40, 4, 8, 128, 8192, 128, 1, 128, 4},
};

/* Bytes of the K and V of `tokens` tokens: a K row and a V row of head_dim
 * elements per (layer, KV head), each in its type; with block_size > 0 the
 * tokens round up to whole pages (the bytes a kvbound cache then holds). */
/* vt MEM_NO_V: no V rows (latent attention: the value is the K row's tail) */
#define MEM_NO_V UINT32_MAX
#define MEM_VT(o) ((o)->mla_heads ? MEM_NO_V : (o)->vtype)
static unsigned long long kv_bytes(int32_t L, int32_t H, int32_t D, uint32_t kt, uint32_t vt, long long tokens, long long batch, int32_t block) {
    long long t = tokens;
    if (block > 0) t = (tokens + block - 1) / block * block;
    return (unsigned long long)batch * (unsigned long long)t * (unsigned long long)L * (unsigned long long)H *
           (kvb_type_row_bytes(kt, D) + (vt == MEM_NO_V ? 0 : kvb_type_row_bytes(vt, D)));
}

struct mem_opts;
static unsigned long long mla_per_head_bytes(const struct mem_opts *o);

/* f32, f16, bf16, q8_0 or q4_0 by name; false (printed) otherwise. */
static bool kv_type(const char *flag, const char *v, uint32_t *out) {
    const uint32_t ok[] = {KVB_TYPE_F32, KVB_TYPE_F16, KVB_TYPE_BF16, KVB_TYPE_Q8_0, KVB_TYPE_Q4_0};
    for (size_t k = 0; k < 5; k++)
        if (!strcasecmp(v, kvb_type_name(ok[k]))) {
            *out = ok[k];
            return true;
        }
    fprintf(stderr, "kvbound: %s: '%s' is not f32, f16, bf16, q8_0 or q4_0\n", flag, v);
    return false;
}

static int parse_list_ll(const char *flag, const char *v, long long *out, int *n, int max) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*n >= max) { fprintf(stderr, "kvbound: %s: at most %d values\n", flag, max); return -1; }
        long long x;
        if (cli_parse_i64(flag, tok, 1, 1LL << 40, &x)) return -1;
        out[(*n)++] = x;
    }
    return 0;
}

struct mem_opts {
    struct cli_model_opts mo; /* -m */
    const char *preset;
    char name[128]; /* the preset's, the model's or "custom" */
    int32_t L, H, D, block, budget, sinks, recall, keep; /* keep: the pinned span, on top of the budget */
    int32_t heads; /* query heads (--heads, a model's, a latent preset's); 0: unknown */
    int32_t window, n_win; /* sliding-window layers: n_win of the L hold min(window, T) tokens; 0: none */
    int32_t win_H, win_D;  /* their KV heads (the cache holds them) and their own head size (held padded to D); 0: H, D */
    int32_t shared, shared_win; /* KV-shared layers among the L (no K/V of their own), of them window layers */
    int32_t n_rec, lin_kh, lin_vh, lin_dim, conv; /* Gated DeltaNet layers among the L (no K/V) and their shape; 0: none */
    int32_t sc_embd;               /* LFM2 (a model file's): the recurrent layers are short convs of conv taps over sc_embd channels */
    int32_t mla_heads, mla_k, mla_v; /* latent attention: the heads and per-head K, V sizes the latent row replaces; 0: none */
    int32_t m2_inner;              /* Mamba-2 (granitehybrid): the recurrent layers' d_inner (lin_kh its groups, lin_dim its state size N); 0: none */
    unsigned long long state; /* one sequence's recurrent state, all n_rec layers (mem_check: in pages with --block-size) */
    long long ctx[16], batch[16];
    int n_ctx, n_batch;
    uint32_t type, vtype;
    bool v_set, json, gib;
    enum kvb_policy_id pid;
};

static void mem_usage(void) {
    printf("usage: kvbound mem [--preset NAME | -m MODEL.gguf | --layers L --kv-heads H --head-dim D] --ctx T[,T...]\n"
           "                   [--batch B[,B...]] [--dtype f32|f16|bf16|q8_0|q4_0] [--dtype-k T --dtype-v T]\n"
           "                   [--policy P --budget N [--sinks S] [--keep K]] [--heads N] [--recall-pages R] [--block-size N] [--gib] [--json]\n"
           "                   [--window W --window-layers N]\n\n"
           "KV memory M = batch x tokens x layers x kv_heads x (K row + V row bytes), a row being head_dim\n"
           "elements (q8_0: 34 bytes per 32, q4_0: 18 per 32, ggml's blocks). --dtype sets both (also\n"
           "--kv-dtype, --kv-dtype-k, --kv-dtype-v as the other commands); --block-size rounds tokens up to whole pages, which\n"
           "is what a kvbound cache with that page size holds.\n"
           "--heads N: the model's query heads (from -m MODEL, or a latent preset's): expected-attention keeps, per (layer,\n"
           "KV head), a mean and a covariance of the queries of each of its N / kv_heads query heads ((G + 1) x (d + d^2) f32\n"
           "with a block of scratch), host memory beside the pages: bounded includes them (query_stats_bytes in the JSON),\n"
           "as the library's sizing rule (kvb_model_kv_seq_bytes) counts them; that policy needs --heads or -m.\n"
           "--recall-pages R (with a bounded policy): the pool also holds each stream's recall area, R pages\n"
           "of --block-size (16) tokens; bounded bytes include it (recall_bytes in the JSON). The cold tier is\n"
           "host memory or disk, not pool: cold_bytes_per_token is what each evicted token costs there.\n"
           "--keep K (with a bounded policy): the first K tokens are pinned (never evicted) on top of the budget,\n"
           "so a stream holds min(budget + K, tokens), as run's, chat's and the library's sizing rule count them.\n"
           "Sliding-window layers (Gemma 2/3: from -m MODEL or a gemma preset, or --window W --window-layers N):\n"
           "those layers hold min(W - 1, tokens) between steps whatever the policy, which bounds the other (global)\n"
           "layers only; recall areas and the cold tier are the global layers'.\n"
           "Hybrid models (Qwen3.5/3.6 from -m MODEL or a qwen3.x preset, LFM2 from -m MODEL, Granite 4.0-H from -m MODEL or a\n"
           "granite-4.0-h preset): 'layers' counts every layer that runs; the recurrent ones (Gated DeltaNet, LFM2's short\n"
           "convolutions, or Mamba-2: recurrent_layers in\n"
           "the JSON) hold no K/V, so bytes and bounded are the\n"
           "attention layers' K/V; each sequence adds a recurrent state of fixed size, the same under every policy\n"
           "and at any length (f32 rows; with --block-size packed into the cache's pages): its own 'state' column,\n"
           "state_bytes in the JSON (x batch); 'total' = bytes + state, 'bounded total' = bounded + state, and the\n"
           "saving compares the totals. --recall-pages is refused on them (recall on a hybrid is not implemented).\n"
           "Gemma 4 (from -m MODEL or a gemma4 preset): window and global layers have their own KV heads (each\n"
           "counted with its own: window_kv_heads in the JSON) and head sizes; kvbound's cache holds one head size,\n"
           "the window heads padded to the global one (window_head_dim: their own), and mem counts what it holds.\n"
           "KV-shared layers (shared_kv_layers) read an earlier layer's K/V and count nothing; 'layers' counts them.\n"
           "GLM-4.5 (from -m MODEL or a glm-4.5 preset): its multi-token-prediction layers never run and hold no\n"
           "K/V; 'layers' counts the layers that run.\n"
           "Latent attention (DeepSeek-V2/V3/R1, Kimi-K2: from -m MODEL or the deepseek-v3 and kimi-k2 presets): one\n"
           "KV head of the latent row (rotary + kv_lora_rank dims) per token and layer for every query head; mem counts\n"
           "what kvbound's cache holds (that row only: a token's value is its latent, read off the row) and names the\n"
           "per-head K/V it replaces ('latent'\n"
           "in the JSON: row_dims, bytes_per_token, per_head_kv_bytes_per_token).\n"
           "Note: some published tables halve these figures: they drop the factor 2 for K and V.\npresets:");
    for (size_t k = 0; k < sizeof k_presets / sizeof *k_presets; k++) printf(" %s", k_presets[k].name);
    for (size_t k = 0; k < sizeof k_m2_presets / sizeof *k_m2_presets; k++) printf(" %s", k_m2_presets[k].name);
    printf("\n");
}

/* A value option of mem; -1: printed. */
static int mem_option(struct mem_opts *o, const char *a, const char *v) {
    if (!strcmp(a, "--preset")) o->preset = v;
    else if (!strcmp(a, "--layers")) return cli_parse_i32(a, v, 1, 100000, &o->L);
    else if (!strcmp(a, "--kv-heads")) return cli_parse_i32(a, v, 1, 100000, &o->H);
    else if (!strcmp(a, "--heads")) return cli_parse_i32(a, v, 1, 100000, &o->heads);
    else if (!strcmp(a, "--head-dim")) return cli_parse_i32(a, v, 1, 100000, &o->D);
    else if (!strcmp(a, "--ctx")) return parse_list_ll(a, v, o->ctx, &o->n_ctx, 16);
    else if (!strcmp(a, "--batch")) return parse_list_ll(a, v, o->batch, &o->n_batch, 16);
    else if (!strcmp(a, "--block-size")) return cli_parse_i32(a, v, 1, 1 << 20, &o->block);
    else if (!strcmp(a, "--budget")) return cli_parse_i32(a, v, 1, 1 << 30, &o->budget);
    else if (!strcmp(a, "--recall-pages")) return cli_parse_i32(a, v, 1, KVB_RECALL_MAX_PAGES, &o->recall);
    else if (!strcmp(a, "--keep")) return cli_parse_i32(a, v, 0, KVB_KEEP_MAX, &o->keep);
    else if (!strcmp(a, "--sinks")) return cli_parse_i32(a, v, 0, 1 << 20, &o->sinks);
    else if (!strcmp(a, "--window")) return cli_parse_i32(a, v, 1, 1 << 30, &o->window);
    else if (!strcmp(a, "--window-layers")) return cli_parse_i32(a, v, 0, 100000, &o->n_win);
    else if (!strcmp(a, "--policy")) {
        if (kvb_policy_from_name(v, &o->pid) != KVB_OK) { fprintf(stderr, "kvbound: --policy: %s\n", kvb_last_error()); return -1; }
    } else if (!strcmp(a, "--dtype") || !strcmp(a, "--kv-dtype")) {
        if (!kv_type(a, v, &o->type)) return -1;
        o->v_set = false;
    } else if (!strcmp(a, "--dtype-k") || !strcmp(a, "--kv-dtype-k")) {
        if (!kv_type(a, v, &o->type)) return -1;
    } else { /* --dtype-v, --kv-dtype-v */
        if (!kv_type(a, v, &o->vtype)) return -1;
        o->v_set = true;
    }
    return 0;
}

static int mem_parse(struct mem_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    cli_model_init(&o->mo, "mem", 0, 0);
    o->sinks = -1;
    o->type = o->vtype = KVB_TYPE_F16;
    o->pid = KVB_POLICY_FULL;
    snprintf(o->name, sizeof o->name, "custom");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { mem_usage(); return 0; }
        if (!strcmp(a, "--json")) { o->json = true; continue; }
        if (!strcmp(a, "--gib")) { o->gib = true; continue; }
        const int r = cli_model_option(&o->mo, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!(v = cli_opt_value("mem", "--preset --layers --kv-heads --heads --head-dim --ctx --batch --block-size --budget --recall-pages --sinks --keep --policy "
                                       "--dtype --kv-dtype --dtype-k --kv-dtype-k --dtype-v --kv-dtype-v --window --window-layers", argc, argv, &i))) return 2;
        if (mem_option(o, a, v)) return 2;
    }
    return CLI_GO_ON;
}

/* Layers, KV heads and head dim from --preset or -m (else the flags'):
 * CLI_GO_ON, or the exit status (printed). */
static int mem_shape(struct mem_opts *o) {
    if (o->preset) {
        const struct preset *p = NULL;
        for (size_t k = 0; k < sizeof k_presets / sizeof *k_presets; k++)
            if (!strcmp(o->preset, k_presets[k].name)) p = &k_presets[k];
        const struct m2_preset *q = NULL;
        for (size_t k = 0; k < sizeof k_m2_presets / sizeof *k_m2_presets; k++)
            if (!strcmp(o->preset, k_m2_presets[k].name)) q = &k_m2_presets[k];
        if (!p && !q) { fprintf(stderr, "kvbound: --preset: unknown '%s' (see --help)\n", o->preset); return 2; }
        if (q) { /* a Mamba-2 hybrid */
            o->L = q->layers; o->H = q->kv_heads; o->D = q->head_dim;
            o->n_rec = q->layers - q->attn_layers;
            o->m2_inner = q->inner; o->lin_kh = q->groups; o->lin_vh = q->heads; o->lin_dim = q->state; o->conv = q->conv;
            snprintf(o->name, sizeof o->name, "%s", q->name);
        } else {
        o->L = p->layers; o->H = p->kv_heads; o->D = p->head_dim;
        if (!o->window) { o->window = p->window; o->n_win = p->window_layers; }
        o->win_H = p->win_heads; o->win_D = p->win_dim; o->shared = p->shared; o->shared_win = p->shared_win;
        o->mla_heads = p->mla_heads; o->mla_k = p->mla_k; o->mla_v = p->mla_v;
        if (p->attn_every) {
            o->n_rec = p->layers - p->layers / p->attn_every; /* layer l is attention when (l + 1) % attn_every == 0 */
            o->lin_kh = p->lin_k_heads; o->lin_vh = p->lin_v_heads; o->lin_dim = p->lin_dim; o->conv = p->conv;
        }
        snprintf(o->name, sizeof o->name, "%s", p->name);
        }
    } else if (o->mo.path) {
        struct kvb_model *m;
        struct kvb_model_info in;
        if (cli_load_model(&o->mo, &m, &in)) return 1;
        o->L = in.n_layer; o->H = in.n_head_kv; o->D = in.head_dim;
        if (!o->heads) o->heads = in.n_head;
        if (!o->window) { o->window = in.sliding_window; o->n_win = in.n_swa_layers - in.n_kv_shared_swa; } /* the model's windows that hold K/V */
        o->shared = in.n_kv_shared; o->shared_win = in.n_kv_shared_swa;
        if (in.n_head_kv_swa > 0 && in.n_head_kv_global > 0) { o->H = in.n_head_kv_global; o->win_H = in.n_head_kv_swa; } /* Gemma 4 26B/31B: KV heads per kind */
        if (in.head_dim_swa > 0 && in.head_dim_swa != in.head_dim) o->win_D = in.head_dim_swa;
        o->n_rec = in.n_rec_layers; /* its Gated DeltaNet layers */
        o->lin_kh = in.ssm_groups; o->lin_vh = in.ssm_heads; o->lin_dim = in.ssm_state; o->conv = in.ssm_conv;
        o->state = in.state_bytes;
        o->sc_embd = in.shortconv ? in.n_embd : 0;
        if (in.kv_lora_rank) { o->mla_heads = in.n_head; o->mla_k = in.head_dim_k_mla; o->mla_v = in.head_dim_v_mla; }
        o->m2_inner = in.mamba2 ? in.ssm_inner : 0;
        snprintf(o->name, sizeof o->name, "%s", o->mo.path);
        kvb_model_free(m);
    }
    if (!o->L || !o->H || !o->D) { fprintf(stderr, "kvbound mem: give --preset, -m MODEL, or --layers, --kv-heads and --head-dim\n"); return 2; }
    if (o->n_win > o->L - o->n_rec - o->shared || (o->n_win > 0) != (o->window > 0)) {
        fprintf(stderr, "kvbound mem: --window W and --window-layers N (at most the %d attention layers) go together\n", o->L - o->n_rec - o->shared);
        return 2;
    }
    if (!o->window) o->n_win = 0;
    if (!o->win_H) o->win_H = o->H;
    return CLI_GO_ON;
}

/* One sequence's recurrent state, all its Gated DeltaNet layers, into o->state: a layer's Hv Dk Dv
 * + (K - 1) C floats (C = 2 Hk Dk + Hv Dv); with --block-size, the pages of block x (K row + V row)
 * bytes they fill as the cache packs them: rows of Dk floats, Hv Dk of the matrix state and the
 * convolution's (K - 1) C floats in whole rows, as many whole rows a page as fit. CLI_GO_ON, or 2
 * (printed) when a row does not fit a page (the cache refuses those). */
static int state_size(struct mem_opts *o) {
    const unsigned long long Hk = (unsigned)o->lin_kh, Hv = (unsigned)o->lin_vh, D = (unsigned)o->lin_dim, K = (unsigned)o->conv;
    const unsigned long long DI = (unsigned)o->m2_inner, C = DI ? DI + 2 * Hk * D : 2 * Hk * D + Hv * D; /* Mamba-2: d_inner + 2 G N */
    if (o->block <= 0) { /* a preset's (a model's: its info); Mamba-2: d_inner N + (K - 1) C floats a layer */
        if (!o->state) o->state = (unsigned long long)o->n_rec * 4 * ((DI ? DI * D : Hv * D * D) + (K - 1) * C);
        return CLI_GO_ON;
    }
    /* a short conv's (K - 1) E history packs into rows of head_dim floats */
    const unsigned long long page = (unsigned long long)o->block * (kvb_type_row_bytes(o->type, o->D) + kvb_type_row_bytes(o->vtype, o->D)),
                             row = 4 * (o->sc_embd ? (unsigned long long)o->D : D);
    if (row > page) {
        fprintf(stderr, "kvbound mem: a recurrent state row of %llu bytes does not fit a page of %d tokens (%llu bytes); raise --block-size\n", row, o->block, page);
        return 2;
    }
    const unsigned long long rows = o->sc_embd ? ((K - 1) * (unsigned long long)o->sc_embd + row / 4 - 1) / (row / 4)
                                               : (DI ? DI : Hv * D) + ((K - 1) * C + D - 1) / D,
                             per_page = page / row;
    o->state = (unsigned long long)o->n_rec * ((rows + per_page - 1) / per_page) * page;
    return CLI_GO_ON;
}

/* Latent attention: a token's bytes of the per-head K and V (in the K and V types, f16 where a size is not a whole number
 * of the type's blocks) that the latent row replaces, all layers. */
static unsigned long long mla_per_head_bytes(const struct mem_opts *o) {
    size_t k = kvb_type_row_bytes(o->type, o->mla_k), v = kvb_type_row_bytes(o->vtype, o->mla_v);
    if (!k) k = kvb_type_row_bytes(KVB_TYPE_F16, o->mla_k);
    if (!v) v = kvb_type_row_bytes(KVB_TYPE_F16, o->mla_v);
    return (unsigned long long)o->L * (unsigned long long)o->mla_heads * (k + v);
}

/* A policy that keeps query statistics (expected-attention): their host
 * bytes for `batch` sequences, on the global layers (a window layer keeps
 * none), by the library's rule (kvb_kv_query_stats_bytes); 0 for another
 * policy. With the heads unknown, as if one a KV head (nonzero: it keeps them). */
static unsigned long long query_stats(const struct mem_opts *o, long long batch) {
    struct kvb_kv_params kv = kvb_kv_default_params();
    kv.policy = kvb_policy_default_params(o->pid);
    const int32_t Gl = o->L - o->n_win - o->n_rec - o->shared;
    return Gl > 0 ? (unsigned long long)batch * kvb_kv_query_stats_bytes(&kv, Gl, o->H, o->heads ? o->heads : o->H, o->D) : 0;
}

/* The types fit the head dim, and the sizes asked for can be computed: CLI_GO_ON, or 2 (printed). */
static int mem_check(struct mem_opts *o) {
    if (!o->v_set) o->vtype = o->type;
    if (!kvb_type_row_bytes(o->type, o->D) || !kvb_type_row_bytes(o->vtype, o->D)) {
        fprintf(stderr, "kvbound mem: head dim %d is not a whole number of %s blocks\n", o->D, kvb_type_name(kvb_type_row_bytes(o->type, o->D) ? o->vtype : o->type));
        return 2;
    }
    if (!o->n_ctx) { fprintf(stderr, "kvbound mem: --ctx T is required\n"); return 2; }
    if (!o->n_batch) o->batch[o->n_batch++] = 1;
    if (o->pid != KVB_POLICY_FULL && !o->budget) { fprintf(stderr, "kvbound mem: --policy %s needs --budget\n", kvb_policy_name(o->pid)); return 2; }
    if (o->keep && o->pid == KVB_POLICY_FULL) { fprintf(stderr, "kvbound mem: --keep needs a bounded --policy (full keeps every token)\n"); return 2; }
    if (o->recall && o->pid == KVB_POLICY_FULL) { fprintf(stderr, "kvbound mem: --recall-pages needs a bounded --policy (full never evicts)\n"); return 2; }
    if (o->recall && o->n_rec) {
        fprintf(stderr, "kvbound mem: --recall-pages on a model with %d Gated DeltaNet layers: recall on a hybrid model is not implemented\n", o->n_rec);
        return 2;
    }
    if (!o->heads && o->mla_heads) o->heads = o->mla_heads;
    if (query_stats(o, 1) && !o->heads) { /* statistics per query head: their number is needed */
        fprintf(stderr, "kvbound mem: --policy %s keeps query statistics per query head: give --heads N (the model's attention heads) or -m MODEL\n",
                kvb_policy_name(o->pid));
        return 2;
    }
    if (query_stats(o, 1) && (o->heads < o->H || o->heads % o->H)) {
        fprintf(stderr, "kvbound mem: --heads %d is not a multiple of the %d KV heads\n", o->heads, o->H);
        return 2;
    }
    return o->n_rec ? state_size(o) : CLI_GO_ON;
}

static void mem_header(const struct mem_opts *o) {
    const char *un = o->gib ? "GiB" : "GB";
    if (o->json) {
        printf("{\"model\":\"%s\",\"layers\":%d,\"kv_heads\":%d,\"head_dim\":%d,\"dtype\":\"%s\",\"dtype_k\":\"%s\",\"dtype_v\":\"%s\",\"unit\":\"%s\",",
               o->name, o->L, o->H, o->D, o->vtype == o->type ? kvb_type_name(o->type) : "mixed", kvb_type_name(o->type), kvb_type_name(o->vtype), un);
        if (o->n_win) printf("\"window\":%d,\"window_layers\":%d,", o->window, o->n_win);
        if (o->n_win && o->win_H != o->H) printf("\"window_kv_heads\":%d,", o->win_H);
        if (o->win_D) printf("\"window_head_dim\":%d,", o->win_D);
        if (o->shared) printf("\"shared_kv_layers\":%d,", o->shared);
        if (o->keep) printf("\"keep\":%d,", o->keep);
        if (o->n_rec) printf("\"recurrent_layers\":%d,\"state_bytes_per_sequence\":%llu,", o->n_rec, o->state);
        if (o->mla_heads)
            printf("\"latent\":{\"row_dims\":%d,\"bytes_per_token\":%llu,\"heads\":%d,\"head_k\":%d,\"head_v\":%d,\"per_head_kv_bytes_per_token\":%llu},",
                   o->D, kv_bytes(o->L, 1, o->D, o->type, MEM_VT(o), 1, 1, 0), o->mla_heads, o->mla_k, o->mla_v, mla_per_head_bytes(o));
        printf("\"rows\":[");
        return;
    }
    char tname[64];
    if (o->vtype == o->type) snprintf(tname, sizeof tname, "%s", kvb_type_name(o->type));
    else snprintf(tname, sizeof tname, "K %s, V %s", kvb_type_name(o->type), kvb_type_name(o->vtype));
    printf("%s: %d layers x %d KV heads x %d dims, %s; %s = %s bytes%s\n", o->name, o->L, o->H, o->D, tname, un,
           o->gib ? "2^30" : "10^9", o->block ? ", tokens rounded up to pages" : "");
    if (o->n_win)
        printf("%d sliding-window layers%s hold min(%d, tokens) between steps whatever the policy; the policy bounds the %d global layers\n", o->n_win,
               o->win_H != o->H ? (o->win_H > o->H ? " (more KV heads)" : " (fewer KV heads)") : "", o->window - 1, o->L - o->n_win - o->n_rec - o->shared);
    if (o->n_win && o->win_H != o->H) printf("window layers: %d KV heads each, global layers: %d\n", o->win_H, o->H);
    if (o->win_D)
        printf("window layers' heads have %d dims, held padded to %d in kvbound's cache (one head size a cache), as counted here\n", o->win_D, o->D);
    if (o->shared)
        printf("%d KV-shared layers (%d window, %d global) read the last window and global layer before them and hold no K/V\n", o->shared, o->shared_win,
               o->shared - o->shared_win);
    if (o->mla_heads) {
        const unsigned long long lat = kv_bytes(o->L, 1, o->D, o->type, MEM_VT(o), 1, 1, 0), per = mla_per_head_bytes(o);
        printf("latent attention: a token's row of %d dims in each of %d layers, for %d heads of K %d and V %d: %llu bytes a token against %llu "
               "for the per-head K/V it replaces (%.1fx)\n", o->D, o->L, o->mla_heads, o->mla_k, o->mla_v, lat, per, (double)per / (double)lat);
    }
    if (o->n_rec)
        printf("%d %s layers hold no K/V but a recurrent state of %llu bytes a sequence (%s), the same at any length and under every policy;\n"
               "bytes are the K/V of the %d attention layer%s, which the policy governs; total and bounded total count the state\n",
               o->n_rec, o->sc_embd ? "short-conv" : o->m2_inner ? "Mamba-2" : "Gated DeltaNet", o->state, o->block ? "f32 rows in pages" : "f32", o->L - o->n_rec, o->L - o->n_rec == 1 ? "" : "s");
    printf("%12s %6s %16s %12s", "tokens", "batch", "bytes", un);
    if (o->n_rec) printf(" %10s %10s", "state", "total");
    if (o->pid != KVB_POLICY_FULL) printf(" %14s%s %10s", "bounded", o->n_rec ? "  bounded total" : "", "saving");
    printf("\n");
}

/* The row of ctx tokens x batch sequences; cold_per_tok: a recall page's host bytes per evicted token. */
static void mem_row(const struct mem_opts *o, long long ctx, long long batch, bool first, double cold_per_tok) {
    const int32_t rblock = o->block > 0 ? o->block : 16;
    const double unit = o->gib ? 1073741824.0 : 1e9;
    const bool bounded_too = o->pid != KVB_POLICY_FULL;
    const int32_t G = o->L - o->n_win - o->n_rec - o->shared; /* global layers holding K/V; the window layers hold min(W - 1, ctx) between steps under any policy */
    const long long held = o->window - 1 < ctx ? o->window - 1 : ctx;
    const unsigned long long win = o->n_win ? kv_bytes(o->n_win, o->win_H, o->D, o->type, MEM_VT(o), held, batch, o->block) : 0;
    unsigned long long bytes = (G ? kv_bytes(G, o->H, o->D, o->type, MEM_VT(o), ctx, batch, o->block) : 0) + win;
    long long kept = (long long)o->budget + o->keep < ctx ? (long long)o->budget + o->keep : ctx; /* the pinned span on top */
    const unsigned long long area = o->recall && G ? kv_bytes(G, o->H, o->D, o->type, MEM_VT(o), (long long)o->recall * rblock, batch, rblock) : 0;
    const unsigned long long qs = bounded_too ? query_stats(o, batch) : 0; /* expected-attention's statistics, beside the pages */
    unsigned long long bounded = bounded_too ? (G ? kv_bytes(G, o->H, o->D, o->type, MEM_VT(o), kept, batch, o->block) : 0) + win + area + qs : bytes;
    const unsigned long long state = o->state * (unsigned long long)batch; /* Gated DeltaNet layers: a state per sequence, whatever ctx */
    const double saving = 1.0 - (double)(bounded + state) / (double)(bytes + state);
    if (o->json) {
        printf("%s{\"tokens\":%lld,\"batch\":%lld,\"bytes\":%llu,\"size\":%.2f", first ? "" : ",", ctx, batch, bytes, bytes / unit);
        if (o->n_rec) printf(",\"state_bytes\":%llu,\"total_bytes\":%llu,\"total_size\":%.2f", state, bytes + state, (bytes + state) / unit);
        if (!bounded_too) printf("}");
    } else {
        printf("%12lld %6lld %16llu %12.2f", ctx, batch, bytes, bytes / unit);
        if (o->n_rec) printf(" %10.2f %10.2f", state / unit, (bytes + state) / unit);
    }
    if (bounded_too) {
        if (o->json) {
            printf(",\"policy\":\"%s\",\"budget\":%d,\"bounded_bytes\":%llu,\"bounded_size\":%.2f", kvb_policy_name(o->pid), o->budget, bounded, bounded / unit);
            if (o->n_rec) printf(",\"bounded_total_bytes\":%llu,\"bounded_total_size\":%.2f", bounded + state, (bounded + state) / unit);
            printf(",\"saving\":%.4f", saving);
            if (o->recall) printf(",\"recall_pages\":%d,\"recall_bytes\":%llu,\"cold_bytes_per_token\":%.1f", o->recall, area, cold_per_tok * (double)batch);
            if (qs) printf(",\"query_stats_bytes\":%llu", qs);
            printf("}");
        } else {
            printf(" %14.2f", bounded / unit);
            if (o->n_rec) printf(" %14.2f", (bounded + state) / unit);
            printf(" %9.1f%%", 100.0 * saving);
        }
    }
    if (!o->json) printf("\n");
}

static void mem_footer(const struct mem_opts *o, double cold_per_tok) {
    if (o->json) printf("]}\n");
    else if (o->pid != KVB_POLICY_FULL)
        printf("bounded: %s keeps at most %d tokens per (%slayer, KV head), whatever the context length%s\n", kvb_policy_name(o->pid), o->budget + o->keep,
               o->n_win ? "global " : o->n_rec ? "attention " : "", o->keep ? " (the pinned span of --keep on top of the budget)" : o->sinks >= 0 ? " (sinks included)" : "");
    if (!o->json && query_stats(o, 1))
        printf("query statistics: bounded includes %s's %llu bytes a sequence (per (layer, KV head) the mean and covariance of each of its "
               "%d query heads and a block of scratch, (G + 1) x (d + d^2) floats), host memory beside the pages\n",
               kvb_policy_name(o->pid), query_stats(o, 1), o->heads / o->H);
    if (!o->json && o->recall)
        printf("recall: bounded includes a recall area of %d pages x %d tokens per (layer, KV head); the cold tier holds %.0f bytes per evicted token (host memory, then --cold-dir)\n",
               o->recall, o->block > 0 ? o->block : 16, cold_per_tok);
}

int cmd_mem(int argc, char **argv) {
    struct mem_opts o;
    int rc = mem_parse(&o, argc, argv);
    if (rc == CLI_GO_ON) rc = mem_shape(&o);
    if (rc == CLI_GO_ON) rc = mem_check(&o);
    if (rc != CLI_GO_ON) return rc;
    const int32_t rblock = o.block > 0 ? o.block : 16;
    /* a cold page: 32-byte header, positions, rows, 8-byte padding; its index entry: id, min and max per channel, sums */
    const unsigned long long rec =
        (32 + 4ull * (unsigned)rblock + (unsigned long long)rblock * (kvb_type_row_bytes(o.type, o.D) + kvb_type_row_bytes(o.vtype, o.D)) + 7) / 8 * 8;
    const double cold_per_tok = (double)(o.L - o.n_win - o.n_rec - o.shared) * o.H * ((double)rec + 8.0 + 12.0 * o.D) / rblock; /* global layers only */
    mem_header(&o);
    for (int c = 0; c < o.n_ctx; c++)
        for (int b = 0; b < o.n_batch; b++) mem_row(&o, o.ctx[c], o.batch[b], c == 0 && b == 0, cold_per_tok);
    mem_footer(&o, cold_per_tok);
    return 0;
}
