/* elementwise.c: per-row and element-wise kernels shared by every backend.
 * Each output element is computed from its own row in a fixed order, so
 * these need no separate fast path to keep results batch-invariant.
 *
 * They are also ISA-independent: the file may be built for plain x86-64
 * (SSE2) or for -march=native and must give the same bits. So the hot loops
 * use only IEEE basic operations (+ - * /, no fma: see FP_CONTRACT below),
 * integer bit manipulation and comparisons, written with GCC
 * vector extensions of 16 bytes; no libm call in a vector loop. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

/* No a * b + c contracted into an fma, whatever the compiler's default: GCC
 * does not contract under -std=c11 (and does not know this pragma); clang
 * contracts within an expression unless told. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

typedef float v4f_t __attribute__((vector_size(16)));
typedef int32_t v4i_t __attribute__((vector_size(16)));
typedef uint32_t v4u_t __attribute__((vector_size(16)));

/* m ? a : b lane by lane; m is a comparison result (all ones or zero). */
static inline v4f_t v4f_select(v4i_t m, v4f_t a, v4f_t b)
{
    return (v4f_t)(((v4u_t)m & (v4u_t)a) | (~(v4u_t)m & (v4u_t)b));
}

/* 2^n for n in [-126, 127], built from its bits. */
static inline v4f_t v4f_pow2i(v4i_t n)
{
    return (v4f_t)((v4u_t)(n + 127) << 23);
}

/* rmsnorm: the sum of squares in double (the square of a float is exact
 * there), over 8 partial sums so the adds pipeline instead of waiting on one
 * serial chain; GCC packs them into 4 two-lane accumulators. Element i always
 * goes to partial i % 8 (the last n % 8 through the same step, zero-padded:
 * adding +0 leaves a partial as it is) and the partials are combined in one
 * fixed tree, so the sum depends on the row alone. A row is read whole
 * before it is written, so out may be x. */
void bt_rmsnorm_f32(float *out, const float *x, const float *restrict w, int n_rows, int n,
                    float eps)
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

/* rope: the frequency of pair i, freq_scale * base^(-2i/n_rot) / factor_i,
 * does not depend on the token, so it is computed once per call (the same
 * powf as per token, so the same bits); cos and sin are computed once per
 * (position, pair) and applied to every head. Pairs are taken in blocks of
 * BT_ROPE_BLOCK so the tables live on the stack; every model has n_rot / 2
 * <= BT_ROPE_BLOCK (one block). Pair i of a head is (x[2i], x[2i+1]), or
 * with neox (x[i], x[i + n_rot/2]): element i's partner is `half` away. */
enum { BT_ROPE_BLOCK = 256 };

void bt_rope_f32(float *restrict x, int n_tok, int pos0, int n_head, int head_dim,
                 const bt_rope_t *r)
{
    float freq[BT_ROPE_BLOCK], c[BT_ROPE_BLOCK], s[BT_ROPE_BLOCK];
    const int n_pair = r->n_rot / 2;
    const int stride = r->neox ? 1 : 2, half = r->neox ? n_pair : 1;
    for (int i0 = 0; i0 < n_pair; i0 += BT_ROPE_BLOCK) {
        const int nb = n_pair - i0 < BT_ROPE_BLOCK ? n_pair - i0 : BT_ROPE_BLOCK;
        for (int k = 0; k < nb; k++) {
            freq[k] = powf(r->base, -2.0f * (float)(i0 + k) / (float)r->n_rot);
            if (r->yarn) {
                float y = ((float)(i0 + k) - r->yarn_low) / fmaxf(0.001f, r->yarn_high - r->yarn_low);
                const float ramp = 1.0f - fminf(1.0f, fmaxf(0.0f, y));
                freq[k] *= r->freq_scale * (1.0f - ramp) + ramp;
            } else {
                freq[k] *= r->freq_scale;
            }
            if (r->factors != NULL)
                freq[k] /= r->factors[i0 + k];
        }
        for (int t = 0; t < n_tok; t++) {
            const float pos = (float)(pos0 + t);
            for (int k = 0; k < nb; k++) {
                const float theta = pos * freq[k];
                c[k] = cosf(theta);
                s[k] = sinf(theta);
                if (r->yarn) {
                    c[k] *= r->mscale;
                    s[k] *= r->mscale;
                }
            }
            for (int h = 0; h < n_head; h++) {
                float *p = x + ((size_t)t * n_head + h) * head_dim + stride * i0;
                for (int k = 0; k < nb; k++) {
                    const float a = p[stride * k], b = p[stride * k + half];
                    p[stride * k] = a * c[k] - b * s[k];
                    p[stride * k + half] = a * s[k] + b * c[k];
                }
            }
        }
    }
}

/* swiglu, with its own exp: silu(g) = g / (1 + e^-g), the formula of the
 * libm-based code before it and of llama.cpp, for every g.
 *
 *   z = -g, clamped to [-110, 110] (beyond, silu rounds to g or to -0);
 *   n = round(z / ln 2) (by the 1.5 * 2^23 trick, read back from the bits);
 *   r = z - n ln 2 in two steps (Cody-Waite: n has 8 bits and LN2_HI 16, so
 *   n * LN2_HI is exact); e^r = 1 + y, y = r + r^2 q(r), q of degree 4
 *   fitted (weighted minimax, relative error 4.5e-9 with these float
 *   coefficients) on |r| <= 0.3468; e^z = (1 + y) 2^n1 2^n2 with n1 = n / 2
 *   (the first scaling exact, so a result in the subnormal range is rounded
 *   once, and none overflows on the way).
 *
 * For g < -64, e^-g would overflow past g = -88.7 while silu is still a
 * normal number there: numerator and denominator are both scaled by 2^-64
 * (exact, so the bits are those of the unscaled quotient wherever that is
 * finite). g = -inf gives -0, +inf gives +inf; NaN fails every comparison
 * and so goes through the arithmetic: NaN in, NaN out. */
#define SILU_Z_MAX 110.0f
#define EXP_MAGIC 0x1.8p23f /* 1.5 * 2^23: adding it rounds to an integer */
#define EXP_MAGIC_BITS 0x4b400000u
#define EXP_LOG2E 0x1.715476p+0f
#define EXP_LN2_HI 0x1.62e4p-1f     /* ln 2 to 16 bits */
#define EXP_LN2_LO 0x1.7f7d1cp-20f  /* ln 2 - EXP_LN2_HI */
#define EXP_C2 0x1.fffffcp-2f
#define EXP_C3 0x1.555490p-3f
#define EXP_C4 0x1.5558f4p-5f
#define EXP_C5 0x1.123a36p-7f
#define EXP_C6 0x1.6a23a8p-10f

/* x / (1 + e^-y), lane by lane: silu is (g, g), the tanh GELU
 * (z, 2 sqrt(2/pi) (z + 0.044715 z^3)), since (1 + tanh(u)) / 2 =
 * 1 / (1 + e^-2u). */
static inline v4f_t div_1p_exp4(v4f_t x, v4f_t y)
{
    const v4f_t one = {1.0f, 1.0f, 1.0f, 1.0f};
    const v4f_t zmax = {SILU_Z_MAX, SILU_Z_MAX, SILU_Z_MAX, SILU_Z_MAX};
    const v4f_t big_y = {-64.0f, -64.0f, -64.0f, -64.0f};
    const v4f_t down = {0x1p-64f, 0x1p-64f, 0x1p-64f, 0x1p-64f};

    v4f_t z = -y;
    z = v4f_select(z > zmax, zmax, z);
    z = v4f_select(z < -zmax, -zmax, z);
    const v4i_t big = y < big_y; /* scale by 2^-64 */
    v4f_t t = z * EXP_LOG2E + EXP_MAGIC;
    v4f_t nf = t - EXP_MAGIC;
    v4i_t n = (v4i_t)((v4u_t)t - EXP_MAGIC_BITS); /* in [-159, 159] */
    v4f_t r = (z - nf * EXP_LN2_HI) - nf * EXP_LN2_LO;
    v4f_t q = EXP_C2 + r * (EXP_C3 + r * (EXP_C4 + r * (EXP_C5 + r * EXP_C6)));
    v4f_t e1 = r + r * r * q; /* e^r - 1 */
    v4i_t n1 = n >> 1, n2 = n - n1 + (big & -64);
    v4f_t e = (one + e1) * v4f_pow2i(n1) * v4f_pow2i(n2); /* e^z, times 2^-64 where big */
    const v4i_t tiny = y < -zmax; /* -inf: -0 below */
    x = v4f_select(tiny & (x < -zmax), -zmax, x);
    x = v4f_select(tiny & (x > zmax), zmax, x);
    v4f_t num = x * v4f_select(big, down, one);
    return num / (v4f_select(big, down, one) + e);
}

static inline v4f_t silu4(v4f_t g) { return div_1p_exp4(g, g); }

/* gelu(z) = z / (1 + e^-2u), u = sqrt(2/pi) z (1 + 0.044715 z^2): the
 * tanh form exactly, through the exp above instead of libm's tanh. */
static inline v4f_t gelu4(v4f_t z)
{
    const float k2 = 2.0f * 0.7978845608028654f; /* 2 sqrt(2 / pi) */
    return div_1p_exp4(z, k2 * z * (1.0f + 0.044715f * z * z));
}

static inline v4f_t swiglu4(v4f_t g, v4f_t u) { return silu4(g) * u; }
static inline v4f_t geglu4(v4f_t g, v4f_t u) { return gelu4(g) * u; }

/* gpt-oss: gate clamped above at 7, up to [-7, 7], gate sigmoid(1.702
 * gate) (up + 1). */
static inline v4f_t swiglu_oai4(v4f_t g, v4f_t u)
{
    const v4f_t seven = {7.0f, 7.0f, 7.0f, 7.0f}, one = {1.0f, 1.0f, 1.0f, 1.0f};
    g = v4f_select(g > seven, seven, g);
    u = v4f_select(u > seven, seven, u);
    u = v4f_select(u < -seven, -seven, u);
    return div_1p_exp4(g, 1.702f * g) * (u + one);
}

/* gate[i] = f(gate[i], up[i]), 4 at a time with fixed-size copies (a copy
 * of a variable size is a call to memcpy: gpt-oss's activation spent 10
 * ns an element in them); the last 1-3 through the same lanes, padded
 * with zeros. */
static inline void gated4(float *restrict gate, const float *restrict up, int64_t n,
                          v4f_t (*f)(v4f_t, v4f_t))
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        v4f_t g, u;
        memcpy(&g, gate + i, sizeof g);
        memcpy(&u, up + i, sizeof u);
        g = f(g, u);
        memcpy(gate + i, &g, sizeof g);
    }
    if (i < n) {
        const size_t rest = (size_t)(n - i) * sizeof(float);
        v4f_t g = {0.0f, 0.0f, 0.0f, 0.0f}, u = g;
        memcpy(&g, gate + i, rest);
        memcpy(&u, up + i, rest);
        g = f(g, u);
        memcpy(gate + i, &g, rest);
    }
}

void bt_swiglu_f32(float *restrict gate, const float *restrict up, int64_t n)
{
    gated4(gate, up, n, swiglu4);
}

void bt_geglu_f32(float *restrict gate, const float *restrict up, int64_t n)
{
    gated4(gate, up, n, geglu4);
}

void bt_swiglu_oai_f32(float *restrict gate, const float *restrict up, int64_t n)
{
    gated4(gate, up, n, swiglu_oai4);
}

/* x + y is x + 1 y: the product by 1 is exact. */
void bt_add_f32(float *restrict x, const float *restrict y, int64_t n)
{
    bt_axpy_f32(x, 1.0f, y, n);
}

void bt_add_rows_f32(float *restrict x, const float *restrict b, int n_rows, int64_t n)
{
    for (int r = 0; r < n_rows; r++)
        bt_add_f32(x + (size_t)r * (size_t)n, b, n);
}

/* 4 at a time, where -O2 leaves a loop of unknown length scalar (biases
 * and a mixture's combine run on one thread between products); each
 * element is the same two roundings either way. */
void bt_axpy_f32(float *restrict y, float a, const float *restrict x, int64_t n)
{
    const v4f_t va = {a, a, a, a};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        v4f_t vy, vx;
        memcpy(&vy, y + i, sizeof vy);
        memcpy(&vx, x + i, sizeof vx);
        vy += va * vx;
        memcpy(y + i, &vy, sizeof vy);
    }
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* Whether a value ranks before another that comes earlier: only by
 * being larger (an equal stays after it: the lower index first among
 * equals), a number before NaN. */
static inline bool beats(float a, float b)
{
    return !isnan(a) && (isnan(b) || a > b);
}

/* idx[0 .. k): the k largest of v[0 .. n), largest first, a lower index
 * first among equals, NaN after every number (-1 past n). One pass in
 * index order, each value passing the held ones it beats: once k are
 * held, most values stop at the first comparison. */
static void topk(const float *restrict v, int n, int k, int *restrict idx)
{
    int held = 0;
    for (int e = 0; e < n; e++) {
        int at = held;
        while (at > 0 && beats(v[e], v[idx[at - 1]]))
            at--;
        if (at == k)
            continue;
        for (int j = held < k ? held : k - 1; j > at; j--)
            idx[j] = idx[j - 1];
        idx[at] = e;
        held += held < k;
    }
    for (int i = held; i < k; i++)
        idx[i] = -1;
}

void bt_topk_softmax(const float *restrict logits, int n, int k, int *restrict idx,
                     float *restrict w)
{
    topk(logits, n, k, idx);
    const float top = logits[idx[0]];
    float sum = 0.0f;
    for (int i = 0; i < k; i++) {
        w[i] = expf(logits[idx[i]] - top);
        sum += w[i];
    }
    for (int i = 0; i < k; i++)
        w[i] /= sum;
}

void bt_route(const float *restrict logits, int n, int k, const bt_route_t *r,
              int *restrict idx, float *restrict w, float *restrict tmp)
{
    float *s = tmp, *t = tmp + n; /* weighing and choosing scores */
    if (r->sigmoid) {
        for (int e = 0; e < n; e++)
            s[e] = 1.0f / (1.0f + expf(-logits[e]));
    } else {
        float top = logits[0], sum = 0.0f;
        for (int e = 1; e < n; e++)
            top = logits[e] > top ? logits[e] : top;
        for (int e = 0; e < n; e++)
            sum += s[e] = expf(logits[e] - top);
        for (int e = 0; e < n; e++)
            s[e] /= sum;
    }
    for (int e = 0; e < n; e++)
        t[e] = r->bias != NULL ? s[e] + r->bias[e] : s[e];
    if (r->n_group > 1 && r->n_group_used < r->n_group) {
        /* each group's score: its two best choosing scores (its one where a group
         * has one expert); the groups outside the best n_group_used never chosen */
        const int size = n / r->n_group;
        float score[BT_ROUTE_GROUPS_MAX];
        int keep[BT_ROUTE_GROUPS_MAX], best2[2];
        for (int g = 0; g < r->n_group; g++) {
            const int two = size < 2 ? size : 2;
            topk(t + g * size, size, two, best2);
            score[g] = 0.0f;
            for (int j = 0; j < two; j++)
                score[g] += t[g * size + best2[j]];
        }
        topk(score, r->n_group, r->n_group_used, keep);
        for (int g = 0; g < r->n_group; g++) {
            bool kept = false;
            for (int j = 0; j < r->n_group_used; j++)
                kept |= keep[j] == g;
            for (int e = g * size; e < (g + 1) * size && !kept; e++)
                t[e] = -INFINITY;
        }
    }
    topk(t, n, k, idx);
    float sum = 0.0f;
    for (int i = 0; i < k; i++)
        sum += w[i] = s[idx[i]];
    if (r->norm) {
        sum = sum > 6.103515625e-5f ? sum : 6.103515625e-5f;
        for (int i = 0; i < k; i++)
            w[i] /= sum;
    }
    for (int i = 0; i < k && r->scale != 1.0f; i++)
        w[i] *= r->scale;
}

void bt_scale_f32(float *restrict x, float c, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] *= c;
}

void bt_softcap_f32(float *restrict x, float c, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = c * tanhf(x[i] / c);
}

size_t bt_scratch_floats(int64_t max_n_in, int64_t n_ctx)
{
    /* the matmuls: 32 rows of f32 (cpu_fpanel.c: two panels widened), or
     * (cpu_q8.c) 32 tokens quantized, one packed panel and the tokens'
     * records for it, 48 + 18 + 48 bytes per column (and 64 to align) */
    size_t mm = (size_t)(2 * BT_MATMUL_ROWS + 1) * (size_t)max_n_in;
    /* attention: a row of scores per position (ref), or BT_ATT_ROWS rows
     * of a key block (cpu) */
    const size_t block = (size_t)BT_ATT_ROWS * BT_ATT_KEY_BLOCK;
    size_t att = (size_t)n_ctx > block ? (size_t)n_ctx : block;
    return mm > att ? mm : att;
}
