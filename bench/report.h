/*
 * report.h: one benchmark result row and its printers (md, csv, json,
 * jsonl), with llama-bench's field names where they exist.
 */
#ifndef BT_BENCH_REPORT_H
#define BT_BENCH_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "common.h"

typedef struct bt_stage_time {
    double busy, wait, send, recv; /* seconds over the measured repetitions */
    double gather;                 /* of busy: in gathers between tensor ranks */
} bt_stage_time_t;

typedef struct bt_bench_row {
    char test_time[32];       /* ISO 8601 UTC, when the test started */
    char test[48];            /* pp512, tg128, pp512+tg128 */
    char build_commit[48];
    char cpu_info[128];
    char backend[16];
    char model_filename[512];
    char model_type[64];      /* "llama 135M F32" */
    uint64_t model_size;      /* bytes of all tensors */
    uint64_t model_n_params;
    int n_batch, n_ubatch, n_threads, n_prompt, n_gen;
    int n_ranks, pipeline;    /* n_ranks: every rank of the run (np) */
    char split_mode[8];       /* -sm: "layer" or "tensor" */
    int tp;                   /* tensor ranks per stage: -tp for layer, n_ranks for tensor */
    char tp_comm[16];         /* --tp-comm: "gather" or "allreduce" (bt_tp_comm_name) */
    /* tp > 1: a gather between the first stage's ranks, probed before the
     * test (bt_pipe_probe_gathers; 0 otherwise) */
    double gather_latency_us, gather_bandwidth_MBps;
    int n_parallel;           /* -npl: sequences at once; t/s counts all of them */
    char layer_split[128];    /* layers per stage: "15/15" */
    char tensor_split[128];   /* -ts as given, "" when balanced */
    char hosts[1024];         /* host of each rank, comma-separated, by rank */
    /* models with experts: the measured micro-batches' rows and the distinct
     * experts they chose, per layer call (means; 0 without experts) */
    double expert_rows, expert_count;
    int reps;
    double *samples_ns;       /* [reps] */
    double *samples_ts;       /* [reps] */
    double avg_ns, stddev_ns, avg_ts, stddev_ts;
    bt_stage_time_t *stages;  /* [n_ranks]: by world rank */
} bt_bench_row_t;

/* Mean and sample standard deviation (0 for fewer than 2 values). */
void bt_mean_stddev(const double *v, int n, double *mean, double *stddev);

/* Fills the averages from the samples. */
void bt_bench_row_finish(bt_bench_row_t *r);

/* Printing, in the order: begin, one row per test, end. */
void bt_report_begin(FILE *f, const char *format);
void bt_report_row(FILE *f, const char *format, const bt_bench_row_t *r, int index);
void bt_report_end(FILE *f, const char *format);

#endif /* BT_BENCH_REPORT_H */
