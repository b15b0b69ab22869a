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
    };
    return kind >= 0 && kind < BT_EV_KIND_COUNT ? names[kind] : "?";
}

void bt_trace_stats(const bt_event_t *ev, int n, bt_trace_stats_t *out)
{
    *out = (bt_trace_stats_t){0};
    if (n == 0)
        return;
    double lo = ev[0].t0, hi = ev[0].t1;
    for (int i = 0; i < n; i++) {
        double d = ev[i].t1 - ev[i].t0;
        lo = ev[i].t0 < lo ? ev[i].t0 : lo;
        hi = ev[i].t1 > hi ? ev[i].t1 : hi;
        if (ev[i].kind == BT_EV_COMPUTE)
            out->busy += d;
        else if (ev[i].kind == BT_EV_RECV_WAIT || ev[i].kind == BT_EV_SEND_WAIT ||
                 ev[i].kind == BT_EV_TOKEN_WAIT)
            out->wait += d;
    }
    out->span = hi - lo;
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
