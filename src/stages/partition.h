/*
 * partition.h: layers [0, n_layer) into n_stages contiguous blocks.
 *
 * Knows no MPI and no file format: it works on per-layer costs.
 * Default: minimize the largest stage cost, where a stage costs the sum of
 * its layers plus the embedding lookup on the first stage and the output
 * head on the last. With explicit ratios (llama.cpp's tensor split, -ts)
 * stage s gets about ratio[s] / sum(ratios) of the layers.
 */
#ifndef BT_STAGES_PARTITION_H
#define BT_STAGES_PARTITION_H

#include <stddef.h>

#include "common.h"

typedef struct bt_stage_costs {
    double layer; /* cost of one layer (all layers of a llama model are alike) */
    double embed; /* extra cost of the first stage */
    double head;  /* extra cost of the last stage */
} bt_stage_costs_t;

/* Writes bounds[0..n_stages]: stage s owns [bounds[s], bounds[s+1]).
 * ratios == NULL balances costs; otherwise n_ratios must equal n_stages
 * and every ratio must be positive and finite. Every stage gets at least
 * one layer. BT_ERR_ARG with one message naming the value on bad input
 * (n_stages > n_layer, wrong ratio count, a zero/negative ratio, a ratio
 * that leaves a stage with no layer). */
bt_status_t bt_partition(int n_layer, int n_stages, const double *ratios, int n_ratios,
                         const bt_stage_costs_t *costs, int *bounds);

/* Formats "layers 0-14 | 15-29" into buf. */
void bt_partition_str(const int *bounds, int n_stages, char *buf, size_t size);

/* Formats "15/15" (layers per stage) into buf. */
void bt_partition_split_str(const int *bounds, int n_stages, char *buf, size_t size);

#endif /* BT_STAGES_PARTITION_H */
