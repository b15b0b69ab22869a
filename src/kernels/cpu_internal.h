/*
 * cpu_internal.h: what the CPU kernel files share; not for callers (they
 * use the ops tables in kernels.h).
 */
#ifndef BT_CPU_INTERNAL_H
#define BT_CPU_INTERNAL_H

#include <stdbool.h>

#include "isa.h" /* first: the names of this instruction set's build */

/* Work (multiply-adds) below which a kernel runs on the calling thread:
 * waking a team costs tens of microseconds on a busy or virtualized
 * machine, more than a small matrix-vector product takes. Which thread
 * computes an element never changes its value, so this is only speed. */
#define BT_PARALLEL_MIN_WORK (1 << 18)

/* Bytes from which a call that reads them once, at memory speed, takes
 * the team whatever its multiply-adds: 128 KiB take a core about 8 us
 * (16 GB/s), a team that a decode step keeps spinning about 1 us to start
 * (a mixture's F32 router, 128 x 512, is 256 KiB and 65536 multiply-adds). */
#define BT_PARALLEL_MIN_BYTES (1 << 17)

/* The team for a call of `work` multiply-adds that streams `bytes` from
 * memory (0 where its caller counts no stream, or cannot share one). */
static inline int bt_team_size(const bt_scratch_t *s, double work, double bytes)
{
    return work >= BT_PARALLEL_MIN_WORK || bytes >= BT_PARALLEL_MIN_BYTES ? s->n_threads : 1;
}

/* cpu_q8.c and cpu_fpanel.c define these in the avx512 and avx2 builds
 * only (BT_SIMD16, simd16.h); cpu.c calls them there alone. */

/* cpu_q8.c: whether bt_cpu_matmul_q8 takes W (the avx512 build: any
 * quantized format with rows of whole 64s, its direct path; both builds:
 * the formats with a packed layout, rows of whole 32s), and the product
 * with activations quantized to 8 bits per 32-element block. */
bool bt_cpu_q8_supports(uint32_t type, int64_t n_in);
void bt_cpu_matmul_q8(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                      int n_tok, const bt_scratch_t *s);
/* Products that bt_cpu_q8_supports, each with bt_cpu_matmul_q8's bits, in
 * one parallel region: the threads share out all products' row panels,
 * weighted by the tokens each product has. */
void bt_cpu_matmul_q8_many(const bt_matmul_job_t *jobs, int n_jobs, const bt_scratch_t *s);

/* The bytes of W (n_in x n_out of type) in the packed layout that
 * bt_cpu_matmul_q8 reads when w->packed is set, 0 for types without one;
 * and the packing of W into dst (64-byte aligned). Packed or not, the
 * product has the same bits. */
size_t bt_cpu_q8_packed_bytes(uint32_t type, int64_t n_in, int64_t n_out);
void bt_cpu_q8_pack(uint8_t *restrict dst, const bt_matrix_t *w);

/* cpu_fpanel.c: F32/F16/BF16 weights in panels of 16 interleaved rows
 * (the avx512 and avx2 builds): whether it takes the type, the packed bytes, the
 * packing, and the product (packed or not: the same bits). */
bool bt_cpu_fpanel_supports(uint32_t type);
size_t bt_cpu_fpanel_bytes(uint32_t type, int64_t n_in, int64_t n_out);
void bt_cpu_fpanel_pack(uint8_t *restrict dst, const bt_matrix_t *w);
void bt_cpu_matmul_fpanel(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                          int n_tok, const bt_scratch_t *s);
/* Whether a one-token product of W reads F16/BF16 panels in groups; such
 * products, each with bt_cpu_matmul_fpanel's bits, in one parallel region
 * where the threads share out all of their panels by bytes. */
bool bt_cpu_fpanel_grouped(const bt_matrix_t *w, int n_tok);
void bt_cpu_matmul_fpanel_many(const bt_matmul_job_t *jobs, int n_jobs, const bt_scratch_t *s);

#endif /* BT_CPU_INTERNAL_H */
