/*
 * dequant_simd.c: SIMD dequantization of rows (bt_dequant_simd_fn, per
 * instruction set: isa.h), used by the fast CPU ops (cpu.c's matmul, the
 * embedding lookup through bt_type_to_float_fast). The reference ops keep
 * the scalar bt_to_float_* of quants.c / types.c.
 *
 * Every function here gives, bit for bit, what its scalar counterpart gives
 * for every input: each element is computed with the same IEEE operations on
 * the same operands in the same order as quants.c / types.c (d * (float)q,
 * then "+ m" or "- off" as a separate rounding; step = d * (float)sc first
 * in the K formats). Nothing is fused into an FMA (C11 mode does not
 * contract the intrinsics' multiply and add; in these formats the product is
 * exact anyway, so not even a contraction could change a bit). The integer
 * q of each element is assembled exactly (as bytes with AVX2 byte ops, or
 * as 32-bit lanes) before its conversion to float. Where a format has few
 * levels (4 and 5 bits) the AVX-512 path computes the 16 or 32 possible
 * values of a block or sub-block once, with exactly the scalar operations,
 * and picks each element's value with a permute: the very value the scalar
 * code computes for it. f16 -> f32 in hardware (F16C / AVX-512F) is exact;
 * the one difference from bt_f16_to_f32 is that hardware quiets a
 * signalling NaN, so a vector of an f16 row that holds a NaN is converted
 * by the scalar code instead. (A NaN f16 scale of a block format is only
 * ever multiplied, which quiets it on both sides; the NaN an add of two NaNs
 * returns depends on its operand order, which C leaves to the compiler, but
 * tests/check_dequant.c finds these equal too.)
 *
 * Paths: AVX-512F (which implies AVX2; AVX-512BW/VL, where the build has
 * them, for one byte-masked add), AVX2 + F16C, else none (the baseline
 * build returns NULL: callers use the scalar to_float). Loads and stores are
 * unaligned, so the source and destination may have any alignment; n is a
 * multiple of the block size.
 */
#include "isa.h"

#include <string.h>

#if defined(__AVX512F__)
#define BT_DQ_AVX512 1
#elif defined(__AVX2__) && defined(__F16C__)
#define BT_DQ_AVX2 1
#endif
#if defined(BT_DQ_AVX512) || defined(BT_DQ_AVX2)
#include <immintrin.h>
#endif

#if defined(BT_DQ_AVX512) || defined(BT_DQ_AVX2)

static inline uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static inline uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* An f16 scale field as f32 (exact; see above for NaN). */
static inline float h2f(const uint8_t *p)
{
#if defined(__F16C__)
    return _cvtsh_ss(rd16(p));
#else
    return bt_f16_to_f32(rd16(p));
#endif
}

/* step[j] = d * (float)sc[j], off[j] = dmin * (float)m[j] for the 8
 * sub-blocks of a Q4_K / Q5_K super-block, as quants.c's k_steps computes
 * them (one f32 multiply per lane). The 6-bit scales and mins are unpacked
 * from the 12 bytes with 32-bit word operations: bytes of sc[0..7] into
 * a, of m[0..7] into b (layout in types.h). */
static inline void k_steps(float *step, float *off, const uint8_t *blk)
{
    const uint32_t k6 = 0x3f3f3f3fu, k4 = 0x0f0f0f0fu, k2 = 0x03030303u;
    const uint32_t w0 = rd32(blk + 4), w1 = rd32(blk + 8), w2 = rd32(blk + 12);
    const uint64_t a = (uint64_t)(w0 & k6) | (uint64_t)((w2 & k4) | ((w0 >> 6) & k2) << 4) << 32;
    const uint64_t b = (uint64_t)(w1 & k6) | (uint64_t)(((w2 >> 4) & k4) | ((w1 >> 6) & k2) << 4)
                                                 << 32;
    const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi64x(0, (long long)a)));
    const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi64x(0, (long long)b)));
    _mm256_storeu_ps(step, _mm256_mul_ps(_mm256_set1_ps(h2f(blk)), sc));
    _mm256_storeu_ps(off, _mm256_mul_ps(_mm256_set1_ps(h2f(blk + 2)), m));
}

/* The 32 q of a Q5_0 / Q5_1 block as bytes: nibbles of qs, bit e of qh
 * as bit 4 of element e. */
static inline __m256i legacy_q5(const uint8_t *qs, uint32_t qh)
{
    const __m128i x = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(0xf);
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(x, m4)),
                                              _mm_and_si128(_mm_srli_epi16(x, 4), m4), 1);
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    return _mm256_mask_add_epi8(q, (__mmask32)qh, q, _mm256_set1_epi8(16));
#else
    /* byte e <- byte e / 8 of qh, then its bit e % 8 */
    const __m256i spread = _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll,
                                              0x0303030303030303ll);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
    __m256i t = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), spread);
    t = _mm256_cmpeq_epi8(_mm256_and_si256(t, bit), bit);
    return _mm256_or_si256(q, _mm256_and_si256(t, _mm256_set1_epi8(16)));
#endif
}

/* Q5_K, chunk c: the 5-bit q of its 32 + 32 elements as bytes, from the 32
 * bytes q of qs and h = qh >> 2c (per byte; bits 0, 1 of h are bits 2c,
 * 2c + 1 of qh -- the 16-bit shifts that make h carry bits across bytes only
 * into bits 6, 7). */
static inline void q5k_bytes(__m256i q, __m256i h, __m256i *lo, __m256i *hi)
{
    const __m256i m4 = _mm256_set1_epi8(0xf), m10 = _mm256_set1_epi8(0x10);
    *lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m10));
    *hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                          _mm256_and_si256(_mm256_slli_epi16(h, 3), m10));
}

/* Q6_K, one half: q - 32 of elements 32g + l (l < 32) as signed bytes
 * v[g], from ql (a: bytes 0-31, b: 32-63) and qh (hb): low 4 bits from a
 * (g = 0, 2) or b (g = 1, 3), low nibble for g < 2; bits 4-5 from bits 2g,
 * 2g + 1 of hb. */
static inline void q6k_bytes(__m256i a, __m256i b, __m256i hb, __m256i *v)
{
    const __m256i m4 = _mm256_set1_epi8(0xf), m30 = _mm256_set1_epi8(0x30);
    const __m256i k32 = _mm256_set1_epi8(32);
    const __m256i a_lo = _mm256_and_si256(a, m4), b_lo = _mm256_and_si256(b, m4);
    const __m256i a_hi = _mm256_and_si256(_mm256_srli_epi16(a, 4), m4);
    const __m256i b_hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
    v[0] = _mm256_or_si256(a_lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
    v[1] = _mm256_or_si256(b_lo, _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
    v[2] = _mm256_or_si256(a_hi, _mm256_and_si256(hb, m30));
    v[3] = _mm256_or_si256(b_hi, _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
    v[0] = _mm256_sub_epi8(v[0], k32);
    v[1] = _mm256_sub_epi8(v[1], k32);
    v[2] = _mm256_sub_epi8(v[2], k32);
    v[3] = _mm256_sub_epi8(v[3], k32);
}

/* s[k] = d * (float)scales[k] for the 16 sub-blocks of a Q6_K block, one
 * multiply per lane as the scalar code. */
static inline void q6k_scales(float *s, const uint8_t *blk)
{
    const __m128i sc = _mm_loadu_si128((const __m128i *)(blk + 192));
    const __m256 d = _mm256_set1_ps(h2f(blk + 208));
    _mm256_storeu_ps(s, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    _mm256_storeu_ps(s + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                                _mm_unpackhi_epi64(sc, sc)))));
}

#define OFF_Q4_K_QS 16  /* d, dmin, scales[12] */
#define OFF_Q5_K_QH 16
#define OFF_Q5_K_QS 48  /* + qh[32] */

#endif

/* ======================================================================
 * AVX-512
 * ====================================================================== */
#if defined(BT_DQ_AVX512)

static inline __m512i ld_u8x16(const uint8_t *p)
{
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

static inline __m512i ld_i8x16(const uint8_t *p)
{
    return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p));
}

/* 0, 1, ..., 15 as floats; and 16..31. */
static inline __m512 iota16(void)
{
    return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

static inline __m512 iota16_hi(void)
{
    return _mm512_setr_ps(16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
}

static void fast_f16(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 f = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 2 * i)));
        if (__builtin_expect(_mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q) != 0, 0)) {
            for (int j = 0; j < 16; j++) /* NaN: keep its signalling bit as the scalar code */
                out[i + j] = bt_f16_to_f32(rd16(p + 2 * (i + j)));
        } else {
            _mm512_storeu_ps(out + i, f);
        }
    }
    for (; i < n; i++)
        out[i] = bt_f16_to_f32(rd16(p + 2 * i));
}

static void fast_bf16(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p + 2 * i)));
        _mm512_storeu_si512((void *)(out + i), _mm512_slli_epi32(v, 16));
    }
    for (; i < n; i++)
        out[i] = bt_bf16_to_f32(rd16(p + 2 * i));
}

static void fast_q8_0(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    for (int64_t i = 0; i < n / BT_QK8_0; i++, p += sizeof(bt_block_q8_0_t), out += BT_QK8_0) {
        const __m512 d = _mm512_set1_ps(h2f(p));
        _mm512_storeu_ps(out, _mm512_mul_ps(d, _mm512_cvtepi32_ps(ld_i8x16(p + 2))));
        _mm512_storeu_ps(out + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(ld_i8x16(p + 18))));
    }
}

/* Q4_0: the 16 values d * (float)(q - 8); element = table[nibble]. */
static void fast_q4_0(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    const __m512 lv = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t i = 0; i < n / BT_QK4_0; i++, p += sizeof(bt_block_q4_0_t), out += BT_QK4_0) {
        const __m512 t = _mm512_mul_ps(_mm512_set1_ps(h2f(p)), lv);
        const __m512i v = ld_u8x16(p + 2); /* permutes read index bits 0-3 */
        _mm512_storeu_ps(out, _mm512_permutexvar_ps(v, t));
        _mm512_storeu_ps(out + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t));
    }
}

/* Q4_1: the 16 values d * (float)q + m. */
static void fast_q4_1(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    const __m512 lv = iota16();
    for (int64_t i = 0; i < n / BT_QK4_1; i++, p += sizeof(bt_block_q4_1_t), out += BT_QK4_1) {
        const __m512 t = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(h2f(p)), lv),
                                       _mm512_set1_ps(h2f(p + 2)));
        const __m512i v = ld_u8x16(p + 4);
        _mm512_storeu_ps(out, _mm512_permutexvar_ps(v, t));
        _mm512_storeu_ps(out + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t));
    }
}

/* 16 bytes of 5-bit indices -> their 16 values in the 32-entry table lo, hi. */
static inline __m512 pick32b(__m128i idx, __m512 lo, __m512 hi)
{
    return _mm512_permutex2var_ps(lo, _mm512_cvtepu8_epi32(idx), hi);
}

/* Q5_0: the 32 values d * (float)(q - 16), table lo for q < 16. */
static void fast_q5_0(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    const __m512 l0 = _mm512_setr_ps(-16, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4,
                                     -3, -2, -1);
    const __m512 l1 = iota16();
    for (int64_t i = 0; i < n / BT_QK5_0; i++, p += sizeof(bt_block_q5_0_t), out += BT_QK5_0) {
        const __m512 d = _mm512_set1_ps(h2f(p));
        const __m512 t0 = _mm512_mul_ps(d, l0), t1 = _mm512_mul_ps(d, l1);
        const __m256i q = legacy_q5(p + 6, rd32(p + 2));
        _mm512_storeu_ps(out, pick32b(_mm256_castsi256_si128(q), t0, t1));
        _mm512_storeu_ps(out + 16, pick32b(_mm256_extracti128_si256(q, 1), t0, t1));
    }
}

/* Q5_1: the 32 values d * (float)q + m. */
static void fast_q5_1(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    const __m512 l0 = iota16(), l1 = iota16_hi();
    for (int64_t i = 0; i < n / BT_QK5_1; i++, p += sizeof(bt_block_q5_1_t), out += BT_QK5_1) {
        const __m512 d = _mm512_set1_ps(h2f(p)), m = _mm512_set1_ps(h2f(p + 2));
        const __m512 t0 = _mm512_add_ps(_mm512_mul_ps(d, l0), m);
        const __m512 t1 = _mm512_add_ps(_mm512_mul_ps(d, l1), m);
        const __m256i q = legacy_q5(p + 8, rd32(p + 4));
        _mm512_storeu_ps(out, pick32b(_mm256_castsi256_si128(q), t0, t1));
        _mm512_storeu_ps(out + 16, pick32b(_mm256_extracti128_si256(q, 1), t0, t1));
    }
}

/* Q4_K: per sub-block the 16 values step * (float)q - off. */
static void fast_q4_k(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    const __m512 lv = iota16();
    for (int64_t i = 0; i < n / BT_QK_K; i++, p += sizeof(bt_block_q4_k_t)) {
        float step[8], off[8];
        k_steps(step, off, p);
        for (int c = 0; c < 4; c++, out += 64) {
            const uint8_t *q = p + OFF_Q4_K_QS + 32 * c;
            const __m512 t0 = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(step[2 * c]), lv),
                                            _mm512_set1_ps(off[2 * c]));
            const __m512 t1 = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(step[2 * c + 1]), lv),
                                            _mm512_set1_ps(off[2 * c + 1]));
            const __m512i v0 = ld_u8x16(q), v1 = ld_u8x16(q + 16);
            _mm512_storeu_ps(out, _mm512_permutexvar_ps(v0, t0));
            _mm512_storeu_ps(out + 16, _mm512_permutexvar_ps(v1, t0));
            _mm512_storeu_ps(out + 32, _mm512_permutexvar_ps(_mm512_srli_epi32(v0, 4), t1));
            _mm512_storeu_ps(out + 48, _mm512_permutexvar_ps(_mm512_srli_epi32(v1, 4), t1));
        }
    }
}

/* Q5_K: per sub-block the 32 values step * (float)q - off. */
static void fast_q5_k(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    const __m512 l0 = iota16(), l1 = iota16_hi();
    for (int64_t i = 0; i < n / BT_QK_K; i++, p += sizeof(bt_block_q5_k_t)) {
        float step[8], off[8];
        k_steps(step, off, p);
        __m256i h = _mm256_loadu_si256((const __m256i *)(p + OFF_Q5_K_QH));
        for (int c = 0; c < 4; c++, out += 64, h = _mm256_srli_epi16(h, 2)) {
            __m256i lo, hi;
            q5k_bytes(_mm256_loadu_si256((const __m256i *)(p + OFF_Q5_K_QS + 32 * c)), h, &lo, &hi);
            const __m512 s0 = _mm512_set1_ps(step[2 * c]), o0 = _mm512_set1_ps(off[2 * c]);
            const __m512 s1 = _mm512_set1_ps(step[2 * c + 1]), o1 = _mm512_set1_ps(off[2 * c + 1]);
            const __m512 t00 = _mm512_sub_ps(_mm512_mul_ps(s0, l0), o0);
            const __m512 t01 = _mm512_sub_ps(_mm512_mul_ps(s0, l1), o0);
            const __m512 t10 = _mm512_sub_ps(_mm512_mul_ps(s1, l0), o1);
            const __m512 t11 = _mm512_sub_ps(_mm512_mul_ps(s1, l1), o1);
            _mm512_storeu_ps(out, pick32b(_mm256_castsi256_si128(lo), t00, t01));
            _mm512_storeu_ps(out + 16, pick32b(_mm256_extracti128_si256(lo, 1), t00, t01));
            _mm512_storeu_ps(out + 32, pick32b(_mm256_castsi256_si128(hi), t10, t11));
            _mm512_storeu_ps(out + 48, pick32b(_mm256_extracti128_si256(hi, 1), t10, t11));
        }
    }
}

static inline __m512 i8x16_ps(__m128i x) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x)); }

/* 32 elements from their q - 32 (bytes v): s[0] * (float)v[l] for l < 16,
 * s[1] * (float)v[l] above. */
static inline void q6k_store32(float *out, __m256i v, const float *s)
{
    _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_set1_ps(s[0]), i8x16_ps(_mm256_castsi256_si128(v))));
    _mm512_storeu_ps(out + 16, _mm512_mul_ps(_mm512_set1_ps(s[1]),
                                             i8x16_ps(_mm256_extracti128_si256(v, 1))));
}

/* Q6_K: (d * sc) * (float)(q - 32), 16 elements per scale. */
static void fast_q6_k(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    for (int64_t i = 0; i < n / BT_QK_K; i++, p += sizeof(bt_block_q6_k_t)) {
        float s[16];
        q6k_scales(s, p);
        for (int h = 0; h < 2; h++, out += 128) {
            __m256i v[4];
            q6k_bytes(_mm256_loadu_si256((const __m256i *)(p + 64 * h)),
                      _mm256_loadu_si256((const __m256i *)(p + 64 * h + 32)),
                      _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * h)), v);
            /* element 32g + 16is: scale s[8h + 2g + is] */
            q6k_store32(out, v[0], s + 8 * h);
            q6k_store32(out + 32, v[1], s + 8 * h + 2);
            q6k_store32(out + 64, v[2], s + 8 * h + 4);
            q6k_store32(out + 96, v[3], s + 8 * h + 6);
        }
    }
}

/* ======================================================================
 * AVX2 + F16C
 * ====================================================================== */
#elif defined(BT_DQ_AVX2)

static inline __m256i ld_u8x8(const uint8_t *p)
{
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

static inline __m256i ld_i8x8(const uint8_t *p)
{
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

static inline __m256 cvt(__m256i v) { return _mm256_cvtepi32_ps(v); }

static void fast_f16(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 f = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * i)));
        if (__builtin_expect(_mm256_movemask_ps(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)) != 0, 0)) {
            for (int j = 0; j < 8; j++) /* NaN: keep its signalling bit as the scalar code */
                out[i + j] = bt_f16_to_f32(rd16(p + 2 * (i + j)));
        } else {
            _mm256_storeu_ps(out + i, f);
        }
    }
    for (; i < n; i++)
        out[i] = bt_f16_to_f32(rd16(p + 2 * i));
}

static void fast_bf16(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 2 * i)));
        _mm256_storeu_si256((__m256i *)(void *)(out + i), _mm256_slli_epi32(v, 16));
    }
    for (; i < n; i++)
        out[i] = bt_bf16_to_f32(rd16(p + 2 * i));
}

static void fast_q8_0(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    for (int64_t i = 0; i < n / BT_QK8_0; i++, p += sizeof(bt_block_q8_0_t), out += BT_QK8_0) {
        const __m256 d = _mm256_set1_ps(h2f(p));
        for (int j = 0; j < 32; j += 8)
            _mm256_storeu_ps(out + j, _mm256_mul_ps(d, cvt(ld_i8x8(p + 2 + j))));
    }
}

static void fast_q4_0(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    const __m256i m4 = _mm256_set1_epi32(0xf), k8 = _mm256_set1_epi32(8);
    for (int64_t i = 0; i < n / BT_QK4_0; i++, p += sizeof(bt_block_q4_0_t), out += BT_QK4_0) {
        const __m256 d = _mm256_set1_ps(h2f(p));
        for (int j = 0; j < 16; j += 8) {
            const __m256i v = ld_u8x8(p + 2 + j);
            const __m256i lo = _mm256_sub_epi32(_mm256_and_si256(v, m4), k8);
            const __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(v, 4), k8);
            _mm256_storeu_ps(out + j, _mm256_mul_ps(d, cvt(lo)));
            _mm256_storeu_ps(out + j + 16, _mm256_mul_ps(d, cvt(hi)));
        }
    }
}

static void fast_q4_1(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    const __m256i m4 = _mm256_set1_epi32(0xf);
    for (int64_t i = 0; i < n / BT_QK4_1; i++, p += sizeof(bt_block_q4_1_t), out += BT_QK4_1) {
        const __m256 d = _mm256_set1_ps(h2f(p)), m = _mm256_set1_ps(h2f(p + 2));
        for (int j = 0; j < 16; j += 8) {
            const __m256i v = ld_u8x8(p + 4 + j);
            const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_srli_epi32(v, 4);
            _mm256_storeu_ps(out + j, _mm256_add_ps(_mm256_mul_ps(d, cvt(lo)), m));
            _mm256_storeu_ps(out + j + 16, _mm256_add_ps(_mm256_mul_ps(d, cvt(hi)), m));
        }
    }
}

/* The 32 bytes of v as 4 x 8 floats (u8 / i8). */
static inline void u8x32_ps(__m256i v, __m256 *f)
{
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    f[0] = cvt(_mm256_cvtepu8_epi32(lo));
    f[1] = cvt(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(lo, lo)));
    f[2] = cvt(_mm256_cvtepu8_epi32(hi));
    f[3] = cvt(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(hi, hi)));
}

static inline void i8x32_ps(__m256i v, __m256 *f)
{
    const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    f[0] = cvt(_mm256_cvtepi8_epi32(lo));
    f[1] = cvt(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(lo, lo)));
    f[2] = cvt(_mm256_cvtepi8_epi32(hi));
    f[3] = cvt(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(hi, hi)));
}

static void fast_q5_0(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    const __m256i k16 = _mm256_set1_epi8(16);
    for (int64_t i = 0; i < n / BT_QK5_0; i++, p += sizeof(bt_block_q5_0_t), out += BT_QK5_0) {
        const __m256 d = _mm256_set1_ps(h2f(p));
        __m256 f[4];
        i8x32_ps(_mm256_sub_epi8(legacy_q5(p + 6, rd32(p + 2)), k16), f);
        for (int k = 0; k < 4; k++)
            _mm256_storeu_ps(out + 8 * k, _mm256_mul_ps(d, f[k]));
    }
}

static void fast_q5_1(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    for (int64_t i = 0; i < n / BT_QK5_1; i++, p += sizeof(bt_block_q5_1_t), out += BT_QK5_1) {
        const __m256 d = _mm256_set1_ps(h2f(p)), m = _mm256_set1_ps(h2f(p + 2));
        __m256 f[4];
        u8x32_ps(legacy_q5(p + 8, rd32(p + 4)), f);
        for (int k = 0; k < 4; k++)
            _mm256_storeu_ps(out + 8 * k, _mm256_add_ps(_mm256_mul_ps(d, f[k]), m));
    }
}

static void fast_q4_k(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    const __m256i m4 = _mm256_set1_epi32(0xf);
    for (int64_t i = 0; i < n / BT_QK_K; i++, p += sizeof(bt_block_q4_k_t)) {
        float step[8], off[8];
        k_steps(step, off, p);
        for (int c = 0; c < 4; c++, out += 64) {
            const uint8_t *q = p + OFF_Q4_K_QS + 32 * c;
            const __m256 s0 = _mm256_set1_ps(step[2 * c]), o0 = _mm256_set1_ps(off[2 * c]);
            const __m256 s1 = _mm256_set1_ps(step[2 * c + 1]), o1 = _mm256_set1_ps(off[2 * c + 1]);
            for (int l = 0; l < 32; l += 8) {
                const __m256i v = ld_u8x8(q + l);
                const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_srli_epi32(v, 4);
                _mm256_storeu_ps(out + l, _mm256_sub_ps(_mm256_mul_ps(s0, cvt(lo)), o0));
                _mm256_storeu_ps(out + l + 32, _mm256_sub_ps(_mm256_mul_ps(s1, cvt(hi)), o1));
            }
        }
    }
}

static void fast_q5_k(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    for (int64_t i = 0; i < n / BT_QK_K; i++, p += sizeof(bt_block_q5_k_t)) {
        float step[8], off[8];
        k_steps(step, off, p);
        __m256i h = _mm256_loadu_si256((const __m256i *)(p + OFF_Q5_K_QH));
        for (int c = 0; c < 4; c++, out += 64, h = _mm256_srli_epi16(h, 2)) {
            __m256i lo, hi;
            q5k_bytes(_mm256_loadu_si256((const __m256i *)(p + OFF_Q5_K_QS + 32 * c)), h, &lo, &hi);
            const __m256 s0 = _mm256_set1_ps(step[2 * c]), o0 = _mm256_set1_ps(off[2 * c]);
            const __m256 s1 = _mm256_set1_ps(step[2 * c + 1]), o1 = _mm256_set1_ps(off[2 * c + 1]);
            __m256 f0[4], f1[4];
            u8x32_ps(lo, f0);
            u8x32_ps(hi, f1);
            for (int k = 0; k < 4; k++) {
                _mm256_storeu_ps(out + 8 * k, _mm256_sub_ps(_mm256_mul_ps(s0, f0[k]), o0));
                _mm256_storeu_ps(out + 8 * k + 32, _mm256_sub_ps(_mm256_mul_ps(s1, f1[k]), o1));
            }
        }
    }
}

/* 32 elements from their q - 32 (bytes v): s[0] * (float)v[l] for l < 16,
 * s[1] * (float)v[l] above. */
static inline void q6k_store32(float *out, __m256i v, const float *s)
{
    __m256 f[4];
    i8x32_ps(v, f);
    const __m256 s0 = _mm256_set1_ps(s[0]), s1 = _mm256_set1_ps(s[1]);
    _mm256_storeu_ps(out, _mm256_mul_ps(s0, f[0]));
    _mm256_storeu_ps(out + 8, _mm256_mul_ps(s0, f[1]));
    _mm256_storeu_ps(out + 16, _mm256_mul_ps(s1, f[2]));
    _mm256_storeu_ps(out + 24, _mm256_mul_ps(s1, f[3]));
}

static void fast_q6_k(float *restrict out, const void *restrict in, int64_t n)
{
    const uint8_t *p = in;
    for (int64_t i = 0; i < n / BT_QK_K; i++, p += sizeof(bt_block_q6_k_t)) {
        float s[16];
        q6k_scales(s, p);
        for (int h = 0; h < 2; h++, out += 128) {
            __m256i v[4];
            q6k_bytes(_mm256_loadu_si256((const __m256i *)(p + 64 * h)),
                      _mm256_loadu_si256((const __m256i *)(p + 64 * h + 32)),
                      _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * h)), v);
            /* element 32g + 16is: scale s[8h + 2g + is] */
            q6k_store32(out, v[0], s + 8 * h);
            q6k_store32(out + 32, v[1], s + 8 * h + 2);
            q6k_store32(out + 64, v[2], s + 8 * h + 4);
            q6k_store32(out + 96, v[3], s + 8 * h + 6);
        }
    }
}

#endif

bt_to_float_fn bt_dequant_simd_fn(uint32_t type)
{
#if defined(BT_DQ_AVX512) || defined(BT_DQ_AVX2)
    switch (type) {
    case BT_TYPE_F16: return fast_f16;
    case BT_TYPE_BF16: return fast_bf16;
    case BT_TYPE_Q4_0: return fast_q4_0;
    case BT_TYPE_Q4_1: return fast_q4_1;
    case BT_TYPE_Q5_0: return fast_q5_0;
    case BT_TYPE_Q5_1: return fast_q5_1;
    case BT_TYPE_Q8_0: return fast_q8_0;
    case BT_TYPE_Q4_K: return fast_q4_k;
    case BT_TYPE_Q5_K: return fast_q5_k;
    case BT_TYPE_Q6_K: return fast_q6_k;
    default: return NULL;
    }
#else
    (void)type;
    return NULL;
#endif
}
