/*
 * model.h: a llama-family model's hyperparameters and the tensors of ONE
 * layer range, bound from a GGUF file.
 *
 * bt_model_load() opens the file (bt_gguf_open validates it), finds its
 * architecture's row (arch.h), reads the <arch>.* hyperparameters, checks
 * every tensor and key of the file against the row (strict: a tensor the
 * family does not use, a key that would change the math and is not
 * implemented, a missing or misshapen tensor of ANY layer are refused at
 * open, with one message naming it), and binds the weights a stage needs: layers
 * [first, last), plus the token embeddings when with_embed, plus the final
 * norm and output head when with_head (the head is token_embd.weight when
 * output.weight is absent: tied embeddings). Tensors outside that set are
 * never touched, so their pages are never read. Every bound tensor's type
 * and shape is checked; a mismatch is BT_ERR_FORMAT naming the tensor, the
 * expected and the found shape; an unsupported type is BT_ERR_UNSUPPORTED.
 */
#ifndef BT_MODEL_H
#define BT_MODEL_H

#include <stdbool.h>

#include "common.h"
#include "arch.h"
#include "gguf.h"
#include "kernels/kernels.h"

typedef struct bt_hparams {
    const bt_arch_t *arch; /* general.architecture's row */
    int n_vocab;
    int n_embd;
    int n_layer;
    int n_head;
    int n_head_kv;
    int head_dim; /* n_embd / n_head unless <arch>.attention.key_length says */
    int n_ff;         /* the dense FFN's hidden size (0: none, experts only) */
    int n_expert;     /* <arch>.expert_count: experts per layer (0: a dense FFN) */
    int n_expert_used;/* <arch>.expert_used_count: experts each token goes through */
    int n_ff_exp;     /* the hidden size of one expert */
    int n_rot;    /* <arch>.rope.dimension_count, default head_dim */
    int n_ctx_train;
    float rms_eps;
    float rope_base;       /* <arch>.rope.freq_base (global layers) */
    float rope_base_swa;   /* local (sliding-window) layers' base */
    float rope_freq_scale; /* 1 / rope.scaling.factor (linear or YaRN scaling), else 1 */
    bool yarn;             /* rope.scaling.type "yarn" (families with arch.h's yarn) */
    float yarn_low, yarn_high, yarn_mscale; /* bt_rope_t's YaRN terms */
    int n_swa;             /* sliding window of local layers; 0: none */
    float attn_scale;      /* scores = scale * q.k */
    float embd_scale;      /* token embeddings times this (1, or sqrt(n_embd)) */
    float logit_softcap;   /* logits = c tanh(logits / c); 0: none */
    /* a head's query/key size as projected and its value size as attn_output reads
     * it: head_dim, but for MLA (d_qk = nope + n_rot, d_v) */
    int d_qk, d_v;
    /* Multi-head Latent Attention (arch->mla): the attention runs in the latent
     * space, as one kv head of head_dim = kv_lora + n_rot (the cache row) */
    int q_lora;        /* attention.q_lora_rank; 0: attn_q (V2-Lite) */
    int kv_lora;       /* attention.kv_lora_rank */
    int n_dense;       /* leading_dense_block_count: layers [0, n_dense) dense */
    int n_ff_shexp;    /* the shared experts' hidden size (0: none) */
    bt_route_t route;  /* how experts are chosen and weighed (mla; bias per layer) */
} bt_hparams_t;

/* Tensor parallelism: how the T tensor ranks of a stage split every layer
 * (docs/design.md, "Tensor parallelism"). Each split cuts a matrix by its
 * output rows, so each output element is still reduced whole, on one
 * rank, in its usual order. Rank r holds the ranges [x[r], x[r + 1]) of:
 * query heads (with the kv heads they read: whole kv groups where T <=
 * n_head_kv, else a kv head shared by the ranks its group spans), output
 * features of attn_output and ffn_down, hidden units of a dense FFN,
 * experts, and rows of the output head. size 1: the whole model.
 *
 * sum (--tp-comm allreduce, Megatron's scheme): attn_output and ffn_down
 * are cut by their input columns instead (rank r: the columns of its
 * heads, of its hidden units), so each rank's product is a partial sum of
 * every output feature and the ranks add them; attn_output's bias stays
 * whole. The hidden units then split at multiples of 256 where n_ff
 * allows (a K-quant block), else of 32. */
#define BT_TP_MAX 64

typedef struct bt_share {
    int rank, size;
    int head[BT_TP_MAX + 1];
    int embd[BT_TP_MAX + 1];
    int ff[BT_TP_MAX + 1];
    int expert[BT_TP_MAX + 1];
    int vocab[BT_TP_MAX + 1];
    bool sum; /* attn_output and ffn_down by input columns, partial sums added */
} bt_share_t;

/* The shares of rank `rank` of `size` tensor ranks, sum as above (false
 * with one rank). BT_ERR_ARG, with one message giving the numbers, when
 * size is outside 1..BT_TP_MAX or larger than a dimension it splits
 * (query heads, n_embd, n_ff, experts, vocab). */
bt_status_t bt_share_init(const bt_hparams_t *hp, int rank, int size, bool sum,
                          bt_share_t *out);

/* The kv heads [*kv0, *kv1) that rank r's query heads read. */
void bt_share_kv(const bt_share_t *s, const bt_hparams_t *hp, int r, int *kv0, int *kv1);

/* The largest of the ranks' ranges at[r + 1] - at[r] (a dimension of
 * bt_share_t, size ranks). */
int bt_share_largest(const int *at, int size);

/* Whether every rank's query heads are whole kv groups. */
bool bt_share_whole_groups(const bt_share_t *s, const bt_hparams_t *hp);

/* One layer's tensors, NULL (vectors) or .data NULL (matrices) where the
 * architecture leaves them out, and its attention and rope settings. */
typedef struct bt_layer {
    const float *attn_norm; /* [n_embd] */
    bt_matrix_t wq;         /* [n_head * head_dim, n_embd] */
    bt_matrix_t wk;         /* [n_head_kv * head_dim, n_embd] */
    bt_matrix_t wv;         /* [n_head_kv * head_dim, n_embd] */
    const float *q_bias, *k_bias, *v_bias; /* [n_head * head_dim], [kv dim], [kv dim] */
    const float *q_norm, *k_norm;          /* [head_dim]: per-head RMS norms */
    bt_matrix_t wo;         /* [n_embd, n_head * head_dim] */
    const float *o_bias;    /* [n_embd] */
    const float *sinks;     /* [n_head]: attention-sink logits */
    const float *post_attn_norm; /* [n_embd] */
    const float *ffn_norm;  /* [n_embd] */
    bt_matrix_t w_gate;     /* [n_ff, n_embd] */
    bt_matrix_t w_up;       /* [n_ff, n_embd] */
    bt_matrix_t w_down;     /* [n_embd, n_ff] */
    bt_matrix_t router;     /* [n_expert, n_embd]: experts instead of gate/up/down */
    const float *router_bias;   /* [n_expert] */
    const float *gate_exps_bias, *up_exps_bias; /* [n_expert][n_ff_exp] */
    const float *down_exps_bias;                /* [n_expert][n_embd] */
    bt_matrix_t gate_exps;  /* expert 0 of n_expert [n_ff_exp, n_embd], the others follow
                             * (bt_expert) */
    bt_matrix_t up_exps;    /* the same */
    bt_matrix_t down_exps;  /* n_expert [n_embd, n_ff_exp] */
    const float *post_ffn_norm; /* [n_embd] */
    /* Multi-head Latent Attention (deepseek2) */
    bt_matrix_t q_a;        /* [q_lora, n_embd] */
    const float *q_a_norm;  /* [q_lora] */
    bt_matrix_t q_b;        /* [n_head * d_qk, q_lora] */
    bt_matrix_t kv_a;       /* [kv_lora + n_rot, n_embd] */
    const float *kv_a_norm; /* [kv_lora] */
    bt_matrix_t k_b;        /* head 0 of n_head [kv_lora, nope] (bt_expert gives head h) */
    bt_matrix_t v_b;        /* head 0 of n_head [d_v, kv_lora] */
    bt_matrix_t gate_shexp, up_shexp; /* [n_ff_shexp, n_embd]: shared experts */
    bt_matrix_t down_shexp; /* [n_embd, n_ff_shexp] */
    const float *exp_probs_b; /* [n_expert]: the routing's choosing bias */
    int window;             /* positions a query sees (0: all): n_swa on local layers */
    float rope_base;        /* this layer's base */
    float rope_freq_scale;  /* this layer's linear scaling */
} bt_layer_t;

typedef struct bt_model {
    bt_gguf_t *gguf; /* owned */
    bt_hparams_t hp;
    int first, last; /* bound layers [first, last) */
    bool with_embed, with_head;
    bool tied;       /* output head is token_embd.weight */
    bt_matrix_t tok_embd;    /* [n_vocab, n_embd] rows = tokens; with_embed (or tied head) */
    const float *out_norm;   /* [n_embd]; with_head */
    bt_matrix_t output;      /* [n_vocab, n_embd]; with_head */
    bt_layer_t *layers;      /* last - first entries; layers[i] is layer first + i */
    const float *rope_factors; /* [n_rot / 2] rope_freqs.weight, or NULL; with layers */
    uint64_t weight_bytes;   /* bytes of the tensors bound (each counted once) */
    void *weights_copy;      /* bound weights read into memory (--mmap 0), else NULL */
    void *packed_copy;       /* the packed copies, one block (bt_model_pack), or NULL */
    void **slices;           /* [n_slices] the column shares of a share.sum (bt_model_shard),
                              * each freed once packed (bt_model_pack: its matrix's data
                              * is then NULL, the cpu set reading only the packed layout) */
    int n_slices;
    uint64_t packed_bytes;   /* bytes of the packed copies */
    uint32_t file_type;      /* general.file_type, or the type of most weights */
    bt_share_t share;        /* this rank's share of each layer (size 1: all of it) */
} bt_model_t;

/* Opens path and reads the hyperparameters; binds no tensor yet (so a
 * pipeline can partition the layers first). */
bt_status_t bt_model_open(const char *path, bt_model_t **out);

/* Binds layers [first, last) (last = -1 means n_layer) plus embeddings and
 * head as asked. Once per model. */
bt_status_t bt_model_bind(bt_model_t *m, int first, int last, bool with_embed, bool with_head);

/* Keeps only this tensor rank's share of every bound layer and of the
 * head (bt_share_t): matrices and their biases are narrowed to their rows,
 * expert tensors to the rank's experts; norms, routers and the embedding
 * table stay whole. Under share->sum, attn_output and ffn_down keep their
 * columns instead, copied out (slices; the mapped pages they were
 * read from are dropped): BT_ERR_ARG, with one message giving the numbers,
 * where a share's columns do not fall on the weights' block boundaries.
 * Call once, after bt_model_bind and before bt_model_place_weights, so
 * nothing outside the share is read. The
 * embedding table is then bound only with with_embed (a tied head keeps
 * just its rows). */
bt_status_t bt_model_shard(bt_model_t *m, const bt_share_t *share);

/* How the bound weights are held. use_mmap: read from the file mapping,
 * with the kernel asked to read them ahead (madvise WILLNEED). Otherwise:
 * copied into one anonymous buffer (transparent huge pages where the kernel
 * offers them) and the mapped pages dropped, so the weights no longer
 * depend on the page cache. Call once after bt_model_bind. */
bt_status_t bt_model_place_weights(bt_model_t *m, bool use_mmap);

/* Gives every bound matrix that bt_ops_cpu has a packed layout for its
 * packed copy (w->packed; freed by bt_model_free): the same results,
 * faster. Mapped weights: the packed matrices' file pages are dropped, so
 * the copy replaces them in memory; read-in weights (--mmap 0) stay, so
 * packing adds their size. Call once, after bt_model_place_weights. */
bt_status_t bt_model_pack(bt_model_t *m);

/* The bytes bt_model_pack would allocate (0 if it would pack nothing). */
uint64_t bt_model_pack_bytes(bt_model_t *m);

/* What each part of the model holds in memory once bound, placed and (if
 * packed) packed, from the file alone (no tensor bound): layer[n_layer]
 * each layer's tensors, *embed the embedding table (first stage), *head
 * the output norm and head (last stage; a tied head counts the table
 * again, packed), *every what every stage binds (rope factors). packed:
 * bt_model_pack will run (the cpu kernels); read_in: --mmap 0. */
void bt_model_memory(const bt_model_t *m, bool packed, bool read_in, uint64_t *layer,
                     uint64_t *embed, uint64_t *head, uint64_t *every);

/* The same for the largest share of any of tp tensor ranks (tp 1:
 * bt_model_memory), sum as in bt_share_init: what one rank of a
 * tensor-parallel stage holds. */
void bt_model_memory_share(const bt_model_t *m, int tp, bool sum, bool packed, bool read_in,
                           uint64_t *layer, uint64_t *embed, uint64_t *head, uint64_t *every);

/* bt_model_open + bt_model_bind. */
bt_status_t bt_model_load(const char *path, int first, int last, bool with_embed, bool with_head,
                          bt_model_t **out);
void bt_model_free(bt_model_t *m);

/* Bytes and element count of every tensor in the file (the whole model,
 * not only the bound range), as llama.cpp reports model size and params. */
void bt_model_file_stats(const bt_model_t *m, uint64_t *bytes, uint64_t *params);

/* Name of a general.file_type value ("F32", "Q8_0", ...), "unknown" else. */
const char *bt_ftype_name(uint32_t file_type);

/* Bytes between two experts' packed copies (bt_model_pack). */
static inline size_t bt_expert_packed_stride(const bt_matrix_t *m)
{
    bt_matrix_t x = *m;
    x.packed = NULL;
    return (bt_pack_bytes(&x) + 63) / 64 * 64;
}

/* Expert e of a 3-D expert tensor bound as its first matrix (with its
 * packed copy where the tensor has them). */
static inline bt_matrix_t bt_expert(const bt_matrix_t *m, int e)
{
    bt_matrix_t x = *m;
    x.data = (const uint8_t *)m->data + (size_t)e * (size_t)m->n_out * m->row_bytes;
    x.packed = m->packed != NULL
                   ? (const uint8_t *)m->packed + (size_t)e * bt_expert_packed_stride(m)
                   : NULL;
    return x;
}

/* Largest n_in of any bound matrix (sizes the matmul scratch). */
int64_t bt_model_max_n_in(const bt_model_t *m);

/* The weights one token goes through in layer il (elements of its
 * matrices: with experts the router, the k it uses and the shared ones,
 * not all of them): the compute a stage's partition balances. */
double bt_layer_weights_per_token(const bt_hparams_t *hp, int il);

/* Largest n_in of any matrix of a stage that holds layers. */
int64_t bt_hparams_max_n_in(const bt_hparams_t *hp);

#endif /* BT_MODEL_H */
