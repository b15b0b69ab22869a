/*
 * matmul.cu: y = W x on the device for every weight type, in cu_math.h's
 * order (a chain over segments of 128 columns; for the quantized types,
 * exact integer dot products per group of 32 against 8-bit activations).
 *
 *  - quantize_act: one thread per (token, group) quantizes x.
 *  - gemv_quant (<= 8 tokens): one warp per row, lane l decodes group
 *    32 c + l and takes its integer dots with dp4a; the four lanes of a
 *    segment then chain their groups in order (shuffles up), and every
 *    lane adds the eight segments of the pass in order.
 *  - gemm_quant (more tokens): a block dequantizes 64 rows x one group
 *    into shared memory as int8, multiplies it with 32 tokens' int8
 *    activations on the tensor cores (WMMA 16x16x16, int32 sums: exact,
 *    so the same integers as dp4a), and each thread chains its 16
 *    elements group by group.
 *  - gemv_float / gemm_float: F32, F16, BF16 weights, f32 FMA chains per
 *    segment (no tensor cores: their f16/tf32 inputs would round x).
 * Every output element thus goes through the same operations in the same
 * order whichever kernel, tile or grid computed it (invariant 1).
 */
#include <mma.h>

#include "cuda_internal.cuh"

#define FULL_MASK 0xffffffffu

/* ---- activations ---- */

__global__ void quantize_act(bt_cu_act_t act, const float *__restrict__ x, int64_t n_in,
                             int64_t n_groups_all, int f16_step)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; /* token * n_group + g */
    if (i >= n_groups_all)
        return;
    const int64_t n_group = n_in / BT_CU_GROUP, t = i / n_group, g = i % n_group;
    float v[BT_CU_GROUP];
    #pragma unroll
    for (int k = 0; k < BT_CU_GROUP; k++)
        v[k] = x[t * n_in + g * BT_CU_GROUP + k];
    uint32_t xw[8];
    bt_cu_quantize32(v, f16_step, xw, &act.dx[i], &act.sx[i]);
    #pragma unroll
    for (int w = 0; w < 8; w++)
        act.xw[8 * i + w] = xw[w];
}

/* ---- quantized weights, few tokens ---- */

template <int NT>
__global__ void __launch_bounds__(128) gemv_quant(float *__restrict__ y, const uint8_t *__restrict__ w,
                                                  uint32_t type, int64_t n_in, int64_t n_out,
                                                  uint64_t row_bytes, bt_cu_act_t act, int n_tok)
{
    const int lane = threadIdx.x % BT_CU_WARP;
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x / BT_CU_WARP) + threadIdx.x / BT_CU_WARP;
    if (r >= n_out)
        return;
    const uint8_t *row = w + r * row_bytes;
    const int64_t n_group = n_in / BT_CU_GROUP;
    const int per_seg = BT_CU_SEG / BT_CU_GROUP; /* 4: the lanes of a quad */
    float total[NT];
    #pragma unroll
    for (int t = 0; t < NT; t++)
        total[t] = 0.0f;
    for (int64_t c = 0; c * BT_CU_WARP < n_group; c++) {
        const int64_t g = c * BT_CU_WARP + lane;
        const bool have = g < n_group;
        uint32_t qw[8];
        bt_cu_scales_t sc = {};
        if (have) {
            bt_cu_group_quants(type, row, g, qw);
            sc = bt_cu_group_scales(type, row, g);
        }
        float part[NT];
        #pragma unroll
        for (int t = 0; t < NT; t++)
            part[t] = 0.0f;
        /* the chain through the quad: step i is lane i's group */
        #pragma unroll
        for (int i = 0; i < per_seg; i++) {
            #pragma unroll
            for (int t = 0; t < NT; t++) {
                const float prev = __shfl_up_sync(FULL_MASK, part[t], 1, per_seg);
                if (lane % per_seg == i && t < n_tok) {
                    const float base = i == 0 ? 0.0f : prev;
                    if (have) {
                        const int64_t a = (int64_t)t * n_group + g;
                        int32_t isum[2];
                        uint32_t xw[8];
                        #pragma unroll
                        for (int k = 0; k < 8; k++)
                            xw[k] = act.xw[8 * a + k];
                        bt_cu_group_dot(qw, xw, sc.nsub, isum);
                        part[t] = bt_cu_group_fma(base, &sc, isum, act.dx[a], act.sx[a]);
                    } else {
                        part[t] = base;
                    }
                }
            }
        }
        /* the pass's segments, in order: each quad's last lane holds one */
        #pragma unroll
        for (int q = 0; q < BT_CU_WARP / per_seg; q++) {
            const int64_t seg = c * (BT_CU_WARP / per_seg) + q;
            #pragma unroll
            for (int t = 0; t < NT; t++) {
                const float p = __shfl_sync(FULL_MASK, part[t], q * per_seg + per_seg - 1);
                if (seg * per_seg < n_group)
                    total[t] = bt_cu_seg_add(total[t], p, seg);
            }
        }
    }
    if (lane == 0)
        for (int t = 0; t < NT && t < n_tok; t++)
            y[(int64_t)t * n_out + r] = total[t];
}

/* ---- quantized weights, many tokens: int8 tensor cores ---- */

#define GQ_ROWS 64
#define GQ_TOKS 32
#define GQ_THREADS 128

__global__ void __launch_bounds__(GQ_THREADS)
    gemm_quant(float *__restrict__ y, const uint8_t *__restrict__ w, uint32_t type, int64_t n_in,
               int64_t n_out, uint64_t row_bytes, bt_cu_act_t act, int n_tok)
{
    using namespace nvcuda;
    __shared__ __align__(32) int8_t a_s[GQ_ROWS][BT_CU_GROUP];    /* weights' quants */
    __shared__ __align__(32) int8_t b_s[GQ_TOKS][BT_CU_GROUP];    /* tokens' quants */
    __shared__ __align__(32) int32_t c_s[2][GQ_ROWS][GQ_TOKS];    /* isum per half */
    __shared__ bt_cu_scales_t sc_s[GQ_ROWS];
    __shared__ float dx_s[GQ_TOKS];
    __shared__ int32_t sx_s[GQ_TOKS];

    const int tid = threadIdx.x, warp = tid / BT_CU_WARP;
    const int64_t r0 = (int64_t)blockIdx.x * GQ_ROWS, t0 = (int64_t)blockIdx.y * GQ_TOKS;
    const int64_t n_group = n_in / BT_CU_GROUP;
    const int per_seg = BT_CU_SEG / BT_CU_GROUP;
    /* this thread's 16 elements: row my_r, tokens my_t .. my_t + 15 */
    const int my_r = tid / 2, my_t = (tid % 2) * 16;
    float part[16], total[16];
    #pragma unroll
    for (int e = 0; e < 16; e++)
        part[e] = total[e] = 0.0f;

    for (int64_t g = 0; g < n_group; g++) {
        /* weights: 64 rows x 8 words; tokens: 32 x 8 words */
        for (int i = tid; i < GQ_ROWS * 8; i += GQ_THREADS) {
            const int rr = i / 8, wd = i % 8;
            const int64_t r = r0 + rr;
            const uint32_t v = r < n_out ? bt_cu_group_word(type, w + r * row_bytes, g, wd) : 0;
            *(uint32_t *)&a_s[rr][4 * wd] = v;
        }
        for (int i = tid; i < GQ_TOKS * 8; i += GQ_THREADS) {
            const int tt = i / 8, wd = i % 8;
            const int64_t t = t0 + tt;
            *(uint32_t *)&b_s[tt][4 * wd] = t < n_tok ? act.xw[8 * (t * n_group + g) + wd] : 0;
        }
        if (tid < GQ_ROWS) {
            const int64_t r = r0 + tid;
            if (r < n_out) {
                sc_s[tid] = bt_cu_group_scales(type, w + r * row_bytes, g);
            } else {
                bt_cu_scales_t z = {};
                z.nsub = 1;
                sc_s[tid] = z;
            }
        } else if (tid < GQ_ROWS + GQ_TOKS) {
            const int tt = tid - GQ_ROWS;
            const int64_t t = t0 + tt;
            dx_s[tt] = t < n_tok ? act.dx[t * n_group + g] : 0.0f;
            sx_s[tt] = t < n_tok ? act.sx[t * n_group + g] : 0;
        }
        __syncthreads();
        /* warp w: rows 16 w .. 16 w + 15, all 32 tokens; the two halves of
         * the group apart (Q6_K scales them apart; else they are added) */
        {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> fb;
            wmma::fragment<wmma::accumulator, 16, 16, 16, int> fc;
            #pragma unroll
            for (int h = 0; h < 2; h++)
                #pragma unroll
                for (int n = 0; n < GQ_TOKS / 16; n++) {
                    wmma::fill_fragment(fc, 0);
                    wmma::load_matrix_sync(fa, &a_s[16 * warp][16 * h], BT_CU_GROUP);
                    wmma::load_matrix_sync(fb, &b_s[16 * n][16 * h], BT_CU_GROUP);
                    wmma::mma_sync(fc, fa, fb, fc);
                    wmma::store_matrix_sync(&c_s[h][16 * warp][16 * n], fc, GQ_TOKS,
                                            wmma::mem_row_major);
                }
        }
        __syncthreads();
        const bt_cu_scales_t sc = sc_s[my_r];
        #pragma unroll
        for (int e = 0; e < 16; e++) {
            const int tt = my_t + e;
            const int32_t lo = c_s[0][my_r][tt], hi = c_s[1][my_r][tt];
            int32_t isum[2];
            isum[0] = sc.nsub == 2 ? lo : lo + hi;
            isum[1] = sc.nsub == 2 ? hi : 0;
            part[e] = bt_cu_group_fma(part[e], &sc, isum, dx_s[tt], sx_s[tt]);
            if ((g + 1) % per_seg == 0 || g + 1 == n_group) {
                total[e] = bt_cu_seg_add(total[e], part[e], g / per_seg);
                part[e] = 0.0f;
            }
        }
        __syncthreads();
    }
    const int64_t r = r0 + my_r;
    if (r < n_out)
        #pragma unroll
        for (int e = 0; e < 16; e++) {
            const int64_t t = t0 + my_t + e;
            if (t < n_tok)
                y[t * n_out + r] = total[e];
        }
}

/* ---- float weights ---- */

template <int NT>
__global__ void __launch_bounds__(128) gemv_float(float *__restrict__ y, const uint8_t *__restrict__ w,
                                                  uint32_t type, int64_t n_in, int64_t n_out,
                                                  uint64_t row_bytes, const float *__restrict__ x,
                                                  int n_tok)
{
    const int lane = threadIdx.x % BT_CU_WARP;
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x / BT_CU_WARP) + threadIdx.x / BT_CU_WARP;
    if (r >= n_out)
        return;
    const uint8_t *row = w + r * row_bytes;
    const int64_t n_seg = (n_in + BT_CU_SEG - 1) / BT_CU_SEG;
    float total[NT];
    #pragma unroll
    for (int t = 0; t < NT; t++)
        total[t] = 0.0f;
    for (int64_t c = 0; c * BT_CU_WARP < n_seg; c++) {
        const int64_t seg = c * BT_CU_WARP + lane;
        float part[NT];
        #pragma unroll
        for (int t = 0; t < NT; t++)
            part[t] = 0.0f;
        if (seg < n_seg) {
            const int64_t k0 = seg * BT_CU_SEG;
            const int64_t k1 = k0 + BT_CU_SEG < n_in ? k0 + BT_CU_SEG : n_in;
            for (int64_t k = k0; k < k1; k++) {
                const float wk = bt_cu_weight_f(type, row, k);
                #pragma unroll
                for (int t = 0; t < NT; t++)
                    if (t < n_tok)
                        part[t] = fmaf(wk, x[(int64_t)t * n_in + k], part[t]);
            }
        }
        #pragma unroll
        for (int l = 0; l < BT_CU_WARP; l++)
            #pragma unroll
            for (int t = 0; t < NT; t++) {
                const float p = __shfl_sync(FULL_MASK, part[t], l);
                if (c * BT_CU_WARP + l < n_seg)
                    total[t] = bt_cu_seg_add(total[t], p, c * BT_CU_WARP + l);
            }
    }
    if (lane == 0)
        for (int t = 0; t < NT && t < n_tok; t++)
            y[(int64_t)t * n_out + r] = total[t];
}

#define GF_K 32

__global__ void __launch_bounds__(GQ_THREADS)
    gemm_float(float *__restrict__ y, const uint8_t *__restrict__ w, uint32_t type, int64_t n_in,
               int64_t n_out, uint64_t row_bytes, const float *__restrict__ x, int n_tok)
{
    __shared__ float w_s[GQ_ROWS][GF_K + 1];
    __shared__ float x_s[GQ_TOKS][GF_K + 1];
    const int tid = threadIdx.x;
    const int64_t r0 = (int64_t)blockIdx.x * GQ_ROWS, t0 = (int64_t)blockIdx.y * GQ_TOKS;
    const int my_r = tid / 2, my_t = (tid % 2) * 16;
    float part[16], total[16];
    #pragma unroll
    for (int e = 0; e < 16; e++)
        part[e] = total[e] = 0.0f;
    for (int64_t k0 = 0; k0 < n_in; k0 += GF_K) {
        for (int i = tid; i < GQ_ROWS * GF_K; i += GQ_THREADS) {
            const int rr = i / GF_K, kk = i % GF_K;
            const int64_t r = r0 + rr, k = k0 + kk;
            w_s[rr][kk] = r < n_out && k < n_in ? bt_cu_weight_f(type, w + r * row_bytes, k) : 0.0f;
        }
        for (int i = tid; i < GQ_TOKS * GF_K; i += GQ_THREADS) {
            const int tt = i / GF_K, kk = i % GF_K;
            const int64_t t = t0 + tt, k = k0 + kk;
            x_s[tt][kk] = t < n_tok && k < n_in ? x[t * n_in + k] : 0.0f;
        }
        __syncthreads();
        const int nk = n_in - k0 < GF_K ? (int)(n_in - k0) : GF_K;
        for (int kk = 0; kk < nk; kk++) {
            const int64_t k = k0 + kk;
            const float wk = w_s[my_r][kk];
            #pragma unroll
            for (int e = 0; e < 16; e++)
                part[e] = fmaf(wk, x_s[my_t + e][kk], part[e]);
            if ((k + 1) % BT_CU_SEG == 0 || k + 1 == n_in)
                #pragma unroll
                for (int e = 0; e < 16; e++) {
                    total[e] = bt_cu_seg_add(total[e], part[e], k / BT_CU_SEG);
                    part[e] = 0.0f;
                }
        }
        __syncthreads();
    }
    const int64_t r = r0 + my_r;
    if (r < n_out)
        #pragma unroll
        for (int e = 0; e < 16; e++) {
            const int64_t t = t0 + my_t + e;
            if (t < n_tok)
                y[t * n_out + r] = total[e];
        }
}

/* ---- launch ---- */

void bt_cu_matmul(float *y, const uint8_t *w, uint32_t type, int64_t n_in, int64_t n_out,
                  uint64_t row_bytes, const float *x, int n_tok, bt_cu_act_t act,
                  cudaStream_t stream)
{
    const bool quant = !bt_cu_is_float(type);
    if (quant) {
        const int64_t all = (int64_t)n_tok * (n_in / BT_CU_GROUP);
        quantize_act<<<(unsigned)((all + 127) / 128), 128, 0, stream>>>(act, x, n_in, all,
                                                                        bt_cu_f16_step(type));
        BT_CUDA_CHECK(cudaGetLastError());
    }
    if (n_tok <= BT_CU_GEMV_TOKENS) {
        const unsigned blocks = (unsigned)((n_out + 3) / 4); /* 4 warps, a row each */
        if (quant) {
            if (n_tok == 1)
                gemv_quant<1><<<blocks, 128, 0, stream>>>(y, w, type, n_in, n_out, row_bytes, act, n_tok);
            else if (n_tok <= 4)
                gemv_quant<4><<<blocks, 128, 0, stream>>>(y, w, type, n_in, n_out, row_bytes, act, n_tok);
            else
                gemv_quant<8><<<blocks, 128, 0, stream>>>(y, w, type, n_in, n_out, row_bytes, act, n_tok);
        } else {
            if (n_tok == 1)
                gemv_float<1><<<blocks, 128, 0, stream>>>(y, w, type, n_in, n_out, row_bytes, x, n_tok);
            else if (n_tok <= 4)
                gemv_float<4><<<blocks, 128, 0, stream>>>(y, w, type, n_in, n_out, row_bytes, x, n_tok);
            else
                gemv_float<8><<<blocks, 128, 0, stream>>>(y, w, type, n_in, n_out, row_bytes, x, n_tok);
        }
    } else {
        const dim3 grid((unsigned)((n_out + GQ_ROWS - 1) / GQ_ROWS),
                        (unsigned)((n_tok + GQ_TOKS - 1) / GQ_TOKS));
        if (quant)
            gemm_quant<<<grid, GQ_THREADS, 0, stream>>>(y, w, type, n_in, n_out, row_bytes, act, n_tok);
        else
            gemm_float<<<grid, GQ_THREADS, 0, stream>>>(y, w, type, n_in, n_out, row_bytes, x, n_tok);
    }
    BT_CUDA_CHECK(cudaGetLastError());
}
