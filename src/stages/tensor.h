/*
 * tensor.h: the ranks of one tensor-parallel stage (docs/design.md,
 * "Tensor parallelism").
 *
 * The T ranks of a stage each hold a share of every layer (bt_share_t) and
 * compute the same micro-batches. Tensor rank 0, the stage's *leader*, is
 * the stage in the pipeline: it receives and sends the activations, runs
 * the schedules and, on the last stage, samples. Whenever the leader
 * computes, it first tells the other ranks (the *followers*) what, on the
 * stage's communicator: run these rows through the layers, or compute the
 * logits of these rows, or the call has ended (with its status). The
 * followers take the rows and activations from the leader (MPI_Bcast),
 * compute their shares, and meet the leader in the gathers inside each
 * layer (MPI_Allgatherv, installed as the forward's bt_gather_t); each
 * rank's share of the logits goes to the leader alone. With T = 1 each
 * call is the forward call itself and no message is sent.
 *
 * Every output element is reduced whole on one rank in its usual order,
 * so a tensor-parallel stage gives the bits of one rank (invariant 1).
 * Under --tp-comm allreduce (bt_share_t.sum) attn_output and ffn_down give
 * partial sums instead, added in rank order (bt_gather_t.sum): the bits of
 * this T for any rows, micro-batches and threads, not those of one rank.
 */
#ifndef BT_STAGES_TENSOR_H
#define BT_STAGES_TENSOR_H

#include <mpi.h>
#include <stdint.h>

#include "forward.h"
#include "rows.h"
#include "stages/trace.h"

typedef struct bt_tensor {
    MPI_Comm comm;        /* the stage's ranks (MPI_COMM_NULL: T = 1) */
    int rank, size;
    bt_forward_t *fwd;    /* not owned */
    int n_embd;
    float *x;             /* [max_tok, n_embd] the rows a command computes on */
    bt_row_t *rows;       /* [max_tok] */
    float *logits;        /* [logit_rows, vocabulary share] (last stage) */
    int logit_rows;
    float *staging;       /* [max_tok, max gathered width] */
    int *counts, *displs; /* [size] of one gather */
    int *rcounts, *rdispls; /* [size] what a sum's MPI_Alltoallv receives */
    bt_trace_t *trace;    /* may be NULL */
    int mb;               /* the micro-batch index recorded with gathers */
    /* counters (reset with the trace): gathers and the floats this rank
     * received in them; their time is in the trace */
    uint64_t n_gathers, gather_floats;
} bt_tensor_t;

/* Sets up the stage's ranks over comm (its size is T; MPI_COMM_NULL for
 * T = 1) for f, whose model carries this rank's share; logit_rows: rows of
 * logits computed at once on a last stage (0 elsewhere). Installs the
 * gathers in f. BT_ERR_NOMEM (logged) when the buffers do not fit. */
bt_status_t bt_tensor_init(bt_tensor_t *t, MPI_Comm comm, bt_forward_t *f, int logit_rows,
                           bt_trace_t *trace);

/* The bytes bt_tensor_init allocates on a rank of a stage of tp > 1 ranks
 * (0 for tp 1), for micro-batches of max_tok rows, the last stage's
 * logit_rows rows of logits (0 elsewhere) over vocab_share vocabulary rows. */
size_t bt_tensor_bytes(const bt_hparams_t *hp, int tp, bool sum, int max_tok, int logit_rows,
                       int vocab_share);
void bt_tensor_free(bt_tensor_t *t);

/* Every rank of the stage: times gathers as the layers make them
 * (MPI_Allgatherv in place on the stage's communicator, each rank's block
 * just written and its caches stirred by reading 8 MiB, as between two
 * products; each gather the time of the rank that came last): *latency_s,
 * the median of 20 of 2 floats a rank; *bandwidth, the bytes a rank
 * receives per second in the median of 5 of 256 Ki floats a rank, less
 * that latency. Each size once unmeasured first. Zero for a stage of one
 * rank; BT_ERR_NOMEM on every rank of the stage where one cannot allocate
 * the probe's buffers. */
bt_status_t bt_tensor_probe(bt_tensor_t *t, double *latency_s, double *bandwidth);

/* Leader: bt_forward_rows on x [n, n_embd] for rows [n], every rank of
 * the stage joining. */
bt_status_t bt_tensor_layers(bt_tensor_t *t, float *x, const bt_row_t *rows, int n);

/* Leader: logits [n, n_vocab] of rows idx[0 .. n) of x (idx NULL: rows
 * 0 .. n - 1), n <= logit_rows; each rank computes its vocabulary rows. */
bt_status_t bt_tensor_head(bt_tensor_t *t, const float *x, const int *idx, int n,
                           float *logits);

/* Leader: tells the followers that the call they follow has ended with st;
 * returns st. */
bt_status_t bt_tensor_end(bt_tensor_t *t, bt_status_t st);

/* Follower: computes as the leader says until it ends the call; returns
 * the leader's status (or this rank's own failure). */
bt_status_t bt_tensor_follow(bt_tensor_t *t);

#endif /* BT_STAGES_TENSOR_H */
