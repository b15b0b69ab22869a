/*
 * cpu_fpanel.c: bt_ops_cpu's product for F32, F16 and BF16 weights.
 *
 * Each output is one FMA chain over k in order: acc = fma(w[k], x[k], acc)
 * from 0 (no lanes, no horizontal sum; bt_ops_exact sums 16 lanes instead,
 * so the two differ in rounding only). Rows are laid out in panels of 16,
 * element k of the 16 rows side by side (the last panel padded with zero
 * rows), so one vector load gives 16 rows' w[k] and one broadcast x[k]
 * feeds them all: a panel streams through contiguously (decode runs at
 * memory speed) and a broadcast of one token's x[k] serves 16 rows
 * (prefill at the FMA rate), with the chains of 8 tokens, or of 8 panels
 * for one token, in flight.
 *
 * bt_cpu_fpanel_pack writes the panels once (bt_model_pack, in the
 * weights' own type); for weights not packed, each thread packs a panel
 * into its scratch as f32 and runs the same kernel: the same values, the
 * same operations, the same bits. Which thread, tile or batch size
 * computes an output never changes its chain (invariant 1).
 */
#include <stdbool.h>
#include <string.h>

#include <omp.h>

#include "cpu_internal.h"

#if defined(__AVX512F__) && defined(__F16C__)
#include <immintrin.h>

enum { ET_F32, ET_F16, ET_BF16 };

static int elem_type(uint32_t type)
{
    return type == BT_TYPE_F16 ? ET_F16 : type == BT_TYPE_BF16 ? ET_BF16 : ET_F32;
}

static size_t elem_bytes(int et) { return et == ET_F32 ? 4 : 2; }

bool bt_cpu_fpanel_supports(uint32_t type)
{
    return type == BT_TYPE_F32 || type == BT_TYPE_F16 || type == BT_TYPE_BF16;
}

size_t bt_cpu_fpanel_bytes(uint32_t type, int64_t n_in, int64_t n_out)
{
    if (!bt_cpu_fpanel_supports(type))
        return 0;
    return (size_t)((n_out + 15) / 16) * (size_t)n_in * 16 * elem_bytes(elem_type(type));
}

/* Rows r0 .. r0 + 15 of W (those below n_out) as one panel at dst, in
 * element type et (the weights' own, or f32). */
static void pack_panel(uint8_t *restrict dst, int et, const bt_matrix_t *w, int64_t r0)
{
    const int et_src = elem_type(w->type);
    const size_t es = elem_bytes(et);
    memset(dst, 0, (size_t)w->n_in * 16 * es);
    for (int r = 0; r < 16 && r0 + r < w->n_out; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)(r0 + r) * w->row_bytes;
        if (et == ET_F32 && et_src == ET_F32) {
            const float *src = (const float *)row;
            float *o = (float *)dst + r;
            for (int64_t k = 0; k < w->n_in; k++)
                o[16 * k] = src[k];
        } else if (et == et_src) { /* f16 or bf16 as they are */
            const uint16_t *src = (const uint16_t *)row;
            uint16_t *o = (uint16_t *)dst + r;
            for (int64_t k = 0; k < w->n_in; k++)
                o[16 * k] = src[k];
        } else { /* to f32, exactly */
            const uint16_t *src = (const uint16_t *)row;
            float *o = (float *)dst + r;
            for (int64_t k = 0; k < w->n_in; k++)
                o[16 * k] = et_src == ET_F16 ? bt_f16_to_f32(src[k]) : bt_bf16_to_f32(src[k]);
        }
    }
}

void bt_cpu_fpanel_pack(uint8_t *restrict dst, const bt_matrix_t *w)
{
    const int et = elem_type(w->type);
    const size_t stride = (size_t)w->n_in * 16 * elem_bytes(et);
    for (int64_t p = 0; p < (w->n_out + 15) / 16; p++)
        pack_panel(dst + (size_t)p * stride, et, w, 16 * p);
}

static inline __m512 load16(const uint8_t *p, const int et)
{
    if (et == ET_F32)
        return _mm512_loadu_ps(p);
    const __m256i h = _mm256_loadu_si256((const __m256i *)p);
    if (et == ET_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* P panels (pstride bytes apart) times T tokens: out[t * ldo + 16 p + i]
 * for the first nr rows of the P panels. P, T and et are constants after
 * inlining. */
static inline __attribute__((always_inline)) void
fpanel(float *restrict out, size_t ldo, int nr, const uint8_t *pw, size_t pstride,
       const float *restrict x, int64_t n_in, const int P, const int T, const int et)
{
    const size_t es = elem_bytes(et);
    __m512 acc[8][8];
#pragma GCC unroll 8
    for (int p = 0; p < P; p++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            acc[p][t] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int64_t k = 0; k < n_in; k++) {
        __m512 w[8];
#pragma GCC unroll 8
        for (int p = 0; p < P; p++)
            w[p] = load16(pw + (size_t)p * pstride + (size_t)k * 16 * es, et);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const __m512 xb = _mm512_set1_ps(x[(size_t)t * n_in + k]);
#pragma GCC unroll 8
            for (int p = 0; p < P; p++)
                acc[p][t] = _mm512_fmadd_ps(w[p], xb, acc[p][t]);
        }
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; p++) {
        const int left = nr - 16 * p;
        const __mmask16 keep = (__mmask16)(left >= 16 ? 0xffff : (1u << left) - 1);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            _mm512_mask_storeu_ps(out + (size_t)t * ldo + 16 * p, keep, acc[p][t]);
    }
}

typedef void (*fpanel_fn)(float *restrict, size_t, int, const uint8_t *, size_t,
                          const float *restrict, int64_t);

#define FPANEL(name, P, T, et)                                                                 \
    static void fp_##name##_##P##_##T(float *restrict o, size_t ldo, int nr, const uint8_t *pw, \
                                      size_t ps, const float *restrict x, int64_t n)            \
    {                                                                                           \
        fpanel(o, ldo, nr, pw, ps, x, n, P, T, et);                                             \
    }
#define FPANELS(name, et)                                                                      \
    FPANEL(name, 8, 1, et) FPANEL(name, 1, 1, et) FPANEL(name, 1, 2, et)                        \
    FPANEL(name, 1, 3, et) FPANEL(name, 1, 4, et) FPANEL(name, 1, 5, et)                        \
    FPANEL(name, 1, 6, et) FPANEL(name, 1, 7, et) FPANEL(name, 1, 8, et)
FPANELS(f32, ET_F32)
FPANELS(f16, ET_F16)
FPANELS(bf16, ET_BF16)

typedef struct {
    fpanel_fn gemv8;      /* 8 panels, 1 token */
    fpanel_fn gemm[8];    /* 1 panel, 1-8 tokens */
} fpanel_kernels_t;

#define FPANEL_KERNELS(name)                                                                   \
    {fp_##name##_8_1,                                                                           \
     {fp_##name##_1_1, fp_##name##_1_2, fp_##name##_1_3, fp_##name##_1_4, fp_##name##_1_5,     \
      fp_##name##_1_6, fp_##name##_1_7, fp_##name##_1_8}}
static const fpanel_kernels_t fpanel_kernels[3] = {
    FPANEL_KERNELS(f32), FPANEL_KERNELS(f16), FPANEL_KERNELS(bf16)};

/* Threads take contiguous shares of the work units: groups of 8 panels
 * for one token (8 chains in flight), single panels for more (8 tokens'
 * chains). Unpacked weights: a thread packs each panel it takes into its
 * scratch (16 n_in floats, what the scratch holds per thread) as f32. */
void bt_cpu_matmul_fpanel(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                          int n_tok, const bt_scratch_t *s)
{
    const int64_t n_in = w->n_in, n_out = w->n_out, n_panels = (n_out + 15) / 16;
    const bool packed = w->packed != NULL;
    const int et = packed ? elem_type(w->type) : ET_F32;
    const fpanel_kernels_t *k = &fpanel_kernels[et];
    const size_t pstride = (size_t)n_in * 16 * elem_bytes(et);
    const int per_unit = n_tok == 1 && packed ? 8 : 1;
    const int64_t n_units = (n_panels + per_unit - 1) / per_unit;
    const int team = bt_team_size(s, (double)n_tok * (double)n_in * (double)n_out);
#pragma omp parallel num_threads(team) if (team > 1)
    {
        const int nth = omp_get_num_threads(), me = omp_get_thread_num();
        const int64_t u0 = n_units * me / nth, u1 = n_units * (me + 1) / nth;
        uint8_t *own = (uint8_t *)(s->buf + (size_t)me * s->per_thread);
        for (int64_t u = u0; u < u1; u++) {
            const int64_t p0 = u * per_unit, r0 = 16 * p0;
            const int nr = n_out - r0 < 16 * per_unit ? (int)(n_out - r0) : 16 * per_unit;
            const uint8_t *pw;
            if (packed) {
                pw = (const uint8_t *)w->packed + (size_t)p0 * pstride;
            } else {
                pack_panel(own, ET_F32, w, r0);
                pw = own;
            }
            if (per_unit == 8 && nr == 128) {
                k->gemv8(out + r0, (size_t)n_out, nr, pw, pstride, x, n_in);
                continue;
            }
            for (int p = 0; p < per_unit && 16 * p < nr; p++)
                for (int t = 0; t < n_tok; t += 8) {
                    const int tt = n_tok - t < 8 ? n_tok - t : 8;
                    k->gemm[tt - 1](out + (size_t)t * n_out + r0 + 16 * p, (size_t)n_out,
                                    nr - 16 * p, pw + (size_t)p * pstride, pstride,
                                    x + (size_t)t * n_in, n_in);
                }
        }
    }
}

#else

bool bt_cpu_fpanel_supports(uint32_t type)
{
    (void)type;
    return false;
}

size_t bt_cpu_fpanel_bytes(uint32_t type, int64_t n_in, int64_t n_out)
{
    (void)type, (void)n_in, (void)n_out;
    return 0;
}

void bt_cpu_fpanel_pack(uint8_t *restrict dst, const bt_matrix_t *w) { (void)dst, (void)w; }

void bt_cpu_matmul_fpanel(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                          int n_tok, const bt_scratch_t *s)
{
    (void)out, (void)w, (void)x, (void)n_tok, (void)s;
}

#endif
