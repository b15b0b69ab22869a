/*
 * cuda.h: the CUDA kernel set behind the ops table (bt_ops_cuda), and the
 * few calls a program needs to choose and open a device.
 *
 * Built only with configure --with-cuda (the .cu files go into the static
 * libbaton_cuda.a that the programs link). The arithmetic is cu_math.h's,
 * so results are bitwise those of the cuda-host table. This is part 1 of
 * the backend: matmul (every weight type, weights uploaded to the device
 * once, on first use, in their GGUF block layout) and attention run on the
 * device; the activations and the KV cache live on the host and cross to
 * the device around each call (the element-wise kernels stay on the CPU).
 *
 * Errors: every CUDA runtime error becomes one message naming the call,
 * the device and the runtime's own words, passed to the handler set with
 * bt_cuda_set_fatal (the programs' handler logs it and stops every rank);
 * without one it goes to stderr and the process aborts. Nothing returns
 * half-done.
 */
#ifndef BT_KERNELS_CUDA_H
#define BT_KERNELS_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies); 0 when
 * there are none or no driver, with the runtime's reason in why (n bytes). */
int bt_cuda_device_count(char *why, size_t n);

/* Makes device the current one for the kernels: -1 with the reason in err
 * when it cannot be used. */
int bt_cuda_open(int device, char *err, size_t n);

/* The open device's name ("NVIDIA H200"), "" before bt_cuda_open. */
const char *bt_cuda_device_name(void);

/* The open device's global memory in bytes (free and total), 0 before. */
void bt_cuda_mem_info(size_t *free_bytes, size_t *total_bytes);

/* The open device's read bandwidth (GB/s) and int8 tensor-core peak
 * (TOPS, 2 per multiply-add), measured now (measure.cu); 0 on success. */
int bt_cuda_measure(double *read_gbs, double *int8_tops);

/* Frees the device copies of the weights and the buffers. */
void bt_cuda_close(void);

/* Where fatal CUDA errors go (NULL: stderr and abort()). */
void bt_cuda_set_fatal(void (*fatal)(const char *msg));

#ifdef __cplusplus
}
#endif

#endif /* BT_KERNELS_CUDA_H */
