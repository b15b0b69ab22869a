/*
 * api.h: OpenAI's request bodies into baton requests (baton-server,
 * docs/usage.md "Serving over HTTP"). Pure: no sockets, no MPI, no model;
 * the fuzz target tests/fuzz/fuzz_api.c drives it with any bytes.
 *
 * A body is refused with the error OpenAI's API gives: the HTTP status, the
 * error type, the parameter's name ("messages[2].role",
 * "stream_options.include_usage") and a message saying what is wrong. Every
 * field is checked: unknown fields, wrong types, numbers out of range (JSON
 * has no NaN; an overflowing number is not JSON), strings with NUL
 * characters, and the parameters baton cannot honour (n > 1, tools,
 * response formats other than text, logit_bias, presence and frequency
 * penalties, echo, suffix, best_of > 1) are errors, never ignored. JSON null
 * stands for an absent optional field, as in OpenAI's API.
 */
#ifndef BT_API_H
#define BT_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "chat.h"
#include "sampler.h"

/* Most stop strings per request, and the longest. */
#define BT_API_MAX_STOP 16
#define BT_API_MAX_STOP_LEN 256

typedef enum bt_api_kind {
    BT_API_COMPLETION = 0, /* POST /v1/completions */
    BT_API_CHAT = 1,       /* POST /v1/chat/completions */
} bt_api_kind_t;

typedef struct bt_api_error {
    int status;       /* HTTP status */
    const char *type; /* OpenAI's error type: "invalid_request_error", ... */
    const char *code; /* NULL, or e.g. "context_length_exceeded" */
    char param[96];   /* the parameter at fault; "" for none */
    char message[512];
} bt_api_error_t;

/* What the server knows when it reads a body. */
typedef struct bt_api_ctx {
    bt_chat_format_t chat;      /* BT_CHAT_NONE: chat requests are refused */
    const char *system;         /* the template's default system message, or NULL */
    bool has_tokenizer;         /* else only token-id prompts */
    int n_vocab;
    bt_sampler_params_t sampling; /* the command line's defaults */
} bt_api_ctx_t;

typedef struct bt_api_request {
    bt_api_kind_t kind;
    char *text;           /* the prompt to tokenize (chat: rendered), malloc'd; NULL: ids */
    int32_t *ids;         /* a token-id prompt, malloc'd */
    int n_ids;
    int max_tokens;       /* -1: not given */
    bt_sampler_params_t sampling;
    bool seed_given;      /* else the server draws one */
    bool stream, include_usage;
    bool logprobs;
    int top_logprobs;     /* 0 .. 20 */
    bool return_tokens;   /* llama-server's "return_tokens": the ids with the text */
    char *stop[BT_API_MAX_STOP]; /* malloc'd */
    int n_stop;
} bt_api_request_t;

/* Reads body[0..len) as a request of kind; true with *rq filled (free it
 * with bt_api_request_free), false with *err filled and *rq empty. */
bool bt_api_parse(bt_api_kind_t kind, const char *body, size_t len, const bt_api_ctx_t *ctx,
                  bt_api_request_t *rq, bt_api_error_t *err);
void bt_api_request_free(bt_api_request_t *rq);

/* POST /tokenize {"content": S, "add_special": B, "parse_special": B,
 * "with_pieces": B} (llama-server's). *content malloc'd. */
bool bt_api_parse_tokenize(const char *body, size_t len, char **content, size_t *n_content,
                           bool *add_special, bool *parse_special, bool *with_pieces,
                           bt_api_error_t *err);

/* POST /detokenize {"tokens": [ids]}: *ids malloc'd (NULL when empty). */
bool bt_api_parse_detokenize(const char *body, size_t len, int n_vocab, int32_t **ids, int *n,
                             bt_api_error_t *err);

/* Fills *err (always returns false, so callers can `return bt_api_fail(...)`). */
bool bt_api_fail(bt_api_error_t *err, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* {"error": {"message", "type", "param", "code"}}, a new reference (NULL
 * when out of memory). */
json_t *bt_api_error_json(const bt_api_error_t *err);

#endif /* BT_API_H */
