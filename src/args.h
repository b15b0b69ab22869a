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

/* A comma-separated list of integers in [min, max]: *out is malloc'd (the
 * caller frees it), *n its length (>= 1). */
bt_status_t bt_parse_int_list(const char *flag, const char *s, long min, long max, int **out,
                              int *n);

/* Ratios like "3,1" or "3/1" (llama.cpp's tensor split): *ratios is
 * malloc'd, *n its length. Only the syntax is checked here; the partition
 * checks the values. */
bt_status_t bt_parse_ratios(const char *flag, const char *s, double **ratios, int *n);

#endif /* BT_ARGS_H */
