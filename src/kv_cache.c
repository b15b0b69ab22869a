/* kv_cache.c: allocation of the per-stage K/V cache and stores into it. */
#include "kv_cache.h"

#include <stdlib.h>
#include <string.h>

int bt_kv_cache_k_stride(int n_ctx)
{
    int s = (n_ctx + 15) / 16 * 16;
    return s % 256 == 0 ? s + 16 : s;
}

static size_t elem_bytes(uint32_t type) { return type == BT_TYPE_F16 ? 2 : 4; }

size_t bt_kv_cache_bytes(int n_layer, int n_slot, int n_ctx, int kv_dim, uint32_t type)
{
    size_t ls = (size_t)n_layer * (size_t)n_slot;
    size_t k = ls * (size_t)bt_kv_cache_k_stride(n_ctx) * (size_t)kv_dim;
    size_t v = ls * (size_t)n_ctx * (size_t)kv_dim;
    return (k + v) * elem_bytes(type);
}

int bt_kv_type_parse(const char *s)
{
    return strcmp(s, "f32") == 0 ? BT_TYPE_F32 : strcmp(s, "f16") == 0 ? BT_TYPE_F16 : -1;
}

bt_status_t bt_kv_cache_init(bt_kv_cache_t *c, int n_layer, int n_slot, int n_ctx, int kv_dim,
                             uint32_t type)
{
    const int k_stride = bt_kv_cache_k_stride(n_ctx);
    const size_t es = elem_bytes(type), ls = (size_t)n_layer * (size_t)n_slot;
    size_t nk = ls * (size_t)k_stride * (size_t)kv_dim;
    size_t n = ls * (size_t)n_ctx * (size_t)kv_dim;
    void *k = calloc(nk ? nk : 1, es);
    void *v = calloc(n ? n : 1, es);
    if (k == NULL || v == NULL) {
        free(k);
        free(v);
        bt_log_error("kv cache: cannot allocate %zu bytes (%d layers x %d slots x %d positions "
                     "x %d)", bt_kv_cache_bytes(n_layer, n_slot, n_ctx, kv_dim, type), n_layer,
                     n_slot, n_ctx, kv_dim);
        return BT_ERR_NOMEM;
    }
    *c = (bt_kv_cache_t){n_layer, n_slot, n_ctx, kv_dim, k_stride, type, es, k, v};
    return BT_OK;
}

void bt_kv_cache_free(bt_kv_cache_t *c)
{
    free(c->k);
    free(c->v);
    c->k = c->v = NULL;
}

void bt_kv_cache_put_k(const bt_kv_cache_t *c, int il, int s, const float *x, int n_tok,
                       int pos0)
{
    const size_t ks = (size_t)c->k_stride;
    for (int t = 0; t < n_tok; t++)
        for (int d = 0; d < c->kv_dim; d++) {
            const float e = x[(size_t)t * c->kv_dim + d];
            const size_t at = (size_t)d * ks + (size_t)(pos0 + t);
            if (c->type == BT_TYPE_F16)
                ((uint16_t *)bt_kv_cache_k(c, il, s))[at] = bt_f32_to_f16(e);
            else
                ((float *)bt_kv_cache_k(c, il, s))[at] = e;
        }
}

void bt_kv_cache_put_v(const bt_kv_cache_t *c, int il, int s, const float *x, int n_tok,
                       int pos0)
{
    const size_t n = (size_t)n_tok * (size_t)c->kv_dim, at = (size_t)pos0 * c->kv_dim;
    if (c->type == BT_TYPE_F16) {
        uint16_t *v = (uint16_t *)bt_kv_cache_v(c, il, s) + at;
        for (size_t i = 0; i < n; i++)
            v[i] = bt_f32_to_f16(x[i]);
    } else {
        memcpy((float *)bt_kv_cache_v(c, il, s) + at, x, n * sizeof(float));
    }
}
