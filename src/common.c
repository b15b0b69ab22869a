/* common.c: status names, logging and the clock.
 *
 * The log settings are process-wide atomics (set once by a program's main,
 * read by any thread). Capturing belongs to the thread that turned it on:
 * each thread has its own buffer, so threads that each run a model (one
 * bt_forward_t per thread) never mix or lose each other's messages. */
#include "common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static atomic_int log_rank = -1;
static atomic_int log_level = BT_LOG_INFO;
static _Thread_local int capturing;
static _Thread_local char captured[4096];
static _Thread_local size_t captured_len;

const char *bt_status_str(bt_status_t st)
{
    switch (st) {
    case BT_OK: return "ok";
    case BT_ERR_ARG: return "bad argument";
    case BT_ERR_IO: return "I/O error";
    case BT_ERR_FORMAT: return "malformed file";
    case BT_ERR_UNSUPPORTED: return "unsupported";
    case BT_ERR_NOMEM: return "out of memory";
    case BT_ERR_MPI: return "MPI error";
    }
    return "unknown status";
}

void bt_log_set_rank(int rank) { atomic_store(&log_rank, rank); }
void bt_log_set_level(bt_log_level_t level) { atomic_store(&log_level, (int)level); }
bt_log_level_t bt_log_get_level(void) { return (bt_log_level_t)atomic_load(&log_level); }

void bt_log(bt_log_level_t level, const char *fmt, ...)
{
    if ((int)level > atomic_load(&log_level))
        return;
    static const char *const names[] = {"error", "warning", "info", "debug"};
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char line[1100];
    const int rank = atomic_load(&log_rank);
    if (rank >= 0)
        snprintf(line, sizeof line, "[rank %d] %s: %s\n", rank, names[level], msg);
    else
        snprintf(line, sizeof line, "%s: %s\n", names[level], msg);
    if (capturing && level <= BT_LOG_WARN) {
        size_t n = strlen(line);
        if (captured_len + n < sizeof captured) {
            memcpy(captured + captured_len, line, n + 1);
            captured_len += n;
        }
        return;
    }
    fputs(line, stderr);
}

void bt_log_capture(int on) { capturing = on; }

void bt_log_flush_captured(int print)
{
    if (print && captured_len > 0)
        fputs(captured, stderr);
    captured_len = 0;
    captured[0] = '\0';
}

double bt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool bt_mem_from_env(uint64_t *bytes, char *why, size_t why_size)
{
    const char *env = getenv("BATON_MEM_AVAILABLE");
    *bytes = 0;
    if (env == NULL || *env == '\0')
        return true;
    char *end;
    errno = 0;
    const double v = strtod(env, &end);
    const double unit = *end == 'K'   ? 1024.0
                        : *end == 'M' ? 1048576.0
                        : *end == 'G' ? 1073741824.0
                        : *end == 'T' ? 1099511627776.0
                                      : 1.0;
    end += unit > 1.0;
    if (errno == 0 && end != env && *end == '\0' && v >= 1.0 && v * unit < 1.8e19) {
        *bytes = (uint64_t)(v * unit);
        return true;
    }
    snprintf(why, why_size, "BATON_MEM_AVAILABLE='%s' is not a size: give bytes, or a number "
             "with K, M, G or T (binary units)", env);
    return false;
}

uint64_t bt_mem_available(void)
{
    char why[8];
    uint64_t env;
    if (bt_mem_from_env(&env, why, sizeof why) && env > 0)
        return env;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

void *bt_alloc_huge(size_t bytes)
{
    const size_t huge = 2u << 20, rounded = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, rounded ? rounded : huge);
#ifdef MADV_HUGEPAGE
    if (p != NULL)
        madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return p;
}

bt_status_t bt_mem_check(const char *what, uint64_t need)
{
    uint64_t avail = bt_mem_available();
    if (avail == 0 || need <= avail)
        return BT_OK;
    bt_log_error("%s needs %.1f MiB but only %.1f MiB of memory is available", what,
                 (double)need / 1048576.0, (double)avail / 1048576.0);
    return BT_ERR_NOMEM;
}

int bt_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bt_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bt_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
