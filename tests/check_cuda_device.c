/*
 * check_cuda_device.c: the CUDA kernels on a GPU against cuda-host, bit
 * for bit (a --with-cuda build only; exit 77, a counted skip, where the
 * machine has no CUDA device).
 *
 * cuda-host runs cu_math.h's arithmetic on the CPU, and tests/check_cuda
 * and check_model hold it to the scalar reference and to llama.cpp; so
 * equal bits here carry those results over to the device. Cases: every
 * weight type at edge shapes (n_in not a multiple of a segment, n_out not
 * a multiple of a tile, token counts on both sides of the GEMV/GEMM
 * switch and of a 32-token tile), and attention in f32 and f16 with
 * windows, sinks, GQA, a 576-wide head and contexts past a key block.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda.h"
#include "kernels/kernels.h"
#include "testutil.h"

static bt_scratch_t scratch_for(int64_t n_in, int64_t n_ctx, int threads)
{
    bt_scratch_t s = {.per_thread = bt_scratch_floats(n_in, n_ctx), .n_threads = threads};
    s.buf = malloc(s.per_thread * (size_t)threads * sizeof(float));
    ck_assert_ptr_nonnull(s.buf);
    return s;
}

static uint32_t rng_state = 12345;
static float frand(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* Bits that differ between two float arrays: the count, and the first. */
static size_t differ(const float *a, const float *b, size_t n, size_t *first)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && d++ == 0)
            *first = i;
    return d;
}

static const uint32_t types[] = {BT_TYPE_F32,  BT_TYPE_F16,  BT_TYPE_BF16, BT_TYPE_Q4_0,
                                 BT_TYPE_Q4_1, BT_TYPE_Q5_0, BT_TYPE_Q5_1, BT_TYPE_Q8_0,
                                 BT_TYPE_Q4_K, BT_TYPE_Q5_K, BT_TYPE_Q6_K, BT_TYPE_MXFP4};
#define N_TYPES ((int)(sizeof types / sizeof types[0]))

START_TEST(test_matmul_bits)
{
    const uint32_t type = types[_i];
    const bt_type_info_t *ti = bt_type_info(type);
    const int64_t bs = ti->block_size;
    const int64_t ins[] = {bs == 256 ? 256 : 96, bs == 256 ? 768 : 160, bs == 1 ? 257 : 2048};
    const int64_t outs[] = {1, 65, 130};
    const int toks[] = {1, 3, 8, 9, 33, 70};
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++) {
            const int64_t n_in = ins[a], n_out = outs[b];
            uint64_t row_bytes;
            ck_assert_int_eq(bt_type_row_bytes(type, (uint64_t)n_in, &row_bytes), 0);
            float *wf = malloc(sizeof(float) * (size_t)(n_in * n_out));
            uint8_t *w = malloc((size_t)(row_bytes * (uint64_t)n_out));
            for (int64_t i = 0; i < n_in * n_out; i++)
                wf[i] = frand();
            for (int64_t r = 0; r < n_out; r++)
                ti->from_float(w + r * row_bytes, wf + r * n_in, n_in);
            const bt_matrix_t m = {.data = w, .type = type, .n_in = n_in, .n_out = n_out,
                                   .row_bytes = row_bytes};
            const int max_tok = 70;
            float *x = malloc(sizeof(float) * (size_t)(n_in * max_tok));
            for (int64_t i = 0; i < n_in * max_tok; i++)
                x[i] = frand() * 3.0f;
            float *yd = malloc(sizeof(float) * (size_t)(n_out * max_tok));
            float *yh = malloc(sizeof(float) * (size_t)(n_out * max_tok));
            bt_scratch_t s = scratch_for(n_in, 1, 2);
            for (size_t c = 0; c < sizeof toks / sizeof toks[0]; c++) {
                const int nt = toks[c];
                bt_ops_cuda.matmul(yd, &m, x, nt, &s);
                bt_ops_cuda_host.matmul(yh, &m, x, nt, &s);
                size_t first = 0, nd = differ(yd, yh, (size_t)(n_out * nt), &first);
                ck_assert_msg(nd == 0,
                              "%s %lldx%lld, %d tokens: %zu of %lld outputs differ from cuda-host "
                              "(first %zu: %a on the device, %a on the host)",
                              ti->name, (long long)n_out, (long long)n_in, nt, nd,
                              (long long)(n_out * nt), first, (double)yd[first], (double)yh[first]);
            }
            free(s.buf);
            free(yd);
            free(yh);
            free(x);
            free(w);
            free(wf);
        }
}
END_TEST

typedef struct att_case {
    int n_head, n_head_kv, head_dim, window, n_pos, sinks;
    uint32_t kv_type;
} att_case_t;

static const att_case_t att_cases[] = {
    {4, 2, 64, 0, 40, 0, BT_TYPE_F32},   {4, 2, 64, 0, 300, 0, BT_TYPE_F16},
    {4, 4, 64, 5, 300, 1, BT_TYPE_F32},  {8, 1, 128, 0, 600, 1, BT_TYPE_F16},
    {2, 1, 576, 0, 270, 0, BT_TYPE_F32}, {4, 2, 80, 130, 520, 1, BT_TYPE_F32},
};
#define N_ATT ((int)(sizeof att_cases / sizeof att_cases[0]))

START_TEST(test_attention_bits)
{
    const att_case_t *c = &att_cases[_i];
    const int kv_dim = c->n_head_kv * c->head_dim, k_stride = c->n_pos + 3;
    const size_t el = c->kv_type == BT_TYPE_F16 ? 2 : 4;
    uint8_t *k = malloc((size_t)kv_dim * k_stride * el), *v = malloc((size_t)c->n_pos * kv_dim * el);
    for (size_t i = 0; i < (size_t)kv_dim * k_stride; i++) {
        const float f = frand();
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
    float sinks[8];
    for (int h = 0; h < 8; h++)
        sinks[h] = frand() * 2.0f;
    const bt_attn_t a = {.n_head = c->n_head, .n_head_kv = c->n_head_kv, .head_dim = c->head_dim,
                         .k_stride = k_stride, .window = c->window,
                         .scale = 1.0f / sqrtf((float)c->head_dim),
                         .sinks = c->sinks ? sinks : NULL};
    /* the last n_tok positions as one call; decode as one position */
    const int splits[] = {c->n_pos < 37 ? c->n_pos : 37, 1};
    const size_t qn = (size_t)37 * c->n_head * c->head_dim;
    float *q = malloc(qn * sizeof(float)), *od = malloc(qn * sizeof(float)),
          *oh = malloc(qn * sizeof(float));
    for (size_t i = 0; i < qn; i++)
        q[i] = frand();
    bt_scratch_t s = scratch_for(c->head_dim, c->n_pos, 2);
    for (int i = 0; i < 2; i++) {
        const int nt = splits[i], pos0 = c->n_pos - nt;
        bt_ops_cuda.attention(od, q, k, v, c->kv_type, nt, pos0, &a, &s);
        bt_ops_cuda_host.attention(oh, q, k, v, c->kv_type, nt, pos0, &a, &s);
        size_t first = 0, nd = differ(od, oh, (size_t)nt * c->n_head * c->head_dim, &first);
        ck_assert_msg(nd == 0, "attention case %d, %d queries: %zu outputs differ from cuda-host "
                               "(first %zu: %a vs %a)",
                      _i, nt, nd, first, (double)od[first], (double)oh[first]);
    }
    free(s.buf);
    free(q);
    free(od);
    free(oh);
    free(k);
    free(v);
}
END_TEST

int main(void)
{
    char why[256] = "";
    const int n = bt_cuda_device_count(why, sizeof why);
    if (n <= 0) {
        printf("SKIP: no CUDA device (%s)\n", why);
        return 77;
    }
    char err[256];
    if (bt_cuda_open(0, err, sizeof err) != 0) {
        printf("cannot open CUDA %s\n", err);
        return 1;
    }
    printf("CUDA device 0: %s\n", bt_cuda_device_name());
    Suite *s = suite_create("cuda_device");
    TCase *tc = tcase_create("bits");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_matmul_bits, 0, N_TYPES);
    tcase_add_loop_test(tc, test_attention_bits, 0, N_ATT);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* one CUDA context for the process */
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    bt_cuda_close();
    return failed == 0 ? 0 : 1;
}
