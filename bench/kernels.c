/*
 * kernels.c: baton-bench --kernels (see kernels.h).
 *
 * Order of a run: parse the type and shape lists; measure the machine (FMA
 * peak, int8 peak, read bandwidth) for every thread count; then per shape and type
 * build the weight pools, time GEMV and GEMM for every matrix and thread
 * count, print a row each; free.
 *
 * A measurement: one warm-up call (excluded, and timed to size the rest),
 * then `n` samples of `inner` calls each. When -r samples of one call fit
 * the time budget (--kernel-time), n = -r and inner grows so that the -r
 * samples fill the budget (quick kernels are not timer-bound); otherwise
 * inner = 1 and n = budget / call time, clamped to [min(3, -r), -r], so a
 * 0.5 s GEMM costs 4 calls (warm-up and 3 samples), not 6, and the default
 * run of every type and both shapes stays near 2-3 minutes on 2 cores.
 * Rows report the median sample and the min-max; the machine peaks report
 * the best of their passes (a ceiling).
 */
#include "config.h"

#include "build_commit.h"

#include "kernels.h"

#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forward.h"
#include "kernels/kernels.h"
#include "model.h"
#include "synth.h"

static volatile float kb_sink; /* keeps measured loops from being optimized away */

/* G operations per second of a peak loop (bt_peak_fma, bt_peak_dot) on
 * n_threads threads: best of 3 passes of ~target s; 0 where the loop has
 * no operations in this build. */
static double measure_peak(float (*loop)(int64_t, double *), int n_threads, double target)
{
    int64_t iters = 1 << 12;
    double t, flops = 0.0;
    kb_sink += loop(1, &flops);
    if (flops == 0.0)
        return 0.0;
    for (;;) { /* size a pass on one thread */
        double t0 = bt_now();
        kb_sink += loop(iters, &flops);
        t = bt_now() - t0;
        if (t >= 0.01)
            break;
        iters *= 4;
    }
    iters = (int64_t)((double)iters * target / t) + 1;
    double best = 0.0;
    for (int pass = 0; pass < 3; pass++) {
        int team = 1;
        float total = 0.0f;
        double t0 = bt_now();
#pragma omp parallel num_threads(n_threads) reduction(+ : total)
        {
            double f;
            total += loop(iters, &f);
            if (omp_get_thread_num() == 0)
                team = omp_get_num_threads();
        }
        t = bt_now() - t0;
        kb_sink += total;
        double gflops = flops * (double)iters * team / t * 1e-9;
        best = gflops > best ? gflops : best;
    }
    return best;
}

/* GB/s of one pass summing buf[0 .. n) on n_threads threads (static chunks). */
static double read_pass(const float *buf, size_t n, int n_threads)
{
    float total = 0.0f;
    double t0 = bt_now();
#pragma omp parallel num_threads(n_threads) reduction(+ : total)
    {
        const size_t nt = (size_t)omp_get_num_threads(), me = (size_t)omp_get_thread_num();
        const size_t chunk = (n / nt + 63) & ~(size_t)63; /* whole cache lines */
        const size_t lo = me * chunk < n ? me * chunk : n;
        const size_t hi = lo + chunk < n ? lo + chunk : n;
        total += bt_peak_sum(buf + lo, hi - lo);
    }
    double t = bt_now() - t0;
    kb_sink += total;
    return (double)n * sizeof(float) / t * 1e-9;
}

/* GB/s of summing buf[0 .. n): best of at least 3 passes and ~target s.
 * Each pass reads the window of win floats after the last one (*next; n a
 * multiple of win), so with n large enough no pass finds its window in the
 * L3; win = n reads the whole buffer every pass. */
static double measure_read(const float *buf, size_t n, size_t win, size_t *next, int n_threads,
                           double target)
{
    double best = 0.0, spent = 0.0;
    for (int pass = 0; pass < 3 || (spent < target && pass < 100); pass++) {
        const float *w = buf + *next * win;
        *next = (*next + 1) % (n / win);
        double t0 = bt_now(), gbs = read_pass(w, win, n_threads);
        spent += bt_now() - t0;
        best = gbs > best ? gbs : best;
    }
    return best;
}

/* ---- what to time ---- */

typedef struct kb_peaks {
    int threads;
    double fma_gflops, dot_gops, read_gbs;
} kb_peaks_t;

/* One weight matrix of a layer (or the head). */
typedef struct kb_mat {
    const char *name;
    int64_t n_in, n_out;
    bool gemm; /* also timed at prefill token counts (not the head) */
} kb_mat_t;

#define KB_N_MATS 5

static void shape_mats(const bt_synth_shape_t *s, kb_mat_t m[KB_N_MATS])
{
    /* the head dim of the shape: key_length where a family sets it (qwen3,
     * gemma3), else n_embd / n_head. attn_output (n_in n_head * head_dim)
     * is left out: it is attn_q's size, and where head_dim is n_embd /
     * n_head, attn_q's shape. */
    const int64_t head_dim = bt_synth_head_dim(s), kv_dim = (int64_t)s->n_head_kv * head_dim;
    m[0] = (kb_mat_t){"attn_q", s->n_embd, (int64_t)s->n_head * head_dim, true};
    m[1] = (kb_mat_t){"attn_k/v", s->n_embd, kv_dim, true};
    m[2] = (kb_mat_t){"ffn_gate/up", s->n_embd, s->n_ff, true};
    m[3] = (kb_mat_t){"ffn_down", s->n_ff, s->n_embd, true};
    m[4] = (kb_mat_t){"output", s->n_embd, s->n_vocab, false};
}

/* Rows of one type and width: a few random rows, quantized with
 * from_float, repeated to fill at least max(n_rows_min, bytes_min). A
 * matrix of n_out rows is a window of the pool; consecutive calls take
 * consecutive windows, so with a pool well beyond the L3 size each call
 * reads its weights from memory. (Repeated rows cost the kernels exactly
 * what distinct ones do and save quantizing gigabytes per type.) The
 * memory is the run's, allocated once for the largest pair of pools. */
typedef struct kb_pool {
    uint8_t *data;
    uint64_t row_bytes;
    int64_t n_rows;
    uint8_t *packed; /* the pool in bt_ops_cpu's packed layout, or NULL */
} kb_pool_t;

#define KB_POOL_DISTINCT_ROWS 64

static uint64_t kb_rand(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-a, a). */
static void fill_random(float *x, size_t n, float a, uint64_t *seed)
{
    for (size_t i = 0; i < n; i++)
        x[i] = a * ((float)(kb_rand(seed) >> 40) * (2.0f / (float)(1 << 24)) - 1.0f);
}

/* The geometry of a pool (data NULL); false when n_in is not a multiple of
 * the type's block size. */
static bool pool_size(uint32_t type, int64_t n_in, int64_t n_rows_min, uint64_t bytes_min,
                      kb_pool_t *p)
{
    uint64_t rb;
    if (bt_type_row_bytes(type, (uint64_t)n_in, &rb) != 0)
        return false;
    int64_t rows = (int64_t)((bytes_min + rb - 1) / rb);
    *p = (kb_pool_t){NULL, rb, rows > n_rows_min ? rows : n_rows_min, NULL};
    return true;
}

/* Fills p (sized by pool_size) at mem; row: room for n_in floats. */
static void pool_fill(kb_pool_t *p, uint8_t *mem, uint32_t type, int64_t n_in, float *row)
{
    const bt_type_info_t *ti = bt_type_info(type);
    const size_t rb = (size_t)p->row_bytes;
    uint64_t seed = 0x6b65726e656c73ull ^ ((uint64_t)type << 32) ^ (uint64_t)n_in;
    const int64_t distinct = p->n_rows < KB_POOL_DISTINCT_ROWS ? p->n_rows : KB_POOL_DISTINCT_ROWS;
    for (int64_t r = 0; r < distinct; r++) { /* variance 1/n_in, as synth.c's matrices */
        fill_random(row, (size_t)n_in, 1.7320508f / sqrtf((float)n_in), &seed);
        ti->from_float(mem + (size_t)r * rb, row, n_in);
    }
    for (int64_t r = distinct; r < p->n_rows; r += distinct) {
        const int64_t k = p->n_rows - r < distinct ? p->n_rows - r : distinct;
        memcpy(mem + (size_t)r * rb, mem, (size_t)k * rb);
    }
    p->data = mem;
}

/* The two pools of a shape and type: [0] n_in = n_embd (every matrix but
 * ffn_down), [1] n_in = n_ff; have[w] false when the type cannot hold the
 * width. Returns the bytes the pools take. */
static uint64_t shape_pools(const bt_synth_shape_t *s, const kb_mat_t m[], int n_mats,
                            uint32_t type, uint64_t cold, kb_pool_t pools[2], bool have[2])
{
    uint64_t bytes = 0;
    for (int w = 0; w < 2; w++) {
        const int64_t n_in = w == 0 ? s->n_embd : s->n_ff;
        int64_t rows = 0;
        for (int i = 0; i < n_mats; i++)
            if (m[i].n_in == n_in && m[i].n_out > rows)
                rows = m[i].n_out;
        have[w] = pool_size(type, n_in, rows, cold, &pools[w]);
        bytes += have[w] ? (uint64_t)pools[w].n_rows * pools[w].row_bytes : 0;
    }
    return bytes;
}

/* One timed kernel call pattern. */
typedef struct kb_job {
    const bt_ops_t *ops;
    const kb_pool_t *pool;
    bt_matrix_t w;     /* data set per call */
    int64_t n_windows; /* disjoint windows of n_out rows in the pool */
    int64_t next;      /* window of the next call */
    float *out;        /* [n_tok, n_out] */
    const float *x;    /* [n_tok, n_in] */
    int n_tok;
    const bt_scratch_t *scratch;
} kb_job_t;

static void job_call(kb_job_t *j)
{
    const int64_t win = j->next % j->n_windows;
    j->w.data = j->pool->data + (size_t)win * (size_t)j->w.n_out * j->pool->row_bytes;
    /* bt_ops_cpu multiplies packed weights, as a pipeline gives it; a
     * window of whole 16-row panels is the packed matrix of its rows */
    j->w.packed = NULL;
    if (j->ops == &bt_ops_cpu && j->pool->packed != NULL && j->w.n_out % 16 == 0)
        j->w.packed = j->pool->packed + (size_t)win * bt_pack_bytes(&j->w);
    j->next++;
    j->ops->matmul(j->out, &j->w, j->x, j->n_tok, j->scratch);
}

typedef struct kb_stats {
    double med, min, max; /* seconds per call */
    int n;                /* samples */
} kb_stats_t;

/* samples: room for reps values. See the top of the file for the rule. */
static void job_time(kb_job_t *j, int reps, double budget, double *samples, kb_stats_t *st)
{
    double t0 = bt_now();
    job_call(j); /* warm-up */
    const double tw = bt_now() - t0;
    int64_t inner = 1;
    int n = reps;
    if (tw * reps <= budget) {
        double k = tw > 0.0 ? budget / reps / tw : 1e6;
        inner = k > 1e6 ? 1000000 : k < 1.0 ? 1 : (int64_t)k;
    } else {
        const int min_n = reps < 3 ? reps : 3;
        n = (int)(budget / tw);
        n = n < min_n ? min_n : n > reps ? reps : n;
    }
    for (int s = 0; s < n; s++) {
        t0 = bt_now();
        for (int64_t i = 0; i < inner; i++)
            job_call(j);
        samples[s] = (bt_now() - t0) / (double)inner;
    }
    st->med = bt_median(samples, n); /* sorted now */
    st->n = n;
    st->min = samples[0];
    st->max = samples[n - 1];
}

/* ---- the run ---- */

/* Types in the order of the issue (float, then 8-bit down to K-quants),
 * then any other supported type. */
static int default_types(uint32_t *types)
{
    static const uint32_t order[] = {BT_TYPE_F32,  BT_TYPE_F16,  BT_TYPE_BF16, BT_TYPE_Q8_0,
                                     BT_TYPE_Q4_0, BT_TYPE_Q4_1, BT_TYPE_Q5_0, BT_TYPE_Q5_1,
                                     BT_TYPE_Q4_K, BT_TYPE_Q5_K, BT_TYPE_Q6_K};
    int n = 0;
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        if (bt_type_supported(order[i]))
            types[n++] = order[i];
    for (uint32_t t = 0; t < BT_TYPE_COUNT; t++) {
        bool seen = false;
        for (int i = 0; i < n; i++)
            seen = seen || types[i] == t;
        if (!seen && bt_type_supported(t))
            types[n++] = t;
    }
    return n;
}

static bt_status_t parse_types(const char *s, uint32_t *types, int *n)
{
    if (s == NULL) {
        *n = default_types(types);
        return BT_OK;
    }
    char *copy = strdup(s), *save = NULL;
    if (copy == NULL)
        return BT_ERR_NOMEM;
    bt_status_t st = BT_OK;
    int k = 0;
    for (char *item = strtok_r(copy, ",", &save); item && st == BT_OK;
         item = strtok_r(NULL, ",", &save)) {
        int t = bt_type_from_name(item);
        if (t < 0 || !bt_type_supported((uint32_t)t)) {
            bt_log_error("--kernel-types: '%s' is not a type baton computes with (%s)", item,
                         bt_type_supported_names());
            st = BT_ERR_ARG;
        } else if (k < BT_TYPE_COUNT) {
            types[k++] = (uint32_t)t;
        }
    }
    free(copy);
    if (st == BT_OK && k == 0) {
        bt_log_error("--kernel-types: '%s' names no type", s);
        st = BT_ERR_ARG;
    }
    *n = k;
    return st;
}

#define KB_MAX_SHAPES 8

static bt_status_t parse_shapes(const char *s, bt_synth_shape_t *shapes, int *n)
{
    char *copy = strdup(s ? s : "smollm2-135m,llama-1b"), *save = NULL;
    if (copy == NULL)
        return BT_ERR_NOMEM;
    bt_status_t st = BT_OK;
    int k = 0;
    for (char *item = strtok_r(copy, ",", &save); item && st == BT_OK;
         item = strtok_r(NULL, ",", &save)) {
        if (k == KB_MAX_SHAPES) {
            bt_log_error("--kernel-shapes: more than %d shapes", KB_MAX_SHAPES);
            st = BT_ERR_ARG;
        } else if (bt_synth_shape(item, &shapes[k]) != BT_OK) {
            st = BT_ERR_ARG; /* logged, with the known names */
        } else {
            k++;
        }
    }
    free(copy);
    if (st == BT_OK && k == 0) {
        bt_log_error("--kernel-shapes: '%s' names no shape", s);
        st = BT_ERR_ARG;
    }
    *n = k;
    return st;
}

static void cpu_name(char *buf, size_t n)
{
    snprintf(buf, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL)
        return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':') != NULL) {
            const char *v = strchr(line, ':') + 1;
            v += *v == ' ';
            line[strcspn(line, "\n")] = '\0';
            snprintf(buf, n, "%s", v);
            break;
        }
    fclose(f);
}

/* Bytes of the L3 a core of this process sees: sysfs (per cache domain),
 * else sysconf (which on some virtual machines reports the whole host's). */
static uint64_t l3_bytes(void)
{
    for (int i = 0; i < 8; i++) {
        char path[96], buf[32];
        int level = 0;
        unsigned long kib = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            break;
        bool ok = fscanf(f, "%d", &level) == 1;
        fclose(f);
        if (!ok || level != 3)
            continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if ((f = fopen(path, "r")) == NULL)
            break;
        ok = fgets(buf, sizeof buf, f) != NULL && sscanf(buf, "%luK", &kib) == 1;
        fclose(f);
        if (ok && kib > 0)
            return (uint64_t)kib << 10;
    }
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return l3 > 0 ? (uint64_t)l3 : 32ull << 20;
}

/* Bytes a pool must exceed so that cycling through it evicts the L3. */
static uint64_t cold_bytes(void)
{
    uint64_t b = 4 * l3_bytes();
    return b > (64ull << 20) ? b : 64ull << 20;
}

/* One line of the table: a timed kernel, or (kernel NULL) a width the
 * type cannot hold. */
typedef struct kb_row {
    const char *kernel; /* "gemv", "gemm", "gemv exact", ..., "gemm ref" */
    uint32_t type;
    const char *shape, *mat;
    int64_t n_in, n_out;
    int n_tok, threads;
    double bytes; /* weight bytes one call reads */
    bool int8;    /* bt_ops_cpu with 8-bit activations (integer dot products) */
    double read_now; /* GEMV: the read bandwidth of its thread count around it, GB/s */
    kb_stats_t st;
} kb_row_t;

typedef struct kb_run {
    const bt_bench_params_t *p;
    kb_peaks_t *peaks; /* [n_peaks]: the -t counts, and 1 for the reference */
    int n_peaks;
    float *x, *y;      /* [max_tok, max_n_in], [max_tok, max_n_out] */
    float *row;        /* [max_n_in]: a pool row before quantization */
    uint8_t *pool_mem; /* room for the largest pair of pools of any shape and type */
    float *now_buf;    /* [now_n]: the read-bandwidth buffer of the GEMV rows (read_now) */
    size_t now_n, now_win, now_next; /* read in windows of now_win floats; the next one */
    float *scratch_buf;
    size_t scratch_per_thread;
    double *samples; /* [reps] */
    kb_row_t *rows;  /* [max_rows] */
    int n_rows, max_rows;
    double load[2]; /* 1-minute load average before and after (-1: unknown) */
    char gpu[320];  /* the GPU line of the report ("" in a build without CUDA) */
} kb_run_t;

/* The GPU line: the device's name, read bandwidth and int8 tensor-core
 * peak measured now, or why there is none (a --with-cuda build only). */
static void measure_gpu(const bt_bench_params_t *p, char *line, size_t n)
{
    const bt_device_api_t *api = bt_device_default;
    line[0] = '\0';
    if (api == NULL)
        return;
    char why[200] = "";
    const int count = api->count(why, sizeof why);
    const int dev = count > 0 ? bt_device_pick(0, count, p->gpu_given ? p->gpu : -1, why, sizeof why)
                              : -1; /* why: the runtime's reason */
    double read = 0, tops = 0;
    if (dev < 0 || api->open(dev, why, sizeof why) != 0 || api->measure(&read, &tops) != 0) {
        snprintf(line, n, "GPU: none (%s)", why);
        return;
    }
    snprintf(line, n, "GPU %d: %s, read bandwidth %.0f GB/s, int8 tensor-core peak %.0f TOPS "
                      "(best of 5 passes each, measured now; the kernels below are the CPU's)",
             dev, api->name(), read, tops);
}

/* The read bandwidth of `threads` threads now (GB/s, best of a few short
 * passes): a shared machine's memory is not the same from one minute to
 * the next (a 2-core VM measured 35 and 61 GB/s on two threads minutes
 * apart), so a one-token product is set against what its own moment
 * allowed as well as against the run's best. */
static double read_now(kb_run_t *r, int threads)
{
    /* windows of a buffer 4x the L3 (or more): a Xeon's 260 MiB L3 held a
     * single 128 MiB buffer, which then read at 1.7x the memory's speed */
    return measure_read(r->now_buf, r->now_n, r->now_win, &r->now_next, threads, 0.02);
}

static void time_row(kb_run_t *r, const bt_ops_t *ops, const char *kernel, uint32_t type,
                     const char *shape, const kb_mat_t *m, const kb_pool_t *pool, int n_tok,
                     int threads)
{
    const bt_scratch_t scratch = {r->scratch_buf, r->scratch_per_thread, threads};
    kb_job_t j = {
        .ops = ops,
        .pool = pool,
        .w = {NULL, type, m->n_in, m->n_out, pool->row_bytes},
        .n_windows = pool->n_rows / m->n_out,
        .out = r->y,
        .x = r->x,
        .n_tok = n_tok,
        .scratch = &scratch,
    };
    kb_row_t *row = &r->rows[r->n_rows++];
    *row = (kb_row_t){.kernel = kernel, .type = type, .shape = shape, .mat = m->name,
                      .n_in = m->n_in, .n_out = m->n_out, .n_tok = n_tok, .threads = threads,
                      .bytes = (double)m->n_out * (double)pool->row_bytes,
                      .int8 = ops == &bt_ops_cpu && bt_type_info(type)->block_size > 1 &&
                              !bt_ops_cpu_is_exact(type, m->n_in)};
    const double before = n_tok == 1 ? read_now(r, threads) : 0.0;
    job_time(&j, r->p->reps, r->p->kernel_time, r->samples, &row->st);
    const double after = n_tok == 1 ? read_now(r, threads) : 0.0;
    row->read_now = before > after ? before : after;
}

/* Every row of one shape and type. */
static void time_type(kb_run_t *r, const bt_synth_shape_t *s, uint32_t type,
                      const bt_ops_t *const *ops, int n_ops, uint64_t cold)
{
    const bt_bench_params_t *p = r->p;
    kb_mat_t m[KB_N_MATS];
    shape_mats(s, m);
    kb_pool_t pools[2] = {{0}};
    bool have[2];
    shape_pools(s, m, KB_N_MATS, type, cold, pools, have);
    uint8_t *mem = r->pool_mem;
    for (int w = 0; w < 2; w++) {
        const int64_t n_in = w == 0 ? s->n_embd : s->n_ff;
        if (have[w]) {
            pool_fill(&pools[w], mem, type, n_in, r->row);
            mem += (size_t)pools[w].n_rows * pools[w].row_bytes;
            const bt_matrix_t all = {pools[w].data, type,    n_in, pools[w].n_rows,
                                     pools[w].row_bytes, NULL};
            const size_t pb = bt_pack_bytes(&all);
            pools[w].packed = pb ? bt_alloc_huge(pb) : NULL;
            if (pools[w].packed != NULL)
                bt_pack(&all, pools[w].packed);
        } else {
            r->rows[r->n_rows++] = (kb_row_t){.type = type, .shape = s->name, .n_in = n_in};
        }
    }
    for (int o = 0; o < n_ops; o++) {
        const bool ref = ops[o] == &bt_ops_ref; /* one thread, whatever -t says */
        const int n_threads = ref ? 1 : p->threads.n;
        for (int gemm = 0; gemm < 2; gemm++) {
            static const char *const names[3][2] = {
                {"gemv", "gemm"}, {"gemv exact", "gemm exact"}, {"gemv ref", "gemm ref"}};
            const char *kernel = names[ref ? 2 : ops[o] == &bt_ops_exact][gemm];
            for (int i = 0; i < KB_N_MATS; i++) {
                const int w = m[i].n_in == s->n_embd ? 0 : 1;
                if (!have[w] || (gemm && !m[i].gemm))
                    continue;
                /* exact is timed where cpu takes a path of its own */
                if (ops[o] == &bt_ops_exact && bt_ops_cpu_is_exact(type, m[i].n_in))
                    continue;
                const int n_tok_list = gemm ? p->kernel_tokens.n : 1;
                for (int k = 0; k < n_tok_list; k++)
                    for (int t = 0; t < n_threads; t++)
                        time_row(r, ops[o], kernel, type, s->name, &m[i], &pools[w],
                                 gemm ? p->kernel_tokens.v[k] : 1, ref ? 1 : p->threads.v[t]);
            }
        }
    }
    free(pools[0].packed);
    free(pools[1].packed);
}

/* Raises peaks[0 .. n_peaks) (threads set) to what the machine shows now:
 * a ceiling, so a pass slowed by another process never lowers it. */
static bt_status_t measure_machine(const bt_bench_params_t *p, kb_peaks_t *peaks, int n_peaks)
{
    int max_threads = 1;
    for (int i = 0; i < n_peaks; i++)
        max_threads = peaks[i].threads > max_threads ? peaks[i].threads : max_threads;
    const size_t n = (size_t)p->kernel_bw_mib << 18; /* floats */
    float *buf = bt_alloc_huge(n * sizeof(float)); /* as the weights: huge pages */
    if (buf == NULL) {
        bt_log_error("kernels: cannot allocate the %d MiB read-bandwidth buffer",
                     p->kernel_bw_mib);
        return BT_ERR_NOMEM;
    }
#pragma omp parallel for schedule(static) num_threads(max_threads)
    for (size_t i = 0; i < n; i++) /* first touch where the threads run */
        buf[i] = 1.0f;
    for (int i = 0; i < n_peaks; i++) {
        const double fma = measure_peak(bt_peak_fma, peaks[i].threads, 0.1);
        const double dot = measure_peak(bt_peak_dot, peaks[i].threads, 0.1);
        size_t whole = 0;
        const double read = measure_read(buf, n, n, &whole, peaks[i].threads, 0.2);
        peaks[i].fma_gflops = fma > peaks[i].fma_gflops ? fma : peaks[i].fma_gflops;
        peaks[i].dot_gops = dot > peaks[i].dot_gops ? dot : peaks[i].dot_gops;
        peaks[i].read_gbs = read > peaks[i].read_gbs ? read : peaks[i].read_gbs;
    }
    free(buf);
    return BT_OK;
}

static const kb_peaks_t *peaks_for(const kb_run_t *r, int threads)
{
    for (int i = 0; i < r->n_peaks; i++)
        if (r->peaks[i].threads == threads)
            return &r->peaks[i];
    return &r->peaks[0]; /* not reached: every timed count has its peaks */
}

static void print_report(const kb_run_t *r, const bt_synth_shape_t *shapes, int n_shapes,
                         uint64_t cold, FILE *f)
{
    const bt_bench_params_t *p = r->p;
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    char quant[64] = "not at all";
    if (bt_weight_prefetch())
        snprintf(quant, sizeof quant, "into %s %zu KiB ahead of their loads",
                 bt_weight_prefetch_l2() ? "L2" : "L1", bt_weight_prefetch_bytes() >> 10);
    fprintf(f, "## baton-bench --kernels (build %s)\n\n", BT_BUILD_COMMIT);
    fprintf(f, "CPU: %s, %d cores; kernels and peak loops: the %s build (BATON_ISA); "
               "one-token products prefetch their weights (BATON_PREFETCH): quantized %s, "
               "float panels (also for a few tokens) %s; load "
               "average %.2f before, %.2f after (other processes on these cores slow the "
               "multi-thread rows most)\n\n",
            cpu, omp_get_num_procs(), bt_isa_name(bt_isa_active()),
            quant, bt_weight_prefetch() ? "ahead along each stream" : "their next unit", r->load[0],
            r->load[1]);
    if (r->gpu[0] != '\0')
        fprintf(f, "%s\n\n", r->gpu);
    fprintf(f, "FMA peak: ");
    for (int i = 0; i < r->n_peaks; i++)
        fprintf(f, "%s%.1f%s (%d thread%s)", i ? ", " : "", r->peaks[i].fma_gflops,
                i ? "" : " GFLOP/s", r->peaks[i].threads, r->peaks[i].threads > 1 ? "s" : "");
    fprintf(f, "; int8 dot-product peak: ");
    for (int i = 0; i < r->n_peaks && r->peaks[0].dot_gops > 0.0; i++)
        fprintf(f, "%s%.1f%s (%d thread%s)", i ? ", " : "", r->peaks[i].dot_gops,
                i ? "" : " GOP/s", r->peaks[i].threads, r->peaks[i].threads > 1 ? "s" : "");
    if (r->peaks[0].dot_gops <= 0.0)
        fprintf(f, "none in this build");
    fprintf(f, "; read bandwidth: ");
    for (int i = 0; i < r->n_peaks; i++)
        fprintf(f, "%s%.1f GB/s (%d thread%s)", i ? ", " : "", r->peaks[i].read_gbs,
                r->peaks[i].threads, r->peaks[i].threads > 1 ? "s" : "");
    fprintf(f, "\n\n");
    fprintf(f, "Peaks: best pass, measured before and after the kernels (FMA: 12 independent "
               "vector chains per thread; int8: independent chains of the quantized kernels' "
               "8-bit dot product, %s, 2 ops per multiply-add; read: SIMD sum over %d MiB). ",
#if defined(__aarch64__)
            bt_isa_active() != BT_ISA_BASE ? "sdot"
#else
            bt_isa_active() == BT_ISA_TOP   ? "vpdpbusd"
            : bt_isa_active() == BT_ISA_MID ? "vpmaddubsw + vpmaddwd + vpaddd"
#endif
                                            : "none",
            p->kernel_bw_mib);
    fprintf(f, "Kernels: the ops table's matmul, median of the samples after one warm-up call "
               "(-r %d, --kernel-time %g s); weights cycle through a pool of at least %.0f MiB, "
               "so they come from memory. ",
            p->reps, p->kernel_time, (double)cold / (1 << 20));
    fprintf(f, "GFLOP/s = 2 tokens n_in n_out / time (for the quantized types on the 8-bit path "
               "these are integer ops, GOP/s), GB/s = weight bytes / time; %% FMA peak, %% int8 "
               "peak (the cpu kernels of the quantized types with 8-bit activations) and %% read "
               "BW against the peak of the same thread count (GEMM: FLOP/s, GEMV: GB/s matter); "
               "%% read BW now, a GEMV's GB/s against the read bandwidth of its thread count "
               "measured just before and after it (the larger; passes of %zu MiB, each the next of %zu "
               "windows of a cold buffer). "
               "The matmul runs products under 2^18 multiply-adds on one thread, except "
               "one-token F32/F16/BF16 products of 128 KiB and 128 rows (F16/BF16: 113) or more. "
               "Shapes: ",
            r->now_win * sizeof(float) >> 20, r->now_n / r->now_win);
    for (int i = 0; i < n_shapes; i++)
        fprintf(f, "%s%s", i ? ", " : "", shapes[i].name);
    fprintf(f, " (n_in->n_out).\n\n");
    fprintf(f, "| kernel | type | shape | tokens | threads | GFLOP/s | GB/s | %% FMA peak | "
               "%% int8 peak | %% read BW | %% read BW now | min-max (gemm GFLOP/s, gemv GB/s) | "
               "samples |\n");
    fprintf(f, "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
               "| ---: |\n");
    for (int i = 0; i < r->n_rows; i++) {
        const kb_row_t *w = &r->rows[i];
        const bt_type_info_t *ti = bt_type_info(w->type);
        if (w->kernel == NULL) {
            fprintf(f, "| - | %s | %s n_in %" PRId64 " | - | - | skipped: n_in is not a "
                       "multiple of the block size %" PRId64 " | | | | | | | |\n",
                    ti->name, w->shape, w->n_in, ti->block_size);
            continue;
        }
        const double flop = 2.0 * w->n_tok * (double)w->n_in * (double)w->n_out;
        const double gflops = flop / w->st.med * 1e-9, gbs = w->bytes / w->st.med * 1e-9;
        const kb_peaks_t *pk = peaks_for(r, w->threads);
        const double work = w->n_tok > 1 ? flop : w->bytes; /* the figure that matters */
        /* the int8 peak is the measure of the quantized types' cpu kernels */
        char dot[32] = "-";
        if (w->int8 && pk->dot_gops > 0.0)
            snprintf(dot, sizeof dot, "%.1f", 100.0 * gflops / pk->dot_gops);
        char now[32] = "-";
        if (w->read_now > 0.0)
            snprintf(now, sizeof now, "%.1f", 100.0 * gbs / w->read_now);
        fprintf(f,
                "| %s | %s | %s %s %" PRId64 "->%" PRId64 " | %d | %d | %.1f | %.2f | %.1f | "
                "%s | %.1f | %s | %.1f-%.1f | %d |\n",
                w->kernel, ti->name, w->shape, w->mat, w->n_in, w->n_out, w->n_tok, w->threads,
                gflops, gbs, 100.0 * gflops / pk->fma_gflops, dot, 100.0 * gbs / pk->read_gbs,
                now, work / w->st.max * 1e-9, work / w->st.min * 1e-9, w->st.n);
    }
    fprintf(f, "\n");
}

/* ---- whole decode steps of -m models ---- */

static uint64_t mat_bytes(const bt_matrix_t *w)
{
    return w->data != NULL ? (uint64_t)w->n_out * w->row_bytes : 0;
}

/* The weight bytes one decode token streams: every matrix of every layer,
 * of a mixture's experts the k a token uses (n_expert_used of each), and
 * the head; not the embedding table (one row is looked up). */
static uint64_t active_bytes(const bt_model_t *m)
{
    const bt_hparams_t *hp = &m->hp;
    uint64_t b = m->with_head ? mat_bytes(m->tied ? &m->tok_embd : &m->output) : 0;
    for (int l = 0; l < m->last - m->first; l++) {
        const bt_layer_t *y = &m->layers[l];
        const bt_matrix_t *all[] = {&y->wq,   &y->wk,   &y->wv,         &y->wo,        &y->w_gate,
                                    &y->w_up, &y->w_down, &y->router,   &y->q_a,       &y->q_b,
                                    &y->kv_a, &y->gate_shexp, &y->up_shexp, &y->down_shexp};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            b += mat_bytes(all[i]);
        b += (uint64_t)hp->n_head * (mat_bytes(&y->k_b) + mat_bytes(&y->v_b));
        b += (uint64_t)hp->n_expert_used *
             (mat_bytes(&y->gate_exps) + mat_bytes(&y->up_exps) + mat_bytes(&y->down_exps));
    }
    return b;
}

/* Median seconds of one decode step (embed, every layer, the head) of a
 * whole model after a 16-token prompt, at the given thread count. */
static bt_status_t time_decode(const bt_bench_params_t *p, bt_model_t *m, const bt_ops_t *ops,
                               int threads, double *samples, kb_stats_t *st)
{
    const int n_prompt = 16, n_ctx = 512, n_vocab = m->hp.n_vocab;
    bt_forward_t *f;
    bt_status_t s = bt_forward_init(m, ops, n_ctx, 1, n_prompt, threads, BT_TYPE_F32, &f);
    if (s != BT_OK)
        return s;
    float *x = malloc(sizeof(float) * (size_t)n_prompt * m->hp.n_embd);
    float *logits = malloc(sizeof(float) * (size_t)n_vocab);
    if (x == NULL || logits == NULL) {
        s = BT_ERR_NOMEM;
        goto done;
    }
    int32_t ids[16];
    for (int i = 0; i < n_prompt; i++)
        ids[i] = (i * 131 + 7) % n_vocab;
    if ((s = bt_forward_embed(f, ids, n_prompt, x)) || (s = bt_forward_layers(f, x, n_prompt, 0)))
        goto done;
    int pos = n_prompt, n = 0;
    const int max_n = p->reps < n_ctx - n_prompt - 2 ? p->reps : n_ctx - n_prompt - 2;
    const double t_end = bt_now() + p->kernel_time * p->reps;
    for (int i = -1; i < max_n && (i < 3 || bt_now() < t_end); i++) { /* i = -1: warm-up */
        const int32_t id = (pos * 31) % n_vocab;
        const double t0 = bt_now();
        if ((s = bt_forward_embed(f, &id, 1, x)) || (s = bt_forward_layers(f, x, 1, pos)))
            goto done;
        bt_forward_head(f, x, 1, logits);
        if (i >= 0)
            samples[n++] = bt_now() - t0;
        pos++;
    }
    st->med = bt_median(samples, n);
    st->n = n;
    st->min = samples[0];
    st->max = samples[n - 1];
done:
    free(x);
    free(logits);
    bt_forward_free(f);
    return s;
}

/* The decode-step table: for each -m model and -t count, a token's time,
 * the weight bytes it streams over that time, and the share of the step
 * the streams do not explain at the measured read bandwidth. */
static bt_status_t decode_steps(kb_run_t *r, FILE *out)
{
    const bt_bench_params_t *p = r->p;
    const bt_ops_t *ops = p->ops == &bt_ops_auto || strcmp(p->ops->name, "cuda") == 0 ? &bt_ops_cpu
                                                                                      : p->ops;
    fprintf(out, "Decode steps (`-m`, `--kernel-tokens 1`): the %s kernels, one whole token "
                 "(embedding row, every layer, the head) at position 16 and up, median of "
                 "%d steps at most; \"active\" = the weights a token streams (a mixture's k "
                 "experts of each layer); \"outside\" = 1 - (active / read bandwidth) / time, "
                 "the share of the step the weight streams do not explain.\n\n",
            ops->name, p->reps);
    fprintf(out, "| model | type | threads | ms / token | t/s | active MiB | GB/s | %% read BW | "
                 "%% read BW now | outside |\n"
                 "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < p->n_models; i++) {
        bt_model_t *m;
        bt_status_t st = bt_model_load(p->models[i], 0, -1, true, true, &m);
        if (st != BT_OK)
            return st;
        if (ops == &bt_ops_cpu && (st = bt_model_pack(m)) != BT_OK) {
            bt_model_free(m);
            return st;
        }
        const uint64_t active = active_bytes(m);
        const char *type = bt_ftype_name(m->file_type); /* as the main table names it */
        const char *base = strrchr(p->models[i], '/');
        for (int t = 0; t < p->threads.n; t++) {
            kb_stats_t ks;
            const double before = read_now(r, p->threads.v[t]);
            if ((st = time_decode(p, m, ops, p->threads.v[t], r->samples, &ks)) != BT_OK) {
                bt_model_free(m);
                return st;
            }
            const double after = read_now(r, p->threads.v[t]);
            const double bw = peaks_for(r, p->threads.v[t])->read_gbs * 1e9;
            const double now = (before > after ? before : after) * 1e9;
            const double gbs = (double)active / ks.med / 1e9;
            fprintf(out,
                    "| %s | %s | %d | %.4g | %.1f | %.2f | %.1f | %.0f%% | %.0f%% | %.0f%% |\n",
                    base ? base + 1 : p->models[i], type,
                    p->threads.v[t], ks.med * 1e3, 1.0 / ks.med, (double)active / (1 << 20), gbs,
                    100.0 * gbs * 1e9 / bw, 100.0 * gbs * 1e9 / now,
                    100.0 * (1.0 - (double)active / bw / ks.med));
        }
        bt_model_free(m);
    }
    fprintf(out, "\n");
    return BT_OK;
}

bt_status_t bt_bench_kernels(const bt_bench_params_t *p, FILE *out)
{
    uint32_t types[BT_TYPE_COUNT];
    bt_synth_shape_t shapes[KB_MAX_SHAPES];
    int n_types, n_shapes;
    bt_status_t st;
    char why[200];
    if (!bt_isa_from_env(why, sizeof why)) {
        bt_log_error("%s", why);
        return BT_ERR_ARG;
    }
    if ((st = parse_types(p->kernel_types, types, &n_types)) != BT_OK ||
        (st = parse_shapes(p->kernel_shapes, shapes, &n_shapes)) != BT_OK)
        return st;
    if (strcmp(p->output, "md") != 0 || p->hdf5 != NULL) {
        bt_log_error("--kernels prints a markdown table only (got%s%s%s)",
                     strcmp(p->output, "md") ? " -o " : "", strcmp(p->output, "md") ? p->output : "",
                     p->hdf5 ? " --hdf5" : "");
        return BT_ERR_ARG;
    }

    /* buffers for the largest shape */
    int64_t max_in = 1, max_out = 1;
    int max_tok = 1, max_threads = 1;
    for (int i = 0; i < n_shapes; i++) {
        kb_mat_t m[KB_N_MATS];
        shape_mats(&shapes[i], m);
        for (int k = 0; k < KB_N_MATS; k++) {
            max_in = m[k].n_in > max_in ? m[k].n_in : max_in;
            max_out = m[k].n_out > max_out ? m[k].n_out : max_out;
        }
    }
    for (int i = 0; i < p->kernel_tokens.n; i++)
        max_tok = p->kernel_tokens.v[i] > max_tok ? p->kernel_tokens.v[i] : max_tok;
    for (int i = 0; i < p->threads.n; i++)
        max_threads = p->threads.v[i] > max_threads ? p->threads.v[i] : max_threads;
    const uint64_t cold = cold_bytes();
    uint64_t pool_bytes = 0;
    for (int i = 0; i < n_shapes; i++)
        for (int t = 0; t < n_types; t++) {
            kb_mat_t m[KB_N_MATS];
            kb_pool_t pools[2];
            bool have[2];
            shape_mats(&shapes[i], m);
            uint64_t b = shape_pools(&shapes[i], m, KB_N_MATS, types[t], cold, pools, have);
            pool_bytes = b > pool_bytes ? b : pool_bytes;
        }
    /* per shape and type: 2 skipped widths at most, then per ops table the
     * GEMV matrices and the GEMM matrices x token counts, x thread counts */
    const int per_ops = (KB_N_MATS + (KB_N_MATS - 1) * p->kernel_tokens.n) * p->threads.n;
    kb_run_t r = {
        .p = p,
        .scratch_per_thread = bt_scratch_floats(max_in, 1),
        .max_rows = n_shapes * n_types * (2 + per_ops * (p->ref_kernels ? 3 : 2)), /* cpu, exact, ref */
    };
    r.peaks = calloc((size_t)p->threads.n + 1, sizeof *r.peaks);
    r.x = malloc(sizeof(float) * (size_t)max_tok * (size_t)max_in);
    r.y = malloc(sizeof(float) * (size_t)max_tok * (size_t)max_out);
    r.scratch_buf = malloc(sizeof(float) * r.scratch_per_thread * (size_t)max_threads);
    r.samples = malloc(sizeof(double) * (size_t)p->reps);
    r.row = malloc(sizeof(float) * (size_t)max_in);
    r.rows = malloc(sizeof(kb_row_t) * (size_t)r.max_rows);
    r.pool_mem = bt_alloc_huge((size_t)pool_bytes); /* as a model's weights (--mmap 0, packed) */
    r.now_win = (size_t)(p->kernel_bw_mib < 128 ? p->kernel_bw_mib : 128) << 18; /* floats */
    r.now_n = r.now_win * (size_t)((cold / sizeof(float) + r.now_win - 1) / r.now_win);
    r.now_buf = bt_alloc_huge(r.now_n * sizeof(float));
    if (r.peaks == NULL || r.x == NULL || r.y == NULL || r.scratch_buf == NULL ||
        r.samples == NULL || r.row == NULL || r.rows == NULL || r.pool_mem == NULL ||
        r.now_buf == NULL) {
        bt_log_error("kernels: cannot allocate buffers for %d tokens x %" PRId64 " -> %" PRId64
                     " and %.0f MiB of weights",
                     max_tok, max_in, max_out, (double)pool_bytes / (1 << 20));
        st = BT_ERR_NOMEM;
        goto fail_alloc;
    }
    uint64_t seed = 42;
    fill_random(r.x, (size_t)max_tok * (size_t)max_in, 1.0f, &seed);
#pragma omp parallel for schedule(static) num_threads(max_threads)
    for (size_t i = 0; i < r.now_n; i++) /* first touch where the threads run */
        r.now_buf[i] = 1.0f;

    for (int i = 0; i < p->threads.n + p->ref_kernels; i++) { /* distinct counts, in order */
        const int t = i < p->threads.n ? p->threads.v[i] : 1;
        bool seen = false;
        for (int k = 0; k < r.n_peaks; k++)
            seen = seen || r.peaks[k].threads == t;
        if (!seen)
            r.peaks[r.n_peaks++].threads = t;
    }
    if (getloadavg(&r.load[0], 1) != 1)
        r.load[0] = -1.0;
    if ((st = measure_machine(p, r.peaks, r.n_peaks)) != BT_OK)
        goto fail_alloc;
    const bt_ops_t *ops[3] = {&bt_ops_cpu, &bt_ops_exact, &bt_ops_ref};
    const double t0 = bt_now();
    for (int s = 0; s < n_shapes; s++)
        for (int t = 0; t < n_types; t++) {
            time_type(&r, &shapes[s], types[t], ops, p->ref_kernels ? 3 : 2, cold);
            bt_log_info("kernels: %s %s timed (%.0f s)", shapes[s].name,
                        bt_type_info(types[t])->name, bt_now() - t0);
        }
    free(r.pool_mem); /* room for the second look at the peaks */
    r.pool_mem = NULL;
    if ((st = measure_machine(p, r.peaks, r.n_peaks)) != BT_OK)
        goto fail_alloc;
    if (getloadavg(&r.load[1], 1) != 1)
        r.load[1] = -1.0;
    measure_gpu(p, r.gpu, sizeof r.gpu);
    print_report(&r, shapes, n_shapes, cold, out);
    bool one_token = false;
    for (int i = 0; i < p->kernel_tokens.n; i++)
        one_token = one_token || p->kernel_tokens.v[i] == 1;
    if (p->n_models > 0 && one_token)
        st = decode_steps(&r, out);

fail_alloc:
    free(r.now_buf);
    free(r.pool_mem);
    free(r.rows);
    free(r.row);
    free(r.samples);
    free(r.scratch_buf);
    free(r.y);
    free(r.x);
    free(r.peaks);
    return st;
}
