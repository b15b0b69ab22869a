/* elementwise.c: per-row and element-wise kernels shared by every backend.
 * Each output element is computed from its own row in a fixed order, so
 * these need no separate fast path to keep results batch-invariant. */
#include <math.h>

#include "kernels.h"

void bt_rmsnorm_f32(float *restrict out, const float *restrict x, const float *restrict w,
                    int n_rows, int n, float eps)
{
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * n;
        float *o = out + (size_t)r * n;
        double ss = 0.0;
        for (int i = 0; i < n; i++)
            ss += (double)xr[i] * xr[i];
        float scale = (float)(1.0 / sqrt(ss / n + eps));
        for (int i = 0; i < n; i++)
            o[i] = xr[i] * scale * w[i];
    }
}

void bt_rope_norm_f32(float *restrict x, int n_tok, int pos0, int n_head, int head_dim, int n_rot,
                      float freq_base)
{
    for (int t = 0; t < n_tok; t++) {
        float pos = (float)(pos0 + t);
        for (int i = 0; i < n_rot / 2; i++) {
            float theta = pos * powf(freq_base, -2.0f * (float)i / (float)n_rot);
            float c = cosf(theta), s = sinf(theta);
            for (int h = 0; h < n_head; h++) {
                float *p = x + ((size_t)t * n_head + h) * head_dim + 2 * i;
                float a = p[0], b = p[1];
                p[0] = a * c - b * s;
                p[1] = a * s + b * c;
            }
        }
    }
}

void bt_swiglu_f32(float *restrict gate, const float *restrict up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void bt_add_f32(float *restrict x, const float *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] += y[i];
}

size_t bt_scratch_floats(int64_t max_n_in, int64_t n_ctx)
{
    /* the matmuls: 16 rows of f32, or (cpu_q8.c) 32 tokens quantized and
     * one packed panel, 48 + 17.1 bytes per column */
    size_t mm = (size_t)(BT_MATMUL_ROWS + 1) * (size_t)max_n_in;
    size_t att = (size_t)n_ctx;
    return mm > att ? mm : att;
}
