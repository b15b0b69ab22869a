/* testutil.h: small helpers shared by the Check suites. */
#ifndef BT_TESTUTIL_H
#define BT_TESTUTIL_H

#include <check.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/types.h"
#include "kernels/kernels.h"

/* A fresh directory under $TMPDIR (or /tmp) for one test program; removed
 * by tu_rmdir_all. */
static inline char *tu_mkdtemp(void)
{
    const char *base = getenv("TMPDIR");
    static char path[512];
    snprintf(path, sizeof path, "%s/baton-test-XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(path);
}

static inline void tu_rmdir_all(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", dir);
}

#ifndef BT_TOP_SRCDIR
#define BT_TOP_SRCDIR "."
#endif

/* The source tree the tests were built from: $BT_SRCDIR, else the path
 * compiled in. */
static inline const char *tu_srcdir(void)
{
    const char *d = getenv("BT_SRCDIR");
    return d != NULL && *d != '\0' ? d : BT_TOP_SRCDIR;
}

/* A downloaded model's path into path (size bytes): the environment
 * variable env when set, else <srcdir>/models/name. Returns path. */
static inline const char *tu_model_path(const char *env, const char *name, char *path,
                                        size_t size)
{
    const char *e = getenv(env);
    if (e != NULL && *e != '\0')
        snprintf(path, size, "%s", e);
    else
        snprintf(path, size, "%s/models/%s", tu_srcdir(), name);
    return path;
}

/* Writes the path of golden reference file NAME into path: in
 * $BT_GOLDEN_DIR when set, else in the source tree's tests/data/golden.
 * Returns whether the file is readable. Usable outside a running test
 * (main), where Check's assertions are not. */
static inline bool tu_golden_locate(const char *name, char *path, size_t size)
{
    const char *dir = getenv("BT_GOLDEN_DIR");
    if (dir != NULL && *dir != '\0')
        snprintf(path, size, "%s/%s", dir, name);
    else
        snprintf(path, size, "%s/tests/data/golden/%s", tu_srcdir(), name);
    return access(path, R_OK) == 0;
}

/* The path of golden reference file NAME (tu_golden_locate). The data
 * ships with the repository, so a missing file fails the calling test,
 * naming it. */
static inline const char *tu_golden_path(const char *name)
{
    static char path[700];
    ck_assert_msg(tu_golden_locate(name, path, sizeof path),
                  "golden reference file missing: %s (it ships in tests/data/golden; "
                  "BT_GOLDEN_DIR overrides the folder)",
                  path);
    return path;
}

/* Reads a whole file; NULL on failure. */
static inline void *tu_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf != NULL)
        *size = (size_t)n;
    return buf;
}

/* ck_assert_msg that is silent when it holds: Check reports every passing
 * assertion to the runner (one write per call), too slow for loops over
 * every element. */
#define CHECK_MSG(expr, ...)                                                                       \
    do {                                                                                           \
        if (!(expr))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)

/* Deterministic test data: xorshift64*. */
typedef struct rng {
    uint64_t s;
} rng_t;

static inline rng_t rng_make(uint64_t seed)
{
    rng_t r = {seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull};
    if (r.s == 0)
        r.s = 1;
    return r;
}

static inline uint64_t rng_next(rng_t *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545f4914f6cdd1dull;
}

static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* Uniform in [lo, hi). */
static inline float rng_unif(rng_t *r, float lo, float hi)
{
    float u01 = (float)(rng_next(r) >> 40) * 0x1p-24f;
    return lo + (hi - lo) * u01;
}

static inline void fill(float *x, size_t n, rng_t *r, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rng_unif(r, lo, hi);
}

/* A random weight matrix of `type` with rows `pad` bytes longer than
 * needed (nan bytes there); wf holds the exact dequantized values
 * [n_out, n_in]. */
typedef struct wmat {
    bt_matrix_t m;
    void *data;
    float *wf;
} wmat_t;

static inline wmat_t wmat_make(uint32_t type, int64_t n_in, int64_t n_out, uint64_t pad, rng_t *r)
{
    const bt_type_info_t *ti = bt_type_info(type);
    uint64_t rb;
    ck_assert_int_eq(bt_type_row_bytes(type, (uint64_t)n_in, &rb), 0);
    wmat_t w;
    memset(&w, 0, sizeof w); /* packed NULL: the weights as GGUF has them */
    w.m.type = type;
    w.m.n_in = n_in;
    w.m.n_out = n_out;
    w.m.row_bytes = rb + pad;
    w.data = xmalloc((size_t)(w.m.row_bytes * (uint64_t)n_out));
    memset(w.data, 0xff, (size_t)(w.m.row_bytes * (uint64_t)n_out));
    w.m.data = w.data;
    w.wf = xmalloc((size_t)(n_in * n_out) * sizeof(float));
    float *row = xmalloc((size_t)n_in * sizeof(float));
    for (int64_t o = 0; o < n_out; o++) {
        fill(row, (size_t)n_in, r, -1.0f, 1.0f);
        uint8_t *dst = (uint8_t *)w.data + o * w.m.row_bytes;
        ti->from_float(dst, row, n_in);
        ti->to_float(w.wf + o * n_in, dst, n_in);
    }
    free(row);
    return w;
}

static inline void wmat_free(wmat_t *w)
{
    free(w->data);
    free(w->wf);
}

/* Runs a suite, frees it, returns the number of failed tests. */
/* W in bt_ops_cpu's packed layout (64-byte aligned; free it), or NULL
 * where there is none. */
static inline void *tu_pack(const bt_matrix_t *w)
{
    const size_t bytes = bt_pack_bytes(w);
    if (bytes == 0)
        return NULL;
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    ck_assert_ptr_nonnull(p);
    bt_pack(w, p);
    return p;
}

static inline int tu_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_VERBOSE); /* a line per test: scripts/test-summary counts them */
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed;
}

/* Runs the suite make() builds once per instruction-set build of the CPU
 * kernels that this CPU runs (bt_isa_select); returns main's exit status.
 * BT_TEST_ISA=NAME (how `make check` runs them: tests/isa-run) runs that
 * build only and exits 77, a skip, when the CPU lacks it; BATON_ISA=NAME
 * also runs one, and fails when the CPU lacks it. Without either, a build
 * the CPU lacks is a SKIP line. */
static inline int tu_main_isas(Suite *(*make)(void))
{
    const char *test_isa = getenv("BT_TEST_ISA");
    const char *env = test_isa != NULL ? test_isa : getenv("BATON_ISA");
    bt_isa_t only;
    const bool one = env != NULL && *env != '\0';
    if (one && !bt_isa_parse(env, &only)) {
        fprintf(stderr, "FAIL: '%s' names no instruction-set build for this architecture\n", env);
        return 1;
    }
    int failed = 0, ran = 0;
    for (int i = 0; i < BT_ISA_COUNT; i++) {
        const bt_isa_t isa = (bt_isa_t)i;
        const char *missing = bt_isa_missing(isa);
        if (one && isa != only)
            continue;
        if (missing != NULL) {
            fprintf(stderr, "%s: isa %s: this CPU lacks %s\n",
                    one && test_isa == NULL ? "FAIL" : "SKIP", bt_isa_name(isa), missing);
            failed += one && test_isa == NULL; /* asked for by BATON_ISA: a failure */
            continue;
        }
        bt_isa_select(isa);
        fprintf(stderr, "isa %s:\n", bt_isa_name(isa));
        failed += tu_run(make());
        ran++;
    }
    if (failed > 0)
        return 1;
    return ran == 0 && test_isa != NULL ? 77 : 0;
}

#endif /* BT_TESTUTIL_H */
