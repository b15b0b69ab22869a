/*
 * batch.h: baton --batch-file, many requests through one pipeline
 * (docs/usage.md, "Batch jobs").
 *
 * Rank 0 reads a JSON-lines file of requests, one per line:
 *   {"id": ..., "prompt": "text"}  or  {"id": ..., "tokens": [ids]}
 * with optional n_predict, temp, top_k, top_p, min_p, seed, chat, system.
 * It hands them to the many-sequence engine (stages/serve.h), --parallel
 * at once, and writes one JSON line per request to the output when that
 * request finishes (completion order): its id as given, the text, the
 * generated ids, counts, the finish reason and timings. A bad line becomes
 * an "error" line naming the line number and the field; the others go on.
 * Each line is written with one write() as soon as it is known, so a job
 * that is killed keeps every finished line, and every line is valid JSON.
 *
 * The engine's id of a request is its line number (1-based); the last
 * stage writes --dump-logits PREFIX.<line> per request.
 */
#ifndef BT_BATCH_H
#define BT_BATCH_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "sampler.h"

typedef struct bt_batch_options {
    const char *model;
    const char *path;        /* --batch-file: the requests */
    const char *output;      /* -o: the completions; NULL: stdout */
    const char *dump_prefix; /* --dump-logits PREFIX: PREFIX.<line> per request; NULL: none */
    int n_parallel;          /* --parallel: sequences at once (KV slots) */
    int n_groups;            /* --groups: decode groups; 0: automatic (one per stage) */
    int n_predict;           /* -n: a request's default n_predict */
    int n_ctx;               /* -c: context per slot; 0: the model's, at most 4096 */
    int ubatch;              /* -ub: rows per micro-batch */
    bool sync;               /* --pipeline 0: one micro-batch in flight at a time */
    int tp;                  /* tensor ranks per stage (-tp, -sm tensor; 0 or 1: none) */
    int tp_allreduce;        /* --tp-comm allreduce: partial sums added (bt_pipe_config_t) */
    int threads;
    const double *ratios;    /* -ts; NULL: balance the cost */
    int n_ratios;
    const bt_ops_t *ops;
    int gpu, gpu_given; /* --gpu */
    bool no_mmap;
    uint32_t kv_type;
    bt_sampler_params_t sampling; /* the command line's (prompt requests without temp) */
    bool seed_given;         /* else rank 0 draws the job seed */
} bt_batch_options_t;

/* The default of --parallel. */
#define BT_BATCH_DEFAULT_PARALLEL 8
/* -ub of a batch job when none is given: prompt chunks small enough that a
 * decode step they join is not held up long (README, Many sequences). */
#define BT_BATCH_DEFAULT_UBATCH 64

/* Checks the command line's sampling values as a request's would be
 * checked. Logs one message naming the flag and returns BT_ERR_ARG on a
 * bad value. Every rank calls it alike (no communication). */
bt_status_t bt_batch_check_options(const bt_batch_options_t *o);

/* Runs the job over comm (collective): checks the input and output files
 * on rank 0 and stops every rank with one message when either cannot be
 * used, opens the pipeline, serves every request, prints the summary.
 * Returns the exit status: 0 when every request got its line (error lines
 * included), 1 otherwise. A failure inside the engine aborts the job
 * (MPI_Abort), keeping the lines already written. */
int bt_batch_run(const bt_batch_options_t *o, MPI_Comm comm);

#endif /* BT_BATCH_H */
