/*
 * runopts.h: the command-line flags of every program that runs a model
 * over the pipeline (baton, baton-server): the model, the layout, the
 * kernels, the cache, the threads and the sampling defaults. Each program
 * puts BT_RUN_LONGOPTS in its getopt_long table and BT_RUN_SHORTOPTS in its
 * short options, hands every option to bt_run_opt first, and numbers its
 * own long-only options from BT_RUN_OPT_END.
 */
#ifndef BT_RUNOPTS_H
#define BT_RUNOPTS_H

#include <getopt.h>
#include <stdbool.h>

#include "common.h"
#include "kernels/kernels.h"
#include "sampler.h"

typedef struct bt_run_opts {
    const char *model;   /* -m */
    int n_ctx;           /* -c; 0: not given */
    int ubatch;          /* -ub */
    int ubatch_given;
    int threads;         /* -t */
    int pipeline;        /* --pipeline 0|1 */
    int pipeline_given;
    int split_tensor;    /* -sm tensor */
    int tp;              /* -tp: tensor ranks per stage; 0: not given */
    int tp_allreduce;    /* --tp-comm allreduce (bt_parse_tp_comm) */
    double *ratios;      /* -ts (malloc'd; bt_run_opts_free) */
    int n_ratios;
    const bt_ops_t *ops; /* --kernels */
    int gpu, gpu_given;  /* --gpu */
    int mmap;            /* 1: map the weights (default); 0: read them into memory */
    int kv_type;         /* --kv-type: BT_TYPE_F32 (default) or BT_TYPE_F16 */
    bt_sampler_params_t sampling;
    int temp_given, seed_given;
    int verbose;         /* -v */
} bt_run_opts_t;

enum {
    BT_RUN_OPT_UB = 256, BT_RUN_OPT_PIPELINE, BT_RUN_OPT_TS, BT_RUN_OPT_SM, BT_RUN_OPT_TP,
    BT_RUN_OPT_REF, BT_RUN_OPT_KERNELS, BT_RUN_OPT_MMAP, BT_RUN_OPT_NO_MMAP, BT_RUN_OPT_KV_TYPE,
    BT_RUN_OPT_TEMP, BT_RUN_OPT_TOPK, BT_RUN_OPT_TOPP, BT_RUN_OPT_MINP, BT_RUN_OPT_PENALTY,
    BT_RUN_OPT_LASTN, BT_RUN_OPT_GPU, BT_RUN_OPT_TP_COMM,
    BT_RUN_OPT_END, /* the programs' own options from here */
};

#define BT_RUN_SHORTOPTS "m:c:t:s:v"

#define BT_RUN_LONGOPTS                                                                            \
    {"model", required_argument, 0, 'm'}, {"ctx-size", required_argument, 0, 'c'},               \
        {"ctx", required_argument, 0, 'c'}, {"threads", required_argument, 0, 't'},               \
        {"seed", required_argument, 0, 's'}, {"verbose", no_argument, 0, 'v'},                    \
        {"ubatch-size", required_argument, 0, BT_RUN_OPT_UB},                                     \
        {"ubatch", required_argument, 0, BT_RUN_OPT_UB},                                          \
        {"pipeline", required_argument, 0, BT_RUN_OPT_PIPELINE},                                  \
        {"tensor-split", required_argument, 0, BT_RUN_OPT_TS},                                    \
        {"split-mode", required_argument, 0, BT_RUN_OPT_SM},                                      \
        {"tensor-parallel", required_argument, 0, BT_RUN_OPT_TP},                                 \
        {"tp-comm", required_argument, 0, BT_RUN_OPT_TP_COMM},                                    \
        {"ref-kernels", no_argument, 0, BT_RUN_OPT_REF},                                          \
        {"kernels", required_argument, 0, BT_RUN_OPT_KERNELS},                                    \
        {"gpu", required_argument, 0, BT_RUN_OPT_GPU},                                            \
        {"mmap", required_argument, 0, BT_RUN_OPT_MMAP},                                          \
        {"no-mmap", no_argument, 0, BT_RUN_OPT_NO_MMAP},                                          \
        {"kv-type", required_argument, 0, BT_RUN_OPT_KV_TYPE},                                    \
        {"temp", required_argument, 0, BT_RUN_OPT_TEMP},                                          \
        {"top-k", required_argument, 0, BT_RUN_OPT_TOPK},                                         \
        {"top-p", required_argument, 0, BT_RUN_OPT_TOPP},                                         \
        {"min-p", required_argument, 0, BT_RUN_OPT_MINP},                                         \
        {"repeat-penalty", required_argument, 0, BT_RUN_OPT_PENALTY},                             \
        {"repeat-last-n", required_argument, 0, BT_RUN_OPT_LASTN}

/* --kernels NAME (or flag NAME, bench's --ops): the table bt_ops_by_name
 * gives; BT_ERR_ARG with one message naming the value otherwise ("cuda"
 * in a build without CUDA has its own). */
bt_status_t bt_parse_kernels(const char *flag, const char *arg, const bt_ops_t **ops);

/* The defaults: ubatch ub, --pipeline 1, the cpu kernels, mapped weights,
 * f32 cache, llama.cpp's sampling. */
void bt_run_opts_init(bt_run_opts_t *o, int default_threads, int ubatch);
void bt_run_opts_free(bt_run_opts_t *o);

/* Rewrites llama.cpp's multi-letter single-dash flags (-ub, -ts, -sm, -tp,
 * and the program's own pairs in extra[n_extra][2]) for getopt_long. */
void bt_run_normalize_argv(int argc, char **argv, const char *const (*extra)[2], int n_extra);

/* Takes option c (getopt's return) with its value: *handled false when c
 * is not one of these flags. A bad value: one message, BT_ERR_ARG. */
bt_status_t bt_run_opt(int c, const char *arg, bt_run_opts_t *o, bool *handled);

/* After parsing: checks the layout on n_ranks ranks and sets o->tp
 * (bt_layout_tp; -sm tensor means --pipeline 0). */
bt_status_t bt_run_opts_check(bt_run_opts_t *o, int n_ranks);

/* The sampling flags' values as a request's would be checked: one message
 * naming the flag and BT_ERR_ARG on a bad one. */
bt_status_t bt_run_check_sampling(const bt_sampler_params_t *sp);

#endif /* BT_RUNOPTS_H */
