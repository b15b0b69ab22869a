/*
 * cpu.c: the fast CPU ops: SIMD (AVX-512, AVX2+FMA, or portable vectors)
 * and OpenMP over output rows / heads.
 *
 * Every dot product here accumulates in one fixed way: VL lanes, lane i
 * summing k = i, i + VL, ... in order, then a fixed horizontal sum, then the
 * scalar tail in order. Which tile or thread computes an element, and how
 * many tokens share the batch, never changes that order (invariant 1).
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "kernels.h"

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
static inline float vf_sum(vf a) { return _mm512_reduce_add_ps(a); }
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VL 8
typedef __m256 vf;
static inline vf vf_zero(void) { return _mm256_setzero_ps(); }
static inline vf vf_set1(float a) { return _mm256_set1_ps(a); }
static inline vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf_store(float *p, vf a) { _mm256_storeu_ps(p, a); }
static inline vf vf_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline float vf_sum(vf a)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
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
static inline float vf_sum(vf a)
{
    float s = 0.0f;
    for (int i = 0; i < VL; i++)
        s += a[i];
    return s;
}
#endif

/* Work (multiply-adds) below which a kernel runs on the calling thread:
 * waking a team costs tens of microseconds on a busy or virtualized
 * machine, more than a small matrix-vector product takes. Which thread
 * computes an element never changes its value, so this is only speed. */
#define BT_PARALLEL_MIN_WORK (1 << 21)

static inline int team_size(const bt_scratch_t *s, double work)
{
    return work >= BT_PARALLEL_MIN_WORK ? s->n_threads : 1;
}

/* ---- matmul ---- */

/* Tile of R rows of W by T tokens: out[t * ldo + r] = W[r] . x[t] over n.
 * Called only with constant R, T (1..4) so the accumulators stay in
 * registers. */
static inline __attribute__((always_inline)) void
tile(float *restrict out, size_t ldo, const float *restrict w, size_t ldw,
     const float *restrict x, size_t ldx, int64_t n, const int R, const int T)
{
    vf acc[4][4];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++)
            acc[r][t] = vf_zero();
    int64_t k = 0;
    for (; k + VL <= n; k += VL) {
        vf xv[4];
        for (int t = 0; t < T; t++)
            xv[t] = vf_load(x + t * ldx + k);
        for (int r = 0; r < R; r++) {
            vf wv = vf_load(w + r * ldw + k);
            for (int t = 0; t < T; t++)
                acc[r][t] = vf_fma(wv, xv[t], acc[r][t]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            float s = vf_sum(acc[r][t]);
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

static const tile_fn tiles[4][4] = {
    {tile_1_1, tile_1_2, tile_1_3, tile_1_4},
    {tile_2_1, tile_2_2, tile_2_3, tile_2_4},
    {tile_3_1, tile_3_2, tile_3_3, tile_3_4},
    {tile_4_1, tile_4_2, tile_4_3, tile_4_4},
};

static inline int imin(int64_t a, int64_t b) { return (int)(a < b ? a : b); }

/* Each thread takes blocks of BT_MATMUL_ROWS rows of W, dequantizes them
 * into its scratch (f32 rows are used in place), and multiplies them with
 * every token, 4 tokens x 4 rows at a time so a tile of x stays in L1 while
 * the dequantized rows stay in L2. */
static void cpu_matmul(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                       int n_tok, const bt_scratch_t *s)
{
    const int64_t n_in = w->n_in, n_out = w->n_out;
    const int64_t n_blocks = (n_out + BT_MATMUL_ROWS - 1) / BT_MATMUL_ROWS;
    const bool direct = w->type == BT_TYPE_F32;
    const bt_to_float_fn to_float = bt_type_info(w->type)->to_float;

    const int team = team_size(s, (double)n_tok * (double)n_in * (double)n_out);
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
        for (int t = 0; t < n_tok; t += 4) {
            const int nt = imin(4, n_tok - t);
            for (int r = 0; r < nr; r += 4) {
                const int rr = imin(4, nr - r);
                tiles[rr - 1][nt - 1](out + (size_t)t * n_out + r0 + r, (size_t)n_out,
                                      wb + r * ldw, ldw, x + (size_t)t * n_in, (size_t)n_in, n_in);
            }
        }
    }
}

/* ---- attention ---- */

static inline float dot(const float *restrict a, const float *restrict b, int n)
{
    vf acc = vf_zero();
    int k = 0;
    for (; k + VL <= n; k += VL)
        acc = vf_fma(vf_load(a + k), vf_load(b + k), acc);
    float s = vf_sum(acc);
    for (; k < n; k++)
        s += a[k] * b[k];
    return s;
}

static void cpu_attention(float *restrict out, const float *restrict q, const float *restrict k,
                          const float *restrict v, int n_tok, int pos0, int n_head, int n_head_kv,
                          int head_dim, const bt_scratch_t *s)
{
    const int group = n_head / n_head_kv;
    const int kv_dim = n_head_kv * head_dim;
    const float scale = 1.0f / sqrtf((float)head_dim);

    const int team = team_size(s, 2.0 * n_tok * (pos0 + n_tok) * (double)n_head * head_dim);
#pragma omp parallel for collapse(2) schedule(static) num_threads(team) if (team > 1)
    for (int t = 0; t < n_tok; t++) {
        for (int h = 0; h < n_head; h++) {
            float *score = s->buf + (size_t)omp_get_thread_num() * s->per_thread;
            const int n_keys = pos0 + t + 1;
            const float *qh = q + ((size_t)t * n_head + h) * head_dim;
            const size_t koff = (size_t)(h / group) * head_dim;
            float max = -INFINITY;
            for (int j = 0; j < n_keys; j++) {
                score[j] = dot(qh, k + (size_t)j * kv_dim + koff, head_dim) * scale;
                max = fmaxf(max, score[j]);
            }
            double sum = 0.0;
            for (int j = 0; j < n_keys; j++) {
                score[j] = expf(score[j] - max);
                sum += score[j];
            }
            const float inv = (float)(1.0 / sum);
            float *oh = out + ((size_t)t * n_head + h) * head_dim;
            int d = 0;
            for (; d + VL <= head_dim; d += VL) {
                vf acc = vf_zero();
                for (int j = 0; j < n_keys; j++)
                    acc = vf_fma(vf_set1(score[j]), vf_load(v + (size_t)j * kv_dim + koff + d), acc);
                vf_store(oh + d, vf_mul(acc, vf_set1(inv)));
            }
            for (; d < head_dim; d++) {
                float acc = 0.0f;
                for (int j = 0; j < n_keys; j++)
                    acc += score[j] * v[(size_t)j * kv_dim + koff + d];
                oh[d] = acc * inv;
            }
        }
    }
}

const bt_ops_t bt_ops_cpu = {
    .name = "cpu",
    .matmul = cpu_matmul,
    .attention = cpu_attention,
};
