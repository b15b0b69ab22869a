/*
 * serve.h: many sequences through the pipeline at once (continuous
 * batching). docs/design.md, "Rows, slots and groups".
 *
 * Terms. A row is one token of one sequence in a micro-batch: its KV slot,
 * its position, and whether the last stage computes its logits and samples
 * from them. A slot is one sequence's part of the KV cache (-c positions);
 * the cache holds --parallel P of them. A group is a micro-batch of decode
 * rows in flight: with S stages and S groups (the default) every stage
 * works on a different group while the others do too.
 *
 * Rank 0 schedules. Whenever fewer than max(n_groups, S + 1) micro-batches
 * are in flight (one with sync) and rows are waiting, it forms the next:
 * first the decode rows of sequences whose last token is known (at most
 * ceil(decoding / n_groups), so the decoding sequences spread over the
 * groups), then prompt rows of sequences still prefilling, in the order
 * they were admitted, up to ubatch rows in all (a long prompt goes in
 * chunks that share micro-batches with the others' decode steps).
 * Otherwise it waits for the ids of the oldest micro-batch
 * in flight. The last stage samples every row that needs a token, each
 * with its own sequence's sampler, and sends the micro-batch's ids to rank
 * 0 in one message. A sequence that ends (hooks.token says stop, its
 * n_predict, or its context is full) frees its slot at once and the next
 * request takes it. Every row's arithmetic is independent of the others in
 * its micro-batch, so a sequence's logits do not depend on what else runs
 * (invariant 1).
 */
#ifndef BT_STAGES_SERVE_H
#define BT_STAGES_SERVE_H

#include <stdbool.h>
#include <stdint.h>

#include "sampler.h"
#include "stages/schedule.h"

typedef enum bt_finish {
    BT_FINISH_STOP = 0,   /* hooks.token returned false (end of generation) */
    BT_FINISH_LENGTH = 1, /* n_predict tokens chosen, or the slot's context is full */
    BT_FINISH_CANCEL = 2, /* hooks.cancelled said so (its client went away, a drain) */
} bt_finish_t;

/* Most alternatives a sequence's log-probabilities name per token. */
#define BT_SERVE_MAX_TOP 20

/* One request as rank 0 hands it to the engine. */
typedef struct bt_seq_req {
    const int32_t *tokens; /* the prompt, ids inside the vocabulary; copied at admission */
    int n_tokens;          /* 1 .. the context per slot */
    int n_predict;         /* tokens to choose, >= 1 */
    bt_sampler_params_t sampling; /* this sequence's own sampler (temp <= 0: greedy) */
    bool logprobs;         /* hooks.logprobs for every chosen token */
    int top_logprobs;      /* with it, this many most likely ids (0 .. BT_SERVE_MAX_TOP) */
} bt_seq_req_t;

/* A chosen token's log-probability under the model (log-softmax of its
 * logits row, before any sampler step) and the n_top most likely ids,
 * most likely first (equal ones: the lower id first). */
typedef struct bt_logprobs {
    float logprob;
    int n_top;
    int32_t top_id[BT_SERVE_MAX_TOP];
    float top_logprob[BT_SERVE_MAX_TOP];
} bt_logprobs_t;

/* Stages whose busy seconds the figures carry: the first this many. */
#define BT_SERVE_MAX_STAGES 128

typedef struct bt_serve_stats {
    int64_t n_prompt;  /* prompt rows computed */
    int64_t n_reused;  /* prompt ids whose rows a slot's cache already held (not computed) */
    int64_t n_decode;  /* decode rows computed */
    int64_t n_chosen;  /* tokens chosen */
    int n_mb;          /* micro-batches */
    int n_requests;    /* requests finished */
    double busy[BT_SERVE_MAX_STAGES]; /* seconds each stage (the first ones) spent computing,
                        * the last one also sampling, as of its latest report to rank 0 */
} bt_serve_stats_t;

typedef struct bt_serve_hooks {
    /* rank 0: the next request to admit: true with *id (the caller's,
     * >= 0) and *req filled, false when none is left (with hooks.wait:
     * none now). */
    bool (*next)(void *arg, int *id, bt_seq_req_t *req);
    /* rank 0: a token chosen for request id; false ends it (BT_FINISH_STOP,
     * the token is not fed). */
    bool (*token)(void *arg, int id, int32_t token);
    /* rank 0: request id ended; its slot is free again. */
    void (*finish)(void *arg, int id, bt_finish_t why);
    /* last stage, may be NULL: the logits [n_vocab] of request id at pos
     * (the sampled rows; every row with bt_serve_config_t.all_logits). */
    bt_status_t (*logits)(void *arg, int id, int pos, const float *row);
    void *arg;
    /* the front end's hooks (baton-server); NULL in a batch job */
    /* rank 0, may be NULL: called when nothing is admitted or in flight;
     * blocks until hooks.next may have a request. false: serve no more
     * (bt_pipe_serve returns). NULL: the first false from hooks.next
     * ends the run once the admitted requests have finished. */
    bool (*wait)(void *arg);
    /* rank 0, may be NULL: whether request id is to end now. Asked for
     * every admitted request on each round of the scheduler and before
     * each of its tokens is handed over; a cancelled request frees its slot
     * at once (rows of it still in flight are computed and dropped) and
     * ends with BT_FINISH_CANCEL. */
    bool (*cancelled)(void *arg, int id);
    /* rank 0, may be NULL: a requested token's log-probabilities, just
     * before hooks.token hands over the same token. */
    void (*logprobs)(void *arg, int id, const bt_logprobs_t *lp);
    /* rank 0, may be NULL: the figures so far, after each micro-batch's ids. */
    void (*progress)(void *arg, const bt_serve_stats_t *stats);
} bt_serve_hooks_t;

typedef struct bt_serve_config {
    int n_slots;     /* sequences at once, 1 .. the pipe's n_slots */
    int n_groups;    /* decode groups; 0: automatic (bt_serve_default_groups) */
    int ubatch;      /* rows per micro-batch, 1 .. the pipe's max_tok */
    bool sync;       /* --pipeline 0: one micro-batch in flight at a time */
    bool all_logits; /* hooks.logits for every row, not only the sampled ones */
    bool no_prompt_cache; /* compute every prompt from position 0; otherwise a request
                           * takes the free slot whose cache holds the longest prefix
                           * of its prompt and starts after it (never with all_logits) */
} bt_serve_config_t;

/* Decode groups when none are asked for: one per stage, so every stage
 * has a group to work on, never more than the sequences. */
int bt_serve_default_groups(int n_stages, int n_slots);

/* Runs requests until hooks.next has no more and every admitted one has
 * finished. Collective; every rank passes the same cfg; hooks are called
 * on the ranks named above. stats (may be NULL) on rank 0. */
bt_status_t bt_pipe_serve(bt_pipe_t *p, const bt_serve_config_t *cfg,
                          const bt_serve_hooks_t *hooks, bt_serve_stats_t *stats);

#endif /* BT_STAGES_SERVE_H */
