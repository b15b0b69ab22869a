/* parallel.c: -npl P above 1, P sequences through bt_pipe_serve (see parallel.h). */
#include "parallel.h"

#include "stages/serve.h"

int bt_parallel_prompt_len(const bt_bench_test_t *t)
{
    return t->n_prompt > 0 ? t->n_prompt : 1;
}

int bt_parallel_n_predict(const bt_bench_test_t *t, bool warmup)
{
    int n = t->kind == BT_TEST_PP ? 1 : t->kind == BT_TEST_TG ? t->n_gen : t->n_gen + 1;
    return warmup && n > 2 ? 2 : n;
}

int bt_parallel_ubatch(const bt_bench_test_t *t)
{
    long all = (long)t->parallel * bt_parallel_prompt_len(t);
    return all < t->ubatch ? (int)all : t->ubatch;
}

/* What rank 0 hands out and counts. */
typedef struct par_run {
    const int32_t *ids; /* [parallel, prompt_len] */
    int prompt_len, n_predict, parallel;
    int64_t rows;       /* rows the figure counts: P x the test's tokens (0: warm-up) */
    int next;           /* requests handed out */
    int64_t chosen;     /* tokens chosen */
    int finished, stopped;
} par_run_t;

static bool par_next(void *arg, int *id, bt_seq_req_t *req)
{
    par_run_t *r = arg;
    if (r->next == r->parallel)
        return false;
    *id = r->next;
    *req = (bt_seq_req_t){
        .tokens = r->ids + (size_t)r->next * (size_t)r->prompt_len,
        .n_tokens = r->prompt_len,
        .n_predict = r->n_predict,
        .sampling = {.temp = 0.0f, .top_p = 1.0f, .repeat_penalty = 1.0f}, /* greedy */
    };
    r->next++;
    return true;
}

static bool par_token(void *arg, int id, int32_t token)
{
    (void)id, (void)token;
    ((par_run_t *)arg)->chosen++;
    return true;
}

static void par_finish(void *arg, int id, bt_finish_t why)
{
    (void)id;
    par_run_t *r = arg;
    r->finished++;
    r->stopped += why != BT_FINISH_LENGTH;
}

/* Rank 0: every request ran to its n_predict tokens and the rows computed
 * are the tokens the figure counts, or t/s would count tokens that were
 * never computed. */
static bt_status_t check_counts(const par_run_t *r, const bt_serve_stats_t *s)
{
    const int64_t want = (int64_t)r->parallel * r->n_predict;
    const int64_t want_prompt = (int64_t)r->parallel * r->prompt_len;
    if (r->finished == r->parallel && r->stopped == 0 && r->chosen == want &&
        s->n_requests == r->parallel && s->n_prompt == want_prompt &&
        s->n_decode == want - r->parallel &&
        (r->rows == 0 || s->n_prompt + s->n_decode == r->rows))
        return BT_OK;
    bt_log_error("-npl %d: the engine finished %d requests (%d stopped early) and chose %lld "
                 "tokens over %lld prompt and %lld decode rows; the test needs %d requests of "
                 "%d prompt tokens choosing %d each (%lld tokens, %lld prompt and %lld decode "
                 "rows; the figure counts %lld rows, 0: warm-up)", r->parallel, r->finished,
                 r->stopped, (long long)r->chosen, (long long)s->n_prompt,
                 (long long)s->n_decode, r->parallel, r->prompt_len, r->n_predict,
                 (long long)want, (long long)want_prompt, (long long)(want - r->parallel),
                 (long long)r->rows);
    return BT_ERR_UNSUPPORTED;
}

bt_status_t bt_parallel_run(bt_pipe_t *p, const bt_bench_test_t *t, const int32_t *ids,
                            int n_groups, bool warmup, int *n_mb)
{
    par_run_t run = {
        .ids = ids,
        .prompt_len = bt_parallel_prompt_len(t),
        .n_predict = bt_parallel_n_predict(t, warmup),
        .parallel = t->parallel,
        .rows = warmup ? 0 : (int64_t)t->parallel * (t->n_prompt + t->n_gen),
    };
    const bt_serve_config_t cfg = {
        .n_slots = t->parallel,
        .n_groups = t->pipeline ? n_groups : 1, /* sync: every decode row in the one micro-batch */
        .ubatch = bt_parallel_ubatch(t),
        .sync = !t->pipeline,
    };
    const bt_serve_hooks_t hooks = {
        .next = par_next, .token = par_token, .finish = par_finish, .arg = &run,
    };
    bt_serve_stats_t stats = {0};
    bt_status_t st = bt_pipe_serve(p, &cfg, &hooks, &stats);
    if (st == BT_OK && p->world_rank == 0) {
        st = check_counts(&run, &stats);
        *n_mb = stats.n_mb;
    }
    return st;
}
