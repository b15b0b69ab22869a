/* trace.c: per-stage event recording and the Chrome trace writer. */
#include "stages/trace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

bt_status_t bt_trace_init(bt_trace_t *t, int cap)
{
    *t = (bt_trace_t){0};
    t->ev = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *t->ev);
    if (t->ev == NULL)
        return BT_ERR_NOMEM;
    t->cap = cap;
    t->origin = bt_now();
    return BT_OK;
}

void bt_trace_free(bt_trace_t *t)
{
    free(t->ev);
    t->ev = NULL;
    t->n = t->cap = 0;
}

void bt_trace_start(bt_trace_t *t)
{
    t->n = 0;
    t->overflow = false;
    t->origin = bt_now();
}

double bt_trace_now(const bt_trace_t *t) { return t != NULL ? bt_now() - t->origin : 0.0; }

void bt_trace_add(bt_trace_t *t, int kind, int mb, double t0, double t1)
{
    if (t == NULL)
        return;
    if (t->n >= t->cap) {
        t->overflow = true;
        return;
    }
    t->ev[t->n++] = (bt_event_t){t0, t1, kind, mb};
}

void bt_trace_span(bt_trace_t *t, int kind, int mb, double t0)
{
    bt_trace_add(t, kind, mb, t0, bt_trace_now(t));
}

void bt_trace_mark(bt_trace_t *t, int kind, int mb)
{
    double now = bt_trace_now(t);
    bt_trace_add(t, kind, mb, now, now);
}

const char *bt_event_name(int kind)
{
    static const char *const names[BT_EV_KIND_COUNT] = {
        "compute", "recv wait", "send wait", "send posted", "send done", "token wait",
        "collective",
    };
    return kind >= 0 && kind < BT_EV_KIND_COUNT ? names[kind] : "?";
}

static bool is_wait(int kind)
{
    return kind == BT_EV_RECV_WAIT || kind == BT_EV_SEND_WAIT || kind == BT_EV_TOKEN_WAIT;
}

static int cmp_interval(const void *a, const void *b)
{
    double x = ((const double *)a)[0], y = ((const double *)b)[0];
    return (x > y) - (x < y);
}

/* Length of the union of the n intervals iv[2i], iv[2i+1]; sorts iv. */
static double union_length(double *iv, int n)
{
    qsort(iv, (size_t)n, 2 * sizeof *iv, cmp_interval);
    double total = 0, lo = 0, hi = 0;
    for (int i = 0; i < n; i++) {
        double a = iv[2 * i], b = iv[2 * i + 1];
        if (i == 0 || a > hi) {
            total += hi - lo;
            lo = a, hi = b;
        } else if (b > hi) {
            hi = b;
        }
    }
    return n > 0 ? total + hi - lo : 0;
}

bt_status_t bt_trace_stats(const bt_event_t *ev, int n, bt_trace_stats_t *out)
{
    *out = (bt_trace_stats_t){0};
    if (n == 0)
        return BT_OK;
    double *iv = malloc(sizeof(double) * 2 * (size_t)n); /* [n, 2]: t0, t1 */
    if (iv == NULL) {
        bt_log_error("trace: cannot allocate the intervals of %d events", n);
        return BT_ERR_NOMEM;
    }
    double lo = ev[0].t0, hi = ev[0].t1;
    int n_busy = 0;
    for (int i = 0; i < n; i++) {
        lo = ev[i].t0 < lo ? ev[i].t0 : lo;
        hi = ev[i].t1 > hi ? ev[i].t1 : hi;
        if (ev[i].kind == BT_EV_COMPUTE && ev[i].t1 > ev[i].t0) {
            iv[2 * n_busy] = ev[i].t0;
            iv[2 * n_busy + 1] = ev[i].t1;
            n_busy++;
        }
    }
    double busy = union_length(iv, n_busy);
    int n_any = n_busy; /* the compute intervals stay in front; the waits join them */
    for (int i = 0; i < n; i++)
        if (is_wait(ev[i].kind) && ev[i].t1 > ev[i].t0) {
            iv[2 * n_any] = ev[i].t0;
            iv[2 * n_any + 1] = ev[i].t1;
            n_any++;
        }
    double busy_or_wait = union_length(iv, n_any);
    free(iv);
    out->span = hi - lo;
    out->busy = busy;
    out->wait = busy_or_wait > busy ? busy_or_wait - busy : 0;
    return BT_OK;
}

bt_status_t bt_trace_summary(const bt_event_t *ev, const int *counts, int n_ranks,
                             bt_trace_stats_t *stage, double *span, double *bubble)
{
    double lo = 0, hi = 0, busy_sum = 0;
    int total = 0;
    for (int r = 0; r < n_ranks; r++) {
        bt_status_t st = bt_trace_stats(ev + total, counts[r], &stage[r]);
        if (st != BT_OK)
            return st;
        for (int i = total; i < total + counts[r]; i++) {
            lo = i == 0 || ev[i].t0 < lo ? ev[i].t0 : lo;
            hi = i == 0 || ev[i].t1 > hi ? ev[i].t1 : hi;
        }
        busy_sum += stage[r].busy;
        total += counts[r];
    }
    *span = hi - lo;
    *bubble = *span > 0 && n_ranks > 0 ? 1.0 - busy_sum / (n_ranks * *span) : 0;
    return BT_OK;
}

bt_status_t bt_trace_write_json(const char *path, const bt_event_t *ev, const int *counts,
                                int n_ranks)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        bt_log_error("--trace: cannot create '%s': %s", path, strerror(errno));
        return BT_ERR_IO;
    }
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    bool first = true;
    for (int r = 0; r < n_ranks; r++) {
        fprintf(f, "%s{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                   "\"args\": {\"name\": \"rank %d\"}}",
                first ? "" : ",\n", r, r);
        first = false;
    }
    for (int r = 0; r < n_ranks; r++) {
        for (int i = 0; i < counts[r]; i++, ev++) {
            double ts = ev->t0 * 1e6, dur = (ev->t1 - ev->t0) * 1e6;
            if (ev->t1 > ev->t0)
                fprintf(f, ",\n{\"name\": \"%s\", \"cat\": \"stage\", \"ph\": \"X\", \"pid\": 0, "
                           "\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"mb\": %d}}",
                        bt_event_name(ev->kind), r, ts, dur, ev->mb);
            else
                fprintf(f, ",\n{\"name\": \"%s\", \"cat\": \"mpi\", \"ph\": \"i\", \"s\": \"t\", "
                           "\"pid\": 0, \"tid\": %d, \"ts\": %.3f, \"args\": {\"mb\": %d}}",
                        bt_event_name(ev->kind), r, ts, ev->mb);
        }
    }
    fprintf(f, "\n]}\n");
    if (fclose(f) != 0) {
        bt_log_error("--trace: writing '%s' failed: %s", path, strerror(errno));
        return BT_ERR_IO;
    }
    return BT_OK;
}
