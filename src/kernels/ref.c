/* ref.c: the scalar reference ops. Plain loops in the most obvious order,
 * one thread; the fast paths are tested against these. */
#include <math.h>

#include "kernels.h"

/* Dequantizes row r of w into buf (n_in floats). */
static void dequant_row(float *restrict buf, const bt_matrix_t *w, int64_t r)
{
    const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
    bt_type_info(w->type)->to_float(buf, row, w->n_in);
}

static void ref_matmul(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                       int n_tok, const bt_scratch_t *s)
{
    float *row = s->buf;
    for (int64_t r = 0; r < w->n_out; r++) {
        dequant_row(row, w, r);
        for (int t = 0; t < n_tok; t++) {
            const float *xt = x + (size_t)t * w->n_in;
            float sum = 0.0f;
            for (int64_t k = 0; k < w->n_in; k++)
                sum += row[k] * xt[k];
            out[(size_t)t * w->n_out + r] = sum;
        }
    }
}

/* Element i of the cache, f32 or f16. */
static float kv_at(const void *p, size_t i, uint32_t type)
{
    return type == BT_TYPE_F16 ? bt_f16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void ref_attention(float *restrict out, const float *restrict q, const void *k,
                          const void *v, uint32_t kv_type, int n_tok, int pos0, const bt_attn_t *a,
                          const bt_scratch_t *s)
{
    float *score = s->buf; /* [n_ctx] */
    const int n_head = a->n_head, head_dim = a->head_dim, k_stride = a->k_stride;
    const int group = n_head / a->n_head_kv;
    const int kv_dim = a->v_stride > 0 ? a->v_stride : a->n_head_kv * head_dim;
    const float scale = a->scale;
    for (int t = 0; t < n_tok; t++) {
        const int p = pos0 + t; /* keys j0 .. p: causal, and the last `window` */
        const int j0 = a->window > 0 && p >= a->window ? p - a->window + 1 : 0;
        const int n_keys = p + 1 - j0;
        for (int h = 0; h < n_head; h++) {
            const float *qh = q + ((size_t)t * n_head + h) * head_dim;
            const int kvh = h / group;
            const float sink = a->sinks != NULL ? a->sinks[h] : -INFINITY;
            float max = sink; /* a sink joins the max and the sum, with no value */
            const size_t kh = (size_t)kvh * head_dim * k_stride; /* [head_dim][k_stride] */
            for (int j = 0; j < n_keys; j++) {
                float dot = 0.0f;
                for (int d = 0; d < head_dim; d++)
                    dot += qh[d] * kv_at(k, kh + (size_t)d * k_stride + j0 + j, kv_type);
                score[j] = dot * scale;
                max = fmaxf(max, score[j]);
            }
            double sum = 0.0;
            for (int j = 0; j < n_keys; j++) {
                score[j] = expf(score[j] - max);
                sum += score[j];
            }
            sum += expf(sink - max);
            float inv = (float)(1.0 / sum);
            float *oh = out + ((size_t)t * n_head + h) * head_dim;
            for (int d = 0; d < head_dim; d++) {
                float acc = 0.0f;
                for (int j = 0; j < n_keys; j++)
                    acc += score[j] * kv_at(v, (size_t)(j0 + j) * kv_dim + (size_t)kvh * head_dim + d,
                                            kv_type);
                oh[d] = acc * inv;
            }
        }
    }
}

const bt_ops_t bt_ops_ref = {
    .name = "ref",
    .matmul = ref_matmul,
    .attention = ref_attention,
};
