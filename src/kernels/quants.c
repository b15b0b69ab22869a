/*
 * quants.c: the block formats of GGUF (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
 * Q5_K, Q6_K): exact dequantization and a min/max quantizer for each.
 *
 * Dequantization (bt_to_float_*) follows the layouts in types.h. Its value
 * is the one llama.cpp's dequantize_row_* gives, for every bit pattern: the
 * f16 fields decode exactly, every product in the formulas is exact in f32
 * (an 11-bit f16 significand times integers whose product has at most 12
 * bits: sc * q <= 128 * 32 in Q6_K, 63 * 31 in Q5_K), so the only
 * rounding is the final "+ m" / "- dmin * m" of the formats with a minimum,
 * one f32 operation as in ggml -- the result does not depend on evaluation
 * order or FMA contraction.
 *
 * Quantization (bt_from_float_*) is for writing synthetic models. It is not
 * llama.cpp's search-based quantizer; it picks each scale from the block's
 * range, rounds every stored scale in the direction that keeps the whole
 * block inside the representable range (f16 scales up, f16 minimums down,
 * 6/8-bit sub-block scales and mins up), then rounds each element to the
 * nearest level. So no element needs clamping, and the error of an element
 * is at most half its own (stored) step, plus f32 rounding where the format
 * adds a minimum. The bound of each format is stated at its quantizer and
 * checked by tests/check_quants.c. Inputs must be finite; scales that would
 * exceed the f16 range (|x| beyond ~65504 * levels) saturate. (Q8_0 keeps
 * its earlier quantizer: scale amax / 127 rounded to nearest.)
 */
#include "types.h"

#include <math.h>
#include <string.h>

/* ---- helpers shared by the quantizers ---- */

/* The smallest f16 >= v (v >= 0, finite); 65504 when v is larger. A positive
 * v never gives 0. */
static uint16_t f16_up(double v)
{
    if (!(v > 0.0))
        return 0;
    if (v >= 65504.0)
        return 0x7bff;
    uint16_t h = bt_f32_to_f16((float)v); /* nearest: at most one step below */
    while ((double)bt_f16_to_f32(h) < v)
        h++;
    return h;
}

/* The largest f16 <= v (v finite); -65504 when v is smaller. */
static uint16_t f16_down(double v)
{
    if (v < 0.0)
        return (uint16_t)(0x8000u | f16_up(-v));
    uint16_t h = bt_f32_to_f16((float)v); /* nearest, possibly inf */
    while ((double)bt_f16_to_f32(h) > v)
        h--;
    return h;
}

/* The level nearest to x / d, clamped to [lo, hi] (lo <= 0 <= hi); 0 when
 * d is 0. The quantizers choose d so that the clamp never moves a level by
 * more than the rounding of this division. */
static int quant_level(double x, double d, int lo, int hi)
{
    if (d == 0.0)
        return 0;
    double t = x / d;
    if (t <= lo)
        return lo;
    if (t >= hi)
        return hi;
    return (int)nearbyint(t);
}

/* ceil(v) clamped to [0, hi]. */
static int ceil_level(double v, int hi)
{
    if (!(v > 0.0))
        return 0;
    return v >= hi ? hi : (int)ceil(v);
}

/* The signed step s of smallest magnitude with every x[i] / s in
 * [-nq, nq - 1], for the symmetric formats whose levels are q - nq: the side
 * of larger magnitude gets the nq levels (s > 0 puts them on the negative
 * side). 0 for an all-zero x. */
static double sym_step(const float *x, int n, int nq)
{
    double pos = 0.0, neg = 0.0;
    for (int i = 0; i < n; i++) {
        pos = fmax(pos, (double)x[i]);
        neg = fmax(neg, -(double)x[i]);
    }
    double sp = fmax(neg / nq, pos / (nq - 1)); /* s > 0: -nq s <= x <= (nq - 1) s */
    double sn = fmax(pos / nq, neg / (nq - 1)); /* s < 0: mirrored */
    return sn < sp ? -sn : sp;
}

/* The f16 scale of a symmetric block: sym_step rounded away from zero. */
static uint16_t sym_scale(const float *x, int n, int nq)
{
    double s = sym_step(x, n, nq);
    return s < 0.0 ? (uint16_t)(0x8000u | f16_up(-s)) : f16_up(s);
}

static void minmax(const float *x, int n, double *lo, double *hi)
{
    double a = x[0], b = x[0];
    for (int i = 1; i < n; i++) {
        a = fmin(a, (double)x[i]);
        b = fmax(b, (double)x[i]);
    }
    *lo = a;
    *hi = b;
}

static uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void store_u32le(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The levels of one 32-element block of the legacy formats (Q4_0, Q4_1,
 * Q5_0, Q5_1), for 4 or 5 bits. Symmetric: q = level + 2^(bits-1) with d
 * from sym_scale. Affine: m = min rounded down, d = (max - m) / (2^bits -
 * 1) rounded up, q in 0 .. 2^bits - 1. */
static void levels_sym(const float *x, int bits, uint16_t *d16, int *q)
{
    const int half = 1 << (bits - 1);
    *d16 = sym_scale(x, 32, half);
    const double d = bt_f16_to_f32(*d16);
    for (int j = 0; j < 32; j++)
        q[j] = quant_level(x[j], d, -half, half - 1) + half;
}

static void levels_affine(const float *x, int bits, uint16_t *d16, uint16_t *m16, int *q)
{
    const int top = (1 << bits) - 1;
    double lo, hi;
    minmax(x, 32, &lo, &hi);
    *m16 = f16_down(lo);
    const double m = bt_f16_to_f32(*m16);
    *d16 = f16_up((hi - m) / top);
    const double d = bt_f16_to_f32(*d16);
    for (int j = 0; j < 32; j++)
        q[j] = quant_level(x[j] - m, d, 0, top);
}

/* Low 4 bits of elements j and j + 16 into byte j; bit 4 of element j
 * into bit j of the little-endian qh (5-bit formats). */
static void pack_nibbles(uint8_t *qs, const int *q)
{
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)((q[j] & 0xf) | (q[j + 16] & 0xf) << 4);
}

static void pack_qh(uint8_t *qh, const int *q)
{
    uint32_t v = 0;
    for (int j = 0; j < 32; j++)
        v |= (uint32_t)(q[j] >> 4) << j;
    store_u32le(qh, v);
}

/* ---- Q4_0 ---- */

void bt_to_float_q4_0(float *restrict out, const void *restrict in, int64_t n)
{
    const bt_block_q4_0_t *b = in;
    for (int64_t i = 0; i < n / BT_QK4_0; i++, out += BT_QK4_0) {
        const float d = bt_f16_to_f32(b[i].d);
        for (int j = 0; j < BT_QK4_0 / 2; j++) {
            out[j] = d * (float)((b[i].qs[j] & 0xf) - 8);
            out[j + BT_QK4_0 / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

/* d = sym_step(block, levels -8..7) rounded away from zero to f16, so every
 * x / d lies in [-8, 7]:  |x - d (q - 8)| <= |d| / 2, where |d| <= s (1 +
 * 2^-10) for the optimal step s <= amax / 7 (or s + 2^-24 when d is an f16
 * subnormal). Dequantization is exact, so that is the whole error. */
void bt_from_float_q4_0(void *restrict out, const float *restrict in, int64_t n)
{
    bt_block_q4_0_t *b = out;
    int q[32];
    for (int64_t i = 0; i < n / BT_QK4_0; i++) {
        levels_sym(in + i * BT_QK4_0, 4, &b[i].d, q);
        pack_nibbles(b[i].qs, q);
    }
}

/* ---- Q4_1 ---- */

void bt_to_float_q4_1(float *restrict out, const void *restrict in, int64_t n)
{
    const bt_block_q4_1_t *b = in;
    for (int64_t i = 0; i < n / BT_QK4_1; i++, out += BT_QK4_1) {
        const float d = bt_f16_to_f32(b[i].d), m = bt_f16_to_f32(b[i].m);
        for (int j = 0; j < BT_QK4_1 / 2; j++) {
            out[j] = d * (float)(b[i].qs[j] & 0xf) + m;
            out[j + BT_QK4_1 / 2] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

/* m = min rounded down to f16, d = (max - m) / 15 rounded up to f16, so every
 * (x - m) / d lies in [0, 15]:  |x - (d q + m)| <= d / 2 + 2^-24 |d q + m|
 * (the last term: the f32 addition of the dequantization). */
void bt_from_float_q4_1(void *restrict out, const float *restrict in, int64_t n)
{
    bt_block_q4_1_t *b = out;
    int q[32];
    for (int64_t i = 0; i < n / BT_QK4_1; i++) {
        levels_affine(in + i * BT_QK4_1, 4, &b[i].d, &b[i].m, q);
        pack_nibbles(b[i].qs, q);
    }
}

/* ---- Q5_0 ---- */

void bt_to_float_q5_0(float *restrict out, const void *restrict in, int64_t n)
{
    const bt_block_q5_0_t *b = in;
    for (int64_t i = 0; i < n / BT_QK5_0; i++, out += BT_QK5_0) {
        const float d = bt_f16_to_f32(b[i].d);
        const uint32_t qh = load_u32le(b[i].qh);
        for (int j = 0; j < BT_QK5_0 / 2; j++) {
            int q0 = (b[i].qs[j] & 0xf) | (int)((qh >> j) & 1u) << 4;
            int q1 = (b[i].qs[j] >> 4) | (int)((qh >> (j + BT_QK5_0 / 2)) & 1u) << 4;
            out[j] = d * (float)(q0 - 16);
            out[j + BT_QK5_0 / 2] = d * (float)(q1 - 16);
        }
    }
}

/* As Q4_0 with levels -16..15: |x - d (q - 16)| <= |d| / 2, |d| <= s (1 +
 * 2^-10) (or s + 2^-24), s <= amax / 15. */
void bt_from_float_q5_0(void *restrict out, const float *restrict in, int64_t n)
{
    bt_block_q5_0_t *b = out;
    int q[32];
    for (int64_t i = 0; i < n / BT_QK5_0; i++) {
        levels_sym(in + i * BT_QK5_0, 5, &b[i].d, q);
        pack_nibbles(b[i].qs, q);
        pack_qh(b[i].qh, q);
    }
}

/* ---- Q5_1 ---- */

void bt_to_float_q5_1(float *restrict out, const void *restrict in, int64_t n)
{
    const bt_block_q5_1_t *b = in;
    for (int64_t i = 0; i < n / BT_QK5_1; i++, out += BT_QK5_1) {
        const float d = bt_f16_to_f32(b[i].d), m = bt_f16_to_f32(b[i].m);
        const uint32_t qh = load_u32le(b[i].qh);
        for (int j = 0; j < BT_QK5_1 / 2; j++) {
            int q0 = (b[i].qs[j] & 0xf) | (int)((qh >> j) & 1u) << 4;
            int q1 = (b[i].qs[j] >> 4) | (int)((qh >> (j + BT_QK5_1 / 2)) & 1u) << 4;
            out[j] = d * (float)q0 + m;
            out[j + BT_QK5_1 / 2] = d * (float)q1 + m;
        }
    }
}

/* As Q4_1 with levels 0..31: |x - (d q + m)| <= d / 2 + 2^-24 |d q + m|,
 * d = (max - m) / 31 rounded up to f16. */
void bt_from_float_q5_1(void *restrict out, const float *restrict in, int64_t n)
{
    bt_block_q5_1_t *b = out;
    int q[32];
    for (int64_t i = 0; i < n / BT_QK5_1; i++) {
        levels_affine(in + i * BT_QK5_1, 5, &b[i].d, &b[i].m, q);
        pack_nibbles(b[i].qs, q);
        pack_qh(b[i].qh, q);
    }
}

/* ---- Q8_0 ---- */

void bt_to_float_q8_0(float *restrict out, const void *restrict in, int64_t n)
{
    const bt_block_q8_0_t *b = in;
    for (int64_t i = 0; i < n / BT_QK8_0; i++) {
        float d = bt_f16_to_f32(b[i].d);
        for (int j = 0; j < BT_QK8_0; j++)
            out[i * BT_QK8_0 + j] = d * (float)b[i].qs[j];
    }
}

/* Scale so the largest magnitude maps to +-127; values round to nearest
 * (bound in tests/check_kernels.c: <= 0.5003 d + |x| 2^-11). */
void bt_from_float_q8_0(void *restrict out, const float *restrict in, int64_t n)
{
    bt_block_q8_0_t *b = out;
    for (int64_t i = 0; i < n / BT_QK8_0; i++) {
        const float *x = in + i * BT_QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < BT_QK8_0; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = bt_f32_to_f16(d);
        for (int j = 0; j < BT_QK8_0; j++)
            b[i].qs[j] = (int8_t)lrintf(x[j] * id);
    }
}

/* ---- MXFP4 ---- */

const int8_t bt_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* 2^(e - 128) exactly, subnormal for e < 2. */
static float mxfp4_half_scale(uint8_t e) { return ldexpf(1.0f, (int)e - 128); }

void bt_to_float_mxfp4(float *restrict out, const void *restrict in, int64_t n)
{
    const bt_block_mxfp4_t *b = in;
    for (int64_t i = 0; i < n / BT_QK_MXFP4; i++) {
        const float d = mxfp4_half_scale(b[i].e);
        for (int j = 0; j < BT_QK_MXFP4 / 2; j++) {
            out[i * BT_QK_MXFP4 + j] = d * (float)bt_mxfp4_values[b[i].qs[j] & 0xf];
            out[i * BT_QK_MXFP4 + j + 16] = d * (float)bt_mxfp4_values[b[i].qs[j] >> 4];
        }
    }
}

/* The exponent that puts the largest magnitude in E2M1's top binade (4..6
 * times 2^(e - 127)), clamped to the byte; each value then to the nearest
 * code (the lower magnitude on a tie). */
void bt_from_float_mxfp4(void *restrict out, const float *restrict in, int64_t n)
{
    bt_block_mxfp4_t *b = out;
    for (int64_t i = 0; i < n / BT_QK_MXFP4; i++) {
        const float *x = in + i * BT_QK_MXFP4;
        float amax = 0.0f;
        for (int j = 0; j < BT_QK_MXFP4; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        int e = 0;
        if (amax > 0.0f) {
            int ex;
            frexpf(amax, &ex); /* amax in [2^(ex-1), 2^ex) */
            e = ex - 1 - 2 + 127; /* 2^(ex-1) is 4 x 2^(e-127) */
            e = e < 0 ? 0 : e > 255 ? 255 : e;
        }
        b[i].e = (uint8_t)e;
        const float d = mxfp4_half_scale((uint8_t)e);
        uint8_t q[BT_QK_MXFP4];
        for (int j = 0; j < BT_QK_MXFP4; j++) {
            int best = 0;
            float err = INFINITY;
            for (int c = 0; c < 16; c++) {
                const float diff = fabsf(x[j] - d * (float)bt_mxfp4_values[c]);
                if (diff < err) {
                    err = diff;
                    best = c;
                }
            }
            q[j] = (uint8_t)best;
        }
        for (int j = 0; j < BT_QK_MXFP4 / 2; j++)
            b[i].qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
    }
}

/* ---- Q4_K and Q5_K ---- */

static void k_pack_scale_min(uint8_t *restrict s, const int *sc, const int *m)
{
    memset(s, 0, BT_K_SCALE_SIZE);
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((sc[j + 4] & 0xf) | (m[j + 4] & 0xf) << 4);
    }
}

/* The step and offset of each sub-block of 32: value = step[j] * q - off[j]. */
void bt_k_steps(float *step, float *off, uint16_t hd, uint16_t hdmin, const uint8_t *scales)
{
    const float d = bt_f16_to_f32(hd), dmin = bt_f16_to_f32(hdmin);
    for (int j = 0; j < BT_QK_K / 32; j++) {
        int sc, m;
        bt_k_scale_min(scales, j, &sc, &m);
        step[j] = d * (float)sc;  /* exact: 11 bits times 6 */
        off[j] = dmin * (float)m; /* exact */
    }
}

void bt_to_float_q4_k(float *restrict out, const void *restrict in, int64_t n)
{
    const bt_block_q4_k_t *b = in;
    for (int64_t i = 0; i < n / BT_QK_K; i++) {
        float step[8], off[8];
        bt_k_steps(step, off, b[i].d, b[i].dmin, b[i].scales);
        for (int c = 0; c < 4; c++, out += 64) {
            const uint8_t *q = b[i].qs + 32 * c;
            const float s0 = step[2 * c], o0 = off[2 * c];
            const float s1 = step[2 * c + 1], o1 = off[2 * c + 1];
            for (int l = 0; l < 32; l++) {
                out[l] = s0 * (float)(q[l] & 0xf) - o0;
                out[l + 32] = s1 * (float)(q[l] >> 4) - o1;
            }
        }
    }
}

void bt_to_float_q5_k(float *restrict out, const void *restrict in, int64_t n)
{
    const bt_block_q5_k_t *b = in;
    for (int64_t i = 0; i < n / BT_QK_K; i++) {
        float step[8], off[8];
        bt_k_steps(step, off, b[i].d, b[i].dmin, b[i].scales);
        for (int c = 0; c < 4; c++, out += 64) {
            const uint8_t *q = b[i].qs + 32 * c;
            const float s0 = step[2 * c], o0 = off[2 * c];
            const float s1 = step[2 * c + 1], o1 = off[2 * c + 1];
            for (int l = 0; l < 32; l++) {
                int q0 = (q[l] & 0xf) | ((b[i].qh[l] >> (2 * c)) & 1) << 4;
                int q1 = (q[l] >> 4) | ((b[i].qh[l] >> (2 * c + 1)) & 1) << 4;
                out[l] = s0 * (float)q0 - o0;
                out[l + 32] = s1 * (float)q1 - o1;
            }
        }
    }
}

/* The quantizer of Q4_K (nl = 15) and Q5_K (nl = 31) for one super-block;
 * levels[256] receives q of each element, the rest goes into the block.
 *
 * Sub-block j of 32 has range [lo_j, hi_j]; its offset must be >= 0 (the
 * format subtracts dmin * m with m >= 0), so it needs mn_j = max(0, -lo_j).
 *   dmin = max_j mn_j / 63, rounded up to f16;   m_j = ceil(mn_j / dmin)
 *   off_j = dmin m_j >= mn_j, so every x + off_j >= 0
 *   r_j = hi_j + off_j       (<= hi_j - min(lo_j, 0) + dmin)
 *   d = max_j r_j / (63 nl), rounded up to f16;  sc_j = ceil(r_j / (nl d))
 *   step_j = d sc_j >= r_j / nl, so every (x + off_j) / step_j <= nl
 * and each element rounds to the nearest of its levels:
 *   |x - (step_j q - off_j)| <= step_j / 2 + 2^-24 |step_j q - off_j|
 * with step_j <= (hi_j - min(lo_j, 0) + dmin) / nl + d. */
static void k_quantize(const float *x, int nl, uint16_t *hd, uint16_t *hdmin, uint8_t *scales,
                       uint8_t *levels)
{
    double mn[8], hi[8], r[8];
    double mn_max = 0.0;
    for (int j = 0; j < 8; j++) {
        double lo;
        minmax(x + 32 * j, 32, &lo, &hi[j]);
        mn[j] = lo < 0.0 ? -lo : 0.0;
        mn_max = fmax(mn_max, mn[j]);
    }
    *hdmin = f16_up(mn_max / 63);
    const double dmin = bt_f16_to_f32(*hdmin);
    int sc[8], m[8];
    double r_max = 0.0;
    for (int j = 0; j < 8; j++) {
        m[j] = dmin > 0.0 ? ceil_level(mn[j] / dmin, 63) : 0;
        r[j] = fmax(0.0, hi[j] + dmin * m[j]);
        r_max = fmax(r_max, r[j]);
    }
    *hd = f16_up(r_max / (63.0 * nl));
    const double d = bt_f16_to_f32(*hd);
    for (int j = 0; j < 8; j++)
        sc[j] = d > 0.0 ? ceil_level(r[j] / (nl * d), 63) : 0;
    k_pack_scale_min(scales, sc, m);
    for (int j = 0; j < 8; j++) {
        const double step = d * sc[j], off = dmin * m[j];
        for (int l = 0; l < 32; l++)
            levels[32 * j + l] = (uint8_t)quant_level((double)x[32 * j + l] + off, step, 0, nl);
    }
}

void bt_from_float_q4_k(void *restrict out, const float *restrict in, int64_t n)
{
    bt_block_q4_k_t *b = out;
    for (int64_t i = 0; i < n / BT_QK_K; i++) {
        uint8_t q[BT_QK_K];
        k_quantize(in + i * BT_QK_K, 15, &b[i].d, &b[i].dmin, b[i].scales, q);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * c + l] = (uint8_t)(q[64 * c + l] | q[64 * c + 32 + l] << 4);
    }
}

void bt_from_float_q5_k(void *restrict out, const float *restrict in, int64_t n)
{
    bt_block_q5_k_t *b = out;
    for (int64_t i = 0; i < n / BT_QK_K; i++) {
        uint8_t q[BT_QK_K];
        k_quantize(in + i * BT_QK_K, 31, &b[i].d, &b[i].dmin, b[i].scales, q);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const int q0 = q[64 * c + l], q1 = q[64 * c + 32 + l];
                b[i].qs[32 * c + l] = (uint8_t)((q0 & 0xf) | (q1 & 0xf) << 4);
                b[i].qh[l] |= (uint8_t)((q0 >> 4) << (2 * c) | (q1 >> 4) << (2 * c + 1));
            }
    }
}

/* ---- Q6_K ---- */

void bt_to_float_q6_k(float *restrict out, const void *restrict in, int64_t n)
{
    const bt_block_q6_k_t *b = in;
    for (int64_t i = 0; i < n / BT_QK_K; i++) {
        const float d = bt_f16_to_f32(b[i].d);
        for (int h = 0; h < 2; h++, out += 128) {
            const uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
            const int8_t *sc = b[i].scales + 8 * h;
            for (int is = 0; is < 2; is++) { /* l in [16 is, 16 is + 16): one scale each */
                /* (d * sc) * q as in ggml; exact either way */
                const float s0 = d * (float)sc[is], s1 = d * (float)sc[is + 2];
                const float s2 = d * (float)sc[is + 4], s3 = d * (float)sc[is + 6];
                for (int l = 16 * is; l < 16 * is + 16; l++) {
                    int q0 = (ql[l] & 0xf) | (qh[l] & 3) << 4;
                    int q1 = (ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4;
                    int q2 = (ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4;
                    int q3 = (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4;
                    out[l] = s0 * (float)(q0 - 32);
                    out[l + 32] = s1 * (float)(q1 - 32);
                    out[l + 64] = s2 * (float)(q2 - 32);
                    out[l + 96] = s3 * (float)(q3 - 32);
                }
            }
        }
    }
}

/* Sub-block j of 16 gets the optimal signed step s_j for levels -32..31
 * (sym_step, |s_j| <= amax_j / 31); d = max_j |s_j| / 127 rounded up to f16
 * (d >= 0), scales[j] = sign(s_j) ceil(|s_j| / d), so every x / (d scales[j])
 * lies in [-32, 31]:  |x - d scales[j] (q - 32)| <= d |scales[j]| / 2, with
 * d |scales[j]| <= |s_j| + d. Dequantization is exact. */
void bt_from_float_q6_k(void *restrict out, const float *restrict in, int64_t n)
{
    bt_block_q6_k_t *b = out;
    for (int64_t i = 0; i < n / BT_QK_K; i++) {
        const float *x = in + i * BT_QK_K;
        double s[16], s_max = 0.0;
        for (int j = 0; j < 16; j++) {
            s[j] = sym_step(x + 16 * j, 16, 32);
            s_max = fmax(s_max, fabs(s[j]));
        }
        b[i].d = f16_up(s_max / 127);
        const double d = bt_f16_to_f32(b[i].d);
        for (int j = 0; j < 16; j++) {
            int a = d > 0.0 ? ceil_level(fabs(s[j]) / d, 127) : 0;
            b[i].scales[j] = (int8_t)(s[j] < 0.0 ? -a : a);
        }
        memset(b[i].ql, 0, sizeof b[i].ql);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int e = 0; e < BT_QK_K; e++) {
            const int q = quant_level(x[e], d * b[i].scales[e / 16], -32, 31) + 32;
            const int h = e / 128, g = (e % 128) / 32, l = e % 32;
            b[i].ql[64 * h + 32 * (g & 1) + l] |= (uint8_t)((q & 0xf) << (4 * (g >> 1)));
            b[i].qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * g));
        }
    }
}
