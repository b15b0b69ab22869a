/*
 * check_threads.c: several threads in one process over one shared,
 * read-only model.
 *   model:     4 pthreads, each with its own bt_forward_t (KV cache,
 *              buffers, OpenMP team of 2) over one bt_model_t, each
 *              generating greedy tokens for a different prompt, started
 *              together; the tokens and the last logits row must equal
 *              (bitwise) those of the same prompts run one after another.
 *              Run twice: a q8_0 model (fused GEMV path) and an f32 one.
 *   tokenizer: 4 threads encoding and decoding different texts with one
 *              loaded tokenizer, many times, against sequential results.
 *   logging:   threads capturing their own errors at once: each flush
 *              prints or drops only its own thread's messages.
 * Threads report through return values; only the main thread asserts.
 */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "sampler.h"
#include "synth.h"
#include "testutil.h"
#include "tokenizer.h"

enum { N_THREADS = 4, N_GEN = 12, UBATCH = 5, OMP_TEAM = 2 };

static char *tmpdir;

/* ---- the model ---- */

typedef struct job {
    const bt_model_t *m;
    const int32_t *prompt;
    int n_prompt;
    pthread_barrier_t *start; /* NULL: run at once */
    /* results */
    int32_t tokens[N_GEN];
    float *last_logits; /* [n_vocab] of the last step */
    bt_status_t st;
} job_t;

/* Greedy generation with a context of its own: the prompt in micro-batches
 * of UBATCH, then N_GEN - 1 single-token steps. */
static void *generate(void *arg)
{
    job_t *j = arg;
    const bt_hparams_t *hp = &j->m->hp;
    bt_forward_t *f = NULL;
    float *x = malloc(sizeof(float) * UBATCH * (size_t)hp->n_embd);
    float *logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    if (j->start != NULL)
        pthread_barrier_wait(j->start);
    j->st = x && logits ? BT_OK : BT_ERR_NOMEM;
    if (j->st == BT_OK)
        j->st = bt_forward_init(j->m, &bt_ops_cpu, j->n_prompt + N_GEN, 1, UBATCH, OMP_TEAM,
                                BT_TYPE_F32, &f);
    int nt = 0;
    for (int p = 0; p < j->n_prompt && j->st == BT_OK; p += nt) {
        nt = j->n_prompt - p < UBATCH ? j->n_prompt - p : UBATCH;
        if ((j->st = bt_forward_embed(f, j->prompt + p, nt, x)) == BT_OK)
            j->st = bt_forward_layers(f, x, nt, p);
    }
    for (int i = 0; i < N_GEN && j->st == BT_OK; i++) {
        if (i > 0) { /* feed the last choice */
            nt = 1;
            if ((j->st = bt_forward_embed(f, &j->tokens[i - 1], 1, x)) != BT_OK ||
                (j->st = bt_forward_layers(f, x, 1, j->n_prompt + i - 1)) != BT_OK)
                break;
        }
        bt_forward_head(f, x + (size_t)(nt - 1) * hp->n_embd, 1, logits);
        j->tokens[i] = bt_sample_greedy(logits, hp->n_vocab);
    }
    if (j->st == BT_OK) {
        j->last_logits = logits;
        logits = NULL;
    }
    free(logits);
    free(x);
    bt_forward_free(f);
    return NULL;
}

static void check_model_threads(uint32_t type)
{
    char path[700];
    snprintf(path, sizeof path, "%s/model-%u.gguf", tmpdir, type);
    bt_synth_shape_t shape;
    ck_assert_int_eq(bt_synth_shape("tiny", &shape), BT_OK);
    /* wide enough that the matmuls split over OpenMP teams (work of at
     * least 2^18 multiply-adds, BT_PARALLEL_MIN_WORK in kernels/cpu.c), so
     * every thread runs a team of its own */
    shape.n_layer = 2;
    shape.n_embd = 256;
    shape.n_head = 4;
    shape.n_head_kv = 2;
    shape.n_ff = 768;
    shape.n_vocab = 1024;
    ck_assert((double)shape.n_embd * shape.n_vocab >= (1 << 18));
    ck_assert_int_eq(bt_synth_write(path, &shape, type, 11), BT_OK);
    bt_model_t *m;
    ck_assert_int_eq(bt_model_load(path, 0, -1, true, true, &m), BT_OK);
    ck_assert_int_eq(bt_model_place_weights(m, true), BT_OK);
    ck_assert_int_eq(bt_model_pack(m), BT_OK); /* as a pipeline does for bt_ops_cpu */

    /* four different prompts of different lengths (1, 2 or 3+ micro-batches) */
    static const int lens[N_THREADS] = {3, 7, 11, 16};
    int32_t prompts[N_THREADS][16];
    rng_t rng = rng_make(0x5eed + type);
    for (int t = 0; t < N_THREADS; t++)
        for (int i = 0; i < lens[t]; i++)
            prompts[t][i] = (int32_t)(rng_next(&rng) % (uint64_t)m->hp.n_vocab);

    job_t seq[N_THREADS], par[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        seq[t] = (job_t){.m = m, .prompt = prompts[t], .n_prompt = lens[t]};
        generate(&seq[t]);
        ck_assert_msg(seq[t].st == BT_OK, "sequential run %d: %s", t, bt_status_str(seq[t].st));
    }
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, N_THREADS);
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        par[t] = (job_t){.m = m, .prompt = prompts[t], .n_prompt = lens[t], .start = &start};
        ck_assert_int_eq(pthread_create(&th[t], NULL, generate, &par[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&start);

    int differ = 0;
    for (int t = 0; t < N_THREADS; t++) {
        ck_assert_msg(par[t].st == BT_OK, "thread %d: %s", t, bt_status_str(par[t].st));
        differ += memcmp(seq[t].tokens, par[t].tokens, sizeof seq[t].tokens) != 0;
        differ += memcmp(seq[t].last_logits, par[t].last_logits,
                         sizeof(float) * (size_t)m->hp.n_vocab) != 0;
        printf("type %u prompt %d (%2d tokens): %d %d %d ... %d, threads %s\n", type, t, lens[t],
               par[t].tokens[0], par[t].tokens[1], par[t].tokens[2], par[t].tokens[N_GEN - 1],
               memcmp(seq[t].tokens, par[t].tokens, sizeof seq[t].tokens) ? "DIFFER" : "equal");
    }
    /* the prompts differ, so should their generations (the test is not vacuous) */
    ck_assert_msg(memcmp(seq[0].tokens, seq[3].tokens, sizeof seq[0].tokens) != 0,
                  "prompts 0 and 3 generated the same tokens");
    for (int t = 0; t < N_THREADS; t++) {
        free(seq[t].last_logits);
        free(par[t].last_logits);
    }
    bt_model_free(m);
    ck_assert_msg(differ == 0, "%d thread results differ from the sequential runs", differ);
}

START_TEST(test_model_threads_q8_0) { check_model_threads(BT_TYPE_Q8_0); }
END_TEST

START_TEST(test_model_threads_f32) { check_model_threads(BT_TYPE_F32); }
END_TEST

/* ---- the tokenizer ---- */

static const char *const texts[N_THREADS] = {
    "Hello world, this is a test.",
    "  leading spaces and <0x41> bytes \xe2\x82\xac",
    "numbers 12345 and punctuation!?",
    "a much longer sentence that goes on for a while to make merges work hard",
};

typedef struct tok_job {
    const bt_tokenizer_t *tok;
    const char *text;
    int32_t *ids;
    int n;
    char *decoded;
    int mismatches;
    bt_status_t st;
} tok_job_t;

static void *tokenize(void *arg)
{
    tok_job_t *j = arg;
    for (int rep = 0; rep < 200 && j->st == BT_OK; rep++) {
        int32_t *ids;
        int n;
        char *text;
        size_t len;
        if ((j->st = bt_tokenizer_encode(j->tok, j->text, strlen(j->text), true, false, &ids,
                                         &n)) != BT_OK)
            break;
        if ((j->st = bt_tokenizer_decode(j->tok, ids, n, 0, &text, &len)) != BT_OK) {
            free(ids);
            break;
        }
        if (j->ids == NULL) { /* first round: keep as this thread's answer */
            j->ids = ids, j->n = n, j->decoded = text;
            continue;
        }
        j->mismatches += n != j->n || memcmp(ids, j->ids, sizeof *ids * (size_t)n) != 0 ||
                         strcmp(text, j->decoded) != 0;
        free(ids);
        free(text);
    }
    return NULL;
}

START_TEST(test_tokenizer_threads)
{
    char path[700];
    snprintf(path, sizeof path, "%s/tests/data/spm-tiny.gguf", tu_srcdir());
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);
    bt_tokenizer_t *tok;
    ck_assert_int_eq(bt_tokenizer_load(g, &tok), BT_OK);
    bt_gguf_close(g); /* the tokenizer keeps no pointer into the file */

    tok_job_t seq[N_THREADS] = {0}, par[N_THREADS] = {0};
    for (int t = 0; t < N_THREADS; t++) {
        seq[t] = (tok_job_t){.tok = tok, .text = texts[t]};
        tokenize(&seq[t]);
        ck_assert_int_eq(seq[t].st, BT_OK);
    }
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        par[t] = (tok_job_t){.tok = tok, .text = texts[t]};
        ck_assert_int_eq(pthread_create(&th[t], NULL, tokenize, &par[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < N_THREADS; t++) {
        ck_assert_int_eq(par[t].st, BT_OK);
        ck_assert_int_eq(par[t].mismatches, 0);
        ck_assert_int_eq(par[t].n, seq[t].n);
        ck_assert_int_gt(par[t].n, 0);
        ck_assert(memcmp(par[t].ids, seq[t].ids, sizeof(int32_t) * (size_t)seq[t].n) == 0);
        ck_assert_str_eq(par[t].decoded, seq[t].decoded);
        free(par[t].ids), free(par[t].decoded);
        free(seq[t].ids), free(seq[t].decoded);
    }
    bt_tokenizer_free(tok);
}
END_TEST

/* ---- logging ---- */

typedef struct log_job {
    int id;
    pthread_barrier_t *sync;
} log_job_t;

/* Captures one error; once every thread has captured its own, the threads
 * flush one after another, even ones printing and odd ones dropping what
 * they kept. A shared capture buffer would print every message at thread
 * 0's flush. */
static void *log_captured(void *arg)
{
    log_job_t *j = arg;
    bt_log_capture(1);
    bt_log_error("threads test: message of thread %d", j->id);
    for (int turn = 0; turn < N_THREADS; turn++) {
        pthread_barrier_wait(j->sync);
        if (turn == j->id)
            bt_log_flush_captured(j->id % 2 == 0);
    }
    bt_log_capture(0);
    return NULL;
}

START_TEST(test_log_capture_threads)
{
    /* stderr into a file, so what the flushes printed can be counted */
    char path[700];
    snprintf(path, sizeof path, "%s/log.txt", tmpdir);
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(path, "w+");
    ck_assert_ptr_nonnull(f);
    dup2(fileno(f), 2);
    pthread_barrier_t sync;
    pthread_barrier_init(&sync, NULL, N_THREADS);
    pthread_t th[N_THREADS];
    log_job_t jobs[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        jobs[t] = (log_job_t){t, &sync};
        pthread_create(&th[t], NULL, log_captured, &jobs[t]);
    }
    for (int t = 0; t < N_THREADS; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&sync);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    /* the even threads' messages printed once each, whole; the odd ones' not */
    char line[256];
    int seen[N_THREADS] = {0}, lines = 0;
    rewind(f);
    while (fgets(line, sizeof line, f)) {
        int id;
        lines++;
        if (sscanf(line, "error: threads test: message of thread %d", &id) == 1 && id >= 0 &&
            id < N_THREADS)
            seen[id]++;
    }
    fclose(f);
    ck_assert_int_eq(lines, N_THREADS / 2);
    for (int t = 0; t < N_THREADS; t++)
        ck_assert_msg(seen[t] == (t % 2 == 0), "thread %d's message printed %d times", t,
                      seen[t]);
}
END_TEST

int main(void)
{
    tmpdir = tu_mkdtemp();
    if (tmpdir == NULL) {
        fprintf(stderr, "cannot create a temporary directory\n");
        return 1;
    }
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_model_threads_q8_0);
    tcase_add_test(tc, test_model_threads_f32);
    tcase_add_test(tc, test_tokenizer_threads);
    tcase_add_test(tc, test_log_capture_threads);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_VERBOSE); /* a line per test: scripts/test-summary counts them */
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    tu_rmdir_all(tmpdir);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
