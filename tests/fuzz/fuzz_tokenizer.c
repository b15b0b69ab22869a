/*
 * fuzz_tokenizer.c: libFuzzer target for the tokenizer loader.
 *
 * Each input is a whole GGUF file, parsed from memory. When it opens, a
 * tokenizer is built from its tokenizer.ggml.* metadata; when that loads,
 * a few fixed strings plus the input's trailing bytes (whatever follows the
 * header, so a mutation there changes the text but keeps the file valid)
 * are encoded with every combination of add_special / parse_special, then
 * decoded whole and through the streaming decoder, and every id of the
 * vocabulary (and a few out of range) is asked for its piece, type and
 * text. The streaming decoder must give exactly what bt_tokenizer_decode()
 * gives (tokenizer.h promises it); anything else aborts, a crash to
 * libFuzzer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gguf.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(cond) \
    do { \
        if (!(cond)) { \
            bt_log_capture(0); \
            bt_log_error("fuzz_tokenizer: assertion failed: %s", #cond); \
            abort(); \
        } \
    } while (0)

/* Longest trailing text taken from the input, and most ids looked at. */
#define TAIL_MAX 256
#define IDS_MAX 4096

static const char *const texts[] = {
    "Hello world",
    " <|im_start|>user\nWhat is 2+2? <|im_end|>\n",
    "  spaces\t\ttabs\r\n\n 12345 3.14 don't I'LL",
    "Z\xc3\xbcrich caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82",
    "\xff\xfe\xc3 broken \xe6\x97 utf-8 \x80",
    "<s></s><unk><|endoftext|>",
};

/* Decodes ids whole and streamed; the two must agree byte for byte. */
static void check_decode(const bt_tokenizer_t *t, const int32_t *ids, int n, int flags)
{
    char *whole = NULL;
    size_t whole_len = 0;
    if (bt_tokenizer_decode(t, ids, n, flags, &whole, &whole_len) != BT_OK)
        return;
    FUZZ_ASSERT(whole != NULL && whole[whole_len] == '\0');

    bt_detok_t *d = NULL;
    if (bt_detok_init(t, flags, &d) == BT_OK) {
        char *cat = malloc(whole_len + 1);
        size_t cat_len = 0;
        FUZZ_ASSERT(cat != NULL);
        for (int i = 0; i < n; i++) {
            const char *piece;
            size_t len;
            /* Refused ids are those out of range, which decode as empty. */
            if (bt_detok_push(d, ids[i], &piece, &len) != BT_OK) {
                FUZZ_ASSERT(ids[i] < 0 || ids[i] >= bt_tokenizer_n_vocab(t));
                continue;
            }
            FUZZ_ASSERT(cat_len + len <= whole_len);
            memcpy(cat + cat_len, piece, len);
            cat_len += len;
        }
        const char *rest;
        size_t rest_len;
        bt_detok_flush(d, &rest, &rest_len);
        FUZZ_ASSERT(cat_len + rest_len == whole_len);
        memcpy(cat + cat_len, rest, rest_len);
        FUZZ_ASSERT(memcmp(cat, whole, whole_len) == 0);
        free(cat);
        bt_detok_free(d);
    }
    free(whole);
}

static void use_text(const bt_tokenizer_t *t, const char *text, size_t len)
{
    for (int mode = 0; mode < 4; mode++) {
        int32_t *ids = NULL;
        int n = 0;
        if (bt_tokenizer_encode(t, text, len, mode & 1, (mode & 2) != 0, &ids, &n) != BT_OK)
            continue;
        int32_t nv = bt_tokenizer_n_vocab(t);
        for (int i = 0; i < n; i++)
            FUZZ_ASSERT(ids[i] >= 0 && ids[i] < nv);
        check_decode(t, ids, n, 0);
        check_decode(t, ids, n, BT_DETOK_SPECIAL | BT_DETOK_STRIP_PREFIX);
        free(ids);
    }
}

static void use_vocab(const bt_tokenizer_t *t)
{
    char buf[64];
    int32_t nv = bt_tokenizer_n_vocab(t);
    int32_t last = nv < IDS_MAX ? nv : IDS_MAX;
    for (int32_t id = -2; id < last + 2; id++) {
        (void)bt_tokenizer_is_eog(t, id);
        (void)bt_tokenizer_token_type(t, id);
        int len = bt_tokenizer_piece(t, id, true, buf, sizeof buf);
        FUZZ_ASSERT(len >= 0);
        const char *text = bt_tokenizer_token_text(t, id);
        FUZZ_ASSERT((text != NULL) == (id >= 0 && id < nv));
        if (text != NULL) {
            /* -1 is possible: a token text with a NUL in it is cut short here. */
            int32_t found = bt_tokenizer_find(t, text, strlen(text));
            FUZZ_ASSERT(found >= -1 && found < nv);
        }
    }
    int32_t specials[] = {bt_tokenizer_bos(t), bt_tokenizer_eos(t), bt_tokenizer_eot(t),
                          bt_tokenizer_unk(t), bt_tokenizer_pad(t), -7, nv, INT32_MAX};
    check_decode(t, specials, (int)(sizeof specials / sizeof specials[0]), 0);
    check_decode(t, specials, (int)(sizeof specials / sizeof specials[0]), BT_DETOK_SPECIAL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bt_gguf_t *g = NULL;
    bt_tokenizer_t *t = NULL;

    /* The file lives in a copy that is freed right after the load, so
     * AddressSanitizer catches a tokenizer that kept a pointer into it
     * (tokenizer.h: it does not depend on the file after the load). */
    uint8_t *copy = malloc(size > 0 ? size : 1);
    FUZZ_ASSERT(copy != NULL);
    if (size > 0)
        memcpy(copy, data, size);
    bt_log_capture(1);
    bt_status_t st = bt_gguf_open_buffer(copy, size, "fuzz.gguf", &g);
    uint64_t data_offset = st == BT_OK ? g->data_offset : UINT64_MAX;
    if (st == BT_OK) {
        st = bt_tokenizer_load(g, &t);
        bt_gguf_close(g);
    }
    free(copy);
    if (st != BT_OK)
        goto out;
    (void)bt_tokenizer_kind_name(bt_tokenizer_kind(t));
    (void)bt_tokenizer_pre_name(bt_tokenizer_pre(t));
    if (bt_tokenizer_kind(t) != BT_TOKENIZER_NONE) {
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
            use_text(t, texts[i], strlen(texts[i]));
        if (data_offset < size) {
            size_t tail = size - (size_t)data_offset;
            if (tail > TAIL_MAX)
                tail = TAIL_MAX;
            use_text(t, (const char *)data + size - tail, tail);
        }
        use_vocab(t);
    }
    bt_tokenizer_free(t);
out:
    bt_log_flush_captured(0);
    bt_log_capture(0);
    return 0;
}
