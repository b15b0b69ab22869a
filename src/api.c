/* api.c: OpenAI request bodies into baton requests (api.h). */
#include "api.h"

#include "unicode.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest prompt of token ids and most messages read (the context limits
 * both further once the prompt is known). */
#define MAX_IDS (1 << 22)
#define MAX_MESSAGES 4096

/* s as valid UTF-8: a byte that is not part of a character (a body quoted
 * by Jansson's message, a name cut at the buffer's end) becomes '?'. */
static void clean_utf8(char *s)
{
    for (size_t n = strlen(s), k = 0; k < n;) {
        uint32_t cp;
        int len = bt_utf8_decode(s + k, n - k, &cp);
        if (cp == 0xFFFD && len == 1)
            s[k] = '?';
        k += (size_t)len;
    }
}

bool bt_api_fail(bt_api_error_t *err, int status, const char *param, const char *fmt, ...)
{
    err->status = status;
    err->type = status == 401 ? "authentication_error"
                : status >= 500 ? "server_error"
                : status == 404 ? "not_found_error"
                                : "invalid_request_error";
    err->code = NULL;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    clean_utf8(err->param);
    clean_utf8(err->message);
    return false;
}

json_t *bt_api_error_json(const bt_api_error_t *err)
{
    return json_pack("{s:{s:s,s:s,s:s?,s:s?}}", "error", "message", err->message, "type",
                     err->type ? err->type : "invalid_request_error", "param",
                     err->param[0] ? err->param : NULL, "code", err->code);
}

/* ---- fields ---- */

/* The body as a JSON object. */
static json_t *load_object(const char *body, size_t len, bt_api_error_t *err)
{
    json_error_t jerr;
    json_t *obj = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (obj == NULL) {
        bt_api_fail(err, 400, NULL, "the body is not valid JSON: %s (line %d, column %d)",
                    jerr.text, jerr.line, jerr.column);
        return NULL;
    }
    if (!json_is_object(obj)) {
        json_decref(obj);
        bt_api_fail(err, 400, NULL, "the body must be a JSON object");
        return NULL;
    }
    return obj;
}

/* Every key of obj is in names[0..n): else an error naming the first that
 * is not (prefix: where obj is, "" at the top). */
static bool known_fields(json_t *obj, const char *const *names, size_t n, const char *prefix,
                         bt_api_error_t *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        size_t k = 0;
        while (k < n && strcmp(key, names[k]) != 0)
            k++;
        if (k == n) {
            char param[96];
            snprintf(param, sizeof param, "%s%s", prefix, key);
            return bt_api_fail(err, 400, param, "unknown parameter '%s'", param);
        }
    }
    return true;
}

/* obj's field name, NULL when absent or JSON null. */
static json_t *field(json_t *obj, const char *name)
{
    json_t *v = json_object_get(obj, name);
    return json_is_null(v) ? NULL : v;
}

static bool get_bool(json_t *obj, const char *name, bool *out, bt_api_error_t *err)
{
    json_t *v = field(obj, name);
    if (v == NULL)
        return true;
    if (!json_is_boolean(v))
        return bt_api_fail(err, 400, name, "'%s' must be true or false", name);
    *out = json_is_true(v);
    return true;
}

/* A number in [lo, hi] (lo_open: lo itself excluded). */
static bool get_number(json_t *obj, const char *name, double lo, bool lo_open, double hi,
                       float *out, bt_api_error_t *err)
{
    json_t *v = field(obj, name);
    if (v == NULL)
        return true;
    if (!json_is_number(v))
        return bt_api_fail(err, 400, name, "'%s' must be a number", name);
    const double x = json_number_value(v);
    const float f = (float)x; /* checked as the sampler will take it */
    if (!isfinite(f) || !(lo_open ? f > lo : f >= lo) || !(f <= hi))
        return bt_api_fail(err, 400, name, "'%s' is %g, outside %s%g, %g]", name, x,
                           lo_open ? "(" : "[", lo, hi);
    *out = f;
    return true;
}

/* An integer in [lo, hi]; *given set when present. */
static bool get_int(json_t *obj, const char *name, json_int_t lo, json_int_t hi, json_int_t *out,
                    bool *given, bt_api_error_t *err)
{
    json_t *v = field(obj, name);
    if (v == NULL)
        return true;
    if (!json_is_integer(v))
        return bt_api_fail(err, 400, name, "'%s' must be an integer", name);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return bt_api_fail(err, 400, name,
                           "'%s' is %" JSON_INTEGER_FORMAT ", outside [%" JSON_INTEGER_FORMAT
                           ", %" JSON_INTEGER_FORMAT "]", name, x, lo, hi);
    *out = x;
    if (given != NULL)
        *given = true;
    return true;
}

/* A parameter baton does not honour unless it has its neutral value. */
static bool neutral(json_t *obj, const char *name, bt_api_error_t *err)
{
    json_t *v = field(obj, name);
    bool ok = v == NULL;
    if (!ok && strcmp(name, "n") == 0)
        ok = json_is_integer(v) && json_integer_value(v) == 1;
    else if (!ok && strcmp(name, "best_of") == 0)
        ok = json_is_integer(v) && json_integer_value(v) == 1;
    else if (!ok && (strcmp(name, "presence_penalty") == 0 || strcmp(name, "frequency_penalty") == 0))
        ok = json_is_number(v) && json_number_value(v) == 0.0;
    else if (!ok && strcmp(name, "echo") == 0)
        ok = json_is_false(v);
    else if (!ok && strcmp(name, "suffix") == 0)
        ok = json_is_string(v) && json_string_length(v) == 0;
    else if (!ok && (strcmp(name, "tools") == 0 || strcmp(name, "functions") == 0))
        ok = json_is_array(v) && json_array_size(v) == 0;
    else if (!ok && (strcmp(name, "tool_choice") == 0 || strcmp(name, "function_call") == 0))
        ok = json_is_string(v) && strcmp(json_string_value(v), "none") == 0;
    else if (!ok && strcmp(name, "logit_bias") == 0)
        ok = json_is_object(v) && json_object_size(v) == 0;
    else if (!ok && strcmp(name, "response_format") == 0)
        ok = json_is_object(v) && json_object_size(v) == 1 &&
             json_is_string(json_object_get(v, "type")) &&
             strcmp(json_string_value(json_object_get(v, "type")), "text") == 0;
    else if (!ok && strcmp(name, "parallel_tool_calls") == 0)
        ok = json_is_boolean(v);
    if (!ok)
        return bt_api_fail(err, 400, name, "'%s' is not supported by baton-server (it serves "
                           "one text completion per request, without tools)", name);
    return true;
}

/* "stop": a string or an array of up to BT_API_MAX_STOP non-empty strings. */
static bool get_stop(json_t *obj, bt_api_request_t *rq, bt_api_error_t *err)
{
    json_t *v = field(obj, "stop");
    if (v == NULL)
        return true;
    if (!json_is_string(v) && !json_is_array(v))
        return bt_api_fail(err, 400, "stop", "'stop' must be a string or an array of strings");
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (n > BT_API_MAX_STOP)
        return bt_api_fail(err, 400, "stop", "'stop' has %zu strings (at most %d)", n,
                           BT_API_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_string(s) || json_string_length(s) == 0 ||
            json_string_length(s) > BT_API_MAX_STOP_LEN)
            return bt_api_fail(err, 400, "stop", "'stop' entry %zu must be a string of 1 to %d "
                               "bytes", i, BT_API_MAX_STOP_LEN);
        if ((rq->stop[rq->n_stop] = strdup(json_string_value(s))) == NULL)
            return bt_api_fail(err, 500, NULL, "out of memory");
        rq->n_stop++;
    }
    return true;
}

/* The fields both endpoints share. */
static bool get_common(json_t *obj, const bt_api_ctx_t *ctx, bt_api_request_t *rq,
                       bt_api_error_t *err)
{
    bt_sampler_params_t *sp = &rq->sampling;
    json_int_t max_tokens = -1, top_k = sp->top_k, seed = 0;
    json_t *model = field(obj, "model"), *user = field(obj, "user");
    (void)ctx;
    if (model != NULL && !json_is_string(model))
        return bt_api_fail(err, 400, "model", "'model' must be a string");
    if (user != NULL && !json_is_string(user))
        return bt_api_fail(err, 400, "user", "'user' must be a string");
    if (!get_int(obj, "max_tokens", 1, INT32_MAX, &max_tokens, NULL, err) ||
        !get_int(obj, "max_completion_tokens", 1, INT32_MAX, &max_tokens, NULL, err) ||
        !get_number(obj, "temperature", 0.0, false, 2.0, &sp->temp, err) ||
        !get_number(obj, "top_p", 0.0, true, 1.0, &sp->top_p, err) ||
        !get_int(obj, "top_k", 0, 1 << 24, &top_k, NULL, err) ||
        !get_number(obj, "min_p", 0.0, false, 1.0, &sp->min_p, err) ||
        !get_number(obj, "repeat_penalty", 0.0, true, 100.0, &sp->repeat_penalty, err) ||
        !get_int(obj, "seed", 0, INT64_MAX, &seed, &rq->seed_given, err) ||
        !get_bool(obj, "stream", &rq->stream, err) ||
        !get_bool(obj, "return_tokens", &rq->return_tokens, err) || !get_stop(obj, rq, err))
        return false;
    static const char *const unsupported[] = {"n", "presence_penalty", "frequency_penalty",
                                              "logit_bias"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (!neutral(obj, unsupported[i], err))
            return false;
    rq->max_tokens = (int)max_tokens;
    sp->top_k = (int)top_k;
    sp->seed = (uint64_t)seed;
    json_t *so = field(obj, "stream_options");
    if (so != NULL) {
        static const char *const names[] = {"include_usage"};
        if (!json_is_object(so))
            return bt_api_fail(err, 400, "stream_options", "'stream_options' must be an object");
        if (!rq->stream)
            return bt_api_fail(err, 400, "stream_options",
                               "'stream_options' is only allowed with \"stream\": true");
        if (!known_fields(so, names, 1, "stream_options.", err))
            return false;
        json_t *u = field(so, "include_usage");
        if (u != NULL && !json_is_boolean(u))
            return bt_api_fail(err, 400, "stream_options.include_usage",
                               "'stream_options.include_usage' must be true or false");
        rq->include_usage = json_is_true(u);
    }
    return true;
}

/* ---- /v1/completions ---- */

static bool get_ids(json_t *v, const char *param, int n_vocab, int32_t **ids, int *n,
                    bt_api_error_t *err)
{
    size_t k = json_array_size(v);
    if (k == 0)
        return bt_api_fail(err, 400, param, "'%s' is empty", param);
    if (k > MAX_IDS)
        return bt_api_fail(err, 400, param, "'%s' has %zu token ids (at most %d)", param, k,
                           MAX_IDS);
    if ((*ids = malloc(sizeof **ids * k)) == NULL)
        return bt_api_fail(err, 500, NULL, "out of memory");
    for (size_t i = 0; i < k; i++) {
        json_t *t = json_array_get(v, i);
        json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (id < 0 || id >= n_vocab)
            return bt_api_fail(err, 400, param, "'%s' entry %zu is not a token id in 0..%d",
                               param, i, n_vocab - 1);
        (*ids)[i] = (int32_t)id;
    }
    *n = (int)k;
    return true;
}

/* "prompt": a string, an array of one string, or an array of token ids. */
static bool get_prompt(json_t *obj, const bt_api_ctx_t *ctx, bt_api_request_t *rq,
                       bt_api_error_t *err)
{
    json_t *v = field(obj, "prompt");
    if (v == NULL)
        return bt_api_fail(err, 400, "prompt", "'prompt' is required");
    if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)))
        v = json_array_get(v, 0);
    if (json_is_array(v) && json_array_size(v) > 0 && !json_is_integer(json_array_get(v, 0)))
        return bt_api_fail(err, 400, "prompt", "'prompt' must be a string, one string in an "
                           "array, or an array of token ids (baton-server completes one prompt "
                           "per request)");
    if (json_is_array(v))
        return get_ids(v, "prompt", ctx->n_vocab, &rq->ids, &rq->n_ids, err);
    if (!json_is_string(v))
        return bt_api_fail(err, 400, "prompt", "'prompt' must be a string or an array of "
                           "token ids");
    if (!ctx->has_tokenizer)
        return bt_api_fail(err, 400, "prompt", "the model has no tokenizer: give the prompt "
                           "as an array of token ids");
    if ((rq->text = strdup(json_string_value(v))) == NULL)
        return bt_api_fail(err, 500, NULL, "out of memory");
    return true;
}

static bool parse_completion(json_t *obj, const bt_api_ctx_t *ctx, bt_api_request_t *rq,
                             bt_api_error_t *err)
{
    static const char *const names[] = {
        "prompt", "model", "max_tokens", "temperature", "top_p", "top_k", "min_p",
        "repeat_penalty", "seed", "stop", "stream", "stream_options", "logprobs", "n",
        "presence_penalty", "frequency_penalty", "logit_bias", "user", "echo", "suffix",
        "best_of", "return_tokens",
    };
    json_int_t lp = -1;
    if (!known_fields(obj, names, sizeof names / sizeof names[0], "", err) ||
        !get_common(obj, ctx, rq, err) || !neutral(obj, "echo", err) ||
        !neutral(obj, "suffix", err) || !neutral(obj, "best_of", err) ||
        !get_int(obj, "logprobs", 0, 5, &lp, NULL, err))
        return false;
    rq->logprobs = lp >= 0; /* completions: the count of most likely ids */
    rq->top_logprobs = lp > 0 ? (int)lp : 0;
    return get_prompt(obj, ctx, rq, err);
}

/* ---- /v1/chat/completions ---- */

/* A message's "content": a string or an array of {"type": "text", "text"}
 * parts, joined; *out malloc'd. */
static bool get_content(json_t *v, int i, char **out, bt_api_error_t *err)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (json_is_string(v))
        return (*out = strdup(json_string_value(v))) != NULL ||
               bt_api_fail(err, 500, NULL, "out of memory");
    if (!json_is_array(v))
        return bt_api_fail(err, 400, param, "'%s' must be a string or an array of text parts",
                           param);
    size_t total = 1;
    for (size_t k = 0; k < json_array_size(v); k++) {
        json_t *part = json_array_get(v, k), *type = json_object_get(part, "type");
        json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || json_object_size(part) != 2 || !json_is_string(type) ||
            strcmp(json_string_value(type), "text") != 0 || !json_is_string(text))
            return bt_api_fail(err, 400, param, "'%s' part %zu must be {\"type\": \"text\", "
                               "\"text\": ...} (baton-server reads text only)", param, k);
        total += json_string_length(text);
    }
    if ((*out = malloc(total)) == NULL)
        return bt_api_fail(err, 500, NULL, "out of memory");
    size_t n = 0;
    for (size_t k = 0; k < json_array_size(v); k++) {
        json_t *text = json_object_get(json_array_get(v, k), "text");
        memcpy(*out + n, json_string_value(text), json_string_length(text));
        n += json_string_length(text);
    }
    (*out)[n] = '\0';
    return true;
}

static bool get_messages(json_t *obj, const bt_api_ctx_t *ctx, bt_api_request_t *rq,
                         bt_api_error_t *err)
{
    json_t *v = field(obj, "messages");
    if (v == NULL)
        return bt_api_fail(err, 400, "messages", "'messages' is required");
    if (!json_is_array(v) || json_array_size(v) == 0)
        return bt_api_fail(err, 400, "messages", "'messages' must be a non-empty array");
    const size_t n = json_array_size(v);
    if (n > MAX_MESSAGES)
        return bt_api_fail(err, 400, "messages", "'messages' has %zu entries (at most %d)", n,
                           MAX_MESSAGES);
    if (!ctx->has_tokenizer || ctx->chat == BT_CHAT_NONE)
        return bt_api_fail(err, 400, "messages", "the model has no chat template baton knows "
                           "(start baton-server with --chat-template NAME)");
    bt_chat_msg_t *msgs = calloc(n, sizeof *msgs);
    char **contents = calloc(n, sizeof *contents);
    bool ok = msgs != NULL && contents != NULL ? true
                                               : bt_api_fail(err, 500, NULL, "out of memory");
    for (size_t i = 0; i < n && ok; i++) {
        static const char *const names[] = {"role", "content", "name"};
        json_t *m = json_array_get(v, i);
        char prefix[48], param[64];
        snprintf(prefix, sizeof prefix, "messages[%zu].", i);
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) {
            ok = bt_api_fail(err, 400, param, "'%s' must be an object", param);
            break;
        }
        ok = known_fields(m, names, 3, prefix, err);
        json_t *role = json_object_get(m, "role"), *content = field(m, "content");
        json_t *name = field(m, "name");
        snprintf(param, sizeof param, "messages[%zu].role", i);
        const char *r = json_is_string(role) ? json_string_value(role) : "";
        if (ok && strcmp(r, "developer") == 0)
            r = "system"; /* OpenAI's newer name for it */
        if (ok && strcmp(r, "system") != 0 && strcmp(r, "user") != 0 &&
            strcmp(r, "assistant") != 0)
            ok = bt_api_fail(err, 400, param, "'%s' must be \"system\", \"user\" or "
                             "\"assistant\"", param);
        snprintf(param, sizeof param, "messages[%zu].name", i);
        if (ok && name != NULL && !json_is_string(name))
            ok = bt_api_fail(err, 400, param, "'%s' must be a string", param);
        snprintf(param, sizeof param, "messages[%zu].content", i);
        if (ok && content == NULL)
            ok = bt_api_fail(err, 400, param, "'%s' is required", param);
        if (ok)
            ok = get_content(content, (int)i, &contents[i], err);
        if (ok)
            msgs[i] = (bt_chat_msg_t){r, contents[i]};
    }
    if (ok && (rq->text = bt_chat_render(ctx->chat, msgs, (int)n, ctx->system)) == NULL)
        ok = bt_api_fail(err, 500, NULL, "out of memory");
    for (size_t i = 0; contents != NULL && i < n; i++)
        free(contents[i]);
    free(contents);
    free(msgs);
    return ok;
}

static bool parse_chat(json_t *obj, const bt_api_ctx_t *ctx, bt_api_request_t *rq,
                       bt_api_error_t *err)
{
    static const char *const names[] = {
        "messages", "model", "max_tokens", "max_completion_tokens", "temperature", "top_p",
        "top_k", "min_p", "repeat_penalty", "seed", "stop", "stream", "stream_options",
        "logprobs", "top_logprobs", "n", "presence_penalty", "frequency_penalty", "logit_bias",
        "user", "tools", "tool_choice", "functions", "function_call", "parallel_tool_calls",
        "response_format", "return_tokens",
    };
    static const char *const unsupported[] = {"tools", "tool_choice", "functions",
                                              "function_call", "parallel_tool_calls",
                                              "response_format"};
    json_int_t top = 0;
    bool top_given = false;
    if (!known_fields(obj, names, sizeof names / sizeof names[0], "", err) ||
        !get_common(obj, ctx, rq, err) || !get_bool(obj, "logprobs", &rq->logprobs, err) ||
        !get_int(obj, "top_logprobs", 0, 20, &top, &top_given, err))
        return false;
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (!neutral(obj, unsupported[i], err))
            return false;
    if (top_given && !rq->logprobs)
        return bt_api_fail(err, 400, "top_logprobs", "'top_logprobs' needs \"logprobs\": true");
    rq->top_logprobs = (int)top;
    return get_messages(obj, ctx, rq, err);
}

bool bt_api_parse(bt_api_kind_t kind, const char *body, size_t len, const bt_api_ctx_t *ctx,
                  bt_api_request_t *rq, bt_api_error_t *err)
{
    *rq = (bt_api_request_t){.kind = kind, .sampling = ctx->sampling, .max_tokens = -1};
    json_t *obj = load_object(body, len, err);
    if (obj == NULL)
        return false;
    bool ok = kind == BT_API_CHAT ? parse_chat(obj, ctx, rq, err)
                                  : parse_completion(obj, ctx, rq, err);
    json_decref(obj);
    if (!ok)
        bt_api_request_free(rq);
    return ok;
}

void bt_api_request_free(bt_api_request_t *rq)
{
    free(rq->text);
    free(rq->ids);
    for (int i = 0; i < rq->n_stop; i++)
        free(rq->stop[i]);
    *rq = (bt_api_request_t){0};
}

/* ---- /tokenize, /detokenize ---- */

bool bt_api_parse_tokenize(const char *body, size_t len, char **content, size_t *n_content,
                           bool *add_special, bool *parse_special, bool *with_pieces,
                           bt_api_error_t *err)
{
    static const char *const names[] = {"content", "add_special", "parse_special",
                                        "with_pieces"};
    *content = NULL;
    *add_special = false, *parse_special = true, *with_pieces = false;
    json_t *obj = load_object(body, len, err);
    if (obj == NULL)
        return false;
    json_t *c = field(obj, "content");
    bool ok = known_fields(obj, names, 4, "", err) && get_bool(obj, "add_special", add_special, err) &&
              get_bool(obj, "parse_special", parse_special, err) &&
              get_bool(obj, "with_pieces", with_pieces, err);
    if (ok && !json_is_string(c))
        ok = bt_api_fail(err, 400, "content", "'content' must be a string");
    if (ok && (*content = strdup(json_string_value(c))) == NULL)
        ok = bt_api_fail(err, 500, NULL, "out of memory");
    if (ok)
        *n_content = json_string_length(c);
    json_decref(obj);
    return ok;
}

bool bt_api_parse_detokenize(const char *body, size_t len, int n_vocab, int32_t **ids, int *n,
                             bt_api_error_t *err)
{
    static const char *const names[] = {"tokens"};
    *ids = NULL, *n = 0;
    json_t *obj = load_object(body, len, err);
    if (obj == NULL)
        return false;
    json_t *t = field(obj, "tokens");
    bool ok = known_fields(obj, names, 1, "", err);
    if (ok && !json_is_array(t))
        ok = bt_api_fail(err, 400, "tokens", "'tokens' must be an array of token ids");
    if (ok && json_array_size(t) > 0)
        ok = get_ids(t, "tokens", n_vocab, ids, n, err);
    if (!ok) {
        free(*ids);
        *ids = NULL, *n = 0;
    }
    json_decref(obj);
    return ok;
}
