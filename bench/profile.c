/* profile.c: `baton-bench --profile`: the costs a planner needs (plan.h). */
#include "profile.h"

#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "kernels/kernels.h"
#include "model.h"
#include "rng.h"
#include "stages/transport.h"

/* The median of up to 7 timed calls of what, at least 3, until 0.2 s. */
typedef enum { P_LAYERS, P_HEAD, P_EMBED } part_t;

typedef struct probe {
    bt_forward_t *f;
    float *x, *x0, *logits; /* x0: the embedded rows each timed call starts from */
    int32_t *ids;
    bt_row_t *rows;
} probe_t;

static bt_status_t run_part(probe_t *pr, part_t part, int n, int ctx)
{
    memcpy(pr->x, pr->x0, sizeof(float) * (size_t)n * (size_t)pr->f->m->hp.n_embd);
    switch (part) {
    case P_LAYERS:
        for (int r = 0; r < n; r++)
            pr->rows[r] = (bt_row_t){0, ctx + r, 0, 0};
        return bt_forward_rows(pr->f, pr->x, pr->rows, n);
    case P_HEAD:
        bt_forward_head(pr->f, pr->x, n, pr->logits);
        return BT_OK;
    default:
        return bt_forward_embed(pr->f, pr->ids, n, pr->x);
    }
}

static bt_status_t time_part(probe_t *pr, part_t part, int n, int ctx, double *median)
{
    double t[7];
    int k = 0;
    const double t_end = bt_now() + 0.2;
    bt_status_t st = run_part(pr, part, n, ctx); /* warm-up */
    while (st == BT_OK && k < 7 && (k < 3 || bt_now() < t_end)) {
        const size_t bytes = sizeof(float) * (size_t)n * (size_t)pr->f->m->hp.n_embd;
        memcpy(pr->x, pr->x0, bytes); /* outside the timing (run_part copies it again) */
        const double t0 = bt_now();
        st = run_part(pr, part, n, ctx);
        t[k++] = bt_now() - t0;
    }
    *median = k > 0 ? bt_median(t, k) : 0.0;
    return st;
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
    probe_t pr = {0};
    st = bt_forward_init(m, pp->ops, n_ctx, 1, pp->ubatch, pp->threads, pp->kv_type, &pr.f);
    const size_t cap = (size_t)n_rows * ((size_t)pp->n_ctx + 2);
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
    for (int part = P_LAYERS; part <= P_EMBED && st == BT_OK; part++)
        for (int c = 0; c < (part == P_LAYERS ? pp->n_ctx : 1) && st == BT_OK; c++)
            for (int i = 0; i < n_rows && st == BT_OK; i++) {
                double sec;
                const int ctx = part == P_LAYERS ? pp->ctx[c] : 0;
                st = time_part(&pr, (part_t)part, rows[i], ctx, &sec);
                if (part == P_LAYERS)
                    sec /= hp->n_layer;
                bt_profile_row_t *r = &res[k++];
                snprintf(r->model_filename, sizeof r->model_filename, "%s", pp->model);
                snprintf(r->kind, sizeof r->kind, "%s",
                         part == P_LAYERS ? "layer" : part == P_HEAD ? "head" : "embed");
                r->n_rows = rows[i];
                r->n_ctx = ctx;
                r->n_threads = pp->threads;
                r->n_layer = hp->n_layer;
                r->seconds = sec;
                r->act_bytes_row = act_row;
                r->weight_bytes = held;
                r->kv_bytes_pos = (double)bt_kv_cache_bytes(1, 1, 1, hp->n_head_kv * hp->head_dim,
                                                            pp->kv_type);
                r->msg_bytes = msg;
            }
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
    fprintf(f, "| part | rows | context | threads | ms a call | us a row |\n");
    fprintf(f, "| --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < n; i++)
        fprintf(f, "| %s | %d | %d | %d | %.4f | %.2f |\n", rows[i].kind, rows[i].n_rows,
                rows[i].n_ctx, rows[i].n_threads, rows[i].seconds * 1e3,
                rows[i].seconds * 1e6 / rows[i].n_rows);
}
