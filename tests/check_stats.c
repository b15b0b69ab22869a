/*
 * check_stats.c: the arithmetic behind the figures baton reports, on
 * inputs with known answers: the link probe's latency and bandwidth from
 * round-trip times, and each stage's busy and wait time and the bubble
 * from a trace's events (overlapping and instant events included).
 */
#include <check.h>

#include "stages/linkprobe.h"
#include "stages/trace.h"
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

/* ---- trace statistics ---- */

#define EV(kind, t0, t1) ((bt_event_t){(t0), (t1), (kind), 0})

/* s holds exactly these seconds (every expected value is exact in binary) */
static void expect_stats(const bt_trace_stats_t *s, double span, double busy, double wait)
{
    ck_assert_msg(s->span == span && s->busy == busy && s->wait == wait,
                  "span %g busy %g wait %g, want %g %g %g", s->span, s->busy, s->wait, span, busy,
                  wait);
}

START_TEST(test_trace_two_stages)
{
    /* rank 0: computes 0-2 and 2-4, waits for the token 4-5;
     * rank 1: waits 0-2, computes 2-4, a zero-length wait at 4, computes 4-6 */
    const bt_event_t ev[] = {
        EV(BT_EV_COMPUTE, 0, 2),    EV(BT_EV_SEND_POSTED, 2, 2), EV(BT_EV_COMPUTE, 2, 4),
        EV(BT_EV_SEND_POSTED, 4, 4), EV(BT_EV_TOKEN_WAIT, 4, 5),
        EV(BT_EV_RECV_WAIT, 0, 2),  EV(BT_EV_COMPUTE, 2, 4),     EV(BT_EV_RECV_WAIT, 4, 4),
        EV(BT_EV_COMPUTE, 4, 6),
    };
    const int counts[2] = {5, 4};
    bt_trace_stats_t st[2];
    double span = -1, bubble = -1;
    ck_assert_int_eq(bt_trace_summary(ev, counts, 2, st, &span, &bubble), BT_OK);
    ck_assert_double_eq(span, 6);
    expect_stats(&st[0], 5, 4, 1);
    expect_stats(&st[1], 6, 4, 2);
    /* 1 - (4 + 4) / (2 * 6) */
    ck_assert_double_eq_tol(bubble, 1.0 / 3, 1e-15);
}
END_TEST

START_TEST(test_trace_overlap)
{
    /* compute 1-4 and 3-6 overlap (busy 5, not 6); the receive wait 5-8
     * overlaps the compute for 1 s (wait 2); the send wait 7-7.5 lies
     * inside the receive wait; an instant at 10 widens the span only */
    const bt_event_t ev[] = {
        EV(BT_EV_COMPUTE, 1, 4),       EV(BT_EV_COMPUTE, 3, 6), EV(BT_EV_SEND_DONE, 3.5, 3.5),
        EV(BT_EV_RECV_WAIT, 5, 8),     EV(BT_EV_SEND_WAIT, 7, 7.5),
        EV(BT_EV_SEND_DONE, 10, 10),
    };
    bt_trace_stats_t s;
    ck_assert_int_eq(bt_trace_stats(ev, 6, &s), BT_OK);
    expect_stats(&s, 9, 5, 2);

    /* a compute event wholly inside another adds nothing; so does a wait
     * wholly inside a compute */
    const bt_event_t nested[] = {
        EV(BT_EV_COMPUTE, 0, 10), EV(BT_EV_COMPUTE, 2, 3), EV(BT_EV_RECV_WAIT, 4, 5),
    };
    ck_assert_int_eq(bt_trace_stats(nested, 3, &s), BT_OK);
    expect_stats(&s, 10, 10, 0);
}
END_TEST

START_TEST(test_trace_bubble_bounds)
{
    /* three stages, one idle with only instants, one without events: the
     * bubble is the idle share 1 - 4 / (3 * 4) */
    const bt_event_t ev[] = {
        EV(BT_EV_COMPUTE, 0, 2), EV(BT_EV_COMPUTE, 1, 4), EV(BT_EV_SEND_POSTED, 2, 2),
    };
    const int counts[3] = {2, 1, 0};
    bt_trace_stats_t st[3];
    double span, bubble;
    ck_assert_int_eq(bt_trace_summary(ev, counts, 3, st, &span, &bubble), BT_OK);
    ck_assert_double_eq(span, 4);
    expect_stats(&st[0], 4, 4, 0);
    expect_stats(&st[1], 0, 0, 0);
    expect_stats(&st[2], 0, 0, 0);
    ck_assert_double_eq_tol(bubble, 2.0 / 3, 1e-15);

    /* every stage busy all the span: no bubble; nothing at all: 0 */
    const bt_event_t full[] = {EV(BT_EV_COMPUTE, 0, 1), EV(BT_EV_COMPUTE, 0, 1)};
    const int one_each[2] = {1, 1};
    ck_assert_int_eq(bt_trace_summary(full, one_each, 2, st, &span, &bubble), BT_OK);
    ck_assert_double_eq(bubble, 0);
    const int none[2] = {0, 0};
    ck_assert_int_eq(bt_trace_summary(full, none, 2, st, &span, &bubble), BT_OK);
    ck_assert_double_eq(span, 0);
    ck_assert_double_eq(bubble, 0);
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
    tc = tcase_create("trace");
    tcase_add_test(tc, test_trace_two_stages);
    tcase_add_test(tc, test_trace_overlap);
    tcase_add_test(tc, test_trace_bubble_bounds);
    suite_add_tcase(s, tc);
    int failed = tu_run(s);
    return failed == 0 ? 0 : 1;
}
