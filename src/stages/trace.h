/*
 * trace.h: timestamped events of one stage, per micro-batch.
 *
 * Each rank records into a buffer allocated up front (bt_trace_init);
 * recording is a store and never allocates. Times are seconds from the
 * trace's origin, which bt_trace_start sets on every rank right after a
 * barrier, so the tracks line up to within the barrier's skew.
 */
#ifndef BT_STAGES_TRACE_H
#define BT_STAGES_TRACE_H

#include <stdbool.h>
#include <stdio.h>

#include "common.h"

typedef enum bt_event_kind {
    BT_EV_COMPUTE = 0,  /* layers (and embed/head) of one micro-batch */
    BT_EV_RECV_WAIT,    /* blocked waiting for a micro-batch to arrive */
    BT_EV_SEND_WAIT,    /* blocked waiting for a send buffer to drain */
    BT_EV_SEND_POSTED,  /* instant: MPI_Isend posted */
    BT_EV_SEND_DONE,    /* instant: send request completed (seen by a test/wait) */
    BT_EV_TOKEN_WAIT,   /* rank 0 blocked on the token ring / done signal */
    BT_EV_COLLECTIVE,   /* a tensor-parallel gather between a stage's ranks (inside compute) */
    BT_EV_KIND_COUNT
} bt_event_kind_t;

typedef struct bt_event {
    double t0, t1; /* seconds from the origin; t1 == t0 for instants */
    int kind;
    int mb;        /* micro-batch index (decode: the step) */
} bt_event_t;

typedef struct bt_trace {
    bt_event_t *ev;
    int n, cap;
    bool overflow; /* events past cap were dropped */
    double origin;
} bt_trace_t;

bt_status_t bt_trace_init(bt_trace_t *t, int cap);
void bt_trace_free(bt_trace_t *t);
/* Drops all events and sets the origin to now. */
void bt_trace_start(bt_trace_t *t);
/* Recording through a NULL trace does nothing (and bt_trace_now gives 0),
 * so callers pass their trace pointer whether or not they trace. */
/* Seconds since the origin. */
double bt_trace_now(const bt_trace_t *t);
void bt_trace_add(bt_trace_t *t, int kind, int mb, double t0, double t1);
/* An event from t0 to now. */
void bt_trace_span(bt_trace_t *t, int kind, int mb, double t0);
/* An instant event now. */
void bt_trace_mark(bt_trace_t *t, int kind, int mb);

/* Per-stage totals over the trace's span [first event, last event]. An
 * instant adds nothing; overlapping events count their time once: busy is
 * the length of the union of compute events, wait that of the union of
 * receive, send and token waits less the part that is also busy, so
 * busy + wait <= span always. */
typedef struct bt_trace_stats {
    double span;    /* seconds from first start to last end */
    double busy;    /* seconds computing */
    double wait;    /* seconds blocked on receive, send or token, not computing */
} bt_trace_stats_t;

/* One stage's totals over its n events. Returns BT_OK, or BT_ERR_NOMEM
 * (logged) with *out zero. */
bt_status_t bt_trace_stats(const bt_event_t *ev, int n, bt_trace_stats_t *out);

/* Over every rank's events (counts[r] events of rank r, in rank order):
 * *span, the seconds from the first start to the last end of any rank;
 * stage[r], each rank's totals (stage[r].span its own); *bubble, the idle
 * share of the n_ranks stages over the common span,
 * 1 - sum of busy / (n_ranks * span), in [0, 1] (0 when the span is 0).
 * Returns BT_OK or BT_ERR_NOMEM (logged). */
bt_status_t bt_trace_summary(const bt_event_t *ev, const int *counts, int n_ranks,
                             bt_trace_stats_t *stage, double *span, double *bubble);

/* Writes the Chrome trace format (what Perfetto and chrome://tracing open):
 * one track (tid) per rank. ev holds counts[r] events of rank r in order. */
bt_status_t bt_trace_write_json(const char *path, const bt_event_t *ev, const int *counts,
                                int n_ranks);

const char *bt_event_name(int kind);

#endif /* BT_STAGES_TRACE_H */
