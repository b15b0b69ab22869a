/* quant_ref.h: reference decoders for the tests, written from the GGUF
 * block layouts alone (not from src/kernels): element e of one block. The
 * library's scalar and SIMD dequantizers are compared with these. */
#ifndef BT_QUANT_REF_H
#define BT_QUANT_REF_H

#include <check.h>
#include <stdint.h>
#include <string.h>

#include "kernels/types.h"

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline float h2f(const uint8_t *p) { return bt_f16_to_f32(rd16(p)); }

/* 4-bit part of element e of a 32-block: qs[e] low nibble, qs[e - 16] high. */
static inline int legacy_lo4(const uint8_t *qs, int e)
{
    return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
}

/* Bit e of the little-endian u32 at qh. */
static inline int legacy_hi1(const uint8_t *qh, int e) { return (qh[e / 8] >> (e % 8)) & 1; }

/* Sub-block j's 6-bit scale / min from the 12 bytes of Q4_K/Q5_K:
 * j < 4 in the low 6 bits of bytes j / j + 4; j >= 4: low 4 bits in byte
 * j + 4 (scale low nibble, min high nibble), top 2 bits in the top 2 bits
 * of bytes j - 4 (scale) / j (min). */
static inline int k_sc(const uint8_t *s, int j)
{
    return j < 4 ? s[j] & 63 : (s[8 + (j - 4)] & 15) | (s[j - 4] >> 6) << 4;
}
static inline int k_min(const uint8_t *s, int j)
{
    return j < 4 ? s[4 + j] & 63 : (s[8 + (j - 4)] >> 4) | (s[j] >> 6) << 4;
}

/* Element e of a block of `type` at blk, computed as GGUF defines it:
 * products are exact in f32, so only the final +/- rounds (one f32 op). */
static inline float ref_elem(uint32_t type, const uint8_t *blk, int e)
{
    switch (type) {
    case BT_TYPE_F16:
        return h2f(blk + 2 * e);
    case BT_TYPE_BF16: { /* the top half of an f32 */
        const uint32_t bits = (uint32_t)rd16(blk + 2 * e) << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    case BT_TYPE_Q8_0: /* d, qs[32] */
        return h2f(blk) * (float)(int8_t)blk[2 + e];
    case BT_TYPE_Q4_0: /* d, qs[16] */
        return h2f(blk) * (float)(legacy_lo4(blk + 2, e) - 8);
    case BT_TYPE_Q4_1: /* d, m, qs[16] */
        return h2f(blk) * (float)legacy_lo4(blk + 4, e) + h2f(blk + 2);
    case BT_TYPE_Q5_0: /* d, qh[4], qs[16] */
        return h2f(blk) * (float)((legacy_lo4(blk + 6, e) | legacy_hi1(blk + 2, e) << 4) - 16);
    case BT_TYPE_Q5_1: /* d, m, qh[4], qs[16] */
        return h2f(blk) * (float)(legacy_lo4(blk + 8, e) | legacy_hi1(blk + 4, e) << 4) +
               h2f(blk + 2);
    case BT_TYPE_Q4_K:   /* d, dmin, scales[12], qs[128] */
    case BT_TYPE_Q5_K: { /* d, dmin, scales[12], qh[32], qs[128] */
        const int j = e / 32;              /* sub-block */
        const int c = e / 64, r = e % 64; /* chunk of 64 shares 32 bytes of qs */
        const uint8_t *s = blk + 4;
        const uint8_t *qs = blk + (type == BT_TYPE_Q4_K ? 16 : 48);
        int q = r < 32 ? qs[32 * c + r] & 15 : qs[32 * c + r - 32] >> 4;
        if (type == BT_TYPE_Q5_K) /* bit j of qh[e % 32] */
            q |= ((blk[16 + e % 32] >> j) & 1) << 4;
        float step = h2f(blk) * (float)k_sc(s, j), off = h2f(blk + 2) * (float)k_min(s, j);
        return step * (float)q - off;
    }
    case BT_TYPE_Q6_K: { /* ql[128], qh[64], scales[16], d */
        const int h = e / 128, g = (e % 128) / 32, l = e % 32;
        const uint8_t *ql = blk, *qh = blk + 128;
        const int8_t sc = (int8_t)blk[192 + e / 16];
        int lo = (ql[64 * h + 32 * (g & 1) + l] >> (4 * (g >> 1))) & 15;
        int hi = (qh[32 * h + l] >> (2 * g)) & 3;
        return h2f(blk + 208) * (float)sc * (float)((lo | hi << 4) - 32);
    }
    default:
        ck_abort_msg("no reference decoder for type %u", type);
        return 0.0f;
    }
}

/* Byte offsets of the f16 scale fields of a block (-1 ends the list); for
 * F16 every element is one (block of 1 at offset 0); BF16 has none. */
static inline const int *f16_fields(uint32_t type)
{
    static const int none[] = {-1}, one[] = {0, -1}, two[] = {0, 2, -1}, q6[] = {208, -1};
    switch (type) {
    case BT_TYPE_BF16:
        return none;
    case BT_TYPE_F16:
    case BT_TYPE_Q4_0:
    case BT_TYPE_Q5_0:
    case BT_TYPE_Q8_0:
        return one;
    case BT_TYPE_Q6_K:
        return q6;
    default:
        return two;
    }
}

#endif /* BT_QUANT_REF_H */
