/*
 * common.h: status codes and logging shared by every part of baton.
 *
 * Library functions return a bt_status_t: BT_OK (0) on success, a negative
 * value on failure. The function that first sees an error logs it once with
 * bt_log_error() (naming the exact cause and the offending value); callers
 * pass the status up without logging again. Only a program's main() turns a
 * status into an exit code or MPI_Abort.
 *
 * Logs go to stderr prefixed with "[rank N]" once bt_log_set_rank() was
 * called (the programs call it after MPI_Init); results go to stdout.
 */
#ifndef BT_COMMON_H
#define BT_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum bt_status {
    BT_OK = 0,
    BT_ERR_ARG = -1,     /* bad argument or flag value */
    BT_ERR_IO = -2,      /* open/read/write/mmap failed */
    BT_ERR_FORMAT = -3,  /* a file is malformed or truncated */
    BT_ERR_UNSUPPORTED = -4, /* valid but not supported (type, architecture) */
    BT_ERR_NOMEM = -5,   /* allocation failed or would exceed a limit */
    BT_ERR_MPI = -6,     /* an MPI call failed or ranks disagree */
} bt_status_t;

/* Short name of a status ("ok", "bad argument", ...); never NULL. */
const char *bt_status_str(bt_status_t st);

typedef enum bt_log_level {
    BT_LOG_ERROR = 0,
    BT_LOG_WARN = 1,
    BT_LOG_INFO = 2,
    BT_LOG_DEBUG = 3,
} bt_log_level_t;

/* Sets the rank printed in the prefix (-1, the default, prints no rank).
 * The rank and the level are process-wide; any thread may read or set them. */
void bt_log_set_rank(int rank);
/* Messages above this level are dropped (default BT_LOG_INFO). */
void bt_log_set_level(bt_log_level_t level);
bt_log_level_t bt_log_get_level(void);

/* printf-style; appends a newline. Thread-safe at the granularity of one
 * message (one fprintf call). */
void bt_log(bt_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Capturing: while on, errors and warnings are kept instead of printed, so
 * ranks that fail alike can agree on one rank to report them. flush prints
 * (print = true) or drops what was kept. Both act on the calling thread's
 * own buffer: another thread's messages are neither kept nor flushed. */
void bt_log_capture(int on);
void bt_log_flush_captured(int print);

#define bt_log_error(...) bt_log(BT_LOG_ERROR, __VA_ARGS__)
#define bt_log_warn(...) bt_log(BT_LOG_WARN, __VA_ARGS__)
#define bt_log_info(...) bt_log(BT_LOG_INFO, __VA_ARGS__)
#define bt_log_debug(...) bt_log(BT_LOG_DEBUG, __VA_ARGS__)

/* Overflow-checked size arithmetic: return 0 on success, -1 on overflow
 * (then *out is untouched). */
static inline int bt_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return -1;
    *out = r;
    return 0;
}

static inline int bt_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return -1;
    *out = r;
    return 0;
}

/* Memory the kernel says can be allocated without swapping
 * (MemAvailable in /proc/meminfo), in bytes; 0 when unknown. The
 * environment variable BATON_MEM_AVAILABLE (bytes, or a number with K, M,
 * G or T: binary units) replaces it: to keep memory back for something
 * else on the node, or to test what baton does on a smaller one. */
uint64_t bt_mem_available(void);

/* BATON_MEM_AVAILABLE: true with *bytes its value (0 when unset), or false
 * with the reason in why when it is not a size. */
bool bt_mem_from_env(uint64_t *bytes, char *why, size_t why_size);

/* BT_ERR_NOMEM with one message naming what, the bytes needed and the bytes
 * available, when need exceeds what bt_mem_available() reports. */
bt_status_t bt_mem_check(const char *what, uint64_t need);

/* bytes (> 0) of memory aligned to 2 MiB and marked for transparent huge
 * pages (MADV_HUGEPAGE: where the kernel has them in "madvise" mode, a
 * stream over weights then takes one TLB entry per 2 MiB, not per 4 KiB);
 * NULL when out of memory. free() it. */
void *bt_alloc_huge(size_t bytes);

/* Monotonic wall clock in seconds. */
double bt_now(void);

/* qsort's order of doubles, ascending. */
int bt_cmp_double(const void *a, const void *b);

/* The median of v[0 .. n) (n >= 1; of an even count the mean of the
 * middle two), sorting v in place. */
double bt_median(double *v, int n);

#endif /* BT_COMMON_H */
