/*
 * cuda_internal.cuh: what the .cu files of the CUDA set share (not for C).
 */
#ifndef BT_CUDA_INTERNAL_CUH
#define BT_CUDA_INTERNAL_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "cu_math.h"

/* Reports a failed runtime call (what, where) and does not return. */
void bt_cuda_fail(cudaError_t e, const char *call, const char *file, int line);

#define BT_CUDA_CHECK(call)                                                                        \
    do {                                                                                           \
        cudaError_t bt_e_ = (call);                                                                \
        if (bt_e_ != cudaSuccess)                                                                  \
            bt_cuda_fail(bt_e_, #call, __FILE__, __LINE__);                                        \
    } while (0)

/* Tokens up to which a product runs as the one-warp-per-row GEMV. */
#define BT_CU_GEMV_TOKENS 8

/* Activations quantized on the device: per token, per group of 32. */
typedef struct bt_cu_act {
    uint32_t *xw; /* [n_tok][n_group][8] */
    float *dx;    /* [n_tok][n_group] */
    int32_t *sx;  /* [n_tok][n_group] */
} bt_cu_act_t;

/* y[t][r] = W[r] . x[t] on stream: W (device, GGUF rows row_bytes apart)
 * of type, x and y on the device; act holds room for n_tok * n_in / 32
 * groups where the type is quantized. */
void bt_cu_matmul(float *y, const uint8_t *w, uint32_t type, int64_t n_in, int64_t n_out,
                  uint64_t row_bytes, const float *x, int n_tok, bt_cu_act_t act,
                  cudaStream_t stream);

/* The shape of one attention call on the device (bt_attn_t's fields). */
typedef struct bt_cu_attn {
    int n_head, n_head_kv, head_dim, k_stride, window, kv_dim;
    float scale;
    const float *sinks; /* device, [n_head], or NULL */
} bt_cu_attn_t;

/* out, q: [n_tok][n_head * head_dim]; k transposed ([kv head][dim][k_stride]),
 * v [position][kv_dim], f32 or f16 (f16: kv_f16 nonzero); all device. */
void bt_cu_attention(float *out, const float *q, const void *k, const void *v, int kv_f16,
                     int n_tok, int pos0, const bt_cu_attn_t *a, cudaStream_t stream);

#endif /* BT_CUDA_INTERNAL_CUH */
