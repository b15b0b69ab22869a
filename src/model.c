/* model.c: llama hyperparameters from GGUF metadata and the binding of one
 * layer range's tensors. Reads in the order of a layer: hyperparameters,
 * embeddings, layers, head. */
#include "model.h"

#include <stdio.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Upper bound for any dimension: keeps every size product in int64 range. */
#define DIM_MAX (1 << 24)

/* ---- hyperparameters ---- */

/* "<arch>.<key>" into buf. */
static const char *akey(const bt_hparams_t *hp, const char *key, char *buf, size_t n)
{
    snprintf(buf, n, "%s.%s", hp->arch->name, key);
    return buf;
}

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

/* Keys under "<arch>." that every family reads, or that change nothing
 * baton computes (rope.scaling.original_context_length and .finetuned only
 * describe how linear scaling was trained). */
static const char *const common_keys[] = {
    "context_length", "embedding_length", "block_count", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "attention.layer_norm_rms_epsilon",
    "attention.key_length", "attention.value_length", "rope.freq_base", "rope.dimension_count",
    "vocab_size", "rope.scaling.type", "rope.scaling.factor",
    "rope.scaling.original_context_length", "rope.scaling.finetuned", "expert_count",
    "expert_used_count", "expert_feed_forward_length",
};
static const char *const swa_keys[] = {"attention.sliding_window",
                                       "attention.sliding_window_pattern", "rope.freq_base_swa"};
static const char *const softcap_keys[] = {"final_logit_softcapping"};
/* read_mla's (yarn_beta_fast/slow change nothing: llama.cpp's deepseek2
 * keeps its defaults 32 and 1, which read_yarn uses) */
static const char *const mla_keys[] = {
    "attention.q_lora_rank", "attention.kv_lora_rank", "attention.key_length_mla",
    "attention.value_length_mla", "leading_dense_block_count", "expert_shared_count",
    "expert_gating_func", "expert_group_count", "expert_group_used_count",
    "expert_weights_norm", "expert_weights_scale", "rope.scaling.yarn_log_multiplier",
    "rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow"};
/* Top-level key groups with nothing that changes the math: descriptions,
 * the tokenizer's own (tokenizer.c), the quantizer's notes, mkmodel's. */
static const char *const free_prefixes[] = {"general.", "tokenizer.", "quantize.", "baton."};

static bool in_list(const char *const *list, size_t n, const char *s, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(list[i]) == len && memcmp(list[i], s, len) == 0)
            return true;
    return false;
}

#define IN_LIST(list, s, len) in_list(list, sizeof list / sizeof list[0], s, len)

/* Strict keys: every key is read, known to change nothing, or refused by
 * name (nothing that changes the math is silently dropped). */
static bt_status_t check_keys(const bt_gguf_t *g, const bt_arch_t *a)
{
    const size_t alen = strlen(a->name);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const char *k = g->kv[i].key.ptr;
        const size_t len = g->kv[i].key.len;
        bool ok = false;
        for (size_t j = 0; j < sizeof free_prefixes / sizeof free_prefixes[0] && !ok; j++)
            ok = len > strlen(free_prefixes[j]) &&
                 memcmp(k, free_prefixes[j], strlen(free_prefixes[j])) == 0;
        if (!ok && len > alen + 1 && memcmp(k, a->name, alen) == 0 && k[alen] == '.') {
            const char *rest = k + alen + 1;
            const size_t rlen = len - alen - 1;
            ok = IN_LIST(common_keys, rest, rlen) || (a->swa && IN_LIST(swa_keys, rest, rlen)) ||
                 (a->softcap && IN_LIST(softcap_keys, rest, rlen)) ||
                 (a->mla && IN_LIST(mla_keys, rest, rlen));
        }
        if (!ok) {
            bt_log_error("model: %s: key '%.*s' is not supported for architecture '%s' (baton "
                         "does not implement what it changes, so it refuses the file rather than "
                         "ignore it)", g->path, (int)(len > 96 ? 96 : len), k, a->name);
            return BT_ERR_UNSUPPORTED;
        }
    }
    return BT_OK;
}

/* rope.scaling.*: none, or linear (positions divided by the factor). */
static bt_status_t read_rope_scaling(const bt_gguf_t *g, bt_hparams_t *hp)
{
    char key[96];
    bt_gguf_str_t type;
    bt_status_t st = bt_gguf_get_str(g, akey(hp, "rope.scaling.type", key, sizeof key), &type);
    bool linear = st == BT_ERR_ARG; /* no type: a factor alone is linear, as in llama.cpp */
    if (st == BT_ERR_ARG && hp->arch->yarn && !hp->arch->mla) {
        /* without it llama.cpp computes other logits without a word */
        bt_log_error("model: %s: required key '%s' is missing (architecture '%s' has YaRN "
                     "rope)", g->path, key, hp->arch->name);
        return BT_ERR_FORMAT;
    }
    if (st == BT_OK) {
        if (bt_gguf_str_eq(type, "none")) {
            hp->rope_freq_scale = 1.0f;
            return BT_OK;
        }
        linear = bt_gguf_str_eq(type, "linear");
        hp->yarn = hp->arch->yarn && bt_gguf_str_eq(type, "yarn");
        if (!linear && !hp->yarn) {
            bt_log_error("model: %s: %s = '%.*s' is not supported (only none and linear%s)",
                         g->path, key, (int)(type.len > 32 ? 32 : type.len), type.ptr,
                         hp->arch->yarn ? ", yarn" : "");
            return BT_ERR_UNSUPPORTED;
        }
    } else if (st != BT_ERR_ARG) {
        return st;
    }
    float factor;
    if ((st = get_float(g, akey(hp, "rope.scaling.factor", key, sizeof key),
                        hp->yarn ? -1.0f : 1.0f, &factor)))
        return st;
    if (!(factor > 0.0f)) {
        bt_log_error("model: %s: %s is required with YaRN", g->path, key);
        return BT_ERR_FORMAT;
    }
    hp->rope_freq_scale = 1.0f / factor;
    return BT_OK;
}

/* YaRN's pair range and attention scale, as llama.cpp derives them (its
 * defaults beta_fast 32, beta_slow 1): the pairs below yarn_low keep their
 * frequency, those above yarn_high are scaled, those between blend. */
static bt_status_t read_yarn(const bt_gguf_t *g, bt_hparams_t *hp)
{
    char key[96];
    int n_orig;
    bt_status_t st =
        get_dim(g, akey(hp, "rope.scaling.original_context_length", key, sizeof key), -1, &n_orig);
    if (st != BT_OK)
        return st;
    const float pi = 3.14159265358979323846f, n = (float)hp->n_rot;
    const float lb = 2.0f * logf(hp->rope_base);
    const float fast = n * logf((float)n_orig / (32.0f * 2.0f * pi)) / lb;
    const float slow = n * logf((float)n_orig / (1.0f * 2.0f * pi)) / lb;
    hp->yarn_low = fmaxf(0.0f, floorf(fast));
    hp->yarn_high = fminf(n - 1.0f, ceilf(slow));
    hp->yarn_mscale = 1.0f + 0.1f * logf(1.0f / hp->rope_freq_scale);
    return BT_OK;
}

/* A u32 key that may be absent (0) or 0. */
static bt_status_t get_count(const bt_gguf_t *g, const char *key, int *out)
{
    uint32_t v = 0;
    bt_status_t st = bt_gguf_get_u32(g, key, &v);
    if (st != BT_OK && st != BT_ERR_ARG)
        return st;
    if (v > DIM_MAX) {
        bt_log_error("model: %s: %s = %u is out of range (0..%d)", g->path, key, v, DIM_MAX);
        return BT_ERR_FORMAT;
    }
    *out = (int)v;
    return BT_OK;
}

/* Multi-head Latent Attention and DeepSeek's experts (README-deepseek.txt
 * in tests/data/golden has the math): the ranks, each head's query/key
 * and value sizes, the leading dense layers, the shared experts and the
 * routing. The cache row is the file's key_length (kv_lora + n_rot), one
 * kv head; YaRN's attention scale (mscale squared) goes into the scores,
 * and cos and sin stay unscaled where yarn_log_multiplier is given (as
 * llama.cpp computes it). */
static bt_status_t read_mla(const bt_gguf_t *g, bt_hparams_t *hp)
{
    char k[8][96];
#define K(i, name) akey(hp, name, k[i], sizeof k[i])
    int n_shared = 0, gating = 1, n_group = 1, n_group_used = 1;
    bt_status_t st;
    if ((st = get_count(g, K(0, "attention.q_lora_rank"), &hp->q_lora)) ||
        (st = get_dim(g, K(1, "attention.kv_lora_rank"), -1, &hp->kv_lora)) ||
        (st = get_dim(g, K(2, "attention.key_length_mla"), -1, &hp->d_qk)) ||
        (st = get_dim(g, K(3, "attention.value_length_mla"), -1, &hp->d_v)))
        return st;
    const char *why = hp->n_head_kv != 1                        ? "head_count_kv must be 1"
                      : hp->head_dim != hp->kv_lora + hp->n_rot ? "key_length must be "
                                                                  "kv_lora_rank + rope"
                      : hp->n_rot >= hp->d_qk                   ? "the rope part must be "
                                                                  "less than key_length_mla"
                                                                : NULL;
    if (why != NULL) { /* the cache row: the latent and one rope key */
        bt_log_error("model: %s: Multi-head Latent Attention: %s (head_count_kv %d, key_length "
                     "%d, kv_lora_rank %d, rope.dimension_count %d, key_length_mla %d)",
                     g->path, why, hp->n_head_kv, hp->head_dim, hp->kv_lora, hp->n_rot,
                     hp->d_qk);
        return BT_ERR_FORMAT;
    }
    if (hp->n_expert > 0) {
        if ((st = get_dim(g, K(0, "leading_dense_block_count"), -1, &hp->n_dense)) ||
            (st = get_count(g, K(1, "expert_shared_count"), &n_shared)) ||
            (st = get_count(g, K(2, "expert_gating_func"), &gating)) ||
            (st = get_dim(g, K(3, "expert_group_count"), 1, &n_group)) ||
            (st = get_dim(g, K(4, "expert_group_used_count"), n_group > 1 ? -1 : 1,
                          &n_group_used)))
            return st;
        if (bt_gguf_find_kv(g, k[2]) == NULL)
            gating = 1; /* llama.cpp's default: softmax */
        if (gating != 1 && gating != 2) {
            bt_log_error("model: %s: %s = %d is not a gating function baton knows (1 softmax, "
                         "2 sigmoid)", g->path, k[2], gating);
            return BT_ERR_UNSUPPORTED;
        }
        if (n_shared < 1) {
            bt_log_error("model: %s: %s = %d: deepseek2's expert layers need shared experts",
                         g->path, k[1], n_shared);
            return BT_ERR_UNSUPPORTED;
        }
        if (n_group > BT_ROUTE_GROUPS_MAX || hp->n_expert % n_group != 0 ||
            n_group_used > n_group || hp->n_expert_used > n_group_used * (hp->n_expert / n_group)) {
            bt_log_error("model: %s: %s = %d, %s = %d do not fit %d experts of which %d are used "
                         "(the groups must divide the experts, at most %d groups, used ones no "
                         "more than there are and holding at least expert_used_count experts)",
                         g->path, k[3], n_group, k[4], n_group_used, hp->n_expert,
                         hp->n_expert_used, BT_ROUTE_GROUPS_MAX);
            return BT_ERR_FORMAT;
        }
        if (hp->n_dense > hp->n_layer || (hp->n_dense > 0 && hp->n_ff == 0)) {
            bt_log_error("model: %s: %s = %d needs at most %d layers and the dense layers' "
                         "feed_forward_length", g->path, k[0], hp->n_dense, hp->n_layer);
            return BT_ERR_FORMAT;
        }
        hp->n_ff_shexp = n_shared * hp->n_ff_exp;
        bool norm = false;
        float scale = 1.0f;
        st = bt_gguf_get_bool(g, K(5, "expert_weights_norm"), &norm);
        if (st != BT_OK && st != BT_ERR_ARG)
            return st;
        st = bt_gguf_get_f32(g, K(6, "expert_weights_scale"), &scale);
        if (st == BT_OK && !(scale >= 0.0f && scale < 1e30f)) {
            bt_log_error("model: %s: %s = %g must be finite and not negative", g->path, k[6],
                         scale);
            return BT_ERR_FORMAT;
        }
        if (st != BT_OK && st != BT_ERR_ARG)
            return st;
        hp->route = (bt_route_t){.sigmoid = gating == 2, .n_group = n_group,
                                 .n_group_used = n_group_used, .norm = norm,
                                 .scale = scale == 0.0f ? 1.0f : scale};
    }
    float mscale = 1.0f;
    if (hp->yarn) {
        float mul;
        st = bt_gguf_get_f32(g, K(7, "rope.scaling.yarn_log_multiplier"), &mul);
        if (st != BT_OK && st != BT_ERR_ARG)
            return st;
        const float ln_s = logf(1.0f / hp->rope_freq_scale);
        if (st == BT_OK) { /* cos, sin unscaled; the scores carry mscale^2 */
            mscale = 1.0f + mul * ln_s;
            hp->yarn_mscale = 1.0f;
        } else { /* llama.cpp without the key: both */
            mscale = hp->yarn_mscale;
        }
    }
    hp->attn_scale = mscale * mscale / sqrtf((float)hp->d_qk);
#undef K
    return BT_OK;
}

/* The FFN: a dense one of feed_forward_length, or expert_count experts of
 * expert_feed_forward_length (llama's experts: feed_forward_length), of
 * which each token uses expert_used_count; as the family allows. */
static bt_status_t read_ffn(const bt_gguf_t *g, bt_hparams_t *hp)
{
    const bt_arch_t *a = hp->arch;
    char k1[96], k2[96];
    bt_status_t st;
    if ((st = get_count(g, akey(hp, "expert_count", k1, sizeof k1), &hp->n_expert)) ||
        (st = get_count(g, akey(hp, "expert_used_count", k2, sizeof k2), &hp->n_expert_used)))
        return st;
    if (hp->n_expert > 0 && a->moe == 0) {
        bt_log_error("model: %s: %s = %d: architecture '%s' has no mixture-of-experts layers",
                     g->path, k1, hp->n_expert, a->name);
        return BT_ERR_UNSUPPORTED;
    }
    if (hp->n_expert == 0 && a->dense == 0) {
        bt_log_error("model: %s: %s is missing or 0: architecture '%s' needs experts", g->path,
                     k1, a->name);
        return BT_ERR_FORMAT;
    }
    if (hp->n_expert > 0 && (hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert)) {
        bt_log_error("model: %s: %s = %d must be in 1..%s = %d", g->path, k2, hp->n_expert_used,
                     k1, hp->n_expert);
        return BT_ERR_FORMAT;
    }
    /* a dense FFN's size is required; with experts it is the default of theirs */
    if ((st = get_dim(g, akey(hp, "feed_forward_length", k1, sizeof k1),
                      hp->n_expert > 0 ? 0 : -1, &hp->n_ff)))
        return st;
    if (hp->n_expert > 0)
        return get_dim(g, akey(hp, "expert_feed_forward_length", k2, sizeof k2),
                       hp->n_ff > 0 ? hp->n_ff : -1, &hp->n_ff_exp);
    return BT_OK;
}

/* Sliding-window attention: attention.sliding_window (0 or absent: none). */
static bt_status_t read_swa(const bt_gguf_t *g, bt_hparams_t *hp)
{
    char key[96];
    uint32_t w = 0;
    bt_status_t st = bt_gguf_get_u32(g, akey(hp, "attention.sliding_window", key, sizeof key), &w);
    if (st != BT_OK && st != BT_ERR_ARG)
        return st;
    if (w > DIM_MAX) {
        bt_log_error("model: %s: %s = %u is out of range (0..%d)", g->path, key, w, DIM_MAX);
        return BT_ERR_FORMAT;
    }
    hp->n_swa = (int)w;
    /* a family without its own local base uses the global one */
    const float dflt = hp->arch->rope_base_swa > 0.0f ? hp->arch->rope_base_swa : hp->rope_base;
    return get_float(g, akey(hp, "rope.freq_base_swa", key, sizeof key), dflt,
                     &hp->rope_base_swa);
}

static bt_status_t read_hparams(const bt_gguf_t *g, bt_hparams_t *hp)
{
    bt_gguf_str_t arch;
    if (bt_gguf_get_str(g, "general.architecture", &arch) != BT_OK) {
        bt_log_error("model: %s: general.architecture is missing or not a string", g->path);
        return BT_ERR_FORMAT;
    }
    hp->arch = bt_arch_find(arch.ptr, arch.len);
    if (hp->arch == NULL) {
        bt_log_error("model: %s: architecture '%.*s' is not supported (supported: %s)", g->path,
                     (int)(arch.len > 64 ? 64 : arch.len), arch.ptr, bt_arch_names());
        return BT_ERR_UNSUPPORTED;
    }
    bt_status_t st;
    if ((st = check_keys(g, hp->arch)))
        return st;
    char k[16][96];
#define K(i, name) akey(hp, name, k[i], sizeof k[i])
    if ((st = get_dim(g, K(0, "block_count"), -1, &hp->n_layer)) ||
        (st = get_dim(g, K(1, "embedding_length"), -1, &hp->n_embd)) ||
        (st = read_ffn(g, hp)) ||
        (st = get_dim(g, K(3, "attention.head_count"), -1, &hp->n_head)) ||
        (st = get_dim(g, K(4, "attention.head_count_kv"), hp->n_head, &hp->n_head_kv)) ||
        (st = get_dim(g, K(5, "context_length"), 2048, &hp->n_ctx_train)) ||
        (st = get_float(g, K(6, "attention.layer_norm_rms_epsilon"), 1e-5f, &hp->rms_eps)) ||
        (st = get_float(g, K(7, "rope.freq_base"), 10000.0f, &hp->rope_base)) ||
        (st = read_rope_scaling(g, hp)))
        return st;
    if (hp->n_embd % hp->n_head != 0 &&
        bt_gguf_find_kv(g, K(8, "attention.key_length")) == NULL) {
        bt_log_error("model: %s: embedding_length %d is not a multiple of head_count %d", g->path,
                     hp->n_embd, hp->n_head);
        return BT_ERR_FORMAT;
    }
    if ((st = get_dim(g, K(8, "attention.key_length"), hp->n_embd / hp->n_head, &hp->head_dim)) ||
        (st = get_dim(g, K(9, "rope.dimension_count"), hp->head_dim, &hp->n_rot)))
        return st;
    int v_len;
    if ((st = get_dim(g, K(10, "attention.value_length"), hp->head_dim, &v_len)))
        return st;
    if (v_len != hp->head_dim && !hp->arch->mla) { /* MLA: the latent, which it knows */
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
    hp->rope_base_swa = hp->rope_base;
    hp->d_qk = hp->d_v = hp->head_dim;
    if ((hp->arch->swa && (st = read_swa(g, hp))) || (hp->yarn && (st = read_yarn(g, hp))))
        return st;
    if (hp->arch->softcap &&
        (st = get_float(g, K(11, "final_logit_softcapping"), 0.0f, &hp->logit_softcap)))
        return st;
#undef K
    hp->embd_scale = hp->arch->embd_scale ? sqrtf((float)hp->n_embd) : 1.0f;
    /* llama.cpp: 1/sqrt(key_length), except Gemma 3 27B (62 layers), scaled
     * by the head size n_embd / n_head that its query_pre_attn_scalar gives */
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    if (hp->arch->swa && hp->n_layer == 62)
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    if (hp->arch->mla && (st = read_mla(g, hp)))
        return st;
    /* vocab: the embedding's row count, else <arch>.vocab_size */
    const bt_gguf_tensor_t *emb = bt_gguf_find_tensor(g, "token_embd.weight");
    char vk[96];
    if (emb != NULL && emb->n_dims == 2 && emb->ne[1] <= DIM_MAX) {
        hp->n_vocab = (int)emb->ne[1];
    } else if ((st = get_dim(g, akey(hp, "vocab_size", vk, sizeof vk), -1, &hp->n_vocab))) {
        return st;
    }
    /* A block count the file cannot hold is refused before anything is
     * sized by it (a few bytes of metadata must not make bind allocate
     * gigabytes). */
    unsigned per_layer =
        (unsigned)__builtin_popcountll(bt_arch_layer_bits(hp->arch, hp->n_expert > 0));
    if (hp->n_dense > 0) { /* the leading dense layers have fewer */
        const unsigned dense = (unsigned)__builtin_popcountll(bt_arch_layer_bits(hp->arch, false));
        per_layer = dense < per_layer ? dense : per_layer;
    }
    if ((uint64_t)hp->n_layer > g->n_tensors / per_layer) {
        bt_log_error("model: %s: block_count %d is impossible: %d layers need %llu tensors but "
                     "the file has %llu", g->path, hp->n_layer, hp->n_layer,
                     (unsigned long long)hp->n_layer * per_layer,
                     (unsigned long long)g->n_tensors);
        return BT_ERR_FORMAT;
    }
    return BT_OK;
}

/* Whether layer il is a sliding-window layer: the pattern key (an integer
 * N: local iff il % N < N - 1; or one bool per layer), else the row's
 * default N. */
static bt_status_t layer_is_local(const bt_gguf_t *g, const bt_hparams_t *hp, int il,
                                  bool *local)
{
    *local = false;
    if (!hp->arch->swa || hp->n_swa == 0)
        return BT_OK;
    char key[96];
    const bt_gguf_kv_t *kv = bt_gguf_find_kv(
        g, akey(hp, "attention.sliding_window_pattern", key, sizeof key));
    if (kv != NULL && kv->type == BT_GGUF_ARRAY) {
        if (kv->arr_type != BT_GGUF_BOOL || kv->arr_n != (uint64_t)hp->n_layer) {
            bt_log_error("model: %s: %s must be %d bools (one per layer) or one integer", g->path,
                         key, hp->n_layer);
            return BT_ERR_FORMAT;
        }
        *local = kv->arr_data[il] != 0;
        return BT_OK;
    }
    uint32_t n = (uint32_t)hp->arch->swa_pattern;
    bt_status_t st = bt_gguf_get_u32(g, key, &n);
    if (st != BT_OK && st != BT_ERR_ARG)
        return st;
    *local = n == 0 || (uint32_t)il % n < n - 1;
    return BT_OK;
}

/* ---- tensors ---- */

static int64_t dim_of(const bt_hparams_t *hp, bt_dim_t d)
{
    const bt_dims_t s = {hp->n_embd, hp->n_head,   hp->n_head_kv, hp->head_dim,
                         hp->n_ff,   hp->n_expert, hp->n_ff_exp, hp->d_qk,
                         hp->d_v,    hp->q_lora,   hp->kv_lora,   hp->n_rot, hp->n_ff_shexp};
    return bt_dim_size(d, &s);
}

/* Whether layer il runs experts (deepseek2's first n_dense layers do not). */
static bool moe_layer(const bt_hparams_t *hp, int il)
{
    return hp->n_expert > 0 && il >= hp->n_dense;
}

/* The kinds layer il must have: the row's, with attn_q for the low-rank
 * query pair where an MLA file has no q_lora_rank (V2-Lite). */
static bt_lt_set_t layer_required(const bt_hparams_t *hp, int il)
{
    const bt_lt_set_t b = bt_arch_layer_bits(hp->arch, moe_layer(hp, il));
    return hp->arch->mla && hp->q_lora == 0 ? bt_arch_plain_query(b) : b;
}

/* The kinds layer il may have. */
static bt_lt_set_t layer_allowed(const bt_hparams_t *hp, int il)
{
    return layer_required(hp, il) | hp->arch->layer_optional |
           (moe_layer(hp, il) ? hp->arch->moe_optional : 0);
}

/* ne2: the experts of a 3-D tensor, else 1. */
static bt_status_t check_shape3(const bt_gguf_t *g, const bt_gguf_tensor_t *t, int64_t ne0,
                                int64_t ne1, int64_t ne2)
{
    if (t->ne[0] == (uint64_t)ne0 && t->ne[1] == (uint64_t)ne1 && t->ne[2] == (uint64_t)ne2 &&
        t->ne[3] == 1)
        return BT_OK;
    char want[64];
    if (ne2 == 1)
        snprintf(want, sizeof want, "[%lld, %lld]", (long long)ne0, (long long)ne1);
    else
        snprintf(want, sizeof want, "[%lld, %lld, %lld]", (long long)ne0, (long long)ne1,
                 (long long)ne2);
    bt_log_error("model: %s: tensor '%.*s' has shape [%llu, %llu, %llu, %llu], expected %s",
                 g->path, (int)t->name.len, t->name.ptr, (unsigned long long)t->ne[0],
                 (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                 (unsigned long long)t->ne[3], want);
    return BT_ERR_FORMAT;
}

static bt_status_t check_shape(const bt_gguf_t *g, const bt_gguf_tensor_t *t, int64_t ne0,
                               int64_t ne1)
{
    return check_shape3(g, t, ne0, ne1, 1);
}

/* A matrix's type must be one the kernels multiply with; a vector's f32. */
static bt_status_t check_type(const bt_gguf_t *g, const bt_gguf_tensor_t *t, bool vector)
{
    if (vector && t->type != BT_TYPE_F32) {
        bt_log_error("model: %s: tensor '%.*s' must be f32, found type %u", g->path,
                     (int)t->name.len, t->name.ptr, t->type);
        return BT_ERR_UNSUPPORTED;
    }
    if (!vector && !bt_type_supported(t->type)) {
        const bt_type_info_t *ti = bt_type_info(t->type);
        bt_log_error("model: %s: tensor '%.*s' has type %s (%u), which baton cannot compute with "
                     "yet", g->path, (int)t->name.len, t->name.ptr, ti ? ti->name : "unknown",
                     t->type);
        return BT_ERR_UNSUPPORTED;
    }
    return BT_OK;
}

/* The per-layer kind of "blk.N.<suffix>": sets *il and returns the
 * bt_lt_t, or -1 when the name is not of that form or no kind has the
 * suffix. */
static int layer_tensor_kind(const bt_arch_t *a, bt_lt_set_t allowed, const bt_gguf_str_t name,
                             int *il)
{
    char buf[128];
    if (name.len >= sizeof buf || name.len < 6 || memcmp(name.ptr, "blk.", 4) != 0)
        return -1;
    memcpy(buf, name.ptr, name.len);
    buf[name.len] = '\0';
    char *end, canon[16];
    long n = strtol(buf + 4, &end, 10);
    if (end == buf + 4 || *end != '.' || n < 0 || n > DIM_MAX)
        return -1;
    /* only the number as printf writes it ("blk.01." or "blk.+1." would
     * pass the check and then not be found by bind) */
    int len = snprintf(canon, sizeof canon, "%ld", n);
    if (end - (buf + 4) != len || memcmp(canon, buf + 4, (size_t)len) != 0)
        return -1;
    *il = (int)n;
    int kind = -1; /* a suffix two kinds share (gpt-oss's FFN norm): the allowed one */
    for (int t = 0; t < BT_LT_COUNT; t++)
        if (strcmp(end + 1, bt_arch_suffix(a, t)) == 0 && (kind < 0 || allowed & BT_LT_BIT(t)))
            kind = t;
    return kind;
}

/* Strict tensors: every tensor of the file is one the row uses, of the
 * right shape and type; every layer has the tensors the row requires; the
 * global ones exist. Names and shapes only: no data is read. */
static bt_status_t check_tensors(const bt_gguf_t *g, const bt_hparams_t *hp)
{
    const bt_arch_t *a = hp->arch;
    /* the kinds of any layer (a suffix two kinds share picks the allowed one) */
    const bt_lt_set_t any = layer_allowed(hp, 0) | layer_allowed(hp, hp->n_layer - 1);
    bt_lt_set_t *have = calloc((size_t)hp->n_layer, sizeof *have);
    if (have == NULL)
        return BT_ERR_NOMEM;
    bool embd = false, onorm = false;
    bt_status_t st = BT_OK;
    for (uint64_t i = 0; i < g->n_tensors && st == BT_OK; i++) {
        const bt_gguf_tensor_t *t = &g->tensors[i];
        int il = 0, kind = layer_tensor_kind(a, any, t->name, &il);
        if (kind >= 0 && il < hp->n_layer && (layer_allowed(hp, il) & BT_LT_BIT(kind))) {
            const bt_lt_info_t *li = &bt_lt_info[kind];
            have[il] |= BT_LT_BIT(kind);
            if (!(st = check_shape3(g, t, dim_of(hp, li->ne0), dim_of(hp, li->ne1),
                                    dim_of(hp, li->ne2))))
                st = check_type(g, t, bt_lt_f32(li));
        } else if (bt_gguf_str_eq(t->name, "token_embd.weight")) {
            embd = true;
            if (!(st = check_shape(g, t, hp->n_embd, hp->n_vocab)))
                st = check_type(g, t, false);
        } else if (bt_gguf_str_eq(t->name, "output.weight")) {
            if (!(st = check_shape(g, t, hp->n_embd, hp->n_vocab)))
                st = check_type(g, t, false);
        } else if (bt_gguf_str_eq(t->name, "output_norm.weight")) {
            onorm = true;
            if (!(st = check_shape(g, t, hp->n_embd, 1)))
                st = check_type(g, t, true);
        } else if (a->rope_freqs && bt_gguf_str_eq(t->name, "rope_freqs.weight")) {
            if (!(st = check_shape(g, t, hp->n_rot / 2, 1)))
                st = check_type(g, t, true);
        } else if (a->mla && t->name.len > 17 &&
                   memcmp(t->name.ptr + t->name.len - 17, ".attn_kv_b.weight", 17) == 0) {
            bt_log_error("model: %s: tensor '%.*s': the combined attn_kv_b layout of older "
                         "converters is not implemented (convert the model again with a current "
                         "llama.cpp, which writes attn_k_b and attn_v_b)", g->path,
                         (int)(t->name.len > 96 ? 96 : t->name.len), t->name.ptr);
            st = BT_ERR_UNSUPPORTED;
        } else {
            bt_log_error("model: %s: tensor '%.*s' is not used by architecture '%s' (baton "
                         "refuses the file rather than ignore a tensor)", g->path,
                         (int)(t->name.len > 96 ? 96 : t->name.len), t->name.ptr, a->name);
            st = BT_ERR_UNSUPPORTED;
        }
    }
    for (int il = 0; il < hp->n_layer && st == BT_OK; il++) {
        const bt_lt_set_t missing = layer_required(hp, il) & ~have[il];
        if (missing != 0) {
            bt_log_error("model: %s: tensor 'blk.%d.%s' is missing (architecture '%s')", g->path,
                         il, bt_arch_suffix(a, __builtin_ctzll(missing)), a->name);
            st = BT_ERR_FORMAT;
        }
    }
    if (st == BT_OK && (!embd || !onorm)) {
        bt_log_error("model: %s: tensor '%s' is missing", g->path,
                     embd ? "output_norm.weight" : "token_embd.weight");
        st = BT_ERR_FORMAT;
    }
    free(have);
    return st;
}

typedef struct weight_ref {
    const void **data; /* the field that points at the tensor */
    size_t bytes;
} weight_ref_t;
static int bound_weights(bt_model_t *m, weight_ref_t *w, int cap);

/* ---- tensor-parallel shares ---- */

/* at[0..size]: n units over size ranks, as even as whole multiples of
 * align allow (align 1 where n is no multiple of it or too small). */
static void split_even(int n, int size, int align, int *at)
{
    if (align < 1 || n % align != 0 || n / align < size)
        align = 1;
    const int64_t units = n / align;
    for (int r = 0; r <= size; r++)
        at[r] = (int)(units * r / size) * align;
}

/* Where the heads split unevenly (SmolLM2's 3 kv heads over 2 ranks: 3
 * and 6 query heads), the dense FFN's hidden units even out each rank's
 * weights: a rank with fewer q, k, v rows takes more gate and up rows, in
 * whole 16-row panels, at least one panel each. Any split gives the same
 * bits. The ranks still meet at a gather after each part, so each waits
 * out the other's larger share of one part (the attention's, then the
 * FFN's); an even FFN split, which leaves only the first wait, gained
 * 2-4% at most, within the spread (docs/benchmarking.md, 2026-12-06). */
static void balance_ff(const bt_hparams_t *hp, bt_share_t *s)
{
    const int T = s->size, unit = BT_MATMUL_ROWS;
    if (T < 2 || hp->n_ff % unit != 0 || hp->n_ff / unit < T)
        return;
    double attn[BT_TP_MAX], mean = 0.0; /* q, k, v rows a rank holds, per hidden unit's 2 */
    for (int r = 0, kv0, kv1; r < T; r++) {
        bt_share_kv(s, hp, r, &kv0, &kv1);
        attn[r] = (double)(s->head[r + 1] - s->head[r] + 2 * (kv1 - kv0)) * hp->head_dim / 2.0;
        mean += attn[r] / T;
    }
    int at = 0;
    for (int r = 0; r < T; r++) {
        s->ff[r] = at;
        const int left = hp->n_ff / unit - at / unit; /* panels for ranks r.. */
        int panels = (int)((double)hp->n_ff / T / unit + (mean - attn[r]) / unit + 0.5);
        panels = panels < 1 ? 1 : panels;
        panels = panels > left - (T - 1 - r) ? left - (T - 1 - r) : panels;
        at += r == T - 1 ? left * unit : panels * unit;
    }
    s->ff[T] = hp->n_ff;
}

/* Hidden units of a dense FFN under sum: split where ffn_down's column
 * blocks allow (256 for the K formats, 32 for the others, 16 as rows). */
static int sum_ff_align(const bt_hparams_t *hp, int size)
{
    static const int aligns[] = {256, 32, BT_MATMUL_ROWS};
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++)
        if (hp->n_ff % aligns[i] == 0 && hp->n_ff / aligns[i] >= size)
            return aligns[i];
    return 1;
}

bt_status_t bt_share_init(const bt_hparams_t *hp, int rank, int size, bool sum,
                          bt_share_t *out)
{
    if (size < 1 || size > BT_TP_MAX || rank < 0 || rank >= size) {
        bt_log_error("tensor parallelism: %d tensor ranks per stage is outside 1..%d", size,
                     BT_TP_MAX);
        return BT_ERR_ARG;
    }
    const struct {
        const char *what;
        int n;
    } dims[] = {{"query heads", hp->n_head},
                {"embedding features (n_embd)", hp->n_embd},
                {"feed-forward hidden units (n_ff)", hp->n_ff},
                {"experts", hp->n_expert},
                {"vocabulary rows", hp->n_vocab}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].n > 0 && dims[i].n < size) {
            bt_log_error("tensor parallelism: %d tensor ranks per stage, but the model has %d "
                         "%s: each tensor rank needs at least one", size, dims[i].n,
                         dims[i].what);
            return BT_ERR_ARG;
        }
    if (size > 1 && hp->arch->mla) {
        bt_log_error("tensor parallelism: %d tensor ranks per stage, but tensor parallelism of "
                     "Multi-head Latent Attention (architecture '%s') is not implemented; split "
                     "it by layers (-sm layer)", size, hp->arch->name);
        return BT_ERR_UNSUPPORTED;
    }
    bt_share_t s = {.rank = rank, .size = size, .sum = sum && size > 1};
    if (size <= hp->n_head_kv) { /* whole kv groups */
        const int group = hp->n_head / hp->n_head_kv;
        split_even(hp->n_head_kv, size, 1, s.head);
        for (int r = 0; r <= size; r++)
            s.head[r] *= group;
    } else {
        split_even(hp->n_head, size, 1, s.head);
    }
    split_even(hp->n_embd, size, BT_MATMUL_ROWS, s.embd);
    if (s.sum) {
        split_even(hp->n_ff, size, sum_ff_align(hp, size), s.ff);
    } else {
        split_even(hp->n_ff, size, BT_MATMUL_ROWS, s.ff);
        balance_ff(hp, &s);
    }
    split_even(hp->n_expert, size, 1, s.expert);
    split_even(hp->n_vocab, size, BT_MATMUL_ROWS, s.vocab);
    *out = s;
    return BT_OK;
}

void bt_share_kv(const bt_share_t *s, const bt_hparams_t *hp, int r, int *kv0, int *kv1)
{
    const int group = hp->n_head / hp->n_head_kv;
    *kv0 = s->head[r] / group;
    *kv1 = (s->head[r + 1] - 1) / group + 1;
}

int bt_share_largest(const int *at, int size)
{
    int most = 0;
    for (int r = 0; r < size; r++)
        most = at[r + 1] - at[r] > most ? at[r + 1] - at[r] : most;
    return most;
}

bool bt_share_whole_groups(const bt_share_t *s, const bt_hparams_t *hp)
{
    const int group = hp->n_head / hp->n_head_kv;
    for (int r = 0; r <= s->size; r++)
        if (s->head[r] % group != 0)
            return false;
    return true;
}

/* Rank r's range [*lo, *hi) of the dimension that splits kind: rows of a
 * matrix, values of a vector, experts of a 3-D tensor (and of the
 * per-expert biases, in whole experts). False for a kind that every rank
 * holds whole. */
static bool kind_range(const bt_share_t *s, const bt_hparams_t *hp, int r, int kind,
                       int64_t *lo, int64_t *hi)
{
    int kv0, kv1;
    const int64_t hd = hp->head_dim;
    switch (kind) {
    case BT_LT_Q: case BT_LT_Q_BIAS:
        *lo = s->head[r] * hd, *hi = s->head[r + 1] * hd;
        return true;
    case BT_LT_SINKS:
        *lo = s->head[r], *hi = s->head[r + 1];
        return true;
    case BT_LT_K: case BT_LT_V: case BT_LT_K_BIAS: case BT_LT_V_BIAS:
        bt_share_kv(s, hp, r, &kv0, &kv1);
        *lo = kv0 * hd, *hi = kv1 * hd;
        return true;
    case BT_LT_O: /* sum: the columns of its heads */
        *lo = s->sum ? s->head[r] * hd : s->embd[r];
        *hi = s->sum ? s->head[r + 1] * hd : s->embd[r + 1];
        return true;
    case BT_LT_DOWN: /* sum: the columns of its hidden units */
        *lo = s->sum ? s->ff[r] : s->embd[r];
        *hi = s->sum ? s->ff[r + 1] : s->embd[r + 1];
        return true;
    case BT_LT_O_BIAS: /* sum: whole, added once to the sum */
        *lo = s->embd[r], *hi = s->embd[r + 1];
        return !s->sum;
    case BT_LT_GATE: case BT_LT_UP:
        *lo = s->ff[r], *hi = s->ff[r + 1];
        return true;
    case BT_LT_GATE_EXPS: case BT_LT_UP_EXPS: case BT_LT_DOWN_EXPS:
    case BT_LT_GATE_EXPS_BIAS: case BT_LT_UP_EXPS_BIAS: case BT_LT_DOWN_EXPS_BIAS:
        *lo = s->expert[r], *hi = s->expert[r + 1];
        return true;
    default:
        return false;
    }
}

/* Experts this rank holds (all of them without tensor parallelism). */
static int local_experts(const bt_model_t *m)
{
    return m->share.expert[m->share.rank + 1] - m->share.expert[m->share.rank];
}

/* The matrices a bound tensor of this shape holds: the rank's experts, or
 * every head (MLA's k_b and v_b), else 1. */
static int matrices_of(const bt_model_t *m, const bt_lt_info_t *li)
{
    return li->ne2 == BT_DIM_EXPERT ? local_experts(m) : li->ne2 == BT_DIM_NHEAD ? m->hp.n_head : 1;
}

/* Values of a bound f32 tensor of kind as this rank holds it. */
static int64_t vector_len(const bt_model_t *m, int kind)
{
    const bt_lt_info_t *li = &bt_lt_info[kind];
    const int64_t whole = dim_of(&m->hp, li->ne0) * dim_of(&m->hp, li->ne1);
    int64_t lo, hi;
    if (!kind_range(&m->share, &m->hp, m->share.rank, kind, &lo, &hi))
        return whole;
    return li->ne1 == BT_DIM_EXPERT ? (hi - lo) * dim_of(&m->hp, li->ne0) : hi - lo;
}

/* Binds a tensor the checks above passed (or NULL when absent). */
static const bt_gguf_tensor_t *bind_tensor(bt_model_t *m, const char *name)
{
    const bt_gguf_tensor_t *t = bt_gguf_find_tensor(m->gguf, name);
    if (t != NULL)
        m->weight_bytes += t->n_bytes;
    return t;
}

static bt_matrix_t matrix_of(const bt_gguf_tensor_t *t)
{
    uint64_t row_bytes;
    bt_type_row_bytes(t->type, t->ne[0], &row_bytes); /* validated by gguf */
    return (bt_matrix_t){t->data, t->type, (int64_t)t->ne[0], (int64_t)t->ne[1], row_bytes, NULL};
}

/* Where each per-layer tensor goes in bt_layer_t. */
static const size_t lt_field[BT_LT_COUNT] = {
    [BT_LT_ATTN_NORM] = offsetof(bt_layer_t, attn_norm),
    [BT_LT_Q] = offsetof(bt_layer_t, wq),
    [BT_LT_K] = offsetof(bt_layer_t, wk),
    [BT_LT_V] = offsetof(bt_layer_t, wv),
    [BT_LT_Q_BIAS] = offsetof(bt_layer_t, q_bias),
    [BT_LT_K_BIAS] = offsetof(bt_layer_t, k_bias),
    [BT_LT_V_BIAS] = offsetof(bt_layer_t, v_bias),
    [BT_LT_Q_NORM] = offsetof(bt_layer_t, q_norm),
    [BT_LT_K_NORM] = offsetof(bt_layer_t, k_norm),
    [BT_LT_O] = offsetof(bt_layer_t, wo),
    [BT_LT_O_BIAS] = offsetof(bt_layer_t, o_bias),
    [BT_LT_SINKS] = offsetof(bt_layer_t, sinks),
    [BT_LT_POST_ATTN_NORM] = offsetof(bt_layer_t, post_attn_norm),
    [BT_LT_FFN_NORM] = offsetof(bt_layer_t, ffn_norm),
    [BT_LT_GATE] = offsetof(bt_layer_t, w_gate),
    [BT_LT_UP] = offsetof(bt_layer_t, w_up),
    [BT_LT_DOWN] = offsetof(bt_layer_t, w_down),
    [BT_LT_ROUTER] = offsetof(bt_layer_t, router),
    [BT_LT_ROUTER_BIAS] = offsetof(bt_layer_t, router_bias),
    [BT_LT_GATE_EXPS_BIAS] = offsetof(bt_layer_t, gate_exps_bias),
    [BT_LT_UP_EXPS_BIAS] = offsetof(bt_layer_t, up_exps_bias),
    [BT_LT_DOWN_EXPS_BIAS] = offsetof(bt_layer_t, down_exps_bias),
    [BT_LT_GATE_EXPS] = offsetof(bt_layer_t, gate_exps),
    [BT_LT_UP_EXPS] = offsetof(bt_layer_t, up_exps),
    [BT_LT_DOWN_EXPS] = offsetof(bt_layer_t, down_exps),
    [BT_LT_POST_FFN_NORM] = offsetof(bt_layer_t, post_ffn_norm),
    [BT_LT_Q_A] = offsetof(bt_layer_t, q_a),
    [BT_LT_Q_A_NORM] = offsetof(bt_layer_t, q_a_norm),
    [BT_LT_Q_B] = offsetof(bt_layer_t, q_b),
    [BT_LT_KV_A] = offsetof(bt_layer_t, kv_a),
    [BT_LT_KV_A_NORM] = offsetof(bt_layer_t, kv_a_norm),
    [BT_LT_K_B] = offsetof(bt_layer_t, k_b),
    [BT_LT_V_B] = offsetof(bt_layer_t, v_b),
    [BT_LT_GATE_SHEXP] = offsetof(bt_layer_t, gate_shexp),
    [BT_LT_UP_SHEXP] = offsetof(bt_layer_t, up_shexp),
    [BT_LT_DOWN_SHEXP] = offsetof(bt_layer_t, down_shexp),
    [BT_LT_EXP_PROBS_B] = offsetof(bt_layer_t, exp_probs_b),
};

static bt_status_t bind_layer(bt_model_t *m, int il, bt_layer_t *l)
{
    const bt_hparams_t *hp = &m->hp;
    const bt_lt_set_t bits = layer_allowed(hp, il);
    for (int kind = 0; kind < BT_LT_COUNT; kind++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.%s", il, bt_arch_suffix(hp->arch, kind));
        const bt_gguf_tensor_t *t = bits & BT_LT_BIT(kind) ? bind_tensor(m, name) : NULL;
        if (t == NULL)
            continue;
        char *field = (char *)l + lt_field[kind];
        if (bt_lt_f32(&bt_lt_info[kind]))
            *(const float **)(void *)field = t->data;
        else
            *(bt_matrix_t *)(void *)field = matrix_of(t);
    }
    bool local;
    bt_status_t st = layer_is_local(m->gguf, hp, il, &local);
    l->window = local ? hp->n_swa : 0;
    l->rope_base = local ? hp->rope_base_swa : hp->rope_base;
    /* gemma3: scaling stretches the global layers only (llama.cpp) */
    l->rope_freq_scale = local && hp->arch->swa_rope_unscaled ? 1.0f : hp->rope_freq_scale;
    return st;
}

static bt_status_t bind_all(bt_model_t *m)
{
    bt_status_t st;
    m->tied = bt_gguf_find_tensor(m->gguf, "output.weight") == NULL;
    if (m->with_embed || (m->with_head && m->tied))
        m->tok_embd = matrix_of(bind_tensor(m, "token_embd.weight"));
    if (m->last > m->first) {
        const bt_gguf_tensor_t *f = bind_tensor(m, "rope_freqs.weight");
        m->rope_factors = f != NULL ? f->data : NULL; /* check_tensors: only where allowed */
    }
    for (int il = m->first; il < m->last; il++)
        if ((st = bind_layer(m, il, &m->layers[il - m->first])))
            return st;
    if (m->with_head) {
        m->out_norm = bind_tensor(m, "output_norm.weight")->data;
        m->output = m->tied ? m->tok_embd : matrix_of(bind_tensor(m, "output.weight"));
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
    if ((st = read_hparams(m->gguf, &m->hp)) || (st = check_tensors(m->gguf, &m->hp))) {
        bt_model_free(m);
        return st;
    }
    uint32_t ft;
    m->file_type = bt_gguf_get_u32(m->gguf, "general.file_type", &ft) == BT_OK ? ft : 0;
    bt_share_init(&m->hp, 0, 1, false, &m->share); /* the whole model: cannot fail */
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

/* Narrows a bound matrix to rows [lo, hi). */
static void narrow_rows(bt_matrix_t *x, int64_t lo, int64_t hi)
{
    x->data = (const uint8_t *)x->data + (size_t)lo * x->row_bytes;
    x->n_out = hi - lo;
}

/* The whole pages inside [p, p + bytes). */
static void page_range(const void *p, size_t bytes, char **lo, size_t *len)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), b = ((uintptr_t)p + bytes) & ~(page - 1);
    *lo = (char *)a;
    *len = b > a ? b - a : 0;
}

/* Whether p lies in the model's file mapping: its pages can be dropped
 * and read again (not a column share's copy, nor a borrowed buffer). */
static bool in_file(const bt_model_t *m, const void *p)
{
    const uint8_t *b = p;
    return bt_gguf_file_mapped(m->gguf) && b >= m->gguf->map &&
           b < m->gguf->map + m->gguf->file_size;
}

/* Whether a matrix of kind is cut by its input columns under s. */
static bool by_columns(const bt_share_t *s, int kind)
{
    return s->sum && (kind == BT_LT_O || kind == BT_LT_DOWN);
}

/* Bytes of columns [lo, hi) of every row of x, or 0 (with one message)
 * where lo or hi is not on a block boundary of x's type. */
static size_t column_bytes(const bt_model_t *m, const bt_matrix_t *x, int il, int kind,
                           int64_t lo, int64_t hi)
{
    const bt_type_info_t *ti = bt_type_info(x->type);
    if (lo % ti->block_size != 0 || hi % ti->block_size != 0) {
        bt_log_error("model: %s: --tp-comm allreduce cuts blk.%d.%s by its columns at %lld and "
                     "%lld, but its type %s stores blocks of %lld: use --tp-comm gather, or "
                     "a -tp whose shares fall on whole blocks",
                     m->gguf->path, il, bt_arch_suffix(m->hp.arch, kind), (long long)lo,
                     (long long)hi, ti->name, (long long)ti->block_size);
        return 0;
    }
    return (size_t)((hi - lo) / ti->block_size) * ti->block_bytes * (size_t)x->n_out;
}

/* x narrowed to columns [lo, hi) (whole blocks), its rows copied out to
 * dst; the mapped pages they came from are dropped where the file is
 * mapped (each row is a few KiB: a rank reading its columns touched every
 * page). */
static void narrow_columns(const bt_model_t *m, bt_matrix_t *x, int64_t lo, int64_t hi,
                           uint8_t *dst)
{
    const bt_type_info_t *ti = bt_type_info(x->type);
    const size_t off = (size_t)(lo / ti->block_size) * ti->block_bytes;
    const size_t row = (size_t)((hi - lo) / ti->block_size) * ti->block_bytes;
    for (int64_t r = 0; r < x->n_out; r++)
        memcpy(dst + (size_t)r * row, (const uint8_t *)x->data + (size_t)r * x->row_bytes + off,
               row);
    char *plo;
    size_t len;
    page_range(x->data, x->row_bytes * (size_t)x->n_out, &plo, &len);
    if (in_file(m, x->data) && len > 0)
        madvise(plo, len, MADV_DONTNEED);
    *x = (bt_matrix_t){dst, x->type, hi - lo, x->n_out, row, NULL};
}

/* Under share->sum: the columns of every bound attn_output and ffn_down,
 * each copied into its own block (m->slices), so that bt_model_pack can
 * let each go as soon as it is packed. */
static bt_status_t shard_columns(bt_model_t *m, const bt_share_t *share)
{
    const int n_layer = m->last - m->first;
    m->slices = calloc((size_t)n_layer * 2 + 1, sizeof *m->slices);
    if (m->slices == NULL)
        return BT_ERR_NOMEM;
    for (int i = 0; i < n_layer; i++)
        for (int kind = 0; kind < BT_LT_COUNT; kind++) {
            bt_matrix_t *x = (bt_matrix_t *)(void *)((char *)&m->layers[i] + lt_field[kind]);
            int64_t lo, hi;
            if (!by_columns(share, kind) || x->data == NULL ||
                !kind_range(share, &m->hp, share->rank, kind, &lo, &hi))
                continue;
            const size_t bytes = column_bytes(m, x, m->first + i, kind, lo, hi);
            if (bytes == 0)
                return BT_ERR_ARG;
            uint8_t *dst = bt_alloc_huge(bytes);
            if (dst == NULL) {
                bt_log_error("model: %s: cannot allocate %zu bytes for a column share",
                             m->gguf->path, bytes);
                return BT_ERR_NOMEM;
            }
            m->slices[m->n_slices++] = dst;
            narrow_columns(m, x, lo, hi, dst);
        }
    return BT_OK;
}

/* Frees column share p (NULL: all of them); whether p was one. */
static bool free_slices(bt_model_t *m, const void *p)
{
    bool found = false;
    for (int i = 0; i < m->n_slices; i++)
        if (m->slices[i] != NULL && (p == NULL || m->slices[i] == p)) {
            free(m->slices[i]);
            m->slices[i] = NULL;
            found = true;
        }
    return found;
}

bt_status_t bt_model_shard(bt_model_t *m, const bt_share_t *share)
{
    if (m->layers == NULL || m->weights_copy != NULL || m->packed_copy != NULL ||
        m->share.size != 1) {
        bt_log_error("model: %s: shard after binding, once, before the weights are placed",
                     m->gguf->path);
        return BT_ERR_ARG;
    }
    m->share = *share;
    const int r = share->rank;
    bt_status_t st = share->sum ? shard_columns(m, share) : BT_OK;
    if (st != BT_OK)
        return st;
    for (int i = 0; i < m->last - m->first; i++)
        for (int kind = 0; kind < BT_LT_COUNT; kind++) {
            char *field = (char *)&m->layers[i] + lt_field[kind];
            const bt_lt_info_t *li = &bt_lt_info[kind];
            int64_t lo, hi;
            if (by_columns(share, kind) || !kind_range(share, &m->hp, r, kind, &lo, &hi))
                continue;
            if (bt_lt_f32(li)) {
                const float **v = (const float **)(void *)field;
                const int64_t unit = li->ne1 == BT_DIM_EXPERT ? dim_of(&m->hp, li->ne0) : 1;
                if (*v != NULL)
                    *v += lo * unit;
                continue;
            }
            bt_matrix_t *x = (bt_matrix_t *)(void *)field;
            if (x->data == NULL)
                continue;
            if (li->ne2 == BT_DIM_EXPERT) /* whole experts */
                x->data = (const uint8_t *)x->data + (size_t)lo * (size_t)x->n_out * x->row_bytes;
            else
                narrow_rows(x, lo, hi);
        }
    if (m->with_head) {
        m->output = m->tied ? m->tok_embd : m->output;
        narrow_rows(&m->output, share->vocab[r], share->vocab[r + 1]);
    }
    if (!m->with_embed)
        m->tok_embd = (bt_matrix_t){0}; /* bound only for a tied head, which now has its rows */
    int n = bound_weights(m, NULL, 0);
    weight_ref_t *w = malloc(sizeof *w * (size_t)(n ? n : 1));
    if (w == NULL)
        return BT_ERR_NOMEM;
    bound_weights(m, w, n);
    m->weight_bytes = 0;
    for (int i = 0; i < n; i++)
        m->weight_bytes += w[i].bytes;
    free(w);
    return BT_OK;
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

/* Appends (field, bytes) when the field points at a tensor. */
static void add_ref(weight_ref_t *w, int cap, int *n, const void **field, size_t bytes)
{
    if (*field == NULL)
        return;
    if (*n < cap)
        w[*n] = (weight_ref_t){field, bytes};
    (*n)++;
}

static void add_matrix(weight_ref_t *w, int cap, int *n, bt_matrix_t *x)
{
    add_ref(w, cap, n, &x->data, x->row_bytes * (size_t)x->n_out);
}

/* Every bound tensor once, as (field, bytes); returns the count (at most
 * cap written). A tied head shares token_embd's field and is left out. */
static int bound_weights(bt_model_t *m, weight_ref_t *w, int cap)
{
    int n = 0;
    add_matrix(w, cap, &n, &m->tok_embd);
    add_ref(w, cap, &n, (const void **)&m->rope_factors, sizeof(float) * (size_t)m->hp.n_rot / 2);
    for (int i = 0; i < m->last - m->first; i++)
        for (int kind = 0; kind < BT_LT_COUNT; kind++) {
            char *field = (char *)&m->layers[i] + lt_field[kind];
            const bt_lt_info_t *li = &bt_lt_info[kind];
            if (bt_lt_f32(li))
                add_ref(w, cap, &n, (const void **)(void *)field,
                        sizeof(float) * (size_t)vector_len(m, kind));
            else { /* a 3-D tensor: its experts' (or heads') matrices at once */
                bt_matrix_t *x = (bt_matrix_t *)(void *)field;
                add_ref(w, cap, &n, &x->data,
                        x->row_bytes * (size_t)x->n_out * (size_t)matrices_of(m, li));
            }
        }
    add_ref(w, cap, &n, (const void **)&m->out_norm, sizeof(float) * (size_t)m->hp.n_embd);
    if (!m->tied || m->tok_embd.data == NULL) /* a tied head inside the bound table: once */
        add_matrix(w, cap, &n, &m->output);
    return n;
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
        if (in_file(m, src) && len > 0) /* the file's pages are no longer ours to keep */
            madvise(lo, len, MADV_DONTNEED);
    }
    if (m->tied && m->with_head && m->tok_embd.data != NULL)
        m->output.data = (const uint8_t *)m->tok_embd.data +
                         (size_t)m->share.vocab[m->share.rank] * m->tok_embd.row_bytes;
    m->weights_copy = buf;
    free_slices(m, NULL); /* the column shares are in buf now */
    free(w);
    return BT_OK;
}

/* The bound matrices the ops multiply with (the head's, tied or not, but
 * not the embedding's rows, which are looked up): each layer's kinds that
 * are matrices, in this order, then the head; how many, and the i-th. */
static const int matrix_kinds[] = {
    BT_LT_Q,         BT_LT_K,        BT_LT_V,          BT_LT_O,          BT_LT_GATE,
    BT_LT_UP,        BT_LT_DOWN,     BT_LT_ROUTER,     BT_LT_GATE_EXPS,  BT_LT_UP_EXPS,
    BT_LT_DOWN_EXPS, BT_LT_Q_A,      BT_LT_Q_B,        BT_LT_KV_A,       BT_LT_K_B,
    BT_LT_V_B,       BT_LT_GATE_SHEXP, BT_LT_UP_SHEXP, BT_LT_DOWN_SHEXP};
enum { LAYER_MATRICES = sizeof matrix_kinds / sizeof matrix_kinds[0] };

static int n_bound_matrices(const bt_model_t *m)
{
    return LAYER_MATRICES * (m->last - m->first) + (m->with_head ? 1 : 0);
}

/* The i-th bound matrix and how many matrices it holds (the rank's
 * experts of an expert tensor, the heads of MLA's k_b and v_b, each
 * packed at bt_expert_packed_stride). */
static bt_matrix_t *bound_matrix(bt_model_t *m, int i, int *n_mat)
{
    *n_mat = 1;
    if (i == LAYER_MATRICES * (m->last - m->first))
        return &m->output;
    const int kind = matrix_kinds[i % LAYER_MATRICES];
    *n_mat = matrices_of(m, &bt_lt_info[kind]);
    return (bt_matrix_t *)(void *)((char *)&m->layers[i / LAYER_MATRICES] + lt_field[kind]);
}

/* Packed bytes of bound matrix i (0: absent, or no packed layout). */
static size_t packed_bytes(bt_model_t *m, int i)
{
    int n_mat;
    const bt_matrix_t *w = bound_matrix(m, i, &n_mat);
    return w->data != NULL ? bt_expert_packed_stride(w) * (size_t)n_mat : 0;
}

/* Packs x into dst PACK_CHUNK rows at a time (whole 16-row panels, the
 * packed layout's unit, in whole groups of 8 of them, cpu_fpanel.c's
 * interleaved unit: so the bytes are those of one call); with drop
 * (mapped weights), each chunk's file pages go as soon as it is packed,
 * so a large matrix (a vocabulary's head) is never held twice: a rank's
 * peak memory is its weights, not its weights plus its largest matrix. */
#define PACK_CHUNK 128
static void pack_chunks(const bt_matrix_t *x, char *dst, bool drop)
{
    bt_matrix_t panel = *x;
    panel.n_out = 16;
    const size_t panel_bytes = bt_pack_bytes(&panel);
    for (int64_t r0 = 0; r0 < x->n_out; r0 += PACK_CHUNK) {
        bt_matrix_t c = *x;
        c.data = (const uint8_t *)x->data + (size_t)r0 * x->row_bytes;
        c.n_out = x->n_out - r0 < PACK_CHUNK ? x->n_out - r0 : PACK_CHUNK;
        bt_pack(&c, dst + (size_t)(r0 / 16) * panel_bytes);
        char *lo;
        size_t len;
        page_range(c.data, x->row_bytes * (size_t)c.n_out, &lo, &len);
        if (drop && len > 0)
            madvise(lo, len, MADV_DONTNEED);
    }
}

uint64_t bt_model_pack_bytes(bt_model_t *m)
{
    uint64_t total = 0;
    for (int i = 0; i < n_bound_matrices(m); i++)
        total += packed_bytes(m, i);
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
        int n_mat;
        bt_matrix_t *w = bound_matrix(m, i, &n_mat);
        const size_t bytes = packed_bytes(m, i);
        if (bytes == 0)
            continue;
        const bool drop = m->weights_copy == NULL && in_file(m, w->data); /* mapped */
        for (int e = 0; e < n_mat; e++) { /* experts one after another */
            const bt_matrix_t x = bt_expert(w, e);
            pack_chunks(&x, buf + (size_t)e * bt_expert_packed_stride(w), drop);
        }
        w->packed = buf;
        buf += bytes;
        m->packed_bytes += bytes;
        char *lo;
        size_t len;
        page_range(w->data, w->row_bytes * (size_t)w->n_out * (size_t)n_mat, &lo, &len);
        if (drop && len > 0) /* mapped: the file's pages are not needed now */
            madvise(lo, len, MADV_DONTNEED);
        /* a column share's copy goes too: the cpu set reads only the packed
         * layout, and a read of data would fault, not find stale bytes */
        if (w->data != NULL && free_slices(m, w->data))
            w->data = NULL;
    }
    return st;
}

/* The kinds bt_model_pack packs (bound_matrix's list). */
static bool packed_kind(int kind)
{
    for (int i = 0; i < LAYER_MATRICES; i++)
        if (matrix_kinds[i] == kind)
            return true;
    return false;
}

/* Bytes a tensor holds while it runs: its file bytes, or its packed copy
 * (the mapped pages dropped), or both when read in and packed. */
static uint64_t held_bytes(const bt_gguf_tensor_t *t, bool matrix, bool packed, bool read_in)
{
    if (!matrix || !packed)
        return t->n_bytes;
    const bt_matrix_t x = matrix_of(t);
    const uint64_t pack = (uint64_t)bt_expert_packed_stride(&x) * (t->n_dims > 2 ? t->ne[2] : 1);
    return pack == 0 ? t->n_bytes : pack + (read_in ? t->n_bytes : 0);
}

/* The largest part of kind's split dimension that any rank of s holds,
 * as a fraction of the whole (1 for a kind every rank holds whole). */
static double share_fraction(const bt_share_t *s, const bt_hparams_t *hp, int kind)
{
    int64_t lo, hi, first = 0, last = 0, most = 0;
    if (s->size == 1 || !kind_range(s, hp, 0, kind, &lo, &hi))
        return 1.0;
    for (int r = 0; r < s->size; r++) {
        kind_range(s, hp, r, kind, &lo, &hi);
        most = hi - lo > most ? hi - lo : most;
        first = r == 0 ? lo : first;
        last = hi;
    }
    return last > first ? (double)most / (double)(last - first) : 1.0;
}

static uint64_t part_of(uint64_t bytes, double fraction)
{
    return fraction >= 1.0 ? bytes : (uint64_t)((double)bytes * fraction) + 64;
}

void bt_model_memory_share(const bt_model_t *m, int tp, bool sum, bool packed, bool read_in,
                           uint64_t *layer, uint64_t *embed, uint64_t *head, uint64_t *every)
{
    const bt_gguf_t *g = m->gguf;
    const bt_arch_t *a = m->hp.arch;
    const bt_lt_set_t allowed = layer_allowed(&m->hp, 0) | layer_allowed(&m->hp, m->hp.n_layer - 1);
    const bool tied = bt_gguf_find_tensor(g, "output.weight") == NULL;
    bt_share_t s;
    /* a layout refused elsewhere: count it whole */
    if (bt_share_init(&m->hp, 0, tp, sum, &s) != BT_OK)
        bt_share_init(&m->hp, 0, 1, false, &s);
    const double vocab_most = (double)bt_share_largest(s.vocab, s.size) / m->hp.n_vocab;
    memset(layer, 0, sizeof *layer * (size_t)m->hp.n_layer);
    *embed = *head = *every = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const bt_gguf_tensor_t *t = &g->tensors[i];
        int il = 0, kind = layer_tensor_kind(a, allowed, t->name, &il);
        if (kind >= 0 && il < m->hp.n_layer) {
            layer[il] += part_of(held_bytes(t, packed_kind(kind), packed, read_in),
                                 share_fraction(&s, &m->hp, kind));
        } else if (bt_gguf_str_eq(t->name, "token_embd.weight")) {
            *embed += t->n_bytes; /* rows looked up, never packed */
            if (tied)
                *head += part_of(held_bytes(t, true, packed, read_in), vocab_most);
        } else if (bt_gguf_str_eq(t->name, "output.weight")) {
            *head += part_of(held_bytes(t, true, packed, read_in), vocab_most);
        } else if (bt_gguf_str_eq(t->name, "output_norm.weight")) {
            *head += t->n_bytes;
        } else {
            *every += t->n_bytes; /* rope_freqs.weight: bound with the layers */
        }
    }
}

void bt_model_memory(const bt_model_t *m, bool packed, bool read_in, uint64_t *layer,
                     uint64_t *embed, uint64_t *head, uint64_t *every)
{
    bt_model_memory_share(m, 1, false, packed, read_in, layer, embed, head, every);
}

void bt_model_free(bt_model_t *m)
{
    if (m == NULL)
        return;
    free(m->packed_copy);
    free(m->weights_copy);
    free_slices(m, NULL);
    free(m->slices);
    free(m->layers);
    bt_gguf_close(m->gguf);
    free(m);
}

double bt_layer_weights_per_token(const bt_hparams_t *hp, int il)
{
    const double e = hp->n_embd, h = hp->n_head;
    double att;
    if (hp->arch->mla) {
        const double nope = hp->d_qk - hp->n_rot, kvl = hp->kv_lora;
        att = (hp->q_lora > 0 ? e * hp->q_lora + hp->q_lora * h * hp->d_qk : e * h * hp->d_qk) +
              e * (kvl + hp->n_rot) + h * nope * kvl + h * kvl * hp->d_v + h * hp->d_v * e;
    } else {
        const double q = h * hp->head_dim, kv = (double)hp->n_head_kv * hp->head_dim;
        att = e * (2 * q + 2 * kv);
    }
    const double ffn = moe_layer(hp, il) ? e * hp->n_expert +
                                               3 * e * hp->n_ff_exp * hp->n_expert_used +
                                               3 * e * hp->n_ff_shexp
                                         : 3 * e * hp->n_ff;
    return att + ffn;
}

int64_t bt_hparams_max_n_in(const bt_hparams_t *hp)
{
    const int64_t dims[] = {hp->n_embd, (int64_t)hp->n_head * hp->head_dim, hp->n_ff,
                            hp->n_ff_exp, (int64_t)hp->n_head * hp->d_v, hp->q_lora,
                            hp->kv_lora, hp->n_ff_shexp};
    int64_t n = 0;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        n = dims[i] > n ? dims[i] : n;
    return n;
}

int64_t bt_model_max_n_in(const bt_model_t *m)
{
    return m->last > m->first ? bt_hparams_max_n_in(&m->hp) : m->hp.n_embd;
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
        {18, "Q6_K"},   {32, "BF16"},   {38, "MXFP4_MOE"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].id == file_type)
            return names[i].name;
    return "unknown";
}
