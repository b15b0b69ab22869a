/* check_sampler.c: greedy, the sampling chain and its parameters. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "rng.h"
#include "sampler.h"
#include "testutil.h"

enum { V = 8 };
/* softmax at temp 1: about 0.47 0.26 0.17 0.064 0.024 0.009 0.003 0.001 */
static const float logits[V] = {3.0f, 2.4f, 2.0f, 1.0f, 0.0f, -1.0f, -2.0f, -3.0f};

static bt_sampler_t *make(float temp, int k, float top_p, float min_p, float pen, uint64_t seed)
{
    bt_sampler_params_t p = bt_sampler_defaults();
    p.temp = temp, p.top_k = k, p.top_p = top_p, p.min_p = min_p, p.repeat_penalty = pen;
    p.seed = seed;
    bt_sampler_t *s;
    ck_assert_int_eq(bt_sampler_init(&p, V, &s), BT_OK);
    return s;
}

/* How often each id comes out of n draws. */
static void histogram(bt_sampler_t *s, int n, int *counts)
{
    for (int i = 0; i < V; i++)
        counts[i] = 0;
    for (int i = 0; i < n; i++)
        counts[bt_sampler_sample(s, logits)]++;
}

/* The answer greedy must give: the first strictly larger value wins. */
static int32_t first_max(const float *x, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* bt_sample_greedy scans in lanes: the same index as one scan for every
 * length around the lanes' width and the vocabularies', with ties, NaN,
 * infinities and the maximum at either end, in every position. */
START_TEST(test_greedy_lanes)
{
    enum { N = 1000 };
    static float x[N];
    bt_rng_t rng;
    bt_rng_seed(&rng, 7);
    const int lens[] = {1, 2, 15, 16, 17, 31, 32, 33, 47, 48, 64, 100, 999, N};
    for (int li = 0; li < (int)(sizeof lens / sizeof lens[0]); li++) {
        const int n = lens[li];
        for (int trial = 0; trial < 400; trial++) {
            for (int i = 0; i < n; i++) /* few distinct values: many ties */
                x[i] = (float)(bt_rng_next(&rng) % 7) - 3.0f;
            const int k = (int)(bt_rng_next(&rng) % (uint64_t)n);
            switch (trial % 8) {
            case 1: x[k] = NAN; break;
            case 2: x[0] = NAN; break;
            case 3: x[k] = INFINITY; break;
            case 4: for (int i = 0; i < n; i++) x[i] = -INFINITY; break;
            case 5: for (int i = 0; i < n; i++) x[i] = i == k ? 1.0f : NAN; break;
            case 6: x[n - 1] = 100.0f; break;
            case 7: for (int i = 0; i < n; i++) x[i] = i % 3 == 0 ? NAN : -INFINITY; break;
            default: break;
            }
            ck_assert_msg(bt_sample_greedy(x, n) == first_max(x, n),
                          "n %d, trial %d: %d, one scan %d", n, trial, bt_sample_greedy(x, n),
                          first_max(x, n));
        }
    }
}
END_TEST

START_TEST(test_greedy)
{
    ck_assert_int_eq(bt_sample_greedy(logits, V), 0);
    float tie[3] = {1, 5, 5};
    ck_assert_int_eq(bt_sample_greedy(tie, 3), 1); /* lowest index wins */
    bt_sampler_t *s = make(0.0f, 40, 0.95f, 0.05f, 1.0f, 1);
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(bt_sampler_sample(s, logits), 0);
    bt_sampler_free(s);
    s = make(1.5f, 1, 1.0f, 0.0f, 1.0f, 1); /* top-k 1 is greedy at any temperature */
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(bt_sampler_sample(s, logits), 0);
    bt_sampler_free(s);
}
END_TEST

START_TEST(test_distribution)
{
    /* temp 1, nothing truncated: frequencies follow softmax(logits) */
    bt_sampler_t *s = make(1.0f, 0, 1.0f, 0.0f, 1.0f, 42);
    int counts[V];
    const int n = 200000;
    histogram(s, n, counts);
    double z = 0;
    for (int i = 0; i < V; i++)
        z += exp(logits[i]);
    for (int i = 0; i < V; i++) {
        double p = exp(logits[i]) / z, sd = sqrt(n * p * (1 - p));
        ck_assert_msg(fabs(counts[i] - n * p) < 5 * sd + 1, "id %d: %d draws, expected %.0f", i,
                      counts[i], n * p);
    }
    bt_sampler_free(s);
}
END_TEST

START_TEST(test_truncation)
{
    int counts[V];
    /* top-k 3: only ids 0..2 */
    bt_sampler_t *s = make(1.0f, 3, 1.0f, 0.0f, 1.0f, 7);
    histogram(s, 20000, counts);
    ck_assert(counts[0] > 0 && counts[1] > 0 && counts[2] > 0);
    for (int i = 3; i < V; i++)
        ck_assert_int_eq(counts[i], 0);
    bt_sampler_free(s);
    /* top-p 0.7: 0.47 + 0.26 = 0.73 >= 0.7, so ids 0 and 1 */
    s = make(1.0f, 0, 0.7f, 0.0f, 1.0f, 7);
    histogram(s, 20000, counts);
    ck_assert(counts[0] > 0 && counts[1] > 0);
    for (int i = 2; i < V; i++)
        ck_assert_int_eq(counts[i], 0);
    bt_sampler_free(s);
    /* min-p 0.3: p >= 0.3 * 0.47 keeps ids 0, 1, 2 (0.17 > 0.14) */
    s = make(1.0f, 0, 1.0f, 0.3f, 1.0f, 7);
    histogram(s, 20000, counts);
    ck_assert(counts[2] > 0);
    for (int i = 3; i < V; i++)
        ck_assert_int_eq(counts[i], 0);
    bt_sampler_free(s);
    /* a low temperature sharpens: at 0.25 id 0 has p = 0.90 (0.47 at 1) */
    s = make(0.25f, 0, 1.0f, 0.0f, 1.0f, 7);
    histogram(s, 20000, counts);
    ck_assert_int_gt(counts[0], 20000 * 85 / 100);
    bt_sampler_free(s);
}
END_TEST

START_TEST(test_seed)
{
    bt_sampler_t *a = make(1.0f, 40, 0.95f, 0.05f, 1.0f, 123);
    bt_sampler_t *b = make(1.0f, 40, 0.95f, 0.05f, 1.0f, 123);
    bt_sampler_t *c = make(1.0f, 40, 0.95f, 0.05f, 1.0f, 124);
    int same = 1, differs = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = bt_sampler_sample(a, logits), y = bt_sampler_sample(b, logits);
        same &= x == y;
        differs |= x != bt_sampler_sample(c, logits);
    }
    ck_assert(same);
    ck_assert(differs);
    bt_sampler_free(a);
    bt_sampler_free(b);
    bt_sampler_free(c);
}
END_TEST

START_TEST(test_repeat_penalty)
{
    /* penalizing id 0 (logit 3 -> 3/2 = 1.5) makes greedy pick id 1 */
    bt_sampler_t *s = make(0.0f, 40, 1.0f, 0.0f, 2.0f, 1);
    bt_sampler_accept(s, 0);
    ck_assert_int_eq(bt_sampler_sample(s, logits), 1);
    bt_sampler_free(s);
    /* negative logits are multiplied: id 5 (-1 -> -2) stays below id 4 */
    float l2[V] = {-1.0f, -0.5f, -3, -3, -3, -3, -3, -3};
    s = make(0.0f, 40, 1.0f, 0.0f, 3.0f, 1);
    bt_sampler_accept(s, 1);
    ck_assert_int_eq(bt_sampler_sample(s, l2), 0);
    bt_sampler_free(s);
}
END_TEST

START_TEST(test_bad_params)
{
    bt_sampler_params_t p = bt_sampler_defaults();
    bt_sampler_t *s;
    p.temp = -1;
    ck_assert_int_eq(bt_sampler_init(&p, V, &s), BT_ERR_ARG);
    p = bt_sampler_defaults();
    p.top_p = 0;
    ck_assert_int_eq(bt_sampler_init(&p, V, &s), BT_ERR_ARG);
    p = bt_sampler_defaults();
    p.min_p = 1.5f;
    ck_assert_int_eq(bt_sampler_init(&p, V, &s), BT_ERR_ARG);
    p = bt_sampler_defaults();
    p.repeat_penalty = 0;
    ck_assert_int_eq(bt_sampler_init(&p, V, &s), BT_ERR_ARG);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_greedy);
    tcase_add_test(tc, test_greedy_lanes);
    tcase_add_test(tc, test_distribution);
    tcase_add_test(tc, test_truncation);
    tcase_add_test(tc, test_seed);
    tcase_add_test(tc, test_repeat_penalty);
    suite_add_tcase(s, tc);
    tc = tcase_create("limits");
    tcase_add_test(tc, test_bad_params);
    suite_add_tcase(s, tc);
    return tu_run(s) == 0 ? 0 : 1;
}
