/*
 * baton-bench: prompt processing (ppN) and token generation (tgN)
 * throughput of the pipeline, llama-bench style.
 *   mpirun -np 2 baton-bench -m model.gguf -p 512 -n 128 --pipeline 0,1 --hdf5 results.h5
 * Every combination of the list flags is one test. A test runs once
 * unmeasured (warm-up), then -r times measured on rank 0: ppN from an empty
 * KV cache until the last stage has the last position's logits (the token
 * it returns round the ring marks that); tgN as N single-token decode
 * steps from an empty cache; pgN,M both. Token ids are random from a fixed
 * seed; no tokenization or sampling is timed. With -npl P above 1, P
 * sequences run the test at once through the many-sequence engine
 * (bench/parallel.h); P = 1 keeps the path above. -sm tensor runs all
 * ranks as one stage of tensor ranks, -sm layer -tp T stages of T; a
 * tensor test with --pipeline 1 is skipped with a note (one stage has
 * nothing to pipeline). `baton-bench --kernels` instead times the matmul
 * kernels alone, on one rank (bench/kernels.h).
 */
#include "config.h"

#include "build_commit.h"

#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "kernels.h"
#include "parallel.h"
#include "params.h"
#include "profile.h"
#include "report.h"
#include "results_h5.h"
#include "rng.h"
#include "stages/linkprobe.h"
#include "stages/partition.h"
#include "stages/schedule.h"


typedef struct bench {
    const bt_bench_params_t *params;
    MPI_Comm comm;
    int rank, size;
    bt_run_info_t run;
    char (*rank_hosts)[64];   /* [size] */
    const char **host_ptrs;   /* [size] into rank_hosts */
    bt_run_link_t *links;     /* [size - 1] on rank 0: link s -> s+1 */
    int64_t run_id;
} bench_t;

/* ---- provenance ---- */

static void iso_now(char *buf, size_t n)
{
    time_t t = time(NULL);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
}

static void cpu_model(char *buf, size_t n)
{
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL)
        return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *v = strchr(line, ':');
            if (v != NULL) {
                v += 1 + (v[1] == ' ');
                v[strcspn(v, "\n")] = '\0';
                snprintf(buf, n, "%s", v);
            }
            break;
        }
    fclose(f);
}

static void join_args(int argc, char **argv, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < argc && used + 1 < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? " " : "", argv[i]);
}

/* Every rank's host name to every rank; the run info on rank 0. */
static bt_status_t gather_provenance(bench_t *b, int argc, char **argv)
{
    char name[MPI_MAX_PROCESSOR_NAME] = "";
    int len;
    MPI_Get_processor_name(name, &len);
    char mine[64];
    snprintf(mine, sizeof mine, "%s", name);
    b->rank_hosts = calloc((size_t)b->size, sizeof *b->rank_hosts);
    b->host_ptrs = calloc((size_t)b->size, sizeof *b->host_ptrs);
    bt_status_t st = BT_OK;
    if (b->rank_hosts == NULL || b->host_ptrs == NULL) {
        bt_log_error("cannot allocate the host names of %d ranks", b->size);
        st = BT_ERR_NOMEM;
    }
    if ((st = bt_transport_agree(b->comm, st))) /* before the collective below */
        return st;
    MPI_Allgather(mine, 64, MPI_CHAR, b->rank_hosts, 64, MPI_CHAR, b->comm);
    bt_run_info_t *r = &b->run;
    size_t used = 0;
    for (int i = 0; i < b->size; i++) {
        b->host_ptrs[i] = b->rank_hosts[i];
        if (used < sizeof r->hosts)
            used += (size_t)snprintf(r->hosts + used, sizeof r->hosts - used, "%s%s",
                                     i ? "," : "", b->rank_hosts[i]);
    }
    iso_now(r->start_time, sizeof r->start_time);
    join_args(argc, argv, r->command_line, sizeof r->command_line);
    snprintf(r->build_commit, sizeof r->build_commit, "%s", BT_BUILD_COMMIT);
    snprintf(r->configure_args, sizeof r->configure_args, "%s", BT_CONFIGURE_ARGS);
    int vlen;
    MPI_Get_library_version(r->mpi_version, &vlen);
    r->mpi_version[strcspn(r->mpi_version, "\n,")] = '\0';
    cpu_model(r->cpu_info, sizeof r->cpu_info);
    const char *job = getenv("SLURM_JOB_ID");
    snprintf(r->slurm_job_id, sizeof r->slurm_job_id, "%s", job ? job : "");
    r->n_ranks = b->size;
    return BT_OK;
}

/* Measures every link s -> s+1 once (stages/linkprobe.h); rank 0 keeps
 * them for /links and prints them with -v. */
static bt_status_t probe_links(bench_t *b)
{
    bt_link_t *raw = NULL;
    bt_status_t st = BT_OK;
    if (b->rank == 0 && b->size > 1) {
        raw = calloc((size_t)b->size - 1, sizeof *raw);
        b->links = calloc((size_t)b->size - 1, sizeof *b->links);
        if (raw == NULL || b->links == NULL) {
            bt_log_error("cannot allocate %d link records", b->size - 1);
            st = BT_ERR_NOMEM;
        }
    }
    if ((st = bt_transport_agree(b->comm, st)) == BT_OK)
        st = bt_linkprobe_run(b->comm, NULL, raw);
    for (int i = 0; st == BT_OK && b->rank == 0 && i < b->size - 1; i++) {
        const bt_link_t *l = &raw[i];
        bt_run_link_t *o = &b->links[i];
        *o = (bt_run_link_t){
            .from_rank = l->from,
            .to_rank = l->to,
            .latency_us = l->latency_s * 1e6,
            .bandwidth_MBps = l->bandwidth * 1e-6,
            .lat_bytes = (int64_t)l->lat_bytes,
            .bw_bytes = (int64_t)l->bw_bytes,
            .lat_round_trips = l->lat_reps,
            .bw_round_trips = l->bw_reps,
        };
        snprintf(o->from_host, sizeof o->from_host, "%s", b->rank_hosts[l->from]);
        snprintf(o->to_host, sizeof o->to_host, "%s", b->rank_hosts[l->to]);
        if (b->params->verbose)
            bt_log_info("link %d -> %d (%s -> %s): latency %.1f us, bandwidth %.1f MB/s "
                        "(median of %d round trips of %lld B and %d of %lld B)",
                        o->from_rank, o->to_rank, o->from_host, o->to_host, o->latency_us,
                        o->bandwidth_MBps, o->lat_round_trips, (long long)o->lat_bytes,
                        o->bw_round_trips, (long long)o->bw_bytes);
    }
    free(raw);
    return st;
}

/* -v on a hybrid layout (tp tensor ranks, 2 stages or more): the stage
 * boundary's ways of crossing (stages/linkprobe.h) for one row and for a
 * micro-batch of max_tok rows of n_embd floats, printed by rank 0. */
static bt_status_t probe_boundary(const bench_t *b, int tp, int n_embd, int max_tok)
{
    const int rows[2] = {1, max_tok};
    for (int i = 0; i < 2 && (i == 0 || max_tok > 1); i++) {
        const size_t bytes = (size_t)rows[i] * (size_t)n_embd * sizeof(float);
        double sec[BT_BOUNDARY_N];
        bt_status_t st = bt_linkprobe_boundary(b->comm, tp, bytes, 5, sec);
        if (st != BT_OK)
            return st;
        if (b->rank == 0)
            bt_log_info("stage boundary, %d stages x %d tensor ranks, %d rows (%zu B): "
                        "%s %.1f us, %s %.1f us, %s %.1f us (median of 5)",
                        b->size / tp, tp, rows[i], bytes, bt_boundary_names[0], sec[0] * 1e6,
                        bt_boundary_names[1], sec[1] * 1e6, bt_boundary_names[2],
                        sec[2] * 1e6);
    }
    return BT_OK;
}

/* ---- one test ---- */

/* Prompt in logical batches of -b, each in micro-batches of -ub. */
static bt_status_t run_prompt(bt_pipe_t *p, const bt_bench_test_t *t, const int32_t *tokens,
                              int n)
{
    bt_status_t st = BT_OK;
    const bt_pipe_mode_t mode = t->pipeline ? BT_PIPE_GPIPE : BT_PIPE_SYNC;
    for (int pos = 0; pos < n && st == BT_OK; pos += t->batch) {
        int nb = n - pos < t->batch ? n - pos : t->batch;
        int32_t next;
        st = bt_pipe_prefill(p, tokens + pos, nb, pos, t->ubatch < nb ? t->ubatch : nb, mode,
                             NULL, NULL, &next);
    }
    return st;
}

/* n_gen decode steps at positions pos0.., feeding random ids. */
static bt_status_t run_gen(bt_pipe_t *p, const int32_t *ids, int n_gen, int pos0)
{
    bt_status_t st = BT_OK;
    for (int i = 0; i < n_gen && st == BT_OK; i++) {
        int32_t next;
        st = bt_pipe_decode(p, ids[i], pos0 + i, NULL, NULL, &next);
    }
    return st;
}

static bt_status_t run_once(bt_pipe_t *p, const bt_bench_test_t *t, const int32_t *tokens,
                            const int32_t *gen_ids, int n_gen)
{
    bt_status_t st = BT_OK;
    if (t->n_prompt > 0)
        st = run_prompt(p, t, tokens, t->n_prompt);
    if (st == BT_OK && n_gen > 0)
        st = run_gen(p, gen_ids, n_gen, t->n_prompt);
    return st;
}

/* One run of the test (warmup: the prompt and at most one decode step):
 * P = 1 through prefill and decode as always, P > 1 through the engine,
 * with one micro-batch in flight for --pipeline 0. *n_mb (rank 0) gets the
 * micro-batches of a P > 1 run and is left alone otherwise. */
static bt_status_t run_rep(const bench_t *b, bt_pipe_t *p, const bt_bench_test_t *t,
                           const int32_t *ids, bool warmup, int *n_mb)
{
    if (t->parallel > 1)
        return bt_parallel_run(p, t, ids, b->params->groups, warmup, n_mb);
    int n_gen = warmup ? (t->n_gen > 0 ? 1 : 0) : t->n_gen;
    return run_once(p, t, ids, ids + t->n_prompt, n_gen);
}

/* Largest micro-batch of the test. */
static int test_max_tok(const bt_bench_test_t *t)
{
    if (t->parallel > 1)
        return bt_parallel_ubatch(t);
    return t->n_prompt > 0 ? (t->ubatch < t->n_prompt ? t->ubatch : t->n_prompt) : 1;
}

/* Token ids the test feeds: the prompt and decode inputs of one sequence,
 * or P prompts. */
static int64_t test_n_ids(const bt_bench_test_t *t)
{
    int64_t one = (int64_t)t->n_prompt + t->n_gen;
    int64_t all = (int64_t)t->parallel * bt_parallel_prompt_len(t);
    return t->parallel > 1 && all > one ? all : one;
}

static void fill_row_model(bt_bench_row_t *row, const bt_pipe_t *p, const char *path)
{
    bt_model_file_stats(p->model, &row->model_size, &row->model_n_params);
    double np = (double)row->model_n_params;
    char size[16];
    if (np < 1e7)
        snprintf(size, sizeof size, "%.1fM", np / 1e6);
    else if (np < 1e9)
        snprintf(size, sizeof size, "%.0fM", np / 1e6);
    else
        snprintf(size, sizeof size, "%.1fB", np / 1e9);
    /* llama-bench's "model" column: architecture, size, file type */
    snprintf(row->model_type, sizeof row->model_type, "%s %s %s", p->model->hp.arch->name, size,
             bt_ftype_name(p->model->file_type));
    snprintf(row->model_filename, sizeof row->model_filename, "%s", path);
    bt_partition_split_str(p->bounds, p->n_stages, row->layer_split, sizeof row->layer_split);
}

/* Tensor ranks per stage of test t on n_ranks ranks: all of them for -sm
 * tensor, -tp for -sm layer (bt_bench_params_check_ranks checked it
 * divides n_ranks). */
static int test_tp(const bt_bench_test_t *t, int n_ranks)
{
    return t->split_mode == BT_SPLIT_MODE_TENSOR ? n_ranks : t->tp;
}

/* Runs one test on every rank; rank 0 fills row (samples and stages are
 * allocated here and freed by the caller). */
static bt_status_t run_test(bench_t *b, const bt_bench_test_t *t, int index, bt_bench_row_t *row)
{
    const bt_bench_params_t *prm = b->params;
    const int reps = prm->reps;
    const int n_tok = t->n_prompt + t->n_gen; /* per sequence */
    const int max_tok = test_max_tok(t);
    const int seq_ub = t->n_prompt > 0 ? (t->ubatch < t->n_prompt ? t->ubatch : t->n_prompt) : 1;
    int n_mb = t->n_prompt > 0 ? (t->n_prompt + seq_ub - 1) / seq_ub : 0;
    /* the trace holds every repetition's events (stage times come from it):
     * at most P x (prompt micro-batches + steps) micro-batches each */
    const int64_t n_steps = (int64_t)t->parallel * ((int64_t)n_mb + t->n_gen);
    const int64_t events = (int64_t)reps * 8 * n_steps + 64;
    if (events > INT_MAX) { /* every rank computes alike; rank 0 reports */
        if (b->rank == 0)
            bt_log_error("test %s: -r %d x %lld micro-batches and steps would record %lld "
                         "trace events, more than %d: lower -r, -p, -n or -npl", row->test,
                         reps, (long long)n_steps, (long long)events, INT_MAX);
        return BT_ERR_ARG;
    }
    if (test_n_ids(t) > INT_MAX) {
        if (b->rank == 0)
            bt_log_error("test %s: -npl %d prompts of %d tokens are %lld token ids, more than "
                         "%d: lower -p or -npl", row->test, t->parallel,
                         bt_parallel_prompt_len(t), (long long)test_n_ids(t), INT_MAX);
        return BT_ERR_ARG;
    }
    const int n_ids = (int)test_n_ids(t);
    bt_pipe_config_t cfg = {
        .model_path = t->model,
        .ratios = t->split->n ? t->split->ratios : NULL,
        .n_ratios = t->split->n,
        .head_share = (double)(t->n_gen + 1) / n_tok,
        .n_ctx = n_tok, /* per sequence slot */
        .n_slots = t->parallel,
        .max_tok = max_tok,
        .n_threads = t->threads,
        .ops = prm->ops,
        .gpu = prm->gpu,
        .gpu_given = prm->gpu_given,
        .kv_type = (uint32_t)prm->kv_type,
        .no_mmap = !prm->mmap,
        .no_sampling = true,
        .trace_events = (int)events,
        .tp = test_tp(t, b->size),
        .tp_allreduce = t->tp_comm,
    };
    bt_pipe_t p;
    bt_status_t st = bt_pipe_init(&p, b->comm, &cfg);
    if (st != BT_OK)
        return st;
    double g_lat = 0, g_bw = 0; /* tensor ranks: their gathers, for baton-plan --compare */
    if ((st = bt_pipe_probe_gathers(&p, &g_lat, &g_bw)) != BT_OK) { /* agreed by all */
        bt_pipe_free(&p);
        return st;
    }
    const int tp = test_tp(t, b->size);
    if (prm->verbose && tp > 1 && b->size / tp > 1 &&
        (st = probe_boundary(b, tp, p.model->hp.n_embd, max_tok)) != BT_OK) { /* agreed */
        bt_pipe_free(&p);
        return st;
    }
    if (p.device >= 0) /* rank 0's device (stages may mix GPUs and CPUs) */
        snprintf(row->backend, sizeof row->backend, "CUDA %s", bt_device_default->name());
    row->gather_latency_us = g_lat * 1e6;
    row->gather_bandwidth_MBps = g_bw / 1e6;

    /* random token ids from a fixed seed (rank 0 feeds them) */
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n_ids > 0 ? n_ids : 1));
    double *ns = calloc((size_t)reps, sizeof(double));
    if (ids == NULL || ns == NULL) {
        bt_log_error("test %s: cannot allocate %d token ids and %d samples", row->test, n_ids,
                      reps);
        st = BT_ERR_NOMEM;
    }
    /* collective: a rank that failed alone would leave the others waiting
     * in the pipeline */
    if ((st = bt_transport_agree(b->comm, st)))
        goto done;
    bt_rng_t rng;
    bt_rng_seed(&rng, (uint64_t)index);
    for (int i = 0; i < n_ids; i++)
        ids[i] = (int32_t)(bt_rng_next(&rng) % (uint64_t)p.model->hp.n_vocab);

    iso_now(row->test_time, sizeof row->test_time);
    if (prm->warmup) /* like llama-bench: the prompt once and one decode step */
        st = run_rep(b, &p, t, ids, true, &n_mb);
    bt_pipe_trace_start(&p);
    const bt_expert_count_t before = p.fwd->counted;
    if (prm->verbose && b->rank == 0 && st == BT_OK) /* progress: the measured part begins */
        bt_log_info("test %d (%s, -ub %d, -sm %s, -tp %d, --tp-comm %s, pipeline %d, -npl %d): "
                    "%d repetitions", index, row->test, t->ubatch, row->split_mode, row->tp,
                    row->tp_comm, t->pipeline, t->parallel, reps);
    for (int r = 0; r < reps && st == BT_OK; r++) {
        MPI_Barrier(b->comm);
        double t0 = bt_now();
        st = run_rep(b, &p, t, ids, false, &n_mb);
        ns[r] = (bt_now() - t0) * 1e9;
    }
    if (st != BT_OK) {
        bt_log_error("test %s failed (%s); stopping every rank", row->test, bt_status_str(st));
        MPI_Abort(b->comm, 1);
    }

    /* the experts the measured micro-batches chose, a call (the ranks' sums:
     * a stage's tensor ranks count alike, so the means stay one rank's) */
    const bt_expert_count_t *now = &p.fwd->counted;
    double ex[4] = {(double)(now->calls - before.calls), (double)(now->rows - before.rows),
                    (double)(now->experts - before.experts),
                    (double)(now->busiest - before.busiest)}, ex_all[4];
    MPI_Reduce(ex, ex_all, 4, MPI_DOUBLE, MPI_SUM, 0, b->comm);
    if (b->rank == 0 && ex_all[0] > 0) {
        row->expert_rows = ex_all[1] / ex_all[0];
        row->expert_count = ex_all[2] / ex_all[0];
        if (prm->verbose)
            bt_log_info("experts: %.2f distinct a call of %.2f rows; the busiest tensor rank "
                        "holds %.2f of them", row->expert_count, row->expert_rows,
                        ex_all[3] / ex_all[0]);
    }
    double times[5];
    bt_pipe_stage_times(&p, times);
    double *all_times = b->rank == 0 ? malloc(sizeof times * (size_t)b->size) : NULL;
    MPI_Gather(times, 5, MPI_DOUBLE, all_times, 5, MPI_DOUBLE, 0, b->comm);
    if (prm->trace_dir != NULL) {
        char path[1024];
        /* P = 1, -sm layer -tp 1 and gathers keep the names of before */
        char npl[24] = "", layout[32] = "";
        if (t->parallel > 1)
            snprintf(npl, sizeof npl, "-npl%d", t->parallel);
        if (t->split_mode == BT_SPLIT_MODE_TENSOR)
            snprintf(layout, sizeof layout, "-tensor");
        else if (row->tp > 1)
            snprintf(layout, sizeof layout, "-tp%d", row->tp);
        if (t->tp_comm)
            snprintf(layout + strlen(layout), sizeof layout - strlen(layout), "-allreduce");
        snprintf(path, sizeof path, "%s/test-%03d-%s-pipeline%d-ub%d%s%s.json", prm->trace_dir,
                 index, row->test, t->pipeline, t->ubatch, layout, npl);
        st = bt_pipe_trace_report(&p, path, n_mb, prm->verbose);
    } else if (prm->verbose) {
        st = bt_pipe_trace_report(&p, NULL, n_mb, true);
    }
    if (b->rank == 0) {
        fill_row_model(row, &p, t->model);
        row->reps = reps;
        row->samples_ns = ns;
        row->samples_ts = malloc(sizeof(double) * (size_t)reps);
        row->stages = malloc(sizeof(bt_stage_time_t) * (size_t)b->size);
        for (int r = 0; r < reps && row->samples_ts; r++)
            row->samples_ts[r] = (double)t->parallel * n_tok / (ns[r] * 1e-9);
        for (int i = 0; i < b->size && row->stages; i++)
            row->stages[i] = (bt_stage_time_t){all_times[5 * i], all_times[5 * i + 1],
                                               all_times[5 * i + 2], all_times[5 * i + 3],
                                               all_times[5 * i + 4]};
        if (row->samples_ts == NULL || row->stages == NULL)
            st = BT_ERR_NOMEM;
        else
            bt_bench_row_finish(row);
        ns = NULL; /* owned by the row */
        if (prm->verbose)
            for (int r = 0; r < reps; r++)
                bt_log_info("%s rep %d: %.3f ms, %.2f t/s", row->test, r,
                            row->samples_ns[r] * 1e-6, row->samples_ts[r]);
    }
    free(all_times);
done:
    free(ns);
    free(ids);
    bt_pipe_free(&p);
    return bt_transport_agree(b->comm, st);
}

static void row_init(bt_bench_row_t *row, const bench_t *b, const bt_bench_test_t *t)
{
    *row = (bt_bench_row_t){
        .n_batch = t->batch,
        .n_ubatch = t->ubatch,
        .n_threads = t->threads,
        .n_prompt = t->n_prompt,
        .n_gen = t->n_gen,
        .n_ranks = b->size,
        .pipeline = t->pipeline,
        .tp = test_tp(t, b->size),
        .n_parallel = t->parallel,
    };
    bt_bench_test_name(t, row->test, sizeof row->test);
    snprintf(row->split_mode, sizeof row->split_mode, "%s", bt_split_mode_name(t->split_mode));
    snprintf(row->tp_comm, sizeof row->tp_comm, "%s", bt_tp_comm_name(t->tp_comm));
    snprintf(row->build_commit, sizeof row->build_commit, "%s", b->run.build_commit);
    snprintf(row->cpu_info, sizeof row->cpu_info, "%s", b->run.cpu_info);
    /* CPU and the kernels' instruction set (the scalar reference: "ref";
     * the kernel set, --ops, is in the command line) */
    snprintf(row->backend, sizeof row->backend, "CPU %s",
             b->params->ops == &bt_ops_ref ? "ref" : bt_isa_name(bt_isa_active()));
    snprintf(row->hosts, sizeof row->hosts, "%s", b->run.hosts);
    size_t used = 0;
    for (int i = 0; i < t->split->n && used < sizeof row->tensor_split; i++)
        used += (size_t)snprintf(row->tensor_split + used, sizeof row->tensor_split - used,
                                 "%s%g", i ? "/" : "", t->split->ratios[i]);
}

static void row_free(bt_bench_row_t *row)
{
    free(row->samples_ns);
    free(row->samples_ts);
    free(row->stages);
}

/* ---- main ---- */

static bt_status_t prepare_outputs(bench_t *b)
{
    const bt_bench_params_t *prm = b->params;
    bt_status_t st = BT_OK;
    if (b->rank == 0 && prm->trace_dir != NULL && mkdir(prm->trace_dir, 0777) != 0 &&
        errno != EEXIST) {
        bt_log_error("--trace-dir: cannot create '%s': %s", prm->trace_dir, strerror(errno));
        st = BT_ERR_IO;
    }
    if (b->rank == 0 && st == BT_OK && prm->hdf5 != NULL)
        st = bt_h5_begin_run(prm->hdf5, &b->run, b->links, b->size - 1, &b->run_id);
    return bt_transport_agree(b->comm, st);
}

/* Why a test is not run on n_ranks ranks, or NULL: -sm tensor with
 * --pipeline 1 (the ranks form one stage, which has no pipeline to fill;
 * --pipeline not given makes such tests pipeline 0 instead,
 * bt_bench_tests), or --tp-comm allreduce where -sm tensor has one rank
 * (nothing to add: the gather test is the same run). */
static const char *test_skipped(const bt_bench_test_t *t, int n_ranks)
{
    if (t->split_mode == BT_SPLIT_MODE_TENSOR && t->pipeline == 1)
        return "-sm tensor with --pipeline 1 (one stage has nothing to pipeline)";
    if (t->tp_comm && test_tp(t, n_ranks) <= 1)
        return "--tp-comm allreduce with one tensor rank (nothing to add)";
    return NULL;
}

/* Whether a and b differ only in the test itself (ppN, tgN, pgN,M). */
static bool same_config(const bt_bench_test_t *a, const bt_bench_test_t *b)
{
    return a->model == b->model && a->split == b->split && a->threads == b->threads &&
           a->batch == b->batch && a->ubatch == b->ubatch && a->split_mode == b->split_mode &&
           a->tp == b->tp && a->tp_comm == b->tp_comm && a->pipeline == b->pipeline &&
           a->parallel == b->parallel;
}

/* Rank 0: one line for the skipped tests tests[i..] of one configuration,
 * naming them; returns how many there are. */
static int note_skipped(const bench_t *b, const bt_bench_test_t *tests, int n_tests, int i)
{
    const bt_bench_test_t *t = &tests[i];
    const char *why = test_skipped(t, b->size);
    char names[256] = "";
    size_t used = 0;
    int n = 0;
    for (; i + n < n_tests && test_skipped(&tests[i + n], b->size) == why &&
           same_config(t, &tests[i + n]);
         n++) {
        char name[48];
        bt_bench_test_name(&tests[i + n], name, sizeof name);
        if (used < sizeof names)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", n ? ", " : "",
                                     name);
    }
    if (b->rank == 0)
        bt_log_info("skipped: %s (-ub %d, -npl %d): %s", names, t->ubatch, t->parallel, why);
    return n;
}

static int run_all(bench_t *b)
{
    const bt_bench_params_t *prm = b->params;
    bt_bench_test_t *tests;
    int n_tests;
    bt_status_t st = bt_bench_tests(prm, &tests, &n_tests);
    if (st != BT_OK)
        return 1;
    if (b->rank == 0)
        bt_report_begin(stdout, prm->output);
    int n_rows = 0; /* printed: json separates rows by commas */
    for (int i = 0; i < n_tests && st == BT_OK; i++) {
        if (test_skipped(&tests[i], b->size) != NULL) {
            i += note_skipped(b, tests, n_tests, i) - 1;
            continue;
        }
        if (n_rows > 0 && prm->delay > 0)
            usleep((useconds_t)(prm->delay * 1e6));
        bt_bench_row_t row;
        row_init(&row, b, &tests[i]);
        st = run_test(b, &tests[i], i, &row);
        if (st == BT_OK && b->rank == 0) {
            bt_report_row(stdout, prm->output, &row, n_rows++);
            if (prm->hdf5 != NULL)
                st = bt_h5_append(prm->hdf5, b->run_id, &row, b->host_ptrs);
            if (prm->hdf5 != NULL && st == BT_OK && prm->verbose) /* the file is closed */
                bt_log_info("test %d (%s): row written to %s", i, row.test, prm->hdf5);
        }
        st = bt_transport_agree(b->comm, st);
        row_free(&row);
    }
    if (b->rank == 0)
        bt_report_end(stdout, prm->output);
    free(tests);
    return st == BT_OK ? 0 : 1;
}

/* --profile: each model's costs at the first -t and the largest -ub,
 * printed and (with --hdf5) appended to /profile under this run. */
static int run_profile(bench_t *b)
{
    const bt_bench_params_t *prm = b->params;
    int ub = 1;
    for (int i = 0; i < prm->ubatch.n; i++)
        ub = prm->ubatch.v[i] > ub ? prm->ubatch.v[i] : ub;
    bt_status_t st = BT_OK;
    for (int i = 0; i < prm->n_models && st == BT_OK; i++) {
        const bt_profile_params_t pp = {prm->models[i], prm->ops, prm->threads.v[0], ub,
                                        (uint32_t)prm->kv_type, prm->profile_ctx.v,
                                        prm->profile_ctx.n};
        bt_profile_row_t *rows;
        int n;
        if ((st = bt_bench_profile(&pp, &rows, &n)) != BT_OK)
            break;
        printf("profile of %s, %d threads:\n", prm->models[i], pp.threads);
        bt_profile_print(stdout, rows, n);
        for (int k = 0; k < n; k++)
            rows[k].run_id = b->run_id;
        if (prm->hdf5 != NULL)
            st = bt_h5_append_profile(prm->hdf5, rows, n);
        free(rows);
    }
    return st == BT_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    bench_t b = {.comm = MPI_COMM_WORLD};
    MPI_Comm_rank(b.comm, &b.rank);
    MPI_Comm_size(b.comm, &b.size);
    if (b.size > 1)
        bt_log_set_rank(b.rank);
    bt_bench_params_t prm;
    bt_log_capture(1); /* every rank parses alike; rank 0 reports */
    bt_status_t st = bt_bench_params_parse(argc, argv, bt_default_threads(b.comm), &prm);
    /* the layouts against the rank count, before anything runs */
    bt_status_t layout = st == BT_OK && !prm.help && !prm.kernels && !prm.profile
                             ? bt_bench_params_check_ranks(&prm, b.size)
                             : BT_OK;
    bt_log_flush_captured(b.rank == 0);
    bt_log_capture(0);
    b.params = &prm;
    int rc;
    if (st != BT_OK) {
        if (b.rank == 0)
            bt_bench_usage(stderr);
        rc = 2;
    } else if (layout != BT_OK) {
        rc = 2;
    } else if (prm.help) {
        if (b.rank == 0)
            bt_bench_usage(stdout);
        rc = 0;
    } else if (prm.kernels) { /* one process on every core: no pipeline, no other rank */
        if (b.size > 1 && b.rank == 0)
            bt_log_error("--kernels times one process; run it with one rank, not %d", b.size);
        st = b.size > 1 ? BT_ERR_ARG : bt_bench_kernels(&prm, stdout);
        rc = st == BT_OK ? 0 : st == BT_ERR_ARG ? 2 : 1;
    } else if (prm.profile && b.size > 1) {
        if (b.rank == 0)
            bt_log_error("--profile measures one rank; run it with one rank, not %d", b.size);
        rc = 2;
    } else if (gather_provenance(&b, argc, argv) != BT_OK || probe_links(&b) != BT_OK ||
               prepare_outputs(&b) != BT_OK) {
        rc = 1;
    } else if (prm.profile) {
        rc = run_profile(&b);
    } else {
        rc = run_all(&b);
    }
    free(b.rank_hosts);
    free(b.host_ptrs);
    free(b.links);
    bt_bench_params_free(&prm);
    MPI_Finalize();
    return rc;
}
