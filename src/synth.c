/* synth.c: writes synthetic llama GGUF files (see synth.h). */
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "kernels/types.h"
#include "rng.h"

static const bt_synth_shape_t shapes[] = {
    /* name, vocab, embd, layers, heads, kv heads, ff, ctx, rope base, eps, tied, n_rot */
    {"tiny", 256, 64, 4, 4, 2, 160, 512, 10000.0f, 1e-5f, false, 0},
    {"smollm2-135m", 49152, 576, 30, 9, 3, 1536, 8192, 100000.0f, 1e-5f, true, 0},
    {"llama-1b", 128256, 2048, 16, 32, 8, 8192, 131072, 500000.0f, 1e-5f, true, 0},
};

bt_status_t bt_synth_shape(const char *name, bt_synth_shape_t *out)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (strcmp(shapes[i].name, name) == 0) {
            *out = shapes[i];
            return BT_OK;
        }
    bt_log_error("unknown model shape '%s' (known: %s)", name, bt_synth_shape_names());
    return BT_ERR_ARG;
}

const char *bt_synth_shape_names(void) { return "tiny, smollm2-135m, llama-1b"; }

uint64_t bt_synth_n_params(const bt_synth_shape_t *s)
{
    uint64_t e = (uint64_t)s->n_embd, hd = e / (uint64_t)s->n_head;
    uint64_t kv = hd * (uint64_t)s->n_head_kv, ff = (uint64_t)s->n_ff;
    uint64_t layer = 2 * e + e * e * 2 + 2 * e * kv + 3 * e * ff;
    uint64_t emb = (uint64_t)s->n_vocab * e;
    return emb * (s->tied ? 1 : 2) + e + (uint64_t)s->n_layer * layer;
}

/* ---- random numbers: one xoshiro256** stream per tensor ---- */

/* The stream of a tensor: seeded from (seed, FNV-1a of its name). */
static void rng_init(bt_rng_t *r, uint64_t seed, const char *name)
{
    uint64_t x = seed;
    for (const char *p = name; *p; p++)
        x = (x ^ (uint8_t)*p) * 0x100000001b3ull;
    bt_rng_seed(r, x);
}

/* Uniform on [-1, 1) scaled to standard deviation std, plus mean. */
static void rng_fill(bt_rng_t *r, float *out, int64_t n, float mean, float std)
{
    const float a = std * sqrtf(3.0f);
    for (int64_t i = 0; i < n; i++) {
        float u = (float)(bt_rng_next(r) >> 40) * 0x1p-23f - 1.0f; /* [-1, 1) */
        out[i] = mean + a * u;
    }
}

/* ---- the writer ---- */

typedef struct tensor_spec {
    char name[64];
    int64_t n_in, n_out; /* n_out 1 for vectors */
    float mean, std;
    uint32_t type;
} tensor_spec_t;

static bt_status_t check_shape(const bt_synth_shape_t *s)
{
    const int dims[] = {s->n_vocab, s->n_embd, s->n_layer, s->n_head, s->n_head_kv, s->n_ff,
                        s->n_ctx_train};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i] < 1 || dims[i] > (1 << 24)) {
            bt_log_error("mkmodel: every dimension must be in 1..%d, found %d", 1 << 24, dims[i]);
            return BT_ERR_ARG;
        }
    if (s->n_embd % s->n_head != 0 || s->n_head % s->n_head_kv != 0 ||
        (s->n_embd / s->n_head) % 2 != 0) {
        bt_log_error("mkmodel: n_embd %d, n_head %d, n_head_kv %d: heads must divide n_embd, kv "
                     "heads must divide heads, and the head dim must be even",
                     s->n_embd, s->n_head, s->n_head_kv);
        return BT_ERR_ARG;
    }
    const int head_dim = s->n_embd / s->n_head;
    if (s->n_rot < 0 || s->n_rot > head_dim || s->n_rot % 2 != 0) {
        bt_log_error("mkmodel: n_rot %d must be even and at most the head dim %d (0: all of it)",
                     s->n_rot, head_dim);
        return BT_ERR_ARG;
    }
    return BT_OK;
}

/* A matrix whose rows don't fit the type's blocks gets the type llama.cpp
 * falls back to for it (e.g. n_embd 576 with 256-element K blocks). */
static uint32_t fitting_type(uint32_t type, int64_t n_in)
{
    if (n_in % bt_type_info(type)->block_size == 0)
        return type;
    uint32_t fallback = type == BT_TYPE_Q4_K ? BT_TYPE_Q5_0
                        : type == BT_TYPE_Q5_K ? BT_TYPE_Q5_1
                                               : BT_TYPE_Q8_0;
    return n_in % bt_type_info(fallback)->block_size == 0 ? fallback : BT_TYPE_F32;
}

/* The tensors in file order; returns how many (at most cap). */
static int list_tensors(const bt_synth_shape_t *s, uint32_t type, tensor_spec_t *t, int cap)
{
    const int64_t e = s->n_embd, hd = e / s->n_head, kv = hd * s->n_head_kv, ff = s->n_ff;
    int n = 0;
#define ADD(nm_fmt, il, in, out, mu, sd, ty)                                     \
    do {                                                                         \
        if (n < cap) {                                                           \
            snprintf(t[n].name, sizeof t[n].name, nm_fmt, il);                   \
            t[n].n_in = (in), t[n].n_out = (out), t[n].mean = (mu), t[n].std = (sd); \
            t[n].type = (ty);                                                    \
        }                                                                        \
        n++;                                                                     \
    } while (0)
#define MAT(nm, il, in, out) \
    ADD(nm, il, in, out, 0.0f, 1.0f / sqrtf((float)(in)), fitting_type(type, in))
#define NORM(nm, il) ADD(nm, il, e, 1, 1.0f, 0.1f, BT_TYPE_F32)
    ADD("token_embd.weight%.0d", 0, e, s->n_vocab, 0.0f, 1.0f, fitting_type(type, e));
    for (int il = 0; il < s->n_layer; il++) {
        NORM("blk.%d.attn_norm.weight", il);
        MAT("blk.%d.attn_q.weight", il, e, e);
        MAT("blk.%d.attn_k.weight", il, e, kv);
        MAT("blk.%d.attn_v.weight", il, e, kv);
        MAT("blk.%d.attn_output.weight", il, e, e);
        NORM("blk.%d.ffn_norm.weight", il);
        MAT("blk.%d.ffn_gate.weight", il, e, ff);
        MAT("blk.%d.ffn_up.weight", il, e, ff);
        MAT("blk.%d.ffn_down.weight", il, ff, e);
    }
    NORM("output_norm.weight%.0d", 0);
    if (!s->tied)
        MAT("output.weight%.0d", 0, e, s->n_vocab);
#undef NORM
#undef MAT
#undef ADD
    return n;
}

/* general.file_type (llama_ftype) for a model whose matrices are `type`. */
static uint32_t file_type_of(uint32_t type)
{
    switch (type) {
    case BT_TYPE_F16: return 1;   /* MOSTLY_F16 */
    case BT_TYPE_Q4_0: return 2;  /* MOSTLY_Q4_0 */
    case BT_TYPE_Q4_1: return 3;  /* MOSTLY_Q4_1 */
    case BT_TYPE_Q8_0: return 7;  /* MOSTLY_Q8_0 */
    case BT_TYPE_Q5_0: return 8;  /* MOSTLY_Q5_0 */
    case BT_TYPE_Q5_1: return 9;  /* MOSTLY_Q5_1 */
    case BT_TYPE_Q4_K: return 15; /* MOSTLY_Q4_K_M */
    case BT_TYPE_Q5_K: return 17; /* MOSTLY_Q5_K_M */
    case BT_TYPE_Q6_K: return 18; /* MOSTLY_Q6_K */
    case BT_TYPE_BF16: return 32; /* MOSTLY_BF16 */
    default: return 0;            /* ALL_F32 */
    }
}


static bt_status_t write_metadata(bt_gguf_writer_t *w, const bt_synth_shape_t *s, uint32_t type,
                                  uint64_t seed)
{
    char name[96];
    snprintf(name, sizeof name, "baton synthetic %s %s seed %llu", s->name,
             bt_type_info(type)->name, (unsigned long long)seed);
    bt_status_t st;
    if ((st = bt_gguf_writer_set_str(w, "general.architecture", "llama")) ||
        (st = bt_gguf_writer_set_str(w, "general.name", name)) ||
        (st = bt_gguf_writer_set_u32(w, "general.file_type", file_type_of(type))) ||
        (st = bt_gguf_writer_set_u32(w, "llama.context_length", (uint32_t)s->n_ctx_train)) ||
        (st = bt_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)s->n_embd)) ||
        (st = bt_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)s->n_layer)) ||
        (st = bt_gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)s->n_ff)) ||
        (st = bt_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)s->n_head)) ||
        (st = bt_gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)s->n_head_kv)) ||
        (st = bt_gguf_writer_set_u32(w, "llama.rope.dimension_count",
                                     (uint32_t)(s->n_rot > 0 ? s->n_rot
                                                             : s->n_embd / s->n_head))) ||
        (st = bt_gguf_writer_set_f32(w, "llama.rope.freq_base", s->rope_base)) ||
        (st = bt_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", s->rms_eps)) ||
        (st = bt_gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)s->n_vocab)) ||
        (st = bt_gguf_writer_set_str(w, "tokenizer.ggml.model", "none")) ||
        (st = bt_gguf_writer_set_str(w, "baton.synth.shape", s->name)) ||
        (st = bt_gguf_writer_set_u32(w, "baton.synth.seed_lo", (uint32_t)seed)) ||
        (st = bt_gguf_writer_set_u32(w, "baton.synth.seed_hi", (uint32_t)(seed >> 32))))
        return st;
    return BT_OK;
}

/* Generates one tensor row by row into buf (its n_bytes) and writes it. */
static bt_status_t write_tensor(bt_gguf_writer_t *w, const tensor_spec_t *t, uint64_t seed,
                                float *row, uint8_t *buf)
{
    const bt_type_info_t *ti = bt_type_info(t->type);
    uint64_t row_bytes;
    bt_type_row_bytes(t->type, (uint64_t)t->n_in, &row_bytes);
    bt_rng_t r;
    rng_init(&r, seed, t->name);
    for (int64_t i = 0; i < t->n_out; i++) {
        rng_fill(&r, row, t->n_in, t->mean, t->std);
        ti->from_float(buf + (size_t)i * row_bytes, row, t->n_in);
    }
    return bt_gguf_writer_write_tensor(w, buf, row_bytes * (uint64_t)t->n_out);
}

bt_status_t bt_synth_write(const char *path, const bt_synth_shape_t *s, uint32_t type,
                           uint64_t seed)
{
    if (!bt_type_supported(type)) {
        bt_log_error("mkmodel: type %u is not supported for writing", type);
        return BT_ERR_ARG;
    }
    bt_status_t st = check_shape(s);
    if (st != BT_OK)
        return st;
    int n = list_tensors(s, type, NULL, 0);
    tensor_spec_t *specs = calloc((size_t)n, sizeof *specs);
    bt_gguf_writer_t *w = NULL;
    float *row = NULL;
    uint8_t *buf = NULL;
    if (specs == NULL) {
        st = BT_ERR_NOMEM;
        goto fail;
    }
    list_tensors(s, type, specs, n);
    int64_t max_in = 0, max_elems = 0;
    for (int i = 0; i < n; i++) {
        max_in = specs[i].n_in > max_in ? specs[i].n_in : max_in;
        int64_t elems = specs[i].n_in * specs[i].n_out;
        max_elems = elems > max_elems ? elems : max_elems;
    }
    row = malloc((size_t)max_in * sizeof(float));
    buf = malloc((size_t)max_elems * sizeof(float)); /* no type is wider than f32 */
    if (row == NULL || buf == NULL) {
        bt_log_error("mkmodel: cannot allocate %lld bytes for the largest tensor",
                     (long long)max_elems * 4);
        st = BT_ERR_NOMEM;
        goto fail;
    }
    if ((st = bt_gguf_writer_init(&w)) || (st = write_metadata(w, s, type, seed)))
        goto fail;
    for (int i = 0; i < n; i++) {
        uint64_t ne[2] = {(uint64_t)specs[i].n_in, (uint64_t)specs[i].n_out};
        if ((st = bt_gguf_writer_add_tensor(w, specs[i].name, specs[i].type,
                                            specs[i].n_out == 1 ? 1 : 2, ne)))
            goto fail;
    }
    if ((st = bt_gguf_writer_begin(w, path)))
        goto fail;
    for (int i = 0; i < n; i++)
        if ((st = write_tensor(w, &specs[i], seed, row, buf)))
            goto fail;
    st = bt_gguf_writer_finish(w);

fail:
    bt_gguf_writer_free(w);
    free(buf);
    free(row);
    free(specs);
    return st;
}
