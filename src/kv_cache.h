/*
 * kv_cache.h: keys and values (f32, or f16 to halve the memory) for the
 * layers one stage owns, in n_slot sequence slots of n_ctx positions each
 * (--parallel P: one slot per sequence in flight).
 *
 * Layout per layer and slot: v is [n_ctx, kv_dim] (kv_dim = n_head_kv * head_dim), so
 * the V rows a matmul produces for positions pos0.. land in the cache
 * contiguously; k is transposed, [kv_dim, n_ctx], so attention reads the
 * keys of one dimension for consecutive positions as one vector.
 */
#ifndef BT_KV_CACHE_H
#define BT_KV_CACHE_H

#include <stddef.h>

#include <stdint.h>

#include "common.h"
#include "kernels/types.h"

typedef struct bt_kv_cache {
    int n_layer; /* layers held (the stage's range) */
    int n_slot;  /* sequences */
    int n_ctx;   /* positions per slot */
    int kv_dim;
    int k_stride;  /* elements between the rows of the transposed keys (>= n_ctx) */
    uint32_t type; /* BT_TYPE_F32 or BT_TYPE_F16 */
    size_t elem;   /* bytes per element: 4 or 2 */
    void *k;       /* [n_layer, n_slot, kv_dim, k_stride] (transposed) */
    void *v;       /* [n_layer, n_slot, n_ctx, kv_dim] */
} bt_kv_cache_t;

/* Row stride of the transposed keys for n_ctx positions: a multiple of 16
 * elements that is not a multiple of 256, so the rows a key block reads do
 * not all fall into the same cache sets. */
int bt_kv_cache_k_stride(int n_ctx);

/* Bytes bt_kv_cache_init would allocate. */
size_t bt_kv_cache_bytes(int n_layer, int n_slot, int n_ctx, int kv_dim, uint32_t type);

/* Allocates the cache (zeroed) of type BT_TYPE_F32 or BT_TYPE_F16;
 * BT_ERR_NOMEM with a message on failure. */
bt_status_t bt_kv_cache_init(bt_kv_cache_t *c, int n_layer, int n_slot, int n_ctx, int kv_dim,
                             uint32_t type);
void bt_kv_cache_free(bt_kv_cache_t *c);

/* The type named by s ("f32", "f16"), or -1. */
int bt_kv_type_parse(const char *s);

/* Keys [kv_dim, k_stride] and values [n_ctx, kv_dim] of local layer il,
 * sequence slot s. */
static inline void *bt_kv_cache_k(const bt_kv_cache_t *c, int il, int s)
{
    size_t at = (size_t)il * c->n_slot + (size_t)s;
    return (char *)c->k + at * c->k_stride * c->kv_dim * c->elem;
}

static inline void *bt_kv_cache_v(const bt_kv_cache_t *c, int il, int s)
{
    size_t at = (size_t)il * c->n_slot + (size_t)s;
    return (char *)c->v + at * c->n_ctx * c->kv_dim * c->elem;
}

/* Stores n_tok rows of x [n_tok, kv_dim] (positions pos0.. of slot s)
 * into layer il's keys (transposed) or values, converting to the cache's
 * type (f16: round to nearest even). */
void bt_kv_cache_put_k(const bt_kv_cache_t *c, int il, int s, const float *x, int n_tok,
                       int pos0);
void bt_kv_cache_put_v(const bt_kv_cache_t *c, int il, int s, const float *x, int n_tok,
                       int pos0);

#endif /* BT_KV_CACHE_H */
