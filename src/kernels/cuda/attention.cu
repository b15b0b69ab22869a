/*
 * attention.cu: causal attention on the device, one warp per (query row,
 * head), in the order cu_math.h defines (key blocks of 256 from key 0,
 * an online softmax; lane l scores keys l, l + 32, ... of a block, the
 * block's sum is the warp's butterfly over the lanes' sums, and lane l
 * accumulates output dims l, l + 32, ... over the block's keys in order).
 * Windows and sinks as bt_attn_t says; f32 or f16 keys and values.
 */
#include "cuda_internal.cuh"

#define FULL_MASK 0xffffffffu
#define ATT_WARPS 4
#define ATT_KEYS_PER_LANE (BT_CU_ATT_BLOCK / BT_CU_WARP)   /* 8 */
#define ATT_DIMS_PER_LANE (BT_CU_ATT_MAX_DIM / BT_CU_WARP) /* 18 */

static __device__ __forceinline__ float kv_load(const void *p, int64_t i, int f16)
{
    return f16 ? bt_cu_f16(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static __device__ __forceinline__ float warp_max(float v)
{
    for (int o = BT_CU_WARP / 2; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

static __device__ __forceinline__ float warp_sum(float v)
{
    for (int o = BT_CU_WARP / 2; o > 0; o /= 2)
        v = v + __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__global__ void __launch_bounds__(ATT_WARPS * BT_CU_WARP)
    attention_kernel(float *__restrict__ out, const float *__restrict__ q, const void *k,
                     const void *v, int kv_f16, int n_tok, int pos0, bt_cu_attn_t a)
{
    __shared__ float q_s[ATT_WARPS][BT_CU_ATT_MAX_DIM];
    __shared__ float p_s[ATT_WARPS][BT_CU_ATT_BLOCK];
    const int lane = threadIdx.x % BT_CU_WARP, wi = threadIdx.x / BT_CU_WARP;
    const int64_t job = (int64_t)blockIdx.x * ATT_WARPS + wi; /* t * n_head + h */
    if (job >= (int64_t)n_tok * a.n_head)
        return;
    const int t = (int)(job / a.n_head), h = (int)(job % a.n_head);
    const int hd = a.head_dim, kvh = h / (a.n_head / a.n_head_kv);
    const int p = pos0 + t, j0 = bt_cu_att_first_key(p, a.window);
    const float *qh = q + job * hd;
    for (int d = lane; d < hd; d += BT_CU_WARP)
        q_s[wi][d] = qh[d];
    __syncwarp();
    const int64_t kh = (int64_t)kvh * hd * a.k_stride;
    const float sink = a.sinks != NULL ? a.sinks[h] : -INFINITY;
    float M = sink, L = 0.0f, o[ATT_DIMS_PER_LANE];
    #pragma unroll
    for (int u = 0; u < ATT_DIMS_PER_LANE; u++)
        o[u] = 0.0f;
    for (int b0 = j0 / BT_CU_ATT_BLOCK * BT_CU_ATT_BLOCK; b0 <= p; b0 += BT_CU_ATT_BLOCK) {
        const int lo = b0 > j0 ? b0 : j0;
        const int hi = b0 + BT_CU_ATT_BLOCK - 1 < p ? b0 + BT_CU_ATT_BLOCK - 1 : p;
        float s[ATT_KEYS_PER_LANE], m = -INFINITY;
        #pragma unroll
        for (int i = 0; i < ATT_KEYS_PER_LANE; i++) {
            const int j = b0 + lane + BT_CU_WARP * i;
            s[i] = -INFINITY;
            if (j >= lo && j <= hi) {
                float dot = 0.0f;
                for (int d = 0; d < hd; d++)
                    dot = fmaf(q_s[wi][d], kv_load(k, kh + (int64_t)d * a.k_stride + j, kv_f16), dot);
                s[i] = dot * a.scale;
                m = fmaxf(m, s[i]);
            }
        }
        m = fmaxf(M, warp_max(m));
        const float c = bt_cu_expf(M - m);
        float lsum = 0.0f;
        #pragma unroll
        for (int i = 0; i < ATT_KEYS_PER_LANE; i++) {
            const int j = b0 + lane + BT_CU_WARP * i;
            float pj = 0.0f;
            if (j >= lo && j <= hi) {
                pj = bt_cu_expf(s[i] - m);
                lsum += pj;
            }
            p_s[wi][lane + BT_CU_WARP * i] = pj;
        }
        L = fmaf(L, c, warp_sum(lsum));
        __syncwarp();
        #pragma unroll
        for (int u = 0; u < ATT_DIMS_PER_LANE; u++) {
            const int d = lane + BT_CU_WARP * u;
            if (d < hd) {
                float acc = 0.0f;
                for (int j = lo; j <= hi; j++)
                    acc = fmaf(p_s[wi][j - b0],
                               kv_load(v, (int64_t)j * a.kv_dim + (int64_t)kvh * hd + d, kv_f16), acc);
                o[u] = fmaf(o[u], c, acc);
            }
        }
        __syncwarp();
        M = m;
    }
    if (a.sinks != NULL)
        L = L + bt_cu_expf(sink - M);
    float *oh = out + job * hd;
    #pragma unroll
    for (int u = 0; u < ATT_DIMS_PER_LANE; u++) {
        const int d = lane + BT_CU_WARP * u;
        if (d < hd)
            oh[d] = o[u] / L;
    }
}

void bt_cu_attention(float *out, const float *q, const void *k, const void *v, int kv_f16,
                     int n_tok, int pos0, const bt_cu_attn_t *a, cudaStream_t stream)
{
    const int64_t jobs = (int64_t)n_tok * a->n_head;
    const unsigned blocks = (unsigned)((jobs + ATT_WARPS - 1) / ATT_WARPS);
    attention_kernel<<<blocks, ATT_WARPS * BT_CU_WARP, 0, stream>>>(out, q, k, v, kv_f16, n_tok,
                                                                    pos0, *a);
    BT_CUDA_CHECK(cudaGetLastError());
}
