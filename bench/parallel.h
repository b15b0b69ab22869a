/*
 * parallel.h: baton-bench's tests with -npl P above 1: P sequences run the
 * same test at once through the many-sequence engine (stages/serve.h).
 *
 *   ppN     P requests of N prompt tokens choosing 1 token each
 *   tgN     P requests of 1 prompt token choosing N tokens each
 *           (1 prefill step and N - 1 decode steps: N forward passes)
 *   ppN+tgM P requests of N prompt tokens choosing M + 1 tokens each
 *
 * so each sequence computes the test's N + M positions, as the one-sequence
 * path does, and t/s counts P times the test's tokens. Prompts are token ids
 * given by the caller; the pipe runs with no_sampling, so every chosen
 * token is 0 and nothing is sampled or timed besides the forward passes.
 */
#ifndef BT_BENCH_PARALLEL_H
#define BT_BENCH_PARALLEL_H

#include <stdbool.h>
#include <stdint.h>

#include "params.h"
#include "stages/schedule.h"

/* Prompt tokens per sequence: the test's N, or 1 for tgN. */
int bt_parallel_prompt_len(const bt_bench_test_t *t);

/* Tokens each sequence chooses (n_predict); warmup: at most 2 (the prompt
 * and one decode step, as the one-sequence warm-up). */
int bt_parallel_n_predict(const bt_bench_test_t *t, bool warmup);

/* Rows per micro-batch: -ub, at most every sequence's whole prompt. */
int bt_parallel_ubatch(const bt_bench_test_t *t);

/* Runs the test once with t->parallel sequences on every rank (collective).
 * ids (rank 0): t->parallel prompts of bt_parallel_prompt_len(t) ids, one
 * after the other. --pipeline 1 (t->pipeline) keeps micro-batches in
 * flight with the decoding sequences spread over n_groups decode groups
 * (--groups; 0: automatic); --pipeline 0 runs one micro-batch at a time
 * (the engine's sync) with every decode row in it (one group, n_groups
 * unused). On rank 0, *n_mb gets the micro-batches run. Fails with
 * BT_ERR_UNSUPPORTED, naming the counts, when the engine chose another
 * number of tokens or finished another number of requests than the
 * test asks for (the figure would count tokens that were not computed). */
bt_status_t bt_parallel_run(bt_pipe_t *p, const bt_bench_test_t *t, const int32_t *ids,
                            int n_groups, bool warmup, int *n_mb);

#endif /* BT_BENCH_PARALLEL_H */
