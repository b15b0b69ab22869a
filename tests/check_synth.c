/*
 * check_synth.c: baton-mkmodel's writer (synth.h) for every family, read
 * back with the GGUF reader only (no model binding, so it holds whatever
 * the binding can run yet).
 *   families: each family's tiny file has the keys and exactly the tensors
 *             its arch.h row asks for, with the shapes of bt_lt_info; the
 *             tiny qwen2/qwen3 and the Llama 3 rope-factor files have the
 *             tensor names and shapes of the golden files of the same
 *             dimensions, and the same rope factors.
 *   named:    the real shapes' dimensions and parameter counts (those of
 *             the published models), without writing them.
 *   limits:   shapes and families the writer refuses.
 *   vocab:    --vocab-from copies another file's tokenizer keys byte for
 *             byte and sizes the model by its tokens; baton's tokenizer
 *             reads the copy as it reads the source.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "gguf.h"
#include "synth.h"
#include "tokenizer.h"
#include "testutil.h"

static char *tmpdir;

/* Writes shape s to tmpdir/name and opens it. */
static bt_gguf_t *write_open(const bt_synth_shape_t *s, const char *name, uint32_t type)
{
    static char path[700];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    ck_assert_int_eq(bt_synth_write(path, s, type, 7), BT_OK);
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);
    return g;
}

static uint32_t key_u32(const bt_gguf_t *g, const char *arch, const char *key)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    uint32_t v = 0;
    ck_assert_msg(bt_gguf_get_u32(g, k, &v) == BT_OK, "key %s missing", k);
    return v;
}

static bool has_key(const bt_gguf_t *g, const char *arch, const char *key)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return bt_gguf_find_kv(g, k) != NULL;
}

/* Checks tensor name has shape [ne0, ne1] (ne1 1: a vector). */
/* ne2 > 1: a 3-D tensor of ne2 experts */
static void check_tensor3(const bt_gguf_t *g, const char *name, uint64_t ne0, uint64_t ne1,
                          uint64_t ne2)
{
    const bt_gguf_tensor_t *t = bt_gguf_find_tensor(g, name);
    ck_assert_msg(t != NULL, "tensor %s missing", name);
    const uint32_t dims = ne2 > 1 ? 3u : ne1 == 1 ? 1u : 2u;
    ck_assert_msg(t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == ne2 && t->n_dims == dims,
                  "tensor %s: [%llu, %llu, %llu] (%u dims), want [%llu, %llu, %llu]", name,
                  (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                  (unsigned long long)t->ne[2], t->n_dims, (unsigned long long)ne0,
                  (unsigned long long)ne1, (unsigned long long)ne2);
}

static void check_tensor(const bt_gguf_t *g, const char *name, uint64_t ne0, uint64_t ne1)
{
    check_tensor3(g, name, ne0, ne1, 1);
}

static bool mla(const bt_synth_shape_t *s) { return strcmp(s->arch, "deepseek2") == 0; }

/* The sizes written independently of arch.c's bt_dim_size. */
static uint64_t dim(const bt_synth_shape_t *s, bt_dim_t d)
{
    const uint64_t hd = (uint64_t)bt_synth_head_dim(s);
    switch (d) {
    case BT_DIM_EMBD: return (uint64_t)s->n_embd;
    case BT_DIM_Q: return hd * (uint64_t)s->n_head;
    case BT_DIM_KV: return hd * (uint64_t)s->n_head_kv;
    case BT_DIM_FF: return (uint64_t)s->n_ff;
    case BT_DIM_HEAD: return hd;
    case BT_DIM_NHEAD: return (uint64_t)s->n_head;
    case BT_DIM_EXPERT: return (uint64_t)s->n_expert;
    case BT_DIM_FF_EXP: return (uint64_t)s->n_ff_exp;
    /* MLA (deepseek2): a head's query/key and value sizes are its own */
    case BT_DIM_O: return (uint64_t)s->n_head * (mla(s) ? (uint64_t)s->d_v : hd);
    case BT_DIM_QK: return (uint64_t)s->n_head * (mla(s) ? (uint64_t)s->d_qk : hd);
    case BT_DIM_Q_LORA: return (uint64_t)s->q_lora;
    case BT_DIM_KV_LORA: return (uint64_t)s->kv_lora;
    case BT_DIM_NOPE: return (uint64_t)(s->d_qk - s->n_rot);
    case BT_DIM_DV: return (uint64_t)s->d_v;
    case BT_DIM_FF_SHEXP: return (uint64_t)s->n_shared * (uint64_t)s->n_ff_exp;
    case BT_DIM_ONE: break;
    }
    return 1;
}

/* The kinds layer il of a file of shape s holds (README-deepseek.txt for
 * deepseek2: its first n_dense layers dense, attn_q where there is no
 * q_lora, the choosing bias with sigmoid gating). */
static bt_lt_set_t layer_kinds(const bt_synth_shape_t *s, const bt_arch_t *a, int il)
{
    if (!a->mla)
        return bt_arch_layer_bits(a, s->n_expert > 0);
    const bool moe = s->n_expert > 0 && il >= s->n_dense;
    bt_lt_set_t b = bt_arch_layer_bits(a, moe);
    if (s->q_lora == 0)
        b = (b & ~(BT_LT_BIT(BT_LT_Q_A) | BT_LT_BIT(BT_LT_Q_A_NORM) | BT_LT_BIT(BT_LT_Q_B))) |
            BT_LT_BIT(BT_LT_Q);
    return moe && s->sigmoid ? b | BT_LT_BIT(BT_LT_EXP_PROBS_B) : b;
}

/* The file of shape s against its family's row: keys, every required
 * tensor with its shape, nothing else, and bt_synth_n_params = the
 * elements in the file. */
static void check_family_file(const bt_gguf_t *g, const bt_synth_shape_t *s)
{
    const bt_arch_t *a = bt_arch_find(s->arch, strlen(s->arch));
    ck_assert_ptr_nonnull(a);
    bt_gguf_str_t arch;
    ck_assert_int_eq(bt_gguf_get_str(g, "general.architecture", &arch), BT_OK);
    ck_assert_msg(bt_gguf_str_eq(arch, s->arch), "general.architecture is not %s", s->arch);
    ck_assert_uint_eq(key_u32(g, s->arch, "embedding_length"), (uint32_t)s->n_embd);
    ck_assert_uint_eq(key_u32(g, s->arch, "block_count"), (uint32_t)s->n_layer);
    ck_assert_uint_eq(key_u32(g, s->arch, "feed_forward_length"), (uint32_t)s->n_ff);
    ck_assert_uint_eq(key_u32(g, s->arch, "attention.head_count"), (uint32_t)s->n_head);
    ck_assert_uint_eq(key_u32(g, s->arch, "attention.head_count_kv"), (uint32_t)s->n_head_kv);
    ck_assert_uint_eq(key_u32(g, s->arch, "context_length"), (uint32_t)s->n_ctx_train);
    ck_assert_uint_eq(key_u32(g, s->arch, "vocab_size"), (uint32_t)s->n_vocab);
    ck_assert_uint_eq(key_u32(g, s->arch, "rope.dimension_count"),
                      (uint32_t)(s->n_rot > 0 ? s->n_rot : bt_synth_head_dim(s)));
    char k[128];
    float f;
    snprintf(k, sizeof k, "%s.rope.freq_base", s->arch);
    ck_assert_int_eq(bt_gguf_get_f32(g, k, &f), BT_OK);
    ck_assert_float_eq(f, s->rope_base);
    snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", s->arch);
    ck_assert_int_eq(bt_gguf_get_f32(g, k, &f), BT_OK);
    ck_assert_float_eq(f, s->rms_eps);
    if (mla(s)) { /* the cache row and the latent (README-deepseek.txt) */
        ck_assert_uint_eq(key_u32(g, s->arch, "attention.key_length"),
                          (uint32_t)(s->kv_lora + s->n_rot));
        ck_assert_uint_eq(key_u32(g, s->arch, "attention.value_length"), (uint32_t)s->kv_lora);
        ck_assert_uint_eq(key_u32(g, s->arch, "attention.key_length_mla"), (uint32_t)s->d_qk);
        ck_assert_uint_eq(key_u32(g, s->arch, "attention.value_length_mla"), (uint32_t)s->d_v);
        ck_assert_uint_eq(key_u32(g, s->arch, "attention.kv_lora_rank"), (uint32_t)s->kv_lora);
        ck_assert(has_key(g, s->arch, "attention.q_lora_rank") == (s->q_lora > 0));
    } else if (s->head_dim > 0) {
        ck_assert_uint_eq(key_u32(g, s->arch, "attention.key_length"), (uint32_t)s->head_dim);
        ck_assert_uint_eq(key_u32(g, s->arch, "attention.value_length"), (uint32_t)s->head_dim);
    } else {
        ck_assert(!has_key(g, s->arch, "attention.key_length"));
        ck_assert(!has_key(g, s->arch, "attention.value_length"));
    }
    if (s->n_swa > 0)
        ck_assert_uint_eq(key_u32(g, s->arch, "attention.sliding_window"), (uint32_t)s->n_swa);
    else
        ck_assert(!has_key(g, s->arch, "attention.sliding_window"));
    bt_gguf_str_t tok;
    ck_assert_int_eq(bt_gguf_get_str(g, "tokenizer.ggml.model", &tok), BT_OK);
    ck_assert(bt_gguf_str_eq(tok, "none"));

    uint64_t n = 2; /* token_embd, output_norm */
    check_tensor(g, "token_embd.weight", (uint64_t)s->n_embd, (uint64_t)s->n_vocab);
    check_tensor(g, "output_norm.weight", (uint64_t)s->n_embd, 1);
    if (s->tied) {
        ck_assert_ptr_null(bt_gguf_find_tensor(g, "output.weight"));
    } else {
        check_tensor(g, "output.weight", (uint64_t)s->n_embd, (uint64_t)s->n_vocab);
        n++;
    }
    if (s->rope_freqs_ctx > 0) {
        check_tensor(g, "rope_freqs.weight",
                     (uint64_t)(s->n_rot > 0 ? s->n_rot : bt_synth_head_dim(s)) / 2, 1);
        n++;
    } else {
        ck_assert_ptr_null(bt_gguf_find_tensor(g, "rope_freqs.weight"));
    }
    for (int il = 0; il < s->n_layer; il++)
        for (int lt = 0; lt < BT_LT_COUNT; lt++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s", il, bt_arch_suffix(a, lt));
            if (layer_kinds(s, a, il) & BT_LT_BIT(lt)) {
                check_tensor3(g, name, dim(s, bt_lt_info[lt].ne0), dim(s, bt_lt_info[lt].ne1),
                              dim(s, bt_lt_info[lt].ne2));
                n++;
            } else {
                ck_assert_msg(bt_gguf_find_tensor(g, name) == NULL, "%s: unexpected %s",
                              s->arch, name);
            }
        }
    ck_assert_uint_eq(g->n_tensors, n);
    uint64_t elems = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        elems += g->tensors[i].n_elements;
    ck_assert_uint_eq(bt_synth_n_params(s), elems);
    /* vectors stay f32 whatever the matrices' type */
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].n_dims == 1)
            ck_assert_uint_eq(g->tensors[i].type, BT_TYPE_F32);
}

/* The tensor names and shapes of g equal those of golden file name, in
 * the same order. */
static void same_layout_as_golden(const bt_gguf_t *g, const char *name)
{
    bt_gguf_t *ref;
    ck_assert_int_eq(bt_gguf_open(tu_golden_path(name), &ref), BT_OK);
    ck_assert_uint_eq(g->n_tensors, ref->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const bt_gguf_tensor_t *a = &g->tensors[i], *b = &ref->tensors[i];
        ck_assert_msg(a->name.len == b->name.len &&
                          memcmp(a->name.ptr, b->name.ptr, a->name.len) == 0,
                      "%s: tensor %llu is %.*s, golden has %.*s", name, (unsigned long long)i,
                      (int)a->name.len, a->name.ptr, (int)b->name.len, b->name.ptr);
        ck_assert_uint_eq(a->n_dims, b->n_dims);
        for (int d = 0; d < BT_GGUF_MAX_DIMS; d++)
            ck_assert_uint_eq(a->ne[d], b->ne[d]);
    }
    bt_gguf_close(ref);
}

START_TEST(test_tiny_each_family)
{
    static const char *const archs[] = {"llama", "qwen2", "qwen3", "gemma3", "deepseek2"};
    static const uint32_t types[] = {BT_TYPE_F32, BT_TYPE_Q8_0};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        for (size_t j = 0; j < 2; j++) {
            bt_synth_shape_t s;
            ck_assert_int_eq(bt_synth_shape_arch("tiny", archs[i], &s), BT_OK);
            ck_assert_str_eq(s.arch, archs[i]);
            bt_gguf_t *g = write_open(&s, "family.gguf", types[j]);
            check_family_file(g, &s);
            bt_gguf_close(g);
        }
}
END_TEST

/* The families' own extras in the tiny rows: a head dim other than
 * n_embd / n_head (qwen3, gemma3), gemma3's window and tied head. */
START_TEST(test_tiny_family_rows)
{
    bt_synth_shape_t s;
    ck_assert_int_eq(bt_synth_shape("tiny", &s), BT_OK);
    ck_assert_str_eq(s.arch, "llama");
    ck_assert_int_eq(s.head_dim, 0);
    ck_assert_int_eq(bt_synth_shape_arch("tiny", "qwen3", &s), BT_OK);
    ck_assert_int_eq(bt_synth_head_dim(&s), 32);
    bt_gguf_t *g = write_open(&s, "qwen3.gguf", BT_TYPE_F32);
    check_tensor(g, "blk.0.attn_q.weight", 64, 128);
    check_tensor(g, "blk.0.attn_k.weight", 64, 64);
    check_tensor(g, "blk.0.attn_output.weight", 128, 64);
    check_tensor(g, "blk.3.attn_k_norm.weight", 32, 1);
    bt_gguf_close(g);
    ck_assert_int_eq(bt_synth_shape_arch("tiny", "gemma3", &s), BT_OK);
    ck_assert_int_eq(s.n_layer, 6);
    ck_assert_int_eq(s.n_swa, 8);
    ck_assert(s.tied);
    g = write_open(&s, "gemma3.gguf", BT_TYPE_F32);
    check_tensor(g, "blk.5.post_attention_norm.weight", 64, 1);
    check_tensor(g, "blk.5.post_ffw_norm.weight", 64, 1);
    check_tensor(g, "blk.0.attn_q.weight", 64, 128);
    check_tensor(g, "blk.0.attn_v.weight", 64, 32);
    bt_gguf_close(g);
    /* --head-dim on any family writes the keys and shapes by it */
    ck_assert_int_eq(bt_synth_shape_arch("tiny", "qwen2", &s), BT_OK);
    s.head_dim = 24;
    g = write_open(&s, "qwen2-hd.gguf", BT_TYPE_F32);
    check_family_file(g, &s);
    check_tensor(g, "blk.1.attn_q.bias", 96, 1);
    check_tensor(g, "blk.1.attn_v.bias", 48, 1);
    bt_gguf_close(g);
    /* another shape in another family: the family's extras come with it */
    ck_assert_int_eq(bt_synth_shape_arch("smollm2-135m", "gemma3", &s), BT_OK);
    ck_assert_str_eq(s.arch, "gemma3");
    ck_assert_int_eq(s.n_swa, 512);
    ck_assert_int_eq(s.head_dim, 64);
    ck_assert_int_eq(bt_synth_shape_arch("llama3-8b", "qwen2", &s), BT_OK);
    ck_assert_int_eq(s.rope_freqs_ctx, 0);
    ck_assert_int_eq(bt_synth_check(&s), BT_OK);
}
END_TEST

/* The tiny qwen2/qwen3 rows have the golden files' dimensions, so the
 * writer's tensor list must be theirs; and a tiny llama with the golden
 * Llama 3 factors' base and original context (64) has their rope factors. */
START_TEST(test_golden_layouts)
{
    bt_synth_shape_t s;
    ck_assert_int_eq(bt_synth_shape_arch("tiny", "qwen2", &s), BT_OK);
    bt_gguf_t *g = write_open(&s, "q2.gguf", BT_TYPE_F32);
    same_layout_as_golden(g, "tiny-qwen2-golden.gguf");
    bt_gguf_close(g);
    ck_assert_int_eq(bt_synth_shape_arch("tiny", "qwen3", &s), BT_OK);
    g = write_open(&s, "q3.gguf", BT_TYPE_F32);
    same_layout_as_golden(g, "tiny-qwen3-golden.gguf");
    bt_gguf_close(g);
    /* deepseek2's tiny row: the V3-style golden file's tensors in llama.cpp's order */
    ck_assert_int_eq(bt_synth_shape_arch("tiny", "deepseek2", &s), BT_OK);
    g = write_open(&s, "ds.gguf", BT_TYPE_F32);
    same_layout_as_golden(g, "tiny-deepseek3-golden.gguf");
    bt_gguf_close(g);

    ck_assert_int_eq(bt_synth_shape("tiny", &s), BT_OK);
    s.rope_base = 500000.0f;
    s.rope_freqs_ctx = 64;
    g = write_open(&s, "l3.gguf", BT_TYPE_F32);
    check_family_file(g, &s);
    same_layout_as_golden(g, "tiny-llama3-ropefreqs-golden.gguf");
    bt_gguf_t *ref;
    ck_assert_int_eq(bt_gguf_open(tu_golden_path("tiny-llama3-ropefreqs-golden.gguf"), &ref),
                     BT_OK);
    const bt_gguf_tensor_t *a = bt_gguf_find_tensor(g, "rope_freqs.weight");
    const bt_gguf_tensor_t *b = bt_gguf_find_tensor(ref, "rope_freqs.weight");
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(a->n_elements, 8);
    const float *fa = a->data, *fb = b->data;
    for (int i = 0; i < 8; i++)
        ck_assert_msg(fabsf(fa[i] - fb[i]) <= 1e-6f * fb[i], "rope factor %d: %.9g, golden %.9g",
                      i, (double)fa[i], (double)fb[i]);
    bt_gguf_close(ref);
    bt_gguf_close(g);
}
END_TEST

/* The same seed gives the same bytes for every family. */
START_TEST(test_deterministic)
{
    static const char *const archs[] = {"qwen2", "qwen3", "gemma3"};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        bt_synth_shape_t s;
        ck_assert_int_eq(bt_synth_shape_arch("tiny", archs[i], &s), BT_OK);
        char a[700], b[700];
        snprintf(a, sizeof a, "%s/det-a.gguf", tmpdir);
        snprintf(b, sizeof b, "%s/det-b.gguf", tmpdir);
        ck_assert_int_eq(bt_synth_write(a, &s, BT_TYPE_Q4_0, 3), BT_OK);
        ck_assert_int_eq(bt_synth_write(b, &s, BT_TYPE_Q4_0, 3), BT_OK);
        size_t na, nb;
        void *da = tu_read_file(a, &na), *db = tu_read_file(b, &nb);
        ck_assert_uint_eq(na, nb);
        ck_assert_mem_eq(da, db, na);
        free(da);
        free(db);
    }
}
END_TEST

/* ---- named shapes: dimensions and the published parameter counts ---- */

typedef struct named {
    const char *name, *arch;
    int n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx, head_dim, n_swa, rope_freqs;
    bool tied;
    uint64_t n_params;
} named_t;

static const named_t named[] = {
    /* 134.5 M as SmolLM2-135M */
    {"smollm2-135m", "llama", 49152, 576, 30, 9, 3, 1536, 8192, 0, 0, 0, true, 134515008},
    {"llama-1b", "llama", 128256, 2048, 16, 32, 8, 8192, 131072, 0, 0, 0, true, 1235814400},
    /* Meta-Llama-3-8B's 8030261248, plus the 64 rope factors */
    {"llama3-8b", "llama", 128256, 4096, 32, 32, 8, 14336, 131072, 0, 0, 8192, false,
     8030261248ull + 64},
    {"qwen2-0.5b", "qwen2", 151936, 896, 24, 14, 2, 4864, 32768, 0, 0, 0, true, 494032768},
    {"qwen3-0.6b", "qwen3", 151936, 1024, 28, 16, 8, 3072, 40960, 128, 0, 0, true, 596049920},
    {"gemma3-270m", "gemma3", 262144, 640, 18, 4, 1, 2048, 32768, 256, 512, 0, true, 268098176},
    /* Meta-Llama-3-70B's 70553706496; Qwen3-235B-A22B's 235093634560 */
    {"llama3-70b", "llama", 128256, 8192, 80, 64, 8, 28672, 131072, 0, 0, 0, false,
     70553706496ull},
    {"qwen3-235b-a22b", "qwen3moe", 151936, 4096, 94, 64, 4, 12288, 40960, 128, 0, 0, false,
     235093634560ull},
    /* DeepSeek-V2-Lite's 15.7 B (15706484224) and DeepSeek-V3's 671 B (671026419200,
     * without the multi-token-prediction layer, which llama.cpp's files leave out) */
    {"deepseek-v2-lite", "deepseek2", 102400, 2048, 27, 16, 1, 10944, 163840, 0, 0, 0, false,
     15706484224ull},
    {"deepseek-v3", "deepseek2", 129280, 7168, 61, 128, 1, 18432, 163840, 0, 0, 0, false,
     671026419200ull},
};

START_TEST(test_named_shapes)
{
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        const named_t *w = &named[i];
        bt_synth_shape_t s;
        ck_assert_int_eq(bt_synth_shape(w->name, &s), BT_OK);
        ck_assert_str_eq(s.arch, w->arch);
        ck_assert_int_eq(s.n_vocab, w->n_vocab);
        ck_assert_int_eq(s.n_embd, w->n_embd);
        ck_assert_int_eq(s.n_layer, w->n_layer);
        ck_assert_int_eq(s.n_head, w->n_head);
        ck_assert_int_eq(s.n_head_kv, w->n_head_kv);
        ck_assert_int_eq(s.n_ff, w->n_ff);
        ck_assert_int_eq(s.n_ctx_train, w->n_ctx);
        ck_assert_int_eq(s.head_dim, w->head_dim);
        ck_assert_int_eq(s.n_swa, w->n_swa);
        ck_assert_int_eq(s.rope_freqs_ctx, w->rope_freqs);
        ck_assert(s.tied == w->tied);
        ck_assert_int_eq(bt_synth_check(&s), BT_OK);
        ck_assert_msg(bt_synth_n_params(&s) == w->n_params, "%s: %llu params, want %llu",
                      w->name, (unsigned long long)bt_synth_n_params(&s),
                      (unsigned long long)w->n_params);
        /* own family = asking for it */
        bt_synth_shape_t t;
        ck_assert_int_eq(bt_synth_shape_arch(w->name, w->arch, &t), BT_OK);
        ck_assert_str_eq(s.name, t.name); /* strings: equal literals need not share */
        ck_assert_str_eq(s.arch, t.arch);
        ck_assert(s.n_embd == t.n_embd &&
                  s.n_layer == t.n_layer && s.n_ff == t.n_ff && s.head_dim == t.head_dim &&
                  s.n_swa == t.n_swa && s.n_expert == t.n_expert &&
                  s.n_expert_used == t.n_expert_used && s.n_ff_exp == t.n_ff_exp &&
                  s.yarn_factor == t.yarn_factor && s.yarn_orig == t.yarn_orig &&
                  s.rope_freqs_ctx == t.rope_freqs_ctx && s.tied == t.tied);
    }
    bt_synth_shape_t s;
    ck_assert_int_eq(bt_synth_shape("llama3-8b", &s), BT_OK);
    ck_assert_float_eq(s.rope_base, 500000.0f);
    ck_assert_int_eq(bt_synth_shape("gemma3-270m", &s), BT_OK);
    ck_assert_float_eq(s.rope_base, 1e6f);
    ck_assert_float_eq(s.rms_eps, 1e-6f);
}
END_TEST

/* A named shape cut to 2 layers and a small vocabulary, so its layer
 * tensors are the real sizes: the file's layout against the row. */
START_TEST(test_named_layers)
{
    static const char *const names[] = {"llama3-8b", "qwen2-0.5b", "qwen3-0.6b", "gemma3-270m"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        bt_synth_shape_t s;
        ck_assert_int_eq(bt_synth_shape(names[i], &s), BT_OK);
        s.n_layer = 1;
        s.n_vocab = 64;
        if (s.n_ff > 4096) /* llama3-8b: keep the file small */
            s.n_ff = 256;
        bt_gguf_t *g = write_open(&s, "named.gguf", BT_TYPE_Q8_0);
        check_family_file(g, &s);
        bt_gguf_close(g);
    }
    /* the DeepSeeks' real attention, a dense and an expert layer (V3: the last of its
     * 3 dense ones), fewer and narrower experts */
    static const char *const ds[] = {"deepseek-v2-lite", "deepseek-v3"};
    for (size_t i = 0; i < 2; i++) {
        bt_synth_shape_t s;
        ck_assert_int_eq(bt_synth_shape(ds[i], &s), BT_OK);
        s.n_dense = 1;
        s.n_layer = 2;
        s.n_vocab = 64;
        s.n_ff = 256;
        s.n_ff_exp = 64;
        s.n_expert = 16;
        s.n_group = s.n_group > 1 ? 8 : 1;
        bt_gguf_t *g = write_open(&s, "named.gguf", BT_TYPE_Q8_0);
        check_family_file(g, &s);
        check_tensor3(g, "blk.1.attn_k_b.weight", (uint64_t)(s.d_qk - s.n_rot),
                      (uint64_t)s.kv_lora, (uint64_t)s.n_head);
        bt_gguf_close(g);
    }
}
END_TEST

/* ---- limits ---- */

START_TEST(test_limits)
{
    bt_synth_shape_t s, t;
    ck_assert_int_eq(bt_synth_shape_arch("tiny", "nope", &s), BT_ERR_ARG);
    ck_assert_int_eq(bt_synth_shape_arch("nope", "qwen3", &s), BT_ERR_ARG);
    ck_assert_int_eq(bt_synth_shape("tiny", &s), BT_OK);
    char path[700];
    snprintf(path, sizeof path, "%s/never.gguf", tmpdir);
    t = s;
    t.arch = "mamba";
    ck_assert_int_eq(bt_synth_check(&t), BT_ERR_ARG);
    ck_assert_int_eq(bt_synth_write(path, &t, BT_TYPE_F32, 1), BT_ERR_ARG);
    t = s;
    t.head_dim = 33; /* odd */
    ck_assert_int_eq(bt_synth_check(&t), BT_ERR_ARG);
    ck_assert_uint_eq(bt_synth_n_params(&t), 0);
    t = s;
    t.head_dim = 0;
    t.n_embd = 72; /* 72 / 4 = 18 fine, 72 / 5 not */
    t.n_head = 5;
    t.n_head_kv = 5;
    ck_assert_int_eq(bt_synth_check(&t), BT_ERR_ARG);
    t.head_dim = 16; /* ... unless the head dim is given */
    ck_assert_int_eq(bt_synth_check(&t), BT_OK);
    t = s;
    t.n_swa = 16; /* llama has no sliding window */
    ck_assert_int_eq(bt_synth_check(&t), BT_ERR_ARG);
    ck_assert_int_eq(bt_synth_shape_arch("tiny", "qwen3", &t), BT_OK);
    t.rope_freqs_ctx = 64; /* nor has qwen3 rope factors */
    ck_assert_int_eq(bt_synth_check(&t), BT_ERR_ARG);
    ck_assert_int_eq(bt_synth_shape_arch("tiny", "gemma3", &t), BT_OK);
    t.n_rot = 34; /* more than the head dim 32 */
    ck_assert_int_eq(bt_synth_check(&t), BT_ERR_ARG);
    t.n_rot = 16;
    ck_assert_int_eq(bt_synth_check(&t), BT_OK);
    /* MLA: a latent rank, groups that divide the experts and hold the used ones */
    ck_assert_int_eq(bt_synth_shape_arch("tiny", "deepseek2", &t), BT_OK);
    ck_assert_int_eq(bt_synth_check(&t), BT_OK);
    t.kv_lora = 0;
    ck_assert_int_eq(bt_synth_check(&t), BT_ERR_ARG);
    ck_assert_int_eq(bt_synth_shape_arch("tiny", "deepseek2", &t), BT_OK);
    t.n_group = 3;
    ck_assert_int_eq(bt_synth_check(&t), BT_ERR_ARG);
    t.n_group = 4; /* 1 group of 2 kept cannot hold 3 experts */
    ck_assert_int_eq(bt_synth_check(&t), BT_ERR_ARG);
    ck_assert_int_eq(bt_synth_shape_arch("tiny", "deepseek2", &t), BT_OK);
    t.n_shared = 0;
    ck_assert_int_eq(bt_synth_check(&t), BT_ERR_ARG);
    /* no conversion between MLA and the other families' attention */
    ck_assert_int_eq(bt_synth_shape_arch("smollm2-135m", "deepseek2", &t), BT_ERR_ARG);
    ck_assert_int_eq(bt_synth_shape_arch("deepseek-mini", "llama", &t), BT_ERR_ARG);
    ck_assert_int_eq(access(path, F_OK), -1); /* nothing was written */
}
END_TEST

/* ---- --vocab-from ---- */

/* The raw bytes of key in g (NULL, 0 when it is missing). */
static const uint8_t *raw_of(const bt_gguf_t *g, const char *key, uint64_t *n)
{
    const bt_gguf_kv_t *kv = bt_gguf_find_kv(g, key);
    const uint8_t *p = NULL;
    *n = kv != NULL ? bt_gguf_kv_raw(kv, &p) : 0;
    return p;
}

START_TEST(test_vocab_from)
{
    char src[700];
    snprintf(src, sizeof src, "%s/tests/data/spm-tiny.gguf", tu_srcdir());
    bt_synth_shape_t s;
    ck_assert_int_eq(bt_synth_shape("tiny", &s), BT_OK);
    ck_assert_int_eq(bt_synth_vocab_from(&s, src), BT_OK);
    bt_gguf_t *from, *g = write_open(&s, "vocab.gguf", BT_TYPE_Q8_0);
    ck_assert_int_eq(bt_gguf_open(src, &from), BT_OK);
    const bt_gguf_kv_t *tokens = bt_gguf_find_kv(from, "tokenizer.ggml.tokens");
    ck_assert_ptr_nonnull(tokens);
    ck_assert_int_eq(s.n_vocab, (int)tokens->arr_n);
    ck_assert_uint_eq(key_u32(g, "llama", "vocab_size"), tokens->arr_n);
    check_tensor3(g, "token_embd.weight", (uint64_t)s.n_embd, tokens->arr_n, 1);
    int n_copied = 0;
    for (uint64_t i = 0; i < from->n_kv; i++) { /* every tokenizer key, the same bytes */
        const bt_gguf_kv_t *kv = &from->kv[i];
        if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10) != 0)
            continue;
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        uint64_t na, nb;
        const uint8_t *a = raw_of(from, key, &na), *b = raw_of(g, key, &nb);
        ck_assert_msg(b != NULL && na == nb && memcmp(a, b, na) == 0, "%s differs", key);
        ck_assert_int_eq(bt_gguf_find_kv(g, key)->type, kv->type);
        n_copied++;
    }
    ck_assert_int_ge(n_copied, 4);
    bt_tokenizer_t *ta, *tb;
    ck_assert_int_eq(bt_tokenizer_load(from, &ta), BT_OK);
    ck_assert_int_eq(bt_tokenizer_load(g, &tb), BT_OK);
    static const char text[] = "Hello world, this is a test.";
    int32_t *ia = NULL, *ib = NULL;
    int na = 0, nb = 0;
    ck_assert_int_eq(bt_tokenizer_encode(ta, text, strlen(text), true, false, &ia, &na), BT_OK);
    ck_assert_int_eq(bt_tokenizer_encode(tb, text, strlen(text), true, false, &ib, &nb), BT_OK);
    ck_assert_int_gt(na, 1);
    ck_assert_int_eq(na, nb);
    ck_assert_mem_eq(ia, ib, sizeof ia[0] * (size_t)na);
    free(ia);
    free(ib);
    bt_tokenizer_free(ta);
    bt_tokenizer_free(tb);
    bt_gguf_close(from);
    bt_gguf_close(g);

    /* a file without a vocabulary, and a shape whose n_vocab no longer matches */
    char none[700];
    snprintf(none, sizeof none, "%s/vocab-none.gguf", tmpdir);
    bt_synth_shape_t t;
    ck_assert_int_eq(bt_synth_shape("tiny", &t), BT_OK);
    ck_assert_int_eq(bt_synth_write(none, &t, BT_TYPE_F32, 1), BT_OK);
    ck_assert_int_eq(bt_synth_vocab_from(&t, none), BT_ERR_ARG);
    ck_assert_ptr_null(t.vocab_from);
    ck_assert_int_eq(bt_synth_vocab_from(&t, src), BT_OK);
    t.n_vocab++;
    char bad[700];
    snprintf(bad, sizeof bad, "%s/vocab-bad.gguf", tmpdir);
    ck_assert_int_eq(bt_synth_write(bad, &t, BT_TYPE_F32, 1), BT_ERR_ARG);
}
END_TEST

static Suite *synth_suite(void)
{
    Suite *s = suite_create("synth");
    TCase *tc = tcase_create("families");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_tiny_each_family);
    tcase_add_test(tc, test_tiny_family_rows);
    tcase_add_test(tc, test_golden_layouts);
    tcase_add_test(tc, test_deterministic);
    suite_add_tcase(s, tc);
    tc = tcase_create("named");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_named_shapes);
    tcase_add_test(tc, test_named_layers);
    suite_add_tcase(s, tc);
    tc = tcase_create("limits");
    tcase_add_test(tc, test_limits);
    suite_add_tcase(s, tc);
    tc = tcase_create("vocab");
    tcase_add_test(tc, test_vocab_from);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    tmpdir = tu_mkdtemp();
    if (tmpdir == NULL) {
        perror("mkdtemp");
        return 1;
    }
    int failed = tu_run(synth_suite());
    tu_rmdir_all(tmpdir);
    return failed == 0 ? 0 : 1;
}
