/*
 * kernels.h: the math of a transformer layer, behind one ops table.
 *
 * Kernels know nothing of files, models, MPI or stages. Each op exists as
 * a plain scalar reference (bt_ops_ref) and a fast path (bt_ops_exact:
 * SIMD + OpenMP, the same math). bt_ops_cpu is bt_ops_exact except that
 * the quantized formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4)
 * multiply against activations quantized to 8 bits per 32 elements, as
 * llama.cpp does (within a stated bound of the exact product, cpu_q8.c),
 * and F32/F16/BF16 weights sum each output as one FMA chain over panels of
 * interleaved rows (cpu_fpanel.c), where the CPU has AVX-512 (VNNI for
 * the 8-bit path): faster. Tests compare them; `--kernels` selects one at
 * run time. Callers hold a const bt_ops_t * and never call a
 * backend directly, so a CUDA table can slot in later.
 *
 * Determinism (docs/design.md, invariant 1): every output element is reduced in an
 * order fixed by the element alone -- never by how many tokens are in the
 * batch, which tile computed it, or how many threads ran. Running a prompt
 * as one batch or as micro-batches gives bitwise equal results.
 *
 * Conventions: activations are f32, row-major, one row per token. Kernels
 * write their output first, take inputs as const restrict, allocate
 * nothing, print nothing. Work buffers come from a bt_scratch_t sized with
 * bt_scratch_floats() and allocated once by the caller.
 */
#ifndef BT_KERNELS_H
#define BT_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "types.h"

/* A weight matrix W[n_out][n_in] of any supported type; y = W x. Rows are
 * row_bytes apart (ne0 = n_in is contiguous, as in GGUF). */
typedef struct bt_matrix {
    const void *data;
    uint32_t type;
    int64_t n_in;
    int64_t n_out;
    uint64_t row_bytes;
    const void *packed; /* NULL, or the same weights in bt_ops_cpu's packed layout
                         * (bt_pack_bytes, bt_pack): faster, the same results */
} bt_matrix_t;

/* Per-thread work memory: thread i owns buf[i * per_thread, (i+1) * per_thread). */
typedef struct bt_scratch {
    float *buf;
    size_t per_thread; /* floats */
    int n_threads;
} bt_scratch_t;

/* Rows of W a thread dequantizes at once in the fast matmul. */
#define BT_MATMUL_ROWS 16

/* bt_ops_cpu's attention (cpu.c): keys per block (blocks start at
 * multiples of it from key 0, whatever the batch), and the query rows that
 * a pass over a block scores at once. */
#define BT_ATT_KEY_BLOCK 256
#define BT_ATT_ROWS 8

/* Floats per thread that the ops need for matrices up to max_n_in columns
 * and attention over up to n_ctx positions. */
size_t bt_scratch_floats(int64_t max_n_in, int64_t n_ctx);

/* The shape of one attention call. */
typedef struct bt_attn {
    int n_head, n_head_kv, head_dim;
    int k_stride; /* positions per transposed key row */
    int window;   /* keys a query sees, itself included; 0: all earlier ones */
    float scale;  /* of the scores, usually 1 / sqrt(head_dim) */
    const float *sinks; /* NULL, or [n_head]: head h's softmax denominator also holds
                         * e^sinks[h] (a logit with no value and no scale) */
    int v_stride; /* elements from one position's values to the next; 0: n_head_kv *
                   * head_dim (a tensor rank attends with part of its cache's heads) */
} bt_attn_t;

/* One product of a batch (bt_ops_t.matmul_many): out = W x for n_tok rows. */
typedef struct bt_matmul_job {
    float *out;
    bt_matrix_t w;
    const float *x;
    int n_tok;
} bt_matmul_job_t;

typedef struct bt_ops {
    const char *name;

    /* out[t][r] = sum_k W[r][k] * x[t][k] for t < n_tok, r < n_out.
     * x: [n_tok, n_in], out: [n_tok, n_out]. */
    void (*matmul)(float *restrict out, const bt_matrix_t *w, const float *restrict x, int n_tok,
                   const bt_scratch_t *s);

    /* n_jobs independent products (outputs must not overlap inputs), with
     * the bits matmul gives each, in one parallel region: many small
     * products (a mixture's experts for a few rows; q, k and v of one
     * token) then keep every thread busy where each alone would run on
     * one. NULL: bt_matmul_many calls matmul for each. */
    void (*matmul_many)(const bt_matmul_job_t *jobs, int n_jobs, const bt_scratch_t *s);

    /* Causal attention of n_tok queries at positions pos0.. over the cache
     * positions 0 .. pos0 + n_tok - 1, which must already hold this batch's
     * K, V. q, out: [n_tok, n_head * head_dim]. k is stored transposed, one
     * row per (kv head, dim) over positions: key j of kv head g, dim d is
     * k[(g * head_dim + d) * k_stride + j]; v is [positions, n_head_kv *
     * head_dim] (rows v_stride apart where it is set). k and v elements are kv_type: BT_TYPE_F32 or BT_TYPE_F16
     * (converted exactly as they are read). Query head h reads kv head
     * h / (n_head / n_head_kv). The query at position p sees keys j <= p,
     * and with a window w > 0 only p - j < w. Scores scale * q.k, softmax
     * in f32. */
    void (*attention)(float *restrict out, const float *restrict q, const void *k, const void *v,
                      uint32_t kv_type, int n_tok, int pos0, const bt_attn_t *a,
                      const bt_scratch_t *s);
} bt_ops_t;

/* ops->matmul_many, or ops->matmul for each job where the table has none. */
void bt_matmul_many(const bt_ops_t *ops, const bt_matmul_job_t *jobs, int n_jobs,
                    const bt_scratch_t *s);

extern const bt_ops_t bt_ops_ref;
extern const bt_ops_t bt_ops_exact;
extern const bt_ops_t bt_ops_cpu;
/* The CUDA set's arithmetic on the CPU (cuda_host.c, cuda/cu_math.h): the
 * bits src/kernels/cuda/ must give on a GPU. A reference, not fast. */
extern const bt_ops_t bt_ops_cuda_host;

/* Whether the CUDA set (and cuda-host) multiplies weights of this type. */
bool bt_cuda_host_supports(uint32_t type);

/* ---- devices (device.c) ----
 *
 * "--kernels cuda" (bt_ops_cuda, in --with-cuda builds) and "--kernels
 * auto" (bt_ops_auto: cuda where the rank has a device, else cpu) are
 * resolved per rank by bt_kernels_resolve before any kernel runs. */
extern const bt_ops_t bt_ops_auto; /* a request, never called */
extern const bt_ops_t bt_ops_cuda; /* src/kernels/cuda/: only a --with-cuda build
                                    * (config.h's BT_HAVE_CUDA) defines it */

/* What a device backend offers: the devices this process sees (0 with
 * the reason in why when none), opening one (0, or -1 with the reason),
 * its name, where fatal errors go, its measured limits, and its ops table. */
typedef struct bt_device_api {
    int (*count)(char *why, size_t n);
    int (*open)(int device, char *why, size_t n);
    const char *(*name)(void);
    void (*set_fatal)(void (*fatal)(const char *msg));
    int (*measure)(double *read_gbs, double *int8_tops); /* the open device's limits */
    uint64_t (*mem_free)(void); /* the open device's free memory, bytes */
    const bt_ops_t *ops;
} bt_device_api_t;

/* The CUDA runtime's API in a --with-cuda build, else NULL. */
extern const bt_device_api_t *const bt_device_default;

/* The device of a rank that is local_rank-th on its node: gpu when gpu
 * >= 0, else local_rank modulo n_devices; -1 with the reason in why when
 * there is none or gpu is not one of them. */
int bt_device_pick(int local_rank, int n_devices, int gpu, char *why, size_t n);

/* The table a rank runs for the request want: want itself unless it is
 * "cuda" or bt_ops_auto; for those, opens the device bt_device_pick
 * chooses (*device, else -1) and returns api->ops, or for auto bt_ops_cpu
 * when there is no device. NULL, with one message in why, when cuda was
 * asked for and cannot be had. */
const bt_ops_t *bt_kernels_resolve(const bt_ops_t *want, const bt_device_api_t *api,
                                   int local_rank, int gpu, int *device, char *why, size_t n);

/* Whether the open device (number device) holds need bytes: true, or false
 * with one message giving both sizes in why. On a GPU that shares the
 * host's memory (DGX Spark) the runtime's free memory is that one pool. */
bool bt_device_fits(const bt_device_api_t *api, int device, uint64_t need, char *why, size_t n);

/* Bytes of W in bt_ops_cpu's packed layout (16 rows interleaved, for its
 * 8-bit activation path), 0 where there is none; bt_pack writes it to dst
 * (64-byte aligned) for setting w->packed. Other tables ignore packed. */
size_t bt_pack_bytes(const bt_matrix_t *w);
void bt_pack(const bt_matrix_t *w, void *dst);

/* Whether bt_ops_cpu multiplies W of this type and width as bt_ops_exact
 * does (same path, same bits); false where it has its own (8-bit
 * activations for the quantized formats, FMA chains over row panels for
 * F32/F16/BF16, on CPUs with the instructions for them). */
bool bt_ops_cpu_is_exact(uint32_t type, int64_t n_in);

/* The table called name ("cpu", "exact", "ref", "cuda-host", "auto", and
 * "cuda" in a --with-cuda build), or NULL. */
const bt_ops_t *bt_ops_by_name(const char *name);

/* ---- instruction sets ----
 *
 * bt_ops_cpu and bt_ops_exact are built three times (isa.h), best first:
 * on x86-64 for AVX-512 with VNNI, for AVX2 with FMA and F16C, and for the
 * baseline (SSE2); on aarch64 for Armv8.6-A (i8mm), Armv8.2-A with dotprod,
 * and the Armv8-A baseline; elsewhere once, portable (BT_ISA_BASE alone:
 * BT_ISA_TOP and BT_ISA_MID are then not sets, bt_isa_missing says so).
 * Each call runs the build of the active set: the best one this CPU and OS
 * run, unless the environment variable BATON_ISA names another
 * (bt_isa_from_env) or bt_isa_select chose one. bt_ops_cpu gives the same
 * bits in the top and middle sets of both architectures for packed weights
 * (bt_pack) of the types all have a path for; otherwise results may differ
 * between sets in rounding. bt_ops_ref is the same scalar code everywhere. */
#if defined(__x86_64__) || defined(__aarch64__)
typedef enum bt_isa { BT_ISA_TOP, BT_ISA_MID, BT_ISA_BASE, BT_ISA_COUNT } bt_isa_t;
#else
typedef enum bt_isa { BT_ISA_BASE, BT_ISA_COUNT, BT_ISA_TOP = BT_ISA_COUNT, BT_ISA_MID } bt_isa_t;
#endif

/* "avx512", "avx2", "sse2"; "i8mm", "dotprod", "armv8"; "generic" */
const char *bt_isa_name(bt_isa_t isa);

/* The set called name; false when there is none. */
bool bt_isa_parse(const char *name, bt_isa_t *isa);

/* NULL when this CPU and OS run isa, else the name of a feature it lacks
 * (a static string). */
const char *bt_isa_missing(bt_isa_t isa);

/* The set in use (the best available until one is chosen). */
bt_isa_t bt_isa_active(void);

/* Use isa from now on; false (and no change) when bt_isa_missing(isa).
 * Not while kernels run on other threads. */
bool bt_isa_select(bt_isa_t isa);

/* Whether the quantized kernels prefetch their weights ahead of the
 * hardware prefetcher in one-token products (more tokens always do):
 * BATON_PREFETCH=1 or 0 if set (bt_isa_from_env refuses anything else),
 * else true except on AMD family 19h with AVX-512 (Zen 4),
 * whose own prefetchers read a one-token product faster without
 * (docs/kernels.md). Never changes a result. */
bool bt_weight_prefetch(void);

/* Whether those one-token prefetches of the quantized kernels go to L2
 * only (an Intel CPU: measured on a Sapphire Rapids-class Xeon, where L1
 * prefetches held the 4- to 6-bit formats 5-8 points lower) rather than to
 * L1. Never changes a result. Both choices are made once and cached: the
 * kernels ask on every product, and a CPUID there costs a VM exit each
 * time (2.6x on MoE decode on a Xeon VM when it was asked per product). */
bool bt_weight_prefetch_l2(void);

/* How far ahead of its loads, in bytes, a quantized kernel prefetches its
 * weights (when it does): 2 KiB on an Intel CPU (where they go to L2 for
 * one token), 8 KiB elsewhere, each measured (dispatch.c). Never changes a
 * result. */
size_t bt_weight_prefetch_bytes(void);

/* Applies BATON_ISA: unset, empty or "auto" selects the best set; a name
 * selects that set. False, with the reason in why (n bytes), when the value
 * names no set or one this CPU cannot run, or BATON_PREFETCH is set to
 * neither 0 nor 1 (bt_weight_prefetch); the active set is unchanged. */
bool bt_isa_from_env(char *why, size_t n);

/* For measuring the machine (baton-bench), with the active set's vectors:
 * iters rounds of independent FMA chains (*flops_per_iter: the FLOPs of a
 * round; the result keeps the loop from being optimized away), and the
 * sum of p[0 .. n) (a streaming read). */
float bt_peak_fma(int64_t iters, double *flops_per_iter);
/* The same with the 8-bit dot product of the quantized kernels
 * (*ops_per_iter: 2 per multiply-add; 0 where the set has none). */
float bt_peak_dot(int64_t iters, double *ops_per_iter);
float bt_peak_sum(const float *p, size_t n);

/* The fastest exact dequantizer of a type for the active set (bitwise
 * equal to bt_type_info(type)->to_float), NULL when the type has none. */
bt_to_float_fn bt_type_to_float_fast(uint32_t type);

/* ---- element-wise and per-row kernels (one implementation: each output
 * element depends on its own row only, in a fixed order) ---- */

/* out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, for n_rows rows of n;
 * out may be x. */
void bt_rmsnorm_f32(float *out, const float *x, const float *restrict w, int n_rows, int n,
                    float eps);

/* Rotary embedding: which pairs, how fast they turn. */
typedef struct bt_rope {
    int n_rot;            /* rotated dims at the start of each head (even) */
    float base;           /* pair i turns at base^(-2i/n_rot) radians per position */
    float freq_scale;     /* times this (linear scaling; 1: none) */
    const float *factors; /* NULL, or [n_rot / 2]: pair i's angle divided by factors[i] */
    bool neox;            /* pairs (x[i], x[i + n_rot/2]) instead of (x[2i], x[2i+1]) */
    /* YaRN (yarn true): pair i's angle blends the scaled and the unscaled
     * one, by ramp_i = 1 - clamp((i - yarn_low) / max(0.001, yarn_high -
     * yarn_low), 0, 1) for the unscaled; cos and sin are multiplied by
     * mscale */
    bool yarn;
    float yarn_low, yarn_high, mscale;
} bt_rope_t;

/* Rotates, in place, the pairs of the first n_rot dims of each head by
 * angle pos * freq_scale * base^(-2i/n_rot) / factors[i].
 * x: [n_tok, n_head * head_dim], row t at position pos0 + t. */
void bt_rope_f32(float *restrict x, int n_tok, int pos0, int n_head, int head_dim,
                 const bt_rope_t *r);

/* gate[i] = silu(gate[i]) * up[i] for n elements. */
void bt_swiglu_f32(float *restrict gate, const float *restrict up, int64_t n);

/* gpt-oss's gate: g = min(gate[i], 7), u = clamp(up[i], -7, 7),
 * gate[i] = g sigmoid(1.702 g) (u + 1) for n elements. */
void bt_swiglu_oai_f32(float *restrict gate, const float *restrict up, int64_t n);

/* gate[i] = gelu(gate[i]) * up[i] for n elements, with the tanh form
 * gelu(z) = z/2 (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))). */
void bt_geglu_f32(float *restrict gate, const float *restrict up, int64_t n);

/* x[i] += y[i] for n elements. */
void bt_add_f32(float *restrict x, const float *restrict y, int64_t n);

/* x[t][i] += b[i] for n_rows rows of n. */
void bt_add_rows_f32(float *restrict x, const float *restrict b, int n_rows, int64_t n);

/* y[i] += a * x[i] for n elements (a product, then a sum: no fma). */
void bt_axpy_f32(float *restrict y, float a, const float *restrict x, int64_t n);

/* The k largest of logits[0 .. n) (1 <= k <= n): idx[0 .. k) their indices,
 * largest first, a lower index first among equal values (NaN never chosen
 * before a number); w[0 .. k) = softmax over the chosen logits alone
 * (which equals the full softmax's probabilities renormalized over them). */
void bt_topk_softmax(const float *restrict logits, int n, int k, int *restrict idx,
                     float *restrict w);

/* How a deepseek2 router turns its logits into choices (bt_route). */
#define BT_ROUTE_GROUPS_MAX 64
typedef struct bt_route {
    bool sigmoid;       /* scores s = sigmoid(logits), else softmax over all experts */
    const float *bias;  /* NULL, or [n]: added to s to choose, never to weigh */
    int n_group, n_group_used; /* n_group > 1: only the n_group_used groups (consecutive
                                * ids, n / n_group each) with the largest sums of their
                                * two best choosing scores compete */
    bool norm;          /* weights divided by their sum (at least 2^-14) */
    float scale;        /* then multiplied by this (1: none) */
} bt_route_t;

/* The k experts of n whose choosing scores s + bias are largest (within
 * the kept groups), best first, a lower index first among equal scores
 * (NaN never chosen before a number): idx[0 .. k); w[0 .. k) their
 * weights s[idx], normalized and scaled as r says. tmp: 2 n floats. */
void bt_route(const float *restrict logits, int n, int k, const bt_route_t *r,
              int *restrict idx, float *restrict w, float *restrict tmp);

/* x[i] *= c for n elements. */
void bt_scale_f32(float *restrict x, float c, int64_t n);

/* x[i] = c tanh(x[i] / c) for n elements (c > 0). */
void bt_softcap_f32(float *restrict x, float c, int64_t n);

#endif /* BT_KERNELS_H */
