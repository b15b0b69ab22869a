/*
 * args.h: strict parsing of command-line values shared by the programs.
 *
 * Each parser takes the flag's name for its message, accepts the whole
 * string or nothing (no trailing junk, no overflow), and on failure logs one
 * message naming the flag, the value and the reason, and returns BT_ERR_ARG
 * without touching *out.
 */
#ifndef BT_ARGS_H
#define BT_ARGS_H

#include <stdint.h>

#include "common.h"

/* An integer in [min, max]. */
bt_status_t bt_parse_int(const char *flag, const char *s, long min, long max, int *out);
bt_status_t bt_parse_u64(const char *flag, const char *s, uint64_t *out);

/* A float (strtof: the whole string). */
bt_status_t bt_parse_float(const char *flag, const char *s, float *out);

/* getopt_long's ':' (a value missing) or '?' (an unknown option) for the
 * option just read: one message naming it; returns BT_ERR_ARG. */
bt_status_t bt_getopt_error(int c, char **argv);

/* A comma-separated list of integers in [min, max]: *out is malloc'd (the
 * caller frees it), *n its length (>= 1). */
bt_status_t bt_parse_int_list(const char *flag, const char *s, long min, long max, int **out,
                              int *n);

/* Ratios like "3,1" or "3/1" (llama.cpp's tensor split): *ratios is
 * malloc'd, *n its length. Only the syntax is checked here; the partition
 * checks the values. */
bt_status_t bt_parse_ratios(const char *flag, const char *s, double **ratios, int *n);

/* -sm, --split-mode (llama.cpp's flag): "layer" (0: stages of layers) or
 * "tensor" (1: every rank one stage, splitting its tensors). */
bt_status_t bt_parse_split_mode(const char *flag, const char *s, int *out);

/* --tp-comm: how a stage's tensor ranks combine their shares. "gather"
 * (0): each output element is computed whole on one rank and gathered,
 * so the logits are bitwise those of one rank; "allreduce" (1): the
 * attention output and down projections are split by their inputs and the
 * ranks' partial sums added (Megatron's scheme: fewer bytes a layer, held
 * to the golden tolerances instead; docs/design.md). */
bt_status_t bt_parse_tp_comm(const char *flag, const char *s, int *out);
/* "gather" or "allreduce". */
const char *bt_tp_comm_name(int allreduce);

/* Tensor ranks per stage of a run on n_ranks ranks. -sm tensor: all of
 * them (a -tp that says otherwise is refused, and so is an explicit
 * --pipeline 1: one stage has no pipeline to fill); -sm layer: -tp T (tp 0,
 * not given: 1), S = n_ranks / T stages, T must divide n_ranks. Logs one
 * message with the numbers and returns BT_ERR_ARG on a bad layout. */
bt_status_t bt_layout_tp(int split_tensor, int tp, int pipeline, int pipeline_given, int n_ranks,
                         int *out);

#endif /* BT_ARGS_H */
