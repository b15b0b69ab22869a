/* forward.c: embedding, the layer block of every architecture (arch.h),
 * and the output head. */
#include "forward.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Floats per row of the FFN's hidden buffers: the dense width, an
 * expert's for each of a row's k choices, or the shared experts'. */
static size_t ff_width(const bt_hparams_t *hp)
{
    size_t w = (size_t)hp->n_expert_used * (size_t)hp->n_ff_exp;
    w = (size_t)hp->n_ff > w ? (size_t)hp->n_ff : w;
    return (size_t)hp->n_ff_shexp > w ? (size_t)hp->n_ff_shexp : w;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Floats per row of the MLA buffers (0 without MLA): mla_q, mla_qa,
 * mla_in, mla_out, mla_att. */
static size_t mla_floats(const bt_hparams_t *hp)
{
    if (!hp->arch->mla)
        return 0;
    const size_t h = (size_t)hp->n_head, nope = (size_t)(hp->d_qk - hp->n_rot);
    return h * (size_t)hp->d_qk + (size_t)hp->q_lora + h * max_sz(nope, (size_t)hp->kv_lora) +
           h * max_sz((size_t)hp->kv_lora, (size_t)hp->d_v) + h * (size_t)hp->d_v;
}

/* Floats per row of the mixture-of-experts buffers (0 for a dense FFN);
 * ints as floats. */
static size_t moe_floats(const bt_hparams_t *hp)
{
    if (hp->n_expert == 0)
        return 0;
    const size_t k = (size_t)hp->n_expert_used;
    return 3 * (size_t)hp->n_expert + 3 * k + 2 * k * (size_t)hp->n_embd;
}

/* Activations, scratch and row lists: everything but the KV cache. */
static size_t buffer_bytes(const bt_hparams_t *hp, int64_t n_in, int n_ctx, int n_slot,
                           int max_tok, int n_threads)
{
    size_t q_dim = (size_t)hp->n_head * hp->head_dim;
    size_t kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t part = q_dim > (size_t)hp->n_embd ? q_dim : (size_t)hp->n_embd;
    size_t act = (size_t)max_tok * (2 * (size_t)hp->n_embd + 2 * q_dim + 2 * kv_dim +
                                    2 * ff_width(hp) + moe_floats(hp) + mla_floats(hp) + part);
    size_t scratch = (size_t)n_threads * bt_scratch_floats(n_in, n_ctx);
    size_t rows = (size_t)max_tok * (sizeof(bt_row_t) + sizeof(bt_run_t)) +
                  (size_t)n_slot * sizeof(int);
    return (act + scratch) * sizeof(float) + rows;
}

size_t bt_forward_bytes(const bt_model_t *m, int n_ctx, int n_slot, int max_tok, int n_threads,
                        uint32_t kv_type)
{
    const bt_hparams_t *hp = &m->hp;
    int kv0, kv1;
    bt_share_kv(&m->share, hp, m->share.rank, &kv0, &kv1);
    return buffer_bytes(hp, bt_model_max_n_in(m), n_ctx, n_slot, max_tok, n_threads) +
           bt_kv_cache_bytes(m->last - m->first, n_slot, n_ctx, (kv1 - kv0) * hp->head_dim,
                             kv_type);
}

size_t bt_forward_buffer_bytes(const bt_hparams_t *hp, int n_ctx, int n_slot, int max_tok,
                               int n_threads)
{
    return buffer_bytes(hp, bt_hparams_max_n_in(hp), n_ctx, n_slot, max_tok, n_threads);
}

bt_status_t bt_forward_init(const bt_model_t *m, const bt_ops_t *ops, int n_ctx, int n_slot,
                            int max_tok, int n_threads, uint32_t kv_type, bt_forward_t **out)
{
    const bt_hparams_t *hp = &m->hp;
    if (n_ctx < 1 || n_slot < 1 || max_tok < 1 || n_threads < 1) {
        bt_log_error("forward: n_ctx %d, slots %d, micro-batch %d and threads %d must all be "
                     ">= 1", n_ctx, n_slot, max_tok, n_threads);
        return BT_ERR_ARG;
    }
    if (kv_type != BT_TYPE_F32 && kv_type != BT_TYPE_F16) {
        bt_log_error("forward: KV cache type %u is not f32 or f16", (unsigned)kv_type);
        return BT_ERR_ARG;
    }
    char what[96];
    snprintf(what, sizeof what, "the KV cache and buffers (%d x %d positions, micro-batch %d)",
             n_slot, n_ctx, max_tok);
    const size_t bytes = bt_forward_bytes(m, n_ctx, n_slot, max_tok, n_threads, kv_type);
    bt_status_t st = bt_mem_check(what, bytes);
    if (st != BT_OK)
        return st;
    bt_forward_t *f = calloc(1, sizeof *f);
    if (f == NULL)
        return BT_ERR_NOMEM;
    f->m = m;
    f->ops = ops;
    f->n_ctx = n_ctx;
    f->n_slot = n_slot;
    f->max_tok = max_tok;
    const bt_share_t *sh = &m->share;
    int kv1;
    bt_share_kv(sh, hp, sh->rank, &f->kv0, &kv1);
    f->n_kv_l = kv1 - f->kv0;
    f->head0 = sh->head[sh->rank];
    f->n_head_l = sh->head[sh->rank + 1] - f->head0;
    st = bt_kv_cache_init(&f->kv, m->last - m->first, n_slot, n_ctx, f->n_kv_l * hp->head_dim,
                          kv_type);
    if (st != BT_OK)
        goto fail_kv;
    const size_t q_dim = (size_t)hp->n_head * hp->head_dim;
    const size_t mt = (size_t)max_tok;
    bool tp_ok = true;
    if (sh->size > 1) {
        const size_t part = q_dim > (size_t)hp->n_embd ? q_dim : (size_t)hp->n_embd;
        const size_t group = (size_t)(hp->n_head / hp->n_head_kv);
        f->part = malloc(mt * part * sizeof(float));
        f->exp_at = malloc(((size_t)sh->size + 1) * sizeof(int));
        if (!bt_share_whole_groups(sh, hp))
            f->piece = malloc(2 * mt * group * (size_t)hp->head_dim * sizeof(float));
        tp_ok = f->part && f->exp_at && (f->piece || bt_share_whole_groups(sh, hp));
    }
    f->scratch.n_threads = n_threads;
    f->scratch.per_thread = bt_scratch_floats(bt_model_max_n_in(m), n_ctx);
    f->scratch.buf = malloc(f->scratch.per_thread * n_threads * sizeof(float));
    f->xn = malloc(mt * hp->n_embd * sizeof(float));
    f->q = malloc(mt * q_dim * sizeof(float));
    f->k = malloc(mt * (size_t)f->kv.kv_dim * sizeof(float));
    f->v = malloc(mt * (size_t)f->kv.kv_dim * sizeof(float));
    f->att = malloc(mt * q_dim * sizeof(float));
    f->o = malloc(mt * hp->n_embd * sizeof(float));
    f->gate = malloc(mt * ff_width(hp) * sizeof(float));
    f->up = malloc(mt * ff_width(hp) * sizeof(float));
    if (hp->n_expert > 0) {
        const size_t k = (size_t)hp->n_expert_used;
        f->route = malloc((mt + 2) * (size_t)hp->n_expert * sizeof(float));
        f->sel = malloc(mt * k * sizeof(int));
        f->sel_w = malloc(mt * k * sizeof(float));
        f->gather = malloc(mt * k * sizeof(int));
        f->exp_rows = malloc(((size_t)hp->n_expert + 1) * sizeof(int));
        f->xg = malloc(mt * k * hp->n_embd * sizeof(float));
        f->y_exp = malloc(mt * k * hp->n_embd * sizeof(float));
    }
    f->jobs = malloc(sizeof *f->jobs * (2 * (size_t)hp->n_expert + 3 + (size_t)hp->n_head));
    bool mla_ok = true;
    if (hp->arch->mla) {
        const size_t h = (size_t)hp->n_head, nope = (size_t)(hp->d_qk - hp->n_rot);
        f->mla_q = malloc(mt * h * (size_t)hp->d_qk * sizeof(float));
        f->mla_qa = malloc(mt * max_sz((size_t)hp->q_lora, 1) * sizeof(float));
        f->mla_in = malloc(mt * h * max_sz(nope, (size_t)hp->kv_lora) * sizeof(float));
        f->mla_out = malloc(mt * h * max_sz((size_t)hp->kv_lora, (size_t)hp->d_v) * sizeof(float));
        f->mla_att = malloc(mt * h * (size_t)hp->d_v * sizeof(float));
        mla_ok = f->mla_q && f->mla_qa && f->mla_in && f->mla_out && f->mla_att;
    }
    const bool moe_ok = hp->n_expert == 0 || (f->route && f->sel && f->sel_w && f->gather &&
                                              f->exp_rows && f->xg && f->y_exp);
    f->rows = malloc(mt * sizeof *f->rows);
    f->runs = malloc(mt * sizeof *f->runs);
    f->slot_next = malloc((size_t)n_slot * sizeof *f->slot_next);
    if (!f->scratch.buf || !f->xn || !f->q || !f->k || !f->v || !f->att || !f->o || !f->gate ||
        !f->up || !f->jobs || !f->rows || !f->runs || !f->slot_next || !moe_ok || !tp_ok ||
        !mla_ok) {
        bt_log_error("forward: cannot allocate %zu bytes of activations for %d tokens", bytes,
                     max_tok);
        st = BT_ERR_NOMEM;
        goto fail_buffers;
    }
    *out = f;
    return BT_OK;

fail_buffers:
    bt_forward_free(f);
    return st;
fail_kv:
    free(f);
    return st;
}

void bt_forward_free(bt_forward_t *f)
{
    if (f == NULL)
        return;
    free(f->mla_att);
    free(f->mla_out);
    free(f->mla_in);
    free(f->mla_qa);
    free(f->mla_q);
    free(f->piece);
    free(f->exp_at);
    free(f->part);
    free(f->jobs);
    free(f->y_exp);
    free(f->xg);
    free(f->exp_rows);
    free(f->gather);
    free(f->sel_w);
    free(f->sel);
    free(f->route);
    free(f->slot_next);
    free(f->runs);
    free(f->rows);
    free(f->up);
    free(f->gate);
    free(f->o);
    free(f->att);
    free(f->v);
    free(f->k);
    free(f->q);
    free(f->xn);
    free(f->scratch.buf);
    bt_kv_cache_free(&f->kv);
    free(f);
}

void bt_forward_set_progress(bt_forward_t *f, bt_progress_fn fn, void *arg)
{
    f->progress = fn;
    f->progress_arg = arg;
}

void bt_forward_set_gather(bt_forward_t *f, const bt_gather_t *g) { f->coll = *g; }

/* Whether this stage's layers are split over tensor ranks. */
static bool split(const bt_forward_t *f) { return f->m->share.size > 1; }

/* out = the ranks' blocks side by side (bt_gather_t.cols); on one rank
 * mine is out already. */
static bt_status_t gather_cols(const bt_forward_t *f, float *out, const float *mine, int n_tok,
                               const int *at, int unit)
{
    return split(f) ? f->coll.cols(f->coll.ctx, out, mine, n_tok, at, unit) : BT_OK;
}

/* Whether the ranks add partial sums of attn_output and ffn_down
 * (bt_share_t.sum) instead of gathering whole outputs. */
static bool summed(const bt_forward_t *f) { return split(f) && f->m->share.sum; }

/* f->o = the ranks' partial sums mine [n_tok, n_embd] added (summed). */
static bt_status_t sum_rows(const bt_forward_t *f, const float *mine, int n_tok)
{
    return f->coll.sum(f->coll.ctx, f->o, mine, n_tok * f->m->hp.n_embd);
}

bt_status_t bt_forward_embed(bt_forward_t *f, const int32_t *tokens, int n_tok, float *x)
{
    const bt_matrix_t *e = &f->m->tok_embd;
    const bt_to_float_fn to_float = bt_type_to_float_fast(e->type);
    for (int t = 0; t < n_tok; t++) {
        if (tokens[t] < 0 || tokens[t] >= e->n_out) {
            bt_log_error("forward: token id %d at index %d is outside the vocabulary (0..%lld)",
                         tokens[t], t, (long long)e->n_out - 1);
            return BT_ERR_ARG;
        }
        const uint8_t *row = (const uint8_t *)e->data + (size_t)tokens[t] * e->row_bytes;
        to_float(x + (size_t)t * e->n_in, row, e->n_in);
        if (f->m->hp.embd_scale != 1.0f)
            bt_scale_f32(x + (size_t)t * e->n_in, f->m->hp.embd_scale, e->n_in);
    }
    return BT_OK;
}

/* Runs of at most this many rows (decode rows, short prompt chunks) share
 * one parallel loop, one run per thread; longer runs split their own work
 * over the team. */
#define BT_SHORT_RUN 8

/* The cache's keys and values of kv head j (of this rank's) for a slot. */
static const void *kv_head(const bt_kv_cache_t *kv, const void *base, int j, size_t per_head)
{
    const size_t es = kv->type == BT_TYPE_F16 ? 2 : 4;
    return (const char *)base + es * (size_t)j * per_head;
}

/* Attention of one run into out [n_tok, n_head_l * head_dim]. Where this
 * rank's query heads are whole kv groups, one call; where a group spans
 * ranks, one call per kv head with the group's heads this rank holds
 * (copied out and back): each query row's arithmetic is the same either
 * way (kernels.h), so the bits are those of one rank. */
static void attend_run(const bt_forward_t *f, int il, const bt_run_t *r, float *out,
                       const bt_scratch_t *s)
{
    const bt_hparams_t *hp = &f->m->hp;
    const bt_layer_t *l = &f->m->layers[il];
    const bt_kv_cache_t *kv = &f->kv;
    const int hd = hp->head_dim, nh = f->n_head_l;
    const size_t at = (size_t)r->first * (size_t)nh * (size_t)hd;
    const void *k = bt_kv_cache_k(kv, il, r->slot), *v = bt_kv_cache_v(kv, il, r->slot);
    if (f->piece == NULL) {
        const bt_attn_t shape = {nh, f->n_kv_l, hd, kv->k_stride, l->window, hp->attn_scale,
                                 l->sinks, 0};
        f->ops->attention(out + at, f->q + at, k, v, kv->type, r->n, r->pos0, &shape, s);
        return;
    }
    const int group = hp->n_head / hp->n_head_kv;
    const size_t span = (size_t)f->max_tok * (size_t)group * hd;
    float *qp = f->piece + (size_t)r->first * group * hd, *op = qp + span;
    for (int j = 0; j < f->n_kv_l; j++) {
        const int g = f->kv0 + j;
        const int c0 = g * group > f->head0 ? g * group : f->head0;
        const int c1 = (g + 1) * group < f->head0 + nh ? (g + 1) * group : f->head0 + nh;
        const size_t w = (size_t)(c1 - c0) * hd, off = (size_t)(c0 - f->head0) * hd;
        for (int t = 0; t < r->n; t++)
            memcpy(qp + t * w, f->q + at + (size_t)t * nh * hd + off, w * sizeof(float));
        const bt_attn_t shape = {c1 - c0, 1, hd, kv->k_stride, l->window, hp->attn_scale,
                                 l->sinks != NULL ? l->sinks + (c0 - f->head0) : NULL,
                                 f->n_kv_l * hd};
        f->ops->attention(op, qp, kv_head(kv, k, j, (size_t)hd * kv->k_stride),
                          kv_head(kv, v, j, (size_t)hd), kv->type, r->n, r->pos0, &shape, s);
        for (int t = 0; t < r->n; t++)
            memcpy(out + at + (size_t)t * nh * hd + off, op + t * w, w * sizeof(float));
    }
}

/* The cache stores, then attention, of every run into out [n_tok, n_head_l
 * * head_dim]; all stores come first, so a run may read keys another run
 * of its slot in this micro-batch wrote. A row's result is the same on
 * one thread or many (kernels.h), so how the runs are spread over threads
 * changes only the time. */
static void attention(bt_forward_t *f, int il, float *out)
{
    const bt_kv_cache_t *kv = &f->kv;
    int n_short = 0;
    for (int i = 0; i < f->n_runs; i++) {
        const bt_run_t *r = &f->runs[i];
        const size_t at = (size_t)r->first * (size_t)kv->kv_dim;
        bt_kv_cache_put_k(kv, il, r->slot, f->k + at, r->n, r->pos0);
        bt_kv_cache_put_v(kv, il, r->slot, f->v + at, r->n, r->pos0);
        n_short += r->n <= BT_SHORT_RUN;
    }
    const bt_scratch_t *s = &f->scratch;
    const int team = s->n_threads < n_short ? s->n_threads : n_short;
    for (int i = 0; i < f->n_runs; i++)
        if (f->runs[i].n > BT_SHORT_RUN || team < 2)
            attend_run(f, il, &f->runs[i], out, s);
    if (team < 2)
        return;
#pragma omp parallel num_threads(team)
    {
        const bt_scratch_t mine = {s->buf + (size_t)omp_get_thread_num() * s->per_thread,
                                   s->per_thread, 1};
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < f->n_runs; i++)
            if (f->runs[i].n <= BT_SHORT_RUN)
                attend_run(f, il, &f->runs[i], out, &mine);
    }
}

/* Rotary embedding of q and k, run by run (each at its own positions),
 * with the layer's base and scaling and the model's pairing and factors:
 * the n_rot dims from dim `from` of each head (MLA: the rope part after
 * the latent's). */
static void rope_at(bt_forward_t *f, const bt_layer_t *l, int from)
{
    const bt_hparams_t *hp = &f->m->hp;
    const size_t q_dim = (size_t)f->n_head_l * hp->head_dim, kv_dim = (size_t)f->kv.kv_dim;
    const bt_rope_t r = {hp->n_rot,      l->rope_base,  l->rope_freq_scale,
                         f->m->rope_factors, hp->arch->rope == BT_ROPE_NEOX,
                         hp->yarn,       hp->yarn_low,  hp->yarn_high, hp->yarn_mscale};
    for (int i = 0; i < f->n_runs; i++) {
        const bt_run_t *run = &f->runs[i];
        bt_rope_f32(f->q + run->first * q_dim + from, run->n, run->pos0, f->n_head_l,
                    hp->head_dim, &r);
        bt_rope_f32(f->k + run->first * kv_dim + from, run->n, run->pos0, f->n_kv_l,
                    hp->head_dim, &r);
    }
}

/* rope_at on the whole heads of every family but MLA. */
static void rope(bt_forward_t *f, const bt_layer_t *l)
{
    rope_at(f, l, 0);
}

/* x = W xn (+ bias) for n_tok rows. */
static void project(const bt_forward_t *f, float *out, const bt_matrix_t *w, const float *bias,
                    const float *xn, int n_tok)
{
    f->ops->matmul(out, w, xn, n_tok, &f->scratch);
    if (bias != NULL)
        bt_add_rows_f32(out, bias, n_tok, w->n_out);
}

/* x += norm(y) where the layer has a post-norm, else x += y. */
static void residual(const bt_forward_t *f, float *x, float *y, const float *post_norm, int n_tok)
{
    const bt_hparams_t *hp = &f->m->hp;
    if (post_norm != NULL)
        bt_rmsnorm_f32(y, y, post_norm, n_tok, hp->n_embd, hp->rms_eps);
    bt_add_f32(x, y, (int64_t)n_tok * hp->n_embd);
}

/* The job out = W x for n_tok rows. */
static bt_matmul_job_t job(float *out, const bt_matrix_t *w, const float *x, int n_tok)
{
    return (bt_matmul_job_t){out, *w, x, n_tok};
}

/* act(gate) * up into gate, n elements, as the architecture says. */
static void activate(const bt_forward_t *f, float *gate, const float *up, int64_t n)
{
    switch (f->m->hp.arch->act) {
    case BT_ACT_GELU_TANH: bt_geglu_f32(gate, up, n); break;
    case BT_ACT_SWIGLU_OAI: bt_swiglu_oai_f32(gate, up, n); break;
    default: bt_swiglu_f32(gate, up, n); break;
    }
}

/* f->gate = act(gate(xn)) * up(xn) for n_tok rows, gate and up in one
 * call (f->up holds up(xn)). */
static void gate_up(bt_forward_t *f, const bt_matrix_t *gate, const bt_matrix_t *up, int n_tok)
{
    const bt_matmul_job_t gu[2] = {job(f->gate, gate, f->xn, n_tok), job(f->up, up, f->xn, n_tok)};
    bt_matmul_many(f->ops, gu, 2, &f->scratch);
    activate(f, f->gate, f->up, (int64_t)n_tok * gate->n_out);
}

/* The dense FFN on f->xn into f->o: down(act(gate(xn)) * up(xn)), gate
 * and up in one call. Tensor ranks: each its hidden units, gathered whole
 * for down; each its output features of down, gathered. */
static bt_status_t ffn(bt_forward_t *f, const bt_layer_t *l, int n_tok)
{
    gate_up(f, &l->w_gate, &l->w_up, n_tok);
    const bt_share_t *sh = &f->m->share;
    if (summed(f)) { /* its hidden units' columns of down: a partial sum */
        f->ops->matmul(f->part, &l->w_down, f->gate, n_tok, &f->scratch);
        return sum_rows(f, f->part, n_tok);
    }
    float *hidden = split(f) ? f->up : f->gate; /* [n_tok, n_ff] */
    bt_status_t st = gather_cols(f, hidden, f->gate, n_tok, sh->ff, 1);
    if (st != BT_OK)
        return st;
    float *o = split(f) ? f->part : f->o;
    f->ops->matmul(o, &l->w_down, hidden, n_tok, &f->scratch);
    return gather_cols(f, f->o, o, n_tok, sh->embd, 1);
}

/* Row e of a per-expert bias of width n (NULL: none). */
static const float *expert_row(const float *b, int e, int64_t n)
{
    return b != NULL ? b + (size_t)e * (size_t)n : NULL;
}

/* Mixture of experts on f->xn into f->o: each row's router picks its k
 * experts (bt_topk_softmax); each expert runs once on the rows that chose
 * it, gathered into one batch (a GEMM per expert, or a GEMV for a lone
 * row), all experts' products in one call (bt_matmul_many, so a few rows'
 * small products still use every thread); each row then sums its
 * experts' outputs, weighted, best first. A row's result depends on its
 * own input alone (the kernels' rows are independent, the sum's order is
 * the row's own ranking), so not on which other rows share its
 * micro-batch or chose the same experts. Tensor ranks route alike (the
 * router is whole on each), run their own experts only, and gather the
 * experts' outputs, which lie expert by expert, so rank by rank. */
static bt_status_t experts(bt_forward_t *f, const bt_layer_t *l, int n_tok)
{
    const bt_hparams_t *hp = &f->m->hp;
    const bt_share_t *sh = &f->m->share;
    const int k = hp->n_expert_used, n_embd = hp->n_embd, n_exp = hp->n_expert;
    const int e0 = sh->expert[sh->rank], e1 = sh->expert[sh->rank + 1]; /* this rank's */
    const int64_t n_ff = hp->n_ff_exp;
    const size_t e_sz = (size_t)n_embd;
    project(f, f->route, &l->router, l->router_bias, f->xn, n_tok);
    bt_route_t how = hp->route;
    how.bias = l->exp_probs_b;
    for (int t = 0; t < n_tok; t++)
        if (hp->arch->mla)
            bt_route(f->route + (size_t)t * n_exp, n_exp, k, &how, f->sel + t * k,
                     f->sel_w + t * k, f->route + (size_t)f->max_tok * n_exp);
        else
            bt_topk_softmax(f->route + (size_t)t * n_exp, n_exp, k, f->sel + t * k,
                            f->sel_w + t * k);
    /* expert by expert, the (row, rank) pairs that chose it, in row order;
     * chosen: the experts some row chose */
    int n = 0, chosen = 0;
    for (int e = 0; e < n_exp; e++) {
        f->exp_rows[e] = n;
        for (int j = 0; j < n_tok * k; j++)
            if (f->sel[j] == e) {
                f->gather[j] = n;
                if (e >= e0 && e < e1)
                    memcpy(f->xg + (size_t)n * e_sz, f->xn + (size_t)(j / k) * e_sz,
                           e_sz * sizeof(float));
                n++;
            }
        chosen += n > f->exp_rows[e];
    }
    f->exp_rows[n_exp] = n;
    int busiest = 0; /* the most chosen experts one tensor rank holds */
    for (int r = 0; r < sh->size; r++) {
        int held = 0;
        for (int e = sh->expert[r]; e < sh->expert[r + 1]; e++)
            held += f->exp_rows[e + 1] > f->exp_rows[e];
        busiest = held > busiest ? held : busiest;
    }
    f->counted.calls++;
    f->counted.rows += (uint64_t)n_tok;
    f->counted.experts += (uint64_t)chosen;
    f->counted.busiest += (uint64_t)busiest;
    int nj = 0;
    for (int e = e0; e < e1; e++) {
        const int r0 = f->exp_rows[e], ne = f->exp_rows[e + 1] - r0;
        if (ne == 0)
            continue;
        const bt_matrix_t g = bt_expert(&l->gate_exps, e - e0), u = bt_expert(&l->up_exps, e - e0);
        f->jobs[nj++] = job(f->gate + (size_t)r0 * n_ff, &g, f->xg + (size_t)r0 * e_sz, ne);
        f->jobs[nj++] = job(f->up + (size_t)r0 * n_ff, &u, f->xg + (size_t)r0 * e_sz, ne);
    }
    bt_matmul_many(f->ops, f->jobs, nj, &f->scratch);
    for (int e = e0; e < e1 && (l->gate_exps_bias || l->up_exps_bias); e++) {
        const int r0 = f->exp_rows[e], ne = f->exp_rows[e + 1] - r0;
        if (l->gate_exps_bias != NULL)
            bt_add_rows_f32(f->gate + (size_t)r0 * n_ff,
                            expert_row(l->gate_exps_bias, e - e0, n_ff), ne, n_ff);
        if (l->up_exps_bias != NULL)
            bt_add_rows_f32(f->up + (size_t)r0 * n_ff, expert_row(l->up_exps_bias, e - e0, n_ff),
                            ne, n_ff);
    }
    const int mine0 = f->exp_rows[e0], mine1 = f->exp_rows[e1];
    activate(f, f->gate + (size_t)mine0 * n_ff, f->up + (size_t)mine0 * n_ff,
             (int64_t)(mine1 - mine0) * n_ff);
    nj = 0;
    for (int e = e0; e < e1; e++) {
        const int r0 = f->exp_rows[e], ne = f->exp_rows[e + 1] - r0;
        if (ne == 0)
            continue;
        const bt_matrix_t d = bt_expert(&l->down_exps, e - e0);
        f->jobs[nj++] = job(f->y_exp + (size_t)r0 * e_sz, &d, f->gate + (size_t)r0 * n_ff, ne);
    }
    bt_matmul_many(f->ops, f->jobs, nj, &f->scratch);
    for (int e = e0; e < e1 && l->down_exps_bias != NULL; e++) {
        const int r0 = f->exp_rows[e], ne = f->exp_rows[e + 1] - r0;
        bt_add_rows_f32(f->y_exp + (size_t)r0 * e_sz,
                        expert_row(l->down_exps_bias, e - e0, n_embd), ne, n_embd);
    }
    if (split(f) && !summed(f)) {
        for (int r = 0; r <= sh->size; r++)
            f->exp_at[r] = f->exp_rows[sh->expert[r]];
        bt_status_t st = f->coll.runs(f->coll.ctx, f->y_exp, f->exp_at, n_embd);
        if (st != BT_OK)
            return st;
    }
    /* each row its experts, weighted, best first (summed: this rank's) */
    float *o = summed(f) ? f->part : f->o;
    memset(o, 0, (size_t)n_tok * e_sz * sizeof(float));
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < k; i++)
            if (!summed(f) || (f->sel[t * k + i] >= e0 && f->sel[t * k + i] < e1))
                bt_axpy_f32(o + (size_t)t * e_sz, f->sel_w[t * k + i],
                            f->y_exp + (size_t)f->gather[t * k + i] * e_sz, n_embd);
    if (summed(f)) {
        bt_status_t st = sum_rows(f, f->part, n_tok);
        if (st != BT_OK)
            return st;
    }
    if (l->gate_shexp.data != NULL) { /* shared experts, added after the routed ones */
        gate_up(f, &l->gate_shexp, &l->up_shexp, n_tok);
        f->ops->matmul(f->xg, &l->down_shexp, f->gate, n_tok, &f->scratch);
        bt_add_f32(f->o, f->xg, (int64_t)n_tok * n_embd);
    }
    return BT_OK;
}

/* The rows of head h in a head-by-head buffer of n_tok rows of width w. */
static float *head_rows(float *buf, int h, int n_tok, int w)
{
    return buf + (size_t)h * (size_t)n_tok * (size_t)w;
}

/* Head h's matrix of a per-head tensor w (MLA's k_b, v_b) on the first
 * w->n_in values of head h of each row of src (heads `stride` floats
 * apart, n_head a row), every head in one call: f->mla_out gets the
 * products head by head (head_rows, w->n_out wide). */
static void per_head(bt_forward_t *f, const bt_matrix_t *w, const float *src, int stride,
                     int n_tok)
{
    const int nh = f->m->hp.n_head, n_in = (int)w->n_in, n_out = (int)w->n_out;
    for (int h = 0; h < nh; h++) {
        for (int t = 0; t < n_tok; t++)
            memcpy(head_rows(f->mla_in, h, n_tok, n_in) + (size_t)t * n_in,
                   src + ((size_t)t * nh + h) * stride, (size_t)n_in * sizeof(float));
        const bt_matrix_t wh = bt_expert(w, h);
        f->jobs[h] = job(head_rows(f->mla_out, h, n_tok, n_out), &wh,
                         head_rows(f->mla_in, h, n_tok, n_in), n_tok);
    }
    bt_matmul_many(f->ops, f->jobs, nh, &f->scratch);
}

/* Multi-head Latent Attention on f->xn into f->o, in the latent space for
 * prefill and decode alike (so both give the same bits): each head's
 * query times its key up-projection (k_b) meets the cached latent rows
 * [normed latent | roped shared key] as one kv head of kv_lora + n_rot;
 * the weighted sum of the same rows' latents goes through the head's
 * value up-projection (v_b), then attn_output. The cache holds the
 * latent row, not the heads' keys and values (docs/design.md). */
static void mla_attention(bt_forward_t *f, const bt_layer_t *l, int il, int n_tok)
{
    const bt_hparams_t *hp = &f->m->hp;
    const int nh = hp->n_head, dqk = hp->d_qk, rot = hp->n_rot, nope = dqk - rot;
    const int kvl = hp->kv_lora, hd = hp->head_dim, dv = hp->d_v;
    const size_t fl = sizeof(float);
    if (l->q_a.data != NULL) { /* the low-rank query pair, and the latent row */
        const bt_matmul_job_t a[2] = {job(f->mla_qa, &l->q_a, f->xn, n_tok),
                                      job(f->k, &l->kv_a, f->xn, n_tok)};
        bt_matmul_many(f->ops, a, 2, &f->scratch);
        bt_rmsnorm_f32(f->mla_qa, f->mla_qa, l->q_a_norm, n_tok, hp->q_lora, hp->rms_eps);
        f->ops->matmul(f->mla_q, &l->q_b, f->mla_qa, n_tok, &f->scratch);
    } else {
        const bt_matmul_job_t a[2] = {job(f->mla_q, &l->wq, f->xn, n_tok),
                                      job(f->k, &l->kv_a, f->xn, n_tok)};
        bt_matmul_many(f->ops, a, 2, &f->scratch);
    }
    for (int t = 0; t < n_tok; t++) /* the latent normed, the shared rope key not */
        bt_rmsnorm_f32(f->k + (size_t)t * hd, f->k + (size_t)t * hd, l->kv_a_norm, 1, kvl,
                       hp->rms_eps);
    per_head(f, &l->k_b, f->mla_q, dqk, n_tok); /* the query's latent part */
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < nh; h++) {
            float *q = f->q + ((size_t)t * nh + h) * hd;
            memcpy(q, head_rows(f->mla_out, h, n_tok, kvl) + (size_t)t * kvl, (size_t)kvl * fl);
            memcpy(q + kvl, f->mla_q + ((size_t)t * nh + h) * dqk + nope, (size_t)rot * fl);
        }
    rope_at(f, l, kvl);
    memcpy(f->v, f->k, (size_t)n_tok * hd * fl); /* the values are the same latent rows */
    attention(f, il, f->att);
    per_head(f, &l->v_b, f->att, hd, n_tok); /* each head's weighted latent, its values */
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < nh; h++)
            memcpy(f->mla_att + ((size_t)t * nh + h) * dv,
                   head_rows(f->mla_out, h, n_tok, dv) + (size_t)t * dv, (size_t)dv * fl);
    project(f, f->o, &l->wo, NULL, f->mla_att, n_tok);
}

/* Attention of every family but MLA on f->xn into f->o: q, k, v (with
 * their biases and norms), rope, the cache and attention, attn_output.
 * Tensor ranks: each its heads and its output features, gathered. */
static bt_status_t attention_block(bt_forward_t *f, const bt_layer_t *l, int il, int n_tok)
{
    const bt_hparams_t *hp = &f->m->hp;
    const bt_share_t *sh = &f->m->share;
    const bt_matmul_job_t qkv[3] = {job(f->q, &l->wq, f->xn, n_tok), job(f->k, &l->wk, f->xn, n_tok),
                                    job(f->v, &l->wv, f->xn, n_tok)};
    bt_matmul_many(f->ops, qkv, 3, &f->scratch);
    if (l->q_bias != NULL)
        bt_add_rows_f32(f->q, l->q_bias, n_tok, l->wq.n_out);
    if (l->k_bias != NULL)
        bt_add_rows_f32(f->k, l->k_bias, n_tok, l->wk.n_out);
    if (l->v_bias != NULL)
        bt_add_rows_f32(f->v, l->v_bias, n_tok, l->wv.n_out);
    if (l->q_norm != NULL) /* per head: rows of head_dim values */
        bt_rmsnorm_f32(f->q, f->q, l->q_norm, n_tok * f->n_head_l, hp->head_dim, hp->rms_eps);
    if (l->k_norm != NULL)
        bt_rmsnorm_f32(f->k, f->k, l->k_norm, n_tok * f->n_kv_l, hp->head_dim, hp->rms_eps);
    rope(f, l);
    if (summed(f)) { /* its heads' columns of attn_output: a partial sum, then the bias */
        attention(f, il, f->att);
        f->ops->matmul(f->part, &l->wo, f->att, n_tok, &f->scratch);
        bt_status_t st = sum_rows(f, f->part, n_tok);
        if (st == BT_OK && l->o_bias != NULL)
            bt_add_rows_f32(f->o, l->o_bias, n_tok, hp->n_embd);
        return st;
    }
    float *mine = split(f) ? f->part : f->att;
    attention(f, il, mine);
    bt_status_t st = gather_cols(f, f->att, mine, n_tok, sh->head, hp->head_dim);
    if (st != BT_OK)
        return st;
    mine = split(f) ? f->part : f->o;
    project(f, mine, &l->wo, l->o_bias, f->att, n_tok);
    return gather_cols(f, f->o, mine, n_tok, sh->embd, 1);
}

/* One block on x [n_tok, n_embd] in place, as the layer's tensors and the
 * architecture say (arch.h). Tensor ranks: each its heads (their part of
 * q, k, v, the cache and attention) and its output features of
 * attn_output, with the heads' outputs and the features gathered; the
 * norms and residuals run whole on every rank. */
static bt_status_t layer(bt_forward_t *f, int il, float *x, int n_tok)
{
    const bt_hparams_t *hp = &f->m->hp;
    const bt_layer_t *l = &f->m->layers[il];
    const int n_embd = hp->n_embd;

    /* attention */
    bt_rmsnorm_f32(f->xn, x, l->attn_norm, n_tok, n_embd, hp->rms_eps);
    bt_status_t st = BT_OK;
    if (hp->arch->mla)
        mla_attention(f, l, il, n_tok);
    else if ((st = attention_block(f, l, il, n_tok)))
        return st;
    residual(f, x, f->o, l->post_attn_norm, n_tok);

    /* feed-forward: down(act(gate(xn)) * up(xn)), dense or by experts */
    bt_rmsnorm_f32(f->xn, x, l->ffn_norm, n_tok, n_embd, hp->rms_eps);
    st = l->router.data != NULL ? experts(f, l, n_tok) : ffn(f, l, n_tok);
    if (st != BT_OK)
        return st;
    residual(f, x, f->o, l->post_ffn_norm, n_tok);
    return BT_OK;
}

/* Checks the rows against the cache and splits them into runs. */
static bt_status_t make_runs(bt_forward_t *f, const bt_row_t *rows, int n_rows)
{
    if (n_rows < 1 || n_rows > f->max_tok) {
        bt_log_error("forward: %d rows do not fit a micro-batch of at most %d", n_rows,
                     f->max_tok);
        return BT_ERR_ARG;
    }
    for (int s = 0; s < f->n_slot; s++)
        f->slot_next[s] = 0;
    f->n_runs = 0;
    for (int r = 0; r < n_rows; r++) {
        const bt_row_t *w = &rows[r];
        if (w->slot < 0 || w->slot >= f->n_slot || w->pos < f->slot_next[w->slot] ||
            w->pos >= f->n_ctx) {
            bt_log_error("forward: row %d (slot %d, position %d) does not fit the cache (%d slots "
                         "of %d positions, each slot's rows at increasing positions)",
                         r, w->slot, w->pos, f->n_slot, f->n_ctx);
            return BT_ERR_ARG;
        }
        f->slot_next[w->slot] = w->pos + 1;
        bt_run_t *last = f->n_runs ? &f->runs[f->n_runs - 1] : NULL;
        if (last != NULL && last->slot == w->slot && last->pos0 + last->n == w->pos)
            last->n++;
        else
            f->runs[f->n_runs++] = (bt_run_t){r, 1, w->slot, w->pos};
    }
    return BT_OK;
}

bt_status_t bt_forward_rows(bt_forward_t *f, float *x, const bt_row_t *rows, int n_rows)
{
    return bt_forward_rows_range(f, x, rows, n_rows, 0, f->m->last - f->m->first);
}

bt_status_t bt_forward_rows_range(bt_forward_t *f, float *x, const bt_row_t *rows, int n_rows,
                                  int l0, int l1)
{
    bt_status_t st = make_runs(f, rows, n_rows);
    if (st != BT_OK)
        return st;
    for (int il = l0; il < l1; il++) {
        if ((st = layer(f, il, x, n_rows)))
            return st;
        if (f->progress != NULL)
            f->progress(f->progress_arg);
    }
    return BT_OK;
}

bt_status_t bt_forward_layers(bt_forward_t *f, float *x, int n_tok, int pos0)
{
    if (n_tok < 1 || n_tok > f->max_tok || pos0 < 0 || pos0 > f->n_ctx - n_tok) {
        bt_log_error("forward: %d tokens at position %d do not fit (micro-batch <= %d, context %d)",
                     n_tok, pos0, f->max_tok, f->n_ctx);
        return BT_ERR_ARG;
    }
    for (int t = 0; t < n_tok; t++)
        f->rows[t] = (bt_row_t){0, pos0 + t, 0, 0};
    return bt_forward_rows(f, x, f->rows, n_tok);
}

/* logits = output . xn for n rows of f->xn, softcapped where the model says. */
static void head_logits(bt_forward_t *f, int n, float *logits)
{
    const bt_hparams_t *hp = &f->m->hp;
    f->ops->matmul(logits, &f->m->output, f->xn, n, &f->scratch);
    if (hp->logit_softcap > 0.0f)
        bt_softcap_f32(logits, hp->logit_softcap, (int64_t)n * f->m->output.n_out);
}

void bt_forward_head(bt_forward_t *f, const float *x, int n_rows, float *logits)
{
    const bt_hparams_t *hp = &f->m->hp;
    bt_rmsnorm_f32(f->xn, x, f->m->out_norm, n_rows, hp->n_embd, hp->rms_eps);
    head_logits(f, n_rows, logits);
}

void bt_forward_head_rows(bt_forward_t *f, const float *x, const int *idx, int n, float *logits)
{
    const bt_hparams_t *hp = &f->m->hp;
    const size_t e = (size_t)hp->n_embd;
    for (int i = 0; i < n; i++)
        bt_rmsnorm_f32(f->xn + i * e, x + (size_t)idx[i] * e, f->m->out_norm, 1, hp->n_embd,
                       hp->rms_eps);
    head_logits(f, n, logits);
}
