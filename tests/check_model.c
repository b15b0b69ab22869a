/*
 * check_model.c: the model, the forward pass and synthetic models.
 *   golden:    logits and greedy tokens against tests/data/golden (llama.cpp)
 *   invariance: one batch vs micro-batches of 1, 3 and 8 -> bitwise equal
 *   synth:     baton-mkmodel's writer for every type loads and runs
 *   odd:       partial rotary and matrix heights that leave part of a
 *              16-row panel, every type that packs: cpu and exact against
 *              ref through the whole forward pass, bitwise over micro-batches
 *              and packing
 *   limits:    bad hyperparameters and shapes are refused with a status
 * Each runs once per instruction set this CPU has (tu_run_isas).
 */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forward.h"
#include "gguf.h"
#include "model.h"
#include "sampler.h"
#include "synth.h"
#include "testutil.h"

static char *tmpdir;

/* Prompt of n tokens then greedy decode of n_gen steps with a KV cache of
 * kv_type; logits of every position go to rows [n + n_gen, n_vocab];
 * ids[0..n_gen] the greedy ids. */
static void run_model_kv(const bt_model_t *m, const bt_ops_t *ops, uint32_t kv_type,
                         const int32_t *tokens, int n, int ubatch, int n_gen, int n_threads,
                         float *rows, int32_t *ids)
{
    const int n_vocab = m->hp.n_vocab, n_embd = m->hp.n_embd;
    bt_forward_t *f;
    ck_assert_int_eq(bt_forward_init(m, ops, n + n_gen, 1, ubatch, n_threads, kv_type, &f), BT_OK);
    float *x = malloc((size_t)ubatch * n_embd * sizeof(float));
    for (int pos = 0; pos < n; pos += ubatch) {
        int nt = n - pos < ubatch ? n - pos : ubatch;
        ck_assert_int_eq(bt_forward_embed(f, tokens + pos, nt, x), BT_OK);
        ck_assert_int_eq(bt_forward_layers(f, x, nt, pos), BT_OK);
        bt_forward_head(f, x, nt, rows + (size_t)pos * n_vocab);
    }
    ids[0] = bt_sample_greedy(rows + (size_t)(n - 1) * n_vocab, n_vocab);
    for (int i = 0; i < n_gen; i++) {
        float *row = rows + (size_t)(n + i) * n_vocab;
        ck_assert_int_eq(bt_forward_embed(f, &ids[i], 1, x), BT_OK);
        ck_assert_int_eq(bt_forward_layers(f, x, 1, n + i), BT_OK);
        bt_forward_head(f, x, 1, row);
        ids[i + 1] = bt_sample_greedy(row, n_vocab);
    }
    free(x);
    bt_forward_free(f);
}

static void run_model(const bt_model_t *m, const bt_ops_t *ops, const int32_t *tokens, int n,
                      int ubatch, int n_gen, int n_threads, float *rows, int32_t *ids)
{
    run_model_kv(m, ops, BT_TYPE_F32, tokens, n, ubatch, n_gen, n_threads, rows, ids);
}

/* ---- golden ---- */

/* The reference files of every architecture (README*.txt in
 * tests/data/golden): tokens 1..32 as a prompt, then 8 greedy steps; rows
 * [40][256] of llama.cpp's logits; its greedy ids g0..g8. */
typedef struct golden_case {
    const char *name, *arch;
    bool tied;
    int32_t ids[9];
    double tol; /* max abs on all 40 rows (tests/data/README.md) */
} golden_case_t;

static const golden_case_t golden_cases[] = {
    {"tiny-llama-golden-f32", "llama", false, {235, 206, 155, 56, 69, 202, 167, 91, 210}, 1e-4},
    {"tiny-llama3-ropefreqs-golden", "llama", false, {86, 112, 138, 173, 73, 160, 201, 194, 5},
     1e-4},
    {"tiny-qwen2-golden", "qwen2", false, {118, 141, 80, 46, 37, 246, 33, 5, 241}, 1e-4},
    {"tiny-qwen3-golden", "qwen3", false, {189, 247, 71, 234, 105, 228, 10, 83, 141}, 1e-4},
    /* sliding window 8 over 40 positions; llama.cpp's GELU goes through an
     * fp16 table, baton's is exact: 2.1e-3 apart, a window off by one 4.0 */
    {"tiny-gemma3-swa-golden", "gemma3", true, {118, 118, 118, 118, 118, 118, 118, 113, 113}, 1e-2},
};
#define N_GOLDEN ((int)(sizeof golden_cases / sizeof golden_cases[0]))

static void golden_check(const golden_case_t *g, const bt_ops_t *ops, int ubatch, int n_threads)
{
    bt_model_t *m;
    char path[256];
    snprintf(path, sizeof path, "%s.gguf", g->name);
    ck_assert_int_eq(bt_model_load(tu_golden_path(path), 0, -1, true, true, &m), BT_OK);
    ck_assert_str_eq(m->hp.arch->name, g->arch);
    ck_assert_int_eq(m->hp.n_vocab, 256);
    ck_assert(m->tied == g->tied);
    size_t size;
    snprintf(path, sizeof path, "%s.logits.bin", g->name);
    float *ref = tu_read_file(tu_golden_path(path), &size);
    ck_assert_ptr_nonnull(ref);
    ck_assert_uint_eq(size, 40 * 256 * sizeof(float));

    int32_t tokens[32], ids[9];
    for (int i = 0; i < 32; i++)
        tokens[i] = i + 1;
    float *rows = malloc(40 * 256 * sizeof(float));
    run_model(m, ops, tokens, 32, ubatch, 8, n_threads, rows, ids);
    double max_diff = 0.0;
    for (int i = 0; i < 40 * 256; i++)
        max_diff = fmax(max_diff, fabs((double)rows[i] - ref[i]));
    fprintf(stderr, "golden %s %s ub %d threads %d: max abs diff %.3g\n", g->name, ops->name,
            ubatch, n_threads, max_diff);
    for (int i = 0; i < 9; i++)
        ck_assert_msg(ids[i] == g->ids[i], "%s %s: greedy id %d is %d, llama.cpp's %d", g->name,
                      ops->name, i, ids[i], g->ids[i]);
    ck_assert_msg(max_diff <= g->tol, "%s %s: logits differ from llama.cpp's by %g (> %g)",
                  g->name, ops->name, max_diff, g->tol);
    free(rows);
    free(ref);
    bt_model_free(m);
}

START_TEST(test_golden_cpu) { golden_check(&golden_cases[_i], &bt_ops_cpu, 32, 1); }
END_TEST
START_TEST(test_golden_cpu_ub8_threads2) { golden_check(&golden_cases[_i], &bt_ops_cpu, 8, 2); }
END_TEST
START_TEST(test_golden_exact) { golden_check(&golden_cases[_i], &bt_ops_exact, 32, 1); }
END_TEST
START_TEST(test_golden_ref) { golden_check(&golden_cases[_i], &bt_ops_ref, 32, 1); }
END_TEST

/* ---- batch invariance ---- */

static char *write_synth(const char *name, const char *shape, uint32_t type, int n_layer)
{
    static char path[700];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    bt_synth_shape_t s;
    ck_assert_int_eq(bt_synth_shape(shape, &s), BT_OK);
    if (n_layer > 0)
        s.n_layer = n_layer;
    ck_assert_int_eq(bt_synth_write(path, &s, type, 42), BT_OK);
    return path;
}

/* One batch vs micro-batches of 1, 3, 8 at 1 and 2 threads: bitwise equal
 * logits and ids. An f16 cache also stays close to the f32 one (a loose
 * bound: it rounds K and V to 11 bits). */
static void invariance_check(uint32_t type, uint32_t kv_type)
{
    const char *path = write_synth("inv.gguf", "tiny", type, 7);
    bt_model_t *m;
    ck_assert_int_eq(bt_model_load(path, 0, -1, true, true, &m), BT_OK);
    const int n = 32, n_gen = 4, n_vocab = m->hp.n_vocab;
    int32_t tokens[32];
    for (int i = 0; i < n; i++)
        tokens[i] = (i * 37 + 11) % n_vocab;
    size_t bytes = (size_t)(n + n_gen) * n_vocab * sizeof(float);
    float *whole = malloc(bytes), *split = malloc(bytes);
    int32_t ids_whole[5], ids_split[5];
    run_model_kv(m, &bt_ops_cpu, kv_type, tokens, n, n, n_gen, 2, whole, ids_whole);
    static const int ubs[] = {1, 3, 8};
    for (size_t i = 0; i < sizeof ubs / sizeof ubs[0]; i++) {
        for (int threads = 1; threads <= 2; threads++) {
            memset(split, 0, bytes);
            run_model_kv(m, &bt_ops_cpu, kv_type, tokens, n, ubs[i], n_gen, threads, split,
                         ids_split);
            ck_assert_msg(memcmp(whole, split, bytes) == 0,
                          "type %u kv %u: logits with micro-batch %d, %d threads differ from one "
                          "batch", type, kv_type, ubs[i], threads);
            ck_assert_mem_eq(ids_whole, ids_split, sizeof ids_whole);
        }
    }
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        ck_assert(isfinite(whole[i]));
    /* packed weights (bt_model_pack, as a pipeline packs for bt_ops_cpu):
     * the same bits, in one batch and in micro-batches */
    ck_assert_int_eq(bt_model_pack(m), BT_OK);
    if (m->packed_bytes > 0)
        for (int ub = 3; ub <= n; ub += n - 3) {
            memset(split, 0, bytes);
            run_model_kv(m, &bt_ops_cpu, kv_type, tokens, n, ub, n_gen, 2, split, ids_split);
            ck_assert_msg(memcmp(whole, split, bytes) == 0,
                          "type %u: packed weights (micro-batch %d) differ", type, ub);
        }
    if (kv_type == BT_TYPE_F16) { /* the prompt's logits against an f32 cache */
        run_model_kv(m, &bt_ops_cpu, BT_TYPE_F32, tokens, n, n, n_gen, 2, split, ids_split);
        double max_diff = 0, max_abs = 0;
        for (size_t i = 0; i < (size_t)n * n_vocab; i++) {
            max_diff = fmax(max_diff, fabs((double)whole[i] - split[i]));
            max_abs = fmax(max_abs, fabs((double)split[i]));
        }
        ck_assert_msg(max_diff > 0 && max_diff <= 1e-2 * max_abs,
                      "f16 cache: max diff %g vs f32 cache (max |logit| %g)", max_diff, max_abs);
    }
    free(whole);
    free(split);
    bt_model_free(m);
}

START_TEST(test_invariance_f32) { invariance_check(BT_TYPE_F32, BT_TYPE_F32); }
END_TEST
START_TEST(test_invariance_q8_0) { invariance_check(BT_TYPE_Q8_0, BT_TYPE_F32); }
END_TEST
START_TEST(test_invariance_kv_f16) { invariance_check(BT_TYPE_F32, BT_TYPE_F16); }
END_TEST
START_TEST(test_invariance_q4_1) { invariance_check(BT_TYPE_Q4_1, BT_TYPE_F32); }
END_TEST

/* ---- synthetic models ---- */

START_TEST(test_synth_types)
{
    static const uint32_t types[] = {BT_TYPE_F32, BT_TYPE_F16, BT_TYPE_BF16, BT_TYPE_Q8_0};
    static const uint32_t file_types[] = {0, 1, 32, 7}; /* general.file_type of each */
    float *rows[4];
    for (int i = 0; i < 4; i++) {
        const char *path = write_synth("types.gguf", "tiny", types[i], 0);
        bt_model_t *m;
        ck_assert_int_eq(bt_model_load(path, 0, -1, true, true, &m), BT_OK);
        ck_assert_int_eq(m->hp.n_layer, 4);
        ck_assert_uint_eq(m->file_type, file_types[i]);
        int32_t tokens[5] = {1, 2, 3, 4, 5}, ids[3];
        rows[i] = malloc(7 * 256 * sizeof(float));
        run_model(m, &bt_ops_cpu, tokens, 5, 5, 2, 1, rows[i], ids);
        for (int j = 0; j < 7 * 256; j++)
            ck_assert(isfinite(rows[i][j]));
        bt_model_free(m);
    }
    /* Same seed, same weights up to the type's rounding: logits stay close
     * to f32's (a loose bound: this checks the types decode the same model,
     * not their precision). */
    for (int i = 1; i < 4; i++) {
        double max_diff = 0.0;
        for (int j = 0; j < 7 * 256; j++)
            max_diff = fmax(max_diff, fabs((double)rows[i][j] - rows[0][j]));
        ck_assert_msg(max_diff < 0.5, "type %u: logits differ from f32 by %g", types[i], max_diff);
        free(rows[i]);
    }
    free(rows[0]);
}
END_TEST

START_TEST(test_synth_deterministic)
{
    size_t na, nb;
    char a[700];
    snprintf(a, sizeof a, "%s", write_synth("a.gguf", "tiny", BT_TYPE_Q8_0, 2));
    const char *b = write_synth("b.gguf", "tiny", BT_TYPE_Q8_0, 2);
    void *da = tu_read_file(a, &na), *db = tu_read_file(b, &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert_mem_eq(da, db, na);
    free(da);
    free(db);
}
END_TEST

START_TEST(test_synth_tied_and_range)
{
    bt_synth_shape_t s;
    ck_assert_int_eq(bt_synth_shape("tiny", &s), BT_OK);
    s.tied = true;
    s.n_layer = 5;
    char path[700];
    snprintf(path, sizeof path, "%s/tied.gguf", tmpdir);
    ck_assert_int_eq(bt_synth_write(path, &s, BT_TYPE_F32, 3), BT_OK);
    bt_model_t *m;
    /* a middle stage: layers 2..3, no embeddings, no head */
    ck_assert_int_eq(bt_model_load(path, 2, 4, false, false, &m), BT_OK);
    ck_assert_ptr_null(m->tok_embd.data);
    ck_assert_ptr_null(m->out_norm);
    ck_assert_int_eq(m->last - m->first, 2);
    bt_model_free(m);
    /* a last stage of a tied model binds token_embd as its head */
    ck_assert_int_eq(bt_model_load(path, 4, 5, false, true, &m), BT_OK);
    ck_assert(m->tied);
    ck_assert_ptr_eq(m->output.data, m->tok_embd.data);
    bt_model_free(m);
    /* out-of-range layer range */
    ck_assert_int_eq(bt_model_load(path, 3, 9, false, false, &m), BT_ERR_ARG);
}
END_TEST

START_TEST(test_synth_named_shapes)
{
    bt_synth_shape_t s;
    ck_assert_int_eq(bt_synth_shape("smollm2-135m", &s), BT_OK);
    ck_assert_int_eq(s.n_embd, 576);
    ck_assert_int_eq(s.n_layer, 30);
    ck_assert_int_eq(s.n_head, 9);
    ck_assert_int_eq(s.n_head_kv, 3);
    ck_assert_int_eq(s.n_ff, 1536);
    ck_assert_int_eq(s.n_vocab, 49152);
    ck_assert_float_eq(s.rope_base, 100000.0f);
    /* 134.5 M parameters, as SmolLM2-135M */
    ck_assert_uint_eq(bt_synth_n_params(&s) / 100000, 1345);
    ck_assert_int_eq(bt_synth_shape("llama-1b", &s), BT_OK);
    ck_assert_int_eq(s.n_embd, 2048);
    ck_assert_int_eq(s.n_layer, 16);
    ck_assert_int_eq(s.n_head, 32);
    ck_assert_int_eq(s.n_head_kv, 8);
    ck_assert_int_eq(s.n_ff, 8192);
    ck_assert_int_eq(s.n_vocab, 128256);
    ck_assert_int_eq(bt_synth_shape("nope", &s), BT_ERR_ARG);
}
END_TEST

/* ---- shapes the golden model lacks: partial rotary, odd matrix heights ---- */

/* Synthetic shapes whose every packed matrix height (n_out) leaves a part
 * of a 16-row panel, as far as the type's blocks allow, and whose rope
 * turns only n_rot of the head's dims (llama.rope.dimension_count <
 * head dim: the rest pass through, as llama.cpp's NORM rope). */
typedef struct odd_shape {
    const char *what;
    int n_embd, n_head, n_head_kv, n_ff, n_rot;
} odd_shape_t;

/* f32, f16, bf16 (any row length): every height odd: q, o, down 72 rows,
 * k, v 36, gate, up 40, head 259; head dim 18, 8 dims rotate. */
static const odd_shape_t odd_float = {"float", 72, 4, 2, 40, 8};
/* 32-element blocks (q4_0, q4_1, q8_0): n_embd a multiple of 64 (rows the
 * 8-bit path takes), so q, o and down are whole panels; k, v 24 rows, gate,
 * up 40, head 259 (down's rows of 40 fit no block: it falls back to f32, as
 * llama.cpp's would); head dim 24, 16 dims rotate. */
static const odd_shape_t odd_q32 = {"32-blocks", 192, 8, 1, 40, 16};
/* 256-element K-quant blocks (q4_k, q6_k): n_embd 256; k, v 8 rows, gate,
 * up 40, head 259; head dim 8, 4 dims rotate. */
static const odd_shape_t odd_k = {"k-quants", 256, 32, 1, 40, 4};

enum { ODD_VOCAB = 259, ODD_N = 21, ODD_GEN = 3 };

static const char *write_odd(const odd_shape_t *o, uint32_t type, int n_rot)
{
    static char path[700];
    snprintf(path, sizeof path, "%s/odd.gguf", tmpdir);
    bt_synth_shape_t s;
    ck_assert_int_eq(bt_synth_shape("tiny", &s), BT_OK);
    s.n_layer = 2;
    s.n_vocab = ODD_VOCAB;
    s.n_embd = o->n_embd;
    s.n_head = o->n_head;
    s.n_head_kv = o->n_head_kv;
    s.n_ff = o->n_ff;
    s.n_rot = n_rot;
    ck_assert_int_eq(bt_synth_write(path, &s, type, 7), BT_OK);
    return path;
}

static double max_abs_diff(const float *a, const float *b, size_t n, double *max_abs)
{
    double d = 0;
    *max_abs = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK_MSG(isfinite(a[i]) && isfinite(b[i]), "logit %zu not finite", i);
        d = fmax(d, fabs((double)a[i] - b[i]));
        *max_abs = fmax(*max_abs, fabs((double)b[i]));
    }
    return d;
}

/* The whole forward pass of the model: bt_ops_exact within rounding of the
 * scalar bt_ops_ref (1e-5 of the largest logit; sums differ in order
 * only); bt_ops_cpu too where it multiplies this type exactly, else within
 * 3e-2 (its 8-bit activations, as llama.cpp's; up to 1.4e-2 measured); bt_ops_cpu
 * bitwise the same in micro-batches of 1, 3 and 8, and with packed weights. */
static void odd_check(const odd_shape_t *o, uint32_t type)
{
    const double cpu_tol = bt_ops_cpu_is_exact(type, o->n_embd) ? 1e-5 : 3e-2;
    bt_model_t *m;
    ck_assert_int_eq(bt_model_load(write_odd(o, type, o->n_rot), 0, -1, true, true, &m), BT_OK);
    ck_assert_int_eq(m->hp.n_rot, o->n_rot);
    ck_assert_int_lt(m->hp.n_rot, m->hp.head_dim);
    const int n = ODD_N, n_gen = ODD_GEN;
    int32_t tokens[ODD_N], ids_ref[ODD_GEN + 1], ids_whole[ODD_GEN + 1], ids[ODD_GEN + 1];
    for (int i = 0; i < n; i++)
        tokens[i] = (i * 37 + 11) % ODD_VOCAB;
    const size_t count = (size_t)(n + n_gen) * ODD_VOCAB, bytes = count * sizeof(float);
    float *ref = malloc(bytes), *whole = malloc(bytes), *rows = malloc(bytes);
    run_model(m, &bt_ops_ref, tokens, n, n, n_gen, 1, ref, ids_ref);
    double max_abs;
    run_model(m, &bt_ops_exact, tokens, n, n, n_gen, 2, rows, ids);
    double d = max_abs_diff(rows, ref, count, &max_abs);
    ck_assert_msg(d <= 1e-5 * fmax(max_abs, 1.0),
                  "%s, type %u: exact vs ref: max diff %g (max |logit| %g)", o->what, type, d,
                  max_abs);
    run_model(m, &bt_ops_cpu, tokens, n, n, n_gen, 2, whole, ids_whole);
    d = max_abs_diff(whole, ref, count, &max_abs);
    fprintf(stderr, "odd %s type %u: cpu vs ref max diff %.3g (max |logit| %.3g)\n", o->what,
            type, d, max_abs);
    ck_assert_msg(d <= cpu_tol * fmax(max_abs, 1.0),
                  "%s, type %u: cpu vs ref: max diff %g (max |logit| %g, tolerance %g of it)",
                  o->what, type, d, max_abs, cpu_tol);
    static const int ubs[] = {1, 3, 8};
    for (size_t i = 0; i < sizeof ubs / sizeof ubs[0]; i++) {
        memset(rows, 0, bytes);
        run_model(m, &bt_ops_cpu, tokens, n, ubs[i], n_gen, 1, rows, ids);
        ck_assert_msg(memcmp(whole, rows, bytes) == 0,
                      "%s, type %u: cpu logits in micro-batches of %d differ from one batch",
                      o->what, type, ubs[i]);
    }
    ck_assert_int_eq(bt_model_pack(m), BT_OK);
    /* k's rows (a partial panel) are packed, in the type, except in the
     * sse2 build, which packs nothing */
    ck_assert_uint_eq(m->layers[0].wk.type, type);
    ck_assert_msg(m->layers[0].wk.packed != NULL || bt_isa_active() == BT_ISA_SSE2,
                  "%s, type %u: attn_k (%lld rows) not packed", o->what, type,
                  (long long)m->layers[0].wk.n_out);
    for (int ub = 3; m->packed_bytes > 0 && ub <= n; ub += n - 3) {
        memset(rows, 0, bytes);
        run_model(m, &bt_ops_cpu, tokens, n, ub, n_gen, 2, rows, ids);
        ck_assert_msg(memcmp(whole, rows, bytes) == 0,
                      "%s, type %u: packed weights (micro-batch %d) differ from unpacked", o->what,
                      type, ub);
    }
    bt_model_free(m);
    free(ref);
    free(whole);
    free(rows);
}

/* Every type bt_ops_cpu packs, on a shape its blocks allow. */
static const struct {
    const odd_shape_t *shape;
    uint32_t type;
} odd_cases[] = {
    {&odd_float, BT_TYPE_F32}, {&odd_float, BT_TYPE_F16}, {&odd_float, BT_TYPE_BF16},
    {&odd_q32, BT_TYPE_Q4_0},  {&odd_q32, BT_TYPE_Q4_1},  {&odd_q32, BT_TYPE_Q8_0},
    {&odd_k, BT_TYPE_Q4_K},    {&odd_k, BT_TYPE_Q6_K},
};
enum { N_ODD_CASES = sizeof odd_cases / sizeof odd_cases[0] };

START_TEST(test_odd_types) { odd_check(odd_cases[_i].shape, odd_cases[_i].type); }
END_TEST

/* ---- an independent forward pass in double, for partial rotary ---- */

/* out[n_out] = W x in double, W's rows decoded by the type's own to_float. */
static void matvec_f64(double *out, const bt_matrix_t *w, const double *x, float *row)
{
    const bt_type_info_t *ti = bt_type_info(w->type);
    for (int64_t o = 0; o < w->n_out; o++) {
        ti->to_float(row, (const uint8_t *)w->data + o * w->row_bytes, w->n_in);
        double acc = 0;
        for (int64_t k = 0; k < w->n_in; k++)
            acc += (double)row[k] * x[k];
        out[o] = acc;
    }
}

static void rmsnorm_f64(double *out, const double *x, const float *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    const double scale = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        out[i] = x[i] * scale * w[i];
}

/* llama.cpp's NORM rope on one head: pairs (2i, 2i+1) of the first n_rot
 * dims turn by pos * base^(-2i/n_rot); dims n_rot.. pass through. */
static void rope_f64(double *h, int n_rot, int pos, double base)
{
    for (int i = 0; i < n_rot / 2; i++) {
        const double theta = pos * pow(base, -2.0 * i / n_rot);
        const double a = h[2 * i], b = h[2 * i + 1];
        h[2 * i] = a * cos(theta) - b * sin(theta);
        h[2 * i + 1] = a * sin(theta) + b * cos(theta);
    }
}

/* The prompt's logits [n, n_vocab] by the llama formulas in double, one
 * token at a time, sharing nothing with forward.c or the kernels but the
 * weights' decoders. */
static void forward_f64(const bt_model_t *m, const int32_t *tokens, int n, double *logits)
{
    const bt_hparams_t *hp = &m->hp;
    const int e = hp->n_embd, hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv;
    const int q_dim = nh * hd, kv_dim = nkv * hd, ff = hp->n_ff;
    const int wide = e > ff ? (e > q_dim ? e : q_dim) : (ff > q_dim ? ff : q_dim);
    float *row = xmalloc((size_t)(wide > hp->n_vocab ? wide : hp->n_vocab) * sizeof(float));
    double *x = xmalloc((size_t)n * e * sizeof(double)), *xn = xmalloc((size_t)e * sizeof(double));
    double *q = xmalloc((size_t)q_dim * sizeof(double));
    double *att = xmalloc((size_t)q_dim * sizeof(double));
    double *k = xmalloc((size_t)n * kv_dim * sizeof(double));
    double *v = xmalloc((size_t)n * kv_dim * sizeof(double));
    double *g = xmalloc((size_t)ff * sizeof(double)), *u = xmalloc((size_t)ff * sizeof(double));
    double *o = xmalloc((size_t)e * sizeof(double)), *sc = xmalloc((size_t)n * sizeof(double));
    const bt_type_info_t *te = bt_type_info(m->tok_embd.type);
    for (int t = 0; t < n; t++) {
        te->to_float(row, (const uint8_t *)m->tok_embd.data + tokens[t] * m->tok_embd.row_bytes, e);
        for (int i = 0; i < e; i++)
            x[(size_t)t * e + i] = row[i];
    }
    for (int il = 0; il < hp->n_layer; il++) {
        const bt_layer_t *l = &m->layers[il];
        for (int t = 0; t < n; t++) { /* k, v of every position first */
            rmsnorm_f64(xn, x + (size_t)t * e, l->attn_norm, e, hp->rms_eps);
            matvec_f64(k + (size_t)t * kv_dim, &l->wk, xn, row);
            matvec_f64(v + (size_t)t * kv_dim, &l->wv, xn, row);
            for (int h = 0; h < nkv; h++)
                rope_f64(k + (size_t)t * kv_dim + h * hd, hp->n_rot, t, hp->rope_base);
        }
        for (int t = 0; t < n; t++) {
            double *xt = x + (size_t)t * e;
            rmsnorm_f64(xn, xt, l->attn_norm, e, hp->rms_eps);
            matvec_f64(q, &l->wq, xn, row);
            for (int h = 0; h < nh; h++) {
                double *qh = q + h * hd, mx = -INFINITY, sum = 0;
                const int kh = h / (nh / nkv);
                rope_f64(qh, hp->n_rot, t, hp->rope_base);
                for (int j = 0; j <= t; j++) {
                    double d = 0;
                    for (int i = 0; i < hd; i++)
                        d += qh[i] * k[(size_t)j * kv_dim + kh * hd + i];
                    sc[j] = d / sqrt((double)hd);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j <= t; j++)
                    sum += sc[j] = exp(sc[j] - mx);
                for (int i = 0; i < hd; i++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++)
                        a += sc[j] * v[(size_t)j * kv_dim + kh * hd + i];
                    att[h * hd + i] = a / sum;
                }
            }
            matvec_f64(o, &l->wo, att, row);
            for (int i = 0; i < e; i++)
                xt[i] += o[i];
            rmsnorm_f64(xn, xt, l->ffn_norm, e, hp->rms_eps);
            matvec_f64(g, &l->w_gate, xn, row);
            matvec_f64(u, &l->w_up, xn, row);
            for (int i = 0; i < ff; i++)
                g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            matvec_f64(o, &l->w_down, g, row);
            for (int i = 0; i < e; i++)
                xt[i] += o[i];
        }
    }
    for (int t = 0; t < n; t++) {
        rmsnorm_f64(xn, x + (size_t)t * e, m->out_norm, e, hp->rms_eps);
        matvec_f64(logits + (size_t)t * hp->n_vocab, &m->output, xn, row);
    }
    free(row), free(x), free(xn), free(q), free(att), free(k), free(v);
    free(g), free(u), free(o), free(sc);
}

/* Partial rotary against the double implementation above (as llama.cpp's
 * NORM rope: the dims past n_rot pass through), within 1e-4 of the
 * largest logit; and llama.rope.dimension_count is honored: the same
 * weights with every dim turning give other logits. */
START_TEST(test_odd_rope_dims)
{
    const odd_shape_t *o = &odd_float;
    const size_t count = (size_t)(ODD_N + ODD_GEN) * ODD_VOCAB;
    float *rows[2];
    int32_t tokens[ODD_N], ids[ODD_GEN + 1];
    for (int i = 0; i < ODD_N; i++)
        tokens[i] = (i * 37 + 11) % ODD_VOCAB;
    for (int full = 0; full <= 1; full++) {
        bt_model_t *m;
        ck_assert_int_eq(bt_model_load(write_odd(o, BT_TYPE_F32, full ? 0 : o->n_rot), 0, -1,
                                       true, true, &m),
                         BT_OK);
        ck_assert_int_eq(m->hp.n_rot, full ? m->hp.head_dim : o->n_rot);
        rows[full] = malloc(count * sizeof(float));
        run_model(m, &bt_ops_cpu, tokens, ODD_N, ODD_N, ODD_GEN, 1, rows[full], ids);
        double *want = xmalloc((size_t)ODD_N * ODD_VOCAB * sizeof(double));
        forward_f64(m, tokens, ODD_N, want);
        double d = 0, max_abs = 0;
        for (size_t i = 0; i < (size_t)ODD_N * ODD_VOCAB; i++) {
            d = fmax(d, fabs(rows[full][i] - want[i]));
            max_abs = fmax(max_abs, fabs(want[i]));
        }
        fprintf(stderr, "rope dims %d of %d: max diff %.3g against float64 (max |logit| %.3g)\n",
                m->hp.n_rot, m->hp.head_dim, d, max_abs);
        ck_assert_msg(d <= 1e-4 * fmax(max_abs, 1.0),
                      "rope dims %d of %d: logits differ from the float64 forward by %g "
                      "(max |logit| %g)", m->hp.n_rot, m->hp.head_dim, d, max_abs);
        free(want);
        bt_model_free(m);
    }
    /* position 0 turns nothing: the first row is the same either way */
    ck_assert_mem_eq(rows[0], rows[1], ODD_VOCAB * sizeof(float));
    ck_assert_msg(memcmp(rows[0], rows[1], count * sizeof(float)) != 0,
                  "n_rot %d and full rope give the same logits", o->n_rot);
    free(rows[0]);
    free(rows[1]);
}
END_TEST

/* ---- limits: models the loader must refuse ---- */

/* Writes a tiny model with one metadata value replaced. */
static const char *write_variant(const char *key, uint32_t value, const char *arch)
{
    static char path[700];
    snprintf(path, sizeof path, "%s/variant.gguf", tmpdir);
    bt_gguf_writer_t *w;
    ck_assert_int_eq(bt_gguf_writer_init(&w), BT_OK);
    bt_gguf_writer_set_str(w, "general.architecture", arch);
    const char *keys[] = {"llama.block_count", "llama.embedding_length",
                          "llama.feed_forward_length", "llama.attention.head_count",
                          "llama.attention.head_count_kv"};
    const uint32_t vals[] = {1, 64, 160, 4, 2};
    for (int i = 0; i < 5; i++)
        bt_gguf_writer_set_u32(w, keys[i], strcmp(keys[i], key) == 0 ? value : vals[i]);
    ck_assert_int_eq(bt_gguf_writer_begin(w, path), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_finish(w), BT_OK);
    bt_gguf_writer_free(w);
    return path;
}

START_TEST(test_limits_hparams)
{
    bt_model_t *m;
    ck_assert_int_eq(bt_model_load(write_variant("", 0, "qwen2"), 0, -1, true, true, &m),
                     BT_ERR_UNSUPPORTED);
    ck_assert_int_eq(
        bt_model_load(write_variant("llama.attention.head_count", 5, "llama"), 0, -1, 1, 1, &m),
        BT_ERR_FORMAT);
    ck_assert_int_eq(
        bt_model_load(write_variant("llama.attention.head_count_kv", 3, "llama"), 0, -1, 1, 1,
                      &m),
        BT_ERR_FORMAT);
    ck_assert_int_eq(
        bt_model_load(write_variant("llama.block_count", 0, "llama"), 0, -1, 1, 1, &m),
        BT_ERR_FORMAT);
    /* valid metadata but no tensors */
    ck_assert_int_eq(bt_model_load(write_variant("", 0, "llama"), 0, -1, 1, 1, &m),
                     BT_ERR_FORMAT);
}
END_TEST

/* A block count the file's tensors cannot hold is refused at open, before
 * bind sizes anything by it (found by fuzz_model: a 16 KB file claiming
 * 7.7 million layers made bind calloc 2.3 GB). The file is a valid 2-layer
 * model with only the value of llama.block_count overwritten in place. */
START_TEST(test_limits_block_count)
{
    const char *path = write_synth("blocks.gguf", "tiny", BT_TYPE_F32, 2);
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);
    const bt_gguf_kv_t *kv = bt_gguf_find_kv(g, "llama.block_count");
    ck_assert_ptr_nonnull(kv);
    ck_assert_int_eq(kv->type, BT_GGUF_UINT32);
    /* the value follows the key and the u32 value type */
    off_t at = (off_t)((const uint8_t *)kv->key.ptr - g->map) + (off_t)kv->key.len + 4;
    bt_gguf_close(g);

    bt_model_t *m;
    const uint32_t counts[] = {1u << 23, 3, 2};
    const bt_status_t want[] = {BT_ERR_FORMAT, BT_ERR_FORMAT, BT_OK};
    for (int i = 0; i < 3; i++) {
        uint8_t le[4] = {(uint8_t)counts[i], (uint8_t)(counts[i] >> 8),
                         (uint8_t)(counts[i] >> 16), (uint8_t)(counts[i] >> 24)};
        int fd = open(path, O_WRONLY);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(pwrite(fd, le, 4, at), 4);
        close(fd);
        m = NULL; /* refused by open, before any bind */
        ck_assert_msg(bt_model_open(path, &m) == want[i], "block_count %u", counts[i]);
        if (m != NULL) {
            ck_assert_int_eq(m->hp.n_layer, 2);
            bt_model_free(m);
        }
    }
}
END_TEST

START_TEST(test_limits_forward)
{
    const char *path = write_synth("lim.gguf", "tiny", BT_TYPE_F32, 1);
    bt_model_t *m;
    ck_assert_int_eq(bt_model_load(path, 0, -1, true, true, &m), BT_OK);
    bt_forward_t *f;
    ck_assert_int_eq(bt_forward_init(m, &bt_ops_cpu, 0, 1, 4, 1, BT_TYPE_F32, &f), BT_ERR_ARG);
    ck_assert_int_eq(bt_forward_init(m, &bt_ops_cpu, 8, 1, 4, 1, BT_TYPE_F32, &f), BT_OK);
    float x[5 * 64];
    int32_t bad = 256, good[5] = {0, 1, 2, 3, 4};
    ck_assert_int_eq(bt_forward_embed(f, &bad, 1, x), BT_ERR_ARG);
    ck_assert_int_eq(bt_forward_embed(f, good, 5, x), BT_OK);
    ck_assert_int_eq(bt_forward_layers(f, x, 5, 0), BT_ERR_ARG); /* > max_tok */
    ck_assert_int_eq(bt_forward_layers(f, x, 4, 5), BT_ERR_ARG); /* past n_ctx */
    ck_assert_int_eq(bt_forward_layers(f, x, 4, 4), BT_OK);
    bt_forward_free(f);
    bt_model_free(m);
}
END_TEST

static Suite *model_suite(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("golden");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_golden_cpu, 0, N_GOLDEN);
    tcase_add_loop_test(tc, test_golden_cpu_ub8_threads2, 0, N_GOLDEN);
    tcase_add_loop_test(tc, test_golden_exact, 0, N_GOLDEN);
    tcase_add_loop_test(tc, test_golden_ref, 0, N_GOLDEN);
    suite_add_tcase(s, tc);
    tc = tcase_create("invariance");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_invariance_f32);
    tcase_add_test(tc, test_invariance_q8_0);
    tcase_add_test(tc, test_invariance_kv_f16);
    tcase_add_test(tc, test_invariance_q4_1);
    suite_add_tcase(s, tc);
    tc = tcase_create("synth");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_synth_types);
    tcase_add_test(tc, test_synth_deterministic);
    tcase_add_test(tc, test_synth_tied_and_range);
    tcase_add_test(tc, test_synth_named_shapes);
    suite_add_tcase(s, tc);
    tc = tcase_create("odd");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_odd_types, 0, N_ODD_CASES);
    tcase_add_test(tc, test_odd_rope_dims);
    suite_add_tcase(s, tc);
    tc = tcase_create("limits");
    tcase_add_test(tc, test_limits_hparams);
    tcase_add_test(tc, test_limits_block_count);
    tcase_add_test(tc, test_limits_forward);
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
    int status = tu_main_isas(model_suite);
    tu_rmdir_all(tmpdir);
    return status;
}
