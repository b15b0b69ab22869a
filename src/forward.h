/*
 * forward.h: one micro-batch through a layer range of a llama model.
 *
 * A bt_forward_t holds everything a stage computes with: the bound model
 * range, the ops table, its KV cache and the activation buffers for the
 * largest micro-batch, all allocated once by bt_forward_init(). Nothing is
 * allocated per token or per micro-batch. It knows kernels and the model,
 * not MPI: a pipeline stage passes its receive buffer as x and installs a
 * progress hook that runs between layers (to drive outstanding requests).
 *
 * Flow for a stage: embed (first stage) -> layers (every stage, x in place)
 * -> head (last stage). A micro-batch is a list of rows (bt_row_t): each
 * row is one token of one sequence, with its KV slot and its absolute
 * position. The caller feeds each slot's positions in increasing order
 * without gaps. Every operation treats rows independently, so a row's
 * result does not depend on the other rows of its micro-batch
 * (docs/design.md, invariant 1).
 */
#ifndef BT_FORWARD_H
#define BT_FORWARD_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "kv_cache.h"
#include "model.h"
#include "rows.h"

typedef void (*bt_progress_fn)(void *arg);

/* Tensor parallelism (the model's bt_share_t, size > 1): the collectives a
 * layer needs between the ranks of its stage, installed by the stage
 * (forward knows no MPI). at[0 .. size] are the ranks' ranges in units of
 * `unit` floats. Each returns BT_OK or the status of a failed collective. */
typedef struct bt_gather {
    /* Row by row: out[t] = the ranks' blocks of row t side by side, rank
     * r's (at[r+1] - at[r]) * unit floats from its mine[t] at column
     * at[r] * unit. mine: [n_rows, this rank's block], out: [n_rows,
     * at[size] * unit]. */
    bt_status_t (*cols)(void *ctx, float *out, const float *mine, int n_rows, const int *at,
                        int unit);
    /* In place: buf[at[r] * unit .. at[r+1] * unit) from rank r, to every rank. */
    bt_status_t (*runs)(void *ctx, float *buf, const int *at, int unit);
    /* The share's sum (bt_share_t.sum): out[i] = the ranks' mine[i] added
     * in rank order, ((mine_0 + mine_1) + mine_2) ..., the same bits on
     * every rank; n floats. out may be mine. */
    bt_status_t (*sum)(void *ctx, float *out, const float *mine, int n);
    void *ctx;
} bt_gather_t;

/* A run: consecutive rows of one slot at consecutive positions, which
 * rope, the cache stores and attention take as one block. */
typedef struct bt_run {
    int first, n; /* rows first .. first + n - 1 */
    int slot, pos0;
} bt_run_t;

/* What the routers of a forward's expert layers chose: summed over the
 * layer calls (each layer on each micro-batch), the rows and the distinct
 * experts the rows chose (of the whole layer, on a tensor rank too), and
 * of those the most that one of the stage's tensor ranks holds (a call
 * waits for that rank; experts itself without tensor ranks). Their means a
 * call say how much of the experts a workload's micro-batches read, which
 * depends on the router and the sequences (baton-plan uses them). */
typedef struct bt_expert_count {
    uint64_t calls, rows, experts, busiest;
} bt_expert_count_t;

typedef struct bt_forward {
    const bt_model_t *m;
    const bt_ops_t *ops;
    int n_ctx;   /* positions per slot */
    int n_slot;  /* sequences the cache holds */
    int max_tok;
    bt_kv_cache_t kv;
    bt_scratch_t scratch;
    float *xn;   /* [max_tok, n_embd] normed input of a sub-block */
    float *q;    /* [max_tok, n_head * head_dim] */
    float *k;    /* [max_tok, n_head_kv * head_dim] this batch's keys, before the cache */
    float *v;    /* [max_tok, n_head_kv * head_dim] this batch's values, before the cache */
    float *att;  /* [max_tok, n_head * head_dim] attention output */
    float *o;    /* [max_tok, n_embd] projection output before the residual */
    /* tensor parallelism: this rank's columns before a gather (the heads'
     * attention, attn_output's and ffn_down's features) */
    float *part;   /* [max_tok, max(n_head * head_dim, n_embd)]; NULL on one rank */
    float *piece;  /* [2, max_tok, group * head_dim] a kv group's query heads when a group
                    * spans ranks (q, then out); NULL otherwise */
    int *exp_at;   /* [size + 1] the ranks' first rows of xg (experts) */
    bt_gather_t coll; /* the stage's collectives (tensor ranks) */
    int head0, n_head_l, kv0, n_kv_l; /* this rank's query and kv heads */
    float *gate; /* [max_tok, max(n_ff, k n_ff_exp)] (experts: one row per choice) */
    float *up;   /* the same */
    /* mixture of experts (n_expert > 0), k = n_expert_used: */
    float *route;  /* [max_tok + 2, n_expert] router logits (2 rows of bt_route's scratch) */
    int *sel;      /* [max_tok, k] the chosen experts of each row, best first */
    float *sel_w;  /* [max_tok, k] their weights */
    int *gather;   /* [max_tok * k] where choice j (row j / k, rank j % k) is in xg */
    int *exp_rows; /* [n_expert + 1] expert e's rows of xg begin at exp_rows[e] */
    float *xg;     /* [max_tok * k, n_embd] the rows each expert takes, expert by expert */
    float *y_exp;  /* [max_tok * k, n_embd] the experts' outputs, in xg's order */
    bt_matmul_job_t *jobs; /* [2 n_expert + 3 + n_head] products of one batch */
    bt_expert_count_t counted; /* the expert layers' calls so far */
    /* Multi-head Latent Attention (arch->mla): q, k, att above hold the absorbed
     * form (n_head query rows and one cache row of kv_lora + n_rot a token) */
    float *mla_q;   /* [max_tok, n_head * d_qk] the projected queries */
    float *mla_qa;  /* [max_tok, q_lora] the low-rank query */
    float *mla_in;  /* [n_head, max_tok, max(nope, kv_lora)] a head's rows, head by head */
    float *mla_out; /* [n_head, max_tok, max(kv_lora, d_v)] their products */
    float *mla_att; /* [max_tok, n_head * d_v] the heads' values, attn_output's input */
    bt_row_t *rows; /* [max_tok] bt_forward_layers' rows */
    bt_run_t *runs; /* [max_tok] the current micro-batch's runs */
    int n_runs;
    int *slot_next; /* [n_slot] scratch of the row check */
    bt_progress_fn progress;
    void *progress_arg;
} bt_forward_t;

/* Bytes of activations, cache and scratch bt_forward_init would allocate. */
size_t bt_forward_bytes(const bt_model_t *m, int n_ctx, int n_slot, int max_tok, int n_threads,
                        uint32_t kv_type);

/* The same for a stage that holds layers, without its KV cache (which is
 * bt_kv_cache_bytes per layer): known before any tensor is bound. */
size_t bt_forward_buffer_bytes(const bt_hparams_t *hp, int n_ctx, int n_slot, int max_tok,
                               int n_threads);

/* Allocates buffers for micro-batches of up to max_tok rows and a cache of
 * n_slot sequences of n_ctx positions holding BT_TYPE_F32 or BT_TYPE_F16
 * elements. The model must outlive the forward. */
bt_status_t bt_forward_init(const bt_model_t *m, const bt_ops_t *ops, int n_ctx, int n_slot,
                            int max_tok, int n_threads, uint32_t kv_type, bt_forward_t **out);
void bt_forward_free(bt_forward_t *f);

/* Installs fn(arg) to run after each layer (NULL to remove). */
void bt_forward_set_progress(bt_forward_t *f, bt_progress_fn fn, void *arg);

/* Installs the collectives of a tensor-parallel stage (the model's share
 * has size > 1); copied. Needed before the first layer on such a stage. */
void bt_forward_set_gather(bt_forward_t *f, const bt_gather_t *g);

/* x[t] = embedding of tokens[t]; x: [n_tok, n_embd]. BT_ERR_ARG with a
 * message for a token id outside the vocabulary. Needs with_embed. */
bt_status_t bt_forward_embed(bt_forward_t *f, const int32_t *tokens, int n_tok, float *x);

/* Runs the bound layers on x in place; x: [n_rows, n_embd], row r is
 * rows[r]. BT_ERR_ARG with a message when n_rows is not in 1..max_tok, a
 * slot or position is outside the cache, or a slot's rows are not at
 * increasing positions. On a tensor rank every rank of the stage calls it
 * with the same x and rows (the layers gather between the ranks), and
 * each ends with the whole x; a failed gather's status is returned. */
bt_status_t bt_forward_rows(bt_forward_t *f, float *x, const bt_row_t *rows, int n_rows);

/* The same through bound layers [l0, l1) only (indices from the first
 * bound layer): a profile's timing of one kind of layer. */
bt_status_t bt_forward_rows_range(bt_forward_t *f, float *x, const bt_row_t *rows, int n_rows,
                                  int l0, int l1);

/* One sequence in slot 0: row t at position pos0 + t. */
bt_status_t bt_forward_layers(bt_forward_t *f, float *x, int n_tok, int pos0);

/* logits[r] = output . rmsnorm(x[r]) for n_rows rows (n_rows <= max_tok);
 * logits: [n_rows, output.n_out]: every vocabulary row, or on a tensor
 * rank its share of them (bt_share_t.vocab). Needs with_head. */
void bt_forward_head(bt_forward_t *f, const float *x, int n_rows, float *logits);

/* The same for rows idx[0 .. n) of x (n <= max_tok): logits[i] belongs to
 * row idx[i]. */
void bt_forward_head_rows(bt_forward_t *f, const float *x, const int *idx, int n,
                          float *logits);

#endif /* BT_FORWARD_H */
