/* plan.c: closed-form schedule times and their discrete-event simulation. */
#include "plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the profile ---- */

/* Index i and weight w with x between a[i] and a[i + 1] (w in [0, 1]), or
 * beyond the ends: i = 0, w < 0 below; i = n - 2, w > 1 above; n == 1:
 * i = 0, w = 0. */
static void bracket(const int *a, int n, double x, int *i, double *w)
{
    *i = 0;
    *w = 0.0;
    if (n < 2)
        return;
    int k = 0;
    while (k < n - 2 && x > a[k + 1])
        k++;
    *i = k;
    *w = (x - a[k]) / (double)(a[k + 1] - a[k]);
}

/* Row-profile value at rows: linear between measured counts, in
 * proportion beyond the largest (a micro-batch that size is that many
 * rows' work), the smallest's below it. */
static double at_rows(const bt_profile_t *p, const double *v, double rows)
{
    const int n = p->n_rows;
    if (rows <= p->rows[0])
        return v[0];
    if (rows >= p->rows[n - 1])
        return v[n - 1] * rows / p->rows[n - 1];
    int i;
    double w;
    bracket(p->rows, n, rows, &i, &w);
    return v[i] + w * (v[i + 1] - v[i]);
}

/* A [n_ctx][n_rows] table at (rows, ctx), interpolated. */
static double layer_table(const bt_profile_t *p, const double *tab, double rows, double ctx)
{
    int i = 0;
    double w = 0.0;
    if (p->n_ctx > 1) {
        bracket(p->ctx, p->n_ctx, ctx, &i, &w);
        if (w < 0.0) /* below the smallest context measured: no cheaper */
            w = 0.0;
    }
    const double lo = at_rows(p, tab + (size_t)i * p->n_rows, rows);
    if (p->n_ctx < 2)
        return lo;
    const double hi = at_rows(p, tab + (size_t)(i + 1) * p->n_rows, rows);
    return lo + w * (hi - lo); /* linear beyond the largest context too */
}

double bt_profile_layer(const bt_profile_t *p, double rows, double ctx)
{
    return layer_table(p, p->layer_s, rows, ctx);
}

/* Whether the profile times its layers by kind. */
static bool kinds(const bt_profile_t *p)
{
    return p->dense_s != NULL && p->expert_s != NULL && p->n_dense > 0;
}

double bt_plan_experts(int n_expert, int k, double spread, double rows)
{
    if (n_expert <= 0 || rows <= 1)
        return n_expert > 0 ? k : 0.0;
    const double independent = n_expert * (1 - pow(1 - (double)k / n_expert, rows));
    return fmin(n_expert, k + spread * (independent - k));
}

double bt_plan_spread(int n_expert, int k, double rows, double chosen)
{
    const double independent = bt_plan_experts(n_expert, k, 1.0, rows);
    return n_expert > 0 && rows > 1 && independent > k ? fmax(0.0, (chosen - k) / (independent - k))
                                                       : -1.0;
}

double bt_profile_layer_at(const bt_profile_t *p, int il, double rows, double ctx)
{
    const double t = !kinds(p) ? bt_profile_layer(p, rows, ctx)
                               : layer_table(p, il < p->n_dense ? p->dense_s : p->expert_s, rows,
                                             ctx);
    if (p->experts == NULL || p->spread < 0 || il < p->n_dense)
        return t;
    /* the workload's distinct experts for the profile's, each at its cost */
    const double own = fmin(p->n_expert, layer_table(p, p->experts, rows, ctx));
    const double want = bt_plan_experts(p->n_expert, p->n_expert_used, p->spread, rows);
    return fmax(0.0, t + (want - own) * p->expert_one_s);
}

double bt_profile_head(const bt_profile_t *p, double rows)
{
    return rows > 0 ? at_rows(p, p->head_s, rows) : 0.0;
}

double bt_profile_embed(const bt_profile_t *p, double rows)
{
    return at_rows(p, p->embed_s, rows);
}

double bt_profile_sample(const bt_profile_t *p, double rows)
{
    return p->sample_s != NULL && rows > 0 ? at_rows(p, p->sample_s, rows) : 0.0;
}

double bt_profile_rest(const bt_profile_t *p, double rows)
{
    return p->rest_s != NULL && rows > 0 ? at_rows(p, p->rest_s, rows) : 0.0;
}

double bt_profile_crowding(const bt_profile_t *p, double rows)
{
    if (p->shared_s == NULL)
        return 1.0;
    const double alone = bt_profile_layer(p, rows, 0);
    return alone > 0 ? fmax(1.0, at_rows(p, p->shared_s, rows) / alone) : 1.0;
}

/* ---- stage and hop times ---- */

double bt_plan_slowdown(int ranks, int threads, int cores)
{
    const double want = (double)ranks * threads;
    return cores > 0 && want > cores ? want / cores : 1.0;
}

int bt_plan_sharing(int computing, int all, int threads, int cores)
{
    return cores > 0 && (double)all * threads > cores ? all : computing;
}

double bt_plan_crowding(int computing, int threads, int cores)
{
    const int others = cores - threads;
    if (others <= 0 || computing <= 1)
        return 0.0;
    return fmin(1.0, (double)(computing - 1) * threads / others);
}

double bt_plan_gather_s(const bt_plan_tensor_t *t, int rows)
{
    if (t->tp <= 1)
        return 0.0;
    return t->gathers * t->latency_s +
           (t->bandwidth_Bps > 0 ? rows * t->bytes_row / t->bandwidth_Bps : 0.0);
}

double bt_plan_bcast_s(const bt_plan_tensor_t *t, const bt_profile_t *prof, int rows)
{
    if (t->tp <= 1)
        return 0.0;
    const double bytes = prof->msg_bytes + rows * prof->act_bytes_row;
    return t->latency_s + (t->bandwidth_Bps > 0 ? bytes / t->bandwidth_Bps : 0.0);
}

double bt_plan_tensor_share(const bt_plan_tensor_t *t, int rows)
{
    if (t->tp <= 1)
        return 1.0;
    if (t->expert_frac <= 0)
        return t->share;
    const double x = rows > 1 ? log2(rows) : 0.0;
    const int i = x < BT_PLAN_EXPERT_ROWS - 1 ? (int)x : BT_PLAN_EXPERT_ROWS - 2;
    const double w = fmin(x - i, 1.0);
    const double ex = t->expert_share[i] + w * (t->expert_share[i + 1] - t->expert_share[i]);
    return t->share + t->expert_frac * ex;
}

double bt_plan_stage_s(const bt_plan_pipe_t *p, int s, int rows, int ctx, int logit_rows)
{
    const bt_plan_tensor_t *tp = &p->tensor;
    const bool split = tp->tp > 1;
    const int layers = p->bounds[s + 1] - p->bounds[s];
    /* by kind where the profile has kinds: the stage's dense layers, then its others */
    const int a = p->bounds[s], n_dense = kinds(p->prof) ? p->prof->n_dense : 0;
    const int dense = a < n_dense ? (p->bounds[s + 1] < n_dense ? p->bounds[s + 1] : n_dense) - a
                                  : 0;
    double t = 0.0;
    for (int kind = 0; kind < 2; kind++) {
        const int n = kind == 0 ? dense : layers - dense, il = kind == 0 ? 0 : n_dense;
        if (n == 0)
            continue;
        double layer = bt_profile_layer_at(p->prof, il, rows, ctx);
        if (split) { /* the products by the rank's share of the weights, attention over
                      * the context by its heads', the rest of a layer whole */
            const double flat = bt_profile_layer_at(p->prof, il, rows, 0);
            const double rest = fmin(flat, bt_profile_rest(p->prof, rows));
            const double share = bt_plan_tensor_share(tp, rows);
            const double heads = tp->attn_share > 0 ? tp->attn_share : share;
            layer = (flat - rest) * share + rest + (layer - flat) * heads;
        }
        t += n * layer;
    }
    if (s == 0)
        t += bt_profile_embed(p->prof, rows);
    if (s == p->n_stages - 1)
        t += bt_profile_head(p->prof, logit_rows) * (split ? tp->head_share : 1.0) +
             bt_profile_sample(p->prof, logit_rows); /* on the leader alone */
    /* the node's other ranks at work slow memory; the gathers wait on the
     * links, not the cores */
    const double crowd = 1.0 + p->crowding * (bt_profile_crowding(p->prof, rows) - 1.0);
    return t * p->slowdown * crowd + layers * bt_plan_gather_s(tp, rows) +
           bt_plan_bcast_s(tp, p->prof, rows);
}

double bt_plan_msg_s(const bt_plan_pipe_t *p, int rows)
{
    const double bytes = p->prof->msg_bytes + rows * p->prof->act_bytes_row;
    return p->latency_s + (p->bandwidth_Bps > 0 ? bytes / p->bandwidth_Bps : 0.0);
}

/* The token after the last position back to the first stage. */
static double ring_back_s(const bt_plan_pipe_t *p)
{
    return p->n_stages > 1 ? p->latency_s : 0.0;
}

/* Micro-batch m of a prompt of n_tok in steps of ub: rows, and the
 * positions before it. */
static int mb_rows(int n_tok, int ub, int m)
{
    return n_tok - m * ub < ub ? n_tok - m * ub : ub;
}

/* ---- closed forms ---- */

double bt_plan_prefill(const bt_plan_pipe_t *p, int n_tok, int ub, bt_plan_mode_t mode)
{
    const int S = p->n_stages, M = (n_tok + ub - 1) / ub;
    if (mode == BT_PLAN_SYNC || S == 1) {
        double t = 0.0;
        for (int m = 0; m < M; m++) {
            const int r = mb_rows(n_tok, ub, m);
            for (int s = 0; s < S; s++)
                t += bt_plan_stage_s(p, s, r, m * ub, m == M - 1 ? 1 : 0);
            t += (S - 1) * bt_plan_msg_s(p, r);
        }
        return t + (M - 1) * ring_back_s(p) * (S > 1) + ring_back_s(p);
    }
    /* GPipe: a flow shop of 2S - 1 machines (stages, and the hops between
     * them) through which the micro-batches pass in order: machine k ends
     * m at max(its end of m - 1, machine k - 1's end of m) + m's time
     * there. Equal stages and free hops give (M + S - 1) t. */
    double *end = calloc((size_t)(2 * S - 1), sizeof *end);
    if (end == NULL)
        return NAN;
    for (int m = 0; m < M; m++) {
        const int r = mb_rows(n_tok, ub, m);
        double prev = 0.0;
        for (int k = 0; k < 2 * S - 1; k++) {
            const double t = k % 2 == 0 ? bt_plan_stage_s(p, k / 2, r, m * ub, m == M - 1)
                                        : bt_plan_msg_s(p, r);
            end[k] = fmax(end[k], prev) + t;
            prev = end[k];
        }
    }
    const double t = end[2 * S - 2] + ring_back_s(p);
    free(end);
    return t;
}

double bt_plan_decode(const bt_plan_pipe_t *p, int n_seq, int n_groups, int ctx)
{
    const int S = p->n_stages, rows = (n_seq + n_groups - 1) / n_groups;
    double ring = ring_back_s(p), slowest = 0.0;
    for (int s = 0; s < S; s++) {
        const double t = bt_plan_stage_s(p, s, rows, ctx, rows);
        ring += t;
        slowest = fmax(slowest, t);
    }
    if (S > 1) {
        ring += (S - 1) * bt_plan_msg_s(p, rows);
        slowest = fmax(slowest, bt_plan_msg_s(p, rows));
    }
    return fmax(ring, n_groups * slowest);
}

/* ---- the simulator ---- */

void bt_plan_sim_free(bt_plan_sim_t *sim)
{
    free(sim->events);
    free(sim->counts);
    *sim = (bt_plan_sim_t){0};
}

/* Events go to per-stage lists of cap entries each, then are packed. */
typedef struct evlog {
    bt_event_t *ev;
    int *count;
    int cap;
} evlog_t;

static void ev_add(evlog_t *l, int s, int kind, int mb, double t0, double t1)
{
    if (l->ev == NULL || t1 <= t0 || l->count[s] >= l->cap)
        return;
    l->ev[(size_t)s * l->cap + l->count[s]++] = (bt_event_t){t0, t1, kind, mb};
}

static bt_status_t ev_open(evlog_t *l, int n_stages, int cap, bool on)
{
    *l = (evlog_t){.cap = cap};
    if (!on)
        return BT_OK;
    l->ev = malloc(sizeof *l->ev * (size_t)n_stages * (size_t)cap);
    l->count = calloc((size_t)n_stages, sizeof *l->count);
    if (l->ev == NULL || l->count == NULL) {
        free(l->ev);
        free(l->count);
        *l = (evlog_t){0};
        return BT_ERR_NOMEM;
    }
    return BT_OK;
}

/* Moves the lists into sim, stage after stage. */
static void ev_close(evlog_t *l, int n_stages, bt_plan_sim_t *sim)
{
    sim->n_stages = n_stages;
    if (l->ev == NULL)
        return;
    size_t k = 0;
    for (int s = 0; s < n_stages; s++)
        for (int i = 0; i < l->count[s]; i++)
            l->ev[k++] = l->ev[(size_t)s * l->cap + i];
    sim->events = l->ev;
    sim->counts = l->count;
}

bt_status_t bt_plan_simulate_prefill(const bt_plan_pipe_t *p, int n_tok, int ub,
                                     bt_plan_mode_t mode, bool with_events, bt_plan_sim_t *sim)
{
    const int S = p->n_stages, M = (n_tok + ub - 1) / ub, K = BT_PLAN_SLOTS;
    *sim = (bt_plan_sim_t){0};
    /* per stage and micro-batch: compute end, send end (the slot is free
     * again then; the last stage frees it when it has computed) */
    double *c_start = calloc((size_t)S * (size_t)M, sizeof *c_start);
    double *c_end = calloc((size_t)S * (size_t)M, sizeof *c_end);
    double *s_end = calloc((size_t)S * (size_t)M, sizeof *s_end);
    evlog_t log;
    bt_status_t st = c_start && c_end && s_end ? ev_open(&log, S, 3 * M + 1, with_events)
                                               : BT_ERR_NOMEM;
    if (st != BT_OK) {
        free(c_start);
        free(c_end);
        free(s_end);
        return st;
    }
#define CS(s, m) c_start[(size_t)(s) * M + (size_t)(m)]
#define CE(s, m) c_end[(size_t)(s) * M + (size_t)(m)]
#define SE(s, m) s_end[(size_t)(s) * M + (size_t)(m)]
    /* when stage s's slot for micro-batch m is free again */
#define SLOT_FREE(s, m) ((m) < K ? 0.0 : (s) == S - 1 ? CE(s, (m) - K) : SE(s, (m) - K))
    const bool sync = mode == BT_PLAN_SYNC && S > 1;
    for (int m = 0; m < M; m++) {
        const int r = mb_rows(n_tok, ub, m);
        const double msg = bt_plan_msg_s(p, r);
        for (int s = 0; s < S; s++) {
            const double busy = m > 0 ? CE(s, m - 1) : 0.0;
            double have = SLOT_FREE(s, m); /* the slot, and for s > 0 the data in it */
            if (s > 0)
                have = fmax(have, SE(s - 1, m));
            if (s == 0 && sync && m > 0)
                have = fmax(have, CE(S - 1, m - 1) + p->latency_s); /* DONE */
            const double start = fmax(busy, have);
            ev_add(&log, s, s > 0 ? BT_EV_RECV_WAIT : sync ? BT_EV_TOKEN_WAIT : BT_EV_SEND_WAIT,
                   m, busy, start);
            CS(s, m) = start;
            CE(s, m) = start + bt_plan_stage_s(p, s, r, m * ub, m == M - 1);
            ev_add(&log, s, BT_EV_COMPUTE, m, start, CE(s, m));
            if (s == S - 1)
                continue;
            /* the receiver posts the receive of m when it starts on m - 1
             * (its slot free); the hop carries one message at a time */
            double posted = SLOT_FREE(s + 1, m);
            if (m > 0)
                posted = fmax(posted, fmax(CS(s + 1, m - 1), SE(s, m - 1)));
            const double send = fmax(CE(s, m), posted);
            SE(s, m) = send + msg;
        }
    }
    sim->seconds = CE(S - 1, M - 1) + ring_back_s(p);
#undef SLOT_FREE
#undef SE
#undef CE
#undef CS
    ev_close(&log, S, sim);
    free(c_start);
    free(c_end);
    free(s_end);
    return BT_OK;
}

bt_status_t bt_plan_simulate_decode(const bt_plan_pipe_t *p, int n_seq, int n_groups,
                                    int n_steps, int ctx, bool with_events, bt_plan_sim_t *sim)
{
    const int S = p->n_stages, G = n_groups, J = n_steps * n_groups;
    *sim = (bt_plan_sim_t){0};
    /* job j: step j / G of group j % G, issued in that order */
    double *c_end = calloc((size_t)S * (size_t)J, sizeof *c_end);
    double *s_end = calloc((size_t)S * (size_t)J, sizeof *s_end);
    evlog_t log;
    bt_status_t st = c_end && s_end ? ev_open(&log, S, 2 * J + 1, with_events) : BT_ERR_NOMEM;
    if (st != BT_OK) {
        free(c_end);
        free(s_end);
        return st;
    }
#define CE(s, j) c_end[(size_t)(s) * J + (size_t)(j)]
#define SE(s, j) s_end[(size_t)(s) * J + (size_t)(j)]
    for (int j = 0; j < J; j++) {
        const int g = j % G, rows = n_seq / G + (g < n_seq % G);
        const double msg = bt_plan_msg_s(p, rows);
        for (int s = 0; s < S; s++) {
            const double busy = j > 0 ? CE(s, j - 1) : 0.0;
            double have = 0.0;
            if (s > 0)
                have = SE(s - 1, j);
            else if (j >= G) /* the group's tokens back from the last stage */
                have = CE(S - 1, j - G) + ring_back_s(p);
            const double start = fmax(busy, have);
            ev_add(&log, s, s > 0 ? BT_EV_RECV_WAIT : BT_EV_TOKEN_WAIT, j / G, busy, start);
            CE(s, j) = start + bt_plan_stage_s(p, s, rows, ctx, rows);
            ev_add(&log, s, BT_EV_COMPUTE, j / G, start, CE(s, j));
            if (s < S - 1)
                SE(s, j) = fmax(CE(s, j), j > 0 ? SE(s, j - 1) : 0.0) + msg;
        }
    }
    double end = 0.0;
    for (int j = J - G > 0 ? J - G : 0; j < J; j++)
        end = fmax(end, CE(S - 1, j) + ring_back_s(p));
    sim->seconds = end;
#undef SE
#undef CE
    ev_close(&log, S, sim);
    free(c_end);
    free(s_end);
    return BT_OK;
}

bt_status_t bt_plan_write_trace(const bt_plan_sim_t *sim, const char *path)
{
    if (sim->events == NULL) {
        bt_log_error("plan: no simulated events to write to %s", path);
        return BT_ERR_ARG;
    }
    return bt_trace_write_json(path, sim->events, sim->counts, sim->n_stages);
}
