/*
 * params.h: baton-bench's command line: value lists as llama-bench parses
 * them, and the cartesian product of all lists as a sequence of tests.
 *
 * A list is comma-separated items; an item is a number or a range:
 *   first-last        every value from first to last
 *   first-last+step   first, first+step, ... up to last
 *   first-last*mult   first, first*mult, ... up to last
 * e.g. -p 128-1024*2 gives 128,256,512,1024.
 */
#ifndef BT_BENCH_PARAMS_H
#define BT_BENCH_PARAMS_H

#include <stdbool.h>
#include <stdio.h>

#include "common.h"
#include "kernels/kernels.h"

/* Largest -npl: sequences at once (each holds its own KV cache slot). */
#define BT_MAX_PARALLEL 4096

/* -sm, --split-mode: how a test lays its ranks out (bt_parse_split_mode's
 * values). layer: stages of layers, each of -tp T tensor ranks (np / T
 * stages); tensor: all np ranks one stage that splits every layer's
 * tensors (tp = np, whatever -tp says). */
typedef enum bt_split_mode {
    BT_SPLIT_MODE_LAYER = 0,
    BT_SPLIT_MODE_TENSOR = 1,
} bt_split_mode_t;

/* "layer", "tensor" */
const char *bt_split_mode_name(int mode);

typedef struct bt_int_list {
    int *v;
    int n;
} bt_int_list_t;

/* Parses a list of integers in [min, max]; BT_ERR_ARG with one message
 * naming the flag and the item. Replaces *out (freeing its old values). */
bt_status_t bt_parse_list(const char *flag, const char *s, long min, long max,
                          bt_int_list_t *out);
void bt_int_list_free(bt_int_list_t *l);

/* A tensor split: ratios per rank (empty: balance by cost). */
typedef struct bt_split {
    double *ratios;
    int n;
} bt_split_t;

typedef enum bt_test_kind { BT_TEST_PP, BT_TEST_TG, BT_TEST_PG } bt_test_kind_t;

typedef struct bt_bench_params {
    char **models;
    int n_models;
    bt_int_list_t n_prompt, n_gen, batch, ubatch, threads, pipeline;
    bool pipeline_given;    /* --pipeline on the command line (else the default list "1") */
    bt_int_list_t parallel; /* -npl/--parallel: sequences at once (default 1) */
    bt_int_list_t split_mode; /* -sm/--split-mode: bt_split_mode_t values (default layer) */
    bt_int_list_t tp;       /* -tp/--tensor-parallel: tensor ranks per stage of the layer
                             * tests (default 1) */
    bt_int_list_t tp_comm;  /* --tp-comm: how tensor ranks combine their shares,
                             * bt_parse_tp_comm's values (default gather) */
    int groups;             /* --groups: decode groups when P > 1, pipeline 1 (0: automatic) */
    int (*pg)[2]; /* -pg pairs */
    int n_pg;
    bt_split_t *splits; /* -ts values; one empty split by default */
    int n_splits;
    int reps;
    bool warmup;
    double delay;
    const bt_ops_t *ops; /* --ops: the kernel set the tests run (default cpu) */
    int gpu;             /* --gpu (gpu_given) */
    bool gpu_given;
    int kv_type;         /* --kv-type: BT_TYPE_F32 (default) or BT_TYPE_F16 */
    int mmap;            /* -mmp/--mmap: 1 map the weights (default), 0 read them in */
    const char *output; /* md, csv, json, jsonl */
    const char *hdf5;
    const char *trace_dir;
    int verbose;
    int help;
    /* --kernels: time the matmul kernels alone (bench/kernels.c) */
    bool kernels;
    bool ref_kernels;          /* also time bt_ops_ref */
    const char *kernel_types;  /* comma-separated type names; NULL: every supported type */
    const char *kernel_shapes; /* comma-separated shape names; NULL: smollm2-135m,llama-1b */
    bt_int_list_t kernel_tokens; /* prefill token counts (default 64,128,512) */
    double kernel_time;        /* seconds of samples per measurement */
    int kernel_bw_mib;         /* read-bandwidth buffer */
    /* --profile: the costs baton-plan predicts from (bench/profile.h) */
    bool profile;
    bt_int_list_t profile_ctx; /* contexts the layers are timed at (default 0,512,2048) */
} bt_bench_params_t;

/* One test of the cartesian product. */
typedef struct bt_bench_test {
    const char *model;
    const bt_split_t *split;
    int threads, batch, ubatch;
    int split_mode; /* bt_split_mode_t */
    int tp;         /* layer: tensor ranks per stage (-tp); tensor: 0, all ranks of the run */
    int tp_comm;    /* --tp-comm: 1 allreduce, 0 gather (always for -sm layer -tp 1) */
    int pipeline;   /* a tensor test's is 0 when --pipeline was not given (one stage) */
    int parallel; /* P sequences, each running the whole test */
    bt_test_kind_t kind;
    int n_prompt, n_gen;
} bt_bench_test_t;

/* Parses argv (every rank parses alike). default_threads fills -t when it
 * is not given (with --kernels: 1 and default_threads). Logs one message
 * and returns BT_ERR_ARG on a bad flag. */
bt_status_t bt_bench_params_parse(int argc, char **argv, int default_threads,
                                  bt_bench_params_t *p);

/* Checks the tests' layouts against a run of n_ranks ranks before any
 * runs: every -tp T of the layer tests must divide n_ranks (np = stages x
 * T), and a tensor test's stage of n_ranks ranks must not exceed
 * BT_TP_MAX. Every rank calls it alike; logs one message naming the value
 * and n_ranks and returns BT_ERR_ARG otherwise. */
bt_status_t bt_bench_params_check_ranks(const bt_bench_params_t *p, int n_ranks);

void bt_bench_params_free(bt_bench_params_t *p);
void bt_bench_usage(FILE *f);

/* The tests in run order: models outermost, then split, threads, batch,
 * micro-batch, split mode, -tp, --tp-comm, pipeline, parallel; within those
 * pp tests, tg tests, pg tests. Combinations with ubatch > batch are
 * skipped. A tensor test is made once per other combination, not once per
 * -tp value (its tp is 0: all ranks), and with pipeline 0 when --pipeline
 * was not given; a tensor test with pipeline 1 (--pipeline 1 given) stays
 * in the list: the caller skips it (one stage has nothing to pipeline). A
 * layer test of -tp 1 has no tensor ranks to combine: it is made once, not
 * once per --tp-comm value, with tp_comm 0. *tests is malloc'd. */
bt_status_t bt_bench_tests(const bt_bench_params_t *p, bt_bench_test_t **tests, int *n);

/* "pp512", "tg128", "pp512+tg128" */
void bt_bench_test_name(const bt_bench_test_t *t, char *buf, size_t size);

#endif /* BT_BENCH_PARAMS_H */
