/*
 * cu_math.h: the arithmetic of the CUDA kernel set, written once for the
 * GPU and the CPU.
 *
 * Every function here is compiled by nvcc for the device (the kernels in
 * this folder call them) and by the C compiler for the host
 * (cuda_host.c, the "cuda-host" ops table, and the tests), so the order in
 * which the CUDA set reduces each output element is defined in one place
 * and can be checked without a GPU. Both sides use IEEE single precision
 * with no contraction (nvcc --fmad=false, gcc -ffp-contract=off): every
 * fused multiply-add is an explicit fmaf, every other product and sum is
 * rounded on its own, and the only transcendental (bt_cu_expf) is built
 * from them. A GPU run must therefore reproduce cuda-host's results bit
 * for bit (scripts/check-cuda checks it).
 *
 * Matmul (every weight type): an output element W[r] . x[t] is a chain
 * over segments of BT_CU_SEG input columns, in order: total = part_0,
 * then total = total + part_s. Within a segment:
 *  - quantized weights (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K,
 *    MXFP4) meet activations quantized to 8 bits per 32 columns
 *    (bt_cu_quantize32: xq = rint(x * 127 / amax), dx = amax / 127, in
 *    f16 for the types ggml pairs with Q8_0 activations). Each
 *    group of 32 columns gives one or two exact integer dot products
 *    (isum of weight quants times xq: any hardware, any order, the same
 *    integer) and the part is the fmaf chain of bt_cu_group_fma over the
 *    segment's groups in order;
 *  - F32, F16 and BF16 weights meet the activations as they are:
 *    part = fmaf(w[k], x[k], part) for k in order.
 * Nothing depends on the number of tokens, the tile or the grid.
 *
 * Attention: see bt_cu_att_* below (key blocks of BT_CU_ATT_BLOCK from key
 * 0, an online softmax whose block sums follow the warp's lane order).
 */
#ifndef BT_CU_MATH_H
#define BT_CU_MATH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define BT_HD static inline __host__ __device__
#else
#define BT_HD static inline
#endif
#ifdef __CUDA_ARCH__
#define BT_UNROLL _Pragma("unroll") /* keeps small arrays in registers */
#else
#define BT_UNROLL
#endif

/* Type ids (GGUF's ggml_type numbering, as bt_type_t; cuda_host.c checks). */
enum {
    BT_CU_F32 = 0,
    BT_CU_F16 = 1,
    BT_CU_Q4_0 = 2,
    BT_CU_Q4_1 = 3,
    BT_CU_Q5_0 = 6,
    BT_CU_Q5_1 = 7,
    BT_CU_Q8_0 = 8,
    BT_CU_Q4_K = 12,
    BT_CU_Q5_K = 13,
    BT_CU_Q6_K = 14,
    BT_CU_BF16 = 30,
    BT_CU_MXFP4 = 39,
};

#define BT_CU_GROUP 32 /* columns of one 8-bit activation block */
#define BT_CU_SEG 128  /* columns of one segment of a matmul chain */
#define BT_CU_WARP 32

/* ---- scalars ---- */

/* IEEE half to float, exactly (subnormals, infinities, NaN kept). */
BT_HD float bt_cu_f16(uint32_t h)
{
    const uint32_t sign = (h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | man << 13;
    } else if (exp != 0) {
        bits = sign | (exp + 112) << 23 | man << 13;
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: normalize */
        exp = 113;
        while ((man & 0x400) == 0) {
            man <<= 1;
            exp--;
        }
        bits = sign | exp << 23 | (man & 0x3ff) << 13;
    }
    union {
        uint32_t u;
        float f;
    } v;
    v.u = bits;
    return v.f;
}

BT_HD float bt_cu_bits_f32(uint32_t bits)
{
    union {
        uint32_t u;
        float f;
    } v;
    v.u = bits;
    return v.f;
}

BT_HD uint32_t bt_cu_f32_bits(float f)
{
    union {
        uint32_t u;
        float f;
    } v;
    v.f = f;
    return v.u;
}

BT_HD uint32_t bt_cu_le16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

BT_HD uint32_t bt_cu_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Float to IEEE half bits, rounding to nearest even (overflow: infinity). */
BT_HD uint32_t bt_cu_f16_bits(float f)
{
    const uint32_t x = bt_cu_f32_bits(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a >= 0x7f800000u)
        return sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u);
    if (a >= 0x477ff000u) /* 65520 and up round to infinity */
        return sign | 0x7c00u;
    const uint32_t e = a >> 23;
    uint32_t m = a & 0x7fffffu;
    int s;
    uint32_t base;
    if (e >= 113) { /* normal: drop 13 bits */
        s = 13;
        base = (e - 112) << 10;
    } else { /* subnormal (units of 2^-24): drop 126 - e bits of 1.m */
        s = 126 - (int)e;
        m |= 0x800000u;
        base = 0;
        if (s >= 25)
            return sign;
    }
    uint32_t q = m >> s;
    const uint32_t rem = m & ((1u << s) - 1), half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return sign | (base + q); /* a carry moves into the exponent, as it should */
}

/* 2^n as a float for -149 <= n <= 127, exactly. */
BT_HD float bt_cu_exp2i(int n)
{
    if (n >= -126)
        return bt_cu_bits_f32((uint32_t)(n + 127) << 23);
    return bt_cu_bits_f32(1u << (n + 149));
}

/* e^x from correctly rounded float steps (within 2 ulp of expf; 0 for
 * x < -103.97, +inf above 88.72, NaN for NaN). */
BT_HD float bt_cu_expf(float x)
{
    if (x != x)
        return x;
    if (x < -103.972084f)
        return 0.0f;
    if (x > 88.7228394f)
        return bt_cu_bits_f32(0x7f800000u);
    const float n = rintf(x * 1.44269502f);
    float r = fmaf(n, -0.693145752f, x); /* ln 2 in two parts */
    r = fmaf(n, -1.42860677e-06f, r);
    float p = 1.98412701e-04f; /* 1/7! .. 1/1!: Taylor terms of e^r, |r| <= 0.35 */
    p = fmaf(p, r, 1.38888892e-03f);
    p = fmaf(p, r, 8.33333377e-03f);
    p = fmaf(p, r, 4.16666679e-02f);
    p = fmaf(p, r, 1.66666672e-01f);
    p = fmaf(p, r, 5.00000000e-01f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    const int k = (int)n;
    if (k > 127)
        return (p * 2.0f) * bt_cu_exp2i(k - 1);
    if (k < -126) /* two steps: the result is subnormal */
        return (p * bt_cu_exp2i(k + 64)) * bt_cu_exp2i(-64);
    return p * bt_cu_exp2i(k);
}

/* Sum of the products of four signed bytes of a and b, plus c (dp4a). */
BT_HD int32_t bt_cu_dp4a(uint32_t a, uint32_t b, int32_t c)
{
#ifdef __CUDA_ARCH__
    return __dp4a((int)a, (int)b, c);
#else
    for (int i = 0; i < 4; i++)
        c += (int32_t)(int8_t)(uint8_t)(a >> 8 * i) * (int32_t)(int8_t)(uint8_t)(b >> 8 * i);
    return c;
#endif
}

/* ---- weight blocks ----
 *
 * Byte offsets inside each GGUF block (types.h has the same layouts as
 * structs; tests/check_cuda compares the two). */

/* Bytes and columns of one block of type, 0 where the set has no path. */
BT_HD int bt_cu_block_bytes(uint32_t type)
{
    switch (type) {
    case BT_CU_Q4_0: return 18;
    case BT_CU_Q4_1: return 20;
    case BT_CU_Q5_0: return 22;
    case BT_CU_Q5_1: return 24;
    case BT_CU_Q8_0: return 34;
    case BT_CU_MXFP4: return 17;
    case BT_CU_Q4_K: return 144;
    case BT_CU_Q5_K: return 176;
    case BT_CU_Q6_K: return 210;
    case BT_CU_F32: return 4;
    case BT_CU_F16:
    case BT_CU_BF16: return 2;
    default: return 0;
    }
}

BT_HD int bt_cu_block_cols(uint32_t type)
{
    switch (type) {
    case BT_CU_Q4_K:
    case BT_CU_Q5_K:
    case BT_CU_Q6_K: return 256;
    case BT_CU_F32:
    case BT_CU_F16:
    case BT_CU_BF16: return 1;
    default: return bt_cu_block_bytes(type) != 0 ? 32 : 0;
    }
}

BT_HD int bt_cu_is_float(uint32_t type)
{
    return type == BT_CU_F32 || type == BT_CU_F16 || type == BT_CU_BF16;
}

/* Byte offset in a row of group g's block (the block holding columns
 * 32 g .. 32 g + 31). */
BT_HD int64_t bt_cu_group_block_offset(uint32_t type, int64_t g)
{
    const int per_block = bt_cu_block_cols(type) / BT_CU_GROUP;
    return g / per_block * bt_cu_block_bytes(type);
}

/* What group g of a quantized row multiplies by: weight column 32 g + i is
 * scale[i / 16 when nsub == 2, else 0] * q[i] + min (min only where
 * has_min). */
typedef struct bt_cu_scales {
    float scale[2];
    float min;
    int nsub;    /* 1, or 2 (Q6_K: two scales of 16 columns each) */
    int has_min; /* Q4_1, Q5_1, Q4_K, Q5_K */
} bt_cu_scales_t;

/* Sub-block j's 6-bit scale and min of a K-quant's 12 packed bytes. */
BT_HD void bt_cu_k_scale_min(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

BT_HD bt_cu_scales_t bt_cu_group_scales(uint32_t type, const uint8_t *row, int64_t g)
{
    const uint8_t *b = row + bt_cu_group_block_offset(type, g);
    bt_cu_scales_t s;
    s.scale[1] = 0.0f;
    s.min = 0.0f;
    s.nsub = 1;
    s.has_min = 0;
    switch (type) {
    case BT_CU_Q4_1:
    case BT_CU_Q5_1:
        s.min = bt_cu_f16(bt_cu_le16(b + 2));
        s.has_min = 1;
        s.scale[0] = bt_cu_f16(bt_cu_le16(b));
        break;
    case BT_CU_MXFP4: { /* 2^(e - 128): the values are E2M1 doubled */
        s.scale[0] = bt_cu_exp2i((int)b[0] - 128);
        break;
    }
    case BT_CU_Q4_K:
    case BT_CU_Q5_K: {
        int sc, m;
        bt_cu_k_scale_min(b + 4, (int)(g % 8), &sc, &m);
        s.scale[0] = bt_cu_f16(bt_cu_le16(b)) * (float)sc;
        s.min = -(bt_cu_f16(bt_cu_le16(b + 2)) * (float)m);
        s.has_min = 1;
        break;
    }
    case BT_CU_Q6_K: {
        const float d = bt_cu_f16(bt_cu_le16(b + 208));
        const int j = (int)(g % 8);
        s.scale[0] = d * (float)(int8_t)b[192 + 2 * j];
        s.scale[1] = d * (float)(int8_t)b[192 + 2 * j + 1];
        s.nsub = 2;
        break;
    }
    default: /* Q4_0, Q5_0, Q8_0 */
        s.scale[0] = bt_cu_f16(bt_cu_le16(b));
        break;
    }
    return s;
}

/* Twice the E2M1 value of each 4-bit code (types.h: bt_mxfp4_values). */
BT_HD int bt_cu_mxfp4_value(int code)
{
    const int m = code & 7; /* 0, 1, 2, 3, 4, 6, 8, 12 */
    const int mag = m < 4 ? m : m < 6 ? 2 * m - 4 : 4 * m - 16;
    return code & 8 ? -mag : mag;
}

/* Quant i (0 .. 31) of group g as a signed integer. */
BT_HD int bt_cu_group_quant(uint32_t type, const uint8_t *row, int64_t g, int i)
{
    const uint8_t *b = row + bt_cu_group_block_offset(type, g);
    const int lo = i & 15, hi = i >> 4; /* legacy: byte lo, nibble hi */
    switch (type) {
    case BT_CU_Q4_0: return (b[2 + lo] >> 4 * hi & 0xf) - 8;
    case BT_CU_Q4_1: return b[4 + lo] >> 4 * hi & 0xf;
    case BT_CU_Q5_0:
        return ((b[6 + lo] >> 4 * hi & 0xf) | (int)(bt_cu_le32(b + 2) >> i & 1) << 4) - 16;
    case BT_CU_Q5_1: return (b[8 + lo] >> 4 * hi & 0xf) | (int)(bt_cu_le32(b + 4) >> i & 1) << 4;
    case BT_CU_Q8_0: return (int8_t)b[2 + i];
    case BT_CU_MXFP4: return bt_cu_mxfp4_value(b[1 + lo] >> 4 * hi & 0xf);
    case BT_CU_Q4_K: {
        const int j = (int)(g % 8);
        return b[16 + 32 * (j / 2) + i] >> 4 * (j & 1) & 0xf;
    }
    case BT_CU_Q5_K: {
        const int j = (int)(g % 8);
        return (b[48 + 32 * (j / 2) + i] >> 4 * (j & 1) & 0xf) | (b[16 + i] >> j & 1) << 4;
    }
    case BT_CU_Q6_K: {
        const int j = (int)(g % 8), h = j / 4, gg = j % 4;
        const int low = b[64 * h + i + 32 * (gg & 1)] >> 4 * (gg >> 1) & 0xf;
        const int high = b[128 + 32 * h + i] >> 2 * gg & 3;
        return (low | high << 4) - 32;
    }
    default: return 0;
    }
}

/* Word w (0 .. 7) of group g's quants: quants 4w .. 4w + 3 as signed
 * bytes, the lowest byte first. */
BT_HD uint32_t bt_cu_group_word(uint32_t type, const uint8_t *row, int64_t g, int w)
{
    uint32_t v = 0;
    BT_UNROLL
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)(uint8_t)(int8_t)bt_cu_group_quant(type, row, g, 4 * w + i) << 8 * i;
    return v;
}

/* All 32 quants of group g as 8 words. */
BT_HD void bt_cu_group_quants(uint32_t type, const uint8_t *row, int64_t g, uint32_t qw[8])
{
    BT_UNROLL
    for (int w = 0; w < 8; w++)
        qw[w] = bt_cu_group_word(type, row, g, w);
}

/* ---- activations ---- */

/* Whether a type's activations keep their step rounded to f16 (as ggml's
 * Q8_0 activations, which llama.cpp multiplies Q4_0, Q5_0, Q8_0 and MXFP4
 * with; the cpu set does the same). */
BT_HD int bt_cu_f16_step(uint32_t type)
{
    return type == BT_CU_Q4_0 || type == BT_CU_Q5_0 || type == BT_CU_Q8_0 || type == BT_CU_MXFP4;
}

/* 32 activations to 8 bits: xq[i] = rint(x[i] * (127 / amax)), *dx = amax
 * / 127, rounded to f16 when f16_step and f16 holds it (0 and all-zero
 * quants when amax is 0), *sx = sum of xq. */
BT_HD void bt_cu_quantize32(const float *x, int f16_step, uint32_t xw[8], float *dx, int32_t *sx)
{
    float amax = 0.0f;
    BT_UNROLL
    for (int i = 0; i < BT_CU_GROUP; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    BT_UNROLL
    for (int w = 0; w < 8; w++) {
        uint32_t v = 0;
        BT_UNROLL
        for (int i = 0; i < 4; i++) {
            int q = (int)rintf(x[4 * w + i] * id);
            q = q > 127 ? 127 : q < -127 ? -127 : q;
            sum += q;
            v |= (uint32_t)(uint8_t)(int8_t)q << 8 * i;
        }
        xw[w] = v;
    }
    const float d = amax / 127.0f;
    const uint32_t h = bt_cu_f16_bits(d);
    *dx = f16_step && (h & 0x7c00u) != 0x7c00u ? bt_cu_f16(h) : d;
    *sx = sum;
}

/* ---- the matmul chain ---- */

/* The integer dot products of a group: isum[0] over quants 0 .. 31, or
 * 0 .. 15 and isum[1] over 16 .. 31 when nsub is 2. */
BT_HD void bt_cu_group_dot(const uint32_t qw[8], const uint32_t xw[8], int nsub, int32_t isum[2])
{
    int32_t a = 0, b = 0;
    BT_UNROLL
    for (int w = 0; w < 4; w++)
        a = bt_cu_dp4a(qw[w], xw[w], a);
    BT_UNROLL
    for (int w = 4; w < 8; w++)
        b = bt_cu_dp4a(qw[w], xw[w], b);
    if (nsub == 2) {
        isum[0] = a;
        isum[1] = b;
    } else {
        isum[0] = a + b;
        isum[1] = 0;
    }
}

/* One group's step of a segment's chain. */
BT_HD float bt_cu_group_fma(float part, const bt_cu_scales_t *s, const int32_t isum[2], float dx,
                            int32_t sx)
{
    part = fmaf(s->scale[0] * dx, (float)isum[0], part);
    if (s->nsub == 2)
        part = fmaf(s->scale[1] * dx, (float)isum[1], part);
    if (s->has_min)
        part = fmaf(s->min * dx, (float)sx, part);
    return part;
}

/* Segments' parts into the element: part 0 as it is, then one sum each. */
BT_HD float bt_cu_seg_add(float total, float part, int64_t seg)
{
    return seg == 0 ? part : total + part;
}

/* Weight column k of a float row. */
BT_HD float bt_cu_weight_f(uint32_t type, const uint8_t *row, int64_t k)
{
    if (type == BT_CU_F32)
        return bt_cu_bits_f32(bt_cu_le32(row + 4 * k));
    const uint32_t h = bt_cu_le16(row + 2 * k);
    return type == BT_CU_F16 ? bt_cu_f16(h) : bt_cu_bits_f32(h << 16);
}

/* ---- attention ----
 *
 * For query row t at position p, head h (kv head h / group): the keys it
 * sees, j0 .. p (j0 > 0 with a window), are taken in blocks
 * [BT_CU_ATT_BLOCK b, BT_CU_ATT_BLOCK (b + 1)) from key 0. A block's
 * scores are s_j = (fmaf chain over d of q[d] k[d][j]) * scale; with
 * M the running max (starting at the sink, or -inf), m = max(M, block's
 * max), c = bt_cu_expf(M - m) and p_j = bt_cu_expf(s_j - m):
 *   L = fmaf(L, c, block sum of p_j)
 *   O[d] = fmaf(O[d], c, fmaf chain over the block's keys in order of p_j v[j][d])
 * The block sum: lane l of 32 adds, in order, p of keys l, l + 32, ...
 * of the block (0 for keys not seen), then the lanes combine by halves
 * (bt_cu_warp_sum). At the end L += bt_cu_expf(sink - M) where there are
 * sinks, and out[d] = O[d] / L. */
#define BT_CU_ATT_BLOCK 256
#define BT_CU_ATT_MAX_DIM 576 /* head_dim up to this (deepseek2's latent + rope: 576) */

/* The warp's butterfly sum: at each step (offset 16, 8, 4, 2, 1) lane l
 * adds lane l ^ offset's value; every lane ends with the same sum, in
 * this order (the host emulation of __shfl_xor_sync). v is overwritten. */
BT_HD float bt_cu_warp_sum_host(float v[BT_CU_WARP])
{
    for (int o = BT_CU_WARP / 2; o > 0; o /= 2) {
        float n[BT_CU_WARP];
        for (int l = 0; l < BT_CU_WARP; l++)
            n[l] = v[l] + v[l ^ o];
        for (int l = 0; l < BT_CU_WARP; l++)
            v[l] = n[l];
    }
    return v[0];
}

/* First key that the query at position p sees. */
BT_HD int bt_cu_att_first_key(int p, int window)
{
    return window > 0 && p >= window ? p - window + 1 : 0;
}

#endif /* BT_CU_MATH_H */
