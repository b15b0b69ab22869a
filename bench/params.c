/* params.c: baton-bench flags, lists and ranges, the cartesian product. */
#include "params.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "kv_cache.h"
#include "model.h"
#include "runopts.h"

/* ---- lists ---- */

/* -p, -n, -b, -ub, -t, --pipeline, -npl, -tp, -sm, --tp-comm (bt_bench_params_t's
 * int lists; -sm holds bt_split_mode_t values, --tp-comm bt_parse_tp_comm's) */
enum { BT_N_LISTS = 10, BT_LIST_PIPELINE = 5, BT_LIST_SPLIT_MODE = 8, BT_LIST_TP_COMM = 9 };

const char *bt_split_mode_name(int mode)
{
    return mode == BT_SPLIT_MODE_TENSOR ? "tensor" : "layer";
}

static bt_status_t parse_num(const char *flag, const char *item, const char *s, long min,
                             long max, long *out, const char **end)
{
    char *e;
    errno = 0;
    long v = strtol(s, &e, 10);
    if (e == s || errno == ERANGE) {
        bt_log_error("%s: '%s' is not an integer or range", flag, item);
        return BT_ERR_ARG;
    }
    if (v < min || v > max) {
        bt_log_error("%s: %ld is out of range (%ld..%ld)", flag, v, min, max);
        return BT_ERR_ARG;
    }
    *out = v;
    *end = e;
    return BT_OK;
}

static bt_status_t push(bt_int_list_t *l, int *cap, long v)
{
    if (l->n == *cap) {
        *cap = *cap ? 2 * *cap : 8;
        int *nv = realloc(l->v, sizeof(int) * (size_t)*cap);
        if (nv == NULL)
            return BT_ERR_NOMEM;
        l->v = nv;
    }
    l->v[l->n++] = (int)v;
    return BT_OK;
}

/* One item: "N", "A-B", "A-B+S" or "A-B*M". */
static bt_status_t parse_item(const char *flag, const char *item, long min, long max,
                              bt_int_list_t *l, int *cap)
{
    const char *p;
    long first, last, step = 1;
    char op = '+';
    bt_status_t st = parse_num(flag, item, item, min, max, &first, &p);
    if (st != BT_OK)
        return st;
    if (*p == '\0')
        return push(l, cap, first);
    if (*p != '-' || (st = parse_num(flag, item, p + 1, min, max, &last, &p)))
        return st ? st : (bt_log_error("%s: '%s' is not an integer or range", flag, item),
                          BT_ERR_ARG);
    if (*p == '+' || *p == '*') {
        op = *p;
        if ((st = parse_num(flag, item, p + 1, 1, 1L << 30, &step, &p)))
            return st;
    }
    if (*p != '\0' || last < first || (op == '*' && (step < 2 || first < 1))) {
        bt_log_error("%s: '%s' is not a valid range (first-last[+step|*mult], first <= last%s)",
                     flag, item, op == '*' ? ", mult >= 2, first >= 1" : "");
        return BT_ERR_ARG;
    }
    for (long v = first; v <= last; v = op == '+' ? v + step : v * step)
        if ((st = push(l, cap, v)))
            return st;
    return BT_OK;
}

/* A name of a list of names (-sm, --tp-comm) to its value, as args.h's
 * parsers take it: one message and BT_ERR_ARG for a name it does not know. */
typedef bt_status_t (*name_fn)(const char *flag, const char *s, int *out);

/* The comma-separated items of s into *out (replaced only on success):
 * names through name, or where name is NULL numbers and ranges in
 * min..max (parse_item). */
static bt_status_t parse_items(const char *flag, const char *s, name_fn name, long min, long max,
                               bt_int_list_t *out)
{
    if (*s == '\0' || *s == ',' || s[strlen(s) - 1] == ',' || strstr(s, ",,") != NULL) {
        bt_log_error("%s: '%s' has an empty item", flag, s);
        return BT_ERR_ARG;
    }
    char *copy = strdup(s), *save = NULL;
    if (copy == NULL)
        return BT_ERR_NOMEM;
    bt_int_list_t l = {0};
    int cap = 0;
    bt_status_t st = BT_OK;
    for (char *item = strtok_r(copy, ",", &save); item && st == BT_OK;
         item = strtok_r(NULL, ",", &save)) {
        int v;
        if (name == NULL)
            st = parse_item(flag, item, min, max, &l, &cap);
        else if ((st = name(flag, item, &v)) == BT_OK)
            st = push(&l, &cap, v);
    }
    free(copy);
    if (st != BT_OK) {
        free(l.v);
        return st;
    }
    bt_int_list_free(out);
    *out = l;
    return BT_OK;
}

bt_status_t bt_parse_list(const char *flag, const char *s, long min, long max,
                          bt_int_list_t *out)
{
    return parse_items(flag, s, NULL, min, max, out);
}

void bt_int_list_free(bt_int_list_t *l)
{
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* ---- flags ---- */

void bt_bench_usage(FILE *f)
{
    fprintf(f,
            "usage: [mpirun -np S] baton-bench -m MODEL.gguf [options]\n"
            "Lists are comma-separated; items may be ranges first-last[+step|*mult].\n"
            "Every combination of the lists is run.\n"
            "  -m, --model FILE[,FILE]   model(s) (repeatable)\n"
            "  -p, --n-prompt LIST       prompt lengths for ppN tests (default 512; 0: none)\n"
            "  -n, --n-gen LIST          decode steps for tgN tests (default 128; 0: none)\n"
            "  -pg PP,TG                 a prompt followed by decode (repeatable)\n"
            "  -b, --batch-size LIST     logical batch (default 2048)\n"
            "  -ub, --ubatch-size LIST   micro-batch (default 512)\n"
            "  -t, --threads LIST        OpenMP threads per rank (default: cores / ranks per node)\n"
            "  -ts, --tensor-split LIST  layer proportions per stage, e.g. 1/1,3/1\n"
            "                            (default: balanced)\n"
            "      --pipeline LIST       1: GPipe prefill, 0: synchronous (default 1)\n"
            "  -sm, --split-mode LIST    layer: stages of layers (default); tensor: all ranks\n"
            "                            one stage splitting every layer (once per other\n"
            "                            combination, whatever -tp says; with --pipeline 1:\n"
            "                            skipped; --pipeline not given: 0)\n"
            "  -tp, --tensor-parallel LIST\n"
            "                            -sm layer: T tensor ranks per stage, np = stages x T\n"
            "                            (default 1)\n"
            "      --tp-comm LIST        how a stage's tensor ranks combine their shares:\n"
            "                            gather (default; one rank's bits) or allreduce\n"
            "                            (partial sums added); -tp 1 tests run once, gather\n"
            "  -npl, --parallel LIST     sequences at once, each running the whole test;\n"
            "                            t/s counts all of them (default 1)\n"
            "      --groups N            -npl > 1 with pipeline 1: decode groups, micro-batches\n"
            "                            the decoding sequences spread over (default 0: one\n"
            "                            per stage)\n"
            "  -r, --repetitions N       repetitions per test (default 5)\n"
            "      --no-warmup           skip the warm-up run\n"
            "      --delay SECONDS       pause between tests (default 0)\n"
            "      --ops cpu|exact|ref|cuda-host|auto|cuda  kernel set of the tests (default cpu;\n"
            "                            see baton --kernels)\n"
            "      --gpu N               the CUDA device of every cuda rank (default: by local rank)\n"
            "      --kv-type f32|f16     KV cache elements (default f32)\n"
            "  -mmp, --mmap 0|1          1: map the weights (default); 0: read them into memory\n"
            "  -o, --output FORMAT       md, csv, json or jsonl (default md)\n"
            "      --hdf5 FILE           append every result with provenance to FILE\n"
            "      --trace-dir DIR       write a Chrome trace per test into DIR\n"
            "  -v, --verbose             per-repetition times and stage timings\n"
            "  -h, --help                this text\n"
            "Kernel benchmark (one rank, no model; -t, -r apply):\n"
            "      --kernels             GEMM/GEMV speed of each weight type against the\n"
            "                            machine's measured FMA peak and read bandwidth\n"
            "      --kernel-types LIST   types to time, e.g. q4_0,q8_0 (default: all)\n"
            "      --kernel-shapes LIST  model shapes (default smollm2-135m,llama-1b)\n"
            "      --kernel-tokens LIST  prefill tokens for GEMM (default 64,128,512)\n"
            "      --kernel-time SECONDS sampling time per measurement (default 0.1)\n"
            "      --kernel-bw-mib N     read-bandwidth buffer (default 512)\n"
            "      --ref-kernels         also time the scalar reference kernels\n"
            "Cost profile for baton-plan (one rank; -m, -t, -ub, --ops, --kv-type, --hdf5 apply):\n"
            "      --profile             time one layer on 1, 2, 4, ... -ub rows at each context,\n"
            "                            the head and the embedding; write /profile to --hdf5\n"
            "      --profile-ctx LIST    contexts the layers are timed at (default 0,512,2048)\n");
}

static bt_status_t add_models(bt_bench_params_t *p, const char *s)
{
    char *copy = strdup(s), *save = NULL;
    if (copy == NULL)
        return BT_ERR_NOMEM;
    for (char *m = strtok_r(copy, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
        char **nm = realloc(p->models, sizeof(char *) * (size_t)(p->n_models + 1));
        if (nm == NULL || (nm[p->n_models] = strdup(m)) == NULL) {
            p->models = nm ? nm : p->models;
            free(copy);
            return BT_ERR_NOMEM;
        }
        p->models = nm;
        p->n_models++;
    }
    free(copy);
    return BT_OK;
}

static bt_status_t add_pg(bt_bench_params_t *p, const char *s)
{
    bt_int_list_t l = {0};
    bt_status_t st = bt_parse_list("-pg", s, 1, 1 << 24, &l);
    if (st == BT_OK && l.n != 2) {
        bt_log_error("-pg: '%s' must be two numbers: prompt,gen", s);
        st = BT_ERR_ARG;
    }
    if (st == BT_OK) {
        int(*np)[2] = realloc(p->pg, sizeof *p->pg * (size_t)(p->n_pg + 1));
        if (np == NULL) {
            st = BT_ERR_NOMEM;
        } else {
            p->pg = np;
            p->pg[p->n_pg][0] = l.v[0];
            p->pg[p->n_pg][1] = l.v[1];
            p->n_pg++;
        }
    }
    bt_int_list_free(&l);
    return st;
}

/* "-ts 1/1,3/1": splits separated by commas, ratios by '/' or ';'. */
static bt_status_t set_splits(bt_bench_params_t *p, const char *s)
{
    char *copy = strdup(s), *save = NULL;
    if (copy == NULL)
        return BT_ERR_NOMEM;
    bt_status_t st = BT_OK;
    for (char *item = strtok_r(copy, ",", &save); item && st == BT_OK;
         item = strtok_r(NULL, ",", &save)) {
        for (char *c = item; *c; c++)
            *c = *c == ';' ? '/' : *c;
        bt_split_t sp = {0};
        if ((st = bt_parse_ratios("-ts", item, &sp.ratios, &sp.n)))
            break;
        bt_split_t *ns = realloc(p->splits, sizeof *ns * (size_t)(p->n_splits + 1));
        if (ns == NULL) {
            free(sp.ratios);
            st = BT_ERR_NOMEM;
            break;
        }
        p->splits = ns;
        p->splits[p->n_splits++] = sp;
    }
    free(copy);
    return st;
}

static bt_status_t parse_float_arg(const char *flag, const char *s, double *out)
{
    char *e;
    double v = strtod(s, &e);
    if (e == s || *e != '\0' || !(v >= 0.0 && v < 1e6)) {
        bt_log_error("%s: '%s' is not a number of seconds >= 0", flag, s);
        return BT_ERR_ARG;
    }
    *out = v;
    return BT_OK;
}

/* A benchmark that would run no test is a mistake in the flags: every -p
 * and -n 0 and no -pg, or every -ub larger than every -b (those
 * combinations are skipped, as llama-bench skips them). */
static bt_status_t check_something_to_run(const bt_bench_params_t *p)
{
    bool any_test = p->n_pg > 0;
    for (int i = 0; i < p->n_prompt.n; i++)
        any_test |= p->n_prompt.v[i] > 0;
    for (int i = 0; i < p->n_gen.n; i++)
        any_test |= p->n_gen.v[i] > 0;
    if (!any_test) {
        bt_log_error("nothing to run: every -p and -n is 0 and no -pg is given");
        return BT_ERR_ARG;
    }
    int min_ub = p->ubatch.v[0], max_b = p->batch.v[0];
    for (int i = 1; i < p->ubatch.n; i++)
        min_ub = p->ubatch.v[i] < min_ub ? p->ubatch.v[i] : min_ub;
    for (int i = 1; i < p->batch.n; i++)
        max_b = p->batch.v[i] > max_b ? p->batch.v[i] : max_b;
    if (min_ub > max_b) {
        bt_log_error("-ub %d is larger than -b %d: a micro-batch cannot exceed the batch "
                     "(no test to run)", min_ub, max_b);
        return BT_ERR_ARG;
    }
    /* -sm tensor with --pipeline 1 is skipped: one stage has nothing to pipeline */
    bool any_run = false;
    for (int i = 0; i < p->split_mode.n; i++)
        for (int k = 0; k < p->pipeline.n; k++)
            any_run |= p->split_mode.v[i] == BT_SPLIT_MODE_LAYER || !p->pipeline_given ||
                       p->pipeline.v[k] == 0;
    if (!any_run) {
        bt_log_error("nothing to run: every test is -sm tensor with --pipeline 1, which is "
                     "skipped (one stage has nothing to pipeline): give --pipeline 0 or -sm layer");
        return BT_ERR_ARG;
    }
    /* allreduce on no tensor ranks would run as gather: a mistake in the flags */
    bool allreduce = false, tensor_ranks = false;
    for (int i = 0; i < p->tp_comm.n; i++)
        allreduce |= p->tp_comm.v[i] == 1;
    for (int i = 0; i < p->split_mode.n; i++)
        tensor_ranks |= p->split_mode.v[i] == BT_SPLIT_MODE_TENSOR;
    for (int i = 0; i < p->tp.n; i++)
        tensor_ranks |= p->tp.v[i] > 1;
    if (allreduce && !tensor_ranks) {
        bt_log_error("--tp-comm allreduce applies only to tests with tensor ranks (-tp above 1 "
                     "or -sm tensor), and every test is -sm layer -tp 1");
        return BT_ERR_ARG;
    }
    int max_npl = 1;
    for (int i = 0; i < p->parallel.n; i++)
        max_npl = p->parallel.v[i] > max_npl ? p->parallel.v[i] : max_npl;
    if (p->groups > 0 && max_npl == 1) {
        bt_log_error("--groups %d applies only to tests with -npl above 1, and every -npl is 1",
                     p->groups);
        return BT_ERR_ARG;
    }
    return BT_OK;
}

/* The list flags, in the order of the parser's list index (li) and defaults. */
static void param_lists(bt_bench_params_t *p, bt_int_list_t *lists[BT_N_LISTS])
{
    lists[0] = &p->n_prompt;
    lists[1] = &p->n_gen;
    lists[2] = &p->batch;
    lists[3] = &p->ubatch;
    lists[4] = &p->threads;
    lists[5] = &p->pipeline;
    lists[6] = &p->parallel;
    lists[7] = &p->tp;
    lists[8] = &p->split_mode;
    lists[9] = &p->tp_comm;
}

bt_status_t bt_bench_params_parse(int argc, char **argv, int default_threads,
                                  bt_bench_params_t *p)
{
    *p = (bt_bench_params_t){.reps = 5, .warmup = true, .ops = &bt_ops_cpu, .mmap = 1, .output = "md",
                             .kernel_time = 0.1, .kernel_bw_mib = 512};
    bt_status_t st = BT_OK;
    bool lists_set[BT_N_LISTS] = {false};
    bt_int_list_t *lists[BT_N_LISTS];
    param_lists(p, lists);
    bool splits_set = false;
    for (int i = 1; i < argc && st == BT_OK; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int li = -1;
        bool takes_value = true;
        long min = 1, max = 1 << 24;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            p->help = 1;
            return BT_OK;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            p->verbose = 1;
            takes_value = false;
        } else if (!strcmp(a, "--no-warmup")) {
            p->warmup = false;
            takes_value = false;
        } else if (!strcmp(a, "--kernels")) {
            p->kernels = true;
            takes_value = false;
        } else if (!strcmp(a, "--ref-kernels")) {
            p->ref_kernels = true;
            takes_value = false;
        } else if (!strcmp(a, "--profile")) {
            p->profile = true;
            takes_value = false;
        } else if (val == NULL && a[0] == '-') {
            bool known = false;
            static const char *const with_value[] = {
                "-m", "--model", "-p", "--n-prompt", "-n", "--n-gen", "-pg", "-b", "--batch-size",
                "-ub", "--ubatch-size", "-t", "--threads", "-ts", "--tensor-split", "--pipeline",
                "-npl", "--parallel", "--groups", "-sm", "--split-mode", "-tp",
                "--tensor-parallel", "--tp-comm",
                "-r", "--repetitions", "--delay", "--ops", "--kv-type", "-mmp", "--mmap", "-o",
                "--output", "--hdf5",
                "--trace-dir",
                "--kernel-types", "--kernel-shapes", "--kernel-tokens", "--kernel-time",
                "--kernel-bw-mib", "--profile-ctx"};
            for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
                known = known || !strcmp(a, with_value[k]);
            bt_log_error(known ? "option '%s' needs a value" : "unknown option '%s'", a);
            st = BT_ERR_ARG;
            break;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            st = add_models(p, val);
        } else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
            li = 0, min = 0;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
            li = 1, min = 0;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            li = 2;
        } else if (!strcmp(a, "-ub") || !strcmp(a, "--ubatch-size")) {
            li = 3;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            li = 4, max = 1024;
        } else if (!strcmp(a, "--pipeline")) {
            li = BT_LIST_PIPELINE, min = 0, max = 1;
            p->pipeline_given = true;
        } else if (!strcmp(a, "-sm") || !strcmp(a, "--split-mode")) {
            st = parse_items(a, val, bt_parse_split_mode, 0, 0, &p->split_mode);
            lists_set[BT_LIST_SPLIT_MODE] = true;
        } else if (!strcmp(a, "-tp") || !strcmp(a, "--tensor-parallel")) {
            li = 7, max = BT_TP_MAX;
        } else if (!strcmp(a, "--tp-comm")) {
            st = parse_items(a, val, bt_parse_tp_comm, 0, 0, &p->tp_comm);
            lists_set[BT_LIST_TP_COMM] = true;
        } else if (!strcmp(a, "-npl") || !strcmp(a, "--parallel")) {
            li = 6, max = BT_MAX_PARALLEL;
        } else if (!strcmp(a, "--groups")) {
            st = bt_parse_int("--groups", val, 0, BT_MAX_PARALLEL, &p->groups);
        } else if (!strcmp(a, "-pg")) {
            st = add_pg(p, val);
        } else if (!strcmp(a, "-ts") || !strcmp(a, "--tensor-split")) {
            if (!splits_set) {
                for (int k = 0; k < p->n_splits; k++)
                    free(p->splits[k].ratios);
                p->n_splits = 0;
            }
            splits_set = true;
            st = set_splits(p, val);
        } else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
            st = bt_parse_int("-r", val, 1, 100000, &p->reps);
        } else if (!strcmp(a, "--delay")) {
            st = parse_float_arg("--delay", val, &p->delay);
        } else if (!strcmp(a, "--ops")) {
            st = bt_parse_kernels("--ops", val, &p->ops);
        } else if (!strcmp(a, "--gpu")) {
            st = bt_parse_int("--gpu", val, 0, 1023, &p->gpu);
            p->gpu_given = true;
        } else if (!strcmp(a, "-mmp") || !strcmp(a, "--mmap")) {
            st = bt_parse_int("--mmap", val, 0, 1, &p->mmap);
        } else if (!strcmp(a, "--kv-type")) {
            if ((p->kv_type = bt_kv_type_parse(val)) < 0) {
                bt_log_error("--kv-type: '%s' is not one of f32, f16", val);
                st = BT_ERR_ARG;
            }
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (strcmp(val, "md") && strcmp(val, "csv") && strcmp(val, "json") &&
                strcmp(val, "jsonl")) {
                bt_log_error("-o: '%s' is not one of md, csv, json, jsonl", val);
                st = BT_ERR_ARG;
            }
            p->output = val;
        } else if (!strcmp(a, "--hdf5")) {
            p->hdf5 = val;
        } else if (!strcmp(a, "--trace-dir")) {
            p->trace_dir = val;
        } else if (!strcmp(a, "--kernel-types")) {
            p->kernel_types = val;
        } else if (!strcmp(a, "--kernel-shapes")) {
            p->kernel_shapes = val;
        } else if (!strcmp(a, "--kernel-tokens")) {
            st = bt_parse_list(a, val, 1, 1 << 16, &p->kernel_tokens);
        } else if (!strcmp(a, "--profile-ctx")) {
            st = bt_parse_list(a, val, 0, 1 << 20, &p->profile_ctx);
        } else if (!strcmp(a, "--kernel-time")) {
            st = parse_float_arg(a, val, &p->kernel_time);
        } else if (!strcmp(a, "--kernel-bw-mib")) {
            st = bt_parse_int(a, val, 1, 1 << 20, &p->kernel_bw_mib);
        } else {
            bt_log_error(a[0] == '-' ? "unknown option '%s'" : "unexpected argument '%s'", a);
            st = BT_ERR_ARG;
        }
        if (li >= 0 && st == BT_OK) {
            st = bt_parse_list(a, val, min, max, lists[li]);
            lists_set[li] = true;
        }
        if (takes_value)
            i++;
    }
    /* defaults for the lists not given (llama-bench's) */
    static const char *const defaults[BT_N_LISTS] = {"512", "128", "2048", "512", NULL,
                                                     "1",   "1",   "1",    "0",   "0"};
    char threads[32];
    if (p->kernels && default_threads > 1) /* the kernels: one thread and all */
        snprintf(threads, sizeof threads, "1,%d", default_threads);
    else
        snprintf(threads, sizeof threads, "%d", default_threads);
    for (int li = 0; li < BT_N_LISTS && st == BT_OK; li++)
        if (!lists_set[li])
            st = bt_parse_list("default", li == 4 ? threads : defaults[li], 0, 1 << 24,
                               lists[li]);
    if (st == BT_OK && p->n_splits == 0) {
        p->splits = calloc(1, sizeof *p->splits);
        p->n_splits = p->splits ? 1 : 0;
        st = p->splits ? BT_OK : BT_ERR_NOMEM;
    }
    if (st == BT_OK && p->kernel_tokens.n == 0)
        st = bt_parse_list("default", "64,128,512", 1, 1 << 16, &p->kernel_tokens);
    if (st == BT_OK && p->profile_ctx.n == 0)
        st = bt_parse_list("default", "0,512,2048", 0, 1 << 20, &p->profile_ctx);
    if (st == BT_OK && p->n_models == 0 && !p->kernels) {
        bt_log_error("no model given (-m FILE)");
        st = BT_ERR_ARG;
    }
    if (st == BT_OK && p->profile && !p->kernels)
        for (int i = 0; i < p->tp.n && st == BT_OK; i++)
            if (p->tp.v[i] > 1) {
                bt_log_error("--profile times whole layers on one rank; -tp %d (tensor ranks "
                             "per stage) does not apply to it: drop -tp", p->tp.v[i]);
                st = BT_ERR_ARG;
            }
    if (st == BT_OK && !p->kernels)
        st = check_something_to_run(p);
    return st;
}

bt_status_t bt_bench_params_check_ranks(const bt_bench_params_t *p, int n_ranks)
{
    for (int i = 0; i < p->split_mode.n; i++) {
        if (p->split_mode.v[i] == BT_SPLIT_MODE_TENSOR && n_ranks > BT_TP_MAX) {
            bt_log_error("-sm tensor makes all %d ranks one stage of tensor ranks, more than "
                         "the %d a stage can have (use -sm layer -tp T)", n_ranks, BT_TP_MAX);
            return BT_ERR_ARG;
        }
        if (p->split_mode.v[i] != BT_SPLIT_MODE_LAYER)
            continue;
        for (int k = 0; k < p->tp.n; k++) {
            int tp;
            if (bt_layout_tp(0, p->tp.v[k], 0, 0, n_ranks, &tp) != BT_OK)
                return BT_ERR_ARG;
        }
    }
    return BT_OK;
}

void bt_bench_params_free(bt_bench_params_t *p)
{
    for (int i = 0; i < p->n_models; i++)
        free(p->models[i]);
    free(p->models);
    bt_int_list_t *lists[BT_N_LISTS];
    param_lists(p, lists);
    for (int i = 0; i < BT_N_LISTS; i++)
        bt_int_list_free(lists[i]);
    bt_int_list_free(&p->kernel_tokens);
    bt_int_list_free(&p->profile_ctx);
    free(p->pg);
    for (int i = 0; i < p->n_splits; i++)
        free(p->splits[i].ratios);
    free(p->splits);
    *p = (bt_bench_params_t){0};
}

/* ---- the product ---- */

bt_status_t bt_bench_tests(const bt_bench_params_t *p, bt_bench_test_t **tests, int *n)
{
    size_t per = 0;
    for (int i = 0; i < p->n_prompt.n; i++)
        per += p->n_prompt.v[i] > 0;
    for (int i = 0; i < p->n_gen.n; i++)
        per += p->n_gen.v[i] > 0;
    per += (size_t)p->n_pg;
    size_t cap = per * (size_t)p->n_models * (size_t)p->n_splits * (size_t)p->threads.n *
                 (size_t)p->batch.n * (size_t)p->ubatch.n * (size_t)p->split_mode.n *
                 (size_t)p->tp.n * (size_t)p->tp_comm.n * (size_t)p->pipeline.n *
                 (size_t)p->parallel.n;
    bt_bench_test_t *t = malloc(sizeof *t * (cap ? cap : 1));
    if (t == NULL)
        return BT_ERR_NOMEM;
    int k = 0;
    for (int mi = 0; mi < p->n_models; mi++)
    for (int si = 0; si < p->n_splits; si++)
    for (int ti = 0; ti < p->threads.n; ti++)
    for (int bi = 0; bi < p->batch.n; bi++)
    for (int ui = 0; ui < p->ubatch.n; ui++)
    for (int mo = 0; mo < p->split_mode.n; mo++)
    for (int xi = 0; xi < p->tp.n; xi++)
    for (int ci = 0; ci < p->tp_comm.n; ci++)
    for (int pi = 0; pi < p->pipeline.n; pi++)
    for (int ni = 0; ni < p->parallel.n; ni++) {
        const bool tensor = p->split_mode.v[mo] == BT_SPLIT_MODE_TENSOR;
        /* one rank a stage combines nothing: once, whatever --tp-comm says */
        const bool one_rank = !tensor && p->tp.v[xi] <= 1;
        if (p->ubatch.v[ui] > p->batch.v[bi] || (tensor && xi > 0) || (one_rank && ci > 0))
            continue;
        bt_bench_test_t base = {
            .model = p->models[mi],
            .split = &p->splits[si],
            .threads = p->threads.v[ti],
            .batch = p->batch.v[bi],
            .ubatch = p->ubatch.v[ui],
            .split_mode = p->split_mode.v[mo],
            .tp = tensor ? 0 : p->tp.v[xi],
            .tp_comm = one_rank ? 0 : p->tp_comm.v[ci],
            /* one stage: the default pipeline mode is moot, the synchronous one runs */
            .pipeline = tensor && !p->pipeline_given ? 0 : p->pipeline.v[pi],
            .parallel = p->parallel.v[ni],
            .kind = BT_TEST_PP,
        };
        for (int i = 0; i < p->n_prompt.n; i++)
            if (p->n_prompt.v[i] > 0) {
                t[k] = base;
                t[k++].n_prompt = p->n_prompt.v[i];
            }
        for (int i = 0; i < p->n_gen.n; i++)
            if (p->n_gen.v[i] > 0) {
                t[k] = base;
                t[k].kind = BT_TEST_TG;
                t[k++].n_gen = p->n_gen.v[i];
            }
        for (int i = 0; i < p->n_pg; i++) {
            t[k] = base;
            t[k].kind = BT_TEST_PG;
            t[k].n_prompt = p->pg[i][0];
            t[k++].n_gen = p->pg[i][1];
        }
    }
    *tests = t;
    *n = k;
    return BT_OK;
}

void bt_bench_test_name(const bt_bench_test_t *t, char *buf, size_t size)
{
    switch (t->kind) {
    case BT_TEST_PP: snprintf(buf, size, "pp%d", t->n_prompt); break;
    case BT_TEST_TG: snprintf(buf, size, "tg%d", t->n_gen); break;
    case BT_TEST_PG: snprintf(buf, size, "pp%d+tg%d", t->n_prompt, t->n_gen); break;
    }
}
