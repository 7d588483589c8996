/*
 * vocab.c — building a vocabulary from GGUF metadata or a llama2.c
 * tokenizer.bin, the piece -> id hash, decoding ids to bytes, and the
 * front of tokenizing shared by both encoders: the split at special tokens,
 * BOS/EOS and the id list.
 *
 * tokenizer.bin (llama2.c): u32 max_token_length, then per token: f32 score,
 * i32 len, len bytes. Pieces use ' ' instead of "▁"; id 1 is "\n<s>\n" and id
 * 2 "\n</s>\n". We normalise to GGUF conventions so one encoder serves both.
 */
#include "tokenizer.h"
#include "../gguf/gguf.h"

#include <stdio.h>
#include <stdlib.h>

static int hexdigit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The byte of a "<0xNN>" piece (exactly two hex digits), or -1. */
static int byte_of_piece(const char *t, uint32_t len) {
    if (len != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return -1;
    int hi = hexdigit(t[3]), lo = hexdigit(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void kvb_vocab_free(struct kvb_vocab *v) {
    if (!v) return;
    kvb_free(v->arena); kvb_free(v->off); kvb_free(v->score); kvb_free(v->type); kvb_free(v->hash); kvb_free(v->special);
    kvb_free(v->merge_arena); kvb_free(v->merge_off); kvb_free(v->merge_hash); kvb_free(v->chat_template);
    kvb_free(v);
}

struct len_id {
    uint32_t len;
    int32_t id;
};

static int cmp_len_desc(const void *a, const void *b) {
    const struct len_id *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Hash, byte ids and the special list; the pieces are already in place. */
static kvb_status finish(struct kvb_vocab *v, const char *name) {
    v->hash_cap = 64;
    while (v->hash_cap < (uint32_t)v->n * 2u) v->hash_cap *= 2;
    v->hash = kvb_malloc(sizeof(int32_t) * v->hash_cap);
    v->special = kvb_malloc(sizeof(int32_t) * (size_t)KVB_MAX(v->n, 1));
    if (!v->hash || !v->special) return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory for the vocabulary", name);
    for (uint32_t i = 0; i < v->hash_cap; i++) v->hash[i] = -1;
    for (int i = 0; i < 256; i++) v->byte_id[i] = -1;
    v->n_special = 0;
    v->spm_word_split = true;
    for (int32_t id = 0; id < v->n; id++) {
        const char *t = kvb_vocab_text(v, id);
        uint32_t len = kvb_vocab_len(v, id);
        for (uint32_t i = 1; i + 3 <= len && v->spm_word_split; i++) /* "x▁" inside a piece would span a cut */
            if (memcmp(t + i, "\xE2\x96\x81", 3) == 0 && !(i >= 3 && memcmp(t + i - 3, "\xE2\x96\x81", 3) == 0)) v->spm_word_split = false;
        kvb_vocab_index(v, id);
        int byte = v->type[id] == KVB_TOKEN_BYTE ? byte_of_piece(t, len) : -1;
        if (byte >= 0 && v->byte_id[byte] < 0) v->byte_id[byte] = id;
        if ((v->type[id] == KVB_TOKEN_CONTROL || v->type[id] == KVB_TOKEN_USER_DEFINED || v->type[id] == KVB_TOKEN_UNKNOWN) && len > 0)
        {
            v->special[v->n_special++] = id; /* as llama.cpp: these texts can stand for their token */
            v->special_first[(uint8_t)t[0]] = true;
        }
    }
    if (v->n_special > 1) { /* longest first, so matching prefers "<|im_start|>" over "<" */
        struct len_id *tmp = kvb_malloc(sizeof *tmp * (size_t)v->n_special);
        if (!tmp) return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory for the vocabulary", name);
        for (int32_t i = 0; i < v->n_special; i++) tmp[i] = (struct len_id){kvb_vocab_len(v, v->special[i]), v->special[i]};
        qsort(tmp, (size_t)v->n_special, sizeof *tmp, cmp_len_desc);
        for (int32_t i = 0; i < v->n_special; i++) v->special[i] = tmp[i].id;
        kvb_free(tmp);
    }
    return KVB_OK;
}

/* The end-of-turn and end-of-text markers of the families, as llama.cpp
 * collects its EOG set by text (kvb_vocab_is_eog); the last three are Gemma 4's. */
static const char *const k_eog_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>", "<end_of_turn>", "<|eom_id|>",
                                          "</s>", "<|return|>", "<|call|>", "<|end_of_text|>", "<｜end▁of▁sentence｜>",
                                          "<eos>", "<turn|>", "<|tool_response>"};
enum { N_EOG_NAMES = sizeof k_eog_names / sizeof *k_eog_names };

/* gemma4, before the special list is built: as llama.cpp's loader does, a
 * token whose text names an end of generation (k_eog_names) and is not
 * CONTROL becomes CONTROL, except that with <|tool_response> present "</s>"
 * is plain text (NORMAL) and ends nothing. Every token of such a text (a
 * duplicate too). */
static void gemma4_token_types(struct kvb_vocab *v) {
    bool tool_response = false;
    for (int32_t id = 0; id < v->n && !tool_response; id++) tool_response = !strcmp(kvb_vocab_text(v, id), "<|tool_response>");
    for (int32_t id = 0; id < v->n; id++) {
        const char *t = kvb_vocab_text(v, id);
        if (t[0] != '<' || kvb_vocab_len(v, id) != strlen(t)) continue;
        for (size_t i = 0; i < N_EOG_NAMES; i++)
            if (!strcmp(t, k_eog_names[i])) v->type[id] = tool_response && !strcmp(t, "</s>") ? KVB_TOKEN_NORMAL : KVB_TOKEN_CONTROL;
    }
}

static struct kvb_vocab *alloc_vocab(int32_t n, size_t arena_bytes) {
    struct kvb_vocab *v = kvb_calloc(1, sizeof *v);
    if (!v) return NULL;
    v->n = n;
    v->arena = kvb_malloc(arena_bytes);
    v->off = kvb_malloc(sizeof(uint32_t) * ((size_t)n + 1));
    v->score = kvb_calloc((size_t)n, sizeof(float));
    v->type = kvb_calloc((size_t)n, 1);
    v->bos = 1; v->eos = 2; v->unk = 0; v->eot = -1; v->pad = -1;
    v->add_bos = true; v->add_space_prefix = true;
    if (!v->arena || !v->off || !v->score || !v->type) {
        kvb_vocab_free(v);
        return NULL;
    }
    return v;
}

/* tokenizer.ggml.pre values, as llama.cpp's llama_vocab::impl::load maps
 * them, with the flags it sets there; the first name of a type is the one
 * kvb_pre_name gives (and kvbound convert writes). */
static const struct pre_name {
    const char *name;
    enum kvb_pre_type pre;
    bool ignore_merges, add_bos;
} k_pre_names[] = {
    {"gpt-2", KVB_PRE_GPT2, false, false},
    {"llama-bpe", KVB_PRE_LLAMA3, true, true},
    {"llama3", KVB_PRE_LLAMA3, true, true},
    {"lfm2", KVB_PRE_LLAMA3, true, true}, /* LFM2: llama.cpp maps it to LLAMA3 with the same flags */
    {"qwen2", KVB_PRE_QWEN2, false, false},
    {"deepseek-r1-qwen", KVB_PRE_QWEN2, false, false},
    {"smollm", KVB_PRE_SMOLLM, false, false},
    {"default", KVB_PRE_DEFAULT, false, false},
    {"dbrx", KVB_PRE_DBRX, false, false},
    /* GLM-4.5/4.6 (glm4moe): llama.cpp's CHATGLM4 is Llama 3's expression with merges always, as dbrx, and no BOS
     * id by default (the GGUF's bos_token_id and add_bos_token keys below set them, as there) */
    {"glm4", KVB_PRE_DBRX, false, false},
    {"chatglm-bpe", KVB_PRE_DBRX, false, false},
    {"smaug-bpe", KVB_PRE_SMAUG, false, false},
    {"refact", KVB_PRE_REFACT, false, false},
    {"starcoder", KVB_PRE_STARCODER, false, false},
    {"gpt-4o", KVB_PRE_GPT4O, false, false}, /* o200k: gpt-oss */
    {"llama4", KVB_PRE_GPT4O, false, false},
    {"kanana2", KVB_PRE_GPT4O, false, false},
    {"tekken", KVB_PRE_TEKKEN, true, true},
    {"qwen35", KVB_PRE_QWEN35, false, false}, /* Qwen3.5, Qwen3.6 */
    {"gemma4", KVB_PRE_GEMMA4, false, true},  /* tokenizer.ggml.model "gemma4" sets it; BOS forced on (below) */
};
enum { N_PRE_NAMES = sizeof k_pre_names / sizeof *k_pre_names };

const char *kvb_pre_name(enum kvb_pre_type pre) {
    for (int i = 0; i < N_PRE_NAMES; i++)
        if (k_pre_names[i].pre == pre) return k_pre_names[i].name;
    return "default";
}

bool kvb_pre_lookup(const char *text, size_t len, enum kvb_pre_type *pre, bool *ignore_merges, bool *add_bos) {
    for (int i = 0; i < N_PRE_NAMES; i++)
        if (strlen(k_pre_names[i].name) == len && memcmp(k_pre_names[i].name, text, len) == 0) {
            *pre = k_pre_names[i].pre;
            *ignore_merges = k_pre_names[i].ignore_merges;
            *add_bos = k_pre_names[i].add_bos;
            return true;
        }
    return false;
}

/* tokenizer.ggml.merges into v (BPE). A merge must be "left right", except
 * for gemma4: llama.cpp cuts its merges at the first space after the first
 * byte and keeps the rest, and since gemma4's symbols never hold a space
 * ("▁" stands for it), a merge without that shape can never apply: it is
 * kept as text that no pair matches, as llama.cpp keeps it. */
static kvb_status load_merges(const struct gguf_file *f, struct kvb_vocab *v) {
    uint64_t nm;
    const uint8_t *data;
    kvb_status st = kvb_gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_T_STRING, &nm, &data, true);
    if (st != KVB_OK) return st;
    if (nm > (1u << 24)) return kvb_fail(KVB_ERR_CORRUPT, "%s: tokenizer.ggml.merges has %llu entries", f->path, (unsigned long long)nm);
    const char **m = kvb_malloc(sizeof(char *) * (size_t)KVB_MAX(nm, 1));
    uint32_t *len = kvb_malloc(sizeof(uint32_t) * (size_t)KVB_MAX(nm, 1));
    if (!m || !len) {
        kvb_free(m); kvb_free(len);
        return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory for %llu merges", f->path, (unsigned long long)nm);
    }
    const uint8_t *cur = data;
    uint64_t total = 0;
    for (uint64_t i = 0; i < nm; i++) {
        struct gguf_str s = kvb_gguf_arr_next_str(&cur);
        m[i] = s.p;
        len[i] = (uint32_t)KVB_MIN(s.n, (uint64_t)UINT32_MAX);
        total += s.n + 1;
        const char *sp = memchr(s.p, ' ', s.n);
        if (v->pre != KVB_PRE_GEMMA4 && (!sp || sp == s.p || sp == s.p + s.n - 1)) {
            st = kvb_fail(KVB_ERR_CORRUPT, "%s: tokenizer.ggml.merges[%llu] '%.*s' is not 'left right'", f->path, (unsigned long long)i,
                          (int)KVB_MIN(s.n, (uint64_t)40), s.p);
            break;
        }
    }
    if (st == KVB_OK && total > UINT32_MAX) st = kvb_fail(KVB_ERR_CORRUPT, "%s: tokenizer.ggml.merges text too large", f->path);
    if (st == KVB_OK) st = kvb_bpe_build_merges(v, m, len, (int32_t)nm, f->path);
    kvb_free(m);
    kvb_free(len);
    return st;
}

/* tokenizer.ggml.model "no_vocab": n empty pieces, n from <arch>.vocab_size;
 * ids in and out, no text (kvb_vocab_tokenize refuses). */
static kvb_status no_vocab(const struct gguf_file *f, struct kvb_vocab **out) {
    struct gguf_str a;
    kvb_status st = kvb_gguf_get_str(f, "general.architecture", &a, true);
    if (st != KVB_OK) return st;
    char key[96];
    snprintf(key, sizeof key, "%.*s.vocab_size", (int)KVB_MIN(a.n, (uint64_t)64), a.p);
    uint32_t n;
    if ((st = kvb_gguf_get_u32(f, key, &n, true)) != KVB_OK) return st;
    if (n < 1 || n > (1u << 24)) return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %u is out of range 1..16777216", f->path, key, n);
    const struct gguf_tensor *te = kvb_gguf_find_tensor(f, "token_embd.weight"); /* the size is the embedding's, before anything is allocated */
    if (!te || te->ne[1] != (int64_t)n)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: key '%s' = %u: a no_vocab file needs token_embd.weight with that many rows", f->path, key, n);
    struct kvb_vocab *v = alloc_vocab((int32_t)n, n);
    if (!v) return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory for the vocabulary", f->path);
    v->kind = KVB_VOCAB_NONE;
    for (uint32_t i = 0; i <= n; i++) v->off[i] = i;
    memset(v->arena, 0, n);
    v->bos = v->eos = v->unk = -1;
    v->add_bos = v->add_space_prefix = false;
    if ((st = finish(v, f->path)) != KVB_OK) {
        kvb_vocab_free(v);
        return st;
    }
    *out = v;
    return KVB_OK;
}

kvb_status kvb_vocab_from_gguf(const struct gguf_file *f, struct kvb_vocab **out) {
    struct gguf_str model;
    kvb_status st = kvb_gguf_get_str(f, "tokenizer.ggml.model", &model, true);
    if (st != KVB_OK) return st;
    if (kvb_gguf_str_eq(model, "no_vocab")) return no_vocab(f, out);
    const bool gemma4 = kvb_gguf_str_eq(model, "gemma4");
    const bool bpe = gemma4 || kvb_gguf_str_eq(model, "gpt2");
    if (!bpe && !kvb_gguf_str_eq(model, "llama"))
        return kvb_fail(KVB_ERR_UNSUPPORTED,
                        "%s: tokenizer.ggml.model '%.*s' is not supported (only 'llama' SentencePiece, 'gpt2' byte-level BPE and 'gemma4' BPE)",
                        f->path, (int)KVB_MIN(model.n, (uint64_t)32), model.p);
    enum kvb_pre_type pre = KVB_PRE_DEFAULT; /* llama.cpp's choice for a BPE vocabulary without the key */
    bool ignore_merges = false, pre_add_bos = false;
    if (gemma4) { /* llama.cpp sets the pre type "gemma4" for this model, whatever tokenizer.ggml.pre holds */
        pre = KVB_PRE_GEMMA4;
        pre_add_bos = true;
    } else if (bpe) {
        struct gguf_str ps;
        if (kvb_gguf_get_str(f, "tokenizer.ggml.pre", &ps, false) == KVB_OK &&
            !kvb_pre_lookup(ps.p, (size_t)KVB_MIN(ps.n, (uint64_t)SIZE_MAX), &pre, &ignore_merges, &pre_add_bos)) {
            char known[512];
            size_t at = 0;
            for (int i = 0; i < N_PRE_NAMES && at < sizeof known; i++)
                at += (size_t)snprintf(known + at, sizeof known - at, "%s%s", i ? ", " : "", k_pre_names[i].name);
            return kvb_fail(KVB_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%.*s' is not supported (known: %s)", f->path,
                            (int)KVB_MIN(ps.n, (uint64_t)40), ps.p, known);
        }
    }
    uint64_t n, ns, nt = 0;
    const uint8_t *toks, *scores, *types = NULL;
    if ((st = kvb_gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_T_STRING, &n, &toks, true)) != KVB_OK) return st;
    if (n < 3 || n > (1u << 24)) return kvb_fail(KVB_ERR_CORRUPT, "%s: tokenizer.ggml.tokens has %llu entries", f->path, (unsigned long long)n);
    scores = NULL;
    ns = n;
    st = kvb_gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_T_FLOAT32, &ns, &scores, !bpe); /* BPE ranks by merges */
    if (st != KVB_OK && (!bpe || kvb_gguf_find(f, "tokenizer.ggml.scores"))) return st;
    if (scores && ns != n) return kvb_fail(KVB_ERR_CORRUPT, "%s: tokenizer.ggml.scores has %llu entries, tokens %llu", f->path, (unsigned long long)ns, (unsigned long long)n);
    st = kvb_gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_T_INT32, &nt, &types, false);
    if (st != KVB_OK && kvb_gguf_find(f, "tokenizer.ggml.token_type")) return st;
    if (types && nt != n) return kvb_fail(KVB_ERR_CORRUPT, "%s: tokenizer.ggml.token_type has %llu entries, tokens %llu", f->path, (unsigned long long)nt, (unsigned long long)n);
    const uint8_t *cur = toks;
    size_t arena = 0;
    for (uint64_t i = 0; i < n; i++) arena += kvb_gguf_arr_next_str(&cur).n + 1;
    if (arena > UINT32_MAX) return kvb_fail(KVB_ERR_CORRUPT, "%s: vocabulary text too large", f->path);
    struct kvb_vocab *v = alloc_vocab((int32_t)n, arena);
    if (!v) return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory for the vocabulary", f->path);
    cur = toks;
    uint32_t at = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_str s = kvb_gguf_arr_next_str(&cur);
        v->off[i] = at;
        memcpy(v->arena + at, s.p, s.n);
        at += (uint32_t)s.n;
        v->arena[at++] = 0;
        if (scores) memcpy(&v->score[i], scores + 4 * i, 4);
        int32_t ty = KVB_TOKEN_NORMAL;
        if (types) memcpy(&ty, types + 4 * i, 4);
        v->type[i] = (uint8_t)(ty >= 0 && ty <= 6 ? ty : KVB_TOKEN_NORMAL);
    }
    v->off[n] = at;
    if (bpe) {
        v->kind = KVB_VOCAB_BPE;
        v->pre = pre;
        v->ignore_merges = ignore_merges;
        v->add_bos = pre_add_bos; v->add_space_prefix = false; /* the GGUF's keys below override these */
        v->bos = v->eos = v->unk = -1;
        if ((st = load_merges(f, v)) != KVB_OK) {
            kvb_vocab_free(v);
            return st;
        }
    }
    uint32_t u;
    bool b;
    if (kvb_gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &u, false) == KVB_OK) v->bos = u < n ? (int32_t)u : -1;
    if (kvb_gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &u, false) == KVB_OK) v->eos = u < n ? (int32_t)u : -1;
    if (kvb_gguf_get_u32(f, "tokenizer.ggml.unknown_token_id", &u, false) == KVB_OK) v->unk = u < n ? (int32_t)u : -1;
    if (kvb_gguf_get_u32(f, "tokenizer.ggml.eot_token_id", &u, false) == KVB_OK) v->eot = u < n ? (int32_t)u : -1;
    if (kvb_gguf_get_u32(f, "tokenizer.ggml.padding_token_id", &u, false) == KVB_OK) v->pad = u < n ? (int32_t)u : -1;
    if (kvb_gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b, false) == KVB_OK) v->add_bos = b;
    if (kvb_gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &b, false) == KVB_OK) v->add_eos = b;
    if (kvb_gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &b, false) == KVB_OK) v->add_space_prefix = b;
    if (pre == KVB_PRE_GEMMA4 && bpe) {
        v->add_bos = true; /* llama.cpp forces it over add_bos_token for gemma4 */
        if (v->bos < 0) {
            kvb_vocab_free(v);
            return kvb_fail(KVB_ERR_CORRUPT, "%s: tokenizer.ggml.bos_token_id is missing or out of range, and a 'gemma4' vocabulary always adds BOS",
                            f->path);
        }
        gemma4_token_types(v);
    }
    if ((st = finish(v, f->path)) != KVB_OK) {
        kvb_vocab_free(v);
        return st;
    }
    if (v->eot < 0 && v->pre == KVB_PRE_GEMMA4 && bpe) { /* kvbound's chat stops at EOT: Gemma 4 ends a turn with <turn|> */
        int32_t id = kvb_vocab_find(v, "<turn|>", 7);
        if (id >= 0 && v->type[id] == KVB_TOKEN_CONTROL) v->eot = id;
    }
    static const char *const k_eot_text[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"};
    for (size_t k = 0; v->eot < 0 && k < sizeof k_eot_text / sizeof *k_eot_text; k++) { /* as llama.cpp guesses it */
        int32_t id = kvb_vocab_find(v, k_eot_text[k], strlen(k_eot_text[k]));
        if (id >= 0 && v->type[id] == KVB_TOKEN_CONTROL) v->eot = id;
    }
    *out = v;
    return KVB_OK;
}

kvb_status kvb_vocab_read_chat_template(const struct gguf_file *f, struct kvb_vocab *v, const char *path) {
    struct gguf_str t;
    if (kvb_gguf_get_str(f, "tokenizer.chat_template", &t, false) != KVB_OK || t.n >= (1u << 20)) return KVB_OK;
    char *c = kvb_malloc((size_t)t.n + 1);
    if (!c) return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory for the chat template", path);
    memcpy(c, t.p, (size_t)t.n);
    c[t.n] = 0;
    kvb_free(v->chat_template);
    v->chat_template = c;
    return KVB_OK;
}

kvb_status kvb_vocab_load(const char *path, struct kvb_vocab **out) {
    if (!path || !out) return kvb_fail(KVB_ERR_INVALID, "vocab_load: NULL argument");
    struct gguf_file *f;
    kvb_status st = kvb_gguf_open(path, &f);
    if (st != KVB_OK) return st;
    st = kvb_vocab_from_gguf(f, out);
    if (st == KVB_OK && (st = kvb_vocab_read_chat_template(f, *out, path)) != KVB_OK) {
        kvb_vocab_free(*out);
        *out = NULL;
    }
    kvb_gguf_close(f); /* the vocabulary holds copies */
    return st;
}

void kvb_vocab_get_info(const struct kvb_vocab *v, struct kvb_vocab_info *o) {
    memset(o, 0, sizeof *o);
    if (!v) return;
    o->bpe = v->kind == KVB_VOCAB_BPE;
    snprintf(o->pre, sizeof o->pre, "%s", o->bpe ? kvb_pre_name(v->pre) : "");
    o->n_tokens = v->n;
    o->n_merges = v->n_merges;
    o->add_space_prefix = v->add_space_prefix;
    o->ignore_merges = v->ignore_merges;
    o->add_bos = v->add_bos;
    o->bos = v->bos;
    o->eos = v->eos;
    o->eot = kvb_vocab_special(v, KVB_SPECIAL_EOT);
    o->chat_template = v->chat_template;
}

int32_t kvb_vocab_size(const struct kvb_vocab *v) { return v->n; }

/* The special token whose text starts at text[at], longest first, or -1:
 * USER_DEFINED tokens always match, CONTROL/UNKNOWN ones only with
 * parse_special (llama.cpp's partition rule). */
int32_t kvb_vocab_match_special(const struct kvb_vocab *v, const char *text, size_t len, size_t at, bool parse_special) {
    for (int32_t k = 0; k < v->n_special; k++) {
        int32_t id = v->special[k];
        if (!parse_special && v->type[id] != KVB_TOKEN_USER_DEFINED) continue;
        uint32_t l = kvb_vocab_len(v, id);
        if (l <= len - at && memcmp(text + at, kvb_vocab_text(v, id), l) == 0) return id;
    }
    return -1;
}

static kvb_status tok_finish(struct kvb_tok_out *o, size_t text_len, int32_t **ids, int32_t *n_ids) {
    if (!o->ids && !o->oom) { /* no tokens: still a valid allocation for the caller */
        o->ids = kvb_malloc(sizeof(int32_t));
        o->oom = !o->ids;
    }
    if (o->oom) {
        kvb_free(o->ids);
        return kvb_fail(KVB_ERR_NOMEM, "tokenize: out of memory for %zu bytes of text", text_len);
    }
    *ids = o->ids;
    *n_ids = o->n;
    return KVB_OK;
}

size_t kvb_vocab_bytes(const struct kvb_vocab *v) {
    const size_t n = (size_t)v->n, m = (size_t)v->n_merges;
    size_t b = sizeof *v + v->off[n] + 4 * (n + 1) + 4 * n + n + 4 * (size_t)v->hash_cap + 4 * KVB_MAX(n, 1);
    if (v->merge_off) b += v->merge_off[m] + 4 * (m + 1) + 4 * (size_t)v->merge_cap;
    return b;
}

bool kvb_vocab_is_eog(const struct kvb_vocab *v, int32_t id) {
    if (!v || id < 0 || id >= v->n) return false;
    if (id == v->eos || id == v->eot) return true;
    if (!v->type || (v->type[id] != KVB_TOKEN_CONTROL && v->type[id] != KVB_TOKEN_USER_DEFINED)) return false;
    /* the end-of-turn and end-of-text markers of the families, as llama.cpp collects its EOG set */
    const char *t = kvb_vocab_text(v, id);
    for (size_t i = 0; i < N_EOG_NAMES; i++)
        if (t && !strcmp(t, k_eog_names[i])) return true;
    return false;
}

int32_t kvb_vocab_special(const struct kvb_vocab *v, enum kvb_special_token which) {
    switch (which) {
    case KVB_SPECIAL_BOS: return v->bos;
    case KVB_SPECIAL_EOS: return v->eos;
    case KVB_SPECIAL_EOT: return v->eot >= 0 ? v->eot : v->eos;
    case KVB_SPECIAL_PAD: return v->pad;
    }
    return -1;
}

kvb_status kvb_vocab_from_llama2c(const void *buf, size_t size, int32_t n_vocab, const char *name, struct kvb_vocab **out) {
    const uint8_t *p = buf;
    if (n_vocab < 3 || n_vocab > (1 << 24)) return kvb_fail(KVB_ERR_INVALID, "%s: vocabulary size %d out of range", name, (int)n_vocab);
    if (size < 4) return kvb_fail(KVB_ERR_CORRUPT, "%s: too short for a tokenizer.bin", name);
    if ((size - 4) / 8 < (size_t)n_vocab)
        return kvb_fail(KVB_ERR_CORRUPT, "%s: %zu bytes cannot hold %d tokens", name, size, (int)n_vocab);
    uint32_t max_len;
    memcpy(&max_len, p, 4);
    /* first pass: sizes (each "▁" may replace a space: 3 bytes for 1) */
    size_t at = 4, arena = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        int32_t len;
        if (size - at < 8) return kvb_fail(KVB_ERR_CORRUPT, "%s: token %d: record runs past the end of the file", name, (int)i);
        memcpy(&len, p + at + 4, 4);
        at += 8;
        if (len < 0 || (size_t)len > size - at)
            return kvb_fail(KVB_ERR_CORRUPT, "%s: token %d: length %d runs past the end of the file", name, (int)i, (int)len);
        if ((uint32_t)len > max_len) return kvb_fail(KVB_ERR_CORRUPT, "%s: token %d: length %d exceeds max_token_length %u", name, (int)i, (int)len, max_len);
        arena += (size_t)len * 3 + 1;
        at += (size_t)len;
    }
    struct kvb_vocab *v = alloc_vocab(n_vocab, arena + 16);
    if (!v) return kvb_fail(KVB_ERR_NOMEM, "%s: out of memory for the vocabulary", name);
    at = 4;
    uint32_t o = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        int32_t len;
        memcpy(&v->score[i], p + at, 4);
        memcpy(&len, p + at + 4, 4);
        at += 8;
        const char *s = (const char *)p + at;
        at += (size_t)len;
        v->off[i] = o;
        if (i == 1 || i == 2) { /* "\n<s>\n", "\n</s>\n" */
            const char *t = i == 1 ? "<s>" : "</s>";
            memcpy(v->arena + o, t, strlen(t));
            o += (uint32_t)strlen(t);
            v->type[i] = KVB_TOKEN_CONTROL;
        } else {
            for (int32_t k = 0; k < len; k++) {
                if (s[k] == ' ') { memcpy(v->arena + o, "\xE2\x96\x81", 3); o += 3; }
                else v->arena[o++] = s[k];
            }
            bool is_byte = byte_of_piece(s, (uint32_t)len) >= 0;
            v->type[i] = i == 0 ? KVB_TOKEN_UNKNOWN : is_byte ? KVB_TOKEN_BYTE : KVB_TOKEN_NORMAL;
        }
        v->arena[o++] = 0;
    }
    v->off[n_vocab] = o;
    kvb_status st = finish(v, name);
    if (st != KVB_OK) {
        kvb_vocab_free(v);
        return st;
    }
    *out = v;
    return KVB_OK;
}

size_t kvb_vocab_piece(const struct kvb_vocab *v, int32_t id, char *buf, size_t cap) {
    if (id < 0 || id >= v->n) return 0;
    const uint8_t ty = v->type[id];
    if (ty == KVB_TOKEN_CONTROL || ty == KVB_TOKEN_UNUSED) return 0;
    if (v->kind == KVB_VOCAB_BPE) return kvb_bpe_piece(v, id, buf, cap);
    const char *t = kvb_vocab_text(v, id);
    uint32_t len = kvb_vocab_len(v, id);
    if (ty == KVB_TOKEN_BYTE) {
        int b = byte_of_piece(t, len);
        if (b < 0) return 0;
        if (cap) buf[0] = (char)b;
        return 1;
    }
    size_t n = 0;
    for (uint32_t i = 0; i < len;) {
        if (i + 3 <= len && memcmp(t + i, "\xE2\x96\x81", 3) == 0) {
            if (n < cap) buf[n] = ' ';
            n++;
            i += 3;
        } else {
            if (n < cap) buf[n] = t[i];
            n++;
            i++;
        }
    }
    return n;
}

void kvb_tok_fragment(const struct kvb_vocab *v, const char *text, size_t len, int32_t special, bool *after_special,
                      struct kvb_tok_out *o) {
    if (len) {
        if (v->kind == KVB_VOCAB_BPE) kvb_bpe_fragment(v, text, len, o);
        else kvb_spm_fragment(v, text, len, *after_special, o);
        *after_special = false;
    }
    if (special >= 0) {
        kvb_tok_emit(o, special);
        *after_special = true;
    }
}

/* Splits the text at special tokens (match_special's rule), emits
 * their ids and hands each raw fragment between them to the vocabulary's
 * encoder; BOS/EOS around it all when add_special and the vocabulary asks. */
kvb_status kvb_vocab_tokenize(const struct kvb_vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                              int32_t **ids, int32_t *n_ids) {
    if (!v || (!text && len) || !ids || !n_ids) return kvb_fail(KVB_ERR_INVALID, "tokenize: bad arguments");
    if (v->kind == KVB_VOCAB_NONE)
        return kvb_fail(KVB_ERR_UNSUPPORTED, "tokenize: this model has no vocabulary (tokenizer.ggml.model 'no_vocab'): it takes token ids only");
    struct kvb_tok_out o = {0};
    bool after_special = true;
    if (add_special && v->add_bos && v->bos >= 0) kvb_tok_emit(&o, v->bos);
    size_t start = 0;
    for (size_t at = 0; at <= len;) {
        int32_t sp = at < len && v->special_first[(uint8_t)text[at]] ? kvb_vocab_match_special(v, text, len, at, parse_special) : -1;
        if (at == len || sp >= 0) {
            kvb_tok_fragment(v, text + start, at - start, sp, &after_special, &o);
            if (at == len) break;
            at += kvb_vocab_len(v, sp);
            start = at;
            continue;
        }
        at++;
    }
    if (add_special && v->add_eos && v->eos >= 0) kvb_tok_emit(&o, v->eos);
    return tok_finish(&o, len, ids, n_ids);
}
