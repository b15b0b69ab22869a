/* check_bench_params.c: baton-bench's lists, ranges, flags and the
 * cartesian product of tests. */
#include <check.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "params.h"
#include "testutil.h"

static void expect_list(const char *s, const int *want, int n)
{
    bt_int_list_t l = {0};
    ck_assert_int_eq(bt_parse_list("-p", s, 0, 1 << 24, &l), BT_OK);
    ck_assert_int_eq(l.n, n);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(l.v[i], want[i]);
    bt_int_list_free(&l);
}

START_TEST(test_lists)
{
    expect_list("512", (int[]){512}, 1);
    expect_list("1,2,3", (int[]){1, 2, 3}, 3);
    expect_list("1-4", (int[]){1, 2, 3, 4}, 4);
    expect_list("1-8+3", (int[]){1, 4, 7}, 3);
    expect_list("128-1024*2", (int[]){128, 256, 512, 1024}, 4);
    expect_list("16,64-256*4,1000", (int[]){16, 64, 256, 1000}, 4);
    expect_list("5-5", (int[]){5}, 1);
}
END_TEST

START_TEST(test_bad_lists)
{
    bt_int_list_t l = {0};
    static const char *const bad[] = {"", "x", "1,", ",1", "1,,2", "4-1", "1-", "1-4+0",
                                      "1-8*1", "0-8*2", "1-4/2", "2.5", "-3", "99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(bt_parse_list("-p", bad[i], 0, 1 << 24, &l) == BT_ERR_ARG,
                      "'%s' was accepted", bad[i]);
    ck_assert_int_eq(bt_parse_list("-ub", "0", 1, 100, &l), BT_ERR_ARG);
    ck_assert_int_eq(bt_parse_list("-ub", "101", 1, 100, &l), BT_ERR_ARG);
}
END_TEST

/* Splits "baton-bench LINE" into words and parses them. p keeps pointers
 * into argv (-o, --hdf5, ... as main's argv), so the words live in static
 * storage until the next call, not on this function's stack. */
static bt_status_t parse(bt_bench_params_t *p, const char *line)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "baton-bench %s", line);
    static char *argv[64];
    int argc = 0;
    for (char *tok = strtok(buf, " "); tok && argc < 64; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    return bt_bench_params_parse(argc, argv, 3, p);
}

/* The layout of a test: split mode, tp, pipeline. */
static void expect_layout(const bt_bench_test_t *t, int mode, int tp, int pipeline)
{
    ck_assert_msg(t->split_mode == mode && t->tp == tp && t->pipeline == pipeline,
                  "test: -sm %d -tp %d pipeline %d, want %d %d %d", t->split_mode, t->tp,
                  t->pipeline, mode, tp, pipeline);
}

START_TEST(test_flags_and_product)
{
    bt_bench_params_t p;
    ck_assert_int_eq(parse(&p, "-m a.gguf,b.gguf -p 128,512 -n 32 -pg 64,8 -ub 64,128 -b 256 "
                               "--pipeline 0,1 -r 2 -ts 1/1,3/1 -o json --no-warmup"),
                     BT_OK);
    ck_assert_int_eq(p.n_models, 2);
    ck_assert_int_eq(p.reps, 2);
    ck_assert(!p.warmup);
    ck_assert_str_eq(p.output, "json");
    ck_assert_int_eq(p.n_splits, 2);
    ck_assert(p.splits[1].n == 2 && p.splits[1].ratios[0] == 3 && p.splits[1].ratios[1] == 1);
    ck_assert_int_eq(p.threads.n, 1);
    ck_assert_int_eq(p.threads.v[0], 3); /* the default passed in */
    bt_bench_test_t *t;
    int n;
    ck_assert_int_eq(bt_bench_tests(&p, &t, &n), BT_OK);
    /* 2 models x 2 splits x 1 thread x 1 batch x 2 ub x 2 pipeline x (2 pp + 1 tg + 1 pg) */
    ck_assert_int_eq(n, 2 * 2 * 2 * 2 * 4);
    char name[48];
    bt_bench_test_name(&t[0], name, sizeof name);
    ck_assert_str_eq(name, "pp128");
    ck_assert_int_eq(t[0].pipeline, 0);
    bt_bench_test_name(&t[2], name, sizeof name);
    ck_assert_str_eq(name, "tg32");
    bt_bench_test_name(&t[3], name, sizeof name);
    ck_assert_str_eq(name, "pp64+tg8");
    ck_assert_int_eq(t[4].pipeline, 1); /* pipeline varies fastest after the tests */
    ck_assert_str_eq(t[n - 1].model, "b.gguf");
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(t[i].parallel, 1); /* the default: one sequence */
        expect_layout(&t[i], BT_SPLIT_MODE_LAYER, 1, i / 4 % 2); /* -sm layer -tp 1 */
    }
    free(t);
    bt_bench_params_free(&p);

    /* ubatch > batch combinations are skipped */
    ck_assert_int_eq(parse(&p, "-m a.gguf -p 64 -n 0 -ub 32,512 -b 256"), BT_OK);
    ck_assert_int_eq(bt_bench_tests(&p, &t, &n), BT_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(t[0].ubatch, 32);
    free(t);
    bt_bench_params_free(&p);
}
END_TEST

/* -npl joins the product after --pipeline; -npl and --parallel are one flag. */
START_TEST(test_parallel)
{
    bt_bench_params_t p;
    ck_assert_int_eq(parse(&p, "-m a.gguf -p 64 -n 16 -pg 32,4 -ub 16,32 --pipeline 0,1 "
                               "-npl 1,4,16 --groups 3"),
                     BT_OK);
    ck_assert_int_eq(p.parallel.n, 3);
    ck_assert_int_eq(p.parallel.v[2], 16);
    ck_assert_int_eq(p.groups, 3);
    bt_bench_test_t *t;
    int n;
    ck_assert_int_eq(bt_bench_tests(&p, &t, &n), BT_OK);
    /* 2 ub x 2 pipeline x 3 parallel x (pp + tg + pg) */
    ck_assert_int_eq(n, 2 * 2 * 3 * 3);
    static const int want_npl[] = {1, 4, 16};
    for (int i = 0; i < n; i++) {
        int test = i % 3, cfg = i / 3; /* the tests vary fastest, then parallel, pipeline, ub */
        ck_assert_int_eq(t[i].kind, test == 0 ? BT_TEST_PP : test == 1 ? BT_TEST_TG : BT_TEST_PG);
        ck_assert_int_eq(t[i].parallel, want_npl[cfg % 3]);
        ck_assert_int_eq(t[i].pipeline, cfg / 3 % 2);
        ck_assert_int_eq(t[i].ubatch, cfg / 6 == 0 ? 16 : 32);
    }
    free(t);
    bt_bench_params_free(&p);

    /* the long name and a range; each list given twice: the last wins */
    ck_assert_int_eq(parse(&p, "-m a.gguf -npl 2 --parallel 1-16*4"), BT_OK);
    ck_assert_int_eq(p.parallel.n, 3);
    ck_assert(p.parallel.v[0] == 1 && p.parallel.v[1] == 4 && p.parallel.v[2] == 16);
    ck_assert_int_eq(p.groups, 0); /* automatic */
    bt_bench_params_free(&p);
    ck_assert_int_eq(parse(&p, "-m a.gguf -p 8 -n 0 --parallel 8 -npl 2"), BT_OK);
    ck_assert_int_eq(bt_bench_tests(&p, &t, &n), BT_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(t[0].parallel, 2);
    free(t);
    bt_bench_params_free(&p);
}
END_TEST

/* -sm and -tp join the product after -ub, before --pipeline; a tensor test
 * is made once per other combination (tp 0: all ranks), with pipeline 0
 * when --pipeline is not given; with --pipeline 1 given it stays in the
 * list for bench.c to skip. */
START_TEST(test_split_mode)
{
    bt_bench_params_t p;
    bt_bench_test_t *t;
    int n;
    /* the reference command: layer/0, layer/1, tensor/0, tensor/1 (skipped by bench.c) */
    ck_assert_int_eq(parse(&p, "-m a.gguf -sm layer,tensor --pipeline 0,1 -p 2048 -n 128 "
                               "-ub 512"),
                     BT_OK);
    ck_assert(p.split_mode.n == 2 && p.split_mode.v[0] == BT_SPLIT_MODE_LAYER &&
              p.split_mode.v[1] == BT_SPLIT_MODE_TENSOR);
    ck_assert(p.tp.n == 1 && p.tp.v[0] == 1);
    ck_assert(p.pipeline_given);
    ck_assert_int_eq(bt_bench_tests(&p, &t, &n), BT_OK);
    ck_assert_int_eq(n, 8);
    static const int want[4][3] = {{BT_SPLIT_MODE_LAYER, 1, 0}, {BT_SPLIT_MODE_LAYER, 1, 1},
                                   {BT_SPLIT_MODE_TENSOR, 0, 0}, {BT_SPLIT_MODE_TENSOR, 0, 1}};
    for (int i = 0; i < n; i++) {
        expect_layout(&t[i], want[i / 2][0], want[i / 2][1], want[i / 2][2]);
        ck_assert_int_eq(t[i].kind, i % 2 ? BT_TEST_TG : BT_TEST_PP);
    }
    free(t);
    bt_bench_params_free(&p);

    /* -sm tensor alone: --pipeline not given, so pipeline 0 (one stage) */
    ck_assert_int_eq(parse(&p, "-m a.gguf -sm tensor -p 64 -n 0"), BT_OK);
    ck_assert(!p.pipeline_given);
    ck_assert_int_eq(bt_bench_tests(&p, &t, &n), BT_OK);
    ck_assert_int_eq(n, 1);
    expect_layout(&t[0], BT_SPLIT_MODE_TENSOR, 0, 0);
    free(t);
    bt_bench_params_free(&p);

    /* -tp varies the layer tests only: layer -tp 1, 2, 4 and tensor once,
     * each with -ub 16 and 32 outside them and -npl 1,2 inside */
    ck_assert_int_eq(parse(&p, "-m a.gguf -p 64 -n 0 -ub 16,32 --split-mode layer,tensor "
                               "--tensor-parallel 1-4*2 -npl 1,2"),
                     BT_OK);
    ck_assert(p.tp.n == 3 && p.tp.v[0] == 1 && p.tp.v[1] == 2 && p.tp.v[2] == 4);
    ck_assert_int_eq(bt_bench_tests(&p, &t, &n), BT_OK);
    ck_assert_int_eq(n, 2 * (3 + 1) * 2);
    static const int want_tp[4] = {1, 2, 4, 0};
    for (int i = 0; i < n; i++) {
        const int layout = i / 2 % 4; /* -npl fastest, then tp, split mode, -ub */
        /* --pipeline not given: the layer tests' default 1, the tensor test's 0 */
        expect_layout(&t[i], layout < 3 ? BT_SPLIT_MODE_LAYER : BT_SPLIT_MODE_TENSOR,
                      want_tp[layout], layout < 3);
        ck_assert_int_eq(t[i].parallel, i % 2 ? 2 : 1);
        ck_assert_int_eq(t[i].ubatch, i < n / 2 ? 16 : 32);
    }
    free(t);
    bt_bench_params_free(&p);

    /* the last -sm wins, as for the other lists; tensor then layer keeps that order */
    ck_assert_int_eq(parse(&p, "-m a.gguf -p 8 -n 0 -sm layer -sm tensor,layer --pipeline 0"),
                     BT_OK);
    ck_assert_int_eq(bt_bench_tests(&p, &t, &n), BT_OK);
    ck_assert_int_eq(n, 2);
    expect_layout(&t[0], BT_SPLIT_MODE_TENSOR, 0, 0);
    expect_layout(&t[1], BT_SPLIT_MODE_LAYER, 1, 0);
    free(t);
    bt_bench_params_free(&p);
    ck_assert_str_eq(bt_split_mode_name(BT_SPLIT_MODE_LAYER), "layer");
    ck_assert_str_eq(bt_split_mode_name(BT_SPLIT_MODE_TENSOR), "tensor");
}
END_TEST

/* --tp-comm joins the product after -tp, before --pipeline; a -sm layer
 * test of -tp 1 has no tensor ranks to combine, so it is made once, with
 * tp_comm 0 (gather), whatever the list says. */
START_TEST(test_tp_comm)
{
    bt_bench_params_t p;
    bt_bench_test_t *t;
    int n;
    ck_assert_int_eq(parse(&p, "-m a.gguf -p 64 -n 0 -sm layer,tensor -tp 1,2 "
                               "--tp-comm gather,allreduce --pipeline 0,1"),
                     BT_OK);
    ck_assert(p.tp_comm.n == 2 && p.tp_comm.v[0] == 0 && p.tp_comm.v[1] == 1);
    ck_assert_int_eq(bt_bench_tests(&p, &t, &n), BT_OK);
    /* layer -tp 1 once, layer -tp 2 and tensor once per --tp-comm value; each
     * with pipeline 0 and 1 inside (tensor 1 left for bench.c to skip) */
    static const int want[5][3] = {{BT_SPLIT_MODE_LAYER, 1, 0},
                                   {BT_SPLIT_MODE_LAYER, 2, 0},
                                   {BT_SPLIT_MODE_LAYER, 2, 1},
                                   {BT_SPLIT_MODE_TENSOR, 0, 0},
                                   {BT_SPLIT_MODE_TENSOR, 0, 1}};
    ck_assert_int_eq(n, 5 * 2);
    for (int i = 0; i < n; i++) {
        expect_layout(&t[i], want[i / 2][0], want[i / 2][1], i % 2);
        ck_assert_msg(t[i].tp_comm == want[i / 2][2], "test %d: tp_comm %d, want %d", i,
                      t[i].tp_comm, want[i / 2][2]);
    }
    free(t);
    bt_bench_params_free(&p);

    /* allreduce alone: the -tp 1 test still runs, and gathers (nothing to add) */
    ck_assert_int_eq(parse(&p, "-m a.gguf -p 64 -n 0 -tp 1,2 --tp-comm allreduce"), BT_OK);
    ck_assert_int_eq(bt_bench_tests(&p, &t, &n), BT_OK);
    ck_assert_int_eq(n, 2);
    expect_layout(&t[0], BT_SPLIT_MODE_LAYER, 1, 1);
    ck_assert_int_eq(t[0].tp_comm, 0);
    expect_layout(&t[1], BT_SPLIT_MODE_LAYER, 2, 1);
    ck_assert_int_eq(t[1].tp_comm, 1);
    free(t);
    bt_bench_params_free(&p);

    /* the last --tp-comm wins, as for the other lists; its order is kept */
    ck_assert_int_eq(parse(&p, "-m a.gguf -p 8 -n 0 -sm tensor --tp-comm gather "
                               "--tp-comm allreduce,gather"),
                     BT_OK);
    ck_assert_int_eq(bt_bench_tests(&p, &t, &n), BT_OK);
    ck_assert_int_eq(n, 2);
    ck_assert(t[0].tp_comm == 1 && t[1].tp_comm == 0);
    free(t);
    bt_bench_params_free(&p);
}
END_TEST

/* What parse (or, with n_ranks > 0, the rank check after it) logs, into
 * msg; its status. */
static bt_status_t parse_log(const char *line, int n_ranks, char *msg, size_t size)
{
    char log[] = "/tmp/check_bench_params-XXXXXX";
    int fd = mkstemp(log);
    ck_assert(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    bt_bench_params_t p;
    bt_status_t st = parse(&p, line);
    if (st == BT_OK && n_ranks > 0)
        st = bt_bench_params_check_ranks(&p, n_ranks);
    bt_bench_params_free(&p);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t got = pread(fd, msg, size - 1, 0);
    msg[got > 0 ? got : 0] = '\0';
    close(fd);
    unlink(log);
    return st;
}

/* Bad -sm and -tp values and layouts: refused with one message naming the
 * value (and the rank count) and the reason. */
START_TEST(test_split_mode_limits)
{
    static const struct {
        const char *line;
        int n_ranks; /* 0: the parse alone */
        const char *want;
    } bad[] = {
        {"-m a.gguf -sm row", 0, "-sm: 'row' is not one of layer, tensor"},
        {"-m a.gguf --split-mode layer,rows", 0, "--split-mode: 'rows' is not one of layer"},
        {"-m a.gguf -sm layer,,tensor", 0, "-sm: 'layer,,tensor' has an empty item"},
        {"-m a.gguf -sm", 0, "option '-sm' needs a value"},
        {"-m a.gguf -tp 0", 0, "-tp: 0 is out of range (1..64)"},
        {"-m a.gguf --tensor-parallel 1,65", 0, "--tensor-parallel: 65 is out of range"},
        {"-m a.gguf -tp x", 0, "-tp: 'x' is not an integer or range"},
        {"-m a.gguf -tp", 0, "option '-tp' needs a value"},
        {"-m a.gguf -tp 2 --tp-comm sum", 0, "--tp-comm: 'sum' is not one of gather, allreduce"},
        {"-m a.gguf -tp 2 --tp-comm gather,,allreduce", 0,
         "--tp-comm: 'gather,,allreduce' has an empty item"},
        {"-m a.gguf --tp-comm", 0, "option '--tp-comm' needs a value"},
        /* allreduce with no tensor ranks in any test would run as gather */
        {"-m a.gguf -tp 1 --tp-comm gather,allreduce", 0, "--tp-comm allreduce applies only to "
                                                          "tests with tensor ranks"},
        /* every test skipped: nothing would run */
        {"-m a.gguf -sm tensor --pipeline 1", 0, "nothing to run: every test is -sm tensor "
                                                 "with --pipeline 1"},
        {"-m a.gguf --profile -tp 2", 0, "--profile times whole layers on one rank; -tp 2"},
        /* the layouts against the ranks: every layer -tp must divide them */
        {"-m a.gguf -tp 3", 2, "-tp 3 does not divide the 2 ranks into stages"},
        {"-m a.gguf -tp 1,2,4", 6, "-tp 4 does not divide the 6 ranks into stages"},
        {"-m a.gguf -sm tensor,layer -tp 2", 3, "-tp 2 does not divide the 3 ranks"},
        {"-m a.gguf -sm tensor", 65, "-sm tensor makes all 65 ranks one stage"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char msg[1024];
        bt_status_t st = parse_log(bad[i].line, bad[i].n_ranks, msg, sizeof msg);
        ck_assert_msg(st == BT_ERR_ARG, "'%s' on %d ranks was accepted", bad[i].line,
                      bad[i].n_ranks);
        ck_assert_msg(strstr(msg, bad[i].want) != NULL, "'%s': message '%s' lacks '%s'",
                      bad[i].line, msg, bad[i].want);
        int lines = 0;
        for (const char *c = msg; *c; c++)
            lines += *c == '\n';
        ck_assert_msg(lines == 1, "'%s': %d lines: '%s'", bad[i].line, lines, msg);
    }
    /* and what fits: -tp dividing the ranks; tensor tests whatever -tp says */
    static const struct {
        const char *line;
        int n_ranks;
    } good[] = {
        {"-m a.gguf", 1},
        {"-m a.gguf -tp 1,2,4", 8},
        {"-m a.gguf -sm tensor -tp 3", 2},
        {"-m a.gguf -sm tensor --pipeline 0,1", 2},
        {"-m a.gguf -sm layer,tensor -tp 2 --pipeline 1", 4},
        {"-m a.gguf --profile -tp 1", 0},
        {"-m a.gguf -sm tensor", 64},
        {"-m a.gguf -tp 1,2 --tp-comm gather,allreduce", 2},
        {"-m a.gguf -sm tensor --tp-comm allreduce", 2},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char msg[1024];
        ck_assert_msg(parse_log(good[i].line, good[i].n_ranks, msg, sizeof msg) == BT_OK,
                      "'%s' on %d ranks was refused: %s", good[i].line, good[i].n_ranks, msg);
    }
}
END_TEST

START_TEST(test_defaults)
{
    bt_bench_params_t p;
    ck_assert_int_eq(parse(&p, "-m a.gguf"), BT_OK);
    ck_assert_int_eq(p.n_prompt.v[0], 512);
    ck_assert_int_eq(p.n_gen.v[0], 128);
    ck_assert_int_eq(p.batch.v[0], 2048);
    ck_assert_int_eq(p.ubatch.v[0], 512);
    ck_assert_int_eq(p.pipeline.v[0], 1);
    ck_assert(p.parallel.n == 1 && p.parallel.v[0] == 1);
    ck_assert(p.split_mode.n == 1 && p.split_mode.v[0] == BT_SPLIT_MODE_LAYER);
    ck_assert(p.tp.n == 1 && p.tp.v[0] == 1);
    ck_assert(p.tp_comm.n == 1 && p.tp_comm.v[0] == 0); /* gather */
    ck_assert(!p.pipeline_given);
    ck_assert_int_eq(p.groups, 0);
    ck_assert_int_eq(p.reps, 5);
    ck_assert(p.warmup);
    ck_assert_str_eq(p.output, "md");
    bt_bench_params_free(&p);
}
END_TEST

START_TEST(test_bad_flags)
{
    static const char *const bad[] = {
        "-p 512",              /* no model */
        "-m a.gguf -r 0",      "-m a.gguf -ub 0",       "-m a.gguf -t 0",
        "-m a.gguf -p -5",     "-m a.gguf -n abc",      "-m a.gguf -b 1.5",
        "-m a.gguf --pipeline 2", "-m a.gguf -o xml",   "-m a.gguf --bogus",
        "-m a.gguf -pg 64",    "-m a.gguf -ts 1/x",     "-m a.gguf --delay -1",
        "-m a.gguf -r",        "-m a.gguf extra",
        "-m a.gguf -p 0 -n 0", /* no test at all */
        "-m a.gguf -ub 64,128 -b 32", /* every -ub above every -b */
        "-m a.gguf -npl 0",    "-m a.gguf --parallel 4097", "-m a.gguf -npl 1,,4",
        "-m a.gguf -npl x",    "-m a.gguf -npl",       "-m a.gguf --groups -1",
        "-m a.gguf --groups", "-m a.gguf -npl 4 --groups 4097",
        "-m a.gguf --groups 2", /* groups without a test of more than one sequence */
        "-m a.gguf -npl 1,1 --groups 2",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bt_bench_params_t p;
        ck_assert_msg(parse(&p, bad[i]) == BT_ERR_ARG, "'%s' was accepted", bad[i]);
        bt_bench_params_free(&p);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bench_params");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_lists);
    tcase_add_test(tc, test_flags_and_product);
    tcase_add_test(tc, test_parallel);
    tcase_add_test(tc, test_split_mode);
    tcase_add_test(tc, test_tp_comm);
    tcase_add_test(tc, test_defaults);
    suite_add_tcase(s, tc);
    tc = tcase_create("limits");
    tcase_add_test(tc, test_bad_lists);
    tcase_add_test(tc, test_bad_flags);
    tcase_add_test(tc, test_split_mode_limits);
    suite_add_tcase(s, tc);
    int failed = tu_run(s);
    return failed == 0 ? 0 : 1;
}
