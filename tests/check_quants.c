/*
 * check_quants.c: the GGUF block formats of src/kernels/quants.c
 * (Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; Q8_0 is in check_kernels).
 *   layout:   struct sizes, the type table, row sizes
 *   dequant:  hand-built blocks (bytes written here, values worked out by
 *             hand and by each format's formula, element by element);
 *             random blocks against that formula; known answers from the
 *             gguf Python package (llama.cpp's gguf-py)
 *   quant:    quantize -> dequantize error within each format's bound on
 *             random data, zero, constant and outlier blocks, sub-blocks of
 *             very different ranges, tiny values
 *   matmul:   bt_ops_exact and bt_ops_ref vs double for every format, 1-3
 *             threads, padded rows; bt_ops_cpu's 8-bit activation path
 *             (these formats and Q8_0) within its derived bound
 *   invariance: 13 tokens at once vs micro-batches (1+3+9 and others) and
 *             thread counts -> bitwise equal, both fast tables
 *
 * The reference decoders here are written per element from the layout in
 * the GGUF specification (which byte and bit holds element e), not per
 * chunk as quants.c loops, so a wrong index on either side shows.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/types.h"
#include "quant_ref.h"
#include "testutil.h"

#define U 0x1p-24 /* unit roundoff of f32 */

/* Silent when it holds (ck_assert reports every pass to the runner). */



static uint32_t f32_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

/* The formats under test, in one order used by every loop test. */
static const uint32_t q_types[] = {BT_TYPE_Q4_0, BT_TYPE_Q4_1, BT_TYPE_Q5_0, BT_TYPE_Q5_1,
                                   BT_TYPE_Q4_K, BT_TYPE_Q5_K, BT_TYPE_Q6_K};
#define N_Q_TYPES ((int)(sizeof q_types / sizeof q_types[0]))

/* Decodes `nb` blocks with to_float, the whole row at once, and compares
 * every element with ref_elem bit for bit (+0 and -0 are told apart). */
static void check_decode(uint32_t type, const uint8_t *blocks, int nb, const char *what)
{
    const bt_type_info_t *ti = bt_type_info(type);
    const int bs = (int)ti->block_size;
    float *y = xmalloc((size_t)nb * bs * sizeof(float));
    memset(y, 0xff, (size_t)nb * bs * sizeof(float));
    ti->to_float(y, blocks, (int64_t)nb * bs);
    for (int b = 0; b < nb; b++)
        for (int e = 0; e < bs; e++) {
            float want = ref_elem(type, blocks + (size_t)b * ti->block_bytes, e);
            float got = y[(size_t)b * bs + e];
            CHECK_MSG(f32_bits(got) == f32_bits(want), "%s %s: block %d [%d] = %a, want %a",
                      ti->name, what, b, e, (double)got, (double)want);
        }
    free(y);
}

/* ==== layout ==== */

START_TEST(test_layout)
{
    static const struct {
        uint32_t t;
        const char *name;
        int64_t bs;
        size_t bb, struct_bytes;
    } cases[] = {
        {BT_TYPE_Q4_0, "q4_0", 32, 18, sizeof(bt_block_q4_0_t)},
        {BT_TYPE_Q4_1, "q4_1", 32, 20, sizeof(bt_block_q4_1_t)},
        {BT_TYPE_Q5_0, "q5_0", 32, 22, sizeof(bt_block_q5_0_t)},
        {BT_TYPE_Q5_1, "q5_1", 32, 24, sizeof(bt_block_q5_1_t)},
        {BT_TYPE_Q8_0, "q8_0", 32, 34, sizeof(bt_block_q8_0_t)},
        {BT_TYPE_Q4_K, "q4_k", 256, 144, sizeof(bt_block_q4_k_t)},
        {BT_TYPE_Q5_K, "q5_k", 256, 176, sizeof(bt_block_q5_k_t)},
        {BT_TYPE_Q6_K, "q6_k", 256, 210, sizeof(bt_block_q6_k_t)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bt_type_info_t *ti = bt_type_info(cases[i].t);
        ck_assert_ptr_nonnull(ti);
        ck_assert_str_eq(ti->name, cases[i].name);
        ck_assert_int_eq(ti->block_size, cases[i].bs);
        ck_assert_uint_eq(ti->block_bytes, cases[i].bb);
        ck_assert_uint_eq(cases[i].struct_bytes, cases[i].bb);
        ck_assert(bt_type_supported(cases[i].t));
        ck_assert_int_eq(bt_type_from_name(cases[i].name), (int)cases[i].t);
    }
    /* field offsets the file format fixes */
    ck_assert_uint_eq(offsetof(bt_block_q5_0_t, qs), 6);
    ck_assert_uint_eq(offsetof(bt_block_q5_1_t, qh), 4);
    ck_assert_uint_eq(offsetof(bt_block_q5_1_t, qs), 8);
    ck_assert_uint_eq(offsetof(bt_block_q4_k_t, scales), 4);
    ck_assert_uint_eq(offsetof(bt_block_q4_k_t, qs), 16);
    ck_assert_uint_eq(offsetof(bt_block_q5_k_t, qh), 16);
    ck_assert_uint_eq(offsetof(bt_block_q5_k_t, qs), 48);
    ck_assert_uint_eq(offsetof(bt_block_q6_k_t, qh), 128);
    ck_assert_uint_eq(offsetof(bt_block_q6_k_t, scales), 192);
    ck_assert_uint_eq(offsetof(bt_block_q6_k_t, d), 208);
    /* still without compute support */
    ck_assert(!bt_type_supported(BT_TYPE_Q8_1));
    ck_assert(!bt_type_supported(BT_TYPE_Q2_K));
    ck_assert(!bt_type_supported(BT_TYPE_Q3_K));
    ck_assert(!bt_type_supported(BT_TYPE_Q8_K));
    ck_assert_int_eq(bt_type_from_name("Q5_K"), BT_TYPE_Q5_K);
    ck_assert_int_eq(bt_type_from_name("q6_K"), BT_TYPE_Q6_K);
}
END_TEST

START_TEST(test_row_bytes)
{
    static const struct {
        uint32_t t;
        uint64_t n, bytes;
    } ok[] = {
        {BT_TYPE_Q4_0, 32, 18},         {BT_TYPE_Q4_0, 4096, 128 * 18},
        {BT_TYPE_Q4_1, 64, 40},         {BT_TYPE_Q4_1, 2048, 64 * 20},
        {BT_TYPE_Q5_0, 96, 66},         {BT_TYPE_Q5_0, 576, 18 * 22},
        {BT_TYPE_Q5_1, 32, 24},         {BT_TYPE_Q5_1, 576, 18 * 24},
        {BT_TYPE_Q4_K, 256, 144},       {BT_TYPE_Q4_K, 4096, 16 * 144},
        {BT_TYPE_Q5_K, 768, 3 * 176},   {BT_TYPE_Q5_K, 14336, 56 * 176},
        {BT_TYPE_Q6_K, 256, 210},       {BT_TYPE_Q6_K, 128256ull * 256, 128256ull * 210},
        {BT_TYPE_Q4_0, 0, 0},           {BT_TYPE_Q6_K, 0, 0},
        {BT_TYPE_Q4_K, 256ull << 50, 144ull << 50},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t b = 12345;
        ck_assert_int_eq(bt_type_row_bytes(ok[i].t, ok[i].n, &b), 0);
        ck_assert_uint_eq(b, ok[i].bytes);
    }
    static const struct {
        uint32_t t;
        uint64_t n;
    } bad[] = {
        {BT_TYPE_Q4_0, 31}, {BT_TYPE_Q4_0, 48},  {BT_TYPE_Q4_1, 33},          {BT_TYPE_Q5_0, 1},
        {BT_TYPE_Q5_1, 16}, {BT_TYPE_Q4_K, 32},  {BT_TYPE_Q4_K, 576},         {BT_TYPE_Q5_K, 255},
        {BT_TYPE_Q6_K, 16}, {BT_TYPE_Q6_K, 257}, {BT_TYPE_Q4_0, UINT64_MAX},
    };
    /* (no overflow case: every one of these formats has under a byte per
     * element, so a row of any u64 n fits in u64 bytes) */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t b = 12345;
        ck_assert_int_eq(bt_type_row_bytes(bad[i].t, bad[i].n, &b), -1);
        ck_assert_uint_eq(b, 12345); /* untouched on failure */
    }
}
END_TEST

/* ==== dequant: hand-built blocks ==== */

/* Each test writes one block byte by byte, checks a few elements against
 * values worked out by hand (in the comments), then every element against
 * the formula (ref_elem). */

START_TEST(test_hand_q4_0)
{
    /* d = f16 0xbe00 = -1.5; qs[j] = j | (15 - j) << 4 */
    uint8_t b[18] = {0x00, 0xbe, 0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96,
                     0x87, 0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f};
    float y[32];
    bt_to_float_q4_0(y, b, 32);
    ck_assert(y[0] == 12.0f);   /* q 0: -1.5 * (0 - 8) */
    ck_assert(y[8] == -0.0f && signbit(y[8])); /* q 8: -1.5 * 0 = -0 */
    ck_assert(y[15] == -10.5f); /* q 15 */
    ck_assert(y[16] == -10.5f); /* high nibble of qs[0]: 15 */
    ck_assert(y[31] == 12.0f);  /* high nibble of qs[15]: 0 */
    ck_assert(y[20] == -4.5f);  /* high nibble of qs[4]: 11 -> -1.5 * 3 */
    check_decode(BT_TYPE_Q4_0, b, 1, "hand");
}
END_TEST

START_TEST(test_hand_q4_1)
{
    /* d = 0x3a00 = 0.75, m = 0xc500 = -5; qs[j] = 0x11 * j: element j and
     * j + 16 both have q = j; value 0.75 j - 5 */
    uint8_t b[20] = {0x00, 0x3a, 0x00, 0xc5};
    for (int j = 0; j < 16; j++)
        b[4 + j] = (uint8_t)(0x11 * j);
    float y[32];
    bt_to_float_q4_1(y, b, 32);
    for (int j = 0; j < 16; j++) {
        CHECK_MSG(y[j] == 0.75f * (float)j - 5.0f, "[%d] %g", j, (double)y[j]);
        CHECK_MSG(y[j + 16] == y[j], "[%d] %g", j + 16, (double)y[j + 16]);
    }
    ck_assert(y[31] == 6.25f);
    ck_assert(y[0] == -5.0f);
    /* d = 0x2e66 (0.0999755859375), m = 0x3c00 (1): q 7 -> 0.699829... + 1
     * rounds once in f32 */
    uint8_t c[20] = {0x66, 0x2e, 0x00, 0x3c};
    memset(c + 4, 0x77, 16);
    bt_to_float_q4_1(y, c, 32);
    ck_assert(y[3] == (float)(7 * 0.0999755859375 + 1.0));
    check_decode(BT_TYPE_Q4_1, b, 1, "hand");
    check_decode(BT_TYPE_Q4_1, c, 1, "hand 2");
}
END_TEST

/* qh = bytes {0x0f, 0xf0, 0x55, 0xaa} (u32 0xaa55f00f): bit e is the 5th
 * bit of element e; qs[j] = j | (15 - j) << 4 */
static void hand_q5_bits(uint8_t *qh, uint8_t *qs)
{
    qh[0] = 0x0f;
    qh[1] = 0xf0;
    qh[2] = 0x55;
    qh[3] = 0xaa;
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(j | (15 - j) << 4);
}

START_TEST(test_hand_q5_0)
{
    uint8_t b[22] = {0x00, 0xb8}; /* d = -0.5 */
    hand_q5_bits(b + 2, b + 6);
    float y[32];
    bt_to_float_q5_0(y, b, 32);
    ck_assert(y[0] == -0.0f);  /* q = 0 | 1 << 4 = 16 -> 0 (times -0.5: -0) */
    ck_assert(y[4] == 6.0f);   /* q = 4 (bit 4 of 0x0f is 0) -> -12 * -0.5 */
    ck_assert(y[3] == -1.5f);  /* q = 3 | 16 = 19 -> 3 */
    ck_assert(y[12] == -6.0f); /* q = 12 | 16 (bit 12: 0xf0 bit 4) = 28 -> 12 */
    ck_assert(y[17] == 1.0f);  /* q = 14 (qs[1] high), bit 17 (0x55 bit 1) 0 -> -2 */
    ck_assert(y[16] == -7.5f); /* q = 15 | 16 (0x55 bit 0) = 31 -> 15 */
    ck_assert(y[24] == 4.5f);  /* q = 7, bit 24 (0xaa bit 0) 0 -> -9 */
    ck_assert(y[25] == -3.0f); /* q = 6 | 16 (0xaa bit 1) = 22 -> 6 */
    check_decode(BT_TYPE_Q5_0, b, 1, "hand");
}
END_TEST

/* MXFP4: the first block of tiny-gptoss-golden's blk.0.ffn_gate_exps
 * (its specification's test vector, scale 2^-5), then the extreme
 * exponents (subnormal 2^-128, and 2^127), and the round trip of values
 * the format holds exactly. */
START_TEST(test_hand_mxfp4)
{
    const uint8_t b[17] = {0x7b, 0xc1, 0x10, 0x81, 0xc1, 0x15, 0xde, 0x0a, 0xc6,
                           0xb2, 0x74, 0x16, 0x94, 0xa0, 0xe6, 0x55, 0xe7};
    static const float want[32] = {
        0.03125f, 0, 0.03125f, 0.03125f, 0.1875f, -0.25f, -0.0625f, 0.25f, 0.0625f, 0.125f, 0.25f,
        0.125f, 0, 0.25f, 0.1875f, 0.375f, -0.125f, 0.03125f, 0, -0.125f, 0.03125f, -0.1875f, 0,
        -0.125f, -0.09375f, 0.375f, 0.03125f, -0.03125f, -0.0625f, -0.25f, 0.1875f, -0.25f};
    float y[32];
    bt_to_float_mxfp4(y, b, 32);
    for (int j = 0; j < 32; j++)
        ck_assert_msg(y[j] == want[j], "element %d: %g, want %g", j, (double)y[j],
                      (double)want[j]);
    uint8_t x[17] = {0x00, 0x71}; /* e = 0: code 1 is 2^-128, code 7 is 6 x 2^-127 */
    bt_to_float_mxfp4(y, x, 32);
    ck_assert(y[0] == ldexpf(1.0f, -128) && y[16] == ldexpf(12.0f, -128) && y[1] == 0.0f);
    x[0] = 0xff; /* e = 255: 2^127 */
    bt_to_float_mxfp4(y, x, 32);
    ck_assert(y[0] == ldexpf(1.0f, 127) && y[16] == ldexpf(12.0f, 127));
    uint8_t r[17];
    for (int j = 0; j < 32; j++)
        y[j] = want[j];
    bt_from_float_mxfp4(r, y, 32);
    float back[32];
    bt_to_float_mxfp4(back, r, 32);
    ck_assert_mem_eq(back, want, sizeof want);
}
END_TEST

START_TEST(test_hand_q5_1)
{
    uint8_t b[24] = {0x00, 0x34, 0x00, 0x42}; /* d = 0.25, m = 3 */
    hand_q5_bits(b + 4, b + 8);
    float y[32];
    bt_to_float_q5_1(y, b, 32);
    ck_assert(y[0] == 7.0f);   /* q = 16 */
    ck_assert(y[4] == 4.0f);   /* q = 4 */
    ck_assert(y[16] == 10.75f); /* q = 31 */
    ck_assert(y[25] == 8.5f);  /* q = 22 */
    ck_assert(y[31] == 7.0f);  /* q = 0 | bit 31 (0xaa bit 7 = 1) << 4 = 16 -> 7 */
    check_decode(BT_TYPE_Q5_1, b, 1, "hand");
}
END_TEST

/* The 12 scale bytes of the K tests, with the top bits in use:
 *   bytes 0-3 (sc 0-3 | top of sc 4-7): c1 42 83 04 -> sc 1 2 3 4, tops 3 1 2 0
 *   bytes 4-7 (m 0-3 | top of m 4-7):   45 86 c7 08 -> m 5 6 7 8, tops 1 2 3 0
 *   bytes 8-11 (low sc 4-7 | low m 4-7 << 4): 9a ab bc cd
 *     sc 4-7 = a|3<<4 b|1<<4 c|2<<4 d = 58 27 44 13
 *     m 4-7  = 9|1<<4 a|2<<4 b|3<<4 c = 25 42 59 12 */
static const uint8_t k_scales[12] = {0xc1, 0x42, 0x83, 0x04, 0x45, 0x86,
                                     0xc7, 0x08, 0x9a, 0xab, 0xbc, 0xcd};
static const int k_sc_want[8] = {1, 2, 3, 4, 58, 27, 44, 13};
static const int k_m_want[8] = {5, 6, 7, 8, 25, 42, 59, 12};

START_TEST(test_hand_q4_k)
{
    /* d = 0x3400 = 0.25, dmin = 0x2c00 = 0.0625, qs[i] = 7 i + 3 */
    uint8_t b[144] = {0x00, 0x34, 0x00, 0x2c};
    memcpy(b + 4, k_scales, 12);
    for (int i = 0; i < 128; i++)
        b[16 + i] = (uint8_t)(7 * i + 3);
    for (int j = 0; j < 8; j++) {
        ck_assert_int_eq(k_sc(k_scales, j), k_sc_want[j]);
        ck_assert_int_eq(k_min(k_scales, j), k_m_want[j]);
    }
    float y[256];
    bt_to_float_q4_k(y, b, 256);
    ck_assert(y[0] == 0.4375f);    /* qs[0] = 3 low: 0.25*1*3 - 0.0625*5 */
    ck_assert(y[32] == -0.375f);   /* qs[0] high 0, sub 1: 0 - 0.0625*6 */
    ck_assert(y[130] == 12.9375f); /* qs[66] = 0xd1 low 1, sub 4: 14.5 - 1.5625 */
    ck_assert(y[160] == 78.375f);  /* qs[64] = 0xc3 high 12, sub 5: 81 - 2.625 */
    ck_assert(y[255] == 22.0f);    /* qs[127] = 0x7c high 7, sub 7: 22.75 - 0.75 */
    check_decode(BT_TYPE_Q4_K, b, 1, "hand");
    /* the sub-block of each element: only sub-block j's scale set */
    for (int j = 0; j < 8; j++) {
        uint8_t c[144] = {0x00, 0x3c, 0x00, 0x00}; /* d = 1, dmin = 0 */
        int sc[8] = {0};
        sc[j] = 63;
        for (int k = 0; k < 4; k++) { /* pack as the layout says */
            c[4 + k] = (uint8_t)(sc[k] | (sc[k + 4] >> 4) << 6);
            c[4 + 8 + k] = (uint8_t)(sc[k + 4] & 15);
        }
        memset(c + 16, 0x11, 128); /* q = 1 everywhere */
        bt_to_float_q4_k(y, c, 256);
        for (int e = 0; e < 256; e++)
            CHECK_MSG(y[e] == (e / 32 == j ? 63.0f : 0.0f), "sub %d [%d] = %g", j, e, (double)y[e]);
    }
}
END_TEST

START_TEST(test_hand_q5_k)
{
    /* as Q4_K, plus qh[l] = 37 l + 0xa5: bit j of qh[e % 32] is the 5th
     * bit of element e in sub-block j */
    uint8_t b[176] = {0x00, 0x34, 0x00, 0x2c};
    memcpy(b + 4, k_scales, 12);
    for (int l = 0; l < 32; l++)
        b[16 + l] = (uint8_t)(37 * l + 0xa5);
    for (int i = 0; i < 128; i++)
        b[48 + i] = (uint8_t)(7 * i + 3);
    float y[256];
    bt_to_float_q5_k(y, b, 256);
    ck_assert(y[0] == 4.4375f);    /* 3 | (0xa5 bit 0 = 1) << 4 = 19: 4.75 - 0.3125 */
    ck_assert(y[32] == -0.375f);   /* 0 | (0xa5 bit 1 = 0): sub 1, 0 - 0.0625*6 */
    ck_assert(y[160] == 186.375f); /* 12 | (0xa5 bit 5 = 1) << 4 = 28: 189 - 2.625 */
    /* element 255: qs[127] high 7, qh[31] = 37*31 + 165 = 1312 = 0x20 (mod
     * 256), bit 7 = 0: 22.75 - 0.75 */
    ck_assert(y[255] == 22.0f);
    check_decode(BT_TYPE_Q5_K, b, 1, "hand");
    /* one element at a time: setting bit j of qh[l] moves element 32 j + l
     * alone, by 16 steps */
    uint8_t c[176] = {0x00, 0x3c, 0x00, 0x00}; /* d = 1, dmin = 0 */
    memset(c + 4, 0x01, 4);                    /* sc 0-3 = 1 */
    memset(c + 12, 0x01, 4);                   /* sc 4-7 = 1, m 4-7 = 0 */
    for (int e = 0; e < 256; e += 7) {
        memset(c + 16, 0, 32);
        c[16 + e % 32] = (uint8_t)(1 << (e / 32));
        bt_to_float_q5_k(y, c, 256);
        for (int k = 0; k < 256; k++)
            CHECK_MSG(y[k] == (k == e ? 16.0f : 0.0f), "bit for %d: [%d] = %g", e, k, (double)y[k]);
    }
}
END_TEST

START_TEST(test_hand_q6_k)
{
    /* ql[i] = 11 i + 5, qh[i] = 29 i + 7, d = 0x3000 = 0.125, int8 scales
     * with both signs and the extremes */
    static const int8_t sc[16] = {1, -2, 3, -4, 5, -6, 7, -8, 127, -128, 50, -50, 100, -100, 0, 9};
    uint8_t b[210];
    for (int i = 0; i < 128; i++)
        b[i] = (uint8_t)(11 * i + 5);
    for (int i = 0; i < 64; i++)
        b[128 + i] = (uint8_t)(29 * i + 7);
    memcpy(b + 192, sc, 16);
    b[208] = 0x00;
    b[209] = 0x30;
    float y[256];
    bt_to_float_q6_k(y, b, 256);
    ck_assert(y[0] == 2.625f);  /* ql[0] = 5, qh[0] = 7 bits 0-1 = 3: q 53 - 32 = 21, sc 1 */
    /* element 200: half 1, group 2, l 8: ql[72] = 0x1d high 1, qh[40] = 0x8f
     * bits 4-5 = 0: q 1 - 32 = -31, sc[12] = 100 */
    ck_assert(y[200] == -387.5f);
    /* element 153: half 1, group 0, l 25: ql[89] = 0xd8 low 8, qh[57] = 0x7c
     * bits 0-1 = 0: q 8 - 32 = -24, sc[9] = -128 */
    ck_assert(y[153] == 384.0f);
    /* element 100: half 0, group 3, l 4: ql[36] = 0x91 high 9, qh[4] = 0x7b
     * bits 6-7 = 1: q 25 - 32 = -7, sc[6] = 7 */
    ck_assert(y[100] == -6.125f);
    for (int e = 224; e < 240; e++) /* sub-block 14 has scale 0 */
        ck_assert(y[e] == 0.0f);
    check_decode(BT_TYPE_Q6_K, b, 1, "hand");
}
END_TEST

/* ==== dequant: random blocks ==== */

/* nb random blocks of `type` (f16 fields kept finite: an all-ones exponent
 * loses its top bit). The generator is reproduced in the known-answer
 * comment below, so keep the two in step. */
static uint8_t *random_blocks(uint32_t type, int nb, uint64_t seed)
{
    const size_t bb = bt_type_info(type)->block_bytes;
    uint8_t *p = xmalloc((size_t)nb * bb);
    rng_t r = rng_make(seed);
    for (size_t i = 0; i < (size_t)nb * bb; i++)
        p[i] = (uint8_t)(rng_next(&r) >> 56);
    for (int b = 0; b < nb; b++)
        for (const int *f = f16_fields(type); *f >= 0; f++) {
            uint8_t *h = p + (size_t)b * bb + *f;
            if ((h[1] & 0x7c) == 0x7c)
                h[1] &= 0xbf;
        }
    return p;
}

START_TEST(test_random_blocks)
{
    const uint32_t type = q_types[_i];
    uint8_t *p = random_blocks(type, 300, 77 + type);
    check_decode(type, p, 300, "random");
    /* a row decodes as its blocks do, one at a time */
    const bt_type_info_t *ti = bt_type_info(type);
    const int bs = (int)ti->block_size;
    float *row = xmalloc(300 * (size_t)bs * sizeof(float)), blk[256];
    ti->to_float(row, p, 300 * (int64_t)bs);
    for (int b = 0; b < 300; b++) {
        ti->to_float(blk, p + (size_t)b * ti->block_bytes, bs);
        CHECK_MSG(memcmp(blk, row + (size_t)b * bs, (size_t)bs * sizeof(float)) == 0,
                  "%s: block %d alone differs", ti->name, b);
    }
    free(row);
    free(p);
}
END_TEST

/* FNV-1a over the f32 bit patterns. */
static uint64_t hash_floats(const float *y, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t b = f32_bits(y[i]);
        for (int k = 0; k < 4; k++) {
            h ^= (b >> (8 * k)) & 0xff;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

/* Known answers: random_blocks(type, 64, 1000 + type) dequantized by
 * gguf-py 0.19.0 (gguf.quants.dequantize, llama.cpp's Python reference),
 * hashed with hash_floats. Generated with:
 *
 *   M = (1 << 64) - 1
 *   def gen(seed, n):                      # rng_make + rng_next >> 56
 *       s = (seed * 0x9e3779b97f4a7c15 + 0x2545f4914f6cdd1d) & M or 1
 *       for _ in range(n):
 *           s ^= s >> 12; s ^= (s << 25) & M; s ^= s >> 27
 *           yield ((s * 0x2545f4914f6cdd1d) & M) >> 56
 *   raw = np.array(list(gen(1000 + t, 64 * bb)), np.uint8).reshape(64, bb)
 *   for o in offsets of the f16 fields:       # as random_blocks
 *       bad = (raw[:, o + 1] & 0x7c) == 0x7c
 *       raw[bad, o + 1] &= 0xbf
 *   y = gguf.quants.dequantize(raw.reshape(-1), t).astype(np.float32)
 *   fnv1a64(y.tobytes())                      # as hash_floats
 */
START_TEST(test_known_answers)
{
    static const struct {
        uint32_t t;
        uint64_t hash;
    } kat[] = {
        {BT_TYPE_Q4_0, 0x15b542c584dcb4b4ull},
        {BT_TYPE_Q4_1, 0xb33c94ac5fc6d920ull},
        {BT_TYPE_Q5_0, 0x8dd69b5e71449c88ull},
        {BT_TYPE_Q5_1, 0x6b5af841d3ba4d5bull},
        {BT_TYPE_Q8_0, 0x217cc89f45f883e7ull},
        {BT_TYPE_Q4_K, 0x3227c306dce1cac4ull},
        {BT_TYPE_Q5_K, 0x33a03fdfc9587faeull},
        {BT_TYPE_Q6_K, 0xb335c0c1a8508dacull},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        const bt_type_info_t *ti = bt_type_info(kat[i].t);
        const size_t n = 64 * (size_t)ti->block_size;
        uint8_t *p = random_blocks(kat[i].t, 64, 1000 + kat[i].t);
        float *y = xmalloc(n * sizeof(float));
        ti->to_float(y, p, (int64_t)n);
        uint64_t h = hash_floats(y, n);
        CHECK_MSG(h == kat[i].hash, "%s: hash 0x%016llx, gguf-py gives 0x%016llx", ti->name,
                  (unsigned long long)h, (unsigned long long)kat[i].hash);
        free(y);
        free(p);
    }
}
END_TEST

/* ==== quant: quantize -> dequantize error bounds ==== */

/* Each format's bound, from the block's data and its stored f16 scales
 * (quants.c derives them at each quantizer):
 *
 *   q4_0, q5_0 (levels -nq .. nq - 1, nq = 8, 16): s = the smallest step
 *     that fits the block, min over the sign of the step of
 *     max(neg / nq, pos / (nq - 1)) (pos, neg: largest value, largest
 *     negated value, >= 0); the stored |d| is s rounded up to f16:
 *       s <= |d| <= s (1 + 2^-10) + 2^-24,   |err| <= |d| / 2
 *   q4_1, q5_1 (levels 0 .. nl, nl = 15, 31): m = min rounded down to f16,
 *       min - m <= |min| 2^-10 + 2^-24,  d <= (max - m) / nl (1 + 2^-10) + 2^-24,
 *       |err| <= d / 2 + u |y|     (u = 2^-24: the f32 "+ m")
 *   q4_k, q5_k (nl = 15, 31): sub-block j of 32 with range [lo_j, hi_j]
 *     needs the offset mn_j = max(0, -lo_j) and the span r_j = hi_j + mn_j;
 *       dmin <= max_j mn_j / 63 (1 + 2^-10) + 2^-24
 *       d    <= (max_j r_j + dmin) / (63 nl) (1 + 2^-10) + 2^-24
 *       |err| <= S_j / 2 + u |y|,  S_j = (r_j + dmin) / nl + d
 *     (the sub-block step d sc_j is at most one d above the span's need,
 *     which is at most one dmin above r_j)
 *   q6_k (levels -32 .. 31, sub-blocks of 16): s_j as for q4_0 with nq 32;
 *       d <= max_j s_j / 127 (1 + 2^-10) + 2^-24
 *       |err| <= (s_j + d) / 2
 * Each bound gets a relative 1e-9 for the double arithmetic of the
 * quantizer (the dequantization itself is exact but for the f32 +/-). */

#define REL (1.0 + 1e-9)
#define F16_UP(v) ((v) * (1.0 + 0x1p-10) * REL + 0x1p-24) /* v rounded up to f16, at most */

static double opt_step(const float *x, int n, int nq)
{
    double pos = 0.0, neg = 0.0;
    for (int i = 0; i < n; i++) {
        if (x[i] > pos)
            pos = x[i];
        if (-x[i] > neg)
            neg = -x[i];
    }
    double a = fmax(neg / nq, pos / (nq - 1)), b = fmax(pos / nq, neg / (nq - 1));
    return fmin(a, b);
}

static void range(const float *x, int n, double *lo, double *hi)
{
    *lo = *hi = x[0];
    for (int i = 1; i < n; i++) {
        *lo = fmin(*lo, (double)x[i]);
        *hi = fmax(*hi, (double)x[i]);
    }
}

/* Checks the bound of one block; x its input, y its output. */
static void check_block_bound(uint32_t type, const uint8_t *blk, const float *x, const float *y,
                              const char *what, int64_t bi)
{
    const char *name = bt_type_info(type)->name;
    double bound[256]; /* per element, before the u |y| term */
    double u_term = 0.0;
    switch (type) {
    case BT_TYPE_Q4_0:
    case BT_TYPE_Q5_0: {
        const int nq = type == BT_TYPE_Q4_0 ? 8 : 16;
        const double s = opt_step(x, 32, nq), d = fabs(h2f(blk));
        CHECK_MSG(d >= s * (1 - 1e-12) && d <= F16_UP(s), "%s %s block %lld: |d| %g for step %g",
                  name, what, (long long)bi, d, s);
        for (int e = 0; e < 32; e++)
            bound[e] = d / 2 * REL;
        break;
    }
    case BT_TYPE_Q4_1:
    case BT_TYPE_Q5_1: {
        const int nl = type == BT_TYPE_Q4_1 ? 15 : 31;
        double lo, hi;
        range(x, 32, &lo, &hi);
        const double d = h2f(blk), m = h2f(blk + 2);
        CHECK_MSG(m <= lo && lo - m <= fabs(lo) * 0x1p-10 + 0x1p-24,
                  "%s %s block %lld: m %g for min %g", name, what, (long long)bi, m, lo);
        CHECK_MSG(d >= 0 && d <= F16_UP((hi - m) / nl), "%s %s block %lld: d %g for [%g, %g]",
                  name, what, (long long)bi, d, lo, hi);
        for (int e = 0; e < 32; e++)
            bound[e] = d / 2 * REL;
        u_term = 1.0;
        break;
    }
    case BT_TYPE_Q4_K:
    case BT_TYPE_Q5_K: {
        const int nl = type == BT_TYPE_Q4_K ? 15 : 31;
        double mn[8], r[8], mn_max = 0, r_max = 0;
        for (int j = 0; j < 8; j++) {
            double lo, hi;
            range(x + 32 * j, 32, &lo, &hi);
            mn[j] = fmax(0.0, -lo);
            r[j] = hi + mn[j];
            mn_max = fmax(mn_max, mn[j]);
            r_max = fmax(r_max, r[j]);
        }
        const double d = h2f(blk), dmin = h2f(blk + 2);
        CHECK_MSG(dmin >= 0 && dmin <= F16_UP(mn_max / 63), "%s %s block %lld: dmin %g for %g",
                  name, what, (long long)bi, dmin, mn_max);
        CHECK_MSG(d >= 0 && d <= F16_UP((r_max + dmin) / (63 * nl)),
                  "%s %s block %lld: d %g for span %g", name, what, (long long)bi, d, r_max);
        for (int e = 0; e < 256; e++)
            bound[e] = ((r[e / 32] + dmin) / nl + d) / 2 * REL;
        u_term = 1.0;
        break;
    }
    case BT_TYPE_Q6_K: {
        double s[16], s_max = 0;
        for (int j = 0; j < 16; j++) {
            s[j] = opt_step(x + 16 * j, 16, 32);
            s_max = fmax(s_max, s[j]);
        }
        const double d = h2f(blk + 208);
        CHECK_MSG(d >= 0 && d <= F16_UP(s_max / 127), "%s %s block %lld: d %g for step %g", name,
                  what, (long long)bi, d, s_max);
        for (int e = 0; e < 256; e++)
            bound[e] = (s[e / 16] + d) / 2 * REL;
        break;
    }
    default:
        ck_abort_msg("no bound for type %u", type);
    }
    const int bs = (int)bt_type_info(type)->block_size;
    for (int e = 0; e < bs; e++) {
        double err = fabs((double)x[e] - y[e]);
        double b = bound[e] + u_term * U * fabs((double)y[e]);
        CHECK_MSG(err <= b, "%s %s block %lld [%d]: x %.9g -> %.9g, err %.3g > bound %.3g", name,
                  what, (long long)bi, e, (double)x[e], (double)y[e], err, b);
    }
}

/* Quantizes x (n elements), dequantizes, checks every block's bound. */
static void check_roundtrip(uint32_t type, const float *x, int64_t n, const char *what)
{
    const bt_type_info_t *ti = bt_type_info(type);
    const int64_t nb = n / ti->block_size;
    uint8_t *q = xmalloc((size_t)nb * ti->block_bytes);
    float *y = xmalloc((size_t)n * sizeof(float));
    memset(q, 0xa5, (size_t)nb * ti->block_bytes); /* every byte must be written */
    ti->from_float(q, x, n);
    ti->to_float(y, q, n);
    for (int64_t b = 0; b < nb; b++)
        check_block_bound(type, q + b * ti->block_bytes, x + b * ti->block_size,
                          y + b * ti->block_size, what, b);
    /* quantizing again gives the same bytes (deterministic, no state) */
    uint8_t *q2 = xmalloc((size_t)nb * ti->block_bytes);
    memset(q2, 0x5a, (size_t)nb * ti->block_bytes);
    ti->from_float(q2, x, n);
    CHECK_MSG(memcmp(q, q2, (size_t)nb * ti->block_bytes) == 0, "%s %s: not deterministic",
              ti->name, what);
    free(q2);
    free(y);
    free(q);
}

enum { RT_N = 8 * 256 }; /* 8 super-blocks, 64 legacy blocks */

START_TEST(test_roundtrip_random)
{
    const uint32_t type = q_types[_i];
    float *x = xmalloc(RT_N * sizeof(float));
    rng_t r = rng_make(500 + type);
    static const float mags[] = {1e-3f, 0.02f, 1.0f, 300.0f};
    for (size_t m = 0; m < sizeof mags / sizeof mags[0]; m++) {
        fill(x, RT_N, &r, -mags[m], mags[m]);
        check_roundtrip(type, x, RT_N, "uniform");
    }
    /* bell-shaped like real weights (sum of 4 uniforms), std ~0.02 */
    for (int i = 0; i < RT_N; i++)
        x[i] = 0.02f * (rng_unif(&r, -1, 1) + rng_unif(&r, -1, 1) + rng_unif(&r, -1, 1) +
                        rng_unif(&r, -1, 1)) * 0.866f;
    check_roundtrip(type, x, RT_N, "bell");
    /* one-signed and offset data */
    fill(x, RT_N, &r, 0.5f, 1.5f);
    check_roundtrip(type, x, RT_N, "positive");
    fill(x, RT_N, &r, -3.0f, -1.0f);
    check_roundtrip(type, x, RT_N, "negative");
    fill(x, RT_N, &r, 100.0f, 101.0f);
    check_roundtrip(type, x, RT_N, "offset");
    /* every 16 values a different magnitude: sub-blocks (and legacy
     * blocks) of very different ranges in one super-block */
    for (int i = 0; i < RT_N; i++) {
        float m = powf(10.0f, (float)((i / 16) % 6) - 3.0f);
        x[i] = rng_unif(&r, -m, m);
    }
    check_roundtrip(type, x, RT_N, "mixed ranges");
    /* sub-blocks of one sign each, alternating */
    for (int i = 0; i < RT_N; i++)
        x[i] = ((i / 32) % 3 == 0 ? -1.0f : 1.0f) * rng_unif(&r, 0.1f, 2.0f);
    check_roundtrip(type, x, RT_N, "signed sub-blocks");
    /* small values: f16 scales near and below the normal range */
    static const float tiny[] = {1e-4f, 1e-6f, 1e-9f, 1e-30f};
    for (size_t m = 0; m < sizeof tiny / sizeof tiny[0]; m++) {
        fill(x, RT_N, &r, -tiny[m], tiny[m]);
        check_roundtrip(type, x, RT_N, "tiny");
    }
    free(x);
}
END_TEST

START_TEST(test_roundtrip_special)
{
    const uint32_t type = q_types[_i];
    const bt_type_info_t *ti = bt_type_info(type);
    float *x = xmalloc(RT_N * sizeof(float));
    float *y = xmalloc(RT_N * sizeof(float));
    uint8_t *q = xmalloc((size_t)(RT_N / ti->block_size) * ti->block_bytes);
    rng_t r = rng_make(600 + type);

    /* all zero: exact zeros, no nan */
    memset(x, 0, RT_N * sizeof(float));
    x[5] = -0.0f;
    check_roundtrip(type, x, RT_N, "zero");
    ti->from_float(q, x, RT_N);
    ti->to_float(y, q, RT_N);
    for (int i = 0; i < RT_N; i++)
        CHECK_MSG(y[i] == 0.0f, "%s zero [%d] -> %g", ti->name, i, (double)y[i]);

    /* zero blocks, zero sub-blocks and zero super-blocks among non-zero ones */
    fill(x, RT_N, &r, -1.0f, 1.0f);
    for (int i = 0; i < RT_N; i++)
        if ((i / 32) % 3 == 1 || (i >= 512 && i < 768) || (i / 16) % 7 == 3)
            x[i] = 0.0f;
    check_roundtrip(type, x, RT_N, "some zero");
    ti->from_float(q, x, RT_N);
    ti->to_float(y, q, RT_N);
    for (int i = 512; i < 768; i++) /* a whole super-block of zeros */
        CHECK_MSG(y[i] == 0.0f, "%s zero block [%d] -> %g", ti->name, i, (double)y[i]);

    /* constant blocks */
    static const float consts[] = {1.0f, -2.5f, 0.1f, -0.1f, 1000.3f, 1e-6f, -7.0f, 65504.0f};
    for (size_t c = 0; c < sizeof consts / sizeof consts[0]; c++) {
        for (int i = 0; i < RT_N; i++)
            x[i] = consts[c];
        check_roundtrip(type, x, RT_N, "constant");
        /* a constant the f16 scale can hit exactly comes back exactly in
         * the legacy formats (the K formats spread it over 6-bit scales) */
        if (ti->block_size == 32 && (consts[c] == 1.0f || consts[c] == -2.5f)) {
            ti->from_float(q, x, RT_N);
            ti->to_float(y, q, RT_N);
            for (int i = 0; i < RT_N; i++)
                CHECK_MSG(y[i] == consts[c], "%s constant %g -> %g", ti->name, (double)consts[c],
                          (double)y[i]);
        }
    }
    /* constant sub-blocks of different values */
    for (int i = 0; i < RT_N; i++)
        x[i] = (float)((i / 32) % 9) - 4.0f;
    check_roundtrip(type, x, RT_N, "constant sub-blocks");

    /* one large outlier per block (of 32) at a moving position, both signs */
    fill(x, RT_N, &r, -0.01f, 0.01f);
    for (int b = 0; b < RT_N / 32; b++)
        x[32 * b + (b * 7) % 32] = (b & 1) ? -50.0f : 50.0f;
    check_roundtrip(type, x, RT_N, "outlier");
    /* one outlier per super-block only */
    fill(x, RT_N, &r, -0.01f, 0.01f);
    for (int b = 0; b < RT_N / 256; b++)
        x[256 * b + (b * 37) % 256] = (b & 1) ? 20.0f : -20.0f;
    check_roundtrip(type, x, RT_N, "rare outlier");
    ti->from_float(q, x, RT_N);
    ti->to_float(y, q, RT_N);
    for (int b = 0; b < RT_N / 256; b++) { /* the outlier itself within 2^-9 */
        int i = 256 * b + (b * 37) % 256;
        CHECK_MSG(fabsf(y[i] - x[i]) <= 20.0f * 0x1p-9f + 20.0f / 62,
                  "%s outlier %g -> %g", ti->name, (double)x[i], (double)y[i]);
    }
    free(q);
    free(y);
    free(x);
}
END_TEST

/* ==== matmul ==== */

static bt_scratch_t scratch_make(int64_t max_n_in, int n_threads)
{
    bt_scratch_t s;
    s.per_thread = bt_scratch_floats(max_n_in, 1);
    s.n_threads = n_threads;
    s.buf = xmalloc(s.per_thread * (size_t)n_threads * sizeof(float));
    return s;
}

/* Any summation order of n products is within gamma(n + 16) sum |w x| of
 * the exact dot (as in check_kernels.c); the two kernels within twice. */
static double dot_bound(int64_t n, double sabs) { return (double)(n + 17) * U * 1.01 * sabs; }

/* Bound on the 8-bit activation path's distance from the exact product of
 * row o with token row xt: each element of a 32-block moves by at most half
 * its block's step d = max|x| / 127, plus 127 times the step's rounding to
 * f16 (d 2^-11, at least 2^-25 where it is subnormal), and a few ulps;
 * then the float sum of the perturbed products. */
static double q8_bound(const float *wrow, const float *xt, int64_t n_in, double sabs)
{
    double moved = 0;
    for (int64_t b = 0; b < n_in; b += 32) {
        double amax = 0, sw = 0;
        for (int64_t k = b; k < b + 32; k++) {
            amax = fmax(amax, fabs(xt[k]));
            sw += fabs(wrow[k]);
        }
        moved += (amax / 127 * (0.5 + 127.0 / 2048) + 127 * 0x1p-25 + amax * 1e-6) * sw;
    }
    return moved + dot_bound(n_in, sabs + moved);
}

/* Where bt_ops_cpu has a packed layout for W: the product from it has the
 * bits of the product from the blocks (out). */
static void check_packed_same(const bt_matrix_t *w, const float *x, int n_tok,
                              const bt_scratch_t *s, const float *out)
{
    const size_t n_o = (size_t)n_tok * (size_t)w->n_out;
    void *packed = tu_pack(w);
    if (packed == NULL)
        return;
    bt_matrix_t wp = *w;
    wp.packed = packed;
    float *out_p = xmalloc(n_o * sizeof(float));
    memset(out_p, 0xff, n_o * sizeof(float));
    bt_ops_cpu.matmul(out_p, &wp, x, n_tok, s);
    for (size_t i = 0; i < n_o; i++)
        CHECK_MSG(memcmp(&out_p[i], &out[i], sizeof(float)) == 0,
                  "%s packed: n_in %lld n_out %lld n_tok %d threads %d: element %zu %.9g, "
                  "from the blocks %.9g", bt_type_info(w->type)->name, (long long)w->n_in,
                  (long long)w->n_out, n_tok, s->n_threads, i, out_p[i], out[i]);
    free(out_p);
    free(packed);
}

/* bt_ops_exact and bt_ops_ref within rounding of the exact product;
 * bt_ops_cpu too, or, where it quantizes the activations, within
 * q8_bound of it. */
static void mm_case(uint32_t type, int64_t n_in, int64_t n_out, int n_tok, uint64_t pad, rng_t *r)
{
    wmat_t w = wmat_make(type, n_in, n_out, pad, r);
    const size_t n_x = (size_t)n_tok * (size_t)n_in, n_o = (size_t)n_tok * (size_t)n_out;
    float *x = xmalloc(n_x * sizeof(float));
    float *out_ref = xmalloc(n_o * sizeof(float));
    float *out_cpu = xmalloc(n_o * sizeof(float));
    fill(x, n_x, r, -1.0f, 1.0f);
    bt_scratch_t s1 = scratch_make(n_in, 1);
    memset(out_ref, 0xff, n_o * sizeof(float));
    bt_ops_ref.matmul(out_ref, &w.m, x, n_tok, &s1);
    const bt_ops_t *ops[] = {&bt_ops_exact, &bt_ops_cpu};
    for (int nth = 1; nth <= 3; nth++)
        for (int oi = 0; oi < 2; oi++) {
            const bool q8 = ops[oi] == &bt_ops_cpu && !bt_ops_cpu_is_exact(type, n_in);
            bt_scratch_t s = scratch_make(n_in, nth);
            memset(out_cpu, 0xff, n_o * sizeof(float));
            ops[oi]->matmul(out_cpu, &w.m, x, n_tok, &s);
            if (q8)
                check_packed_same(&w.m, x, n_tok, &s, out_cpu);
            for (int t = 0; t < n_tok; t++)
                for (int64_t o = 0; o < n_out; o++) {
                    const float *xt = x + (size_t)t * n_in, *wr = w.wf + o * n_in;
                    double sum = 0, sabs = 0;
                    for (int64_t k = 0; k < n_in; k++) {
                        double p = (double)wr[k] * xt[k];
                        sum += p;
                        sabs += fabs(p);
                    }
                    const double bound = dot_bound(n_in, sabs) + 1e-30;
                    const double cb = q8 ? q8_bound(wr, xt, n_in, sabs) : bound;
                    const size_t at = (size_t)t * n_out + (size_t)o;
                    const double c = out_cpu[at], rf = out_ref[at];
                    CHECK_MSG(fabs(c - rf) <= bound + cb && fabs(c - sum) <= cb &&
                                  fabs(rf - sum) <= bound,
                              "%s %s: threads %d pad %llu n_in %lld n_out %lld t %d row %lld: "
                              "%.9g ref %.9g exact %.9g (bound %.3g)",
                              ops[oi]->name, bt_type_info(type)->name, nth,
                              (unsigned long long)pad, (long long)n_in, (long long)n_out, t,
                              (long long)o, c, rf, sum, cb);
                }
            free(s.buf);
        }
    free(s1.buf);
    free(out_cpu);
    free(out_ref);
    free(x);
    wmat_free(&w);
}

static void matmul_cases(uint32_t type)
{
    const int64_t bs = bt_type_info(type)->block_size;
    /* for the 32-blocks: odd block counts (exact path), even (8-bit path) */
    const int64_t n_ins[] = {bs, 2 * bs, 3 * bs, bs == 32 ? 6 * bs : 4 * bs};
    static const int64_t n_outs[] = {1, 3, 17, 33};
    static const int n_toks[] = {1, 2, 5, 13};
    rng_t r = rng_make(700 + type);
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 4; c++)
                mm_case(type, n_ins[a], n_outs[b], n_toks[c], 0, &r);
    /* rows farther apart than needed (padding holds nan), longer rows */
    mm_case(type, 8 * bs, 50, 7, 64, &r);
    mm_case(type, 2 * bs, 19, 4, 8, &r);
    mm_case(type, bs == 32 ? 1024 : 4096, 20, 3, 0, &r);
    if (bs == 32) /* 8-token panels, more than one 32-token chunk, a partial panel */
        mm_case(type, 2 * bs, 37, 41, 0, &r);
}

START_TEST(test_matmul) { matmul_cases(q_types[_i]); }
END_TEST
/* MXFP4 (no quantizer bound to test, so not in q_types): the same products */
START_TEST(test_matmul_mxfp4) { matmul_cases(BT_TYPE_MXFP4); }
END_TEST

/* Q8_0's exact paths are in check_kernels; here for the 8-bit path */
START_TEST(test_matmul_q8_0) { matmul_cases(BT_TYPE_Q8_0); }
END_TEST

/* ==== the same bits on AVX-512 and AVX2 ====
 *
 * bt_ops_cpu's paths for these types sum exactly in integers (8-bit
 * activations) or run one FMA chain per output (float weights), the same
 * sequence per output in both builds: packed (as a pipeline gives it) or
 * not, the avx512 and avx2 builds give the same bits. */

static const uint32_t isa_types[] = {BT_TYPE_F32,  BT_TYPE_F16,  BT_TYPE_BF16,
                                     BT_TYPE_Q4_0, BT_TYPE_Q4_1, BT_TYPE_Q5_0,
                                     BT_TYPE_Q8_0, BT_TYPE_Q4_K, BT_TYPE_Q5_K,
                                     BT_TYPE_Q6_K, BT_TYPE_MXFP4};
#define N_ISA_TYPES ((int)(sizeof isa_types / sizeof isa_types[0]))

/* out = W x with the cpu ops of isa, from packed weights or the blocks */
static void cpu_product(bt_isa_t isa, bool packed, const bt_matrix_t *w, const float *x,
                        int n_tok, int n_threads, float *out)
{
    ck_assert(bt_isa_select(isa));
    CHECK_MSG(!bt_ops_cpu_is_exact(w->type, w->n_in), "%s: %s has no own path for it",
              bt_type_info(w->type)->name, bt_isa_name(isa));
    bt_matrix_t wp = *w;
    wp.packed = packed ? tu_pack(w) : NULL;
    ck_assert(!packed || wp.packed != NULL);
    bt_scratch_t s = scratch_make(w->n_in, n_threads);
    memset(out, 0xff, (size_t)n_tok * (size_t)w->n_out * sizeof(float));
    bt_ops_cpu.matmul(out, &wp, x, n_tok, &s);
    free(s.buf);
    free((void *)wp.packed);
}

START_TEST(test_isa_same)
{
    const uint32_t type = isa_types[_i];
    const char *missing = bt_isa_missing(BT_ISA_TOP);
    missing = missing ? missing : bt_isa_missing(BT_ISA_MID);
    if (missing != NULL) {
        fprintf(stderr, "SKIP: isa_same (%s vs %s bits): this CPU lacks %s\n",
                bt_isa_name(BT_ISA_TOP), bt_isa_name(BT_ISA_MID), missing);
        return;
    }
    const bt_isa_t was = bt_isa_active();
    /* float types: rows long enough (88 KiB or 44 KiB panels) for the
     * two-panel decode kernel of cpu_fpanel.c; the others 320 / 512 */
    const bool fl = type == BT_TYPE_F32 || type == BT_TYPE_F16 || type == BT_TYPE_BF16;
    const int64_t n_in = fl ? 1408 : bt_type_info(type)->block_size == 256 ? 512 : 320;
    const int64_t n_out = 37;
    static const int n_toks[] = {1, 5, 13, 41}; /* 41: two 32-token chunks */
    rng_t r = rng_make(4100 + type);
    wmat_t w = wmat_make(type, n_in, n_out, 0, &r);
    const size_t n_o = 41 * (size_t)n_out;
    float *x = xmalloc(41 * (size_t)n_in * sizeof(float));
    float *want = xmalloc(n_o * sizeof(float)), *got = xmalloc(n_o * sizeof(float));
    fill(x, 41 * (size_t)n_in, &r, -1.0f, 1.0f);
    for (int i = 0; i < 4; i++)
        for (int nth = 1; nth <= 2; nth++) {
            const int nt = n_toks[i];
            cpu_product(BT_ISA_TOP, true, &w.m, x, nt, nth, want);
            for (int v = 0; v < 3; v++) { /* mid packed, mid unpacked, top unpacked */
                cpu_product(v < 2 ? BT_ISA_MID : BT_ISA_TOP, v == 0, &w.m, x, nt, nth, got);
                for (size_t e = 0; e < (size_t)nt * (size_t)n_out; e++)
                    CHECK_MSG(f32_bits(got[e]) == f32_bits(want[e]),
                              "%s %s %s, %d tokens, %d threads: element %zu %a, %s packed %a",
                              bt_type_info(type)->name, bt_isa_name(v < 2 ? BT_ISA_MID : BT_ISA_TOP),
                              v == 0 ? "packed" : "unpacked", nt, nth, e, (double)got[e],
                              bt_isa_name(BT_ISA_TOP), (double)want[e]);
            }
        }
    bt_isa_select(was);
    free(got);
    free(want);
    free(x);
    wmat_free(&w);
}
END_TEST

/* MXFP4's scale 2^(e - 128) for every e, from 2^-128 (subnormal) to 2^127,
 * in the 8-bit path of each build, packed and not: row e of W holds 0.5
 * at element 0 of a block with exponent e (and zeros), x is 1 there (and
 * 0), so the product is 2^(e - 128), give or take the f16 rounding of
 * the activation's step. */
START_TEST(test_mxfp4_scales)
{
    const int64_t n_in = 64, n_out = 256;
    const size_t rb = 2 * sizeof(bt_block_mxfp4_t);
    uint8_t *blocks = xmalloc((size_t)n_out * rb);
    memset(blocks, 0, (size_t)n_out * rb);
    for (int64_t o = 0; o < n_out; o++) {
        bt_block_mxfp4_t *b = (bt_block_mxfp4_t *)(void *)(blocks + (size_t)o * rb);
        b[0].e = (uint8_t)o;
        b[0].qs[0] = 0x01; /* code 1: 0.5 */
        b[1].e = 127;
    }
    const bt_matrix_t w = {.type = BT_TYPE_MXFP4, .n_in = n_in, .n_out = n_out,
                           .row_bytes = rb, .data = blocks};
    float x[3 * 64] = {0}, out[3 * 256];
    for (int t = 0; t < 3; t++)
        x[t * n_in] = 1.0f;
    const bt_isa_t was = bt_isa_active();
    static const bt_isa_t isas[] = {BT_ISA_TOP, BT_ISA_MID};
    for (int i = 0; i < 2; i++) {
        if (bt_isa_missing(isas[i]) != NULL)
            continue;
        for (int packed = 0; packed < 2; packed++)
            for (int nt = 1; nt <= 3; nt += 2) {
                cpu_product(isas[i], packed, &w, x, nt, 1, out);
                for (int t = 0; t < nt; t++)
                    for (int64_t e = 0; e < n_out; e++) {
                        const double want = ldexp(1.0, (int)e - 128), got = out[t * n_out + e];
                        CHECK_MSG(fabs(got - want) <= 1e-3 * want,
                                  "%s %s, %d tokens: e %lld: %a, want %a",
                                  bt_isa_name(isas[i]), packed ? "packed" : "unpacked", nt,
                                  (long long)e, got, want);
                    }
            }
    }
    bt_isa_select(was);
    free(blocks);
}
END_TEST

/* The exact set's products give the same bits in the top and middle
 * builds (AVX-512 and AVX2, or i8mm and dotprod): 16 lanes in AVX-512's
 * summing tree in both, whatever their tile sizes, with a scalar tail
 * (n_in 1411 for the float types) and the one-token fused path of the
 * AVX-512 build. */
static const uint32_t exact_types[] = {BT_TYPE_F32,  BT_TYPE_F16,  BT_TYPE_BF16,
                                       BT_TYPE_Q4_0, BT_TYPE_Q4_1, BT_TYPE_Q5_0,
                                       BT_TYPE_Q5_1, BT_TYPE_Q8_0, BT_TYPE_Q4_K,
                                       BT_TYPE_Q5_K, BT_TYPE_Q6_K, BT_TYPE_MXFP4};
#define N_EXACT_TYPES ((int)(sizeof exact_types / sizeof exact_types[0]))

START_TEST(test_exact_isa_same)
{
    const uint32_t type = exact_types[_i];
    const char *missing = bt_isa_missing(BT_ISA_TOP);
    missing = missing ? missing : bt_isa_missing(BT_ISA_MID);
    if (missing != NULL) {
        fprintf(stderr, "SKIP: exact_isa_same (%s vs %s bits): this CPU lacks %s\n",
                bt_isa_name(BT_ISA_TOP), bt_isa_name(BT_ISA_MID), missing);
        return;
    }
    const int bs = (int)bt_type_info(type)->block_size;
    const int64_t n_in = bs == 1 ? 1411 : bs == 256 ? 512 : 320, n_out = 21;
    enum { NT = 7 };
    rng_t r = rng_make(5200 + type);
    wmat_t w = wmat_make(type, n_in, n_out, 0, &r);
    float *x = xmalloc(NT * (size_t)n_in * sizeof(float));
    float *out[2] = {xmalloc(NT * (size_t)n_out * sizeof(float)),
                     xmalloc(NT * (size_t)n_out * sizeof(float))};
    fill(x, NT * (size_t)n_in, &r, -1.0f, 1.0f);
    const bt_isa_t was = bt_isa_active();
    for (int nt = 1; nt <= NT; nt += 3)
        for (int nth = 1; nth <= 2; nth++) {
            for (int i = 0; i < 2; i++) {
                ck_assert(bt_isa_select(i ? BT_ISA_MID : BT_ISA_TOP));
                bt_scratch_t sc = scratch_make(n_in, nth);
                memset(out[i], 0xff, (size_t)nt * (size_t)n_out * sizeof(float));
                bt_ops_exact.matmul(out[i], &w.m, x, nt, &sc);
                free(sc.buf);
            }
            for (size_t e = 0; e < (size_t)nt * (size_t)n_out; e++)
                CHECK_MSG(memcmp(&out[0][e], &out[1][e], sizeof(float)) == 0,
                          "%s, %d tokens, %d threads: element %zu: %s %a, %s %a",
                          bt_type_info(type)->name, nt, nth, e, bt_isa_name(BT_ISA_MID),
                          (double)out[1][e], bt_isa_name(BT_ISA_TOP), (double)out[0][e]);
        }
    bt_isa_select(was);
    free(out[1]);
    free(out[0]);
    free(x);
    wmat_free(&w);
}
END_TEST

/* ==== invariance: one batch vs micro-batches vs threads, bitwise ==== */

static const int splits[][3] = {{1, 3, 9}, {1, 1, 1}, {4, 9, 0}, {5, 5, 3}, {3, 3, 3}};

static void batch_invariance(const bt_ops_t *ops, uint32_t type, int64_t n_in)
{
    enum { NT = 13 };
    const int64_t n_out = 37;
    rng_t r = rng_make(800 + type);
    wmat_t w = wmat_make(type, n_in, n_out, 0, &r);
    float *x = xmalloc((size_t)(NT * n_in) * sizeof(float));
    float *full = xmalloc((size_t)(NT * n_out) * sizeof(float));
    float *part = xmalloc((size_t)(NT * n_out) * sizeof(float));
    fill(x, (size_t)(NT * n_in), &r, -2.0f, 2.0f);
    bt_scratch_t s1 = scratch_make(n_in, 1);
    ops->matmul(full, &w.m, x, NT, &s1);
    for (int nth = 1; nth <= 3; nth++) {
        bt_scratch_t s = scratch_make(n_in, nth);
        memset(part, 0xff, (size_t)(NT * n_out) * sizeof(float));
        ops->matmul(part, &w.m, x, NT, &s);
        CHECK_MSG(memcmp(part, full, (size_t)(NT * n_out) * sizeof(float)) == 0,
                  "%s %s: %d threads differ from 1", ops->name, bt_type_info(type)->name, nth);
        for (size_t p = 0; p < sizeof splits / sizeof splits[0]; p++) {
            memset(part, 0xff, (size_t)(NT * n_out) * sizeof(float));
            int t = 0;
            for (int k = 0; t < NT; k = (k + 1) % 3) { /* the pattern repeats */
                int nt = splits[p][k];
                if (nt == 0)
                    continue;
                nt = nt < NT - t ? nt : NT - t;
                ops->matmul(part + (size_t)t * n_out, &w.m, x + (size_t)t * n_in, nt, &s);
                t += nt;
            }
            for (int tt = 0; tt < NT; tt++)
                CHECK_MSG(memcmp(part + tt * n_out, full + tt * n_out,
                                 (size_t)n_out * sizeof(float)) == 0,
                          "%s %s n_in %lld: split %zu, %d threads: token %d differs from one "
                          "batch", ops->name, bt_type_info(type)->name, (long long)n_in, p, nth, tt);
        }
        free(s.buf);
    }
    free(s1.buf);
    free(part);
    free(full);
    free(x);
    wmat_free(&w);
}

START_TEST(test_batch_invariance)
{
    const uint32_t type = q_types[_i];
    const int64_t bs = bt_type_info(type)->block_size;
    batch_invariance(&bt_ops_exact, type, 3 * bs);
    batch_invariance(&bt_ops_cpu, type, 3 * bs);
    batch_invariance(&bt_ops_cpu, type, 4 * bs); /* the 8-bit path for the 32-blocks */
}
END_TEST

START_TEST(test_batch_invariance_q8_0)
{
    batch_invariance(&bt_ops_cpu, BT_TYPE_Q8_0, 96);
    batch_invariance(&bt_ops_cpu, BT_TYPE_Q8_0, 128);
}
END_TEST

static Suite *quants_suite(void)
{
    Suite *s = suite_create("quants");
    TCase *tc = tcase_create("layout");
    tcase_add_test(tc, test_layout);
    tcase_add_test(tc, test_row_bytes);
    suite_add_tcase(s, tc);
    tc = tcase_create("dequant");
    tcase_add_test(tc, test_hand_q4_0);
    tcase_add_test(tc, test_hand_q4_1);
    tcase_add_test(tc, test_hand_q5_0);
    tcase_add_test(tc, test_hand_mxfp4);
    tcase_add_test(tc, test_hand_q5_1);
    tcase_add_test(tc, test_hand_q4_k);
    tcase_add_test(tc, test_hand_q5_k);
    tcase_add_test(tc, test_hand_q6_k);
    tcase_add_loop_test(tc, test_random_blocks, 0, N_Q_TYPES);
    tcase_add_test(tc, test_known_answers);
    suite_add_tcase(s, tc);
    tc = tcase_create("quant");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_roundtrip_random, 0, N_Q_TYPES);
    tcase_add_loop_test(tc, test_roundtrip_special, 0, N_Q_TYPES);
    suite_add_tcase(s, tc);
    tc = tcase_create("matmul");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_matmul, 0, N_Q_TYPES);
    tcase_add_test(tc, test_matmul_mxfp4);
    tcase_add_test(tc, test_mxfp4_scales);
    tcase_add_test(tc, test_matmul_q8_0);
    suite_add_tcase(s, tc);
    tc = tcase_create("invariance");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_batch_invariance, 0, N_Q_TYPES);
    tcase_add_test(tc, test_batch_invariance_q8_0);
    if (bt_isa_active() == BT_ISA_TOP) { /* compares the top build with the middle: once is enough */
        tcase_add_loop_test(tc, test_isa_same, 0, N_ISA_TYPES);
        tcase_add_loop_test(tc, test_exact_isa_same, 0, N_EXACT_TYPES);
    }
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_main_isas(quants_suite);
}
