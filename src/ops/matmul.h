/*
 * matmul.h — y = W x for model weights. W is row-major [n_out][n_in] in a
 * ggml type (row r at data + r * row_bytes), X is [T][n_in] f32, Y is
 * [T][n_out] f32: Y[t][r] = dot(W[r], X[t]). Rows are split across threads
 * by (ith, nth); each W row is read once for all T tokens (prefill reuses it
 * from cache). Reference kernels are scalar and always built; x86 versions
 * are chosen with the attention kernels, as one family of the kernel table
 * (dispatch.h; KVB_REF=1 forces the reference).
 */
#ifndef KVB_MATMUL_H
#define KVB_MATMUL_H

#include "ops.h"

#include "../core/ggml_types.h"

struct kvb_mat {
    uint32_t type;     /* enum ggml_type: f32, f16, bf16, q8_0, q4_0, q5_0, q4_K, q5_K, q6_K, ... */
    int64_t n_in, n_out;
    size_t row_bytes;
    const uint8_t *data;
};

/* dot of one row of `type` with x[0..n) */
typedef float (*kvb_dot_fn)(const void *row, const float *x, int64_t n);

/* The prefill micro-kernel. A panel of up to KVB_PANEL_ROWS weight rows is
 * packed k-major in f32 (wp[k * KVB_PANEL_ROWS + r]; rows past the panel's
 * end are zero) and multiplied with nt tokens:
 *   y[t * ldy + r] = sum over k = 0 .. n-1 of wp[k][r] * x[t * ldx + k]
 * for r < nr, computed as ONE fused multiply-add chain in k order,
 * acc = fmaf(wp[k][r], x[t][k], acc) from acc = 0. Every family computes
 * exactly those operations (the SIMD ones across r), so a pair's bits do not
 * depend on the family's tile shape, on which tokens share its tile, or on
 * how a prompt is chunked: kvb_panel_ref is the bit-exact reference. */
#define KVB_PANEL_ROWS 32
typedef void (*kvb_panel_fn)(const float *wp, int64_t n, const float *x, int64_t ldx, int nt, float *y, int64_t ldy, int nr);
void kvb_panel_ref(const float *wp, int64_t n, const float *x, int64_t ldx, int nt, float *y, int64_t ldy, int nr);
/* Packs rows [r0, r0 + nr) of w (nr <= KVB_PANEL_ROWS) into wp as above,
 * with the values kvb_dequantize_row gives; scratch holds KVB_PACK_SCRATCH_ROWS
 * rows of n floats. The SIMD families transpose 8 x 8 blocks in registers. */
#define KVB_PACK_SCRATCH_ROWS 8
typedef void (*kvb_pack_fn)(const struct kvb_mat *w, int64_t r0, int nr, float *wp, float *scratch);
void kvb_pack_panel(const struct kvb_mat *w, int64_t r0, int nr, float *wp, float *scratch);

/* Activations quantized to int8, in the form a weight type's integer dot
 * wants (kvb_act_form):
 *   KVB_ACT_Q8_0 (q8_0, q4_0, q5_0, q4_1, q5_1, iq4_nl, mxfp4 rows): blocks of 32, d[n/32] f32 scales, and
 *     s[n/32], the integer sums of q over each block (the VNNI tiles' offset
 *     of 128 on the weights costs one subtraction of 128 * s per block);
 *   KVB_ACT_Q8_K (q4_K, q5_K, q6_K, iq4_xs rows): blocks of 256, d[n/256] f32 scales, and
 *     s[n/16], the integer sums of q over each 16 (for the K-types' mins and
 *     q6_K's offset of 32, so they cost one multiply per sub-block).
 * Either way x[i] ~ d[block(i)] * q[i] with q in -127..127. */
struct kvb_q8_act {
    const float *d;
    const int8_t *q;   /* [n] */
    const int16_t *s;  /* KVB_ACT_Q8_K: [n/16] */
};
enum kvb_act_form { KVB_ACT_NONE, KVB_ACT_Q8_0, KVB_ACT_Q8_K };
/* The activation form of a weight type's integer dot (NONE: none). */
enum kvb_act_form kvb_act_form(uint32_t type);
typedef float (*kvb_dot_q8_fn)(const void *row, const struct kvb_q8_act *x, int64_t n);
#define KVB_Q8_TILE_ROWS_MAX 16
#define KVB_Q8_TILE_TOKENS_MAX 16
/* nr <= the family's q8_tile_rows Q8_0 rows (row_bytes apart) x nt <= its
 * q8_tile_tokens int8 tokens: out[t * ldo + r] = dot(row r, token t), each
 * pair computed exactly as the family's dot_q8[GGML_TYPE_Q8_0] computes it,
 * whatever the tile's shape. first: the first token group over these rows,
 * which prefetches the rows after them (the groups after it find these rows
 * in cache, and a prefetch per line and group cost ~10% of the tile from
 * memory); it changes no value. */
typedef void (*kvb_q8_tile_fn)(const void *rows, size_t row_bytes, int nr, const struct kvb_q8_act *x, int nt, int64_t n, float *out,
                               int64_t ldo, bool first);

/* One block of len activations (len a multiple of 32) to int8: *d = amax / 127
 * (amax the largest |x|, NaNs skipped), q[i] = x[i] / d rounded to nearest,
 * ties to even (0 for a NaN quotient; 0 everywhere when amax is 0). The
 * SIMD versions give the reference's bits for every input. */
typedef void (*kvb_quant_block_fn)(const float *x, int len, float *d, int8_t *q);
void kvb_quant_block_ref(const float *x, int len, float *d, int8_t *q);

/* One dot kernel per weight type (NULL: unsupported), the prefill panel kernel,
 * and optional integer kernels: rows of a type against int8 activations in
 * the type's kvb_act_form (decode), and Q8_0 and K-quant tiles (batches). */
struct kvb_dot_kernels {
    const char *name;
    kvb_dot_fn dot[GGML_TYPE_COUNT];
    kvb_panel_fn panel; /* the prefill micro-kernel (NULL: kvb_panel_ref) */
    kvb_pack_fn pack;   /* its packing (NULL: kvb_pack_panel) */
    kvb_dot_q8_fn dot_q8[GGML_TYPE_COUNT]; /* NULL: the type decodes through dot[] */
    kvb_q8_tile_fn q8_tile;                /* optional: tiles of dot_q8[Q8_0] (NULL: one pair at a time) */
    int q8_tile_rows;                      /* its rows per tile (<= KVB_Q8_TILE_ROWS_MAX) */
    int q8_tile_rows_one;                  /* rows per tile when there is one token (a row's bits are the same either way);
                                            * 0: one token takes dot_q8[Q8_0], which must have the tile's bits (sve) */
    int q8_tile_tokens;                    /* its tokens per tile (<= KVB_Q8_TILE_TOKENS_MAX) */
    bool q8_tile_prompts;                  /* Q8_0 prompts too go through q8_tile (else: the f32 panels) */
    kvb_quant_block_fn quant_block;        /* activations to int8 (NULL: kvb_quant_block_ref) */
    /* Optional K-quant tiles (q4_K, q5_K, q6_K; NULL: one pair at a time):
     * kq_tile[type] takes nr <= kq_tile_rows rows of type x nt <= kq_tile_tokens
     * tokens in Q8_K form, with kvb_q8_tile_fn's arguments and contract: each
     * pair has exactly the bits dot_q8[type] gives it, whatever the tile's
     * shape. A block's weights are unpacked once for the tile's tokens. */
    kvb_q8_tile_fn kq_tile[GGML_TYPE_COUNT];
    int kq_tile_rows;   /* <= KVB_Q8_TILE_ROWS_MAX */
    int kq_tile_tokens; /* <= KVB_Q8_TILE_TOKENS_MAX */
    bool kq_tile_prompts; /* K-quant prompts too go through kq_tile (else: the f32 panels) */
};
/* Quantizes x[0..n) (n a multiple of 32) into q8 blocks of 32 with their sums (the scalar reference). */
void kvb_quantize_act_q8(const float *x, int64_t n, float *d, int8_t *q, int16_t *s);
/* Quantizes x[0..n) (n a multiple of 256) into blocks of 256 with sums per 16 (the scalar reference). */
void kvb_quantize_act_q8k(const float *x, int64_t n, float *d, int8_t *q, int16_t *s);
/* The same with a family's quant_block: the same bits. */
void kvb_quantize_act_q8_with(const struct kvb_dot_kernels *k, const float *x, int64_t n, float *d, int8_t *q, int16_t *s);
void kvb_quantize_act_q8k_with(const struct kvb_dot_kernels *k, const float *x, int64_t n, float *d, int8_t *q, int16_t *s);
/* Scalar references of the integer dots (the SIMD kernels' contract): integer
 * sums inside a block, scaled and summed in double. */
float kvb_dot_q8_0_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q4_0_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q5_0_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n);
/* Q5_0 rows against f32 (the block dequantized, then the reference dot): every family's,
 * as Q5_0 weights go through their integer dot in decode and the panels in prefill. */
float kvb_dot_q5_0_ref(const void *row, const float *x, int64_t n);
float kvb_dot_q4_K_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q5_K_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q6_K_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n);
/* Rows against f32 by the reference (dequantized blocks): the types whose
 * every family decodes through its integer dot and prefills through panels. */
float kvb_dot_q5_K_ref(const void *row, const float *x, int64_t n);
float kvb_dot_q4_1_ref(const void *row, const float *x, int64_t n);
float kvb_dot_q5_1_ref(const void *row, const float *x, int64_t n);
float kvb_dot_q4_1_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_q5_1_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_iq4_nl_ref(const void *row, const float *x, int64_t n);
float kvb_dot_iq4_xs_ref(const void *row, const float *x, int64_t n);
float kvb_dot_mxfp4_ref(const void *row, const float *x, int64_t n);
float kvb_dot_iq4_nl_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_iq4_xs_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n);
float kvb_dot_mxfp4_q8_ref(const void *row, const struct kvb_q8_act *x, int64_t n);
/* The reference for a type (NULL: no integer form). */
kvb_dot_q8_fn kvb_dot_q8_ref(uint32_t type);
extern const struct kvb_dot_kernels kvb_dot_ref;
#if defined(__x86_64__)
extern const struct kvb_dot_kernels kvb_dot_avx2, kvb_dot_avxvnni, kvb_dot_avx512, kvb_dot_avx512vnni;
#endif
/* The weight kernels of the family in use (dispatch.c, with kvb_kernels()). */
const struct kvb_dot_kernels *kvb_dot_kernels(void);

/* Whether matmul supports a weight type. */
bool kvb_matmul_supports(uint32_t type);

/* Rows [r0, r1) of Y = X W^T for T tokens (ld: floats between tokens in X and Y). */
void kvb_matmul_rows(const struct kvb_dot_kernels *k, const struct kvb_mat *w, const float *x, int64_t ldx, float *y,
                     int64_t ldy, int32_t T, int64_t r0, int64_t r1);
/* Whole matmul on a thread pool (NULL: inline). */
void kvb_matmul(struct kvb_threadpool *tp, const struct kvb_mat *w, const float *x, int64_t ldx, float *y, int64_t ldy, int32_t T);
/* Whether w's rows go through the family's int8 tiles (Q8_0 weights on a
 * family whose q8_tile takes prompts, or q4_K/q5_K/q6_K on one whose
 * kq_tile does): then any rows, decode or prompt, can be multiplied
 * together by kvb_matmul_decode, each row's bits independent of the others.
 * A prompt piece then costs its rows alone: the f32 panels expand every
 * weight once per call, whatever its rows (about 300 ms for TinyLlama on
 * two threads), which a serving step that carries a few prompt rows paid in
 * full (docs/BENCHMARKS.md, "Stall-free steps: the gap users feel" and
 * "AVX2's K-quant prompts"). */
bool kvb_matmul_int8_tiles(const struct kvb_mat *w);
/* Whether w's rows go through the family's integer dot in kvb_matmul_decode
 * (its type has an int8 activation form): then a few rows cost less there
 * than a prompt panel, whose expansion to f32 is paid once per call. */
bool kvb_matmul_int8_rows(const struct kvb_mat *w);
/* Prompt chunks of several sequences (each T >= 2, rows r0[c] .. r0[c] +
 * T[c] - 1): every weight panel is expanded once for all of them, and each
 * chunk's outputs are bit-identical to kvb_matmul on that chunk alone. */
void kvb_matmul_chunks(struct kvb_threadpool *tp, const struct kvb_mat *w, const float *x, int64_t ldx, float *y, int64_t ldy,
                       const int32_t *r0, const int32_t *T, int32_t n);
/* Room for the int8 activations of up to KVB_Q8_BUF_TOKENS decode tokens of
 * cap elements in all (kvb_matmul_decode quantizes each token once). */
#define KVB_Q8_BUF_TOKENS 4096
struct kvb_q8_buf {
    float *d;       /* [cap / 32] */
    int8_t *q;      /* [cap] */
    int16_t *s;     /* [cap / 16] */
    int64_t cap;
    struct kvb_q8_act act[KVB_Q8_BUF_TOKENS];
};
/* N decode tokens at once (batched decode), each as kvb_matmul with T = 1.
 * qb (may be NULL: then slower, same bits) holds the int8 activations; more
 * than KVB_Q8_BUF_TOKENS tokens go in slices of that many. */
void kvb_matmul_decode(struct kvb_threadpool *tp, const struct kvb_mat *w, const float *x, int64_t ldx, float *y, int64_t ldy,
                       int32_t N, struct kvb_q8_buf *qb);
/* kvb_matmul_decode of n_mat (<= 4) matrices with the same n_in on the same
 * N rows of x, y[i] with stride ldy[i]: one threadpool run over all their
 * rows, the activations quantized once when the matrices share an int8 form;
 * each y[i] bit-identical to kvb_matmul_decode(w[i]) alone. */
void kvb_matmul_decode_group(struct kvb_threadpool *tp, const struct kvb_mat *const *w, int32_t n_mat, const float *x, int64_t ldx,
                             float *const *y, const int64_t *ldy, int32_t N, struct kvb_q8_buf *qb);

#endif
