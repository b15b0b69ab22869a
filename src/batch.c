/*
 * batch.c: baton --batch-file (batch.h). Reads in the order the data
 * flows: the files, one request line into an engine request, the engine's
 * hooks (admission, tokens, finish, logits rows), the output line, the
 * summary, the run.
 */
#include "batch.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat.h"
#include "rng.h"
#include "runopts.h"
#include "stages/partition.h"
#include "stages/schedule.h"
#include "stages/serve.h"
#include "tokenizer.h"
#include "unicode.h"

/* Largest n_predict a request may ask for (as -n). */
#define MAX_PREDICT (1 << 24)

/* One admitted request, from hooks.next until hooks.finish (rank 0). */
typedef struct request {
    int line;             /* 1-based line number: the engine's id */
    json_t *id;           /* the request's id as given (JSON null when absent) */
    int32_t *prompt;      /* [n_prompt] */
    int n_prompt;
    int32_t *gen;         /* [cap_gen] chosen ids */
    int n_gen, cap_gen;
    bool stop_at_eog;     /* prompt requests end at end-of-generation */
    double t_admit, t_first, t_last;
} request_t;

typedef struct batch {
    const bt_batch_options_t *o;
    MPI_Comm comm;
    bt_pipe_t pipe;
    int n_vocab;
    int slot_ctx;           /* positions per KV slot */
    /* rank 0: input */
    FILE *in;
    int n_lines;            /* lines in the file */
    int n_requests;         /* lines that are not blank */
    int line_no;            /* lines read so far */
    char *line;
    size_t line_cap;
    /* rank 0: what a request needs */
    bt_tokenizer_t *tok;    /* NULL never after setup; BT_TOKENIZER_NONE: ids only */
    bt_detok_t *detok;      /* NULL for a model without a vocabulary */
    bt_chat_format_t chat;  /* the model's chat format */
    char *template_system;  /* the chat template's system message, or NULL */
    uint64_t job_seed;
    /* rank 0: requests in flight; slot_of_line maps a line to its pool entry */
    request_t *pool;        /* [n_parallel] */
    int *free_slots, n_free;
    int *slot_of_line;      /* [n_lines + 1] */
    /* rank 0: output */
    int out_fd;
    bool out_owned;         /* -o: close it at the end */
    char *out_buf;          /* one output line */
    size_t out_cap;
    char *text;             /* the finished request's text, valid UTF-8 */
    size_t text_cap;
    bt_status_t out_status; /* first failure to write (then no more admissions) */
    /* rank 0: figures */
    double t_start, t_progress;
    int n_done, n_errors, n_stop, n_length;
    int64_t n_prompt_tok, n_gen_tok;
    double *ttft, *latency; /* [n_requests] seconds, per finished request */
    int n_timed;
    /* last stage: --dump-logits */
    char *dump_path;
    int dump_id, dump_fd;
} batch_t;

/* ---- the files (rank 0) ---- */

/* Opens the requests and counts their lines; opens the output. */
static bt_status_t open_files(batch_t *b)
{
    const bt_batch_options_t *o = b->o;
    b->in = fopen(o->path, "r");
    if (b->in == NULL) {
        bt_log_error("--batch-file: cannot open '%s': %s", o->path, strerror(errno));
        return BT_ERR_IO;
    }
    int c, prev = '\n';
    bool blank = true;
    while ((c = getc(b->in)) != EOF) {
        if (c == '\n') {
            b->n_lines++;
            b->n_requests += !blank;
            blank = true;
        } else if (c != ' ' && c != '\t' && c != '\r') {
            blank = false;
        }
        prev = c;
    }
    if (prev != '\n') /* a last line without a newline */
        b->n_lines++, b->n_requests += !blank;
    if (ferror(b->in) || fseek(b->in, 0, SEEK_SET) != 0) {
        bt_log_error("--batch-file: cannot read '%s': %s", o->path, strerror(errno));
        return BT_ERR_IO;
    }
    if (b->n_lines >= INT32_MAX / 2) {
        bt_log_error("--batch-file: '%s' has more than %d lines", o->path, INT32_MAX / 2);
        return BT_ERR_ARG;
    }
    if (o->output == NULL) {
        b->out_fd = STDOUT_FILENO;
        return BT_OK;
    }
    /* emptied only once the job starts (start_output): a job that stops
     * before any work leaves an earlier output as it was */
    b->out_fd = open(o->output, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (b->out_fd < 0) {
        bt_log_error("-o: cannot create '%s': %s", o->output, strerror(errno));
        return BT_ERR_IO;
    }
    b->out_owned = true;
    return BT_OK;
}

/* Empties -o (a regular file; a FIFO or a device has nothing to cut). */
static bt_status_t start_output(batch_t *b)
{
    if (b->out_owned && ftruncate(b->out_fd, 0) != 0 && errno != EINVAL) {
        bt_log_error("-o: cannot empty '%s': %s", b->o->output, strerror(errno));
        return BT_ERR_IO;
    }
    return BT_OK;
}

/* The next line of the file, without its line end; false at the end. */
static bool read_line(batch_t *b, size_t *len)
{
    ssize_t n = getline(&b->line, &b->line_cap, b->in);
    if (n < 0)
        return false;
    while (n > 0 && (b->line[n - 1] == '\n' || b->line[n - 1] == '\r'))
        b->line[--n] = '\0';
    b->line_no++;
    *len = (size_t)n;
    return true;
}

static bool is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

/* ---- one request line ---- */

/* Where a bad line's message goes: "line N: field 'F': ..." */
typedef struct line_error {
    char msg[512];
} line_error_t;

static bool fail(line_error_t *e, int line, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool fail(line_error_t *e, int line, const char *field, const char *fmt, ...)
{
    int k = field ? snprintf(e->msg, sizeof e->msg, "line %d: field '%s': ", line, field)
                  : snprintf(e->msg, sizeof e->msg, "line %d: ", line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg + k, sizeof e->msg - (size_t)k, fmt, ap);
    va_end(ap);
    return false;
}

/* A request line's fields; NULL when absent. */
typedef struct fields {
    json_t *id, *prompt, *tokens, *n_predict, *temp, *top_k, *top_p, *min_p, *seed, *chat,
        *system;
} fields_t;

static bool get_fields(json_t *obj, int line, fields_t *f, line_error_t *e)
{
    static const char *const names[] = {"id", "prompt", "tokens", "n_predict", "temp", "top_k",
                                        "top_p", "min_p", "seed", "chat", "system"};
    json_t **slot[] = {&f->id, &f->prompt, &f->tokens, &f->n_predict, &f->temp, &f->top_k,
                       &f->top_p, &f->min_p, &f->seed, &f->chat, &f->system};
    *f = (fields_t){0};
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        size_t k = 0;
        while (k < sizeof names / sizeof names[0] && strcmp(key, names[k]) != 0)
            k++;
        if (k == sizeof names / sizeof names[0])
            return fail(e, line, key, "unknown field (known: id, prompt, tokens, n_predict, "
                                      "temp, top_k, top_p, min_p, seed, chat, system)");
        *slot[k] = v;
    }
    return true;
}

/* A number field into *out, in [lo, hi] (lo_open: lo itself excluded). */
static bool get_number(json_t *v, int line, const char *field, double lo, bool lo_open, double hi,
                       float *out, line_error_t *e)
{
    if (v == NULL)
        return true;
    if (!json_is_number(v))
        return fail(e, line, field, "must be a number");
    double x = json_number_value(v);
    if (!(lo_open ? x > lo : x >= lo) || !(x <= hi))
        return fail(e, line, field, "%g is outside %s%g, %g]", x, lo_open ? "(" : "[", lo, hi);
    *out = (float)x;
    return true;
}

/* An integer field into *out, in [lo, hi]. */
static bool get_int(json_t *v, int line, const char *field, json_int_t lo, json_int_t hi,
                    json_int_t *out, line_error_t *e)
{
    if (v == NULL)
        return true;
    if (!json_is_integer(v))
        return fail(e, line, field, "must be an integer");
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return fail(e, line, field, "%" JSON_INTEGER_FORMAT " is outside [%" JSON_INTEGER_FORMAT
                    ", %" JSON_INTEGER_FORMAT "]", x, lo, hi);
    *out = x;
    return true;
}

/* The seed of a request without one: the job seed mixed with the line. */
static uint64_t line_seed(uint64_t job_seed, int line)
{
    uint64_t x = job_seed ^ ((uint64_t)line * 0xd1342543de82ef95ull);
    return bt_splitmix64(&x);
}

/* Sampler, n_predict: the command line's, then the line's fields. */
static bool get_sampling(const batch_t *b, const fields_t *f, int line, bool raw,
                         bt_seq_req_t *req, line_error_t *e)
{
    bt_sampler_params_t sp = b->o->sampling;
    if (raw && f->temp == NULL)
        sp.temp = 0.0f; /* raw ids are greedy unless asked, as --tokens */
    json_int_t n = b->o->n_predict, top_k = sp.top_k, seed = 0;
    if (!get_int(f->n_predict, line, "n_predict", 1, MAX_PREDICT, &n, e) ||
        !get_number(f->temp, line, "temp", 0.0, false, 1e30, &sp.temp, e) ||
        !get_int(f->top_k, line, "top_k", 0, 1 << 24, &top_k, e) ||
        !get_number(f->top_p, line, "top_p", 0.0, true, 1.0, &sp.top_p, e) ||
        !get_number(f->min_p, line, "min_p", 0.0, false, 1.0, &sp.min_p, e) ||
        !get_int(f->seed, line, "seed", 0, INT64_MAX, &seed, e))
        return false;
    sp.top_k = (int)top_k;
    sp.seed = f->seed ? (uint64_t)seed : line_seed(b->job_seed, line);
    req->sampling = sp;
    req->n_predict = (int)n; /* ids to generate, raw or not (--tokens -n N makes N + 1) */
    return true;
}

/* "tokens": ids inside the vocabulary. */
static bool get_tokens(const batch_t *b, json_t *v, int line, request_t *rq, line_error_t *e)
{
    if (!json_is_array(v))
        return fail(e, line, "tokens", "must be an array of token ids");
    size_t n = json_array_size(v);
    if (n == 0)
        return fail(e, line, "tokens", "is empty");
    if (n > (size_t)b->slot_ctx)
        return fail(e, line, "tokens", "%zu ids do not fit the context per slot (%d, -c)", n,
                    b->slot_ctx);
    rq->prompt = malloc(sizeof *rq->prompt * n);
    if (rq->prompt == NULL)
        return fail(e, line, "tokens", "out of memory for %zu ids", n);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(v, i);
        json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (!json_is_integer(t) || id < 0 || id >= b->n_vocab)
            return fail(e, line, "tokens", "entry %zu is not a token id in 0..%d", i,
                        b->n_vocab - 1);
        rq->prompt[i] = (int32_t)id;
    }
    rq->n_prompt = (int)n;
    return true;
}

/* A string field without NUL characters; *s NULL when absent. */
static bool get_string(json_t *v, int line, const char *field, const char **s, line_error_t *e)
{
    *s = NULL;
    if (v == NULL)
        return true;
    if (!json_is_string(v))
        return fail(e, line, field, "must be a string");
    if (strlen(json_string_value(v)) != json_string_length(v))
        return fail(e, line, field, "contains a NUL character (\\u0000)");
    *s = json_string_value(v);
    return true;
}

/* "prompt" (with "chat" and "system"): tokenized like baton -p. */
static bool get_prompt(const batch_t *b, const fields_t *f, int line, request_t *rq,
                       line_error_t *e)
{
    const char *prompt, *system;
    if (!get_string(f->prompt, line, "prompt", &prompt, e) ||
        !get_string(f->system, line, "system", &system, e))
        return false;
    if (f->chat != NULL && !json_is_boolean(f->chat))
        return fail(e, line, "chat", "must be true or false");
    bool chat = json_is_true(f->chat);
    if (system != NULL && !chat)
        return fail(e, line, "system", "needs \"chat\": true");
    if (bt_tokenizer_kind(b->tok) == BT_TOKENIZER_NONE)
        return fail(e, line, "prompt", "%s has no tokenizer: give \"tokens\"", b->o->model);
    if (chat && b->chat == BT_CHAT_NONE)
        return fail(e, line, "chat", "%s has no ChatML or Gemma chat template", b->o->model);
    char *text = chat ? bt_chat_turn(b->chat, prompt, system ? system : b->template_system, true)
                      : strdup(prompt);
    if (text == NULL)
        return fail(e, line, "prompt", "out of memory");
    bt_status_t st =
        bt_tokenizer_encode(b->tok, text, strlen(text), true, true, &rq->prompt, &rq->n_prompt);
    free(text);
    if (st != BT_OK)
        return fail(e, line, "prompt", "cannot be tokenized (%s)", bt_status_str(st));
    if (rq->n_prompt == 0)
        return fail(e, line, "prompt", "is empty after tokenization");
    if (rq->n_prompt > b->slot_ctx)
        return fail(e, line, "prompt", "%d tokens do not fit the context per slot (%d, -c)",
                    rq->n_prompt, b->slot_ctx);
    return true;
}

/* Parses one line into rq and req. False with e filled for a bad line;
 * rq->id holds the id when it could be read. */
static bool parse_request(const batch_t *b, const char *s, size_t len, request_t *rq,
                          bt_seq_req_t *req, line_error_t *e)
{
    const int line = b->line_no;
    json_error_t jerr;
    json_t *obj = json_loadb(s, len, JSON_REJECT_DUPLICATES, &jerr);
    if (obj == NULL)
        return fail(e, line, NULL, "not JSON: %s (column %d)", jerr.text, jerr.column);
    fields_t f;
    bool ok = json_is_object(obj) ? true : fail(e, line, NULL, "not a JSON object");
    if (ok && json_object_get(obj, "id") != NULL) /* first, for the error line too */
        rq->id = json_incref(json_object_get(obj, "id"));
    ok = ok && get_fields(obj, line, &f, e);
    if (ok && (f.prompt == NULL) == (f.tokens == NULL))
        ok = fail(e, line, f.prompt ? "tokens" : "prompt",
                  f.prompt ? "cannot be given with \"prompt\"" : "missing (or \"tokens\")");
    if (ok && f.tokens != NULL && (f.chat != NULL || f.system != NULL))
        ok = fail(e, line, f.chat ? "chat" : "system", "applies to \"prompt\", not \"tokens\"");
    ok = ok && get_sampling(b, &f, line, f.tokens != NULL, req, e);
    ok = ok && (f.tokens ? get_tokens(b, f.tokens, line, rq, e) : get_prompt(b, &f, line, rq, e));
    json_decref(obj);
    if (!ok)
        return false;
    rq->line = line;
    rq->stop_at_eog = f.tokens == NULL;
    req->tokens = rq->prompt;
    req->n_tokens = rq->n_prompt;
    return true;
}

/* ---- output lines (rank 0) ---- */

/* Writes obj as one line with one write() (more only if the kernel takes
 * part of it). Consumes obj. */
static void write_line(batch_t *b, json_t *obj)
{
    if (obj == NULL) {
        b->out_status = BT_ERR_NOMEM;
        bt_log_error("batch: out of memory for an output line");
        return;
    }
    size_t n = json_dumpb(obj, b->out_buf, b->out_cap, JSON_COMPACT | JSON_REAL_PRECISION(7));
    if (n + 1 > b->out_cap) {
        size_t cap = 2 * (n + 1);
        char *buf = realloc(b->out_buf, cap);
        if (buf == NULL) {
            json_decref(obj);
            b->out_status = BT_ERR_NOMEM;
            bt_log_error("batch: out of memory for an output line of %zu bytes", n + 1);
            return;
        }
        b->out_buf = buf, b->out_cap = cap;
        n = json_dumpb(obj, b->out_buf, b->out_cap, JSON_COMPACT | JSON_REAL_PRECISION(7));
    }
    json_decref(obj);
    b->out_buf[n++] = '\n';
    for (size_t done = 0; done < n && b->out_status == BT_OK;) {
        ssize_t w = write(b->out_fd, b->out_buf + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            bt_log_error("batch: writing to '%s' failed: %s",
                         b->o->output ? b->o->output : "stdout", strerror(errno));
            b->out_status = BT_ERR_IO;
        } else {
            done += (size_t)w;
        }
    }
}

static void error_line(batch_t *b, json_t *id, const line_error_t *e)
{
    bt_log_warn("batch: %s", e->msg);
    write_line(b, json_pack("{s:O?,s:i,s:s,s:s}", "id", id, "line", b->line_no,
                            "finish_reason", "error", "error", e->msg));
    b->n_done++;
    b->n_errors++;
}

/* The request's text into b->text: its ids detokenized, each byte that is
 * not part of valid UTF-8 replaced by U+FFFD. Returns the length. */
static size_t request_text(batch_t *b, const request_t *rq)
{
    size_t n = 0;
    if (b->detok == NULL)
        return 0;
    for (int i = 0; i <= rq->n_gen; i++) {
        const char *s;
        size_t len;
        if (i < rq->n_gen) {
            if (bt_detok_push(b->detok, rq->gen[i], &s, &len) != BT_OK)
                continue;
        } else {
            bt_detok_flush(b->detok, &s, &len);
        }
        if (n + 3 * len > b->text_cap) {
            size_t cap = 2 * (n + 3 * len) > 4096 ? 2 * (n + 3 * len) : 4096;
            char *t = realloc(b->text, cap);
            if (t == NULL)
                return n; /* the text is cut; the ids are whole */
            b->text = t, b->text_cap = cap;
        }
        n += bt_utf8_repair(s, len, b->text + n);
    }
    return n;
}

static json_t *ids_array(const int32_t *ids, int n)
{
    json_t *a = json_array();
    for (int i = 0; a != NULL && i < n; i++)
        if (json_array_append_new(a, json_integer(ids[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static void result_line(batch_t *b, const request_t *rq, bt_finish_t why, double t_end)
{
    size_t len = request_text(b, rq);
    double gen_s = rq->t_last - rq->t_first;
    json_t *tps = rq->n_gen >= 2 && gen_s > 0 ? json_real((rq->n_gen - 1) / gen_s) : json_null();
    json_t *ttft = rq->t_first > 0 ? json_real(1e3 * (rq->t_first - rq->t_admit)) : json_null();
    write_line(b, json_pack("{s:O?,s:i,s:s%,s:o,s:i,s:i,s:s,s:o,s:f,s:o}", "id", rq->id, "line",
                            rq->line, "text", b->text ? b->text : "", len, "tokens",
                            ids_array(rq->gen, rq->n_gen), "n_prompt", rq->n_prompt, "n_gen",
                            rq->n_gen, "finish_reason", why == BT_FINISH_STOP ? "stop" : "length",
                            "ttft_ms", ttft, "latency_ms", 1e3 * (t_end - rq->t_admit),
                            "gen_tps", tps));
}

/* ---- progress and summary (rank 0) ---- */

static void progress(batch_t *b, bool force)
{
    double now = bt_now();
    if (!force && now - b->t_progress < 1.0)
        return;
    b->t_progress = now;
    double el = now - b->t_start;
    double tps = el > 0 ? (double)b->n_gen_tok / el : 0.0;
    int left = b->n_requests - b->n_done;
    if (b->n_done > 0 && left > 0)
        bt_log_info("batch: %d/%d requests done, %lld tokens generated, %.1f t/s, ETA %.0f s",
                    b->n_done, b->n_requests, (long long)b->n_gen_tok, tps,
                    el * left / b->n_done);
    else
        bt_log_info("batch: %d/%d requests done, %lld tokens generated, %.1f t/s", b->n_done,
                    b->n_requests, (long long)b->n_gen_tok, tps);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The p-th percentile (nearest rank) of v[0..n) in ms; sorts v. */
static double percentile_ms(double *v, int n, double p)
{
    if (n == 0)
        return 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int k = (int)ceil(p / 100.0 * n) - 1;
    return 1e3 * v[k < 0 ? 0 : k];
}

static void summary(batch_t *b, const bt_serve_stats_t *st)
{
    double el = bt_now() - b->t_start;
    bt_log_info("batch: %d requests in %.2f s: %d stop, %d length, %d error%s; job seed %llu",
                b->n_done, el, b->n_stop, b->n_length, b->n_errors, b->n_errors == 1 ? "" : "s",
                (unsigned long long)b->job_seed);
    bt_log_info("batch: prompt %lld tokens (%.1f t/s), generated %lld tokens (%.1f t/s), "
                "%d micro-batches, --parallel %d",
                (long long)b->n_prompt_tok, el > 0 ? b->n_prompt_tok / el : 0.0,
                (long long)b->n_gen_tok, el > 0 ? b->n_gen_tok / el : 0.0, st->n_mb,
                b->o->n_parallel);
    int n = b->n_timed;
    double l50 = percentile_ms(b->latency, n, 50), l95 = percentile_ms(b->latency, n, 95);
    /* requests that chose no token have no time to first token */
    int m = 0;
    for (int i = 0; i < n; i++)
        if (b->ttft[i] >= 0)
            b->ttft[m++] = b->ttft[i];
    bt_log_info("batch: time to first token p50 %.1f ms, p95 %.1f ms; latency p50 %.1f ms, "
                "p95 %.1f ms", percentile_ms(b->ttft, m, 50), percentile_ms(b->ttft, m, 95),
                l50, l95);
}

/* ---- the engine's hooks ---- */

static void request_free(request_t *rq)
{
    json_decref(rq->id);
    free(rq->prompt);
    free(rq->gen);
    *rq = (request_t){0};
}

/* rank 0: the next good line as a request; bad lines get their error line. */
static bool hook_next(void *arg, int *id, bt_seq_req_t *req)
{
    batch_t *b = arg;
    size_t len;
    /* the lines counted at the start, even if the file grows meanwhile */
    while (b->out_status == BT_OK && b->line_no < b->n_lines && read_line(b, &len)) {
        if (is_blank(b->line, len))
            continue;
        if (b->n_free == 0) { /* the engine admits at most n_slots at once */
            bt_log_error("batch: line %d: more than --parallel %d requests admitted", b->line_no,
                         b->o->n_parallel);
            b->out_status = BT_ERR_ARG;
            return false;
        }
        int slot = b->free_slots[b->n_free - 1];
        request_t *rq = &b->pool[slot];
        line_error_t e;
        *req = (bt_seq_req_t){0};
        if (!parse_request(b, b->line, len, rq, req, &e)) {
            error_line(b, rq->id, &e);
            request_free(rq);
            progress(b, false);
            continue;
        }
        /* room for every id it may choose: n_predict, or until the slot is full */
        int room = b->slot_ctx - rq->n_prompt + 1;
        rq->cap_gen = req->n_predict < room ? req->n_predict : room;
        rq->gen = malloc(sizeof *rq->gen * (size_t)rq->cap_gen);
        if (rq->gen == NULL) {
            bt_log_error("batch: line %d: out of memory for %d ids", b->line_no, rq->cap_gen);
            b->out_status = BT_ERR_NOMEM;
            request_free(rq);
            return false;
        }
        b->n_free--;
        b->slot_of_line[b->line_no] = slot;
        rq->t_admit = bt_now();
        *id = b->line_no;
        return true;
    }
    if (ferror(b->in) && b->out_status == BT_OK) {
        bt_log_error("--batch-file: reading '%s' failed at line %d", b->o->path, b->line_no + 1);
        b->out_status = BT_ERR_IO;
    }
    return false;
}

/* rank 0: a chosen token; false at end-of-generation of a prompt request. */
static bool hook_token(void *arg, int id, int32_t token)
{
    batch_t *b = arg;
    request_t *rq = &b->pool[b->slot_of_line[id]];
    double now = bt_now();
    if (rq->t_first == 0)
        rq->t_first = now;
    if (b->out_status != BT_OK || (rq->stop_at_eog && bt_tokenizer_is_eog(b->tok, token)))
        return false;
    if (rq->n_gen == rq->cap_gen) { /* not expected: cap_gen covers n_predict and the slot */
        int32_t *g = realloc(rq->gen, sizeof *g * 2 * (size_t)rq->cap_gen);
        if (g == NULL)
            return false;
        rq->gen = g, rq->cap_gen *= 2;
    }
    rq->gen[rq->n_gen++] = token;
    rq->t_last = now;
    b->n_gen_tok++;
    progress(b, false);
    return true;
}

/* rank 0: the request's line, its figures, its slot back to the pool. */
static void hook_finish(void *arg, int id, bt_finish_t why)
{
    batch_t *b = arg;
    int slot = b->slot_of_line[id];
    request_t *rq = &b->pool[slot];
    double now = bt_now();
    result_line(b, rq, why, now);
    b->ttft[b->n_timed] = rq->t_first > 0 ? rq->t_first - rq->t_admit : -1.0;
    b->latency[b->n_timed++] = now - rq->t_admit;
    b->n_prompt_tok += rq->n_prompt;
    b->n_done++;
    b->n_stop += why == BT_FINISH_STOP;
    b->n_length += why == BT_FINISH_LENGTH;
    request_free(rq);
    b->free_slots[b->n_free++] = slot;
    progress(b, false);
}

/* last stage: a logits row of request id at pos into PREFIX.<id>, at row pos. */
static bt_status_t hook_logits(void *arg, int id, int pos, const float *row)
{
    batch_t *b = arg;
    if (b->dump_path == NULL)
        return BT_OK;
    const size_t row_bytes = sizeof(float) * (size_t)b->n_vocab;
    if (id != b->dump_id) {
        if (b->dump_fd >= 0)
            close(b->dump_fd);
        sprintf(b->dump_path + strlen(b->o->dump_prefix), ".%d", id);
        b->dump_fd = open(b->dump_path, O_WRONLY | O_CREAT | O_CLOEXEC | (pos == 0 ? O_TRUNC : 0),
                          0644);
        b->dump_id = b->dump_fd >= 0 ? id : -1;
        if (b->dump_fd < 0) {
            bt_log_error("--dump-logits: cannot create '%s': %s", b->dump_path, strerror(errno));
            return BT_ERR_IO;
        }
    }
    if (pwrite(b->dump_fd, row, row_bytes, (off_t)pos * (off_t)row_bytes) != (ssize_t)row_bytes) {
        bt_log_error("--dump-logits: writing '%s' failed", b->dump_path);
        return BT_ERR_IO;
    }
    return BT_OK;
}

/* ---- the run ---- */

bt_status_t bt_batch_check_options(const bt_batch_options_t *o)
{
    return bt_run_check_sampling(&o->sampling);
}

/* rank 0: tokenizer, chat template, pool, figures; the job seed. */
static bt_status_t setup_rank0(batch_t *b)
{
    const bt_batch_options_t *o = b->o;
    bt_status_t st = bt_tokenizer_load(b->pipe.model->gguf, &b->tok);
    if (st == BT_OK && bt_tokenizer_kind(b->tok) != BT_TOKENIZER_NONE)
        st = bt_detok_init(b->tok, 0, &b->detok);
    if (st != BT_OK)
        return st;
    b->chat = bt_chat_format(b->pipe.model->gguf);
    b->template_system = bt_chat_template_system(b->pipe.model->gguf);
    const size_t P = (size_t)o->n_parallel;
    const size_t R = (size_t)b->n_lines + 1; /* >= the requests, whatever the file does */
    b->pool = calloc(P, sizeof *b->pool);
    b->free_slots = malloc(P * sizeof *b->free_slots);
    b->slot_of_line = calloc((size_t)b->n_lines + 1, sizeof *b->slot_of_line);
    b->ttft = malloc(R * sizeof *b->ttft);
    b->latency = malloc(R * sizeof *b->latency);
    if (!b->pool || !b->free_slots || !b->slot_of_line || !b->ttft || !b->latency) {
        bt_log_error("batch: out of memory for %zu requests", R);
        return BT_ERR_NOMEM;
    }
    for (int i = 0; i < o->n_parallel; i++)
        b->free_slots[i] = o->n_parallel - 1 - i;
    b->n_free = o->n_parallel;
    b->job_seed = o->seed_given ? o->sampling.seed
                                : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32) ^
                                      ((uint64_t)getpid() << 16);
    return BT_OK;
}

/* last stage: the dump files' folder must take new files before any work. */
static bt_status_t setup_last(batch_t *b)
{
    const char *prefix = b->o->dump_prefix;
    if (prefix == NULL)
        return BT_OK;
    b->dump_path = malloc(strlen(prefix) + 16);
    if (b->dump_path == NULL)
        return BT_ERR_NOMEM;
    const char *slash = strrchr(prefix, '/');
    if (slash == NULL)
        strcpy(b->dump_path, ".");
    else
        snprintf(b->dump_path, strlen(prefix) + 16, "%.*s", (int)(slash - prefix + 1), prefix);
    if (access(b->dump_path, W_OK | X_OK) != 0) {
        bt_log_error("--dump-logits: cannot create files in '%s' (PREFIX.<line> per request): %s",
                     b->dump_path, strerror(errno));
        return BT_ERR_IO;
    }
    strcpy(b->dump_path, prefix);
    return BT_OK;
}

static bt_status_t open_pipe(batch_t *b)
{
    const bt_batch_options_t *o = b->o;
    bt_pipe_config_t cfg = {
        .model_path = o->model,
        .ratios = o->ratios,
        .n_ratios = o->n_ratios,
        .head_share = o->dump_prefix ? 1.0 : 0.5,
        .n_ctx = o->n_ctx,
        .n_slots = o->n_parallel,
        .max_tok = o->ubatch,
        .n_threads = o->threads,
        .ops = o->ops,
        .gpu = o->gpu,
        .gpu_given = o->gpu_given,
        .all_logits = o->dump_prefix != NULL,
        .no_mmap = o->no_mmap,
        .kv_type = o->kv_type,
        .tp = o->tp,
        .tp_allreduce = o->tp_allreduce,
    };
    bt_status_t st = bt_pipe_init(&b->pipe, b->comm, &cfg);
    if (st != BT_OK)
        return st;
    b->n_vocab = b->pipe.model->hp.n_vocab;
    b->slot_ctx = b->pipe.fwd->n_ctx;
    if (b->pipe.world_rank == 0) {
        char split[1024];
        bt_partition_str(b->pipe.bounds, b->pipe.n_stages, split, sizeof split);
        bt_log_info("%d stage%s: %s; --parallel %d slots of %d positions", b->pipe.n_stages,
                    b->pipe.n_stages > 1 ? "s" : "", split, o->n_parallel, b->slot_ctx);
    }
    return BT_OK;
}

static void batch_free(batch_t *b)
{
    if (b->pool != NULL)
        for (int i = 0; i < b->o->n_parallel; i++)
            request_free(&b->pool[i]);
    free(b->pool);
    free(b->free_slots);
    free(b->slot_of_line);
    free(b->ttft);
    free(b->latency);
    free(b->line);
    free(b->out_buf);
    free(b->text);
    free(b->template_system);
    free(b->dump_path);
    if (b->dump_fd >= 0)
        close(b->dump_fd);
    if (b->in != NULL)
        fclose(b->in);
    bt_detok_free(b->detok);
    bt_tokenizer_free(b->tok);
}

int bt_batch_run(const bt_batch_options_t *o, MPI_Comm comm)
{
    batch_t b = {.o = o, .comm = comm, .out_fd = -1, .dump_fd = -1, .dump_id = -1};
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    /* the files first: a bad one stops every rank before the model loads
     * (stage s is ranks s*tp.., so the last stage's leader, rank size - tp, writes the
     * dumps) */
    bt_status_t st = rank == 0 ? open_files(&b) : BT_OK;
    if (st == BT_OK && rank == size - (o->tp > 1 ? o->tp : 1))
        st = setup_last(&b);
    st = bt_transport_agree(comm, st);
    if (st == BT_OK && open_pipe(&b) != BT_OK)
        st = BT_ERR_ARG; /* bt_pipe_init reported it on every rank alike */
    if (st == BT_OK) {
        bt_status_t s = rank == 0 ? setup_rank0(&b) : BT_OK;
        if (s == BT_OK && rank == 0)
            s = start_output(&b);
        st = bt_transport_agree(comm, s);
        bt_serve_config_t scfg = {.n_slots = o->n_parallel, .n_groups = o->n_groups,
                                  .ubatch = o->ubatch, .sync = o->sync,
                                  .all_logits = o->dump_prefix != NULL};
        bt_serve_hooks_t hooks = {.next = hook_next, .token = hook_token,
                                  .finish = hook_finish, .logits = hook_logits, .arg = &b};
        bt_serve_stats_t stats = {0};
        b.t_start = b.t_progress = bt_now();
        if (st == BT_OK && (st = bt_pipe_serve(&b.pipe, &scfg, &hooks, &stats)) != BT_OK) {
            bt_log_error("batch job failed (%s); stopping every rank", bt_status_str(st));
            MPI_Abort(comm, 1);
        }
        if (st == BT_OK && rank == 0) {
            progress(&b, true);
            summary(&b, &stats);
        }
        if (st == BT_OK)
            bt_pipe_report_memory(&b.pipe); /* collective: every rank is here */
        if (st == BT_OK && rank == 0)
            st = b.out_status;
        bt_pipe_free(&b.pipe);
    }
    if (b.out_owned && close(b.out_fd) != 0 && st == BT_OK) {
        bt_log_error("-o: closing '%s' failed: %s", o->output, strerror(errno));
        st = BT_ERR_IO;
    }
    st = bt_transport_agree(comm, st);
    batch_free(&b);
    return st == BT_OK ? 0 : 1;
}
