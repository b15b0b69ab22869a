/*
 * check_kernels.c: the kernels of src/kernels/.
 *   types:       f16/bf16 conversions (all 65536 patterns; round to nearest
 *                even against an independent oracle), Q8_0 error bounds, the
 *                type table, row sizes
 *   matmul:      bt_ops_exact vs bt_ops_ref vs double for every supported type,
 *                awkward shapes, 1-3 threads, padded rows
 *   attention:   cpu vs ref vs softmax(q.k/sqrt(d)) v in double; GQA, odd
 *                head_dim, pos0 > 0, causality, 1-3 threads; sliding
 *                windows (1, 3, 7, past the context) and their edge key
 *   invariance:  one batch vs micro-batches vs thread counts -> bitwise equal,
 *                with and without a window
 *   elementwise: rmsnorm (in place too), rope (NORM and NEOX pairs, factors,
 *                linear scaling), swiglu, geglu, softcap, add, add_rows,
 *                scale against double formulas
 *
 * Tolerances are derived, not tuned: a float dot product of n terms in any
 * order (FMA or not) is within gamma(n) * sum |w_k x_k| of the exact value,
 * gamma(n) ~= n * 2^-24; two such results are within twice that of each
 * other.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/types.h"
#include "testutil.h"

#define U 0x1p-24 /* unit roundoff of f32 */



static uint32_t rng_u32(rng_t *r) { return (uint32_t)(rng_next(r) >> 32); }

static float f32_from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}


/* Scratch for n_threads threads, exactly as big as bt_scratch_floats says
 * (so a sanitizer sees any overrun). */
static bt_scratch_t scratch_make(int64_t max_n_in, int64_t n_ctx, int n_threads)
{
    bt_scratch_t s;
    s.per_thread = bt_scratch_floats(max_n_in, n_ctx);
    s.n_threads = n_threads;
    s.buf = xmalloc(s.per_thread * (size_t)n_threads * sizeof(float));
    return s;
}

/* ==== types ==== */

/* Independent decoders (value of a positive-or-negative pattern, in double). */
static double f16_value(uint16_t h)
{
    int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0x1f)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, -24);
    else
        v = ldexp((double)(1024 + m), e - 25);
    return sign ? -v : v;
}

static double bf16_value(uint16_t h)
{
    int sign = h >> 15, e = (h >> 7) & 0xff, m = h & 0x7f;
    double v;
    if (e == 0xff)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, -133);
    else
        v = ldexp((double)(128 + m), e - 134);
    return sign ? -v : v;
}

/* Round-to-nearest-even oracle for a 16-bit format whose positive finite
 * patterns 0 .. max_finite increase with their value and whose pattern
 * max_finite + 1 is +inf: binary search the largest pattern not above |x|,
 * then compare |x| with the exact midpoint to the next pattern (the one
 * past max_finite counts as `next_inf`, 2^(emax+1), as IEEE rounding
 * wants). */
static uint16_t rne_oracle(float x, double (*value)(uint16_t), uint16_t max_finite, double next_inf)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs((double)x);
    uint16_t lo = 0, hi = max_finite;
    while (lo < hi) { /* largest h with value(h) <= a */
        uint16_t mid = (uint16_t)(lo + (hi - lo + 1) / 2);
        if (value(mid) <= a)
            lo = mid;
        else
            hi = (uint16_t)(mid - 1);
    }
    double below = value(lo);
    double above = lo == max_finite ? next_inf : value((uint16_t)(lo + 1));
    double half = (below + above) / 2; /* exact in double for both formats */
    uint16_t h;
    if (a < half)
        h = lo;
    else if (a > half)
        h = (uint16_t)(lo + 1);
    else
        h = (lo & 1) ? (uint16_t)(lo + 1) : lo;
    return sign | h;
}

static uint16_t f16_oracle(float x) { return rne_oracle(x, f16_value, 0x7bff, 65536.0); }
static uint16_t bf16_oracle(float x) { return rne_oracle(x, bf16_value, 0x7f7f, 0x1p128); }

static int f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
static int bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

START_TEST(test_f16_all_patterns)
{
    int n_nan = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = bt_f16_to_f32(h);
        uint16_t back = bt_f32_to_f16(f);
        if (f16_is_nan(h)) {
            n_nan++;
            CHECK_MSG(isnan(f), "f16 0x%04x: nan decoded as %g", h, (double)f);
            CHECK_MSG(f16_is_nan(back), "f16 0x%04x: nan re-encoded as 0x%04x", h, back);
            continue;
        }
        double v = f16_value(h);
        CHECK_MSG((double)f == v && !signbit(f) == !signbit(v), "f16 0x%04x decodes to %a, want %a",
                  h, (double)f, v);
        CHECK_MSG(back == h, "f16 0x%04x -> %a -> 0x%04x", h, (double)f, back);
    }
    ck_assert_int_eq(n_nan, 2 * 1023);
}
END_TEST

START_TEST(test_f16_rounding_cases)
{
    static const struct {
        float x;
        uint16_t h;
    } cases[] = {
        {1.0f, 0x3c00},
        {1.0f + 0x1p-11f, 0x3c00},            /* tie -> even (down) */
        {1.0f + 3 * 0x1p-11f, 0x3c02},        /* tie -> even (up) */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01}, /* just above the tie */
        {1.0f + 0x1p-11f - 0x1p-23f, 0x3c00}, /* just below the tie */
        {2.0f - 0x1p-11f, 0x4000},            /* tie 0x3fff/0x4000: carries into the exponent */
        {-2.0f, 0xc000},
        {0.1f, 0x2e66},
        {1.0f / 3.0f, 0x3555},
        {65504.0f, 0x7bff},        /* max finite */
        {65519.99609375f, 0x7bff}, /* nextafterf(65520, 0) */
        {65520.0f, 0x7c00},        /* tie with 2^16 -> inf */
        {-65520.0f, 0xfc00},
        {1e10f, 0x7c00},
        {FLT_MAX, 0x7c00},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {0x1p-14f, 0x0400},                /* min normal */
        {0x1p-14f - 0x1p-25f, 0x0400},     /* tie 0x3ff/0x400 -> even */
        {0x1p-14f - 3 * 0x1p-25f, 0x03fe}, /* tie 0x3fe/0x3ff -> even */
        {0x1p-24f, 0x0001},                /* min subnormal */
        {0x1p-25f, 0x0000},                /* tie 0/1 -> even (zero) */
        {-0x1p-25f, 0x8000},
        {0x1p-25f + 0x1p-40f, 0x0001},
        {3 * 0x1p-26f, 0x0001}, /* 0.75 ulp -> 1 */
        {3 * 0x1p-25f, 0x0002}, /* 1.5 ulp tie -> 2 */
        {5 * 0x1p-25f, 0x0002}, /* 2.5 ulp tie -> 2 */
        {0x1p-30f, 0x0000},
        {FLT_MIN, 0x0000},
        {1e-45f, 0x0000}, /* f32 subnormal */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = bt_f32_to_f16(cases[i].x);
        CHECK_MSG(h == cases[i].h, "f32 %a -> f16 0x%04x, want 0x%04x", (double)cases[i].x, h,
                  cases[i].h);
        CHECK_MSG(f16_oracle(cases[i].x) == cases[i].h, "oracle disagrees on %a",
                  (double)cases[i].x);
    }
    ck_assert(f16_is_nan(bt_f32_to_f16(NAN)));
    ck_assert(f16_is_nan(bt_f32_to_f16(-NAN)));
    ck_assert(f16_is_nan(bt_f32_to_f16(f32_from_bits(0x7f800001u)))); /* signalling */
}
END_TEST

/* Every f16 midpoint (and its f32 neighbours), then random f32 patterns,
 * against the oracle. */
START_TEST(test_f16_rounding_oracle)
{
    for (uint32_t h = 0; h <= 0x7bff; h++) {
        double above = h == 0x7bff ? 65536.0 : f16_value((uint16_t)(h + 1));
        float mid = (float)((f16_value((uint16_t)h) + above) / 2); /* exact */
        float xs[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (int i = 0; i < 3; i++)
            for (int sgn = 0; sgn < 2; sgn++) {
                float x = sgn ? -xs[i] : xs[i];
                uint16_t got = bt_f32_to_f16(x), want = f16_oracle(x);
                CHECK_MSG(got == want, "f32 %a -> f16 0x%04x, want 0x%04x", (double)x, got, want);
            }
    }
    rng_t r = rng_make(1);
    for (int i = 0; i < 200000; i++) {
        uint32_t b = rng_u32(&r);
        if (i & 1) /* half of them in and around the f16 range */
            b = (b & 0x807fffffu) | ((uint32_t)(100 + rng_u32(&r) % 50) << 23);
        float x = f32_from_bits(b);
        if (isnan(x))
            continue;
        uint16_t got = bt_f32_to_f16(x), want = f16_oracle(x);
        CHECK_MSG(got == want, "f32 %a -> f16 0x%04x, want 0x%04x", (double)x, got, want);
    }
}
END_TEST

START_TEST(test_bf16_all_patterns)
{
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = bt_bf16_to_f32(h);
        uint16_t back = bt_f32_to_bf16(f);
        if (bf16_is_nan(h)) {
            CHECK_MSG(isnan(f), "bf16 0x%04x: nan decoded as %g", h, (double)f);
            CHECK_MSG(bf16_is_nan(back), "bf16 0x%04x: nan re-encoded as 0x%04x", h, back);
            continue;
        }
        double v = bf16_value(h);
        CHECK_MSG((double)f == v && !signbit(f) == !signbit(v),
                  "bf16 0x%04x decodes to %a, want %a", h, (double)f, v);
        CHECK_MSG(back == h, "bf16 0x%04x -> %a -> 0x%04x", h, (double)f, back);
    }
}
END_TEST

START_TEST(test_bf16_rounding)
{
    static const struct {
        float x;
        uint16_t h;
    } cases[] = {
        {1.0f, 0x3f80},
        {1.0f + 0x1p-8f, 0x3f80},     /* tie -> even (down) */
        {1.0f + 3 * 0x1p-8f, 0x3f82}, /* tie -> even (up) */
        {1.0f + 0x1p-8f + 0x1p-20f, 0x3f81},
        {-1.0f - 0x1p-8f, 0xbf80},
        {2.0f - 0x1p-8f, 0x4000}, /* tie 0x3fff/0x4000: carries into the exponent */
        {FLT_MAX, 0x7f80},        /* above the midpoint to 2^128 */
        {0x1.fep127f, 0x7f7f},    /* max finite bf16 */
        {0x1.fdp127f, 0x7f7e},    /* tie 0x7f7e/0x7f7f -> even */
        {INFINITY, 0x7f80},
        {-INFINITY, 0xff80},
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {0x1p-149f, 0x0000},     /* f32 min subnormal: below half an ulp */
        {0x1p-133f, 0x0001},     /* bf16 min subnormal */
        {0x1p-134f, 0x0000},     /* tie 0/1 -> even */
        {3 * 0x1p-134f, 0x0002}, /* tie 1/2 -> even */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = bt_f32_to_bf16(cases[i].x);
        CHECK_MSG(h == cases[i].h, "f32 %a -> bf16 0x%04x, want 0x%04x", (double)cases[i].x, h,
                  cases[i].h);
        CHECK_MSG(bf16_oracle(cases[i].x) == cases[i].h, "oracle disagrees on %a",
                  (double)cases[i].x);
    }
    ck_assert(bf16_is_nan(bt_f32_to_bf16(NAN)));
    ck_assert(bf16_is_nan(bt_f32_to_bf16(-NAN)));
    ck_assert(bf16_is_nan(bt_f32_to_bf16(f32_from_bits(0x7f800001u)))); /* low payload */
    ck_assert(bf16_is_nan(bt_f32_to_bf16(f32_from_bits(0xffffffffu))));

    /* every midpoint and its neighbours, then random patterns */
    for (uint32_t h = 0; h <= 0x7f7f; h++) {
        uint32_t mid = (h << 16) | 0x8000u;
        uint32_t bs[3] = {mid, mid - 1, mid + 1};
        for (int i = 0; i < 3; i++)
            for (int sgn = 0; sgn < 2; sgn++) {
                float x = f32_from_bits(bs[i] | (sgn ? 0x80000000u : 0));
                uint16_t got = bt_f32_to_bf16(x), want = bf16_oracle(x);
                CHECK_MSG(got == want, "f32 %a -> bf16 0x%04x, want 0x%04x", (double)x, got, want);
            }
    }
    rng_t r = rng_make(2);
    for (int i = 0; i < 100000; i++) {
        float x = f32_from_bits(rng_u32(&r));
        if (isnan(x))
            continue;
        uint16_t got = bt_f32_to_bf16(x), want = bf16_oracle(x);
        CHECK_MSG(got == want, "f32 %a -> bf16 0x%04x, want 0x%04x", (double)x, got, want);
    }
}
END_TEST

/* Q8_0: with d = amax/127 (f32) and q = round(x/d), |x - d q| <= d/2 (plus
 * a few ulp of x/d: <= 2e-5 d). The stored scale d16 = f16(d) is off by at
 * most d*2^-11 (d a normal f16) or 2^-25 (d subnormal), so
 *   |x - d16 q| <= 0.50002 d + |q| |d - d16|,  |q| <= |x|/d + 0.50002
 * giving <= 0.5003 d + |x| 2^-11 (normal d) and <= 0.5001 d + 127 * 2^-25
 * (subnormal d: the scale keeps little precision, as in GGUF). */
static void q8_0_check_row(const float *x, int64_t n)
{
    const bt_type_info_t *ti = bt_type_info(BT_TYPE_Q8_0);
    bt_block_q8_0_t *b = xmalloc((size_t)(n / BT_QK8_0) * sizeof *b);
    float *y = xmalloc((size_t)n * sizeof(float));
    ti->from_float(b, x, n);
    ti->to_float(y, b, n);
    for (int64_t i = 0; i < n / BT_QK8_0; i++) {
        const float *xb = x + i * BT_QK8_0;
        double amax = 0;
        for (int j = 0; j < BT_QK8_0; j++)
            amax = fmax(amax, fabs((double)xb[j]));
        const double d = amax / 127;
        const int normal = d >= 0x1p-14; /* d a normal f16 */
        const double d16 = bt_f16_to_f32(b[i].d);
        if (normal) /* the stored scale is d rounded to f16 */
            CHECK_MSG(fabs(d16 - d) <= d * 0x1p-11 * 1.0001, "block %lld: scale %g for %g",
                      (long long)i, d16, d);
        else
            CHECK_MSG(fabs(d16 - d) <= 0x1p-25, "block %lld: scale %g for %g", (long long)i, d16,
                      d);
        for (int j = 0; j < BT_QK8_0; j++) {
            double xv = xb[j], yv = y[i * BT_QK8_0 + j];
            CHECK_MSG(yv == d16 * b[i].qs[j], "dequantization is not d * q");
            CHECK_MSG(b[i].qs[j] >= -127 && b[i].qs[j] <= 127, "q = %d", b[i].qs[j]);
            if (fabs(xv) == amax && amax > 0)
                CHECK_MSG(abs(b[i].qs[j]) == 127, "amax %g maps to %d", amax, b[i].qs[j]);
            double bound = normal ? 0.5003 * d + fabs(xv) * 0x1p-11 : 0.5001 * d + 127 * 0x1p-25;
            CHECK_MSG(fabs(xv - yv) <= bound,
                      "block %lld [%d]: x %.9g -> %.9g (err %.3g > %.3g, amax %g)", (long long)i, j,
                      xv, yv, fabs(xv - yv), bound, amax);
        }
    }
    free(y);
    free(b);
}

START_TEST(test_q8_0_error_bound)
{
    rng_t r = rng_make(3);
    enum { NB = 64, N = NB * BT_QK8_0 };
    float *x = xmalloc(N * sizeof(float));
    /* scales that keep d = amax/127 a normal f16 (6.1e-5 .. 65504) */
    static const float mags[] = {0.01f, 0.1f, 1.0f, 7.5f, 1000.0f, 8e6f};
    for (size_t m = 0; m < sizeof mags / sizeof mags[0]; m++) {
        for (int i = 0; i < N; i++)
            x[i] = rng_unif(&r, -mags[m], mags[m]);
        for (int i = 0; i < NB; i++) /* some blocks with an exact +-amax, some positive-only */
            if (i % 3 == 0)
                x[i * BT_QK8_0 + i % BT_QK8_0] = (i & 1) ? -mags[m] : mags[m];
            else if (i % 3 == 1)
                for (int j = 0; j < BT_QK8_0; j++)
                    x[i * BT_QK8_0 + j] = fabsf(x[i * BT_QK8_0 + j]);
        q8_0_check_row(x, N);
    }
    /* blocks of very different magnitudes in one row */
    for (int i = 0; i < NB; i++) {
        float m = powf(10.0f, (float)(i % 7) - 2.0f);
        for (int j = 0; j < BT_QK8_0; j++)
            x[i * BT_QK8_0 + j] = rng_unif(&r, -m, m);
    }
    q8_0_check_row(x, N);
    /* subnormal f16 scales lose precision (as in GGUF); still bounded */
    static const float tiny[] = {7e-3f, 1e-4f, 1e-6f, 1e-9f, 1e-30f};
    for (size_t m = 0; m < sizeof tiny / sizeof tiny[0]; m++) {
        for (int i = 0; i < N; i++)
            x[i] = rng_unif(&r, -tiny[m], tiny[m]);
        q8_0_check_row(x, N);
    }
    free(x);
}
END_TEST

START_TEST(test_q8_0_exact_and_zero)
{
    const bt_type_info_t *ti = bt_type_info(BT_TYPE_Q8_0);
    enum { N = 4 * BT_QK8_0 };
    float x[N], y[N];
    bt_block_q8_0_t b[N / BT_QK8_0];
    /* multiples of 1/8 with amax 127/8: d = 1/8 exactly, round trip exact */
    for (int i = 0; i < N; i++)
        x[i] = (float)((i * 37) % 255 - 127) / 8.0f;
    x[5] = 127.0f / 8.0f;
    x[BT_QK8_0 + 5] = -127.0f / 8.0f;
    x[2 * BT_QK8_0 + 5] = 127.0f / 8.0f;
    x[3 * BT_QK8_0 + 5] = -127.0f / 8.0f;
    ti->from_float(b, x, N);
    ti->to_float(y, b, N);
    for (int i = 0; i < N / BT_QK8_0; i++)
        ck_assert_uint_eq(b[i].d, 0x3000); /* f16 0.125 */
    for (int i = 0; i < N; i++)
        CHECK_MSG(y[i] == x[i], "[%d] %g -> %g", i, (double)x[i], (double)y[i]);

    /* all-zero block (between non-zero ones): scale 0, exact zeros, no nan */
    for (int i = 0; i < N; i++)
        x[i] = (float)(i % 5) - 2.0f;
    for (int j = 0; j < BT_QK8_0; j++)
        x[BT_QK8_0 + j] = 0.0f;
    x[3 * BT_QK8_0 + 1] = -0.0f;
    ti->from_float(b, x, N);
    memset(y, 0xff, sizeof y); /* nan */
    ti->to_float(y, b, N);
    ck_assert_uint_eq(b[1].d & 0x7fff, 0);
    for (int j = 0; j < BT_QK8_0; j++) {
        ck_assert_int_eq(b[1].qs[j], 0);
        CHECK_MSG(y[BT_QK8_0 + j] == 0.0f, "zero block [%d] -> %g", j, (double)y[BT_QK8_0 + j]);
    }
    for (int i = 0; i < N; i++)
        CHECK_MSG(!isnan(y[i]), "[%d] nan", i);
}
END_TEST

START_TEST(test_type_table)
{
    static const struct {
        uint32_t t;
        const char *name;
        int64_t bs;
        size_t bb;
        bool supported;
    } cases[] = {
        {BT_TYPE_F32, "f32", 1, 4, true},   {BT_TYPE_F16, "f16", 1, 2, true},
        {BT_TYPE_BF16, "bf16", 1, 2, true}, {BT_TYPE_Q8_0, "q8_0", 32, 34, true},
        {BT_TYPE_I32, "i32", 1, 4, false},  {BT_TYPE_F64, "f64", 1, 8, false},
    };
    ck_assert_uint_eq(sizeof(bt_block_q8_0_t), 34);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bt_type_info_t *ti = bt_type_info(cases[i].t);
        ck_assert_ptr_nonnull(ti);
        ck_assert_str_eq(ti->name, cases[i].name);
        ck_assert_int_eq(ti->block_size, cases[i].bs);
        ck_assert_uint_eq(ti->block_bytes, cases[i].bb);
        ck_assert_int_eq(bt_type_supported(cases[i].t), cases[i].supported);
        ck_assert_int_eq(ti->to_float != NULL && ti->from_float != NULL, cases[i].supported);
        ck_assert_int_eq(bt_type_from_name(cases[i].name), (int)cases[i].t);
    }
    /* unknown ids */
    static const uint32_t unknown[] = {4, 5, 16, 23, 29, 31, BT_TYPE_COUNT, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        ck_assert_ptr_null(bt_type_info(unknown[i]));
        ck_assert(!bt_type_supported(unknown[i]));
    }
    /* every known name maps back to its id */
    int n_known = 0;
    for (uint32_t t = 0; t < BT_TYPE_COUNT; t++) {
        const bt_type_info_t *ti = bt_type_info(t);
        if (ti == NULL)
            continue;
        n_known++;
        ck_assert_int_eq(bt_type_from_name(ti->name), (int)t);
        ck_assert_int_gt(ti->block_size, 0);
        ck_assert_uint_gt(ti->block_bytes, 0);
    }
    ck_assert_int_ge(n_known, 20);
    /* layouts of the k-quants (known to the file reader, no compute needed) */
    static const struct {
        uint32_t t;
        const char *name;
        size_t bb;
    } kq[] = {{BT_TYPE_Q4_0, "q4_0", 18}, {BT_TYPE_Q4_K, "q4_k", 144}, {BT_TYPE_Q6_K, "q6_k", 210}};
    for (size_t i = 0; i < sizeof kq / sizeof kq[0]; i++) {
        const bt_type_info_t *ti = bt_type_info(kq[i].t);
        ck_assert_ptr_nonnull(ti);
        ck_assert_str_eq(ti->name, kq[i].name);
        ck_assert_int_eq(ti->block_size, kq[i].t == BT_TYPE_Q4_0 ? 32 : 256);
        ck_assert_uint_eq(ti->block_bytes, kq[i].bb);
        ck_assert_int_eq(bt_type_from_name(kq[i].name), (int)kq[i].t);
    }
    ck_assert_int_eq(bt_type_from_name("Q8_0"), BT_TYPE_Q8_0);
    ck_assert_int_eq(bt_type_from_name("BF16"), BT_TYPE_BF16);
    ck_assert_int_eq(bt_type_from_name("Q4_K"), BT_TYPE_Q4_K);
    ck_assert_int_eq(bt_type_from_name(""), -1);
    ck_assert_int_eq(bt_type_from_name("q8"), -1);
    ck_assert_int_eq(bt_type_from_name("q8_00"), -1);
    ck_assert_int_eq(bt_type_from_name("float32"), -1);
}
END_TEST

START_TEST(test_row_bytes)
{
    uint64_t b = 0;
    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_F32, 7, &b), 0);
    ck_assert_uint_eq(b, 28);
    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_F16, 7, &b), 0);
    ck_assert_uint_eq(b, 14);
    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_BF16, 1, &b), 0);
    ck_assert_uint_eq(b, 2);
    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_Q8_0, 96, &b), 0);
    ck_assert_uint_eq(b, 3 * 34);
    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_Q4_K, 512, &b), 0);
    ck_assert_uint_eq(b, 2 * 144);
    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_Q6_K, 256, &b), 0);
    ck_assert_uint_eq(b, 210);
    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_F32, 0, &b), 0);
    ck_assert_uint_eq(b, 0);
    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_Q8_0, 32ull << 58, &b), 0); /* 2^58 blocks fit */
    ck_assert_uint_eq(b, 34ull << 58);
    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_F32, 1ull << 61, &b), 0);
    ck_assert_uint_eq(b, 1ull << 63);
    /* n not a multiple of the block */
    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_Q8_0, 33, &b), -1);
    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_Q8_0, 31, &b), -1);
    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_Q4_K, 255, &b), -1);
    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_Q4_K, 32, &b), -1);
    /* overflow */
    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_F32, 1ull << 62, &b), -1);
    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_F32, UINT64_MAX, &b), -1);
    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_F16, 1ull << 63, &b), -1);

    ck_assert_int_eq(bt_type_row_bytes(BT_TYPE_Q8_0, UINT64_MAX - 31, &b), -1);
    /* unknown type */
    ck_assert_int_eq(bt_type_row_bytes(5, 32, &b), -1);
    ck_assert_int_eq(bt_type_row_bytes(UINT32_MAX, 32, &b), -1);
}
END_TEST

/* ==== matmul ==== */

static const uint32_t mm_types[] = {BT_TYPE_F32, BT_TYPE_F16, BT_TYPE_BF16, BT_TYPE_Q8_0};

/* Bound on |float dot - exact| for either kernel: the cpu path sums lanes
 * of up to n/VL terms, a horizontal sum of <= 16, then the tail; any such
 * order of <= n + 16 operations is within gamma(n + 16) * sum |w x|. */
static double dot_bound(int64_t n, double sabs) { return (double)(n + 17) * U * 1.01 * sabs; }

/* Checks out_cpu and out_ref against the exact product in double. */
static void mm_compare(const float *out_cpu, const float *out_ref, const wmat_t *w, const float *x,
                       int n_tok, const char *what)
{
    const int64_t n_in = w->m.n_in, n_out = w->m.n_out;
    for (int t = 0; t < n_tok; t++)
        for (int64_t o = 0; o < n_out; o++) {
            double sum = 0, sabs = 0;
            for (int64_t k = 0; k < n_in; k++) {
                double p = (double)w->wf[o * n_in + k] * x[(size_t)t * n_in + k];
                sum += p;
                sabs += fabs(p);
            }
            double bound = dot_bound(n_in, sabs) + 1e-30;
            double c = out_cpu[(size_t)t * n_out + o], rf = out_ref[(size_t)t * n_out + o];
            CHECK_MSG(fabs(c - rf) <= 2 * bound && fabs(c - sum) <= bound &&
                          fabs(rf - sum) <= bound,
                      "%s: %s n_in %lld n_out %lld t %d row %lld: cpu %.9g ref %.9g "
                      "exact %.9g (bound %.3g)",
                      what, bt_type_info(w->m.type)->name, (long long)n_in, (long long)n_out, t,
                      (long long)o, c, rf, sum, bound);
        }
}

static void mm_case(uint32_t type, int64_t n_in, int64_t n_out, int n_tok, uint64_t pad, rng_t *r)
{
    wmat_t w = wmat_make(type, n_in, n_out, pad, r);
    const size_t n_x = (size_t)n_tok * (size_t)n_in, n_o = (size_t)n_tok * (size_t)n_out;
    float *x = xmalloc(n_x * sizeof(float));
    float *out_ref = xmalloc(n_o * sizeof(float));
    float *out_cpu = xmalloc(n_o * sizeof(float));
    fill(x, n_x, r, -1.0f, 1.0f);
    bt_scratch_t s1 = scratch_make(n_in, 1, 1);
    memset(out_ref, 0xff, n_o * sizeof(float));
    bt_ops_ref.matmul(out_ref, &w.m, x, n_tok, &s1);
    /* bt_ops_cpu's own path for the float types: one chain per output, from
     * the rows or from packed panels (the same bits); Q8_0's own path
     * (8-bit activations) is check_quants' */
    const bool panels = type != BT_TYPE_Q8_0 && !bt_ops_cpu_is_exact(type, n_in);
    void *packed = panels ? tu_pack(&w.m) : NULL;
    float *out_p = xmalloc(n_o * sizeof(float));
    for (int nth = 1; nth <= 3; nth++) {
        bt_scratch_t s = scratch_make(n_in, 1, nth);
        for (int oi = 0; oi < (panels ? 2 : 1); oi++) {
            const bt_ops_t *ops = oi ? &bt_ops_cpu : &bt_ops_exact;
            memset(out_cpu, 0xff, n_o * sizeof(float)); /* nan: every element must be written */
            ops->matmul(out_cpu, &w.m, x, n_tok, &s);
            char what[64];
            snprintf(what, sizeof what, "%s threads %d pad %llu", ops->name, nth,
                     (unsigned long long)pad);
            mm_compare(out_cpu, out_ref, &w, x, n_tok, what);
        }
        if (packed != NULL) {
            bt_matrix_t wp = w.m;
            wp.packed = packed;
            memset(out_p, 0xff, n_o * sizeof(float));
            bt_ops_cpu.matmul(out_p, &wp, x, n_tok, &s);
            CHECK_MSG(memcmp(out_p, out_cpu, n_o * sizeof(float)) == 0,
                      "%s n_in %lld n_out %lld n_tok %d threads %d: packed panels differ from "
                      "the rows", bt_type_info(type)->name, (long long)n_in, (long long)n_out,
                      n_tok, nth);
        }
        free(s.buf);
    }
    free(out_p);
    free(packed);
    free(s1.buf);
    free(out_cpu);
    free(out_ref);
    free(x);
    wmat_free(&w);
}

START_TEST(test_matmul_shapes)
{
    const uint32_t type = mm_types[_i];
    static const int64_t n_in_float[] = {1, 7, 16, 40, 67};
    static const int64_t n_in_q8[] = {32, 96, 160};
    const int64_t *n_ins = type == BT_TYPE_Q8_0 ? n_in_q8 : n_in_float;
    const int n_n_in = type == BT_TYPE_Q8_0 ? 3 : 5;
    static const int64_t n_outs[] = {1, 3, 17, 33};
    static const int n_toks[] = {1, 2, 5, 13};
    rng_t r = rng_make(100 + type);
    for (int a = 0; a < n_n_in; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 4; c++)
                mm_case(type, n_ins[a], n_outs[b], n_toks[c], 0, &r);
}
END_TEST

/* Longer rows, rows farther apart than needed (padding holds nan). */
START_TEST(test_matmul_padded_large)
{
    const uint32_t type = mm_types[_i];
    rng_t r = rng_make(200 + type);
    mm_case(type, 256, 50, 7, 64, &r);
    mm_case(type, type == BT_TYPE_Q8_0 ? 64 : 33, 19, 4, 8, &r);
    mm_case(type, 1024, 20, 3, 0, &r);
    /* enough tokens that packed F16/BF16 panels are widened to f32 first */
    mm_case(type, type == BT_TYPE_Q8_0 ? 96 : 67, 49, 40, 0, &r);
    /* 19 panels: packed in groups of 8 (AVX-512; 4 with AVX2) interleaved
     * by k and a partial last group, read by one token's whole groups and
     * single panels, pairs for a few tokens, widened pairs for more */
    for (int t = 1; t <= 33; t += 8)
        mm_case(type, type == BT_TYPE_Q8_0 ? 64 : 40, 300, t, 0, &r);
}
END_TEST

/* ==== invariance: one batch vs micro-batches vs threads, bitwise ==== */

static const int splits[][6] = {
    {1, 1, 1, 1, 1, 1}, /* 1 at a time (repeats until all 13 are done) */
    {3, 3, 3, 3, 1, 0}, {5, 5, 3, 0, 0, 0}, {1, 3, 5, 1, 3, 0}, {4, 9, 0, 0, 0, 0},
};

/* Size of the next micro-batch of a split pattern, at most `left`. */
static int split_next(const int *pat, int *idx, int left)
{
    int n = pat[*idx % 6];
    if (n == 0) {
        *idx = 0;
        n = pat[0];
    }
    (*idx)++;
    return n < left ? n : left;
}

/* n_in 67 takes the tiled path with a tail; 96 (a multiple of 32) also
 * the fused one-token GEMV where the type has one: every split mixes both. */
static void matmul_invariance(const bt_ops_t *ops, uint32_t type, int64_t n_in, int64_t n_out,
                              bool pack)
{
    enum { NT = 13 };
    rng_t r = rng_make(300 + type + (uint64_t)n_in);
    wmat_t w = wmat_make(type, n_in, n_out, 0, &r);
    float *x = xmalloc((size_t)(NT * n_in) * sizeof(float));
    float *full = xmalloc((size_t)(NT * n_out) * sizeof(float));
    float *part = xmalloc((size_t)(NT * n_out) * sizeof(float));
    fill(x, (size_t)(NT * n_in), &r, -2.0f, 2.0f);
    void *packed = pack ? tu_pack(&w.m) : NULL;
    w.m.packed = packed;
    bt_scratch_t s1 = scratch_make(n_in, 1, 1);
    ops->matmul(full, &w.m, x, NT, &s1);
    for (int nth = 1; nth <= 3; nth++) {
        bt_scratch_t s = scratch_make(n_in, 1, nth);
        memset(part, 0xff, (size_t)(NT * n_out) * sizeof(float));
        ops->matmul(part, &w.m, x, NT, &s);
        CHECK_MSG(memcmp(part, full, (size_t)(NT * n_out) * sizeof(float)) == 0,
                  "%s %s: %d threads differ from 1", ops->name, bt_type_info(type)->name, nth);
        for (size_t p = 0; p < sizeof splits / sizeof splits[0]; p++) {
            memset(part, 0xff, (size_t)(NT * n_out) * sizeof(float));
            int idx = 0;
            for (int t = 0; t < NT;) {
                int n = split_next(splits[p], &idx, NT - t);
                ops->matmul(part + (size_t)t * n_out, &w.m, x + (size_t)t * n_in, n, &s);
                t += n;
            }
            for (int t = 0; t < NT; t++)
                CHECK_MSG(
                    memcmp(part + t * n_out, full + t * n_out, (size_t)n_out * sizeof(float)) == 0,
                    "%s %s%s: split %zu, %d threads: token %d differs from one batch",
                    ops->name, bt_type_info(type)->name, packed ? " packed" : "", p, nth, t);
        }
        free(s.buf);
    }
    free(s1.buf);
    free(packed);
    free(part);
    free(full);
    free(x);
    wmat_free(&w);
}

START_TEST(test_matmul_batch_invariance)
{
    const uint32_t type = mm_types[_i];
    if (type != BT_TYPE_Q8_0)
        matmul_invariance(&bt_ops_exact, type, 67, 37, false);
    matmul_invariance(&bt_ops_exact, type, 96, 37, false);
    if (type != BT_TYPE_Q8_0 && !bt_ops_cpu_is_exact(type, 96)) /* 37 rows: a partial panel; 13 tokens: 8 + 5 */
        for (int pack = 0; pack <= 1; pack++) {
            matmul_invariance(&bt_ops_cpu, type, 67, 37, pack);
            matmul_invariance(&bt_ops_cpu, type, 96, 37, pack);
            /* one-row products long enough for the team however few their
             * multiply-adds (at least 128 KiB of weights), in few panels:
             * 8, a mixture's router's, and 12 with the last partial */
            matmul_invariance(&bt_ops_cpu, type, 1024, 128, pack);
            matmul_invariance(&bt_ops_cpu, type, 1024, 190, pack);
        }
}
END_TEST

/* bt_matmul_many gives each product the bits of its rows in a product of
 * NT tokens alone on one thread, for 1 to 3 threads: one-token products of
 * grouped F16/BF16 panels, or on the 8-bit path, share one region; a
 * batch with a product of several tokens or without packed panels runs
 * one product after another. The shapes: 9 panels (a group and one alone), 12 (a
 * group and 4 alone, the last partial), 24 (3 groups, the last one's last
 * panel partial); 288 KiB and more, so the team takes them however few
 * their multiply-adds. */
START_TEST(test_matmul_many)
{
    enum { NJ = 3, NT = 3 };
    static const int64_t shape[NJ][2] = {{1024, 144}, {1024, 190}, {96, 376}};
    const uint32_t type = mm_types[_i];
    rng_t r = rng_make(900 + type);
    wmat_t w[NJ];
    void *packed[NJ];
    float *x[NJ], *want[NJ], *got[NJ];
    for (int j = 0; j < NJ; j++) {
        w[j] = wmat_make(type, shape[j][0], shape[j][1], 0, &r);
        packed[j] = tu_pack(&w[j].m);
        x[j] = xmalloc((size_t)(NT * shape[j][0]) * sizeof(float));
        fill(x[j], (size_t)(NT * shape[j][0]), &r, -2.0f, 2.0f);
        want[j] = xmalloc((size_t)(NT * shape[j][1]) * sizeof(float));
        got[j] = xmalloc((size_t)(NT * shape[j][1]) * sizeof(float));
    }
    memcpy(x[1], x[0], (size_t)shape[0][0] * sizeof(float)); /* q, k, v: one input */
    bt_scratch_t s1 = scratch_make(1024, 1, 1);
    for (int pack = 0; pack <= 1; pack++)
        for (int n_tok_last = 1; n_tok_last <= NT; n_tok_last += NT - 1) {
            bt_matmul_job_t jobs[NJ];
            for (int j = 0; j < NJ; j++) {
                w[j].m.packed = pack ? packed[j] : NULL;
                const int nt = j == NJ - 1 ? n_tok_last : 1;
                jobs[j] = (bt_matmul_job_t){got[j], w[j].m, x[j], nt};
                /* the rows of an NT-token product: another path, the same bits */
                bt_ops_cpu.matmul(want[j], &w[j].m, x[j], NT, &s1);
            }
            for (int nth = 1; nth <= 3; nth++) {
                bt_scratch_t s = scratch_make(1024, 1, nth);
                for (int j = 0; j < NJ; j++)
                    memset(got[j], 0xff, (size_t)(NT * shape[j][1]) * sizeof(float));
                bt_matmul_many(&bt_ops_cpu, jobs, NJ, &s);
                for (int j = 0; j < NJ; j++)
                    CHECK_MSG(memcmp(got[j], want[j],
                                     (size_t)(jobs[j].n_tok * shape[j][1]) * sizeof(float)) == 0,
                              "%s%s: product %d of a batch (last of %d tokens) on %d threads "
                              "differs from it alone",
                              bt_type_info(type)->name, pack ? " packed" : "", j, n_tok_last, nth);
                free(s.buf);
            }
        }
    free(s1.buf);
    for (int j = 0; j < NJ; j++) {
        free(packed[j]);
        free(x[j]);
        free(want[j]);
        free(got[j]);
        wmat_free(&w[j]);
    }
}
END_TEST

/* Calls ops->attention with keys given as rows [n_ctx][n_kv * hd], as the
 * oracle reads them: transposes them into the kernel's [n_kv * hd][n_ctx],
 * in f32 or, for kv_type BT_TYPE_F16, converted to f16 (exact for values
 * that kv_round has rounded). The shape is *pa; its k_stride is n_ctx. */
static void call_attention_a(const bt_ops_t *ops, float *out, const float *q, const float *k_rows,
                             const float *v, uint32_t kv_type, int n_tok, int pos0,
                             const bt_attn_t *pa, const bt_scratch_t *s)
{
    const bt_attn_t a = *pa;
    const int n_ctx = a.k_stride;
    const size_t kvd = (size_t)a.n_head_kv * a.head_dim, n = (size_t)n_ctx * kvd;
    float *kt = xmalloc(n * sizeof(float));
    for (int j = 0; j < n_ctx; j++)
        for (size_t c = 0; c < kvd; c++)
            kt[c * (size_t)n_ctx + j] = k_rows[(size_t)j * kvd + c];
    if (kv_type == BT_TYPE_F16) {
        uint16_t *kh = xmalloc(n * sizeof(uint16_t)), *vh = xmalloc(n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) {
            kh[i] = bt_f32_to_f16(kt[i]);
            vh[i] = bt_f32_to_f16(v[i]);
        }
        ops->attention(out, q, kh, vh, kv_type, n_tok, pos0, &a, s);
        free(vh);
        free(kh);
    } else {
        ops->attention(out, q, kt, v, kv_type, n_tok, pos0, &a, s);
    }
    free(kt);
}

/* Full causal attention (no window) with the usual scale 1 / sqrt(hd). */
static void call_attention(const bt_ops_t *ops, float *out, const float *q, const float *k_rows,
                           const float *v, uint32_t kv_type, int n_tok, int pos0, int n_head,
                           int n_kv, int hd, int n_ctx, const bt_scratch_t *s)
{
    const bt_attn_t a = {n_head, n_kv, hd, n_ctx, 0, 1.0f / sqrtf((float)hd)};
    call_attention_a(ops, out, q, k_rows, v, kv_type, n_tok, pos0, &a, s);
}

/* Rounds n values to f16 in place, so an f16 cache holds them exactly. */
static void kv_round(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = bt_f16_to_f32(bt_f32_to_f16(x[i]));
}

/* Invariant 1 for attention: the rows of one call over positions pos0 ..
 * pos0 + nt - 1, of the same call split into micro-batches of 1, 3, 2, ...
 * (so a row shares its passes with other tokens) and of 1-3 threads are
 * bitwise equal. */
static void attn_invariance_case(int n_head, int n_kv, int hd, int nt, int pos0, int window,
                                 uint32_t kv_type, uint64_t seed)
{
    const int n_ctx = pos0 + nt;
    const size_t qd = (size_t)n_head * hd, kvd = (size_t)n_kv * hd, nq = (size_t)nt * qd;
    rng_t r = rng_make(seed);
    float *q = xmalloc(nq * sizeof(float));
    float *k = xmalloc((size_t)n_ctx * kvd * sizeof(float));
    float *v = xmalloc((size_t)n_ctx * kvd * sizeof(float));
    float *full = xmalloc(nq * sizeof(float)), *part = xmalloc(nq * sizeof(float));
    fill(q, nq, &r, -2.0f, 2.0f);
    fill(k, (size_t)n_ctx * kvd, &r, -2.0f, 2.0f);
    fill(v, (size_t)n_ctx * kvd, &r, -1.0f, 1.0f);
    /* keys drift with position, so the scores of a row whose q sums > 0
     * keep rising: its running max moves in every key block, and a block
     * placed anywhere else would round differently */
    for (int j = 0; j < n_ctx; j++)
        for (size_t c = 0; c < kvd; c++)
            k[(size_t)j * kvd + c] += 3.0f * (float)j / (float)n_ctx;
    const bt_attn_t a = {n_head, n_kv, hd, n_ctx, window, 1.0f / sqrtf((float)hd)};
    bt_scratch_t s1 = scratch_make(1, n_ctx, 1);
    call_attention_a(&bt_ops_cpu, full, q, k, v, kv_type, nt, pos0, &a, &s1);
    for (int nth = 1; nth <= 3; nth++) {
        bt_scratch_t s = scratch_make(1, n_ctx, nth);
        memset(part, 0xff, nq * sizeof(float));
        call_attention_a(&bt_ops_cpu, part, q, k, v, kv_type, nt, pos0, &a, &s);
        CHECK_MSG(memcmp(part, full, nq * sizeof(float)) == 0,
                  "heads %d/%d hd %d window %d kv %u: %d threads differ from 1", n_head, n_kv, hd,
                  window, (unsigned)kv_type, nth);
        for (size_t p = 0; p < sizeof splits / sizeof splits[0]; p++) {
            memset(part, 0xff, nq * sizeof(float));
            int idx = 0;
            for (int t = 0; t < nt;) {
                int n = split_next(splits[p], &idx, nt - t);
                call_attention_a(&bt_ops_cpu, part + t * qd, q + t * qd, k, v, kv_type, n,
                                 pos0 + t, &a, &s);
                t += n;
            }
            for (int t = 0; t < nt; t++)
                CHECK_MSG(memcmp(part + t * qd, full + t * qd, qd * sizeof(float)) == 0,
                          "heads %d/%d hd %d window %d kv %u pos0 %d: split %zu, %d threads: "
                          "token %d differs",
                          n_head, n_kv, hd, window, (unsigned)kv_type, pos0, p, nth, t);
        }
        free(s.buf);
    }
    free(s1.buf);
    free(part);
    free(full);
    free(v);
    free(k);
    free(q);
}

START_TEST(test_attention_batch_invariance)
{
    static const int dims[] = {20, 64};
    attn_invariance_case(6, 3, dims[_i % 2], 13, 4, 0, _i < 2 ? BT_TYPE_F32 : BT_TYPE_F16,
                         400 + (uint64_t)dims[_i % 2]);
}
END_TEST

/* Across the cpu kernel's key blocks (BT_ATT_KEY_BLOCK keys at fixed
 * positions): a batch that starts before a block boundary and ends past
 * it, one long enough to fill several units of rows, windows that start
 * inside a block, f32 and f16. */
START_TEST(test_attention_key_blocks_invariance)
{
    const uint32_t kv = _i % 2 ? BT_TYPE_F16 : BT_TYPE_F32;
    const int kb = BT_ATT_KEY_BLOCK;
    switch (_i / 2) {
    case 0: attn_invariance_case(6, 3, 64, 40, kb - 17, 0, kv, 2100); break;
    case 1: attn_invariance_case(8, 1, 20, 30, 2 * kb - 9, 100, kv, 2101); break;
    case 2: attn_invariance_case(4, 2, 16, kb + 30, 3, 0, kv, 2102); break;
    default: attn_invariance_case(2, 2, 24, 21, kb + 5, kb - 3, kv, 2103); break;
    }
}
END_TEST

/* ==== attention ==== */

/* softmax(scale q.k) v for query t, head h, in double, over the keys it
 * sees (j <= p and, with a window w > 0, p - j < w), with a bound on
 * the error of any f32 implementation that computes the dots in some order
 * (score error delta_j), exp/scale/subtract to a few ulp, and the weighted
 * sum of values in some order:
 *   weights p_j off by a factor exp(eps_j), |eps_j| <= E
 *   -> |out - exact| <= (2.2 E + gamma(n_keys + 16) + 4u) * sum p|v| / sum p. */
static void attn_oracle(double *o, double *tol, const float *q, const float *k, const float *v,
                        int t, int pos0, int h, int n_head, int n_kv, int hd, int window,
                        double scale)
{
    const int p = pos0 + t, j0 = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    const int group = n_head / n_kv, kvh = h / group, n_keys = p + 1 - j0;
    const size_t kvd = (size_t)n_kv * hd;
    const float *qh = q + ((size_t)t * n_head + h) * hd;
    k += (size_t)j0 * kvd; /* key and value j are position j0 + j */
    v += (size_t)j0 * kvd;
    double *sc = xmalloc((size_t)n_keys * sizeof(double));
    double *del = xmalloc((size_t)n_keys * sizeof(double));
    double max = -INFINITY, dmax = 0;
    for (int j = 0; j < n_keys; j++) {
        const float *kj = k + (size_t)j * kvd + (size_t)kvh * hd;
        double dot = 0, sabs = 0;
        for (int d = 0; d < hd; d++) {
            dot += (double)qh[d] * kj[d];
            sabs += fabs((double)qh[d] * kj[d]);
        }
        sc[j] = dot * scale;
        del[j] = dot_bound(hd, sabs) * scale + fabs(sc[j]) * 4 * U;
        max = fmax(max, sc[j]);
        dmax = fmax(dmax, del[j]);
    }
    double e_max = 0, sum = 0;
    for (int j = 0; j < n_keys; j++) {
        e_max = fmax(e_max, del[j] + dmax + fabs(sc[j] - max) * 2 * U + 4 * U);
        sc[j] = exp(sc[j] - max);
        sum += sc[j];
    }
    for (int d = 0; d < hd; d++) {
        double acc = 0, aabs = 0;
        for (int j = 0; j < n_keys; j++) {
            double vj = v[(size_t)j * kvd + (size_t)kvh * hd + d];
            acc += sc[j] * vj;
            aabs += sc[j] * fabs(vj);
        }
        o[d] = acc / sum;
        tol[d] = (2.2 * e_max + (double)(n_keys + 17) * U * 1.01 + 4 * U) * aabs / sum + 1e-30;
    }
    free(del);
    free(sc);
}

/* cpu and ref against the double oracle (each within tol, each other 2
 * tol); with an f16 cache the oracle reads the f16-rounded keys and values
 * the kernels read. */
static void attn_case(int n_head, int n_kv, int hd, int pos0, int n_tok, int n_ctx_extra,
                      uint32_t kv_type, rng_t *r)
{
    const int n_ctx = pos0 + n_tok + n_ctx_extra;
    const size_t qd = (size_t)n_head * hd, kvd = (size_t)n_kv * hd;
    float *q = xmalloc((size_t)n_tok * qd * sizeof(float));
    float *k = xmalloc((size_t)n_ctx * kvd * sizeof(float));
    float *v = xmalloc((size_t)n_ctx * kvd * sizeof(float));
    float *out_ref = xmalloc((size_t)n_tok * qd * sizeof(float));
    float *out_cpu = xmalloc((size_t)n_tok * qd * sizeof(float));
    double *o = xmalloc((size_t)hd * sizeof(double));
    double *tol = xmalloc((size_t)hd * sizeof(double));
    fill(q, (size_t)n_tok * qd, r, -2.0f, 2.0f);
    fill(k, (size_t)n_ctx * kvd, r, -2.0f, 2.0f);
    fill(v, (size_t)n_ctx * kvd, r, -1.0f, 1.0f);
    if (kv_type == BT_TYPE_F16) {
        kv_round(k, (size_t)n_ctx * kvd);
        kv_round(v, (size_t)n_ctx * kvd);
    }
    /* rows past the batch must never be read: nan there */
    const size_t used = (size_t)(pos0 + n_tok) * kvd;
    for (size_t i = used; i < (size_t)n_ctx * kvd; i++)
        k[i] = v[i] = NAN;
    bt_scratch_t s1 = scratch_make(1, pos0 + n_tok, 1);
    memset(out_ref, 0xff, (size_t)n_tok * qd * sizeof(float));
    call_attention(&bt_ops_ref, out_ref, q, k, v, kv_type, n_tok, pos0, n_head, n_kv, hd, n_ctx,
                   &s1);
    for (int nth = 1; nth <= 3; nth++) {
        bt_scratch_t s = scratch_make(1, pos0 + n_tok, nth);
        memset(out_cpu, 0xff, (size_t)n_tok * qd * sizeof(float));
        call_attention(&bt_ops_cpu, out_cpu, q, k, v, kv_type, n_tok, pos0, n_head, n_kv, hd, n_ctx,
                       &s);
        for (int t = 0; t < n_tok; t++)
            for (int h = 0; h < n_head; h++) {
                attn_oracle(o, tol, q, k, v, t, pos0, h, n_head, n_kv, hd, 0,
                            1.0 / sqrt((double)hd));
                for (int d = 0; d < hd; d++) {
                    size_t i = ((size_t)t * n_head + h) * hd + d;
                    double c = out_cpu[i], rf = out_ref[i];
                    CHECK_MSG(fabs(c - o[d]) <= tol[d] && fabs(rf - o[d]) <= tol[d] &&
                                  fabs(c - rf) <= 2 * tol[d],
                              "heads %d/%d hd %d pos0 %d n_tok %d kv %u threads %d: t %d h %d "
                              "d %d: cpu %.9g ref %.9g exact %.9g (tol %.3g)",
                              n_head, n_kv, hd, pos0, n_tok, (unsigned)kv_type, nth, t, h, d, c,
                              rf, o[d], tol[d]);
                }
            }
        free(s.buf);
    }
    free(s1.buf);
    free(tol);
    free(o);
    free(out_cpu);
    free(out_ref);
    free(v);
    free(k);
    free(q);
}

START_TEST(test_attention_vs_double)
{
    static const int heads[][2] = {{4, 2}, {6, 3}, {4, 4}, {8, 1}};
    static const int dims[] = {12, 16, 20, 64};
    const int n_head = heads[_i][0], n_kv = heads[_i][1];
    rng_t r = rng_make(500 + (uint64_t)_i);
    for (int d = 0; d < 4; d++)
        for (uint32_t kv = BT_TYPE_F32; kv <= BT_TYPE_F16; kv++) {
            attn_case(n_head, n_kv, dims[d], 0, 1, 0, kv, &r);
            attn_case(n_head, n_kv, dims[d], 0, 5, 3, kv, &r);
            attn_case(n_head, n_kv, dims[d], 9, 1, 2, kv, &r);
            attn_case(n_head, n_kv, dims[d], 7, 4, 0, kv, &r);
            attn_case(n_head, n_kv, dims[d], 37, 3, 5, kv, &r); /* key blocks with tails */
        }
}
END_TEST

/* The avx512 and avx2 builds give the same bits: every score, softmax
 * weight and output element goes through the same operations per lane
 * (head_dim 72 leaves AVX-512 a tail of 8 dims that AVX2 takes as one
 * vector; 37 keys end both in a partial vector). */
START_TEST(test_attention_isa_same)
{
    enum { NT = 9, POS0 = 28, NCTX = POS0 + NT };
    static const int dims[] = {20, 64, 72};
    const int n_head = 6, n_kv = 2, hd = dims[_i % 3];
    const uint32_t kv_type = _i < 3 ? BT_TYPE_F32 : BT_TYPE_F16;
    const char *missing = bt_isa_missing(BT_ISA_TOP);
    missing = missing ? missing : bt_isa_missing(BT_ISA_MID);
    if (missing != NULL) {
        fprintf(stderr, "SKIP: attention isa_same (%s vs %s bits): this CPU lacks %s\n",
                bt_isa_name(BT_ISA_TOP), bt_isa_name(BT_ISA_MID), missing);
        return;
    }
    const bt_isa_t was = bt_isa_active();
    const size_t qd = (size_t)n_head * hd, kvd = (size_t)n_kv * hd;
    rng_t r = rng_make(450 + (uint64_t)hd);
    float *q = xmalloc(NT * qd * sizeof(float));
    float *k = xmalloc(NCTX * kvd * sizeof(float));
    float *v = xmalloc(NCTX * kvd * sizeof(float));
    float *out[2] = {xmalloc(NT * qd * sizeof(float)), xmalloc(NT * qd * sizeof(float))};
    fill(q, NT * qd, &r, -3.0f, 3.0f);
    fill(k, NCTX * kvd, &r, -3.0f, 3.0f);
    fill(v, NCTX * kvd, &r, -1.0f, 1.0f);
    bt_scratch_t s = scratch_make(1, NCTX, 2);
    for (int i = 0; i < 2; i++) {
        ck_assert(bt_isa_select(i ? BT_ISA_MID : BT_ISA_TOP));
        memset(out[i], 0xff, NT * qd * sizeof(float));
        call_attention(&bt_ops_cpu, out[i], q, k, v, kv_type, NT, POS0, n_head, n_kv, hd, NCTX, &s);
    }
    bt_isa_select(was);
    for (size_t e = 0; e < NT * qd; e++)
        CHECK_MSG(memcmp(&out[0][e], &out[1][e], sizeof(float)) == 0,
                  "head_dim %d kv %u: element %zu: %s %a, %s %a", hd, (unsigned)kv_type, e,
                  bt_isa_name(BT_ISA_MID), (double)out[1][e], bt_isa_name(BT_ISA_TOP),
                  (double)out[0][e]);
    free(s.buf);
    free(out[1]);
    free(out[0]);
    free(v);
    free(k);
    free(q);
}
END_TEST

/* A key far more aligned with q than the others: the softmax saturates;
 * position 0 alone: out = v[0] exactly up to rounding. */
START_TEST(test_attention_edges)
{
    enum { HD = 16, NH = 2, NKV = 1 };
    float q[NH * HD], k[3 * HD], v[3 * HD], out[NH * HD];
    rng_t r = rng_make(600);
    fill(q, NH * HD, &r, -1.0f, 1.0f);
    fill(k, 3 * HD, &r, -1.0f, 1.0f);
    fill(v, 3 * HD, &r, -1.0f, 1.0f);
    for (int opi = 0; opi < 2; opi++) {
        const bt_ops_t *ops = opi ? &bt_ops_cpu : &bt_ops_ref;
        bt_scratch_t s = scratch_make(1, 3, 1);
        call_attention(ops, out, q, k, v, BT_TYPE_F32, 1, 0, NH, NKV, HD, 3, &s); /* one key: weight 1 */
        for (int h = 0; h < NH; h++)
            for (int d = 0; d < HD; d++)
                CHECK_MSG(out[h * HD + d] == v[d], "%s: h %d d %d: %g != %g", ops->name, h, d,
                          (double)out[h * HD + d], (double)v[d]);
        /* key 1 = 100 * q: its weight ~1, out ~ v[1] */
        for (int d = 0; d < HD; d++)
            k[HD + d] = 100.0f * q[d];
        call_attention(ops, out, q, k, v, BT_TYPE_F32, 1, 1, 1, 1, HD, 3, &s);
        for (int d = 0; d < HD; d++)
            CHECK_MSG(fabsf(out[d] - v[HD + d]) <= 1e-6f, "%s: saturated d %d: %g vs %g", ops->name,
                      d, (double)out[d], (double)v[HD + d]);
        free(s.buf);
    }
}
END_TEST

/* ==== sliding-window attention ==== */

/* One windowed case: cpu (1 and 3 threads) and ref against the double
 * oracle over the keys [p - w + 1, p], as in attn_case; window 1 leaves one
 * key of weight 1, so out = v[p] exactly; a window past the context is no
 * window, bit for bit. Rows of the cache past the batch are nan. */
static void attn_window_case(int n_head, int n_kv, int hd, int pos0, int n_tok, int window,
                             float scale, uint32_t kv_type, rng_t *r)
{
    const int n_ctx = pos0 + n_tok + 2;
    const size_t qd = (size_t)n_head * hd, kvd = (size_t)n_kv * hd, nq = (size_t)n_tok * qd;
    float *q = xmalloc(nq * sizeof(float));
    float *k = xmalloc((size_t)n_ctx * kvd * sizeof(float));
    float *v = xmalloc((size_t)n_ctx * kvd * sizeof(float));
    float *out_ref = xmalloc(nq * sizeof(float)), *out_cpu = xmalloc(nq * sizeof(float));
    float *out_all = xmalloc(nq * sizeof(float));
    double *o = xmalloc((size_t)hd * sizeof(double)), *tol = xmalloc((size_t)hd * sizeof(double));
    fill(q, nq, r, -2.0f, 2.0f);
    fill(k, (size_t)n_ctx * kvd, r, -2.0f, 2.0f);
    fill(v, (size_t)n_ctx * kvd, r, -1.0f, 1.0f);
    if (kv_type == BT_TYPE_F16) {
        kv_round(k, (size_t)n_ctx * kvd);
        kv_round(v, (size_t)n_ctx * kvd);
    }
    for (size_t i = (size_t)(pos0 + n_tok) * kvd; i < (size_t)n_ctx * kvd; i++)
        k[i] = v[i] = NAN;
    const bt_attn_t a = {n_head, n_kv, hd, n_ctx, window, scale};
    const bt_attn_t all = {n_head, n_kv, hd, n_ctx, 0, scale};
    const char *what[2] = {"ref", "cpu"};
    for (int nth = 1; nth <= 3; nth += 2) {
        bt_scratch_t s = scratch_make(1, pos0 + n_tok, nth);
        memset(out_ref, 0xff, nq * sizeof(float));
        memset(out_cpu, 0xff, nq * sizeof(float));
        call_attention_a(&bt_ops_ref, out_ref, q, k, v, kv_type, n_tok, pos0, &a, &s);
        call_attention_a(&bt_ops_cpu, out_cpu, q, k, v, kv_type, n_tok, pos0, &a, &s);
        for (int t = 0; t < n_tok; t++)
            for (int h = 0; h < n_head; h++) {
                attn_oracle(o, tol, q, k, v, t, pos0, h, n_head, n_kv, hd, window,
                            (double)scale);
                const int kvh = h / (n_head / n_kv);
                for (int d = 0; d < hd; d++) {
                    const size_t i = ((size_t)t * n_head + h) * hd + d;
                    const double c = out_cpu[i], rf = out_ref[i];
                    CHECK_MSG(fabs(c - o[d]) <= tol[d] && fabs(rf - o[d]) <= tol[d] &&
                                  fabs(c - rf) <= 2 * tol[d],
                              "window %d heads %d/%d hd %d pos0 %d n_tok %d kv %u threads %d: "
                              "t %d h %d d %d: cpu %.9g ref %.9g exact %.9g (tol %.3g)",
                              window, n_head, n_kv, hd, pos0, n_tok, (unsigned)kv_type, nth, t,
                              h, d, c, rf, o[d], tol[d]);
                    if (window == 1) {
                        const float want = v[(size_t)(pos0 + t) * kvd + (size_t)kvh * hd + d];
                        CHECK_MSG(out_cpu[i] == want && out_ref[i] == want,
                                  "window 1 pos %d h %d d %d: cpu %a ref %a, want v %a",
                                  pos0 + t, h, d, (double)out_cpu[i], (double)out_ref[i],
                                  (double)want);
                    }
                }
            }
        if (window >= pos0 + n_tok)
            for (int opi = 0; opi < 2; opi++) {
                call_attention_a(opi ? &bt_ops_cpu : &bt_ops_ref, out_all, q, k, v, kv_type,
                                 n_tok, pos0, &all, &s);
                CHECK_MSG(memcmp(out_all, opi ? out_cpu : out_ref, nq * sizeof(float)) == 0,
                          "%s: window %d >= %d positions differs from no window", what[opi],
                          window, pos0 + n_tok);
            }
        free(s.buf);
    }
    free(tol);
    free(o);
    free(out_all);
    free(out_cpu);
    free(out_ref);
    free(v);
    free(k);
    free(q);
}

/* GQA groups 1, 2, 4, 8 (passes of 8, 4, 2, 1 tokens in the cpu kernel),
 * windows 1, 3, 7 and one past the context, n_tok 1..13 from positions
 * before and well past the window, f32 and f16 caches. */
START_TEST(test_attention_window)
{
    static const int heads[][2] = {{2, 2}, {4, 2}, {8, 2}, {8, 1}};
    static const int windows[] = {1, 3, 7, 40};
    static const int pos0s[] = {0, 2, 11, 20};
    rng_t r = rng_make(1200 + (uint64_t)_i);
    for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++)
        for (size_t p = 0; p < sizeof pos0s / sizeof pos0s[0]; p++)
            for (int nt = 1; nt <= 13; nt++)
                for (uint32_t kv = BT_TYPE_F32; kv <= BT_TYPE_F16; kv++)
                    attn_window_case(heads[_i][0], heads[_i][1], (nt + (int)w) % 2 ? 20 : 16,
                                     pos0s[p], nt, windows[w], w % 2 ? 0.0625f : 0.37f, kv, &r);
}
END_TEST

/* Long contexts, against the double oracle: batches across the cpu
 * kernel's key-block boundaries, decode far into the cache, windows that
 * start inside a block and a window past the context (which must equal no
 * window, bit for bit). */
START_TEST(test_attention_key_blocks)
{
    const int kb = BT_ATT_KEY_BLOCK;
    const uint32_t kv = _i ? BT_TYPE_F16 : BT_TYPE_F32;
    rng_t r = rng_make(2200 + (uint64_t)_i);
    attn_window_case(6, 3, 64, kb - 20, 45, 0, 0.125f, kv, &r);
    attn_window_case(4, 1, 20, 3 * kb - 1, 1, 0, 0.25f, kv, &r);
    attn_window_case(8, 2, 16, kb + 40, 9, kb / 2 + 3, 0.25f, kv, &r);
    attn_window_case(2, 2, 32, 0, kb + 33, 2 * kb, 0.2f, kv, &r);
}
END_TEST

/* Sinks over several key blocks: the sink joins the running max from the
 * first block on and its weight joins the sum last; cpu against ref (which
 * takes the softmax in one pass), and against the same call with the sink
 * at -inf, which must differ where the sink outweighs the keys. */
START_TEST(test_attention_sinks_long)
{
    enum { NH = 4, NKV = 2, HD = 32, NT = 5 };
    const int pos0 = 2 * BT_ATT_KEY_BLOCK + 11, n_ctx = pos0 + NT;
    const size_t qd = (size_t)NH * HD, kvd = (size_t)NKV * HD, nq = NT * qd;
    rng_t r = rng_make(2300);
    float *q = xmalloc(nq * sizeof(float)), *out_ref = xmalloc(nq * sizeof(float));
    float *out_cpu = xmalloc(nq * sizeof(float)), *out_none = xmalloc(nq * sizeof(float));
    float *k = xmalloc((size_t)n_ctx * kvd * sizeof(float));
    float *v = xmalloc((size_t)n_ctx * kvd * sizeof(float));
    fill(q, nq, &r, -1.0f, 1.0f);
    fill(k, (size_t)n_ctx * kvd, &r, -1.0f, 1.0f);
    fill(v, (size_t)n_ctx * kvd, &r, -1.0f, 1.0f);
    /* head 0: no weight to speak of; head 3: about as much as all the keys */
    const float sinks[NH] = {-30.0f, 0.5f, 3.0f, 6.5f};
    bt_attn_t a = {NH, NKV, HD, n_ctx, 0, 0.25f, sinks};
    for (int nth = 1; nth <= 2; nth++) {
        bt_scratch_t s = scratch_make(1, n_ctx, nth);
        call_attention_a(&bt_ops_ref, out_ref, q, k, v, BT_TYPE_F32, NT, pos0, &a, &s);
        call_attention_a(&bt_ops_cpu, out_cpu, q, k, v, BT_TYPE_F32, NT, pos0, &a, &s);
        a.sinks = NULL;
        call_attention_a(&bt_ops_cpu, out_none, q, k, v, BT_TYPE_F32, NT, pos0, &a, &s);
        a.sinks = sinks;
        for (size_t e = 0; e < nq; e++) {
            const int h = (int)(e / HD % NH);
            CHECK_MSG(fabsf(out_cpu[e] - out_ref[e]) <= 2e-6f,
                      "threads %d: element %zu (head %d, sink %g): cpu %.9g ref %.9g", nth, e, h,
                      (double)sinks[h], (double)out_cpu[e], (double)out_ref[e]);
            if (h == 3) /* the sink takes about half the weight: outputs shrink */
                CHECK_MSG(fabsf(out_cpu[e]) < 0.75f * fabsf(out_none[e]) + 1e-6f,
                          "element %zu: with sink %.9g, without %.9g", e, (double)out_cpu[e],
                          (double)out_none[e]);
        }
        free(s.buf);
    }
    free(v);
    free(k);
    free(out_none);
    free(out_cpu);
    free(out_ref);
    free(q);
}
END_TEST

/* The edge of the window, exactly: every value is 0 except key b's, so a
 * row's output is exactly 0 where b is outside its window (p - b >= w or
 * b > p; a pass of the cpu kernel scores keys from its earliest row's
 * window start and zero-weights those before each later row's own start)
 * and nonzero where b is inside. Every key position b, passes of 8, 4, 2
 * and 1 tokens, windows 1, 3 and 6, ref and cpu, 1 and 2 threads. */
START_TEST(test_attention_window_edge)
{
    enum { HD = 16, NT = 13, POS0 = 5, NCTX = POS0 + NT };
    static const int heads[][2] = {{1, 1}, {2, 1}, {8, 2}, {8, 1}};
    static const int windows[] = {1, 3, 6};
    const int n_head = heads[_i][0], n_kv = heads[_i][1];
    const size_t qd = (size_t)n_head * HD, kvd = (size_t)n_kv * HD;
    rng_t r = rng_make(1300 + (uint64_t)_i);
    float *q = xmalloc(NT * qd * sizeof(float)), *out = xmalloc(NT * qd * sizeof(float));
    float *k = xmalloc(NCTX * kvd * sizeof(float)), *v = xmalloc(NCTX * kvd * sizeof(float));
    fill(q, NT * qd, &r, -1.0f, 1.0f);
    fill(k, NCTX * kvd, &r, -1.0f, 1.0f);
    for (uint32_t kv = BT_TYPE_F32; kv <= BT_TYPE_F16; kv++)
        for (size_t wi = 0; wi < sizeof windows / sizeof windows[0]; wi++)
            for (int b = 0; b < NCTX; b++) {
                memset(v, 0, NCTX * kvd * sizeof(float));
                for (size_t c = 0; c < kvd; c++)
                    v[(size_t)b * kvd + c] = 1.0f + (float)c / 8.0f;
                const bt_attn_t a = {n_head, n_kv, HD, NCTX, windows[wi], 0.25f};
                for (int opi = 0; opi < 2; opi++)
                    for (int nth = 1; nth <= 2; nth++) {
                        const bt_ops_t *ops = opi ? &bt_ops_cpu : &bt_ops_ref;
                        bt_scratch_t s = scratch_make(1, NCTX, nth);
                        memset(out, 0xff, NT * qd * sizeof(float));
                        call_attention_a(ops, out, q, k, v, kv, NT, POS0, &a, &s);
                        for (int t = 0; t < NT; t++) {
                            const int p = POS0 + t;
                            const bool sees = b <= p && p - b < windows[wi];
                            for (size_t e = 0; e < qd; e++) {
                                const float x = out[(size_t)t * qd + e];
                                CHECK_MSG(sees ? x > 0.0f : f32_bits(x) == 0,
                                          "%s heads %d/%d window %d kv %u threads %d: query at "
                                          "%d, value only at key %d: out[%zu] = %a, want %s",
                                          ops->name, n_head, n_kv, windows[wi], (unsigned)kv, nth,
                                          p, b, e, (double)x, sees ? "> 0" : "+0");
                            }
                        }
                        free(s.buf);
                    }
            }
    free(v);
    free(k);
    free(out);
    free(q);
}
END_TEST

/* Invariant 1 with a window: the rows of one call, of the same call split
 * into micro-batches of 1, 3, 2, ... (so a row shares passes that start at
 * other tokens and other window starts) and of 1-3 threads are bitwise
 * equal. _i: passes of 8, 2 or 1 tokens x window 3 or 7 x f32 or f16. */
START_TEST(test_attention_window_invariance)
{
    static const int heads[][2] = {{4, 4}, {8, 2}, {8, 1}};
    attn_invariance_case(heads[_i % 3][0], heads[_i % 3][1], 20, 13, 9, (_i / 3) % 2 ? 7 : 3,
                         _i < 6 ? BT_TYPE_F32 : BT_TYPE_F16, 1400 + (uint64_t)_i);
}
END_TEST

/* ==== elementwise ==== */

/* The spacing of floats at magnitude |v|: 2^(e-23) for |v| in [2^e, 2^(e+1)),
 * 2^-149 below FLT_MIN. */
static double f32_ulp(double v)
{
    int e;
    v = fabs(v);
    if (v < FLT_MIN)
        return 0x1p-149;
    frexp(v, &e); /* v in [2^(e-1), 2^e) */
    return ldexp(1.0, e - 24);
}

START_TEST(test_rmsnorm)
{
    /* n around multiples of 8 and 4: the partial sums' tail and the
     * vector scale loop's tail */
    static const int ns[] = {1, 3, 7, 8, 9, 15, 64, 576, 4095, 4096};
    static const float epss[] = {1e-5f, 1e-6f};
    rng_t r = rng_make(700);
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (int e = 0; e < 2; e++) {
            const int n = ns[a], rows = 3;
            float *x = xmalloc((size_t)rows * n * sizeof(float));
            float *w = xmalloc((size_t)n * sizeof(float));
            float *out = xmalloc((size_t)rows * n * sizeof(float));
            fill(x, (size_t)rows * n, &r, -3.0f, 3.0f);
            for (int i = 0; i < n; i++) /* third row small: eps matters */
                x[2 * n + i] *= 1e-3f;
            fill(w, (size_t)n, &r, -2.0f, 2.0f);
            bt_rmsnorm_f32(out, x, w, rows, n, epss[e]);
            for (int t = 0; t < rows; t++) {
                double ss = 0;
                for (int i = 0; i < n; i++)
                    ss += (double)x[t * n + i] * x[t * n + i];
                double sc = 1.0 / sqrt(ss / n + (double)epss[e]);
                for (int i = 0; i < n; i++) {
                    /* three f32 roundings (scale, two products), u each;
                     * the double sum and sqrt add ~n 2^-53 */
                    double want = x[t * n + i] * sc * w[i];
                    CHECK_MSG(fabs(out[t * n + i] - want) <= 3.01 * U * fabs(want) + 1e-40,
                              "n %d eps %g row %d [%d]: %.9g vs %.9g", n, (double)epss[e], t, i,
                              (double)out[t * n + i], want);
                }
            }
            free(out);
            free(w);
            free(x);
        }
    /* zero row: zeros, not nan; n_rows 0 writes nothing */
    float z[8] = {0}, w[8] = {1, 1, 1, 1, 1, 1, 1, 1}, o[8];
    bt_rmsnorm_f32(o, z, w, 1, 8, 1e-5f);
    for (int i = 0; i < 8; i++)
        CHECK_MSG(o[i] == 0.0f, "zero row [%d] -> %g", i, (double)o[i]);
    o[0] = 42.0f;
    bt_rmsnorm_f32(o, z, w, 0, 8, 1e-5f);
    ck_assert(o[0] == 42.0f);
}
END_TEST

typedef struct rope_case {
    int n_head, head_dim, n_rot, pos0, n_tok;
    float base;
} rope_case_t;


/* llama's rope (NORM pairs, no scaling, no factors) through bt_rope_f32. */
static void rope_norm(float *x, int n_tok, int pos0, int n_head, int head_dim, int n_rot,
                      float base)
{
    const bt_rope_t r = {n_rot, base, 1.0f, NULL, false};
    bt_rope_f32(x, n_tok, pos0, n_head, head_dim, &r);
}
START_TEST(test_rope)
{
    static const rope_case_t cases[] = {
        {3, 16, 16, 0, 4, 10000.0f},      {3, 16, 16, 5, 4, 10000.0f},
        {2, 20, 12, 0, 3, 10000.0f},      {2, 20, 12, 11, 3, 10000.0f},
        {4, 64, 64, 100, 3, 500000.0f},   {1, 64, 32, 30, 5, 10000.0f},
        {2, 128, 128, 1000, 2, 10000.0f}, {1, 6, 2, 3, 2, 10000.0f},
        {1, 1040, 1030, 7, 2, 10000.0f}, /* more pairs than one table block */
    };
    rng_t r = rng_make(800);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const rope_case_t *rc = &cases[c];
        const int hd = rc->head_dim, n_rot = rc->n_rot;
        const size_t n = (size_t)rc->n_tok * rc->n_head * hd;
        float *x0 = xmalloc(n * sizeof(float));
        float *x = xmalloc(n * sizeof(float));
        fill(x0, n, &r, -2.0f, 2.0f);
        memcpy(x, x0, n * sizeof(float));
        rope_norm(x, rc->n_tok, rc->pos0, rc->n_head, hd, n_rot, rc->base);
        /* theta = pos * base^e with e = -2i/n_rot: in f32, e is off by u,
         * powf by 1 ulp (2 u), the product by u, so theta is off by
         * <= |theta| (|ln base| + 3) u; sin/cos (2 u) and the products and
         * sums (u each) add < 8 u of the pair norm */
        const double lnb = log((double)rc->base);
        for (int t = 0; t < rc->n_tok; t++) {
            const int pos = rc->pos0 + t;
            for (int h = 0; h < rc->n_head; h++) {
                const size_t base_i = ((size_t)t * rc->n_head + h) * hd;
                const float *a0 = x0 + base_i;
                const float *a1 = x + base_i;
                if (pos == 0)
                    CHECK_MSG(memcmp(a0, a1, (size_t)hd * sizeof(float)) == 0,
                              "case %zu: position 0 is not the identity", c);
                if (n_rot < hd) /* the tail is untouched */
                    CHECK_MSG(
                        memcmp(a0 + n_rot, a1 + n_rot, (size_t)(hd - n_rot) * sizeof(float)) == 0,
                        "case %zu: dims past n_rot changed", c);
                for (int i = 0; i < n_rot / 2; i++) {
                    double theta = pos * pow((double)rc->base, -2.0 * i / n_rot);
                    double cs = cos(theta), sn = sin(theta);
                    double p = a0[2 * i], q = a0[2 * i + 1];
                    double w0 = p * cs - q * sn, w1 = p * sn + q * cs;
                    double nrm = hypot(p, q);
                    double tol = nrm * (fabs(theta) * (fabs(lnb) + 3) * U + 8 * U) + 1e-30;
                    CHECK_MSG(fabs(a1[2 * i] - w0) <= tol && fabs(a1[2 * i + 1] - w1) <= tol,
                              "case %zu pos %d h %d pair %d: (%.9g, %.9g) want (%.9g, %.9g) "
                              "tol %.3g",
                              c, pos, h, i, (double)a1[2 * i], (double)a1[2 * i + 1], w0, w1, tol);
                    double nrm1 = hypot((double)a1[2 * i], (double)a1[2 * i + 1]);
                    CHECK_MSG(fabs(nrm1 - nrm) <= 8 * U * nrm,
                              "case %zu pos %d pair %d: norm %.9g -> %.9g", c, pos, i, nrm, nrm1);
                }
            }
        }
        /* the same bits as the f32 formula evaluated per token and pair: the
         * kernel may hoist base^(-2i/n_rot) out of the token loop, but not
         * compute it another way (one product per statement, so that no
         * compiler fuses them into an fma here) */
        float *y = xmalloc(n * sizeof(float));
        memcpy(y, x0, n * sizeof(float));
        for (int t = 0; t < rc->n_tok; t++)
            for (int i = 0; i < n_rot / 2; i++) {
                const float pos = (float)(rc->pos0 + t);
                const float theta = pos * powf(rc->base, -2.0f * (float)i / (float)n_rot);
                const float cs = cosf(theta), sn = sinf(theta);
                for (int h = 0; h < rc->n_head; h++) {
                    float *p = y + ((size_t)t * rc->n_head + h) * hd + 2 * i;
                    const float ac = p[0] * cs, bs = p[1] * sn;
                    const float as = p[0] * sn, bc = p[1] * cs;
                    p[0] = ac - bs;
                    p[1] = as + bc;
                }
            }
        CHECK_MSG(memcmp(x, y, n * sizeof(float)) == 0, "case %zu: not the per-token formula", c);
        /* one batch == token by token */
        memcpy(y, x0, n * sizeof(float));
        const size_t row = (size_t)rc->n_head * hd;
        for (int t = 0; t < rc->n_tok; t++)
            rope_norm(y + t * row, 1, rc->pos0 + t, rc->n_head, hd, n_rot, rc->base);
        CHECK_MSG(memcmp(x, y, n * sizeof(float)) == 0, "case %zu: split rope differs", c);
        free(y);
        free(x);
        free(x0);
    }
}
END_TEST

/* A rope case with the extras: pairing, linear scaling, frequency factors
 * (nf > 0: pair i's factor is factors[i], drawn from [1, 8] as Llama 3.1's
 * are). */
typedef struct rope_x_case {
    int n_head, head_dim, n_rot, pos0, n_tok;
    float base, freq_scale;
    bool neox, factors;
} rope_x_case_t;

/* bt_rope_f32 against the per-element double formula: pair i of a head is
 * (x[i], x[i + n_rot/2]) with neox, else (x[2i], x[2i+1]), turned by
 * theta = pos * freq_scale * base^(-2i/n_rot) / factor_i; the f32 formula
 * per token and pair gives the same bits; one batch == token by token; dims
 * past n_rot untouched. */
static void rope_x_check(const rope_x_case_t *rc, rng_t *r, const char *what)
{
    const int hd = rc->head_dim, n_rot = rc->n_rot, half = n_rot / 2;
    const size_t n = (size_t)rc->n_tok * rc->n_head * hd, row = (size_t)rc->n_head * hd;
    float *x0 = xmalloc(n * sizeof(float)), *x = xmalloc(n * sizeof(float));
    float *y = xmalloc(n * sizeof(float));
    float *fac = xmalloc((size_t)(half > 0 ? half : 1) * sizeof(float));
    fill(x0, n, r, -2.0f, 2.0f);
    fill(fac, (size_t)(half > 0 ? half : 1), r, 1.0f, 8.0f);
    const bt_rope_t rp = {n_rot, rc->base, rc->freq_scale, rc->factors ? fac : NULL, rc->neox};
    memcpy(x, x0, n * sizeof(float));
    bt_rope_f32(x, rc->n_tok, rc->pos0, rc->n_head, hd, &rp);
    /* as test_rope, with two more roundings of the angle (the scale, the
     * factor's division): theta is off by <= |theta| (|ln base| + 5) u */
    const double lnb = log((double)rc->base);
    for (int t = 0; t < rc->n_tok; t++) {
        const int pos = rc->pos0 + t;
        for (int h = 0; h < rc->n_head; h++) {
            const size_t b = ((size_t)t * rc->n_head + h) * hd;
            const float *a0 = x0 + b, *a1 = x + b;
            if (n_rot < hd)
                CHECK_MSG(memcmp(a0 + n_rot, a1 + n_rot, (size_t)(hd - n_rot) * sizeof(float)) ==
                              0,
                          "%s: dims past n_rot changed", what);
            for (int i = 0; i < half; i++) {
                const int i0 = rc->neox ? i : 2 * i, i1 = rc->neox ? i + half : 2 * i + 1;
                double theta = pos * (double)rc->freq_scale * pow((double)rc->base, -2.0 * i / n_rot);
                if (rc->factors)
                    theta /= fac[i];
                const double cs = cos(theta), sn = sin(theta), p = a0[i0], q = a0[i1];
                const double w0 = p * cs - q * sn, w1 = p * sn + q * cs, nrm = hypot(p, q);
                const double tol = nrm * (fabs(theta) * (fabs(lnb) + 5) * U + 8 * U) + 1e-30;
                CHECK_MSG(fabs(a1[i0] - w0) <= tol && fabs(a1[i1] - w1) <= tol,
                          "%s pos %d h %d pair %d (dims %d, %d): (%.9g, %.9g) want (%.9g, %.9g) "
                          "tol %.3g",
                          what, pos, h, i, i0, i1, (double)a1[i0], (double)a1[i1], w0, w1, tol);
            }
        }
    }
    /* the f32 formula: freq = base^(-2i/n_rot) * freq_scale / factor, hoisted
     * out of the token loop, then theta = pos * freq */
    memcpy(y, x0, n * sizeof(float));
    for (int t = 0; t < rc->n_tok; t++)
        for (int i = 0; i < half; i++) {
            float freq = powf(rc->base, -2.0f * (float)i / (float)n_rot) * rc->freq_scale;
            if (rc->factors)
                freq /= fac[i];
            const float theta = (float)(rc->pos0 + t) * freq;
            const float cs = cosf(theta), sn = sinf(theta);
            for (int h = 0; h < rc->n_head; h++) {
                float *p = y + ((size_t)t * rc->n_head + h) * hd;
                const int i0 = rc->neox ? i : 2 * i, i1 = rc->neox ? i + half : 2 * i + 1;
                const float ac = p[i0] * cs, bs = p[i1] * sn;
                const float as = p[i0] * sn, bc = p[i1] * cs;
                p[i0] = ac - bs;
                p[i1] = as + bc;
            }
        }
    CHECK_MSG(memcmp(x, y, n * sizeof(float)) == 0, "%s: not the per-token formula", what);
    memcpy(y, x0, n * sizeof(float));
    for (int t = 0; t < rc->n_tok; t++)
        bt_rope_f32(y + t * row, 1, rc->pos0 + t, rc->n_head, hd, &rp);
    CHECK_MSG(memcmp(x, y, n * sizeof(float)) == 0, "%s: token by token differs", what);
    free(fac);
    free(y);
    free(x);
    free(x0);
}

START_TEST(test_rope_neox)
{
    static const rope_x_case_t cases[] = {
        {3, 16, 16, 0, 4, 10000.0f, 1.0f, true, false},
        {3, 16, 16, 5, 4, 10000.0f, 1.0f, true, false},
        {2, 32, 32, 7, 5, 1000000.0f, 1.0f, true, false}, /* qwen3's shape */
        {1, 64, 32, 30, 5, 10000.0f, 1.0f, true, false},  /* partial: (x[i], x[i + 16]) */
        {2, 20, 12, 11, 3, 10000.0f, 1.0f, true, false},
        {1, 256, 256, 600, 2, 1000000.0f, 1.0f, true, false}, /* gemma3's head */
        {1, 6, 2, 3, 2, 10000.0f, 1.0f, true, false},
    };
    rng_t r = rng_make(1500);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char what[64];
        snprintf(what, sizeof what, "neox case %zu", c);
        rope_x_check(&cases[c], &r, what);
    }
    /* neox moves other dims than norm: the same input, the two pairings */
    float a[16], b[16];
    fill(a, 16, &r, -1.0f, 1.0f);
    memcpy(b, a, sizeof a);
    const bt_rope_t rn = {16, 10000.0f, 1.0f, NULL, false}, rx = {16, 10000.0f, 1.0f, NULL, true};
    bt_rope_f32(a, 1, 3, 1, 16, &rn);
    bt_rope_f32(b, 1, 3, 1, 16, &rx);
    ck_assert(memcmp(a, b, sizeof a) != 0);
}
END_TEST

/* Linear scaling (freq_scale 1/2, 1/4) and frequency factors, with either
 * pairing: factor f turns pair i f times slower; a factor of 1 everywhere
 * is no factor, bit for bit; freq_scale s at position p is position s p
 * without it wherever s p is exact. */
START_TEST(test_rope_scaling)
{
    static const rope_x_case_t cases[] = {
        {2, 16, 16, 3, 6, 500000.0f, 1.0f, false, true}, /* llama3-ropefreqs' shape */
        {2, 16, 16, 40, 3, 500000.0f, 1.0f, true, true},
        {3, 20, 12, 9, 4, 10000.0f, 0.5f, false, false},
        {2, 32, 32, 17, 5, 1000000.0f, 0.25f, true, false},
        {2, 16, 16, 100, 3, 10000.0f, 0.5f, false, true},
        {1, 64, 48, 77, 2, 10000.0f, 0.5f, true, true},
    };
    rng_t r = rng_make(1600);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char what[64];
        snprintf(what, sizeof what, "scaling case %zu", c);
        rope_x_check(&cases[c], &r, what);
    }
    enum { HD = 32, NH = 2, NT = 4 };
    float x0[NT * NH * HD], a[NT * NH * HD], b[NT * NH * HD], ones[HD / 2];
    fill(x0, NT * NH * HD, &r, -1.0f, 1.0f);
    for (int i = 0; i < HD / 2; i++)
        ones[i] = 1.0f;
    for (int neox = 0; neox <= 1; neox++) {
        const bt_rope_t plain = {HD, 10000.0f, 1.0f, NULL, neox};
        const bt_rope_t unit = {HD, 10000.0f, 1.0f, ones, neox};
        memcpy(a, x0, sizeof a);
        memcpy(b, x0, sizeof b);
        bt_rope_f32(a, NT, 5, NH, HD, &plain);
        bt_rope_f32(b, NT, 5, NH, HD, &unit);
        CHECK_MSG(memcmp(a, b, sizeof a) == 0, "neox %d: factors of 1 change the result", neox);
        /* one token at position 12 with scale 1/4 == position 3 unscaled */
        const bt_rope_t quarter = {HD, 10000.0f, 0.25f, NULL, neox};
        memcpy(a, x0, sizeof a);
        memcpy(b, x0, sizeof b);
        bt_rope_f32(a, 1, 12, NH, HD, &quarter);
        bt_rope_f32(b, 1, 3, NH, HD, &plain);
        for (int e = 0; e < NH * HD; e++)
            CHECK_MSG(fabsf(a[e] - b[e]) <= 1e-6f, "neox %d: scale 1/4 at 12 vs 3: [%d] %g %g",
                      neox, e, (double)a[e], (double)b[e]);
    }
}
END_TEST

/* silu in double; both forms avoid exp overflow */
static double silu_ref(double g) { return g >= 0 ? g / (1 + exp(-g)) : g * exp(g) / (1 + exp(g)); }

/* The kernel's own exp (~0.5 ulp) and the 3 f32 roundings of its silu
 * (numerator, 1 + e, division): at most 2.75 ulp, measured over every finite
 * float. */
#define SILU_ULP 3.0

static void swiglu_check_ulp(const float *g0, const float *out, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        const double want = silu_ref(g0[i]);
        const double err = fabs((double)out[i] - want) / f32_ulp(want);
        CHECK_MSG(err <= SILU_ULP, "%s: silu(%a) = %a, want %.17g: %.2f ulp", what, (double)g0[i],
                  (double)out[i], want, err);
    }
}

START_TEST(test_swiglu)
{
    enum { N = 1003, SWEEP = 1 << 16 };
    float g[N], u[N], g0[N];
    rng_t r = rng_make(900);

    /* silu alone (up = 1: the product is exact) against double: a dense
     * sweep of [-100, 100] (the step is not a power of two, so the reduced
     * argument and the scale both vary), the awkward region where e^g is
     * subnormal and silu(g) is not, and random bit patterns of every
     * magnitude */
    float *sg = xmalloc(SWEEP * sizeof(float)), *so = xmalloc(SWEEP * sizeof(float));
    float *ones = xmalloc(SWEEP * sizeof(float));
    for (int i = 0; i < SWEEP; i++)
        ones[i] = 1.0f;
    for (int pass = 0; pass < 8; pass++) {
        for (int i = 0; i < SWEEP; i++) {
            int k = pass * SWEEP + i;
            sg[i] = (float)(-100.0 + 200.0 * k / (8.0 * SWEEP - 1));
        }
        memcpy(so, sg, SWEEP * sizeof(float));
        bt_swiglu_f32(so, ones, SWEEP);
        swiglu_check_ulp(sg, so, SWEEP, "sweep");
    }
    fill(sg, SWEEP, &r, -104.0f, -86.0f);
    memcpy(so, sg, SWEEP * sizeof(float));
    bt_swiglu_f32(so, ones, SWEEP);
    swiglu_check_ulp(sg, so, SWEEP, "underflow region");
    for (int i = 0; i < SWEEP; i++) /* finite, any sign and exponent */
        sg[i] = f32_from_bits(rng_u32(&r) % 0x7f800000u | (i & 1 ? 0x80000000u : 0));
    memcpy(so, sg, SWEEP * sizeof(float));
    bt_swiglu_f32(so, ones, SWEEP);
    swiglu_check_ulp(sg, so, SWEEP, "bit patterns");
    free(ones);
    free(so);
    free(sg);

    /* times up: one more rounding */
    fill(g0, N, &r, -20.0f, 20.0f);
    fill(u, N, &r, -3.0f, 3.0f);
    memcpy(g, g0, sizeof g);
    bt_swiglu_f32(g, u, N);
    for (int i = 0; i < N; i++) {
        const double s = silu_ref(g0[i]), want = s * u[i];
        const double tol = SILU_ULP * f32_ulp(s) * fabs(u[i]) + 0.5 * f32_ulp(want);
        CHECK_MSG(fabs(g[i] - want) <= tol, "[%d] silu(%.9g) * %.9g = %.9g, want %.9g", i,
                  (double)g0[i], (double)u[i], (double)g[i], want);
    }

    /* specials, exactly: silu of each, then times up in f32 */
    static const struct {
        float g, silu;
    } sp[] = {
        {0.0f, 0.0f},
        {-0.0f, -0.0f},
        {0x1p-100f, 0x1p-101f},   /* silu(g) = g / 2 to f32 precision */
        {-0x1p-100f, -0x1p-101f},
        {INFINITY, INFINITY},
        {FLT_MAX, FLT_MAX},
        {1e30f, 1e30f},
        {-INFINITY, -0.0f},       /* the limit, not -inf * 0 */
        {-FLT_MAX, -0.0f},
        {-1e30f, -0.0f},
        {-200.0f, -0.0f},
        {-110.5f, -0.0f},         /* |silu| < 2^-150 */
    };
    static const float ups[] = {0.5f, -0.5f, 2.0f};
    for (size_t k = 0; k < sizeof sp / sizeof sp[0]; k++)
        for (size_t j = 0; j < sizeof ups / sizeof ups[0]; j++) {
            float gk = sp[k].g, uk = ups[j], want = sp[k].silu * ups[j];
            bt_swiglu_f32(&gk, &uk, 1);
            CHECK_MSG(f32_bits(gk) == f32_bits(want), "silu(%a) * %g = %a, want %a",
                      (double)sp[k].g, (double)uk, (double)gk, (double)want);
        }
    float nans[2] = {NAN, -NAN}, nu[2] = {1.0f, 0.0f};
    bt_swiglu_f32(nans, nu, 2);
    CHECK_MSG(isnan(nans[0]) && isnan(nans[1]), "nan in: %g %g", (double)nans[0],
              (double)nans[1]);

    /* n smaller than the array: the rest untouched */
    memcpy(g, g0, sizeof g);
    bt_swiglu_f32(g, u, 10);
    ck_assert(memcmp(g + 10, g0 + 10, (N - 10) * sizeof(float)) == 0);
    bt_swiglu_f32(g, u, 0);
}
END_TEST

START_TEST(test_add)
{
    enum { N = 1001 };
    float x[N], y[N], x0[N];
    rng_t r = rng_make(1000);
    fill(x0, N, &r, -5.0f, 5.0f);
    fill(y, N, &r, -5.0f, 5.0f);
    memcpy(x, x0, sizeof x);
    bt_add_f32(x, y, N - 1);
    for (int i = 0; i < N - 1; i++) {
        float want = x0[i] + y[i];
        CHECK_MSG(f32_bits(x[i]) == f32_bits(want), "[%d]", i);
    }
    ck_assert(f32_bits(x[N - 1]) == f32_bits(x0[N - 1]));
    memcpy(x, x0, sizeof x);
    bt_add_f32(x, y, 0);
    ck_assert(memcmp(x, x0, sizeof x) == 0);
}
END_TEST

/* gelu (tanh form) in double, 1 + tanh(y) as 2 / (1 + e^-2y) so that it
 * does not cancel for y << 0; *y_out, *t_out: y and tanh(y). */
static double gelu_ref(double z, double *y_out, double *t_out)
{
    const double y = sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z);
    *y_out = y;
    *t_out = tanh(y);
    return 0.5 * z * (2.0 / (1.0 + exp(-2.0 * y)));
}

/* The bound on the f32 formula 0.5 z (1 + tanhf(k z (1 + c z^2))) times up:
 * y has 7 roundings (k and c as floats, four products, one sum), |dy| <=
 * 8u |y|; tanhf is within 2 ulp <= 4u |T| (glibc); 1 + T, 0.5 z s and the
 * product with up round once each. With s = 1 + T and ds = (1 - T^2) dy =
 * (1 - T) s dy, the error of g = z s / 2 is
 *   |g| ((1 - T) 8u |y| + 3u) + 0.5 |z| 4u |T|,
 * relative (about 11u) for z >= 0 (where (1 - T)|y| <= 0.38), and for z < 0
 * absolute where tanhf's last bits decide 1 + T (z < -3: tanhf(y) = -1 and
 * the result 0 stand in for |g| < 2u |z|). Then times |up|, plus u of the
 * product and a subnormal's spacing. */
static double geglu_tol(double z, double up)
{
    double y, t;
    const double g = gelu_ref(z, &y, &t);
    return (fabs(g) * ((1.0 - t) * 8 * U * fabs(y) + 4 * U) + 2 * U * fabs(z) * fabs(t)) *
               fabs(up) + 0x1p-148;
}

START_TEST(test_geglu)
{
    enum { SWEEP = 1 << 16 };
    rng_t r = rng_make(1700);
    float *g = xmalloc(SWEEP * sizeof(float)), *g0 = xmalloc(SWEEP * sizeof(float));
    float *u = xmalloc(SWEEP * sizeof(float));
    for (int pass = 0; pass < 4; pass++) {
        for (int i = 0; i < SWEEP; i++) {
            switch (pass) {
            case 0: g0[i] = (float)(-12.0 + 24.0 * i / (SWEEP - 1.0)); u[i] = 1.0f; break;
            case 1: g0[i] = rng_unif(&r, -6.0f, 6.0f); u[i] = rng_unif(&r, -3.0f, 3.0f); break;
            case 2: /* finite, any sign and exponent */
                g0[i] = f32_from_bits(rng_u32(&r) % 0x7f800000u | (i & 1 ? 0x80000000u : 0));
                u[i] = 1.0f;
                break;
            default: g0[i] = rng_unif(&r, -1e4f, 1e4f); u[i] = rng_unif(&r, -2.0f, 2.0f); break;
            }
        }
        memcpy(g, g0, SWEEP * sizeof(float));
        bt_geglu_f32(g, u, SWEEP);
        for (int i = 0; i < SWEEP; i++) {
            double y, t;
            const double want = gelu_ref(g0[i], &y, &t) * u[i], tol = geglu_tol(g0[i], u[i]);
            CHECK_MSG(fabs((double)g[i] - want) <= tol,
                      "pass %d: gelu(%a) * %g = %a, want %.17g (tol %.3g)", pass, (double)g0[i],
                      (double)u[i], (double)g[i], want, tol);
        }
    }
    /* where the result is large the bound is relative: 1e-6 for z >= 0.5 */
    for (int i = 0; i < SWEEP; i++) {
        g0[i] = (float)(0.5 + 1e3 * i / (double)SWEEP);
        u[i] = 1.0f;
    }
    memcpy(g, g0, SWEEP * sizeof(float));
    bt_geglu_f32(g, u, SWEEP);
    for (int i = 0; i < SWEEP; i++) {
        double y, t;
        const double want = gelu_ref(g0[i], &y, &t);
        CHECK_MSG(fabs(g[i] - want) <= 16 * U * want, "gelu(%.9g) = %.9g, want %.17g",
                  (double)g0[i], (double)g[i], want);
    }
    free(u);
    free(g0);
    free(g);
    /* specials: large |z| saturates to z and to 0, nan and inf pass */
    static const struct {
        float z, gelu;
    } sp[] = {
        {0.0f, 0.0f},    {-0.0f, -0.0f},       {20.0f, 20.0f},      {1e10f, 1e10f},
        {FLT_MAX, FLT_MAX}, {INFINITY, INFINITY}, {-20.0f, -0.0f},   {-1e10f, -0.0f},
        {-FLT_MAX, -0.0f}, {-INFINITY, -0.0f},
    };
    for (size_t k = 0; k < sizeof sp / sizeof sp[0]; k++) {
        float gk = sp[k].z, uk = 1.0f;
        bt_geglu_f32(&gk, &uk, 1);
        CHECK_MSG(gk == sp[k].gelu && signbit(gk) == signbit(sp[k].gelu), "gelu(%a) = %a, want %a",
                  (double)sp[k].z, (double)gk, (double)sp[k].gelu);
    }
    float nans[3] = {NAN, -NAN, 1.0f}, nu[3] = {1.0f, 2.0f, NAN};
    bt_geglu_f32(nans, nu, 3);
    CHECK_MSG(isnan(nans[0]) && isnan(nans[1]) && isnan(nans[2]), "nan in: %g %g %g",
              (double)nans[0], (double)nans[1], (double)nans[2]);
    /* n smaller than the array: the rest untouched */
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    bt_geglu_f32(a, b, 3);
    ck_assert(a[3] == 4.0f && a[7] == 8.0f && a[0] != 1.0f);
}
END_TEST

/* The rule of test_topk_softmax by its definition, k passes each taking
 * the first best of what is left, against bt_topk_softmax's one pass:
 * many ties (a few distinct values), +0 and -0 (equal), NaNs, every k. */
START_TEST(test_topk_random)
{
    static const float vals[] = {1.0f, -1.0f, 0.0f, -0.0f, 2.5f, NAN, -7.0f};
    rng_t r = rng_make(4242);
    float v[160], w[16];
    int idx[16];
    for (int trial = 0; trial < 400; trial++) {
        const int n = 1 + (int)(rng_u32(&r) % 160), k = 1 + (int)(rng_u32(&r) % (n < 16 ? n : 16));
        for (int e = 0; e < n; e++)
            v[e] = trial % 2 ? vals[rng_u32(&r) % 7] : rng_unif(&r, -3.0f, 3.0f);
        bt_topk_softmax(v, n, k, idx, w);
        for (int i = 0; i < k; i++) {
            int best = -1;
            for (int e = 0; e < n; e++) {
                bool taken = false;
                for (int j = 0; j < i; j++)
                    taken |= idx[j] == e;
                if (!taken && (best < 0 || v[e] > v[best] || (isnan(v[best]) && !isnan(v[e]))))
                    best = e;
            }
            CHECK_MSG(idx[i] == best, "n %d k %d: choice %d is %d, want %d", n, k, i, idx[i],
                      best);
        }
    }
}
END_TEST

/* Expert routing: the k largest, best first, the lower index first on a
 * tie (the documented rule), NaN last; weights = softmax over the chosen,
 * equal to the full softmax renormalized over them (llama.cpp's way). */
START_TEST(test_topk_softmax)
{
    const float l[8] = {0.5f, 2.0f, -1.0f, 2.0f, 0.25f, NAN, 2.0f, -3.0f};
    int idx[8];
    float w[8];
    bt_topk_softmax(l, 8, 3, idx, w);
    ck_assert(idx[0] == 1 && idx[1] == 3 && idx[2] == 6); /* three equal: by index */
    for (int i = 0; i < 3; i++)
        ck_assert(fabsf(w[i] - 1.0f / 3.0f) < 1e-7f);
    bt_topk_softmax(l, 8, 7, idx, w);
    static const int want[7] = {1, 3, 6, 0, 4, 2, 7};
    double full = 0, sel = 0;
    for (int e = 0; e < 8; e++)
        full += isnan(l[e]) ? 0 : exp((double)l[e] - 2.0);
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(idx[i], want[i]);
        sel += exp((double)l[idx[i]] - 2.0);
    }
    for (int i = 0; i < 7; i++) {
        const double p = exp((double)l[idx[i]] - 2.0) / full / (sel / full);
        CHECK_MSG(fabs(w[i] - p) <= 4e-7 * p, "weight %d: %g, want %g", i, (double)w[i], p);
    }
    bt_topk_softmax(l, 8, 8, idx, w); /* NaN only when nothing else is left */
    ck_assert_int_eq(idx[7], 5);
    const float one[1] = {-5.0f};
    bt_topk_softmax(one, 1, 1, idx, w);
    ck_assert(idx[0] == 0 && w[0] == 1.0f);
}
END_TEST

/* softcap c tanh(x / c): the quotient, tanhf (2 ulp) and the product: the
 * error is <= (1 - T^2) |x| u + 5u |c T|; saturates at +-c; nan stays nan. */
START_TEST(test_softcap)
{
    enum { N = 4099 };
    static const float caps[] = {30.0f, 50.0f, 0.5f};
    rng_t r = rng_make(1800);
    float *x0 = xmalloc(N * sizeof(float)), *x = xmalloc(N * sizeof(float));
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        const float cap = caps[c];
        fill(x0, N, &r, -4.0f * cap, 4.0f * cap);
        memcpy(x, x0, N * sizeof(float));
        bt_softcap_f32(x, cap, N - 1);
        for (int i = 0; i < N - 1; i++) {
            const double t = tanh((double)x0[i] / cap), want = cap * t;
            const double tol = (1 - t * t) * fabs(x0[i]) * U + 5 * U * fabs(want) + 1e-45;
            CHECK_MSG(fabs(x[i] - want) <= tol, "cap %g: softcap(%.9g) = %.9g, want %.17g",
                      (double)cap, (double)x0[i], (double)x[i], want);
            CHECK_MSG(fabsf(x[i]) <= cap, "cap %g: |softcap(%g)| = %g > cap", (double)cap,
                      (double)x0[i], (double)x[i]);
        }
        ck_assert(f32_bits(x[N - 1]) == f32_bits(x0[N - 1]));
        float sp[5] = {0.0f, INFINITY, -INFINITY, 1e30f, NAN};
        bt_softcap_f32(sp, cap, 5);
        CHECK_MSG(sp[0] == 0.0f && sp[1] == cap && sp[2] == -cap && sp[3] == cap && isnan(sp[4]),
                  "cap %g: specials %g %g %g %g %g", (double)cap, (double)sp[0], (double)sp[1],
                  (double)sp[2], (double)sp[3], (double)sp[4]);
    }
    free(x);
    free(x0);
}
END_TEST

/* add_rows and scale: one f32 operation per element, so exactly that. */
START_TEST(test_add_rows_scale)
{
    enum { ROWS = 5, N = 13 };
    float x0[ROWS * N], x[ROWS * N], b[N];
    rng_t r = rng_make(1900);
    fill(x0, ROWS * N, &r, -5.0f, 5.0f);
    fill(b, N, &r, -5.0f, 5.0f);
    memcpy(x, x0, sizeof x);
    bt_add_rows_f32(x, b, ROWS - 1, N);
    for (int t = 0; t < ROWS; t++)
        for (int i = 0; i < N; i++) {
            const float want = t < ROWS - 1 ? x0[t * N + i] + b[i] : x0[t * N + i];
            CHECK_MSG(f32_bits(x[t * N + i]) == f32_bits(want), "add_rows row %d [%d]: %a != %a",
                      t, i, (double)x[t * N + i], (double)want);
        }
    static const float cs[] = {0.0625f, 25.298221f, -3.0f};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        memcpy(x, x0, sizeof x);
        bt_scale_f32(x, cs[c], ROWS * N - 2);
        for (int i = 0; i < ROWS * N; i++) {
            const float want = i < ROWS * N - 2 ? x0[i] * cs[c] : x0[i];
            CHECK_MSG(f32_bits(x[i]) == f32_bits(want), "scale %g [%d]: %a != %a", (double)cs[c],
                      i, (double)x[i], (double)want);
        }
    }
}
END_TEST

/* rmsnorm in place (out == x, as the q/k norms and post-norms run) gives
 * the bits of out of place. */
START_TEST(test_rmsnorm_in_place)
{
    static const int ns[] = {1, 3, 7, 8, 9, 16, 20, 256, 576, 4095};
    rng_t r = rng_make(2000);
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        const int n = ns[a], rows = 4;
        float *x = xmalloc((size_t)rows * n * sizeof(float));
        float *y = xmalloc((size_t)rows * n * sizeof(float));
        float *out = xmalloc((size_t)rows * n * sizeof(float));
        float *w = xmalloc((size_t)n * sizeof(float));
        fill(x, (size_t)rows * n, &r, -30.0f, 30.0f);
        fill(w, (size_t)n, &r, -2.0f, 2.0f);
        bt_rmsnorm_f32(out, x, w, rows, n, 1e-6f);
        memcpy(y, x, (size_t)rows * n * sizeof(float));
        bt_rmsnorm_f32(y, y, w, rows, n, 1e-6f);
        CHECK_MSG(memcmp(y, out, (size_t)rows * n * sizeof(float)) == 0,
                  "n %d: in place differs from out of place", n);
        free(w);
        free(out);
        free(y);
        free(x);
    }
}
END_TEST

/* Invariant 1 for the element-wise kernels: a row's result does not depend
 * on how many rows the call has or where the row sits in it. Each kernel
 * runs on all rows at once, then on chunks of 1, 3 and 2 rows in turn, and
 * the bits must agree. Row lengths that are not multiples of 4 or 8 put a
 * row's elements in different vector lanes in the two runs. (This catches
 * state carried between rows and lane or tail mistakes; a summation order
 * for rmsnorm's double sum that changed with the row count would almost
 * never change a float result, so it would go unseen here.) */
static const int ew_chunks[] = {1, 3, 2};

START_TEST(test_elementwise_rows)
{
    static const int lens[] = {1, 5, 13, 64, 576, 1539};
    enum { ROWS = 11 };
    rng_t r = rng_make(1100);
    for (size_t a = 0; a < sizeof lens / sizeof lens[0]; a++) {
        const int n = lens[a];
        const size_t total = (size_t)ROWS * n;
        float *x = xmalloc(total * sizeof(float)), *y = xmalloc(total * sizeof(float));
        float *w = xmalloc((size_t)n * sizeof(float));
        float *all = xmalloc(total * sizeof(float)), *part = xmalloc(total * sizeof(float));
        fill(x, total, &r, -12.0f, 12.0f);
        fill(y, total, &r, -3.0f, 3.0f);
        fill(w, (size_t)n, &r, -2.0f, 2.0f);

        bt_rmsnorm_f32(all, x, w, ROWS, n, 1e-5f);
        for (int r0 = 0, c = 0, m; r0 < ROWS; r0 += m, c++) {
            m = ew_chunks[c % 3] < ROWS - r0 ? ew_chunks[c % 3] : ROWS - r0;
            bt_rmsnorm_f32(part + (size_t)r0 * n, x + (size_t)r0 * n, w, m, n, 1e-5f);
        }
        CHECK_MSG(memcmp(all, part, total * sizeof(float)) == 0, "rmsnorm n %d: rows differ", n);

        memcpy(all, x, total * sizeof(float));
        memcpy(part, x, total * sizeof(float));
        bt_swiglu_f32(all, y, (int64_t)total);
        for (int r0 = 0, c = 0, m; r0 < ROWS; r0 += m, c++) {
            m = ew_chunks[c % 3] < ROWS - r0 ? ew_chunks[c % 3] : ROWS - r0;
            bt_swiglu_f32(part + (size_t)r0 * n, y + (size_t)r0 * n, (int64_t)m * n);
        }
        CHECK_MSG(memcmp(all, part, total * sizeof(float)) == 0, "swiglu n %d: rows differ", n);

        memcpy(all, x, total * sizeof(float));
        memcpy(part, x, total * sizeof(float));
        bt_add_f32(all, y, (int64_t)total);
        for (int r0 = 0, c = 0, m; r0 < ROWS; r0 += m, c++) {
            m = ew_chunks[c % 3] < ROWS - r0 ? ew_chunks[c % 3] : ROWS - r0;
            bt_add_f32(part + (size_t)r0 * n, y + (size_t)r0 * n, (int64_t)m * n);
        }
        CHECK_MSG(memcmp(all, part, total * sizeof(float)) == 0, "add n %d: rows differ", n);

        if (n % 2 == 0) { /* a token of n / 16 heads (or 1) of even head_dim */
            const int n_head = n % 16 == 0 ? 16 : 1, hd = n / n_head;
            memcpy(all, x, total * sizeof(float));
            memcpy(part, x, total * sizeof(float));
            rope_norm(all, ROWS, 40, n_head, hd, hd, 10000.0f);
            for (int r0 = 0, c = 0, m; r0 < ROWS; r0 += m, c++) {
                m = ew_chunks[c % 3] < ROWS - r0 ? ew_chunks[c % 3] : ROWS - r0;
                rope_norm(part + (size_t)r0 * n, m, 40 + r0, n_head, hd, hd, 10000.0f);
            }
            CHECK_MSG(memcmp(all, part, total * sizeof(float)) == 0, "rope n %d: rows differ",
                      n);
        }
        free(part);
        free(all);
        free(w);
        free(y);
        free(x);
    }
}
END_TEST

static Suite *kernels_suite(void)
{
    const int n_types = (int)(sizeof mm_types / sizeof mm_types[0]);
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("types");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_f16_all_patterns);
    tcase_add_test(tc, test_f16_rounding_cases);
    tcase_add_test(tc, test_f16_rounding_oracle);
    tcase_add_test(tc, test_bf16_all_patterns);
    tcase_add_test(tc, test_bf16_rounding);
    tcase_add_test(tc, test_q8_0_error_bound);
    tcase_add_test(tc, test_q8_0_exact_and_zero);
    tcase_add_test(tc, test_type_table);
    tcase_add_test(tc, test_row_bytes);
    suite_add_tcase(s, tc);
    tc = tcase_create("matmul");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_matmul_shapes, 0, n_types);
    tcase_add_loop_test(tc, test_matmul_padded_large, 0, n_types);
    suite_add_tcase(s, tc);
    tc = tcase_create("attention");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_attention_vs_double, 0, 4);
    tcase_add_test(tc, test_attention_edges);
    if (bt_isa_active() == BT_ISA_TOP) /* compares the top build with the middle: once is enough */
        tcase_add_loop_test(tc, test_attention_isa_same, 0, 6);
    tcase_add_loop_test(tc, test_attention_window, 0, 4);
    tcase_add_loop_test(tc, test_attention_window_edge, 0, 4);
    tcase_add_loop_test(tc, test_attention_key_blocks, 0, 2);
    tcase_add_test(tc, test_attention_sinks_long);
    suite_add_tcase(s, tc);
    tc = tcase_create("invariance");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_matmul_batch_invariance, 0, n_types);
    tcase_add_loop_test(tc, test_matmul_many, 0, n_types);
    tcase_add_loop_test(tc, test_attention_batch_invariance, 0, 4);
    tcase_add_loop_test(tc, test_attention_window_invariance, 0, 12);
    tcase_add_loop_test(tc, test_attention_key_blocks_invariance, 0, 8);
    suite_add_tcase(s, tc);
    tc = tcase_create("elementwise");
    tcase_add_test(tc, test_rmsnorm);
    tcase_add_test(tc, test_rope);
    tcase_add_test(tc, test_rope_neox);
    tcase_add_test(tc, test_rope_scaling);
    tcase_add_test(tc, test_swiglu);
    tcase_add_test(tc, test_add);
    tcase_add_test(tc, test_geglu);
    tcase_add_test(tc, test_softcap);
    tcase_add_test(tc, test_topk_softmax);
    tcase_add_test(tc, test_topk_random);
    tcase_add_test(tc, test_add_rows_scale);
    tcase_add_test(tc, test_rmsnorm_in_place);
    tcase_add_test(tc, test_elementwise_rows);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_main_isas(kernels_suite);
}
