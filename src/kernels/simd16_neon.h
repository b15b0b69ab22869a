/*
 * simd16_neon.h: simd16.h's 16 lanes on aarch64, as four 128-bit NEON
 * registers (lanes 4q .. 4q + 3 in v[q], bytes 16q .. 16q + 15 of the 64).
 * Included by simd16.h only (BT_SIMD16_NEON: Armv8.2-A dotprod or later).
 *
 * Each operation gives each lane the bits the x86 builds give it: IEEE
 * single operations and fused multiply-adds round alike, and where NEON
 * defines an edge case differently from SSE/AVX it is made to agree here:
 * max(a, b) is a > b ? a : b (x86's maxps, so signed zeros and NaNs pick
 * the same operand), and a float to int32 conversion out of range or of a
 * NaN gives INT32_MIN (cvtps2dq) where NEON would saturate. The integer
 * dot products are exact: sdot on signed bytes where the unsigned operand
 * is below 128, usdot (i8mm) otherwise, or without i8mm sdot on the
 * operand minus 128 and 128 times the sum of the other's bytes.
 */
#ifndef BT_SIMD16_NEON_H
#define BT_SIMD16_NEON_H

#include <arm_neon.h>

typedef struct {
    float32x4_t v[4];
} v16f;
typedef struct {
    int32x4_t v[4];
} v16i;

/* unrolled, so that the four registers of a value stay registers */
#define NEON_EACH(q) _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++)

S16 v16f v16f_zero(void)
{
    v16f r;
    NEON_EACH(q) r.v[q] = vdupq_n_f32(0.0f);
    return r;
}
S16 v16f v16f_set1(float a)
{
    v16f r;
    NEON_EACH(q) r.v[q] = vdupq_n_f32(a);
    return r;
}
S16 v16f v16f_fma(v16f a, v16f b, v16f c)
{
    NEON_EACH(q) c.v[q] = vfmaq_f32(c.v[q], a.v[q], b.v[q]);
    return c;
}
/* a op b, quarter by quarter */
#define NEON_LANEWISE(T, name, op)                                                               \
    S16 T name(T a, T b)                                                                         \
    {                                                                                            \
        NEON_EACH(q) a.v[q] = op(a.v[q], b.v[q]);                                                \
        return a;                                                                                \
    }
NEON_LANEWISE(v16f, v16f_mul, vmulq_f32)
NEON_LANEWISE(v16f, v16f_sub, vsubq_f32)
/* x86's maxps: a where a > b, else b */
S16 float32x4_t max4(float32x4_t a, float32x4_t b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
NEON_LANEWISE(v16f, v16f_max, max4)
S16 v16f v16f_abs(v16f a)
{
    NEON_EACH(q) a.v[q] = vabsq_f32(a.v[q]);
    return a;
}
S16 float v16f_hmax(v16f a)
{
    const float32x4_t m = max4(max4(a.v[0], a.v[2]), max4(a.v[1], a.v[3]));
    const float32x4_t h = max4(m, vextq_f32(m, m, 2));
    return vgetq_lane_f32(max4(h, vextq_f32(h, h, 1)), 0);
}
S16 v16f v16f_load(const void *p)
{
    const float *f = (const float *)p;
    v16f r;
    NEON_EACH(q) r.v[q] = vld1q_f32(f + 4 * q);
    return r;
}
S16 v16f v16f_load_f16(const void *p)
{
    const uint16_t *h = (const uint16_t *)p;
    v16f r;
    NEON_EACH(q) r.v[q] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h + 4 * q)));
    return r;
}
S16 v16f v16f_load_bf16(const void *p)
{
    const uint16_t *h = (const uint16_t *)p;
    v16f r;
    NEON_EACH(q) r.v[q] = vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(h + 4 * q), 16));
    return r;
}
S16 v16f v16f_from_u8(const void *p)
{
    const uint16x8_t w = vmovl_u8(vld1_u8(p)), w2 = vmovl_u8(vld1_u8((const uint8_t *)p + 8));
    v16f r;
    r.v[0] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(w)));
    r.v[1] = vcvtq_f32_u32(vmovl_high_u16(w));
    r.v[2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(w2)));
    r.v[3] = vcvtq_f32_u32(vmovl_high_u16(w2));
    return r;
}
S16 v16f v16f_from_i8(const void *p)
{
    const int16x8_t w = vmovl_s8(vld1_s8(p)), w2 = vmovl_s8(vld1_s8((const int8_t *)p + 8));
    v16f r;
    r.v[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(w)));
    r.v[1] = vcvtq_f32_s32(vmovl_high_s16(w));
    r.v[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(w2)));
    r.v[3] = vcvtq_f32_s32(vmovl_high_s16(w2));
    return r;
}
S16 v16f v16f_from_i32(v16i a)
{
    v16f r;
    NEON_EACH(q) r.v[q] = vcvtq_f32_s32(a.v[q]);
    return r;
}
S16 void v16f_store_n(float *p, v16f a, int n)
{
    if (n >= 16) {
        NEON_EACH(q) vst1q_f32(p + 4 * q, a.v[q]);
        return;
    }
    float t[16];
    NEON_EACH(q) vst1q_f32(t + 4 * q, a.v[q]);
    memcpy(p, t, sizeof(float) * (size_t)(n > 0 ? n : 0));
}
/* Round to nearest (even); INT32_MIN where x86 gives it (NaN, |a| >= 2^31). */
S16 int32x4_t round4(float32x4_t a)
{
    const uint32x4_t in = vcaltq_f32(a, vdupq_n_f32(2147483648.0f));
    return vbslq_s32(in, vcvtnq_s32_f32(a), vdupq_n_s32(INT32_MIN));
}
S16 v16i v16f_round(v16f a)
{
    v16i r;
    NEON_EACH(q) r.v[q] = round4(a.v[q]);
    return r;
}
S16 v16f v16f_round_f(v16f a)
{
    NEON_EACH(q) a.v[q] = vrndnq_f32(a.v[q]);
    return a;
}
/* Lanes below n (any int) all ones, the others 0. */
S16 uint32x4_t below4(int n, int q)
{
    static const int32_t iota[4] = {0, 1, 2, 3};
    return vcltq_s32(vld1q_s32(iota), vdupq_n_s32(n - 4 * q));
}
S16 v16f v16f_load_n(const float *p, int n, float fill)
{
    if (n >= 16)
        return v16f_load(p);
    float t[16];
    for (int i = 0; i < 16; i++)
        t[i] = i < n ? p[i] : fill;
    return v16f_load(t);
}
S16 v16f v16f_keep_n(v16f a, int n)
{
    NEON_EACH(q)
    a.v[q] = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(a.v[q]), below4(n, q)));
    return a;
}
NEON_LANEWISE(v16i, v16i_add, vaddq_s32)
NEON_LANEWISE(v16i, v16i_sub, vsubq_s32)
S16 v16i v16i_sra1(v16i a)
{
    NEON_EACH(q) a.v[q] = vshrq_n_s32(a.v[q], 1);
    return a;
}
S16 v16f v16i_pow2(v16i k) /* 2^k as a float, k in -126..127 */
{
    v16f r;
    NEON_EACH(q)
    r.v[q] = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k.v[q], vdupq_n_s32(127)), 23));
    return r;
}

typedef struct {
    float64x2_t v[8];
} v16d;
S16 v16d v16d_zero(void)
{
    v16d r;
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        r.v[i] = vdupq_n_f64(0.0);
    return r;
}
S16 v16d v16d_add_f(v16d a, v16f b)
{
    NEON_EACH(q)
    {
        a.v[2 * q] = vaddq_f64(a.v[2 * q], vcvt_f64_f32(vget_low_f32(b.v[q])));
        a.v[2 * q + 1] = vaddq_f64(a.v[2 * q + 1], vcvt_high_f64_f32(b.v[q]));
    }
    return a;
}
S16 void v16d_store(double *p, v16d a)
{
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        vst1q_f64(p + 2 * i, a.v[i]);
}

S16 v16i v16i_set1(int32_t a)
{
    v16i r;
    NEON_EACH(q) r.v[q] = vdupq_n_s32(a);
    return r;
}
S16 v16i v16i_load(const void *p)
{
    const int32_t *w = (const int32_t *)p;
    v16i r;
    NEON_EACH(q) r.v[q] = vld1q_s32(w + 4 * q);
    return r;
}
#define U8(a) vreinterpretq_u8_s32(a)
#define S32(a) vreinterpretq_s32_u8(a)
S16 v16i v16i_nib_lo(v16i a)
{
    NEON_EACH(q) a.v[q] = S32(vandq_u8(U8(a.v[q]), vdupq_n_u8(0x0f)));
    return a;
}
S16 v16i v16i_nib_hi(v16i a)
{
    NEON_EACH(q) a.v[q] = S32(vshrq_n_u8(U8(a.v[q]), 4));
    return a;
}
/* a with 16 added to each byte i (0..63) whose bit i of the 64-bit
 * little-endian mask at bits is set: quarter q takes mask bytes 2q and
 * 2q + 1, each spread over 8 bytes, and tests one bit in each. */
S16 v16i v16i_add16_bits(v16i a, const void *bits)
{
    static const uint8_t sel[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    static const uint8_t spread[4][16] = {
        {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
        {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
        {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
        {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    };
    const uint8x16_t m = vcombine_u8(vld1_u8(bits), vdup_n_u8(0)), s = vld1q_u8(sel);
    NEON_EACH(q)
    {
        const uint8x16_t set = vtstq_u8(vqtbl1q_u8(m, vld1q_u8(spread[q])), s);
        a.v[q] = S32(vaddq_u8(U8(a.v[q]), vandq_u8(set, vdupq_n_u8(16))));
    }
    return a;
}
NEON_LANEWISE(v16i, v16i_or, vorrq_s32)
/* Bits 2j and 2j + 1 of each byte of a (j 0..3) at bits 4 and 5, the rest
 * 0: a 6-bit format's high bits (a shift within each byte, by 4 - 2j). */
S16 v16i v16i_bits45(v16i a, const int j)
{
    const int8x16_t sh = vdupq_n_s8((int8_t)(4 - 2 * j));
    NEON_EACH(q) a.v[q] = S32(vandq_u8(vshlq_u8(U8(a.v[q]), sh), vdupq_n_u8(0x30)));
    return a;
}
/* Each byte (0..15) of a replaced by table[byte]. */
S16 v16i v16i_lut16(v16i a, const int8_t table[16])
{
    const int8x16_t t = vld1q_s8(table);
    NEON_EACH(q) a.v[q] = vreinterpretq_s32_s8(vqtbl1q_s8(t, U8(a.v[q])));
    return a;
}
/* acc + the sum of the 4 products of unsigned bytes of u and signed bytes
 * of x in each lane (exact); _small: u < 128, so u is its signed byte. */
S16 v16i v16i_dot_small(v16i acc, v16i u, v16i x)
{
    NEON_EACH(q)
    acc.v[q] = vdotq_s32(acc.v[q], vreinterpretq_s8_s32(u.v[q]), vreinterpretq_s8_s32(x.v[q]));
    return acc;
}
S16 v16i v16i_dot(v16i acc, v16i u, v16i x)
{
#ifdef __ARM_FEATURE_MATMUL_INT8
    NEON_EACH(q)
    acc.v[q] = vusdotq_s32(acc.v[q], U8(u.v[q]), vreinterpretq_s8_s32(x.v[q]));
#else
    /* u = (u ^ 128) + 128: a signed dot product of u ^ 128, plus 128 times
     * the sum of x's 4 bytes (where x is a broadcast, as in the panels,
     * that sum is the same in every quarter: the compiler computes it once) */
    NEON_EACH(q)
    {
        const int8x16_t xs = vreinterpretq_s8_s32(x.v[q]);
        const int8x16_t w = vreinterpretq_s8_u8(veorq_u8(U8(u.v[q]), vdupq_n_u8(0x80)));
        const int32x4_t sx = vdotq_s32(vdupq_n_s32(0), vdupq_n_s8(1), xs);
        acc.v[q] = vaddq_s32(vdotq_s32(acc.v[q], w, xs), vshlq_n_s32(sx, 7));
    }
#endif
    return acc;
}
#ifdef __ARM_FEATURE_MATMUL_INT8
/* The 8-bit matrix multiplies of Armv8.6-A (smmla, usmmla): one
 * instruction multiplies a 2 x 8 block of bytes by another's transpose,
 * 32 products where sdot does 16. The panels feed them 2 rows x 2 tokens
 * at a time:
 *   v16w: 16 rows' bytes of two groups of 4 (a 4-byte lane each, as
 *         v16i_dot takes them), as row pairs: v[2q + h] holds rows
 *         4q + 2h and 4q + 2h + 1, 8 bytes each (the first group's 4,
 *         then the second's);
 *   v16p: the 16 rows' integer sums for 2 tokens, as the multiplies leave
 *         them: v[2q + h] = (row 4q + 2h, token 0), (that row, token 1),
 *         (row 4q + 2h + 1, token 0), (that row, token 1).
 * The sums are the exact integers v16i_dot gives (any order, no rounding). */
typedef struct {
    int8x16_t v[8];
} v16w;
typedef struct {
    int32x4_t v[8];
} v16p;

/* a: group g of 16 rows, b: group g + 1 (v16i_dot's lanes) */
S16 v16w v16w_pairs(v16i a, v16i b)
{
    v16w r;
    NEON_EACH(q)
    {
        r.v[2 * q] = vreinterpretq_s8_s32(vzip1q_s32(a.v[q], b.v[q]));
        r.v[2 * q + 1] = vreinterpretq_s8_s32(vzip2q_s32(a.v[q], b.v[q]));
    }
    return r;
}
/* Every row's sum starts at start[0] for token 0 and start[1] for token 1. */
S16 v16p v16p_start(const int32_t *start)
{
    const int32x2_t s = vld1_s32(start);
    v16p r;
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) r.v[i] = vcombine_s32(s, s);
    return r;
}
/* 2 tokens' 8 bytes, token 0's then token 1's: x0 holds the first
 * group's 4 bytes of token 0 then of token 1 (two words), x1 the second
 * group's. */
S16 int8x16_t tokens_pairs(const int32_t *x0, const int32_t *x1)
{
    const int32x2_t a = vld1_s32(x0), b = vld1_s32(x1);
    return vreinterpretq_s8_s32(vcombine_s32(vzip1_s32(a, b), vzip2_s32(a, b)));
}
/* acc + the products of w's rows with the 2 tokens' bytes of the same two
 * groups (tokens_pairs); _small: w's bytes are below 128 (smmla, signed),
 * else unsigned (usmmla). */
S16 v16p v16p_mmla_small(v16p acc, v16w w, const int32_t *x0, const int32_t *x1)
{
    const int8x16_t x = tokens_pairs(x0, x1);
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) acc.v[i] = vmmlaq_s32(acc.v[i], w.v[i], x);
    return acc;
}
S16 v16p v16p_mmla(v16p acc, v16w w, const int32_t *x0, const int32_t *x1)
{
    const int8x16_t x = tokens_pairs(x0, x1);
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++)
        acc.v[i] = vusmmlaq_s32(acc.v[i], vreinterpretq_u8_s8(w.v[i]), x);
    return acc;
}
/* The sums of token 0 and of token 1, in v16i's lanes (lane = row). */
S16 void v16p_split(v16p p, v16i *t0, v16i *t1)
{
    NEON_EACH(q)
    {
        t0->v[q] = vuzp1q_s32(p.v[2 * q], p.v[2 * q + 1]);
        t1->v[q] = vuzp2q_s32(p.v[2 * q], p.v[2 * q + 1]);
    }
}
#endif
#undef U8
#undef S32
/* Vector adds, which wrap (as the x86 builds' do). */
S16 int32_t v16i_hsum(v16i a)
{
    return vaddvq_s32(vaddq_s32(vaddq_s32(a.v[0], a.v[1]), vaddq_s32(a.v[2], a.v[3])));
}
/* The 16 lanes (each in -128..127) as bytes to p. */
S16 void v16i_store_i8(void *p, v16i a)
{
    const int16x8_t lo = vcombine_s16(vqmovn_s32(a.v[0]), vqmovn_s32(a.v[1]));
    const int16x8_t hi = vcombine_s16(vqmovn_s32(a.v[2]), vqmovn_s32(a.v[3]));
    vst1q_s8(p, vcombine_s8(vqmovn_s16(lo), vqmovn_s16(hi)));
}

#undef NEON_LANEWISE
#undef NEON_EACH
#endif /* BT_SIMD16_NEON_H */
