/* kv_cache.c: allocation of the per-stage K/V cache. */
#include "kv_cache.h"

#include <stdlib.h>

int bt_kv_cache_k_stride(int n_ctx)
{
    int s = (n_ctx + 15) / 16 * 16;
    return s % 256 == 0 ? s + 16 : s;
}

size_t bt_kv_cache_bytes(int n_layer, int n_ctx, int kv_dim)
{
    size_t k = (size_t)n_layer * (size_t)bt_kv_cache_k_stride(n_ctx) * (size_t)kv_dim;
    size_t v = (size_t)n_layer * (size_t)n_ctx * (size_t)kv_dim;
    return (k + v) * sizeof(float);
}

bt_status_t bt_kv_cache_init(bt_kv_cache_t *c, int n_layer, int n_ctx, int kv_dim)
{
    const int k_stride = bt_kv_cache_k_stride(n_ctx);
    size_t nk = (size_t)n_layer * (size_t)k_stride * (size_t)kv_dim;
    size_t n = (size_t)n_layer * (size_t)n_ctx * (size_t)kv_dim;
    float *k = calloc(nk ? nk : 1, sizeof(float));
    float *v = calloc(n ? n : 1, sizeof(float));
    if (k == NULL || v == NULL) {
        free(k);
        free(v);
        bt_log_error("kv cache: cannot allocate %zu bytes (%d layers x %d positions x %d)",
                     bt_kv_cache_bytes(n_layer, n_ctx, kv_dim), n_layer, n_ctx, kv_dim);
        return BT_ERR_NOMEM;
    }
    *c = (bt_kv_cache_t){n_layer, n_ctx, kv_dim, k_stride, k, v};
    return BT_OK;
}

void bt_kv_cache_free(bt_kv_cache_t *c)
{
    free(c->k);
    free(c->v);
    c->k = c->v = NULL;
}
