/*
 * cuda_host.c: the "cuda-host" ops table, the CUDA kernel set's arithmetic
 * run on the CPU.
 *
 * It follows cuda/cu_math.h step for step (the same functions), so its
 * results are the bits a GPU running src/kernels/cuda/ must give: the
 * CUDA tests compare the device against it bitwise, and it lets every
 * test of the CPU build (invariance across batches, ranks and tensor
 * splits; the golden files) hold the CUDA set's order to account on a
 * machine without a GPU. It is a reference, not a fast path: OpenMP over
 * rows, no SIMD.
 */
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "cuda/cu_math.h"
#include "kernels.h"

_Static_assert((int)BT_CU_F32 == (int)BT_TYPE_F32 && (int)BT_CU_F16 == (int)BT_TYPE_F16 &&
                   (int)BT_CU_BF16 == (int)BT_TYPE_BF16 && (int)BT_CU_Q4_0 == (int)BT_TYPE_Q4_0 &&
                   (int)BT_CU_Q4_1 == (int)BT_TYPE_Q4_1 && (int)BT_CU_Q5_0 == (int)BT_TYPE_Q5_0 &&
                   (int)BT_CU_Q5_1 == (int)BT_TYPE_Q5_1 && (int)BT_CU_Q8_0 == (int)BT_TYPE_Q8_0 &&
                   (int)BT_CU_Q4_K == (int)BT_TYPE_Q4_K && (int)BT_CU_Q5_K == (int)BT_TYPE_Q5_K &&
                   (int)BT_CU_Q6_K == (int)BT_TYPE_Q6_K && (int)BT_CU_MXFP4 == (int)BT_TYPE_MXFP4,
               "cu_math.h's type ids are GGUF's");

/* Tokens whose quantized activations a thread holds at once. */
#define HOST_TOKENS 16

/* One token's activations at 8 bits: per group 8 words, a scale and a sum. */
typedef struct {
    uint32_t *xw; /* [n_group][8] */
    float *dx;    /* [n_group] */
    int32_t *sx;  /* [n_group] */
} host_act_t;

/* A quantized row, decoded once for all tokens. */
typedef struct {
    uint32_t *qw;          /* [n_group][8] */
    bt_cu_scales_t *scale; /* [n_group] */
} host_row_t;

/* Thread i's scratch as HOST_TOKENS token records and one row record
 * (n_in / 32 groups: 40 + 12 bytes a group a token, 32 + 20 for the row,
 * well inside the 33 floats a column bt_scratch_floats gives). */
static void host_carve(const bt_scratch_t *s, int64_t n_group, host_act_t act[HOST_TOKENS],
                       host_row_t *row)
{
    char *p = (char *)(s->buf + (size_t)omp_get_thread_num() * s->per_thread);
    for (int t = 0; t < HOST_TOKENS; t++) {
        act[t].xw = (uint32_t *)p;
        p += (size_t)n_group * 8 * sizeof(uint32_t);
        act[t].dx = (float *)p;
        p += (size_t)n_group * sizeof(float);
        act[t].sx = (int32_t *)p;
        p += (size_t)n_group * sizeof(int32_t);
    }
    row->qw = (uint32_t *)p;
    p += (size_t)n_group * 8 * sizeof(uint32_t);
    row->scale = (bt_cu_scales_t *)p;
}

static float host_dot_quant(const host_row_t *row, const host_act_t *a, int64_t n_group)
{
    float total = 0.0f, part = 0.0f;
    const int64_t per_seg = BT_CU_SEG / BT_CU_GROUP;
    for (int64_t g = 0; g < n_group; g++) {
        int32_t isum[2];
        bt_cu_group_dot(row->qw + 8 * g, a->xw + 8 * g, row->scale[g].nsub, isum);
        part = bt_cu_group_fma(part, &row->scale[g], isum, a->dx[g], a->sx[g]);
        if ((g + 1) % per_seg == 0 || g + 1 == n_group) {
            total = bt_cu_seg_add(total, part, g / per_seg);
            part = 0.0f;
        }
    }
    return total;
}

static float host_dot_float(uint32_t type, const uint8_t *row, const float *x, int64_t n_in)
{
    float total = 0.0f;
    for (int64_t k0 = 0, seg = 0; k0 < n_in; k0 += BT_CU_SEG, seg++) {
        const int64_t k1 = k0 + BT_CU_SEG < n_in ? k0 + BT_CU_SEG : n_in;
        float part = 0.0f;
        for (int64_t k = k0; k < k1; k++)
            part = fmaf(bt_cu_weight_f(type, row, k), x[k], part);
        total = bt_cu_seg_add(total, part, seg);
    }
    return total;
}

static void host_matmul(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                        int n_tok, const bt_scratch_t *s)
{
    const int64_t n_in = w->n_in, n_out = w->n_out, n_group = n_in / BT_CU_GROUP;
    const bool quant = !bt_cu_is_float(w->type);
#pragma omp parallel num_threads(s->n_threads)
    {
        host_act_t act[HOST_TOKENS] = {{0}};
        host_row_t row = {0};
        if (quant)
            host_carve(s, n_group, act, &row);
        for (int t0 = 0; t0 < n_tok; t0 += HOST_TOKENS) {
            const int nt = n_tok - t0 < HOST_TOKENS ? n_tok - t0 : HOST_TOKENS;
            if (quant)
                for (int t = 0; t < nt; t++)
                    for (int64_t g = 0; g < n_group; g++)
                        bt_cu_quantize32(x + (size_t)(t0 + t) * n_in + g * BT_CU_GROUP,
                                         bt_cu_f16_step(w->type), act[t].xw + 8 * g,
                                         &act[t].dx[g], &act[t].sx[g]);
#pragma omp for schedule(static)
            for (int64_t r = 0; r < n_out; r++) {
                const uint8_t *wr = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
                if (quant)
                    for (int64_t g = 0; g < n_group; g++) {
                        bt_cu_group_quants(w->type, wr, g, row.qw + 8 * g);
                        row.scale[g] = bt_cu_group_scales(w->type, wr, g);
                    }
                for (int t = 0; t < nt; t++)
                    out[(size_t)(t0 + t) * n_out + r] =
                        quant ? host_dot_quant(&row, &act[t], n_group)
                              : host_dot_float(w->type, wr, x + (size_t)(t0 + t) * n_in, n_in);
            }
        }
    }
}

static float kv_at(const void *p, size_t i, uint32_t type)
{
    return type == BT_TYPE_F16 ? bt_cu_f16(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* One query row and head, as the device's warp computes it (cu_math.h). */
static void host_attend(float *restrict oh, const float *restrict qh, const void *k, const void *v,
                        uint32_t kv_type, int p, int kvh, float sink, const bt_attn_t *a,
                        float *restrict pj /* [BT_CU_ATT_BLOCK] */)
{
    const int head_dim = a->head_dim, k_stride = a->k_stride;
    const int kv_dim = a->v_stride > 0 ? a->v_stride : a->n_head_kv * head_dim;
    const size_t kh = (size_t)kvh * head_dim * k_stride;
    const int j0 = bt_cu_att_first_key(p, a->window);
    float M = sink, L = 0.0f;
    for (int d = 0; d < head_dim; d++)
        oh[d] = 0.0f;
    for (int b0 = j0 / BT_CU_ATT_BLOCK * BT_CU_ATT_BLOCK; b0 <= p; b0 += BT_CU_ATT_BLOCK) {
        const int lo = b0 > j0 ? b0 : j0;
        const int hi = b0 + BT_CU_ATT_BLOCK - 1 < p ? b0 + BT_CU_ATT_BLOCK - 1 : p;
        float m = M;
        for (int j = lo; j <= hi; j++) {
            float dot = 0.0f;
            for (int d = 0; d < head_dim; d++)
                dot = fmaf(qh[d], kv_at(k, kh + (size_t)d * k_stride + j, kv_type), dot);
            pj[j - b0] = dot * a->scale;
            m = fmaxf(m, pj[j - b0]);
        }
        const float c = bt_cu_expf(M - m);
        float lane[BT_CU_WARP];
        for (int l = 0; l < BT_CU_WARP; l++) {
            lane[l] = 0.0f;
            for (int j = b0 + l; j < b0 + BT_CU_ATT_BLOCK; j += BT_CU_WARP)
                if (j >= lo && j <= hi)
                    lane[l] += pj[j - b0] = bt_cu_expf(pj[j - b0] - m);
        }
        L = fmaf(L, c, bt_cu_warp_sum_host(lane));
        for (int d = 0; d < head_dim; d++) {
            float acc = 0.0f;
            for (int j = lo; j <= hi; j++)
                acc = fmaf(pj[j - b0], kv_at(v, (size_t)j * kv_dim + (size_t)kvh * head_dim + d, kv_type),
                           acc);
            oh[d] = fmaf(oh[d], c, acc);
        }
        M = m;
    }
    if (a->sinks != NULL)
        L = L + bt_cu_expf(sink - M);
    for (int d = 0; d < head_dim; d++)
        oh[d] = oh[d] / L;
}

static void host_attention(float *restrict out, const float *restrict q, const void *k,
                           const void *v, uint32_t kv_type, int n_tok, int pos0, const bt_attn_t *a,
                           const bt_scratch_t *s)
{
    const int n_head = a->n_head, group = n_head / a->n_head_kv;
#pragma omp parallel for collapse(2) schedule(static) num_threads(s->n_threads)
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < n_head; h++) {
            float *pj = s->buf + (size_t)omp_get_thread_num() * s->per_thread;
            const size_t at = ((size_t)t * n_head + h) * a->head_dim;
            host_attend(out + at, q + at, k, v, kv_type, pos0 + t, h / group,
                        a->sinks != NULL ? a->sinks[h] : -INFINITY, a, pj);
        }
}

bool bt_cuda_host_supports(uint32_t type)
{
    return bt_cu_block_bytes(type) != 0;
}

const bt_ops_t bt_ops_cuda_host = {
    .name = "cuda-host",
    .matmul = host_matmul,
    .attention = host_attention,
};
