/*
 * cpu_q8.c: matmul of the quantized formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q4_K, Q5_K, Q6_K) against activations quantized to 8 bits, with AVX-512
 * VNNI integer dot products. This is how llama.cpp's CPU backend computes
 * these formats (it quantizes the activations per 256 for the K formats;
 * here always per 32); it is bt_ops_cpu's path for them where the CPU has
 * VNNI, while bt_ops_exact keeps f32 activations.
 *
 * Activations: each token's row is cut into blocks of 32, each stored as
 * int8 q = round(x / d) with d = max|x| / 127 (q = 0 where the block is
 * all zero). Every element of a block then carries an error of at most
 * d / 2, so |y - y_exact| <= sum over blocks of d / 2 * sum |w|, which is
 * what the tests hold this path to.
 *
 * Weights, as unsigned bytes u = q + c where the format's value is
 * d_w * (u - c) (+ m for the formats with a minimum): c = 8 (Q4_0), 16
 * (Q5_0), 32 (Q6_K), 128 (Q8_0, whose signed q is flipped to q + 128), 0
 * (Q4_1, Q5_1, Q4_K, Q5_K). d_w and m are per 32 elements (a K format's
 * sub-block step and minimum), per 16 for Q6_K. For a block,
 *   y += d_w * d_x * (sum u * q_x - c * sum q_x) + m * d_x * sum q_x.
 * vpdpbusd sums 4 products per 32-bit lane; a 512-bit vector holds two
 * blocks, 8 lanes each. The integer part is exact; the float part is one
 * fixed sequence per (row, token) over the blocks in order, then a fixed
 * horizontal sum, whichever tile, thread or batch size computes it, so
 * invariant 1 holds (and one token gives the bits a batch gives).
 */
#include <stdbool.h>
#include <string.h>

#include <omp.h>

#include "cpu_internal.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__F16C__)
#include <immintrin.h>

/* Tokens quantized at once (per thread): with the block scales that is
 * 36 bytes per column, inside the scratch BT_MATMUL_ROWS floats per column
 * give. */
#define Q8_TOKENS 32

typedef struct {
    const int8_t *q; /* [Q8_TOKENS][n_in] */
    const float *d;  /* [Q8_TOKENS][n_in / 32] */
} q8_rows_t;

static void quantize_rows(int8_t *restrict q, float *restrict d, const float *restrict x,
                          int n_tok, int64_t n_in)
{
    const int64_t nb = n_in / 32;
    for (int t = 0; t < n_tok; t++)
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + (size_t)t * n_in + 32 * b;
            const __m512 lo = _mm512_loadu_ps(xb), hi = _mm512_loadu_ps(xb + 16);
            const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo),
                                                                  _mm512_abs_ps(hi)));
            const float db = amax / 127.0f;
            const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
            /* round to nearest (even): |x * inv| <= 127 */
            const __m512i qlo = _mm512_cvtps_epi32(_mm512_mul_ps(lo, inv));
            const __m512i qhi = _mm512_cvtps_epi32(_mm512_mul_ps(hi, inv));
            int8_t *qb = q + (size_t)t * n_in + 32 * b;
            _mm_storeu_si128((__m128i *)qb, _mm512_cvtsepi32_epi8(qlo));
            _mm_storeu_si128((__m128i *)(qb + 16), _mm512_cvtsepi32_epi8(qhi));
            d[(size_t)t * nb + b] = db;
        }
}

/* Two floats, each in 8 consecutive lanes: the scales of blocks b, b + 1. */
static inline __m512 pair(float a, float b)
{
    return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
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
static inline void k_pair(__m512 *d, __m512 *m, uint16_t hd, uint16_t hdmin,
                          const uint8_t *scales, int j)
{
    const float dd = _cvtsh_ss(hd), dm = _cvtsh_ss(hdmin);
    int s0, m0, s1, m1;
    bt_k_scale_min(scales, j, &s0, &m0);
    bt_k_scale_min(scales, j + 1, &s1, &m1);
    *d = pair(dd * (float)s0, dd * (float)s1);
    *m = pair(-(dm * (float)m0), -(dm * (float)m1));
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
 * from ql (high nibbles for groups 2, 3) | 2 bits of qh << 4; the 4 scales
 * of their 16-element sub-blocks, each over 4 lanes. */
static inline void q6k_pair(const bt_block_q6_k_t *w, int h, int g, __m512i *u, __m512 *d)
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
    *u = _mm512_inserti64x4(_mm512_castsi256_si512(q[0]), q[1], 1);
    int32_t sc4;
    memcpy(&sc4, w->scales + 8 * h + 2 * g, 4);
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_cvtsi32_si128(sc4));
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    *d = _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(w->d)),
                       _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(spread, sc)));
}

/* Blocks b and b + 1 of a weight row: unsigned bytes, scales, minimums. */
typedef struct {
    __m512i u;
    __m512 d, m;
} wpair_t;

static inline __attribute__((always_inline)) wpair_t wpair(const uint8_t *row, int64_t b,
                                                          const uint32_t type)
{
    wpair_t p;
    switch (type) {
    case BT_TYPE_Q4_0: {
        const bt_block_q4_0_t *w = (const bt_block_q4_0_t *)row + b;
        p.u = nibbles2(w[0].qs, w[1].qs);
        p.d = pair(_cvtsh_ss(w[0].d), _cvtsh_ss(w[1].d));
        break;
    }
    case BT_TYPE_Q4_1: {
        const bt_block_q4_1_t *w = (const bt_block_q4_1_t *)row + b;
        p.u = nibbles2(w[0].qs, w[1].qs);
        p.d = pair(_cvtsh_ss(w[0].d), _cvtsh_ss(w[1].d));
        p.m = pair(_cvtsh_ss(w[0].m), _cvtsh_ss(w[1].m));
        break;
    }
    case BT_TYPE_Q5_0: {
        const bt_block_q5_0_t *w = (const bt_block_q5_0_t *)row + b;
        p.u = _mm512_or_si512(nibbles2(w[0].qs, w[1].qs), q5_high(w[0].qh, w[1].qh));
        p.d = pair(_cvtsh_ss(w[0].d), _cvtsh_ss(w[1].d));
        break;
    }
    case BT_TYPE_Q5_1: {
        const bt_block_q5_1_t *w = (const bt_block_q5_1_t *)row + b;
        p.u = _mm512_or_si512(nibbles2(w[0].qs, w[1].qs), q5_high(w[0].qh, w[1].qh));
        p.d = pair(_cvtsh_ss(w[0].d), _cvtsh_ss(w[1].d));
        p.m = pair(_cvtsh_ss(w[0].m), _cvtsh_ss(w[1].m));
        break;
    }
    case BT_TYPE_Q4_K: {
        const bt_block_q4_k_t *w = (const bt_block_q4_k_t *)row + b / 8;
        const int c = (int)(b % 8) / 2;
        p.u = nibbles_k(w->qs + 32 * c);
        k_pair(&p.d, &p.m, w->d, w->dmin, w->scales, 2 * c);
        break;
    }
    case BT_TYPE_Q5_K: {
        const bt_block_q5_k_t *w = (const bt_block_q5_k_t *)row + b / 8;
        const int c = (int)(b % 8) / 2;
        p.u = _mm512_or_si512(nibbles_k(w->qs + 32 * c), high_k(w->qh, 2 * c));
        k_pair(&p.d, &p.m, w->d, w->dmin, w->scales, 2 * c);
        break;
    }
    case BT_TYPE_Q6_K: {
        const bt_block_q6_k_t *w = (const bt_block_q6_k_t *)row + b / 8;
        q6k_pair(w, (int)(b % 8) / 4, (int)(b % 4), &p.u, &p.d);
        break;
    }
    default: { /* Q8_0 */
        const bt_block_q8_0_t *w = (const bt_block_q8_0_t *)row + b;
        const __m512i q = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)w[0].qs)),
            _mm256_loadu_si256((const __m256i *)w[1].qs), 1);
        p.u = _mm512_xor_si512(q, _mm512_set1_epi8((char)0x80));
        p.d = pair(_cvtsh_ss(w[0].d), _cvtsh_ss(w[1].d));
        break;
    }
    }
    return p;
}

static inline int offset_shift(const uint32_t type)
{
    return type == BT_TYPE_Q4_0 ? 3 : type == BT_TYPE_Q5_0 ? 4 : type == BT_TYPE_Q6_K ? 5
         : type == BT_TYPE_Q8_0 ? 7 : -1;
}

static inline bool has_min(const uint32_t type)
{
    return type == BT_TYPE_Q4_1 || type == BT_TYPE_Q5_1 || type == BT_TYPE_Q4_K ||
           type == BT_TYPE_Q5_K;
}

/* A weight row unpacked for the GEMM: per step of 64 elements the bytes
 * u, the scale vector d and (formats with a minimum) m, as wpair gives
 * them. A row group is unpacked once per chunk of tokens instead of once
 * per 4 tokens. */
typedef struct {
    __m512i u;
    __m512 d, m;
} wstep_t;

/* out[t * ldo + r] for R rows and T tokens of xq, over nb 32-blocks (nb
 * even). Rows come from the weights (row_bytes apart) or, unpacked, from
 * wstep_t arrays of nb / 2 steps each; both give the same u, d, m and then
 * the same operations, so the same bits. R, T, type and unpacked are
 * constants after inlining. */
static inline __attribute__((always_inline)) void
tile_q8(float *restrict out, size_t ldo, const uint8_t *w, size_t row_bytes, q8_rows_t xq,
        int64_t n_in, const int R, const int T, const uint32_t type, const bool unpacked)
{
    const int64_t nb = n_in / 32;
    const int sh = offset_shift(type);
    const __m512i ones = _mm512_set1_epi8(1);
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm512_setzero_ps();
    /* the row group two ahead, a slice per block (as the exact GEMV does:
     * interleaved row streams outrun the hardware prefetcher) */
    const char *ahead = (const char *)w + 8 * row_bytes;
    const size_t slice = (4 * row_bytes + (size_t)nb - 1) / (size_t)nb;
    for (int64_t b = 0; b < nb; b += 2) {
        if (!unpacked)
            for (size_t o = 0; o < 2 * slice; o += 64)
                _mm_prefetch(ahead + (size_t)b * slice + o, _MM_HINT_T0);
        __m512i xv[4], base[4];
        __m512 dx[4], sx[4];
        for (int t = 0; t < T; t++) {
            xv[t] = _mm512_loadu_si512(xq.q + (size_t)t * n_in + 32 * b);
            const float *d = xq.d + (size_t)t * nb + b;
            dx[t] = pair(d[0], d[1]);
            /* lane sums of q_x: - c * them starts the integer dot product,
             * or (for the formats with a minimum) they carry m */
            const __m512i lanes = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xv[t]);
            if (sh >= 0)
                base[t] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(lanes, sh));
            else
                sx[t] = _mm512_cvtepi32_ps(lanes);
        }
        for (int r = 0; r < R; r++) {
            wpair_t wp;
            if (unpacked) {
                const wstep_t *ws = (const wstep_t *)w + (size_t)r * (size_t)(nb / 2) + b / 2;
                wp.u = ws->u;
                wp.d = ws->d;
                wp.m = ws->m;
            } else {
                wp = wpair(w + (size_t)r * row_bytes, b, type);
            }
            for (int t = 0; t < T; t++) {
                const __m512i s = _mm512_dpbusd_epi32(sh >= 0 ? base[t] : _mm512_setzero_si512(),
                                                      wp.u, xv[t]);
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wp.d, dx[t]),
                                            acc[r][t]);
                if (has_min(type))
                    acc[r][t] = _mm512_fmadd_ps(sx[t], _mm512_mul_ps(wp.m, dx[t]), acc[r][t]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            out[t * ldo + r] = _mm512_reduce_add_ps(acc[r][t]);
}

typedef void (*tile_q8_fn)(float *restrict, size_t, const uint8_t *, size_t, q8_rows_t, int64_t);
typedef void (*unpack_fn)(wstep_t *restrict, const uint8_t *, size_t, int, int64_t);

/* Per type: the GEMV tiles straight from the weights (4 rows or 1, one
 * token), the GEMM tiles from unpacked rows (4 rows or 1, 1-4 tokens) and
 * the unpacking of nr rows. */
#define TILE_Q8(ty, R, T, U, name)                                                                 static void name##_##ty##_##R##_##T(float *restrict o, size_t ldo, const uint8_t *w,                                                size_t rb, q8_rows_t x, int64_t n)                          {                                                                                                   tile_q8(o, ldo, w, rb, x, n, R, T, BT_TYPE_##ty, U);                                        }
#define TILE_U8_ROW(ty, R)                                                                         TILE_Q8(ty, R, 1, true, tu) TILE_Q8(ty, R, 2, true, tu) TILE_Q8(ty, R, 3, true, tu)             TILE_Q8(ty, R, 4, true, tu)
#define TILE_Q8_TYPE(ty)                                                                           TILE_Q8(ty, 1, 1, false, tq) TILE_Q8(ty, 4, 1, false, tq) TILE_U8_ROW(ty, 1)                    TILE_U8_ROW(ty, 4)                                                                              static void unpack_##ty(wstep_t *restrict ws, const uint8_t *w, size_t rb, int nr,                                      int64_t nb)                                                             {                                                                                                   for (int r = 0; r < nr; r++)                                                                        for (int64_t b = 0; b < nb; b += 2, ws++) {                                                         const wpair_t p = wpair(w + (size_t)r * rb, b, BT_TYPE_##ty);                                   ws->u = p.u;                                                                                    ws->d = p.d;                                                                                    ws->m = has_min(BT_TYPE_##ty) ? p.m : _mm512_setzero_ps();                                  }                                                                                       }
TILE_Q8_TYPE(Q4_0)
TILE_Q8_TYPE(Q4_1)
TILE_Q8_TYPE(Q5_0)
TILE_Q8_TYPE(Q5_1)
TILE_Q8_TYPE(Q8_0)
TILE_Q8_TYPE(Q4_K)
TILE_Q8_TYPE(Q5_K)
TILE_Q8_TYPE(Q6_K)

typedef struct {
    tile_q8_fn gemv[2];    /* [1 row, 4 rows] */
    tile_q8_fn gemm[2][4]; /* [1 row, 4 rows][tokens - 1] */
    unpack_fn unpack;
} q8_kernels_t;

#define KERNELS_Q8(ty)                                                                             {{tq_##ty##_1_1, tq_##ty##_4_1},                                                                 {{tu_##ty##_1_1, tu_##ty##_1_2, tu_##ty##_1_3, tu_##ty##_1_4},                                   {tu_##ty##_4_1, tu_##ty##_4_2, tu_##ty##_4_3, tu_##ty##_4_4}},                                 unpack_##ty}
static const q8_kernels_t kernels_q8[8] = {
    KERNELS_Q8(Q4_0), KERNELS_Q8(Q4_1), KERNELS_Q8(Q5_0), KERNELS_Q8(Q5_1),
    KERNELS_Q8(Q8_0), KERNELS_Q8(Q4_K), KERNELS_Q8(Q5_K), KERNELS_Q8(Q6_K),
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

bool bt_cpu_q8_supports(uint32_t type, int64_t n_in)
{
    return type_index(type) >= 0 && n_in % 64 == 0; /* K rows: always whole 256-blocks */
}

/* Each thread takes a contiguous share of the rows (in groups of 4) and,
 * for each chunk of Q8_TOKENS tokens, quantizes the chunk into its own
 * scratch (repeating n_tok * n_in work per thread, nothing next to the
 * product's n_tok * n_in * n_out), then per row group: one token reads the
 * weights directly; more unpack the group once and run 4 x 4 tiles. */
void bt_cpu_matmul_q8(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                      int n_tok, const bt_scratch_t *s)
{
    const int64_t n_in = w->n_in, n_out = w->n_out, nb = n_in / 32;
    const q8_kernels_t *k = &kernels_q8[type_index(w->type)];
    const int64_t n_groups = (n_out + 3) / 4;
    const size_t rb = w->row_bytes;
    const int team = bt_team_size(s, (double)n_tok * (double)n_in * (double)n_out);
#pragma omp parallel num_threads(team) if (team > 1)
    {
        const int nth = omp_get_num_threads(), me = omp_get_thread_num();
        const int64_t g0 = n_groups * me / nth, g1 = n_groups * (me + 1) / nth;
        /* scratch: 64-aligned unpacked rows (4 x nb / 2 steps of 192 bytes),
         * then the quantized chunk (Q8_TOKENS x n_in bytes, then scales):
         * 48 n_in + 64 bytes, inside the 16 n_in floats the scratch has */
        uint8_t *base = (uint8_t *)(s->buf + (size_t)me * s->per_thread);
        wstep_t *ws = (wstep_t *)(base + (-(uintptr_t)base & 63));
        int8_t *q = (int8_t *)(ws + 4 * (nb / 2));
        float *d = (float *)(q + (size_t)Q8_TOKENS * n_in);
        for (int t0 = 0; t0 < n_tok; t0 += Q8_TOKENS) {
            const int nt = n_tok - t0 < Q8_TOKENS ? n_tok - t0 : Q8_TOKENS;
            quantize_rows(q, d, x + (size_t)t0 * n_in, nt, n_in);
            for (int64_t g = g0; g < g1; g++) {
                const int64_t r0 = 4 * g;
                const int nr = n_out - r0 < 4 ? (int)(n_out - r0) : 4;
                const uint8_t *wr = (const uint8_t *)w->data + (size_t)r0 * rb;
                float *o = out + (size_t)t0 * n_out + r0;
                const q8_rows_t x0 = {q, d};
                if (nt == 1) {
                    if (nr == 4)
                        k->gemv[1](o, (size_t)n_out, wr, rb, x0, n_in);
                    else
                        for (int r = 0; r < nr; r++)
                            k->gemv[0](o + r, (size_t)n_out, wr + (size_t)r * rb, rb, x0, n_in);
                    continue;
                }
                k->unpack(ws, wr, rb, nr, nb);
                for (int t = 0; t < nt; t += 4) {
                    const int tt = nt - t < 4 ? nt - t : 4;
                    const q8_rows_t xt = {q + (size_t)t * n_in, d + (size_t)t * nb};
                    float *ot = o + (size_t)t * n_out;
                    if (nr == 4)
                        k->gemm[1][tt - 1](ot, (size_t)n_out, (const uint8_t *)ws, 0, xt, n_in);
                    else
                        for (int r = 0; r < nr; r++)
                            k->gemm[0][tt - 1](ot + r, (size_t)n_out,
                                               (const uint8_t *)(ws + (size_t)r * (nb / 2)), 0,
                                               xt, n_in);
                }
            }
        }
    }
}

#else

bool bt_cpu_q8_supports(uint32_t type, int64_t n_in)
{
    (void)type;
    (void)n_in;
    return false;
}

void bt_cpu_matmul_q8(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                      int n_tok, const bt_scratch_t *s)
{
    (void)out, (void)w, (void)x, (void)n_tok, (void)s;
}

#endif
