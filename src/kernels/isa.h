/*
 * isa.h: the kernels built once per instruction set.
 *
 * cpu.c, cpu_q8.c, cpu_fpanel.c and dequant_simd.c are compiled three
 * times (Makefile.am, configure.ac), each time with BT_ISA_TAG naming the
 * set, best first:
 *   x86-64:  avx512   x86-64-v4 (AVX-512 F/BW/CD/DQ/VL) + AVX-512 VNNI
 *            avx2     x86-64-v3 (AVX2, FMA, F16C, BMI2)
 *            sse2     the x86-64 baseline (SSE2)
 *   aarch64: i8mm     Armv8.6-A (dotprod, i8mm) + fp16
 *            dotprod  Armv8.2-A + dotprod + fp16
 *            armv8    the Armv8-A baseline (NEON)
 * and once, as generic, on any other architecture. Every external name of
 * those files gets the tag as a suffix here, so the copies link side by
 * side; each exports one bt_isa_kernels_t, and dispatch.c picks one at run
 * time from what the CPU reports (CPUID and XCR0 on x86, the kernel's
 * hardware capabilities on aarch64) or BATON_ISA.
 *
 * Include this before any other header of the kernels in those files.
 */
#ifndef BT_ISA_H
#define BT_ISA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BT_ISA_CAT_(a, b) a##_##b
#define BT_ISA_CAT(a, b) BT_ISA_CAT_(a, b)
#define BT_ISA(name) BT_ISA_CAT(name, BT_ISA_TAG)

#ifdef BT_ISA_TAG
#define bt_cpu_q8_supports BT_ISA(bt_cpu_q8_supports)
#define bt_cpu_matmul_q8 BT_ISA(bt_cpu_matmul_q8)
#define bt_cpu_matmul_q8_many BT_ISA(bt_cpu_matmul_q8_many)
#define bt_cpu_q8_packed_bytes BT_ISA(bt_cpu_q8_packed_bytes)
#define bt_cpu_q8_pack BT_ISA(bt_cpu_q8_pack)
#define bt_cpu_fpanel_supports BT_ISA(bt_cpu_fpanel_supports)
#define bt_cpu_fpanel_bytes BT_ISA(bt_cpu_fpanel_bytes)
#define bt_cpu_fpanel_pack BT_ISA(bt_cpu_fpanel_pack)
#define bt_cpu_matmul_fpanel BT_ISA(bt_cpu_matmul_fpanel)
#define bt_cpu_fpanel_grouped BT_ISA(bt_cpu_fpanel_grouped)
#define bt_cpu_matmul_fpanel_many BT_ISA(bt_cpu_matmul_fpanel_many)
#define bt_dequant_simd_fn BT_ISA(bt_dequant_simd_fn)
#endif

#include "kernels.h"

/* What one instruction set's build of the CPU kernels offers. */
typedef struct bt_isa_kernels {
    const char *name;  /* bt_isa_name */
    bt_ops_t cpu;      /* bt_ops_cpu's and bt_ops_exact's ops, for this set */
    bt_ops_t exact;
    /* as bt_ops_cpu_is_exact, bt_pack_bytes, bt_pack (kernels.h) */
    bool (*cpu_is_exact)(uint32_t type, int64_t n_in);
    size_t (*pack_bytes)(const bt_matrix_t *w);
    void (*pack)(const bt_matrix_t *w, void *dst);
    /* the SIMD dequantizer of a type (bitwise equal to its to_float), or
     * NULL where this set has none */
    bt_to_float_fn (*to_float_fast)(uint32_t type);
    /* as bt_peak_fma, bt_peak_dot, bt_peak_sum */
    float (*peak_fma)(int64_t iters, double *flops_per_iter);
    float (*peak_dot)(int64_t iters, double *ops_per_iter);
    float (*peak_sum)(const float *p, size_t n);
} bt_isa_kernels_t;

#if defined(__x86_64__)
extern const bt_isa_kernels_t bt_isa_kernels_avx512;
extern const bt_isa_kernels_t bt_isa_kernels_avx2;
extern const bt_isa_kernels_t bt_isa_kernels_sse2;
#elif defined(__aarch64__)
extern const bt_isa_kernels_t bt_isa_kernels_i8mm;
extern const bt_isa_kernels_t bt_isa_kernels_dotprod;
extern const bt_isa_kernels_t bt_isa_kernels_armv8;
#else
extern const bt_isa_kernels_t bt_isa_kernels_generic;
#endif

/* dequant_simd.c: this set's dequantizer of type, NULL where none. */
bt_to_float_fn bt_dequant_simd_fn(uint32_t type);

#endif /* BT_ISA_H */
