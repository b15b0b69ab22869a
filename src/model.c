/* model.c: llama hyperparameters from GGUF metadata and the binding of one
 * layer range's tensors. Reads in the order of a layer: hyperparameters,
 * embeddings, layers, head. */
#include "model.h"

#include <stdio.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Upper bound for any dimension: keeps every size product in int64 range. */
#define DIM_MAX (1 << 24)
/* Tensors of one layer: two norms, four attention and three FFN matrices. */
#define LAYER_TENSORS 9

/* ---- hyperparameters ---- */

/* Reads a required (dflt < 0) or optional positive integer key. */
static bt_status_t get_dim(const bt_gguf_t *g, const char *key, int dflt, int *out)
{
    uint32_t v;
    bt_status_t st = bt_gguf_get_u32(g, key, &v);
    if (st == BT_ERR_ARG) {
        if (dflt < 0) {
            bt_log_error("model: %s: required key '%s' is missing", g->path, key);
            return BT_ERR_FORMAT;
        }
        *out = dflt;
        return BT_OK;
    }
    if (st != BT_OK)
        return st;
    if (v == 0 || v > DIM_MAX) {
        bt_log_error("model: %s: %s = %u is out of range (1..%d)", g->path, key, v, DIM_MAX);
        return BT_ERR_FORMAT;
    }
    *out = (int)v;
    return BT_OK;
}

static bt_status_t get_float(const bt_gguf_t *g, const char *key, float dflt, float *out)
{
    bt_status_t st = bt_gguf_get_f32(g, key, out);
    if (st == BT_ERR_ARG) {
        *out = dflt;
        return BT_OK;
    }
    if (st == BT_OK && !(*out > 0.0f && *out < 1e30f)) {
        bt_log_error("model: %s: %s = %g must be positive and finite", g->path, key, *out);
        return BT_ERR_FORMAT;
    }
    return st;
}

static bt_status_t read_hparams(const bt_gguf_t *g, bt_hparams_t *hp)
{
    bt_gguf_str_t arch;
    if (bt_gguf_get_str(g, "general.architecture", &arch) != BT_OK) {
        bt_log_error("model: %s: general.architecture is missing or not a string", g->path);
        return BT_ERR_FORMAT;
    }
    if (!bt_gguf_str_eq(arch, "llama")) {
        bt_log_error("model: %s: architecture '%.*s' is not supported (only 'llama')", g->path,
                     (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
        return BT_ERR_UNSUPPORTED;
    }
    bt_status_t st;
    if ((st = get_dim(g, "llama.block_count", -1, &hp->n_layer)) ||
        (st = get_dim(g, "llama.embedding_length", -1, &hp->n_embd)) ||
        (st = get_dim(g, "llama.feed_forward_length", -1, &hp->n_ff)) ||
        (st = get_dim(g, "llama.attention.head_count", -1, &hp->n_head)) ||
        (st = get_dim(g, "llama.attention.head_count_kv", hp->n_head, &hp->n_head_kv)) ||
        (st = get_dim(g, "llama.context_length", 2048, &hp->n_ctx_train)) ||
        (st = get_float(g, "llama.attention.layer_norm_rms_epsilon", 1e-5f, &hp->rms_eps)) ||
        (st = get_float(g, "llama.rope.freq_base", 10000.0f, &hp->rope_base)))
        return st;
    if (hp->n_embd % hp->n_head != 0 &&
        bt_gguf_find_kv(g, "llama.attention.key_length") == NULL) {
        bt_log_error("model: %s: embedding_length %d is not a multiple of head_count %d", g->path,
                     hp->n_embd, hp->n_head);
        return BT_ERR_FORMAT;
    }
    if ((st = get_dim(g, "llama.attention.key_length", hp->n_embd / hp->n_head, &hp->head_dim)) ||
        (st = get_dim(g, "llama.rope.dimension_count", hp->head_dim, &hp->n_rot)))
        return st;
    int v_len;
    if ((st = get_dim(g, "llama.attention.value_length", hp->head_dim, &v_len)))
        return st;
    if (v_len != hp->head_dim) {
        bt_log_error("model: %s: value_length %d differs from key_length %d (not supported)",
                     g->path, v_len, hp->head_dim);
        return BT_ERR_UNSUPPORTED;
    }
    if (hp->n_head % hp->n_head_kv != 0) {
        bt_log_error("model: %s: head_count %d is not a multiple of head_count_kv %d", g->path,
                     hp->n_head, hp->n_head_kv);
        return BT_ERR_FORMAT;
    }
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0) {
        bt_log_error("model: %s: rope.dimension_count %d must be even and at most head dim %d",
                     g->path, hp->n_rot, hp->head_dim);
        return BT_ERR_FORMAT;
    }
    if ((int64_t)hp->n_head * hp->head_dim > DIM_MAX) {
        bt_log_error("model: %s: head_count %d x head dim %d is too large", g->path, hp->n_head,
                     hp->head_dim);
        return BT_ERR_FORMAT;
    }
    /* vocab: the embedding's row count, else llama.vocab_size */
    const bt_gguf_tensor_t *emb = bt_gguf_find_tensor(g, "token_embd.weight");
    if (emb != NULL && emb->n_dims == 2 && emb->ne[1] <= DIM_MAX) {
        hp->n_vocab = (int)emb->ne[1];
    } else if ((st = get_dim(g, "llama.vocab_size", -1, &hp->n_vocab))) {
        return st;
    }
    /* Each layer is LAYER_TENSORS tensors: a block count the file cannot
     * hold is refused before anything is sized by it (a few bytes of
     * metadata must not make bind allocate gigabytes). */
    if ((uint64_t)hp->n_layer > g->n_tensors / LAYER_TENSORS) {
        bt_log_error("model: %s: block_count %d is impossible: %d layers need %llu tensors but "
                     "the file has %llu", g->path, hp->n_layer, hp->n_layer,
                     (unsigned long long)hp->n_layer * LAYER_TENSORS,
                     (unsigned long long)g->n_tensors);
        return BT_ERR_FORMAT;
    }
    return BT_OK;
}

/* ---- tensors ---- */

static bt_status_t find_tensor(const bt_model_t *m, const char *name, int64_t ne0, int64_t ne1,
                               const bt_gguf_tensor_t **out)
{
    const bt_gguf_tensor_t *t = bt_gguf_find_tensor(m->gguf, name);
    if (t == NULL) {
        bt_log_error("model: %s: tensor '%s' is missing", m->gguf->path, name);
        return BT_ERR_FORMAT;
    }
    bool shape_ok = t->ne[0] == (uint64_t)ne0 && t->ne[1] == (uint64_t)ne1 && t->ne[2] == 1 &&
                    t->ne[3] == 1;
    if (!shape_ok) {
        bt_log_error("model: %s: tensor '%s' has shape [%llu, %llu, %llu, %llu], expected "
                     "[%lld, %lld]",
                     m->gguf->path, name, (unsigned long long)t->ne[0],
                     (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                     (unsigned long long)t->ne[3], (long long)ne0, (long long)ne1);
        return BT_ERR_FORMAT;
    }
    *out = t;
    return BT_OK;
}

/* Binds a weight matrix stored as GGUF [n_in, n_out]. */
static bt_status_t bind_matrix(bt_model_t *m, const char *name, int64_t n_in, int64_t n_out,
                               bt_matrix_t *out)
{
    const bt_gguf_tensor_t *t;
    bt_status_t st = find_tensor(m, name, n_in, n_out, &t);
    if (st != BT_OK)
        return st;
    if (!bt_type_supported(t->type)) {
        const bt_type_info_t *ti = bt_type_info(t->type);
        bt_log_error("model: %s: tensor '%s' has type %s (%u), which baton cannot compute with yet",
                     m->gguf->path, name, ti ? ti->name : "unknown", t->type);
        return BT_ERR_UNSUPPORTED;
    }
    uint64_t row_bytes;
    bt_type_row_bytes(t->type, (uint64_t)n_in, &row_bytes); /* validated by gguf */
    *out = (bt_matrix_t){t->data, t->type, n_in, n_out, row_bytes, NULL};
    m->weight_bytes += t->n_bytes;
    return BT_OK;
}

/* Binds a norm weight vector; these are f32 in every llama GGUF. */
static bt_status_t bind_vector(bt_model_t *m, const char *name, int64_t n, const float **out)
{
    const bt_gguf_tensor_t *t;
    bt_status_t st = find_tensor(m, name, n, 1, &t);
    if (st != BT_OK)
        return st;
    if (t->type != BT_TYPE_F32) {
        bt_log_error("model: %s: tensor '%s' must be f32, found type %u", m->gguf->path, name,
                     t->type);
        return BT_ERR_UNSUPPORTED;
    }
    *out = t->data;
    m->weight_bytes += t->n_bytes;
    return BT_OK;
}

static bt_status_t bind_layer(bt_model_t *m, int il, bt_layer_t *l)
{
    const bt_hparams_t *hp = &m->hp;
    const int64_t q_dim = (int64_t)hp->n_head * hp->head_dim;
    const int64_t kv_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    char name[64];
    bt_status_t st;
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, il), name)
    if ((st = bind_vector(m, NAME("attn_norm.weight"), hp->n_embd, &l->attn_norm)) ||
        (st = bind_matrix(m, NAME("attn_q.weight"), hp->n_embd, q_dim, &l->wq)) ||
        (st = bind_matrix(m, NAME("attn_k.weight"), hp->n_embd, kv_dim, &l->wk)) ||
        (st = bind_matrix(m, NAME("attn_v.weight"), hp->n_embd, kv_dim, &l->wv)) ||
        (st = bind_matrix(m, NAME("attn_output.weight"), q_dim, hp->n_embd, &l->wo)) ||
        (st = bind_vector(m, NAME("ffn_norm.weight"), hp->n_embd, &l->ffn_norm)) ||
        (st = bind_matrix(m, NAME("ffn_gate.weight"), hp->n_embd, hp->n_ff, &l->w_gate)) ||
        (st = bind_matrix(m, NAME("ffn_up.weight"), hp->n_embd, hp->n_ff, &l->w_up)) ||
        (st = bind_matrix(m, NAME("ffn_down.weight"), hp->n_ff, hp->n_embd, &l->w_down)))
        return st;
#undef NAME
    return BT_OK;
}

static bt_status_t bind_all(bt_model_t *m)
{
    const bt_hparams_t *hp = &m->hp;
    bt_status_t st;
    m->tied = bt_gguf_find_tensor(m->gguf, "output.weight") == NULL;
    if (m->with_embed || (m->with_head && m->tied)) {
        if ((st = bind_matrix(m, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->tok_embd)))
            return st;
    }
    for (int il = m->first; il < m->last; il++)
        if ((st = bind_layer(m, il, &m->layers[il - m->first])))
            return st;
    if (m->with_head) {
        if ((st = bind_vector(m, "output_norm.weight", hp->n_embd, &m->out_norm)))
            return st;
        if (m->tied)
            m->output = m->tok_embd;
        else if ((st = bind_matrix(m, "output.weight", hp->n_embd, hp->n_vocab, &m->output)))
            return st;
    }
    return BT_OK;
}

bt_status_t bt_model_open(const char *path, bt_model_t **out)
{
    bt_model_t *m = calloc(1, sizeof *m);
    if (m == NULL)
        return BT_ERR_NOMEM;
    bt_status_t st = bt_gguf_open(path, &m->gguf);
    if (st != BT_OK) {
        free(m);
        return st;
    }
    if ((st = read_hparams(m->gguf, &m->hp))) {
        bt_model_free(m);
        return st;
    }
    uint32_t ft;
    m->file_type = bt_gguf_get_u32(m->gguf, "general.file_type", &ft) == BT_OK ? ft : 0;
    *out = m;
    return BT_OK;
}

bt_status_t bt_model_bind(bt_model_t *m, int first, int last, bool with_embed, bool with_head)
{
    if (last < 0)
        last = m->hp.n_layer;
    if (m->layers != NULL) {
        bt_log_error("model: %s: already bound", m->gguf->path);
        return BT_ERR_ARG;
    }
    if (first < 0 || first > last || last > m->hp.n_layer) {
        bt_log_error("model: %s: layer range [%d, %d) is outside the model's %d layers",
                     m->gguf->path, first, last, m->hp.n_layer);
        return BT_ERR_ARG;
    }
    m->first = first;
    m->last = last;
    m->with_embed = with_embed;
    m->with_head = with_head;
    m->layers = calloc((size_t)(last - first) + 1, sizeof *m->layers);
    if (m->layers == NULL)
        return BT_ERR_NOMEM;
    bt_status_t st = bind_all(m);
    if (st != BT_OK) {
        free(m->layers);
        m->layers = NULL;
    }
    return st;
}

bt_status_t bt_model_load(const char *path, int first, int last, bool with_embed, bool with_head,
                          bt_model_t **out)
{
    bt_model_t *m;
    bt_status_t st = bt_model_open(path, &m);
    if (st != BT_OK)
        return st;
    if ((st = bt_model_bind(m, first, last, with_embed, with_head))) {
        bt_model_free(m);
        return st;
    }
    *out = m;
    return BT_OK;
}

/* ---- placing the weights ---- */

typedef struct weight_ref {
    const void **data; /* the field that points at the tensor */
    size_t bytes;
} weight_ref_t;

/* Every bound tensor once, as (field, bytes); returns the count (at most
 * cap written). A tied head shares token_embd's field and is left out. */
static int bound_weights(bt_model_t *m, weight_ref_t *w, int cap)
{
    int n = 0;
#define MAT(x) do { if ((x).data && n < cap) w[n] = (weight_ref_t){&(x).data, (x).row_bytes * (size_t)(x).n_out}; n += (x).data != NULL; } while (0)
#define VEC(p) do { if ((p) && n < cap) w[n] = (weight_ref_t){(const void **)&(p), sizeof(float) * (size_t)m->hp.n_embd}; n += (p) != NULL; } while (0)
    MAT(m->tok_embd);
    for (int i = 0; i < m->last - m->first; i++) {
        bt_layer_t *l = &m->layers[i];
        VEC(l->attn_norm);
        MAT(l->wq);
        MAT(l->wk);
        MAT(l->wv);
        MAT(l->wo);
        VEC(l->ffn_norm);
        MAT(l->w_gate);
        MAT(l->w_up);
        MAT(l->w_down);
    }
    VEC(m->out_norm);
    if (!m->tied)
        MAT(m->output);
#undef MAT
#undef VEC
    return n;
}

/* The whole pages inside [p, p + bytes). */
static void page_range(const void *p, size_t bytes, char **lo, size_t *len)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), b = ((uintptr_t)p + bytes) & ~(page - 1);
    *lo = (char *)a;
    *len = b > a ? b - a : 0;
}

bt_status_t bt_model_place_weights(bt_model_t *m, bool use_mmap)
{
    int n = bound_weights(m, NULL, 0);
    weight_ref_t *w = malloc(sizeof *w * (size_t)(n ? n : 1));
    if (w == NULL)
        return BT_ERR_NOMEM;
    bound_weights(m, w, n);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += (w[i].bytes + 63) / 64 * 64;
    if (use_mmap) {
        for (int i = 0; i < n; i++) {
            char *lo;
            size_t len;
            page_range(*w[i].data, w[i].bytes, &lo, &len);
            if (len > 0)
                madvise(lo, len, MADV_WILLNEED);
        }
        free(w);
        return BT_OK;
    }
    bt_status_t st = bt_mem_check("reading the weights into memory (--mmap 0)", total);
    if (st != BT_OK) {
        free(w);
        return st;
    }
    char *buf = bt_alloc_huge(total);
    if (buf == NULL) {
        bt_log_error("model: %s: cannot allocate %zu bytes to read the weights into (--mmap 0)",
                     m->gguf->path, total);
        free(w);
        return BT_ERR_NOMEM;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const void *src = *w[i].data;
        memcpy(buf + off, src, w[i].bytes);
        *w[i].data = buf + off;
        off += (w[i].bytes + 63) / 64 * 64;
        char *lo;
        size_t len;
        page_range(src, w[i].bytes, &lo, &len);
        if (len > 0) /* the file's pages are no longer ours to keep */
            madvise(lo, len, MADV_DONTNEED);
    }
    if (m->tied && m->with_head)
        m->output.data = m->tok_embd.data;
    m->weights_copy = buf;
    free(w);
    return BT_OK;
}

/* The bound matrices the ops multiply with (the head's, tied or not, but
 * not the embedding's rows, which are looked up): how many, and the i-th. */
static int n_bound_matrices(const bt_model_t *m)
{
    return 7 * (m->last - m->first) + (m->with_head ? 1 : 0);
}

static bt_matrix_t *bound_matrix(bt_model_t *m, int i)
{
    if (i == 7 * (m->last - m->first))
        return &m->output;
    bt_layer_t *l = &m->layers[i / 7];
    bt_matrix_t *all[7] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
    return all[i % 7];
}

uint64_t bt_model_pack_bytes(bt_model_t *m)
{
    uint64_t total = 0;
    for (int i = 0; i < n_bound_matrices(m); i++)
        total += (bt_pack_bytes(bound_matrix(m, i)) + 63) / 64 * 64;
    return total;
}

bt_status_t bt_model_pack(bt_model_t *m)
{
    const uint64_t total = bt_model_pack_bytes(m);
    if (total == 0 || m->packed_copy != NULL)
        return BT_OK;
    bt_status_t st = bt_mem_check("packing the weights", total);
    if (st != BT_OK)
        return st;
    char *buf = bt_alloc_huge(total); /* one block: decode streams it with few TLB misses */
    if (buf == NULL) {
        bt_log_error("model: %s: cannot allocate %" PRIu64 " bytes to pack the weights into",
                     m->gguf->path, total);
        return BT_ERR_NOMEM;
    }
    m->packed_copy = buf;
    for (int i = 0; i < n_bound_matrices(m); i++) {
        bt_matrix_t *w = bound_matrix(m, i);
        const size_t bytes = (bt_pack_bytes(w) + 63) / 64 * 64;
        if (bytes == 0)
            continue;
        bt_pack(w, buf);
        w->packed = buf;
        buf += bytes;
        m->packed_bytes += bytes;
        char *lo;
        size_t len;
        page_range(w->data, w->row_bytes * (size_t)w->n_out, &lo, &len);
        if (m->weights_copy == NULL && len > 0) /* mapped: the file's pages are not needed now */
            madvise(lo, len, MADV_DONTNEED);
    }
    return st;
}

void bt_model_free(bt_model_t *m)
{
    if (m == NULL)
        return;
    free(m->packed_copy);
    free(m->weights_copy);
    free(m->layers);
    bt_gguf_close(m->gguf);
    free(m);
}

int64_t bt_model_max_n_in(const bt_model_t *m)
{
    int64_t q_dim = (int64_t)m->hp.n_head * m->hp.head_dim;
    int64_t n = m->hp.n_embd;
    if (m->last > m->first) {
        if (m->hp.n_ff > n)
            n = m->hp.n_ff;
        if (q_dim > n)
            n = q_dim;
    }
    return n;
}

void bt_model_file_stats(const bt_model_t *m, uint64_t *bytes, uint64_t *params)
{
    *bytes = *params = 0;
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        *bytes += m->gguf->tensors[i].n_bytes;
        *params += m->gguf->tensors[i].n_elements;
    }
}

const char *bt_ftype_name(uint32_t file_type)
{
    /* llama_ftype values (llama.h) */
    static const struct {
        uint32_t id;
        const char *name;
    } names[] = {
        {0, "F32"},     {1, "F16"},     {2, "Q4_0"},    {3, "Q4_1"},   {7, "Q8_0"},
        {8, "Q5_0"},    {9, "Q5_1"},    {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"},
        {13, "Q3_K_L"}, {14, "Q4_K_S"}, {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"},
        {18, "Q6_K"},   {32, "BF16"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].id == file_type)
            return names[i].name;
    return "unknown";
}
