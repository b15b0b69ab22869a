/*
 * check_tokenizer.c: GGUF tokenizers.
 *   bpe:       merge order, byte-level pieces, special tokens, accessors
 *   spm:       score-driven merges, <0xXX> byte fallback, space prefix
 *   detok:     pieces and the streaming UTF-8 decoder
 *   limits:    "none" models, inconsistent metadata refused with a status
 *   smollm2:   the real SmolLM2 vocabulary against ids from HF tokenizers
 *              (tests/data/smollm2-tokenizer.txt) for five pre-tokenizers;
 *              only with --smollm2 (tests/tokenizer_smollm2.sh)
 *   spm-ref:   a SentencePiece BPE vocabulary against sentencepiece's ids
 *              (tests/data/spm-tiny.gguf, spm-tiny-tokenizer.txt)
 *   gemma3:    Gemma 3's real 262144-token SPM vocabulary against ids from
 *              sentencepiece (tests/data/gemma3-tokenizer.txt) and against
 *              llama.cpp's prompt ids in golden/gemma3-270m-greedy.txt,
 *              and its --chat turns as ids; only with --gemma3
 *              (tests/tokenizer_gemma3.sh)
 *
 * Data files are found under $BT_SRCDIR (else the source tree this was
 * built from); the SmolLM2 model at $BT_SMOLLM2, else
 * <srcdir>/models/SmolLM2-135M-Instruct.Q4_1.gguf, the Gemma 3 model at
 * $BT_GEMMA3, else <srcdir>/models/gemma-3-270m-q4_k_m.gguf (--smollm2 and
 * --gemma3 skip, exit 77, when theirs is absent).
 */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "gguf.h"
#include "testutil.h"
#include "tokenizer.h"
#include "unicode.h"

static char *tmpdir;

/* ---- synthetic vocabularies ---- */

typedef struct vocab_spec {
    const char *model; /* tokenizer.ggml.model; NULL: key absent */
    const char *pre;   /* NULL: absent */
    const char *const *tokens;
    int n_tokens;
    const int32_t *types; /* NULL: absent */
    int n_types;
    const float *scores; /* NULL: absent */
    int n_scores;
    const char *const *merges; /* NULL: absent */
    int n_merges;
    int bos, eos, unk; /* -1: absent */
    int add_bos;       /* -1: absent */
} vocab_spec_t;

#define SPEC_DEFAULTS .bos = -1, .eos = -1, .unk = -1, .add_bos = -1

static bt_status_t load_spec(const vocab_spec_t *v, bt_tokenizer_t **out)
{
    char path[700];
    snprintf(path, sizeof path, "%s/vocab.gguf", tmpdir);
    bt_gguf_writer_t *w;
    ck_assert_int_eq(bt_gguf_writer_init(&w), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_str(w, "general.architecture", "llama"), BT_OK);
    if (v->model)
        ck_assert_int_eq(bt_gguf_writer_set_str(w, "tokenizer.ggml.model", v->model), BT_OK);
    if (v->pre)
        ck_assert_int_eq(bt_gguf_writer_set_str(w, "tokenizer.ggml.pre", v->pre), BT_OK);
    if (v->tokens)
        ck_assert_int_eq(bt_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v->tokens,
                                                    (uint64_t)v->n_tokens),
                         BT_OK);
    if (v->types)
        ck_assert_int_eq(bt_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", BT_GGUF_INT32,
                                                v->types, (uint64_t)v->n_types),
                         BT_OK);
    if (v->scores)
        ck_assert_int_eq(bt_gguf_writer_set_arr(w, "tokenizer.ggml.scores", BT_GGUF_FLOAT32,
                                                v->scores, (uint64_t)v->n_scores),
                         BT_OK);
    if (v->merges)
        ck_assert_int_eq(bt_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", v->merges,
                                                    (uint64_t)v->n_merges),
                         BT_OK);
    if (v->bos >= 0)
        bt_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    if (v->eos >= 0)
        bt_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    if (v->unk >= 0)
        bt_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)v->unk);
    if (v->add_bos >= 0)
        bt_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos);
    ck_assert_int_eq(bt_gguf_writer_begin(w, path), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_finish(w), BT_OK);
    bt_gguf_writer_free(w);

    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);
    bt_status_t st = bt_tokenizer_load(g, out);
    bt_gguf_close(g); /* the tokenizer must not need the file any more */
    return st;
}

/* Encodes s and checks the ids. */
static void expect_ids(const bt_tokenizer_t *t, const char *s, bool add_special, bool parse_special,
                       const int32_t *want, int n_want)
{
    int32_t *ids;
    int n;
    ck_assert_int_eq(bt_tokenizer_encode(t, s, strlen(s), add_special, parse_special, &ids, &n),
                     BT_OK);
    if (n != n_want || (n > 0 && memcmp(ids, want, (size_t)n * sizeof *ids) != 0)) {
        fprintf(stderr, "encode '%s': got", s);
        for (int i = 0; i < n; i++)
            fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, ", want");
        for (int i = 0; i < n_want; i++)
            fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
    }
    ck_assert_int_eq(n, n_want);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(ids[i], want[i]);
    free(ids);
}

#define EXPECT(t, s, spec, parse, ...)                                                          \
    do {                                                                                       \
        static const int32_t want_[] = {__VA_ARGS__};                                          \
        expect_ids(t, s, spec, parse, want_, (int)(sizeof want_ / sizeof want_[0]));           \
    } while (0)

/* ---- bpe ---- */

/* A byte-level vocabulary: "a b c" plus a space ("\xC4\xA0" = U+0120). */
static const char *bpe_tokens[] = {"a", "b", "c", "\xC4\xA0", "ab", "bc", "abc", "aa",
                                   "\xC4\xA0" "a", "<|im_start|>", "<|im_end|>", "<tool>",
                                   "<x>", "<x><y>", "<", ">", "x", "y", "|", "i", "m", "_",
                                   "s", "t", "r", "e", "n", "d", "o", "l"};
enum { T_A, T_B, T_C, T_SP, T_AB, T_BC, T_ABC, T_AA, T_SPA, T_IMS, T_IME, T_TOOL, T_X, T_XY,
       T_LT, T_GT, T_XC, T_YC, T_BAR, N_BPE = 30 };
static const int32_t bpe_types[N_BPE] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 4, 3, 3, 1, 1, 1, 1, 1,
                                         1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

static bt_tokenizer_t *bpe_with_merges(const char *const *merges, int n)
{
    vocab_spec_t v = {SPEC_DEFAULTS, .model = "gpt2", .pre = "gpt2", .tokens = bpe_tokens,
                      .n_tokens = N_BPE, .types = bpe_types, .n_types = N_BPE,
                      .merges = merges, .n_merges = n};
    v.eos = T_IME;
    bt_tokenizer_t *t;
    ck_assert_int_eq(load_spec(&v, &t), BT_OK);
    return t;
}

START_TEST(test_bpe_merge_order)
{
    /* "a b" ranks first: abc -> ab c -> abc */
    static const char *m1[] = {"a b", "b c", "ab c", "a a", "\xC4\xA0 a"};
    bt_tokenizer_t *t = bpe_with_merges(m1, 5);
    ck_assert_int_eq(bt_tokenizer_kind(t), BT_TOKENIZER_BPE);
    ck_assert_int_eq(bt_tokenizer_pre(t), BT_PRE_GPT2);
    EXPECT(t, "abc", false, false, T_ABC);
    EXPECT(t, "ab", false, false, T_AB);
    EXPECT(t, "bca", false, false, T_BC, T_A);
    /* equal ranks merge leftmost first */
    EXPECT(t, "aaa", false, false, T_AA, T_A);
    EXPECT(t, "aaaa", false, false, T_AA, T_AA);
    /* " a" is one piece; the merge across pieces ("c" then " a") never happens */
    EXPECT(t, "c a", false, false, T_C, T_SPA);
    EXPECT(t, "a  a", false, false, T_A, T_SP, T_SPA);
    bt_tokenizer_free(t);

    /* "b c" ranks first: abc -> a bc, and no "a bc" merge exists */
    static const char *m2[] = {"b c", "a b", "ab c"};
    t = bpe_with_merges(m2, 3);
    EXPECT(t, "abc", false, false, T_A, T_BC);
    EXPECT(t, "abab", false, false, T_AB, T_AB);
    bt_tokenizer_free(t);
}
END_TEST

START_TEST(test_bpe_special)
{
    static const char *m[] = {"a b"};
    bt_tokenizer_t *t = bpe_with_merges(m, 1);
    /* control tokens only with parse_special */
    EXPECT(t, "<|im_start|>ab<|im_end|>", false, true, T_IMS, T_AB, T_IME);
    EXPECT(t, "<x>", false, false, T_LT, T_XC, T_GT);
    EXPECT(t, "<x>", false, true, T_X);
    /* the longer token wins */
    EXPECT(t, "<x><y>a<x>", false, true, T_XY, T_A, T_X);
    /* user-defined tokens always */
    EXPECT(t, "a<tool>b", false, false, T_A, T_TOOL, T_B);
    EXPECT(t, "<tool><tool>", false, true, T_TOOL, T_TOOL);
    /* text around and between */
    EXPECT(t, "ab<x>ab", false, true, T_AB, T_X, T_AB);

    /* accessors */
    ck_assert_int_eq(bt_tokenizer_n_vocab(t), N_BPE);
    ck_assert_int_eq(bt_tokenizer_find(t, "<|im_start|>", 12), T_IMS);
    ck_assert_int_eq(bt_tokenizer_find(t, "nope", 4), -1);
    ck_assert_str_eq(bt_tokenizer_token_text(t, T_TOOL), "<tool>");
    ck_assert_ptr_null(bt_tokenizer_token_text(t, N_BPE));
    ck_assert_int_eq(bt_tokenizer_token_type(t, T_IMS), BT_TOKEN_CONTROL);
    ck_assert_int_eq(bt_tokenizer_token_type(t, -1), BT_TOKEN_UNDEFINED);
    ck_assert_int_eq(bt_tokenizer_eos(t), T_IME);
    ck_assert_int_eq(bt_tokenizer_eot(t), T_IME); /* found by its text */
    ck_assert(bt_tokenizer_is_eog(t, T_IME));
    ck_assert(!bt_tokenizer_is_eog(t, T_IMS));
    ck_assert(!bt_tokenizer_is_eog(t, 1000));
    ck_assert_int_eq(bt_tokenizer_bos(t), -1);
    ck_assert(!bt_tokenizer_add_bos(t));
    /* add_special with no BOS to add */
    EXPECT(t, "ab", true, false, T_AB);
    bt_tokenizer_free(t);
}
END_TEST

/* ---- spm ---- */

/* <unk> <s> </s>, 256 byte tokens, then pieces with scores. */
#define SPM_FIRST 259
static const char *spm_pieces[] = {"\xE2\x96\x81", "h", "i", "\xE2\x96\x81h", "\xE2\x96\x81hi",
                                   "hi", "<ctl>", "\xC3\xA9"};
enum { P_SP = SPM_FIRST, P_H, P_I, P_SPH, P_SPHI, P_HI, P_CTL, P_EACUTE, N_SPM };

static bt_tokenizer_t *spm_tiny(int add_bos)
{
    static char bytes[256][8];
    static const char *tokens[N_SPM];
    static int32_t types[N_SPM];
    static float scores[N_SPM];
    tokens[0] = "<unk>";
    tokens[1] = "<s>";
    tokens[2] = "</s>";
    types[0] = BT_TOKEN_UNKNOWN;
    types[1] = types[2] = BT_TOKEN_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tokens[3 + b] = bytes[b];
        types[3 + b] = BT_TOKEN_BYTE;
    }
    static const float piece_scores[] = {-1, -2, -3, -4, -5, -0.5f, 0, -6};
    for (int i = SPM_FIRST; i < N_SPM; i++) {
        tokens[i] = spm_pieces[i - SPM_FIRST];
        types[i] = BT_TOKEN_NORMAL;
        scores[i] = piece_scores[i - SPM_FIRST];
    }
    types[P_CTL] = BT_TOKEN_CONTROL;
    vocab_spec_t v = {SPEC_DEFAULTS, .model = "llama", .tokens = tokens, .n_tokens = N_SPM,
                      .types = types, .n_types = N_SPM, .scores = scores, .n_scores = N_SPM};
    v.add_bos = add_bos;
    bt_tokenizer_t *t;
    ck_assert_int_eq(load_spec(&v, &t), BT_OK);
    return t;
}

START_TEST(test_spm_merges)
{
    bt_tokenizer_t *t = spm_tiny(-1);
    ck_assert_int_eq(bt_tokenizer_kind(t), BT_TOKENIZER_SPM);
    /* llama.cpp defaults: bos 1, eos 2, unk 0, add_bos */
    ck_assert_int_eq(bt_tokenizer_bos(t), 1);
    ck_assert_int_eq(bt_tokenizer_eos(t), 2);
    ck_assert_int_eq(bt_tokenizer_unk(t), 0);
    ck_assert(bt_tokenizer_add_bos(t));
    /* "▁hi": "hi" (-0.5) before "▁h" (-4), then "▁" + "hi" */
    EXPECT(t, "hi", false, false, P_SPHI);
    EXPECT(t, "hi", true, false, 1, P_SPHI);
    EXPECT(t, "", true, false, 1);
    EXPECT(t, "", false, false);
    /* "▁h▁hi": "hi", "▁h", then "▁" + "hi" (the queued "▁" + "h" is stale) */
    EXPECT(t, "h hi", false, false, P_SPH, P_SPHI);
    /* no "hh" and no "▁hh": "▁h" + "h" */
    EXPECT(t, "hh", false, false, P_SPH, P_H);
    /* an é in the vocabulary is one symbol */
    EXPECT(t, "\xC3\xA9", false, false, P_SP, P_EACUTE);
    bt_tokenizer_free(t);
}
END_TEST

START_TEST(test_spm_byte_fallback)
{
    bt_tokenizer_t *t = spm_tiny(0);
    ck_assert(!bt_tokenizer_add_bos(t));
    /* x is no piece: <0x78>; the emoji is 4 bytes */
    EXPECT(t, "x", false, false, P_SP, 3 + 'x');
    EXPECT(t, "hi \xF0\x9F\x98\x80", false, false, P_SPHI, P_SP, 3 + 0xF0, 3 + 0x9F, 3 + 0x98,
           3 + 0x80);
    EXPECT(t, "\n", false, false, P_SP, 3 + '\n');
    /* invalid UTF-8 survives byte for byte; a 0xFF lead takes up to 4 bytes
     * into one symbol, as llama.cpp cuts characters */
    EXPECT(t, "\xFF" "h", false, false, P_SP, 3 + 0xFF, 3 + 'h');
    /* control text: a space prefix after every special token (llama.cpp) */
    EXPECT(t, "<ctl>hi", false, true, P_CTL, P_SPHI);
    EXPECT(t, "hi<ctl>hi", false, true, P_SPHI, P_CTL, P_SPHI);
    EXPECT(t, "hi<ctl>hi", false, false, P_SPHI, 3 + '<', 3 + 'c', 3 + 't', 3 + 'l', 3 + '>',
           P_HI);
    EXPECT(t, "<s>", false, true, 1);
    bt_tokenizer_free(t);
}
END_TEST

/* ---- detok ---- */

static char *decode_all(const bt_tokenizer_t *t, const int32_t *ids, int n, int flags)
{
    char *s;
    size_t len;
    ck_assert_int_eq(bt_tokenizer_decode(t, ids, n, flags, &s, &len), BT_OK);
    ck_assert_uint_eq(strlen(s), len);
    return s;
}

START_TEST(test_detok_pieces)
{
    bt_tokenizer_t *t = spm_tiny(-1);
    char buf[16];
    ck_assert_int_eq(bt_tokenizer_piece(t, P_SPHI, false, buf, sizeof buf), 3);
    ck_assert(memcmp(buf, " hi", 3) == 0);
    ck_assert_int_eq(bt_tokenizer_piece(t, 3 + 0xAB, false, buf, sizeof buf), 1);
    ck_assert_int_eq((uint8_t)buf[0], 0xAB);
    ck_assert_int_eq(bt_tokenizer_piece(t, 1, false, buf, sizeof buf), 0); /* <s> */
    ck_assert_int_eq(bt_tokenizer_piece(t, 1, true, buf, sizeof buf), 3);
    ck_assert(memcmp(buf, "<s>", 3) == 0);
    /* too small: the length, nothing copied */
    buf[0] = 'Z';
    ck_assert_int_eq(bt_tokenizer_piece(t, P_SPHI, false, buf, 2), 3);
    ck_assert_int_eq(buf[0], 'Z');
    ck_assert_int_eq(bt_tokenizer_piece(t, 100000, false, buf, sizeof buf), 0);

    int32_t ids[] = {1, P_SP, P_HI, P_SPH, P_I};
    char *s = decode_all(t, ids, 5, 0);
    ck_assert_str_eq(s, " hi hi");
    free(s);
    s = decode_all(t, ids, 5, BT_DETOK_STRIP_PREFIX);
    ck_assert_str_eq(s, "hi hi");
    free(s);
    s = decode_all(t, ids, 5, BT_DETOK_SPECIAL | BT_DETOK_STRIP_PREFIX);
    ck_assert_str_eq(s, "<s> hi hi");
    free(s);
    bt_tokenizer_free(t);

    /* byte level: U+0120 is a space, U+010A a newline */
    static const char *m[] = {"a b"};
    t = bpe_with_merges(m, 1);
    ck_assert_int_eq(bt_tokenizer_piece(t, T_SPA, false, buf, sizeof buf), 2);
    ck_assert(memcmp(buf, " a", 2) == 0);
    ck_assert_int_eq(bt_tokenizer_piece(t, T_TOOL, false, buf, sizeof buf), 6);
    ck_assert_int_eq(bt_tokenizer_piece(t, T_IMS, false, buf, sizeof buf), 0);
    bt_tokenizer_free(t);
}
END_TEST

START_TEST(test_detok_stream)
{
    bt_tokenizer_t *t = spm_tiny(0);
    int32_t *ids;
    int n;
    const char *emoji = "hi \xF0\x9F\x91\x8B!"; /* U+1F44B over four byte tokens */
    ck_assert_int_eq(bt_tokenizer_encode(t, emoji, strlen(emoji), false, false, &ids, &n),
                     BT_OK);
    ck_assert_int_eq(n, 7); /* ▁hi ▁ F0 9F 91 8B ! */
    bt_detok_t *d;
    ck_assert_int_eq(bt_detok_init(t, BT_DETOK_STRIP_PREFIX, &d), BT_OK);
    const char *text;
    size_t len;
    char out[64];
    size_t k = 0;
    int pushes_with_output = 0;
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(bt_detok_push(d, ids[i], &text, &len), BT_OK);
        if (i >= 2 && i <= 4)
            ck_assert_uint_eq(len, 0); /* the emoji is incomplete */
        if (i == 5) {
            ck_assert_uint_eq(len, 4); /* now whole, printed once */
            ck_assert(memcmp(text, "\xF0\x9F\x91\x8B", 4) == 0);
        }
        pushes_with_output += len > 0;
        memcpy(out + k, text, len);
        k += len;
    }
    bt_detok_flush(d, &text, &len);
    ck_assert_uint_eq(len, 0);
    out[k] = '\0';
    ck_assert_str_eq(out, emoji);
    ck_assert_int_eq(pushes_with_output, 4); /* hi, " ", emoji, "!" */

    /* a stream that ends inside a character: flush hands the bytes over */
    ck_assert_int_eq(bt_detok_push(d, 3 + 0xF0, &text, &len), BT_OK);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(bt_detok_push(d, 3 + 0x9F, &text, &len), BT_OK);
    ck_assert_uint_eq(len, 0);
    bt_detok_flush(d, &text, &len);
    ck_assert_uint_eq(len, 2);
    ck_assert(memcmp(text, "\xF0\x9F", 2) == 0);
    /* bytes that can never be valid are not held */
    ck_assert_int_eq(bt_detok_push(d, 3 + 0xFF, &text, &len), BT_OK);
    ck_assert_uint_eq(len, 1);
    ck_assert_int_eq(bt_detok_push(d, 3 + 0xE2, &text, &len), BT_OK);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(bt_detok_push(d, 'A' + 3, &text, &len), BT_OK); /* breaks it */
    ck_assert_uint_eq(len, 2);
    ck_assert_int_eq(bt_detok_push(d, -1, &text, &len), BT_ERR_ARG);
    bt_detok_free(d);
    free(ids);
    bt_tokenizer_free(t);
}
END_TEST

START_TEST(test_utf8)
{
    char b[4];
    uint32_t cp;
    ck_assert_int_eq(bt_utf8_encode(0x1F44B, b), 4);
    ck_assert_int_eq(bt_utf8_decode(b, 4, &cp), 4);
    ck_assert_uint_eq(cp, 0x1F44B);
    ck_assert_int_eq(bt_utf8_decode(b, 3, &cp), 1); /* truncated */
    ck_assert_uint_eq(cp, BT_UCD_REPLACEMENT);
    ck_assert_int_eq(bt_utf8_decode("\xC0\x80", 2, &cp), 1); /* overlong */
    ck_assert_int_eq(bt_utf8_decode("\xED\xA0\x80", 3, &cp), 1); /* surrogate */
    ck_assert_uint_eq(bt_utf8_complete_prefix("a\xE2\x96", 3), 1);
    ck_assert_uint_eq(bt_utf8_complete_prefix("a\xE2\x96\x81", 4), 4);
    ck_assert_uint_eq(bt_utf8_complete_prefix("a\xE2\x41", 3), 3);
    ck_assert_uint_eq(bt_utf8_complete_prefix("\x80\x80\x80", 3), 3);
    ck_assert(bt_ucd_is_letter(0x00E9) && bt_ucd_is_letter(0x4F60) && bt_ucd_is_letter(0x0416));
    ck_assert(bt_ucd_is_number('7') && bt_ucd_is_number(0x0663) && bt_ucd_is_number(0x216B));
    ck_assert(bt_ucd_is_space(0x3000) && bt_ucd_is_space(0x85) && !bt_ucd_is_space(0x1C));
    ck_assert(bt_ucd_is_punct(0x3001) && !bt_ucd_is_punct('$'));
    ck_assert_uint_eq(bt_ucd_flags(0x1F44B), 0); /* a symbol */
    ck_assert_uint_eq(bt_ucd_flags(0x10FFFF), 0);
    ck_assert_uint_eq(bt_ucd_flags(0x110000), 0);
}
END_TEST

/* ---- limits ---- */

START_TEST(test_limits_none)
{
    bt_tokenizer_t *t;
    vocab_spec_t v = {SPEC_DEFAULTS, .model = "none"};
    ck_assert_int_eq(load_spec(&v, &t), BT_OK);
    ck_assert_int_eq(bt_tokenizer_kind(t), BT_TOKENIZER_NONE);
    ck_assert_int_eq(bt_tokenizer_n_vocab(t), 0);
    ck_assert_int_eq(bt_tokenizer_bos(t), -1);
    int32_t *ids;
    int n;
    ck_assert_int_eq(bt_tokenizer_encode(t, "hi", 2, true, true, &ids, &n), BT_ERR_UNSUPPORTED);
    ck_assert(!bt_tokenizer_is_eog(t, 0));
    bt_tokenizer_free(t);
    /* no tokenizer.ggml.model at all: also no tokenizer */
    vocab_spec_t v2 = {SPEC_DEFAULTS};
    ck_assert_int_eq(load_spec(&v2, &t), BT_OK);
    ck_assert_int_eq(bt_tokenizer_kind(t), BT_TOKENIZER_NONE);
    bt_tokenizer_free(t);
    vocab_spec_t v3 = {SPEC_DEFAULTS, .model = "bert", .tokens = bpe_tokens, .n_tokens = 3};
    ck_assert_int_eq(load_spec(&v3, &t), BT_ERR_UNSUPPORTED);
}
END_TEST

START_TEST(test_limits_arrays)
{
    bt_tokenizer_t *t;
    static const int32_t types[4] = {1, 1, 1, 1};
    static const float scores[4] = {0};
    static const char *merges_ok[] = {"a b"};
    /* token_type shorter than tokens */
    vocab_spec_t v = {SPEC_DEFAULTS, .model = "llama", .tokens = bpe_tokens, .n_tokens = 4,
                      .types = types, .n_types = 3};
    ck_assert_int_eq(load_spec(&v, &t), BT_ERR_FORMAT);
    /* scores longer than tokens */
    v.n_types = 4;
    v.scores = scores;
    v.n_scores = 4;
    v.n_tokens = 3;
    v.types = NULL;
    ck_assert_int_eq(load_spec(&v, &t), BT_ERR_FORMAT);
    /* no tokens */
    vocab_spec_t v1 = {SPEC_DEFAULTS, .model = "gpt2", .merges = merges_ok, .n_merges = 1};
    ck_assert_int_eq(load_spec(&v1, &t), BT_ERR_FORMAT);
    /* gpt2 without merges */
    vocab_spec_t v2 = {SPEC_DEFAULTS, .model = "gpt2", .tokens = bpe_tokens, .n_tokens = 5};
    ck_assert_int_eq(load_spec(&v2, &t), BT_ERR_FORMAT);
    /* merges naming unknown tokens, forming a non-token, or malformed */
    static const char *bad[][2] = {{"a b", "a q"}, {"a b", "q a"}, {"a b", "c a"},
                                   {"a b", "ab"},  {"a b", "a "},  {"a b", ""}};
    for (int i = 0; i < 6; i++) {
        v2.merges = bad[i];
        v2.n_merges = 2;
        ck_assert_int_eq(load_spec(&v2, &t), BT_ERR_FORMAT);
    }
    v2.merges = merges_ok;
    v2.n_merges = 1;
    ck_assert_int_eq(load_spec(&v2, &t), BT_OK);
    ck_assert_int_eq(bt_tokenizer_pre(t), BT_PRE_DEFAULT); /* no tokenizer.ggml.pre */
    bt_tokenizer_free(t);
    /* a special id out of range is ignored with a warning, as llama.cpp */
    v2.eos = 99;
    v2.pre = "mystery";
    ck_assert_int_eq(load_spec(&v2, &t), BT_OK);
    ck_assert_int_eq(bt_tokenizer_eos(t), -1);
    bt_tokenizer_free(t);
    /* NULL text */
    ck_assert_int_eq(load_spec(&v2, &t), BT_OK);
    int32_t *ids;
    int n;
    ck_assert_int_eq(bt_tokenizer_encode(t, NULL, 1, false, false, &ids, &n), BT_ERR_ARG);
    ck_assert_int_eq(bt_tokenizer_encode(t, NULL, 0, false, false, &ids, &n), BT_OK);
    ck_assert_int_eq(n, 0);
    ck_assert_ptr_null(ids);
    bt_tokenizer_free(t);
}
END_TEST

/* ---- reference data ---- */

/* Undoes the escaping of the data files (\\ \n \r \t \xHH) in place. */
static size_t unescape(char *s)
{
    size_t k = 0;
    for (size_t i = 0; s[i] != '\0'; i++) {
        if (s[i] != '\\') {
            s[k++] = s[i];
            continue;
        }
        char c = s[++i];
        if (c == 'n')
            s[k++] = '\n';
        else if (c == 'r')
            s[k++] = '\r';
        else if (c == 't')
            s[k++] = '\t';
        else if (c == 'x') {
            char hex[3] = {s[i + 1], s[i + 2], 0};
            s[k++] = (char)strtol(hex, NULL, 16);
            i += 2;
        } else
            s[k++] = c;
    }
    s[k] = '\0';
    return k;
}

typedef struct ref_case {
    const char *pre;  /* smollm2 only */
    bool special;     /* smollm2, gemma3: MODE "special" (parse_special) */
    char *text;
    size_t len;
    int32_t ids[512];
    int n;
} ref_case_t;

/* Reads a data file's cases; fields: n_fields tab-separated, the last two
 * TEXT and IDS, before them MODE (3 or 4 fields), before that PRE (4).
 * Returns the count; *buf owns the strings. */
static int read_cases(const char *name, int n_fields, ref_case_t *cases, int max, char **buf)
{
    char path[700];
    snprintf(path, sizeof path, "%s/tests/data/%s", tu_srcdir(), name);
    size_t size;
    char *data = tu_read_file(path, &size);
    ck_assert_msg(data != NULL, "cannot read %s (set BT_SRCDIR to the source tree)", path);
    data = realloc(data, size + 1);
    data[size] = '\0';
    int n = 0;
    for (char *line = strtok(data, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (line[0] == '#')
            continue;
        ck_assert_int_lt(n, max);
        ref_case_t *c = &cases[n++];
        char *f[4];
        char *p = line;
        for (int i = 0; i < n_fields; i++) {
            f[i] = p;
            p = strchr(p, '\t');
            if (i < n_fields - 1) {
                ck_assert_msg(p != NULL, "%s: bad line '%s'", name, line);
                *p++ = '\0';
            }
        }
        c->pre = n_fields == 4 ? f[0] : NULL;
        c->special = n_fields >= 3 && strcmp(f[n_fields - 3], "special") == 0;
        c->text = f[n_fields - 2];
        c->len = unescape(c->text);
        c->n = 0;
        for (char *q = f[n_fields - 1]; *q != '\0';) {
            char *end;
            long id = strtol(q, &end, 10);
            if (end == q)
                break;
            ck_assert_int_lt(c->n, 512);
            c->ids[c->n++] = (int32_t)id;
            q = end;
        }
    }
    *buf = data;
    return n;
}

/* Encodes one case and compares; prints the difference. Also checks that
 * decoding gives the text back. Returns true when both hold. */
static bool check_case(const bt_tokenizer_t *t, const ref_case_t *c, bool parse_special,
                       int decode_flags, const char *label)
{
    int32_t *ids;
    int n;
    ck_assert_int_eq(bt_tokenizer_encode(t, c->text, c->len, false, parse_special, &ids, &n),
                     BT_OK);
    bool same = n == c->n && (n == 0 || memcmp(ids, c->ids, (size_t)n * sizeof *ids) == 0);
    if (!same) {
        fprintf(stderr, "%s: '%s'\n  got ", label, c->text);
        for (int i = 0; i < n; i++)
            fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n  want");
        for (int i = 0; i < c->n; i++)
            fprintf(stderr, " %d", c->ids[i]);
        fprintf(stderr, "\n");
    }
    char *s;
    size_t len;
    ck_assert_int_eq(bt_tokenizer_decode(t, ids, n, decode_flags, &s, &len), BT_OK);
    bool round = len == c->len && memcmp(s, c->text, len) == 0;
    if (!round)
        fprintf(stderr, "%s: decode of '%s' gave '%s'\n", label, c->text, s);
    /* the streaming decoder gives the same bytes */
    bt_detok_t *d;
    ck_assert_int_eq(bt_detok_init(t, decode_flags, &d), BT_OK);
    char *out = malloc(len + 1);
    size_t k = 0;
    const char *piece;
    size_t plen;
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(bt_detok_push(d, ids[i], &piece, &plen), BT_OK);
        ck_assert_uint_le(k + plen, len);
        ck_assert_uint_eq(bt_utf8_complete_prefix(piece, plen), plen);
        memcpy(out + k, piece, plen);
        k += plen;
    }
    bt_detok_flush(d, &piece, &plen);
    ck_assert_uint_le(k + plen, len);
    memcpy(out + k, piece, plen);
    k += plen;
    ck_assert(k == len && memcmp(out, s, len) == 0);
    bt_detok_free(d);
    free(out);
    free(s);
    free(ids);
    return same && round;
}

/* ---- smollm2 ---- */

/* Where the SmolLM2 model is: $BT_SMOLLM2, else <srcdir>/models/. */
static const char *smollm2_path(void)
{
    static char path[700];
    return tu_model_path("BT_SMOLLM2", "SmolLM2-135M-Instruct.Q4_1.gguf", path, sizeof path);
}

/* Copies the real vocabulary into a GGUF with another tokenizer.ggml.pre. */
static bt_tokenizer_t *smollm2_with_pre(const bt_gguf_t *g, const char *pre)
{
    char path[700];
    snprintf(path, sizeof path, "%s/smollm2-%s.gguf", tmpdir, pre);
    bt_gguf_writer_t *w;
    ck_assert_int_eq(bt_gguf_writer_init(&w), BT_OK);
    bt_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    bt_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    const char *keys[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"};
    for (int k = 0; k < 2; k++) {
        const bt_gguf_kv_t *kv = bt_gguf_find_kv(g, keys[k]);
        ck_assert_ptr_nonnull(kv);
        char **v = malloc(kv->arr_n * sizeof *v);
        uint64_t pos = 0, i = 0;
        bt_gguf_str_t s;
        while (bt_gguf_arr_next_str(kv, &pos, &s))
            v[i++] = strndup(s.ptr, s.len);
        ck_assert_int_eq(bt_gguf_writer_set_arr_str(w, keys[k], (const char *const *)v, i),
                         BT_OK);
        for (uint64_t j = 0; j < i; j++)
            free(v[j]);
        free(v);
    }
    const bt_gguf_kv_t *types = bt_gguf_find_kv(g, "tokenizer.ggml.token_type");
    ck_assert_ptr_nonnull(types);
    ck_assert_int_eq(bt_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", BT_GGUF_INT32,
                                            types->arr_data, types->arr_n),
                     BT_OK);
    ck_assert_int_eq(bt_gguf_writer_begin(w, path), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_finish(w), BT_OK);
    bt_gguf_writer_free(w);
    bt_gguf_t *g2;
    bt_tokenizer_t *t;
    ck_assert_int_eq(bt_gguf_open(path, &g2), BT_OK);
    ck_assert_int_eq(bt_tokenizer_load(g2, &t), BT_OK);
    bt_gguf_close(g2);
    return t;
}

/* The best of 5 loads of g's tokenizer, in seconds; *t is the last one. */
static double best_load(const bt_gguf_t *g, bt_tokenizer_t **t)
{
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = bt_now();
        ck_assert_int_eq(bt_tokenizer_load(g, t), BT_OK);
        double dt = bt_now() - t0;
        best = dt < best ? dt : best;
        if (rep < 4)
            bt_tokenizer_free(*t);
    }
    return best;
}

START_TEST(test_smollm2_load)
{
    const char *path = smollm2_path();
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);
    bt_tokenizer_t *t;
    const double best = best_load(g, &t);
    fprintf(stderr, "smollm2: tokenizer load (49152 tokens, 48900 merges): best of 5 %.1f ms\n",
            best * 1e3);
    /* a time is reported, never asserted: the machine may be slow or shared */
    bt_gguf_close(g);

    ck_assert_int_eq(bt_tokenizer_kind(t), BT_TOKENIZER_BPE);
    ck_assert_int_eq(bt_tokenizer_pre(t), BT_PRE_SMOLLM);
    ck_assert_int_eq(bt_tokenizer_n_vocab(t), 49152);
    ck_assert_int_eq(bt_tokenizer_bos(t), 1);
    ck_assert_int_eq(bt_tokenizer_eos(t), 2);
    ck_assert_int_eq(bt_tokenizer_eot(t), 2); /* <|im_end|> by its text */
    ck_assert_int_eq(bt_tokenizer_unk(t), 0);
    ck_assert_int_eq(bt_tokenizer_pad(t), 2);
    ck_assert(!bt_tokenizer_add_bos(t));
    ck_assert(!bt_tokenizer_add_eos(t));
    ck_assert(bt_tokenizer_is_eog(t, 0));  /* <|endoftext|> */
    ck_assert(bt_tokenizer_is_eog(t, 2));  /* <|im_end|> */
    ck_assert(!bt_tokenizer_is_eog(t, 1)); /* <|im_start|> */
    ck_assert(!bt_tokenizer_is_eog(t, 100));
    ck_assert_int_eq(bt_tokenizer_find(t, "<|im_start|>", 12), 1);
    ck_assert_str_eq(bt_tokenizer_token_text(t, 1), "<|im_start|>");
    /* add_special adds nothing: add_bos_token is false */
    EXPECT(t, "Hello world", true, false, 19556, 905);
    bt_tokenizer_free(t);
}
END_TEST

START_TEST(test_smollm2_reference)
{
    const char *path = smollm2_path();
    static ref_case_t cases[256];
    char *buf;
    int n = read_cases("smollm2-tokenizer.txt", 4, cases, 256, &buf);
    ck_assert_int_ge(n, 100);
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);
    static const char *pres[] = {"smollm", "gpt2", "llama3", "qwen2", "default"};
    int n_bad = 0, n_checked = 0;
    for (int p = 0; p < 5; p++) {
        bt_tokenizer_t *t;
        if (p == 0)
            ck_assert_int_eq(bt_tokenizer_load(g, &t), BT_OK);
        else
            t = smollm2_with_pre(g, pres[p]);
        ck_assert_str_eq(bt_tokenizer_pre_name(bt_tokenizer_pre(t)), pres[p]);
        int n_pre = 0;
        for (int i = 0; i < n; i++) {
            if (strcmp(cases[i].pre, pres[p]) != 0)
                continue;
            char label[64];
            snprintf(label, sizeof label, "smollm2 %s %s", pres[p],
                     cases[i].special ? "special" : "plain");
            n_bad += !check_case(t, &cases[i], cases[i].special, BT_DETOK_SPECIAL, label);
            n_pre++;
        }
        ck_assert_int_ge(n_pre, 20);
        n_checked += n_pre;
        bt_tokenizer_free(t);
    }
    fprintf(stderr, "smollm2: %d reference cases, %d differ\n", n_checked, n_bad);
    ck_assert_int_eq(n_checked, n);
    ck_assert_int_eq(n_bad, 0);
    bt_gguf_close(g);
    free(buf);
}
END_TEST

/* ---- gemma3 ---- */

/* Where the Gemma 3 model is: $BT_GEMMA3, else <srcdir>/models/. */
static const char *gemma3_path(void)
{
    static char path[700];
    return tu_model_path("BT_GEMMA3", "gemma-3-270m-q4_k_m.gguf", path, sizeof path);
}

static bt_tokenizer_t *gemma3_load(void)
{
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(gemma3_path(), &g), BT_OK);
    bt_tokenizer_t *t;
    ck_assert_int_eq(bt_tokenizer_load(g, &t), BT_OK);
    bt_gguf_close(g);
    return t;
}

START_TEST(test_gemma3_load)
{
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(gemma3_path(), &g), BT_OK);
    bt_tokenizer_t *t;
    const double best = best_load(g, &t);
    fprintf(stderr, "gemma3: tokenizer load (262144 tokens): best of 5 %.1f ms\n", best * 1e3);
    /* a time is reported, never asserted: the machine may be slow or shared */
    bt_gguf_close(g);

    /* Gemma 3's vocabulary as llama.cpp reads it (tests/data/README.md) */
    ck_assert_int_eq(bt_tokenizer_kind(t), BT_TOKENIZER_SPM);
    ck_assert_int_eq(bt_tokenizer_n_vocab(t), 262144);
    ck_assert_int_eq(bt_tokenizer_bos(t), 2);
    ck_assert_int_eq(bt_tokenizer_eos(t), 1);
    ck_assert_int_eq(bt_tokenizer_eot(t), 106); /* <end_of_turn> by its text */
    ck_assert_int_eq(bt_tokenizer_unk(t), 3);
    ck_assert_int_eq(bt_tokenizer_pad(t), 0);
    ck_assert(bt_tokenizer_add_bos(t));
    ck_assert(!bt_tokenizer_add_eos(t));
    int n_type[8] = {0};
    for (int32_t id = 0; id < 262144; id++)
        n_type[bt_tokenizer_token_type(t, id)]++;
    /* 6249 control, 165 user-defined in the file; llama.cpp re-types the
     * user-defined "</s>" (212) as control because it ends generation */
    ck_assert_int_eq(n_type[BT_TOKEN_NORMAL], 255474);
    ck_assert_int_eq(n_type[BT_TOKEN_CONTROL], 6249 + 1);
    ck_assert_int_eq(n_type[BT_TOKEN_USER_DEFINED], 165 - 1);
    ck_assert_int_eq(n_type[BT_TOKEN_BYTE], 256);
    ck_assert_str_eq(bt_tokenizer_token_text(t, 212), "</s>");
    ck_assert_int_eq(bt_tokenizer_token_type(t, 212), BT_TOKEN_CONTROL);
    /* end of generation: <eos>, <end_of_turn>, </s>; not <start_of_turn> */
    for (int32_t id = 0; id < 262144; id++)
        ck_assert_int_eq(bt_tokenizer_is_eog(t, id), id == 1 || id == 106 || id == 212);
    ck_assert_int_eq(bt_tokenizer_find(t, "<start_of_turn>", 15), 105);
    ck_assert_int_eq(bt_tokenizer_find(t, "<0x00>", 6), 238);
    ck_assert_int_eq(bt_tokenizer_find(t, "<0xFF>", 6), 493);
    /* no space prefix: "The" at the start is 818 "The", not "\u2581The" */
    EXPECT(t, "The", true, true, 2, 818);
    /* user-defined whitespace runs are split out without parse_special */
    EXPECT(t, "\n\n", false, false, 108);
    EXPECT(t, "x    y", false, false, 236781, 140, 236762);
    /* control tokens only with parse_special; </s> is control now */
    EXPECT(t, "<end_of_turn>", false, true, 106);
    EXPECT(t, "</s>", false, true, 212);
    /* pieces: control tokens are empty unless special, bytes are bytes */
    char buf[32];
    ck_assert_int_eq(bt_tokenizer_piece(t, 106, false, buf, sizeof buf), 0);
    ck_assert_int_eq(bt_tokenizer_piece(t, 106, true, buf, sizeof buf), 13);
    ck_assert_int_eq(bt_tokenizer_piece(t, 140, false, buf, sizeof buf), 4);
    ck_assert(memcmp(buf, "    ", 4) == 0);
    ck_assert_int_eq(bt_tokenizer_piece(t, 238 + 0xF3, false, buf, sizeof buf), 1);
    ck_assert_int_eq((uint8_t)buf[0], 0xF3);
    ck_assert_int_eq(bt_tokenizer_piece(t, 563, false, buf, sizeof buf), 3);
    ck_assert(memcmp(buf, " is", 3) == 0);

    /* encoding speed on 64 KiB of code and prose (reported, not asserted):
     * every one of the 6414 special tokens is searched for in the text */
    static const char chunk[] = "def fibonacci(n):\n    if n < 2:\n        return n\n"
                                "The capital of France is Paris.\t\u4f60\u597d\n\n";
    size_t len = 0, cap = 64 * 1024;
    char *text = malloc(cap);
    while (len + sizeof chunk - 1 <= cap) {
        memcpy(text + len, chunk, sizeof chunk - 1);
        len += sizeof chunk - 1;
    }
    int32_t *ids;
    int n;
    double t0 = bt_now();
    ck_assert_int_eq(bt_tokenizer_encode(t, text, len, true, true, &ids, &n), BT_OK);
    fprintf(stderr, "gemma3: encode of %zu bytes: %d tokens in %.1f ms\n", len, n,
            (bt_now() - t0) * 1e3);
    free(ids);
    free(text);
    bt_tokenizer_free(t);
}
END_TEST

START_TEST(test_gemma3_reference)
{
    static ref_case_t cases[64];
    char *buf;
    int n = read_cases("gemma3-tokenizer.txt", 3, cases, 64, &buf);
    ck_assert_int_ge(n, 20);
    bt_tokenizer_t *t = gemma3_load();
    int n_bad = 0;
    for (int i = 0; i < n; i++)
        n_bad += !check_case(t, &cases[i], cases[i].special,
                             cases[i].special ? BT_DETOK_SPECIAL : 0,
                             cases[i].special ? "gemma3 special" : "gemma3 plain");
    fprintf(stderr, "gemma3: %d reference cases, %d differ\n", n, n_bad);
    ck_assert_int_eq(n_bad, 0);
    bt_tokenizer_free(t);
    free(buf);
}
END_TEST

/* llama.cpp's own ids for the two golden prompts (add_special and
 * parse_special, as the references were made). */
START_TEST(test_gemma3_golden_prompts)
{
    size_t size;
    char *data = tu_read_file(tu_golden_path("gemma3-270m-greedy.txt"), &size);
    ck_assert(data != NULL);
    data = realloc(data, size + 1);
    data[size] = '\0';
    bt_tokenizer_t *t = gemma3_load();
    int n_prompts = 0;
    char *prompt = NULL;
    for (char *line = strtok(data, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (strncmp(line, "prompt: \"", 9) == 0) {
            /* a JSON string; these two need only \n and \" unescaped */
            prompt = line + 9;
            char *end = strrchr(prompt, '"');
            ck_assert(end != NULL);
            *end = '\0';
            unescape(prompt);
        } else if (strncmp(line, "prompt_ids: ", 12) == 0) {
            ck_assert(prompt != NULL);
            int32_t want[64];
            int n_want = 0;
            for (char *q = line + 12; n_want < 64;) {
                char *end;
                long id = strtol(q, &end, 10);
                if (end == q)
                    break;
                want[n_want++] = (int32_t)id;
                q = *end == ',' ? end + 1 : end;
            }
            expect_ids(t, prompt, true, true, want, n_want);
            n_prompts++;
            prompt = NULL;
        }
    }
    ck_assert_int_eq(n_prompts, 2);
    bt_tokenizer_free(t);
    free(data);
}
END_TEST

/* --chat on the Gemma 3 base file (no chat_template key): the Gemma format,
 * whose markers are single control tokens of this vocabulary. */
START_TEST(test_gemma3_chat)
{
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(gemma3_path(), &g), BT_OK);
    ck_assert_ptr_null(bt_gguf_find_kv(g, "tokenizer.chat_template"));
    ck_assert_int_eq(bt_chat_format(g), BT_CHAT_GEMMA);
    bt_gguf_close(g);
    bt_tokenizer_t *t = gemma3_load();
    char *s = bt_chat_turn(BT_CHAT_GEMMA, "Hi", NULL, true);
    EXPECT(t, s, true, true, 2, 105, 2364, 107, 10979, 106, 107, 105, 4368, 107);
    free(s);
    s = bt_chat_turn(BT_CHAT_GEMMA, "And 3+3?", NULL, false);
    EXPECT(t, s, false, true, 106, 107, 105, 2364, 107, 3133, 236743, 236800, 236862, 236800,
           236881, 106, 107, 105, 4368, 107);
    free(s);
    /* the reply stops at <end_of_turn> */
    ck_assert(bt_tokenizer_is_eog(t, 106));
    bt_tokenizer_free(t);
}
END_TEST

/* ---- spm-ref ---- */

START_TEST(test_spm_reference)
{
    char path[700];
    snprintf(path, sizeof path, "%s/tests/data/spm-tiny.gguf", tu_srcdir());
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);
    bt_tokenizer_t *t;
    ck_assert_int_eq(bt_tokenizer_load(g, &t), BT_OK);
    bt_gguf_close(g);
    ck_assert_int_eq(bt_tokenizer_kind(t), BT_TOKENIZER_SPM);
    static ref_case_t cases[64];
    char *buf;
    int n = read_cases("spm-tiny-tokenizer.txt", 2, cases, 64, &buf);
    ck_assert_int_ge(n, 10);
    int n_bad = 0;
    for (int i = 0; i < n; i++)
        n_bad += !check_case(t, &cases[i], false, BT_DETOK_STRIP_PREFIX, "spm");
    fprintf(stderr, "spm: %d reference cases, %d differ\n", n, n_bad);
    ck_assert_int_eq(n_bad, 0);
    /* with BOS */
    int32_t *ids;
    int n_ids;
    ck_assert_int_eq(bt_tokenizer_encode(t, cases[0].text, cases[0].len, true, false, &ids,
                                         &n_ids),
                     BT_OK);
    ck_assert_int_eq(n_ids, cases[0].n + 1);
    ck_assert_int_eq(ids[0], bt_tokenizer_bos(t));
    free(ids);
    free(buf);
    bt_tokenizer_free(t);
}
END_TEST

/* The suite that needs the real SmolLM2 model (the --smollm2 run). */
static Suite *smollm2_suite(void)
{
    Suite *s = suite_create("tokenizer (SmolLM2)");
    TCase *tc = tcase_create("smollm2");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_smollm2_load);
    tcase_add_test(tc, test_smollm2_reference);
    suite_add_tcase(s, tc);
    return s;
}

/* The suite that needs the real Gemma 3 model (the --gemma3 run). */
static Suite *gemma3_suite(void)
{
    Suite *s = suite_create("tokenizer (Gemma 3)");
    TCase *tc = tcase_create("gemma3");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_gemma3_load);
    tcase_add_test(tc, test_gemma3_reference);
    tcase_add_test(tc, test_gemma3_golden_prompts);
    tcase_add_test(tc, test_gemma3_chat);
    suite_add_tcase(s, tc);
    return s;
}

static Suite *tokenizer_suite(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("bpe");
    tcase_add_test(tc, test_bpe_merge_order);
    tcase_add_test(tc, test_bpe_special);
    suite_add_tcase(s, tc);
    tc = tcase_create("spm");
    tcase_add_test(tc, test_spm_merges);
    tcase_add_test(tc, test_spm_byte_fallback);
    suite_add_tcase(s, tc);
    tc = tcase_create("detok");
    tcase_add_test(tc, test_detok_pieces);
    tcase_add_test(tc, test_detok_stream);
    tcase_add_test(tc, test_utf8);
    suite_add_tcase(s, tc);
    tc = tcase_create("limits");
    tcase_add_test(tc, test_limits_none);
    tcase_add_test(tc, test_limits_arrays);
    suite_add_tcase(s, tc);
    tc = tcase_create("spm-ref");
    tcase_add_test(tc, test_spm_reference);
    suite_add_tcase(s, tc);
    return s;
}

/* check_tokenizer: every suite that needs only the repository.
 * check_tokenizer --smollm2 / --gemma3: the SmolLM2 / Gemma 3 vocabulary;
 * exits 77 (a skip) when the model has not been fetched. */
int main(int argc, char **argv)
{
    const bool smollm2 = argc > 1 && strcmp(argv[1], "--smollm2") == 0;
    const bool gemma3 = argc > 1 && strcmp(argv[1], "--gemma3") == 0;
    if (smollm2 && access(smollm2_path(), R_OK) != 0) {
        printf("SKIP: SmolLM2 tokenizer: model not found at %s (set BT_SMOLLM2, or run "
               "scripts/fetch-smollm2)\n",
               smollm2_path());
        return 77;
    }
    if (gemma3 && access(gemma3_path(), R_OK) != 0) {
        printf("SKIP: Gemma 3 tokenizer: model gemma-3-270m-q4_k_m.gguf not found at %s (set "
               "BT_GEMMA3, or run scripts/fetch-gemma3)\n",
               gemma3_path());
        return 77;
    }
    tmpdir = tu_mkdtemp();
    if (tmpdir == NULL) {
        perror("mkdtemp");
        return 1;
    }
    int failed = tu_run(smollm2  ? smollm2_suite()
                        : gemma3 ? gemma3_suite()
                                 : tokenizer_suite());
    tu_rmdir_all(tmpdir);
    return failed == 0 ? 0 : 1;
}
