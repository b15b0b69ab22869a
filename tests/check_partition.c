/* check_partition.c: layer blocks per stage, balanced and by -ts ratios. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "stages/partition.h"
#include "testutil.h"

static const bt_stage_costs_t uniform = {1.0, 0.0, 0.0};

static void expect_bounds(const int *got, const int *want, int n_stages)
{
    for (int s = 0; s <= n_stages; s++)
        ck_assert_msg(got[s] == want[s], "bound %d: got %d, want %d", s, got[s], want[s]);
}

START_TEST(test_balanced_uniform)
{
    int b[5];
    ck_assert_int_eq(bt_partition(30, 2, NULL, 0, &uniform, NULL, b), BT_OK);
    expect_bounds(b, (int[]){0, 15, 30}, 2);
    ck_assert_int_eq(bt_partition(7, 3, NULL, 0, &uniform, NULL, b), BT_OK);
    /* max 3 layers per stage, every stage non-empty, contiguous */
    for (int s = 0; s < 3; s++) {
        ck_assert_int_ge(b[s + 1] - b[s], 1);
        ck_assert_int_le(b[s + 1] - b[s], 3);
    }
    ck_assert_int_eq(b[0], 0);
    ck_assert_int_eq(b[3], 7);
    ck_assert_int_eq(bt_partition(4, 4, NULL, 0, &uniform, NULL, b), BT_OK);
    expect_bounds(b, (int[]){0, 1, 2, 3, 4}, 4);
    ck_assert_int_eq(bt_partition(5, 1, NULL, 0, &uniform, NULL, b), BT_OK);
    expect_bounds(b, (int[]){0, 5}, 1);
}
END_TEST

START_TEST(test_balanced_head)
{
    /* a head worth 8 layers moves layers off the last stage: 30 + 8 = 38,
     * so 19 | 11 balances (19 vs 11 + 8) */
    bt_stage_costs_t c = {1.0, 0.0, 8.0};
    int b[3];
    ck_assert_int_eq(bt_partition(30, 2, NULL, 0, &c, NULL, b), BT_OK);
    expect_bounds(b, (int[]){0, 19, 30}, 2);
    /* an embedding cost moves layers off the first stage */
    c = (bt_stage_costs_t){1.0, 4.0, 0.0};
    ck_assert_int_eq(bt_partition(10, 2, NULL, 0, &c, NULL, b), BT_OK);
    expect_bounds(b, (int[]){0, 3, 10}, 2);
}
END_TEST

START_TEST(test_ratios)
{
    int b[5];
    ck_assert_int_eq(bt_partition(30, 2, (double[]){1, 1}, 2, &uniform, NULL, b), BT_OK);
    expect_bounds(b, (int[]){0, 15, 30}, 2);
    ck_assert_int_eq(bt_partition(30, 2, (double[]){3, 1}, 2, &uniform, NULL, b), BT_OK);
    expect_bounds(b, (int[]){0, 23, 30}, 2); /* 22.5 rounds to 23 */
    ck_assert_int_eq(bt_partition(7, 3, (double[]){1, 1, 5}, 3, &uniform, NULL, b), BT_OK);
    expect_bounds(b, (int[]){0, 1, 2, 7}, 3);
    ck_assert_int_eq(bt_partition(16, 4, (double[]){0.5, 0.25, 0.125, 0.125}, 4, &uniform, NULL, b),
                     BT_OK);
    expect_bounds(b, (int[]){0, 8, 12, 14, 16}, 4);
}
END_TEST

/* ---- memory (MoE: compute by active parameters, memory by all bytes) ---- */

static uint64_t sum_need(const bt_stage_costs_t *c, const bt_nodes_t *nd, const int *b, int S,
                         int n)
{
    uint64_t need = 0;
    for (int s = 0; s < S; s++)
        if (nd->node[s] == n)
            need += bt_stage_bytes(c, b, S, s);
    return need;
}

/* Runs bt_partition with stderr sent to a file; the messages into msg. */
static bt_status_t partition_msg(int n, int S, const double *r, int nr, const bt_stage_costs_t *c,
                                 const bt_nodes_t *nd, int *b, char *msg, size_t size)
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    ck_assert_ptr_nonnull(tmp);
    const int saved = dup(2);
    dup2(fileno(tmp), 2);
    bt_status_t st = bt_partition(n, S, r, nr, c, nd, b);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    const size_t got = fread(msg, 1, size - 1, tmp);
    msg[got] = '\0';
    fclose(tmp);
    return st;
}

START_TEST(test_memory_uneven)
{
    /* 8 layers of 100 bytes, equal compute; node 1 holds only 300 bytes:
     * balanced 4 | 4 does not fit, 5 | 3 does and is the best that does */
    uint64_t lb[8] = {100, 100, 100, 100, 100, 100, 100, 100};
    bt_stage_costs_t c = {.layer = 1.0, .layer_bytes = lb};
    int node[2] = {0, 1};
    uint64_t avail[2] = {10000, 300};
    bt_nodes_t nd = {2, node, avail, NULL};
    int b[3];
    ck_assert_int_eq(bt_partition(8, 2, NULL, 0, &c, &nd, b), BT_OK);
    expect_bounds(b, (int[]){0, 5, 8}, 2);
    /* room for both halves: the compute balance stands */
    avail[1] = 400;
    ck_assert_int_eq(bt_partition(8, 2, NULL, 0, &c, &nd, b), BT_OK);
    expect_bounds(b, (int[]){0, 4, 8}, 2);
    /* an embedding table on the first stage and buffers on every rank count */
    c.embed_bytes = 250;
    c.rank_bytes = 10;
    avail[0] = 600; /* 250 + 10 + 3 layers */
    avail[1] = 10000;
    ck_assert_int_eq(bt_partition(8, 2, NULL, 0, &c, &nd, b), BT_OK);
    expect_bounds(b, (int[]){0, 3, 8}, 2);
    ck_assert_uint_eq(bt_stage_bytes(&c, b, 2, 0), 560);
    ck_assert_uint_eq(bt_stage_bytes(&c, b, 2, 1), 510);
    /* memory unknown on a node (0) is not checked */
    avail[0] = 0;
    ck_assert_int_eq(bt_partition(8, 2, NULL, 0, &c, &nd, b), BT_OK);
    expect_bounds(b, (int[]){0, 4, 8}, 2);
}
END_TEST

/* Layers that differ (DeepSeek's cheap dense first layers before its
 * expert layers): balanced by each layer's own cost, also when memory
 * decides. */
START_TEST(test_unequal_layers)
{
    const double cost[6] = {1, 1, 4, 4, 4, 4};
    bt_stage_costs_t c = {.layer = 4.0, .layer_cost = cost};
    int b[3];
    /* 3 | 3 costs 6 and 12; 4 | 2 costs 10 and 8, the smallest largest stage */
    ck_assert_int_eq(bt_partition(6, 2, NULL, 0, &c, NULL, b), BT_OK);
    expect_bounds(b, (int[]){0, 4, 6}, 2);
    ck_assert(bt_stage_compute(&c, b, 2, 0) == 10.0 && bt_stage_compute(&c, b, 2, 1) == 8.0);
    /* the second node holds 1 layer: 5 | 1, the only split that fits */
    uint64_t lb[6] = {100, 100, 100, 100, 100, 100};
    c.layer_bytes = lb;
    int node[2] = {0, 1};
    uint64_t avail[2] = {10000, 150};
    bt_nodes_t nd = {2, node, avail, NULL};
    ck_assert_int_eq(bt_partition(6, 2, NULL, 0, &c, &nd, b), BT_OK);
    expect_bounds(b, (int[]){0, 5, 6}, 2);
    /* alike costs as an array: the uniform split */
    const double same[6] = {4, 4, 4, 4, 4, 4};
    c = (bt_stage_costs_t){.layer = 4.0, .layer_cost = same};
    ck_assert_int_eq(bt_partition(6, 2, NULL, 0, &c, NULL, b), BT_OK);
    expect_bounds(b, (int[]){0, 3, 6}, 2);
}
END_TEST

START_TEST(test_memory_shared_node)
{
    /* 4 ranks, two per node: ranks 0-1 share node 0, which holds 500 bytes
     * of 12 layers of 100; node 1 holds the rest: a node's stages together */
    uint64_t lb[12];
    for (int i = 0; i < 12; i++)
        lb[i] = 100;
    bt_stage_costs_t c = {.layer = 1.0, .layer_bytes = lb};
    int node[4] = {0, 0, 1, 1};
    uint64_t avail[2] = {500, 100000};
    bt_nodes_t nd = {2, node, avail, NULL};
    int b[5];
    ck_assert_int_eq(bt_partition(12, 4, NULL, 0, &c, &nd, b), BT_OK);
    ck_assert_uint_le(sum_need(&c, &nd, b, 4, 0), 500);
    /* the largest stage is as small as it can be: 5 layers on node 0, 7 on
     * node 1 over two ranks: 4 */
    int big = 0;
    for (int s = 0; s < 4; s++)
        big = b[s + 1] - b[s] > big ? b[s + 1] - b[s] : big;
    ck_assert_int_eq(big, 4);
    /* round-robin placement (ranks 0 and 2 on node 0): each stage gets an
     * equal share of its node, so still nothing over */
    int rr[4] = {0, 1, 0, 1};
    nd.node = rr;
    ck_assert_int_eq(bt_partition(12, 4, NULL, 0, &c, &nd, b), BT_OK);
    ck_assert_uint_le(sum_need(&c, &nd, b, 4, 0), 500);
}
END_TEST

/* Every split of n layers over S stages, by recursion: the smallest
 * largest compute among those that fit (INFINITY if none). */
static double brute(const bt_stage_costs_t *c, const bt_nodes_t *nd, int n, int S, int s, int *b)
{
    if (s == S) {
        if (b[S] != n)
            return INFINITY;
        for (int k = 0; k < nd->n_nodes; k++)
            if (nd->avail[k] && sum_need(c, nd, b, S, k) > nd->avail[k])
                return INFINITY;
        double worst = 0;
        for (int t = 0; t < S; t++)
            worst = fmax(worst, bt_stage_compute(c, b, S, t));
        return worst;
    }
    double best = INFINITY;
    for (int e = b[s] + 1; e <= n - (S - 1 - s); e++) {
        b[s + 1] = s == S - 1 ? n : e;
        best = fmin(best, brute(c, nd, n, S, s + 1, b));
        if (s == S - 1)
            break;
    }
    return best;
}

START_TEST(test_memory_optimal)
{
    /* random layer sizes, head and embedding, node memory and placement
     * with consecutive ranks per node: the split found is the best that
     * fits, and when none fits the call says so */
    unsigned seed = 12345;
    int found = 0, refused = 0;
    for (int trial = 0; trial < 400; trial++) {
#define RND(m) ((int)((seed = seed * 1103515245u + 12345u) >> 16) % (m))
        const int n = 2 + RND(9), S = 1 + RND(n < 4 ? n : 4);
        uint64_t lb[10];
        for (int i = 0; i < n; i++)
            lb[i] = 50 + (uint64_t)RND(100);
        bt_stage_costs_t c = {.layer = 1.0, .embed = RND(3) * 0.5, .head = RND(4) * 0.5,
                              .layer_bytes = lb, .embed_bytes = (uint64_t)RND(150),
                              .head_bytes = (uint64_t)RND(150), .rank_bytes = 5};
        int node[4], n_nodes = 0;
        for (int s = 0; s < S; s++)
            node[s] = s == 0 ? 0 : RND(2) ? node[s - 1] : ++n_nodes;
        n_nodes++;
        uint64_t avail[4];
        for (int k = 0; k < n_nodes; k++)
            avail[k] = 150 + (uint64_t)RND(700);
        bt_nodes_t nd = {n_nodes, node, avail, NULL};
        int b[5] = {0}, bb[5] = {0};
        const double want = brute(&c, &nd, n, S, 0, bb);
        char msg[1024];
        bt_status_t st = partition_msg(n, S, NULL, 0, &c, &nd, b, msg, sizeof msg);
        if (isinf(want)) {
            CHECK_MSG(st == BT_ERR_NOMEM && strstr(msg, "of memory is available") != NULL,
                      "trial %d: no split fits, got %d: %s", trial, st, msg);
            refused++;
            continue;
        }
        CHECK_MSG(st == BT_OK, "trial %d: a split fits (max %g), got %d: %s", trial, want, st,
                  msg);
        double worst = 0;
        for (int s = 0; s < S; s++) {
            CHECK_MSG(b[s + 1] > b[s], "trial %d: stage %d has no layer", trial, s);
            worst = fmax(worst, bt_stage_compute(&c, b, S, s));
        }
        CHECK_MSG(b[0] == 0 && b[S] == n, "trial %d: bounds %d..%d", trial, b[0], b[S]);
        for (int k = 0; k < n_nodes; k++)
            CHECK_MSG(sum_need(&c, &nd, b, S, k) <= avail[k], "trial %d: node %d over", trial, k);
        CHECK_MSG(worst == want, "trial %d: largest stage %g, best %g", trial, worst, want);
        found++;
#undef RND
    }
    ck_assert_int_gt(found, 50); /* both outcomes were exercised */
    ck_assert_int_gt(refused, 20);
}
END_TEST

START_TEST(test_memory_refused)
{
    uint64_t lb[6] = {100, 100, 100, 100, 100, 100};
    bt_stage_costs_t c = {.layer = 1.0, .layer_bytes = lb, .what = "the weights"};
    int node[2] = {0, 1};
    uint64_t avail[2] = {250, 250};
    const char *names[2] = {"n1", "n2"};
    bt_nodes_t nd = {2, node, avail, names};
    int b[3];
    char msg[1024];
    ck_assert_int_eq(partition_msg(6, 2, NULL, 0, &c, &nd, b, msg, sizeof msg), BT_ERR_NOMEM);
    ck_assert_msg(strstr(msg, "no split of 6 layers over 2 ranks fits in memory; balanced by "
                              "compute (layers 0-2 | 3-5): the ranks need 0.0 | 0.0 MiB for "
                              "the weights; node 'n1' (rank 0) needs 0.0 MiB but only 0.0 MiB "
                              "of memory is available") != NULL, "%s", msg);
    /* -ts overrides the balance, and its split must fit too */
    avail[0] = avail[1] = 400;
    ck_assert_int_eq(bt_partition(6, 2, (double[]){1, 1}, 2, &c, &nd, b), BT_OK);
    expect_bounds(b, (int[]){0, 3, 6}, 2);
    ck_assert_int_eq(bt_partition(6, 2, (double[]){2, 1}, 2, &c, &nd, b), BT_OK);
    expect_bounds(b, (int[]){0, 4, 6}, 2);
    ck_assert_int_eq(partition_msg(6, 2, (double[]){5, 1}, 2, &c, &nd, b, msg, sizeof msg),
                     BT_ERR_NOMEM);
    ck_assert_msg(strstr(msg, "-ts (layers 0-4 | 5-5)") != NULL && strstr(msg, "node 'n1'"),
                  "%s", msg);
}
END_TEST

START_TEST(test_errors)
{
    int b[9];
    ck_assert_int_eq(bt_partition(3, 4, NULL, 0, &uniform, NULL, b), BT_ERR_ARG);       /* S > L */
    ck_assert_int_eq(bt_partition(3, 0, NULL, 0, &uniform, NULL, b), BT_ERR_ARG);
    ck_assert_int_eq(bt_partition(8, 2, (double[]){1, 1, 1}, 3, &uniform, NULL, b), BT_ERR_ARG);
    ck_assert_int_eq(bt_partition(8, 2, (double[]){1, 0}, 2, &uniform, NULL, b), BT_ERR_ARG);
    ck_assert_int_eq(bt_partition(8, 2, (double[]){1, -2}, 2, &uniform, NULL, b), BT_ERR_ARG);
    /* a ratio so small its stage rounds to no layer */
    ck_assert_int_eq(bt_partition(4, 2, (double[]){1, 100}, 2, &uniform, NULL, b), BT_ERR_ARG);
}
END_TEST

START_TEST(test_strings)
{
    int b[3] = {0, 15, 30};
    char buf[64];
    bt_partition_str(b, 2, buf, sizeof buf);
    ck_assert_str_eq(buf, "layers 0-14 | 15-29");
    bt_partition_split_str(b, 2, buf, sizeof buf);
    ck_assert_str_eq(buf, "15/15");
    double *r;
    int n;
    ck_assert_int_eq(bt_parse_ratios("-ts", "3,1", &r, &n), BT_OK);
    ck_assert_int_eq(n, 2);
    ck_assert(r[0] == 3 && r[1] == 1);
    free(r);
    ck_assert_int_eq(bt_parse_ratios("-ts", "1/2/1", &r, &n), BT_OK);
    ck_assert_int_eq(n, 3);
    free(r);
    ck_assert_int_eq(bt_parse_ratios("-ts", "1,x", &r, &n), BT_ERR_ARG);
    ck_assert_int_eq(bt_parse_ratios("-ts", "1,", &r, &n), BT_ERR_ARG);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("partition");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_balanced_uniform);
    tcase_add_test(tc, test_balanced_head);
    tcase_add_test(tc, test_ratios);
    tcase_add_test(tc, test_strings);
    tcase_add_test(tc, test_memory_uneven);
    tcase_add_test(tc, test_unequal_layers);
    tcase_add_test(tc, test_memory_shared_node);
    tcase_add_test(tc, test_memory_optimal);
    tcase_add_test(tc, test_memory_refused);
    suite_add_tcase(s, tc);
    tc = tcase_create("limits");
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    int failed = tu_run(s);
    return failed == 0 ? 0 : 1;
}
