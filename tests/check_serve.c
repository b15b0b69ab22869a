/*
 * check_serve.c: many sequences through the pipeline (stages/serve.h), run
 * through tests/mpi-run with the rank count from the test's name
 * (CK_FORK=no).
 *   composition: 12 prompts of 1 to 40 ids, 16 greedy tokens each: every
 *                sequence's logits (every row) and ids bitwise equal to its
 *                run alone in one process, for --parallel 1, 3 and 12,
 *                micro-batches of 1, 3 and 8 rows, pipeline 0 and 1 and
 *                2 or automatic groups. One of them is the golden model's
 *                own sequence: its logits stay within the golden file's
 *                tolerance and its ids are llama.cpp's.
 *   reuse:       20 requests through 4 slots with different n_predict, some
 *                stopped early by the caller: every one finishes with the
 *                right reason, and its ids are its solo run's.
 *   sampled:     seeded sampled requests give their solo run's ids at
 *                --parallel 1 and 8.
 *   groups:      decode steps form one micro-batch per group; 96
 *                sequences in 6 groups of 16 with ids messages past the
 *                eager limit (serve_eager_np3)
 *   threads:     the same with 2 threads per rank (attention of short runs
 *                spread over the team).
 *   prompt_cache: a conversation's turns, a repeated prompt and unrelated
 *                ones through 1 and 3 slots without every row's logits:
 *                the prefixes the slots' caches hold are reused (exactly
 *                the expected count through 1 slot, none with
 *                no_prompt_cache), and every sampled row's logits and
 *                every id are the run alone's.
 * The model is tests/data/golden/tiny-llama-golden-f32.gguf (256 ids).
 */
#include <check.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "sampler.h"
#include "stages/serve.h"
#include "testutil.h"
#include "mpitest.h"

enum { N_REQ = 12, MAX_PROMPT = 40, N_PREDICT = 16, N_CTX = MAX_PROMPT + N_PREDICT,
       GOLDEN_REQ = 6, MAX_TOK = 8, N_SLOTS = 12 };

static char model_path[700];
static int n_vocab;

/* A request and its run alone. */
typedef struct solo {
    int32_t prompt[MAX_PROMPT];
    int n_prompt;
    bt_sampler_params_t sp;
    float *rows;               /* [n_prompt + N_PREDICT - 1, n_vocab] */
    int32_t ids[N_PREDICT];
} solo_t;

static solo_t greedy[N_REQ], sampled[N_REQ];

static const int prompt_len[N_REQ] = {1, 4, 7, 40, 13, 2, 32, 25, 9, 18, 33, 5};

/* The whole model in this process: the prompt as one batch, then
 * N_PREDICT - 1 decode steps, each id from a sampler with s->sp. */
static int run_alone(solo_t *s)
{
    bt_model_t *m;
    bt_forward_t *f;
    bt_sampler_t *smp;
    if (bt_model_load(model_path, 0, -1, true, true, &m) != BT_OK)
        return 0;
    n_vocab = m->hp.n_vocab;
    int ok = bt_forward_init(m, &bt_ops_cpu, N_CTX, 1, MAX_PROMPT, 1, BT_TYPE_F32, &f) == BT_OK;
    ok = ok && bt_sampler_init(&s->sp, n_vocab, &smp) == BT_OK;
    float *x = malloc(sizeof(float) * MAX_PROMPT * (size_t)m->hp.n_embd);
    s->rows = malloc(sizeof(float) * (size_t)(s->n_prompt + N_PREDICT - 1) * (size_t)n_vocab);
    ok = ok && x && s->rows && bt_forward_embed(f, s->prompt, s->n_prompt, x) == BT_OK &&
         bt_forward_layers(f, x, s->n_prompt, 0) == BT_OK;
    if (ok)
        bt_forward_head(f, x, s->n_prompt, s->rows);
    for (int i = 0; ok && i < N_PREDICT; i++) {
        const int pos = s->n_prompt - 1 + i;
        const float *row = s->rows + (size_t)pos * n_vocab;
        s->ids[i] = bt_sampler_sample(smp, row);
        bt_sampler_accept(smp, s->ids[i]);
        if (i + 1 == N_PREDICT)
            break;
        ok = bt_forward_embed(f, &s->ids[i], 1, x) == BT_OK &&
             bt_forward_layers(f, x, 1, pos + 1) == BT_OK;
        bt_forward_head(f, x, 1, s->rows + (size_t)(pos + 1) * n_vocab);
    }
    free(x);
    if (ok)
        bt_sampler_free(smp);
    bt_forward_free(f);
    bt_model_free(m);
    return ok;
}

/* ---- a serve run ---- */

enum { MAX_JOB = 96 };

typedef struct job {
    const solo_t *solo;  /* [n] the requests */
    int n, next;
    int n_predict[MAX_JOB]; /* per request */
    int stop_after[MAX_JOB]; /* the token hook says stop at this many ids (0: never) */
    int32_t ids[MAX_JOB][N_CTX + 1];
    int n_ids[MAX_JOB];
    int finished[MAX_JOB]; /* 1 + bt_finish_t */
    float *rows[MAX_JOB];  /* last stage: every row's logits */
} job_t;

static bool next_req(void *arg, int *id, bt_seq_req_t *rq)
{
    job_t *j = arg;
    if (j->next == j->n)
        return false;
    const solo_t *s = &j->solo[j->next % N_REQ];
    *id = j->next;
    *rq = (bt_seq_req_t){s->prompt, s->n_prompt, j->n_predict[j->next], s->sp};
    j->next++;
    return true;
}

static bool on_token(void *arg, int id, int32_t tok)
{
    job_t *j = arg;
    ck_assert_int_le(j->n_ids[id], N_CTX);
    j->ids[id][j->n_ids[id]++] = tok;
    return j->stop_after[id] == 0 || j->n_ids[id] < j->stop_after[id];
}

static void on_finish(void *arg, int id, bt_finish_t why)
{
    job_t *j = arg;
    ck_assert_int_eq(j->finished[id], 0);
    j->finished[id] = 1 + (int)why;
}

static bt_status_t on_logits(void *arg, int id, int pos, const float *row)
{
    job_t *j = arg;
    ck_assert_int_lt(pos, N_CTX);
    memcpy(j->rows[id] + (size_t)pos * n_vocab, row, sizeof(float) * (size_t)n_vocab);
    return BT_OK;
}

static void job_init(job_t *j, const solo_t *solo, int n)
{
    ck_assert_int_le(n, MAX_JOB);
    memset(j, 0, sizeof *j);
    j->solo = solo;
    j->n = n;
    for (int i = 0; i < n; i++) {
        j->n_predict[i] = N_PREDICT;
        j->rows[i] = malloc(sizeof(float) * N_CTX * (size_t)n_vocab);
        memset(j->rows[i], 0xff, sizeof(float) * N_CTX * (size_t)n_vocab); /* NaN */
    }
}

static void job_free(job_t *j)
{
    for (int i = 0; i < j->n; i++)
        free(j->rows[i]);
}

static bt_pipe_t pipe_;
static bt_pipe_config_t pipe_cfg;

static bt_serve_stats_t serve(job_t *j, int n_slots, int ubatch, bool sync, int n_groups)
{
    bt_serve_config_t cfg = {.n_slots = n_slots, .n_groups = n_groups, .ubatch = ubatch,
                             .sync = sync, .all_logits = true};
    bt_serve_hooks_t h = {.next = next_req, .token = on_token, .finish = on_finish,
                         .logits = on_logits, .arg = j};
    bt_serve_stats_t stats = {0};
    ck_assert_int_eq(bt_pipe_serve(&pipe_, &cfg, &h, &stats), BT_OK);
    if (rank == 0)
        ck_assert_int_eq(stats.n_requests, j->n);
    return stats;
}

/* Request i against its solo run: ids on rank 0 (the first n_ids of
 * them), every row's logits on the last stage. */
static int matches(const job_t *j, int i, const char *what)
{
    const solo_t *s = &j->solo[i % N_REQ];
    const int n_ids = j->n_ids[i] < N_PREDICT ? j->n_ids[i] : N_PREDICT;
    int ok = 1;
    if (pipe_.world_rank == 0 &&
        memcmp(j->ids[i], s->ids, sizeof(int32_t) * (size_t)n_ids) != 0) {
        fprintf(stderr, "%s: request %d: ids differ from its run alone\n", what, i);
        ok = 0;
    }
    const size_t n_rows = (size_t)(s->n_prompt + n_ids - 1);
    if (pipe_.last && !pipe_.follower && /* the last stage's leader */
        memcmp(j->rows[i], s->rows, sizeof(float) * n_rows * (size_t)n_vocab) != 0) {
        fprintf(stderr, "%s: request %d: logits differ from its run alone\n", what, i);
        ok = 0;
    }
    return ok;
}

/* ---- tests ---- */

/* Prompts that share prefixes with what a slot computed before: a chat's
 * first turn, its second turn (the first prompt, 10 of the answer's ids,
 * 3 new ones), the first turn again, an unrelated prompt, the second turn
 * again. Filled by make_turns once the greedy runs exist. */
enum { N_TURNS = 5 };
static solo_t turns[N_TURNS];

static void make_turns(void)
{
    const solo_t *base = &greedy[4];
    turns[0] = turns[2] = *base;
    solo_t *t = &turns[1];
    *t = *base;
    memcpy(t->prompt + t->n_prompt, base->ids, sizeof(int32_t) * 10);
    t->n_prompt += 10;
    for (int k = 0; k < 3; k++)
        t->prompt[t->n_prompt++] = (base->ids[10] + 1 + k) % 256; /* not the answer's 11th */
    turns[3] = greedy[7];
    turns[4] = *t;
    for (int i = 0; i < N_TURNS; i++)
        turns[i].rows = NULL;
}

/* Prompt ids of turn i that one slot's cache holds after turn i - 1 (its
 * prompt and every chosen id but the last), at most all but the last. */
static int expected_reuse(int i)
{
    if (i == 0)
        return 0;
    const solo_t *prev = &turns[i - 1], *t = &turns[i];
    int32_t kv[N_CTX];
    memcpy(kv, prev->prompt, sizeof(int32_t) * (size_t)prev->n_prompt);
    memcpy(kv + prev->n_prompt, prev->ids, sizeof(int32_t) * (N_PREDICT - 1));
    const int n_kv = prev->n_prompt + N_PREDICT - 1;
    int n = 0;
    while (n < n_kv && n < t->n_prompt - 1 && kv[n] == t->prompt[n])
        n++;
    return n;
}

START_TEST(test_prompt_cache)
{
    int ok = 1;
    for (int i = 0; i < N_TURNS; i++)
        ok &= run_alone(&turns[i]);
    ck_assert_msg(all_ok(ok), "the turns' runs alone");
    int want = 0;
    for (int i = 0; i < N_TURNS; i++)
        want += expected_reuse(i);
    /* turn 1: the first prompt and 10 of its answer's ids; turn 2: all but
     * its last id; turns 3 and 4 follow an unrelated prompt */
    ck_assert_int_eq(want, 23 + 12);
    static const int parallel[] = {1, 3, 1};
    for (int a = 0; a < 3; a++) {
        const bool off = a == 2;
        char what[96];
        snprintf(what, sizeof what, "%d ranks, --parallel %d, prompt cache %s", size,
                 parallel[a], off ? "off" : "on");
        job_t j;
        job_init(&j, turns, N_TURNS);
        bt_serve_config_t cfg = {.n_slots = parallel[a], .ubatch = 3, .no_prompt_cache = off};
        bt_serve_hooks_t h = {.next = next_req, .token = on_token, .finish = on_finish,
                             .logits = on_logits, .arg = &j};
        bt_serve_stats_t st = {0};
        ck_assert_int_eq(bt_pipe_serve(&pipe_, &cfg, &h, &st), BT_OK);
        for (int i = 0; i < N_TURNS; i++) {
            const solo_t *t = &turns[i];
            if (rank == 0 && (j.n_ids[i] != N_PREDICT ||
                              memcmp(j.ids[i], t->ids, sizeof t->ids) != 0)) {
                fprintf(stderr, "%s: turn %d: ids differ from its run alone\n", what, i);
                ok = 0;
            }
            /* the sampled rows: the prompt's last and every fed id's */
            const size_t row = (size_t)n_vocab, first = (size_t)(t->n_prompt - 1) * row;
            if (pipe_.last && !pipe_.follower &&
                memcmp(j.rows[i] + first, t->rows + first, sizeof(float) * N_PREDICT * row)) {
                fprintf(stderr, "%s: turn %d: logits differ from its run alone\n", what, i);
                ok = 0;
            }
        }
        if (rank == 0) {
            const int64_t expect = off ? 0 : parallel[a] == 1 ? want : -1;
            fprintf(stderr, "%s: %lld prompt ids reused, %lld computed\n", what,
                    (long long)st.n_reused, (long long)st.n_prompt);
            if ((expect >= 0 && st.n_reused != expect) || (expect < 0 && st.n_reused < 23)) {
                fprintf(stderr, "%s: %lld prompt ids reused; want %s%lld\n", what,
                        (long long)st.n_reused, expect < 0 ? "at least " : "",
                        (long long)(expect < 0 ? 23 : expect));
                ok = 0;
            }
        }
        job_free(&j);
        ck_assert_msg(all_ok(ok), "%s: a reused prefix changed a sequence or was not reused",
                      what);
    }
    for (int i = 0; i < N_TURNS; i++)
        free(turns[i].rows);
}
END_TEST

START_TEST(test_composition)
{
    static const int parallel[] = {1, 3, 12}, ubs[] = {1, 3, 8}, groups[] = {0, 2};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int mode = 0; mode <= 2; mode++) { /* sync; auto groups; 2 groups */
                char what[96];
                snprintf(what, sizeof what, "%d ranks, --parallel %d, -ub %d, %s", size,
                         parallel[a], ubs[b], mode == 0 ? "pipeline 0" : mode == 1
                                                  ? "pipeline 1" : "pipeline 1, 2 groups");
                job_t j;
                job_init(&j, greedy, N_REQ);
                serve(&j, parallel[a], ubs[b], mode == 0, mode == 2 ? groups[1] : groups[0]);
                int ok = 1;
                for (int i = 0; i < N_REQ; i++) {
                    ok &= matches(&j, i, what);
                    if (rank == 0)
                        ok &= j.n_ids[i] == N_PREDICT && j.finished[i] == 1 + BT_FINISH_LENGTH;
                }
                job_free(&j);
                ck_assert_msg(all_ok(ok), "%s: a sequence depends on its batch", what);
            }
}
END_TEST

/* Runs job j on a pipe opened with cfg (instead of the suite's) and
 * compares every request with its run alone; 1 when all match here. */
static int serve_on(const bt_pipe_config_t *cfg, job_t *j, int ubatch, int n_groups,
                    const char *what)
{
    bt_pipe_t suite_pipe = pipe_;
    ck_assert_int_eq(bt_pipe_init(&pipe_, MPI_COMM_WORLD, cfg), BT_OK);
    serve(j, cfg->n_slots < j->n ? cfg->n_slots : j->n, ubatch, false, n_groups);
    int ok = 1;
    for (int i = 0; i < j->n; i++)
        ok &= matches(j, i, what);
    bt_pipe_free(&pipe_);
    pipe_ = suite_pipe;
    return ok;
}

/* Many sequences, many groups, wide micro-batches: 96 one-id prompts in
 * 6 groups of 16 on a pipe of 32-row micro-batches, so up to 6 micro-
 * batches are in flight and an ids message (17 or 33 ints) is larger
 * than the eager limit serve_eager_npN forces, and must not wait for rank
 * 0 to ask for it while rank 0 waits for a send slot. */
START_TEST(test_wide_groups)
{
    bt_pipe_config_t cfg = pipe_cfg;
    cfg.max_tok = 32;
    cfg.n_slots = MAX_JOB;
    static solo_t first[N_REQ];
    for (int i = 0; i < N_REQ; i++)
        first[i] = greedy[0]; /* the one-id prompt */
    job_t *j = malloc(sizeof *j);
    job_init(j, first, MAX_JOB);
    for (int i = 0; i < MAX_JOB; i++)
        j->n_predict[i] = 8;
    int ok = serve_on(&cfg, j, 32, 6, "96 sequences in 6 groups");
    job_free(j);
    free(j);
    ck_assert_msg(all_ok(ok), "%d ranks: 96 sequences in 6 groups", size);
}
END_TEST

/* Two threads per rank: short runs' attention spread over the team. */
START_TEST(test_threads)
{
    bt_pipe_config_t cfg = pipe_cfg;
    cfg.n_threads = 2;
    job_t j;
    job_init(&j, greedy, N_REQ);
    int ok = serve_on(&cfg, &j, MAX_TOK, 0, "2 threads");
    job_free(&j);
    ck_assert_msg(all_ok(ok), "%d ranks, 2 threads: a sequence depends on the team", size);
}
END_TEST

/* Tensor parallelism: for every T > 1 dividing the rank count, stages of
 * T tensor ranks serve greedy and seeded sampled requests at --parallel 1
 * and 8 (the engine's slots and groups unchanged, every tensor rank of a
 * stage computing the same micro-batches): each sequence's logits and ids
 * are its run alone. */
START_TEST(test_tensor_parallel)
{
    static const int parallel[] = {1, 8};
    for (int T = 2; T <= size; T++) {
        if (size % T != 0)
            continue;
        for (int a = 0; a < 2; a++)
            for (int smp = 0; smp <= 1; smp++) {
                bt_pipe_config_t cfg = pipe_cfg;
                cfg.tp = T;
                cfg.n_slots = parallel[a];
                char what[96];
                snprintf(what, sizeof what, "%d ranks, -tp %d, --parallel %d, %s", size, T,
                         parallel[a], smp ? "sampled" : "greedy");
                job_t j;
                job_init(&j, smp ? sampled : greedy, N_REQ);
                int ok = serve_on(&cfg, &j, MAX_TOK, 0, what);
                job_free(&j);
                ck_assert_msg(all_ok(ok), "%s: a sequence differs from its run alone", what);
            }
    }
}
END_TEST

/* --tp-comm allreduce: the partial sums change the roundings against one
 * rank (held to the golden tolerance, 1e-4 on this model, with the same
 * greedy ids), but not against itself: for every T > 1 dividing the rank
 * count, each greedy and seeded sampled request served among the others
 * at --parallel 8 is bitwise its run alone at --parallel 1 on the same
 * layout. */
START_TEST(test_tensor_allreduce)
{
    for (int T = 2; T <= size; T++) {
        if (size % T != 0)
            continue;
        bt_pipe_t suite_pipe = pipe_;
        bt_pipe_config_t cfg = pipe_cfg;
        cfg.tp = T;
        cfg.tp_allreduce = 1;
        ck_assert_int_eq(bt_pipe_init(&pipe_, MPI_COMM_WORLD, &cfg), BT_OK);
        static solo_t alone[2][N_REQ]; /* greedy, sampled: run alone on this layout */
        int ok = 1;
        double worst = 0.0;
        for (int smp = 0; smp <= 1; smp++)
            for (int i = 0; i < N_REQ; i++) {
                const solo_t *s = smp ? &sampled[i] : &greedy[i];
                job_t j;
                job_init(&j, s, 1);
                serve(&j, 1, MAX_TOK, false, 0);
                alone[smp][i] = *s;
                alone[smp][i].rows = j.rows[0]; /* kept: job_free is not called */
                memcpy(alone[smp][i].ids, j.ids[0], sizeof alone[smp][i].ids);
                const size_t n = (size_t)(s->n_prompt + N_PREDICT - 1) * (size_t)n_vocab;
                for (size_t k = 0; !smp && pipe_.last && !pipe_.follower && k < n; k++) {
                    const double d = fabs((double)j.rows[0][k] - (double)s->rows[k]);
                    worst = d > worst || d != d ? d : worst;
                }
                if (!smp && pipe_.world_rank == 0 &&
                    memcmp(j.ids[0], s->ids, sizeof s->ids) != 0)
                    ok = 0;
            }
        ok &= !(worst > 1e-4) && worst == worst;
        ck_assert_msg(all_ok(ok), "%d ranks, -tp %d, allreduce: alone, logits %g from one "
                      "rank's (tolerance 1e-4) or greedy ids differ", size, T, worst);
        for (int smp = 0; smp <= 1; smp++) {
            char what[96];
            snprintf(what, sizeof what, "%d ranks, -tp %d allreduce, --parallel 8, %s", size, T,
                     smp ? "sampled" : "greedy");
            job_t j;
            job_init(&j, alone[smp], N_REQ);
            serve(&j, 8, MAX_TOK, false, 0);
            ok = 1;
            for (int i = 0; i < N_REQ; i++)
                ok &= matches(&j, i, what);
            job_free(&j);
            ck_assert_msg(all_ok(ok), "%s: a sequence differs from its run alone", what);
        }
        for (int smp = 0; smp <= 1; smp++)
            for (int i = 0; i < N_REQ; i++)
                free(alone[smp][i].rows);
        bt_pipe_free(&pipe_);
        pipe_ = suite_pipe;
    }
}
END_TEST

/* The golden model's own sequence (ids 1..32) among the others. */
START_TEST(test_golden_among_others)
{
    static const int32_t expect[9] = {235, 206, 155, 56, 69, 202, 167, 91, 210};
    size_t bytes;
    float *ref = tu_read_file(tu_golden_path("tiny-llama-golden-f32.logits.bin"), &bytes);
    ck_assert_ptr_nonnull(ref);
    ck_assert_uint_eq(bytes, 40 * 256 * sizeof(float));
    job_t j;
    job_init(&j, greedy, N_REQ);
    serve(&j, 5, 8, false, 0);
    int ok = 1;
    if (rank == 0)
        ok = memcmp(j.ids[GOLDEN_REQ], expect, sizeof expect) == 0;
    double max_diff = 0;
    if (rank == size - 1)
        for (int i = 0; i < 40 * 256; i++)
            max_diff = fmax(max_diff, fabs((double)j.rows[GOLDEN_REQ][i] - ref[i]));
    ok &= max_diff <= 1e-4;
    if (rank == size - 1)
        fprintf(stderr, "golden sequence among 12: max abs diff %.3g\n", max_diff);
    job_free(&j);
    free(ref);
    ck_assert_msg(all_ok(ok), "the golden sequence in a batch: ids or logits off");
}
END_TEST

START_TEST(test_reuse)
{
    job_t j;
    job_init(&j, greedy, 20);
    for (int i = 0; i < 20; i++) {
        j.n_predict[i] = 1 + (i * 7) % N_PREDICT;
        j.stop_after[i] = i % 5 == 0 ? 3 : 0;
    }
    serve(&j, 4, 3, false, 0);
    int ok = 1;
    for (int i = 0; i < 20 && rank == 0; i++) {
        const int want = j.stop_after[i] && j.stop_after[i] <= j.n_predict[i] ? j.stop_after[i]
                                                                             : j.n_predict[i];
        const bt_finish_t why = j.stop_after[i] && j.stop_after[i] <= j.n_predict[i]
                                    ? BT_FINISH_STOP : BT_FINISH_LENGTH;
        if (j.n_ids[i] != want || j.finished[i] != 1 + (int)why) {
            fprintf(stderr, "request %d: %d ids, finish %d; want %d, finish %d\n", i,
                    j.n_ids[i], j.finished[i] - 1, want, (int)why);
            ok = 0;
        }
    }
    for (int i = 0; i < 20; i++)
        ok &= matches(&j, i, "20 requests in 4 slots");
    job_free(&j);
    ck_assert_msg(all_ok(ok), "%d ranks: 20 requests through 4 slots", size);
}
END_TEST

START_TEST(test_sampled)
{
    static const int parallel[] = {1, 8};
    for (int a = 0; a < 2; a++) {
        job_t j;
        job_init(&j, sampled, N_REQ);
        serve(&j, parallel[a], 8, false, 0);
        int ok = 1;
        for (int i = 0; i < N_REQ; i++)
            ok &= matches(&j, i, "sampled");
        job_free(&j);
        ck_assert_msg(all_ok(ok), "%d ranks, --parallel %d: seeded sampling depends on the "
                      "batch", size, parallel[a]);
    }
}
END_TEST

/* Decoding sequences spread over the groups: 6 one-id prompts share the
 * first micro-batch, then every step is one micro-batch per group. (On one
 * rank the groups run one after the other, so the first finishes early and
 * the rest re-split: exact for one group only.) */
START_TEST(test_groups)
{
    solo_t one[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        one[i] = greedy[0]; /* the one-id prompt */
        one[i].rows = NULL;
    }
    for (int g = 1; g <= 3; g++) {
        job_t j;
        job_init(&j, one, 6);
        for (int i = 0; i < 6; i++)
            j.n_predict[i] = 5;
        const bt_serve_stats_t st = serve(&j, 6, 8, false, g);
        if (rank == 0 && (size > 1 || g == 1))
            ck_assert_msg(st.n_mb == 1 + g * 4, "%d groups: %d micro-batches, want %d", g,
                          st.n_mb, 1 + g * 4);
        job_free(&j);
    }
    ck_assert(all_ok(1));
}
END_TEST

/* A full context ends a sequence: with N_CTX positions per slot, the
 * 40-id prompt (request 3) can feed 16 more ids, so it chooses 17 of its
 * 30 and ends with BT_FINISH_LENGTH; the others get their 30. */
START_TEST(test_context_full)
{
    job_t j;
    job_init(&j, greedy, N_REQ);
    for (int i = 0; i < N_REQ; i++)
        j.n_predict[i] = 30;
    serve(&j, 3, 8, false, 0);
    int ok = 1;
    for (int i = 0; i < N_REQ; i++) {
        ok &= matches(&j, i, "a full context");
        const int room = N_CTX - prompt_len[i] + 1;
        if (rank == 0 && (j.n_ids[i] != (room < 30 ? room : 30) ||
                          j.finished[i] != 1 + BT_FINISH_LENGTH)) {
            fprintf(stderr, "request %d: %d ids (room for %d), finish %d\n", i, j.n_ids[i],
                    room, j.finished[i] - 1);
            ok = 0;
        }
    }
    job_free(&j);
    ck_assert_msg(all_ok(ok), "%d ranks: a full context does not end its sequence", size);
}
END_TEST

static void make_requests(void)
{
    for (int i = 0; i < N_REQ; i++) {
        solo_t *g = &greedy[i], *s = &sampled[i];
        g->n_prompt = prompt_len[i];
        for (int k = 0; k < g->n_prompt; k++)
            g->prompt[k] = i == GOLDEN_REQ ? k + 1 : (i * 53 + k * 7 + 3) % 256;
        g->sp = bt_sampler_defaults();
        g->sp.temp = 0.0f;
        *s = *g;
        s->sp = bt_sampler_defaults();
        s->sp.seed = 1000 + (uint64_t)i;
    }
}

int main(int argc, char **argv)
{
    mpitest_init(&argc, &argv);
    if (!tu_golden_locate("tiny-llama-golden-f32.gguf", model_path, sizeof model_path)) {
        if (rank == 0)
            fprintf(stderr, "golden reference file missing: %s (it ships in "
                    "tests/data/golden; BT_GOLDEN_DIR overrides the folder)\n", model_path);
        MPI_Finalize();
        return 1;
    }
    make_requests();
    int ok = 1;
    for (int i = 0; i < N_REQ; i++)
        ok &= run_alone(&greedy[i]) && run_alone(&sampled[i]);
    make_turns();
    pipe_cfg = (bt_pipe_config_t){
        .model_path = model_path, .head_share = 0.3, .n_ctx = N_CTX, .max_tok = MAX_TOK,
        .n_threads = 1, .ops = &bt_ops_cpu, .all_logits = true, .trace_events = 1 << 14,
        .n_slots = N_SLOTS,
    };
    if (!all_ok(ok) || bt_pipe_init(&pipe_, MPI_COMM_WORLD, &pipe_cfg) != BT_OK) {
        if (rank == 0)
            fprintf(stderr, "cannot run the solo references or open the pipe on %s\n",
                    model_path);
        MPI_Finalize();
        return 1;
    }
    Suite *s = suite_create(size == 1 ? "serve (1 rank)" : "serve");
    TCase *tc = mpitest_tcase(s, "sequences", 600);
    tcase_add_test(tc, test_composition);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_wide_groups);
    tcase_add_test(tc, test_golden_among_others);
    tcase_add_test(tc, test_reuse);
    tcase_add_test(tc, test_sampled);
    tcase_add_test(tc, test_context_full);
    tcase_add_test(tc, test_groups);
    tcase_add_test(tc, test_prompt_cache);
    if (size > 1) {
        tcase_add_test(tc, test_tensor_parallel);
        tcase_add_test(tc, test_tensor_allreduce);
    }
    mpitest_run(s);
    bt_pipe_free(&pipe_);
    for (int i = 0; i < N_REQ; i++) {
        free(greedy[i].rows);
        free(sampled[i].rows);
    }
    MPI_Finalize();
    return 0;
}
