/* partition.c: contiguous layer blocks per stage, balanced or by ratio. */
#include "stages/partition.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The compute of layers [a, b). */
static double layers_cost(const bt_stage_costs_t *c, int a, int b)
{
    if (c->layer_cost == NULL)
        return (b - a) * c->layer;
    double sum = 0.0;
    for (int l = a; l < b; l++)
        sum += c->layer_cost[l];
    return sum;
}

/* Stage s of n_stages holding layers [a, b). */
static double stage_cost(const bt_stage_costs_t *c, int n_stages, int s, int a, int b)
{
    return layers_cost(c, a, b) + (s == 0 ? c->embed : 0.0) + (s == n_stages - 1 ? c->head : 0.0);
}

/* Memory of stage s without its layers. */
static uint64_t stage_base_bytes(const bt_stage_costs_t *c, int n_stages, int s)
{
    return c->rank_bytes + (s == 0 ? c->embed_bytes : 0) + (s == n_stages - 1 ? c->head_bytes : 0);
}

double bt_stage_compute(const bt_stage_costs_t *c, const int *bounds, int n_stages, int s)
{
    return stage_cost(c, n_stages, s, bounds[s], bounds[s + 1]);
}

uint64_t bt_stage_bytes(const bt_stage_costs_t *c, const int *bounds, int n_stages, int s)
{
    if (c->layer_bytes == NULL)
        return 0;
    uint64_t bytes = stage_base_bytes(c, n_stages, s);
    for (int l = bounds[s]; l < bounds[s + 1]; l++)
        bytes += c->layer_bytes[l];
    return bytes;
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
                double cost = fmax(prev, stage_cost(c, n_stages, s - 1, k, l));
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

static bool checks_memory(const bt_stage_costs_t *c, const bt_nodes_t *nd)
{
    return nd != NULL && c->layer_bytes != NULL;
}

/* Fills need[n_nodes] for a split; returns the first node that cannot hold
 * its stages, or -1. */
static int overflowing_node(const bt_stage_costs_t *c, const bt_nodes_t *nd, const int *bounds,
                            int n_stages, uint64_t *need)
{
    memset(need, 0, sizeof *need * (size_t)nd->n_nodes);
    for (int s = 0; s < n_stages; s++)
        need[nd->node[s]] += bt_stage_bytes(c, bounds, n_stages, s);
    for (int n = 0; n < nd->n_nodes; n++)
        if (nd->avail[n] != 0 && need[n] > nd->avail[n])
            return n;
    return -1;
}

/* Whether every node's stages are consecutive ranks. */
static bool nodes_contiguous(const bt_nodes_t *nd, int n_stages, int *count)
{
    bool contiguous = true;
    memset(count, 0, sizeof *count * (size_t)nd->n_nodes);
    for (int s = 0; s < n_stages; s++) {
        if (s > 0 && nd->node[s] != nd->node[s - 1] && count[nd->node[s]] > 0)
            contiguous = false;
        count[nd->node[s]]++;
    }
    return contiguous;
}

/* Is there a split whose stages all cost at most t and fit? When each
 * node's stages are consecutive, a node's memory depends only on where its
 * block of layers starts and ends (each of its stages adds its base, each
 * layer its bytes), so: at a node's first stage, find the furthest end its
 * memory allows (leaving a layer for every later stage); then each stage
 * in turn takes as many layers as t allows, up to that end less a layer
 * for each later stage of the node. A stage or node that ends later never
 * leaves a later one less room (costs are additive and non-negative), so
 * this finds a split whenever one exists. When a node's stages are not
 * consecutive (ranks placed round-robin), each stage is held to an equal
 * share of its node: safe, but it may refuse a split that would fit. */
static bool greedy_fits(const bt_stage_costs_t *c, const bt_nodes_t *nd, bool contiguous,
                        const int *count, int n_layer, int n_stages, double t, int *bounds)
{
    bounds[0] = 0;
    int end = 0, left = 0; /* the group's furthest end; its stages after this one */
    for (int s = 0, a = 0; s < n_stages; s++) {
        const int n = nd->node[s];
        if (left == 0) { /* a group starts: a node's stages, or one stage of a shared node */
            const int k = contiguous ? count[n] : 1;
            const uint64_t cap = contiguous || nd->avail[n] == 0
                                     ? nd->avail[n]
                                     : nd->avail[n] / (uint64_t)count[n];
            uint64_t bytes = 0;
            for (int i = s; i < s + k; i++)
                bytes += stage_base_bytes(c, n_stages, i);
            const int limit = n_layer - (n_stages - s - k);
            for (end = a; end < limit && (cap == 0 || bytes + c->layer_bytes[end] <= cap); end++)
                bytes += c->layer_bytes[end];
            if ((cap != 0 && bytes > cap) || end - a < k)
                return false;
            left = k;
        }
        left--;
        int b = a;
        while (b < end - left && stage_cost(c, n_stages, s, a, b + 1) <= t)
            b++;
        if (b == a || (s == n_stages - 1 && b != n_layer))
            return false;
        bounds[s + 1] = a = b;
    }
    return true;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The split with the smallest largest stage cost among those that fit:
 * binary search over the costs a stage can have (a run of layers -- k
 * layers where they are alike -- plus none, one or both extras) for the
 * smallest that greedy_fits, into bounds (left as they were when none
 * fits: *found false). BT_ERR_NOMEM, said, when out of memory. */
static bt_status_t fit_memory(int n_layer, int n_stages, const bt_stage_costs_t *c,
                              const bt_nodes_t *nd, int *bounds, bool *found)
{
    const size_t n_runs = c->layer_cost == NULL ? (size_t)n_layer
                                                : (size_t)n_layer * (size_t)(n_layer + 1) / 2;
    const size_t n_cand = 4 * n_runs;
    double *cand = malloc(n_cand * sizeof *cand);
    int *count = malloc(sizeof *count * (size_t)nd->n_nodes);
    int *fit = malloc(sizeof *fit * (size_t)(n_stages + 1));
    *found = false;
    const bool ok = cand != NULL && count != NULL && fit != NULL;
    if (ok) {
        size_t i = 0;
        for (int a = 0; a < (c->layer_cost == NULL ? 1 : n_layer); a++)
            for (int b = a + 1; b <= n_layer; b++, i++) {
                double *x = cand + 4 * i;
                x[0] = layers_cost(c, a, b);
                x[1] = x[0] + c->embed;
                x[2] = x[0] + c->head;
                x[3] = x[0] + c->embed + c->head;
            }
        qsort(cand, n_cand, sizeof *cand, cmp_double);
        const bool contiguous = nodes_contiguous(nd, n_stages, count);
        size_t lo = 0, hi = n_cand; /* the answer is in [lo, hi); hi: none found yet */
        while (lo < hi) {
            const size_t mid = lo + (hi - lo) / 2;
            if (greedy_fits(c, nd, contiguous, count, n_layer, n_stages, cand[mid], fit))
                hi = mid;
            else
                lo = mid + 1;
        }
        *found = lo < n_cand &&
                 greedy_fits(c, nd, contiguous, count, n_layer, n_stages, cand[lo], fit);
        if (*found)
            memcpy(bounds, fit, sizeof *fit * (size_t)(n_stages + 1));
    } else {
        bt_log_error("partition: cannot allocate the search over %d layers", n_layer);
    }
    free(cand);
    free(count);
    free(fit);
    return ok ? BT_OK : BT_ERR_NOMEM;
}

/* "0", "0-3" or "0, 2, 5": the ranks on node n. */
static void node_ranks_str(const bt_nodes_t *nd, int n_stages, int n, char *buf, size_t size)
{
    int first = -1, last = -1, k = 0;
    bool run = true;
    for (int s = 0; s < n_stages; s++)
        if (nd->node[s] == n) {
            run = run && (first < 0 || s == last + 1);
            first = first < 0 ? s : first;
            last = s;
            k++;
        }
    if (k == 1 || (run && k > 1)) {
        snprintf(buf, size, k == 1 ? "rank %d" : "ranks %d-%d", first, last);
        return;
    }
    size_t used = (size_t)snprintf(buf, size, "ranks");
    for (int s = 0, i = 0; s < n_stages && used < size; s++)
        if (nd->node[s] == n)
            used += (size_t)snprintf(buf + used, size - used, "%s %d", i++ ? "," : "", s);
}

/* One message: the split, what each rank needs, and the node that cannot
 * hold its ranks' share. */
static void report_overflow(const char *head, const bt_stage_costs_t *c, const bt_nodes_t *nd,
                            const int *bounds, int n_stages, int n, const uint64_t *need)
{
    char split[256], per[256], ranks[64];
    bt_partition_str(bounds, n_stages, split, sizeof split);
    size_t used = 0;
    per[0] = '\0';
    for (int s = 0; s < n_stages && used < sizeof per; s++)
        used += (size_t)snprintf(per + used, sizeof per - used, "%s%.1f",
                                 s ? " | " : "",
                                 (double)bt_stage_bytes(c, bounds, n_stages, s) / 1048576.0);
    node_ranks_str(nd, n_stages, n, ranks, sizeof ranks);
    char name[64];
    if (nd->name != NULL && nd->name[n] != NULL)
        snprintf(name, sizeof name, "'%s'", nd->name[n]);
    else
        snprintf(name, sizeof name, "%d", n);
    bt_log_error("%s (%s): %s %s MiB for %s; node %s (%s) needs %.1f MiB but only %.1f MiB of "
                 "memory is available", head, split, n_stages > 1 ? "the ranks need" : "it needs",
                 per, c->what != NULL ? c->what : "weights and buffers", name, ranks,
                 (double)need[n] / 1048576.0, (double)nd->avail[n] / 1048576.0);
}

/* -ts: stage s ends at the layer nearest to its cumulative share. */
static bt_status_t by_ratios(int n_layer, int n_stages, const double *ratios, int n_ratios,
                             int *bounds)
{
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

bt_status_t bt_partition(int n_layer, int n_stages, const double *ratios, int n_ratios,
                         const bt_stage_costs_t *costs, const bt_nodes_t *nodes, int *bounds)
{
    if (n_stages < 1 || n_stages > n_layer) {
        bt_log_error("cannot split %d layers over %d stages: need 1 <= stages <= layers", n_layer,
                     n_stages);
        return BT_ERR_ARG;
    }
    bt_status_t st = ratios == NULL ? balance(n_layer, n_stages, costs, bounds)
                                    : by_ratios(n_layer, n_stages, ratios, n_ratios, bounds);
    if (st != BT_OK || !checks_memory(costs, nodes))
        return st;
    uint64_t *need = malloc(sizeof *need * (size_t)nodes->n_nodes);
    if (need == NULL)
        return BT_ERR_NOMEM;
    int n = overflowing_node(costs, nodes, bounds, n_stages, need);
    if (n >= 0 && ratios == NULL) { /* bounds keep the balanced split when none fits */
        bool found;
        st = fit_memory(n_layer, n_stages, costs, nodes, bounds, &found);
        if (found)
            n = -1;
    }
    if (n >= 0 && st == BT_OK) {
        char head[96];
        if (ratios != NULL)
            snprintf(head, sizeof head, "-ts");
        else if (n_stages == 1)
            snprintf(head, sizeof head, "the model does not fit in memory");
        else
            snprintf(head, sizeof head,
                     "no split of %d layers over %d ranks fits in memory; balanced by compute",
                     n_layer, n_stages);
        report_overflow(head, costs, nodes, bounds, n_stages, n, need);
        st = BT_ERR_NOMEM;
    }
    free(need);
    return st;
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
