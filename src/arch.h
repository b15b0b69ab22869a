/*
 * arch.h: what a GGUF general.architecture means, as one table row per
 * family.
 *
 * A row says which tensors a layer has (required and optional; a dense
 * feed-forward block, or router and experts: mixture of experts), how the
 * rotary embedding pairs dimensions, which activation gates the FFN, and
 * which extras the family uses: rope frequency factors, sliding-window
 * layers with their own rope base, embedding scaling, final logit
 * softcapping. The model binding (model.c) reads hyperparameters and binds
 * tensors from it; the forward pass (forward.c) applies whatever the bound
 * layer holds (a bias, a q/k norm, a post-norm) and the row's choices. The
 * kernels know none of this.
 *
 * Adding a family: a row here, and the kernels it needs that do not exist.
 */
#ifndef BT_ARCH_H
#define BT_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Per-layer tensors, named blk.N.<suffix> in GGUF. */
typedef enum bt_lt {
    BT_LT_ATTN_NORM,      /* pre-attention RMS norm [n_embd] */
    BT_LT_Q,              /* [n_embd -> n_head * head_dim] */
    BT_LT_K,              /* [n_embd -> n_head_kv * head_dim] */
    BT_LT_V,              /* [n_embd -> n_head_kv * head_dim] */
    BT_LT_Q_BIAS,         /* added after the projection, before rope */
    BT_LT_K_BIAS,
    BT_LT_V_BIAS,
    BT_LT_Q_NORM,         /* RMS norm of each query head [head_dim], after bias, before rope */
    BT_LT_K_NORM,         /* the same for each key head */
    BT_LT_O,              /* [n_head * head_dim -> n_embd] */
    BT_LT_O_BIAS,         /* [n_embd] */
    BT_LT_SINKS,          /* [n_head]: one attention-sink logit per query head */
    BT_LT_POST_ATTN_NORM, /* RMS norm of the attention output before the residual add */
    BT_LT_FFN_NORM,       /* pre-FFN RMS norm */
    BT_LT_GATE,           /* [n_embd -> n_ff] */
    BT_LT_UP,             /* [n_embd -> n_ff] */
    BT_LT_DOWN,           /* [n_ff -> n_embd] */
    BT_LT_ROUTER,         /* [n_embd -> n_expert]: one logit per expert */
    BT_LT_ROUTER_BIAS,    /* [n_expert] */
    BT_LT_GATE_EXPS,      /* n_expert matrices [n_embd -> n_ff_exp], one after another */
    BT_LT_UP_EXPS,        /* n_expert matrices [n_embd -> n_ff_exp] */
    BT_LT_DOWN_EXPS,      /* n_expert matrices [n_ff_exp -> n_embd] */
    BT_LT_GATE_EXPS_BIAS, /* [n_ff_exp] per expert, n_expert rows */
    BT_LT_UP_EXPS_BIAS,
    BT_LT_DOWN_EXPS_BIAS, /* [n_embd] per expert */
    BT_LT_POST_FFN_NORM,  /* RMS norm of the FFN output before the residual add */
    /* Multi-head Latent Attention (deepseek2): the query through a low-rank
     * pair with a norm between (or BT_LT_Q where q_lora_rank is 0), the
     * compressed latent and the shared rope key, each head's up-projections */
    BT_LT_Q_A,            /* [n_embd -> q_lora] */
    BT_LT_Q_A_NORM,       /* [q_lora] */
    BT_LT_Q_B,            /* [q_lora -> n_head * d_qk] */
    BT_LT_KV_A,           /* attn_kv_a_mqa [n_embd -> kv_lora + n_rot] */
    BT_LT_KV_A_NORM,      /* [kv_lora] */
    BT_LT_K_B,            /* n_head matrices [nope -> kv_lora] (a head's key up-projection,
                           * transposed: what the query is multiplied by) */
    BT_LT_V_B,            /* n_head matrices [kv_lora -> d_v] */
    /* shared experts (deepseek2): a dense FFN every token of an expert layer runs */
    BT_LT_GATE_SHEXP,     /* [n_embd -> n_ff_shexp] */
    BT_LT_UP_SHEXP,
    BT_LT_DOWN_SHEXP,     /* [n_ff_shexp -> n_embd] */
    BT_LT_EXP_PROBS_B,    /* [n_expert]: added to the scores to choose experts, never to weigh */
    BT_LT_COUNT
} bt_lt_t;

#define BT_LT_BIT(t) (UINT64_C(1) << (t))

/* A set of per-layer kinds. */
typedef uint64_t bt_lt_set_t;

/* A dimension of a tensor, in hyperparameters. */
typedef enum bt_dim {
    BT_DIM_ONE,  /* a vector's second dimension */
    BT_DIM_EMBD, /* n_embd */
    BT_DIM_Q,    /* n_head * head_dim */
    BT_DIM_KV,   /* n_head_kv * head_dim */
    BT_DIM_FF,   /* n_ff */
    BT_DIM_HEAD, /* head_dim */
    BT_DIM_NHEAD, /* n_head */
    BT_DIM_EXPERT, /* n_expert */
    BT_DIM_FF_EXP, /* n_ff_exp: the hidden size of one expert */
    BT_DIM_O,      /* n_head * d_v: the heads' outputs (n_head * head_dim but for MLA) */
    BT_DIM_QK,     /* n_head * d_qk: the query projection (MLA: nope + rope a head) */
    BT_DIM_Q_LORA, /* q_lora_rank */
    BT_DIM_KV_LORA, /* kv_lora_rank */
    BT_DIM_NOPE,   /* the un-rotated part of an MLA key: d_qk - n_rot */
    BT_DIM_DV,     /* d_v: an MLA head's value size */
    BT_DIM_FF_SHEXP, /* the shared experts' hidden size */
} bt_dim_t;

typedef struct bt_lt_info {
    const char *suffix;     /* "attn_q.weight" */
    bt_dim_t ne0, ne1, ne2; /* GGUF shape: ne0 contiguous (a matrix's n_in), ne1 its n_out,
                             * ne2 the experts of a 3-D tensor (else BT_DIM_ONE) */
    bool f32;               /* f32 values bound as an array (vectors: ne1 BT_DIM_ONE, and
                             * the per-expert biases), not a weight matrix */
} bt_lt_info_t;

/* Whether kind is an f32 array rather than a weight matrix. */
static inline bool bt_lt_f32(const bt_lt_info_t *li) { return li->f32 || li->ne1 == BT_DIM_ONE; }

/* The sizes the dimensions stand for. */
typedef struct bt_dims {
    int n_embd, n_head, n_head_kv, head_dim, n_ff, n_expert, n_ff_exp;
    int d_qk, d_v;         /* a head's query/key and value sizes (head_dim but for MLA) */
    int q_lora, kv_lora, n_rot, n_ff_shexp; /* MLA and shared experts (0: none) */
} bt_dims_t;

/* The size of dimension d. */
int64_t bt_dim_size(bt_dim_t d, const bt_dims_t *s);

/* Shape and name of each per-layer tensor, indexed by bt_lt_t. A tensor
 * whose ne1 is BT_DIM_ONE is an f32 vector; every other is a matrix. */
extern const bt_lt_info_t bt_lt_info[BT_LT_COUNT];

typedef enum bt_rope_pairing {
    BT_ROPE_NORM, /* (x[2i], x[2i+1]): llama */
    BT_ROPE_NEOX, /* (x[i], x[i + n_rot/2]): qwen2, qwen3, gemma3 */
} bt_rope_pairing_t;

typedef enum bt_act {
    BT_ACT_SILU,      /* down(silu(gate) * up) */
    BT_ACT_GELU_TANH, /* down(gelu(gate) * up), the tanh form of GELU */
    BT_ACT_SWIGLU_OAI, /* gpt-oss: g = min(gate, 7), u = clamp(up, -7, 7),
                        * down(g sigmoid(1.702 g) (u + 1)) */
} bt_act_t;

typedef struct bt_arch {
    const char *name;        /* general.architecture; also the prefix of its keys */
    bt_lt_set_t layer;          /* BT_LT_BIT set every layer must have, FFN matrices aside */
    bt_lt_set_t layer_optional; /* the bits a layer may have */
    bt_lt_set_t dense;       /* the FFN's bits in a file without experts, and in the leading
                              * dense layers of one with (0: experts needed) */
    bt_lt_set_t moe;         /* the FFN's bits in a file with experts (0: none allowed) */
    bt_lt_set_t moe_optional; /* the bits an expert layer may have */
    bool mla;                /* Multi-head Latent Attention, shared experts, grouped and
                              * biased routing, leading dense layers (deepseek2): the
                              * attention tensors are the BT_LT_Q_A.. kinds, read with the
                              * keys of model.c's read_mla */
    bt_rope_pairing_t rope;
    bt_act_t act;
    bool rope_freqs;         /* may carry rope_freqs.weight: one factor per rotated pair,
                              * dividing that pair's angle (Llama 3.1 style) */
    bool embd_scale;         /* token embeddings are multiplied by sqrt(n_embd) */
    bool swa;                /* reads attention.sliding_window (+ _pattern): local layers
                              * see the last n_swa positions and use rope.freq_base_swa */
    int swa_pattern;         /* default pattern N: layer L is local iff L % N < N - 1 */
    float rope_base_swa;     /* local layers' base when rope.freq_base_swa is absent */
    bool softcap;            /* reads final_logit_softcapping */
    bool swa_rope_unscaled;  /* rope scaling applies to the global layers only (gemma3) */
    bool yarn;               /* rope.scaling.type "yarn" is implemented (gpt-oss) */
    const char *ffn_norm;    /* the pre-FFN norm's suffix when not "ffn_norm.weight" */
} bt_arch_t;

/* The GGUF suffix of per-layer tensor kind in family a. */
const char *bt_arch_suffix(const bt_arch_t *a, int kind);

/* The row of general.architecture = name (len bytes), or NULL. */
const bt_arch_t *bt_arch_find(const char *name, size_t len);

/* The supported architectures' names, comma-separated. */
const char *bt_arch_names(void);

/* The bits a layer of a must have with experts or without (the optional
 * ones are a->layer_optional, and a->moe_optional with experts). */
bt_lt_set_t bt_arch_layer_bits(const bt_arch_t *a, bool experts);

/* bits with MLA's plain query (attn_q) in place of its low-rank pair: a
 * file without attention.q_lora_rank (DeepSeek-V2-Lite). */
bt_lt_set_t bt_arch_plain_query(bt_lt_set_t bits);

#endif /* BT_ARCH_H */
