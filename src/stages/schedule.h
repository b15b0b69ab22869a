/*
 * schedule.h: a llama model as a pipeline of stages, each of one MPI rank
 * or, with tensor parallelism (-tp T), of T ranks that split its layers
 * (tensor.h): stage s is ranks s*T .. s*T + T - 1 of the communicator.
 *
 * bt_pipe_init() opens the model on every rank, checks that all ranks
 * opened the same file (size and header hash), splits the layers
 * (partition.h), binds only this rank's tensors (first stage: embeddings,
 * last stage: final norm and head) and allocates everything the run needs.
 * Every call here is collective over the communicator; on failure every
 * rank returns the same status and none is left waiting.
 *
 * Prefill schedules (bt_pipe_prefill):
 *   BT_PIPE_GPIPE (--pipeline 1): stage 0 feeds micro-batches back to back;
 *     every stage posts the receive of m+1 before computing m, and drives
 *     outstanding requests between layers, so all stages work at once after
 *     the fill. Bubble (S-1)/(M+S-1).
 *   BT_PIPE_SYNC (--pipeline 0): a micro-batch passes every stage before
 *     stage 0 starts the next (the last stage signals rank 0).
 * Decode (bt_pipe_decode): one token through all stages; the last stage
 * samples and sends the token id back to rank 0 (the ring).
 * A single rank runs the same code; its sends and receives are no-ops.
 * Every rank calls every function here; on a tensor-parallel stage the
 * leader runs the schedule and its followers compute as it says, returning
 * its status.
 * Both schedules give bitwise identical logits (docs/design.md, invariant 1).
 */
#ifndef BT_STAGES_SCHEDULE_H
#define BT_STAGES_SCHEDULE_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "forward.h"
#include "model.h"
#include "sampler.h"
#include "stages/tensor.h"
#include "stages/trace.h"
#include "stages/transport.h"

typedef enum bt_pipe_mode {
    BT_PIPE_SYNC = 0,
    BT_PIPE_GPIPE = 1,
} bt_pipe_mode_t;

/* Context used when none is asked for and the model's is longer. */
#define BT_DEFAULT_CTX 4096

typedef struct bt_pipe_config {
    const char *model_path;
    const double *ratios; /* -ts; NULL balances by cost */
    int n_ratios;
    double head_share;    /* fraction of tokens whose logits are computed (cost model) */
    int n_ctx;            /* 0: the model's context length, at most BT_DEFAULT_CTX */
    int max_tok;          /* largest micro-batch (-ub) */
    int n_threads;
    const bt_ops_t *ops;  /* bt_ops_auto and "cuda" are resolved per rank (bt_pipe_t.ops) */
    bool gpu_given;       /* --gpu N: every cuda rank takes device gpu; else device */
    int gpu;              /* (local rank mod devices) by its place on its node */
    bool all_logits;      /* last stage keeps logits of every row (dumps) */
    bool no_sampling;     /* benchmarks: the last stage returns token 0 round the ring
                           * instead of the greedy pick */
    int trace_events;     /* capacity of the per-rank trace (0: no trace), counting 8
                           * events a micro-batch; a tensor rank's gathers (4 a layer)
                           * are added by bt_pipe_init */
    bool no_mmap;         /* read the bound weights into memory instead of mapping them */
    uint32_t kv_type;     /* KV cache elements: BT_TYPE_F32 (0, the default) or BT_TYPE_F16 */
    int n_slots;          /* sequences the KV cache holds (--parallel; 0: 1), n_ctx each */
    int tp;               /* tensor ranks per stage (-tp; 0 or 1: none): the communicator's
                           * size must be a multiple; stage s is ranks s*tp .. s*tp + tp - 1 */
    int tp_allreduce;     /* --tp-comm allreduce (1): tensor ranks add partial sums of the
                           * attention output and down projections instead of gathering
                           * whole outputs (bt_parse_tp_comm); 0: gathers, one rank's bits */
} bt_pipe_config_t;

/* Called on the last stage with logits rows [n_rows, n_vocab] for the
 * positions pos0 .. pos0 + n_rows - 1. */
typedef bt_status_t (*bt_logits_fn)(void *arg, const float *rows, int n_rows, int pos0);

typedef struct bt_pipe {
    MPI_Comm world;      /* every rank of the run (the communicator bt_pipe_init got) */
    int world_rank, world_size;
    MPI_Comm comm;       /* the pipeline: the stages' ranks of this tensor index, rank = stage */
    int rank, n_stages;  /* this rank's stage and the stage count */
    bool first, last;
    int tp_rank, tp_size; /* this rank's index in its stage, and ranks per stage */
    bool follower;       /* tp_rank > 0: computes its shares as the stage's leader says */
    MPI_Comm tp_comm;    /* the stage's ranks (MPI_COMM_NULL with tp_size 1) */
    bt_tensor_t tensor;
    int *bounds;         /* [n_stages + 1] layer bounds */
    bt_model_t *model;
    bt_forward_t *fwd;
    const bt_ops_t *ops; /* the kernel set this rank runs */
    int device;          /* its CUDA device, or -1 */
    bt_transport_t tr;
    bt_trace_t trace;
    bool tracing;
    int max_tok;
    int n_slots;
    int logit_rows;      /* rows of logits computed at once */
    bool all_logits;
    bool no_sampling;
    float *logits;       /* last stage: [logit_rows, n_vocab] */
    bt_sampler_t *sampler; /* last stage: picks tokens (NULL: greedy); not owned */
    uint64_t file_size, header_hash;
} bt_pipe_t;

bt_status_t bt_pipe_init(bt_pipe_t *p, MPI_Comm comm, const bt_pipe_config_t *cfg);
void bt_pipe_free(bt_pipe_t *p);

/* Last stage: the id chosen from a logits row [n_vocab]: 0 without
 * sampling (benchmarks), else the sampler's pick (greedy when s is NULL),
 * which s then records. */
int32_t bt_pipe_choose(const bt_pipe_t *p, bt_sampler_t *s, const float *row);

/* Runs n_tokens prompt tokens at positions pos0.. in micro-batches of
 * ubatch. tokens is read on rank 0 only. The last stage calls on_logits
 * (if set) with every row when all_logits, else with the last row only.
 * On rank 0 *next receives the greedy token after the last position. */
bt_status_t bt_pipe_prefill(bt_pipe_t *p, const int32_t *tokens, int n_tokens, int pos0,
                            int ubatch, bt_pipe_mode_t mode, bt_logits_fn on_logits, void *arg,
                            int32_t *next);

/* One decode step: token (rank 0) at position pos; *next on rank 0. */
bt_status_t bt_pipe_decode(bt_pipe_t *p, int32_t token, int pos, bt_logits_fn on_logits,
                           void *arg, int32_t *next);

/* Rank 0: called with each token of a generation; returns false to stop. */
typedef bool (*bt_token_fn)(void *arg, int32_t token);

/* Decodes from first (the token chosen after the prompt, known on rank 0)
 * at positions pos0.. until on_token returns false or max_steps steps ran;
 * rank 0 then sends STOP down the pipeline. Every rank calls it; only rank
 * 0 calls on_token (first, then each new token), only the last stage
 * on_logits (if set), both with arg. *n_steps (if not NULL) gets the
 * decode steps run. */
bt_status_t bt_pipe_generate(bt_pipe_t *p, int32_t first, int pos0, int max_steps,
                             bt_token_fn on_token, bt_logits_fn on_logits, void *arg,
                             int *n_steps);

/* Tensor ranks: every stage probes its gathers at once (bt_tensor_probe);
 * rank 0 gets its stage's figures (0 without tensor ranks). Collective. */
bt_status_t bt_pipe_probe_gathers(bt_pipe_t *p, double *latency_s, double *bandwidth);

/* Broadcasts bytes from rank 0 to every rank (turns of a chat). */
bt_status_t bt_pipe_bcast(bt_pipe_t *p, void *buf, int bytes);

/* Threads per rank by default: the cores of this node over the ranks that
 * share it. Collective. */
int bt_default_threads(MPI_Comm comm);

/* Starts a new trace on every rank (after a barrier, so tracks align). */
void bt_pipe_trace_start(bt_pipe_t *p);

/* Gathers every rank's trace to rank 0; writes path (if not NULL) and,
 * when print, logs per-stage busy %, wait % and the bubble against
 * (S-1)/(M+S-1) for n_mb micro-batches. Collective. */
bt_status_t bt_pipe_trace_report(bt_pipe_t *p, const char *path, int n_mb, bool print);

/* This rank's seconds in the current trace: computing, blocked in total,
 * blocked on sends, blocked on receives, in gathers between tensor ranks
 * (out[0..4]; the gathers are part of computing). */
void bt_pipe_stage_times(const bt_pipe_t *p, double out[5]);

/* Prints (rank 0) each rank's bound weight bytes and peak RSS. Collective. */
void bt_pipe_report_memory(bt_pipe_t *p);

#endif /* BT_STAGES_SCHEDULE_H */
