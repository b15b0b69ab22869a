/*
 * cpu_q8.c: matmul of the quantized formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q4_K, Q5_K, Q6_K) against activations quantized to 8 bits, with integer
 * dot products (AVX-512 VNNI vpdpbusd; AVX2 vpmaddubsw / vpmaddwd, simd16.h).
 * This is how llama.cpp's CPU backend computes these formats (it quantizes
 * the activations per 256 for the K formats; here always per 32); it is
 * bt_ops_cpu's path for them in the avx512 and avx2 builds, while
 * bt_ops_exact keeps f32 activations. The avx512 build also multiplies
 * unpacked blocks directly (all eight formats); the avx2 build multiplies
 * the packed layout only (all eight, and MXFP4), packing unpacked weights a
 * panel at a time. Both give the same bits.
 *
 * Activations: each token's row is cut into blocks of 32, each stored as
 * int8 q = round-half-even(x * 127 / max|x|) with the step d = max|x| / 127,
 * for Q4_0, Q5_0, Q8_0 and MXFP4 rounded to f16 exactly as ggml's Q8_0
 * activations (so their products equal llama.cpp's; d stays f32 past f16's
 * range, where ggml's would be infinite), for the others in f32 (see
 * quantize_rows). q = 0 where the block is all
 * zero. Every element then carries an error of at most d / 2 plus 127
 * times d's rounding, so |y - y_exact| <= sum over blocks of
 * d (1/2 + 127 2^-11) * sum |w| (and a few ulps), which is what the tests
 * hold this path to.
 *
 * Weights, as unsigned bytes u = q + c where the format's value is
 * d_w * (u - c) (+ m for the formats with a minimum): c = 8 (Q4_0), 16
 * (Q5_0), 32 (Q6_K), 128 (Q8_0, whose signed q is flipped to q + 128), 12
 * (MXFP4: q = twice the E2M1 value, d_w = 2^(e - 128); packed only), 0
 * (Q4_1, Q5_1, Q4_K, Q5_K). d_w and m are per 32 elements (a K format's
 * sub-block step and minimum), per 16 for Q6_K. For a block,
 *   y += d_w * d_x * (sum u * q_x - c * sum q_x) + m * d_x * sum q_x,
 * the sums exact in integers (4 products per 32-bit lane), the
 * float part one fixed sequence per output (see "the product" below),
 * whichever tile, thread, batch size or weight layout computes it, so
 * invariant 1 holds and one token gives the bits a batch gives.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include <omp.h>

#include "cpu_internal.h"
#include "simd16.h"

#if BT_SIMD16

/* Tokens quantized at once (per thread): with the block scales and sums
 * that is 48 bytes per column, inside the bt_scratch_floats per column the
 * scratch gives (with room after it for a packed panel, 18 bytes per
 * column at most, and for the tokens' panel records, 48). */
#define Q8_TOKENS 32

/* Tokens one packed-panel call multiplies: their integer sums and float
 * accumulators stay in registers (32 of AVX-512, 16 of AVX2; NEON's 32
 * hold 4 tokens' 32 accumulators and spill the rest, docs/benchmarking.md,
 * "ARM prefill with the 8-bit matrix multiplies"). */
#ifdef BT_SIMD16_AVX512
#define Q8_PANEL_TOKENS 8
#else
#define Q8_PANEL_TOKENS 4
#endif

/* A panel kernel prefetches its weights bt_weight_prefetch_bytes() ahead
 * of its loads: one core's hardware prefetcher alone kept a one-token
 * product of the 4-bit formats near 60% of the read bandwidth on a Zen 5
 * (perf: the samples sat on the weight loads). Past a matrix's end it
 * reads at most that much of whatever follows. A Zen 4's own prefetchers
 * do better alone (bt_weight_prefetch). Where the prefetches put the
 * weights: nowhere, in L1, or in L2 only. A one-token product on an Intel
 * core prefetches into L2 (bt_weight_prefetch_l2: on a Sapphire
 * Rapids-class Xeon the 4- to 6-bit formats read at 77-84% of one core's
 * bandwidth with L1 prefetches and at 83-91% with L2 ones,
 * docs/benchmarking.md); every other one into L1. */
enum { PF_NONE, PF_L1, PF_L2 };

typedef struct {
    const int8_t *q;       /* [Q8_TOKENS][n_in] */
    const float *d;        /* [Q8_TOKENS][n_in / 32] */
    const int32_t *isum;   /* [Q8_TOKENS][n_in / 32]: sum of each block's q */
    const int32_t *isum16; /* [Q8_TOKENS][n_in / 16]: sum of each half block's q */
} q8_rows_t;

/* The activations of T <= Q8_PANEL_TOKENS tokens for one 32-block as the
 * packed panel kernel reads them, every operand a broadcast from one
 * pointer at a constant offset (token t's rows lie n_in apart; 8 row
 * pointers took general registers the kernel needs, and building the start
 * values took the vector ports' issue slots): REC_WORDS(T) 32-bit words,
 *   x[g][t]      word T g + t: token t's q of elements 4g .. 4g + 3;
 *   start[h][t]  word T (8 + h) + t: -c * the sum of the q that its integer
 *                sum covers (the block; for Q6_K each half);
 *   dx[t]        word 10 T + t: its step (float);
 *   isum[t]      word 11 T + t: its sum of q as a float (formats with a
 *                minimum).
 * The record is as wide as the tokens it holds: one token's is 48 bytes,
 * so a decode product reads under a cache line of activations per block
 * next to the weights' 4.5 (eight tokens' records, read for one, took six
 * lines a block, from L2 once n_in passed a few thousand). */
#define REC_WORDS(T) (12 * (T))
#define REC_X(r, T, g, t) ((r) + (T) * (g) + (t))
#define REC_START(r, T, h, t) ((r) + (T) * (8 + (h)) + (t))
#define REC_DX(r, T, t) ((const float *)(const void *)((r) + 10 * (T) + (t)))
#define REC_ISUM(r, T, t) ((const float *)(const void *)((r) + 11 * (T) + (t)))

/* f16_step: keep each block's step rounded to f16, as ggml's Q8_0
 * activations do (the ones it multiplies Q4_0, Q5_0, Q8_0 and MXFP4 with);
 * else in f32, as its Q8_K (the K formats) and as baton has matched
 * llama.cpp's greedy tokens with for Q4_1 and Q5_1 (whose Q8_1 activations
 * also keep d times the block's sum in f16, which is not reproduced). */
static void quantize_rows(int8_t *restrict q, float *restrict d, int32_t *restrict isum,
                          int32_t *restrict isum16, const float *restrict x, int n_tok,
                          int64_t n_in, bool f16_step)
{
    const int64_t nb = n_in / 32;
    for (int t = 0; t < n_tok; t++)
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + (size_t)t * n_in + 32 * b;
            const v16f lo = v16f_load(xb), hi = v16f_load(xb + 16);
            const float amax = v16f_hmax(v16f_max(v16f_abs(lo), v16f_abs(hi)));
            /* the step in f16 where ggml keeps it so (then the products
             * equal llama.cpp's), unless f16 cannot hold it */
            const float d32 = amax / 127.0f;
            const float d16 = f16_step ? bt_f16_to_f32(bt_f32_to_f16(d32)) : d32;
            const float db = isfinite(d16) ? d16 : d32;
            const v16f inv = v16f_set1(amax > 0.0f ? 127.0f / amax : 0.0f);
            /* round to nearest (even): |x * inv| <= 127 */
            const v16i qlo = v16f_round(v16f_mul(lo, inv));
            const v16i qhi = v16f_round(v16f_mul(hi, inv));
            int8_t *qb = q + (size_t)t * n_in + 32 * b;
            v16i_store_i8(qb, qlo);
            v16i_store_i8(qb + 16, qhi);
            d[(size_t)t * nb + b] = db;
            const int32_t h0 = v16i_hsum(qlo), h1 = v16i_hsum(qhi);
            isum16[((size_t)t * nb + b) * 2] = h0;
            isum16[((size_t)t * nb + b) * 2 + 1] = h1;
            /* wrapping: a NaN or inf activation (a model that overflowed)
             * rounds to INT_MIN lanes, whose sum is garbage but defined */
            isum[(size_t)t * nb + b] = (int32_t)((uint32_t)h0 + (uint32_t)h1);
        }
}

#ifdef BT_SIMD16_AVX512 /* the direct path from GGUF blocks: AVX-512 only */

/* ---- the weights of a block pair, unpacked ---- */

/* Blocks b and b + 1 of a weight row: the 64 unsigned bytes u in element
 * order, the scale of each 16-element quarter (d[0] = d[1] and d[2] = d[3]
 * except for Q6_K) and the minimum of each block (formats with one). */
typedef struct {
    __m512i u;
    float d[4], m[2];
} wpair_t;

static inline void pair(float *d, float a, float b)
{
    d[0] = d[1] = a;
    d[2] = d[3] = b;
}

/* Low and high nibbles of 16 bytes a and 16 bytes b as 64 bytes in element
 * order: a's low nibbles are its elements 0-15, its high nibbles 16-31. */
static inline __m512i nibbles2(const uint8_t *a, const uint8_t *b)
{
    const __m256i ab = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)b),
                                        _mm_loadu_si128((const __m128i *)a));
    const __m256i m = _mm256_set1_epi8(0x0f);
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(ab, m)),
                                         _mm256_and_si256(_mm256_srli_epi16(ab, 4), m), 1);
    /* [a lo, b lo, a hi, b hi] -> [a lo, a hi, b lo, b hi] */
    return _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0));
}

/* Bit 4 of each element of two Q5 blocks, from their qh words. */
static inline __m512i q5_high(const uint8_t *qha, const uint8_t *qhb)
{
    uint32_t a, b;
    memcpy(&a, qha, 4);
    memcpy(&b, qhb, 4);
    return _mm512_maskz_mov_epi8((__mmask64)a | (__mmask64)b << 32, _mm512_set1_epi8(16));
}

/* Q4_K / Q5_K: the steps (d * scale) and minimums (-dmin * min) of
 * sub-blocks j, j + 1, as bt_k_steps computes them. */
static inline void k_pair(wpair_t *p, uint16_t hd, uint16_t hdmin, const uint8_t *scales, int j)
{
    const float dd = _cvtsh_ss(hd), dm = _cvtsh_ss(hdmin);
    int s0, m0, s1, m1;
    bt_k_scale_min(scales, j, &s0, &m0);
    bt_k_scale_min(scales, j + 1, &s1, &m1);
    pair(p->d, dd * (float)s0, dd * (float)s1);
    p->m[0] = -(dm * (float)m0);
    p->m[1] = -(dm * (float)m1);
}

/* 32 bytes of packed nibbles holding two 32-element sub-blocks (the low
 * nibbles the first, the high the second), in element order. */
static inline __m512i nibbles_k(const uint8_t *q)
{
    const __m256i v = _mm256_loadu_si256((const __m256i *)q), m = _mm256_set1_epi8(0x0f);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(v, m)),
                              _mm256_and_si256(_mm256_srli_epi16(v, 4), m), 1);
}

/* Bit `bit` of 32 bytes as 16 where set, for the first sub-block, and
 * bit `bit` + 1 for the second. */
static inline __m512i high_k(const uint8_t *qh, int bit)
{
    const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
    const __mmask64 lo = _mm256_test_epi8_mask(h, _mm256_set1_epi8((char)(1 << bit)));
    const __mmask64 hi = _mm256_test_epi8_mask(h, _mm256_set1_epi8((char)(1 << (bit + 1))));
    return _mm512_maskz_mov_epi8(lo | hi << 32, _mm512_set1_epi8(16));
}

/* Q6_K groups g, g + 1 (32 elements each) of half h: 6-bit q = low 4 bits
 * from ql (high nibbles for groups 2, 3) | 2 bits of qh << 4; the scales of
 * their four 16-element sub-blocks. */
static inline void q6k_pair(const bt_block_q6_k_t *w, int h, int g, wpair_t *p)
{
    __m256i q[2];
    for (int k = 0; k < 2; k++) {
        const int gg = g + k;
        const __m256i l = _mm256_loadu_si256((const __m256i *)(w->ql + 64 * h + 32 * (gg & 1)));
        const __m256i lo = _mm256_and_si256(gg >= 2 ? _mm256_srli_epi16(l, 4) : l,
                                            _mm256_set1_epi8(0x0f));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(w->qh + 32 * h));
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * gg), _mm256_set1_epi8(3));
        q[k] = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)); /* 2 bits << 4 stay in the byte */
    }
    p->u = _mm512_inserti64x4(_mm512_castsi256_si512(q[0]), q[1], 1);
    const float d = _cvtsh_ss(w->d);
    for (int i = 0; i < 4; i++)
        p->d[i] = d * (float)w->scales[8 * h + 2 * g + i];
}

static inline __attribute__((always_inline)) wpair_t wpair(const uint8_t *row, int64_t b,
                                                          const uint32_t type)
{
    wpair_t p;
    switch (type) {
    case BT_TYPE_Q4_0: {
        const bt_block_q4_0_t *w = (const bt_block_q4_0_t *)row + b;
        p.u = nibbles2(w[0].qs, w[1].qs);
        pair(p.d, _cvtsh_ss(w[0].d), _cvtsh_ss(w[1].d));
        break;
    }
    case BT_TYPE_Q4_1: {
        const bt_block_q4_1_t *w = (const bt_block_q4_1_t *)row + b;
        p.u = nibbles2(w[0].qs, w[1].qs);
        pair(p.d, _cvtsh_ss(w[0].d), _cvtsh_ss(w[1].d));
        p.m[0] = _cvtsh_ss(w[0].m);
        p.m[1] = _cvtsh_ss(w[1].m);
        break;
    }
    case BT_TYPE_Q5_0: {
        const bt_block_q5_0_t *w = (const bt_block_q5_0_t *)row + b;
        p.u = _mm512_or_si512(nibbles2(w[0].qs, w[1].qs), q5_high(w[0].qh, w[1].qh));
        pair(p.d, _cvtsh_ss(w[0].d), _cvtsh_ss(w[1].d));
        break;
    }
    case BT_TYPE_Q5_1: {
        const bt_block_q5_1_t *w = (const bt_block_q5_1_t *)row + b;
        p.u = _mm512_or_si512(nibbles2(w[0].qs, w[1].qs), q5_high(w[0].qh, w[1].qh));
        pair(p.d, _cvtsh_ss(w[0].d), _cvtsh_ss(w[1].d));
        p.m[0] = _cvtsh_ss(w[0].m);
        p.m[1] = _cvtsh_ss(w[1].m);
        break;
    }
    case BT_TYPE_Q4_K: {
        const bt_block_q4_k_t *w = (const bt_block_q4_k_t *)row + b / 8;
        const int c = (int)(b % 8) / 2;
        p.u = nibbles_k(w->qs + 32 * c);
        k_pair(&p, w->d, w->dmin, w->scales, 2 * c);
        break;
    }
    case BT_TYPE_Q5_K: {
        const bt_block_q5_k_t *w = (const bt_block_q5_k_t *)row + b / 8;
        const int c = (int)(b % 8) / 2;
        p.u = _mm512_or_si512(nibbles_k(w->qs + 32 * c), high_k(w->qh, 2 * c));
        k_pair(&p, w->d, w->dmin, w->scales, 2 * c);
        break;
    }
    case BT_TYPE_Q6_K: {
        const bt_block_q6_k_t *w = (const bt_block_q6_k_t *)row + b / 8;
        q6k_pair(w, (int)(b % 8) / 4, (int)(b % 4), &p);
        break;
    }
    default: { /* Q8_0 */
        const bt_block_q8_0_t *w = (const bt_block_q8_0_t *)row + b;
        const __m512i q = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)w[0].qs)),
            _mm256_loadu_si256((const __m256i *)w[1].qs), 1);
        p.u = _mm512_xor_si512(q, _mm512_set1_epi8((char)0x80));
        pair(p.d, _cvtsh_ss(w[0].d), _cvtsh_ss(w[1].d));
        break;
    }
    }
    return p;
}

#endif /* BT_SIMD16_AVX512 */

/* c, where the format's q is u - c: as a shift (-1: none or not a power
 * of two) and as a number */
static inline int offset_shift(const uint32_t type)
{
    return type == BT_TYPE_Q4_0 ? 3 : type == BT_TYPE_Q5_0 ? 4 : type == BT_TYPE_Q6_K ? 5
         : type == BT_TYPE_Q8_0 ? 7 : -1;
}

static inline int offset_c(const uint32_t type)
{
    return type == BT_TYPE_MXFP4 ? 12 : offset_shift(type) >= 0 ? 1 << offset_shift(type) : 0;
}

/* The c whose multiple of the activations' sum starts a block's integer
 * sums: offset_c, but for Q8_0 in the avx2 build, whose panels take the
 * signed bytes u - 128 themselves (v16i_dot_signed). The same integer
 * either way, so the same bits. */
static inline int start_c(const uint32_t type)
{
#if BT_SIMD16_AVX2
    if (type == BT_TYPE_Q8_0)
        return 0;
#endif
    return offset_c(type);
}

static inline bool has_min(const uint32_t type)
{
    return type == BT_TYPE_Q4_1 || type == BT_TYPE_Q5_1 || type == BT_TYPE_Q4_K ||
           type == BT_TYPE_Q5_K;
}

/* ---- the product: one fixed sequence per output ----
 *
 * For output (r, t), over the blocks b in order, with S the exact integer
 * sum of u * q_x - c * q_x over a scale group (the block, or each of its
 * 16-element halves for Q6_K):
 *   acc = fma((float)S, d_w * d_x, acc)        per scale group, in order
 *   acc = fma((float)isum_x, m * d_x, acc)     formats with a minimum
 * starting from 0. Both paths below compute exactly this: the direct one
 * per row from the GGUF blocks (8 lanes of vpdpbusd per block, summed in
 * integers), the packed one for 16 rows at once from bt_cpu_q8_pack's
 * layout (one lane per row). */

#ifdef BT_SIMD16_AVX512

static inline __attribute__((always_inline)) float
block_terms(float acc, __m512i v, const wpair_t *wp, float dx0, float dx1, int32_t is0,
            int32_t is1, const uint32_t type)
{
    /* sums of 4 lanes (16 elements) in every lane of each 128-bit quarter */
    __m512i a = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_CDAB));
    a = _mm512_add_epi32(a, _mm512_shuffle_epi32(a, _MM_PERM_BADC));
    if (type == BT_TYPE_Q6_K) {
        int32_t q[16];
        _mm512_storeu_si512(q, a);
        acc = fmaf((float)q[0], wp->d[0] * dx0, acc);
        acc = fmaf((float)q[4], wp->d[1] * dx0, acc);
        acc = fmaf((float)q[8], wp->d[2] * dx1, acc);
        return fmaf((float)q[12], wp->d[3] * dx1, acc);
    }
    a = _mm512_add_epi32(a, _mm512_shuffle_i32x4(a, a, _MM_SHUFFLE(2, 3, 0, 1)));
    const int32_t s0 = _mm512_cvtsi512_si32(a);
    const int32_t s1 = _mm_cvtsi128_si32(_mm512_extracti32x4_epi32(a, 2));
    acc = fmaf((float)s0, wp->d[0] * dx0, acc);
    if (has_min(type))
        acc = fmaf((float)is0, wp->m[0] * dx0, acc);
    acc = fmaf((float)s1, wp->d[2] * dx1, acc);
    if (has_min(type))
        acc = fmaf((float)is1, wp->m[1] * dx1, acc);
    return acc;
}

/* out[t * ldo + r] for R rows (row_bytes apart) and T tokens of xq, over
 * nb 32-blocks (nb even), straight from the blocks. R, T and type are
 * constants after inlining. */
static inline __attribute__((always_inline)) void
tile_q8(float *restrict out, size_t ldo, const uint8_t *w, size_t row_bytes, q8_rows_t xq,
        int64_t n_in, const int R, const int T, const uint32_t type)
{
    const int64_t nb = n_in / 32;
    const int sh = offset_shift(type);
    const __m512i ones = _mm512_set1_epi8(1);
    float acc[4][4] = {{0}};
    /* the row group two ahead, a slice per block (as the exact GEMV does:
     * interleaved row streams outrun the hardware prefetcher) */
    const char *ahead = (const char *)w + 8 * row_bytes;
    const size_t slice = (4 * row_bytes + (size_t)nb - 1) / (size_t)nb;
    for (int64_t b = 0; b < nb; b += 2) {
        for (size_t o = 0; o < 2 * slice; o += 64)
            _mm_prefetch(ahead + (size_t)b * slice + o, _MM_HINT_T0);
        __m512i xv[4], base[4];
        for (int t = 0; t < T; t++) {
            xv[t] = _mm512_loadu_si512(xq.q + (size_t)t * n_in + 32 * b);
            /* - c * the lane sums of q_x start the integer sums */
            base[t] = _mm512_setzero_si512();
            if (sh >= 0)
                base[t] = _mm512_sub_epi32(
                    base[t], _mm512_slli_epi32(_mm512_dpbusd_epi32(base[t], ones, xv[t]), sh));
        }
        for (int r = 0; r < R; r++) {
            const wpair_t wp = wpair(w + (size_t)r * row_bytes, b, type);
            for (int t = 0; t < T; t++) {
                const size_t xb = (size_t)t * nb + b;
                acc[r][t] = block_terms(acc[r][t], _mm512_dpbusd_epi32(base[t], wp.u, xv[t]), &wp,
                                        xq.d[xb], xq.d[xb + 1], xq.isum[xb], xq.isum[xb + 1],
                                        type);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            out[t * ldo + r] = acc[r][t];
}

typedef void (*tile_q8_fn)(float *restrict, size_t, const uint8_t *, size_t, q8_rows_t, int64_t);

#define TILE_Q8(ty, R, T)                                                                      \
    static void tq_##ty##_##R##_##T(float *restrict o, size_t ldo, const uint8_t *w, size_t rb, \
                                    q8_rows_t x, int64_t n)                                     \
    {                                                                                           \
        tile_q8(o, ldo, w, rb, x, n, R, T, BT_TYPE_##ty);                                       \
    }
#define TILE_Q8_ROW(ty, R) TILE_Q8(ty, R, 1) TILE_Q8(ty, R, 2) TILE_Q8(ty, R, 3) TILE_Q8(ty, R, 4)
#define TILE_Q8_TYPE(ty) TILE_Q8_ROW(ty, 1) TILE_Q8_ROW(ty, 4)
#define TILES_Q8(ty)                                                                           \
    {{tq_##ty##_1_1, tq_##ty##_1_2, tq_##ty##_1_3, tq_##ty##_1_4},                              \
     {tq_##ty##_4_1, tq_##ty##_4_2, tq_##ty##_4_3, tq_##ty##_4_4}}
TILE_Q8_TYPE(Q4_0)
TILE_Q8_TYPE(Q4_1)
TILE_Q8_TYPE(Q5_0)
TILE_Q8_TYPE(Q5_1)
TILE_Q8_TYPE(Q8_0)
TILE_Q8_TYPE(Q4_K)
TILE_Q8_TYPE(Q5_K)
TILE_Q8_TYPE(Q6_K)

/* [type][1 row, 4 rows][tokens - 1] */
static const tile_q8_fn tiles_q8[8][2][4] = {
    TILES_Q8(Q4_0), TILES_Q8(Q4_1), TILES_Q8(Q5_0), TILES_Q8(Q5_1),
    TILES_Q8(Q8_0), TILES_Q8(Q4_K), TILES_Q8(Q5_K), TILES_Q8(Q6_K),
};

static int type_index(uint32_t type)
{
    switch (type) {
    case BT_TYPE_Q4_0: return 0;
    case BT_TYPE_Q4_1: return 1;
    case BT_TYPE_Q5_0: return 2;
    case BT_TYPE_Q5_1: return 3;
    case BT_TYPE_Q8_0: return 4;
    case BT_TYPE_Q4_K: return 5;
    case BT_TYPE_Q5_K: return 6;
    case BT_TYPE_Q6_K: return 7;
    default: return -1;
    }
}

#endif /* BT_SIMD16_AVX512 */

/* ---- the packed layout: 16 rows interleaved ----
 *
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K. Rows in panels of 16
 * (the last padded with zero rows). Per panel, per 32-block:
 *   nibble formats (Q4_0, Q4_1, Q4_K; MXFP4 as its E2M1 codes, which the
 *     kernel turns into u by a 16-entry table; Q5_0, Q5_1 and Q5_K as the
 *     low 4 bits of their 5-bit u): 4 vectors of 64 bytes, vector j = for
 *     each row r its 4 bytes holding elements 4j.. (low nibbles) and 16 + 4j..
 *     (high nibbles); Q5_0, Q5_1 and Q5_K then 8 64-bit masks of the fifth bits,
 *     mask j (low nibbles) and 4 + j (high) with bit 4r + i for byte 4r + i
 *     of vector j, which the kernel adds as 16 (a masked byte add);
 *   byte formats (Q8_0: u = q + 128; Q6_K: u = q, 0..63): 8 vectors,
 *     vector j = for each row its elements 4j .. 4j + 3;
 * then the block's per-row scales: Q4_0, Q5_0 and Q8_0 16 f16 d; MXFP4 16
 * bytes e (the kernel makes 2^(e - 128) of them); Q4_1 and
 * Q5_1 16 f16 d, 16 f16 m; Q4_K and Q5_K 16 bytes of 6-bit scale, 16 of 6-bit
 * min; Q6_K 2 x 16 int8 scales (the two 16-element halves). The K formats put
 * each super-block's 16 f16 d (and Q4_K's and Q5_K's 16 f16 dmin) before its
 * 8 blocks.
 * The bytes of the blocks (Q4_K 3% more). A row's 4 bytes times
 * one token's 4 quantized activations is one vpdpbusd lane: a block's sum
 * for 16 rows accumulates in integers before its single conversion. */

static int packed_block_bytes(uint32_t type)
{
    switch (type) {
    case BT_TYPE_Q4_0: return 4 * 64 + 32;
    case BT_TYPE_Q4_1: return 4 * 64 + 64;
    case BT_TYPE_Q5_0: return 4 * 64 + 64 + 32;
    case BT_TYPE_Q5_1: return 4 * 64 + 64 + 64;
    case BT_TYPE_Q8_0: return 8 * 64 + 32;
    case BT_TYPE_MXFP4: return 4 * 64 + 16;
    case BT_TYPE_Q4_K: return 4 * 64 + 32;
    case BT_TYPE_Q5_K: return 4 * 64 + 64 + 32;
    case BT_TYPE_Q6_K: return 4 * 64 + 128 + 32;
    default: return 0;
    }
}

/* Whether the packed layout holds a byte per element (else two per byte). */
static inline bool packed_bytes_fmt(uint32_t type) { return type == BT_TYPE_Q8_0; }

/* The high bits its nibbles have in a plane after them: 1 (Q5_0, Q5_1,
 * Q5_K), 2 (Q6_K) or none; the plane has 64 bytes per bit. */
static inline int packed_plane(uint32_t type)
{
    return type == BT_TYPE_Q5_0 || type == BT_TYPE_Q5_1 || type == BT_TYPE_Q5_K ? 1
         : type == BT_TYPE_Q6_K                                                 ? 2
                                                                                : 0;
}

/* Q4_K and Q5_K: a super-block's d and dmin, a block's 6-bit scale and min. */
static inline bool k_min_fmt(uint32_t type)
{
    return type == BT_TYPE_Q4_K || type == BT_TYPE_Q5_K;
}

/* Bytes of a block's element vectors (and plane), before its scales. */
static inline int packed_scales_at(uint32_t type)
{
    return (packed_bytes_fmt(type) ? 8 : 4) * 64 + 64 * packed_plane(type);
}

/* Bytes per panel before each super-block of 8 blocks (K formats). */
static int packed_super_bytes(uint32_t type)
{
    return k_min_fmt(type) ? 64 : type == BT_TYPE_Q6_K ? 32 : 0;
}

/* Bytes of one panel's row of blocks (nb 32-blocks). */
static size_t panel_bytes(uint32_t type, int64_t nb)
{
    return (size_t)nb * (size_t)packed_block_bytes(type) +
           (size_t)(nb / 8) * (size_t)packed_super_bytes(type);
}

/* AVX-512: every format, packed or not (the direct path, which takes
 * blocks in pairs: rows of whole 64s); AVX2, and rows of an odd number of
 * 32-blocks: the formats with a packed layout (unpacked weights are packed
 * a panel at a time). K rows are always whole 256-blocks. */
bool bt_cpu_q8_supports(uint32_t type, int64_t n_in)
{
    const bool packs = packed_block_bytes(type) > 0;
#ifdef BT_SIMD16_AVX512
    if (n_in % 64 == 0 && type_index(type) >= 0)
        return true;
#endif
    return packs && n_in % 32 == 0;
}

size_t bt_cpu_q8_packed_bytes(uint32_t type, int64_t n_in, int64_t n_out)
{
    if (!bt_cpu_q8_supports(type, n_in) || packed_block_bytes(type) == 0)
        return 0;
    return (size_t)((n_out + 15) / 16) * panel_bytes(type, n_in / 32);
}

/* Row r's element k of 32-block b as the packed layout holds it: its u,
 * or for MXFP4 its 4-bit E2M1 code (the kernel looks up u). */
static uint8_t element_u(const uint8_t *row, uint32_t type, int64_t b, int k)
{
    switch (type) {
    case BT_TYPE_Q8_0: return (uint8_t)(((const bt_block_q8_0_t *)row)[b].qs[k] ^ 0x80);
    case BT_TYPE_MXFP4: {
        const bt_block_mxfp4_t *m = (const bt_block_mxfp4_t *)row + b;
        return (uint8_t)(k < 16 ? m->qs[k] & 0xf : m->qs[k - 16] >> 4);
    }
    case BT_TYPE_Q5_0:
    case BT_TYPE_Q5_1: { /* the low nibble, and bit k of qh as 16 */
        const uint8_t *qs = type == BT_TYPE_Q5_1 ? ((const bt_block_q5_1_t *)row)[b].qs
                                                  : ((const bt_block_q5_0_t *)row)[b].qs;
        const uint8_t *qh = type == BT_TYPE_Q5_1 ? ((const bt_block_q5_1_t *)row)[b].qh
                                                  : ((const bt_block_q5_0_t *)row)[b].qh;
        const uint8_t lo = k < 16 ? qs[k] & 0xf : qs[k - 16] >> 4;
        return (uint8_t)(lo | ((qh[k / 8] >> (k % 8)) & 1) << 4);
    }
    case BT_TYPE_Q4_K: {
        const bt_block_q4_k_t *w = (const bt_block_q4_k_t *)row + b / 8;
        const int j = (int)(b % 8); /* sub-block: low nibbles of 32(j/2).. for even j */
        const uint8_t q = w->qs[32 * (j / 2) + k];
        return j % 2 ? q >> 4 : q & 0xf;
    }
    case BT_TYPE_Q5_K: { /* as Q4_K, and bit j of qh[k] as 16 */
        const bt_block_q5_k_t *w = (const bt_block_q5_k_t *)row + b / 8;
        const int j = (int)(b % 8);
        const uint8_t q = w->qs[32 * (j / 2) + k];
        return (uint8_t)((j % 2 ? q >> 4 : q & 0xf) | ((w->qh[k] >> j) & 1) << 4);
    }
    case BT_TYPE_Q6_K: {
        const bt_block_q6_k_t *w = (const bt_block_q6_k_t *)row + b / 8;
        const int h = (int)(b % 8) / 4, g = (int)(b % 4);
        const uint8_t l = w->ql[64 * h + 32 * (g & 1) + k];
        const uint8_t hb = (uint8_t)(w->qh[32 * h + k] >> (2 * g) & 3);
        return (uint8_t)((g >= 2 ? l >> 4 : l & 0xf) | hb << 4);
    }
    default: { /* Q4_0 and Q4_1: element k of the block */
        const uint8_t *qs = type == BT_TYPE_Q4_1 ? ((const bt_block_q4_1_t *)row)[b].qs
                                                  : ((const bt_block_q4_0_t *)row)[b].qs;
        return k < 16 ? qs[k] & 0xf : qs[k - 16] >> 4;
    }
    }
}

/* Q4_K and Q5_K blocks open alike: the super-block of 32-block b's d,
 * dmin and 12 bytes of 6-bit scales and mins. */
static void k_head(const uint8_t *row, uint32_t type, int64_t b, uint16_t *d, uint16_t *dmin,
                   const uint8_t **scales)
{
    if (type == BT_TYPE_Q4_K) {
        const bt_block_q4_k_t *k = (const bt_block_q4_k_t *)row + b / 8;
        *d = k->d, *dmin = k->dmin, *scales = k->scales;
    } else {
        const bt_block_q5_k_t *k = (const bt_block_q5_k_t *)row + b / 8;
        *d = k->d, *dmin = k->dmin, *scales = k->scales;
    }
}

/* Panel p of W (rows 16p .. 16p + 15, zero rows past n_out) to o. */
static void pack_panel(uint8_t *restrict o, const bt_matrix_t *w, int64_t p)
{
    const uint32_t type = w->type;
    const int64_t nb = w->n_in / 32;
    const int pb = packed_block_bytes(type), sb = packed_super_bytes(type);
    const bool nib = !packed_bytes_fmt(type);
    memset(o, 0, panel_bytes(type, nb));
    for (int r = 0; r < 16 && 16 * p + r < w->n_out; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)(16 * p + r) * w->row_bytes;
        uint8_t *ob = o;
        for (int64_t b = 0; b < nb; b++) {
            if (sb && b % 8 == 0) { /* the super-block's d (and dmin) */
                uint16_t *sd = (uint16_t *)ob;
                if (k_min_fmt(type)) {
                    const uint8_t *unused;
                    k_head(row, type, b, &sd[r], &sd[16 + r], &unused);
                } else {
                    sd[r] = ((const bt_block_q6_k_t *)row + b / 8)->d;
                }
                ob += sb;
            }
            for (int k = 0; k < 32; k++) {
                const uint8_t u = element_u(row, type, b, k);
                if (nib) { /* byte 4j + i of row r: elements 4j + i and 16 + 4j + i */
                    const int lane = 4 * r + k % 4, v = k % 16 / 4;
                    ob[64 * v + lane] |= (uint8_t)(k < 16 ? u & 0xf : (u & 0xf) << 4);
                    uint8_t *plane = ob + 4 * 64;
                    if (packed_plane(type) == 1 && (u & 0x10)) /* bit lane of mask v or 4 + v */
                        plane[8 * (v + (k < 16 ? 0 : 4)) + lane / 8] |= (uint8_t)(1u << lane % 8);
                    else if (packed_plane(type) == 2) /* bits 2v, 2v + 1 of byte lane */
                        plane[(k < 16 ? 0 : 64) + lane] |= (uint8_t)((u >> 4) << 2 * v);
                } else {
                    ob[64 * (k / 4) + 4 * r + k % 4] = u;
                }
            }
            uint8_t *sc = ob + packed_scales_at(type);
            switch (type) {
            case BT_TYPE_Q4_0: ((uint16_t *)sc)[r] = ((const bt_block_q4_0_t *)row)[b].d; break;
            case BT_TYPE_Q8_0: ((uint16_t *)sc)[r] = ((const bt_block_q8_0_t *)row)[b].d; break;
            case BT_TYPE_Q5_0: ((uint16_t *)sc)[r] = ((const bt_block_q5_0_t *)row)[b].d; break;
            case BT_TYPE_MXFP4: sc[r] = ((const bt_block_mxfp4_t *)row)[b].e; break;
            case BT_TYPE_Q5_1:
                ((uint16_t *)sc)[r] = ((const bt_block_q5_1_t *)row)[b].d;
                ((uint16_t *)sc)[16 + r] = ((const bt_block_q5_1_t *)row)[b].m;
                break;
            case BT_TYPE_Q4_1:
                ((uint16_t *)sc)[r] = ((const bt_block_q4_1_t *)row)[b].d;
                ((uint16_t *)sc)[16 + r] = ((const bt_block_q4_1_t *)row)[b].m;
                break;
            case BT_TYPE_Q4_K:
            case BT_TYPE_Q5_K: {
                int scale, min;
                uint16_t d, dmin;
                const uint8_t *scales;
                k_head(row, type, b, &d, &dmin, &scales);
                bt_k_scale_min(scales, (int)(b % 8), &scale, &min);
                sc[r] = (uint8_t)scale;
                sc[16 + r] = (uint8_t)min;
                break;
            }
            default: { /* Q6_K: the halves' scales */
                const bt_block_q6_k_t *k = (const bt_block_q6_k_t *)row + b / 8;
                const int h = (int)(b % 8) / 4, g = (int)(b % 4);
                sc[r] = (uint8_t)k->scales[8 * h + 2 * g];
                sc[16 + r] = (uint8_t)k->scales[8 * h + 2 * g + 1];
                break;
            }
            }
            ob += pb;
        }
    }
}

void bt_cpu_q8_pack(uint8_t *restrict dst, const bt_matrix_t *w)
{
    const size_t stride = panel_bytes(w->type, w->n_in / 32);
    for (int64_t p = 0; p < (w->n_out + 15) / 16; p++)
        pack_panel(dst + (size_t)p * stride, w, p);
}

/* -(sum * c) with the wrap of the integer lanes: a NaN activation block
 * (a model that overflowed) has garbage sums, whose product must not be
 * undefined. */
static inline int32_t neg_times(int32_t sum, int c)
{
    return (int32_t)(0u - (uint32_t)sum * (uint32_t)c);
}

/* MXFP4's u (twice the E2M1 value plus 12) by code. */
static const int8_t mxfp4_u[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

/* A 4-bit format's bytes u of groups j (lo) and j + 4 (hi) of a packed
 * block pw whose vector j is v: the nibbles, and the fifth bits or
 * Q6_K's bits 4 and 5 from their planes. */
static inline __attribute__((always_inline)) void
nib_values(const uint8_t *pw, v16i v, int j, uint32_t type, v16i *lo, v16i *hi)
{
    *lo = v16i_nib_lo(v);
    *hi = v16i_nib_hi(v);
    if (type == BT_TYPE_MXFP4) { /* E2M1 code -> u = 2 value + 12 */
        *lo = v16i_lut16(*lo, mxfp4_u);
        *hi = v16i_lut16(*hi, mxfp4_u);
    }
    if (packed_plane(type) == 1) { /* the fifth bits */
        *lo = v16i_add16_bits(*lo, pw + 4 * 64 + 8 * j);
        *hi = v16i_add16_bits(*hi, pw + 4 * 64 + 8 * (4 + j));
    } else if (type == BT_TYPE_Q6_K) { /* bits 4 and 5: bits 2j, 2j + 1 of the plane's bytes */
        *lo = v16i_or(*lo, v16i_bits45(v16i_load(pw + 4 * 64), j));
        *hi = v16i_or(*hi, v16i_bits45(v16i_load(pw + 5 * 64), j));
    }
}

#if BT_SIMD16_NEON && defined(__ARM_FEATURE_MATMUL_INT8)
#define Q8_MMLA 1
/* A block's integer sums for an even number T of tokens by the 8-bit
 * matrix multiplies (v16p), tokens in pairs, groups in pairs: s[t] and,
 * for Q6_K's second half, s2[t], the same integers as panel_q8's dot
 * products give (started the same way). */
static inline __attribute__((always_inline)) void
mmla_sums(v16i *s, v16i *s2, const uint8_t *pw, const int32_t *xb, const int T,
          const uint32_t type)
{
    const bool nib = !packed_bytes_fmt(type), q6k = type == BT_TYPE_Q6_K;
    v16p c[Q8_PANEL_TOKENS / 2], c2[Q8_PANEL_TOKENS / 2];
#pragma GCC unroll 4
    for (int p = 0; p < T / 2; p++) {
        c[p] = v16p_start(REC_START(xb, T, 0, 2 * p));
        if (q6k)
            c2[p] = v16p_start(REC_START(xb, T, 1, 2 * p));
    }
#pragma GCC unroll 4
    for (int j = 0; !nib && j < 8; j += 2) { /* Q8_0: u up to 255 */
        const v16w w = v16w_pairs(v16i_load(pw + 64 * j), v16i_load(pw + 64 * (j + 1)));
#pragma GCC unroll 4
        for (int p = 0; p < T / 2; p++)
            c[p] = v16p_mmla(c[p], w, REC_X(xb, T, j, 2 * p), REC_X(xb, T, j + 1, 2 * p));
    }
#pragma GCC unroll 4
    for (int j = 0; nib && j < 4; j += 2) {
        const v16i v0 = v16i_load(pw + 64 * j), v1 = v16i_load(pw + 64 * (j + 1));
        v16i lo0, hi0, lo1, hi1;
        nib_values(pw, v0, j, type, &lo0, &hi0);
        nib_values(pw, v1, j + 1, type, &lo1, &hi1);
        const v16w wl = v16w_pairs(lo0, lo1), wh = v16w_pairs(hi0, hi1);
#pragma GCC unroll 4
        for (int p = 0; p < T / 2; p++) {
            const int t = 2 * p;
            c[p] = v16p_mmla_small(c[p], wl, REC_X(xb, T, j, t), REC_X(xb, T, j + 1, t));
            if (q6k)
                c2[p] = v16p_mmla_small(c2[p], wh, REC_X(xb, T, j + 4, t),
                                        REC_X(xb, T, j + 5, t));
            else
                c[p] = v16p_mmla_small(c[p], wh, REC_X(xb, T, j + 4, t), REC_X(xb, T, j + 5, t));
        }
    }
#pragma GCC unroll 4
    for (int p = 0; p < T / 2; p++) {
        v16p_split(c[p], &s[2 * p], &s[2 * p + 1]);
        if (q6k)
            v16p_split(c2[p], &s2[2 * p], &s2[2 * p + 1]);
    }
}
#else
#define Q8_MMLA 0
#endif

/* One panel (16 rows) times T tokens: out[t * ldo + i] for i < nr, the
 * activations from xb[0 .. nb) (interleave_rows); the weights prefetched
 * as prefetch (PF_*) says, ahead bytes before they are loaded. */
static inline __attribute__((always_inline)) void
panel_q8(float *restrict out, size_t ldo, int nr, const uint8_t *pw, const int32_t *xb,
         int64_t nb, int prefetch, size_t ahead, const int T, const uint32_t type)
{
    const bool nib = !packed_bytes_fmt(type);
    const bool q6k = type == BT_TYPE_Q6_K;
    const int pb = packed_block_bytes(type), sb = packed_super_bytes(type), nv = nib ? 4 : 8;
    v16f acc[Q8_PANEL_TOKENS], dsup = v16f_zero(), msup = v16f_zero();
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
        acc[t] = v16f_zero();
    for (int64_t b = 0; b < nb; b++, pw += pb, xb += REC_WORDS(T)) {
        for (int o = 0; prefetch == PF_L1 && o < pb; o += 64)
            __builtin_prefetch(pw + ahead + o, 0, 3);
        for (int o = 0; prefetch == PF_L2 && o < pb; o += 64)
            __builtin_prefetch(pw + ahead + o, 0, 2);
        if (sb && b % 8 == 0) {
            dsup = v16f_load_f16(pw);
            if (k_min_fmt(type))
                msup = v16f_load_f16(pw + 32);
            pw += sb;
        }
        /* integer sums: per token one (two for Q6_K's halves), started at
         * - c * the sum of q_x they cover. With few tokens a block's dot
         * products would be one chain of dependent instructions, so they
         * go round CH chains, added at the end (integers: the same sum). */
#if BT_SIMD16_NEON /* four registers a sum already: 4 chains of 4 crowd NEON's 32 */
        const int CH = T == 1 ? 2 : 1;
#else
        const int CH = T == 1 ? 4 : T == 2 ? 2 : 1; /* a constant once inlined */
#endif
        v16i s[4][Q8_PANEL_TOKENS], s2[Q8_PANEL_TOKENS];
        const bool mmla = Q8_MMLA && T % 2 == 0; /* tokens in pairs: mmla_sums */
#if Q8_MMLA
        if (mmla)
            mmla_sums(s[0], s2, pw, xb, T, type);
#endif
#if BT_SIMD16_AVX2
        /* 4-bit u (Q4_0, Q4_1, Q4_K), 2 tokens or more: a block's
         * vpmaddubsw pair sums add up in 16 bits and are widened once
         * (v16i_pairs16), the same integers in fewer instructions (one
         * token kept its chains: 0.79-0.88x for Q4_0 on a Zen 3 this way) */
        const bool pairs16 =
            T > 1 && nib && type != BT_TYPE_MXFP4 && packed_plane(type) == 0 && !q6k;
        v16i p16[Q8_PANEL_TOKENS];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            p16[t] = v16i_set1(0);
#endif
#pragma GCC unroll 8
        for (int t = 0; t < T && !mmla; t++) {
#pragma GCC unroll 8
            for (int h = 1; h < CH; h++)
                s[h][t] = v16i_set1(0);
            s[0][t] = v16i_bcast4(REC_START(xb, T, 0, t));
            if (q6k)
                s2[t] = v16i_bcast4(REC_START(xb, T, 1, t));
        }
#pragma GCC unroll 8 /* constant chain indices: the sums stay in registers */
        for (int j = 0; j < nv && !mmla; j++) {
            const v16i v = v16i_load(pw + 64 * j);
            if (!nib) { /* Q8_0, the one byte format: u up to 255 */
                const int h = j % CH;
#if BT_SIMD16_AVX2
                const v16i w = v16i_signed8(v), aw = v16i_abs8(w);
#pragma GCC unroll 8
                for (int t = 0; t < T; t++)
                    s[h][t] = v16i_dot_signed(s[h][t], aw, w, v16i_bcast4(REC_X(xb, T, j, t)));
#else
#pragma GCC unroll 8
                for (int t = 0; t < T; t++)
                    s[h][t] = v16i_dot(s[h][t], v, v16i_bcast4(REC_X(xb, T, j, t)));
#endif
            } else {
                v16i lo, hi;
                nib_values(pw, v, j, type, &lo, &hi);
#if BT_SIMD16_AVX2
                if (pairs16) {
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        p16[t] = v16i_pairs16(p16[t], lo, v16i_bcast4(REC_X(xb, T, j, t)));
                        p16[t] = v16i_pairs16(p16[t], hi, v16i_bcast4(REC_X(xb, T, j + 4, t)));
                    }
                    continue;
                }
#endif
                /* Q6_K: the high nibbles (elements 16..31) are its second half */
                const int h0 = q6k ? j % CH : (2 * j) % CH, h1 = (2 * j + 1) % CH;
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    s[h0][t] = v16i_dot_small(s[h0][t], lo, v16i_bcast4(REC_X(xb, T, j, t)));
                    const v16i xh = v16i_bcast4(REC_X(xb, T, j + 4, t));
                    if (q6k)
                        s2[t] = v16i_dot_small(s2[t], hi, xh);
                    else
                        s[h1][t] = v16i_dot_small(s[h1][t], hi, xh);
                }
            }
        }
#if BT_SIMD16_AVX2
#pragma GCC unroll 8
        for (int t = 0; t < T && pairs16; t++)
            s[0][t] = v16i_pairs16_sum(s[0][t], p16[t]);
#endif
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
#pragma GCC unroll 8
            for (int h = 1; h < CH; h++)
                s[0][t] = v16i_add(s[0][t], s[h][t]);
        /* the rows' scales (and minimums) of this block, as wpair gives them */
        const uint8_t *sc = pw + packed_scales_at(type);
        v16f dw, dw2 = v16f_zero(), m = v16f_zero();
        if (k_min_fmt(type)) {
            dw = v16f_mul(dsup, v16f_from_u8(sc));
            m = v16f_sub(v16f_zero(), v16f_mul(msup, v16f_from_u8(sc + 16)));
        } else if (q6k) {
            dw = v16f_mul(dsup, v16f_from_i8(sc));
            dw2 = v16f_mul(dsup, v16f_from_i8(sc + 16));
        } else if (type == BT_TYPE_MXFP4) { /* 2^(e - 128), exact (2^-128 is subnormal) */
            dw = v16f_ldexp(v16f_set1(1.0f), v16f_sub(v16f_from_u8(sc), v16f_set1(128.0f)));
        } else {
            dw = v16f_load_f16(sc);
            if (has_min(type))
                m = v16f_load_f16(sc + 32);
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const v16f dx = v16f_set1(*REC_DX(xb, T, t));
            acc[t] = v16f_fma(v16f_from_i32(s[0][t]), v16f_mul(dw, dx), acc[t]);
            if (q6k)
                acc[t] = v16f_fma(v16f_from_i32(s2[t]), v16f_mul(dw2, dx), acc[t]);
            if (has_min(type))
                acc[t] = v16f_fma(v16f_set1(*REC_ISUM(xb, T, t)), v16f_mul(m, dx), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
        v16f_store_n(out + (size_t)t * ldo, acc[t], nr);
}

/* Tokens [t0, t0 + nt) (nt <= Q8_PANEL_TOKENS) of xq as nb records of
 * REC_WORDS(nt) words. */
static void interleave_rows(int32_t *restrict o, q8_rows_t xq, int t0, int nt, int64_t n_in,
                            uint32_t type)
{
    const int64_t nb = n_in / 32;
    const int c = start_c(type);
    for (int64_t b = 0; b < nb; b++, o += REC_WORDS(nt))
        for (int t = 0; t < nt; t++) {
            const size_t xb = (size_t)(t0 + t) * nb + b;
            for (int g = 0; g < 8; g++)
                memcpy(REC_X(o, nt, g, t), xq.q + (size_t)(t0 + t) * n_in + 32 * b + 4 * g, 4);
            const bool q6k = type == BT_TYPE_Q6_K;
            *REC_START(o, nt, 0, t) = neg_times(q6k ? xq.isum16[2 * xb] : xq.isum[xb], c);
            *REC_START(o, nt, 1, t) = q6k ? neg_times(xq.isum16[2 * xb + 1], c) : 0;
            const float dx = xq.d[xb], isum = (float)xq.isum[xb];
            memcpy(o + 10 * nt + t, &dx, sizeof dx);
            memcpy(o + 11 * nt + t, &isum, sizeof isum);
        }
}

typedef void (*panel_fn)(float *restrict, size_t, int, const uint8_t *, const int32_t *,
                         int64_t, int, size_t);

#define PANEL(ty, T)                                                                           \
    static void pn_##ty##_##T(float *restrict o, size_t ldo, int nr, const uint8_t *pw,         \
                              const int32_t *x, int64_t nb, int pf, size_t ahead)               \
    {                                                                                           \
        panel_q8(o, ldo, nr, pw, x, nb, pf, ahead, T, BT_TYPE_##ty);                            \
    }
#ifdef BT_SIMD16_AVX512
#define PANELS(ty)                                                                             \
    PANEL(ty, 1) PANEL(ty, 2) PANEL(ty, 3) PANEL(ty, 4) PANEL(ty, 5) PANEL(ty, 6)               \
    PANEL(ty, 7) PANEL(ty, 8)
#define PANEL_ROW(ty)                                                                          \
    {pn_##ty##_1, pn_##ty##_2, pn_##ty##_3, pn_##ty##_4, pn_##ty##_5, pn_##ty##_6,             \
     pn_##ty##_7, pn_##ty##_8}
#else
#define PANELS(ty) PANEL(ty, 1) PANEL(ty, 2) PANEL(ty, 3) PANEL(ty, 4)
#define PANEL_ROW(ty) {pn_##ty##_1, pn_##ty##_2, pn_##ty##_3, pn_##ty##_4}
#endif
PANELS(Q4_0)
PANELS(Q4_1)
PANELS(Q5_0)
PANELS(Q5_1)
PANELS(Q8_0)
PANELS(MXFP4)
PANELS(Q4_K)
PANELS(Q5_K)
PANELS(Q6_K)

static const panel_fn *panels_for(uint32_t type)
{
    static const panel_fn q4_0[] = PANEL_ROW(Q4_0), q4_1[] = PANEL_ROW(Q4_1),
                          q5_0[] = PANEL_ROW(Q5_0), q5_1[] = PANEL_ROW(Q5_1),
                          q8_0[] = PANEL_ROW(Q8_0), q4_k[] = PANEL_ROW(Q4_K),
                          q5_k[] = PANEL_ROW(Q5_K), q6_k[] = PANEL_ROW(Q6_K),
                          mxfp4[] = PANEL_ROW(MXFP4);
    switch (type) {
    case BT_TYPE_Q4_0: return q4_0;
    case BT_TYPE_Q4_1: return q4_1;
    case BT_TYPE_Q5_0: return q5_0;
    case BT_TYPE_Q5_1: return q5_1;
    case BT_TYPE_MXFP4: return mxfp4;
    case BT_TYPE_Q4_K: return q4_k;
    case BT_TYPE_Q5_K: return q5_k;
    case BT_TYPE_Q6_K: return q6_k;
    default: return q8_0;
    }
}

/* Each thread takes a contiguous share of the rows (panels of 16 when
 * packed, groups of 4 otherwise) and, for each chunk of Q8_TOKENS tokens,
 * quantizes the chunk into its own scratch (repeating n_tok * n_in work
 * per thread, nothing next to the product's n_tok * n_in * n_out), then
 * multiplies its rows with it. */
/* Whether W goes through packed panels of 16 rows (else groups of 4 rows
 * read directly), and so how many groups of rows it has. */
static bool q8_panel(const bt_matrix_t *w)
{
#ifdef BT_SIMD16_AVX512
    /* else the direct path, for the formats that have one (block pairs) */
    return w->packed != NULL || type_index(w->type) < 0 || w->n_in % 64 != 0;
#else
    (void)w;
    return true; /* unpacked weights: packed here, a panel at a time */
#endif
}

static int64_t q8_groups(const bt_matrix_t *w)
{
    const int rows_per = q8_panel(w) ? 16 : 4;
    return (w->n_out + rows_per - 1) / rows_per;
}

/* Groups [g0, g1) of W's rows for all n_tok tokens, on thread me;
 * have_x: thread me's scratch already holds x, one chunk, quantized for
 * W's type and width (q8_same_x). */
static void q8_rows(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                    int n_tok, const bt_scratch_t *s, int me, int64_t g0, int64_t g1,
                    bool have_x)
{
    const int64_t n_in = w->n_in, n_out = w->n_out, nb = n_in / 32;
    const bool panel = q8_panel(w);
    const int rows_per = panel ? 16 : 4;
    const panel_fn *panels = panel ? panels_for(w->type) : NULL;
    const size_t pstride = panel ? panel_bytes(w->type, nb) : 0;
    /* products of more tokens keep the prefetches: pp512 was 3% slower
     * without them on the Zen 4 too */
    const int prefetch = n_tok > 1                ? PF_L1
                       : !bt_weight_prefetch()    ? PF_NONE
                       : bt_weight_prefetch_l2() ? PF_L2
                                                 : PF_L1;
    const size_t ahead = bt_weight_prefetch_bytes();
    {
        /* scratch: the quantized chunk, Q8_TOKENS x (n_in + 16 n_in / 32)
         * bytes; room for one packed panel; the chunk's records for the
         * panels, Q8_TOKENS x 1.5 n_in bytes (64-byte aligned) */
        int8_t *q = (int8_t *)(s->buf + (size_t)me * s->per_thread);
        float *d = (float *)(q + (size_t)Q8_TOKENS * n_in);
        int32_t *isum = (int32_t *)(d + (size_t)Q8_TOKENS * nb);
        int32_t *isum16 = isum + (size_t)Q8_TOKENS * nb;
        uint8_t *own = (uint8_t *)(isum16 + (size_t)Q8_TOKENS * 2 * nb); /* a packed panel */
        int32_t *recs = (int32_t *)(((uintptr_t)(own + pstride) + 63) & ~(uintptr_t)63);
        for (int t0 = 0; t0 < n_tok; t0 += Q8_TOKENS) {
            const int nt = n_tok - t0 < Q8_TOKENS ? n_tok - t0 : Q8_TOKENS;
            const bool fresh = !have_x;
            if (fresh)
                quantize_rows(q, d, isum, isum16, x + (size_t)t0 * n_in, nt, n_in,
                              !has_min(w->type) && w->type != BT_TYPE_Q6_K);
            const q8_rows_t xq = {q, d, isum, isum16};
            for (int t = 0; fresh && panel && t < nt; t += Q8_PANEL_TOKENS)
                interleave_rows(recs + (size_t)REC_WORDS(t) * nb, xq, t,
                                nt - t < Q8_PANEL_TOKENS ? nt - t : Q8_PANEL_TOKENS, n_in,
                                w->type);
            for (int64_t g = g0; g < g1; g++) {
                const int64_t r0 = rows_per * g;
                const int nr = n_out - r0 < rows_per ? (int)(n_out - r0) : rows_per;
                float *o = out + (size_t)t0 * n_out + r0;
                if (panel) {
                    const uint8_t *pw = own; /* no arithmetic on a NULL packed */
                    if (w->packed != NULL)
                        pw = (const uint8_t *)w->packed + (size_t)g * pstride;
                    else
                        pack_panel(own, w, g);
                    for (int t = 0; t < nt; t += Q8_PANEL_TOKENS) {
                        const int tt = nt - t < Q8_PANEL_TOKENS ? nt - t : Q8_PANEL_TOKENS;
                        panels[tt - 1](o + (size_t)t * n_out, (size_t)n_out, nr, pw,
                                       recs + (size_t)REC_WORDS(t) * nb, nb, prefetch, ahead);
                    }
                    continue;
                }
#ifdef BT_SIMD16_AVX512
                const size_t rb = w->row_bytes;
                const tile_q8_fn(*tiles)[4] = tiles_q8[type_index(w->type)];
                const uint8_t *wr = (const uint8_t *)w->data + (size_t)r0 * rb;
                for (int t = 0; t < nt; t += 4) {
                    const int tt = nt - t < 4 ? nt - t : 4;
                    const q8_rows_t xt = {q + (size_t)t * n_in, d + (size_t)t * nb,
                                          isum + (size_t)t * nb, isum16 + (size_t)t * 2 * nb};
                    float *ot = o + (size_t)t * n_out;
                    if (nr == 4)
                        tiles[1][tt - 1](ot, (size_t)n_out, wr, rb, xt, n_in);
                    else
                        for (int r = 0; r < nr; r++)
                            tiles[0][tt - 1](ot + r, (size_t)n_out, wr + (size_t)r * rb, rb, xt,
                                             n_in);
                }
#endif
            }
        }
    }
}

/* Each thread takes a contiguous share of the groups. */
static void q8_share(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                     int n_tok, const bt_scratch_t *s, int me, int nth)
{
    const int64_t n_groups = q8_groups(w);
    q8_rows(out, w, x, n_tok, s, me, n_groups * me / nth, n_groups * (me + 1) / nth, false);
}

/* A one-thread product skips the OpenMP region: even an inactive one costs
 * about a microsecond, a quarter of a small decode product's time. */
void bt_cpu_matmul_q8(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                      int n_tok, const bt_scratch_t *s)
{
    const int team = bt_team_size(s, (double)n_tok * (double)w->n_in * (double)w->n_out, 0.0);
    if (team == 1) {
        q8_share(out, w, x, n_tok, s, 0, 1);
        return;
    }
#pragma omp parallel num_threads(team)
    q8_share(out, w, x, n_tok, s, omp_get_thread_num(), omp_get_num_threads());
}

/* What one group of W's rows costs: its weights read once, its
 * multiply-adds per token (a weight byte read weighs about as much as
 * four tokens' multiply-adds on it in a decode-sized product). */
static double q8_group_cost(const bt_matmul_job_t *j)
{
    return (double)j->w.n_in * (double)(j->n_tok + 4);
}

/* Whether job b's activations, quantized for job a, serve b as they are:
 * one chunk of the same tokens (the same floats, at the same address or
 * not: a mixture's experts each get their own copy of a decode row) for
 * the same type, width and path. */
static bool q8_same_x(const bt_matmul_job_t *a, const bt_matmul_job_t *b)
{
    return a->n_tok == b->n_tok && b->n_tok <= Q8_TOKENS && a->w.type == b->w.type &&
           a->w.n_in == b->w.n_in && q8_panel(&a->w) == q8_panel(&b->w) &&
           (a->x == b->x ||
            memcmp(a->x, b->x, (size_t)b->n_tok * (size_t)b->w.n_in * sizeof(float)) == 0);
}

/* Thread me of nth takes the groups whose cost begins in its share
 * [me, me + 1) / nth of the whole; a product split between threads is
 * quantized by each (a few rows: nothing next to the weights). A thread
 * does not quantize again what its previous product already did: q, k
 * and v share their input, gate and up theirs, and every expert a decode
 * row chose gets a copy of that row (15 of a qwen3moe layer's 24
 * quantizations on one thread). */
static void q8_many_share(const bt_matmul_job_t *jobs, int n_jobs, const bt_scratch_t *s,
                          double total, int me, int nth)
{
    const double lo = total * me / nth, hi = total * (me + 1) / nth;
    const bt_matmul_job_t *prev = NULL; /* the last job this thread ran */
    double base = 0.0;
    for (int i = 0; i < n_jobs && base < hi; i++) {
        const bt_matmul_job_t *j = &jobs[i];
        const int64_t ng = q8_groups(&j->w);
        const double gc = q8_group_cost(j);
        /* group g begins at base + g gc: take those in [lo, hi) */
        int64_t g0 = lo <= base ? 0 : (int64_t)ceil((lo - base) / gc);
        int64_t g1 = (int64_t)ceil((hi - base) / gc);
        g0 = g0 < ng ? g0 : ng;
        g1 = me == nth - 1 || g1 > ng ? ng : g1;
        if (g0 < g1) {
            q8_rows(j->out, &j->w, j->x, j->n_tok, s, me, g0, g1,
                    prev != NULL && q8_same_x(prev, j));
            prev = j;
        }
        base += (double)ng * gc;
    }
}

void bt_cpu_matmul_q8_many(const bt_matmul_job_t *jobs, int n_jobs, const bt_scratch_t *s)
{
    double total = 0.0, work = 0.0;
    for (int i = 0; i < n_jobs; i++) {
        total += (double)q8_groups(&jobs[i].w) * q8_group_cost(&jobs[i]);
        work += (double)jobs[i].n_tok * (double)jobs[i].w.n_in * (double)jobs[i].w.n_out;
    }
    const int team = bt_team_size(s, work, 0.0);
    if (team == 1) {
        q8_many_share(jobs, n_jobs, s, total, 0, 1);
        return;
    }
#pragma omp parallel num_threads(team)
    q8_many_share(jobs, n_jobs, s, total, omp_get_thread_num(), omp_get_num_threads());
}

#endif /* BT_SIMD16 */
