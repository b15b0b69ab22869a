/*
 * kernels.h (bench): baton-bench --kernels, the speed of the matmul kernels
 * alone, next to what the machine itself can do.
 *
 * In the same run it measures the FMA peak (a loop of independent SIMD
 * FMAs), the int8 dot-product peak (the same with the quantized kernels'
 * 8-bit dot product) and the streaming read bandwidth (a SIMD sum over a
 * buffer far larger than the last-level cache), each on 1 thread and on
 * every -t count; then, for every weight type and named model shape, it
 * times the ops table's matmul at prefill shapes (GEMM: --kernel-tokens x
 * the layer matrices) and at decode shapes (GEMV: 1 token x the same
 * matrices plus the output head), and prints a markdown table of GFLOP/s
 * and GB/s with their ratio to the peaks (GEMM: GFLOP/s / FMA peak, and /
 * int8 peak for the quantized types' 8-bit kernels; GEMV: GB/s / read
 * bandwidth; all at the same thread count).
 *
 * Weights cycle through a pool several times the L3 size, so every call
 * reads its weights from memory, as a layer's weights are in a real
 * forward pass. Each measurement is one warm-up call, then up to -r
 * samples (see kernels.c for how many calls a sample holds); rows give the
 * median and the min-max of the samples.
 */
#ifndef BT_BENCH_KERNELS_H
#define BT_BENCH_KERNELS_H

#include <stdio.h>

#include "common.h"
#include "params.h"

/* Runs the kernel benchmark with p's --kernel-* options, -t and -r and
 * prints the report to out. Returns BT_ERR_ARG (logged) for an unknown
 * type or shape or an option it cannot honour, BT_ERR_NOMEM when a buffer
 * cannot be allocated, BT_OK otherwise. Call it from one process only:
 * it uses every core. */
bt_status_t bt_bench_kernels(const bt_bench_params_t *p, FILE *out);

#endif /* BT_BENCH_KERNELS_H */
