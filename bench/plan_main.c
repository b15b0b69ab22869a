/*
 * baton-plan: what S nodes will deliver, predicted from a measured cost
 * profile (`baton-bench --profile --hdf5 FILE`) and the links, before
 * anyone allocates them (bench/plan.h has the model and the simulator).
 *   baton-plan --profile results.h5 --nodes 1-16 --latency 20us --bandwidth 100Gbit
 *   baton-plan --profile results.h5 --compare results.h5
 * The first prints, per node count, the best split, -ub and decode group
 * count with their predicted pp/tg; the second predicts every row of a
 * results file's /results and prints the error against what was measured.
 * Every figure it prints is a prediction; the output says so.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "kernels/types.h"
#include "model.h"
#include "params.h"
#include "plan.h"
#include "results_h5.h"
#include "rng.h"
#include "stages/partition.h"
#include "synth.h"

typedef struct plan_args {
    const char *profile, *links, *compare, *trace, *hdf5;
    const char *shape, *type; /* a profile from a shape and a node's rates, not measured */
    double node_flops, node_Bps, node_mem, node_overhead_s;
    double model_bytes; /* --model-bytes: the weights to plan for (0: the profile's) */
    bt_int_list_t nodes, ubatch, parallel, tp;
    int ranks_per_node, cores_per_node, n_prompt, n_gen, threads;
    double latency_s, bandwidth_Bps;
    double tp_latency_s, tp_bandwidth_Bps; /* between the ranks of one node */
    double expert_spread; /* --expert-spread; < 0: not given */
    int tp_allreduce;     /* --tp-comm allreduce: tensor ranks add partial sums */
    bool help;
} plan_args_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: baton-plan --profile FILE.h5 [options]\n"
            "Predicts pipeline throughput from `baton-bench --profile --hdf5 FILE.h5`.\n"
            "  --profile FILE        results file with a /profile (the last one of -t threads)\n"
            "  --shape NAME          or a profile from a model shape (baton-mkmodel's names) and\n"
            "  --type T              its weight type (default q4_k), on a node that does\n"
            "  --node-tflops X       X dense TFLOP/s and reads\n"
            "  --node-gbs Y          Y GB/s of memory (each layer: the larger of the two times)\n"
            "  --node-mem Z          with Z GiB of memory a node (marks splits that do not fit)\n"
            "  --node-overhead-us U  and U us of fixed cost a layer call (default 20)\n"
            "  --model-bytes SIZE    weights to plan memory for, e.g. 40G (default: the\n"
            "                        profile's model, as held)\n"
            "  -t, --threads N       the profile's thread count to use (default: the last one)\n"
            "  --nodes LIST          node counts to predict (default 1-8)\n"
            "  --ranks-per-node N    pipeline stages per node (default 1)\n"
            "  --cores-per-node N    cores a node has: ranks x threads beyond it share them\n"
            "                        (default: this machine's)\n"
            "  --tp LIST             tensor ranks per stage to predict (default 1): stages x\n"
            "                        tp = nodes x ranks per node; a stage inside a node\n"
            "                        gathers over --tp-latency/--tp-bandwidth, one across\n"
            "                        nodes over --latency/--bandwidth\n"
            "  --tp-latency T        a gather's fixed cost between a node's ranks (default 2us)\n"
            "  --tp-bandwidth B      and its rate (default 80Gbit)\n"
            "  --tp-comm gather|allreduce  the tensor ranks' scheme (default gather; --compare\n"
            "                        takes each row's own)\n"
            "  --links FILE          latency and bandwidth: the mean of FILE's /links (links\n"
            "                        within a host: the --tp ones)\n"
            "  --latency T           one-way latency per hop, e.g. 20us, 1.5ms (default 20us)\n"
            "  --bandwidth B         per hop, e.g. 100Gbit, 1Gbit, 800Mbit (default 100Gbit)\n"
            "  -p N, -n N            prompt length and decode steps (default 512, 128)\n"
            "  -ub LIST              micro-batch sizes to choose from (default: the profile's)\n"
            "  --parallel LIST       sequences decoding at once (default 1,16,64)\n"
            "  --expert-spread X     experts: a call of r rows chooses k + X (E (1 - (1 -\n"
            "                        k/E)^r) - k) distinct experts of E (0: the rows all\n"
            "                        choose alike, 1: independently; default: as the\n"
            "                        profile's rows chose, or 1 for --shape; --compare\n"
            "                        takes each row's own)\n"
            "  --compare FILE        predict every row of FILE's /results; print the errors\n"
            "  --trace FILE.json     the simulated timeline of the first comparison (or of\n"
            "                        the largest node count's best prefill)\n"
            "  --hdf5 FILE           append the table to FILE's /plan (created if missing)\n");
}

/* "20us", "1.5ms", "0.1s", "5e-6" (seconds) */
static bool parse_time(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    double unit = !strcmp(end, "us") ? 1e-6 : !strcmp(end, "ms") ? 1e-3
                  : !strcmp(end, "s") || !*end ? 1.0 : -1.0;
    *out = v * unit;
    return end != s && unit > 0 && v >= 0 && isfinite(v);
}

/* "100Gbit", "1Gbit", "800Mbit", "10kbit", "1e9" (bits/s) -> bytes/s */
static bool parse_rate(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    double unit = !strcmp(end, "Gbit") ? 1e9 : !strcmp(end, "Mbit") ? 1e6
                  : !strcmp(end, "kbit") ? 1e3 : !strcmp(end, "bit") || !*end ? 1.0 : -1.0;
    *out = v * unit / 8.0;
    return end != s && unit > 0 && v > 0 && isfinite(v);
}

static bt_status_t parse_args(int argc, char **argv, plan_args_t *a)
{
    *a = (plan_args_t){.ranks_per_node = 1, .n_prompt = 512, .n_gen = 128, .latency_s = 20e-6,
                       .node_overhead_s = 20e-6, .tp_latency_s = 2e-6, .expert_spread = -1,
                       .tp_bandwidth_Bps = 80e9 / 8,
                       .bandwidth_Bps = 100e9 / 8, .cores_per_node = (int)sysconf(_SC_NPROCESSORS_ONLN)};
    bt_status_t st = BT_OK;
    for (int i = 1; i < argc && st == BT_OK; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            a->help = true;
            return BT_OK;
        }
        if (v == NULL) {
            bt_log_error("option '%s' needs a value (or is unknown)", o);
            return BT_ERR_ARG;
        }
        i++;
        long n = strtol(v, NULL, 10);
        if (!strcmp(o, "--profile"))
            a->profile = v;
        else if (!strcmp(o, "--links"))
            a->links = v;
        else if (!strcmp(o, "--compare"))
            a->compare = v;
        else if (!strcmp(o, "--shape"))
            a->shape = v;
        else if (!strcmp(o, "--type"))
            a->type = v;
        else if (!strcmp(o, "--model-bytes")) {
            char *end;
            const double x = strtod(v, &end);
            const double unit = !strcmp(end, "K") ? 1024.0 : !strcmp(end, "M") ? 1048576.0
                                : !strcmp(end, "G") ? 1073741824.0
                                : !strcmp(end, "T") ? 1099511627776.0 : !*end ? 1.0 : -1.0;
            a->model_bytes = x * unit;
            if (end == v || unit < 0 || !(x > 0) || !isfinite(x)) {
                bt_log_error("--model-bytes: '%s' is not a size (bytes, or with K, M, G, T)", v);
                st = BT_ERR_ARG;
            }
        } else if (!strcmp(o, "--node-tflops") || !strcmp(o, "--node-gbs") ||
                 !strcmp(o, "--node-mem") || !strcmp(o, "--node-overhead-us")) {
            char *end;
            const double x = strtod(v, &end);
            if (end == v || *end || !(x > 0) || !isfinite(x)) {
                bt_log_error("%s: '%s' is not a positive number", o, v);
                st = BT_ERR_ARG;
            }
            if (!strcmp(o, "--node-tflops"))
                a->node_flops = x * 1e12;
            else if (!strcmp(o, "--node-gbs"))
                a->node_Bps = x * 1e9;
            else if (!strcmp(o, "--node-overhead-us"))
                a->node_overhead_s = x * 1e-6;
            else
                a->node_mem = x * 1073741824.0;
        }
        else if (!strcmp(o, "--expert-spread")) {
            char *end;
            a->expert_spread = strtod(v, &end);
            if (end == v || *end || !(a->expert_spread >= 0) || !isfinite(a->expert_spread)) {
                bt_log_error("--expert-spread: '%s' is not a number of 0 or more", v);
                st = BT_ERR_ARG;
            }
        } else if (!strcmp(o, "--trace"))
            a->trace = v;
        else if (!strcmp(o, "--hdf5"))
            a->hdf5 = v;
        else if (!strcmp(o, "--nodes"))
            st = bt_parse_list(o, v, 1, 4096, &a->nodes);
        else if (!strcmp(o, "-ub") || !strcmp(o, "--ubatch-size"))
            st = bt_parse_list(o, v, 1, 1 << 16, &a->ubatch);
        else if (!strcmp(o, "--parallel"))
            st = bt_parse_list(o, v, 1, 1 << 16, &a->parallel);
        else if (!strcmp(o, "--tp"))
            st = bt_parse_list(o, v, 1, BT_TP_MAX, &a->tp);
        else if (!strcmp(o, "--tp-comm"))
            st = bt_parse_tp_comm(o, v, &a->tp_allreduce);
        else if (!strcmp(o, "--tp-latency") && !parse_time(v, &a->tp_latency_s))
            st = (bt_log_error("--tp-latency: '%s' is not a time (2us, 0.1ms)", v), BT_ERR_ARG);
        else if (!strcmp(o, "--tp-bandwidth") && !parse_rate(v, &a->tp_bandwidth_Bps))
            st = (bt_log_error("--tp-bandwidth: '%s' is not a rate (80Gbit)", v), BT_ERR_ARG);
        else if (!strcmp(o, "--latency") && !parse_time(v, &a->latency_s))
            st = (bt_log_error("--latency: '%s' is not a time (20us, 1.5ms)", v), BT_ERR_ARG);
        else if (!strcmp(o, "--bandwidth") && !parse_rate(v, &a->bandwidth_Bps))
            st = (bt_log_error("--bandwidth: '%s' is not a rate (100Gbit, 800Mbit)", v), BT_ERR_ARG);
        else if (!strcmp(o, "--ranks-per-node") || !strcmp(o, "--cores-per-node") ||
                 !strcmp(o, "-p") || !strcmp(o, "-n") || !strcmp(o, "-t") ||
                 !strcmp(o, "--threads")) {
            if (n < (strcmp(o, "-n") ? 1 : 0) || n > 1 << 20) {
                bt_log_error("%s: '%s' is out of range", o, v);
                st = BT_ERR_ARG;
            }
            int *dst = !strcmp(o, "--ranks-per-node")   ? &a->ranks_per_node
                       : !strcmp(o, "--cores-per-node") ? &a->cores_per_node
                       : !strcmp(o, "-p")               ? &a->n_prompt
                       : !strcmp(o, "-n")               ? &a->n_gen
                                                        : &a->threads;
            *dst = (int)n;
        } else if (strcmp(o, "--latency") && strcmp(o, "--bandwidth") &&
                   strcmp(o, "--tp-latency") && strcmp(o, "--tp-bandwidth")) {
            bt_log_error("unknown option '%s'", o);
            st = BT_ERR_ARG;
        }
    }
    if (st == BT_OK && a->profile == NULL && a->shape == NULL) {
        bt_log_error("no profile given (--profile FILE.h5 from baton-bench --profile --hdf5, or "
                     "--shape NAME with --node-tflops and --node-gbs)");
        st = BT_ERR_ARG;
    }
    if (st == BT_OK && a->shape != NULL && (a->node_flops <= 0 || a->node_Bps <= 0)) {
        bt_log_error("--shape %s: give the node's rates (--node-tflops and --node-gbs)", a->shape);
        st = BT_ERR_ARG;
    }
    if (st == BT_OK && a->nodes.n == 0)
        st = bt_parse_list("default", "1-8", 1, 4096, &a->nodes);
    if (st == BT_OK && a->parallel.n == 0)
        st = bt_parse_list("default", "1,16,64", 1, 1 << 16, &a->parallel);
    if (st == BT_OK && a->tp.n == 0)
        st = bt_parse_list("default", "1", 1, BT_TP_MAX, &a->tp);
    return st;
}

/* ---- the profile as bench/plan.h takes it ---- */

typedef struct loaded {
    bt_profile_t p;
    int *rows, *ctx;
    double *layer, *head, *embed, *shared, *sample, *rest;
    double *dense, *expert; /* the layer kinds' [n_ctx][n_rows] (DeepSeek), or unused */
    double *chose[2];       /* the distinct experts the "layer" and "expert" rows chose */
    int n_chose[2];
    double expert_one_s;    /* the "expert_one" row's (0: none) */
    int threads;
    char model[512];
    double weight_bytes; /* all weights (a shape's profile; 0: unknown) */
    double kv_pos_layer; /* KV cache bytes per position and layer */
    bt_hparams_t hp;     /* the model's dimensions (have_hp), for tensor ranks */
    bool have_hp;
} loaded_t;

/* The dimensions of the model file at path into L (when it can be read
 * here: tensor ranks need them; without, rows of tensor ranks are skipped). */
static void load_hparams(const char *path, loaded_t *L)
{
    bt_model_t *m;
    bt_log_capture(1);
    if (bt_model_open(path, &m) == BT_OK) {
        L->hp = m->hp;
        L->have_hp = true;
        bt_model_free(m);
    }
    bt_log_flush_captured(0);
    bt_log_capture(0);
}

static int cmp_int(const void *a, const void *b)
{
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

/* Sorted distinct values of v[0..n) in place; returns their count. */
static int distinct(int *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_int);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (k == 0 || v[i] != v[k - 1])
            v[k++] = v[i];
    return k;
}

/* The experts the profile's calls chose and what one more costs a call (a
 * version 7 profile of a model with experts, whose file is at hand for E
 * and k): of the "expert" rows where layers differ by kind, else of the
 * "layer" ones. */
static void load_experts(loaded_t *L)
{
    bt_profile_t *p = &L->p;
    const int e = p->n_dense > 0;
    p->spread = -1; /* the profile's own, until a workload says otherwise */
    if (!L->have_hp || L->hp.n_expert <= 0 || (L->hp.n_dense > 0 && !e) ||
        L->n_chose[e] != p->n_rows * p->n_ctx || !(L->expert_one_s > 0))
        return;
    p->experts = L->chose[e];
    p->expert_one_s = L->expert_one_s;
    p->n_expert = L->hp.n_expert;
    p->n_expert_used = L->hp.n_expert_used;
}

/* The rows of the last profiled run at `threads` (0: the last run). */
static bt_status_t load_profile(const char *path, int threads, loaded_t *L)
{
    bt_profile_row_t *r;
    int n;
    *L = (loaded_t){0};
    bt_status_t st = bt_h5_read_profile(path, &r, &n);
    if (st != BT_OK)
        return st;
    int64_t run = -1;
    for (int i = 0; i < n; i++)
        if (threads == 0 || r[i].n_threads == threads)
            run = r[i].run_id > run ? r[i].run_id : run;
    if (run < 0) {
        bt_log_error("%s: no /profile rows%s%s (run baton-bench --profile --hdf5 %s%s)", path,
                     threads ? " at -t " : "", threads ? "that thread count" : "", path,
                     threads ? " -t N" : "");
        free(r);
        return BT_ERR_ARG;
    }
    L->rows = malloc(sizeof(int) * (size_t)n);
    L->ctx = malloc(sizeof(int) * (size_t)n);
    int nr = 0, nc = 0;
    for (int i = 0; i < n; i++)
        if (r[i].run_id == run && !strcmp(r[i].kind, "layer")) {
            L->rows[nr++] = r[i].n_rows;
            L->ctx[nc++] = r[i].n_ctx;
        }
    nr = distinct(L->rows, nr);
    nc = distinct(L->ctx, nc);
    L->layer = calloc((size_t)(nr * nc + 1), sizeof(double));
    /* layer kinds (dense first layers): a table each, used when both are complete */
    static const char *const by_kind[] = {"layer", "dense", "expert"};
    double **tab[] = {&L->layer, &L->dense, &L->expert};
    int tab_got[3] = {0};
    L->dense = calloc((size_t)(nr * nc + 1), sizeof(double));
    L->expert = calloc((size_t)(nr * nc + 1), sizeof(double));
    for (int e = 0; e < 2; e++)
        L->chose[e] = calloc((size_t)(nr * nc + 1), sizeof(double));
    /* the kinds with one figure a row count; the optional ones (shared: no
     * core beyond -t; sample: a version 5 file; rest: before it was
     * profiled) only when every row count has one, head and embed always
     * (0 where missing) */
    static const char *const per_row[] = {"head", "embed", "shared", "sample", "rest"};
    double **vec[] = {&L->head, &L->embed, &L->shared, &L->sample, &L->rest};
    enum { N_PER_ROW = 5 };
    int got[N_PER_ROW] = {0};
    for (int v = 0; v < N_PER_ROW; v++)
        *vec[v] = calloc((size_t)nr + 1, sizeof(double));
    for (int i = 0; i < n; i++) {
        if (r[i].run_id != run)
            continue;
        const int *ri = bsearch(&r[i].n_rows, L->rows, (size_t)nr, sizeof(int), cmp_int);
        if (ri == NULL)
            continue;
        const int k = (int)(ri - L->rows);
        const int *ci = bsearch(&r[i].n_ctx, L->ctx, (size_t)nc, sizeof(int), cmp_int);
        for (int v = 0; v < 3; v++)
            if (!strcmp(r[i].kind, by_kind[v]) && ci != NULL) {
                (*tab[v])[(ci - L->ctx) * nr + k] = r[i].seconds;
                tab_got[v]++;
                const int e = v == 2; /* "expert" rows, else "layer" ones */
                if (v != 1 && L->chose[e] != NULL && r[i].experts > 0) {
                    L->chose[e][(ci - L->ctx) * nr + k] = r[i].experts;
                    L->n_chose[e]++;
                }
            }
        if (!strcmp(r[i].kind, "expert_one"))
            L->expert_one_s = r[i].seconds;
        for (int v = 0; v < N_PER_ROW; v++)
            if (!strcmp(r[i].kind, per_row[v])) {
                (*vec[v])[k] = r[i].seconds;
                got[v]++;
            }
        L->threads = r[i].n_threads;
        L->p.n_layer = r[i].n_layer;
        L->p.act_bytes_row = r[i].act_bytes_row;
        L->p.msg_bytes = r[i].msg_bytes;
        L->weight_bytes = r[i].weight_bytes;
        L->kv_pos_layer = r[i].kv_bytes_pos;
        snprintf(L->model, sizeof L->model, "%s", r[i].model_filename);
    }
    free(r);
    load_hparams(L->model, L);
    L->p.n_rows = nr;
    L->p.rows = L->rows;
    L->p.n_ctx = nc;
    L->p.ctx = L->ctx;
    L->p.layer_s = L->layer;
    if (L->have_hp && L->hp.n_dense > 0 && tab_got[1] == nr * nc && tab_got[2] == nr * nc) {
        L->p.n_dense = L->hp.n_dense;
        L->p.dense_s = L->dense;
        L->p.expert_s = L->expert;
    }
    const double **to[] = {&L->p.head_s, &L->p.embed_s, &L->p.shared_s, &L->p.sample_s,
                           &L->p.rest_s};
    for (int v = 0; v < N_PER_ROW; v++)
        *to[v] = v < 2 || got[v] == nr ? *vec[v] : NULL;
    load_experts(L);
    return nr > 0 ? BT_OK : BT_ERR_ARG;
}

static void loaded_free(loaded_t *L)
{
    free(L->rows);
    free(L->ctx);
    free(L->layer);
    free(L->dense);
    free(L->expert);
    free(L->chose[0]);
    free(L->chose[1]);
    free(L->head);
    free(L->embed);
    free(L->shared);
    free(L->sample);
    free(L->rest);
}

/* ---- tensor ranks ---- */

/* The expected largest rank's share of the (row, expert) pairs of a
 * micro-batch of rows, each choosing k of the n experts at random, where
 * rank r holds experts [at[r], at[r + 1]): the mean over fixed-seed trials
 * (enough for about 4096 rows in all; the figure is the same every run). */
static double expert_pairs_share(const int *at, int T, int n, int k, int rows)
{
    bt_rng_t rng;
    bt_rng_seed(&rng, 0x6261746f6eull);
    int owner[1024], count[BT_TP_MAX], pick[64];
    if (n > 1024 || k > 64 || k > n)
        return (double)bt_share_largest(at, T) / n;
    for (int r = 0; r < T; r++)
        for (int e = at[r]; e < at[r + 1]; e++)
            owner[e] = r;
    const int trials = rows < 4096 / 16 ? 4096 / rows : 16;
    double sum = 0;
    for (int t = 0; t < trials; t++) {
        memset(count, 0, sizeof(int) * (size_t)T);
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < k; j++) { /* k distinct experts */
                int e;
                bool seen;
                do {
                    e = (int)(bt_rng_next(&rng) % (uint64_t)n);
                    seen = false;
                    for (int q = 0; q < j; q++)
                        seen |= pick[q] == e;
                } while (seen);
                pick[j] = e;
                count[owner[e]]++;
            }
        int most = 0;
        for (int r = 0; r < T; r++)
            most = count[r] > most ? count[r] : most;
        sum += (double)most / ((double)rows * k);
    }
    return sum / trials;
}

/* What a stage of T tensor ranks adds and saves for a model of these
 * dimensions (docs/design.md, "Tensor parallelism"). The ranks meet at a
 * gather after each part of a layer (q, k, v and attention on their heads;
 * their features of attn_output; their hidden units of gate and up, then
 * their features of down; or the router, whole on every rank, and their
 * experts), so the share is the sum over the parts of the largest rank's
 * multiply-adds in each; the experts' part by the pairs a micro-batch's
 * rows send to the busiest rank. Also the largest rank's share of the
 * head's vocabulary, the gathers of a layer and the most bytes a rank
 * receives in them per row. A gather of T ranks takes ceil(log2 T)
 * latencies. Zero (no tensor ranks) for T <= 1. sum (--tp-comm
 * allreduce): attn_output and down by each rank's columns, the ranks
 * meeting at two sums a layer (attention, FFN or experts), each one
 * collective of n_embd floats a rank at T = 2, else two of (T - 1) / T
 * n_embd (stages/tensor.c). */
static bt_plan_tensor_t tensor_costs(const bt_hparams_t *hp, int T, bool sum, double lat,
                                     double bw)
{
    bt_share_t s;
    bt_log_capture(1);
    const bool ok = T > 1 && bt_share_init(hp, 0, T, sum, &s) == BT_OK;
    bt_log_flush_captured(0);
    bt_log_capture(0);
    if (!ok)
        return (bt_plan_tensor_t){0};
    const bool moe = hp->n_expert > 0;
    const double e = hp->n_embd, hd = hp->head_dim, q = (double)hp->n_head * hd;
    const double expert = 3 * e * hp->n_ff_exp * hp->n_expert_used;
    const double whole = e * (2 * q + 2.0 * hp->n_head_kv * hd) +
                         (moe ? e * hp->n_expert + expert : 3 * e * hp->n_ff);
    double most[4] = {0}, recv = 0; /* per part: qkv, attn_output, gate/up, down */
    for (int r = 0; r < T; r++) {
        int kv0, kv1;
        bt_share_kv(&s, hp, r, &kv0, &kv1);
        const double heads = (double)(s.head[r + 1] - s.head[r]) * hd;
        const double embd = s.embd[r + 1] - s.embd[r], ff = s.ff[r + 1] - s.ff[r];
        const double ex = moe ? (double)(s.expert[r + 1] - s.expert[r]) / hp->n_expert : 0;
        const double part[4] = {e * (heads + 2.0 * (kv1 - kv0) * hd), sum ? e * heads : embd * q,
                                moe ? 0 : 2 * e * ff, moe ? 0 : sum ? e * ff : embd * hp->n_ff};
        for (int i = 0; i < 4; i++)
            most[i] = part[i] > most[i] ? part[i] : most[i];
        const double in = (q - heads) + (e - embd) +
                          (moe ? hp->n_expert_used * e * (1 - ex) : (hp->n_ff - ff) + (e - embd));
        recv = in > recv ? in : recv;
    }
    bt_plan_tensor_t t = {.tp = T,
                          .share = (most[0] + most[1] + most[2] + most[3] +
                                    (moe ? e * hp->n_expert : 0)) / whole,
                          .attn_share = (double)bt_share_largest(s.head, T) / hp->n_head,
                          .head_share = (double)bt_share_largest(s.vocab, T) / hp->n_vocab,
                          .expert_frac = moe ? expert / whole : 0,
                          .gathers = sum ? (T == 2 ? 2 : 4) : moe ? 3 : 4,
                          .bytes_row = (sum ? (T == 2 ? 2 * e : 4 * e * (T - 1) / T) : recv) *
                                       sizeof(float),
                          .latency_s = lat * ceil(log2(T)), .bandwidth_Bps = bw};
    for (int i = 0; moe && i < BT_PLAN_EXPERT_ROWS; i++)
        t.expert_share[i] = expert_pairs_share(s.expert, T, hp->n_expert, hp->n_expert_used,
                                               1 << i);
    return t;
}

/* The mean latency and bandwidth of a run's /links within a host (*in_*:
 * the tensor ranks' links when a stage is on one host) and across hosts
 * (*lat, *bw); each left as it was when the run has no such link. */
static void split_links(const bt_h5_link_t *l, int n, int64_t run, double *lat, double *bw,
                        double *in_lat, double *in_bw)
{
    double sum[2][2] = {{0}}; /* [within a host][latency, bandwidth] */
    int k[2] = {0};
    for (int i = 0; i < n; i++)
        if (l[i].run_id == run) {
            const int in = !strcmp(l[i].link.from_host, l[i].link.to_host);
            sum[in][0] += l[i].link.latency_us * 1e-6;
            sum[in][1] += l[i].link.bandwidth_MBps * 1e6;
            k[in]++;
        }
    double *out[2][2] = {{lat, bw}, {in_lat, in_bw}};
    for (int in = 0; in < 2; in++)
        for (int j = 0; j < 2 && k[in] > 0; j++)
            *out[in][j] = sum[in][j] / k[in];
}

/* The mean latency and bandwidth of a results file's /links (of its last
 * run that has any, or of run): across hosts into *lat, *bw (where the run
 * has none, the links within a host, as one node's ranks run), within a
 * host into *in_lat, *in_bw (may be NULL). */
static bt_status_t load_links(const char *path, int64_t run, double *lat, double *bw,
                              double *in_lat, double *in_bw)
{
    bt_h5_link_t *l;
    int n;
    bt_status_t st = bt_h5_read_links(path, &l, &n);
    if (st != BT_OK)
        return st;
    int64_t last = -1;
    for (int i = 0; i < n; i++)
        last = l[i].run_id > last ? l[i].run_id : last;
    if (run < 0)
        run = last;
    int k = 0;
    for (int i = 0; i < n; i++)
        k += l[i].run_id == run;
    double x_lat = NAN, x_bw = NAN, i_lat = NAN, i_bw = NAN;
    split_links(l, n, run, &x_lat, &x_bw, &i_lat, &i_bw);
    free(l);
    if (k > 0) {
        *lat = isnan(x_lat) ? i_lat : x_lat;
        *bw = isnan(x_bw) ? i_bw : x_bw;
        if (in_lat != NULL && !isnan(i_lat))
            *in_lat = i_lat, *in_bw = i_bw;
    }
    return k > 0 || run != last ? BT_OK : BT_ERR_ARG;
}

/* ---- predictions ---- */

typedef struct pred {
    double model_ts, sim_ts;
} pred_t;

/* The compute slowdown of a rank: a shape's node rates are shared by its
 * ranks; a measured profile's threads by the node's cores. */
static double node_share(const plan_args_t *a, const loaded_t *L)
{
    return a->shape ? a->ranks_per_node
                    : bt_plan_slowdown(a->ranks_per_node, L->threads, a->cores_per_node);
}

/* The crowding of a node's ranks all at work (a shape's profile has none). */
static double node_crowding(const plan_args_t *a, const loaded_t *L)
{
    return a->shape ? 0.0 : bt_plan_crowding(a->ranks_per_node, L->threads, a->cores_per_node);
}

/* The split of n_layer over S by compute (the head once per prompt; each
 * layer its kind's where the profile has kinds). */
static void split(const bt_profile_t *p, int S, int ub, int n_tok, int *bounds)
{
    const int M = (n_tok + ub - 1) / ub;
    double *cost = p->dense_s != NULL ? malloc(sizeof(double) * (size_t)p->n_layer) : NULL;
    for (int l = 0; cost != NULL && l < p->n_layer; l++)
        cost[l] = bt_profile_layer_at(p, l, ub, 0);
    const bt_stage_costs_t c = {.layer = bt_profile_layer(p, ub, 0),
                                .embed = bt_profile_embed(p, ub),
                                .head = bt_profile_head(p, 1) / (M > 0 ? M : 1),
                                .layer_cost = cost};
    bt_log_capture(1);
    if (bt_partition(p->n_layer, S, NULL, 0, &c, NULL, bounds) != BT_OK)
        for (int s = 0; s <= S; s++)
            bounds[s] = p->n_layer * s / S;
    bt_log_flush_captured(0);
    bt_log_capture(0);
    free(cost);
}

static pred_t predict_pp(const bt_plan_pipe_t *pp, int n_tok, int ub, bt_plan_mode_t mode)
{
    pred_t r = {n_tok / bt_plan_prefill(pp, n_tok, ub, mode), NAN};
    bt_plan_sim_t sim;
    if (bt_plan_simulate_prefill(pp, n_tok, ub, mode, false, &sim) == BT_OK)
        r.sim_ts = n_tok / sim.seconds;
    return r;
}

/* n_gen steps of P sequences in G groups from an empty cache (context k
 * at step k). */
static pred_t predict_tg(const bt_plan_pipe_t *pp, int n_gen, int P, int G)
{
    double t = 0.0;
    for (int k = 0; k < n_gen; k++)
        t += bt_plan_decode(pp, P, G, k);
    pred_t r = {(double)P * n_gen / t, NAN};
    bt_plan_sim_t sim; /* at the mean context */
    if (bt_plan_simulate_decode(pp, P, G, n_gen, n_gen / 2, false, &sim) == BT_OK)
        r.sim_ts = (double)P * n_gen / sim.seconds;
    return r;
}

/* ---- a profile from a shape and a node's rates (a roofline) ---- */

/* Seconds on the node: the larger of the work at the node's FLOP rate and
 * the bytes at its memory rate. */
static double roof(const plan_args_t *a, double flops, double bytes)
{
    return fmax(flops / a->node_flops, bytes / a->node_Bps);
}

typedef struct shape_cost {
    double bytes_w;      /* bytes per weight of the type */
    double attn_params;  /* q, k, v, o */
    double ffn_params;   /* dense FFN, or one expert */
    double kv_row;       /* KV cache bytes per position (f16) */
    double q_dim;
    int n_expert, k;
    double spread; /* bt_plan_experts */
} shape_cost_t;

/* One layer on r rows at context c: weights read once (for experts, the
 * ones r rows are expected to touch), 2 flops per multiply-add, attention
 * over the cache. */
static double synth_layer(const plan_args_t *a, const shape_cost_t *sc, double r, double c)
{
    double flops = 2 * r * sc->attn_params + 4 * r * (c + r / 2) * sc->q_dim;
    double bytes = sc->attn_params * sc->bytes_w + (c + r) * sc->kv_row;
    if (sc->n_expert > 0) {
        const double touched = bt_plan_experts(sc->n_expert, sc->k, sc->spread, r);
        flops += 2 * r * sc->k * sc->ffn_params;
        bytes += touched * sc->ffn_params * sc->bytes_w;
    } else {
        flops += 2 * r * sc->ffn_params;
        bytes += sc->ffn_params * sc->bytes_w;
    }
    return roof(a, flops, bytes) + a->node_overhead_s;
}

static bt_status_t synth_profile(const plan_args_t *a, loaded_t *L)
{
    bt_synth_shape_t s;
    *L = (loaded_t){0};
    if (bt_synth_shape(a->shape, &s) != BT_OK)
        return BT_ERR_ARG;
    const char *tn = a->type ? a->type : "q4_k";
    const int type = bt_type_from_name(tn);
    uint64_t rb;
    if (type < 0 || bt_type_row_bytes((uint32_t)type, 256, &rb) != 0) {
        bt_log_error("--type: '%s' is not a weight type", tn);
        return BT_ERR_ARG;
    }
    const int hd = bt_synth_head_dim(&s);
    const double q_dim = (double)s.n_head * hd, kv_dim = (double)s.n_head_kv * hd;
    const bt_arch_t *arch = bt_arch_find(s.arch, strlen(s.arch));
    /* the attention's weights (MLA's own), as a model of the shape has them; the
     * shared experts every token runs go with them */
    const bt_hparams_t attn = {.arch = arch, .n_embd = s.n_embd, .n_head = s.n_head,
                               .n_head_kv = s.n_head_kv, .head_dim = hd, .n_rot = s.n_rot,
                               .d_qk = arch->mla ? s.d_qk : hd, .d_v = arch->mla ? s.d_v : hd,
                               .q_lora = s.q_lora, .kv_lora = s.kv_lora};
    const shape_cost_t sc = {
        .bytes_w = rb / 256.0,
        .attn_params = bt_layer_weights_per_token(&attn, 0) +
                       3.0 * s.n_embd * s.n_shared * s.n_ff_exp,
        .ffn_params = 3.0 * s.n_embd * (s.n_expert > 0 ? s.n_ff_exp : s.n_ff),
        .kv_row = 2 * kv_dim * 2,
        .q_dim = q_dim,
        .n_expert = s.n_expert,
        .k = s.n_expert_used,
        .spread = a->expert_spread >= 0 ? a->expert_spread : 1.0,
    };
    static const int rows[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};
    static const int ctx[] = {0, 4096, 32768};
    const int nr = 12, nc = 3;
    L->rows = malloc(sizeof rows);
    L->ctx = malloc(sizeof ctx);
    L->layer = malloc(sizeof(double) * nr * nc);
    L->head = malloc(sizeof(double) * nr);
    L->embed = malloc(sizeof(double) * nr);
    if (!L->rows || !L->ctx || !L->layer || !L->head || !L->embed)
        return BT_ERR_NOMEM;
    memcpy(L->rows, rows, sizeof rows);
    memcpy(L->ctx, ctx, sizeof ctx);
    const double head_params = (double)s.n_vocab * s.n_embd;
    for (int i = 0; i < nr; i++) {
        for (int c = 0; c < nc; c++)
            L->layer[c * nr + i] = synth_layer(a, &sc, rows[i], ctx[c]);
        L->head[i] = roof(a, 2.0 * rows[i] * head_params, head_params * sc.bytes_w);
        L->embed[i] = roof(a, 0, rows[i] * s.n_embd * sc.bytes_w);
    }
    L->p = (bt_profile_t){.n_layer = s.n_layer, .n_rows = nr, .rows = L->rows, .n_ctx = nc,
                          .ctx = L->ctx, .layer_s = L->layer, .head_s = L->head,
                          .embed_s = L->embed, .act_bytes_row = 4.0 * s.n_embd + 16,
                          .msg_bytes = 64, .spread = sc.spread}; /* in the costs already */
    L->threads = 1;
    L->hp = (bt_hparams_t){.n_vocab = s.n_vocab, .n_embd = s.n_embd, .n_layer = s.n_layer,
                           .n_head = s.n_head, .n_head_kv = s.n_head_kv, .head_dim = hd,
                           .n_ff = s.n_expert > 0 ? 0 : s.n_ff, .n_expert = s.n_expert,
                           .n_expert_used = s.n_expert_used, .n_ff_exp = s.n_ff_exp,
                           .arch = bt_arch_find(s.arch, strlen(s.arch))}; /* the shape's own */
    L->have_hp = L->hp.arch != NULL;
    L->weight_bytes = (double)bt_synth_n_params(&s) * sc.bytes_w;
    L->kv_pos_layer = sc.kv_row;
    snprintf(L->model, sizeof L->model,
             "%s %s (a shape on a node of %.3g TFLOP/s, %.3g GB/s, %.0f us a layer call)",
             a->shape, tn, a->node_flops / 1e12, a->node_Bps / 1e9, a->node_overhead_s * 1e6);
    return BT_OK;
}

/* ---- the node table ---- */

static int run_table(const plan_args_t *a, const loaded_t *L)
{
    const bt_profile_t *p = &L->p;
    if (a->shape)
        printf("Predicted (not measured): %s; %d rank%s a node", L->model, a->ranks_per_node,
               a->ranks_per_node > 1 ? "s" : "");
    else
        printf("Predicted (not measured): %s, %d threads a rank, %d rank%s a node of %d cores",
               L->model, L->threads, a->ranks_per_node, a->ranks_per_node > 1 ? "s" : "",
               a->cores_per_node);
    printf("; hops %.1f us, %.3g Gbit/s; pp%d, tg%d from an empty cache",
           a->latency_s * 1e6, a->bandwidth_Bps * 8 / 1e9, a->n_prompt, a->n_gen);
    if (a->tp_allreduce)
        printf("; tensor ranks add partial sums (--tp-comm allreduce)");
    /* the experts a call reads: the workload's assumption, recorded in /plan
     * (a measured profile without expert counts takes none) */
    const double spread = L->hp.n_expert > 0 && (a->shape || p->experts) ? p->spread : -1.0;
    if (spread >= 0)
        printf("; experts: a call of r rows chooses k + %.2f (E (1 - (1 - k/E)^r) - k)", spread);
    else if (p->experts != NULL)
        printf("; experts: as many as the profile's calls chose");
    printf(".\n");
    const double weights = a->model_bytes > 0 ? a->model_bytes : L->weight_bytes;
    const bool mem = weights > 0;
    printf("| nodes | stages | tp | split | -ub | pp t/s GPipe | pp t/s sync | pp speedup | pp "
           "efficiency");
    for (int i = 0; i < a->parallel.n; i++)
        printf(" | tg t/s %d seq%s (groups)", a->parallel.v[i], a->parallel.v[i] > 1 ? "s" : "");
    printf("%s |\n| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---:",
           mem ? " | GiB a node" : "");
    for (int i = 0; i < a->parallel.n + mem; i++)
        printf(" | ---:");
    printf(" |\n");
    double base = NAN;
    int *bounds = malloc(sizeof(int) * (size_t)(p->n_layer + 1));
    bt_plan_row_t *out =
        calloc((size_t)a->nodes.n * (size_t)a->tp.n * (size_t)a->parallel.n + 1, sizeof *out);
    int n_out = 0;
    char created[32];
    time_t now = time(NULL);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    const int R = a->ranks_per_node;
    for (int ni = 0; ni < a->nodes.n; ni++)
    for (int ti = 0; ti < a->tp.n; ti++) {
        /* S stages of T tensor ranks: inside a node while T <= its ranks,
         * else each stage across nodes (its gathers over the node links) */
        const int N = a->nodes.v[ni], T = a->tp.v[ti], S = N * R / T;
        if (N * R % T != 0)
            continue;
        if (S > p->n_layer) {
            printf("| %d | %d | %d | (more stages than the model's %d layers) |\n", N, S, T,
                   p->n_layer);
            continue;
        }
        if (T > 1 && !L->have_hp) {
            printf("| %d | %d | %d | (tensor ranks: the model file %s cannot be read for its "
                   "dimensions) |\n", N, S, T, L->model);
            continue;
        }
        const bt_plan_tensor_t tensor =
            T > 1 ? tensor_costs(&L->hp, T, a->tp_allreduce,
                                 T <= R ? a->tp_latency_s : a->latency_s,
                                 T <= R ? a->tp_bandwidth_Bps : a->bandwidth_Bps)
                  : (bt_plan_tensor_t){0};
        double best = -1;
        int best_ub = 0;
        double best_sync = 0;
        const int *ubs = a->ubatch.n ? a->ubatch.v : p->rows;
        const int n_ub = a->ubatch.n ? a->ubatch.n : p->n_rows;
        for (int u = 0; u < n_ub; u++) {
            if (ubs[u] < 8 && n_ub > 1)
                continue; /* tiny micro-batches: never the best prefill */
            split(p, S, ubs[u], a->n_prompt, bounds);
            bt_plan_pipe_t pp = {p,           S, bounds, a->latency_s, a->bandwidth_Bps,
                                 node_share(a, L), tensor, node_crowding(a, L)};
            const double ts = predict_pp(&pp, a->n_prompt, ubs[u], BT_PLAN_GPIPE).sim_ts;
            if (ts > best) {
                best = ts;
                best_ub = ubs[u];
                best_sync = predict_pp(&pp, a->n_prompt, ubs[u], BT_PLAN_SYNC).sim_ts;
            }
        }
        split(p, S, best_ub, a->n_prompt, bounds);
        char sp[256];
        bt_partition_split_str(bounds, S, sp, sizeof sp);
        if (S > 8) { /* the range of layers a stage, not every stage */
            int lo = p->n_layer, hi = 0;
            for (int s = 0; s < S; s++) {
                const int l = bounds[s + 1] - bounds[s];
                lo = l < lo ? l : lo;
                hi = l > hi ? l : hi;
            }
            snprintf(sp, sizeof sp, lo == hi ? "%d each" : "%d-%d each", lo, hi);
        }
        bt_plan_pipe_t pp = {p,      S, bounds, a->latency_s, a->bandwidth_Bps, node_share(a, L),
                             tensor, node_crowding(a, L)};
        if (isnan(base))
            base = best / N;
        printf("| %d | %d | %d | %s | %d | %.1f | %.1f | %.2f | %.0f%%", N, S, T, sp, best_ub,
               best, best_sync, best / base, 100.0 * best / (base * N));
        bt_plan_row_t *row0 = out + n_out;
        for (int i = 0; i < a->parallel.n; i++) {
            const int P = a->parallel.v[i];
            double bt = 0;
            int bg = 1;
            for (int G = 1; G <= 2 * S && G <= P; G++) {
                const double ts = predict_tg(&pp, a->n_gen, P, G).model_ts;
                if (ts > bt * 1.001) {
                    bt = ts;
                    bg = G;
                }
            }
            printf(" | %.1f (%d)", bt, bg);
            if (out != NULL) {
                bt_plan_row_t *o = &out[n_out++];
                *o = (bt_plan_row_t){.nodes = N, .stages = S, .ranks_per_node = R, .tp = T,
                                     .n_ubatch = best_ub, .n_prompt = a->n_prompt,
                                     .n_gen = a->n_gen, .latency_us = a->latency_s * 1e6,
                                     .bandwidth_MBps = a->bandwidth_Bps / 1e6,
                                     .pp_gpipe_ts = best, .pp_sync_ts = best_sync,
                                     .pp_speedup = best / base,
                                     .pp_efficiency = best / (base * N), .n_parallel = P,
                                     .n_groups = bg, .tg_ts = bt,
                                     .expert_spread = spread};
                snprintf(o->created, sizeof o->created, "%s", created);
                snprintf(o->source, sizeof o->source, "%s", L->model);
                bt_partition_split_str(bounds, S, o->split, sizeof o->split);
            }
        }
        if (mem) { /* the busiest node: its layers' weights and the KV of the largest P */
            int most = 0; /* (a measured profile's weights count packed copies) */
            const int per = T <= R ? R / T : 1; /* stages a node holds (of a wider one: R/T) */
            for (int s = 0; s < S; s += per) {
                const int e = s + per < S ? s + per : S;
                most = bounds[e] - bounds[s] > most ? bounds[e] - bounds[s] : most;
            }
            const int P = a->parallel.v[a->parallel.n - 1];
            const double part = T <= R ? 1.0 : (double)R / T;
            const double gib = part *
                               (weights * most / p->n_layer +
                                (double)most * P * (a->n_prompt + a->n_gen) * L->kv_pos_layer) /
                               1073741824.0;
            printf(" | %.3g%s", gib, a->node_mem > 0 && gib * 1073741824.0 > a->node_mem
                                         ? " (does not fit)" : "");
            for (bt_plan_row_t *o = row0; out != NULL && o < out + n_out; o++)
                o->node_gib = gib;
        }
        printf(" |\n");
        if (ni == a->nodes.n - 1 && a->trace != NULL && a->compare == NULL) {
            bt_plan_sim_t sim;
            if (bt_plan_simulate_prefill(&pp, a->n_prompt, best_ub, BT_PLAN_GPIPE, true, &sim) ==
                BT_OK) {
                bt_plan_write_trace(&sim, a->trace);
                bt_plan_sim_free(&sim);
            }
        }
    }
    free(bounds);
    printf("pp speedup: against the first row's t/s per node; efficiency: speedup / nodes. "
           "Groups: the decode group count the model picks (baton --groups).\n");
    int rc = 0;
    if (a->hdf5 != NULL && (out == NULL || bt_h5_append_plan(a->hdf5, out, n_out) != BT_OK))
        rc = 1;
    else if (a->hdf5 != NULL)
        printf("plan: %d rows appended to %s:/plan\n", n_out, a->hdf5);
    free(out);
    return rc;
}

/* ---- predictions against a results file ---- */

/* Layer counts "15/15" into bounds; false when they do not add up. */
static bool parse_split(const char *s, int S, int n_layer, int *bounds)
{
    bounds[0] = 0;
    for (int i = 0; i < S; i++) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1)
            return false;
        bounds[i + 1] = bounds[i] + (int)v;
        s = *end == '/' ? end + 1 : end;
    }
    return bounds[S] == n_layer;
}

static int run_compare(const plan_args_t *a)
{
    bt_h5_result_t *res;
    int n;
    if (bt_h5_read_results(a->compare, &res, &n) != BT_OK)
        return 1;
    double *err = malloc(sizeof(double) * (size_t)(n + 1));
    int k = 0, worst = -1, skipped = 0;
    double worst_err = 0;
    loaded_t cache[8];
    int n_cache = 0;
    printf("Measured (%s) against predicted (profile %s; the model's figure, the simulator's "
           "in brackets):\n", a->compare, a->profile);
    printf("| test | ranks | tp | threads | -ub | pipeline | seqs | split | measured t/s | "
           "predicted t/s | error |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | "
           "---: | ---: |\n");
    bool traced = false;
    for (int i = 0; i < n; i++) {
        const bt_h5_result_t *r = &res[i];
        loaded_t *L = NULL;
        for (int c = 0; c < n_cache; c++)
            if (cache[c].threads == r->n_threads)
                L = &cache[c];
        if (L == NULL && n_cache < 8) {
            bt_log_capture(1);
            if (load_profile(a->profile, r->n_threads, &cache[n_cache]) == BT_OK)
                L = &cache[n_cache++];
            bt_log_flush_captured(0);
            bt_log_capture(0);
        }
        /* S stages of T tensor ranks (a version 4 row: T = 1) */
        const int T = r->tp > 1 ? r->tp : 1, S = r->n_ranks / T;
        int bounds[65];
        if (L == NULL || S > 64 || r->n_ranks % T != 0 || (T > 1 && !L->have_hp) ||
            !parse_split(r->layer_split, S, L->p.n_layer, bounds)) {
            skipped++;
            continue;
        }
        double lat = a->latency_s, bw = a->bandwidth_Bps;
        double tlat = a->tp_latency_s, tbw = a->tp_bandwidth_Bps;
        if (r->n_ranks > 1)
            load_links(a->links ? a->links : a->compare, a->links ? -1 : r->run_id, &lat, &bw,
                       &tlat, &tbw);
        /* ranks of one run here share one node; the ranks that compute at
         * once (all with GPipe, one stage with --pipeline 0 or one decode
         * group, one a group in flight; a stage's tensor ranks all at once)
         * share its cores and its memory, and so do the waiting ones when
         * the ranks outnumber the cores (sharing) */
        bt_plan_pipe_t pp = {&L->p, S, bounds, lat, bw, 1.0, {0}, 0.0};
        if (T > 1) {
            pp.tensor = tensor_costs(&L->hp, T, !strcmp(r->tp_comm, "allreduce"), tlat, tbw);
            if (r->gather_latency_us > 0 && r->gather_bandwidth_MBps > 0) {
                /* the run probed its gathers themselves: their figures, not the links' */
                pp.tensor.latency_s = r->gather_latency_us * 1e-6;
                pp.tensor.bandwidth_Bps = r->gather_bandwidth_MBps * 1e6;
            }
        }
        /* the experts this row's calls chose (version 7), else --expert-spread's */
        const double spread = bt_plan_spread(L->p.n_expert, L->p.n_expert_used, r->expert_rows,
                                             r->expert_count);
        L->p.spread = spread >= 0 ? spread : a->expert_spread;
        pred_t pr;
        const bool is_pp = r->n_gen == 0 && r->n_prompt > 0, is_tg = r->n_prompt == 0;
        const int G = r->pipeline ? (r->n_parallel < S ? r->n_parallel : S) : 1;
        const int computing = (is_tg ? G : r->pipeline ? S : 1) * T, cores = a->cores_per_node;
        pp.slowdown = bt_plan_slowdown(bt_plan_sharing(computing, r->n_ranks, r->n_threads, cores),
                                       r->n_threads, cores);
        pp.crowding = bt_plan_crowding(computing, r->n_threads, cores);
        if (is_pp && r->n_parallel == 1) {
            pr = predict_pp(&pp, r->n_prompt, r->n_ubatch, r->pipeline ? BT_PLAN_GPIPE
                                                                        : BT_PLAN_SYNC);
        } else if (is_tg) {
            pr = predict_tg(&pp, r->n_gen, r->n_parallel, G);
        } else {
            skipped++;
            continue;
        }
        const double e = (pr.sim_ts - r->avg_ts) / r->avg_ts;
        err[k++] = fabs(e);
        if (fabs(e) > worst_err) {
            worst_err = fabs(e);
            worst = i;
        }
        /* tp names the scheme where the ranks add partial sums */
        printf("| %s | %d | %d%s | %d | %d | %d | %d | %s | %.1f | %.1f (%.1f) | %+.0f%% |\n",
               r->test, r->n_ranks, T, !strcmp(r->tp_comm, "allreduce") ? " allreduce" : "",
               r->n_threads, r->n_ubatch, r->pipeline, r->n_parallel, r->layer_split, r->avg_ts,
               pr.model_ts, pr.sim_ts, 100 * e);
        if (a->trace != NULL && !traced && is_pp && r->n_ranks > 1) {
            bt_plan_sim_t sim;
            if (bt_plan_simulate_prefill(&pp, r->n_prompt, r->n_ubatch,
                                         r->pipeline ? BT_PLAN_GPIPE : BT_PLAN_SYNC, true,
                                         &sim) == BT_OK) {
                traced = bt_plan_write_trace(&sim, a->trace) == BT_OK;
                bt_plan_sim_free(&sim);
            }
        }
    }
    int rc = 0;
    if (k > 0) {
        const double med = bt_median(err, k);
        printf("compare: %d rows, median absolute error %.1f%%, worst %.1f%% (%s, %d ranks, "
               "-ub %d, pipeline %d, %d seqs); %d rows skipped (no profile at their thread "
               "count, a test the model does not cover, or tensor ranks without the model "
               "file to size them)\n",
               k, 100 * med, 100 * worst_err, res[worst].test, res[worst].n_ranks,
               res[worst].n_ubatch, res[worst].pipeline, res[worst].n_parallel, skipped);
    } else {
        bt_log_error("--compare: no row of %s could be predicted (%d skipped: is there a "
                     "profile at their thread count?)", a->compare, skipped);
        rc = 1;
    }
    for (int c = 0; c < n_cache; c++)
        loaded_free(&cache[c]);
    free(err);
    free(res);
    return rc;
}

int main(int argc, char **argv)
{
    plan_args_t a;
    bt_status_t st = parse_args(argc, argv, &a);
    int rc = 2;
    if (st == BT_OK && a.help) {
        usage(stdout);
        rc = 0;
    } else if (st != BT_OK) {
        usage(stderr);
    } else if (a.compare != NULL) {
        rc = run_compare(&a);
    } else {
        loaded_t L;
        if ((a.shape ? synth_profile(&a, &L) : load_profile(a.profile, a.threads, &L)) != BT_OK)
            rc = 1;
        else if (a.links != NULL && load_links(a.links, -1, &a.latency_s, &a.bandwidth_Bps,
                                               &a.tp_latency_s, &a.tp_bandwidth_Bps) != BT_OK) {
            bt_log_error("--links: %s has no /links rows (run baton-bench on 2 or more ranks "
                         "with --hdf5)", a.links);
            rc = 1;
        } else {
            if (!a.shape)
                L.p.spread = a.expert_spread;
            rc = run_table(&a, &L);
        }
        loaded_free(&L); /* zeroed first by both loaders */
    }
    bt_int_list_free(&a.nodes);
    bt_int_list_free(&a.ubatch);
    bt_int_list_free(&a.parallel);
    bt_int_list_free(&a.tp);
    return rc;
}
