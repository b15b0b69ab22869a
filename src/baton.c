/*
 * baton: llama inference as a pipeline over MPI ranks.
 *   mpirun -np S baton -m MODEL.gguf --tokens 1,2,3 -n 8 [-ub 512] [--pipeline 0|1]
 * Each rank owns a contiguous block of layers. Prints the greedy
 * continuation as token ids on stdout (rank 0): the token chosen from the
 * prompt's last position, then one per decode step (-n steps). Also runs
 * without mpirun as a single rank.
 */
#include <getopt.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "stages/partition.h"
#include "stages/schedule.h"

typedef struct options {
    const char *model;
    int *tokens;
    int n_tokens;
    int n_gen;
    int n_ctx;      /* 0: prompt + n_gen */
    int batch;
    int ubatch;
    int threads;
    int pipeline;
    double *ratios;
    int n_ratios;
    const char *dump_logits;
    const char *trace;
    int ref_kernels;
    int verbose;
    int help;
} options_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: [mpirun -np S] baton -m MODEL.gguf --tokens ID,ID,... [options]\n"
            "  -m, --model FILE        GGUF model (llama architecture)\n"
            "      --tokens LIST       prompt as comma-separated token ids\n"
            "  -n, --n-predict N       decode steps after the prompt (default 16); prints N+1 ids\n"
            "  -c, --ctx-size N        context length (default: prompt + N)\n"
            "  -b, --batch-size N      logical batch: prompt tokens per prefill call (default 2048)\n"
            "  -ub, --ubatch-size N    micro-batch: tokens per pipeline step (default 512)\n"
            "      --pipeline 0|1      1: GPipe prefill (default); 0: one micro-batch at a time\n"
            "  -ts, --tensor-split R,R layer proportions per rank (default: balance cost)\n"
            "  -t, --threads N         OpenMP threads per rank (default: cores)\n"
            "      --dump-logits FILE  raw little-endian f32 rows of n_vocab: one per prompt\n"
            "                          position, then one per decode step\n"
            "      --trace FILE.json   Chrome trace of every rank's micro-batches (Perfetto)\n"
            "      --ref-kernels       use the scalar reference kernels\n"
            "  -v, --verbose           more logging\n"
            "  -h, --help              this text\n");
}

enum { OPT_TOKENS = 256, OPT_DUMP, OPT_REF, OPT_UB, OPT_PIPELINE, OPT_TS, OPT_TRACE };

/* llama.cpp's two-letter single-dash flags, rewritten for getopt_long. */
static void normalize_argv(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-ub") == 0)
            argv[i] = "--ubatch-size";
        else if (strcmp(argv[i], "-ts") == 0)
            argv[i] = "--tensor-split";
    }
}

static bt_status_t parse_args(int argc, char **argv, options_t *o)
{
    static const struct option longopts[] = {
        {"model", required_argument, 0, 'm'},
        {"tokens", required_argument, 0, OPT_TOKENS},
        {"n-predict", required_argument, 0, 'n'},
        {"ctx-size", required_argument, 0, 'c'},
        {"ctx", required_argument, 0, 'c'},
        {"batch-size", required_argument, 0, 'b'},
        {"ubatch-size", required_argument, 0, OPT_UB},
        {"ubatch", required_argument, 0, OPT_UB},
        {"pipeline", required_argument, 0, OPT_PIPELINE},
        {"tensor-split", required_argument, 0, OPT_TS},
        {"threads", required_argument, 0, 't'},
        {"dump-logits", required_argument, 0, OPT_DUMP},
        {"trace", required_argument, 0, OPT_TRACE},
        {"ref-kernels", no_argument, 0, OPT_REF},
        {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    *o = (options_t){.n_gen = 16, .batch = 2048, .ubatch = 512, .pipeline = 1,
                     .threads = omp_get_num_procs()};
    normalize_argv(argc, argv);
    opterr = 0;
    int c;
    bt_status_t st = BT_OK;
    while (st == BT_OK && (c = getopt_long(argc, argv, ":m:n:c:b:t:vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case OPT_TOKENS:
            free(o->tokens);
            o->tokens = NULL;
            st = bt_parse_int_list("--tokens", optarg, 0, INT32_MAX, &o->tokens, &o->n_tokens);
            break;
        case 'n': st = bt_parse_int("-n", optarg, 0, 1 << 24, &o->n_gen); break;
        case 'c': st = bt_parse_int("--ctx-size", optarg, 1, 1 << 24, &o->n_ctx); break;
        case 'b': st = bt_parse_int("-b", optarg, 1, 1 << 24, &o->batch); break;
        case OPT_UB: st = bt_parse_int("-ub", optarg, 1, 1 << 20, &o->ubatch); break;
        case OPT_PIPELINE: st = bt_parse_int("--pipeline", optarg, 0, 1, &o->pipeline); break;
        case OPT_TS:
            free(o->ratios);
            o->ratios = NULL;
            st = bt_parse_ratios("-ts", optarg, &o->ratios, &o->n_ratios);
            break;
        case 't': st = bt_parse_int("--threads", optarg, 1, 1024, &o->threads); break;
        case OPT_DUMP: o->dump_logits = optarg; break;
        case OPT_TRACE: o->trace = optarg; break;
        case OPT_REF: o->ref_kernels = 1; break;
        case 'v': o->verbose = 1; break;
        case 'h': o->help = 1; return BT_OK;
        case ':':
            bt_log_error("option '%s' needs a value", argv[optind - 1]);
            st = BT_ERR_ARG;
            break;
        default:
            bt_log_error("unknown option '%s'", argv[optind - 1]);
            st = BT_ERR_ARG;
            break;
        }
    }
    if (st == BT_OK && optind < argc) {
        bt_log_error("unexpected argument '%s'", argv[optind]);
        st = BT_ERR_ARG;
    }
    if (st == BT_OK && o->model == NULL) {
        bt_log_error("no model given (-m FILE)");
        st = BT_ERR_ARG;
    }
    if (st == BT_OK && o->tokens == NULL) {
        bt_log_error("no prompt given (--tokens ID,ID,...)");
        st = BT_ERR_ARG;
    }
    if (st == BT_OK && o->ubatch > o->batch) {
        bt_log_error("-ub %d is larger than -b %d", o->ubatch, o->batch);
        st = BT_ERR_ARG;
    }
    if (st == BT_OK && o->n_ctx > 0 && o->n_ctx < o->n_tokens + o->n_gen) {
        bt_log_error("--ctx-size %d is smaller than the prompt (%d) plus -n (%d)", o->n_ctx,
                     o->n_tokens, o->n_gen);
        st = BT_ERR_ARG;
    }
    return st;
}

/* ---- the run ---- */

typedef struct dump {
    FILE *f;
    const char *path;
} dump_t;

typedef struct run_state {
    const options_t *o;
    bt_pipe_t pipe;
    dump_t dump;
    int32_t *ids;     /* [n_gen + 1] on rank 0 */
    double t_prompt, t_gen;
} run_state_t;

static bt_status_t write_rows(void *arg, const float *rows, int n_rows, int pos0)
{
    run_state_t *r = arg;
    (void)pos0;
    if (r->dump.f == NULL)
        return BT_OK;
    size_t n_vocab = (size_t)r->pipe.model->hp.n_vocab;
    if (fwrite(rows, sizeof(float) * n_vocab, (size_t)n_rows, r->dump.f) != (size_t)n_rows) {
        bt_log_error("--dump-logits: writing '%s' failed", r->dump.path);
        return BT_ERR_IO;
    }
    return BT_OK;
}

/* The prompt in logical batches of -b, each pipelined in micro-batches of
 * -ub; then -n decode steps round the ring. */
static bt_status_t generate(run_state_t *r)
{
    const options_t *o = r->o;
    bt_pipe_t *p = &r->pipe;
    const bt_pipe_mode_t mode = o->pipeline ? BT_PIPE_GPIPE : BT_PIPE_SYNC;
    bt_status_t st = BT_OK;
    bt_pipe_trace_start(p);
    double t0 = bt_now();
    for (int pos = 0; pos < o->n_tokens && st == BT_OK; pos += o->batch) {
        int n = o->n_tokens - pos < o->batch ? o->n_tokens - pos : o->batch;
        st = bt_pipe_prefill(p, o->tokens + pos, n, pos, o->ubatch < n ? o->ubatch : n, mode,
                             write_rows, r, &r->ids[0]);
    }
    double t1 = bt_now();
    for (int i = 0; i < o->n_gen && st == BT_OK; i++)
        st = bt_pipe_decode(p, r->ids[i], o->n_tokens + i, write_rows, r, &r->ids[i + 1]);
    r->t_prompt = t1 - t0;
    r->t_gen = bt_now() - t1;
    return st;
}

static int run(const options_t *o, MPI_Comm comm)
{
    run_state_t r = {.o = o, .dump.path = o->dump_logits};
    int n_ctx = o->n_ctx > 0 ? o->n_ctx : o->n_tokens + o->n_gen;
    int ubatch = o->ubatch < o->n_tokens ? o->ubatch : o->n_tokens;
    int n_mb = (o->n_tokens + ubatch - 1) / ubatch;
    bt_pipe_config_t cfg = {
        .model_path = o->model,
        .ratios = o->ratios,
        .n_ratios = o->n_ratios,
        .head_share = (double)(o->n_gen + 1) / (o->n_tokens + o->n_gen),
        .n_ctx = n_ctx,
        .max_tok = ubatch,
        .n_threads = o->threads,
        .ops = o->ref_kernels ? &bt_ops_ref : &bt_ops_cpu,
        .all_logits = o->dump_logits != NULL,
        .trace_events = o->trace || o->verbose ? 16 * (n_mb + o->n_gen) + 64 : 0,
    };
    bt_status_t st = bt_pipe_init(&r.pipe, comm, &cfg);
    if (st != BT_OK)
        return 1;
    bt_pipe_t *p = &r.pipe;
    if (p->rank == 0) {
        char split[1024];
        bt_partition_str(p->bounds, p->n_stages, split, sizeof split);
        bt_log_info("%d stage%s: %s", p->n_stages, p->n_stages > 1 ? "s" : "", split);
    }

    /* Checks every rank makes alike, so they fail together. */
    int n_vocab = p->model->hp.n_vocab;
    for (int i = 0; i < o->n_tokens && st == BT_OK; i++)
        if (o->tokens[i] >= n_vocab) {
            if (p->rank == 0)
                bt_log_error("--tokens: id %d at index %d is outside the vocabulary (0..%d)",
                             o->tokens[i], i, n_vocab - 1);
            st = BT_ERR_ARG;
        }
    /* The last stage writes the logits it computes. */
    if (st == BT_OK && p->last && o->dump_logits != NULL &&
        (r.dump.f = fopen(o->dump_logits, "wb")) == NULL) {
        bt_log_error("--dump-logits: cannot create '%s'", o->dump_logits);
        st = BT_ERR_IO;
    }
    if (st == BT_OK)
        r.ids = calloc((size_t)o->n_gen + 1, sizeof *r.ids);
    st = bt_transport_agree(comm, st != BT_OK ? st : r.ids ? BT_OK : BT_ERR_NOMEM);
    if (st != BT_OK)
        goto done;

    if ((st = generate(&r)) != BT_OK) {
        bt_log_error("generation failed (%s); stopping every rank", bt_status_str(st));
        MPI_Abort(comm, 1);
    }
    if (p->rank == 0) {
        for (int i = 0; i <= o->n_gen; i++)
            printf("%s%d", i ? " " : "", r.ids[i]);
        printf("\n");
        fflush(stdout);
        bt_log_info("prompt: %d tokens in %.3f s (%.1f t/s); decode: %d steps in %.3f s "
                    "(%.1f t/s); %d rank%s x %d threads, -ub %d, pipeline %d, %s kernels",
                    o->n_tokens, r.t_prompt, o->n_tokens / r.t_prompt, o->n_gen, r.t_gen,
                    r.t_gen > 0 ? o->n_gen / r.t_gen : 0.0, p->n_stages,
                    p->n_stages > 1 ? "s" : "", o->threads, ubatch, o->pipeline,
                    cfg.ops->name);
    }
    if (o->trace != NULL || o->verbose)
        st = bt_pipe_trace_report(p, o->trace, n_mb, true);
    bt_pipe_report_memory(p);
done:
    if (r.dump.f != NULL && fclose(r.dump.f) != 0) {
        bt_log_error("--dump-logits: closing '%s' failed", o->dump_logits);
        st = BT_ERR_IO;
    }
    st = bt_transport_agree(comm, st);
    free(r.ids);
    bt_pipe_free(p);
    return st == BT_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1)
        bt_log_set_rank(rank);
    options_t o;
    /* every rank parses the same command line; rank 0 reports */
    bt_log_capture(1);
    bt_status_t st = parse_args(argc, argv, &o);
    bt_log_flush_captured(rank == 0);
    bt_log_capture(0);
    int rc;
    if (st != BT_OK) {
        if (rank == 0)
            usage(stderr);
        rc = 2;
    } else if (o.help) {
        if (rank == 0)
            usage(stdout);
        rc = 0;
    } else {
        if (o.verbose)
            bt_log_set_level(BT_LOG_DEBUG);
        rc = run(&o, MPI_COMM_WORLD);
    }
    free(o.tokens);
    free(o.ratios);
    MPI_Finalize();
    return rc;
}
