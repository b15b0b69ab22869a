/*
 * simd16.h: 16 lanes of float or int32 (64 bytes), the width of the row
 * panels of cpu_q8.c and cpu_fpanel.c: one AVX-512 register, two AVX2
 * registers, or four NEON registers. The panel kernels are written once
 * against these, and every operation gives each lane the same bits in
 * every build (the same IEEE operation per lane, with x86's results where
 * an instruction set defines an edge case differently; integer dot
 * products exact), so bt_ops_cpu gives the same results on AVX-512, AVX2
 * and aarch64 machines.
 *
 * BT_SIMD16 is 1 where the build has one of them (AVX-512 F/BW/VNNI; AVX2
 * with FMA and F16C; aarch64 with dotprod), else 0 and nothing here is
 * defined.
 */
#ifndef BT_SIMD16_H
#define BT_SIMD16_H

#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__F16C__)
#define BT_SIMD16 1
#define BT_SIMD16_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define BT_SIMD16 1
#define BT_SIMD16_AVX2 1
#elif defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#define BT_SIMD16 1
#define BT_SIMD16_NEON 1
#else
#define BT_SIMD16 0
#endif

#if BT_SIMD16
#define S16 static inline __attribute__((always_inline))
#endif
#if BT_SIMD16_NEON
#include "simd16_neon.h"
#endif

#if BT_SIMD16 && !BT_SIMD16_NEON
#include <immintrin.h>

#ifdef BT_SIMD16_AVX512

typedef __m512 v16f;
typedef __m512i v16i;

S16 v16f v16f_zero(void) { return _mm512_setzero_ps(); }
S16 v16f v16f_set1(float a) { return _mm512_set1_ps(a); }
S16 v16f v16f_fma(v16f a, v16f b, v16f c) { return _mm512_fmadd_ps(a, b, c); }
S16 v16f v16f_mul(v16f a, v16f b) { return _mm512_mul_ps(a, b); }
S16 v16f v16f_sub(v16f a, v16f b) { return _mm512_sub_ps(a, b); }
S16 v16f v16f_max(v16f a, v16f b) { return _mm512_max_ps(a, b); }
S16 v16f v16f_abs(v16f a) { return _mm512_abs_ps(a); }
S16 float v16f_hmax(v16f a) { return _mm512_reduce_max_ps(a); }
S16 v16f v16f_load(const void *p) { return _mm512_loadu_ps(p); }
S16 v16f v16f_load_f16(const void *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
S16 v16f v16f_load_bf16(const void *p)
{
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
S16 v16f v16f_from_u8(const void *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
S16 v16f v16f_from_i8(const void *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
S16 v16f v16f_from_i32(v16i a) { return _mm512_cvtepi32_ps(a); }
/* The first n (0..16) lanes to p. */
S16 void v16f_store_n(float *p, v16f a, int n)
{
    _mm512_mask_storeu_ps(p, (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1), a);
}
/* Round to nearest (even), as the MXCSR default. */
S16 v16i v16f_round(v16f a) { return _mm512_cvtps_epi32(a); }
/* The same, as floats. */
S16 v16f v16f_round_f(v16f a)
{
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* The first n (0..16) lanes from p, the others `fill`; lanes from n on to 0. */
S16 v16f v16f_load_n(const float *p, int n, float fill)
{
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), (__mmask16)((1u << n) - 1), p);
}
S16 v16f v16f_keep_n(v16f a, int n) { return _mm512_maskz_mov_ps((__mmask16)((1u << n) - 1), a); }
S16 v16i v16i_add(v16i a, v16i b) { return _mm512_add_epi32(a, b); }
S16 v16i v16i_sub(v16i a, v16i b) { return _mm512_sub_epi32(a, b); }

/* 16 lanes of double: the f32 lanes 0-7, 8-15 widened. */
typedef struct {
    __m512d lo, hi;
} v16d;
S16 v16d v16d_zero(void) { return (v16d){_mm512_setzero_pd(), _mm512_setzero_pd()}; }
S16 v16d v16d_add_f(v16d a, v16f b)
{
    return (v16d){_mm512_add_pd(a.lo, _mm512_cvtps_pd(_mm512_castps512_ps256(b))),
                  _mm512_add_pd(a.hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(b, 1)))};
}
S16 void v16d_store(double *p, v16d a)
{
    _mm512_storeu_pd(p, a.lo);
    _mm512_storeu_pd(p + 8, a.hi);
}

S16 v16i v16i_set1(int32_t a) { return _mm512_set1_epi32(a); }
S16 v16i v16i_load(const void *p) { return _mm512_loadu_si512(p); }
/* The low and high nibble of each byte. */
S16 v16i v16i_nib_lo(v16i a) { return _mm512_and_si512(a, _mm512_set1_epi8(0x0f)); }
S16 v16i v16i_nib_hi(v16i a)
{
    return _mm512_and_si512(_mm512_srli_epi16(a, 4), _mm512_set1_epi8(0x0f));
}
/* a with 16 added to each byte i (0..63) whose bit i of the 64-bit
 * little-endian mask at bits is set: a 5-bit format's high bits. */
S16 v16i v16i_add16_bits(v16i a, const void *bits)
{
    uint64_t m;
    memcpy(&m, bits, sizeof m);
    return _mm512_mask_add_epi8(a, _cvtu64_mask64(m), a, _mm512_set1_epi8(16));
}
S16 v16i v16i_or(v16i a, v16i b) { return _mm512_or_si512(a, b); }
/* Bits 2j and 2j + 1 of each byte of a (j constant, 0..3) at bits 4 and
 * 5, the rest 0: a 6-bit format's high bits. (A 16-bit shift by at most 4
 * up or 2 down moves no bit of the neighbouring byte into bits 4-5.) */
S16 v16i v16i_bits45(v16i a, const int j)
{
    const __m512i s = j < 2 ? _mm512_slli_epi16(a, 4 - 2 * j)
                    : j == 2 ? a
                             : _mm512_srli_epi16(a, 2);
    return _mm512_and_si512(s, _mm512_set1_epi8(0x30));
}
/* Each byte (0..15) of a replaced by table[byte]. */
S16 v16i v16i_lut16(v16i a, const int8_t table[16])
{
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)table)),
                               a);
}
/* acc + the sum of the 4 products of unsigned bytes of u and signed bytes
 * of x in each lane (exact); _small: u < 128 (the same result). */
S16 v16i v16i_dot(v16i acc, v16i u, v16i x) { return _mm512_dpbusd_epi32(acc, u, x); }
S16 v16i v16i_dot_small(v16i acc, v16i u, v16i x) { return _mm512_dpbusd_epi32(acc, u, x); }
/* Vector adds, which wrap (GCC's _mm512_reduce_add_epi32 adds in scalar
 * int, undefined on overflow: lanes of INT_MIN from a NaN activation). */
S16 int32_t v16i_hsum(v16i a)
{
    const __m256i s = _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(h);
}
/* The 16 lanes (each in -128..127) as bytes to p. */
S16 void v16i_store_i8(void *p, v16i a)
{
    _mm_storeu_si128((__m128i *)p, _mm512_cvtsepi32_epi8(a));
}

#else /* AVX2: lanes 0-7 in lo, 8-15 in hi */

typedef struct {
    __m256 lo, hi;
} v16f;
typedef struct {
    __m256i lo, hi;
} v16i;

#define V16F(e_lo, e_hi) ((v16f){e_lo, e_hi})
#define V16I(e_lo, e_hi) ((v16i){e_lo, e_hi})

S16 v16f v16f_zero(void) { return V16F(_mm256_setzero_ps(), _mm256_setzero_ps()); }
S16 v16f v16f_set1(float a) { return V16F(_mm256_set1_ps(a), _mm256_set1_ps(a)); }
S16 v16f v16f_fma(v16f a, v16f b, v16f c)
{
    return V16F(_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi));
}
S16 v16f v16f_mul(v16f a, v16f b)
{
    return V16F(_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi));
}
S16 v16f v16f_sub(v16f a, v16f b)
{
    return V16F(_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi));
}
S16 v16f v16f_max(v16f a, v16f b)
{
    return V16F(_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi));
}
S16 v16f v16f_abs(v16f a)
{
    const __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    return V16F(_mm256_and_ps(a.lo, m), _mm256_and_ps(a.hi, m));
}
S16 float v16f_hmax(v16f a)
{
    __m256 m = _mm256_max_ps(a.lo, a.hi);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}
S16 v16f v16f_load(const void *p)
{
    return V16F(_mm256_loadu_ps(p), _mm256_loadu_ps((const float *)p + 8));
}
S16 v16f v16f_load_f16(const void *p)
{
    return V16F(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)),
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p + 1)));
}
S16 __m256 bf16x8(const void *p)
{
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
S16 v16f v16f_load_bf16(const void *p) { return V16F(bf16x8(p), bf16x8((const uint16_t *)p + 8)); }
S16 __m128i load8(const void *p) { return _mm_loadl_epi64((const __m128i *)p); }
S16 v16f v16f_from_u8(const void *p)
{
    return V16F(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(load8(p))),
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(load8((const uint8_t *)p + 8))));
}
S16 v16f v16f_from_i8(const void *p)
{
    return V16F(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load8(p))),
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load8((const uint8_t *)p + 8))));
}
S16 v16f v16f_from_i32(v16i a) { return V16F(_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)); }
S16 __m256i lanes_below8(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
S16 void v16f_store_n(float *p, v16f a, int n)
{
    if (n >= 16) {
        _mm256_storeu_ps(p, a.lo);
        _mm256_storeu_ps(p + 8, a.hi);
    } else if (n >= 8) {
        _mm256_storeu_ps(p, a.lo);
        _mm256_maskstore_ps(p + 8, lanes_below8(n - 8), a.hi);
    } else {
        _mm256_maskstore_ps(p, lanes_below8(n), a.lo);
    }
}
S16 v16i v16f_round(v16f a) { return V16I(_mm256_cvtps_epi32(a.lo), _mm256_cvtps_epi32(a.hi)); }
#define ROUND8(v) _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
S16 v16f v16f_round_f(v16f a) { return V16F(ROUND8(a.lo), ROUND8(a.hi)); }
#undef ROUND8
S16 __m256 load8_n(const float *p, int n, float fill)
{
    const __m256i m = lanes_below8(n);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}
S16 v16f v16f_load_n(const float *p, int n, float fill)
{
    return V16F(load8_n(p, n, fill), load8_n(p + 8, n - 8, fill));
}
S16 v16f v16f_keep_n(v16f a, int n)
{
    return V16F(_mm256_and_ps(a.lo, _mm256_castsi256_ps(lanes_below8(n))),
                _mm256_and_ps(a.hi, _mm256_castsi256_ps(lanes_below8(n - 8))));
}
S16 v16i v16i_add(v16i a, v16i b)
{
    return V16I(_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi));
}
S16 v16i v16i_sub(v16i a, v16i b)
{
    return V16I(_mm256_sub_epi32(a.lo, b.lo), _mm256_sub_epi32(a.hi, b.hi));
}
S16 v16i v16i_sra1(v16i a) { return V16I(_mm256_srai_epi32(a.lo, 1), _mm256_srai_epi32(a.hi, 1)); }
S16 __m256 pow2x8(__m256i k)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}
S16 v16f v16i_pow2(v16i k) { return V16F(pow2x8(k.lo), pow2x8(k.hi)); }

typedef struct {
    __m256d a, b, c, d;
} v16d;
S16 v16d v16d_zero(void)
{
    const __m256d z = _mm256_setzero_pd();
    return (v16d){z, z, z, z};
}
S16 v16d v16d_add_f(v16d s, v16f f)
{
    return (v16d){_mm256_add_pd(s.a, _mm256_cvtps_pd(_mm256_castps256_ps128(f.lo))),
                  _mm256_add_pd(s.b, _mm256_cvtps_pd(_mm256_extractf128_ps(f.lo, 1))),
                  _mm256_add_pd(s.c, _mm256_cvtps_pd(_mm256_castps256_ps128(f.hi))),
                  _mm256_add_pd(s.d, _mm256_cvtps_pd(_mm256_extractf128_ps(f.hi, 1)))};
}
S16 void v16d_store(double *p, v16d s)
{
    _mm256_storeu_pd(p, s.a);
    _mm256_storeu_pd(p + 4, s.b);
    _mm256_storeu_pd(p + 8, s.c);
    _mm256_storeu_pd(p + 12, s.d);
}

S16 v16i v16i_set1(int32_t a) { return V16I(_mm256_set1_epi32(a), _mm256_set1_epi32(a)); }
S16 v16i v16i_load(const void *p)
{
    return V16I(_mm256_loadu_si256((const __m256i *)p), _mm256_loadu_si256((const __m256i *)p + 1));
}
S16 v16i v16i_nib_lo(v16i a)
{
    const __m256i m = _mm256_set1_epi8(0x0f);
    return V16I(_mm256_and_si256(a.lo, m), _mm256_and_si256(a.hi, m));
}
S16 v16i v16i_nib_hi(v16i a)
{
    const __m256i m = _mm256_set1_epi8(0x0f);
    return V16I(_mm256_and_si256(_mm256_srli_epi16(a.lo, 4), m),
                _mm256_and_si256(_mm256_srli_epi16(a.hi, 4), m));
}
/* 16 in each byte i of 32 whose bit i of m is set, else 0: byte i takes
 * the mask byte i / 8 and keeps the bit i % 8 of it. */
S16 __m256i bits16x32(uint32_t m)
{
    const __m256i rep = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int32_t)m),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                         3, 3, 3, 3, 3, 3, 3));
    const __m256i sel = _mm256_set1_epi64x((int64_t)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(rep, sel), sel),
                            _mm256_set1_epi8(16));
}
S16 v16i v16i_add16_bits(v16i a, const void *bits)
{
    uint32_t m[2];
    memcpy(m, bits, sizeof m);
    return V16I(_mm256_add_epi8(a.lo, bits16x32(m[0])), _mm256_add_epi8(a.hi, bits16x32(m[1])));
}
S16 v16i v16i_or(v16i a, v16i b) { return V16I(_mm256_or_si256(a.lo, b.lo), _mm256_or_si256(a.hi, b.hi)); }
S16 __m256i bits45x32(__m256i a, const int j)
{
    const __m256i s = j < 2 ? _mm256_slli_epi16(a, 4 - 2 * j)
                    : j == 2 ? a
                             : _mm256_srli_epi16(a, 2);
    return _mm256_and_si256(s, _mm256_set1_epi8(0x30));
}
S16 v16i v16i_bits45(v16i a, const int j) { return V16I(bits45x32(a.lo, j), bits45x32(a.hi, j)); }
/* Each byte (0..15) of a replaced by table[byte]. */
S16 v16i v16i_lut16(v16i a, const int8_t table[16])
{
    const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)table));
    return V16I(_mm256_shuffle_epi8(t, a.lo), _mm256_shuffle_epi8(t, a.hi));
}
/* u < 128, or u <= 128 with x in [-127, 127]: the pair sums of vpmaddubsw
 * stay within int16 (2 x 127 x 128). */
S16 __m256i dot8_small(__m256i acc, __m256i u, __m256i x)
{
    const __m256i pairs = _mm256_maddubs_epi16(u, x);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
/* any u: even and odd bytes widened to 16 bits, then vpmaddwd (exact) */
S16 __m256i dot8(__m256i acc, __m256i u, __m256i x)
{
    const __m256i ue = _mm256_and_si256(u, _mm256_set1_epi16(0xff)), uo = _mm256_srli_epi16(u, 8);
    const __m256i xe = _mm256_srai_epi16(_mm256_slli_epi16(x, 8), 8), xo = _mm256_srai_epi16(x, 8);
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(ue, xe));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(uo, xo));
}
S16 v16i v16i_dot(v16i acc, v16i u, v16i x)
{
    return V16I(dot8(acc.lo, u.lo, x.lo), dot8(acc.hi, u.hi, x.hi));
}
S16 v16i v16i_dot_small(v16i acc, v16i u, v16i x)
{
    return V16I(dot8_small(acc.lo, u.lo, x.lo), dot8_small(acc.hi, u.hi, x.hi));
}
/* acc16 + vpmaddubsw(u, x), the pair sums kept in 16-bit lanes: for u <=
 * 15 each is at most 2 x 15 x 127 = 3810 in magnitude, so the 8 of a
 * 32-element block add up within int16 and meet vpmaddwd once a block. */
S16 v16i v16i_pairs16(v16i acc16, v16i u, v16i x)
{
    return V16I(_mm256_add_epi16(acc16.lo, _mm256_maddubs_epi16(u.lo, x.lo)),
                _mm256_add_epi16(acc16.hi, _mm256_maddubs_epi16(u.hi, x.hi)));
}
/* acc + the 16-bit lanes of acc16 added in pairs (vpmaddwd by 1). */
S16 v16i v16i_pairs16_sum(v16i acc, v16i acc16)
{
    const __m256i one = _mm256_set1_epi16(1);
    return V16I(_mm256_add_epi32(acc.lo, _mm256_madd_epi16(acc16.lo, one)),
                _mm256_add_epi32(acc.hi, _mm256_madd_epi16(acc16.hi, one)));
}
/* The signed bytes w = u - 128 of unsigned u, and their magnitudes. */
S16 v16i v16i_signed8(v16i u)
{
    const __m256i f = _mm256_set1_epi8((char)0x80);
    return V16I(_mm256_xor_si256(u.lo, f), _mm256_xor_si256(u.hi, f));
}
S16 v16i v16i_abs8(v16i w) { return V16I(_mm256_abs_epi8(w.lo), _mm256_abs_epi8(w.hi)); }
/* acc + w x for signed bytes w (aw = |w|, at most 128) and x in [-127, 127]:
 * vpmaddubsw of |w| and x with w's sign (vpsignb), whose pair sums stay
 * within int16 (2 x 128 x 127). Three instructions a product where
 * v16i_dot's full-range unsigned bytes take eight. */
S16 v16i v16i_dot_signed(v16i acc, v16i aw, v16i w, v16i x)
{
    return V16I(dot8_small(acc.lo, aw.lo, _mm256_sign_epi8(x.lo, w.lo)),
                dot8_small(acc.hi, aw.hi, _mm256_sign_epi8(x.hi, w.hi)));
}
S16 int32_t v16i_hsum(v16i a)
{
    __m256i s = _mm256_add_epi32(a.lo, a.hi);
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(h);
}
S16 void v16i_store_i8(void *p, v16i a)
{
    /* saturating packs interleave the 128-bit halves: 0-3 8-11 4-7 12-15 */
    const __m256i w = _mm256_packs_epi32(a.lo, a.hi);
    const __m256i b = _mm256_packs_epi16(w, w);
    const __m256i o = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0));
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(o));
}

#endif /* AVX2 */
#endif /* x86 */

#if BT_SIMD16

/* p * 2^n for n integral in -252..252 and p normal with 2^n p normal or
 * below, rounded once: AVX-512's vscalefps; elsewhere two multiplies by
 * powers of two, the first exact, so that the one rounding is again that
 * of p 2^n and every build gives the same bits. (One instruction for
 * about eight: MXFP4's block scales are 2^n, and a one-token MXFP4
 * product on a Zen 4 is bound by its instructions.) */
S16 v16f v16f_ldexp(v16f p, v16f n)
{
#ifdef BT_SIMD16_AVX512
    return _mm512_scalef_ps(p, n);
#else
    const v16i k = v16f_round(n), k1 = v16i_sra1(k);
    return v16f_mul(v16f_mul(p, v16i_pow2(k1)), v16i_pow2(v16i_sub(k, k1)));
#endif
}

/* The sum of the 16 lanes, in a fixed order. */
S16 double v16d_sum(v16d a)
{
    double t[16];
    v16d_store(t, a);
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++)
            t[i] += t[i + w];
    return t[0];
}

/* 4 bytes at p in every lane (one token's 4 activations for every row). */
S16 v16i v16i_bcast4(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v16i_set1(v);
}

#undef S16
#endif /* BT_SIMD16 */
#endif /* BT_SIMD16_H */
