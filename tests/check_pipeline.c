/*
 * check_pipeline.c: the pipeline over MPI ranks (run through tests/mpi-run
 * with the rank count from the test's name, CK_FORK=no).
 *   invariance: logits and greedy tokens bitwise equal to one process
 *               without MPI, for micro-batches 1, 3, 8 and the whole
 *               prompt, pipeline 0 and 1, balanced and uneven -ts splits
 *   rendezvous: the same on a wide model whose activation messages (6 to
 *               16 KiB) are above Open MPI's shared-memory eager limit
 *               (4 KiB), so a send completes only when the receiver has
 *               taken it: a slot overwritten or received into before that
 *               shows up as wrong bits. The case where stage 0 runs furthest
 *               ahead (a heavy last stage) repeats on one pipe. The
 *               pipeline_eager_npN entries run this program with the eager
 *               limit forced down, so every test here goes rendezvous.
 *   families:   the same for a model of every other architecture of the
 *               table (Llama 3 rope factors, qwen2, qwen3, gemma3 with a
 *               sliding window of 8 that micro-batches cut across, experts
 *               in llama and qwen3moe, routed per row, gpt-oss: the golden
 *               files)
 *   tensor:     -tp T for every T dividing the rank count: bitwise equal to
 *               one process with gathers; with --tp-comm allreduce within
 *               the golden tolerance, and bitwise equal across
 *               micro-batches and pipeline modes for each T
 *   traffic:    every activation goes from rank s straight to rank s+1
 *   errors:     setup failures stop every rank with the same status
 *   linkprobe:  one measured link per neighbor pair, reported on rank 0,
 *               nothing left in flight, a bad config refused by every rank;
 *               the stage boundary's three crossings of a hybrid layout
 * Each check combines its verdict over all ranks (MPI_Allreduce) so every
 * rank fails alike and none is left waiting. A test that fails on one rank
 * only would leave the others waiting in that combine: the next test's
 * fixture (or main, after the last test) sees the failure and calls
 * MPI_Abort, so the job ends at once instead of at the launcher's timeout.
 */
#include <check.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "sampler.h"
#include "stages/linkprobe.h"
#include "stages/schedule.h"
#include "synth.h"
#include "testutil.h"
#include "mpitest.h"

enum { N_PROMPT = 29, N_GEN = 3, N_LAYER = 7, N_LAYER_WIDE = 12 };

/* A synthetic model and its single-process reference. */
typedef struct refmodel {
    char path[700];
    int n_vocab;
    float *rows;              /* [N_PROMPT + N_GEN, n_vocab] from one process */
    int32_t ids[N_GEN + 1];   /* greedy ids after the prompt and each step */
} refmodel_t;

static refmodel_t tiny; /* the "tiny" shape: 1-2 KiB messages (eager) */
/* one model of each other family (the golden files: 4-6 layers, vocab 256) */
static const char *const family_files[] = {"tiny-llama3-ropefreqs-golden.gguf",
                                           "tiny-qwen2-golden.gguf", "tiny-qwen3-golden.gguf",
                                           "tiny-gemma3-swa-golden.gguf",
                                           "tiny-llama-moe-golden-f32.gguf",
                                           "tiny-qwen3moe-golden.gguf",
                                           "tiny-gptoss-golden.gguf",
                                           "tiny-deepseek2-golden-f32.gguf",
                                           "tiny-deepseek3-golden.gguf"};
enum { N_FAMILIES = sizeof family_files / sizeof family_files[0] };
static refmodel_t family[N_FAMILIES];
static refmodel_t wide; /* n_embd 512: 8-16 KiB messages (rendezvous) */
static int32_t tokens[N_PROMPT];
static int tensor_ranks = 1; /* -tp of the pipelines config() makes */


/* The reference: the whole model in this process, one batch, no MPI.
 * Runs before the suite, so it reports with a return value, not ck_assert. */
static int make_reference(refmodel_t *r)
{
    bt_model_t *m;
    bt_forward_t *f;
    if (bt_model_load(r->path, 0, -1, true, true, &m) != BT_OK)
        return 0;
    const int n_vocab = r->n_vocab = m->hp.n_vocab;
    if (bt_forward_init(m, &bt_ops_cpu, N_PROMPT + N_GEN, 1, N_PROMPT, 1, BT_TYPE_F32, &f) !=
        BT_OK) {
        bt_model_free(m);
        return 0;
    }
    float *x = malloc((size_t)N_PROMPT * m->hp.n_embd * sizeof(float));
    r->rows = malloc((size_t)(N_PROMPT + N_GEN) * n_vocab * sizeof(float));
    int ok = bt_forward_embed(f, tokens, N_PROMPT, x) == BT_OK &&
             bt_forward_layers(f, x, N_PROMPT, 0) == BT_OK;
    if (ok) {
        bt_forward_head(f, x, N_PROMPT, r->rows);
        r->ids[0] = bt_sample_greedy(r->rows + (size_t)(N_PROMPT - 1) * n_vocab, n_vocab);
    }
    for (int i = 0; i < N_GEN && ok; i++) {
        float *row = r->rows + (size_t)(N_PROMPT + i) * n_vocab;
        ok = bt_forward_embed(f, &r->ids[i], 1, x) == BT_OK &&
             bt_forward_layers(f, x, 1, N_PROMPT + i) == BT_OK;
        bt_forward_head(f, x, 1, row);
        r->ids[i + 1] = bt_sample_greedy(row, n_vocab);
    }
    free(x);
    bt_forward_free(f);
    bt_model_free(m);
    return ok;
}

typedef struct collect {
    float *rows; /* [N_PROMPT + N_GEN, n_vocab] on the last rank */
    int n_vocab;
} collect_t;

static bt_status_t collect_rows(void *arg, const float *rows, int n_rows, int pos0)
{
    collect_t *c = arg;
    memcpy(c->rows + (size_t)pos0 * c->n_vocab, rows,
           sizeof(float) * (size_t)n_rows * c->n_vocab);
    return BT_OK;
}

static bt_pipe_config_t config(const char *path, int ubatch, const double *ratios, int n_ratios)
{
    return (bt_pipe_config_t){
        .model_path = path,
        .ratios = ratios,
        .n_ratios = n_ratios,
        .head_share = 0.1,
        .n_ctx = N_PROMPT + N_GEN,
        .max_tok = ubatch,
        .n_threads = 1,
        .ops = &bt_ops_cpu,
        .all_logits = true,
        .trace_events = 256,
        .tp = tensor_ranks,
    };
}

/* One run of the prompt and N_GEN decode steps on p: every row's logits
 * into rows (NaN first: a row never written cannot match) on the rank
 * that has them, the greedy ids into ids on the rank that has them. The
 * prefill's status (its failure left to the caller to report). */
static bt_status_t run_once(bt_pipe_t *p, const refmodel_t *r, int ubatch, bt_pipe_mode_t mode,
                            float *rows, int32_t *ids)
{
    collect_t c = {rows, r->n_vocab};
    memset(rows, 0xff, sizeof(float) * (size_t)(N_PROMPT + N_GEN) * r->n_vocab);
    bt_status_t st = bt_pipe_prefill(p, tokens, N_PROMPT, 0, ubatch, mode, collect_rows, &c,
                                     &ids[0]);
    for (int i = 0; st == BT_OK && i < N_GEN; i++)
        ck_assert_int_eq(bt_pipe_decode(p, ids[i], N_PROMPT + i, collect_rows, &c, &ids[i + 1]),
                         BT_OK);
    return st;
}

/* Runs prompt + decode through one pipeline reps times and compares each
 * run with the reference; returns 1 when all are equal on this rank. */
static int pipeline_matches_reps(const refmodel_t *r, int ubatch, bt_pipe_mode_t mode,
                                 const double *ratios, int n_ratios, int reps)
{
    bt_pipe_t p;
    bt_pipe_config_t cfg = config(r->path, ubatch, ratios, n_ratios);
    ck_assert_int_eq(bt_pipe_init(&p, MPI_COMM_WORLD, &cfg), BT_OK);
    const size_t bytes = sizeof(float) * (size_t)(N_PROMPT + N_GEN) * r->n_vocab;
    float *rows = malloc(bytes);
    int ok = 1;
    for (int rep = 0; rep < reps && ok; rep++) {
        int32_t ids[N_GEN + 1];
        bt_status_t st = run_once(&p, r, ubatch, mode, rows, ids);
        ck_assert_msg(st == BT_OK, "%s: prefill (ub %d, pipeline %d, %d ratios, run %d of %d): %s",
                      r->path, ubatch, mode, n_ratios, rep + 1, reps, bt_status_str(st));
        if (p.last && !p.follower && memcmp(rows, r->rows, bytes) != 0) {
            fprintf(stderr, "rank %d: logits differ (ub %d, pipeline %d, %d ratios, run %d of %d)\n",
                    rank, ubatch, mode, n_ratios, rep + 1, reps);
            ok = 0;
        }
        if (p.first && !p.follower && memcmp(ids, r->ids, sizeof ids) != 0) {
            fprintf(stderr, "rank 0: greedy tokens differ (ub %d, pipeline %d, run %d of %d)\n",
                    ubatch, mode, rep + 1, reps);
            ok = 0;
        }
    }
    free(rows);
    bt_pipe_free(&p);
    return ok;
}

static int pipeline_matches(int ubatch, bt_pipe_mode_t mode, const double *ratios, int n_ratios)
{
    return pipeline_matches_reps(&tiny, ubatch, mode, ratios, n_ratios, 1);
}

/* Every architecture of the table through the pipeline: the same bits as
 * one process (invariant 1), whatever the family's extras (biases, q/k
 * norms, rope pairing and factors). */
START_TEST(test_families)
{
    static const int ubs[] = {1, 5, N_PROMPT};
    for (int m = 0; m < N_FAMILIES; m++)
        for (size_t i = 0; i < sizeof ubs / sizeof ubs[0]; i++)
            for (int mode = 0; mode <= 1; mode++)
                ck_assert_msg(all_ok(pipeline_matches_reps(&family[m], ubs[i],
                                                           (bt_pipe_mode_t)mode, NULL, 0, 1)),
                              "%s on %d ranks, micro-batch %d, pipeline %d: not bitwise equal",
                              family_files[m], size, ubs[i], mode);
}
END_TEST

/* Model m of the tensor cases: -1 the tiny one, else family m; NULL for
 * MLA, which splits by layers only (its refusal: tests/bad_input.sh). */
static const refmodel_t *tp_model(int m)
{
    const refmodel_t *r = m < 0 ? &tiny : &family[m];
    return strstr(r->path, "deepseek") != NULL ? NULL : r;
}

/* Tensor parallelism: with T tensor ranks per stage, for every T > 1 that
 * divides the rank count (T = size: -sm tensor; else S stages of T), every
 * family's logits and greedy ids are bitwise those of one process
 * (invariant 1): heads split by whole kv groups (tiny llama at T = 2) and
 * groups shared between ranks (T = 3, 4; gemma3's one kv head), uneven
 * feature and expert splits, sinks and biases of gpt-oss, windows. */
START_TEST(test_tensor_parallel)
{
    static const int ubs[] = {1, 5, N_PROMPT};
    for (int T = 2; T <= size; T++) {
        if (size % T != 0)
            continue;
        tensor_ranks = T;
        for (int m = -1; m < N_FAMILIES; m++) {
            const refmodel_t *r = tp_model(m);
            if (r == NULL)
                continue;
            for (size_t i = 0; i < sizeof ubs / sizeof ubs[0]; i++)
                for (int mode = 0; mode <= 1; mode++)
                    ck_assert_msg(all_ok(pipeline_matches_reps(r, ubs[i], (bt_pipe_mode_t)mode,
                                                               NULL, 0, 1)),
                                  "%s on %d ranks with -tp %d, micro-batch %d, pipeline %d: not "
                                  "bitwise equal", r->path, size, T, ubs[i], mode);
        }
    }
    tensor_ranks = 1;
}
END_TEST

/* run_once with --tp-comm allreduce on a pipe of its own: *has_rows and
 * *has_ids say whether this rank has the logits and the ids. */
static void allreduce_run(const refmodel_t *r, int ubatch, bt_pipe_mode_t mode, float *rows,
                          int32_t *ids, int *has_rows, int *has_ids)
{
    bt_pipe_t p;
    bt_pipe_config_t cfg = config(r->path, ubatch, NULL, 0);
    cfg.tp_allreduce = 1;
    ck_assert_int_eq(bt_pipe_init(&p, MPI_COMM_WORLD, &cfg), BT_OK);
    ck_assert_int_eq(run_once(&p, r, ubatch, mode, rows, ids), BT_OK);
    *has_rows = p.last && !p.follower;
    *has_ids = p.first && !p.follower;
    bt_pipe_free(&p);
}

/* --tp-comm allreduce: partial sums added in rank order change the
 * roundings, so every family's logits are held to the golden tolerance of
 * one process's (1e-4; gemma3's 1e-2, tests/check_model.c) with the same
 * greedy ids, and for each T they are bitwise the same for micro-batches
 * 1, 5 and the whole prompt, pipeline 0 and 1 (each element is added on
 * one rank in rank order, whatever the rows). */
START_TEST(test_tensor_allreduce)
{
    static const int ubs[] = {1, 5};
    for (int T = 2; T <= size; T++) {
        if (size % T != 0)
            continue;
        tensor_ranks = T;
        for (int m = -1; m < N_FAMILIES; m++) {
            const refmodel_t *r = tp_model(m);
            if (r == NULL)
                continue;
            const size_t n = (size_t)(N_PROMPT + N_GEN) * r->n_vocab;
            const double tol = strstr(r->path, "gemma3") != NULL ? 1e-2 : 1e-4;
            float *base = malloc(n * sizeof(float)), *again = malloc(n * sizeof(float));
            int32_t ids[N_GEN + 1], ids2[N_GEN + 1];
            int has_rows, has_ids, ok = 1;
            allreduce_run(r, N_PROMPT, BT_PIPE_GPIPE, base, ids, &has_rows, &has_ids);
            double worst = 0.0;
            for (size_t i = 0; has_rows && i < n; i++) {
                const double d = fabs((double)base[i] - (double)r->rows[i]);
                worst = d > worst || d != d ? d : worst;
            }
            ok = !(worst > tol) && worst == worst;
            if (has_ids && memcmp(ids, r->ids, sizeof ids) != 0)
                ok = 0;
            ck_assert_msg(all_ok(ok), "%s, -tp %d of %d ranks, allreduce: logits %g from one "
                          "process's (tolerance %g) or greedy ids differ", r->path, T, size,
                          worst, tol);
            for (size_t i = 0; i < sizeof ubs / sizeof ubs[0]; i++)
                for (int mode = 0; mode <= 1; mode++) {
                    allreduce_run(r, ubs[i], (bt_pipe_mode_t)mode, again, ids2, &has_rows,
                                  &has_ids);
                    ok = !(has_rows && memcmp(again, base, n * sizeof(float)) != 0) &&
                         !(has_ids && memcmp(ids2, ids, sizeof ids) != 0);
                    ck_assert_msg(all_ok(ok), "%s, -tp %d of %d ranks, allreduce, micro-batch "
                                  "%d, pipeline %d: not bitwise equal to the whole prompt's",
                                  r->path, T, size, ubs[i], mode);
                }
            free(again);
            free(base);
        }
    }
    tensor_ranks = 1;
}
END_TEST

START_TEST(test_invariance)
{
    static const int ubs[] = {1, 3, 8, N_PROMPT};
    for (size_t i = 0; i < sizeof ubs / sizeof ubs[0]; i++)
        for (int mode = 0; mode <= 1; mode++)
            ck_assert_msg(all_ok(pipeline_matches(ubs[i], (bt_pipe_mode_t)mode, NULL, 0)),
                          "%d ranks, micro-batch %d, pipeline %d: not bitwise equal", size,
                          ubs[i], mode);
}
END_TEST

/* -ts shares for the wide model: one layer on each stage but the last,
 * which has the rest and the head and is many times slower, so with
 * pipelining the earlier stages run several micro-batches ahead and come
 * back to each slot while the next rank may not yet have taken its
 * message. */
static void heavy_last(double *ratios)
{
    for (int s = 0; s < size; s++)
        ratios[s] = s == size - 1 ? 8.0 : 1.0;
}

/* Wide-model micro-batches of 4 and 8 rows: 8 and 16 KiB messages,
 * 8 and 4 of them per prompt. */
START_TEST(test_invariance_rendezvous)
{
    static const int ubs[] = {4, 8};
    double ratios[8];
    heavy_last(ratios);
    for (size_t i = 0; i < sizeof ubs / sizeof ubs[0]; i++)
        for (int mode = 0; mode <= 1; mode++)
            for (int split = 0; split <= 1; split++)
                ck_assert_msg(all_ok(pipeline_matches_reps(&wide, ubs[i], (bt_pipe_mode_t)mode,
                                                           split ? ratios : NULL,
                                                           split ? size : 0, 1)),
                              "%d ranks, wide model, micro-batch %d, pipeline %d, %s split: not "
                              "bitwise equal", size, ubs[i], mode, split ? "heavy-last" : "balanced");
}
END_TEST

/* The most timing-dependent case, repeated on one pipe: micro-batches of 3
 * (10 messages of 6 KiB per prompt) with the heavy last stage. A race that
 * shows in one run of three goes unseen in all 20 with odds (2/3)^20, about
 * 1 in 3000. */
enum { N_REPEAT = 20 };
START_TEST(test_invariance_repeat)
{
    double ratios[8];
    heavy_last(ratios);
    ck_assert_msg(all_ok(pipeline_matches_reps(&wide, 3, BT_PIPE_GPIPE, ratios, size, N_REPEAT)),
                  "%d ranks, wide model, micro-batch 3, pipeline 1, heavy-last split: not bitwise "
                  "equal in %d runs", size, N_REPEAT);
}
END_TEST

START_TEST(test_tensor_split)
{
    /* uneven splits: growing and shrinking shares */
    double up[8], down[8];
    for (int s = 0; s < size; s++) {
        up[s] = s + 1;
        down[s] = size - s;
    }
    ck_assert(all_ok(pipeline_matches(4, BT_PIPE_GPIPE, up, size)));
    ck_assert(all_ok(pipeline_matches(5, BT_PIPE_SYNC, down, size)));
}
END_TEST

START_TEST(test_traffic)
{
    const int ubatch = 4, n_mb = (N_PROMPT + ubatch - 1) / ubatch;
    bt_pipe_t p;
    bt_pipe_config_t cfg = config(tiny.path, ubatch, NULL, 0);
    cfg.all_logits = false;
    ck_assert_int_eq(bt_pipe_init(&p, MPI_COMM_WORLD, &cfg), BT_OK);
    int32_t next;
    ck_assert_int_eq(
        bt_pipe_prefill(&p, tokens, N_PROMPT, 0, ubatch, BT_PIPE_GPIPE, NULL, NULL, &next),
        BT_OK);
    int ok = 1;
    for (int r = 0; r < size; r++) {
        uint64_t want_recv = r == rank - 1 ? (uint64_t)n_mb : 0;
        uint64_t want_sent = r == rank + 1 ? (uint64_t)n_mb : 0;
        if (p.tr.act_recv_from[r] != want_recv || p.tr.act_sent_to[r] != want_sent) {
            fprintf(stderr, "rank %d: with rank %d received %llu (want %llu), sent %llu (want %llu)\n",
                    rank, r, (unsigned long long)p.tr.act_recv_from[r],
                    (unsigned long long)want_recv, (unsigned long long)p.tr.act_sent_to[r],
                    (unsigned long long)want_sent);
            ok = 0;
        }
    }
    if (rank == 0)
        ok = ok && next == tiny.ids[0];
    bt_pipe_free(&p);
    ck_assert(all_ok(ok));
}
END_TEST

typedef struct gen {
    int32_t ids[16];
    int n, want;
} gen_t;

static bool collect_token(void *arg, int32_t token)
{
    gen_t *g = arg;
    g->ids[g->n++] = token;
    return g->n < g->want;
}

/* Generation driven by rank 0's callback: it stops after N_GEN + 1 tokens
 * (before max_steps); every rank follows the STOP and the tokens are the
 * greedy reference. Then a second prompt on the same pipe still works. */
START_TEST(test_generate_stop)
{
    bt_pipe_t p;
    bt_pipe_config_t cfg = config(tiny.path, 8, NULL, 0);
    cfg.all_logits = false;
    ck_assert_int_eq(bt_pipe_init(&p, MPI_COMM_WORLD, &cfg), BT_OK);
    for (int round = 0; round < 2; round++) {
        int32_t first = -1;
        ck_assert_int_eq(bt_pipe_prefill(&p, tokens, N_PROMPT, 0, 8, BT_PIPE_GPIPE, NULL, NULL,
                                         &first),
                         BT_OK);
        gen_t g = {.want = N_GEN + 1};
        int steps = -1;
        ck_assert_int_eq(bt_pipe_generate(&p, first, N_PROMPT, 10, collect_token, NULL, &g, &steps),
                         BT_OK);
        int ok = steps == N_GEN;
        if (rank == 0)
            ok = ok && g.n == N_GEN + 1 && memcmp(g.ids, tiny.ids, sizeof tiny.ids) == 0;
        ck_assert_msg(all_ok(ok), "round %d: generation differs or stopped wrong (%d steps)",
                      round, steps);
    }
    bt_pipe_free(&p);
}
END_TEST

START_TEST(test_setup_errors)
{
    bt_pipe_t p;
    /* a missing file on every rank */
    bt_pipe_config_t cfg = config(tiny.path, 4, NULL, 0);
    cfg.model_path = "/nonexistent/model.gguf";
    ck_assert_int_eq(bt_pipe_init(&p, MPI_COMM_WORLD, &cfg), BT_ERR_IO);
    /* the file missing on the last rank only: everyone fails together */
    if (size > 1) {
        cfg.model_path = rank == size - 1 ? "/nonexistent/model.gguf" : tiny.path;
        ck_assert_int_eq(bt_pipe_init(&p, MPI_COMM_WORLD, &cfg), BT_ERR_IO);
    }
    /* wrong -ts count and a zero ratio */
    cfg = config(tiny.path, 4, NULL, 0);
    double r[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    cfg.ratios = r;
    cfg.n_ratios = size + 1;
    ck_assert_int_eq(bt_pipe_init(&p, MPI_COMM_WORLD, &cfg), BT_ERR_ARG);
    r[0] = 0;
    cfg.n_ratios = size;
    ck_assert_int_eq(bt_pipe_init(&p, MPI_COMM_WORLD, &cfg), BT_ERR_ARG);
}
END_TEST

START_TEST(test_link_probe)
{
    bt_link_t links[16];
    for (int i = 0; i < 16; i++)
        links[i] = (bt_link_t){.from = -7};
    /* a small and a rendezvous-sized message */
    bt_linkprobe_config_t cfg = {.lat_bytes = 8, .lat_reps = 5, .bw_bytes = 256 << 10,
                                 .bw_reps = 2};
    ck_assert_int_le(size, 16);
    ck_assert_int_eq(bt_linkprobe_run(MPI_COMM_WORLD, &cfg, rank == 0 ? links : NULL), BT_OK);
    int ok = 1;
    for (int s = 0; rank == 0 && s < size - 1; s++) {
        const bt_link_t *l = &links[s];
        if (l->from != s || l->to != s + 1 || !(l->latency_s > 0 && l->latency_s < 1) ||
            !(l->bandwidth > 0 && l->bandwidth < 1e13) || l->bw_bytes != cfg.bw_bytes ||
            l->lat_bytes != 8 || l->lat_reps != 5 || l->bw_reps != 2) {
            fprintf(stderr, "link %d: %d->%d latency %g s bandwidth %g B/s sizes %zu/%zu\n", s,
                    l->from, l->to, l->latency_s, l->bandwidth, l->lat_bytes, l->bw_bytes);
            ok = 0;
        }
    }
    if (rank == 0 && links[size - 1].from != -7) /* no link past the last stage */
        ok = 0;
    /* every probe message was received */
    int pending = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, BT_TAG_PROBE, MPI_COMM_WORLD, &pending, MPI_STATUS_IGNORE);
    ok = ok && !pending;
    ck_assert_msg(all_ok(ok), "link probe results wrong on some rank");
    /* defaults work too; a bad config is refused on every rank */
    ck_assert_int_eq(bt_linkprobe_run(MPI_COMM_WORLD, NULL, rank == 0 ? links : NULL), BT_OK);
    cfg.bw_reps = rank == size - 1 ? -1 : 2;
    ck_assert_int_eq(bt_linkprobe_run(MPI_COMM_WORLD, &cfg, rank == 0 ? links : NULL),
                     BT_ERR_ARG);
}
END_TEST

/* The stage boundary's three ways of crossing (linkprobe.h), for every T
 * that divides the ranks: measured where there are 2 stages or more of 2
 * ranks or more (an uneven slice each: the bytes are not a multiple of T),
 * zero elsewhere, alike on every rank; the probe checks the bytes stage 1
 * ends with itself. A T that does not divide the ranks is refused by all. */
START_TEST(test_boundary_probe)
{
    const size_t bytes = 3 * 4096 + 1;
    for (int T = 1; T <= size; T++) {
        if (size % T != 0)
            continue;
        double sec[BT_BOUNDARY_N], lo[BT_BOUNDARY_N], hi[BT_BOUNDARY_N];
        ck_assert_int_eq(bt_linkprobe_boundary(MPI_COMM_WORLD, T, bytes, 3, sec), BT_OK);
        MPI_Allreduce(sec, lo, BT_BOUNDARY_N, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(sec, hi, BT_BOUNDARY_N, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        const bool measured = T >= 2 && size / T >= 2;
        int ok = 1;
        for (int i = 0; i < BT_BOUNDARY_N; i++)
            ok = ok && lo[i] == hi[i] && (measured ? sec[i] > 0 && sec[i] < 10 : sec[i] == 0);
        int pending = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, BT_TAG_PROBE, MPI_COMM_WORLD, &pending, MPI_STATUS_IGNORE);
        ck_assert_msg(all_ok(ok && !pending), "boundary probe at T = %d of %d ranks: %g %g %g s",
                      T, size, sec[0], sec[1], sec[2]);
    }
    double sec[BT_BOUNDARY_N];
    ck_assert_int_eq(bt_linkprobe_boundary(MPI_COMM_WORLD, size + 1, bytes, 3, sec),
                     BT_ERR_ARG);
}
END_TEST

/* Writes a synthetic model into dir as name (rank 0) and broadcasts its
 * path; every rank then computes the single-process reference. */
static int make_model(refmodel_t *r, const char *dir, const char *name, int n_embd,
                      int n_layer)
{
    int ok = 1;
    if (rank == 0) {
        bt_synth_shape_t s;
        ok = dir != NULL && bt_synth_shape("tiny", &s) == BT_OK;
        if (ok) {
            s.n_layer = n_layer;
            if (n_embd > 0) {
                s.n_embd = n_embd;
                s.n_head = 8;
                s.n_ff = 128;
            }
            snprintf(r->path, sizeof r->path, "%s/%s", dir, name);
            ok = bt_synth_write(r->path, &s, BT_TYPE_F32, 5) == BT_OK;
        }
    }
    MPI_Bcast(r->path, sizeof r->path, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (!all_ok(ok))
        return 0;
    if (!all_ok(make_reference(r))) {
        fprintf(stderr, "rank %d: could not compute the single-process reference of %s\n", rank,
                name);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    mpitest_init(&argc, &argv);

    for (int i = 0; i < N_PROMPT; i++)
        tokens[i] = (i * 53 + 7) % 256;
    /* rank 0 writes the models into a fresh folder all ranks can read */
    char *dir = rank == 0 ? tu_mkdtemp() : NULL;
    if (!make_model(&tiny, dir, "pipe.gguf", 0, N_LAYER) ||
        !make_model(&wide, dir, "wide.gguf", 512, N_LAYER_WIDE)) {
        MPI_Finalize();
        return 1;
    }

    for (int m = 0; m < N_FAMILIES; m++) {
        if (!tu_golden_locate(family_files[m], family[m].path, sizeof family[m].path) ||
            !all_ok(make_reference(&family[m]))) {
            fprintf(stderr, "rank %d: golden model %s missing or not loadable\n", rank,
                    family[m].path);
            MPI_Finalize();
            return 1;
        }
    }

    Suite *s = suite_create(size == 1 ? "pipeline (1 rank)" : "pipeline");
    TCase *tc = mpitest_tcase(s, "core", 300);
    tcase_add_test(tc, test_invariance);
    if (size > 1) {
        tcase_add_test(tc, test_tensor_parallel);
        tcase_add_test(tc, test_tensor_allreduce);
    }
    if (size <= 4) /* the golden models' layers */
        tcase_add_test(tc, test_families);
    if (size <= N_LAYER)
        tcase_add_test(tc, test_tensor_split);
    tcase_add_test(tc, test_invariance_rendezvous);
    tcase_add_test(tc, test_invariance_repeat);
    tcase_add_test(tc, test_traffic);
    tcase_add_test(tc, test_generate_stop);
    tcase_add_test(tc, test_link_probe);
    tcase_add_test(tc, test_boundary_probe);
    tc = mpitest_tcase(s, "errors", 120);
    tcase_add_test(tc, test_setup_errors);

    mpitest_run(s);
    free(tiny.rows);
    free(wide.rows);
    for (int m = 0; m < N_FAMILIES; m++)
        free(family[m].rows);
    if (rank == 0 && dir != NULL)
        tu_rmdir_all(dir);
    MPI_Finalize();
    return 0;
}
