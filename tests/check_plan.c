/* check_plan.c: the schedule model and simulator on hand-made profiles
 * whose answers are known in closed form. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "testutil.h"

/* A profile where a layer takes `per_row` seconds a row (at every
 * context), the head and the embedding nothing, a row `act` bytes. */
typedef struct flat {
    int rows[2], ctx[1];
    double layer[2], head[2], embed[2];
    bt_profile_t p;
} flat_t;

static void flat_init(flat_t *f, int n_layer, double per_row, double act)
{
    *f = (flat_t){.rows = {1, 1024}, .ctx = {0}, .layer = {per_row, per_row * 1024}};
    f->p = (bt_profile_t){.n_layer = n_layer, .n_rows = 2, .rows = f->rows, .n_ctx = 1,
                          .ctx = f->ctx, .layer_s = f->layer, .head_s = f->head,
                          .embed_s = f->embed, .act_bytes_row = act};
}

static bt_plan_pipe_t pipe_of(const flat_t *f, int S, const int *bounds, double lat, double bw)
{
    return (bt_plan_pipe_t){&f->p, S, bounds, lat, bw, 1.0, {0}, 0.0};
}

#define NEAR(a, b) (fabs((double)(a) - (double)(b)) <= 1e-9 * fmax(1.0, fabs((double)(b))))

START_TEST(test_profile_interpolation)
{
    int rows[3] = {1, 4, 16}, ctx[2] = {0, 1000};
    double layer[6] = {1, 2, 5, /* ctx 1000: */ 3, 4, 7}, head[3] = {0.5, 1, 2}, embed[3] = {0};
    bt_profile_t p = {.n_layer = 4, .n_rows = 3, .rows = rows, .n_ctx = 2, .ctx = ctx,
                      .layer_s = layer, .head_s = head, .embed_s = embed, .act_bytes_row = 100};
    ck_assert(NEAR(bt_profile_layer(&p, 4, 0), 2));
    ck_assert(NEAR(bt_profile_layer(&p, 10, 0), 3.5));  /* halfway 4 -> 16 */
    ck_assert(NEAR(bt_profile_layer(&p, 32, 0), 10));   /* in proportion past 16 */
    ck_assert(NEAR(bt_profile_layer(&p, 4, 500), 3));   /* halfway in context */
    ck_assert(NEAR(bt_profile_layer(&p, 4, 2000), 6));  /* linear past 1000 */
    ck_assert(NEAR(bt_profile_layer(&p, 1, 0), 1));
    ck_assert(NEAR(bt_profile_head(&p, 2), 0.5 + 0.5 / 3));
    ck_assert(NEAR(bt_profile_head(&p, 0), 0));
    /* crowding: the layer with the node's other cores reading memory over
     * the layer alone, at context 0; 1 when not measured, never below 1 */
    ck_assert(NEAR(bt_profile_crowding(&p, 4), 1));
    double shared[3] = {2, 3, 4};
    p.shared_s = shared;
    ck_assert(NEAR(bt_profile_crowding(&p, 1), 2));
    ck_assert(NEAR(bt_profile_crowding(&p, 4), 1.5));
    ck_assert(NEAR(bt_profile_crowding(&p, 10), 3.5 / 3.5));
    ck_assert(NEAR(bt_profile_crowding(&p, 16), 1)); /* 4 < 5: never below 1 */
}
END_TEST

/* A node's cores: the slowdown of ranks beyond them, who shares them
 * (waiting ranks too once the ranks outnumber the cores), and the crowding
 * of its memory by the other computing ranks. */
START_TEST(test_node_sharing)
{
    ck_assert(NEAR(bt_plan_slowdown(2, 1, 2), 1));
    ck_assert(NEAR(bt_plan_slowdown(3, 1, 2), 1.5));
    ck_assert(NEAR(bt_plan_slowdown(2, 2, 2), 2));
    ck_assert(NEAR(bt_plan_slowdown(8, 1, 0), 1)); /* cores unknown */
    ck_assert_int_eq(bt_plan_sharing(1, 2, 1, 2), 1); /* a core each: the waiting one yields */
    ck_assert_int_eq(bt_plan_sharing(1, 3, 1, 2), 3); /* 3 ranks, 2 cores: all share */
    ck_assert_int_eq(bt_plan_sharing(2, 4, 1, 2), 4);
    ck_assert_int_eq(bt_plan_sharing(1, 2, 2, 2), 2); /* 2 x 2 threads on 2 cores */
    ck_assert_int_eq(bt_plan_sharing(1, 3, 1, 0), 1);
    ck_assert(NEAR(bt_plan_crowding(1, 1, 2), 0));
    ck_assert(NEAR(bt_plan_crowding(2, 1, 2), 1));
    ck_assert(NEAR(bt_plan_crowding(2, 1, 4), 1.0 / 3));
    ck_assert(NEAR(bt_plan_crowding(8, 1, 4), 1));
    ck_assert(NEAR(bt_plan_crowding(2, 2, 2), 0)); /* no other cores */
}
END_TEST

/* A stage's compute grows by crowding x (the profile's crowding - 1), its
 * gathers not; the tensor share adds the experts' share at the rows,
 * interpolated in log2 rows. */
START_TEST(test_crowding_and_experts)
{
    flat_t f;
    flat_init(&f, 4, 1e-3, 0);
    double shared[2];
    for (int i = 0; i < 2; i++)
        shared[i] = 1.6 * f.layer[i];
    f.p.shared_s = shared;
    int b[2] = {0, 4};
    bt_plan_pipe_t p = pipe_of(&f, 1, b, 0, 0);
    const double alone = bt_plan_stage_s(&p, 0, 1, 0, 0);
    p.crowding = 0.5;
    ck_assert(NEAR(bt_plan_stage_s(&p, 0, 1, 0, 0), alone * 1.3));
    p.tensor = (bt_plan_tensor_t){.tp = 2, .share = 0.3, .expert_frac = 0.5, .gathers = 3,
                                  .latency_s = 1e-5};
    for (int i = 0; i < BT_PLAN_EXPERT_ROWS; i++)
        p.tensor.expert_share[i] = 0.5 + 0.2 / (1 << i);
    ck_assert(NEAR(bt_plan_tensor_share(&p.tensor, 1), 0.3 + 0.5 * 0.7));
    ck_assert(NEAR(bt_plan_tensor_share(&p.tensor, 2), 0.3 + 0.5 * 0.6));
    ck_assert(NEAR(bt_plan_tensor_share(&p.tensor, 3), 0.3 + 0.5 * (0.6 + (log2(3) - 1) * -0.05)));
    ck_assert(NEAR(bt_plan_tensor_share(&p.tensor, 1 << 20),
                   0.3 + 0.5 * p.tensor.expert_share[BT_PLAN_EXPERT_ROWS - 1]));
    p.tensor.expert_frac = 0;
    ck_assert(NEAR(bt_plan_tensor_share(&p.tensor, 7), 0.3));
    ck_assert(NEAR(bt_plan_stage_s(&p, 0, 1, 0, 0), alone * 1.3 * 0.3 + 4 * 3 * 1e-5 + 1e-5));
}
END_TEST

START_TEST(test_gpipe_equal_stages)
{
    /* S equal stages, free hops: GPipe time = (M + S - 1) t_stage, and the
     * simulator agrees; sync = M S t_stage */
    flat_t f;
    flat_init(&f, 12, 1e-3, 0);
    for (int S = 1; S <= 4; S++) {
        int b[5];
        for (int s = 0; s <= S; s++)
            b[s] = 12 * s / S;
        const bt_plan_pipe_t p = pipe_of(&f, S, b, 0, 0);
        for (int M = 1; M <= 9; M += 4) {
            const int ub = 8, n = M * ub;
            const double t_stage = 12 / S * ub * 1e-3;
            const double want = (M + S - 1) * t_stage;
            ck_assert_msg(NEAR(bt_plan_prefill(&p, n, ub, BT_PLAN_GPIPE), want),
                          "S %d M %d: %g, want %g", S, M, bt_plan_prefill(&p, n, ub, BT_PLAN_GPIPE),
                          want);
            bt_plan_sim_t sim;
            ck_assert_int_eq(bt_plan_simulate_prefill(&p, n, ub, BT_PLAN_GPIPE, false, &sim),
                             BT_OK);
            ck_assert_msg(NEAR(sim.seconds, want), "sim S %d M %d: %g", S, M, sim.seconds);
            ck_assert(NEAR(bt_plan_prefill(&p, n, ub, BT_PLAN_SYNC), M * S * t_stage));
            ck_assert_int_eq(bt_plan_simulate_prefill(&p, n, ub, BT_PLAN_SYNC, false, &sim),
                             BT_OK);
            ck_assert(NEAR(sim.seconds, M * S * t_stage));
        }
    }
}
END_TEST

/* Layers of two kinds (a DeepSeek model's dense first layers): each
 * stage's time is its dense layers at their cost plus its others at
 * theirs, and layer il's time is its kind's. */
START_TEST(test_layer_kinds)
{
    flat_t f;
    flat_init(&f, 8, 1e-3, 0); /* the average layer: 1 ms a row */
    const double dense[2] = {0.25e-3, 0.25e-3 * 1024}, expert[2] = {2e-3, 2e-3 * 1024};
    f.p.n_dense = 2;
    f.p.dense_s = dense;
    f.p.expert_s = expert;
    ck_assert(NEAR(bt_profile_layer_at(&f.p, 1, 1, 0), 0.25e-3));
    ck_assert(NEAR(bt_profile_layer_at(&f.p, 2, 1, 0), 2e-3));
    ck_assert(NEAR(bt_profile_layer(&f.p, 1, 0), 1e-3));
    const int b[3] = {0, 3, 8}; /* 2 dense + 1 expert | 5 expert */
    const bt_plan_pipe_t p = pipe_of(&f, 2, b, 0, 0);
    ck_assert(NEAR(bt_plan_stage_s(&p, 0, 1, 0, 0), 2 * 0.25e-3 + 2e-3));
    ck_assert(NEAR(bt_plan_stage_s(&p, 1, 1, 0, 0), 5 * 2e-3));
    /* without both kinds' tables, every layer is the average */
    f.p.expert_s = NULL;
    ck_assert(NEAR(bt_plan_stage_s(&p, 0, 1, 0, 0), 3e-3));
}
END_TEST

/* Experts: a call of r rows chooses k + spread (E (1 - (1 - k/E)^r) - k)
 * distinct experts (k at one row, never more than E), bt_plan_spread
 * inverts it, and a layer with experts costs the profile's time plus the
 * workload's experts beyond the profile's own at expert_one_s each, for
 * the layers with experts only, and only with a spread given. */
START_TEST(test_expert_spread)
{
    ck_assert(NEAR(bt_plan_experts(128, 8, 0.4, 1), 8));
    ck_assert(NEAR(bt_plan_experts(128, 8, 0, 16), 8));
    const double indep8 = 128 * (1 - pow(120.0 / 128, 8)); /* 51.6 */
    ck_assert(NEAR(bt_plan_experts(128, 8, 1, 8), indep8));
    ck_assert(NEAR(bt_plan_experts(128, 8, 0.5, 8), 8 + 0.5 * (indep8 - 8)));
    ck_assert(NEAR(bt_plan_experts(8, 2, 3, 64), 8)); /* at most E */
    ck_assert(NEAR(bt_plan_experts(0, 0, 1, 8), 0));
    ck_assert(NEAR(bt_plan_spread(128, 8, 8, 8 + 0.25 * (indep8 - 8)), 0.25));
    ck_assert(NEAR(bt_plan_spread(128, 8, 8, 5), 0));  /* fewer than k: none spread */
    ck_assert(NEAR(bt_plan_spread(128, 8, 1, 8), -1)); /* one row: any spread */
    ck_assert(NEAR(bt_plan_spread(0, 0, 8, 0), -1));

    flat_t f;
    flat_init(&f, 4, 1e-3, 0);
    const double chose[2] = {8, 100}; /* at 1 and 1024 rows */
    f.p.experts = chose;
    f.p.expert_one_s = 1e-5;
    f.p.n_expert = 128;
    f.p.n_expert_used = 8;
    f.p.spread = -1; /* none given: as the profile's calls chose */
    ck_assert(NEAR(bt_profile_layer_at(&f.p, 0, 8, 0), 8e-3)); /* no spread given */
    f.p.spread = 1;
    const double own8 = 8 + 7.0 / 1023 * 92; /* the profile's, interpolated */
    ck_assert(NEAR(bt_profile_layer_at(&f.p, 0, 8, 0), 8e-3 + (indep8 - own8) * 1e-5));
    ck_assert(NEAR(bt_profile_layer_at(&f.p, 3, 1, 0), 1e-3)); /* one row: k either way */
    f.p.spread = 0; /* fewer than the profile's: cheaper */
    ck_assert(NEAR(bt_profile_layer_at(&f.p, 0, 8, 0), 8e-3 - (own8 - 8) * 1e-5));
    const int b[2] = {0, 4};
    const bt_plan_pipe_t p = pipe_of(&f, 1, b, 0, 0);
    ck_assert(NEAR(bt_plan_stage_s(&p, 0, 8, 0, 0), 4 * (8e-3 - (own8 - 8) * 1e-5)));
    /* layers of two kinds: the dense ones keep their time */
    const double dense[2] = {0.25e-3, 0.25e-3 * 1024}, expert[2] = {2e-3, 2e-3 * 1024};
    f.p.n_dense = 1;
    f.p.dense_s = dense;
    f.p.expert_s = expert;
    ck_assert(NEAR(bt_profile_layer_at(&f.p, 0, 8, 0), 2e-3));
    ck_assert(NEAR(bt_profile_layer_at(&f.p, 1, 8, 0), 16e-3 - (own8 - 8) * 1e-5));
}
END_TEST

/* Tensor ranks: a stage's layer costs the largest share of the one-rank
 * time plus its gathers (fixed cost and bytes), and each micro-batch the
 * leader's broadcast; a stage of 2 ranks with free gathers is twice as
 * fast, and the simulator agrees with the closed form. */
START_TEST(test_tensor_stage)
{
    flat_t f;
    flat_init(&f, 12, 1e-3, 1000);
    int b[3] = {0, 6, 12};
    bt_plan_pipe_t p = pipe_of(&f, 2, b, 0, 0);
    const double one = bt_plan_stage_s(&p, 0, 8, 0, 0);
    p.tensor = (bt_plan_tensor_t){.tp = 2, .share = 0.5, .head_share = 0.5, .gathers = 4,
                                  .bytes_row = 0, .latency_s = 0, .bandwidth_Bps = 0};
    ck_assert(NEAR(bt_plan_stage_s(&p, 0, 8, 0, 0), one / 2));
    /* 4 gathers of 10 us and 2000 bytes a row at 1 GB/s, a 1000-byte row broadcast */
    p.tensor = (bt_plan_tensor_t){.tp = 2, .share = 0.6, .head_share = 0.5, .gathers = 4,
                                  .bytes_row = 2000, .latency_s = 1e-5, .bandwidth_Bps = 1e9};
    const double gather = 4 * 1e-5 + 8 * 2000 / 1e9, bcast = 1e-5 + 8 * 1000 / 1e9;
    ck_assert(NEAR(bt_plan_gather_s(&p.tensor, 8), gather));
    ck_assert(NEAR(bt_plan_stage_s(&p, 0, 8, 0, 0), 0.6 * one + 6 * gather + bcast));
    /* the rest of a layer (norms, routing, ...) is every rank's whole: with
     * a fifth of each layer rest, a layer costs 0.6 * 0.8 + 0.2 of one */
    const double rest[2] = {0.2 * f.layer[0], 0.2 * f.layer[1]}, layer8 = one / 6;
    ck_assert(NEAR(bt_profile_rest(&f.p, 8), 0));
    f.p.rest_s = rest;
    ck_assert(NEAR(bt_profile_rest(&f.p, 8), 0.2 * layer8));
    ck_assert(NEAR(bt_plan_stage_s(&p, 0, 8, 0, 0), 6 * (0.6 * 0.8 + 0.2) * layer8 + 6 * gather +
                                                       bcast));
    f.p.rest_s = NULL;
    for (int mode = 0; mode <= 1; mode++) {
        bt_plan_sim_t sim;
        ck_assert_int_eq(bt_plan_simulate_prefill(&p, 64, 8, (bt_plan_mode_t)mode, false, &sim),
                         BT_OK);
        ck_assert_msg(NEAR(sim.seconds, bt_plan_prefill(&p, 64, 8, (bt_plan_mode_t)mode)),
                      "mode %d: sim %g, closed form %g", mode, sim.seconds,
                      bt_plan_prefill(&p, 64, 8, (bt_plan_mode_t)mode));
    }
}
END_TEST

START_TEST(test_slow_link)
{
    /* 2 stages of 8 ms a micro-batch, a hop of 20 ms (latency 4 ms plus
     * 16 ms of bytes): the hop is the bottleneck, so GPipe takes
     * t0 + M c + t1 plus the token back (one latency) */
    flat_t f;
    flat_init(&f, 2, 1e-3, 1000); /* a row: 1 ms a layer, 1000 bytes */
    const int b[3] = {0, 1, 2};
    const bt_plan_pipe_t p = pipe_of(&f, 2, b, 4e-3, 8 * 1000 / 16e-3);
    const int M = 6, ub = 8;
    const double t = 8e-3, c = 4e-3 + 16e-3;
    const double want = t + M * c + t + 4e-3;
    ck_assert(NEAR(bt_plan_msg_s(&p, ub), c));
    ck_assert_msg(NEAR(bt_plan_prefill(&p, M * ub, ub, BT_PLAN_GPIPE), want), "%g vs %g",
                  bt_plan_prefill(&p, M * ub, ub, BT_PLAN_GPIPE), want);
    bt_plan_sim_t sim;
    ck_assert_int_eq(bt_plan_simulate_prefill(&p, M * ub, ub, BT_PLAN_GPIPE, false, &sim), BT_OK);
    ck_assert_msg(NEAR(sim.seconds, want), "sim %g vs %g", sim.seconds, want);
    /* sync: every micro-batch t + c + t, plus a DONE latency between them
     * and the token back at the end */
    ck_assert(NEAR(bt_plan_prefill(&p, M * ub, ub, BT_PLAN_SYNC), M * (2 * t + c) + M * 4e-3));
    ck_assert_int_eq(bt_plan_simulate_prefill(&p, M * ub, ub, BT_PLAN_SYNC, false, &sim), BT_OK);
    ck_assert(NEAR(sim.seconds, M * (2 * t + c) + M * 4e-3));
}
END_TEST

START_TEST(test_unbalanced)
{
    /* 3 layers over 2 stages as 2 | 1: the 2-layer stage sets the pace:
     * t0 + (M - 1) t0 + t1 = M t0 + t1 */
    flat_t f;
    flat_init(&f, 3, 1e-3, 0);
    const int b[3] = {0, 2, 3};
    const bt_plan_pipe_t p = pipe_of(&f, 2, b, 0, 0);
    const int M = 5, ub = 4;
    const double t0 = 2 * ub * 1e-3, t1 = ub * 1e-3;
    ck_assert(NEAR(bt_plan_prefill(&p, M * ub, ub, BT_PLAN_GPIPE), M * t0 + t1));
    bt_plan_sim_t sim;
    ck_assert_int_eq(bt_plan_simulate_prefill(&p, M * ub, ub, BT_PLAN_GPIPE, false, &sim), BT_OK);
    ck_assert(NEAR(sim.seconds, M * t0 + t1));
    /* reversed, 1 | 2: the same total, the second stage the bottleneck */
    const int r[3] = {0, 1, 3};
    const bt_plan_pipe_t q = pipe_of(&f, 2, r, 0, 0);
    ck_assert(NEAR(bt_plan_prefill(&q, M * ub, ub, BT_PLAN_GPIPE), t1 + M * t0));
}
END_TEST

START_TEST(test_slots_limit_run_ahead)
{
    /* a fast first stage and a slow second one: with BT_PLAN_SLOTS message
     * slots the first stage cannot compute micro-batch m before its send
     * of m - 3 has completed, so it never runs more than 3 ahead */
    flat_t f;
    flat_init(&f, 11, 1e-3, 100);
    const int b[3] = {0, 1, 11}; /* stage 1 is 10x stage 0 */
    const bt_plan_pipe_t p = pipe_of(&f, 2, b, 1e-4, 1e9);
    const int M = 12, ub = 4;
    bt_plan_sim_t sim;
    ck_assert_int_eq(bt_plan_simulate_prefill(&p, M * ub, ub, BT_PLAN_GPIPE, true, &sim), BT_OK);
    ck_assert_ptr_nonnull(sim.events);
    double start0[12] = {0}, start1[12] = {0};
    const bt_event_t *e = sim.events;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sim.counts[s]; i++, e++)
            if (e->kind == BT_EV_COMPUTE)
                (s == 0 ? start0 : start1)[e->mb] = e->t0;
    int blocked = 0;
    for (int m = BT_PLAN_SLOTS + 1; m < M; m++) {
        /* stage 1 posts the receive of m - 3 when it starts on m - 4, the
         * send of m - 3 then completes and frees stage 0's slot for m */
        ck_assert_msg(start0[m] >= start1[m - BT_PLAN_SLOTS - 1], "mb %d starts at %g before %g",
                      m, start0[m], start1[m - BT_PLAN_SLOTS - 1]);
        blocked += start0[m] > 1e-12 + (m * ub * 1e-3);
    }
    ck_assert_int_gt(blocked, 0); /* the limit did hold stage 0 back */
    /* the closed form has no slots: it is a lower bound */
    ck_assert(bt_plan_prefill(&p, M * ub, ub, BT_PLAN_GPIPE) <= sim.seconds + 1e-12);
    bt_plan_sim_free(&sim);
}
END_TEST

START_TEST(test_decode_ring_and_groups)
{
    /* one sequence: every stage and hop, and the token back;
     * G groups over S stages: the ring holds them all when G <= S */
    flat_t f;
    flat_init(&f, 4, 1e-3, 0);
    const int b[5] = {0, 1, 2, 3, 4};
    const bt_plan_pipe_t p = pipe_of(&f, 4, b, 1e-4, 0);
    const double ring1 = 4 * 1e-3 + 3 * 1e-4 + 1e-4;
    ck_assert(NEAR(bt_plan_decode(&p, 1, 1, 0), ring1));
    /* 8 sequences in 4 groups of 2: ring of a group 4 * 2 ms + 4 hops;
     * the slowest stage 2 ms, 4 groups 8 ms: the ring wins */
    const double ring2 = 4 * 2e-3 + 4 * 1e-4;
    ck_assert(NEAR(bt_plan_decode(&p, 8, 4, 0), fmax(ring2, 4 * 2e-3)));
    /* and the simulator the same steady state: the time 200 more steps
     * take (past the fill) */
    bt_plan_sim_t sim, sim2;
    const int steps = 200;
    ck_assert_int_eq(bt_plan_simulate_decode(&p, 8, 4, steps, 0, false, &sim), BT_OK);
    ck_assert_int_eq(bt_plan_simulate_decode(&p, 8, 4, 2 * steps, 0, false, &sim2), BT_OK);
    const double per_step = (sim2.seconds - sim.seconds) / steps;
    ck_assert_msg(NEAR(per_step, bt_plan_decode(&p, 8, 4, 0)), "sim %g a step, model %g",
                  per_step, bt_plan_decode(&p, 8, 4, 0));
    ck_assert_int_eq(bt_plan_simulate_decode(&p, 1, 1, steps, 0, false, &sim), BT_OK);
    ck_assert(NEAR(sim.seconds, steps * ring1));
    /* 8 groups over 4 stages: stage-bound, 8 x 1 ms per step */
    ck_assert(NEAR(bt_plan_decode(&p, 8, 8, 0), fmax(4 * 1e-3 + 4 * 1e-4, 8 * 1e-3)));
}
END_TEST

START_TEST(test_trace)
{
    flat_t f;
    flat_init(&f, 4, 1e-3, 10);
    const int b[3] = {0, 2, 4};
    const bt_plan_pipe_t p = pipe_of(&f, 2, b, 1e-5, 1e9);
    bt_plan_sim_t sim;
    ck_assert_int_eq(bt_plan_simulate_prefill(&p, 32, 8, BT_PLAN_GPIPE, true, &sim), BT_OK);
    ck_assert_int_eq(sim.counts[0] >= 4 && sim.counts[1] >= 4, 1);
    char *dir = tu_mkdtemp(), path[512];
    snprintf(path, sizeof path, "%s/sim.json", dir);
    ck_assert_int_eq(bt_plan_write_trace(&sim, path), BT_OK);
    size_t n;
    char *json = tu_read_file(path, &n);
    ck_assert_ptr_nonnull(json);
    json = realloc(json, n + 1); /* a string for strstr: the file has no NUL */
    ck_assert_ptr_nonnull(json);
    json[n] = '\0';
    ck_assert_ptr_nonnull(strstr(json, "\"traceEvents\""));
    ck_assert_ptr_nonnull(strstr(json, "\"name\": \"compute\""));
    free(json);
    bt_plan_sim_free(&sim);
    tu_rmdir_all(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_profile_interpolation);
    tcase_add_test(tc, test_gpipe_equal_stages);
    tcase_add_test(tc, test_layer_kinds);
    tcase_add_test(tc, test_expert_spread);
    tcase_add_test(tc, test_slow_link);
    tcase_add_test(tc, test_tensor_stage);
    tcase_add_test(tc, test_crowding_and_experts);
    tcase_add_test(tc, test_node_sharing);
    tcase_add_test(tc, test_unbalanced);
    tcase_add_test(tc, test_slots_limit_run_ahead);
    tcase_add_test(tc, test_decode_ring_and_groups);
    tcase_add_test(tc, test_trace);
    suite_add_tcase(s, tc);
    return tu_run(s) == 0 ? 0 : 1;
}
