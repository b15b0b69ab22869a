/* serve.c: many sequences through the pipeline (serve.h). */
#include "stages/serve.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The ids message of a micro-batch (BT_TAG_IDS, the last stage to rank 0),
 * in int32 words: the micro-batch, one chosen id per sampling row, then
 * for each of those rows whose sequence asked for log-probabilities, in
 * the same order, lp_words(n_top) words (logprob_words).
 *
 * A busy report (BT_TAG_BUSY, stage s > 0 to rank 0) is two doubles: the
 * stage's seconds computing so far, and 1 in its final report (sent after
 * STOP), else 0. A stage sends one after a micro-batch whenever its
 * previous report has arrived, so at most one is in flight per stage, and
 * rank 0 keeps a receive posted for each stage until its final report. */

/* Words of one row's log-probabilities: its own, then n_top (id, value). */
static int lp_words(int lp)
{
    return lp > 0 ? 1 + 2 * (lp - 1) : 0;
}

/* Words of the largest ids message. */
static int ids_words(int max_tok)
{
    return 1 + max_tok + max_tok * lp_words(BT_SERVE_MAX_TOP + 1);
}

static int32_t float_word(float f)
{
    int32_t w;
    memcpy(&w, &f, sizeof w);
    return w;
}

static float word_float(int32_t w)
{
    float f;
    memcpy(&f, &w, sizeof f);
    return f;
}

/* The log-probabilities of chosen under row (serve.h, bt_logprobs_t) into
 * out: lp_words(1 + n_top) words. In double, in one order: the same bits
 * wherever the row was computed. */
static void logprob_words(const float *row, int n_vocab, int32_t chosen, int n_top, int32_t *out)
{
    float mx = row[0];
    for (int i = 1; i < n_vocab; i++)
        mx = row[i] > mx ? row[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++)
        sum += exp((double)row[i] - mx);
    const double lse = mx + log(sum);
    int32_t top[BT_SERVE_MAX_TOP];
    int n = 0;
    for (int i = 0; i < n_vocab && n_top > 0; i++) { /* ascending ids: ties keep the lower */
        if (n == n_top && !(row[i] > row[top[n - 1]]))
            continue;
        int k = n < n_top ? n++ : n - 1;
        while (k > 0 && row[i] > row[top[k - 1]]) {
            top[k] = top[k - 1];
            k--;
        }
        top[k] = i;
    }
    out[0] = float_word((float)(row[chosen] - lse));
    for (int k = 0; k < n; k++) {
        out[1 + 2 * k] = top[k];
        out[2 + 2 * k] = float_word((float)(row[top[k]] - lse));
    }
}

/* ---- the last stage: samplers per slot ---- */

/* What rank 0 tells the last stage about a new sequence (BT_TAG_SEQ),
 * followed by n_hist prompt ids for the repetition penalty. */
typedef struct seq_msg {
    int32_t id, slot, n_hist;
    int32_t lp; /* 0: no log-probabilities; else 1 + the top ids wanted */
    bt_sampler_params_t sp;
} seq_msg_t;

typedef struct last_stage {
    bt_sampler_t **samplers; /* [n_slots] */
    int *id;                 /* [n_slots] the request in each slot */
    int *lp;                 /* [n_slots] its seq_msg_t.lp */
    int32_t *lpw;            /* [max_tok * lp_words(max)] the rows' log-probabilities */
    float *lprow;            /* [n_vocab] a row as it was before the sampler saw it */
    int n_lpw;
    int *idx;                /* [max_tok] rows that need logits */
    int32_t *ids;            /* [1 + max_tok] mb, then the chosen ids */
    void *msg;               /* a received seq_msg_t and its history */
    size_t msg_cap;
} last_stage_t;

/* Sets up slot m->slot for request m->id: a fresh sampler that has seen
 * the prompt's last ids. */
static bt_status_t begin_seq(bt_pipe_t *p, last_stage_t *ls, const seq_msg_t *m,
                             const int32_t *hist)
{
    if (m->slot < 0 || m->slot >= p->n_slots) {
        bt_log_error("serve: sequence %d in slot %d (of %d)", m->id, m->slot, p->n_slots);
        return BT_ERR_MPI;
    }
    bt_sampler_free(ls->samplers[m->slot]);
    ls->samplers[m->slot] = NULL;
    ls->id[m->slot] = m->id;
    ls->lp[m->slot] = m->lp;
    if (p->no_sampling)
        return BT_OK;
    bt_status_t st = bt_sampler_init(&m->sp, p->model->hp.n_vocab, &ls->samplers[m->slot]);
    for (int i = 0; st == BT_OK && i < m->n_hist; i++)
        bt_sampler_accept(ls->samplers[m->slot], hist[i]);
    return st;
}

/* The last stage receives a new sequence's message from rank 0. */
static bt_status_t recv_seq(bt_pipe_t *p, last_stage_t *ls)
{
    MPI_Status status;
    int bytes;
    BT_MPI_CHECK(MPI_Probe(0, BT_TAG_SEQ, p->comm, &status));
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    if ((size_t)bytes > ls->msg_cap) {
        free(ls->msg);
        ls->msg_cap = (size_t)bytes;
        if ((ls->msg = malloc(ls->msg_cap)) == NULL) {
            ls->msg_cap = 0;
            return BT_ERR_NOMEM;
        }
    }
    BT_MPI_CHECK(MPI_Recv(ls->msg, bytes, MPI_BYTE, 0, BT_TAG_SEQ, p->comm, MPI_STATUS_IGNORE));
    const seq_msg_t *m = ls->msg;
    if ((size_t)bytes != sizeof *m + (size_t)m->n_hist * sizeof(int32_t)) {
        bt_log_error("serve: a sequence message of %d bytes for %d history ids", bytes,
                     m->n_hist);
        return BT_ERR_MPI;
    }
    return begin_seq(p, ls, m, (const int32_t *)(m + 1));
}

/* Logits of the rows that need them (in chunks of logit_rows), the hooks,
 * and one chosen id per sampling row into ls->ids[1..]; *n_ids of them. */
static bt_status_t last_rows(bt_pipe_t *p, last_stage_t *ls, const bt_row_t *rows, int n,
                             const float *x, const bt_serve_hooks_t *h, int *n_ids)
{
    const int n_vocab = p->model->hp.n_vocab;
    bt_status_t st = BT_OK;
    int n_idx = 0;
    *n_ids = 0;
    ls->n_lpw = 0;
    for (int r = 0; r < n && st == BT_OK; r++) {
        if ((rows[r].flags & BT_ROW_FIRST) && p->n_stages > 1)
            st = recv_seq(p, ls);
        if (rows[r].flags & BT_ROW_LOGITS)
            ls->idx[n_idx++] = r;
    }
    for (int c = 0; c < n_idx && st == BT_OK; c += p->logit_rows) {
        const int nc = n_idx - c < p->logit_rows ? n_idx - c : p->logit_rows;
        st = bt_tensor_head(&p->tensor, x, ls->idx + c, nc, p->logits);
        for (int i = 0; i < nc && st == BT_OK; i++) {
            const bt_row_t *w = &rows[ls->idx[c + i]];
            const float *row = p->logits + (size_t)i * n_vocab;
            if (h->logits != NULL)
                st = h->logits(h->arg, ls->id[w->slot], w->pos, row);
            if (!(w->flags & BT_ROW_SAMPLE))
                continue;
            const int lp = ls->lp[w->slot];
            if (lp > 0) /* the sampler may change the row in place */
                memcpy(ls->lprow, row, sizeof *row * (size_t)n_vocab);
            const int32_t chosen = bt_pipe_choose(p, ls->samplers[w->slot], row);
            ls->ids[1 + (*n_ids)++] = chosen;
            if (lp > 0) {
                logprob_words(ls->lprow, n_vocab, chosen, lp - 1, ls->lpw + ls->n_lpw);
                ls->n_lpw += lp_words(lp);
            }
        }
    }
    return st;
}

static void last_stage_free(last_stage_t *ls, int n_slots)
{
    for (int i = 0; ls->samplers != NULL && i < n_slots; i++)
        bt_sampler_free(ls->samplers[i]);
    free(ls->samplers);
    free(ls->id);
    free(ls->lp);
    free(ls->lpw);
    free(ls->lprow);
    free(ls->idx);
    free(ls->ids);
    free(ls->msg);
}

static bt_status_t last_stage_init(last_stage_t *ls, const bt_pipe_t *p)
{
    *ls = (last_stage_t){0};
    ls->samplers = calloc((size_t)p->n_slots, sizeof *ls->samplers);
    ls->id = calloc((size_t)p->n_slots, sizeof *ls->id);
    ls->lp = calloc((size_t)p->n_slots, sizeof *ls->lp);
    ls->lpw = malloc(sizeof *ls->lpw * (size_t)p->max_tok * lp_words(BT_SERVE_MAX_TOP + 1));
    ls->lprow = malloc(sizeof *ls->lprow * (size_t)p->model->hp.n_vocab);
    ls->idx = malloc(sizeof *ls->idx * (size_t)p->max_tok);
    ls->ids = malloc(sizeof *ls->ids * (size_t)ids_words(p->max_tok));
    if (!ls->samplers || !ls->id || !ls->lp || !ls->lpw || !ls->lprow || !ls->idx || !ls->ids) {
        last_stage_free(ls, p->n_slots);
        bt_log_error("serve: cannot allocate the last stage's tables for %d slots",
                     p->n_slots);
        return BT_ERR_NOMEM;
    }
    return BT_OK;
}

/* ---- rank 0: the scheduler ---- */

typedef struct seq {
    int id;          /* the caller's request id; -1: the slot is free */
    int32_t *prompt; /* [cap] */
    int n_prompt, cap;
    int n_fed;       /* prompt ids sent down the pipe */
    int n_reused;    /* of them, the first ones whose keys and values the slot's cache held */
    int pos;         /* the position of the next row */
    int32_t *kv;     /* [n_ctx] the id each cache position was last computed for */
    int n_kv;        /* positions 0 .. n_kv - 1 hold the keys and values of kv[0 .. n_kv - 1] */
    int64_t freed;   /* when its last sequence ended (sched_t.n_freed then; 0: never used) */
    int32_t next;    /* the last chosen id: the next decode row's input */
    int n_chosen, n_predict;
    bool waiting;    /* a row that chooses its next id is in flight */
    int64_t admitted;
    int64_t ready;   /* when its last id arrived: decode rows go oldest first */
    seq_msg_t *msg;  /* the message to the last stage and its history */
    size_t msg_cap;
    MPI_Request msg_req;
} seq_t;

typedef struct sched {
    bt_pipe_t *p;
    const bt_serve_config_t *cfg;
    const bt_serve_hooks_t *h;
    last_stage_t *ls;  /* rank 0 is also the last stage when S = 1 */
    seq_t *seq;        /* [n_slots] */
    int n_groups, max_flight;
    int *flight;       /* [max_flight][max_tok]: slots of each micro-batch's sampling rows */
    int *flight_n;     /* [max_flight] */
    int mb_sent, mb_done;
    int64_t n_admitted, n_ready, n_freed;
    int n_active;
    bool no_more;      /* hooks.next has nothing left */
    int32_t *tokens;   /* [max_tok] the inputs of the micro-batch being formed */
    int32_t *ids;      /* [ids_words(max_tok)] a received ids message */
    MPI_Request ids_req; /* the receive of the next ids message, posted while any is due */
    MPI_Request *busy_req; /* [n_stages] each stage's busy report being received (0: none) */
    double (*busy_in)[2];  /* [n_stages] where it arrives */
    bt_serve_stats_t stats;
} sched_t;

int bt_serve_default_groups(int n_stages, int n_slots)
{
    return n_slots < n_stages ? n_slots : n_stages;
}

/* Takes a request into free slot s, whose cache holds its first reuse
 * prompt ids. */
static bt_status_t admit(sched_t *sc, int s, int reuse, int id, const bt_seq_req_t *rq)
{
    bt_pipe_t *p = sc->p;
    seq_t *q = &sc->seq[s];
    const int n_vocab = p->model->hp.n_vocab;
    if (rq->n_tokens < 1 || rq->n_tokens > p->fwd->n_ctx || rq->n_predict < 1 ||
        rq->top_logprobs < 0 || rq->top_logprobs > BT_SERVE_MAX_TOP) {
        bt_log_error("serve: request %d: %d prompt ids, n_predict %d, %d top log-probabilities "
                     "(the context holds %d, at most %d top)", id, rq->n_tokens, rq->n_predict,
                     rq->top_logprobs, p->fwd->n_ctx, BT_SERVE_MAX_TOP);
        return BT_ERR_ARG;
    }
    for (int i = 0; i < rq->n_tokens; i++)
        if (rq->tokens[i] < 0 || rq->tokens[i] >= n_vocab) {
            bt_log_error("serve: request %d: id %d at index %d is outside the vocabulary "
                         "(0..%d)", id, rq->tokens[i], i, n_vocab - 1);
            return BT_ERR_ARG;
        }
    const int n_hist = rq->sampling.repeat_penalty != 1.0f
                           ? (rq->n_tokens < rq->sampling.repeat_last_n
                                  ? rq->n_tokens : rq->sampling.repeat_last_n)
                           : 0;
    const size_t msg_bytes = sizeof(seq_msg_t) + (size_t)n_hist * sizeof(int32_t);
    if (q->msg_req != MPI_REQUEST_NULL) /* long done: the sequence before has finished */
        BT_MPI_CHECK(MPI_Wait(&q->msg_req, MPI_STATUS_IGNORE));
    if (rq->n_tokens > q->cap) {
        free(q->prompt);
        q->prompt = malloc(sizeof *q->prompt * (size_t)rq->n_tokens);
        q->cap = q->prompt != NULL ? rq->n_tokens : 0;
    }
    if (msg_bytes > q->msg_cap) {
        free(q->msg);
        q->msg = malloc(msg_bytes);
        q->msg_cap = q->msg != NULL ? msg_bytes : 0;
    }
    if (q->prompt == NULL || q->msg == NULL) {
        bt_log_error("serve: request %d: cannot keep %d prompt ids", id, rq->n_tokens);
        return BT_ERR_NOMEM;
    }
    memcpy(q->prompt, rq->tokens, sizeof *q->prompt * (size_t)rq->n_tokens);
    *q->msg = (seq_msg_t){id, s, n_hist, rq->logprobs ? 1 + rq->top_logprobs : 0, rq->sampling};
    memcpy(q->msg + 1, rq->tokens + rq->n_tokens - n_hist, sizeof(int32_t) * (size_t)n_hist);
    q->id = id;
    q->n_prompt = rq->n_tokens;
    q->n_fed = q->n_reused = q->pos = reuse;
    q->n_chosen = 0;
    sc->stats.n_reused += reuse;
    q->n_predict = rq->n_predict;
    q->waiting = false;
    q->admitted = sc->n_admitted++;
    sc->n_active++;
    return BT_OK;
}

/* The free slot whose cache holds the longest prefix of the prompt (of
 * equals, the one freed longest ago, so that the caches of recent
 * conversations stay), and in *reuse that prefix's length. The last prompt
 * id is always computed, since its row gives the first logits. The keys
 * and values of a position depend on the ids up to it alone (invariant
 * 1), so a reused prefix gives the bits a computed one would. */
static int pick_slot(const sched_t *sc, const bt_seq_req_t *rq, int *reuse)
{
    int best = -1;
    *reuse = 0;
    for (int s = 0; s < sc->cfg->n_slots; s++) {
        const seq_t *q = &sc->seq[s];
        if (q->id >= 0)
            continue;
        const int most = q->n_kv < rq->n_tokens - 1 ? q->n_kv : rq->n_tokens - 1;
        int n = 0;
        while (n < most && q->kv[n] == rq->tokens[n])
            n++;
        if (best < 0 || n > *reuse || (n == *reuse && q->freed < sc->seq[best].freed))
            best = s, *reuse = n;
    }
    return best;
}

/* Fills free slots from hooks.next. */
static bt_status_t admit_all(sched_t *sc)
{
    bt_status_t st = BT_OK;
    while (sc->n_active < sc->cfg->n_slots && !sc->no_more && st == BT_OK) {
        int id = -1, reuse;
        bt_seq_req_t rq = {0};
        if (!sc->h->next(sc->h->arg, &id, &rq)) {
            sc->no_more = sc->h->wait == NULL; /* else: none now */
            break;
        }
        const int s = pick_slot(sc, &rq, &reuse);
        st = admit(sc, s, reuse, id, &rq);
    }
    return st;
}

/* Announces a new sequence to the last stage before its first row goes. */
static bt_status_t announce(sched_t *sc, int s)
{
    seq_t *q = &sc->seq[s];
    if (sc->p->n_stages == 1)
        return begin_seq(sc->p, sc->ls, q->msg, (const int32_t *)(q->msg + 1));
    const int bytes = (int)(sizeof *q->msg + (size_t)q->msg->n_hist * sizeof(int32_t));
    BT_MPI_CHECK(MPI_Isend(q->msg, bytes, MPI_BYTE, sc->p->n_stages - 1, BT_TAG_SEQ,
                           sc->p->comm, &q->msg_req));
    return BT_OK;
}

static void add_row(sched_t *sc, bt_row_t *rows, int *n, int s, int32_t tok, int flags)
{
    seq_t *q = &sc->seq[s];
    if (sc->cfg->all_logits)
        flags |= BT_ROW_LOGITS;
    if (flags & BT_ROW_SAMPLE) {
        int *f = sc->flight + (size_t)(sc->mb_sent % sc->max_flight) * sc->p->max_tok;
        f[sc->flight_n[sc->mb_sent % sc->max_flight]++] = s;
        q->waiting = true;
    }
    sc->tokens[*n] = tok;
    if (q->kv != NULL) {
        q->kv[q->pos] = tok;
        q->n_kv = q->pos + 1;
    }
    rows[(*n)++] = (bt_row_t){s, q->pos++, flags, q->id};
}

/* The admitted sequence with prompt ids left to send (prefill) or with its
 * next decode row ready to go, that has waited longest; -1 if none. */
static int oldest(const sched_t *sc, bool prefill)
{
    int best = -1;
    int64_t best_t = 0;
    for (int s = 0; s < sc->cfg->n_slots; s++) {
        const seq_t *q = &sc->seq[s];
        if (q->id < 0 || (prefill ? q->n_fed == q->n_prompt : q->n_fed < q->n_prompt || q->waiting))
            continue;
        const int64_t t = prefill ? q->admitted : q->ready;
        if (best < 0 || t < best_t)
            best = s, best_t = t;
    }
    return best;
}

/* Forms the next micro-batch into rows (serve.h: decode rows first, then
 * prompt rows); returns its row count (0: nothing to send). */
static int form(sched_t *sc, bt_row_t *rows, bt_status_t *st)
{
    const int budget = sc->cfg->ubatch, S = sc->cfg->n_slots;
    int n = 0, n_dec = 0;
    sc->flight_n[sc->mb_sent % sc->max_flight] = 0;
    for (int s = 0; s < S; s++)
        n_dec += sc->seq[s].id >= 0 && sc->seq[s].n_fed == sc->seq[s].n_prompt;
    int cap = (n_dec + sc->n_groups - 1) / sc->n_groups;
    cap = cap < budget ? cap : budget;
    int s;
    while (n < cap && (s = oldest(sc, false)) >= 0)
        add_row(sc, rows, &n, s, sc->seq[s].next, BT_ROW_LOGITS | BT_ROW_SAMPLE);
    sc->stats.n_decode += n;
    while (n < budget && *st == BT_OK && (s = oldest(sc, true)) >= 0) {
        seq_t *q = &sc->seq[s];
        if (q->n_fed == q->n_reused && (*st = announce(sc, s)) != BT_OK)
            break;
        const int k = q->n_prompt - q->n_fed < budget - n ? q->n_prompt - q->n_fed : budget - n;
        for (int i = 0; i < k; i++, q->n_fed++) {
            int flags = q->n_fed == q->n_reused ? BT_ROW_FIRST : 0;
            if (q->n_fed == q->n_prompt - 1)
                flags |= BT_ROW_LOGITS | BT_ROW_SAMPLE;
            add_row(sc, rows, &n, s, q->prompt[q->n_fed], flags);
        }
        sc->stats.n_prompt += k;
    }
    return n;
}

/* A sequence ended: tell the caller, free the slot. */
static void finish(sched_t *sc, int s, bt_finish_t why)
{
    seq_t *q = &sc->seq[s];
    sc->h->finish(sc->h->arg, q->id, why);
    q->id = -1;
    q->freed = ++sc->n_freed;
    sc->n_active--;
    sc->stats.n_requests++;
}

static bool cancelled(const sched_t *sc, int id)
{
    return sc->h->cancelled != NULL && sc->h->cancelled(sc->h->arg, id);
}

/* Frees the slots of cancelled requests that wait on nothing (the others
 * end when their next id arrives). */
static void reap(sched_t *sc)
{
    for (int s = 0; s < sc->cfg->n_slots && sc->h->cancelled != NULL; s++)
        if (sc->seq[s].id >= 0 && !sc->seq[s].waiting && cancelled(sc, sc->seq[s].id))
            finish(sc, s, BT_FINISH_CANCEL);
}

/* Words of the log-probabilities in micro-batch mb's ids message. */
static int mb_lp_words(const sched_t *sc, int mb)
{
    const int *slots = sc->flight + (size_t)(mb % sc->max_flight) * sc->p->max_tok;
    int n = 0;
    for (int i = 0; i < sc->flight_n[mb % sc->max_flight]; i++)
        n += lp_words(sc->seq[slots[i]].msg->lp);
    return n;
}

/* Hands a chosen token's log-probabilities (words from logprob_words) over. */
static void give_logprobs(sched_t *sc, int id, int lp, const int32_t *w)
{
    bt_logprobs_t l = {.logprob = word_float(w[0]), .n_top = lp - 1};
    for (int k = 0; k < l.n_top; k++) {
        l.top_id[k] = w[1 + 2 * k];
        l.top_logprob[k] = word_float(w[2 + 2 * k]);
    }
    if (sc->h->logprobs != NULL)
        sc->h->logprobs(sc->h->arg, id, &l);
}

/* The ids of micro-batch mb, one per sampling row in row order, and after
 * them (lpw) the log-probabilities of the rows that asked. */
static void apply_ids(sched_t *sc, int mb, const int32_t *ids, int n, const int32_t *lpw)
{
    const int *slots = sc->flight + (size_t)(mb % sc->max_flight) * sc->p->max_tok;
    const int n_ctx = sc->p->fwd->n_ctx;
    for (int i = 0; i < n; i++) {
        seq_t *q = &sc->seq[slots[i]];
        const int lp = q->msg->lp;
        q->waiting = false;
        q->n_chosen++;
        sc->stats.n_chosen++;
        if (lp > 0 && !cancelled(sc, q->id))
            give_logprobs(sc, q->id, lp, lpw);
        lpw += lp_words(lp);
        if (cancelled(sc, q->id))
            finish(sc, slots[i], BT_FINISH_CANCEL);
        else if (!sc->h->token(sc->h->arg, q->id, ids[i]))
            finish(sc, slots[i], BT_FINISH_STOP);
        else if (q->n_chosen >= q->n_predict || q->pos >= n_ctx)
            finish(sc, slots[i], BT_FINISH_LENGTH);
        else
            q->next = ids[i], q->ready = sc->n_ready++;
    }
}

/* Rank 0 keeps the receive of the next ids message posted while one is
 * due, so the last stage's send never waits for rank 0 to ask (rank 0 may
 * itself be waiting for a send slot). */
static bt_status_t post_ids(sched_t *sc)
{
    const bt_pipe_t *p = sc->p;
    if (sc->ids_req != MPI_REQUEST_NULL || sc->mb_sent == sc->mb_done)
        return BT_OK;
    BT_MPI_CHECK(MPI_Irecv(sc->ids, ids_words(p->max_tok), MPI_INT32_T, p->n_stages - 1,
                           BT_TAG_IDS, p->comm, &sc->ids_req));
    return BT_OK;
}

/* Rank 0 posts the receive of stage s's next busy report. */
static bt_status_t post_busy(sched_t *sc, int s)
{
    BT_MPI_CHECK(MPI_Irecv(sc->busy_in[s], 2, MPI_DOUBLE, s, BT_TAG_BUSY, sc->p->comm,
                           &sc->busy_req[s]));
    return BT_OK;
}

/* Rank 0 takes the busy reports that have arrived; with to_final, waits
 * for every stage's final one. */
static bt_status_t take_busy(sched_t *sc, bool to_final)
{
    bt_status_t st = BT_OK;
    for (int s = 1; s < sc->p->n_stages && st == BT_OK; s++)
        while (sc->busy_req[s] != MPI_REQUEST_NULL && st == BT_OK) {
            int done = 1;
            if (to_final)
                BT_MPI_CHECK(MPI_Wait(&sc->busy_req[s], MPI_STATUS_IGNORE));
            else
                BT_MPI_CHECK(MPI_Test(&sc->busy_req[s], &done, MPI_STATUS_IGNORE));
            if (!done)
                break;
            if (s < BT_SERVE_MAX_STAGES)
                sc->stats.busy[s] = sc->busy_in[s][0];
            if (sc->busy_in[s][1] == 0)
                st = post_busy(sc, s);
            if (!to_final)
                break;
        }
    return st;
}

/* Rank 0 waits for the oldest micro-batch's ids from the last stage. */
static bt_status_t recv_ids(sched_t *sc)
{
    bt_pipe_t *p = sc->p;
    int32_t *ids = sc->ids;
    MPI_Status status;
    int count = 0;
    const double t0 = bt_trace_now(p->tr.trace);
    bt_status_t st = post_ids(sc);
    if (st != BT_OK)
        return st;
    BT_MPI_CHECK(MPI_Wait(&sc->ids_req, &status));
    bt_trace_span(p->tr.trace, BT_EV_TOKEN_WAIT, sc->mb_done, t0);
    MPI_Get_count(&status, MPI_INT32_T, &count);
    const int want = sc->flight_n[sc->mb_done % sc->max_flight];
    const int n_lpw = mb_lp_words(sc, sc->mb_done);
    if (count != 1 + want + n_lpw || ids[0] != sc->mb_done) {
        bt_log_error("serve: expected %d words of micro-batch %d's ids, got %d of micro-batch %d",
                     1 + want + n_lpw, sc->mb_done, count, ids[0]);
        return BT_ERR_MPI;
    }
    apply_ids(sc, sc->mb_done++, ids + 1, want, ids + 1 + want);
    if ((st = take_busy(sc, false)) != BT_OK)
        return st;
    if (sc->h->progress != NULL)
        sc->h->progress(sc->h->arg, &sc->stats);
    return post_ids(sc);
}

/* Rank 0: embeds, computes and sends (or, alone, finishes) one micro-batch. */
static bt_status_t send_mb(sched_t *sc, int n)
{
    bt_pipe_t *p = sc->p;
    bt_transport_t *t = &p->tr;
    const int slot = sc->mb_sent % BT_TRANSPORT_SLOTS;
    bt_row_t *rows = bt_transport_rows(t, slot);
    bt_transport_header(t, slot)->n_rows = n;
    float *x = bt_transport_payload(t, slot);
    const double t0 = bt_trace_now(t->trace), busy0 = bt_now();
    bt_status_t st = bt_forward_embed(p->fwd, sc->tokens, n, x);
    p->tensor.mb = sc->mb_sent;
    if (st == BT_OK)
        st = bt_tensor_layers(&p->tensor, x, rows, n);
    int n_ids = 0;
    if (st == BT_OK && p->last)
        st = last_rows(p, sc->ls, rows, n, x, sc->h, &n_ids);
    bt_trace_span(t->trace, BT_EV_COMPUTE, sc->mb_sent, t0);
    sc->stats.n_mb++;
    sc->stats.busy[0] += bt_now() - busy0;
    if (st != BT_OK)
        return st;
    if (p->last) { /* one stage: the ids are here */
        sc->mb_sent++;
        apply_ids(sc, sc->mb_done++, sc->ls->ids + 1, n_ids, sc->ls->lpw);
        if (sc->h->progress != NULL)
            sc->h->progress(sc->h->arg, &sc->stats);
        return BT_OK;
    }
    *bt_transport_header(t, slot) = (bt_act_header_t){.mb = sc->mb_sent++, .n_rows = n};
    st = bt_transport_send(t, slot);
    return st == BT_OK ? post_ids(sc) : st;
}

static bt_status_t schedule(sched_t *sc)
{
    bt_pipe_t *p = sc->p;
    bt_status_t st = BT_OK;
    while (st == BT_OK) {
        reap(sc);
        if ((st = admit_all(sc)) != BT_OK)
            break;
        if (sc->mb_sent - sc->mb_done < sc->max_flight) {
            const int slot = sc->mb_sent % BT_TRANSPORT_SLOTS;
            if ((st = bt_transport_acquire(&p->tr, slot)) != BT_OK)
                break;
            int n = form(sc, bt_transport_rows(&p->tr, slot), &st);
            if (n > 0 && st == BT_OK) {
                st = send_mb(sc, n);
                continue;
            }
        }
        if (st != BT_OK)
            break;
        if (sc->mb_sent > sc->mb_done)
            st = recv_ids(sc);
        else if (sc->n_active == 0 && sc->no_more)
            break;
        else if (sc->n_active == 0 && sc->h->wait != NULL)
            sc->no_more = !sc->h->wait(sc->h->arg);
        else { /* every active sequence waits on nothing: cannot happen */
            bt_log_error("serve: %d sequences active and nothing to run", sc->n_active);
            st = BT_ERR_MPI;
        }
    }
    if (st == BT_OK && p->n_stages > 1)
        st = bt_transport_send_stop(&p->tr);
    for (int s = 0; s < sc->cfg->n_slots && st == BT_OK; s++)
        if (sc->seq[s].msg_req != MPI_REQUEST_NULL)
            BT_MPI_CHECK(MPI_Wait(&sc->seq[s].msg_req, MPI_STATUS_IGNORE));
    if (st == BT_OK)
        st = bt_transport_drain(&p->tr);
    if (st == BT_OK)
        st = take_busy(sc, true);
    return st;
}

static void sched_free(sched_t *sc)
{
    for (int s = 1; sc->busy_req != NULL && s < sc->p->n_stages; s++)
        if (sc->busy_req[s] != MPI_REQUEST_NULL) { /* only after an error */
            MPI_Cancel(&sc->busy_req[s]);
            MPI_Request_free(&sc->busy_req[s]);
        }
    free(sc->busy_req);
    free(sc->busy_in);
    for (int s = 0; sc->seq != NULL && s < sc->cfg->n_slots; s++) {
        free(sc->seq[s].prompt);
        free(sc->seq[s].msg);
        free(sc->seq[s].kv);
    }
    free(sc->seq);
    free(sc->flight);
    free(sc->flight_n);
    free(sc->tokens);
    free(sc->ids);
}

static bt_status_t sched_init(sched_t *sc)
{
    const bt_pipe_t *p = sc->p;
    const bt_serve_config_t *c = sc->cfg;
    sc->n_groups = c->n_groups > 0 ? c->n_groups : bt_serve_default_groups(p->n_stages, c->n_slots);
    sc->max_flight = c->sync ? 1 : sc->n_groups > p->n_stages ? sc->n_groups : p->n_stages + 1;
    sc->seq = calloc((size_t)c->n_slots, sizeof *sc->seq);
    sc->flight = malloc(sizeof *sc->flight * (size_t)sc->max_flight * (size_t)p->max_tok);
    sc->flight_n = calloc((size_t)sc->max_flight, sizeof *sc->flight_n);
    sc->tokens = malloc(sizeof *sc->tokens * (size_t)p->max_tok);
    sc->ids = malloc(sizeof *sc->ids * (size_t)ids_words(p->max_tok));
    sc->busy_req = malloc(sizeof *sc->busy_req * (size_t)p->n_stages);
    sc->busy_in = malloc(sizeof *sc->busy_in * (size_t)p->n_stages);
    for (int s = 0; sc->busy_req != NULL && s < p->n_stages; s++)
        sc->busy_req[s] = MPI_REQUEST_NULL;
    if (!sc->seq || !sc->flight || !sc->flight_n || !sc->tokens || !sc->ids || !sc->busy_req ||
        !sc->busy_in) {
        bt_log_error("serve: cannot allocate the scheduler's tables for %d slots", c->n_slots);
        return BT_ERR_NOMEM;
    }
    /* Prompt prefixes are reused unless asked not to, or unless every
     * row's logits are wanted (a reused row has none). */
    const bool reuse = !c->no_prompt_cache && !c->all_logits;
    for (int s = 0; s < c->n_slots; s++) {
        sc->seq[s] = (seq_t){.id = -1, .msg_req = MPI_REQUEST_NULL};
        if (reuse && (sc->seq[s].kv = malloc(sizeof(int32_t) * (size_t)p->fwd->n_ctx)) == NULL) {
            bt_log_error("serve: cannot allocate the ids of %d slots of %d positions", c->n_slots,
                         p->fwd->n_ctx);
            return BT_ERR_NOMEM;
        }
    }
    sc->ids_req = MPI_REQUEST_NULL;
    bt_status_t st = BT_OK;
    for (int s = 1; s < p->n_stages && st == BT_OK; s++)
        st = post_busy(sc, s);
    return st;
}

/* ---- the other stages ---- */

/* A stage's busy report to rank 0 (the protocol at the top): sent if the
 * previous one has arrived; the final one always, once it has. */
static bt_status_t report_busy(const bt_pipe_t *p, MPI_Request *req, double out[2], double busy,
                               bool final)
{
    int done = 1;
    if (final)
        BT_MPI_CHECK(MPI_Wait(req, MPI_STATUS_IGNORE));
    else if (*req != MPI_REQUEST_NULL)
        BT_MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
    if (!done)
        return BT_OK;
    out[0] = busy;
    out[1] = final ? 1 : 0;
    BT_MPI_CHECK(MPI_Isend(out, 2, MPI_DOUBLE, 0, BT_TAG_BUSY, p->comm, req));
    if (final)
        BT_MPI_CHECK(MPI_Wait(req, MPI_STATUS_IGNORE));
    return BT_OK;
}

/* Receives micro-batches until STOP: computes, passes on (or, last,
 * samples and sends the ids to rank 0). */
static bt_status_t follow(bt_pipe_t *p, last_stage_t *ls, const bt_serve_hooks_t *h)
{
    bt_transport_t *t = &p->tr;
    double busy = 0, report[2];
    MPI_Request report_req = MPI_REQUEST_NULL;
    bt_status_t st = bt_transport_post_recv(t, 0);
    for (int mb = 0; st == BT_OK; mb++) {
        const int slot = mb % BT_TRANSPORT_SLOTS;
        bool stop = false;
        if ((st = bt_transport_wait_recv(t, slot, mb, -1, &stop)) != BT_OK)
            break;
        if (stop) {
            if (!p->last)
                st = bt_transport_send_stop(t);
            break;
        }
        if ((st = bt_transport_post_recv(t, (mb + 1) % BT_TRANSPORT_SLOTS)) != BT_OK)
            break;
        const int n = bt_transport_header(t, slot)->n_rows;
        const bt_row_t *rows = bt_transport_rows(t, slot);
        float *x = bt_transport_payload(t, slot);
        const double t0 = bt_trace_now(t->trace), busy0 = bt_now();
        p->tensor.mb = mb;
        st = bt_tensor_layers(&p->tensor, x, rows, n);
        int n_ids = 0;
        if (st == BT_OK && p->last)
            st = last_rows(p, ls, rows, n, x, h, &n_ids);
        bt_trace_span(t->trace, BT_EV_COMPUTE, mb, t0);
        busy += bt_now() - busy0;
        if (st != BT_OK)
            break;
        if (p->last) {
            ls->ids[0] = mb;
            memcpy(ls->ids + 1 + n_ids, ls->lpw, sizeof *ls->lpw * (size_t)ls->n_lpw);
            BT_MPI_CHECK(MPI_Send(ls->ids, 1 + n_ids + ls->n_lpw, MPI_INT32_T, 0, BT_TAG_IDS,
                                  p->comm));
        } else {
            st = bt_transport_send(t, slot);
        }
        if (st == BT_OK)
            st = report_busy(p, &report_req, report, busy, false);
    }
    if (st == BT_OK)
        st = bt_transport_drain(t);
    if (st == BT_OK)
        st = report_busy(p, &report_req, report, busy, true);
    return st;
}

bt_status_t bt_pipe_serve(bt_pipe_t *p, const bt_serve_config_t *cfg,
                          const bt_serve_hooks_t *hooks, bt_serve_stats_t *stats)
{
    if (cfg->n_slots < 1 || cfg->n_slots > p->n_slots || cfg->ubatch < 1 ||
        cfg->ubatch > p->max_tok || cfg->n_groups < 0) {
        bt_log_error("serve: %d sequences (the cache holds %d), micro-batches of %d (at most "
                     "%d), %d groups", cfg->n_slots, p->n_slots, cfg->ubatch, p->max_tok,
                     cfg->n_groups);
        return BT_ERR_ARG;
    }
    if (p->follower)
        return bt_tensor_follow(&p->tensor);
    last_stage_t ls = {0};
    bt_status_t st = p->last ? last_stage_init(&ls, p) : BT_OK;
    if (st == BT_OK && p->first) {
        sched_t sc = {.p = p, .cfg = cfg, .h = hooks, .ls = &ls};
        st = sched_init(&sc);
        if (st == BT_OK)
            st = schedule(&sc);
        if (stats != NULL)
            *stats = sc.stats;
        sched_free(&sc);
    } else if (st == BT_OK) {
        st = follow(p, &ls, hooks);
    }
    if (p->last)
        last_stage_free(&ls, p->n_slots);
    return bt_tensor_end(&p->tensor, st);
}
