/*
 * check_dequant.c: the dequantizers each instruction-set build uses
 * (bt_type_to_float_fast: SIMD in the avx512 and avx2 builds, the scalar
 * to_float in the sse2 one) against the test's own decoder written from the
 * block layouts (quant_ref.h), bit for bit, for F16, BF16, Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, for each instruction set this CPU
 * runs (tu_run_isas).
 *   table:    which types have a fast dequantizer in which set
 *   random:   random block payloads with random finite f16 scales (normal,
 *             subnormal, zero, negative), rows of 1..67 blocks, sources at
 *             byte offsets 0..3 and destinations at float offsets 0..15
 *   special:  f16 scales of every special kind (inf, nan, +-0, extremes)
 *   f16:      every one of the 65536 f16 bit patterns (nan and inf too),
 *             every bf16 pattern
 *   speed:    G elements/s of the scalar and the fast function per type,
 *             printed to stderr (a rate is never asserted; what the timed
 *             calls wrote is)
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "quant_ref.h"
#include "testutil.h"

/* Silent when it holds (ck_assert reports every pass to the runner). */



/* The types with a SIMD dequantizer in the avx512 and avx2 builds, in
 * one order used by every loop test. */
static const uint32_t fast_types[] = {
    BT_TYPE_F16,  BT_TYPE_BF16, BT_TYPE_Q8_0, BT_TYPE_Q4_0, BT_TYPE_Q4_1,
    BT_TYPE_Q5_0, BT_TYPE_Q5_1, BT_TYPE_Q4_K, BT_TYPE_Q5_K, BT_TYPE_Q6_K,
};
#define N_FAST_TYPES ((int)(sizeof fast_types / sizeof fast_types[0]))

/* The active set's dequantizer (the scalar one in the sse2 build). */
static bt_to_float_fn fast_fn(uint32_t type) { return bt_type_to_float_fast(type); }

/* A random finite f16: mostly normal, often subnormal, sometimes +-0 or
 * the largest; either sign. */
static uint16_t rand_f16_finite(rng_t *r)
{
    const uint64_t x = rng_next(r);
    const uint16_t sign = (uint16_t)((x >> 32) & 0x8000u);
    const uint16_t man = (uint16_t)(x & 0x3ffu);
    switch ((x >> 40) % 8) {
    case 0: /* subnormal (or zero) */
        return sign | man;
    case 1:
        return sign | (uint16_t)((x >> 48) % 4 == 0 ? 0 : 0x7bffu);
    default: { /* normal, exponent 1..30 */
        const uint16_t e = (uint16_t)(1 + (x >> 16) % 30);
        return sign | (uint16_t)(e << 10) | man;
    }
    }
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* nb random blocks of `type`: random payload bytes, finite f16 fields. */
static void rand_blocks(uint8_t *p, uint32_t type, int nb, rng_t *r)
{
    const bt_type_info_t *ti = bt_type_info(type);
    const size_t bytes = (size_t)nb * ti->block_bytes;
    for (size_t i = 0; i < bytes; i++)
        p[i] = (uint8_t)(rng_next(r) >> 56);
    for (int b = 0; b < nb; b++)
        for (const int *f = f16_fields(type); *f >= 0; f++)
            put16(p + (size_t)b * ti->block_bytes + *f, rand_f16_finite(r));
}

/* The nb blocks at p decoded element by element by quant_ref.h. */
static void ref_decode(float *y, uint32_t type, const uint8_t *p, int nb)
{
    const bt_type_info_t *ti = bt_type_info(type);
    for (int b = 0; b < nb; b++)
        for (int e = 0; e < (int)ti->block_size; e++)
            y[(size_t)b * ti->block_size + e] = ref_elem(type, p + (size_t)b * ti->block_bytes, e);
}

/* Decodes the nb blocks at src with the reference decoder and with
 * to_float_fast from src + soff bytes into dst + doff floats; the outputs
 * must be the same bytes, and the fast function must not write outside its
 * row. */
static void compare(uint32_t type, const uint8_t *src, int nb, int soff, int doff, const char *what)
{
    const bt_type_info_t *ti = bt_type_info(type);
    const size_t bytes = (size_t)nb * ti->block_bytes;
    const int64_t n = (int64_t)nb * ti->block_size;
    uint8_t *a = xmalloc(bytes), *u = xmalloc(bytes + 64);
    float *want = xmalloc((size_t)n * sizeof(float));
    float *got = xmalloc(((size_t)n + 32) * sizeof(float));
    const bt_to_float_fn fast = fast_fn(type);
    if (fast == ti->to_float) /* no SIMD dequantizer (sse2): the scalar code wants alignment */
        soff = 0;
    memcpy(a, src, bytes);
    memcpy(u + soff, src, bytes);
    memset(want, 0xa5, (size_t)n * sizeof(float));
    memset(got, 0x5a, ((size_t)n + 32) * sizeof(float));
    ref_decode(want, type, a, nb);
    fast(got + doff, u + soff, n);
    if (memcmp(want, got + doff, (size_t)n * sizeof(float)) != 0) {
        for (int64_t i = 0; i < n; i++) {
            uint32_t w, g;
            memcpy(&w, want + i, 4);
            memcpy(&g, got + doff + i, 4);
            /* NaN is NaN: which payload a NaN operand passes on is the
             * compiler's choice (operand order), not the format's */
            CHECK_MSG(w == g || (isnan(want[i]) && isnan(got[doff + i])),
                      "%s %s: %d blocks, src +%d, dst +%d: element %lld = %a (0x%08x), "
                      "reference %a (0x%08x)",
                      ti->name, what, nb, soff, doff, (long long)i, (double)got[doff + i], g,
                      (double)want[i], w);
        }
    }
    const uint8_t *g8 = (const uint8_t *)got;
    for (size_t i = 0; i < (size_t)doff * sizeof(float); i++)
        CHECK_MSG(g8[i] == 0x5a, "%s %s: wrote before its row", ti->name, what);
    const size_t end = ((size_t)n + 32) * sizeof(float);
    for (size_t i = ((size_t)doff + (size_t)n) * sizeof(float); i < end; i++)
        CHECK_MSG(g8[i] == 0x5a, "%s %s: wrote past its row", ti->name, what);
    free(a);
    free(u);
    free(want);
    free(got);
}

/* ==== table ==== */

START_TEST(test_table)
{
#if defined(__x86_64__)
    const bool simd = bt_isa_active() != BT_ISA_BASE;
#else
    const bool simd = false; /* dequant_simd.c has AVX-512 and AVX2 paths only */
#endif
    for (int t = 0; t < BT_TYPE_COUNT; t++) {
        const bt_type_info_t *ti = bt_type_info((uint32_t)t);
        if (ti == NULL)
            continue;
        bool listed = false;
        for (int i = 0; i < N_FAST_TYPES; i++)
            listed |= fast_types[i] == (uint32_t)t;
        const bt_to_float_fn f = bt_type_to_float_fast((uint32_t)t);
        if (ti->to_float == NULL)
            CHECK_MSG(f == NULL, "%s: fast without support", ti->name);
        else if (simd && listed)
            CHECK_MSG(f != NULL && f != ti->to_float, "%s: no SIMD dequantizer in %s", ti->name,
                      bt_isa_name(bt_isa_active()));
        else
            CHECK_MSG(f == ti->to_float, "%s: %s has no SIMD dequantizer for it", ti->name,
                      bt_isa_name(bt_isa_active()));
    }
    CHECK_MSG(bt_type_to_float_fast(BT_TYPE_COUNT + 7) == NULL, "unknown type");
}
END_TEST

/* ==== random blocks ==== */

START_TEST(test_random)
{
    const uint32_t type = fast_types[_i];
    const bt_type_info_t *ti = bt_type_info(type);
    /* rows of 1..67 blocks (F16 / BF16: elements, so odd tails too) */
    static const int sizes[] = {1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 33, 64, 67};
    rng_t r = rng_make(1000 + type);
    const int max_nb = type == BT_TYPE_F16 || type == BT_TYPE_BF16 ? 4096 : 67;
    uint8_t *buf = xmalloc((size_t)max_nb * ti->block_bytes);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (int rep = 0; rep < 8; rep++) {
            const int nb = sizes[k];
            rand_blocks(buf, type, nb, &r);
            compare(type, buf, nb, rep % 4, (int)(rng_next(&r) % 16), "random");
        }
    /* long rows: many blocks at once */
    for (int rep = 0; rep < 4; rep++) {
        rand_blocks(buf, type, max_nb, &r);
        compare(type, buf, max_nb, rep, 3 - rep, "long row");
    }
    free(buf);
}
END_TEST

/* ==== special scales ==== */

START_TEST(test_special_scales)
{
    const uint32_t type = fast_types[_i];
    const bt_type_info_t *ti = bt_type_info(type);
    static const uint16_t special[] = {
        0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400, 0x8400, 0x3c00, 0xbc00,
        0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0xfd55, 0x7fff, 0x3555,
    };
    const int ns = (int)(sizeof special / sizeof special[0]);
    const int *fields = f16_fields(type);
    if (fields[0] < 0)
        return; /* bf16: every pattern is checked in test_all_halves */
    const int nf = fields[1] >= 0 ? 2 : 1;
    rng_t r = rng_make(77 + type);
    const int nb = nf == 2 ? ns * ns : ns;
    uint8_t *buf = xmalloc((size_t)nb * ti->block_bytes);
    rand_blocks(buf, type, nb, &r);
    for (int b = 0; b < nb; b++) {
        uint8_t *blk = buf + (size_t)b * ti->block_bytes;
        put16(blk + fields[0], special[b % ns]);
        if (nf == 2)
            put16(blk + fields[1], special[b / ns]);
    }
    for (int soff = 0; soff < 4; soff++)
        compare(type, buf, nb, soff, soff * 5, "special scales");
    free(buf);
}
END_TEST

/* ==== every f16 / bf16 pattern ==== */

START_TEST(test_all_halves)
{
    uint8_t *buf = xmalloc(65536 * 2);
    for (uint32_t h = 0; h < 65536; h++)
        put16(buf + 2 * h, (uint16_t)h);
    for (int soff = 0; soff < 4; soff++) {
        compare(BT_TYPE_F16, buf, 65536, soff, 7 - soff, "all patterns");
        compare(BT_TYPE_BF16, buf, 65536, soff, 7 - soff, "all patterns");
    }
    /* runs of NaNs among ordinary values, at every phase of a vector */
    rng_t r = rng_make(5);
    for (int rep = 0; rep < 64; rep++) {
        for (int i = 0; i < 256; i++)
            put16(buf + 2 * i, rng_next(&r) % 5 == 0 ? (uint16_t)(0x7c01 + rng_next(&r) % 0x3fe)
                                                     : rand_f16_finite(&r));
        compare(BT_TYPE_F16, buf, 256 - rep % 17, rep % 4, rep % 16, "nan runs");
    }
    free(buf);
}
END_TEST

/* ==== speed ==== */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* G elements/s of fn on one row of n elements (cache-resident, like the
 * matmul's scratch rows): the best of several timed batches. */
static double rate(bt_to_float_fn fn, float *out, const void *in, int64_t n)
{
    double best = 0.0;
    int reps = 8;
    for (int trial = 0; trial < 5; trial++) {
        double t0, dt;
        for (;;) {
            t0 = now_s();
            for (int k = 0; k < reps; k++) {
                fn(out, in, n);
                __asm__ __volatile__("" ::"g"(out) : "memory");
            }
            dt = now_s() - t0;
            if (dt >= 0.01)
                break;
            reps *= 2;
        }
        const double g = (double)n * reps / dt * 1e-9;
        best = g > best ? g : best;
    }
    return best;
}

START_TEST(test_speed)
{
    const int64_t n = 8192; /* one 8192-wide row: 32 KiB of f32 out */
    float *out = xmalloc((size_t)n * sizeof(float));
    float *want = xmalloc((size_t)n * sizeof(float));
    rng_t r = rng_make(9);
    fprintf(stderr, "dequant speed (%s), row of %lld elements, G elements/s:\n",
            bt_isa_name(bt_isa_active()), (long long)n);
    for (int i = 0; i < N_FAST_TYPES; i++) {
        const bt_type_info_t *ti = bt_type_info(fast_types[i]);
        const int nb = (int)(n / ti->block_size);
        uint8_t *buf = xmalloc((size_t)nb * ti->block_bytes);
        rand_blocks(buf, fast_types[i], nb, &r);
        const double gs = rate(ti->to_float, out, buf, n);
        const double gf = rate(fast_fn(fast_types[i]), out, buf, n);
        fprintf(stderr, "  %-5s scalar %6.2f  fast %6.2f  (x%.1f)\n", ti->name, gs, gf, gf / gs);
        /* what the timed calls wrote: the row, bit for bit */
        ref_decode(want, fast_types[i], buf, nb);
        CHECK_MSG(memcmp(out, want, (size_t)n * sizeof(float)) == 0,
                  "%s: the timed fast dequantizer wrote another row", ti->name);
        CHECK_MSG(gs > 0 && gf > 0, "%s: no rate measured", ti->name);
        free(buf);
    }
    free(want);
    free(out);
}
END_TEST

static Suite *dequant_suite(void)
{
    Suite *s = suite_create("dequant");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, test_table);
    suite_add_tcase(s, tc);
    tc = tcase_create("bitwise");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_random, 0, N_FAST_TYPES);
    tcase_add_loop_test(tc, test_special_scales, 0, N_FAST_TYPES);
    tcase_add_test(tc, test_all_halves);
    suite_add_tcase(s, tc);
    tc = tcase_create("speed");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_speed);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_main_isas(dequant_suite);
}
