/*
 * dot_sve.c — the sve family's own weight kernels (its table, whose other
 * slots are the dotprod family's kernels, is in dot_dotprod.c): the decode
 * hot paths written vector-length-agnostic with the ACLE (arm_sve.h),
 * built with -march=armv8.2-a+sve and only on AArch64 (CMakeLists.txt).
 * The family runs only where SVE's vectors are wider than NEON's 128 bits
 * (dispatch.c), but these kernels are right at every vector length: each
 * loop steps by svcntb()/svcntw() and predicates its tail.
 *
 * Integer dots (Q8_0, Q4_0 against int8 activations): a block of 32 codes
 * is one predicated SDOT (svdot) per vector of at least 256 bits (two at
 * 128), summed by SADDV: the block's exact integer sum; then the blocks are
 * scaled and summed in double in block order exactly as the scalar
 * reference (ref/dot_ref.c) and dot_arm.h: the reference's bits. Q4_0's 16
 * bytes are loaded once replicated into every 128-bit quadword (LD1RQB):
 * code j < 16 is the low nibble of lane j, code j >= 16 the high nibble of
 * lane j (which holds byte j - 16); lanes past 32 meet zero activations
 * (a predicated load), so they add nothing.
 *
 * Float rows (f32, f16, bf16 against f32): four predicated FMA chains of a
 * vector each, summed by FADDV at the end (the NEON families' order of
 * error, within test_quant's bound). f16 and bf16 are loaded as halfwords
 * zero-extended into 32-bit lanes (LD1H), then FCVT (exact) or a shift by
 * 16.
 */
#include "arm_kernels.h"
#include "../quant.h"

#include <arm_sve.h>

/* The exact integer dot of a block's 32 int8 codes w with its 32
 * activations x: a vector at a time (one at 256 bits or more). */
static inline int32_t sum_q8_sve(const int8_t *w, const int8_t *x) {
    svint32_t acc = svdup_n_s32(0);
    for (int32_t o = 0; o < 32; o += (int32_t)svcntb()) {
        const svbool_t pg = svwhilelt_b8_s32(o, 32);
        acc = svdot_s32(acc, svld1_s8(pg, w + o), svld1_s8(pg, x + o));
    }
    return (int32_t)svaddv_s32(svptrue_b32(), acc);
}

float kvb_dot_q8_0_q8_sve(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q8_0 *b = row;
    double acc = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const int32_t s = sum_q8_sve(b[i].qs, x->q + i * QK8_0);
        acc += (double)s * ((double)kvb_f16_to_f32(b[i].d) * (double)x->d[i]);
    }
    return (float)acc;
}

/* Q4_0's: the codes are the 16 bytes' nibbles less 8. */
static inline int32_t sum_q4_sve(const uint8_t *qs, const int8_t *x) {
    const svbool_t all = svptrue_b8();
    const svuint8_t v = svld1rq_u8(all, qs); /* byte l % 16 in lane l */
    const svuint8_t lo = svand_n_u8_x(all, v, 0xF), hi = svlsr_n_u8_x(all, v, 4);
    svint32_t acc = svdup_n_s32(0);
    for (int32_t o = 0; o < 32; o += (int32_t)svcntb()) {
        const svbool_t pg = svwhilelt_b8_s32(o, 32);
        const svuint8_t c = svsel_u8(svwhilelt_b8_s32(o, 16), lo, hi); /* codes o + l below 16: low nibbles */
        acc = svdot_s32(acc, svsub_n_s8_x(all, svreinterpret_s8_u8(c), 8), svld1_s8(pg, x + o));
    }
    return (int32_t)svaddv_s32(svptrue_b32(), acc);
}

float kvb_dot_q4_0_q8_sve(const void *row, const struct kvb_q8_act *x, int64_t n) {
    const struct block_q4_0 *b = row;
    double acc = 0;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const int32_t s = sum_q4_sve(b[i].qs, x->q + i * QK4_0);
        acc += (double)s * ((double)kvb_f16_to_f32(b[i].d) * (double)x->d[i]);
    }
    return (float)acc;
}

/* ---- float rows ---- */

enum { ROW_F32, ROW_F16, ROW_BF16 };

/* n weights of w's kind from element i (predicate pg) as f32 lanes. */
static inline svfloat32_t load_w(int kind, const void *w, int64_t i, svbool_t pg) {
    if (kind == ROW_F32) return svld1_f32(pg, (const float *)w + i);
    const svuint32_t h = svld1uh_u32(pg, (const uint16_t *)w + i); /* each half in a 32-bit lane's low half */
    if (kind == ROW_F16) return svcvt_f32_f16_x(pg, svreinterpret_f16_u32(h));
    return svreinterpret_f32_u32(svlsl_n_u32_x(pg, h, 16));
}

static inline float dot_row_sve(int kind, const void *w, const float *x, int64_t n) {
    const int64_t vl = (int64_t)svcntw();
    svfloat32_t a0 = svdup_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < n; i += 4 * vl) {
        const svbool_t p0 = svwhilelt_b32_s64(i, n), p1 = svwhilelt_b32_s64(i + vl, n);
        const svbool_t p2 = svwhilelt_b32_s64(i + 2 * vl, n), p3 = svwhilelt_b32_s64(i + 3 * vl, n);
        a0 = svmla_f32_m(p0, a0, load_w(kind, w, i, p0), svld1_f32(p0, x + i));
        a1 = svmla_f32_m(p1, a1, load_w(kind, w, i + vl, p1), svld1_f32(p1, x + i + vl));
        a2 = svmla_f32_m(p2, a2, load_w(kind, w, i + 2 * vl, p2), svld1_f32(p2, x + i + 2 * vl));
        a3 = svmla_f32_m(p3, a3, load_w(kind, w, i + 3 * vl, p3), svld1_f32(p3, x + i + 3 * vl));
    }
    const svbool_t all = svptrue_b32();
    return svaddv_f32(all, svadd_f32_x(all, svadd_f32_x(all, a0, a1), svadd_f32_x(all, a2, a3)));
}

float kvb_dot_f32_sve(const void *row, const float *x, int64_t n) { return dot_row_sve(ROW_F32, row, x, n); }
float kvb_dot_f16_sve(const void *row, const float *x, int64_t n) { return dot_row_sve(ROW_F16, row, x, n); }
float kvb_dot_bf16_sve(const void *row, const float *x, int64_t n) { return dot_row_sve(ROW_BF16, row, x, n); }
