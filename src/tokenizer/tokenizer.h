/*
 * tokenizer.h — vocabularies and tokenizers. One vocabulary structure for
 * every source (GGUF `tokenizer.ggml.*` metadata, llama2.c `tokenizer.bin`),
 * normalised to the GGUF conventions: U+2581 "▁" for spaces in SentencePiece
 * pieces, byte tokens written "<0xNN>", token types as in llama.cpp.
 * The encoder is chosen by the vocabulary kind: SentencePiece BPE (spm.c)
 * or BPE with merges and a family pre-tokenizer (bpe.c): byte-level (GPT-2's
 * byte mapping) for "gpt2", or over raw UTF-8 with "▁" for spaces and
 * <0xNN> byte tokens for "gemma4" (kind KVB_VOCAB_BPE, pre KVB_PRE_GEMMA4).
 *
 * Files call one way (tests/src_layers.py): plain.c (client text kept
 * plain) and decode.c (streams of ids to bytes) call vocab.c (loading, pieces
 * back to bytes, the front kvb_vocab_tokenize), which calls the encoders
 * spm.c and bpe.c (bpe.c -> unicode.c -> unicode_tables.c); the fronts and
 * the encoders look pieces up and emit ids through lookup.c, which calls
 * none of them.
 */
#ifndef KVB_TOKENIZER_H
#define KVB_TOKENIZER_H

#include "../core/core.h"

struct gguf_file;

enum kvb_token_type {
    KVB_TOKEN_UNDEFINED = 0,
    KVB_TOKEN_NORMAL = 1,
    KVB_TOKEN_UNKNOWN = 2,
    KVB_TOKEN_CONTROL = 3,
    KVB_TOKEN_USER_DEFINED = 4,
    KVB_TOKEN_UNUSED = 5,
    KVB_TOKEN_BYTE = 6,
};

enum kvb_vocab_kind {
    KVB_VOCAB_SPM = 0, /* SentencePiece BPE with byte fallback ("llama") */
    KVB_VOCAB_BPE = 1, /* byte-level BPE with merges ("gpt2") */
    KVB_VOCAB_NONE = 2, /* "no_vocab": ids only, n_vocab from <arch>.vocab_size (llama.cpp's test models) */
};

/* Pre-tokenizer of a byte-level BPE vocabulary (tokenizer.ggml.pre), one per
 * llama.cpp pre type that kvbound knows; the regular expressions are in bpe.c. */
enum kvb_pre_type {
    KVB_PRE_GPT2 = 0,  /* "gpt-2" */
    KVB_PRE_LLAMA3,    /* "llama-bpe", "llama3" (ignore_merges, BOS) */
    KVB_PRE_QWEN2,     /* "qwen2", "deepseek-r1-qwen" */
    KVB_PRE_SMOLLM,    /* "smollm" */
    KVB_PRE_DEFAULT,   /* "default", or a BPE vocabulary without the key: four passes */
    KVB_PRE_DBRX,      /* "dbrx", "glm4", "chatglm-bpe": Llama 3's expression, merges always */
    KVB_PRE_SMAUG,     /* "smaug-bpe": the same */
    KVB_PRE_REFACT,    /* "refact" (Granite): digits alone, then GPT-2, as smollm */
    KVB_PRE_STARCODER, /* "starcoder": the same */
    KVB_PRE_GPT4O,     /* "gpt-4o" (Phi-4-mini) */
    KVB_PRE_TEKKEN,    /* "tekken" (Mistral Nemo, Ministral 3; ignore_merges, BOS) */
    KVB_PRE_QWEN35,    /* "qwen35" (Qwen3.5, Qwen3.6): qwen2's with marks joining letters */
    KVB_PRE_GEMMA4,    /* "gemma4" (tokenizer.ggml.model "gemma4"): spaces as "▁", raw UTF-8 pieces, <0xNN> bytes; BOS always */
    KVB_PRE_COUNT
};

struct kvb_vocab {
    enum kvb_vocab_kind kind;
    int32_t n;
    char *arena;          /* all pieces, NUL-separated */
    uint32_t *off;        /* [n + 1] offsets into arena */
    float *score;         /* [n] */
    uint8_t *type;        /* [n] enum kvb_token_type */
    int32_t *hash;        /* open addressing: piece -> id, -1 empty */
    uint32_t hash_cap;    /* power of two */
    int32_t byte_id[256]; /* id of <0xNN>, or -1 */
    int32_t bos, eos, unk, eot, pad; /* -1: none */
    bool add_bos, add_eos, add_space_prefix;
    int32_t *special;     /* ids of CONTROL / USER_DEFINED tokens with text, longest first */
    int32_t n_special;
    bool spm_word_split;   /* no piece has "▁" after another character: text may be cut before each word */
    bool special_first[256]; /* some special text starts with this byte */
    /* byte-level BPE only */
    enum kvb_pre_type pre;
    bool ignore_merges;   /* a piece that is already a token is taken whole (Llama 3) */
    char *merge_arena;    /* "left right" texts, NUL-separated */
    uint32_t *merge_off;  /* [n_merges + 1] */
    int32_t *merge_hash;  /* "left right" -> rank, -1 empty */
    uint32_t merge_cap;
    int32_t n_merges;
    char *chat_template;  /* kvb_vocab_load only: tokenizer.chat_template, or NULL */
};

static inline const char *kvb_vocab_text(const struct kvb_vocab *v, int32_t id) { return v->arena + v->off[id]; }
static inline uint32_t kvb_vocab_len(const struct kvb_vocab *v, int32_t id) { return v->off[id + 1] - v->off[id] - 1; }
/* FNV-1a of s[0..n): the hash of pieces (lookup.c) and of merges (bpe.c). */
static inline uint32_t kvb_fnv1a(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* From GGUF metadata: tokenizer.ggml.model "llama" (SentencePiece), "gpt2"
 * (byte-level BPE; tokenizer.ggml.pre picks the pre-tokenizer and must be a
 * known one) or "gemma4" (BPE over raw UTF-8: pre "gemma4" whatever the
 * key says, as llama.cpp; needs tokenizer.ggml.bos_token_id). Errors name
 * the key; *out is untouched on failure. */
kvb_status kvb_vocab_from_gguf(const struct gguf_file *f, struct kvb_vocab **out);
/* Copies the file's tokenizer.chat_template (if any, under 1 MiB) into v. KVB_ERR_NOMEM names path. */
kvb_status kvb_vocab_read_chat_template(const struct gguf_file *f, struct kvb_vocab *v, const char *path);
/* From a llama2.c tokenizer.bin image (buffer) of n_vocab records. */
kvb_status kvb_vocab_from_llama2c(const void *buf, size_t size, int32_t n_vocab, const char *name, struct kvb_vocab **out);
void kvb_vocab_free(struct kvb_vocab *v);

/* The tokenizer.ggml.pre name of a pre-tokenizer ("gpt-2", "llama-bpe", ...). */
const char *kvb_pre_name(enum kvb_pre_type pre);
/* tokenizer.ggml.pre text[0..len) -> its pre-tokenizer and the flags llama.cpp
 * sets with it (before the GGUF's own add_bos_token key); false if unknown. */
bool kvb_pre_lookup(const char *text, size_t len, enum kvb_pre_type *pre, bool *ignore_merges, bool *add_bos);

/* Bytes the vocabulary's structures occupy (pieces, tables, merges). */
size_t kvb_vocab_bytes(const struct kvb_vocab *v);

/* Tokenizes text[0..len). *ids is allocated with the library allocator (free
 * with kvb_free), even when *n_ids is 0; KVB_ERR_NOMEM. add_special: BOS (and EOS) as the vocabulary
 * asks; parse_special: control-token text such as "<s>" becomes that token. */
kvb_status kvb_vocab_tokenize(const struct kvb_vocab *v, const char *text, size_t len, bool add_special,
                              bool parse_special, int32_t **ids, int32_t *n_ids);

/* The special token whose text starts at text[at], longest first, or -1:
 * USER_DEFINED tokens always match, CONTROL/UNKNOWN ones only with
 * parse_special (llama.cpp's partition rule). */
int32_t kvb_vocab_match_special(const struct kvb_vocab *v, const char *text, size_t len, size_t at, bool parse_special);

/* Bytes a token decodes to ("▁" -> ' ', byte tokens -> their byte, control
 * tokens -> nothing). Returns the length; writes at most cap bytes. */
size_t kvb_vocab_piece(const struct kvb_vocab *v, int32_t id, char *buf, size_t cap);

/* ---- lookup.c: below the fronts and the encoders, calls none of them ---- */

/* Id of an exact piece, or -1. */
int32_t kvb_vocab_find(const struct kvb_vocab *v, const char *text, size_t len);
/* Puts piece id into v's hash (allocated, all -1 at first) unless an equal
 * piece is already there: the first occurrence wins. vocab.c, at load. */
void kvb_vocab_index(struct kvb_vocab *v, int32_t id);
/* The id list the encoders fill (kvb_tok_emit grows it; oom is sticky). */
struct kvb_tok_out {
    int32_t *ids;
    int32_t n;
    int64_t cap; /* for kvb_grow */
    bool oom;
};
void kvb_tok_emit(struct kvb_tok_out *o, int32_t id);

/* ---- the encoders (spm.c, bpe.c), called by the fronts ---- */

/* Encoders of one raw fragment (text between special tokens), called by
 * kvb_vocab_tokenize after it has split the text at special tokens.
 * after_special: the fragment starts the text or follows a special token
 * (SentencePiece adds its space prefix then). */
void kvb_spm_fragment(const struct kvb_vocab *v, const char *text, size_t len, bool after_special, struct kvb_tok_out *o);
void kvb_bpe_fragment(const struct kvb_vocab *v, const char *text, size_t len, struct kvb_tok_out *o);
/* vocab.c: one fragment by the vocabulary's encoder, then (special >= 0) the special
 * token that ends it: *after_special is the SentencePiece state carried
 * between them (true at the text's start). Nothing is encoded for len 0. */
void kvb_tok_fragment(const struct kvb_vocab *v, const char *text, size_t len, int32_t special, bool *after_special,
                      struct kvb_tok_out *o);

/* The pre-tokenizer alone, for tests: the byte offset where each piece of
 * text[0..len) ends (ascending, the last one len). *ends is allocated with the
 * library allocator (free with kvb_free), even when *n is 0; KVB_ERR_NOMEM. */
kvb_status kvb_bpe_pre_split(enum kvb_pre_type pre, const char *text, size_t len, size_t **ends, int32_t *n);

/* Byte-level BPE internals (bpe.c), reached through the functions above. */
kvb_status kvb_bpe_build_merges(struct kvb_vocab *v, const char *const *m, const uint32_t *len, int32_t n, const char *name);
size_t kvb_bpe_piece(const struct kvb_vocab *v, int32_t id, char *buf, size_t cap);

#endif
