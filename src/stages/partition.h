/*
 * partition.h: layers [0, n_layer) into n_stages contiguous blocks.
 *
 * Knows no MPI and no file format: it works on per-layer costs and, when
 * given, the memory of the nodes the stages run on.
 *
 * Two costs per layer, because for a mixture of experts they differ:
 * compute (what a token goes through: the router and the k experts it
 * uses) and memory (every byte the layer holds: all of its experts, and
 * its KV cache). Default: minimize the largest stage compute, where a
 * stage costs its layers plus the embedding lookup on the first stage and
 * the output head on the last, subject to every node holding the memory
 * of the stages on it (ranks on one node share it). The compute-balanced
 * split is kept whenever it fits; otherwise the split with the smallest
 * largest stage among those that fit. With explicit ratios (llama.cpp's
 * tensor split, -ts) stage s gets about ratio[s] / sum(ratios) of the
 * layers, and that split too must fit.
 */
#ifndef BT_STAGES_PARTITION_H
#define BT_STAGES_PARTITION_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

typedef struct bt_stage_costs {
    double layer; /* compute of one layer per token (layer_cost where layers differ) */
    double embed; /* extra compute of the first stage */
    double head;  /* extra compute of the last stage */
    /* Memory, in bytes. layer_bytes NULL: memory is not checked. */
    const uint64_t *layer_bytes; /* [n_layer]: weights as held, KV cache */
    uint64_t embed_bytes;        /* the first stage's extra (embedding table) */
    uint64_t head_bytes;         /* the last stage's extra (head, logits) */
    uint64_t rank_bytes;         /* every stage's (buffers, scratch, messages) */
    const char *what;            /* what the bytes are, for messages ("weights, ...") */
    const double *layer_cost; /* NULL, or [n_layer]: each layer's own compute instead of
                               * layer (DeepSeek's leading dense layers cost less) */
} bt_stage_costs_t;

/* Where the stages run. Stage s is on node node[s] (0 .. n_nodes - 1),
 * which has avail[node] bytes (0: unknown, not checked). When a node's
 * stages are not consecutive (ranks placed round-robin), each of them is
 * held to an equal share of the node. */
typedef struct bt_nodes {
    int n_nodes;
    const int *node;          /* [n_stages] */
    const uint64_t *avail;    /* [n_nodes] */
    const char *const *name;  /* [n_nodes] host names for messages, or NULL */
} bt_nodes_t;

/* Writes bounds[0..n_stages]: stage s owns [bounds[s], bounds[s+1]).
 * ratios == NULL balances costs; otherwise n_ratios must equal n_stages
 * and every ratio must be positive and finite. Every stage gets at least
 * one layer. nodes == NULL (or costs->layer_bytes NULL) checks no memory.
 * BT_ERR_ARG with one message naming the value on bad input (n_stages >
 * n_layer, wrong ratio count, a zero/negative ratio, a ratio that leaves a
 * stage with no layer); BT_ERR_NOMEM with one message giving the bytes
 * needed per node and available there when no split (or the -ts split)
 * fits. */
bt_status_t bt_partition(int n_layer, int n_stages, const double *ratios, int n_ratios,
                         const bt_stage_costs_t *costs, const bt_nodes_t *nodes, int *bounds);

/* Compute and memory of stage s of a split (memory 0 without layer_bytes). */
double bt_stage_compute(const bt_stage_costs_t *c, const int *bounds, int n_stages, int s);
uint64_t bt_stage_bytes(const bt_stage_costs_t *c, const int *bounds, int n_stages, int s);

/* Formats "layers 0-14 | 15-29" into buf. */
void bt_partition_str(const int *bounds, int n_stages, char *buf, size_t size);

/* Formats "15/15" (layers per stage) into buf. */
void bt_partition_split_str(const int *bounds, int n_stages, char *buf, size_t size);

#endif /* BT_STAGES_PARTITION_H */
