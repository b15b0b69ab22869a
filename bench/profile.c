/* profile.c: `baton-bench --profile`: the costs a planner needs (plan.h). */
#include "profile.h"

#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forward.h"
#include "kernels/kernels.h"
#include "model.h"
#include "rng.h"
#include "sampler.h"
#include "stages/transport.h"

/* ---- readers: the node's other cores reading memory ---- */

/* Each reads its own buffer, well past a core's share of a cache, while
 * `go` is set, and spins without touching memory while it is not: 128 MiB
 * each, less on a node of many cores (4 GiB in all, at least 32 MiB each,
 * still 8 or more times a core's share of today's caches). */
#define READ_ALL ((size_t)4 << 30)
#define READ_MIN ((size_t)32 << 20)
#define READ_MAX ((size_t)128 << 20)

#define READERS_MAX 256

typedef struct readers readers_t;

typedef struct reader {
    readers_t *all;
    pthread_t thread;
    float *buf;
} reader_t;

struct readers {
    reader_t r[READERS_MAX];
    size_t bytes; /* each buffer's */
    int n;
    atomic_int go, stop;
};

/* Sums its buffer a MiB at a time with the read-bandwidth loop of
 * --kernels (bt_peak_sum) while `go` is set. */
static void *reader(void *arg)
{
    const reader_t *me = arg;
    readers_t *rd = me->all;
    const size_t n = rd->bytes / sizeof(float), chunk = ((size_t)1 << 20) / sizeof(float);
    volatile float sink = 0.0f;
    for (size_t i = 0; i < n; i++) /* every page touched first */
        me->buf[i] = (float)(i & 7);
    for (size_t at = 0; !atomic_load_explicit(&rd->stop, memory_order_relaxed);) {
        if (!atomic_load_explicit(&rd->go, memory_order_relaxed))
            continue;
        sink += bt_peak_sum(me->buf + at, chunk);
        at = at + chunk < n ? at + chunk : 0;
    }
    (void)sink;
    return NULL;
}

/* Starts up to n readers, paused (fewer when memory or threads run out). */
static void readers_start(readers_t *rd, int n)
{
    atomic_store(&rd->go, 0);
    atomic_store(&rd->stop, 0);
    rd->n = 0;
    n = n < READERS_MAX ? n : READERS_MAX;
    if (n <= 0)
        return;
    const size_t each = READ_ALL / (size_t)n, mib = (size_t)1 << 20; /* whole MiB: whole chunks */
    rd->bytes = (each < READ_MIN ? READ_MIN : each > READ_MAX ? READ_MAX : each) / mib * mib;
    for (int i = 0; i < n; i++) {
        reader_t *r = &rd->r[i];
        *r = (reader_t){.all = rd, .buf = malloc(rd->bytes)};
        if (r->buf == NULL || pthread_create(&r->thread, NULL, reader, r) != 0) {
            free(r->buf);
            break;
        }
        rd->n++;
    }
    if (rd->n > 0)
        usleep(300000); /* their pages touched */
}

static void readers_stop(readers_t *rd)
{
    atomic_store(&rd->stop, 1);
    for (int i = 0; i < rd->n; i++) {
        pthread_join(rd->r[i].thread, NULL);
        free(rd->r[i].buf);
    }
    rd->n = 0;
}

/* ---- timing ---- */

/* P_SAMPLE: the last stage's choice of a token from each row's logits
 * (greedy, as baton-bench decodes), the serve engine's own work per row */
typedef enum { P_LAYERS, P_HEAD, P_EMBED, P_SAMPLE, P_DENSE, P_EXPERT } part_t;

typedef struct probe {
    bt_forward_t *f;
    float *x, *x0, *logits; /* x0: -ub embedded rows of random tokens */
    int32_t *ids;
    bt_row_t *rows;
    int ubatch, turn;
    bool same; /* every row the first of x0 (time_expert_one) */
} probe_t;

/* The n rows of x0 the next call starts from: each call other tokens
 * (while n < -ub), so a layer with experts routes each call anew, as in
 * decode, instead of finding the last call's experts in the caches. */
static const float *next_rows(probe_t *pr, int n)
{
    const int at = (int)((long)pr->turn++ * n % (pr->ubatch - n + 1));
    return pr->x0 + (size_t)at * (size_t)pr->f->m->hp.n_embd;
}

/* The layers a part runs: all of them, or one kind where layers differ
 * (the leading dense layers of a DeepSeek model, then its expert layers). */
static void part_layers(const bt_hparams_t *hp, part_t part, int *l0, int *l1)
{
    *l0 = part == P_EXPERT ? hp->n_dense : 0;
    *l1 = part == P_DENSE ? hp->n_dense : hp->n_layer;
}

static bt_status_t run_part(probe_t *pr, part_t part, int n, int ctx)
{
    const size_t row = (size_t)pr->f->m->hp.n_embd;
    if (pr->same)
        for (int r = 0; r < n; r++)
            memcpy(pr->x + (size_t)r * row, pr->x0, sizeof(float) * row);
    else
        memcpy(pr->x, next_rows(pr, n), sizeof(float) * (size_t)n * row);
    int l0, l1;
    switch (part) {
    case P_LAYERS: case P_DENSE: case P_EXPERT:
        for (int r = 0; r < n; r++)
            pr->rows[r] = (bt_row_t){0, ctx + r, 0, 0};
        part_layers(&pr->f->m->hp, part, &l0, &l1);
        return bt_forward_rows_range(pr->f, pr->x, pr->rows, n, l0, l1);
    case P_HEAD:
        bt_forward_head(pr->f, pr->x, n, pr->logits);
        return BT_OK;
    case P_SAMPLE: { /* the head's last logits */
        volatile int32_t chosen = 0;
        for (int r = 0; r < n; r++)
            chosen += bt_sample_greedy(pr->logits + (size_t)r * pr->f->m->hp.n_vocab,
                                       pr->f->m->hp.n_vocab);
        (void)chosen;
        return BT_OK;
    }
    default:
        return bt_forward_embed(pr->f, pr->ids, n, pr->x);
    }
}

static bt_status_t time_call(probe_t *pr, part_t part, int n, int ctx, double *t)
{
    const double t0 = bt_now();
    const bt_status_t st = run_part(pr, part, n, ctx);
    *t = bt_now() - t0;
    return st;
}

/* The median of up to 7 timed calls of a part, at least 3, until 0.2 s,
 * after a warm-up one. With rd (readers running): each call alone is
 * followed by one while the readers read (*shared, their median), so
 * both see the same moment of a noisy machine. The head is timed as a
 * step meets it, after the layers on the same rows (untimed): called
 * again and again alone, a head that fits in the last-level cache came
 * from it (smollm2-135m's 56 MB on a Xeon with a large L3: 26 GB/s of a
 * core's 15.8), where in a step every layer's weights have streamed
 * through since. */
static bt_status_t time_part(probe_t *pr, part_t part, int n, int ctx, readers_t *rd,
                             double *median, double *shared)
{
    double t[7], u[7];
    int k = 0;
    const double t_end = bt_now() + (rd != NULL ? 0.4 : 0.2);
    bt_status_t st = run_part(pr, part, n, ctx); /* warm-up */
    while (st == BT_OK && k < 7 && (k < 3 || bt_now() < t_end)) {
        if (part == P_HEAD)
            st = run_part(pr, P_LAYERS, n, ctx);
        if (st == BT_OK)
            st = time_call(pr, part, n, ctx, &t[k]);
        if (st == BT_OK && rd != NULL) {
            atomic_store(&rd->go, 1);
            st = time_call(pr, part, n, ctx, &u[k]);
            atomic_store(&rd->go, 0);
        }
        k++;
    }
    *median = k > 0 ? bt_median(t, k) : 0.0;
    if (rd != NULL)
        *shared = k > 0 ? bt_median(u, k) : 0.0;
    return st;
}

/* The median time of a part on n rows at context ctx, a layer (of the
 * part's), and the distinct experts its calls chose (mean). */
static bt_status_t time_layer(probe_t *pr, part_t part, int n, int ctx, readers_t *rd,
                              double *sec, double *shared, double *experts)
{
    const bt_expert_count_t was = pr->f->counted;
    const bt_status_t st = time_part(pr, part, n, ctx, rd, sec, shared);
    int l0, l1;
    part_layers(&pr->f->m->hp, part, &l0, &l1);
    *sec /= l1 - l0;
    if (shared != NULL)
        *shared /= l1 - l0;
    const uint64_t calls = pr->f->counted.calls - was.calls;
    *experts = calls > 0 ? (double)(pr->f->counted.experts - was.experts) / (double)calls : 0.0;
    return st;
}

/* What one more distinct expert costs a layer call (the "expert_one" row):
 * n rows of one token at positions 0.. (rows that stay alike through
 * every layer, so choose the same k experts) against n rows of different
 * tokens there, which choose more: the same (row, expert) pairs, attention
 * and norms, so the time between them is the further experts' (weights
 * read once each). The median of EXPERT_ONE_PAIRS such pairs, each timed
 * back to back (a difference of two times is noisier than either: two
 * single pairs of one VM gave 20.4 and 27.3 us). Overwrites the cache's
 * first n positions: run last. */
#define EXPERT_ONE_PAIRS 7
static bt_status_t time_expert_one(probe_t *pr, part_t part, int n, double *sec, double *more)
{
    double each[EXPERT_ONE_PAIRS], chose[EXPERT_ONE_PAIRS];
    bt_status_t st = BT_OK;
    int k = 0;
    for (; k < EXPERT_ONE_PAIRS && st == BT_OK; k++) {
        double t_diff, t_same, d_diff, d_same;
        st = time_layer(pr, part, n, 0, NULL, &t_diff, NULL, &d_diff);
        pr->same = true;
        if (st == BT_OK)
            st = time_layer(pr, part, n, 0, NULL, &t_same, NULL, &d_same);
        pr->same = false;
        chose[k] = d_diff - d_same;
        each[k] = chose[k] >= 1 ? (t_diff - t_same) / chose[k] : 0.0;
    }
    *sec = bt_median(each, k);
    *more = bt_median(chose, k);
    return st;
}

/* The ops of the "rest" rows: every product and attention free (zeros
 * out, as fast as memory writes them), so a layer's time is what it does
 * besides them: norms, rope, activations, routing and top-k, the experts'
 * grouping and combine, residual adds. Zeros keep every value finite (a
 * router of zeros chooses the first k experts, as many as real rows). */
static void free_matmul(float *restrict out, const bt_matrix_t *w, const float *restrict x,
                        int n_tok, const bt_scratch_t *s)
{
    (void)x, (void)s;
    memset(out, 0, sizeof(float) * (size_t)n_tok * (size_t)w->n_out);
}

static void free_many(const bt_matmul_job_t *jobs, int n_jobs, const bt_scratch_t *s)
{
    for (int i = 0; i < n_jobs; i++)
        free_matmul(jobs[i].out, &jobs[i].w, jobs[i].x, jobs[i].n_tok, s);
}

static void free_attention(float *restrict out, const float *restrict q, const void *k,
                           const void *v, uint32_t kv_type, int n_tok, int pos0,
                           const bt_attn_t *a, const bt_scratch_t *s)
{
    (void)q, (void)k, (void)v, (void)kv_type, (void)pos0, (void)s;
    memset(out, 0, sizeof(float) * (size_t)n_tok * (size_t)a->n_head * (size_t)a->head_dim);
}

static const bt_ops_t products_free = {"products free", free_matmul, free_many, free_attention};

/* The "rest" of a layer on n rows at context ctx: its time with
 * products_free (time_layer's). Tensor ranks each do all of it (baton-plan
 * divides only the layer's products and attention among them). */
static bt_status_t time_rest(probe_t *pr, int n, int ctx, double *sec)
{
    const bt_ops_t *ops = pr->f->ops;
    double experts;
    pr->f->ops = &products_free;
    const bt_status_t st = time_layer(pr, P_LAYERS, n, ctx, NULL, sec, NULL, &experts);
    pr->f->ops = ops;
    return st;
}

static bt_profile_row_t profile_row(const bt_profile_params_t *pp, const bt_hparams_t *hp,
                                    const char *kind, int rows, int ctx, double sec,
                                    double act_row, double held, double msg)
{
    bt_profile_row_t r = {.n_rows = rows, .n_ctx = ctx, .n_threads = pp->threads,
                          .n_layer = hp->n_layer, .seconds = sec, .act_bytes_row = act_row,
                          .weight_bytes = held, .msg_bytes = msg};
    snprintf(r.model_filename, sizeof r.model_filename, "%s", pp->model);
    snprintf(r.kind, sizeof r.kind, "%s", kind);
    r.kv_bytes_pos = (double)bt_kv_cache_bytes(1, 1, 1, hp->n_head_kv * hp->head_dim, pp->kv_type);
    return r;
}

bt_status_t bt_bench_profile(const bt_profile_params_t *pp, bt_profile_row_t **out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    bt_model_t *m = NULL;
    bt_status_t st = bt_model_load(pp->model, 0, -1, true, true, &m);
    if (st == BT_OK)
        st = bt_model_place_weights(m, true);
    if (st == BT_OK && pp->ops == &bt_ops_cpu)
        st = bt_model_pack(m);
    if (st != BT_OK) {
        bt_model_free(m);
        return st;
    }
    const bt_hparams_t *hp = &m->hp;
    int max_ctx = 0;
    for (int i = 0; i < pp->n_ctx; i++)
        max_ctx = pp->ctx[i] > max_ctx ? pp->ctx[i] : max_ctx;
    const int n_ctx = max_ctx + pp->ubatch;
    int n_rows = 0; /* 1, 2, 4, ... and ub itself */
    int rows[32];
    for (int r = 1; r < pp->ubatch && n_rows < 31; r *= 2)
        rows[n_rows++] = r;
    rows[n_rows++] = pp->ubatch;
    probe_t pr = {.ubatch = pp->ubatch};
    st = bt_forward_init(m, pp->ops, n_ctx, 1, pp->ubatch, pp->threads, pp->kv_type, &pr.f);
    const size_t cap = (size_t)n_rows * (3 * (size_t)pp->n_ctx + 5) + 1; /* + expert_one */
    bt_profile_row_t *res = calloc(cap, sizeof *res);
    pr.x = malloc(sizeof(float) * (size_t)pp->ubatch * (size_t)hp->n_embd);
    pr.x0 = malloc(sizeof(float) * (size_t)pp->ubatch * (size_t)hp->n_embd);
    pr.logits = malloc(sizeof(float) * (size_t)pp->ubatch * (size_t)hp->n_vocab);
    pr.ids = malloc(sizeof(int32_t) * (size_t)pp->ubatch);
    pr.rows = malloc(sizeof(bt_row_t) * (size_t)pp->ubatch);
    if (st == BT_OK && (!res || !pr.x || !pr.x0 || !pr.logits || !pr.ids || !pr.rows)) {
        bt_log_error("--profile: cannot allocate buffers for %d rows", pp->ubatch);
        st = BT_ERR_NOMEM;
    }
    int k = 0;
    if (st == BT_OK) {
        bt_rng_t rng;
        bt_rng_seed(&rng, 1);
        for (int i = 0; i < pp->ubatch; i++)
            pr.ids[i] = (int32_t)(bt_rng_next(&rng) % (uint64_t)hp->n_vocab);
        st = bt_forward_embed(pr.f, pr.ids, pp->ubatch, pr.x0);
    }
    /* the cache holds real keys and values up to the largest context */
    for (int pos = 0; pos < max_ctx && st == BT_OK; pos += pp->ubatch) {
        const int n = max_ctx - pos < pp->ubatch ? max_ctx - pos : pp->ubatch;
        memcpy(pr.x, pr.x0, sizeof(float) * (size_t)n * (size_t)hp->n_embd);
        st = bt_forward_layers(pr.f, pr.x, n, pos);
    }
    const double act_row = (double)(bt_act_bytes(2, hp->n_embd) - bt_act_bytes(1, hp->n_embd));
    double held = 0.0; /* the weights as the stages will hold them (bt_model_memory) */
    uint64_t *lb = malloc(sizeof *lb * (size_t)hp->n_layer), e, h, every;
    if (lb != NULL) {
        bt_model_memory(m, pp->ops == &bt_ops_cpu, false, lb, &e, &h, &every);
        held = (double)(e + h + every);
        for (int l = 0; l < hp->n_layer; l++)
            held += (double)lb[l];
        free(lb);
    }
    const double msg = (double)bt_act_bytes(1, hp->n_embd) - act_row;
    /* At the smallest context, each layer call alone is paired with one
     * while every other core of the node reads memory ("shared" rows,
     * after the others). */
    int min_ctx = pp->ctx[0];
    for (int i = 1; i < pp->n_ctx; i++)
        min_ctx = pp->ctx[i] < min_ctx ? pp->ctx[i] : min_ctx;
    readers_t rd;
    readers_start(&rd, omp_get_num_procs() - pp->threads);
    double shared[32];
    /* layers of two kinds (a DeepSeek model's dense first ones): each kind
     * timed too, "dense" and "expert" rows beside the average "layer" ones */
    static const char *const kinds[] = {"layer", "head", "embed", "sample", "dense", "expert"};
    const int last = hp->n_dense > 0 && hp->n_dense < hp->n_layer ? P_EXPERT : P_SAMPLE;
    for (int part = P_LAYERS; part <= last && st == BT_OK; part++) {
        const bool layers = part == P_LAYERS || part == P_DENSE || part == P_EXPERT;
        for (int c = 0; c < (layers ? pp->n_ctx : 1) && st == BT_OK; c++)
            for (int i = 0; i < n_rows && st == BT_OK; i++) {
                double sec;
                const int ctx = layers ? pp->ctx[c] : 0;
                const bool pair = part == P_LAYERS && ctx == min_ctx && rd.n > 0;
                double experts = 0;
                st = layers ? time_layer(&pr, (part_t)part, rows[i], ctx, pair ? &rd : NULL,
                                         &sec, pair ? &shared[i] : NULL, &experts)
                            : time_part(&pr, (part_t)part, rows[i], ctx, NULL, &sec, NULL);
                res[k] = profile_row(pp, hp, kinds[part], rows[i], ctx, sec, act_row, held, msg);
                res[k++].experts = experts;
            }
    }
    for (int i = 0; i < n_rows && st == BT_OK; i++) {
        double sec;
        st = time_rest(&pr, rows[i], min_ctx, &sec);
        res[k++] = profile_row(pp, hp, "rest", rows[i], min_ctx, sec, act_row, held, msg);
    }
    /* the experts' layers (all, or those past DeepSeek's dense ones) on 16 rows */
    const int one_rows = pp->ubatch < 16 ? pp->ubatch : 16;
    if (st == BT_OK && hp->n_expert > 0 && one_rows > 1) {
        double sec, more;
        st = time_expert_one(&pr, last == P_EXPERT ? P_EXPERT : P_LAYERS, one_rows, &sec, &more);
        res[k] = profile_row(pp, hp, "expert_one", one_rows, 0, sec, act_row, held, msg);
        res[k++].experts = more;
    }
    for (int i = 0; i < n_rows && st == BT_OK && rd.n > 0; i++)
        res[k++] = profile_row(pp, hp, "shared", rows[i], min_ctx, shared[i], act_row, held,
                               msg);
    readers_stop(&rd);
    free(pr.x);
    free(pr.x0);
    free(pr.logits);
    free(pr.ids);
    free(pr.rows);
    bt_forward_free(pr.f);
    bt_model_free(m);
    if (st != BT_OK) {
        free(res);
        return st;
    }
    *out = res;
    *n_out = k;
    return BT_OK;
}

void bt_profile_print(FILE *f, const bt_profile_row_t *rows, int n)
{
    bool experts = false;
    for (int i = 0; i < n; i++)
        experts |= rows[i].experts > 0;
    fprintf(f, "| part | rows | context | threads | ms a call | us a row |%s\n",
            experts ? " experts |" : "");
    fprintf(f, "| --- | ---: | ---: | ---: | ---: | ---: |%s\n", experts ? " ---: |" : "");
    for (int i = 0; i < n; i++) {
        fprintf(f, "| %s | %d | %d | %d | %.4f | %.2f |", rows[i].kind, rows[i].n_rows,
                rows[i].n_ctx, rows[i].n_threads, rows[i].seconds * 1e3,
                rows[i].seconds * 1e6 / rows[i].n_rows);
        if (experts)
            fprintf(f, rows[i].experts > 0 ? " %.1f |" : " |", rows[i].experts);
        fputc('\n', f);
    }
}
