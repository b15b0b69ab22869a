/*
 * cpu_q8.c: matmul of the 32-element block formats (Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0) against activations quantized to 8 bits, with AVX-512 VNNI
 * integer dot products. This is what llama.cpp's CPU backend computes for
 * these formats; it is bt_ops_cpu's path for them where the CPU has VNNI,
 * while bt_ops_exact keeps f32 activations.
 *
 * Activations: each token's row is cut into blocks of 32, each stored as
 * int8 q = round(x / d) with d = max|x| / 127 (q = 0 where the block is
 * all zero). Every element of a block then carries an error of at most
 * d / 2, so |y - y_exact| <= sum over blocks of d / 2 * sum |w|, which is
 * what the tests hold this path to.
 *
 * Weights, as unsigned bytes u = q + c where the format's value is
 * d_w * (u - c) (+ m for Q4_1/Q5_1): c = 8 (Q4_0), 16 (Q5_0), 128 (Q8_0,
 * whose signed q is flipped to q + 128), 0 (Q4_1, Q5_1). For a block,
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
    return type == BT_TYPE_Q4_0 ? 3 : type == BT_TYPE_Q5_0 ? 4 : type == BT_TYPE_Q8_0 ? 7 : -1;
}

static inline bool has_min(const uint32_t type)
{
    return type == BT_TYPE_Q4_1 || type == BT_TYPE_Q5_1;
}

/* out[t * ldo + r] for R rows (rows row_bytes apart) and T tokens of xq,
 * over nb blocks (nb even). R, T and type are constants after inlining. */
static inline __attribute__((always_inline)) void
tile_q8(float *restrict out, size_t ldo, const uint8_t *w, size_t row_bytes, q8_rows_t xq,
        int64_t n_in, const int R, const int T, const uint32_t type)
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
            const wpair_t wp = wpair(w + (size_t)r * row_bytes, b, type);
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

#define TILE_Q8(ty, R, T)                                                                      \
    static void tq8_##ty##_##R##_##T(float *restrict o, size_t ldo, const uint8_t *w,           \
                                     size_t rb, q8_rows_t x, int64_t n)                         \
    {                                                                                           \
        tile_q8(o, ldo, w, rb, x, n, R, T, BT_TYPE_##ty);                                       \
    }
#define TILE_Q8_ROW(ty, R) TILE_Q8(ty, R, 1) TILE_Q8(ty, R, 2) TILE_Q8(ty, R, 3) TILE_Q8(ty, R, 4)
#define TILE_Q8_TYPE(ty) TILE_Q8_ROW(ty, 1) TILE_Q8_ROW(ty, 4)
#define TILES_Q8(ty)                                                                           \
    {{tq8_##ty##_1_1, tq8_##ty##_1_2, tq8_##ty##_1_3, tq8_##ty##_1_4},                          \
     {tq8_##ty##_4_1, tq8_##ty##_4_2, tq8_##ty##_4_3, tq8_##ty##_4_4}}
TILE_Q8_TYPE(Q4_0)
TILE_Q8_TYPE(Q4_1)
TILE_Q8_TYPE(Q5_0)
TILE_Q8_TYPE(Q5_1)
TILE_Q8_TYPE(Q8_0)

/* [type][4 rows or 1][tokens - 1] */
static const tile_q8_fn tiles_q8[5][2][4] = {
    TILES_Q8(Q4_0), TILES_Q8(Q4_1), TILES_Q8(Q5_0), TILES_Q8(Q5_1), TILES_Q8(Q8_0),
};

static int type_index(uint32_t type)
{
    switch (type) {
    case BT_TYPE_Q4_0: return 0;
    case BT_TYPE_Q4_1: return 1;
    case BT_TYPE_Q5_0: return 2;
    case BT_TYPE_Q5_1: return 3;
    case BT_TYPE_Q8_0: return 4;
    default: return -1;
    }
}

bool bt_cpu_q8_supports(uint32_t type, int64_t n_in)
{
    return type_index(type) >= 0 && n_in % 64 == 0;
}

/* Each thread takes a contiguous share of the rows (in groups of 4) and,
 * for each chunk of Q8_TOKENS tokens, quantizes the chunk into its own
 * scratch and multiplies its rows with it, 4 rows x up to 4 tokens per
 * tile. Quantizing per thread repeats n_tok * n_in work per thread,
 * nothing next to the product's n_tok * n_in * n_out. */
void bt_cpu_matmul_q8(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                      int n_tok, const bt_scratch_t *s)
{
    const int64_t n_in = w->n_in, n_out = w->n_out, nb = n_in / 32;
    const tile_q8_fn(*tiles)[4] = tiles_q8[type_index(w->type)];
    const int64_t n_groups = (n_out + 3) / 4;
    const int team = bt_team_size(s, (double)n_tok * (double)n_in * (double)n_out);
#pragma omp parallel num_threads(team) if (team > 1)
    {
        const int nth = omp_get_num_threads(), me = omp_get_thread_num();
        const int64_t g0 = n_groups * me / nth, g1 = n_groups * (me + 1) / nth;
        int8_t *q = (int8_t *)(s->buf + (size_t)me * s->per_thread);
        float *d = (float *)(q + (size_t)Q8_TOKENS * n_in);
        for (int t0 = 0; t0 < n_tok; t0 += Q8_TOKENS) {
            const int nt = n_tok - t0 < Q8_TOKENS ? n_tok - t0 : Q8_TOKENS;
            quantize_rows(q, d, x + (size_t)t0 * n_in, nt, n_in);
            for (int64_t g = g0; g < g1; g++) {
                const int64_t r0 = 4 * g;
                const int nr = n_out - r0 < 4 ? (int)(n_out - r0) : 4;
                for (int t = 0; t < nt; t += 4) {
                    const int tt = nt - t < 4 ? nt - t : 4;
                    const q8_rows_t xt = {q + (size_t)t * n_in, d + (size_t)t * nb};
                    float *o = out + (size_t)(t0 + t) * n_out + r0;
                    const uint8_t *wr = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
                    if (nr == 4)
                        tiles[1][tt - 1](o, (size_t)n_out, wr, w->row_bytes, xt, n_in);
                    else
                        for (int r = 0; r < nr; r++)
                            tiles[0][tt - 1](o + r, (size_t)n_out, wr + (size_t)r * w->row_bytes,
                                             w->row_bytes, xt, n_in);
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
