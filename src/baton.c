/*
 * baton: llama inference as a pipeline over MPI ranks.
 *   mpirun -np S baton -m MODEL.gguf -p "text" -n 64            text in, text out
 *   mpirun -np S baton -m MODEL.gguf --chat -p "question"         one chat turn
 *   mpirun -np S baton -m MODEL.gguf --chat -i                     chat on stdin
 *   mpirun -np S baton -m MODEL.gguf --tokens 1,2,3 -n 8           token ids in, ids out
 *   mpirun -np S baton -m MODEL.gguf --batch-file REQ.jsonl -o OUT.jsonl   many requests
 * Each rank owns a contiguous block of layers; the prompt is pipelined in
 * micro-batches and decode runs round the ring of ranks. Rank 0 streams the
 * text (or prints the ids) as tokens arrive. Also runs without mpirun as a
 * single rank.
 */
#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "batch.h"
#include "chat.h"
#include "kv_cache.h"
#include "runopts.h"
#include "sampler.h"
#include "stages/partition.h"
#include "stages/schedule.h"
#include "tokenizer.h"

typedef struct options {
    bt_run_opts_t r;     /* model, layout, kernels, cache, threads, sampling */
    const char *prompt;  /* -p text */
    int *tokens;         /* --tokens ids */
    int n_tokens;
    int n_predict;       /* -n; -1: not given */
    int batch;           /* -b */
    int chat, interactive;
    const char *system;
    int print_ids;
    const char *dump_logits;
    const char *trace;
    int help;
    const char *batch_file; /* --batch-file: requests as JSON lines (batch.h) */
    const char *output;  /* -o: the batch job's completions (default stdout) */
    int parallel;        /* --parallel; 0: not given */
    int groups;          /* --groups; 0: not given (automatic) */
} options_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: [mpirun -np S] baton -m MODEL.gguf (-p TEXT | --tokens IDS | -i) [options]\n"
            "       [mpirun -np S] baton -m MODEL.gguf --batch-file REQ.jsonl [-o OUT.jsonl]\n"
            "                      [--parallel P] [--groups G] [options]\n"
            "  -m, --model FILE          GGUF model (llama architecture)\n"
            "  -p, --prompt TEXT         prompt text (tokenized with the model's tokenizer)\n"
            "      --tokens LIST         prompt as comma-separated token ids (raw mode: greedy\n"
            "                            unless --temp is given, no stop at end-of-generation,\n"
            "                            -n decode steps, prints the N+1 chosen ids)\n"
            "  -n, --n-predict N         tokens to generate (default 128; --tokens: 16 steps)\n"
            "      --chat                wrap turns in the model's chat template (ChatML, Gemma)\n"
            "  -sys, --system-prompt T   system message for --chat (default: the template's)\n"
            "  -i, --interactive         read turns from stdin, keeping the KV cache\n"
            "      --temp T              temperature (default 0.8; 0 = greedy)\n"
            "      --top-k N             (default 40; 0 = off)\n"
            "      --top-p P             (default 0.95; 1 = off)\n"
            "      --min-p P             (default 0.05; 0 = off)\n"
            "      --repeat-penalty R    (default 1.0 = off)\n"
            "      --repeat-last-n N     tokens the penalty looks at (default 64)\n"
            "  -s, --seed N              sampling seed (default: random)\n"
            "      --print-token-ids     after the text, the generated ids on one line\n"
            "  -c, --ctx-size N          context length (default: --tokens prompt + N; text: the\n"
            "                            model's, at most 4096)\n"
            "  -b, --batch-size N        logical batch: prompt tokens per prefill call (2048)\n"
            "  -ub, --ubatch-size N      micro-batch: tokens per pipeline step (512; with\n"
            "                            --batch-file 64: prompt chunks that join decode steps)\n"
            "      --pipeline 0|1        1: GPipe prefill (default); 0: one micro-batch at a time\n"
            "  -ts, --tensor-split R,R   layer proportions per stage (default: balance cost)\n"
            "  -sm, --split-mode M       layer: stages of layers (default); tensor: all ranks one\n"
            "                            stage that splits every layer's tensors (--pipeline 0)\n"
            "  -tp, --tensor-parallel T  T tensor ranks per stage: np = stages x T; stage s is\n"
            "                            ranks s*T .. s*T+T-1 (keep them on one node)\n"
            "      --tp-comm gather|allreduce  how tensor ranks combine: gather (default): whole\n"
            "                            outputs, the bits of one rank; allreduce: partial sums\n"
            "                            of attn_output and ffn_down added (fewer bytes for\n"
            "                            slow links; golden tolerances, not one rank's bits)\n"
            "  -t, --threads N           OpenMP threads per rank (default: cores / ranks per node)\n"
            "      --dump-logits FILE    raw little-endian f32 rows of n_vocab per position\n"
            "      --trace FILE.json     Chrome trace of every rank's micro-batches (Perfetto)\n"
            "      --kernels cpu|exact|ref|cuda|auto|cuda-host  cpu: fast, 8-bit activations for\n"
            "                            the quantized formats as llama.cpp (default); exact:\n"
            "                            fast, f32 activations; ref: the scalar reference\n"
            "                            (slow); cuda: a GPU (--with-cuda builds); auto: cuda\n"
            "                            where the rank's node has a GPU, else cpu; cuda-host:\n"
            "                            the cuda set's arithmetic on the CPU (slow)\n"
            "      --gpu N               cuda ranks take device N (default: local rank mod\n"
            "                            the node's devices; CUDA_VISIBLE_DEVICES applies)\n"
            "      --kv-type f32|f16     KV cache elements (default f32; f16 halves its memory)\n"
            "      --mmap 0|1            1: map the weights from the file (default); 0: read\n"
            "                            this rank's weights into memory (--no-mmap)\n"
            "      --batch-file FILE     requests as JSON lines, one completion line each\n"
            "                            (docs/usage.md, Batch jobs)\n"
            "  -o, --output FILE         --batch-file: where the completions go (default stdout)\n"
            "      --parallel N          --batch-file: sequences at once, each with its own\n"
            "                            -c positions of KV cache (default 8)\n"
            "      --groups N            --batch-file: decode groups the sequences spread over\n"
            "                            (default: one per stage)\n"
            "  -v, --verbose             more logging\n"
            "  -h, --help                this text\n");
}

enum {
    OPT_TOKENS = BT_RUN_OPT_END, OPT_DUMP, OPT_TRACE, OPT_CHAT, OPT_SYS, OPT_IDS, OPT_BATCH,
    OPT_PARALLEL, OPT_GROUPS,
};

static bt_status_t parse_args(int argc, char **argv, int default_threads, int n_ranks,
                              options_t *o)
{
    static const struct option longopts[] = {
        BT_RUN_LONGOPTS,
        {"prompt", required_argument, 0, 'p'},
        {"tokens", required_argument, 0, OPT_TOKENS},
        {"n-predict", required_argument, 0, 'n'},
        {"chat", no_argument, 0, OPT_CHAT},
        {"system-prompt", required_argument, 0, OPT_SYS},
        {"interactive", no_argument, 0, 'i'},
        {"print-token-ids", no_argument, 0, OPT_IDS},
        {"batch-size", required_argument, 0, 'b'},
        {"dump-logits", required_argument, 0, OPT_DUMP},
        {"trace", required_argument, 0, OPT_TRACE},
        {"batch-file", required_argument, 0, OPT_BATCH},
        {"output", required_argument, 0, 'o'},
        {"parallel", required_argument, 0, OPT_PARALLEL},
        {"groups", required_argument, 0, OPT_GROUPS},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    static const char *const own[][2] = {{"-sys", "--system-prompt"}};
    *o = (options_t){.n_predict = -1, .batch = 2048};
    bt_run_opts_init(&o->r, default_threads, 512);
    bt_run_normalize_argv(argc, argv, own, 1);
    opterr = 0;
    int c;
    bt_status_t st = BT_OK;
    while (st == BT_OK &&
           (c = getopt_long(argc, argv, ":" BT_RUN_SHORTOPTS "p:n:ib:o:h", longopts, NULL)) != -1) {
        bool handled;
        if ((st = bt_run_opt(c, optarg, &o->r, &handled)) != BT_OK || handled)
            continue;
        switch (c) {
        case 'p': o->prompt = optarg; break;
        case OPT_TOKENS:
            free(o->tokens);
            o->tokens = NULL;
            st = bt_parse_int_list("--tokens", optarg, 0, INT32_MAX, &o->tokens, &o->n_tokens);
            break;
        case 'n': st = bt_parse_int("-n", optarg, 0, 1 << 24, &o->n_predict); break;
        case OPT_CHAT: o->chat = 1; break;
        case OPT_SYS: o->system = optarg; break;
        case 'i': o->interactive = 1; break;
        case OPT_IDS: o->print_ids = 1; break;
        case 'b': st = bt_parse_int("-b", optarg, 1, 1 << 24, &o->batch); break;
        case OPT_DUMP: o->dump_logits = optarg; break;
        case OPT_TRACE: o->trace = optarg; break;
        case OPT_BATCH: o->batch_file = optarg; break;
        case 'o': o->output = optarg; break;
        case OPT_PARALLEL: st = bt_parse_int("--parallel", optarg, 1, 4096, &o->parallel); break;
        case OPT_GROUPS: st = bt_parse_int("--groups", optarg, 1, 4096, &o->groups); break;
        case 'h': o->help = 1; return BT_OK;
        default: st = bt_getopt_error(c, argv); break;
        }
    }
    if (st != BT_OK)
        return st;
    const char *bad = NULL;
    if (optind < argc)
        bt_log_error("unexpected argument '%s'", argv[optind]), bad = "";
    else if (o->r.model == NULL)
        bad = "no model given (-m FILE)";
    else if (o->batch_file != NULL && (o->tokens || o->prompt || o->interactive || o->chat ||
                                        o->system || o->print_ids || o->trace))
        bad = "--batch-file takes its prompts from the file: it cannot be combined with -p, "
              "--tokens, -i, --chat, -sys, --print-token-ids or --trace";
    else if (o->batch_file == NULL && (o->output || o->parallel || o->groups))
        bad = "-o, --parallel and --groups need --batch-file";
    else if (o->tokens == NULL && o->prompt == NULL && !o->interactive && !o->batch_file)
        bad = "no prompt given (-p TEXT, --tokens ID,ID,..., -i or --batch-file FILE)";
    else if (o->tokens != NULL && (o->prompt != NULL || o->chat || o->interactive))
        bad = "--tokens (raw ids) cannot be combined with -p, --chat or -i";
    else if (o->system != NULL && !o->chat)
        bad = "-sys needs --chat";
    else if (o->dump_logits != NULL && o->interactive)
        bad = "--dump-logits cannot be combined with -i";
    if (bad == NULL && bt_run_opts_check(&o->r, n_ranks) != BT_OK)
        bad = "";
    if (bad == NULL && o->r.ubatch > o->batch) {
        bt_log_error("-ub %d is larger than -b %d", o->r.ubatch, o->batch);
        bad = "";
    }
    if (bad != NULL) {
        if (*bad)
            bt_log_error("%s", bad);
        return BT_ERR_ARG;
    }
    if (o->n_predict < 0)
        o->n_predict = o->tokens != NULL ? 16 : 128;
    if (o->batch_file != NULL && o->n_predict < 1) {
        bt_log_error("-n 0: a batch request generates at least one token");
        return BT_ERR_ARG;
    }
    if (o->batch_file != NULL && o->parallel == 0)
        o->parallel = BT_BATCH_DEFAULT_PARALLEL;
    if (o->batch_file != NULL && !o->r.ubatch_given)
        o->r.ubatch = BT_BATCH_DEFAULT_UBATCH;
    if (o->tokens != NULL && !o->r.temp_given)
        o->r.sampling.temp = 0.0f; /* raw ids mode is greedy unless asked */
    if (o->r.n_ctx > 0 && o->tokens != NULL && o->r.n_ctx < o->n_tokens + o->n_predict) {
        bt_log_error("--ctx-size %d is smaller than the prompt (%d) plus -n (%d)", o->r.n_ctx,
                     o->n_tokens, o->n_predict);
        return BT_ERR_ARG;
    }
    return BT_OK;
}

/* ---- the run ---- */

typedef struct run_state {
    const options_t *o;
    MPI_Comm comm;
    bt_pipe_t pipe;
    bt_tokenizer_t *tok;
    bt_sampler_t *sampler;
    bt_detok_t *detok;
    bt_chat_format_t chat; /* --chat: the model's format */
    FILE *dump;
    int pos;            /* next free position in the KV cache */
    /* rank 0: the generation in progress */
    int32_t *gen;       /* generated ids of this run (all turns) */
    int n_gen, cap_gen;
    int turn_tokens;    /* tokens generated in the current turn */
    int turn_limit;
    bool text;          /* stream text (else print ids at the end) */
    bool stop_at_eog;
    bool ended_on_eog;
    bool gen_failed;    /* the generated ids could not be kept (no memory) */
    /* timings */
    double t_prompt, t_gen;
    int n_prompt_tok, n_decode;
} run_state_t;

static bt_status_t write_rows(void *arg, const float *rows, int n_rows, int pos0)
{
    run_state_t *r = arg;
    (void)pos0;
    if (r->dump == NULL)
        return BT_OK;
    size_t n_vocab = (size_t)r->pipe.model->hp.n_vocab;
    if (fwrite(rows, sizeof(float) * n_vocab, (size_t)n_rows, r->dump) != (size_t)n_rows) {
        bt_log_error("--dump-logits: writing '%s' failed", r->o->dump_logits);
        return BT_ERR_IO;
    }
    return BT_OK;
}

/* Rank 0, for every chosen token: record, print, decide whether to go on. */
static bool on_token(void *arg, int32_t id)
{
    run_state_t *r = arg;
    if (r->stop_at_eog && bt_tokenizer_is_eog(r->tok, id)) {
        r->ended_on_eog = true;
        return false;
    }
    if (r->n_gen == r->cap_gen) {
        int cap = r->cap_gen ? 2 * r->cap_gen : 256;
        int32_t *g = realloc(r->gen, sizeof *g * (size_t)cap);
        if (g == NULL) { /* stop here; turn() reports it */
            r->gen_failed = true;
            return false;
        }
        r->gen = g, r->cap_gen = cap;
    }
    r->gen[r->n_gen++] = id;
    r->turn_tokens++;
    if (r->text) {
        const char *s;
        size_t len;
        if (bt_detok_push(r->detok, id, &s, &len) == BT_OK && len > 0) {
            fwrite(s, 1, len, stdout);
            fflush(stdout);
        }
    }
    return r->turn_tokens < r->turn_limit;
}

/* Runs prompt ids through the pipeline (logical batches of -b, micro-batches
 * of -ub), then generates until on_token stops it. ids are read on every
 * rank (for the sampler's history), n_limit is the most tokens to choose. */
static bt_status_t turn(run_state_t *r, const int32_t *ids, int n, int n_limit)
{
    const options_t *o = r->o;
    bt_pipe_t *p = &r->pipe;
    const bt_pipe_mode_t mode = o->r.pipeline ? BT_PIPE_GPIPE : BT_PIPE_SYNC;
    /* the last chosen token is not fed, so it needs no position */
    if (r->pos + n + (n_limit > 0 ? n_limit - 1 : 0) > p->fwd->n_ctx) {
        if (p->world_rank == 0)
            bt_log_error("the prompt (%d tokens) and %d more do not fit the context: %d of %d "
                         "positions used (raise --ctx-size)",
                         n, n_limit, r->pos, p->fwd->n_ctx);
        return BT_ERR_ARG;
    }
    for (int i = 0; i < n && r->sampler; i++)
        bt_sampler_accept(r->sampler, ids[i]);
    bt_status_t st = BT_OK;
    int32_t first = -1;
    double t0 = bt_now();
    for (int i = 0; i < n && st == BT_OK; i += o->batch) {
        int nb = n - i < o->batch ? n - i : o->batch;
        st = bt_pipe_prefill(p, ids + i, nb, r->pos + i, o->r.ubatch < nb ? o->r.ubatch : nb, mode,
                             write_rows, r, &first);
    }
    double t1 = bt_now();
    r->pos += n;
    r->turn_tokens = 0;
    r->turn_limit = n_limit;
    r->ended_on_eog = false;
    int steps = 0;
    if (st == BT_OK && n_limit > 0)
        st = bt_pipe_generate(p, first, r->pos, n_limit, on_token, write_rows, r, &steps);
    if (st == BT_OK && r->gen_failed) {
        bt_log_error("cannot keep more than %d generated tokens: out of memory", r->n_gen);
        st = BT_ERR_NOMEM;
    }
    r->pos += steps;
    r->t_prompt += t1 - t0;
    r->t_gen += bt_now() - t1;
    r->n_prompt_tok += n;
    r->n_decode += steps;
    return st;
}

/* ---- text and chat ---- */

/* The text of one user turn: the model's chat template around it for
 * --chat (the system message on the first turn, closing the previous reply
 * on later ones). */
static char *turn_text(const run_state_t *r, const char *msg, const char *system, bool first)
{
    return r->o->chat ? bt_chat_turn(r->chat, msg, system, first) : strdup(msg);
}

/* Rank 0 reads one line of stdin (without the newline); every rank gets it.
 * *msg is NULL at end of input. */
static bt_status_t read_turn(run_state_t *r, char **msg)
{
    long len = -1;
    char *line = NULL;
    if (r->pipe.world_rank == 0) {
        size_t cap = 0;
        fputs("\n> ", stdout);
        fflush(stdout);
        ssize_t n = getline(&line, &cap, stdin);
        if (n >= 0) {
            while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                line[--n] = '\0';
            len = n;
        }
    }
    bt_status_t st = bt_pipe_bcast(&r->pipe, &len, sizeof len);
    if (st == BT_OK && len >= 0) {
        if (r->pipe.world_rank != 0 && (line = malloc((size_t)len + 1)) != NULL)
            line[len] = '\0';
        st = line == NULL ? BT_ERR_NOMEM : bt_pipe_bcast(&r->pipe, line, (int)len);
    }
    if (st != BT_OK || len < 0) {
        free(line);
        line = NULL;
    }
    *msg = line;
    return st;
}

/* -p, --chat and -i: tokenize each turn (every rank alike), generate,
 * stream the text. A reply cut by -n leaves its last token unfed: it goes
 * in front of the next turn. */
static bt_status_t run_text(run_state_t *r)
{
    const options_t *o = r->o;
    bt_pipe_t *p = &r->pipe;
    bt_status_t st = bt_detok_init(r->tok, 0, &r->detok);
    char *system = NULL;
    if (st == BT_OK && o->chat)
        system = o->system ? strdup(o->system) : bt_chat_template_system(p->model->gguf);
    r->text = true;
    r->stop_at_eog = true;
    bool first_turn = true;
    int32_t pending = -1;
    const char *next_msg = o->prompt;
    while (st == BT_OK) {
        char *line = NULL;
        if (next_msg == NULL) {
            if (!o->interactive || (st = read_turn(r, &line)) != BT_OK || line == NULL)
                break;
            next_msg = line;
        }
        char *text = turn_text(r, next_msg, system, first_turn);
        int32_t *ids = NULL;
        int n = 0;
        if (text == NULL)
            st = BT_ERR_NOMEM;
        else
            st = bt_tokenizer_encode(r->tok, text, strlen(text), first_turn, true, &ids, &n);
        if (st == BT_OK && pending >= 0) { /* the unfed token of the last reply first */
            int32_t *with = malloc(sizeof *with * (size_t)(n + 1));
            if (with == NULL) {
                st = BT_ERR_NOMEM;
            } else {
                with[0] = pending;
                memcpy(with + 1, ids, sizeof *ids * (size_t)n);
                free(ids);
                ids = with, n++;
            }
        }
        if (st == BT_OK && n == 0) {
            if (p->world_rank == 0)
                bt_log_error("the prompt is empty after tokenization");
            st = BT_ERR_ARG;
        }
        if (st == BT_OK)
            st = turn(r, ids, n, o->n_predict);
        free(ids);
        free(text);
        free(line);
        next_msg = NULL;
        first_turn = false;
        if (p->world_rank == 0 && st == BT_OK) {
            const char *rest;
            size_t len;
            bt_detok_flush(r->detok, &rest, &len);
            fwrite(rest, 1, len, stdout);
            fputc('\n', stdout);
            fflush(stdout);
        }
        /* every rank tracks the pending token: rank 0 shares it */
        int32_t last[2] = {r->ended_on_eog, r->n_gen > 0 ? r->gen[r->n_gen - 1] : -1};
        if (st == BT_OK)
            st = bt_pipe_bcast(p, last, sizeof last);
        pending = st == BT_OK && !last[0] && last[1] >= 0 ? last[1] : -1;
        if (!o->interactive)
            break;
    }
    free(system);
    return st;
}

/* --tokens: the ids as given, -n decode steps, no stop at end-of-generation. */
static bt_status_t run_ids(run_state_t *r)
{
    r->text = false;
    r->stop_at_eog = false;
    return turn(r, r->o->tokens, r->o->n_tokens, r->o->n_predict + 1);
}

static void print_results(const run_state_t *r)
{
    const options_t *o = r->o;
    if (!r->text || o->print_ids) {
        const char *sep = r->text ? "," : " "; /* --print-token-ids: commas; --tokens: spaces */
        for (int i = 0; i < r->n_gen; i++)
            printf("%s%d", i ? sep : "", r->gen[i]);
        printf("\n");
    }
    fflush(stdout);
    double pt = r->t_prompt * 1e3, gt = r->t_gen * 1e3;
    bt_log_info("prompt eval time = %9.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per "
                "second)",
                pt, r->n_prompt_tok, r->n_prompt_tok ? pt / r->n_prompt_tok : 0.0,
                pt > 0 ? 1e3 * r->n_prompt_tok / pt : 0.0);
    bt_log_info("       eval time = %9.2f ms / %5d runs   (%8.2f ms per token, %8.2f tokens per "
                "second)",
                gt, r->n_decode, r->n_decode ? gt / r->n_decode : 0.0,
                gt > 0 ? 1e3 * r->n_decode / gt : 0.0);
    bt_log_info("%d stage%s x %d tensor rank%s x %d threads, -ub %d, pipeline %d, %s kernels (%s)",
                r->pipe.n_stages, r->pipe.n_stages > 1 ? "s" : "", r->pipe.tp_size,
                r->pipe.tp_size > 1 ? "s" : "", o->r.threads, o->r.ubatch, o->r.pipeline,
                r->pipe.ops->name,
                r->pipe.device >= 0 ? bt_device_default->name()
                : r->pipe.ops == &bt_ops_ref || r->pipe.ops == &bt_ops_cuda_host
                    ? "scalar"
                    : bt_isa_name(bt_isa_active()));
}

/* Checks every rank makes alike (so they fail together), then the run. */
static bt_status_t prepare(run_state_t *r)
{
    const options_t *o = r->o;
    bt_pipe_t *p = &r->pipe;
    bt_status_t st = bt_tokenizer_load(p->model->gguf, &r->tok);
    const int n_vocab = p->model->hp.n_vocab;
    for (int i = 0; st == BT_OK && o->tokens && i < o->n_tokens; i++)
        if (o->tokens[i] >= n_vocab) {
            if (p->world_rank == 0)
                bt_log_error("--tokens: id %d at index %d is outside the vocabulary (0..%d)",
                             o->tokens[i], i, n_vocab - 1);
            st = BT_ERR_ARG;
        }
    if (st == BT_OK && o->tokens == NULL && bt_tokenizer_kind(r->tok) == BT_TOKENIZER_NONE) {
        if (p->world_rank == 0)
            bt_log_error("%s has no tokenizer (tokenizer.ggml.model is 'none'): give the prompt "
                         "as --tokens ID,ID,...", o->r.model);
        st = BT_ERR_UNSUPPORTED;
    }
    r->chat = bt_chat_format(p->model->gguf);
    if (st == BT_OK && o->chat && r->chat == BT_CHAT_NONE) {
        if (p->world_rank == 0)
            bt_log_error("--chat: %s has no chat template baton knows (tokenizer.chat_template "
                         "absent or neither ChatML <|im_start|> nor Gemma <start_of_turn>, and "
                         "the architecture is not gemma3)", o->r.model);
        st = BT_ERR_UNSUPPORTED;
    }
    /* one seed for all: rank 0 draws it unless given */
    bt_sampler_params_t sp = o->r.sampling;
    if (!o->r.seed_given)
        sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    if (st == BT_OK)
        st = bt_pipe_bcast(p, &sp.seed, sizeof sp.seed);
    if (st == BT_OK && p->last && !p->follower)
        st = bt_sampler_init(&sp, n_vocab, &r->sampler);
    if (st == BT_OK && p->last && !p->follower && o->dump_logits != NULL &&
        (r->dump = fopen(o->dump_logits, "wb")) == NULL) {
        bt_log_error("--dump-logits: cannot create '%s'", o->dump_logits);
        st = BT_ERR_IO;
    }
    p->sampler = r->sampler;
    if (p->world_rank == 0 && o->r.verbose)
        bt_log_info("sampling: temp %g, top-k %d, top-p %g, min-p %g, repeat penalty %g over %d, "
                    "seed %llu", sp.temp, sp.top_k, sp.top_p, sp.min_p, sp.repeat_penalty,
                    sp.repeat_last_n, (unsigned long long)sp.seed);
    return bt_transport_agree(r->comm, st);
}

static int run(const options_t *o, MPI_Comm comm)
{
    run_state_t r = {.o = o, .comm = comm};
    /* the cache: exactly what a --tokens run needs; for text, where the
     * prompt length is known later, 0 lets the pipe take the model's context
     * (at most BT_DEFAULT_CTX) */
    int ubatch = o->r.ubatch;
    int n_ctx = o->r.n_ctx;
    if (o->tokens != NULL) {
        ubatch = o->r.ubatch < o->n_tokens ? o->r.ubatch : o->n_tokens;
        if (n_ctx == 0)
            n_ctx = o->n_tokens + o->n_predict;
    }
    bt_pipe_config_t cfg = {
        .model_path = o->r.model,
        .ratios = o->r.ratios,
        .n_ratios = o->r.n_ratios,
        .head_share = o->tokens ? (double)(o->n_predict + 1) / (o->n_tokens + o->n_predict) : 0.5,
        .n_ctx = n_ctx,
        .max_tok = ubatch,
        .n_threads = o->r.threads,
        .ops = o->r.ops, .gpu = o->r.gpu, .gpu_given = o->r.gpu_given,
        .all_logits = o->dump_logits != NULL,
        .trace_events = o->trace || o->r.verbose ? 1 << 16 : 0,
        .no_mmap = !o->r.mmap,
        .kv_type = (uint32_t)o->r.kv_type,
        .tp = o->r.tp,
        .tp_allreduce = o->r.tp_allreduce,
    };
    if (bt_pipe_init(&r.pipe, comm, &cfg) != BT_OK)
        return 1;
    bt_pipe_t *p = &r.pipe;
    if (p->world_rank == 0) {
        char split[1024];
        bt_partition_str(p->bounds, p->n_stages, split, sizeof split);
        bt_log_info("%d stage%s: %s", p->n_stages, p->n_stages > 1 ? "s" : "", split);
    }
    bt_status_t st = prepare(&r);
    if (st == BT_OK) {
        bt_pipe_trace_start(p);
        st = o->tokens != NULL ? run_ids(&r) : run_text(&r);
        if (st == BT_ERR_ARG) {
            /* a checked condition every rank met alike (the context is full) */
        } else if (st != BT_OK) {
            bt_log_error("generation failed (%s); stopping every rank", bt_status_str(st));
            MPI_Abort(comm, 1);
        }
        if (p->world_rank == 0 && st == BT_OK)
            print_results(&r);
        int n_mb = o->tokens ? (o->n_tokens + ubatch - 1) / ubatch : 1;
        if (o->trace != NULL || o->r.verbose) {
            bt_status_t ts = bt_pipe_trace_report(p, o->trace, n_mb, true);
            st = st == BT_OK ? ts : st;
        }
        bt_pipe_report_memory(p);
    }
    if (r.dump != NULL && fclose(r.dump) != 0) {
        bt_log_error("--dump-logits: closing '%s' failed", o->dump_logits);
        st = BT_ERR_IO;
    }
    st = bt_transport_agree(comm, st);
    free(r.gen);
    bt_detok_free(r.detok);
    bt_sampler_free(r.sampler);
    bt_tokenizer_free(r.tok);
    bt_pipe_free(p);
    return st == BT_OK ? 0 : 1;
}

/* --batch-file: the options as the batch frontend takes them (batch.h). */
static bt_batch_options_t batch_options(const options_t *o)
{
    return (bt_batch_options_t){
        .model = o->r.model, .path = o->batch_file, .output = o->output,
        .dump_prefix = o->dump_logits, .n_parallel = o->parallel, .n_groups = o->groups,
        .n_predict = o->n_predict, .n_ctx = o->r.n_ctx, .ubatch = o->r.ubatch, .sync = !o->r.pipeline,
        .threads = o->r.threads, .ratios = o->r.ratios, .n_ratios = o->r.n_ratios, .ops = o->r.ops,
        .gpu = o->r.gpu, .gpu_given = o->r.gpu_given,
        .no_mmap = !o->r.mmap, .kv_type = (uint32_t)o->r.kv_type, .sampling = o->r.sampling,
        .seed_given = o->r.seed_given, .tp = o->r.tp, .tp_allreduce = o->r.tp_allreduce,
    };
}

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1)
        bt_log_set_rank(rank);
    options_t o;
    /* every rank parses the same command line; rank 0 reports */
    bt_log_capture(1);
    bt_status_t st = parse_args(argc, argv, bt_default_threads(MPI_COMM_WORLD), size, &o);
    bt_batch_options_t bo = batch_options(&o);
    if (st == BT_OK && o.batch_file != NULL)
        st = bt_batch_check_options(&bo);
    bt_log_flush_captured(rank == 0);
    bt_log_capture(0);
    int rc;
    if (st != BT_OK) {
        if (rank == 0)
            usage(stderr);
        rc = 2;
    } else if (o.help) {
        if (rank == 0)
            usage(stdout);
        rc = 0;
    } else {
        if (o.r.verbose)
            bt_log_set_level(BT_LOG_DEBUG);
        rc = o.batch_file ? bt_batch_run(&bo, MPI_COMM_WORLD) : run(&o, MPI_COMM_WORLD);
    }
    free(o.tokens);
    bt_run_opts_free(&o.r);
    MPI_Finalize();
    return rc;
}
