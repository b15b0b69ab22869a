/*
 * cpu.c: the fast CPU ops: SIMD (AVX-512, AVX2+FMA, NEON, or portable vectors)
 * and OpenMP over output rows / heads.
 *
 * Every dot product here accumulates in one fixed way: ML lanes, lane i
 * summing k = i, i + ML, ... in order, then a fixed horizontal sum, then the
 * scalar tail in order. Which tile or thread computes an element, and how
 * many tokens share the batch, never changes that order (invariant 1).
 * ML is 16 in every build with fused multiply-adds (AVX-512, AVX2, NEON)
 * and the horizontal sum is AVX-512's tree in all of them, so bt_ops_exact
 * gives the same bits in each; the portable build differs in rounding.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "cpu_internal.h"
#include "simd16.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define VL 16
typedef __m512 vf;
static inline vf vf_zero(void) { return _mm512_setzero_ps(); }
static inline vf vf_set1(float a) { return _mm512_set1_ps(a); }
static inline vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void vf_store(float *p, vf a) { _mm512_storeu_ps(p, a); }
static inline vf vf_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline float vf_sum(vf a) { return _mm512_reduce_add_ps(a); }
/* The first n (0..VL) lanes; the others load as 0 and are not stored. */
static inline vf vf_load_n(const float *p, int n)
{
    return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
}
static inline void vf_store_n(float *p, vf a, int n)
{
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), a);
}
#elif BT_SIMD16_AVX2 /* AVX2, FMA, F16C: the avx2 build */
#define VL 8
typedef __m256 vf;
static inline vf vf_zero(void) { return _mm256_setzero_ps(); }
static inline vf vf_set1(float a) { return _mm256_set1_ps(a); }
static inline vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf_store(float *p, vf a) { _mm256_storeu_ps(p, a); }
static inline vf vf_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline float vf_sum(vf a)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline vf vf_load_n(const float *p, int n) { return _mm256_maskload_ps(p, lanes_below8(n)); }
static inline void vf_store_n(float *p, vf a, int n) { _mm256_maskstore_ps(p, lanes_below8(n), a); }
#elif BT_SIMD16_NEON
/* aarch64: one NEON register, with fused multiply-adds (attention's
 * per-lane chains; the matmul sums 16 lanes, vm below) */
#define VL 4
typedef float32x4_t vf;
static inline vf vf_zero(void) { return vdupq_n_f32(0.0f); }
static inline vf vf_set1(float a) { return vdupq_n_f32(a); }
static inline vf vf_load(const float *p) { return vld1q_f32(p); }
static inline void vf_store(float *p, vf a) { vst1q_f32(p, a); }
static inline vf vf_fma(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); }
static inline vf vf_mul(vf a, vf b) { return vmulq_f32(a, b); }
static inline vf vf_add(vf a, vf b) { return vaddq_f32(a, b); }
static inline float vf_sum(vf a) { return vaddvq_f32(a); }
static inline vf vf_load_n(const float *p, int n)
{
    float t[VL] = {0};
    memcpy(t, p, sizeof(float) * (size_t)n);
    return vld1q_f32(t);
}
static inline void vf_store_n(float *p, vf a, int n)
{
    float t[VL];
    vst1q_f32(t, a);
    memcpy(p, t, sizeof(float) * (size_t)n);
}
#else
/* Portable: GCC vector extension of 16 bytes (SSE on any x86-64, so no ABI
 * warning); multiply and add stay separate (C11 does not contract), which
 * is as deterministic as a fused FMA. */
#define VL 4
typedef float vf __attribute__((vector_size(VL * sizeof(float))));
static inline vf vf_zero(void) { return (vf){0}; }
static inline vf vf_set1(float a) { return (vf){0} + a; }
static inline vf vf_load(const float *p) { vf a; memcpy(&a, p, sizeof a); return a; }
static inline void vf_store(float *p, vf a) { memcpy(p, &a, sizeof a); }
static inline vf vf_fma(vf a, vf b, vf c) { return a * b + c; }
static inline vf vf_mul(vf a, vf b) { return a * b; }
static inline vf vf_add(vf a, vf b) { return a + b; }
static inline float vf_sum(vf a)
{
    float s = 0.0f;
    for (int i = 0; i < VL; i++)
        s += a[i];
    return s;
}
static inline vf vf_load_n(const float *p, int n)
{
    vf a = vf_zero();
    memcpy(&a, p, sizeof(float) * (size_t)n);
    return a;
}
static inline void vf_store_n(float *p, vf a, int n) { memcpy(p, &a, sizeof(float) * (size_t)n); }
#endif

/* ---- matmul ---- */

/* The matmul's vectors: ML lanes, 16 where the build has simd16.h (one
 * AVX-512 register, two AVX2, four NEON), summed in GCC's tree for
 * _mm512_reduce_add_ps (lanes i + 8 and i, then i + 4 and i, then i + 2
 * and i, then lanes 0 and 1). AVX2 runs smaller tiles of them (TILE_*):
 * 16 registers. */
#if BT_SIMD16
#define ML 16
typedef v16f vm;
static inline vm vm_zero(void) { return v16f_zero(); }
static inline vm vm_load(const float *p) { return v16f_load(p); }
static inline vm vm_fma(vm a, vm b, vm c) { return v16f_fma(a, b, c); }
#ifdef BT_SIMD16_AVX512
static inline float vm_sum(vm a) { return _mm512_reduce_add_ps(a); }
#elif BT_SIMD16_AVX2
static inline float vm_sum(vm a)
{
    const __m256 h = _mm256_add_ps(a.hi, a.lo);
    const __m128 q = _mm_add_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
    const __m128 t = _mm_add_ps(q, _mm_shuffle_ps(q, q, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(t) + _mm_cvtss_f32(_mm_shuffle_ps(t, t, 1));
}
#else /* NEON */
static inline float vm_sum(vm a)
{
    const float32x4_t h = vaddq_f32(vaddq_f32(a.v[3], a.v[1]), vaddq_f32(a.v[2], a.v[0]));
    const float32x4_t t = vaddq_f32(h, vextq_f32(h, h, 2));
    return vgetq_lane_f32(t, 0) + vgetq_lane_f32(t, 1);
}
#endif
#else
#define ML VL
typedef vf vm;
static inline vm vm_zero(void) { return vf_zero(); }
static inline vm vm_load(const float *p) { return vf_load(p); }
static inline vm vm_fma(vm a, vm b, vm c) { return vf_fma(a, b, c); }
static inline float vm_sum(vm a) { return vf_sum(a); }
#endif
#if BT_SIMD16_AVX2
#define TILE_R 2  /* rows and tokens of a tile: 2 x 2 x 2 accumulators */
#define TILE_T 2
#define TILE_R1 4 /* rows of a one-token tile */
#else
#define TILE_R 4
#define TILE_T 4
#define TILE_R1 8
#endif

/* Tile of R rows of W by T tokens: out[t * ldo + r] = W[r] . x[t] over n.
 * Called only with constant R (1..4, or 8 with T = 1) and T (1..4) so the
 * accumulators stay in registers. */
static inline __attribute__((always_inline)) void
tile(float *restrict out, size_t ldo, const float *restrict w, size_t ldw,
     const float *restrict x, size_t ldx, int64_t n, const int R, const int T)
{
    /* the loops over r and t unroll fully (GCC keeps the 16 accumulators
     * in registers only then); the arithmetic is the same either way */
    vm acc[8][4];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[r][t] = vm_zero();
    int64_t k = 0;
#pragma GCC unroll 2
    for (; k + ML <= n; k += ML) {
        vm xv[4];
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            xv[t] = vm_load(x + t * ldx + k);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            vm wv = vm_load(w + r * ldw + k);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                acc[r][t] = vm_fma(wv, xv[t], acc[r][t]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            float s = vm_sum(acc[r][t]);
            for (int64_t kk = k; kk < n; kk++)
                s += w[r * ldw + kk] * x[t * ldx + kk];
            out[t * ldo + r] = s;
        }
}

typedef void (*tile_fn)(float *restrict, size_t, const float *restrict, size_t,
                        const float *restrict, size_t, int64_t);

#define TILE_FN(R, T)                                                                    \
    static void tile_##R##_##T(float *restrict o, size_t ldo, const float *restrict w,    \
                               size_t ldw, const float *restrict x, size_t ldx, int64_t n) \
    {                                                                                     \
        tile(o, ldo, w, ldw, x, ldx, n, R, T);                                            \
    }
#define TILE_ROW(R) TILE_FN(R, 1) TILE_FN(R, 2) TILE_FN(R, 3) TILE_FN(R, 4)
TILE_ROW(1)
TILE_ROW(2)
TILE_ROW(3)
TILE_ROW(4)
TILE_FN(8, 1) /* decode: more rows in flight for a memory-bound product */

static const tile_fn tiles[4][4] = {
    {tile_1_1, tile_1_2, tile_1_3, tile_1_4},
    {tile_2_1, tile_2_2, tile_2_3, tile_2_4},
    {tile_3_1, tile_3_2, tile_3_3, tile_3_4},
    {tile_4_1, tile_4_2, tile_4_3, tile_4_4},
};

static inline int imin(int64_t a, int64_t b) { return (int)(a < b ? a : b); }

/* ---- the KV cache's elements: f32, or f16 (exact conversions) ---- */

static inline vf kv_load(const void *base, size_t i, const bool f16)
{
    if (!f16)
        return vf_load((const float *)base + i);
    const uint16_t *h = (const uint16_t *)base + i;
#if defined(__AVX512F__)
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
#elif defined(__AVX2__) && defined(__F16C__)
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
#elif BT_SIMD16_NEON
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
#else
    float t[VL];
    for (int l = 0; l < VL; l++)
        t[l] = bt_f16_to_f32(h[l]);
    return vf_load(t);
#endif
}

/* The first n (0..VL) elements; the others are 0 and not read. */
static inline vf kv_load_n(const void *base, size_t i, int n, const bool f16)
{
    if (!f16)
        return vf_load_n((const float *)base + i, n);
    const uint16_t *h = (const uint16_t *)base + i;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)((1u << n) - 1), h));
#else
    float t[VL] = {0};
    for (int l = 0; l < n; l++)
        t[l] = bt_f16_to_f32(h[l]);
    return vf_load(t);
#endif
}

/* One lane of vf_fma. */
static inline float lane_fma(float a, float b, float c)
{
#if BT_SIMD16 || defined(__AVX512F__) /* vf_fma is fused */
    return fmaf(a, b, c);
#else
    return a * b + c;
#endif
}

static inline float kv_get(const void *base, size_t i, const bool f16)
{
    return f16 ? bt_f16_to_f32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

/* ---- decode: dequantize in registers ---- */

#if defined(__AVX512F__) && defined(__F16C__)
#define BT_FUSED_GEMV 1
/* One 32-element block as two vectors (elements 0-15, 16-31), each value
 * computed with the same float operations as the type's to_float, so a
 * product over them equals the product over the dequantized row. */

static inline vf i8_to_ps(__m128i q) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)); }

static inline void dq32_q8_0(const uint8_t *p, vf *lo, vf *hi)
{
    const bt_block_q8_0_t *b = (const bt_block_q8_0_t *)p;
    const vf d = vf_set1(_cvtsh_ss(b->d));
    *lo = _mm512_mul_ps(d, i8_to_ps(_mm_loadu_si128((const __m128i *)b->qs)));
    *hi = _mm512_mul_ps(d, i8_to_ps(_mm_loadu_si128((const __m128i *)(b->qs + 16))));
}

/* The 16 low nibbles and the 16 high nibbles of 16 bytes, as int32. */
static inline void nibbles(const uint8_t *qs, __m512i *lo, __m512i *hi)
{
    const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs));
    *lo = _mm512_and_si512(q, _mm512_set1_epi32(0xf));
    *hi = _mm512_srli_epi32(q, 4);
}

static inline void dq32_q4_0(const uint8_t *p, vf *lo, vf *hi)
{
    const bt_block_q4_0_t *b = (const bt_block_q4_0_t *)p;
    const vf d = vf_set1(_cvtsh_ss(b->d));
    __m512i l, h;
    nibbles(b->qs, &l, &h);
    const __m512i eight = _mm512_set1_epi32(8);
    *lo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(l, eight)));
    *hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(h, eight)));
}

static inline void dq32_q4_1(const uint8_t *p, vf *lo, vf *hi)
{
    const bt_block_q4_1_t *b = (const bt_block_q4_1_t *)p;
    const vf d = vf_set1(_cvtsh_ss(b->d)), m = vf_set1(_cvtsh_ss(b->m));
    __m512i l, h;
    nibbles(b->qs, &l, &h);
    *lo = _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(l)), m);
    *hi = _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(h)), m);
}

/* Q5_0 / Q5_1: the nibbles plus bit j of the little-endian qh as bit 4
 * of element j. */
static inline void q5_bits(const uint8_t *qs, const uint8_t *qh4, __m512i *lo, __m512i *hi)
{
    uint32_t qh;
    memcpy(&qh, qh4, sizeof qh);
    nibbles(qs, lo, hi);
    const __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i one = _mm512_set1_epi32(1), bits = _mm512_set1_epi32((int)qh);
    const __m512i b0 = _mm512_and_si512(_mm512_srlv_epi32(bits, idx), one);
    const __m512i b1 = _mm512_and_si512(
        _mm512_srlv_epi32(bits, _mm512_add_epi32(idx, _mm512_set1_epi32(16))), one);
    *lo = _mm512_or_si512(*lo, _mm512_slli_epi32(b0, 4));
    *hi = _mm512_or_si512(*hi, _mm512_slli_epi32(b1, 4));
}

static inline void dq32_q5_0(const uint8_t *p, vf *lo, vf *hi)
{
    const bt_block_q5_0_t *b = (const bt_block_q5_0_t *)p;
    const vf d = vf_set1(_cvtsh_ss(b->d));
    __m512i l, h;
    q5_bits(b->qs, b->qh, &l, &h);
    const __m512i sixteen = _mm512_set1_epi32(16);
    *lo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(l, sixteen)));
    *hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(h, sixteen)));
}

static inline void dq32_q5_1(const uint8_t *p, vf *lo, vf *hi)
{
    const bt_block_q5_1_t *b = (const bt_block_q5_1_t *)p;
    const vf d = vf_set1(_cvtsh_ss(b->d)), m = vf_set1(_cvtsh_ss(b->m));
    __m512i l, h;
    q5_bits(b->qs, b->qh, &l, &h);
    *lo = _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(l)), m);
    *hi = _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(h)), m);
}

/* 32 f16 / bf16 values: exact conversions, as to_float. */
static inline void dq32_f16(const uint8_t *p, vf *lo, vf *hi)
{
    *lo = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    *hi = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32)));
}

static inline vf bf16_to_ps(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline void dq32_bf16(const uint8_t *p, vf *lo, vf *hi)
{
    *lo = bf16_to_ps(_mm256_loadu_si256((const __m256i *)p));
    *hi = bf16_to_ps(_mm256_loadu_si256((const __m256i *)(p + 32)));
}

/* ---- block accumulators: fold one block's elements into *acc, in order ---- */

#define ACC_BLOCK32(t)                                                                     \
    static inline void acc_##t(vf *acc, const uint8_t *blk, const float *restrict x)       \
    {                                                                                      \
        vf lo, hi;                                                                         \
        dq32_##t(blk, &lo, &hi);                                                           \
        *acc = vf_fma(lo, vf_load(x), *acc);                                               \
        *acc = vf_fma(hi, vf_load(x + VL), *acc);                                          \
    }
ACC_BLOCK32(q8_0)
ACC_BLOCK32(q4_0)
ACC_BLOCK32(q4_1)
ACC_BLOCK32(q5_0)
ACC_BLOCK32(q5_1)
ACC_BLOCK32(f16)
ACC_BLOCK32(bf16)

/* Q4_K: the 8 sub-block steps and offsets, then 128 bytes of nibbles in
 * element order: bytes 32c..32c+31 hold elements 64c..64c+31 (low
 * nibbles) and 64c+32..64c+63 (high). */
static inline void acc_q4_k(vf *acc, const uint8_t *blk, const float *restrict x)
{
    const bt_block_q4_k_t *b = (const bt_block_q4_k_t *)blk;
    float step[8], off[8];
    bt_k_steps(step, off, b->d, b->dmin, b->scales);
    for (int c = 0; c < 4; c++) {
        __m512i la, ha, lb, hb;
        nibbles(b->qs + 32 * c, &la, &ha);
        nibbles(b->qs + 32 * c + 16, &lb, &hb);
        const vf s0 = vf_set1(step[2 * c]), o0 = vf_set1(off[2 * c]);
        const vf s1 = vf_set1(step[2 * c + 1]), o1 = vf_set1(off[2 * c + 1]);
        const float *xc = x + 64 * c;
        *acc = vf_fma(_mm512_sub_ps(_mm512_mul_ps(s0, _mm512_cvtepi32_ps(la)), o0),
                      vf_load(xc), *acc);
        *acc = vf_fma(_mm512_sub_ps(_mm512_mul_ps(s0, _mm512_cvtepi32_ps(lb)), o0),
                      vf_load(xc + 16), *acc);
        *acc = vf_fma(_mm512_sub_ps(_mm512_mul_ps(s1, _mm512_cvtepi32_ps(ha)), o1),
                      vf_load(xc + 32), *acc);
        *acc = vf_fma(_mm512_sub_ps(_mm512_mul_ps(s1, _mm512_cvtepi32_ps(hb)), o1),
                      vf_load(xc + 48), *acc);
    }
}

/* Q6_K: two halves of 128 elements; in half h, group g (32 elements from
 * 128h + 32g) takes its low 4 bits from ql (bytes 32(g&1).., high nibble
 * for g >= 2) and its top 2 bits from bits 2g, 2g+1 of qh; 16 elements
 * share one int8 scale. Value (d * scale) * (q - 32), as to_float. */
static inline vf q6k_vec(const bt_block_q6_k_t *b, int h, int g, int l0)
{
    const uint8_t *ql = b->ql + 64 * h + 32 * (g & 1) + l0, *qh = b->qh + 32 * h + l0;
    __m512i lo = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)ql));
    lo = g >= 2 ? _mm512_srli_epi32(lo, 4) : _mm512_and_si512(lo, _mm512_set1_epi32(0xf));
    __m512i hi = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qh));
    hi = _mm512_and_si512(_mm512_srli_epi32(hi, 2 * g), _mm512_set1_epi32(3));
    const __m512i q = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)),
                                       _mm512_set1_epi32(32));
    const float s = _cvtsh_ss(b->d) * (float)b->scales[8 * h + l0 / 16 + 2 * g];
    return _mm512_mul_ps(vf_set1(s), _mm512_cvtepi32_ps(q));
}

static inline void acc_q6_k(vf *acc, const uint8_t *blk, const float *restrict x)
{
    const bt_block_q6_k_t *b = (const bt_block_q6_k_t *)blk;
    for (int h = 0; h < 2; h++)
        for (int g = 0; g < 4; g++) {
            const float *xg = x + 128 * h + 32 * g;
            *acc = vf_fma(q6k_vec(b, h, g, 0), vf_load(xg), *acc);
            *acc = vf_fma(q6k_vec(b, h, g, 16), vf_load(xg + 16), *acc);
        }
}

/* The GEMV of one type: rows in groups of 4, each with one accumulator
 * taking k in steps of VL in order, as tile(R, 1) does over dequantized
 * rows, so the result is bitwise the tiled path's. The rows two groups
 * ahead are prefetched a slice per block: four interleaved row streams
 * advance too slowly for the hardware prefetcher. A macro per type keeps
 * acc_t inlined, also inside the OpenMP region. */
#define GEMV_FUSED(t, n_el, bb)                                                                \
    static inline __attribute__((always_inline)) void                                          \
    gemv_rows_##t(float *restrict out, const uint8_t *w, size_t row_bytes,                     \
                  const float *restrict x, int64_t n_in, const int R)                          \
    {                                                                                          \
        vf acc[4];                                                                             \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) acc[r] = vf_zero();                \
        const int64_t nb = n_in / (n_el);                                                      \
        const char *ahead = (const char *)w + 8 * row_bytes;                                   \
        const size_t slice = (4 * row_bytes + (size_t)nb - 1) / (size_t)nb;                    \
        for (int64_t b = 0; b < nb; b++) {                                                     \
            for (size_t o = 0; o < slice; o += 64)                                             \
                _mm_prefetch(ahead + (size_t)b * slice + o, _MM_HINT_T0);                      \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                \
                acc_##t(&acc[r], w + (size_t)r * row_bytes + (size_t)b * (bb), x + (n_el) * b); \
        }                                                                                      \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) out[r] = vf_sum(acc[r]);           \
    }                                                                                          \
    static void gemv_##t(float *restrict out, const bt_matrix_t *w, const float *restrict x,   \
                         const bt_scratch_t *s)                                                \
    {                                                                                          \
        const int64_t n_out = w->n_out, n_groups = (n_out + 3) / 4;                            \
        const int team = bt_team_size(s, (double)w->n_in * (double)n_out, 0.0);                \
        _Pragma("omp parallel for schedule(static) num_threads(team) if (team > 1)")           \
        for (int64_t g = 0; g < n_groups; g++) {                                               \
            const int64_t r = 4 * g;                                                           \
            const uint8_t *wr = (const uint8_t *)w->data + (size_t)r * w->row_bytes;           \
            if (n_out - r >= 4)                                                                \
                gemv_rows_##t(out + r, wr, w->row_bytes, x, w->n_in, 4);                       \
            else                                                                               \
                for (int64_t i = r; i < n_out; i++, wr += w->row_bytes)                        \
                    gemv_rows_##t(out + i, wr, w->row_bytes, x, w->n_in, 1);                   \
        }                                                                                      \
    }

typedef void (*gemv_fn)(float *restrict, const bt_matrix_t *, const float *restrict,
                        const bt_scratch_t *);
GEMV_FUSED(q8_0, 32, sizeof(bt_block_q8_0_t))
GEMV_FUSED(q4_0, 32, sizeof(bt_block_q4_0_t))
GEMV_FUSED(q4_1, 32, sizeof(bt_block_q4_1_t))
GEMV_FUSED(q5_0, 32, sizeof(bt_block_q5_0_t))
GEMV_FUSED(q5_1, 32, sizeof(bt_block_q5_1_t))
GEMV_FUSED(f16, 32, 64)
GEMV_FUSED(bf16, 32, 64)
GEMV_FUSED(q4_k, BT_QK_K, sizeof(bt_block_q4_k_t))
GEMV_FUSED(q6_k, BT_QK_K, sizeof(bt_block_q6_k_t))

static gemv_fn fused_gemv(uint32_t type, int64_t n_in)
{
    if (n_in % 32 != 0) /* f16/bf16 rows of any length: the tiled path handles tails */
        return NULL;
    switch (type) {
    case BT_TYPE_Q5_0: return gemv_q5_0;
    case BT_TYPE_Q5_1: return gemv_q5_1;
    case BT_TYPE_Q4_K: return gemv_q4_k;
    case BT_TYPE_Q6_K: return gemv_q6_k;
    case BT_TYPE_F16: return gemv_f16;
    case BT_TYPE_BF16: return gemv_bf16;
    case BT_TYPE_Q8_0: return gemv_q8_0;
    case BT_TYPE_Q4_0: return gemv_q4_0;
    case BT_TYPE_Q4_1: return gemv_q4_1;
    default: return NULL;
    }
}
#endif

/* Each thread takes blocks of BT_MATMUL_ROWS rows of W, dequantizes them
 * into its scratch (f32 rows are used in place), and multiplies them with
 * every token, 4 tokens x 4 rows at a time so a tile of x stays in L1 while
 * the dequantized rows stay in L2. */
static void exact_matmul(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                         int n_tok, const bt_scratch_t *s)
{
    const int64_t n_in = w->n_in, n_out = w->n_out;
#ifdef BT_FUSED_GEMV
    /* one token: dequantize in registers instead of through the scratch
     * (the same values, the same order, so the same bits) */
    gemv_fn gemv = n_tok == 1 ? fused_gemv(w->type, n_in) : NULL;
    if (gemv != NULL) {
        gemv(out, w, x, s);
        return;
    }
#endif
    const int64_t n_blocks = (n_out + BT_MATMUL_ROWS - 1) / BT_MATMUL_ROWS;
    const bool direct = w->type == BT_TYPE_F32;
    const bt_to_float_fn fast = bt_dequant_simd_fn(w->type);
    const bt_to_float_fn to_float = fast ? fast : bt_type_info(w->type)->to_float;

    const int team = bt_team_size(s, (double)n_tok * (double)n_in * (double)n_out, 0.0);
#pragma omp parallel for schedule(static) num_threads(team) if (team > 1)
    for (int64_t b = 0; b < n_blocks; b++) {
        const int64_t r0 = b * BT_MATMUL_ROWS;
        const int nr = imin(BT_MATMUL_ROWS, n_out - r0);
        const uint8_t *src = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
        const float *wb;
        size_t ldw;
        if (direct) {
            wb = (const float *)src;
            ldw = w->row_bytes / sizeof(float);
        } else {
            float *buf = s->buf + (size_t)omp_get_thread_num() * s->per_thread;
            for (int i = 0; i < nr; i++)
                to_float(buf + (size_t)i * n_in, src + (size_t)i * w->row_bytes, n_in);
            wb = buf;
            ldw = (size_t)n_in;
        }
        for (int t = 0; t < n_tok; t += TILE_T) {
            const int nt = imin(TILE_T, n_tok - t);
            for (int r = 0; r < nr;) {
                float *o = out + (size_t)t * n_out + r0 + r;
                const float *xt = x + (size_t)t * n_in;
                if (nt == 1 && nr - r >= TILE_R1) {
                    (TILE_R1 == 8 ? tile_8_1 : tile_4_1)(o, (size_t)n_out, wb + r * ldw, ldw,
                                                         xt, (size_t)n_in, n_in);
                    r += TILE_R1;
                } else {
                    const int rr = imin(TILE_R, nr - r);
                    tiles[rr - 1][nt - 1](o, (size_t)n_out, wb + r * ldw, ldw, xt, (size_t)n_in,
                                          n_in);
                    r += rr;
                }
            }
        }
    }
}

/* ---- attention ---- */

/* Query rows of one kv head handled together (its query heads, for one or
 * several tokens): the keys and values they share are loaded once for all
 * of them. */
#define ATT_ROWS BT_ATT_ROWS
_Static_assert(ATT_ROWS == 8, "the scores and attend tables below have rows 1 to 8");

/* score[r][j] = scale * sum_d q[r][d] * kt[d][j] for rows r < nr (<=
 * ATT_ROWS) and keys j < n_keys, 2 VL keys at a time from the transposed
 * keys: no horizontal sums, and the last block loads only the keys that
 * exist. Each score accumulates over d in order with the same operations
 * wherever its key falls and whichever rows share the pass, so its value
 * depends on the query row and the key alone. score rows are ld apart.
 * ahead > 0: each K load also prefetches the same dim's keys ahead keys on
 * (the next key block, att_unit); a hint. */
static inline __attribute__((always_inline)) void
scores_n(float *restrict score, size_t ld, const float *const *q, const int nr,
         const void *kt, int k_stride, int n_keys, int head_dim, float scale, const bool f16,
         int ahead)
{
    const size_t es = f16 ? 2 : 4;
    const vf sc = vf_set1(scale);
    for (int j = 0; j < n_keys; j += 2 * VL) {
        const int r0 = n_keys - j, n0 = r0 > VL ? VL : r0, n1 = r0 - VL < 0 ? 0
                                                          : r0 - VL > VL ? VL : r0 - VL;
        vf a[ATT_ROWS][2];
        #pragma GCC unroll 8
        for (int r = 0; r < ATT_ROWS; r++)
            a[r][0] = a[r][1] = vf_zero();
        for (int d = 0; d < head_dim; d++) {
            const size_t row = (size_t)d * k_stride + j;
            if (ahead > 0) { /* the same keys of the next block: see att_unit */
                __builtin_prefetch((const char *)kt + es * (row + (size_t)ahead), 0, 2);
                __builtin_prefetch((const char *)kt + es * (row + (size_t)ahead + VL), 0, 2);
            }
            const vf k0 = n0 == VL ? kv_load(kt, row, f16) : kv_load_n(kt, row, n0, f16);
            const vf k1 = n1 == VL ? kv_load(kt, row + VL, f16) : kv_load_n(kt, row + VL, n1, f16);
            #pragma GCC unroll 8
            for (int r = 0; r < nr; r++) {
                const vf qd = vf_set1(q[r][d]);
                a[r][0] = vf_fma(qd, k0, a[r][0]);
                a[r][1] = vf_fma(qd, k1, a[r][1]);
            }
        }
        #pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            vf_store_n(score + r * ld + j, vf_mul(a[r][0], sc), n0);
            vf_store_n(score + r * ld + j + VL, vf_mul(a[r][1], sc), n1);
        }
    }
}

#if BT_SIMD16
/* e^x for x <= 0 (scores minus their max): x = n ln2 + r with |r| <=
 * ln2/2, e^r by its Taylor polynomial to degree 7 (relative error below
 * 2^-24 on that range), scaled by 2^n (which also underflows to 0
 * smoothly). Every lane goes through the same operations, in the avx512
 * and avx2 builds alike, so a score's weight does not depend on where its
 * key falls in a vector, nor on the build. */
static inline v16f exp_neg(v16f x)
{
    x = v16f_max(x, v16f_set1(-104.0f)); /* below: 0 after scaling anyway */
    const v16f n = v16f_round_f(v16f_mul(x, v16f_set1(1.44269504088896341f)));
    v16f r = v16f_fma(n, v16f_set1(-0.693145751953125f), x); /* ln2 = hi + lo, hi exact */
    r = v16f_fma(n, v16f_set1(-1.42860682030941723212e-6f), r);
    v16f p = v16f_set1(1.0f / 5040.0f);
    p = v16f_fma(p, r, v16f_set1(1.0f / 720.0f));
    p = v16f_fma(p, r, v16f_set1(1.0f / 120.0f));
    p = v16f_fma(p, r, v16f_set1(1.0f / 24.0f));
    p = v16f_fma(p, r, v16f_set1(1.0f / 6.0f));
    p = v16f_fma(p, r, v16f_set1(0.5f));
    p = v16f_fma(p, r, v16f_set1(1.0f));
    p = v16f_fma(p, r, v16f_set1(1.0f));
    return v16f_ldexp(p, n);
}
#endif

/* One key block of a row's online softmax: with m the row's running max
 * (its sink, or -inf, before the first block), mb = max(m, score[0 .. n));
 * score[j] becomes e^(score[j] - mb) in place, *alpha = e^(m - mb) (what
 * the row's earlier sums are scaled by; exactly 1 when the max stays), m
 * becomes mb, and the result is the sum of the new weights in double: in
 * 16 lanes (each a fixed subsequence of j), then a fixed horizontal sum,
 * in the avx512 and avx2 builds; otherwise in order. Either way fixed by
 * n and the scores alone. */
static __attribute__((noinline)) double exp_block(float *restrict score, int n, float *m,
                                                  float *alpha)
{
#if BT_SIMD16
    v16f mv = v16f_set1(*m);
    for (int j = 0; j < n; j += 16)
        mv = v16f_max(mv, v16f_load_n(score + j, n - j < 16 ? n - j : 16, -INFINITY));
    const float top = v16f_hmax(mv);
    const v16f mx = v16f_set1(top);
    v16d sum = v16d_zero();
    for (int j = 0; j < n; j += 16) {
        const int k = n - j < 16 ? n - j : 16;
        const v16f e = v16f_keep_n(exp_neg(v16f_sub(v16f_load_n(score + j, k, 0.0f), mx)), k);
        v16f_store_n(score + j, e, k);
        sum = v16d_add_f(sum, e);
    }
    *alpha = v16f_hmax(exp_neg(v16f_set1(*m - top))); /* every lane the same */
    *m = top;
    return v16d_sum(sum);
#else
    float top = *m;
    for (int j = 0; j < n; j++)
        top = score[j] > top ? score[j] : top;
    double sum = 0.0;
    for (int j = 0; j < n; j++) {
        score[j] = expf(score[j] - top);
        sum += score[j];
    }
    *alpha = expf(*m - top);
    *m = top;
    return sum;
#endif
}

/* out[r][d] = alpha[r] out[r][d] + sum_j p[r][j] * v[j][d] for rows r < nr
 * and each row's keys j < nk[r]: each element starts from its scaled sum
 * and adds the keys in order; a value vector is loaded once for all rows.
 * Dims past the last full vector go one at a time. ahead > 0: the keys of
 * every row also prefetch the same dims of the value ahead keys on. */
static inline __attribute__((always_inline)) void
attend_n(float *const *out, const float *restrict p, size_t ld, const float *alpha,
         const int nr, const void *v, int kv_dim, const int *nk, int head_dim, const bool f16,
         int ahead)
{
    const size_t es = f16 ? 2 : 4;
    int n_min = nk[0], n_max = nk[0]; /* row r sums over its own nk[r] keys */
    for (int r = 1; r < nr; r++) {
        n_min = nk[r] < n_min ? nk[r] : n_min;
        n_max = nk[r] > n_max ? nk[r] : n_max;
    }
    int d = 0;
    for (; d + 2 * VL <= head_dim; d += 2 * VL) {
        vf a[ATT_ROWS][2];
        #pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            a[r][0] = vf_mul(vf_load(out[r] + d), vf_set1(alpha[r]));
            a[r][1] = vf_mul(vf_load(out[r] + d + VL), vf_set1(alpha[r]));
        }
        for (int j = 0; j < n_min; j++) { /* keys of every row */
            const size_t vj = (size_t)j * kv_dim + d;
            if (ahead > 0) { /* the same dims of the next block's key */
                const char *on = (const char *)v + es * (vj + (size_t)ahead * kv_dim);
                __builtin_prefetch(on, 0, 2);
                __builtin_prefetch(on + es * VL, 0, 2);
            }
            const vf v0 = kv_load(v, vj, f16), v1 = kv_load(v, vj + VL, f16);
            #pragma GCC unroll 8
            for (int r = 0; r < nr; r++) {
                const vf pj = vf_set1(p[r * ld + j]);
                a[r][0] = vf_fma(pj, v0, a[r][0]);
                a[r][1] = vf_fma(pj, v1, a[r][1]);
            }
        }
        for (int j = n_min; j < n_max; j++) { /* then the later tokens' own */
            const size_t vj = (size_t)j * kv_dim + d;
            const vf v0 = kv_load(v, vj, f16), v1 = kv_load(v, vj + VL, f16);
            #pragma GCC unroll 8
            for (int r = 0; r < nr; r++)
                if (j < nk[r]) {
                    const vf pj = vf_set1(p[r * ld + j]);
                    a[r][0] = vf_fma(pj, v0, a[r][0]);
                    a[r][1] = vf_fma(pj, v1, a[r][1]);
                }
        }
        #pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            vf_store(out[r] + d, a[r][0]);
            vf_store(out[r] + d + VL, a[r][1]);
        }
    }
    for (; d + VL <= head_dim; d += VL)
        #pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            vf acc = vf_mul(vf_load(out[r] + d), vf_set1(alpha[r]));
            for (int j = 0; j < nk[r]; j++)
                acc = vf_fma(vf_set1(p[r * ld + j]), kv_load(v, (size_t)j * kv_dim + d, f16), acc);
            vf_store(out[r] + d, acc);
        }
    for (; d < head_dim; d++)
        #pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            float acc = out[r][d] * alpha[r]; /* as a vector lane would */
            for (int j = 0; j < nk[r]; j++)
                acc = lane_fma(p[r * ld + j], kv_get(v, (size_t)j * kv_dim + d, f16), acc);
            out[r][d] = acc;
        }
}

/* scores_n and attend_n for each row count and cache type: constant row
 * counts keep the accumulators in registers. */
typedef void (*scores_fn)(float *restrict, size_t, const float *const *, const void *, int, int,
                          int, float, int);
typedef void (*attend_fn)(float *const *, const float *restrict, size_t, const float *,
                          const void *, int, const int *, int, int);
#define ATT_FNS(nr, f16, name)                                                                 \
    static void scores_##name(float *restrict score, size_t ld, const float *const *q,          \
                              const void *kt, int k_stride, int n_keys, int head_dim,           \
                              float scale, int ahead)                                           \
    {                                                                                           \
        (void)ahead;                                                                            \
        scores_n(score, ld, q, nr, kt, k_stride, n_keys, head_dim, scale, f16, 0);              \
    }                                                                                           \
    static void attend_##name(float *const *out, const float *restrict p, size_t ld,            \
                              const float *alpha, const void *v, int kv_dim, const int *nk,     \
                              int head_dim, int ahead)                                          \
    {                                                                                           \
        (void)ahead;                                                                            \
        attend_n(out, p, ld, alpha, nr, v, kv_dim, nk, head_dim, f16, 0);                       \
    }                                                                                           \
    static void scores_pf_##name(float *restrict score, size_t ld, const float *const *q,       \
                                 const void *kt, int k_stride, int n_keys, int head_dim,        \
                                 float scale, int ahead)                                        \
    {                                                                                           \
        scores_n(score, ld, q, nr, kt, k_stride, n_keys, head_dim, scale, f16, ahead);          \
    }                                                                                           \
    static void attend_pf_##name(float *const *out, const float *restrict p, size_t ld,         \
                                 const float *alpha, const void *v, int kv_dim, const int *nk,  \
                                 int head_dim, int ahead)                                       \
    {                                                                                           \
        attend_n(out, p, ld, alpha, nr, v, kv_dim, nk, head_dim, f16, ahead);                   \
    }
#define ATT_FNS_ROWS(nr) ATT_FNS(nr, false, f32_##nr) ATT_FNS(nr, true, f16_##nr)
ATT_FNS_ROWS(1)
ATT_FNS_ROWS(2)
ATT_FNS_ROWS(3)
ATT_FNS_ROWS(4)
ATT_FNS_ROWS(5)
ATT_FNS_ROWS(6)
ATT_FNS_ROWS(7)
ATT_FNS_ROWS(8)
#define ATT_TAB(fn, ty)                                                                        \
    {fn##_##ty##_1, fn##_##ty##_2, fn##_##ty##_3, fn##_##ty##_4, fn##_##ty##_5, fn##_##ty##_6,   \
     fn##_##ty##_7, fn##_##ty##_8}
/* [prefetching the next block][f16][rows - 1]: the rows of a prefill keep
 * their loops free of the prefetches' tests */
static const scores_fn scores_tab[2][2][ATT_ROWS] = {
    {ATT_TAB(scores, f32), ATT_TAB(scores, f16)},
    {ATT_TAB(scores_pf, f32), ATT_TAB(scores_pf, f16)}};
static const attend_fn attend_tab[2][2][ATT_ROWS] = {
    {ATT_TAB(attend, f32), ATT_TAB(attend, f16)},
    {ATT_TAB(attend_pf, f32), ATT_TAB(attend_pf, f16)}};

/* The rows of one kv head are its (token, query head) pairs in that
 * order. A unit is ATT_UNIT_ROWS consecutive rows of one kv head; its
 * keys go by in blocks of BT_ATT_KEY_BLOCK at fixed positions (multiples of
 * the block from key 0), and each block, while its K and V stay in the
 * caches, serves the unit's rows ATT_ROWS at a time: scores, then each
 * row's online-softmax step over its own keys of the block (exp_block),
 * then its values. A row's operations depend on its position (its keys)
 * and the fixed blocks alone, never on the rows, tokens or threads it
 * shares a unit with (invariant 1). */
#define ATT_UNIT_ROWS 64

typedef struct {
    float *out;
    const float *q;
    const void *k, *v;
    bool f16;
    bool fetch; /* a few decode rows: prefetch each next key block (att_fetch) */
    int n_tok, pos0;
    const bt_attn_t *a;
    const bt_scratch_t *s;
} att_args_t;

/* The first key the query at position p sees. */
static inline int first_key(const bt_attn_t *a, int p)
{
    return a->window > 0 && p >= a->window ? p - a->window + 1 : 0;
}

/* A unit's kv head, rows and keys: rows [r0, r1) of kv head g see keys
 * [j0, j1). */
typedef struct {
    int g, r0, r1, j0, j1;
} att_span_t;

/* The end of the keys [j0, j1) that lie in j0's key block. */
static inline int block_end(int j0, int j1)
{
    const int e = j0 / BT_ATT_KEY_BLOCK * BT_ATT_KEY_BLOCK + BT_ATT_KEY_BLOCK;
    return j1 < e ? j1 : e;
}

static att_span_t unit_span(const att_args_t *x, int u)
{
    const int group = x->a->n_head / x->a->n_head_kv, n_rows = x->n_tok * group;
    const int per_head = (n_rows + ATT_UNIT_ROWS - 1) / ATT_UNIT_ROWS;
    att_span_t sp = {u / per_head, u % per_head * ATT_UNIT_ROWS, 0, 0, 0};
    sp.r1 = sp.r0 + ATT_UNIT_ROWS < n_rows ? sp.r0 + ATT_UNIT_ROWS : n_rows;
    sp.j0 = first_key(x->a, x->pos0 + sp.r0 / group);
    sp.j1 = x->pos0 + (sp.r1 - 1) / group + 1;
    return sp;
}

/* Prefetches the cache lines of [p, p + n) into L2. */
static inline void fetch_l2(const char *p, size_t n)
{
    const uintptr_t end = (uintptr_t)p + n;
    for (uintptr_t l = (uintptr_t)p & ~(uintptr_t)63; l < end; l += 64)
        __builtin_prefetch((const void *)l, 0, 2);
}

/* Asks for the keys [j0, j1) of kv head g and their values (the keys of
 * a unit's first block) to be brought into L2 in one burst, while the
 * block before them is worked on; the unit's later blocks are fetched by
 * the scores and values loops as they go (ahead). A decode row's keys and
 * values were last read a token ago and have left the caches, and the
 * hardware prefetchers do not follow them (head_dim short runs of
 * transposed keys a block, values a few lines a row): without this, a few
 * rows' attention waited on memory load after load. On a Xeon, llama-1b's
 * at 2048 keys took 1.75 ms a layer on 1 thread; 1.45 with bursts alone,
 * 1.19 with the loops' prefetches. A hint: no result changes. */
static void att_fetch(const att_args_t *x, int g, int j0, int j1)
{
    const bt_attn_t *a = x->a;
    const size_t es = x->f16 ? 2 : 4;
    const int kv_dim = a->v_stride > 0 ? a->v_stride : a->n_head_kv * a->head_dim;
    const char *kg = (const char *)x->k + es * (size_t)g * a->head_dim * a->k_stride;
    const char *vg = (const char *)x->v + es * (size_t)g * a->head_dim;
    for (int d = 0; d < a->head_dim; d++)
        fetch_l2(kg + es * ((size_t)d * a->k_stride + j0), es * (size_t)(j1 - j0));
    for (int j = j0; j < j1; j++)
        fetch_l2(vg + es * (size_t)j * kv_dim, es * (size_t)a->head_dim);
}

/* Rows [r0, r1) of kv head g (see above); score: ATT_ROWS x
 * BT_ATT_KEY_BLOCK floats. Within a block, a pass scores the keys
 * [klo, khi) that some row of it sees there; the weights of a row's keys
 * before its own first (a window's start) are set to 0, which leaves its
 * sums as they would be without them (an fma with a zero product adds +0). */
static void att_unit(const att_args_t *x, att_span_t sp, const att_span_t *next, float *score)
{
    const int g = sp.g, r0 = sp.r0, r1 = sp.r1;
    enum { KB = BT_ATT_KEY_BLOCK };
    const bt_attn_t *a = x->a;
    const bool f16 = x->f16;
    const size_t es = f16 ? 2 : 4; /* bytes per cache element */
    const int n_head = a->n_head, head_dim = a->head_dim, pos0 = x->pos0;
    const int group = n_head / a->n_head_kv;
    const int kv_dim = a->v_stride > 0 ? a->v_stride : a->n_head_kv * head_dim;
    const char *kg = (const char *)x->k + es * (size_t)g * head_dim * a->k_stride;
    const char *vg = (const char *)x->v + es * (size_t)g * head_dim;
    float m[ATT_UNIT_ROWS];
    double l[ATT_UNIT_ROWS];
    for (int i = r0; i < r1; i++) {
        const int t = i / group, h = g * group + i % group;
        m[i - r0] = a->sinks != NULL ? a->sinks[h] : -INFINITY;
        l[i - r0] = 0.0;
        memset(x->out + ((size_t)t * n_head + (size_t)h) * head_dim, 0,
               sizeof(float) * (size_t)head_dim);
    }
    const int j_begin = sp.j0, j_end = sp.j1;
    for (int b0 = j_begin / KB * KB; b0 < j_end; b0 += KB) {
        /* a few rows prefetch the next block as they go (the same keys
         * and dims KB keys on), or, at a unit's last block, the next
         * unit's first before it */
        const int ahead = x->fetch && b0 + KB < j_end ? KB : 0;
        if (x->fetch && ahead == 0 && next != NULL)
            att_fetch(x, next->g, next->j0, block_end(next->j0, next->j1));
        for (int c = r0; c < r1; c += ATT_ROWS) {
            const float *qr[ATT_ROWS];
            float *orow[ATT_ROWS], alpha[ATT_ROWS];
            int idx[ATT_ROWS], lo[ATT_ROWS], nk[ATT_ROWS], nr = 0;
            int klo = b0 + KB, khi = b0;
            for (int i = c; i < r1 && i < c + ATT_ROWS; i++) {
                const int t = i / group, h = g * group + i % group;
                const int j0 = first_key(a, pos0 + t), j1 = pos0 + t + 1;
                const int rlo = j0 > b0 ? j0 : b0, rhi = j1 < b0 + KB ? j1 : b0 + KB;
                if (rlo >= rhi)
                    continue; /* none of its keys in this block (causal, window) */
                const size_t row = ((size_t)t * n_head + (size_t)h) * head_dim;
                qr[nr] = x->q + row;
                orow[nr] = x->out + row;
                idx[nr] = i - r0;
                lo[nr] = rlo;
                nk[nr] = rhi; /* made relative to klo below */
                klo = rlo < klo ? rlo : klo;
                khi = rhi > khi ? rhi : khi;
                nr++;
            }
            if (nr == 0)
                continue;
            scores_tab[ahead > 0][f16][nr - 1](score, KB, qr, kg + es * (size_t)klo,
                                               a->k_stride, khi - klo, head_dim, a->scale, ahead);
            for (int r = 0; r < nr; r++) {
                float *sr = score + (size_t)r * KB;
                for (int j = 0; j < lo[r] - klo; j++)
                    sr[j] = 0.0f;
                const double sum = exp_block(sr + (lo[r] - klo), nk[r] - lo[r], &m[idx[r]],
                                             &alpha[r]);
                l[idx[r]] = l[idx[r]] * alpha[r] + sum;
                nk[r] -= klo;
            }
            attend_tab[ahead > 0][f16][nr - 1](orow, score, KB, alpha,
                                               vg + es * (size_t)klo * kv_dim, kv_dim, nk,
                                               head_dim, ahead);
        }
    }
    for (int i = r0; i < r1; i++) { /* the sink's weight last, then 1 / the sum */
        const int t = i / group, h = g * group + i % group;
        const float sink = a->sinks != NULL ? a->sinks[h] : -INFINITY;
        const float inv = (float)(1.0 / (l[i - r0] + (double)expf(sink - m[i - r0])));
        float *o = x->out + ((size_t)t * n_head + (size_t)h) * head_dim;
        for (int d = 0; d < head_dim; d++)
            o[d] *= inv;
    }
}

/* Thread me of nth takes every nth unit: the later tokens' rows see more
 * keys, and taking them in turn shares them out evenly. */
static void att_share(const att_args_t *x, int me, int nth)
{
    const int n_rows = x->n_tok * (x->a->n_head / x->a->n_head_kv);
    const int n_units = (n_rows + ATT_UNIT_ROWS - 1) / ATT_UNIT_ROWS * x->a->n_head_kv;
    float *score = x->s->buf + (size_t)me * x->s->per_thread;
    if (me >= n_units)
        return;
    att_span_t sp = unit_span(x, me);
    if (x->fetch)
        att_fetch(x, sp.g, sp.j0, block_end(sp.j0, sp.j1));
    for (int u = me; u < n_units; u += nth) {
        const att_span_t next = u + nth < n_units ? unit_span(x, u + nth) : sp;
        att_unit(x, sp, u + nth < n_units ? &next : NULL, score);
        sp = next;
    }
}

static void cpu_attention(float *restrict out, const float *restrict q, const void *k,
                          const void *v, uint32_t kv_type, int n_tok, int pos0, const bt_attn_t *a,
                          const bt_scratch_t *s)
{
    const bool few = n_tok <= BT_ATT_ROWS;
    const att_args_t x = {out, q, k, v, kv_type == BT_TYPE_F16, few, n_tok, pos0, a, s};
    const int seen = a->window > 0 && a->window < pos0 + n_tok ? a->window : pos0 + n_tok;
    /* a few decode rows stream their keys and values, shared out by kv
     * head where there are two or more; they come at a quarter to a third
     * of a weight stream's rate even prefetched, so they count four times */
    const bool stream = few && a->n_head_kv > 1;
    const double kv_bytes =
        2.0 * seen * (double)a->n_head_kv * a->head_dim * (kv_type == BT_TYPE_F16 ? 2 : 4);
    const int team = bt_team_size(s, 2.0 * n_tok * seen * (double)a->n_head * a->head_dim,
                                  stream ? 4.0 * kv_bytes : 0.0);
    if (team == 1) { /* no OpenMP region: even an inactive one costs about a microsecond */
        att_share(&x, 0, 1);
        return;
    }
#pragma omp parallel num_threads(team)
    att_share(&x, omp_get_thread_num(), omp_get_num_threads());
}

/* The quantized formats against 8-bit activations where this build can
 * (cpu_q8.c), F32/F16/BF16 as one FMA chain per output over row panels
 * (cpu_fpanel.c), anything else as bt_ops_exact. */
#if BT_SIMD16
static bool cpu_is_exact(uint32_t type, int64_t n_in)
{
    return !bt_cpu_q8_supports(type, n_in) && !bt_cpu_fpanel_supports(type);
}

static void cpu_matmul(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                       int n_tok, const bt_scratch_t *s)
{
    if (bt_cpu_q8_supports(w->type, w->n_in))
        bt_cpu_matmul_q8(out, w, x, n_tok, s);
    else if (bt_cpu_fpanel_supports(w->type))
        bt_cpu_matmul_fpanel(out, w, x, n_tok, s);
    else
        exact_matmul(out, w, x, n_tok, s);
}

static size_t pack_bytes(const bt_matrix_t *w)
{
    if (bt_cpu_fpanel_supports(w->type))
        return bt_cpu_fpanel_bytes(w->type, w->n_in, w->n_out);
    return bt_cpu_q8_packed_bytes(w->type, w->n_in, w->n_out);
}

static void pack(const bt_matrix_t *w, void *dst)
{
    if (bt_cpu_fpanel_supports(w->type))
        bt_cpu_fpanel_pack(dst, w);
    else
        bt_cpu_q8_pack(dst, w);
}
#else /* sse2: neither path (cpu_q8.c and cpu_fpanel.c are empty), so cpu is exact */
static bool cpu_is_exact(uint32_t type, int64_t n_in) { return (void)type, (void)n_in, true; }
static size_t pack_bytes(const bt_matrix_t *w) { return (void)w, 0; }
static void pack(const bt_matrix_t *w, void *dst) { (void)w, (void)dst; }
#define cpu_matmul exact_matmul
#endif

/* ---- baton-bench's machine peaks, with this build's vectors ---- */

/* Independent FMA chains: enough to cover latency x issue width (4 x 2 on
 * current x86 cores) with room to spare; 12 + 2 constants fit in 16
 * registers. iters x PEAK_CHAINS FMAs of VL lanes; acc -> acc * 0.999 +
 * 0.001 stays near 1 (no overflow, no denormals). */
#define PEAK_CHAINS 12

static float peak_fma(int64_t iters, double *flops_per_iter)
{
    const vf b = vf_set1(0.999f), c = vf_set1(0.001f);
    vf a[PEAK_CHAINS];
#pragma GCC unroll 12
    for (int i = 0; i < PEAK_CHAINS; i++)
        a[i] = vf_set1(0.1f * (float)i);
    for (int64_t n = 0; n < iters; n++)
#pragma GCC unroll 12
        for (int i = 0; i < PEAK_CHAINS; i++)
            a[i] = vf_fma(a[i], b, c);
    float s = 0.0f;
    for (int i = 0; i < PEAK_CHAINS; i++)
        s += vf_sum(a[i]);
    *flops_per_iter = 2.0 * PEAK_CHAINS * VL;
    return s;
}

/* Independent chains of the 8-bit dot product the quantized kernels use
 * (v16i_dot_small: vpdpbusd with AVX-512 VNNI, vpmaddubsw + vpmaddwd +
 * vpaddd with AVX2), 64 multiply-adds of unsigned by signed bytes into 16
 * int32 lanes each: 12 chains in AVX-512's 32 registers, 5 (10 registers)
 * in AVX2's 16. *ops_per_iter counts 2 per multiply-add (as GFLOP/s does);
 * 0 where the build has no integer dot product (sse2). The bytes come from
 * a volatile, so the compiler cannot fold the chains; each lane's four
 * products sum to 0, so they never overflow. */
#if BT_SIMD16
#ifdef BT_SIMD16_AVX512
#define PEAK_DOT_CHAINS 12
#define PEAK_DOT_KEEP(u) ((void)0)
#elif BT_SIMD16_NEON
#define PEAK_DOT_CHAINS 6 /* sdot reads its accumulator: four registers a chain */
#define PEAK_DOT_KEEP(u) ((void)0)
#else
/* AVX2's products do not read the accumulator: without this (no
 * instruction, only a register the compiler must assume changed) it would
 * compute them once, outside the loop, and time the adds alone */
#define PEAK_DOT_CHAINS 5
#define PEAK_DOT_KEEP(u) __asm__("" : "+x"((u).lo), "+x"((u).hi))
#endif
static volatile int32_t peak_dot_bytes = 0x01010101;

static float peak_dot(int64_t iters, double *ops_per_iter)
{
    v16i u = v16i_set1(peak_dot_bytes);
    const v16i x = v16i_set1(peak_dot_bytes ^ 0x00fe00fe);
    v16i a[PEAK_DOT_CHAINS];
#pragma GCC unroll 12
    for (int i = 0; i < PEAK_DOT_CHAINS; i++)
        a[i] = v16i_set1(i);
    for (int64_t n = 0; n < iters; n++)
#pragma GCC unroll 12
        for (int i = 0; i < PEAK_DOT_CHAINS; i++) {
            PEAK_DOT_KEEP(u);
            a[i] = v16i_dot_small(a[i], u, x);
        }
    int32_t s = 0;
    for (int i = 0; i < PEAK_DOT_CHAINS; i++)
        s += v16i_hsum(a[i]);
    *ops_per_iter = 2.0 * 64 * PEAK_DOT_CHAINS;
    return (float)s;
}
#else
static float peak_dot(int64_t iters, double *ops_per_iter)
{
    (void)iters;
    *ops_per_iter = 0.0;
    return 0.0f;
}
#endif

/* Sum of p[0 .. n) with 4 independent vector accumulators. */
static float peak_sum(const float *restrict p, size_t n)
{
    vf a0 = vf_zero(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 4 * VL <= n; i += 4 * VL) {
        a0 = vf_add(a0, vf_load(p + i));
        a1 = vf_add(a1, vf_load(p + i + VL));
        a2 = vf_add(a2, vf_load(p + i + 2 * VL));
        a3 = vf_add(a3, vf_load(p + i + 3 * VL));
    }
    float s = vf_sum(vf_add(vf_add(a0, a1), vf_add(a2, a3)));
    for (; i < n; i++)
        s += p[i];
    return s;
}

/* The batch in one region where every product takes the 8-bit path, or
 * every product is one token on grouped float panels; otherwise one
 * product after another. */
static void cpu_matmul_many(const bt_matmul_job_t *jobs, int n_jobs, const bt_scratch_t *s)
{
#if BT_SIMD16
    bool q8 = true, grouped = true;
    for (int i = 0; i < n_jobs; i++) {
        q8 = q8 && bt_cpu_q8_supports(jobs[i].w.type, jobs[i].w.n_in);
        grouped = grouped && bt_cpu_fpanel_grouped(&jobs[i].w, jobs[i].n_tok);
    }
    if (q8) {
        bt_cpu_matmul_q8_many(jobs, n_jobs, s);
        return;
    }
    if (grouped) {
        bt_cpu_matmul_fpanel_many(jobs, n_jobs, s);
        return;
    }
#endif
    for (int i = 0; i < n_jobs; i++)
        cpu_matmul(jobs[i].out, &jobs[i].w, jobs[i].x, jobs[i].n_tok, s);
}

#define STR_(x) #x
#define STR(x) STR_(x)

const bt_isa_kernels_t BT_ISA(bt_isa_kernels) = {
    .name = STR(BT_ISA_TAG),
    .cpu = {.name = "cpu", .matmul = cpu_matmul, .matmul_many = cpu_matmul_many,
            .attention = cpu_attention},
    .exact = {.name = "exact", .matmul = exact_matmul, .attention = cpu_attention},
    .cpu_is_exact = cpu_is_exact,
    .pack_bytes = pack_bytes,
    .pack = pack,
    .to_float_fast = bt_dequant_simd_fn,
    .peak_fma = peak_fma,
    .peak_dot = peak_dot,
    .peak_sum = peak_sum,
};
