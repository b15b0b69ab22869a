/* synth.c: writes synthetic GGUF files of every family in arch.h (see synth.h). */
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "gguf.h"
#include "kernels/types.h"
#include "rng.h"

/* The named shapes. A name may have one row per family ("tiny"); its first
 * row is its own family. Real sizes follow the models' config.json. */
static const bt_synth_shape_t shapes[] = {
    {.name = "tiny", .arch = "llama", .n_vocab = 256, .n_embd = 64, .n_layer = 4, .n_head = 4,
     .n_head_kv = 2, .n_ff = 160, .n_ctx_train = 512, .rope_base = 10000.0f, .rms_eps = 1e-5f},
    /* the golden tiny-qwen2/-qwen3 files' dimensions (tests/data/README.md) */
    {.name = "tiny", .arch = "qwen2", .n_vocab = 256, .n_embd = 64, .n_layer = 4, .n_head = 4,
     .n_head_kv = 2, .n_ff = 160, .n_ctx_train = 512, .rope_base = 1e6f, .rms_eps = 1e-6f},
    {.name = "tiny", .arch = "qwen3", .n_vocab = 256, .n_embd = 64, .n_layer = 4, .n_head = 4,
     .n_head_kv = 2, .n_ff = 160, .n_ctx_train = 512, .rope_base = 1e6f, .rms_eps = 1e-6f,
     .head_dim = 32},
    /* the golden tiny-qwen3moe file's dimensions: 8 experts of 96, 2 per token */
    {.name = "tiny", .arch = "qwen3moe", .n_vocab = 256, .n_embd = 64, .n_layer = 4, .n_head = 4,
     .n_head_kv = 2, .n_ff = 96, .n_ctx_train = 128, .rope_base = 1e6f, .rms_eps = 1e-6f,
     .tied = true, .head_dim = 32, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 96},
    /* 6 layers so that layer 5 is global under the default pattern of 6; a
     * window of 8 that a 16-token prompt already slides past; one kv head
     * (MQA) and a head dim of 32 != 64 / 4, as Gemma 3 270M's 256 != 160 */
    {.name = "tiny", .arch = "gemma3", .n_vocab = 256, .n_embd = 64, .n_layer = 6, .n_head = 4,
     .n_head_kv = 1, .n_ff = 160, .n_ctx_train = 512, .rope_base = 1e6f, .rms_eps = 1e-6f,
     .tied = true, .head_dim = 32, .n_swa = 8},
    {.name = "smollm2-135m", .arch = "llama", .n_vocab = 49152, .n_embd = 576, .n_layer = 30,
     .n_head = 9, .n_head_kv = 3, .n_ff = 1536, .n_ctx_train = 8192, .rope_base = 100000.0f,
     .rms_eps = 1e-5f, .tied = true},
    {.name = "llama-1b", .arch = "llama", .n_vocab = 128256, .n_embd = 2048, .n_layer = 16,
     .n_head = 32, .n_head_kv = 8, .n_ff = 8192, .n_ctx_train = 131072, .rope_base = 500000.0f,
     .rms_eps = 1e-5f, .tied = true},
    {.name = "llama3-8b", .arch = "llama", .n_vocab = 128256, .n_embd = 4096, .n_layer = 32,
     .n_head = 32, .n_head_kv = 8, .n_ff = 14336, .n_ctx_train = 131072, .rope_base = 500000.0f,
     .rms_eps = 1e-5f, .rope_freqs_ctx = 8192},
    {.name = "qwen2-0.5b", .arch = "qwen2", .n_vocab = 151936, .n_embd = 896, .n_layer = 24,
     .n_head = 14, .n_head_kv = 2, .n_ff = 4864, .n_ctx_train = 32768, .rope_base = 1e6f,
     .rms_eps = 1e-6f, .tied = true},
    {.name = "qwen3-0.6b", .arch = "qwen3", .n_vocab = 151936, .n_embd = 1024, .n_layer = 28,
     .n_head = 16, .n_head_kv = 8, .n_ff = 3072, .n_ctx_train = 40960, .rope_base = 1e6f,
     .rms_eps = 1e-6f, .tied = true, .head_dim = 128},
    /* Qwen3-30B-A3B, and its 48 layers and 128 experts (8 per token) scaled to ~2 GB in
     * Q8_0 (1.94 B parameters, 0.17 B active) */
    {.name = "qwen3-30b-a3b", .arch = "qwen3moe", .n_vocab = 151936, .n_embd = 2048,
     .n_layer = 48, .n_head = 32, .n_head_kv = 4, .n_ff = 6144, .n_ctx_train = 40960,
     .rope_base = 1e6f, .rms_eps = 1e-6f, .head_dim = 128, .n_expert = 128,
     .n_expert_used = 8, .n_ff_exp = 768},
    {.name = "qwen3moe-mini", .arch = "qwen3moe", .n_vocab = 151936, .n_embd = 512,
     .n_layer = 48, .n_head = 8, .n_head_kv = 2, .n_ff = 1536, .n_ctx_train = 40960,
     .rope_base = 1e6f, .rms_eps = 1e-6f, .head_dim = 64, .n_expert = 128, .n_expert_used = 8,
     .n_ff_exp = 192},
    /* gpt-oss-20b, and its 24 layers of 32 experts (4 per token) scaled to ~1.5 GB with
     * MXFP4 experts (2.8 B parameters, 0.5 B active) */
    {.name = "gpt-oss-20b", .arch = "gpt-oss", .n_vocab = 201088, .n_embd = 2880, .n_layer = 24,
     .n_head = 64, .n_head_kv = 8, .n_ff = 2880, .n_ctx_train = 131072, .rope_base = 150000.0f,
     .rms_eps = 1e-5f, .head_dim = 64, .n_swa = 128, .n_expert = 32, .n_expert_used = 4,
     .n_ff_exp = 2880, .yarn_factor = 32.0f, .yarn_orig = 4096},
    {.name = "gpt-oss-mini", .arch = "gpt-oss", .n_vocab = 201088, .n_embd = 1024,
     .n_layer = 24, .n_head = 16, .n_head_kv = 8, .n_ff = 1024, .n_ctx_train = 131072,
     .rope_base = 150000.0f, .rms_eps = 1e-5f, .head_dim = 64, .n_swa = 128, .n_expert = 32,
     .n_expert_used = 4, .n_ff_exp = 1024, .yarn_factor = 32.0f, .yarn_orig = 4096},
    {.name = "gemma3-270m", .arch = "gemma3", .n_vocab = 262144, .n_embd = 640, .n_layer = 18,
     .n_head = 4, .n_head_kv = 1, .n_ff = 2048, .n_ctx_train = 32768, .rope_base = 1e6f,
     .rms_eps = 1e-6f, .tied = true, .head_dim = 256, .n_swa = 512},
    /* deepseek2: the golden tiny-deepseek3 file's dimensions (V3 style: q_lora, grouped
     * sigmoid routing with the bias, renormalized and scaled weights, YaRN) */
    {.name = "tiny", .arch = "deepseek2", .n_vocab = 256, .n_embd = 64, .n_layer = 4,
     .n_head = 4, .n_head_kv = 1, .n_ff = 96, .n_ctx_train = 163840, .rope_base = 10000.0f,
     .rms_eps = 1e-6f, .n_rot = 16, .n_expert = 8, .n_expert_used = 3, .n_ff_exp = 32,
     .yarn_factor = 40.0f, .yarn_orig = 4096, .q_lora = 32, .kv_lora = 40, .d_qk = 32,
     .d_v = 16, .n_dense = 1, .n_shared = 1, .n_group = 2, .n_group_used = 1, .sigmoid = true,
     .weights_norm = true, .weights_scale = 2.5f, .yarn_log_mul = 0.1f},
    /* DeepSeek-V3's layout (MLA, 1 shared and 8 of 128 routed experts in 8 groups of which
     * 4 compete, a dense first layer) scaled to 2.6 B parameters (2.7 GB in Q8_0) */
    {.name = "deepseek-mini", .arch = "deepseek2", .n_vocab = 129280, .n_embd = 1024,
     .n_layer = 16, .n_head = 16, .n_head_kv = 1, .n_ff = 4096, .n_ctx_train = 163840,
     .rope_base = 10000.0f, .rms_eps = 1e-6f, .n_rot = 32, .n_expert = 128,
     .n_expert_used = 8, .n_ff_exp = 384, .yarn_factor = 40.0f, .yarn_orig = 4096,
     .q_lora = 384, .kv_lora = 128, .d_qk = 96, .d_v = 64, .n_dense = 1, .n_shared = 1,
     .n_group = 8, .n_group_used = 4, .sigmoid = true, .weights_norm = true,
     .weights_scale = 2.5f, .yarn_log_mul = 0.1f},
    /* the models people split over nodes, at their real sizes (baton-plan's
     * scale study; a file of them needs a machine with the memory) */
    {.name = "llama3-70b", .arch = "llama", .n_vocab = 128256, .n_embd = 8192, .n_layer = 80,
     .n_head = 64, .n_head_kv = 8, .n_ff = 28672, .n_ctx_train = 131072,
     .rope_base = 500000.0f, .rms_eps = 1e-5f},
    {.name = "qwen3-235b-a22b", .arch = "qwen3moe", .n_vocab = 151936, .n_embd = 4096,
     .n_layer = 94, .n_head = 64, .n_head_kv = 4, .n_ff = 12288, .n_ctx_train = 40960,
     .rope_base = 1e6f, .rms_eps = 1e-6f, .head_dim = 128, .n_expert = 128,
     .n_expert_used = 8, .n_ff_exp = 1536},
    /* a 284 B-parameter MoE of gpt-oss's layout (the reference PR's model
     * size; its own configuration is not used here): 44 layers of 256
     * experts of 2880, 4 per token */
    {.name = "moe-284b", .arch = "gpt-oss", .n_vocab = 201088, .n_embd = 2880, .n_layer = 44,
     .n_head = 64, .n_head_kv = 8, .n_ff = 2880, .n_ctx_train = 131072, .rope_base = 150000.0f,
     .rms_eps = 1e-5f, .head_dim = 64, .n_swa = 128, .n_expert = 256, .n_expert_used = 4,
     .n_ff_exp = 2880, .yarn_factor = 32.0f, .yarn_orig = 4096},
    /* DeepSeek-V2-Lite (15.7 B: no q_lora, 2 shared and 6 of 64 routed experts, softmax
     * gating) and DeepSeek-V3 (671 B), as their config.json say */
    {.name = "deepseek-v2-lite", .arch = "deepseek2", .n_vocab = 102400, .n_embd = 2048,
     .n_layer = 27, .n_head = 16, .n_head_kv = 1, .n_ff = 10944, .n_ctx_train = 163840,
     .rope_base = 10000.0f, .rms_eps = 1e-6f, .n_rot = 64, .n_expert = 64, .n_expert_used = 6,
     .n_ff_exp = 1408, .yarn_factor = 40.0f, .yarn_orig = 4096, .kv_lora = 512, .d_qk = 192,
     .d_v = 128, .n_dense = 1, .n_shared = 2, .n_group = 1, .n_group_used = 1,
     .weights_scale = 1.0f, .yarn_log_mul = 0.0707f},
    {.name = "deepseek-v3", .arch = "deepseek2", .n_vocab = 129280, .n_embd = 7168,
     .n_layer = 61, .n_head = 128, .n_head_kv = 1, .n_ff = 18432, .n_ctx_train = 163840,
     .rope_base = 10000.0f, .rms_eps = 1e-6f, .n_rot = 64, .n_expert = 256,
     .n_expert_used = 8, .n_ff_exp = 2048, .yarn_factor = 40.0f, .yarn_orig = 4096,
     .q_lora = 1536, .kv_lora = 512, .d_qk = 192, .d_v = 128, .n_dense = 3, .n_shared = 1,
     .n_group = 8, .n_group_used = 4, .sigmoid = true, .weights_norm = true,
     .weights_scale = 2.5f, .yarn_log_mul = 0.1f},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

const char *bt_synth_shape_names(void)
{
    return "tiny, smollm2-135m, llama-1b, llama3-8b, qwen2-0.5b, qwen3-0.6b, qwen3-30b-a3b, "
           "qwen3moe-mini, gpt-oss-20b, gpt-oss-mini, gemma3-270m, llama3-70b, qwen3-235b-a22b, "
           "moe-284b, deepseek-mini, deepseek-v2-lite, deepseek-v3";
}

bt_status_t bt_synth_shape(const char *name, bt_synth_shape_t *out)
{
    return bt_synth_shape_arch(name, NULL, out);
}

bt_status_t bt_synth_shape_arch(const char *name, const char *arch, bt_synth_shape_t *out)
{
    const bt_synth_shape_t *own = NULL, *row = NULL;
    for (size_t i = 0; i < N_SHAPES; i++)
        if (strcmp(shapes[i].name, name) == 0) {
            own = own ? own : &shapes[i];
            if (arch != NULL && strcmp(shapes[i].arch, arch) == 0)
                row = &shapes[i];
        }
    if (own == NULL) {
        bt_log_error("unknown model shape '%s' (known: %s)", name, bt_synth_shape_names());
        return BT_ERR_ARG;
    }
    const bt_arch_t *a = bt_arch_find(arch ? arch : own->arch, strlen(arch ? arch : own->arch));
    if (a == NULL) {
        bt_log_error("unknown architecture '%s' (known: %s)", arch, bt_arch_names());
        return BT_ERR_ARG;
    }
    if (row == NULL && strcmp(a->name, own->arch) == 0)
        row = own;
    if (row == NULL && (a->mla || bt_arch_find(own->arch, strlen(own->arch))->mla)) {
        bt_log_error("shape '%s' has no %s form (Multi-head Latent Attention and the other "
                     "families' attention do not convert into each other; deepseek2's shapes: "
                     "tiny, deepseek-mini, deepseek-v2-lite, deepseek-v3)", name, a->name);
        return BT_ERR_ARG;
    }
    if (row == NULL) { /* the shape's dimensions in another family */
        bt_synth_shape_t s = *own;
        s.arch = a->name;
        if (!a->rope_freqs)
            s.rope_freqs_ctx = 0;
        if (!a->swa)
            s.n_swa = 0;
        else if (s.n_swa == 0)
            s.n_swa = 512; /* Gemma 3's window */
        if (strcmp(a->name, "gemma3") == 0 && s.head_dim == 0 && s.n_embd % s.n_head == 0)
            s.head_dim = s.n_embd / s.n_head; /* gemma3 files carry key_length */
        if (!a->yarn) {
            s.yarn_factor = 0.0f;
        } else if (s.yarn_factor == 0.0f) { /* gpt-oss's */
            s.yarn_factor = 32.0f;
            s.yarn_orig = 4096;
        }
        if (a->moe == 0) {
            s.n_expert = s.n_expert_used = s.n_ff_exp = 0;
        } else if (a->dense == 0 && s.n_expert == 0) { /* experts of the dense FFN's size */
            s.n_expert = 8;
            s.n_expert_used = 2;
            s.n_ff_exp = s.n_ff;
        }
        *out = s;
        return BT_OK;
    }
    *out = *row;
    return BT_OK;
}

/* Whether s is of a family with Multi-head Latent Attention. */
static bool is_mla(const bt_synth_shape_t *s)
{
    const bt_arch_t *a = s->arch ? bt_arch_find(s->arch, strlen(s->arch)) : NULL;
    return a != NULL && a->mla;
}

int bt_synth_head_dim(const bt_synth_shape_t *s)
{
    if (is_mla(s))
        return s->kv_lora + s->n_rot;
    return s->head_dim > 0 ? s->head_dim : s->n_head > 0 ? s->n_embd / s->n_head : 0;
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
    int64_t n_exp;       /* matrices of n_out rows one after another (experts), else 1 */
    float mean, std;
    uint32_t type;
    bool rope_freqs; /* the Llama 3 factors instead of random numbers */
} tensor_spec_t;

/* bt_synth_check's rest for MLA: the ranks and head sizes, one kv head,
 * rope in the key, the routing's groups, the dense layers, the shared
 * experts. */
static bt_status_t check_mla(const bt_synth_shape_t *s)
{
    const int lim = 1 << 20;
    if (s->q_lora < 0 || s->q_lora > lim || s->kv_lora < 1 || s->kv_lora > lim ||
        s->n_rot < 2 || s->n_rot % 2 != 0 || s->d_qk <= s->n_rot || s->d_qk > lim ||
        s->d_v < 1 || s->d_v > lim || s->n_head_kv != 1) {
        bt_log_error("mkmodel: MLA: q_lora %d, kv_lora %d, n_rot %d, d_qk %d, d_v %d, n_head_kv "
                     "%d: the ranks must be in 0..%d (q_lora) and 1..%d, n_rot even and >= 2, "
                     "d_qk above n_rot, d_v >= 1, one kv head", s->q_lora, s->kv_lora, s->n_rot,
                     s->d_qk, s->d_v, s->n_head_kv, lim, lim);
        return BT_ERR_ARG;
    }
    if (s->n_expert == 0)
        return BT_OK;
    if (s->n_expert_used < 1 || s->n_expert_used > s->n_expert || s->n_ff_exp < 1 ||
        s->n_ff_exp > (1 << 22) || s->n_shared < 1 || s->n_shared > 64 || s->n_group < 1 ||
        s->n_group > 64 || s->n_expert % s->n_group != 0 || s->n_group_used < 1 ||
        s->n_group_used > s->n_group ||
        s->n_expert_used > s->n_group_used * (s->n_expert / s->n_group) || s->n_dense < 0 ||
        s->n_dense > s->n_layer || !(s->weights_scale >= 0.0f)) {
        bt_log_error("mkmodel: experts: %d used of %d of n_ff %d, %d shared, %d groups of which "
                     "%d used, %d dense layers of %d, scale %g: each token uses 1..n experts "
                     "within its used groups, the groups divide the experts (at most 64), "
                     "1..64 shared experts, dense layers at most all of them",
                     s->n_expert_used, s->n_expert, s->n_ff_exp, s->n_shared, s->n_group,
                     s->n_group_used, s->n_dense, s->n_layer, (double)s->weights_scale);
        return BT_ERR_ARG;
    }
    return BT_OK;
}

bt_status_t bt_synth_check(const bt_synth_shape_t *s)
{
    const bt_arch_t *a = s->arch ? bt_arch_find(s->arch, strlen(s->arch)) : NULL;
    if (a == NULL) {
        bt_log_error("mkmodel: unknown architecture '%s' (known: %s)",
                     s->arch ? s->arch : "(none)", bt_arch_names());
        return BT_ERR_ARG;
    }
    const int dims[] = {s->n_vocab, s->n_embd, s->n_layer, s->n_head, s->n_head_kv, s->n_ff,
                        s->n_ctx_train};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i] < 1 || dims[i] > (1 << 24)) {
            bt_log_error("mkmodel: every dimension must be in 1..%d, found %d", 1 << 24, dims[i]);
            return BT_ERR_ARG;
        }
    if (s->head_dim < 0 || s->head_dim > (1 << 16) || s->head_dim % 2 != 0) {
        bt_log_error("mkmodel: head dim %d must be even (rope turns pairs) and in 2..%d",
                     s->head_dim, 1 << 16);
        return BT_ERR_ARG;
    }
    if (a->mla)
        return check_mla(s);
    if ((s->head_dim == 0 && (s->n_embd % s->n_head != 0 || (s->n_embd / s->n_head) % 2 != 0)) ||
        s->n_head % s->n_head_kv != 0) {
        bt_log_error("mkmodel: n_embd %d, n_head %d, n_head_kv %d: heads must divide n_embd "
                     "(or give the head dim), kv heads must divide heads, and the head dim must "
                     "be even",
                     s->n_embd, s->n_head, s->n_head_kv);
        return BT_ERR_ARG;
    }
    const int head_dim = bt_synth_head_dim(s);
    if (s->n_rot < 0 || s->n_rot > head_dim || s->n_rot % 2 != 0) {
        bt_log_error("mkmodel: n_rot %d must be even and at most the head dim %d (0: all of it)",
                     s->n_rot, head_dim);
        return BT_ERR_ARG;
    }
    if (s->n_swa < 0 || (s->n_swa > 0 && !a->swa)) {
        bt_log_error("mkmodel: sliding window %d: architecture %s %s", s->n_swa, a->name,
                     a->swa ? "needs a window >= 0" : "has no sliding-window layers");
        return BT_ERR_ARG;
    }
    if (s->n_expert < 0 || s->n_expert > 4096 || (s->n_expert > 0 && a->moe == 0) ||
        (s->n_expert == 0 && a->dense == 0)) {
        bt_log_error("mkmodel: %d experts: architecture %s %s", s->n_expert, a->name,
                     a->moe == 0 ? "has no experts" : a->dense == 0 ? "needs 1..4096 experts"
                                                                   : "takes 0..4096 experts");
        return BT_ERR_ARG;
    }
    if (s->n_expert > 0 && a->dense != 0 && s->n_ff_exp != s->n_ff) {
        bt_log_error("mkmodel: %s's experts are feed_forward_length wide: expert n_ff %d must "
                     "equal n_ff %d", a->name, s->n_ff_exp, s->n_ff);
        return BT_ERR_ARG;
    }
    if (s->n_expert > 0 && (s->n_expert_used < 1 || s->n_expert_used > s->n_expert ||
                            s->n_ff_exp < 1 || s->n_ff_exp > (1 << 22))) {
        bt_log_error("mkmodel: %d experts used of %d, expert n_ff %d: each token uses 1..%d "
                     "experts of a hidden size in 1..%d", s->n_expert_used, s->n_expert,
                     s->n_ff_exp, s->n_expert, 1 << 22);
        return BT_ERR_ARG;
    }
    if (!(s->yarn_factor >= 0.0f) || (s->yarn_factor > 0.0f) != a->yarn ||
        (s->yarn_factor > 0.0f && s->yarn_orig < 1)) {
        bt_log_error("mkmodel: YaRN factor %g from context %d: architecture %s %s",
                     (double)s->yarn_factor, s->yarn_orig, a->name,
                     a->yarn ? "needs a factor > 0 and an original context >= 1"
                             : "has no YaRN rope");
        return BT_ERR_ARG;
    }
    if (s->rope_freqs_ctx < 0 || (s->rope_freqs_ctx > 0 && !a->rope_freqs)) {
        bt_log_error("mkmodel: rope factors for context %d: architecture %s %s",
                     s->rope_freqs_ctx, a->name,
                     a->rope_freqs ? "needs a context >= 0" : "has no rope_freqs.weight");
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

/* The tensor list being built: specs up to cap (none when t is NULL), and
 * the count and parameter total of all of them. */
typedef struct tensor_list {
    tensor_spec_t *t;
    int cap, n;
    uint64_t n_params;
} tensor_list_t;

static void add3(tensor_list_t *l, const char *name, int64_t n_in, int64_t n_out,
                 int64_t n_exp, float mean, float std, uint32_t type)
{
    if (l->n < l->cap) {
        tensor_spec_t *t = &l->t[l->n];
        *t = (tensor_spec_t){.n_in = n_in, .n_out = n_out, .n_exp = n_exp, .mean = mean,
                             .std = std, .type = type};
        snprintf(t->name, sizeof t->name, "%s", name);
    }
    l->n++;
    l->n_params += (uint64_t)n_in * (uint64_t)n_out * (uint64_t)n_exp;
}

static void add(tensor_list_t *l, const char *name, int64_t n_in, int64_t n_out, float mean,
                float std, uint32_t type)
{
    add3(l, name, n_in, n_out, 1, mean, std, type);
}

static void add_matrix(tensor_list_t *l, const char *name, int64_t n_in, int64_t n_out,
                       int64_t n_exp, uint32_t type)
{
    add3(l, name, n_in, n_out, n_exp, 0.0f, 1.0f / sqrtf((float)n_in), fitting_type(type, n_in));
}

static int64_t dim_of(const bt_synth_shape_t *s, bt_dim_t d)
{
    const int hd = bt_synth_head_dim(s);
    const bool mla = is_mla(s);
    const bt_dims_t dims = {.n_embd = s->n_embd, .n_head = s->n_head, .n_head_kv = s->n_head_kv,
                            .head_dim = hd, .n_ff = s->n_ff, .n_expert = s->n_expert,
                            .n_ff_exp = s->n_ff_exp, .d_qk = mla ? s->d_qk : hd,
                            .d_v = mla ? s->d_v : hd, .q_lora = s->q_lora,
                            .kv_lora = s->kv_lora, .n_rot = s->n_rot,
                            .n_ff_shexp = s->n_shared * s->n_ff_exp};
    return bt_dim_size(d, &dims);
}

/* The kinds of a deepseek2 layer in the order llama.cpp's converter writes them. */
static const int mla_order[] = {
    BT_LT_ATTN_NORM,  BT_LT_Q,          BT_LT_Q_A,      BT_LT_Q_A_NORM,   BT_LT_Q_B,
    BT_LT_KV_A,       BT_LT_KV_A_NORM,  BT_LT_K_B,      BT_LT_V_B,        BT_LT_O,
    BT_LT_FFN_NORM,   BT_LT_GATE,       BT_LT_UP,       BT_LT_DOWN,       BT_LT_ROUTER,
    BT_LT_EXP_PROBS_B, BT_LT_GATE_EXPS, BT_LT_UP_EXPS,  BT_LT_DOWN_EXPS,  BT_LT_GATE_SHEXP,
    BT_LT_UP_SHEXP,   BT_LT_DOWN_SHEXP};

/* The kinds layer il of s has: the row's, dense or with experts (MLA: the
 * leading dense layers dense; attn_q without q_lora; the bias with sigmoid
 * gating). */
static bt_lt_set_t synth_layer_bits(const bt_synth_shape_t *s, const bt_arch_t *a, int il)
{
    const bool moe = s->n_expert > 0 && (!a->mla || il >= s->n_dense);
    bt_lt_set_t bits = bt_arch_layer_bits(a, moe);
    if (a->mla && s->q_lora == 0)
        bits = bt_arch_plain_query(bits);
    if (a->mla && moe && s->sigmoid)
        bits |= BT_LT_BIT(BT_LT_EXP_PROBS_B);
    return bits;
}

/* The tensors in file order, as the family's row asks: token_embd,
 * rope_freqs (when asked for), each layer's tensors in bt_lt_t order,
 * output_norm, output (untied). Fills l; the shape is checked. */
static void list_tensors(const bt_synth_shape_t *s, uint32_t type, tensor_list_t *l)
{
    const bt_arch_t *a = bt_arch_find(s->arch, strlen(s->arch));
    const int64_t e = s->n_embd;
    /* families that scale the embeddings by sqrt(n_embd) get rows of
     * variance 1/n_embd, so the scaled input and a tied head's logits are
     * of unit size as elsewhere */
    const uint32_t embd_type = type == BT_TYPE_MXFP4 ? BT_TYPE_Q8_0 : type;
    add(l, "token_embd.weight", e, s->n_vocab, 0.0f, a->embd_scale ? 1.0f / sqrtf((float)e) : 1.0f,
        fitting_type(embd_type, e));
    if (s->rope_freqs_ctx > 0) {
        const int n_rot = s->n_rot > 0 ? s->n_rot : bt_synth_head_dim(s);
        add(l, "rope_freqs.weight", n_rot / 2, 1, 0.0f, 0.0f, BT_TYPE_F32);
        if (l->n <= l->cap)
            l->t[l->n - 1].rope_freqs = true;
    }
    char name[64];
    /* MXFP4 is an experts' format: the other matrices of such a file in Q8_0 */
    const uint32_t dense_type = type == BT_TYPE_MXFP4 ? BT_TYPE_Q8_0 : type;
    const int n_kinds = a->mla ? (int)(sizeof mla_order / sizeof mla_order[0]) : BT_LT_COUNT;
    for (int il = 0; il < s->n_layer; il++)
        for (int i = 0; i < n_kinds; i++) {
            const int lt = a->mla ? mla_order[i] : i;
            if (!(synth_layer_bits(s, a, il) & BT_LT_BIT(lt)))
                continue;
            const bt_lt_info_t *info = &bt_lt_info[lt];
            const int64_t n_in = dim_of(s, info->ne0), n_out = dim_of(s, info->ne1);
            snprintf(name, sizeof name, "blk.%d.%s", il, bt_arch_suffix(a, lt));
            if (lt == BT_LT_ROUTER) /* f32, as converters keep it */
                add_matrix(l, name, n_in, n_out, 1, BT_TYPE_F32);
            else if (!bt_lt_f32(info))
                add_matrix(l, name, n_in, n_out, dim_of(s, info->ne2),
                           info->ne2 == BT_DIM_EXPERT ? type : dense_type);
            else if (strstr(info->suffix, ".bias") != NULL)
                add(l, name, n_in, n_out, 0.0f, 0.1f, BT_TYPE_F32);
            else if (lt == BT_LT_SINKS) /* logits */
                add(l, name, n_in, 1, 0.0f, 1.0f, BT_TYPE_F32);
            else /* a norm */
                add(l, name, n_in, 1, 1.0f, 0.1f, BT_TYPE_F32);
        }
    add(l, "output_norm.weight", e, 1, 1.0f, 0.1f, BT_TYPE_F32);
    if (!s->tied)
        add_matrix(l, "output.weight", e, s->n_vocab, 1, embd_type);
}

uint64_t bt_synth_n_params(const bt_synth_shape_t *s)
{
    tensor_list_t l = {0};
    if (bt_synth_check(s) != BT_OK)
        return 0;
    list_tensors(s, BT_TYPE_F32, &l);
    return l.n_params;
}

/* rope_freqs.weight: the Llama 3 rule (the one that made the factors of
 * tests/data/golden/tiny-llama3-ropefreqs-golden.gguf) with factor 8, low
 * and high frequency factors 1 and 4 and original context ctx0, over the n
 * pairs of a head's 2n rotated dims: pairs whose wavelength is below
 * ctx0 / 4 keep factor 1, above ctx0 get 8, between blend smoothly. */
static void llama3_rope_factors(float *out, int64_t n, float base, int ctx0)
{
    const double factor = 8.0, low = 1.0, high = 4.0, pi = 3.14159265358979323846;
    for (int64_t i = 0; i < n; i++) {
        const double freq = pow((double)base, -(double)(2 * i) / (double)(2 * n));
        const double wavelen = 2.0 * pi / freq;
        if (wavelen < ctx0 / high) {
            out[i] = 1.0f;
        } else if (wavelen > ctx0 / low) {
            out[i] = (float)factor;
        } else {
            const double smooth = (ctx0 / wavelen - low) / (high - low);
            out[i] = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
        }
    }
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
    case BT_TYPE_MXFP4: return 38; /* MOSTLY_MXFP4_MOE */
    default: return 0;            /* ALL_F32 */
    }
}


/* "<arch>.<key>" in buf (96 bytes). */
static const char *akey_buf(const char *arch, const char *key, char *buf)
{
    snprintf(buf, 96, "%s.%s", arch, key);
    return buf;
}

/* Sets "<arch>.<key>" (u32 or f32). */
static bt_status_t set_arch_u32(bt_gguf_writer_t *w, const char *arch, const char *key, int v)
{
    char k[96];
    return bt_gguf_writer_set_u32(w, akey_buf(arch, key, k), (uint32_t)v);
}

static bt_status_t set_arch_f32(bt_gguf_writer_t *w, const char *arch, const char *key, float v)
{
    char k[96];
    return bt_gguf_writer_set_f32(w, akey_buf(arch, key, k), v);
}

/* deepseek2's keys, as llama.cpp's converter writes them (the cache row as
 * key_length, the latent as value_length). */
static bt_status_t write_mla(bt_gguf_writer_t *w, const bt_synth_shape_t *s)
{
    const char *a = s->arch;
    char k[96];
    bt_status_t st;
    if ((st = set_arch_u32(w, a, "attention.key_length", s->kv_lora + s->n_rot)) ||
        (st = set_arch_u32(w, a, "attention.value_length", s->kv_lora)) ||
        (st = set_arch_u32(w, a, "attention.key_length_mla", s->d_qk)) ||
        (st = set_arch_u32(w, a, "attention.value_length_mla", s->d_v)) ||
        (st = set_arch_u32(w, a, "attention.kv_lora_rank", s->kv_lora)) ||
        (s->q_lora > 0 && (st = set_arch_u32(w, a, "attention.q_lora_rank", s->q_lora))))
        return st;
    if (s->yarn_log_mul > 0.0f &&
        (st = set_arch_f32(w, a, "rope.scaling.yarn_log_multiplier", s->yarn_log_mul)))
        return st;
    if (s->n_expert == 0)
        return BT_OK;
    if ((st = set_arch_u32(w, a, "leading_dense_block_count", s->n_dense)) ||
        (st = set_arch_u32(w, a, "expert_shared_count", s->n_shared)) ||
        (st = set_arch_u32(w, a, "expert_gating_func", s->sigmoid ? 2 : 1)) ||
        (st = bt_gguf_writer_set_bool(w, akey_buf(a, "expert_weights_norm", k), s->weights_norm)))
        return st;
    if (s->weights_scale > 0.0f &&
        (st = set_arch_f32(w, a, "expert_weights_scale", s->weights_scale)))
        return st;
    if (s->n_group > 1 && ((st = set_arch_u32(w, a, "expert_group_count", s->n_group)) ||
                           (st = set_arch_u32(w, a, "expert_group_used_count", s->n_group_used))))
        return st;
    return BT_OK;
}

/* The tokenizer.ggml.tokens array of g, or NULL (logged). */
static const bt_gguf_kv_t *vocab_tokens(const bt_gguf_t *g)
{
    const bt_gguf_kv_t *kv = bt_gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (kv == NULL || kv->type != BT_GGUF_ARRAY || kv->arr_type != BT_GGUF_STRING ||
        kv->arr_n == 0) {
        bt_log_error("mkmodel: --vocab-from %s: no tokenizer.ggml.tokens array of strings",
                     g->path);
        return NULL;
    }
    return kv;
}

bt_status_t bt_synth_vocab_from(bt_synth_shape_t *s, const char *path)
{
    bt_gguf_t *g;
    bt_status_t st = bt_gguf_open(path, &g);
    if (st != BT_OK)
        return st;
    const bt_gguf_kv_t *kv = vocab_tokens(g);
    if (kv != NULL && kv->arr_n > (1u << 24)) {
        bt_log_error("mkmodel: --vocab-from %s: %llu tokens (at most %d)", path,
                     (unsigned long long)kv->arr_n, 1 << 24);
        kv = NULL;
    }
    if (kv != NULL) {
        s->n_vocab = (int)kv->arr_n;
        s->vocab_from = path;
    }
    bt_gguf_close(g);
    return kv != NULL ? BT_OK : BT_ERR_ARG;
}

/* Every tokenizer.* key of s->vocab_from, as it is there. */
static bt_status_t copy_tokenizer(bt_gguf_writer_t *w, const bt_synth_shape_t *s)
{
    bt_gguf_t *g;
    bt_status_t st = bt_gguf_open(s->vocab_from, &g);
    if (st != BT_OK)
        return st;
    const bt_gguf_kv_t *tokens = vocab_tokens(g);
    if (tokens == NULL || tokens->arr_n != (uint64_t)s->n_vocab) {
        if (tokens != NULL)
            bt_log_error("mkmodel: --vocab-from %s has %llu tokens, the model %d", s->vocab_from,
                         (unsigned long long)tokens->arr_n, s->n_vocab);
        st = BT_ERR_ARG;
    }
    static const char prefix[] = "tokenizer.";
    for (uint64_t i = 0; st == BT_OK && i < g->n_kv; i++) {
        const bt_gguf_kv_t *kv = &g->kv[i];
        if (kv->key.len < sizeof prefix - 1 || memcmp(kv->key.ptr, prefix, sizeof prefix - 1))
            continue;
        char *key = strndup(kv->key.ptr, kv->key.len);
        const uint8_t *raw;
        const uint64_t n = bt_gguf_kv_raw(kv, &raw);
        st = key != NULL ? bt_gguf_writer_set_raw(w, key, kv->type, raw, n) : BT_ERR_NOMEM;
        free(key);
    }
    bt_gguf_close(g);
    return st;
}

/* The keys, in the order llama files have always had them; key_length,
 * value_length and sliding_window only when the shape has them, so a llama
 * file without them is the same bytes as before they existed. */
static bt_status_t write_metadata(bt_gguf_writer_t *w, const bt_synth_shape_t *s, uint32_t type,
                                  uint64_t seed)
{
    char name[96];
    snprintf(name, sizeof name, "baton synthetic %s %s seed %llu", s->name,
             bt_type_info(type)->name, (unsigned long long)seed);
    const char *a = s->arch;
    char k[96];
    const int n_rot = s->n_rot > 0 ? s->n_rot : bt_synth_head_dim(s);
    bt_status_t st;
    if ((st = bt_gguf_writer_set_str(w, "general.architecture", a)) ||
        (st = bt_gguf_writer_set_str(w, "general.name", name)) ||
        (st = bt_gguf_writer_set_u32(w, "general.file_type", file_type_of(type))) ||
        (st = set_arch_u32(w, a, "context_length", s->n_ctx_train)) ||
        (st = set_arch_u32(w, a, "embedding_length", s->n_embd)) ||
        (st = set_arch_u32(w, a, "block_count", s->n_layer)) ||
        (st = set_arch_u32(w, a, "feed_forward_length", s->n_ff)) ||
        (st = set_arch_u32(w, a, "attention.head_count", s->n_head)) ||
        (st = set_arch_u32(w, a, "attention.head_count_kv", s->n_head_kv)))
        return st;
    if (s->n_expert > 0 && ((st = set_arch_u32(w, a, "expert_count", s->n_expert)) ||
                            (st = set_arch_u32(w, a, "expert_used_count", s->n_expert_used))))
        return st;
    /* families with a dense FFN size their experts by feed_forward_length */
    const bool mla = is_mla(s);
    const bool own_size = s->n_expert > 0 && (bt_arch_find(a, strlen(a))->dense == 0 || mla);
    if (own_size && (st = set_arch_u32(w, a, "expert_feed_forward_length", s->n_ff_exp)))
        return st;
    if (s->head_dim > 0 && ((st = set_arch_u32(w, a, "attention.key_length", s->head_dim)) ||
                            (st = set_arch_u32(w, a, "attention.value_length", s->head_dim))))
        return st;
    if (mla && (st = write_mla(w, s)))
        return st;
    if (s->n_swa > 0 && (st = set_arch_u32(w, a, "attention.sliding_window", s->n_swa)))
        return st;
    if (s->yarn_factor > 0.0f &&
        ((st = bt_gguf_writer_set_str(w, akey_buf(a, "rope.scaling.type", k), "yarn")) ||
         (st = set_arch_f32(w, a, "rope.scaling.factor", s->yarn_factor)) ||
         (st = set_arch_u32(w, a, "rope.scaling.original_context_length", s->yarn_orig))))
        return st;
    if ((st = set_arch_u32(w, a, "rope.dimension_count", n_rot)) ||
        (st = set_arch_f32(w, a, "rope.freq_base", s->rope_base)) ||
        (st = set_arch_f32(w, a, "attention.layer_norm_rms_epsilon", s->rms_eps)) ||
        (st = set_arch_u32(w, a, "vocab_size", s->n_vocab)) ||
        (st = s->vocab_from != NULL ? copy_tokenizer(w, s)
                                    : bt_gguf_writer_set_str(w, "tokenizer.ggml.model", "none")) ||
        (st = bt_gguf_writer_set_str(w, "baton.synth.shape", s->name)) ||
        (st = bt_gguf_writer_set_u32(w, "baton.synth.seed_lo", (uint32_t)seed)) ||
        (st = bt_gguf_writer_set_u32(w, "baton.synth.seed_hi", (uint32_t)(seed >> 32))))
        return st;
    return BT_OK;
}

/* Generates one tensor row by row into buf (its n_bytes) and writes it. */
static bt_status_t write_tensor(bt_gguf_writer_t *w, const bt_synth_shape_t *s,
                                const tensor_spec_t *t, uint64_t seed, float *row, uint8_t *buf)
{
    const bt_type_info_t *ti = bt_type_info(t->type);
    uint64_t row_bytes;
    bt_type_row_bytes(t->type, (uint64_t)t->n_in, &row_bytes);
    bt_rng_t r;
    rng_init(&r, seed, t->name);
    const int64_t rows = t->n_out * t->n_exp;
    for (int64_t i = 0; i < rows; i++) {
        if (t->rope_freqs)
            llama3_rope_factors(row, t->n_in, s->rope_base, s->rope_freqs_ctx);
        else
            rng_fill(&r, row, t->n_in, t->mean, t->std);
        ti->from_float(buf + (size_t)i * row_bytes, row, t->n_in);
    }
    return bt_gguf_writer_write_tensor(w, buf, row_bytes * (uint64_t)rows);
}

bt_status_t bt_synth_write(const char *path, const bt_synth_shape_t *s, uint32_t type,
                           uint64_t seed)
{
    if (!bt_type_supported(type)) {
        bt_log_error("mkmodel: type %u is not supported for writing", type);
        return BT_ERR_ARG;
    }
    bt_status_t st = bt_synth_check(s);
    if (st != BT_OK)
        return st;
    tensor_list_t l = {0};
    list_tensors(s, type, &l);
    const int n = l.n;
    tensor_spec_t *specs = calloc((size_t)n, sizeof *specs);
    bt_gguf_writer_t *w = NULL;
    float *row = NULL;
    uint8_t *buf = NULL;
    if (specs == NULL) {
        st = BT_ERR_NOMEM;
        goto fail;
    }
    l = (tensor_list_t){.t = specs, .cap = n};
    list_tensors(s, type, &l);
    int64_t max_in = 0, max_elems = 0;
    for (int i = 0; i < n; i++) {
        max_in = specs[i].n_in > max_in ? specs[i].n_in : max_in;
        int64_t elems = specs[i].n_in * specs[i].n_out * specs[i].n_exp;
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
        uint64_t ne[3] = {(uint64_t)specs[i].n_in, (uint64_t)specs[i].n_out,
                          (uint64_t)specs[i].n_exp};
        const uint32_t n_dims = specs[i].n_exp > 1 ? 3 : specs[i].n_out == 1 ? 1 : 2;
        if ((st = bt_gguf_writer_add_tensor(w, specs[i].name, specs[i].type, n_dims, ne)))
            goto fail;
    }
    if ((st = bt_gguf_writer_begin(w, path)))
        goto fail;
    for (int i = 0; i < n; i++)
        if ((st = write_tensor(w, s, &specs[i], seed, row, buf)))
            goto fail;
    st = bt_gguf_writer_finish(w);

fail:
    bt_gguf_writer_free(w);
    free(buf);
    free(row);
    free(specs);
    return st;
}
