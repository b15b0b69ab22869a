/*
 * check_cuda.c: the CUDA set's arithmetic on the CPU (cuda/cu_math.h and
 * the cuda-host table) and the device choice, without a GPU.
 *
 *   layout:    cu_math.h's block geometry and byte offsets against types.h,
 *              every quantized group rebuilt bit for bit as to_float gives it
 *   math:      f16 both ways for every bit pattern, bt_cu_expf within 2 ulp,
 *              dp4a, the activation quantizer's bound, the warp sum's order
 *   matmul:    cuda-host against the scalar reference within the 8-bit bound,
 *              bitwise over token counts and threads
 *   attention: cuda-host against the reference (f32/f16, GQA, windows,
 *              sinks, 576-wide heads, past a key block), bitwise over splits
 *   devices:   bt_device_pick, bt_kernels_resolve and bt_device_fits over a
 *              stand-in device API that records its calls
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cu_math.h"
#include "kernels/kernels.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

static const uint32_t types[] = {BT_TYPE_F32,  BT_TYPE_F16,  BT_TYPE_BF16, BT_TYPE_Q4_0,
                                 BT_TYPE_Q4_1, BT_TYPE_Q5_0, BT_TYPE_Q5_1, BT_TYPE_Q8_0,
                                 BT_TYPE_Q4_K, BT_TYPE_Q5_K, BT_TYPE_Q6_K, BT_TYPE_MXFP4};
#define N_TYPES ((int)(sizeof types / sizeof types[0]))

static bt_scratch_t scratch(int64_t n_in, int64_t n_ctx, int threads)
{
    bt_scratch_t s = {.per_thread = bt_scratch_floats(n_in, n_ctx), .n_threads = threads};
    s.buf = malloc(s.per_thread * (size_t)threads * sizeof(float));
    ck_assert_ptr_nonnull(s.buf);
    return s;
}

/* A row of n_out x n_in random weights of type, quantized by from_float. */
static uint8_t *random_matrix(uint32_t type, int64_t n_in, int64_t n_out, bt_matrix_t *m)
{
    uint64_t rb;
    ck_assert_int_eq(bt_type_row_bytes(type, (uint64_t)n_in, &rb), 0);
    uint8_t *w = malloc((size_t)(rb * (uint64_t)n_out));
    float *row = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t k = 0; k < n_in; k++)
            row[k] = frand() * (1.0f + (float)(k % 7)); /* uneven block scales */
        bt_type_info(type)->from_float(w + r * rb, row, n_in);
    }
    free(row);
    *m = (bt_matrix_t){.data = w, .type = type, .n_in = n_in, .n_out = n_out, .row_bytes = rb};
    return w;
}

/* ---- layout ---- */

START_TEST(test_geometry)
{
    const uint32_t t = types[_i];
    const bt_type_info_t *ti = bt_type_info(t);
    ck_assert(bt_cuda_host_supports(t));
    ck_assert_int_eq(bt_cu_block_cols(t), ti->block_size);
    ck_assert_int_eq(bt_cu_block_bytes(t), (int)ti->block_bytes);
    ck_assert(!bt_cuda_host_supports(BT_TYPE_Q8_K) && !bt_cuda_host_supports(BT_TYPE_Q2_K));
}
END_TEST

/* Every element of a 2-super-block row, rebuilt from cu_math.h's scales and
 * quants as scale * q (+ min), equals to_float's value bit for bit. */
START_TEST(test_groups_rebuild)
{
    const uint32_t t = types[_i];
    if (bt_cu_is_float(t))
        return;
    const int64_t n = 512;
    bt_matrix_t m;
    uint8_t *w = random_matrix(t, n, 1, &m);
    float want[512];
    bt_type_info(t)->to_float(want, w, n);
    for (int64_t g = 0; g < n / 32; g++) {
        const bt_cu_scales_t s = bt_cu_group_scales(t, w, g);
        uint32_t qw[8];
        bt_cu_group_quants(t, w, g, qw);
        for (int i = 0; i < 32; i++) {
            const int q = bt_cu_group_quant(t, w, g, i);
            ck_assert_int_eq((int8_t)(qw[i / 4] >> 8 * (i % 4)), q);
            ck_assert_uint_eq(qw[i / 4], bt_cu_group_word(t, w, g, i / 4));
            const float sc = s.scale[s.nsub == 2 ? i / 16 : 0];
            float v = sc * (float)q;
            if (s.has_min)
                v = v + s.min;
            ck_assert_msg(memcmp(&v, &want[32 * g + i], sizeof v) == 0,
                          "%s element %lld: %a from cu_math.h, %a from to_float",
                          bt_type_info(t)->name, (long long)(32 * g + i), (double)v,
                          (double)want[32 * g + i]);
        }
    }
    free(w);
}
END_TEST

START_TEST(test_offsets)
{
    /* the hard-coded offsets are types.h's fields */
    ck_assert_int_eq(offsetof(bt_block_q4_1_t, m), 2);
    ck_assert_int_eq(offsetof(bt_block_q4_1_t, qs), 4);
    ck_assert_int_eq(offsetof(bt_block_q5_0_t, qh), 2);
    ck_assert_int_eq(offsetof(bt_block_q5_0_t, qs), 6);
    ck_assert_int_eq(offsetof(bt_block_q5_1_t, qh), 4);
    ck_assert_int_eq(offsetof(bt_block_q5_1_t, qs), 8);
    ck_assert_int_eq(offsetof(bt_block_q8_0_t, qs), 2);
    ck_assert_int_eq(offsetof(bt_block_mxfp4_t, qs), 1);
    ck_assert_int_eq(offsetof(bt_block_q4_k_t, scales), 4);
    ck_assert_int_eq(offsetof(bt_block_q4_k_t, qs), 16);
    ck_assert_int_eq(offsetof(bt_block_q5_k_t, qh), 16);
    ck_assert_int_eq(offsetof(bt_block_q5_k_t, qs), 48);
    ck_assert_int_eq(offsetof(bt_block_q6_k_t, qh), 128);
    ck_assert_int_eq(offsetof(bt_block_q6_k_t, scales), 192);
    ck_assert_int_eq(offsetof(bt_block_q6_k_t, d), 208);
    for (int c = 0; c < 16; c++)
        ck_assert_int_eq(bt_cu_mxfp4_value(c), bt_mxfp4_values[c]);
    ck_assert_int_eq(bt_cu_group_block_offset(BT_TYPE_Q4_K, 9), 144);
    ck_assert_int_eq(bt_cu_group_block_offset(BT_TYPE_Q8_0, 3), 3 * 34);
}
END_TEST

/* ---- math ---- */

START_TEST(test_f16_every_pattern)
{
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = bt_cu_f16(h), b = bt_f16_to_f32((uint16_t)h);
        if (isnan(b)) {
            ck_assert(isnan(a));
            continue;
        }
        ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "half %04x: %a vs %a", h, (double)a, (double)b);
        ck_assert_uint_eq(bt_cu_f16_bits(b), h); /* and back */
    }
    for (int i = 0; i < 200000; i++) { /* narrowing: round to nearest even, as types.c */
        const float f = frand() * ldexpf(1.0f, (int)(frand() * 40.0f));
        ck_assert_uint_eq(bt_cu_f16_bits(f), bt_f32_to_f16(f));
    }
}
END_TEST

static double ulp_err(float got, double want)
{
    const float w = (float)want;
    const float u = nextafterf(fabsf(w), INFINITY) - fabsf(w);
    return fabs((double)got - want) / (double)u;
}

START_TEST(test_expf)
{
    double worst = 0;
    for (float x = -103.9f; x < 88.7f; x += 0.000713f) {
        const double e = ulp_err(bt_cu_expf(x), exp((double)x));
        worst = e > worst ? e : worst;
    }
    fprintf(stderr, "bt_cu_expf: worst error %.2f ulp on [-103.9, 88.7]\n", worst);
    ck_assert_msg(worst <= 2.0, "bt_cu_expf is %.2f ulp from exp", worst);
    ck_assert(bt_cu_expf(-INFINITY) == 0.0f && bt_cu_expf(-200.0f) == 0.0f);
    ck_assert(isinf(bt_cu_expf(89.0f)) && isinf(bt_cu_expf(INFINITY)));
    ck_assert(isnan(bt_cu_expf(NAN)));
    ck_assert(bt_cu_expf(0.0f) == 1.0f);
    ck_assert(bt_cu_expf(-100.0f) > 0.0f); /* subnormal results */
}
END_TEST

START_TEST(test_dp4a_quantize_warp)
{
    for (int i = 0; i < 10000; i++) {
        const uint32_t a = (uint32_t)(rng >> 3), b = (uint32_t)(rng >> 29);
        frand();
        int32_t want = 7;
        for (int k = 0; k < 4; k++)
            want += (int8_t)(a >> 8 * k) * (int8_t)(b >> 8 * k);
        ck_assert_int_eq(bt_cu_dp4a(a, b, 7), want);
    }
    float x[32];
    for (int f16 = 0; f16 <= 1; f16++)
        for (int rep = 0; rep < 1000; rep++) {
            const float amp = ldexpf(1.0f, rep % 30 - 15);
            for (int i = 0; i < 32; i++)
                x[i] = frand() * amp;
            uint32_t xw[8];
            float dx;
            int32_t sx, sum = 0;
            bt_cu_quantize32(x, f16, xw, &dx, &sx);
            float amax = 0;
            for (int i = 0; i < 32; i++)
                amax = fmaxf(amax, fabsf(x[i]));
            for (int i = 0; i < 32; i++) {
                const int q = (int8_t)(xw[i / 4] >> 8 * (i % 4));
                sum += q;
                /* q is x's step count at amax/127; dx is that step (in f16: 2^-11 off) */
                const float step = amax / 127.0f;
                ck_assert(fabsf((float)q * step - x[i]) <= 0.5f * step * (1 + 1e-6f));
                /* in f16: half an ulp of the step, or of f16's subnormals below 2^-14 */
                const float slack = step >= ldexpf(1.0f, -14) ? ldexpf(step, -11) : ldexpf(1.0f, -25);
                ck_assert(fabsf(dx - step) <= (f16 ? slack : 0.0f));
            }
            ck_assert_int_eq(sx, sum);
        }
    memset(x, 0, sizeof x);
    uint32_t xw[8];
    float dx;
    int32_t sx;
    bt_cu_quantize32(x, 1, xw, &dx, &sx);
    ck_assert(dx == 0.0f && sx == 0);
    for (int w = 0; w < 8; w++)
        ck_assert_uint_eq(xw[w], 0);
    /* the butterfly: ((v0 + v16) + (v8 + v24)) ... as offsets 16, 8, 4, 2, 1 */
    float v[32], u[32];
    for (int l = 0; l < 32; l++)
        v[l] = u[l] = frand() * ldexpf(1.0f, l % 20);
    for (int o = 16; o > 0; o /= 2)
        for (int l = 0; l < o; l++)
            u[l] = u[l] + u[l + o];
    const float got = bt_cu_warp_sum_host(v);
    ck_assert(memcmp(&got, &u[0], sizeof got) == 0);
}
END_TEST

/* ---- matmul ---- */

START_TEST(test_matmul_vs_ref)
{
    const uint32_t t = types[_i];
    const int64_t bs = bt_type_info(t)->block_size;
    const int64_t ins[] = {bs == 256 ? 256 : bs == 1 ? 100 : 96, bs == 256 ? 768 : bs == 1 ? 257 : 160};
    const int64_t outs[] = {1, 3, 65};
    const int toks[] = {1, 3, 9, 40};
    const bool quant = !bt_cu_is_float(t);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++) {
            const int64_t n_in = ins[a], n_out = outs[b];
            bt_matrix_t m;
            uint8_t *w = random_matrix(t, n_in, n_out, &m);
            float *x = malloc(sizeof(float) * (size_t)(40 * n_in));
            for (int64_t i = 0; i < 40 * n_in; i++)
                x[i] = frand() * 2.0f;
            float *y = malloc(sizeof(float) * (size_t)(40 * n_out));
            float *yr = malloc(sizeof(float) * (size_t)(40 * n_out));
            float *y1 = malloc(sizeof(float) * (size_t)n_out);
            float *wf = malloc(sizeof(float) * (size_t)n_in);
            bt_scratch_t s1 = scratch(n_in, 1, 1), s2 = scratch(n_in, 1, 2);
            bt_ops_ref.matmul(yr, &m, x, 40, &s1);
            for (int c = 0; c < 4; c++) {
                const int nt = toks[c];
                bt_ops_cuda_host.matmul(y, &m, x, nt, c % 2 ? &s2 : &s1);
                for (int64_t r = 0; r < n_out; r++) {
                    bt_type_info(t)->to_float(wf, w + r * m.row_bytes, n_in);
                    for (int tk = 0; tk < nt; tk++) {
                        /* 8-bit activations: each x is off by at most half a step of
                         * its block (amax/254, 2^-11 more in f16), so |err| <= sum_k
                         * |w_k| amax_k / 254 (1 + 2^-10); float rounding adds a few
                         * ulps of sum |w x|. The float types: rounding alone. */
                        double mag = 0, bound = 0;
                        for (int64_t k = 0; k < n_in; k++) {
                            const float *xb = x + (size_t)tk * n_in + k / 32 * 32;
                            float amax = 0;
                            for (int i = 0; i < 32 && k / 32 * 32 + i < n_in; i++)
                                amax = fmaxf(amax, fabsf(xb[i]));
                            mag += fabs((double)wf[k] * x[(size_t)tk * n_in + k]);
                            bound += fabs((double)wf[k]) * amax / 254.0 * (1 + 1.0 / 1024);
                        }
                        const double tol = (quant ? bound : 0) + 1e-5 * mag + 1e-6;
                        const double err = fabs((double)y[tk * n_out + r] - yr[tk * n_out + r]);
                        ck_assert_msg(err <= tol, "%s %lldx%lld token %d row %lld: %g vs ref %g (tol %g)",
                                      bt_type_info(t)->name, (long long)n_out, (long long)n_in, tk,
                                      (long long)r, (double)y[tk * n_out + r],
                                      (double)yr[tk * n_out + r], tol);
                    }
                }
                /* each row alone, bitwise the same as inside the batch */
                for (int tk = 0; tk < nt; tk += 4) {
                    bt_ops_cuda_host.matmul(y1, &m, x + (size_t)tk * n_in, 1, &s2);
                    ck_assert_msg(memcmp(y1, y + (size_t)tk * n_out, sizeof(float) * (size_t)n_out) == 0,
                                  "%s: token %d alone differs from inside %d tokens",
                                  bt_type_info(t)->name, tk, nt);
                }
            }
            free(s1.buf);
            free(s2.buf);
            free(wf);
            free(y1);
            free(yr);
            free(y);
            free(x);
            free(w);
        }
}
END_TEST

/* ---- attention ---- */

typedef struct {
    int n_head, n_head_kv, head_dim, window, n_pos, sinks;
    uint32_t kv_type;
} att_case_t;

static const att_case_t att_cases[] = {
    {4, 2, 64, 0, 40, 0, BT_TYPE_F32}, {4, 2, 64, 0, 300, 1, BT_TYPE_F16},
    {4, 4, 32, 5, 300, 0, BT_TYPE_F32}, {2, 1, 576, 0, 270, 1, BT_TYPE_F32},
    {4, 2, 48, 130, 520, 1, BT_TYPE_F16},
};
#define N_ATT ((int)(sizeof att_cases / sizeof att_cases[0]))

START_TEST(test_attention)
{
    const att_case_t *c = &att_cases[_i];
    const int kv_dim = c->n_head_kv * c->head_dim, k_stride = c->n_pos + 5;
    const size_t el = c->kv_type == BT_TYPE_F16 ? 2 : 4;
    uint8_t *k = malloc((size_t)kv_dim * k_stride * el), *v = malloc((size_t)c->n_pos * kv_dim * el);
    for (size_t i = 0; i < (size_t)kv_dim * k_stride; i++) {
        const float f = frand() * 2.0f;
        if (el == 2)
            ((uint16_t *)k)[i] = bt_f32_to_f16(f);
        else
            ((float *)k)[i] = f;
    }
    for (size_t i = 0; i < (size_t)c->n_pos * kv_dim; i++) {
        const float f = frand();
        if (el == 2)
            ((uint16_t *)v)[i] = bt_f32_to_f16(f);
        else
            ((float *)v)[i] = f;
    }
    float sinks[4] = {0.5f, -1.0f, 2.0f, 0.0f};
    const bt_attn_t a = {.n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim = c->head_dim,
                         .k_stride = k_stride, .window = c->window,
                         .scale = 1.0f / sqrtf((float)c->head_dim),
                         .sinks = c->sinks ? sinks : NULL};
    const int nt = 21, pos0 = c->n_pos - nt, width = c->n_head * c->head_dim;
    float *q = malloc(sizeof(float) * (size_t)(nt * width));
    float *o = malloc(sizeof(float) * (size_t)(nt * width)), *oref = malloc(sizeof(float) * (size_t)(nt * width));
    float *o1 = malloc(sizeof(float) * (size_t)(nt * width));
    for (int i = 0; i < nt * width; i++)
        q[i] = frand();
    bt_scratch_t s = scratch(c->head_dim, c->n_pos, 2);
    bt_ops_cuda_host.attention(o, q, k, v, c->kv_type, nt, pos0, &a, &s);
    bt_ops_ref.attention(oref, q, k, v, c->kv_type, nt, pos0, &a, &s);
    for (int i = 0; i < nt * width; i++)
        ck_assert_msg(fabsf(o[i] - oref[i]) <= 1e-5f * (1 + fabsf(oref[i])),
                      "attention case %d element %d: %g vs ref %g", _i, i, (double)o[i], (double)oref[i]);
    /* the same rows one query at a time, and as 8 + 13: bitwise */
    for (int t = 0; t < nt; t++)
        bt_ops_cuda_host.attention(o1 + t * width, q + t * width, k, v, c->kv_type, 1, pos0 + t, &a, &s);
    ck_assert_msg(memcmp(o, o1, sizeof(float) * (size_t)(nt * width)) == 0,
                  "attention case %d: one query at a time differs from one call", _i);
    bt_ops_cuda_host.attention(o1, q, k, v, c->kv_type, 8, pos0, &a, &s);
    bt_ops_cuda_host.attention(o1 + 8 * width, q + 8 * width, k, v, c->kv_type, 13, pos0 + 8, &a, &s);
    ck_assert(memcmp(o, o1, sizeof(float) * (size_t)(nt * width)) == 0);
    free(s.buf);
    free(q);
    free(o);
    free(o1);
    free(oref);
    free(k);
    free(v);
}
END_TEST

/* ---- devices: a stand-in API that records what it was asked ---- */

static int fake_count_n, fake_opened, fake_open_calls, fake_open_fails;
static uint64_t fake_free;
static int fake_count(char *why, size_t n)
{
    if (fake_count_n == 0)
        snprintf(why, n, "the stand-in has none");
    return fake_count_n;
}
static int fake_open(int device, char *why, size_t n)
{
    fake_open_calls++;
    if (fake_open_fails) {
        snprintf(why, n, "device %d: busy stand-in", device);
        return -1;
    }
    fake_opened = device;
    return 0;
}
static const char *fake_name(void) { return "Stand-in GPU"; }
static void fake_set_fatal(void (*fatal)(const char *)) { (void)fatal; }
static int fake_measure(double *r, double *t)
{
    *r = *t = 1;
    return 0;
}
static uint64_t fake_mem_free(void) { return fake_free; }
static const bt_ops_t fake_ops = {.name = "cuda"};
static const bt_device_api_t fake_api = {fake_count, fake_open, fake_name, fake_set_fatal,
                                         fake_measure, fake_mem_free, &fake_ops};

static void fake_reset(int count)
{
    fake_count_n = count;
    fake_opened = -1;
    fake_open_calls = fake_open_fails = 0;
}

START_TEST(test_device_pick)
{
    char why[200];
    ck_assert_int_eq(bt_device_pick(0, 2, -1, why, sizeof why), 0);
    ck_assert_int_eq(bt_device_pick(3, 2, -1, why, sizeof why), 1);
    ck_assert_int_eq(bt_device_pick(3, 4, 2, why, sizeof why), 2);
    ck_assert_int_eq(bt_device_pick(0, 2, 2, why, sizeof why), -1);
    ck_assert_str_eq(why, "--gpu 2: this node has 2 CUDA devices (0 .. 1)");
    ck_assert_int_eq(bt_device_pick(0, 0, -1, why, sizeof why), -1);
    ck_assert_str_eq(why, "no CUDA device");
}
END_TEST

START_TEST(test_resolve)
{
    char why[300] = "";
    int dev;
    const bt_ops_t want_cuda = {.name = "cuda"};
    fake_reset(0); /* auto without a device: cpu, nothing opened */
    ck_assert_ptr_eq(bt_kernels_resolve(&bt_ops_auto, &fake_api, 0, -1, &dev, why, sizeof why),
                     &bt_ops_cpu);
    ck_assert_int_eq(fake_open_calls, 0);
    ck_assert_int_eq(dev, -1);
    fake_reset(2); /* auto with 2 devices, local rank 3: device 1 */
    ck_assert_ptr_eq(bt_kernels_resolve(&bt_ops_auto, &fake_api, 3, -1, &dev, why, sizeof why),
                     &fake_ops);
    ck_assert_int_eq(fake_opened, 1);
    ck_assert_int_eq(dev, 1);
    ck_assert_int_eq(fake_open_calls, 1);
    fake_reset(2); /* --gpu 0 wins over the local rank */
    ck_assert_ptr_eq(bt_kernels_resolve(&want_cuda, &fake_api, 3, 0, &dev, why, sizeof why), &fake_ops);
    ck_assert_int_eq(fake_opened, 0);
    fake_reset(0); /* cuda without a device: one message with the runtime's reason */
    ck_assert_ptr_null(bt_kernels_resolve(&want_cuda, &fake_api, 0, -1, &dev, why, sizeof why));
    ck_assert_msg(strstr(why, "no usable CUDA device") && strstr(why, "the stand-in has none"), "%s", why);
    fake_reset(1);
    fake_open_fails = 1;
    ck_assert_ptr_null(bt_kernels_resolve(&want_cuda, &fake_api, 0, -1, &dev, why, sizeof why));
    ck_assert_msg(strstr(why, "busy stand-in") != NULL, "%s", why);
    fake_reset(1);
    ck_assert_ptr_null(bt_kernels_resolve(&want_cuda, &fake_api, 0, 5, &dev, why, sizeof why));
    ck_assert_msg(strstr(why, "--gpu 5: this node has 1 CUDA device ") != NULL, "%s", why);
    ck_assert_int_eq(fake_open_calls, 0);
    /* no CUDA in the build */
    ck_assert_ptr_null(bt_kernels_resolve(&want_cuda, NULL, 0, -1, &dev, why, sizeof why));
    ck_assert_msg(strstr(why, "--with-cuda") != NULL, "%s", why);
    ck_assert_ptr_eq(bt_kernels_resolve(&bt_ops_auto, NULL, 0, -1, &dev, why, sizeof why), &bt_ops_cpu);
    /* any other table: untouched, no calls */
    fake_reset(2);
    ck_assert_ptr_eq(bt_kernels_resolve(&bt_ops_exact, &fake_api, 0, -1, &dev, why, sizeof why),
                     &bt_ops_exact);
    ck_assert_int_eq(fake_open_calls, 0);
    ck_assert_ptr_eq(bt_ops_by_name("auto"), &bt_ops_auto);
    ck_assert_ptr_eq(bt_ops_by_name("cuda-host"), &bt_ops_cuda_host);
}
END_TEST

START_TEST(test_device_fits)
{
    char why[400] = "";
    fake_free = 3ull << 30;
    ck_assert(bt_device_fits(&fake_api, 1, 3ull << 30, why, sizeof why));
    ck_assert(!bt_device_fits(&fake_api, 1, (3ull << 30) + 1, why, sizeof why));
    ck_assert_msg(strstr(why, "CUDA device 1 (Stand-in GPU): this stage needs 3.00 GiB") &&
                      strstr(why, "3.00 GiB are free"),
                  "%s", why);
}
END_TEST

static Suite *cuda_suite(void)
{
    Suite *s = suite_create("cuda");
    TCase *tc = tcase_create("layout");
    tcase_add_loop_test(tc, test_geometry, 0, N_TYPES);
    tcase_add_loop_test(tc, test_groups_rebuild, 0, N_TYPES);
    tcase_add_test(tc, test_offsets);
    suite_add_tcase(s, tc);
    tc = tcase_create("math");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_f16_every_pattern);
    tcase_add_test(tc, test_expf);
    tcase_add_test(tc, test_dp4a_quantize_warp);
    suite_add_tcase(s, tc);
    tc = tcase_create("matmul");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_matmul_vs_ref, 0, N_TYPES);
    suite_add_tcase(s, tc);
    tc = tcase_create("attention");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_attention, 0, N_ATT);
    suite_add_tcase(s, tc);
    tc = tcase_create("devices");
    tcase_add_test(tc, test_device_pick);
    tcase_add_test(tc, test_resolve);
    tcase_add_test(tc, test_device_fits);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(cuda_suite());
    srunner_run_all(sr, CK_VERBOSE);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
