/*
 * synth.h: synthetic models of every family in the architecture table
 * (arch.h) with seeded random weights.
 *
 * Named shapes give the dimensions of real models so benchmarks run with no
 * download; each has its family (general.architecture), and any field can
 * be overridden before writing. A file holds every per-layer tensor its
 * family's row requires (arch.h's `layer` bits, shapes from bt_lt_info),
 * with `<arch>.` keys. Weights are uniform with the variance of
 * N(0, 1/fan_in) for matrices, N(0, 1) for token embeddings (N(0, 1/n_embd)
 * in families that scale them by sqrt(n_embd)), 1 + N(0, 0.01) for norm
 * weights and N(0, 0.01) for biases, so activations stay finite through
 * every layer. Each tensor has its own random stream derived from (seed,
 * tensor name), so the same seed gives the same weights for any type, and a
 * file is the same bytes every time.
 */
#ifndef BT_SYNTH_H
#define BT_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"

typedef struct bt_synth_shape {
    const char *name;
    const char *arch; /* general.architecture, a row of arch.h; the prefix of the keys */
    int n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx_train;
    float rope_base, rms_eps;
    bool tied; /* no output.weight: the head reuses token_embd */
    int n_rot; /* <arch>.rope.dimension_count: rotated dims per head; 0: the head dim */
    int head_dim; /* <arch>.attention.key_length = value_length; 0: n_embd / n_head, and the
                   * keys are written only by families that need them (gemma3) */
    int n_swa; /* <arch>.attention.sliding_window (families with arch.h's swa); 0: none */
    int n_expert, n_expert_used; /* > 0: experts instead of a dense FFN (families with
                                  * arch.h's moe), each token through n_expert_used */
    int n_ff_exp;       /* an expert's hidden size (<arch>.expert_feed_forward_length) */
    float yarn_factor;  /* > 0: YaRN rope scaling by this factor (families with arch.h's yarn) */
    int yarn_orig;      /* ... from this original context */
    int rope_freqs_ctx; /* > 0: a rope_freqs.weight tensor of Llama 3 factors (factor 8,
                         * low/high frequency factors 1 and 4) for this original context;
                         * families with arch.h's rope_freqs only */
    /* deepseek2 (arch.h's mla): Multi-head Latent Attention (one kv head of kv_lora +
     * n_rot, the cache row) and DeepSeek's experts */
    int q_lora, kv_lora;   /* ranks; q_lora 0: attn_q instead of the pair (V2-Lite) */
    int d_qk, d_v;         /* a head's query/key size (nope + n_rot) and value size */
    int n_dense;           /* leading dense layers, n_ff wide */
    int n_shared;          /* shared experts, n_ff_exp wide each */
    int n_group, n_group_used; /* expert groups (1: none) and those a token's come from */
    bool sigmoid;          /* sigmoid gating with the exp_probs_b bias, else softmax */
    bool weights_norm;     /* expert_weights_norm */
    float weights_scale;   /* expert_weights_scale (0: not written) */
    float yarn_log_mul;    /* rope.scaling.yarn_log_multiplier (0: not written) */
    const char *vocab_from; /* NULL, or a GGUF whose tokenizer.* keys are copied
                             * (bt_synth_vocab_from); else tokenizer.ggml.model "none" */
} bt_synth_shape_t;

/* Copies the named shape ("tiny", "llama3-8b", "qwen3-0.6b", ...) into *out,
 * in its own family; BT_ERR_ARG with a message listing the names when
 * unknown. */
bt_status_t bt_synth_shape(const char *name, bt_synth_shape_t *out);

/* The same in family arch (NULL: the shape's own). A shape with a row for
 * arch ("tiny" has one per family) takes that row; any other takes its own
 * row's dimensions with the family's extras (gemma3: a sliding window of
 * 512) and without the ones the family lacks. BT_ERR_ARG with a message
 * listing the names when the shape or the family is unknown. */
bt_status_t bt_synth_shape_arch(const char *name, const char *arch, bt_synth_shape_t *out);

/* Names of the shapes, comma-separated, for usage lines. */
const char *bt_synth_shape_names(void);

/* The head dim of a shape: head_dim, or n_embd / n_head when that is 0;
 * MLA's: the cache row, kv_lora + n_rot. */
int bt_synth_head_dim(const bt_synth_shape_t *s);

/* Parameter count of a shape: every element of every tensor the writer
 * would write (the same list, so it holds for every family). */
uint64_t bt_synth_n_params(const bt_synth_shape_t *s);

/* BT_OK when the shape can be written: a known family, positive dims, kv
 * heads dividing heads, an even head dim, the extras only in families that
 * have them. Otherwise logs the value that is wrong and returns BT_ERR_ARG. */
bt_status_t bt_synth_check(const bt_synth_shape_t *s);

/* Takes the vocabulary of the GGUF at path: s->n_vocab becomes its token
 * count and bt_synth_write copies its tokenizer.* keys (its chat template
 * among them), so other programs can tokenize for the synthetic model.
 * BT_ERR_ARG (logged) when path has no tokenizer.ggml.tokens array. */
bt_status_t bt_synth_vocab_from(bt_synth_shape_t *s, const char *path);

/* Writes the model to path with every matrix in `type` (vectors stay f32).
 * Checks the shape first (bt_synth_check). */
bt_status_t bt_synth_write(const char *path, const bt_synth_shape_t *s, uint32_t type,
                           uint64_t seed);

#endif /* BT_SYNTH_H */
