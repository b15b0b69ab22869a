/*
 * tokenizer.c: GGUF tokenizers (see tokenizer.h).
 *
 * Reads top to bottom in the order data flows: the tables a tokenizer
 * holds, load (metadata -> tables) and free, encode (special-token
 * partition, then BPE: pre-tokenizer scanners -> byte-level pieces ->
 * merges; or SPM: escaped text -> score-driven merges -> byte fallback),
 * decode (pieces and the streaming UTF-8 decoder).
 */
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unicode.h"

#define SPM_SPACE "\xE2\x96\x81" /* U+2581, SentencePiece's space */
#define SPM_SPACE_LEN 3

/* attr: the token type in the low bits, plus this flag. */
#define ATTR_TYPE_MASK 0x0F
#define ATTR_EOG 0x10

/* Pre-tokenizer flags a tokenizer.ggml.pre name implies. */
#define PRE_IGNORE_MERGES 1 /* a piece that is a token is not merged */
#define PRE_ADD_BOS 2       /* add_bos defaults to true */

/* One BPE merge: (left, right) -> result, rank = line in the merges list. */
typedef struct merge_slot {
    int32_t left;   /* -1: empty slot */
    int32_t right;
    int32_t rank;
    int32_t result;
} merge_slot_t;

struct bt_tokenizer {
    bt_tokenizer_kind_t kind;
    bt_tokenizer_pre_t pre;
    int32_t n_vocab;
    char *arena;          /* every token text, NUL-terminated, back to back */
    const char **text;    /* [n_vocab] into arena */
    uint32_t *len;        /* [n_vocab] text lengths in bytes */
    float *score;         /* [n_vocab] SPM merge priority; NULL for BPE */
    uint8_t *attr;        /* [n_vocab] bt_token_type_t | ATTR_EOG */

    int32_t *map;         /* [map_mask + 1] text -> id, open addressing; -1 empty */
    uint64_t map_mask;

    merge_slot_t *merges; /* [merge_mask + 1] BPE only */
    uint64_t merge_mask;
    int32_t n_merges;

    int32_t byte_id[256]; /* BPE: token of the byte's byte-level char;
                           * SPM: <0xXX> token; -1 when absent */
    uint16_t byte_cp[256]; /* GPT-2 byte -> code point */
    int16_t cp_byte[324];  /* code point (< 324) -> byte, -1 if none */

    int32_t *special;     /* ids matched in text before tokenizing, longest first */
    int n_special;

    int32_t bos, eos, eot, unk, pad;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
};

/* ---- small helpers ---- */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t hash_pair(int32_t a, int32_t b)
{
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

static uint64_t pow2_at_least(uint64_t n)
{
    uint64_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the
 * others (0..32, 127..160, 173) become U+0100.. in byte order. */
static void init_byte_level(bt_tokenizer_t *t)
{
    int next = 256;
    for (int i = 0; i < 324; i++)
        t->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        t->byte_cp[b] = (uint16_t)(printable ? b : next++);
        t->cp_byte[t->byte_cp[b]] = (int16_t)b;
    }
}

static bool id_ok(const bt_tokenizer_t *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab;
}

static bt_token_type_t type_of(const bt_tokenizer_t *t, int32_t id)
{
    return (bt_token_type_t)(t->attr[id] & ATTR_TYPE_MASK);
}

int32_t bt_tokenizer_find(const bt_tokenizer_t *t, const char *text, size_t len)
{
    if (t->map == NULL || len == 0)
        return -1;
    for (uint64_t i = hash_bytes(text, len) & t->map_mask;; i = (i + 1) & t->map_mask) {
        int32_t id = t->map[i];
        if (id < 0)
            return -1;
        if (t->len[id] == len && memcmp(t->text[id], text, len) == 0)
            return id;
    }
}

static const merge_slot_t *merge_find(const bt_tokenizer_t *t, int32_t left, int32_t right)
{
    for (uint64_t i = hash_pair(left, right) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const merge_slot_t *m = &t->merges[i];
        if (m->left < 0)
            return NULL;
        if (m->left == left && m->right == right)
            return m;
    }
}

/* ---- load ---- */

/* The array kv under key with elements of type elem. Absent: *out = NULL
 * (an error when required). n_want > 0 also checks the count. */
static bt_status_t get_array(const bt_gguf_t *g, const char *key, bt_gguf_vtype_t elem,
                             const char *elem_name, uint64_t n_want, const char *n_want_key,
                             bool required, const bt_gguf_kv_t **out)
{
    const bt_gguf_kv_t *kv = bt_gguf_find_kv(g, key);
    *out = NULL;
    if (kv == NULL) {
        if (!required)
            return BT_OK;
        bt_log_error("tokenizer: %s: %s is missing", g->path, key);
        return BT_ERR_FORMAT;
    }
    if (kv->type != BT_GGUF_ARRAY || kv->arr_type != elem) {
        bt_log_error("tokenizer: %s: %s must be an array of %s (value type %d, element type %d)",
                     g->path, key, elem_name, (int)kv->type,
                     kv->type == BT_GGUF_ARRAY ? (int)kv->arr_type : -1);
        return BT_ERR_FORMAT;
    }
    if (n_want > 0 && kv->arr_n != n_want) {
        bt_log_error("tokenizer: %s: %s has %llu entries but %s has %llu", g->path, key,
                     (unsigned long long)kv->arr_n, n_want_key, (unsigned long long)n_want);
        return BT_ERR_FORMAT;
    }
    *out = kv;
    return BT_OK;
}

/* A special token id key: absent keeps *id; out of range warns and keeps
 * *id (as llama.cpp); a wrong type is an error. */
static bt_status_t get_special_id(const bt_gguf_t *g, const char *key, int32_t n_vocab,
                                  int32_t *id)
{
    uint32_t v;
    bt_status_t st = bt_gguf_get_u32(g, key, &v);
    if (st == BT_ERR_ARG)
        return BT_OK;
    if (st != BT_OK)
        return st;
    if (v >= (uint32_t)n_vocab) {
        bt_log_warn("tokenizer: %s: %s = %u but the vocabulary has %d tokens; ignored", g->path,
                    key, v, n_vocab);
        return BT_OK;
    }
    *id = (int32_t)v;
    return BT_OK;
}

static bt_status_t get_flag(const bt_gguf_t *g, const char *key, bool *flag)
{
    bool v;
    bt_status_t st = bt_gguf_get_bool(g, key, &v);
    if (st == BT_ERR_ARG)
        return BT_OK;
    if (st == BT_OK)
        *flag = v;
    return st;
}

static const struct {
    const char *name;
    bt_tokenizer_pre_t pre;
    int flags;
} pre_names[] = {
    {"default", BT_PRE_DEFAULT, 0},
    {"llama3", BT_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"llama-v3", BT_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"llama-bpe", BT_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"falcon3", BT_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"falcon-h1", BT_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"pixtral", BT_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"midm-2.0", BT_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"lfm2", BT_PRE_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"dbrx", BT_PRE_LLAMA3, 0},
    {"smaug-bpe", BT_PRE_LLAMA3, 0},
    {"gpt-2", BT_PRE_GPT2, 0},
    {"gpt2", BT_PRE_GPT2, 0},
    {"phi-2", BT_PRE_GPT2, 0},
    {"jina-es", BT_PRE_GPT2, 0},
    {"jina-de", BT_PRE_GPT2, 0},
    {"jina-v2-es", BT_PRE_GPT2, 0},
    {"jina-v2-de", BT_PRE_GPT2, 0},
    {"gigachat", BT_PRE_GPT2, 0},
    {"a.x-4.0", BT_PRE_GPT2, 0},
    {"mellum", BT_PRE_GPT2, 0},
    {"mpt", BT_PRE_GPT2, 0},
    {"olmo", BT_PRE_GPT2, 0},
    {"jais", BT_PRE_GPT2, 0},
    {"trillion", BT_PRE_GPT2, 0},
    {"granite-docling", BT_PRE_GPT2, 0},
    {"exaone4", BT_PRE_GPT2, 0},
    {"smollm", BT_PRE_SMOLLM, 0},
    {"starcoder", BT_PRE_SMOLLM, 0},
    {"refact", BT_PRE_SMOLLM, 0},
    {"command-r", BT_PRE_SMOLLM, 0},
    {"codeshell", BT_PRE_SMOLLM, 0},
    {"exaone", BT_PRE_SMOLLM, 0},
    {"minerva-7b", BT_PRE_SMOLLM, 0},
    {"qwen2", BT_PRE_QWEN2, 0},
    {"deepseek-r1-qwen", BT_PRE_QWEN2, 0},
    {"kormo", BT_PRE_QWEN2, 0},
    {"stablelm2", BT_PRE_QWEN2, 0},
    {"megrez", BT_PRE_QWEN2, 0},
};

static void select_pre(bt_tokenizer_t *t, const bt_gguf_t *g)
{
    bt_gguf_str_t name;
    t->pre = BT_PRE_DEFAULT;
    if (bt_gguf_get_str(g, "tokenizer.ggml.pre", &name) != BT_OK) {
        bt_log_warn("tokenizer: %s: no tokenizer.ggml.pre; using the 'default' pre-tokenizer",
                    g->path);
        return;
    }
    for (size_t i = 0; i < sizeof pre_names / sizeof pre_names[0]; i++) {
        if (bt_gguf_str_eq(name, pre_names[i].name)) {
            t->pre = pre_names[i].pre;
            t->ignore_merges = pre_names[i].flags & PRE_IGNORE_MERGES;
            t->add_bos = pre_names[i].flags & PRE_ADD_BOS;
            return;
        }
    }
    bt_log_warn("tokenizer: %s: pre-tokenizer '%.*s' is not known; using 'default' (as llama.cpp)",
                g->path, (int)(name.len > 64 ? 64 : name.len), name.ptr);
}

/* Copies the token texts, types and scores; builds the text -> id map. */
static bt_status_t load_vocab(bt_tokenizer_t *t, const bt_gguf_t *g)
{
    const bt_gguf_kv_t *tokens, *types, *scores;
    bt_status_t st = get_array(g, "tokenizer.ggml.tokens", BT_GGUF_STRING, "strings", 0, NULL,
                               true, &tokens);
    if (st != BT_OK)
        return st;
    if (tokens->arr_n == 0 || tokens->arr_n > INT32_MAX / 2) {
        bt_log_error("tokenizer: %s: tokenizer.ggml.tokens has %llu entries (need 1..%d)", g->path,
                     (unsigned long long)tokens->arr_n, INT32_MAX / 2);
        return BT_ERR_FORMAT;
    }
    const uint64_t n = tokens->arr_n;
    if ((st = get_array(g, "tokenizer.ggml.token_type", BT_GGUF_INT32, "int32", n,
                        "tokenizer.ggml.tokens", false, &types)) != BT_OK ||
        (st = get_array(g, "tokenizer.ggml.scores", BT_GGUF_FLOAT32, "float32", n,
                        "tokenizer.ggml.tokens", false, &scores)) != BT_OK)
        return st;

    /* The strings were validated by bt_gguf_open; their total size is
     * bounded by the file size. */
    uint64_t pos = 0, total = 0;
    bt_gguf_str_t s;
    while (bt_gguf_arr_next_str(tokens, &pos, &s)) {
        if (s.len > UINT32_MAX - 1) {
            bt_log_error("tokenizer: %s: a token of %llu bytes", g->path,
                         (unsigned long long)s.len);
            return BT_ERR_FORMAT;
        }
        total += s.len + 1;
    }
    t->n_vocab = (int32_t)n;
    t->arena = malloc(total);
    t->text = malloc(n * sizeof *t->text);
    t->len = malloc(n * sizeof *t->len);
    t->attr = malloc(n);
    t->map_mask = pow2_at_least(2 * n) - 1;
    t->map = malloc((t->map_mask + 1) * sizeof *t->map);
    if (t->kind == BT_TOKENIZER_SPM)
        t->score = malloc(n * sizeof *t->score);
    if (t->arena == NULL || t->text == NULL || t->len == NULL || t->attr == NULL ||
        t->map == NULL || (t->kind == BT_TOKENIZER_SPM && t->score == NULL)) {
        bt_log_error("tokenizer: out of memory for %llu tokens", (unsigned long long)n);
        return BT_ERR_NOMEM;
    }
    memset(t->map, 0xFF, (t->map_mask + 1) * sizeof *t->map);

    char *p = t->arena;
    pos = 0;
    for (int32_t id = 0; bt_gguf_arr_next_str(tokens, &pos, &s); id++) {
        memcpy(p, s.ptr, s.len);
        p[s.len] = '\0';
        t->text[id] = p;
        t->len[id] = (uint32_t)s.len;
        p += s.len + 1;

        int32_t type = BT_TOKEN_NORMAL;
        if (types != NULL) {
            memcpy(&type, types->arr_data + (uint64_t)id * 4, 4);
            if (type < BT_TOKEN_NORMAL || type > BT_TOKEN_BYTE)
                type = BT_TOKEN_UNDEFINED;
        }
        t->attr[id] = (uint8_t)type;
        if (t->score != NULL) {
            float f = 0.0f;
            if (scores != NULL)
                memcpy(&f, scores->arr_data + (uint64_t)id * 4, 4);
            t->score[id] = f;
        }

        /* Empty texts can match nothing; a later duplicate wins (as in
         * llama.cpp's token_to_id). */
        if (s.len == 0)
            continue;
        uint64_t i = hash_bytes(s.ptr, s.len) & t->map_mask;
        for (; t->map[i] >= 0; i = (i + 1) & t->map_mask) {
            int32_t o = t->map[i];
            if (t->len[o] == s.len && memcmp(t->text[o], s.ptr, s.len) == 0)
                break;
        }
        t->map[i] = id;
    }
    return BT_OK;
}

/* Parses "left right" merges into the (left id, right id) -> result table. */
static bt_status_t load_merges(bt_tokenizer_t *t, const bt_gguf_t *g)
{
    const bt_gguf_kv_t *kv;
    bt_status_t st = get_array(g, "tokenizer.ggml.merges", BT_GGUF_STRING, "strings", 0, NULL,
                               true, &kv);
    if (st != BT_OK)
        return st;
    if (kv->arr_n > INT32_MAX / 4) {
        bt_log_error("tokenizer: %s: tokenizer.ggml.merges has %llu entries", g->path,
                     (unsigned long long)kv->arr_n);
        return BT_ERR_FORMAT;
    }
    t->merge_mask = pow2_at_least(2 * kv->arr_n) - 1;
    t->merges = malloc((t->merge_mask + 1) * sizeof *t->merges);
    if (t->merges == NULL) {
        bt_log_error("tokenizer: out of memory for %llu merges", (unsigned long long)kv->arr_n);
        return BT_ERR_NOMEM;
    }
    for (uint64_t i = 0; i <= t->merge_mask; i++)
        t->merges[i].left = -1;

    char *joined = NULL;
    size_t joined_cap = 0;
    uint64_t pos = 0;
    bt_gguf_str_t s;
    for (int32_t rank = 0; bt_gguf_arr_next_str(kv, &pos, &s); rank++) {
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        const int shown = (int)(s.len > 80 ? 80 : s.len);
        if (sp == NULL || sp + 1 == s.ptr + s.len) {
            bt_log_error("tokenizer: %s: merge %d '%.*s' is not of the form 'left right'",
                         g->path, rank, shown, s.ptr);
            st = BT_ERR_FORMAT;
            goto out;
        }
        size_t nl = (size_t)(sp - s.ptr), nr = s.len - nl - 1;
        int32_t left = bt_tokenizer_find(t, s.ptr, nl);
        int32_t right = bt_tokenizer_find(t, sp + 1, nr);
        if (left < 0 || right < 0) {
            bt_log_error("tokenizer: %s: merge %d '%.*s' names '%.*s', which is not a token",
                         g->path, rank, shown, s.ptr, left < 0 ? (int)nl : (int)nr,
                         left < 0 ? s.ptr : sp + 1);
            st = BT_ERR_FORMAT;
            goto out;
        }
        if (nl + nr > joined_cap) {
            char *j = realloc(joined, 2 * (nl + nr));
            if (j == NULL) {
                bt_log_error("tokenizer: out of memory parsing merges");
                st = BT_ERR_NOMEM;
                goto out;
            }
            joined = j;
            joined_cap = 2 * (nl + nr);
        }
        memcpy(joined, s.ptr, nl);
        memcpy(joined + nl, sp + 1, nr);
        int32_t result = bt_tokenizer_find(t, joined, nl + nr);
        if (result < 0) {
            bt_log_error("tokenizer: %s: merge %d '%.*s' forms '%.*s%.*s', which is not a token",
                         g->path, rank, shown, s.ptr, (int)nl, s.ptr, (int)nr, sp + 1);
            st = BT_ERR_FORMAT;
            goto out;
        }
        uint64_t i = hash_pair(left, right) & t->merge_mask;
        while (t->merges[i].left >= 0 && !(t->merges[i].left == left && t->merges[i].right == right))
            i = (i + 1) & t->merge_mask;
        if (t->merges[i].left < 0) /* a repeated merge keeps its first rank */
            t->merges[i] = (merge_slot_t){left, right, rank, result};
        t->n_merges = rank + 1;
    }
out:
    free(joined);
    return st;
}

/* Tokens for single bytes: GPT-2's byte alphabet, or SPM's <0xXX> (else
 * the byte itself as a one-byte token, as llama.cpp falls back). */
static void load_byte_tokens(bt_tokenizer_t *t)
{
    for (int b = 0; b < 256; b++) {
        char buf[8];
        int n;
        if (t->kind == BT_TOKENIZER_BPE) {
            n = bt_utf8_encode(t->byte_cp[b], buf);
            t->byte_id[b] = bt_tokenizer_find(t, buf, (size_t)n);
        } else {
            n = snprintf(buf, sizeof buf, "<0x%02X>", b);
            t->byte_id[b] = bt_tokenizer_find(t, buf, (size_t)n);
            if (t->byte_id[b] < 0) {
                buf[0] = (char)b;
                t->byte_id[b] = bt_tokenizer_find(t, buf, 1);
            }
        }
    }
}

static int32_t find_str(const bt_tokenizer_t *t, const char *s)
{
    return bt_tokenizer_find(t, s, strlen(s));
}

/* End-of-generation tokens, found by their text as llama.cpp does. */
static void mark_eog(bt_tokenizer_t *t)
{
    static const char *const eot_names[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
        "<|end_of_text|>", "<EOT>", "_<EOT>", /* "<｜end▁of▁sentence｜>", split so \x9C does not swallow the "e" */
        ("<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"),
        "<end_of_utterance>",
    };
    /* "</s>" is on llama.cpp's list for paddleocr; it applies to every
     * vocabulary, so Gemma 3's user-defined HTML tag "</s>" (212) becomes a
     * control token that ends generation there too. */
    static const char *const eog_names[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>",
        "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>",
        "<end_of_utterance>",
    };
    /* FIM pad, repo and file-separator tokens also end generation. */
    static const char *const fim_groups[3][5] = {
        {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", NULL},
        {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"},
        {"<|file_sep|>", NULL, NULL, NULL, NULL},
    };
    int32_t id;
    if (t->eot < 0) {
        for (size_t i = 0; i < sizeof eot_names / sizeof eot_names[0] && t->eot < 0; i++)
            t->eot = find_str(t, eot_names[i]);
    }
    for (size_t i = 0; i < sizeof eog_names / sizeof eog_names[0]; i++)
        if ((id = find_str(t, eog_names[i])) >= 0)
            t->attr[id] = BT_TOKEN_CONTROL | ATTR_EOG;
    for (int g = 0; g < 3; g++) {
        for (int i = 0; i < 5 && fim_groups[g][i] != NULL; i++) {
            if ((id = find_str(t, fim_groups[g][i])) >= 0) {
                t->attr[id] = BT_TOKEN_CONTROL | ATTR_EOG;
                break;
            }
        }
    }
    /* gpt-oss: with <|return|> and <|call|>, <|end|> only ends a message. */
    int32_t end = find_str(t, "<|end|>");
    if (end >= 0 && find_str(t, "<|return|>") >= 0 && find_str(t, "<|call|>") >= 0)
        t->attr[end] = BT_TOKEN_USER_DEFINED;
    if (t->eos >= 0)
        t->attr[t->eos] |= ATTR_EOG;
    if (t->eot >= 0)
        t->attr[t->eot] |= ATTR_EOG;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static bool is_special_type(bt_token_type_t ty)
{
    return ty == BT_TOKEN_CONTROL || ty == BT_TOKEN_USER_DEFINED || ty == BT_TOKEN_UNKNOWN;
}

/* The tokens partition() looks for: control, user-defined and unknown,
 * longest text first (ties by id). */
static bt_status_t load_specials(bt_tokenizer_t *t)
{
    int n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        n += t->len[id] > 0 && is_special_type(type_of(t, id));
    if (n == 0)
        return BT_OK;
    uint64_t *key = malloc((size_t)n * sizeof *key);
    t->special = malloc((size_t)n * sizeof *t->special);
    if (key == NULL || t->special == NULL) {
        free(key);
        bt_log_error("tokenizer: out of memory for %d special tokens", n);
        return BT_ERR_NOMEM;
    }
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->len[id] > 0 && is_special_type(type_of(t, id)))
            key[t->n_special++] = ((uint64_t)(UINT32_MAX - t->len[id]) << 32) | (uint32_t)id;
    qsort(key, (size_t)n, sizeof *key, cmp_u64);
    for (int i = 0; i < n; i++)
        t->special[i] = (int32_t)(key[i] & 0xFFFFFFFFu);
    free(key);
    return BT_OK;
}

bt_status_t bt_tokenizer_load(const bt_gguf_t *g, bt_tokenizer_t **out)
{
    bt_status_t st;
    bt_tokenizer_t *t = calloc(1, sizeof *t);
    if (t == NULL) {
        bt_log_error("tokenizer: out of memory");
        return BT_ERR_NOMEM;
    }
    t->bos = t->eos = t->eot = t->unk = t->pad = -1;
    init_byte_level(t);

    bt_gguf_str_t model;
    st = bt_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (st == BT_ERR_ARG || (st == BT_OK && (bt_gguf_str_eq(model, "none") ||
                                             bt_gguf_str_eq(model, "no_vocab")))) {
        t->kind = BT_TOKENIZER_NONE; /* loads; encoding says why it cannot */
        *out = t;
        return BT_OK;
    }
    if (st != BT_OK)
        goto fail;
    if (bt_gguf_str_eq(model, "gpt2")) {
        t->kind = BT_TOKENIZER_BPE;
    } else if (bt_gguf_str_eq(model, "llama")) {
        t->kind = BT_TOKENIZER_SPM;
    } else {
        bt_log_error("tokenizer: %s: tokenizer.ggml.model '%.*s' is not supported "
                     "(gpt2, llama, none)",
                     g->path, (int)(model.len > 64 ? 64 : model.len), model.ptr);
        st = BT_ERR_UNSUPPORTED;
        goto fail;
    }

    /* llama.cpp's defaults, before the file's keys override them. */
    if (t->kind == BT_TOKENIZER_SPM) {
        t->bos = 1;
        t->eos = 2;
        t->unk = 0;
        t->add_bos = true;
        t->add_space_prefix = true;
    } else {
        select_pre(t, g);
    }

    if ((st = load_vocab(t, g)) != BT_OK)
        goto fail;
    if (t->kind == BT_TOKENIZER_SPM) {
        /* Defaults that do not fit this vocabulary do not apply. */
        t->bos = id_ok(t, t->bos) ? t->bos : -1;
        t->eos = id_ok(t, t->eos) ? t->eos : -1;
        t->unk = id_ok(t, t->unk) ? t->unk : -1;
    }
    if (t->kind == BT_TOKENIZER_BPE && (st = load_merges(t, g)) != BT_OK)
        goto fail;
    load_byte_tokens(t);

    if ((st = get_special_id(g, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos)) != BT_OK ||
        (st = get_special_id(g, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos)) != BT_OK ||
        (st = get_special_id(g, "tokenizer.ggml.eot_token_id", t->n_vocab, &t->eot)) != BT_OK ||
        (st = get_special_id(g, "tokenizer.ggml.unknown_token_id", t->n_vocab, &t->unk)) !=
            BT_OK ||
        (st = get_special_id(g, "tokenizer.ggml.padding_token_id", t->n_vocab, &t->pad)) !=
            BT_OK)
        goto fail;
    int32_t eom = -1;
    if ((st = get_special_id(g, "tokenizer.ggml.eom_token_id", t->n_vocab, &eom)) != BT_OK)
        goto fail;
    if ((st = get_flag(g, "tokenizer.ggml.add_bos_token", &t->add_bos)) != BT_OK ||
        (st = get_flag(g, "tokenizer.ggml.add_eos_token", &t->add_eos)) != BT_OK ||
        (st = get_flag(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix)) != BT_OK)
        goto fail;

    mark_eog(t);
    if (eom >= 0)
        t->attr[eom] |= ATTR_EOG;
    if ((st = load_specials(t)) != BT_OK)
        goto fail;
    bt_log_debug("tokenizer: %s: %s (pre %s), %d tokens, %d merges, %d special; bos %d eos %d "
                 "eot %d unk %d; add_bos %d add_eos %d",
                 g->path, bt_tokenizer_kind_name(t->kind), bt_tokenizer_pre_name(t->pre),
                 t->n_vocab, t->n_merges, t->n_special, t->bos, t->eos, t->eot, t->unk,
                 t->add_bos, t->add_eos);
    *out = t;
    return BT_OK;

fail:
    bt_tokenizer_free(t);
    return st;
}

void bt_tokenizer_free(bt_tokenizer_t *t)
{
    if (t == NULL)
        return;
    free(t->special);
    free(t->merges);
    free(t->map);
    free(t->score);
    free(t->attr);
    free(t->len);
    free(t->text);
    free(t->arena);
    free(t);
}

/* ---- properties ---- */

bt_tokenizer_kind_t bt_tokenizer_kind(const bt_tokenizer_t *t) { return t->kind; }
bt_tokenizer_pre_t bt_tokenizer_pre(const bt_tokenizer_t *t) { return t->pre; }
int32_t bt_tokenizer_n_vocab(const bt_tokenizer_t *t) { return t->n_vocab; }
int32_t bt_tokenizer_bos(const bt_tokenizer_t *t) { return t->bos; }
int32_t bt_tokenizer_eos(const bt_tokenizer_t *t) { return t->eos; }
int32_t bt_tokenizer_eot(const bt_tokenizer_t *t) { return t->eot; }
int32_t bt_tokenizer_unk(const bt_tokenizer_t *t) { return t->unk; }
int32_t bt_tokenizer_pad(const bt_tokenizer_t *t) { return t->pad; }
bool bt_tokenizer_add_bos(const bt_tokenizer_t *t) { return t->add_bos; }
bool bt_tokenizer_add_eos(const bt_tokenizer_t *t) { return t->add_eos; }

const char *bt_tokenizer_kind_name(bt_tokenizer_kind_t kind)
{
    switch (kind) {
    case BT_TOKENIZER_NONE: return "none";
    case BT_TOKENIZER_BPE: return "gpt2";
    case BT_TOKENIZER_SPM: return "llama";
    }
    return "?";
}

const char *bt_tokenizer_pre_name(bt_tokenizer_pre_t pre)
{
    switch (pre) {
    case BT_PRE_DEFAULT: return "default";
    case BT_PRE_GPT2: return "gpt2";
    case BT_PRE_SMOLLM: return "smollm";
    case BT_PRE_LLAMA3: return "llama3";
    case BT_PRE_QWEN2: return "qwen2";
    }
    return "?";
}

bool bt_tokenizer_is_eog(const bt_tokenizer_t *t, int32_t id)
{
    return id_ok(t, id) && (t->attr[id] & ATTR_EOG);
}

bt_token_type_t bt_tokenizer_token_type(const bt_tokenizer_t *t, int32_t id)
{
    return id_ok(t, id) ? type_of(t, id) : BT_TOKEN_UNDEFINED;
}

const char *bt_tokenizer_token_text(const bt_tokenizer_t *t, int32_t id)
{
    return id_ok(t, id) ? t->text[id] : NULL;
}

/* ---- encode: growable arrays ---- */

/* An allocation failure sets failed and drops the element; encode checks
 * failed once at the end. */
typedef struct ids {
    int32_t *v;
    size_t n, cap;
    bool failed;
} ids_t;

static void ids_push(ids_t *a, int32_t id)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (v == NULL) {
            a->failed = true;
            return;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
}

/* A piece of the text: [off, off + len), or a token when id >= 0. */
typedef struct span {
    size_t off, len;
    int32_t id;
} span_t;

typedef struct spans {
    span_t *v;
    size_t n, cap;
    bool failed;
} spans_t;

static void spans_push(spans_t *a, size_t off, size_t len, int32_t id)
{
    if (len == 0 && id < 0)
        return;
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        span_t *v = realloc(a->v, cap * sizeof *v);
        if (v == NULL) {
            a->failed = true;
            return;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = (span_t){off, len, id};
}

/* Per-call scratch for BPE merging and SPM, grown as needed. */
typedef struct work {
    spans_t pieces, next; /* pre-tokenizer stages */
    char *buf;            /* byte-level / escaped text */
    size_t buf_cap;
    struct sym {
        int32_t id;       /* BPE: token id (-1: none) */
        int32_t prev, next;
        uint32_t off, len; /* SPM: bytes of the symbol in buf; len 0 = merged away */
    } *sym;
    size_t sym_cap;
    struct bigram {
        float score;       /* SPM: higher first */
        int32_t rank;      /* BPE: lower first */
        int32_t left, right;
        int32_t lid, rid, result; /* BPE */
        uint32_t size;     /* SPM */
    } *heap;
    size_t heap_n, heap_cap;
    bool failed;
} work_t;

static bool work_reserve(work_t *w, size_t n_sym, size_t n_buf)
{
    if (n_sym > w->sym_cap) {
        size_t cap = n_sym < 64 ? 64 : 2 * n_sym;
        struct sym *s = realloc(w->sym, cap * sizeof *s);
        if (s == NULL)
            return !(w->failed = true);
        w->sym = s;
        w->sym_cap = cap;
    }
    if (n_buf > w->buf_cap) {
        size_t cap = n_buf < 256 ? 256 : 2 * n_buf;
        char *b = realloc(w->buf, cap);
        if (b == NULL)
            return !(w->failed = true);
        w->buf = b;
        w->buf_cap = cap;
    }
    return true;
}

static void work_free(work_t *w)
{
    free(w->pieces.v);
    free(w->next.v);
    free(w->buf);
    free(w->sym);
    free(w->heap);
}

/* ---- encode: special tokens ---- */

/* Cuts text into raw spans and special-token spans: for each special token,
 * longest text first, every occurrence inside a raw span becomes a token
 * span (llama.cpp's tokenizer_st_partition). */
static void partition(const bt_tokenizer_t *t, const char *text, size_t len, bool parse_special,
                      work_t *w)
{
    spans_t *cur = &w->pieces, *nxt = &w->next;
    cur->n = 0;
    spans_push(cur, 0, len, -1);
    for (int k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        bt_token_type_t ty = type_of(t, id);
        if (!parse_special && ty != BT_TOKEN_USER_DEFINED)
            continue;
        const char *tok = t->text[id];
        size_t tl = t->len[id];
        if (tl > len || memmem(text, len, tok, tl) == NULL)
            continue;
        nxt->n = 0;
        for (size_t i = 0; i < cur->n; i++) {
            span_t s = cur->v[i];
            if (s.id >= 0) {
                spans_push(nxt, s.off, s.len, s.id);
                continue;
            }
            size_t off = s.off, end = s.off + s.len;
            const char *m;
            while (end - off >= tl && (m = memmem(text + off, end - off, tok, tl)) != NULL) {
                size_t at = (size_t)(m - text);
                spans_push(nxt, off, at - off, -1);
                spans_push(nxt, at, tl, id);
                off = at + tl;
            }
            spans_push(nxt, off, end - off, -1);
        }
        spans_t tmp = *cur;
        *cur = *nxt;
        *nxt = tmp;
    }
    w->failed |= cur->failed || nxt->failed;
}

/* ---- encode: BPE pre-tokenizers ---- */

#define CP_END 0xFFFFFFFFu /* past the end of the piece */

/* Code point at p (CP_END when p >= e), its length in *n. */
static uint32_t cp_at(const char *s, size_t p, size_t e, int *n)
{
    if (p >= e) {
        *n = 0;
        return CP_END;
    }
    uint32_t cp;
    *n = bt_utf8_decode(s + p, e - p, &cp);
    return cp;
}

static unsigned cls(uint32_t cp)
{
    return cp == CP_END ? 0 : bt_ucd_flags(cp);
}

#define IS_L(f) ((f) & BT_UCD_LETTER)
#define IS_N(f) ((f) & BT_UCD_NUMBER)
#define IS_S(f) ((f) & BT_UCD_SPACE)
#define IS_OTHER(c, f) ((c) != CP_END && !((f) & (BT_UCD_LETTER | BT_UCD_NUMBER | BT_UCD_SPACE)))

/* End of the run of code points from p whose class has any bit of mask
 * (mask 0: "other", neither letter, number nor space); at most max. */
static size_t run(const char *s, size_t p, size_t e, unsigned mask, int max)
{
    int n, count = 0;
    while (count < max) {
        uint32_t c = cp_at(s, p, e, &n);
        unsigned f = cls(c);
        if (c == CP_END || (mask ? !(f & mask) : !IS_OTHER(c, f)))
            break;
        p += (size_t)n;
        count++;
    }
    return p;
}

/* \s+(?!\S)|\s+ at p (a white-space code point): the whole run when it
 * ends the piece or is one character, else all but its last character. */
static size_t space_run(const char *s, size_t p, size_t e)
{
    size_t q = p, last = p;
    int n, count = 0;
    for (;;) {
        uint32_t c = cp_at(s, q, e, &n);
        if (!IS_S(cls(c)))
            break;
        last = q;
        q += (size_t)n;
        count++;
    }
    if (q == e || count < 2)
        return q;
    return last;
}

/* 's|'t|'re|'ve|'m|'ll|'d (case-insensitive when ci): end, or p. */
static size_t contraction(const char *s, size_t p, size_t e, bool ci)
{
    if (s[p] != '\'' || p + 1 >= e)
        return p;
    char c1 = s[p + 1], c2 = p + 2 < e ? s[p + 2] : '\0';
    if (ci) {
        c1 = (char)(c1 >= 'A' && c1 <= 'Z' ? c1 + 32 : c1);
        c2 = (char)(c2 >= 'A' && c2 <= 'Z' ? c2 + 32 : c2);
    }
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        return p + 2;
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
        return p + 3;
    return p;
}

/* One match of the GPT-2 regex at p < e; returns its end (> p). */
static size_t match_gpt2(const char *s, size_t p, size_t e)
{
    size_t m = contraction(s, p, e, false);
    if (m > p)
        return m;
    int n0, n1;
    uint32_t c0 = cp_at(s, p, e, &n0);
    size_t q = p;
    uint32_t c = c0;
    if (c0 == ' ') { /* " ?" */
        q = p + 1;
        c = cp_at(s, q, e, &n1);
    }
    unsigned f = cls(c);
    if (IS_L(f))
        return run(s, q, e, BT_UCD_LETTER, INT32_MAX);
    if (IS_N(f))
        return run(s, q, e, BT_UCD_NUMBER, INT32_MAX);
    if (IS_OTHER(c, f))
        return run(s, q, e, 0, INT32_MAX);
    return space_run(s, p, e); /* c0 is white space */
}

/* One match of the llama3 regex at p < e (\p{N}{1,max_digits}). */
static size_t match_llama3(const char *s, size_t p, size_t e, int max_digits)
{
    size_t m = contraction(s, p, e, true);
    if (m > p)
        return m;
    int n0, n1;
    uint32_t c0 = cp_at(s, p, e, &n0);
    unsigned f0 = cls(c0);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (!(c0 == '\r' || c0 == '\n' || IS_L(f0) || IS_N(f0))) {
        uint32_t c1 = cp_at(s, p + (size_t)n0, e, &n1);
        if (IS_L(cls(c1)))
            return run(s, p + (size_t)n0, e, BT_UCD_LETTER, INT32_MAX);
    }
    if (IS_L(f0))
        return run(s, p, e, BT_UCD_LETTER, INT32_MAX);
    /* \p{N}{1,3} */
    if (IS_N(f0))
        return run(s, p, e, BT_UCD_NUMBER, max_digits);
    /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
    size_t q = p;
    uint32_t c = c0;
    if (c0 == ' ') {
        q = p + 1;
        c = cp_at(s, q, e, &n1);
    }
    if (IS_OTHER(c, cls(c))) {
        size_t r = run(s, q, e, 0, INT32_MAX);
        while (r < e && (s[r] == '\r' || s[r] == '\n'))
            r++;
        return r;
    }
    /* \s*[\r\n]+: up to the last \r or \n of the white-space run */
    size_t r = p, nl_end = p;
    for (;;) {
        uint32_t cc = cp_at(s, r, e, &n1);
        if (!IS_S(cls(cc)))
            break;
        r += (size_t)n1;
        if (cc == '\r' || cc == '\n')
            nl_end = r;
    }
    if (nl_end > p)
        return nl_end;
    return space_run(s, p, e);
}

typedef enum stage {
    STAGE_GPT2,
    STAGE_LLAMA3,
    STAGE_QWEN2,
    STAGE_EACH_NUMBER,  /* \p{N} */
    STAGE_NUMBER_RUNS,  /* \p{N}+ */
    STAGE_PUNCT_RUNS,   /* [\p{P}\$\+<=>\^~\|]+ */
    STAGE_DIGITS3,      /* [0-9][0-9][0-9] */
} stage_t;

static bool punct_like(uint32_t c)
{
    return c != CP_END && ((cls(c) & BT_UCD_PUNCT) || c == '$' || c == '+' || c == '<' ||
                           c == '=' || c == '>' || c == '^' || c == '~' || c == '|');
}

/* Splits [b, e) by one stage into out: matches and the gaps between them
 * both become pieces (HF's "isolated" split, llama.cpp's regex split). */
static void split_stage(const char *s, size_t b, size_t e, stage_t stage, spans_t *out)
{
    size_t p = b, gap = b;
    int n;
    while (p < e) {
        size_t m = p; /* end of a match at p; == p: none */
        uint32_t c = cp_at(s, p, e, &n);
        switch (stage) {
        case STAGE_GPT2: m = match_gpt2(s, p, e); break;
        case STAGE_LLAMA3: m = match_llama3(s, p, e, 3); break;
        case STAGE_QWEN2: m = match_llama3(s, p, e, 1); break;
        case STAGE_EACH_NUMBER:
            if (IS_N(cls(c)))
                m = p + (size_t)n;
            break;
        case STAGE_NUMBER_RUNS: m = run(s, p, e, BT_UCD_NUMBER, INT32_MAX); break;
        case STAGE_PUNCT_RUNS: {
            int nn = n;
            for (uint32_t cc = c; punct_like(cc); cc = cp_at(s, m, e, &nn))
                m += (size_t)nn;
            break;
        }
        case STAGE_DIGITS3:
            if (e - p >= 3 && s[p] >= '0' && s[p] <= '9' && s[p + 1] >= '0' && s[p + 1] <= '9' &&
                s[p + 2] >= '0' && s[p + 2] <= '9')
                m = p + 3;
            break;
        }
        if (m > p) {
            spans_push(out, gap, p - gap, -1);
            spans_push(out, p, m - p, -1);
            p = gap = m;
        } else {
            p += (size_t)n;
        }
    }
    spans_push(out, gap, e - gap, -1);
}

/* ---- encode: BPE ---- */

static bool bigram_less(const struct bigram *a, const struct bigram *b, bool spm)
{
    if (spm) {
        if (a->score != b->score)
            return a->score > b->score;
    } else if (a->rank != b->rank) {
        return a->rank < b->rank;
    }
    return a->left < b->left;
}

static void heap_push(work_t *w, struct bigram g, bool spm)
{
    if (w->heap_n == w->heap_cap) {
        size_t cap = w->heap_cap ? 2 * w->heap_cap : 64;
        struct bigram *h = realloc(w->heap, cap * sizeof *h);
        if (h == NULL) {
            w->failed = true;
            return;
        }
        w->heap = h;
        w->heap_cap = cap;
    }
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_less(&g, &w->heap[parent], spm))
            break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = g;
}

static struct bigram heap_pop(work_t *w, bool spm)
{
    struct bigram top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && bigram_less(&w->heap[c + 1], &w->heap[c], spm))
            c++;
        if (!bigram_less(&w->heap[c], &last, spm))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0)
        w->heap[i] = last;
    return top;
}

static void bpe_add_bigram(const bt_tokenizer_t *t, work_t *w, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return;
    int32_t lid = w->sym[left].id, rid = w->sym[right].id;
    if (lid < 0 || rid < 0)
        return;
    const merge_slot_t *m = merge_find(t, lid, rid);
    if (m == NULL)
        return;
    heap_push(w, (struct bigram){0.0f, m->rank, left, right, lid, rid, m->result, 0}, false);
}

/* One pre-tokenized piece of raw bytes -> ids. */
static void bpe_piece(const bt_tokenizer_t *t, const uint8_t *b, size_t n, work_t *w, ids_t *out)
{
    if (!work_reserve(w, n, 2 * n))
        return;
    if (t->ignore_merges) { /* the whole piece may be a token */
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            k += (size_t)bt_utf8_encode(t->byte_cp[b[i]], w->buf + k);
        int32_t id = bt_tokenizer_find(t, w->buf, k);
        if (id >= 0) {
            ids_push(out, id);
            return;
        }
    }
    for (size_t i = 0; i < n; i++)
        w->sym[i] = (struct sym){t->byte_id[b[i]], (int32_t)i - 1,
                                 i + 1 < n ? (int32_t)i + 1 : -1, 0, 1};
    w->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        bpe_add_bigram(t, w, (int32_t)i, (int32_t)i + 1);
    while (w->heap_n > 0) {
        struct bigram g = heap_pop(w, false);
        struct sym *l = &w->sym[g.left], *r = &w->sym[g.right];
        if (l->len == 0 || r->len == 0 || l->id != g.lid || r->id != g.rid)
            continue; /* stale: one side changed since it was queued */
        l->id = g.result;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = g.left;
        bpe_add_bigram(t, w, l->prev, g.left);
        bpe_add_bigram(t, w, g.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = w->sym[i].next)
        if (w->sym[i].id >= 0) /* a byte with no token is dropped, as in llama.cpp */
            ids_push(out, w->sym[i].id);
}

static void bpe_encode(const bt_tokenizer_t *t, const char *text, size_t len, work_t *w,
                       ids_t *out)
{
    static const stage_t chains[][4] = {
        [BT_PRE_DEFAULT] = {STAGE_PUNCT_RUNS, STAGE_GPT2, STAGE_NUMBER_RUNS, STAGE_DIGITS3},
        [BT_PRE_GPT2] = {STAGE_GPT2},
        [BT_PRE_SMOLLM] = {STAGE_EACH_NUMBER, STAGE_GPT2},
        [BT_PRE_LLAMA3] = {STAGE_LLAMA3},
        [BT_PRE_QWEN2] = {STAGE_QWEN2},
    };
    static const int chain_len[] = {
        [BT_PRE_DEFAULT] = 4, [BT_PRE_GPT2] = 1, [BT_PRE_SMOLLM] = 2,
        [BT_PRE_LLAMA3] = 1, [BT_PRE_QWEN2] = 1,
    };
    spans_t a = {0}, b = {0}, *cur = &a, *nxt = &b;
    spans_push(cur, 0, len, -1);
    for (int k = 0; k < chain_len[t->pre]; k++) {
        nxt->n = 0;
        for (size_t i = 0; i < cur->n; i++)
            split_stage(text, cur->v[i].off, cur->v[i].off + cur->v[i].len, chains[t->pre][k], nxt);
        spans_t *tmp = cur;
        cur = nxt;
        nxt = tmp;
    }
    if (a.failed || b.failed)
        w->failed = true;
    else
        for (size_t i = 0; i < cur->n && !w->failed; i++)
            bpe_piece(t, (const uint8_t *)text + cur->v[i].off, cur->v[i].len, w, out);
    free(a.v);
    free(b.v);
}

/* ---- encode: SPM ---- */

static void spm_add_bigram(const bt_tokenizer_t *t, work_t *w, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return;
    uint32_t size = w->sym[left].len + w->sym[right].len;
    int32_t id = bt_tokenizer_find(t, w->buf + w->sym[left].off, size);
    if (id < 0)
        return;
    heap_push(w, (struct bigram){t->score[id], 0, left, right, 0, 0, 0, size}, true);
}

/* A raw fragment: spaces -> U+2581 (plus one in front when prefix), then
 * merge the pair whose concatenation is the best-scored token, repeatedly. */
static void spm_encode(const bt_tokenizer_t *t, const char *text, size_t len, bool prefix,
                       work_t *w, ids_t *out)
{
    size_t n_space = prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++)
        n_space += text[i] == ' ';
    size_t n = len + (prefix ? 1 : 0) + 2 * n_space;
    if (n > UINT32_MAX / 2) {
        w->failed = true;
        return;
    }
    if (!work_reserve(w, n, n))
        return;
    size_t k = 0;
    if (prefix) {
        memcpy(w->buf, SPM_SPACE, SPM_SPACE_LEN);
        k = SPM_SPACE_LEN;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(w->buf + k, SPM_SPACE, SPM_SPACE_LEN);
            k += SPM_SPACE_LEN;
        } else {
            w->buf[k++] = text[i];
        }
    }
    /* Symbols are characters as llama.cpp cuts them (lead byte length). */
    int32_t n_sym = 0;
    for (size_t off = 0; off < k; n_sym++) {
        size_t l = (size_t)bt_utf8_lead_len((uint8_t)w->buf[off]);
        if (l > k - off)
            l = k - off;
        w->sym[n_sym] = (struct sym){-1, n_sym - 1, off + l < k ? n_sym + 1 : -1, (uint32_t)off,
                                     (uint32_t)l};
        off += l;
    }
    w->heap_n = 0;
    for (int32_t i = 1; i < n_sym; i++)
        spm_add_bigram(t, w, i - 1, i);
    while (w->heap_n > 0) {
        struct bigram g = heap_pop(w, true);
        struct sym *l = &w->sym[g.left], *r = &w->sym[g.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != g.size)
            continue; /* stale */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = g.left;
        spm_add_bigram(t, w, l->prev, g.left);
        spm_add_bigram(t, w, g.left, l->next);
    }
    for (int32_t i = 0; n_sym > 0 && i >= 0; i = w->sym[i].next) {
        const struct sym *s = &w->sym[i];
        int32_t id = bt_tokenizer_find(t, w->buf + s->off, s->len);
        if (id >= 0) {
            ids_push(out, id);
            continue;
        }
        for (uint32_t j = 0; j < s->len; j++) { /* byte fallback */
            int32_t b = t->byte_id[(uint8_t)w->buf[s->off + j]];
            if (b < 0)
                b = t->unk;
            if (b >= 0)
                ids_push(out, b);
        }
    }
}

bt_status_t bt_tokenizer_encode(const bt_tokenizer_t *t, const char *text, size_t len,
                                bool add_special, bool parse_special, int32_t **ids, int *n)
{
    if (t->kind == BT_TOKENIZER_NONE) {
        bt_log_error("tokenizer: the model has no vocabulary (tokenizer.ggml.model is 'none' or "
                     "missing), so text cannot be tokenized");
        return BT_ERR_UNSUPPORTED;
    }
    if (text == NULL && len > 0) {
        bt_log_error("tokenizer: encode of NULL text with length %zu", len);
        return BT_ERR_ARG;
    }
    if (len > (size_t)INT32_MAX / 2) {
        bt_log_error("tokenizer: text of %zu bytes is too long to tokenize", len);
        return BT_ERR_ARG;
    }
    work_t w = {0};
    ids_t out = {0};
    if (add_special && t->add_bos && t->bos >= 0)
        ids_push(&out, t->bos);
    if (len > 0)
        partition(t, text, len, parse_special, &w);
    /* SPM puts the space prefix before the first text and after every
     * special token (llama.cpp). */
    bool prev_special = true;
    for (size_t i = 0; i < (len > 0 ? w.pieces.n : 0) && !w.failed; i++) {
        span_t s = w.pieces.v[i];
        if (s.id >= 0) {
            ids_push(&out, s.id);
            prev_special = true;
        } else if (t->kind == BT_TOKENIZER_BPE) {
            bpe_encode(t, text + s.off, s.len, &w, &out);
        } else {
            spm_encode(t, text + s.off, s.len, t->add_space_prefix && prev_special, &w, &out);
            prev_special = false;
        }
    }
    if (add_special && t->add_eos && t->eos >= 0)
        ids_push(&out, t->eos);
    bool failed = w.failed || out.failed || out.n > INT32_MAX;
    work_free(&w);
    if (failed) {
        free(out.v);
        bt_log_error("tokenizer: out of memory tokenizing %zu bytes", len);
        return BT_ERR_NOMEM;
    }
    if (out.n == 0) {
        free(out.v);
        out.v = NULL;
    }
    *ids = out.v;
    *n = (int)out.n;
    return BT_OK;
}

/* ---- decode ---- */

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Writes the piece of id into dst (when not NULL) and returns its length,
 * which is never more than the token text's length. */
static size_t piece_write(const bt_tokenizer_t *t, int32_t id, bool special, char *dst)
{
    if (!id_ok(t, id))
        return 0;
    const char *s = t->text[id];
    size_t n = t->len[id], k = 0;
    switch (type_of(t, id)) {
    case BT_TOKEN_CONTROL:
    case BT_TOKEN_UNKNOWN:
        if (!special)
            return 0;
        /* fall through */
    case BT_TOKEN_USER_DEFINED:
        if (dst)
            memcpy(dst, s, n);
        return n;
    case BT_TOKEN_NORMAL:
        break;
    case BT_TOKEN_BYTE:
        if (t->kind == BT_TOKENIZER_SPM && n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' &&
            hex_digit(s[3]) >= 0 && hex_digit(s[4]) >= 0) {
            if (dst)
                dst[0] = (char)(hex_digit(s[3]) * 16 + hex_digit(s[4]));
            return 1;
        }
        return 0;
    default:
        return 0; /* unused, undefined */
    }
    if (t->kind == BT_TOKENIZER_SPM) {
        for (size_t i = 0; i < n;) {
            if (n - i >= SPM_SPACE_LEN && memcmp(s + i, SPM_SPACE, SPM_SPACE_LEN) == 0) {
                if (dst)
                    dst[k] = ' ';
                k++;
                i += SPM_SPACE_LEN;
            } else {
                if (dst)
                    dst[k] = s[i];
                k++;
                i++;
            }
        }
        return k;
    }
    /* Byte level: each code point of the GPT-2 alphabet is one byte; any
     * other code point is passed through as its UTF-8. */
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = bt_utf8_decode(s + i, n - i, &cp);
        if (cp < 324 && t->cp_byte[cp] >= 0) {
            if (dst)
                dst[k] = (char)t->cp_byte[cp];
            k++;
        } else {
            if (dst)
                memcpy(dst + k, s + i, (size_t)l);
            k += (size_t)l;
        }
        i += (size_t)l;
    }
    return k;
}

int bt_tokenizer_piece(const bt_tokenizer_t *t, int32_t id, bool special, char *buf, size_t size)
{
    size_t n = piece_write(t, id, special, NULL);
    if (n <= size && n > 0)
        piece_write(t, id, special, buf);
    return (int)n;
}

static bool strip_prefix(const bt_tokenizer_t *t, int flags)
{
    return (flags & BT_DETOK_STRIP_PREFIX) && t->kind == BT_TOKENIZER_SPM && t->add_space_prefix;
}

bt_status_t bt_tokenizer_decode(const bt_tokenizer_t *t, const int32_t *ids, int n, int flags,
                                char **text, size_t *len)
{
    bool special = flags & BT_DETOK_SPECIAL;
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += piece_write(t, ids[i], special, NULL);
    char *s = malloc(total + 1);
    if (s == NULL) {
        bt_log_error("tokenizer: out of memory decoding %d tokens", n);
        return BT_ERR_NOMEM;
    }
    size_t k = 0;
    bool strip = strip_prefix(t, flags);
    for (int i = 0; i < n; i++) {
        size_t m = piece_write(t, ids[i], special, s + k);
        if (strip && m > 0) {
            if (s[k] == ' ') {
                memmove(s + k, s + k + 1, m - 1);
                m--;
            }
            strip = false;
        }
        k += m;
    }
    s[k] = '\0';
    *text = s;
    *len = k;
    return BT_OK;
}

/* ---- decode: streaming ---- */

struct bt_detok {
    const bt_tokenizer_t *t;
    int flags;
    bool strip; /* the next non-empty piece loses a leading space */
    char *buf;  /* [0, done): returned by the last call; [done, n): held back */
    size_t done, n, cap;
};

/* Forgets the bytes the last call returned. */
static void detok_drop_done(bt_detok_t *d)
{
    if (d->done > 0)
        memmove(d->buf, d->buf + d->done, d->n - d->done);
    d->n -= d->done;
    d->done = 0;
}

bt_status_t bt_detok_init(const bt_tokenizer_t *t, int flags, bt_detok_t **out)
{
    bt_detok_t *d = calloc(1, sizeof *d);
    if (d == NULL) {
        bt_log_error("tokenizer: out of memory");
        return BT_ERR_NOMEM;
    }
    d->t = t;
    d->flags = flags;
    d->strip = strip_prefix(t, flags);
    *out = d;
    return BT_OK;
}

void bt_detok_free(bt_detok_t *d)
{
    if (d == NULL)
        return;
    free(d->buf);
    free(d);
}

bt_status_t bt_detok_push(bt_detok_t *d, int32_t id, const char **text, size_t *len)
{
    if (!id_ok(d->t, id)) {
        bt_log_error("tokenizer: token id %d is out of range (vocabulary of %d)", id,
                     d->t->n_vocab);
        return BT_ERR_ARG;
    }
    detok_drop_done(d);
    bool special = d->flags & BT_DETOK_SPECIAL;
    size_t m = piece_write(d->t, id, special, NULL);
    if (d->n + m + 1 > d->cap) {
        size_t cap = 2 * (d->n + m) + 16;
        char *b = realloc(d->buf, cap);
        if (b == NULL) {
            bt_log_error("tokenizer: out of memory decoding");
            return BT_ERR_NOMEM;
        }
        d->buf = b;
        d->cap = cap;
    }
    piece_write(d->t, id, special, d->buf + d->n);
    if (d->strip && m > 0) {
        if (d->buf[d->n] == ' ') {
            memmove(d->buf + d->n, d->buf + d->n + 1, m - 1);
            m--;
        }
        d->strip = false;
    }
    d->n += m;
    d->done = bt_utf8_complete_prefix(d->buf, d->n);
    *text = d->buf;
    *len = d->done;
    return BT_OK;
}

void bt_detok_flush(bt_detok_t *d, const char **text, size_t *len)
{
    detok_drop_done(d);
    d->done = d->n; /* all returned now; dropped by the next push */
    *text = d->buf != NULL ? d->buf : "";
    *len = d->n;
    d->strip = strip_prefix(d->t, d->flags);
}
