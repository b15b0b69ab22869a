/*
 * cpu_fpanel.c: bt_ops_cpu's product for F32, F16 and BF16 weights.
 *
 * Each output is one FMA chain over k in order: acc = fma(w[k], x[k], acc)
 * from 0 (no lanes, no horizontal sum; bt_ops_exact sums 16 lanes instead,
 * so the two differ in rounding only). Rows are laid out in panels of 16,
 * element k of the 16 rows side by side (the last panel padded with zero
 * rows), so one vector load (AVX-512; two with AVX2) gives 16 rows' w[k]
 * and one broadcast x[k] feeds them all, and a broadcast of one token's
 * x[k] serves 16 rows (prefill at the FMA rate), with the chains of several
 * tokens, or of several panels for one token, in flight. F16 and BF16
 * panels go in groups of GEMV_WIDE, interleaved by k: the group's k-th
 * vectors side by side, then its (k+1)-th (panel_at: the panels past the
 * last whole group, and F32's, panel after panel). A one-token unit of a
 * group so reads one stream from memory, where a panel after panel layout
 * gave it GEMV_WIDE streams: on a Zen 4, 27-35 GB/s against 25-29 of 31
 * (docs/benchmarking.md, 2026-12-07). A chain is the same in either build
 * and layout, so their results are the same bits.
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
#include "simd16.h"

#if BT_SIMD16

/* Chains in flight per call. One token (decode): 8 panels at a time with
 * AVX-512, 4 with AVX2: a group's one stream (F16, BF16), or one stream a
 * panel (F32: one thread, more streams, more loads in flight; short rows:
 * their starts overlap), but then 2 for rows longer than GEMV_WIDE_MAX
 * bytes when several threads share the memory (with 8, two threads gave it
 * 16 streams and got 26 GB/s where 2 x 2 got 44). Prefill: 8 tokens of one
 * panel in AVX-512's 32 registers, 6 tokens (12 accumulators) in AVX2's
 * 16. */
#define GEMV_WIDE_MAX (40 << 10)
/* Fewer panels alone than this a thread (two wide units): units of 2
 * panels instead, so that a small product (a mixture's router, 8 panels)
 * still gives every thread a share, and an even one. */
#define GEMV_FEW (2 * GEMV_WIDE)
/* A unit of panels up to this many bytes prefetches its thread's next
 * unit while it is computed, spread over its k steps, into L2
 * (__builtin_prefetch's locality 2; 3 lost 3-15 points). Short panels
 * are why: the hardware prefetcher starts again on every new stream, and
 * a smollm2 F16 panel is 18-48 KB (8- and 16-token F16 products on a Zen
 * 4 rose from 60-76% of the FMA peak to 79-86%, docs/benchmarking.md
 * 2026-12-05). Larger units stream long enough on their own, but 256 KiB
 * left llama-1b's ffn_down (8192 inputs) out and it stayed at 69%. */
#define PF_UNIT_MAX (1024 << 10)
#define PF_LOCALITY 2
/* Where the CPU wants software prefetches for one-token products
 * (bt_weight_prefetch), a one-token unit instead prefetches its own
 * weights into L1, each panel's this many bytes ahead (the steps of a
 * panel's vectors; the unit's stream is then P times that ahead), and the
 * next unit is left alone: on a Xeon (Sapphire Rapids class) llama-1b's F16
 * GEMVs on one thread rose from 72-78% of the read bandwidth to 89-96%
 * (0.5 and 1 KiB ahead: 81-94%, 4 KiB: 85-92%; the next-unit prefetch
 * alone 72-78%, and with the streams' 2 KiB: 80-85%; docs/benchmarking.md
 * 2026-12-05). A pair of panels for 2 to WIDEN_TOKENS - 1 tokens (in
 * passes of GEMM_TOKENS) does the same: on a later Xeon, 8-token F16
 * products from memory rose from 9-10 GB/s to 14-16 (of 15.8) and 16-token
 * ones from 6.7 to 8.2. Past a matrix's end it prefetches at most this much
 * of whatever follows. (The quantized kernels' distance is
 * bt_weight_prefetch_bytes, measured on its own.) */
#define PF_AHEAD 2048
/* Tokens from which F16/BF16 panels are widened to f32 first (fpanel_share). */
#define WIDEN_TOKENS 32
#ifdef BT_SIMD16_AVX512
#define GEMV_WIDE 8
#define GEMM_TOKENS 8
#else
#define GEMV_WIDE 4
#define GEMM_TOKENS 6
#endif

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
 * element type et (the weights' own, or f32), its k-th vector kv elements
 * after its (k-1)-th (16: a panel alone; the group's 16 x panels when
 * interleaved). Rows past n_out are left as they are (zeroed by the
 * caller). */
static void pack_panel(uint8_t *restrict dst, int et, const bt_matrix_t *w, int64_t r0,
                       size_t kv)
{
    const int et_src = elem_type(w->type);
    for (int r = 0; r < 16 && r0 + r < w->n_out; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)(r0 + r) * w->row_bytes;
        if (et == ET_F32 && et_src == ET_F32) {
            const float *src = (const float *)row;
            float *o = (float *)dst + r;
            for (int64_t k = 0; k < w->n_in; k++)
                o[kv * (size_t)k] = src[k];
        } else if (et == et_src) { /* f16 or bf16 as they are */
            const uint16_t *src = (const uint16_t *)row;
            uint16_t *o = (uint16_t *)dst + r;
            for (int64_t k = 0; k < w->n_in; k++)
                o[kv * (size_t)k] = src[k];
        } else { /* to f32, exactly */
            const uint16_t *src = (const uint16_t *)row;
            float *o = (float *)dst + r;
            for (int64_t k = 0; k < w->n_in; k++)
                o[kv * (size_t)k] =
                    et_src == ET_F16 ? bt_f16_to_f32(src[k]) : bt_bf16_to_f32(src[k]);
        }
    }
}

/* Where packed panel p of a matrix of n_panels panels and n_in columns
 * lies (vb: bytes of one panel's vector): in a whole group of GEMV_WIDE,
 * its k-th vector at the group's start + (p's place in it) * vb + k *
 * GEMV_WIDE * vb; the panels past the last whole group each alone, panel
 * after panel (k * vb). F16 and BF16 only (vb 32): F32's panels, a line a
 * vector, read as fast or faster alone (llama-1b's one-token products on
 * a Zen 4: 28-34 GB/s alone, 26-33 grouped). The layout of a panel depends
 * on the panels before it alone, so packing a matrix in chunks of whole
 * groups (model.c) gives the bytes of one call. */
static bool in_group(int64_t p, int64_t n_panels, size_t vb)
{
    return vb == 32 && p < n_panels / GEMV_WIDE * GEMV_WIDE;
}

static size_t panel_at(int64_t p, int64_t n_panels, int64_t n_in, size_t vb)
{
    if (!in_group(p, n_panels, vb))
        return (size_t)p * (size_t)n_in * vb;
    return (size_t)(p / GEMV_WIDE * GEMV_WIDE) * (size_t)n_in * vb + (size_t)(p % GEMV_WIDE) * vb;
}

static size_t panel_kstride(int64_t p, int64_t n_panels, size_t vb)
{
    return in_group(p, n_panels, vb) ? GEMV_WIDE * vb : vb;
}

void bt_cpu_fpanel_pack(uint8_t *restrict dst, const bt_matrix_t *w)
{
    const int et = elem_type(w->type);
    const size_t vb = 16 * elem_bytes(et);
    const int64_t n_panels = (w->n_out + 15) / 16;
    memset(dst, 0, (size_t)n_panels * (size_t)w->n_in * vb); /* the last panel's padding */
    for (int64_t p = 0; p < n_panels; p++)
        pack_panel(dst + panel_at(p, n_panels, w->n_in, vb), et, w, 16 * p,
                   panel_kstride(p, n_panels, vb) / elem_bytes(et));
}

static inline __attribute__((always_inline)) v16f load16(const uint8_t *p, const int et)
{
    return et == ET_F32 ? v16f_load(p) : et == ET_F16 ? v16f_load_f16(p) : v16f_load_bf16(p);
}

/* A unit's panels in memory: panel p's k-th vector at pw + p * pstride +
 * k * kstride (interleaved in a group: pstride one vector, kstride the
 * group's; panels alone, or f32 in a thread's scratch: pstride the panel,
 * kstride one vector). pf, unless NULL: the next unit, whose P vectors'
 * bytes of step k start at pf + k * pf_kstride. */
typedef struct fp_unit {
    const uint8_t *pw;
    size_t pstride, kstride;
    const uint8_t *pf;
    size_t pf_kstride;
} fp_unit_t;

/* P panels times T tokens: out[t * ldo + 16 p + i] for the first nr rows
 * of the unit's P panels. P, T and et are constants after inlining. pf,
 * unless NULL: step k prefetches the next unit's k-th vectors, so that
 * they stream in while these are computed (see fpanel_share). ahead (a
 * constant): step k prefetches the unit's own vectors of step k + PF_AHEAD
 * / (bytes of a vector): PF_AHEAD bytes ahead in each panel's stream. */
static inline __attribute__((always_inline)) void
fpanel_loop(float *restrict out, size_t ldo, int nr, const fp_unit_t *u,
            const float *restrict x, int64_t n_in, const int P, const int T, const int et,
            const bool ahead)
{
    const size_t es = elem_bytes(et);
    const size_t vb = 16 * es, pstride = u->pstride, kstride = u->kstride;
    const uint8_t *pw = u->pw, *pf = u->pf;
    const size_t pf_step = (size_t)P * vb; /* bytes of the next unit per step */
    const size_t ahead_k = PF_AHEAD / vb;   /* steps */
    v16f acc[GEMV_WIDE][GEMM_TOKENS];
#pragma GCC unroll 8
    for (int p = 0; p < P; p++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            acc[p][t] = v16f_zero();
#pragma GCC unroll 2
    for (int64_t k = 0; k < n_in; k++) {
        if (pf != NULL) /* a constant: fpanel compiles the loop with and without */
#pragma GCC unroll 8
            for (size_t b = 0; b < pf_step; b += 64)
                __builtin_prefetch(pf + (size_t)k * u->pf_kstride + b, 0, PF_LOCALITY);
        /* the unit's vectors side by side (packed units): each line once */
        if (ahead && (kstride >= 64 || k % 2 == 0))
#pragma GCC unroll 8
            for (size_t b = 0; b < pf_step; b += 64)
                __builtin_prefetch(pw + ((size_t)k + ahead_k) * kstride + b, 0, 3);
        v16f w[GEMV_WIDE];
#pragma GCC unroll 8
        for (int p = 0; p < P; p++)
            w[p] = load16(pw + (size_t)p * pstride + (size_t)k * kstride, et);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const v16f xb = v16f_set1(x[(size_t)t * n_in + k]);
#pragma GCC unroll 8
            for (int p = 0; p < P; p++)
                acc[p][t] = v16f_fma(w[p], xb, acc[p][t]);
        }
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; p++) {
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            v16f_store_n(out + (size_t)t * ldo + 16 * p, acc[p][t], nr - 16 * p);
    }
}

static inline __attribute__((always_inline)) void
fpanel(float *restrict out, size_t ldo, int nr, const fp_unit_t *u, const float *restrict x,
       int64_t n_in, const int P, const int T, const int et)
{
    if (u->pf != NULL) {
        fpanel_loop(out, ldo, nr, u, x, n_in, P, T, et, false);
    } else {
        const fp_unit_t v = {u->pw, u->pstride, u->kstride, NULL, 0};
        fpanel_loop(out, ldo, nr, &v, x, n_in, P, T, et, false);
    }
}

typedef void (*fpanel_fn)(float *restrict, size_t, int, const fp_unit_t *,
                          const float *restrict, int64_t);

#define FPANEL(name, P, T, et)                                                                 \
    static void fp_##name##_##P##_##T(float *restrict o, size_t ldo, int nr, const fp_unit_t *u, \
                                      const float *restrict x, int64_t n)                       \
    {                                                                                           \
        fpanel(o, ldo, nr, u, x, n, P, T, et);                                                  \
    }
/* P panels, T tokens, prefetching the unit's own vectors ahead (PF_AHEAD) */
#define FPANEL_AHEAD(name, P, T, et)                                                           \
    static void fpa_##name##_##P##_##T(float *restrict o, size_t ldo, int nr,                   \
                                       const fp_unit_t *u, const float *restrict x, int64_t n)  \
    {                                                                                           \
        const fp_unit_t v = {u->pw, u->pstride, u->kstride, NULL, 0};                           \
        fpanel_loop(o, ldo, nr, &v, x, n, P, T, et, true);                                      \
    }
#ifdef BT_SIMD16_AVX512
#define FPANELS(name, et)                                                                      \
    FPANEL(name, 8, 1, et) FPANEL(name, 2, 1, et) FPANEL(name, 1, 1, et)                        \
    FPANEL_AHEAD(name, 8, 1, et)                                                                \
    FPANEL(name, 1, 2, et) FPANEL(name, 1, 3, et) FPANEL(name, 1, 4, et)                        \
    FPANEL(name, 1, 5, et) FPANEL(name, 1, 6, et) FPANEL(name, 1, 7, et) FPANEL(name, 1, 8, et) \
    FPANEL(name, 2, 2, et) FPANEL(name, 2, 3, et) FPANEL(name, 2, 4, et)                        \
    FPANEL(name, 2, 5, et) FPANEL(name, 2, 6, et) FPANEL(name, 2, 7, et) FPANEL(name, 2, 8, et) \
    FPANEL_AHEAD(name, 2, 1, et) FPANEL_AHEAD(name, 2, 2, et) FPANEL_AHEAD(name, 2, 3, et)      \
    FPANEL_AHEAD(name, 2, 4, et) FPANEL_AHEAD(name, 2, 5, et) FPANEL_AHEAD(name, 2, 6, et)      \
    FPANEL_AHEAD(name, 2, 7, et) FPANEL_AHEAD(name, 2, 8, et)
#define FPANEL_KERNELS(name)                                                                   \
    {fp_##name##_8_1, fp_##name##_2_1, fpa_##name##_8_1, fpa_##name##_2_1,                      \
     {fp_##name##_1_1, fp_##name##_1_2, fp_##name##_1_3, fp_##name##_1_4, fp_##name##_1_5,     \
      fp_##name##_1_6, fp_##name##_1_7, fp_##name##_1_8},                                       \
     {fp_##name##_2_1, fp_##name##_2_2, fp_##name##_2_3, fp_##name##_2_4, fp_##name##_2_5,     \
      fp_##name##_2_6, fp_##name##_2_7, fp_##name##_2_8},                                       \
     {fpa_##name##_2_1, fpa_##name##_2_2, fpa_##name##_2_3, fpa_##name##_2_4, fpa_##name##_2_5, \
      fpa_##name##_2_6, fpa_##name##_2_7, fpa_##name##_2_8}}
#else
#define FPANELS(name, et)                                                                      \
    FPANEL(name, 4, 1, et) FPANEL(name, 2, 1, et) FPANEL(name, 1, 1, et)                        \
    FPANEL_AHEAD(name, 4, 1, et) FPANEL_AHEAD(name, 2, 1, et)                                   \
    FPANEL(name, 1, 2, et) FPANEL(name, 1, 3, et) FPANEL(name, 1, 4, et)                        \
    FPANEL(name, 1, 5, et) FPANEL(name, 1, 6, et)
#define FPANEL_KERNELS(name)                                                                   \
    {fp_##name##_4_1, fp_##name##_2_1, fpa_##name##_4_1, fpa_##name##_2_1,                      \
     {fp_##name##_1_1, fp_##name##_1_2, fp_##name##_1_3, fp_##name##_1_4, fp_##name##_1_5,     \
      fp_##name##_1_6}}
#endif
FPANELS(f32, ET_F32)
FPANELS(f16, ET_F16)
FPANELS(bf16, ET_BF16)

typedef struct {
    fpanel_fn gemv_wide;         /* GEMV_WIDE panels, 1 token */
    fpanel_fn gemv2;             /* 2 panels, 1 token */
    fpanel_fn gemv_wide_ahead, gemv2_ahead; /* the same, each stream prefetching (PF_AHEAD) */
    fpanel_fn gemm[GEMM_TOKENS]; /* 1 panel, 1 .. GEMM_TOKENS tokens */
#ifdef BT_SIMD16_AVX512
    fpanel_fn gemm2[GEMM_TOKENS]; /* 2 panels, 1 .. GEMM_TOKENS tokens */
    fpanel_fn gemm2_ahead[GEMM_TOKENS]; /* the same, each stream prefetching (PF_AHEAD) */
#endif
} fpanel_kernels_t;
static const fpanel_kernels_t fpanel_kernels[3] = {
    FPANEL_KERNELS(f32), FPANEL_KERNELS(f16), FPANEL_KERNELS(bf16)};

/* The one-token kernel of P panels (GEMV_WIDE or 2), prefetching its
 * own vectors ahead or not. */
static fpanel_fn gemv_kernel(const fpanel_kernels_t *k, int P, bool ahead)
{
    return ahead ? (P == 2 ? k->gemv2_ahead : k->gemv_wide_ahead)
                 : (P == 2 ? k->gemv2 : k->gemv_wide);
}

/* A unit's first np panels (those of its nr rows) one at a time for T
 * tokens: a unit of short rows, or one no kernel takes whole. The first
 * panel keeps the unit's prefetch of the next. */
static void panel_by_panel(const fpanel_kernels_t *k, float *restrict o, size_t ldo, int nr,
                           int np, const fp_unit_t *u, const float *restrict x, int64_t n_in,
                           int T)
{
    for (int p = 0; p < np && 16 * p < nr; p++) {
        fp_unit_t up = *u;
        up.pw = u->pw + (size_t)p * u->pstride;
        up.pf = p == 0 ? u->pf : NULL;
        k->gemm[T - 1](o + 16 * p, ldo, nr - 16 * p, &up, x, n_in);
    }
}

/* Threads take contiguous shares of the work units: GEMV_WIDE panels
 * alone for one token, or 2 (grouped panels: gemv_share), pairs of panels
 * for more with AVX-512 (two weight streams and 2 x GEMM_TOKENS chains in
 * flight: a small batch of decode rows reads each panel from memory once
 * and keeps both FMA ports busy), single panels with AVX2. A unit never
 * spans two groups (GEMV_WIDE is a multiple of the unit). Unpacked
 * weights: a thread packs each panel it takes into its scratch (16 n_in
 * floats; the scratch holds 32 per thread) as f32, one panel at a time. */
static void fpanel_share(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                         int n_tok, const bt_scratch_t *s, int me, int nth)
{
    const int64_t n_in = w->n_in, n_out = w->n_out, n_panels = (n_out + 15) / 16;
    const bool packed = w->packed != NULL;
    const int et = packed ? elem_type(w->type) : ET_F32;
    /* F16/BF16 prefill: a unit's panels widened to f32 into the scratch
     * once, then the f32 kernels for every token: the conversions, which
     * take the FMA ports' issue slots, then cost once per panel instead of
     * once per GEMM_TOKENS tokens (at 512 tokens on a Xeon: 73% of the FMA
     * peak widened in flight, about f32's 90% widened first). Exact
     * conversions, the same chains: the same bits. */
    const bool widen = packed && et != ET_F32 && n_tok >= WIDEN_TOKENS;
    const fpanel_kernels_t *k = &fpanel_kernels[widen ? ET_F32 : et];
    const size_t vb = 16 * elem_bytes(et); /* one panel's vector, as held */
    const size_t own_stride = (size_t)n_in * 16 * sizeof(float); /* a panel in the scratch */
#ifdef BT_SIMD16_AVX512
    const int pair = packed ? 2 : 1;
#else
    const int pair = 1;
#endif
    /* one token (panels alone: grouped ones go to gemv_share): GEMV_WIDE
     * panels, or pairs, as GEMV_WIDE_MAX and GEMV_FEW say */
    const bool wide =
        nth == 1 || ((size_t)n_in * vb <= GEMV_WIDE_MAX && n_panels >= GEMV_FEW * nth);
    const int per_unit = !packed ? 1 : n_tok > 1 ? pair : wide ? GEMV_WIDE : 2;
    const int64_t n_units = (n_panels + per_unit - 1) / per_unit;
    /* one token, or a pair of panels for a few: the unit's stream
     * prefetches ahead where the CPU wants it (PF_AHEAD), else the next
     * unit does (PF_UNIT_MAX) */
    const bool ahead = packed && !widen && (n_tok == 1 || per_unit == 2) && bt_weight_prefetch();
    {
        const int64_t u0 = n_units * me / nth, u1 = n_units * (me + 1) / nth;
        uint8_t *own = (uint8_t *)(s->buf + (size_t)me * s->per_thread);
        for (int64_t u = u0; u < u1; u++) {
            const int64_t p0 = u * per_unit, r0 = 16 * p0;
            const int nr = n_out - r0 < 16 * per_unit ? (int)(n_out - r0) : 16 * per_unit;
            /* the unit as held (packed: inside its group, or panels alone) */
            const uint8_t *src =
                packed ? (const uint8_t *)w->packed + panel_at(p0, n_panels, n_in, vb) : NULL;
            const size_t kstride = panel_kstride(p0, n_panels, vb);
            const size_t pstride = in_group(p0, n_panels, vb) ? vb : (size_t)n_in * vb;
            fp_unit_t un = {src, pstride, kstride, NULL, 0};
            const int64_t q0 = p0 + per_unit; /* the next unit, where this thread has it whole */
            const bool next = u + 1 < u1 && q0 + per_unit <= n_panels;
            /* its bytes a step: a group's row of vectors, or (panels alone,
             * one after another) per_unit vectors of a linear walk */
            const size_t next_kstride = in_group(q0, n_panels, vb) ? GEMV_WIDE * vb : per_unit * vb;
            if (widen) { /* step by step: a group's pair shares each line */
                const int np = n_panels - p0 < per_unit ? (int)(n_panels - p0) : per_unit;
                for (int64_t i = 0; i < n_in; i++)
                    for (int p = 0; p < np; p++)
                        v16f_store_n((float *)(void *)(own + (size_t)p * own_stride) + 16 * i,
                                     load16(src + (size_t)p * pstride + (size_t)i * kstride, et),
                                     16);
                un = (fp_unit_t){own, own_stride, 16 * sizeof(float), NULL, 0};
                /* the next unit as held (the f32 kernel's steps fetch twice
                 * a source step's bytes: that unit's vectors and the next) */
                if (next) {
                    un.pf = (const uint8_t *)w->packed + panel_at(q0, n_panels, n_in, vb);
                    un.pf_kstride = next_kstride;
                }
            } else if (packed) {
                if (!ahead && n_tok > 1 && next &&
                    (size_t)per_unit * (size_t)n_in * vb <= PF_UNIT_MAX) {
                    un.pf = (const uint8_t *)w->packed + panel_at(q0, n_panels, n_in, vb);
                    un.pf_kstride = next_kstride;
                }
            } else {
                memset(own, 0, own_stride);
                pack_panel(own, ET_F32, w, r0, 16);
                un = (fp_unit_t){own, own_stride, 16 * sizeof(float), NULL, 0};
            }
            if (n_tok == 1 && per_unit > 1 && nr == 16 * per_unit) {
                gemv_kernel(k, per_unit, ahead)(out + r0, (size_t)n_out, nr, &un, x, n_in);
                continue;
            }
            for (int t = 0; t < n_tok; t += GEMM_TOKENS) {
                const int tt = n_tok - t < GEMM_TOKENS ? n_tok - t : GEMM_TOKENS;
                float *o = out + (size_t)t * n_out + r0;
                const float *xt = x + (size_t)t * n_in;
                fp_unit_t ut = un; /* the next unit prefetched in the first pass only */
                ut.pf = t == 0 ? un.pf : NULL;
#ifdef BT_SIMD16_AVX512
                if (per_unit == 2 && nr == 32) {
                    (ahead ? k->gemm2_ahead : k->gemm2)[tt - 1](o, (size_t)n_out, nr, &ut, xt,
                                                                n_in);
                    continue;
                }
#endif
                panel_by_panel(k, o, (size_t)n_out, nr, per_unit, &ut, xt, n_in, tt);
            }
        }
    }
}

/* Whether a one-token product of W reads grouped panels (packed F16/BF16
 * with a whole group): gemv_share's products. */
bool bt_cpu_fpanel_grouped(const bt_matrix_t *w, int n_tok)
{
    return n_tok == 1 && w->packed != NULL && bt_cpu_fpanel_supports(w->type) &&
           in_group(0, (w->n_out + 15) / 16, 16 * elem_bytes(elem_type(w->type)));
}

/* One token, grouped panels: the np panels of W from panel p, a whole
 * group (one stream) or a panel alone (past the last group). */
static void gemv_unit(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                      int64_t p, int np, bool ahead)
{
    const int et = elem_type(w->type);
    const size_t vb = 16 * elem_bytes(et);
    const int64_t n_in = w->n_in, n_out = w->n_out, n_panels = (n_out + 15) / 16;
    const fpanel_kernels_t *k = &fpanel_kernels[et];
    const int nr = n_out - 16 * p < 16 * np ? (int)(n_out - 16 * p) : 16 * np;
    const fp_unit_t u = {(const uint8_t *)w->packed + panel_at(p, n_panels, n_in, vb), vb,
                         panel_kstride(p, n_panels, vb), NULL, 0};
    if (nr == 16 * GEMV_WIDE) /* a whole group; else a panel alone, or a group of short rows */
        gemv_kernel(k, GEMV_WIDE, ahead)(out + 16 * p, (size_t)n_out, nr, &u, x, n_in);
    else
        panel_by_panel(k, out + 16 * p, (size_t)n_out, nr, np, &u, x, n_in, 1);
}

/* Thread me of nth takes the units (gemv_unit) whose bytes are centred in
 * its share [me, me + 1) / nth of all the jobs' (each
 * bt_cpu_fpanel_grouped). A group is never split: two threads that read
 * parts of one group read all of it between them twice (smollm2's 576 ->
 * 192 on two threads, 6 + 6 of its 12 panels: 10-24 GB/s, against 27-31
 * for 8 + 4). The units of several products share out more evenly than
 * each product's alone (q, k and v of smollm2: 32 + 28 panels, where one
 * product after another kept the slower thread on 20 + 8 + 8), and in one
 * fork and join. */
static void gemv_share(const bt_matmul_job_t *jobs, int n_jobs, double total, int me, int nth)
{
    const double lo = total * me / nth, hi = total * (me + 1) / nth;
    const bool ahead = bt_weight_prefetch();
    double at = 0.0; /* the cost before the unit */
    for (int i = 0; i < n_jobs && at < hi; i++) {
        const bt_matmul_job_t *j = &jobs[i];
        const int64_t n_panels = (j->w.n_out + 15) / 16;
        const size_t vb = 16 * elem_bytes(elem_type(j->w.type));
        for (int64_t p = 0; p < n_panels && at < hi;) {
            const int np = in_group(p, n_panels, vb) ? GEMV_WIDE : 1;
            const double c = (double)np * (double)j->w.n_in, mid = at + c / 2;
            if (mid >= lo && (mid < hi || me == nth - 1))
                gemv_unit(j->out, &j->w, j->x, p, np, ahead);
            at += c;
            p += np;
        }
    }
}

void bt_cpu_matmul_fpanel_many(const bt_matmul_job_t *jobs, int n_jobs, const bt_scratch_t *s)
{
    double total = 0.0, work = 0.0, bytes = 0.0;
    for (int i = 0; i < n_jobs; i++) {
        const bt_matrix_t *w = &jobs[i].w;
        total += (double)((w->n_out + 15) / 16) * (double)w->n_in;
        work += (double)w->n_in * (double)w->n_out;
        bytes += (double)w->row_bytes * (double)w->n_out;
    }
    const int team = bt_team_size(s, work, bytes);
    if (team == 1) {
        gemv_share(jobs, n_jobs, total, 0, 1);
        return;
    }
#pragma omp parallel num_threads(team)
    gemv_share(jobs, n_jobs, total, omp_get_thread_num(), omp_get_num_threads());
}

void bt_cpu_matmul_fpanel(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                          int n_tok, const bt_scratch_t *s)
{
    if (bt_cpu_fpanel_grouped(w, n_tok)) {
        const bt_matmul_job_t job = {out, *w, x, n_tok};
        bt_cpu_matmul_fpanel_many(&job, 1, s);
        return;
    }
    /* one row streams the weights, shared out where they make two units
     * of 2 panels for each of two threads */
    const bool stream = n_tok == 1 && w->n_out >= 2 * 2 * 2 * 16;
    const int team = bt_team_size(s, (double)n_tok * (double)w->n_in * (double)w->n_out,
                                  stream ? (double)w->row_bytes * (double)w->n_out : 0.0);
    if (team == 1) { /* no OpenMP region: see bt_cpu_matmul_q8 */
        fpanel_share(out, w, x, n_tok, s, 0, 1);
        return;
    }
#pragma omp parallel num_threads(team)
    fpanel_share(out, w, x, n_tok, s, omp_get_thread_num(), omp_get_num_threads());
}

#endif /* BT_SIMD16 */
