/*
 * check_stats.c: the arithmetic behind the figures baton reports, on
 * inputs with known answers: the link probe's latency and bandwidth from
 * round-trip times.
 */
#include <check.h>

#include "stages/linkprobe.h"
#include "testutil.h"

/* ---- link probe ---- */

START_TEST(test_link_odd_counts)
{
    /* medians 3 us and 20 ms, whatever the order and the outliers */
    double lat[5] = {5e-6, 1e-6, 100e-6, 3e-6, 2e-6};
    double bw[3] = {0.5, 0.02, 0.016};
    bt_link_t l = {.lat_bytes = 8, .lat_reps = 5, .bw_bytes = 1 << 20, .bw_reps = 3};
    bt_linkprobe_figures(lat, bw, &l);
    ck_assert_double_eq_tol(l.latency_s, 1.5e-6, 1e-15);
    /* both directions carry bw_bytes in one round trip */
    ck_assert_double_eq_tol(l.bandwidth, 2.0 * 1048576 / 0.02, 1e-3);
    ck_assert_int_eq(l.lat_reps, 5);
    ck_assert_int_eq(l.bw_reps, 3);
}
END_TEST

START_TEST(test_link_even_counts)
{
    /* the median of an even count is the mean of the middle two */
    double lat[4] = {4e-6, 1e-6, 3e-6, 2e-6};
    double bw[2] = {0.03, 0.01};
    bt_link_t l = {.lat_bytes = 8, .lat_reps = 4, .bw_bytes = 250000, .bw_reps = 2};
    bt_linkprobe_figures(lat, bw, &l);
    ck_assert_double_eq_tol(l.latency_s, 1.25e-6, 1e-15);
    ck_assert_double_eq_tol(l.bandwidth, 2.0 * 250000 / 0.02, 1e-6);
}
END_TEST

START_TEST(test_link_one_trip_and_zero)
{
    /* 1 Gbit/s: 1 MiB each way in 2 * 8.389 ms */
    double lat[1] = {50e-6}, bw[1] = {2 * 1048576 / 125e6};
    bt_link_t l = {.lat_bytes = 8, .lat_reps = 1, .bw_bytes = 1 << 20, .bw_reps = 1};
    bt_linkprobe_figures(lat, bw, &l);
    ck_assert_double_eq_tol(l.latency_s, 25e-6, 1e-15);
    ck_assert_double_eq_tol(l.bandwidth, 125e6, 1e-3);
    /* a round trip too short for the clock gives no bandwidth, not infinity */
    double zero[1] = {0};
    bt_linkprobe_figures(lat, zero, &l);
    ck_assert(l.bandwidth == 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stats");
    TCase *tc = tcase_create("linkprobe");
    tcase_add_test(tc, test_link_odd_counts);
    tcase_add_test(tc, test_link_even_counts);
    tcase_add_test(tc, test_link_one_trip_and_zero);
    suite_add_tcase(s, tc);
    int failed = tu_run(s);
    return failed == 0 ? 0 : 1;
}
