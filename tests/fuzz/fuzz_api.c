/*
 * fuzz_api.c: libFuzzer target for baton-server's request parser (api.h):
 * OpenAI JSON bodies into baton requests.
 *
 * An input's first byte picks the endpoint and what the server knows
 * (bt_api_ctx_t); the rest is the body:
 *   bits 0-1  endpoint: 0 chat, 1 completion, 2 tokenize, 3 detokenize
 *   bits 2-3  chat format (bt_chat_format_t: none, chatml, gemma, llama3)
 *   bit 4     the model has no tokenizer
 *   bits 5-6  n_vocab: 1, 10, 256 or 152064
 *   bit 7     the template has a default system message
 * (tests/fuzz/make-seeds.py --api writes the seeds with the same layout.)
 *
 * Whatever the body, the parser must keep api.h's promises, and anything
 * else aborts, a crash to libFuzzer. Accepted: a request that is consistent
 * (a completion has exactly one of text and ids, the ids inside n_vocab, a
 * chat request a rendered conversation in valid UTF-8 that ends with the
 * opening of the assistant's reply; max_tokens -1 or >= 1; sampling values
 * inside the ranges api.c checks and sampler.h accepts; top_logprobs 0..20
 * and only with logprobs; at most BT_API_MAX_STOP stop strings of 1 to
 * BT_API_MAX_STOP_LEN bytes; include_usage only with stream) and that
 * agrees with the body read again here with Jansson. Refused: a 4xx or 500
 * status, a type, a non-empty message, an empty request, and an error
 * object that bt_api_error_json() builds and Jansson serializes and reads
 * back with the same message. Everything is freed, so LeakSanitizer sees a
 * leak on either path.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "common.h"
#include "sampler.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts with a reason: a broken invariant is a crash to libFuzzer. */
#define FUZZ_ASSERT(cond) \
    do { \
        if (!(cond)) { \
            bt_log_error("fuzz_api: assertion failed: %s", #cond); \
            abort(); \
        } \
    } while (0)

enum { EP_CHAT = 0, EP_COMPLETION = 1, EP_TOKENIZE = 2, EP_DETOKENIZE = 3 };

static const int vocab_sizes[4] = {1, 10, 256, 152064};

/* Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF)
 * and no NUL in s[0..n). */
static bool valid_utf8(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        uint32_t cp, min;
        if (c == 0)
            return false;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf)
            k = 1, cp = c & 0x1f, min = 0x80;
        else if (c >= 0xe0 && c <= 0xef)
            k = 2, cp = c & 0x0f, min = 0x800;
        else if (c >= 0xf0 && c <= 0xf4)
            k = 3, cp = c & 0x07, min = 0x10000;
        else
            return false;
        if (n - i <= k)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k + 1;
    }
    return true;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && memcmp(s + n - m, tail, m) == 0;
}

/* The body as the parser read it (it must have, to accept it). */
static json_t *reload(const char *body, size_t len)
{
    json_t *obj = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    FUZZ_ASSERT(json_is_object(obj));
    return obj;
}

/* obj's field name, NULL when absent or JSON null (api.c's rule). */
static json_t *field(json_t *obj, const char *name)
{
    json_t *v = json_object_get(obj, name);
    return json_is_null(v) ? NULL : v;
}

/* A sampling number: the body's value when given, else the default. */
static void check_number(json_t *obj, const char *name, float got, float dflt)
{
    json_t *v = field(obj, name);
    FUZZ_ASSERT(isfinite(got));
    if (v == NULL)
        FUZZ_ASSERT(got == dflt);
    else
        FUZZ_ASSERT(json_is_number(v) && got == (float)json_number_value(v));
}

/* The refusal api.h promises: a status, a type, a message, an empty
 * request, and an error object that serializes. */
static void check_error(const bt_api_error_t *err)
{
    FUZZ_ASSERT((err->status >= 400 && err->status <= 499) || err->status == 500);
    FUZZ_ASSERT(err->type != NULL && err->type[0] != '\0');
    FUZZ_ASSERT(memchr(err->param, '\0', sizeof err->param) != NULL);
    FUZZ_ASSERT(memchr(err->message, '\0', sizeof err->message) != NULL);
    FUZZ_ASSERT(err->message[0] != '\0');
    json_t *j = bt_api_error_json(err);
    FUZZ_ASSERT(j != NULL);
    char *text = json_dumps(j, JSON_COMPACT);
    FUZZ_ASSERT(text != NULL);
    json_t *back = json_loads(text, 0, NULL);
    FUZZ_ASSERT(back != NULL);
    json_t *e = json_object_get(back, "error");
    FUZZ_ASSERT(json_is_object(e));
    json_t *msg = json_object_get(e, "message");
    FUZZ_ASSERT(json_is_string(msg) && strcmp(json_string_value(msg), err->message) == 0);
    json_t *param = json_object_get(e, "param");
    FUZZ_ASSERT(err->param[0] == '\0' ? json_is_null(param)
                                      : json_is_string(param) &&
                                            strcmp(json_string_value(param), err->param) == 0);
    json_decref(back);
    free(text);
    json_decref(j);
}

static void check_empty(const bt_api_request_t *rq)
{
    FUZZ_ASSERT(rq->text == NULL && rq->ids == NULL && rq->n_ids == 0 && rq->n_stop == 0);
    for (int i = 0; i < BT_API_MAX_STOP; i++)
        FUZZ_ASSERT(rq->stop[i] == NULL);
}

/* The rendered conversation: the format's markers around it. */
static void check_chat_text(const bt_api_ctx_t *ctx, const char *text)
{
    static const char *const open[] = {
        [BT_CHAT_CHATML] = "<|im_start|>",
        [BT_CHAT_GEMMA] = "<start_of_turn>",
        [BT_CHAT_LLAMA3] = "<|start_header_id|>",
    };
    static const char *const reply[] = {
        [BT_CHAT_CHATML] = "<|im_start|>assistant\n",
        [BT_CHAT_GEMMA] = "<start_of_turn>model\n",
        [BT_CHAT_LLAMA3] = "<|start_header_id|>assistant<|end_header_id|>\n\n",
    };
    FUZZ_ASSERT(ctx->chat >= BT_CHAT_CHATML && ctx->chat <= BT_CHAT_LLAMA3);
    FUZZ_ASSERT(strncmp(text, open[ctx->chat], strlen(open[ctx->chat])) == 0);
    FUZZ_ASSERT(ends_with(text, reply[ctx->chat]));
}

/* An accepted request: consistent in itself and with the body. */
static void check_request(bt_api_kind_t kind, const char *body, size_t len,
                          const bt_api_ctx_t *ctx, const bt_api_request_t *rq)
{
    json_t *obj = reload(body, len);
    FUZZ_ASSERT(rq->kind == kind);

    /* the prompt */
    if (kind == BT_API_CHAT) {
        FUZZ_ASSERT(ctx->has_tokenizer);
        FUZZ_ASSERT(rq->text != NULL && rq->ids == NULL && rq->n_ids == 0);
        FUZZ_ASSERT(valid_utf8(rq->text, strlen(rq->text)));
        check_chat_text(ctx, rq->text);
        json_t *m = field(obj, "messages");
        FUZZ_ASSERT(json_is_array(m) && json_array_size(m) > 0);
    } else {
        FUZZ_ASSERT((rq->text != NULL) != (rq->ids != NULL));
        json_t *p = field(obj, "prompt");
        FUZZ_ASSERT(p != NULL);
        if (rq->text != NULL) {
            FUZZ_ASSERT(ctx->has_tokenizer && rq->n_ids == 0);
            FUZZ_ASSERT(valid_utf8(rq->text, strlen(rq->text)));
            if (json_is_array(p))
                p = json_array_get(p, 0);
            FUZZ_ASSERT(json_is_string(p) && json_string_length(p) == strlen(rq->text) &&
                        memcmp(json_string_value(p), rq->text, strlen(rq->text)) == 0);
        } else {
            FUZZ_ASSERT(rq->n_ids >= 1 && json_is_array(p) &&
                        json_array_size(p) == (size_t)rq->n_ids);
            for (int i = 0; i < rq->n_ids; i++) {
                FUZZ_ASSERT(rq->ids[i] >= 0 && rq->ids[i] < ctx->n_vocab);
                json_t *t = json_array_get(p, (size_t)i);
                FUZZ_ASSERT(json_is_integer(t) && json_integer_value(t) == rq->ids[i]);
            }
        }
    }

    /* lengths, logprobs, streaming */
    FUZZ_ASSERT(rq->max_tokens == -1 || rq->max_tokens >= 1);
    FUZZ_ASSERT((rq->max_tokens == -1) ==
                (field(obj, "max_tokens") == NULL && field(obj, "max_completion_tokens") == NULL));
    FUZZ_ASSERT(rq->top_logprobs >= 0 && rq->top_logprobs <= 20);
    FUZZ_ASSERT(rq->top_logprobs == 0 || rq->logprobs);
    if (kind == BT_API_COMPLETION)
        FUZZ_ASSERT(rq->top_logprobs <= 5);
    FUZZ_ASSERT(!rq->include_usage || rq->stream);
    FUZZ_ASSERT(rq->stream == json_is_true(field(obj, "stream")));
    FUZZ_ASSERT(rq->return_tokens == json_is_true(field(obj, "return_tokens")));

    /* stop strings */
    FUZZ_ASSERT(rq->n_stop >= 0 && rq->n_stop <= BT_API_MAX_STOP);
    json_t *stop = field(obj, "stop");
    FUZZ_ASSERT((size_t)rq->n_stop ==
                (stop == NULL ? 0 : json_is_array(stop) ? json_array_size(stop) : 1));
    for (int i = 0; i < BT_API_MAX_STOP; i++) {
        if (i >= rq->n_stop) {
            FUZZ_ASSERT(rq->stop[i] == NULL);
            continue;
        }
        FUZZ_ASSERT(rq->stop[i] != NULL);
        size_t n = strlen(rq->stop[i]);
        FUZZ_ASSERT(n >= 1 && n <= BT_API_MAX_STOP_LEN && valid_utf8(rq->stop[i], n));
        json_t *s = json_is_array(stop) ? json_array_get(stop, (size_t)i) : stop;
        FUZZ_ASSERT(json_is_string(s) && strcmp(json_string_value(s), rq->stop[i]) == 0);
    }

    /* sampling: inside api.c's ranges, which bt_sampler_init() accepts */
    const bt_sampler_params_t *sp = &rq->sampling, *d = &ctx->sampling;
    FUZZ_ASSERT(sp->temp >= 0.0f && sp->temp <= 2.0f);
    FUZZ_ASSERT(sp->top_p > 0.0f && sp->top_p <= 1.0f);
    FUZZ_ASSERT(sp->top_k >= 0 && sp->top_k <= 1 << 24);
    FUZZ_ASSERT(sp->min_p >= 0.0f && sp->min_p <= 1.0f);
    FUZZ_ASSERT(sp->repeat_penalty > 0.0f && sp->repeat_penalty <= 100.0f);
    FUZZ_ASSERT(sp->repeat_last_n == d->repeat_last_n);
    check_number(obj, "temperature", sp->temp, d->temp);
    check_number(obj, "top_p", sp->top_p, d->top_p);
    check_number(obj, "min_p", sp->min_p, d->min_p);
    check_number(obj, "repeat_penalty", sp->repeat_penalty, d->repeat_penalty);
    json_t *top_k = field(obj, "top_k");
    FUZZ_ASSERT(top_k == NULL ? sp->top_k == d->top_k : json_integer_value(top_k) == sp->top_k);
    json_t *seed = field(obj, "seed");
    FUZZ_ASSERT(rq->seed_given == (seed != NULL));
    FUZZ_ASSERT(seed == NULL ? sp->seed == d->seed
                             : json_integer_value(seed) >= 0 &&
                                   (uint64_t)json_integer_value(seed) == sp->seed);
    json_decref(obj);
}

static void fuzz_request(bt_api_kind_t kind, const char *body, size_t len,
                         const bt_api_ctx_t *ctx)
{
    bt_api_request_t rq;
    bt_api_error_t err;
    memset(&err, 0, sizeof err);
    if (bt_api_parse(kind, body, len, ctx, &rq, &err)) {
        check_request(kind, body, len, ctx, &rq);
    } else {
        check_empty(&rq);
        check_error(&err);
    }
    bt_api_request_free(&rq);
    check_empty(&rq);
    bt_api_request_free(&rq); /* an empty request frees again */
}

static void fuzz_tokenize(const char *body, size_t len)
{
    char *content = NULL;
    size_t n = SIZE_MAX;
    bool add_special, parse_special, with_pieces;
    bt_api_error_t err;
    memset(&err, 0, sizeof err);
    if (bt_api_parse_tokenize(body, len, &content, &n, &add_special, &parse_special,
                              &with_pieces, &err)) {
        FUZZ_ASSERT(content != NULL && n == strlen(content) && valid_utf8(content, n));
        json_t *obj = reload(body, len);
        json_t *c = field(obj, "content");
        FUZZ_ASSERT(json_is_string(c) && json_string_length(c) == n &&
                    memcmp(json_string_value(c), content, n) == 0);
        FUZZ_ASSERT(add_special == json_is_true(field(obj, "add_special")));
        FUZZ_ASSERT(parse_special == (field(obj, "parse_special") == NULL ||
                                      json_is_true(field(obj, "parse_special"))));
        FUZZ_ASSERT(with_pieces == json_is_true(field(obj, "with_pieces")));
        json_decref(obj);
    } else {
        FUZZ_ASSERT(content == NULL);
        check_error(&err);
    }
    free(content);
}

static void fuzz_detokenize(const char *body, size_t len, int n_vocab)
{
    int32_t *ids = NULL;
    int n = -1;
    bt_api_error_t err;
    memset(&err, 0, sizeof err);
    if (bt_api_parse_detokenize(body, len, n_vocab, &ids, &n, &err)) {
        FUZZ_ASSERT(n >= 0 && (ids == NULL) == (n == 0));
        json_t *obj = reload(body, len);
        json_t *t = field(obj, "tokens");
        FUZZ_ASSERT(json_is_array(t) && json_array_size(t) == (size_t)n);
        for (int i = 0; i < n; i++) {
            FUZZ_ASSERT(ids[i] >= 0 && ids[i] < n_vocab);
            FUZZ_ASSERT(json_integer_value(json_array_get(t, (size_t)i)) == ids[i]);
        }
        json_decref(obj);
    } else {
        FUZZ_ASSERT(ids == NULL && n == 0);
        check_error(&err);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const unsigned sel = data[0];
    const char *body = (const char *)data + 1;
    const size_t len = size - 1;
    const bt_api_ctx_t ctx = {
        .chat = (bt_chat_format_t)(sel >> 2 & 3),
        .system = sel & 0x80 ? "You are baton, a helpful assistant." : NULL,
        .has_tokenizer = (sel & 0x10) == 0,
        .n_vocab = vocab_sizes[sel >> 5 & 3],
        .sampling = bt_sampler_defaults(),
    };
    switch (sel & 3) {
    case EP_CHAT: fuzz_request(BT_API_CHAT, body, len, &ctx); break;
    case EP_COMPLETION: fuzz_request(BT_API_COMPLETION, body, len, &ctx); break;
    case EP_TOKENIZE: fuzz_tokenize(body, len); break;
    case EP_DETOKENIZE: fuzz_detokenize(body, len, ctx.n_vocab); break;
    }
    return 0;
}
