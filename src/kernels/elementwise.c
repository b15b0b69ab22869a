/* elementwise.c: per-row and element-wise kernels shared by every backend.
 * Each output element is computed from its own row in a fixed order, so
 * these need no separate fast path to keep results batch-invariant.
 *
 * They are also ISA-independent: the file may be built for plain x86-64
 * (SSE2) or for -march=native and must give the same bits. So the hot loops
 * use only IEEE basic operations (+ - * /, no fma: -std=c11 keeps GCC from
 * contracting), integer bit manipulation and comparisons, written with GCC
 * vector extensions of 16 bytes; no libm call in a vector loop. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

typedef float v4f_t __attribute__((vector_size(16)));

/* rmsnorm: the sum of squares in double (the square of a float is exact
 * there), over 8 partial sums so the adds pipeline instead of waiting on one
 * serial chain; GCC packs them into 4 two-lane accumulators. Element i always
 * goes to partial i % 8 (the last n % 8 through the same step, zero-padded:
 * adding +0 leaves a partial as it is) and the partials are combined in one
 * fixed tree, so the sum depends on the row alone. */
void bt_rmsnorm_f32(float *restrict out, const float *restrict x, const float *restrict w,
                    int n_rows, int n, float eps)
{
    for (int r = 0; r < n_rows; r++) {
        const float *xr = x + (size_t)r * n;
        float *o = out + (size_t)r * n;
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, s4 = 0.0, s5 = 0.0, s6 = 0.0, s7 = 0.0;
        int i = 0;
        for (; i + 8 <= n; i += 8) {
            const float *p = xr + i;
            s0 += (double)p[0] * p[0];
            s1 += (double)p[1] * p[1];
            s2 += (double)p[2] * p[2];
            s3 += (double)p[3] * p[3];
            s4 += (double)p[4] * p[4];
            s5 += (double)p[5] * p[5];
            s6 += (double)p[6] * p[6];
            s7 += (double)p[7] * p[7];
        }
        if (i < n) {
            float p[8] = {0.0f};
            memcpy(p, xr + i, (size_t)(n - i) * sizeof(float));
            s0 += (double)p[0] * p[0];
            s1 += (double)p[1] * p[1];
            s2 += (double)p[2] * p[2];
            s3 += (double)p[3] * p[3];
            s4 += (double)p[4] * p[4];
            s5 += (double)p[5] * p[5];
            s6 += (double)p[6] * p[6];
            s7 += (double)p[7] * p[7];
        }
        double ss = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
        float scale = (float)(1.0 / sqrt(ss / n + eps));
        const v4f_t vs = {scale, scale, scale, scale};
        for (i = 0; i + 4 <= n; i += 4) {
            v4f_t a, b;
            memcpy(&a, xr + i, sizeof a);
            memcpy(&b, w + i, sizeof b);
            a = a * vs * b;
            memcpy(o + i, &a, sizeof a);
        }
        for (; i < n; i++)
            o[i] = xr[i] * scale * w[i];
    }
}

/* rope: the frequency of pair i, base^(-2i/n_rot), does not depend on the
 * token, so it is computed once per call (the same powf as per token, so the
 * same bits); cos and sin are computed once per (position, pair) and applied
 * to every head. Pairs are taken in blocks of BT_ROPE_BLOCK so the tables
 * live on the stack; every model has n_rot / 2 <= BT_ROPE_BLOCK (one block). */
enum { BT_ROPE_BLOCK = 256 };

void bt_rope_norm_f32(float *restrict x, int n_tok, int pos0, int n_head, int head_dim, int n_rot,
                      float freq_base)
{
    float freq[BT_ROPE_BLOCK], c[BT_ROPE_BLOCK], s[BT_ROPE_BLOCK];
    const int n_pair = n_rot / 2;
    for (int i0 = 0; i0 < n_pair; i0 += BT_ROPE_BLOCK) {
        const int nb = n_pair - i0 < BT_ROPE_BLOCK ? n_pair - i0 : BT_ROPE_BLOCK;
        for (int k = 0; k < nb; k++)
            freq[k] = powf(freq_base, -2.0f * (float)(i0 + k) / (float)n_rot);
        for (int t = 0; t < n_tok; t++) {
            const float pos = (float)(pos0 + t);
            for (int k = 0; k < nb; k++) {
                const float theta = pos * freq[k];
                c[k] = cosf(theta);
                s[k] = sinf(theta);
            }
            for (int h = 0; h < n_head; h++) {
                float *p = x + ((size_t)t * n_head + h) * head_dim + 2 * i0;
                for (int k = 0; k < nb; k++) {
                    const float a = p[2 * k], b = p[2 * k + 1];
                    p[2 * k] = a * c[k] - b * s[k];
                    p[2 * k + 1] = a * s[k] + b * c[k];
                }
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
    size_t mm = (size_t)BT_MATMUL_ROWS * (size_t)max_n_in;
    size_t att = (size_t)n_ctx;
    return mm > att ? mm : att;
}
