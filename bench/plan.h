/*
 * plan.h: what a pipeline of S stages will deliver, predicted from measured
 * costs (a profile, `baton-bench --profile`) and a description of the
 * links, two ways:
 *   - closed forms of the schedules (fill, steady state, drain; the ring
 *     of decode), cheap enough to search splits, micro-batch sizes and
 *     group counts;
 *   - a discrete-event simulator that runs the same schedules step by step
 *     as the transport does (a ring of BT_PLAN_SLOTS message slots per
 *     stage, sends and receives that take link time, compute that takes
 *     profile time) and can write the Chrome trace of a real run's format.
 * Knows no MPI, no HDF5 and no model file. Times in seconds, bytes in
 * bytes. Every figure it gives is a prediction, never a measurement.
 */
#ifndef BT_BENCH_PLAN_H
#define BT_BENCH_PLAN_H

#include <stdbool.h>

#include "common.h"
#include "stages/trace.h"

/* The transport's message slots per stage (stages/transport.h). */
#define BT_PLAN_SLOTS 3

/* Measured costs of one model at one thread count. Times are per call on
 * one rank; between measured points they are interpolated linearly, and
 * beyond the last they grow in proportion (rows) or linearly (context). */
typedef struct bt_profile {
    int n_layer;
    int n_rows;
    const int *rows;       /* [n_rows] ascending, >= 1 */
    int n_ctx;
    const int *ctx;        /* [n_ctx] ascending, >= 0: positions already in the cache */
    const double *layer_s; /* [n_ctx][n_rows]: one layer on that many rows at that context */
    const double *head_s;  /* [n_rows]: the final norm and head on that many rows */
    const double *embed_s; /* [n_rows]: the embedding lookup */
    double act_bytes_row;  /* bytes a row adds to a stage-boundary message */
    double msg_bytes;      /* bytes of a message besides its rows */
    const double *shared_s; /* [n_rows] or NULL: one layer at the smallest context while
                             * every other core of the node reads memory */
    const double *sample_s; /* [n_rows] or NULL: choosing the tokens of that many rows */
    const double *rest_s;   /* [n_rows] or NULL: what a layer at the smallest context does
                             * besides its products and attention (norms, routing,
                             * activations, ...), which every tensor rank does whole */
    /* layers of two kinds (DeepSeek's first n_dense layers dense, the others experts):
     * each kind's own [n_ctx][n_rows], or NULL (every layer costs layer_s) */
    int n_dense;
    const double *dense_s, *expert_s;
    /* layers with experts (all, or those past n_dense): how many distinct
     * experts a call's rows choose sets how much of the experts it reads,
     * and that depends on the router and the sequences, not on the machine.
     * experts: [n_ctx][n_rows] the distinct experts the profile's calls chose
     * (NULL: none recorded); expert_one_s: what one more distinct expert adds
     * to a call; spread: the workload's choices, a call of r rows choosing
     * k + spread (E (1 - (1 - k/E)^r) - k) of the E experts (0: every row
     * the same k, 1: rows independent and uniform; < 0: as the profile's
     * calls chose, no correction). */
    const double *experts;
    double expert_one_s;
    int n_expert, n_expert_used;
    double spread;
} bt_profile_t;

double bt_profile_layer(const bt_profile_t *p, double rows, double ctx);

/* Layer il's time: its kind's where the profile has kinds, else
 * bt_profile_layer; a layer with experts, for the workload's spread. */
double bt_profile_layer_at(const bt_profile_t *p, int il, double rows, double ctx);
/* The distinct experts a call of rows chooses at spread (bt_profile_t), of
 * n_expert with k each. */
double bt_plan_experts(int n_expert, int k, double spread, double rows);

/* The spread at which a call of rows chooses `chosen` distinct experts
 * (-1: rows <= 1 or no experts, where every spread gives k). */
double bt_plan_spread(int n_expert, int k, double rows, double chosen);

double bt_profile_head(const bt_profile_t *p, double rows);
double bt_profile_embed(const bt_profile_t *p, double rows);
double bt_profile_sample(const bt_profile_t *p, double rows); /* 0 without sample_s */
double bt_profile_rest(const bt_profile_t *p, double rows);   /* 0 without rest_s */

/* How much slower a rank computes rows while the node's other cores work
 * too: shared_s over layer_s at the smallest context (1 without shared_s, never
 * below 1). Memory bandwidth is the node's, not the core's: decode,
 * which streams the weights, slows most. */
double bt_profile_crowding(const bt_profile_t *p, double rows);

/* Tensor parallelism inside every stage (docs/design.md): T ranks split
 * each layer and meet at a gather after each of its parts, so a part takes
 * the time of the rank with the most of it, and a layer the sum of those.
 * A layer then costs that share of the one-rank time (of its weights at
 * context 0, of its heads for what the context adds: attention) plus its
 * gathers: each a fixed cost and the bytes a rank receives at the stage's
 * link rate; the stage's leader also broadcasts each micro-batch's rows to
 * the others. Experts: a micro-batch's rows choose them at random, so the
 * rank with the most (row, expert) pairs sets the pace, a share that falls
 * towards its even one as rows grow (expert_share, by rows). */
#define BT_PLAN_EXPERT_ROWS 12 /* expert_share at 1, 2, 4, ... 2048 rows */

typedef struct bt_plan_tensor {
    int tp;               /* ranks per stage; 0 or 1: none (the rest unused) */
    double share;         /* the sum over a layer's parts but the experts of the
                           * largest rank's share of the part's weights, as a
                           * share of the layer's (1/tp if even) */
    double attn_share;    /* the largest rank's share of the query heads: of the time a
                           * layer's attention adds with context (0: share) */
    double head_share;    /* of the head's (vocabulary rows) */
    double expert_frac;   /* the experts' share of a layer's weights a row reads (0: dense) */
    double expert_share[BT_PLAN_EXPERT_ROWS]; /* the expected largest rank's share of a
                           * micro-batch's (row, expert) pairs at 2^i rows */
    int gathers;          /* per layer: 4 (dense FFN), 3 (experts) */
    double bytes_row;     /* bytes a rank receives per row in one layer's gathers */
    double latency_s;     /* one gather's (or broadcast's) fixed cost */
    double bandwidth_Bps; /* bytes a rank receives per second in them */
} bt_plan_tensor_t;

/* The largest tensor rank's share of a layer's weights for a micro-batch
 * of rows (share, plus expert_frac times expert_share interpolated in
 * log2 rows; 1 without tensor ranks). */
double bt_plan_tensor_share(const bt_plan_tensor_t *t, int rows);

/* The pipeline: stage s owns layers [bounds[s], bounds[s + 1]); each hop
 * s -> s + 1 (and the last stage's token back to the first) takes latency
 * plus bytes / bandwidth; slowdown multiplies every compute time (ranks
 * and threads beyond a node's cores: 1 when each has its own). tensor:
 * the stages' tensor ranks (zero: one rank a stage). crowding: the share
 * (0..1) of a node's other cores that compute at the same time as a rank:
 * its compute takes 1 + crowding (bt_profile_crowding - 1) times longer. */
typedef struct bt_plan_pipe {
    const bt_profile_t *prof;
    int n_stages;
    const int *bounds;
    double latency_s;
    double bandwidth_Bps;
    double slowdown;
    bt_plan_tensor_t tensor;
    double crowding;
} bt_plan_pipe_t;

/* A node's cores: compute slows by ranks x threads / cores beyond them
 * (1 within). */
double bt_plan_slowdown(int ranks, int threads, int cores);

/* The ranks that share a node's cores when `computing` of its `all` ranks
 * compute at once: those alone while every rank has a core to itself
 * (waiting ranks yield theirs, --mca mpi_yield_when_idle); all of them
 * when they outnumber the cores, since a waiting rank polls and the
 * kernel's scheduler gives every runnable process its fair share. */
int bt_plan_sharing(int computing, int all, int threads, int cores);

/* bt_plan_pipe_t.crowding when `computing` ranks of `threads` compute at
 * once on a node: the share of the node's other cores (beyond one rank's
 * threads) the others keep busy, at most 1. */
double bt_plan_crowding(int computing, int threads, int cores);

/* Seconds of one layer's gathers, and of the leader's broadcast, for a
 * micro-batch of rows (0 without tensor ranks). */
double bt_plan_gather_s(const bt_plan_tensor_t *t, int rows);
double bt_plan_bcast_s(const bt_plan_tensor_t *t, const bt_profile_t *prof, int rows);

/* Compute seconds of stage s on a micro-batch: rows at context ctx, of
 * which logit_rows need the head (last stage). */
double bt_plan_stage_s(const bt_plan_pipe_t *p, int s, int rows, int ctx, int logit_rows);

/* Seconds one message of rows takes on a hop. */
double bt_plan_msg_s(const bt_plan_pipe_t *p, int rows);

typedef enum bt_plan_mode {
    BT_PLAN_SYNC = 0,  /* --pipeline 0: a micro-batch passes every stage first */
    BT_PLAN_GPIPE = 1, /* --pipeline 1 */
} bt_plan_mode_t;

/* Prefill of n_tok prompt tokens from an empty cache in micro-batches of
 * ub (the last stage computes logits of the last row only): seconds,
 * closed form. GPipe: a flow shop of stages and links, all micro-batches
 * alike but the last and the context they see; sync: one after another,
 * plus the last stage's DONE signal back to the first. */
double bt_plan_prefill(const bt_plan_pipe_t *p, int n_tok, int ub, bt_plan_mode_t mode);

/* Decode: seconds per step of n_seq sequences (one row each) in n_groups
 * groups of micro-batches circulating round the ring, at context ctx.
 * One group: the ring's latency (every stage, every hop, the token back).
 * G groups: the ring holds them at once, so a step of all takes the larger
 * of the ring's latency and G times the slowest stage's (or hop's) time on
 * one group. Aggregate t/s = n_seq / this. */
double bt_plan_decode(const bt_plan_pipe_t *p, int n_seq, int n_groups, int ctx);

/* A simulated run: what it took and, when asked for, every stage's events
 * (stages/trace.h's kinds: compute, waiting for a message, waiting for a
 * free slot), stage by stage, counts[s] of them for stage s. */
typedef struct bt_plan_sim {
    double seconds;
    int n_stages;
    bt_event_t *events; /* NULL unless asked for */
    int *counts;        /* [n_stages] */
} bt_plan_sim_t;

void bt_plan_sim_free(bt_plan_sim_t *sim);

/* The same schedules, event by event, as the transport runs them: stage s
 * computes micro-batch m once it has received m, finished m - 1 and has
 * slot m % BT_PLAN_SLOTS free again (its send of m - BT_PLAN_SLOTS has
 * completed); a send starts when the sender has computed m, the hop is
 * free and the receiver has posted the receive of m (which it does once it
 * has received m - 1 and the slot is free), and takes bt_plan_msg_s (the
 * rendezvous of a large message). Sync mode: the first stage starts m + 1
 * when the last stage's DONE for m has arrived (one latency). The run ends
 * when the first stage has the token after the last position (one more
 * latency round the ring). BT_ERR_NOMEM when out of memory. */
bt_status_t bt_plan_simulate_prefill(const bt_plan_pipe_t *p, int n_tok, int ub,
                                     bt_plan_mode_t mode, bool with_events, bt_plan_sim_t *sim);

/* Decode of n_steps steps for n_seq sequences in n_groups groups: the
 * first stage issues the groups in turn; a group goes round the ring
 * (every stage, every hop, its tokens back to the first stage: one
 * latency) before its next step. */
bt_status_t bt_plan_simulate_decode(const bt_plan_pipe_t *p, int n_seq, int n_groups,
                                    int n_steps, int ctx, bool with_events, bt_plan_sim_t *sim);

/* Writes the events as `--trace` writes a real run's (Chrome trace JSON,
 * one track per stage), so both open side by side. */
bt_status_t bt_plan_write_trace(const bt_plan_sim_t *sim, const char *path);

#endif /* BT_BENCH_PLAN_H */
