/*
 * runtime.cu: the CUDA set's device, its copies of the weights, and the
 * ops table (bt_ops_cuda).
 *
 * A matrix is uploaded the first time it is multiplied (keyed by its host
 * address, which stays fixed: weights are mapped once), in its GGUF
 * layout. Each call stages its activations through pinned host buffers
 * that grow to the largest call and are then reused, on one stream; the
 * call returns when its output is back on the host. One call at a time
 * (a mutex): host threads that share the device share its buffers.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "cuda_internal.cuh"
#define restrict __restrict__
extern "C" {
#include "kernels.h"
}
#undef restrict

/* A host weight (its first byte and length) and its device copy. */
struct weight {
    const void *host;
    size_t bytes;
    uint8_t *dev;
};

/* A buffer that grows to the largest call. */
struct buf {
    void *p;
    size_t bytes;
};

static struct {
    int device; /* -1: none open */
    char name[256];
    cudaStream_t stream;
    void (*fatal)(const char *msg);
    /* the weights on the device, an open-addressing table by host address */
    struct weight *weights;
    size_t n_weights, cap_weights;
    /* buffers: device and pinned host, each grown to the largest call */
    struct buf d_x, d_y, d_act, d_k, d_v, d_sinks, h_x, h_y;
} cu = {-1, "", NULL, NULL, NULL, 0, 0, {}, {}, {}, {}, {}, {}, {}, {}};

extern "C" void bt_cuda_set_fatal(void (*fatal)(const char *msg))
{
    cu.fatal = fatal;
}

void bt_cuda_fail(cudaError_t e, const char *call, const char *file, int line)
{
    char msg[768];
    snprintf(msg, sizeof msg, "cuda: %s failed on device %d (%s): %s (%s; %s:%d)", call, cu.device,
             cu.name[0] != '\0' ? cu.name : "none open", cudaGetErrorString(e), cudaGetErrorName(e),
             file, line);
    if (cu.fatal != NULL)
        cu.fatal(msg);
    fprintf(stderr, "%s\n", msg);
    abort();
}

extern "C" int bt_cuda_device_count(char *why, size_t n)
{
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(why, n, "%s", cudaGetErrorString(e));
        (void)cudaGetLastError(); /* not sticky: later calls start clean */
        return 0;
    }
    if (count == 0)
        snprintf(why, n, "the runtime lists no device");
    return count;
}

extern "C" int bt_cuda_open(int device, char *err, size_t n)
{
    cudaError_t e = cudaSetDevice(device);
    cudaDeviceProp prop;
    if (e == cudaSuccess)
        e = cudaGetDeviceProperties(&prop, device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&cu.stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        snprintf(err, n, "device %d: %s", device, cudaGetErrorString(e));
        return -1;
    }
    cu.device = device;
    snprintf(cu.name, sizeof cu.name, "%s", prop.name);
    return 0;
}

extern "C" const char *bt_cuda_device_name(void)
{
    return cu.name;
}

extern "C" void bt_cuda_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = *total_bytes = 0;
    if (cu.device >= 0)
        BT_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

static void buf_free(struct buf *b, bool pinned)
{
    if (b->p != NULL) {
        if (pinned)
            cudaFreeHost(b->p);
        else
            cudaFree(b->p);
    }
    b->p = NULL;
    b->bytes = 0;
}

extern "C" void bt_cuda_close(void)
{
    if (cu.device < 0)
        return;
    for (size_t i = 0; i < cu.cap_weights; i++)
        if (cu.weights[i].dev != NULL)
            cudaFree(cu.weights[i].dev);
    free(cu.weights);
    cu.weights = NULL;
    cu.n_weights = cu.cap_weights = 0;
    struct buf *dev[] = {&cu.d_x, &cu.d_y, &cu.d_act, &cu.d_k, &cu.d_v, &cu.d_sinks};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        buf_free(dev[i], false);
    buf_free(&cu.h_x, true);
    buf_free(&cu.h_y, true);
    cudaStreamDestroy(cu.stream);
    cu.device = -1;
    cu.name[0] = '\0';
}

/* b holds at least bytes (its contents are not kept when it grows). */
static void *buf_need(struct buf *b, size_t bytes, bool pinned)
{
    if (b->bytes >= bytes)
        return b->p;
    BT_CUDA_CHECK(cudaStreamSynchronize(cu.stream));
    buf_free(b, pinned);
    if (pinned)
        BT_CUDA_CHECK(cudaMallocHost(&b->p, bytes));
    else
        BT_CUDA_CHECK(cudaMalloc(&b->p, bytes));
    b->bytes = bytes;
    return b->p;
}

static void need_device(void)
{
    if (cu.device < 0) {
        const char *msg = "cuda: a CUDA kernel was called before bt_cuda_open chose a device";
        if (cu.fatal != NULL)
            cu.fatal(msg);
        fprintf(stderr, "%s\n", msg);
        abort();
    }
}

/* The slot of (host, bytes), or the empty one where it would go: two views
 * that start at one address but differ in length are two copies. */
static size_t weight_slot(const void *host, size_t bytes)
{
    size_t h = ((uintptr_t)host >> 4 ^ bytes) * 0x9E3779B97F4A7C15ull;
    size_t i = h & (cu.cap_weights - 1);
    while (cu.weights[i].host != NULL &&
           (cu.weights[i].host != host || cu.weights[i].bytes != bytes))
        i = (i + 1) & (cu.cap_weights - 1);
    return i;
}

/* The device copy of w's rows, uploaded on first use. */
static const uint8_t *weight_dev(const bt_matrix_t *w)
{
    if (2 * (cu.n_weights + 1) > cu.cap_weights) { /* grow: rehash */
        const size_t old_cap = cu.cap_weights;
        struct weight *old = cu.weights;
        cu.cap_weights = old_cap != 0 ? 2 * old_cap : 256;
        cu.weights = (struct weight *)calloc(cu.cap_weights, sizeof *cu.weights);
        if (cu.weights == NULL)
            bt_cuda_fail(cudaErrorMemoryAllocation, "calloc(weight table)", __FILE__, __LINE__);
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].host != NULL)
                cu.weights[weight_slot(old[i].host, old[i].bytes)] = old[i];
        free(old);
    }
    const size_t bytes = (size_t)w->n_out * w->row_bytes;
    const size_t i = weight_slot(w->data, bytes);
    if (cu.weights[i].host == NULL) {
        uint8_t *dev;
        BT_CUDA_CHECK(cudaMalloc(&dev, bytes));
        BT_CUDA_CHECK(cudaMemcpy(dev, w->data, bytes, cudaMemcpyHostToDevice));
        cu.weights[i].host = w->data;
        cu.weights[i].bytes = bytes;
        cu.weights[i].dev = dev;
        cu.n_weights++;
    }
    return cu.weights[i].dev;
}

static pthread_mutex_t call_lock = PTHREAD_MUTEX_INITIALIZER;

static void cuda_matmul(float *out_host, const bt_matrix_t *w, const float *x, int n_tok,
                        const bt_scratch_t *s)
{
    (void)s;
    need_device();
    pthread_mutex_lock(&call_lock);
    const uint8_t *dw = weight_dev(w);
    const size_t xb = (size_t)n_tok * w->n_in * sizeof(float);
    const size_t yb = (size_t)n_tok * w->n_out * sizeof(float);
    const size_t groups = (size_t)n_tok * (size_t)(w->n_in / BT_CU_GROUP);
    float *hx = (float *)buf_need(&cu.h_x, xb, true);
    float *hy = (float *)buf_need(&cu.h_y, yb, true);
    float *dx = (float *)buf_need(&cu.d_x, xb, false);
    float *dy = (float *)buf_need(&cu.d_y, yb, false);
    uint8_t *da = (uint8_t *)buf_need(&cu.d_act, groups * (8 * sizeof(uint32_t) + 8) + 16, false);
    bt_cu_act_t act;
    act.xw = (uint32_t *)da;
    act.dx = (float *)(da + groups * 8 * sizeof(uint32_t));
    act.sx = (int32_t *)(da + groups * (8 * sizeof(uint32_t) + sizeof(float)));
    memcpy(hx, x, xb);
    BT_CUDA_CHECK(cudaMemcpyAsync(dx, hx, xb, cudaMemcpyHostToDevice, cu.stream));
    bt_cu_matmul(dy, dw, w->type, w->n_in, w->n_out, w->row_bytes, dx, n_tok, act, cu.stream);
    BT_CUDA_CHECK(cudaMemcpyAsync(hy, dy, yb, cudaMemcpyDeviceToHost, cu.stream));
    BT_CUDA_CHECK(cudaStreamSynchronize(cu.stream));
    memcpy(out_host, hy, yb);
    pthread_mutex_unlock(&call_lock);
}

static void cuda_attention(float *out, const float *q, const void *k, const void *v, uint32_t kv_type,
                           int n_tok, int pos0, const bt_attn_t *a, const bt_scratch_t *s)
{
    (void)s;
    need_device();
    pthread_mutex_lock(&call_lock);
    const size_t el = kv_type == BT_TYPE_F16 ? 2 : 4;
    const int n_pos = pos0 + n_tok; /* the keys any row of the call sees */
    const int kv_dim = a->v_stride > 0 ? a->v_stride : a->n_head_kv * a->head_dim;
    const size_t k_rows = (size_t)a->n_head_kv * a->head_dim;
    const size_t qb = (size_t)n_tok * a->n_head * a->head_dim * sizeof(float);
    float *hq = (float *)buf_need(&cu.h_x, qb, true);
    float *ho = (float *)buf_need(&cu.h_y, qb, true);
    float *dq = (float *)buf_need(&cu.d_x, qb, false);
    float *dout = (float *)buf_need(&cu.d_y, qb, false);
    uint8_t *dk = (uint8_t *)buf_need(&cu.d_k, k_rows * n_pos * el, false);
    uint8_t *dv = (uint8_t *)buf_need(&cu.d_v, (size_t)n_pos * kv_dim * el, false);
    memcpy(hq, q, qb);
    BT_CUDA_CHECK(cudaMemcpyAsync(dq, hq, qb, cudaMemcpyHostToDevice, cu.stream));
    /* the cache rows the call reads, packed: keys k_stride -> n_pos apart */
    BT_CUDA_CHECK(cudaMemcpy2DAsync(dk, n_pos * el, k, (size_t)a->k_stride * el, n_pos * el, k_rows,
                                    cudaMemcpyHostToDevice, cu.stream));
    BT_CUDA_CHECK(cudaMemcpyAsync(dv, v, (size_t)n_pos * kv_dim * el, cudaMemcpyHostToDevice,
                                  cu.stream));
    bt_cu_attn_t da;
    da.n_head = a->n_head;
    da.n_head_kv = a->n_head_kv;
    da.head_dim = a->head_dim;
    da.k_stride = n_pos;
    da.window = a->window;
    da.kv_dim = kv_dim;
    da.scale = a->scale;
    da.sinks = NULL;
    if (a->sinks != NULL) {
        float *ds = (float *)buf_need(&cu.d_sinks, (size_t)a->n_head * sizeof(float), false);
        BT_CUDA_CHECK(cudaMemcpyAsync(ds, a->sinks, (size_t)a->n_head * sizeof(float),
                                      cudaMemcpyHostToDevice, cu.stream));
        da.sinks = ds;
    }
    bt_cu_attention(dout, dq, dk, dv, kv_type == BT_TYPE_F16, n_tok, pos0, &da, cu.stream);
    BT_CUDA_CHECK(cudaMemcpyAsync(ho, dout, qb, cudaMemcpyDeviceToHost, cu.stream));
    BT_CUDA_CHECK(cudaStreamSynchronize(cu.stream));
    memcpy(out, ho, qb);
    pthread_mutex_unlock(&call_lock);
}

extern "C" const bt_ops_t bt_ops_cuda = {
    "cuda",
    cuda_matmul,
    NULL,
    cuda_attention,
};

static uint64_t cuda_mem_free(void)
{
    size_t free_b, total_b;
    bt_cuda_mem_info(&free_b, &total_b);
    return free_b;
}

extern "C" const bt_device_api_t bt_cuda_device_api = {
    bt_cuda_device_count, bt_cuda_open,    bt_cuda_device_name, bt_cuda_set_fatal,
    bt_cuda_measure,      cuda_mem_free,   &bt_ops_cuda,
};
