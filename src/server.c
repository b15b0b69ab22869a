/*
 * baton-server: an OpenAI-compatible HTTP server over the pipeline.
 *   mpirun -np S baton-server -m MODEL.gguf [--host 127.0.0.1] [--port 8080] [--parallel 16]
 * docs/usage.md, "Serving over HTTP". Rank 0 runs the HTTP front end
 * (libmicrohttpd, a thread per connection) and the serve engine
 * (stages/serve.h) on its main thread, the only one that calls MPI; the
 * other ranks are stages as in every run.
 *
 * Reads in the order a request travels: the options, the shared state,
 * one request's life (admission, tokens, end), the engine's hooks, the
 * HTTP side (routes, bodies, answers, streams), metrics, signals, the run.
 *
 * Threads. A connection's thread parses and tokenizes its body, then puts
 * the request in the queue and waits on the request's condition variable;
 * the engine thread takes requests from the queue (hooks.next) when a slot
 * is free, and fills in their tokens. One mutex (srv.mu) guards the queue,
 * every request's mutable part and the figures. A request is freed when
 * both sides have let it go (refs).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <mpi.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "args.h"
#include "build_commit.h"
#include "chat.h"
#include "rng.h"
#include "runopts.h"
#include "stages/partition.h"
#include "stages/schedule.h"
#include "stages/serve.h"
#include "tokenizer.h"
#include "unicode.h"

/* ---- options ---- */

typedef struct options {
    bt_run_opts_t r;
    const char *host;        /* --host (default 127.0.0.1) */
    int port;                /* --port (default 8080; 0: any free port) */
    const char *alias;       /* --alias: the model's name in the API (default: the file's) */
    int parallel;            /* --parallel: sequences at once */
    int groups;              /* --groups; 0: automatic */
    int queue;               /* --queue: requests waiting for a slot, at most */
    int n_predict;           /* -n: max_tokens when a request gives none; 0: the context */
    const char *chat_template; /* --chat-template NAME */
    const char *api_key;     /* --api-key */
    const char *api_key_file;
    int timeout;             /* --timeout: seconds a connection may stay idle */
    int max_body;            /* --max-body: bytes */
    int max_conn;            /* --max-connections */
    int drain_timeout;       /* --drain-timeout: seconds */
    int no_cache_prompt;     /* --no-cache-prompt */
    int help;
} options_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: [mpirun -np S] baton-server -m MODEL.gguf [--host H] [--port P] [options]\n"
            "  OpenAI-compatible API on rank 0: /v1/chat/completions, /v1/completions,\n"
            "  /v1/models, /health, /metrics, /tokenize, /detokenize (docs/usage.md)\n"
            "  -m, --model FILE          GGUF model\n"
            "      --host H              address to listen on (default 127.0.0.1: this machine\n"
            "                            only; 0.0.0.0 for every interface)\n"
            "      --port P              TCP port (default 8080; 0: any free one, printed)\n"
            "      --alias NAME          the model's id in the API (default: the file's name)\n"
            "  -np, --parallel N         requests served at once, each with its own -c\n"
            "                            positions of KV cache (default 8)\n"
            "      --queue N             requests waiting for a slot, at most; beyond: 503 with\n"
            "                            Retry-After (default 256)\n"
            "  -n, --n-predict N         max_tokens of a request that gives none (default: the\n"
            "                            rest of its context)\n"
            "  -c, --ctx-size N          context per request (default: the model's, at most 4096)\n"
            "      --chat-template NAME  chatml, gemma or llama3 (default: the model's)\n"
            "      --api-key KEY         require Authorization: Bearer KEY (all but /health)\n"
            "      --api-key-file FILE   the key from the file's first line\n"
            "      --timeout S           seconds a connection may stay idle (default 30)\n"
            "      --max-body BYTES      largest request body (default 1048576)\n"
            "      --max-connections N   connections at once (default 256)\n"
            "      --drain-timeout S     on SIGTERM: seconds to finish the requests in flight\n"
            "                            before cancelling them (default 30)\n"
            "      --no-cache-prompt     compute every prompt whole (default: a request takes\n"
            "                            the free slot whose cache holds the longest prefix of\n"
            "                            its prompt and computes only the rest; same bits)\n"
            "  layout, kernels and sampling defaults as baton's (baton --help): -ub, --pipeline,\n"
            "  -ts, -sm, -tp, --tp-comm, -t, --groups, --kernels, --kv-type, --mmap, --temp,\n"
            "  --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n, -s\n"
            "  -v, --verbose             more logging (one line per request)\n"
            "  -h, --help                this text\n");
}

enum {
    OPT_HOST = BT_RUN_OPT_END, OPT_PORT, OPT_ALIAS, OPT_PARALLEL, OPT_GROUPS, OPT_QUEUE,
    OPT_TEMPLATE, OPT_KEY, OPT_KEY_FILE, OPT_TIMEOUT, OPT_MAX_BODY, OPT_MAX_CONN, OPT_DRAIN,
    OPT_NO_CACHE,
};

static bt_status_t parse_args(int argc, char **argv, int default_threads, int n_ranks,
                              options_t *o)
{
    static const struct option longopts[] = {
        BT_RUN_LONGOPTS,
        {"host", required_argument, 0, OPT_HOST},
        {"port", required_argument, 0, OPT_PORT},
        {"alias", required_argument, 0, OPT_ALIAS},
        {"parallel", required_argument, 0, OPT_PARALLEL},
        {"groups", required_argument, 0, OPT_GROUPS},
        {"queue", required_argument, 0, OPT_QUEUE},
        {"n-predict", required_argument, 0, 'n'},
        {"chat-template", required_argument, 0, OPT_TEMPLATE},
        {"api-key", required_argument, 0, OPT_KEY},
        {"api-key-file", required_argument, 0, OPT_KEY_FILE},
        {"timeout", required_argument, 0, OPT_TIMEOUT},
        {"max-body", required_argument, 0, OPT_MAX_BODY},
        {"max-connections", required_argument, 0, OPT_MAX_CONN},
        {"drain-timeout", required_argument, 0, OPT_DRAIN},
        {"no-cache-prompt", no_argument, 0, OPT_NO_CACHE},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    static const char *const own[][2] = {{"-np", "--parallel"}};
    *o = (options_t){.host = "127.0.0.1", .port = 8080, .parallel = 8, .queue = 256,
                     .timeout = 30, .max_body = 1 << 20, .max_conn = 256, .drain_timeout = 30};
    bt_run_opts_init(&o->r, default_threads, 64);
    bt_run_normalize_argv(argc, argv, own, 1);
    opterr = 0;
    int c;
    bt_status_t st = BT_OK;
    while (st == BT_OK &&
           (c = getopt_long(argc, argv, ":" BT_RUN_SHORTOPTS "n:h", longopts, NULL)) != -1) {
        bool handled;
        if ((st = bt_run_opt(c, optarg, &o->r, &handled)) != BT_OK || handled)
            continue;
        switch (c) {
        case OPT_HOST: o->host = optarg; break;
        case OPT_PORT: st = bt_parse_int("--port", optarg, 0, 65535, &o->port); break;
        case OPT_ALIAS: o->alias = optarg; break;
        case OPT_PARALLEL: st = bt_parse_int("--parallel", optarg, 1, 4096, &o->parallel); break;
        case OPT_GROUPS: st = bt_parse_int("--groups", optarg, 1, 4096, &o->groups); break;
        case OPT_QUEUE: st = bt_parse_int("--queue", optarg, 0, 1 << 20, &o->queue); break;
        case 'n': st = bt_parse_int("-n", optarg, 1, 1 << 24, &o->n_predict); break;
        case OPT_TEMPLATE:
            o->chat_template = optarg;
            if (bt_chat_format_by_name(optarg) == BT_CHAT_NONE) {
                bt_log_error("--chat-template: '%s' is not one of chatml, gemma, llama3", optarg);
                st = BT_ERR_ARG;
            }
            break;
        case OPT_KEY: o->api_key = optarg; break;
        case OPT_KEY_FILE: o->api_key_file = optarg; break;
        case OPT_TIMEOUT: st = bt_parse_int("--timeout", optarg, 1, 86400, &o->timeout); break;
        case OPT_MAX_BODY:
            st = bt_parse_int("--max-body", optarg, 64, 1 << 30, &o->max_body);
            break;
        case OPT_MAX_CONN:
            st = bt_parse_int("--max-connections", optarg, 1, 65536, &o->max_conn);
            break;
        case OPT_DRAIN:
            st = bt_parse_int("--drain-timeout", optarg, 0, 86400, &o->drain_timeout);
            break;
        case OPT_NO_CACHE: o->no_cache_prompt = 1; break;
        case 'h': o->help = 1; return BT_OK;
        default: st = bt_getopt_error(c, argv); break;
        }
    }
    if (st != BT_OK)
        return st;
    if (optind < argc) {
        bt_log_error("unexpected argument '%s'", argv[optind]);
        return BT_ERR_ARG;
    }
    if (o->r.model == NULL) {
        bt_log_error("no model given (-m FILE)");
        return BT_ERR_ARG;
    }
    if (o->api_key != NULL && o->api_key_file != NULL) {
        bt_log_error("--api-key and --api-key-file: give one");
        return BT_ERR_ARG;
    }
    if (o->api_key != NULL && *o->api_key == '\0') {
        bt_log_error("--api-key: the key is empty");
        return BT_ERR_ARG;
    }
    if (bt_run_opts_check(&o->r, n_ranks) != BT_OK)
        return BT_ERR_ARG;
    return bt_run_check_sampling(&o->r.sampling);
}

/* ---- the shared state ---- */

enum { RQ_QUEUED, RQ_RUNNING, RQ_DONE };

/* Outcomes counted in /metrics. */
enum { OUT_OK, OUT_BAD, OUT_REJECTED, OUT_CANCELLED, OUT_FAILED, N_OUT };
static const char *const outcome_names[N_OUT] = {"ok", "bad_request", "rejected", "cancelled",
                                                 "failed"};
enum { EP_CHAT, EP_COMPLETIONS, EP_TOKENIZE, EP_DETOKENIZE, EP_MODELS, EP_HEALTH, EP_METRICS,
       EP_OTHER, N_EP };
static const char *const endpoint_names[N_EP] = {"chat_completions", "completions", "tokenize",
                                                 "detokenize", "models", "health", "metrics",
                                                 "other"};

typedef struct srv_req {
    /* fixed once queued */
    uint64_t serial;       /* the response's id */
    bt_api_request_t api;
    int32_t *prompt;
    int n_prompt;
    int max_tokens;
    bt_sampler_params_t sampling;
    double t_arrive;
    /* guarded by srv.mu */
    int state, refs, slot;
    bool cancel;           /* the client went away */
    bool failed;           /* ended by a drain or a fatal error: 503 */
    const char *finish;    /* "stop" or "length" once done */
    int32_t *gen;          /* [cap] chosen ids handed to the client */
    bt_logprobs_t *lp;     /* [cap] with api.logprobs */
    size_t *tok_end;       /* [cap] the text shown once token i is in */
    int n_gen, cap;
    char *text;            /* every byte decoded so far, valid UTF-8 */
    size_t n_text, cap_text;
    size_t n_visible;      /* what may be shown: not a possible start of a stop string */
    double t_start, t_first, t_last;
    bt_detok_t *detok;     /* the engine thread's */
    pthread_cond_t cv;
    struct srv_req *next;  /* the queue */
} srv_req_t;

/* A histogram with fixed bounds (seconds). */
#define N_BUCKETS 12
typedef struct hist {
    const double *le;
    uint64_t count[N_BUCKETS + 1];
    double sum;
    uint64_t n;
} hist_t;

static const double ttft_le[N_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                          0.5,   1.0,  2.5,   5.0,  10.0, 30.0};
static const double itl_le[N_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                         0.1,   0.25,   0.5,   1.0,  2.5,   5.0};

static struct server {
    options_t o;
    pthread_mutex_t mu;
    pthread_cond_t engine_cv; /* the engine's wait: a request queued, or a drain */
    enum { LOADING, READY, DRAINING, FATAL } phase;
    double drain_deadline;
    /* the model, once loaded (read-only then) */
    bt_pipe_t pipe;
    bt_tokenizer_t *tok;
    bt_api_ctx_t api;
    const char *model_id;
    char *template_system;
    int slot_ctx, n_vocab;
    double t_loaded;
    /* the queue and the slots */
    srv_req_t *head, *tail;
    int n_queued;
    srv_req_t **active;       /* [parallel] by engine id */
    int n_active;
    int n_live;               /* requests not yet freed (their answers still on the way) */
    pthread_cond_t live_cv;   /* n_live went down */
    uint64_t serial;
    uint64_t seed_state;      /* seeds of requests without one */
    /* figures */
    uint64_t requests[N_EP][N_OUT];
    uint64_t prompt_tokens, gen_tokens;
    hist_t ttft, itl;
    bt_serve_stats_t stats;
    double t_serve;           /* when the engine started */
    struct MHD_Daemon *daemon;
    int sig_pipe[2];
} srv = {.mu = PTHREAD_MUTEX_INITIALIZER, .engine_cv = PTHREAD_COND_INITIALIZER,
         .live_cv = PTHREAD_COND_INITIALIZER,
         .sig_pipe = {-1, -1}};

static void hist_add(hist_t *h, double x)
{
    int k = 0;
    while (k < N_BUCKETS && x > h->le[k])
        k++;
    h->count[k]++;
    h->sum += x;
    h->n++;
}

/* Waits on cv (srv.mu held) for at most ms milliseconds. */
static void timed_wait(pthread_cond_t *cv, long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms * 1000 * 1000;
    ts.tv_sec += ts.tv_nsec / 1000000000;
    ts.tv_nsec %= 1000000000;
    pthread_cond_timedwait(cv, &srv.mu, &ts);
}

/* ---- one request's life ---- */

static void req_unref(srv_req_t *r) /* srv.mu held */
{
    if (--r->refs > 0)
        return;
    bt_api_request_free(&r->api);
    bt_detok_free(r->detok);
    free(r->prompt);
    free(r->gen);
    free(r->lp);
    free(r->tok_end);
    free(r->text);
    pthread_cond_destroy(&r->cv);
    free(r);
    srv.n_live--;
    pthread_cond_broadcast(&srv.live_cv);
}

/* Ends r (srv.mu held): figures, wakes its connection, drops the engine's
 * hold when it had one. */
static int req_endpoint(const srv_req_t *r)
{
    return r->api.kind == BT_API_CHAT ? EP_CHAT : EP_COMPLETIONS;
}

static void req_done(srv_req_t *r, const char *finish, bool failed)
{
    r->state = RQ_DONE;
    r->finish = finish;
    r->failed = failed;
    r->n_visible = r->n_text;
    srv.requests[req_endpoint(r)][r->cancel ? OUT_CANCELLED : failed ? OUT_FAILED : OUT_OK]++;
    pthread_cond_broadcast(&r->cv);
}

/* Appends s[0..n) to r's text, each byte that is not valid UTF-8 as U+FFFD. */
static bool add_text(srv_req_t *r, const char *s, size_t n)
{
    if (r->n_text + 3 * n + 1 > r->cap_text) {
        size_t cap = 2 * (r->n_text + 3 * n + 1);
        char *t = realloc(r->text, cap);
        if (t == NULL)
            return false;
        r->text = t, r->cap_text = cap;
    }
    r->n_text += bt_utf8_repair(s, n, r->text + r->n_text);
    r->text[r->n_text] = '\0';
    return true;
}

/* After new text: true when a stop string is now in it (the text is cut
 * where it begins); else n_visible leaves out the longest end of the text
 * that could still become one. from: where the new text began. */
static bool find_stop(srv_req_t *r, size_t from)
{
    size_t hold = 0;
    for (int i = 0; i < r->api.n_stop; i++) {
        const char *s = r->api.stop[i];
        const size_t n = strlen(s);
        const size_t start = from >= n ? from - n + 1 : 0;
        const char *hit = r->n_text >= start ? memmem(r->text + start, r->n_text - start, s, n)
                                             : NULL;
        if (hit != NULL) {
            r->n_text = (size_t)(hit - r->text);
            r->text[r->n_text] = '\0';
            r->n_visible = r->n_text;
            return true;
        }
        for (size_t k = n - 1 < r->n_text ? n - 1 : r->n_text; k > hold; k--)
            if (memcmp(r->text + r->n_text - k, s, k) == 0) {
                hold = k;
                break;
            }
    }
    r->n_visible = r->n_text - hold;
    return false;
}

/* ---- the engine's hooks (rank 0's main thread) ---- */

static bool hook_next(void *arg, int *id, bt_seq_req_t *req)
{
    (void)arg;
    pthread_mutex_lock(&srv.mu);
    srv_req_t *r;
    while ((r = srv.head) != NULL) {
        srv.head = r->next;
        srv.tail = srv.head ? srv.tail : NULL;
        srv.n_queued--;
        if (!r->cancel)
            break;
        req_done(r, NULL, false); /* its client left while it waited */
        req_unref(r);
    }
    bool got = r != NULL;
    if (got) {
        int s = 0;
        while (srv.active[s] != NULL)
            s++; /* the engine admits at most --parallel at once */
        srv.active[s] = r;
        srv.n_active++;
        r->slot = s;
        r->state = RQ_RUNNING;
        r->t_start = bt_now();
        *id = s;
        *req = (bt_seq_req_t){.tokens = r->prompt, .n_tokens = r->n_prompt,
                              .n_predict = r->max_tokens, .sampling = r->sampling,
                              .logprobs = r->api.logprobs, .top_logprobs = r->api.top_logprobs};
        srv.prompt_tokens += (uint64_t)r->n_prompt;
    }
    pthread_mutex_unlock(&srv.mu);
    return got;
}

static bool hook_wait(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&srv.mu);
    while (srv.head == NULL && srv.phase == READY)
        pthread_cond_wait(&srv.engine_cv, &srv.mu);
    const bool go_on = srv.head != NULL && srv.phase != FATAL;
    pthread_mutex_unlock(&srv.mu);
    return go_on;
}

static bool hook_cancelled(void *arg, int id)
{
    (void)arg;
    pthread_mutex_lock(&srv.mu);
    const bool c = srv.active[id]->cancel ||
                   (srv.phase == DRAINING && bt_now() >= srv.drain_deadline);
    pthread_mutex_unlock(&srv.mu);
    return c;
}

static void hook_logprobs(void *arg, int id, const bt_logprobs_t *lp)
{
    (void)arg;
    pthread_mutex_lock(&srv.mu);
    srv_req_t *r = srv.active[id];
    if (r->n_gen < r->cap)
        r->lp[r->n_gen] = *lp;
    pthread_mutex_unlock(&srv.mu);
}

static bool hook_token(void *arg, int id, int32_t token)
{
    (void)arg;
    const char *piece = "";
    size_t len = 0;
    srv_req_t *r = srv.active[id]; /* the slot is the engine's: no lock to read it */
    const bool eog = r->api.text != NULL && bt_tokenizer_is_eog(srv.tok, token);
    if (!eog && r->detok != NULL)
        bt_detok_push(r->detok, token, &piece, &len);
    pthread_mutex_lock(&srv.mu);
    const double now = bt_now();
    if (r->t_first == 0)
        hist_add(&srv.ttft, now - r->t_arrive);
    else
        hist_add(&srv.itl, now - r->t_last);
    r->t_first = r->t_first ? r->t_first : now;
    r->t_last = now;
    bool go_on = !eog && r->n_gen < r->cap;
    if (go_on) {
        const size_t from = r->n_text;
        go_on = add_text(r, piece, len) && !find_stop(r, from);
        r->gen[r->n_gen] = token;
        r->tok_end[r->n_gen++] = r->n_visible;
        srv.gen_tokens++;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&srv.mu);
    return go_on;
}

static void hook_finish(void *arg, int id, bt_finish_t why)
{
    (void)arg;
    srv_req_t *r = srv.active[id];
    const char *rest = "";
    size_t len = 0;
    if (r->detok != NULL && why != BT_FINISH_CANCEL)
        bt_detok_flush(r->detok, &rest, &len); /* an incomplete character at the end */
    pthread_mutex_lock(&srv.mu);
    if (len > 0 && r->n_visible == r->n_text) /* not cut at a stop string */
        add_text(r, rest, len);
    const bool drained = why == BT_FINISH_CANCEL && !r->cancel;
    req_done(r, why == BT_FINISH_LENGTH ? "length" : "stop", drained);
    if (bt_log_get_level() >= BT_LOG_DEBUG)
        bt_log_debug("server: request %llu: %d prompt tokens, %d generated, %s, first token "
                     "%.1f ms, %.1f ms in all", (unsigned long long)r->serial, r->n_prompt,
                     r->n_gen, why == BT_FINISH_CANCEL ? (drained ? "drained" : "cancelled")
                     : r->finish, r->t_first > 0 ? 1e3 * (r->t_first - r->t_arrive) : 0.0,
                     1e3 * (bt_now() - r->t_arrive));
    srv.active[id] = NULL;
    srv.n_active--;
    req_unref(r);
    pthread_mutex_unlock(&srv.mu);
}

static void hook_progress(void *arg, const bt_serve_stats_t *stats)
{
    (void)arg;
    pthread_mutex_lock(&srv.mu);
    srv.stats = *stats;
    pthread_mutex_unlock(&srv.mu);
}

/* ---- the HTTP side: answers ---- */

/* A connection's request, from its first call to its completion. */
typedef struct conn {
    int endpoint;
    int fd;                 /* the client's socket: polled for a hang-up */
    char *body;
    size_t n_body;
    bool too_big;
    double t0;
} conn_t;

static enum MHD_Result send_text(struct MHD_Connection *c, int status, const char *type,
                                 char *text, size_t len, const char *retry_after)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", type);
    if (retry_after != NULL)
        MHD_add_response_header(resp, "Retry-After", retry_after);
    if (status == 401)
        MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Answers with obj (consumed) as JSON. */
static enum MHD_Result send_json(struct MHD_Connection *c, int status, json_t *obj,
                                 const char *retry_after)
{
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (s == NULL)
        return MHD_NO;
    return send_text(c, status, "application/json", s, strlen(s), retry_after);
}

static void count(int endpoint, int outcome)
{
    pthread_mutex_lock(&srv.mu);
    srv.requests[endpoint][outcome]++;
    pthread_mutex_unlock(&srv.mu);
}

static enum MHD_Result send_error(struct MHD_Connection *c, int endpoint,
                                  const bt_api_error_t *e)
{
    count(endpoint, e->status == 503 ? OUT_REJECTED : e->status >= 500 ? OUT_FAILED : OUT_BAD);
    if (bt_log_get_level() >= BT_LOG_DEBUG)
        bt_log_debug("server: %d %s%s%s", e->status, e->message, e->param[0] ? " param " : "",
                     e->param);
    return send_json(c, e->status, bt_api_error_json(e), e->status == 503 ? "1" : NULL);
}

static enum MHD_Result fail(struct MHD_Connection *c, int endpoint, int status,
                            const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static enum MHD_Result fail(struct MHD_Connection *c, int endpoint, int status,
                            const char *param, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bt_api_error_t e;
    bt_api_fail(&e, status, param, "%s", msg);
    return send_error(c, endpoint, &e);
}

/* ---- the HTTP side: completions ---- */

static bool client_gone(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Waits (srv.mu held) until r has more than n tokens or is done; false when
 * the client went away meanwhile (r is then cancelled). */
static bool await(srv_req_t *r, int n, int fd)
{
    while (r->n_gen <= n && r->state != RQ_DONE) {
        timed_wait(&r->cv, 50);
        if (r->state != RQ_DONE && client_gone(fd)) {
            r->cancel = true;
            return false;
        }
    }
    return true;
}

/* The piece of id as UTF-8 text (into buf, invalid bytes as U+FFFD) and
 * its bytes as a JSON array. */
static json_t *token_json(int32_t id, float logprob, bool with_top, const bt_logprobs_t *lp)
{
    char raw[256], text[3 * 256];
    int n = bt_tokenizer_piece(srv.tok, id, true, raw, sizeof raw);
    n = n < 0 ? 0 : n > (int)sizeof raw ? (int)sizeof raw : n;
    const size_t m = bt_utf8_repair(raw, (size_t)n, text);
    json_t *bytes = json_array();
    for (int k = 0; k < n; k++)
        json_array_append_new(bytes, json_integer((unsigned char)raw[k]));
    json_t *t = json_pack("{s:s%,s:f,s:o}", "token", text, m, "logprob", (double)logprob,
                          "bytes", bytes);
    if (with_top && t != NULL) {
        json_t *top = json_array();
        for (int k = 0; k < lp->n_top; k++)
            json_array_append_new(top, token_json(lp->top_id[k], lp->top_logprob[k], false, NULL));
        json_object_set_new(t, "top_logprobs", top);
    }
    return t;
}

/* Chat's "logprobs" of tokens [a, b): {"content": [...]} */
static json_t *chat_logprobs(const srv_req_t *r, int a, int b)
{
    if (!r->api.logprobs)
        return json_null();
    json_t *content = json_array();
    for (int i = a; i < b; i++)
        json_array_append_new(content, token_json(r->gen[i], r->lp[i].logprob, true, &r->lp[i]));
    return json_pack("{s:o}", "content", content);
}

/* Completions' legacy "logprobs" of tokens [a, b). */
static json_t *completion_logprobs(const srv_req_t *r, int a, int b)
{
    if (!r->api.logprobs)
        return json_null();
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(),
           *offs = json_array();
    for (int i = a; i < b; i++) {
        json_t *t = token_json(r->gen[i], r->lp[i].logprob, false, NULL);
        json_array_append(tokens, json_object_get(t, "token"));
        json_array_append_new(lps, json_real(r->lp[i].logprob));
        json_t *top = json_object();
        for (int k = 0; k < r->lp[i].n_top; k++) {
            json_t *tk = token_json(r->lp[i].top_id[k], r->lp[i].top_logprob[k], false, NULL);
            json_object_set_new(top, json_string_value(json_object_get(tk, "token")),
                                json_real(r->lp[i].top_logprob[k]));
            json_decref(tk);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer(i > 0 ? (json_int_t)r->tok_end[i - 1] : 0));
        json_decref(t);
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
}

static json_t *ids_json(const int32_t *ids, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static json_t *usage_json(const srv_req_t *r)
{
    return json_pack("{s:i,s:i,s:i}", "prompt_tokens", r->n_prompt, "completion_tokens",
                     r->n_gen, "total_tokens", r->n_prompt + r->n_gen);
}

/* One choice of tokens [a, b) with text[ta, tb): the whole answer
 * (chunk false) or a stream chunk. */
static json_t *choice_json(const srv_req_t *r, int a, int b, size_t ta, size_t tb, bool chunk,
                           const char *finish)
{
    const bool chat = r->api.kind == BT_API_CHAT;
    json_t *text = json_stringn(r->text ? r->text + ta : "", tb - ta);
    json_t *ch = json_pack("{s:i}", "index", 0);
    if (chat && chunk)
        json_object_set_new(ch, "delta", tb > ta || b > a ? json_pack("{s:o}", "content", text)
                                                          : (json_decref(text), json_object()));
    else if (chat)
        json_object_set_new(ch, "message",
                            json_pack("{s:s,s:o}", "role", "assistant", "content", text));
    else
        json_object_set_new(ch, "text", text);
    json_object_set_new(ch, "logprobs", chat ? chat_logprobs(r, a, b) : completion_logprobs(r, a, b));
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    if (r->api.return_tokens)
        json_object_set_new(ch, "tokens", ids_json(r->gen + a, b - a));
    return ch;
}

/* The envelope of an answer or a chunk around choices (consumed). */
static json_t *envelope(const srv_req_t *r, bool chunk, json_t *choices)
{
    const bool chat = r->api.kind == BT_API_CHAT;
    char id[48];
    snprintf(id, sizeof id, "%s-%llu", chat ? "chatcmpl" : "cmpl",
             (unsigned long long)r->serial);
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:o}", "id", id, "object",
                     chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                          : "text_completion",
                     "created", (json_int_t)time(NULL), "model", srv.model_id,
                     "system_fingerprint", "baton-" BT_BUILD_COMMIT, "choices", choices);
}

static json_t *drain_error(void)
{
    bt_api_error_t e;
    bt_api_fail(&e, 503, NULL, srv.phase == FATAL ? "the pipeline failed; the server is "
                "stopping" : "the server is shutting down; the request was cancelled");
    return bt_api_error_json(&e);
}

/* A stream of server-sent events over one request. */
typedef struct stream {
    srv_req_t *r;
    struct MHD_Connection *c;
    int fd;
    int sent_tok;       /* tokens sent */
    size_t sent_text;   /* bytes of text sent */
    bool started, ended;
    char *buf;          /* events not yet handed to MHD */
    size_t n, off, cap;
} stream_t;

/* Appends "data: <obj>\n\n" (obj consumed; NULL: the [DONE] line). */
static void event(stream_t *s, json_t *obj)
{
    char *js = obj ? json_dumps(obj, JSON_COMPACT) : strdup("[DONE]");
    json_decref(obj);
    if (js == NULL)
        return;
    const size_t n = strlen(js) + 9; /* "data: ", the JSON, "\n\n" and sprintf's NUL */
    if (s->n + n > s->cap) {
        size_t cap = 2 * (s->n + n);
        char *b = realloc(s->buf, cap);
        if (b == NULL) {
            free(js);
            return;
        }
        s->buf = b, s->cap = cap;
    }
    s->n += (size_t)sprintf(s->buf + s->n, "data: %s\n\n", js);
    free(js);
}

/* New events for what r has now (srv.mu held). */
static void stream_events(stream_t *s)
{
    srv_req_t *r = s->r;
    const bool chat = r->api.kind == BT_API_CHAT;
    if (!s->started && chat) { /* the role first, as OpenAI's streams */
        json_t *ch = json_pack("{s:i,s:{s:s,s:s},s:n,s:n}", "index", 0, "delta", "role",
                               "assistant", "content", "", "logprobs", "finish_reason");
        event(s, envelope(r, true, json_pack("[o]", ch)));
    }
    s->started = true;
    for (; s->sent_tok < r->n_gen; s->sent_tok++) {
        const int i = s->sent_tok;
        const size_t end = r->tok_end[i];
        if (end == s->sent_text && !r->api.logprobs && !r->api.return_tokens)
            continue; /* held back: part of a character or of a stop string */
        event(s, envelope(r, true, json_pack("[o]", choice_json(r, i, i + 1, s->sent_text, end,
                                                                true, NULL))));
        s->sent_text = end;
    }
    if (r->state != RQ_DONE)
        return;
    if (r->failed) {
        event(s, drain_error());
    } else {
        event(s, envelope(r, true, json_pack("[o]", choice_json(r, r->n_gen, r->n_gen,
                                                                s->sent_text, r->n_text, true,
                                                                r->finish))));
        if (r->api.include_usage) {
            json_t *u = envelope(r, true, json_array());
            json_object_set_new(u, "usage", usage_json(r));
            event(s, u);
        }
    }
    event(s, NULL);
    s->ended = true;
}

/* --timeout is for clients that keep the server waiting. While a request
 * waits for the engine (a slot, its tokens) the wait is the server's: the
 * connection has no timeout then, and when there is something to send
 * again it gets --timeout back, which restarts its clock (MHD resets the
 * timer when a timeout follows none). */
static void server_waits(struct MHD_Connection *c, bool waits)
{
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT,
                              waits ? 0u : (unsigned)srv.o.timeout);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    stream_t *s = cls;
    (void)pos;
    while (s->off == s->n) { /* never 0 bytes: wait for events (a completion has no role one) */
        if (s->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        s->off = s->n = 0;
        const bool waits = s->started;
        if (waits)
            server_waits(s->c, true);
        pthread_mutex_lock(&srv.mu);
        bool here = !waits || await(s->r, s->sent_tok, s->fd);
        if (here)
            stream_events(s);
        pthread_mutex_unlock(&srv.mu);
        if (waits)
            server_waits(s->c, false);
        if (!here)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t k = s->n - s->off < max ? s->n - s->off : max;
    memcpy(buf, s->buf + s->off, k);
    s->off += k;
    return (ssize_t)k;
}

static void stream_free(void *cls)
{
    stream_t *s = cls;
    pthread_mutex_lock(&srv.mu);
    if (s->r->state != RQ_DONE)
        s->r->cancel = true; /* the connection ended before the answer */
    req_unref(s->r);
    pthread_mutex_unlock(&srv.mu);
    free(s->buf);
    free(s);
}

/* Draws the seed of a request without one. */
static uint64_t next_seed(void)
{
    pthread_mutex_lock(&srv.mu);
    uint64_t s = bt_splitmix64(&srv.seed_state);
    pthread_mutex_unlock(&srv.mu);
    return s >> 1; /* a non-negative seed, as a request could give */
}

/* The body as a request: parsed, tokenized, within the context. */
static bool make_request(const conn_t *cx, srv_req_t *r, bt_api_error_t *e)
{
    const bt_api_kind_t kind = cx->endpoint == EP_CHAT ? BT_API_CHAT : BT_API_COMPLETION;
    if (!bt_api_parse(kind, cx->body ? cx->body : "", cx->n_body, &srv.api, &r->api, e))
        return false;
    if (r->api.text != NULL) {
        if (bt_tokenizer_encode(srv.tok, r->api.text, strlen(r->api.text), true, true,
                                &r->prompt, &r->n_prompt) != BT_OK)
            return bt_api_fail(e, 500, NULL, "the prompt could not be tokenized");
    } else {
        r->prompt = r->api.ids, r->n_prompt = r->api.n_ids;
        r->api.ids = NULL;
    }
    const char *what = kind == BT_API_CHAT ? "messages" : "prompt";
    if (r->n_prompt == 0)
        return bt_api_fail(e, 400, what, "the prompt is empty after tokenization");
    const int room = srv.slot_ctx - r->n_prompt + 1; /* the last token takes no position */
    if (room < 1) {
        bt_api_fail(e, 400, what, "the prompt is %d tokens; the context per request holds %d "
                    "(-c)", r->n_prompt, srv.slot_ctx);
        e->code = "context_length_exceeded";
        return false;
    }
    const char *param = kind == BT_API_CHAT ? "max_completion_tokens" : "max_tokens";
    if (r->api.max_tokens > room) {
        bt_api_fail(e, 400, param, "the prompt (%d tokens) and %d more do not fit the context "
                    "per request (%d, -c): at most %d more", r->n_prompt, r->api.max_tokens,
                    srv.slot_ctx, room);
        e->code = "context_length_exceeded";
        return false;
    }
    r->max_tokens = r->api.max_tokens > 0 ? r->api.max_tokens
                    : srv.o.n_predict > 0 && srv.o.n_predict < room ? srv.o.n_predict
                                                                    : room;
    r->sampling = r->api.sampling;
    if (!r->api.seed_given)
        r->sampling.seed = next_seed();
    r->cap = r->max_tokens;
    r->gen = malloc(sizeof *r->gen * (size_t)r->cap);
    r->tok_end = malloc(sizeof *r->tok_end * (size_t)r->cap);
    r->lp = r->api.logprobs ? malloc(sizeof *r->lp * (size_t)r->cap) : NULL;
    if (r->gen == NULL || r->tok_end == NULL || (r->api.logprobs && r->lp == NULL) ||
        (bt_tokenizer_kind(srv.tok) != BT_TOKENIZER_NONE &&
         bt_detok_init(srv.tok, 0, &r->detok) != BT_OK))
        return bt_api_fail(e, 500, NULL, "out of memory for %d tokens", r->cap);
    return true;
}

/* Queues r (a reference for the engine, one for the connection); false
 * with e filled when the queue is full or the server is stopping. */
static bool enqueue(srv_req_t *r, bt_api_error_t *e)
{
    pthread_mutex_lock(&srv.mu);
    bool ok = false;
    if (srv.phase != READY)
        bt_api_fail(e, 503, NULL, srv.phase == DRAINING ? "the server is shutting down"
                    : "the pipeline failed; the server is stopping");
    else if (srv.n_queued >= srv.o.queue)
        bt_api_fail(e, 503, NULL, "%d requests are waiting already (--queue %d); retry later",
                    srv.n_queued, srv.o.queue);
    else
        ok = true;
    if (ok) {
        r->serial = ++srv.serial;
        r->refs = 2;
        r->state = RQ_QUEUED;
        if (srv.tail != NULL)
            srv.tail->next = r;
        else
            srv.head = r;
        srv.tail = r;
        srv.n_queued++;
        pthread_cond_signal(&srv.engine_cv);
    }
    pthread_mutex_unlock(&srv.mu);
    return ok;
}

static enum MHD_Result serve_completion(struct MHD_Connection *c, conn_t *cx)
{
    srv_req_t *r = calloc(1, sizeof *r);
    bt_api_error_t e;
    if (r == NULL)
        return MHD_NO;
    pthread_cond_init(&r->cv, NULL);
    r->refs = 1;
    pthread_mutex_lock(&srv.mu);
    srv.n_live++;
    pthread_mutex_unlock(&srv.mu);
    r->t_arrive = cx->t0;
    if (!make_request(cx, r, &e) || !enqueue(r, &e)) {
        pthread_mutex_lock(&srv.mu);
        req_unref(r);
        pthread_mutex_unlock(&srv.mu);
        return send_error(c, cx->endpoint, &e);
    }
    if (r->api.stream) {
        stream_t *s = calloc(1, sizeof *s);
        struct MHD_Response *resp =
            s ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, s,
                                                  stream_free)
              : NULL;
        if (resp == NULL) {
            free(s);
            pthread_mutex_lock(&srv.mu);
            r->cancel = true;
            req_unref(r);
            pthread_mutex_unlock(&srv.mu);
            return MHD_NO;
        }
        *s = (stream_t){.r = r, .c = c, .fd = cx->fd};
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    server_waits(c, true);
    pthread_mutex_lock(&srv.mu);
    while (r->state != RQ_DONE && await(r, r->n_gen, cx->fd))
        ;
    json_t *answer = NULL;
    int status = 200;
    if (r->state != RQ_DONE) { /* the client left: no one to answer */
        req_unref(r);
        pthread_mutex_unlock(&srv.mu);
        return MHD_NO;
    }
    if (r->failed) {
        status = 503;
        answer = drain_error();
    } else {
        answer = envelope(r, false, json_pack("[o]", choice_json(r, 0, r->n_gen, 0, r->n_text,
                                                                 false, r->finish)));
        json_object_set_new(answer, "usage", usage_json(r));
    }
    req_unref(r);
    pthread_mutex_unlock(&srv.mu);
    server_waits(c, false);
    return send_json(c, status, answer, status == 503 ? "1" : NULL);
}

/* ---- the HTTP side: the other endpoints ---- */

static enum MHD_Result serve_tokenize(struct MHD_Connection *c, const conn_t *cx)
{
    char *content;
    size_t n;
    bool add_special, parse_special, with_pieces;
    bt_api_error_t e;
    if (!bt_api_parse_tokenize(cx->body ? cx->body : "", cx->n_body, &content, &n, &add_special,
                               &parse_special, &with_pieces, &e))
        return send_error(c, cx->endpoint, &e);
    int32_t *ids = NULL;
    int n_ids = 0;
    bt_status_t st = bt_tokenizer_kind(srv.tok) == BT_TOKENIZER_NONE
                         ? BT_ERR_UNSUPPORTED
                         : bt_tokenizer_encode(srv.tok, content, n, add_special, parse_special,
                                               &ids, &n_ids);
    free(content);
    if (st != BT_OK)
        return fail(c, cx->endpoint, 400, "content", "the model has no tokenizer (%s)",
                    bt_status_str(st));
    json_t *tokens = json_array();
    for (int i = 0; i < n_ids; i++) {
        if (!with_pieces) {
            json_array_append_new(tokens, json_integer(ids[i]));
            continue;
        }
        json_t *t = token_json(ids[i], 0.0f, false, NULL);
        json_array_append_new(tokens, json_pack("{s:i,s:O}", "id", ids[i], "piece",
                                                json_object_get(t, "token")));
        json_decref(t);
    }
    free(ids);
    count(cx->endpoint, OUT_OK);
    return send_json(c, 200, json_pack("{s:o}", "tokens", tokens), NULL);
}

static enum MHD_Result serve_detokenize(struct MHD_Connection *c, const conn_t *cx)
{
    int32_t *ids;
    int n;
    bt_api_error_t e;
    if (!bt_api_parse_detokenize(cx->body ? cx->body : "", cx->n_body, srv.n_vocab, &ids, &n, &e))
        return send_error(c, cx->endpoint, &e);
    char *text = NULL;
    size_t len = 0;
    bt_status_t st = bt_tokenizer_kind(srv.tok) == BT_TOKENIZER_NONE
                         ? BT_ERR_UNSUPPORTED
                         : bt_tokenizer_decode(srv.tok, ids, n, 0, &text, &len);
    free(ids);
    if (st != BT_OK)
        return fail(c, cx->endpoint, 400, "tokens", "the model has no tokenizer (%s)",
                    bt_status_str(st));
    srv_req_t tmp = {0}; /* for its UTF-8 repair */
    bool ok = add_text(&tmp, text, len);
    free(text);
    json_t *out = ok ? json_pack("{s:s%}", "content", tmp.text ? tmp.text : "", tmp.n_text) : NULL;
    free(tmp.text);
    count(cx->endpoint, OUT_OK);
    return send_json(c, 200, out, NULL);
}

static enum MHD_Result serve_models(struct MHD_Connection *c)
{
    return send_json(c, 200,
                     json_pack("{s:s,s:[{s:s,s:s,s:I,s:s,s:{s:i,s:i,s:i}}]}", "object", "list",
                               "data", "id", srv.model_id, "object", "model", "created",
                               (json_int_t)srv.t_loaded, "owned_by", "baton", "meta",
                               "n_ctx_per_request", srv.slot_ctx, "n_vocab", srv.n_vocab,
                               "n_stages", srv.pipe.n_stages),
                     NULL);
}

static enum MHD_Result serve_health(struct MHD_Connection *c)
{
    pthread_mutex_lock(&srv.mu);
    const int phase = srv.phase;
    const int busy = srv.n_active, queued = srv.n_queued;
    pthread_mutex_unlock(&srv.mu);
    if (phase == READY)
        return send_json(c, 200, json_pack("{s:s,s:i,s:i}", "status", "ok", "slots_busy", busy,
                                           "queue", queued), NULL);
    static const char *const what[] = {"loading the model", "", "shutting down",
                                       "the pipeline failed"};
    bt_api_error_t e;
    bt_api_fail(&e, 503, NULL, "%s", what[phase]);
    json_t *j = bt_api_error_json(&e);
    json_object_set_new(j, "status", json_string(phase == LOADING ? "loading" : "unavailable"));
    return send_json(c, 503, j, "1");
}

/* ---- metrics ---- */

static void put(char **s, size_t *n, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void put(char **s, size_t *n, size_t *cap, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = *s ? vsnprintf(*s + *n, *cap - *n, fmt, ap) : -1;
        va_end(ap);
        if (k >= 0 && *n + (size_t)k < *cap) {
            *n += (size_t)k;
            return;
        }
        size_t c = *cap ? 2 * *cap : 8192;
        char *t = realloc(*s, c);
        if (t == NULL)
            return;
        *s = t, *cap = c;
    }
}

static void put_hist(char **s, size_t *n, size_t *cap, const char *name, const char *help,
                     const hist_t *h)
{
    put(s, n, cap, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t acc = 0;
    for (int k = 0; k <= N_BUCKETS; k++) {
        acc += h->count[k];
        if (k < N_BUCKETS)
            put(s, n, cap, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[k], (unsigned long long)acc);
        else
            put(s, n, cap, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)acc);
    }
    put(s, n, cap, "%s_sum %.6f\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->n);
}

static enum MHD_Result serve_metrics(struct MHD_Connection *c)
{
    char *s = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&srv.mu);
    put(&s, &n, &cap, "# HELP baton_requests_total Requests by endpoint and outcome.\n"
                      "# TYPE baton_requests_total counter\n");
    for (int e = 0; e < N_EP; e++)
        for (int k = 0; k < N_OUT; k++)
            put(&s, &n, &cap, "baton_requests_total{endpoint=\"%s\",outcome=\"%s\"} %llu\n",
                endpoint_names[e], outcome_names[k], (unsigned long long)srv.requests[e][k]);
    put(&s, &n, &cap,
        "# HELP baton_prompt_tokens_total Prompt tokens of admitted requests.\n"
        "# TYPE baton_prompt_tokens_total counter\nbaton_prompt_tokens_total %llu\n"
        "# HELP baton_prompt_tokens_cached_total Prompt tokens a slot's cache already held "
        "(not computed again).\n"
        "# TYPE baton_prompt_tokens_cached_total counter\nbaton_prompt_tokens_cached_total %lld\n"
        "# HELP baton_generated_tokens_total Tokens handed to clients.\n"
        "# TYPE baton_generated_tokens_total counter\nbaton_generated_tokens_total %llu\n"
        "# HELP baton_queue_depth Requests waiting for a slot.\n"
        "# TYPE baton_queue_depth gauge\nbaton_queue_depth %d\n"
        "# HELP baton_slots_busy Slots serving a request.\n"
        "# TYPE baton_slots_busy gauge\nbaton_slots_busy %d\n"
        "# HELP baton_slots_total Slots (--parallel).\n"
        "# TYPE baton_slots_total gauge\nbaton_slots_total %d\n"
        "# HELP baton_micro_batches_total Micro-batches through the pipeline.\n"
        "# TYPE baton_micro_batches_total counter\nbaton_micro_batches_total %d\n",
        (unsigned long long)srv.prompt_tokens, (long long)srv.stats.n_reused,
        (unsigned long long)srv.gen_tokens, srv.n_queued,
        srv.n_active, srv.o.parallel, srv.stats.n_mb);
    put_hist(&s, &n, &cap, "baton_time_to_first_token_seconds",
             "From the request's arrival to its first token.", &srv.ttft);
    put_hist(&s, &n, &cap, "baton_inter_token_seconds", "Between a request's tokens.",
             &srv.itl);
    const double up = srv.t_serve > 0 ? bt_now() - srv.t_serve : 0.0;
    const int n_busy = srv.pipe.n_stages < BT_SERVE_MAX_STAGES ? srv.pipe.n_stages
                                                               : BT_SERVE_MAX_STAGES;
    put(&s, &n, &cap,
        "# HELP baton_stage_busy_seconds_total Seconds a stage spent computing (the last one "
        "also sampling), as of its latest report.\n"
        "# TYPE baton_stage_busy_seconds_total counter\n");
    for (int k = 0; k < n_busy; k++)
        put(&s, &n, &cap, "baton_stage_busy_seconds_total{stage=\"%d\"} %.6f\n", k,
            srv.stats.busy[k]);
    put(&s, &n, &cap,
        "# HELP baton_stage_busy_share Busy seconds over seconds serving, per stage.\n"
        "# TYPE baton_stage_busy_share gauge\n");
    for (int k = 0; k < n_busy; k++)
        put(&s, &n, &cap, "baton_stage_busy_share{stage=\"%d\"} %.4f\n", k,
            up > 0 ? srv.stats.busy[k] / up : 0.0);
    pthread_mutex_unlock(&srv.mu);
    if (s == NULL)
        return MHD_NO;
    return send_text(c, 200, "text/plain; version=0.0.4", s, n, NULL);
}

/* ---- the HTTP side: routing ---- */

static bool key_ok(const char *auth)
{
    const char *key = srv.o.api_key;
    if (key == NULL)
        return true;
    if (auth == NULL || strncmp(auth, "Bearer ", 7) != 0)
        return false;
    auth += 7;
    const size_t a = strlen(auth), b = strlen(key);
    unsigned char d = a != b;
    for (size_t i = 0; i < b; i++) /* the same work whatever the key given */
        d |= (unsigned char)(key[i] ^ (i < a ? auth[i] : 0));
    return d == 0;
}

typedef struct route {
    const char *path, *method;
    int endpoint;
} route_t;

static const route_t routes[] = {
    {"/v1/chat/completions", "POST", EP_CHAT}, {"/chat/completions", "POST", EP_CHAT},
    {"/v1/completions", "POST", EP_COMPLETIONS}, {"/completions", "POST", EP_COMPLETIONS},
    {"/tokenize", "POST", EP_TOKENIZE},     {"/detokenize", "POST", EP_DETOKENIZE},
    {"/v1/models", "GET", EP_MODELS},       {"/models", "GET", EP_MODELS},
    {"/health", "GET", EP_HEALTH},          {"/metrics", "GET", EP_METRICS},
};

/* The route of url and method; NULL when none (*path_known: the path is
 * one, with another method). */
static const route_t *find_route(const char *url, const char *method, bool *path_known)
{
    const route_t *rt = NULL;
    *path_known = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(url, routes[i].path) == 0) {
            *path_known = true;
            if (strcmp(method, routes[i].method) == 0)
                rt = &routes[i];
        }
    return rt;
}

/* The first call of a request: its route, key and declared size. An
 * answer queued here ends the request (its body, if any, is not read). */
static enum MHD_Result first_call(struct MHD_Connection *c, conn_t *cx, const char *url,
                                  const char *method)
{
    bool path_known;
    const route_t *rt = find_route(url, method, &path_known);
    cx->endpoint = rt ? rt->endpoint : EP_OTHER;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    cx->fd = ci ? ci->connect_fd : -1;
    if (rt == NULL && path_known)
        return fail(c, EP_OTHER, 405, NULL, "%s is not allowed on %s", method, url);
    if (rt == NULL)
        return fail(c, EP_OTHER, 404, NULL, "no endpoint %s %s (see /v1/models, "
                    "/v1/chat/completions, /v1/completions)", method, url);
    if (cx->endpoint != EP_HEALTH &&
        !key_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization")))
        return fail(c, cx->endpoint, 401, NULL, "a valid API key is required "
                    "(Authorization: Bearer KEY)");
    const char *len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (len != NULL && strtoull(len, NULL, 10) > (unsigned long long)srv.o.max_body)
        return fail(c, cx->endpoint, 413, NULL, "the body is %s bytes; at most %d (--max-body)",
                    len, srv.o.max_body);
    if (strcmp(method, "POST") == 0) { /* JSON; curl -d's default type is let through */
        const char *type = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
        if (type != NULL && strncasecmp(type, "multipart/", 10) == 0)
            return fail(c, cx->endpoint, 415, NULL, "Content-Type is '%s'; send "
                        "application/json", type);
    }
    pthread_mutex_lock(&srv.mu);
    const int phase = srv.phase;
    pthread_mutex_unlock(&srv.mu);
    if (phase != READY && cx->endpoint != EP_HEALTH && cx->endpoint != EP_METRICS)
        return fail(c, cx->endpoint, 503, NULL, "%s", phase == LOADING ? "loading the model"
                    : phase == DRAINING ? "the server is shutting down"
                                        : "the pipeline failed; the server is stopping");
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls)
{
    (void)cls, (void)version;
    conn_t *cx = *con_cls;
    if (cx == NULL) {
        if ((cx = calloc(1, sizeof *cx)) == NULL)
            return MHD_NO;
        cx->t0 = bt_now();
        *con_cls = cx;
        return first_call(c, cx, url, method);
    }
    if (*upload_size > 0) { /* a part of the body */
        if (bt_now() - cx->t0 > 2.0 * srv.o.timeout)
            return MHD_NO; /* a body dripping in: close the connection */
        if (!cx->too_big && cx->n_body + *upload_size <= (size_t)srv.o.max_body) {
            char *b = realloc(cx->body, cx->n_body + *upload_size + 1);
            if (b == NULL)
                return MHD_NO;
            memcpy(b + cx->n_body, upload, *upload_size);
            cx->body = b;
            cx->n_body += *upload_size;
            cx->body[cx->n_body] = '\0';
        } else {
            cx->too_big = true;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (cx->too_big)
        return fail(c, cx->endpoint, 413, NULL, "the body is larger than %d bytes (--max-body)",
                    srv.o.max_body);
    switch (cx->endpoint) {
    case EP_HEALTH: return serve_health(c);
    case EP_METRICS: return serve_metrics(c);
    case EP_MODELS: return serve_models(c);
    case EP_TOKENIZE: return serve_tokenize(c, cx);
    case EP_DETOKENIZE: return serve_detokenize(c, cx);
    default: return serve_completion(c, cx); /* EP_CHAT, EP_COMPLETIONS: first_call routed it */
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode why)
{
    (void)cls, (void)c, (void)why;
    conn_t *cx = *con_cls;
    if (cx != NULL) {
        free(cx->body);
        free(cx);
    }
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    if (bt_log_get_level() < BT_LOG_DEBUG)
        return;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    bt_log_debug("server: libmicrohttpd: %s", msg);
}

/* Listens on --host:--port (rank 0). */
static bt_status_t start_http(void)
{
    const options_t *o = &srv.o;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int rc = getaddrinfo(o->host, port, &hints, &ai);
    if (rc != 0) {
        bt_log_error("--host: '%s' is not an address of this machine: %s", o->host,
                     gai_strerror(rc));
        return BT_ERR_ARG;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    srv.daemon = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, on_request, NULL, MHD_OPTION_EXTERNAL_LOGGER,
        mhd_log, NULL, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_conn, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)64 * 1024, MHD_OPTION_THREAD_STACK_SIZE, (size_t)1 << 20,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (srv.daemon == NULL) {
        bt_log_error("cannot listen on %s port %d: %s (another server there, or no permission)",
                     o->host, o->port, strerror(errno));
        return BT_ERR_IO;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv.daemon, MHD_DAEMON_INFO_BIND_PORT);
    if (di != NULL)
        srv.o.port = di->port;
    return BT_OK;
}

/* ---- signals ---- */

static void on_signal(int sig)
{
    const int saved = errno;
    const char b = (char)sig;
    if (write(srv.sig_pipe[1], &b, 1) < 0) {
        /* nothing to do: a drain is under way already */
    }
    errno = saved;
}

/* SIGTERM and SIGINT: the first drains (no new requests; those in flight
 * get --drain-timeout seconds), the second cancels what is left. */
static void *signal_thread(void *arg)
{
    (void)arg;
    char b;
    int n_sig = 0;
    while (read(srv.sig_pipe[0], &b, 1) == 1) {
        if (b == 0)
            break; /* the run is over */
        pthread_mutex_lock(&srv.mu);
        if (srv.phase == READY || srv.phase == DRAINING) {
            srv.phase = DRAINING;
            srv.drain_deadline = ++n_sig > 1 ? bt_now() : bt_now() + srv.o.drain_timeout;
            pthread_cond_broadcast(&srv.engine_cv);
        }
        pthread_mutex_unlock(&srv.mu);
        bt_log_info("server: %s: %s", strsignal(b), n_sig > 1 ? "cancelling the requests left"
                    : "draining (no new requests; --drain-timeout for those in flight)");
    }
    return NULL;
}

static bt_status_t start_signals(pthread_t *th)
{
    if (pipe2(srv.sig_pipe, O_CLOEXEC) != 0 ||
        pthread_create(th, NULL, signal_thread, NULL) != 0) {
        bt_log_error("server: cannot set up signal handling: %s", strerror(errno));
        return BT_ERR_IO;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return BT_OK;
}

/* ---- the run ---- */

/* rank 0: the tokenizer, the chat template, the request tables. */
static bt_status_t setup_rank0(void)
{
    const options_t *o = &srv.o;
    bt_status_t st = bt_tokenizer_load(srv.pipe.model->gguf, &srv.tok);
    if (st != BT_OK)
        return st;
    const bool has_tok = bt_tokenizer_kind(srv.tok) != BT_TOKENIZER_NONE;
    bt_chat_format_t chat = o->chat_template ? bt_chat_format_by_name(o->chat_template)
                                             : bt_chat_format(srv.pipe.model->gguf);
    bt_gguf_str_t tpl;
    if (has_tok && chat == BT_CHAT_NONE &&
        bt_gguf_get_str(srv.pipe.model->gguf, "tokenizer.chat_template", &tpl) == BT_OK) {
        bt_log_error("%s: its chat template is not one baton knows (chatml, gemma, llama3); "
                     "say which with --chat-template NAME", o->r.model);
        return BT_ERR_ARG;
    }
    srv.template_system = bt_chat_template_system(srv.pipe.model->gguf);
    srv.api = (bt_api_ctx_t){.chat = chat, .system = srv.template_system,
                             .has_tokenizer = has_tok, .n_vocab = srv.n_vocab,
                             .sampling = o->r.sampling};
    srv.active = calloc((size_t)o->parallel, sizeof *srv.active);
    if (srv.active == NULL)
        return BT_ERR_NOMEM;
    srv.ttft.le = ttft_le;
    srv.itl.le = itl_le;
    srv.seed_state = o->r.seed_given ? o->r.sampling.seed
                                     : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    return BT_OK;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Waits (at most seconds) for the answers still being sent (rank 0). */
static void await_answers(double seconds)
{
    const double end = bt_now() + seconds;
    pthread_mutex_lock(&srv.mu);
    while (srv.n_live > 0 && bt_now() < end) {
        timed_wait(&srv.live_cv, 20);
    }
    pthread_mutex_unlock(&srv.mu);
}

/* Ends what is still waiting once the engine has stopped (rank 0). */
static void fail_all(void)
{
    pthread_mutex_lock(&srv.mu);
    for (srv_req_t *r = srv.head, *next; r != NULL; r = next) {
        next = r->next;
        req_done(r, NULL, true);
        req_unref(r);
    }
    srv.head = srv.tail = NULL;
    srv.n_queued = 0;
    pthread_mutex_unlock(&srv.mu);
}

static int run(MPI_Comm comm)
{
    const options_t *o = &srv.o;
    int rank;
    MPI_Comm_rank(comm, &rank);
    pthread_t sig_th;
    bool sig_started = false;
    bt_status_t st = BT_OK;
    if (rank == 0) {
        st = start_signals(&sig_th);
        sig_started = st == BT_OK;
        if (st == BT_OK)
            st = start_http();
    } else {
        signal(SIGTERM, SIG_IGN); /* rank 0 ends the stages once it has drained */
        signal(SIGINT, SIG_IGN);
    }
    st = bt_transport_agree(comm, st);
    bt_pipe_config_t cfg = {
        .model_path = o->r.model, .ratios = o->r.ratios, .n_ratios = o->r.n_ratios,
        .head_share = 0.5, .n_ctx = o->r.n_ctx, .n_slots = o->parallel, .max_tok = o->r.ubatch,
        .n_threads = o->r.threads, .ops = o->r.ops, .gpu = o->r.gpu, .gpu_given = o->r.gpu_given,
        .no_mmap = !o->r.mmap,
        .kv_type = (uint32_t)o->r.kv_type, .tp = o->r.tp, .tp_allreduce = o->r.tp_allreduce,
    };
    bool piped = false;
    if (st == BT_OK) {
        piped = bt_pipe_init(&srv.pipe, comm, &cfg) == BT_OK;
        st = piped ? BT_OK : BT_ERR_ARG; /* reported on every rank alike */
    }
    if (st == BT_OK) {
        srv.n_vocab = srv.pipe.model->hp.n_vocab;
        srv.slot_ctx = srv.pipe.fwd->n_ctx;
        srv.model_id = o->alias ? o->alias : base_name(o->r.model);
        st = bt_transport_agree(comm, rank == 0 ? setup_rank0() : BT_OK);
    }
    if (st == BT_OK && rank == 0) {
        char split[1024];
        bt_partition_str(srv.pipe.bounds, srv.pipe.n_stages, split, sizeof split);
        bt_log_info("%d stage%s: %s; --parallel %d requests of %d positions, chat template %s",
                    srv.pipe.n_stages, srv.pipe.n_stages > 1 ? "s" : "", split, o->parallel,
                    srv.slot_ctx, bt_chat_format_name(srv.api.chat));
        pthread_mutex_lock(&srv.mu);
        srv.phase = READY;
        srv.t_loaded = (double)time(NULL);
        srv.t_serve = bt_now();
        pthread_mutex_unlock(&srv.mu);
        const bool v6 = strchr(o->host, ':') != NULL;
        printf("baton-server: listening on http://%s%s%s:%d (model %s)\n", v6 ? "[" : "",
               o->host, v6 ? "]" : "", o->port, srv.model_id);
        fflush(stdout);
    }
    if (st == BT_OK) {
        bt_serve_config_t scfg = {.n_slots = o->parallel, .n_groups = o->groups,
                                  .ubatch = o->r.ubatch, .sync = !o->r.pipeline,
                                  .no_prompt_cache = o->no_cache_prompt};
        bt_serve_hooks_t hooks = {.next = hook_next, .token = hook_token, .finish = hook_finish,
                                  .wait = hook_wait, .cancelled = hook_cancelled,
                                  .logprobs = hook_logprobs, .progress = hook_progress};
        st = bt_pipe_serve(&srv.pipe, &scfg, &hooks, NULL);
        if (st != BT_OK && rank == 0) {
            bt_log_error("the pipeline failed (%s): answering 503 and stopping every rank",
                         bt_status_str(st));
            pthread_mutex_lock(&srv.mu);
            srv.phase = FATAL;
            for (int s = 0; s < o->parallel; s++)
                if (srv.active[s] != NULL) {
                    req_done(srv.active[s], NULL, true);
                    req_unref(srv.active[s]);
                    srv.active[s] = NULL;
                }
            pthread_mutex_unlock(&srv.mu);
            fail_all();
            await_answers(2.0);
            MHD_stop_daemon(srv.daemon);
            MPI_Abort(comm, 1);
        }
    }
    if (rank == 0) {
        fail_all();
        await_answers(5.0);
        if (srv.daemon != NULL)
            MHD_stop_daemon(srv.daemon); /* joins every connection's thread */
        if (sig_started) {
            const char end = 0;
            if (write(srv.sig_pipe[1], &end, 1) == 1)
                pthread_join(sig_th, NULL);
        }
        if (st == BT_OK)
            bt_log_info("server: stopped after %llu requests",
                        (unsigned long long)srv.serial);
    }
    if (piped)
        bt_pipe_free(&srv.pipe);
    bt_tokenizer_free(srv.tok);
    free(srv.template_system);
    free(srv.active);
    st = bt_transport_agree(comm, st);
    return st == BT_OK ? 0 : 1;
}

/* The key of --api-key-file: its first line. */
static bt_status_t read_key_file(options_t *o, char **key)
{
    *key = NULL;
    if (o->api_key_file == NULL)
        return BT_OK;
    FILE *f = fopen(o->api_key_file, "r");
    size_t cap = 0;
    ssize_t n = f ? getline(key, &cap, f) : -1;
    if (f)
        fclose(f);
    while (n > 0 && ((*key)[n - 1] == '\n' || (*key)[n - 1] == '\r'))
        (*key)[--n] = '\0';
    if (n <= 0) {
        bt_log_error("--api-key-file: cannot read a key from '%s'%s%s", o->api_key_file,
                     f ? "" : ": ", f ? "" : strerror(errno));
        free(*key);
        *key = NULL;
        return BT_ERR_ARG;
    }
    o->api_key = *key;
    return BT_OK;
}

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1)
        bt_log_set_rank(rank);
    bt_log_capture(1);
    char *key = NULL;
    bt_status_t st = parse_args(argc, argv, bt_default_threads(MPI_COMM_WORLD), size, &srv.o);
    if (st == BT_OK && !srv.o.help)
        st = read_key_file(&srv.o, &key);
    bt_log_flush_captured(rank == 0);
    bt_log_capture(0);
    int rc;
    if (st != BT_OK) {
        if (rank == 0)
            usage(stderr);
        rc = 2;
    } else if (srv.o.help) {
        if (rank == 0)
            usage(stdout);
        rc = 0;
    } else {
        if (srv.o.r.verbose)
            bt_log_set_level(BT_LOG_DEBUG);
        rc = run(MPI_COMM_WORLD);
    }
    free(key);
    bt_run_opts_free(&srv.o.r);
    MPI_Finalize();
    return rc;
}
