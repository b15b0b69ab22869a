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
 * -> head (last stage). Positions are absolute; the caller feeds positions
 * in increasing order without gaps for each cache.
 */
#ifndef BT_FORWARD_H
#define BT_FORWARD_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "kv_cache.h"
#include "model.h"

typedef void (*bt_progress_fn)(void *arg);

typedef struct bt_forward {
    const bt_model_t *m;
    const bt_ops_t *ops;
    int n_ctx;
    int max_tok;
    bt_kv_cache_t kv;
    bt_scratch_t scratch;
    float *xn;   /* [max_tok, n_embd] normed input of a sub-block */
    float *q;    /* [max_tok, n_head * head_dim] */
    float *k;    /* [max_tok, n_head_kv * head_dim] this batch's keys, before the cache */
    float *v;    /* [max_tok, n_head_kv * head_dim] this batch's values, before the cache */
    float *att;  /* [max_tok, n_head * head_dim] attention output */
    float *o;    /* [max_tok, n_embd] projection output before the residual */
    float *gate; /* [max_tok, n_ff] */
    float *up;   /* [max_tok, n_ff] */
    bt_progress_fn progress;
    void *progress_arg;
} bt_forward_t;

/* Bytes of activations, cache and scratch bt_forward_init would allocate. */
size_t bt_forward_bytes(const bt_model_t *m, int n_ctx, int max_tok, int n_threads,
                        uint32_t kv_type);

/* Allocates buffers for micro-batches of up to max_tok tokens and a cache
 * of n_ctx positions holding BT_TYPE_F32 or BT_TYPE_F16 elements. The model
 * must outlive the forward. */
bt_status_t bt_forward_init(const bt_model_t *m, const bt_ops_t *ops, int n_ctx, int max_tok,
                            int n_threads, uint32_t kv_type, bt_forward_t **out);
void bt_forward_free(bt_forward_t *f);

/* Installs fn(arg) to run after each layer (NULL to remove). */
void bt_forward_set_progress(bt_forward_t *f, bt_progress_fn fn, void *arg);

/* x[t] = embedding of tokens[t]; x: [n_tok, n_embd]. BT_ERR_ARG with a
 * message for a token id outside the vocabulary. Needs with_embed. */
bt_status_t bt_forward_embed(bt_forward_t *f, const int32_t *tokens, int n_tok, float *x);

/* Runs the bound layers on x in place; x: [n_tok, n_embd], row t at
 * position pos0 + t. BT_ERR_ARG when n_tok > max_tok or the positions do
 * not fit the cache. */
bt_status_t bt_forward_layers(bt_forward_t *f, float *x, int n_tok, int pos0);

/* logits[r] = output . rmsnorm(x[r]) for n_rows rows (n_rows <= max_tok);
 * logits: [n_rows, n_vocab]. Needs with_head. */
void bt_forward_head(bt_forward_t *f, const float *x, int n_rows, float *logits);

#endif /* BT_FORWARD_H */
