/* tensor.c: a tensor-parallel stage's commands and gathers (tensor.h). */
#include "stages/tensor.h"

#include <stdlib.h>
#include <string.h>

#include "stages/transport.h"

/* What the leader asks of its followers. */
typedef enum bt_tp_op {
    BT_TP_LAYERS = 1, /* rows and activations follow: run the layers */
    BT_TP_HEAD = 2,   /* activations follow: compute this rank's logits */
    BT_TP_END = 3,    /* the call ended with status */
} bt_tp_op_t;

typedef struct tp_cmd {
    int32_t op, n, status, mb; /* mb: the leader's micro-batch, for the followers' trace */
} tp_cmd_t;

/* ---- the gathers a layer calls (bt_gather_t) ---- */

/* Records a gather that began at tr0 (trace time) and received floats. */
static void count(bt_tensor_t *t, double tr0, size_t floats)
{
    bt_trace_span(t->trace, BT_EV_COLLECTIVE, t->mb, tr0);
    t->n_gathers++;
    t->gather_floats += floats;
}

static bt_status_t gather_cols(void *ctx, float *out, const float *mine, int n_rows, const int *at,
                               int unit)
{
    bt_tensor_t *t = ctx;
    const double tr0 = bt_trace_now(t->trace);
    const size_t width = (size_t)at[t->size] * (size_t)unit;
    for (int r = 0; r < t->size; r++) {
        t->counts[r] = n_rows * (at[r + 1] - at[r]) * unit;
        t->displs[r] = n_rows * at[r] * unit;
    }
    /* one row: the blocks side by side are the row itself */
    float *dst = n_rows == 1 ? out : t->staging;
    BT_MPI_CHECK(MPI_Allgatherv(mine, t->counts[t->rank], MPI_FLOAT, dst, t->counts, t->displs,
                                MPI_FLOAT, t->comm));
    if (n_rows > 1)
        for (int r = 0; r < t->size; r++) {
            const size_t w = (size_t)(at[r + 1] - at[r]) * unit, col = (size_t)at[r] * unit;
            for (int i = 0; i < n_rows; i++)
                memcpy(out + (size_t)i * width + col, t->staging + t->displs[r] + i * w,
                       w * sizeof(float));
        }
    count(t, tr0, (size_t)n_rows * width - (size_t)t->counts[t->rank]);
    return BT_OK;
}

static bt_status_t gather_runs(void *ctx, float *buf, const int *at, int unit)
{
    bt_tensor_t *t = ctx;
    const double tr0 = bt_trace_now(t->trace);
    for (int r = 0; r < t->size; r++) {
        t->counts[r] = (at[r + 1] - at[r]) * unit;
        t->displs[r] = at[r] * unit;
    }
    BT_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, t->counts, t->displs,
                                MPI_FLOAT, t->comm));
    count(t, tr0, (size_t)(at[t->size] - at[0]) * unit - (size_t)t->counts[t->rank]);
    return BT_OK;
}

/* The share's sum (bt_gather_t.sum). Two ranks: each gets the other's n
 * floats (MPI_Allgather) and adds the two. More: the n floats are cut into
 * one piece per rank; rank r gets every rank's piece r (MPI_Alltoallv),
 * adds them, and the sums are gathered (MPI_Allgatherv): a ring
 * all-reduce's 2 (T - 1) / T n floats a rank instead of (T - 1) n. Either
 * way each element is added on one rank, in rank order, so every rank
 * holds the same bits, whatever the number of rows. */
static bt_status_t sum_ranks(void *ctx, float *out, const float *mine, int n)
{
    bt_tensor_t *t = ctx;
    const double tr0 = bt_trace_now(t->trace);
    const int T = t->size;
    /* the piece this rank adds, [lo, lo + len), and the floats it receives:
     * in staging, rank r's copy of the piece at r * len */
    int lo = 0, len = n;
    size_t received = (size_t)n;
    if (T == 2) {
        BT_MPI_CHECK(MPI_Allgather(mine, n, MPI_FLOAT, t->staging, n, MPI_FLOAT, t->comm));
    } else {
        for (int r = 0; r < T; r++) {
            t->displs[r] = (int)((int64_t)n * r / T);
            t->counts[r] = (int)((int64_t)n * (r + 1) / T) - t->displs[r];
        }
        lo = t->displs[t->rank], len = t->counts[t->rank];
        for (int r = 0; r < T; r++) {
            t->rcounts[r] = len;
            t->rdispls[r] = r * len;
        }
        BT_MPI_CHECK(MPI_Alltoallv(mine, t->counts, t->displs, MPI_FLOAT, t->staging, t->rcounts,
                                   t->rdispls, MPI_FLOAT, t->comm));
        received = 2 * ((size_t)n - (size_t)len);
    }
    for (int i = 0; i < len; i++) {
        float v = t->staging[i];
        for (int r = 1; r < T; r++)
            v += t->staging[(size_t)r * (size_t)len + i];
        out[lo + i] = v;
    }
    if (T > 2)
        BT_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, t->counts, t->displs,
                                    MPI_FLOAT, t->comm));
    count(t, tr0, received);
    return BT_OK;
}

/* ---- setup ---- */

/* Floats of a gather's staging: the widest gathered row (the heads'
 * outputs, n_embd features or n_ff hidden units) for max_tok rows; for a
 * sum (sum_ranks), every rank's n_embd partial sums (two ranks) or their
 * pieces of this rank's share. */
static size_t staging_floats(const bt_hparams_t *hp, int tp, bool sum, int max_tok)
{
    if (sum)
        return (size_t)max_tok * (size_t)hp->n_embd * (tp == 2 ? 2 : 1) + (size_t)tp;
    size_t widest = (size_t)hp->n_head * hp->head_dim;
    widest = (size_t)hp->n_embd > widest ? (size_t)hp->n_embd : widest;
    widest = (size_t)hp->n_ff > widest ? (size_t)hp->n_ff : widest;
    return (size_t)max_tok * widest;
}

size_t bt_tensor_bytes(const bt_hparams_t *hp, int tp, bool sum, int max_tok, int logit_rows,
                       int vocab_share)
{
    if (tp <= 1)
        return 0;
    return (staging_floats(hp, tp, sum, max_tok) + (size_t)max_tok * hp->n_embd +
            (size_t)logit_rows * vocab_share) * sizeof(float) +
           (size_t)max_tok * sizeof(bt_row_t) + 4 * (size_t)tp * sizeof(int);
}

bt_status_t bt_tensor_init(bt_tensor_t *t, MPI_Comm comm, bt_forward_t *f, int logit_rows,
                           bt_trace_t *trace)
{
    const bt_model_t *m = f->m;
    const bt_hparams_t *hp = &m->hp;
    *t = (bt_tensor_t){.comm = comm, .size = 1, .fwd = f, .n_embd = hp->n_embd,
                       .trace = trace};
    if (comm == MPI_COMM_NULL)
        return BT_OK;
    MPI_Comm_rank(comm, &t->rank);
    MPI_Comm_size(comm, &t->size);
    const size_t mt = (size_t)f->max_tok;
    const bool sum = m->share.sum;
    t->staging = malloc(staging_floats(hp, t->size, sum, f->max_tok) * sizeof(float));
    t->x = malloc(mt * (size_t)hp->n_embd * sizeof(float));
    t->rows = malloc(mt * sizeof *t->rows);
    t->counts = malloc((size_t)t->size * sizeof(int));
    t->displs = malloc((size_t)t->size * sizeof(int));
    t->rcounts = malloc((size_t)t->size * sizeof(int));
    t->rdispls = malloc((size_t)t->size * sizeof(int));
    t->logit_rows = logit_rows;
    if (logit_rows > 0)
        t->logits = malloc((size_t)logit_rows * (size_t)m->output.n_out * sizeof(float));
    if (!t->staging || !t->x || !t->rows || !t->counts || !t->displs || !t->rcounts ||
        !t->rdispls ||
        (logit_rows > 0 && !t->logits)) {
        bt_log_error("tensor parallelism: cannot allocate the gather buffers (%zu bytes)",
                     bt_tensor_bytes(hp, t->size, sum, f->max_tok, logit_rows,
                                     (int)m->output.n_out));
        bt_tensor_free(t);
        return BT_ERR_NOMEM;
    }
    const bt_gather_t g = {gather_cols, gather_runs, sum_ranks, t};
    bt_forward_set_gather(f, &g);
    return BT_OK;
}

void bt_tensor_free(bt_tensor_t *t)
{
    free(t->logits);
    free(t->rdispls);
    free(t->rcounts);
    free(t->displs);
    free(t->counts);
    free(t->rows);
    free(t->x);
    free(t->staging);
    *t = (bt_tensor_t){.comm = MPI_COMM_NULL, .size = 1};
}

/* ---- the probe ---- */

/* Memory a rank reads between two probed gathers (more than a core's L2
 * today), as a working stage's products stream weights between its own. */
#define STIR_BYTES ((size_t)8 << 20)

/* The median of reps in-place gathers of `floats` floats a rank (one
 * unmeasured first), in seconds, each as a working stage meets it: every
 * rank has just written its own block and read STIR_BYTES of other
 * memory, and a gather's time is that of the rank that came to it last
 * (the least of the ranks'), so the probe does not count one rank waiting
 * for another. Collective on the stage. */
static bt_status_t time_gathers(bt_tensor_t *t, float *buf, const float *stir, int floats,
                                int reps, double *out)
{
    enum { REPS_MAX = 20 };
    double s[REPS_MAX], least[REPS_MAX];
    for (int r = 0; r < t->size; r++) {
        t->counts[r] = floats;
        t->displs[r] = r * floats;
    }
    volatile float sink = 0.0f;
    for (int i = -1; i < reps; i++) {
        float *mine = buf + t->displs[t->rank];
        for (int k = 0; k < floats; k++)
            mine[k] = (float)(i + k);
        for (size_t k = 0; k < STIR_BYTES / sizeof(float); k += 16) /* a float a line */
            sink += stir[k];
        const double t0 = MPI_Wtime();
        BT_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, t->counts,
                                    t->displs, MPI_FLOAT, t->comm));
        if (i >= 0)
            s[i] = MPI_Wtime() - t0;
    }
    (void)sink;
    BT_MPI_CHECK(MPI_Allreduce(s, least, reps, MPI_DOUBLE, MPI_MIN, t->comm));
    *out = bt_median(least, reps);
    return BT_OK;
}

bt_status_t bt_tensor_probe(bt_tensor_t *t, double *latency_s, double *bandwidth)
{
    enum { SMALL = 2, LARGE = 1 << 18 };
    *latency_s = *bandwidth = 0.0;
    if (t->size < 2)
        return BT_OK;
    float *buf = calloc((size_t)LARGE * (size_t)t->size, sizeof *buf);
    float *stir = calloc(STIR_BYTES / sizeof(float), sizeof *stir);
    int ok = buf != NULL && stir != NULL; /* every rank gathers, or none */
    const int rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, t->comm);
    bt_status_t st = rc != MPI_SUCCESS ? bt_mpi_error("MPI_Allreduce (the gather probe)", rc)
                   : ok                ? BT_OK
                                       : BT_ERR_NOMEM;
    double small = 0.0, large = 0.0;
    if (st == BT_OK)
        st = time_gathers(t, buf, stir, SMALL, 20, &small);
    if (st == BT_OK)
        st = time_gathers(t, buf, stir, LARGE, 5, &large);
    free(buf);
    free(stir);
    if (st != BT_OK)
        return st;
    *latency_s = small;
    const double bytes = (double)(t->size - 1) * LARGE * sizeof(float);
    *bandwidth = large > small ? bytes / (large - small) : 0.0;
    return BT_OK;
}

/* ---- leader and followers ---- */

static bt_status_t send_cmd(bt_tensor_t *t, bt_tp_op_t op, int n, bt_status_t st)
{
    tp_cmd_t c = {op, n, st, t->mb};
    BT_MPI_CHECK(MPI_Bcast(&c, 4, MPI_INT32_T, 0, t->comm));
    return BT_OK;
}

bt_status_t bt_tensor_layers(bt_tensor_t *t, float *x, const bt_row_t *rows, int n)
{
    if (t->size > 1) {
        bt_status_t st = send_cmd(t, BT_TP_LAYERS, n, BT_OK);
        if (st != BT_OK)
            return st;
        BT_MPI_CHECK(MPI_Bcast((void *)rows, n * (int)sizeof *rows, MPI_BYTE, 0, t->comm));
        BT_MPI_CHECK(MPI_Bcast(x, n * t->n_embd, MPI_FLOAT, 0, t->comm));
    }
    return bt_forward_rows(t->fwd, x, rows, n);
}

/* Every rank: this rank's logits of the n rows in t->x, sent to the leader
 * unless this is the leader. */
static bt_status_t own_logits(bt_tensor_t *t, int n)
{
    bt_forward_head(t->fwd, t->x, n, t->logits);
    if (t->rank == 0)
        return BT_OK;
    const int64_t cols = t->fwd->m->output.n_out;
    BT_MPI_CHECK(MPI_Send(t->logits, (int)(n * cols), MPI_FLOAT, 0, BT_TAG_TP_LOGITS, t->comm));
    return BT_OK;
}

bt_status_t bt_tensor_head(bt_tensor_t *t, const float *x, const int *idx, int n, float *logits)
{
    bt_forward_t *f = t->fwd;
    if (t->size == 1) {
        if (idx != NULL)
            bt_forward_head_rows(f, x, idx, n, logits);
        else
            bt_forward_head(f, x, n, logits);
        return BT_OK;
    }
    if (n > t->logit_rows) {
        bt_log_error("tensor parallelism: logits of %d rows asked, at most %d at once", n,
                     t->logit_rows);
        return BT_ERR_ARG;
    }
    const size_t e = (size_t)t->n_embd;
    for (int i = 0; i < n; i++)
        memcpy(t->x + i * e, x + (size_t)(idx != NULL ? idx[i] : i) * e, e * sizeof(float));
    bt_status_t st = send_cmd(t, BT_TP_HEAD, n, BT_OK);
    if (st != BT_OK)
        return st;
    BT_MPI_CHECK(MPI_Bcast(t->x, n * t->n_embd, MPI_FLOAT, 0, t->comm));
    const bt_share_t *sh = &f->m->share;
    const int n_vocab = f->m->hp.n_vocab;
    MPI_Request req[BT_TP_MAX];
    MPI_Datatype type[BT_TP_MAX];
    for (int r = 1; r < t->size; r++) { /* rank r's columns of every row, straight in place */
        MPI_Type_vector(n, sh->vocab[r + 1] - sh->vocab[r], n_vocab, MPI_FLOAT, &type[r]);
        MPI_Type_commit(&type[r]);
        BT_MPI_CHECK(MPI_Irecv(logits + sh->vocab[r], 1, type[r], r, BT_TAG_TP_LOGITS, t->comm,
                               &req[r]));
    }
    st = own_logits(t, n);
    const size_t mine = (size_t)(sh->vocab[1] - sh->vocab[0]);
    for (int i = 0; i < n; i++)
        memcpy(logits + (size_t)i * n_vocab, t->logits + i * mine, mine * sizeof(float));
    const int rc = MPI_Waitall(t->size - 1, req + 1, MPI_STATUSES_IGNORE);
    for (int r = 1; r < t->size; r++)
        MPI_Type_free(&type[r]);
    if (rc != MPI_SUCCESS)
        return bt_mpi_error("MPI_Waitall (logits of the tensor ranks)", rc);
    return st;
}

bt_status_t bt_tensor_end(bt_tensor_t *t, bt_status_t st)
{
    if (t->size == 1)
        return st;
    bt_status_t sent = send_cmd(t, BT_TP_END, 0, st);
    return st != BT_OK ? st : sent;
}

bt_status_t bt_tensor_follow(bt_tensor_t *t)
{
    bt_status_t mine = BT_OK;
    for (;;) {
        tp_cmd_t c;
        BT_MPI_CHECK(MPI_Bcast(&c, 4, MPI_INT32_T, 0, t->comm));
        const double t0 = bt_trace_now(t->trace);
        t->mb = c.mb;
        bt_status_t st = BT_OK;
        switch (c.op) {
        case BT_TP_LAYERS:
            BT_MPI_CHECK(MPI_Bcast(t->rows, c.n * (int)sizeof *t->rows, MPI_BYTE, 0, t->comm));
            BT_MPI_CHECK(MPI_Bcast(t->x, c.n * t->n_embd, MPI_FLOAT, 0, t->comm));
            st = bt_forward_rows(t->fwd, t->x, t->rows, c.n);
            break;
        case BT_TP_HEAD:
            BT_MPI_CHECK(MPI_Bcast(t->x, c.n * t->n_embd, MPI_FLOAT, 0, t->comm));
            st = own_logits(t, c.n);
            break;
        case BT_TP_END:
            return c.status != BT_OK ? (bt_status_t)c.status : mine;
        default:
            bt_log_error("tensor parallelism: unknown command %d from the stage's leader", c.op);
            return BT_ERR_MPI;
        }
        bt_trace_span(t->trace, BT_EV_COMPUTE, t->mb, t0);
        if (mine == BT_OK)
            mine = st;
    }
}
