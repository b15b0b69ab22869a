/* arch.c: the architecture table (arch.h). */
#include "arch.h"

#include <string.h>

const bt_lt_info_t bt_lt_info[BT_LT_COUNT] = {
    [BT_LT_ATTN_NORM] = {"attn_norm.weight", BT_DIM_EMBD, BT_DIM_ONE},
    [BT_LT_Q] = {"attn_q.weight", BT_DIM_EMBD, BT_DIM_QK},
    [BT_LT_K] = {"attn_k.weight", BT_DIM_EMBD, BT_DIM_KV},
    [BT_LT_V] = {"attn_v.weight", BT_DIM_EMBD, BT_DIM_KV},
    [BT_LT_Q_BIAS] = {"attn_q.bias", BT_DIM_Q, BT_DIM_ONE},
    [BT_LT_K_BIAS] = {"attn_k.bias", BT_DIM_KV, BT_DIM_ONE},
    [BT_LT_V_BIAS] = {"attn_v.bias", BT_DIM_KV, BT_DIM_ONE},
    [BT_LT_Q_NORM] = {"attn_q_norm.weight", BT_DIM_HEAD, BT_DIM_ONE},
    [BT_LT_K_NORM] = {"attn_k_norm.weight", BT_DIM_HEAD, BT_DIM_ONE},
    [BT_LT_O] = {"attn_output.weight", BT_DIM_O, BT_DIM_EMBD},
    [BT_LT_O_BIAS] = {"attn_output.bias", BT_DIM_EMBD, BT_DIM_ONE},
    [BT_LT_SINKS] = {"attn_sinks.weight", BT_DIM_NHEAD, BT_DIM_ONE},
    [BT_LT_POST_ATTN_NORM] = {"post_attention_norm.weight", BT_DIM_EMBD, BT_DIM_ONE},
    [BT_LT_FFN_NORM] = {"ffn_norm.weight", BT_DIM_EMBD, BT_DIM_ONE},
    [BT_LT_GATE] = {"ffn_gate.weight", BT_DIM_EMBD, BT_DIM_FF},
    [BT_LT_UP] = {"ffn_up.weight", BT_DIM_EMBD, BT_DIM_FF},
    [BT_LT_DOWN] = {"ffn_down.weight", BT_DIM_FF, BT_DIM_EMBD},
    [BT_LT_ROUTER] = {"ffn_gate_inp.weight", BT_DIM_EMBD, BT_DIM_EXPERT},
    [BT_LT_ROUTER_BIAS] = {"ffn_gate_inp.bias", BT_DIM_EXPERT, BT_DIM_ONE},
    [BT_LT_GATE_EXPS] = {"ffn_gate_exps.weight", BT_DIM_EMBD, BT_DIM_FF_EXP, BT_DIM_EXPERT},
    [BT_LT_UP_EXPS] = {"ffn_up_exps.weight", BT_DIM_EMBD, BT_DIM_FF_EXP, BT_DIM_EXPERT},
    [BT_LT_DOWN_EXPS] = {"ffn_down_exps.weight", BT_DIM_FF_EXP, BT_DIM_EMBD, BT_DIM_EXPERT},
    /* per-expert biases: one f32 row per expert */
    [BT_LT_GATE_EXPS_BIAS] = {"ffn_gate_exps.bias", BT_DIM_FF_EXP, BT_DIM_EXPERT, .f32 = true},
    [BT_LT_UP_EXPS_BIAS] = {"ffn_up_exps.bias", BT_DIM_FF_EXP, BT_DIM_EXPERT, .f32 = true},
    [BT_LT_DOWN_EXPS_BIAS] = {"ffn_down_exps.bias", BT_DIM_EMBD, BT_DIM_EXPERT, .f32 = true},
    [BT_LT_POST_FFN_NORM] = {"post_ffw_norm.weight", BT_DIM_EMBD, BT_DIM_ONE},
    [BT_LT_Q_A] = {"attn_q_a.weight", BT_DIM_EMBD, BT_DIM_Q_LORA},
    [BT_LT_Q_A_NORM] = {"attn_q_a_norm.weight", BT_DIM_Q_LORA, BT_DIM_ONE},
    [BT_LT_Q_B] = {"attn_q_b.weight", BT_DIM_Q_LORA, BT_DIM_QK},
    [BT_LT_KV_A] = {"attn_kv_a_mqa.weight", BT_DIM_EMBD, BT_DIM_KV},
    [BT_LT_KV_A_NORM] = {"attn_kv_a_norm.weight", BT_DIM_KV_LORA, BT_DIM_ONE},
    [BT_LT_K_B] = {"attn_k_b.weight", BT_DIM_NOPE, BT_DIM_KV_LORA, BT_DIM_NHEAD},
    [BT_LT_V_B] = {"attn_v_b.weight", BT_DIM_KV_LORA, BT_DIM_DV, BT_DIM_NHEAD},
    [BT_LT_GATE_SHEXP] = {"ffn_gate_shexp.weight", BT_DIM_EMBD, BT_DIM_FF_SHEXP},
    [BT_LT_UP_SHEXP] = {"ffn_up_shexp.weight", BT_DIM_EMBD, BT_DIM_FF_SHEXP},
    [BT_LT_DOWN_SHEXP] = {"ffn_down_shexp.weight", BT_DIM_FF_SHEXP, BT_DIM_EMBD},
    [BT_LT_EXP_PROBS_B] = {"exp_probs_b.bias", BT_DIM_EXPERT, BT_DIM_ONE},
};

int64_t bt_dim_size(bt_dim_t d, const bt_dims_t *s)
{
    switch (d) {
    case BT_DIM_EMBD: return s->n_embd;
    case BT_DIM_Q: return (int64_t)s->n_head * s->head_dim;
    case BT_DIM_KV: return (int64_t)s->n_head_kv * s->head_dim;
    case BT_DIM_FF: return s->n_ff;
    case BT_DIM_HEAD: return s->head_dim;
    case BT_DIM_NHEAD: return s->n_head;
    case BT_DIM_EXPERT: return s->n_expert;
    case BT_DIM_FF_EXP: return s->n_ff_exp;
    case BT_DIM_O: return (int64_t)s->n_head * s->d_v;
    case BT_DIM_QK: return (int64_t)s->n_head * s->d_qk;
    case BT_DIM_Q_LORA: return s->q_lora;
    case BT_DIM_KV_LORA: return s->kv_lora;
    case BT_DIM_NOPE: return s->d_qk - s->n_rot;
    case BT_DIM_DV: return s->d_v;
    case BT_DIM_FF_SHEXP: return s->n_ff_shexp;
    case BT_DIM_ONE: break;
    }
    return 1;
}

/* The llama block: pre-norms, q/k/v/o; its FFN gated, dense or experts. */
#define LLAMA_LAYER                                                                           \
    (BT_LT_BIT(BT_LT_ATTN_NORM) | BT_LT_BIT(BT_LT_Q) | BT_LT_BIT(BT_LT_K) | BT_LT_BIT(BT_LT_V) | \
     BT_LT_BIT(BT_LT_O) | BT_LT_BIT(BT_LT_FFN_NORM))
#define DENSE (BT_LT_BIT(BT_LT_GATE) | BT_LT_BIT(BT_LT_UP) | BT_LT_BIT(BT_LT_DOWN))
#define EXPERTS                                                                                \
    (BT_LT_BIT(BT_LT_ROUTER) | BT_LT_BIT(BT_LT_GATE_EXPS) | BT_LT_BIT(BT_LT_UP_EXPS) |          \
     BT_LT_BIT(BT_LT_DOWN_EXPS))
#define QKV_BIAS (BT_LT_BIT(BT_LT_Q_BIAS) | BT_LT_BIT(BT_LT_K_BIAS) | BT_LT_BIT(BT_LT_V_BIAS))
#define QK_NORM (BT_LT_BIT(BT_LT_Q_NORM) | BT_LT_BIT(BT_LT_K_NORM))
#define POST_NORMS (BT_LT_BIT(BT_LT_POST_ATTN_NORM) | BT_LT_BIT(BT_LT_POST_FFN_NORM))

static const bt_arch_t archs[] = {
    /* llama (and Mistral, SmolLM, Llama 3.x; Mixtral with experts): optional q/k/v biases
     * as llama.cpp allows */
    {.name = "llama", .layer = LLAMA_LAYER, .layer_optional = QKV_BIAS, .dense = DENSE,
     .moe = EXPERTS, .rope = BT_ROPE_NORM, .act = BT_ACT_SILU, .rope_freqs = true},
    {.name = "qwen2", .layer = LLAMA_LAYER | QKV_BIAS, .dense = DENSE, .rope = BT_ROPE_NEOX,
     .act = BT_ACT_SILU},
    {.name = "qwen3", .layer = LLAMA_LAYER | QK_NORM, .dense = DENSE, .rope = BT_ROPE_NEOX,
     .act = BT_ACT_SILU},
    {.name = "qwen3moe", .layer = LLAMA_LAYER | QK_NORM, .moe = EXPERTS, .rope = BT_ROPE_NEOX,
     .act = BT_ACT_SILU},
    {.name = "gemma3", .layer = LLAMA_LAYER | QK_NORM | POST_NORMS, .dense = DENSE,
     .rope = BT_ROPE_NEOX, .act = BT_ACT_GELU_TANH, .embd_scale = true, .swa = true,
     .swa_pattern = 6, .rope_base_swa = 10000.0f, .softcap = true, .swa_rope_unscaled = true},
    /* gpt-oss: biases everywhere, attention sinks, every other layer a sliding window
     * (the same rope), experts with biases and a clamped SwiGLU, YaRN rope; the norm
     * before the experts is stored as post_attention_norm */
    {.name = "gpt-oss",
     .layer = LLAMA_LAYER | QKV_BIAS | BT_LT_BIT(BT_LT_O_BIAS) | BT_LT_BIT(BT_LT_SINKS),
     .moe = EXPERTS | BT_LT_BIT(BT_LT_ROUTER_BIAS) | BT_LT_BIT(BT_LT_GATE_EXPS_BIAS) |
            BT_LT_BIT(BT_LT_UP_EXPS_BIAS) | BT_LT_BIT(BT_LT_DOWN_EXPS_BIAS),
     .rope = BT_ROPE_NEOX, .act = BT_ACT_SWIGLU_OAI, .swa = true, .swa_pattern = 2,
     .yarn = true, .ffn_norm = "post_attention_norm.weight"},
    /* deepseek2 (DeepSeek-V2, V2-Lite, V3, R1, Kimi K2): Multi-head Latent Attention, the
     * first leading_dense_block_count layers dense, the others routed experts plus
     * shared ones; NORM rope on the rope part; YaRN. A file without q_lora_rank (V2-Lite)
     * has attn_q instead of the low-rank pair (model.c) */
    {.name = "deepseek2",
     .layer = BT_LT_BIT(BT_LT_ATTN_NORM) | BT_LT_BIT(BT_LT_Q_A) | BT_LT_BIT(BT_LT_Q_A_NORM) |
              BT_LT_BIT(BT_LT_Q_B) | BT_LT_BIT(BT_LT_KV_A) | BT_LT_BIT(BT_LT_KV_A_NORM) |
              BT_LT_BIT(BT_LT_K_B) | BT_LT_BIT(BT_LT_V_B) | BT_LT_BIT(BT_LT_O) |
              BT_LT_BIT(BT_LT_FFN_NORM),
     .dense = DENSE,
     .moe = EXPERTS | BT_LT_BIT(BT_LT_GATE_SHEXP) | BT_LT_BIT(BT_LT_UP_SHEXP) |
            BT_LT_BIT(BT_LT_DOWN_SHEXP),
     .moe_optional = BT_LT_BIT(BT_LT_EXP_PROBS_B), .mla = true, .rope = BT_ROPE_NORM,
     .act = BT_ACT_SILU, .yarn = true},
};

const bt_arch_t *bt_arch_find(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strlen(archs[i].name) == len && memcmp(archs[i].name, name, len) == 0)
            return &archs[i];
    return NULL;
}

const char *bt_arch_names(void)
{
    return "llama, qwen2, qwen3, qwen3moe, gemma3, gpt-oss, deepseek2";
}

const char *bt_arch_suffix(const bt_arch_t *a, int kind)
{
    return kind == BT_LT_FFN_NORM && a->ffn_norm != NULL ? a->ffn_norm : bt_lt_info[kind].suffix;
}

bt_lt_set_t bt_arch_layer_bits(const bt_arch_t *a, bool experts)
{
    return a->layer | (experts ? a->moe : a->dense);
}

bt_lt_set_t bt_arch_plain_query(bt_lt_set_t bits)
{
    const bt_lt_set_t pair = BT_LT_BIT(BT_LT_Q_A) | BT_LT_BIT(BT_LT_Q_A_NORM) | BT_LT_BIT(BT_LT_Q_B);
    return (bits & ~pair) | BT_LT_BIT(BT_LT_Q);
}
