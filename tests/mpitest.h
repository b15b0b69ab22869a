/*
 * mpitest.h: what the MPI Check suites share (check_pipeline, check_serve):
 * the rank and size, a verdict combined over all ranks, and the fixture
 * that ends the job when one rank has failed.
 */
#ifndef BT_TESTS_MPITEST_H
#define BT_TESTS_MPITEST_H

#include <check.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

static int rank, size;
static SRunner *runner;

/* MPI_Init_thread (funneled), rank and size, and this rank in log lines. */
static inline void mpitest_init(int *argc, char ***argv)
{
    int provided;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    bt_log_set_rank(rank);
}

/* 1 when ok is 1 on every rank. */
static inline int all_ok(int ok)
{
    int all;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

/* With CK_NOFORK a failed assertion jumps out of the test on its rank
 * only; the other ranks may be waiting for it inside that test (in
 * all_ok, a collective or a receive) and would wait until the launcher's
 * timeout. Run before every test (a checked fixture) and after the last:
 * once this rank has a failure, it says which and aborts the job. */
static inline void abort_on_failure(void)
{
    if (runner == NULL || srunner_ntests_failed(runner) == 0)
        return;
    TestResult **failures = srunner_failures(runner);
    TestResult *tr = failures[srunner_ntests_failed(runner) - 1];
    fprintf(stderr, "rank %d: %s:%d: %s (test case %s) failed; aborting the job\n", rank,
            tr_lfile(tr), tr_lno(tr), tr_msg(tr), tr_tcname(tr));
    free(failures);
    srunner_print(runner, CK_VERBOSE); /* Check prints its lines only at the end */
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* A test case of s whose tests run after a check that no rank has failed
 * (abort_on_failure), each within timeout seconds. */
static inline TCase *mpitest_tcase(Suite *s, const char *name, int timeout)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, timeout);
    tcase_add_checked_fixture(tc, abort_on_failure, NULL);
    suite_add_tcase(s, tc);
    return tc;
}

/* Runs the suite on every rank without forking (a forked child is not an
 * MPI process), verbose on rank 0; a failure on any rank aborts the job. */
static inline void mpitest_run(Suite *s)
{
    runner = srunner_create(s);
    srunner_set_fork_status(runner, CK_NOFORK);
    srunner_run_all(runner, rank == 0 ? CK_VERBOSE : CK_SILENT);
    abort_on_failure();
    srunner_free(runner);
    runner = NULL;
}

#endif /* BT_TESTS_MPITEST_H */
