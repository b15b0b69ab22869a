/*
 * kv_cache.h: f32 keys and values for the layers one stage owns.
 *
 * Layout per layer: k, v each [n_ctx, kv_dim] (kv_dim = n_head_kv *
 * head_dim), so the K/V rows a matmul produces for positions pos0.. land
 * in the cache contiguously.
 */
#ifndef BT_KV_CACHE_H
#define BT_KV_CACHE_H

#include <stddef.h>

#include "common.h"

typedef struct bt_kv_cache {
    int n_layer; /* layers held (the stage's range) */
    int n_ctx;
    int kv_dim;
    float *k;    /* [n_layer, n_ctx, kv_dim] */
    float *v;    /* [n_layer, n_ctx, kv_dim] */
} bt_kv_cache_t;

/* Bytes bt_kv_cache_init would allocate. */
size_t bt_kv_cache_bytes(int n_layer, int n_ctx, int kv_dim);

/* Allocates the cache (zeroed); BT_ERR_NOMEM with a message on failure. */
bt_status_t bt_kv_cache_init(bt_kv_cache_t *c, int n_layer, int n_ctx, int kv_dim);
void bt_kv_cache_free(bt_kv_cache_t *c);

/* Keys and values of local layer il (0 .. n_layer-1): [n_ctx, kv_dim]. */
static inline float *bt_kv_cache_k(const bt_kv_cache_t *c, int il)
{
    return c->k + (size_t)il * c->n_ctx * c->kv_dim;
}

static inline float *bt_kv_cache_v(const bt_kv_cache_t *c, int il)
{
    return c->v + (size_t)il * c->n_ctx * c->kv_dim;
}

#endif /* BT_KV_CACHE_H */
