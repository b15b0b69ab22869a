/* check_partition.c: layer blocks per stage, balanced and by -ts ratios. */
#include <check.h>
#include <stdlib.h>

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
    ck_assert_int_eq(bt_partition(30, 2, NULL, 0, &uniform, b), BT_OK);
    expect_bounds(b, (int[]){0, 15, 30}, 2);
    ck_assert_int_eq(bt_partition(7, 3, NULL, 0, &uniform, b), BT_OK);
    /* max 3 layers per stage, every stage non-empty, contiguous */
    for (int s = 0; s < 3; s++) {
        ck_assert_int_ge(b[s + 1] - b[s], 1);
        ck_assert_int_le(b[s + 1] - b[s], 3);
    }
    ck_assert_int_eq(b[0], 0);
    ck_assert_int_eq(b[3], 7);
    ck_assert_int_eq(bt_partition(4, 4, NULL, 0, &uniform, b), BT_OK);
    expect_bounds(b, (int[]){0, 1, 2, 3, 4}, 4);
    ck_assert_int_eq(bt_partition(5, 1, NULL, 0, &uniform, b), BT_OK);
    expect_bounds(b, (int[]){0, 5}, 1);
}
END_TEST

START_TEST(test_balanced_head)
{
    /* a head worth 8 layers moves layers off the last stage: 30 + 8 = 38,
     * so 19 | 11 balances (19 vs 11 + 8) */
    bt_stage_costs_t c = {1.0, 0.0, 8.0};
    int b[3];
    ck_assert_int_eq(bt_partition(30, 2, NULL, 0, &c, b), BT_OK);
    expect_bounds(b, (int[]){0, 19, 30}, 2);
    /* an embedding cost moves layers off the first stage */
    c = (bt_stage_costs_t){1.0, 4.0, 0.0};
    ck_assert_int_eq(bt_partition(10, 2, NULL, 0, &c, b), BT_OK);
    expect_bounds(b, (int[]){0, 3, 10}, 2);
}
END_TEST

START_TEST(test_ratios)
{
    int b[5];
    ck_assert_int_eq(bt_partition(30, 2, (double[]){1, 1}, 2, &uniform, b), BT_OK);
    expect_bounds(b, (int[]){0, 15, 30}, 2);
    ck_assert_int_eq(bt_partition(30, 2, (double[]){3, 1}, 2, &uniform, b), BT_OK);
    expect_bounds(b, (int[]){0, 23, 30}, 2); /* 22.5 rounds to 23 */
    ck_assert_int_eq(bt_partition(7, 3, (double[]){1, 1, 5}, 3, &uniform, b), BT_OK);
    expect_bounds(b, (int[]){0, 1, 2, 7}, 3);
    ck_assert_int_eq(bt_partition(16, 4, (double[]){0.5, 0.25, 0.125, 0.125}, 4, &uniform, b),
                     BT_OK);
    expect_bounds(b, (int[]){0, 8, 12, 14, 16}, 4);
}
END_TEST

START_TEST(test_errors)
{
    int b[9];
    ck_assert_int_eq(bt_partition(3, 4, NULL, 0, &uniform, b), BT_ERR_ARG);       /* S > L */
    ck_assert_int_eq(bt_partition(3, 0, NULL, 0, &uniform, b), BT_ERR_ARG);
    ck_assert_int_eq(bt_partition(8, 2, (double[]){1, 1, 1}, 3, &uniform, b), BT_ERR_ARG);
    ck_assert_int_eq(bt_partition(8, 2, (double[]){1, 0}, 2, &uniform, b), BT_ERR_ARG);
    ck_assert_int_eq(bt_partition(8, 2, (double[]){1, -2}, 2, &uniform, b), BT_ERR_ARG);
    /* a ratio so small its stage rounds to no layer */
    ck_assert_int_eq(bt_partition(4, 2, (double[]){1, 100}, 2, &uniform, b), BT_ERR_ARG);
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
    suite_add_tcase(s, tc);
    tc = tcase_create("limits");
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    int failed = tu_run(s);
    return failed == 0 ? 0 : 1;
}
