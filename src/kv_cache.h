/*
 * kv_cache.h: f32 keys and values for the layers one stage owns.
 *
 * Layout per layer: v is [n_ctx, kv_dim] (kv_dim = n_head_kv * head_dim), so
 * the V rows a matmul produces for positions pos0.. land in the cache
 * contiguously; k is transposed, [kv_dim, n_ctx], so attention reads the
 * keys of one dimension for consecutive positions as one vector.
 */
#ifndef BT_KV_CACHE_H
#define BT_KV_CACHE_H

#include <stddef.h>

#include "common.h"

typedef struct bt_kv_cache {
    int n_layer; /* layers held (the stage's range) */
    int n_ctx;
    int kv_dim;
    int k_stride; /* floats between the rows of the transposed keys (>= n_ctx) */
    float *k;    /* [n_layer, kv_dim, k_stride] (transposed) */
    float *v;    /* [n_layer, n_ctx, kv_dim] */
} bt_kv_cache_t;

/* Row stride of the transposed keys for n_ctx positions: a multiple of 16
 * floats that is not a multiple of 1 KiB, so the rows a key block reads do
 * not all fall into the same cache sets. */
int bt_kv_cache_k_stride(int n_ctx);

/* Bytes bt_kv_cache_init would allocate. */
size_t bt_kv_cache_bytes(int n_layer, int n_ctx, int kv_dim);

/* Allocates the cache (zeroed); BT_ERR_NOMEM with a message on failure. */
bt_status_t bt_kv_cache_init(bt_kv_cache_t *c, int n_layer, int n_ctx, int kv_dim);
void bt_kv_cache_free(bt_kv_cache_t *c);

/* Keys [kv_dim, k_stride] and values [n_ctx, kv_dim] of local layer il. */
static inline float *bt_kv_cache_k(const bt_kv_cache_t *c, int il)
{
    return c->k + (size_t)il * c->k_stride * c->kv_dim;
}

static inline float *bt_kv_cache_v(const bt_kv_cache_t *c, int il)
{
    return c->v + (size_t)il * c->n_ctx * c->kv_dim;
}

#endif /* BT_KV_CACHE_H */
