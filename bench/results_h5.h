/*
 * results_h5.h: baton-bench results in an HDF5 file (rank 0 only; the only
 * place besides tests that includes hdf5.h).
 *
 * Layout (format "baton-bench results", version 8), every dataset 1-D,
 * chunked and extendible, of a compound type:
 *   /runs         one row per invocation: provenance (command line, build
 *                 commit, configure options, MPI library, CPU, Slurm job id,
 *                 rank->host map, start time)
 *   /results      one row per test, with its run_id, n_parallel, split_mode
 *                 ("layer" or "tensor"), tp (tensor ranks per stage) and
 *                 tp_comm ("gather" or "allreduce")
 *   /samples      one row per repetition (row_id, rep, ns, t/s)
 *   /stage_times  one row per test and rank (busy, wait, send, recv seconds,
 *                 and gather: the part of busy in gathers between tensor ranks)
 *   /links        one row per run and pipeline link s -> s+1: the link
 *                 probe's latency and bandwidth (stages/linkprobe.h)
 *   /profile      `--profile`: one row per measured cost (a layer, the head,
 *                 the embedding at a number of rows and a context; a layer
 *                 while the node's other cores read memory), with the
 *                 run_id of the run that measured it (bench/plan.h)
 *   /plan         baton-plan --hdf5: one row per node count and number of
 *                 sequences, every figure predicted, never measured
 * Root attributes: format, format_version, created, creator.
 *
 * The file is opened, appended to and closed for each row, so a run killed
 * later leaves every finished row readable, and existing rows are never
 * rewritten. A file with another layout, or of another format version
 * (an older one lacks fields this build writes), is refused before it is
 * opened for writing, so it is left untouched. The readers also take
 * version 4 (BT_H5_READ_VERSION_MIN), whose rows lack the fields version 5
 * added: they read as split_mode "layer", tp 1 (what version 4 ran);
 * version 5, which is version 6 without "sample" and "shared" profile rows;
 * versions 4 to 6 without version 7's expert fields, which read as 0
 * (not recorded); and versions 4 to 7 without version 8's tp_comm, which
 * reads as "gather" (the only way they combined tensor ranks).
 */
#ifndef BT_BENCH_RESULTS_H5_H
#define BT_BENCH_RESULTS_H5_H

#include <stdint.h>

#include "common.h"
#include "report.h"

#define BT_H5_FORMAT "baton-bench results"
/* 2: /links; 3: n_parallel in /results; 4: /profile, /plan; 5: split_mode and tp in
 * /results with the gather probe, gather_s in /stage_times, tp in /plan; 6: /profile
 * rows of kinds "sample" and "shared" (a reader of 5 would take them for others);
 * 7: the experts a call chose, in /results (expert_rows, expert_count) and /profile
 * (experts, and the "expert_one" row), and the spread a /plan row assumed; 8: tp_comm
 * in /results (--tp-comm) */
#define BT_H5_FORMAT_VERSION 8
/* The oldest version the readers (bt_h5_read_*) take. */
#define BT_H5_READ_VERSION_MIN 4

typedef struct bt_run_info {
    char start_time[32];
    char command_line[2048];
    char build_commit[48];
    char configure_args[1024];
    char mpi_version[256];
    char cpu_info[128];
    char slurm_job_id[32];
    char hosts[1024]; /* host of rank 0, 1, ... comma-separated */
    int32_t n_ranks;
} bt_run_info_t;

/* One link's probe, as stored in /links. */
typedef struct bt_run_link {
    int32_t from_rank, to_rank;
    char from_host[64], to_host[64];
    double latency_us;     /* one way */
    double bandwidth_MBps; /* 1e6 bytes/s */
    int64_t lat_bytes, bw_bytes;
    int32_t lat_round_trips, bw_round_trips;
} bt_run_link_t;

/* One measured cost of `baton-bench --profile`, as stored in /profile. */
typedef struct bt_profile_row {
    int64_t run_id;
    char model_filename[512];
    char kind[16];          /* "layer" (one layer), "head", "embed", "sample" (choosing
                             * the rows' tokens), "shared" (one layer while every
                             * other core of the node reads memory), "expert_one" */
    int32_t n_rows;         /* rows of the micro-batch */
    int32_t n_ctx;          /* positions already in the cache */
    int32_t n_threads;
    int32_t n_layer;        /* of the model */
    double seconds;         /* per call: the median of the repetitions */
    double act_bytes_row;   /* bytes a row adds to a stage-boundary message */
    double msg_bytes;       /* bytes of a message besides its rows */
    double weight_bytes;    /* the model's weights as a rank holds them (packed), all layers */
    double kv_bytes_pos;    /* KV cache bytes per position and layer (the --kv-type) */
    /* a model with experts (0 otherwise, and in files before version 7): in layer
     * rows the distinct experts a call's rows chose (mean); in the "expert_one" row
     * (seconds: what one more distinct expert costs a layer call) how many more
     * the rows it compared chose */
    double experts;
} bt_profile_row_t;

/* A /results row as read back (the fields a planner compares with). */
typedef struct bt_h5_result {
    int64_t row_id, run_id;
    char test_time[32], test[48], model_filename[512], model_type[64], backend[16];
    uint64_t model_size, model_n_params;
    int32_t n_batch, n_ubatch, n_threads, n_prompt, n_gen, n_ranks, pipeline, n_parallel, reps;
    int32_t tp;               /* tensor ranks per stage (version 4: 1) */
    double gather_latency_us, gather_bandwidth_MBps; /* the gather probe (tp > 1; else 0) */
    char split_mode[8];       /* "layer" or "tensor" (version 4: "layer") */
    char tp_comm[16];         /* "gather" or "allreduce" (before version 8: "gather") */
    char layer_split[128], tensor_split[128]; /* layers per stage; -ts */
    double avg_ns, stddev_ns, avg_ts, stddev_ts;
    double expert_rows, expert_count; /* a layer call's rows and distinct experts, means
                                       * (bt_bench_row_t; 0: no experts, or before version 7) */
} bt_h5_result_t;

/* A /links row as read back. */
typedef struct bt_h5_link {
    int64_t run_id;
    bt_run_link_t link;
} bt_h5_link_t;

/* Creates path (or checks an existing one has this layout) and appends the
 * run's provenance row and its n_links link rows (links may be NULL when
 * n_links is 0); *run_id identifies the run in later rows. */
bt_status_t bt_h5_begin_run(const char *path, const bt_run_info_t *run,
                            const bt_run_link_t *links, int n_links, int64_t *run_id);

/* Appends one test's row, its samples and its per-rank stage times. */
bt_status_t bt_h5_append(const char *path, int64_t run_id, const bt_bench_row_t *row,
                         const char *const *rank_hosts);

/* One row of baton-plan's table, as stored in /plan. */
typedef struct bt_plan_row {
    char created[32];       /* when baton-plan ran (ISO 8601 UTC) */
    char source[512];       /* the profile: a results file, or a shape and a node's rates */
    int32_t nodes, stages, ranks_per_node;
    int32_t tp;             /* tensor ranks per stage (stages x tp = nodes x ranks_per_node) */
    char split[128];        /* layers per stage, "20/20/20/20" */
    int32_t n_ubatch, n_prompt, n_gen;
    double latency_us, bandwidth_MBps;
    double pp_gpipe_ts, pp_sync_ts, pp_speedup, pp_efficiency;
    int32_t n_parallel, n_groups;
    double tg_ts;           /* aggregate over n_parallel sequences */
    double node_gib;        /* memory of the busiest node (0: unknown) */
    double expert_spread;   /* experts: the --expert-spread assumed (bt_plan_experts), -1:
                             * as the profile's calls chose, or no experts (version 7) */
} bt_plan_row_t;

/* Appends baton-plan's rows to /plan, creating path when it does not exist. */
bt_status_t bt_h5_append_plan(const char *path, const bt_plan_row_t *rows, int n);

/* Appends a run's profile rows (--profile), run_id set by the caller. */
bt_status_t bt_h5_append_profile(const char *path, const bt_profile_row_t *rows, int n);

/* Every row of /profile, /results or /links of a results file of format
 * version BT_H5_READ_VERSION_MIN to BT_H5_FORMAT_VERSION (malloc'd into
 * *rows, *n of them; free() it); a field the file's version lacks reads as
 * its default (bt_h5_result_t says which). A file of another layout or
 * version is refused with one message. */
bt_status_t bt_h5_read_profile(const char *path, bt_profile_row_t **rows, int *n);
bt_status_t bt_h5_read_results(const char *path, bt_h5_result_t **rows, int *n);
bt_status_t bt_h5_read_links(const char *path, bt_h5_link_t **rows, int *n);

#endif /* BT_BENCH_RESULTS_H5_H */
