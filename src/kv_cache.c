/* kv_cache.c: allocation of the per-stage K/V cache. */
#include "kv_cache.h"

#include <stdlib.h>

size_t bt_kv_cache_bytes(int n_layer, int n_ctx, int kv_dim)
{
    return 2 * (size_t)n_layer * (size_t)n_ctx * (size_t)kv_dim * sizeof(float);
}

bt_status_t bt_kv_cache_init(bt_kv_cache_t *c, int n_layer, int n_ctx, int kv_dim)
{
    size_t n = (size_t)n_layer * (size_t)n_ctx * (size_t)kv_dim;
    float *k = calloc(n ? n : 1, sizeof(float));
    float *v = calloc(n ? n : 1, sizeof(float));
    if (k == NULL || v == NULL) {
        free(k);
        free(v);
        bt_log_error("kv cache: cannot allocate %zu bytes (%d layers x %d positions x %d)",
                     bt_kv_cache_bytes(n_layer, n_ctx, kv_dim), n_layer, n_ctx, kv_dim);
        return BT_ERR_NOMEM;
    }
    *c = (bt_kv_cache_t){n_layer, n_ctx, kv_dim, k, v};
    return BT_OK;
}

void bt_kv_cache_free(bt_kv_cache_t *c)
{
    free(c->k);
    free(c->v);
    c->k = c->v = NULL;
}
