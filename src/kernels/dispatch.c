/*
 * dispatch.c: which instruction set's build of the CPU kernels runs.
 *
 * The builds (isa.h) are linked in. On x86-64 CPUID says which this CPU
 * has and XGETBV whether the OS saves the registers they use; on aarch64
 * the kernel's hardware capabilities (getauxval) say it, never the
 * compiler's guess. The first call of any kernel, or bt_isa_from_env /
 * bt_isa_select, fixes the active set; bt_ops_cpu and bt_ops_exact then
 * forward each call to it (one indirect call per matmul or attention,
 * nothing next to the work).
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
static const bt_isa_kernels_t *const builds[BT_ISA_COUNT] = {
    [BT_ISA_TOP] = &bt_isa_kernels_avx512,
    [BT_ISA_MID] = &bt_isa_kernels_avx2,
    [BT_ISA_BASE] = &bt_isa_kernels_sse2,
};
#elif defined(__aarch64__)
#include <sys/auxv.h>
static const bt_isa_kernels_t *const builds[BT_ISA_COUNT] = {
    [BT_ISA_TOP] = &bt_isa_kernels_i8mm,
    [BT_ISA_MID] = &bt_isa_kernels_dotprod,
    [BT_ISA_BASE] = &bt_isa_kernels_armv8,
};
#else
static const bt_isa_kernels_t *const builds[BT_ISA_COUNT] = {
    [BT_ISA_BASE] = &bt_isa_kernels_generic,
};
#endif

const char *bt_isa_name(bt_isa_t isa)
{
    return (unsigned)isa < BT_ISA_COUNT ? builds[isa]->name : "?";
}

bool bt_isa_parse(const char *name, bt_isa_t *isa)
{
    for (int i = 0; i < BT_ISA_COUNT; i++)
        if (strcmp(name, builds[i]->name) == 0) {
            *isa = (bt_isa_t)i;
            return true;
        }
    return false;
}

/* ---- what the CPU has ----
 *
 * Each architecture with three builds lists the features its middle
 * build's -march needs (mid) and what its top build's adds (top), says
 * whether the CPU has one (has), and what else the OS must enable for
 * either (os_missing); bt_isa_missing is the same for both. */

#if defined(__x86_64__)
typedef struct {
    const char *name;
    unsigned leaf, reg, bit; /* reg: 0 ebx, 1 ecx, 2 edx */
} feature_t;

/* x86-64-v3 (the avx2 build's -march) and what x86-64-v4 and VNNI add
 * (the avx512 build's), as CPUID reports them. */
static const feature_t mid[] = {
    {"avx", 1, 1, 28},   {"fma", 1, 1, 12},    {"f16c", 1, 1, 29},
    {"movbe", 1, 1, 22}, {"avx2", 7, 0, 5},    {"bmi1", 7, 0, 3},
    {"bmi2", 7, 0, 8},   {"lzcnt", 0x80000001u, 1, 5},
};
static const feature_t top[] = {
    {"avx512f", 7, 0, 16},  {"avx512dq", 7, 0, 17}, {"avx512cd", 7, 0, 28},
    {"avx512bw", 7, 0, 30}, {"avx512vl", 7, 0, 31}, {"avx512vnni", 7, 1, 11},
};

static bool has(const feature_t *f)
{
    unsigned r[4] = {0};
    if (f->leaf == 7) {
        if (!__get_cpuid_count(7, 0, &r[3], &r[0], &r[1], &r[2]))
            return false;
    } else if (!__get_cpuid(f->leaf, &r[3], &r[0], &r[1], &r[2])) {
        return false;
    }
    return r[f->reg] >> f->bit & 1;
}

/* The register state the OS saves (XCR0) must include the AVX registers
 * (mid), and the AVX-512 ones too (top); XCR0 is 0 without OSXSAVE. */
static const char *os_missing(bool for_top)
{
    unsigned a, b, c, d;
    uint64_t xcr0 = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 1)) {
        uint32_t lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = (uint64_t)hi << 32 | lo;
    }
    if (!for_top)
        return (xcr0 & 0x6) != 0x6 ? "OS support for the AVX registers (XCR0)" : NULL;
    return (xcr0 & 0xe0) != 0xe0 ? "OS support for the AVX-512 registers (XCR0)" : NULL;
}
#elif defined(__aarch64__)
/* The Linux hardware capabilities (asm/hwcap.h) the dotprod build's
 * -march needs (fp16 arithmetic, its vector form, dotprod), and what the
 * i8mm build's adds: the Armv8.6-A integer matrix multiplies. (Armv8.6-A
 * also brings BF16, which none of these kernels use.) */
typedef struct {
    const char *name;
    int aux;          /* AT_HWCAP or AT_HWCAP2 */
    unsigned long bit;
} feature_t;
static const feature_t mid[] = {
    {"fphp", AT_HWCAP, 1ul << 9}, {"asimdhp", AT_HWCAP, 1ul << 10}, {"asimddp", AT_HWCAP, 1ul << 20}};
static const feature_t top[] = {{"i8mm", AT_HWCAP2, 1ul << 13}};

static bool has(const feature_t *f) { return getauxval((unsigned long)f->aux) & f->bit; }

/* The kernel reports only what it enables. */
static const char *os_missing(bool for_top) { return (void)for_top, NULL; }
#endif

#if defined(__x86_64__) || defined(__aarch64__)
static const char *first_missing(const feature_t *f, size_t n, bool for_top)
{
    for (size_t i = 0; i < n; i++)
        if (!has(&f[i]))
            return f[i].name;
    return os_missing(for_top);
}

const char *bt_isa_missing(bt_isa_t isa)
{
    if (isa == BT_ISA_BASE)
        return NULL;
    if ((unsigned)isa >= BT_ISA_COUNT)
        return "a build of that name";
    const char *m = first_missing(mid, sizeof mid / sizeof mid[0], false);
    if (m != NULL || isa == BT_ISA_MID)
        return m;
    return first_missing(top, sizeof top / sizeof top[0], true);
}
#else
const char *bt_isa_missing(bt_isa_t isa)
{
    return isa == BT_ISA_BASE ? NULL : "a vector build (this architecture has only 'generic')";
}
#endif

/* ---- the active set ---- */

static const bt_isa_kernels_t *active;
static pthread_once_t chosen = PTHREAD_ONCE_INIT;

static bt_isa_t best(void)
{
    int i = 0;
    while (bt_isa_missing((bt_isa_t)i) != NULL)
        i++;
    return (bt_isa_t)i;
}

/* BATON_ISA's set, or -1 with the reason in why. */
static int env_choice(char *why, size_t n)
{
    const char *v = getenv("BATON_ISA");
    if (v == NULL || v[0] == '\0' || strcmp(v, "auto") == 0)
        return best();
    bt_isa_t isa;
    if (!bt_isa_parse(v, &isa)) {
        char names[64] = "";
        for (int i = 0; i < BT_ISA_COUNT; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), ", %s", builds[i]->name);
        snprintf(why, n, "BATON_ISA: '%s' is not one of auto%s", v, names);
        return -1;
    }
    const char *m = bt_isa_missing(isa);
    if (m != NULL) {
        snprintf(why, n, "BATON_ISA: '%s' cannot run on this CPU (it lacks %s)", v, m);
        return -1;
    }
    return isa;
}

/* First use without a choice: BATON_ISA where it is valid (programs check
 * it first with bt_isa_from_env and stop if not), else the best. */
static void choose_default(void)
{
    if (active == NULL) {
        char why[160];
        const int isa = env_choice(why, sizeof why);
        active = builds[isa >= 0 ? isa : (int)best()];
    }
}

static const bt_isa_kernels_t *kernels(void)
{
    pthread_once(&chosen, choose_default);
    return active;
}

bt_isa_t bt_isa_active(void)
{
    const bt_isa_kernels_t *k = kernels();
    int i = 0;
    while (builds[i] != k)
        i++;
    return (bt_isa_t)i;
}

bool bt_isa_select(bt_isa_t isa)
{
    pthread_once(&chosen, choose_default);
    if ((unsigned)isa >= BT_ISA_COUNT || bt_isa_missing(isa) != NULL)
        return false;
    active = builds[isa];
    return true;
}

/* ---- software prefetch of packed weights (bt_weight_prefetch) ---- */

static bool weight_prefetch, weight_prefetch_l2;
static pthread_once_t prefetch_chosen = PTHREAD_ONCE_INIT;

/* CPUID leaf 0's EBX: the vendor string's first four letters ("Auth"enticAMD,
 * "Genu"ineIntel), 0 where there is none. Asked once: in a VM every CPUID
 * leaves the guest, which costs microseconds. */
static unsigned cpu_vendor(void)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    return __get_cpuid(0, &a, &b, &c, &d) ? b : 0;
#else
    return 0;
#endif
}

#define VENDOR_AMD 0x68747541u   /* "Auth" */
#define VENDOR_INTEL 0x756e6547u /* "Genu" */

/* A CPU whose hardware prefetchers alone stream a one-token product
 * faster than with the kernels' prefetches: measured on a Zen 4 (Q8_0
 * 74-80% of one core's read bandwidth with them, 92-98% without; no
 * format lost), where a Zen 5 needed them (4-bit formats near 60%). */
static bool own_prefetch_enough(unsigned vendor)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (vendor != VENDOR_AMD || !__get_cpuid(1, &a, &b, &c, &d))
        return false;
    const unsigned base = a >> 8 & 0xf, family = base == 0xf ? base + (a >> 20 & 0xff) : base;
    return family == 0x19 && bt_isa_missing(BT_ISA_TOP) == NULL; /* Zen 3 has no AVX-512 */
#else
    (void)vendor;
    return false;
#endif
}

/* BATON_PREFETCH: 1 or 0; -1 unset or empty (the CPU decides); -2 neither. */
static int prefetch_env(void)
{
    const char *v = getenv("BATON_PREFETCH");
    if (v == NULL || v[0] == '\0')
        return -1;
    return strcmp(v, "1") == 0 ? 1 : strcmp(v, "0") == 0 ? 0 : -2;
}

static void choose_prefetch(void)
{
    const int v = prefetch_env(); /* -2: bt_isa_from_env stopped the programs */
    const unsigned vendor = cpu_vendor();
    weight_prefetch = v >= 0 ? v == 1 : !own_prefetch_enough(vendor);
    weight_prefetch_l2 = vendor == VENDOR_INTEL;
}

bool bt_weight_prefetch(void)
{
    pthread_once(&prefetch_chosen, choose_prefetch);
    return weight_prefetch;
}

bool bt_weight_prefetch_l2(void)
{
    pthread_once(&prefetch_chosen, choose_prefetch);
    return weight_prefetch_l2;
}

/* 8 KiB: on a Zen 5 VM 6 and 8 KiB ahead took one-token products of the
 * 4-bit formats from about 60% of a core's read bandwidth to all of it, 12
 * KiB gained less. 2 KiB on Intel (the CPUs that prefetch into L2): on a
 * Xeon VM (model 167) the large llama-1b one-token products read at 82-88%
 * (Q4_0) and 76-83% (Q4_K) of it with 8 KiB, at 90-99% and 91-95% with 2
 * KiB (3 KiB about the same, 4 KiB between, 1 and 1.5 KiB no better than
 * 8), and 8-token products went from 7.8-10.1 GB/s to 8.5-11.7
 * (docs/benchmarking.md, 2026-12-07). */
size_t bt_weight_prefetch_bytes(void) { return bt_weight_prefetch_l2() ? 2048 : 8192; }

bool bt_isa_from_env(char *why, size_t n)
{
    const int isa = env_choice(why, n);
    if (isa >= 0 && prefetch_env() == -2) {
        snprintf(why, n, "BATON_PREFETCH: '%s' is not 0 or 1", getenv("BATON_PREFETCH"));
        return false;
    }
    return isa >= 0 && bt_isa_select((bt_isa_t)isa);
}

/* ---- the public tables: the active build's ops ---- */

static void cpu_matmul(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                       int n_tok, const bt_scratch_t *s)
{
    kernels()->cpu.matmul(out, w, x, n_tok, s);
}

static void exact_matmul(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                         int n_tok, const bt_scratch_t *s)
{
    kernels()->exact.matmul(out, w, x, n_tok, s);
}

static void cpu_matmul_many(const bt_matmul_job_t *jobs, int n_jobs, const bt_scratch_t *s)
{
    kernels()->cpu.matmul_many(jobs, n_jobs, s);
}

void bt_matmul_many(const bt_ops_t *ops, const bt_matmul_job_t *jobs, int n_jobs,
                    const bt_scratch_t *s)
{
    if (ops->matmul_many != NULL) {
        ops->matmul_many(jobs, n_jobs, s);
        return;
    }
    for (int i = 0; i < n_jobs; i++)
        ops->matmul(jobs[i].out, &jobs[i].w, jobs[i].x, jobs[i].n_tok, s);
}

static void attention(float *restrict out, const float *restrict q, const void *k, const void *v,
                      uint32_t kv_type, int n_tok, int pos0, const bt_attn_t *a,
                      const bt_scratch_t *s)
{
    kernels()->cpu.attention(out, q, k, v, kv_type, n_tok, pos0, a, s);
}

const bt_ops_t bt_ops_cpu = {.name = "cpu", .matmul = cpu_matmul, .matmul_many = cpu_matmul_many,
                             .attention = attention};
const bt_ops_t bt_ops_exact = {.name = "exact", .matmul = exact_matmul, .attention = attention};

bool bt_ops_cpu_is_exact(uint32_t type, int64_t n_in)
{
    return kernels()->cpu_is_exact(type, n_in);
}

size_t bt_pack_bytes(const bt_matrix_t *w) { return kernels()->pack_bytes(w); }

void bt_pack(const bt_matrix_t *w, void *dst) { kernels()->pack(w, dst); }

bt_to_float_fn bt_type_to_float_fast(uint32_t type)
{
    const bt_to_float_fn fast = kernels()->to_float_fast(type);
    const bt_type_info_t *ti = bt_type_info(type);
    return fast != NULL ? fast : ti != NULL ? ti->to_float : NULL;
}

float bt_peak_fma(int64_t iters, double *flops_per_iter)
{
    return kernels()->peak_fma(iters, flops_per_iter);
}

float bt_peak_dot(int64_t iters, double *ops_per_iter)
{
    return kernels()->peak_dot(iters, ops_per_iter);
}

float bt_peak_sum(const float *p, size_t n) { return kernels()->peak_sum(p, n); }

const bt_ops_t *bt_ops_by_name(const char *name)
{
    static const bt_ops_t *const all[] = {
        &bt_ops_cpu, &bt_ops_exact, &bt_ops_ref, &bt_ops_cuda_host, &bt_ops_auto,
#ifdef BT_HAVE_CUDA
        &bt_ops_cuda,
#endif
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i]->name, name) == 0)
            return all[i];
    return NULL;
}
