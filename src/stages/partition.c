/* partition.c: contiguous layer blocks per stage, balanced or by ratio. */
#include "stages/partition.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double stage_cost(const bt_stage_costs_t *c, int n_stages, int s, int n_layers)
{
    return n_layers * c->layer + (s == 0 ? c->embed : 0.0) + (s == n_stages - 1 ? c->head : 0.0);
}

/* Minimizes the largest stage cost by dynamic programming over the split
 * points: best[s][l] = the smallest possible max cost when stages 0..s-1 own
 * layers [0, l). Among equal splits the first found (smallest split point)
 * wins, so the result is deterministic. */
static bt_status_t balance(int n_layer, int n_stages, const bt_stage_costs_t *c, int *bounds)
{
    size_t cells = (size_t)(n_stages + 1) * (size_t)(n_layer + 1);
    double *best = malloc(cells * sizeof *best);
    int *from = malloc(cells * sizeof *from);
    if (best == NULL || from == NULL) {
        free(best);
        free(from);
        return BT_ERR_NOMEM;
    }
#define AT(s, l) ((size_t)(s) * (size_t)(n_layer + 1) + (size_t)(l))
    for (size_t i = 0; i < cells; i++)
        best[i] = INFINITY;
    best[AT(0, 0)] = 0.0;
    for (int s = 1; s <= n_stages; s++)
        for (int l = s; l <= n_layer - (n_stages - s); l++)
            for (int k = s - 1; k < l; k++) {
                double prev = best[AT(s - 1, k)];
                double cost = fmax(prev, stage_cost(c, n_stages, s - 1, l - k));
                if (cost < best[AT(s, l)]) {
                    best[AT(s, l)] = cost;
                    from[AT(s, l)] = k;
                }
            }
    bounds[n_stages] = n_layer;
    for (int s = n_stages; s > 0; s--)
        bounds[s - 1] = from[AT(s, bounds[s])];
#undef AT
    free(best);
    free(from);
    return BT_OK;
}

bt_status_t bt_partition(int n_layer, int n_stages, const double *ratios, int n_ratios,
                         const bt_stage_costs_t *costs, int *bounds)
{
    if (n_stages < 1 || n_stages > n_layer) {
        bt_log_error("cannot split %d layers over %d stages: need 1 <= stages <= layers", n_layer,
                     n_stages);
        return BT_ERR_ARG;
    }
    if (ratios == NULL)
        return balance(n_layer, n_stages, costs, bounds);
    if (n_ratios != n_stages) {
        bt_log_error("-ts: %d ratios given for %d ranks; give one per rank", n_ratios, n_stages);
        return BT_ERR_ARG;
    }
    double total = 0.0;
    for (int s = 0; s < n_stages; s++) {
        if (!(ratios[s] > 0.0) || !isfinite(ratios[s])) {
            bt_log_error("-ts: ratio %d is %g; every ratio must be positive", s, ratios[s]);
            return BT_ERR_ARG;
        }
        total += ratios[s];
    }
    /* Stage s ends at the layer nearest to its cumulative share. */
    double cum = 0.0;
    bounds[0] = 0;
    for (int s = 0; s < n_stages; s++) {
        cum += ratios[s];
        bounds[s + 1] = s == n_stages - 1 ? n_layer : (int)lround(n_layer * cum / total);
        if (bounds[s + 1] <= bounds[s]) {
            bt_log_error("-ts: ratio %d (%g of %g) leaves stage %d with no layer of %d", s,
                         ratios[s], total, s, n_layer);
            return BT_ERR_ARG;
        }
    }
    return BT_OK;
}

void bt_partition_str(const int *bounds, int n_stages, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, size, "layers");
    for (int s = 0; s < n_stages && used < size; s++)
        used += (size_t)snprintf(buf + used, size - used, "%s %d-%d", s ? " |" : "", bounds[s],
                                 bounds[s + 1] - 1);
}

void bt_partition_split_str(const int *bounds, int n_stages, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int s = 0; s < n_stages && used < size; s++)
        used += (size_t)snprintf(buf + used, size - used, "%s%d", s ? "/" : "",
                                 bounds[s + 1] - bounds[s]);
}
