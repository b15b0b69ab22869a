/*
 * profile.h: `baton-bench --profile`: on one rank, the costs a planner
 * (plan.h, baton-plan) predicts from: the time of one layer on 1, 2, 4, ...
 * up to -ub rows at each context asked for (positions already in the
 * cache), of the final norm and head on that many rows, of the
 * embedding lookup and of choosing that many rows' tokens (greedy); the
 * bytes a row adds to a stage-boundary message; and, when the node has
 * cores beyond the rank's threads, the layer at the smallest context
 * while every other core reads memory ("shared", each call paired with
 * one alone). Where a model's layers are of two kinds (DeepSeek's dense
 * first layers), each kind too ("dense", "expert" rows beside the
 * average "layer" ones). Each figure is the median of 3-7 timed calls
 * after a warm-up one.
 */
#ifndef BT_BENCH_PROFILE_H
#define BT_BENCH_PROFILE_H

#include <stdio.h>

#include "common.h"
#include "kernels/kernels.h"
#include "results_h5.h"

typedef struct bt_profile_params {
    const char *model;
    const bt_ops_t *ops;
    int threads;
    int ubatch;     /* the largest micro-batch measured */
    uint32_t kv_type;
    const int *ctx; /* contexts to measure the layers at */
    int n_ctx;
} bt_profile_params_t;

/* Measures; *out gets *n_out rows (run_id 0; free() them). */
bt_status_t bt_bench_profile(const bt_profile_params_t *pp, bt_profile_row_t **out, int *n_out);

/* The rows as a markdown table. */
void bt_profile_print(FILE *f, const bt_profile_row_t *rows, int n);

#endif /* BT_BENCH_PROFILE_H */
